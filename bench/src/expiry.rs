//! Scenario 3: expiry hand-off. A holder takes the lock with a short lease and never releases;
//! a waiter is queued behind it. How long after the lease ends is the waiter granted?
//!
//! Both ends are read on the server's clock. Lease end: the key's `PEXPIRETIME` T, the absolute
//! millisecond Redis stored for the lease the holder set. Redis treats the key as alive through
//! that millisecond (`keyIsExpired`: expired once its millisecond clock is past T), and a
//! Redisson script run at T still sees the holder: the first moment any protocol may grant is
//! T + 1 ms, when the server itself considers the key expired. Both figures are reported: from
//! T (the floor of 1 ms is the server's, not the protocol's), and from T + 1 ms (what the
//! protocol adds: its wake-up and the reply). Granted: the wall-clock time at which the
//! waiter's reply has arrived at the client. Client and server are on one machine and read the
//! same clock (CLOCK_REALTIME); each run checks it with `TIME` and reports the bound on any
//! offset. A grant the client received before T + 1 ms (beyond that bound) would be a second
//! holder: it counts as a mutual-exclusion violation.

use crate::bench::Bench;
use crate::protocols::{Kind, Protocol};
use crate::report::{ms, percentile, rounds, Report, Table};
use crate::rw_protocols::{self, Mode, RwKind, RwProtocol, RwShas};
use redis::Connection;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const LEASE_MS: i64 = 10;
/// The waiter's lease: long enough never to expire during a round.
const WAITER_LEASE_MS: i64 = 30_000;

/// One way of holding and waiting: `hold` takes the key with [`LEASE_MS`] and never releases;
/// `wait` blocks until granted (it releases afterwards, off the clock).
struct Case {
    name: String,
    module: bool,
    hold: Box<dyn FnMut(&str)>,
    wait: Box<dyn FnMut(&str) -> SystemTime + Send>,
}

pub fn run(b: &Bench, r: &mut Report) {
    let mut conn = b.conn();
    let shas = RwShas::load(&mut conn);
    let offset = clock_offset_us(&mut conn);
    let mut t = Table::new(
        &format!(
            "3. Expiry hand-off: holder with a {LEASE_MS} ms lease never releases; lease end (server PEXPIRETIME T) → waiter's reply, and from T + 1 ms, the first moment the server considers the key expired (server − client clock offset within [{}, {}] µs)",
            offset.0, offset.1
        ),
        &[
            "protocol",
            "holder → waiter",
            "rounds",
            "from T: min ms",
            "p50 ms",
            "p99 ms",
            "max ms",
            "from T + 1 ms: p50 / p90 / p99 ms",
        ],
    );
    for mut case in cases(b, &shas) {
        let mut delays = Vec::new();
        let mut missed = 0;
        let mut round = 0;
        while delays.len() < b.sizes.expiry_rounds {
            round += 1;
            let key = format!("expiry:{}:{round}", case.name.replace(' ', "-"));
            (case.hold)(&key);
            let lease_end_ms: i64 = redis::cmd("PEXPIRETIME")
                .arg(&key)
                .query(&mut conn)
                .expect("PEXPIRETIME");
            // -2: the key is gone already, its 10 ms lease over before this read came (a
            // stalled moment of a busy machine): the round has nothing to time; another runs.
            if lease_end_ms == -2 && missed < b.sizes.expiry_rounds {
                missed += 1;
                continue;
            }
            assert!(
                lease_end_ms > 0,
                "{key}: holder's lease not set ({lease_end_ms})"
            );
            let wait = &mut case.wait;
            let granted = std::thread::scope(|s| s.spawn(|| wait(&key)).join().unwrap());
            let granted_us = granted.duration_since(UNIX_EPOCH).unwrap().as_micros() as i64;
            let delay_us = granted_us - lease_end_ms * 1000;
            // Received before the server could have expired the key, whatever the clocks'
            // offset: granted while the holder's key was alive.
            if granted_us + offset.1 < (lease_end_ms + 1) * 1000 {
                r.violations += 1;
            }
            delays.push(Duration::from_micros(delay_us.max(0) as u64));
        }
        let min = *delays.iter().min().unwrap();
        let max = *delays.iter().max().unwrap();
        let p99 = percentile(&mut delays, 99.0);
        let p50 = percentile(&mut delays, 50.0);
        // From the server's expiry instant: what the protocol adds.
        let floor = Duration::from_millis(1);
        let after = |d: Duration| ms(d.saturating_sub(floor));
        let p90 = percentile(&mut delays, 90.0);
        let (protocol, shape) = case.name.split_once(' ').unwrap_or((&case.name, ""));
        t.row(vec![
            protocol.into(),
            shape.into(),
            rounds(delays.len(), missed),
            ms(min),
            ms(p50),
            ms(p99),
            ms(max),
            format!("{} / {} / {}", after(p50), after(p90), after(p99)),
        ]);
        if case.module {
            r.target(
                &format!(
                    "expiry hand-off p99 after the server expires the key (PEXPIRETIME + 1 ms), {}",
                    case.name
                ),
                format!("{} ms (from PEXPIRETIME: {} ms)", after(p99), ms(p99)),
                "≤ 1.0 ms",
                p99 <= floor + Duration::from_micros(1_000),
            );
        }
    }
    r.tables.push(t);
}

fn cases(b: &Bench, shas: &RwShas) -> Vec<Case> {
    let lock = |kind: Kind, module: bool| {
        let mut holder = b.protocol(kind, 0);
        let mut waiter = b.protocol(kind, 1);
        Case {
            name: format!("{} lock→lock", kind.name()),
            module,
            hold: Box::new(move |key| {
                assert!(holder.acquire(key, LEASE_MS, Some(Duration::ZERO)));
            }),
            wait: Box::new(move |key| granted(waiter.as_mut(), key)),
        }
    };
    let rw = |kind: RwKind, second: Mode, module: bool| {
        let mut holder = rw_protocols::connect(kind, &b.url, shas, 0);
        let mut waiter = RwWaiter {
            p: rw_protocols::connect(kind, &b.url, shas, 1),
            mode: second,
        };
        Case {
            name: format!(
                "{} write→{}",
                kind.name(),
                second.word().to_ascii_lowercase()
            ),
            module,
            hold: Box::new(move |key| {
                assert!(holder.acquire(key, Mode::Write, LEASE_MS, Some(Duration::ZERO)));
            }),
            wait: Box::new(move |key| granted(&mut waiter, key)),
        }
    };
    vec![
        lock(Kind::Rlock, true),
        lock(Kind::Redisson, false),
        rw(RwKind::Rrwlock, Mode::Write, true),
        rw(RwKind::Rrwlock, Mode::Read, true),
        rw(RwKind::Redisson, Mode::Write, false),
    ]
}

/// A read-write lock client waiting in one mode, seen as a lock.
struct RwWaiter {
    p: Box<dyn RwProtocol>,
    mode: Mode,
}

impl Protocol for RwWaiter {
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool {
        self.p.acquire(key, self.mode, lease_ms, wait)
    }
    fn release(&mut self, key: &str) -> bool {
        self.p.release(key, self.mode);
        true
    }
}

/// Wait for `key` until granted; the time the grant arrived (then release, off the clock).
fn granted(waiter: &mut dyn Protocol, key: &str) -> SystemTime {
    assert!(waiter.acquire(key, WAITER_LEASE_MS, None));
    let at = SystemTime::now();
    assert!(waiter.release(key), "{key}: the waiter's release refused");
    at
}

/// Bounds on (server clock − client clock) in µs, from `TIME` read between two client clock
/// readings: the tightest of 20 tries.
fn clock_offset_us(conn: &mut Connection) -> (i64, i64) {
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let (mut lo, mut hi) = (i64::MIN, i64::MAX);
    for _ in 0..20 {
        let before = now();
        let (s, us): (i64, i64) = redis::cmd("TIME").query(conn).expect("TIME");
        let after = now();
        let server = s * 1_000_000 + us;
        lo = lo.max(server - after);
        hi = hi.min(server - before);
    }
    (lo, hi)
}

//! Scenario 2c: a read-heavy read-write lock. 8 clients on one lock, each operation a read with
//! probability 0.9, else a write: acquire (no timeout), critical section, release. RRWLOCK's
//! raw `BLOCK` clients against Redisson's `RReadWriteLock` protocol (its scripts and
//! subscribe-and-retry wait loop). Reported: acquisitions/s, and the wait (acquire call →
//! grant) of each mode. Redisson lets readers pass a waiting writer, so its writers can starve;
//! RRWLOCK's queue is FIFO across modes. A writer still waiting when the run ends is granted
//! once the readers stop: its whole wait counts, while only grants within the run count for
//! the rate.

use crate::bench::{commandstats, reset_stats, Bench};
use crate::exclusion::{critical, Exclusion};
use crate::report::{ms, percentile, Bar, Report, Table};
use crate::rw_protocols::{self, Mode, RwKind, RwShas};
use rlock_tests::Rng;
use std::time::{Duration, Instant};

const CLIENTS: usize = 8;
const WRITE_PERCENT: u64 = 10;
/// Redisson's default lease (`internalLockLeaseTime`, with its watchdog).
const LEASE_MS: i64 = 30_000;

pub fn run(b: &Bench, r: &mut Report) {
    let shas = RwShas::load(&mut b.conn());
    let mut t = Table::new(
        &format!(
            "2c. Read-heavy read-write lock: {CLIENTS} clients, {}% reads / {WRITE_PERCENT}% writes on one lock",
            100 - WRITE_PERCENT
        ),
        &[
            "protocol",
            "acquisitions/s",
            "reads / writes",
            "read wait p50 / p99 ms",
            "write wait p50 / p99 ms",
            "write wait max ms",
            "server cmds / µs per acquisition",
        ],
    );
    let mut m = Vec::new();
    for kind in [RwKind::Rrwlock, RwKind::Redisson] {
        let got = measure(b, &shas, kind, r);
        t.row(vec![
            kind.name().into(),
            format!("{:.0}", got.rate),
            format!("{} / {}", got.reads, got.writes),
            format!("{} / {}", ms(got.read_p50), ms(got.read_p99)),
            format!("{} / {}", ms(got.write_p50), ms(got.write_p99)),
            ms(got.write_max),
            format!("{:.2} / {:.1}", got.cmds_per_acq, got.us_per_acq),
        ]);
        r.bars.push(Bar {
            group: "read-heavy rwlock, acquisitions/s".into(),
            series: kind.name().into(),
            value: got.rate,
        });
        m.push(got);
    }
    r.tables.push(t);
    let (rw, rs) = (&m[0], &m[1]);
    let ratio = rw.rate / rs.rate;
    r.target(
        &format!("read-heavy rwlock acquisitions/s vs Redisson, {CLIENTS} clients"),
        format!("{ratio:.2}×"),
        "≥ 3×",
        ratio >= 3.0,
    );
    r.target(
        "read-heavy rwlock, writers' p99 wait (rrwlock vs Redisson)",
        format!("{} ms vs {} ms", ms(rw.write_p99), ms(rs.write_p99)),
        "below Redisson's",
        rw.write_p99 < rs.write_p99,
    );
}

struct Measured {
    rate: f64,
    reads: u64,
    writes: u64,
    read_p50: Duration,
    read_p99: Duration,
    write_p50: Duration,
    write_p99: Duration,
    write_max: Duration,
    cmds_per_acq: f64,
    us_per_acq: f64,
}

fn measure(b: &Bench, shas: &RwShas, kind: RwKind, r: &mut Report) -> Measured {
    let key = format!("rwheavy:{}", kind.name());
    let check = Exclusion::default();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| rw_protocols::connect(kind, &b.url, shas, i))
        .collect();
    let run = b.sizes.run;
    let mut stats = b.conn();
    reset_stats(&mut stats);
    let start = Instant::now();
    // Per client: (grants within the run, (mode, wait) of every acquisition).
    type Done = (u64, Vec<(Mode, Duration)>);
    let results: Vec<Done> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                let (key, check) = (&key, &check);
                scope.spawn(move || {
                    let mut rng = Rng::new(0x5eed + i as u64);
                    let (mut within, mut waits) = (0u64, Vec::new());
                    while start.elapsed() < run {
                        let mode = if rng.below(100) < WRITE_PERCENT {
                            Mode::Write
                        } else {
                            Mode::Read
                        };
                        let t0 = Instant::now();
                        assert!(p.acquire(key, mode, LEASE_MS, None));
                        // Inside from the reply until the release is sent.
                        let held = match mode {
                            Mode::Read => check.shared(),
                            Mode::Write => check.exclusive(),
                        };
                        waits.push((mode, t0.elapsed()));
                        if start.elapsed() < run {
                            within += 1;
                        }
                        critical();
                        drop(held);
                        p.release(key, mode);
                    }
                    (within, waits)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    r.violations += check.violations();
    let (cmds, usec) = commandstats(&mut stats)
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config"))
        .fold((0, 0), |(c, u), (_, (calls, us))| (c + calls, u + us));
    let within: u64 = results.iter().map(|(n, _)| n).sum();
    let waits = |m: Mode| -> Vec<Duration> {
        results
            .iter()
            .flat_map(|(_, w)| w.iter().filter(|(mm, _)| *mm == m).map(|(_, d)| *d))
            .collect()
    };
    let (mut reads, mut writes) = (waits(Mode::Read), waits(Mode::Write));
    let all = (reads.len() + writes.len()).max(1) as f64;
    Measured {
        rate: within as f64 / run.as_secs_f64(),
        reads: reads.len() as u64,
        writes: writes.len() as u64,
        read_p50: percentile(&mut reads, 50.0),
        read_p99: percentile(&mut reads, 99.0),
        write_p50: percentile(&mut writes, 50.0),
        write_p99: percentile(&mut writes, 99.0),
        write_max: writes.iter().max().copied().unwrap_or_default(),
        cmds_per_acq: cmds as f64 / all,
        us_per_acq: usec as f64 / all,
    }
}

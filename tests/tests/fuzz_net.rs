//! Network fuzz against a live server (issue 5, part B): several connections send random
//! `RLOCK.*` argument vectors (valid, almost valid and random bytes) interleaved with the native
//! commands that touch lock keys (DEL, SET, HSET of a bad count, PEXPIRE, RENAME, FLUSHDB,
//! SELECT), waits inside MULTI and Lua, `CLIENT UNBLOCK` and `CLIENT KILL` of each other, on a
//! few keys in two databases. Invariants:
//! - the server stays up and answers; no reply is the module's internal-error (caught panic)
//!   reply; the log has no panic;
//! - sampled atomically (MULTI), `INFO rlock` `rlock_waiters` equals the sum of the queues of the
//!   fuzzed keys, and equals the server's `blocked_clients`;
//! - a fuzzed key with waiters is never free for long (handed off at once);
//! - at the end, once the connections are gone, no waiter and no blocked client is left.
//!
//! The CI run takes about 8 s; `RLOCK_FUZZ_SECS=300 make fuzz` runs longer;
//! `RLOCK_FUZZ_SEED` replays a seed (timing still varies).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlock_tests::{
    cmd, env_seed, env_u64, error_text, info_int, int, raw, redis, rlock_stat, text, Flavor,
    LockInfo, Rng, Server, ServerKind, Value,
};

const KEYS: [&str; 3] = ["fz:a", "fz:b", "fz:{c}"];
const CONNS: usize = 8;

fn key(r: &mut Rng) -> Vec<u8> {
    match r.below(20) {
        0 => random_bytes(r, 8),
        _ => r.pick(&KEYS).as_bytes().to_vec(),
    }
}

fn random_bytes(r: &mut Rng, max: u64) -> Vec<u8> {
    (0..r.below(max + 1)).map(|_| r.next_u64() as u8).collect()
}

fn owner(r: &mut Rng) -> Vec<u8> {
    match r.below(12) {
        0 => Vec::new(),
        1 => random_bytes(r, 40),
        _ => format!("owner-{}", r.below(4)).into_bytes(),
    }
}

/// A duration argument: mostly sensible, sometimes hostile.
fn duration(r: &mut Rng, sensible_max: u64) -> Vec<u8> {
    match r.below(16) {
        0 => r
            .pick(&["0", "-1", "01", "+5", "1.5", " 7", "", "x"])
            .as_bytes()
            .to_vec(),
        1 => r
            .pick(&[
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "4611686018427387904",
            ])
            .as_bytes()
            .to_vec(),
        2 => random_bytes(r, 6),
        _ => (1 + r.below(sensible_max)).to_string().into_bytes(),
    }
}

/// One random command. Blocking acquires wait at most ~300 ms, or forever (`BLOCK 0`) with a
/// short lease ahead of them; a connection that gets no reply in time is dropped (the server
/// then sees a disconnect). `flush_async`: FLUSHDB is sent as `FLUSHDB ASYNC` (see
/// [`flushdb_blocks_its_client`]).
fn random_cmd(r: &mut Rng, ids: &[i64], flush_async: bool) -> redis::Cmd {
    let mut c;
    match r.below(40) {
        0..=13 => {
            c = redis::cmd(r.pick::<&str>(&["RLOCK.ACQUIRE", "rlock.acquire", "Rlock.Acquire"]));
            c.arg(key(r)).arg(owner(r)).arg(duration(r, 400));
            for _ in 0..r.below(4) {
                match r.below(8) {
                    0..=2 => {
                        c.arg(*r.pick(&["BLOCK", "block"]));
                        c.arg(duration(r, 300));
                    }
                    3 | 4 => {
                        c.arg(*r.pick(&["FENCE", "fence"]));
                    }
                    5 => {
                        c.arg("BLOCK").arg("0");
                    }
                    _ => {
                        c.arg(random_bytes(r, 6));
                    }
                }
            }
        }
        14..=19 => {
            c = redis::cmd("RLOCK.RELEASE");
            c.arg(key(r)).arg(owner(r));
            if r.below(10) == 0 {
                c.arg("extra");
            }
        }
        20..=21 => {
            c = redis::cmd("RLOCK.RENEW");
            c.arg(key(r)).arg(owner(r)).arg(duration(r, 400));
        }
        22..=23 => {
            c = redis::cmd("RLOCK.FORCERELEASE");
            c.arg(key(r));
        }
        24..=25 => {
            c = redis::cmd("RLOCK.INFO");
            c.arg(key(r));
            if r.below(8) == 0 {
                c.arg(key(r));
            }
        }
        26 => {
            c = redis::cmd(r.pick::<&str>(&[
                "RLOCK.ACQUIRE",
                "RLOCK.RELEASE",
                "RLOCK.RENEW",
                "RLOCK.INFO",
            ]));
            for _ in 0..r.below(7) {
                c.arg(random_bytes(r, 10));
            }
        }
        27 => {
            c = redis::cmd("DEL");
            c.arg(key(r));
        }
        28 => {
            c = redis::cmd("SET");
            c.arg(key(r)).arg("not-a-lock").arg("PX").arg(200);
        }
        29 => {
            c = redis::cmd("HSET");
            c.arg(key(r))
                .arg(owner(r))
                .arg(*r.pick(&["x", "1", "-3", "9223372036854775807"]));
        }
        30 => {
            c = redis::cmd("PEXPIRE");
            c.arg(key(r)).arg(r.below(300) as i64);
        }
        31 => {
            c = redis::cmd("RENAME");
            c.arg(key(r)).arg(key(r));
        }
        32 => {
            c = redis::cmd("CLIENT");
            c.arg("UNBLOCK").arg(*r.pick(ids));
            if r.below(2) == 0 {
                c.arg("ERROR");
            }
        }
        33 => {
            c = redis::cmd("CLIENT");
            c.arg("KILL").arg("ID").arg(*r.pick(ids));
        }
        34 => {
            // A wait inside Lua degrades to one attempt.
            c = redis::cmd("EVAL");
            c.arg("return redis.call('RLOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2], 'BLOCK', '0')")
                .arg(1)
                .arg(key(r))
                .arg(owner(r))
                .arg(duration(r, 300));
        }
        35 => {
            c = redis::cmd("SELECT");
            c.arg(r.below(2));
        }
        36 if r.below(4) == 0 => {
            c = redis::cmd("FLUSHDB");
            if flush_async {
                c.arg("ASYNC");
            }
        }
        36 => {
            c = redis::cmd("PING");
        }
        37 => {
            c = redis::cmd("HINCRBY");
            c.arg(key(r)).arg(owner(r)).arg(1);
        }
        _ => {
            c = redis::cmd("RLOCK.ACQUIRE");
            c.arg(key(r))
                .arg(owner(r))
                .arg(50 + r.below(200))
                .arg("BLOCK")
                .arg(0);
        }
    }
    c
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    errors: AtomicU64,
    nils: AtomicU64,
    timeouts: AtomicU64,
    reconnects: AtomicU64,
    multis: AtomicU64,
    samples: AtomicU64,
}

fn fuzzer(
    s_url: String,
    seed: u64,
    stop: Arc<AtomicBool>,
    ids: Arc<Mutex<Vec<i64>>>,
    n: Arc<Counts>,
    flush_async: bool,
) {
    let client = redis::Client::open(s_url).unwrap();
    let mut r = Rng::new(seed);
    let connect = |ids: &Mutex<Vec<i64>>| {
        let mut c = client.get_connection().expect("connect");
        c.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let id = int(&mut c, &cmd!("CLIENT", "ID"));
        ids.lock().unwrap().push(id);
        c
    };
    let mut conn = connect(&ids);
    while !stop.load(Ordering::Relaxed) {
        let known: Vec<i64> = ids.lock().unwrap().clone();
        let result = if r.below(25) == 0 {
            // A wait inside MULTI degrades to one attempt.
            n.multis.fetch_add(1, Ordering::Relaxed);
            let mut p = redis::pipe();
            p.atomic();
            for _ in 0..1 + r.below(3) {
                p.add_command(random_cmd(&mut r, &known, flush_async));
            }
            p.query::<Value>(&mut conn).map(|_| Value::Nil)
        } else {
            let c = random_cmd(&mut r, &known, flush_async);
            n.sent.fetch_add(1, Ordering::Relaxed);
            redis::ConnectionLike::req_command(&mut conn, &c)
        };
        match result {
            Ok(v) => {
                if let Some(e) = error_text(&v) {
                    assert!(!e.contains("internal error"), "module internal error: {e}");
                    n.errors.fetch_add(1, Ordering::Relaxed);
                }
                if v == Value::Nil {
                    n.nils.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                // Killed by another fuzzer, or a wait that outlasted the read timeout: drop the
                // connection (a disconnect while queued) and start afresh.
                if e.is_timeout() {
                    n.timeouts.fetch_add(1, Ordering::Relaxed);
                } else if let Some(code) = e.code() {
                    assert!(!e.to_string().contains("internal error"), "{code}: {e}");
                    n.errors.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                n.reconnects.fetch_add(1, Ordering::Relaxed);
                conn = connect(&ids);
            }
        }
    }
}

/// Atomic samples of the queues of the fuzzed keys in both databases against `INFO rlock` and
/// `blocked_clients`; a key with waiters must not stay free.
fn sampler(url: String, stop: Arc<AtomicBool>, n: Arc<Counts>) {
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw(&mut c, &cmd!("CLIENT", "SETNAME", "fuzz-sampler"));
    let mut free_since: std::collections::HashMap<(u8, usize), (String, Instant)> =
        Default::default();
    while !stop.load(Ordering::Relaxed) {
        let mut p = redis::pipe();
        p.atomic();
        for db in 0..2 {
            p.cmd("SELECT").arg(db).ignore();
            for k in KEYS {
                p.cmd("RLOCK.INFO").arg(k);
            }
        }
        p.cmd("INFO").arg("rlock").cmd("INFO").arg("clients");
        p.cmd("SELECT").arg(0).ignore();
        let v: Vec<Value> = match p.query(&mut c) {
            Ok(v) => v,
            // The sampler can be killed by a fuzzer's CLIENT KILL: reconnect.
            Err(e) => {
                assert!(
                    !e.is_timeout(),
                    "the server stopped answering for 10 s (hung?)"
                );
                c = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                continue;
            }
        };
        n.samples.fetch_add(1, Ordering::Relaxed);
        let mut queued = 0;
        for (i, reply) in v[..2 * KEYS.len()].iter().enumerate() {
            if let Some(e) = error_text(reply) {
                assert!(e.starts_with("WRONGTYPE"), "RLOCK.INFO: {e}");
                free_since.remove(&((i / KEYS.len()) as u8, i % KEYS.len()));
                continue;
            }
            let info = LockInfo::parse(reply);
            queued += info.waiters;
            let slot = ((i / KEYS.len()) as u8, i % KEYS.len());
            if info.owner.is_none() && info.waiters > 0 {
                let head = info.queue[0].clone();
                let now = Instant::now();
                let e = free_since.entry(slot).or_insert((head.clone(), now));
                if e.0 != head {
                    *e = (head, now);
                }
                assert!(
                    now - e.1 < Duration::from_secs(2),
                    "db {} {}: free for 2 s with waiters: {info:?}",
                    slot.0,
                    KEYS[slot.1]
                );
            } else {
                free_since.remove(&slot);
            }
        }
        let rlock = text(&v[2 * KEYS.len()]).unwrap();
        let clients = text(&v[2 * KEYS.len() + 1]).unwrap();
        let waiters = stat_in(&rlock, "waiters");
        let blocked: i64 = clients
            .lines()
            .find_map(|l| l.strip_prefix("blocked_clients:"))
            .and_then(|x| x.trim().parse().ok())
            .unwrap();
        // Random keys (1 in 20 commands) can hold waiters too: rlock_waiters may exceed the sum.
        assert!(
            waiters >= queued,
            "rlock_waiters {waiters} < queued on fuzzed keys {queued}"
        );
        // Every queued waiter is a blocked client. A granted waiter leaves the queue at once
        // but stays counted as blocked until the server's next beforeSleep unblocks it, so
        // blocked_clients may be larger for a moment; at the end both are 0.
        assert!(
            waiters <= blocked,
            "rlock_waiters {waiters} > blocked_clients {blocked}"
        );
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// A counter of an `INFO rlock` text (`rlock_` prefixed, as Redis names module fields).
fn stat_in(info: &str, field: &str) -> i64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("rlock_{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO rlock has no {field}: {info}"))
}

/// Redis 7.4 runs a plain FLUSHDB/FLUSHALL in a background thread with its client blocked until
/// it ends, and `CLIENT UNBLOCK` of that client crashes Redis 7.4.1, module or not (an assertion
/// or "Unknown btype in unblockClient()" when the flush ends; Redis 8.2 refuses the UNBLOCK, Valkey
/// flushes in place). The fuzz sends `FLUSHDB ASYNC` there, which does not block its client.
fn flushdb_blocks_its_client(kind: ServerKind) -> bool {
    kind.flavor == Flavor::Redis && (kind.version.0, kind.version.1) == (7, 4)
}

#[test]
fn network_fuzz_keeps_the_server_alive_and_consistent() {
    let secs = env_u64("RLOCK_FUZZ_SECS", 8);
    let seed = env_seed("RLOCK_FUZZ_SEED");
    println!("network fuzz: {CONNS} connections, {secs} s, seed {seed}");
    let mut s = Server::start();
    let flush_async = flushdb_blocks_its_client(s.kind());
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(Mutex::new(Vec::new()));
    let n = Arc::new(Counts::default());
    let mut seeds = Rng::new(seed);
    let threads: Vec<_> = (0..CONNS)
        .map(|_| {
            let (url, sd, stop, ids, n) = (
                s.url(),
                seeds.next_u64(),
                stop.clone(),
                ids.clone(),
                n.clone(),
            );
            std::thread::spawn(move || fuzzer(url, sd, stop, ids, n, flush_async))
        })
        .collect();
    let samp = {
        let (url, stop, n) = (s.url(), stop.clone(), n.clone());
        std::thread::spawn(move || sampler(url, stop, n))
    };
    let t0 = Instant::now();
    let mut admin = s.conn();
    admin
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    raw(&mut admin, &cmd!("CLIENT", "SETNAME", "fuzz-admin"));
    while t0.elapsed() < Duration::from_secs(secs) {
        assert!(s.alive(), "redis-server died:\n{}", s.log_tail(40));
        if let Err(e) = redis::cmd("PING").query::<String>(&mut admin) {
            // Killed by a fuzzer (reconnect), or the server hangs (fail).
            assert!(
                !e.is_timeout(),
                "the server stopped answering for 10 s (hung?)"
            );
            admin = s.conn();
            admin
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            raw(&mut admin, &cmd!("CLIENT", "SETNAME", "fuzz-admin"));
        }
        std::thread::sleep(Duration::from_millis(100));
        if threads.iter().any(|t| t.is_finished()) || samp.is_finished() {
            break; // a thread failed: join below reports it
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("fuzzer thread");
    }
    samp.join().expect("sampler thread");
    assert!(s.alive(), "redis-server died:\n{}", s.log_tail(40));

    // Every fuzzer connection is closed now: nothing may stay queued or blocked.
    let mut c = s.conn();
    rlock_tests::wait_until(Duration::from_secs(5), "no waiter left", || {
        rlock_stat(&mut c, "waiters") == 0 && info_int(&mut c, "clients", "blocked_clients") == 0
    });
    let log = std::fs::read_to_string(s.dir().join("redis.log")).unwrap_or_default();
    assert!(
        !log.contains("panic") && !log.contains("PANIC"),
        "panic in the server log:\n{}",
        s.log_tail(40)
    );
    // Still fully working.
    raw(&mut c, &cmd!("FLUSHALL"));
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "fz:a", "o", 1000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fz:a", "o")), 0);
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "network fuzz summary ({:.1} s, seed {seed}): commands {} multi {} error-replies {} \
         nil {} wait-timeouts {} reconnects {} samples {} | server: acquired {} handoffs {} \
         waits_started {} waits_timed_out {} waiters_disconnected {} grants_revoked {} \
         errors {}",
        t0.elapsed().as_secs_f64(),
        g(&n.sent),
        g(&n.multis),
        g(&n.errors),
        g(&n.nils),
        g(&n.timeouts),
        g(&n.reconnects),
        g(&n.samples),
        rlock_stat(&mut c, "acquired"),
        rlock_stat(&mut c, "handoffs"),
        rlock_stat(&mut c, "waits_started"),
        rlock_stat(&mut c, "waits_timed_out"),
        rlock_stat(&mut c, "waiters_disconnected"),
        rlock_stat(&mut c, "grants_revoked"),
        rlock_stat(&mut c, "errors"),
    );
    assert!(g(&n.sent) > secs * 100, "too few commands to mean anything");
}

/// Found by this fuzz (see tests/MODULE_BUGS.md): a waiter queued behind a lock whose lease is
/// 2^62 ms made the server spin forever (the re-check timer's delay in microseconds overflows
/// to "now" inside RM_CreateTimer, so the timer fires at once and re-arms itself in a loop).
#[test]
fn huge_lease_with_a_waiter_does_not_hang_the_server() {
    let s = Server::start();
    let mut c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "big", "a", "4611686018427387904")
        ),
        1
    );
    let waiter =
        rlock_tests::Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "big", "b", 1000, "BLOCK", 200));
    assert_eq!(waiter.reply(), Value::Nil, "the wait times out");
    let pong = redis::cmd("PING").query::<String>(&mut c);
    assert!(pong.is_ok(), "server hangs: {pong:?}");
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
}

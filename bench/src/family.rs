//! Scenario 8: the rlock client's synchronizer family against the raw module commands, side by
//! side. Raw side: one blocking connection per thread, waits parked with `BLOCK 0`. Client
//! side: the sync API (its pooled blocking connections; waits queued in its session and
//! granted through its listener). Slices alternate raw and client so both meet the same
//! machine load. Besides the rates, the server's CPU per operation (`INFO cpu`) shows what each
//! side costs the server as a whole: the client's waits add the listener's reads.
//!
//! - read-write lock: 8 threads on one lock, 90 % reads (the same pseudo-random pattern both
//!   sides), acquire → critical section → release; a checker counts a writer beside anyone;
//! - semaphore: 16 threads on 4 permits, acquire one → critical section → release; a checker
//!   counts a fifth holder (a violation);
//! - MultiLock: 3 locks on 3 servers, one thread, acquire+release of the set, against the same
//!   three locks taken and released one after another (6 round trips).

use crate::bench::{in_turn, server_cpu, Bench};
use crate::exclusion::{critical, Exclusion, Permits};
use crate::protocols::owner;
use crate::report::{Report, Table};
use redis::Connection;
use rlock_tests::Server;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Slices per side.
const SLICES: u32 = 8;
const LEASE_MS: u64 = 30_000;
const LEASE: Duration = Duration::from_millis(LEASE_MS);

pub fn run(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        &format!(
            "8. The client's synchronizer family vs raw module commands ({SLICES} interleaved slices per side)"
        ),
        &[
            "scenario",
            "raw ops/s",
            "client ops/s",
            "client / raw",
            "server CPU µs per op, raw / client",
        ],
    );
    let slice = b.sizes.run / (SLICES / 2);
    // Per side: operations per second summed over slices, and (operations, server CPU seconds).
    let mut rw = [Rate::default(); 2];
    let mut sem = [Rate::default(); 2];
    let mut multi = [0.0f64; 2];
    let extra = [Server::start(), Server::start()];
    let clients: Vec<rlock_client::Client> = std::iter::once(b.url.clone())
        .chain(extra.iter().map(Server::url))
        .map(|u| rlock_client::Client::open(u).expect("client"))
        .collect();
    for k in 0..SLICES {
        let (raw, client) = in_turn(
            k,
            r,
            |r| rwlock(b, r, slice, k, false),
            |r| rwlock(b, r, slice, k, true),
        );
        rw[0].add(raw);
        rw[1].add(client);
        let (raw, client) = in_turn(
            k,
            r,
            |r| semaphore(b, r, slice, k, false),
            |r| semaphore(b, r, slice, k, true),
        );
        sem[0].add(raw);
        sem[1].add(client);
        multi[0] += sequential(&clients, slice, k);
        multi[1] += multi_lock(&clients, slice, k);
    }
    for (what, [raw, client], goal) in [
        (
            "read-write lock, 8 threads, 90 % reads (acquire+release/s)",
            rw,
            0.85,
        ),
        (
            "semaphore, 16 threads on 4 permits (acquire+release/s)",
            sem,
            0.85,
        ),
    ] {
        let ratio = client.per_s / raw.per_s;
        t.row(vec![
            what.into(),
            format!("{:.0}", raw.per_s / SLICES as f64),
            format!("{:.0}", client.per_s / SLICES as f64),
            format!("{ratio:.2}×"),
            format!("{:.1} / {:.1}", raw.cpu_us(), client.cpu_us()),
        ]);
        r.target(
            &format!("client vs raw commands, {what}"),
            format!("{ratio:.2}×"),
            &format!("≥ {goal}×"),
            ratio >= goal,
        );
    }
    let [seq, set] = multi;
    let ratio = set / seq;
    t.row(vec![
        "MultiLock of 3 locks on 3 servers (sync), set pairs/s vs 3 sequential lock pairs".into(),
        format!("{:.0}", seq / SLICES as f64),
        format!("{:.0}", set / SLICES as f64),
        format!("{ratio:.2}×"),
        "-".into(),
    ]);
    r.target(
        "MultiLock of 3 locks on 3 servers vs the 3 locks one after another, pairs/s",
        format!("{ratio:.2}×"),
        "> 1× (parallel round trips)",
        ratio > 1.0,
    );
    r.tables.push(t);
}

/// One side's results summed over its slices.
#[derive(Clone, Copy, Default)]
struct Rate {
    /// Operations per second, summed over slices.
    per_s: f64,
    ops: f64,
    /// The server's CPU seconds over those operations.
    cpu_s: f64,
}

impl Rate {
    fn add(&mut self, slice: Rate) {
        self.per_s += slice.per_s;
        self.ops += slice.ops;
        self.cpu_s += slice.cpu_s;
    }

    fn cpu_us(&self) -> f64 {
        self.cpu_s * 1e6 / self.ops.max(1.0)
    }
}

/// Whether thread `i`'s `n`-th operation writes: 10 % of them, the same pattern both sides.
fn writes(i: usize, n: u64) -> bool {
    let x = (i as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(n.wrapping_mul(0xBF58_476D_1CE4_E5B9));
    (x >> 32).is_multiple_of(10)
}

/// `threads` threads, each with a blocking connection of its own, each running
/// `op(thread, connection, n)` for its `n`-th operation until `run` is over: operations per
/// second, and the server's CPU over them.
fn contend(
    b: &Bench,
    threads: usize,
    run: Duration,
    op: impl Fn(usize, &mut Connection, u64) + Sync,
) -> Rate {
    let total = AtomicU64::new(0);
    let conns: Vec<Connection> = (0..threads).map(|_| b.conn()).collect();
    let mut probe = b.conn();
    let cpu = server_cpu(&mut probe);
    let start = Instant::now();
    std::thread::scope(|s| {
        for (i, mut conn) in conns.into_iter().enumerate() {
            let (op, total) = (&op, &total);
            s.spawn(move || {
                let mut n = 0;
                while start.elapsed() < run {
                    op(i, &mut conn, n);
                    n += 1;
                }
                total.fetch_add(n, SeqCst);
            });
        }
    });
    let ops = total.load(SeqCst) as f64;
    Rate {
        per_s: ops / start.elapsed().as_secs_f64(),
        ops,
        cpu_s: server_cpu(&mut probe) - cpu,
    }
}

/// One slice of the read-write lock scenario: operations per second.
fn rwlock(b: &Bench, r: &mut Report, run: Duration, k: u32, client: bool) -> Rate {
    let key = format!("family:rw:{k}:{client}");
    let check = Exclusion::default();
    let rw = b.client.read_write_lock(key.clone());
    let owners: Vec<String> = (0..8).map(|i| owner(700 + i)).collect();
    let rate = contend(b, 8, run, |i, conn, n| {
        let write = writes(i, n);
        let side = if write { "WRITE" } else { "READ" };
        let lock = || {
            if write {
                rw.write_lock()
            } else {
                rw.read_lock()
            }
        };
        if client {
            lock().lock_with_lease(LEASE).expect("client acquire");
        } else {
            let got: Option<i64> = redis::cmd("RRWLOCK.ACQUIRE")
                .arg(&key)
                .arg(&owners[i])
                .arg(side)
                .arg(LEASE_MS)
                .arg("BLOCK")
                .arg(0)
                .query(conn)
                .expect("RRWLOCK.ACQUIRE");
            assert!(got.is_some());
        }
        // A writer beside anyone, or a reader beside a writer, is a violation: inside from
        // the reply until the release is sent.
        let held = if write {
            check.exclusive()
        } else {
            check.shared()
        };
        critical();
        drop(held);
        if client {
            lock().unlock().expect("client release");
        } else {
            let _: i64 = redis::cmd("RRWLOCK.RELEASE")
                .arg(&key)
                .arg(&owners[i])
                .arg(side)
                .query(conn)
                .expect("RRWLOCK.RELEASE");
        }
    });
    r.violations += check.violations();
    rate
}

/// One slice of the semaphore scenario: operations per second.
fn semaphore(b: &Bench, r: &mut Report, run: Duration, k: u32, client: bool) -> Rate {
    const PERMITS: u64 = 4;
    let key = format!("family:sem:{k}:{client}");
    let sem = b.client.semaphore(key.clone());
    assert!(sem.try_set_permits(PERMITS).expect("set permits"));
    let check = Permits::new(PERMITS as i64);
    let rate = contend(b, 16, run, |_, conn, _| {
        if client {
            sem.acquire().expect("client acquire");
        } else {
            let got: Option<i64> = redis::cmd("RSEM.ACQUIRE")
                .arg(&key)
                .arg("BLOCK")
                .arg(0)
                .query(conn)
                .expect("RSEM.ACQUIRE");
            assert!(got.is_some());
        }
        // A fifth holder is a violation: out from the reply until the release is sent.
        let lease = check.take(1);
        critical();
        drop(lease);
        if client {
            sem.release().expect("client release");
        } else {
            let _: i64 = redis::cmd("RSEM.RELEASE")
                .arg(&key)
                .query(conn)
                .expect("RSEM.RELEASE");
        }
    });
    r.violations += check.violations();
    rate
}

/// The three locks of the MultiLock scenario, one per server (client `i` for server `i`).
fn names(k: u32) -> [String; 3] {
    [0, 1, 2].map(|i| format!("family:multi:{k}:{i}"))
}

/// One slice of the three locks taken and released one after another: sets per second.
fn sequential(clients: &[rlock_client::Client], run: Duration, k: u32) -> f64 {
    let names = names(k);
    let locks: Vec<rlock_client::Lock> = clients
        .iter()
        .zip(&names)
        .map(|(c, n)| c.lock(format!("{n}:seq")))
        .collect();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        for l in &locks {
            assert!(l.try_lock_with(Duration::ZERO, LEASE).expect("acquire"));
        }
        for l in locks.iter().rev() {
            l.unlock().expect("release");
        }
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// One slice of the MultiLock over the same three servers: sets per second.
fn multi_lock(clients: &[rlock_client::Client], run: Duration, k: u32) -> f64 {
    let names = names(k);
    let set = rlock_client::MultiLock::new(
        clients
            .iter()
            .zip(&names)
            .map(|(c, n)| c.lock(format!("{n}:set"))),
    )
    .expect("multi-lock");
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        assert!(set.try_lock_with(Duration::ZERO, LEASE).expect("acquire"));
        set.unlock().expect("release");
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

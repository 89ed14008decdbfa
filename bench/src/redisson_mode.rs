//! Scenario: the `rlock` client over Redisson's protocol (a server WITHOUT the module, as on a
//! managed service), against the bench's own Redisson-protocol driver on that same server
//! (`protocols::Redisson`: Redisson's scripts via EVALSHA and its wait loop), and against the
//! client in module mode on the main server, in one run.
//!
//! - Uncontended, one caller, acquire + release on distinct keys: the sync client's
//!   `try_lock_with(0, lease)` + `unlock()` (one script each way, as the driver sends), in
//!   slices whose order alternates (whichever runs second on a busy machine runs slower).
//! - Uncontended with many calls in flight ("pipelined where the API allows"): the client's
//!   API has no pipeline, but its async calls share one multiplexed connection, which redis-rs
//!   pipelines; 64 tasks on distinct keys, against the driver's pipelines of pairs.
//! - Contended on one lock at 8 and 32 clients: the sync client's `lock_with_lease` /
//!   `unlock` from one shared `Client`, against the driver's threads (each its own connection
//!   and subscriber, as a Redisson client per thread), mutual exclusion checked, with the
//!   server's commands per acquisition: the client's wake-up wakes one waiter per release
//!   where Redisson's wakes every waiter of the client.

use crate::bench::{in_turn, Bench};
use crate::contended;
use crate::protocols::{Kind, Protocol, Shas};
use crate::report::{Report, Table};
use crate::uncontended::pipelined_rate;
use rlock_tests::{Server, ServerOptions};
use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(30);
/// Async calls in flight in the "pipelined" row.
const IN_FLIGHT: usize = 64;

pub fn run(b: &Bench, r: &mut Report) {
    let plain = Server::with(ServerOptions {
        module: false,
        args: vec!["--maxclients".into(), "15000".into()],
        ..Default::default()
    });
    let pb = Bench {
        url: plain.url(),
        shas: Shas::load(&mut plain.conn()),
        client: rlock_client::Client::open(plain.url()).expect("rlock client"),
        sizes: b.sizes.clone(),
    };
    assert_eq!(
        pb.client.protocol().expect("detect"),
        rlock_client::Protocol::Redisson,
        "the client must detect Redisson's protocol on a server without the module"
    );
    uncontended(b, &pb, r);
    in_flight(&pb, r);
    contended(&pb, r);
}

/// Pairs of `p` on distinct keys for `run`.
fn pairs(p: &mut dyn Protocol, prefix: &str, run: Duration) -> (u64, Duration) {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        let key = format!("{prefix}:{n}");
        assert!(
            p.acquire(&key, 30_000, Some(Duration::ZERO)),
            "uncontended acquire failed"
        );
        assert!(p.release(&key), "uncontended release refused");
        n += 1;
    }
    (n, start.elapsed())
}

fn uncontended(b: &Bench, pb: &Bench, r: &mut Report) {
    let slices = 10u32;
    let slice = b.sizes.run / 2;
    let mut driver = pb.protocol(Kind::Redisson, 0);
    let mut client = pb.protocol(Kind::RlockClient, 0);
    let mut module = b.protocol(Kind::RlockClient, 0);
    let mut sums = [(0u64, Duration::ZERO); 3];
    let add = |s: &mut (u64, Duration), (n, t): (u64, Duration)| {
        s.0 += n;
        s.1 += t;
    };
    for k in 0..slices {
        let (d, c) = in_turn(
            k,
            &mut (),
            |_| pairs(driver.as_mut(), &format!("rm1:d:{k}"), slice),
            |_| pairs(client.as_mut(), &format!("rm1:c:{k}"), slice),
        );
        add(&mut sums[0], d);
        add(&mut sums[1], c);
        add(
            &mut sums[2],
            pairs(module.as_mut(), &format!("rm1:m:{k}"), slice),
        );
    }
    let rate = |s: (u64, Duration)| s.0 as f64 / s.1.as_secs_f64();
    let [d, c, m] = sums.map(rate);
    let mut t = Table::new(
        "R1. Client over Redisson's protocol (server without the module): uncontended, 1 caller, unpipelined",
        &["path", "pairs/s", "µs per pair", "vs driver"],
    );
    for (name, v) in [
        ("redisson driver (EVALSHA acquire, unlock + latch DEL)", d),
        ("rlock client, Redisson mode (try_lock_with 0 + unlock)", c),
        ("rlock client, module mode (same calls, module server)", m),
    ] {
        t.row(vec![
            name.into(),
            format!("{v:.0}"),
            format!("{:.1}", 1e6 / v),
            format!("{:.2}×", v / d),
        ]);
    }
    r.tables.push(t);
    r.target(
        "client in Redisson mode vs Redisson driver, uncontended pairs/s",
        format!("{:.2}×", c / d),
        "≥ 0.9×",
        c / d >= 0.9,
    );
}

/// The async client with `IN_FLIGHT` calls at once on distinct keys, against the driver's
/// pipelines of pairs on the same server.
fn in_flight(pb: &Bench, r: &mut Report) {
    let run = pb.sizes.run;
    let driver = pipelined_rate(pb, Kind::Redisson, "rm2:d", run);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = pb.client.clone();
    let done: u64 = rt.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..IN_FLIGHT)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while start.elapsed() < run {
                        let lock = client.async_lock(format!("rm2:c:{i}:{n}"));
                        assert!(lock.try_lock_with(Duration::ZERO, LEASE).await.unwrap());
                        lock.unlock().await.unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    let client_rate = done as f64 / run.as_secs_f64();
    let mut t = Table::new(
        "R2. Client over Redisson's protocol: uncontended, many calls in flight",
        &["path", "pairs/s", "vs driver"],
    );
    t.row(vec![
        format!(
            "redisson driver: {} connections × pipelines of {} pairs",
            pb.sizes.pipe_conns, pb.sizes.pipe_pairs
        ),
        format!("{driver:.0}"),
        "1.00×".into(),
    ]);
    t.row(vec![
        format!(
            "rlock async client, Redisson mode: {IN_FLIGHT} tasks on one multiplexed connection"
        ),
        format!("{client_rate:.0}"),
        format!("{:.2}×", client_rate / driver),
    ]);
    r.tables.push(t);
}

fn contended(pb: &Bench, r: &mut Report) {
    let mut t = Table::new(
        "R3. Client over Redisson's protocol: N clients on one lock (acquire, critical section, release)",
        &[
            "clients",
            "path",
            "hand-offs/s",
            "acquire p50 ms",
            "acquire p99 ms",
            "per-client min/max",
            "server cmds per acquisition",
        ],
    );
    let half = pb.sizes.run / 2;
    for &n in pb.sizes.contended.iter().filter(|&&n| n >= 8) {
        let mut halves = [Vec::new(), Vec::new()];
        for k in 0..2 {
            let (d, c) = in_turn(
                k,
                r,
                |r| contended::measure(pb, Kind::Redisson, n, r, half),
                |r| contended::measure(pb, Kind::RlockClient, n, r, half),
            );
            halves[0].push(d);
            halves[1].push(c);
        }
        let [d, c] = halves.map(contended::summarize);
        for (name, m) in [("redisson driver", &d), ("rlock client, Redisson mode", &c)] {
            t.row(vec![
                n.to_string(),
                name.into(),
                format!("{:.0}", m.rate),
                crate::report::ms(m.p50),
                crate::report::ms(m.p99),
                format!("{}/{}", m.min, m.max),
                format!("{:.2}", m.cmds_per_acq),
            ]);
        }
        r.target(
            &format!("client in Redisson mode vs Redisson driver, hand-offs/s, {n} clients"),
            format!("{:.2}×", c.rate / d.rate),
            "≥ 1.0×",
            c.rate / d.rate >= 1.0,
        );
    }
    r.tables.push(t);
}

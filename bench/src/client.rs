//! Scenario 6: what the `rlock` client costs over the raw `RLOCK.*` commands, each measured
//! against the raw commands over the same connection style: a blocking connection on the
//! calling thread for the sync API, a multiplexed tokio connection awaited by one task for the
//! async API (on a 2-worker runtime, as an application would run it). Uncontended: one caller,
//! acquire (lease, no wait) + release on distinct keys, unpipelined. Rounds alternate raw and
//! client and the best round of each counts (single runs swing on a shared machine). The
//! contended comparison (raw `BLOCK` clients vs the sync client) is in section 2.

use crate::bench::{in_turn, Bench};
use crate::protocols::owner;
use crate::report::{Report, Table};
use std::time::{Duration, Instant};

/// Slices per side and API.
const SLICES: u32 = 40;
const LEASE: Duration = Duration::from_secs(30);

pub fn run(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        &format!(
            "6. The rlock client vs raw RLOCK.* commands, same connection style (uncontended, unpipelined pairs/s, {SLICES} interleaved slices each)"
        ),
        &[
            "API",
            "raw pairs/s",
            "client pairs/s",
            "client / raw",
            "raw CPU µs/pair",
            "client CPU µs/pair",
        ],
    );
    let slice = b.sizes.run / SLICES;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // [sync, async][raw, client]
    let mut sums = [[Sum::default(); 2]; 2];
    for k in 0..SLICES {
        let tag = |what: &str| format!("c6:{what}:{k}");
        let (raw, client) = in_turn(
            k,
            &mut (),
            |_| sync_raw(b, &tag("sr"), slice),
            |_| sync_client(b, &tag("sc"), slice),
        );
        sums[0][0].add(raw);
        sums[0][1].add(client);
        let (raw, client) = in_turn(
            k,
            &mut (),
            |_| rt.block_on(async_raw(b, &tag("ar"), slice)),
            |_| rt.block_on(async_client(b, &tag("ac"), slice)),
        );
        sums[1][0].add(raw);
        sums[1][1].add(client);
    }
    for (api, [raw, client], goal) in [("sync", sums[0], 0.9), ("async (tokio)", sums[1], 0.8)] {
        let (raw, raw_cpu) = raw.rates();
        let (client, client_cpu) = client.rates();
        let ratio = client / raw;
        t.row(vec![
            api.into(),
            format!("{raw:.0}"),
            format!("{client:.0}"),
            format!("{ratio:.2}×"),
            format!("{raw_cpu:.1}"),
            format!("{client_cpu:.1}"),
        ]);
        r.target(
            &format!("client vs raw commands, {api}, uncontended pairs/s"),
            format!("{ratio:.2}×"),
            &format!("≥ {goal}×"),
            ratio >= goal,
        );
    }
    r.tables.push(t);
}

/// CPU time spent so far by this process' live threads (schedstat's first field, in ns).
fn process_cpu() -> Duration {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

/// Pairs done, the time they took, and this process' CPU time meanwhile.
#[derive(Clone, Copy, Default)]
struct Sum {
    pairs: u64,
    elapsed: Duration,
    cpu: Duration,
}

impl Sum {
    fn add(&mut self, o: Sum) {
        self.pairs += o.pairs;
        self.elapsed += o.elapsed;
        self.cpu += o.cpu;
    }

    /// Pairs per second, and CPU µs per pair.
    fn rates(&self) -> (f64, f64) {
        let n = self.pairs.max(1) as f64;
        (
            n / self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64() * 1e6 / n,
        )
    }
}

fn measured(pairs: u64, elapsed: Duration, cpu: Duration) -> Sum {
    Sum {
        pairs,
        elapsed,
        cpu,
    }
}

/// `pair(n)` run for `run`.
fn rate(run: Duration, mut pair: impl FnMut(u64)) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while start.elapsed() < run {
        pair(n);
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

fn sync_raw(b: &Bench, prefix: &str, run: Duration) -> Sum {
    let mut c = b.conn();
    let who = owner(60);
    rate(run, |n| {
        let key = format!("{prefix}:{n}");
        let got: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
            .arg(&key)
            .arg(&who)
            .arg(LEASE.as_millis() as u64)
            .query(&mut c)
            .unwrap();
        assert!(got.is_some(), "uncontended acquire failed");
        let _: i64 = redis::cmd("RLOCK.RELEASE")
            .arg(&key)
            .arg(&who)
            .query(&mut c)
            .unwrap();
    })
}

fn sync_client(b: &Bench, prefix: &str, run: Duration) -> Sum {
    rate(run, |n| {
        let lock = b.client.lock(format!("{prefix}:{n}"));
        assert!(lock.try_lock_with(Duration::ZERO, LEASE).unwrap());
        lock.unlock().unwrap();
    })
}

/// Like [`rate`], for an async pair.
async fn rate_async<F: std::future::Future<Output = ()>>(
    run: Duration,
    mut pair: impl FnMut(u64) -> F,
) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while start.elapsed() < run {
        pair(n).await;
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

async fn async_raw(b: &Bench, prefix: &str, run: Duration) -> Sum {
    let c = redis::Client::open(b.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let who = owner(61);
    rate_async(run, |n| {
        let (mut c, who) = (c.clone(), &who);
        async move {
            let key = format!("{prefix}:{n}");
            let got: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
                .arg(&key)
                .arg(who)
                .arg(LEASE.as_millis() as u64)
                .query_async(&mut c)
                .await
                .unwrap();
            assert!(got.is_some(), "uncontended acquire failed");
            let _: i64 = redis::cmd("RLOCK.RELEASE")
                .arg(&key)
                .arg(who)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    })
    .await
}

async fn async_client(b: &Bench, prefix: &str, run: Duration) -> Sum {
    let who = b.client.new_owner();
    rate_async(run, |n| {
        let lock = b
            .client
            .async_lock(format!("{prefix}:{n}"))
            .with_owner(who.clone());
        async move {
            assert!(lock.try_lock_with(Duration::ZERO, LEASE).await.unwrap());
            lock.unlock().await.unwrap();
        }
    })
    .await
}

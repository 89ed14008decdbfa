//! Scenario 6: what the `rlock` client costs over the raw `RLOCK.*` commands, each measured
//! against the raw commands over the same connection style: a blocking connection on the
//! calling thread for the sync API, a multiplexed tokio connection awaited by one task for the
//! async API (on a 2-worker runtime, as an application would run it). Uncontended: one caller,
//! acquire (lease, no wait) + release on distinct keys, unpipelined. Rounds alternate raw and
//! client and the best round of each counts (single runs swing on a shared machine). The
//! contended comparison (raw `BLOCK` clients vs the sync client) is in section 2.

use crate::bench::Bench;
use crate::protocols::owner;
use crate::report::{Report, Table};
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;
const LEASE: Duration = Duration::from_secs(30);

pub fn run(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        &format!(
            "6. The rlock client vs raw RLOCK.* commands, same connection style (uncontended, unpipelined pairs/s, best of {ROUNDS} interleaved rounds)"
        ),
        &["API", "raw pairs/s", "client pairs/s", "client / raw"],
    );
    let run = b.sizes.run / ROUNDS as u32;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rates = [[0f64; 2]; 2]; // [sync, async][raw, client]
    for round in 0..ROUNDS {
        let tag = |what: &str| format!("c6:{what}:{round}");
        rates[0][0] = rates[0][0].max(sync_raw(b, &tag("sr"), run));
        rates[0][1] = rates[0][1].max(sync_client(b, &tag("sc"), run));
        rates[1][0] = rates[1][0].max(rt.block_on(async_raw(b, &tag("ar"), run)));
        rates[1][1] = rates[1][1].max(rt.block_on(async_client(b, &tag("ac"), run)));
    }
    for (api, [raw, client], goal) in [("sync", rates[0], 0.9), ("async (tokio)", rates[1], 0.8)] {
        let ratio = client / raw;
        t.row(vec![
            api.into(),
            format!("{raw:.0}"),
            format!("{client:.0}"),
            format!("{ratio:.2}×"),
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

/// Pairs per second of `pair(n)` run for `run`.
fn rate(run: Duration, mut pair: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < run {
        pair(n);
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn sync_raw(b: &Bench, prefix: &str, run: Duration) -> f64 {
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

fn sync_client(b: &Bench, prefix: &str, run: Duration) -> f64 {
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
) -> f64 {
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < run {
        pair(n).await;
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn async_raw(b: &Bench, prefix: &str, run: Duration) -> f64 {
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

async fn async_client(b: &Bench, prefix: &str, run: Duration) -> f64 {
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

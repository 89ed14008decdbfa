//! Scenario 4: one client holding many locks in watchdog mode; what does one renewal period
//! cost? Both sides are counted from their traffic through a counting proxy ([`Proxy`]):
//!
//! - rlock: the `rlock` client itself, its watchdog set short, holding N locks taken without a
//!   lease; whatever its watchdog sends in a period is counted: round trips (flights: commands
//!   sent from a moment no reply was outstanding until all were answered), commands, and the
//!   server time of `RLOCK.RENEW` (INFO commandstats over exactly those periods, checked
//!   against the calls the proxy saw);
//! - Redisson: its `LockTask`'s renewal script for 100 locks per EVAL, all batches sent at once
//!   as Redisson sends them asynchronously (a pipeline), counted the same way.

use crate::bench::{commandstats, reset_stats, Bench};
use crate::protocols::owner;
use crate::proxy::{Flight, Proxy};
use crate::report::{ms, Report, Table};
use redis::Value;
use rlock_tests::redisson;
use std::time::{Duration, Instant};

/// Redisson's `lockWatchdogBatchSize`.
const REDISSON_BATCH: u64 = 100;
const PERIODS: usize = 3;
/// The client's watchdog timeout: renewals every third of it (1 s), long enough for a period
/// of 10,000 renewals through the proxy to end well before the next one starts.
const WATCHDOG: Duration = Duration::from_secs(3);

/// What one protocol's renewal periods measured, per period.
struct Period {
    round_trips: f64,
    commands: f64,
    wall: Duration,
    server_us: f64,
}

pub fn run(b: &Bench, r: &mut Report) {
    let n = b.sizes.watchdog_locks;
    let port: u16 = b
        .url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port of the bench server's url");
    let proxy = Proxy::start(port);
    let rl = client_watchdog(b, &proxy, n);
    let rs = redisson_renewals(b, &proxy, n);

    let mut t = Table::new(
        &format!(
            "4. Watchdog: one renewal period for {n} locks (mean of {PERIODS} periods; round trips and commands counted by a proxy from the traffic, server time from INFO commandstats, wall time as the proxy saw it)"
        ),
        &["protocol", "commands", "round trips", "wall ms", "server ms"],
    );
    for (name, p) in [
        ("rlock (the client's watchdog)".to_string(), &rl),
        (
            format!("redisson (LockTask, {REDISSON_BATCH} per EVAL, pipelined)"),
            &rs,
        ),
    ] {
        t.row(vec![
            name,
            format!("{:.0}", p.commands),
            format!("{:.2}", p.round_trips),
            ms(p.wall),
            format!("{:.2}", p.server_us / 1000.0),
        ]);
    }
    r.tables.push(t);
    r.target(
        &format!("watchdog round trips per period, {n} locks"),
        format!("{:.2}", rl.round_trips),
        "≤ 1",
        rl.round_trips <= 1.0,
    );
    r.target(
        &format!("watchdog server time per period, {n} locks"),
        format!(
            "{:.2} ms ({:.2}× Redisson's)",
            rl.server_us / 1000.0,
            rl.server_us / rs.server_us
        ),
        "bounded (≤ Redisson's)",
        rl.server_us <= rs.server_us,
    );
}

/// The `rlock` client through the proxy, holding `n` locks in watchdog mode: its renewal
/// periods as they happen.
fn client_watchdog(b: &Bench, proxy: &Proxy, n: u64) -> Period {
    let mut conn = b.conn();
    let client = rlock_client::Client::builder()
        .url(proxy.url())
        .watchdog_timeout(WATCHDOG)
        .build()
        .expect("rlock client");
    let interval = client.config().renewal_interval();
    let locks: Vec<rlock_client::Lock> =
        (0..n).map(|i| client.lock(format!("wd:rl:{i}"))).collect();
    for l in &locks {
        // No lease: the watchdog renews it.
        l.lock().expect("take a watchdog lock");
    }
    assert_eq!(client.renewing_count(), n as usize);
    let taken = Instant::now();
    // A period ends once nothing was renewed for half an interval (the next one starts an
    // interval after it began). The first period that starts once every lock is held only
    // lines up the count: stats are reset after it.
    let limit = interval * 3;
    let first = std::iter::from_fn(|| Some(proxy.next_flight_with("rlock.renew", limit)))
        .find(|f| f.start >= taken)
        .unwrap();
    let _warm = period_from(proxy, first, interval);
    reset_stats(&mut conn);
    let periods: Vec<Vec<Flight>> = (0..PERIODS)
        .map(|_| {
            let f = proxy.next_flight_with("rlock.renew", limit);
            period_from(proxy, f, interval)
        })
        .collect();
    let (calls, usec) = commandstats(&mut conn)
        .get("rlock.renew")
        .copied()
        .unwrap_or((0, 0));
    drop(client);
    // Release the keys (the client is gone, so its watchdog is too).
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("DEL").arg(format!("wd:rl:{i}")).ignore();
        }
        let _: () = pipe.query(&mut conn).unwrap();
    }
    summarize(&periods, "rlock.renew", calls, usec, n)
}

/// Flights of one period, from its first (`first`) until nothing calls `rlock.renew` for
/// half an interval.
fn period_from(proxy: &Proxy, first: Flight, interval: Duration) -> Vec<Flight> {
    let mut flights = vec![first];
    while let Some(f) = proxy.flight_within("rlock.renew", interval / 2) {
        flights.push(f);
    }
    flights
}

/// Per-period figures from the flights of each period, and the server's count of `name` over
/// them (which must be the calls the proxy saw: nothing else ran it).
fn summarize(periods: &[Vec<Flight>], name: &str, calls: u64, usec: u64, n: u64) -> Period {
    let seen: u64 = periods.iter().flatten().map(|f| f.calls_of(name)).sum();
    assert_eq!(calls, seen, "{name}: server's calls vs the proxy's");
    for p in periods {
        let per: u64 = p.iter().map(|f| f.calls_of(name)).sum();
        assert!(per >= n, "{name}: a period renewed {per} of {n} locks");
    }
    let k = periods.len() as f64;
    let wall: Duration = periods
        .iter()
        .map(|p| p.last().unwrap().end - p[0].start)
        .sum();
    Period {
        round_trips: periods.iter().map(Vec::len).sum::<usize>() as f64 / k,
        commands: periods
            .iter()
            .flatten()
            .map(|f| f.calls.values().sum::<u64>())
            .sum::<u64>() as f64
            / k,
        wall: wall / periods.len() as u32,
        server_us: usec as f64 / k,
    }
}

/// Redisson's renewal of `n` locks, one period at a time, sent through the proxy.
fn redisson_renewals(b: &Bench, proxy: &Proxy, n: u64) -> Period {
    let mut conn = b.conn();
    let who = owner(7);
    let key = |i: u64| format!("wd:rs:{i}");
    // Take the locks (Redisson's layout is the same, so both renew the same kind of keys).
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            pipe.cmd("RLOCK.ACQUIRE").arg(key(i)).arg(&who).arg(30_000);
        }
        let _: Vec<Value> = pipe.query(&mut conn).unwrap();
    }
    let renew_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(redisson::RENEW)
        .query(&mut conn)
        .unwrap();
    let mut through = crate::protocols::connection(&proxy.url());
    reset_stats(&mut conn);
    let mut periods = Vec::new();
    for _ in 0..PERIODS {
        let mut pipe = redis::pipe();
        for start in (0..n).step_by(REDISSON_BATCH as usize) {
            let keys: Vec<String> = (start..(start + REDISSON_BATCH).min(n)).map(key).collect();
            let c = pipe
                .cmd("EVALSHA")
                .arg(&renew_sha)
                .arg(keys.len())
                .arg(&keys)
                .arg(30_000);
            for _ in &keys {
                c.arg(&who);
            }
        }
        let replies: Vec<Value> = pipe.query(&mut through).expect("renewal");
        assert_eq!(replies.len() as u64, n.div_ceil(REDISSON_BATCH));
        // Every flight the proxy completed for it (it reports each before forwarding its last
        // reply, so they are all in by now).
        periods.push(
            proxy
                .drain()
                .into_iter()
                .filter(|f| f.calls_of("evalsha") > 0)
                .collect::<Vec<_>>(),
        );
    }
    let (calls, usec) = commandstats(&mut conn)
        .get("evalsha")
        .copied()
        .unwrap_or((0, 0));
    summarize(&periods, "evalsha", calls, usec, n.div_ceil(REDISSON_BATCH))
}

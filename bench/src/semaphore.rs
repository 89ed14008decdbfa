//! Scenario 6: the semaphore, rlock vs Redisson's protocol.
//! - Contended: 16 clients on 4 permits, each looping acquire 1 → critical section → release;
//!   and a mix where one of them asks for 3 at a time (Redisson's semaphore lets it starve).
//! - Expiring permits: a permit leased for 200 ms and never released; how long after its lease
//!   ends does a queued waiter get it?

use crate::bench::{commands_executed, reset_stats, Bench};
use crate::exclusion::{critical, Permits};
use crate::report::{jain, ms, percentile, rounds, Bar, Report, Table};
use crate::sem_protocols::{Scripts, SemClient, Side};
use rlock_tests::redisson::semaphore as rs;
use std::time::{Duration, Instant};

const CLIENTS: usize = 16;
const PERMITS: i64 = 4;
const BIG: i64 = 3;
const LEASE_MS: i64 = 200;

pub fn run(b: &Bench, r: &mut Report) {
    let scripts = Scripts::load(&mut b.conn());
    contended(b, r, &scripts);
    expiring(b, r, &scripts);
}

/// What one contended run measured.
struct Measured {
    rate: f64,
    counts: Vec<u64>,
    p50: Duration,
    p99: Duration,
    cmds_per_acq: f64,
    /// The 3-permit client (mix only): acquisitions, and its waits (the last one cut off by the
    /// end of the run when it never came).
    big: Option<(u64, Vec<Duration>)>,
}

fn contended(b: &Bench, r: &mut Report, scripts: &Scripts) {
    let mut t = Table::new(
        &format!("6a. Contended semaphore: {CLIENTS} clients on {PERMITS} permits (acquire, critical section, release)"),
        &[
            "requests",
            "protocol",
            "acquisitions/s",
            "p50 ms",
            "p99 ms",
            "per-client min/max",
            "Jain",
            "server cmds per acquisition",
            "3-permit client: acquisitions",
            "3-permit client: p99 wait ms",
        ],
    );
    for mix in [false, true] {
        let results: Vec<(Side, Measured)> = [Side::Rlock, Side::Redisson]
            .into_iter()
            .map(|side| (side, measure(b, r, scripts, side, mix)))
            .collect();
        for (side, m) in &results {
            let (big_n, big_p99) = match &m.big {
                Some((n, waits)) => {
                    let mut w = waits.clone();
                    let p99 = ms(percentile(&mut w, 99.0));
                    (
                        n.to_string(),
                        if *n == 0 {
                            format!("≥ {p99} (starved)")
                        } else {
                            p99
                        },
                    )
                }
                None => ("-".into(), "-".into()),
            };
            t.row(vec![
                if mix { "15 × 1 + 1 × 3" } else { "16 × 1" }.into(),
                side.name().into(),
                format!("{:.0}", m.rate),
                ms(m.p50),
                ms(m.p99),
                format!(
                    "{}/{}",
                    m.counts.iter().min().unwrap(),
                    m.counts.iter().max().unwrap()
                ),
                format!("{:.3}", jain(&m.counts)),
                format!("{:.2}", m.cmds_per_acq),
                big_n,
                big_p99,
            ]);
            r.bars.push(Bar {
                group: format!(
                    "semaphore {}, acquisitions/s",
                    if mix { "mix" } else { "16 × 1" }
                ),
                series: side.name().into(),
                value: m.rate,
            });
        }
        let (rl, rs) = (&results[0].1, &results[1].1);
        if !mix {
            let ratio = rl.rate / rs.rate;
            r.target(
                "semaphore acquisitions/s vs Redisson (16 clients, 4 permits)",
                format!("{ratio:.2}×"),
                "≥ 3×",
                ratio >= 3.0,
            );
            let j = jain(&rl.counts);
            r.target(
                "semaphore Jain's fairness (16 clients, 4 permits)",
                format!("{j:.3}"),
                "≥ 0.99",
                j >= 0.99,
            );
        } else {
            let p99 = |m: &Measured| {
                let (n, w) = m.big.clone().unwrap();
                let mut w = w;
                (n, percentile(&mut w, 99.0))
            };
            let ((rn, rp), (sn, sp)) = (p99(rl), p99(rs));
            r.target(
                "3-permit requester among 1-permit ones: p99 wait, rlock vs Redisson",
                format!(
                    "{} ms ({rn} acquisitions) vs {}{} ms ({sn})",
                    ms(rp),
                    if sn == 0 { "≥ " } else { "" },
                    ms(sp)
                ),
                "served (FIFO), below Redisson's",
                rn > 0 && (sn == 0 || rp < sp),
            );
        }
    }
    r.tables.push(t);
}

fn measure(b: &Bench, r: &mut Report, scripts: &Scripts, side: Side, mix: bool) -> Measured {
    let key = format!("sem:{}:{}", side.name(), if mix { "mix" } else { "ones" });
    let mut stats = b.conn();
    let _: i64 = redis::cmd("RSEM.TRYSETPERMITS")
        .arg(&key)
        .arg(PERMITS)
        .query(&mut stats)
        .unwrap();
    // Permits held right now: more than exist is a bug.
    let check = Permits::new(PERMITS);
    let clients: Vec<SemClient> = (0..CLIENTS)
        .map(|_| SemClient::new(side, &b.url, scripts))
        .collect();
    reset_stats(&mut stats);
    let start = Instant::now();
    let end = start + b.sizes.run;
    let results: Vec<(u64, Vec<Duration>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                let (key, check) = (&key, &check);
                let permits = if mix && i == 0 { BIG } else { 1 };
                scope.spawn(move || {
                    let mut lat = Vec::new();
                    let mut count = 0u64;
                    loop {
                        let left = end.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        let t0 = Instant::now();
                        if !c.acquire(key, permits, left) {
                            // Cut off by the end of the run: a lower bound of this wait.
                            if permits == BIG {
                                lat.push(t0.elapsed());
                            }
                            break;
                        }
                        // Out from the reply until the release is sent.
                        let lease = check.take(permits);
                        lat.push(t0.elapsed());
                        critical();
                        drop(lease);
                        c.release(key, permits);
                        count += 1;
                    }
                    (count, lat)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();
    let cmds = commands_executed(&mut stats);
    r.violations += check.violations();
    let counts: Vec<u64> = results.iter().map(|(c, _)| *c).collect();
    let total: u64 = counts.iter().sum();
    let big = mix.then(|| (results[0].0, results[0].1.clone()));
    let mut lat: Vec<Duration> = results
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !(mix && *i == 0))
        .flat_map(|(_, (_, l))| l)
        .collect();
    Measured {
        rate: total as f64 / elapsed.as_secs_f64(),
        p50: percentile(&mut lat, 50.0),
        p99: percentile(&mut lat, 99.0),
        cmds_per_acq: cmds as f64 / total.max(1) as f64,
        counts,
        big,
    }
}

fn expiring(b: &Bench, r: &mut Report, scripts: &Scripts) {
    let mut t = Table::new(
        &format!("6b. Expiring permit: a permit leased for {LEASE_MS} ms is never released; lease end → queued waiter's grant"),
        &["protocol", "rounds", "p50 ms", "p99 ms", "max ms"],
    );
    let mut conn = b.conn();
    for side in [Side::Rlock, Side::Redisson] {
        let mut holder = SemClient::new(side, &b.url, scripts);
        let mut waiter = SemClient::new(side, &b.url, scripts);
        let mut delays = Vec::new();
        let (mut round, mut missed) = (0, 0);
        while delays.len() < b.sizes.expiry_rounds {
            round += 1;
            let key = format!("semexp:{}:{round}", side.name());
            let _: i64 = redis::cmd("RSEM.TRYSETPERMITS")
                .arg(&key)
                .arg(1)
                .query(&mut conn)
                .unwrap();
            assert!(holder.lease(&key, LEASE_MS, Duration::ZERO));
            let lease: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                .arg(rs::timeouts(&key))
                .arg(0)
                .arg(0)
                .arg("WITHSCORES")
                .query(&mut conn)
                .unwrap();
            // Empty: the lease is over and its permit back before this read came (a stalled
            // moment of a busy machine): the round has nothing to time; another runs.
            let Some(&(_, lease_end)) = lease.first() else {
                missed += 1;
                assert!(
                    missed <= b.sizes.expiry_rounds,
                    "{key}: no permit lease recorded"
                );
                continue;
            };
            assert!(waiter.lease(&key, 30_000, Duration::from_secs(10)));
            // The server's and this process's clocks are one clock (same machine).
            let granted = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
                * 1000.0;
            delays.push(Duration::from_secs_f64(
                (granted - lease_end).max(0.0) / 1000.0,
            ));
        }
        let max = *delays.iter().max().unwrap();
        let p99 = percentile(&mut delays, 99.0);
        t.row(vec![
            side.name().into(),
            rounds(delays.len(), missed),
            ms(percentile(&mut delays, 50.0)),
            ms(p99),
            ms(max),
        ]);
        if side == Side::Rlock {
            r.target(
                "expiring permit: lease end → queued waiter's grant, p99",
                format!("{} ms", ms(p99)),
                "≤ 15 ms",
                p99 <= Duration::from_millis(15),
            );
        }
    }
    r.tables.push(t);
}

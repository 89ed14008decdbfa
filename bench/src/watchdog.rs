//! Scenario 4: one client holding many locks in watchdog mode; what does one renewal period
//! cost? rlock renews every lock with one pipeline of `RLOCK.RENEW` (what the client's watchdog
//! sends); Redisson's `LockTask` sends its renewal script for 100 locks per EVAL.

use crate::bench::{commandstats, reset_stats, Bench};
use crate::protocols::owner;
use crate::report::{ms, Report, Table};
use redis::Value;
use rlock_tests::redisson;
use std::time::{Duration, Instant};

/// Redisson's `lockWatchdogBatchSize`.
const REDISSON_BATCH: u64 = 100;
const PERIODS: u32 = 3;

pub fn run(b: &Bench, r: &mut Report) {
    let n = b.sizes.watchdog_locks;
    let mut conn = b.conn();
    let who = owner(7);
    let key = |p: &str, i: u64| format!("wd:{p}:{i}");

    // Take the locks (Redisson's layout is the same, so both renew the same kind of keys).
    for p in ["rl", "rs"] {
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                pipe.cmd("RLOCK.ACQUIRE")
                    .arg(key(p, i))
                    .arg(&who)
                    .arg(30_000);
            }
            let _: Vec<Value> = pipe.query(&mut conn).unwrap();
        }
    }
    let renew_sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(redisson::RENEW)
        .query(&mut conn)
        .unwrap();

    let mut period = |build: &dyn Fn(&mut redis::Pipeline), stat: &str| -> (usize, Duration, f64) {
        let mut walls = Duration::ZERO;
        let mut server_us = 0.0;
        let mut commands = 0;
        for _ in 0..PERIODS {
            reset_stats(&mut conn);
            let mut pipe = redis::pipe();
            build(&mut pipe);
            commands = pipe.cmd_iter().count();
            let t0 = Instant::now();
            let replies: Vec<Value> = pipe.query(&mut conn).expect("renewal");
            walls += t0.elapsed();
            assert_eq!(replies.len(), commands);
            let (_, usec) = commandstats(&mut conn)[stat];
            server_us += usec as f64;
        }
        (commands, walls / PERIODS, server_us / PERIODS as f64)
    };
    let rl = period(
        &|pipe| {
            for i in 0..n {
                pipe.cmd("RLOCK.RENEW")
                    .arg(key("rl", i))
                    .arg(&who)
                    .arg(30_000);
            }
        },
        "rlock.renew",
    );
    let rs = period(
        &|pipe| {
            for start in (0..n).step_by(REDISSON_BATCH as usize) {
                let keys: Vec<String> = (start..(start + REDISSON_BATCH).min(n))
                    .map(|i| key("rs", i))
                    .collect();
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
        },
        "evalsha",
    );

    let mut t = Table::new(
        &format!("4. Watchdog: one renewal period for {n} locks (mean of {PERIODS} periods)"),
        &[
            "protocol",
            "commands",
            "round trips",
            "wall ms",
            "server ms",
        ],
    );
    t.row(vec![
        "rlock (client watchdog)".into(),
        rl.0.to_string(),
        "1".into(),
        ms(rl.1),
        format!("{:.2}", rl.2 / 1000.0),
    ]);
    t.row(vec![
        format!("redisson (LockTask, {REDISSON_BATCH} per EVAL, pipelined)"),
        rs.0.to_string(),
        "1".into(),
        ms(rs.1),
        format!("{:.2}", rs.2 / 1000.0),
    ]);
    r.tables.push(t);
    r.target(
        &format!("watchdog round trips per period, {n} locks"),
        "1".into(),
        "≤ 1",
        true,
    );
    r.target(
        &format!("watchdog server time per period, {n} locks"),
        format!("{:.2} ms ({:.2}× Redisson's)", rl.2 / 1000.0, rl.2 / rs.2),
        "bounded (≤ Redisson's)",
        rl.2 <= rs.2,
    );
}

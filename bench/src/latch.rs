//! Scenario 7: latch fan-out. N waiters wait on one count-down latch; one countdown opens it.
//! Measured: the time from the countdown until the last waiter has its answer, and what the
//! server executed (commands, counting those a script runs) and sent for the wake-up (rlock:
//! the countdown and N replies; Redisson: the countdown script, a message to every subscriber,
//! every waiter's GET and its UNSUBSCRIBE).

use crate::bench::{commandstats, info_int, reset_stats, Bench};
use crate::report::{ms, percentile, Bar, Report, Table};
use crate::sem_protocols::{count_down, LatchWaiter, Scripts, Side};
use rlock_tests::redisson::latch as rl;
use rlock_tests::wait_until;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Waiter threads do little: a small stack each keeps 1,000 of them cheap.
const STACK: usize = 256 * 1024;

struct Measured {
    last: Duration,
    p50: Duration,
    cmds: u64,
    bytes: i64,
}

pub fn run(b: &Bench, r: &mut Report) {
    let scripts = Scripts::load(&mut b.conn());
    let n = b.sizes.waiters;
    let mut t = Table::new(
        &format!("7. Latch fan-out: {n} waiters on one latch, one countdown opens it"),
        &[
            "protocol",
            "last waiter answered, ms",
            "p50 ms",
            "server commands",
            "bytes the server sent",
        ],
    );
    let results: Vec<(Side, Measured)> = [Side::Rlock, Side::Redisson]
        .into_iter()
        .map(|side| (side, measure(b, &scripts, side, n)))
        .collect();
    for (side, m) in &results {
        t.row(vec![
            side.name().into(),
            ms(m.last),
            ms(m.p50),
            m.cmds.to_string(),
            m.bytes.to_string(),
        ]);
        r.bars.push(Bar {
            group: format!("latch fan-out ({n}), waiters answered/s"),
            series: side.name().into(),
            value: n as f64 / m.last.as_secs_f64().max(1e-6),
        });
    }
    let (rl, rs) = (&results[0].1, &results[1].1);
    let ratio = rs.last.as_secs_f64() / rl.last.as_secs_f64().max(1e-6);
    r.target(
        &format!("latch fan-out ({n} waiters): last waiter answered, vs Redisson"),
        format!(
            "{} ms vs {} ms ({ratio:.2}× sooner)",
            ms(rl.last),
            ms(rs.last)
        ),
        "sooner than Redisson",
        ratio > 1.0,
    );
    r.target(
        &format!("latch fan-out ({n} waiters): server commands and bytes sent"),
        format!(
            "{} cmds / {} B vs {} cmds / {} B",
            rl.cmds, rl.bytes, rs.cmds, rs.bytes
        ),
        "one command (the countdown), fewer bytes",
        rl.cmds == 1 && rl.bytes < rs.bytes,
    );
    r.tables.push(t);
}

/// Commands run since the stats were reset, not counting this benchmark's own (INFO, CONFIG
/// RESETSTAT).
fn wake_up_commands(conn: &mut redis::Connection) -> u64 {
    commandstats(conn)
        .iter()
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .map(|(_, (calls, _))| calls)
        .sum()
}

fn net_out(conn: &mut redis::Connection) -> i64 {
    info_int(conn, "stats", "total_net_output_bytes")
}

fn measure(b: &Bench, scripts: &Scripts, side: Side, n: usize) -> Measured {
    let key = format!("latch:{}", side.name());
    let mut conn = b.conn();
    let _: i64 = redis::cmd("RLATCH.TRYSETCOUNT")
        .arg(&key)
        .arg(1)
        .query(&mut conn)
        .unwrap();
    let waiters: Vec<LatchWaiter> = (0..n).map(|_| LatchWaiter::new(side, &b.url)).collect();
    let parked = AtomicUsize::new(0);
    let (answers, started, cmds, bytes) = std::thread::scope(|scope| {
        let handles: Vec<_> = waiters
            .into_iter()
            .map(|mut w| {
                let (key, parked) = (&key, &parked);
                std::thread::Builder::new()
                    .stack_size(STACK)
                    .spawn_scoped(scope, move || {
                        w.wait(key, || {
                            parked.fetch_add(1, SeqCst);
                        })
                    })
                    .expect("spawn a waiter")
            })
            .collect();
        // Everyone waits: parked here, and (rlock) blocked on the server or (Redisson)
        // subscribed.
        wait_until(Duration::from_secs(60), "every waiter parked", || {
            parked.load(SeqCst) == n
                && match side {
                    Side::Rlock => info_int(&mut conn, "clients", "blocked_clients") == n as i64,
                    Side::Redisson => {
                        let subs: (String, i64) = redis::cmd("PUBSUB")
                            .arg("NUMSUB")
                            .arg(rl::channel(&key))
                            .query(&mut conn)
                            .unwrap();
                        subs.1 == n as i64
                    }
                }
        });
        reset_stats(&mut conn);
        // The size of one INFO stats reply, to take out of the byte count below.
        let a = net_out(&mut conn);
        let before = net_out(&mut conn);
        let info_reply = before - a;
        let started = Instant::now();
        count_down(side, &mut conn, scripts, &key);
        let answers: Vec<Instant> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let bytes = net_out(&mut conn) - before - info_reply;
        (answers, started, wake_up_commands(&mut conn), bytes)
    });
    let mut took: Vec<Duration> = answers.iter().map(|a| *a - started).collect();
    Measured {
        last: *took.iter().max().unwrap(),
        p50: percentile(&mut took, 50.0),
        cmds,
        bytes,
    }
}

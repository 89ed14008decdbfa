//! Scenario 2d: what deadlock detection costs. It runs only when a request is about to wait, so
//! the uncontended path pays nothing; this measures the two places it can show:
//! - contended hand-offs (N raw `BLOCK` clients on one lock: every acquire but the holder's
//!   waits, and is checked) with `rlock.deadlock-detection` on and off, rounds interleaved;
//! - one check among many waits: W requests queued (through a session, no connection each)
//!   on L held locks, then the server time of a further waiting acquire with detection on and
//!   off (INFO commandstats), the difference being the check.

use crate::bench::{commandstats, reset_stats, Bench};
use crate::handoff::pass_around;
use crate::protocols::Kind;
use crate::report::{Report, Table};
use redis::Connection;

const ROUNDS: u32 = 3;

fn detection(c: &mut Connection, on: bool) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("rlock.deadlock-detection")
        .arg(if on { "yes" } else { "no" })
        .query(c)
        .expect("CONFIG SET rlock.deadlock-detection");
}

pub fn run(b: &Bench, r: &mut Report) {
    let mut c = b.conn();
    contended(b, r, &mut c);
    one_check(b, r, &mut c);
    detection(&mut c, true);
}

fn contended(b: &Bench, r: &mut Report, c: &mut Connection) {
    let n = *b.sizes.contended.last().expect("a client count");
    let run = b.sizes.run / ROUNDS;
    let mut best = [0f64, 0f64];
    for round in 0..ROUNDS {
        for (i, on) in [true, false].into_iter().enumerate() {
            detection(c, on);
            let clients = (0..n).map(|k| b.protocol(Kind::Rlock, k)).collect();
            let key = format!("deadlock:{n}:{round}:{on}");
            best[i] = best[i].max(pass_around(r, clients, &key, run).rate);
        }
    }
    let ratio = best[0] / best[1];
    let mut t = Table::new(
        &format!(
            "2d. Deadlock detection: {n} raw BLOCK clients on one lock, detection on vs off (hand-offs/s, best of {ROUNDS} interleaved rounds)"
        ),
        &["detection on", "detection off", "on / off"],
    );
    t.row(vec![
        format!("{:.0}", best[0]),
        format!("{:.0}", best[1]),
        format!("{ratio:.2}×"),
    ]);
    r.tables.push(t);
    r.target(
        &format!("contended hand-offs/s with deadlock detection on vs off, {n} clients"),
        format!("{ratio:.2}×"),
        "≥ 0.95×",
        ratio >= 0.95,
    );
}

fn one_check(b: &Bench, r: &mut Report, c: &mut Connection) {
    let (waiters, locks) = if b.sizes.waiters >= 1_000 {
        (10_000usize, 1_000usize)
    } else {
        (1_000, 100)
    };
    let probes = 2_000usize;
    let _: redis::Value = redis::cmd("RSESSION.OPEN")
        .arg("bench-deadlock")
        .arg(60_000)
        .query(c)
        .expect("RSESSION.OPEN");
    let mut pipe = redis::pipe();
    for l in 0..locks {
        pipe.cmd("RLOCK.ACQUIRE")
            .arg(format!("dl:{l}"))
            .arg(format!("holder:{l}"))
            .arg(600_000)
            .ignore();
    }
    for w in 0..waiters {
        pipe.cmd("RLOCK.ACQUIRE")
            .arg(format!("dl:{}", w % locks))
            .arg(format!("waiter:{w}"))
            .arg(600_000)
            .arg("SESSION")
            .arg("bench-deadlock")
            .arg("QUEUE")
            .arg(w)
            .arg(0)
            .ignore();
    }
    let _: () = pipe.query(c).expect("queue the waiters");
    // A further waiting acquire per probe (a new owner on some lock), then withdrawn.
    let mut per_call = [0f64; 2];
    for (i, on) in [true, false, true, false].into_iter().enumerate() {
        detection(c, on);
        reset_stats(c);
        let mut pipe = redis::pipe();
        for p in 0..probes {
            let id = 1_000_000 + i * probes + p;
            pipe.cmd("RLOCK.ACQUIRE")
                .arg(format!("dl:{}", (p * 7) % locks))
                .arg(format!("probe:{id}"))
                .arg(600_000)
                .arg("SESSION")
                .arg("bench-deadlock")
                .arg("QUEUE")
                .arg(id)
                .arg(0)
                .ignore();
        }
        let _: () = pipe.query(c).expect("probes");
        let stats = commandstats(c);
        let (calls, usec) = stats.get("rlock.acquire").copied().unwrap_or((1, 0));
        let us = usec as f64 / calls.max(1) as f64;
        let slot = &mut per_call[i % 2];
        *slot = if *slot == 0.0 { us } else { slot.min(us) };
        let mut cancel = redis::pipe();
        for p in 0..probes {
            cancel
                .cmd("RSESSION.CANCEL")
                .arg("bench-deadlock")
                .arg(1_000_000 + i * probes + p)
                .ignore();
        }
        let _: () = cancel.query(c).expect("withdraw the probes");
    }
    let _: redis::Value = redis::cmd("RSESSION.CLOSE")
        .arg("bench-deadlock")
        .query(c)
        .expect("RSESSION.CLOSE");
    let mut t = Table::new(
        &format!(
            "2e. One deadlock check among {waiters} queued waiters on {locks} held locks: server time of a waiting acquire (INFO commandstats, best of 2)"
        ),
        &["detection on µs", "detection off µs", "cost of the check µs"],
    );
    t.row(vec![
        format!("{:.2}", per_call[0]),
        format!("{:.2}", per_call[1]),
        format!("{:.2}", per_call[0] - per_call[1]),
    ]);
    r.tables.push(t);
}

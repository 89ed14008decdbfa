//! Scenario 10: what observing costs the hot path. `RLOCK.TOP HELD` and the hold-time
//! percentiles come from a table of live holds that every lock's acquire and release update
//! (`module/src/observe/`); `rlock.top-max-holds 0` turns that table off. The same workloads run
//! with it on and off on one server, in slices of the order on, off, off, on (drift in the
//! machine's load weighs on both settings alike), and the two settings' rates are compared with
//! how far one setting's own repeats differ: the noise the comparison has to beat. The server
//! and the benchmark run on CPUs of their own (see `placement`).

use crate::bench::Bench;
use crate::exclusion::Exclusion;
use crate::placement::{self, Placement};
use crate::protocols::Kind;
use crate::report::{Report, Table};
use std::time::{Duration, Instant};

const CONFIG: &str = "rlock.top-max-holds";

pub fn run(b: &Bench, r: &mut Report) {
    let mut conn = b.conn();
    // The server on one CPU, the benchmark on another (`placement`: left to the scheduler, the
    // rates moved with where each slice ran, and the noise hid a 5 % cost).
    let server = placement::server_pid(&mut conn);
    let placed = placement::pin(Placement::Apart, server);
    let where_ = if placed.is_some() {
        Placement::Apart
    } else {
        Placement::Unpinned
    };
    let (_, was): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg(CONFIG)
        .query(&mut conn)
        .expect("CONFIG GET rlock.top-max-holds");
    let mut t = Table::new(
        &format!(
            "10. Hold tracking on vs off (rlock.top-max-holds 100000 vs 0), slices in the order on, off, off, on, CPUs {}",
            where_.label()
        ),
        &[
            "workload",
            "on, pairs/s",
            "off, pairs/s",
            "on / off, median (range)",
            "noise: one setting's repeats, median",
        ],
    );
    let slice = b.sizes.run / 3;
    let rounds = if b.sizes.run >= Duration::from_secs(1) {
        5
    } else {
        1
    };
    type Workload = fn(&Bench, Duration, &mut Report) -> f64;
    let workloads: [(&str, Workload); 3] = [
        ("uncontended, 1 connection", unpipelined),
        ("uncontended, pipelined", pipelined),
        ("contended, 8 clients on one lock (BLOCK)", contended),
    ];
    for (name, workload) in workloads {
        let (mut on, mut off, mut ratios, mut repeats) = (0.0, 0.0, Vec::new(), Vec::new());
        for _ in 0..rounds {
            let mut rate = |tracking: bool, r: &mut Report| {
                set(&mut conn, if tracking { &was } else { "0" });
                workload(b, slice, r)
            };
            let on1 = rate(true, r);
            let off1 = rate(false, r);
            let off2 = rate(false, r);
            let on2 = rate(true, r);
            on += on1 + on2;
            off += off1 + off2;
            ratios.push((on1 + on2) / (off1 + off2));
            repeats.extend([(on1 / on2 - 1.0).abs(), (off1 / off2 - 1.0).abs()]);
        }
        set(&mut conn, &was);
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        // The typical difference between two slices of one setting: one unlucky slice must not
        // widen the band the comparison is judged by.
        repeats.sort_by(f64::total_cmp);
        let noise = repeats[repeats.len() / 2];
        let n = (2 * rounds) as f64;
        t.row(vec![
            name.into(),
            format!("{:.0}", on / n),
            format!("{:.0}", off / n),
            format!(
                "{median:.3}× ({:.3}–{:.3})",
                ratios[0],
                ratios[ratios.len() - 1]
            ),
            format!("±{:.1} %", noise * 100.0),
        ]);
        r.target(
            &format!("hold tracking on vs off, {name}"),
            format!("{median:.3}× (noise ±{:.1} %)", noise * 100.0),
            "no slower beyond the noise",
            median >= 1.0 - noise,
        );
    }
    r.tables.push(t);
}

fn set(conn: &mut redis::Connection, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(CONFIG)
        .arg(value)
        .query(conn)
        .expect("CONFIG SET rlock.top-max-holds");
}

/// One connection, one `RLOCK.ACQUIRE` / `RLOCK.RELEASE` pair at a time, on distinct keys.
fn unpipelined(b: &Bench, run: Duration, _: &mut Report) -> f64 {
    let mut p = b.protocol(Kind::Rlock, 0);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run {
        let key = format!("tr1:{n}");
        assert!(p.acquire(&key, 30_000, Some(Duration::ZERO)));
        assert!(p.release(&key));
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Several connections sending pipelines of pairs on distinct keys: the server's CPU is the
/// limit, so this shows most of what the table costs.
fn pipelined(b: &Bench, run: Duration, _: &mut Report) -> f64 {
    crate::uncontended::pipelined_rate(b, Kind::Rlock, "tr2", run)
}

/// Eight connections taking one lock in turn with `BLOCK`: every grant a hand-off.
fn contended(b: &Bench, run: Duration, r: &mut Report) -> f64 {
    let check = Exclusion::default();
    let protocols: Vec<_> = (0..8).map(|i| b.protocol(Kind::Rlock, i)).collect();
    let start = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = protocols
            .into_iter()
            .map(|mut p| {
                let check = &check;
                scope.spawn(move || {
                    let mut n = 0u64;
                    while start.elapsed() < run {
                        assert!(p.acquire("tr3", 30_000, None));
                        let held = check.exclusive();
                        drop(held);
                        if !p.release("tr3") {
                            check.refused();
                        }
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    r.violations += check.violations();
    total as f64 / start.elapsed().as_secs_f64()
}

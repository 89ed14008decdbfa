//! Scenario 1: uncontended acquire+release on distinct keys.

use crate::bench::{commandstats, reset_stats, Bench};
use crate::protocols::{owner, pipeline_pairs, Kind};
use crate::report::{Bar, Report, Table};
use redis::Value;
use std::time::Instant;

pub fn run(b: &Bench, r: &mut Report) {
    unpipelined(b, r);
    let pipelined = pipelined(b, r);
    server_cost(b, r, pipelined);
}

/// One connection, one pair at a time: latency-bound.
fn unpipelined(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        "1a. Uncontended, 1 connection, unpipelined",
        &["protocol", "pairs/s", "µs per pair"],
    );
    let mut rows = Vec::new();
    for kind in [
        Kind::Rlock,
        Kind::RlockClient,
        Kind::Redisson,
        Kind::Ceiling,
    ] {
        let mut p = b.protocol(kind, 0);
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < b.sizes.run {
            let key = format!("u1:{}:{n}", kind.name());
            assert!(
                p.acquire(&key, 30_000, Some(std::time::Duration::ZERO)),
                "uncontended acquire failed"
            );
            assert!(p.release(&key), "uncontended release refused");
            n += 1;
        }
        rows.push((
            kind.name().to_string(),
            n as f64 / start.elapsed().as_secs_f64(),
        ));
    }
    // The round-trip ceiling: two PINGs per pair.
    let mut c = b.conn();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < b.sizes.run {
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        n += 1;
    }
    rows.push((
        "ceiling (2 PINGs)".into(),
        n as f64 / start.elapsed().as_secs_f64(),
    ));
    for (name, rate) in rows {
        t.row(vec![
            name.clone(),
            format!("{rate:.0}"),
            format!("{:.1}", 1e6 / rate),
        ]);
        r.bars.push(Bar {
            group: "1 conn, unpipelined pairs/s".into(),
            series: name,
            value: rate,
        });
    }
    r.tables.push(t);
}

/// Several connections, each sending pipelines of pairs: server-bound. Returns pairs/s per kind.
fn pipelined(b: &Bench, r: &mut Report) -> Vec<(Kind, f64)> {
    let s = &b.sizes;
    let mut t = Table::new(
        &format!(
            "1b. Uncontended, {} connections, {} pairs per pipeline",
            s.pipe_conns, s.pipe_pairs
        ),
        &["protocol", "pairs/s", "vs redisson", "vs ceiling"],
    );
    let rates: Vec<(Kind, f64)> = [Kind::Rlock, Kind::Redisson, Kind::Ceiling]
        .into_iter()
        .map(|kind| {
            (
                kind,
                pipelined_rate(b, kind, &format!("u2:{}", kind.name()), s.run),
            )
        })
        .collect();
    let of = |k: Kind| rates.iter().find(|(kk, _)| *kk == k).map(|x| x.1).unwrap();
    for &(kind, rate) in &rates {
        t.row(vec![
            kind.name().into(),
            format!("{rate:.0}"),
            format!("{:.2}×", rate / of(Kind::Redisson)),
            format!("{:.2}×", rate / of(Kind::Ceiling)),
        ]);
        r.bars.push(Bar {
            group: "pipelined pairs/s".into(),
            series: kind.name().into(),
            value: rate,
        });
    }
    r.tables.push(t);
    let vs_redisson = of(Kind::Rlock) / of(Kind::Redisson);
    let vs_ceiling = of(Kind::Rlock) / of(Kind::Ceiling);
    r.target(
        "pipelined pairs/s vs Redisson",
        format!("{vs_redisson:.2}×"),
        "≥ 3×",
        vs_redisson >= 3.0,
    );
    r.target(
        "pipelined pairs/s vs HSET+DEL ceiling",
        format!("{vs_ceiling:.2}×"),
        "≥ 0.5×",
        vs_ceiling >= 0.5,
    );
    rates
}

/// Pairs/s of `kind` over `run`: `b.sizes.pipe_conns` connections, each sending pipelines of
/// `b.sizes.pipe_pairs` acquire+release pairs on distinct keys (`prefix:<connection>:<n>`).
pub fn pipelined_rate(b: &Bench, kind: Kind, prefix: &str, run: std::time::Duration) -> f64 {
    let s = &b.sizes;
    let start = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..s.pipe_conns)
            .map(|c| {
                scope.spawn(move || {
                    let mut conn = b.conn();
                    let who = owner(c);
                    let prefix = format!("{prefix}:{c}");
                    let mut done = 0u64;
                    while start.elapsed() < run {
                        let mut pipe = redis::pipe();
                        pipeline_pairs(kind, &mut pipe, &b.shas, &who, &prefix, done, s.pipe_pairs);
                        let _: Vec<Value> = pipe.query(&mut conn).expect("pipeline");
                        done += s.pipe_pairs;
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / start.elapsed().as_secs_f64()
}

/// Server-side µs per call from INFO commandstats: acquires alone, then releases alone, one
/// pipelined connection, so each figure is one command kind. Measured in steady state (filler
/// keys and a warm-up round first, so no phase pays for growing Redis' hash tables), best of
/// three interleaved rounds (single runs swing on a shared VM).
fn server_cost(b: &Bench, r: &mut Report, _rates: Vec<(Kind, f64)>) {
    let n = b.sizes.cost_calls;
    let mut conn = b.conn();
    let who = owner(99);
    let sha = b.shas.clone();
    let redisson = |i: u64, nth: usize| {
        let mut pp = redis::pipe();
        pipeline_pairs(Kind::Redisson, &mut pp, &sha, &who, "sc:rs", i, 1);
        let cmd = pp.cmd_iter().nth(nth).unwrap().clone();
        cmd
    };
    type Build<'a> = Box<dyn Fn(&mut redis::Pipeline, u64) + 'a>;
    let phases: Vec<(&str, Build, &str)> = vec![
        (
            "rlock acquire",
            Box::new(|p, i| {
                p.cmd("RLOCK.ACQUIRE")
                    .arg(format!("sc:rl:{i}"))
                    .arg(&who)
                    .arg(30_000);
            }),
            "rlock.acquire",
        ),
        (
            "rlock release",
            Box::new(|p, i| {
                p.cmd("RLOCK.RELEASE").arg(format!("sc:rl:{i}")).arg(&who);
            }),
            "rlock.release",
        ),
        // Only the acquire script, then only the unlock script, of Redisson's pair.
        (
            "redisson acquire",
            Box::new(|p, i| {
                p.add_command(redisson(i, 0));
            }),
            "evalsha",
        ),
        (
            "redisson release",
            Box::new(|p, i| {
                p.add_command(redisson(i, 1));
            }),
            "evalsha",
        ),
        (
            "hset",
            Box::new(|p, i| {
                p.cmd("HSET").arg(format!("sc:h:{i}")).arg(&who).arg(1);
            }),
            "hset",
        ),
        (
            "del",
            Box::new(|p, i| {
                p.cmd("DEL").arg(format!("sc:h:{i}"));
            }),
            "del",
        ),
    ];
    let mut run = |phase: &str, build: &Build, stat: &str| -> f64 {
        reset_stats(&mut conn);
        for start in (0..n).step_by(1_000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1_000).min(n) {
                build(&mut pipe, i);
            }
            let _: Vec<Value> = pipe.query(&mut conn).expect(phase);
        }
        let (calls, usec) = commandstats(&mut conn)[stat];
        usec as f64 / calls as f64
    };
    {
        // Filler keys with a TTL, as many as a phase creates: tables sized for the working set.
        let mut c = b.conn();
        for start in (0..n).step_by(1_000) {
            let mut pipe = redis::pipe();
            for i in start..(start + 1_000).min(n) {
                pipe.cmd("SET")
                    .arg(format!("sc:fill:{i}"))
                    .arg(1)
                    .arg("PX")
                    .arg(3_600_000);
            }
            let _: Vec<Value> = pipe.query(&mut c).expect("fill");
        }
    }
    for (name, build, stat) in &phases {
        run(name, build, stat); // warm-up
    }
    let mut best = vec![f64::MAX; phases.len()];
    for _ in 0..3 {
        for (k, (name, build, stat)) in phases.iter().enumerate() {
            best[k] = best[k].min(run(name, build, stat));
        }
    }
    let [rl_acq, rl_rel, rs_acq, rs_rel, hset, del] = best[..] else {
        unreachable!()
    };
    let mut t = Table::new(
        &format!("1c. Server-side cost per call (INFO commandstats, {n} pipelined calls per phase, steady state, best of 3)"),
        &[
            "call",
            "rlock µs",
            "redisson µs",
            "redisson / rlock",
            "native µs",
        ],
    );
    t.row(vec![
        "acquire".into(),
        format!("{rl_acq:.2}"),
        format!("{rs_acq:.2}"),
        format!("{:.2}×", rs_acq / rl_acq),
        format!("{hset:.2} (HSET)"),
    ]);
    t.row(vec![
        "release".into(),
        format!("{rl_rel:.2}"),
        format!("{rs_rel:.2}"),
        format!("{:.2}×", rs_rel / rl_rel),
        format!("{del:.2} (DEL)"),
    ]);
    r.tables.push(t);
    r.target(
        "server cost per acquire vs Redisson script",
        format!("{:.2}× cheaper", rs_acq / rl_acq),
        "≥ 4× cheaper",
        rs_acq / rl_acq >= 4.0,
    );
    r.target(
        "server cost per release vs Redisson script",
        format!("{:.2}× cheaper", rs_rel / rl_rel),
        "≥ 4× cheaper",
        rs_rel / rl_rel >= 4.0,
    );
    let vs_native = (rl_acq + rl_rel) / (hset + del);
    r.target(
        "server cost per acquire+release pair vs HSET+DEL",
        format!("{vs_native:.2}×"),
        "≤ 2×",
        vs_native <= 2.0,
    );
}

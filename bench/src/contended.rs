//! Scenario 2: N clients on one key, looping acquire → critical section → release.

use crate::bench::{commands_executed, in_turn, reset_stats, server_cpu, Bench};
use crate::exclusion::{critical, Exclusion};
use crate::protocols::Kind;
use crate::report::{jain, ms, percentile, Bar, Report, Table};
use std::time::{Duration, Instant};

pub fn run(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        "2. Contended: N clients on one lock (acquire, critical section, release)",
        &[
            "clients",
            "protocol",
            "hand-offs/s",
            "acquire p50 ms",
            "acquire p99 ms",
            "per-client min/max",
            "Jain",
            "server cmds per acquisition",
            "CPU µs per hand-off, server / this process",
        ],
    );
    for &n in b.sizes.contended {
        let mut rates = Vec::new();
        // Raw BLOCK clients and the rlock client in four slices, each side first in two (see
        // `in_turn`: a fixed order favoured whichever ran first, here by up to 0.2×).
        const SLICES: u32 = 4;
        let half = b.sizes.run / SLICES;
        let mut halves = [Vec::new(), Vec::new()];
        for k in 0..SLICES {
            let (raw, client) = in_turn(
                k,
                r,
                |r| measure(b, Kind::Rlock, n, r, half),
                |r| measure(b, Kind::RlockClient, n, r, half),
            );
            halves[0].push(raw);
            halves[1].push(client);
        }
        let [raw, client] = halves;
        let measured = [
            (Kind::Rlock, summarize(raw)),
            (Kind::RlockClient, summarize(client)),
            (
                Kind::Redisson,
                summarize(vec![measure(b, Kind::Redisson, n, r, b.sizes.run)]),
            ),
        ];
        for (kind, m) in measured {
            t.row(vec![
                n.to_string(),
                kind.name().into(),
                format!("{:.0}", m.rate),
                ms(m.p50),
                ms(m.p99),
                format!("{}/{}", m.min, m.max),
                format!("{:.3}", m.jain),
                format!("{:.2}", m.cmds_per_acq),
                format!("{:.1} / {:.1}", m.server_cpu_us, m.own_cpu_us),
            ]);
            r.bars.push(Bar {
                group: format!("{n} clients, hand-offs/s"),
                series: kind.name().into(),
                value: m.rate,
            });
            rates.push((kind, m));
        }
        let rl = &rates[0].1;
        let client = &rates[1].1;
        let rs = &rates[2].1;
        if n >= 8 {
            let vs_raw = client.rate / rl.rate;
            r.target(
                &format!("client (sync) vs raw BLOCK clients, hand-offs/s, {n} clients"),
                format!("{vs_raw:.2}×"),
                "≥ 0.95×",
                vs_raw >= 0.95,
            );
            let ratio = rl.rate / rs.rate;
            r.target(
                &format!("contended hand-offs/s vs Redisson, {n} clients"),
                format!("{ratio:.2}×"),
                "≥ 3×",
                ratio >= 3.0,
            );
        }
        r.target(
            &format!("server commands per acquisition, {n} clients"),
            format!("{:.2}", rl.cmds_per_acq),
            "exactly 2",
            (rl.cmds_per_acq - 2.0).abs() < 0.005,
        );
        r.target(
            &format!("Jain's fairness index, {n} clients"),
            format!("{:.3}", rl.jain),
            "≥ 0.95",
            rl.jain >= 0.95,
        );
    }
    r.tables.push(t);
}

pub struct Measured {
    pub rate: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub min: u64,
    pub max: u64,
    pub jain: f64,
    pub cmds_per_acq: f64,
    /// CPU per hand-off: the server's, and this process' (every thread of it).
    pub server_cpu_us: f64,
    pub own_cpu_us: f64,
}

/// One measured stretch: acquisitions per client, every acquire's wait, the time, and the
/// server commands executed.
pub struct Run {
    counts: Vec<u64>,
    lat: Vec<Duration>,
    elapsed: Duration,
    cmds: u64,
    /// CPU seconds meanwhile: the server's, and this process'.
    server_cpu: f64,
    own_cpu: f64,
}

/// Stretches of one protocol as one measurement (per-client counts added up by client).
pub fn summarize(runs: Vec<Run>) -> Measured {
    let mut counts = vec![0u64; runs.first().map_or(0, |r| r.counts.len())];
    let (mut lat, mut elapsed, mut cmds) = (Vec::new(), Duration::ZERO, 0u64);
    let (mut server_cpu, mut own_cpu) = (0.0, 0.0);
    for run in runs {
        for (c, n) in counts.iter_mut().zip(&run.counts) {
            *c += n;
        }
        lat.extend(run.lat);
        elapsed += run.elapsed;
        cmds += run.cmds;
        server_cpu += run.server_cpu;
        own_cpu += run.own_cpu;
    }
    let total: u64 = counts.iter().sum();
    Measured {
        rate: total as f64 / elapsed.as_secs_f64(),
        p50: percentile(&mut lat, 50.0),
        p99: percentile(&mut lat, 99.0),
        min: *counts.iter().min().unwrap(),
        max: *counts.iter().max().unwrap(),
        jain: jain(&counts),
        cmds_per_acq: cmds as f64 / total.max(1) as f64,
        server_cpu_us: server_cpu * 1e6 / total.max(1) as f64,
        own_cpu_us: own_cpu * 1e6 / total.max(1) as f64,
    }
}

pub fn measure(b: &Bench, kind: Kind, n: usize, r: &mut Report, run: Duration) -> Run {
    let key = format!("contended:{n}:{}", kind.name());
    let mut stats = b.conn();
    let check = Exclusion::default();
    // Connect everyone before the clock starts.
    let protocols: Vec<_> = (0..n).map(|i| b.protocol(kind, i)).collect();
    reset_stats(&mut stats);
    let cpu = (server_cpu(&mut stats), own_cpu());
    let start = Instant::now();
    let results: Vec<(u64, Vec<Duration>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = protocols
            .into_iter()
            .map(|mut p| {
                let (key, check) = (&key, &check);
                scope.spawn(move || {
                    let mut lat = Vec::new();
                    let mut count = 0u64;
                    while start.elapsed() < run {
                        let t0 = Instant::now();
                        assert!(p.acquire(key, 30_000, None));
                        // Inside from the reply until the release is sent (the latency push
                        // included: the longer the window, the likelier a second holder is seen).
                        let held = check.exclusive();
                        lat.push(t0.elapsed());
                        critical();
                        drop(held);
                        if !p.release(key) {
                            check.refused();
                        }
                        count += 1;
                    }
                    (count, lat)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();
    let (server_cpu, own_cpu) = (server_cpu(&mut stats) - cpu.0, own_cpu() - cpu.1);
    let cmds = commands_executed(&mut stats);
    r.violations += check.violations();
    let counts: Vec<u64> = results.iter().map(|(c, _)| *c).collect();
    let lat: Vec<Duration> = results.into_iter().flat_map(|(_, l)| l).collect();
    Run {
        counts,
        lat,
        elapsed,
        cmds,
        server_cpu,
        own_cpu,
    }
}

/// This process' CPU time so far, user + system, in seconds (ended threads included).
fn own_cpu() -> f64 {
    // SAFETY: getrusage writes one rusage into the zeroed value passed.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage to write.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

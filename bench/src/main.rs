//! `make bench`: rlock's native commands against Redisson's Lua protocol and the raw-command
//! ceiling, side by side in one run against one redis-server started here.
//!
//! Usage: `rlock-bench [--quick] [--out DIR] [--only NAME,...] [--pairs API PATH N]`. Prints a markdown table of absolute figures and
//! ratios and writes it with an SVG chart to DIR (default `bench/results`). `--quick` is a
//! smoke run for CI; its figures are not meaningful, but mutual exclusion is still checked and
//! a violation fails the run.

mod bench;
mod client;
mod contended;
mod costs;
mod deadlock;
mod exclusion;
mod expiry;
mod family;
mod handoff;
mod latch;
mod memory;
mod placement;
mod protocols;
mod proxy;
mod redisson_mode;
mod report;
mod rw_protocols;
mod rwlock;
mod sem_protocols;
mod semaphore;
mod subscriber;
mod tracking;
mod uncontended;
mod waiters;
mod watchdog;

use bench::{Bench, Sizes};
use report::Report;
use rlock_tests::{Server, ServerOptions};
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let mut quick = false;
    let mut only: Option<Vec<String>> = None;
    let mut pairs: Option<(String, String, u64)> = None;
    let mut out = rlock_tests::workspace_root().join("bench/results");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--out" => out = PathBuf::from(args.next().expect("--out needs a directory")),
            // Run some scenarios only (e.g. `--only contended,client`), to re-measure one.
            "--only" => {
                let names = args.next().expect("--only needs scenario names");
                only = Some(names.split(',').map(str::to_string).collect());
            }
            // N pairs of one path of section 6 and nothing else: see `client::profile`.
            "--pairs" => {
                let mut next = || args.next().expect("--pairs needs API PATH N");
                let (api, path) = (next(), next());
                let n = next().parse().expect("--pairs: N is a number");
                pairs = Some((api, path, n));
            }
            "-h" | "--help" => {
                println!("usage: rlock-bench [--quick] [--out DIR] [--only NAME,...] [--pairs API PATH N]");
                return;
            }
            other => {
                eprintln!("unknown argument {other:?}; usage: rlock-bench [--quick] [--out DIR] [--only NAME,...] [--pairs API PATH N]");
                std::process::exit(2);
            }
        }
    }

    let started = Instant::now();
    // One server, no persistence: every protocol pays the same for the server, and none for disk.
    // Room for the many-waiters scenario's raw BLOCK waiters, one connection each.
    let server = Server::with(ServerOptions {
        args: vec!["--maxclients".into(), "15000".into()],
        ..Default::default()
    });
    let mut conn = server.conn();
    // The server is `RLOCK_SERVER` if set (any server of `make matrix`), else redis-server.
    let version = rlock_tests::ServerKind::of(&mut conn);
    let bench = Bench {
        url: server.url(),
        shas: protocols::Shas::load(&mut conn),
        client: rlock_client::Client::open(server.url()).expect("rlock client"),
        sizes: if quick { Sizes::quick() } else { Sizes::full() },
    };

    if let Some((api, path, n)) = pairs {
        return client::profile(&bench, &api, &path, n);
    }
    let mut report = Report::default();
    type Step = fn(&Bench, &mut Report);
    let steps: [(&str, Step); 16] = [
        ("uncontended", uncontended::run),
        ("contended", contended::run),
        ("hand-off floor", handoff::run),
        ("read-heavy rwlock", rwlock::run),
        ("deadlock detection", deadlock::run),
        ("expiry hand-off", expiry::run),
        ("watchdog", watchdog::run),
        ("memory", memory::run),
        ("semaphore", semaphore::run),
        ("latch fan-out", latch::run),
        ("client vs raw", client::run),
        ("redisson mode", redisson_mode::run),
        ("family", family::run),
        ("many waiters", waiters::run),
        ("tracking", tracking::run),
        // Last: it flushes the server between its sizes.
        ("costs", costs::run),
    ];
    for (name, step) in steps {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| name.starts_with(n.as_str())))
        {
            continue;
        }
        eprintln!("[{:>5.1}s] {name} ...", started.elapsed().as_secs_f64());
        step(&bench, &mut report);
    }

    let header = format!(
        "## rlock benchmark{}\n\n{version} with the rlock module, on {} cores; produced by `{}` in {:.0} s.",
        if quick { " (quick smoke run: figures not meaningful)" } else { "" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick { "make bench-quick" } else { "make bench" },
        started.elapsed().as_secs_f64(),
    );
    let md = report.markdown(&header);
    println!("{md}");
    std::fs::create_dir_all(&out).expect("create results directory");
    let stem = if quick { "quick" } else { "latest" };
    std::fs::write(out.join(format!("{stem}.md")), &md).expect("write results");
    std::fs::write(
        out.join(format!("{stem}.svg")),
        report.svg("rlock vs Redisson's protocol vs native ceiling"),
    )
    .expect("write chart");
    eprintln!("wrote {}/{stem}.md and {stem}.svg", out.display());

    if report.violations > 0 {
        eprintln!("MUTUAL EXCLUSION VIOLATED {} times", report.violations);
        std::process::exit(1);
    }
}

//! Scenario 6: what the `rlock` client costs over the raw `RLOCK.*` commands, each measured
//! against the raw commands over the same connection style: a blocking connection on the
//! calling thread for the sync API, a multiplexed tokio connection awaited by one task for the
//! async API (on a 2-worker runtime, as an application would run it). Uncontended: one caller,
//! acquire + release, unpipelined. Three client paths beside the raw pair: `lock()` + `unlock()`
//! (the watchdog form, the call most users write) on distinct keys and on one key, and
//! `try_lock_with(0, lease)` (one attempt, a lease: the cheapest path). The raw pair runs on
//! distinct keys and on one key too, and each client path is compared with the raw pair on the
//! same keys. Every path runs once per slice, the order reversed every other slice (whichever
//! runs second on a busy machine runs slower), and the slices are summed.
//! One more raw row splits the default path's gap in two: the raw pair sending the very words
//! `lock()` sends (`SESSION s QUEUE request 0`, and `BLOCK 50` from a blocking connection), so
//! the server watches each hold for loss as it does the client's. Raw watched / raw is what the
//! server's watch costs; `lock()` / raw watched is what the client itself costs.
//! The section runs once per placement of the server and the benchmark on the machine's CPUs
//! (apart, then shared: see `placement`), since left to the scheduler the ratios measured
//! where each slice happened to run.
//! The contended comparison (raw `BLOCK` clients vs the sync client) is in section 2.

use crate::placement::{self, Placement};
use crate::protocols::owner;
use crate::report::{Report, Table};
use std::time::{Duration, Instant};

/// Slices per path and API.
const SLICES: u32 = 40;
const LEASE: Duration = Duration::from_secs(30);

/// What one slice measures: the raw pair or one client path, on distinct keys or one key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Raw {
        one_key: bool,
    },
    /// The raw pair with the session watch `lock()` asks for, distinct keys.
    RawWatched,
    /// `lock()` + `unlock()`: the watchdog form.
    Default {
        one_key: bool,
    },
    /// `try_lock_with(0, lease)` + `unlock()`, distinct keys.
    Lease,
    /// `lock()` + `unlock()` on distinct keys by a client given the caller's runtime
    /// (`ClientBuilder::runtime`); async only (the sync API runs on the calling thread).
    OnCallersRuntime,
}

const PATHS: [Path; 7] = [
    Path::Raw { one_key: false },
    Path::Raw { one_key: true },
    Path::RawWatched,
    Path::Default { one_key: false },
    Path::Default { one_key: true },
    Path::Lease,
    Path::OnCallersRuntime,
];

impl Path {
    fn key(self, prefix: &str, n: u64) -> String {
        match self {
            Path::Raw { one_key: true } | Path::Default { one_key: true } => prefix.to_string(),
            _ => format!("{prefix}:{n}"),
        }
    }

    /// The rows: the path, the pair it is compared with, and whether the ratio is a target
    /// (the two rows splitting the default path's gap are not).
    fn rows() -> [(Path, &'static str, Path, bool); 6] {
        [
            (
                Path::RawWatched,
                "raw commands with lock()'s session watch, distinct keys (vs raw: the server's watch)",
                Path::Raw { one_key: false },
                false,
            ),
            (
                Path::Default { one_key: false },
                "lock() + unlock() (watchdog), distinct keys, vs raw with the same watch (the client's own cost)",
                Path::RawWatched,
                false,
            ),
            (
                Path::Default { one_key: false },
                "lock() + unlock() (watchdog), distinct keys",
                Path::Raw { one_key: false },
                true,
            ),
            (
                Path::Default { one_key: true },
                "lock() + unlock() (watchdog), one key",
                Path::Raw { one_key: true },
                true,
            ),
            (
                Path::Lease,
                "try_lock_with(0, lease) + unlock(), distinct keys",
                Path::Raw { one_key: false },
                true,
            ),
            (
                Path::OnCallersRuntime,
                "lock() + unlock() (watchdog), distinct keys, client given the caller's runtime",
                Path::Raw { one_key: false },
                true,
            ),
        ]
    }
}

pub fn run(b: &crate::bench::Bench, r: &mut Report) {
    let mut conn = b.conn();
    let server = placement::server_pid(&mut conn);
    for p in Placement::available() {
        let pinned = placement::pin(p, server);
        if pinned.is_none() {
            // Unpinned once, as the scheduler places it (one CPU, or affinity refused).
            return run_placed(b, r, Placement::Unpinned);
        }
        run_placed(b, r, p);
    }
}

/// Section 6 with the server and the benchmark placed per `p` (see `placement`).
fn run_placed(b: &crate::bench::Bench, r: &mut Report, p: Placement) {
    let mut t = Table::new(
        &format!(
            "6. The rlock client vs raw RLOCK.* commands, same connection style, CPUs {} (uncontended, unpipelined pairs/s, {SLICES} slices each, order reversed every other slice)",
            p.label()
        ),
        &[
            "API",
            "path (vs the raw pair on the same keys unless it says)",
            "baseline pairs/s",
            "pairs/s",
            "ratio",
            "baseline CPU µs/pair",
            "CPU µs/pair",
        ],
    );
    let slice = b.sizes.run / SLICES;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The same client given the caller's runtime (as an async service may set it up): its
    // async requests go over a connection driven there, as the default client's requests
    // from a multi-thread runtime do; only where its background work runs differs.
    let on_rt = rlock_client::Client::builder()
        .url(b.url.as_str())
        .runtime(rt.handle().clone())
        .build()
        .expect("rlock client on the caller's runtime");
    // The session the raw watched pairs name (the client's is its own): opened on a connection
    // of its own, as the client's listener does, and opened again before every slice (which
    // resumes it: no listener reads it, and its grace must not run out mid-section).
    let mut listener = b.conn();
    let session = format!("{}-bench-raw", owner(62));
    let mut resume = || {
        let _: redis::Value = redis::cmd("RSESSION.OPEN")
            .arg(&session)
            .arg(60_000)
            .query(&mut listener)
            .expect("RSESSION.OPEN for the raw watched pairs");
    };
    // [sync, async][path]
    let mut sums = [[Sum::default(); PATHS.len()]; 2];
    for k in 0..SLICES {
        resume();
        let mut order: Vec<usize> = (0..PATHS.len()).collect();
        if k % 2 == 1 {
            order.reverse();
        }
        for &i in &order {
            let path = PATHS[i];
            if path == Path::OnCallersRuntime {
                continue;
            }
            let prefix = format!("c6:s{i}:{k}");
            sums[0][i].add(sync_pair(b, path, &prefix, &session, Stop::for_(slice)));
        }
        for &i in &order {
            let path = PATHS[i];
            let prefix = format!("c6:a{i}:{k}");
            let client = match path {
                Path::OnCallersRuntime => on_rt.clone(),
                _ => b.client.clone(),
            };
            let (url, session) = (b.url.clone(), session.clone());
            // In a task of its own, as application code runs (a task's owner is the task).
            let s = rt
                .block_on(rt.spawn(async move {
                    async_pair(&client, &url, path, &prefix, &session, Stop::for_(slice)).await
                }))
                .unwrap();
            sums[1][i].add(s);
        }
    }
    let at = |p: Path| PATHS.iter().position(|q| *q == p).unwrap();
    for (api, sums, goal) in [("sync", &sums[0], 0.95), ("async (tokio)", &sums[1], 0.95)] {
        for (path, name, raw, target) in Path::rows() {
            if api == "sync" && path == Path::OnCallersRuntime {
                continue;
            }
            let (raw, raw_cpu) = sums[at(raw)].rates();
            let (client, client_cpu) = sums[at(path)].rates();
            let ratio = client / raw;
            t.row(vec![
                api.into(),
                name.into(),
                format!("{raw:.0}"),
                format!("{client:.0}"),
                format!("{ratio:.2}×"),
                format!("{raw_cpu:.1}"),
                format!("{client_cpu:.1}"),
            ]);
            if target {
                r.target(
                    &format!(
                        "client vs raw commands, {api}, {name}, CPUs {}, uncontended pairs/s",
                        p.label()
                    ),
                    format!("{ratio:.2}×"),
                    &format!("≥ {goal}×"),
                    ratio >= goal,
                );
            }
        }
    }
    let _: redis::RedisResult<redis::Value> = redis::cmd("RSESSION.CLOSE")
        .arg(&session)
        .query(&mut b.conn());
    r.tables.push(t);
}

/// `rlock-bench --pairs API PATH N`: `N` pairs of one path of this section and nothing else
/// (API `sync` or `async`; PATH `raw`, `raw-one`, `raw-watched`, `lock`, `lock-one`, `lease`),
/// for counting what the client itself spends per pair: the server is another process, so
/// `valgrind --tool=callgrind rlock-bench --pairs sync lock 20000` counts this process alone,
/// and the difference between two counts of pairs is the cost of the pairs between them.
pub fn profile(b: &crate::bench::Bench, api: &str, path: &str, pairs: u64) {
    let path = match path {
        "raw" => Path::Raw { one_key: false },
        "raw-one" => Path::Raw { one_key: true },
        "raw-watched" => Path::RawWatched,
        "lock" => Path::Default { one_key: false },
        "lock-one" => Path::Default { one_key: true },
        "lease" => Path::Lease,
        other => panic!("--pairs: unknown path {other:?}"),
    };
    let session = format!("{}-bench-raw", owner(62));
    let _: redis::Value = redis::cmd("RSESSION.OPEN")
        .arg(&session)
        .arg(60_000)
        .query(&mut b.conn())
        .expect("RSESSION.OPEN for the raw watched pairs");
    let stop = Stop {
        run: Duration::MAX,
        pairs,
    };
    let s = match api {
        "sync" => sync_pair(b, path, "c6:p", &session, stop),
        "async" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let (client, url) = (b.client.clone(), b.url.clone());
            rt.block_on(rt.spawn(async move {
                async_pair(&client, &url, path, "c6:p", &session, stop).await
            }))
            .unwrap()
        }
        other => panic!("--pairs: unknown API {other:?}"),
    };
    let (rate, cpu) = s.rates();
    eprintln!("{pairs} pairs: {rate:.0} pairs/s, {cpu:.1} CPU µs/pair");
    // Per thread: what it ran (ms) and how often it was switched out (woken that often).
    for t in placement::threads() {
        let read = |f: &str| std::fs::read_to_string(format!("/proc/self/task/{t}/{f}"));
        let (Ok(stat), Ok(status)) = (read("schedstat"), read("status")) else {
            continue;
        };
        let ns: u64 = stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map_or("?", str::trim)
                .to_string()
        };
        eprintln!(
            "  thread {t} {}: {:.1} ms, {} voluntary / {} involuntary switches",
            field("Name:"),
            ns as f64 / 1e6,
            field("voluntary_ctxt_switches:"),
            field("nonvoluntary_ctxt_switches:")
        );
    }
}

/// CPU time spent so far by this process' live threads (schedstat's first field, in ns).
fn process_cpu() -> Duration {
    let ns = placement::threads()
        .into_iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Pairs done, the time they took, and this process' CPU time meanwhile.
#[derive(Clone, Copy, Default)]
struct Sum {
    pairs: u64,
    elapsed: Duration,
    cpu: Duration,
}

impl Sum {
    fn add(&mut self, o: Sum) {
        self.pairs += o.pairs;
        self.elapsed += o.elapsed;
        self.cpu += o.cpu;
    }

    /// Pairs per second, and CPU µs per pair.
    fn rates(&self) -> (f64, f64) {
        let n = self.pairs.max(1) as f64;
        (
            n / self.elapsed.as_secs_f64(),
            self.cpu.as_secs_f64() * 1e6 / n,
        )
    }
}

fn measured(pairs: u64, elapsed: Duration, cpu: Duration) -> Sum {
    Sum {
        pairs,
        elapsed,
        cpu,
    }
}

/// How long a slice runs: for `run`, or `pairs` pairs at most (`rlock-bench --pairs`).
#[derive(Clone, Copy)]
struct Stop {
    run: Duration,
    pairs: u64,
}

impl Stop {
    fn for_(run: Duration) -> Stop {
        Stop {
            run,
            pairs: u64::MAX,
        }
    }

    fn goes_on(self, start: Instant, n: u64) -> bool {
        n < self.pairs && start.elapsed() < self.run
    }
}

/// `pair(n)` run until `stop`.
fn rate(stop: Stop, mut pair: impl FnMut(u64)) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while stop.goes_on(start, n) {
        pair(n);
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

/// The acquire of a raw pair: plain, or with the words `lock()` adds (the session that watches
/// the hold, a request number, no deadline, and `BLOCK park_ms` from a blocking connection:
/// the client's `Transport::park_ms`, 50 ms).
fn raw_acquire(key: &str, who: &str, watch: Option<(&str, u64, bool)>) -> redis::Cmd {
    let mut c = redis::cmd("RLOCK.ACQUIRE");
    c.arg(key).arg(who).arg(LEASE.as_millis() as u64);
    if let Some((session, request, blocking)) = watch {
        c.arg("SESSION")
            .arg(session)
            .arg("QUEUE")
            .arg(request)
            .arg(0);
        if blocking {
            c.arg("BLOCK").arg(50);
        }
    }
    c
}

/// One slice of `path` through the sync API (raw: a blocking connection of its own).
fn sync_pair(b: &crate::bench::Bench, path: Path, prefix: &str, session: &str, run: Stop) -> Sum {
    match path {
        Path::Raw { .. } | Path::RawWatched => {
            let mut c = b.conn();
            let who = owner(60);
            let watched = path == Path::RawWatched;
            rate(run, |n| {
                let key = path.key(prefix, n);
                let watch = watched.then_some((session, n + 1, true));
                let got: Option<i64> = raw_acquire(&key, &who, watch).query(&mut c).unwrap();
                assert!(got.is_some(), "uncontended acquire failed");
                let _: i64 = redis::cmd("RLOCK.RELEASE")
                    .arg(&key)
                    .arg(&who)
                    .query(&mut c)
                    .unwrap();
            })
        }
        Path::Default { .. } | Path::OnCallersRuntime => rate(run, |n| {
            let lock = b.client.lock(path.key(prefix, n));
            lock.lock().unwrap();
            lock.unlock().unwrap();
        }),
        Path::Lease => rate(run, |n| {
            let lock = b.client.lock(path.key(prefix, n));
            assert!(lock.try_lock_with(Duration::ZERO, LEASE).unwrap());
            lock.unlock().unwrap();
        }),
    }
}

/// Like [`rate`], for an async pair.
async fn rate_async<F: std::future::Future<Output = ()>>(
    stop: Stop,
    mut pair: impl FnMut(u64) -> F,
) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while stop.goes_on(start, n) {
        pair(n).await;
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

/// One slice of `path` through the async API (raw: a multiplexed connection).
async fn async_pair(
    client: &rlock_client::Client,
    url: &str,
    path: Path,
    prefix: &str,
    session: &str,
    run: Stop,
) -> Sum {
    match path {
        Path::Raw { .. } | Path::RawWatched => {
            let c = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let who = owner(61);
            let watched = path == Path::RawWatched;
            rate_async(run, |n| {
                let (mut c, who, key) = (c.clone(), &who, path.key(prefix, n));
                let acquire = raw_acquire(&key, who, watched.then_some((session, n + 1, false)));
                async move {
                    let got: Option<i64> = acquire.query_async(&mut c).await.unwrap();
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
        Path::Default { .. } | Path::OnCallersRuntime => {
            rate_async(run, |n| {
                let lock = client.async_lock(path.key(prefix, n));
                async move {
                    lock.lock().await.unwrap();
                    lock.unlock().await.unwrap();
                }
            })
            .await
        }
        Path::Lease => {
            rate_async(run, |n| {
                let lock = client.async_lock(path.key(prefix, n));
                async move {
                    assert!(lock.try_lock_with(Duration::ZERO, LEASE).await.unwrap());
                    lock.unlock().await.unwrap();
                }
            })
            .await
        }
    }
}

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
//! The contended comparison (raw `BLOCK` clients vs the sync client) is in section 2.

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

const PATHS: [Path; 6] = [
    Path::Raw { one_key: false },
    Path::Raw { one_key: true },
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

    /// The client paths' rows: the path, and the raw pair it is compared with.
    fn rows() -> [(Path, &'static str, Path); 4] {
        [
            (
                Path::Default { one_key: false },
                "lock() + unlock() (watchdog), distinct keys",
                Path::Raw { one_key: false },
            ),
            (
                Path::Default { one_key: true },
                "lock() + unlock() (watchdog), one key",
                Path::Raw { one_key: true },
            ),
            (
                Path::Lease,
                "try_lock_with(0, lease) + unlock(), distinct keys",
                Path::Raw { one_key: false },
            ),
            (
                Path::OnCallersRuntime,
                "lock() + unlock() (watchdog), distinct keys, client given the caller's runtime",
                Path::Raw { one_key: false },
            ),
        ]
    }
}

pub fn run(b: &crate::bench::Bench, r: &mut Report) {
    let mut t = Table::new(
        &format!(
            "6. The rlock client vs raw RLOCK.* commands, same connection style (uncontended, unpipelined pairs/s, {SLICES} slices each, order reversed every other slice)"
        ),
        &[
            "API",
            "client path",
            "raw pairs/s",
            "client pairs/s",
            "client / raw",
            "raw CPU µs/pair",
            "client CPU µs/pair",
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
    let on_rt = rlock::Client::builder()
        .url(b.url.as_str())
        .runtime(rt.handle().clone())
        .build()
        .expect("rlock client on the caller's runtime");
    // [sync, async][path]
    let mut sums = [[Sum::default(); PATHS.len()]; 2];
    for k in 0..SLICES {
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
            sums[0][i].add(sync_pair(b, path, &prefix, slice));
        }
        for &i in &order {
            let path = PATHS[i];
            let prefix = format!("c6:a{i}:{k}");
            let client = match path {
                Path::OnCallersRuntime => on_rt.clone(),
                _ => b.client.clone(),
            };
            let url = b.url.clone();
            // In a task of its own, as application code runs (a task's owner is the task).
            let s = rt
                .block_on(
                    rt.spawn(async move { async_pair(&client, &url, path, &prefix, slice).await }),
                )
                .unwrap();
            sums[1][i].add(s);
        }
    }
    let at = |p: Path| PATHS.iter().position(|q| *q == p).unwrap();
    for (api, sums, goal) in [("sync", &sums[0], 0.9), ("async (tokio)", &sums[1], 0.9)] {
        for (path, name, raw) in Path::rows() {
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
            r.target(
                &format!("client vs raw commands, {api}, {name}, uncontended pairs/s"),
                format!("{ratio:.2}×"),
                &format!("≥ {goal}×"),
                ratio >= goal,
            );
        }
    }
    r.tables.push(t);
}

/// CPU time spent so far by this process' live threads (schedstat's first field, in ns).
fn process_cpu() -> Duration {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
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

/// `pair(n)` run for `run`.
fn rate(run: Duration, mut pair: impl FnMut(u64)) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while start.elapsed() < run {
        pair(n);
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

/// One slice of `path` through the sync API (raw: a blocking connection of its own).
fn sync_pair(b: &crate::bench::Bench, path: Path, prefix: &str, run: Duration) -> Sum {
    match path {
        Path::Raw { .. } => {
            let mut c = b.conn();
            let who = owner(60);
            rate(run, |n| {
                let key = path.key(prefix, n);
                let got: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
                    .arg(&key)
                    .arg(&who)
                    .arg(LEASE.as_millis() as u64)
                    .query(&mut c)
                    .unwrap();
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
    run: Duration,
    mut pair: impl FnMut(u64) -> F,
) -> Sum {
    let (start, cpu) = (Instant::now(), process_cpu());
    let mut n = 0;
    while start.elapsed() < run {
        pair(n).await;
        n += 1;
    }
    measured(n, start.elapsed(), process_cpu() - cpu)
}

/// One slice of `path` through the async API (raw: a multiplexed connection).
async fn async_pair(
    client: &rlock::Client,
    url: &str,
    path: Path,
    prefix: &str,
    run: Duration,
) -> Sum {
    match path {
        Path::Raw { .. } => {
            let c = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let who = owner(61);
            rate_async(run, |n| {
                let (mut c, who, key) = (c.clone(), &who, path.key(prefix, n));
                async move {
                    let got: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
                        .arg(&key)
                        .arg(who)
                        .arg(LEASE.as_millis() as u64)
                        .query_async(&mut c)
                        .await
                        .unwrap();
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

//! Scenario 7: many waiters in one process (issue 13). W tasks share one rlock client; half
//! wait on one hot lock, half on distinct held locks. Measured against W raw `BLOCK` waiters,
//! one connection each, in the same run, which go first (the side that ran first measured
//! better elsewhere, see `bench::in_turn`; here each side first queues W waits, too slow to
//! repeat in turns). The client is measured twice: its background work on a runtime of its own
//! (the default), then on the tasks' runtime (`ClientBuilder::runtime`, as an async service
//! sets it up), where the raw waiters' connection drivers run too.
//!
//! - server memory per queued request (`used_memory` growth / W, connections opened first for
//!   the raw waiters so that only the waits count) and connections per waiter;
//! - the distinct locks released at once (one pipeline): each waiter's grant latency from the
//!   release;
//! - the hot lock handed from waiter to waiter (each takes it and gives it back): hand-offs/s;
//! - lost-hold signal: `RLOCK.FORCERELEASE` of a held lock to the holder's `lost()` firing.

use crate::bench::{info_int, Bench};
use crate::exclusion::{critical, Exclusion};
use crate::protocols::owner;
use crate::report::{ms, percentile, Report, Table};
use redis::{AsyncConnectionConfig, Connection, Value};
use rlock_tests::wait_until;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub fn run(b: &Bench, r: &mut Report) {
    let w = b.sizes.many_waiters;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let raw = raw_block(b, &rt, w);
    let own = through_sessions(b, &rt, w, false);
    let shared = through_sessions(b, &rt, w, true);
    let lost = lost_signal(b, &rt, b.sizes.lost_rounds);
    r.violations += raw.violations + own.violations + shared.violations;

    let mut t = Table::new(
        &format!(
            "7. Many waiters: {w} tasks in one process, half on one hot lock, half on distinct held locks (rlock client through its session, its background work on a runtime of its own or on the tasks' runtime, vs raw BLOCK waiters, one connection each)"
        ),
        &[
            "what",
            "client, own runtime",
            "client, tasks' runtime",
            "raw BLOCK",
            "own / raw",
            "tasks' / raw",
        ],
    );
    let row = |t: &mut Table, what: &str, cells: [String; 5]| {
        let mut v = vec![what.to_string()];
        v.extend(cells);
        t.row(v);
    };
    let x = |a: f64, b: f64| format!("{:.2}×", a / b);
    row(
        &mut t,
        "server memory per queued request (bytes)",
        [
            format!("{:.0}", own.bytes_per_wait),
            format!("{:.0}", shared.bytes_per_wait),
            format!("{:.0}", raw.bytes_per_wait),
            format!("{:.3}×", own.bytes_per_wait / raw.bytes_per_wait),
            format!("{:.3}×", shared.bytes_per_wait / raw.bytes_per_wait),
        ],
    );
    row(
        &mut t,
        "connections per waiter",
        [
            format!("{:.4}", own.conns_per_wait),
            format!("{:.4}", shared.conns_per_wait),
            format!("{:.4}", raw.conns_per_wait),
            String::new(),
            String::new(),
        ],
    );
    row(
        &mut t,
        &format!(
            "{} distinct locks released at once: grant p50 / p99 / last (ms)",
            w / 2
        ),
        [
            own.release.show(),
            shared.release.show(),
            raw.release.show(),
            String::new(),
            String::new(),
        ],
    );
    row(
        &mut t,
        &format!(
            "{} distinct locks released at once, release to last grant: server CPU ms / this process' CPU ms / RSESSION.READ calls",
            w / 2
        ),
        [
            own.release_cost.show(),
            shared.release_cost.show(),
            raw.release_cost.show(),
            String::new(),
            String::new(),
        ],
    );
    row(
        &mut t,
        &format!("hot lock hand-offs/s ({} waiters, each once)", w / 2),
        [
            format!("{:.0}", own.hot_rate),
            format!("{:.0}", shared.hot_rate),
            format!("{:.0}", raw.hot_rate),
            x(own.hot_rate, raw.hot_rate),
            x(shared.hot_rate, raw.hot_rate),
        ],
    );
    let per = |c: (f64, f64, f64)| format!("{:.1} / {:.1} / {:.2}", c.0, c.1, c.2);
    row(
        &mut t,
        "hot lock, per hand-off: server CPU µs / this process' CPU µs / RSESSION.READ calls",
        [
            per(own.hot_cost),
            per(shared.hot_cost),
            per(raw.hot_cost),
            String::new(),
            String::new(),
        ],
    );
    row(
        &mut t,
        &format!(
            "lost-hold signal, FORCERELEASE → lost() ({} rounds): p50 / p99 (ms)",
            lost.len()
        ),
        [
            format!("{} / {}", ms(lost.p50), ms(lost.p99)),
            String::new(),
            "never (no session)".into(),
            String::new(),
            String::new(),
        ],
    );
    r.tables.push(t);

    for (m, how) in [(&own, "own runtime"), (&shared, "tasks' runtime")] {
        r.target(
            &format!("server memory per queued request ({w} waiters, client on its {how})"),
            format!("{:.0} bytes", m.bytes_per_wait),
            "≤ 512 bytes",
            m.bytes_per_wait <= 512.0,
        );
        r.target(
            &format!("connections per waiter ({w} waiters, client on its {how})"),
            format!("{:.4}", m.conns_per_wait),
            "≤ 0.001",
            m.conns_per_wait <= 0.001,
        );
        let rel = &m.release;
        r.target(
            &format!(
                "{} distinct locks released at once: every waiter granted (client on its {how})",
                w / 2
            ),
            format!("last {} ms", ms(rel.last)),
            "within 1 s",
            rel.last <= Duration::from_secs(1),
        );
        r.target(
            &format!(
                "{} distinct locks released at once: grant p99 (client on its {how})",
                w / 2
            ),
            format!("{} ms", ms(rel.p99)),
            "≤ 25 ms",
            rel.p99 <= Duration::from_millis(25),
        );
        let ratio = m.hot_rate / raw.hot_rate;
        r.target(
            &format!(
                "hot lock hand-offs/s through sessions vs raw BLOCK ({w} waiters, client on its {how})"
            ),
            format!("{ratio:.2}×"),
            "≥ 1.0× (as fast as raw BLOCK clients)",
            ratio >= 1.0,
        );
    }
    r.target(
        "lost-hold signal p99 (FORCERELEASE → lost())",
        format!("{} ms", ms(lost.p99)),
        "≤ 10 ms",
        lost.p99 <= Duration::from_millis(10),
    );
}

/// Grant latencies after a release.
struct Latency {
    p50: Duration,
    p99: Duration,
    last: Duration,
}

impl Latency {
    fn of(mut v: Vec<Duration>) -> Latency {
        Latency {
            p50: percentile(&mut v, 50.0),
            p99: percentile(&mut v, 99.0),
            last: v.iter().copied().max().unwrap_or_default(),
        }
    }

    fn show(&self) -> String {
        format!("{} / {} / {}", ms(self.p50), ms(self.p99), ms(self.last))
    }
}

struct Measured {
    bytes_per_wait: f64,
    conns_per_wait: f64,
    release: Latency,
    release_cost: Spent,
    /// The hot lock's phase, per hand-off (CPU in µs, reads per hand-off).
    hot_cost: (f64, f64, f64),
    hot_rate: f64,
    /// Two tasks inside the hot lock at once (the exclusion checker).
    violations: u64,
}

/// Hold `hot` and `keys` as a raw owner.
fn hold(c: &mut Connection, hot: &str, keys: &[String]) -> String {
    let who = owner(70);
    for chunk in keys.chunks(1000) {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd("RLOCK.ACQUIRE").arg(k).arg(&who).arg(600_000);
        }
        let _: Vec<Value> = p.query(c).unwrap();
    }
    let _: i64 = redis::cmd("RLOCK.ACQUIRE")
        .arg(hot)
        .arg(&who)
        .arg(600_000)
        .query(c)
        .unwrap();
    who
}

/// Release `keys` in one pipeline; returns when it was sent.
fn release_all(c: &mut Connection, keys: &[String], who: &str) -> Instant {
    let mut p = redis::pipe();
    for k in keys {
        p.cmd("RLOCK.RELEASE").arg(k).arg(who);
    }
    let at = Instant::now();
    let _: Vec<Value> = p.query(c).unwrap();
    at
}

/// Waiters queued on the server now.
fn waiters(c: &mut Connection) -> usize {
    rlock_tests::rlock_stat(c, "waiters") as usize
}

/// `used_memory` once it has settled (replies still in the server's buffers are no request's
/// cost): two readings 50 ms apart within 1 KB, or the last after 2 s.
fn settled_memory(c: &mut Connection) -> i64 {
    let mut last = info_int(c, "memory", "used_memory");
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let now = info_int(c, "memory", "used_memory");
        if (now - last).abs() <= 1024 {
            return now;
        }
        last = now;
    }
    last
}

/// When each task was granted, and when the hot lock's tasks were done.
struct Grants {
    distinct: Vec<Instant>,
    hot: Vec<Instant>,
}

/// The rlock client's waits; `on_tasks_runtime`: its background work on the tasks' runtime
/// (`ClientBuilder::runtime`), else on a runtime of its own.
fn through_sessions(
    b: &Bench,
    rt: &tokio::runtime::Runtime,
    w: usize,
    on_tasks_runtime: bool,
) -> Measured {
    let mut c = b.conn();
    let (hot, keys) = names(if on_tasks_runtime { "mwt" } else { "mws" }, w);
    let who = hold(&mut c, &hot, &keys);
    let mut builder = rlock_client::Client::builder().url(b.url.clone());
    if on_tasks_runtime {
        builder = builder.runtime(rt.handle().clone());
    }
    let client = builder.build().expect("rlock client");
    // The session listener and the command connection open with the first acquire: let a
    // first one happen before the baseline (their own buffers are not a queued request's).
    let warm = client.lock("mws:warm");
    assert!(warm.try_lock().unwrap());
    warm.unlock().unwrap();
    let mem0 = settled_memory(&mut c);
    let conns0 = info_int(&mut c, "clients", "connected_clients");
    let grants = Arc::new(Collected::new(w / 2, w / 2));
    let check = Arc::new(Exclusion::default());
    let tasks: Vec<_> = keys
        .iter()
        .map(|k| (k.clone(), false))
        .chain((0..w / 2).map(|_| (hot.clone(), true)))
        .map(|(k, is_hot)| {
            let lock = client.async_lock(k);
            let (grants, check) = (grants.clone(), check.clone());
            rt.spawn(async move {
                let g = lock.guard().await.expect("wait through the session");
                // The hot lock's holders: inside from the grant until the release is sent.
                let held = is_hot.then(|| check.exclusive());
                let at = Instant::now();
                critical();
                drop(held);
                g.unlock().await.expect("release");
                grants.record(is_hot, at);
            })
        })
        .collect();
    let mut out = finish(
        &mut c,
        rt,
        (&hot, &keys, &who),
        tasks,
        &grants,
        (mem0, conns0),
    );
    drop(client);
    out.violations = checked(&check, w / 2);
    out
}

fn raw_block(b: &Bench, rt: &tokio::runtime::Runtime, w: usize) -> Measured {
    let mut c = b.conn();
    let (hot, keys) = names("mwr", w);
    let who = hold(&mut c, &hot, &keys);
    let url = b.url.clone();
    // One connection per waiter, all open before the baseline.
    let conns: Vec<redis::aio::MultiplexedConnection> = rt.block_on(async {
        let client = redis::Client::open(url).unwrap();
        let cfg = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut all = Vec::with_capacity(w);
        // In batches: thousands of connects at once overflow the server's accept backlog.
        while all.len() < w {
            let batch: Vec<_> = (0..200.min(w - all.len()))
                .map(|_| {
                    let (client, cfg) = (client.clone(), cfg.clone());
                    tokio::spawn(async move {
                        client
                            .get_multiplexed_async_connection_with_config(&cfg)
                            .await
                            .expect("raw waiter connection")
                    })
                })
                .collect();
            for h in batch {
                all.push(h.await.unwrap());
            }
        }
        all
    });
    let mem0 = settled_memory(&mut c);
    let conns0 = info_int(&mut c, "clients", "connected_clients") - w as i64;
    let grants = Arc::new(Collected::new(w / 2, w / 2));
    let check = Arc::new(Exclusion::default());
    let targets = keys
        .iter()
        .map(|k| (k.clone(), false))
        .chain((0..w / 2).map(|_| (hot.clone(), true)));
    let tasks: Vec<_> = targets
        .zip(conns)
        .enumerate()
        .map(|(i, ((k, is_hot), mut conn))| {
            let (grants, check) = (grants.clone(), check.clone());
            let me = owner(100_000 + i);
            rt.spawn(async move {
                let got: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
                    .arg(&k)
                    .arg(&me)
                    .arg(30_000)
                    .arg("BLOCK")
                    .arg(0)
                    .query_async(&mut conn)
                    .await
                    .expect("raw BLOCK acquire");
                assert!(got.is_some());
                // The hot lock's holders: inside from the grant until the release is sent.
                let held = is_hot.then(|| check.exclusive());
                let at = Instant::now();
                critical();
                drop(held);
                let _: i64 = redis::cmd("RLOCK.RELEASE")
                    .arg(&k)
                    .arg(&me)
                    .query_async(&mut conn)
                    .await
                    .expect("raw release");
                grants.record(is_hot, at);
            })
        })
        .collect();
    let mut out = finish(
        &mut c,
        rt,
        (&hot, &keys, &who),
        tasks,
        &grants,
        (mem0, conns0),
    );
    out.violations = checked(&check, w / 2);
    out
}

/// The hot lock's violations, once every one of its `sections` tasks is done (`finish` waited
/// for them): a task that never entered would hide one.
fn checked(check: &Exclusion, sections: usize) -> u64 {
    assert_eq!(check.sections(), sections as u64, "hot lock sections");
    check.violations()
}

/// Once every task waits: the server's memory and connections against the baseline
/// `(memory, connections)`, then the releases, and every task's grant.
fn finish(
    c: &mut Connection,
    rt: &tokio::runtime::Runtime,
    (hot, keys, who): (&str, &[String], &str),
    tasks: Vec<tokio::task::JoinHandle<()>>,
    grants: &Collected,
    (mem0, conns0): (i64, i64),
) -> Measured {
    let w = tasks.len();
    wait_until(Duration::from_secs(120), "every wait queued", || {
        waiters(c) >= w
    });
    let mem1 = settled_memory(c);
    let conns1 = info_int(c, "clients", "connected_clients");
    let grants = release_and_collect(c, hot, keys, who, grants);
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    measured(&grants, mem1 - mem0, conns1 - conns0, w)
}

/// Release the distinct locks at once, then the hot one; collect every task's grant.
fn release_and_collect(
    c: &mut Connection,
    hot: &str,
    keys: &[String],
    who: &str,
    grants: &Collected,
) -> (Instant, Grants, Instant, [Spent; 2]) {
    let before = Spent::now(c);
    let released = release_all(c, keys, who);
    let (distinct, hot_early) = grants.wait(false, Duration::from_secs(60));
    let spent = Spent::now(c).since(&before);
    assert_eq!(hot_early, 0, "the hot lock is still held");
    let before = Spent::now(c);
    let hot_released = release_all(c, &[hot.to_string()], who);
    grants.wait(true, Duration::from_secs(120));
    let hot_spent = Spent::now(c).since(&before);
    let hot = grants.take_hot();
    let g = Grants { distinct, hot };
    (released, g, hot_released, [spent, hot_spent])
}

/// What the distinct locks' release and grants cost, from the release to the last grant in:
/// the server's CPU (`INFO cpu`: every command of the phase, the waiters' own releases
/// included), this process' CPU (the waiters' side: the client, or the raw connections, and
/// the tasks), and the `RSESSION.READ` calls that brought the outcomes.
#[derive(Clone, Copy, Default)]
struct Spent {
    server_ms: f64,
    process_ms: f64,
    reads: u64,
}

impl Spent {
    fn now(c: &mut Connection) -> Spent {
        let reads = crate::bench::commandstats(c)
            .get("rsession.read")
            .map_or(0, |(calls, _)| *calls);
        Spent {
            server_ms: crate::bench::server_cpu(c) * 1000.0,
            process_ms: process_cpu_ms(),
            reads,
        }
    }

    fn since(&self, before: &Spent) -> Spent {
        Spent {
            server_ms: self.server_ms - before.server_ms,
            process_ms: self.process_ms - before.process_ms,
            reads: self.reads - before.reads,
        }
    }

    fn show(&self) -> String {
        format!(
            "{:.1} / {:.1} / {}",
            self.server_ms, self.process_ms, self.reads
        )
    }

    /// Per one of `n`: server and process CPU in µs, and reads.
    fn per(&self, n: usize) -> (f64, f64, f64) {
        let n = n.max(1) as f64;
        (
            self.server_ms * 1000.0 / n,
            self.process_ms * 1000.0 / n,
            self.reads as f64 / n,
        )
    }
}

/// CPU time this process has used (user + system), in ms.
fn process_cpu_ms() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable rusage; RUSAGE_SELF always exists.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    ms(u.ru_utime) + ms(u.ru_stime)
}

/// When each task was granted, as the tasks record it: a list behind a mutex, and one wake-up
/// of the benchmark's thread when a phase's last grant is in. (A channel woke that thread for
/// every grant: 5,000 wake-ups of a thread competing for the cores with the server and the
/// tasks, during the very grants being timed.)
struct Collected {
    seen: Mutex<Grants>,
    all_in: Condvar,
    distinct: usize,
    hot: usize,
}

impl Collected {
    fn new(distinct: usize, hot: usize) -> Collected {
        Collected {
            seen: Mutex::new(Grants {
                distinct: Vec::with_capacity(distinct),
                hot: Vec::with_capacity(hot),
            }),
            all_in: Condvar::new(),
            distinct,
            hot,
        }
    }

    fn record(&self, is_hot: bool, at: Instant) {
        let mut g = self.seen.lock().unwrap();
        let (v, want) = if is_hot {
            (&mut g.hot, self.hot)
        } else {
            (&mut g.distinct, self.distinct)
        };
        v.push(at);
        if v.len() == want {
            self.all_in.notify_all();
        }
    }

    /// Wait until every grant of one side (the hot lock's or the distinct locks') is in; the
    /// distinct grants so far (all of them once they are in) and how many hot ones came.
    fn wait(&self, hot: bool, timeout: Duration) -> (Vec<Instant>, usize) {
        let g = self.seen.lock().unwrap();
        let (mut g, waited) = self
            .all_in
            .wait_timeout_while(g, timeout, |g| {
                if hot {
                    g.hot.len() < self.hot
                } else {
                    g.distinct.len() < self.distinct
                }
            })
            .unwrap();
        assert!(!waited.timed_out(), "timed out waiting for the grants");
        (std::mem::take(&mut g.distinct), g.hot.len())
    }

    fn take_hot(&self) -> Vec<Instant> {
        std::mem::take(&mut self.seen.lock().unwrap().hot)
    }
}

fn measured(
    (released, g, hot_released, [spent, hot_spent]): &(Instant, Grants, Instant, [Spent; 2]),
    bytes: i64,
    conns: i64,
    w: usize,
) -> Measured {
    let lat = g
        .distinct
        .iter()
        .map(|t| t.saturating_duration_since(*released))
        .collect();
    let last_hot = g.hot.iter().max().copied().unwrap_or(*hot_released);
    let span = last_hot.saturating_duration_since(*hot_released);
    Measured {
        bytes_per_wait: bytes as f64 / w as f64,
        conns_per_wait: conns.max(0) as f64 / w as f64,
        release: Latency::of(lat),
        release_cost: *spent,
        hot_cost: hot_spent.per(g.hot.len()),
        hot_rate: g.hot.len() as f64 / span.as_secs_f64().max(1e-9),
        violations: 0,
    }
}

/// The hot lock's name and `w / 2` distinct lock names.
fn names(prefix: &str, w: usize) -> (String, Vec<String>) {
    (
        format!("{prefix}:hot"),
        (0..w / 2).map(|i| format!("{prefix}:d:{i}")).collect(),
    )
}

/// How soon a holder learns its hold ended: `rounds` force releases of a held lock.
fn lost_signal(b: &Bench, rt: &tokio::runtime::Runtime, rounds: usize) -> LostSignal {
    let client = Arc::new(rlock_client::Client::open(b.url.clone()).expect("rlock client"));
    let mut c = b.conn();
    let mut took = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let lock = client
            .async_lock(format!("mwlost:{i}"))
            .with_owner(client.new_owner());
        let (tx, rx) = std::sync::mpsc::channel();
        let ready = Arc::new(std::sync::Barrier::new(2));
        let r2 = ready.clone();
        let task = rt.spawn(async move {
            let g = lock.guard().await.expect("take the lock");
            r2.wait();
            g.lost().await;
            let _ = tx.send(Instant::now());
            drop(g);
        });
        ready.wait();
        let at = Instant::now();
        let n: i64 = redis::cmd("RLOCK.FORCERELEASE")
            .arg(format!("mwlost:{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 1);
        let fired = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("lost() fired");
        took.push(fired.saturating_duration_since(at));
        rt.block_on(task).unwrap();
    }
    let n = took.len();
    let l = Latency::of(took);
    LostSignal {
        n,
        p50: l.p50,
        p99: l.p99,
    }
}

struct LostSignal {
    n: usize,
    p50: Duration,
    p99: Duration,
}

impl LostSignal {
    fn len(&self) -> usize {
        self.n
    }
}

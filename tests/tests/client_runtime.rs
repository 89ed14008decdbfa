//! The client's background work on the caller's runtime (`ClientBuilder::runtime`): it runs
//! there (the runtime's task count shows it), waits and hand-offs work on a one-worker runtime,
//! the watchdog renews there, and the calls that block (a dropped async wait's withdrawal, the
//! sync API) do not strand the worker they block: each runs with its own deadline, so a
//! deadlock fails the test instead of hanging it. A dropped client leaves no task behind there.

mod client_support;

use std::sync::mpsc;
use std::time::Duration;

use client_support::*;
use rlock_client::Error;
use rlock_tests::{redis, wait_until, Server};

/// A client whose background work runs on `rt`.
fn client_on(s: &Server, rt: &tokio::runtime::Runtime) -> rlock_client::Client {
    client_with(s.url(), |b| b.runtime(rt.handle().clone()))
}

/// `f` on a thread of its own; panics if it does not end within `limit` (a deadlock).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what}: not done within {limit:?} (deadlocked?)"))
}

/// `fut` as a task of `rt`, driven from a thread of its own within `limit` (see [`within`]).
/// The runtime comes back: it must outlive the client.
fn in_task<T: Send + 'static>(
    rt: tokio::runtime::Runtime,
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> (T, tokio::runtime::Runtime) {
    within(limit, what, move || {
        let out = rt.block_on(async move { tokio::spawn(fut).await.unwrap() });
        (out, rt)
    })
}

#[test]
fn a_current_thread_runtime_is_refused() {
    let s = Server::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rlock_client::Client::builder()
        .url(s.url())
        .runtime(rt.handle().clone())
        .build();
    match r {
        Err(Error::Config(m)) => assert!(m.contains("multi-thread"), "{m}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a current-thread runtime was accepted"),
    }
}

#[test]
fn the_background_work_runs_on_the_given_runtime() {
    let s = Server::start();
    let mut c = s.conn();
    let rt = runtime(2);
    let own = runtime(2);
    let on_rt = client_on(&s, &rt);
    let apart = client(&s);
    // Nothing of the test's runs on `own`: what lives there is the client's.
    own.block_on(async {
        let g = on_rt.async_lock("bg:a").guard().await.unwrap();
        g.unlock().await.unwrap();
        let g = apart.async_lock("bg:b").guard().await.unwrap();
        g.unlock().await.unwrap();
    });
    // The first client's connection driver and watchdog are tasks of `rt`. The second
    // client's background work is on a runtime of its own; on `own` runs only the driver of
    // the connection its requests from `own` were sent on (one thread crossing fewer per
    // command: `runtime::caller`).
    assert!(
        rt.metrics().num_alive_tasks() > 0,
        "the client's tasks run on the runtime it was given"
    );
    // (The task that opened that connection may take a moment to be released.)
    wait_until(
        Duration::from_secs(5),
        "a client without a runtime runs only its callers' connection on their runtime",
        || own.metrics().num_alive_tasks() == 1,
    );
    assert!(!exists(&mut c, "bg:a") && !exists(&mut c, "bg:b"));
    // Dropped, the client leaves nothing running on a runtime that outlives it (the watchdog
    // stops at its next tick, the connections' drivers with their connections).
    drop(on_rt);
    wait_until(Duration::from_secs(5), "the client's tasks end", || {
        rt.metrics().num_alive_tasks() == 0
    });
    drop(apart);
    wait_until(
        Duration::from_secs(5),
        "the callers' connection ends",
        || own.metrics().num_alive_tasks() == 0,
    );
}

/// A client of its own runtime, called from runtimes that come and go: a multi-thread runtime
/// that ended (its connection went with it), another one, a current-thread runtime (whose
/// requests take the client's own connection: its driver could run only while that runtime's
/// owner drives it), and no runtime at all. Each takes and releases its lock, and the first
/// runtime's connection is not reused by the next.
#[test]
fn async_calls_from_runtimes_that_come_and_go() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let take = |name: &'static str| {
        let lock = client.async_lock(name);
        async move {
            let g = lock.guard().await.unwrap();
            assert!(!g.is_lost());
            g.unlock().await.unwrap();
        }
    };
    let first = runtime(2);
    first.block_on(take("rt:first"));
    // (The task that opened the connection may take a moment to be released.)
    let one_task = |rt: &tokio::runtime::Runtime, what: &str| {
        wait_until(Duration::from_secs(5), what, || {
            rt.metrics().num_alive_tasks() == 1
        })
    };
    one_task(&first, "its connection's driver runs there");
    drop(first);
    let second = runtime(2);
    second.block_on(take("rt:second"));
    one_task(&second, "a connection of its own");
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    current.block_on(take("rt:current"));
    assert_eq!(
        current.metrics().num_alive_tasks(),
        0,
        "nothing runs on a current-thread runtime"
    );
    futures_lite_block_on(take("rt:none"));
    for name in ["rt:first", "rt:second", "rt:current", "rt:none"] {
        assert!(!exists(&mut c, name), "{name} released");
    }
}

/// Drive `fut` on this thread without any runtime.
fn futures_lite_block_on<F: std::future::Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = std::task::Waker::from(std::sync::Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

struct ThreadWaker(std::thread::Thread);

impl std::task::Wake for ThreadWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

#[test]
fn eight_tasks_take_turns_on_a_one_worker_runtime() {
    let s = Server::start();
    let mut c = s.conn();
    let rt = runtime(1);
    let client = client_on(&s, &rt);
    let url = s.url();
    within(
        Duration::from_secs(60),
        "8 tasks x 50 increments",
        move || {
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let lock = client.async_lock("turns:lock");
                    let url = url.clone();
                    rt.spawn(async move {
                        let mut c = redis::Client::open(url)
                            .unwrap()
                            .get_multiplexed_async_connection()
                            .await
                            .unwrap();
                        for _ in 0..50 {
                            let g = lock.guard().await.unwrap();
                            // Not atomic on purpose: two holders at once lose increments.
                            let v: Option<i64> = redis::cmd("GET")
                                .arg("turns")
                                .query_async(&mut c)
                                .await
                                .unwrap();
                            let _: () = redis::cmd("SET")
                                .arg("turns")
                                .arg(v.unwrap_or(0) + 1)
                                .query_async(&mut c)
                                .await
                                .unwrap();
                            g.unlock().await.unwrap();
                        }
                    })
                })
                .collect();
            rt.block_on(async {
                for t in tasks {
                    t.await.unwrap();
                }
            });
            drop(client);
        },
    );
    let v: i64 = redis::cmd("GET").arg("turns").query(&mut c).unwrap();
    assert_eq!(v, 8 * 50);
    assert!(!exists(&mut c, "turns:lock"));
    assert_no_wait_left(&mut c);
}

#[test]
fn the_watchdog_renews_on_the_given_runtime() {
    let s = Server::start();
    let mut c = s.conn();
    let rt = runtime(1);
    let client = client_on(&s, &rt);
    let lock = client.async_lock("renewed");
    let g = rt.block_on(lock.guard()).unwrap();
    // The lease is the 600 ms watchdog timeout: held for 3 of them, it was renewed.
    std::thread::sleep(Duration::from_millis(1800));
    let ttl: i64 = redis::cmd("PTTL").arg("renewed").query(&mut c).unwrap();
    assert!(ttl > 0, "still held after three leases (PTTL {ttl})");
    assert!(!g.is_lost());
    rt.block_on(g.unlock()).unwrap();
    assert!(!exists(&mut c, "renewed"));
}

#[test]
fn a_wait_dropped_on_a_one_worker_runtime_is_withdrawn() {
    let s = Server::start();
    let mut c = s.conn();
    let rt = runtime(1);
    let client = client_on(&s, &rt);
    let holder = client.lock("dropped");
    holder.lock().unwrap();
    let lock = client.async_lock("dropped");
    // The timeout drops the queued acquire inside the runtime's only worker; withdrawing it
    // needs the connection driver, a task of that same runtime.
    let (timed_out, _rt) = in_task(rt, Duration::from_secs(10), "the withdrawal", async move {
        tokio::time::timeout(Duration::from_millis(100), lock.lock())
            .await
            .is_err()
    });
    assert!(timed_out);
    assert_no_waiters(&mut c, "dropped");
    holder.unlock().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!exists(&mut c, "dropped"), "nobody was handed the lock");
}

#[test]
fn the_sync_api_from_a_task_of_the_given_runtime() {
    let s = Server::start();
    let mut c = s.conn();
    let rt = runtime(1);
    let client = client_on(&s, &rt);
    // An owner of its own: another thread lets go.
    let holder = client.lock("synced").with_owner(client.new_owner());
    holder.lock().unwrap();
    let lock = client.lock("synced");
    let mut c2 = s.conn();
    let released = std::thread::spawn(move || {
        wait_until(Duration::from_secs(5), "the sync wait is queued", || {
            waiters(&mut c2, "synced") == 1
        });
        holder.unlock().unwrap();
    });
    let calls = async move {
        // Blocks the only worker until the holder lets go.
        lock.lock().unwrap();
        let other = lock.clone();
        let t = std::time::Instant::now();
        // Another thread's try_lock_for on a lock this thread holds: not granted.
        let short =
            std::thread::spawn(move || other.try_lock_for(Duration::from_millis(200)).unwrap())
                .join()
                .unwrap();
        let waited = t.elapsed();
        lock.unlock().unwrap();
        (true, (short, waited))
    };
    let ((got, short), _rt) = in_task(rt, Duration::from_secs(10), "sync calls in a task", calls);
    released.join().unwrap();
    assert!(got);
    assert!(!short.0, "the lock was held");
    assert!(
        short.1 >= Duration::from_millis(190) && short.1 < Duration::from_millis(1200),
        "try_lock_for(200 ms) took {:?}",
        short.1
    );
    assert!(!exists(&mut c, "synced"));
}

#[test]
fn the_sync_api_from_a_task_of_the_given_runtime_on_a_cluster() {
    // On a cluster every request, sync ones too, goes over the async cluster connection, whose
    // driver is a task of the given runtime: a sync call blocking its only worker would wait
    // for a driver that can't run.
    let cluster = rlock_tests::cluster::Cluster::start();
    let rt = runtime(1);
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_millis(600))
        .runtime(rt.handle().clone())
        .build()
        .expect("cluster client");
    let lock = client.lock("{synced}:c");
    let calls = async move {
        lock.lock().unwrap();
        let held = lock.is_held_by_current_thread().unwrap();
        lock.unlock().unwrap();
        held
    };
    let (held, _rt) = in_task(rt, Duration::from_secs(20), "sync calls in a task", calls);
    assert!(held);
    let mut c = cluster.master_for("{synced}:c").conn();
    assert!(!exists(&mut c, "{synced}:c"));
}

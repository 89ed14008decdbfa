//! The rlock client over Redisson's own protocol, against a plain redis-server WITHOUT the
//! module (issue 37): detection at connect, the reentrant lock with Redisson's scripts, keys
//! and channel, waits on the client's one shared pub/sub connection, the watchdog, lost holds,
//! interop with Redisson's scripts run by the harness (a "Java" holder), the plain semaphore,
//! and sharded pub/sub in a cluster. This mode's other objects: `client_redisson_objects.rs` (read-write lock, latch, permit-expirable
//! semaphore) and `client_redisson_locks.rs` (fair, fenced, non-reentrant locks, the wake-up
//! policy).

mod client_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{Error, Protocol, Ttl};
use rlock_tests::{
    acl_user, cmd, int, lock_channel, margin, prefix_name, pttl, raw, redis, redisson, wait_until,
    Server, ServerOptions, Value,
};

/// A redis-server without the rlock module.
fn plain() -> Server {
    Server::with(ServerOptions {
        module: false,
        ..Default::default()
    })
}

/// An integer reply that Redis sends as a string (`GET`, `HGET`).
fn num(c: &mut redis::Connection, cmd: &redis::Cmd) -> i64 {
    cmd.query::<Option<i64>>(c).unwrap().unwrap_or(0)
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`).
fn numsub(c: &mut redis::Connection, channel: &str) -> i64 {
    match raw(c, &cmd!("PUBSUB", "NUMSUB", channel)) {
        Value::Array(v) => redis::from_redis_value(v[1].clone()).unwrap(),
        Value::Map(v) => redis::from_redis_value(v[0].1.clone()).unwrap(),
        other => panic!("PUBSUB NUMSUB: {other:?}"),
    }
}

/// Connections of the server in pub/sub mode (`CLIENT LIST`, flag `P`).
fn pubsub_connections(c: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
    list.lines()
        .filter(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("flags="))
                .is_some_and(|f| f.contains('P'))
        })
        .count()
}

#[test]
fn auto_detects_the_protocol_of_each_server() {
    let bare = plain();
    let with_module = Server::start();
    assert_eq!(client(&bare).protocol().unwrap(), Protocol::Redisson);
    assert_eq!(client(&with_module).protocol().unwrap(), Protocol::Module);
    // Forced: no detection, and the module is never pretended.
    let forced = client_with(bare.url(), |b| b.protocol(Protocol::Module));
    assert_eq!(forced.protocol().unwrap(), Protocol::Module);
    assert!(matches!(
        forced.lock("x").try_lock(),
        Err(Error::ModuleNotLoaded(_))
    ));
    let forced = client_with(with_module.url(), |b| b.protocol(Protocol::Redisson));
    assert_eq!(forced.protocol().unwrap(), Protocol::Redisson);
    assert_eq!(forced.config().protocol(), Protocol::Redisson);
    // Redisson's protocol on a server with the module: the same layout, no RLOCK command.
    let mut c = with_module.conn();
    let lock = forced.lock("both");
    assert!(lock.try_lock().unwrap());
    assert_eq!(calls(&mut c, "rlock.acquire"), 0);
    let owner_holds: i64 = num(&mut c, &cmd!("HGET", "both", lock.owner().as_str()));
    assert_eq!(owner_holds, 1);
    lock.unlock().unwrap();
}

#[test]
fn neither_module_nor_scripting_is_one_clear_error() {
    let bare = plain();
    let mut c = bare.conn();
    let _user = acl_user(
        &bare,
        &mut c,
        "noscripts",
        &["~*", "&*", "+@all", "-@scripting"],
    );
    let url = format!("redis://noscripts:x@127.0.0.1:{}/", bare.port);
    let client = client_with(url, |b| b);
    let e = client.lock("x").try_lock().unwrap_err();
    assert!(matches!(e, Error::NoLockProtocol { .. }), "{e:?}");
    let msg = e.to_string();
    for words in [
        "rlock module",
        "Redisson's protocol",
        "EVAL",
        &bare.port.to_string(),
    ] {
        assert!(msg.contains(words), "{msg}");
    }
    assert!(matches!(
        client.protocol(),
        Err(Error::NoLockProtocol { .. })
    ));
}

/// The unlock latches on the server (`KEYS redisson_unlock_latch:*`).
fn latches(c: &mut redis::Connection) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("redisson_unlock_latch:*")
        .query(c)
        .unwrap()
}

/// An unlock that ran on the server but whose reply was lost: the server is stopped while the
/// unlock is sent and resumed after the client's response timeout dropped the connection,
/// before its retry delay ends. The server then runs what was sent (the unlock script and,
/// written behind it, its latch's `DEL`), and the client must ask the lock how many holds its
/// owner has left before sending again: a second unlock would take a second hold of a
/// re-entered lock (sent again with the same latch, the latch is gone by then). Both
/// protocols: Redisson's scripts (server without the module) and `RLOCK.RELEASE`; the sync
/// API (its own blocking connection) and the async one (a multiplexed connection).
#[test]
fn an_unlock_whose_reply_is_lost_takes_one_hold_in_both_protocols() {
    let (timeout, resume_after) = lost_reply_timing();
    let rt = runtime(2);
    for module in [false, true] {
        let s = Server::with(ServerOptions {
            module,
            ..Default::default()
        });
        let client = client_with(s.url(), |b| {
            b.response_timeout(timeout).retry(3, resume_after * 2)
        });
        assert_eq!(client.protocol().unwrap(), spoken(module));
        let case = format!("module {module}");
        unlock_with_its_reply_lost(&client, &rt, &case, "lost-reply", |_| &s, resume_after);
    }
}

/// The same in a cluster, where the unlock and the hold count it is checked by go through the
/// cluster transport (its connection to the node of the key's slot): that node is stopped.
#[test]
fn in_a_cluster_an_unlock_whose_reply_is_lost_takes_one_hold_in_both_protocols() {
    let (timeout, resume_after) = lost_reply_timing();
    let rt = runtime(2);
    for module in [false, true] {
        let cluster = match module {
            true => rlock_tests::cluster::Cluster::start(),
            false => rlock_tests::cluster::Cluster::without_module(),
        };
        let client = rlock_client::Client::builder()
            .cluster(cluster.seeds())
            .watchdog_timeout(Duration::from_millis(600))
            .response_timeout(timeout)
            .retry(3, resume_after * 2)
            .build()
            .unwrap();
        assert_eq!(
            client.protocol_for("lost-reply:false").unwrap(),
            spoken(module)
        );
        let case = format!("cluster, module {module}");
        unlock_with_its_reply_lost(
            &client,
            &rt,
            &case,
            "lost-reply",
            |name| cluster.master_for(name),
            resume_after,
        );
    }
}

/// The client's response timeout, and how long the server stays stopped: past the timeout,
/// within the retry delay (the tests retry after twice that).
fn lost_reply_timing() -> (Duration, Duration) {
    let timeout = Duration::from_millis(200);
    (timeout, timeout + margin(Duration::from_millis(600)))
}

/// The protocol a client speaks to a server with the module or without.
fn spoken(module: bool) -> Protocol {
    match module {
        true => Protocol::Module,
        false => Protocol::Redisson,
    }
}

/// A lock of `client` re-entered three times and unlocked once; the next unlock is sent while
/// the server of its key (`node`) is stopped, which is resumed `resume_after` later: one hold
/// must be taken, not two. The sync API, then the async one, each on a lock of its own.
fn unlock_with_its_reply_lost<'a>(
    client: &rlock_client::Client,
    rt: &tokio::runtime::Runtime,
    case: &str,
    prefix: &str,
    node: impl Fn(&str) -> &'a Server,
    resume_after: Duration,
) {
    for asynchronous in [false, true] {
        let case = format!("{case}, async {asynchronous}");
        let name = format!("{prefix}:{asynchronous}");
        let server = node(&name);
        let mut c = server.conn();
        let lock = client.lock(name.as_str());
        let alock = client
            .async_lock(name.as_str())
            .with_owner(client.new_owner());
        let owner = if asynchronous {
            alock.owner()
        } else {
            lock.owner()
        };
        let unlock = || match asynchronous {
            true => rt.block_on(alock.unlock()),
            false => lock.unlock(),
        };
        // A lease, not the watchdog: the server's clock runs on while it is stopped.
        for _ in 0..3 {
            let lease = Duration::from_secs(30);
            match asynchronous {
                true => rt.block_on(alock.lock_with_lease(lease)),
                false => lock.lock_with_lease(lease),
            }
            .unwrap();
        }
        // One unlock first, so that the server has the unlock script: the one whose reply
        // is lost then runs (`EVALSHA`), rather than being refused `NOSCRIPT`.
        unlock().unwrap();
        let holds =
            |c: &mut redis::Connection| num(c, redis::cmd("HGET").arg(&name).arg(owner.as_str()));
        assert_eq!(holds(&mut c), 2, "{case}");

        let pid = server.pid();
        rlock_tests::signal(pid, "-STOP");
        let resume = std::thread::spawn(move || {
            std::thread::sleep(resume_after);
            rlock_tests::signal(pid, "-CONT");
        });
        let started = Instant::now();
        let r = unlock();
        resume.join().unwrap();
        assert!(
            started.elapsed() >= resume_after,
            "{case}: the unlock's reply came while the server was stopped"
        );
        r.unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(holds(&mut c), 1, "{case}: one hold taken, not two");
        let count = match asynchronous {
            true => rt.block_on(alock.hold_count()),
            false => lock.hold_count(),
        };
        assert_eq!(count.unwrap(), 1, "{case}");
        assert_eq!(latches(&mut c), Vec::<String>::new(), "{case}");
        unlock().unwrap();
        assert_eq!(int(&mut c, redis::cmd("EXISTS").arg(&name)), 0, "{case}");
    }
}

#[test]
fn reentrant_lock_in_redissons_layout_with_its_scripts() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = client(&s);
    let lock = client.lock("re");
    let owner = lock.owner();
    for n in 1..=3 {
        lock.lock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), n);
    }
    assert_eq!(num(&mut c, &cmd!("HGET", "re", owner.as_str())), 3);
    assert!(lock.is_locked().unwrap());
    assert!(lock.is_held_by_current_thread().unwrap());
    let ttl = pttl(&mut c, "re");
    assert!(ttl > 0 && ttl <= 600, "watchdog lease: {ttl}");
    // Byte for byte Redisson's acquire script: the server cached the SHA1 of the harness's
    // copy of Redisson's text (after EVALSHA found nothing and EVAL loaded it).
    let sha = redis::Script::new(redisson::ACQUIRE).get_hash().to_string();
    assert_eq!(
        raw(&mut c, &cmd!("SCRIPT", "EXISTS", &sha)),
        Value::Array(vec![Value::Int(1)])
    );
    assert!(calls(&mut c, "evalsha") >= 3, "EVALSHA first");

    let other = std::thread::scope(|t| {
        t.spawn(|| {
            assert!(!lock.try_lock().unwrap());
            assert!(!lock.is_held_by_current_thread().unwrap());
            lock.unlock().unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert!(matches!(other, Error::NotOwner { .. }), "{other:?}");

    let mut sub = rlock_tests::Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    for n in (0..3).rev() {
        lock.unlock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), n);
    }
    assert!(!exists(&mut c, "re"));
    // One unlock message, on Redisson's channel, at the full release.
    assert_eq!(sub.drain(&mut c), [(lock_channel("re"), "0".to_string())]);
    // The unlock latches are deleted, as Redisson deletes them: in the same write as their
    // unlocks, so they are gone once the unlock returns.
    assert_eq!(
        latches(&mut c),
        Vec::<String>::new(),
        "the unlock latches deleted"
    );
    assert!(matches!(lock.unlock(), Err(Error::NotOwner { .. })));
    assert_eq!(lock.remain_time_to_live().unwrap(), Ttl::NotLocked);

    // A lease, a guard, force unlock.
    assert!(lock
        .try_lock_with(Duration::ZERO, Duration::from_secs(20))
        .unwrap());
    let ttl = pttl(&mut c, "re");
    assert!(ttl > 19_000 && ttl <= 20_000, "{ttl}");
    assert_eq!(client.renewing_count(), 0, "a lease hold is not renewed");
    assert!(lock.force_unlock().unwrap());
    assert!(!lock.force_unlock().unwrap());
    assert_eq!(sub.drain(&mut c), [(lock_channel("re"), "0".to_string())]);
    {
        let _g = lock.guard().unwrap();
        assert!(exists(&mut c, "re"));
    }
    assert!(!exists(&mut c, "re"));
}

#[test]
fn threads_exclude_each_other_under_contention() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    const THREADS: usize = 8;
    const ROUNDS: usize = 40;
    let in_section = AtomicBool::new(false);
    std::thread::scope(|t| {
        for _ in 0..THREADS {
            t.spawn(|| {
                let lock = client.lock("hot");
                let mut conn = s.conn();
                for _ in 0..ROUNDS {
                    let _g = lock.guard().unwrap();
                    assert!(!in_section.swap(true, Ordering::SeqCst), "two holders");
                    // A non-atomic read-modify-write: lost updates if two ran at once.
                    let n: i64 = redis::cmd("GET")
                        .arg("counter")
                        .query::<Option<i64>>(&mut conn)
                        .unwrap()
                        .unwrap_or(0);
                    let () = redis::cmd("SET")
                        .arg("counter")
                        .arg(n + 1)
                        .query(&mut conn)
                        .unwrap();
                    in_section.store(false, Ordering::SeqCst);
                }
            });
        }
    });
    assert_eq!(
        num(&mut c, &cmd!("GET", "counter")),
        (THREADS * ROUNDS) as i64
    );
    assert!(!exists(&mut c, "hot"));
    // Every wait shared one pub/sub connection, and it unsubscribed when the waits ended.
    assert!(pubsub_connections(&mut c) <= 1);
    wait_until(margin(Duration::from_secs(2)), "unsubscribed", || {
        numsub(&mut c, &lock_channel("hot")) == 0
    });
}

#[test]
fn tasks_exclude_each_other_under_contention() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let rt = runtime(4);
    const TASKS: usize = 16;
    const ROUNDS: usize = 20;
    let in_section = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let mut all = Vec::new();
        for _ in 0..TASKS {
            let lock = client.async_lock("hot");
            let in_section = in_section.clone();
            let url = s.url();
            all.push(tokio::spawn(async move {
                let redis_client = redis::Client::open(url).unwrap();
                let mut conn = redis_client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                for _ in 0..ROUNDS {
                    let g = lock.guard().await.unwrap();
                    assert!(!in_section.swap(true, Ordering::SeqCst), "two holders");
                    let n: Option<i64> = redis::cmd("GET")
                        .arg("counter")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let () = redis::cmd("SET")
                        .arg("counter")
                        .arg(n.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    in_section.store(false, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
        for t in all {
            t.await.unwrap();
        }
    });
    assert_eq!(
        num(&mut c, &cmd!("GET", "counter")),
        (TASKS * ROUNDS) as i64
    );
    assert!(pubsub_connections(&mut c) <= 1);
}

/// A waiter's subscription on the server: the wait is past its subscribe and re-attempt.
fn wait_subscribed(c: &mut redis::Connection, name: &str, n: i64) {
    wait_until(
        margin(Duration::from_secs(3)),
        "the waiter subscribed",
        || numsub(c, &lock_channel(name)) == n,
    );
}

#[test]
fn an_unlock_wakes_a_waiter_at_once() {
    let s = plain();
    let mut c = s.conn();
    // A 30 s watchdog: the holder's TTL can't be what wakes the waiter.
    let client = client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)));
    let lock = client.lock("wake");
    lock.lock().unwrap();
    let released = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            let l = client.lock("wake");
            assert!(l.try_lock_for(Duration::from_secs(10)).unwrap());
            let at = Instant::now();
            l.unlock().unwrap();
            at
        });
        wait_subscribed(&mut c, "wake", 1);
        lock.unlock().unwrap();
        let released = Instant::now();
        let got = waiter.join().unwrap();
        got.duration_since(released)
    });
    assert!(
        released < margin(Duration::from_millis(200)),
        "woken {released:?} after the unlock"
    );
}

#[test]
fn many_waiters_share_one_subscription_and_connection() {
    let s = plain();
    let mut c = s.conn();
    let client = client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)));
    let a = client.lock("a");
    let b = client.lock("b");
    a.lock().unwrap();
    b.lock().unwrap();
    const WAITERS: usize = 6;
    let start = Barrier::new(WAITERS + 1);
    std::thread::scope(|t| {
        for i in 0..WAITERS {
            let (client, start) = (&client, &start);
            t.spawn(move || {
                let l = client.lock(if i % 2 == 0 { "a" } else { "b" });
                start.wait();
                assert!(l.try_lock_for(Duration::from_secs(20)).unwrap());
                l.unlock().unwrap();
            });
        }
        start.wait();
        wait_subscribed(&mut c, "a", 1);
        wait_subscribed(&mut c, "b", 1);
        // One subscription per lock, all on one connection, however many wait.
        assert_eq!(pubsub_connections(&mut c), 1);
        a.unlock().unwrap();
        b.unlock().unwrap();
    });
    wait_until(margin(Duration::from_secs(2)), "unsubscribed", || {
        numsub(&mut c, &lock_channel("a")) + numsub(&mut c, &lock_channel("b")) == 0
    });
}

#[test]
fn a_waiter_takes_the_lock_when_the_holders_lease_ends() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    // A "Java" holder with a 400 ms lease that never unlocks: no message, only the TTL.
    assert_eq!(
        redisson::acquire(&mut c, "lease", "java-uuid:1", 400),
        Value::Nil
    );
    let lock = client.lock("lease");
    let start = Instant::now();
    assert!(lock.try_lock_for(Duration::from_secs(5)).unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(350)
            && waited < Duration::from_millis(400) + margin(Duration::from_millis(200)),
        "waited {waited:?} for a 400 ms lease"
    );
    lock.unlock().unwrap();
    // A wait that ends first returns false on time.
    assert_eq!(
        redisson::acquire(&mut c, "lease", "java-uuid:1", 30_000),
        Value::Nil
    );
    let start = Instant::now();
    assert!(!lock.try_lock_for(Duration::from_millis(300)).unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(300)
            && waited < Duration::from_millis(300) + margin(Duration::from_millis(150)),
        "{waited:?}"
    );
}

#[test]
fn the_watchdog_renews_with_redissons_script_and_reports_a_lost_hold() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s); // 600 ms watchdog, renewed every 200 ms
    let lock = client.lock("dog");
    let g = lock.guard().unwrap();
    assert_eq!(client.renewing_count(), 1);
    // Timing is the behaviour here: three leases long, still held.
    std::thread::sleep(Duration::from_millis(1800));
    assert!(exists(&mut c, "dog"));
    assert!(!g.is_lost());
    let ttl = pttl(&mut c, "dog");
    assert!(ttl > 0 && ttl <= 600, "{ttl}");
    assert!(
        calls(&mut c, "eval") >= 3,
        "renewals by EVAL of the renewal script"
    );
    // Gone behind its back: the next renewal finds it gone.
    int(&mut c, &cmd!("DEL", "dog"));
    wait_until(
        margin(Duration::from_secs(2)),
        "the hold reported lost",
        || g.is_lost(),
    );
    assert!(lock.is_lost());
    assert_eq!(client.renewing_count(), 0);
    drop(g);
}

#[test]
fn a_redisson_holder_blocks_this_client_and_its_unlock_wakes_it() {
    let s = plain();
    let mut c = s.conn();
    let client = client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)));
    assert_eq!(
        redisson::acquire(&mut c, "shared", "java-uuid:7", 30_000),
        Value::Nil
    );
    // One owner whichever thread acts (the waiter below is another thread).
    let lock = client.lock("shared").with_owner(client.new_owner());
    assert!(!lock.try_lock().unwrap());
    assert!(matches!(lock.unlock(), Err(Error::NotOwner { .. })));
    let woken = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            assert!(lock.try_lock_for(Duration::from_secs(10)).unwrap());
            Instant::now()
        });
        wait_subscribed(&mut c, "shared", 1);
        // Redisson's unlock script publishes on the lock's channel.
        assert_eq!(
            redisson::unlock(&mut c, "shared", "java-uuid:7", 30_000),
            Value::Int(1)
        );
        let unlocked = Instant::now();
        waiter.join().unwrap().duration_since(unlocked)
    });
    assert!(woken < margin(Duration::from_millis(200)), "{woken:?}");
    // Now this client holds it: Redisson's acquire is refused with the PTTL, its renewal
    // finds its own field missing, and this client's unlock wakes Redisson's waiters.
    assert!(matches!(
        redisson::acquire(&mut c, "shared", "java-uuid:7", 30_000),
        Value::Int(ms) if ms > 0
    ));
    assert!(!redisson::renew(&mut c, "shared", "java-uuid:7", 30_000));
    assert_eq!(
        num(&mut c, &cmd!("HGET", "shared", lock.owner().as_str())),
        1
    );
    let mut sub = rlock_tests::Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    lock.unlock().unwrap();
    assert_eq!(
        sub.drain(&mut c),
        [(lock_channel("shared"), "0".to_string())]
    );
    assert_eq!(
        redisson::acquire(&mut c, "shared", "java-uuid:7", 30_000),
        Value::Nil
    );
    // Redisson's force unlock frees it for this client.
    assert_eq!(redisson::force_unlock(&mut c, "shared"), Value::Int(1));
    assert!(lock.try_lock().unwrap());
    lock.unlock().unwrap();
}

#[test]
fn async_waits_are_cancel_safe_and_time_out() {
    let s = plain();
    let mut c = s.conn();
    let client = client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)));
    let rt = runtime(2);
    rt.block_on(async {
        let holder = client.async_lock("c").with_owner(client.new_owner());
        holder.lock().await.unwrap();
        let lock = client.async_lock("c");
        // Times out on time.
        let start = Instant::now();
        assert!(!lock.try_lock_for(Duration::from_millis(200)).await.unwrap());
        assert!(start.elapsed() < Duration::from_millis(200) + margin(Duration::from_millis(150)));
        // A wait dropped by its caller: no hold, and its subscription goes.
        let dropped = tokio::time::timeout(Duration::from_millis(150), lock.lock()).await;
        assert!(dropped.is_err());
        assert!(!lock.is_held_by_current_task().await.unwrap());
        assert_eq!(client.renewing_count(), 1, "only the holder's");
        holder.unlock().await.unwrap();
        // An async waiter is woken by the unlock.
        holder.lock().await.unwrap();
        let waiter = {
            let lock = lock.clone();
            tokio::spawn(async move {
                lock.lock().await.unwrap();
                let at = Instant::now();
                lock.unlock().await.unwrap();
                at
            })
        };
        while numsub(&mut c, &lock_channel("c")) != 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        holder.unlock().await.unwrap();
        let unlocked = Instant::now();
        let got = waiter.await.unwrap();
        assert!(got.duration_since(unlocked) < margin(Duration::from_millis(200)));
    });
    wait_until(margin(Duration::from_secs(2)), "unsubscribed", || {
        numsub(&mut c, &lock_channel("c")) == 0
    });
    assert!(!exists(&mut c, "c"));
}

#[test]
fn a_multilock_of_plain_locks_works_over_redissons_protocol() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let both = client.multi_lock(["m1", "m2"]).unwrap();
    {
        let _g = both.guard().unwrap();
        assert!(exists(&mut c, "m1") && exists(&mut c, "m2"));
        let other = client.lock("m2").with_owner(client.new_owner());
        assert!(!other.try_lock().unwrap());
    }
    assert!(!exists(&mut c, "m1") && !exists(&mut c, "m2"));
}

#[test]
fn a_semaphore_over_redissons_protocol() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.semaphore("sem");
    assert!(sem.try_set_permits(2).unwrap());
    assert!(!sem.try_set_permits(5).unwrap());
    // Redisson's layout: a string count.
    assert_eq!(num(&mut c, &cmd!("GET", "sem")), 2);
    assert_eq!(sem.available_permits().unwrap(), 2);
    assert!(sem.try_acquire_many(2).unwrap());
    assert!(!sem.try_acquire().unwrap());
    assert_eq!(sem.available_permits().unwrap(), 0);
    // A waiter is woken by a release (a count has no TTL: only the message can wake it).
    let woken = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            assert!(sem.try_acquire_for(Duration::from_secs(10)).unwrap());
            Instant::now()
        });
        wait_until(
            margin(Duration::from_secs(3)),
            "the waiter subscribed",
            || numsub(&mut c, "redisson_sc:{sem}") == 1,
        );
        let mut sub = rlock_tests::Subscriber::psubscribe(&s, "redisson_sc:*");
        sem.release().unwrap();
        let released = Instant::now();
        let got = waiter.join().unwrap().duration_since(released);
        // Redisson's release publishes the new count on Redisson's channel.
        assert_eq!(
            sub.drain(&mut c),
            [("redisson_sc:{sem}".to_string(), "1".to_string())]
        );
        got
    });
    assert!(woken < margin(Duration::from_millis(200)), "{woken:?}");
    assert_eq!(sem.available_permits().unwrap(), 0);
    // A wait that ends first returns false, on time.
    let start = Instant::now();
    assert!(!sem.try_acquire_for(Duration::from_millis(200)).unwrap());
    assert!(start.elapsed() < Duration::from_millis(200) + margin(Duration::from_millis(150)));
    // Interop: Redisson's own release script wakes this client's waiter.
    std::thread::scope(|t| {
        let waiter = t.spawn(|| sem.try_acquire_for(Duration::from_secs(10)).unwrap());
        wait_until(
            margin(Duration::from_secs(3)),
            "the waiter subscribed",
            || numsub(&mut c, "redisson_sc:{sem}") == 1,
        );
        raw(
            &mut c,
            &cmd!(
                "EVAL",
                redisson::semaphore::RELEASE,
                2,
                "sem",
                "redisson_sc:{sem}",
                1,
                "PUBLISH"
            ),
        );
        assert!(waiter.join().unwrap());
    });
    assert_eq!(sem.add_permits(3).unwrap(), 3);
    assert_eq!(sem.drain_permits().unwrap(), 3);
    assert_eq!(sem.available_permits().unwrap(), 0);
    {
        assert_eq!(sem.add_permits(1).unwrap(), 1);
        let _g = sem.guard().unwrap();
        assert_eq!(sem.available_permits().unwrap(), 0);
    }
    assert_eq!(sem.available_permits().unwrap(), 1);
    // The same script text as Redisson's (by SHA1).
    let sha = redis::Script::new(redisson::semaphore::TRY_ACQUIRE)
        .get_hash()
        .to_string();
    assert_eq!(
        raw(&mut c, &cmd!("SCRIPT", "EXISTS", &sha)),
        Value::Array(vec![Value::Int(1)])
    );
}

#[test]
fn semaphore_permits_are_never_overdrawn_by_tasks() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    assert!(client.semaphore("pool").try_set_permits(3).unwrap());
    let rt = runtime(4);
    let inside = Arc::new(std::sync::atomic::AtomicI64::new(0));
    rt.block_on(async {
        let mut all = Vec::new();
        for _ in 0..12 {
            let sem = client.async_semaphore("pool");
            let inside = inside.clone();
            all.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let g = sem.guard().await.unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(n <= 3, "{n} holders of 3 permits");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.unwrap();
                }
            }));
        }
        for t in all {
            t.await.unwrap();
        }
    });
    assert_eq!(num(&mut c, &cmd!("GET", "pool")), 3, "every permit back");
    assert_eq!(client.permits_in_doubt(), 0);
}

/// Connections subscribed to `channel` with `SSUBSCRIBE` on this node (`PUBSUB SHARDNUMSUB`).
fn shardnumsub(c: &mut redis::Connection, channel: &str) -> i64 {
    match raw(c, &cmd!("PUBSUB", "SHARDNUMSUB", channel)) {
        Value::Array(v) => redis::from_redis_value(v[1].clone()).unwrap(),
        Value::Map(v) => redis::from_redis_value(v[0].1.clone()).unwrap(),
        other => panic!("PUBSUB SHARDNUMSUB: {other:?}"),
    }
}

/// Redisson's unlock script as Redisson sends it in a cluster (publishing with `SPUBLISH`).
fn redisson_unlock_sharded(c: &mut redis::Connection, name: &str, owner: &str) -> Value {
    let latch = format!("{}:{:032x}", prefix_name("redisson_unlock_latch", name), 7);
    raw(
        c,
        &cmd!(
            "EVAL",
            redisson::UNLOCK,
            3,
            name,
            lock_channel(name),
            &latch,
            0,
            30_000,
            owner,
            "SPUBLISH",
            18_000
        ),
    )
}

#[test]
fn in_a_cluster_waits_hear_and_send_sharded_messages_as_redisson_does() {
    let cluster = rlock_tests::cluster::Cluster::without_module();
    // A 30 s watchdog: only a message can wake a waiter within the margins below.
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let name = "sharded";
    assert_eq!(client.protocol_for(name).unwrap(), Protocol::Redisson);
    let node = cluster.master_for(name);
    let mut c = node.conn();
    let channel = lock_channel(name);

    // A Java service holds it; this client waits, subscribed with SSUBSCRIBE on the node
    // serving the channel's slot (not SUBSCRIBE: Redisson publishes with SPUBLISH there).
    assert_eq!(
        redisson::acquire(&mut c, name, "java-uuid:7", 30_000),
        Value::Nil
    );
    let lock = client.lock(name).with_owner(client.new_owner());
    let woken = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            assert!(lock.try_lock_for(Duration::from_secs(10)).unwrap());
            Instant::now()
        });
        wait_until(
            margin(Duration::from_secs(5)),
            "the waiter subscribed",
            || shardnumsub(&mut c, &channel) == 1,
        );
        assert_eq!(numsub(&mut c, &channel), 0, "no plain subscription");
        assert_eq!(
            redisson_unlock_sharded(&mut c, name, "java-uuid:7"),
            Value::Int(1)
        );
        let unlocked = Instant::now();
        waiter.join().unwrap().duration_since(unlocked)
    });
    assert!(
        woken < margin(Duration::from_millis(500)),
        "woken {woken:?} after SPUBLISH"
    );

    // This client's unlock publishes with SPUBLISH: a Java waiter (SSUBSCRIBE) hears it.
    let mut sub = node.conn();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sub.send_packed_command(&cmd!("SSUBSCRIBE", &channel).get_packed_command())
        .unwrap();
    let confirm = sub.recv_response().unwrap();
    assert!(matches!(confirm, Value::Array(_)), "{confirm:?}");
    lock.unlock().unwrap();
    let msg = match sub.recv_response().unwrap() {
        Value::Array(p) => p,
        other => panic!("unexpected frame {other:?}"),
    };
    let parts: Vec<String> = msg.iter().map(|p| rlock_tests::text(p).unwrap()).collect();
    assert_eq!(parts, ["smessage", channel.as_str(), "0"]);
    assert!(!rlock_tests::exists(&mut c, name));
}

#[test]
fn in_a_cluster_threads_exclude_each_other_across_slots() {
    let cluster = rlock_tests::cluster::Cluster::without_module();
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    // Three names in three slots, four threads on each.
    let names: Vec<String> = (0..3).map(|i| format!("{{slot-{i}}}:l")).collect();
    let inside: Vec<AtomicBool> = names.iter().map(|_| AtomicBool::new(false)).collect();
    std::thread::scope(|t| {
        for (i, name) in names.iter().enumerate() {
            for _ in 0..4 {
                let (client, inside) = (&client, &inside[i]);
                t.spawn(move || {
                    let lock = client.lock(name.as_str());
                    for _ in 0..25 {
                        lock.lock().unwrap();
                        assert!(
                            !inside.swap(true, Ordering::SeqCst),
                            "two holders of {name}"
                        );
                        std::thread::yield_now();
                        inside.store(false, Ordering::SeqCst);
                        lock.unlock().unwrap();
                    }
                });
            }
        }
    });
    let mut conns: Vec<_> = cluster.nodes().map(|n| n.conn()).collect();
    wait_until(
        margin(Duration::from_secs(3)),
        "every subscription ended with its waits",
        || {
            conns.iter_mut().all(|c| {
                names
                    .iter()
                    .all(|name| shardnumsub(c, &lock_channel(name)) == 0)
            })
        },
    );
}

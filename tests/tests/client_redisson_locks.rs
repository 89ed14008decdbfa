//! The rlock client's other lock flavors over Redisson's own protocol, against a plain
//! redis-server WITHOUT the module (issue 37): the fair lock with Redisson's queue, deadlines
//! and per-owner wake-up (order among this client's waiters and with Redisson's scripts run by
//! the harness, a waiter that gives up leaving the queue), the fenced lock's tokens, the
//! non-reentrant lock's refusal, MultiLock and RedLock over such locks, and the wake-up policy
//! (a release wakes one of the client's waiters, a semaphore's count as many as it covers, and
//! no waiter is left asleep when a woken one leaves).

mod client_support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{Error, MultiLock, Owner, RedLock};
use rlock_tests::redisson::fair::{
    fair_acquire, fair_owner_channel, fair_queue, fair_timeouts, fair_unlock, FAIR_ACQUIRE,
    FAIR_TRY_ACQUIRE,
};
use rlock_tests::{
    cmd, int, lock_channel, margin, raw, redis, redisson, token_key, wait_until, Server,
    ServerOptions, Subscriber, Value,
};

/// A redis-server without the rlock module.
fn plain() -> Server {
    Server::with(ServerOptions {
        module: false,
        ..Default::default()
    })
}

/// A client whose watchdog lease (30 s) is far longer than any test: only messages wake its
/// waiters, never a lease's end.
fn long_lease(s: &Server) -> rlock_client::Client {
    client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)))
}

/// Whether the server has `script` in its cache (loaded by whoever sent its text).
fn cached(c: &mut redis::Connection, script: &str) -> bool {
    let sha = redis::Script::new(script).get_hash().to_string();
    raw(c, &cmd!("SCRIPT", "EXISTS", &sha)) == Value::Array(vec![Value::Int(1)])
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`).
fn numsub(c: &mut redis::Connection, channel: &str) -> i64 {
    match raw(c, &cmd!("PUBSUB", "NUMSUB", channel)) {
        Value::Array(v) => redis::from_redis_value(v[1].clone()).unwrap(),
        Value::Map(v) => redis::from_redis_value(v[0].1.clone()).unwrap(),
        other => panic!("PUBSUB NUMSUB: {other:?}"),
    }
}

/// Scripts run on the server (`EVALSHA` and `EVAL` calls).
fn scripts_run(c: &mut redis::Connection) -> i64 {
    calls(c, "evalsha") + calls(c, "eval")
}

fn wait_queue(c: &mut redis::Connection, key: &str, queue: &[String]) {
    wait_until(margin(Duration::from_secs(3)), "the fair queue", || {
        fair_queue(c, key) == queue
    });
}

#[test]
fn fair_lock_grants_this_clients_waiters_in_arrival_order() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = long_lease(&s);
    let holder = client.fair_lock("f");
    holder.lock().unwrap();
    assert!(fair_queue(&mut c, "f").is_empty(), "a grant does not queue");
    const WAITERS: usize = 5;
    let order = Mutex::new(Vec::new());
    let in_section = AtomicBool::new(false);
    let mut owners = Vec::new();
    std::thread::scope(|t| {
        for i in 0..WAITERS {
            let (client, order, in_section) = (&client, &order, &in_section);
            let (tx, rx) = std::sync::mpsc::channel();
            t.spawn(move || {
                let lock = client.fair_lock("f");
                tx.send(lock.owner().to_string()).unwrap();
                lock.lock().unwrap();
                assert!(!in_section.swap(true, Ordering::SeqCst), "two holders");
                order.lock().unwrap().push(i);
                in_section.store(false, Ordering::SeqCst);
                lock.unlock().unwrap();
            });
            owners.push(rx.recv().unwrap());
            // Queued in Redisson's queue, behind those before it, before the next one comes.
            wait_queue(&mut c, "f", &owners);
        }
        // Each waits on its own channel (Redisson's per-owner wake-up).
        for o in &owners {
            assert_eq!(numsub(&mut c, &fair_owner_channel("f", o)), 1);
        }
        // Its deadline: the lock's TTL (then each one before it) plus Redisson's 5 minutes.
        let deadlines = fair_timeouts(&mut c, "f");
        assert_eq!(deadlines.len(), WAITERS);
        assert!(
            deadlines.windows(2).all(|w| w[1].1 > w[0].1),
            "{deadlines:?}"
        );
        holder.unlock().unwrap();
    });
    assert_eq!(*order.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
    assert!(fair_queue(&mut c, "f").is_empty());
    assert!(fair_timeouts(&mut c, "f").is_empty());
    assert!(!exists(&mut c, "f"));
    // Redisson's scripts, byte for byte: the server cached the SHA1 of the harness's copy of
    // Redisson's text after this client's EVALSHA found nothing and its EVAL loaded it.
    assert!(cached(&mut c, FAIR_ACQUIRE));
    assert!(cached(&mut c, redisson::fair::FAIR_UNLOCK));
    assert!(
        !cached(&mut c, FAIR_TRY_ACQUIRE),
        "lock() never sends the no-queue try"
    );
    assert!(holder.try_lock().unwrap());
    assert!(cached(&mut c, FAIR_TRY_ACQUIRE));
    assert!(holder.force_unlock().unwrap());
}

#[test]
fn fair_order_holds_between_this_client_and_redissons_scripts() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    // A "Java" holder, then this client's A, a Java waiter, this client's B.
    assert_eq!(
        fair_acquire(&mut c, "f", "java:1", 30_000, 300_000),
        Value::Nil
    );
    let got = Mutex::new(Vec::new());
    std::thread::scope(|t| {
        let a = client.fair_lock("f").with_owner(Owner::from_raw("rust:a"));
        let b = client.fair_lock("f").with_owner(Owner::from_raw("rust:b"));
        let got = &got;
        let waiter = |l: rlock_client::Lock, who: &'static str| {
            move || {
                assert!(l.try_lock_for(Duration::from_secs(20)).unwrap());
                got.lock().unwrap().push((who, Instant::now()));
                l
            }
        };
        let a = t.spawn(waiter(a, "a"));
        wait_queue(&mut c, "f", &["rust:a".into()]);
        // Queued behind A: Redisson's reply is the time to A's deadline, at least the lock's
        // 30 s lease.
        match fair_acquire(&mut c, "f", "java:2", 30_000, 300_000) {
            Value::Int(ms) => assert!(ms > 29_000, "{ms}"),
            other => panic!("{other:?}"),
        }
        let b = t.spawn(waiter(b, "b"));
        wait_queue(
            &mut c,
            "f",
            &["rust:a".into(), "java:2".into(), "rust:b".into()],
        );
        // Redisson's unlock tells A alone, on A's channel.
        assert_eq!(fair_unlock(&mut c, "f", "java:1", 30_000), Value::Int(1));
        let unlocked = Instant::now();
        let a = a.join().unwrap();
        assert!(got.lock().unwrap()[0].1 - unlocked < margin(Duration::from_millis(200)));
        assert_eq!(
            sub.drain(&mut c),
            [(fair_owner_channel("f", "rust:a"), "0".to_string())]
        );
        // This client's unlock tells the Java waiter, which takes it with its script.
        a.unlock().unwrap();
        assert_eq!(
            sub.drain(&mut c),
            [(fair_owner_channel("f", "java:2"), "0".to_string())]
        );
        assert_eq!(got.lock().unwrap().len(), 1, "B is behind the Java waiter");
        assert_eq!(
            fair_acquire(&mut c, "f", "java:2", 30_000, 300_000),
            Value::Nil
        );
        assert_eq!(fair_queue(&mut c, "f"), ["rust:b"]);
        assert_eq!(fair_unlock(&mut c, "f", "java:2", 30_000), Value::Int(1));
        let unlocked = Instant::now();
        let b = b.join().unwrap();
        assert!(got.lock().unwrap()[1].1 - unlocked < margin(Duration::from_millis(200)));
        b.unlock().unwrap();
    });
    assert_eq!(
        got.lock().unwrap().iter().map(|g| g.0).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(fair_queue(&mut c, "f").is_empty() && fair_timeouts(&mut c, "f").is_empty());
}

#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    assert_eq!(
        fair_acquire(&mut c, "f", "java:1", 30_000, 300_000),
        Value::Nil
    );
    // Timed out: off the queue and the deadlines, and those behind it pulled forward by its
    // wait (Redisson's acquireFailed).
    std::thread::scope(|t| {
        let w = client.fair_lock("f").with_owner(Owner::from_raw("rust:w"));
        let waiter = t.spawn(move || w.try_lock_for(Duration::from_millis(600)).unwrap());
        wait_queue(&mut c, "f", &["rust:w".into()]);
        assert!(matches!(
            fair_acquire(&mut c, "f", "java:2", 30_000, 300_000),
            Value::Int(_)
        ));
        let before = fair_timeouts(&mut c, "f");
        assert!(!waiter.join().unwrap());
        assert_eq!(fair_queue(&mut c, "f"), ["java:2"]);
        let after = fair_timeouts(&mut c, "f");
        assert_eq!(after.len(), 1);
        let java2 = |v: &[(String, i64)]| v.iter().find(|e| e.0 == "java:2").unwrap().1;
        assert_eq!(java2(&before) - java2(&after), 600);
    });
    // Cancelled (an async wait dropped by its caller): off the queue too. And, the lock being
    // free, it tells the waiter now first (an unlock may have told the one that left).
    let rt = runtime(2);
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    rt.block_on(async {
        let w = client
            .async_fair_lock("f")
            .with_owner(Owner::from_raw("rust:x"));
        assert_eq!(fair_unlock(&mut c, "f", "java:1", 30_000), Value::Int(1));
        // java:2 first but slow to take it; the lock is held by another Java owner meanwhile.
        int(&mut c, &cmd!("HSET", "f", "java:3", 1));
        int(&mut c, &cmd!("PEXPIRE", "f", 30_000));
        let waiting = tokio::spawn(async move { w.lock().await });
        while fair_queue(&mut c, "f").len() != 2 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The lock goes (as at a lease's end: no message), then the waiter is cancelled.
        int(&mut c, &cmd!("DEL", "f"));
        sub.drain(&mut c);
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
    });
    assert_eq!(fair_queue(&mut c, "f"), ["java:2"]);
    assert_eq!(fair_timeouts(&mut c, "f").len(), 1);
    assert_eq!(
        sub.drain(&mut c),
        [(fair_owner_channel("f", "java:2"), "0".to_string())]
    );
}

#[test]
fn fenced_tokens_increase_across_holders_and_with_redissons_script() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = long_lease(&s);
    // One owner whichever thread acts (the waiter below is another thread).
    let lock = client.fenced_lock("t").with_owner(client.new_owner());
    assert_eq!(lock.token().unwrap(), None);
    assert_eq!(lock.lock_and_get_token().unwrap(), 1);
    // Redisson's script, byte for byte (the harness's copy of its text, by SHA1).
    assert!(cached(&mut c, redisson::FENCED_ACQUIRE));
    // Every acquire takes a token, a re-entry too (as Redisson's script does).
    assert_eq!(lock.try_lock_and_get_token().unwrap(), Some(2));
    assert_eq!(lock.hold_count().unwrap(), 2);
    lock.unlock().unwrap();
    lock.unlock().unwrap();
    let other = client.fenced_lock("t").with_owner(client.new_owner());
    assert_eq!(other.try_lock_and_get_token().unwrap(), Some(3));
    assert_eq!(lock.try_lock_and_get_token().unwrap(), None);
    other.unlock().unwrap();
    // A Java holder's token comes from the same counter, and its unlock wakes this client.
    assert_eq!(
        redisson::fenced_acquire(&mut c, "t", "java:1", 30_000),
        (-1, 4)
    );
    let (ttl, none) = redisson::fenced_acquire(&mut c, "t", "java:2", 30_000);
    assert!(ttl > 29_000 && none == -1, "{ttl} {none}");
    std::thread::scope(|t| {
        let waiter = t.spawn(|| lock.try_lock_and_get_token_for(Duration::from_secs(10)));
        wait_until(margin(Duration::from_secs(3)), "subscribed", || {
            numsub(&mut c, &lock_channel("t")) == 1
        });
        assert_eq!(
            redisson::unlock(&mut c, "t", "java:1", 30_000),
            Value::Int(1)
        );
        assert_eq!(waiter.join().unwrap().unwrap(), Some(5));
    });
    assert_eq!(lock.token().unwrap(), Some(5));
    assert_eq!(
        redis::cmd("GET")
            .arg(token_key("t"))
            .query::<i64>(&mut c)
            .unwrap(),
        5
    );
    // A guard carries its token.
    lock.unlock().unwrap();
    let g = lock.guard().unwrap();
    assert_eq!(g.token(), Some(6));
    drop(g);
    assert!(!exists(&mut c, "t"));
}

#[test]
fn non_reentrant_lock_refuses_its_holder() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = long_lease(&s);
    let lock = client.non_reentrant_lock("n");
    lock.lock().unwrap();
    assert!(cached(&mut c, redisson::NON_REENTRANT_ACQUIRE));
    for e in [
        lock.lock().unwrap_err(),
        lock.try_lock().unwrap_err(),
        lock.try_lock_for(Duration::from_millis(100)).unwrap_err(),
    ] {
        assert!(matches!(e, Error::NotReentrant { .. }), "{e:?}");
    }
    // The same owner in another client (which does not know it holds it): the server's
    // script refuses it, and the hold is unchanged.
    let elsewhere = long_lease(&s);
    let same = elsewhere.non_reentrant_lock("n").with_owner(lock.owner());
    let e = same.try_lock().unwrap_err();
    assert!(matches!(e, Error::NotReentrant { .. }), "{e:?}");
    assert_eq!(
        redis::cmd("HGET")
            .arg("n")
            .arg(lock.owner().as_str())
            .query::<i64>(&mut c)
            .unwrap(),
        1
    );
    assert!(lock.is_held_by_current_thread().unwrap());
    // A contender waits, and takes it at the one unlock that releases it.
    std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            let l = client.non_reentrant_lock("n");
            assert!(l.try_lock_for(Duration::from_secs(10)).unwrap());
            l.unlock().unwrap();
        });
        wait_until(margin(Duration::from_secs(3)), "subscribed", || {
            numsub(&mut c, &lock_channel("n")) == 1
        });
        lock.unlock().unwrap();
        waiter.join().unwrap();
    });
    assert!(!exists(&mut c, "n"));
}

#[test]
fn multilock_and_redlock_over_redissons_protocol() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    // A MultiLock of a plain, a fair and a non-reentrant lock.
    let all = MultiLock::new([
        client.lock("m1"),
        client.fair_lock("m2"),
        client.non_reentrant_lock("m3"),
    ])
    .unwrap();
    let rival = MultiLock::new([
        client.lock("m1"),
        client.fair_lock("m2"),
        client.non_reentrant_lock("m3"),
    ])
    .unwrap()
    .with_owner(client.new_owner());
    all.lock().unwrap();
    for k in ["m1", "m2", "m3"] {
        assert!(exists(&mut c, k));
    }
    assert!(!rival.try_lock().unwrap());
    // All or nothing: the rival's attempt left nothing behind.
    assert!(fair_queue(&mut c, "m2").is_empty());
    std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            assert!(rival.try_lock_for(Duration::from_secs(10)).unwrap());
            rival.unlock().unwrap();
        });
        // The rival waits on the first lock it could not take.
        wait_until(margin(Duration::from_secs(3)), "the rival waits", || {
            numsub(&mut c, &lock_channel("m1")) == 1
        });
        all.unlock().unwrap();
        waiter.join().unwrap();
    });
    for k in ["m1", "m2", "m3"] {
        assert!(!exists(&mut c, k));
    }

    // A RedLock over three plain servers: a majority is enough, a minority is not.
    let servers = [plain(), plain(), plain()];
    let clients: Vec<_> = servers.iter().map(long_lease).collect();
    let red = || RedLock::new(clients.iter().map(|cl| cl.lock("r"))).unwrap();
    let java = |i: usize| redisson::acquire(&mut servers[i].conn(), "r", "java:1", 30_000);
    assert_eq!(java(0), Value::Nil);
    let one = red();
    assert!(one.try_lock().unwrap(), "2 of 3");
    assert!(exists(&mut servers[1].conn(), "r") && exists(&mut servers[2].conn(), "r"));
    one.unlock().unwrap();
    assert!(!exists(&mut servers[1].conn(), "r"));
    assert_eq!(java(1), Value::Nil);
    let two = red();
    assert!(!two.try_lock().unwrap(), "1 of 3");
    assert!(!exists(&mut servers[2].conn(), "r"), "given back");
}

/// 20 of the client's tasks wait on one lock; 20 hand-offs (each releases to the next) cost
/// about one acquire script each: a release wakes one waiter, not all 20.
#[test]
fn one_release_wakes_one_of_twenty_waiters() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    const WAITERS: usize = 20;
    let rt = runtime(2);
    rt.block_on(async {
        let holder = client.async_lock("w").with_owner(client.new_owner());
        holder.lock().await.unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (lock, done) = (client.async_lock("w"), done.clone());
                tokio::spawn(async move {
                    lock.lock().await.unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                    lock.unlock().await.unwrap();
                })
            })
            .collect();
        // Each made its attempt, subscribed, and its second attempt: all parked.
        let start = Instant::now();
        while scripts_run(&mut c) < 1 + 2 * WAITERS as i64 {
            assert!(start.elapsed() < margin(Duration::from_secs(5)));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(numsub(&mut c, &lock_channel("w")), 1, "one subscription");
        tokio::time::sleep(Duration::from_millis(50)).await;
        raw(&mut c, &cmd!("CONFIG", "RESETSTAT"));
        holder.unlock().await.unwrap();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), WAITERS);
    });
    // 21 unlock scripts (the holder's and each waiter's), the rest acquires.
    let acquires = scripts_run(&mut c) - (WAITERS as i64 + 1);
    assert!(
        (WAITERS as i64..=WAITERS as i64 + 4).contains(&acquires),
        "{acquires} acquire scripts for {WAITERS} hand-offs"
    );
    assert!(!exists(&mut c, "w"));
}

/// A semaphore's release message carries the count: it wakes as many waiters as it covers.
#[test]
fn a_semaphore_release_wakes_as_many_waiters_as_its_count() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    let sem = client.semaphore("sem");
    assert!(sem.try_set_permits(0).unwrap());
    // Both scripts loaded (a first EVALSHA answered NOSCRIPT counts as a call too).
    sem.release().unwrap();
    assert!(sem.try_acquire().unwrap());
    const WAITERS: usize = 10;
    let rt = runtime(2);
    rt.block_on(async {
        let got = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (sem, got) = (client.async_semaphore("sem"), got.clone());
                tokio::spawn(async move {
                    if sem.try_acquire_for(Duration::from_secs(3)).await.unwrap() {
                        got.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let start = Instant::now();
        while scripts_run(&mut c) < 1 + 2 * WAITERS as i64 {
            assert!(start.elapsed() < margin(Duration::from_secs(5)));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        raw(&mut c, &cmd!("CONFIG", "RESETSTAT"));
        client.async_semaphore("sem").release_many(3).await.unwrap();
        while got.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The release, and three acquires: the other seven slept on.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(scripts_run(&mut c), 1 + 3);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(got.load(Ordering::SeqCst), 3);
    });
}

/// A waiter woken by a release, which leaves before its attempt (here: its runtime, frozen
/// while it was woken, is dropped), hands the wake-up to the next waiter: without that, the
/// next would sleep on the free lock until the holder's 30 s lease would have ended.
#[test]
fn a_woken_waiter_that_leaves_hands_the_wake_up_on() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    let holder = client.lock("b").with_owner(client.new_owner());
    // Both scripts loaded (a first EVALSHA answered NOSCRIPT counts as a call too).
    holder.lock().unwrap();
    holder.unlock().unwrap();
    holder.lock().unwrap();
    // A waits first, on a runtime of its own that runs only while the test drives it.
    let frozen = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = client.async_lock("b");
    let before = scripts_run(&mut c);
    frozen.block_on(async {
        // Detached: it ends with its runtime.
        drop(tokio::spawn(async move { a.lock().await }));
        // Its attempt, its subscription, its second attempt: parked.
        while scripts_run(&mut c) < before + 2 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Its park follows that reply locally (nothing on the server shows it): a margin.
        tokio::time::sleep(Duration::from_millis(20)).await;
    });
    std::thread::scope(|t| {
        let b = t.spawn(|| {
            let l = client.lock("b");
            assert!(l.try_lock_for(Duration::from_secs(20)).unwrap());
            let at = Instant::now();
            l.unlock().unwrap();
            at
        });
        wait_until(margin(Duration::from_secs(3)), "B parked", || {
            scripts_run(&mut c) >= before + 4
        });
        // B's park follows its second attempt locally: a margin, as for A.
        std::thread::sleep(Duration::from_millis(20));
        // The release wakes A alone (the first to wait), which can't run.
        let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
        holder.unlock().unwrap();
        assert_eq!(sub.drain(&mut c), [(lock_channel("b"), "0".to_string())]);
        assert_eq!(scripts_run(&mut c), before + 4 + 1, "nobody tried yet");
        let left = Instant::now();
        drop(frozen);
        let got = b.join().unwrap();
        assert!(
            got.duration_since(left) < margin(Duration::from_millis(300)),
            "B took the lock {:?} after A left",
            got.duration_since(left)
        );
    });
}

/// 200 hand-offs among 8 tasks, half of whose waits are cancelled at random (some as they are
/// woken), the others waiting until granted: a woken waiter that leaves hands the wake-up on,
/// so no waiter is left asleep on a free lock (the 30 s lease never runs out to rescue one: the
/// test would take that long).
#[test]
fn no_waiter_is_stranded_across_hand_offs_with_cancellations() {
    let s = plain();
    let mut c = s.conn();
    let client = long_lease(&s);
    const HANDOFFS: usize = 200;
    let rt = runtime(2);
    let start = Instant::now();
    let (granted, cancelled) = rt.block_on(async {
        let granted = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(AtomicUsize::new(0));
        let inside = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..8u64)
            .map(|i| {
                let lock = client.async_lock("h");
                let (granted, cancelled, inside) =
                    (granted.clone(), cancelled.clone(), inside.clone());
                tokio::spawn(async move {
                    let mut rng = rlock_tests::Rng::new(i + 1);
                    while granted.load(Ordering::SeqCst) < HANDOFFS {
                        let patience = match rng.below(2) {
                            0 => Duration::from_micros(rng.range(100, 3_000)),
                            _ => Duration::from_secs(3600),
                        };
                        match tokio::time::timeout(patience, lock.lock()).await {
                            Ok(r) => {
                                r.unwrap();
                                assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                                tokio::time::sleep(Duration::from_micros(rng.range(0, 500))).await;
                                inside.store(false, Ordering::SeqCst);
                                granted.fetch_add(1, Ordering::SeqCst);
                                lock.unlock().await.unwrap();
                            }
                            Err(_) => {
                                cancelled.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        (
            granted.load(Ordering::SeqCst),
            cancelled.load(Ordering::SeqCst),
        )
    });
    let took = start.elapsed();
    assert!(granted >= HANDOFFS);
    assert!(cancelled > 0, "no wait was cancelled");
    assert!(
        took < margin(Duration::from_secs(15)),
        "{granted} hand-offs ({cancelled} waits cancelled) took {took:?}"
    );
    assert!(!exists(&mut c, "h"));
    wait_until(margin(Duration::from_secs(2)), "unsubscribed", || {
        numsub(&mut c, &lock_channel("h")) == 0
    });
}

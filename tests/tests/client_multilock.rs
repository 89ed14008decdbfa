//! The rlock client's MultiLock and RedLock against real servers: every method from sync and
//! async code, all-or-nothing under contention and with a server down, one wait budget, the
//! fixed acquisition order (two multi-locks over the same locks given in opposite orders do
//! not deadlock), leases renewed to end together, guards on drop and panic, the server's
//! deadlock error, and a RedLock over three servers with one and with two of them killed.

mod client_support;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use client_support::{assert_emptied, client, runtime};
use rlock_client::{Error, MultiLock, RedLock};
use rlock_tests::*;

/// Three servers and a client for each (short connect timeout: a dead server fails fast).
fn three() -> (Vec<Server>, Vec<rlock_client::Client>) {
    let servers: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let clients = servers
        .iter()
        .map(|s| {
            rlock_client::Client::builder()
                .url(s.url())
                .watchdog_timeout(Duration::from_millis(600))
                .connect_timeout(Duration::from_millis(200))
                .build()
                .unwrap()
        })
        .collect();
    (servers, clients)
}

fn held_on(s: &Server, key: &str) -> bool {
    exists(&mut s.conn(), key)
}

fn queued(s: &Server, key: &str) -> i64 {
    client_support::waiters(&mut s.conn(), key)
}

/// `threads` threads each take a guard from their `take` (made by `make(thread)`) `rounds`
/// times and increment a counter non-atomically under it: the count is right only if the
/// guards exclude each other.
fn count_exclusively<T, G>(threads: usize, rounds: u64, make: impl Fn(usize) -> T) -> u64
where
    T: Fn() -> G + Send + 'static,
{
    let counter = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (take, counter) = (make(i), counter.clone());
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let _g = take();
                    let v = counter.load(SeqCst);
                    std::thread::yield_now();
                    counter.store(v + 1, SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    counter.load(SeqCst)
}

#[test]
fn every_method_on_one_server() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    assert!(matches!(
        client.multi_lock(Vec::<String>::new()),
        Err(Error::InvalidArgument(_))
    ));
    let m = client.multi_lock(["m:c", "m:a", "m:b"]).unwrap();
    assert_eq!(m.names(), ["m:a", "m:b", "m:c"], "taken in name order");
    assert!(!m.is_held().unwrap());

    m.lock().unwrap();
    assert!(m.is_held().unwrap());
    let me = client.current_thread_owner();
    for k in ["m:a", "m:b", "m:c"] {
        assert_eq!(
            hgetall(&mut c, k).get(me.as_str()).map(String::as_str),
            Some("1")
        );
    }
    assert_eq!(
        client.renewing_count(),
        3,
        "watchdog mode: every lock renewed"
    );
    m.lock().unwrap();
    assert_eq!(client.lock("m:b").hold_count().unwrap(), 2, "re-entrant");
    m.unlock().unwrap();
    m.unlock().unwrap();
    assert_emptied(&mut c, "every lock released");
    assert!(matches!(m.unlock(), Err(Error::NotOwner { .. })));

    // Another thread: not held by it, can't take it.
    let g = m.guard().unwrap();
    assert_eq!(g.name(), "m:a,m:b,m:c");
    assert_eq!(g.owner(), Some(&me));
    assert!(g.valid_until().is_none(), "watchdog mode");
    let m2 = m.clone();
    std::thread::spawn(move || {
        assert!(!m2.is_held().unwrap());
        assert!(!m2.try_lock().unwrap());
        assert!(m2.try_guard().unwrap().is_none());
        let t = Instant::now();
        assert!(!m2.try_lock_for(Duration::from_millis(300)).unwrap());
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(290) && took < Duration::from_secs(2),
            "{took:?}"
        );
    })
    .join()
    .unwrap();
    drop(g);
    assert_emptied(&mut c, "the guard released every lock");

    // Lease: every lock gets it.
    assert!(m
        .try_lock_with(Duration::ZERO, Duration::from_secs(10))
        .unwrap());
    for k in ["m:a", "m:b", "m:c"] {
        assert_between("lease", pttl(&mut c, k), 9_000, 10_000);
    }
    assert_eq!(client.renewing_count(), 0);
    m.unlock().unwrap();
    let g = m.guard_with_lease(Duration::from_millis(300)).unwrap();
    let end = g.valid_until().expect("a lease hold ends");
    assert!(end <= Instant::now() + Duration::from_millis(300));
    wait_until(Duration::from_secs(2), "the lease ended", || g.is_lost());
    drop(g);
    let g = m.try_guard_for(Duration::from_secs(1)).unwrap().unwrap();
    drop(g);
    let g = m
        .try_guard_with(Duration::from_secs(1), Duration::from_secs(5))
        .unwrap()
        .unwrap();
    g.unlock().unwrap();

    // An explicit owner for every lock.
    let owner = client.new_owner();
    let mo = m.clone().with_owner(owner.clone());
    mo.lock().unwrap();
    assert_eq!(
        hgetall(&mut c, "m:a")
            .get(owner.as_str())
            .map(String::as_str),
        Some("1")
    );
    std::thread::spawn(move || mo.unlock().unwrap())
        .join()
        .unwrap();
    assert_emptied(&mut c, "every lock released");

    // A panic releases the guard's locks.
    let m3 = m.clone();
    assert!(std::thread::spawn(move || {
        let _g = m3.guard().unwrap();
        panic!("boom");
    })
    .join()
    .is_err());
    assert_emptied(&mut c, "every lock released");
}

#[test]
fn all_or_nothing_under_contention_across_three_servers() {
    let (servers, clients) = three();
    let m = MultiLock::new(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| c.lock(format!("acct:{i}"))),
    )
    .unwrap();
    // Someone else holds the middle lock.
    let other = clients[1].lock("acct:1");
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        other.lock().unwrap();
        held_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        other.unlock().unwrap();
    });
    held_rx.recv().unwrap();
    assert!(!m.try_lock().unwrap());
    assert!(
        !held_on(&servers[0], "acct:0") && !held_on(&servers[2], "acct:2"),
        "nothing kept"
    );
    let t = Instant::now();
    assert!(!m.try_lock_for(Duration::from_millis(300)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(290));
    assert!(!held_on(&servers[0], "acct:0") && !held_on(&servers[2], "acct:2"));
    // That wait has left acct:1 before the next one is counted below: over Redisson's protocol
    // its subscription ends after the call returns, and counted as the next wait it let the
    // check of acct:0 run before that wait took acct:0 (seen once in a `make test`).
    client_support::assert_no_waiters(&mut servers[1].conn(), "acct:1");

    // While it waits (on the server, for acct:1) it keeps acct:0 (earlier in the order) and
    // nothing after; freed, it takes the rest.
    let m2 = m.clone();
    let waiter = std::thread::spawn(move || {
        let g = m2.try_guard_for(Duration::from_secs(10)).unwrap();
        (g.is_some(), Instant::now(), g.map(|g| g.unlock()))
    });
    wait_until(Duration::from_secs(5), "queued on acct:1", || {
        queued(&servers[1], "acct:1") == 1
    });
    assert!(held_on(&servers[0], "acct:0"));
    assert!(!held_on(&servers[2], "acct:2"));
    let freed = Instant::now();
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    let (got, at, released) = waiter.join().unwrap();
    assert!(got && at >= freed);
    released.unwrap().unwrap();
    for (i, s) in servers.iter().enumerate() {
        assert!(!held_on(s, &format!("acct:{i}")));
    }
}

#[test]
fn a_lease_is_renewed_to_end_together_after_a_wait() {
    let (servers, clients) = three();
    let m = MultiLock::new(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| c.lock(format!("l:{i}"))),
    )
    .unwrap();
    let other = clients[2].lock("l:2").with_owner(clients[2].new_owner());
    other.lock_with_lease(Duration::from_millis(700)).unwrap();
    // l:0 and l:1 are taken at once, l:2 about 700 ms later: all end a full lease after that.
    let g = m
        .try_guard_with(Duration::from_secs(5), Duration::from_secs(3))
        .unwrap()
        .unwrap();
    for (i, s) in servers.iter().enumerate() {
        assert_between(
            &format!("l:{i} renewed to the full lease"),
            pttl(&mut s.conn(), &format!("l:{i}")),
            2_700,
            3_000,
        );
    }
    let end = g.valid_until().unwrap();
    assert!(end > Instant::now() + Duration::from_millis(2_600));
    g.unlock().unwrap();
}

#[test]
fn opposite_orders_do_not_deadlock_and_exclude_each_other() {
    let s = Server::start();
    let client = client(&s);
    let forward = client.multi_lock(["o:1", "o:2", "o:3"]).unwrap();
    let backward = client.multi_lock(["o:3", "o:2", "o:1"]).unwrap();
    let count = count_exclusively(6, 50, |i| {
        let m = if i % 2 == 0 {
            forward.clone()
        } else {
            backward.clone()
        };
        move || m.try_guard_for(Duration::from_secs(20)).unwrap().unwrap()
    });
    assert_eq!(count, 300);
    assert_emptied(&mut s.conn(), "every lock released");
}

#[test]
fn a_server_down_fails_the_acquire_and_leaves_nothing() {
    let (mut servers, clients) = three();
    let m = MultiLock::new(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| c.lock(format!("d:{i}"))),
    )
    .unwrap();
    servers[1].kill();
    match m.try_lock_for(Duration::from_secs(1)) {
        Err(e @ Error::Connection { .. }) => assert!(e.to_string().contains("can't reach"), "{e}"),
        other => panic!("expected a connection error, got {other:?}"),
    }
    assert!(!held_on(&servers[0], "d:0") && !held_on(&servers[2], "d:2"));
    match m.try_guard() {
        Err(e @ Error::Connection { .. }) => assert!(e.to_string().contains("can't reach"), "{e}"),
        other => panic!("expected a connection error, got {other:?}"),
    }
    assert!(!held_on(&servers[0], "d:0") && !held_on(&servers[2], "d:2"));
    assert_eq!(clients[0].renewing_count() + clients[2].renewing_count(), 0);
}

#[test]
fn the_servers_deadlock_error_ends_the_acquire() {
    if rlock_tests::skip_without_module("deadlock refusal is the server's") {
        return;
    }
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    // This thread holds dl:1; another owner holds dl:2 and waits for dl:1. The multi-lock
    // re-enters dl:1 and would wait for dl:2: that closes the cycle, the server refuses, and the
    // multi-lock gives its re-entry back.
    let mine = client.lock("dl:1");
    mine.lock().unwrap();
    let other = client.new_owner();
    let o2 = client.lock("dl:2").with_owner(other.clone());
    o2.lock().unwrap();
    let o1 = client.lock("dl:1").with_owner(other.clone());
    let waiter = std::thread::spawn(move || o1.try_lock_for(Duration::from_secs(10)));
    wait_until(
        Duration::from_secs(5),
        "the other owner waits for dl:1",
        || client_support::waiters(&mut c, "dl:1") == 1,
    );
    let m = client.multi_lock(["dl:1", "dl:2"]).unwrap();
    match m.try_lock_for(Duration::from_secs(5)) {
        Err(Error::Deadlock { name, message }) => {
            assert_eq!(name, "dl:2");
            assert!(message.contains(other.as_str()), "{message}");
        }
        other => panic!("expected a deadlock error, got {other:?}"),
    }
    assert_eq!(
        mine.hold_count().unwrap(),
        1,
        "the multi-lock's re-entry was given back"
    );
    mine.unlock().unwrap();
    assert!(waiter.join().unwrap().unwrap());
    client
        .lock("dl:1")
        .with_owner(other.clone())
        .unlock()
        .unwrap();
    o2.unlock().unwrap();
    assert_emptied(&mut c, "every lock released");
}

#[test]
fn async_multi_lock_and_cancellation() {
    let (servers, clients) = three();
    runtime(2).block_on(async {
        let m = rlock_client::AsyncMultiLock::new(
            clients
                .iter()
                .enumerate()
                .map(|(i, c)| c.async_lock(format!("a:{i}"))),
        )
        .unwrap();
        m.lock().await.unwrap();
        assert!(m.is_held().await.unwrap());
        let m2 = m.clone();
        tokio::spawn(async move {
            assert!(!m2.try_lock_for(Duration::from_millis(50)).await.unwrap());
        })
        .await
        .unwrap();
        m.unlock().await.unwrap();

        // A task holds a:2; another's acquire is cancelled while it waits for a:2 holding
        // a:0 and a:1: cancelling gives those back before the drop returns.
        let other = clients[2].async_lock("a:2");
        let o = other.clone();
        let owner = tokio::spawn(async move {
            o.lock().await.unwrap();
            o.owner()
        })
        .await
        .unwrap();
        let m3 = m.clone();
        let cancelled = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(200), m3.lock())
                .await
                .is_err()
        });
        assert!(cancelled.await.unwrap());
        assert!(!held_on(&servers[0], "a:0") && !held_on(&servers[1], "a:1"));
        assert_eq!(queued(&servers[2], "a:2"), 0);
        other.with_owner(owner).unlock().await.unwrap();

        let g = m
            .try_guard_with(Duration::from_secs(1), Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert!(!g.is_lost());
        g.unlock().await.unwrap();
        for (i, s) in servers.iter().enumerate() {
            assert!(!held_on(s, &format!("a:{i}")));
        }
    });
}

#[test]
fn redlock_with_one_of_three_servers_killed_still_acquires() {
    let (mut servers, clients) = three();
    let red = RedLock::new(clients.iter().map(|c| c.lock("red"))).unwrap();
    assert_eq!(red.quorum(), 2);
    let t = Instant::now();
    let g = red
        .try_guard_with(Duration::from_secs(1), Duration::from_secs(10))
        .unwrap()
        .unwrap();
    let after = Instant::now();
    let end = g.valid_until().unwrap();
    // Validity: lease − elapsed − drift (1 % + 2 ms), counted from the round's start.
    let valid = Duration::from_millis(10_000 - 102);
    assert!(end >= t + valid && end <= after + valid);
    assert!(
        servers.iter().all(|s| held_on(s, "red")),
        "taken everywhere it could be"
    );
    g.unlock().unwrap();
    assert!(servers.iter().all(|s| !held_on(s, "red")));

    servers[0].kill();
    let g = red
        .try_guard_with(Duration::from_secs(2), Duration::from_secs(10))
        .unwrap()
        .expect("two of three servers are a majority");
    assert!(held_on(&servers[1], "red") && held_on(&servers[2], "red"));
    assert!(
        red.is_held().unwrap(),
        "a majority is held (the dead server counts as not)"
    );
    drop(g);
    assert!(!held_on(&servers[1], "red") && !held_on(&servers[2], "red"));
    red.lock().unwrap();
    red.unlock().unwrap();
    assert!(!held_on(&servers[1], "red") && !held_on(&servers[2], "red"));
}

#[test]
fn redlock_with_two_servers_killed_fails_and_leaves_nothing() {
    let (mut servers, clients) = three();
    let red = RedLock::new(clients.iter().map(|c| c.lock("red2"))).unwrap();
    servers[0].kill();
    servers[2].kill();
    assert!(!red.try_lock().unwrap());
    assert!(
        !held_on(&servers[1], "red2"),
        "the one server it reached was released"
    );
    let t = Instant::now();
    assert!(!red.try_lock_for(Duration::from_millis(500)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(490));
    assert!(!held_on(&servers[1], "red2"));
    assert_eq!(clients[1].renewing_count(), 0);
}

#[test]
fn redlock_needs_a_majority_of_free_locks() {
    let (servers, clients) = three();
    let red = RedLock::new(clients.iter().map(|c| c.lock("maj"))).unwrap();
    // One server's lock is held by someone else: two of three still make it.
    let other = clients[1].lock("maj").with_owner(clients[1].new_owner());
    other.lock().unwrap();
    assert!(red
        .try_lock_with(Duration::from_millis(500), Duration::from_secs(5))
        .unwrap());
    assert!(held_on(&servers[0], "maj") && held_on(&servers[2], "maj"));
    red.unlock().unwrap();
    assert!(!held_on(&servers[0], "maj") && !held_on(&servers[2], "maj"));
    // Two of three held by others: no majority, and the one it took is given back.
    let other2 = clients[2].lock("maj").with_owner(clients[2].new_owner());
    other2.lock().unwrap();
    assert!(!red.try_lock().unwrap());
    assert!(!held_on(&servers[0], "maj"));
    assert!(!red.try_lock_for(Duration::from_millis(300)).unwrap());
    assert!(!held_on(&servers[0], "maj"));
    // Freed while it waits (on the first busy server in its order): taken.
    let red2 = red.clone();
    let w = std::thread::spawn(move || {
        let got = red2.try_lock_for(Duration::from_secs(10)).unwrap();
        red2.unlock().unwrap();
        got
    });
    wait_until(Duration::from_secs(5), "queued on a held server", || {
        queued(&servers[1], "maj") + queued(&servers[2], "maj") == 1
    });
    other.unlock().unwrap();
    other2.unlock().unwrap();
    assert!(w.join().unwrap());
    assert!(servers.iter().all(|s| !held_on(s, "maj")));
}

#[test]
fn redlocks_exclude_each_other_and_async_works() {
    let (servers, clients) = three();
    let count = count_exclusively(4, 25, |_| {
        let red = RedLock::new(clients.iter().map(|c| c.lock("ex"))).unwrap();
        move || {
            red.try_guard_with(Duration::from_secs(20), Duration::from_secs(5))
                .unwrap()
                .unwrap()
        }
    });
    assert_eq!(count, 100);
    runtime(2).block_on(async {
        let red =
            rlock_client::AsyncRedLock::new(clients.iter().map(|c| c.async_lock("ex"))).unwrap();
        let g = red.guard().await.unwrap();
        assert!(red.is_held().await.unwrap());
        g.unlock().await.unwrap();
    });
    assert!(servers.iter().all(|s| !held_on(s, "ex")));
}

#[test]
fn cluster_mode_locks_on_several_nodes() {
    let cluster = rlock_tests::cluster::Cluster::start();
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    // Names spread over the cluster's slots (and so its masters).
    let names: Vec<String> = (0..6).map(|i| format!("cm:{i}")).collect();
    let nodes: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.master_port_of_slot(cluster.slot(n)))
        .collect();
    assert!(nodes.len() >= 2, "the names live on several masters");
    let m = client.multi_lock(names.clone()).unwrap();
    let g = m.guard().unwrap();
    for n in &names {
        assert!(
            exists(&mut cluster.master_for(n).conn(), n),
            "{n} on its master"
        );
    }
    let m2 = m.clone();
    assert!(
        !std::thread::spawn(move || m2.try_lock_for(Duration::from_millis(100)).unwrap())
            .join()
            .unwrap()
    );
    // The watchdog renews on every node: each key's absolute expiry time moves on (awaited,
    // not slept), and its TTL stays within the 600 ms watchdog lease.
    for n in &names {
        let mut conn = cluster.master_for(n).conn();
        let first = int(&mut conn, &cmd!("PEXPIRETIME", n));
        wait_until(
            Duration::from_secs(2),
            &format!("{n} renewed on its master"),
            || int(&mut conn, &cmd!("PEXPIRETIME", n)) > first,
        );
        assert_between(&format!("{n}'s PTTL"), pttl(&mut conn, n), 1, 600);
    }
    assert!(!g.is_lost(), "renewed by the watchdog on every node");
    drop(g);
    for n in &names {
        assert!(!exists(&mut cluster.master_for(n).conn(), n));
    }
}

#[test]
fn redissons_lock_scripts_and_a_multi_lock_share_the_locks_both_ways() {
    let (servers, clients) = three();
    let m = MultiLock::new(
        clients
            .iter()
            .enumerate()
            .map(|(i, c)| c.lock(format!("j:{i}"))),
    )
    .unwrap();
    // A Java service holds j:1 (Redisson's acquire script): the multi-lock can't take the set,
    // and keeps nothing.
    let mut c1 = servers[1].conn();
    assert_eq!(
        redisson::acquire(&mut c1, "j:1", "java:1", 30_000),
        Value::Nil
    );
    assert!(!m.try_lock().unwrap());
    assert!(!held_on(&servers[0], "j:0") && !held_on(&servers[2], "j:2"));
    // It waits on the server; Java's unlock script hands j:1 over and the set is taken.
    let m2 = m.clone();
    let waiter = std::thread::spawn(move || {
        let got = m2.try_lock_for(Duration::from_secs(10)).unwrap();
        (got, m2.is_held().unwrap())
    });
    wait_until(Duration::from_secs(5), "queued on j:1", || {
        queued(&servers[1], "j:1") == 1
    });
    assert_eq!(
        redisson::unlock(&mut c1, "j:1", "java:1", 30_000),
        Value::Int(1)
    );
    let (got, held) = waiter.join().unwrap();
    assert!(got && held);
    // Redisson's scripts see the multi-lock's holds and release them as their owners (each
    // lock's client has its own UUID).
    assert!(matches!(
        redisson::acquire(&mut c1, "j:1", "java:2", 30_000),
        Value::Int(_)
    ));
    for (i, s) in servers.iter().enumerate() {
        let (key, mut c) = (format!("j:{i}"), s.conn());
        let owner = hgetall(&mut c, &key).into_keys().next().unwrap();
        assert!(owner.starts_with(clients[i].id()));
        assert_eq!(
            redisson::unlock(&mut c, &key, &owner, 30_000),
            Value::Int(1)
        );
        assert!(!held_on(s, &key));
    }
}

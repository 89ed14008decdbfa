//! The grouped multi-lock (`Client::group_lock`, Redisson 4.x's `getMultiLock(group, values)`,
//! `RedissonFasterMultiLock`) against real servers, in both protocols
//! (`RLOCK_CLIENT_PROTOCOL`): Redisson's layout (one hash, per value a field named by its hash,
//! the owner's `expire_time` and `lock_count` beside it), re-entry, unlock, force unlock, the
//! watchdog, waits ended by a release or by the holders' lease end, values of one group that
//! do not overlap not waiting on each other, mutual exclusion per value under concurrency, and
//! Redisson's own scripts on the same group both ways (reference/redisson.md §3.13's
//! catalogue). With the module the calls are `RMLOCK.*`.

mod client_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client_support::{client, runtime};
use rlock_client::{Error, FieldCodec};
use rlock_tests::redisson::multilock as java;
use rlock_tests::redisson::semaphore::now_ms;
use rlock_tests::*;

/// The hash's fields of value `f` held by `owner` with `count` holds (expire_time left out:
/// it is read on its own).
fn held_fields(hash: &BTreeMap<String, String>, f: &str, owner: &str) -> (String, String) {
    (
        hash.get(f).cloned().unwrap_or_default(),
        hash.get(&format!("{f}:{owner}:lock_count"))
            .cloned()
            .unwrap_or_default(),
    )
}

fn expire_time(c: &mut redis::Connection, group: &str, f: &str, owner: &str) -> i64 {
    let v: Option<i64> = redis::cmd("HGET")
        .arg(group)
        .arg(format!("{f}:{owner}:expire_time"))
        .query(c)
        .unwrap();
    v.expect("an expire_time")
}

#[test]
fn field_names_are_redissons_for_each_codec() {
    let s = Server::start();
    let client = client(&s);
    // Redisson's HighwayHash of the UTF-8 bytes (StringCodec), as its Java computes it.
    let utf8 = client
        .group_lock_with_codec("g", ["Jack_001"], FieldCodec::Utf8)
        .unwrap();
    assert_eq!(utf8.fields(), ["7pNoDdizVy2xY792MaFv+w"]);
    assert_eq!(utf8.codec(), FieldCodec::Utf8);
    // The default codec is Kryo 5's: other bytes, another name.
    let kryo = client.group_lock("g", ["Jack_001"]).unwrap();
    assert_eq!(kryo.codec(), FieldCodec::Kryo5);
    assert_ne!(kryo.fields(), utf8.fields());
    assert_eq!(kryo.fields()[0].len(), 22);
    // A value given twice is one value; no value at all is refused.
    assert_eq!(
        client
            .group_lock("g", ["a", "b", "a"])
            .unwrap()
            .fields()
            .len(),
        2
    );
    let none: [&str; 0] = [];
    assert!(matches!(
        client.group_lock("g", none),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.group_lock_with_codec("g", [[0xFFu8]], FieldCodec::Kryo5),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn lock_writes_redissons_layout_reenters_and_unlock_deletes_the_hash() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let class = client
        .group_lock("class_100", ["Jack_001", "Mary_002"])
        .unwrap();
    assert_eq!(class.name(), "class_100");
    let owner = class.owner();
    let o = owner.as_str();
    let before = now_ms();
    class.lock().unwrap();
    let hash = hgetall(&mut c, "class_100");
    assert_eq!(hash.len(), 6, "{hash:?}");
    for f in class.fields() {
        assert_eq!(held_fields(&hash, f, o), (o.to_string(), "1".to_string()));
        let end = expire_time(&mut c, "class_100", f, o);
        // The watchdog's lease (600 ms in these tests) from the acquire.
        assert!(end >= before + 600 && end <= now_ms() + 600, "{end}");
    }
    let ttl = pttl(&mut c, "class_100");
    assert!(
        ttl > 0 && ttl <= 600,
        "the hash's PEXPIRE is the lease: {ttl}"
    );

    // Re-entry counts per value.
    class.lock().unwrap();
    let hash = hgetall(&mut c, "class_100");
    for f in class.fields() {
        assert_eq!(held_fields(&hash, f, o).1, "2");
    }
    class.unlock().unwrap();
    let hash = hgetall(&mut c, "class_100");
    for f in class.fields() {
        assert_eq!(held_fields(&hash, f, o), (o.to_string(), "1".to_string()));
    }
    class.unlock().unwrap();
    assert!(
        !exists(&mut c, "class_100"),
        "the last unlock empties the hash"
    );
    assert!(matches!(class.unlock(), Err(Error::NotOwner { .. })));

    // A guard releases when dropped.
    {
        let _g = class.guard().unwrap();
        assert!(exists(&mut c, "class_100"));
    }
    assert!(!exists(&mut c, "class_100"));
}

#[test]
fn force_unlock_frees_every_value_whoever_holds_it() {
    let s = Server::start();
    let mut c = s.conn();
    let (a, b) = (client(&s), client(&s));
    let held = a.group_lock("g", ["x", "y"]).unwrap();
    held.lock().unwrap();
    let other = b.group_lock("g", ["x", "y"]).unwrap();
    assert!(other.force_unlock().unwrap());
    assert!(!exists(&mut c, "g"));
    assert!(!other.force_unlock().unwrap(), "nothing held any more");
    assert!(matches!(held.unlock(), Err(Error::NotOwner { .. })));
    assert!(other.try_lock().unwrap());
    other.unlock().unwrap();

    // A guard's hold force-unlocked by someone else is lost (the watchdog's renewal finds it
    // gone, or the module tells the session) and renewed no more.
    let guard = held.guard().unwrap();
    assert!(!guard.is_lost());
    assert!(other.force_unlock().unwrap());
    wait_until(margin(Duration::from_secs(3)), "the hold is lost", || {
        guard.is_lost()
    });
    assert!(held.is_lost(), "the handle tells too");
    assert!(matches!(guard.unlock(), Err(Error::NotOwner { .. })));
    assert!(!exists(&mut c, "g"), "nothing renewed it back");
}

#[test]
fn the_watchdog_renews_the_expire_times_and_a_lease_is_kept() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let g = client.group_lock("renewed", ["a", "b"]).unwrap();
    let guard = g.guard().unwrap();
    let o = g.owner();
    let f = g.fields()[0].clone();
    let first = expire_time(&mut c, "renewed", &f, o.as_str());
    // Past two watchdog timeouts (600 ms): renewed, never expired.
    std::thread::sleep(Duration::from_millis(1300));
    let later = expire_time(&mut c, "renewed", &f, o.as_str());
    assert!(later > first, "expire_time renewed: {first} -> {later}");
    assert!(later > now_ms(), "still ahead");
    assert!(pttl(&mut c, "renewed") > 0);
    assert!(!guard.is_lost());
    assert!(g.is_held_by_current_thread().unwrap());
    guard.unlock().unwrap();
    assert!(!exists(&mut c, "renewed"));

    // With a lease: its end is the values' expire_time and the hash's PEXPIRE, not renewed.
    let before = now_ms();
    assert!(g
        .try_lock_with(Duration::ZERO, Duration::from_secs(5))
        .unwrap());
    let end = expire_time(&mut c, "renewed", &f, o.as_str());
    assert!(end >= before + 5000 && end <= now_ms() + 5000, "{end}");
    let ttl = pttl(&mut c, "renewed");
    assert!(ttl > 4000 && ttl <= 5000, "{ttl}");
    g.unlock().unwrap();
}

#[test]
fn try_lock_fails_while_another_owner_holds_a_value_and_disjoint_values_do_not_wait() {
    let s = Server::start();
    let (a, b) = (client(&s), client(&s));
    let ab = a.group_lock("g", ["a", "b"]).unwrap();
    ab.lock().unwrap();
    // "b" is held by another owner: none of "b", "c" is taken.
    let bc = b.group_lock("g", ["b", "c"]).unwrap();
    assert!(!bc.try_lock().unwrap());
    let t = Instant::now();
    assert!(!bc.try_lock_for(Duration::from_millis(300)).unwrap());
    let took = t.elapsed();
    // The module ends a wait at its deadline by the server's millisecond timer, which may fire
    // a fraction of a millisecond before this clock's 300 ms (as the lock's tests allow too).
    assert!(
        took >= Duration::from_millis(290) && took <= margin(Duration::from_millis(300 + 300)),
        "{took:?}"
    );
    let c_only = b.group_lock("g", ["c"]).unwrap();
    assert!(!c_only.is_locked().unwrap(), "all or none: c was not taken");
    // Values of the same group that do not overlap are taken at once.
    let cd = b.group_lock("g", ["c", "d"]).unwrap();
    let t = Instant::now();
    assert!(cd.try_lock_for(Duration::from_secs(5)).unwrap());
    assert!(t.elapsed() < margin(Duration::from_millis(200)));
    assert!(bc.is_locked().unwrap());
    cd.unlock().unwrap();
    ab.unlock().unwrap();
    assert!(bc.try_lock().unwrap());
    bc.unlock().unwrap();
}

#[test]
fn a_wait_ends_when_the_holder_unlocks_or_its_lease_ends() {
    let s = Server::start();
    let (a, b) = (client(&s), client(&s));
    // Ends at the release.
    let held = a.group_lock("g", ["v1", "v2"]).unwrap();
    held.lock().unwrap();
    let waiter = {
        let w = b.group_lock("g", ["v2", "v3"]).unwrap();
        std::thread::spawn(move || {
            let got = w.try_lock_for(Duration::from_secs(10)).unwrap();
            let at = Instant::now();
            w.unlock().unwrap();
            (got, at)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    held.unlock().unwrap();
    let (got, at) = waiter.join().unwrap();
    assert!(got);
    let after = at - released;
    assert!(
        after < margin(Duration::from_millis(300)),
        "acquired {after:?} after the release"
    );

    // Ends at the holder's lease end (nobody releases).
    let start = Instant::now();
    assert!(held
        .try_lock_with(Duration::ZERO, Duration::from_millis(700))
        .unwrap());
    let w = b.group_lock("g", ["v1"]).unwrap();
    assert!(w.try_lock_for(Duration::from_secs(10)).unwrap());
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(650) && took < margin(Duration::from_millis(700 + 400)),
        "acquired {took:?} after the lease began (700 ms)"
    );
    assert!(w.is_held_by_current_thread().unwrap());
    w.unlock().unwrap();
}

#[test]
fn is_locked_and_is_held_per_owner() {
    let s = Server::start();
    let (a, b) = (client(&s), client(&s));
    let mine = a.group_lock("g", ["p", "q"]).unwrap();
    let theirs = b.group_lock("g", ["p", "q"]).unwrap();
    let overlap = b.group_lock("g", ["q", "r"]).unwrap();
    assert!(!mine.is_locked().unwrap());
    assert!(!mine.is_held_by_current_thread().unwrap());
    mine.lock().unwrap();
    assert!(mine.is_locked().unwrap());
    assert!(mine.is_held_by_current_thread().unwrap());
    assert!(mine.is_held_by(&mine.owner()).unwrap());
    assert!(theirs.is_locked().unwrap());
    assert!(overlap.is_locked().unwrap());
    assert!(!theirs.is_held_by_current_thread().unwrap());
    // Held by one value only: not all of "q", "r" is the owner's.
    assert!(!overlap.is_held_by(&mine.owner()).unwrap());
    mine.unlock().unwrap();
    assert!(!theirs.is_locked().unwrap());
    assert!(!mine.is_held_by_current_thread().unwrap());
}

#[test]
fn never_two_holders_of_one_value_across_threads() {
    let s = Server::start();
    let client = client(&s);
    const VALUES: usize = 5;
    let holders: Arc<Vec<AtomicUsize>> =
        Arc::new((0..VALUES).map(|_| AtomicUsize::new(0)).collect());
    let rounds = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            // Overlapping pairs and triples: 0-1, 1-2, 2-3-4, 4-0, ...
            let picked: Vec<usize> = match t % 3 {
                0 => vec![t % VALUES, (t + 1) % VALUES],
                1 => vec![t % VALUES, (t + 2) % VALUES, (t + 3) % VALUES],
                _ => vec![t % VALUES],
            };
            let names: Vec<String> = picked.iter().map(|i| format!("v{i}")).collect();
            let g = client.group_lock("shared", &names).unwrap();
            let (holders, rounds) = (holders.clone(), rounds.clone());
            std::thread::spawn(move || {
                for _ in 0..15 {
                    let guard = g.guard().unwrap();
                    for &i in &picked {
                        assert_eq!(
                            holders[i].fetch_add(1, Ordering::SeqCst),
                            0,
                            "v{i} held twice"
                        );
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    for &i in &picked {
                        holders[i].fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.unlock().unwrap();
                    rounds.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(rounds.load(Ordering::SeqCst), 6 * 15);
    let mut c = s.conn();
    assert!(!exists(&mut c, "shared"));
}

#[test]
fn the_async_group_lock_waits_reenters_and_never_has_two_holders() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rt = runtime(2);
    rt.block_on(async {
        let g = client.async_group_lock("async", ["a", "b"]).unwrap();
        let guard = g.guard().await.unwrap();
        g.lock().await.unwrap();
        let o = g.owner();
        let f = g.fields()[0].clone();
        let hash = hgetall(&mut c, "async");
        assert_eq!(held_fields(&hash, &f, o.as_str()).1, "2");
        assert!(g.is_held_by_current_task().await.unwrap());
        // Another task is another owner: it waits, and gets the values at the last release.
        let other = client.async_group_lock("async", ["b", "c"]).unwrap();
        let waiter = tokio::spawn(async move {
            assert!(!other.try_lock().await.unwrap());
            let got = other.try_lock_for(Duration::from_secs(10)).await.unwrap();
            other.unlock().await.unwrap();
            got
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        g.unlock().await.unwrap();
        assert!(!waiter.is_finished(), "one hold is left");
        guard.unlock().await.unwrap();
        assert!(waiter.await.unwrap());

        // A dropped wait leaves nothing behind.
        let held = g.guard().await.unwrap();
        let other = client.async_group_lock("async", ["a"]).unwrap();
        let r = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(150), other.lock()).await
        });
        assert!(r.await.unwrap().is_err(), "still waiting when dropped");
        held.unlock().await.unwrap();

        // Tasks on overlapping values: never two holders of one value.
        let holders: Arc<Vec<AtomicUsize>> =
            Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let tasks: Vec<_> = (0..6)
            .map(|t| {
                let picked = vec![t % 3, (t + 1) % 3];
                let names: Vec<String> = picked.iter().map(|i| format!("w{i}")).collect();
                let g = client.async_group_lock("async-many", &names).unwrap();
                let holders = holders.clone();
                tokio::spawn(async move {
                    for _ in 0..10 {
                        let guard = g.guard().await.unwrap();
                        for &i in &picked {
                            assert_eq!(holders[i].fetch_add(1, Ordering::SeqCst), 0);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        for &i in &picked {
                            holders[i].fetch_sub(1, Ordering::SeqCst);
                        }
                        guard.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(!exists(&mut c, "async"));
    assert!(!exists(&mut c, "async-many"));
}

#[test]
fn redissons_scripts_and_the_client_share_a_group_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let g = client
        .group_lock("shared", ["Jack_001", "Mary_002"])
        .unwrap();
    let fields = g.fields().to_vec();
    // Redisson's Java client holds one of the values: the client can't take the group.
    let jack = client.group_lock("shared", ["Jack_001"]).unwrap();
    assert_eq!(
        java::try_lock(&mut c, "shared", "java:1", 30_000, jack.fields()),
        Value::Nil
    );
    assert!(!g.try_lock().unwrap());
    assert!(g.is_locked().unwrap());
    assert!(!g.is_held_by_current_thread().unwrap());
    // Its unlock lets a waiting client in (the module hands it over; over Redisson's
    // protocol its message wakes the waiter).
    let unlocker = {
        let mut c = s.conn();
        let jack = jack.fields().to_vec();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let released = Instant::now();
            let r = java::unlock(&mut c, "shared", "java:1", 30_000, &jack);
            (r, released)
        })
    };
    assert!(g.try_lock_for(Duration::from_secs(10)).unwrap());
    let at = Instant::now();
    let (r, released) = unlocker.join().unwrap();
    assert_eq!(r, Value::Int(1));
    assert!(at - released < margin(Duration::from_millis(300)));

    // The client holds them: Redisson's script waits (the client's lease is what is left).
    let owner = g.owner();
    let owner = owner.as_str();
    match java::try_lock(&mut c, "shared", "java:1", 30_000, &fields) {
        Value::Int(ms) => assert!(ms > 0 && ms <= 600, "the client's lease: {ms}"),
        other => panic!("Redisson took values the client holds: {other:?}"),
    }
    // Redisson's script, as the client's owner, re-enters; its unlock gives that back.
    assert_eq!(
        java::try_lock(&mut c, "shared", owner, 30_000, &fields),
        Value::Nil
    );
    let hash = hgetall(&mut c, "shared");
    assert_eq!(held_fields(&hash, &fields[1], owner).1, "2");
    assert_eq!(
        java::unlock(&mut c, "shared", owner, 30_000, &fields),
        Value::Int(0)
    );
    g.unlock().unwrap();
    assert!(!exists(&mut c, "shared"));
    assert_eq!(
        java::try_lock(&mut c, "shared", "java:1", 30_000, &fields),
        Value::Nil
    );
}

/// Waits on group `group` as the server shows them: with the module every waiter the node
/// holds (the test waits on one group of a node at a time); over Redisson's protocol, the
/// connections subscribed to the group's channel.
fn group_waiters(c: &mut redis::Connection, group: &str) -> i64 {
    if rlock_tests::without_module() {
        return client_support::subscribers(c, &lock_channel(group));
    }
    rlock_stat(c, "waiters")
}

/// In a 3-master cluster, one group on each master, all held by one client at once (each
/// hash on its slot's master); another client's wait on an overlapping set of values is
/// granted by the first's unlock, and the hash on that master then holds exactly the waiter's
/// values, once each, and nothing after its unlock.
#[test]
fn groups_on_every_master_of_a_cluster_a_wait_served_by_another_clients_unlock() {
    let cluster = rlock_tests::cluster::Cluster::start();
    let a = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    let b = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    let mut groups: Vec<String> = Vec::new();
    let mut ports = Vec::new();
    for i in 0.. {
        let g = format!("grp-{i}");
        let port = cluster.master_for(&g).port;
        if !ports.contains(&port) {
            ports.push(port);
            groups.push(g);
        }
        if groups.len() == cluster.masters.len() {
            break;
        }
    }
    let held: Vec<_> = groups
        .iter()
        .map(|g| {
            let l = a.group_lock(g.as_str(), ["v1", "v2"]).unwrap();
            l.lock().unwrap();
            l
        })
        .collect();
    for (g, l) in groups.iter().zip(&held) {
        let mut m = cluster.master_for(g).conn();
        let hash = hgetall(&mut m, g);
        let o = l.owner();
        assert_eq!(hash.len(), 6, "{g}: {hash:?}");
        for f in l.fields() {
            assert_eq!(
                held_fields(&hash, f, o.as_str()),
                (o.to_string(), "1".to_string())
            );
        }
    }
    for (g, l) in groups.iter().zip(&held) {
        let mut m = cluster.master_for(g).conn();
        let w = b.group_lock(g.as_str(), ["v2", "v3"]).unwrap();
        let fields = w.fields().to_vec();
        let (got_tx, got_rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let waiter = std::thread::spawn(move || {
            let got = w.try_lock_for(Duration::from_secs(10)).unwrap();
            got_tx.send((got, w.owner())).unwrap();
            go_rx.recv().unwrap();
            w.unlock().unwrap();
        });
        wait_until(
            Duration::from_secs(5),
            "b queued on the group's master",
            || group_waiters(&mut m, g) == 1,
        );
        l.unlock().unwrap();
        let (got, owner) = got_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(got, "{g}: b served by a's unlock");
        let hash = hgetall(&mut m, g);
        assert_eq!(hash.len(), 6, "{g}: only b's two values: {hash:?}");
        for f in &fields {
            assert_eq!(
                held_fields(&hash, f, owner.as_str()),
                (owner.to_string(), "1".to_string())
            );
        }
        go_tx.send(()).unwrap();
        waiter.join().unwrap();
        assert!(!exists(&mut m, g), "{g}: b's unlock emptied the hash");
    }
}

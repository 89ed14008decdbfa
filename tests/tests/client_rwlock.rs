//! The rlock client's read-write lock (`Client::read_write_lock`) against real servers: every
//! method of both sides from sync and async code, Redisson's layout, downgrade and the upgrade
//! deadlock, the server's deadlock detection, FIFO across modes, leases, the watchdog and the
//! lost-hold signal, guards on drop and panic, Redisson's scripts on the same key both ways,
//! and cluster mode.

mod client_support;

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use client_support::{assert_emptied, client, runtime};
use rlock_client::{Error, Ttl};
use rlock_tests::cluster::Cluster;
use rlock_tests::*;

fn fields(p: &[(&str, String)]) -> BTreeMap<String, String> {
    p.iter().map(|(a, b)| (a.to_string(), b.clone())).collect()
}

#[test]
fn readers_share_writers_exclude_in_redissons_layout() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("rw");
    let (read, write) = (rw.read_lock(), rw.write_lock());
    assert_eq!(rw.name(), "rw");
    assert_eq!(read.name(), "rw");
    let me = read.owner();
    assert_eq!(write.owner(), me, "both sides act as the calling thread");

    assert!(!read.is_locked().unwrap() && !write.is_locked().unwrap());
    read.lock().unwrap();
    read.lock().unwrap();
    assert_eq!(read.hold_count().unwrap(), 2);
    assert_eq!(write.hold_count().unwrap(), 0);
    assert!(read.is_locked().unwrap());
    assert!(!write.is_locked().unwrap());
    assert!(read.is_held_by_current_thread().unwrap());
    assert!(!write.is_held_by_current_thread().unwrap());
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read".into()), (me.as_str(), "2".into())]),
        "Redisson's RReadWriteLock layout"
    );
    for k in 1..=2 {
        assert_between(
            "a read hold's own lease key (watchdog lease, 600 ms)",
            pttl(&mut c, &rwlock_hold("rw", me.as_str(), k)),
            1,
            600,
        );
    }
    match read.remain_time_to_live().unwrap() {
        Ttl::Expires(d) => assert!(d <= Duration::from_millis(600), "{d:?}"),
        other => panic!("expected a lease, got {other:?}"),
    }

    // Another thread reads too, but can't write.
    let (r2, w2) = (read.clone(), write.clone());
    std::thread::spawn(move || {
        assert!(!w2.try_lock().unwrap(), "a writer waits for readers");
        assert!(!w2.is_held_by_current_thread().unwrap());
        assert!(matches!(w2.unlock(), Err(Error::NotOwner { .. })));
        assert!(r2.try_lock().unwrap(), "readers share");
        // Now a reader itself, this thread's write attempt is an upgrade.
        assert!(matches!(w2.try_lock(), Err(Error::Deadlock { .. })));
        r2.unlock().unwrap();
    })
    .join()
    .unwrap();

    read.unlock().unwrap();
    read.unlock().unwrap();
    assert!(matches!(read.unlock(), Err(Error::NotOwner { .. })));
    assert!(!exists(&mut c, "rw"));
    assert_eq!(read.remain_time_to_live().unwrap(), Ttl::NotLocked);

    // The writer is alone.
    write.lock_with_lease(Duration::from_secs(10)).unwrap();
    assert!(write.is_locked().unwrap());
    assert!(!read.is_locked().unwrap());
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[
            ("mode", "write".into()),
            (&format!("{me}:write"), "1".into())
        ])
    );
    assert_between("write lease", pttl(&mut c, "rw"), 9_000, 10_000);
    let (r3, w3) = (read.clone(), write.clone());
    std::thread::spawn(move || {
        assert!(!r3.try_lock().unwrap());
        assert!(!w3.try_lock().unwrap());
        assert!(w3.is_locked().unwrap(), "locked, by someone else");
    })
    .join()
    .unwrap();
    write.unlock().unwrap();
    assert!(!write.is_locked().unwrap());
}

#[test]
fn downgrade_is_allowed_and_upgrade_is_a_deadlock_error() {
    if rlock_tests::skip_without_module("deadlock refusal (a read holder's write acquire) is the server's; over Redisson's protocol it waits, as in Redisson") {
        return;
    }
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("dg");
    let (read, write) = (rw.read_lock(), rw.write_lock());

    let w = write.guard().unwrap();
    let r = read.guard().unwrap();
    assert!(
        read.is_locked().unwrap(),
        "the writer's own read hold counts"
    );
    drop(w);
    assert_eq!(
        redis::cmd("HGET")
            .arg("dg")
            .arg("mode")
            .query::<Option<String>>(&mut c)
            .unwrap()
            .as_deref(),
        Some("read")
    );
    // Now only a reader: asking for the write lock can never be granted.
    let t = Instant::now();
    match write.try_lock_for(Duration::from_secs(5)) {
        Err(Error::Deadlock { name, message }) => {
            assert_eq!(name, "dg");
            assert!(message.contains("upgrade"), "{message}");
        }
        other => panic!("expected a deadlock error, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(1), "refused at once");
    let e = write.lock().unwrap_err();
    assert!(e.to_string().starts_with("deadlock on 'dg'"), "{e}");
    assert_eq!(read.hold_count().unwrap(), 1, "the read hold is kept");
    r.unlock().unwrap();
    assert!(!exists(&mut c, "dg"));
}

#[test]
fn writers_are_not_starved_and_waiters_are_handed_the_lock() {
    if skip_without_module(
        "one FIFO queue for readers and writers (Redisson's read-write lock is not fair)",
    ) {
        return;
    }
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("fifo");
    let reader = rw.read_lock().guard().unwrap();

    // A writer queues behind the reader ...
    let (tx, rx) = mpsc::channel();
    let w = rw.write_lock();
    let writer = std::thread::spawn(move || {
        let g = w.try_guard_for(Duration::from_secs(10)).unwrap().unwrap();
        tx.send(Instant::now()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        drop(g);
    });
    wait_until(Duration::from_secs(5), "the writer queued", || {
        rw_waiters(&mut c, "fifo") == 1
    });
    // ... so a new reader no longer gets in (Redisson would let it), and queues behind it.
    let r2 = rw.read_lock();
    let late_reader = std::thread::spawn(move || {
        assert!(
            !r2.try_lock().unwrap(),
            "no reader overtakes a queued writer"
        );
        let got = r2.try_lock_for(Duration::from_secs(10)).unwrap();
        let at = Instant::now();
        r2.unlock().unwrap();
        (got, at)
    });
    wait_until(Duration::from_secs(5), "the reader queued", || {
        rw_waiters(&mut c, "fifo") == 2
    });
    let q = rw_info(&mut c, "fifo").queue;
    assert_eq!(q[0].1, "write");
    assert_eq!(q[1].1, "read");

    let released = Instant::now();
    drop(reader);
    let writer_at = rx.recv().unwrap();
    assert!(writer_at >= released);
    writer.join().unwrap();
    let (got, reader_at) = late_reader.join().unwrap();
    assert!(
        got && reader_at > writer_at,
        "the reader came after the writer"
    );
}

#[test]
fn force_unlock_acts_on_its_own_side_as_redisson() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("fu");
    let (read, write) = (rw.read_lock(), rw.write_lock());
    assert!(!read.force_unlock().unwrap(), "nothing to delete");

    read.lock().unwrap();
    assert!(
        !write.force_unlock().unwrap(),
        "a write force unlock leaves readers"
    );
    assert!(read.is_locked().unwrap());
    assert!(read.force_unlock().unwrap());
    assert!(!exists(&mut c, "fu"));
    assert!(
        !read.is_lost(),
        "a forced release is not the watchdog's finding"
    );

    write.lock().unwrap();
    assert!(
        !read.force_unlock().unwrap(),
        "a read force unlock leaves the writer"
    );
    assert!(write.force_unlock().unwrap());
    assert!(!write.is_locked().unwrap() && !read.is_locked().unwrap());
    assert_eq!(
        client.renewing_count(),
        0,
        "a force unlock forgets the holds"
    );
}

#[test]
fn guards_release_on_drop_and_on_panic() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("gp");
    {
        let g = rw.write_lock().guard().unwrap();
        assert_eq!(g.name(), "gp");
        assert_eq!(g.owner(), Some(&rw.write_lock().owner()));
        assert!(exists(&mut c, "gp"));
    }
    assert!(!exists(&mut c, "gp"), "released on drop");

    let rw2 = rw.clone();
    let r = std::thread::spawn(move || {
        let _r = rw2.read_lock().guard().unwrap();
        let _w = rw2.read_lock().guard().unwrap();
        panic!("boom");
    })
    .join();
    assert!(r.is_err());
    assert!(!exists(&mut c, "gp"), "released while the panic unwound");
    assert_emptied(&mut c, "no read-hold keys left behind");
}

#[test]
fn watchdog_renews_read_and_write_holds_and_reports_a_lost_one() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s); // watchdog 600 ms, renewal every 200 ms
    let rw = client.read_write_lock("wd");
    let w = rw.write_lock().guard().unwrap();
    let r = rw.read_lock().guard().unwrap();
    assert_eq!(client.renewing_count(), 2);
    let me = rw.read_lock().owner();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(exists(&mut c, "wd"), "renewed past 2.5 leases");
    assert!(exists(&mut c, &rwlock_hold("wd", me.as_str(), 1)));
    assert!(!w.is_lost() && !r.is_lost());
    drop(w);
    std::thread::sleep(Duration::from_millis(900));
    assert!(exists(&mut c, &rwlock_hold("wd", me.as_str(), 1)));
    assert_eq!(client.renewing_count(), 1);

    // Deleted behind the client's back: the watchdog finds it and says so.
    int(&mut c, &cmd!("DEL", "wd"));
    wait_until(
        Duration::from_secs(3),
        "the read hold reported lost",
        || r.is_lost(),
    );
    assert!(rw.read_lock().is_lost());
    assert_eq!(client.renewing_count(), 0);
    assert!(matches!(r.unlock(), Err(Error::NotOwner { .. })));

    // A lease hold is not renewed; its guard counts it lost when the lease ends.
    let g = rw
        .read_lock()
        .guard_with_lease(Duration::from_millis(300))
        .unwrap();
    assert_eq!(client.renewing_count(), 0);
    assert!(g.valid_until().is_some());
    wait_until(Duration::from_secs(2), "the lease ended", || g.is_lost());
    wait_until(Duration::from_secs(2), "the hold key expired", || {
        !exists(&mut c, "wd")
    });
}

#[test]
fn async_sides_from_tasks() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    runtime(2).block_on(async {
        let rw = client.async_read_write_lock("ar");
        let (read, write) = (rw.read_lock(), rw.write_lock());
        read.lock().await.unwrap();
        assert_eq!(read.hold_count().await.unwrap(), 1);
        assert!(read.is_held_by_current_task().await.unwrap());
        // Another task is another owner: it reads but can't write.
        let (r2, w2) = (read.clone(), write.clone());
        tokio::spawn(async move {
            assert!(!w2.try_lock_for(Duration::from_millis(50)).await.unwrap());
            assert!(r2.try_lock().await.unwrap());
            r2.unlock().await.unwrap();
        })
        .await
        .unwrap();
        // A writer waits, cancellation-safe: dropping its future leaves no waiter.
        let w3 = write.clone();
        let timed_out = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(100), w3.lock())
                .await
                .is_err()
        })
        .await
        .unwrap();
        assert!(timed_out);
        if without_module() {
            wait_until(
                margin(Duration::from_secs(3)),
                "the wait's subscription ended",
                || rw_waiters(&mut c, "ar") == 0,
            );
        } else {
            assert_eq!(rw_info(&mut c, "ar").waiters, 0);
        }
        assert!(matches!(write.lock().await, Err(Error::Deadlock { .. })));
        read.unlock().await.unwrap();

        let g = write.guard().await.unwrap();
        assert!(write.is_locked().await.unwrap());
        assert!(write
            .remain_time_to_live()
            .await
            .unwrap()
            .remaining()
            .is_some());
        g.unlock().await.unwrap();
        let g = write
            .try_guard_with(Duration::ZERO, Duration::from_secs(5))
            .await
            .unwrap();
        drop(g.unwrap());
        wait_until(
            Duration::from_secs(2),
            "the dropped async guard released",
            || !exists(&mut c, "ar"),
        );
        assert!(!write.force_unlock().await.unwrap());
    });
}

#[test]
fn the_server_refuses_a_wait_that_closes_a_cycle() {
    if rlock_tests::skip_without_module("deadlock refusal is the server's") {
        return;
    }
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    // A holds the plain lock and waits for the write lock; B reads and then asks for the plain
    // lock: B's wait would close the cycle.
    let (lock, rw) = (client.lock("cy:1"), client.read_write_lock("cy:2"));
    lock.lock().unwrap();
    let a = lock.owner();
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (b_read, b_lock) = (rw.read_lock(), lock.clone());
    let b = std::thread::spawn(move || {
        let _r = b_read.guard().unwrap();
        held_tx.send(b_lock.owner()).unwrap();
        go_rx.recv().unwrap();
        b_lock.try_lock_for(Duration::from_secs(10))
    });
    let b_owner = held_rx.recv().unwrap();
    let a_write = rw.write_lock().with_owner(a.clone());
    let a_wait = std::thread::spawn(move || a_write.try_lock_for(Duration::from_secs(10)));
    wait_until(
        Duration::from_secs(5),
        "A queued for the write lock",
        || rw_waiters(&mut c, "cy:2") == 1,
    );
    go_tx.send(()).unwrap();
    match b.join().unwrap() {
        Err(Error::Deadlock { name, message }) => {
            assert_eq!(name, "cy:1");
            assert!(message.contains(a.as_str()), "{message}");
            assert!(message.contains(b_owner.as_str()), "{message}");
            assert!(message.contains("cy:2"), "{message}");
        }
        other => panic!("expected the deadlock error, got {other:?}"),
    }
    // B let go of its read lock as its thread ended: A gets the write lock.
    assert!(a_wait.join().unwrap().unwrap());
    rw.write_lock().unlock().unwrap();
    lock.unlock().unwrap();
}

#[test]
fn redisson_scripts_and_the_client_share_the_lock_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rw = client.read_write_lock("jr");
    let me = rw.read_lock().owner();

    // A Java reader holds it: the client reads along, its writer waits and gets it when the
    // Java reader's script releases.
    assert_eq!(
        redisson::read_acquire(&mut c, "jr", "java:1", 30_000),
        Value::Nil
    );
    let r = rw.read_lock().guard().unwrap();
    drop(r);
    let w = rw.write_lock();
    let waiter = std::thread::spawn(move || {
        let got = w.try_lock_for(Duration::from_secs(10)).unwrap();
        (got, w.owner())
    });
    wait_until(Duration::from_secs(5), "the client's writer queued", || {
        rw_waiters(&mut c, "jr") == 1
    });
    assert_eq!(redisson::read_unlock(&mut c, "jr", "java:1"), Value::Int(1));
    let (got, writer) = waiter.join().unwrap();
    assert!(
        got,
        "Redisson's unlock handed the lock to the client's writer"
    );
    // Redisson's write script sees the client's writer, and releases it as that owner.
    assert!(matches!(
        redisson::write_acquire(&mut c, "jr", "java:2", 30_000),
        Value::Int(_)
    ));
    assert_eq!(
        redisson::write_unlock(&mut c, "jr", writer.as_str(), 30_000),
        Value::Int(1)
    );
    assert!(!exists(&mut c, "jr"));

    // The client's read hold, released by Redisson's script for the same owner.
    rw.read_lock().lock().unwrap();
    assert_eq!(
        redisson::read_unlock(&mut c, "jr", me.as_str()),
        Value::Int(1)
    );
    assert!(!exists(&mut c, "jr"));
    // Java writes; the client can't read until Java's write unlock.
    assert_eq!(
        redisson::write_acquire(&mut c, "jr", "java:3", 30_000),
        Value::Nil
    );
    assert!(!rw.read_lock().try_lock().unwrap());
    assert!(rw.write_lock().is_locked().unwrap());
    let java = rlock_client::Owner::from_raw("java:3");
    assert!(!rw.read_lock().is_held_by(&java).unwrap());
    assert!(rw.write_lock().is_held_by(&java).unwrap());
    assert_eq!(
        redisson::write_unlock(&mut c, "jr", "java:3", 30_000),
        Value::Int(1)
    );
    assert!(rw.read_lock().try_lock().unwrap());
    rw.read_lock().unlock().unwrap();
}

#[test]
fn cluster_mode() {
    let cluster = Cluster::start();
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    for name in ["{shop}:rw", "plain-rw", "another"] {
        let rw = client.read_write_lock(name);
        let r = rw.read_lock().guard().unwrap();
        assert!(rw.read_lock().is_locked().unwrap());
        let mut m = cluster.master_for(name).conn();
        assert_eq!(
            hgetall(&mut m, name).get("mode").map(String::as_str),
            Some("read")
        );
        let w = rw.write_lock();
        let waiter = std::thread::spawn(move || {
            let got = w.try_lock_for(Duration::from_secs(5)).unwrap();
            (got, w.owner())
        });
        wait_until(Duration::from_secs(5), "the writer queued", || {
            rw_waiters(&mut m, name) == 1
        });
        drop(r);
        let (got, owner) = waiter.join().unwrap();
        assert!(got);
        let w = rw.write_lock().with_owner(owner);
        std::thread::sleep(Duration::from_millis(800));
        assert!(exists(&mut m, name), "renewed by the watchdog on its node");
        w.unlock().unwrap();
        assert!(!exists(&mut m, name));
    }
}

/// Waits on read-write lock `name`: queued (`RRWLOCK.INFO`) with the module; over Redisson's
/// protocol, the connections subscribed to its channel (see `client_support::waiters`).
fn rw_waiters(c: &mut redis::Connection, name: &str) -> i64 {
    if without_module() {
        return client_support::subscribers(c, &rwlock_channel(name));
    }
    rw_info(c, name).waiters
}

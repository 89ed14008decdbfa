//! The rlock client's count-down latch (`Client::count_down_latch`) against real servers: every
//! method from sync and async code, every waiter released at once, timeouts, cancellation,
//! Redisson's latch scripts on the same key both ways, and cluster mode.

mod client_support;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use client_support::{client, runtime};
use rlock_tests::redisson::latch as java;
use rlock_tests::*;

/// The client's waits queued on the server (through its session: no blocked connection).
fn queued(c: &mut redis::Connection) -> i64 {
    rlock_tests::rlock_stat(c, "session_requests")
}

#[test]
fn every_method_and_all_waiters_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let latch = client.count_down_latch("start");
    assert_eq!(latch.name(), "start");
    assert_eq!(latch.get_count().unwrap(), 0);
    assert!(
        latch.wait_for(Duration::ZERO).unwrap(),
        "an absent latch is open"
    );
    latch.wait().unwrap();
    assert!(latch.try_set_count(3).unwrap());
    assert!(
        !latch.try_set_count(5).unwrap(),
        "only an open latch takes a count"
    );
    assert_eq!(
        string(&mut c, &cmd!("GET", "start")),
        "3",
        "Redisson's layout"
    );
    assert_eq!(latch.get_count().unwrap(), 3);

    let t = Instant::now();
    assert!(!latch.wait_for(Duration::from_millis(200)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(190));

    // Eight waiters; they all pass in the step of the last count-down.
    let waiters: Vec<_> = (0..8)
        .map(|_| {
            let l = latch.clone();
            std::thread::spawn(move || {
                l.wait().unwrap();
                Instant::now()
            })
        })
        .collect();
    wait_until(Duration::from_secs(5), "eight waiters parked", || {
        queued(&mut c) == 8
    });
    latch.count_down().unwrap();
    latch.count_down().unwrap();
    assert_eq!(latch.get_count().unwrap(), 1);
    assert_eq!(queued(&mut c), 8, "still closed");
    let opened = Instant::now();
    latch.count_down().unwrap();
    for w in waiters {
        assert!(w.join().unwrap() >= opened);
    }
    assert!(!exists(&mut c, "start"), "open: the key is gone");
    latch.count_down().unwrap();
    assert_eq!(
        latch.get_count().unwrap(),
        0,
        "a count-down on an open latch does nothing"
    );

    // Delete opens it too.
    assert!(!latch.delete().unwrap());
    latch.try_set_count(2).unwrap();
    let l = latch.clone();
    let w = std::thread::spawn(move || l.wait_for(Duration::from_secs(10)).unwrap());
    wait_until(Duration::from_secs(5), "parked", || queued(&mut c) == 1);
    assert!(latch.delete().unwrap());
    assert!(w.join().unwrap(), "a deleted latch is open");
}

#[test]
fn a_start_barrier_from_async_tasks_and_cancellation() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    runtime(2).block_on(async {
        let go = client.async_count_down_latch("go");
        assert!(go.try_set_count(1).await.unwrap());
        // A wait dropped mid-way leaves nothing on the server.
        let g2 = go.clone();
        assert!(tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(100), g2.wait())
                .await
                .is_err()
        })
        .await
        .unwrap());
        assert_eq!(queued(&mut c), 0);
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let g = go.clone();
                tokio::spawn(async move { g.wait_for(Duration::from_secs(10)).await.unwrap() })
            })
            .collect();
        wait_until(Duration::from_secs(5), "five tasks parked", || {
            queued(&mut c) == 5
        });
        assert_eq!(go.get_count().await.unwrap(), 1);
        go.count_down().await.unwrap();
        for t in tasks {
            assert!(t.await.unwrap());
        }
        go.wait().await.unwrap();
        assert!(!go.delete().await.unwrap());
    });
}

#[test]
fn redisson_and_the_client_share_a_latch_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let latch = client.count_down_latch("jl");
    // Java sets the count and counts down; the client's waiters pass at Java's last count-down.
    assert_eq!(java::try_set_count(&mut c, "jl", 2), 1);
    assert_eq!(latch.get_count().unwrap(), 2);
    assert!(!latch.try_set_count(1).unwrap());
    let start = Arc::new(Barrier::new(2));
    let (l, st) = (latch.clone(), start.clone());
    let w = std::thread::spawn(move || {
        st.wait();
        l.wait_for(Duration::from_secs(10)).unwrap()
    });
    start.wait();
    wait_until(Duration::from_secs(5), "parked", || queued(&mut c) == 1);
    java::count_down(&mut c, "jl");
    latch.count_down().unwrap();
    assert!(w.join().unwrap());
    // The client sets it; Java sees and counts it down.
    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(java::count(&mut c, "jl"), 1);
    assert_eq!(java::try_set_count(&mut c, "jl", 3), 0);
    java::count_down(&mut c, "jl");
    assert!(latch.wait_for(Duration::ZERO).unwrap());
    latch.try_set_count(1).unwrap();
    assert_eq!(java::delete(&mut c, "jl"), 1);
    assert_eq!(latch.get_count().unwrap(), 0);
}

#[test]
fn cluster_mode() {
    let cluster = rlock_tests::cluster::Cluster::start();
    let client = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    for name in ["{job}:ready", "latch-a", "latch-b"] {
        let latch = client.count_down_latch(name);
        assert!(latch.try_set_count(1).unwrap());
        let l = latch.clone();
        let w = std::thread::spawn(move || l.wait_for(Duration::from_secs(5)).unwrap());
        let mut m = cluster.master_for(name).conn();
        wait_until(Duration::from_secs(5), "parked on its master", || {
            queued(&mut m) == 1
        });
        latch.count_down().unwrap();
        assert!(w.join().unwrap());
        assert!(!exists(&mut m, name));
    }
}

#[test]
fn count_down_and_await_is_a_barrier() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let latch = client.count_down_latch("barrier");
    assert!(latch.try_set_count(3).unwrap());
    // Two arrive and wait for the third; each counted down once on arrival.
    let arrived: Vec<_> = (0..2)
        .map(|_| {
            let l = latch.clone();
            std::thread::spawn(move || {
                l.count_down_and_await().unwrap();
                Instant::now()
            })
        })
        .collect();
    wait_until(Duration::from_secs(5), "two parties wait", || {
        queued(&mut c) == 2
    });
    assert_eq!(latch.get_count().unwrap(), 1);
    // A party that can't wait long: counted down, the latch opened by it, so it passes.
    let last = Instant::now();
    assert!(latch
        .count_down_and_await_for(Duration::from_secs(1))
        .unwrap());
    for a in arrived {
        let passed = a.join().unwrap();
        assert!(passed >= last);
    }
    assert!(!exists(&mut c, "barrier"), "open: the key is gone");

    // Too few parties: the wait times out with the count lowered.
    assert!(latch.try_set_count(2).unwrap());
    let t = Instant::now();
    assert!(!latch
        .count_down_and_await_for(Duration::from_millis(200))
        .unwrap());
    assert!(t.elapsed() >= Duration::from_millis(190));
    assert_eq!(latch.get_count().unwrap(), 1);
    assert_eq!(queued(&mut c), 0);

    // Async: the same.
    runtime(2).block_on(async {
        let l = client.async_count_down_latch("barrier");
        l.count_down_and_await().await.unwrap();
        assert_eq!(l.get_count().await.unwrap(), 0);
    });
}

fn exists(c: &mut redis::Connection, key: &str) -> bool {
    int(c, &cmd!("EXISTS", key)) == 1
}

//! The rlock client behind Redis Sentinel (`ClientBuilder::sentinel`): a primary with two
//! replicas and three Sentinels, as real processes (`rlock_tests::sentinel`). The client finds
//! the primary, syncs replicas when asked, and follows a failover, whether an operator starts
//! it (`SENTINEL FAILOVER`) or the primary dies (`SIGKILL`): a waiter queued across it is
//! granted on the new primary, a new lock is taken there within a bounded time, and a hold the
//! new primary never received is reported lost.

mod client_support;

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use client_support::{exists, waiters};
use rlock_tests::sentinel::{SentinelGroup, MASTER};
use rlock_tests::{cmd, margin, wait_until, Server};

/// A client that finds the primary through the group's Sentinels. The watchdog renews every
/// 20 s: a hold reported lost within a few seconds of a failover was found by the client
/// following it, not by a periodic renewal. The connect timeout rides out a failover.
fn client(g: &SentinelGroup) -> rlock_client::Client {
    rlock_client::Client::builder()
        .sentinel(MASTER, g.urls())
        .watchdog_timeout(Duration::from_secs(60))
        .connect_timeout(Duration::from_secs(30))
        .replica_sync(Some(Duration::from_secs(2)))
        .build()
        .expect("build a Sentinel client")
}

/// `calls=` of `command` in the server's `INFO commandstats`.
fn calls(s: &Server, command: &str) -> i64 {
    client_support::calls(&mut s.conn(), command)
}

/// Make `key` disappear from every replica (as if the primary's write never reached them):
/// they are made writable for it.
fn unreplicate(g: &SentinelGroup, primary: u16, key: &str) {
    for n in g.nodes.iter().filter(|n| n.port != primary) {
        let mut c = n.conn();
        let () = cmd!("CONFIG", "SET", "replica-read-only", "no")
            .query(&mut c)
            .unwrap();
        let _: i64 = cmd!("DEL", key).query(&mut c).unwrap();
        assert!(!exists(&mut c, key));
    }
}

/// A thread that takes `name` with `lock()` (no time limit) and reports how that ended.
fn waiter(client: &rlock_client::Client, name: &str) -> mpsc::Receiver<rlock_client::Result<()>> {
    let lock = client.lock(name);
    let (tx, rx) = mpsc::channel();
    let _: JoinHandle<()> = std::thread::spawn(move || {
        let r = lock.lock();
        if r.is_ok() {
            let _ = lock.unlock();
        }
        let _ = tx.send(r);
    });
    rx
}

#[test]
fn finds_the_primary_and_syncs_its_replicas() {
    let g = SentinelGroup::start(2);
    let client = client(&g);
    let primary = g.primary();
    let lock = client.lock("orders");
    let guard = lock.guard().unwrap();
    let mut c = primary.conn();
    assert!(exists(&mut c, "orders"), "the lock is on the primary");
    // Replica sync: the acquire returned after WAIT on the primary.
    assert!(calls(primary, "wait") >= 1, "replica sync sent WAIT");
    for n in &g.nodes[1..] {
        assert!(
            exists(&mut n.conn(), "orders"),
            "replica :{} has it",
            n.port
        );
    }

    // A wait through the client's session on the primary.
    let other = waiter(&client, "orders");
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        waiters(&mut c, "orders") == 1
    });
    guard.unlock().unwrap();
    let r = other
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter returns");
    assert!(r.is_ok(), "the waiter got the lock: {r:?}");
    assert_eq!(client.config().sentinel().unwrap().0, MASTER);
}

/// What both failover tests check: a holder whose hold survived, a hold the new primary
/// never received, a waiter queued on the old primary. `fail` makes the primary go away.
fn follows_a_failover(fail: impl FnOnce(&mut SentinelGroup, u16)) {
    let mut g = SentinelGroup::start(2);
    let client = client(&g);
    let old = g.primary_port().unwrap();

    // Held on the old primary and replicated (replica sync).
    let busy = client.lock("busy");
    let busy_guard = busy.guard().unwrap();
    // Held on the old primary, but gone from the replicas.
    let dropped = client.lock("dropped");
    let dropped_guard = dropped.guard().unwrap();
    unreplicate(&g, old, "dropped");
    // Queued on the old primary behind `busy`.
    let queued = waiter(&client, "busy");
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        waiters(&mut g.node(old).conn(), "busy") == 1
    });

    let start = Instant::now();
    fail(&mut g, old);
    let new = g.wait_new_primary(old);
    eprintln!("new primary :{new} after {:?}", start.elapsed());

    // A new lock is taken on the new primary within a bounded time. (Until the client hears
    // of the switch, a lock may still be taken on the former primary if it still answers as
    // one: Sentinel's window, in which such writes are lost.)
    let after = client.lock("after");
    let mut on_new = g.node(new).conn();
    wait_until(
        margin(Duration::from_secs(20)),
        "a lock taken on the new primary",
        || {
            match after.try_lock_for(Duration::from_secs(30)) {
                Ok(took) => assert!(took),
                // Taken on the former primary in Sentinel's window; replica sync, sent once
                // the client had moved, found it missing on the new primary: reported, not
                // held (seen once in the server matrix).
                Err(rlock_client::Error::LeaseEndedBeforeSync { .. }) => return false,
                Err(e) => panic!("try_lock_for: {e}"),
            }
            let there = exists(&mut on_new, "after");
            match after.unlock() {
                Ok(()) => {}
                // Taken on the former primary in Sentinel's window, released once the client
                // had moved to the new one, which never had it (seen once in a fresh clone).
                Err(rlock_client::Error::NotOwner { .. }) if !there => {}
                Err(e) => panic!("unlock: {e}"),
            }
            there
        },
    );
    let took = start.elapsed();
    eprintln!("first grant on the new primary {took:?} after the failure");

    // The hold the new primary never had is reported lost, well before the watchdog's next
    // periodic renewal (20 s after the acquire).
    wait_until(
        margin(Duration::from_secs(10)),
        "the dropped hold reported lost",
        || dropped_guard.is_lost(),
    );
    assert!(!busy_guard.is_lost(), "the replicated hold is kept");

    // The waiter queued on the old primary is queued again on the new one, behind `busy`.
    assert!(
        queued.try_recv().is_err(),
        "the waiter did not get `busy` while it was held"
    );
    busy_guard.unlock().unwrap();
    let r = queued
        .recv_timeout(margin(Duration::from_secs(15)))
        .expect("the waiter queued across the failover returns");
    assert!(
        r.is_ok(),
        "the waiter got the lock on the new primary: {r:?}"
    );
    let mut c = g.node(new).conn();
    wait_until(
        Duration::from_secs(5),
        "busy released on the new primary",
        || !exists(&mut c, "busy"),
    );
}

#[test]
fn follows_a_sentinel_failover() {
    follows_a_failover(|g, old| {
        g.failover_from(old);
    });
}

#[test]
fn follows_a_primary_killed_by_sigkill() {
    follows_a_failover(|g, old| {
        g.nodes.iter_mut().find(|n| n.port == old).unwrap().kill();
    });
}

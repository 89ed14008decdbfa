//! The rlock client across failures: a server restart (same port and directory) and replica
//! sync (WAIT with undo when no replica acknowledges).

mod client_support;

use std::time::Duration;

use client_support::*;
use rlock_client::Error;
use rlock_tests::{redis, wait_until, Server, ServerOptions};

#[test]
fn client_recovers_after_the_server_restarts() {
    let mut server = Server::start();
    let client = client_with(server.url(), |b| b.retry(20, Duration::from_millis(100)));
    let lock = client.lock("restart");
    let g = lock.guard().unwrap();
    assert!(lock.is_locked().unwrap());

    // A waiter parked on the server when it goes down queues again on the new server.
    let waiter_lock = client.lock("restart");
    let waiter = std::thread::spawn(move || {
        let got = waiter_lock.try_lock_for(Duration::from_secs(20)).unwrap();
        if got {
            waiter_lock.unlock().unwrap();
        }
        got
    });
    let mut c = server.conn();
    wait_until(Duration::from_secs(5), "waiter queued", || {
        waiters(&mut c, "restart") == 1
    });

    server.kill();
    server.restart(); // no persistence: the lock is gone with the old process
    assert!(
        waiter.join().unwrap(),
        "the interrupted waiter got the lock on the new server"
    );

    // The old hold is gone: the watchdog reports it lost.
    wait_until(Duration::from_secs(3), "old hold reported lost", || {
        g.is_lost()
    });
    assert!(matches!(g.unlock(), Err(Error::NotOwner { .. })));

    // The same client works normally again.
    lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    std::thread::sleep(Duration::from_millis(1000)); // watchdog renews on the new connection
    assert!(lock.is_held_by_current_thread().unwrap());
    lock.unlock().unwrap();
    let mut c = server.conn();
    assert!(!exists(&mut c, "restart"));
}

#[test]
fn client_reconnects_when_idle_during_a_restart() {
    let mut server = Server::start();
    let client = client_with(server.url(), |b| b);
    let lock = client.lock("idle");
    lock.lock().unwrap();
    lock.unlock().unwrap();
    server.kill();
    server.restart();
    // Every kind of call works again on the first try after the restart.
    assert!(!lock.is_locked().unwrap());
    assert!(lock.try_lock().unwrap());
    lock.unlock().unwrap();
    assert!(lock.try_lock_for(Duration::from_millis(100)).unwrap());
    lock.unlock().unwrap();
}

#[test]
fn replica_sync_waits_for_a_replica_and_undoes_when_none_acknowledges() {
    let master = Server::start();
    let replica = Server::with(ServerOptions {
        module: false,
        replica_of: Some(master.port),
        ..Default::default()
    });
    let mut rc = replica.conn();
    wait_until(Duration::from_secs(10), "replica linked", || {
        rlock_tests::info_field(&mut rc, "replication", "master_link_status").as_deref()
            == Some("up")
    });
    // A lease far longer than WAIT's 500 ms: the frozen replica's case must end by WAIT's
    // timeout, not by the lease (600 ms, the helpers' default, left 100 ms for WAIT to answer:
    // under load the lease ended first once, `LeaseEndedBeforeSync`, which the next test covers).
    let client = client_with(master.url(), |b| {
        b.replica_sync(Some(Duration::from_millis(500)))
            .watchdog_timeout(Duration::from_secs(5))
    });
    let lock = client.lock("synced");
    lock.lock().unwrap();
    // WAIT returned after the replica had the write.
    let owner = lock.owner();
    let count: Option<i64> = redis::cmd("HGET")
        .arg("synced")
        .arg(owner.as_str())
        .query(&mut rc)
        .unwrap();
    assert_eq!(count, Some(1));
    lock.unlock().unwrap();

    // A frozen replica acknowledges nothing: the acquire is undone and reported.
    let pid = replica.pid().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let r = client.lock("unsynced").try_lock();
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    match r {
        Err(Error::NoSyncedReplicas { replicas, .. }) => assert_eq!(replicas, 1),
        other => panic!("expected NoSyncedReplicas, got {other:?}"),
    }
    let mut mc = master.conn();
    assert!(!exists(&mut mc, "unsynced"), "the acquire was undone");
    assert_eq!(client.renewing_count(), 0);
}

/// A replica that acknowledges only after the lease ended (it was stalled): the holder must not
/// go on as if it held the lock (another owner may have it since), so the acquire is undone and
/// reported. (The failover torture found holders that did, overlapping the next holder.)
#[test]
fn replica_sync_that_outlasts_the_lease_is_undone() {
    let master = Server::start();
    let replica = Server::with(ServerOptions {
        module: false,
        replica_of: Some(master.port),
        ..Default::default()
    });
    let mut rc = replica.conn();
    wait_until(Duration::from_secs(10), "replica linked", || {
        rlock_tests::info_field(&mut rc, "replication", "master_link_status").as_deref()
            == Some("up")
    });
    let client = client_with(master.url(), |b| {
        b.replica_sync(Some(Duration::from_secs(5)))
    });
    let lock = client.lock("slow-sync");
    let pid = replica.pid();
    // The replica stops for longer than the lease, then acknowledges.
    rlock_tests::signal(pid, "-STOP");
    let resume = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_500));
        rlock_tests::signal(pid, "-CONT");
    });
    let started = std::time::Instant::now();
    let r = lock.try_lock_with(Duration::ZERO, Duration::from_millis(500));
    resume.join().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1_400),
        "WAIT waited for the replica"
    );
    match r {
        Err(Error::LeaseEndedBeforeSync { lease, .. }) => {
            assert_eq!(lease, Duration::from_millis(500))
        }
        other => panic!("expected LeaseEndedBeforeSync, got {other:?}"),
    }
    let mut mc = master.conn();
    assert!(!exists(&mut mc, "slow-sync"), "not held by the caller");
    assert_eq!(client.renewing_count(), 0);
}

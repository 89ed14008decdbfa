//! Regression: a lease that runs out while clients are paused for writes (CLIENT PAUSE WRITE,
//! as FAILOVER does) must neither crash the server (Redis 7.0 keeps the expired key stored during
//! a pause, and creating it again trips an assertion) nor write during the pause; the waiter gets
//! the lock once the pause ends.

use rlock_tests::{redis, wait_blocked, Server};
use std::time::{Duration, Instant};

#[test]
fn lease_expiring_during_write_pause_hands_off_after_the_pause() {
    let mut server = Server::start();
    let mut c = server.conn();
    // Held long while the waiter's thread starts and the waiter queues (a loaded machine may
    // take longer than a 200 ms lease for that); the lease is set to 200 ms in the pipeline
    // that pauses writes, so it ends inside the pause whatever the load.
    let got: i64 = redis::cmd("RLOCK.ACQUIRE")
        .arg("k")
        .arg("a")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(got, 1);

    let mut waiter = server.conn();
    let t = std::thread::spawn(move || {
        let r: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
            .arg("k")
            .arg("b")
            .arg(5000)
            .arg("BLOCK")
            .arg(5000)
            .query(&mut waiter)
            .unwrap();
        (r, Instant::now())
    });
    wait_blocked(&mut c, 1);
    let (renewed, ()): (i64, ()) = redis::pipe()
        .cmd("RLOCK.RENEW")
        .arg("k")
        .arg("a")
        .arg(200)
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1, "the lease set to 200 ms");
    let paused_at = Instant::now();

    // Well past the lease, still inside the pause: nothing was written, the key is still there.
    std::thread::sleep(Duration::from_millis(500));
    let dbsize: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(dbsize, 1, "the expired lock stays stored during the pause");

    let (reply, granted_at) = t.join().unwrap();
    assert_eq!(reply, Some(1), "the waiter gets the lock");
    assert!(
        granted_at >= paused_at + Duration::from_millis(950),
        "no grant during the pause"
    );
    assert!(server.alive(), "server survived");
    let owner: Vec<String> = redis::cmd("HKEYS").arg("k").query(&mut c).unwrap();
    assert_eq!(owner, vec!["b".to_string()]);
}

/// A permit's lease that ends during a write pause, with a waiter for it and a replica
/// attached: the grant writes only keys that exist (the count, the lease set), which the guard
/// above does not see. It waits for the pause to end, as Redis' own expiry does. Before, it was
/// written and propagated during the pause, and the server stopped on its own assertion that
/// nothing is propagated then (Redis 7.0-8.2: `server.c`, `propagatePendingCommands`).
#[test]
fn a_permit_lease_ending_during_a_write_pause_is_handed_on_after_the_pause() {
    let mut server = Server::start();
    let _replica = rlock_tests::start_replica(&server);
    let mut c = server.conn();
    let _: i64 = redis::cmd("RSEM.TRYSETPERMITS")
        .arg("s")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let first: Vec<String> = redis::cmd("RSEM.ACQUIRE")
        .arg("s")
        .arg("LEASE")
        .arg(30_000)
        .query(&mut c)
        .unwrap();
    let mut waiter = server.conn();
    let t = std::thread::spawn(move || {
        let r: Vec<String> = redis::cmd("RSEM.ACQUIRE")
            .arg("s")
            .arg("LEASE")
            .arg(30_000)
            .arg("BLOCK")
            .arg(5000)
            .query(&mut waiter)
            .unwrap();
        (r, Instant::now())
    });
    wait_blocked(&mut c, 1);
    // The lease is cut to 200 ms in the pipeline that pauses writes: it ends inside the pause.
    let (renewed, ()): (i64, ()) = redis::pipe()
        .cmd("RSEM.RENEW")
        .arg("s")
        .arg(200)
        .arg("ID")
        .arg(&first[0])
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1, "the lease set to 200 ms");
    let paused_at = Instant::now();
    let (reply, granted_at) = t.join().unwrap();
    assert_eq!(reply.len(), 1, "the waiter gets a permit");
    assert!(server.alive(), "server survived");
    assert!(
        granted_at >= paused_at + Duration::from_millis(950),
        "granted {:?} into a 1 s pause",
        granted_at - paused_at
    );
}

//! The semaphore's and the latch's effects replicate as native commands (INCRBY, SET, ZADD,
//! ZREM, DEL, PEXPIREAT with absolute times): a replica without the module matches the master
//! after every kind of write, and a replica refuses to park a latch waiter it could never
//! release. (An AOF written with the module reloads on a server without it: every_object.rs.)

use rlock_tests::redisson::semaphore::{self as rs, timeouts};
use rlock_tests::*;
use std::time::Duration;

#[test]
fn replica_without_the_module_matches_after_every_semaphore_and_latch_write() {
    let (master, replica) = start_pair();
    let mut m = master.conn();
    let mut r = replica.conn();

    assert_eq!(int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 1);
    assert_replica_matches("trysetpermits", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2)), 1);
    assert_replica_matches("plain acquire", &mut m, &mut r);
    let leased = permit_ids(&raw(
        &mut m,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "LEASE", 20_000),
    ));
    assert_replica_matches("leased acquire", &mut m, &mut r);
    assert_eq!(snapshot(&mut r)[&timeouts("s")].kind, "zset");
    assert_eq!(int(&mut m, &cmd!("RSEM.RELEASE", "s", "ID", &leased[0])), 2);
    assert_replica_matches("release by id", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)), 4);
    assert_replica_matches("release of plain permits", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.ADDPERMITS", "s", -1)), 3);
    assert_replica_matches("addpermits", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.DRAIN", "s")), 3);
    assert_replica_matches("drain", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.RELEASE", "s", "ID", &leased[1])), 1);
    assert_replica_matches("the last lease (the set goes)", &mut m, &mut r);
    assert!(!exists(&mut r, &timeouts("s")));

    // A count set with a time to live, and permits without an end (scored as Redisson's).
    assert_eq!(
        int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "ttl", 3, "PX", 60_000)),
        1
    );
    assert_replica_matches("trysetpermits with PX", &mut m, &mut r);
    assert!(pttl(&mut r, "ttl") > 0, "the replica's count expires too");
    let forever = permit_ids(&raw(
        &mut m,
        &cmd!("RSEM.ACQUIRE", "ttl", "PERMITS", 2, "NOLEASE"),
    ));
    assert_replica_matches("acquire without a lease", &mut m, &mut r);
    assert_eq!(
        int(&mut m, &cmd!("RSEM.RELEASE", "ttl", "ID", &forever[0])),
        2
    );
    assert_replica_matches("release of a permit without a lease", &mut m, &mut r);

    // A hand-off on release, and one on a lease's end (the module's timer reclaims).
    let w = Pending::send(
        &master,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 0),
    );
    wait_blocked(&mut m, 1);
    assert_eq!(int(&mut m, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)), 1);
    assert_eq!(w.reply_int(), 1);
    assert_replica_matches("hand-off on release", &mut m, &mut r);
    // Held long while the waiter queues (a loaded machine may take longer than a short lease
    // to show it blocked), then shortened to end in 100 ms.
    let held = permit_ids(&raw(&mut m, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 60_000)));
    let w = Pending::send(
        &master,
        &cmd!("RSEM.ACQUIRE", "s", "LEASE", 15_000, "BLOCK", 0),
    );
    wait_blocked(&mut m, 1);
    assert_eq!(
        int(&mut m, &cmd!("RSEM.RENEW", "s", 100, "ID", &held[0])),
        1
    );
    assert_eq!(permit_ids(&w.reply()).len(), 1);
    assert_replica_matches("hand-off at a lease's end", &mut m, &mut r);
    // Redisson's script and the module write the same keys.
    let (_, _) = rs::lease(&mut m, "s", 0, Some(1_000));
    assert_replica_matches("after Redisson's script", &mut m, &mut r);
    // A leased acquire on a count with a TTL gives the set that TTL (absolute on both sides).
    assert_eq!(int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "t", 2)), 1);
    assert_eq!(int(&mut m, &cmd!("PEXPIRE", "t", 30_000)), 1);
    permit_ids(&raw(&mut m, &cmd!("RSEM.ACQUIRE", "t", "LEASE", 60_000)));
    assert_replica_matches("set TTL", &mut m, &mut r);
    assert_between(
        "replica set TTL",
        pttl(&mut r, &timeouts("t")),
        25_000,
        30_000,
    );

    // The latch.
    assert_eq!(int(&mut m, &cmd!("RLATCH.TRYSETCOUNT", "l", 2)), 1);
    assert_replica_matches("trysetcount", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RLATCH.COUNTDOWN", "l")), 1);
    assert_replica_matches("countdown", &mut m, &mut r);
    assert_eq!(string(&mut r, &cmd!("GET", "l")), "1");
    assert_eq!(int(&mut m, &cmd!("RLATCH.COUNTDOWN", "l")), 0);
    assert_replica_matches("countdown to zero", &mut m, &mut r);
    assert!(!exists(&mut r, "l"));
}

#[test]
fn a_replica_with_the_module_reads_but_refuses_to_park_a_latch_waiter() {
    let master = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..Default::default()
    });
    let replica = Server::with(ServerOptions {
        replica_of: Some(master.port),
        ..Default::default()
    });
    let (mut m, mut r) = (master.conn(), replica.conn());
    wait_until(Duration::from_secs(10), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    assert_eq!(int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "s", 2)), 1);
    assert_eq!(int(&mut m, &cmd!("RLATCH.TRYSETCOUNT", "l", 1)), 1);
    assert!(wait_replicas(&mut m, 1) >= 1);
    // Read-only commands work on the replica; a latch wait there is refused, since only the
    // master releases waiters (the replica's copy changes by replication alone).
    assert_eq!(int(&mut r, &cmd!("RLATCH.COUNT", "l")), 1);
    nil(&mut r, &cmd!("RLATCH.AWAIT", "l"));
    let e = err(&mut r, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0));
    assert!(e.starts_with("READONLY"), "{e}");
    assert_eq!(int(&mut r, &cmd!("RSEM.AVAILABLE", "s")), 2);
    let e = err(&mut r, &cmd!("RSEM.ACQUIRE", "s"));
    assert!(
        e.starts_with("READONLY"),
        "writes are refused on a replica: {e}"
    );
    // Once the master opens the latch, the replica's AWAIT passes.
    assert_eq!(int(&mut m, &cmd!("RLATCH.COUNTDOWN", "l")), 0);
    assert!(wait_replicas(&mut m, 1) >= 1);
    assert_eq!(int(&mut r, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0)), 1);
}

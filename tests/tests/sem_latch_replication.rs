//! The semaphore's and the latch's effects replicate as native commands (INCRBY, SET, ZADD,
//! ZREM, DEL, PEXPIREAT with absolute times): a replica without the module matches the master
//! after every kind of write, an AOF written with the module reloads on a server without it,
//! and a replica refuses to park a latch waiter it could never release.

use rlock_tests::redisson::semaphore::{self as rs, timeouts};
use rlock_tests::*;
use std::time::{Duration, Instant};

fn start_pair() -> (Server, Server) {
    let master = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..Default::default()
    });
    let replica = start_replica(&master);
    (master, replica)
}

fn ids(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(|i| text(i).unwrap()).collect(),
        other => panic!("expected permit ids, got {other:?}"),
    }
}

#[test]
fn replica_without_the_module_matches_after_every_semaphore_and_latch_write() {
    let (master, replica) = start_pair();
    let mut m = master.conn();
    let mut r = replica.conn();

    assert_eq!(int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 1);
    assert_replica_matches("trysetpermits", &mut m, &mut r);
    assert_eq!(int(&mut m, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2)), 1);
    assert_replica_matches("plain acquire", &mut m, &mut r);
    let leased = ids(&raw(
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

    // A hand-off on release, and one on a lease's end (the module's timer reclaims).
    let w = Pending::send(
        &master,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 0),
    );
    wait_blocked(&mut m, 1);
    assert_eq!(int(&mut m, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)), 1);
    assert_eq!(w.reply_int(), 1);
    assert_replica_matches("hand-off on release", &mut m, &mut r);
    ids(&raw(&mut m, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 100)));
    let w = Pending::send(
        &master,
        &cmd!("RSEM.ACQUIRE", "s", "LEASE", 15_000, "BLOCK", 0),
    );
    wait_blocked(&mut m, 1);
    assert_eq!(ids(&w.reply()).len(), 1);
    assert_replica_matches("hand-off at a lease's end", &mut m, &mut r);
    // Redisson's script and the module write the same keys.
    let (_, _) = rs::lease(&mut m, "s", 0, Some(1_000));
    assert_replica_matches("after Redisson's script", &mut m, &mut r);
    // A leased acquire on a count with a TTL gives the set that TTL (absolute on both sides).
    assert_eq!(int(&mut m, &cmd!("RSEM.TRYSETPERMITS", "t", 2)), 1);
    assert_eq!(int(&mut m, &cmd!("PEXPIRE", "t", 30_000)), 1);
    ids(&raw(&mut m, &cmd!("RSEM.ACQUIRE", "t", "LEASE", 60_000)));
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
fn aof_written_with_the_module_reloads_without_it() {
    // appendfsync always: a SIGKILL loses nothing the server acknowledged. (With everysec, a
    // busy disk makes Redis postpone AOF writes while a background fsync runs, and the kill
    // below lost the last commands once under `make test`.)
    let mut first = Server::with(ServerOptions {
        aof: true,
        args: vec!["--appendfsync".into(), "always".into()],
        ..Default::default()
    });
    let mut c = first.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s")), 1);
    let leased = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 3, "LEASE", 60_000),
    ));
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &leased[2])), 2);
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", 3)), 5);
    // A lease that ended and was reclaimed for a waiter.
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "e", 1)), 1);
    ids(&raw(&mut c, &cmd!("RSEM.ACQUIRE", "e", "LEASE", 50)));
    let w = Pending::send(&first, &cmd!("RSEM.ACQUIRE", "e", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 3)), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 2);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "gone", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "gone")), 0);
    let before = snapshot(&mut c);
    let taken = Instant::now();
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        ["e", "l", "s", timeouts("s").as_str()]
    );

    let (incr, _) = aof_text(&first);
    let upper = incr.to_uppercase();
    for native in ["INCRBY", "ZADD", "ZREM", "SET"] {
        assert!(upper.contains(native), "no {native} in the AOF:\n{incr}");
    }
    assert!(
        !upper.contains("RSEM.") && !upper.contains("RLATCH."),
        "the AOF names module commands:\n{incr}"
    );

    let _dir = first.keep_dir().expect("a temporary directory");
    first.kill();
    let second = Server::with(ServerOptions {
        module: false,
        aof: true,
        dir: Some(first.dir().to_path_buf()),
        ..Default::default()
    });
    let mut c2 = second.conn();
    let after = snapshot(&mut c2);
    let elapsed = taken.elapsed().as_millis() as i64;
    assert_same_data("after AOF reload", &before, &after, elapsed + 100);
    assert_eq!(string(&mut c2, &cmd!("GET", "s")), "5");
    assert_eq!(int(&mut c2, &cmd!("ZCARD", timeouts("s"))), 2);
    assert_eq!(string(&mut c2, &cmd!("GET", "l")), "2");
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
    assert!(int(&mut m, &cmd!("WAIT", 1, 1000)) >= 1);
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
    assert!(int(&mut m, &cmd!("WAIT", 1, 1000)) >= 1);
    assert_eq!(int(&mut r, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0)), 1);
}

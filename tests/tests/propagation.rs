//! The module skips replicating its writes when nothing can receive them (no AOF, no replica or
//! backlog, no RDB save points), as Redis itself does. These tests show nothing is lost by that:
//! a replica attached later gets everything, save points still count lock writes, and AOF
//! switched on at runtime records the writes that follow.

use rlock_tests::*;
use std::time::Duration;

#[test]
fn writes_before_a_replica_attaches_reach_it_and_later_writes_replicate() {
    let master = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..Default::default()
    });
    let mut m = master.conn();
    // Alone, without AOF or save points: these writes are not propagated.
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "before", "o1", 60_000)),
        1
    );
    assert!(
        int(
            &mut m,
            &cmd!("RLOCK.ACQUIRE", "fenced", "o1", 60_000, "FENCE")
        ) > 1,
        "a token"
    );
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "released", "o1", 60_000)),
        1
    );
    assert_eq!(int(&mut m, &cmd!("RLOCK.RELEASE", "released", "o1")), 0);

    let replica = start_replica(&master);
    let mut r = replica.conn();
    assert_replica_matches("after the full sync", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "before"), holder("o1", 1));

    // Now a replica listens: every kind of write reaches it.
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "after", "o2", 30_000)),
        1
    );
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "before", "o1", 45_000)),
        2
    );
    assert_eq!(int(&mut m, &cmd!("RLOCK.RELEASE", "fenced", "o1")), 0);
    let t = int(
        &mut m,
        &cmd!("RLOCK.ACQUIRE", "fenced", "o3", 30_000, "FENCE"),
    );
    assert_replica_matches("after the replica attached", &mut m, &mut r);
    assert_eq!(
        string(&mut r, &cmd!("GET", token_key("fenced"))),
        t.to_string(),
        "the replica's counter is the token"
    );

    // A replica that leaves does not make the master forget the stream: its backlog keeps
    // what a reconnecting replica needs.
    drop(replica);
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "while-away", "o4", 30_000)),
        1
    );
    let again = start_replica(&master);
    let mut r2 = again.conn();
    assert_replica_matches("after a new replica attached", &mut m, &mut r2);
}

#[test]
fn rdb_save_points_count_lock_writes() {
    let server = Server::with(ServerOptions {
        args: vec!["--save".into(), "3600 1000000".into()],
        ..Default::default()
    });
    let mut c = server.conn();
    let before = info_int(&mut c, "persistence", "rdb_changes_since_last_save");
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", 30_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o")), 0);
    let after = info_int(&mut c, "persistence", "rdb_changes_since_last_save");
    assert!(
        after >= before + 2,
        "changes counted for save points: {before} -> {after}"
    );

    // Save points switched on at runtime count too.
    let plain = Server::start();
    let mut p = plain.conn();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("3600 1000000")
        .query(&mut p)
        .unwrap();
    let before = info_int(&mut p, "persistence", "rdb_changes_since_last_save");
    assert_eq!(int(&mut p, &cmd!("RLOCK.ACQUIRE", "k", "o", 30_000)), 1);
    let after = info_int(&mut p, "persistence", "rdb_changes_since_last_save");
    assert!(
        after > before,
        "changes counted after CONFIG SET save: {before} -> {after}"
    );
}

#[test]
fn aof_switched_on_at_runtime_records_the_writes_that_follow() {
    let server = Server::start();
    let mut c = server.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "early", "o", 60_000)), 1);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut c)
        .unwrap();
    wait_until(Duration::from_secs(10), "AOF rewrite done", || {
        info_int(&mut c, "persistence", "aof_enabled") == 1
            && info_int(&mut c, "persistence", "aof_rewrite_in_progress") == 0
            && info_int(&mut c, "persistence", "aof_rewrite_scheduled") == 0
    });
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "late-lock", "o", 60_000)),
        1
    );
    // The incremental AOF (written after the initial rewrite) holds the write that followed.
    let dir = server.dir().join("appendonlydir");
    wait_until(Duration::from_secs(10), "late-lock in the AOF", || {
        std::fs::read_dir(&dir)
            .map(|entries| {
                entries.flatten().any(|e| {
                    std::fs::read(e.path()).is_ok_and(|b| b.windows(9).any(|w| w == b"late-lock"))
                })
            })
            .unwrap_or(false)
    });
}

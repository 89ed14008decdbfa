//! Issue 22, items 2 and 3: resharding never breaks exclusion and never strands a waiter.
//!
//! `redis-cli --cluster reshard` moves a slot's keys ten at a time in `CLUSTER GETKEYSINSLOT`
//! order, so an object can be split between the two nodes for a while (a read hold's lease key
//! moved, the lock's hash not yet). While split, neither node may decide anything on it: both
//! answer `TRYAGAIN`, as Redis answers a multi-key command in that state. And every waiter on a
//! slot that leaves a node ends with `TRYAGAIN` (or a redirect) there, waiters on keys that do
//! not exist included.

use std::time::{Duration, Instant};

use rlock_tests::cluster::Cluster;
use rlock_tests::reshard::{check_moved, park_raw_waiters, slot_of, Load, WAIT};
use rlock_tests::{
    cmd, error_text, exists, hgetall, int, pttl, raw, rlock_stat, wait_until, Value,
};

fn is_tryagain(v: &Value) -> bool {
    error_text(v).is_some_and(|e| e.starts_with("TRYAGAIN"))
}

/// `cmd` sent after `ASKING` on one connection, as a cluster client follows `ASK`.
fn asking(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    assert_eq!(rlock_tests::string(conn, &cmd!("ASKING")), "OK");
    raw(conn, cmd)
}

/// The reproduction of item 2: a reader's lease key moves before the lock's hash. Neither the
/// source (hash here, lease key gone) nor the target (lease key here, hash not yet) grants a
/// writer, renews or reports the reader lost; once the hash follows, the reader still holds
/// and the writer is refused.
#[test]
fn a_writer_is_not_granted_over_a_reader_whose_lease_key_moved_first() {
    let cluster = Cluster::start();
    let name = "{split}:rw";
    let hold = "{split}:rw:r:1:rwlock_timeout:1";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut src = source.conn();
    let mut dst = target.conn();

    let read = cmd!("RRWLOCK.ACQUIRE", name, "r:1", "READ", 60_000);
    assert_eq!(int(&mut src, &read), 1);
    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[hold]);
    assert!(exists(&mut src, name));
    let v = raw(&mut src, &cmd!("EXISTS", hold));
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("ASK ")),
        "the lease key moved: {v:?}"
    );

    // On the source: the hash is here, the reader's lease key is not.
    let write = cmd!("RRWLOCK.ACQUIRE", name, "w:1", "WRITE", 60_000);
    let v = raw(&mut src, &write);
    assert!(is_tryagain(&v), "writer on the source while split: {v:?}");
    let v = raw(&mut src, &cmd!("RRWLOCK.RENEW", name, "r:1", 60_000));
    assert!(is_tryagain(&v), "the reader's renew on the source: {v:?}");
    let v = raw(
        &mut src,
        &cmd!(
            "RRWLOCK.ACQUIRE",
            name,
            "w:2",
            "WRITE",
            60_000,
            "BLOCK",
            100
        ),
    );
    assert!(is_tryagain(&v), "a blocking writer on the source: {v:?}");
    assert_eq!(
        hgetall(&mut src, name),
        [("mode", "read"), ("r:1", "1")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        "nothing was written on the source"
    );
    // (No client reaches the target for this lock now: the source, which has its hash, does
    // not answer ASK for it.)

    // The hash follows: the object is whole on the target, and the reader still holds it.
    cluster.migrate_keys(source, target, &[name]);
    let v = asking(&mut dst, &write);
    assert_eq!(v, Value::Nil, "writer on the target, reader alive");
    let v = asking(&mut dst, &cmd!("RRWLOCK.RENEW", name, "r:1", 60_000));
    assert_eq!(v, Value::Int(1), "the reader renews on the target");
    cluster.close_migration(slot, source, target);
    rlock_tests::nil(&mut dst, &write);
    // The reader's only hold: released (the reply is what is left of its holds, 0).
    assert_eq!(
        int(&mut dst, &cmd!("RRWLOCK.RELEASE", name, "r:1", "READ")),
        0
    );
    assert_eq!(int(&mut dst, &write), 1, "writer once the reader released");
    assert!(pttl(&mut dst, name) > 0);
}

/// The other order: the hash moves first, the lease key stays behind. The target, which has
/// the hash, must not take the lease key's absence for an expiry.
#[test]
fn a_lock_whose_hash_moved_first_is_not_decided_on_the_target() {
    let cluster = Cluster::start();
    let name = "{hashfirst}:rw";
    let hold = "{hashfirst}:rw:r:1:rwlock_timeout:1";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut src = source.conn();
    let mut dst = target.conn();

    assert_eq!(
        int(
            &mut src,
            &cmd!("RRWLOCK.ACQUIRE", name, "r:1", "READ", 60_000)
        ),
        1
    );
    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[name]);
    let write = cmd!("RRWLOCK.ACQUIRE", name, "w:1", "WRITE", 60_000);
    // The source has no hash: Redis itself sends the client to the target.
    let v = raw(&mut src, &write);
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("ASK ")),
        "source without the hash: {v:?}"
    );
    let v = asking(&mut dst, &write);
    assert!(is_tryagain(&v), "target without the lease key: {v:?}");
    let v = asking(&mut dst, &cmd!("RRWLOCK.RENEW", name, "r:1", 60_000));
    assert!(
        is_tryagain(&v),
        "renew on the target without the lease key: {v:?}"
    );
    cluster.migrate_keys(source, target, &[hold]);
    assert_eq!(
        asking(&mut dst, &write),
        Value::Nil,
        "the reader still holds"
    );
    cluster.close_migration(slot, source, target);
    rlock_tests::nil(&mut dst, &write);
}

/// The reproduction of item 3: a waiter on a semaphore that does not exist (no permits, no
/// key) ends with TRYAGAIN when its slot leaves, instead of waiting on the old node while a
/// permit is released on the new one. Measured: how soon after the slot left it ends.
#[test]
fn a_waiter_on_an_absent_key_ends_when_its_slot_leaves() {
    let cluster = Cluster::start();
    let name = "{empty}:sem";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut src = source.conn();
    // Another key of the slot, so that the migration moves something.
    assert_eq!(
        rlock_tests::string(&mut src, &cmd!("SET", "{empty}:other", "x")),
        "OK"
    );
    let waiter = rlock_tests::Pending::send(source, &cmd!("RSEM.ACQUIRE", name, "BLOCK", 0));
    wait_until(WAIT, "waiter queued", || {
        rlock_stat(&mut src, "waiters") == 1
    });

    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &["{empty}:other"]);
    cluster.close_migration(slot, source, target);
    let moved = Instant::now();
    let v = waiter.reply_within(Duration::from_secs(5));
    let took = moved.elapsed();
    assert!(is_tryagain(&v), "the waiter's reply: {v:?}");
    eprintln!("waiter ended {took:?} after the slot moved (close_migration returned)");
    assert!(took < Duration::from_secs(1), "ended after {took:?}");
    assert_eq!(rlock_stat(&mut src, "waiters"), 0);

    // Queued again on the new node, it gets the permit released there.
    let mut dst = target.conn();
    let again = rlock_tests::Pending::send(target, &cmd!("RSEM.ACQUIRE", name, "BLOCK", 10_000));
    wait_until(WAIT, "waiter queued on the target", || {
        rlock_stat(&mut dst, "waiters") == 1
    });
    // The permit goes to the waiter: none is left.
    assert_eq!(int(&mut dst, &cmd!("RSEM.RELEASE", name)), 0);
    assert_eq!(again.reply_within(Duration::from_secs(5)), Value::Int(1));
}

/// `redis-cli --cluster reshard` moves one slot (the first the source serves: slot 0 here)
/// back and forth between the masters, five times, with fresh filler keys so that each move
/// takes many `MIGRATE` batches, while clients use a lock, a read-write lock (three readers,
/// two writers), a semaphore with leased permits and a latch on that slot. Checked: nobody
/// ever holds what another holds (in the clients, and in the keys on every node after each
/// move), and every `BLOCK` waiter parked on the old node ends with `TRYAGAIN` or a redirect
/// within a second of the move.
#[test]
fn reshard_under_load_keeps_exclusion_and_strands_no_waiter() {
    let cluster = Cluster::start();
    let tag = (0..)
        .map(|i| format!("rs{i}"))
        .find(|t| slot_of(t) == 0)
        .unwrap();
    assert_eq!(cluster.slot(&format!("{{{tag}}}")), 0);
    let key = |s: &str| format!("{{{tag}}}:{s}");
    let (lock, rw, sem, latch, held) = (
        key("lock"),
        key("rw"),
        key("sem"),
        key("latch"),
        key("held"),
    );
    {
        let owner = cluster.master_for(&lock);
        let mut c = owner.conn();
        assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", &sem, 2)), 1);
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", &latch, 1)), 1);
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", &held, "keeper", 120_000)),
            1
        );
    }

    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .retry(10, Duration::from_millis(20))
        .build()
        .unwrap();
    let load = Load::start(&client, &lock, &rw, &sem);

    let masters: Vec<&rlock_tests::Server> = cluster.masters.iter().collect();
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let from = cluster.master_for(&lock);
        let to = masters
            .iter()
            .copied()
            .find(|m| m.port != from.port && (round % 2 == 0 || m.port != masters[0].port))
            .unwrap();
        // Filler keys, so that the move takes many batches and objects are split in between.
        let mut c = from.conn();
        for f in 0..60 {
            let _: () = redis::cmd("SET")
                .arg(key(&format!("fill:{round}:{f}")))
                .arg(f)
                .query(&mut c)
                .unwrap();
        }
        load.progress(20, "clients make progress before the move");
        let raw_waiters = park_raw_waiters(from, &tag, round);
        let out = std::process::Command::new(rlock_tests::cli_binary())
            .args([
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{}", from.port),
                "--cluster-from",
                &rlock_tests::cluster::node_id(from),
                "--cluster-to",
                &rlock_tests::cluster::node_id(to),
                "--cluster-slots",
                "1",
                "--cluster-pipeline",
                "3",
                "--cluster-yes",
            ])
            .output()
            .unwrap();
        let moved = Instant::now();
        assert!(
            out.status.success(),
            "reshard: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Every waiter parked on the old node ends, with a redirect or TRYAGAIN.
        for w in raw_waiters {
            let v = w.pending.reply_within(Duration::from_secs(5));
            let took = moved.elapsed();
            worst = worst.max(took);
            let e = error_text(&v).unwrap_or_default();
            assert!(
                ["TRYAGAIN", "MOVED", "ASK"]
                    .iter()
                    .any(|p| e.starts_with(p)),
                "round {round}: {}: {v:?}",
                w.what
            );
            assert!(
                took < Duration::from_secs(1),
                "{} ended after {took:?}",
                w.what
            );
        }
        cluster.wait_ok();
        assert_eq!(cluster.master_port_of_slot(0), to.port, "round {round}");
        check_moved(from, to, &rw, &load);
    }
    let (grants, errors) = load.finish();
    eprintln!(
        "{grants} grants; worst waiter end after a move: {worst:?}; client errors: {errors:?}"
    );
    // Every permit the clients took came back, wherever the moves found it: the semaphore's
    // 2 permits are available on its owner and none is leased (none created or lost).
    rlock_tests::reshard::check_permits(cluster.master_for(&sem), &sem, 2);
    // The held lock and the latch moved with the slot, unchanged.
    let owner = cluster.master_for(&held);
    let mut c = owner.conn();
    assert_eq!(
        hgetall(&mut c, &held).get("keeper").map(String::as_str),
        Some("1")
    );
    assert_eq!(rlock_tests::string(&mut c, &cmd!("GET", &latch)), "1");
}

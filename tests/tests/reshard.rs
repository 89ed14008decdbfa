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
use rlock_tests::{
    cmd, error_text, exists, hgetall, int, pttl, raw, rlock_stat, wait_until, Value,
};

const WAIT: Duration = Duration::from_secs(20);

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

/// CRC16-XMODEM modulo 16384, as Redis hashes a key without braces.
fn slot_of(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag.as_bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A parked raw waiter and what it waits for.
struct RawWaiter {
    what: &'static str,
    pending: rlock_tests::Pending,
}

/// Raw `BLOCK 0` waiters on `node`, one per kind of wait that nothing grants while the slot
/// moves: a semaphore that does not exist (no key at all), a latch that stays closed, and a
/// lock held for the whole test.
fn park_raw_waiters(node: &rlock_tests::Server, tag: &str, round: usize) -> Vec<RawWaiter> {
    let mut conn = node.conn();
    let before = rlock_stat(&mut conn, "waiters");
    let waiters = vec![
        RawWaiter {
            what: "RSEM.ACQUIRE on an absent semaphore",
            pending: rlock_tests::Pending::send(
                node,
                &cmd!("RSEM.ACQUIRE", format!("{{{tag}}}:empty"), "BLOCK", 0),
            ),
        },
        RawWaiter {
            what: "RLATCH.AWAIT on a closed latch",
            pending: rlock_tests::Pending::send(
                node,
                &cmd!("RLATCH.AWAIT", format!("{{{tag}}}:latch"), "BLOCK", 0),
            ),
        },
        RawWaiter {
            what: "RLOCK.ACQUIRE behind a held lock",
            pending: rlock_tests::Pending::send(
                node,
                &cmd!(
                    "RLOCK.ACQUIRE",
                    format!("{{{tag}}}:held"),
                    format!("raw:{round}"),
                    60_000,
                    "BLOCK",
                    0
                ),
            ),
        },
    ];
    wait_until(WAIT, "raw waiters queued", || {
        rlock_stat(&mut conn, "waiters") >= before + waiters.len() as i64
    });
    waiters
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
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;

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

    let client = rlock::Client::builder()
        .cluster(cluster.seeds())
        .retry(10, Duration::from_millis(20))
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lock_in = Arc::new(AtomicI64::new(0));
    let readers_in = Arc::new(AtomicI64::new(0));
    let writers_in = Arc::new(AtomicI64::new(0));
    let permits_in = Arc::new(AtomicI64::new(0));
    let grants = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let lease = Duration::from_secs(10);
    let hold = Duration::from_millis(2);
    let mut threads = Vec::new();

    // Each worker: wait up to 2 s, check what it holds against the others, hold, release.
    for i in 0..3 {
        let l = client.lock(lock.clone());
        let (stop, v, inside, grants, errors) = (
            stop.clone(),
            violations.clone(),
            lock_in.clone(),
            grants.clone(),
            errors.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                match l.try_lock_with(Duration::from_secs(2), lease) {
                    Ok(true) => {
                        if inside.fetch_add(1, SeqCst) != 0 {
                            v.lock()
                                .unwrap()
                                .push(format!("lock: locker {i} with another"));
                        }
                        grants.fetch_add(1, SeqCst);
                        std::thread::sleep(hold);
                        inside.fetch_sub(1, SeqCst);
                        if let Err(e) = l.unlock() {
                            errors.lock().unwrap().push(format!("lock unlock: {e}"));
                        }
                    }
                    Ok(false) => {}
                    Err(e) => errors.lock().unwrap().push(format!("lock: {e}")),
                }
            }
        }));
    }
    for i in 0..5 {
        let writer = i >= 3;
        let rwl = client.read_write_lock(rw.clone());
        let l = if writer {
            rwl.write_lock()
        } else {
            rwl.read_lock()
        };
        let (stop, v, r_in, w_in, grants, errors) = (
            stop.clone(),
            violations.clone(),
            readers_in.clone(),
            writers_in.clone(),
            grants.clone(),
            errors.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                match l.try_lock_with(Duration::from_secs(2), lease) {
                    Ok(true) => {
                        let (mine, other) = if writer {
                            (&w_in, &r_in)
                        } else {
                            (&r_in, &w_in)
                        };
                        let before = mine.fetch_add(1, SeqCst);
                        if other.load(SeqCst) != 0 || (writer && before != 0) {
                            v.lock().unwrap().push(format!(
                                "rwlock: {} {i} with readers {} writers {}",
                                if writer { "writer" } else { "reader" },
                                r_in.load(SeqCst),
                                w_in.load(SeqCst)
                            ));
                        }
                        grants.fetch_add(1, SeqCst);
                        std::thread::sleep(hold);
                        mine.fetch_sub(1, SeqCst);
                        if let Err(e) = l.unlock() {
                            errors.lock().unwrap().push(format!("rwlock unlock: {e}"));
                        }
                    }
                    Ok(false) => {}
                    Err(e) => errors.lock().unwrap().push(format!("rwlock: {e}")),
                }
            }
        }));
    }
    for i in 0..4 {
        let s = client.permit_expirable_semaphore(sem.clone());
        let (stop, v, inside, grants, errors) = (
            stop.clone(),
            violations.clone(),
            permits_in.clone(),
            grants.clone(),
            errors.clone(),
        );
        threads.push(std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                match s.try_acquire_for(Duration::from_secs(2), lease) {
                    Ok(Some(id)) => {
                        let n = inside.fetch_add(1, SeqCst) + 1;
                        if n > 2 {
                            v.lock()
                                .unwrap()
                                .push(format!("semaphore: {n} permits out of 2 ({i})"));
                        }
                        grants.fetch_add(1, SeqCst);
                        std::thread::sleep(hold);
                        inside.fetch_sub(1, SeqCst);
                        if let Err(e) = s.release(id) {
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("semaphore release: {e}"));
                        }
                    }
                    Ok(None) => {}
                    Err(e) => errors.lock().unwrap().push(format!("semaphore: {e}")),
                }
            }
        }));
    }

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
        let before = grants.load(SeqCst);
        wait_until(WAIT, "clients make progress before the move", || {
            grants.load(SeqCst) >= before + 20
        });
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
        let mut f = from.conn();
        assert_eq!(
            rlock_stat(&mut f, "waiters"),
            0,
            "nothing waits on the old node"
        );
        assert_eq!(
            rlock_tests::dbsize(&mut f),
            0,
            "every key left the old node"
        );
        check_keys(to, &rw);
        assert!(
            violations.lock().unwrap().is_empty(),
            "{:?}",
            violations.lock().unwrap()
        );
    }
    let before = grants.load(SeqCst);
    wait_until(WAIT, "clients make progress after the moves", || {
        grants.load(SeqCst) >= before + 20
    });
    stop.store(true, SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "{} grants; worst waiter end after a move: {worst:?}; client errors: {:?}",
        grants.load(SeqCst),
        errors.lock().unwrap()
    );
    assert!(
        violations.lock().unwrap().is_empty(),
        "{:?}",
        violations.lock().unwrap()
    );
    // The held lock and the latch moved with the slot, unchanged.
    let owner = cluster.master_for(&held);
    let mut c = owner.conn();
    assert_eq!(
        hgetall(&mut c, &held).get("keeper").map(String::as_str),
        Some("1")
    );
    assert_eq!(rlock_tests::string(&mut c, &cmd!("GET", &latch)), "1");
}

/// In the keys of the node that now serves the slot: a write-held read-write lock has no live
/// read hold of another owner.
fn check_keys(node: &rlock_tests::Server, rw: &str) {
    let mut c = node.conn();
    let h = hgetall(&mut c, rw);
    if h.get("mode").map(String::as_str) != Some("write") {
        return;
    }
    let writers: Vec<&str> = h.keys().filter_map(|f| f.strip_suffix(":write")).collect();
    for (field, _) in h
        .iter()
        .filter(|(f, _)| *f != "mode" && !f.ends_with(":write"))
    {
        assert!(
            writers.iter().any(|w| w == field),
            "a reader {field} in a write-held lock {h:?}"
        );
    }
}

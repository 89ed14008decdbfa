//! An object whose auxiliary key reached the importing node before its main key is not decided
//! there: a command sent with `ASKING` finds half the object (a semaphore's leased-permit set
//! without its count) and must answer `TRYAGAIN`, as Redis answers a multi-key command whose
//! keys are split by a migration.

use std::time::{Duration, Instant};

use rlock_tests::cluster::Cluster;
use rlock_tests::redisson::semaphore;
use rlock_tests::{
    cmd, error_text, int, margin_ms, permit_ids, pttl, raw, rlock_stat, string, wait_until,
    Pending, Value,
};

/// `cmd` sent after `ASKING` on one connection, as a cluster client follows `ASK`.
fn asking(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    assert_eq!(string(conn, &cmd!("ASKING")), "OK");
    raw(conn, cmd)
}

fn keys(conn: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = cmd!("KEYS", "*").query(conn).unwrap();
    k.sort();
    k
}

/// Before: the release ran on the target with only the leased-permit set there. It took the
/// permit out of the set and created the count (1) beside the source's, so the count's
/// `MIGRATE` then failed with `BUSYKEY` and the permit's holder, releasing again, got
/// `NOPERMIT` for a permit it held.
#[test]
fn a_permit_is_not_released_where_its_semaphores_count_has_not_arrived() {
    let cluster = Cluster::start();
    let name = "{halfsem}:sem";
    let leases = "{halfsem}:sem:timeout";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut src = source.conn();
    let mut dst = target.conn();
    assert_eq!(int(&mut src, &cmd!("RSEM.TRYSETPERMITS", name, 2)), 1);
    let id = match raw(&mut src, &cmd!("RSEM.ACQUIRE", name, "LEASE", 60_000)) {
        Value::Array(ids) => match &ids[..] {
            [Value::BulkString(b)] => String::from_utf8(b.clone()).unwrap(),
            other => panic!("one id: {other:?}"),
        },
        other => panic!("leased: {other:?}"),
    };
    let release = cmd!("RSEM.RELEASE", name, "ID", &id);

    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[leases]);
    let v = raw(&mut src, &release);
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("TRYAGAIN")),
        "source, its leased-permit set gone: {v:?}"
    );
    let v = asking(&mut dst, &release);
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("TRYAGAIN")),
        "target, its count not there yet: {v:?}"
    );
    assert_eq!(keys(&mut dst), [leases], "nothing written on the target");

    // The count follows: whole on the target, the permit is released there once.
    cluster.migrate_keys(source, target, &[name]);
    assert_eq!(asking(&mut dst, &release), Value::Int(2));
    cluster.close_migration(slot, source, target);
    assert_eq!(int(&mut dst, &cmd!("RSEM.AVAILABLE", name)), 2);
    let again = raw(&mut dst, &release);
    assert!(
        error_text(&again).is_some_and(|e| e.starts_with("NOPERMIT")),
        "{again:?}"
    );
}

fn starts_with(v: &Value, prefix: &str) -> bool {
    error_text(v).is_some_and(|e| e.starts_with(prefix))
}

/// The keys of `slot` on `conn`'s node, sorted.
fn slot_keys(conn: &mut redis::Connection, slot: u16) -> Vec<String> {
    let mut k: Vec<String> = cmd!("CLUSTER", "GETKEYSINSLOT", slot, 100)
        .query(conn)
        .unwrap();
    k.sort();
    k
}

/// A TTL read on the target `after` (ms) against the one read on the source `before`, `since`
/// then: it carried over when it is no more than before and dropped by no more than the time
/// that passed (plus a margin for the two reads' rounding and this machine's pace).
fn assert_ttl_carried(what: &str, before: i64, since: Instant, after: i64) {
    let passed = since.elapsed().as_millis() as i64;
    assert!(before > 0, "{what}: a TTL on the source ({before})");
    rlock_tests::assert_between(what, after, before - passed - margin_ms(100), before);
}

/// A waiter parked on the node its slot left ends with an error that sends it where the slot
/// went, never with a grant: nothing was written on the source to give it.
fn assert_ended_by_move(what: &str, v: &Value) {
    assert!(
        ["TRYAGAIN", "MOVED", "ASK"]
            .iter()
            .any(|p| starts_with(v, p)),
        "{what}: {v:?}"
    );
}

/// The semaphore's commands that the tests above do not move: `NOLEASE` permits, a count set
/// with `TRYSETPERMITS ... PX`, `RELEASE ... XX` and `SETPERMITS`, with waiters parked on the
/// source, the slot moved the way `redis-cli --cluster reshard` moves it (`MIGRATE`). In the
/// count-first split every such command goes where the count is (`ASK` from the source) and
/// the target, without the leased-permit set, answers `TRYAGAIN` and writes nothing; in the
/// lease-set-first split the source answers `TRYAGAIN`. Once whole on the target: the same
/// permits (the permits without an end still without one), the TTLs carried over, the
/// totals `SETPERMITS` set, and the parked waiters ended by the move, never granted.
#[test]
fn nolease_permits_ttls_xx_and_setpermits_move_with_their_slot() {
    let cluster = Cluster::start();

    // The count moves first.
    let sem = "{mv1}:sem";
    let leases = semaphore::timeouts(sem);
    let slot = cluster.slot(sem);
    let source = cluster.master_for(sem);
    let target = cluster.other_master(sem);
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(
        int(&mut src, &cmd!("RSEM.TRYSETPERMITS", sem, 4, "PX", 60_000)),
        1
    );
    let nolease = permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "NOLEASE"))).remove(0);
    let leased = permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000))).remove(0);
    assert_eq!(int(&mut src, &cmd!("RSEM.ACQUIRE", sem, "PERMITS", 2)), 1);
    assert_eq!(
        semaphore::lease_score(&mut src, sem, &nolease),
        Some(semaphore::PERMANENT)
    );
    let waiters_before = rlock_stat(&mut src, "waiters");
    let parked = [
        Pending::send(source, &cmd!("RSEM.ACQUIRE", sem, "NOLEASE", "BLOCK", 0)),
        Pending::send(source, &cmd!("RSEM.ACQUIRE", sem, "PERMITS", 1, "BLOCK", 0)),
    ];
    wait_until(Duration::from_secs(20), "two waiters parked", || {
        rlock_stat(&mut src, "waiters") == waiters_before + 2
    });
    let (count_ttl, lease_ttl, read_at) =
        (pttl(&mut src, sem), pttl(&mut src, &leases), Instant::now());

    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[sem]);
    // The source, its count gone: Redis sends every one of them to the target.
    for c in [
        cmd!("RSEM.RELEASE", sem, "PERMITS", 1, "XX"),
        cmd!("RSEM.SETPERMITS", sem, 9),
        cmd!("RSEM.ACQUIRE", sem, "NOLEASE"),
        cmd!("RSEM.TRYSETPERMITS", sem, 9, "PX", 1_000),
        cmd!("RSEM.RELEASE", sem, "ID", &nolease),
    ] {
        let v = raw(&mut src, &c);
        assert!(
            starts_with(&v, "ASK "),
            "source without the count: {c:?}: {v:?}"
        );
    }
    // The target, without the leased-permit set: nothing decided, nothing written.
    for c in [
        cmd!("RSEM.RELEASE", sem, "PERMITS", 1, "XX"),
        cmd!("RSEM.SETPERMITS", sem, 9),
        cmd!("RSEM.ACQUIRE", sem, "NOLEASE"),
        cmd!("RSEM.RELEASE", sem, "ID", &nolease),
        cmd!("RSEM.TRYSETPERMITS", sem, 9, "PX", 1_000),
    ] {
        let v = asking(&mut dst, &c);
        assert!(
            starts_with(&v, "TRYAGAIN"),
            "target without the lease set: {c:?}: {v:?}"
        );
    }
    assert_eq!(slot_keys(&mut dst, slot), [sem]);
    assert_eq!(
        asking(&mut dst, &cmd!("GET", sem)),
        Value::BulkString(b"0".to_vec())
    );

    cluster.migrate_keys(source, target, &[&leases]);
    cluster.close_migration(slot, source, target);
    for (i, w) in parked.into_iter().enumerate() {
        assert_ended_by_move(
            &format!("waiter {i} parked on the source"),
            &w.reply_within(Duration::from_secs(5)),
        );
    }
    assert_eq!(rlock_stat(&mut src, "waiters"), waiters_before);
    // Whole on the target: the same permits, the one without an end still without one, the
    // TTLs carried over.
    assert_eq!(string(&mut dst, &cmd!("GET", sem)), "0");
    assert_eq!(int(&mut dst, &cmd!("ZCARD", &leases)), 2);
    assert_eq!(
        semaphore::lease_score(&mut dst, sem, &nolease),
        Some(semaphore::PERMANENT)
    );
    assert_eq!(int(&mut dst, &cmd!("RSEM.LEASETIME", sem, &nolease)), -1);
    let lease_left = int(&mut dst, &cmd!("RSEM.LEASETIME", sem, &leased));
    assert!(lease_left > 0 && lease_left <= 60_000, "{lease_left}");
    assert_ttl_carried("the count's PTTL", count_ttl, read_at, pttl(&mut dst, sem));
    assert_ttl_carried(
        "the lease set's PTTL",
        lease_ttl,
        read_at,
        pttl(&mut dst, &leases),
    );
    // XX on the source now: the slot's new owner, not a count created here.
    let v = raw(&mut src, &cmd!("RSEM.RELEASE", sem, "PERMITS", 1, "XX"));
    assert!(starts_with(&v, "MOVED"), "{v:?}");
    assert!(
        slot_keys(&mut src, slot).is_empty(),
        "nothing created on the source"
    );

    // Queued again on the target, the waiters are served by SETPERMITS there: 6 in all, 2
    // leased, so 4 added, 2 of them handed over (one without an end, one with a lease).
    let again = [
        Pending::send(
            target,
            &cmd!("RSEM.ACQUIRE", sem, "NOLEASE", "BLOCK", 10_000),
        ),
        Pending::send(
            target,
            &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000, "BLOCK", 10_000),
        ),
    ];
    wait_until(
        Duration::from_secs(20),
        "two waiters queued on the target",
        || rlock_stat(&mut dst, "sem_waiters") == 2,
    );
    assert_eq!(int(&mut dst, &cmd!("RSEM.SETPERMITS", sem, 6)), 2);
    let [w1, w2] = again;
    let got = permit_ids(&w1.reply_within(Duration::from_secs(5))).remove(0);
    assert_eq!(
        semaphore::lease_score(&mut dst, sem, &got),
        Some(semaphore::PERMANENT)
    );
    assert_eq!(
        permit_ids(&w2.reply_within(Duration::from_secs(5))).len(),
        1
    );
    assert_eq!(semaphore::total(&mut dst, sem), 6);
    // Released by id on the target (the permit leased on the source), and XX there.
    assert_eq!(int(&mut dst, &cmd!("RSEM.RELEASE", sem, "ID", &nolease)), 3);
    assert_eq!(
        int(&mut dst, &cmd!("RSEM.RELEASE", sem, "PERMITS", 2, "XX")),
        5
    );
    assert_eq!(
        semaphore::total(&mut dst, sem),
        8,
        "6 set, 2 plain ones given back"
    );

    // The leased-permit set moves first: the source, with the count but without the leases,
    // decides nothing; its parked waiter is not granted by what is sent to it.
    let sem = "{mv2}:sem";
    let leases = semaphore::timeouts(sem);
    let slot = cluster.slot(sem);
    let source = cluster.master_for(sem);
    let target = cluster.other_master(sem);
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(int(&mut src, &cmd!("RSEM.SETPERMITS", sem, 3)), 3);
    let nolease = permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "NOLEASE"))).remove(0);
    permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000)));
    assert_eq!(int(&mut src, &cmd!("RSEM.SETPERMITS", sem, 5)), 3);
    assert_eq!(semaphore::total(&mut src, sem), 5);
    let waiters_before = rlock_stat(&mut src, "waiters");
    let parked = Pending::send(
        source,
        &cmd!(
            "RSEM.ACQUIRE",
            sem,
            "PERMITS",
            4,
            "LEASE",
            60_000,
            "BLOCK",
            0
        ),
    );
    wait_until(Duration::from_secs(20), "a waiter parked", || {
        rlock_stat(&mut src, "waiters") == waiters_before + 1
    });
    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[&leases]);
    for c in [
        cmd!("RSEM.SETPERMITS", sem, 7),
        cmd!("RSEM.RELEASE", sem, "PERMITS", 1, "XX"),
        cmd!("RSEM.ACQUIRE", sem, "NOLEASE"),
        cmd!("RSEM.TRYSETPERMITS", sem, 9, "PX", 1_000),
    ] {
        let v = raw(&mut src, &c);
        assert!(
            starts_with(&v, "TRYAGAIN"),
            "source without the lease set: {c:?}: {v:?}"
        );
    }
    assert_eq!(string(&mut src, &cmd!("GET", sem)), "3");
    assert_eq!(
        pttl(&mut src, sem),
        -1,
        "no TTL given by the refused TRYSETPERMITS"
    );
    assert_eq!(slot_keys(&mut dst, slot), std::slice::from_ref(&leases));
    cluster.migrate_keys(source, target, &[sem]);
    cluster.close_migration(slot, source, target);
    assert_ended_by_move(
        "the waiter parked on the source",
        &parked.reply_within(Duration::from_secs(5)),
    );
    assert_eq!(string(&mut dst, &cmd!("GET", sem)), "3");
    assert_eq!(
        semaphore::lease_score(&mut dst, sem, &nolease),
        Some(semaphore::PERMANENT)
    );
    assert_eq!(
        semaphore::total(&mut dst, sem),
        5,
        "the total set on the source"
    );
    assert_eq!(int(&mut dst, &cmd!("RSEM.SETPERMITS", sem, 7)), 5);
    assert_eq!(semaphore::total(&mut dst, sem), 7);
    // A semaphore that never existed: XX creates nothing on the slot's new owner either.
    assert_eq!(
        raw(&mut dst, &cmd!("RSEM.RELEASE", "{mv2}:gone", "XX")),
        Value::Nil
    );
    assert!(!rlock_tests::exists(&mut dst, "{mv2}:gone"));
}

/// A request queued through a session on the importing node while the semaphore there is only
/// its count (sent with `ASKING`, as a client follows `ASK`) is queued, so its reply must say
/// `QUEUED`. Before: it was queued and answered `TRYAGAIN`; the client queued it again, the
/// first request was granted later and its outcome found no wait: a permit leased to nobody
/// (seen as `(available, leased) = (1, 1)` after `reshard_under_load...`'s clients stopped;
/// with a plain permit, lost for good). Then the source's side of the other split, on the same
/// cluster.
#[test]
fn a_session_request_queued_on_a_split_semaphore_is_told_so_and_granted_once() {
    let cluster = Cluster::start();
    let sem = "{mv3}:sem";
    let leases = semaphore::timeouts(sem);
    let slot = cluster.slot(sem);
    let source = cluster.master_for(sem);
    let target = cluster.other_master(sem);
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(int(&mut src, &cmd!("RSEM.TRYSETPERMITS", sem, 1)), 1);
    let held = permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000))).remove(0);
    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[sem]);

    let opened = raw(&mut dst, &cmd!("RSESSION.OPEN", "s", 10_000));
    assert!(error_text(&opened).is_none(), "{opened:?}");
    let v = asking(
        &mut dst,
        &cmd!(
            "RSEM.ACQUIRE",
            sem,
            "LEASE",
            60_000,
            "SESSION",
            "s",
            "QUEUE",
            7,
            0
        ),
    );
    let queued = rlock_stat(&mut dst, "sem_waiters");
    assert_eq!(
        (v, queued),
        (Value::SimpleString("QUEUED".into()), 1),
        "the reply says what became of the request"
    );

    cluster.migrate_keys(source, target, &[&leases]);
    cluster.close_migration(slot, source, target);
    // The held permit's release hands it to the queued request, and its outcome says so.
    assert_eq!(int(&mut dst, &cmd!("RSEM.RELEASE", sem, "ID", &held)), 0);
    let outcomes = match raw(&mut dst, &cmd!("RSESSION.READ", "s", 0)) {
        Value::Array(o) => o,
        other => panic!("RSESSION.READ: {other:?}"),
    };
    let [Value::Array(o)] = &outcomes[..] else {
        panic!("one outcome: {outcomes:?}")
    };
    assert_eq!(
        rlock_tests::text(&o[1]).as_deref(),
        Some("granted"),
        "{o:?}"
    );
    assert_eq!(o[2], Value::Int(7), "{o:?}");
    let granted = permit_ids(&o[4]).remove(0);
    assert!(semaphore::lease_score(&mut dst, sem, &granted).is_some());
    assert_eq!(
        semaphore::total(&mut dst, sem),
        1,
        "one permit, leased by the request"
    );
    assert_eq!(int(&mut dst, &cmd!("ZCARD", &leases)), 1);

    a_session_request_queued_on_the_source_ends_with_tryagain(&cluster);
}

/// The other split, on `cluster`: the leased-permit set left first and the source, with the
/// count only, queues a session's request (its reply says so). When the count follows, the
/// request ends with `TRYAGAIN` in its session, granted nothing on the source, and the permits
/// on the target are the ones that left.
fn a_session_request_queued_on_the_source_ends_with_tryagain(cluster: &Cluster) {
    let sem = "{mv4}:sem";
    let leases = semaphore::timeouts(sem);
    let slot = cluster.slot(sem);
    let source = cluster.master_for(sem);
    let target = cluster.other_master(sem);
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(int(&mut src, &cmd!("RSEM.TRYSETPERMITS", sem, 1)), 1);
    permit_ids(&raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "NOLEASE")));
    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[&leases]);

    let opened = raw(&mut src, &cmd!("RSESSION.OPEN", "s4", 10_000));
    assert!(error_text(&opened).is_none(), "{opened:?}");
    let v = raw(
        &mut src,
        &cmd!(
            "RSEM.ACQUIRE",
            sem,
            "LEASE",
            60_000,
            "SESSION",
            "s4",
            "QUEUE",
            8,
            0
        ),
    );
    assert_eq!(
        (v, rlock_stat(&mut src, "sem_waiters")),
        (Value::SimpleString("QUEUED".into()), 1),
        "the reply says what became of the request"
    );
    cluster.migrate_keys(source, target, &[sem]);
    cluster.close_migration(slot, source, target);
    let outcomes = match raw(&mut src, &cmd!("RSESSION.READ", "s4", 0, "BLOCK", 5_000)) {
        Value::Array(o) => o,
        other => panic!("RSESSION.READ: {other:?}"),
    };
    let [Value::Array(o)] = &outcomes[..] else {
        panic!("one outcome: {outcomes:?}")
    };
    assert_eq!(rlock_tests::text(&o[1]).as_deref(), Some("error"), "{o:?}");
    assert_eq!(o[2], Value::Int(8), "{o:?}");
    assert!(
        rlock_tests::text(&o[4]).is_some_and(|e| e.starts_with("TRYAGAIN")),
        "{o:?}"
    );
    assert_eq!(rlock_stat(&mut src, "sem_waiters"), 0);
    assert_eq!(string(&mut dst, &cmd!("GET", sem)), "0");
    assert_eq!(
        semaphore::total(&mut dst, sem),
        1,
        "the one permit, leased without an end"
    );
}

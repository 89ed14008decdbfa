//! RLOCK.ACQUIRE / RELEASE / RENEW / FORCERELEASE / INFO: replies and the key contents they
//! leave behind (Redisson's layout: hash `key`, field `owner` = hold count, PEXPIRE = lease).

use rlock_tests::*;

#[test]
fn acquire_creates_redisson_layout() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-1:7", 10_000)),
        1
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-1:7", 1));
    assert_eq!(string(&mut c, &cmd!("TYPE", "lk")), "hash");
    assert_between("PTTL after acquire", pttl(&mut c, "lk"), 9_000, 10_000);
    // No auxiliary key without FENCE.
    assert_eq!(dbsize(&mut c), 1);
}

#[test]
fn reentry_increments_count_and_resets_lease() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 2);
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 2));
    assert_between(
        "PTTL reset to the longer lease",
        pttl(&mut c, "lk"),
        29_000,
        30_000,
    );
    // Re-entry resets the lease (Redisson's PEXPIRE), it does not extend it: a shorter lease
    // shortens the TTL.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 5_000)), 3);
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 3));
    assert_between(
        "PTTL reset to the shorter lease",
        pttl(&mut c, "lk"),
        4_000,
        5_000,
    );
}

#[test]
fn other_owner_is_refused_without_blocking() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    // The absolute expiry time: any change of the lease (longer or shorter) shows.
    let before = int(&mut c, &cmd!("PEXPIRETIME", "lk"));
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 20_000));
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 1));
    assert_eq!(
        int(&mut c, &cmd!("PEXPIRETIME", "lk")),
        before,
        "a refused acquire must not touch the lease"
    );
    assert_eq!(
        lock_info(&mut c, "lk").waiters,
        0,
        "a non-blocking attempt never queues"
    );
}

#[test]
fn release_partial_keeps_ttl_and_full_deletes() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o1", 5_000)), 1);
    let before = pttl(&mut c, "lk");
    assert_between("PTTL after renew", before, 4_000, 5_000);

    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")),
        1,
        "one hold remains"
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 1));
    // Partial release leaves the TTL unchanged (neither re-armed nor removed).
    assert_between(
        "PTTL after partial release",
        pttl(&mut c, "lk"),
        before - 500,
        before,
    );

    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")),
        0,
        "fully released"
    );
    assert!(!exists(&mut c, "lk"), "a full release deletes the key");
    assert_eq!(pttl(&mut c, "lk"), -2);
}

#[test]
fn release_by_non_owner_is_notowner_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    // Absent key.
    let e = err(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1"));
    assert!(e.starts_with("NOTOWNER"), "release of a free lock: {e}");
    assert_eq!(dbsize(&mut c), 0);

    // Held by someone else.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    let e = err(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o2"));
    assert!(e.starts_with("NOTOWNER"), "release by another owner: {e}");
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 1));
    assert_between("PTTL untouched", pttl(&mut c, "lk"), 9_000, 10_000);
}

#[test]
fn renew_resets_lease_only_for_the_holder() {
    let s = Server::start();
    let mut c = s.conn();
    // Not held: 0, and no key is created.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o1", 10_000)), 0);
    assert_eq!(dbsize(&mut c), 0);

    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 2_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o1", 40_000)), 1);
    assert_between("PTTL after renew", pttl(&mut c, "lk"), 39_000, 40_000);
    assert_eq!(
        hgetall(&mut c, "lk"),
        holder("o1", 1),
        "renew does not change the count"
    );
    // Renew shortens as well (it is a PEXPIRE, not an extension).
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o1", 3_000)), 1);
    assert_between("PTTL after shorter renew", pttl(&mut c, "lk"), 2_000, 3_000);

    // Another owner cannot renew (nor shorten: the absolute expiry time stays as it was).
    let before = int(&mut c, &cmd!("PEXPIRETIME", "lk"));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o2", 60_000)), 0);
    assert_eq!(
        int(&mut c, &cmd!("PEXPIRETIME", "lk")),
        before,
        "a refused renew must not touch the lease"
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 1));
}

#[test]
fn force_release_deletes_whoever_holds_it() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")),
        0,
        "nothing to delete"
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert!(!exists(&mut c, "lk"));
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 0);
    // The lock is free again for anyone.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000)), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("o2", 1));
}

#[test]
fn info_on_absent_key() {
    let s = Server::start();
    let mut c = s.conn();
    let info = lock_info(&mut c, "nothing-here");
    assert_eq!(
        info,
        LockInfo {
            owner: None,
            holds: 0,
            ttl_ms: -2,
            token: None,
            waiters: 0,
            queue: vec![]
        }
    );
    assert_eq!(dbsize(&mut c), 0, "RLOCK.INFO creates nothing");
}

#[test]
fn info_on_held_key_with_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 2);
    let info = lock_info(&mut c, "lk");
    assert_eq!(info.owner.as_deref(), Some("o1"));
    assert_eq!(info.holds, 2);
    assert_between("ttl_ms", info.ttl_ms, 9_000, 10_000);
    assert_eq!(info.token, None, "no FENCE acquire yet");
    assert_eq!((info.waiters, info.queue.clone()), (0, vec![]));

    let w1 = park(&s, &mut c, "lk", "w1", 1_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 1_000, &[], 2);
    let info = lock_info(&mut c, "lk");
    assert_eq!(info.waiters, 2);
    assert_eq!(info.queue, ["w1", "w2"]);
    assert_eq!(info.owner.as_deref(), Some("o1"));

    // A key without expiry reports -1.
    assert_eq!(int(&mut c, &cmd!("PERSIST", "lk")), 1);
    assert_eq!(lock_info(&mut c, "lk").ttl_ms, -1);

    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn info_reports_last_fencing_token() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE"));
    assert_eq!(lock_info(&mut c, "lk").token, Some(t1));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
    let info = lock_info(&mut c, "lk");
    assert_eq!((info.owner, info.holds, info.ttl_ms), (None, 0, -2));
    assert_eq!(info.token, Some(t1), "the token survives the release");
}

#[test]
fn info_is_a_map_in_resp3() {
    let s = Server::start();
    let mut c = redis::Client::open(format!("{}?protocol=resp3", s.url()))
        .unwrap()
        .get_connection()
        .unwrap();
    let reply = raw(&mut c, &cmd!("RLOCK.INFO", "lk"));
    assert!(
        matches!(reply, Value::Map(_)),
        "RESP3 reply must be a map: {reply:?}"
    );
    assert_eq!(LockInfo::parse(&reply).ttl_ms, -2);

    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    let reply = raw(&mut c, &cmd!("RLOCK.INFO", "lk"));
    assert!(
        matches!(reply, Value::Map(_)),
        "RESP3 reply must be a map: {reply:?}"
    );
    let info = LockInfo::parse(&reply);
    assert_eq!((info.owner.as_deref(), info.holds), (Some("o1"), 1));
}

#[test]
fn option_words_are_case_insensitive() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "fence"));
    assert_eq!(
        string(&mut c, &cmd!("GET", token_key("lk"))),
        t1.to_string()
    );
    // The re-entry takes the next token: larger than the last (a token is at least the
    // clock's milliseconds × 1,000, so it may have jumped if a millisecond passed).
    let t2 = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "Block", 10, "FeNcE"),
    );
    assert!(t2 > t1, "{t2} after {t1}");
    assert_eq!(
        string(&mut c, &cmd!("GET", token_key("lk"))),
        t2.to_string()
    );
    nil(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000, "block", 10),
    );
    // Command names are case-insensitive as for every Redis command.
    assert_eq!(int(&mut c, &cmd!("rlock.release", "lk", "o1")), 1);
}

#[test]
fn locks_and_queues_are_per_database() {
    let s = Server::start();
    let mut c0 = s.conn();
    let mut c1 = s.conn();
    assert_eq!(string(&mut c1, &cmd!("SELECT", 1)), "OK");
    assert_eq!(int(&mut c0, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(
        int(&mut c1, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000)),
        1,
        "db 1 is independent"
    );
    assert_eq!(hgetall(&mut c0, "lk"), holder("o1", 1));
    assert_eq!(hgetall(&mut c1, "lk"), holder("o2", 1));

    // A waiter in db 1 is not served by a release in db 0.
    let mut wconn = s.conn();
    assert_eq!(string(&mut wconn, &cmd!("SELECT", 1)), "OK");
    let waiter = Pending::send_on(wconn, &cmd!("RLOCK.ACQUIRE", "lk", "w", 5_000, "BLOCK", 0));
    wait_blocked(&mut c0, 1);
    assert_eq!(lock_info(&mut c1, "lk").queue, ["w"]);
    assert_eq!(lock_info(&mut c0, "lk").waiters, 0);
    assert_eq!(int(&mut c0, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
    assert!(
        !exists(&mut c0, "lk"),
        "db 0 lock is free: its queue is empty"
    );
    assert_eq!(
        info_int(&mut c0, "clients", "blocked_clients"),
        1,
        "the db 1 waiter still waits"
    );
    assert_eq!(int(&mut c1, &cmd!("RLOCK.RELEASE", "lk", "o2")), 0);
    assert_eq!(waiter.reply_int(), 1);
    assert_eq!(hgetall(&mut c1, "lk"), holder("w", 1));
    assert!(!exists(&mut c0, "lk"));
}

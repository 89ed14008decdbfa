//! `RSEM.*` against a real server, line by line of the contract's semaphore section: Redisson's
//! layout (count string, `{key}:timeout` set of 16-byte ids shown as 32 hex characters), strict
//! FIFO waiters, leases returned by a timer and handed to the head waiter, replies and publishes
//! counted after waiters were served, argument ranges and WRONGTYPE.

use rlock_tests::redisson::semaphore::{channel, hex, timeouts, unhex};
use rlock_tests::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The ids of a leased acquire's reply.
fn ids(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(|i| text(i).expect("an id")).collect(),
        other => panic!("expected permit ids, got {other:?}"),
    }
}

fn get(c: &mut redis::Connection, key: &str) -> Option<String> {
    match raw(c, &cmd!("GET", key)) {
        Value::Nil => None,
        v => text(&v),
    }
}

fn available(c: &mut redis::Connection, key: &str) -> i64 {
    int(c, &cmd!("RSEM.AVAILABLE", key))
}

/// The `{key}:timeout` set: (member bytes, score).
fn leases(c: &mut redis::Connection, key: &str) -> Vec<(Vec<u8>, i64)> {
    let z: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(timeouts(key))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(c)
        .unwrap();
    z.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

/// RSEM.INFO as (field, value) pairs, in order.
fn info(c: &mut redis::Connection, key: &str) -> Vec<(String, Value)> {
    match raw(c, &cmd!("RSEM.INFO", key)) {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (text(&kv[0]).unwrap(), kv[1].clone()))
            .collect(),
        other => panic!("RSEM.INFO: {other:?}"),
    }
}

fn field(info: &[(String, Value)], name: &str) -> Value {
    info.iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name} in {info:?}"))
        .1
        .clone()
}

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn sem_stat(c: &mut redis::Connection, field: &str) -> i64 {
    rlock_stat(c, &format!("sem_{field}"))
}

#[test]
fn try_set_and_add_permits_publish_the_count_and_acquires_publish_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    let ch = channel("s");
    assert_eq!(ch, "redisson_sc:{s}");

    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 3)), 1);
    assert_eq!(get(&mut c, "s").as_deref(), Some("3"));
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 0);
    assert_eq!(get(&mut c, "s").as_deref(), Some("3"), "already set");
    assert_eq!(sub.drain(&mut c), [(ch.clone(), "3".to_string())]);

    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s")), 1);
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s"));
    assert!(sub.drain(&mut c).is_empty(), "acquires publish nothing");

    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", 2)), 2);
    assert_eq!(sub.drain(&mut c), [(ch.clone(), "2".to_string())]);
    // The count may go negative, as Redisson's; removing permits publishes nothing.
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", -7)), -5);
    assert_eq!(get(&mut c, "s").as_deref(), Some("-5"));
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", 0)), -5);
    assert!(sub.drain(&mut c).is_empty());
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s"));
    assert_eq!(available(&mut c, "s"), -5);

    // 0 permits is a valid setting; ADDPERMITS creates an absent semaphore.
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "z", 0)), 1);
    assert_eq!(get(&mut c, "z").as_deref(), Some("0"));
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "new", 4)), 4);
    assert_eq!(
        sub.drain(&mut c),
        [
            (channel("z"), "0".to_string()),
            (channel("new"), "4".to_string())
        ]
    );
    // A name with a hash tag keeps it (Redisson's prefixName rule).
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "{app}:s", 1)), 1);
    assert_eq!(
        sub.drain(&mut c),
        [("redisson_sc:{app}:s".to_string(), "1".to_string())]
    );
}

#[test]
fn try_set_permits_px_sets_an_absent_count_that_expires_and_serves_waiters() {
    let s = Server::start();
    let mut admin = s.conn();
    // A user allowed only RSEM.* (no EVAL) can set it: Redisson's trySetPermits(n, ttl).
    let mut c = acl_user(
        &s,
        &mut admin,
        "u",
        &["~s", "~{s}:*", "+rsem.trysetpermits", "+rsem.acquire"],
    );
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    let waiter = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", margin_ms(5000)));
    wait_blocked(&mut admin, 1);
    let before = wall_ms();
    assert_eq!(
        int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 3, "PX", 800)),
        1
    );
    assert_eq!(waiter.reply_int(), 1, "served by the new permits");
    assert_eq!(get(&mut admin, "s").as_deref(), Some("2"));
    let pexpiretime = int(&mut admin, &cmd!("PTTL", "s")) + wall_ms();
    // It ends 800 ms after the set, which came after `before`; read back a little later.
    assert_between(
        "the count's end",
        pexpiretime - before,
        799,
        800 + margin_ms(200),
    );
    assert_eq!(sub.drain(&mut admin), [(channel("s"), "2".to_string())]);
    // There already: nothing changes, its TTL neither.
    assert_eq!(
        int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 9, "PX", 60_000)),
        0
    );
    assert_eq!(get(&mut admin, "s").as_deref(), Some("2"));
    assert!(int(&mut admin, &cmd!("PTTL", "s")) <= 800);
    assert!(sub.drain(&mut admin).is_empty());
    for (bad, e) in [
        (
            cmd!("RSEM.TRYSETPERMITS", "t", 1, "PX", 0),
            "ERR ttl_ms must be at least 1",
        ),
        (
            cmd!("RSEM.TRYSETPERMITS", "t", 1, "EX", 5),
            "ERR syntax error, unknown option 'EX'",
        ),
        (
            cmd!("RSEM.TRYSETPERMITS", "t", 1, "PX"),
            "ERR wrong number of arguments for 'rsem.trysetpermits' command",
        ),
    ] {
        assert_eq!(err(&mut admin, &bad), e);
    }
    assert_eq!(raw(&mut admin, &cmd!("EXISTS", "t")), Value::Int(0));
    // The count goes when its time is up.
    wait_until(margin(Duration::from_secs(2)), "the count expires", || {
        get(&mut admin, "s").is_none()
    });
}

#[test]
fn plain_permits_acquire_release_drain() {
    let s = Server::start();
    let mut c = s.conn();
    // An absent semaphore has 0 permits; RELEASE creates it (Redisson's `release`).
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s"));
    assert_eq!(available(&mut c, "s"), 0);
    assert!(!exists(&mut c, "s"));
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s")), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "permits", 2)), 3);
    assert_eq!(get(&mut c, "s").as_deref(), Some("3"));
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 4));
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s", "Permits", 3)), 1);
    assert_eq!(available(&mut c, "s"), 0);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 10)), 10);
    assert_eq!(int(&mut c, &cmd!("RSEM.DRAIN", "s")), 10);
    assert_eq!(get(&mut c, "s").as_deref(), Some("0"));
    assert_eq!(int(&mut c, &cmd!("RSEM.DRAIN", "s")), 0);
    assert_eq!(int(&mut c, &cmd!("RSEM.DRAIN", "absent")), 0);
    assert!(!exists(&mut c, "absent"), "draining nothing writes nothing");
    // A negative count drains nothing (and is not reset).
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", -2)), -2);
    assert_eq!(int(&mut c, &cmd!("RSEM.DRAIN", "s")), 0);
    assert_eq!(get(&mut c, "s").as_deref(), Some("-2"));
    // The count's TTL survives acquires and releases (INCRBY keeps it).
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "t", 2)), 1);
    assert_eq!(int(&mut c, &cmd!("PEXPIRE", "t", 60_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "t")), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "t")), 2);
    assert_between("TTL kept", pttl(&mut c, "t"), 50_000, 60_000);
    // The count stays within 64 bits.
    assert_eq!(
        int(&mut c, &cmd!("RSEM.ADDPERMITS", "big", i64::MAX)),
        i64::MAX
    );
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "big"));
    assert_eq!(e, "ERR permit count would overflow");
    let e = err(&mut c, &cmd!("RSEM.ADDPERMITS", "big", 1));
    assert_eq!(e, "ERR permit count would overflow");
    assert_eq!(get(&mut c, "big"), Some(i64::MAX.to_string()));
}

#[test]
fn leased_permits_are_16_byte_ids_shown_as_hex_and_released_all_or_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 3)), 1);
    sub.drain(&mut c);
    let before = wall_ms();
    let got = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "LEASE", 10_000),
    ));
    let after = wall_ms();
    assert_eq!(got.len(), 2);
    assert_ne!(got[0], got[1]);
    for id in &got {
        assert_eq!(id.len(), 32, "{id}");
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
            "lowercase hex: {id}"
        );
    }
    // Stored as Redisson stores them: 16 raw bytes, scored with the lease end.
    let z = leases(&mut c, "s");
    assert_eq!(z.len(), 2);
    for (member, score) in &z {
        assert_eq!(member.len(), 16);
        assert!(got.contains(&hex(member)), "{} not handed out", hex(member));
        assert_between("lease end", *score, before + 10_000, after + 10_000);
    }
    assert_eq!(available(&mut c, "s"), 1);
    // RSEM.INFO lists the leases with their remaining time, soonest first.
    let shown = info(&mut c, "s");
    assert_eq!(
        shown.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["available", "leased", "ttl_ms", "waiters", "queue"]
    );
    assert_eq!(field(&shown, "available"), Value::Int(1));
    let Value::Array(leased) = field(&shown, "leased") else {
        panic!()
    };
    assert_eq!(leased.len(), 2);
    for l in &leased {
        let Value::Array(pair) = l else { panic!() };
        assert!(got.contains(&text(&pair[0]).unwrap()));
        let Value::Int(left) = pair[1] else { panic!() };
        assert_between("remaining lease", left, 9_000, 10_000);
    }

    // One released; releasing it again, or with an unknown id alongside a live one, is an
    // error that releases nothing.
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &got[0])), 2);
    assert_eq!(sub.drain(&mut c), [(channel("s"), "2".to_string())]);
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &got[0]));
    assert_eq!(
        e,
        format!(
            "NOPERMIT permit {} has already been released, has expired or does not exist",
            got[0]
        )
    );
    let unknown = "00112233445566778899aabbccddeeff";
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &got[1], unknown));
    assert!(e.starts_with("NOPERMIT permit 0011"), "{e}");
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &got[1], &got[1]));
    assert!(e.starts_with("NOPERMIT"), "an id given twice: {e}");
    assert_eq!(leases(&mut c, "s").len(), 1, "nothing released");
    assert_eq!(get(&mut c, "s").as_deref(), Some("2"));
    assert!(
        sub.drain(&mut c).is_empty(),
        "a refused release publishes nothing"
    );
    // Ids are case-insensitive on input.
    assert_eq!(
        int(
            &mut c,
            &cmd!("RSEM.RELEASE", "s", "id", got[1].to_uppercase())
        ),
        3
    );
    assert!(
        !exists(&mut c, &timeouts("s")),
        "the last lease took the set"
    );
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", "abc"));
    assert_eq!(e, "ERR permit id must be 32 hex characters");

    // Leased acquires give the set the count's TTL (Redisson's script does).
    assert_eq!(int(&mut c, &cmd!("PEXPIRE", "s", 50_000)), 1);
    let one = ids(&raw(&mut c, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 60_000)));
    assert_eq!(one.len(), 1);
    assert_between("set TTL", pttl(&mut c, &timeouts("s")), 40_000, 50_000);
    // Binary ids round-trip through ZSCORE as Redisson reads them.
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(timeouts("s"))
        .arg(unhex(&one[0]))
        .query(&mut c)
        .unwrap();
    assert!(score.is_some());
}

#[test]
fn expired_leases_return_lazily_when_nobody_waits() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 2)), 1);
    let got = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "LEASE", 30),
    ));
    sub.drain(&mut c);
    std::thread::sleep(Duration::from_millis(60));
    // Nothing was written yet (nobody waits), but every reader counts them as returned, and
    // they cannot be released any more.
    assert_eq!(get(&mut c, "s").as_deref(), Some("0"));
    assert_eq!(available(&mut c, "s"), 2);
    let Value::Int(avail) = field(&info(&mut c, "s"), "available") else {
        panic!()
    };
    assert_eq!(avail, 2);
    assert_eq!(field(&info(&mut c, "s"), "leased"), Value::Array(vec![]));
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &got[0]));
    assert!(e.starts_with("NOPERMIT"), "{e}");
    // That command returned them (as Redisson's scripts do first), and published the count.
    assert_eq!(get(&mut c, "s").as_deref(), Some("2"));
    assert!(!exists(&mut c, &timeouts("s")));
    assert_eq!(sub.drain(&mut c), [(channel("s"), "2".to_string())]);
}

#[test]
fn an_expired_lease_goes_to_the_queued_waiter_within_10_ms() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    // Held long while the waiter queues (a loaded machine may take longer than a short lease
    // to show it blocked), then shortened to 200 ms; the lease's end is read in the same
    // pipeline, before it can end.
    let holder = ids(&raw(&mut c, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 60_000)));
    let after_expiry = sem_stat(&mut c, "grants_after_expiry");
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 5_000, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    sub.drain(&mut c);
    let (renewed, z): (i64, Vec<(Vec<u8>, f64)>) = redis::pipe()
        .cmd("RSEM.RENEW")
        .arg("s")
        .arg(200)
        .arg("ID")
        .arg(&holder[0])
        .cmd("ZRANGE")
        .arg(timeouts("s"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    assert_eq!(renewed, 1);
    assert_eq!(z.len(), 1, "the holder's lease: {z:?}");
    let lease_end = z[0].1 as i64;
    let reply = w.reply();
    let granted = wall_ms();
    let late = granted - lease_end;
    // The contract's target is 10 ms; the margin covers a loaded test machine (the benchmark
    // measures the p99).
    assert_between("ms from lease end to grant", late, 0, margin_ms(50));
    let mine = ids(&reply);
    assert_eq!(mine.len(), 1);
    assert_ne!(mine, holder);
    // The waiter's lease counts from its grant.
    let z = leases(&mut c, "s");
    assert_eq!(z.len(), 1);
    assert_eq!(hex(&z[0].0), mine[0]);
    assert_between("waiter's lease end", z[0].1 - granted, 4_900, 5_000);
    assert_eq!(get(&mut c, "s").as_deref(), Some("0"));
    assert_eq!(sem_stat(&mut c, "grants_after_expiry"), after_expiry + 1);
    // The reclaim left nothing after serving the waiter: nothing to announce.
    assert!(sub.drain(&mut c).is_empty());
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &holder[0]));
    assert!(
        e.starts_with("NOPERMIT"),
        "the expired holder's release: {e}"
    );
}

/// A lease shortened by `RSEM.RENEW` (the client's `update_lease_time`) while someone waits
/// reaches the waiter at its new end, not at the end it had when the waiter queued (Redisson's
/// `updateLeaseTime` script: `semaphore_interop`). Before, the waiter waited out the old 60 s.
#[test]
fn a_lease_shortened_while_someone_waits_goes_to_the_waiter_at_its_new_end() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    let renewals = sem_stat(&mut c, "renewals");
    let holder = ids(&raw(&mut c, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 60_000)));
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    let before = wall_ms();
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RENEW", "s", 100, "ID", &holder[0])),
        1
    );
    assert_eq!(w.reply_within(Duration::from_secs(10)), Value::Int(1));
    assert_between("ms to the grant", wall_ms() - before, 99, margin_ms(2_000));
    assert_eq!(
        get(&mut c, "s").as_deref(),
        Some("0"),
        "the waiter holds it"
    );
    assert!(leases(&mut c, "s").is_empty(), "the holder's lease ended");
    assert_eq!(sem_stat(&mut c, "renewals"), renewals + 1);
}

#[test]
fn reclaimed_permits_left_over_are_published_after_the_waiter_took_its_share() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 3)), 1);
    // Held long while the waiter queues (a loaded machine may take longer than a short lease
    // to show it blocked), then shortened to end in 100 ms.
    let held = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 3, "LEASE", 60_000),
    ));
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    sub.drain(&mut c);
    let mut renew = cmd!("RSEM.RENEW", "s", 100, "ID");
    renew.arg(&held);
    assert_eq!(int(&mut c, &renew), 3);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(get(&mut c, "s").as_deref(), Some("1"));
    assert_eq!(sub.drain(&mut c), [(channel("s"), "1".to_string())]);
}

#[test]
fn strict_fifo_a_large_request_is_not_overtaken_and_replies_count_after_serving() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    let big = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 5, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    let small = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 2);
    // One permit is free, but a newcomer for 1 does not overtake the head asking for 5.
    assert_eq!(available(&mut c, "s"), 1);
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s"));
    assert_eq!(
        field(&info(&mut c, "s"), "queue"),
        Value::Array(vec![
            Value::Array(vec![Value::Int(5), Value::Nil]),
            Value::Array(vec![Value::Int(1), Value::Nil]),
        ])
    );
    assert_eq!(field(&info(&mut c, "s"), "waiters"), Value::Int(2));
    sub.drain(&mut c);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 3)), 4);
    assert_eq!(sub.drain(&mut c), [(channel("s"), "4".to_string())]);
    // The fifth permit lets the head through; the reply and the publish count after it.
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s")), 0);
    assert_eq!(available(&mut c, "s"), 0);
    assert_eq!(sub.drain(&mut c), [(channel("s"), "0".to_string())]);
    assert_eq!(big.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", 2)), 1);
    assert_eq!(small.reply_int(), 1);
    assert_eq!(available(&mut c, "s"), 1);
    assert_eq!(sub.drain(&mut c), [(channel("s"), "1".to_string())]);
    // TRYSETPERMITS on an absent semaphore with waiters serves them too.
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "t", "PERMITS", 2, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "t", 3)), 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(get(&mut c, "t").as_deref(), Some("1"));
    assert_eq!(sub.drain(&mut c), [(channel("t"), "1".to_string())]);
}

#[test]
fn waiters_that_leave_let_the_next_through_and_block_times_out() {
    let s = Server::start();
    let mut c = s.conn();
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    let big = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 3, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    let small = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 2);
    // The head leaves (CLIENT UNBLOCK: nil, as BLPOP): the one behind it gets the free permit.
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", big.id)), 1);
    assert_eq!(big.reply(), Value::Nil);
    assert_eq!(small.reply_int(), 1);
    assert_eq!(available(&mut c, "s"), 0);
    // A deadline ends the wait with nil, and leaves the queue.
    let started = std::time::Instant::now();
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 50));
    assert!(started.elapsed() >= Duration::from_millis(45));
    assert_eq!(field(&info(&mut c, "s"), "waiters"), Value::Int(0));
    // A waiter whose connection closes leaves at once.
    let gone = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", gone.id)), 1);
    assert_eq!(field(&info(&mut c, "s"), "waiters"), Value::Int(0));
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s")), 1);
    drop(gone);
}

/// Issue 22 (6): one kind per key's queue. A semaphore waiter on an absent key (no permits)
/// makes the key's queue a semaphore's: a lock, read-write lock or latch request that would
/// queue or be refused there gets WRONGTYPE at once (before, `RLOCK.ACQUIRE ... BLOCK` queued
/// behind the semaphore waiter on a free key and timed out), and the semaphore waiter is
/// untouched. An `RLATCH.AWAIT` on the absent key is an open latch: 1, as ever (it neither
/// queues nor takes anything).
#[test]
fn a_request_of_another_kind_on_a_key_with_semaphore_waiters_is_wrongtype_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let waiter = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "k", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    let queued_kind = "WRONGTYPE Operation against a key holding the wrong kind of value: semaphore requests wait on this key";
    for other in [
        cmd!("RLOCK.ACQUIRE", "k", "o:1", 30_000, "BLOCK", 2_000),
        cmd!("RLOCK.ACQUIRE", "k", "o:1", 30_000),
        cmd!(
            "RRWLOCK.ACQUIRE",
            "k",
            "o:1",
            "READ",
            30_000,
            "BLOCK",
            2_000
        ),
        cmd!("RRWLOCK.ACQUIRE", "k", "o:1", "WRITE", 30_000),
    ] {
        // Well before the 2 s BLOCK timeout: at once.
        let e = Pending::send(&s, &other).reply_within(Duration::from_millis(500));
        let text = error_text(&e).unwrap_or_else(|| panic!("{}: {e:?}", show(&other)));
        assert!(text.starts_with(queued_kind), "{}: {text}", show(&other));
    }
    assert_eq!(
        int(&mut c, &cmd!("RLATCH.AWAIT", "k", "BLOCK", 0)),
        1,
        "an absent latch is open"
    );
    assert_eq!(dbsize(&mut c), 0, "nothing written");
    assert_eq!(field(&info(&mut c, "k"), "waiters"), Value::Int(1));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
    // The semaphore waiter is served as ever; with the queue gone the name is free for a lock.
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "k")), 0);
    assert_eq!(waiter.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("DEL", "k")), 1);
    // A latch's count is permits too: RLATCH.TRYSETCOUNT (not a request that waits, so not
    // refused) serves the semaphore waiter in its step, as a SET would.
    let waiter = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "k", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "k", 1)), 1);
    assert_eq!(
        get(&mut c, "k").as_deref(),
        Some("0"),
        "taken in the same step"
    );
    assert_eq!(waiter.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("DEL", "k")), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o:1", 30_000)), 1);
}

#[test]
fn block_degrades_to_one_attempt_inside_multi_and_lua() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0)),
        "QUEUED"
    );
    assert_eq!(string(&mut c, &cmd!("RSEM.RELEASE", "s")), "QUEUED");
    assert_eq!(
        string(
            &mut c,
            &cmd!("RSEM.ACQUIRE", "s", "LEASE", 1000, "BLOCK", 0)
        ),
        "QUEUED"
    );
    let Value::Array(r) = raw(&mut c, &cmd!("EXEC")) else {
        panic!()
    };
    assert_eq!(r[0], Value::Nil);
    assert_eq!(r[1], Value::Int(1));
    assert_eq!(ids(&r[2]).len(), 1);
    let script = "return redis.call('RSEM.ACQUIRE', KEYS[1], 'BLOCK', 0)";
    assert_eq!(raw(&mut c, &cmd!("EVAL", script, 1, "s")), Value::Nil);
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
}

#[test]
fn bad_arguments_are_errors_that_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: Vec<(redis::Cmd, &str)> = vec![
        (
            cmd!("RSEM.ACQUIRE", "s", "PERMITS", 0),
            "ERR permits must be at least 1",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "PERMITS", "1.5"),
            "ERR permits is not an integer or out of range",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "LEASE", 0),
            "ERR lease_ms must be at least 1",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "LEASE", i64::MAX),
            "ERR lease_ms is out of range",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "BLOCK", -1),
            "ERR timeout is negative",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "PERMITS", 100_001, "LEASE", 10),
            "ERR permits with LEASE must be at most 100000",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "PERMITS", 1, "PERMITS", 2),
            "ERR syntax error, PERMITS given twice",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "NX"),
            "ERR syntax error, unknown option 'NX'",
        ),
        (
            cmd!("RSEM.ACQUIRE", "s", "LEASE"),
            "ERR syntax error, LEASE needs a duration in milliseconds",
        ),
        (
            cmd!("RSEM.RELEASE", "s", "PERMITS", 0),
            "ERR permits must be at least 1",
        ),
        (
            cmd!("RSEM.RELEASE", "s", "ID"),
            "ERR syntax error, ID needs at least one permit id",
        ),
        (
            cmd!("RSEM.RELEASE", "s", "ID", "zz112233445566778899aabbccddeeff"),
            "ERR permit id must be 32 hex characters",
        ),
        (
            cmd!("RSEM.RELEASE", "s", "ID", "00112233445566778899aabbccddeeff"),
            "NOPERMIT permit 00112233445566778899aabbccddeeff has already been released, has expired or does not exist",
        ),
        (
            cmd!("RSEM.TRYSETPERMITS", "s", -1),
            "ERR permits must be at least 0",
        ),
        (
            cmd!("RSEM.ADDPERMITS", "s", "x"),
            "ERR delta is not an integer or out of range",
        ),
        (
            cmd!("RSEM.ADDPERMITS", "s"),
            "ERR wrong number of arguments for 'rsem.addpermits' command",
        ),
        (
            cmd!("RSEM.AVAILABLE", "s", "x"),
            "ERR wrong number of arguments for 'rsem.available' command",
        ),
        (
            cmd!("RSEM.DRAIN"),
            "ERR wrong number of arguments for 'rsem.drain' command",
        ),
    ];
    for (command, want) in cases {
        assert_eq!(err(&mut c, &command), want, "{}", show(&command));
    }
    assert_eq!(dbsize(&mut c), 0, "no key was created");
}

#[test]
fn wrongtype_when_the_count_or_the_lease_set_is_not_a_semaphores() {
    let s = Server::start();
    let mut c = s.conn();
    let every = |key: &str| -> Vec<redis::Cmd> {
        vec![
            cmd!("RSEM.ACQUIRE", key),
            cmd!("RSEM.ACQUIRE", key, "LEASE", 100),
            cmd!("RSEM.RELEASE", key),
            cmd!(
                "RSEM.RELEASE",
                key,
                "ID",
                "00112233445566778899aabbccddeeff"
            ),
            cmd!("RSEM.TRYSETPERMITS", key, 1),
            cmd!("RSEM.ADDPERMITS", key, 1),
            cmd!("RSEM.AVAILABLE", key),
            cmd!("RSEM.DRAIN", key),
            cmd!("RSEM.INFO", key),
        ]
    };
    assert_eq!(int(&mut c, &cmd!("HSET", "h", "f", 1)), 1);
    assert_eq!(string(&mut c, &cmd!("SET", "str", "abc")), "OK");
    assert_eq!(string(&mut c, &cmd!("SET", "{z}:timeout", "x")), "OK");
    for key in ["h", "str", "z"] {
        for command in every(key) {
            let e = err(&mut c, &command);
            assert!(e.starts_with("WRONGTYPE"), "{}: {e}", show(&command));
        }
    }
    assert_eq!(dbsize(&mut c), 3, "nothing written, nothing deleted");
    assert_eq!(get(&mut c, "str").as_deref(), Some("abc"));

    // A queued waiter whose semaphore turns into another type ends with WRONGTYPE.
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "q", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("HSET", "q", "f", 1)), 1);
    let e = error_text(&w.reply()).expect("an error");
    assert!(e.starts_with("WRONGTYPE"), "{e}");
}

#[test]
fn info_counters_move() {
    let s = Server::start();
    let mut c = s.conn();
    let before = |c: &mut redis::Connection| -> Vec<i64> {
        [
            "acquired",
            "handoffs",
            "busy",
            "waits_started",
            "waits_timed_out",
            "releases",
            "waiters",
        ]
        .iter()
        .map(|f| sem_stat(c, f))
        .collect()
    };
    let b = before(&mut c);
    assert_eq!(b, vec![0; 7], "a fresh server");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s")), 1);
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s"));
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 10));
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(sem_stat(&mut c, "waiters"), 1);
    assert_eq!(
        rlock_stat(&mut c, "waiters"),
        1,
        "the total counts every kind"
    );
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s")), 0);
    assert_eq!(w.reply_int(), 1);
    // acquired: 1 at once + 1 by hand-off; busy: the nil without BLOCK; waits: 2 started, 1
    // timed out; 1 release.
    assert_eq!(before(&mut c), vec![2, 1, 1, 2, 1, 1, 0]);
}

#[test]
fn permits_granted_to_a_waiter_killed_before_its_reply_go_back_to_the_pool() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 0)), 1);
    let w1 = Pending::send(
        &s,
        &cmd!(
            "RSEM.ACQUIRE",
            "s",
            "PERMITS",
            2,
            "LEASE",
            30_000,
            "BLOCK",
            0
        ),
    );
    wait_blocked(&mut c, 1);
    let w2 = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 0));
    wait_blocked(&mut c, 2);
    let revoked = sem_stat(&mut c, "grants_revoked");
    // In one transaction: the release grants w1 its leased permits, then w1 is killed before
    // its reply can be written. Its permits go back, and on to w2.
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", w1.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    assert_eq!(
        w2.reply_int(),
        1,
        "the permits go on to the next live waiter"
    );
    assert!(
        !exists(&mut c, &timeouts("s")),
        "the gone waiter's leases were removed"
    );
    assert_eq!(get(&mut c, "s").as_deref(), Some("0"));
    assert_eq!(sem_stat(&mut c, "grants_revoked"), revoked + 1);
    drop(w1);
    // Plain permits, nobody behind: they end up available.
    let w3 = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 3, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 3)),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", w3.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    wait_until(
        Duration::from_millis(100),
        "the gone waiter's permits return",
        || available(&mut c, "s") == 3,
    );
}

/// `RSEM.RENEW` moves the lease ends of the permits still leased, for a user allowed only the
/// semaphore's commands and keys (no `EVAL`, which Redisson's `updateLeaseTime` needs).
#[test]
fn renew_moves_live_leases_for_a_user_allowed_only_rsem() {
    let s = Server::start();
    let mut admin = s.conn();
    let mut c = acl_user(
        &s,
        &mut admin,
        "jobs",
        &[
            "~jobs",
            "~{jobs}:*",
            "+rsem.trysetpermits",
            "+rsem.acquire",
            "+rsem.release",
            "+rsem.renew",
        ],
    );
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "jobs", 3)), 1);
    let leased = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "jobs", "PERMITS", 2, "LEASE", 1_000),
    ));
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RELEASE", "jobs", "ID", &leased[1])),
        2
    );
    let before = wall_ms();
    let unknown = "00000000000000000000000000000000";
    let renewed = int(
        &mut c,
        &cmd!(
            "RSEM.RENEW",
            "jobs",
            60_000,
            "ID",
            &leased[0],
            &leased[1],
            unknown
        ),
    );
    assert_eq!(renewed, 1, "only the permit still leased");
    let ends = leases(&mut admin, "jobs");
    assert_eq!(ends.len(), 1);
    assert_eq!(hex(&ends[0].0), leased[0]);
    assert_between("lease end", ends[0].1 - before, 59_000, 61_000);
    let e = err(&mut c, &cmd!("EVAL", "return 1", 0));
    assert!(e.starts_with("NOPERM"), "{e}");
}

#[test]
fn release_xx_and_setpermits_serve_redissons_release_if_exists_and_set_permits() {
    let s = Server::start();
    let mut admin = s.conn();
    // A user allowed only these RSEM commands (no EVAL) calls both: what Redisson's
    // releaseIfExists and setPermits do by script.
    let mut c = acl_user(
        &s,
        &mut admin,
        "u",
        &[
            "~pool",
            "~{pool}:*",
            "~absent",
            "~{absent}:*",
            "+rsem.release",
            "+rsem.setpermits",
            "+rsem.acquire",
        ],
    );
    let e = err(&mut c, &cmd!("EVAL", "return 1", 0));
    assert!(e.starts_with("NOPERM"), "{e}");
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");

    // XX: an absent semaphore is not created, nothing is published.
    nil(&mut c, &cmd!("RSEM.RELEASE", "absent", "PERMITS", 2, "XX"));
    assert_eq!(get(&mut admin, "absent"), None);
    assert!(sub.drain(&mut admin).is_empty());

    // SETPERMITS on an absent semaphore sets the count and publishes it.
    assert_eq!(int(&mut c, &cmd!("RSEM.SETPERMITS", "pool", 3)), 3);
    assert_eq!(get(&mut admin, "pool").as_deref(), Some("3"));
    assert_eq!(sub.drain(&mut admin), [(channel("pool"), "3".to_string())]);
    let leased = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "pool", "PERMITS", 2, "LEASE", 60_000),
    ));
    assert_eq!(leased.len(), 2);
    // Total 3 already (1 available, 2 leased): nothing written or published.
    assert_eq!(int(&mut c, &cmd!("RSEM.SETPERMITS", "pool", 3)), 1);
    assert!(sub.drain(&mut admin).is_empty());
    // Total 1 while 2 are leased: the count goes negative; Redisson reads the same total.
    assert_eq!(int(&mut c, &cmd!("RSEM.SETPERMITS", "pool", 1)), -1);
    assert_eq!(get(&mut admin, "pool").as_deref(), Some("-1"));
    assert_eq!(leases(&mut admin, "pool").len(), 2, "leases stay leased");
    sub.drain(&mut admin);

    // XX on a semaphore that exists: released and published, the count replied.
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RELEASE", "pool", "PERMITS", 3, "XX")),
        2
    );
    assert_eq!(sub.drain(&mut admin), [(channel("pool"), "2".to_string())]);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "pool", "XX")), 3);

    // A waiter gets what a SETPERMITS adds, in the same step.
    assert_eq!(int(&mut c, &cmd!("RSEM.SETPERMITS", "pool", 2)), 0);
    let waiter = {
        let mut w = s.conn();
        std::thread::spawn(move || int(&mut w, &cmd!("RSEM.ACQUIRE", "pool", "BLOCK", 5_000)))
    };
    wait_until(margin(Duration::from_secs(5)), "the waiter queued", || {
        field(&info(&mut admin, "pool"), "waiters") == Value::Int(1)
    });
    assert_eq!(
        int(&mut c, &cmd!("RSEM.SETPERMITS", "pool", 3)),
        0,
        "taken by the waiter"
    );
    assert_eq!(waiter.join().unwrap(), 1);

    // Errors: arity, a non-integer total, a key of another type.
    assert!(err(&mut admin, &cmd!("RSEM.SETPERMITS", "pool")).contains("wrong number of arguments"));
    assert!(err(&mut admin, &cmd!("RSEM.SETPERMITS", "pool", "x")).starts_with("ERR"));
    assert_eq!(string(&mut admin, &cmd!("SET", "str", "v")), "OK");
    assert!(err(&mut admin, &cmd!("RSEM.SETPERMITS", "str", 1)).starts_with("WRONGTYPE"));
    assert!(err(&mut admin, &cmd!("RSEM.RELEASE", "str", "XX")).starts_with("WRONGTYPE"));
}

#[test]
fn leasetime_tells_the_ms_left_and_needs_the_lease_sets_read_right() {
    let s = Server::start();
    let mut admin = s.conn();
    assert_eq!(int(&mut admin, &cmd!("RSEM.TRYSETPERMITS", "jobs", 3)), 1);
    let leased = ids(&raw(
        &mut admin,
        &cmd!("RSEM.ACQUIRE", "jobs", "LEASE", 60_000),
    ));
    let endless = ids(&raw(&mut admin, &cmd!("RSEM.ACQUIRE", "jobs", "NOLEASE")));
    let short = ids(&raw(&mut admin, &cmd!("RSEM.ACQUIRE", "jobs", "LEASE", 50)));
    let left = int(&mut admin, &cmd!("RSEM.LEASETIME", "jobs", &leased[0]));
    assert!((59_000..=60_000).contains(&left), "{left}");
    assert_eq!(
        int(&mut admin, &cmd!("RSEM.LEASETIME", "jobs", &endless[0])),
        -1
    );
    let unknown = "00000000000000000000000000000000";
    nil(&mut admin, &cmd!("RSEM.LEASETIME", "jobs", unknown));
    nil(&mut admin, &cmd!("RSEM.LEASETIME", "absent", unknown));
    wait_until(
        margin(Duration::from_secs(2)),
        "the short lease ended",
        || raw(&mut admin, &cmd!("RSEM.LEASETIME", "jobs", &short[0])) == Value::Nil,
    );
    assert_eq!(
        err(&mut admin, &cmd!("RSEM.LEASETIME", "jobs", "zz")),
        "ERR permit id must be 32 hex characters"
    );
    // A user who may read the count but not the lease set learns nothing of the lease.
    let mut u = acl_user(&s, &mut admin, "u", &["~jobs", "+rsem.leasetime"]);
    let e = err(&mut u, &cmd!("RSEM.LEASETIME", "jobs", &leased[0]));
    assert!(
        e.starts_with("NOPERM") && e.contains("{jobs}:timeout"),
        "{e}"
    );
    let mut v = acl_user(
        &s,
        &mut admin,
        "v",
        &["~jobs", "~{jobs}:*", "+rsem.leasetime"],
    );
    assert_eq!(
        int(&mut v, &cmd!("RSEM.LEASETIME", "jobs", &endless[0])),
        -1
    );
}

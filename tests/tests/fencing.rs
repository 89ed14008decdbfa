//! FENCE: tokens from `redisson_lock_token:{key}` (Redisson RFencedLock layout) strictly increase
//! across acquires, re-entries, releases and hand-offs; nothing else touches the token key.

use rlock_tests::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Wait (a millisecond or two) until the clock passed the millisecond of `token`: a failover
/// takes far longer (see `core/fencing.rs`).
fn clock_past(token: i64) {
    wait_until(
        Duration::from_secs(1),
        "the clock passes the token's ms",
        || unix_ms() > token / 1_000,
    );
}

fn token(c: &mut redis::Connection, key: &str) -> Option<i64> {
    match raw(c, &cmd!("GET", token_key(key))) {
        Value::Nil => None,
        v => Some(
            text(&v)
                .expect("token is a string")
                .parse()
                .expect("token is an integer"),
        ),
    }
}

#[test]
fn tokens_strictly_increase_across_acquires_reentries_releases_and_hand_offs() {
    let s = Server::start();
    let mut c = s.conn();
    let mut seen = Vec::new();
    let mut fence = |c: &mut redis::Connection, owner: &str| {
        let t = int(c, &cmd!("RLOCK.ACQUIRE", "lk", owner, 10_000, "FENCE"));
        assert_eq!(
            token(c, "lk"),
            Some(t),
            "the reply is the token key's new value"
        );
        seen.push(t);
        t
    };
    fence(&mut c, "o1"); // acquire
    fence(&mut c, "o1"); // re-entry
    assert_eq!(
        hgetall(&mut c, "lk"),
        holder("o1", 2),
        "with FENCE the count still goes up"
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
    fence(&mut c, "o2"); // after a full release
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    fence(&mut c, "o3"); // after a force release

    // Hand-off to a FENCE waiter: its reply is the next token.
    let w = park(&s, &mut c, "lk", "w", 10_000, &["FENCE"], 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o3")), 0);
    let tw = w.reply_int();
    assert_eq!(token(&mut c, "lk"), Some(tw));
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
    seen.push(tw);

    // After DEL of the lock hash, the counter lives on.
    assert_eq!(int(&mut c, &cmd!("DEL", "lk")), 1);
    seen.push(int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "lk", "o4", 10_000, "FENCE"),
    ));

    assert!(
        seen.windows(2).all(|p| p[0] < p[1]),
        "tokens must strictly increase: {seen:?}"
    );
    assert_eq!(lock_info(&mut c, "lk").token, seen.last().copied());
}

#[test]
fn acquires_without_fence_and_failed_acquires_do_not_touch_the_token() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)),
        2,
        "hold count, not a token"
    );
    assert_eq!(
        token(&mut c, "lk"),
        None,
        "acquires without FENCE create no token key"
    );
    assert_eq!(dbsize(&mut c), 1);

    // A failed FENCE attempt, non-blocking and timed out.
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000, "FENCE"));
    let w = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000, "BLOCK", 20, "FENCE"),
    );
    assert_eq!(w.reply(), Value::Nil);
    assert_eq!(token(&mut c, "lk"), None, "failed acquires do not INCR");

    let t = int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE"));
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 3));
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 4);
    assert_eq!(
        token(&mut c, "lk"),
        Some(t),
        "a later plain re-entry leaves the token alone"
    );
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000, "FENCE"));
    assert_eq!(token(&mut c, "lk"), Some(t));
}

#[test]
fn token_continues_an_existing_counter_and_follows_the_naming_rule() {
    let s = Server::start();
    let mut c = s.conn();
    // A counter left by an earlier Redisson RFencedLock, behind the clock term: the token is
    // the clock term (unix ms × 1,000), and the counter holds it.
    assert_eq!(
        string(&mut c, &cmd!("SET", "redisson_lock_token:{lk}", 41)),
        "OK"
    );
    let before = unix_ms() * 1_000;
    let t = int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE"));
    let after = unix_ms() * 1_000;
    assert!((before..=after).contains(&t), "{before} <= {t} <= {after}");
    assert_eq!(
        string(&mut c, &cmd!("GET", "redisson_lock_token:{lk}")),
        t.to_string()
    );
    // A counter ahead of the clock term goes on by one.
    let ahead = after + 1_000_000_000;
    assert_eq!(
        string(&mut c, &cmd!("SET", "redisson_lock_token:{lk}", ahead)),
        "OK"
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE")),
        ahead + 1
    );

    let t = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "{app}:x", "o1", 10_000, "FENCE"),
    );
    assert_eq!(
        string(&mut c, &cmd!("GET", "redisson_lock_token:{app}:x")),
        t.to_string()
    );
    assert!(!exists(&mut c, "redisson_lock_token:{{app}:x}"));
}

#[test]
fn a_fence_waiter_granted_on_lease_expiry_gets_the_next_token() {
    let s = Server::start();
    let mut c = s.conn();
    let t1 = int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 100, "FENCE"));
    let w = park(&s, &mut c, "lk", "w", 5_000, &["FENCE"], 1);
    let t2 = w.reply_int();
    assert!(t2 > t1, "{t2} after {t1}");
    assert_eq!(token(&mut c, "lk"), Some(t2));
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn an_unusable_token_key_fails_the_fence_acquire_without_writing() {
    let s = Server::start();
    let mut c = s.conn();
    for (setup, token_value) in [
        (cmd!("SET", token_key("lk"), "abc"), "abc"),
        (
            cmd!("SET", token_key("lk"), "9223372036854775807"),
            "9223372036854775807",
        ),
    ] {
        assert_eq!(string(&mut c, &setup), "OK");
        let e = err(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE"));
        assert!(e.starts_with("ERR"), "{e}");
        assert!(
            !exists(&mut c, "lk"),
            "no lock written when the token cannot be issued"
        );
        assert_eq!(string(&mut c, &cmd!("GET", token_key("lk"))), token_value);
    }
    assert_eq!(int(&mut c, &cmd!("DEL", token_key("lk"))), 1);
    assert_eq!(int(&mut c, &cmd!("RPUSH", token_key("lk"), "x")), 1);
    let e = err(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE"));
    assert!(e.starts_with("WRONGTYPE") || e.starts_with("ERR"), "{e}");
    assert!(!exists(&mut c, "lk"));

    // A re-entry with FENCE fails the same way and keeps the count.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert!(!err(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE")).is_empty());
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 1));
}

#[test]
fn a_fence_waiter_whose_token_cannot_be_issued_is_skipped_for_the_next() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 10_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 5_000, &["FENCE"], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 5_000, &[], 2);
    assert_eq!(string(&mut c, &cmd!("SET", token_key("lk"), "abc")), "OK");
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    let r1 = w1.reply();
    assert_eq!(
        error_text(&r1).as_deref(),
        Some("ERR fencing token is not an integer or out of range"),
        "w1 cannot get a token: {r1:?}"
    );
    assert_eq!(w2.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
}

/// A replica promoted while its old primary goes on granting (asynchronous replication lost the
/// last writes of the counter, or a split brain): its first token is larger than every token
/// the old primary handed out, though its counter never saw them; and tokens replicate exactly.
#[test]
fn a_promoted_replica_never_repeats_a_token_its_counter_lost() {
    let primary = Server::start();
    let replica = Server::with(ServerOptions {
        replica_of: Some(primary.port),
        ..Default::default()
    });
    let (mut p, mut r) = (primary.conn(), replica.conn());
    wait_until(Duration::from_secs(10), "replica link up", || {
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
    });
    let fence = |c: &mut redis::Connection, owner: &str| {
        let t = int(c, &cmd!("RLOCK.ACQUIRE", "lk", owner, 60_000, "FENCE"));
        assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "lk", owner)), 0);
        t
    };
    let t1 = fence(&mut p, "a");
    assert!(wait_replicas(&mut p, 1) >= 1);
    assert_eq!(
        token(&mut r, "lk"),
        Some(t1),
        "the replica holds the same counter"
    );
    // The replica is promoted; the old primary, not told, hands out more tokens.
    assert_eq!(string(&mut r, &cmd!("REPLICAOF", "NO", "ONE")), "OK");
    let mut lost = vec![];
    for i in 0..20 {
        lost.push(fence(&mut p, &format!("old{i}")));
    }
    assert_eq!(
        token(&mut r, "lk"),
        Some(t1),
        "the new primary never saw them"
    );
    clock_past(*lost.last().unwrap());
    let t2 = fence(&mut r, "b");
    assert!(
        lost.iter().all(|&t| t < t2),
        "the new primary's token {t2} repeats or goes below {lost:?}"
    );
    // The counter lost again (deleted), on one node: still no repeat.
    assert_eq!(int(&mut r, &cmd!("DEL", token_key("lk"))), 1);
    clock_past(t2);
    assert!(fence(&mut r, "c") > t2);
    // Redisson's own script goes on from the counter by one.
    let t3 = token(&mut r, "lk").unwrap();
    assert_eq!(
        int(
            &mut r,
            &cmd!(
                "EVAL",
                "return redis.call('incr', KEYS[1])",
                1,
                token_key("lk")
            )
        ),
        t3 + 1
    );
}

//! FENCE: tokens from `redisson_lock_token:{key}` (Redisson RFencedLock layout) strictly increase
//! across acquires, re-entries, releases and hand-offs; nothing else touches the token key.

use rlock_tests::*;

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
    // A counter left by an earlier Redisson RFencedLock.
    assert_eq!(
        string(&mut c, &cmd!("SET", "redisson_lock_token:{lk}", 41)),
        "OK"
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "FENCE")),
        42
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

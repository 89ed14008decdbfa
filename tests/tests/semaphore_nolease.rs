//! `RSEM.ACQUIRE ... NOLEASE` against a real server: permits with ids and no end, scored
//! exactly as Redisson scores its permits without a lease (`nonExpirableTimeout`), so a Java
//! service and rlock see one thing; taken at once, after `BLOCK` and through a session's
//! `QUEUE`; never returned by time; released by id from either side; given a lease by
//! `RSEM.RENEW` as Redisson's `updateLeaseTime` gives one; refused with `LEASE`; in `COMMAND
//! DOCS`.

use rlock_tests::redisson::semaphore::{self as rs, hex, timeouts, unhex, PERMANENT};
use rlock_tests::*;
use std::time::Duration;

/// The ids of an acquire's reply.
fn ids(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(|i| text(i).expect("an id")).collect(),
        other => panic!("expected permit ids, got {other:?}"),
    }
}

/// A permit's score in `{key}:timeout`, as the server writes it (exact digits).
fn score(c: &mut redis::Connection, key: &str, id: &str) -> Option<String> {
    match raw(c, &cmd!("ZSCORE", timeouts(key), unhex(id))) {
        Value::Nil => None,
        v => text(&v),
    }
}

fn count(c: &mut redis::Connection, key: &str) -> String {
    string(c, &cmd!("GET", key))
}

/// A field of `RSEM.INFO`.
fn info_field(c: &mut redis::Connection, key: &str, name: &str) -> Value {
    let Value::Array(items) = raw(c, &cmd!("RSEM.INFO", key)) else {
        panic!("RSEM.INFO")
    };
    map_field(&items, name)
        .unwrap_or_else(|| panic!("no {name}"))
        .clone()
}

#[test]
fn nolease_permits_are_scored_as_redissons_never_end_and_release_by_id_from_either_side() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 4)), 1);
    let mine = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "NOLEASE"),
    ));
    assert_eq!(mine.len(), 2);
    let (r, java) = rs::lease(&mut c, "s", 1, None);
    assert_eq!(text(&r).as_deref(), Some("OK"));
    // One score for both sides' permits without an end: Redisson's, digit for digit.
    for id in mine.iter().chain([&hex(&java[0])]) {
        assert_eq!(score(&mut c, "s", id), Some(PERMANENT.to_string()), "{id}");
        assert_eq!(
            rs::lease_time(&mut c, "s", &unhex(id)),
            -1,
            "Redisson: no end"
        );
    }
    assert_eq!(count(&mut c, "s"), "1");
    let Value::Array(leased) = info_field(&mut c, "s", "leased") else {
        panic!()
    };
    assert_eq!(leased.len(), 3);
    for l in &leased {
        let Value::Array(pair) = l else { panic!() };
        assert_eq!(pair[1], Value::Int(-1), "{leased:?}");
    }
    // Time does not end them: a waiter for 2 is not served by a timer, and times out.
    let started = std::time::Instant::now();
    nil(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 200),
    );
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", "s")), 1);
    assert_eq!(
        strings(&raw(&mut c, &cmd!("ZRANGE", timeouts("s"), 0, -1))).len(),
        3
    );
    // rlock releases Redisson's, Redisson's script releases rlock's.
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", hex(&java[0]))),
        2
    );
    assert_eq!(rs::try_release(&mut c, "s", &unhex(&mine[0])), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &mine[1])), 4);
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &mine[1]));
    assert!(e.starts_with("NOPERMIT"), "released once: {e}");
    assert_eq!(raw(&mut c, &cmd!("EXISTS", timeouts("s"))), Value::Int(0));
}

#[test]
fn nolease_waiters_are_served_blocked_and_through_a_session() {
    let s = Server::start();
    let mut c = s.conn();
    let mut listener = s.conn();
    raw(&mut listener, &cmd!("RSESSION.OPEN", "app", 5000));
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    let first = ids(&raw(&mut c, &cmd!("RSEM.ACQUIRE", "s", "NOLEASE")))[0].clone();
    let blocked = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "NOLEASE", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(
        raw(
            &mut c,
            &cmd!(
                "RSEM.ACQUIRE",
                "s",
                "NOLEASE",
                "SESSION",
                "app",
                "QUEUE",
                7,
                0
            )
        ),
        Value::SimpleString("QUEUED".into())
    );
    // Queued requests show -1 for "no lease", as a leased permit without an end does.
    let queue = info_field(&mut c, "s", "queue");
    let no_lease = Value::Array(vec![Value::Int(1), Value::Int(-1)]);
    assert_eq!(queue, Value::Array(vec![no_lease.clone(), no_lease]));
    // Released by id: the blocked waiter takes it in the same step (the reply counts after).
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &first)), 0);
    let second = ids(&blocked.reply())[0].clone();
    assert_ne!(second, first);
    assert_eq!(score(&mut c, "s", &second), Some(PERMANENT.to_string()));
    // Redisson's script releases it: the session's request is granted a permit without an end.
    assert_eq!(rs::try_release(&mut c, "s", &unhex(&second)), 1);
    let read = raw(
        &mut listener,
        &cmd!("RSESSION.READ", "app", 0, "BLOCK", margin_ms(5000)),
    );
    let Value::Array(outcomes) = read else {
        panic!("{read:?}")
    };
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    let Value::Array(o) = &outcomes[0] else {
        panic!()
    };
    assert_eq!(
        (text(&o[1]).as_deref(), &o[2]),
        (Some("granted"), &Value::Int(7))
    );
    let third = ids(&o[4])[0].clone();
    assert_eq!(score(&mut c, "s", &third), Some(PERMANENT.to_string()));
    assert_eq!(count(&mut c, "s"), "0");
}

#[test]
fn renew_gives_a_nolease_permit_a_lease_as_redissons_update_lease_time() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 2)), 1);
    let got = ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "NOLEASE"),
    ));
    let before = rs::now_ms();
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RENEW", "s", 300, "ID", &got[0])),
        1,
        "a permit without an end counts as leased"
    );
    assert_eq!(rs::update_lease(&mut c, "s", &unhex(&got[1]), 60_000), 1);
    let ends: Vec<i64> = got
        .iter()
        .map(|id| score(&mut c, "s", id).unwrap().parse().unwrap())
        .collect();
    // Each ends its lease after a renewal that came after `before`.
    let late = margin_ms(700);
    assert_between("renewed by RSEM.RENEW", ends[0] - before, 299, 300 + late);
    assert_between(
        "renewed by Redisson",
        ends[1] - before,
        59_999,
        60_000 + late,
    );
    // The lease RSEM.RENEW gave it ends, and a waiter gets the permit from the timer.
    let waiter = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", margin_ms(5000)));
    assert_eq!(waiter.reply_int(), 1);
    assert!(rs::now_ms() >= ends[0], "not before the lease's end");
    assert_eq!(score(&mut c, "s", &got[0]), None);
}

#[test]
fn nolease_with_lease_is_an_error_and_needs_the_lease_set() {
    let s = Server::start();
    let mut admin = s.conn();
    assert_eq!(int(&mut admin, &cmd!("RSEM.TRYSETPERMITS", "s", 1)), 1);
    for c in [
        cmd!("RSEM.ACQUIRE", "s", "NOLEASE", "LEASE", 5),
        cmd!("RSEM.ACQUIRE", "s", "LEASE", 5, "NOLEASE"),
    ] {
        assert_eq!(
            err(&mut admin, &c),
            "ERR syntax error, LEASE and NOLEASE exclude each other"
        );
    }
    assert_eq!(
        err(&mut admin, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 0)),
        "ERR lease_ms must be at least 1"
    );
    // Its ids go to `{s}:timeout`: a user who may write only the count is refused.
    let mut u = acl_user(&s, &mut admin, "u", &["~s", "+rsem.acquire"]);
    let e = err(&mut u, &cmd!("RSEM.ACQUIRE", "s", "NOLEASE"));
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(count(&mut admin, "s"), "1", "nothing taken");
    assert_eq!(int(&mut u, &cmd!("RSEM.ACQUIRE", "s")), 1, "plain permits");
}

#[test]
fn command_docs_show_lease_and_nolease_as_one_choice() {
    let s = Server::start();
    let mut c = s.conn();
    let docs = command_docs(&mut c, "rsem.acquire");
    let Some(Value::Array(args)) = map_field(&docs, "arguments") else {
        panic!("{docs:?}")
    };
    let lease = args
        .iter()
        .filter_map(|a| match a {
            Value::Array(f) => Some(f),
            _ => None,
        })
        .find(|f| map_field(f, "name").and_then(text).as_deref() == Some("lease"))
        .expect("a lease argument");
    assert_eq!(
        map_field(lease, "type").and_then(text).as_deref(),
        Some("oneof")
    );
    let Some(Value::Array(choices)) = map_field(lease, "arguments") else {
        panic!("{lease:?}")
    };
    let tokens: Vec<String> = choices
        .iter()
        .map(|ch| {
            let Value::Array(f) = ch else { panic!() };
            map_field(f, "token").and_then(text).expect("a token")
        })
        .collect();
    assert_eq!(tokens, ["LEASE", "NOLEASE"]);
}

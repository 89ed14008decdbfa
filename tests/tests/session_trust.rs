//! Sessions you can trust (issue 21): a session belongs to the ACL user who opened it, its ACL
//! categories say what each command does, ending it undoes exactly what its user never
//! received, its outcomes are bounded in memory, and the client never takes an outcome for
//! another wait as a grant. Each test is an attack or a reproduction that succeeded against
//! the module before.

mod client_support;

use std::collections::BTreeSet;
use std::time::Duration;

use rlock_tests::*;

/// The outcomes of `RSESSION.READ`, each as its fields.
fn read(c: &mut redis::Connection, session: &str, cursor: i64) -> Vec<Vec<Value>> {
    match raw(c, &cmd!("RSESSION.READ", session, cursor)) {
        Value::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Value::Array(f) => f,
                other => panic!("outcome: {other:?}"),
            })
            .collect(),
        other => panic!("RSESSION.READ {session}: {other:?}"),
    }
}

/// A field of a flat (RESP2) map reply.
fn field(v: &Value, name: &str) -> Value {
    let Value::Array(f) = v else { panic!("{v:?}") };
    f.chunks(2)
        .find(|p| text(&p[0]).as_deref() == Some(name))
        .map(|p| p[1].clone())
        .unwrap_or_else(|| panic!("no {name} in {v:?}"))
}

fn word(v: &Value) -> String {
    text(v).unwrap_or_else(|| panic!("not text: {v:?}"))
}

fn names(v: Value) -> BTreeSet<String> {
    match v {
        Value::Array(items) => items.iter().map(word).collect(),
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Ownership
// ---------------------------------------------------------------------------------------------

#[test]
fn another_user_can_neither_see_nor_touch_a_session() {
    let s = Server::start();
    let mut admin = s.conn();
    // Both users may run every command on their own keys: only the session stands between them.
    let mut bob = acl_user(&s, &mut admin, "bob", &["+@all", "-acl", "~b:*"]);
    let mut alice = acl_user(&s, &mut admin, "alice", &["+@all", "-acl", "~a:*"]);

    assert_eq!(
        int(&mut bob, &cmd!("RLOCK.ACQUIRE", "b:x", "holder", 60_000)),
        1
    );
    raw(&mut bob, &cmd!("RSESSION.OPEN", "bobsess", 60_000));
    let q = cmd!(
        "RLOCK.ACQUIRE",
        "b:x",
        "bob:1",
        60_000,
        "SESSION",
        "bobsess",
        "QUEUE",
        7,
        0
    );
    assert_eq!(raw(&mut bob, &q), Value::SimpleString("QUEUED".into()));

    // Alice sees none of it.
    assert_eq!(
        names(raw(&mut alice, &cmd!("RSESSION.LIST"))),
        BTreeSet::new()
    );
    let refused = [
        cmd!("RSESSION.INFO", "bobsess"),
        cmd!("RSESSION.READ", "bobsess", 0),
        cmd!("RSESSION.READ", "bobsess", 1),
        cmd!("RSESSION.ACK", "bobsess", 1),
        cmd!("RSESSION.CANCEL", "bobsess", 7),
        cmd!("RSESSION.OPEN", "bobsess", 0),
        cmd!("RSESSION.CLOSE", "bobsess"),
        cmd!(
            "RLOCK.ACQUIRE",
            "a:1",
            "alice:1",
            30_000,
            "SESSION",
            "bobsess",
            "QUEUE",
            7,
            0
        ),
        cmd!(
            "RLOCK.ACQUIRE",
            "a:2",
            "alice:1",
            30_000,
            "SESSION",
            "bobsess"
        ),
        cmd!(
            "RRWLOCK.ACQUIRE",
            "a:3",
            "alice:1",
            "READ",
            30_000,
            "SESSION",
            "bobsess"
        ),
        cmd!("RSEM.ACQUIRE", "a:4", "SESSION", "bobsess", "QUEUE", 8, 0),
        cmd!("RLATCH.AWAIT", "a:5", "SESSION", "bobsess", "QUEUE", 9, 0),
    ];
    for c in &refused {
        let e = err(&mut alice, c);
        assert_eq!(
            e,
            "NOPERM session 'bobsess' belongs to another user",
            "{}",
            show(c)
        );
        assert!(
            !e.contains("bob\u{0}") && !e.contains(" bob "),
            "the owner is not named"
        );
    }
    // Nothing of alice's was written or queued through bob's session.
    for k in ["a:1", "a:2", "a:3", "a:4", "a:5"] {
        assert!(!exists(&mut admin, k), "{k}");
    }

    // Bob's session is as he left it: his request waits, and its grant reaches him.
    let info = raw(&mut bob, &cmd!("RSESSION.INFO", "bobsess"));
    assert_eq!(
        (field(&info, "queued"), field(&info, "pending")),
        (Value::Int(1), Value::Int(0))
    );
    assert_eq!(int(&mut bob, &cmd!("RLOCK.RELEASE", "b:x", "holder")), 0);
    let got = read(&mut bob, "bobsess", 0);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (
            word(&got[0][1]),
            &got[0][2],
            word(&got[0][3]),
            word(&got[0][5])
        ),
        (
            "granted".into(),
            &Value::Int(7),
            "b:x".into(),
            "lock".into()
        )
    );

    // An administrator sees every session but may not use another's.
    assert_eq!(
        names(raw(&mut admin, &cmd!("RSESSION.LIST"))),
        BTreeSet::from(["bobsess".to_string()])
    );
    assert!(error_text(&raw(&mut admin, &cmd!("RSESSION.INFO", "bobsess"))).is_none());
    // (The default user owns nothing of bob's either.)
    assert!(err(&mut admin, &cmd!("RSESSION.CLOSE", "bobsess")).starts_with("NOPERM"));

    // Alice's own session of the same name space is hers alone, and bob cannot touch it.
    raw(&mut alice, &cmd!("RSESSION.OPEN", "alicesess", 60_000));
    assert_eq!(
        names(raw(&mut alice, &cmd!("RSESSION.LIST"))),
        BTreeSet::from(["alicesess".to_string()])
    );
    assert!(err(&mut bob, &cmd!("RSESSION.READ", "alicesess", 0)).starts_with("NOPERM"));
    assert_eq!(int(&mut alice, &cmd!("RSESSION.CLOSE", "alicesess")), 1);
    assert_eq!(int(&mut bob, &cmd!("RSESSION.CLOSE", "bobsess")), 1);
}

#[test]
fn a_request_id_in_use_is_refused_and_outcomes_name_their_object() {
    let s = Server::start();
    let mut c = s.conn();
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    for k in ["l", "rw"] {
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", k, "h", 60_000)), 1);
    }
    let q = |key: &str, req: i64| {
        cmd!(
            "RLOCK.ACQUIRE",
            key,
            "w",
            60_000,
            "SESSION",
            "app",
            "QUEUE",
            req,
            0
        )
    };
    assert_eq!(
        raw(&mut c, &q("l", 1)),
        Value::SimpleString("QUEUED".into())
    );
    let e = err(&mut c, &q("l", 1));
    assert_eq!(e, "ERR request id is already queued in this session");
    // Each kind of object names itself in its outcomes.
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 0)), 1);
    let sq = cmd!("RSEM.ACQUIRE", "sem", "SESSION", "app", "QUEUE", 2, 0);
    assert_eq!(raw(&mut c, &sq), Value::SimpleString("QUEUED".into()));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "l", "h")), 0);
    raw(&mut c, &cmd!("RSEM.RELEASE", "sem"));
    let got = read(&mut c, "app", 0);
    let seen: Vec<(String, String)> = got.iter().map(|o| (word(&o[3]), word(&o[5]))).collect();
    assert_eq!(
        seen,
        [
            ("l".into(), "lock".into()),
            ("sem".into(), "semaphore".into())
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// ACL categories
// ---------------------------------------------------------------------------------------------

/// `(command, categories)` rows of docs/operations.md's table of ACL categories.
fn documented_categories() -> Vec<(String, BTreeSet<String>)> {
    let path = workspace_root().join("docs/operations.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let rows: Vec<(String, BTreeSet<String>)> = doc
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let [_, cmd, cats, _] = cells[..] else {
                return None;
            };
            let cmd = cmd.strip_prefix('`')?.strip_suffix('`')?;
            if !cmd.starts_with('R') || !cmd.contains('.') || !cats.starts_with("`@") {
                return None;
            }
            let cats = cats
                .split_whitespace()
                .map(|c| c.trim_matches('`').trim_start_matches('@').to_string())
                .collect();
            Some((cmd.to_lowercase(), cats))
        })
        .collect();
    assert!(
        rows.len() >= 20,
        "the table in {}: {rows:?}",
        path.display()
    );
    rows
}

#[test]
fn every_commands_acl_categories_are_the_documented_ones() {
    let s = Server::start();
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    let listed: BTreeSet<String> = match raw(
        &mut c,
        &cmd!("COMMAND", "LIST", "FILTERBY", "MODULE", "rlock"),
    ) {
        Value::Array(v) => v.iter().map(word).collect(),
        other => panic!("{other:?}"),
    };
    let documented = documented_categories();
    assert_eq!(
        documented
            .iter()
            .map(|(c, _)| c.clone())
            .collect::<BTreeSet<_>>(),
        listed,
        "the table lists every command of the module"
    );
    for (name, want) in documented {
        let info = raw(&mut c, &cmd!("COMMAND", "INFO", &name));
        let Value::Array(outer) = info else {
            panic!("{info:?}")
        };
        let Value::Array(fields) = &outer[0] else {
            panic!("{outer:?}")
        };
        let got: BTreeSet<String> = match &fields[6] {
            Value::Array(v) => v
                .iter()
                .map(|c| word(c).trim_start_matches('@').to_string())
                .filter(|c| c != "rlock")
                .collect(),
            Value::Set(v) => v
                .iter()
                .map(|c| word(c).trim_start_matches('@').to_string())
                .filter(|c| c != "rlock")
                .collect(),
            other => panic!("{name}: {other:?}"),
        };
        // The `fast` flag (docs/commands.md's "Flags") and @fast say the same, on every server.
        let flags: BTreeSet<String> = match &fields[2] {
            Value::Array(v) | Value::Set(v) => v.iter().map(word).collect(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(
            flags.contains("fast"),
            want.contains("fast"),
            "{name}: flags {flags:?}, documented categories {want:?}"
        );
        if kind.acl_categories() {
            assert_eq!(got, want, "{name} on {kind:?}");
        } else {
            assert!(
                got.is_empty(),
                "{name}: Redis 7.0 has no categories for modules"
            );
        }
    }
}

#[test]
fn a_user_without_write_cannot_change_anyones_session() {
    let s = Server::start();
    let mut admin = s.conn();
    if !ServerKind::of(&mut admin).acl_categories() {
        return; // Redis 7.0: no categories for module commands (the test above checks that)
    }
    let mut bob = acl_user(&s, &mut admin, "bob", &["+@all", "~*"]);
    // (Not an administrator either: one may see every session, below.)
    let mut ro = acl_user(&s, &mut admin, "ro", &["+@all", "-@write", "-@admin", "~*"]);
    raw(&mut bob, &cmd!("RSESSION.OPEN", "bobsess", 60_000));
    for c in [
        cmd!("RSESSION.OPEN", "mine", 1000),
        cmd!("RSESSION.CLOSE", "bobsess"),
        cmd!("RSESSION.ACK", "bobsess", 1),
        cmd!("RSESSION.CANCEL", "bobsess", 1),
    ] {
        let e = err(&mut ro, &c);
        assert!(e.starts_with("NOPERM"), "{}: {e}", show(&c));
    }
    // Looking is allowed: her own list is empty, bob's session is not hers to read.
    assert_eq!(names(raw(&mut ro, &cmd!("RSESSION.LIST"))), BTreeSet::new());
    assert!(err(&mut ro, &cmd!("RSESSION.READ", "bobsess", 0)).starts_with("NOPERM session"));
    assert_eq!(int(&mut bob, &cmd!("RSESSION.CLOSE", "bobsess")), 1);
}

// ---------------------------------------------------------------------------------------------
// Exact undo
// ---------------------------------------------------------------------------------------------

#[test]
fn ending_a_session_never_creates_a_permit() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 0)), 1);
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    let q = cmd!("RSEM.ACQUIRE", "sem", "SESSION", "app", "QUEUE", 1, 0);
    assert_eq!(raw(&mut c, &q), Value::SimpleString("QUEUED".into()));
    raw(&mut c, &cmd!("RSEM.RELEASE", "sem")); // granted to request 1
    assert_eq!(read(&mut c, "app", 0).len(), 1, "read, not acknowledged");
    raw(&mut c, &cmd!("RSEM.RELEASE", "sem")); // the permit used, given back
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(
        int(&mut c, &cmd!("RSEM.AVAILABLE", "sem")),
        1,
        "one permit was ever added"
    );
    assert_eq!(rlock_stat(&mut c, "sem_grants_revoked"), 0);
}

#[test]
fn ending_a_session_never_frees_a_hold_taken_anew() {
    let s = Server::start();
    let mut c = s.conn();
    let mut other = s.conn();
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    // A lock and the read side of a read-write lock, each granted through the session and read.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "L", "h", 60_000)), 1);
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.ACQUIRE", "RW", "h", "WRITE", 60_000)),
        1
    );
    let ql = cmd!(
        "RLOCK.ACQUIRE",
        "L",
        "w1",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        1,
        0
    );
    let qr = cmd!(
        "RRWLOCK.ACQUIRE",
        "RW",
        "w1",
        "READ",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        2,
        0
    );
    for q in [&ql, &qr] {
        assert_eq!(raw(&mut c, q), Value::SimpleString("QUEUED".into()));
    }
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L", "h")), 0);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "RW", "h", "WRITE")), 0);
    assert_eq!(read(&mut c, "app", 0).len(), 2, "both grants read");
    // w1 lets go, takes each again (hold count 1, as the grant's), and others wait behind.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L", "w1")), 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "L", "w1", 60_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "RW", "w1", "READ")), 0);
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.ACQUIRE", "RW", "w1", "READ", 60_000)),
        1
    );
    let wl = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "L", "w2", 60_000, "BLOCK", 0));
    let ww = Pending::send(
        &s,
        &cmd!("RRWLOCK.ACQUIRE", "RW", "w2", "WRITE", 60_000, "BLOCK", 0),
    );
    wait_until(Duration::from_secs(5), "two waiters", || {
        rlock_stat(&mut other, "waiters") == 2
    });
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    // The session's end leaves w1's holds alone. An undo would run on the next timer turn,
    // within milliseconds (the test below sees one hand the lock on): 200 ms shows there is none.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(hgetall(&mut other, "L"), holder("w1", 1));
    assert_eq!(
        hgetall(&mut other, "RW").get("w1").map(String::as_str),
        Some("1")
    );
    assert_eq!(rlock_stat(&mut other, "grants_revoked"), 0);
    assert_eq!(rlock_stat(&mut other, "rwlock_grants_revoked"), 0);
    assert_eq!(
        rlock_stat(&mut other, "waiters"),
        2,
        "w2 still waits for both"
    );
    // w1's own releases hand both on.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L", "w1")), 0);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "RW", "w1", "READ")), 0);
    assert_eq!(wl.reply_within(Duration::from_secs(5)), Value::Int(1));
    assert_eq!(ww.reply_within(Duration::from_secs(5)), Value::Int(1));
}

#[test]
fn a_grant_no_read_returned_is_undone_when_the_session_ends() {
    let s = Server::start();
    let mut c = s.conn();
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "L", "h", 60_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 0)), 1);
    let ql = cmd!(
        "RLOCK.ACQUIRE",
        "L",
        "w1",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        1,
        0
    );
    let qs = cmd!("RSEM.ACQUIRE", "sem", "SESSION", "app", "QUEUE", 2, 0);
    for q in [&ql, &qs] {
        assert_eq!(raw(&mut c, q), Value::SimpleString("QUEUED".into()));
    }
    let next = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "L", "w2", 60_000, "BLOCK", 0));
    wait_until(Duration::from_secs(5), "w2 queued", || {
        rlock_stat(&mut c, "waiters") == 3
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L", "h")), 0);
    raw(&mut c, &cmd!("RSEM.RELEASE", "sem"));
    assert_eq!(hgetall(&mut c, "L"), holder("w1", 1), "granted, never read");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    // Undone and handed on: the lock to w2, the permit back to the semaphore.
    assert_eq!(next.reply_within(Duration::from_secs(5)), Value::Int(1));
    assert_eq!(hgetall(&mut c, "L"), holder("w2", 1));
    assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", "sem")), 1);
}

/// A grant no read returned is undone when its session ends, but only while it is still the
/// grant: an owner that gave it back blind (the documented give-back after `RSESSION.CANCEL`
/// answers 0) and took the lock anew kept its new hold. Before, the undo freed the new hold
/// (its count is the grant's 1), and the next acquirer held the lock beside it. The lock `U`
/// beside it, granted the same way and never given back, is undone: the undo jobs ran.
#[test]
fn ending_a_session_never_undoes_a_grant_given_back_and_taken_anew() {
    let s = Server::start();
    let mut c = s.conn();
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    for key in ["K", "U"] {
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", key, "a", 60_000)), 1);
    }
    for (n, key) in [(1, "K"), (2, "U")] {
        let q = cmd!(
            "RLOCK.ACQUIRE",
            key,
            "b",
            60_000,
            "SESSION",
            "app",
            "QUEUE",
            n,
            0
        );
        assert_eq!(raw(&mut c, &q), Value::SimpleString("QUEUED".into()));
        assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", key, "a")), 0);
        assert_eq!(hgetall(&mut c, key), holder("b", 1), "granted, never read");
    }
    // b gives K's grant back blind and takes K anew.
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)), 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "K", "b")), 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "K", "b", 60_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    wait_until(Duration::from_secs(5), "U's grant undone", || {
        !exists(&mut c, "U")
    });
    assert_eq!(rlock_stat(&mut c, "grants_revoked"), 1, "U's only");
    assert_eq!(hgetall(&mut c, "K"), holder("b", 1), "b's new hold stays");
    assert_eq!(
        raw(&mut c, &cmd!("RLOCK.ACQUIRE", "K", "c", 60_000)),
        Value::Nil,
        "nobody else gets K"
    );
}

/// The same for a blocked waiter whose connection closed before its grant's reply left: the
/// grant is undone on the next timer turn, unless its hold ended meanwhile (here a force
/// release) and its owner took the lock anew. `U`, granted the same way, is undone.
#[test]
fn a_grant_in_flight_is_not_undone_once_its_hold_ended_and_was_taken_anew() {
    let s = Server::start();
    let mut c = s.conn();
    let mut waiters = Vec::new();
    for key in ["K", "U"] {
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", key, "a", 60_000)), 1);
        waiters.push(Pending::send(
            &s,
            &cmd!("RLOCK.ACQUIRE", key, "b", 60_000, "BLOCK", 0),
        ));
    }
    wait_blocked(&mut c, 2);
    raw(&mut c, &cmd!("MULTI"));
    for (key, w) in ["K", "U"].into_iter().zip(&waiters) {
        raw(&mut c, &cmd!("RLOCK.RELEASE", key, "a"));
        raw(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id));
    }
    raw(&mut c, &cmd!("RLOCK.FORCERELEASE", "K"));
    raw(&mut c, &cmd!("RLOCK.ACQUIRE", "K", "b", 60_000));
    raw(&mut c, &cmd!("EXEC"));
    wait_until(Duration::from_secs(5), "U's grant undone", || {
        !exists(&mut c, "U")
    });
    assert_eq!(rlock_stat(&mut c, "grants_revoked"), 1, "U's only");
    assert_eq!(hgetall(&mut c, "K"), holder("b", 1), "b's new hold stays");
}

// ---------------------------------------------------------------------------------------------
// Bounded memory
// ---------------------------------------------------------------------------------------------

#[test]
fn lost_outcomes_past_the_backlog_become_one_overflow() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        string(
            &mut c,
            &cmd!("CONFIG", "SET", "rlock.session-max-backlog", 5)
        ),
        "OK"
    );
    raw(&mut c, &cmd!("RSESSION.OPEN", "s", 60_000));
    // Holds that end by their 1 ms leases: each is a lost hold of the session.
    for i in 0..50 {
        let k = format!("k:{i}");
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", &k, "o", 1, "SESSION", "s")),
            1
        );
    }
    wait_until(Duration::from_secs(10), "50 holds found lost", || {
        rlock_stat(&mut c, "holds_lost") == 50
    });
    assert_eq!(rlock_stat(&mut c, "session_outcomes_pending"), 6);
    assert_eq!(rlock_stat(&mut c, "session_lost_dropped"), 45);
    let got = read(&mut c, "s", 0);
    let kinds: Vec<String> = got.iter().map(|o| word(&o[1])).collect();
    assert_eq!(kinds, ["lost", "lost", "lost", "lost", "lost", "overflow"]);
    assert_eq!(
        got[5][2..],
        [Value::Nil, Value::Nil, Value::Nil, Value::Nil]
    );
    // Acknowledged, the backlog has room again.
    read(&mut c, "s", 6);
    assert_eq!(rlock_stat(&mut c, "session_outcomes_pending"), 0);
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "k:again", "o", 1, "SESSION", "s")
        ),
        1
    );
    wait_until(Duration::from_secs(10), "one more lost", || {
        rlock_stat(&mut c, "holds_lost") == 51
    });
    let got = read(&mut c, "s", 6);
    assert_eq!(got.len(), 1);
    assert_eq!(word(&got[0][1]), "lost");
}

#[test]
fn sessions_per_user_and_name_length_are_bounded() {
    let s = Server::start();
    let mut admin = s.conn();
    let mut a = acl_user(&s, &mut admin, "a", &["+@all", "~*"]);
    let mut b = acl_user(&s, &mut admin, "b", &["+@all", "~*"]);
    assert_eq!(
        string(
            &mut admin,
            &cmd!("CONFIG", "SET", "rlock.session-max-per-user", 2)
        ),
        "OK"
    );
    for n in ["a1", "a2"] {
        assert!(error_text(&raw(&mut a, &cmd!("RSESSION.OPEN", n, 1000))).is_none());
    }
    assert_eq!(
        err(&mut a, &cmd!("RSESSION.OPEN", "a3", 1000)),
        "ERR this user has 2 sessions open (rlock.session-max-per-user)"
    );
    // Resuming one's own is not a new session; another user has a count of its own.
    assert!(error_text(&raw(&mut a, &cmd!("RSESSION.OPEN", "a1", 1000))).is_none());
    assert!(error_text(&raw(&mut b, &cmd!("RSESSION.OPEN", "b1", 1000))).is_none());
    // A session that ends makes room.
    assert_eq!(int(&mut a, &cmd!("RSESSION.CLOSE", "a2")), 1);
    assert!(error_text(&raw(&mut a, &cmd!("RSESSION.OPEN", "a3", 1000))).is_none());

    let long = "n".repeat(257);
    assert_eq!(
        err(&mut b, &cmd!("RSESSION.OPEN", &long, 1000)),
        "ERR the session name is 257 bytes, above rlock.session-max-name-bytes (256)"
    );
    assert!(error_text(&raw(&mut b, &cmd!("RSESSION.OPEN", &long[1..], 1000))).is_none());
    let huge = "n".repeat(5_000_000);
    let e = err(&mut b, &cmd!("RSESSION.OPEN", &huge, 1000));
    assert!(e.contains("5000000 bytes"), "{e}");
    assert_eq!(rlock_stat(&mut admin, "sessions"), 4);
}

// ---------------------------------------------------------------------------------------------
// The client: an outcome must fit its wait
// ---------------------------------------------------------------------------------------------

/// A grant forged into the client's session (by a request of the same id on another key)
/// must fail the client's wait, never grant it. Another user can no longer do this (above);
/// the client checks anyway.
#[test]
fn a_grant_for_another_key_fails_the_clients_wait() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client_support::client(&s);
    let rt = client_support::runtime(1);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "b:x", "someone", 60_000)),
        1
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "a:1", "x", 60_000)), 1);
    let wait = {
        let lock = client.async_lock("b:x");
        rt.spawn(async move { lock.try_lock_for(Duration::from_secs(20)).await })
    };
    wait_until(
        Duration::from_secs(5),
        "the client's request queued",
        || rlock_stat(&mut c, "session_requests") == 1,
    );
    let session = match raw(&mut c, &cmd!("RSESSION.LIST")) {
        Value::Array(v) => word(&v[0]),
        other => panic!("{other:?}"),
    };
    // Its request is the session's first: swap it for one on a:1, then grant that.
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", &session, 1)), 1);
    let forged = cmd!(
        "RLOCK.ACQUIRE",
        "a:1",
        "evil",
        60_000,
        "SESSION",
        &session,
        "QUEUE",
        1,
        0
    );
    assert_eq!(raw(&mut c, &forged), Value::SimpleString("QUEUED".into()));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "a:1", "x")), 0);
    let got = rt.block_on(wait).unwrap();
    assert!(got.is_err(), "the wait must fail, not be granted: {got:?}");
    assert_eq!(hgetall(&mut c, "b:x"), holder("someone", 1));
}

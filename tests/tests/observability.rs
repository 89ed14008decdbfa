//! INFO rlock counters and COMMAND INFO / COMMAND DOCS entries. (The command flags that keep a
//! release possible when the server is out of memory: every_object.rs, for every object.)

use rlock_tests::*;

/// Run `step` and assert how the named counters moved.
#[track_caller]
fn moves(
    c: &mut redis::Connection,
    expect: &[(&str, i64)],
    step: impl FnOnce(&mut redis::Connection),
) {
    let before: Vec<i64> = expect.iter().map(|(f, _)| rlock_stat(c, f)).collect();
    step(c);
    for ((field, delta), b) in expect.iter().zip(before) {
        assert_eq!(rlock_stat(c, field) - b, *delta, "INFO rlock {field}");
    }
}

#[test]
fn info_section_exists_with_all_counters() {
    let s = Server::start();
    let mut c = s.conn();
    let info: String = redis::cmd("INFO").arg("rlock").query(&mut c).unwrap();
    assert!(
        info.lines().any(|l| l.trim() == "# rlock"),
        "no `# rlock` section:\n{info}"
    );
    for field in [
        "acquired",
        "reentries",
        "handoffs",
        "waits_timed_out",
        "grants_after_expiry",
        "waiters",
        "force_releases",
        "errors",
        "grants_immediate",
        "waits_cancelled",
        "waits_failed",
        "wait_count_lock",
        "wait_count_latch",
        "hold_count_lock",
        "hold_count_rwlock",
        "holds_tracked",
        "holds_untracked",
        "holds_dropped",
    ] {
        assert_eq!(rlock_stat(&mut c, field), 0, "{field} on a fresh server");
    }
}

#[test]
fn info_counters_move() {
    let s = Server::start();
    let mut c = s.conn();
    moves(&mut c, &[("acquired", 1), ("reentries", 0)], |c| {
        assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 1);
    });
    moves(&mut c, &[("reentries", 1)], |c| {
        assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 2);
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 1);

    // The waiters gauge follows parked clients.
    let w1 = park(&s, &mut c, "lk", "w1", 30_000, &[], 1);
    assert_eq!(rlock_stat(&mut c, "waiters"), 1);
    let w2 = park(&s, &mut c, "lk", "w2", 5_000, &[], 2);
    assert_eq!(rlock_stat(&mut c, "waiters"), 2);

    moves(
        &mut c,
        &[("handoffs", 1), ("waiters", -1), ("grants_after_expiry", 0)],
        |c| {
            assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
        },
    );
    assert_eq!(w1.reply_int(), 1);

    moves(&mut c, &[("waits_timed_out", 1), ("waiters", 0)], |c| {
        nil(c, &cmd!("RLOCK.ACQUIRE", "lk", "late", 1000, "BLOCK", 20));
    });

    // Lease expiry hand-off: w1's lease shortened, w2 gets the lock when it runs out.
    moves(
        &mut c,
        &[("grants_after_expiry", 1), ("waiters", -1)],
        |c| {
            assert_eq!(int(c, &cmd!("RLOCK.RENEW", "lk", "w1", 50)), 1);
            assert_eq!(w2.reply_int(), 1);
            assert_eq!(hgetall(c, "lk"), holder("w2", 1));
        },
    );

    moves(&mut c, &[("force_releases", 1)], |c| {
        assert_eq!(int(c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    });
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);

    moves(&mut c, &[("errors", 1)], |c| {
        let e = err(c, &cmd!("RLOCK.ACQUIRE", "lk", "", 1000));
        assert!(e.starts_with("ERR"), "{e}");
    });
}

#[test]
fn command_info_gives_arity_flags_and_key_position_1() {
    let s = Server::start();
    let mut c = s.conn();
    // (name, arity, flags it must have, flags it must not have)
    let expected: &[(&str, i64, &[&str], &[&str])] = &[
        ("rlock.acquire", -4, &["write", "denyoom"], &["readonly"]),
        ("rlock.release", 3, &["write"], &["denyoom", "readonly"]),
        ("rlock.renew", 4, &["write"], &["denyoom", "readonly"]),
        (
            "rlock.forcerelease",
            2,
            &["write"],
            &["denyoom", "readonly"],
        ),
        ("rlock.info", 2, &["readonly"], &["write", "denyoom"]),
    ];
    for (name, arity, must, must_not) in expected {
        assert_command_info(&mut c, name, *arity, must, must_not);
    }
    // COMMAND GETKEYS agrees (what cluster clients use to route).
    let keys = raw(
        &mut c,
        &cmd!(
            "COMMAND",
            "GETKEYS",
            "RLOCK.ACQUIRE",
            "the-key",
            "o",
            1000,
            "BLOCK",
            5
        ),
    );
    assert_eq!(strings(&keys), ["the-key"]);
}

#[test]
fn command_docs_have_a_summary_for_every_command() {
    let s = Server::start();
    let mut c = s.conn();
    for name in [
        "rlock.acquire",
        "rlock.release",
        "rlock.renew",
        "rlock.forcerelease",
        "rlock.info",
    ] {
        let docs = command_docs(&mut c, name);
        let summary = map_field(&docs, "summary")
            .and_then(text)
            .unwrap_or_default();
        assert!(
            !summary.trim().is_empty(),
            "COMMAND DOCS {name}: no summary"
        );
    }
}

/// A waiter ended by a demotion gets `UNBLOCKED ...` and counts in `rlock_errors`, never in
/// `rlock_waiters_disconnected` (its connection stays open), whichever ends it: the server
/// itself (Redis, Valkey 8) or rlock (Valkey 9). A session request whose connection was parked
/// counts once too, for its `error` outcome.
#[test]
fn a_wait_ended_by_a_demotion_counts_as_an_error() {
    let s = Server::start();
    let new_master = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 60_000)),
        1
    );
    let blocked = park(&s, &mut c, "lk", "w1", 30_000, &[], 1);
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 10_000));
    let parked = Pending::send(
        &s,
        &cmd!(
            "RLOCK.ACQUIRE",
            "lk",
            "w2",
            30_000,
            "SESSION",
            "app",
            "QUEUE",
            1,
            0,
            "BLOCK",
            0
        ),
    );
    wait_blocked(&mut c, 2);
    moves(
        &mut c,
        &[("errors", 2), ("waiters_disconnected", 0), ("waiters", -2)],
        |c| {
            let master = cmd!("REPLICAOF", "127.0.0.1", new_master.port);
            assert_eq!(string(c, &master), "OK");
            for (what, p) in [("BLOCK", blocked), ("QUEUE ... BLOCK", parked)] {
                let e = error_text(&p.reply()).unwrap_or_default();
                assert!(e.starts_with("UNBLOCKED"), "{what} waiter: {e}");
            }
            // The session request's outcome is its error (read on the replica).
            let v = raw(c, &cmd!("RSESSION.READ", "app", 0));
            assert!(format!("{v:?}").contains("UNBLOCKED"), "{v:?}");
        },
    );
}

/// The module says which version it is: `MODULE LIST`'s `ver` (major * 10000 + minor * 100 +
/// patch, as Redis modules number theirs) and `INFO rlock`'s first field, `rlock_version`.
#[test]
fn the_module_reports_its_version_in_module_list_and_info() {
    let s = Server::start();
    let mut c = s.conn();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        info_field(&mut c, "rlock", "rlock_version").as_deref(),
        Some(version)
    );
    let parts: Vec<i64> = version
        .split(['.', '-'])
        .take(3)
        .map(|p| p.parse().unwrap())
        .collect();
    let number = parts[0] * 10000 + parts[1] * 100 + parts[2];
    let Value::Array(modules) = raw(&mut c, &cmd!("MODULE", "LIST")) else {
        panic!("MODULE LIST is an array");
    };
    let rlock = modules
        .iter()
        .map(strings_and_ints)
        .find(|m| {
            m.first().map(String::as_str) == Some("name")
                && m.get(1).map(String::as_str) == Some("rlock")
        })
        .expect("rlock in MODULE LIST");
    let ver = rlock
        .iter()
        .position(|f| f == "ver")
        .and_then(|i| rlock.get(i + 1))
        .expect("a ver field");
    assert_eq!(ver, &number.to_string());
}

/// A MODULE LIST entry's fields as text (integers included).
fn strings_and_ints(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => n.to_string(),
                other => text(other).unwrap_or_default(),
            })
            .collect(),
        Value::Map(kv) => kv
            .iter()
            .flat_map(|(k, v)| {
                [k, v].map(|i| match i {
                    Value::Int(n) => n.to_string(),
                    other => text(other).unwrap_or_default(),
                })
            })
            .collect(),
        _ => Vec::new(),
    }
}

//! `INFO rlock` `rwlock_*` counters, and the `COMMAND INFO` / `COMMAND DOCS` entries (arity,
//! flags, key position 1, arguments) that cluster clients and redis-cli use.

use super::*;

/// Run `step` and assert how the named counters moved (every other `rwlock_*` counter and the
/// lock's own must stay still).
#[track_caller]
fn moves(
    c: &mut redis::Connection,
    expect: &[(&str, i64)],
    step: impl FnOnce(&mut redis::Connection),
) {
    let read = |c: &mut redis::Connection| -> Vec<(String, i64)> {
        let info: String = redis::cmd("INFO").arg("rlock").query(c).unwrap();
        COUNTERS
            .iter()
            .map(|f| (f.to_string(), rlock_stat_in(&info, f)))
            .collect()
    };
    let before = read(c);
    step(c);
    let after = read(c);
    for ((field, b), (_, a)) in before.iter().zip(after) {
        let want = expect
            .iter()
            .find(|(f, _)| f == field)
            .map_or(0, |(_, d)| *d);
        assert_eq!(a - b, want, "INFO rlock {field}");
    }
}

const COUNTERS: &[&str] = &[
    "rwlock_waiters",
    "rwlock_acquired",
    "rwlock_reentries",
    "rwlock_releases",
    "rwlock_handoffs",
    "rwlock_grants_after_expiry",
    "rwlock_busy",
    "rwlock_waits_started",
    "rwlock_waits_timed_out",
    "rwlock_waiters_disconnected",
    "rwlock_grants_revoked",
    "rwlock_renewals",
    "rwlock_force_releases",
    "waiters",
    "acquired",
    "handoffs",
];

#[test]
fn info_section_has_every_rwlock_counter_at_zero() {
    let s = Server::start();
    let mut c = s.conn();
    for f in COUNTERS {
        assert_eq!(rlock_stat(&mut c, f), 0, "{f} on a fresh server");
    }
}

#[test]
fn info_counters_move() {
    let s = Server::start();
    let mut c = s.conn();
    moves(&mut c, &[("rwlock_acquired", 1)], |c| {
        assert_eq!(acquire(c, "rw", "a", "READ", 30_000), Value::Int(1));
    });
    moves(&mut c, &[("rwlock_acquired", 1)], |c| {
        assert_eq!(acquire(c, "rw", "b", "READ", 30_000), Value::Int(1));
    });
    moves(&mut c, &[("rwlock_reentries", 1)], |c| {
        assert_eq!(acquire(c, "rw", "a", "READ", 30_000), Value::Int(2));
    });
    moves(&mut c, &[("rwlock_busy", 1)], |c| {
        assert_eq!(acquire(c, "rw", "w", "WRITE", 30_000), Value::Nil);
    });
    moves(&mut c, &[("rwlock_renewals", 1)], |c| {
        assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "rw", "a", 30_000)), 2);
    });
    moves(&mut c, &[], |c| {
        assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "rw", "nobody", 30_000)), 0);
        assert_eq!(release(c, "rw", "a", "READ"), Value::Int(1));
    });
    moves(&mut c, &[("rwlock_releases", 1)], |c| {
        assert_eq!(release(c, "rw", "a", "READ"), Value::Int(0));
    });
    // Waiting: the gauge follows parked clients; a grant is a hand-off.
    let mut parked = Vec::new();
    moves(
        &mut c,
        &[
            ("rwlock_waits_started", 2),
            ("rwlock_waiters", 2),
            ("waiters", 2),
        ],
        |c| {
            parked.push(park_rw(&s, c, "rw", "w1", "WRITE", 30_000, 1));
            parked.push(park_rw(&s, c, "rw", "w2", "WRITE", 30_000, 2));
        },
    );
    moves(
        &mut c,
        &[
            ("rwlock_releases", 1),
            ("rwlock_acquired", 1),
            ("rwlock_handoffs", 1),
            ("rwlock_waiters", -1),
            ("waiters", -1),
        ],
        |c| {
            assert_eq!(release(c, "rw", "b", "READ"), Value::Int(0));
        },
    );
    let w2 = parked.pop().unwrap();
    assert_eq!(parked.pop().unwrap().reply_int(), 1);
    moves(
        &mut c,
        &[
            ("rwlock_waiters_disconnected", 1),
            ("rwlock_waiters", -1),
            ("waiters", -1),
        ],
        |c| {
            assert_eq!(int(c, &cmd!("CLIENT", "KILL", "ID", w2.id)), 1);
        },
    );
    moves(
        &mut c,
        &[("rwlock_waits_started", 1), ("rwlock_waits_timed_out", 1)],
        |c| {
            nil(
                c,
                &cmd!("RRWLOCK.ACQUIRE", "rw", "late", "READ", 1_000, "BLOCK", 20),
            );
        },
    );
    // Lease expiry hand-off.
    moves(
        &mut c,
        &[
            ("rwlock_renewals", 1),
            ("rwlock_waits_started", 1),
            ("rwlock_acquired", 1),
            ("rwlock_handoffs", 1),
            ("rwlock_grants_after_expiry", 1),
        ],
        |c| {
            assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "rw", "w1", 50)), 1);
            let r = park_rw(&s, c, "rw", "r", "READ", 30_000, 1);
            assert_eq!(r.reply_int(), 1);
        },
    );
    moves(&mut c, &[("rwlock_force_releases", 1)], |c| {
        assert_eq!(int(c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    });
    moves(&mut c, &[], |c| {
        assert_eq!(int(c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 0);
    });
    let errors = rlock_stat(&mut c, "errors");
    let e = err(
        &mut c,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "mode", "READ", 1_000),
    );
    assert!(e.starts_with("ERR owner"), "{e}");
    assert_eq!(rlock_stat(&mut c, "errors") - errors, 1);
}

#[test]
fn command_info_gives_arity_flags_and_key_position_1() {
    let s = Server::start();
    let mut c = s.conn();
    // (name, arity, flags it must have, flags it must not have)
    let expected: &[(&str, i64, &[&str], &[&str])] = &[
        (
            "rrwlock.acquire",
            -5,
            &["write", "denyoom", "blocking"],
            &["readonly"],
        ),
        ("rrwlock.release", 4, &["write"], &["denyoom", "readonly"]),
        ("rrwlock.renew", 4, &["write"], &["denyoom", "readonly"]),
        (
            "rrwlock.forcerelease",
            2,
            &["write"],
            &["denyoom", "readonly"],
        ),
        ("rrwlock.info", 2, &["readonly"], &["write", "denyoom"]),
    ];
    for (name, arity, must, must_not) in expected {
        assert_command_info(&mut c, name, *arity, must, must_not);
    }
    for command in [
        cmd!(
            "COMMAND",
            "GETKEYS",
            "RRWLOCK.ACQUIRE",
            "the-key",
            "o",
            "READ",
            1_000,
            "BLOCK",
            5
        ),
        cmd!(
            "COMMAND",
            "GETKEYS",
            "RRWLOCK.RELEASE",
            "the-key",
            "o",
            "WRITE"
        ),
        cmd!("COMMAND", "GETKEYS", "RRWLOCK.RENEW", "the-key", "o", 1_000),
        cmd!("COMMAND", "GETKEYS", "RRWLOCK.FORCERELEASE", "the-key"),
        cmd!("COMMAND", "GETKEYS", "RRWLOCK.INFO", "the-key"),
    ] {
        assert_eq!(
            strings(&raw(&mut c, &command)),
            ["the-key"],
            "{}",
            show(&command)
        );
    }
}

/// Argument names of a `COMMAND DOCS` `arguments` list, nested ones as `parent.child`.
fn arg_names(args: &Value, prefix: &str) -> Vec<String> {
    let Value::Array(list) = args else {
        panic!("arguments: {args:?}")
    };
    let mut out = Vec::new();
    for a in list {
        let Value::Array(kv) = a else {
            panic!("argument: {a:?}")
        };
        let name = format!("{prefix}{}", map_field(kv, "name").and_then(text).unwrap());
        out.push(name.clone());
        if let Some(sub) = map_field(kv, "arguments") {
            out.extend(arg_names(sub, &format!("{name}.")));
        }
    }
    out
}

#[test]
fn command_docs_describe_every_command_and_its_arguments() {
    let s = Server::start();
    let mut c = s.conn();
    let expected: &[(&str, &[&str])] = &[
        (
            "rrwlock.acquire",
            &[
                "key",
                "owner",
                "mode",
                "mode.read",
                "mode.write",
                "lease_ms",
                "timeout_ms",
                "session",
                "session.session",
                "session.queue",
                "session.queue.request",
                "session.queue.timeout_ms",
            ],
        ),
        (
            "rrwlock.release",
            &["key", "owner", "mode", "mode.read", "mode.write"],
        ),
        ("rrwlock.renew", &["key", "owner", "lease_ms"]),
        ("rrwlock.forcerelease", &["key"]),
        ("rrwlock.info", &["key"]),
    ];
    for (name, args) in expected {
        let d = command_docs(&mut c, name);
        let summary = map_field(&d, "summary").and_then(text).unwrap_or_default();
        assert!(
            !summary.trim().is_empty(),
            "COMMAND DOCS {name}: no summary"
        );
        let complexity = map_field(&d, "complexity")
            .and_then(text)
            .unwrap_or_default();
        assert!(!complexity.is_empty(), "COMMAND DOCS {name}: no complexity");
        let got = arg_names(map_field(&d, "arguments").expect("arguments"), "");
        assert_eq!(got, *args, "COMMAND DOCS {name} arguments");
    }
    // BLOCK is an optional token argument.
    let d = command_docs(&mut c, "rrwlock.acquire");
    let Some(Value::Array(list)) = map_field(&d, "arguments") else {
        panic!()
    };
    let Value::Array(block) = &list[4] else {
        panic!()
    };
    assert_eq!(
        map_field(block, "token").and_then(text).as_deref(),
        Some("BLOCK")
    );
    assert_eq!(strings(map_field(block, "flags").unwrap()), ["optional"]);
}

//! RSEM.* and RLATCH.* in COMMAND INFO / COMMAND DOCS (arity, flags, key position 1) and their
//! INFO rlock counters. (The flags that keep releases possible on a server out of memory:
//! every_object.rs, for every object.)

use rlock_tests::*;

/// (name, arity, flags it must have, flags it must not have)
const COMMANDS: &[(&str, i64, &[&str], &[&str])] = &[
    (
        "rsem.acquire",
        -2,
        &["write", "denyoom", "blocking"],
        &["readonly"],
    ),
    ("rsem.release", -2, &["write"], &["denyoom", "readonly"]),
    (
        "rsem.trysetpermits",
        -3,
        &["write", "denyoom"],
        &["readonly"],
    ),
    ("rsem.addpermits", 3, &["write", "denyoom"], &["readonly"]),
    ("rsem.setpermits", 3, &["write", "denyoom"], &["readonly"]),
    ("rsem.available", 2, &["readonly"], &["write", "denyoom"]),
    ("rsem.leasetime", 3, &["readonly"], &["write", "denyoom"]),
    ("rsem.drain", 2, &["write"], &["denyoom", "readonly"]),
    ("rsem.info", -2, &["readonly"], &["write", "denyoom"]),
    (
        "rlatch.trysetcount",
        3,
        &["write", "denyoom"],
        &["readonly"],
    ),
    ("rlatch.countdown", 2, &["write"], &["denyoom", "readonly"]),
    (
        "rlatch.await",
        -2,
        &["readonly", "blocking"],
        &["write", "denyoom"],
    ),
    ("rlatch.count", 2, &["readonly"], &["write", "denyoom"]),
];

#[test]
fn command_info_gives_arity_flags_and_key_position_1() {
    let s = Server::start();
    let mut c = s.conn();
    for (name, arity, must, must_not) in COMMANDS {
        assert_command_info(&mut c, name, *arity, must, must_not);
        // COMMAND DOCS: a summary for redis-cli users.
        assert!(
            !command_summary(&mut c, name).trim().is_empty(),
            "{name}: no summary"
        );
    }
    for args in [
        vec![
            "RSEM.ACQUIRE",
            "the-key",
            "PERMITS",
            "2",
            "LEASE",
            "5",
            "BLOCK",
            "0",
        ],
        vec![
            "RSEM.RELEASE",
            "the-key",
            "ID",
            "00112233445566778899aabbccddeeff",
        ],
        vec!["RLATCH.AWAIT", "the-key", "BLOCK", "10"],
    ] {
        let mut command = cmd!("COMMAND", "GETKEYS");
        for a in &args {
            command.arg(*a);
        }
        assert_eq!(strings(&raw(&mut c, &command)), ["the-key"], "{args:?}");
    }
}

#[test]
fn info_rlock_has_the_semaphore_and_latch_counters() {
    let s = Server::start();
    let mut c = s.conn();
    for kind in ["sem_", "latch_"] {
        for field in [
            "waiters",
            "acquired",
            "releases",
            "handoffs",
            "grants_after_expiry",
            "busy",
            "waits_started",
            "waits_timed_out",
            "waiters_disconnected",
            "grants_revoked",
        ] {
            assert_eq!(rlock_stat(&mut c, &format!("{kind}{field}")), 0);
        }
    }
    // A waiter that disconnects is counted as such.
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 1)), 1);
    let w = Pending::send(&s, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)), 1);
    assert_eq!(rlock_stat(&mut c, "latch_waiters_disconnected"), 1);
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)), 1);
    assert_eq!(rlock_stat(&mut c, "sem_waiters_disconnected"), 1);
}

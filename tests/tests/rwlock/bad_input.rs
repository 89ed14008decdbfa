//! Bad input gets a precise error and leaves no partial state: arity, mode, owner, lease and
//! BLOCK values and options, on an absent key and on a held one.

use super::*;

/// Each command with the exact error it must give.
fn cases() -> Vec<(redis::Cmd, &'static str)> {
    let arity = |name: &str| match name {
        "rrwlock.acquire" => "ERR wrong number of arguments for 'rrwlock.acquire' command",
        "rrwlock.release" => "ERR wrong number of arguments for 'rrwlock.release' command",
        "rrwlock.renew" => "ERR wrong number of arguments for 'rrwlock.renew' command",
        "rrwlock.forcerelease" => {
            "ERR wrong number of arguments for 'rrwlock.forcerelease' command"
        }
        _ => "ERR wrong number of arguments for 'rrwlock.info' command",
    };
    let max = i64::MAX;
    vec![
        // Arity.
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ"),
            arity("rrwlock.acquire"),
        ),
        (cmd!("RRWLOCK.ACQUIRE", "rw"), arity("rrwlock.acquire")),
        (cmd!("RRWLOCK.RELEASE", "rw", "o"), arity("rrwlock.release")),
        (
            cmd!("RRWLOCK.RELEASE", "rw", "o", "READ", "x"),
            arity("rrwlock.release"),
        ),
        (cmd!("RRWLOCK.RENEW", "rw", "o"), arity("rrwlock.renew")),
        (
            cmd!("RRWLOCK.RENEW", "rw", "o", 1, 2),
            arity("rrwlock.renew"),
        ),
        (cmd!("RRWLOCK.FORCERELEASE"), arity("rrwlock.forcerelease")),
        (
            cmd!("RRWLOCK.FORCERELEASE", "rw", "x"),
            arity("rrwlock.forcerelease"),
        ),
        (cmd!("RRWLOCK.INFO"), arity("rrwlock.info")),
        (cmd!("RRWLOCK.INFO", "rw", "x"), arity("rrwlock.info")),
        // Mode.
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READS", 1_000),
            "ERR syntax error, expected READ or WRITE, got 'READS'",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "", 1_000),
            "ERR syntax error, expected READ or WRITE, got ''",
        ),
        (
            cmd!("RRWLOCK.RELEASE", "rw", "o", "both"),
            "ERR syntax error, expected READ or WRITE, got 'both'",
        ),
        // Owner.
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "", "READ", 1_000),
            "ERR owner must not be empty",
        ),
        (
            cmd!("RRWLOCK.RELEASE", "rw", "", "READ"),
            "ERR owner must not be empty",
        ),
        (
            cmd!("RRWLOCK.RENEW", "rw", "", 1_000),
            "ERR owner must not be empty",
        ),
        // Lease.
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", "abc"),
            "ERR lease_ms is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "WRITE", "1.5"),
            "ERR lease_ms is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", "+5"),
            "ERR lease_ms is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", "99999999999999999999"),
            "ERR lease_ms is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 0),
            "ERR lease_ms must be at least 1",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "WRITE", -5),
            "ERR lease_ms must be at least 1",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", max),
            "ERR lease_ms is out of range",
        ),
        (
            cmd!("RRWLOCK.RENEW", "rw", "o", "x"),
            "ERR lease_ms is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.RENEW", "rw", "o", 0),
            "ERR lease_ms must be at least 1",
        ),
        (
            cmd!("RRWLOCK.RENEW", "rw", "o", max),
            "ERR lease_ms is out of range",
        ),
        // BLOCK and options.
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 1_000, "BLOCK"),
            "ERR syntax error, BLOCK needs a timeout in milliseconds",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 1_000, "BLOCK", -1),
            "ERR timeout is negative",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 1_000, "BLOCK", "soon"),
            "ERR timeout is not an integer or out of range",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 1_000, "BLOCK", max),
            "ERR timeout is out of range",
        ),
        (
            cmd!(
                "RRWLOCK.ACQUIRE",
                "rw",
                "o",
                "READ",
                1_000,
                "block",
                5,
                "BLOCK",
                5
            ),
            "ERR syntax error, BLOCK given twice",
        ),
        (
            cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 1_000, "FENCE"),
            "ERR syntax error, unknown option 'FENCE'",
        ),
        (
            cmd!(
                "RRWLOCK.ACQUIRE",
                "rw",
                "o",
                "READ",
                1_000,
                "BLOCK",
                5,
                "NX"
            ),
            "ERR syntax error, unknown option 'NX'",
        ),
    ]
}

#[test]
fn bad_input_on_an_absent_key_gives_a_precise_error_and_creates_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let errors = rlock_stat(&mut c, "errors");
    let all = cases();
    for (command, expected) in &all {
        assert_eq!(err(&mut c, command), *expected, "{}", show(command));
        assert_eq!(dbsize(&mut c), 0, "{}: partial state", show(command));
    }
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    // Arity errors come from Redis itself, before the module runs.
    let counted = all
        .iter()
        .filter(|(_, e)| !e.contains("wrong number"))
        .count() as i64;
    assert_eq!(rlock_stat(&mut c, "errors") - errors, counted);
}

#[test]
fn bad_input_on_a_held_key_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "o", "READ", 30_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "x", "READ", 30_000), Value::Int(1));
    let before = snapshot(&mut c);
    for (command, expected) in cases() {
        assert_eq!(err(&mut c, &command), expected, "{}", show(&command));
    }
    assert_same_data("after bad input", &before, &snapshot(&mut c), 200);
    assert_eq!(
        rw_info(&mut c, "rw").readers,
        readers(&[("o", 1), ("x", 1)])
    );
    assert_eq!(rw_info(&mut c, "rw").waiters, 0);
}

/// A read hold's lease key (`{name}:owner:rwlock_timeout:N`) holding another object (here a
/// lock someone named so) is refused with WRONGTYPE, nothing written: before, the read grant
/// overwrote it with the string `1`, and that lock's holder lost it silently.
#[test]
fn a_read_hold_never_overwrites_another_object_at_its_lease_key() {
    let s = Server::start();
    let mut c = s.conn();
    let lease_key = "{k}:o:rwlock_timeout:1";
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", lease_key, "A", 60_000)),
        1
    );
    let e = err(&mut c, &cmd!("RRWLOCK.ACQUIRE", "k", "o", "READ", 60_000));
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(
        hgetall(&mut c, lease_key),
        holder("A", 1),
        "the lock is A's"
    );
    assert!(!exists(&mut c, "k"), "nothing written");
    // A string there is the lease key's own type: taken over, as Redisson's script does.
    raw(&mut c, &cmd!("SET", "{k}:o2:rwlock_timeout:1", "x"));
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.ACQUIRE", "k", "o2", "READ", 60_000)),
        1
    );
}

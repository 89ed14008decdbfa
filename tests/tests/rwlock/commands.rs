//! Replies and exact key contents of every RRWLOCK command: Redisson's `RReadWriteLock` layout
//! (hash fields, one `rwlock_timeout` key per read hold), the naming rule with and without `{`,
//! NOTOWNER, INFO on absent and present keys, WRONGTYPE, reserved owners.

use super::*;

#[test]
fn read_holds_write_the_hash_and_one_timeout_key_per_hold() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("a", "1")]));
    let a1 = rwlock_hold("rw", "a", 1);
    assert_eq!(a1, "{rw}:a:rwlock_timeout:1");
    assert_eq!(string(&mut c, &cmd!("GET", &a1)), "1");
    assert_between("a's first hold", pttl(&mut c, &a1), 9_000, 10_000);
    assert_between("hash", pttl(&mut c, "rw"), 9_000, 10_000);

    // Re-entry: count 2, a second hold key with its own lease.
    assert_eq!(acquire(&mut c, "rw", "a", "read", 20_000), Value::Int(2));
    // Another reader.
    assert_eq!(acquire(&mut c, "rw", "b", "Read", 5_000), Value::Int(1));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("a", "2"), ("b", "1")])
    );
    assert_eq!(
        keys(&mut c),
        [
            "rw",
            "{rw}:a:rwlock_timeout:1",
            "{rw}:a:rwlock_timeout:2",
            "{rw}:b:rwlock_timeout:1"
        ]
    );
    assert_between("a's first hold", pttl(&mut c, &a1), 9_000, 10_000);
    let a2 = rwlock_hold("rw", "a", 2);
    assert_between("a's second hold", pttl(&mut c, &a2), 19_000, 20_000);
    let b1 = rwlock_hold("rw", "b", 1);
    assert_between("b's hold", pttl(&mut c, &b1), 4_000, 5_000);
    assert_between("hash = longest lease", pttl(&mut c, "rw"), 19_000, 20_000);

    // Releases: the newest hold of that owner goes with its key; the reply is what remains.
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(1));
    assert!(!exists(&mut c, &a2));
    assert!(exists(&mut c, &a1));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("a", "1"), ("b", "1")])
    );
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(0));
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("b", "1")]));
    assert_eq!(keys(&mut c), ["rw", "{rw}:b:rwlock_timeout:1"]);
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(dbsize(&mut c), 0, "the last release deletes everything");
}

#[test]
fn write_holds_use_the_owner_write_field_and_no_timeout_key() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(keys(&mut c), ["rw"]);
    assert_between("hash", pttl(&mut c, "rw"), 9_000, 10_000);
    assert_eq!(acquire(&mut c, "rw", "w", "write", 10_000), Value::Int(2));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "2")])
    );
    // Nobody else, in either mode.
    assert_eq!(acquire(&mut c, "rw", "x", "WRITE", 10_000), Value::Nil);
    assert_eq!(acquire(&mut c, "rw", "x", "READ", 10_000), Value::Nil);
    // The writer may also read (downgrade): a read field and a timeout key next to its write.
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "2"), ("w", "1")])
    );
    assert_eq!(keys(&mut c), ["rw", "{rw}:w:rwlock_timeout:1"]);
    // Each mode releases its own holds.
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("w", "1")]),
        "a write release that leaves the writer's reads turns the lock into a read lock"
    );
    assert_eq!(release(&mut c, "rw", "w", "READ"), Value::Int(0));
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn release_by_a_non_holder_is_notowner_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let notowner = "NOTOWNER lock is not held by this owner";
    assert_eq!(
        err(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "a", "READ")),
        notowner,
        "absent key"
    );
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    let before = snapshot(&mut c);
    for (owner, mode) in [("b", "READ"), ("a", "WRITE"), ("b", "WRITE")] {
        assert_eq!(
            err(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", owner, mode)),
            notowner,
            "{owner} {mode} on a read lock held by a"
        );
    }
    assert_same_data("after NOTOWNER", &before, &snapshot(&mut c), 50);
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(0));

    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    for (owner, mode) in [("w", "READ"), ("x", "WRITE"), ("x", "READ")] {
        assert_eq!(
            err(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", owner, mode)),
            notowner,
            "{owner} {mode} on a write lock held by w"
        );
    }
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
}

#[test]
fn names_with_a_brace_use_it_as_their_hash_tag() {
    let s = Server::start();
    let mut c = s.conn();
    for (name, hold) in [
        ("{app}:rw", "{app}:rw:a:rwlock_timeout:1"),
        ("rw{x}", "rw{x}:a:rwlock_timeout:1"),
        ("plain", "{plain}:a:rwlock_timeout:1"),
    ] {
        assert_eq!(rwlock_hold(name, "a", 1), hold);
        assert_eq!(acquire(&mut c, name, "a", "READ", 10_000), Value::Int(1));
        assert_eq!(string(&mut c, &cmd!("GET", hold)), "1", "{name}");
        assert_between(hold, pttl(&mut c, hold), 9_000, 10_000);
        assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", name)), 1);
        assert!(
            !exists(&mut c, hold),
            "{name}: force release deletes {hold}"
        );
    }
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn force_release_deletes_the_hash_and_every_timeout_key() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")),
        0,
        "absent"
    );
    for (o, n) in [("a", 3), ("b", 1), ("c", 2)] {
        for _ in 0..n {
            assert!(matches!(
                acquire(&mut c, "rw", o, "READ", 10_000),
                Value::Int(_)
            ));
        }
    }
    assert_eq!(dbsize(&mut c), 7);
    // A hold key that already expired on its own is simply not there.
    assert_eq!(int(&mut c, &cmd!("DEL", rwlock_hold("rw", "c", 1))), 1);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 0);

    // Write mode, with the writer's own read holds.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(2));
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn info_on_absent_and_present_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let absent = RwInfo {
        mode: None,
        readers: readers(&[]),
        writer: None,
        ttl_ms: -2,
        waiters: 0,
        queue: vec![],
    };
    assert_eq!(rw_info(&mut c, "rw"), absent);

    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 10_000), Value::Int(1));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 10_000, 1);
    let r = park_rw(&s, &mut c, "rw", "r", "READ", 10_000, 2);
    let info = rw_info(&mut c, "rw");
    assert_between("ttl_ms", info.ttl_ms, 9_000, 10_000);
    assert_eq!(
        info,
        RwInfo {
            mode: Some("read".into()),
            readers: readers(&[("a", 2), ("b", 1)]),
            writer: None,
            ttl_ms: info.ttl_ms,
            waiters: 2,
            queue: vec![("w".into(), "write".into()), ("r".into(), "read".into())],
        }
    );
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(0));
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    // Downgraded writer: both counts show.
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    let info = rw_info(&mut c, "rw");
    assert_eq!(info.mode.as_deref(), Some("write"));
    assert_eq!(info.writer, Some(("w".to_string(), 1)));
    assert_eq!(info.readers, readers(&[("w", 1)]));
    assert_eq!(
        (info.waiters, info.queue),
        (1, vec![("r".to_string(), "read".to_string())])
    );
    // Without expiry: -1.
    assert_eq!(int(&mut c, &cmd!("PERSIST", "rw")), 1);
    assert_eq!(rw_info(&mut c, "rw").ttl_ms, -1);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(r.reply_int(), 1);
}

#[test]
fn info_is_a_map_in_resp3() {
    let s = Server::start();
    let mut c = redis::Client::open(format!("{}?protocol=resp3", s.url()))
        .unwrap()
        .get_connection()
        .unwrap();
    let reply = raw(&mut c, &cmd!("RRWLOCK.INFO", "rw"));
    assert!(matches!(reply, Value::Map(_)), "RESP3: {reply:?}");
    assert_eq!(RwInfo::parse(&reply).ttl_ms, -2);
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    let info = RwInfo::parse(&raw(&mut c, &cmd!("RRWLOCK.INFO", "rw")));
    assert_eq!(info.writer, Some(("w".to_string(), 1)));
}

#[test]
fn every_command_replies_wrongtype_on_a_non_hash_key() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("SET", "str", "x")), "OK");
    assert_eq!(int(&mut c, &cmd!("RPUSH", "list", "x")), 1);
    for key in ["str", "list"] {
        let before = snapshot(&mut c);
        for command in [
            cmd!("RRWLOCK.ACQUIRE", key, "a", "READ", 1_000),
            cmd!("RRWLOCK.ACQUIRE", key, "a", "WRITE", 1_000, "BLOCK", 0),
            cmd!("RRWLOCK.RELEASE", key, "a", "READ"),
            cmd!("RRWLOCK.RELEASE", key, "a", "WRITE"),
            cmd!("RRWLOCK.RENEW", key, "a", 1_000),
            cmd!("RRWLOCK.FORCERELEASE", key),
            cmd!("RRWLOCK.INFO", key),
        ] {
            let e = err(&mut c, &command);
            assert!(e.starts_with("WRONGTYPE "), "{}: {e}", show(&command));
        }
        assert_same_data(key, &before, &snapshot(&mut c), 50);
    }
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
}

#[test]
fn reserved_owners_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    let refused =
        "ERR owner must not be 'mode' or end in ':write' (Redisson's read-write lock fields)";
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    let before = snapshot(&mut c);
    for owner in ["mode", "x:write", ":write", "a:write"] {
        for command in [
            cmd!("RRWLOCK.ACQUIRE", "rw", owner, "READ", 1_000),
            cmd!("RRWLOCK.ACQUIRE", "rw", owner, "WRITE", 1_000),
            cmd!("RRWLOCK.ACQUIRE", "new", owner, "WRITE", 1_000, "BLOCK", 0),
            cmd!("RRWLOCK.RELEASE", "rw", owner, "READ"),
            cmd!("RRWLOCK.RENEW", "rw", owner, 1_000),
        ] {
            assert_eq!(err(&mut c, &command), refused, "{}", show(&command));
        }
    }
    assert_same_data("after refused owners", &before, &snapshot(&mut c), 50);
    // Near misses are ordinary owners.
    for owner in ["modes", "write", "x:writer", "MODE"] {
        assert_eq!(
            acquire(&mut c, "rw", owner, "READ", 1_000),
            Value::Int(1),
            "{owner}"
        );
    }
}

#[test]
fn one_kind_per_key_the_lock_commands_and_the_read_write_lock_commands_refuse_each_others_hash() {
    let s = Server::start();
    let mut c = s.conn();
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    // A lock (`RLOCK`, or Redisson's RLock): a hash without `mode`.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", 10_000)), 1);
    let before = snapshot(&mut c);
    for command in [
        cmd!("RRWLOCK.ACQUIRE", "k", "o", "READ", 1_000),
        cmd!("RRWLOCK.ACQUIRE", "k", "w", "WRITE", 1_000, "BLOCK", 1_000),
        cmd!("RRWLOCK.RELEASE", "k", "o", "READ"),
        cmd!("RRWLOCK.RENEW", "k", "o", 1_000),
        cmd!("RRWLOCK.FORCERELEASE", "k"),
        cmd!("RRWLOCK.INFO", "k"),
    ] {
        assert_eq!(err(&mut c, &command), wrongtype, "{}", show(&command));
    }
    assert_same_data("a lock's hash", &before, &snapshot(&mut c), 50);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o")), 0);

    // A read-write lock: a hash with `mode`, and a lease key per read hold.
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 10_000), Value::Int(1));
    let before = snapshot(&mut c);
    for command in [
        cmd!("RLOCK.ACQUIRE", "rw", "r", 1_000),
        cmd!("RLOCK.ACQUIRE", "rw", "x", 1_000, "BLOCK", 1_000),
        cmd!("RLOCK.RELEASE", "rw", "r"),
        cmd!("RLOCK.RENEW", "rw", "r", 1_000),
        cmd!("RLOCK.FORCERELEASE", "rw"),
        cmd!("RLOCK.INFO", "rw"),
    ] {
        assert_eq!(err(&mut c, &command), wrongtype, "{}", show(&command));
    }
    assert_same_data("a read-write lock's hash", &before, &snapshot(&mut c), 50);
    assert!(exists(&mut c, "{rw}:r:rwlock_timeout:1"));
    // `mode` cannot hold a lock: its field would make the lock read as a read-write lock.
    assert_eq!(
        err(&mut c, &cmd!("RLOCK.ACQUIRE", "m", "mode", 1_000)),
        "ERR owner must not be 'mode' or end in ':write' (Redisson's read-write lock fields)"
    );
    assert!(!exists(&mut c, "m"));
}

#[test]
fn a_hold_count_that_is_not_an_integer_is_an_error() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("HSET", "rw", "mode", "read", "a", "many")),
        2
    );
    let e = "ERR lock hold count is not an integer";
    assert_eq!(
        err(&mut c, &cmd!("RRWLOCK.ACQUIRE", "rw", "a", "READ", 1_000)),
        e
    );
    assert_eq!(err(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "a", "READ")), e);
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("a", "many")])
    );
}

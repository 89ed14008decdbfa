//! What an operator meets beyond the commands themselves: ACL users (categories, key
//! patterns on the auxiliary keys rlock writes), a lock key overwritten with another type,
//! eviction policies that can free locks, module reloads, and the smaller probe findings
//! (long arguments echoed in errors, RLOCK.INFO on a huge hash, RENEW on a corrupt count).

use redis::Value;
use rlock_tests::*;
use std::time::{Duration, Instant};

/// `redis_version` as (major, minor), and whether the server is Valkey.
fn server_version(c: &mut redis::Connection) -> ((u32, u32), bool) {
    let v = info_field(c, "server", "redis_version").unwrap_or_default();
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    let valkey = info_field(c, "server", "server_name").is_some_and(|n| n.contains("valkey"));
    (version, valkey)
}

#[test]
fn acl_categories_follow_the_command_shape_where_the_server_supports_them() {
    let s = Server::start();
    let mut c = s.conn();
    let ((major, minor), valkey) = server_version(&mut c);
    let categories_supported = valkey || (major, minor) >= (7, 2);
    let mut writer = acl_user(&s, &mut c, "writer", &["~*", "+@write"]);
    let mut reader = acl_user(&s, &mut c, "reader", &["~*", "+@read"]);
    let mut no_write = acl_user(&s, &mut c, "nowrite", &["~*", "+@all", "-@write"]);
    let acquire = cmd!("RLOCK.ACQUIRE", "lk", "o", 30_000);
    if categories_supported {
        // As a native command: @write runs acquires and releases, @read runs INFO, and a
        // user without @write cannot take a lock.
        assert_eq!(int(&mut writer, &acquire), 1);
        assert_eq!(int(&mut writer, &cmd!("RLOCK.RELEASE", "lk", "o")), 0);
        assert!(err(&mut reader, &acquire).starts_with("NOPERM"));
        let info = raw(&mut reader, &cmd!("RLOCK.INFO", "lk"));
        assert!(error_text(&info).is_none(), "{info:?}");
        assert!(err(&mut no_write, &acquire).starts_with("NOPERM"));
        let info = raw(&mut no_write, &cmd!("RLOCK.INFO", "lk"));
        assert!(error_text(&info).is_none(), "{info:?}");
    } else {
        // Redis 7.0 has no ACL categories for module commands: `+@write` does not cover
        // them, and `-@write` does not take them away (docs/operations.md says so).
        assert!(err(&mut writer, &acquire).starts_with("NOPERM"));
        assert!(err(&mut reader, &cmd!("RLOCK.INFO", "lk")).starts_with("NOPERM"));
        assert_eq!(int(&mut no_write, &acquire), 1);
    }
}

#[test]
fn auxiliary_keys_are_written_only_when_the_user_may_write_them() {
    let s = Server::start();
    let mut c = s.conn();
    let mut app = acl_user(&s, &mut c, "app1", &["~app1:*", "+@all"]);
    // The fencing token lives in `redisson_lock_token:{app1:x}`, outside `app1:*`.
    let e = err(
        &mut app,
        &cmd!("RLOCK.ACQUIRE", "app1:x", "o", 30_000, "FENCE"),
    );
    assert!(
        e.starts_with("NOPERM") && e.contains("redisson_lock_token:{app1:x}"),
        "{e}"
    );
    assert!(!exists(&mut c, "app1:x"), "nothing written");
    assert!(!exists(&mut c, "redisson_lock_token:{app1:x}"));
    // Not even queued: a fenced wait checks what its grant would write.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "app1:x", "h", 30_000)),
        1
    );
    let e = err(
        &mut app,
        &cmd!("RLOCK.ACQUIRE", "app1:x", "o", 30_000, "FENCE", "BLOCK", 0),
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(lock_info(&mut c, "app1:x").waiters, 0);
    // Without FENCE only the key itself is written: allowed.
    assert_eq!(
        int(&mut app, &cmd!("RLOCK.ACQUIRE", "app1:y", "o", 30_000)),
        1
    );
    // A read lock writes `{app1:z}:o:rwlock_timeout:1`: refused, nothing written.
    let e = err(
        &mut app,
        &cmd!("RRWLOCK.ACQUIRE", "app1:z", "o", "READ", 30_000),
    );
    assert!(e.contains("{app1:z}:o:rwlock_timeout:1"), "{e}");
    assert!(!exists(&mut c, "app1:z"));
    // A user allowed the hash-tagged names too gets both.
    let mut app2 = acl_user(
        &s,
        &mut c,
        "app2",
        &[
            "~app2:*",
            "~{app2:*",
            "~redisson_lock_token:{app2:*",
            "+@all",
        ],
    );
    assert!(
        int(
            &mut app2,
            &cmd!("RLOCK.ACQUIRE", "app2:x", "o", 30_000, "FENCE")
        ) > 1,
        "a token"
    );
    assert_eq!(
        int(
            &mut app2,
            &cmd!("RRWLOCK.ACQUIRE", "app2:z", "o", "READ", 30_000)
        ),
        1
    );
}

/// `RSEM.RENEW` writes the leased-permit set `{name}:timeout`: a user who may not write it
/// renews nothing (and changes no lease), a user who may not name the semaphore is refused
/// before anything is read, and the owner of both renews. A second user who may write the
/// semaphore renews a permit by its id, as Redisson's `updateLeaseTime` does: the id is the
/// capability.
#[test]
fn a_permit_renewal_needs_the_semaphore_and_its_lease_set() {
    let s = Server::start();
    let mut c = s.conn();
    let mut narrow = acl_user(&s, &mut c, "narrow", &["~app1:*", "+@all"]);
    let mut other = acl_user(&s, &mut c, "other", &["~app2:*", "~{app2:*", "+@all"]);
    let mut full = acl_user(&s, &mut c, "full", &["~app1:*", "~{app1:*", "+@all"]);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "app1:sem", 2)), 1);
    let Value::Array(got) = raw(&mut c, &cmd!("RSEM.ACQUIRE", "app1:sem", "LEASE", 10_000)) else {
        panic!("permit ids")
    };
    let id = text(&got[0]).expect("a permit id");
    // The one lease's end, as stored (the member is the id's 16 raw bytes).
    let lease = |c: &mut redis::Connection| {
        let z: Vec<(Vec<u8>, f64)> = cmd!("ZRANGE", "{app1:sem}:timeout", 0, -1, "WITHSCORES")
            .query(c)
            .unwrap();
        assert_eq!(z.len(), 1);
        z[0].1 as i64
    };
    let before = lease(&mut c);

    let e = err(
        &mut narrow,
        &cmd!("RSEM.RENEW", "app1:sem", 600_000, "ID", &id),
    );
    assert!(
        e.starts_with("NOPERM") && e.contains("{app1:sem}:timeout"),
        "{e}"
    );
    let e = err(
        &mut other,
        &cmd!("RSEM.RENEW", "app1:sem", 600_000, "ID", &id),
    );
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(lease(&mut c), before, "no lease changed");

    assert_eq!(
        int(
            &mut full,
            &cmd!("RSEM.RENEW", "app1:sem", 600_000, "ID", &id)
        ),
        1
    );
    assert!(lease(&mut c) > before + 500_000, "renewed to ten minutes");
    assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", "app1:sem")), 1);
}

/// The user docs/operations.md's ACL example sets up (the `ACL SETUSER app1 ...` line, run as
/// written) gets every object, fences and leases included, on its `app1:*` names; a user
/// limited to a hash tag's prefix gets all but the fencing counter, which is named outside it.
#[test]
fn the_documented_acl_example_covers_every_auxiliary_key() {
    let s = Server::start();
    let mut c = s.conn();
    let doc = std::fs::read_to_string(workspace_root().join("docs/operations.md")).unwrap();
    let line = doc
        .lines()
        .find(|l| l.starts_with("ACL SETUSER app1 "))
        .expect("docs/operations.md shows `ACL SETUSER app1 ...`");
    let mut setuser = redis::cmd("ACL");
    for w in line.split_whitespace().skip(1) {
        setuser.arg(w);
    }
    assert_eq!(string(&mut c, &setuser), "OK", "{line}");
    let mut app = s.conn();
    let password = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix('>'))
        .unwrap();
    assert_eq!(string(&mut app, &cmd!("AUTH", "app1", password)), "OK");
    let all_objects = |u: &mut redis::Connection, prefix: &str| {
        let fence = cmd!(
            "RLOCK.ACQUIRE",
            format!("{prefix}lock"),
            "o",
            30_000,
            "FENCE"
        );
        let read = cmd!(
            "RRWLOCK.ACQUIRE",
            format!("{prefix}rw"),
            "o",
            "READ",
            30_000
        );
        let lease = cmd!("RSEM.ACQUIRE", format!("{prefix}pool"), "LEASE", 30_000);
        let pool = format!("{prefix}pool");
        assert_eq!(int(u, &cmd!("RSEM.ADDPERMITS", &pool, 1)), 1);
        [raw(u, &fence), raw(u, &read), raw(u, &lease)]
    };
    for reply in all_objects(&mut app, "app1:") {
        assert!(error_text(&reply).is_none(), "{line}: {reply:?}");
    }
    // A hash-tagged prefix covers the read holds and the lease set, not the token counter.
    let mut tagged = acl_user(&s, &mut c, "tagged", &["~{app1}:*", "+@all"]);
    let [fence, read, lease] = all_objects(&mut tagged, "{app1}:");
    let e = error_text(&fence).unwrap_or_default();
    assert!(
        e.starts_with("NOPERM") && e.contains("'redisson_lock_token:{app1}:lock'"),
        "{e}"
    );
    assert!(error_text(&read).is_none(), "{read:?}");
    assert!(error_text(&lease).is_none(), "{lease:?}");
    let mut tagged = acl_user(
        &s,
        &mut c,
        "tagged",
        &["~{app1}:*", "~redisson_lock_token:{app1}:*", "+@all"],
    );
    let fence = cmd!("RLOCK.ACQUIRE", "{app1}:lock", "o", 30_000, "FENCE");
    assert!(int(&mut tagged, &fence) > 1, "a token");
}

/// Overwriting a held lock with a value of another type ends its waiters at once with
/// WRONGTYPE (not when the old lease would have run out, nor never for a lock without TTL).
#[test]
fn a_lock_replaced_by_another_type_fails_its_waiters_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let overwrites: Vec<(&str, redis::Cmd)> = vec![
        ("SET", cmd!("SET", "lk", "x")),
        ("SET over a PERSISTed lock", cmd!("SET", "lk", "x")),
        ("SUNIONSTORE", cmd!("SUNIONSTORE", "lk", "some-set")),
        ("SORT ... STORE", cmd!("SORT", "some-list", "STORE", "lk")),
    ];
    assert_eq!(int(&mut c, &cmd!("SADD", "some-set", "a")), 1);
    assert_eq!(int(&mut c, &cmd!("RPUSH", "some-list", "1")), 1);
    for (i, (what, overwrite)) in overwrites.into_iter().enumerate() {
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
            1
        );
        if what.contains("PERSIST") {
            assert_eq!(int(&mut c, &cmd!("PERSIST", "lk")), 1);
        }
        let w = park(&s, &mut c, "lk", "w", 30_000, &[], 1);
        let started = Instant::now();
        raw(&mut c, &overwrite);
        let reply = w.reply_within(Duration::from_secs(5));
        assert!(
            error_text(&reply).is_some_and(|e| e.starts_with("WRONGTYPE")),
            "{what}: {reply:?}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{what}: WRONGTYPE after {:?}",
            started.elapsed()
        );
        assert_eq!(rlock_stat(&mut c, "waiters"), 0, "{what} (round {i})");
        int(&mut c, &cmd!("DEL", "lk"));
    }
}

#[test]
fn eviction_policies_that_can_free_locks_are_warned_about() {
    let s = Server::with(ServerOptions {
        args: vec!["--maxmemory-policy".into(), "volatile-ttl".into()],
        ..Default::default()
    });
    let mut c = s.conn();
    assert!(
        s.log_tail(200)
            .contains("maxmemory-policy is 'volatile-ttl'"),
        "no warning at load:\n{}",
        s.log_tail(30)
    );
    let info: String = redis::cmd("INFO").arg("rlock").query(&mut c).unwrap();
    assert!(
        info.contains("rlock_maxmemory_policy:volatile-ttl"),
        "{info}"
    );
    assert_eq!(rlock_stat(&mut c, "eviction_can_free_locks"), 1);
    assert_eq!(
        string(
            &mut c,
            &cmd!("CONFIG", "SET", "maxmemory-policy", "noeviction")
        ),
        "OK"
    );
    assert_eq!(rlock_stat(&mut c, "eviction_can_free_locks"), 0);
    assert_eq!(
        string(
            &mut c,
            &cmd!("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        ),
        "OK"
    );
    assert_eq!(rlock_stat(&mut c, "eviction_can_free_locks"), 1);
    assert!(s
        .log_tail(200)
        .contains("maxmemory-policy is 'allkeys-lru'"));
    // The default policy warns about nothing.
    let quiet = Server::start();
    assert!(!quiet.log_tail(200).contains("maxmemory-policy is"));
}

#[test]
fn counters_start_from_zero_when_the_module_is_loaded_again() {
    let s = Server::with(ServerOptions {
        args: vec!["--enable-module-command".into(), "yes".into()],
        ..Default::default()
    });
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o", 30_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o")), 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "held", "o", 30_000)), 1);
    assert_eq!(rlock_stat(&mut c, "acquired"), 2);
    assert_eq!(rlock_stat(&mut c, "hold_count_lock"), 1);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 1);
    assert_eq!(string(&mut c, &cmd!("MODULE", "UNLOAD", "rlock")), "OK");
    let path = module_path().to_string_lossy().into_owned();
    assert_eq!(string(&mut c, &cmd!("MODULE", "LOAD", path)), "OK");
    assert_eq!(rlock_stat(&mut c, "acquired"), 0);
    // The distributions and the table of live holds start afresh too.
    assert_eq!(rlock_stat(&mut c, "hold_count_lock"), 0);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 0);
    assert_eq!(
        raw(&mut c, &cmd!("RLOCK.TOP", "HELD")),
        Value::Array(vec![])
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o", 30_000)), 1);
    assert_eq!(rlock_stat(&mut c, "acquired"), 1);
}

#[test]
fn long_arguments_are_cut_in_errors() {
    let s = Server::start();
    let mut c = s.conn();
    let huge = "x".repeat(5 * 1024 * 1024);
    let e = err(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o", 30_000, &huge));
    assert!(e.len() < 200, "{} bytes of error", e.len());
    assert!(
        e.contains("unknown option 'xxxx") && e.contains("(5242880 bytes)"),
        "{e}"
    );
}

#[test]
fn renew_refuses_a_hold_count_that_is_not_an_integer() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("HSET", "lk", "o", "abc")), 1);
    for cmd in [
        cmd!("RLOCK.RENEW", "lk", "o", 1_000),
        cmd!("RLOCK.ACQUIRE", "lk", "o", 1_000),
        cmd!("RLOCK.RELEASE", "lk", "o"),
    ] {
        assert_eq!(err(&mut c, &cmd), "ERR lock hold count is not an integer");
    }
    assert_eq!(pttl(&mut c, "lk"), -1, "not renewed");
}

/// RLOCK.INFO reads one field of the hash, not all of them: on a hash of 200,000 fields it
/// costs a small fraction of what HGETALL does (both measured by the server, same run).
#[test]
fn lock_info_does_not_read_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    let fill = "for i = 1, 200000 do redis.call('hset', KEYS[1], i, 1) end";
    raw(&mut c, &cmd!("EVAL", fill, 1, "big"));
    assert_eq!(int(&mut c, &cmd!("HLEN", "big")), 200_000);
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    for _ in 0..5 {
        raw(&mut c, &cmd!("RLOCK.INFO", "big"));
        raw(&mut c, &cmd!("HGETALL", "big"));
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let usec = |name: &str| -> f64 {
        stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .and_then(|l| l.split("usec_per_call=").nth(1))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
    };
    let (info, hgetall) = (usec("rlock.info"), usec("hgetall"));
    assert!(
        info * 20.0 < hgetall,
        "RLOCK.INFO {info} µs vs HGETALL {hgetall} µs per call"
    );
}

/// A connection of `s` authenticated as `user` (created by [`acl_user`]).
fn conn_as(s: &Server, user: &str) -> redis::Connection {
    let mut u = s.conn();
    assert_eq!(string(&mut u, &cmd!("AUTH", user, "x")), "OK");
    u
}

/// A grant to a waiter is written for the waiter: its auxiliary keys (a read hold's lease key,
/// a fencing token, leased permits) were checked against its own ACL user when it queued, not
/// against the user whose release freed the object. A user who may use a shared object but
/// not the waiter's hash-tagged keys used to make every such wait fail with `NOPERM` naming
/// the waiter's own key.
#[test]
fn a_waiters_grant_is_not_checked_against_the_user_who_freed_the_object() {
    let s = Server::start();
    let mut c = s.conn();
    let _alice = acl_user(
        &s,
        &mut c,
        "alice",
        &["~s:*", "~{s:*", "~redisson_lock_token:{s:*", "+@all"],
    );
    // Bob may use the shared objects, not their auxiliary keys.
    let mut bob = acl_user(&s, &mut c, "bob", &["~s:*", "+@all"]);

    // A read lock waiting behind bob's write lock.
    assert_eq!(
        int(
            &mut bob,
            &cmd!("RRWLOCK.ACQUIRE", "s:rw", "B", "WRITE", 60_000)
        ),
        1
    );
    let w = Pending::send_on(
        conn_as(&s, "alice"),
        &cmd!(
            "RRWLOCK.ACQUIRE",
            "s:rw",
            "A",
            "READ",
            60_000,
            "BLOCK",
            5_000
        ),
    );
    wait_blocked(&mut c, 1);
    raw(&mut bob, &cmd!("RRWLOCK.RELEASE", "s:rw", "B", "WRITE"));
    assert_eq!(w.reply(), Value::Int(1), "the read lock is alice's");
    assert!(exists(&mut c, "{s:rw}:A:rwlock_timeout:1"), "its lease key");

    // A fenced lock.
    assert_eq!(int(&mut bob, &cmd!("RLOCK.ACQUIRE", "s:l", "B", 60_000)), 1);
    let w = Pending::send_on(
        conn_as(&s, "alice"),
        &cmd!("RLOCK.ACQUIRE", "s:l", "A", 60_000, "BLOCK", 5_000, "FENCE"),
    );
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut bob, &cmd!("RLOCK.RELEASE", "s:l", "B")), 0);
    assert!(w.reply_int() > 1, "a fencing token for alice");
    assert_eq!(hgetall(&mut c, "s:l").len(), 1, "held by alice");

    // A leased permit.
    let w = Pending::send_on(
        conn_as(&s, "alice"),
        &cmd!("RSEM.ACQUIRE", "s:sem", "LEASE", 60_000, "BLOCK", 5_000),
    );
    wait_blocked(&mut c, 1);
    raw(&mut bob, &cmd!("RSEM.RELEASE", "s:sem"));
    let granted = w.reply();
    assert!(
        matches!(&granted, Value::BulkString(_) | Value::Array(_)),
        "a permit id for alice: {granted:?}"
    );
    assert_eq!(int(&mut c, &cmd!("ZCARD", "{s:sem}:timeout")), 1);
}

/// A semaphore's count is a latch's count (Redisson's layouts: one integer string), and
/// `RLATCH.AWAIT` needs read access only. A user who may only read a semaphore used to queue
/// an await on it and so keep every `RSEM.ACQUIRE` from being granted (`WRONGTYPE`: latch
/// requests wait on this key) for as long as it liked. Latch waiters take nothing, so a
/// semaphore's newcomer is decided as if they were not there; one that must wait ends them
/// (with the error a latch wait on a semaphore gets) and queues.
#[test]
fn a_read_only_latch_wait_does_not_hold_a_semaphore_hostage() {
    let s = Server::start();
    let mut c = s.conn();
    let mut alice = acl_user(&s, &mut c, "alice", &["~a:*", "~{a:*", "+@all"]);
    let _carol = acl_user(&s, &mut c, "carol", &["%R~a:*", "+@all"]);
    assert_eq!(int(&mut alice, &cmd!("RSEM.TRYSETPERMITS", "a:sem", 2)), 1);
    let mut carol = conn_as(&s, "carol");
    let e = err(&mut carol, &cmd!("RSEM.ACQUIRE", "a:sem"));
    assert!(e.starts_with("NOPERM"), "carol may only read: {e}");
    let await_ = Pending::send_on(
        conn_as(&s, "carol"),
        &cmd!("RLATCH.AWAIT", "a:sem", "BLOCK", 10_000),
    );
    wait_blocked(&mut c, 1);
    // Permits are free: granted at once, as if nobody waited.
    assert_eq!(int(&mut alice, &cmd!("RSEM.ACQUIRE", "a:sem")), 1);
    // The count is 1. A request for two that would not wait, or that is refused, holds
    // nothing up: carol's await goes on waiting.
    let mut dave = acl_user(&s, &mut c, "dave", &["~a:*", "+@all"]);
    assert_eq!(
        raw(&mut alice, &cmd!("RSEM.ACQUIRE", "a:sem", "PERMITS", 2)),
        Value::Nil
    );
    let e = err(
        &mut dave,
        &cmd!(
            "RSEM.ACQUIRE",
            "a:sem",
            "PERMITS",
            2,
            "LEASE",
            60_000,
            "BLOCK",
            1_000
        ),
    );
    assert!(
        e.starts_with("NOPERM"),
        "dave may not write the permits' set: {e}"
    );
    assert_eq!(
        rlock_stat(&mut c, "waiters"),
        1,
        "carol's await still waits"
    );
    // Alice's request for two must wait: carol's await ends and alice queues.
    let w = Pending::send_on(
        conn_as(&s, "alice"),
        &cmd!("RSEM.ACQUIRE", "a:sem", "PERMITS", 2, "BLOCK", 10_000),
    );
    let ended = await_.reply_within(Duration::from_secs(5));
    assert!(
        error_text(&ended).is_some_and(|e| e.starts_with("WRONGTYPE")),
        "carol's await ends: {ended:?}"
    );
    wait_blocked(&mut c, 1);
    assert_eq!(
        int(&mut alice, &cmd!("RSEM.RELEASE", "a:sem")),
        0,
        "the count left once alice took hers"
    );
    assert_eq!(w.reply_int(), 1, "alice got her two permits");
    assert_eq!(string(&mut c, &cmd!("GET", "a:sem")), "0");
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
    // A latch's own waiters still queue, and a count-down opens them.
    assert_eq!(int(&mut alice, &cmd!("RLATCH.TRYSETCOUNT", "a:l", 1)), 1);
    let await_ = Pending::send_on(
        conn_as(&s, "carol"),
        &cmd!("RLATCH.AWAIT", "a:l", "BLOCK", 10_000),
    );
    wait_blocked(&mut c, 1);
    raw(&mut alice, &cmd!("RLATCH.COUNTDOWN", "a:l"));
    assert_eq!(await_.reply(), Value::Int(1));
}

/// The value after `name` in a flat (RESP2) map reply.
fn reply_field(v: &Value, name: &str) -> Value {
    let Value::Array(f) = v else { panic!("{v:?}") };
    map_field(f, name)
        .cloned()
        .unwrap_or_else(|| panic!("no {name} in {v:?}"))
}

/// `RLOCK.INFO` and `RSEM.INFO` read keys beside the object (the fencing-token counter, the
/// leased-permit set): a user who may read the object but not those keys sees no token and no
/// permit ids (an id is what releases or renews a leased permit), where it used to see both.
#[test]
fn info_shows_what_beside_the_object_only_to_users_who_may_read_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut narrow = acl_user(&s, &mut c, "narrow", &["~b:*", "+@all"]);
    assert!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "b:t", "o", 60_000, "FENCE")) > 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "b:s", 1)), 1);
    let got = raw(&mut c, &cmd!("RSEM.ACQUIRE", "b:s", "LEASE", 60_000));
    let id = match &got {
        Value::Array(ids) if ids.len() == 1 => text(&ids[0]),
        other => text(other),
    }
    .unwrap_or_else(|| panic!("a permit id: {got:?}"));
    // The administrator sees both.
    let info = raw(&mut c, &cmd!("RLOCK.INFO", "b:t"));
    assert!(
        matches!(reply_field(&info, "token"), Value::Int(t) if t > 1),
        "{info:?}"
    );
    let info = raw(&mut c, &cmd!("RSEM.INFO", "b:s"));
    assert!(format!("{info:?}").contains(&id), "{info:?}");
    // The narrow user sees the objects, not what lies beside them.
    let e = err(&mut narrow, &cmd!("GET", "redisson_lock_token:{b:t}"));
    assert!(e.starts_with("NOPERM"), "{e}");
    let info = raw(&mut narrow, &cmd!("RLOCK.INFO", "b:t"));
    assert_eq!(reply_field(&info, "token"), Value::Nil, "{info:?}");
    assert_eq!(
        reply_field(&info, "owner"),
        Value::BulkString(b"o".to_vec())
    );
    let info = raw(&mut narrow, &cmd!("RSEM.INFO", "b:s"));
    assert!(!format!("{info:?}").contains(&id), "{info:?}");
    let Value::Array(leased) = reply_field(&info, "leased") else {
        panic!("{info:?}")
    };
    assert_eq!(leased.len(), 1, "the lease is counted: {info:?}");
    assert!(
        matches!(&leased[0], Value::Array(l) if l[0] == Value::Nil),
        "its id is not shown: {info:?}"
    );
}

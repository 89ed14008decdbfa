//! RMLOCK.*: Redisson 4.x's grouped MultiLock (`RedissonFasterMultiLock`) on the server: the
//! hash layout Redisson's scripts read and write (`F` = holder, `F:<holder>:expire_time`,
//! `F:<holder>:lock_count`, hash TTL = longest lease), all-or-none acquires and releases,
//! lapsed holds read as free, errors and ACL, interop with Redisson's own scripts, and waits.

use rlock_tests::redisson::multilock as redisson;
use rlock_tests::*;
use std::collections::BTreeMap;
use std::time::Duration;

const G: &str = "grp";

fn acquire(c: &mut redis::Connection, owner: &str, lease: i64, fields: &[&str]) -> Value {
    let mut cmd = cmd!("RMLOCK.ACQUIRE", G, owner, lease, "FIELDS", fields.len());
    cmd.arg(fields);
    raw(c, &cmd)
}

fn owned(c: &mut redis::Connection, name: &str, owner: &str, lease: i64, f: &[&str]) -> Value {
    let mut cmd = cmd!(name, G, owner, lease, "FIELDS", f.len());
    cmd.arg(f);
    raw(c, &cmd)
}

fn release(c: &mut redis::Connection, owner: &str, lease: i64, f: &[&str]) -> Value {
    owned(c, "RMLOCK.RELEASE", owner, lease, f)
}

fn unowned(c: &mut redis::Connection, name: &str, f: &[&str]) -> Value {
    let mut cmd = cmd!(name, G, "FIELDS", f.len());
    cmd.arg(f);
    raw(c, &cmd)
}

/// `RMLOCK.INFO` as `field -> (holder, lock_count, expire_time)`.
fn info(
    c: &mut redis::Connection,
    f: &[&str],
) -> BTreeMap<String, (Option<String>, i64, Option<i64>)> {
    let Value::Array(rows) = unowned(c, "RMLOCK.INFO", f) else {
        panic!("RMLOCK.INFO is an array")
    };
    rows.iter()
        .map(|r| match r {
            Value::Array(v) => {
                let n = |v: &Value| match v {
                    Value::Int(n) => Some(*n),
                    Value::Nil => None,
                    other => panic!("{other:?}"),
                };
                (
                    text(&v[0]).unwrap(),
                    (text(&v[1]), n(&v[2]).unwrap(), n(&v[3])),
                )
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The three fields of `f` held by `owner`, with the hash's values for them.
fn held(h: &BTreeMap<String, String>, f: &str, owner: &str) -> (i64, i64) {
    assert_eq!(h.get(f).map(String::as_str), Some(owner), "{f} in {h:?}");
    let n = |k: String| h[&k].parse::<i64>().unwrap();
    (
        n(format!("{f}:{owner}:expire_time")),
        n(format!("{f}:{owner}:lock_count")),
    )
}

#[test]
fn acquire_writes_redissons_layout() {
    let s = Server::start();
    let mut c = s.conn();
    let before = redisson::now_ms();
    assert_eq!(
        acquire(&mut c, "uuid-1:7", 10_000, &["a", "b"]),
        Value::Int(1)
    );
    let after = redisson::now_ms();
    let h = hgetall(&mut c, G);
    assert_eq!(h.len(), 6, "{h:?}");
    for f in ["a", "b"] {
        let (expire, count) = held(&h, f, "uuid-1:7");
        assert_eq!(count, 1);
        assert_between("expire_time", expire, before + 10_000, after + 10_000);
    }
    assert_eq!(string(&mut c, &cmd!("TYPE", G)), "hash");
    assert_between("PTTL", pttl(&mut c, G), 9_000, 10_000);
    assert_eq!(dbsize(&mut c), 1, "no key beside the group's hash");
}

#[test]
fn reentry_counts_and_release_frees_at_zero() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "o1", 10_000, &["a", "b"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "o1", 30_000, &["a"]), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!(held(&h, "a", "o1").1, 2);
    assert_eq!(held(&h, "b", "o1").1, 1);
    assert_between(
        "PTTL raised to the longer lease",
        pttl(&mut c, G),
        29_000,
        30_000,
    );
    // A duplicate field is one value: counted once.
    assert_eq!(acquire(&mut c, "o1", 10_000, &["b", "b"]), Value::Int(1));
    assert_eq!(held(&hgetall(&mut c, G), "b", "o1").1, 2);
    assert_eq!(
        release(&mut c, "o1", 10_000, &["b"]),
        Value::Int(0),
        "b still held once"
    );
    // Some values freed, some still held: 0 (Redisson's allDeleted).
    assert_eq!(release(&mut c, "o1", 10_000, &["a", "b"]), Value::Int(0));
    let h = hgetall(&mut c, G);
    assert_eq!(held(&h, "a", "o1").1, 1);
    assert_eq!(h.len(), 3, "b's three fields went: {h:?}");
    assert_eq!(release(&mut c, "o1", 10_000, &["a"]), Value::Int(1));
    assert!(!exists(&mut c, G), "an emptied hash is deleted");
    assert_eq!(release(&mut c, "o1", 10_000, &["a"]), Value::Nil);
}

#[test]
fn all_or_none() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "o1", 30_000, &["b"]), Value::Int(1));
    let before = hgetall(&mut c, G);
    let ttl_before = int(&mut c, &cmd!("PEXPIRETIME", G));
    assert_eq!(acquire(&mut c, "o2", 60_000, &["a", "b"]), Value::Nil);
    assert_eq!(
        hgetall(&mut c, G),
        before,
        "a refused acquire writes nothing"
    );
    assert_eq!(int(&mut c, &cmd!("PEXPIRETIME", G)), ttl_before);
    assert_eq!(
        acquire(&mut c, "o2", 30_000, &["a", "c"]),
        Value::Int(1),
        "disjoint"
    );
    // A release naming one value not the caller's releases nothing.
    let before = hgetall(&mut c, G);
    assert_eq!(release(&mut c, "o2", 30_000, &["a", "b"]), Value::Nil);
    assert_eq!(hgetall(&mut c, G), before);
    // RENEW likewise: 0, nothing written.
    assert_eq!(
        owned(&mut c, "RMLOCK.RENEW", "o2", 90_000, &["a", "b"]),
        Value::Int(0)
    );
    assert_eq!(hgetall(&mut c, G), before);
    assert_eq!(
        owned(&mut c, "RMLOCK.RENEW", "o2", 90_000, &["a", "c"]),
        Value::Int(1)
    );
    let (expire, _) = held(&hgetall(&mut c, G), "c", "o2");
    assert_between("renewed", expire - redisson::now_ms(), 89_000, 90_000);
    assert_between("PTTL raised", pttl(&mut c, G), 89_000, 90_000);
}

#[test]
fn a_lapsed_holders_value_is_free_while_the_hash_lives_on() {
    let s = Server::start();
    let mut c = s.conn();
    let lease = margin_ms(100);
    assert_eq!(acquire(&mut c, "o1", lease, &["a"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "o1", 60_000, &["b"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "o2", 60_000, &["a"]), Value::Nil);
    // The behaviour is the lease's end: wait past it.
    std::thread::sleep(Duration::from_millis(lease as u64 + 20));
    assert!(exists(&mut c, G), "the hash lives on for b");
    assert_eq!(info(&mut c, &["a"])["a"], (None, 0, None));
    assert_eq!(
        release(&mut c, "o1", 1_000, &["a"]),
        Value::Nil,
        "the lapsed holder lost a"
    );
    assert_eq!(acquire(&mut c, "o2", 60_000, &["a"]), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!(held(&h, "a", "o2").1, 1);
    assert!(
        !h.contains_key("a:o1:expire_time") && !h.contains_key("a:o1:lock_count"),
        "the lapsed holder's fields are deleted: {h:?}"
    );
    assert_eq!(held(&h, "b", "o1").1, 1);
}

#[test]
fn info_and_force_release() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "o1", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "o2", 30_000, &["c"]), Value::Int(1));
    let i = info(&mut c, &["a", "c", "z"]);
    let (expire, _) = held(&hgetall(&mut c, G), "a", "o1");
    assert_eq!(i["a"], (Some("o1".into()), 1, Some(expire)));
    assert_eq!(i["c"].0.as_deref(), Some("o2"));
    assert_eq!(i["z"], (None, 0, None));
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    assert_eq!(
        unowned(&mut c, "RMLOCK.FORCERELEASE", &["a", "c", "z"]),
        Value::Int(2)
    );
    let h = hgetall(&mut c, G);
    assert_eq!(
        h.keys().collect::<Vec<_>>(),
        ["b", "b:o1:expire_time", "b:o1:lock_count"]
    );
    assert_eq!(
        sub.drain(&mut c),
        [("redisson_lock__channel:{grp}".to_string(), "0".to_string())]
    );
    assert_eq!(
        unowned(&mut c, "RMLOCK.FORCERELEASE", &["b"]),
        Value::Int(1)
    );
    assert!(!exists(&mut c, G));
    assert_eq!(
        unowned(&mut c, "RMLOCK.FORCERELEASE", &["b"]),
        Value::Int(0)
    );
}

#[test]
fn release_publishes_redissons_unlock_message() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    assert_eq!(acquire(&mut c, "o1", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "o1", 30_000, &["a"]), Value::Int(1));
    assert_eq!(release(&mut c, "o1", 30_000, &["a"]), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [], "a re-entry's release frees nothing");
    assert_eq!(release(&mut c, "o1", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(
        sub.drain(&mut c),
        [("redisson_lock__channel:{grp}".to_string(), "0".to_string())]
    );
}

#[test]
fn errors() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("SET", "str", "x")), "OK");
    for cmd in [
        cmd!("RMLOCK.ACQUIRE", "str", "o", 1_000, "FIELDS", 1, "a"),
        cmd!("RMLOCK.RELEASE", "str", "o", 1_000, "FIELDS", 1, "a"),
        cmd!("RMLOCK.RENEW", "str", "o", 1_000, "FIELDS", 1, "a"),
        cmd!("RMLOCK.FORCERELEASE", "str", "FIELDS", 1, "a"),
        cmd!("RMLOCK.INFO", "str", "FIELDS", 1, "a"),
    ] {
        assert!(err(&mut c, &cmd).starts_with("WRONGTYPE"), "{}", show(&cmd));
    }
    // A lock's hash is not a group's: nothing is written beside the lock.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "app:1", 30_000)),
        1
    );
    let e = err(
        &mut c,
        &cmd!("RMLOCK.ACQUIRE", "lk", "o", 1_000, "FIELDS", 1, "a"),
    );
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    assert_eq!(int(&mut c, &cmd!("HLEN", "lk")), 1);
    let e = |c: &mut redis::Connection, cmd: redis::Cmd| err(c, &cmd);
    assert_eq!(
        e(&mut c, cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 1)),
        "ERR wrong number of arguments for 'rmlock.acquire' command"
    );
    assert_eq!(
        e(&mut c, cmd!("RMLOCK.INFO", G, "FIELDS")),
        "ERR wrong number of arguments for 'rmlock.info' command"
    );
    assert_eq!(
        e(
            &mut c,
            cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 3, "a", "b")
        ),
        "ERR syntax error, FIELDS count is 3 but only 2 arguments follow"
    );
    assert_eq!(
        e(
            &mut c,
            cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 0, "a")
        ),
        "ERR FIELDS count must be at least 1"
    );
    assert_eq!(
        e(&mut c, cmd!("RMLOCK.INFO", G, "FIELDS", "x", "a")),
        "ERR FIELDS count is not an integer or out of range"
    );
    assert!(e(
        &mut c,
        cmd!("RMLOCK.RELEASE", G, "o", 1_000, "FIELDS", 1, "a", "b")
    )
    .contains("after the fields"));
    assert!(e(
        &mut c,
        cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELD", 1, "a")
    )
    .starts_with("ERR syntax error, expected FIELDS"));
    assert_eq!(
        e(&mut c, cmd!("RMLOCK.ACQUIRE", G, "o", 0, "FIELDS", 1, "a")),
        "ERR lease_ms must be at least 1"
    );
    assert_eq!(
        e(
            &mut c,
            cmd!("RMLOCK.ACQUIRE", G, "", 1_000, "FIELDS", 1, "a")
        ),
        "ERR owner must not be empty"
    );
    assert_eq!(
        e(
            &mut c,
            cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 1, "a", "NX")
        ),
        "ERR syntax error, unknown option 'NX'"
    );
    // A read-write lock's hash is not a group.
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.ACQUIRE", "rw", "o", "READ", 10_000)),
        1
    );
    let rw = hgetall(&mut c, "rw");
    assert!(err(
        &mut c,
        &cmd!("RMLOCK.ACQUIRE", "rw", "o", 1_000, "FIELDS", 1, "a")
    )
    .starts_with("WRONGTYPE"));
    assert_eq!(hgetall(&mut c, "rw"), rw);
    assert!(!exists(&mut c, G), "no error wrote anything");
}

#[test]
fn acl_key_patterns_and_command_metadata() {
    let s = Server::start();
    let mut c = s.conn();
    let mut other = acl_user(&s, &mut c, "other", &["~app2:*", "+@all"]);
    let mut mine = acl_user(&s, &mut c, "mine", &["~grp", "+@all"]);
    assert!(err(
        &mut other,
        &cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 1, "a")
    )
    .starts_with("NOPERM"));
    assert!(err(&mut other, &cmd!("RMLOCK.INFO", G, "FIELDS", 1, "a")).starts_with("NOPERM"));
    assert!(err(
        &mut other,
        &cmd!("RMLOCK.FORCERELEASE", G, "FIELDS", 1, "a")
    )
    .starts_with("NOPERM"));
    assert_eq!(
        int(
            &mut mine,
            &cmd!("RMLOCK.ACQUIRE", G, "o", 1_000, "FIELDS", 1, "a")
        ),
        1
    );
    assert_eq!(
        int(
            &mut mine,
            &cmd!("RMLOCK.RELEASE", G, "o", 1_000, "FIELDS", 1, "a")
        ),
        1
    );
    assert_command_info(
        &mut c,
        "rmlock.acquire",
        -7,
        &["write", "denyoom", "blocking"],
        &[],
    );
    assert_command_info(
        &mut c,
        "rmlock.release",
        -7,
        &["write", "fast"],
        &["denyoom"],
    );
    assert_command_info(&mut c, "rmlock.renew", -7, &["write", "fast"], &["denyoom"]);
    assert_command_info(&mut c, "rmlock.forcerelease", -5, &["write"], &["denyoom"]);
    assert_command_info(&mut c, "rmlock.info", -5, &["readonly"], &["write"]);
    assert!(command_summary(&mut c, "rmlock.acquire").contains("grouped MultiLock"));
    assert_eq!(
        strings(&cmd_getkeys(
            &mut c,
            &["RMLOCK.ACQUIRE", G, "o", "1", "FIELDS", "1", "a"]
        )),
        [G]
    );
}

fn cmd_getkeys(c: &mut redis::Connection, argv: &[&str]) -> Value {
    let mut cmd = cmd!("COMMAND", "GETKEYS");
    cmd.arg(argv);
    raw(c, &cmd)
}

#[test]
fn redissons_scripts_and_the_module_share_the_group() {
    let s = Server::start();
    let mut c = s.conn();
    // Redisson's acquire holds a: the module refuses another owner and re-enters for the same.
    assert_eq!(
        redisson::try_lock(&mut c, G, "java:1", 30_000, &["a"]),
        Value::Nil
    );
    assert_eq!(acquire(&mut c, "rust:1", 30_000, &["a", "b"]), Value::Nil);
    assert_eq!(acquire(&mut c, "java:1", 30_000, &["a"]), Value::Int(1));
    assert_eq!(held(&hgetall(&mut c, G), "a", "java:1").1, 2);
    // Redisson's unlock counts the module's hold, the module's release Redisson's.
    assert_eq!(
        redisson::unlock(&mut c, G, "java:1", 30_000, &["a"]),
        Value::Int(0)
    );
    assert_eq!(release(&mut c, "java:1", 30_000, &["a"]), Value::Int(1));
    assert!(!exists(&mut c, G));

    // The module holds c: Redisson's scripts see it held, renew it and release it.
    assert_eq!(acquire(&mut c, "rust:1", 30_000, &["c"]), Value::Int(1));
    match redisson::try_lock(&mut c, G, "java:2", 30_000, &["b", "c"]) {
        Value::Int(ttl) => assert_between("Redisson's wait", ttl, 29_000, 30_000),
        other => panic!("Redisson's acquire must see c held: {other:?}"),
    }
    assert_eq!(
        redisson::try_lock_once(&mut c, G, "java:2", 30_000, &["c"]),
        0
    );
    assert_eq!(redisson::renew(&mut c, G, "java:2", 60_000, &["c"]), 0);
    assert_eq!(redisson::renew(&mut c, G, "rust:1", 60_000, &["c"]), 1);
    assert_between("renewed by Redisson", pttl(&mut c, G), 59_000, 60_000);
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel:*");
    assert_eq!(
        redisson::unlock(&mut c, G, "rust:1", 30_000, &["c"]),
        Value::Int(1)
    );
    assert_eq!(sub.drain(&mut c), [(lock_channel(G), "0".to_string())]);
    assert!(!exists(&mut c, G));

    // Redisson's once-acquire and force unlock, read by the module.
    assert_eq!(
        redisson::try_lock_once(&mut c, G, "java:3", 30_000, &["d", "e"]),
        1
    );
    assert_eq!(info(&mut c, &["d"])["d"].0.as_deref(), Some("java:3"));
    assert_eq!(
        owned(&mut c, "RMLOCK.RENEW", "java:3", 60_000, &["d", "e"]),
        Value::Int(1)
    );
    assert_eq!(redisson::force_unlock(&mut c, G, &["d"]), 1);
    assert_eq!(
        unowned(&mut c, "RMLOCK.FORCERELEASE", &["e"]),
        Value::Int(1)
    );
    assert!(!exists(&mut c, G));
}

/// A value Redisson's script left to a lapsed holder (its acquire overwrites `F` and keeps the
/// old holder's fields) is read by the module as Redisson reads it.
#[test]
fn redissons_leftovers_of_a_lapsed_hold_are_tidied() {
    let s = Server::start();
    let mut c = s.conn();
    let lease = margin_ms(100);
    assert_eq!(
        redisson::try_lock(&mut c, G, "java:1", lease, &["a"]),
        Value::Nil
    );
    assert_eq!(
        redisson::try_lock(&mut c, G, "java:1", 60_000, &["b"]),
        Value::Nil
    );
    std::thread::sleep(Duration::from_millis(lease as u64 + 20));
    assert_eq!(
        redisson::try_lock(&mut c, G, "java:2", 60_000, &["a"]),
        Value::Nil
    );
    // Redisson left java:1's fields for a behind.
    assert!(hgetall(&mut c, G).contains_key("a:java:1:lock_count"));
    assert_eq!(
        acquire(&mut c, "rust:1", 60_000, &["a"]),
        Value::Nil,
        "java:2 holds a"
    );
    assert_eq!(info(&mut c, &["a"])["a"].0.as_deref(), Some("java:2"));
}

// ---- waits ---------------------------------------------------------------------------------------

fn park(s: &Server, c: &mut redis::Connection, owner: &str, f: &[&str], n: i64) -> Pending {
    let mut cmd = cmd!("RMLOCK.ACQUIRE", G, owner, 30_000, "FIELDS", f.len());
    cmd.arg(f);
    cmd.arg("BLOCK").arg(30_000);
    let p = Pending::send(s, &cmd);
    wait_blocked(c, n);
    p
}

#[test]
fn block_waits_and_is_handed_the_values_on_release() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "h", 30_000, &["a", "b"]), Value::Int(1));
    let w1 = park(&s, &mut c, "w1", &["a"], 1);
    let w2 = park(&s, &mut c, "w2", &["a", "b"], 2);
    // Released: w1 is granted in the same step (HGETALL right after the release shows it).
    assert_eq!(release(&mut c, "h", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(held(&hgetall(&mut c, G), "a", "w1").1, 1);
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(release(&mut c, "w1", 30_000, &["a"]), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!((held(&h, "a", "w2").1, held(&h, "b", "w2").1), (1, 1));
    assert_eq!(w2.reply_int(), 1);
    assert_eq!(rlock_stat(&mut c, "mlock_handoffs"), 2);
}

#[test]
fn block_timeout_replies_nil() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "h", 30_000, &["a"]), Value::Int(1));
    let wait = margin_ms(150);
    let mut cmd = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "w",
        30_000,
        "FIELDS",
        1,
        "a",
        "BLOCK",
        wait
    );
    let p = Pending::send(&s, &cmd);
    assert_eq!(p.reply_within(Duration::from_secs(10)), Value::Nil);
    assert_eq!(rlock_stat(&mut c, "mlock_waits_timed_out"), 1);
    cmd = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "w",
        30_000,
        "FIELDS",
        1,
        "z",
        "BLOCK",
        wait
    );
    assert_eq!(
        raw(&mut c, &cmd),
        Value::Int(1),
        "a free value is granted at once"
    );
}

#[test]
fn a_values_lease_end_hands_it_to_its_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    let lease = margin_ms(200);
    assert_eq!(acquire(&mut c, "h", lease, &["a"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "h", 60_000, &["b"]), Value::Int(1));
    let w = park(&s, &mut c, "w", &["a"], 1);
    // The hash lives on (b's lease): only a's expire_time passing can wake the waiter.
    assert_eq!(w.reply_within(Duration::from_secs(10)), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!(held(&h, "a", "w").1, 1);
    assert!(!h.contains_key("a:h:expire_time"), "{h:?}");
    assert_eq!(held(&h, "b", "h").1, 1);
    assert_eq!(rlock_stat(&mut c, "mlock_handoffs"), 1);
}

#[test]
fn disjoint_waiters_are_both_granted_in_one_step() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "h", 30_000, &["a", "b"]), Value::Int(1));
    let w1 = park(&s, &mut c, "w1", &["a"], 1);
    let w2 = park(&s, &mut c, "w2", &["b"], 2);
    assert_eq!(release(&mut c, "h", 30_000, &["a", "b"]), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!((held(&h, "a", "w1").1, held(&h, "b", "w2").1), (1, 1));
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn a_waiter_is_not_overtaken_on_its_values_and_does_not_block_others() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "h1", 30_000, &["a"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "h2", 30_000, &["b"]), Value::Int(1));
    let first = park(&s, &mut c, "first", &["a", "b"], 1);
    let later = park(&s, &mut c, "later", &["a"], 2);
    // A newcomer on a value nobody waits for passes the queue at once.
    assert_eq!(acquire(&mut c, "n", 30_000, &["c"]), Value::Int(1));
    assert_eq!(
        owned(&mut c, "RMLOCK.RELEASE", "n", 1, &["c"]),
        Value::Int(1)
    );
    let third = park(&s, &mut c, "third", &["b"], 3);
    // a freed: `first` still waits for b, and `later` may not take a past it.
    assert_eq!(release(&mut c, "h1", 30_000, &["a"]), Value::Int(1));
    assert_eq!(
        info(&mut c, &["a"])["a"].0,
        None,
        "a stays free for the first waiter"
    );
    assert_eq!(
        acquire(&mut c, "n", 30_000, &["a"]),
        Value::Nil,
        "a newcomer does not take a free value past a waiter that wants it"
    );
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 3);
    // b freed: `first` takes both; `later` and `third` wait for it.
    assert_eq!(release(&mut c, "h2", 30_000, &["b"]), Value::Int(1));
    assert_eq!(first.reply_int(), 1);
    let h = hgetall(&mut c, G);
    assert_eq!((held(&h, "a", "first").1, held(&h, "b", "first").1), (1, 1));
    assert_eq!(release(&mut c, "first", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(later.reply_int(), 1);
    assert_eq!(third.reply_int(), 1);
    let h = hgetall(&mut c, G);
    assert_eq!((held(&h, "a", "later").1, held(&h, "b", "third").1), (1, 1));
}

/// Past a head that must wait, serving tries only the first waiters of the values that changed:
/// a waiter that leaves changes the values it wanted for the waiter behind it.
#[test]
fn a_waiter_leaving_lets_the_one_behind_it_take_a_free_value() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "h", 30_000, &["hot"]), Value::Int(1));
    let _head = park(&s, &mut c, "head", &["hot"], 1);
    // `first` waits for hot; `behind` for a (free), which `first` wants before it.
    let mut cmd = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "first",
        30_000,
        "FIELDS",
        2,
        "hot",
        "a"
    );
    cmd.arg("BLOCK").arg(margin_ms(150));
    let first = Pending::send(&s, &cmd);
    wait_blocked(&mut c, 2);
    let behind = park(&s, &mut c, "behind", &["a"], 3);
    assert_eq!(first.reply_within(Duration::from_secs(10)), Value::Nil);
    // Its timeout hands a on, while the head still waits for hot.
    assert_eq!(behind.reply_within(Duration::from_secs(10)), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!((held_by(&h, "a"), held_by(&h, "hot")), ("behind", "h"));
}

/// A lease that ends hands its value to its first waiter past a head that still waits, and
/// the group's hash expiring (every lease ended) hands every value on, the head's too.
#[test]
fn a_lease_end_hands_values_past_a_waiting_head() {
    let s = Server::start();
    let mut c = s.conn();
    let lease = margin_ms(200);
    assert_eq!(acquire(&mut c, "h", 60_000, &["hot"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "s", lease, &["a"]), Value::Int(1));
    let head = park(&s, &mut c, "head", &["hot"], 1);
    let w = park(&s, &mut c, "w", &["a"], 2);
    // A newcomer's look at the queue (it serves it first) finds a still held.
    assert_eq!(acquire(&mut c, "n", 30_000, &["a"]), Value::Nil);
    // The hash lives on for hot: only a's expire_time passing wakes `w`.
    assert_eq!(w.reply_within(Duration::from_secs(10)), Value::Int(1));
    assert_eq!(held_by(&hgetall(&mut c, G), "hot"), "h");
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
    drop(head);
    wait_blocked(&mut c, 0);

    let g2 = "grp2";
    // Without active expiry the hash expires when serving opens it (as it may before the
    // server's expiry cycle reaches it): no event tells serving what was freed.
    assert_eq!(
        raw(&mut c, &cmd!("DEBUG", "SET-ACTIVE-EXPIRE", 0)),
        Value::Okay
    );
    let mut acq = |owner: &str, lease: i64, f: &[&str]| {
        let mut cmd = cmd!("RMLOCK.ACQUIRE", g2, owner, lease, "FIELDS", f.len());
        cmd.arg(f);
        raw(&mut c, &cmd)
    };
    assert_eq!(acq("h", lease, &["a", "b"]), Value::Int(1));
    let park2 = |c: &mut redis::Connection, owner: &str, f: &str, n: i64| {
        let mut cmd = cmd!("RMLOCK.ACQUIRE", g2, owner, 30_000, "FIELDS", 1, f);
        cmd.arg("BLOCK").arg(30_000);
        let p = Pending::send(&s, &cmd);
        wait_blocked(c, n);
        p
    };
    let w1 = park2(&mut c, "w1", "a", 1);
    let _w1b = park2(&mut c, "w1b", "a", 2);
    let w2 = park2(&mut c, "w2", "b", 3);
    let cmd = cmd!("RMLOCK.ACQUIRE", g2, "n", 30_000, "FIELDS", 1, "b");
    assert_eq!(
        raw(&mut c, &cmd),
        Value::Nil,
        "b is held, and w2 waits for it"
    );
    // Both leases end with the hash: w1 (the head) takes a, w1b waits for it, and w2 takes b
    // past w1b in the same step, although the hash holds only w1's value by the time w2 is
    // looked at.
    assert_eq!(w1.reply_within(Duration::from_secs(10)), Value::Int(1));
    assert_eq!(w2.reply_within(Duration::from_secs(10)), Value::Int(1));
    let h = hgetall(&mut c, g2);
    assert_eq!((held_by(&h, "a"), held_by(&h, "b")), ("w1", "w2"));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
}

/// Every string and integer of a reply, flattened in order.
fn flat(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().flat_map(flat).collect(),
        Value::Map(kv) => kv
            .iter()
            .flat_map(|(k, v)| [flat(k), flat(v)].concat())
            .collect(),
        Value::Int(n) => vec![n.to_string()],
        other => text(other).into_iter().collect(),
    }
}

#[test]
fn session_queue_top_and_counters() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "o1", 30_000, &["a", "b"]), Value::Int(1));
    // Another value while holding some: the same hold of the group (a re-entry).
    assert_eq!(acquire(&mut c, "o1", 30_000, &["c"]), Value::Int(1));
    assert_eq!(
        (
            rlock_stat(&mut c, "mlock_acquired"),
            rlock_stat(&mut c, "mlock_reentries")
        ),
        (1, 1)
    );
    assert_eq!(acquire(&mut c, "o2", 30_000, &["a"]), Value::Nil);
    assert_eq!(rlock_stat(&mut c, "mlock_busy"), 1);
    let held = flat(&raw(&mut c, &cmd!("RLOCK.TOP", "HELD")));
    assert_eq!(
        held[..10],
        [
            "key",
            G,
            "db",
            "0",
            "kind",
            "multilock",
            "mode",
            "exclusive",
            "owner",
            "o1"
        ],
        "{held:?}"
    );
    let w = park(&s, &mut c, "w", &["a"], 1);
    let waits = flat(&raw(&mut c, &cmd!("RLOCK.TOP", "WAITS")));
    assert_eq!(
        waits[..6],
        ["key", G, "db", "0", "kind", "multilock"],
        "{waits:?}"
    );
    assert_eq!(
        waits.last().map(String::as_str),
        Some("1"),
        "one waiter: {waits:?}"
    );

    // Queued in a session on b; a request on a value nobody holds is granted at once.
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 5_000));
    let q1 = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "q1",
        30_000,
        "FIELDS",
        1,
        "b",
        "SESSION",
        "app",
        "QUEUE",
        1,
        0
    );
    assert_eq!(raw(&mut c, &q1), Value::SimpleString("QUEUED".into()));
    let q2 = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "q2",
        30_000,
        "FIELDS",
        1,
        "z",
        "SESSION",
        "app",
        "QUEUE",
        2,
        0
    );
    assert_eq!(raw(&mut c, &q2), Value::Int(1));
    assert_eq!(rlock_stat(&mut c, "mlock_waiters"), 2);

    assert_eq!(
        release(&mut c, "o1", 30_000, &["a", "b", "c"]),
        Value::Int(1)
    );
    assert_eq!(w.reply_int(), 1);
    let h = hgetall(&mut c, G);
    assert_eq!(
        (held_by(&h, "a"), held_by(&h, "b"), held_by(&h, "z")),
        ("w", "q1", "q2")
    );
    let outcome = flat(&raw(&mut c, &cmd!("RSESSION.READ", "app", 0)));
    assert!(
        outcome.iter().any(|x| x == "granted") && outcome.iter().any(|x| x == "multilock"),
        "{outcome:?}"
    );
    assert_eq!(rlock_stat(&mut c, "mlock_handoffs"), 2);
    assert_eq!(rlock_stat(&mut c, "mlock_waits_started"), 2);
    assert_eq!(rlock_stat(&mut c, "mlock_releases"), 1);
    assert_eq!(rlock_stat(&mut c, "mlock_waiters"), 0);
}

fn held_by<'h>(h: &'h BTreeMap<String, String>, f: &str) -> &'h str {
    h.get(f).map(String::as_str).unwrap_or("")
}

/// Deadlock detection reads waits by key; a group's waiters wait for each other only on shared
/// values, so their waits are admitted (never refused as a cycle they are not in).
#[test]
fn a_wait_on_other_values_of_a_group_is_no_deadlock() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "L", "A", 30_000)), 1);
    assert_eq!(acquire(&mut c, "C", 30_000, &["a"]), Value::Int(1));
    assert_eq!(acquire(&mut c, "D", 30_000, &["c"]), Value::Int(1));
    // B waits (in a session) on a of the group and on the lock A holds.
    raw(&mut c, &cmd!("RSESSION.OPEN", "b", 5_000));
    let on_group = cmd!(
        "RMLOCK.ACQUIRE",
        G,
        "B",
        30_000,
        "FIELDS",
        1,
        "a",
        "SESSION",
        "b",
        "QUEUE",
        1,
        0
    );
    assert_eq!(raw(&mut c, &on_group), Value::SimpleString("QUEUED".into()));
    let on_lock = cmd!(
        "RLOCK.ACQUIRE",
        "L",
        "B",
        30_000,
        "SESSION",
        "b",
        "QUEUE",
        2,
        0
    );
    assert_eq!(raw(&mut c, &on_lock), Value::SimpleString("QUEUED".into()));
    // A waits for c (D's), behind B's wait for a: no cycle, A never waits for B.
    let a = park(&s, &mut c, "A", &["c"], 1);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 0);
    assert_eq!(release(&mut c, "D", 30_000, &["c"]), Value::Int(1));
    assert_eq!(a.reply_int(), 1);
}

/// A value freed by Redisson's own unlock or force-unlock script (the module sees the hash
/// change) goes to the module's waiter at once.
#[test]
fn redissons_unlock_hands_the_value_to_a_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::try_lock(&mut c, G, "java:1", 30_000, &["a", "b"]),
        Value::Nil
    );
    let w1 = park(&s, &mut c, "w1", &["a"], 1);
    let w2 = park(&s, &mut c, "w2", &["b"], 2);
    assert_eq!(
        redisson::unlock(&mut c, G, "java:1", 30_000, &["a", "b"]),
        Value::Int(1)
    );
    assert_eq!(w1.reply_within(Duration::from_secs(10)), Value::Int(1));
    assert_eq!(w2.reply_within(Duration::from_secs(10)), Value::Int(1));
    let h = hgetall(&mut c, G);
    assert_eq!((held_by(&h, "a"), held_by(&h, "b")), ("w1", "w2"));
    let w3 = park(&s, &mut c, "w3", &["a"], 1);
    assert_eq!(redisson::force_unlock(&mut c, G, &["a"]), 1);
    assert_eq!(w3.reply_within(Duration::from_secs(10)), Value::Int(1));
    assert_eq!(held_by(&hgetall(&mut c, G), "a"), "w3");
}

/// Every write reaches a replica without the module as the native command it stands for:
/// the replica's hash and its absolute expiry are the master's, through a hand-off too.
#[test]
fn writes_replicate_as_native_commands() {
    let (master, replica) = start_pair();
    let (mut m, mut r) = (master.conn(), replica.conn());
    assert_eq!(acquire(&mut m, "o1", 30_000, &["a", "b"]), Value::Int(1));
    assert_eq!(acquire(&mut m, "o1", 60_000, &["a"]), Value::Int(1));
    let w = park(&master, &mut m, "w", &["b"], 1);
    assert_eq!(release(&mut m, "o1", 30_000, &["b"]), Value::Int(1));
    assert_eq!(w.reply_int(), 1);
    assert_eq!(
        unowned(&mut m, "RMLOCK.FORCERELEASE", &["z"]),
        Value::Int(0)
    );
    assert_eq!(wait_replicas(&mut m, 1), 1);
    assert_eq!(hgetall(&mut r, G), hgetall(&mut m, G));
    assert_eq!(
        int(&mut r, &cmd!("PEXPIRETIME", G)),
        int(&mut m, &cmd!("PEXPIRETIME", G))
    );
    assert_eq!(release(&mut m, "o1", 30_000, &["a"]), Value::Int(0));
    assert_eq!(release(&mut m, "o1", 30_000, &["a"]), Value::Int(1));
    assert_eq!(release(&mut m, "w", 30_000, &["b"]), Value::Int(1));
    assert_eq!(wait_replicas(&mut m, 1), 1);
    assert!(
        !exists(&mut r, G),
        "the emptied hash is deleted on the replica too"
    );
}

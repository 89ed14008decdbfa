//! A Java service on Redisson and a Rust service on rlock share one read-write lock: Redisson's
//! exact `RReadWriteLock` scripts (reference/redisson.md §2.5, `ReadLockTask` §2.2), sent with
//! EVAL, work on keys RRWLOCK.* wrote and the other way round, and a Redisson unlock hands the
//! lock to a queued RRWLOCK waiter.

use rlock_tests::*;
use std::collections::BTreeMap;

fn acquire(c: &mut redis::Connection, key: &str, owner: &str, mode: &str, lease: i64) -> Value {
    raw(c, &cmd!("RRWLOCK.ACQUIRE", key, owner, mode, lease))
}

fn release(c: &mut redis::Connection, key: &str, owner: &str, mode: &str) -> Value {
    raw(c, &cmd!("RRWLOCK.RELEASE", key, owner, mode))
}

fn fields(p: &[(&str, &str)]) -> BTreeMap<String, String> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Redisson's acquire scripts reply nil when acquired, else the lock's PTTL.
#[track_caller]
fn refused(v: Value) -> i64 {
    match v {
        Value::Int(ttl) => ttl,
        other => panic!("expected Redisson to be refused with a PTTL, got {other:?}"),
    }
}

fn msg(key: &str, payload: &str) -> (String, String) {
    (rwlock_channel(key), payload.to_string())
}

#[test]
fn redisson_reads_and_writes_meet_rrwlock_read_holds() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(1));
    // Another reader through Redisson joins, with its own hold key.
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:7", 20_000),
        Value::Nil
    );
    // The RRWLOCK reader re-enters through Redisson: hold number 2.
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "u:1", 30_000),
        Value::Nil
    );
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("u:1", "2"), ("j:7", "1")])
    );
    assert_between(
        "Redisson's hold key",
        pttl(&mut c, &rwlock_hold("rw", "j:7", 1)),
        19_000,
        20_000,
    );
    assert_between(
        "u:1's second hold",
        pttl(&mut c, &rwlock_hold("rw", "u:1", 2)),
        29_000,
        30_000,
    );
    assert_between("hash", pttl(&mut c, "rw"), 29_000, 30_000);
    // A Redisson writer is refused with the lock's PTTL.
    assert_between(
        "Redisson writer sees the PTTL",
        refused(redisson::write_acquire(&mut c, "rw", "j:8", 5_000)),
        29_000,
        30_000,
    );
    // RRWLOCK sees Redisson's reader and continues its counts.
    let info = rw_info(&mut c, "rw");
    assert_eq!(info.readers.get("j:7"), Some(&1));
    assert_eq!(acquire(&mut c, "rw", "j:7", "READ", 10_000), Value::Int(2));
    assert_eq!(
        string(&mut c, &cmd!("GET", rwlock_hold("rw", "j:7", 2))),
        "1"
    );
}

#[test]
fn redisson_reads_and_writes_meet_an_rrwlock_write_hold() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 10_000), Value::Int(1));
    // The same owner re-enters through Redisson's write script (which adds the lease).
    assert_eq!(
        redisson::write_acquire(&mut c, "rw", "u:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "write"), ("u:1:write", "2")])
    );
    // ... and downgrades through Redisson's read script.
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "u:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "write"), ("u:1:write", "2"), ("u:1", "1")])
    );
    // Others are refused in both modes.
    refused(redisson::read_acquire(&mut c, "rw", "j:7", 10_000));
    refused(redisson::write_acquire(&mut c, "rw", "j:7", 10_000));
    assert_eq!(dbsize(&mut c), 2, "the hash and u:1's hold key");
    // RRWLOCK counts on from Redisson's holds.
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 10_000), Value::Int(3));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(2));
}

#[test]
fn rrwlock_reenters_and_releases_locks_taken_with_redisson() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(acquire(&mut c, "rw", "j:1", "READ", 10_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:2", "WRITE", 10_000), Value::Nil);
    assert_eq!(
        err(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "rw", "j:1", "WRITE", 10_000)
        )
        .split(' ')
        .next(),
        Some("DEADLOCK")
    );
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "j:1", 20_000)), 2);
    assert_eq!(release(&mut c, "rw", "j:1", "READ"), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "j:1", "READ"), Value::Int(0));
    assert!(
        !exists(&mut c, &rwlock_hold("rw", "j:1", 1)),
        "Redisson's hold key"
    );
    assert_eq!(release(&mut c, "rw", "u:1", "READ"), Value::Int(0));
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);

    assert_eq!(
        redisson::write_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(acquire(&mut c, "rw", "j:1", "WRITE", 10_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "j:1", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Nil);
    assert_eq!(release(&mut c, "rw", "j:1", "WRITE"), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "j:1", "WRITE"), Value::Int(0));
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("j:1", "1")])
    );
    assert!(
        sub.drain(&mut c).is_empty(),
        "a downgrade publishes nothing"
    );
    assert_eq!(release(&mut c, "rw", "j:1", "READ"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn redisson_read_unlock_releases_rrwlock_read_holds() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 20_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "u:2", "READ", 5_000), Value::Int(1));
    assert_eq!(redisson::read_unlock(&mut c, "rw", "nobody"), Value::Nil);
    // Partial: Redisson drops the newest hold key and recomputes the hash TTL from all holds.
    assert_eq!(redisson::read_unlock(&mut c, "rw", "u:1"), Value::Int(0));
    assert!(!exists(&mut c, &rwlock_hold("rw", "u:1", 2)));
    assert_between("hash = u:1's first hold", pttl(&mut c, "rw"), 9_000, 10_000);
    assert_eq!(redisson::read_unlock(&mut c, "rw", "u:1"), Value::Int(0));
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("u:2", "1")])
    );
    assert!(sub.drain(&mut c).is_empty());
    assert_eq!(redisson::read_unlock(&mut c, "rw", "u:2"), Value::Int(1));
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);
}

#[test]
fn redisson_write_unlock_releases_rrwlock_write_holds() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 10_000), Value::Int(2));
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "u:2", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "u:1", 10_000),
        Value::Int(0)
    );
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "u:1", 10_000),
        Value::Int(1)
    );
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(sub.drain(&mut c), [msg("rw", "1")]);

    // After a downgrade Redisson switches the mode to read and publishes nothing.
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(1));
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "u:1", 10_000),
        Value::Int(1)
    );
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("u:1", "1")])
    );
    assert!(sub.drain(&mut c).is_empty());
    assert_eq!(release(&mut c, "rw", "u:1", "READ"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);
}

#[test]
fn redisson_read_unlock_hands_the_lock_to_a_queued_rrwlock_writer() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:2", 10_000),
        Value::Nil
    );
    let w = park_rw(&s, &mut c, "rw", "u:w", "WRITE", 7_000, 1);
    assert_eq!(redisson::read_unlock(&mut c, "rw", "j:1"), Value::Int(0));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
    // The last Redisson read unlock deletes the hash inside Lua; the module grants the writer.
    assert_eq!(redisson::read_unlock(&mut c, "rw", "j:2"), Value::Int(1));
    assert_eq!(w.reply_int(), 1);
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "write"), ("u:w:write", "1")])
    );
    assert_between("the waiter's lease", pttl(&mut c, "rw"), 6_500, 7_000);
    refused(redisson::read_acquire(&mut c, "rw", "j:1", 10_000));
}

#[test]
fn redisson_write_unlock_hands_the_lock_to_queued_rrwlock_readers() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::write_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    let r1 = park_rw(&s, &mut c, "rw", "u:1", "READ", 7_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "u:2", "READ", 7_000, 2);
    let w = park_rw(&s, &mut c, "rw", "u:3", "WRITE", 7_000, 3);
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "j:1", 10_000),
        Value::Int(1)
    );
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("u:1", "1"), ("u:2", "1")])
    );
    assert_eq!(
        rw_info(&mut c, "rw").queue,
        [("u:3".to_string(), "write".to_string())]
    );

    // A Redisson downgrade: its write unlock only switches the mode, which lets readers in.
    assert_eq!(release(&mut c, "rw", "u:1", "READ"), Value::Int(0));
    assert_eq!(release(&mut c, "rw", "u:2", "READ"), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    assert_eq!(release(&mut c, "rw", "u:3", "WRITE"), Value::Int(0));
    assert_eq!(
        redisson::write_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    let r = park_rw(&s, &mut c, "rw", "u:4", "READ", 7_000, 1);
    assert_eq!(
        redisson::write_unlock(&mut c, "rw", "j:1", 10_000),
        Value::Int(1)
    );
    assert_eq!(r.reply_int(), 1);
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("j:1", "1"), ("u:4", "1")])
    );
}

#[test]
fn redisson_watchdogs_renew_rrwlock_holds() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 1_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 2_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "u:2", "READ", 3_000), Value::Int(1));
    // ReadLockTask: every hold key of the owner and the hash.
    assert!(redisson::read_renew(&mut c, "rw", &["u:1"], 30_000));
    for k in [1, 2] {
        assert_between(
            "renewed hold",
            pttl(&mut c, &rwlock_hold("rw", "u:1", k)),
            29_000,
            30_000,
        );
    }
    assert_between(
        "u:2's hold",
        pttl(&mut c, &rwlock_hold("rw", "u:2", 1)),
        2_000,
        3_000,
    );
    assert_between("hash", pttl(&mut c, "rw"), 29_000, 30_000);
    assert!(!redisson::read_renew(&mut c, "rw", &["nobody"], 30_000));
    assert!(!redisson::read_renew(&mut c, "absent", &["u:1"], 30_000));
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);

    // LockTask with the writer's field renews an RRWLOCK write hold.
    assert_eq!(acquire(&mut c, "rw", "u:1", "WRITE", 1_000), Value::Int(1));
    assert!(redisson::renew(&mut c, "rw", "u:1:write", 30_000));
    assert_between("write lease", pttl(&mut c, "rw"), 29_000, 30_000);
    assert_eq!(rw_info(&mut c, "rw").writer, Some(("u:1".to_string(), 1)));
}

#[test]
fn rrwlock_renew_renews_redisson_holds() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 1_000),
        Value::Nil
    );
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 1_000),
        Value::Nil
    );
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "j:1", 30_000)), 2);
    for k in [1, 2] {
        assert_between(
            "renewed hold",
            pttl(&mut c, &rwlock_hold("rw", "j:1", k)),
            29_000,
            30_000,
        );
    }
    assert_between("hash", pttl(&mut c, "rw"), 29_000, 30_000);
}

#[test]
fn rrwlock_force_release_and_redissons_force_unlocks_on_each_others_locks() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    // RRWLOCK.FORCERELEASE of a Redisson read lock: the hash and every hold key.
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::read_acquire(&mut c, "rw", "j:2", 10_000),
        Value::Nil
    );
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);
    // Of a Redisson write lock: `1`.
    assert_eq!(
        redisson::write_acquire(&mut c, "rw", "j:1", 10_000),
        Value::Nil
    );
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(sub.drain(&mut c), [msg("rw", "1")]);

    // Redisson's force unlocks on RRWLOCK locks, each only in its own mode.
    assert_eq!(acquire(&mut c, "rw", "u:1", "READ", 10_000), Value::Int(1));
    assert_eq!(redisson::write_force_unlock(&mut c, "rw"), Value::Int(0));
    assert!(exists(&mut c, "rw"));
    let w = park_rw(&s, &mut c, "rw", "u:w", "WRITE", 10_000, 1);
    assert_eq!(redisson::read_force_unlock(&mut c, "rw"), Value::Int(1));
    assert_eq!(w.reply_int(), 1, "the queued writer gets it");
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "write"), ("u:w:write", "1")])
    );
    assert_eq!(sub.drain(&mut c), [msg("rw", "0")]);
    assert_eq!(redisson::read_force_unlock(&mut c, "rw"), Value::Int(0));
    let r = park_rw(&s, &mut c, "rw", "u:r", "READ", 10_000, 1);
    assert_eq!(redisson::write_force_unlock(&mut c, "rw"), Value::Int(1));
    assert_eq!(r.reply_int(), 1, "the queued reader gets it");
    assert_eq!(sub.drain(&mut c), [msg("rw", "1")]);
    // Redisson's force unlock leaves the hold keys to expire on their own; a new holder's
    // keys overwrite them.
    assert!(exists(&mut c, &rwlock_hold("rw", "u:1", 1)));
    assert_eq!(
        hgetall(&mut c, "rw"),
        fields(&[("mode", "read"), ("u:r", "1")])
    );
}

#[test]
fn brace_names_interoperate() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    let name = "{app}:rw";
    assert_eq!(
        redisson::read_acquire(&mut c, name, "j:1", 10_000),
        Value::Nil
    );
    assert!(exists(&mut c, "{app}:rw:j:1:rwlock_timeout:1"));
    assert_eq!(acquire(&mut c, name, "u:1", "READ", 10_000), Value::Int(1));
    assert!(exists(&mut c, "{app}:rw:u:1:rwlock_timeout:1"));
    assert_eq!(redisson::read_unlock(&mut c, name, "u:1"), Value::Int(0));
    assert_eq!(release(&mut c, name, "j:1", "READ"), Value::Int(0));
    // Seen once under a loaded full run: one key left. Name it (and its TTL) if it happens.
    let left: Vec<String> = cmd!("KEYS", "*").query(&mut c).unwrap();
    let ttls: Vec<i64> = left.iter().map(|k| pttl(&mut c, k)).collect();
    let what: Vec<Value> = left
        .iter()
        .map(|k| cmd!("HGETALL", k).query(&mut c).unwrap_or(Value::Nil))
        .collect();
    assert_eq!(
        dbsize(&mut c),
        0,
        "left behind: {left:?}, PTTL {ttls:?}, fields {what:?}"
    );
    assert_eq!(
        sub.drain(&mut c),
        [("redisson_rwlock:{app}:rw".to_string(), "0".to_string())]
    );
}

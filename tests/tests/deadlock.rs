//! Deadlock detection on the wait path, against real servers: a wait that would close a cycle
//! of owners waiting for one another is refused at once with `DEADLOCK` naming the cycle, and
//! nothing of it remains; the other waits go on. Cycles through holds, through queue order,
//! through read and write holds; no false positives (chains, re-entry, cycles broken before
//! the closing request, databases, non-blocking attempts, MULTI); session requests; holders
//! created by Redisson's scripts; long queues; the switch.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rlock_tests::*;

fn lock(c: &mut redis::Connection, key: &str, owner: &str) {
    assert_eq!(
        int(c, &cmd!("RLOCK.ACQUIRE", key, owner, 60_000)),
        1,
        "{key} for {owner}"
    );
}

fn read(c: &mut redis::Connection, key: &str, owner: &str) {
    let v = int(c, &cmd!("RRWLOCK.ACQUIRE", key, owner, "READ", 60_000));
    assert_eq!(v, 1, "read {key} for {owner}");
}

fn write(c: &mut redis::Connection, key: &str, owner: &str) {
    let v = int(c, &cmd!("RRWLOCK.ACQUIRE", key, owner, "WRITE", 60_000));
    assert_eq!(v, 1, "write {key} for {owner}");
}

/// Send `command` (a blocking acquire) on its own connection and wait until `blocked` clients
/// are parked.
fn wait_on(
    s: &Server,
    admin: &mut redis::Connection,
    command: redis::Cmd,
    blocked: i64,
) -> Pending {
    let p = Pending::send(s, &command);
    wait_blocked(admin, blocked);
    p
}

fn lock_wait(key: &str, owner: &str) -> redis::Cmd {
    cmd!("RLOCK.ACQUIRE", key, owner, 60_000, "BLOCK", 0)
}

fn rw_wait(key: &str, owner: &str, mode: &str) -> redis::Cmd {
    cmd!("RRWLOCK.ACQUIRE", key, owner, mode, 60_000, "BLOCK", 0)
}

/// What a refused request could have left behind: every key's content, every queue, the
/// waiter counters.
#[derive(Debug, PartialEq)]
struct Trace {
    contents: BTreeMap<String, String>,
    queues: BTreeMap<String, Value>,
    waits_started: (i64, i64),
    waiters: i64,
    blocked: i64,
}

fn trace(c: &mut redis::Connection, keys: &[&str]) -> Trace {
    let mut contents = BTreeMap::new();
    let mut queues = BTreeMap::new();
    for (k, st) in snapshot(c) {
        contents.insert(k, format!("{} {}", st.kind, st.value));
    }
    for k in keys {
        let rw = string(c, &cmd!("TYPE", *k)) == "hash" && hgetall(c, k).contains_key("mode");
        let info = raw(c, &cmd!(if rw { "RRWLOCK.INFO" } else { "RLOCK.INFO" }, *k));
        let queue = match info {
            Value::Array(f) => f
                .chunks(2)
                .find(|kv| text(&kv[0]).as_deref() == Some("queue"))
                .map(|kv| kv[1].clone())
                .unwrap(),
            other => panic!("{other:?}"),
        };
        queues.insert(k.to_string(), queue);
    }
    Trace {
        contents,
        queues,
        waits_started: (
            rlock_stat(c, "waits_started"),
            rlock_stat(c, "rwlock_waits_started"),
        ),
        waiters: rlock_stat(c, "waiters"),
        blocked: info_int(c, "clients", "blocked_clients"),
    }
}

/// `command` must be refused with a DEADLOCK error that names `cycle` (owner, key, ...: each
/// owner waits on its key for the next), quickly, leaving nothing behind.
#[track_caller]
fn refused(c: &mut redis::Connection, command: redis::Cmd, keys: &[&str], cycle: &[(&str, &str)]) {
    let before = trace(c, keys);
    let deadlocks = rlock_stat(c, "deadlocks");
    let t0 = Instant::now();
    let e = err(c, &command);
    let took = t0.elapsed();
    let hops: Vec<String> = cycle
        .iter()
        .enumerate()
        .map(|(i, (owner, key))| {
            let next = cycle[(i + 1) % cycle.len()].0;
            format!("'{owner}' waits for '{next}' on '{key}'")
        })
        .collect();
    assert_eq!(
        e,
        format!("DEADLOCK waiting would close a cycle: {}", hops.join(", ")),
        "{}",
        show(&command)
    );
    println!("{}: refused in {} us", show(&command), took.as_micros());
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    assert_eq!(
        trace(c, keys),
        before,
        "nothing of the refused request remains"
    );
    assert_eq!(rlock_stat(c, "deadlocks"), deadlocks + 1);
}

// ---------------------------------------------------------------------------------------------
// Cycles
// ---------------------------------------------------------------------------------------------

#[test]
fn a_two_cycle_is_refused_at_once_and_the_other_wait_goes_on() {
    let s = Server::start();
    let mut c = s.conn();
    lock(&mut c, "L1", "A");
    lock(&mut c, "L2", "B");
    let a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    // B asks for L1 with a 10 s timeout: refused now, not after 10 s.
    let closing = cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["L1", "L2"], &[("B", "L1"), ("A", "L2")]);
    assert_eq!(lock_info(&mut c, "L2").queue, ["A"], "A still waits");
    // B gives up L2 instead; A gets it in the ordinary way.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L2", "B")), 0);
    assert_eq!(a.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "L2"), holder("A", 1));
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 1);
}

#[test]
fn a_three_cycle_is_refused_and_the_others_are_granted_later() {
    let s = Server::start();
    let mut c = s.conn();
    for (k, o) in [("L1", "A"), ("L2", "B"), ("L3", "C")] {
        lock(&mut c, k, o);
    }
    let a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    let b = wait_on(&s, &mut c, lock_wait("L3", "B"), 2);
    let closing = cmd!("RLOCK.ACQUIRE", "L1", "C", 60_000, "BLOCK", 10_000);
    refused(
        &mut c,
        closing,
        &["L1", "L2", "L3"],
        &[("C", "L1"), ("A", "L2"), ("B", "L3")],
    );
    // C backs off: B, then A, get their locks.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L3", "C")), 0);
    assert_eq!(b.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L2", "B")), 0);
    assert_eq!(a.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "L2"), holder("A", 1));
    assert_eq!(hgetall(&mut c, "L3"), holder("B", 1));
}

#[test]
fn a_cycle_through_queue_order_alone_is_refused() {
    // R reads K and waits for L (held by A). W queued to write K, behind R's read hold. A
    // reader would share K with R, but W is queued ahead of A: A waits for W, W for R, R for A.
    let s = Server::start();
    let mut c = s.conn();
    read(&mut c, "K", "R");
    lock(&mut c, "L", "A");
    let r = wait_on(&s, &mut c, lock_wait("L", "R"), 1);
    // Without the writer queued, A's read is granted at once (no cycle: readers share).
    read(&mut c, "K", "A");
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "K", "A", "READ")), 0);
    let w = wait_on(&s, &mut c, rw_wait("K", "W", "WRITE"), 2);
    let closing = cmd!("RRWLOCK.ACQUIRE", "K", "A", "READ", 60_000, "BLOCK", 10_000);
    refused(
        &mut c,
        closing,
        &["K", "L"],
        &[("A", "K"), ("W", "K"), ("R", "L")],
    );
    // A releases L: R gets it, releases both, W writes.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L", "A")), 0);
    assert_eq!(r.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "K", "R", "READ")), 0);
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn read_write_cycles_are_refused() {
    let s = Server::start();
    let mut c = s.conn();
    // A writes K and waits for L; B holds L and asks to read K.
    write(&mut c, "K", "A");
    lock(&mut c, "L", "B");
    let _a = wait_on(&s, &mut c, lock_wait("L", "A"), 1);
    let closing = cmd!("RRWLOCK.ACQUIRE", "K", "B", "READ", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["K", "L"], &[("B", "K"), ("A", "L")]);

    // Readers sharing a read hold are each an edge: W holds M and waits to write J, read by
    // R1 and R2; either reader asking for M would close a cycle.
    read(&mut c, "J", "R1");
    read(&mut c, "J", "R2");
    lock(&mut c, "M", "W");
    let _w = wait_on(&s, &mut c, rw_wait("J", "W", "WRITE"), 2);
    for r in ["R1", "R2"] {
        let closing = cmd!("RLOCK.ACQUIRE", "M", r, 60_000, "BLOCK", 10_000);
        refused(&mut c, closing, &["J", "M"], &[(r, "M"), ("W", "J")]);
    }
    // A reader asking to read J while W waits queues behind W; no cycle (W does not wait
    // for it), so it waits.
    let _r3 = wait_on(&s, &mut c, rw_wait("J", "R3", "READ"), 3);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 3);
}

// ---------------------------------------------------------------------------------------------
// No false positives
// ---------------------------------------------------------------------------------------------

#[test]
fn chains_re_entry_and_non_blocking_attempts_are_not_deadlocks() {
    let s = Server::start();
    let mut c = s.conn();
    lock(&mut c, "L1", "A");
    lock(&mut c, "L2", "B");
    // A chain: A waits for B, C waits for A. No cycle.
    let _a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    let _c = wait_on(&s, &mut c, lock_wait("L1", "C"), 2);
    // Re-entry never waits, even while others wait for the lock.
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "L1", "A", 60_000, "BLOCK", 10_000)
        ),
        2
    );
    // The cycle-closing request without BLOCK, or inside MULTI, is one attempt: nil.
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000));
    let mut p = redis::pipe();
    p.atomic()
        .add_command(cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000));
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(replies, vec![Value::Nil]);
    let script = "return redis.call('RLOCK.ACQUIRE', KEYS[1], 'B', 60000, 'BLOCK', 10000)";
    assert_eq!(raw(&mut c, &cmd!("EVAL", script, 1, "L1")), Value::Nil);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 0);
    assert_eq!(lock_info(&mut c, "L1").queue, ["C"]);
}

#[test]
fn a_cycle_broken_before_the_closing_request_is_not_a_deadlock() {
    let s = Server::start();
    let mut c = s.conn();
    lock(&mut c, "L1", "A");
    lock(&mut c, "L2", "B");
    // Broken by a timeout: A's wait ended before B asks.
    let a = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "L2", "A", 60_000, "BLOCK", 100));
    assert_eq!(a.reply(), Value::Nil);
    let b = wait_on(&s, &mut c, lock_wait("L1", "B"), 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", b.id)), 1);
    wait_blocked(&mut c, 0);
    // Broken by a disconnect.
    let a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", a.id)), 1);
    wait_blocked(&mut c, 0);
    let b = wait_on(&s, &mut c, lock_wait("L1", "B"), 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", b.id)), 1);
    wait_blocked(&mut c, 0);
    // Broken by a release: A gave L1 up while it waits for L2; B gets L1 at once.
    let a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L1", "A")), 0);
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000)
        ),
        1
    );
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "L2", "B")), 0);
    assert_eq!(a.reply_int(), 1);
}

#[test]
fn the_same_owner_name_in_two_databases_is_two_owners() {
    let s = Server::start();
    let mut c = s.conn();
    // db 0: A waits for B. db 1: B waits for A. Merged, that would be a cycle.
    lock(&mut c, "L2", "B");
    let _a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    let mut c1 = s.conn();
    assert_eq!(string(&mut c1, &cmd!("SELECT", 1)), "OK");
    lock(&mut c1, "K", "A");
    let mut w = s.conn();
    assert_eq!(string(&mut w, &cmd!("SELECT", 1)), "OK");
    let b = Pending::send_on(w, &lock_wait("K", "B"));
    wait_blocked(&mut c, 2);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 0);
    assert_eq!(int(&mut c1, &cmd!("RLOCK.RELEASE", "K", "A")), 0);
    assert_eq!(b.reply_int(), 1);
}

// ---------------------------------------------------------------------------------------------
// Sessions, Redisson, long queues, the switch
// ---------------------------------------------------------------------------------------------

#[test]
fn a_session_request_that_would_close_a_cycle_is_refused_and_not_queued() {
    let s = Server::start();
    let mut c = s.conn();
    let opened = raw(&mut c, &cmd!("RSESSION.OPEN", "app", 5000));
    assert!(matches!(opened, Value::Array(_)), "{opened:?}");
    lock(&mut c, "L1", "A");
    lock(&mut c, "L2", "B");
    // A waits through the session; B's blocking request closes the cycle.
    let queue_a = cmd!(
        "RLOCK.ACQUIRE",
        "L2",
        "A",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        1,
        0
    );
    assert_eq!(raw(&mut c, &queue_a), Value::SimpleString("QUEUED".into()));
    let closing = cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["L1", "L2"], &[("B", "L1"), ("A", "L2")]);
    // And the other way round: B's session request is refused as its reply, nothing queued.
    let queue_b = cmd!(
        "RLOCK.ACQUIRE",
        "L1",
        "B",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        2,
        0
    );
    refused(&mut c, queue_b, &["L1", "L2"], &[("B", "L1"), ("A", "L2")]);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 1);
    let queued = raw(&mut c, &cmd!("RLOCK.INFO", "L1"));
    assert_eq!(LockInfo::parse(&queued).queue, Vec::<String>::new());
}

#[test]
fn holders_created_by_redisson_scripts_are_owners() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::acquire(&mut c, "L1", "uuid-a:1", 60_000),
        Value::Nil
    );
    lock(&mut c, "L2", "B");
    let _a = wait_on(&s, &mut c, lock_wait("L2", "uuid-a:1"), 1);
    let closing = cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000);
    refused(
        &mut c,
        closing,
        &["L1", "L2"],
        &[("B", "L1"), ("uuid-a:1", "L2")],
    );
}

#[test]
fn long_queues_and_owners_waiting_twice_are_followed() {
    let s = Server::start();
    let mut c = s.conn();
    let opened = raw(&mut c, &cmd!("RSESSION.OPEN", "app", 60_000));
    assert!(matches!(opened, Value::Array(_)), "{opened:?}");
    lock(&mut c, "hot", "A");
    lock(&mut c, "L", "B");
    // 5,000 requests queued on the hot lock, each of its own owner.
    let mut p = redis::pipe();
    for i in 0..5_000 {
        p.add_command(cmd!(
            "RLOCK.ACQUIRE",
            "hot",
            format!("q{i}"),
            60_000,
            "SESSION",
            "app",
            "QUEUE",
            i,
            0
        ));
    }
    let _: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(lock_info(&mut c, "hot").waiters, 5_000);
    // A (holding hot) waits for L; B, holding L, asks for hot: a cycle through the long queue.
    let _a = wait_on(&s, &mut c, lock_wait("L", "A"), 1);
    let closing = cmd!("RLOCK.ACQUIRE", "hot", "B", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["hot", "L"], &[("B", "hot"), ("A", "L")]);
    // An owner of the long queue that also waits elsewhere: q7 waits for M, held by D; D asks
    // for hot, where q7 is queued ahead of it.
    lock(&mut c, "M", "D");
    let q7 = cmd!(
        "RLOCK.ACQUIRE",
        "M",
        "q7",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        9_000,
        0
    );
    assert_eq!(raw(&mut c, &q7), Value::SimpleString("QUEUED".into()));
    let closing = cmd!("RLOCK.ACQUIRE", "hot", "D", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["hot", "M"], &[("D", "hot"), ("q7", "M")]);
    // Without a cycle, a newcomer on the long queue waits.
    let _e = wait_on(&s, &mut c, lock_wait("hot", "E"), 2);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 2);
}

#[test]
fn detection_can_be_switched_off() {
    let s = Server::start();
    let mut c = s.conn();
    let on: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("rlock.deadlock-detection")
        .query(&mut c)
        .unwrap();
    assert_eq!(on[1], "yes", "on by default");
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.deadlock-detection", "no"),
    );
    lock(&mut c, "L1", "A");
    lock(&mut c, "L2", "B");
    let _a = wait_on(&s, &mut c, lock_wait("L2", "A"), 1);
    // The cycle closes and nobody says so: B waits until its timeout, as with Redisson.
    let b = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 300));
    assert_eq!(b.reply(), Value::Nil);
    assert_eq!(rlock_stat(&mut c, "deadlocks"), 0);
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.deadlock-detection", "yes"),
    );
    let closing = cmd!("RLOCK.ACQUIRE", "L1", "B", 60_000, "BLOCK", 10_000);
    refused(&mut c, closing, &["L1", "L2"], &[("B", "L1"), ("A", "L2")]);
}

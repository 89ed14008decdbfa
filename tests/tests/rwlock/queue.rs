//! One FIFO queue per key across both modes: consecutive readers at its head are granted
//! together, a waiting writer holds back later readers (no writer starvation), re-entry and
//! downgrade never wait, an upgrade is a DEADLOCK error, a waiter whose predecessor leaves is
//! granted at once, BLOCK degrades to one attempt inside MULTI and Lua, and a grant whose
//! waiter vanished is undone.

use super::*;
use std::time::Instant;

fn queue_of(c: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    rw_info(c, key).queue
}

fn q(entries: &[(&str, &str)]) -> Vec<(String, String)> {
    entries
        .iter()
        .map(|(o, m)| (o.to_string(), m.to_string()))
        .collect()
}

#[test]
fn fifo_across_modes_with_readers_granted_together_and_no_writer_starvation() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "w0", "WRITE", 30_000), Value::Int(1));
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 30_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 20_000, 2);
    let w3 = park_rw(&s, &mut c, "rw", "w3", "WRITE", 30_000, 3);
    let r4 = park_rw(&s, &mut c, "rw", "r4", "READ", 30_000, 4);
    assert_eq!(
        queue_of(&mut c, "rw"),
        q(&[
            ("r1", "read"),
            ("r2", "read"),
            ("w3", "write"),
            ("r4", "read")
        ])
    );

    // The writer leaves: the two readers at the head go together, in the same step.
    assert_eq!(release(&mut c, "rw", "w0", "WRITE"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r1", "1"), ("r2", "1")]),
        "both readers hold it right after the release reply"
    );
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    assert_between(
        "r2's own lease",
        pttl(&mut c, &rwlock_hold("rw", "r2", 1)),
        19_000,
        20_000,
    );
    assert_between(
        "hash = the longest granted lease",
        pttl(&mut c, "rw"),
        29_000,
        30_000,
    );
    assert_eq!(
        queue_of(&mut c, "rw"),
        q(&[("w3", "write"), ("r4", "read")])
    );

    // A read lock is held, yet a new reader does not pass the waiting writer.
    assert_eq!(acquire(&mut c, "rw", "r5", "READ", 30_000), Value::Nil);
    let r5 = park_rw(&s, &mut c, "rw", "r5", "READ", 30_000, 3);
    assert_eq!(
        queue_of(&mut c, "rw"),
        q(&[("w3", "write"), ("r4", "read"), ("r5", "read")])
    );

    assert_eq!(release(&mut c, "rw", "r1", "READ"), Value::Int(0));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 3);
    assert_eq!(release(&mut c, "rw", "r2", "READ"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w3:write", "1")])
    );
    assert_eq!(w3.reply_int(), 1);
    assert_eq!(release(&mut c, "rw", "w3", "WRITE"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r4", "1"), ("r5", "1")])
    );
    assert_eq!((r4.reply_int(), r5.reply_int()), (1, 1));
    assert_eq!(rw_info(&mut c, "rw").waiters, 0);
}

#[test]
fn a_writer_at_the_head_stops_readers_behind_it_and_readers_stop_writers() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "r0", "READ", 30_000), Value::Int(1));
    // Readers behind a queued writer wait although the lock is a read lock.
    let w1 = park_rw(&s, &mut c, "rw", "w1", "WRITE", 30_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 30_000, 2);
    let w3 = park_rw(&s, &mut c, "rw", "w3", "WRITE", 30_000, 3);
    assert_eq!(release(&mut c, "rw", "r0", "READ"), Value::Int(0));
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(release(&mut c, "rw", "w1", "WRITE"), Value::Int(0));
    assert_eq!(r2.reply_int(), 1);
    assert_eq!(queue_of(&mut c, "rw"), q(&[("w3", "write")]));
    assert_eq!(release(&mut c, "rw", "r2", "READ"), Value::Int(0));
    assert_eq!(w3.reply_int(), 1);
}

#[test]
fn reentry_and_downgrade_never_wait_even_with_a_queue() {
    let s = Server::start();
    let mut c = s.conn();
    // A reader re-enters past a queued writer.
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 30_000), Value::Int(1));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 30_000, 1);
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 30_000), Value::Int(2));
    let blocked = raw(
        &mut c,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "r", "READ", 30_000, "BLOCK", 0),
    );
    assert_eq!(blocked, Value::Int(3), "with BLOCK too, at once");
    for left in [2, 1, 0] {
        assert_eq!(release(&mut c, "rw", "r", "READ"), Value::Int(left));
    }
    assert_eq!(w.reply_int(), 1);

    // The writer re-enters and downgrades past queued readers and writers.
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 30_000, 1);
    let w2 = park_rw(&s, &mut c, "rw", "w2", "WRITE", 30_000, 2);
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 30_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 30_000), Value::Int(1));
    let blocked = raw(
        &mut c,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "w", "READ", 30_000, "BLOCK", 0),
    );
    assert_eq!(blocked, Value::Int(2));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "2"), ("w", "2")])
    );
    // The write releases turn it into a read lock: the queued reader joins at once.
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(1));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 2);
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("w", "2"), ("r1", "1")])
    );
    assert_eq!(r1.reply_int(), 1);
    assert_eq!(queue_of(&mut c, "rw"), q(&[("w2", "write")]));
    release(&mut c, "rw", "w", "READ");
    release(&mut c, "rw", "w", "READ");
    assert_eq!(release(&mut c, "rw", "r1", "READ"), Value::Int(0));
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn an_upgrade_is_a_deadlock_error_with_or_without_block_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(1));
    let deadlock =
        "DEADLOCK owner 'a' holds a read lock on 'rw' and asks for its write lock: an upgrade can never be granted";
    let before = snapshot(&mut c);
    for extra in [&[][..], &["BLOCK", "0"][..], &["BLOCK", "100"][..]] {
        let mut command = cmd!("RRWLOCK.ACQUIRE", "rw", "a", "WRITE", 30_000);
        for e in extra {
            command.arg(*e);
        }
        let started = Instant::now();
        assert_eq!(err(&mut c, &command), deadlock, "{}", show(&command));
        assert!(started.elapsed() < Duration::from_millis(90), "never waits");
    }
    // With other readers as well.
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 30_000), Value::Int(1));
    let e = err(
        &mut c,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "b", "WRITE", 30_000, "BLOCK", 0),
    );
    assert!(e.starts_with("DEADLOCK owner 'b'"), "{e}");
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_same_data("after DEADLOCK", &before, &snapshot(&mut c), 50);
    assert_eq!(rw_info(&mut c, "rw").waiters, 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    // Inside a transaction too.
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "rw", "a", "WRITE", 30_000, "BLOCK", 0)
        ),
        "QUEUED"
    );
    match raw(&mut c, &cmd!("EXEC")) {
        Value::Array(r) => assert_eq!(error_text(&r[0]).as_deref(), Some(deadlock)),
        other => panic!("EXEC: {other:?}"),
    }
    assert_same_data("after DEADLOCK in MULTI", &before, &snapshot(&mut c), 50);
}

/// Hold a read lock, queue a writer `w1` (BLOCK `w1_block_ms`) then a reader `r2`; end w1's
/// wait with `leave`; r2 must be granted at once, since only the writer kept it waiting.
fn successor_granted_when_writer_leaves(
    w1_block_ms: i64,
    leave: impl FnOnce(&mut redis::Connection, Pending) -> Instant,
) {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "r0", "READ", 30_000), Value::Int(1));
    let w1 = Pending::send(
        &s,
        &cmd!(
            "RRWLOCK.ACQUIRE",
            "rw",
            "w1",
            "WRITE",
            30_000,
            "BLOCK",
            w1_block_ms
        ),
    );
    wait_blocked(&mut c, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 30_000, 2);
    let left = leave(&mut c, w1);
    assert_eq!(r2.reply_int(), 1);
    let took = left.elapsed();
    assert!(took <= *PROMPT, "r2 granted {took:?} after w1 left");
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r0", "1"), ("r2", "1")])
    );
    assert_eq!(rw_info(&mut c, "rw").waiters, 0);
}

#[test]
fn a_waiter_whose_predecessor_times_out_is_granted_at_once() {
    successor_granted_when_writer_leaves(150, |c, w1| {
        assert_eq!(w1.reply(), Value::Nil);
        assert!(!hgetall(c, "rw").contains_key("w1:write"));
        Instant::now()
    });
}

#[test]
fn a_waiter_whose_predecessor_disconnects_is_granted_at_once() {
    successor_granted_when_writer_leaves(0, |c, w1| {
        assert_eq!(int(c, &cmd!("CLIENT", "KILL", "ID", w1.id)), 1);
        Instant::now()
    });
}

#[test]
fn a_waiter_whose_predecessor_is_unblocked_is_granted_at_once() {
    if !client_unblock_reaches_waits(&mut Server::start().conn()) {
        return;
    }
    successor_granted_when_writer_leaves(0, |c, w1| {
        assert_eq!(int(c, &cmd!("CLIENT", "UNBLOCK", w1.id)), 1);
        let at = Instant::now();
        assert_eq!(w1.reply(), Value::Nil);
        at
    });
}

#[test]
fn a_waiter_whose_socket_closes_leaves_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "w0", "WRITE", 30_000), Value::Int(1));
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 30_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 30_000, 2);
    drop(r1);
    wait_until(Duration::from_secs(5), "r1 leaves the queue", || {
        rw_info(&mut c, "rw").waiters == 1
    });
    assert_eq!(release(&mut c, "rw", "w0", "WRITE"), Value::Int(0));
    assert_eq!(r2.reply_int(), 1);
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r2", "1")])
    );
}

#[test]
fn block_timeout_replies_nil_and_block_on_a_free_lock_acquires() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "rw", "r", "READ", 30_000, "BLOCK", 0)
        ),
        1,
        "free: at once"
    );
    let started = Instant::now();
    nil(
        &mut c,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "w", "WRITE", 30_000, "BLOCK", 100),
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(95) && waited < Duration::from_secs(1),
        "waited {waited:?}"
    );
    assert_eq!(rw_info(&mut c, "rw").waiters, 0);
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("r", "1")]));
}

#[test]
fn block_inside_multi_exec_is_one_attempt() {
    let s = Server::start();
    let mut c = s.conn();
    let mut t = s.conn();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(acquire(&mut c, "held", "w", "WRITE", 30_000), Value::Int(1));
    assert_eq!(string(&mut t, &cmd!("MULTI")), "OK");
    for command in [
        cmd!("RRWLOCK.ACQUIRE", "held", "r", "READ", 5_000, "BLOCK", 0),
        cmd!("RRWLOCK.ACQUIRE", "held", "x", "WRITE", 5_000, "BLOCK", 0),
        cmd!("RRWLOCK.ACQUIRE", "free", "r", "READ", 5_000, "BLOCK", 0),
    ] {
        assert_eq!(string(&mut t, &command), "QUEUED");
    }
    let started = Instant::now();
    assert_eq!(
        raw(&mut t, &cmd!("EXEC")),
        Value::Array(vec![Value::Nil, Value::Nil, Value::Int(1)])
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(rw_info(&mut c, "held").waiters, 0, "nothing queued");
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(
        fields(&mut c, "free"),
        pairs(&[("mode", "read"), ("r", "1")])
    );
    assert_eq!(release(&mut c, "held", "w", "WRITE"), Value::Int(0));
    assert!(!exists(&mut c, "held"), "no waiter from the transaction");
}

#[test]
fn block_inside_eval_is_one_attempt() {
    let s = Server::start();
    let mut c = s.conn();
    let script =
        "return redis.call('RRWLOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2], '5000', 'BLOCK', '0')";
    assert_eq!(acquire(&mut c, "held", "r0", "READ", 30_000), Value::Int(1));
    let started = Instant::now();
    assert_eq!(
        raw(&mut c, &cmd!("EVAL", script, 1, "held", "w", "WRITE")),
        Value::Nil
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        raw(&mut c, &cmd!("EVAL", script, 1, "held", "r", "READ")),
        Value::Int(1),
        "readers share"
    );
    assert_eq!(rw_info(&mut c, "held").waiters, 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
}

#[test]
fn a_reader_killed_between_its_grant_and_its_reply_gives_its_hold_back() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 30_000), Value::Int(1));
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 30_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 30_000, 2);
    let revoked = rlock_stat(&mut c, "rwlock_grants_revoked");
    // In one transaction: the release grants both readers, then r1 is killed before its reply.
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "w", "WRITE")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", r1.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    assert_eq!(r2.reply_int(), 1);
    wait_until(*PROMPT, "r1's grant is undone", || {
        !hgetall(&mut c, "rw").contains_key("r1")
    });
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r2", "1")])
    );
    assert_eq!(keys(&mut c), ["rw", "{rw}:r2:rwlock_timeout:1"]);
    assert_eq!(rlock_stat(&mut c, "rwlock_grants_revoked") - revoked, 1);
    drop(r1);

    // A writer granted and killed: the lock ends up free.
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 30_000, 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "r2", "READ")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    wait_until(*PROMPT, "w's grant is undone", || !exists(&mut c, "rw"));
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn anything_that_deletes_the_hash_hands_off() {
    let s = Server::start();
    let mut c = s.conn();
    for (what, command) in [
        ("DEL", cmd!("DEL", "rw")),
        ("UNLINK", cmd!("UNLINK", "rw")),
        ("EXPIRE in the past", cmd!("PEXPIREAT", "rw", 1)),
        ("FLUSHDB", cmd!("FLUSHDB")),
    ] {
        assert_eq!(
            acquire(&mut c, "rw", "w0", "WRITE", 30_000),
            Value::Int(1),
            "{what}"
        );
        let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 10_000, 1);
        let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 10_000, 2);
        let at = Instant::now();
        raw(&mut c, &command);
        assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1), "{what}");
        assert!(
            at.elapsed() <= *PROMPT,
            "{what}: granted after {:?}",
            at.elapsed()
        );
        assert_eq!(
            fields(&mut c, "rw"),
            pairs(&[("mode", "read"), ("r1", "1"), ("r2", "1")]),
            "{what}"
        );
        assert_eq!(string(&mut c, &cmd!("FLUSHDB")), "OK");
    }
}

#[test]
fn locks_queues_and_hold_keys_live_in_their_database() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("SELECT", 3)), "OK");
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 30_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "dead", "READ", 100), Value::Int(1));
    let mut wc = s.conn();
    assert_eq!(string(&mut wc, &cmd!("SELECT", 3)), "OK");
    let w = Pending::send_on(
        wc,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "w", "WRITE", 5_000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 1);
    // The same name in database 0 is another lock.
    let mut c0 = s.conn();
    assert_eq!(acquire(&mut c0, "rw", "x", "WRITE", 30_000), Value::Int(1));
    wait_until(Duration::from_secs(2), "dead tidied in database 3", || {
        !hgetall(&mut c, "rw").contains_key("dead")
    });
    assert_eq!(keys(&mut c), ["rw", "{rw}:b:rwlock_timeout:1"]);
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(
        fields(&mut c0, "rw"),
        pairs(&[("mode", "write"), ("x:write", "1")])
    );
    assert_eq!(keys(&mut c0), ["rw"]);
}

//! Server-side waiters: FIFO order, direct hand-off on release, BLOCK timeouts, disconnects,
//! CLIENT UNBLOCK, no barging, and BLOCK degrading to one attempt inside MULTI and Lua.

use rlock_tests::*;
use std::time::{Duration, Instant};

#[test]
fn three_waiters_are_served_in_fifo_order() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 30_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 30_000, &[], 2);
    let w3 = park(&s, &mut c, "lk", "w3", 30_000, &[], 3);
    assert_eq!(lock_info(&mut c, "lk").queue, ["w1", "w2", "w3"]);

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("w1", 1));
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(lock_info(&mut c, "lk").queue, ["w2", "w3"]);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 2);

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w1")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
    assert_eq!(w2.reply_int(), 1);
    assert_eq!(lock_info(&mut c, "lk").queue, ["w3"]);

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w2")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("w3", 1));
    assert_eq!(w3.reply_int(), 1);

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w3")), 0);
    assert!(
        !exists(&mut c, "lk"),
        "last release with nobody waiting frees the lock"
    );
    let info = lock_info(&mut c, "lk");
    assert_eq!((info.waiters, info.queue), (0, vec![]));
}

#[test]
fn twenty_waiters_are_served_in_fifo_order() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let owners: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    let waiters: Vec<Pending> = owners
        .iter()
        .enumerate()
        .map(|(i, o)| park(&s, &mut c, "lk", o, 30_000, &[], i as i64 + 1))
        .collect();
    assert_eq!(lock_info(&mut c, "lk").queue, owners);
    let mut prev = "holder".to_string();
    for (o, w) in owners.iter().zip(waiters) {
        assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", &prev)), 0);
        assert_eq!(hgetall(&mut c, "lk"), holder(o, 1));
        assert_eq!(w.reply_int(), 1);
        prev = o.clone();
    }
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", &prev)), 0);
    assert!(!exists(&mut c, "lk"));
}

#[test]
fn hand_off_is_visible_in_hgetall_right_after_the_release_reply() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        2
    );
    let w = park(&s, &mut c, "lk", "waiter", 4_000, &[], 1);
    // The partial release does not hand off.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("holder", 1));

    // Same connection, next command: the hand-off already happened in the release step.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("waiter", 1));
    assert_between(
        "waiter's lease, counted from the grant",
        pttl(&mut c, "lk"),
        3_500,
        4_000,
    );
    assert_eq!(w.reply_int(), 1);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
}

#[test]
fn waiter_lease_counts_from_the_grant_not_from_the_request() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "waiter", 1_000, &[], 1);
    // Wait longer than the waiter's lease before releasing: a lease counted from the request
    // would already be over.
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("waiter", 1));
    assert_between("waiter's PTTL", pttl(&mut c, "lk"), 500, 1_000);
}

#[test]
fn block_timeout_replies_nil_and_leaves_no_queue_entry() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "lk", "w", 5_000, "BLOCK", 150));
    let sent = w.sent;
    let reply = w.reply();
    let waited = sent.elapsed();
    assert_eq!(reply, Value::Nil, "a timed-out wait replies nil");
    assert!(
        waited >= Duration::from_millis(145),
        "replied after only {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_000),
        "replied after {waited:?}"
    );
    let info = lock_info(&mut c, "lk");
    assert_eq!(
        (info.waiters, info.queue),
        (0, vec![]),
        "no queue entry left behind"
    );
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    // The release finds nobody to hand to: the lock is free, not given to the gone waiter.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert!(!exists(&mut c, "lk"));
}

/// A wait's nil never comes before its timeout has passed. The server's millisecond clock is
/// rounded down and its alarm fires at the exact millisecond, so a deadline of "now + timeout"
/// ended up to 1 ms early (by how far into its millisecond the command arrived): over 20 short
/// waits, most would be. Timed from before each send, which is before the server sees it.
#[test]
fn a_block_wait_never_times_out_before_its_timeout() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 60_000)),
        1
    );
    let mut w = s.conn();
    for i in 0..20 {
        let sent = Instant::now();
        let reply = raw(
            &mut w,
            &cmd!("RLOCK.ACQUIRE", "lk", "w", 5_000, "BLOCK", 20),
        );
        let waited = sent.elapsed();
        assert_eq!(reply, Value::Nil, "wait {i}");
        assert!(
            waited >= Duration::from_millis(20),
            "wait {i} timed out after only {waited:?}"
        );
    }
}

#[test]
fn block_zero_waits_until_released() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    // Timing is the behaviour here: BLOCK 0 must still be waiting well after any short
    // timeout a misparse could produce.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        info_int(&mut c, "clients", "blocked_clients"),
        1,
        "BLOCK 0 stopped waiting"
    );
    assert_eq!(lock_info(&mut c, "lk").queue, ["w"]);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn block_on_a_free_lock_acquires_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let t = Instant::now();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "BLOCK", 0)
        ),
        1
    );
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000, "BLOCK", 5_000)
        ),
        2
    );
    assert!(t.elapsed() < Duration::from_millis(500));
    assert_eq!(hgetall(&mut c, "lk"), holder("o1", 2));
}

#[test]
fn reentry_never_waits_even_with_a_queue() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000, "BLOCK", 0)
        ),
        2
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        3
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("holder", 3));
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn block_with_timeout_gets_the_lock_when_released_in_time() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "lk", "w", 5_000, "BLOCK", 5_000));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn a_killed_waiter_leaves_the_queue_at_once_and_is_never_granted() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 5_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 5_000, &[], 2);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w1.id)), 1);
    // CLIENT KILL frees the client synchronously: the queue is already updated.
    let info = lock_info(&mut c, "lk");
    assert_eq!((info.waiters, info.queue), (1, vec!["w2".to_string()]));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(
        hgetall(&mut c, "lk"),
        holder("w2", 1),
        "the next live waiter gets it"
    );
    assert_eq!(w2.reply_int(), 1);
    drop(w1);

    // Only waiter killed: the release frees the lock.
    let w3 = park(&s, &mut c, "lk", "w3", 5_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w3.id)), 1);
    assert_eq!(lock_info(&mut c, "lk").waiters, 0);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w2")), 0);
    assert!(
        !exists(&mut c, "lk"),
        "never granted to a client that is gone"
    );
}

#[test]
fn a_waiter_killed_between_its_grant_and_its_reply_does_not_keep_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 30_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 30_000, &[], 2);
    // In one transaction: the release grants the lock to w1, then w1 is killed before its
    // reply can be written.
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", w1.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    let killed = Instant::now();
    assert_eq!(
        w2.reply_int(),
        1,
        "the lock goes on to the next live waiter"
    );
    assert!(
        killed.elapsed() <= margin(Duration::from_millis(100)),
        "took {:?}",
        killed.elapsed()
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
    drop(w1);

    // Same with nobody behind: the lock ends up free.
    let w3 = park(&s, &mut c, "lk", "w3", 30_000, &[], 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(string(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w2")), "QUEUED");
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "KILL", "ID", w3.id)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    wait_until(
        Duration::from_millis(100),
        "the gone waiter's grant is undone",
        || !exists(&mut c, "lk"),
    );
}

/// A waiter whose wait ends (BLOCK timeout, CLIENT UNBLOCK) in the same event-loop turn as its
/// grant (the server was busy: a slow command, a long script, a fork) still gets exactly one
/// reply, and the reply matches the lock: 1 and holding it, or nil and not holding it.
fn grant_racing_the_end_of_the_wait(
    holder_lease_ms: i64,
    block_ms: i64,
    race: impl FnOnce(&mut redis::Connection, i64),
) {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "lk", "holder", holder_lease_ms)
        ),
        1
    );
    let w = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "lk", "w", 30_000, "BLOCK", block_ms),
    );
    wait_blocked(&mut c, 1);
    race(&mut c, w.id);
    match w.reply_within(Duration::from_secs(2)) {
        Value::Int(1) => assert_eq!(hgetall(&mut c, "lk"), holder("w", 1)),
        Value::Nil => assert!(
            !hgetall(&mut c, "lk").contains_key("w"),
            "nil, yet w holds it"
        ),
        other => panic!("waiter reply {other:?}"),
    }
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(lock_info(&mut c, "lk").waiters, 0);
}

#[test]
fn a_release_and_the_waiters_timeout_in_the_same_turn_still_reply() {
    // The wait is 1 s (not shorter) so the waiter is seen blocked before it times out on a
    // loaded machine; the sleep starts after that, so it outlasts the wait whatever the load.
    grant_racing_the_end_of_the_wait(30_000, 1_000, |c, _| {
        // The transaction outlasts the waiter's 1 s, then releases: the grant and the timeout
        // are both due when the server next looks at blocked clients.
        assert_eq!(string(c, &cmd!("MULTI")), "OK");
        assert_eq!(string(c, &cmd!("DEBUG", "SLEEP", "1.1")), "QUEUED");
        assert_eq!(string(c, &cmd!("RLOCK.RELEASE", "lk", "holder")), "QUEUED");
        assert_eq!(
            raw(c, &cmd!("EXEC")),
            Value::Array(vec![Value::Okay, Value::Int(0)])
        );
    });
}

#[test]
fn a_lease_expiry_and_the_waiters_timeout_in_the_same_turn_still_reply() {
    // Held long and a 1 s wait while the waiter queues (a loaded machine may take longer than
    // a 100 ms lease or wait to show it blocked); then the lease is shortened to 100 ms by the
    // pipeline's first command, and the sleep after it spans both the holder's expiry and the
    // waiter's timeout (which started before the pipeline).
    grant_racing_the_end_of_the_wait(30_000, 1_000, |c, _| {
        let (renewed, slept): (i64, Value) = redis::pipe()
            .cmd("RLOCK.RENEW")
            .arg("lk")
            .arg("holder")
            .arg(100)
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("1.2")
            .query(c)
            .unwrap();
        assert_eq!((renewed, slept), (1, Value::Okay));
    });
}

/// On Redis 7.2 this stopped the server (`c->duration == 0` asserted in `resetClient`: the
/// grant had unblocked the waiter, so Redis skipped its timeout path's bookkeeping). There
/// `CLIENT UNBLOCK` now answers 0 for rlock's waiters, and the waiter gets its grant.
#[test]
fn client_unblock_right_after_a_grant_still_replies() {
    grant_racing_the_end_of_the_wait(30_000, 0, |c, waiter| {
        let reaches = ServerKind::of(c).client_unblock_reaches_waits();
        assert_eq!(string(c, &cmd!("MULTI")), "OK");
        assert_eq!(string(c, &cmd!("RLOCK.RELEASE", "lk", "holder")), "QUEUED");
        assert_eq!(string(c, &cmd!("CLIENT", "UNBLOCK", waiter)), "QUEUED");
        let replies = raw(c, &cmd!("EXEC"));
        let Value::Array(replies) = replies else {
            panic!("EXEC: {replies:?}")
        };
        assert_eq!(replies[0], Value::Int(0), "released to the waiter");
        if !reaches {
            assert_eq!(
                replies[1],
                Value::Int(0),
                "CLIENT UNBLOCK leaves rlock's waits alone"
            );
        }
        assert_eq!(string(c, &cmd!("PING")), "PONG", "the server lives on");
    });
}

#[test]
fn a_waiter_whose_socket_closes_leaves_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 5_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 5_000, &[], 2);
    drop(w1); // closes the socket
    wait_until(
        Duration::from_secs(5),
        "the dropped waiter leaves the queue",
        || lock_info(&mut c, "lk").waiters == 1,
    );
    assert_eq!(lock_info(&mut c, "lk").queue, ["w2"]);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn client_unblock_ends_the_wait_with_nil() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 5_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 5_000, &[], 2);
    if !ServerKind::of(&mut c).client_unblock_reaches_waits() {
        // Redis 7.2: refused, and both waits go on in order.
        assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w1.id)), 0);
        assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w1.id, "ERROR")), 0);
        assert_eq!(lock_info(&mut c, "lk").queue, ["w1", "w2"]);
        assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
        assert_eq!(w1.reply_int(), 1);
        assert_eq!(hgetall(&mut c, "lk"), holder("w1", 1));
        return;
    }
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w1.id)), 1);
    assert_eq!(w1.reply(), Value::Nil);
    assert_eq!(lock_info(&mut c, "lk").queue, ["w2"]);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn a_newcomer_cannot_barge_past_a_waiter_after_release() {
    let s = Server::start();
    let mut c = s.conn();
    let mut newcomer = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    // Release and the newcomer's attempt in one pipeline on the same connection: nothing can
    // run between them.
    let replies: Vec<Value> = redis::pipe()
        .cmd("RLOCK.RELEASE")
        .arg("lk")
        .arg("holder")
        .cmd("RLOCK.ACQUIRE")
        .arg("lk")
        .arg("newcomer")
        .arg(5_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, [Value::Int(0), Value::Nil]);
    nil(
        &mut newcomer,
        &cmd!("RLOCK.ACQUIRE", "lk", "newcomer", 5_000),
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn a_newcomer_cannot_barge_while_a_lease_expires() {
    let s = Server::start();
    let mut c = s.conn();
    let mut newcomer = s.conn();
    // Held long while the waiter queues (a loaded machine may take longer than a short lease
    // to show it blocked), then shortened to end in 150 ms.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 150)), 1);
    // Hammer the lock through the expiry moment: every attempt must fail, including in the gap
    // between the lease running out and the module noticing it.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut attempts = 0;
    loop {
        nil(
            &mut newcomer,
            &cmd!("RLOCK.ACQUIRE", "lk", "newcomer", 5_000),
        );
        attempts += 1;
        if hgetall(&mut c, "lk") == holder("w", 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never got the expired lock"
        );
    }
    nil(
        &mut newcomer,
        &cmd!("RLOCK.ACQUIRE", "lk", "newcomer", 5_000),
    );
    assert!(attempts > 1);
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn a_newcomer_cannot_barge_after_del() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    let replies: Vec<Value> = redis::pipe()
        .cmd("DEL")
        .arg("lk")
        .cmd("RLOCK.ACQUIRE")
        .arg("lk")
        .arg("newcomer")
        .arg(5_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies, [Value::Int(1), Value::Nil]);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn a_newcomer_cannot_barge_after_del_in_the_same_transaction() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(string(&mut c, &cmd!("DEL", "lk")), "QUEUED");
    assert_eq!(
        string(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "newcomer", 5_000)),
        "QUEUED"
    );
    let exec = raw(&mut c, &cmd!("EXEC"));
    assert_eq!(
        exec,
        Value::Array(vec![Value::Int(1), Value::Nil]),
        "the waiter is first"
    );
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn hand_off_inside_multi_exec_is_visible_to_the_next_queued_command() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")),
        "QUEUED"
    );
    assert_eq!(string(&mut c, &cmd!("HGET", "lk", "w")), "QUEUED");
    let exec = raw(&mut c, &cmd!("EXEC"));
    assert_eq!(
        exec,
        Value::Array(vec![Value::Int(0), Value::BulkString(b"1".to_vec())])
    );
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn hand_off_inside_eval_is_visible_to_the_script() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    let script = "local r = redis.call('RLOCK.RELEASE', KEYS[1], ARGV[1]) \
        return {r, redis.call('HGET', KEYS[1], 'w')}";
    let reply = raw(&mut c, &cmd!("EVAL", script, 1, "lk", "holder"));
    assert_eq!(
        reply,
        Value::Array(vec![Value::Int(0), Value::BulkString(b"1".to_vec())])
    );
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

/// A connection whose reads give up after 5 s, so a command that wrongly blocks fails the test
/// instead of hanging it.
fn impatient(s: &Server) -> redis::Connection {
    let c = s.conn();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

#[test]
fn block_inside_multi_exec_is_one_attempt() {
    let s = Server::start();
    let mut c = s.conn();
    let mut t = impatient(&s);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "held", "holder", 30_000)),
        1
    );
    assert_eq!(string(&mut t, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(
            &mut t,
            &cmd!("RLOCK.ACQUIRE", "held", "o2", 5_000, "BLOCK", 0)
        ),
        "QUEUED"
    );
    assert_eq!(
        string(
            &mut t,
            &cmd!("RLOCK.ACQUIRE", "free", "o2", 5_000, "BLOCK", 0)
        ),
        "QUEUED"
    );
    let started = Instant::now();
    let exec = raw(&mut t, &cmd!("EXEC"));
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(exec, Value::Array(vec![Value::Nil, Value::Int(1)]));
    assert_eq!(
        lock_info(&mut c, "held").waiters,
        0,
        "nothing queued by the transaction"
    );
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(hgetall(&mut c, "held"), holder("holder", 1));
    assert_eq!(hgetall(&mut c, "free"), holder("o2", 1));
    // A later release finds no waiter from the transaction.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "held", "holder")), 0);
    assert!(!exists(&mut c, "held"));
}

#[test]
fn block_inside_eval_is_one_attempt() {
    let s = Server::start();
    let mut c = s.conn();
    let mut t = impatient(&s);
    let script = "return redis.call('RLOCK.ACQUIRE', KEYS[1], ARGV[1], '5000', 'BLOCK', '0')";
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "held", "holder", 30_000)),
        1
    );
    let started = Instant::now();
    // Lua turns the nil reply into false, which EVAL returns as nil.
    assert_eq!(
        raw(&mut t, &cmd!("EVAL", script, 1, "held", "o2")),
        Value::Nil
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        raw(&mut t, &cmd!("EVAL", script, 1, "free", "o2")),
        Value::Int(1)
    );
    assert_eq!(lock_info(&mut c, "held").waiters, 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(hgetall(&mut c, "free"), holder("o2", 1));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "held", "holder")), 0);
    assert!(!exists(&mut c, "held"));
}

#[test]
fn contended_lock_gives_mutual_exclusion_and_loses_no_wake_ups() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 40;
    let s = Server::start();
    std::thread::scope(|scope| {
        for t in 0..CLIENTS {
            let s = &s;
            scope.spawn(move || {
                let mut c = s.conn();
                let owner = format!("uuid-{t}:1");
                for _ in 0..ROUNDS {
                    let got = int(
                        &mut c,
                        &cmd!("RLOCK.ACQUIRE", "lk", &owner, 10_000, "BLOCK", 0),
                    );
                    assert_eq!(got, 1);
                    // A read-modify-write that only the holder may do.
                    let n: i64 = redis::cmd("GET")
                        .arg("counter")
                        .query::<Option<i64>>(&mut c)
                        .unwrap()
                        .unwrap_or(0);
                    assert_eq!(
                        hgetall(&mut c, "lk"),
                        holder(&owner, 1),
                        "someone else holds it"
                    );
                    assert_eq!(string(&mut c, &cmd!("SET", "counter", n + 1)), "OK");
                    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", &owner)), 0);
                }
            });
        }
    });
    let mut c = s.conn();
    assert_eq!(
        string(&mut c, &cmd!("GET", "counter")),
        (CLIENTS * ROUNDS).to_string()
    );
    assert!(!exists(&mut c, "lk"));
    assert_eq!(lock_info(&mut c, "lk").waiters, 0);
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
}

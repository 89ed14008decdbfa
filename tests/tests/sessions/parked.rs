//! Sessions: parked session requests (`QUEUE ... BLOCK park_ms`).

use super::*;

/// `queue_cmd` with `BLOCK park_ms`, sent on a connection of its own; returns once the server
/// shows it blocked (`blocked_after` blocked clients in all).
fn park_queued(
    s: &Server,
    admin: &mut redis::Connection,
    (key, owner, request, timeout): (&str, &str, i64, i64),
    park_ms: i64,
    blocked_after: i64,
) -> Pending {
    let mut q = queue_cmd(key, owner, 60_000, "app", request, timeout);
    q.arg("BLOCK").arg(park_ms);
    let p = Pending::send(s, &q);
    wait_blocked(admin, blocked_after);
    p
}

#[test]
fn a_parked_session_request_granted_in_time_gets_the_grant_as_its_reply() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 10_000, 1);
    // Queued in the session like any request: in the FIFO, counted, watched for deadlock.
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 1);
    release(&mut c, "k", "holder");
    assert_eq!(w.reply_int(), 1, "the reply a BLOCK waiter gets");
    assert_eq!(hgetall(&mut c, "k"), holder("w", 1));
    assert_eq!(rlock_stat(&mut c, "session_grants_direct"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 0);
    assert_eq!(l.read(), vec![], "delivered once: nothing for the listener");
    // The hold is the session's: its loss is pushed to the listener.
    wait_until(Duration::from_secs(5), "hold watched", || {
        rlock_stat(&mut c, "session_holds_watched") == 1
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "w");
}

#[test]
fn a_parked_session_request_not_granted_in_time_is_answered_queued_and_waits_on() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 100, 1);
    let v = w.reply_within(Duration::from_secs(5));
    assert_eq!(v, Value::SimpleString("QUEUED".into()));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0, "let go");
    assert_eq!(queue_of(&mut c, "k"), ["w"], "still in its place");
    release(&mut c, "k", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert_eq!(got[0].value, Value::Int(1));
    assert_eq!(rlock_stat(&mut c, "session_grants_direct"), 0);
}

#[test]
fn a_parked_session_request_whose_deadline_passes_is_answered_queued_then_times_out() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 100), 0, 1);
    let v = w.reply_within(Duration::from_secs(5));
    assert_eq!(v, Value::SimpleString("QUEUED".into()));
    assert_kinds(&l.read_n(1), &[("timeout", Some(1))]);
    assert_eq!(queue_of(&mut c, "k"), Vec::<String>::new());
}

#[test]
fn a_parked_session_request_outlives_its_connection() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)), 1);
    // Closed by the kill, not a read that timed out.
    let e = w
        .outcome_within(Duration::from_secs(5))
        .expect_err("the killed connection has no reply");
    assert!(
        !e.is_timeout() && e.is_connection_dropped(),
        "expected the connection closed, got {e:?}"
    );
    wait_blocked(&mut c, 0);
    // The wait is the session's: still queued, its grant goes to the listener.
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    release(&mut c, "k", "holder");
    assert_kinds(&l.read_n(1), &[("granted", Some(1))]);
    assert_eq!(hgetall(&mut c, "k"), holder("w", 1));
}

#[test]
fn a_parked_session_request_ended_otherwise_frees_its_connection_with_queued() {
    let (s, mut c, mut l) = start(5000);
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
    // CLIENT UNBLOCK: the connection is let go, the wait goes on.
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id)), 1);
    assert_eq!(w.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    // RSESSION.CANCEL from another connection: withdrawn, its connection answered.
    let w2 = park_queued(&s, &mut c, ("k", "w2", 2, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 1);
    assert_eq!(w2.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    // An error outcome (the key turned into another type) goes to the listener.
    acquire(&mut c, "other", "holder", 60_000);
    let w3 = park_queued(&s, &mut c, ("other", "w3", 3, 0), 0, 1);
    raw(&mut c, &cmd!("SET", "other", "x"));
    assert_eq!(w3.reply(), Value::SimpleString("QUEUED".into()));
    let got = l.read_n(1);
    assert_kinds(&got, &[("error", Some(3))]);
    assert!(got[0].text().starts_with("WRONGTYPE"), "{got:?}");
    // The session ends: its parked connections are answered, its requests withdrawn.
    let w4 = park_queued(&s, &mut c, ("k", "w4", 4, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(w4.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), Vec::<String>::new());
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
}

/// `CLIENT UNBLOCK <id> ERROR` answers the parked connection `UNBLOCKED ...` itself, which
/// says the request did not run (a client queues it again: the Rust client does): so it ends,
/// with that error as its outcome, as at a demotion. Before, it stayed queued, and its grant
/// went to the listener for a request its client had given up: a lock held by nobody until
/// its lease ended.
#[test]
fn a_parked_session_request_answered_unblocked_by_the_server_is_withdrawn() {
    let (s, mut c, mut l) = start(5000);
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id, "ERROR")), 1);
    let e = error_text(&w.reply()).expect("an error reply");
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    assert_eq!(queue_of(&mut c, "k"), Vec::<String>::new(), "ended");
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    // Its client queues again; the lock goes to that request only.
    let w2 = park_queued(&s, &mut c, ("k", "w", 2, 0), 0, 1);
    release(&mut c, "k", "holder");
    assert_eq!(w2.reply(), Value::Int(1));
    assert_eq!(hgetall(&mut c, "k"), holder("w", 1), "one hold, taken once");
    let got = l.read();
    assert_kinds(&got, &[("error", Some(1))]);
    assert!(got[0].text().starts_with("UNBLOCKED"), "{got:?}");
}

/// `CLIENT UNBLOCK <id> ERROR` in the same turn as a grant to a parked session request, before
/// the grant's reply is sent: the server answers the connection `UNBLOCKED ...` itself, which
/// says the request did not run (its client queues it again). So the grant is undone, and
/// nothing follows the error. Before: the grant was replied after it (two replies to one
/// command: the connection's next command read the grant) and stood, held by an owner told it
/// had nothing. Redis 7.0 calls the module back the same way for a plain `CLIENT UNBLOCK`,
/// which needs the grant replied: there the grant is replied, as before. On Redis 7.2
/// `CLIENT UNBLOCK` does not reach rlock's waits at all.
#[test]
fn a_grant_in_flight_answered_unblocked_by_the_server_is_undone_and_not_replied() {
    let (s, mut c, mut l) = start(5000);
    let server = ServerKind::of(&mut c);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RLOCK.RELEASE", "k", "holder")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id, "ERROR")),
        "QUEUED"
    );
    if !server.client_unblock_reaches_waits() {
        // Redis 7.2: CLIENT UNBLOCK does not reach the parked request, which gets its grant.
        assert_eq!(
            raw(&mut c, &cmd!("EXEC")),
            Value::Array(vec![Value::Int(0), Value::Int(0)])
        );
        assert_eq!(w.reply(), Value::Int(1));
        assert_eq!(hgetall(&mut c, "k"), holder("w", 1));
        return;
    }
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Int(1)])
    );
    let (first, mut wc) = w.reply_and_conn();
    let e = error_text(&first).unwrap_or_else(|| panic!("an error reply: {first:?}"));
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    if server.flavor == Flavor::Redis && (server.version.0, server.version.1) < (7, 4) {
        return; // Redis 7.0: see above (7.2 returned earlier).
    }
    assert_eq!(
        raw(&mut wc, &cmd!("PING")),
        Value::SimpleString("PONG".into()),
        "one reply to one command"
    );
    wait_until(Duration::from_secs(5), "the grant is undone", || {
        !exists(&mut c, "k")
    });
    assert_eq!(l.read(), vec![], "nothing granted, nothing to tell");
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
}

#[test]
fn inside_multi_a_parked_session_request_is_queued_without_parking() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let mut q = queue_cmd("k", "in-multi", 60_000, "app", 1, 0);
    q.arg("BLOCK").arg(0);
    let mut p = redis::pipe();
    p.atomic().add_command(q);
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(replies, vec![Value::SimpleString("QUEUED".into())]);
    release(&mut c, "k", "holder");
    assert_kinds(&l.read_n(1), &[("granted", Some(1))]);
}

#[test]
fn semaphore_grants_to_parked_waiters_are_not_watched_as_holds() {
    // A semaphore has no owner: nothing of it can be lost, nothing is watched (a grant to a
    // blocked waiter that named a session used to be watched, and reported "lost" at once).
    let (s, mut c, mut l) = start(5000);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "sem")), 1);
    let blocked = Pending::send(
        &s,
        &cmd!("RSEM.ACQUIRE", "sem", "BLOCK", 0, "SESSION", "app"),
    );
    wait_blocked(&mut c, 1);
    let mut q = cmd!("RSEM.ACQUIRE", "sem", "SESSION", "app", "QUEUE", 1, 0);
    q.arg("BLOCK").arg(0);
    let parked = Pending::send(&s, &q);
    wait_blocked(&mut c, 2);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "sem")), 0);
    assert_eq!(blocked.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "sem")), 0);
    assert_eq!(parked.reply_int(), 1);
    // A marker outcome: everything before it would have been read with it.
    acquire(&mut c, "marker", "holder", 60_000);
    queued(&mut c, &queue_cmd("marker", "m", 60_000, "app", 2, 50));
    assert_kinds(&l.read_n(1), &[("timeout", Some(2))]);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);
    assert_eq!(rlock_stat(&mut c, "holds_lost"), 0);
}

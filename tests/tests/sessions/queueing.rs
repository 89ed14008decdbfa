//! Sessions: queueing and outcomes.

use super::*;

#[test]
fn a_free_lock_is_granted_at_once_in_one_round_trip() {
    let (_s, mut c, mut l) = start(5000);
    // The reply is the grant itself: no outcome follows, nothing is queued.
    assert_eq!(
        int(&mut c, &queue_cmd("free", "o1", 30_000, "app", 1, 5000)),
        1
    );
    assert_eq!(hgetall(&mut c, "free"), holder("o1", 1));
    assert_between("pttl", pttl(&mut c, "free"), 29_000, 30_000);
    let mut fenced = queue_cmd("fenced", "o1", 30_000, "app", 2, 5000);
    fenced.arg("FENCE");
    let t = int(&mut c, &fenced);
    assert_eq!(
        string(&mut c, &cmd!("GET", token_key("fenced"))),
        t.to_string(),
        "FENCE: the token"
    );
    let rw = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "o1",
        "READ",
        30_000,
        "SESSION",
        "app",
        "QUEUE",
        3,
        5000
    );
    assert_eq!(int(&mut c, &rw), 1);
    assert_eq!(l.read(), vec![]);
    let info = session_info(&mut c, "app");
    assert_eq!(
        (field_int(&info, "queued"), field_int(&info, "last")),
        (0, 0)
    );
    assert_eq!(rlock_stat(&mut c, "waits_started"), 0);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
}

#[test]
fn a_queued_request_is_granted_with_the_reply_a_blocked_waiter_gets() {
    let (s, mut c, mut l) = start(5000);
    let t0 = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "k", "holder", 30_000, "FENCE"),
    );
    let token_now = |c: &mut redis::Connection| -> i64 {
        string(c, &cmd!("GET", token_key("k")))
            .parse()
            .expect("a token")
    };
    assert_eq!(token_now(&mut c), t0);

    let mut q = queue_cmd("k", "o1", 20_000, "app", 7, 0);
    q.arg("FENCE");
    queued(&mut c, &q);
    queued(&mut c, &queue_cmd("k", "o2", 20_000, "app", 8, 0));
    assert_eq!(queue_of(&mut c, "k"), ["o1", "o2"]);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 2);
    assert_eq!(rlock_stat(&mut c, "waits_started"), 2);
    assert_eq!(l.read(), vec![], "nothing happened yet");

    release(&mut c, "k", "holder");
    // Handed off in the same step: the new holder is visible at once, with its lease counted
    // from the grant and the next fencing token.
    assert_eq!(hgetall(&mut c, "k"), holder("o1", 1));
    assert_between("pttl", pttl(&mut c, "k"), 19_000, 20_000);
    let got = l.read();
    let t1 = token_now(&mut c);
    assert!(t1 > t0);
    assert_eq!(
        got,
        vec![Outcome {
            seq: 1,
            kind: "granted".into(),
            request: Some(7),
            key: Some("k".into()),
            value: Value::Int(t1),
        }],
        "granted with the token a blocked FENCE waiter gets"
    );
    release(&mut c, "k", "o1");
    assert_eq!(hgetall(&mut c, "k"), holder("o2", 1));
    let got = l.read();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].seq, got[0].request, got[0].value.clone()),
        (2, Some(8), Value::Int(1)),
        "the hold count, as a blocked waiter gets it"
    );
    // The same grant to a blocked waiter, for comparison.
    let w = park(&s, &mut c, "k", "w", 20_000, &["FENCE"], 1);
    release(&mut c, "k", "o2");
    let t3 = w.reply_int();
    assert!(t3 > t1);
    assert_eq!(token_now(&mut c), t3);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "handoffs"), 3);
}

#[test]
fn session_requests_and_block_waiters_share_one_fifo() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    let b1 = park(&s, &mut c, "k", "b1", 30_000, &[], 1);
    queued(&mut c, &queue_cmd("k", "q1", 30_000, "app", 1, 0));
    let b2 = park(&s, &mut c, "k", "b2", 30_000, &[], 2);
    queued(&mut c, &queue_cmd("k", "q2", 30_000, "app", 2, 0));
    queued(&mut c, &queue_cmd("k", "q3", 30_000, "app", 3, 0));
    let b3 = park(&s, &mut c, "k", "b3", 30_000, &[], 3);
    assert_eq!(queue_of(&mut c, "k"), ["b1", "q1", "b2", "q2", "q3", "b3"]);
    // A newcomer does not overtake anyone, whichever way it waits.
    assert_eq!(
        raw(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "late", 30_000)),
        Value::Nil
    );

    let mut prev = "holder".to_string();
    let mut blocked = vec![("b1", b1), ("b2", b2), ("b3", b3)].into_iter();
    for next in ["b1", "q1", "b2", "q2", "q3", "b3"] {
        release(&mut c, "k", &prev);
        assert_eq!(hgetall(&mut c, "k"), holder(next, 1), "after {prev}");
        if next.starts_with('b') {
            let (name, w) = blocked.next().unwrap();
            assert_eq!((name, w.reply_int()), (next, 1));
        } else {
            let got = l.read();
            assert_eq!(got.len(), 1, "{next}: {got:?}");
            assert_eq!(got[0].kind, "granted");
            assert_eq!(got[0].request, Some(next[1..].parse().unwrap()));
        }
        prev = next.to_string();
    }
    release(&mut c, "k", &prev);
    assert!(!exists(&mut c, "k"));
}

#[test]
fn a_server_side_deadline_ends_a_request_with_a_timeout_outcome() {
    let (s, mut c, l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    let reader = l.park(&s, &mut c);
    let t0 = Instant::now();
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 3, 250));
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "timeout outcome {} ms after queueing (deadline 250 ms)",
        after.as_millis()
    );
    assert_eq!(
        got,
        vec![Outcome {
            seq: 1,
            kind: "timeout".into(),
            request: Some(3),
            key: None,
            value: Value::Nil,
        }]
    );
    assert_between(
        "ms until the timeout outcome",
        after.as_millis() as i64,
        249,
        2000,
    );
    // Nothing is left queued; the holder is untouched.
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    assert_eq!(hgetall(&mut c, "k"), holder("holder", 1));
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "waits_timed_out"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 0);
}

#[test]
fn a_request_that_can_never_be_granted_ends_with_an_error_outcome() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    queued(&mut c, &queue_cmd("k", "o1", 60_000, "app", 1, 0));
    // The lock's key is overwritten with a string: the request can never be granted.
    assert_eq!(string(&mut c, &cmd!("SET", "k", "not a lock")), "OK");
    let got = l.read_n(1);
    assert_eq!(
        (got[0].kind.as_str(), got[0].request, got[0].key.as_deref()),
        ("error", Some(1), None)
    );
    assert_eq!(
        got[0].text(),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(string(&mut c, &cmd!("GET", "k")), "not a lock");
}

#[test]
fn a_parked_read_is_woken_at_once_by_an_outcome() {
    let (s, mut c, _l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 1, 0));
    // Parked for up to 10 s: only the grant can end it early.
    let reader = Pending::send(&s, &cmd!("RSESSION.READ", "app", 0, "BLOCK", 10_000));
    wait_until(Duration::from_secs(10), "listener parked", || {
        field_int(&session_info(&mut c, "app"), "reading") == 1
    });
    let t0 = Instant::now();
    release(&mut c, "k", "holder");
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "parked RSESSION.READ answered {} us after the release was sent",
        after.as_micros()
    );
    assert_eq!(got.len(), 1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert!(after < Duration::from_millis(500), "woken after {after:?}");
    assert_eq!(field_int(&session_info(&mut c, "app"), "reading"), 0);
}

#[test]
fn outcomes_stay_until_acknowledged_and_a_new_listener_reads_what_it_missed() {
    let (s, mut c, l) = start(10_000);
    hold_and_queue(&mut c, 3, "app");
    // The first listener is parked, then killed; the grants arrive after it is gone.
    let reader = l.park(&s, &mut c);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
    drop(reader);
    wait_until(Duration::from_secs(10), "listener gone", || {
        field_int(&session_info(&mut c, "app"), "reading") == 0
    });
    for i in 1..=3 {
        release(&mut c, &format!("k{i}"), "holder");
    }

    // A new listener resumes the session and reads what it missed, as often as it asks, until
    // it acknowledges.
    let mut c2 = s.conn();
    let resumed = fields(&raw(&mut c2, &cmd!("RSESSION.OPEN", "app", 10_000)));
    assert_eq!(
        [
            field_int(&resumed, "resumed"),
            field_int(&resumed, "acked"),
            field_int(&resumed, "last"),
            field_int(&resumed, "pending")
        ],
        [1, 0, 3, 3]
    );
    let first = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(
        first
            .iter()
            .map(|o| (o.seq, o.kind.as_str(), o.request, o.key.clone()))
            .collect::<Vec<_>>(),
        (1..=3)
            .map(|i| (i, "granted", Some(i), Some(format!("k{i}"))))
            .collect::<Vec<_>>()
    );
    let again = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0, "COUNT", 2)));
    assert_eq!(
        again,
        first[..2].to_vec(),
        "not acknowledged: read again (COUNT 2)"
    );
    // Acknowledge the first with RSESSION.ACK, the rest with the cursor of the next read.
    assert_eq!(int(&mut c2, &cmd!("RSESSION.ACK", "app", 1)), 1);
    let rest = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(rest, first[1..].to_vec());
    assert_eq!(
        outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 3))),
        vec![]
    );
    assert_eq!(
        outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0))),
        vec![],
        "exactly once"
    );
    let info = session_info(&mut c2, "app");
    assert_eq!(
        (field_int(&info, "pending"), field_int(&info, "acked")),
        (0, 3)
    );
    assert_eq!(rlock_stat(&mut c2, "session_outcomes_pending"), 0);
    for i in 1..=3 {
        assert_eq!(
            hgetall(&mut c, &format!("k{i}")),
            holder(&format!("o{i}"), 1)
        );
    }
}

#[test]
fn cancel_withdraws_a_queued_request_and_a_grant_that_won_is_still_delivered() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("k", "o2", 30_000, "app", 2, 0));
    assert_eq!(
        int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)),
        1,
        "withdrawn"
    );
    assert_eq!(
        int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)),
        0,
        "not queued any more"
    );
    assert_eq!(queue_of(&mut c, "k"), ["o2"]);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 1);

    // The grant races the cancel and wins: CANCEL says 0, the grant is delivered.
    release(&mut c, "k", "holder");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 0);
    let got = l.read();
    assert_eq!(got.len(), 1);
    assert_kinds(&got, &[("granted", Some(2))]);
    assert_eq!(
        hgetall(&mut c, "k"),
        holder("o2", 1),
        "the client releases it"
    );
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(l.read(), vec![], "a cancel adds no outcome");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 99)), 0);
}

//! Sessions: liveness: the grace period.

use super::*;

#[test]
fn after_the_grace_period_queued_requests_leave_and_unacknowledged_grants_go_on() {
    let (s, mut c, mut l) = start(400);
    for k in ["acked", "unacked", "queued"] {
        acquire(&mut c, k, "holder", 60_000);
    }
    queued(&mut c, &queue_cmd("acked", "qa", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("unacked", "qu", 60_000, "app", 2, 0));
    queued(&mut c, &queue_cmd("queued", "qq", 60_000, "app", 3, 0));
    let taken = cmd!("RLOCK.ACQUIRE", "taken", "qt", 60_000, "SESSION", "app");
    assert_eq!(int(&mut c, &taken), 1);
    release(&mut c, "acked", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert_eq!(l.read(), vec![], "acknowledged by the cursor");
    let wu = park(&s, &mut c, "unacked", "wu", 60_000, &[], 1);
    let wq = park(&s, &mut c, "queued", "wq", 60_000, &[], 2);

    // The listener goes; then a grant arrives for nobody.
    let reader = l.park(&s, &mut c);
    let gone = Instant::now();
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
    release(&mut c, "unacked", "holder");
    assert_eq!(hgetall(&mut c, "unacked"), holder("qu", 1));
    // Within the grace period everything is kept for a listener that comes back.
    let info = session_info(&mut c, "app");
    assert_eq!(
        (field_int(&info, "queued"), field_int(&info, "pending")),
        (1, 1)
    );
    assert_eq!(
        field_int(&info, "holds"),
        3,
        "acked, unacked and taken are watched"
    );

    // After it, the unacknowledged grant is undone and handed to the next waiter.
    assert_eq!(wu.reply_within(Duration::from_secs(5)), Value::Int(1));
    let after = gone.elapsed();
    println!(
        "grant handed on {} ms after the listener was killed (grace 400 ms)",
        after.as_millis()
    );
    assert_between("ms until the hand-off", after.as_millis() as i64, 398, 3000);
    assert_eq!(hgetall(&mut c, "unacked"), holder("wu", 1));
    let e = err(&mut c, &cmd!("RSESSION.INFO", "app"));
    assert!(e.starts_with("NOSESSION"), "{e}");
    // The queued request left its queue; acknowledged holds are untouched.
    assert_eq!(queue_of(&mut c, "queued"), ["wq"]);
    assert_eq!(hgetall(&mut c, "acked"), holder("qa", 1));
    assert_eq!(hgetall(&mut c, "taken"), holder("qt", 1));
    assert_between("acked pttl", pttl(&mut c, "acked"), 50_000, 60_000);
    for (field, want) in [
        ("sessions", 0),
        ("session_requests", 0),
        ("session_outcomes_pending", 0),
        ("session_holds_watched", 0),
        ("sessions_expired", 1),
        ("grants_revoked", 1),
        ("waiters", 1),
    ] {
        assert_eq!(rlock_stat(&mut c, field), want, "INFO rlock {field}");
    }
    assert!(
        rlock_stat(&mut c, "timer_jobs") <= 1,
        "no job left for the session"
    );
    release(&mut c, "queued", "holder");
    assert_eq!(wq.reply_int(), 1);
}

#[test]
fn a_listener_that_stops_reading_loses_its_session_after_the_grace_period() {
    let s = Server::start();
    let mut c = s.conn();
    let mut l = Listener::open(&s, "quiet", 300);
    acquire(&mut c, "k", "holder", 60_000);
    queued(&mut c, &queue_cmd("k", "q", 60_000, "quiet", 1, 0));
    assert_eq!(l.read(), vec![]);
    let last_read = Instant::now();
    wait_until(Duration::from_secs(5), "session expired", || {
        error_text(&raw(&mut c, &cmd!("RSESSION.INFO", "quiet"))).is_some()
    });
    let after = last_read.elapsed();
    println!(
        "silent session ended {} ms after its last read (grace 300 ms)",
        after.as_millis()
    );
    assert!(after >= Duration::from_millis(298), "{after:?}");
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), 1);
    let e = err(&mut l.conn, &cmd!("RSESSION.READ", "quiet", 0));
    assert!(e.starts_with("NOSESSION"), "{e}");
}

/// Each read moves the session's end to a grace period after it, past the end its expiry job
/// was armed for: that job, when it comes, looks again then instead of ending the session.
#[test]
fn reads_keep_a_session_past_the_end_its_first_read_set() {
    let s = Server::start();
    let mut c = s.conn();
    let grace = rlock_tests::margin_ms(300);
    let mut l = Listener::open(&s, "busy", grace);
    let opened = Instant::now();
    // Reads every 50 ms for four grace periods: the session lives throughout.
    while opened.elapsed() < Duration::from_millis(4 * grace as u64) {
        assert_eq!(l.read(), vec![]);
        let info = session_info(&mut c, "busy");
        assert!(field_int(&info, "expires_in_ms") > 0, "{info:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(l.read(), vec![]);
    let last_read = Instant::now();
    wait_until(Duration::from_secs(5), "session expired", || {
        error_text(&raw(&mut c, &cmd!("RSESSION.INFO", "busy"))).is_some()
    });
    let after = last_read.elapsed();
    assert!(
        after >= Duration::from_millis(grace as u64 - 2),
        "{after:?}"
    );
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), 1);
}

#[test]
fn a_parked_listener_keeps_its_session_beyond_the_grace_period() {
    let (s, mut c, l) = start(200);
    let reader = l.park(&s, &mut c);
    // Nothing can be awaited here: the behaviour is that nothing happens for a while.
    std::thread::sleep(Duration::from_millis(800));
    let info = session_info(&mut c, "app");
    assert_eq!(field_int(&info, "reading"), 1);
    assert_eq!(
        field_int(&info, "expires_in_ms"),
        -1,
        "no expiry while parked"
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    let e = error_text(&reader.reply()).unwrap_or_default();
    assert!(
        e.starts_with("NOSESSION"),
        "a parked read of a closed session: {e}"
    );
    assert_eq!(rlock_stat(&mut c, "sessions_closed"), 1);
}

#[test]
fn rsession_close_ends_a_session_at_once_as_expiry_would() {
    let (s, mut c, _l) = start(60_000);
    acquire(&mut c, "granted", "holder", 60_000);
    acquire(&mut c, "queued", "holder", 60_000);
    queued(&mut c, &queue_cmd("granted", "qg", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("queued", "qq", 60_000, "app", 2, 0));
    let w = park(&s, &mut c, "granted", "w", 60_000, &[], 1);
    release(&mut c, "granted", "holder");
    assert_eq!(
        hgetall(&mut c, "granted"),
        holder("qg", 1),
        "granted, not acknowledged"
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(
        w.reply_int(),
        1,
        "the unacknowledged grant went to the next waiter"
    );
    assert_eq!(hgetall(&mut c, "granted"), holder("w", 1));
    assert_eq!(lock_info(&mut c, "queued").waiters, 0);
    assert_eq!(rlock_stat(&mut c, "sessions_closed"), 1);
    assert_eq!(rlock_stat(&mut c, "sessions"), 0);
    let e = err(&mut c, &cmd!("RSESSION.READ", "app", 0));
    assert!(e.starts_with("NOSESSION"), "{e}");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 0);
}

/// Ending a session hands every key it waited on to whoever waits behind its requests, also
/// when its requests on one key were queued at different times (interleaved with its requests
/// on other keys), and forgets the queues it leaves empty with their re-check jobs.
#[test]
fn closing_a_session_hands_each_key_it_waited_on_to_the_waiters_behind() {
    const KEYS: i64 = 200;
    let (s, mut c, _l) = start(60_000);
    let mut other = Listener::open(&s, "other", 60_000);
    let timers_before = rlock_stat(&mut c, "timer_jobs");
    let rw = |key: &str, owner: &str, mode: &str, session: &str, req: i64| {
        cmd!(
            "RRWLOCK.ACQUIRE",
            key,
            owner,
            mode,
            60_000,
            "SESSION",
            session,
            "QUEUE",
            req,
            0
        )
    };
    for i in 0..KEYS {
        let key = format!("rw{i}");
        assert_eq!(
            int(&mut c, &cmd!("RRWLOCK.ACQUIRE", &key, "r", "READ", 60_000)),
            1
        );
        // app's writer first, then other's reader behind it (a reader waits behind a writer).
        queued(&mut c, &rw(&key, &format!("w{i}"), "WRITE", "app", i));
        queued(&mut c, &rw(&key, &format!("r{i}"), "READ", "other", i));
        // Keys only app waits on: their queues end empty.
        let lone = format!("lone{i}");
        acquire(&mut c, &lone, "holder", 60_000);
        queued(
            &mut c,
            &queue_cmd(&lone, &format!("q{i}"), 60_000, "app", 10_000 + i, 0),
        );
    }
    // A second pass: app's requests on each key now come in two runs of its FIFO order.
    for i in 0..KEYS {
        let key = format!("rw{i}");
        queued(
            &mut c,
            &rw(&key, &format!("x{i}"), "WRITE", "app", 20_000 + i),
        );
    }
    assert_eq!(rlock_stat(&mut c, "waiters"), 4 * KEYS);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    // Every reader of `other` is granted (its writer ahead left), on the server's next turn.
    let got = other.read_n(KEYS as usize);
    assert!(got.iter().all(|o| o.kind == "granted"), "{got:?}");
    for i in 0..KEYS {
        let h = hgetall(&mut c, &format!("rw{i}"));
        assert_eq!(
            (
                h.get("mode").map(String::as_str),
                h.get(&format!("r{i}")).map(String::as_str)
            ),
            (Some("read"), Some("1")),
            "rw{i}: {h:?}"
        );
    }
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
    // Nothing left behind: no queue and no re-check job of one. The jobs left are app's
    // expiry gone (-1), and per rw key the read holds' lease-end upkeep and other's watched
    // hold.
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), KEYS);
    wait_until(Duration::from_secs(10), "timer jobs back", || {
        rlock_stat(&mut c, "timer_jobs") == timers_before - 1 + 2 * KEYS
    });
}

/// Child: the client process of `a_frozen_client_loses_its_requests_and_grants_to_the_next_waiter`.
/// It queues two requests, then reads outcomes (BLOCK 100) and acknowledges each batch,
/// printing what it got and `ACKED <seq>` when the acknowledgement succeeded, until an error.
#[test]
#[ignore = "child process: its parent test runs it (spawn_self), it does nothing alone"]
fn frozen_listener_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    fields(&raw(&mut c, &cmd!("RSESSION.OPEN", "frozen", 400)));
    queued(
        &mut c,
        &queue_cmd("fz:1", "child:1", 60_000, "frozen", 1, 0),
    );
    queued(
        &mut c,
        &queue_cmd("fz:2", "child:2", 60_000, "frozen", 2, 0),
    );
    println!("QUEUED");
    let mut cursor = 0;
    loop {
        let v = raw(
            &mut c,
            &cmd!("RSESSION.READ", "frozen", cursor, "BLOCK", 100),
        );
        if let Some(e) = error_text(&v) {
            println!("ERROR {e}");
            return;
        }
        let got = outcomes(&v);
        for o in &got {
            println!("OUTCOME {} {} {:?}", o.seq, o.kind, o.request);
            cursor = o.seq;
        }
        if !got.is_empty() {
            // A grant is the client's only once acknowledged.
            match raw(&mut c, &cmd!("RSESSION.ACK", "frozen", cursor)) {
                Value::Int(_) => println!("ACKED {cursor}"),
                other => {
                    println!("ERROR {}", error_text(&other).unwrap_or_default());
                    return;
                }
            }
        }
    }
}

#[test]
fn a_frozen_client_loses_its_requests_and_grants_to_the_next_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "fz:1", "holder", 60_000);
    acquire(&mut c, "fz:2", "holder", 60_000);
    let (mut child, mut out) =
        spawn_self("liveness::frozen_listener_child", &[(CHILD_URL, s.url())]);
    read_until(&mut out, "QUEUED");
    // (Not wait_blocked: the child's parked reads count as blocked clients too.)
    let w1 = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "fz:1", "w1", 60_000, "BLOCK", 0));
    let w2 = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "fz:2", "w2", 60_000, "BLOCK", 0));
    wait_until(Duration::from_secs(10), "both waiters queued", || {
        queue_of(&mut c, "fz:1") == ["child:1", "w1"]
            && queue_of(&mut c, "fz:2") == ["child:2", "w2"]
    });

    signal(child.id(), "-STOP");
    // kill(1) returns before the process has stopped (measured: up to 0.6 ms later).
    let status = format!("/proc/{}/status", child.id());
    wait_until(Duration::from_secs(5), "child stopped", || {
        let st = std::fs::read_to_string(&status).unwrap_or_default();
        st.lines()
            .any(|l| l.starts_with("State:") && l.contains("stopped"))
    });
    // Its last read returns (BLOCK 100), then nothing: the grace period runs from there. (A
    // grant that read had returned would be the frozen client's own until its lease ends.)
    wait_until(
        Duration::from_secs(5),
        "the frozen listener's read returned",
        || field_int(&session_info(&mut c, "frozen"), "reading") == 0,
    );
    let frozen = Instant::now();
    // Granted to the frozen client, which never reads it.
    release(&mut c, "fz:1", "holder");
    assert_eq!(hgetall(&mut c, "fz:1"), holder("child:1", 1));
    // After the grace period the grant goes to the next waiter and the queued request leaves.
    assert_eq!(w1.reply_within(Duration::from_secs(5)), Value::Int(1));
    println!(
        "frozen client's grant handed on {} ms after its read returned (grace 400)",
        frozen.elapsed().as_millis()
    );
    assert_eq!(hgetall(&mut c, "fz:1"), holder("w1", 1));
    assert_eq!(queue_of(&mut c, "fz:2"), ["w2"]);
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), 1);
    release(&mut c, "fz:2", "holder");
    assert_eq!(w2.reply_int(), 1);

    // Resumed, the client learns its session is gone before it could acknowledge the grant.
    signal(child.id(), "-CONT");
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended: {lines:?}"
        );
        let line = line.trim_end().to_string();
        let last = line.starts_with("ERROR");
        lines.push(line);
        if last {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    println!("child after SIGCONT: {lines:?}");
    assert!(
        lines.last().unwrap().starts_with("ERROR NOSESSION"),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("ACKED")), "{lines:?}");
    assert_eq!(hgetall(&mut c, "fz:1"), holder("w1", 1));
    assert_eq!(hgetall(&mut c, "fz:2"), holder("w2", 1));
}

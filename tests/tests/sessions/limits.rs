//! Sessions: limits and errors.

use super::*;

#[test]
fn limits_are_clear_errors_and_nothing_is_queued() {
    let s = Server::start();
    let mut c = s.conn();
    let get = |c: &mut redis::Connection, name: &str| -> String {
        let v: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
        v[1].clone()
    };
    assert_eq!(get(&mut c, "rlock.session-max-grace-ms"), "60000");
    assert_eq!(get(&mut c, "rlock.session-max-queued"), "100000");
    assert_eq!(get(&mut c, "rlock.session-max-backlog"), "100000");
    acquire(&mut c, "k", "holder", 60_000);

    // Grace period.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-grace-ms", 1000),
    );
    let e = err(&mut c, &cmd!("RSESSION.OPEN", "big", 1001));
    assert_eq!(
        e,
        "ERR grace_ms 1001 is above rlock.session-max-grace-ms (1000)"
    );
    assert_eq!(raw(&mut c, &cmd!("RSESSION.LIST")), Value::Array(vec![]));
    let mut l = Listener::open(&s, "app", 1000);

    // Queued requests.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-queued", 2),
    );
    queued(&mut c, &queue_cmd("k", "o1", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("k", "o2", 60_000, "app", 2, 0));
    let started = rlock_stat(&mut c, "waits_started");
    let e = err(&mut c, &queue_cmd("k", "o3", 60_000, "app", 3, 0));
    assert_eq!(
        e,
        "ERR the session has 2 requests queued (rlock.session-max-queued)"
    );
    assert_eq!(queue_of(&mut c, "k"), ["o1", "o2"]);
    assert_eq!(rlock_stat(&mut c, "waits_started"), started);
    // A request granted at once queues nothing: the limit does not apply.
    assert_eq!(
        int(&mut c, &queue_cmd("free", "o3", 60_000, "app", 3, 0)),
        1
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 1);

    // Outcomes not acknowledged.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-backlog", 2),
    );
    queued(&mut c, &queue_cmd("k", "o4", 60_000, "app", 4, 1));
    queued(&mut c, &queue_cmd("k", "o5", 60_000, "app", 5, 1));
    wait_until(Duration::from_secs(5), "two timeouts", || {
        field_int(&session_info(&mut c, "app"), "pending") == 2
    });
    let e = err(&mut c, &queue_cmd("k", "o6", 60_000, "app", 6, 0));
    assert_eq!(
        e,
        "ERR the session has 2 outcomes not acknowledged (rlock.session-max-backlog): read them with RSESSION.READ"
    );
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    let timeouts = l.read();
    assert!(timeouts.iter().all(|o| o.kind == "timeout"), "{timeouts:?}");
    assert_eq!(l.read(), vec![], "acknowledges the two");
    queued(&mut c, &queue_cmd("k", "o6", 60_000, "app", 6, 0));
    assert_eq!(rlock_stat(&mut c, "session_requests"), 1);
}

#[test]
fn unknown_sessions_and_bad_combinations_are_refused_before_anything_is_written() {
    let s = Server::start();
    let mut c = s.conn();
    let nosession = |c: &mut redis::Connection, command: redis::Cmd| {
        let e = err(c, &command);
        assert_eq!(
            e,
            "NOSESSION no such session (never opened, closed, or expired): open it with RSESSION.OPEN",
            "{}",
            show(&command)
        );
    };
    // A free lock is not taken, the token not incremented.
    nosession(
        &mut c,
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "SESSION", "nope", "FENCE"),
    );
    nosession(&mut c, queue_cmd("k", "o", 1000, "nope", 1, 0));
    nosession(
        &mut c,
        cmd!(
            "RRWLOCK.ACQUIRE",
            "rw",
            "o",
            "WRITE",
            1000,
            "SESSION",
            "nope",
            "QUEUE",
            1,
            0
        ),
    );
    assert_eq!(dbsize(&mut c), 0);
    acquire(&mut c, "k", "holder", 60_000);
    nosession(&mut c, queue_cmd("k", "o", 1000, "nope", 1, 0));
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    for command in [
        cmd!("RSESSION.READ", "nope", 0),
        cmd!("RSESSION.READ", "nope", 0, "BLOCK", 100),
        cmd!("RSESSION.ACK", "nope", 0),
        cmd!("RSESSION.CANCEL", "nope", 1),
        cmd!("RSESSION.INFO", "nope"),
    ] {
        nosession(&mut c, command);
    }
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "nope")), 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);

    let _l = Listener::open(&s, "app", 1000);
    for (command, want) in [
        (
            "RLOCK.ACQUIRE k o 1000 SESSION app QUEUE 1 0 BLOCK -1",
            "ERR timeout is negative",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 BLOCK x SESSION app QUEUE 1 0",
            "ERR timeout is not an integer or out of range",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 QUEUE 1 0",
            "ERR syntax error, QUEUE needs SESSION",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 SESSION app QUEUE 1 -1",
            "ERR timeout is negative",
        ),
        ("RSESSION.OPEN app -1", "ERR grace_ms must be at least 0"),
    ] {
        let mut words = command.split(' ');
        let mut c2 = redis::cmd(words.next().unwrap());
        c2.arg(words.collect::<Vec<_>>());
        assert_eq!(err(&mut c, &c2), want, "{command}");
    }
    // A request id may be queued once at a time in a session.
    queued(&mut c, &queue_cmd("k", "o1", 1000, "app", 5, 0));
    acquire(&mut c, "k2", "holder", 60_000);
    let e = err(&mut c, &queue_cmd("k2", "o2", 1000, "app", 5, 0));
    assert_eq!(e, "ERR request id is already queued in this session");
    assert_eq!(lock_info(&mut c, "k2").waiters, 0);
    assert_eq!(queue_of(&mut c, "k"), ["o1"]);
    assert_eq!(rlock_stat(&mut c, "waits_started"), 1);
}

#[test]
fn queue_works_inside_multi_and_lua_where_block_cannot() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    // Queueing never blocks the connection, so a transaction or a script may queue.
    let mut p = redis::pipe();
    p.atomic()
        .add_command(queue_cmd("k", "in-multi", 60_000, "app", 1, 0))
        .add_command(cmd!("RLOCK.ACQUIRE", "k", "blocked", 60_000, "BLOCK", 0));
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(
        replies,
        vec![Value::SimpleString("QUEUED".into()), Value::Nil],
        "QUEUE queues inside MULTI; BLOCK degrades to one attempt"
    );
    let script = "return redis.call('RLOCK.ACQUIRE', KEYS[1], ARGV[1], 60000, 'SESSION', 'app', 'QUEUE', 2, 0)";
    let v = raw(&mut c, &cmd!("EVAL", script, 1, "k", "in-lua"));
    assert_eq!(text(&v).as_deref(), Some("QUEUED"), "{v:?}");
    assert_eq!(queue_of(&mut c, "k"), ["in-multi", "in-lua"]);
    release(&mut c, "k", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    release(&mut c, "k", "in-multi");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(2))]);
    assert_eq!(hgetall(&mut c, "k"), holder("in-lua", 1));
}

//! Where the servers of the matrix (`make matrix`: Redis 7.0/7.4/8.2, Valkey 8.1/9.1) differ
//! under rlock, each test asserting what the server under test does.
//!
//! Valkey 8.1 runs a module's keyspace-event callback on the client that ran the command and
//! leaves that client selected on the event's database (valkey-io/valkey#4024, fixed in 9.x).
//! rlock listens to generic events, so every cross-database command is exposed: the module puts
//! the caller back after MOVE (`module/src/events.rs`), but `COPY ... DB n` names only its
//! target and leaves the caller on db n.

use rlock_tests::{cmd, int, raw, string, Server, ServerOptions, Value};

/// The `db=` of `CLIENT INFO` on `c`: the database the connection has selected.
fn selected_db(c: &mut rlock_tests::redis::Connection) -> i64 {
    let info = string(c, &cmd!("CLIENT", "INFO"));
    info.split_whitespace()
        .find_map(|f| f.strip_prefix("db="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("CLIENT INFO without db=: {info}"))
}

#[test]
fn move_keeps_the_caller_on_its_database() {
    let s = Server::start();
    let kind = s.kind();
    let mut c = s.conn();
    for (from, to) in [(0, 1), (3, 5)] {
        assert_eq!(string(&mut c, &cmd!("SELECT", from)), "OK");
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o", 30_000)), 1);
        assert_eq!(int(&mut c, &cmd!("MOVE", "lk", to)), 1);
        assert_eq!(selected_db(&mut c), from, "{kind}: after MOVE lk {to}");
        assert_eq!(
            int(&mut c, &cmd!("EXISTS", "lk")),
            0,
            "{kind}: lk left db {from}"
        );
        assert_eq!(string(&mut c, &cmd!("SELECT", to)), "OK");
        assert_eq!(
            int(&mut c, &cmd!("DEL", "lk")),
            1,
            "{kind}: lk is in db {to}"
        );
    }
    // Inside MULTI and inside a script, the commands after MOVE still see the caller's db.
    assert_eq!(string(&mut c, &cmd!("SELECT", 0)), "OK");
    assert_eq!(string(&mut c, &cmd!("SET", "here", "x")), "OK");
    assert_eq!(string(&mut c, &cmd!("SET", "k", "v")), "OK");
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(string(&mut c, &cmd!("MOVE", "k", 1)), "QUEUED");
    assert_eq!(string(&mut c, &cmd!("EXISTS", "here")), "QUEUED");
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(1), Value::Int(1)]),
        "{kind}: EXISTS after MOVE inside MULTI"
    );
    assert_eq!(selected_db(&mut c), 0, "{kind}: after MULTI with MOVE");
    assert_eq!(string(&mut c, &cmd!("SET", "k", "v")), "OK");
    let script = "redis.call('MOVE', KEYS[1], 2); return redis.call('EXISTS', KEYS[2])";
    assert_eq!(
        int(&mut c, &cmd!("EVAL", script, 2, "k", "here")),
        1,
        "{kind}: EXISTS after MOVE inside a script"
    );
    assert_eq!(selected_db(&mut c), 0, "{kind}: after a script with MOVE");
}

#[test]
fn copy_to_another_database() {
    let with_module = Server::start();
    let without = Server::with(ServerOptions {
        module: false,
        ..Default::default()
    });
    let kind = with_module.kind();
    for (s, module) in [(&with_module, true), (&without, false)] {
        let mut c = s.conn();
        assert_eq!(string(&mut c, &cmd!("SET", "k", "v")), "OK");
        assert_eq!(int(&mut c, &cmd!("COPY", "k", "k2", "DB", 1)), 1);
        let db = selected_db(&mut c);
        if module && kind.is_valkey(8, 1) {
            // The server selects db 1 on the caller for rlock's keyspace callback and leaves it
            // there; the caller's own database cannot be known from COPY's one event.
            assert_eq!(
                db, 1,
                "{kind} with rlock: COPY ... DB 1 leaves the caller on db 1"
            );
            assert_eq!(
                string(&mut c, &cmd!("GET", "k2")),
                "v",
                "{kind}: reads db 1"
            );
        } else {
            assert_eq!(
                db, 0,
                "{kind} (module loaded: {module}): after COPY ... DB 1"
            );
            assert_eq!(string(&mut c, &cmd!("GET", "k")), "v");
        }
    }
}

//! Effects replicate as native commands with absolute expiry: a replica without the module
//! matches the master after every kind of read-write lock write (hold keys included). (An AOF
//! written with the module reloads on a server without it: every_object.rs, for every object.)

use super::*;

#[test]
fn replica_without_the_module_matches_the_master_after_every_kind_of_write() {
    let master = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..Default::default()
    });
    let replica = start_replica(&master);
    let mut m = master.conn();
    let mut r = replica.conn();
    let step = |m: &mut redis::Connection, r: &mut redis::Connection, what: &str| {
        assert_replica_matches(what, m, r);
    };

    assert_eq!(acquire(&mut m, "rw", "a", "READ", 20_000), Value::Int(1));
    step(&mut m, &mut r, "read acquire");
    assert_eq!(fields(&mut r, "rw"), pairs(&[("mode", "read"), ("a", "1")]));
    assert_between(
        "replica's hold key",
        pttl(&mut r, &rwlock_hold("rw", "a", 1)),
        17_000,
        20_000,
    );
    assert_eq!(acquire(&mut m, "rw", "a", "READ", 30_000), Value::Int(2));
    step(&mut m, &mut r, "read re-entry");
    assert_eq!(acquire(&mut m, "rw", "b", "READ", 10_000), Value::Int(1));
    step(&mut m, &mut r, "second reader");
    assert_eq!(release(&mut m, "rw", "a", "READ"), Value::Int(1));
    step(&mut m, &mut r, "partial read release");
    assert_eq!(int(&mut m, &cmd!("RRWLOCK.RENEW", "rw", "a", 15_000)), 1);
    step(&mut m, &mut r, "renew");
    assert_between(
        "replica's hash after renew",
        pttl(&mut r, "rw"),
        12_000,
        15_000,
    );
    assert_eq!(release(&mut m, "rw", "b", "READ"), Value::Int(0));
    step(&mut m, &mut r, "a reader's last release");

    // A writer queued, granted by the last read release.
    let w = park_rw(&master, &mut m, "rw", "w", "WRITE", 25_000, 1);
    assert_eq!(release(&mut m, "rw", "a", "READ"), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    step(&mut m, &mut r, "hand-off to a writer");
    assert_eq!(
        fields(&mut r, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(acquire(&mut m, "rw", "w", "WRITE", 5_000), Value::Int(2));
    step(&mut m, &mut r, "write re-entry");
    assert_eq!(acquire(&mut m, "rw", "w", "READ", 40_000), Value::Int(1));
    step(&mut m, &mut r, "downgrade");
    assert_eq!(release(&mut m, "rw", "w", "WRITE"), Value::Int(1));
    step(&mut m, &mut r, "partial write release");

    // Readers queued, granted by the downgrade's write release.
    let r1 = park_rw(&master, &mut m, "rw", "r1", "READ", 12_000, 1);
    let r2 = park_rw(&master, &mut m, "rw", "r2", "READ", 13_000, 2);
    assert_eq!(release(&mut m, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    step(
        &mut m,
        &mut r,
        "write release after a downgrade, readers granted",
    );
    assert_eq!(
        fields(&mut r, "rw"),
        pairs(&[("mode", "read"), ("w", "1"), ("r1", "1"), ("r2", "1")])
    );
    assert_eq!(int(&mut m, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    step(&mut m, &mut r, "force release");
    assert_eq!(dbsize(&mut r), 0);

    // Lease expiry hand-off to a writer: read long while the writer queues (a loaded machine
    // may take longer than a short lease to show it blocked), then the lease set to 150 ms.
    assert_eq!(acquire(&mut m, "rw", "a", "READ", 30_000), Value::Int(1));
    let w = park_rw(&master, &mut m, "rw", "w", "WRITE", 11_000, 1);
    assert_eq!(int(&mut m, &cmd!("RRWLOCK.RENEW", "rw", "a", 150)), 1);
    assert_eq!(w.reply_int(), 1);
    step(&mut m, &mut r, "hand-off on lease expiry");
    assert_eq!(
        fields(&mut r, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(release(&mut m, "rw", "w", "WRITE"), Value::Int(0));

    // A crashed reader tidied away by the timer while a writer waits (dead's hold is set to
    // 100 ms once the writer is queued, so the tidy comes while it waits whatever the load).
    assert_eq!(acquire(&mut m, "rw", "b", "READ", 20_000), Value::Int(1));
    assert_eq!(acquire(&mut m, "rw", "dead", "READ", 30_000), Value::Int(1));
    let w = park_rw(&master, &mut m, "rw", "w", "WRITE", 11_000, 1);
    assert_eq!(int(&mut m, &cmd!("RRWLOCK.RENEW", "rw", "dead", 100)), 1);
    wait_until(Duration::from_secs(2), "dead's field removed", || {
        !hgetall(&mut m, "rw").contains_key("dead")
    });
    step(&mut m, &mut r, "tidy of a crashed reader");
    assert_eq!(fields(&mut r, "rw"), pairs(&[("mode", "read"), ("b", "1")]));
    assert_eq!(release(&mut m, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    step(&mut m, &mut r, "hand-off after the tidy");

    // Inside MULTI/EXEC and Lua.
    assert_eq!(string(&mut m, &cmd!("MULTI")), "OK");
    for command in [
        cmd!("RRWLOCK.RELEASE", "rw", "w", "WRITE"),
        cmd!("RRWLOCK.ACQUIRE", "tx", "a", "READ", 16_000),
        cmd!("RRWLOCK.ACQUIRE", "tx", "b", "READ", 17_000, "BLOCK", 0),
    ] {
        assert_eq!(string(&mut m, &command), "QUEUED");
    }
    assert!(matches!(raw(&mut m, &cmd!("EXEC")), Value::Array(_)));
    step(&mut m, &mut r, "MULTI/EXEC");
    let w = park_rw(&master, &mut m, "tx", "w", "WRITE", 14_000, 1);
    let script = "redis.call('RRWLOCK.RELEASE', KEYS[1], 'a', 'READ') \
        return redis.call('RRWLOCK.RELEASE', KEYS[1], 'b', 'READ')";
    assert_eq!(raw(&mut m, &cmd!("EVAL", script, 1, "tx")), Value::Int(0));
    assert_eq!(w.reply_int(), 1);
    step(&mut m, &mut r, "hand-off inside EVAL");
    assert_eq!(
        fields(&mut r, "tx"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
}

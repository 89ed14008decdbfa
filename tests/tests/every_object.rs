//! What every object goes through alike, one test each with a table of objects driving one
//! body: an AOF written with the module reloads on a server without it (native commands with
//! absolute expiry, the same keys, contents and TTLs), and releases (the commands that free
//! memory) still work when the server is out of memory while acquires are refused.
//!
//! Each object's part says what it writes and what it checks; the body does the rest. A
//! failure names its object (`object: ...` on stderr).

use rlock_tests::redisson::semaphore::timeouts;
use rlock_tests::*;
use std::collections::BTreeMap;
use std::time::Instant;

type Snapshot = BTreeMap<String, KeyState>;

/// The checks of the reloaded data, once the body has compared it with the snapshot.
type AfterReload = Box<dyn FnOnce(&mut redis::Connection, &Snapshot)>;

/// One object's part of the AOF test.
struct AofCase {
    object: &'static str,
    /// Server arguments beyond `appendonly yes`.
    args: &'static [&'static str],
    /// Write the dataset (on `server`, through `c`); the keys the snapshot must then hold, and
    /// the checks of the reloaded data.
    write: fn(&Server, &mut redis::Connection) -> (Vec<String>, AfterReload),
    /// Check the AOF files the server with the module wrote.
    aof: fn(&Server),
}

/// appendfsync always: a SIGKILL loses nothing the server acknowledged. (With everysec, a busy
/// disk makes Redis postpone AOF writes while a background fsync runs, and the kill lost the last
/// commands once under `make test`; the read-write lock's case, left on everysec, lost its last
/// keys in 1 of 48 runs with 16 at once.)
const FSYNC_ALWAYS: &[&str] = &["--appendfsync", "always"];

#[test]
fn aof_written_with_the_module_reloads_without_it() {
    let cases = [
        AofCase {
            object: "lock",
            args: FSYNC_ALWAYS,
            write: lock_dataset,
            aof: |s| assert_aof_native(s.dir()),
        },
        AofCase {
            object: "rwlock",
            args: FSYNC_ALWAYS,
            write: rwlock_dataset,
            aof: |s| assert_aof_native(s.dir()),
        },
        AofCase {
            object: "semaphore and latch",
            args: FSYNC_ALWAYS,
            write: semaphore_and_latch_dataset,
            aof: semaphore_and_latch_aof,
        },
    ];
    for case in cases {
        eprintln!("object: {}", case.object);
        let mut first = Server::with(ServerOptions {
            aof: true,
            args: case.args.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        });
        let mut c = first.conn();
        let (keys, after_reload) = (case.write)(&first, &mut c);
        let before = snapshot(&mut c);
        let taken = Instant::now();
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            keys.iter().collect::<Vec<_>>()
        );

        (case.aof)(&first);
        let (second, _dir) = reload_aof_without_module(&mut first);
        let mut c2 = second.conn();
        let after = snapshot(&mut c2);
        let elapsed = taken.elapsed().as_millis() as i64;
        assert_same_data("after AOF reload", &before, &after, elapsed + 100);
        after_reload(&mut c2, &after);
    }
}

/// The lock: re-entered and renewed, fenced, taken and released, handed off to a waiter,
/// partially released.
fn lock_dataset(first: &Server, c: &mut redis::Connection) -> (Vec<String>, AfterReload) {
    // A re-entered lock.
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "a", "o1", 60_000)), 1);
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "a", "o1", 60_000)), 2);
    assert_eq!(int(c, &cmd!("RLOCK.RENEW", "a", "o1", 90_000)), 1);
    // A fenced lock.
    let t = int(c, &cmd!("RLOCK.ACQUIRE", "b", "o2", 70_000, "FENCE"));
    // A lock taken and released: gone.
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "c", "o3", 60_000)), 1);
    assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "c", "o3")), 0);
    // A lock handed off to a waiter, and one partially released.
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "d", "o4", 60_000)), 1);
    let w = park(first, c, "d", "w", 80_000, &[], 1);
    assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "d", "o4")), 0);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "e", "o5", 60_000)), 1);
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "e", "o5", 60_000)), 2);
    assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "e", "o5")), 1);
    let keys = ["a", "b", "d", "e", token_key("b").as_str()].map(String::from);
    let after_reload: AfterReload = Box::new(move |c2, after| {
        // The TTLs are the originals minus the time that passed, not fresh leases.
        assert_between("a", after["a"].pttl, 80_000, 90_000);
        assert_between("b", after["b"].pttl, 60_000, 70_000);
        assert_between("d", after["d"].pttl, 70_000, 80_000);
        assert_eq!(hgetall(c2, "a"), holder("o1", 2));
        assert_eq!(hgetall(c2, "d"), holder("w", 1));
        assert_eq!(hgetall(c2, "e"), holder("o5", 1));
        assert_eq!(string(c2, &cmd!("GET", token_key("b"))), t.to_string());
        assert!(!exists(c2, "c"));
    });
    (keys.to_vec(), after_reload)
}

/// The read-write lock: readers re-entered and renewed, a downgraded writer, a hand-off from a
/// writer to two readers, a lock released and one force released.
fn rwlock_dataset(first: &Server, c: &mut redis::Connection) -> (Vec<String>, AfterReload) {
    // Two readers, one re-entered and renewed.
    assert_eq!(rw_acquire(c, "reads", "a", "READ", 60_000), Value::Int(1));
    assert_eq!(rw_acquire(c, "reads", "a", "READ", 70_000), Value::Int(2));
    assert_eq!(rw_acquire(c, "reads", "b", "READ", 80_000), Value::Int(1));
    assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "reads", "a", 90_000)), 2);
    // A downgraded writer.
    assert_eq!(
        rw_acquire(c, "{app}:w", "w", "WRITE", 60_000),
        Value::Int(1)
    );
    assert_eq!(rw_acquire(c, "{app}:w", "w", "READ", 70_000), Value::Int(1));
    // A lock handed off from a writer to two readers.
    assert_eq!(rw_acquire(c, "h", "w", "WRITE", 60_000), Value::Int(1));
    let r1 = park_rw(first, c, "h", "r1", "READ", 80_000, 1);
    let r2 = park_rw(first, c, "h", "r2", "READ", 80_000, 2);
    assert_eq!(rw_release(c, "h", "w", "WRITE"), Value::Int(0));
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    // Taken and released, and force released: gone.
    assert_eq!(rw_acquire(c, "gone", "a", "READ", 60_000), Value::Int(1));
    assert_eq!(rw_release(c, "gone", "a", "READ"), Value::Int(0));
    assert_eq!(rw_acquire(c, "forced", "a", "READ", 60_000), Value::Int(1));
    assert_eq!(int(c, &cmd!("RRWLOCK.FORCERELEASE", "forced")), 1);
    let keys = [
        "h",
        "reads",
        "{app}:w",
        "{app}:w:w:rwlock_timeout:1",
        "{h}:r1:rwlock_timeout:1",
        "{h}:r2:rwlock_timeout:1",
        "{reads}:a:rwlock_timeout:1",
        "{reads}:a:rwlock_timeout:2",
        "{reads}:b:rwlock_timeout:1",
    ]
    .map(String::from);
    let after_reload: AfterReload = Box::new(|c2, after| {
        // The TTLs are the originals minus the time that passed, not fresh leases.
        assert_between("reads", after["reads"].pttl, 80_000, 90_000);
        assert_between(
            "a's second hold",
            after["{reads}:a:rwlock_timeout:2"].pttl,
            80_000,
            90_000,
        );
        assert_between(
            "b's hold",
            after["{reads}:b:rwlock_timeout:1"].pttl,
            70_000,
            80_000,
        );
        assert_eq!(
            fields(c2, "{app}:w"),
            pairs(&[("mode", "write"), ("w:write", "1"), ("w", "1")])
        );
    });
    (keys.to_vec(), after_reload)
}

/// The semaphore and the latch: permits taken, leased and given back, a lease that ended and
/// was reclaimed for a waiter, a latch counted down, one opened (gone).
fn semaphore_and_latch_dataset(
    first: &Server,
    c: &mut redis::Connection,
) -> (Vec<String>, AfterReload) {
    assert_eq!(int(c, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 1);
    assert_eq!(int(c, &cmd!("RSEM.ACQUIRE", "s")), 1);
    let leased = permit_ids(&raw(
        c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 3, "LEASE", 60_000),
    ));
    assert_eq!(int(c, &cmd!("RSEM.RELEASE", "s", "ID", &leased[2])), 2);
    assert_eq!(int(c, &cmd!("RSEM.ADDPERMITS", "s", 3)), 5);
    // A lease that ended and was reclaimed for a waiter.
    assert_eq!(int(c, &cmd!("RSEM.TRYSETPERMITS", "e", 1)), 1);
    // Leased long enough for the waiter to queue on a loaded machine, then shortened.
    let ended = permit_ids(&raw(c, &cmd!("RSEM.ACQUIRE", "e", "LEASE", 60_000)));
    let w = Pending::send(first, &cmd!("RSEM.ACQUIRE", "e", "BLOCK", 0));
    wait_blocked(c, 1);
    assert_eq!(int(c, &cmd!("RSEM.RENEW", "e", 50, "ID", &ended[0])), 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(int(c, &cmd!("RLATCH.TRYSETCOUNT", "l", 3)), 1);
    assert_eq!(int(c, &cmd!("RLATCH.COUNTDOWN", "l")), 2);
    assert_eq!(int(c, &cmd!("RLATCH.TRYSETCOUNT", "gone", 1)), 1);
    assert_eq!(int(c, &cmd!("RLATCH.COUNTDOWN", "gone")), 0);
    let keys = vec!["e".into(), "l".into(), "s".into(), timeouts("s")];
    let after_reload: AfterReload = Box::new(|c2, _| {
        assert_eq!(string(c2, &cmd!("GET", "s")), "5");
        assert_eq!(int(c2, &cmd!("ZCARD", timeouts("s"))), 2);
        assert_eq!(string(c2, &cmd!("GET", "l")), "2");
    });
    (keys, after_reload)
}

/// The semaphore's and the latch's AOF: their native commands, none of the module's.
fn semaphore_and_latch_aof(first: &Server) {
    let (incr, _) = aof_text(first);
    let upper = incr.to_uppercase();
    for native in ["INCRBY", "ZADD", "ZREM", "SET"] {
        assert!(upper.contains(native), "no {native} in the AOF:\n{incr}");
    }
    assert!(
        !upper.contains("RSEM.") && !upper.contains("RLATCH."),
        "the AOF names module commands:\n{incr}"
    );
}

/// The commands run once the server is out of memory.
type UnderOom = Box<dyn FnOnce(&mut redis::Connection)>;

/// One object's part of the out-of-memory test.
struct OomCase {
    object: &'static str,
    /// Take what will be released; the commands to run out of memory (acquires refused with
    /// `OOM`, releases and introspection working).
    hold: fn(&mut redis::Connection) -> UnderOom,
}

#[test]
fn releases_work_when_the_server_is_out_of_memory() {
    let cases = [
        OomCase {
            object: "lock",
            hold: lock_under_oom,
        },
        OomCase {
            object: "rwlock",
            hold: rwlock_under_oom,
        },
        OomCase {
            object: "semaphore and latch",
            hold: semaphore_and_latch_under_oom,
        },
    ];
    for case in cases {
        eprintln!("object: {}", case.object);
        let s = Server::start();
        let mut c = s.conn();
        let under_oom = (case.hold)(&mut c);
        assert_eq!(
            string(
                &mut c,
                &cmd!("CONFIG", "SET", "maxmemory-policy", "noeviction")
            ),
            "OK"
        );
        assert_eq!(string(&mut c, &cmd!("CONFIG", "SET", "maxmemory", 1)), "OK");
        under_oom(&mut c);
        assert_eq!(string(&mut c, &cmd!("CONFIG", "SET", "maxmemory", 0)), "OK");
    }
}

fn lock_under_oom(c: &mut redis::Connection) -> UnderOom {
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "a", "o1", 30_000)), 1);
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "a", "o1", 30_000)), 2);
    assert_eq!(int(c, &cmd!("RLOCK.ACQUIRE", "b", "o1", 30_000)), 1);
    Box::new(|c| {
        let e = err(c, &cmd!("RLOCK.ACQUIRE", "new", "o1", 30_000));
        assert!(e.starts_with("OOM"), "acquire is deny-oom: {e}");
        assert_eq!(int(c, &cmd!("RLOCK.RENEW", "a", "o1", 40_000)), 1);
        assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "a", "o1")), 1);
        assert_eq!(int(c, &cmd!("RLOCK.RELEASE", "a", "o1")), 0);
        assert_eq!(int(c, &cmd!("RLOCK.FORCERELEASE", "b")), 1);
        assert_eq!(lock_info(c, "a").holds, 0, "introspection works too");
    })
}

fn rwlock_under_oom(c: &mut redis::Connection) -> UnderOom {
    assert_eq!(rw_acquire(c, "a", "r", "READ", 30_000), Value::Int(1));
    assert_eq!(rw_acquire(c, "a", "r", "READ", 30_000), Value::Int(2));
    assert_eq!(rw_acquire(c, "b", "w", "WRITE", 30_000), Value::Int(1));
    Box::new(|c| {
        let e = err(c, &cmd!("RRWLOCK.ACQUIRE", "new", "r", "READ", 30_000));
        assert!(e.starts_with("OOM"), "acquire is deny-oom: {e}");
        assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "a", "r", 40_000)), 2);
        assert_eq!(rw_release(c, "a", "r", "READ"), Value::Int(1));
        assert_eq!(rw_release(c, "a", "r", "READ"), Value::Int(0));
        assert_eq!(int(c, &cmd!("RRWLOCK.FORCERELEASE", "b")), 1);
        assert_eq!(rw_info(c, "a").ttl_ms, -2, "introspection works too");
    })
}

fn semaphore_and_latch_under_oom(c: &mut redis::Connection) -> UnderOom {
    assert_eq!(int(c, &cmd!("RSEM.TRYSETPERMITS", "s", 3)), 1);
    assert_eq!(int(c, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2)), 1);
    let id = match raw(c, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 60_000)) {
        Value::Array(v) => text(&v[0]).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(int(c, &cmd!("RLATCH.TRYSETCOUNT", "l", 2)), 1);
    Box::new(move |c| {
        for denied in [
            cmd!("RSEM.ACQUIRE", "s"),
            cmd!("RSEM.TRYSETPERMITS", "new", 1),
            cmd!("RSEM.ADDPERMITS", "s", 1),
            cmd!("RLATCH.TRYSETCOUNT", "new", 1),
        ] {
            let e = err(c, &denied);
            assert!(e.starts_with("OOM"), "{} is deny-oom: {e}", show(&denied));
        }
        assert_eq!(int(c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)), 2);
        assert_eq!(int(c, &cmd!("RSEM.RELEASE", "s", "ID", &id)), 3);
        assert_eq!(int(c, &cmd!("RSEM.DRAIN", "s")), 3);
        assert_eq!(int(c, &cmd!("RSEM.AVAILABLE", "s")), 0);
        assert_eq!(int(c, &cmd!("RLATCH.COUNTDOWN", "l")), 1);
        assert_eq!(int(c, &cmd!("RLATCH.COUNT", "l")), 1);
        assert_eq!(int(c, &cmd!("RLATCH.AWAIT", "absent")), 1);
    })
}

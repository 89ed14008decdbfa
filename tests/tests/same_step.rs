//! A free that another client's write causes (a Redisson unlock script, `DEL`, a forced unlock,
//! a lease that expires when a command touches the key) goes to the head of the module's queue
//! before the next command runs, where the server has post-execution-unit jobs (Redis 7.2+,
//! Valkey). Each case pipelines the freeing command and a Redisson acquire script on one
//! connection, so nothing can run between them but what the server does at the end of the first
//! (issue 22, item 1).
//!
//! On Redis 7.0 the module serves the queue on its next timer turn, after the pipelined acquire:
//! these tests print how often it barges there and assert only that the waiter is granted once
//! the barging holder lets go (docs/commands.md, "What frees a lock and hands it on").

use rlock_tests::redisson;
use rlock_tests::*;
use std::time::Duration;

/// Whether the server runs module jobs at the end of an execution unit
/// (`RM_AddPostNotificationJob`: Redis 7.2+ and every Valkey).
fn same_step(kind: ServerKind) -> bool {
    kind.flavor == Flavor::Valkey || (kind.version.0, kind.version.1) >= (7, 2)
}

/// Tries per case: enough that a race lost even a few percent of the time shows.
const TRIES: usize = 50;

/// The unlock script, reduced: Redisson's unlock deletes the hash and publishes.
const UNLOCK_SCRIPT: &str = "redis.call('hincrby',KEYS[1],ARGV[1],-1); \
    redis.call('del',KEYS[1]); redis.call('publish',KEYS[2],'0'); return 1";

/// The outcome of one try: whether the Redisson acquire pipelined right after the free got the
/// lock (a barge), and who holds the key once the pipeline has run.
struct Try {
    barged: bool,
    holders: std::collections::BTreeMap<String, String>,
}

/// Pipeline `free` then Redisson's acquire of `key` for `redisson:7`, then HGETALL.
fn free_then_redisson_acquire(c: &mut redis::Connection, free: redis::Cmd, key: &str) -> Try {
    let (_, acquire, holders): (Value, Value, std::collections::BTreeMap<String, String>) =
        redis::pipe()
            .add_command(free)
            .add_command(cmd!(
                "EVAL",
                redisson::ACQUIRE,
                1,
                key,
                30_000,
                "redisson:7"
            ))
            .cmd("HGETALL")
            .arg(key)
            .query(c)
            .unwrap();
    Try {
        barged: acquire == Value::Nil,
        holders,
    }
}

/// Run `TRIES` rounds of: a holder, a module waiter queued with `BLOCK`, then `free` (made for
/// the round's key) pipelined with Redisson's acquire. On a same-step server no round barges
/// and every waiter is granted by the free; elsewhere the count is printed, and a barging
/// Redisson holder is released so the waiter still gets the lock.
fn no_barging(case: &str, free: impl Fn(&str) -> redis::Cmd) {
    let s = Server::start();
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    let mut barges = 0;
    for i in 0..TRIES {
        let key = format!("{case}:{i}");
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", &key, "holder:1", 30_000)),
            1
        );
        let waiter = park(&s, &mut c, &key, "mod:1", 30_000, &[], 1);
        let t = free_then_redisson_acquire(&mut c, free(&key), &key);
        if t.barged {
            barges += 1;
            assert_eq!(t.holders, holder("redisson:7", 1), "{case} try {i}");
            // The waiter is still queued; Redisson's unlock hands it on.
            redisson::unlock(&mut c, &key, "redisson:7", 30_000);
        } else {
            assert_eq!(t.holders, holder("mod:1", 1), "{case} try {i}");
        }
        assert_eq!(
            waiter.reply_int(),
            1,
            "{case} try {i}: the waiter is granted"
        );
        assert_eq!(hgetall(&mut c, &key), holder("mod:1", 1));
        wait_blocked(&mut c, 0);
    }
    eprintln!("{kind}: {case}: the pipelined Redisson acquire barged {barges} of {TRIES} times");
    if same_step(kind) {
        assert_eq!(barges, 0, "{kind}: {case}: barges in {TRIES} tries");
    }
}

#[test]
fn redisson_unlock_script_hands_to_the_queue_before_the_next_command() {
    no_barging("unlock", |key| {
        cmd!("EVAL", UNLOCK_SCRIPT, 2, key, lock_channel(key), "holder:1")
    });
}

#[test]
fn del_hands_to_the_queue_before_the_next_command() {
    no_barging("del", |key| cmd!("DEL", key));
}

#[test]
fn redisson_force_unlock_script_hands_to_the_queue_before_the_next_command() {
    no_barging("force", |key| {
        cmd!(
            "EVAL",
            redisson::FORCE_UNLOCK,
            2,
            key,
            lock_channel(key),
            0,
            "PUBLISH"
        )
    });
}

#[test]
fn del_inside_multi_hands_on_when_exec_ends() {
    // The jobs run when EXEC ends, not after the DEL inside it: a Redisson acquire queued in
    // the same transaction after the DEL takes the lock (one unit, nothing runs in between);
    // one after EXEC finds it granted.
    let s = Server::start();
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "m", "holder:1", 30_000)),
        1
    );
    let waiter = park(&s, &mut c, "m", "mod:1", 30_000, &[], 1);
    let mut tx = redis::pipe();
    tx.atomic().cmd("DEL").arg("m").cmd("EXISTS").arg("m");
    let (freed, exists): (i64, i64) = tx.query(&mut c).unwrap();
    assert_eq!((freed, exists), (1, 0), "still free inside the transaction");
    let t = free_then_redisson_acquire(&mut c, cmd!("PING"), "m");
    if same_step(kind) {
        assert!(!t.barged, "{kind}: granted when EXEC ended");
        assert_eq!(t.holders, holder("mod:1", 1));
    } else if t.barged {
        redisson::unlock(&mut c, "m", "redisson:7", 30_000);
    }
    assert_eq!(waiter.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "m"), holder("mod:1", 1));
}

#[test]
fn an_expiry_found_by_a_command_hands_on_before_the_next_one() {
    let s = Server::with(ServerOptions {
        args: vec!["--enable-debug-command".into(), "yes".into()],
        ..Default::default()
    });
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    let mut barges = 0;
    for i in 0..5 {
        let key = format!("rw:{i}");
        // Held long while the reader queues (on a loaded machine that may take longer than a
        // short lease), then shortened to 100 ms by the pipeline's first command.
        assert_eq!(
            int(
                &mut c,
                &cmd!("RRWLOCK.ACQUIRE", &key, "w:1", "WRITE", 30_000)
            ),
            1
        );
        let reader = Pending::send(
            &s,
            &cmd!("RRWLOCK.ACQUIRE", &key, "r:1", "READ", 30_000, "BLOCK", 0),
        );
        wait_blocked(&mut c, 1);
        // The lease ends during the sleep; the pipeline's next commands are already in the
        // connection's buffer and run before the server returns to its event loop (where the
        // module's timer would serve the queue).
        let (acquire, mode): (Value, Option<String>) = redis::pipe()
            .cmd("RRWLOCK.RENEW")
            .arg(&key)
            .arg("w:1")
            .arg(100)
            .ignore()
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.25")
            .ignore()
            .cmd("EXISTS")
            .arg(&key)
            .ignore()
            .add_command(cmd!(
                "EVAL",
                redisson::WRITE_ACQUIRE,
                1,
                &key,
                30_000,
                "redisson:7:write"
            ))
            .cmd("HGET")
            .arg(&key)
            .arg("mode")
            .query(&mut c)
            .unwrap();
        if acquire == Value::Nil {
            barges += 1;
            assert_eq!(mode.as_deref(), Some("write"));
            redisson::write_unlock(&mut c, &key, "redisson:7", 30_000);
        } else {
            assert_eq!(mode.as_deref(), Some("read"), "try {i}");
        }
        assert_eq!(reader.reply_int(), 1, "try {i}: the reader is granted");
        assert_eq!(rw_info(&mut c, &key).mode.as_deref(), Some("read"));
        wait_blocked(&mut c, 0);
    }
    eprintln!("{kind}: expiry found by EXISTS: Redisson's write acquire barged {barges} of 5");
    if same_step(kind) {
        assert_eq!(
            barges, 0,
            "{kind}: the expiry found by EXISTS hands on first"
        );
    } else {
        // Redis 7.0: the module's timer comes after the pipeline.
        assert_eq!(barges, 5, "{kind}: served on the next timer turn");
    }
}

#[test]
fn a_lease_that_ends_in_a_stall_goes_to_whoever_runs_first() {
    // The documented limit, on every server: when the server is busy across a lease end, the
    // first command after the stall that touches the key finds it free. A script that takes it
    // in the same unit (Redisson's acquire) wins; the module's waiter gets it after.
    let s = Server::with(ServerOptions {
        args: vec!["--enable-debug-command".into(), "yes".into()],
        ..Default::default()
    });
    let mut c = s.conn();
    // Held long while the waiter queues, then shortened to 100 ms by the pipeline's first
    // command: the lease ends in the sleep whatever the machine's load.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "st", "holder:1", 30_000)),
        1
    );
    let waiter = park(&s, &mut c, "st", "mod:1", 30_000, &[], 1);
    let (acquire, holders): (Value, std::collections::BTreeMap<String, String>) = redis::pipe()
        .cmd("RLOCK.RENEW")
        .arg("st")
        .arg("holder:1")
        .arg(100)
        .ignore()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.25")
        .ignore()
        .add_command(cmd!(
            "EVAL",
            redisson::ACQUIRE,
            1,
            "st",
            30_000,
            "redisson:7"
        ))
        .cmd("HGETALL")
        .arg("st")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        acquire,
        Value::Nil,
        "Redisson's script took the expired lock"
    );
    assert_eq!(holders, holder("redisson:7", 1));
    redisson::unlock(&mut c, "st", "redisson:7", 30_000);
    assert_eq!(waiter.reply_within(Duration::from_secs(5)), Value::Int(1));
}

#[test]
fn semaphore_release_by_script_hands_to_the_queue_before_the_next_command() {
    // Redisson's semaphore release (INCRBY + PUBLISH) pipelined with Redisson's tryAcquire:
    // the module's queued request gets the permit first.
    let s = Server::start();
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    let mut barges = 0;
    for i in 0..TRIES {
        let name = format!("sem:{i}");
        let waiter = Pending::send(&s, &cmd!("RSEM.ACQUIRE", &name, "BLOCK", 0));
        wait_blocked(&mut c, 1);
        let (_, got, left): (Value, i64, Option<i64>) = redis::pipe()
            .add_command(cmd!(
                "EVAL",
                redisson::semaphore::RELEASE,
                2,
                &name,
                redisson::semaphore::channel(&name),
                1,
                "PUBLISH"
            ))
            .add_command(cmd!("EVAL", redisson::semaphore::TRY_ACQUIRE, 1, &name, 1))
            .cmd("GET")
            .arg(&name)
            .query(&mut c)
            .unwrap();
        if got == 1 {
            barges += 1;
            redisson::semaphore::release(&mut c, &name, 1);
        } else {
            assert_eq!(left, Some(0), "try {i}: the permit went to the queue");
        }
        assert_eq!(waiter.reply_int(), 1, "try {i}: the waiter is granted");
        wait_blocked(&mut c, 0);
    }
    eprintln!("{kind}: semaphore: Redisson's tryAcquire barged {barges} of {TRIES} times");
    if same_step(kind) {
        assert_eq!(barges, 0, "{kind}: barges in {TRIES} tries");
    }
}

/// The commands of an AOF file (RESP arrays of bulk strings), in order.
fn aof_commands(text: &[u8]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    let line = |i: &mut usize| -> String {
        let end = i.to_owned() + text[*i..].windows(2).position(|w| w == b"\r\n").unwrap();
        let s = String::from_utf8_lossy(&text[*i..end]).into_owned();
        *i = end + 2;
        s
    };
    while i < text.len() {
        let head = line(&mut i);
        let Some(n) = head.strip_prefix('*') else {
            continue; // an RDB preamble or annotation line: not a command
        };
        let n: usize = n.parse().unwrap();
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let len: usize = line(&mut i).strip_prefix('$').unwrap().parse().unwrap();
            cmd.push(String::from_utf8_lossy(&text[i..i + len]).into_owned());
            i += len + 2;
        }
        out.push(cmd);
    }
    out
}

/// In the incremental AOF: the grant of `key` to `owner` follows the command that freed it,
/// and (where `same_unit`) both are in one MULTI/EXEC, as Redis wraps an execution unit's writes.
#[track_caller]
fn assert_grant_follows_free(server: &Server, key: &str, owner: &str, same_unit: bool) {
    let mut text = Vec::new();
    for entry in std::fs::read_dir(server.dir().join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".incr.aof") {
            text.extend(std::fs::read(&path).unwrap());
        }
    }
    let cmds = aof_commands(&text);
    let is = |c: &Vec<String>, name: &str| c[0].eq_ignore_ascii_case(name);
    let grant = cmds
        .iter()
        .rposition(|c| is(c, "HSET") && c[1] == key && c[2] == owner)
        .unwrap_or_else(|| panic!("no grant of {key} to {owner} in the AOF: {cmds:?}"));
    let free = cmds[..grant]
        .iter()
        .rposition(|c| (is(c, "DEL") || is(c, "UNLINK")) && c[1] == key)
        .unwrap_or_else(|| panic!("no free of {key} before its grant: {cmds:?}"));
    assert!(
        cmds[grant + 1..]
            .iter()
            .any(|c| is(c, "PEXPIREAT") && c[1] == key),
        "no PEXPIREAT after the grant of {key}: {cmds:?}"
    );
    if same_unit {
        let multi = cmds[..free].iter().rposition(|c| is(c, "MULTI"));
        let exec = cmds[..free].iter().rposition(|c| is(c, "EXEC"));
        assert!(
            multi.is_some() && exec < multi,
            "the free of {key} is not inside a MULTI: {cmds:?}"
        );
        assert!(
            !cmds[free..grant].iter().any(|c| is(c, "EXEC")),
            "the grant of {key} is not in the free's MULTI/EXEC: {:?}",
            &cmds[free..]
        );
    }
}

#[test]
fn grants_made_at_the_end_of_a_unit_reach_replicas_and_the_aof_after_the_free() {
    let master = Server::with(ServerOptions {
        aof: true,
        args: vec![
            "--appendfsync".into(),
            "always".into(),
            "--repl-diskless-sync-delay".into(),
            "0".into(),
            "--enable-debug-command".into(),
            "yes".into(),
        ],
        ..Default::default()
    });
    let replica = start_replica(&master);
    let (mut m, mut r) = (master.conn(), replica.conn());
    let kind = ServerKind::of(&mut m);

    // Redisson's unlock script frees the lock; the queued waiter is granted.
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "u", "holder:1", 60_000)),
        1
    );
    let w = park(&master, &mut m, "u", "w:u", 50_000, &[], 1);
    redisson::unlock(&mut m, "u", "holder:1", 60_000);
    assert_eq!(w.reply_int(), 1);
    // DEL frees it.
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "d", "holder:1", 60_000)),
        1
    );
    let w = park(&master, &mut m, "d", "w:d", 50_000, &[], 1);
    assert_eq!(int(&mut m, &cmd!("DEL", "d")), 1);
    assert_eq!(w.reply_int(), 1);
    // A read-only command finds the lease over (the server was busy across its end).
    // Held long while the waiter queues, then shortened to end in the sleep.
    assert_eq!(
        int(&mut m, &cmd!("RLOCK.ACQUIRE", "x", "holder:1", 60_000)),
        1
    );
    let w = park(&master, &mut m, "x", "w:x", 50_000, &[], 1);
    let (found,): (i64,) = redis::pipe()
        .cmd("RLOCK.RENEW")
        .arg("x")
        .arg("holder:1")
        .arg(100)
        .ignore()
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.25")
        .ignore()
        .cmd("EXISTS")
        .arg("x")
        .query(&mut m)
        .unwrap();
    assert_eq!(found, 0);
    assert_eq!(w.reply_int(), 1);
    for (key, owner) in [("u", "w:u"), ("d", "w:d"), ("x", "w:x")] {
        assert_eq!(hgetall(&mut m, key), holder(owner, 1));
    }

    assert_replica_matches("after the grants", &mut m, &mut r);
    for (key, owner) in [("u", "w:u"), ("d", "w:d"), ("x", "w:x")] {
        assert_eq!(
            hgetall(&mut r, key),
            holder(owner, 1),
            "{key} on the replica"
        );
        assert_between(key, pttl(&mut r, key), 45_000, 50_000);
        assert_grant_follows_free(&master, key, owner, same_step(kind));
    }
    assert_aof_native(master.dir());
}

#[test]
fn an_unlock_and_a_trylock_from_two_clients_at_once() {
    // The second form: two connections send at the same moment. Where jobs exist the
    // tryLock either runs before the unlock (and finds the lock held) or after it (and finds it
    // granted); on Redis 7.0 it barges whenever the server reads both in one iteration.
    let s = Server::start();
    let mut c = s.conn();
    let kind = ServerKind::of(&mut c);
    let (mut a, mut b) = (s.conn(), s.conn());
    let mut barges = 0;
    for i in 0..TRIES {
        let key = format!("two:{i}");
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", &key, "holder:1", 30_000)),
            1
        );
        let waiter = park(&s, &mut c, &key, "mod:1", 30_000, &[], 1);
        let unlock = cmd!(
            "EVAL",
            UNLOCK_SCRIPT,
            2,
            &key,
            lock_channel(&key),
            "holder:1"
        );
        let try_lock = cmd!("EVAL", redisson::ACQUIRE, 1, &key, 30_000, "redisson:7");
        a.send_packed_command(&unlock.get_packed_command()).unwrap();
        b.send_packed_command(&try_lock.get_packed_command())
            .unwrap();
        a.recv_response().unwrap();
        if b.recv_response().unwrap() == Value::Nil {
            barges += 1;
            redisson::unlock(&mut c, &key, "redisson:7", 30_000);
        }
        assert_eq!(waiter.reply_int(), 1, "try {i}: the waiter is granted");
        assert_eq!(hgetall(&mut c, &key), holder("mod:1", 1));
        wait_blocked(&mut c, 0);
    }
    eprintln!("{kind}: two clients: the Redisson tryLock barged {barges} of {TRIES} times");
    if same_step(kind) {
        assert_eq!(barges, 0, "{kind}: barges in {TRIES} tries");
    }
}

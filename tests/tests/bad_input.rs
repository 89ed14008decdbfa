//! Every bad input gets an error and leaves no partial state; thousands of random argument
//! vectors cannot crash the server.

use redis::ConnectionLike;
use rlock_tests::*;
use std::time::Duration;

/// `c` must be refused with an error starting with `code`, and change nothing: same number of
/// keys, and `key`'s content and TTL as before.
#[track_caller]
fn refused(conn: &mut redis::Connection, c: &redis::Cmd, code: &str) {
    let before = snapshot(conn);
    let e = err(conn, c);
    assert!(e.starts_with(code), "{}: expected {code}, got {e}", show(c));
    let after = snapshot(conn);
    assert_same_data(&show(c), &before, &after, 1_000);
}

#[test]
fn wrong_arity_for_every_command() {
    let s = Server::start();
    let mut c = s.conn();
    for bad in [
        cmd!("RLOCK.ACQUIRE"),
        cmd!("RLOCK.ACQUIRE", "k"),
        cmd!("RLOCK.ACQUIRE", "k", "o"),
        cmd!("RLOCK.RELEASE"),
        cmd!("RLOCK.RELEASE", "k"),
        cmd!("RLOCK.RELEASE", "k", "o", "extra"),
        cmd!("RLOCK.RENEW"),
        cmd!("RLOCK.RENEW", "k"),
        cmd!("RLOCK.RENEW", "k", "o"),
        cmd!("RLOCK.RENEW", "k", "o", 1000, "extra"),
        cmd!("RLOCK.FORCERELEASE"),
        cmd!("RLOCK.FORCERELEASE", "k", "extra"),
        cmd!("RLOCK.INFO"),
        cmd!("RLOCK.INFO", "k", "extra"),
    ] {
        refused(&mut c, &bad, "ERR");
        assert_eq!(dbsize(&mut c), 0);
    }
}

#[test]
fn empty_owner_is_an_error() {
    let s = Server::start();
    let mut c = s.conn();
    refused(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "", 1000), "ERR");
    refused(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "k", "", 1000, "BLOCK", 10),
        "ERR",
    );
    refused(&mut c, &cmd!("RLOCK.RELEASE", "k", ""), "ERR");
    refused(&mut c, &cmd!("RLOCK.RENEW", "k", "", 1000), "ERR");
    assert_eq!(dbsize(&mut c), 0);
    // Also on a held lock: nothing changes.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", 10_000)), 1);
    refused(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "", 1000), "ERR");
    refused(&mut c, &cmd!("RLOCK.RELEASE", "k", ""), "ERR");
    assert_eq!(hgetall(&mut c, "k"), holder("o", 1));
}

const BAD_DURATIONS: &[&str] = &[
    "-1",
    "-9223372036854775808",
    "abc",
    "",
    "1.5",
    "1e3",
    " 100",
    "100ms",
    "0x10",
    "99999999999999999999",
    "9223372036854775808",
];

#[test]
fn bad_leases_are_errors() {
    let s = Server::start();
    let mut c = s.conn();
    // Below 1 ms, not an integer, out of range, or an expiry time that overflows.
    let leases = BAD_DURATIONS
        .iter()
        .copied()
        .chain(["0", "9223372036854775807"]);
    for lease in leases {
        refused(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", lease), "ERR");
        refused(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "k", "o", lease, "BLOCK", 10),
            "ERR",
        );
        refused(&mut c, &cmd!("RLOCK.RENEW", "k", "o", lease), "ERR");
    }
    assert_eq!(dbsize(&mut c), 0);
    // On a held lock, a bad renew or re-entry leaves count and TTL alone.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", 10_000)), 1);
    for lease in ["0", "-5", "x", "9223372036854775807"] {
        refused(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "o", lease), "ERR");
        refused(&mut c, &cmd!("RLOCK.RENEW", "k", "o", lease), "ERR");
    }
    assert_eq!(hgetall(&mut c, "k"), holder("o", 1));
    assert_between("PTTL", pttl(&mut c, "k"), 9_000, 10_000);
}

#[test]
fn bad_block_values_are_errors() {
    let s = Server::start();
    let mut c = s.conn();
    // Give a read timeout so an overflowing timeout taken as "wait" fails instead of hanging.
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut other = s.conn();
    assert_eq!(
        int(&mut other, &cmd!("RLOCK.ACQUIRE", "held", "holder", 30_000)),
        1
    );
    let timeouts = BAD_DURATIONS.iter().copied().chain(["9223372036854775807"]);
    for t in timeouts {
        // On a free key (an error must come before any acquire) and on a held one (before any
        // wait).
        refused(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "BLOCK", t),
            "ERR",
        );
        refused(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "held", "o", 1000, "BLOCK", t),
            "ERR",
        );
        refused(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "BLOCK", t, "FENCE"),
            "ERR",
        );
    }
    // BLOCK without a value.
    refused(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "BLOCK"),
        "ERR",
    );
    refused(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "FENCE", "BLOCK"),
        "ERR",
    );
    assert!(!exists(&mut c, "k"));
    assert_eq!(lock_info(&mut c, "held").waiters, 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
}

#[test]
fn unknown_options_are_errors() {
    let s = Server::start();
    let mut c = s.conn();
    for bad in [
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "FOO"),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, ""),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "BLOCK", 10, "BAR"),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "FENCE", "extra"),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "FENCED"),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "BLOCKS", 10),
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "10"),
    ] {
        refused(&mut c, &bad, "ERR");
    }
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn wrongtype_from_every_command_and_force_release_keeps_the_data() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("SET", "str", "not a lock")), "OK");
    assert_eq!(int(&mut c, &cmd!("RPUSH", "list", "a")), 1);
    assert_eq!(int(&mut c, &cmd!("ZADD", "zset", 1, "a")), 1);
    for key in ["str", "list", "zset"] {
        for bad in [
            cmd!("RLOCK.ACQUIRE", key, "o", 1000),
            cmd!("RLOCK.ACQUIRE", key, "o", 1000, "BLOCK", 10),
            cmd!("RLOCK.ACQUIRE", key, "o", 1000, "FENCE"),
            cmd!("RLOCK.RELEASE", key, "o"),
            cmd!("RLOCK.RENEW", key, "o", 1000),
            cmd!("RLOCK.FORCERELEASE", key),
            cmd!("RLOCK.INFO", key),
        ] {
            refused(&mut c, &bad, "WRONGTYPE");
        }
    }
    assert_eq!(string(&mut c, &cmd!("GET", "str")), "not a lock");
    assert_eq!(dbsize(&mut c), 3, "no token key either");
}

#[test]
fn a_lock_hash_whose_count_is_not_an_integer_is_an_error() {
    let s = Server::start();
    let mut c = s.conn();
    for (i, bad) in ["abc", "1.5", "", "99999999999999999999"]
        .into_iter()
        .enumerate()
    {
        let key = format!("h{i}");
        assert_eq!(int(&mut c, &cmd!("HSET", &key, "o", bad)), 1);
        refused(&mut c, &cmd!("RLOCK.ACQUIRE", &key, "o", 1000), "ERR");
        refused(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", &key, "o", 1000, "FENCE"),
            "ERR",
        );
        refused(&mut c, &cmd!("RLOCK.RELEASE", &key, "o"), "ERR");
        let expected = std::collections::BTreeMap::from([("o".to_string(), bad.to_string())]);
        assert_eq!(hgetall(&mut c, &key), expected);
        assert_eq!(pttl(&mut c, &key), -1);
    }
    assert!(!exists(&mut c, &token_key("h0")));
}

// ---------------------------------------------------------------------------------------------
// Randomized argument vectors
// ---------------------------------------------------------------------------------------------

const COMMANDS: &[&str] = &[
    "RLOCK.ACQUIRE",
    "RLOCK.RELEASE",
    "RLOCK.RENEW",
    "RLOCK.FORCERELEASE",
    "RLOCK.INFO",
    "rlock.acquire",
    "rlock.release",
];

const WORDS: &[&str] = &[
    "BLOCK",
    "block",
    "FENCE",
    "fence",
    "Block",
    "FeNcE",
    "READ",
    "WRITE",
    "PERMITS",
    "LEASE",
    "ID",
    "o1",
    "o2",
    "uuid-1:1",
    "",
    " ",
    "{",
    "}",
    "{app}:x",
    "\r\n",
    "*1\r\n$4\r\nPING\r\n",
];

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "5",
    "10",
    "100",
    "1000",
    "30000",
    "-1",
    "-0",
    "+1",
    "00",
    "1.5",
    "1e3",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999",
    "inf",
    "nan",
    "0x1f",
];

/// Keys of every kind: fresh names, lock hashes, a hash with a bad count, and other types.
const KEYS: &[&str] = &[
    "free", "lock1", "lock2", "{app}:x", "badhash", "str", "list", "set", "zset", "stream", "tok",
];

/// Every setup reply checked: a seed that silently failed would leave the fuzz testing less
/// than it claims.
fn seed_keys(c: &mut redis::Connection) {
    assert_eq!(string(c, &cmd!("FLUSHALL")), "OK");
    assert_eq!(int(c, &cmd!("HSET", "lock1", "o1", 1)), 1);
    assert_eq!(int(c, &cmd!("HSET", "lock2", "o2", 3)), 1);
    assert_eq!(int(c, &cmd!("PEXPIRE", "lock2", 500)), 1);
    assert_eq!(int(c, &cmd!("HSET", "badhash", "o1", "zz", "o2", "-4")), 2);
    assert_eq!(string(c, &cmd!("SET", "str", "v")), "OK");
    assert_eq!(
        string(c, &cmd!("SET", "redisson_lock_token:{tok}", "notanumber")),
        "OK"
    );
    assert_eq!(int(c, &cmd!("RPUSH", "list", "a")), 1);
    assert_eq!(int(c, &cmd!("SADD", "set", "a")), 1);
    assert_eq!(int(c, &cmd!("ZADD", "zset", 1, "a")), 1);
    let id = string(c, &cmd!("XADD", "stream", "*", "f", "v"));
    assert!(id.contains('-'), "XADD's id: {id}");
    assert_eq!(dbsize(c), 9);
}

fn random_arg(rng: &mut Rng) -> Vec<u8> {
    match rng.below(5) {
        0 => rng.pick(WORDS).as_bytes().to_vec(),
        1 | 2 => rng.pick(NUMBERS).as_bytes().to_vec(),
        3 => rng.pick(KEYS).as_bytes().to_vec(),
        _ => (0..rng.below(16)).map(|_| rng.next_u64() as u8).collect(),
    }
}

/// The seed of a randomized test: `RLOCK_FUZZ_SEED` or the clock, printed for reruns.
fn fuzz_seed(what: &str) -> u64 {
    let seed = env_seed("RLOCK_FUZZ_SEED");
    println!("{what} seed: {seed} (rerun with RLOCK_FUZZ_SEED={seed})");
    seed
}

#[test]
fn random_argument_vectors_never_crash_the_server() {
    let seed = fuzz_seed("random argv");
    let mut rng = Rng::new(seed);
    let mut s = Server::start();
    let mut c = s.conn();
    // A command that wrongly waits fails the test instead of hanging it.
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for i in 0..5_000 {
        if i % 500 == 0 {
            seed_keys(&mut c);
        }
        let name = *rng.pick(COMMANDS);
        let argc = rng.below(9);
        let mut args: Vec<Vec<u8>> = (0..argc).map(|_| random_arg(&mut rng)).collect();
        // Options start after `key owner lease_ms`; a BLOCK there only ever gets a short or an
        // invalid timeout, so nothing waits for long.
        if name.eq_ignore_ascii_case("RLOCK.ACQUIRE") {
            for j in 3..args.len().saturating_sub(1) {
                if args[j].eq_ignore_ascii_case(b"BLOCK") {
                    args[j + 1] = rng
                        .pick(&["1", "5", "10", "-1", "abc", "", "1.5"])
                        .as_bytes()
                        .to_vec();
                }
            }
        }
        let mut command = redis::cmd(name);
        for a in &args {
            command.arg(a.as_slice());
        }
        if let Err(e) = c.req_command(&command) {
            panic!(
                "seed {seed}, vector {i}: {}: {e}\n{}",
                show(&command),
                s.log_tail(30)
            );
        }
    }
    // Still alive and answering, and the module still works.
    assert!(
        s.alive(),
        "seed {seed}: redis-server died\n{}",
        s.log_tail(30)
    );
    assert_eq!(string(&mut c, &cmd!("PING")), "PONG");
    let mut fresh = s.conn();
    assert_eq!(
        int(&mut fresh, &cmd!("RLOCK.ACQUIRE", "after-fuzz", "o", 1000)),
        1
    );
    assert_eq!(
        int(&mut fresh, &cmd!("RLOCK.RELEASE", "after-fuzz", "o")),
        0
    );
}

/// The `waiters` gauge, the waiters RLOCK.INFO reports for `keys`, and the blocked clients, read
/// in one transaction so that no timeout or expiry happens between the readings.
fn waiter_counts(c: &mut redis::Connection, keys: &[&str]) -> (i64, i64, i64) {
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("INFO")
        .arg("rlock")
        .cmd("INFO")
        .arg("clients");
    for k in keys {
        tx.cmd("RLOCK.INFO").arg(*k);
    }
    let replies: Vec<Value> = tx.query(c).unwrap();
    let gauge = rlock_stat_in(&text(&replies[0]).unwrap(), "waiters");
    let clients = text(&replies[1]).unwrap();
    let blocked = clients
        .lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no blocked_clients in {clients}"));
    let queued = replies[2..]
        .iter()
        .map(|v| LockInfo::parse(v).waiters)
        .sum();
    (gauge, queued, blocked)
}

/// Random interleavings of acquires (blocking ones on their own connections), releases, renewals,
/// force releases, DEL, short expiries, FLUSHDB, CLIENT KILL and CLIENT UNBLOCK: the server stays
/// up, the `waiters` gauge always equals the blocked clients and the queues RLOCK.INFO shows, and
/// everything drains to zero at the end.
#[test]
fn random_operations_keep_queues_and_counters_consistent() {
    let seed = fuzz_seed("random operations");
    let mut rng = Rng::new(seed);
    let mut s = Server::start();
    let mut c = s.conn();
    // Redis 7.2: CLIENT UNBLOCK does not reach rlock's waits; they are killed instead.
    let unblock_reaches = ServerKind::of(&mut c).client_unblock_reaches_waits();
    let keys = ["k0", "k1", "k2"];
    let owners = ["o0", "o1", "o2", "o3", "o4"];
    let mut pending: Vec<Pending> = Vec::new();
    for step in 0..3_000 {
        let key = *rng.pick(&keys);
        let owner = *rng.pick(&owners);
        let lease = *rng.pick(&[20, 50, 200, 5_000]);
        match rng.below(12) {
            0 | 1 => {
                raw(&mut c, &cmd!("RLOCK.ACQUIRE", key, owner, lease));
            }
            2 | 3 if pending.len() < 10 => {
                let mut a = cmd!("RLOCK.ACQUIRE", key, owner, lease, "BLOCK");
                a.arg(*rng.pick(&[0, 0, 5, 30, 100]));
                if rng.below(3) == 0 {
                    a.arg("FENCE");
                }
                pending.push(Pending::send(&s, &a));
            }
            4 | 5 => {
                raw(&mut c, &cmd!("RLOCK.RELEASE", key, owner));
            }
            6 => {
                raw(&mut c, &cmd!("RLOCK.RENEW", key, owner, lease));
            }
            7 => {
                raw(&mut c, &cmd!("RLOCK.FORCERELEASE", key));
            }
            8 => {
                raw(&mut c, &cmd!(*rng.pick(&["DEL", "UNLINK"]), key));
            }
            9 => {
                raw(&mut c, &cmd!("PEXPIRE", key, *rng.pick(&[0, 1, 10])));
            }
            10 if rng.below(10) == 0 => {
                raw(&mut c, &cmd!("FLUSHDB"));
            }
            11 if !pending.is_empty() => {
                let p = pending.swap_remove(rng.index(pending.len()));
                if rng.below(2) == 0 || !unblock_reaches {
                    raw(&mut c, &cmd!("CLIENT", "KILL", "ID", p.id));
                } else {
                    // Once the server has run its acquire, unblock it if it still waits; its
                    // reply is then nil or its grant, or DEADLOCK: owners here are names
                    // shared by concurrent connections, so waits can form real cycles, and
                    // deadlock detection refuses the one that would close it.
                    wait_until(Duration::from_secs(5), "the acquire ran", || {
                        string(&mut c, &cmd!("CLIENT", "LIST", "ID", p.id))
                            .contains("cmd=rlock.acquire")
                    });
                    raw(&mut c, &cmd!("CLIENT", "UNBLOCK", p.id));
                    let r = p.reply();
                    // Owners are shared between connections here, so two of them can form a
                    // real cycle of waits: the server then refuses the closing wait.
                    let deadlock = error_text(&r).is_some_and(|e| e.starts_with("DEADLOCK"));
                    assert!(
                        matches!(r, Value::Nil | Value::Int(_)) || deadlock,
                        "seed {seed}, step {step}: {r:?}"
                    );
                }
            }
            _ => {}
        }
        if step % 50 == 0 {
            let (gauge, queued, blocked) = waiter_counts(&mut c, &keys);
            assert_eq!(
                (gauge, queued),
                (blocked, blocked),
                "seed {seed}, step {step}"
            );
        }
    }
    drop(pending);
    wait_until(Duration::from_secs(5), "every waiter gone", || {
        info_int(&mut c, "clients", "blocked_clients") == 0 && rlock_stat(&mut c, "waiters") == 0
    });
    for k in keys {
        assert_eq!(lock_info(&mut c, k).waiters, 0, "seed {seed}: {k}");
    }
    assert!(
        s.alive(),
        "seed {seed}: redis-server died\n{}",
        s.log_tail(30)
    );
    assert_eq!(string(&mut c, &cmd!("PING")), "PONG");
}

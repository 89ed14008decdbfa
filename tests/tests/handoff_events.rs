//! Anything that frees a lock hands it to the head waiter promptly (lease expiry, DEL, UNLINK,
//! FLUSHALL, FLUSHDB, Redisson's Lua unlock, RENAME and MOVE away, force release), and full
//! releases publish on Redisson's channel.

use rlock_tests::*;
use std::time::{Duration, Instant};

/// How long after the freeing event's reply the waiter's reply may take. The contract targets
/// 10 ms; the margin absorbs scheduling on a loaded CI machine.
const PROMPT: Duration = Duration::from_millis(100);

#[test]
fn lease_expiry_hands_off_within_lease_plus_50ms() {
    let s = Server::start();
    let mut c = s.conn();
    const LEASE: u64 = 200;
    // Held long while the waiter queues (a loaded machine may take longer than the lease to
    // show it blocked), then the lease set to LEASE by a renewal.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    let asked = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", LEASE)), 1);
    // The holder's LEASE ms started between `asked` and `acquired`.
    let acquired = Instant::now();
    let reply = w.reply_int();
    let granted = Instant::now();
    assert_eq!(reply, 1);
    let after_lease_start = granted - acquired;
    assert!(
        after_lease_start <= Duration::from_millis(LEASE + 50),
        "granted {after_lease_start:?} after the lease started (lease {LEASE} ms)"
    );
    assert!(
        granted - asked >= Duration::from_millis(LEASE - 5),
        "granted after {:?}, before the {LEASE} ms lease ran out",
        granted - asked
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
    assert_between("waiter's lease", pttl(&mut c, "lk"), 4_500, 5_000);
}

#[test]
fn lease_expiry_hands_off_down_a_chain_of_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    // Held long while both waiters queue (a loaded machine may take longer than 300 ms to park
    // two), then the holder's lease set to 300 ms by a renewal; the waiters' 100 ms leases count
    // from their grants.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w1 = park(&s, &mut c, "lk", "w1", 100, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 100, &[], 2);
    let acquired = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 300)), 1);
    assert_eq!(w1.reply_int(), 1);
    assert_eq!(w2.reply_int(), 1);
    // Leases of 300 ms and 100 ms back to back, each handed off within +50 ms.
    assert!(
        acquired.elapsed() <= Duration::from_millis(500),
        "{:?}",
        acquired.elapsed()
    );
    wait_until(
        Duration::from_secs(1),
        "w2's lease expires and the lock frees",
        || !exists(&mut c, "lk"),
    );
}

/// Park a waiter on a held lock, run `event` (which must free the key `lk` in db 0), and check
/// that the waiter gets it within [`PROMPT`] with its own lease.
fn hands_off_after(event: &str, run: impl FnOnce(&mut redis::Connection)) {
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
    let w1 = park(&s, &mut c, "lk", "w1", 6_000, &[], 1);
    let w2 = park(&s, &mut c, "lk", "w2", 6_000, &[], 2);
    run(&mut c);
    let freed = Instant::now();
    assert_eq!(w1.reply_int(), 1, "{event}: the head waiter gets the lock");
    let took = freed.elapsed();
    assert!(took <= PROMPT, "{event}: hand-off took {took:?}");
    assert_eq!(hgetall(&mut c, "lk"), holder("w1", 1), "{event}");
    assert_between(
        &format!("{event}: waiter's lease"),
        pttl(&mut c, "lk"),
        5_500,
        6_000,
    );
    assert_eq!(
        lock_info(&mut c, "lk").queue,
        ["w2"],
        "{event}: only the head was served"
    );
    // The rest of the queue is intact.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "w1")), 0);
    assert_eq!(w2.reply_int(), 1);
}

#[test]
fn del_hands_off() {
    hands_off_after("DEL", |c| assert_eq!(int(c, &cmd!("DEL", "lk")), 1));
}

#[test]
fn unlink_hands_off() {
    hands_off_after("UNLINK", |c| assert_eq!(int(c, &cmd!("UNLINK", "lk")), 1));
}

#[test]
fn flushall_hands_off() {
    hands_off_after("FLUSHALL", |c| {
        assert_eq!(string(c, &cmd!("FLUSHALL")), "OK")
    });
}

#[test]
fn flushall_async_hands_off() {
    hands_off_after("FLUSHALL ASYNC", |c| {
        assert_eq!(string(c, &cmd!("FLUSHALL", "ASYNC")), "OK")
    });
}

#[test]
fn flushdb_hands_off() {
    hands_off_after("FLUSHDB", |c| assert_eq!(string(c, &cmd!("FLUSHDB")), "OK"));
}

#[test]
fn redisson_lua_unlock_hands_off() {
    hands_off_after("Redisson unlock", |c| {
        assert_eq!(redisson::unlock(c, "lk", "holder", 30_000), Value::Int(0));
        assert_eq!(redisson::unlock(c, "lk", "holder", 30_000), Value::Int(1));
    });
}

#[test]
fn redisson_lua_force_unlock_hands_off() {
    hands_off_after("Redisson force unlock", |c| {
        assert_eq!(redisson::force_unlock(c, "lk"), Value::Int(1));
    });
}

#[test]
fn rename_away_hands_off() {
    hands_off_after("RENAME", |c| {
        assert_eq!(string(c, &cmd!("RENAME", "lk", "elsewhere")), "OK");
        assert_eq!(
            hgetall(c, "elsewhere"),
            holder("holder", 2),
            "the renamed hash moved"
        );
    });
}

#[test]
fn move_away_hands_off() {
    hands_off_after("MOVE", |c| {
        assert_eq!(int(c, &cmd!("MOVE", "lk", 1)), 1);
    });
}

#[test]
fn hdel_of_the_owner_field_hands_off() {
    hands_off_after("HDEL", |c| {
        assert_eq!(int(c, &cmd!("HDEL", "lk", "holder")), 1)
    });
}

#[test]
fn pexpire_in_the_past_hands_off() {
    hands_off_after("PEXPIRE 0", |c| {
        assert_eq!(int(c, &cmd!("PEXPIRE", "lk", 0)), 1)
    });
}

#[test]
fn force_release_hands_off() {
    hands_off_after("RLOCK.FORCERELEASE", |c| {
        assert_eq!(int(c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    });
}

#[test]
fn release_publishes_once_per_full_release_and_force_release() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "*lock*");
    let zero = || (lock_channel("lk"), "0".to_string());
    assert_eq!(lock_channel("lk"), "redisson_lock__channel:{lk}");

    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 10_000)), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "o1", 10_000)), 1);
    assert_eq!(
        sub.drain(&mut c),
        [],
        "acquire, re-entry and renew publish nothing"
    );

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 1);
    assert_eq!(sub.drain(&mut c), [], "a partial release publishes nothing");

    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
    assert_eq!(
        sub.drain(&mut c),
        [zero()],
        "a full release publishes one 0"
    );

    let e = err(&mut c, &cmd!("RLOCK.RELEASE", "lk", "o1"));
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(sub.drain(&mut c), [], "a refused release publishes nothing");

    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000)), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 10_000)), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert_eq!(
        sub.drain(&mut c),
        [zero()],
        "a force release publishes one 0"
    );

    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 0);
    assert_eq!(
        sub.drain(&mut c),
        [],
        "force release of a free lock publishes nothing"
    );
}

#[test]
fn release_publishes_on_the_brace_style_channel() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "*lock*");
    for (key, channel) in [
        ("{app}:x", "redisson_lock__channel:{app}:x"),
        ("a{b}c", "redisson_lock__channel:a{b}c"),
        ("plain:x", "redisson_lock__channel:{plain:x}"),
    ] {
        assert_eq!(lock_channel(key), channel);
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", key, "o1", 10_000)), 1);
        assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", key, "o1")), 0);
        assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", key, "o1", 10_000)), 1);
        assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", key)), 1);
        let got = sub.drain(&mut c);
        assert_eq!(
            got,
            [
                (channel.to_string(), "0".to_string()),
                (channel.to_string(), "0".to_string())
            ]
        );
    }
}

#[test]
fn the_expired_holder_can_no_longer_release_or_renew() {
    let s = Server::start();
    let mut c = s.conn();
    // Held long while the waiter queues, then shortened to end in 100 ms.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 100)), 1);
    assert_eq!(w.reply_int(), 1);
    let e = err(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder"));
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 5_000)), 0);
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 5_000));
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

/// The holder's expiry moves after the waiter parked (by `extend`, which must reply `extended`);
/// the waiter must not get the lock at the old expiry time. Timing is the behaviour here: we
/// look after the old expiry has passed by a wide margin.
fn moved_expiry_is_respected(what: &str, extend: redis::Cmd, extended: Value) {
    let s = Server::start();
    let mut c = s.conn();
    // Held long while the waiter queues (a loaded machine may take longer than a short lease
    // to show it blocked); then, in one pipeline, the lease is shortened to 150 ms (the queue
    // looks again at that end) and `extend` moves it before it can end.
    assert_eq!(
        redisson::acquire(&mut c, "lk", "holder", 30_000),
        Value::Nil
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    let (shortened, reply): (i64, Value) = redis::pipe()
        .cmd("RLOCK.RENEW")
        .arg("lk")
        .arg("holder")
        .arg(150)
        .add_command(extend)
        .query(&mut c)
        .unwrap();
    assert_eq!(shortened, 1, "{what}: the lease shortened to 150 ms");
    assert_eq!(reply, extended, "{what}: the lease moved");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        hgetall(&mut c, "lk"),
        holder("holder", 1),
        "{what}: the lock was taken away"
    );
    assert_eq!(
        info_int(&mut c, "clients", "blocked_clients"),
        1,
        "{what}: waiter was served"
    );
    assert_eq!(lock_info(&mut c, "lk").queue, ["w"]);
    // And it still hands off when the holder lets go.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn rlock_renew_moves_the_expiry_hand_off() {
    moved_expiry_is_respected(
        "RLOCK.RENEW",
        cmd!("RLOCK.RENEW", "lk", "holder", 10_000),
        Value::Int(1),
    );
}

#[test]
fn redisson_watchdog_renewal_moves_the_expiry_hand_off() {
    // The script redisson::renew runs; it replies {1} when it renewed.
    moved_expiry_is_respected(
        "Redisson watchdog renewal",
        cmd!("EVAL", redisson::RENEW, 1, "lk", 10_000, "holder"),
        Value::Array(vec![Value::Int(1)]),
    );
}

#[test]
fn native_pexpire_moves_the_expiry_hand_off() {
    moved_expiry_is_respected("PEXPIRE", cmd!("PEXPIRE", "lk", 10_000), Value::Int(1));
}

#[test]
fn persist_keeps_the_lock_from_waiters() {
    moved_expiry_is_respected("PERSIST", cmd!("PERSIST", "lk"), Value::Int(1));
}

#[test]
fn a_shortened_lease_hands_off_at_the_new_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("PEXPIRE", "lk", 100)), 1);
    let shortened = Instant::now();
    assert_eq!(w.reply_int(), 1);
    let took = shortened.elapsed();
    assert!(
        took <= Duration::from_millis(150),
        "hand-off {took:?} after a 100 ms PEXPIRE"
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

/// RLOCK.RENEW with a shorter lease than the one in force: the waiter gets the lock at the new
/// expiry, not at the old one and not at a check armed for it.
#[test]
fn a_renewal_that_shortens_the_lease_hands_off_at_the_new_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 100)), 1);
    let renewed = Instant::now();
    assert_eq!(w.reply_int(), 1);
    let took = renewed.elapsed();
    assert!(
        took <= Duration::from_millis(150),
        "hand-off {took:?} after a renewal to 100 ms"
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
}

#[test]
fn eviction_hands_off() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(
        string(
            &mut c,
            &cmd!("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
        ),
        "OK"
    );
    // Over the limit: the holder's key is evicted (CONFIG SET evicts at once).
    assert_eq!(string(&mut c, &cmd!("CONFIG", "SET", "maxmemory", 1)), "OK");
    let evicted = Instant::now();
    assert_eq!(w.reply_int(), 1, "the evicted lock goes to the waiter");
    assert!(
        evicted.elapsed() <= PROMPT,
        "hand-off took {:?}",
        evicted.elapsed()
    );
    assert_eq!(string(&mut c, &cmd!("CONFIG", "SET", "maxmemory", 0)), "OK");
    assert!(info_int(&mut c, "stats", "evicted_keys") >= 1);
    // The waiter's lock may itself have been evicted since; it is never the old holder's.
    let now = hgetall(&mut c, "lk");
    assert!(now.is_empty() || now == holder("w", 1), "{now:?}");
}

#[test]
fn hand_offs_happen_in_the_waiters_database() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(string(&mut c, &cmd!("SELECT", 3)), "OK");
    // Lease expiry: the module's timer must write in db 3, not db 0. Held long while the
    // waiter selects db 3 and queues, then shortened to end in 100 ms.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let mut wc = s.conn();
    assert_eq!(string(&mut wc, &cmd!("SELECT", 3)), "OK");
    let w = Pending::send_on(wc, &cmd!("RLOCK.ACQUIRE", "lk", "w1", 5_000, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "lk", "holder", 100)), 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w1", 1));
    // DEL.
    let mut wc = s.conn();
    assert_eq!(string(&mut wc, &cmd!("SELECT", 3)), "OK");
    let w = Pending::send_on(wc, &cmd!("RLOCK.ACQUIRE", "lk", "w2", 5_000, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("DEL", "lk")), 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("w2", 1));
    let mut db0 = s.conn();
    assert_eq!(dbsize(&mut db0), 0, "nothing written in db 0");
}

#[test]
fn flushdb_of_another_database_hands_nothing_off() {
    let s = Server::start();
    let mut c = s.conn();
    let mut other = s.conn();
    assert_eq!(string(&mut other, &cmd!("SELECT", 1)), "OK");
    assert_eq!(
        int(
            &mut other,
            &cmd!("RLOCK.ACQUIRE", "lk", "db1-holder", 30_000)
        ),
        1
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 5_000, &[], 1);
    assert_eq!(string(&mut other, &cmd!("FLUSHDB")), "OK");
    assert!(!exists(&mut other, "lk"));
    // Give a wrongly triggered hand-off every chance to show (timing is the behaviour).
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(hgetall(&mut c, "lk"), holder("holder", 1));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")), 0);
    assert_eq!(w.reply_int(), 1);
}

#[test]
fn many_locks_expiring_together_all_hand_off_in_time() {
    const LOCKS: usize = 20;
    const LEASE: u64 = 300;
    let s = Server::start();
    let mut c = s.conn();
    // Held long while the waiters queue (a loaded machine may take longer than the lease to
    // park twenty), then every lease set to end together, in one round trip.
    for i in 0..LOCKS {
        let lock = format!("lk{i}");
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", lock, "holder", 60_000)),
            1
        );
    }
    let waiters: Vec<Pending> = (0..LOCKS)
        .map(|i| {
            let w = format!("w{i}");
            Pending::send(
                &s,
                &cmd!("RLOCK.ACQUIRE", format!("lk{i}"), w, 5_000, "BLOCK", 0),
            )
        })
        .collect();
    wait_blocked(&mut c, LOCKS as i64);
    let mut renew = redis::pipe();
    for i in 0..LOCKS {
        renew
            .cmd("RLOCK.RENEW")
            .arg(format!("lk{i}"))
            .arg("holder")
            .arg(LEASE);
    }
    let shortened = Instant::now();
    let renewed: Vec<i64> = renew.query(&mut c).unwrap();
    assert_eq!(renewed, vec![1; LOCKS]);
    let late: Vec<Duration> = waiters
        .into_iter()
        .map(|w| {
            assert_eq!(w.reply_int(), 1);
            shortened.elapsed()
        })
        .collect();
    for (i, late) in late.into_iter().enumerate() {
        assert!(
            late <= Duration::from_millis(LEASE) + margin(Duration::from_millis(50)),
            "lk{i} handed off {late:?} after the leases were set to end in {LEASE} ms"
        );
        assert_eq!(
            hgetall(&mut c, &format!("lk{i}")),
            holder(&format!("w{i}"), 1)
        );
    }
}

#[test]
fn swapdb_hands_off_a_lock_that_left_the_database() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = park(&s, &mut c, "lk", "w", 6_000, &[], 1);
    // Database 1 has no `lk`: after the swap, database 0's lock is gone, like a DEL.
    assert_eq!(string(&mut c, &cmd!("SWAPDB", 0, 1)), "OK");
    let swapped = Instant::now();
    assert_eq!(w.reply_int(), 1);
    assert!(
        swapped.elapsed() <= PROMPT,
        "hand-off took {:?}",
        swapped.elapsed()
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("w", 1));
    let mut db1 = s.conn();
    assert_eq!(string(&mut db1, &cmd!("SELECT", 1)), "OK");
    assert_eq!(
        hgetall(&mut db1, "lk"),
        holder("holder", 1),
        "the old lock moved to db 1"
    );
}

//! The rlock client's blocking API against a real redis-server with the module: re-entry,
//! try_lock timing, leases, the watchdog, lost locks, guards on panic, fencing tokens, a
//! SIGKILLed holder process, and 16 threads doing a non-atomic read-modify-write.

mod client_support;

use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{Error, Ttl};
use rlock_tests::{cmd, int, margin, pttl, redis, wait_until, Server};

#[test]
fn reentry_counts_and_unlock_by_non_owner() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("re");
    let owner = lock.owner();
    for n in 1..=3 {
        lock.lock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), n);
    }
    let raw: u64 = redis::cmd("HGET")
        .arg("re")
        .arg(owner.as_str())
        .query(&mut c)
        .unwrap();
    assert_eq!(
        raw, 3,
        "Redisson layout: field = UUID:thread, value = count"
    );
    assert!(owner.as_str().starts_with(client.id()));
    assert!(lock.is_locked().unwrap());
    assert!(lock.is_held_by_current_thread().unwrap());

    // Another thread is another owner: not held by it, it cannot take or release it.
    let l2 = lock.clone();
    std::thread::spawn(move || {
        assert!(!l2.is_held_by_current_thread().unwrap());
        assert_eq!(l2.hold_count().unwrap(), 0);
        assert!(!l2.try_lock().unwrap());
        assert!(matches!(l2.unlock(), Err(Error::NotOwner { .. })));
    })
    .join()
    .unwrap();

    for n in (0..3).rev() {
        lock.unlock().unwrap();
        assert_eq!(lock.hold_count().unwrap(), n);
    }
    assert!(!exists(&mut c, "re"));
    assert!(matches!(lock.unlock(), Err(Error::NotOwner { .. })));
    assert_eq!(lock.remain_time_to_live().unwrap(), Ttl::NotLocked);

    // Re-entry with guards: each guard is one hold.
    let g1 = lock.guard().unwrap();
    let g2 = lock.guard().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(g2);
    assert_eq!(lock.hold_count().unwrap(), 1);
    g1.unlock().unwrap();
    assert!(!exists(&mut c, "re"));
}

#[test]
fn fair_lock_is_the_same_lock() {
    let s = Server::start();
    let client = client(&s);
    let a = client.fair_lock("f");
    a.lock().unwrap();
    assert!(client.lock("f").is_held_by_current_thread().unwrap());
    a.unlock().unwrap();
}

#[test]
fn try_lock_timing() {
    let s = Server::start();
    let client = client(&s);
    let lock = client.lock("tl");
    lock.lock().unwrap();

    // Held by someone else for the whole wait: false, after the wait and not much later.
    let l2 = lock.clone();
    let busy_took = std::thread::spawn(move || {
        assert!(!l2.try_lock().unwrap());
        let t = Instant::now();
        assert!(!l2.try_lock_for(Duration::from_millis(300)).unwrap());
        t.elapsed()
    })
    .join()
    .unwrap();
    assert!(
        busy_took >= Duration::from_millis(290),
        "gave up early: {busy_took:?}"
    );
    assert!(
        busy_took < Duration::from_millis(1300),
        "gave up late: {busy_took:?}"
    );
    let mut c = s.conn();
    assert_no_waiters(&mut c, "tl");

    // Freed while a 5 s wait is queued (awaited on the server, not slept for): granted after
    // the unlock, and right after it.
    let l3 = lock.clone();
    let waiter = std::thread::spawn(move || {
        let got = l3.try_lock_for(Duration::from_secs(5)).unwrap();
        let at = Instant::now();
        l3.unlock().unwrap();
        (got, at)
    });
    wait_until(Duration::from_secs(5), "the waiter queued", || {
        waiters(&mut c, "tl") == 1
    });
    assert!(!waiter.is_finished(), "the waiter waits for the holder");
    let unlocked = Instant::now();
    lock.unlock().unwrap();
    let (got, at) = waiter.join().unwrap();
    assert!(got);
    assert!(at >= unlocked, "granted before the unlock");
    assert!(
        at - unlocked < margin(Duration::from_millis(500)),
        "granted {:?} after the unlock",
        at - unlocked
    );
}

#[test]
fn try_lock_for_zero_makes_one_attempt() {
    let s = Server::start();
    let client = client(&s);
    let lock = client.lock("z");
    assert!(lock.try_lock_for(Duration::ZERO).unwrap());
    let l2 = lock.clone();
    let t = Instant::now();
    assert!(
        !std::thread::spawn(move || l2.try_lock_for(Duration::ZERO).unwrap())
            .join()
            .unwrap()
    );
    assert!(t.elapsed() < Duration::from_millis(500));
    lock.unlock().unwrap();
    assert!(matches!(
        lock.lock_with_lease(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn lease_expires_without_watchdog() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("lease");
    lock.lock_with_lease(Duration::from_millis(400)).unwrap();
    let ttl = lock.remain_time_to_live().unwrap().remaining().unwrap();
    assert!(
        ttl <= Duration::from_millis(400) && ttl > Duration::from_millis(100),
        "{ttl:?}"
    );
    assert_eq!(client.renewing_count(), 0, "a lease lock is not renewed");

    // A waiter on another thread gets it when the lease ends.
    let l2 = lock.clone();
    let t = Instant::now();
    let took = std::thread::spawn(move || {
        assert!(l2
            .try_lock_with(Duration::from_secs(5), Duration::from_secs(5))
            .unwrap());
        let took = t.elapsed();
        l2.unlock().unwrap();
        took
    })
    .join()
    .unwrap();
    assert!(
        took >= Duration::from_millis(300),
        "granted before the lease ended: {took:?}"
    );
    assert!(took < Duration::from_millis(1200), "granted late: {took:?}");

    // Without anyone waiting it simply disappears.
    lock.lock_with_lease(Duration::from_millis(300)).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(!exists(&mut c, "lease"));
    assert!(matches!(lock.unlock(), Err(Error::NotOwner { .. })));
}

#[test]
fn watchdog_keeps_the_lock_three_times_past_its_timeout_and_stops_after_unlock() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s); // watchdog timeout 600 ms, renewal every 200 ms
    let lock = client.lock("wd");
    lock.lock().unwrap();
    assert_eq!(client.renewing_count(), 1);
    std::thread::sleep(Duration::from_millis(1900));
    assert!(
        lock.is_held_by_current_thread().unwrap(),
        "renewed past 3x the timeout"
    );
    let ttl = lock.remain_time_to_live().unwrap().remaining().unwrap();
    assert!(
        ttl <= Duration::from_millis(600),
        "lease is the watchdog timeout: {ttl:?}"
    );
    assert!(!lock.is_lost());
    assert!(
        calls(&mut c, renew_command()) >= 6,
        "renewed every timeout/3"
    );

    lock.unlock().unwrap();
    assert_eq!(client.renewing_count(), 0, "renewal stops at once");
    let before = calls(&mut c, renew_command());
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        calls(&mut c, renew_command()),
        before,
        "no renewal after unlock"
    );
    assert!(!exists(&mut c, "wd"));
}

#[test]
fn watchdog_renews_many_locks_in_one_round_trip() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let locks: Vec<_> = (0..50).map(|i| client.lock(format!("many:{i}"))).collect();
    for l in &locks {
        l.lock().unwrap();
    }
    let before = calls(&mut c, renew_command());
    std::thread::sleep(Duration::from_millis(1500));
    let renewed = calls(&mut c, renew_command()) - before;
    for l in &locks {
        assert!(l.is_held_by_current_thread().unwrap());
    }
    // One pipelined batch per period renews all 50 (a batch is never split).
    assert!(renewed >= 5 * 50, "renewed {renewed} times");
    assert_eq!(renewed % 50, 0, "renewed {renewed} times");
    for l in &locks {
        l.unlock().unwrap();
    }
}

#[test]
fn a_lost_lock_is_reported_on_the_guard() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("lost");
    let g = lock.guard().unwrap();
    assert!(!g.is_lost());
    // Someone deletes the lock behind our back.
    let _: () = redis::cmd("DEL").arg("lost").query(&mut c).unwrap();
    wait_until(Duration::from_secs(2), "watchdog notices the loss", || {
        g.is_lost()
    });
    assert!(lock.is_lost());
    assert_eq!(
        client.renewing_count(),
        0,
        "a lost lock is no longer renewed"
    );
    assert!(matches!(g.unlock(), Err(Error::NotOwner { .. })));
    // Locking again starts a fresh, healthy hold.
    let g = lock.guard().unwrap();
    assert!(!g.is_lost() && !lock.is_lost());
}

#[test]
fn guards_release_on_panic() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("panic");
    let l2 = lock.clone();
    let r = std::thread::spawn(move || {
        let _outer = l2.guard().unwrap();
        let _inner = l2.guard().unwrap();
        panic!("boom while holding the lock twice");
    })
    .join();
    assert!(r.is_err());
    assert!(
        !exists(&mut c, "panic"),
        "both holds released while unwinding"
    );
    assert_eq!(client.renewing_count(), 0);
    assert!(lock.try_lock().unwrap());
    lock.unlock().unwrap();
}

#[test]
fn fencing_tokens_increase() {
    let s = Server::start();
    let client = client(&s);
    let lock = client.fenced_lock("fence");
    assert_eq!(lock.token().unwrap(), None);
    // Redisson's testTokenIncrease: every acquire path takes the next token.
    let t1 = lock.lock_and_get_token().unwrap();
    lock.unlock().unwrap();
    let t2 = lock.lock_and_get_token().unwrap();
    lock.unlock().unwrap();
    lock.lock().unwrap();
    let t3 = lock.token().unwrap().unwrap();
    lock.unlock().unwrap();
    lock.lock_with_lease(Duration::from_secs(10)).unwrap();
    let t4 = lock.token().unwrap().unwrap();
    lock.unlock().unwrap();
    let t5 = lock.try_lock_and_get_token().unwrap().unwrap();
    // Redisson's test expects 1..5; rlock's tokens carry the clock term (core/fencing.rs), so
    // they strictly increase from a large number instead.
    let tokens = [t1, t2, t3, t4, t5];
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // Over Redisson's protocol the token is Redisson's counter, from 1.
    assert!(
        rlock_tests::without_module() || t1 > 1_700_000_000_000_000,
        "{t1}"
    );
    // Re-entry takes a new token too; a failed attempt takes none.
    let t6 = lock
        .lock_and_get_token_with_lease(Duration::from_secs(10))
        .unwrap();
    assert!(t6 > t5);
    let l2 = lock.clone();
    assert_eq!(
        std::thread::spawn(move || l2.try_lock_and_get_token().unwrap())
            .join()
            .unwrap(),
        None
    );
    assert_eq!(lock.token().unwrap(), Some(t6));
    let g = lock.guard().unwrap();
    let tg = g.token().expect("a fenced guard has a token");
    assert!(tg > t6);
    drop(g);
    lock.unlock().unwrap();
    lock.unlock().unwrap();
    let t = lock
        .try_lock_and_get_token_with(Duration::from_secs(1), Duration::from_secs(1))
        .unwrap();
    assert!(t.expect("free") > tg);
    lock.unlock().unwrap();
}

#[test]
fn sixteen_threads_times_500_increments_of_a_non_atomic_counter() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let client = client(&s);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let lock = client.lock("counter:lock");
            let mut con = s.conn();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    let _g = lock.guard().unwrap();
                    let v: i64 = redis::cmd("GET").arg("counter").query(&mut con).unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(v + 1)
                        .query(&mut con)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(v, 16 * 500);
    assert!(!exists(&mut c, "counter:lock"));
    assert_no_waiters(&mut c, "counter:lock");
}

/// Child half of `a_sigkilled_holder_frees_the_lock_after_the_lease`: does nothing unless run as
/// that test's child process.
#[test]
#[ignore = "child process: its parent test runs it (spawn_self), it does nothing alone"]
fn sigkill_child_holder() {
    let Ok(url) = std::env::var("RLOCK_CHILD_URL") else {
        return;
    };
    let client = client_with(url, |b| b.watchdog_timeout(Duration::from_millis(1000)));
    let lock = client.lock("killed");
    lock.lock().unwrap();
    println!("LOCKED");
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn a_sigkilled_holder_frees_the_lock_after_the_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let (mut child, mut out) = spawn_self("sigkill_child_holder", &[("RLOCK_CHILD_URL", s.url())]);
    read_until(&mut out, "LOCKED");
    // The child's watchdog renews its 1 s lease while the child lives: the key's absolute
    // expiry time moves on (awaited, not slept for).
    let first = int(&mut c, &cmd!("PEXPIRETIME", "killed"));
    wait_until(
        Duration::from_secs(3),
        "the live holder's watchdog renews",
        || int(&mut c, &cmd!("PEXPIRETIME", "killed")) > first,
    );

    let client = client(&s);
    let lock = client.lock("killed");
    let waiter = std::thread::spawn(move || {
        let got = lock.try_lock_for(Duration::from_secs(10)).unwrap();
        let at = Instant::now();
        assert!(lock.is_held_by_current_thread().unwrap());
        lock.unlock().unwrap();
        (got, at)
    });
    wait_until(Duration::from_secs(5), "waiter queued", || {
        waiters(&mut c, "killed") == 1
    });
    child.kill().unwrap(); // SIGKILL: no unlock, no more renewals
    let killed_at = Instant::now();
    let _ = child.wait();
    // Not freed by the disconnect: the dead holder's until its lease ends.
    let left = pttl(&mut c, "killed");
    assert!(left > 0, "freed at the disconnect (PTTL {left})");
    let (got, at) = waiter.join().unwrap();
    assert!(
        got,
        "the waiter gets the lock once the dead holder's lease ends"
    );
    let after = at.duration_since(killed_at);
    // Not before the lease ends (PTTL counts whole ms down: 1 ms of rounding), and soon after.
    assert!(
        after + Duration::from_millis(1) >= Duration::from_millis(left as u64),
        "granted {after:?} after the kill, {left} ms before the lease ended"
    );
    assert!(
        after < Duration::from_millis(1000) + margin(Duration::from_millis(800)),
        "freed within the lease: {after:?}"
    );
    assert!(!exists(&mut c, "killed"));
}

/// The command the watchdog renews a lock with: the module's, or Redisson's renewal script
/// (sent with EVAL in the watchdog's pipelines; every acquire here is an EVALSHA).
fn renew_command() -> &'static str {
    if rlock_tests::without_module() {
        "eval"
    } else {
        "rlock.renew"
    }
}

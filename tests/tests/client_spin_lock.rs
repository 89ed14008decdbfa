//! The spin lock (`Client::spin_lock`, Redisson's `RedissonSpinLock`) against real servers, in
//! both protocols (`RLOCK_CLIENT_PROTOCOL`): the lock's layout, waits that retry with a
//! back-off (no pub/sub subscription, no queued request), leases and the watchdog, and
//! Redisson's spin-lock and lock scripts on the same key both ways.

mod client_support;

use std::time::{Duration, Instant};

use client_support::{calls, client, lock_info, runtime, subscribers};
use rlock_client::{BackOff, Error};
use rlock_tests::redisson::lock as java;
use rlock_tests::*;

/// The commands one attempt of the spin lock is: `RLOCK.ACQUIRE` with the module, the lock's
/// script over Redisson's protocol (EVALSHA, EVAL after a NOSCRIPT).
fn attempts(c: &mut redis::Connection) -> i64 {
    if without_module() {
        calls(c, "evalsha") + calls(c, "eval")
    } else {
        calls(c, "rlock.acquire")
    }
}

/// Waits parked on the server for `key`: queued requests with the module, subscriptions to
/// its channel over Redisson's protocol.
fn parked(c: &mut redis::Connection, key: &str) -> i64 {
    if without_module() {
        return subscribers(c, &lock_channel(key));
    }
    let info = lock_info(c, key);
    let waiters = info.into_iter().find(|(k, _)| k == "waiters").unwrap().1;
    redis::from_redis_value(waiters).unwrap()
}

#[test]
fn a_spin_lock_is_the_locks_layout_and_every_lock_method_works() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let spin = client.spin_lock("spin");
    assert_eq!(spin.name(), "spin");
    assert_eq!(spin.backoff(), BackOff::default());
    spin.lock().unwrap();
    spin.lock().unwrap();
    let owner = spin.owner();
    assert_eq!(hgetall(&mut c, "spin"), holder(owner.as_str(), 2));
    let ttl = pttl(&mut c, "spin");
    assert!(ttl > 0 && ttl <= 600, "the watchdog's lease: {ttl}");
    assert_eq!(spin.hold_count().unwrap(), 2);
    assert!(spin.is_held_by_current_thread().unwrap());
    // A plain lock of the same name is the same lock.
    let plain = client.lock("spin");
    assert!(plain.is_locked().unwrap());
    assert!(plain.is_held_by_current_thread().unwrap());
    spin.unlock().unwrap();
    plain.unlock().unwrap();
    assert!(!exists(&mut c, "spin"));
    assert!(matches!(spin.unlock(), Err(Error::NotOwner { .. })));

    // Leases, guards, force unlock.
    assert!(spin
        .try_lock_with(Duration::ZERO, Duration::from_secs(5))
        .unwrap());
    let ttl = pttl(&mut c, "spin");
    assert!(ttl > 4000 && ttl <= 5000, "{ttl}");
    assert!(spin.force_unlock().unwrap());
    {
        let _g = spin.guard().unwrap();
        assert!(exists(&mut c, "spin"));
    }
    assert!(!exists(&mut c, "spin"), "the guard released it");
    assert!(matches!(
        client.spin_lock_with_backoff("x", BackOff::constant(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_wait_retries_with_a_back_off_and_parks_nothing_on_the_server() {
    let s = Server::start();
    let mut c = s.conn();
    let holder_client = client(&s);
    let held = holder_client.lock("busy").guard().unwrap();
    let client = client(&s);
    let spin = client.spin_lock("busy");
    let before = attempts(&mut c);
    let t = Instant::now();
    let waiter = std::thread::spawn(move || {
        let got = spin.try_lock_for(Duration::from_secs(5)).unwrap();
        (got, Instant::now(), spin)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(parked(&mut c, "busy"), 0, "a spin wait parks nothing");
    // In 500 ms the default back-off (1, 2, 4, ... 128 ms) made at least 8 attempts.
    let made = attempts(&mut c) - before;
    assert!(made >= 8, "{made} attempts in 500 ms");
    let released = Instant::now();
    held.unlock().unwrap();
    let (got, at, spin) = waiter.join().unwrap();
    assert!(got, "acquired once released");
    let after = at - released;
    assert!(
        after <= margin(Duration::from_millis(128 + 200)),
        "acquired {after:?} after the release (back-off at most 128 ms)"
    );
    assert!(t.elapsed() >= Duration::from_millis(500));
    assert!(spin.is_locked().unwrap());
    spin.force_unlock().unwrap();
}

#[test]
fn a_wait_ends_at_its_time_and_a_constant_back_off_spaces_attempts() {
    let s = Server::start();
    let mut c = s.conn();
    // Held by a script (no watchdog renewing it: the attempts counted are the spin lock's).
    assert_eq!(java::acquire(&mut c, "held", "java:1", 30_000), Value::Nil);
    let client = client(&s);
    let spin = client
        .spin_lock_with_backoff("held", BackOff::constant(Duration::from_millis(100)))
        .unwrap();
    let before = attempts(&mut c);
    let t = Instant::now();
    assert!(!spin.try_lock_for(Duration::from_millis(450)).unwrap());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took <= margin(Duration::from_millis(450 + 150)),
        "{took:?}"
    );
    // Attempts at 0, 100, 200, 300, 400 and the deadline (450 ms).
    let made = attempts(&mut c) - before;
    assert!((5..=7).contains(&made), "{made} attempts");
    assert!(!spin.try_lock().unwrap());

    // A blocking wait under a CancelToken ends at the cancel, between two attempts.
    let token = rlock_client::CancelToken::new();
    let waiter = {
        let (spin, token) = (spin.clone(), token.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let r = token.run(|| spin.try_lock_for(Duration::from_secs(10)));
            (r, t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(250));
    token.cancel();
    let (r, took) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    assert!(
        took < margin(Duration::from_secs(1)),
        "ended at the cancel: {took:?}"
    );
}

#[test]
fn the_async_spin_lock_waits_with_timers_and_the_watchdog_renews_it() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rt = runtime(2);
    rt.block_on(async {
        let spin = client.async_spin_lock("async-spin");
        let g = spin.guard().await.unwrap();
        let other = client.async_spin_lock("async-spin");
        let waiter = tokio::spawn(async move {
            let got = other.try_lock_for(Duration::from_secs(5)).await.unwrap();
            assert!(got);
            other.unlock().await.unwrap();
        });
        // Held past its watchdog timeout (600 ms): renewed.
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!g.is_lost());
        assert!(pttl(&mut c, "async-spin") > 0);
        g.unlock().await.unwrap();
        waiter.await.unwrap();
        // A dropped wait leaves nothing behind.
        let _g = spin.guard().await.unwrap();
        let other = client.async_spin_lock("async-spin");
        // Another task: this one's owner holds it (and would re-enter).
        let r = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(100), other.lock()).await
        });
        assert!(r.await.unwrap().is_err(), "still waiting when dropped");
        assert_eq!(parked(&mut c, "async-spin"), 0);
    });
}

#[test]
fn redissons_spin_lock_and_the_clients_share_a_key_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let spin = client.spin_lock("shared");
    // Redisson's spin lock holds it: the client waits, and gets it once Redisson unlocks.
    assert_eq!(
        java::spin_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Nil
    );
    assert!(!spin.try_lock().unwrap());
    assert!(spin.is_locked().unwrap() && !spin.is_held_by_current_thread().unwrap());
    let waiter = {
        let spin = spin.clone();
        std::thread::spawn(move || {
            let got = spin.try_lock_for(Duration::from_secs(5)).unwrap();
            spin.unlock().unwrap();
            got
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        java::spin_unlock(&mut c, "shared", "java:1", 30_000),
        Value::Int(1)
    );
    assert!(waiter.join().unwrap());

    // The client holds it: Redisson's spin lock and plain lock see it busy (its PTTL), and
    // its re-entry count is Redisson's.
    spin.lock().unwrap();
    let owner = spin.owner();
    match java::spin_acquire(&mut c, "shared", "java:1", 30_000) {
        Value::Int(ttl) => assert!(ttl > 0),
        other => panic!("Redisson's spin lock took a held lock: {other:?}"),
    }
    assert!(matches!(
        java::acquire(&mut c, "shared", "java:1", 30_000),
        Value::Int(_)
    ));
    // Redisson's spin lock, as the client's owner, re-enters and unlocks the client's hold.
    assert_eq!(
        java::spin_acquire(&mut c, "shared", owner.as_str(), 30_000),
        Value::Nil
    );
    assert_eq!(spin.hold_count().unwrap(), 2);
    assert_eq!(
        java::spin_unlock(&mut c, "shared", owner.as_str(), 30_000),
        Value::Int(0)
    );
    spin.unlock().unwrap();
    assert!(!exists(&mut c, "shared"));
}

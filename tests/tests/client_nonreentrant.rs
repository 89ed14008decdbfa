//! The non-reentrant lock (`Client::non_reentrant_lock`, Redisson's `RedissonNonReentrantLock`)
//! against a real server: re-entry refused by every acquire form and through another handle,
//! the hold unchanged by the refusal, one unlock frees it, a waiter gets it on release, a
//! re-entry this client could not know of undone, and Redisson's non-reentrant acquire script
//! on the same key both ways.

mod client_support;

use std::time::Duration;

use client_support::*;
use rlock_client::{Error, Owner};
use rlock_tests::{pttl, redis, redisson, wait_until, Server};

/// Run Redisson's non-reentrant acquire ([`redisson::NON_REENTRANT_ACQUIRE`]) with EVAL.
fn redisson_acquire(
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
) -> redis::RedisResult<redis::Value> {
    redis::cmd("EVAL")
        .arg(redisson::NON_REENTRANT_ACQUIRE)
        .arg(1)
        .arg(key)
        .arg(30_000)
        .arg(owner)
        .arg("NON_REENTRANT_REACQUIRE")
        .query(c)
}

fn hget(c: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    redis::cmd("HGET").arg(key).arg(field).query(c).unwrap()
}

fn refused<T: std::fmt::Debug>(r: rlock_client::Result<T>) {
    match r {
        Err(Error::NotReentrant { name, .. }) => assert_eq!(name, "nr"),
        other => panic!("expected NotReentrant, got {other:?}"),
    }
}

#[test]
fn the_holder_cannot_take_it_again() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.non_reentrant_lock("nr");
    lock.lock().unwrap();
    refused(lock.lock());
    refused(lock.try_lock());
    refused(lock.try_lock_for(Duration::from_millis(100)));
    refused(lock.lock_with_lease(Duration::from_secs(5)));
    refused(lock.guard());
    // Through another handle of the same name, same thread (Redisson's cross-instance case).
    let same = client.non_reentrant_lock("nr");
    refused(same.lock());
    refused(same.try_lock());
    assert_eq!(
        hget(&mut c, "nr", lock.owner().as_str()),
        Some(1),
        "the hold is unchanged"
    );
    assert!(pttl(&mut c, "nr") > 0);
    assert!(same.is_held_by_current_thread().unwrap());
    assert_eq!(
        Error::NotReentrant {
            name: "nr".into(),
            owner: "u:1".into()
        }
        .to_string(),
        "can't lock 'nr' again: it is non-reentrant and already held by u:1"
    );

    // Another thread waits; one unlock frees the lock and hands it over.
    let l = lock.clone();
    let waiter = std::thread::spawn(move || {
        l.lock().unwrap();
        let held = l.hold_count().unwrap();
        l.unlock().unwrap();
        held
    });
    wait_until(Duration::from_secs(5), "the other thread waits", || {
        waiters(&mut c, "nr") == 1
    });
    lock.unlock().unwrap();
    assert_eq!(waiter.join().unwrap(), 1);
    assert!(!exists(&mut c, "nr"));

    // Guards: the second guard is refused, the first one frees the lock.
    let g = lock.guard().unwrap();
    refused(lock.guard());
    drop(g);
    assert!(!exists(&mut c, "nr"));
}

#[test]
fn a_reentry_this_client_could_not_know_of_is_undone() {
    let s = Server::start();
    let mut c = s.conn();
    let (a, b) = (client(&s), client(&s));
    // Two clients acting as one explicit owner: b's registry does not know a's hold, so the
    // server grants b a re-entry (count 2), which b gives back before refusing.
    let owner = Owner::from_raw("shared:1");
    let la = a.non_reentrant_lock("nr").with_owner(owner.clone());
    let lb = b.non_reentrant_lock("nr").with_owner(owner.clone());
    la.lock().unwrap();
    refused(lb.try_lock());
    assert_eq!(hget(&mut c, "nr", "shared:1"), Some(1));
    la.unlock().unwrap();
    assert!(!exists(&mut c, "nr"));
}

#[test]
fn redissons_non_reentrant_lock_shares_the_key_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.non_reentrant_lock("nr");

    // Held by rlock: Redisson's acquire as another owner finds it busy (its PTTL), as this
    // owner it is refused with Redisson's error.
    lock.lock().unwrap();
    let busy = redisson_acquire(&mut c, "nr", "java-uuid:7").unwrap();
    assert!(
        matches!(busy, redis::Value::Int(ttl) if ttl > 0),
        "{busy:?}"
    );
    let again = redisson_acquire(&mut c, "nr", lock.owner().as_str()).unwrap_err();
    assert!(
        again.to_string().contains("NON_REENTRANT_REACQUIRE"),
        "{again}"
    );
    lock.unlock().unwrap();

    // Held by Redisson: rlock's lock finds it busy, and gets it when Redisson releases.
    assert_eq!(
        redisson_acquire(&mut c, "nr", "java-uuid:7").unwrap(),
        redis::Value::Nil
    );
    assert!(!lock.try_lock().unwrap());
    let l = lock.clone();
    let waiter = std::thread::spawn(move || {
        assert!(l.try_lock_for(Duration::from_secs(5)).unwrap());
        let held = l.hold_count().unwrap();
        l.unlock().unwrap();
        held
    });
    wait_until(Duration::from_secs(5), "rlock waits", || {
        waiters(&mut c, "nr") == 1
    });
    // Redisson's unlock (the module's release answers the same on this layout).
    assert_eq!(
        redisson::unlock(&mut c, "nr", "java-uuid:7", 30_000),
        redis::Value::Int(1)
    );
    assert_eq!(waiter.join().unwrap(), 1);
    assert!(!exists(&mut c, "nr"));
}

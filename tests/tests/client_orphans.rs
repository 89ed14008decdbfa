//! Orphaned holds against a real server: a bare `lock()` whose owner can no longer release it is
//! not renewed for the life of the process (Redisson's redisson#7272, #2590). A thread that ends
//! holding a lock: the watchdog releases it within one renewal period. A task aborted while
//! holding (no handle of it left): reported, no longer renewed, free when its lease ends. An
//! owner handed on with `with_owner` is not an orphan.

mod client_support;

use std::time::{Duration, Instant};

use client_support::*;
use rlock_tests::{margin, pttl, redis, wait_until, Server};

/// The test clients' watchdog timeout and renewal period (`client_support::client`).
const WATCHDOG: Duration = Duration::from_millis(600);
const PERIOD: Duration = Duration::from_millis(200);

fn hget(c: &mut redis::Connection, key: &str, field: &str) -> Option<i64> {
    redis::cmd("HGET").arg(key).arg(field).query(c).unwrap()
}

#[test]
fn a_thread_that_ends_holding_a_lock_has_it_released_within_a_renewal_period() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("orphan:thread");
    let rw = client.read_write_lock("orphan:rw");
    let url = s.url();
    let (l, r) = (lock.clone(), rw.clone());
    let owner = std::thread::spawn(move || {
        // Held twice (re-entry) and a read hold: everything must go.
        l.lock().unwrap();
        l.lock().unwrap();
        r.read_lock().lock().unwrap();
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        assert_eq!(hget(&mut c, "orphan:thread", l.owner().as_str()), Some(2));
        l.owner()
    })
    .join()
    .unwrap();
    let ended = Instant::now();

    // Another client waits for it: granted when the watchdog gives the dead thread's holds back.
    let other = client_with(s.url(), |b| b);
    let theirs = other.lock("orphan:thread");
    assert!(
        theirs
            .try_lock_for(margin(PERIOD + Duration::from_millis(300)))
            .unwrap(),
        "the ended thread's lock was not released"
    );
    let waited = ended.elapsed();
    assert!(
        waited <= margin(PERIOD + Duration::from_millis(150)),
        "released {waited:?} after the thread ended (renewal period {PERIOD:?})"
    );
    assert_eq!(hget(&mut c, "orphan:thread", owner.as_str()), None);
    assert_eq!(
        hget(&mut c, "orphan:thread", theirs.owner().as_str()),
        Some(1),
        "held by the waiter alone"
    );
    wait_until(margin(PERIOD * 2), "the read hold is released too", || {
        !exists(&mut c, "orphan:rw")
    });
    // The watchdog forgets an orphan once its release is answered, a moment after the key is
    // gone (the count was still 2 once, under load, when read at once).
    wait_until(margin(PERIOD), "the watchdog renews nothing", || {
        client.renewing_count() == 0
    });
    theirs.unlock().unwrap();
}

#[test]
fn a_thread_that_handed_its_owner_on_keeps_the_lock_renewed() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("orphan:handed");
    let l = lock.clone();
    // The thread locks and hands its owner to the main thread before it ends.
    let mine = std::thread::spawn(move || {
        l.lock().unwrap();
        l.clone().with_owner(l.owner())
    })
    .join()
    .unwrap();
    // Three watchdog timeouts later it is still held and renewed.
    std::thread::sleep(WATCHDOG * 3);
    assert_eq!(
        hget(&mut c, "orphan:handed", mine.owner().as_str()),
        Some(1)
    );
    assert!(pttl(&mut c, "orphan:handed") > 0);
    assert_eq!(client.renewing_count(), 1);
    mine.unlock().unwrap();
    assert!(!exists(&mut c, "orphan:handed"));
}

#[test]
fn a_task_aborted_while_holding_is_no_longer_renewed() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rt = runtime(2);
    let aborted = rt.block_on(async {
        let lock = client.async_lock("orphan:task");
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            lock.lock().await.unwrap();
            held_tx.send(lock.owner()).unwrap();
            std::future::pending::<()>().await
        });
        let owner = held_rx.await.unwrap();
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(hget(&mut c, "orphan:task", owner.as_str()), Some(1));
        Instant::now()
    });
    // Reported within a renewal period (no longer counted as renewed)...
    wait_until(
        margin(PERIOD * 2),
        "the orphan is no longer renewed",
        || client.renewing_count() == 0,
    );
    // ... and free when its last lease ends: at most a watchdog timeout after the abort, where
    // a renewed lock would stay held for ever.
    let other = client_with(s.url(), |b| b);
    let theirs = other.lock("orphan:task");
    assert!(
        theirs.try_lock_for(margin(WATCHDOG + PERIOD * 2)).unwrap(),
        "the aborted task's lock is still renewed"
    );
    let freed = aborted.elapsed();
    assert!(
        freed <= margin(WATCHDOG + Duration::from_millis(150)),
        "freed {freed:?} after the abort (watchdog timeout {WATCHDOG:?})"
    );
    theirs.unlock().unwrap();
}

//! Cancelling blocking waits (`CancelToken`, Redisson's `lockInterruptibly`) against a real
//! server: a thread blocked in `lock()` is cancelled from another thread and returns
//! `Error::Cancelled` promptly with no request left on the server; a cancel that races the grant
//! never leaves the lock held by nobody; a cancelled token fails later waits without a request;
//! a latch wait and a semaphore wait are cancellable the same way.

mod client_support;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{CancelToken, Error};
use rlock_tests::{info_int, margin, redis, rlock_stat, wait_until, without_module, Server};

/// Waits on the server: requests queued in the client's sessions (module); over Redisson's
/// protocol, channels subscribed (one per object waited on).
fn queued(c: &mut redis::Connection) -> i64 {
    if without_module() {
        let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").query(c).unwrap();
        return channels.len() as i64;
    }
    rlock_stat(c, "session_requests")
}

/// The command an acquire sends: the module's, or Redisson's script by its SHA1.
fn acquire_command() -> &'static str {
    if without_module() {
        "evalsha"
    } else {
        "rlock.acquire"
    }
}

#[test]
fn a_thread_blocked_in_lock_is_cancelled_from_another_thread() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("cancel:lock");
    lock.lock().unwrap();

    let token = CancelToken::new();
    let waiter = {
        let (l, t) = (lock.clone(), token.clone());
        std::thread::spawn(move || {
            let r = t.run(|| l.lock());
            (r, Instant::now())
        })
    };
    wait_until(Duration::from_secs(5), "the waiter is queued", || {
        waiters(&mut c, "cancel:lock") == 1
    });
    let cancelled_at = Instant::now();
    token.cancel();
    let (r, returned_at) = waiter.join().unwrap();
    match r {
        Err(Error::Cancelled { name }) => assert_eq!(name, "cancel:lock"),
        other => panic!("expected Cancelled, got {other:?}"),
    }
    let took = returned_at - cancelled_at;
    assert!(
        // A withdrawal round trip and two thread wake-ups (the wait itself has no end).
        took <= margin(Duration::from_millis(500)),
        "returned {took:?} after the cancel"
    );
    assert_no_waiters(&mut c, "cancel:lock");
    assert_no_wait_left(&mut c);
    assert_eq!(
        Error::Cancelled { name: "k".into() }.to_string(),
        "the wait for 'k' was cancelled; nothing was acquired"
    );

    // The holder's release hands it to nobody: the cancelled waiter left nothing behind.
    lock.unlock().unwrap();
    assert!(!exists(&mut c, "cancel:lock"));

    // A cancelled token fails a later wait at once, without a request; one that does not wait
    // is not affected.
    let before = queued(&mut c);
    let acquires = calls(&mut c, acquire_command());
    let other = client.lock("cancel:other");
    let t0 = Instant::now();
    let r = token.run(|| other.try_lock_for(Duration::from_secs(5)));
    assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
    assert!(t0.elapsed() < margin(Duration::from_millis(250)));
    assert_eq!(calls(&mut c, acquire_command()), acquires, "nothing sent");
    assert_eq!(queued(&mut c), before);
    assert!(
        token.run(|| other.try_lock()).unwrap(),
        "no wait, no cancel"
    );
    other.unlock().unwrap();
}

#[test]
fn a_cancel_racing_the_grant_never_leaves_the_lock_held_by_nobody() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("cancel:race");
    let (mut granted, mut cancelled) = (0, 0);
    for round in 0..40 {
        lock.lock().unwrap();
        let token = CancelToken::new();
        let waiter = {
            let (l, t) = (lock.clone(), token.clone());
            std::thread::spawn(move || {
                let r = t.run(|| l.lock());
                // A granted wait is this thread's: it must hold the lock.
                if r.is_ok() {
                    assert!(l.is_held_by_current_thread().unwrap());
                    l.unlock().unwrap();
                }
                r
            })
        };
        // Queued in the session, past the first 50 ms in which its connection is parked (a
        // grant then is the acquire's reply): the grant comes through the session's listener,
        // the one blocked client left.
        wait_until(Duration::from_secs(5), "the waiter is queued", || {
            // Over Redisson's protocol a wait blocks no connection: it is subscribed.
            waiters(&mut c, "cancel:race") == 1
                && (rlock_tests::without_module()
                    || info_int(&mut c, "clients", "blocked_clients") == 1)
        });
        // Release and cancel at the same moment from two threads, one or the other a few
        // microseconds ahead as the round goes.
        let go = Arc::new(Barrier::new(2));
        let canceller = {
            let go = go.clone();
            std::thread::spawn(move || {
                go.wait();
                spin(Duration::from_micros(round % 4 * 50));
                token.cancel();
            })
        };
        go.wait();
        spin(Duration::from_micros((round + 2) % 4 * 50));
        lock.unlock().unwrap();
        canceller.join().unwrap();
        match waiter.join().unwrap() {
            Ok(()) => granted += 1,
            Err(Error::Cancelled { .. }) => cancelled += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        // Whatever won, nobody holds the lock now and nothing waits.
        assert!(
            !exists(&mut c, "cancel:race"),
            "round {round}: the lock is held by nobody that knows it: {:?}",
            hgetall(&mut c, "cancel:race")
        );
        assert_no_wait_left(&mut c);
    }
    println!("grant won {granted}, cancel won {cancelled}");
    assert_eq!(granted + cancelled, 40);
    assert_eq!(client.renewing_count(), 0, "no hold left for the watchdog");
}

#[test]
fn latch_and_semaphore_waits_are_cancellable() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let latch = client.count_down_latch("cancel:latch");
    latch.try_set_count(1).unwrap();
    let sem = client.semaphore("cancel:sem");
    let token = CancelToken::new();
    let (l, sm, t) = (latch.clone(), sem.clone(), token.clone());
    let waiter = std::thread::spawn(move || {
        let w = std::thread::spawn({
            let t = t.clone();
            move || t.run(|| l.wait())
        });
        let a = t.run(|| sm.acquire());
        (w.join().unwrap(), a)
    });
    wait_until(Duration::from_secs(5), "both waits are queued", || {
        queued(&mut c) == 2
    });
    token.cancel();
    let (w, a) = waiter.join().unwrap();
    assert!(
        matches!(w, Err(Error::Cancelled { ref name }) if name == "cancel:latch"),
        "{w:?}"
    );
    assert!(
        matches!(a, Err(Error::Cancelled { ref name }) if name == "cancel:sem"),
        "{a:?}"
    );
    assert_no_wait_left(&mut c);
    // The permit released now is not taken by the withdrawn wait.
    sem.release().unwrap();
    assert_eq!(sem.available_permits().unwrap(), 1);
}

/// Busy-wait `d` (a sleep would be rounded up to the scheduler's tick).
fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn hgetall(c: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    redis::cmd("HGETALL").arg(key).query(c).unwrap()
}

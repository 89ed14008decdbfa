//! Redisson 4.x's semaphore methods in the rlock client, against real servers, in both
//! protocols (`RLOCK_CLIENT_PROTOCOL`): `Semaphore::try_set_permits_with_ttl` and
//! `release_if_exists`; `PermitExpirableSemaphore::permits`, `set_permits`, `lease_time` and
//! permits without a lease. Each is checked against Redisson's own scripts on the same keys,
//! both ways, and for the waiters it must wake.

mod client_support;

use std::time::Duration;

use client_support::{calls, client, runtime, subscribers};
use rlock_client::{Error, PermitId};
use rlock_tests::redisson::semaphore as java;
use rlock_tests::*;

fn count(c: &mut redis::Connection, key: &str) -> i64 {
    string(c, &cmd!("GET", key)).parse().unwrap()
}

/// Waiters on a semaphore: queued in the module (`RSEM.INFO`'s `waiters`), or subscribed to
/// its channel over Redisson's protocol.
fn sem_waiters(c: &mut redis::Connection, key: &str) -> i64 {
    if without_module() {
        return subscribers(c, &prefix_name("redisson_sc", key));
    }
    let info = raw(c, &cmd!("RSEM.INFO", key));
    let Value::Array(flat) = info else {
        panic!("RSEM.INFO: {info:?}")
    };
    let at = flat
        .iter()
        .position(|v| text(v).as_deref() == Some("waiters"))
        .expect("waiters");
    match flat[at + 1] {
        Value::Int(n) => n,
        ref other => panic!("waiters: {other:?}"),
    }
}

/// A thread that waits for one plain permit of `name` (at most 5 s): whether it got it.
fn plain_waiter(s: &Server, name: &'static str) -> std::thread::JoinHandle<bool> {
    let client = client(s);
    let mut c = s.conn();
    let t = std::thread::spawn(move || {
        client
            .semaphore(name)
            .try_acquire_for(Duration::from_secs(5))
            .unwrap()
    });
    wait_until(margin(Duration::from_secs(5)), "the waiter waits", || {
        sem_waiters(&mut c, name) == 1
    });
    t
}

#[test]
fn try_set_permits_with_ttl_sets_an_absent_count_that_expires() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.semaphore("ttl");
    assert!(sem
        .try_set_permits_with_ttl(3, Duration::from_millis(800))
        .unwrap());
    assert_eq!(count(&mut c, "ttl"), 3, "Redisson's layout: a string count");
    let ttl = pttl(&mut c, "ttl");
    assert!(ttl > 0 && ttl <= 800, "PTTL {ttl}");
    assert!(
        !sem.try_set_permits_with_ttl(9, Duration::from_secs(60))
            .unwrap(),
        "only when absent"
    );
    assert!(!sem.try_set_permits(9).unwrap());
    assert!(pttl(&mut c, "ttl") <= 800, "the existing TTL is left alone");
    assert!(sem.try_acquire().unwrap());
    wait_until(margin(Duration::from_secs(2)), "the count expired", || {
        !exists(&mut c, "ttl")
    });
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert!(sem.try_set_permits(1).unwrap(), "absent again");
    assert_eq!(pttl(&mut c, "ttl"), -1);
    assert!(matches!(
        sem.try_set_permits_with_ttl(1, Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));

    // Async, and a waiter on the absent semaphore gets the permits at once (the module serves
    // its queue; over Redisson's protocol the script's publish wakes it).
    let waiter = plain_waiter(&s, "ttl-wake");
    let rt = runtime(1);
    let set = rt.block_on(
        client
            .async_semaphore("ttl-wake")
            .try_set_permits_with_ttl(1, Duration::from_secs(30)),
    );
    assert!(set.unwrap());
    assert!(waiter.join().unwrap(), "the waiter got the permit");
    assert_eq!(count(&mut c, "ttl-wake"), 0);
    if !without_module() {
        // With the module, RSEM.TRYSETPERMITS ... PX: no script (a user without EVAL can).
        assert_eq!(calls(&mut c, "eval") + calls(&mut c, "evalsha"), 0);
        assert_eq!(calls(&mut c, "rsem.trysetpermits"), 5);
    }
}

#[test]
fn try_set_permits_with_ttl_is_redissons_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    // Redisson's script sets, the client reads and takes.
    assert_eq!(java::try_set_permits_ttl(&mut c, "from-java", 2, 5000), 1);
    let sem = client.semaphore("from-java");
    assert!(!sem
        .try_set_permits_with_ttl(7, Duration::from_secs(1))
        .unwrap());
    assert_eq!(sem.available_permits().unwrap(), 2);
    assert!(sem.try_acquire_many(2).unwrap());
    // The client sets, Redisson's scripts read and take.
    let mine = client.semaphore("from-rust");
    assert!(mine
        .try_set_permits_with_ttl(2, Duration::from_secs(5))
        .unwrap());
    assert_eq!(java::try_set_permits_ttl(&mut c, "from-rust", 9, 100), 0);
    let ttl = pttl(&mut c, "from-rust");
    assert!(ttl > 4000 && ttl <= 5000, "PTTL {ttl}");
    assert_eq!(java::try_acquire(&mut c, "from-rust", 2), 1);
    assert_eq!(count(&mut c, "from-rust"), 0);
}

#[test]
fn release_if_exists_gives_back_only_to_a_semaphore_there() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.semaphore("maybe");
    assert!(!sem.release_if_exists(2).unwrap(), "absent: nothing");
    assert!(!exists(&mut c, "maybe"), "and nothing created");
    assert!(!sem.release_if_exists(0).unwrap(), "zero permits: false");
    assert!(sem.try_set_permits(0).unwrap());
    assert!(sem.release_if_exists(2).unwrap());
    assert_eq!(count(&mut c, "maybe"), 2);
    // Redisson's script on the client's semaphore, and the client on an expired one.
    assert_eq!(java::release_if_exists(&mut c, "maybe", 1), 1);
    assert_eq!(sem.available_permits().unwrap(), 3);
    assert_eq!(java::release_if_exists(&mut c, "absent", 1), 0);
    assert!(sem
        .try_set_permits_with_ttl(0, Duration::from_millis(100))
        .is_ok_and(|set| !set));
    assert!(client
        .semaphore("short")
        .try_set_permits_with_ttl(0, Duration::from_millis(100))
        .unwrap());
    wait_until(margin(Duration::from_secs(2)), "expired", || {
        !exists(&mut c, "short")
    });
    assert!(!client.semaphore("short").release_if_exists(1).unwrap());
    assert!(!exists(&mut c, "short"), "an expired semaphore stays gone");

    // A waiter gets what it gives back, sync and async.
    assert!(client.semaphore("wake").try_set_permits(0).unwrap());
    let waiter = plain_waiter(&s, "wake");
    let rt = runtime(1);
    assert!(rt
        .block_on(client.async_semaphore("wake").release_if_exists(1))
        .unwrap());
    assert!(waiter.join().unwrap(), "the waiter got the permit");
    assert_eq!(count(&mut c, "wake"), 0);
}

#[test]
fn permits_and_set_permits_count_leased_ones_too() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("total");
    assert_eq!(sem.permits().unwrap(), 0, "absent");
    assert!(sem.try_set_permits(5).unwrap());
    let a = sem.acquire(Duration::from_secs(60)).unwrap();
    let _b = sem.acquire(Duration::from_secs(60)).unwrap();
    assert_eq!(sem.permits().unwrap(), 5);
    assert_eq!(sem.available_permits().unwrap(), 3);
    assert_eq!(java::permits(&mut c, "total"), 5, "Redisson reads the same");

    sem.set_permits(8).unwrap();
    assert_eq!(sem.permits().unwrap(), 8);
    assert_eq!(sem.available_permits().unwrap(), 6);
    assert_eq!(
        sem.acquired_permits().unwrap(),
        2,
        "leased ones stay leased"
    );
    sem.set_permits(1).unwrap();
    assert_eq!(count(&mut c, "total"), -1, "the count may go negative");
    assert_eq!(sem.permits().unwrap(), 1);
    sem.release(a).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 0);
    sem.set_permits(1).unwrap();
    assert_eq!(count(&mut c, "total"), 0, "already 1: nothing moves");

    // Redisson's setPermits read by the client, and an absent semaphore set.
    java::set_permits(&mut c, "total", 4);
    assert_eq!(sem.permits().unwrap(), 4);
    let fresh = client.permit_expirable_semaphore("fresh");
    fresh.set_permits(3).unwrap();
    assert_eq!(count(&mut c, "fresh"), 3);
    assert_eq!(java::permits(&mut c, "fresh"), 3);

    // Async, and a waiter for a leased permit gets one when the total grows.
    let asem = client.async_permit_expirable_semaphore("grow");
    let rt = runtime(1);
    rt.block_on(asem.set_permits(0)).unwrap();
    assert_eq!(rt.block_on(asem.permits()).unwrap(), 0);
    let waiter = {
        let sem = client.permit_expirable_semaphore("grow");
        std::thread::spawn(move || {
            sem.try_acquire_for(Duration::from_secs(5), Duration::from_secs(60))
                .unwrap()
        })
    };
    wait_until(margin(Duration::from_secs(5)), "the waiter waits", || {
        sem_waiters(&mut c, "grow") == 1
    });
    rt.block_on(asem.set_permits(1)).unwrap();
    let id = waiter.join().unwrap().expect("granted when the total grew");
    assert_eq!(rt.block_on(asem.permits()).unwrap(), 1);
    assert_eq!(rt.block_on(asem.acquired_permits()).unwrap(), 1);
    rt.block_on(asem.release(id)).unwrap();
}

#[test]
fn lease_time_tells_the_time_left_of_a_permit() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("leases");
    assert!(sem.try_set_permits(3).unwrap());
    let id = sem.acquire(Duration::from_secs(10)).unwrap();
    let left = sem.lease_time(id).unwrap().expect("a lease");
    assert!(
        left > Duration::from_secs(9) && left <= Duration::from_secs(10),
        "{left:?}"
    );
    let java_left = java::lease_time(&mut c, "leases", id.as_bytes());
    assert!(
        java_left > 9000 && java_left <= 10_000,
        "Redisson: {java_left}"
    );
    assert!(sem.update_lease_time(id, Duration::from_secs(100)).unwrap());
    let left = sem.lease_time(id).unwrap().unwrap();
    assert!(left > Duration::from_secs(99), "{left:?}");

    // Redisson's permits: one with a lease, one without an end.
    let (reply, ids) = java::lease(&mut c, "leases", 1, Some(5000));
    assert_eq!(text(&reply).as_deref(), Some("OK"));
    let leased: PermitId = java::hex(&ids[0]).parse().unwrap();
    let left = sem.lease_time(leased).unwrap().unwrap();
    assert!(left > Duration::from_secs(4) && left <= Duration::from_secs(5));
    let (reply, ids) = java::lease(&mut c, "leases", 1, None);
    assert_eq!(text(&reply).as_deref(), Some("OK"));
    let endless: PermitId = java::hex(&ids[0]).parse().unwrap();
    assert_eq!(sem.lease_time(endless).unwrap(), None, "no end");

    // Released, ended, never leased: Redisson's words.
    sem.release(id).unwrap();
    let e = sem.lease_time(id).unwrap_err();
    assert!(
        matches!(&e, Error::PermitNotLeased { message, .. } if message.contains("has already been released")),
        "{e}"
    );
    let short = sem.acquire(Duration::from_millis(50)).unwrap();
    std::thread::sleep(Duration::from_millis(120));
    assert!(matches!(
        sem.lease_time(short),
        Err(Error::PermitNotLeased { .. })
    ));
    assert!(matches!(
        sem.lease_time(PermitId::from_bytes([7; 16])),
        Err(Error::PermitNotLeased { .. })
    ));
    let rt = runtime(1);
    let asem = client.async_permit_expirable_semaphore("leases");
    assert!(rt.block_on(asem.lease_time(leased)).unwrap().is_some());
}

#[test]
fn a_permit_without_a_lease_is_redissons_permanent_permit() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("forever");
    assert!(sem.try_set_permits(1).unwrap());
    let id = sem.acquire_without_lease().unwrap();
    let score = string(
        &mut c,
        &cmd!(
            "ZSCORE",
            java::timeouts("forever"),
            id.as_bytes().as_slice()
        ),
    );
    assert_eq!(score, java::PERMANENT.to_string(), "Redisson's score");
    assert_eq!(sem.lease_time(id).unwrap(), None);
    assert_eq!(java::lease_time(&mut c, "forever", id.as_bytes()), -1);
    assert_eq!(sem.try_acquire_without_lease().unwrap(), None, "none left");
    // A waiter gets the permit Redisson's script gives back.
    let waiter = {
        let sem = client.permit_expirable_semaphore("forever");
        std::thread::spawn(move || {
            sem.try_acquire_without_lease_for(Duration::from_secs(5))
                .unwrap()
        })
    };
    wait_until(margin(Duration::from_secs(5)), "the waiter waits", || {
        sem_waiters(&mut c, "forever") == 1
    });
    assert_eq!(java::try_release(&mut c, "forever", id.as_bytes()), 1);
    let next = waiter.join().unwrap().expect("granted");
    assert_eq!(sem.lease_time(next).unwrap(), None);
    // Async, and Redisson releases the client's permanent permit.
    let rt = runtime(1);
    let asem = client.async_permit_expirable_semaphore("forever");
    assert_eq!(rt.block_on(asem.try_acquire_without_lease()).unwrap(), None);
    assert_eq!(java::try_release(&mut c, "forever", next.as_bytes()), 1);
    let third = rt.block_on(asem.acquire_without_lease()).unwrap();
    rt.block_on(asem.release(third)).unwrap();
    assert_eq!(count(&mut c, "forever"), 1);
}

#[test]
fn with_the_module_a_user_without_eval_can_release_if_exists_and_set_permits() {
    if skip_without_module("RSEM.RELEASE ... XX and RSEM.SETPERMITS are the module's") {
        return;
    }
    let s = Server::start();
    let mut admin = s.conn();
    // Allowed the semaphore's commands and keys (and what the client itself sends to set up:
    // HELLO/CLIENT/PING and the module check), not EVAL.
    acl_user(
        &s,
        &mut admin,
        "sem",
        &[
            "~*", "&*", "+@all", "-eval", "-evalsha", "-script", "-fcall",
        ],
    );
    let url = format!("redis://sem:x@127.0.0.1:{}/", s.port);
    let client = rlock_client::Client::open(url).unwrap();
    let sem = client.permit_expirable_semaphore("acl");
    assert!(!client.semaphore("acl").release_if_exists(1).unwrap());
    sem.set_permits(2).unwrap();
    assert_eq!(count(&mut admin, "acl"), 2);
    assert!(client.semaphore("acl").release_if_exists(1).unwrap());
    assert_eq!(count(&mut admin, "acl"), 3);
    assert_eq!(calls(&mut admin, "eval") + calls(&mut admin, "evalsha"), 0);
}

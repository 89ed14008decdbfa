//! A Java service on Redisson and a Rust service on rlock share one semaphore: Redisson's exact
//! `RSemaphore` and `RPermitExpirableSemaphore` scripts (reference/redisson.md §2.6–2.7), sent
//! with EVAL as the Java client sends them, work on keys RSEM.* wrote and the other way round,
//! and what Redisson's scripts give back reaches rlock's queued waiters.

use rlock_tests::redisson::semaphore::{self as rs, channel, hex, timeouts, unhex};
use rlock_tests::*;
use std::time::{Duration, Instant};

/// How soon a change made by a script (a keyspace event) reaches a queued waiter.
const PROMPT: Duration = Duration::from_millis(100);
/// How soon a lease's end reaches a queued waiter, as the checks here can see it (the contract
/// targets 10 ms; the benchmark measures the p99; this leaves room for a loaded machine).
const PROMPT_MS: i64 = 150;

fn count(c: &mut redis::Connection, key: &str) -> i64 {
    match raw(c, &cmd!("GET", key)) {
        Value::Nil => 0,
        v => text(&v).unwrap().parse().unwrap(),
    }
}

fn score(c: &mut redis::Connection, key: &str, id: &[u8]) -> Option<i64> {
    let s: Option<f64> = redis::cmd("ZSCORE")
        .arg(timeouts(key))
        .arg(id)
        .query(c)
        .unwrap();
    s.map(|s| s as i64)
}

#[test]
fn a_permit_leased_by_either_side_is_released_by_the_other() {
    for name in ["sem", "{app}:sem"] {
        let s = Server::start();
        let mut c = s.conn();
        assert_eq!(rs::try_set_permits(&mut c, name, 4), 1);
        assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", name)), 4);

        // Redisson leases; rlock shows and releases the permit by its hex id.
        let (r, java) = rs::lease(&mut c, name, 2, Some(10_000));
        assert_eq!(text(&r).as_deref(), Some("OK"), "{name}: {r:?}");
        assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", name)), 2);
        let info = raw(&mut c, &cmd!("RSEM.INFO", name));
        let shown = format!("{info:?}");
        for id in &java {
            assert!(shown.contains(&hex(id)), "{name}: {} in {shown}", hex(id));
        }
        assert_eq!(
            int(&mut c, &cmd!("RSEM.RELEASE", name, "ID", hex(&java[0]))),
            3
        );
        assert_eq!(score(&mut c, name, &java[0]), None);

        // rlock leases; Redisson reads, re-leases and releases the permits by their bytes.
        let mine = permit_ids(&raw(
            &mut c,
            &cmd!("RSEM.ACQUIRE", name, "PERMITS", 3, "LEASE", 10_000),
        ));
        assert_eq!(count(&mut c, name), 0);
        let left = rs::lease_time(&mut c, name, &unhex(&mine[0]));
        assert_between("Redisson's getLeaseTime", left, 9_000, 10_000);
        assert_eq!(rs::update_lease(&mut c, name, &unhex(&mine[0]), 20_000), 1);
        assert_between(
            "re-leased",
            rs::lease_time(&mut c, name, &unhex(&mine[0])),
            19_000,
            20_000,
        );
        assert_eq!(rs::try_release(&mut c, name, &unhex(&mine[0])), 1);
        assert_eq!(count(&mut c, name), 1);
        let rest: Vec<Vec<u8>> = mine[1..].iter().map(|h| unhex(h)).collect();
        assert_eq!(rs::try_release_many(&mut c, name, &rest), 2);
        assert_eq!(count(&mut c, name), 3);
        // Released by Redisson: rlock refuses it too.
        let e = err(&mut c, &cmd!("RSEM.RELEASE", name, "ID", &mine[1]));
        assert!(e.starts_with("NOPERMIT"), "{e}");
        // And the Java permit still leased goes back through Redisson.
        assert_eq!(rs::try_release(&mut c, name, &java[1]), 1);
        assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", name)), 4);
        assert!(!exists(&mut c, &timeouts(name)));
    }
}

#[test]
fn redissons_plain_semaphore_scripts_share_the_count() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 5)), 1);
    assert_eq!(rs::try_set_permits(&mut c, "s", 9), 0);
    assert_eq!(rs::try_acquire(&mut c, "s", 3), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", "s")), 2);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2)), 1);
    assert_eq!(rs::try_acquire(&mut c, "s", 1), 0);
    rs::release(&mut c, "s", 3);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "s", "PERMITS", 2)), 5);
    rs::add_permits(&mut c, "s", -6);
    assert_eq!(int(&mut c, &cmd!("RSEM.AVAILABLE", "s")), -1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ADDPERMITS", "s", 11)), 10);
    assert_eq!(
        rs::drain(&mut c, "s"),
        Value::BulkString(b"10".to_vec()),
        "Redisson drains what RSEM counted"
    );
    assert_eq!(int(&mut c, &cmd!("RSEM.DRAIN", "s")), 0);
    // Redisson's addPermits on a semaphore RSEM created.
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "t")), 1);
    rs::add_permits(&mut c, "t", 2);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "t", "PERMITS", 3)), 1);
}

#[test]
fn redisson_releases_hand_permits_to_rlocks_queued_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 0)), 1);
    let first = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    let second = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "LEASE", 5_000, "BLOCK", 0));
    wait_blocked(&mut c, 2);

    // RSemaphore.release(2): the head's two permits.
    let released = Instant::now();
    rs::release(&mut c, "s", 2);
    assert_eq!(first.reply_within(PROMPT), Value::Int(1));
    assert!(released.elapsed() <= PROMPT);
    assert_eq!(count(&mut c, "s"), 0);

    // A Java permit released by RPermitExpirableSemaphore.tryRelease: the next waiter's.
    assert_eq!(rs::try_set_permits(&mut c, "other", 1), 1);
    let (r, java) = rs::lease(&mut c, "s", 1, Some(60_000));
    assert_eq!(r, Value::Nil, "no permit free for Redisson either: {r:?}");
    assert!(java.len() == 1);
    rs::release(&mut c, "s", 1);
    let got = permit_ids(&second.reply_within(PROMPT));
    assert_eq!(got.len(), 1);
    assert!(score(&mut c, "s", &unhex(&got[0])).is_some());
    assert_eq!(count(&mut c, "s"), 0);
}

#[test]
fn a_permit_redisson_leased_goes_to_rlocks_waiter_when_its_lease_ends() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(rs::try_set_permits(&mut c, "s", 1), 1);
    // Long enough for the waiter below to queue first on a loaded machine.
    let (r, java) = rs::lease(&mut c, "s", 1, Some(1_000));
    assert_eq!(text(&r).as_deref(), Some("OK"));
    let end = score(&mut c, "s", &java[0]).unwrap();
    // Redisson's own waiter would be told to come back at that time.
    let (r, _) = rs::lease(&mut c, "s", 1, Some(1_000));
    assert_eq!(text(&r), Some(format!(":{end}")));

    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(w.reply(), Value::Int(1));
    let late = rs::now_ms() - end;
    assert_between(
        "ms from the Java lease's end to the grant",
        late,
        0,
        PROMPT_MS,
    );
    assert_eq!(count(&mut c, "s"), 0);
    assert!(
        !exists(&mut c, &timeouts("s")),
        "the Java permit was reclaimed"
    );
    // The Java holder finds its permit expired (Redisson's tryRelease replies 0).
    assert_eq!(rs::try_release(&mut c, "s", &java[0]), 0);
}

#[test]
fn redissons_update_lease_time_moves_rlocks_timer() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(rs::try_set_permits(&mut c, "s", 1), 1);
    let (_, java) = rs::lease(&mut c, "s", 1, Some(60_000));
    let w = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    // Only the lease set changes (ZADD): the semaphore's waiter is looked at again, and its
    // timer now fires at the new, much earlier end.
    assert_eq!(rs::update_lease(&mut c, "s", &java[0], 150), 1);
    let end = score(&mut c, "s", &java[0]).unwrap();
    assert_eq!(w.reply_within(Duration::from_secs(5)), Value::Int(1));
    assert_between(
        "ms after the re-leased end",
        rs::now_ms() - end,
        0,
        PROMPT_MS,
    );
}

#[test]
fn redissons_reclaim_and_rlock_agree_on_expired_leases() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_sc*");
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "s", 3)), 1);
    let mine = permit_ids(&raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "s", "PERMITS", 2, "LEASE", 30),
    ));
    std::thread::sleep(Duration::from_millis(60));
    sub.drain(&mut c);
    // Redisson's availablePermits reclaims rlock's expired leases (and publishes, as it does).
    assert_eq!(rs::available(&mut c, "s"), 3);
    assert!(!exists(&mut c, &timeouts("s")));
    assert_eq!(sub.drain(&mut c), [(channel("s"), "3".to_string())]);
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", &mine[0]));
    assert!(e.starts_with("NOPERMIT"), "{e}");
    // Redisson's tryRelease of an expired Java permit returns it but replies 0; rlock's
    // RELEASE ID refuses it and its next command returns it.
    let (_, java) = rs::lease(&mut c, "s", 1, Some(30));
    std::thread::sleep(Duration::from_millis(60));
    let e = err(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", hex(&java[0])));
    assert!(e.starts_with("NOPERMIT"), "{e}");
    assert_eq!(count(&mut c, "s"), 3);
}

#[test]
fn redissons_permanent_permits_never_expire_and_release_by_id() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(rs::try_set_permits(&mut c, "s", 2), 1);
    let (r, java) = rs::lease(&mut c, "s", 1, None);
    assert_eq!(text(&r).as_deref(), Some("OK"));
    assert_eq!(score(&mut c, "s", &java[0]), Some(rs::PERMANENT));
    let Value::Array(info) = raw(&mut c, &cmd!("RSEM.INFO", "s")) else {
        panic!()
    };
    assert_eq!(
        info[3],
        Value::Array(vec![Value::Array(vec![
            Value::BulkString(hex(&java[0]).into_bytes()),
            Value::Int(-1)
        ])]),
        "a permanent lease shows -1"
    );
    // A waiter behind it is not woken by a permanent permit: it waits until its deadline.
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "s")), 1);
    nil(&mut c, &cmd!("RSEM.ACQUIRE", "s", "BLOCK", 100));
    assert_eq!(
        int(&mut c, &cmd!("RSEM.RELEASE", "s", "ID", hex(&java[0]))),
        1
    );
}

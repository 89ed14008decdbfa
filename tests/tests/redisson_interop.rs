//! A Java service on Redisson and a Rust service on rlock share one lock: Redisson's exact Lua
//! scripts (reference/redisson.md §2.1, §2.10), sent with EVAL, work on keys RLOCK.* wrote and
//! the other way round.

use rlock_tests::*;
use std::time::Duration;

#[test]
fn redisson_acquire_reenters_a_lock_taken_with_rlock() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-a:1", 5_000)),
        1
    );
    // Same owner: Redisson's script re-enters (nil = acquired) and resets the lease.
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-a:1", 30_000),
        Value::Nil
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-a:1", 2));
    assert_between("PTTL", pttl(&mut c, "lk"), 29_000, 30_000);
    // Another owner: Redisson's script sees the lock held and returns its PTTL.
    match redisson::acquire(&mut c, "lk", "uuid-b:1", 30_000) {
        Value::Int(ttl) => assert_between("Redisson sees the holder's PTTL", ttl, 29_000, 30_000),
        other => panic!("Redisson acquire on a held lock: {other:?}"),
    }
    // Back to rlock: two holds to give back.
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-a:1")), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-a:1")), 0);
    assert!(!exists(&mut c, "lk"));
}

#[test]
fn redisson_unlock_releases_a_lock_taken_with_rlock() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel*");
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-a:1", 10_000)),
        1
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-a:1", 10_000)),
        2
    );
    // Not the holder: nil (Redisson throws IllegalMonitorStateException).
    assert_eq!(
        redisson::unlock(&mut c, "lk", "uuid-b:1", 10_000),
        Value::Nil
    );
    // Partial: 0, still held.
    assert_eq!(
        redisson::unlock(&mut c, "lk", "uuid-a:1", 10_000),
        Value::Int(0)
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-a:1", 1));
    // Full: 1, deleted, published by the script.
    assert_eq!(
        redisson::unlock(&mut c, "lk", "uuid-a:1", 10_000),
        Value::Int(1)
    );
    assert!(!exists(&mut c, "lk"));
    assert_eq!(sub.drain(&mut c), [(lock_channel("lk"), "0".to_string())]);
    // The lock is usable by rlock afterwards.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-b:1", 10_000)),
        1
    );
}

#[test]
fn rlock_reenters_and_releases_a_lock_taken_with_redisson() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel*");
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-j:42", 10_000),
        Value::Nil
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-j:42", 1));

    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-r:1", 10_000));
    let e = err(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-r:1"));
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RENEW", "lk", "uuid-r:1", 50_000)),
        0
    );

    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-j:42", 20_000)),
        2
    );
    assert_between("PTTL", pttl(&mut c, "lk"), 19_000, 20_000);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RENEW", "lk", "uuid-j:42", 30_000)),
        1
    );
    let info = lock_info(&mut c, "lk");
    assert_eq!((info.owner.as_deref(), info.holds), (Some("uuid-j:42"), 2));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-j:42")), 1);
    assert!(
        sub.drain(&mut c).is_empty(),
        "no publish on a partial release"
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-j:42")), 0);
    assert!(!exists(&mut c, "lk"));
    assert_eq!(sub.drain(&mut c), [(lock_channel("lk"), "0".to_string())]);
    // And Redisson can take it again.
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-j:43", 10_000),
        Value::Nil
    );
}

#[test]
fn rlock_force_release_and_redisson_force_unlock_on_each_others_locks() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Nil
    );
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert!(!exists(&mut c, "lk"));
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "uuid-r:1", 10_000)),
        1
    );
    assert_eq!(redisson::force_unlock(&mut c, "lk"), Value::Int(1));
    assert!(!exists(&mut c, "lk"));
}

#[test]
fn redisson_unlock_hands_the_lock_to_a_parked_rlock_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Nil
    );
    assert_eq!(
        redisson::acquire(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Nil
    );
    let w = park(&s, &mut c, "lk", "uuid-r:9", 7_000, &[], 1);
    // A partial Redisson unlock does not free the lock: the waiter keeps waiting.
    assert_eq!(
        redisson::unlock(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Int(0)
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-j:1", 1));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 1);
    // The full unlock deletes the key inside Lua; the module hands it to the waiter.
    assert_eq!(
        redisson::unlock(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Int(1)
    );
    assert_eq!(w.reply_int(), 1);
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-r:9", 1));
    assert_between("waiter's lease", pttl(&mut c, "lk"), 6_500, 7_000);
    // The Redisson side now sees it held by the rlock owner.
    assert!(matches!(
        redisson::acquire(&mut c, "lk", "uuid-j:1", 10_000),
        Value::Int(_)
    ));
}

#[test]
fn redisson_fenced_lock_and_rlock_fence_share_the_token_counter() {
    let s = Server::start();
    let mut c = s.conn();
    let (ttl, t1) = redisson::fenced_acquire(&mut c, "lk", "uuid-j:1", 10_000);
    assert_eq!(ttl, -1, "acquired");
    // Same owner re-enters through rlock with FENCE: the token continues Redisson's counter.
    let t2 = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "lk", "uuid-j:1", 10_000, "FENCE"),
    );
    assert!(t2 > t1, "token {t2} after Redisson's {t1}");
    assert_eq!(
        string(&mut c, &cmd!("GET", token_key("lk"))),
        t2.to_string()
    );
    assert_eq!(hgetall(&mut c, "lk"), holder("uuid-j:1", 2));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-j:1")), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "lk", "uuid-j:1")), 0);
    // Redisson's fenced acquire after rlock's: strictly greater again.
    let (ttl, t3) = redisson::fenced_acquire(&mut c, "lk", "uuid-j:2", 10_000);
    assert_eq!(ttl, -1);
    assert!(t3 > t2, "token {t3} after rlock's {t2}");
    // Brace names use Redisson's `prefix:name` form.
    let (_, b1) = redisson::fenced_acquire(&mut c, "{app}:x", "uuid-j:1", 10_000);
    assert!(exists(&mut c, "redisson_lock_token:{app}:x"));
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "{app}:x", "uuid-j:1")),
        0
    );
    let b2 = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "{app}:x", "uuid-r:1", 10_000, "FENCE"),
    );
    assert!(b2 > b1);
    assert_eq!(
        string(&mut c, &cmd!("GET", "redisson_lock_token:{app}:x")),
        b2.to_string()
    );
}

/// A Redisson waiter sees a lease rlock took as one Redisson took: the acquire script answers
/// the lease left, nothing is published when the lease runs out (Redisson publishes on unlock
/// only, so its waiters wake by that TTL), and the script takes the lock once the lease has
/// passed. (A waiter that comes back in the lease's last millisecond reads `PTTL` 0: Redis' own
/// rule, see docs/operations.md, "A Redisson client takes a lock a second after its lease
/// ended".)
#[test]
fn a_lease_that_runs_out_publishes_nothing_and_redisson_takes_the_lock_after_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_lock__channel*");
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "r:1", 300)), 1);
    match redisson::acquire(&mut c, "lk", "j:1", 30_000) {
        Value::Int(ttl) => assert_between("Redisson sees the lease left", ttl, 1, 300),
        other => panic!("Redisson acquire on a held lock: {other:?}"),
    }
    wait_until(margin(Duration::from_secs(5)), "the lease runs out", || {
        !exists(&mut c, "lk")
    });
    assert!(
        sub.drain(&mut c).is_empty(),
        "nothing published at the lease's end"
    );
    assert_eq!(redisson::acquire(&mut c, "lk", "j:1", 30_000), Value::Nil);
    assert_eq!(hgetall(&mut c, "lk"), holder("j:1", 1));
}

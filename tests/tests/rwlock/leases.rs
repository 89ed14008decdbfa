//! Per-hold leases: each read hold's lease is its own key's TTL, the hash's TTL is the longest
//! lease and is never shortened by an acquire, a release sets it to the longest hold left and
//! frees the lock at once when none is alive, RENEW's reply and TTL rules, and a crashed
//! reader's fields removed promptly when its last hold expires (while others keep reading).

use super::*;
use std::time::Instant;

#[test]
fn the_hash_ttl_is_the_longest_lease_and_acquires_never_shorten_it() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 20_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 5_000), Value::Int(1));
    assert_between(
        "a longer read lease stays",
        pttl(&mut c, "rw"),
        19_000,
        20_000,
    );
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 40_000), Value::Int(2));
    assert_between(
        "a longer one extends it",
        pttl(&mut c, "rw"),
        39_000,
        40_000,
    );
    // A read release, partial or not, sets the hash's TTL to the longest hold left: b's
    // 40 s hold goes, a's 20 s hold is now the longest (as Redisson's read unlock).
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(1));
    assert_between(
        "after a partial release",
        pttl(&mut c, "rw"),
        19_000,
        20_000,
    );
    assert_between(
        "b's first hold",
        pttl(&mut c, &rwlock_hold("rw", "b", 1)),
        4_000,
        5_000,
    );
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);

    // Write: re-entry with a shorter lease keeps the longer TTL (Redisson would add the two).
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 100), Value::Int(2));
    assert_between(
        "write re-entry never shortens",
        pttl(&mut c, "rw"),
        9_000,
        10_000,
    );
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 20_000), Value::Int(3));
    assert_between("nor adds: the max", pttl(&mut c, "rw"), 19_000, 20_000);
    // The downgrade's read hold has its own lease; the hash covers it.
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 30_000), Value::Int(1));
    assert_between(
        "hash covers the read hold",
        pttl(&mut c, "rw"),
        29_000,
        30_000,
    );
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 1_000), Value::Int(4));
    assert_between(
        "and a write re-entry keeps it",
        pttl(&mut c, "rw"),
        29_000,
        30_000,
    );
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(3));
    assert_between("partial write release", pttl(&mut c, "rw"), 29_000, 30_000);
}

/// Issue 22 (5): Redisson's read unlock recomputes the hash's TTL from the holds left.
#[test]
fn a_read_release_sets_the_hash_ttl_to_the_longest_hold_left() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "A", "READ", 3_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "B", "READ", 30_000), Value::Int(1));
    assert_between("B's lease", pttl(&mut c, "rw"), 29_000, 30_000);
    assert_eq!(release(&mut c, "rw", "B", "READ"), Value::Int(0));
    assert_between("A's lease, not B's", pttl(&mut c, "rw"), 2_000, 3_000);
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("A", "1")]));
}

/// Issue 22 (5): a release that leaves only expired holds frees the lock in the same step
/// (deleted, `0` published, the queued writer granted), as Redisson's read unlock deletes the
/// lock when no hold key is alive; before, the writer waited for the released hold's lease.
#[test]
fn a_release_that_leaves_no_live_hold_frees_the_lock_and_grants_the_writer_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 100), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 3_000), Value::Int(2));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 30_000, 1);
    let first = rwlock_hold("rw", "r", 1);
    wait_until(Duration::from_secs(2), "r's 100 ms hold expires", || {
        !exists(&mut c, &first)
    });
    assert_eq!(
        release(&mut c, "rw", "r", "READ"),
        Value::Int(0),
        "r's remaining hold has expired: nothing is left to hold"
    );
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")]),
        "the writer holds it right after the release reply"
    );
    assert_eq!(w.reply_within(*PROMPT), Value::Int(1));
    assert!(!exists(&mut c, &rwlock_hold("rw", "r", 2)));
    assert_eq!(
        sub.drain(&mut c),
        vec![("redisson_rwlock:{rw}".to_string(), "0".to_string())]
    );
}

#[test]
fn renew_replies_with_the_holds_renewed_and_sets_the_longest_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let renew = |c: &mut redis::Connection, owner: &str, lease: i64| {
        int(c, &cmd!("RRWLOCK.RENEW", "rw", owner, lease))
    };
    assert_eq!(renew(&mut c, "a", 1_000), 0, "absent key");
    assert_eq!(dbsize(&mut c), 0, "and nothing created");

    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 20_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 5_000), Value::Int(1));
    assert_eq!(renew(&mut c, "nobody", 60_000), 0);
    assert_between("untouched", pttl(&mut c, "rw"), 19_000, 20_000);

    // Every read hold of a gets the lease; the hash gets the longest of all holds, which may
    // be shorter than before.
    assert_eq!(renew(&mut c, "a", 3_000), 2);
    for k in [1, 2] {
        assert_between(
            "a's holds",
            pttl(&mut c, &rwlock_hold("rw", "a", k)),
            2_900,
            3_000,
        );
    }
    assert_between("hash = b's longer lease", pttl(&mut c, "rw"), 4_000, 5_000);
    assert_eq!(renew(&mut c, "b", 1_000), 1);
    assert_between("hash = a's longer lease", pttl(&mut c, "rw"), 2_800, 3_000);
    assert_eq!(renew(&mut c, "b", 50_000), 1);
    assert_between("hash = b's", pttl(&mut c, "rw"), 49_000, 50_000);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);

    // A writer: its write holds count, and the hash gets at least the lease.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 30_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 30_000), Value::Int(2));
    assert_eq!(renew(&mut c, "w", 500), 2);
    assert_between("writer's lease", pttl(&mut c, "rw"), 400, 500);
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 30_000), Value::Int(1));
    assert_eq!(
        renew(&mut c, "w", 8_000),
        3,
        "two write holds and one read hold"
    );
    assert_between(
        "the read hold",
        pttl(&mut c, &rwlock_hold("rw", "w", 1)),
        7_900,
        8_000,
    );
    assert_between("hash", pttl(&mut c, "rw"), 7_900, 8_000);
    assert_eq!(renew(&mut c, "other", 8_000), 0);
}

#[test]
fn renew_counts_only_read_holds_whose_lease_is_alive() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 100), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(2));
    let first = rwlock_hold("rw", "a", 1);
    wait_until(Duration::from_secs(2), "a's first hold expires", || {
        !exists(&mut c, &first)
    });
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "a", 5_000)), 1);
    assert!(
        !exists(&mut c, &first),
        "an expired hold is not brought back"
    );
    assert_between("hash", pttl(&mut c, "rw"), 4_900, 5_000);
}

/// Reader `b` (300 ms lease) and reader `dead` (one 150 ms hold) share the lock, with writer
/// `w` queued behind them when `writer` is given. `b` renews every 50 ms and `dead` never does.
/// Returns the writer, how long the command that set dead's 150 ms lease took to reply, and how
/// long after it was sent dead's field was seen gone (`None`: still there after 1 s).
fn crashed_reader(
    s: &Server,
    c: &mut redis::Connection,
    writer: bool,
) -> (Option<Pending>, Duration, Option<Duration>) {
    let (w, sent) = if writer {
        // Both read long while the writer queues (a loaded machine may take longer than the
        // short leases to show it blocked); then one pipeline sets dead's hold to 150 ms and
        // b's lease to 300 ms, the clock started before it.
        assert_eq!(acquire(c, "rw", "b", "READ", 30_000), Value::Int(1));
        assert_eq!(acquire(c, "rw", "dead", "READ", 30_000), Value::Int(1));
        let w = park_rw(s, c, "rw", "w", "WRITE", 5_000, 1);
        let sent = Instant::now();
        let renewed: (i64, i64) = redis::pipe()
            .cmd("RRWLOCK.RENEW")
            .arg("rw")
            .arg("dead")
            .arg(150)
            .cmd("RRWLOCK.RENEW")
            .arg("rw")
            .arg("b")
            .arg(300)
            .query(c)
            .unwrap();
        assert_eq!(renewed, (1, 1), "dead's and b's holds renewed");
        (Some(w), sent)
    } else {
        // Nobody to park: dead's own acquire sets its 150 ms lease.
        assert_eq!(acquire(c, "rw", "b", "READ", 300), Value::Int(1));
        let sent = Instant::now();
        assert_eq!(acquire(c, "rw", "dead", "READ", 150), Value::Int(1));
        (None, sent)
    };
    let replied = sent.elapsed();
    let mut renewed = Instant::now();
    let gone = loop {
        if !hgetall(c, "rw").contains_key("dead") {
            break Some(sent.elapsed());
        }
        if sent.elapsed() > Duration::from_secs(1) {
            break None;
        }
        if renewed.elapsed() >= Duration::from_millis(50) {
            assert_eq!(int(c, &cmd!("RRWLOCK.RENEW", "rw", "b", 300)), 1);
            renewed = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    (w, replied, gone)
}

/// dead's field went within [`PROMPT`] of its 150 ms lease's end, not before.
#[track_caller]
fn removed_promptly(replied: Duration, gone: Option<Duration>) {
    let gone = gone.expect("dead's field is removed while b keeps reading");
    eprintln!("dead's 150 ms hold: field removed {gone:?} after its lease was sent");
    assert!(
        gone >= Duration::from_millis(149),
        "removed after {gone:?}, before its 150 ms lease ran out"
    );
    assert!(
        gone <= Duration::from_millis(150) + replied + *PROMPT,
        "removed {gone:?} after its 150 ms lease started (prompt: {PROMPT:?})"
    );
}

#[test]
fn a_crashed_readers_field_is_removed_by_the_timer_while_a_writer_waits() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    let (w, replied, gone) = crashed_reader(&s, &mut c, true);
    removed_promptly(replied, gone);
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("b", "1")]));
    assert!(sub.drain(&mut c).is_empty(), "b still reads");
    assert_eq!(
        rw_info(&mut c, "rw").queue,
        [("w".to_string(), "write".to_string())]
    );
    // b's release frees it: published, and the writer granted in the same step.
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(w.unwrap().reply_int(), 1);
    assert_eq!(sub.drain(&mut c), [(rwlock_channel("rw"), "0".to_string())]);
    assert_eq!(keys(&mut c), ["rw"]);
}

/// Contract: "A reader field whose hold keys have all expired is removed by a timer within 10
/// ms of the last expiry", with or without waiters: a read hold's lease end is looked at even
/// when nobody waits.
#[test]
fn a_crashed_readers_field_is_removed_by_the_timer_without_waiters() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, replied, gone) = crashed_reader(&s, &mut c, false);
    removed_promptly(replied, gone);
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("b", "1")]));
}

#[test]
fn the_last_live_readers_release_frees_a_lock_whose_other_readers_expired() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    assert_eq!(acquire(&mut c, "rw", "dead", "READ", 100), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 30_000), Value::Int(1));
    let dead = rwlock_hold("rw", "dead", 1);
    wait_until(Duration::from_secs(2), "dead's hold expires", || {
        !exists(&mut c, &dead)
    });
    // As Redisson's read unlock does: no live hold is left, so the lock is deleted and `0`
    // published, whether or not dead's field was tidied away yet.
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(dbsize(&mut c), 0, "{:?}", fields(&mut c, "rw"));
    assert_eq!(sub.drain(&mut c), [(rwlock_channel("rw"), "0".to_string())]);
    // And a new writer gets it at once.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 1_000), Value::Int(1));
}

#[test]
fn a_writer_gets_the_lock_when_a_lone_readers_lease_expires() {
    let s = Server::start();
    let mut c = s.conn();
    let expired = rlock_stat(&mut c, "rwlock_grants_after_expiry");
    // Held long while the writer queues, then the lease set to 200 ms: the clock starts
    // before the renewal is sent, so the server's 200 ms lie inside what it measures.
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 30_000), Value::Int(1));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 5_000, 1);
    let renewed = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "r", 200)), 1);
    assert_eq!(w.reply_int(), 1);
    let took = renewed.elapsed();
    assert!(
        took >= Duration::from_millis(195) && took <= Duration::from_millis(200) + *PROMPT,
        "granted {took:?} after the read lease was set to 200 ms"
    );
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(
        keys(&mut c),
        ["rw"],
        "the reader's hold key expired with it"
    );
    assert_between("w's own lease", pttl(&mut c, "rw"), 4_500, 5_000);
    assert_eq!(
        rlock_stat(&mut c, "rwlock_grants_after_expiry") - expired,
        1
    );
}

#[test]
fn queued_readers_get_the_lock_together_when_the_writers_lease_expires() {
    let s = Server::start();
    let mut c = s.conn();
    // Held long while both readers queue (a loaded machine may take longer than 200 ms to park
    // two), then the writer's lease set to 200 ms, the clock started before the renewal.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 30_000), Value::Int(1));
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 5_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 5_000, 2);
    let acquired = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "w", 200)), 1);
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    assert!(acquired.elapsed() <= Duration::from_millis(200) + *PROMPT);
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "read"), ("r1", "1"), ("r2", "1")])
    );
}

#[test]
fn a_partial_release_leaves_the_hash_to_the_holds_left_and_it_frees_at_their_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    // Hold 1 with 150 ms, hold 2 with 30 s; releasing one drops hold 2 (the newest), and the
    // hash's TTL becomes hold 1's (before, it kept hold 2's 30 s): after 150 ms nothing holds
    // the lock, and the key is gone with it. Hold 1 is taken long while the writer queues (a
    // loaded machine may take longer than 150 ms to show it blocked), then one pipeline sets
    // it to 150 ms, takes hold 2 (a re-entry, which does not wait), releases one and reads
    // the hash's TTL, all before hold 1 can end.
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(1));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 5_000, 1);
    let sent = Instant::now();
    let (renewed, second, released, ttl): (i64, i64, i64, i64) = redis::pipe()
        .cmd("RRWLOCK.RENEW")
        .arg("rw")
        .arg("a")
        .arg(150)
        .cmd("RRWLOCK.ACQUIRE")
        .arg("rw")
        .arg("a")
        .arg("READ")
        .arg(30_000)
        .cmd("RRWLOCK.RELEASE")
        .arg("rw")
        .arg("a")
        .arg("READ")
        .cmd("PTTL")
        .arg("rw")
        .query(&mut c)
        .unwrap();
    assert_eq!((renewed, second, released), (1, 2, 1));
    assert_between("hash = hold 1's lease", ttl, 1, 150);
    assert_eq!(w.reply_int(), 1);
    assert!(
        sent.elapsed() <= Duration::from_millis(150) + *PROMPT,
        "granted {:?} after a's last hold started",
        sent.elapsed()
    );
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(
        sub.drain(&mut c),
        [],
        "an expiry publishes nothing (nor does Redisson's)"
    );
}

/// `grants_after_expiry` counts hand-offs because a holder's lease ran out. A reader's lease is
/// its hold key's TTL: when the tidy of expired readers frees the lock for a waiter, that is
/// such a hand-off.
#[test]
fn a_grant_freed_by_an_expired_read_hold_counts_as_a_grant_after_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    // Both holds long while the writer queues (a loaded machine may take longer than a short
    // lease to show it blocked); then both set to 100 ms and one released, leaving hold 1.
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(2));
    let expired = rlock_stat(&mut c, "rwlock_grants_after_expiry");
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 5_000, 1);
    let (renewed, released): (i64, i64) = redis::pipe()
        .cmd("RRWLOCK.RENEW")
        .arg("rw")
        .arg("a")
        .arg(100)
        .cmd("RRWLOCK.RELEASE")
        .arg("rw")
        .arg("a")
        .arg("READ")
        .query(&mut c)
        .unwrap();
    assert_eq!((renewed, released), (2, 1));
    assert_eq!(w.reply_int(), 1);
    assert_eq!(
        rlock_stat(&mut c, "rwlock_grants_after_expiry") - expired,
        1
    );
}

#[test]
fn a_renew_that_shortens_the_last_readers_lease_hands_off_at_the_new_expiry() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(acquire(&mut c, "rw", "r", "READ", 30_000), Value::Int(1));
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 5_000, 1);
    let shortened = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.RENEW", "rw", "r", 100)), 1);
    assert_eq!(w.reply_int(), 1);
    let took = shortened.elapsed();
    assert!(
        took <= Duration::from_millis(100) + *PROMPT,
        "hand-off {took:?} after a RENEW to 100 ms"
    );
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
}

#[test]
fn a_new_writer_clears_readers_whose_holds_all_expired_and_takes_the_lock() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock*");
    // A reader whose only hold key is gone before any timer looked (deleted here; a lease
    // that ran out while the upkeep timer was not yet due looks the same).
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 30_000), Value::Int(1));
    let hold = rwlock_hold("rw", "a", 1);
    assert_eq!(int(&mut c, &cmd!("DEL", &hold)), 1);
    assert!(exists(&mut c, "rw"), "the hash outlives its holds");
    // Without BLOCK and with nobody queued: the stale reader is cleared, the lock is free.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 5_000), Value::Int(1));
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_between("w's lease", pttl(&mut c, "rw"), 4_500, 5_000);
    assert_eq!(sub.drain(&mut c), [(rwlock_channel("rw"), "0".to_string())]);
}

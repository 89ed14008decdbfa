//! Sessions: lost holds.

use super::*;

/// How a watched hold is taken: by an acquire naming the session, or granted to a request
/// queued in it.
#[derive(Debug, Clone, Copy)]
enum Take {
    AtOnce,
    Granted,
}

/// Take `key` for `owner` in session `app` (listener `l`), with `lease_ms`.
fn take(
    c: &mut redis::Connection,
    l: &mut Listener,
    how: Take,
    key: &str,
    owner: &str,
    lease_ms: i64,
) {
    match how {
        Take::AtOnce => {
            let q = cmd!("RLOCK.ACQUIRE", key, owner, lease_ms, "SESSION", &l.name);
            assert_eq!(int(c, &q), 1);
        }
        Take::Granted => {
            acquire(c, key, "before", 60_000);
            queued(c, &queue_cmd(key, owner, lease_ms, &l.name, 100, 0));
            release(c, key, "before");
            let got = l.read_n(1);
            assert_eq!(got[0].kind, "granted");
            assert_eq!(l.read(), vec![], "acknowledged");
        }
    }
    assert_eq!(hgetall(c, key), holder(owner, 1));
}

#[test]
fn a_hold_ended_by_anything_but_its_owner_is_reported_lost_within_milliseconds() {
    type End = fn(&mut redis::Connection, &str);
    let ends: [(&str, End); 5] = [
        ("RLOCK.FORCERELEASE", |c, k| {
            assert_eq!(int(c, &cmd!("RLOCK.FORCERELEASE", k)), 1)
        }),
        ("DEL", |c, k| assert_eq!(int(c, &cmd!("DEL", k)), 1)),
        ("UNLINK", |c, k| assert_eq!(int(c, &cmd!("UNLINK", k)), 1)),
        ("FLUSHALL", |c, _| {
            assert_eq!(string(c, &cmd!("FLUSHALL")), "OK")
        }),
        ("Redisson force unlock", |c, k| {
            assert_eq!(redisson::force_unlock(c, k), Value::Int(1))
        }),
    ];
    for how in [Take::AtOnce, Take::Granted] {
        for (name, end) in ends {
            let s = Server::start();
            let mut c = s.conn();
            let mut l = Listener::open(&s, "app", 5000);
            take(&mut c, &mut l, how, "k", "o1", 60_000);
            let reader = l.park(&s, &mut c);
            let t0 = Instant::now();
            end(&mut c, "k");
            let (got, after) = parked_outcomes(reader, t0);
            println!(
                "{how:?} hold ended by {name}: lost outcome after {} us",
                after.as_micros()
            );
            assert_lost(&got, "k", "o1");
            assert!(after < Duration::from_millis(100), "{name}: {after:?}");
            assert_eq!(rlock_stat(&mut c, "holds_lost"), 1);
            assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);
        }
        // Lease expiry: reported when the lease ends, not at some later check.
        let s = Server::start();
        let mut c = s.conn();
        let mut l = Listener::open(&s, "app", 5000);
        let t0 = Instant::now();
        take(&mut c, &mut l, how, "k", "o1", 300);
        let reader = l.park(&s, &mut c);
        let (got, after) = parked_outcomes(reader, t0);
        println!(
            "{how:?} hold ended by its lease (300 ms): lost after {} ms",
            after.as_millis()
        );
        assert_lost(&got, "k", "o1");
        assert_between("ms until lost", after.as_millis() as i64, 299, 400);
    }
}

#[test]
fn a_read_write_hold_ended_by_force_release_is_reported_lost() {
    let (s, mut c, mut l) = start(5000);
    let read = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "r1",
        "READ",
        60_000,
        "SESSION",
        "app"
    );
    assert_eq!(int(&mut c, &read), 1);
    let reader = l.park(&s, &mut c);
    let t0 = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "read hold ended by RRWLOCK.FORCERELEASE: lost after {} us",
        after.as_micros()
    );
    assert_lost(&got, "rw", "r1");
    assert!(after < Duration::from_millis(100), "{after:?}");
    l.cursor = got[0].seq;

    // A write hold granted through the session.
    let held = cmd!("RRWLOCK.ACQUIRE", "rw", "other", "READ", 60_000);
    assert_eq!(int(&mut c, &held), 1);
    let w = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "w1",
        "WRITE",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        5,
        0
    );
    queued(&mut c, &w);
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "other", "READ")),
        0
    );
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(5))]);
    let reader = l.park(&s, &mut c);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_lost(&outcomes(&reader.reply()), "rw", "w1");
}

#[test]
fn the_owners_own_release_partial_release_and_renewal_are_not_losses() {
    let (_s, mut c, mut l) = start(5000);
    let take = cmd!("RLOCK.ACQUIRE", "k", "o1", 300, "SESSION", "app");
    assert_eq!(int(&mut c, &take), 1);
    // A re-entry is the same hold: watched once, lost once.
    assert_eq!(int(&mut c, &take), 2);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "holds"), 1);
    // Renewed past its first lease end (a loss check runs then and finds it held).
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "k", "o1", 60_000)), 1);
    let marker = cmd!("RLOCK.ACQUIRE", "m", "o2", 350, "SESSION", "app");
    assert_eq!(int(&mut c, &marker), 1);
    // The marker's lease ends after k's first one: when its loss arrives, k's check has run.
    let got = l.read_n(1);
    assert_lost(&got, "m", "o2");
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o1")),
        1,
        "partial release"
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o1")),
        0,
        "full release"
    );
    // Another marker, ended by DEL, after the releases: the only outcome.
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "m2", "o3", 60_000, "SESSION", "app")
        ),
        1
    );
    assert_eq!(int(&mut c, &cmd!("DEL", "m2")), 1);
    assert_lost(&l.read_n(1), "m2", "o3");
    assert_eq!(rlock_stat(&mut c, "holds_lost"), 2);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);

    // A re-entered hold that is then lost gives one outcome, not one per re-entry.
    assert_eq!(int(&mut c, &take), 1);
    assert_eq!(int(&mut c, &take), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "o1");
    assert_eq!(int(&mut c, &cmd!("DEL", "nothing")), 0);
    assert_eq!(l.read(), vec![]);
}

#[test]
fn a_blocked_acquire_that_names_a_session_has_its_later_grant_watched() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park(&s, &mut c, "k", "w", 60_000, &["SESSION", "app"], 1);
    release(&mut c, "k", "holder");
    assert_eq!(w.reply_int(), 1);
    wait_until(Duration::from_secs(5), "hold watched", || {
        rlock_stat(&mut c, "session_holds_watched") == 1
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "w");
}

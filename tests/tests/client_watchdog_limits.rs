//! The watchdog's longest hold (`ClientBuilder::watchdog_max_hold`) and its listener
//! (`ClientBuilder::watchdog_listener`: renewals that failed, holds found gone, the longest
//! hold reached), against real servers, in both protocols (`RLOCK_CLIENT_PROTOCOL`).

mod client_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client_support::{calls, client, client_with, runtime};
use rlock_client::WatchdogEvent;
use rlock_tests::*;

type Events = Arc<Mutex<Vec<WatchdogEvent>>>;

/// A client whose watchdog listener records every event, with `f` applied to its builder.
fn listening(
    s: &Server,
    f: impl FnOnce(rlock_client::ClientBuilder) -> rlock_client::ClientBuilder,
) -> (rlock_client::Client, Events) {
    let events: Events = Arc::default();
    let seen = events.clone();
    let client = client_with(s.url(), |b| {
        f(b.watchdog_listener(move |e| seen.lock().unwrap().push(e.clone())))
    });
    (client, events)
}

fn capped(events: &Events, name: &str) -> Option<Duration> {
    events.lock().unwrap().iter().find_map(|e| match e {
        WatchdogEvent::MaxHoldReached { hold, held } if &*hold.name == name => Some(*held),
        _ => None,
    })
}

fn failed(events: &Events, name: &str) -> usize {
    let events = events.lock().unwrap();
    let is = |e: &&WatchdogEvent| matches!(e, WatchdogEvent::RenewalFailed { hold, error } if &*hold.name == name && !error.is_empty());
    events.iter().filter(is).count()
}

/// Commands that renew a hold, as `INFO commandstats` counts them: `RLOCK.RENEW` with the module,
/// Redisson's renewal script (`EVALSHA`, or `EVAL` when the script is not cached) without.
fn renewal_calls(c: &mut redis::Connection) -> i64 {
    ["rlock.renew", "evalsha", "eval"]
        .iter()
        .map(|name| calls(c, name))
        .sum()
}

fn lost(events: &Events, name: &str) -> usize {
    let events = events.lock().unwrap();
    let is = |e: &&WatchdogEvent| matches!(e, WatchdogEvent::Lost { hold } if &*hold.name == name);
    events.iter().filter(is).count()
}

#[test]
fn a_hold_renewed_for_the_longest_hold_is_told_lost_and_then_frees() {
    let s = Server::start();
    let mut c = s.conn();
    // Watchdog timeout 600 ms (renewed every 200 ms), longest hold 500 ms.
    let max = Duration::from_millis(500);
    // Another client without a longest hold keeps its lock as long as it likes.
    let free = client(&s);
    let (client, events) = listening(&s, |b| b.watchdog_max_hold(max));
    assert_eq!(client.config().watchdog_max_hold(), Some(max));
    let kept = free.lock("kept").guard().unwrap();

    let lock = client.lock("capped");
    let t = Instant::now();
    let g = lock.guard().unwrap();
    let reentered = lock.guard().unwrap();
    wait_until(
        margin(Duration::from_secs(3)),
        "the longest hold told",
        || g.is_lost(),
    );
    let told = t.elapsed();
    assert!(told >= max, "told after {told:?}, before the longest hold");
    assert!(reentered.is_lost() && lock.is_lost());
    let held = capped(&events, "capped").expect("MaxHoldReached told to the listener");
    assert!(held >= max, "held {held:?}");
    // No longer renewed: the lock ends with its last lease (600 ms) and is free for others.
    wait_until(
        margin(Duration::from_secs(2)),
        "the capped lock expired",
        || !exists(&mut c, "capped"),
    );
    let other = free.lock("capped");
    assert!(other.try_lock().unwrap(), "free once its lease ended");
    other.unlock().unwrap();
    assert!(
        t.elapsed() < max + margin(Duration::from_millis(600 + 200 + 500)),
        "freed within a renewal period and a lease of the longest hold"
    );
    // The other client's lock, held as long, is still renewed.
    assert!(!kept.is_lost());
    assert!(exists(&mut c, "kept") && pttl(&mut c, "kept") > 0);
    assert_eq!(capped(&events, "kept"), None);
    drop((g, reentered));
    kept.unlock().unwrap();
}

#[test]
fn an_async_guard_learns_the_longest_hold_through_lost() {
    let s = Server::start();
    let (client, events) = listening(&s, |b| b.watchdog_max_hold(Duration::from_millis(300)));
    let rt = runtime(2);
    rt.block_on(async {
        let lock = client.async_lock("capped-async");
        let g = lock.guard().await.unwrap();
        let t = Instant::now();
        tokio::time::timeout(margin(Duration::from_secs(3)), g.lost())
            .await
            .expect("lost() resolves at the longest hold");
        assert!(t.elapsed() >= Duration::from_millis(250));
        assert!(lock.is_lost());
        // Its owner can still give it back before its last lease ends (that lease has at
        // least 400 ms to go when the cap is told: renewed a period before, to 600 ms).
        g.unlock()
            .await
            .expect("released before its last lease ended");
    });
    assert!(capped(&events, "capped-async").is_some());
}

#[test]
fn lease_holds_are_not_capped_and_a_new_hold_starts_a_new_clock() {
    let s = Server::start();
    let max = Duration::from_millis(400);
    let (client, events) = listening(&s, |b| b.watchdog_max_hold(max));
    let lock = client.lock("leased");
    // A lease hold is not the watchdog's: the longest hold does not apply.
    let g = lock
        .try_guard_with(Duration::ZERO, Duration::from_secs(5))
        .unwrap()
        .expect("free");
    std::thread::sleep(max + Duration::from_millis(400));
    assert!(!g.is_lost() && capped(&events, "leased").is_none());
    drop(g);
    // Released and taken again: its clock starts again.
    let renewed = client.lock("again");
    for _ in 0..2 {
        let g = renewed.guard().unwrap();
        std::thread::sleep(Duration::from_millis(250));
        assert!(!g.is_lost(), "released before its longest hold");
        g.unlock().unwrap();
    }
    assert!(capped(&events, "again").is_none());
}

#[test]
fn the_listener_hears_of_renewals_that_failed_and_the_hold_survives_them() {
    let s = Server::start();
    let mut c = s.conn();
    // Lease 2 s renewed every 400 ms; a renewal gets no answer within 150 ms while the server
    // is paused for 600 ms (more than a period: at least one renewal falls in it; at most two,
    // and the third comes 1.2 s after the last one that succeeded, well within the lease).
    let (client, events) = listening(&s, |b| {
        b.watchdog_timeout(Duration::from_secs(2))
            .renewal_interval(Duration::from_millis(400))
            .response_timeout(Duration::from_millis(150))
    });
    let g = client.lock("paused").guard().unwrap();
    // The watchdog's connection opens with its first renewal, and opening it is bounded by the
    // connect timeout (1 s), not the response timeout: a first renewal that falls in the pause
    // waits it out and succeeds, which is not a failure. So the pause starts once a renewal has
    // been served (the connection is open).
    let served = renewal_calls(&mut c);
    wait_until(margin(Duration::from_secs(3)), "a first renewal", || {
        renewal_calls(&mut c) > served
    });
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("ALL")
        .query(&mut c)
        .unwrap();
    wait_until(
        margin(Duration::from_secs(3)),
        "a failed renewal told",
        || failed(&events, "paused") > 0,
    );
    // After the pause the next renewal succeeds: still held, not lost, and renewed to the
    // lease again (more than the 2 s lease minus a period and the pause left).
    wait_until(
        margin(Duration::from_secs(3)),
        "renewed after the pause",
        || {
            let ttl = pttl(&mut c, "paused");
            ttl > 1500
        },
    );
    assert!(!g.is_lost());
    assert_eq!(lost(&events, "paused"), 0);
    g.unlock().unwrap();
}

#[test]
fn the_listener_hears_of_a_hold_found_gone_once() {
    let s = Server::start();
    let mut c = s.conn();
    let (client, events) = listening(&s, |b| b);
    let g = client.lock("deleted").guard().unwrap();
    assert_eq!(int(&mut c, &cmd!("DEL", "deleted")), 1);
    // With the module the server pushes the loss; over Redisson's protocol the next renewal
    // finds it gone.
    wait_until(margin(Duration::from_secs(3)), "the loss told", || {
        lost(&events, "deleted") == 1
    });
    assert!(g.is_lost());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(lost(&events, "deleted"), 1, "told once");
    drop(g);
}

#[test]
fn a_zero_longest_hold_is_refused() {
    let e = rlock_client::Client::builder()
        .url("redis://127.0.0.1:1/")
        .watchdog_max_hold(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(e, rlock_client::Error::Config(_)), "{e}");
}

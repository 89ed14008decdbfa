//! Fault injection against real redis-server processes (issue 5, part B): a holder process
//! SIGKILLed, a queued waiter process SIGKILLed, the server SIGSTOPped past a lease, the server
//! crashed and restarted on its AOF, and a client's connections cut with `CLIENT KILL`. The
//! faults of the client's sessions (issue 13) are in `sessions_client.rs`.
//!
//! After each fault the same checks run ([`assert_sane`]): at most one holder per lock, no lock
//! without an expiry (held by nobody beyond its lease), no waiter left queued on a free lock, and
//! `INFO rlock` agreeing with the per-lock queues.
//!
//! Child processes are this test binary run again on one `*_child` test (the mechanism of
//! `client_sync.rs`' `sigkill_child_holder`, through `client_support::spawn_self`); those tests
//! return at once when their environment variable is unset.

mod client_support;

use std::process::Child;
use std::time::{Duration, Instant};

use client_support::{client_with, read_until, spawn_self};
use rlock_tests::{
    cmd, hgetall, info_int, int, lock_info, margin, nil, pttl, raw, redis, rlock_stat,
    rlock_stat_in, signal, wait_blocked, wait_until, Pending, Server, ServerOptions, Value,
};

const CHILD_URL: &str = "RLOCK_FAULT_CHILD_URL";
const CHILD_KEY: &str = "RLOCK_FAULT_CHILD_KEY";
/// The session grace of the waiter child.
const CHILD_GRACE: Duration = Duration::from_millis(500);

/// Every invariant a fault must not break, for the locks `keys`:
/// - at most one holder (one hash field), holding a positive count;
/// - a held lock has a lease (PTTL > 0 and at most `max_lease_ms`), never "no expiry";
/// - a lock with queued waiters is held (a free lock is handed off at once; a freshly expired
///   lock is given 1 s to be handed off, the contract's target being 10 ms);
/// - `INFO rlock` `rlock_waiters` equals the sum of the queues, and every blocked client is
///   one of those waiters (queued with `BLOCK`) or a session listener parked in its read (a
///   waiter queued through a session blocks no client).
#[track_caller]
fn assert_sane(c: &mut redis::Connection, keys: &[&str], max_lease_ms: i64) {
    for key in keys {
        let fields = hgetall(c, key);
        assert!(fields.len() <= 1, "{key}: more than one holder {fields:?}");
        let info = lock_info(c, key);
        if let Some((owner, count)) = fields.iter().next() {
            let n: i64 = count.parse().expect("integer hold count");
            assert!(n >= 1, "{key}: hold count {n}");
            assert_eq!(
                info.owner.as_deref(),
                Some(owner.as_str()),
                "{key}: RLOCK.INFO owner"
            );
            let ttl = pttl(c, key);
            assert!(
                0 < ttl && ttl <= max_lease_ms,
                "{key}: held by {owner} with PTTL {ttl} (lease at most {max_lease_ms})"
            );
        } else {
            assert_eq!(info.owner, None, "{key}: RLOCK.INFO owner of a free lock");
        }
        if info.waiters > 0 && info.owner.is_none() {
            // Just expired: the hand-off timer may not have run yet. It must, promptly.
            wait_until(
                Duration::from_secs(1),
                "a free lock with waiters is handed off",
                || {
                    let i = lock_info(c, key);
                    i.waiters == 0 || i.owner.is_some()
                },
            );
        }
        let info = lock_info(c, key);
        assert_eq!(info.waiters as usize, info.queue.len(), "{key}: {info:?}");
    }
    // The counts below are read one command at a time while session listeners re-park
    // (between two reads of theirs) and waits may still end: they agree at one moment, not
    // necessarily across the reads. Read them again until they agree; a wrong count never
    // does, and the last reading is what fails.
    let deadline = Instant::now() + margin(Duration::from_secs(1));
    let counts = loop {
        let counts = Counts::read(c, keys);
        if counts.agree() || Instant::now() >= deadline {
            break counts;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(
        counts.rlock_waiters, counts.queued,
        "INFO rlock rlock_waiters and the queues' sum ({counts:?})"
    );
    assert_eq!(
        counts.blocked_clients,
        counts.queued - counts.session_requests
            + counts.parked_listeners
            + counts.session_requests_parked,
        "every blocked client is a waiter queued with BLOCK, a session listener, or a \
         session request parked for the first part of its wait ({counts:?})"
    );
}

/// What [`assert_sane`] compares across the locks' queues, `INFO rlock`, `INFO clients` and
/// the sessions: one reading, command by command.
#[derive(Debug)]
struct Counts {
    /// The sum of the locks' queues (`RLOCK.INFO` waiters).
    queued: i64,
    rlock_waiters: i64,
    session_requests: i64,
    session_requests_parked: i64,
    blocked_clients: i64,
    parked_listeners: i64,
}

impl Counts {
    fn read(c: &mut redis::Connection, keys: &[&str]) -> Counts {
        let queued = keys.iter().map(|key| waiters(c, key)).sum();
        let info: String = redis::cmd("INFO").arg("rlock").query(c).unwrap();
        Counts {
            queued,
            rlock_waiters: rlock_stat_in(&info, "waiters"),
            session_requests: rlock_stat_in(&info, "session_requests"),
            session_requests_parked: rlock_stat_in(&info, "session_requests_parked"),
            blocked_clients: info_int(c, "clients", "blocked_clients"),
            parked_listeners: parked_listeners(c),
        }
    }

    fn agree(&self) -> bool {
        self.rlock_waiters == self.queued
            && self.blocked_clients
                == self.queued - self.session_requests
                    + self.parked_listeners
                    + self.session_requests_parked
    }
}

/// Session listeners parked in `RSESSION.READ` (`RSESSION.INFO`'s `reading`).
fn parked_listeners(c: &mut redis::Connection) -> i64 {
    let names: Vec<String> = redis::cmd("RSESSION.LIST").query(c).unwrap();
    names
        .iter()
        .filter(|n| {
            let info: Vec<Value> = redis::cmd("RSESSION.INFO").arg(n).query(c).unwrap();
            info.chunks(2)
                .any(|kv| kv[0] == Value::BulkString(b"reading".to_vec()) && kv[1] == Value::Int(1))
        })
        .count() as i64
}

fn waiters(c: &mut redis::Connection, key: &str) -> i64 {
    lock_info(c, key).waiters
}

// ---------------------------------------------------------------------------------------------
// Child processes
// ---------------------------------------------------------------------------------------------

/// Child: take `RLOCK_FAULT_CHILD_KEY` with the watchdog (1 s lease, renewed) and wait to die.
#[test]
#[ignore = "child process: its parent test runs it (spawn_self), it does nothing alone"]
fn holder_child() {
    let (Ok(url), Ok(key)) = (std::env::var(CHILD_URL), std::env::var(CHILD_KEY)) else {
        return;
    };
    let client = client_with(url, |b| b.watchdog_timeout(Duration::from_millis(1000)));
    let lock = client.lock(key);
    lock.lock().unwrap();
    println!("LOCKED");
    std::thread::sleep(Duration::from_secs(120));
}

/// Child: wait (without a time limit) for `RLOCK_FAULT_CHILD_KEY` and wait to die.
#[test]
#[ignore = "child process: its parent test runs it (spawn_self), it does nothing alone"]
fn waiter_child() {
    let (Ok(url), Ok(key)) = (std::env::var(CHILD_URL), std::env::var(CHILD_KEY)) else {
        return;
    };
    // A dead process's session (and the waits queued in it) ends one grace period after its
    // connection closed.
    let client = client_with(url, |b| b.session_grace(CHILD_GRACE));
    let lock = client.lock(key);
    println!("WAITING");
    lock.lock().unwrap();
    println!("LOCKED");
    std::thread::sleep(Duration::from_secs(120));
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_child(test: &str, s: &Server, key: &str) -> (ChildGuard, impl FnMut(&str)) {
    let (child, mut out) = spawn_self(test, &[(CHILD_URL, s.url()), (CHILD_KEY, key.into())]);
    (ChildGuard(child), move |marker: &str| {
        read_until(&mut out, marker)
    })
}

// ---------------------------------------------------------------------------------------------
// Holder and waiter processes killed
// ---------------------------------------------------------------------------------------------

#[test]
fn sigkilled_holder_process_hands_off_after_its_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let (mut child, mut read) = spawn_child("holder_child", &s, "fk:holder");
    read("LOCKED");
    let owner = lock_info(&mut c, "fk:holder")
        .owner
        .expect("child holds it");
    // Two raw waiters queue behind the live holder (whose watchdog keeps renewing).
    let w1 = Pending::send(
        &s,
        &cmd!(
            "RLOCK.ACQUIRE",
            "fk:holder",
            "w1",
            5000,
            "BLOCK",
            0,
            "FENCE"
        ),
    );
    let w2 = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:holder", "w2", 5000, "BLOCK", 20_000),
    );
    wait_until(Duration::from_secs(5), "two raw waiters queued", || {
        waiters(&mut c, "fk:holder") == 2
    });
    assert_sane(&mut c, &["fk:holder"], 1000);
    let expired_before = rlock_stat(&mut c, "grants_after_expiry");

    child.0.kill().unwrap(); // SIGKILL: no unlock, no more renewals
    let killed = Instant::now();
    let token = w1.reply_int();
    let after = killed.elapsed();
    // The lease is 1 s and was renewed at most 1 s before the kill.
    assert!(
        after <= Duration::from_millis(1000 + 500),
        "first waiter served {after:?} after the holder died"
    );
    assert!(token >= 1, "fencing token {token}");
    let info = lock_info(&mut c, "fk:holder");
    assert_eq!(info.owner.as_deref(), Some("w1"));
    assert_ne!(info.owner.as_deref(), Some(owner.as_str()));
    assert_eq!(
        info.queue,
        vec!["w2".to_string()],
        "w2 still queued, in order"
    );
    assert_eq!(
        rlock_stat(&mut c, "grants_after_expiry"),
        expired_before + 1
    );
    assert_sane(&mut c, &["fk:holder"], 5000);

    // The dead holder's owner cannot release it any more.
    let e = rlock_tests::err(&mut c, &cmd!("RLOCK.RELEASE", "fk:holder", &owner));
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fk:holder", "w1")), 0);
    assert_eq!(w2.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fk:holder", "w2")), 0);
    assert_sane(&mut c, &["fk:holder"], 5000);
    assert!(!rlock_tests::exists(&mut c, "fk:holder"));
}

#[test]
fn sigkilled_waiter_process_leaves_the_queue() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "fk:waiter", "holder", 30_000)
        ),
        1
    );
    let ahead = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:waiter", "ahead", 30_000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 1);
    let (mut child, mut read) = spawn_child("waiter_child", &s, "fk:waiter");
    read("WAITING");
    wait_until(Duration::from_secs(10), "child queued", || {
        waiters(&mut c, "fk:waiter") == 2
    });
    let behind = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:waiter", "behind", 30_000, "BLOCK", 0),
    );
    wait_until(Duration::from_secs(5), "three waiters queued", || {
        waiters(&mut c, "fk:waiter") == 3
    });
    let child_owner = lock_info(&mut c, "fk:waiter").queue[1].clone();
    let expired = rlock_stat(&mut c, "sessions_expired");

    child.0.kill().unwrap();
    let _ = child.0.wait();
    let killed = Instant::now();
    // The child waited through its session: the wait leaves the queue when the session
    // expires, one grace period after the dead process's listener connection closed.
    wait_until(Duration::from_secs(5), "dead waiter removed", || {
        waiters(&mut c, "fk:waiter") == 2
    });
    let gone = killed.elapsed();
    assert!(
        gone >= CHILD_GRACE - Duration::from_millis(50) && gone < CHILD_GRACE * 4,
        "the dead waiter left {gone:?} after the kill (grace {CHILD_GRACE:?})"
    );
    let info = lock_info(&mut c, "fk:waiter");
    assert_eq!(info.queue, vec!["ahead".to_string(), "behind".to_string()]);
    assert!(!info.queue.contains(&child_owner));
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), expired + 1);
    assert_sane(&mut c, &["fk:waiter"], 30_000);

    // Releases go to the live waiters in order; the dead one is never granted.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "fk:waiter", "holder")),
        0
    );
    assert_eq!(ahead.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fk:waiter", "ahead")), 0);
    assert_eq!(behind.reply_int(), 1);
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "fk:waiter", "behind")),
        0
    );
    assert!(!rlock_tests::exists(&mut c, "fk:waiter"));
    assert_eq!(rlock_stat(&mut c, "grants_revoked"), 0);
    assert_sane(&mut c, &["fk:waiter"], 30_000);
}

// ---------------------------------------------------------------------------------------------
// Server paused past a lease
// ---------------------------------------------------------------------------------------------

#[test]
fn server_sigstopped_past_a_lease_hands_off_on_sigcont() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "fk:stop", "holder", 300)),
        1
    );
    let waiter = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:stop", "waiter", 10_000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 1);
    let expired_before = rlock_stat(&mut c, "grants_after_expiry");
    // A newcomer's connection, opened before the pause.
    let mut newcomer = s.conn();

    signal(s.pid(), "-STOP");
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_millis(800)); // well past the 300 ms lease
                                                    // Queue the newcomer's non-blocking attempt while the server is frozen: it is read right
                                                    // after SIGCONT, racing the expiry; it must not overtake the queued waiter.
    newcomer
        .send_packed_command(
            &cmd!("RLOCK.ACQUIRE", "fk:stop", "newcomer", 10_000).get_packed_command(),
        )
        .unwrap();
    signal(s.pid(), "-CONT");
    let resumed = Instant::now();
    assert!(resumed - stopped >= Duration::from_millis(800));

    assert_eq!(waiter.reply_int(), 1, "the waiter gets the expired lock");
    let served = resumed.elapsed();
    assert_eq!(
        newcomer.recv_response().unwrap(),
        Value::Nil,
        "a newcomer never overtakes the queued waiter"
    );
    assert!(
        served < Duration::from_millis(1000),
        "hand-off {served:?} after SIGCONT"
    );
    let info = lock_info(&mut c, "fk:stop");
    assert_eq!(info.owner.as_deref(), Some("waiter"));
    assert!(
        info.ttl_ms > 8_000,
        "the waiter's lease counts from its grant: {info:?}"
    );
    assert_eq!(
        rlock_stat(&mut c, "grants_after_expiry"),
        expired_before + 1
    );
    assert_sane(&mut c, &["fk:stop"], 10_000);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fk:stop", "waiter")), 0);
    assert_sane(&mut c, &["fk:stop"], 10_000);
}

// ---------------------------------------------------------------------------------------------
// Server crash and restart on its AOF
// ---------------------------------------------------------------------------------------------

#[test]
fn server_crash_and_aof_restart_keeps_locks_and_requeues_waiters() {
    // appendfsync always: a SIGKILL loses nothing the server acknowledged.
    let mut server = Server::with(ServerOptions {
        aof: true,
        args: vec!["--appendfsync".into(), "always".into()],
        ..Default::default()
    });
    let mut c = server.conn();

    // A raw lock with a long lease and a fencing token.
    let token = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "aof:raw", "raw-owner", 20_000, "FENCE"),
    );
    // A client holder (watchdog 10 s: it outlives the restart) and a client waiter.
    let holder = client_with(server.url(), |b| {
        b.watchdog_timeout(Duration::from_secs(10))
            .retry(30, Duration::from_millis(100))
    });
    let lock = holder.lock("aof:held");
    lock.lock().unwrap();
    let waiter_client = client_with(server.url(), |b| b.retry(30, Duration::from_millis(100)));
    let waiter_lock = waiter_client.lock("aof:held");
    let waiter = std::thread::spawn(move || {
        let got = waiter_lock.try_lock_for(Duration::from_secs(30)).unwrap();
        if got {
            waiter_lock.unlock().unwrap();
        }
        got
    });
    wait_until(Duration::from_secs(10), "client waiter queued", || {
        waiters(&mut c, "aof:held") == 1
    });
    assert_sane(&mut c, &["aof:raw", "aof:held"], 20_000);
    let ttl_before = pttl(&mut c, "aof:raw");
    let measured = Instant::now();
    let disconnected = rlock_stat(&mut c, "waiters_disconnected");
    assert_eq!(disconnected, 0);

    server.kill(); // SIGKILL: no shutdown rewrite, only what the AOF has
    server.restart();
    let mut c = server.conn();

    // The locks came back from the AOF with the rest of their lease (absolute expiry times).
    assert_eq!(
        hgetall(&mut c, "aof:raw"),
        rlock_tests::holder("raw-owner", 1)
    );
    let ttl_after = pttl(&mut c, "aof:raw");
    let down_ms = measured.elapsed().as_millis() as i64;
    assert!(
        ttl_before - down_ms - 50 <= ttl_after && ttl_after <= ttl_before,
        "remaining lease {ttl_after} ms; it was {ttl_before} ms {down_ms} ms ago"
    );
    assert_eq!(
        lock_info(&mut c, "aof:held").owner.as_deref(),
        Some(lock.owner().as_str()),
        "the client's lock survived"
    );
    // The fencing counter survived: the next token is larger.
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "aof:raw", "raw-owner")),
        0
    );
    let next = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "aof:raw", "raw-owner", 20_000, "FENCE"),
    );
    assert!(next > token, "token {next} after restart, {token} before");
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "aof:raw", "raw-owner")),
        0
    );

    // The waiter's wait broke with the crash: its client queues it again.
    wait_until(
        Duration::from_secs(10),
        "waiter re-queued after restart",
        || waiters(&mut c, "aof:held") == 1,
    );
    // The holder's watchdog reconnected and renews (the renewal counter of the new process).
    wait_until(
        Duration::from_secs(15),
        "holder renewed after restart",
        || rlock_stat(&mut c, "renewals") >= 1,
    );
    assert!(!lock.is_lost());
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_sane(&mut c, &["aof:raw", "aof:held"], 20_000);

    lock.unlock().unwrap();
    assert!(waiter.join().unwrap(), "the re-queued waiter got the lock");
    assert!(!rlock_tests::exists(&mut c, "aof:held"));
    assert_sane(&mut c, &["aof:raw", "aof:held"], 20_000);
}

// ---------------------------------------------------------------------------------------------
// Network cut: CLIENT KILL
// ---------------------------------------------------------------------------------------------

#[test]
fn client_kill_of_every_connection_client_holder_keeps_and_waiter_stays_queued() {
    let s = Server::start();
    let mut c = s.conn();
    let holder = client_with(s.url(), |b| b.retry(20, Duration::from_millis(50)));
    let lock = holder.lock("fk:cut");
    lock.lock().unwrap(); // watchdog: 600 ms lease renewed every 200 ms
    let waiter_client = client_with(s.url(), |b| b.retry(20, Duration::from_millis(50)));
    let waiter_lock = waiter_client.lock("fk:cut");
    let waiter = std::thread::spawn(move || {
        let got = waiter_lock.try_lock_for(Duration::from_secs(20)).unwrap();
        if got {
            assert!(waiter_lock.is_held_by_current_thread().unwrap());
            waiter_lock.unlock().unwrap();
        }
        got
    });
    // Queued, and past the first 50 ms of a sync wait, when its connection is parked (cut
    // then, the wait is withdrawn and queued again: `client_kill_of_a_parked_wait_...`).
    wait_until(Duration::from_secs(10), "client waiter queued", || {
        waiters(&mut c, "fk:cut") == 1 && rlock_stat(&mut c, "session_requests_parked") == 0
    });
    let expired = rlock_stat(&mut c, "sessions_expired");
    let opened = rlock_stat(&mut c, "sessions_opened");

    // Cut every client connection but ours: both clients' command connections and session
    // listeners, and the holder's watchdog connection.
    let killed = int(
        &mut c,
        &cmd!("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"),
    );
    assert!(killed >= 3, "killed {killed} connections");
    // The wait is queued in the waiter client's session, which outlives its listener's
    // connection: the listener reconnects and resumes it, and the wait never leaves the queue.
    wait_until(Duration::from_secs(5), "both listeners read again", || {
        parked_listeners(&mut c) == 2
    });
    assert_eq!(waiters(&mut c, "fk:cut"), 1);
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), expired);
    assert_eq!(
        rlock_stat(&mut c, "sessions_opened"),
        opened,
        "resumed, not opened anew"
    );
    // The holder's watchdog reconnects: three renewals after the cut span at least 400 ms
    // beyond it, so the lock was kept alive continuously (its lease is 600 ms).
    let renewals = rlock_stat(&mut c, "renewals");
    wait_until(
        Duration::from_secs(10),
        "three renewals after the cut",
        || rlock_stat(&mut c, "renewals") >= renewals + 3,
    );
    assert!(!lock.is_lost());
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_sane(&mut c, &["fk:cut"], 600);

    lock.unlock().unwrap();
    assert!(
        waiter.join().unwrap(),
        "the waiter got the lock after the cut"
    );
    assert!(!rlock_tests::exists(&mut c, "fk:cut"));
    assert_sane(&mut c, &["fk:cut"], 600);
}

#[test]
fn client_kill_of_a_raw_holder_and_waiter_lease_still_rules() {
    let s = Server::start();
    let mut c = s.conn();
    let mut h = s.conn();
    let holder_id = int(&mut h, &cmd!("CLIENT", "ID"));
    assert_eq!(
        int(&mut h, &cmd!("RLOCK.ACQUIRE", "fk:cut2", "holder", 700)),
        1
    );
    let w1 = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:cut2", "w1", 5000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 1);
    let w2 = Pending::send(
        &s,
        &cmd!("RLOCK.ACQUIRE", "fk:cut2", "w2", 5000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 2);
    let disconnected = rlock_stat(&mut c, "waiters_disconnected");
    let expired = rlock_stat(&mut c, "grants_after_expiry");

    for id in [holder_id, w1.id] {
        assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", id)), 1);
    }
    let cut = Instant::now();
    // The killed waiter leaves the queue; the killed holder's lock stays until its lease ends
    // (a lock belongs to its owner, not to a connection, as in Redisson).
    wait_until(Duration::from_secs(5), "killed waiter removed", || {
        waiters(&mut c, "fk:cut2") == 1
    });
    assert_eq!(rlock_stat(&mut c, "waiters_disconnected"), disconnected + 1);
    let info = lock_info(&mut c, "fk:cut2");
    assert_eq!(info.queue, vec!["w2".to_string()]);
    if cut.elapsed() < Duration::from_millis(500) {
        assert_eq!(info.owner.as_deref(), Some("holder"));
    }
    assert_sane(&mut c, &["fk:cut2"], 5000);

    assert_eq!(w2.reply_int(), 1, "w2 gets the lock when the lease ends");
    assert!(
        cut.elapsed() < Duration::from_millis(700 + 500),
        "served {:?} after the cut",
        cut.elapsed()
    );
    assert_eq!(lock_info(&mut c, "fk:cut2").owner.as_deref(), Some("w2"));
    assert_eq!(rlock_stat(&mut c, "grants_after_expiry"), expired + 1);
    assert_eq!(rlock_stat(&mut c, "grants_revoked"), 0);
    assert_sane(&mut c, &["fk:cut2"], 5000);
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "fk:cut2", "late", 1000));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "fk:cut2", "w2")), 0);
    assert_sane(&mut c, &["fk:cut2"], 5000);
    let _ = raw(&mut c, &cmd!("PING"));
}

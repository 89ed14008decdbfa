//! Soak with an invariant checker (issue 5, part B).
//!
//! 32 clients (one thread and one `rlock_client::Client` each) hammer 4 locks with a random mix of
//! non-blocking tries, bounded waits, unbounded waits, leases and watchdog holds, re-entry,
//! unlock, force unlock, abandoned holds (a "crashed" holder that never unlocks) and overruns
//! (a holder that outlives its lease), while a killer thread cuts random client connections with
//! `CLIENT KILL` and a monitor samples every lock.
//!
//! Every hold is taken with a fencing token and recorded as the interval during which it was
//! certainly valid: from the moment the acquire returned (the grant came before) to the moment
//! just before a read at the end of the critical section (`hold_count`) found the owner still
//! holding it, or, without that proof, to the earliest of its lease end counted from before the
//! acquire was sent, the first force unlock of that lock that may have run after it, and its
//! first unlock attempt. Sorted by token (the grant order), each such interval must end before the
//! next one starts: that is mutual exclusion, checked without false alarms. The checker also
//! asserts that a holder that slept past its lease can no longer unlock, that a held lock always
//! has a bounded TTL, that a waiter never sits on a free lock, that every thread finishes (no
//! stuck waiter), and that at the end every lock was released or expired with no waiter left.
//!
//! The default run takes about 12 s (CI). `RLOCK_SOAK_SECS=600 make soak` runs longer;
//! `RLOCK_SOAK_SEED` replays a seed (the interleaving still depends on timing);
//! `RLOCK_SOAK_CLIENTS` changes the number of clients.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlock_client::Error;
use rlock_tests::{
    cmd, env_seed, env_u64, info_int, int, raw, redis, rlock_stat, text, Rng, Server, Value,
};

const LOCKS: [&str; 4] = ["soak:0", "soak:1", "soak:2", "soak:{3}"];
const MIN_LEASE_MS: u64 = 60;
const MAX_LEASE_MS: u64 = 400;
const WATCHDOG: Duration = Duration::from_millis(900);
/// Allowance for the server's wall clock against this process' monotonic clock.
const CLOCK_SLACK: Duration = Duration::from_millis(5);

/// One hold as the checker sees it.
#[derive(Debug, Clone)]
struct Hold {
    lock: usize,
    thread: usize,
    token: u64,
    /// The acquire returned: the grant happened before.
    from: Instant,
    /// Before the acquire was sent (a force unlock that may have run after the grant counts).
    sent: Instant,
    /// Certainly still held until then, unless a force unlock ended it earlier (that bound is
    /// applied by the checker, from the full force log); `None`: unknown (a lost watchdog hold).
    to: Option<Instant>,
    /// The hold ended by a successful unlock: no force unlock can have ended it earlier.
    unlocked: bool,
    how: &'static str,
}

#[derive(Default)]
struct Stats {
    attempts: AtomicU64,
    acquired: AtomicU64,
    not_acquired: AtomicU64,
    reentries: AtomicU64,
    unlocked: AtomicU64,
    abandoned: AtomicU64,
    overruns: AtomicU64,
    forces: AtomicU64,
    lost: AtomicU64,
    split: AtomicU64,
    unlock_ok_after_lease: AtomicU64,
    errors: AtomicU64,
    kills: AtomicU64,
    monitor_samples: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared {
    stop: AtomicBool,
    holds: Mutex<Vec<Hold>>,
    /// Per lock: force unlocks, (before sent, reply received).
    forces: Mutex<Vec<Vec<(Instant, Instant)>>>,
    violations: Mutex<Vec<String>>,
    stats: Stats,
}

impl Shared {
    fn violation(&self, v: String) {
        eprintln!("VIOLATION: {v}");
        self.violations.lock().unwrap().push(v);
    }
}

fn worker(id: usize, url: String, seed: u64, sh: Arc<Shared>) {
    let client = rlock_client::Client::builder()
        .url(url)
        .watchdog_timeout(WATCHDOG)
        .worker_threads(1)
        .retry(5, Duration::from_millis(20))
        .build()
        .expect("build client");
    let mut rng = Rng::new(seed);
    let st = &sh.stats;
    while !sh.stop.load(Ordering::Relaxed) {
        let li = rng.below(LOCKS.len() as u64) as usize;
        // A fresh owner per hold: an abandoned hold is never re-entered by accident.
        let lock = client.fenced_lock(LOCKS[li]).with_owner(client.new_owner());
        let dice = rng.below(100);
        if dice < 3 {
            let start = Instant::now();
            let r = lock.force_unlock();
            sh.forces.lock().unwrap()[li].push((start, Instant::now()));
            match r {
                Ok(_) => bump(&st.forces),
                Err(_) => bump(&st.errors),
            }
            continue;
        }
        if dice < 6 {
            std::thread::sleep(Duration::from_millis(rng.range(1, 20)));
            continue;
        }
        let lease = match rng.below(3) {
            0 => None, // watchdog
            _ => Some(Duration::from_millis(rng.range(MIN_LEASE_MS, MAX_LEASE_MS))),
        };
        let wait = Duration::from_millis(rng.range(1, 300));
        let mode = rng.below(5);
        bump(&st.attempts);
        let sent = Instant::now();
        let got = match (mode, lease) {
            (0, None) => lock.try_lock_and_get_token(),
            (0, Some(l)) => lock.try_lock_and_get_token_with(Duration::ZERO, l),
            (1, None) => lock.lock_and_get_token().map(Some),
            (1, Some(l)) => lock.lock_and_get_token_with_lease(l).map(Some),
            (_, None) => lock.try_lock_and_get_token_for(wait),
            (_, Some(l)) => lock.try_lock_and_get_token_with(wait, l),
        };
        let from = Instant::now();
        let mut token = match got {
            Ok(Some(t)) => t,
            Ok(None) => {
                bump(&st.not_acquired);
                continue;
            }
            Err(_) => {
                // Unknown outcome (connection cut): if the server granted it, the hold belongs
                // to an owner nobody uses again and ends with its lease.
                bump(&st.errors);
                continue;
            }
        };
        bump(&st.acquired);
        let (mut sent, mut from) = (sent, from);
        let mut lease_end = lease.map(|l| sent + l - CLOCK_SLACK);
        let mut expected = 1u32;
        let mut uncertain = false;
        // Whether a successful unlock proves the hold lasted since `from` (not so after a
        // re-entry attempt with an unknown outcome: it may have taken a lost lock afresh).
        let mut continuous = true;
        // The last moment an acquire for this hold returned (re-entry resets the lease).
        let mut last_acquire = from;

        // Critical section.
        if rng.below(10) == 0 {
            let resent = Instant::now();
            let r = match lease {
                None => lock.try_lock_and_get_token(),
                Some(l) => lock.try_lock_and_get_token_with(Duration::ZERO, l),
            };
            last_acquire = Instant::now();
            match r {
                Ok(Some(t2)) => {
                    if t2 <= token {
                        sh.violation(format!(
                            "{}: re-entry token {t2} not above {token}",
                            LOCKS[li]
                        ));
                    }
                    if let Ok(2) = lock.hold_count() {
                        // A true re-entry: the hold went on.
                        bump(&st.reentries);
                        expected += 1;
                    } else {
                        // The hold was lost (force unlock or expiry) and the "re-entry" took
                        // the lock afresh, or we cannot tell: two holds. The first certainly
                        // lasted until its lease end or the re-entry, whichever came first.
                        bump(&st.split);
                        let to = lease_end.map(|e| e.min(resent));
                        record(
                            &sh,
                            (li, id, token),
                            (sent, from, to),
                            false,
                            "before-reentry",
                        );
                        (token, sent, from) = (t2, resent, last_acquire);
                        lease_end = lease.map(|l| sent + l - CLOCK_SLACK);
                        uncertain = true;
                    }
                }
                Ok(None) => {} // lost meanwhile (force unlock or expiry)
                Err(_) => {
                    bump(&st.errors);
                    uncertain = true;
                    continuous = false;
                }
            }
        }
        let fate = rng.below(100);
        if let (Some(l), true) = (lease, fate < 4) {
            // A holder that crashed: never unlocks. Its hold ends with the lease (or a force).
            bump(&st.abandoned);
            let _ = l;
            record(
                &sh,
                (li, id, token),
                (sent, from, lease_end),
                false,
                "abandoned",
            );
            continue;
        }
        if let (Some(l), true) = (lease, fate < 8) {
            // A holder that overran its lease: the server no longer counts it as a holder
            // (a read, so no client-side guess is involved), and its unlock fails.
            bump(&st.overruns);
            let until = last_acquire + l + Duration::from_millis(60);
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            match lock.hold_count() {
                Ok(0) => {}
                Ok(n) => sh.violation(format!(
                    "{}: owner {} still holds {n} {:?} after its {l:?} lease began",
                    LOCKS[li],
                    lock.owner(),
                    last_acquire.elapsed()
                )),
                Err(_) => bump(&st.errors),
            }
            match lock.unlock() {
                Err(Error::NotOwner { .. }) => {}
                Ok(()) => bump(&st.unlock_ok_after_lease),
                Err(_) => bump(&st.errors),
            }
            record(
                &sh,
                (li, id, token),
                (sent, from, lease_end),
                false,
                "overrun",
            );
            continue;
        }
        std::thread::sleep(Duration::from_millis(rng.below(15)));

        // Proof that the hold lasted until now: the server still counts this owner as a holder.
        // (An Ok from unlock is no proof: after a cut connection the client reports Ok when the
        // holder's count dropped, which a lease expiry or a force unlock also does.)
        let check_at = Instant::now();
        let proven = match lock.hold_count() {
            Ok(n) if n >= 1 && continuous => Some(check_at),
            Ok(_) => None,
            Err(_) => {
                bump(&st.errors);
                None
            }
        };

        // Unlock: as many times as it was taken, then (after any unknown outcome) until the
        // server says it is not held.
        let mut last_ok = None;
        let mut first_try = None;
        let mut done = 0;
        for _ in 0..40 {
            if done >= expected && !uncertain {
                break;
            }
            let before = Instant::now();
            first_try.get_or_insert(before);
            match lock.unlock() {
                Ok(()) => {
                    last_ok = Some(before);
                    done += 1;
                }
                Err(Error::NotOwner { .. }) => break,
                Err(_) => {
                    bump(&st.errors);
                    uncertain = true;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let to = match (proven, lease) {
            (Some(t), _) => Some(t),
            (None, Some(_)) => [lease_end, first_try].into_iter().flatten().min(),
            (None, None) => {
                bump(&st.lost);
                None
            }
        };
        if last_ok.is_some() {
            bump(&st.unlocked);
        }
        let how = if lease.is_some() { "lease" } else { "watchdog" };
        record(
            &sh,
            (li, id, token),
            (sent, from, to),
            proven.is_some(),
            how,
        );
    }
}

fn record(
    sh: &Shared,
    (lock, thread, token): (usize, usize, u64),
    (sent, from, to): (Instant, Instant, Option<Instant>),
    unlocked: bool,
    how: &'static str,
) {
    sh.holds.lock().unwrap().push(Hold {
        lock,
        thread,
        token,
        sent,
        from,
        to,
        unlocked,
        how,
    });
}

/// Cut random client connections (never the test's own, which carry a name).
fn killer(url: String, seed: u64, sh: Arc<Shared>) {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    raw(&mut c, &cmd!("CLIENT", "SETNAME", "soak-admin"));
    let mut rng = Rng::new(seed);
    while !sh.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(rng.range(50, 400)));
        let list = text(&raw(&mut c, &cmd!("CLIENT", "LIST", "TYPE", "normal"))).unwrap();
        let ids: Vec<i64> = list
            .lines()
            .filter(|l| !l.contains("name=soak-"))
            .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
            .collect();
        if ids.is_empty() {
            continue;
        }
        let n = if rng.below(10) == 0 { 5 } else { 1 };
        for _ in 0..n {
            let id = ids[rng.below(ids.len() as u64) as usize];
            if int(&mut c, &cmd!("CLIENT", "KILL", "ID", id)) == 1 {
                bump(&sh.stats.kills);
            }
        }
    }
}

/// Sample every lock atomically (MULTI): one holder at most, a bounded TTL on a held lock,
/// no waiter left on a free lock for long (the contract's hand-off target is 10 ms; 1 s here
/// leaves room for a loaded machine).
fn monitor(url: String, sh: Arc<Shared>) {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("soak-monitor")
        .query(&mut c)
        .unwrap();
    let max_ttl = MAX_LEASE_MS.max(WATCHDOG.as_millis() as u64) as i64;
    let mut free_with_waiters: HashMap<usize, (String, Instant)> = HashMap::new();
    while !sh.stop.load(Ordering::Relaxed) {
        let mut p = redis::pipe();
        p.atomic();
        for k in LOCKS {
            p.cmd("RLOCK.INFO").arg(k);
            p.cmd("HLEN").arg(k);
        }
        let replies: Vec<Value> = match p.query(&mut c) {
            Ok(v) => v,
            Err(e) => panic!("monitor: {e}"),
        };
        bump(&sh.stats.monitor_samples);
        for (i, k) in LOCKS.iter().enumerate() {
            let info = rlock_tests::LockInfo::parse(&replies[2 * i]);
            let hlen = match replies[2 * i + 1] {
                Value::Int(n) => n,
                ref v => panic!("HLEN {v:?}"),
            };
            if hlen > 1 {
                sh.violation(format!("{k}: {hlen} holders"));
            }
            // PTTL 0: expires within the millisecond (Redis expires a key once now > its time).
            if info.owner.is_some() && !(0 <= info.ttl_ms && info.ttl_ms <= max_ttl) {
                sh.violation(format!("{k}: held with ttl {} ms: {info:?}", info.ttl_ms));
            }
            if info.owner.is_none() && info.waiters > 0 {
                let head = info.queue[0].clone();
                let now = Instant::now();
                let e = free_with_waiters.entry(i).or_insert((head.clone(), now));
                if e.0 != head {
                    *e = (head, now);
                } else if now - e.1 > Duration::from_secs(1) {
                    sh.violation(format!("{k}: free for 1 s with waiters queued: {info:?}"));
                    free_with_waiters.remove(&i);
                }
            } else {
                free_with_waiters.remove(&i);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mutual exclusion from the recorded holds: per lock, sorted by token, each certainly-valid
/// interval ends before the next begins. A hold not ended by its own unlock may have been ended
/// by any force unlock of that lock that could have run after its grant (one whose reply came
/// after the acquire was sent): its interval ends at the earliest such force's send time.
/// Returns (holds checked, violations).
fn check_holds(holds: &[Hold], forces: &[Vec<(Instant, Instant)>]) -> (usize, Vec<String>) {
    let mut bad = Vec::new();
    let mut checked = 0;
    let holds: Vec<Hold> = holds
        .iter()
        .cloned()
        .map(|mut h| {
            if !h.unlocked {
                let force = forces[h.lock]
                    .iter()
                    .filter(|(_, done)| *done >= h.sent)
                    .map(|(start, _)| *start)
                    .min();
                h.to = match (h.to, force) {
                    (Some(t), Some(f)) => Some(t.min(f)),
                    (t, _) => t,
                };
            }
            h
        })
        .collect();
    for (li, name) in LOCKS.iter().enumerate() {
        let mut mine: Vec<&Hold> = holds.iter().filter(|h| h.lock == li).collect();
        mine.sort_by_key(|h| h.token);
        for w in mine.windows(2) {
            if w[0].token == w[1].token {
                bad.push(format!(
                    "{name}: token {} handed out twice: {w:?}",
                    w[0].token
                ));
            }
        }
        let valid: Vec<&Hold> = mine
            .into_iter()
            .filter(|h| h.to.is_some_and(|t| t > h.from))
            .collect();
        checked += valid.len();
        for w in valid.windows(2) {
            let (a, b) = (w[0], w[1]);
            let a_to = a.to.unwrap();
            if a_to > b.from {
                bad.push(format!(
                    "{name}: overlapping holds: token {} (thread {}, {}) held until {:?} after \
                     token {} (thread {}, {}) was acquired\n    {a:?}\n    {b:?}",
                    a.token,
                    a.thread,
                    a.how,
                    a_to - b.from,
                    b.token,
                    b.thread,
                    b.how
                ));
            }
        }
    }
    (checked, bad)
}

#[test]
fn soak_mutual_exclusion_under_kills() {
    let secs = env_u64("RLOCK_SOAK_SECS", 12);
    let clients = env_u64("RLOCK_SOAK_CLIENTS", 32) as usize;
    let seed = env_seed("RLOCK_SOAK_SEED");
    println!(
        "soak: {clients} clients, {} locks, {secs} s, seed {seed}",
        LOCKS.len()
    );
    let s = Server::start();
    let mut c = s.conn();
    raw(&mut c, &cmd!("CLIENT", "SETNAME", "soak-main"));
    let sh = Arc::new(Shared {
        stop: AtomicBool::new(false),
        holds: Mutex::new(Vec::new()),
        forces: Mutex::new(vec![Vec::new(); LOCKS.len()]),
        violations: Mutex::new(Vec::new()),
        stats: Stats::default(),
    });
    let started = Instant::now();
    let mut seeds = Rng::new(seed);
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            let (url, sh, sd) = (s.url(), sh.clone(), seeds.next_u64());
            std::thread::spawn(move || worker(i, url, sd, sh))
        })
        .collect();
    let kill = {
        let (url, sh, sd) = (s.url(), sh.clone(), seeds.next_u64());
        std::thread::spawn(move || killer(url, sd, sh))
    };
    let mon = {
        let (url, sh) = (s.url(), sh.clone());
        std::thread::spawn(move || monitor(url, sh))
    };
    std::thread::sleep(Duration::from_secs(secs));
    sh.stop.store(true, Ordering::Relaxed);
    let stopped = Instant::now();
    kill.join().expect("killer thread");
    mon.join().expect("monitor thread");
    // Every worker finishes its current operation: the longest is an unbounded wait, which
    // ends once the holds ahead of it end (leases <= 400 ms, watchdog holds are short).
    let deadline = stopped + Duration::from_secs(60);
    for (i, w) in workers.into_iter().enumerate() {
        while !w.is_finished() {
            assert!(
                Instant::now() < deadline,
                "worker {i} stuck 60 s after the stop (a waiter never served?)"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        w.join().expect("worker thread");
    }
    let drained_after = stopped.elapsed();
    // Every acquired lock is eventually released or expires (abandoned and orphaned holds
    // end with their lease or the watchdog timeout, as no client renews them any more).
    let grace = Duration::from_millis(MAX_LEASE_MS) + WATCHDOG + Duration::from_secs(2);
    let end = Instant::now() + grace;
    loop {
        let left: Vec<&str> = LOCKS
            .into_iter()
            .filter(|k| rlock_tests::exists(&mut c, k))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "locks still held {grace:?} after every client stopped: {left:?} {:?}",
            left.iter()
                .map(|k| rlock_tests::lock_info(&mut c, k))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(rlock_stat(&mut c, "waiters"), 0, "no waiter left queued");
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);

    let holds = sh.holds.lock().unwrap().clone();
    let forces = sh.forces.lock().unwrap().clone();
    let (checked, mut bad) = check_holds(&holds, &forces);
    bad.extend(sh.violations.lock().unwrap().iter().cloned());
    let st = &sh.stats;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let stat = |c: &mut redis::Connection, f: &str| rlock_stat(c, f);
    println!(
        "soak summary ({:.1} s run, workers drained in {:.2} s, seed {seed}):\n  \
         attempts {} acquired {} not-acquired {} re-entries {} unlocked {} abandoned {} \
         overruns {} force-unlocks {} lost-watchdog-holds {} lost-before-reentry {} \
         unlock-ok-after-lease {} client-errors {} kills {} \
         monitor-samples {}\n  holds recorded {} / checked for overlap {}\n  \
         server: acquired {} handoffs {} grants_after_expiry {} waits_started {} \
         waits_timed_out {} waiters_disconnected {} grants_revoked {} force_releases {} \
         errors {}\n  violations: {}",
        (stopped - started).as_secs_f64(),
        drained_after.as_secs_f64(),
        g(&st.attempts),
        g(&st.acquired),
        g(&st.not_acquired),
        g(&st.reentries),
        g(&st.unlocked),
        g(&st.abandoned),
        g(&st.overruns),
        g(&st.forces),
        g(&st.lost),
        g(&st.split),
        g(&st.unlock_ok_after_lease),
        g(&st.errors),
        g(&st.kills),
        g(&st.monitor_samples),
        holds.len(),
        checked,
        stat(&mut c, "acquired"),
        stat(&mut c, "handoffs"),
        stat(&mut c, "grants_after_expiry"),
        stat(&mut c, "waits_started"),
        stat(&mut c, "waits_timed_out"),
        stat(&mut c, "waiters_disconnected"),
        stat(&mut c, "grants_revoked"),
        stat(&mut c, "force_releases"),
        stat(&mut c, "errors"),
        bad.len(),
    );
    assert!(
        bad.is_empty(),
        "{} violations:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(
        checked as u64 >= secs * 10,
        "too few holds checked ({checked}) for the run to mean anything"
    );
    // A client error needs a cut connection: each worker has its own client with one call in
    // flight, so a kill fails at most that call and the one that meets the cut next (the
    // client retries what it can). Errors beyond that are failures the soak would otherwise
    // swallow.
    assert!(
        g(&st.errors) <= ERRORS_PER_KILL * g(&st.kills),
        "{} client errors for {} kills: more than {ERRORS_PER_KILL} per kill",
        g(&st.errors),
        g(&st.kills)
    );
}

/// At most this many client errors per killed connection (see the end of the soak).
const ERRORS_PER_KILL: u64 = 2;

//! Soak of the whole family (issue 28): a read-write lock, a semaphore with plain and leased
//! permits, a count-down latch and a plain (fenced) lock, all at once, under random faults, with
//! an invariant checker per object.
//!
//! Who drives them, on the same keys at the same time:
//! - threads with one `rlock_client::Client` each (sync API: waits go through the client's session,
//!   `QUEUE ... BLOCK 50`), and tasks on a tokio runtime sharing one client (async API: `QUEUE`
//!   alone), some of whose acquires are cancelled by a timeout (the drop withdraws the request);
//! - child processes running the sync workers (this test binary again, `family_child`), which
//!   are SIGKILLed and respawned, or SIGSTOPped past their session's grace and resumed;
//! - raw `BLOCK` waiters (`RRWLOCK.ACQUIRE`, `RSEM.ACQUIRE ... LEASE`, `RLOCK.ACQUIRE ... FENCE`,
//!   `RLATCH.AWAIT`) on connections the fault thread kills;
//! - Redisson's own scripts (read/write lock, lock, both semaphores, latch countdown and set);
//! - a raw session driver (`RSESSION.OPEN/READ/CANCEL`) that checks every outcome it reads, and
//!   now and then stops reading past its grace so its session expires;
//! - a latch coordinator that closes the latch with a count of 3 and counts it down, cycle after
//!   cycle, while awaiters of every kind wait on it.
//!
//! Faults, each bounded in count by the run's length: `CLIENT KILL` of the clients' pool
//! connections (`rlock`), their session listeners (`rlock-session`), parked `BLOCK` connections
//! and the raw session's listener; `RLOCK.FORCERELEASE` / `RRWLOCK.FORCERELEASE`; `DEBUG SLEEP`
//! (at most 250 ms) and `CLIENT PAUSE ... WRITE` of the server; SIGKILL / SIGSTOP of children;
//! leases shorter than the critical section (holders that overrun, holders that never release).
//!
//! Every hold is recorded by whoever took it as the interval during which it was certainly
//! valid, on CLOCK_MONOTONIC (shared with the children): from the moment the acquire returned to
//! the moment a read of the keys (sent just then) still found it (`Probe`), or, without that
//! proof, to the earliest of its lease end counted from before the acquire was sent, its first
//! release attempt and any force release that may have run after its grant (as `soak.rs`). A hold
//! whose lease ran out is therefore not a hold. The checks:
//! - read-write lock: no interval of a writer overlaps any other hold's (sweep over the records);
//!   sampled keys never show a writer's field beside another owner's;
//! - lock: no two holds overlap; no fencing token handed out twice;
//! - semaphore: the permits of overlapping holds never exceed the total; sampled, `available`
//!   plus the live leases never exceed it; a leased permit whose lease ended cannot be released
//!   by id (it was already returned once); at quiescence every permit is back
//!   (`available == total`, less at most the plain permits the clients counted in doubt,
//!   `Client::permits_in_doubt`, and those of the workers' releases that failed; the pool is
//!   then set back to the total for the next round);
//! - latch: no awaiter that started while the latch was closed passed before the countdown that
//!   opened it was sent; none whose wait outlasted the opening reported it closed;
//! - sessions (raw driver): outcomes numbered without gap or repeat across listener kills, no
//!   request granted twice, no outcome for a cancelled request, an expired session's unread
//!   grants undone; (async client) no hold left to a request cancelled by a dropped future;
//! - every object: never free with waiters queued for long (sampled); at quiescence no waiter
//!   (`waiters`, `session_requests`, `blocked_clients` 0), no session, `timer_jobs` back to its
//!   base, and no key left but the semaphore's count and the fencing token.
//!
//! A run is rounds of at most 30 s (`ROUND_SECS`), each ending in quiescence and every check
//! made there, so a long run checks as strictly as a short one and keeps the semaphore granting.
//!
//! Default run about 30 s (`make test`: one round); `RLOCK_SOAK_SECS` makes it longer
//! (`make soak`), `RLOCK_SOAK_SEED` replays a seed (timing still varies).
//! `RLOCK_SOAK_BREAK=rw|sem|sem-lost|latch|session` breaks one invariant on purpose, to show the
//! checker reports it (the test must then fail; `sem-lost`, one permit lost, only when the
//! clients counted none in doubt in that round).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock_client::Error;
use rlock_tests::redis;
use rlock_tests::redisson;
use rlock_tests::{
    cmd, env_seed, env_u64, info_int, rlock_stat, rwlock_hold, text, token_key, Rng, Server,
};
use rlock_tests::{LockInfo, RwInfo, Value};

const RW: &str = "fam:rw";
const SEM: &str = "fam:sem";
const LATCH: &str = "fam:latch";
const LOCK: &str = "fam:lock";
/// Permits of the semaphore.
const TOTAL: i64 = 4;
/// The latch's count in each cycle.
const LATCH_COUNT: i64 = 3;
const MIN_LEASE_MS: u64 = 40;
const MAX_LEASE_MS: u64 = 400;
const WATCHDOG: Duration = Duration::from_millis(900);
/// Session grace of the children (they are frozen past it) and of the raw session driver.
const CHILD_GRACE_MS: u64 = 1000;
/// Session grace of the in-process clients: longer than any `DEBUG SLEEP`, so only the faults
/// meant to expire a session do.
const PARENT_GRACE: Duration = Duration::from_secs(3);
const MS: u64 = 1_000_000;
/// Allowance for the server's wall clock against CLOCK_MONOTONIC.
const CLOCK_SLACK: u64 = 5 * MS;

const CHILD_URL: &str = "RLOCK_FAMILY_CHILD_URL";
const CHILD_SEED: &str = "RLOCK_FAMILY_CHILD_SEED";
const CHILD_ID: &str = "RLOCK_FAMILY_CHILD_ID";

/// CLOCK_MONOTONIC in ns: one clock for this process and its children (an `Instant` cannot
/// cross a process boundary).
fn now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

fn sleep_until(t: u64) {
    let n = now();
    if t > n {
        std::thread::sleep(Duration::from_nanos(t - n));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Obj {
    Rw,
    Sem,
    Lock,
}

impl Obj {
    fn name(self) -> &'static str {
        match self {
            Obj::Rw => "rwlock",
            Obj::Sem => "semaphore",
            Obj::Lock => "lock",
        }
    }
    fn parse(s: &str) -> Option<Obj> {
        Some(match s {
            "rwlock" => Obj::Rw,
            "semaphore" => Obj::Sem,
            "lock" => Obj::Lock,
            _ => return None,
        })
    }
}

/// One hold as its taker saw it (times in ns of [`now`]).
#[derive(Clone, Debug)]
struct Hold {
    obj: Obj,
    /// Read-write lock: the write side.
    write: bool,
    /// Semaphore: permits held.
    permits: i64,
    /// Lock: the fencing token (0 without one).
    token: u64,
    /// Before the acquire was sent.
    sent: u64,
    /// The acquire returned (the grant came before).
    from: u64,
    /// Certainly held until then (0: unknown).
    to: u64,
    /// `to` comes from a read that found the hold: no force release ended it earlier.
    proven: bool,
    who: String,
    how: String,
}

impl Hold {
    fn line(&self) -> String {
        format!(
            "HOLD {} {} {} {} {} {} {} {} {} {}",
            self.obj.name(),
            self.write as u8,
            self.permits,
            self.token,
            self.sent,
            self.from,
            self.to,
            self.proven as u8,
            self.who,
            self.how
        )
    }
    fn parse(s: &str) -> Option<Hold> {
        let f: Vec<&str> = s.split(' ').collect();
        if f.len() != 11 || f[0] != "HOLD" {
            return None;
        }
        Some(Hold {
            obj: Obj::parse(f[1])?,
            write: f[2] == "1",
            permits: f[3].parse().ok()?,
            token: f[4].parse().ok()?,
            sent: f[5].parse().ok()?,
            from: f[6].parse().ok()?,
            to: f[7].parse().ok()?,
            proven: f[8] == "1",
            who: f[9].to_string(),
            how: f[10].to_string(),
        })
    }
}

/// A latch cycle as the coordinator ran it.
#[derive(Clone, Debug)]
struct Cycle {
    /// The count was set (reply received): closed from here.
    set_reply: u64,
    /// The countdown that opened it was sent: closed until here.
    open_sent: u64,
    /// ... and replied.
    open_reply: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Passed {
    Open,
    Closed,
    Failed,
}

/// One latch await.
#[derive(Clone, Debug)]
struct Await {
    start: u64,
    returned: u64,
    /// The earliest its wait could end by timeout (`None`: no timeout).
    deadline: Option<u64>,
    result: Passed,
    how: &'static str,
}

struct Shared {
    stop: AtomicBool,
    holds: Mutex<Vec<Hold>>,
    /// Force releases: (object, sent, replied).
    forces: Mutex<Vec<(Obj, u64, u64)>>,
    cycles: Mutex<Vec<Cycle>>,
    awaits: Mutex<Vec<Await>>,
    /// (object, what).
    violations: Mutex<Vec<(String, String)>>,
    stats: Mutex<BTreeMap<String, u64>>,
    /// Bumped by every fault that can make a reply ambiguous (a kill, a child kill).
    fault_epoch: AtomicU64,
    /// Bumped by kills of the clients' command connections (`rlock`) only: what can cut a
    /// plain permit's acquire or its give-back (a listener's kill loses no outcome).
    cmd_epoch: AtomicU64,
    /// Plain permits whose fate a fault hid as the workers saw it (an acquire or release with an
    /// unknown outcome, a cancel while a command connection was killed): reported.
    ambiguous_permits: AtomicU64,
    /// What the check allows to be missing at quiescence: the plain permits the clients
    /// counted in doubt (`Client::permits_in_doubt`: replies lost, give-backs failed), plus
    /// those of the workers' own releases that failed (the client leaves those to its caller).
    allowed_missing: AtomicU64,
    brk: String,
}

/// Where a worker reports: the shared state (threads) or stdout lines (children).
#[derive(Clone)]
enum Rec {
    Mem(Arc<Shared>),
    Out,
}

impl Rec {
    fn stopped(&self) -> bool {
        match self {
            Rec::Mem(sh) => sh.stop.load(Ordering::Relaxed),
            Rec::Out => false, // a child runs until its parent kills it
        }
    }
    fn hold(&self, h: Hold) {
        if h.to == 0 || h.to <= h.from {
            self.count(h.obj.name(), "uncertain-holds", 1);
        }
        match self {
            Rec::Mem(sh) => sh.holds.lock().unwrap().push(h),
            Rec::Out => println!("{}", h.line()),
        }
    }
    fn count(&self, obj: &str, what: &str, n: u64) {
        let key = format!("{obj}.{what}");
        match self {
            Rec::Mem(sh) => count(sh, &key, n),
            Rec::Out => println!("STAT {key} {n}"),
        }
    }
    fn bad(&self, obj: &str, what: String) {
        match self {
            Rec::Mem(sh) => violation(sh, obj, what),
            Rec::Out => println!("VIOL {obj} {}", what.replace('\n', " | ")),
        }
    }
    fn ambiguous(&self, permits: u64, why: &str) {
        self.count("semaphore", &format!("in-doubt-{why}"), permits);
        match self {
            Rec::Mem(sh) => {
                sh.ambiguous_permits.fetch_add(permits, Ordering::Relaxed);
                if why == "release-error" {
                    sh.allowed_missing.fetch_add(permits, Ordering::Relaxed);
                }
            }
            Rec::Out => println!("AMBIG {permits}"),
        }
    }
    /// What a client counted in doubt over the round (read once its workers stopped).
    fn client_in_doubt(&self, client: &rlock_client::Client) {
        let n = client.permits_in_doubt();
        self.count("semaphore", "client-in-doubt", n);
        if let Rec::Mem(sh) = self {
            sh.allowed_missing.fetch_add(n, Ordering::Relaxed);
        }
    }
}

fn count(sh: &Shared, key: &str, n: u64) {
    *sh.stats.lock().unwrap().entry(key.to_string()).or_default() += n;
}

fn violation(sh: &Shared, obj: &str, what: String) {
    eprintln!("VIOLATION ({obj}): {what}");
    sh.violations.lock().unwrap().push((obj.to_string(), what));
}

fn connect(url: &str, name: &str) -> redis::Connection {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query(&mut c)
        .unwrap();
    // Bounded: a reply never takes longer than the longest BLOCK plus a DEBUG SLEEP.
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

/// The server's view of a hold, read on a connection no fault kills (names starting with
/// `fam-probe` are spared). `Some(true)` proves the hold lived when the read was sent... or
/// later: the read runs after it was sent, and the hold began before the acquire returned.
struct Probe {
    c: redis::Connection,
}

impl Probe {
    fn new(url: &str) -> Probe {
        Probe {
            c: connect(url, "fam-probe"),
        }
    }

    /// A read hold is live when its owner's field is there and its hold key (its lease) is
    /// (a fresh owner per hold: its only hold is the first); a write hold, when `owner:write`
    /// is there (the hash's TTL is its lease).
    fn rw(&mut self, owner: &str, write: bool) -> Option<bool> {
        let mut p = redis::pipe();
        p.atomic();
        if write {
            p.cmd("HEXISTS").arg(RW).arg(format!("{owner}:write"));
            p.cmd("EXISTS").arg(RW);
        } else {
            p.cmd("HEXISTS").arg(RW).arg(owner);
            p.cmd("EXISTS").arg(rwlock_hold(RW, owner, 1));
        }
        let (a, b): (i64, i64) = p.query(&mut self.c).ok()?;
        Some(a == 1 && b == 1)
    }

    fn lock(&mut self, owner: &str) -> Option<bool> {
        redis::cmd("HEXISTS")
            .arg(LOCK)
            .arg(owner)
            .query::<i64>(&mut self.c)
            .ok()
            .map(|n| n == 1)
    }

    fn held(&mut self, obj: Obj, owner: &str, write: bool) -> Option<bool> {
        match obj {
            Obj::Rw => self.rw(owner, write),
            Obj::Lock => self.lock(owner),
            Obj::Sem => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Sync workers (threads of this process, and children)
// ---------------------------------------------------------------------------------------------

fn build_client(url: &str, grace: Duration) -> rlock_client::Client {
    rlock_client::Client::builder()
        .url(url.to_string())
        .watchdog_timeout(WATCHDOG)
        .session_grace(grace)
        .worker_threads(1)
        .retry(5, Duration::from_millis(20))
        .build()
        .expect("build client")
}

/// A random lease (`None`: the watchdog's) and wait.
fn terms(rng: &mut Rng) -> (Option<u64>, u64, u64) {
    let lease = match rng.below(3) {
        0 => None,
        _ => Some(rng.range(MIN_LEASE_MS, MAX_LEASE_MS)),
    };
    (lease, rng.below(6), rng.range(1, 300))
}

/// A read-write lock side (no tokens) or the fenced lock.
#[derive(Clone, Copy)]
enum Handle<'a> {
    Side(&'a rlock_client::Lock),
    Fenced(&'a rlock_client::FencedLock),
}

/// One hold of a read-write lock side or of the lock, through the sync client, with its fate:
/// released (proven held first), abandoned (never released: ends with its lease), or overrun
/// (released after its lease ended: the server must no longer count it).
fn sync_lock_op(
    rng: &mut Rng,
    rec: &Rec,
    probe: &mut Probe,
    obj: Obj,
    write: bool,
    handle: Handle<'_>,
    who: &str,
) {
    let o = obj.name();
    let lock: &rlock_client::Lock = match handle {
        Handle::Side(l) => l,
        Handle::Fenced(f) => f,
    };
    let owner = lock.owner().as_str().to_string();
    let (lease, mode, wait) = terms(rng);
    let (l, w) = (
        lease.map(Duration::from_millis),
        Duration::from_millis(wait),
    );
    rec.count(o, "ops", 1);
    let sent = now();
    // Rw sides are plain locks (no token); the lock takes tokens.
    let got: Result<Option<u64>, Error> = if let Handle::Fenced(lock) = handle {
        match (mode, l) {
            (0, None) => lock.try_lock_and_get_token(),
            (0, Some(l)) => lock.try_lock_and_get_token_with(Duration::ZERO, l),
            (1, None) => lock.lock_and_get_token().map(Some),
            (1, Some(l)) => lock.lock_and_get_token_with_lease(l).map(Some),
            (_, None) => lock.try_lock_and_get_token_for(w),
            (_, Some(l)) => lock.try_lock_and_get_token_with(w, l),
        }
    } else {
        let b = match (mode, l) {
            (0, None) => lock.try_lock(),
            (0, Some(l)) => lock.try_lock_with(Duration::ZERO, l),
            (1, None) => lock.lock().map(|_| true),
            (1, Some(l)) => lock.lock_with_lease(l).map(|_| true),
            (_, None) => lock.try_lock_for(w),
            (_, Some(l)) => lock.try_lock_with(w, l),
        };
        b.map(|b| b.then_some(0))
    };
    let from = now();
    let token = match got {
        Ok(Some(t)) => t,
        Ok(None) => return rec.count(o, "not-acquired", 1),
        Err(_) => return rec.count(o, "client-errors", 1),
    };
    rec.count(o, "acquired", 1);
    let lease_end = lease.map(|l| sent + l * MS - CLOCK_SLACK);
    let mut h = Hold {
        obj,
        write,
        permits: 0,
        token,
        sent,
        from,
        to: lease_end.unwrap_or(0),
        proven: false,
        who: who.to_string(),
        how: format!(
            "client-{}",
            if lease.is_some() { "lease" } else { "watchdog" }
        ),
    };
    let fate = rng.below(100);
    if let (Some(l), true) = (lease, fate < 4) {
        // A holder that crashed: never releases. Its hold ends with its lease.
        rec.count(o, "abandoned", 1);
        let _ = l;
        h.how = "abandoned".into();
        return rec.hold(h);
    }
    if let (Some(l), true) = (lease, fate < 8) {
        // A holder that overran its lease: the server no longer counts it as a holder.
        rec.count(o, "overruns", 1);
        sleep_until(from + (l + 60) * MS);
        if probe.held(obj, &owner, write) == Some(true) {
            rec.bad(
                o,
                format!(
                    "{who}: owner {owner} ({}) still holds {:.0} ms after its {l} ms lease began",
                    if write { "write" } else { "read/lock" },
                    (now() - from) as f64 / 1e6
                ),
            );
        }
        match lock.unlock() {
            Err(Error::NotOwner { .. }) => {}
            Ok(()) => rec.count(o, "unlock-ok-after-lease", 1),
            Err(_) => rec.count(o, "client-errors", 1),
        }
        h.how = "overrun".into();
        return rec.hold(h);
    }
    sleep_ms(rng.below(15));
    let check = now();
    if probe.held(obj, &owner, write) == Some(true) {
        h.to = check;
        h.proven = true;
    }
    let mut first_try = None;
    for _ in 0..5 {
        first_try.get_or_insert(now());
        match lock.unlock() {
            Ok(()) | Err(Error::NotOwner { .. }) => break,
            Err(_) => {
                rec.count(o, "client-errors", 1);
                sleep_ms(20);
            }
        }
    }
    if !h.proven {
        h.to = match (lease_end, first_try) {
            (Some(e), Some(f)) => e.min(f),
            _ => 0, // a watchdog hold we cannot prove: unknown end
        };
    }
    rec.hold(h);
}

/// Plain permits through the sync client: certainly held from the acquire's return to the
/// release's send (nothing takes plain permits back).
fn sync_sem_plain(rng: &mut Rng, rec: &Rec, client: &rlock_client::Client, who: &str) {
    let sem = client.semaphore(SEM);
    let n = rng.range(1, 2);
    rec.count("semaphore", "ops", 1);
    let sent = now();
    let got = match rng.below(3) {
        0 => sem.try_acquire_many(n),
        _ => sem.try_acquire_many_for(n, Duration::from_millis(rng.range(1, 300))),
    };
    let from = now();
    match got {
        Ok(true) => {}
        Ok(false) => return rec.count("semaphore", "not-acquired", 1),
        Err(_) => {
            // Did it take the permits? Nobody can tell (the client does not send it again).
            rec.count("semaphore", "client-errors", 1);
            return rec.ambiguous(n, "acquire-error");
        }
    }
    rec.count("semaphore", "acquired", 1);
    sleep_ms(rng.below(15));
    let rel = now();
    if sem.release_many(n).is_err() {
        rec.count("semaphore", "client-errors", 1);
        rec.ambiguous(n, "release-error");
    }
    rec.hold(Hold {
        obj: Obj::Sem,
        write: false,
        permits: n as i64,
        token: 0,
        sent,
        from,
        to: rel,
        proven: true,
        who: who.to_string(),
        how: "client-plain".into(),
    });
}

/// A leased permit through the sync client: held until the earlier of its lease end and its
/// release; released after its lease ended, it must be refused (it was returned already).
fn sync_sem_lease(rng: &mut Rng, rec: &Rec, client: &rlock_client::Client, who: &str) {
    let pes = client.permit_expirable_semaphore(SEM);
    let l = rng.range(MIN_LEASE_MS, MAX_LEASE_MS);
    let lease = Duration::from_millis(l);
    rec.count("semaphore", "ops", 1);
    let sent = now();
    let got = match rng.below(3) {
        0 => pes.try_acquire(lease),
        _ => pes.try_acquire_for(Duration::from_millis(rng.range(1, 300)), lease),
    };
    let from = now();
    let id = match got {
        Ok(Some(id)) => id,
        Ok(None) => return rec.count("semaphore", "not-acquired", 1),
        Err(_) => return rec.count("semaphore", "client-errors", 1),
    };
    rec.count("semaphore", "acquired", 1);
    let lease_end = sent + l * MS - CLOCK_SLACK;
    let mut h = Hold {
        obj: Obj::Sem,
        write: false,
        permits: 1,
        token: 0,
        sent,
        from,
        to: lease_end,
        proven: false,
        who: who.to_string(),
        how: "client-lease".into(),
    };
    let fate = rng.below(100);
    if fate < 5 {
        rec.count("semaphore", "abandoned", 1);
        h.how = "abandoned".into();
        return rec.hold(h);
    }
    if fate < 10 {
        rec.count("semaphore", "overruns", 1);
        sleep_until(from + (l + 60) * MS);
        match pes.try_release(id) {
            Ok(false) => {}
            Ok(true) => rec.bad(
                "semaphore",
                format!("{who}: permit {id} released by id after its {l} ms lease ended (returned twice)"),
            ),
            Err(_) => rec.count("semaphore", "client-errors", 1),
        }
        h.how = "overrun".into();
        return rec.hold(h);
    }
    sleep_ms(rng.below(15));
    let rel = now();
    match pes.try_release(id) {
        Ok(_) => {}
        Err(_) => rec.count("semaphore", "client-errors", 1),
    }
    h.to = lease_end.min(rel);
    rec.hold(h);
}

/// A sync worker: one client, random operations on every object that has holds. Children take
/// no plain permits: a process killed while holding them would lose them for good, as it does
/// with Redisson (leased permits come back by themselves).
fn sync_worker(id: &str, url: &str, seed: u64, rec: Rec, grace: Duration, plain: bool) {
    let client = build_client(url, grace);
    let mut probe = Probe::new(url);
    let mut rng = Rng::new(seed);
    while !rec.stopped() {
        let dice = rng.below(100);
        if dice < 40 {
            let rw = client.read_write_lock(RW).with_owner(client.new_owner());
            let write = rng.below(10) < 3;
            let side = if write {
                rw.write_lock()
            } else {
                rw.read_lock()
            };
            let h = Handle::Side(&side);
            sync_lock_op(&mut rng, &rec, &mut probe, Obj::Rw, write, h, id);
        } else if dice < 55 && plain {
            sync_sem_plain(&mut rng, &rec, &client, id);
        } else if dice < 75 {
            sync_sem_lease(&mut rng, &rec, &client, id);
        } else {
            let lock = client.fenced_lock(LOCK).with_owner(client.new_owner());
            let h = Handle::Fenced(&lock);
            sync_lock_op(&mut rng, &rec, &mut probe, Obj::Lock, false, h, id);
        }
    }
    rec.client_in_doubt(&client);
}

// ---------------------------------------------------------------------------------------------
// Async tasks: one client shared by every task, waits over its session (QUEUE), some cancelled
// ---------------------------------------------------------------------------------------------

/// One async worker task. An acquire wrapped in a timeout that fires is dropped: the client
/// withdraws its request (`RSESSION.CANCEL`) and gives back a grant that raced the cancel before
/// the drop returns, so the owner must hold nothing afterwards (unless a fault in between made
/// that give-back fail, which the fault epoch tells).
async fn async_worker(
    id: String,
    client: rlock_client::Client,
    url: String,
    seed: u64,
    sh: Arc<Shared>,
) {
    let rec = Rec::Mem(sh.clone());
    let mut probe = Probe::new(&url);
    let mut rng = Rng::new(seed);
    while !rec.stopped() {
        let dice = rng.below(100);
        let (lease, mode, wait) = terms(&mut rng);
        let l = lease.map(Duration::from_millis);
        let w = Duration::from_millis(wait);
        let mut cancel_after =
            (rng.below(3) == 0).then(|| Duration::from_millis(rng.range(1, 150)));
        let epoch = sh.fault_epoch.load(Ordering::SeqCst);
        let cmd_epoch = sh.cmd_epoch.load(Ordering::SeqCst);
        if (60..80).contains(&dice) && !sem_cancels() {
            // Plain permits of a dropped acquire leaked before the client finished the acquire
            // in flight (a_dropped_async_acquire_granted_at_once_gives_its_permits_back):
            // cancels are on unless RLOCK_SOAK_SEM_CANCEL=0.
            cancel_after = None;
        }
        if dice < 60 {
            // Read-write lock (60%: writers) or lock.
            let (obj, write) = if dice < 40 {
                (Obj::Rw, rng.below(10) < 3)
            } else {
                (Obj::Lock, false)
            };
            let o = obj.name();
            let owner = client.new_owner();
            let lock = match obj {
                Obj::Rw => {
                    let rw = client.async_read_write_lock(RW).with_owner(owner.clone());
                    if write {
                        rw.write_lock()
                    } else {
                        rw.read_lock()
                    }
                }
                _ => client.async_lock(LOCK).with_owner(owner.clone()),
            };
            rec.count(o, "ops", 1);
            let sent = now();
            let fut = async {
                match (mode, l) {
                    (0, None) => lock.try_lock().await,
                    (0, Some(l)) => lock.try_lock_with(Duration::ZERO, l).await,
                    (1, None) => lock.lock().await.map(|_| true),
                    (1, Some(l)) => lock.lock_with_lease(l).await.map(|_| true),
                    (_, None) => lock.try_lock_for(w).await,
                    (_, Some(l)) => lock.try_lock_with(w, l).await,
                }
            };
            let got = match cancel_after {
                Some(c) => match tokio::time::timeout(c, fut).await {
                    Ok(r) => r,
                    Err(_) => {
                        // Cancelled: no grant may be left to this owner.
                        rec.count(o, "cancelled", 1);
                        rec.count("session", "checked", 1);
                        let held = probe.held(obj, owner.as_str(), write);
                        if held == Some(true) {
                            if sh.fault_epoch.load(Ordering::SeqCst) == epoch {
                                rec.bad(
                                    "session",
                                    format!(
                                        "{id}: {o} held by {} after its acquire was cancelled",
                                        owner.as_str()
                                    ),
                                );
                            } else {
                                rec.count("session", "cancel-ambiguous", 1);
                            }
                        }
                        continue;
                    }
                },
                None => fut.await,
            };
            let from = now();
            match got {
                Ok(true) => {}
                Ok(false) => {
                    rec.count(o, "not-acquired", 1);
                    continue;
                }
                Err(_) => {
                    rec.count(o, "client-errors", 1);
                    continue;
                }
            }
            rec.count(o, "acquired", 1);
            tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
            let check = now();
            let proven = probe.held(obj, owner.as_str(), write) == Some(true);
            let first_try = now();
            let mut unlocked = false;
            for _ in 0..5 {
                match lock.unlock().await {
                    Ok(()) | Err(Error::NotOwner { .. }) => {
                        unlocked = true;
                        break;
                    }
                    Err(_) => rec.count(o, "client-errors", 1),
                }
            }
            let _ = unlocked;
            let to = if proven {
                check
            } else {
                lease.map_or(0, |l| (sent + l * MS - CLOCK_SLACK).min(first_try))
            };
            rec.hold(Hold {
                obj,
                write,
                permits: 0,
                token: 0,
                sent,
                from,
                to,
                proven,
                who: id.clone(),
                how: "async".into(),
            });
        } else if dice < 80 {
            // Plain permits.
            let sem = client.async_semaphore(SEM);
            let n = rng.range(1, 2);
            rec.count("semaphore", "ops", 1);
            let sent = now();
            let fut = sem.try_acquire_many_for(n, w);
            let got = match cancel_after {
                Some(c) => match tokio::time::timeout(c, fut).await {
                    Ok(r) => r,
                    Err(_) => {
                        // A raced grant is given back before the drop returns; a fault in
                        // between may have kept it (then conservation allows for it).
                        rec.count("semaphore", "cancelled", 1);
                        if sh.cmd_epoch.load(Ordering::SeqCst) != cmd_epoch {
                            rec.ambiguous(n, "cancel-under-fault");
                        }
                        continue;
                    }
                },
                None => fut.await,
            };
            let from = now();
            match got {
                Ok(true) => {}
                Ok(false) => {
                    rec.count("semaphore", "not-acquired", 1);
                    continue;
                }
                Err(_) => {
                    rec.count("semaphore", "client-errors", 1);
                    rec.ambiguous(n, "acquire-error");
                    continue;
                }
            }
            rec.count("semaphore", "acquired", 1);
            tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
            let rel = now();
            if sem.release_many(n).await.is_err() {
                rec.count("semaphore", "client-errors", 1);
                rec.ambiguous(n, "release-error");
            }
            rec.hold(Hold {
                obj: Obj::Sem,
                write: false,
                permits: n as i64,
                token: 0,
                sent,
                from,
                to: rel,
                proven: true,
                who: id.clone(),
                how: "async-plain".into(),
            });
        } else {
            // A leased permit.
            let pes = client.async_permit_expirable_semaphore(SEM);
            let lm = rng.range(MIN_LEASE_MS, MAX_LEASE_MS);
            rec.count("semaphore", "ops", 1);
            let sent = now();
            let fut = pes.try_acquire_for(w, Duration::from_millis(lm));
            let got = match cancel_after {
                Some(c) => match tokio::time::timeout(c, fut).await {
                    Ok(r) => r,
                    Err(_) => {
                        rec.count("semaphore", "cancelled", 1);
                        continue;
                    }
                },
                None => fut.await,
            };
            let from = now();
            let pid = match got {
                Ok(Some(pid)) => pid,
                Ok(None) => {
                    rec.count("semaphore", "not-acquired", 1);
                    continue;
                }
                Err(_) => {
                    rec.count("semaphore", "client-errors", 1);
                    continue;
                }
            };
            rec.count("semaphore", "acquired", 1);
            tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
            let rel = now();
            if pes.try_release(pid).await.is_err() {
                rec.count("semaphore", "client-errors", 1);
            }
            rec.hold(Hold {
                obj: Obj::Sem,
                write: false,
                permits: 1,
                token: 0,
                sent,
                from,
                to: (sent + lm * MS - CLOCK_SLACK).min(rel),
                proven: false,
                who: id.clone(),
                how: "async-lease".into(),
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Raw BLOCK waiters (their connections are killed while parked)
// ---------------------------------------------------------------------------------------------

fn req(c: &mut redis::Connection, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
    use redis::ConnectionLike;
    c.req_command(cmd)
}

fn block_worker(id: String, url: String, seed: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut rng = Rng::new(seed);
    let mut probe = Probe::new(&url);
    let mut c = connect(&url, "fam-block");
    let mut n = 0u64;
    while !rec.stopped() {
        n += 1;
        let owner = format!("{id}-{n}");
        let l = rng.range(MIN_LEASE_MS, MAX_LEASE_MS);
        let t = rng.range(1, 300);
        let dice = rng.below(3);
        let (obj, write, cmd) = match dice {
            0 => {
                let write = rng.below(10) < 3;
                let side = if write { "WRITE" } else { "READ" };
                (
                    Obj::Rw,
                    write,
                    cmd!("RRWLOCK.ACQUIRE", RW, &owner, side, l, "BLOCK", t),
                )
            }
            1 => (
                Obj::Sem,
                false,
                cmd!("RSEM.ACQUIRE", SEM, "LEASE", l, "BLOCK", t),
            ),
            _ => (
                Obj::Lock,
                false,
                cmd!("RLOCK.ACQUIRE", LOCK, &owner, l, "BLOCK", t, "FENCE"),
            ),
        };
        let o = obj.name();
        rec.count(o, "ops", 1);
        let sent = now();
        let reply = req(&mut c, &cmd);
        let from = now();
        let (token, ids) = match reply {
            Ok(Value::Nil) => {
                rec.count(o, "not-acquired", 1);
                continue;
            }
            Ok(Value::Int(v)) => (v as u64, vec![]),
            Ok(Value::Array(v)) => (0, v.iter().filter_map(text).collect::<Vec<_>>()),
            Ok(other) => {
                rec.bad(
                    o,
                    format!("{}: unexpected reply {other:?}", rlock_tests::show(&cmd)),
                );
                continue;
            }
            Err(_) => {
                // Killed while parked (or while the reply was on its way): unknown, and the
                // owner is never used again; a grant ends with its lease.
                rec.count(o, "block-killed", 1);
                c = connect(&url, "fam-block");
                continue;
            }
        };
        rec.count(o, "acquired", 1);
        let lease_end = sent + l * MS - CLOCK_SLACK;
        sleep_ms(rng.below(15));
        let check = now();
        let proven = obj != Obj::Sem && probe.held(obj, &owner, write) == Some(true);
        let rel = now();
        let release = match obj {
            Obj::Rw => cmd!(
                "RRWLOCK.RELEASE",
                RW,
                &owner,
                if write { "WRITE" } else { "READ" }
            ),
            Obj::Lock => cmd!("RLOCK.RELEASE", LOCK, &owner),
            Obj::Sem => {
                let mut r = cmd!("RSEM.RELEASE", SEM, "ID");
                for i in &ids {
                    r.arg(i);
                }
                r
            }
        };
        match req(&mut c, &release) {
            Ok(Value::ServerError(e)) => {
                // Only a permit whose lease ended may be refused: one released before its
                // lease could end (the reply came back before it) must be taken back.
                if obj == Obj::Sem && now() < lease_end && rec_brk_none(&sh) {
                    rec.bad(
                        o,
                        format!("{id}: live leased permit {ids:?} refused on release: {e:?}"),
                    );
                }
            }
            Ok(_) => {}
            Err(_) => {
                rec.count(o, "block-killed", 1);
                c = connect(&url, "fam-block");
            }
        }
        let to = if proven { check } else { lease_end.min(rel) };
        rec.hold(Hold {
            obj,
            write,
            permits: 1,
            token,
            sent,
            from,
            to,
            proven,
            who: id.clone(),
            how: "block".into(),
        });
    }
}

fn rec_brk_none(sh: &Shared) -> bool {
    sh.brk.is_empty()
}

// ---------------------------------------------------------------------------------------------
// Redisson's scripts on the same keys (a connection no fault kills: the helpers panic on a
// broken connection)
// ---------------------------------------------------------------------------------------------

fn redisson_worker(url: String, seed: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut rng = Rng::new(seed);
    let mut probe = Probe::new(&url);
    let mut c = connect(&url, "fam-redisson");
    let mut n = 0u64;
    let mut broke = false;
    while !rec.stopped() {
        n += 1;
        let owner = format!("redisson-{n}");
        let l = rng.range(MIN_LEASE_MS, MAX_LEASE_MS) as i64;
        let dice = rng.below(100);
        let sent = now();
        if dice < 50 {
            let (obj, write) = if dice < 35 {
                (Obj::Rw, rng.below(10) < 3)
            } else {
                (Obj::Lock, false)
            };
            let o = obj.name();
            rec.count(o, "ops", 1);
            rec.count(o, "redisson-ops", 1);
            // Redisson polls (it waits for a publish); a few tries, then gives up.
            let mut got = false;
            let mut sent = sent;
            for _ in 0..5 {
                sent = now();
                let r = match (obj, write) {
                    (Obj::Rw, false) => redisson::read_acquire(&mut c, RW, &owner, l),
                    (Obj::Rw, true) => redisson::write_acquire(&mut c, RW, &owner, l),
                    _ => redisson::acquire(&mut c, LOCK, &owner, l),
                };
                if r == Value::Nil {
                    got = true;
                    break;
                }
                sleep_ms(rng.range(2, 20));
            }
            let from = now();
            if !got {
                rec.count(o, "not-acquired", 1);
                continue;
            }
            rec.count(o, "acquired", 1);
            sleep_ms(rng.below(15));
            let check = now();
            let proven = probe.held(obj, &owner, write) == Some(true);
            let rel = now();
            let _ = match (obj, write) {
                (Obj::Rw, false) => redisson::read_unlock(&mut c, RW, &owner),
                (Obj::Rw, true) => redisson::write_unlock(&mut c, RW, &owner, l),
                _ => redisson::unlock(&mut c, LOCK, &owner, l),
            };
            rec.hold(Hold {
                obj,
                write,
                permits: 0,
                token: 0,
                sent,
                from,
                to: if proven {
                    check
                } else {
                    (sent + l as u64 * MS - CLOCK_SLACK).min(rel)
                },
                proven,
                who: "redisson".into(),
                how: "script".into(),
            });
        } else if dice < 75 {
            rec.count("semaphore", "ops", 1);
            rec.count("semaphore", "redisson-ops", 1);
            if redisson::semaphore::try_acquire(&mut c, SEM, 1) != 1 {
                rec.count("semaphore", "not-acquired", 1);
                continue;
            }
            let from = now();
            rec.count("semaphore", "acquired", 1);
            sleep_ms(rng.below(15));
            let rel = now();
            redisson::semaphore::release(&mut c, SEM, 1);
            rec.hold(Hold {
                obj: Obj::Sem,
                write: false,
                permits: 1,
                token: 0,
                sent,
                from,
                to: rel,
                proven: true,
                who: "redisson".into(),
                how: "script-plain".into(),
            });
        } else {
            rec.count("semaphore", "ops", 1);
            rec.count("semaphore", "redisson-ops", 1);
            let (r, ids) = redisson::semaphore::lease(&mut c, SEM, 1, Some(l));
            let from = now();
            if !matches!(r, Value::Okay) && text(&r).as_deref() != Some("OK") {
                rec.count("semaphore", "not-acquired", 1);
                continue;
            }
            rec.count("semaphore", "acquired", 1);
            let lease_end = sent + l as u64 * MS - CLOCK_SLACK;
            sleep_ms(rng.below(15));
            let rel = now();
            redisson::semaphore::try_release(&mut c, SEM, &ids[0]);
            rec.hold(Hold {
                obj: Obj::Sem,
                write: false,
                permits: 1,
                token: 0,
                sent,
                from,
                to: lease_end.min(rel),
                proven: false,
                who: "redisson".into(),
                how: "script-lease".into(),
            });
        }
        // RLOCK_SOAK_BREAK: once, after a second, break an invariant the way a buggy server
        // would, to show the checker catches it.
        if !broke && now() > started() + 1_000 * MS {
            broke = true;
            match sh.brk.as_str() {
                // A writer let in whatever the lock holds (kept proven by its own reads).
                "rw" => {
                    let o = "redisson-break";
                    for _ in 0..50 {
                        let from = now();
                        let mut p = redis::pipe();
                        p.cmd("HSET").arg(RW).arg("mode").arg("write");
                        p.cmd("HSET").arg(RW).arg(format!("{o}:write")).arg(1);
                        p.cmd("PEXPIRE").arg(RW).arg(100);
                        let _: redis::RedisResult<Value> = p.query(&mut c);
                        sleep_ms(10);
                        rec.hold(Hold {
                            obj: Obj::Rw,
                            write: true,
                            permits: 0,
                            token: 0,
                            sent: from,
                            from,
                            to: now(),
                            proven: true,
                            who: "break".into(),
                            how: "break".into(),
                        });
                        let _: redis::RedisResult<Value> = req(&mut c, &cmd!("DEL", RW));
                    }
                }
                // A permit minted.
                "sem" => {
                    let _ = req(&mut c, &cmd!("INCRBY", SEM, 1));
                }
                // One permit lost, as a grant nobody received would be.
                "sem-lost" => {
                    let _ = req(&mut c, &cmd!("DECRBY", SEM, 1));
                }
                _ => {}
            }
        }
    }
}

/// Whether async plain-permit acquires are cancelled too (`RLOCK_SOAK_SEM_CANCEL=0`: not).
fn sem_cancels() -> bool {
    // On by default since the leak they found was fixed; `RLOCK_SOAK_SEM_CANCEL=0` turns them off.
    std::env::var("RLOCK_SOAK_SEM_CANCEL").map_or(true, |v| v != "0")
}

/// When the run started (set first thing by the test).
fn started() -> u64 {
    *START.get_or_init(now)
}

static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

// ---------------------------------------------------------------------------------------------
// The raw session driver: every outcome checked
// ---------------------------------------------------------------------------------------------

/// A request the driver queued and has not seen end.
#[derive(Clone, Debug)]
struct Queued {
    obj: Obj,
    owner: String,
    write: bool,
    lease_ms: u64,
    sent: u64,
}

/// A grant the driver holds.
struct Granted {
    q: Queued,
    ids: Vec<String>,
    /// The grant came after this (the request was sent, or a complete read did not return it).
    after: u64,
    from: u64,
    release_at: u64,
}

const SESSION: &str = "fam-raw-session";

fn open_session(c: &mut redis::Connection) -> redis::RedisResult<bool> {
    let v = req(c, &cmd!("RSESSION.OPEN", SESSION, CHILD_GRACE_MS))?;
    let pairs = rlock_tests::info_pairs(
        "RSESSION.OPEN",
        &v,
        &["resumed", "acked", "last", "pending"],
    );
    Ok(pairs[0].1 == Value::Int(1))
}

fn session_driver(url: String, seed: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut rng = Rng::new(seed);
    let mut probe = Probe::new(&url);
    let mut cq = connect(&url, "fam-sessreq");
    let mut listener = connect(&url, "fam-listener");
    open_session(&mut listener).unwrap();
    let mut cursor = 0i64;
    let mut next_req = 1i64;
    let mut outstanding: HashMap<i64, Queued> = HashMap::new();
    let mut cancelled: HashSet<i64> = HashSet::new();
    let mut granted_reqs: HashSet<i64> = HashSet::new();
    let mut held: Vec<Granted> = Vec::new();
    let mut complete_read = 0u64;
    let mut freezes = 0u64;
    let mut duplicated = false;
    // A read's reply was lost with its connection since the last read that arrived: the server
    // counts what it returned as delivered (the reader's), though this driver never saw it.
    let mut lost_reply = false;
    let obj_s = "session";
    // The session ended (grace): its queued requests left their queues, its unread grants were
    // undone. None of the requests it had queued may hold anything now.
    let expired = |why: &str,
                   lost_reply: bool,
                   outstanding: &mut HashMap<i64, Queued>,
                   probe: &mut Probe,
                   cursor: &mut i64,
                   listener: &mut redis::Connection| {
        rec.count(obj_s, &format!("expired-{why}"), 1);
        for (r, q) in outstanding.drain() {
            if lost_reply {
                // Its grant may be in the lost reply: the holder's own, not undone.
                rec.count(obj_s, "expiry-unchecked", 1);
                continue;
            }
            rec.count(obj_s, "checked", 1);
            if probe.held(q.obj, &q.owner, q.write) == Some(true) {
                rec.bad(
                    obj_s,
                    format!(
                        "request {r} ({} {}) still holds after its session expired unread",
                        q.obj.name(),
                        q.owner
                    ),
                );
            }
        }
        *cursor = 0;
        let _ = open_session(listener);
    };
    while !rec.stopped() {
        // Queue a request (a few at a time).
        if outstanding.len() < 3 && rng.below(2) == 0 {
            let r = next_req;
            next_req += 1;
            let owner = format!("ses-{r}");
            let l = rng.range(MIN_LEASE_MS, MAX_LEASE_MS);
            let timeout = if rng.below(3) == 0 {
                0
            } else {
                rng.range(50, 1000)
            };
            let (obj, write, mut cmd) = match rng.below(3) {
                0 => {
                    let write = rng.below(10) < 3;
                    let side = if write { "WRITE" } else { "READ" };
                    (Obj::Rw, write, cmd!("RRWLOCK.ACQUIRE", RW, &owner, side, l))
                }
                1 => (Obj::Sem, false, cmd!("RSEM.ACQUIRE", SEM, "LEASE", l)),
                _ => (Obj::Lock, false, cmd!("RLOCK.ACQUIRE", LOCK, &owner, l)),
            };
            cmd.arg("SESSION")
                .arg(SESSION)
                .arg("QUEUE")
                .arg(r)
                .arg(timeout);
            rec.count(obj_s, "ops", 1);
            rec.count(obj.name(), "ops", 1);
            let q = Queued {
                obj,
                owner,
                write,
                lease_ms: l,
                sent: now(),
            };
            match req(&mut cq, &cmd) {
                Ok(Value::Int(_)) => {
                    let from = now();
                    held.push(Granted {
                        after: q.sent,
                        ids: vec![],
                        q,
                        from,
                        release_at: from + rng.below(30) * MS,
                    });
                }
                Ok(Value::Array(v)) => {
                    let from = now();
                    held.push(Granted {
                        after: q.sent,
                        ids: v.iter().filter_map(text).collect(),
                        q,
                        from,
                        release_at: from + rng.below(30) * MS,
                    });
                }
                Ok(v) if text(&v).as_deref() == Some("QUEUED") => {
                    outstanding.insert(r, q);
                }
                Ok(Value::Nil) => {} // not queued: nil is an immediate "no" only without QUEUE
                Ok(Value::ServerError(e)) if format!("{e:?}").contains("NOSESSION") => {
                    expired(
                        "on-queue",
                        lost_reply,
                        &mut outstanding,
                        &mut probe,
                        &mut cursor,
                        &mut listener,
                    );
                }
                Ok(other) => rec.bad(obj_s, format!("queue reply {other:?}")),
                Err(e) => panic!("the session's request connection failed: {e}"),
            }
        }
        // Withdraw one now and then: 1 means it gets no outcome, ever.
        if !outstanding.is_empty() && rng.below(8) == 0 {
            let r = *outstanding
                .keys()
                .nth(rng.index(outstanding.len()))
                .unwrap();
            match req(&mut cq, &cmd!("RSESSION.CANCEL", SESSION, r)) {
                Ok(Value::Int(1)) => {
                    outstanding.remove(&r);
                    cancelled.insert(r);
                    rec.count(obj_s, "cancelled", 1);
                }
                Ok(_) => {} // its outcome is on its way
                Err(e) => panic!("the session's request connection failed: {e}"),
            }
        }
        // Freeze past the grace now and then (a process stopped): the session must expire.
        if !lost_reply && freezes < 1 + (now() - started()) / (8_000 * MS) && rng.below(150) == 0 {
            freezes += 1;
            rec.count(obj_s, "frozen-past-grace", 1);
            sleep_ms(CHILD_GRACE_MS + 400);
            match req(&mut cq, &cmd!("RSESSION.INFO", SESSION)) {
                Ok(Value::ServerError(_)) => expired(
                    "after-freeze",
                    lost_reply,
                    &mut outstanding,
                    &mut probe,
                    &mut cursor,
                    &mut listener,
                ),
                _ => rec.count(obj_s, "survived-freeze", 1),
            }
        }
        // Read outcomes: numbered from the cursor on, no gap, no repeat.
        let mut read_from = cursor;
        if sh.brk == "session" && !duplicated && cursor > 3 {
            // RLOCK_SOAK_BREAK=session: read again what was acknowledged, as a server
            // delivering twice would.
            duplicated = true;
            read_from = cursor - 2;
        }
        let read_sent = now();
        let r = req(
            &mut listener,
            &cmd!(
                "RSESSION.READ",
                SESSION,
                read_from,
                "COUNT",
                100,
                "BLOCK",
                30
            ),
        );
        let outcomes = match r {
            Ok(Value::Array(v)) => v,
            Ok(Value::ServerError(e)) if format!("{e:?}").contains("NOSESSION") => {
                expired(
                    "on-read",
                    lost_reply,
                    &mut outstanding,
                    &mut probe,
                    &mut cursor,
                    &mut listener,
                );
                continue;
            }
            Ok(other) => {
                rec.bad(obj_s, format!("read reply {other:?}"));
                continue;
            }
            Err(_) => {
                // Listener killed: reconnect, resume, read again from the cursor.
                rec.count(obj_s, "listener-killed", 1);
                lost_reply = true;
                listener = connect(&url, "fam-listener");
                match open_session(&mut listener) {
                    Ok(true) => {}
                    Ok(false) => expired(
                        "on-reopen",
                        lost_reply,
                        &mut outstanding,
                        &mut probe,
                        &mut cursor,
                        &mut listener,
                    ),
                    Err(_) => {}
                }
                continue;
            }
        };
        let got_at = now();
        lost_reply = false;
        let complete = outcomes.len() < 100;
        for o in &outcomes {
            let f = match o {
                Value::Array(f) if f.len() == 6 => f.clone(),
                other => {
                    rec.bad(obj_s, format!("outcome {other:?}"));
                    continue;
                }
            };
            rec.count(obj_s, "checked", 1);
            let seq = match f[0] {
                Value::Int(n) => n,
                _ => -1,
            };
            if seq != cursor + 1 {
                rec.bad(
                    obj_s,
                    format!(
                        "outcome {seq} read after cursor {cursor}: delivered twice or lost: {f:?}"
                    ),
                );
            }
            cursor = cursor.max(seq);
            let kind = text(&f[1]).unwrap_or_default();
            let r = match f[2] {
                Value::Int(n) => n,
                _ => -1,
            };
            rec.count(obj_s, &format!("outcome-{kind}"), 1);
            if matches!(kind.as_str(), "granted" | "timeout" | "error") {
                if cancelled.contains(&r) {
                    rec.bad(obj_s, format!("outcome {f:?} for cancelled request {r}"));
                }
                if kind == "granted" && !granted_reqs.insert(r) {
                    rec.bad(obj_s, format!("request {r} granted twice: {f:?}"));
                }
            }
            let q = match kind.as_str() {
                "granted" | "timeout" | "error" => match outstanding.remove(&r) {
                    Some(q) => q,
                    None => {
                        if !cancelled.contains(&r) {
                            rec.bad(obj_s, format!("outcome {f:?} for no queued request"));
                        }
                        continue;
                    }
                },
                _ => continue, // lost, overflow: counted
            };
            if kind != "granted" {
                continue;
            }
            let key = text(&f[3]).unwrap_or_default();
            let want = match q.obj {
                Obj::Rw => RW,
                Obj::Sem => SEM,
                Obj::Lock => LOCK,
            };
            if key != want {
                rec.bad(
                    obj_s,
                    format!("request {r} granted on {key}, queued on {want}"),
                );
            }
            let ids = match &f[4] {
                Value::Array(v) => v.iter().filter_map(text).collect(),
                _ => vec![],
            };
            held.push(Granted {
                after: q.sent.max(complete_read),
                q,
                ids,
                from: got_at,
                release_at: got_at + rng.below(30) * MS,
            });
        }
        if complete {
            complete_read = read_sent;
        }
        // Release what is due (proven first).
        let t = now();
        let (due, keep): (Vec<Granted>, Vec<Granted>) = held
            .drain(..)
            .partition(|g| g.release_at <= t || rec.stopped());
        held = keep;
        for g in due {
            release_granted(&rec, &mut probe, &mut cq, g);
        }
    }
    for g in held.drain(..) {
        release_granted(&rec, &mut probe, &mut cq, g);
    }
    for r in outstanding.keys() {
        let _ = req(&mut cq, &cmd!("RSESSION.CANCEL", SESSION, *r));
    }
    let _ = req(&mut cq, &cmd!("RSESSION.CLOSE", SESSION));
}

fn release_granted(rec: &Rec, probe: &mut Probe, cq: &mut redis::Connection, g: Granted) {
    let q = &g.q;
    rec.count(q.obj.name(), "acquired", 1);
    let check = now();
    let proven = probe.held(q.obj, &q.owner, q.write) == Some(true);
    let rel = now();
    let cmd = match q.obj {
        Obj::Rw => cmd!(
            "RRWLOCK.RELEASE",
            RW,
            &q.owner,
            if q.write { "WRITE" } else { "READ" }
        ),
        Obj::Lock => cmd!("RLOCK.RELEASE", LOCK, &q.owner),
        Obj::Sem => {
            let mut c = cmd!("RSEM.RELEASE", SEM, "ID");
            for i in &g.ids {
                c.arg(i);
            }
            c
        }
    };
    let _ = req(cq, &cmd);
    let lease_end = g.after + q.lease_ms * MS - CLOCK_SLACK;
    rec.hold(Hold {
        obj: q.obj,
        write: q.write,
        permits: 1,
        token: 0,
        sent: q.sent,
        from: g.from,
        to: if proven { check } else { lease_end.min(rel) },
        proven,
        who: "raw-session".into(),
        how: "session".into(),
    });
}

// ---------------------------------------------------------------------------------------------
// The latch: a coordinator closes and opens it, awaiters of every kind wait on it
// ---------------------------------------------------------------------------------------------

/// Cycle after cycle: set the count (client, raw or Redisson's script), count it down to 0
/// (the same three ways), record when it was closed and when the opening countdown was sent.
/// Its connections are spared by the faults; a client call that fails anyway voids the cycle.
fn latch_coordinator(url: String, seed: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut rng = Rng::new(seed);
    let client = build_client(&url, PARENT_GRACE);
    let latch = client.count_down_latch(LATCH);
    let mut c = connect(&url, "fam-coord");
    while !rec.stopped() {
        sleep_ms(rng.range(20, 150));
        let set = match rng.below(3) {
            0 => latch.try_set_count(LATCH_COUNT as u64).ok(),
            1 => match req(&mut c, &cmd!("RLATCH.TRYSETCOUNT", LATCH, LATCH_COUNT)) {
                Ok(Value::Int(n)) => Some(n == 1),
                _ => None,
            },
            _ => Some(redisson::latch::try_set_count(&mut c, LATCH, LATCH_COUNT) == 1),
        };
        match set {
            Some(true) => {}
            Some(false) => {
                rec.bad("latch", "the latch was still closed between cycles".into());
                let _ = req(&mut c, &cmd!("DEL", LATCH));
                continue;
            }
            None => {
                rec.count("latch", "client-errors", 1);
                let _ = req(&mut c, &cmd!("DEL", LATCH));
                continue;
            }
        }
        let set_reply = now();
        rec.count("latch", "cycles", 1);
        sleep_ms(rng.range(50, 300));
        let mut ok = true;
        let (mut open_sent, mut open_reply) = (0, 0);
        for i in 1..=LATCH_COUNT {
            sleep_ms(rng.below(80));
            let sent = now();
            let left = match rng.below(3) {
                0 => latch.count_down().ok().map(|_| LATCH_COUNT - i),
                1 => match req(&mut c, &cmd!("RLATCH.COUNTDOWN", LATCH)) {
                    Ok(Value::Int(n)) => Some(n),
                    _ => None,
                },
                _ => {
                    redisson::latch::count_down(&mut c, LATCH);
                    Some(LATCH_COUNT - i)
                }
            };
            rec.count("latch", "ops", 1);
            match left {
                Some(n) if n == LATCH_COUNT - i => {}
                Some(n) => {
                    rec.bad("latch", format!("countdown {i} of {LATCH_COUNT} left {n}"));
                    ok = false;
                }
                None => {
                    rec.count("latch", "client-errors", 1);
                    ok = false;
                    break;
                }
            }
            if i == LATCH_COUNT {
                (open_sent, open_reply) = (sent, now());
            }
            if i == 1 && sh.brk == "latch" {
                // RLATCH_SOAK_BREAK=latch: opened before its count reached 0.
                let _ = req(&mut c, &cmd!("DEL", LATCH));
            }
        }
        if !ok {
            // Void: open it whatever its count, and check no await against this cycle.
            let _ = req(&mut c, &cmd!("DEL", LATCH));
            continue;
        }
        sh.cycles.lock().unwrap().push(Cycle {
            set_reply,
            open_sent,
            open_reply,
        });
    }
}

/// Awaits of the latch on every path: the sync client (session, `QUEUE ... BLOCK`), raw
/// `RLATCH.AWAIT ... BLOCK` (its connection killed by the faults), raw `RLATCH.AWAIT` without
/// BLOCK (a look).
fn latch_awaiter(id: String, url: String, seed: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut rng = Rng::new(seed);
    let client = build_client(&url, PARENT_GRACE);
    let latch = client.count_down_latch(LATCH);
    let mut c = connect(&url, "fam-block");
    while !rec.stopped() {
        sleep_ms(rng.below(60));
        let t = rng.range(50, 2000);
        let start = now();
        let (result, deadline, how) = match rng.below(4) {
            0 => match latch.wait_for(Duration::from_millis(t)) {
                Ok(true) => (Passed::Open, Some(start + t * MS), "client"),
                Ok(false) => (Passed::Closed, Some(start + t * MS), "client"),
                Err(_) => (Passed::Failed, None, "client"),
            },
            1 if rng.below(4) == 0 => match latch.wait() {
                Ok(()) => (Passed::Open, None, "client-forever"),
                Err(_) => (Passed::Failed, None, "client-forever"),
            },
            2 => match req(&mut c, &cmd!("RLATCH.AWAIT", LATCH)) {
                Ok(Value::Int(1)) => (Passed::Open, Some(start), "look"),
                Ok(Value::Nil) => (Passed::Closed, Some(start), "look"),
                _ => {
                    c = connect(&url, "fam-block");
                    (Passed::Failed, None, "look")
                }
            },
            _ => match req(&mut c, &cmd!("RLATCH.AWAIT", LATCH, "BLOCK", t)) {
                Ok(Value::Int(1)) => (Passed::Open, Some(start + t * MS), "block"),
                Ok(Value::Nil) => (Passed::Closed, Some(start + t * MS), "block"),
                _ => {
                    rec.count("latch", "block-killed", 1);
                    c = connect(&url, "fam-block");
                    (Passed::Failed, None, "block")
                }
            },
        };
        rec.count("latch", "awaits", 1);
        let _ = &id;
        sh.awaits.lock().unwrap().push(Await {
            start,
            returned: now(),
            deadline,
            result,
            how,
        });
    }
}

/// Async awaits of the latch (the client's session, `QUEUE` alone), some cancelled.
async fn async_latch_awaiter(client: rlock_client::Client, seed: u64, sh: Arc<Shared>) {
    let mut rng = Rng::new(seed);
    let latch = client.async_count_down_latch(LATCH);
    while !sh.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        let t = rng.range(50, 2000);
        let start = now();
        let (result, deadline) = if rng.below(5) == 0 {
            // Cancelled by a timeout of its own: it must simply end.
            match tokio::time::timeout(Duration::from_millis(t), latch.wait()).await {
                Ok(Ok(())) => (Passed::Open, None),
                Ok(Err(_)) => (Passed::Failed, None),
                Err(_) => {
                    count(&sh, "latch.cancelled", 1);
                    (Passed::Failed, None)
                }
            }
        } else {
            match latch.wait_for(Duration::from_millis(t)).await {
                Ok(true) => (Passed::Open, Some(start + t * MS)),
                Ok(false) => (Passed::Closed, Some(start + t * MS)),
                Err(_) => (Passed::Failed, None),
            }
        };
        count(&sh, "latch.awaits", 1);
        sh.awaits.lock().unwrap().push(Await {
            start,
            returned: now(),
            deadline,
            result,
            how: "async",
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The monitor: atomic samples of every object's keys
// ---------------------------------------------------------------------------------------------

fn monitor(url: String, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut c = connect(&url, "fam-monitor");
    let timeouts = redisson::semaphore::timeouts(SEM);
    // Since when each object has been seen free (or with permits enough) with waiters queued.
    let mut stalled: HashMap<&str, (String, u64)> = HashMap::new();
    let mut stall = |what: &'static str, cond: bool, head: String, detail: &dyn Fn() -> String| {
        if !cond {
            stalled.remove(what);
            return;
        }
        let t = now();
        let e = stalled.entry(what).or_insert((head.clone(), t));
        if e.0 != head {
            *e = (head, t);
        } else if t - e.1 > 1_500 * MS {
            rec.bad(
                what,
                format!("waiters queued on a free object for 1.5 s: {}", detail()),
            );
            stalled.remove(what);
        }
    };
    while !rec.stopped() {
        let mut p = redis::pipe();
        p.atomic();
        p.cmd("HGETALL").arg(RW);
        p.cmd("RRWLOCK.INFO").arg(RW);
        p.cmd("HLEN").arg(LOCK);
        p.cmd("RLOCK.INFO").arg(LOCK);
        p.cmd("RSEM.AVAILABLE").arg(SEM);
        p.cmd("RSEM.INFO").arg(SEM).arg("COUNT").arg(10_000);
        p.cmd("ZRANGE")
            .arg(&timeouts)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES");
        p.cmd("TIME");
        let v: Vec<Value> = match p.query(&mut c) {
            Ok(v) => v,
            Err(e) => panic!("monitor: {e}"),
        };
        count(&sh, "monitor.samples", 1);
        // Read-write lock: a writer's fields never beside another owner's.
        let fields: BTreeMap<String, String> = redis::from_redis_value(v[0].clone()).unwrap();
        let rw = RwInfo::parse(&v[1]);
        match fields.get("mode").map(String::as_str) {
            Some("write") => {
                let writers: Vec<&String> =
                    fields.keys().filter(|k| k.ends_with(":write")).collect();
                let others: Vec<&String> = fields
                    .keys()
                    .filter(|k| *k != "mode" && !k.ends_with(":write"))
                    .collect();
                let owner = writers.first().map(|w| w.trim_end_matches(":write"));
                if writers.len() != 1 || others.iter().any(|o| Some(o.as_str()) != owner) {
                    rec.bad("rwlock", format!("write mode with {fields:?}"));
                }
            }
            Some("read") if fields.keys().any(|k| k.ends_with(":write")) => {
                rec.bad("rwlock", format!("read mode with a writer: {fields:?}"));
            }
            _ => {}
        }
        let head = format!("{:?}", rw.queue.first());
        stall("rwlock", rw.mode.is_none() && rw.waiters > 0, head, &|| {
            format!("{rw:?}")
        });
        // Lock: one holder at most.
        let hlen: i64 = redis::from_redis_value(v[2].clone()).unwrap();
        if hlen > 1 {
            rec.bad("lock", format!("{hlen} holders"));
        }
        let li = LockInfo::parse(&v[3]);
        let head = format!("{:?}", li.queue.first());
        stall("lock", li.owner.is_none() && li.waiters > 0, head, &|| {
            format!("{li:?}")
        });
        // Semaphore: available plus the live leases never above the total.
        let avail: i64 = redis::from_redis_value(v[4].clone()).unwrap();
        let zs: Vec<(Vec<u8>, f64)> = redis::from_redis_value(v[6].clone()).unwrap();
        let time: Vec<String> = redis::from_redis_value(v[7].clone()).unwrap();
        let server_ms =
            time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000;
        // A lease ending within 2 ms of the read may count on both sides: not counted as live.
        let live = zs.iter().filter(|(_, s)| *s as i64 > server_ms + 2).count() as i64;
        if avail < 0 || avail + live > TOTAL {
            rec.bad(
                "semaphore",
                format!("available {avail} + {live} live leases > {TOTAL} permits (or negative)"),
            );
        }
        let info = rlock_tests::info_pairs(
            "RSEM.INFO",
            &v[5],
            &["available", "leased", "ttl_ms", "waiters", "queue"],
        );
        let waiters = match info[3].1 {
            Value::Int(n) => n,
            _ => 0,
        };
        let head_n = match &info[4].1 {
            Value::Array(q) => match q.first() {
                Some(Value::Array(e)) => match e.first() {
                    Some(Value::Int(n)) => *n,
                    _ => 0,
                },
                _ => 0,
            },
            _ => 0,
        };
        stall(
            "semaphore",
            waiters > 0 && head_n <= avail,
            format!("{waiters}"),
            &|| format!("available {avail}, {waiters} waiters, head wants {head_n}"),
        );
        sleep_ms(20);
    }
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

/// Connections a kill may hit, by `CLIENT SETNAME`: the clients' pools and session listeners,
/// parked raw waiters and the raw session's listener. (Probes, the monitor, the coordinator's,
/// Redisson's, the session driver's request connection and this thread's are spared.)
const KILLABLE: [&str; 4] = ["rlock", "rlock-session", "fam-block", "fam-listener"];

fn faults(url: String, seed: u64, secs: u64, sh: Arc<Shared>) {
    let rec = Rec::Mem(sh.clone());
    let mut c = connect(&url, "fam-faults");
    let mut rng = Rng::new(seed);
    // Bounded: server-wide stalls at most one per 2 s of run.
    let max_stalls = secs / 2 + 1;
    let mut stalls = 0;
    while !rec.stopped() {
        sleep_ms(rng.range(30, 250));
        let dice = rng.below(100);
        if dice < 70 {
            let list = match req(&mut c, &cmd!("CLIENT", "LIST", "TYPE", "normal")) {
                Ok(v) => text(&v).unwrap(),
                Err(e) => panic!("faults: {e}"),
            };
            let conns: Vec<(i64, String)> = list
                .lines()
                .filter_map(|l| {
                    let id = l.strip_prefix("id=")?.split(' ').next()?.parse().ok()?;
                    let name = l.split(' ').find_map(|f| f.strip_prefix("name="))?;
                    KILLABLE.contains(&name).then(|| (id, name.to_string()))
                })
                .collect();
            if conns.is_empty() {
                continue;
            }
            let (id, name) = &conns[rng.index(conns.len())];
            let cmd_conn = name == "rlock";
            sh.fault_epoch.fetch_add(1, Ordering::SeqCst);
            if cmd_conn {
                sh.cmd_epoch.fetch_add(1, Ordering::SeqCst);
            }
            if req(&mut c, &cmd!("CLIENT", "KILL", "ID", *id)) == Ok(Value::Int(1)) {
                count(&sh, &format!("faults.kill-{name}"), 1);
            }
            sh.fault_epoch.fetch_add(1, Ordering::SeqCst);
            if cmd_conn {
                sh.cmd_epoch.fetch_add(1, Ordering::SeqCst);
            }
        } else if dice < 88 {
            let (obj, cmd) = if rng.below(2) == 0 {
                (Obj::Rw, cmd!("RRWLOCK.FORCERELEASE", RW))
            } else {
                (Obj::Lock, cmd!("RLOCK.FORCERELEASE", LOCK))
            };
            let sent = now();
            let r = req(&mut c, &cmd);
            sh.forces.lock().unwrap().push((obj, sent, now()));
            if r == Ok(Value::Int(1)) {
                count(&sh, &format!("{}.forced", obj.name()), 1);
            }
        } else if stalls < max_stalls {
            stalls += 1;
            // The whole server stops for a moment: leases keep running, replies wait.
            if dice < 94 {
                let ms = rng.range(50, 250);
                let _ = req(
                    &mut c,
                    &cmd!("DEBUG", "SLEEP", format!("{:.3}", ms as f64 / 1000.0)),
                );
                count(&sh, "faults.debug-sleep", 1);
            } else {
                let ms = rng.range(50, 250);
                let _ = req(&mut c, &cmd!("CLIENT", "PAUSE", ms, "WRITE"));
                count(&sh, "faults.client-pause", 1);
            }
        }
    }
}

/// A child process running sync workers (this binary again), its output parsed into the
/// shared records.
struct ChildProc {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn spawn_child(url: &str, id: u64, seed: u64, sh: &Arc<Shared>) -> ChildProc {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "family_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_URL, url)
        .env(CHILD_SEED, seed.to_string())
        .env(CHILD_ID, id.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let out = child.stdout.take().unwrap();
    let sh = sh.clone();
    let reader = std::thread::spawn(move || {
        let mut r = std::io::BufReader::new(out);
        let mut line = String::new();
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut by a SIGKILL has no newline: dropped.
            if !line.ends_with('\n') {
                break;
            }
            let l = line.trim_end();
            // The first line may follow the harness' "test family_child ... ".
            if let Some(at) = l.find("HOLD ") {
                if let Some(h) = Hold::parse(&l[at..]) {
                    count(&sh, &format!("{}.holds-of-children", h.obj.name()), 1);
                    let rec = Rec::Mem(sh.clone());
                    rec.hold(h);
                }
            } else if let Some(at) = l.find("STAT ") {
                let f: Vec<&str> = l[at..].split(' ').collect();
                if let (Some(k), Some(n)) = (f.get(1), f.get(2).and_then(|n| n.parse().ok())) {
                    count(&sh, k, n);
                }
            } else if let Some(at) = l.find("AMBIG ") {
                if let Ok(n) = l[at + 6..].parse::<u64>() {
                    sh.ambiguous_permits.fetch_add(n, Ordering::Relaxed);
                }
            } else if let Some(at) = l.find("VIOL ") {
                let rest = &l[at + 5..];
                let (obj, what) = rest.split_once(' ').unwrap_or((rest, ""));
                violation(&sh, obj, format!("child {id}: {what}"));
            }
        }
    });
    ChildProc {
        child,
        reader: Some(reader),
    }
}

/// A child never outlives the test, even one that panics.
impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Send a signal to a child; a child that already died (its pid not yet reaped, so not reused)
/// just ignores it.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid of our own unreaped child.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

impl ChildProc {
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
    }
}

/// Children: SIGKILL (and a new one in its place) or SIGSTOP past the session grace, then
/// SIGCONT. At most one fault every 1-2.5 s.
fn child_faults(url: String, seed: u64, n: usize, sh: Arc<Shared>) {
    let mut rng = Rng::new(seed);
    let mut next_id = n as u64;
    let mut kids: Vec<ChildProc> = (0..n)
        .map(|i| spawn_child(&url, i as u64, rng.next_u64(), &sh))
        .collect();
    while !sh.stop.load(Ordering::Relaxed) {
        sleep_ms(rng.range(1000, 2500));
        if sh.stop.load(Ordering::Relaxed) {
            break;
        }
        let i = rng.index(kids.len());
        if rng.below(5) < 3 {
            sh.fault_epoch.fetch_add(1, Ordering::SeqCst);
            kids[i].kill();
            count(&sh, "faults.child-sigkill", 1);
            kids[i] = spawn_child(&url, next_id, rng.next_u64(), &sh);
            next_id += 1;
        } else {
            let pid = kids[i].child.id();
            signal(pid, libc::SIGSTOP);
            count(&sh, "faults.child-sigstop-past-grace", 1);
            sleep_ms(CHILD_GRACE_MS + rng.range(300, 1000));
            signal(pid, libc::SIGCONT);
        }
    }
    for k in &mut kids {
        k.kill();
    }
}

/// Child half: two sync workers reporting on stdout until the parent kills the process.
#[test]
#[ignore = "child process: soak_family runs it, it does nothing alone"]
fn family_child() {
    let (Ok(url), Ok(seed)) = (std::env::var(CHILD_URL), std::env::var(CHILD_SEED)) else {
        return;
    };
    let id = std::env::var(CHILD_ID).unwrap_or_default();
    let seed: u64 = seed.parse().unwrap();
    let ws: Vec<_> = (0..2u64)
        .map(|w| {
            let url = url.clone();
            let who = format!("child{id}.{w}");
            std::thread::spawn(move || {
                sync_worker(
                    &who,
                    &url,
                    seed ^ (w + 1),
                    Rec::Out,
                    Duration::from_millis(CHILD_GRACE_MS),
                    false,
                )
            })
        })
        .collect();
    for w in ws {
        let _ = w.join();
    }
}

// ---------------------------------------------------------------------------------------------
// Checkers
// ---------------------------------------------------------------------------------------------

/// Per object: (holds checked, violations).
type Verdicts = BTreeMap<&'static str, (usize, Vec<String>)>;

/// Exclusion from the recorded holds. A hold without a proof may have been ended by any force
/// release of its object that could have run after its grant (one replied after its acquire was
/// sent): its interval ends at the earliest such force's send. Then, per object, a sweep over
/// the certainly-valid intervals: a writer never beside anyone (read-write lock), one holder
/// (lock), never more permits than the total (semaphore). Touching ends are no overlap.
fn check_holds(holds: &[Hold], forces: &[(Obj, u64, u64)], out: &mut Verdicts) {
    let holds: Vec<Hold> = holds
        .iter()
        .cloned()
        .map(|mut h| {
            if !h.proven && h.obj != Obj::Sem {
                let force = forces
                    .iter()
                    .filter(|(o, _, done)| *o == h.obj && *done >= h.sent)
                    .map(|(_, start, _)| *start)
                    .min();
                if let Some(f) = force {
                    h.to = h.to.min(f);
                }
            }
            h
        })
        .filter(|h| h.to > h.from)
        .collect();
    for obj in [Obj::Rw, Obj::Lock, Obj::Sem] {
        let entry = out.entry(obj.name()).or_default();
        let mine: Vec<&Hold> = holds.iter().filter(|h| h.obj == obj).collect();
        entry.0 += mine.len();
        let mut ev: Vec<(u64, u8, usize)> = Vec::with_capacity(mine.len() * 2);
        for (i, h) in mine.iter().enumerate() {
            ev.push((h.from, 1, i));
            ev.push((h.to, 0, i)); // ends sort before starts at the same time
        }
        ev.sort();
        let mut active: Vec<usize> = Vec::new();
        for (_, start, i) in ev {
            if start == 0 {
                active.retain(|a| *a != i);
                continue;
            }
            let h = mine[i];
            let clash: Option<&Hold> = match obj {
                Obj::Rw if h.write => active.first().map(|a| mine[*a]),
                Obj::Rw => active.iter().map(|a| mine[*a]).find(|a| a.write),
                Obj::Lock => active.first().map(|a| mine[*a]),
                Obj::Sem => {
                    let out: i64 = active.iter().map(|a| mine[*a].permits).sum();
                    (out + h.permits > TOTAL).then(|| mine[active[0]])
                }
            };
            if let Some(a) = clash {
                let what = match obj {
                    Obj::Sem => format!(
                        "more than {TOTAL} permits out: {} held by others when {} more were taken",
                        active.iter().map(|a| mine[*a].permits).sum::<i64>(),
                        h.permits
                    ),
                    _ => "overlapping holds".into(),
                };
                if entry.1.len() < 20 {
                    entry.1.push(format!(
                        "{what}: {:.1} ms of overlap\n    {a:?}\n    {h:?}",
                        (a.to.min(h.to) - h.from) as f64 / 1e6
                    ));
                } else {
                    entry.1.push(what);
                }
            }
            active.push(i);
        }
        if obj == Obj::Lock {
            let mut tokens: Vec<u64> = mine.iter().map(|h| h.token).filter(|t| *t > 0).collect();
            tokens.sort();
            for w in tokens.windows(2) {
                if w[0] == w[1] {
                    entry
                        .1
                        .push(format!("fencing token {} handed out twice", w[0]));
                }
            }
        }
    }
}

/// The latch from the coordinator's cycles and every await: an await that started while the
/// latch was closed (after a set's reply, before the opening countdown was sent) must not pass
/// before that countdown was sent, and must pass if its wait outlasted the opening by 500 ms
/// while the latch stayed open until it returned.
fn check_latch(cycles: &[Cycle], awaits: &[Await], out: &mut Verdicts) {
    let entry = out.entry("latch").or_default();
    for (k, c) in cycles.iter().enumerate() {
        let next_set = cycles.get(k + 1).map_or(u64::MAX, |n| n.set_reply);
        for w in awaits
            .iter()
            .filter(|w| c.set_reply <= w.start && w.start < c.open_sent)
        {
            if w.result == Passed::Failed {
                continue;
            }
            entry.0 += 1;
            match w.result {
                Passed::Open if w.returned < c.open_sent => entry.1.push(format!(
                    "{} await passed {:.1} ms before the countdown that opened the latch was sent: \
                     {w:?} {c:?}",
                    w.how,
                    (c.open_sent - w.returned) as f64 / 1e6
                )),
                Passed::Closed
                    if w.deadline.is_none_or(|d| d > c.open_reply + 500 * MS)
                        && w.returned < next_set =>
                {
                    entry.1.push(format!(
                        "{} await reported the latch closed {:.1} ms after it opened: {w:?} {c:?}",
                        w.how,
                        (w.returned - c.open_reply) as f64 / 1e6
                    ))
                }
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The soak
// ---------------------------------------------------------------------------------------------

fn join_by(name: &str, h: std::thread::JoinHandle<()>, deadline: std::time::Instant) {
    while !h.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} stuck 60 s after the stop (a waiter never served?)"
        );
        sleep_ms(10);
    }
    h.join().unwrap_or_else(|_| panic!("{name} panicked"));
}

/// Longest stretch of a run between two quiescent checks. A longer run (`make soak`) is rounds
/// of this, each ending with every quiescence check and the semaphore's pool set back to
/// `TOTAL`: a plain permit granted into a reply a fault hid is lost for good (by design, as
/// with Redisson), about one every 15 s here, so a pool never restocked drains within minutes
/// and the semaphore stops granting for the rest of the run.
const ROUND_SECS: u64 = 30;

/// How one round ended.
struct RoundEnd {
    drained: Duration,
    /// Permits available at quiescence.
    available: i64,
    /// Plain permits whose fate a fault hid during the round, as the workers saw it.
    ambiguous: i64,
    /// Plain permits the check allowed to be missing (the clients' count in doubt, failed
    /// releases).
    allowed: i64,
}

/// One round: every worker for `secs`, then the stop, the drain and the checks made at
/// quiescence (violations recorded in `sh`).
fn run_round(
    url: &str,
    sh: &Arc<Shared>,
    seeds: &mut Rng,
    secs: u64,
    c: &mut redis::Connection,
    timer_base: i64,
) -> RoundEnd {
    let url = url.to_string();
    sh.stop.store(false, Ordering::Relaxed);
    sh.ambiguous_permits.store(0, Ordering::Relaxed);
    sh.allowed_missing.store(0, Ordering::Relaxed);
    let mut threads: Vec<(String, std::thread::JoinHandle<()>)> = Vec::new();
    let mut spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        threads.push((name, std::thread::spawn(f)));
    };
    for i in 0..4 {
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        let who = format!("sync{i}");
        spawn(
            who.clone(),
            Box::new(move || sync_worker(&who, &u, sd, Rec::Mem(sh2), PARENT_GRACE, true)),
        );
    }
    for i in 0..2 {
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            format!("block{i}"),
            Box::new(move || block_worker(format!("blk{i}"), u, sd, sh2)),
        );
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            format!("latch-awaiter{i}"),
            Box::new(move || latch_awaiter(format!("aw{i}"), u, sd, sh2)),
        );
    }
    {
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            "redisson".into(),
            Box::new(move || redisson_worker(u, sd, sh2)),
        );
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            "session-driver".into(),
            Box::new(move || session_driver(u, sd, sh2)),
        );
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            "latch-coordinator".into(),
            Box::new(move || latch_coordinator(u, sd, sh2)),
        );
        let (u, sh2) = (url.clone(), sh.clone());
        spawn("monitor".into(), Box::new(move || monitor(u, sh2)));
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn("faults".into(), Box::new(move || faults(u, sd, secs, sh2)));
        let (u, sd, sh2) = (url.clone(), seeds.next_u64(), sh.clone());
        spawn(
            "children".into(),
            Box::new(move || child_faults(u, sd, 2, sh2)),
        );
    }
    // Async tasks on a runtime of their own, one client for all.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let aclient = build_client(&url, PARENT_GRACE);
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (u, sd, sh2, cl) = (url.clone(), seeds.next_u64(), sh.clone(), aclient.clone());
        tasks.push(rt.spawn(async_worker(format!("async{i}"), cl, u, sd, sh2)));
    }
    for _ in 0..2 {
        let (sd, sh2, cl) = (seeds.next_u64(), sh.clone(), aclient.clone());
        tasks.push(rt.spawn(async_latch_awaiter(cl, sd, sh2)));
    }

    std::thread::sleep(Duration::from_secs(secs));
    sh.stop.store(true, Ordering::Relaxed);
    let stopped = std::time::Instant::now();
    let deadline = stopped + Duration::from_secs(60);
    for (name, h) in threads {
        join_by(&name, h, deadline);
    }
    rt.block_on(async {
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("an async task stuck 60 s after the stop")
                .expect("async task");
        }
    });
    Rec::Mem(sh.clone()).client_in_doubt(&aclient);
    drop(aclient);
    drop(rt);
    let drained = stopped.elapsed();

    // Quiescence: every hold ends (released, or its lease or the watchdog's timeout ran out),
    // every session ends (closed, or its grace ran out), every timer goes.
    let grace =
        Duration::from_millis(MAX_LEASE_MS) + WATCHDOG + PARENT_GRACE + Duration::from_secs(3);
    let end = std::time::Instant::now() + grace;
    let timeouts = redisson::semaphore::timeouts(SEM);
    let mut last = String::new();
    loop {
        // A write reclaims the leases that ended (as every RSEM.* write does first).
        let _ = req(c, &cmd!("RSEM.ADDPERMITS", SEM, 0));
        let busy = [RW, LOCK, LATCH, timeouts.as_str()]
            .into_iter()
            .filter(|k| rlock_tests::exists(c, k))
            .collect::<Vec<_>>();
        let st = |c: &mut redis::Connection, f: &str| rlock_stat(c, f);
        let (w, sr, ss, tj) = (
            st(c, "waiters"),
            st(c, "session_requests"),
            st(c, "sessions"),
            st(c, "timer_jobs"),
        );
        let blocked = info_int(c, "clients", "blocked_clients");
        if busy.is_empty() && w == 0 && sr == 0 && ss == 0 && tj == timer_base && blocked == 0 {
            break;
        }
        last = format!(
            "keys held {busy:?}, waiters {w}, session_requests {sr}, sessions {ss}, \
             timer_jobs {tj} (base {timer_base}), blocked_clients {blocked}"
        );
        if std::time::Instant::now() > end {
            violation(
                sh,
                "quiescence",
                format!("{grace:?} after the stop: {last}"),
            );
            break;
        }
        sleep_ms(20);
    }
    let _ = last;
    // No key left but the semaphore's count, the fencing token and Redisson's unlock latches
    // (which its client leaves with a TTL when an unlock finds nothing to unlock).
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    for k in &keys {
        let expected = k == SEM || *k == token_key(LOCK);
        let latch = k.starts_with("redisson_unlock_latch") && rlock_tests::pttl(c, k) > 0;
        if !expected && !latch {
            violation(sh, "quiescence", format!("key {k} left behind"));
        }
    }
    // Every permit back: at most those the clients counted in doubt, and those of the workers'
    // releases that failed, are missing.
    let avail: i64 = redis::cmd("GET").arg(SEM).query(c).unwrap();
    let ambiguous = sh.ambiguous_permits.load(Ordering::Relaxed) as i64;
    let allowed = sh.allowed_missing.load(Ordering::Relaxed) as i64;
    if avail > TOTAL || avail < TOTAL - allowed {
        violation(
            sh,
            "semaphore",
            format!(
                "{avail} permits available at quiescence, {TOTAL} set ({allowed} counted in doubt \
                 by the clients and failed releases; {ambiguous} seen in doubt by the workers)"
            ),
        );
    }
    RoundEnd {
        drained,
        available: avail,
        ambiguous,
        allowed,
    }
}

#[test]
fn soak_family_under_faults() {
    started();
    let secs = env_u64("RLOCK_SOAK_SECS", 30);
    let seed = env_seed("RLOCK_SOAK_SEED");
    let brk = std::env::var("RLOCK_SOAK_BREAK").unwrap_or_default();
    println!("soak_family: {secs} s, seed {seed}, break {brk:?}");
    let s = Server::start();
    let url = s.url();
    let mut c = connect(&url, "fam-main");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let timer_base = rlock_stat(&mut c, "timer_jobs");
    assert_eq!(
        req(&mut c, &cmd!("RSEM.TRYSETPERMITS", SEM, TOTAL)).unwrap(),
        Value::Int(1)
    );
    let sh = Arc::new(Shared {
        stop: AtomicBool::new(false),
        holds: Mutex::new(Vec::new()),
        forces: Mutex::new(Vec::new()),
        cycles: Mutex::new(Vec::new()),
        awaits: Mutex::new(Vec::new()),
        violations: Mutex::new(Vec::new()),
        stats: Mutex::new(BTreeMap::new()),
        fault_epoch: AtomicU64::new(0),
        cmd_epoch: AtomicU64::new(0),
        ambiguous_permits: AtomicU64::new(0),
        allowed_missing: AtomicU64::new(0),
        brk,
    });
    let mut seeds = Rng::new(seed);
    let rounds = secs.div_ceil(ROUND_SECS).max(1);
    let (mut drained, mut ambiguous, mut allowed, mut restocked) = (Duration::ZERO, 0, 0, 0);
    for r in 0..rounds {
        let round_secs = (secs - r * ROUND_SECS).clamp(1, ROUND_SECS);
        let end = run_round(&url, &sh, &mut seeds, round_secs, &mut c, timer_base);
        drained += end.drained;
        ambiguous += end.ambiguous;
        allowed += end.allowed;
        // Back to the full pool for the next round: what is missing now was lost for good to
        // acquires whose replies a fault hid (checked just now against their count).
        if r + 1 < rounds && end.available < TOTAL {
            let n = TOTAL - end.available.max(0);
            req(&mut c, &cmd!("RSEM.ADDPERMITS", SEM, n)).unwrap();
            restocked += n;
        }
    }

    // The checkers.
    let mut verdicts = Verdicts::new();
    let holds = sh.holds.lock().unwrap().clone();
    check_holds(&holds, &sh.forces.lock().unwrap(), &mut verdicts);
    check_latch(
        &sh.cycles.lock().unwrap(),
        &sh.awaits.lock().unwrap(),
        &mut verdicts,
    );
    for (obj, what) in sh.violations.lock().unwrap().iter() {
        let name: &'static str = match obj.as_str() {
            "rwlock" => "rwlock",
            "semaphore" => "semaphore",
            "lock" => "lock",
            "latch" => "latch",
            "session" => "session",
            _ => "other",
        };
        verdicts.entry(name).or_default().1.push(what.clone());
    }
    let stats = sh.stats.lock().unwrap().clone();
    let server = |c: &mut redis::Connection, f: &str| rlock_stat(c, f);
    println!(
        "soak_family summary ({secs} s, seed {seed}, drained in {:.2} s):",
        drained.as_secs_f64()
    );
    const FAULTS: [&str; 7] = [
        "forced",
        "overruns",
        "abandoned",
        "cancelled",
        "block-killed",
        "listener-killed",
        "frozen-past-grace",
    ];
    for obj in [
        "rwlock",
        "semaphore",
        "latch",
        "lock",
        "session",
        "quiescence",
        "other",
    ] {
        let mine: Vec<(&str, u64)> = stats
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(&format!("{obj}."))?, *v)))
            .collect();
        let ops: u64 = mine
            .iter()
            .filter(|(k, _)| *k == "ops" || *k == "awaits")
            .map(|(_, v)| v)
            .sum();
        let faults: u64 = mine
            .iter()
            .filter(|(k, _)| FAULTS.contains(k))
            .map(|(_, v)| v)
            .sum();
        let (mut checked, bad) = verdicts.get(obj).cloned().unwrap_or_default();
        if obj == "session" {
            // Outcomes and cancellations checked as they happened.
            checked += stats.get("session.checked").copied().unwrap_or(0) as usize;
        }
        if mine.is_empty() && bad.is_empty() && checked == 0 {
            continue;
        }
        println!(
            "  {obj:<10} operations {ops:>6}  faults {faults:>5}  checked {checked:>6}  violations {}\n             {}",
            bad.len(),
            mine.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        );
    }
    let global: Vec<String> = stats
        .iter()
        .filter(|(k, _)| k.starts_with("faults.") || k.starts_with("monitor."))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!("  server-wide: {}", global.join(", "));
    println!(
        "  server: sessions_expired {} grants_revoked {}+{}+{} holds_lost {} \
         rwlock_grants_after_expiry {} sem_grants_after_expiry {} latch_handoffs {} \
         session_grants_direct {} permits in doubt {ambiguous} (workers) {allowed} (clients \
         and failed releases), restocked {restocked} \
         ({rounds} rounds of at most {ROUND_SECS} s)",
        server(&mut c, "sessions_expired"),
        server(&mut c, "grants_revoked"),
        server(&mut c, "rwlock_grants_revoked"),
        server(&mut c, "sem_grants_revoked"),
        server(&mut c, "holds_lost"),
        server(&mut c, "rwlock_grants_after_expiry"),
        server(&mut c, "sem_grants_after_expiry"),
        server(&mut c, "latch_handoffs"),
        server(&mut c, "session_grants_direct"),
    );
    let all: Vec<String> = verdicts
        .iter()
        .flat_map(|(o, (_, b))| b.iter().map(move |b| format!("[{o}] {b}")))
        .collect();
    assert!(
        all.is_empty(),
        "{} violations:\n{}",
        all.len(),
        all.join("\n")
    );
    // A run that checked little proves little.
    for obj in ["rwlock", "semaphore", "lock", "latch"] {
        let checked = verdicts.get(obj).map_or(0, |v| v.0);
        assert!(
            checked as u64 >= secs * 3,
            "{obj}: only {checked} holds/awaits checked in {secs} s"
        );
    }
}

/// Found by this soak (a semaphore left with fewer permits than set, no error reported):
/// an async plain-permit acquire dropped while its command is in flight, on a server busy for a
/// moment (`DEBUG SLEEP`; load does the same, less often), loses its permits for good. The
/// server grants it at once, so the grant is the command's reply, which the drop discards, and
/// no session outcome follows; the drop's `RSESSION.CANCEL` then finds nothing queued, no
/// outcome comes within the response timeout (the dropping thread blocks that long), and
/// `took_effect` cannot tell for an ownerless permit, so nothing is given back
/// (`client/src/wait.rs`, `Drop for Queued`; `client/src/ops/semaphore.rs`, `took_effect`).
/// A lock was safe (its `took_effect` asks whether the owner holds it); a leased permit came
/// back when its lease ended. Fixed: the acquire in flight belongs to the wait, whose drop
/// finishes it and gives back what its reply granted.
#[test]
fn a_dropped_async_acquire_granted_at_once_gives_its_permits_back() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        req(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 1)).unwrap(),
        Value::Int(1)
    );
    let client = build_client(&s.url(), PARENT_GRACE);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sem = client.async_semaphore("sem");
    rt.block_on(async {
        // The session is open and the connection up: what follows only sends the acquire.
        assert!(sem.try_acquire_for(Duration::from_secs(1)).await.unwrap());
        sem.release().await.unwrap();
    });
    // The server sleeps 300 ms; the acquire is written meanwhile and dropped after 50 ms,
    // before the server has read it.
    let sleeper = rlock_tests::Pending::send(&s, &cmd!("DEBUG", "SLEEP", "0.3"));
    sleep_ms(50);
    rt.block_on(async {
        let r = tokio::time::timeout(
            Duration::from_millis(50),
            sem.try_acquire_for(Duration::from_secs(5)),
        )
        .await;
        assert!(r.is_err(), "the acquire was dropped by its timeout: {r:?}");
    });
    let _ = sleeper.reply();
    // Nobody holds a permit: the one the server granted must be back.
    assert_eq!(
        req(&mut c, &cmd!("RSEM.AVAILABLE", "sem")).unwrap(),
        Value::Int(1),
        "the permit granted to a dropped acquire was never given back"
    );
}

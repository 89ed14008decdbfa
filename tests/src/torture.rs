//! The failover torture workload: clients on the rlock client take fenced locks in a loop and
//! write to a fenced resource while the test injects faults into the servers; afterwards the
//! clients' own records are checked.
//!
//! - **The resource** accepts a write only with a token larger than every token it accepted
//!   for that lock, as a database row with a `fence` column does. It counts the writes it
//!   accepted and refused; its log of accepted tokens is checked to be in order.
//! - **Tokens**: no token is handed out twice for one lock, and none is smaller than a token
//!   handed out before its acquire began (real-time order, across failovers).
//! - **Overlaps**: two holds of one lock whose times intersect. Expected above zero after a
//!   failover that lost an acknowledged grant (asynchronous replication) and after a holder
//!   paused past its lease; the resource's fencing refuses the stale holder's writes.
//! - **Hanging waits**: every acquire returns within its wait time plus the client's response
//!   timeout, and no waiter is left queued on any server at the end.
//! - **Recovery**: the time from a primary's death to the next grant of a lock it served.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Rng;

/// How the workers behave.
#[derive(Clone, Debug)]
pub struct Settings {
    pub workers: usize,
    /// How long an acquire waits.
    pub wait: Duration,
    /// The lease of each hold (no watchdog: a paused holder loses its lock).
    pub lease: Duration,
    /// Per mille of holds whose holder pauses past its lease before writing.
    pub pause_per_mille: u64,
    pub seed: u64,
}

/// One acquire attempt, as its worker saw it.
#[derive(Clone, Debug)]
pub struct Record {
    pub name: usize,
    pub start: Instant,
    pub end: Instant,
    pub outcome: Outcome,
    /// When the holder was done (before its unlock was sent).
    pub hold_end: Option<Instant>,
    /// The holder paused past its lease.
    pub paused: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Granted(u64),
    TimedOut,
    Failed(String),
}

/// A fenced resource per lock name: accepts a write only with a token larger than every token
/// it accepted, as a database row with a `fence` column does.
#[derive(Default)]
pub struct Resource {
    /// Per lock name, the tokens accepted, in the order the writes arrived.
    accepted_log: Mutex<HashMap<usize, Vec<u64>>>,
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
}

impl Resource {
    pub fn write(&self, name: usize, token: u64) -> bool {
        let mut log = self.accepted_log.lock().unwrap();
        let accepted = log.entry(name).or_default();
        if accepted.last().is_some_and(|&last| token <= last) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        accepted.push(token);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Accepted writes whose token is not above one accepted before them (the resource's own
    /// rule, checked from its log: zero unless that rule is broken).
    pub fn out_of_order(&self) -> u64 {
        let log = self.accepted_log.lock().unwrap();
        log.values()
            .map(|ts| ts.windows(2).filter(|w| w[1] <= w[0]).count() as u64)
            .sum()
    }
}

/// A fault the test injected: when, what, and which locks lived on the primary it hit (for the
/// time to the next grant; empty for faults that are not a primary's death).
#[derive(Clone, Debug)]
pub struct Fault {
    pub at: Instant,
    pub what: String,
    pub names: Vec<usize>,
}

/// The settings every torture run uses: 6 workers, 2 s waits, 1.5 s leases, 0.5 % of holders
/// pausing past their lease.
pub fn settings(seed: u64) -> Settings {
    Settings {
        workers: 6,
        wait: Duration::from_secs(2),
        lease: Duration::from_millis(1_500),
        pause_per_mille: 5,
        seed,
    }
}

/// How long past its wait time an acquire may take before it counts as hanging (retries of the
/// client's budget across a failover included).
pub const HANG_ALLOWANCE: Duration = Duration::from_secs(20);

/// Run the workers through `client` for `secs`: a first quiet stretch, then `inject` (which
/// injects one fault and returns once the servers are whole again) every few seconds. Returns
/// the report once the workers stopped and `client` is gone; `settled` must then hold within
/// 30 s (no waiter left on any node).
pub fn run(
    client: rlock_client::Client,
    names: Vec<String>,
    settings: &Settings,
    secs: u64,
    mut inject: impl FnMut(&mut Rng) -> Fault,
    mut settled: impl FnMut() -> bool,
) -> Report {
    let resource = Arc::new(Resource::default());
    let stop = Arc::new(AtomicBool::new(false));
    let workers = run_workers(
        &client,
        Arc::new(names),
        settings,
        resource.clone(),
        stop.clone(),
    );
    let mut rng = Rng::new(settings.seed);
    let mut faults = Vec::new();
    let end = Instant::now() + Duration::from_secs(secs);
    std::thread::sleep(Duration::from_secs(2));
    while Instant::now() + Duration::from_secs(8) < end {
        let f = inject(&mut rng);
        eprintln!("torture: {} (+{:?})", f.what, f.at.elapsed());
        faults.push(f);
        std::thread::sleep(Duration::from_millis(rng.range(1_000, 4_000)));
    }
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let records: Vec<Record> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    drop(client);
    crate::wait_until(
        Duration::from_secs(30),
        "no waiter left on any node",
        &mut settled,
    );
    Report::of(&records, &faults, &resource, settings.wait + HANG_ALLOWANCE)
}

/// Whether no waiter is queued on any of `nodes` (the end of a run: nothing left behind).
pub fn no_waiters<'a>(nodes: impl IntoIterator<Item = &'a crate::Server>) -> bool {
    nodes.into_iter().all(|s| {
        s.try_conn().is_ok_and(|mut c| {
            crate::info_field(&mut c, "rlock", "rlock_waiters").as_deref() == Some("0")
        })
    })
}

/// Run `settings.workers` threads taking fenced locks on `names` through `client` until `stop`.
pub fn run_workers(
    client: &rlock_client::Client,
    names: Arc<Vec<String>>,
    settings: &Settings,
    resource: Arc<Resource>,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<Record>>> {
    (0..settings.workers)
        .map(|w| {
            let client = client.clone();
            let names = names.clone();
            let settings = settings.clone();
            let resource = resource.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(settings.seed ^ (w as u64 + 1).wrapping_mul(0x9E37));
                let mut records = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    records.push(one_hold(&client, &names, &settings, &resource, &mut rng));
                }
                records
            })
        })
        .collect()
}

fn one_hold(
    client: &rlock_client::Client,
    names: &[String],
    settings: &Settings,
    resource: &Resource,
    rng: &mut Rng,
) -> Record {
    let name = rng.index(names.len());
    // A fresh owner per hold: a hold that outlived its unlock is never re-entered.
    let lock = client
        .fenced_lock(names[name].as_str())
        .with_owner(client.new_owner());
    let start = Instant::now();
    let result = lock.try_lock_and_get_token_with(settings.wait, settings.lease);
    let end = Instant::now();
    let outcome = match result {
        Ok(Some(t)) => Outcome::Granted(t),
        Ok(None) => Outcome::TimedOut,
        Err(e) => Outcome::Failed(e.to_string()),
    };
    let mut hold_end = None;
    let mut paused = false;
    if let Outcome::Granted(token) = outcome {
        if rng.below(1000) < settings.pause_per_mille {
            paused = true;
            // A holder stalled past its lease (GC, a stopped VM): its write must be fenced off
            // if someone else got the lock meanwhile.
            std::thread::sleep(settings.lease + Duration::from_millis(200));
        } else {
            std::thread::sleep(Duration::from_millis(rng.below(5)));
        }
        resource.write(name, token);
        hold_end = Some(Instant::now());
        let _ = lock.unlock(); // lost holds and failovers make some unlocks fail: expected
    } else if matches!(outcome, Outcome::Failed(_)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Record {
        name,
        start,
        end,
        outcome,
        hold_end,
        paused,
    }
}

/// What the records show.
#[derive(Debug, Default)]
pub struct Report {
    pub acquisitions: usize,
    pub timeouts: usize,
    pub errors: usize,
    pub faults: usize,
    /// Overlaps behind a holder that paused past its lease (expected: fencing refuses it).
    pub overlaps_paused: usize,
    /// Overlaps for any other reason (a grant lost in a failover).
    pub overlaps: usize,
    pub repeated_tokens: usize,
    /// Grants whose token is smaller than one handed out before their acquire began.
    pub tokens_backwards: usize,
    pub accepted: u64,
    pub refused: u64,
    pub accepted_out_of_order: u64,
    /// Acquires that took longer than their wait plus the allowance.
    pub hanging: usize,
    /// Milliseconds from each primary's death to the next grant of a lock it served.
    pub recovery_ms: Vec<u64>,
    /// Faults after which no lock of the dead primary was granted again before the end.
    pub unrecovered: usize,
    pub first_errors: Vec<String>,
}

impl Report {
    /// Check `records` (all workers') against the faults and the resource.
    pub fn of(
        records: &[Record],
        faults: &[Fault],
        resource: &Resource,
        wait_allowance: Duration,
    ) -> Report {
        let mut r = Report {
            faults: faults.len(),
            accepted: resource.accepted.load(Ordering::Relaxed),
            refused: resource.refused.load(Ordering::Relaxed),
            accepted_out_of_order: resource.out_of_order(),
            ..Report::default()
        };
        let mut by_name: HashMap<usize, Vec<&Record>> = HashMap::new();
        for rec in records {
            match &rec.outcome {
                Outcome::Granted(_) => {
                    r.acquisitions += 1;
                    by_name.entry(rec.name).or_default().push(rec);
                }
                Outcome::TimedOut => r.timeouts += 1,
                Outcome::Failed(e) => {
                    r.errors += 1;
                    if r.first_errors.len() < 5 && !r.first_errors.contains(e) {
                        r.first_errors.push(e.clone());
                    }
                }
            }
            if rec.end - rec.start > wait_allowance {
                r.hanging += 1;
            }
        }
        for grants in by_name.values() {
            let token = |g: &Record| match g.outcome {
                Outcome::Granted(t) => t,
                _ => unreachable!(),
            };
            let mut tokens: Vec<u64> = grants.iter().map(|g| token(g)).collect();
            tokens.sort_unstable();
            r.repeated_tokens += tokens.windows(2).filter(|w| w[0] == w[1]).count();
            // Real-time order: sweep the grants by when their acquire began, keeping the
            // largest token among grants that had returned before.
            let mut by_end: Vec<&Record> = grants.clone();
            by_end.sort_by_key(|g| g.end);
            let mut by_start: Vec<&Record> = grants.clone();
            by_start.sort_by_key(|g| g.start);
            let (mut i, mut max_before) = (0, 0u64);
            for g in &by_start {
                while i < by_end.len() && by_end[i].end < g.start {
                    max_before = max_before.max(token(by_end[i]));
                    i += 1;
                }
                if token(g) < max_before {
                    r.tokens_backwards += 1;
                }
            }
            // Overlaps: holds (grant returned .. holder done) whose times intersect.
            let mut holds: Vec<(Instant, Instant, bool)> = grants
                .iter()
                .filter_map(|g| g.hold_end.map(|e| (g.end, e, g.paused)))
                .collect();
            holds.sort();
            // The hold that ends last so far, and whether its holder paused.
            let mut latest: Option<(Instant, bool)> = None;
            for (s, e, paused) in holds {
                match latest {
                    Some((l, true)) if s < l => r.overlaps_paused += 1,
                    Some((l, false)) if s < l => r.overlaps += 1,
                    _ => {}
                }
                if latest.is_none_or(|(l, _)| e > l) {
                    latest = Some((e, paused));
                }
            }
        }
        for f in faults.iter().filter(|f| !f.names.is_empty()) {
            let next = records
                .iter()
                .filter(|rec| {
                    rec.end > f.at
                        && f.names.contains(&rec.name)
                        && matches!(rec.outcome, Outcome::Granted(_))
                })
                .map(|rec| rec.end)
                .min();
            match next {
                Some(t) => r.recovery_ms.push((t - f.at).as_millis() as u64),
                None => r.unrecovered += 1,
            }
        }
        r.recovery_ms.sort_unstable();
        r
    }

    /// The `p`-th percentile (0..=100) of the recovery times, in ms.
    pub fn recovery_p(&self, p: usize) -> Option<u64> {
        let n = self.recovery_ms.len();
        (n > 0).then(|| self.recovery_ms[((n - 1) * p).div_ceil(100)])
    }

    /// The zeros the torture test promises.
    pub fn assert_zeros(&self) {
        assert_eq!(
            self.accepted_out_of_order, 0,
            "writes accepted out of order: {self}"
        );
        assert_eq!(self.repeated_tokens, 0, "repeated tokens: {self}");
        assert_eq!(
            self.tokens_backwards, 0,
            "tokens that went backwards: {self}"
        );
        assert_eq!(self.hanging, 0, "waits left hanging: {self}");
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |q| {
            self.recovery_p(q)
                .map_or("-".to_string(), |v| format!("{v} ms"))
        };
        write!(
            f,
            "faults {} | acquisitions {} timeouts {} client errors {} | overlaps of two holders {} \
             (and {} behind a holder paused past its lease) | \
             resource accepted {} refused {} accepted out of order {} | repeated tokens {} \
             tokens backwards {} | waits hanging {} | death to next grant p50 {} p99 {} \
             (n {}, unrecovered {})",
            self.faults,
            self.acquisitions,
            self.timeouts,
            self.errors,
            self.overlaps,
            self.overlaps_paused,
            self.accepted,
            self.refused,
            self.accepted_out_of_order,
            self.repeated_tokens,
            self.tokens_backwards,
            self.hanging,
            p(50),
            p(99),
            self.recovery_ms.len(),
            self.unrecovered,
        )?;
        if !self.first_errors.is_empty() {
            write!(f, " | first errors: {:?}", self.first_errors)?;
        }
        Ok(())
    }
}

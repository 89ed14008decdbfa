//! Counters shown in `INFO rlock`, one set per object kind. Everything runs on Redis' main
//! thread; atomics with relaxed ordering are just a safe way to keep them in statics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    pub fn incr(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
    pub fn reset(&self) {
        self.0.store(0, Relaxed);
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter::new()
    }
}

/// The objects rlock serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    Lock,
    RwLock,
    Semaphore,
    Latch,
    /// Redisson 4.x's grouped MultiLock (`RMLOCK.*`).
    GroupLock,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 5] = [
        ObjectKind::Lock,
        ObjectKind::RwLock,
        ObjectKind::Semaphore,
        ObjectKind::Latch,
        ObjectKind::GroupLock,
    ];

    /// Prefix of the kind's fields in `INFO rlock`. The lock's counters came first and keep
    /// their bare names (`rlock_acquired`).
    pub fn info_prefix(self) -> &'static str {
        match self {
            ObjectKind::Lock => "",
            ObjectKind::RwLock => "rwlock_",
            ObjectKind::Semaphore => "sem_",
            ObjectKind::Latch => "latch_",
            ObjectKind::GroupLock => "mlock_",
        }
    }

    /// The kind's word in session outcomes (`RSESSION.READ`).
    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Lock => "lock",
            ObjectKind::RwLock => "rwlock",
            ObjectKind::Semaphore => "semaphore",
            ObjectKind::Latch => "latch",
            ObjectKind::GroupLock => "multilock",
        }
    }

    pub fn counters(self) -> &'static Counters {
        &KINDS[self as usize]
    }
}

/// What happened to an object of a kind, or to a wait on one, as `INFO rlock` counts it. Every
/// per-kind counter is bumped by [`ObjectKind::count`] alone, so the sums [`Counters`] promises
/// are kept in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Acquired at once, without waiting in the queue.
    Took,
    /// Acquired again by an owner holding it.
    Reentered,
    /// A queued waiter was granted (`after_expiry`: because a holder's lease ran out).
    Handed {
        after_expiry: bool,
    },
    /// Refused at once because it was held (no wait).
    Busy,
    Released,
    ForceReleased,
    Renewed,
    /// A grant undone because its waiter vanished before it heard of it.
    Revoked,
    /// A request was queued.
    Queued,
    /// A wait reached its deadline.
    TimedOut,
    /// A wait was withdrawn by its client.
    Cancelled,
    /// A waiter vanished while queued.
    Disconnected,
    /// A wait ended with an error (also counted in [`ERRORS`]).
    Failed,
}

impl ObjectKind {
    /// Count `what` for this kind: the one place per-kind counters are bumped.
    pub fn count(self, what: Counted) {
        let c = self.counters();
        match what {
            Counted::Took => {
                c.acquired.incr();
                c.grants_immediate.incr();
            }
            Counted::Reentered => c.reentries.incr(),
            Counted::Handed { after_expiry } => {
                c.acquired.incr();
                c.handoffs.incr();
                if after_expiry {
                    c.grants_after_expiry.incr();
                }
            }
            Counted::Busy => c.busy.incr(),
            Counted::Released => c.releases.incr(),
            Counted::ForceReleased => c.force_releases.incr(),
            Counted::Renewed => c.renewals.incr(),
            Counted::Revoked => c.grants_revoked.incr(),
            Counted::Queued => c.waits_started.incr(),
            Counted::TimedOut => c.waits_timed_out.incr(),
            Counted::Cancelled => c.waits_cancelled.incr(),
            Counted::Disconnected => c.waiters_disconnected.incr(),
            Counted::Failed => {
                ERRORS.incr();
                c.waits_failed.incr();
            }
        }
    }
}

/// What happened to one kind of object. The semaphore counts acquires (immediate or by
/// hand-off) as `acquired`, `RSEM.RELEASE` calls as `releases`, and grants made with permits
/// reclaimed from expired leases as `grants_after_expiry`. The latch counts awaits that passed
/// (at once or when it opened) as `acquired`, and countdowns that opened it as `releases`.
///
/// Grants by path: `acquired` = `grants_immediate` + `handoffs`, and `grants_after_expiry` is
/// part of `handoffs`. Every wait ends one way: `waits_started` = `handoffs` +
/// `waits_timed_out` + `waits_cancelled` + `waiters_disconnected` + `waits_failed` + the
/// waiters queued now.
pub struct Counters {
    /// Acquired while free (immediately or by hand-off).
    pub acquired: Counter,
    /// Of those, granted at once, without waiting in the queue.
    pub grants_immediate: Counter,
    /// Acquires by an owner already holding it.
    pub reentries: Counter,
    /// Full releases by the holder.
    pub releases: Counter,
    /// Grants to a queued waiter.
    pub handoffs: Counter,
    /// Hand-offs made because a holder's lease ran out.
    pub grants_after_expiry: Counter,
    /// Acquires that failed without waiting because it was held.
    pub busy: Counter,
    /// Requests that were queued.
    pub waits_started: Counter,
    /// Waits that reached their deadline (nil, or a `timeout` outcome).
    pub waits_timed_out: Counter,
    /// Waits withdrawn by their client: `CLIENT UNBLOCK` of a blocked waiter (nil),
    /// `RSESSION.CANCEL`.
    pub waits_cancelled: Counter,
    /// Waiters that vanished while queued: a blocked waiter's connection closed, or the session
    /// of a queued request ended (it expired, or was closed).
    pub waiters_disconnected: Counter,
    /// Waits that ended with an error (the key changed type, its slot moved, the server became
    /// a replica); each is also in `ERRORS`.
    pub waits_failed: Counter,
    /// Grants undone because the waiter disconnected before its reply was sent.
    pub grants_revoked: Counter,
    pub renewals: Counter,
    pub force_releases: Counter,
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            acquired: Counter::new(),
            grants_immediate: Counter::new(),
            reentries: Counter::new(),
            releases: Counter::new(),
            handoffs: Counter::new(),
            grants_after_expiry: Counter::new(),
            busy: Counter::new(),
            waits_started: Counter::new(),
            waits_timed_out: Counter::new(),
            waits_cancelled: Counter::new(),
            waiters_disconnected: Counter::new(),
            waits_failed: Counter::new(),
            grants_revoked: Counter::new(),
            renewals: Counter::new(),
            force_releases: Counter::new(),
        }
    }

    /// (name, counter) in `INFO` order.
    pub fn fields(&self) -> [(&'static str, &Counter); 15] {
        [
            ("acquired", &self.acquired),
            ("grants_immediate", &self.grants_immediate),
            ("reentries", &self.reentries),
            ("releases", &self.releases),
            ("handoffs", &self.handoffs),
            ("grants_after_expiry", &self.grants_after_expiry),
            ("busy", &self.busy),
            ("waits_started", &self.waits_started),
            ("waits_timed_out", &self.waits_timed_out),
            ("waits_cancelled", &self.waits_cancelled),
            ("waiters_disconnected", &self.waiters_disconnected),
            ("waits_failed", &self.waits_failed),
            ("grants_revoked", &self.grants_revoked),
            ("renewals", &self.renewals),
            ("force_releases", &self.force_releases),
        ]
    }
}

static KINDS: [Counters; ObjectKind::ALL.len()] = [
    Counters::new(),
    Counters::new(),
    Counters::new(),
    Counters::new(),
    Counters::new(),
];

/// Error replies, of every command.
pub static ERRORS: Counter = Counter::new();
/// Waits refused because they would have closed a cycle of owners waiting for one another.
pub static DEADLOCKS: Counter = Counter::new();
/// Deadlock checks that ran out of `rlock.deadlock-max-steps` and admitted the wait undecided.
pub static DEADLOCK_CHECKS_EXHAUSTED: Counter = Counter::new();
/// Cycles found through a key the waiting user may not read, admitted (see
/// `wait::check_deadlock`).
pub static DEADLOCK_CYCLES_UNSEEN: Counter = Counter::new();

/// Start every counter from zero (at module load: a reloaded module must not show the counts
/// of the previous one, whose statics may survive in the same process).
pub fn reset() {
    for kind in ObjectKind::ALL {
        for (_, c) in kind.counters().fields() {
            c.reset();
        }
    }
    ERRORS.reset();
    DEADLOCKS.reset();
    DEADLOCK_CHECKS_EXHAUSTED.reset();
    DEADLOCK_CYCLES_UNSEEN.reset();
}

//! Counters shown in `INFO rlock`. Everything runs on Redis' main thread; atomics with relaxed
//! ordering are just a safe way to keep them in statics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Counter(AtomicU64);

impl Counter {
    pub const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    pub fn incr(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter::new()
    }
}

/// Locks acquired while free (immediately or by hand-off).
pub static ACQUIRED: Counter = Counter::new();
/// Acquires by the owner already holding the lock.
pub static REENTRIES: Counter = Counter::new();
/// Full releases by the holder.
pub static RELEASES: Counter = Counter::new();
/// Grants to a parked waiter.
pub static HANDOFFS: Counter = Counter::new();
/// Hand-offs made because the holder's lease ran out.
pub static GRANTS_AFTER_EXPIRY: Counter = Counter::new();
/// Acquires that parked.
pub static WAITS_STARTED: Counter = Counter::new();
/// Waits that ended with nil (timeout or CLIENT UNBLOCK).
pub static WAITS_TIMED_OUT: Counter = Counter::new();
/// Waiters whose connection closed while queued.
pub static WAITERS_DISCONNECTED: Counter = Counter::new();
/// Grants undone because the waiter disconnected before its reply was sent.
pub static GRANTS_REVOKED: Counter = Counter::new();
/// Acquires that failed without waiting because the lock was held.
pub static BUSY: Counter = Counter::new();
pub static RENEWALS: Counter = Counter::new();
pub static FORCE_RELEASES: Counter = Counter::new();
/// Error replies.
pub static ERRORS: Counter = Counter::new();

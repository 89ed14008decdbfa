//! The module's configuration parameters (`CONFIG SET rlock.<name>`), with their defaults.

use crate::ffi::{module_config as config, Ctx};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// The longest grace period a session may ask for: how long its queued requests and
/// unacknowledged grants outlive its listener.
pub static SESSION_MAX_GRACE_MS: AtomicI64 = AtomicI64::new(60_000);
/// The least `session-max-grace-ms` may be set to. At 0 every `RSESSION.OPEN` with a grace
/// would be refused, and a grace of a few ms ends a session between two reads of a listener on
/// a busy network: 1 s is below any grace a client should ask for (the Rust client's is 10 s).
pub const SESSION_MAX_GRACE_MS_LEAST: i64 = 1_000;
/// Requests one session may have queued at once.
pub static SESSION_MAX_QUEUED: AtomicI64 = AtomicI64::new(100_000);
/// Outcomes one session may have waiting for acknowledgement before it may queue more.
pub static SESSION_MAX_BACKLOG: AtomicI64 = AtomicI64::new(100_000);

/// Sessions one ACL user may have open at once.
pub static SESSION_MAX_PER_USER: AtomicI64 = AtomicI64::new(10_000);
/// The longest session name, in bytes.
pub static SESSION_MAX_NAME_BYTES: AtomicI64 = AtomicI64::new(256);

/// Refuse a wait that would close a cycle of owners waiting for one another.
pub static DEADLOCK_DETECTION: AtomicBool = AtomicBool::new(true);

pub fn deadlock_detection() -> bool {
    DEADLOCK_DETECTION.load(Relaxed)
}

/// Work one deadlock check may do (queues and holders looked at, owners followed) before it
/// gives up and admits the wait undecided, as without detection (counted in `INFO rlock` as
/// `deadlock_checks_exhausted`). Measured on Redis 7.0.15 (2 shared cores), a check at the
/// head of a long wait chain: 87 us at 50 steps, 217 us at 200, 1.0 ms at 1,000, 12.8 ms at
/// 10,000 (the fixed budget before, 6.8-10 ms per check). A chain of holders waiting for one
/// another takes about 6 steps per lock, so the default finds cycles through ~30 locks.
pub static DEADLOCK_MAX_STEPS: AtomicI64 = AtomicI64::new(200);
/// Most permits one `RSEM.ACQUIRE ... LEASE` may take: each is a sorted-set member written,
/// replicated and replied in one command (measured 4.8 us per permit on Redis 7.0.15), so the
/// default bounds the largest such call to about 10 ms. At most `semaphore::MAX_LEASED`.
pub static SEM_MAX_LEASED_PERMITS: AtomicI64 = AtomicI64::new(2_000);

/// Live holds `RLOCK.TOP HELD` and the hold-time percentiles track at most (about 170 bytes of
/// server memory each, plus the key's and owner's bytes). Holds come in start order, so a full
/// table refuses new holds and keeps the oldest (`rlock_holds_untracked` counts the refused).
pub static TOP_MAX_HOLDS: AtomicI64 = AtomicI64::new(100_000);

pub fn deadlock_max_steps() -> usize {
    DEADLOCK_MAX_STEPS.load(Relaxed).max(0) as usize
}

pub fn get(value: &AtomicI64) -> i64 {
    value.load(Relaxed)
}

/// Register every parameter and apply values given at load.
pub fn register(ctx: Ctx) -> Result<(), String> {
    let ok = config::numeric(
        ctx,
        "session-max-grace-ms",
        &SESSION_MAX_GRACE_MS,
        SESSION_MAX_GRACE_MS_LEAST,
        86_400_000,
    ) && config::numeric(
        ctx,
        "session-max-queued",
        &SESSION_MAX_QUEUED,
        1,
        i64::from(i32::MAX),
    ) && config::numeric(
        ctx,
        "session-max-backlog",
        &SESSION_MAX_BACKLOG,
        1,
        i64::from(i32::MAX),
    ) && config::numeric(
        ctx,
        "session-max-per-user",
        &SESSION_MAX_PER_USER,
        1,
        i64::from(i32::MAX),
    ) && config::numeric(
        ctx,
        "session-max-name-bytes",
        &SESSION_MAX_NAME_BYTES,
        1,
        65_536,
    ) && config::boolean(ctx, "deadlock-detection", &DEADLOCK_DETECTION)
        && config::numeric(
            ctx,
            "deadlock-max-steps",
            &DEADLOCK_MAX_STEPS,
            0,
            10_000_000,
        )
        && config::numeric(
            ctx,
            "sem-max-leased-permits",
            &SEM_MAX_LEASED_PERMITS,
            1,
            crate::core::semaphore::MAX_LEASED,
        )
        && config::numeric(ctx, "top-max-holds", &TOP_MAX_HOLDS, 0, 10_000_000)
        && config::load(ctx);
    if ok {
        Ok(())
    } else {
        Err("failed to register the module's configuration parameters".into())
    }
}

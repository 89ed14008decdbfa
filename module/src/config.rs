//! The module's configuration parameters (`CONFIG SET rlock.<name>`), with their defaults.

use crate::ffi::{config, Ctx};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// The longest grace period a session may ask for: how long its queued requests and
/// unacknowledged grants outlive its listener.
pub static SESSION_MAX_GRACE_MS: AtomicI64 = AtomicI64::new(60_000);
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

pub fn get(value: &AtomicI64) -> i64 {
    value.load(Relaxed)
}

/// Register every parameter and apply values given at load.
pub fn register(ctx: Ctx) -> Result<(), String> {
    let ok = config::numeric(
        ctx,
        "session-max-grace-ms",
        &SESSION_MAX_GRACE_MS,
        0,
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
        && config::load(ctx);
    if ok {
        Ok(())
    } else {
        Err("failed to register the module's configuration parameters".into())
    }
}

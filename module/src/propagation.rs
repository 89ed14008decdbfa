//! Whether replicating our writes can reach anyone, kept up to date from server events.
//!
//! `RM_Replicate` costs about as much as the lock write itself (Redis looks the command up by
//! name and builds its arguments on every call), and Redis discards the result when nothing
//! listens. Redis' own rule (`shouldPropagate`) is: AOF on, or a replication stream (replicas or
//! a backlog). We replicate when any of these may hold:
//! - AOF is on (read at load and on every config change, which is how AOF is switched on);
//! - a replication stream may exist: sticky once seen, set from INFO at load and on every fork
//!   (a replica's full sync forks before any write that its backlog must carry; everything
//!   before the fork is in the snapshot), replica change or role change;
//! - RDB save points are configured: `RM_Replicate` is also what counts changes for them
//!   (`server.dirty`), so skipping it would delay snapshots.

use crate::ffi::Ctx;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// Replicas connected now (PUBLISH goes to replicas only; see `apply`).
static REPLICAS: AtomicI64 = AtomicI64::new(1);
/// A replication stream may exist (sticky).
static STREAM: AtomicBool = AtomicBool::new(true);
/// AOF is on, or RDB save points are configured: a write must count for persistence.
static PERSISTENCE: AtomicBool = AtomicBool::new(true);

/// Whether a write must be replicated (`replicas_only`: PUBLISH, which Redis sends only to
/// connected replicas).
pub fn needed(replicas_only: bool) -> bool {
    if replicas_only {
        return REPLICAS.load(Relaxed) > 0;
    }
    STREAM.load(Relaxed) || PERSISTENCE.load(Relaxed)
}

/// Re-read the replication state and save points (at load, and on the events below).
pub fn refresh(ctx: Ctx) {
    // Unknown values count as "yes": nothing is ever withheld by mistake.
    let replicas = ctx
        .info_int(c"replication", c"connected_slaves")
        .unwrap_or(1);
    let backlog = ctx
        .info_int(c"replication", c"repl_backlog_active")
        .unwrap_or(1);
    REPLICAS.store(replicas, Relaxed);
    if replicas > 0 || backlog != 0 || ctx.is_replica() {
        STREAM.store(true, Relaxed);
    }
    let aof = ctx.info_int(c"persistence", c"aof_enabled").unwrap_or(1) != 0;
    let save = ctx.config_get(c"save");
    let save_points = save.is_none_or(|v| !v.trim_ascii().is_empty());
    PERSISTENCE.store(aof || save_points, Relaxed);
}

/// Called once at load: start from what the server says instead of the cautious defaults.
pub fn init(ctx: Ctx) {
    STREAM.store(false, Relaxed);
    refresh(ctx);
}

/// A child process was forked (a replica's full sync, AOF rewrite or BGSAVE): a replication
/// stream may exist from now on.
pub fn stream_seen() {
    STREAM.store(true, Relaxed);
}

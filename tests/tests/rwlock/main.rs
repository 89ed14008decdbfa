//! `RRWLOCK.*` against real servers, one file per part of the contract
//! (`shared/design/commands.md`, "Read-write lock"): replies and key contents, publishing,
//! the FIFO queue across modes, leases, bad input, replication, INFO and COMMAND
//! metadata, Redis Cluster. Interop with Redisson's own scripts is in `rwlock_interop.rs`; the AOF
//! reload and out-of-memory tests every object shares are in `every_object.rs`.

mod bad_input;
mod cluster;
mod commands;
mod leases;
mod observability;
mod publish;
mod queue;
mod replication;

use rlock_tests::*;
use std::time::Duration;

/// How long after the freeing event (or the expiry time) a grant or a tidy may take. The
/// contract targets 10 ms; the margin absorbs scheduling on a loaded machine (as the lock's
/// tests do), widened by `RLOCK_TIME_SCALE` ([`margin`]).
pub static PROMPT: std::sync::LazyLock<Duration> =
    std::sync::LazyLock::new(|| margin(Duration::from_millis(50)));

pub use rlock_tests::{rw_acquire as acquire, rw_release as release};

/// Every key name of the current database, sorted.
pub fn keys(c: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    k.sort();
    k
}

/// Readers as [`RwInfo`] shows them.
pub fn readers(r: &[(&str, i64)]) -> std::collections::BTreeMap<String, i64> {
    r.iter().map(|(o, n)| (o.to_string(), *n)).collect()
}

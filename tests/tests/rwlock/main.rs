//! `RRWLOCK.*` against real servers, one file per part of the contract
//! (`shared/design/commands.md`, "Read-write lock"): replies and key contents, publishing,
//! the FIFO queue across modes, leases, bad input, replication and AOF, INFO and COMMAND
//! metadata, Redis Cluster. Interop with Redisson's own scripts is in `rwlock_interop.rs`.

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

/// `RRWLOCK.ACQUIRE key owner mode lease_ms` (no wait); the raw reply.
pub fn acquire(c: &mut redis::Connection, key: &str, owner: &str, mode: &str, lease: i64) -> Value {
    raw(c, &cmd!("RRWLOCK.ACQUIRE", key, owner, mode, lease))
}

/// `RRWLOCK.RELEASE key owner mode`; the raw reply.
pub fn release(c: &mut redis::Connection, key: &str, owner: &str, mode: &str) -> Value {
    raw(c, &cmd!("RRWLOCK.RELEASE", key, owner, mode))
}

/// Every key name of the current database, sorted.
pub fn keys(c: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    k.sort();
    k
}

/// A hash's content as `(field, value)` pairs written as text, for `assert_eq!` with literals.
pub fn fields(c: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    hgetall(c, key).into_iter().collect()
}

/// `[(field, value)]` from string literals.
pub fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = p
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

/// Readers as [`RwInfo`] shows them.
pub fn readers(r: &[(&str, i64)]) -> std::collections::BTreeMap<String, i64> {
    r.iter().map(|(o, n)| (o.to_string(), *n)).collect()
}

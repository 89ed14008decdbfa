//! Redisson's unlock latch (reference/redisson.md §0.3): the key an unlock script sets so a
//! retried unlock answers as the first did, and which the client deletes after the unlock.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{cmd, int, prefix_name, raw, Value};

/// Redisson's latch TTL with default settings is about 16-20 s.
pub const LATCH_TTL_MS: i64 = 18_000;

/// A fresh unlock latch key for `key` (`redisson_unlock_latch:{key}:<request id>`, §0.3).
pub(super) fn unlock_latch(key: &str) -> String {
    static REQUEST: AtomicU64 = AtomicU64::new(1);
    let request_id = format!("{:032x}", REQUEST.fetch_add(1, Ordering::Relaxed));
    format!("{}:{request_id}", prefix_name("redisson_unlock_latch", key))
}

/// Run an unlock script whose KEYS include `latch`, then delete the latch as the client does
/// after a successful unlock.
pub(super) fn unlock_with_latch(
    conn: &mut redis::Connection,
    script: &redis::Cmd,
    latch: &str,
) -> Value {
    let reply = raw(conn, script);
    if !matches!(reply, Value::Nil | Value::ServerError(_)) {
        int(conn, &cmd!("DEL", latch));
    }
    reply
}

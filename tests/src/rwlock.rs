//! Read-write lock helpers: Redisson's names for its auxiliary keys and channel, the parsed
//! `RRWLOCK.INFO` reply, and parking a blocked `RRWLOCK.ACQUIRE`.

use crate::{cmd, info_pairs, prefix_name, raw, suffix_name, text, wait_blocked, Pending, Server};
use redis::Value;
use std::collections::BTreeMap;

/// The channel a read-write lock publishes on: `redisson_rwlock:{key}`.
pub fn rwlock_channel(key: &str) -> String {
    prefix_name("redisson_rwlock", key)
}

/// The key holding the lease of `owner`'s `k`-th read hold: `{key}:<owner>:rwlock_timeout:<k>`.
pub fn rwlock_hold(key: &str, owner: &str, k: i64) -> String {
    suffix_name(key, &format!("{owner}:rwlock_timeout:{k}"))
}

/// The parsed `RRWLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RwInfo {
    /// `read`, `write`, or `None` when there is no read-write lock.
    pub mode: Option<String>,
    /// Reader owner -> read holds.
    pub readers: BTreeMap<String, i64>,
    /// The writer and its write holds.
    pub writer: Option<(String, i64)>,
    pub ttl_ms: i64,
    pub waiters: i64,
    /// Queued `(owner, mode)`, FIFO order.
    pub queue: Vec<(String, String)>,
}

fn items(what: &str, v: &Value) -> Vec<Value> {
    match v {
        Value::Array(items) => items.clone(),
        other => panic!("RRWLOCK.INFO {what}: expected an array, got {other:?}"),
    }
}

fn owner_count(what: &str, pair: &[Value]) -> (String, i64) {
    match pair {
        [o, Value::Int(n)] => (
            text(o).unwrap_or_else(|| panic!("RRWLOCK.INFO {what}: owner {o:?}")),
            *n,
        ),
        other => panic!("RRWLOCK.INFO {what}: expected [owner, count], got {other:?}"),
    }
}

impl RwInfo {
    /// Parse the RESP2 flat array or the RESP3 map; panics on any other shape.
    pub fn parse(v: &Value) -> RwInfo {
        let pairs = info_pairs(
            "RRWLOCK.INFO",
            v,
            &["mode", "readers", "writer", "ttl_ms", "waiters", "queue"],
        );
        let get = |name: &str| &pairs.iter().find(|(k, _)| k == name).unwrap().1;
        let int_of = |name: &str| match get(name) {
            Value::Int(n) => *n,
            other => panic!("RRWLOCK.INFO {name}: expected an integer, got {other:?}"),
        };
        let mode = match get("mode") {
            Value::Nil => None,
            other => Some(text(other).unwrap_or_else(|| panic!("RRWLOCK.INFO mode: {other:?}"))),
        };
        let flat = items("readers", get("readers"));
        assert!(
            flat.len().is_multiple_of(2),
            "RRWLOCK.INFO readers: {flat:?}"
        );
        let readers = flat.chunks(2).map(|p| owner_count("readers", p)).collect();
        let writer = match get("writer") {
            Value::Nil => None,
            w => Some(owner_count("writer", &items("writer", w))),
        };
        let queue = items("queue", get("queue"))
            .iter()
            .map(|e| match items("queue entry", e).as_slice() {
                [o, m] => (text(o).unwrap(), text(m).unwrap()),
                other => panic!("RRWLOCK.INFO queue entry: {other:?}"),
            })
            .collect();
        RwInfo {
            mode,
            readers,
            writer,
            ttl_ms: int_of("ttl_ms"),
            waiters: int_of("waiters"),
            queue,
        }
    }
}

/// `RRWLOCK.INFO key`, parsed.
pub fn rw_info(conn: &mut redis::Connection, key: &str) -> RwInfo {
    RwInfo::parse(&raw(conn, &cmd!("RRWLOCK.INFO", key)))
}

/// Send `RRWLOCK.ACQUIRE key owner mode lease_ms BLOCK 0` on a new connection and wait until the
/// server reports `blocked_after` blocked clients, i.e. the waiter is parked.
pub fn park_rw(
    server: &Server,
    admin: &mut redis::Connection,
    key: &str,
    owner: &str,
    mode: &str,
    lease_ms: i64,
    blocked_after: i64,
) -> Pending {
    let p = Pending::send(
        server,
        &cmd!("RRWLOCK.ACQUIRE", key, owner, mode, lease_ms, "BLOCK", 0),
    );
    wait_blocked(admin, blocked_after);
    p
}

/// `RRWLOCK.ACQUIRE key owner mode lease_ms` (no wait); the raw reply.
pub fn rw_acquire(
    c: &mut redis::Connection,
    key: &str,
    owner: &str,
    mode: &str,
    lease: i64,
) -> Value {
    raw(c, &cmd!("RRWLOCK.ACQUIRE", key, owner, mode, lease))
}

/// `RRWLOCK.RELEASE key owner mode`; the raw reply.
pub fn rw_release(c: &mut redis::Connection, key: &str, owner: &str, mode: &str) -> Value {
    raw(c, &cmd!("RRWLOCK.RELEASE", key, owner, mode))
}

//! Reading what a server reports: `INFO` fields, the module's `INFO rlock` counters, and the
//! `RLOCK.INFO` introspection reply (with the pair list every `*.INFO` reply shares).

use redis::Value;

use crate::{cmd, raw, text};

/// A field of `INFO <section>` as a string.
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// An integer field of `INFO <section>` (0 when absent).
pub fn info_int(conn: &mut redis::Connection, section: &str, field: &str) -> i64 {
    info_field(conn, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The parsed `RLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: Option<String>,
    pub holds: i64,
    pub ttl_ms: i64,
    pub token: Option<i64>,
    pub waiters: i64,
    pub queue: Vec<String>,
}

impl LockInfo {
    /// Parse the RESP2 flat array or the RESP3 map; panics on any other shape.
    pub fn parse(v: &Value) -> LockInfo {
        let pairs = info_pairs(
            "RLOCK.INFO",
            v,
            &["owner", "holds", "ttl_ms", "token", "waiters", "queue"],
        );
        let get = |name: &str| &pairs.iter().find(|(k, _)| k == name).unwrap().1;
        let int_of = |name: &str| match get(name) {
            Value::Int(n) => *n,
            other => panic!("RLOCK.INFO {name}: expected an integer, got {other:?}"),
        };
        let owner = match get("owner") {
            Value::Nil => None,
            other => Some(text(other).unwrap_or_else(|| panic!("RLOCK.INFO owner: {other:?}"))),
        };
        let token = match get("token") {
            Value::Nil => None,
            Value::Int(n) => Some(*n),
            other => panic!("RLOCK.INFO token: expected an integer or nil, got {other:?}"),
        };
        let queue = match get("queue") {
            Value::Array(items) | Value::Set(items) => items
                .iter()
                .map(|i| text(i).expect("RLOCK.INFO queue entry"))
                .collect(),
            other => panic!("RLOCK.INFO queue: expected an array, got {other:?}"),
        };
        LockInfo {
            owner,
            holds: int_of("holds"),
            ttl_ms: int_of("ttl_ms"),
            token,
            waiters: int_of("waiters"),
            queue,
        }
    }
}

/// The `(name, value)` pairs of an introspection reply (`*.INFO`): a RESP2 flat array or a RESP3
/// map, whose names must be exactly `names`, in that order.
pub fn info_pairs(what: &str, v: &Value, names: &[&str]) -> Vec<(String, Value)> {
    let pairs: Vec<(String, Value)> = match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "{what}: odd-length flat array {v:?}");
            items
                .chunks(2)
                .map(|kv| (text(&kv[0]).expect("field name"), kv[1].clone()))
                .collect()
        }
        Value::Map(kvs) => kvs
            .iter()
            .map(|(k, v)| (text(k).expect("field name"), v.clone()))
            .collect(),
        other => panic!("{what}: expected a flat array or a map, got {other:?}"),
    };
    let got: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, names, "{what} fields and their order: {v:?}");
    pairs
}

/// `RLOCK.INFO key`, parsed.
pub fn lock_info(conn: &mut redis::Connection, key: &str) -> LockInfo {
    LockInfo::parse(&raw(conn, &cmd!("RLOCK.INFO", key)))
}

/// A counter of `INFO rlock`. Redis prefixes every field a module adds with `<module name>_`
/// (`RM_InfoAddField*`), so `acquired` may show as `rlock_acquired`; both spellings are accepted.
pub fn rlock_stat(conn: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("rlock").query(conn).unwrap();
    rlock_stat_in(&info, field)
}

/// [`rlock_stat`] read from the text of an `INFO rlock` reply already at hand.
pub fn rlock_stat_in(info: &str, field: &str) -> i64 {
    let prefixed = format!("rlock_{field}");
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| *name == field || *name == prefixed)
        .map(|(_, v)| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("INFO rlock {field}: {v}"))
        })
        .unwrap_or_else(|| panic!("INFO rlock has no field {field}:\n{info}"))
}

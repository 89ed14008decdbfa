//! Commands and replies: the [`cmd!`](crate::cmd) builder, typed reads of a reply, and the
//! plain data commands the assertions use (HGETALL, PTTL, EXISTS, DBSIZE).

use std::collections::BTreeMap;

use redis::{ConnectionLike, Value};

/// Build a [`redis::Cmd`] from a name and any number of arguments:
/// `cmd!("RLOCK.ACQUIRE", "k", "owner", 1000)`.
#[macro_export]
macro_rules! cmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut c = $crate::redis::cmd($name);
        $( c.arg($arg); )*
        c
    }};
}

/// Render a command for assertion messages (binary arguments escaped).
pub fn show(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => format!("{:?}", String::from_utf8_lossy(b)),
            _ => "<cursor>".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Send `cmd` and return the raw reply; a server error comes back as `Value::ServerError`.
/// Panics only when the connection itself fails.
pub fn raw(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    conn.req_command(cmd)
        .unwrap_or_else(|e| panic!("{}: connection error {e}", show(cmd)))
}

/// The reply must be an integer.
pub fn int(conn: &mut redis::Connection, cmd: &redis::Cmd) -> i64 {
    match raw(conn, cmd) {
        Value::Int(n) => n,
        other => panic!("{}: expected an integer, got {other:?}", show(cmd)),
    }
}

/// The reply must be nil.
pub fn nil(conn: &mut redis::Connection, cmd: &redis::Cmd) {
    match raw(conn, cmd) {
        Value::Nil => {}
        other => panic!("{}: expected nil, got {other:?}", show(cmd)),
    }
}

/// The reply must be a simple or bulk string.
pub fn string(conn: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    text(&raw(conn, cmd)).unwrap_or_else(|| panic!("{}: expected a string", show(cmd)))
}

/// The reply must be an error; returns `"CODE detail"`.
pub fn err(conn: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    let v = raw(conn, cmd);
    error_text(&v).unwrap_or_else(|| panic!("{}: expected an error, got {v:?}", show(cmd)))
}

/// `"CODE detail"` of an error reply, `None` for any other reply.
pub fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        }),
        _ => None,
    }
}

/// A string-ish reply as text.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_string()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// HGETALL as a sorted map (lock hashes hold `owner -> count`).
pub fn hgetall(conn: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(conn).unwrap()
}

/// `{owner: count}` as HGETALL returns it.
pub fn holder(owner: &str, count: i64) -> BTreeMap<String, String> {
    BTreeMap::from([(owner.to_string(), count.to_string())])
}

pub fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    int(conn, &cmd!("PTTL", key))
}

pub fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    int(conn, &cmd!("EXISTS", key)) == 1
}

pub fn dbsize(conn: &mut redis::Connection) -> i64 {
    int(conn, &cmd!("DBSIZE"))
}

/// Assert `lo <= value <= hi` with a readable message.
#[track_caller]
pub fn assert_between(what: &str, value: i64, lo: i64, hi: i64) {
    assert!(
        lo <= value && value <= hi,
        "{what} = {value}, expected within [{lo}, {hi}]"
    );
}

/// A hash's content as `(field, value)` pairs written as text, for `assert_eq!` with [`pairs`].
pub fn fields(c: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    hgetall(c, key).into_iter().collect()
}

/// `[(field, value)]` from string literals, sorted as [`fields`] gives them.
pub fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = p
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

/// The permit ids of an `RSEM.ACQUIRE ... LEASE` reply.
pub fn permit_ids(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) => items.iter().map(|i| text(i).unwrap()).collect(),
        other => panic!("expected permit ids, got {other:?}"),
    }
}

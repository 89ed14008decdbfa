//! `COMMAND INFO` and `COMMAND DOCS` entries, as cluster clients and redis-cli read them.

use crate::{cmd, raw, text};
use redis::Value;

/// A named field of a flat RESP2 map (`[name, value, name, value, ...]`).
pub fn map_field<'a>(items: &'a [Value], name: &str) -> Option<&'a Value> {
    items
        .chunks(2)
        .find(|kv| text(&kv[0]).as_deref() == Some(name))
        .map(|kv| &kv[1])
}

/// An array (or set) reply of strings.
pub fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().filter_map(text).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// Assert `COMMAND INFO name`: the arity, flags it must and must not have, and the key in
/// position 1 (first key, last key, step = 1, 1, 1).
#[track_caller]
pub fn assert_command_info(
    conn: &mut redis::Connection,
    name: &str,
    arity: i64,
    must: &[&str],
    must_not: &[&str],
) {
    let entry = match raw(conn, &cmd!("COMMAND", "INFO", name)) {
        Value::Array(v) if v.len() == 1 => match &v[0] {
            Value::Array(e) => e.clone(),
            other => panic!("COMMAND INFO {name}: unknown command? {other:?}"),
        },
        other => panic!("COMMAND INFO {name}: {other:?}"),
    };
    assert_eq!(text(&entry[0]).as_deref(), Some(name));
    assert_eq!(entry[1], Value::Int(arity), "{name} arity");
    let flags = strings(&entry[2]);
    for f in must {
        assert!(
            flags.iter().any(|x| x == f),
            "{name} flags {flags:?} lack {f}"
        );
    }
    for f in must_not {
        assert!(
            !flags.iter().any(|x| x == f),
            "{name} flags {flags:?} have {f}"
        );
    }
    assert_eq!(
        (&entry[3], &entry[4], &entry[5]),
        (&Value::Int(1), &Value::Int(1), &Value::Int(1)),
        "{name}: first key, last key, step"
    );
}

/// `COMMAND DOCS name` as a flat map (see [`map_field`]).
pub fn command_docs(conn: &mut redis::Connection, name: &str) -> Vec<Value> {
    match raw(conn, &cmd!("COMMAND", "DOCS", name)) {
        Value::Array(v) if v.len() == 2 => match &v[1] {
            Value::Array(d) => d.clone(),
            other => panic!("COMMAND DOCS {name}: {other:?}"),
        },
        other => panic!("COMMAND DOCS {name}: no entry: {other:?}"),
    }
}

/// The summary `COMMAND DOCS name` gives (empty when it has none).
pub fn command_summary(conn: &mut redis::Connection, name: &str) -> String {
    map_field(&command_docs(conn, name), "summary")
        .and_then(text)
        .unwrap_or_default()
}

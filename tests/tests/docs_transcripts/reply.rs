//! Replies as redis-cli prints them on a terminal, and the comparison of a shown reply with the
//! server's under the masking rules of `main.rs`.

use rlock_tests::{error_text, Value};
use std::collections::BTreeMap;

/// `v` as redis-cli prints it (RESP2, its TTY format: `cliFormatReplyTTY` in redis-cli.c).
pub fn lines(v: &Value) -> Vec<String> {
    let mut out = String::new();
    format(v, "", &mut out);
    out.lines().map(str::to_string).collect()
}

fn format(v: &Value, prefix: &str, out: &mut String) {
    match v {
        Value::Nil => out.push_str("(nil)\n"),
        Value::Int(n) => out.push_str(&format!("(integer) {n}\n")),
        Value::Okay => out.push_str("OK\n"),
        Value::SimpleString(s) => out.push_str(&format!("{s}\n")),
        Value::BulkString(b) => out.push_str(&format!("{}\n", repr(b))),
        Value::ServerError(_) => {
            out.push_str(&format!("(error) {}\n", error_text(v).unwrap_or_default()))
        }
        Value::Array(items) if items.is_empty() => out.push_str("(empty array)\n"),
        Value::Array(items) => {
            // Indexes are right-aligned to the widest; nested arrays are indented past them.
            let width = items.len().to_string().len();
            let nested = format!("{prefix}{}", " ".repeat(width + 2));
            for (i, item) in items.iter().enumerate() {
                let lead = if i == 0 { "" } else { prefix };
                out.push_str(&format!("{lead}{:>width$}) ", i + 1));
                format(item, &nested, out);
            }
        }
        other => out.push_str(&format!("(unexpected RESP3 value {other:?})\n")),
    }
}

/// A bulk string quoted as redis-cli does (`sdscatrepr`).
fn repr(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            7 => s.push_str("\\a"),
            8 => s.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => s.push(b as char),
            b => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// Values the page showed that stand for others on this server (a permit id shown is
/// random): shown text → the server's. Later commands and replies use the server's.
#[derive(Default)]
pub struct Bindings(BTreeMap<String, String>);

impl Bindings {
    /// `text` with every shown value bound so far replaced by the server's.
    pub fn apply(&self, text: &str) -> String {
        let mut t = text.to_string();
        for (shown, real) in &self.0 {
            t = t.replace(shown.as_str(), real);
        }
        t
    }

    fn is_bound_value(&self, v: &str) -> bool {
        self.0.values().any(|r| r == v)
    }
}

/// Split a reply line into its array indexes (`12) 1) `, with their indentation) and its value.
fn split(line: &str) -> (&str, &str) {
    let mut end = 0;
    let b = line.as_bytes();
    let mut i = 0;
    loop {
        while i < b.len() && (b[i] == b' ' || b[i].is_ascii_digit()) {
            i += 1;
        }
        if i < b.len() && b[i] == b')' && i + 1 < b.len() && b[i + 1] == b' ' {
            i += 2;
            end = i;
        } else {
            return (&line[..end], &line[end..]);
        }
    }
}

/// Masking rule 1: a time or a token (see `main.rs`).
fn close_enough(shown: &str, real: &str) -> bool {
    let (Some(s), Some(r)) = (
        shown
            .strip_prefix("(integer) ")
            .and_then(|n| n.parse::<i64>().ok()),
        real.strip_prefix("(integer) ")
            .and_then(|n| n.parse::<i64>().ok()),
    ) else {
        return false;
    };
    s >= 1000 && (r - s).abs() <= s / 4
}

/// Masking rule 3: the value after an `"age_ms"` field (`RLOCK.TOP HELD`): how long a hold has
/// lasted, which depends on how long the reader took to get there. Any age that is an integer
/// of 0 or more.
fn an_age(previous: Option<&String>, shown: &str, real: &str) -> bool {
    let age = |v: &str| {
        v.strip_prefix("(integer) ")
            .and_then(|n| n.parse::<i64>().ok())
            .is_some_and(|n| n >= 0)
    };
    previous.is_some_and(|p| split(p).1 == "\"age_ms\"") && age(shown) && age(real)
}

/// Masking rule 2: a permit id; its text is bound for the rest of the page.
fn permit_id(v: &str) -> Option<&str> {
    let id = v.strip_prefix('"')?.strip_suffix('"')?;
    (id.len() == 32 && id.bytes().all(|c| c.is_ascii_hexdigit())).then_some(id)
}

/// Compare the lines a page shows with the server's reply; `None` when they match (binding
/// the permit ids it meets), else the first difference.
pub fn compare(shown: &[String], real: &[String], bindings: &mut Bindings) -> Option<usize> {
    let mut new = Vec::new();
    for k in 0..shown.len().max(real.len()) {
        let (Some(s), Some(r)) = (shown.get(k), real.get(k)) else {
            return Some(k);
        };
        if s == r {
            continue;
        }
        let ((sp, sv), (rp, rv)) = (split(s), split(r));
        if sp != rp {
            return Some(k);
        }
        if close_enough(sv, rv) || an_age(k.checked_sub(1).and_then(|p| shown.get(p)), sv, rv) {
            continue;
        }
        match (permit_id(sv), permit_id(rv)) {
            (Some(a), Some(b)) if !bindings.is_bound_value(a) => {
                new.push((a.to_string(), b.to_string()))
            }
            _ => return Some(k),
        }
    }
    bindings.0.extend(new);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn formats_nested_arrays_as_redis_cli_does() {
        let bulk = |t: &str| Value::BulkString(t.as_bytes().to_vec());
        let mut v: Vec<Value> = (1..=11).map(Value::Int).collect();
        v.push(Value::Array(vec![
            Value::Array(vec![bulk("a"), bulk("write")]),
            Value::Array(vec![]),
        ]));
        let out = lines(&Value::Array(v));
        assert_eq!(out[0], " 1) (integer) 1");
        assert_eq!(out[11], "12) 1) 1) \"a\"");
        assert_eq!(out[12], "       2) \"write\"");
        assert_eq!(out[13], "    2) (empty array)");
    }

    #[test]
    fn masks_only_what_the_rules_say() {
        let mut b = Bindings::default();
        // Rule 1: within a quarter of the value shown, for values of 1000 and above only.
        assert_eq!(
            compare(&s(&["(integer) 29685"]), &s(&["(integer) 29999"]), &mut b),
            None
        );
        assert_eq!(
            compare(&s(&["(integer) 29685"]), &s(&["(integer) 60000"]), &mut b),
            Some(0)
        );
        assert_eq!(
            compare(&s(&["(integer) 2"]), &s(&["(integer) 3"]), &mut b),
            Some(0)
        );
        assert_eq!(
            compare(&s(&["(integer) -1"]), &s(&["(integer) -2"]), &mut b),
            Some(0)
        );
        // Rule 3: an age, and only after "age_ms".
        assert_eq!(
            compare(
                &s(&["11) \"age_ms\"", "12) (integer) 4210"]),
                &s(&["11) \"age_ms\"", "12) (integer) 3"]),
                &mut b
            ),
            None
        );
        assert_eq!(
            compare(
                &s(&["13) \"ttl_ms\"", "14) (integer) 4"]),
                &s(&["13) \"ttl_ms\"", "14) (integer) 3"]),
                &mut b
            ),
            Some(1)
        );
        assert_eq!(
            compare(
                &s(&["11) \"age_ms\"", "12) (integer) 4210"]),
                &s(&["11) \"age_ms\"", "12) (integer) -1"]),
                &mut b
            ),
            Some(1)
        );
        // Rule 2: a permit id is bound once, then must be the same.
        let shown = "\"7034183b6982aae9385b7798796c1ef5\"";
        let real = "\"00000000000000000000000000000001\"";
        assert_eq!(
            compare(
                &s(&[&format!("1) {shown}")]),
                &s(&[&format!("1) {real}")]),
                &mut b
            ),
            None
        );
        let later = b.apply(shown);
        assert_eq!(later, real);
        let other = "\"00000000000000000000000000000002\"";
        assert_eq!(compare(&s(&[&later]), &s(&[other]), &mut b), Some(0));
        // Indexes and lengths are never masked.
        assert_eq!(
            compare(&s(&["1) (nil)"]), &s(&["2) (nil)"]), &mut b),
            Some(0)
        );
        assert_eq!(
            compare(&s(&["(nil)"]), &s(&["(nil)", "(nil)"]), &mut b),
            Some(1)
        );
    }
}

//! The read-write lock's requests (`RRWLOCK.*`), fields and replies. Each side of a read-write
//! lock is a lock: the lock's operations (`ops/lock.rs`) run it, asking this file for the
//! commands and fields that differ.

use std::borrow::Cow;

use redis::{Cmd, Value};

use crate::holds::Kind;
use crate::protocol::redisson::rwlock::write_field;
pub(crate) use crate::protocol::redisson::rwlock::Side;

/// The side's word in `RRWLOCK.*` commands.
fn word(side: Side) -> &'static str {
    match side {
        Side::Read => "READ",
        Side::Write => "WRITE",
    }
}

/// Read holds in the hold registry, renewed with `RRWLOCK.RENEW`.
pub(crate) static READ: Kind = Kind {
    name: "read lock",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: Some(|name, owner, _| release_cmd(name, owner, Side::Read)),
};

/// Write holds in the hold registry. `RRWLOCK.RENEW` renews every hold of the owner, so an
/// owner holding both sides is renewed twice per round (harmless, and rare: a downgrade).
pub(crate) static WRITE: Kind = Kind {
    name: "write lock",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: Some(|name, owner, _| release_cmd(name, owner, Side::Write)),
};

pub(crate) fn kind(side: Side) -> &'static Kind {
    match side {
        Side::Read => &READ,
        Side::Write => &WRITE,
    }
}

/// `RRWLOCK.RENEW name owner lease_ms`: the number of the owner's holds renewed.
pub(crate) fn renew_cmd(name: &str, owner: &str, lease_ms: u64) -> Cmd {
    let mut cmd = redis::cmd("RRWLOCK.RENEW");
    cmd.arg(name).arg(owner).arg(lease_ms);
    cmd
}

/// `RRWLOCK.ACQUIRE name owner READ|WRITE lease_ms [BLOCK ms]`.
pub(crate) fn acquire_cmd(
    name: &str,
    owner: &str,
    side: Side,
    lease_ms: u64,
    block: Option<u64>,
) -> Cmd {
    let mut cmd = super::keyed_cmd("RRWLOCK.ACQUIRE", name, owner);
    cmd.arg(word(side)).arg(lease_ms);
    if let Some(ms) = block {
        cmd.arg("BLOCK").arg(ms);
    }
    cmd
}

/// `RRWLOCK.RELEASE name owner READ|WRITE`: the holds of that side that remain.
pub(crate) fn release_cmd(name: &str, owner: &str, side: Side) -> Cmd {
    let mut cmd = super::keyed_cmd("RRWLOCK.RELEASE", name, owner);
    cmd.arg(word(side));
    cmd
}

/// The hash field counting `owner`'s holds of `side` (Redisson's layout).
pub(crate) fn field(owner: &str, side: Side) -> Cow<'_, str> {
    match side {
        Side::Read => Cow::Borrowed(owner),
        Side::Write => Cow::Owned(write_field(owner)),
    }
}

/// Redisson's `forceUnlock` of one side: the lock is deleted only while it is in that side's
/// mode (a read lock's force unlock leaves a write-locked lock alone, and the reverse). The
/// deletion itself is `RRWLOCK.FORCERELEASE`, so the module publishes and hands the lock on;
/// the mode check and it run as one script so nothing can change the mode in between.
pub(crate) fn force_release_cmd(name: &str, side: Side) -> Cmd {
    const SCRIPT: &str = "if redis.call('hget', KEYS[1], 'mode') == ARGV[1] then \
                          return redis.call('RRWLOCK.FORCERELEASE', KEYS[1]) end return 0";
    let mut cmd = redis::cmd("EVAL");
    let mode = match side {
        Side::Read => "read",
        Side::Write => "write",
    };
    cmd.arg(SCRIPT).arg(1).arg(name).arg(mode);
    cmd
}

/// `RRWLOCK.INFO name`.
pub(crate) fn info_cmd(name: &str) -> Cmd {
    let mut cmd = redis::cmd("RRWLOCK.INFO");
    cmd.arg(name);
    cmd
}

/// Whether an `RRWLOCK.INFO` reply shows `side` held by anyone: a reader (a downgraded writer
/// included, as Redisson's read `isLocked` counts it), or a writer.
pub(crate) fn side_locked(info: &Value, side: Side) -> redis::RedisResult<bool> {
    let field = match side {
        Side::Read => "readers",
        Side::Write => "writer",
    };
    match super::info_field(info, field) {
        Some(Value::Array(holders)) => Ok(!holders.is_empty()),
        Some(Value::Nil) => Ok(false),
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected RRWLOCK.INFO reply",
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn requests_follow_the_wire_contract() {
        assert_eq!(
            words(&acquire_cmd("k", "u:1", Side::Read, 30_000, None)),
            ["RRWLOCK.ACQUIRE", "k", "u:1", "READ", "30000"]
        );
        assert_eq!(
            words(&acquire_cmd("k", "u:1", Side::Write, 5, Some(0))),
            ["RRWLOCK.ACQUIRE", "k", "u:1", "WRITE", "5", "BLOCK", "0"]
        );
        assert_eq!(
            words(&release_cmd("k", "u:1", Side::Write)),
            ["RRWLOCK.RELEASE", "k", "u:1", "WRITE"]
        );
        assert_eq!(
            words(&renew_cmd("k", "u:1", 9)),
            ["RRWLOCK.RENEW", "k", "u:1", "9"]
        );
        assert_eq!(field("u:1", Side::Read), "u:1");
        assert_eq!(field("u:1", Side::Write), "u:1:write");
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn info_replies_in_both_protocols() {
        let flat = Value::Array(vec![
            bulk("mode"),
            bulk("write"),
            bulk("readers"),
            Value::Array(vec![bulk("u:1"), Value::Int(1)]),
            bulk("writer"),
            Value::Array(vec![bulk("u:1"), Value::Int(2)]),
        ]);
        assert!(side_locked(&flat, Side::Read).unwrap());
        assert!(side_locked(&flat, Side::Write).unwrap());
        let map = Value::Map(vec![
            (bulk("mode"), Value::Nil),
            (bulk("readers"), Value::Array(vec![])),
            (bulk("writer"), Value::Nil),
        ]);
        assert!(!side_locked(&map, Side::Read).unwrap());
        assert!(!side_locked(&map, Side::Write).unwrap());
        assert!(side_locked(&Value::Int(3), Side::Read).is_err());
    }
}

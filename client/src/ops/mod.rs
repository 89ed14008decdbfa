//! Operations per object: requests built, replies read, holds recorded. Plain async functions
//! over the transport and the wait path, the same for the sync and async APIs.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, Value};

use crate::config::Protocol;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::protocol::redisson::Script;
use crate::transport::{Delivery, Io};
use crate::wait::millis;

pub(crate) mod group;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

/// One object (its key), as an operation reaches it: the client, how the caller waits, and the
/// object's name.
#[derive(Clone, Copy)]
pub(crate) struct Obj<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) io: Io,
    pub(crate) name: &'a Arc<str>,
}

impl Obj<'_> {
    /// `cmd` about this object; the server's errors as `who` (an owner, or nobody) meets them.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        who: &str,
        d: Delivery,
    ) -> Result<T> {
        let ctx = self.ctx;
        ctx.transport
            .query(&ctx.bg, self.io, self.name, cmd, d)
            .await
            .map_err(|e| e.about(self.name, who))
    }

    /// The protocol the object's server gets ([`Protocol::Module`] or [`Protocol::Redisson`]),
    /// detected there on first use.
    pub(crate) async fn protocol(&self) -> Result<Protocol> {
        let ctx = self.ctx;
        ctx.protocols
            .at(&ctx.transport, &ctx.bg, self.io, self.name)
            .await
    }

    /// One of Redisson's scripts about this object (`EVALSHA`, `EVAL` on `NOSCRIPT`).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        d: Delivery,
    ) -> Result<T> {
        let ctx = self.ctx;
        script
            .run(&ctx.transport, &ctx.bg, self.io, keys, args, d)
            .await
            .map_err(|e| e.about(self.name, ""))
    }

    /// A command that may run twice (a read, a renewal).
    pub(crate) async fn read<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.query(cmd, "", Delivery::Idempotent).await
    }

    /// A command that must not run twice: not resent after a broken connection (the caller gets
    /// the ambiguous error).
    pub(crate) async fn write<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.query(cmd, "", Delivery::AtMostOnce).await
    }

    /// A `redis` error met about this object, as the caller's error.
    pub(crate) fn error(&self, e: redis::RedisError) -> Error {
        self.ctx.transport.error(e, self.name)
    }
}

/// A field of an introspection reply: a map (RESP3) or a flat array of name/value pairs.
pub(crate) fn info_field<'a>(reply: &'a Value, name: &str) -> Option<&'a Value> {
    let is = |k: &Value| match k {
        Value::BulkString(b) => b == name.as_bytes(),
        Value::SimpleString(s) => s == name,
        _ => false,
    };
    match reply {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        Value::Array(flat) => flat
            .chunks(2)
            .find(|kv| kv.len() == 2 && is(&kv[0]))
            .map(|kv| &kv[1]),
        _ => None,
    }
}

pub(crate) use crate::protocol::redisson::prefix_name;

/// A lease in whole milliseconds, as the server takes it. A lease shorter than a millisecond is
/// rounded up to 1 ms (every duration is sent rounded up); a zero lease is refused, as the
/// server would.
pub(crate) fn lease_millis(d: Duration) -> Result<u64> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(
            "the lease must be longer than zero".into(),
        ));
    }
    let ms = millis(d);
    if ms > (i64::MAX as u64) / 4 {
        return Err(Error::InvalidArgument("the lease is too long".into()));
    }
    Ok(ms)
}

/// A command's words, for tests of the wire contract.
#[cfg(test)]
pub(crate) use crate::session::wire::words;

/// `name key owner ...` as a command whose buffers are sized once: an acquire then takes the
/// session's `SESSION name QUEUE request timeout BLOCK ms` without growing them (redis-rs grows
/// a command's two vectors one argument at a time: 8 reallocations for a queued acquire).
pub(crate) fn keyed_cmd(name: &'static str, key: &str, owner: &str) -> Cmd {
    /// An acquire's arguments at most, with the session's.
    const ARGS: usize = 14;
    /// The numbers and words around the key, the owner and the session's name.
    const ROOM: usize = 160;
    let mut cmd = Cmd::with_capacity(ARGS, name.len() + key.len() + 2 * owner.len() + ROOM);
    cmd.arg(name).arg(key).arg(owner);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_millisecond_leases_round_up_to_one_millisecond() {
        assert_eq!(lease_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(lease_millis(Duration::from_micros(500)).unwrap(), 1);
        assert_eq!(lease_millis(Duration::from_micros(1001)).unwrap(), 2);
        assert_eq!(lease_millis(Duration::from_secs(30)).unwrap(), 30_000);
        assert!(matches!(
            lease_millis(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_millis(Duration::MAX),
            Err(Error::InvalidArgument(_))
        ));
    }
}

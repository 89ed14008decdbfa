//! The count-down latch's operations: `RLATCH.*` where the module is loaded, Redisson's
//! `RCountDownLatch` scripts where it is not (`protocol/redisson/latch.rs`); one layout.

use redis::{Cmd, Value};

use super::Obj;
use crate::config::Protocol;
use crate::context::Context;
use crate::error::Result;
use crate::protocol::redisson::lock::Try;
use crate::protocol::redisson::{latch as redisson, Script};
use crate::transport::Delivery;
use crate::wait::{self, Attempt, Scripted, Wait};

/// `RLATCH.AWAIT name [BLOCK ms]`: it only reads, so it may be sent again after anything.
struct Await<'a> {
    l: Obj<'a>,
}

impl Attempt for Await<'_> {
    fn key(&self) -> &str {
        self.l.name
    }

    fn kind(&self) -> &'static str {
        "latch"
    }

    fn command(&self, block: Option<u64>) -> Cmd {
        let mut cmd = redis::cmd("RLATCH.AWAIT");
        cmd.arg(&**self.l.name);
        if let Some(ms) = block {
            cmd.arg("BLOCK").arg(ms);
        }
        cmd
    }

    fn granted(&self, reply: &Value) -> bool {
        !matches!(reply, Value::Nil)
    }

    /// Nothing to undo: asking again is the check.
    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        Ok(None)
    }

    async fn give_back(&self, _ctx: &Context) {}
}

/// Redisson's `await`: read the count, and while it is above zero wait for the channel's zero
/// message (the count in Redis decides; a message only says when to look again).
struct ScriptAwait<'a> {
    l: Obj<'a>,
}

impl Scripted for ScriptAwait<'_> {
    fn key(&self) -> &str {
        self.l.name
    }

    fn kind(&self) -> &'static str {
        "latch"
    }

    fn channel(&self) -> String {
        redisson::channel(self.l.name)
    }

    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>) {
        (&redisson::COUNT, vec![self.l.name.to_string()], vec![])
    }

    fn read(&self, reply: &Value) -> redis::RedisResult<Try> {
        redisson::read_open(reply)
    }

    /// Nothing to undo: reading again is the check.
    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        Ok(None)
    }

    async fn give_back(&self, _ctx: &Context) {}
}

/// Wait per `wait` until the count is zero: whether it is.
pub(crate) async fn wait_open(l: Obj<'_>, wait: Wait) -> Result<bool> {
    if l.protocol().await? == Protocol::Redisson {
        let a = ScriptAwait { l };
        let open = Box::pin(wait::acquire_scripted(l.ctx, l.io, &a, wait)).await?;
        return Ok(open.is_some());
    }
    let a = Await { l };
    let reply = wait::acquire(l.ctx, l.io, &a, wait).await?;
    Ok(a.granted(&reply))
}

/// `RLATCH.TRYSETCOUNT` (Redisson's `trySetCount`): whether the count was set (the latch was
/// open).
pub(crate) async fn try_set_count(l: Obj<'_>, count: u64) -> Result<bool> {
    if l.protocol().await? == Protocol::Redisson {
        let channel = redisson::channel(l.name);
        let count = count.to_string();
        let set: i64 = l
            .script(
                &redisson::TRY_SET_COUNT,
                &[l.name, &channel],
                &[
                    redisson::NEW_COUNT_MESSAGE,
                    &count,
                    l.ctx.transport.publish_command(),
                ],
                Delivery::AtMostOnce,
            )
            .await?;
        return Ok(set == 1);
    }
    let mut cmd = redis::cmd("RLATCH.TRYSETCOUNT");
    cmd.arg(&**l.name).arg(count);
    Ok(l.write::<i64>(&cmd).await? == 1)
}

/// `RLATCH.COUNTDOWN` (Redisson's `countDown`, which does not say what is left). Not sent
/// twice: a resent count-down counts twice.
pub(crate) async fn count_down(l: Obj<'_>) -> Result<()> {
    if l.protocol().await? == Protocol::Redisson {
        let channel = redisson::channel(l.name);
        let () = l
            .script(
                &redisson::COUNT_DOWN,
                &[l.name, &channel],
                &[
                    redisson::ZERO_COUNT_MESSAGE,
                    l.ctx.transport.publish_command(),
                ],
                Delivery::AtMostOnce,
            )
            .await?;
        return Ok(());
    }
    let mut cmd = redis::cmd("RLATCH.COUNTDOWN");
    cmd.arg(&**l.name);
    l.write::<i64>(&cmd).await.map(drop)
}

/// `RLATCH.COUNT` (Redisson: `GET`, absent as 0).
pub(crate) async fn count(l: Obj<'_>) -> Result<u64> {
    if l.protocol().await? == Protocol::Redisson {
        let mut cmd = redis::cmd("GET");
        cmd.arg(&**l.name);
        let reply: Value = l.read(&cmd).await?;
        let n = redisson::read_count(&reply).map_err(|e| l.error(e))?;
        return Ok(n.max(0) as u64);
    }
    let mut cmd = redis::cmd("RLATCH.COUNT");
    cmd.arg(&**l.name);
    Ok(l.read::<i64>(&cmd).await?.max(0) as u64)
}

/// `DEL name` (Redisson's `delete` script, which publishes the new-count message): whether a
/// latch was deleted (its waiters pass: a deleted latch is open).
pub(crate) async fn delete(l: Obj<'_>) -> Result<bool> {
    if l.protocol().await? == Protocol::Redisson {
        let channel = redisson::channel(l.name);
        let n: i64 = l
            .script(
                &redisson::DELETE,
                &[l.name, &channel],
                &[
                    redisson::NEW_COUNT_MESSAGE,
                    l.ctx.transport.publish_command(),
                ],
                Delivery::Idempotent,
            )
            .await?;
        return Ok(n == 1);
    }
    let mut cmd = redis::cmd("DEL");
    cmd.arg(&**l.name);
    Ok(l.read::<i64>(&cmd).await? == 1)
}

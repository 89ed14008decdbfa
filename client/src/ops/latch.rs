//! The count-down latch's operations (`RLATCH.*`, Redisson's `RCountDownLatch` layout).

use redis::{Cmd, Value};

use super::Obj;
use crate::context::Context;
use crate::error::Result;
use crate::wait::{self, Attempt, Wait};

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

/// Wait per `wait` until the count is zero: whether it is.
pub(crate) async fn wait_open(l: Obj<'_>, wait: Wait) -> Result<bool> {
    let a = Await { l };
    let reply = wait::acquire(l.ctx, l.io, &a, wait).await?;
    Ok(a.granted(&reply))
}

/// `RLATCH.TRYSETCOUNT`: whether the count was set (the latch was open).
pub(crate) async fn try_set_count(l: Obj<'_>, count: u64) -> Result<bool> {
    let mut cmd = redis::cmd("RLATCH.TRYSETCOUNT");
    cmd.arg(&**l.name).arg(count);
    Ok(l.write::<i64>(&cmd).await? == 1)
}

/// `RLATCH.COUNTDOWN`: the count left (not sent twice: a resent count-down counts twice).
pub(crate) async fn count_down(l: Obj<'_>) -> Result<u64> {
    let mut cmd = redis::cmd("RLATCH.COUNTDOWN");
    cmd.arg(&**l.name);
    Ok(l.write::<i64>(&cmd).await?.max(0) as u64)
}

/// `RLATCH.COUNT`.
pub(crate) async fn count(l: Obj<'_>) -> Result<u64> {
    let mut cmd = redis::cmd("RLATCH.COUNT");
    cmd.arg(&**l.name);
    Ok(l.read::<i64>(&cmd).await?.max(0) as u64)
}

/// `DEL name`: whether a latch was deleted (its waiters pass: a deleted latch is open).
pub(crate) async fn delete(l: Obj<'_>) -> Result<bool> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(&**l.name);
    Ok(l.read::<i64>(&cmd).await? == 1)
}

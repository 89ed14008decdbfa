//! The one wait path: every object's acquire goes through [`acquire`].
//!
//! An acquire that may wait is parked on the server (`BLOCK ms`) on a connection of its own
//! ([`Waiter`]); the server hands the object over and answers. Around that:
//!
//! - a redirect (`MOVED`/`ASK`), a migration's `TRYAGAIN` or a failover's `UNBLOCKED` means the
//!   command did not run: it is queued again where the object is served now;
//! - a connection that breaks during the wait (a restart, a killed client) leaves the outcome
//!   unknown: the object's [`Attempt::took_effect`] check decides before queueing again;
//! - a server that does not answer by the end of the wait (plus the response timeout) gets the
//!   waiter withdrawn (`CLIENT UNBLOCK`, then its reply is read);
//! - an async acquire dropped while it waits is withdrawn before the drop returns, and a grant
//!   that raced the withdrawal is given back ([`Attempt::give_back`]).
//!
//! An acquire that does not wait is one command on the shared connection, with the same
//! at-most-once rule. Only this file knows how a wait is carried (today `BLOCK` on a dedicated
//! connection), so another carrier can replace it without touching the objects.

use std::time::{Duration, Instant};

use redis::{Cmd, RedisError, RedisResult, Value};

use crate::context::Context;
use crate::error::Result;
use crate::transport::{Delivery, Failure, Io, Redirect, Waiter};

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One attempt.
    No,
    /// Wait on the server at most this long (zero: one attempt).
    For(Duration),
    /// Wait on the server until granted.
    Forever,
}

/// Milliseconds, rounded up, as the server counts them.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// One object's acquire, as the wait path drives it.
pub(crate) trait Attempt: Sync {
    /// The key that routes it.
    fn key(&self) -> &str;
    /// The command: `block` is `Some(ms)` to wait on the server up to `ms` (0: no limit).
    fn command(&self, block: Option<u64>) -> Cmd;
    /// Whether `reply` grants the object.
    fn granted(&self, reply: &Value) -> bool;
    /// After an ambiguous failure: the reply it would have had, if it took effect anyway.
    async fn took_effect(&self, ctx: &Context) -> Result<Option<Value>>;
    /// A grant nobody will receive: give it back.
    async fn give_back(&self, ctx: &Context);
    /// A grant nobody will receive, with the reply that granted it: give it back. Objects whose
    /// grant is named by its reply (leased permits: their ids) override it.
    async fn give_back_granted(&self, ctx: &Context, _reply: &Value) {
        self.give_back(ctx).await
    }
}

/// Acquire per `wait`: the server's reply (its "not granted" reply when the wait ended).
pub(crate) async fn acquire<A: Attempt>(ctx: &Context, io: Io, a: &A, wait: Wait) -> Result<Value> {
    let deadline = match wait {
        Wait::No => return once(ctx, io, a).await,
        Wait::For(d) if d.is_zero() => return once(ctx, io, a).await,
        // A wait too long to represent is a wait without limit.
        Wait::For(d) => Instant::now().checked_add(d),
        Wait::Forever => None,
    };
    let policy = &ctx.transport.policy;
    policy
        .at_most_once(
            &ctx.bg,
            || async {
                policy
                    .run(&ctx.bg, Delivery::AtMostOnce, |to| {
                        park(ctx, io, a, deadline, to)
                    })
                    .await
                    .map_err(|e| ctx.transport.error(e, a.key()))
            },
            || a.took_effect(ctx),
        )
        .await
}

/// One attempt without waiting, on the shared connection.
async fn once<A: Attempt>(ctx: &Context, io: Io, a: &A) -> Result<Value> {
    let cmd = a.command(None);
    let send = || {
        ctx.transport
            .query(&ctx.bg, io, a.key(), &cmd, Delivery::AtMostOnce)
    };
    ctx.transport
        .policy
        .at_most_once(&ctx.bg, send, || a.took_effect(ctx))
        .await
}

/// Park once on the server, on a connection of our own to the node `to` points at (else the
/// one serving the key), and read the outcome.
async fn park<A: Attempt>(
    ctx: &Context,
    io: Io,
    a: &A,
    deadline: Option<Instant>,
    to: Option<Redirect>,
) -> RedisResult<Value> {
    let at = match &to {
        Some(Redirect::Moved(addr) | Redirect::Ask(addr)) => Some(addr.as_str()),
        None => None,
    };
    let r = match ctx.transport.waiter(io, a.key(), at).await {
        Ok(waiter) => {
            // Past the caller's wait time (after redirects or a broken connection): one last
            // attempt that does not wait.
            let block = match deadline {
                None => Some(0),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(millis(left)),
                    _ => None,
                },
            };
            let mut parked = Parked {
                ctx,
                a,
                waiter,
                armed: true,
            };
            parked
                .waiter
                .send(a.command(block), matches!(to, Some(Redirect::Ask(_))));
            parked.outcome(deadline).await
        }
        Err(e) => Err(e),
    };
    // Keep the node map right for the next attempt.
    if let Err(e) = &r {
        match crate::transport::classify(e) {
            Failure::Redirected(Redirect::Moved(addr)) => ctx.transport.learn(a.key(), &addr),
            Failure::Unreachable | Failure::NotRun => ctx.transport.forget(a.key()),
            _ => {}
        }
    }
    r
}

/// A waiter parked on the server. Dropped while armed (its caller went away), it is withdrawn
/// before the drop returns, and a grant that came first is given back.
struct Parked<'a, A: Attempt> {
    ctx: &'a Context,
    a: &'a A,
    waiter: Waiter,
    armed: bool,
}

impl<A: Attempt> Parked<'_, A> {
    /// The reply to the parked command. A server silent past the wait's end plus the response
    /// timeout gets the waiter withdrawn; without a reply even then, the outcome is unknown
    /// (a timeout error: the caller checks what happened).
    async fn outcome(&mut self, deadline: Option<Instant>) -> RedisResult<Value> {
        let margin = self.ctx.config.response_timeout + Duration::from_secs(1);
        let stuck_at = deadline.and_then(|d| d.checked_add(margin));
        let r = match self.waiter.reply(&self.ctx.bg, stuck_at).await {
            Some(r) => Some(r),
            None => self.withdraw().await,
        };
        self.armed = false;
        r.unwrap_or_else(|| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no reply to a waiting acquire",
            )))
        })
    }

    /// Take the waiter off the server's queue and read its last word: `CLIENT UNBLOCK`, repeated
    /// while the command may not have reached the server yet. `None` when no reply came; the
    /// connection is then closed, which also drops a waiter still parked on it.
    async fn withdraw(&mut self) -> Option<RedisResult<Value>> {
        let give_up = Instant::now() + self.ctx.config.response_timeout;
        while self.waiter.resumable() && Instant::now() < give_up {
            let _ = self.waiter.unblock().await;
            let soon = Instant::now() + Duration::from_millis(20);
            if let Some(r) = self.waiter.reply(&self.ctx.bg, Some(soon)).await {
                return Some(r);
            }
        }
        self.waiter.discard();
        None
    }
}

impl<A: Attempt> Drop for Parked<'_, A> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let ctx = self.ctx;
        ctx.bg.block_on(async {
            let granted = match self.withdraw().await {
                Some(Ok(v)) => self.a.granted(&v).then_some(Some(v)),
                Some(Err(_)) => None,
                // No last word: ask the server whether the grant came first.
                None => matches!(self.a.took_effect(ctx).await, Ok(Some(_))).then_some(None),
            };
            if let Some(reply) = granted {
                tracing::debug!(
                    key = self.a.key(),
                    "rlock: a wait was granted as its caller left; giving it back"
                );
                match reply {
                    Some(v) => self.a.give_back_granted(ctx, &v).await,
                    None => self.a.give_back(ctx).await,
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}

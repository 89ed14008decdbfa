//! The watchdog: one background task per client that renews every hold taken without a lease,
//! of every kind of object, in one pipelined round trip per node and period, and reports the
//! holds it finds gone to the registry.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::Value;

use crate::context::Context;
use crate::transport::{classify, Failure};

/// The renewal loop. Holds only a weak reference: it ends when the client is dropped.
pub(crate) async fn run(ctx: Weak<Context>, interval: Duration, lease_ms: u64) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate
    loop {
        ticker.tick().await;
        let Some(ctx) = ctx.upgrade() else { return };
        renew_once(&ctx, lease_ms).await;
    }
}

/// Renew every watchdog hold to `lease_ms`, each with its kind's renew command.
pub(crate) async fn renew_once(ctx: &Arc<Context>, lease_ms: u64) {
    let batch = ctx.holds.lock().unwrap().renewals();
    if batch.is_empty() {
        return;
    }
    let cmds: Vec<_> = batch
        .iter()
        .map(|r| {
            let id = &r.id;
            (
                id.key.clone(),
                (id.kind.renew)(&id.key, &id.holder, lease_ms),
            )
        })
        .collect();
    let replies = match ctx.transport.send_each(&cmds).await {
        Ok(v) => v,
        Err(e) => {
            // Keep every entry: the next period tries again (a hiccup must not drop renewals).
            tracing::warn!(error = %e, holds = batch.len(), "rlock: can't renew leases; will retry");
            return;
        }
    };
    for (r, reply) in batch.iter().zip(replies) {
        let gone = match reply {
            // Held: 1 for a lock, the number of holds renewed for a read-write lock.
            Ok(Value::Int(n)) if n >= 1 => false,
            Ok(_) => true,
            Err(e) => match classify(&e) {
                // Refused: the server answered about the hold.
                Failure::Final => {
                    tracing::warn!(key = %r.id.key, error = %e, "rlock: renewal refused");
                    true
                }
                // Unreachable, cut, or busy with a migration or failover: no answer yet.
                _ => {
                    tracing::warn!(key = %r.id.key, error = %e, "rlock: can't renew lease; will retry");
                    false
                }
            },
        };
        if gone && ctx.holds.lock().unwrap().mark_lost(r) {
            tracing::warn!(
                kind = r.id.kind.name,
                key = %r.id.key,
                holder = %r.id.holder,
                "rlock: hold lost: the watchdog found it no longer held \
                 (expired, deleted or force-released); it is no longer renewed"
            );
        }
    }
}

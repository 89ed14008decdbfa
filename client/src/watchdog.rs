//! The watchdog: one background task per client that renews every hold taken without a lease,
//! of every kind of object, in one pipelined round trip per node and period, and reports the
//! holds it finds gone to the registry.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::context::Context;
use crate::events::{HoldInfo, WatchdogEvent};
use crate::holds::{held_after_renewal, HoldId, Orphan};
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

/// Renew every watchdog hold to `lease_ms` (or its own renewal lease), each with its kind's
/// renew command, and in the same round trip give back the holds whose owner thread ended.
/// Tell the application's listener, if it set one.
fn tell(ctx: &Context, event: impl FnOnce() -> WatchdogEvent) {
    if let Some(l) = &ctx.config.watchdog_listener {
        l.tell(&event());
    }
}

fn info(id: &HoldId) -> HoldInfo {
    HoldInfo::of(id)
}

pub(crate) async fn renew_once(ctx: &Arc<Context>, lease_ms: u64) {
    let round = ctx.holds.lock().round(ctx.config.watchdog_max_hold);
    for (c, held) in &round.capped {
        tracing::warn!(
            kind = c.id.kind.name,
            key = %c.id.key,
            holder = %c.id.holder,
            held = ?held,
            "rlock: hold reached the watchdog's longest hold: it is no longer renewed and \
             counts as lost (it ends when its lease does, unless released before)"
        );
        tell(ctx, || WatchdogEvent::MaxHoldReached {
            hold: info(&c.id),
            held: *held,
        });
    }
    for o in round.orphans.iter().filter(|o| !o.release) {
        tracing::warn!(
            kind = o.seen.id.kind.name,
            key = %o.seen.id.key,
            holder = %o.seen.id.holder,
            "rlock: orphaned hold: every handle it was taken through is gone and it was never \
             released; it is no longer renewed and frees when its lease ends (keep a guard, \
             which gives it back when its task ends)"
        );
    }
    let released: Vec<&Orphan> = round.orphans.iter().filter(|o| o.release).collect();
    if round.renew.is_empty() && released.is_empty() {
        return;
    }
    let mut cmds: Vec<_> = round
        .renew
        .iter()
        .map(|r| {
            let id = &r.id;
            let ms = r.renew_ms.unwrap_or(lease_ms);
            let publish = ctx.transport.publish_command();
            (
                id.key.clone(),
                (id.kind.renew)(&id.key, &id.holder, ms, publish),
            )
        })
        .collect();
    for o in &released {
        let id = &o.seen.id;
        let release = id
            .kind
            .release
            .expect("only releasable orphans are released");
        for _ in 0..o.holds {
            let publish = ctx.transport.publish_command();
            cmds.push((id.key.clone(), release(&id.key, &id.holder, publish)));
        }
    }
    let mut replies = match ctx.transport.send_each(&cmds).await {
        Ok(v) => v.into_iter(),
        Err(e) => {
            // Keep every entry: the next period tries again (a hiccup must not drop renewals).
            tracing::warn!(error = %e, holds = cmds.len(), "rlock: can't renew leases; will retry");
            ctx.metrics.renewals("failed", round.renew.len() as u64);
            for r in &round.renew {
                tell(ctx, || WatchdogEvent::RenewalFailed {
                    hold: info(&r.id),
                    error: e.to_string(),
                });
            }
            return;
        }
    };
    let (mut renewed, mut lost, mut failed) = (0, 0, 0);
    for (r, reply) in round.renew.iter().zip(replies.by_ref()) {
        let gone = match reply {
            // Held: 1 for a lock, the number of holds renewed for a read-write lock, `[1]`
            // from Redisson's renewal script.
            Ok(v) => !held_after_renewal(&v),
            Err(e) => match classify(&e) {
                // Refused: the server answered about the hold.
                Failure::Final => {
                    tracing::warn!(key = %r.id.key, error = %e, "rlock: renewal refused");
                    true
                }
                // Unreachable, cut, or busy with a migration or failover: no answer yet.
                _ => {
                    tracing::warn!(key = %r.id.key, error = %e, "rlock: can't renew lease; will retry");
                    failed += 1;
                    tell(ctx, || WatchdogEvent::RenewalFailed {
                        hold: info(&r.id),
                        error: e.to_string(),
                    });
                    continue;
                }
            },
        };
        if !gone {
            renewed += 1;
            continue;
        }
        lost += 1;
        if ctx.holds.lock().mark_lost(r) {
            tracing::warn!(
                kind = r.id.kind.name,
                key = %r.id.key,
                holder = %r.id.holder,
                "rlock: hold lost: the watchdog found it no longer held \
                 (expired, deleted or force-released); it is no longer renewed"
            );
            tell(ctx, || WatchdogEvent::Lost { hold: info(&r.id) });
        }
    }
    ctx.metrics.renewals("renewed", renewed);
    ctx.metrics.renewals("lost", lost);
    ctx.metrics.renewals("failed", failed);
    for o in released {
        let outcomes: Vec<_> = replies.by_ref().take(o.holds as usize).collect();
        let id = &o.seen.id;
        // A release the server answered (any reply, `NOTOWNER` included: nothing is held).
        let answered = outcomes.iter().all(|r| {
            r.as_ref()
                .map_or_else(|e| classify(e) == Failure::Final, |_| true)
        });
        if !answered {
            tracing::warn!(key = %id.key, holder = %id.holder, "rlock: can't release an orphaned hold; will retry");
            continue;
        }
        ctx.holds.lock().on_orphan_released(o);
        tracing::warn!(
            kind = id.kind.name,
            key = %id.key,
            holder = %id.holder,
            holds = o.holds,
            "rlock: released an orphaned hold: the thread that took it ended without \
             unlocking it"
        );
    }
}

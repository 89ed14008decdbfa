//! Serving: a key's queue is served whenever something may have freed its object (after a
//! command's write, at a lease end, after an event on the key), each outcome is delivered, and
//! a grant whose waiter vanished is undone.

use super::delivery::deliver;
use super::{queued_kind, total};
use super::{retire, state, undo, Ended, STATE};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::{Counted, ObjectKind};
use crate::core::store::{KeyType, Store, Target};
use crate::core::wait::grant::PAUSED_RETRY_MS;
use crate::core::wait::{self, KeyId, KeyRef, Object, Outcome, Req, TimerKey};
use crate::ffi::Ctx;
use crate::keys::RedisKeys;
use crate::marks::{self, Background};
use crate::{observe, paused, timers};

/// Serve the queue of the command's key, if it has one: before deciding a newcomer (who must
/// not overtake anyone) and after a write that may have freed the object. Returns whether
/// anyone still waits.
pub fn serve_now(keys: &mut RedisKeys) -> bool {
    if total() == 0 {
        return false;
    }
    let key = KeyRef {
        db: keys.ctx.db(),
        key: keys.key_name(),
    };
    let Some(id) = state(|s| s.queues.queued_id(&key)) else {
        return false;
    };
    serve(keys, &id);
    state(|s| s.queues.is_queued(&id))
}

/// Serve the command's key before a newcomer is decided, so that it does not overtake anyone
/// (the object may have been freed by expiry, or by an event whose serving is still due).
/// Returns whether anyone the newcomer must queue behind still waits.
///
/// Latch waiters are behind nobody's back: they take nothing (the count reaching 0 lets them
/// all pass), so a semaphore's newcomer is decided as if they were not there. Otherwise a user
/// who may only read a semaphore's key could queue an `RLATCH.AWAIT` on it (its count is a
/// latch's count) and keep every `RSEM.ACQUIRE` from being granted while permits are free.
pub fn serve_first(keys: &mut RedisKeys) -> bool {
    let queued = serve_now(keys);
    queued
        && (keys.object == Some(ObjectKind::Latch)
            || queued_kind(keys.ctx.db(), keys.key_name()) != Some(ObjectKind::Latch))
}

/// Serve `id`'s queue from a timer or an event: select its database and open its key.
pub(super) fn serve_background(ctx: Ctx, id: &KeyId) {
    if !state(|s| s.queues.is_queued(id)) {
        state(|s| s.forget_if_idle(id));
        return;
    }
    // A replica never writes; its blocked waiters were disconnected when it was demoted, and
    // `sessions` fails its queued requests.
    let Some(mut keys) = RedisKeys::looked_at(ctx, id) else {
        return;
    };
    // In a cluster, MIGRATE deletes the key on this node: the object lives on elsewhere now,
    // so its waiters must retry there instead of being granted a copy here.
    if keys.kind(&Target::Main) == KeyType::Empty && !ctx.serves_key(&id.key) {
        fail_all(ctx, id, CmdError::SlotMoved);
        return;
    }
    serve(&mut keys, id);
}

/// Grant what can be granted of `id`'s queue and deliver every outcome.
pub(super) fn serve(keys: &mut RedisKeys, id: &KeyId) {
    let ctx = keys.ctx;
    let served = state(|s| wait::serve(&mut s.queues, id, keys));
    for outcome in served.outcomes {
        match outcome {
            Outcome::Granted {
                waiter,
                reply,
                after_expiry,
            } => {
                let hold = waiter.req.holds().map(|h| (h.owner(), h.exclusive()));
                observe::granted(id, waiter.req.kind(), waiter.queued_us, hold);
                retire(id.db, &waiter, Counted::Handed { after_expiry });
                let ended = Ended::Granted {
                    id: id.clone(),
                    req: waiter.req,
                    reply,
                };
                deliver(ctx, waiter.handle, ended);
            }
            Outcome::Failed { waiter, error } => {
                retire(id.db, &waiter, Counted::Failed);
                deliver(ctx, waiter.handle, Ended::Failed(error));
            }
        }
    }
    state(|s| {
        if let Some(at) = served.wake_at {
            // Never in the past: a lease end the live clock has passed while the server still
            // shows the key held (see timers::on_timer) is looked at again a millisecond on.
            s.check_by(ctx, id, at.saturating_add(1).max(ctx.now_ms() + 1));
        }
        s.forget_if_idle(id);
    });
}

/// Look at the command's key at `at` (the end of a hold's own lease, such as a read hold's)
/// even if nobody waits then: the object tidies what expired (a crashed reader's field),
/// serves its queue if it has one, and is looked at again at its next lease end. A key with
/// waiters needs none of this: its queue's check does the same.
pub fn upkeep(ctx: Ctx, keys: &RedisKeys, at: i64, object: &'static dyn Object) {
    let id = KeyId::new(ctx.db(), keys.key_name());
    let current = state(|s| (!s.queues.is_queued(&id)).then(|| s.upkeep.get(&id).copied()));
    if let Some(current) = current {
        schedule_upkeep(ctx, id, current, at, object);
    }
}

pub(super) fn schedule_upkeep(
    ctx: Ctx,
    id: KeyId,
    current: Option<TimerKey>,
    at: i64,
    object: &'static dyn Object,
) {
    let job = || {
        let key = id.clone();
        move |ctx| {
            state(|s| s.upkeep.remove(&key));
            let Some(mut keys) = RedisKeys::looked_at(ctx, &key) else {
                return;
            };
            if state(|s| s.queues.is_queued(&key)) {
                // Serving tidies first (and counts what follows as a grant after expiry).
                drop(keys);
                marks::mark_background(key.clone(), Background::Due);
                marks::mark_background(key, Background::Tidied);
                return;
            }
            if let Ok(tidy) = object.tidy(&keys) {
                // Nobody waits: nothing to announce after serving.
                if !tidy.before.writes.is_empty() && keys.write(&tidy.before).is_ok() {
                    marks::mark_background(key.clone(), Background::Tidied);
                }
            }
            if let Some(next) = object.wake_at(&keys) {
                schedule_upkeep(ctx, key, None, next.saturating_add(1), object);
            }
        }
    };
    if let Some(t) = timers::keyed(ctx, current, at, job) {
        state(|s| s.upkeep.insert(id, t));
    }
}

/// End every wait on `id` with `err`.
pub(super) fn fail_all(ctx: Ctx, id: &KeyId, err: CmdError) {
    let drained = state(|s| {
        let ws = s.queues.drain(id);
        s.forget_if_idle(id);
        ws
    });
    for w in drained {
        retire(id.db, &w, Counted::Failed);
        deliver(ctx, w.handle, Ended::Failed(err.clone()));
    }
}

/// The keys anyone waits on, in every database.
pub fn queued_ids() -> Vec<KeyId> {
    state(|s| s.queues.ids(None))
}

/// The keys anyone waits on, if there are at most `n` (`slotwatch` probes each of a few).
pub fn queued_ids_upto(n: usize) -> Option<Vec<KeyId>> {
    state(|s| (s.queues.key_count() <= n).then(|| s.queues.ids(None)))
}

/// End every wait on `id` with `err` (its slot left this node: `slotwatch`).
pub fn end_waits(ctx: Ctx, id: &KeyId, err: CmdError) {
    fail_all(ctx, id, err);
}

/// Look at `id`'s queue now, as after an event on its key: it is served, or its waits end if
/// the key is gone with its slot (`slotwatch`, when the slot starts migrating).
pub fn recheck(ctx: Ctx, id: &KeyId) {
    serve_background(ctx, id);
}

/// The server became a replica: every wait ends with the error Redis gives blocked clients
/// then, so clients queue again on the new master. Redis (and Valkey 8) already released the
/// clients it blocked for the module before this event; Valkey 9 no longer does for clients
/// blocked without keys, and session requests are the module's alone.
pub fn fail_all_waits(ctx: Ctx, err: CmdError) {
    for id in state(|s| s.queues.ids(None)) {
        fail_all(ctx, &id, err.clone());
    }
}

/// [`revoke`] on the next timer turn: undoing writes keys, which must not happen in a client's
/// teardown or context (it selects the key's database).
pub fn revoke_later(ctx: Ctx, id: KeyId, req: Req, reply: Reply, ticket: undo::Ticket) {
    revoke_at(ctx, ctx.now_ms(), id, req, reply, ticket);
}

fn revoke_at(ctx: Ctx, at_ms: i64, id: KeyId, req: Req, reply: Reply, ticket: undo::Ticket) {
    timers::schedule(ctx, at_ms, move |ctx| {
        // Writes are paused: the undo waits, as every background write does (`paused`); its
        // ticket stays until it runs.
        if paused::writes(ctx) {
            revoke_at(ctx, ctx.now_ms() + PAUSED_RETRY_MS, id, req, reply, ticket);
        } else {
            revoke(ctx, &id, &req, &reply, ticket);
        }
    });
}

/// Undo a grant whose waiter is gone (a blocked client that disconnected before its reply, a
/// session that expired before acknowledging it), then serve the queue.
fn revoke(ctx: Ctx, id: &KeyId, req: &Req, reply: &Reply, ticket: undo::Ticket) {
    // A hold that ended since the grant (given back blind, force-released...) is not the
    // grant any more, even if its owner holds the key again.
    let current = undo::take(id, ticket);
    let Some(mut keys) = RedisKeys::looked_at(ctx, id) else {
        return;
    };
    if let Some(d) = current.then(|| req.undo(reply, &keys)).flatten() {
        if keys.write(&d).is_ok() {
            let hold = req.holds().map(|h| (h.owner().into(), h.exclusive()));
            let kind = req.kind();
            marks::mark_background(id.clone(), Background::Revoked { kind, hold });
        }
    }
    drop(keys);
    state(|s| {
        // The undone grant's values (a grouped MultiLock's) are free again.
        if let Some(values) = req.values() {
            s.queues.freed(id, values.iter().map(|v| &v[..]));
        }
        s.check_by(ctx, id, ctx.now_ms());
    });
}

/// An event touched `key` in `db` (see `intake::key_touched`): a grant on it is final now
/// (when it expired, or the write was not rlock's); its queue, if any, remembers an expiry and,
/// unless rlock's own code raised the event (whoever runs then serves the queue itself, and the
/// state may be borrowed right now), is looked at now. Returns whether it must be served once
/// the execution unit ends.
pub fn touched(ctx: Ctx, db: i32, key: &[u8], expired: bool, ours: bool) -> bool {
    if expired || !ours {
        undo::ended(db, key, None);
    }
    STATE.with(|cell| {
        let Ok(mut s) = cell.try_borrow_mut() else {
            return false;
        };
        if s.queues.total() == 0 {
            return false;
        }
        // Looked up by the borrowed name: most events are on keys nobody waits for, or rlock's
        // own (a lease end's key expiring as serving opens it), which need no id.
        let view = KeyRef { db, key };
        let Some(q) = s.queues.get_mut_view(&view) else {
            return false;
        };
        q.expired |= expired;
        if q.is_empty() || ours {
            return false;
        }
        let Some(id) = s.queues.queued_id(&view) else {
            return false;
        };
        // A write rlock did not make does not say what it freed (Redisson's own unlock
        // script, a DEL): a grouped MultiLock's queue looks at every value's first waiter.
        s.queues.changed(&id);
        s.check_by(ctx, &id, ctx.now_ms());
        true
    })
}

/// Every queue of database `db` (or of all databases) may have changed (FLUSH*, SWAPDB): its
/// grants are final, its queues are looked at now. Returns the keys queued there.
pub fn db_touched(ctx: Ctx, db: Option<i32>) -> Vec<KeyId> {
    undo::db_ended(db);
    let now = ctx.now_ms();
    state(|s| {
        let ids = s.queues.ids(db);
        for id in &ids {
            s.queues.changed(id);
            s.check_by(ctx, id, now);
        }
        ids
    })
}

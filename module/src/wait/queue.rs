//! Queueing: a request joins its key's queue (parked client or session request), leaves it
//! (deadline, withdrawal, a session ending), and the key's re-check is kept armed.

use super::delivery::{answer_queued, deliver};
use super::graph::{owner_id, OwnerId};
use super::{retire, state, Ended, Handle, State};
use crate::core::args::WaitMode;
use crate::core::decision::Reply;
use crate::core::stats::{Counted, ObjectKind};
use crate::core::store::Store;
use crate::core::wait::{fifo, Deadline, KeyId, Req, Waiter};
use crate::ffi::clock::now_us;
use crate::ffi::{Answer, Ctx};
use crate::keys::RedisKeys;
use crate::marks::{self, Background};
use crate::{observe, timers};
use std::hash::BuildHasher;

impl State {
    /// Make sure `id`'s queue is looked at again no later than `at`.
    pub(super) fn check_by(&mut self, ctx: Ctx, id: &KeyId, at: i64) {
        let Some(current) = self.queues.get(id).map(|q| q.check) else {
            return;
        };
        let t = timers::keyed(ctx, current, at, || {
            let check = id.clone();
            move |_| {
                state(|s| {
                    if let Some(q) = s.queues.get_mut(&check) {
                        q.check = None;
                    }
                });
                marks::mark_background(check, Background::Due);
            }
        });
        if let (Some(t), Some(q)) = (t, self.queues.get_mut(id)) {
            q.check = Some(t);
        }
    }

    /// Drop the bookkeeping of a key nobody waits for.
    pub(super) fn forget_if_idle(&mut self, id: &KeyId) {
        if let Some(t) = self.queues.forget_if_idle(id) {
            timers::cancel(t);
        }
    }
}

// ---- queueing ------------------------------------------------------------------------------------

/// Park the calling client behind `keys`' queue with request `req` (`BLOCK`), or reply nil at
/// once when the request may not wait (no BLOCK; or inside MULTI, Lua or RM_Call, where a wait
/// degrades to one attempt, as BLPOP's). Session waits (`QUEUE`) go through `sessions`; a
/// blocked acquire that names a session has its hold watched by it once granted.
pub fn park_or_nil(
    ctx: Ctx,
    keys: &RedisKeys,
    wait: WaitMode,
    req: Req,
    session: Option<u32>,
) -> Answer {
    match wait {
        WaitMode::Block(ms) if ctx.may_block() => {
            let bc = ctx.block();
            if let Some(session) = session {
                state(|s| s.watched.insert(bc.id(), session));
            }
            enqueue(ctx, keys, Handle::Blocked(bc), ms, req);
            Answer::Parked
        }
        _ => {
            req.kind().count(Counted::Busy);
            Answer::Reply(Reply::Nil)
        }
    }
}

/// Queue `req` behind `keys`' queue, reached through `handle`, for at most `timeout_ms`
/// (0: no limit; checked by the caller not to overflow).
pub fn enqueue(ctx: Ctx, keys: &RedisKeys, handle: Handle, timeout_ms: i64, req: Req) {
    // Whatever the command replies now reports this request (parked, `QUEUED`): it stands.
    keys.note_effect();
    let id = KeyId::new(ctx.db(), keys.key_name());
    let wake_at = req.object().wake_at(keys);
    req.kind().count(Counted::Queued);
    observe::wait_started(&id, req.kind());
    let queued_us = now_us();
    state(|s| {
        s.serial += 1;
        let serial = s.serial;
        // `now_ms` is whole milliseconds, rounded down, and the alarm fires at the exact
        // millisecond: one more keeps the nil from coming before `timeout_ms` has passed (up
        // to 1 ms early otherwise), as Redis' own blocking commands never time out early.
        let deadline = (timeout_ms > 0).then(|| {
            let at = (ctx.now_ms() + timeout_ms).saturating_add(1);
            s.wait_ends.push(ctx, at, (handle, serial), waits_due)
        });
        let waiter = Waiter {
            handle,
            serial,
            req,
            deadline,
            queued_us,
        };
        s.index(id.db, &waiter);
        s.queues.push(&id, waiter);
        if let Some(at) = wake_at {
            s.check_by(ctx, &id, at.saturating_add(1));
        }
    });
}

/// The job that ends the waits whose deadline came (see [`deadline`]). A job of the module's
/// timers per deadline cost a boxed closure and a B-tree insert and removal per timed wait
/// granted before it (`timers::Batch`).
fn waits_due(ctx: Ctx) {
    let due = state(|s| s.wait_ends.take_due(ctx.now_ms()));
    for (_, (handle, serial)) in due {
        deadline(ctx, handle, serial);
    }
    state(|s| s.wait_ends.arm(ctx, waits_due));
}

/// The wait `serial` of `handle` reached its deadline: if still queued, it ends unanswered.
fn deadline(ctx: Ctx, handle: Handle, serial: u64) {
    let removed = state(|s| {
        let mine = s
            .queues
            .find(handle)
            .is_some_and(|(_, w)| w.serial == serial);
        if mine {
            s.queues.remove(handle)
        } else {
            None
        }
    });
    if let Some((id, mut waiter)) = removed {
        // Its deadline came: nothing left to cancel.
        waiter.deadline = None;
        retire(id.db, &waiter, Counted::TimedOut);
        deliver(ctx, waiter.handle, Ended::TimedOut);
        after_leaving(ctx, &id);
    }
}

/// Take a waiter out of its queue (cancel, disconnect, an error), its end counted as `how`;
/// `None` when it is not queued any more (already granted).
pub fn withdraw(ctx: Ctx, handle: Handle, how: Counted) -> Option<ObjectKind> {
    let (id, waiter) = state(|s| s.queues.remove(handle))?;
    answer_queued(handle);
    retire(id.db, &waiter, how);
    after_leaving(ctx, &id);
    Some(waiter.req.kind())
}

/// Take every queued request of session `session` out of its queue (the session ends), each
/// key's new head looked at once at the end. The queues and the owner index are visited in
/// their memory order (see `Queues::remove_group`): closing a session of 100,000 requests on
/// one key one by one spent most of its time on cache misses in both. Their requests' memory
/// is freed on later turns (`timers::free_later`).
pub fn withdraw_session(ctx: Ctx, session: u32) {
    // What is left to do once the waiters are out of the queues, kept small: the deadlines,
    // the handles that may have a parked connection to answer (none when nothing is parked),
    // the requests to free.
    let mut deadlines: Vec<Deadline> = Vec::new();
    let mut parked: Vec<Handle> = Vec::new();
    let mut requests: Vec<Req> = Vec::new();
    let checks = state(|s| {
        let any_parked = !s.parked.is_empty();
        let mask = fifo::bucket_mask(s.by_owner.capacity());
        let hasher = s.by_owner.hasher().clone();
        let mut owners: Vec<(u64, OwnerId, Handle)> = Vec::new();
        let left = s.queues.remove_group(Some(session), |id, waiter| {
            // Its waiter vanished with its session.
            waiter.req.kind().count(Counted::Disconnected);
            if let Some(o) = waiter.req.owner() {
                let oid = owner_id(id.db, o);
                owners.push((hasher.hash_one(oid) & mask, oid, waiter.handle));
            }
            if any_parked {
                parked.push(waiter.handle);
            }
            deadlines.extend(waiter.deadline);
            requests.push(waiter.req);
        });
        s.unindex_many(owners);
        for d in deadlines.drain(..) {
            s.wait_ends.cancel(d);
        }
        // In the same borrow of the state: with 100,000 requests on as many keys, a borrow per
        // key (a thread-local look-up each) took a sixth of the time.
        let now = ctx.now_ms();
        for id in &left.queued {
            s.check_by(ctx, id, now);
        }
        left.checks
    });
    timers::free_later(ctx, requests);
    for handle in parked {
        answer_queued(handle);
    }
    for t in checks {
        timers::cancel(t);
    }
}

/// A waiter left `id`'s queue without being granted: whoever is now at its head may be
/// grantable (a reader behind a writer that timed out).
pub(super) fn after_leaving(ctx: Ctx, id: &KeyId) {
    state(|s| {
        if s.queues.is_queued(id) {
            s.check_by(ctx, id, ctx.now_ms());
        } else {
            s.forget_if_idle(id);
        }
    });
}

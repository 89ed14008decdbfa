//! The shared waiting mechanism, Redis side: parking a request, serving a key's queue whenever
//! something may have freed it, delivering each outcome to its waiter, deadlines, and undoing a
//! grant whose waiter vanished. Every object waits through here; none has code of its own for
//! queues, deadlines or hand-off.
//!
//! Invariants:
//! - a waiter is in exactly one queue until it is granted, fails, times out or leaves, and its
//!   blocked client is unblocked exactly once (by whichever of those removes it from the queue);
//! - Redis never times a waiter out by itself: deadlines are module timer jobs, so a grant and a
//!   timeout are decided in one place (Redis 7.0 mishandles a timeout that lands between a
//!   module's unblock and its reply: the client gets no reply at all);
//! - a key with waiters has a re-check job at its next lease end (or sooner), and serving
//!   re-reads the key: a freed object goes to the head of its queue in the same step;
//! - the state's `RefCell` is never borrowed across a call that can call back into this file
//!   (our own writes' keyspace events are dropped at the FFI boundary).

use crate::core::args::Wait;
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::{self, ObjectKind};
use crate::core::store::Store;
use crate::core::wait::{self, KeyId, Outcome, Queues, Req, TimerKey, Timers, Waiter};
use crate::ffi::alarm::Wakeup;
use crate::ffi::block::{self, BlockedClient, Wake};
use crate::ffi::{Answer, Ctx};
use crate::keys::RedisKeys;
use std::cell::RefCell;
use std::collections::HashMap;

/// How a waiter is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    /// A client parked with `BLOCK`.
    Blocked(BlockedClient),
}

/// A timed job.
enum Job {
    /// A wait's deadline (the serial tells this wait from a later one on the same handle).
    Deadline(Handle, u64),
    /// Look at a key with waiters again (its lease end, or an event that may have freed it).
    Check(KeyId),
    /// Undo a grant whose waiter disconnected before its reply was sent.
    Revoke(KeyId, Req, Reply),
}

/// A grant on its way to a parked client (its reply is sent from `beforeSleep`).
struct InFlight {
    id: KeyId,
    req: Req,
    reply: Reply,
}

#[derive(Default)]
struct State {
    queues: Queues<Handle, Req>,
    timers: Timers<Job>,
    /// The wake-up armed for the earliest job, and when it fires.
    armed: Option<(Wakeup, i64)>,
    in_flight: HashMap<usize, InFlight>,
    serial: u64,
    /// The client Redis is freeing right now (its CLIENT_CHANGE event comes just before its
    /// blocked-client disconnect callback), to tell a real disconnect from CLIENT UNBLOCK.
    closing: u64,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// Waiters queued across all keys (cheap: the uncontended path asks it first).
pub fn total() -> usize {
    state(|s| s.queues.total())
}

/// The queue of `key` as introspection shows it, in FIFO order.
pub fn shown(db: i32, key: &[u8]) -> Vec<Reply> {
    state(|s| {
        s.queues
            .get(&KeyId::new(db, key))
            .map_or_else(Vec::new, |q| q.iter().map(|w| w.req.show()).collect())
    })
}

// ---- timers ------------------------------------------------------------------------------------

impl State {
    /// Keep the Redis timer armed no later than the earliest job.
    fn arm(&mut self, ctx: Ctx) {
        let Some(next) = self.timers.next_at() else {
            return;
        };
        if let Some((w, at)) = self.armed {
            if at <= next {
                return; // fires in time; it re-arms for whatever is left
            }
            ctx.cancel_wakeup(w);
        }
        self.armed = Some((ctx.wake_at(next), next));
    }

    fn schedule(&mut self, ctx: Ctx, at: i64, job: Job) -> TimerKey {
        let key = self.timers.schedule(at, job);
        self.arm(ctx);
        key
    }

    /// Make sure `id`'s queue is looked at again no later than `at`.
    fn watch(&mut self, ctx: Ctx, id: &KeyId, at: i64) {
        let Some(current) = self.queues.get(id).map(|q| q.check) else {
            return;
        };
        if let Some(t) = current {
            if t.at_ms <= at {
                return;
            }
            self.timers.cancel(t);
        }
        let t = self.schedule(ctx, at, Job::Check(id.clone()));
        if let Some(q) = self.queues.get_mut(id) {
            q.check = Some(t);
        }
    }

    /// Drop the bookkeeping of a key nobody waits for.
    fn forget_if_idle(&mut self, id: &KeyId) {
        if let Some(t) = self.queues.forget_if_idle(id) {
            self.timers.cancel(t);
        }
    }

    fn retire(&mut self, waiter: &Waiter<Handle, Req>) {
        if let Some(t) = waiter.deadline {
            self.timers.cancel(t);
        }
    }
}

/// The module's timer fired: run every job that is due, then re-arm for the next.
pub fn on_timer(ctx: Ctx) {
    state(|s| s.armed = None);
    loop {
        let now = ctx.now_ms();
        let Some((_, job)) = state(|s| s.timers.pop_due(now)) else {
            break;
        };
        match job {
            Job::Deadline(handle, serial) => deadline(ctx, handle, serial),
            Job::Check(id) => {
                state(|s| {
                    if let Some(q) = s.queues.get_mut(&id) {
                        q.check = None;
                    }
                });
                serve_background(ctx, &id);
            }
            Job::Revoke(id, req, reply) => revoke(ctx, &id, &req, &reply),
        }
    }
    state(|s| s.arm(ctx));
}

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
    if let Some((id, waiter)) = removed {
        waiter.req.kind().counters().waits_timed_out.incr();
        deliver(waiter.handle, Reply::Nil);
        after_leaving(ctx, &id);
    }
}

// ---- parking and serving -------------------------------------------------------------------------

/// Park the calling client behind `keys`' queue with request `req`, or reply nil at once when
/// the request may not wait (no BLOCK; or inside MULTI, Lua or RM_Call, where a wait degrades to
/// one attempt, as BLPOP's).
pub fn park_or_nil(ctx: Ctx, keys: &RedisKeys, waits: Wait, req: Req) -> Answer {
    let kind = req.kind();
    let block_ms = match waits {
        Wait::Block(ms) => Some(ms),
        Wait::No => None,
    };
    let Some(ms) = block_ms.filter(|_| ctx.may_block()) else {
        kind.counters().busy.incr();
        return Answer::Reply(Reply::Nil);
    };
    let id = KeyId::new(ctx.db(), keys.key_name());
    let wake_at = req.wake_at(keys);
    let bc = ctx.block();
    let handle = Handle::Blocked(bc);
    state(|s| {
        s.serial += 1;
        let serial = s.serial;
        // `ms` was checked to fit: now + ms does not overflow.
        let deadline =
            (ms > 0).then(|| s.schedule(ctx, ctx.now_ms() + ms, Job::Deadline(handle, serial)));
        s.queues.push(
            &id,
            Waiter {
                handle,
                serial,
                req,
                deadline,
            },
        );
        if let Some(at) = wake_at {
            s.watch(ctx, &id, at.saturating_add(1));
        }
    });
    kind.counters().waits_started.incr();
    Answer::Parked
}

/// Serve the queue of the command's key, if it has one: before deciding a newcomer (who must
/// not overtake anyone) and after a write that may have freed the object. Returns whether
/// anyone still waits.
pub fn serve_now(keys: &mut RedisKeys) -> bool {
    if total() == 0 {
        return false;
    }
    let id = KeyId::new(keys.ctx.db(), keys.key_name());
    if !state(|s| s.queues.is_queued(&id)) {
        return false;
    }
    serve(keys, &id);
    state(|s| s.queues.is_queued(&id))
}

/// Serve `id`'s queue from a timer or an event: select its database and open its key.
fn serve_background(ctx: Ctx, id: &KeyId) {
    if !state(|s| s.queues.is_queued(id)) {
        state(|s| s.forget_if_idle(id));
        return;
    }
    // A replica never writes; its waiters were disconnected when it was demoted.
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let mut keys = RedisKeys::background(ctx, &id.key);
    // In a cluster, MIGRATE deletes the key on this node: the object lives on elsewhere now,
    // so its waiters must retry there instead of being granted a copy here.
    if keys.kind(&crate::core::store::Target::Main) == crate::core::store::Kind::Empty
        && !ctx.serves_key(&id.key)
    {
        fail_all(id, CmdError::SlotMoved);
        return;
    }
    serve(&mut keys, id);
}

/// Grant what can be granted of `id`'s queue and deliver every outcome.
fn serve(keys: &mut RedisKeys, id: &KeyId) {
    let ctx = keys.ctx;
    let served = state(|s| wait::serve(&mut s.queues, id, keys));
    for outcome in served.outcomes {
        match outcome {
            Outcome::Granted {
                waiter,
                reply,
                after_expiry,
            } => {
                let c = waiter.req.kind().counters();
                c.acquired.incr();
                c.handoffs.incr();
                if after_expiry {
                    c.grants_after_expiry.incr();
                }
                state(|s| s.retire(&waiter));
                let Handle::Blocked(bc) = waiter.handle;
                state(|s| {
                    s.in_flight.insert(
                        bc.id(),
                        InFlight {
                            id: id.clone(),
                            req: waiter.req,
                            reply: reply.clone(),
                        },
                    )
                });
                deliver(waiter.handle, reply);
            }
            Outcome::Failed { waiter, error } => {
                state(|s| s.retire(&waiter));
                stats::ERRORS.incr();
                deliver(waiter.handle, Reply::Error(error));
            }
        }
    }
    state(|s| {
        if let Some(at) = served.wake_at {
            s.watch(ctx, id, at.saturating_add(1));
        }
        s.forget_if_idle(id);
    });
}

/// End every wait on `id` with `err`.
fn fail_all(id: &KeyId, err: CmdError) {
    let drained = state(|s| {
        let ws = s.queues.drain(id);
        for w in &ws {
            s.retire(w);
        }
        s.forget_if_idle(id);
        ws
    });
    for w in drained {
        stats::ERRORS.incr();
        deliver(w.handle, Reply::Error(err.clone()));
    }
}

/// A waiter left `id`'s queue without being granted: whoever is now at its head may be
/// grantable (a reader behind a writer that timed out).
fn after_leaving(ctx: Ctx, id: &KeyId) {
    state(|s| {
        if s.queues.is_queued(id) {
            s.watch(ctx, id, ctx.now_ms());
        } else {
            s.forget_if_idle(id);
        }
    });
}

/// Undo a grant whose waiter is gone, then serve the queue.
fn revoke(ctx: Ctx, id: &KeyId, req: &Req, reply: &Reply) {
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let mut keys = RedisKeys::background(ctx, &id.key);
    if let Some(undo) = req.undo(reply, &keys) {
        use crate::core::wait::Io;
        if keys.apply(&undo).is_ok() {
            req.kind().counters().grants_revoked.incr();
        }
    }
    drop(keys);
    state(|s| s.watch(ctx, id, ctx.now_ms()));
}

// ---- delivery ------------------------------------------------------------------------------------

/// Wake a waiter with its reply.
fn deliver(handle: Handle, reply: Reply) {
    let Handle::Blocked(bc) = handle;
    block::unblock(
        bc,
        Some(Wake {
            handle: bc.id(),
            reply,
        }),
    );
}

/// A parked client is answered (from `beforeSleep`) with what it was woken with.
pub fn on_woken(ctx: Ctx, wake: Option<&Wake>) {
    match wake {
        Some(w) => {
            state(|s| s.in_flight.remove(&w.handle));
            ctx.reply(&w.reply);
        }
        None => ctx.reply(&Reply::Nil),
    }
}

pub fn on_freed(wake: Wake) {
    state(|s| s.in_flight.remove(&wake.handle));
}

/// Take a parked client out of its queue and release its handle. False when it is not queued
/// any more (already granted).
fn withdraw(ctx: Ctx, bc: BlockedClient, timed_out: bool) -> bool {
    let Some((id, waiter)) = state(|s| {
        let r = s.queues.remove(Handle::Blocked(bc));
        if let Some((_, w)) = &r {
            s.retire(w);
        }
        r
    }) else {
        return false;
    };
    let c = waiter.req.kind().counters();
    if timed_out {
        c.waits_timed_out.incr();
    } else {
        c.waiters_disconnected.incr();
    }
    block::unblock(bc, None);
    after_leaving(ctx, &id);
    true
}

/// `CLIENT UNBLOCK`: leave the queue and reply nil, as BLPOP does.
pub fn on_unblocked(ctx: Ctx, bc: BlockedClient) {
    withdraw(ctx, bc, true);
    ctx.reply(&Reply::Nil);
}

/// The waiting connection closed: leave the queue at once; if the object was already granted
/// to it but the reply could not be delivered, give it back.
pub fn on_disconnected(ctx: Ctx, bc: BlockedClient) {
    if withdraw(ctx, bc, false) {
        return;
    }
    let Some(grant) = state(|s| s.in_flight.remove(&bc.id())) else {
        return;
    };
    let closing = state(|s| s.closing);
    if ctx.client_id() != closing && !ctx.is_replica() {
        // Not a closing connection: CLIENT UNBLOCK right after the grant, before its reply was
        // sent. Redis drops the module's reply in that case, so give the client its grant here
        // (this context's client is the waiting client).
        ctx.reply(&grant.reply);
        return;
    }
    // The client is gone: undo its grant. Writing from this callback is not safe (we are
    // inside the client's teardown); a job on the next timer turn does it.
    state(|s| {
        s.schedule(
            ctx,
            ctx.now_ms(),
            Job::Revoke(grant.id, grant.req, grant.reply),
        )
    });
}

// ---- events --------------------------------------------------------------------------------------

/// Something happened to `key` in `db` (DEL, expiry, a Redisson script, a type change): if
/// anyone waits for it, look at it on the next turn (writing from an event callback is unsafe
/// on Redis 7.0: our writes would reach replicas before the event's own). `ours`: rlock's own
/// code raised it (its writes, or a key it opened expiring): whoever runs will serve the queue
/// itself, and the state may be borrowed right now, so only the expiry is noted, if possible.
pub fn key_touched(ctx: Ctx, db: i32, key: &[u8], expired: bool, ours: bool) {
    STATE.with(|cell| {
        let Ok(mut s) = cell.try_borrow_mut() else {
            return;
        };
        if s.queues.total() == 0 {
            return;
        }
        let id = KeyId::new(db, key);
        let Some(q) = s.queues.get_mut(&id) else {
            return;
        };
        q.expired |= expired;
        if !q.is_empty() && !ours {
            s.watch(ctx, &id, ctx.now_ms());
        }
    });
}

/// Every queue of database `db` (or of all databases) may have changed (FLUSH*, SWAPDB).
pub fn db_touched(ctx: Ctx, db: Option<i32>) {
    let now = ctx.now_ms();
    state(|s| {
        for id in s.queues.ids(db) {
            s.watch(ctx, &id, now);
        }
    });
}

/// A connection is being freed (see `State::closing`).
pub fn client_closing(id: u64) {
    state(|s| s.closing = id);
}

/// Counters of the waiting mechanism that `INFO rlock` shows besides each object's.
pub fn waiters_by_kind() -> Vec<(ObjectKind, usize)> {
    state(|s| {
        let mut counts: HashMap<ObjectKind, usize> = HashMap::new();
        for id in s.queues.ids(None) {
            if let Some(q) = s.queues.get(&id) {
                for w in q.iter() {
                    *counts.entry(w.req.kind()).or_default() += 1;
                }
            }
        }
        ObjectKind::ALL
            .iter()
            .map(|k| (*k, counts.get(k).copied().unwrap_or(0)))
            .collect()
    })
}

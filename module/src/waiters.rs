//! Server-side waiters: parking a client, handing a freed lock to the head of its queue, and
//! the callbacks through which Redis tells us about timeouts, disconnects, timers and keys that
//! vanished by other means (DEL, expiry, eviction, FLUSHALL, RENAME, MOVE, SWAPDB).
//!
//! Invariants:
//! - a waiter is in exactly one queue until it is granted, times out or disconnects, and its
//!   blocked client is unblocked exactly once (by whichever of those removes it from the queue);
//! - Redis never times a waiter out by itself: the BLOCK deadline is a module timer, so a grant
//!   and a timeout are decided in one place (Redis 7.0 mishandles a timeout that lands between a
//!   module's unblock and its reply: the client gets no reply at all);
//! - a lock with waiters has one live timer, at the holder's expiry or sooner, and the timer
//!   re-checks the key: a freed lock is handed to the head waiter in the same step;
//! - no `RefCell` borrow is held across a call into Redis (Redis may call back into us).

use crate::core::error::CmdError;
use crate::core::lock::View;
use crate::core::names;
use crate::core::parse::deadline;
use crate::core::queue::{LockId, Queues, Timer, Waiter};
use crate::core::stats::{self, Counter};
use crate::entry::guarded;
use crate::ffi::{
    self, BlockCallbacks, BlockedClient, Ctx, Key, KeyKind, OwnedStr, RStr, RedisModuleCtx,
    RedisModuleString,
};
use redis_module::raw;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};

type Handle = usize;

/// How often a lock whose expired key is kept by a write pause is looked at again.
const PAUSED_RECHECK_MS: i64 = 10;

thread_local! {
    static QUEUES: RefCell<Queues<Handle>> = RefCell::default();
    /// Waiters granted the lock whose reply has not reached them yet (it is sent from
    /// `beforeSleep`). If one disconnects in between, its grant is revoked.
    static GRANTED: RefCell<HashMap<Handle, Grant>> = RefCell::default();
    /// Serial of the next parked acquire.
    static SERIAL: Cell<u64> = const { Cell::new(0) };
    /// The client Redis is freeing right now (its CLIENT_CHANGE event comes just before it is
    /// unblocked), to tell a real disconnect from CLIENT UNBLOCK in `on_disconnect`.
    static CLOSING: Cell<u64> = const { Cell::new(0) };
}

/// A grant on its way to the waiter.
struct Grant {
    id: LockId,
    owner: Box<[u8]>,
    value: i64,
}

fn queues<R>(f: impl FnOnce(&mut Queues<Handle>) -> R) -> R {
    QUEUES.with(|q| f(&mut q.borrow_mut()))
}

/// Whether anyone waits for `key` in database `db`. Cheap when nobody waits anywhere, which
/// keeps the uncontended command path and the keyspace-event handler allocation-free.
pub fn is_queued(db: i32, key: &[u8]) -> bool {
    queues(|q| q.total() > 0 && q.is_queued(&LockId::new(db, key)))
}

pub fn waiting_total() -> usize {
    queues(|q| q.total())
}

/// Owners queued for `key`, in FIFO order.
pub fn queued_owners(db: i32, key: &[u8]) -> Vec<Vec<u8>> {
    queues(|q| {
        q.owners(&LockId::new(db, key))
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect()
    })
}

/// Read the lock key as the core sees it, for `owner`.
pub fn view(key: &Key, owner: RStr) -> View {
    match key.kind() {
        KeyKind::Empty => View::Free,
        KeyKind::Other => View::WrongType,
        KeyKind::Hash => View::Hash {
            mine: key.hash_get_int(owner),
        },
    }
}

// ---- writes shared by commands and hand-offs --------------------------------------------------

/// Write `{owner: count}` with absolute expiry `at_ms`, and replicate it as native commands.
pub fn write_hold(ctx: Ctx, key: &Key, name: RStr, owner: RStr, count: i64, at_ms: i64) {
    key.hash_set_int(owner, count);
    key.set_abs_expire(at_ms);
    ctx.replicate(
        c"HSET",
        &[
            name.bytes(),
            owner.bytes(),
            itoa::Buffer::new().format(count).as_bytes(),
        ],
        false,
    );
    ctx.replicate(
        c"PEXPIREAT",
        &[name.bytes(), itoa::Buffer::new().format(at_ms).as_bytes()],
        false,
    );
    ctx.notify(raw::REDISMODULE_NOTIFY_HASH, c"hincrby", name);
    ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", name);
}

/// Delete the lock, tell Redisson clients (publish `0`), and hand it to the next waiter.
pub fn free_lock(ctx: Ctx, key: &Key, name: RStr) {
    key.delete();
    ctx.replicate(c"DEL", &[name.bytes()], false);
    ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", name);
    ctx.publish(&names::prefixed(names::LOCK_CHANNEL, name.bytes()), b"0");
    if is_queued(ctx.db(), name.bytes()) {
        hand_off(ctx, key, name, &LockId::new(ctx.db(), name.bytes()));
    }
}

/// INCR the fencing-token key of lock `name` and replicate it.
pub fn next_token(ctx: Ctx, name: &[u8]) -> Result<i64, CmdError> {
    let token_key = names::prefixed(names::FENCE_TOKEN, name);
    match ctx.incr(&token_key) {
        Ok(t) => {
            ctx.replicate(c"INCR", &[&token_key], false);
            Ok(t)
        }
        Err(true) => Err(CmdError::WrongType),
        Err(false) => Err(CmdError::CorruptToken),
    }
}

// ---- parking and granting ------------------------------------------------------------------

/// What a parked client receives: its reply, handed over through Redis' private data.
struct Outcome {
    handle: Handle,
    reply: Answer,
}

enum Answer {
    /// Granted: the hold count, or the fencing token.
    Value(i64),
    /// The wait ended without the lock.
    Nil,
    Error(CmdError),
}

static CALLBACKS: BlockCallbacks = BlockCallbacks {
    reply: on_reply,
    timeout: on_timeout,
    free: on_free,
    disconnect: on_disconnect,
};

/// Park the calling client at the tail of `id`'s queue. `holder_expiry` is the current holder's
/// absolute expiry, when it has one: the lock is re-checked then.
pub fn park(
    ctx: Ctx,
    id: &LockId,
    owner: &[u8],
    lease_ms: i64,
    fence: bool,
    block_ms: i64,
    holder_expiry: Option<i64>,
) {
    // No Redis timeout (0): the deadline is ours (see the module docs above). A module timer
    // also ends the wait on time; Redis' own deadline check waits for the next server cron.
    let bc = ctx.block(0, &CALLBACKS);
    let handle = bc as Handle;
    let serial = SERIAL.with(|s| s.replace(s.get() + 1));
    let deadline_timer = (block_ms > 0).then(|| {
        // `block_ms` was checked to fit: now + block_ms does not overflow.
        let job = Job::Deadline(handle, serial, ctx.now_ms() + block_ms);
        ctx.create_timer(block_ms, on_timer, Box::into_raw(Box::new(job)).cast())
    });
    let waiter = Waiter {
        handle,
        owner: owner.into(),
        lease_ms,
        fence,
        serial,
        deadline_timer,
    };
    queues(|q| q.push(id, waiter));
    stats::WAITS_STARTED.incr();
    if let Some(at) = holder_expiry {
        watch(ctx, id, at.saturating_add(1));
    }
}

/// Grant the free lock `id` (its key is open and empty) to queued waiters in FIFO order, until
/// one takes it. A waiter whose grant fails (bad fencing-token key) gets the error and the next
/// one is tried.
pub fn hand_off(ctx: Ctx, key: &Key, name: RStr, id: &LockId) {
    while let Some((waiter, expired)) = queues(|q| {
        let w = q.pop_front(id)?;
        let expired = q
            .get_mut(id)
            .map(|kq| std::mem::take(&mut kq.expired))
            .unwrap_or(false);
        Some((w, expired))
    }) {
        retire(ctx, &waiter);
        let now = ctx.now_ms();
        let granted = deadline(now, waiter.lease_ms, "lease_ms").and_then(|at| {
            let token = if waiter.fence {
                Some(next_token(ctx, name.bytes())?)
            } else {
                None
            };
            let owner = OwnedStr::new(&waiter.owner);
            write_hold(ctx, key, name, owner.get(), 1, at);
            Ok((at, token.unwrap_or(1)))
        });
        match granted {
            Ok((at, value)) => {
                stats::ACQUIRED.incr();
                stats::HANDOFFS.incr();
                if expired {
                    stats::GRANTS_AFTER_EXPIRY.incr();
                }
                let grant = Grant {
                    id: id.clone(),
                    owner: waiter.owner.clone(),
                    value,
                };
                GRANTED.with(|g| g.borrow_mut().insert(waiter.handle, grant));
                if queues(|q| q.is_queued(id)) {
                    watch(ctx, id, at.saturating_add(1));
                }
                reply_later(waiter.handle, Answer::Value(value));
                break;
            }
            Err(e) => {
                stats::ERRORS.incr();
                reply_later(waiter.handle, Answer::Error(e));
            }
        }
    }
    forget_if_idle(ctx, id);
}

/// Drop the bookkeeping of a lock nobody waits for, stopping its timer.
fn forget_if_idle(ctx: Ctx, id: &LockId) {
    if let Some(timer) = queues(|q| q.forget_if_idle(id)) {
        stop(ctx, timer);
    }
}

// ---- timers --------------------------------------------------------------------------------

enum Job {
    /// Re-check a lock with waiters: hand it off if it is free, else wait for its expiry.
    Check(LockId),
    /// A waiter was granted the lock but disconnected before the reply: undo that grant.
    Revoke(LockId, Box<[u8]>),
    /// A waiter's BLOCK deadline (handle, serial of the wait, absolute ms).
    Deadline(Handle, u64, i64),
}

/// Make sure `id`'s lock is re-checked no later than `at_ms`.
pub fn watch(ctx: Ctx, id: &LockId, at_ms: i64) {
    let current = queues(|q| q.get(id).map(|kq| kq.timer));
    let Some(current) = current else { return };
    if let Some(t) = current {
        if t.at_ms <= at_ms {
            return; // an earlier check re-arms for the right time
        }
        stop(ctx, t);
    }
    let data = Box::into_raw(Box::new(Job::Check(id.clone())));
    let now = ctx.now_ms();
    // The timer may be capped (ffi::MAX_TIMER_DELAY_MS): record when it really fires.
    let delay = at_ms.saturating_sub(now).clamp(0, ffi::MAX_TIMER_DELAY_MS);
    let timer_id = ctx.create_timer(delay, on_timer, data.cast());
    queues(|q| {
        if let Some(kq) = q.get_mut(id) {
            kq.timer = Some(Timer {
                id: timer_id,
                at_ms: now + delay,
            });
        }
    });
}

fn stop(ctx: Ctx, timer: Timer) {
    stop_id(ctx, timer.id);
}

fn stop_id(ctx: Ctx, timer_id: u64) {
    if let Some(data) = ctx.stop_timer(timer_id) {
        // SAFETY: every timer's data is a Box<Job> made in this file.
        drop(unsafe { Box::from_raw(data.cast::<Job>()) });
    }
}

/// A waiter left its queue by any way but its deadline: its deadline timer is not needed.
fn retire(ctx: Ctx, waiter: &Waiter<Handle>) {
    if let Some(t) = waiter.deadline_timer {
        stop_id(ctx, t);
    }
}

unsafe extern "C" fn on_timer(ctx: *mut RedisModuleCtx, data: *mut c_void) {
    // SAFETY: data is the Box<Job> given to RM_CreateTimer; a fired timer is never stopped.
    let job = *Box::from_raw(data.cast::<Job>());
    let ctx = Ctx(ctx);
    guarded(|| match job {
        Job::Check(id) => {
            queues(|q| {
                if let Some(kq) = q.get_mut(&id) {
                    kq.timer = None;
                }
            });
            check(ctx, &id);
        }
        Job::Revoke(id, owner) => revoke(ctx, &id, &owner),
        Job::Deadline(handle, serial, at_ms) => {
            let mine = |q: &Queues<Handle>| q.find(handle).is_some_and(|w| w.serial == serial);
            let now = ctx.now_ms();
            if now < at_ms {
                // A capped timer fired before the deadline: wait on.
                if queues(|q| mine(q)) {
                    let job = Job::Deadline(handle, serial, at_ms);
                    let data = Box::into_raw(Box::new(job)).cast();
                    let t = ctx.create_timer(at_ms - now, on_timer, data);
                    queues(|q| q.find_mut(handle).map(|w| w.deadline_timer = Some(t)));
                }
                return;
            }
            // Only the wait this timer was made for (a handle can be reused by a later wait).
            let removed = queues(|q| if mine(q) { q.remove(handle) } else { None });
            if let Some((id, _)) = removed {
                stats::WAITS_TIMED_OUT.incr();
                reply_later(handle, Answer::Nil);
                forget_if_idle(ctx, &id);
            }
        }
    });
}

/// Look at a lock that has waiters: hand it off if free; else re-check at the holder's expiry.
fn check(ctx: Ctx, id: &LockId) {
    if !queues(|q| q.is_queued(id)) {
        forget_if_idle(ctx, id);
        return;
    }
    // A replica never writes; its waiters were disconnected when it was demoted.
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let name = OwnedStr::new(&id.key);
    let key = Key::write(ctx, name.get());
    match key.kind() {
        KeyKind::Empty if ctx.key_stored(name.get()) => {
            // Expired but kept: writes are paused, and Redis keeps the dataset still until the
            // pause ends, so wait for it too.
            watch(ctx, id, ctx.now_ms() + PAUSED_RECHECK_MS);
        }
        // In a cluster, MIGRATE fires `del` on the source node: the lock lives on elsewhere now,
        // so its waiters must retry there instead of being granted a copy here.
        KeyKind::Empty if !ctx.serves_key(name.get()) => fail_all(ctx, id, CmdError::SlotMoved),
        KeyKind::Empty => hand_off(ctx, &key, name.get(), id),
        KeyKind::Hash => {
            if let Some(at) = key.abs_expire() {
                watch(ctx, id, at.saturating_add(1));
            }
            // Without a lease the lock frees only by release or deletion, which we hear of.
        }
        // The key now holds something that is not a lock: waiting for it cannot succeed.
        KeyKind::Other => fail_all(ctx, id, CmdError::WrongType),
    }
}

/// End every wait on `id` with `err`.
fn fail_all(ctx: Ctx, id: &LockId, err: CmdError) {
    for w in queues(|q| q.drain(id)) {
        retire(ctx, &w);
        stats::ERRORS.incr();
        reply_later(w.handle, Answer::Error(err.clone()));
    }
    forget_if_idle(ctx, id);
}

fn revoke(ctx: Ctx, id: &LockId, owner: &[u8]) {
    if ctx.is_replica() || !ctx.select_db(id.db) {
        return;
    }
    let name = OwnedStr::new(&id.key);
    let owner = OwnedStr::new(owner);
    let key = Key::write(ctx, name.get());
    // Only the untouched grant (count 1) is undone; anything else was done by a live client.
    if view(&key, owner.get())
        == (View::Hash {
            mine: Some(Some(1)),
        })
    {
        stats::GRANTS_REVOKED.incr();
        free_lock(ctx, &key, name.get());
    }
}

/// Take a waiter out of its queue (timeout, disconnect) and release its blocked-client handle.
/// False when it is not queued any more (already granted).
fn withdraw(ctx: Ctx, bc: *mut BlockedClient, counter: &Counter) -> bool {
    let Some((id, waiter)) = queues(|q| q.remove(bc as Handle)) else {
        return false;
    };
    retire(ctx, &waiter);
    counter.incr();
    ffi::unblock(bc, std::ptr::null_mut());
    forget_if_idle(ctx, &id);
    true
}

/// Wake a parked client with `reply`, delivered by `on_reply` from beforeSleep.
fn reply_later(handle: Handle, reply: Answer) {
    let data = Box::into_raw(Box::new(Outcome { handle, reply }));
    ffi::unblock(handle as *mut BlockedClient, data.cast());
}

// ---- blocked-client callbacks ----------------------------------------------------------------

/// Runs from `beforeSleep` for a client we unblocked: send the reply prepared at grant time.
unsafe extern "C" fn on_reply(
    ctx: *mut RedisModuleCtx,
    _argv: *mut *mut RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx(ctx);
    guarded(|| {
        let data = ctx.blocked_private_data().cast::<Outcome>();
        // SAFETY: the private data is the Outcome passed to RM_UnblockClient; it is freed
        // later by on_free, not here.
        match unsafe { data.as_ref() } {
            Some(o) => {
                GRANTED.with(|g| g.borrow_mut().remove(&o.handle));
                match &o.reply {
                    Answer::Value(n) => ctx.reply_int(*n),
                    Answer::Nil => ctx.reply_null(),
                    Answer::Error(e) => ctx.reply_error(&e.to_string()),
                }
            }
            None => ctx.reply_null(),
        }
    })
    .unwrap_or_else(|| ctx.reply_error(&CmdError::Internal.to_string()));
    raw::REDISMODULE_OK as c_int
}

/// CLIENT UNBLOCK (Redis calls the timeout callback for it; our own deadlines are timers):
/// leave the queue and reply nil, as BLPOP does.
unsafe extern "C" fn on_timeout(
    ctx: *mut RedisModuleCtx,
    _argv: *mut *mut RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx(ctx);
    guarded(|| withdraw(ctx, ctx.blocked_handle(), &stats::WAITS_TIMED_OUT));
    ctx.reply_null();
    raw::REDISMODULE_OK as c_int
}

/// The waiting connection closed: leave the queue at once; if the lock was already granted to
/// it but the reply could not be delivered, give the lock back.
unsafe extern "C" fn on_disconnect(ctx: *mut RedisModuleCtx, bc: *mut BlockedClient) {
    let ctx = Ctx(ctx);
    guarded(|| {
        if withdraw(ctx, bc, &stats::WAITERS_DISCONNECTED) {
            return;
        }
        let Some(grant) = GRANTED.with(|g| g.borrow_mut().remove(&(bc as Handle))) else {
            return;
        };
        if ctx.client_id() != CLOSING.with(Cell::get) && !ctx.is_replica() {
            // Not a closing connection: CLIENT UNBLOCK right after the grant, before its reply
            // was sent. Redis drops the module's reply in that case, so give the client its
            // grant here (this context's client is the waiting client).
            ctx.reply_int(grant.value);
            return;
        }
        // The client is gone: undo its grant. Writing from this callback is not safe (we are
        // inside the client's teardown); a zero-delay timer does it on the next turn.
        let data = Box::into_raw(Box::new(Job::Revoke(grant.id, grant.owner)));
        ctx.create_timer(0, on_timer, data.cast());
    });
}

unsafe extern "C" fn on_free(_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    guarded(|| {
        if !data.is_null() {
            // SAFETY: non-null private data is always a Box<Outcome> from Box::into_raw.
            let outcome = unsafe { Box::from_raw(data.cast::<Outcome>()) };
            GRANTED.with(|g| g.borrow_mut().remove(&outcome.handle));
        }
    });
}

// ---- events that free a lock behind our back -------------------------------------------------

/// Keyspace events (generic, expired, evicted): DEL/UNLINK, expiry, eviction, RENAME/MOVE away,
/// a Redisson Lua unlock. Writing here is unsafe on Redis 7.0 (our writes would reach replicas
/// before the event's own DEL), so a zero-delay timer re-checks the lock.
pub unsafe extern "C" fn on_keyspace(
    ctx: *mut RedisModuleCtx,
    _class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    let ctx = Ctx(ctx);
    let expired = !event.is_null() && CStr::from_ptr(event).to_bytes() == b"expired";
    let ours = crate::entry::inside();
    guarded(|| {
        if waiting_total() == 0 {
            return;
        }
        let id = LockId::new(ctx.db(), RStr(key).bytes());
        let queued = QUEUES.with(|q| match q.try_borrow_mut() {
            Ok(mut q) => match q.get_mut(&id) {
                Some(kq) => {
                    kq.expired |= expired;
                    !kq.is_empty()
                }
                None => false,
            },
            Err(_) => false,
        });
        // Our own writes raise events too; the command that made them handles the lock itself.
        if queued && !ours {
            watch(ctx, &id, ctx.now_ms());
        }
    });
    guarded(|| crate::client_db::after_keyspace_event(ctx, event));
    raw::REDISMODULE_OK as c_int
}

/// CLIENT_CHANGE: remember which client Redis is freeing; its blocked-client disconnect
/// callback follows immediately (see `on_disconnect`).
pub unsafe extern "C" fn on_client_change(
    _ctx: *mut RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    if sub == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED && !data.is_null() {
        // SAFETY: CLIENT_CHANGE events carry a RedisModuleClientInfo.
        let id = unsafe { (*data.cast::<raw::RedisModuleClientInfo>()).id };
        CLOSING.with(|c| c.set(id));
    }
}

/// FLUSHDB / FLUSHALL / SWAPDB: every lock with waiters in the databases touched is re-checked.
pub unsafe extern "C" fn on_server_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    let ctx = Ctx(ctx);
    guarded(|| {
        let dbs: Vec<Option<i32>> = if event.id == raw::REDISMODULE_EVENT_FLUSHDB {
            if sub != raw::REDISMODULE_SUBEVENT_FLUSHDB_END {
                return;
            }
            // SAFETY: FLUSHDB events carry a RedisModuleFlushInfo.
            let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
            vec![(db >= 0).then_some(db)]
        } else if event.id == raw::REDISMODULE_EVENT_SWAPDB {
            // SAFETY: SWAPDB events carry a RedisModuleSwapDbInfo.
            let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfo>() };
            vec![Some(info.dbnum_first), Some(info.dbnum_second)]
        } else {
            return;
        };
        let now = ctx.now_ms();
        for db in dbs {
            for id in queues(|q| q.ids(db)) {
                watch(ctx, &id, now);
            }
        }
    });
}

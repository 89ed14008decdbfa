//! The shared waiting mechanism, Redis side: queueing a request, serving a key's queue whenever
//! something may have freed it, delivering each outcome to its waiter, deadlines, and undoing a
//! grant whose waiter vanished. Every object waits through here; none has code of its own for
//! queues, deadlines or hand-off.
//!
//! A waiter is reached through its [`Handle`]: a client parked with `BLOCK` gets its reply
//! through Redis' blocked-client machinery; a request queued through a session gets it through
//! the session's outcome list (`sessions`, the one implementation of [`Sessions`]). A
//! session request may also have its connection parked for a first part of its wait
//! (`QUEUE ... BLOCK ms`, see [`park_request`]): a grant then goes straight to that connection,
//! as to a blocked waiter, and anything else answers it `QUEUED` and goes to the session.
//!
//! Invariants:
//! - a waiter is in exactly one queue until it is granted, fails, times out or leaves, and its
//!   blocked client is unblocked exactly once (by whichever of those removes it from the queue);
//! - Redis never times a waiter out by itself: deadlines are module timer jobs, so a grant and a
//!   timeout are decided in one place (Redis 7.0 mishandles a timeout that lands between a
//!   module's unblock and its reply: the client gets no reply at all);
//! - a key with waiters has a re-check job at its next lease end (or sooner), and serving
//!   re-reads the key: a freed object goes to the head of its queue in the same step;
//! - the state's `RefCell` is never borrowed across a call that can call back into this room
//!   (our own writes' keyspace events are dropped at the FFI boundary).
//!
//! Rooms, each calling only those listed after it: `clients` (a parked client leaving without
//! a grant), `queue` (joining and leaving a queue, the key's re-check), `serve` (serving a
//! queue and what calls for it: a command's write, a lease end, an event), `delivery` (telling
//! a waiter how its wait ended). `graph` holds the owner index and the wait-for graph deadlock
//! detection searches. This file holds their shared state.

mod clients;
mod delivery;
mod graph;
mod queue;
mod serve;
mod undo;

pub use clients::{client_unblock_is_safe, on_disconnected, on_unblocked};
pub use delivery::{client_closing, on_freed, on_woken, park_request};
pub use graph::check_deadlock;
pub use queue::{enqueue, park_or_nil, withdraw, withdraw_session};
pub use serve::{
    db_touched, end_waits, fail_all_waits, queued_ids, queued_ids_upto, recheck, revoke_later,
    serve_first, serve_now, touched, upkeep,
};
pub use undo::{
    ended as hold_ended, ended_where as undo_ended_where, pending as undo_pending,
    take as grant_final, undoable, Ticket,
};

use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::{Counted, ObjectKind};
use crate::core::wait::HashMap;
use crate::core::wait::{Deadline, Grouped, KeyId, Queues, Req, TimerKey, Waiter};
use crate::ffi::block::BlockedClient;
use crate::ffi::Ctx;
use crate::timers;
use delivery::InFlight;
use graph::{OwnerId, OwnerWaits};
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// How a waiter is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    /// A client parked with `BLOCK`.
    Blocked(BlockedClient),
    /// A request queued through a session: the session's number and the client's request id.
    Session { session: u32, request: u64 },
}

/// A session's requests are a group (they leave together when it ends); blocked clients,
/// one group of their own.
impl Grouped for Handle {
    type Group = Option<u32>;
    fn group(&self) -> Option<u32> {
        match self {
            Handle::Blocked(_) => None,
            Handle::Session { session, .. } => Some(*session),
        }
    }
}

/// How a waiter's wait ended.
pub enum Ended {
    /// Granted: the reply a blocked waiter receives, and what is needed to undo the grant.
    Granted { id: KeyId, req: Req, reply: Reply },
    /// Its deadline passed.
    TimedOut,
    /// It can never be granted (the key changed type, its slot moved away).
    Failed(CmdError),
}

/// What sessions (a room above this one) do for the waiting mechanism: one implementation
/// (`sessions::Hooks`), installed at load, so that this room never imports `sessions`.
pub trait Sessions: Sync {
    /// Where outcomes of session requests go: the session, the request id, how it ended.
    fn sink(&self, ctx: Ctx, session: u32, request: u64, ended: Ended);
    /// Where a hold granted to a blocked client that named a session goes to be watched for
    /// loss: the session, the key, the request, and until when it is held if that is known
    /// (`None`: read the keys).
    fn watch(&self, ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>);
    /// A request of this session (its id) was granted straight to its parked connection (the
    /// session no longer counts it as queued).
    fn handed(&self, session: u32, request: u64);
}

static SESSIONS: OnceLock<&'static dyn Sessions> = OnceLock::new();

pub fn install_sessions(sessions: &'static dyn Sessions) {
    let _ = SESSIONS.set(sessions);
}

fn sessions() -> Option<&'static dyn Sessions> {
    SESSIONS.get().copied()
}

#[derive(Default)]
struct State {
    queues: Queues<Handle, Req>,
    /// The waits of each owner (for deadlock detection).
    by_owner: HashMap<OwnerId, OwnerWaits>,
    /// Keys looked at when a single hold's lease ends although nobody waits (see `upkeep`).
    upkeep: HashMap<KeyId, TimerKey>,
    /// The owners with more than one wait (usually none; deadlock detection follows them).
    multi: HashSet<OwnerId>,
    /// The waits of the owners in `multi`, all told: what a deadlock check reads first.
    multi_waits: usize,
    in_flight: HashMap<usize, InFlight>,
    /// Parked clients whose acquire named a session, by blocked-client id.
    watched: HashMap<usize, u32>,
    /// Session requests whose connection is parked for the first part of their wait, and when
    /// that part ends (in `park_ends`): it is answered `QUEUED` then.
    parked: HashMap<Handle, (BlockedClient, Option<Deadline>)>,
    /// The ends of the parks' first parts, by due time.
    park_ends: timers::Batch<Handle>,
    /// The waits' deadlines, by due time: the wait (its handle and serial) each ends.
    wait_ends: timers::Batch<(Handle, u64)>,
    /// The same, by blocked-client id.
    parked_by_bc: HashMap<usize, Handle>,
    serial: u64,
    /// The client Redis is freeing right now (its CLIENT_CHANGE event comes just before its
    /// blocked-client disconnect callback), to tell a real disconnect from CLIENT UNBLOCK.
    closing: u64,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

/// [`total`], as each use of the state leaves it (on every way out, a panic too): the
/// uncontended path asks it of every command, and a plain atomic spares it the thread-local
/// (`__tls_get_addr` and the `RefCell`'s borrow, about 25 instructions, callgrind). Only Redis'
/// main thread queues waiters.
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    /// Publishes the total when the state is let go.
    struct Using<'a>(std::cell::RefMut<'a, State>);
    impl Drop for Using<'_> {
        fn drop(&mut self) {
            TOTAL.store(self.0.queues.total(), Relaxed);
        }
    }
    STATE.with(|s| f(&mut Using(s.borrow_mut()).0))
}

/// Waiters queued across all keys (cheap: the uncontended path asks it first).
pub fn total() -> usize {
    TOTAL.load(Relaxed)
}

/// The queue of `key` as introspection shows it, in FIFO order.
pub fn shown(db: i32, key: &[u8]) -> Vec<Reply> {
    state(|s| {
        s.queues
            .get(&KeyId::new(db, key))
            .map_or_else(Vec::new, |q| q.iter().map(|w| w.req.show()).collect())
    })
}

/// The first `limit` of `key`'s queue as introspection shows it, and the queue's length.
pub fn shown_upto(db: i32, key: &[u8], limit: usize) -> (Vec<Reply>, usize) {
    state(|s| {
        let id = KeyId::new(db, key);
        let shown = s.queues.get(&id).map_or_else(Vec::new, |q| {
            q.iter().take(limit).map(|w| w.req.show()).collect()
        });
        (shown, s.queues.len(&id))
    })
}

/// Waiters queued on `key` of database `db` now.
pub fn queue_len(db: i32, key: &[u8]) -> usize {
    if total() == 0 {
        return 0;
    }
    state(|s| s.queues.len(&KeyId::new(db, key)))
}

/// The kind of object whose requests wait on `key` of database `db`, if any wait. A queue holds
/// one kind: `commands::acquire::wait_or_nil` refuses requests of another.
pub fn queued_kind(db: i32, key: &[u8]) -> Option<ObjectKind> {
    if total() == 0 {
        return None;
    }
    let id = KeyId::new(db, key);
    state(|s| s.queues.get(&id)?.front().map(|w| w.req.kind()))
}

/// Whether a waiter on `key` of database `db` wants one of `values` (a grouped MultiLock's
/// newcomer waits behind it for those, FIFO per value, and passes it for others): O(values)
/// look-ups in the queue's index by value.
pub fn claims_any(db: i32, key: &[u8], values: &[&[u8]]) -> bool {
    if total() == 0 {
        return false;
    }
    state(|s| s.queues.wants_any(&KeyId::new(db, key), values))
}

/// A command freed `values` of the object on `key` of database `db` (a grouped MultiLock's
/// release or force release): serving its queue looks at their waiters, and at nobody it
/// has no other reason to (see `core::wait::grant`'s `serve_past_head`).
pub fn freed(db: i32, key: &[u8], values: &[&[u8]]) {
    if total() == 0 {
        return;
    }
    state(|s| s.queues.freed(&KeyId::new(db, key), values.iter().copied()));
}

/// A newcomer may have taken values of the object on `key` of database `db` (a grouped
/// MultiLock's acquire), each held until `at` at least: serving looks for leases that ended
/// from then on (see `core::wait::by_value`).
pub fn taken(db: i32, key: &[u8], at: i64) {
    if total() == 0 {
        return;
    }
    state(|s| s.queues.taken(&KeyId::new(db, key), at));
}

/// Queued waiters per object kind.
pub fn waiters_by_kind() -> Vec<(ObjectKind, usize)> {
    state(|s| {
        let mut counts: HashMap<ObjectKind, usize> = HashMap::default();
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

/// Session requests whose connection is parked now (`QUEUE ... BLOCK`).
pub fn parked_requests() -> usize {
    state(|s| s.parked.len())
}

/// Wait deadlines and parks' first parts ending later, and timer jobs of the module's that end
/// them (0 to 2), for `INFO rlock`'s `timer_jobs`.
pub fn timed_ends() -> (usize, usize) {
    state(|s| {
        let (waits, waits_job) = s.wait_ends.counts();
        let (parks, parks_job) = s.park_ends.counts();
        (waits + parks, waits_job + parks_job)
    })
}

/// A waiter left its queue (granted, failed, timed out, withdrawn): how is counted (the one
/// place a wait's end is), its deadline and its place in the owner index go.
fn retire(db: i32, waiter: &Waiter<Handle, Req>, how: Counted) {
    waiter.req.kind().count(how);
    state(|s| {
        if let Some(d) = waiter.deadline {
            s.wait_ends.cancel(d); // its job stays armed (`timers::Batch`)
        }
        s.unindex(db, waiter)
    });
}

//! Delivery: how a waiter learns how its wait ended. A parked client is unblocked with its
//! reply (a grant stays in flight until the reply is sent); a session request's outcome goes
//! to its session; a session request's connection may be parked for the first part of its
//! wait.

use super::{sessions, state, undo, Ended, Handle};
use crate::core::decision::Reply;
use crate::core::wait::{fifo, KeyId, Req};
use crate::ffi::block::{self, BlockedClient, Wake};
use crate::ffi::{Answer, Ctx};

/// A grant on its way to a parked client (its reply is sent from `beforeSleep`).
pub(super) struct InFlight {
    pub(super) id: KeyId,
    pub(super) req: Req,
    pub(super) reply: Reply,
    /// The session that watches the hold once the reply is sent (`BLOCK` with `SESSION`), and
    /// until when the grant holds it, as its request tells at the grant (`None`: the keys tell).
    pub(super) session: Option<(u32, Option<Option<i64>>)>,
    /// Undoing it needs the hold not to have ended since (`undo`).
    pub(super) ticket: undo::Ticket,
}

/// Park the calling connection for the first `park_ms` of session request `handle`'s wait
/// (just queued; 0: all of it): a grant within it is replied here (see [`deliver`]); when the
/// time is up, or the request ends otherwise, the connection is answered `QUEUED` and the
/// outcome goes to the session. Measured with `rlock-bench --only contended,family` (sync
/// threads, each on a connection of its own): 8 threads on one lock 1.17× raw `BLOCK` clients
/// against 0.68× when every grant went through the listener (one more command and two more
/// thread wake-ups per hand-off).
pub fn park_request(ctx: Ctx, handle: Handle, park_ms: i64) -> Answer {
    if !ctx.may_block() {
        return Answer::Reply(Reply::QUEUED);
    }
    let bc = ctx.block();
    let at = ctx.now_ms().saturating_add(park_ms);
    state(|s| {
        let window = (park_ms > 0).then(|| s.park_ends.push(ctx, at, handle, parks_due));
        s.parked.insert(handle, (bc, window));
        s.parked_by_bc.insert(bc.id(), handle);
    });
    Answer::Parked
}

/// The job that ends the parks whose first part is over: each is answered `QUEUED`.
fn parks_due(ctx: Ctx) {
    let due = state(|s| s.park_ends.take_due(ctx.now_ms()));
    for (d, handle) in due {
        if state(|s| s.parked.get(&handle).is_some_and(|p| p.1 == Some(d))) {
            answer_queued(handle);
        }
    }
    state(|s| s.park_ends.arm(ctx, parks_due));
}

/// The parked connection of session request `handle`, no longer parked.
pub(super) fn unpark(handle: Handle) -> Option<BlockedClient> {
    state(|s| {
        let (bc, window) = s.parked.remove(&handle)?;
        s.parked_by_bc.remove(&bc.id());
        fifo::shrink(&mut s.parked);
        fifo::shrink(&mut s.parked_by_bc);
        if let Some(d) = window {
            s.park_ends.cancel(d); // its job stays armed (`timers::Batch`)
        }
        Some(bc)
    })
}

/// Answer the parked connection of `handle` `QUEUED` (its wait goes on in the session).
pub(super) fn answer_queued(handle: Handle) {
    if let Some(bc) = unpark(handle) {
        wake(bc, Reply::QUEUED);
    }
}

/// Let a parked session request's connection go without a reply (it closed, or the server
/// replies itself): its request, which stays queued in its session unless the caller
/// withdraws it. `None` when `bc` is not such a connection.
pub(super) fn let_go(bc: BlockedClient) -> Option<Handle> {
    let handle = state(|s| s.parked_by_bc.get(&bc.id()).copied())?;
    unpark(handle);
    block::unblock(bc, None);
    Some(handle)
}

/// Tell a waiter how its wait ended.
pub(super) fn deliver(ctx: Ctx, handle: Handle, ended: Ended) {
    match handle {
        Handle::Blocked(bc) => {
            let session = state(|s| s.watched.remove(&bc.id()));
            answer(ctx, bc, ended, session);
        }
        Handle::Session { session, request } => {
            let Some(hooks) = sessions() else {
                return;
            };
            if let Some(bc) = unpark(handle) {
                if matches!(ended, Ended::Granted { .. }) {
                    // As to a blocked waiter that named the session.
                    hooks.handed(session, request);
                    answer(ctx, bc, ended, Some(session));
                    return;
                }
                wake(bc, Reply::QUEUED);
            }
            hooks.sink(ctx, session, request, ended);
        }
    }
}

/// Answer a parked client how its wait ended. A grant stays in flight until its reply is sent:
/// then the session it named (if any) watches the hold; a connection gone before gets it undone.
pub(super) fn answer(ctx: Ctx, bc: BlockedClient, ended: Ended, session: Option<u32>) {
    let reply = match ended {
        Ended::Granted { id, req, reply } => {
            let wake = reply.clone();
            let ticket = undo::undoable(&id, &req);
            // Granted in this very step: the request tells its lease end (a lock's), read back
            // from the keys otherwise.
            let session = session.map(|s| {
                let until = req.holds().and_then(|h| h.granted_until(ctx.now_ms()));
                (s, until)
            });
            let grant = InFlight {
                id,
                req,
                reply,
                session,
                ticket,
            };
            state(|s| s.in_flight.insert(bc.id(), grant));
            wake
        }
        Ended::TimedOut => Reply::Nil,
        Ended::Failed(e) => Reply::Error(e),
    };
    wake(bc, reply);
}

/// Unblock `bc` with `reply` (sent from `beforeSleep`, see [`on_woken`]).
pub(super) fn wake(bc: BlockedClient, reply: Reply) {
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
            let grant = state(|s| s.in_flight.remove(&w.handle));
            ctx.reply(&w.reply);
            // Delivered: the client's now. Its ticket still here means its hold did not end
            // since the grant (any end takes it back, `undo`).
            let unended = grant.as_ref().is_some_and(|g| undo::take(&g.id, g.ticket));
            // The grant reached its client: a session it named watches the hold from now,
            // held until the grant's lease end if it did not end since (a renewal meanwhile
            // only moves the first look: `sessions::holds`); else the keys tell. (Read back
            // every time, it was 6,700 of the 54,700 instructions of a hand-off between
            // `QUEUE ... BLOCK` waiters: `scripts/handoff.py`.)
            if let (Some(g), Some(hooks)) = (grant, sessions()) {
                if let Some((session, until)) = g.session {
                    let until = until.filter(|_| unended);
                    hooks.watch(ctx, session, g.id, g.req, until);
                }
            }
        }
        None => ctx.reply(&Reply::Nil),
    }
}

pub fn on_freed(wake: Wake) {
    if let Some(g) = state(|s| s.in_flight.remove(&wake.handle)) {
        undo::take(&g.id, g.ticket);
    }
}

/// A connection is being freed (see `State::closing`).
pub fn client_closing(id: u64) {
    state(|s| s.closing = id);
}

//! A parked client leaves its queue without a grant: `CLIENT UNBLOCK`, its connection closing,
//! or the server answering it itself as it becomes a replica. A grant already on its way to a
//! closed connection is undone.

use super::delivery::deliver;
use super::delivery::let_go;
use super::queue::withdraw;
use super::serve::revoke_later;
use super::{state, Ended, Handle};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::Counted;
use crate::ffi::block::{self, BlockedClient};
use crate::ffi::Ctx;

/// Why a parked client leaves its queue without a grant.
#[derive(Clone, Copy)]
pub(super) enum Left {
    /// `CLIENT UNBLOCK` (the deadline has its own path: [`deadline`]).
    Unblocked,
    /// Its connection closed.
    Disconnected,
    /// The server became a replica and answered it `UNBLOCKED ...` itself (Redis, Valkey 8):
    /// an error reply, as when rlock ends the wait itself ([`fail_all_waits`], Valkey 9), so it
    /// counts in `rlock_errors` on every server, not as a disconnect.
    Demoted,
}

/// Take a parked client out of its queue and release its handle.
pub(super) fn withdraw_blocked(ctx: Ctx, bc: BlockedClient, left: Left) -> bool {
    let how = match left {
        Left::Unblocked => Counted::Cancelled,
        Left::Disconnected => Counted::Disconnected,
        Left::Demoted => Counted::Failed,
    };
    if withdraw(ctx, Handle::Blocked(bc), how).is_none() {
        return false;
    }
    state(|s| s.watched.remove(&bc.id()));
    block::unblock(bc, None);
    true
}

/// `CLIENT UNBLOCK`: leave the queue and reply nil, as BLPOP does. Returns false when the
/// client was not one of the waiting mechanism's waiters.
pub fn on_unblocked(ctx: Ctx, bc: BlockedClient) -> bool {
    if let_go(bc).is_some() {
        // A parked session request: its wait goes on in the session.
        ctx.reply(&Reply::QUEUED);
        return true;
    }
    if !withdraw_blocked(ctx, bc, Left::Unblocked) {
        return false;
    }
    ctx.reply(&Reply::Nil);
    true
}

/// The waiting connection closed: leave the queue at once; if the object was already granted
/// to it but the reply could not be delivered, give it back. Returns false when the client was
/// not one of the waiting mechanism's waiters.
pub fn on_disconnected(ctx: Ctx, bc: BlockedClient) -> bool {
    // Redis frees a connection right after announcing it (`State::closing`). A disconnect
    // callback for any other client comes from the server answering the client itself:
    // `UNBLOCKED ...` as it becomes a replica (`disconnectAllBlockedClients`; the role is not
    // switched yet, so `is_replica` cannot tell) or for `CLIENT UNBLOCK <id> ERROR` (see
    // [`client_unblock_is_safe`] for why no plain `CLIENT UNBLOCK` comes here).
    let closing = ctx.client_id() == state(|s| s.closing);
    if let Some(handle) = let_go(bc) {
        // A parked session request whose connection closed stays queued in its session (its
        // client withdraws it, or its outcome waits for the listener). One the server
        // answered `UNBLOCKED` ends with that error as its outcome: the reply says the
        // request did not run, and a client that queues it again (the Rust client does) must
        // leave nothing behind whose grant nobody would take (a lock held by nobody until its
        // lease ends). At a demotion that is the outcome every session request gets.
        if !closing && withdraw(ctx, handle, Counted::Failed).is_some() {
            deliver(ctx, handle, Ended::Failed(CmdError::ServerUnblocked));
        }
        return true;
    }
    let left = if closing {
        Left::Disconnected
    } else {
        Left::Demoted
    };
    if withdraw_blocked(ctx, bc, left) {
        return true;
    }
    let Some(grant) = state(|s| s.in_flight.remove(&bc.id())) else {
        return false;
    };
    // The client is gone, or the server answered it `UNBLOCKED ...` itself (a demotion, or
    // `CLIENT UNBLOCK <id> ERROR`), which its client reads as "not run" and queues again: undo
    // its grant (on a primary: a node that became a replica writes nothing, its keys are its
    // new primary's once synced). A reply here would be a second one to the same command (its
    // client would read the grant as the reply to its next command), and the hold would stay
    // with an owner told it had none. A plain `CLIENT UNBLOCK` never comes here: where it can
    // reach rlock's clients ([`client_unblock_is_safe`]) it returns at once for one already
    // granted, whose reply goes out as usual. Writing from this callback is not safe (we may be
    // inside the client's teardown); a job on the next timer turn does it.
    revoke_later(ctx, grant.id, grant.req, grant.reply, grant.ticket);
    true
}

/// Whether `CLIENT UNBLOCK` may end rlock's parked clients on this server (read once, at load):
/// on Valkey 8+ and Redis 7.4+ only. Elsewhere rlock's clients are parked without a timeout
/// callback, so `CLIENT UNBLOCK` answers 0 for them: their waits end by their deadline, their
/// connection closing (`CLIENT KILL ID`) or a demotion.
/// - Redis 7.2 (and Valkey 7.2, built from its branch): a plain `CLIENT UNBLOCK` of a client the
///   module has just woken, in the same event-loop turn as the grant (before its reply went
///   out), stops the server on its own assertion (`networking.c`, `c->duration == 0`:
///   `moduleBlockedClientTimedOut` returns early for a client already unblocked, so its
///   duration is never reset; seen on 7.2.4 with `MULTI`, `RLOCK.RELEASE`,
///   `CLIENT UNBLOCK <waiter>`, `EXEC`). Redis 7.4 fixed it (redis#13015, not in 7.2.6, the last
///   7.2 release checked).
/// - Redis 7.0 and 7.2: the module is called back alike for a plain `CLIENT UNBLOCK` just after
///   a grant (whose reply Redis then drops: the module would have to give the grant in the
///   callback), for `CLIENT UNBLOCK <id> ERROR` and for a demotion's `UNBLOCKED ...` (both
///   answered by the server already: a grant given there is a second reply). With
///   `CLIENT UNBLOCK` kept away, the callback means the server answered, as on newer servers.
/// - An unknown server is treated as an old one.
pub fn client_unblock_is_safe(ctx: Ctx) -> bool {
    match ctx.server_version() {
        Some((true, (major, _))) => major >= 8,
        Some((false, version)) => version >= (7, 4),
        None => false,
    }
}

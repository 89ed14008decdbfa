//! Serving a queue: after anything that may have freed an object (a release, an expiry, a
//! DEL, a waiter leaving), grant the waiters at the head of its queue, in order, for as long as
//! they can be granted. One waiter (a lock), several (consecutive readers, permits while they
//! last) or all of them (an open latch) may pass in one step; the first that cannot stops the
//! rest (strict FIFO).
//!
//! The loop is pure: it reads and writes through [`ObjectKeys`], which the module implements over
//! Redis and the tests over the in-memory model.

use super::by_value::Freed;
use super::fifo::{Grouped, KeyId, Queues, Waiter};
use super::request::{Req, TryGrant};
use crate::core::decision::{Decision, Reply};
use crate::core::error::CmdError;
use crate::core::store::Store;

/// How soon a queue is tried again when a grant had to wait for a write pause to end.
pub const PAUSED_RETRY_MS: i64 = 10;

/// Reads and writes of one object's keys.
pub trait ObjectKeys {
    fn store(&self) -> &dyn Store;
    /// Perform a decision serving made (a grant, tidying), all or (on error) none; the value its
    /// `Incr` produced. What follows is the serving step's (the skin's `RedisKeys::apply` also
    /// marks the change for the settle step: serving marks nothing).
    fn write_serving(&mut self, decision: &Decision) -> Result<Option<i64>, CmdError>;
}

/// What happened to a waiter that left the queue while it was served.
#[derive(Debug)]
pub enum Outcome<H> {
    Granted {
        waiter: Waiter<H, Req>,
        reply: Reply,
        /// The first grant since the key was seen to expire.
        after_expiry: bool,
    },
    Failed {
        waiter: Waiter<H, Req>,
        error: CmdError,
    },
}

#[derive(Debug)]
pub struct Served<H> {
    pub outcomes: Vec<Outcome<H>>,
    /// When the queue must be looked at again (the earliest lease end of what its head waits
    /// for), if anyone still waits.
    pub wake_at: Option<i64>,
}

/// A reply with [`Reply::Token`] replaced by the value the decision's `Incr` produced.
pub fn with_token(reply: Reply, token: Option<i64>) -> Reply {
    match (reply, token) {
        (Reply::Token, Some(t)) => Reply::Int(t),
        (reply, _) => reply,
    }
}

fn head<'q, H: Grouped>(queues: &'q Queues<H, Req>, id: &KeyId) -> Option<&'q Req> {
    queues.get(id)?.front().map(|w| &w.req)
}

pub fn serve<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
) -> Served<H> {
    serve_by(queues, id, io, serve_past_head)
}

/// How the waiters past a head that must wait are served (see [`serve_past_head`]); the tests
/// compare it with the whole-queue walk it replaced.
pub(crate) type PastHead<H> =
    fn(&mut Queues<H, Req>, &KeyId, &mut dyn ObjectKeys, Freed, &mut Vec<Outcome<H>>) -> bool;

pub(crate) fn serve_by<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
    past_head: PastHead<H>,
) -> Served<H> {
    let mut outcomes = Vec::new();
    let mut after_tidy = None;
    // What time freed, read before the head's grants write the key again (the hash gone: it
    // expired, every value is free; once the head is granted, it holds only the head's), and
    // only when a lease may have ended since the last serving read the next one.
    let valued = queues.may_be_valued();
    let now = if valued { io.store().now() } else { 0 };
    let freed = valued.then(|| queues.get_mut(id)).flatten().and_then(|q| {
        let lapsed = q.by_value()?.may_have_lapsed(now);
        let head = &q.front()?.req;
        Some(match lapsed {
            true => head.object().lapsed_values(io.store()),
            false => Freed::Lapsed(Vec::new()),
        })
    });
    // The head's request, carried from one grant to the next (`Queues::pop_head`) rather than
    // looked up again.
    let mut next = head(queues, id).cloned();
    if let Some(req) = &next {
        // Bring the object up to date first (leases of single holds that ended). An error here
        // (the key is not the object any more) shows again in `try_grant` below, per waiter.
        if let Ok(tidy) = req.object().tidy(io.store()) {
            if !tidy.before.writes.is_empty() && io.write_serving(&tidy.before).is_ok() {
                after_tidy = Some(tidy.after_serving);
            }
        }
    }
    if after_tidy.is_some() {
        // Holds or permits expired by themselves: the next grant comes after an expiry.
        if let Some(q) = queues.get_mut(id) {
            q.expired = true;
        }
    }
    let mut paused = false;
    while let Some(req) = next.take() {
        let (result, reply) = match req.try_grant(io.store()) {
            TryGrant::Wait => {
                next = Some(req);
                break;
            }
            TryGrant::Fail(error) => (Err(error), None),
            TryGrant::Grant(decision) => (io.write_serving(&decision), decision.reply),
        };
        if result == Err(CmdError::Paused) {
            // Nothing was written; the head keeps its place and the queue is tried again soon.
            paused = true;
            next = Some(req);
            break;
        }
        let (waiter, expired, after) = queues
            .pop_head(id, result.is_ok())
            .expect("the head was just read");
        outcomes.push(outcome(waiter, result, reply, expired));
        next = after;
    }
    if let Some(freed) = freed.filter(|_| !paused) {
        paused = past_head(queues, id, io, freed, &mut outcomes);
        // Serving past the head leaves the head where it is; read again all the same.
        next = head(queues, id).cloned();
    }
    if let Some(d) = after_tidy.filter(|d| !d.writes.is_empty()) {
        let _ = io.write_serving(&d);
    }
    let wake_at = if paused {
        Some(io.store().now() + PAUSED_RETRY_MS)
    } else {
        next.and_then(|req| req.object().wake_at(io.store()))
    };
    if let Some(index) = valued
        .then(|| queues.get_mut(id))
        .flatten()
        .and_then(|q| q.by_value())
    {
        // The next lease end, read after this step's writes: no lease ends before it unless
        // a hold is taken outside serving (`Queues::taken`). Paused, nothing is known.
        index.quiet_until(wake_at.filter(|_| !paused));
    }
    Served { outcomes, wake_at }
}

/// What a waiter taken off the queue gets: its grant (with the fencing token the write made,
/// and whether the key had expired since the last grant) or the error of trying.
fn outcome<H: Grouped>(
    waiter: Waiter<H, Req>,
    result: Result<Option<i64>, CmdError>,
    reply: Option<Reply>,
    after_expiry: bool,
) -> Outcome<H> {
    match result {
        Ok(token) => Outcome::Granted {
            waiter,
            reply: with_token(reply.unwrap_or_default(), token),
            after_expiry,
        },
        Err(error) => Outcome::Failed { waiter, error },
    }
}

/// Past a head that must wait, for objects whose requests name their values (a grouped
/// MultiLock, [`super::Request::values`]): a waiter first in the queue's list of every value it
/// wants (nobody before it wants one of them: FIFO per value, see `core::group::walk`) is
/// tried, in queue order. Only waiters first in the list of a value that changed since the
/// queue was last served can have become grantable, so only they are looked at (the queue's
/// index by value, `super::by_value`, names them): the values the step freed (a command says
/// which, `Queues::freed`), those whose first waiter left, and those whose hold's lease ended
/// (the object reads them, [`super::Object::lapsed_values`]). A step costs what it touches,
/// not the queue's length. Returns whether a grant had to wait for a write pause to end.
fn serve_past_head<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
    freed: Freed,
    outcomes: &mut Vec<Outcome<H>>,
) -> bool {
    let Some(q) = queues.get_mut(id) else {
        return false;
    };
    let Some(head) = q.front().filter(|w| w.req.values().is_some()) else {
        return false;
    };
    // The head was just tried: the loop before stopped at it.
    let skip = head.serial;
    let tried = q.candidates(freed, Some(skip));
    match try_in_order(queues, id, io, &tried, outcomes) {
        Some(paused) => {
            if let Some(q) = queues.get_mut(id) {
                for (_, req) in &tried[paused..] {
                    q.untried(req);
                }
            }
            true
        }
        None => false,
    }
}

/// Try each of `tried` (waiters past the head) in order, granting or failing it; the index of
/// the one whose grant a write pause stopped, if any (it and those after it were not tried).
fn try_in_order<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
    tried: &[(H, Req)],
    outcomes: &mut Vec<Outcome<H>>,
) -> Option<usize> {
    for (i, (handle, req)) in tried.iter().enumerate() {
        let (result, reply) = match req.try_grant(io.store()) {
            TryGrant::Wait => continue,
            TryGrant::Fail(error) => (Err(error), None),
            TryGrant::Grant(decision) => (io.write_serving(&decision), decision.reply),
        };
        if result == Err(CmdError::Paused) {
            return Some(i);
        }
        let Some((_, waiter)) = queues.remove(*handle) else {
            continue;
        };
        let expired = result.is_ok()
            && queues
                .get_mut(id)
                .is_some_and(|q| std::mem::take(&mut q.expired));
        outcomes.push(outcome(waiter, result, reply, expired));
    }
    None
}

/// The serving past the head that [`serve_past_head`] replaced, kept as the tests' reference:
/// the whole queue walked in order with the values claimed by the waiters before (the rule of
/// `core::group::walk`), each waiter wanting no claimed value tried.
#[cfg(test)]
pub(crate) fn walk_past_head<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
    _freed: Freed,
    outcomes: &mut Vec<Outcome<H>>,
) -> bool {
    use super::claims::Claims;
    let Some(q) = queues.get(id) else {
        return false;
    };
    if q.front().is_none_or(|w| w.req.values().is_none()) {
        return false;
    }
    let mut claims = Claims::default();
    let mut tried: Vec<(H, Req)> = Vec::new();
    for (i, w) in q.iter().enumerate() {
        let values = w.req.values().unwrap_or_default();
        if i > 0 && claims.free_of(values) {
            tried.push((w.handle, w.req.clone()));
        }
        claims.claim(values);
    }
    try_in_order(queues, id, io, &tried, outcomes).is_some()
}

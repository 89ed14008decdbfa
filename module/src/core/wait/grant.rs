//! Serving a queue: after anything that may have freed an object (a release, an expiry, a
//! DEL, a waiter leaving), grant the waiters at the head of its queue, in order, for as long as
//! they can be granted. One waiter (a lock), several (consecutive readers, permits while they
//! last) or all of them (an open latch) may pass in one step; the first that cannot stops the
//! rest (strict FIFO).
//!
//! The loop is pure: it reads and writes through [`ObjectKeys`], which the module implements over
//! Redis and the tests over the in-memory model.

use super::claims::Claims;
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
    let mut outcomes = Vec::new();
    let mut after_tidy = None;
    if let Some(req) = head(queues, id) {
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
    while let Some(req) = head(queues, id) {
        let (result, reply) = match req.try_grant(io.store()) {
            TryGrant::Wait => break,
            TryGrant::Fail(error) => (Err(error), None),
            TryGrant::Grant(decision) => (io.write_serving(&decision), decision.reply),
        };
        if result == Err(CmdError::Paused) {
            // Nothing was written; the head keeps its place and the queue is tried again soon.
            paused = true;
            break;
        }
        let waiter = queues.pop_front(id).expect("the head was just read");
        outcomes.push(match result {
            Ok(token) => Outcome::Granted {
                waiter,
                reply: with_token(reply.unwrap_or(Reply::Nil), token),
                after_expiry: queues
                    .get_mut(id)
                    .is_some_and(|q| std::mem::take(&mut q.expired)),
            },
            Err(error) => Outcome::Failed { waiter, error },
        });
    }
    if !paused {
        paused = serve_past_head(queues, id, io, &mut outcomes);
    }
    if let Some(d) = after_tidy.filter(|d| !d.writes.is_empty()) {
        let _ = io.write_serving(&d);
    }
    let wake_at = if paused {
        Some(io.store().now() + PAUSED_RETRY_MS)
    } else {
        head(queues, id).and_then(|req| req.object().wake_at(io.store()))
    };
    Served { outcomes, wake_at }
}

/// Past a head that must wait, for objects whose requests name their values (a grouped
/// MultiLock, [`super::Request::values`]): each waiter wanting no value claimed by one before
/// it is tried, in order (FIFO per value; see `core::group::walk`). Serving does not know which
/// values the step freed, so it walks the whole queue; a waiter behind a claim costs no read.
/// Returns whether a grant had to wait for a write pause to end.
fn serve_past_head<H: Grouped>(
    queues: &mut Queues<H, Req>,
    id: &KeyId,
    io: &mut dyn ObjectKeys,
    outcomes: &mut Vec<Outcome<H>>,
) -> bool {
    let Some(q) = queues.get(id) else {
        return false;
    };
    if q.front().is_none_or(|w| w.req.values().is_none()) {
        return false;
    }
    // Which waiters to try depends on the claims alone (granted or not, a waiter's values are
    // no one else's in this step), so they are picked in one borrowing pass and only they are
    // copied out: not the whole queue.
    let mut claims = Claims::default();
    let mut tried: Vec<(H, Req)> = Vec::new();
    for (i, w) in q.iter().enumerate() {
        let values = w.req.values().unwrap_or_default();
        if i > 0 && claims.free_of(values) {
            tried.push((w.handle, w.req.clone()));
        }
        claims.claim(values);
    }
    for (handle, req) in tried {
        let (result, reply) = match req.try_grant(io.store()) {
            TryGrant::Wait => continue,
            TryGrant::Fail(error) => (Err(error), None),
            TryGrant::Grant(decision) => (io.write_serving(&decision), decision.reply),
        };
        if result == Err(CmdError::Paused) {
            return true;
        }
        let Some((_, waiter)) = queues.remove(handle) else {
            continue;
        };
        outcomes.push(match result {
            Ok(token) => Outcome::Granted {
                waiter,
                reply: with_token(reply.unwrap_or(Reply::Nil), token),
                after_expiry: queues
                    .get_mut(id)
                    .is_some_and(|q| std::mem::take(&mut q.expired)),
            },
            Err(error) => Outcome::Failed { waiter, error },
        });
    }
    false
}

//! Event intake: what a keyspace or server event that may have freed an object calls for on the
//! waiting side. The events themselves are read in `events`; here a touched key's queue is
//! noted and served once the execution unit that raised the event has ended.

use crate::core::wait::KeyId;
use crate::ffi::Ctx;
use crate::marks::{self, Background};
use crate::{settle, wait};
use std::cell::RefCell;
use std::collections::HashSet;

thread_local! {
    /// Keys whose queue the job at the end of the current execution unit serves; not empty
    /// while that job is pending.
    static SOON: RefCell<HashSet<KeyId, foldhash::fast::RandomState>> =
        RefCell::default();
}

/// Something happened to `key` in `db` (DEL, expiry, eviction, a Redisson script, a type
/// change): if anyone waits for it, serve its queue as soon as writing is safe. Not from this
/// callback: a write here would reach replicas before the event's own (Redis 7.0), and the
/// script or command that raised it is still running. Where the server has post-execution-unit
/// jobs (Redis 7.2+, Valkey), a job serves it when the unit ends, before any other command runs,
/// and its writes join the unit's MULTI/EXEC after the unit's own: a freed object reaches the
/// head of its queue before anyone else can take it. On Redis 7.0 (or should the server refuse
/// the job) the next timer turn serves it. The timer is armed where jobs exist too, as a net for
/// an event raised outside any unit whose end runs the jobs; it then finds nothing to do.
/// `ours`: rlock's own code raised it (its writes, or a key it opened expiring): whoever runs
/// will serve the queue itself, and the state may be borrowed right now, so only the expiry is
/// noted, if possible.
pub fn key_touched(ctx: Ctx, db: i32, key: &[u8], expired: bool, ours: bool) {
    if !wait::touched(ctx, db, key, expired, ours) {
        return;
    }
    let first = SOON.with(|s| {
        let mut s = s.borrow_mut();
        let first = s.is_empty();
        s.insert(KeyId::new(db, key));
        first
    });
    if first {
        serve_after_unit(ctx);
    }
}

/// Every queue of database `db` (or of all databases) may have changed (FLUSH*, SWAPDB): served
/// when the command ends, as in [`key_touched`].
pub fn db_touched(ctx: Ctx, db: Option<i32>) {
    let ids = wait::db_touched(ctx, db);
    let first = SOON.with(|s| {
        let mut s = s.borrow_mut();
        let first = s.is_empty();
        s.extend(ids);
        first && !s.is_empty()
    });
    if first {
        serve_after_unit(ctx);
    }
}

/// Have the keys in `SOON` served at the end of the current execution unit (one job serves
/// them all); where the server cannot, the timer jobs armed with them do it.
fn serve_after_unit(ctx: Ctx) {
    if !crate::ffi::boundary::after_unit(ctx, serve_soon) {
        SOON.with(|s| s.borrow_mut().clear());
    }
}

/// The job at the end of an execution unit: every queue an event touched in it is due.
fn serve_soon(ctx: Ctx) {
    let ids: Vec<KeyId> = SOON.with(|s| s.borrow_mut().drain().collect());
    settle::background(ctx, |_| {
        for id in ids {
            marks::mark_background(id, Background::Due);
        }
    });
}

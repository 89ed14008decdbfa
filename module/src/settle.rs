//! The settle step: what follows every write, in one place. A handler parses, decides,
//! applies and replies; `RedisKeys::apply` marks what its write did to the object
//! ([`Change`]: granted to the caller, released by its owner, force-released, lease changed,
//! freed...). A timer job or an event job marks its background writes the same way
//! ([`Background`]: a queue due, expired holds tidied, a grant undone). Once the command or
//! job returns, [`settle`] serves the marked key's queue, counts, observes, tells sessions and
//! re-arms the key's own check. As Redis' `signalKeyAsReady` marks a key and
//! `handleClientsBlockedOnKeys` serves it after the command: no handler or job knows the queue
//! is there, so none can forget a step.

use crate::core::error::CmdError;
use crate::core::objects;
use crate::core::stats::{Counted, ObjectKind};
use crate::core::wait::KeyId;
use crate::ffi::{Answer, Ctx, RStr, ReadStr};
use crate::keys::RedisKeys;
use crate::marks::{self, Background, Mark};
pub use crate::marks::{mark, Change, HoldBy};
use crate::{observe, sessions, timers, wait};

/// Run a command handler, then what its writes call for (installed around every handler, inside
/// the reply's gate: serving writes through the command's keys, as the command did).
pub fn around(
    ctx: Ctx,
    key: Option<RStr>,
    run: &mut dyn FnMut() -> Result<Answer, CmdError>,
) -> Result<Answer, CmdError> {
    crate::keys::gate_reply(ctx, key, &mut || {
        // Marks of a command that panicked are not this command's.
        marks::clear();
        let _close = crate::keys::CloseKept;
        let answer = run();
        settle(ctx);
        answer
    })
}

/// The module's timer fired: run each due job, then what its writes call for.
pub fn on_timer(ctx: Ctx) {
    timers::on_timer(ctx, background);
}

/// Run a background job (a timer's, or the one at an execution unit's end), then what its
/// writes call for, as after a command.
pub fn background(ctx: Ctx, job: impl FnOnce(Ctx)) {
    // Marks of a job that panicked are not this job's.
    marks::clear();
    job(ctx);
    settle(ctx);
}

/// Everything the running command's or job's writes call for, in the order they were made.
fn settle(ctx: Ctx) {
    while let Some(mark) = marks::next() {
        match mark {
            Mark::Command {
                name,
                kind,
                change,
                deleted,
            } => settle_command(ctx, name, kind, change, deleted),
            Mark::Background { id, what } => settle_background(ctx, &id, what),
        }
    }
}

/// The steps after one background write. Its key is opened again only when needed: to serve a
/// queue (which looks whether the key is still this node's first), or when sessions watch
/// holds.
fn settle_background(ctx: Ctx, id: &KeyId, what: Background) {
    match what {
        Background::Due => wait::recheck(ctx, id),
        Background::Tidied => {
            if sessions::watching() {
                if let Some(keys) = RedisKeys::looked_at(ctx, id) {
                    sessions::after_write(ctx, &keys);
                }
            }
        }
        Background::Revoked { kind, hold } => {
            kind.count(Counted::Revoked);
            if let Some((owner, exclusive)) = hold {
                observe::revoked(id.db, &id.key, &owner, exclusive);
            }
        }
    }
}

/// The steps after one command write. The key is opened again only when someone waits on it, or a
/// session watches holds and what they need is not known without it (the uncontended path
/// only counts; a watched lock's grant and its last release open nothing: callgrind counted
/// 1,100 instructions per opening).
fn settle_command(ctx: Ctx, name: ReadStr, kind: ObjectKind, change: Change, deleted: bool) {
    let open = || RedisKeys::reopened(ctx, kind, name);
    let serve = |keys: Option<RedisKeys>| -> bool {
        if wait::total() == 0 {
            return false;
        }
        wait::serve_now(&mut keys.unwrap_or_else(open))
    };
    match change {
        Change::Wrote => {}
        Change::Took {
            reentry,
            watch,
            own_lease,
            hold,
        } => {
            if reentry {
                kind.count(Counted::Reentered);
            } else {
                kind.count(Counted::Took);
                if let Some(h) = hold {
                    observe::took(ctx, name, kind, h.owner, h.exclusive);
                }
            }
            if let Some((session, req)) = watch {
                sessions::track(ctx, session, name.bytes(), req, open);
            }
            if let Some((at, object)) = own_lease {
                wait::upkeep(ctx, &open(), at, object);
            }
        }
        Change::Released { owner, exclusive } => {
            kind.count(Counted::Released);
            if wait::undo_pending() {
                wait::hold_ended(ctx.db(), name.bytes(), Some(owner.bytes()));
            }
            observe::released(ctx, name, owner, exclusive);
            let mut keys = None;
            if sessions::watching() {
                // A deleted key holds nothing: its holds need no reading back.
                let read = (!deleted).then(|| &*keys.insert(open()));
                sessions::released(ctx, name.bytes(), read, owner.bytes());
            }
            serve(keys);
        }
        Change::ForceReleased => {
            kind.count(Counted::ForceReleased);
            if wait::undo_pending() {
                wait::hold_ended(ctx.db(), name.bytes(), None);
            }
            observe::force_released(ctx, name.get());
            let keys = sessions::watching().then(|| {
                let keys = open();
                sessions::after_write(ctx, &keys);
                keys
            });
            serve(keys);
        }
        Change::Renewed { own_lease } => {
            kind.count(Counted::Renewed);
            if serve(None) {
                return;
            }
            if let Some((at, object)) = own_lease {
                wait::upkeep(ctx, &open(), at, object);
            }
        }
        Change::Freed { counted, announce } => {
            if counted {
                kind.count(Counted::Released);
            }
            if !announce {
                serve(None);
                return;
            }
            let mut keys = open();
            if wait::total() > 0 {
                wait::serve_now(&mut keys);
            }
            // Published after the waiters took their share (the object's writes are made: an
            // announcement that cannot be read is not the command's failure).
            if let Ok(d) = objects::of(kind).announce_freed(&keys) {
                let _ = keys.apply(&d, Change::Wrote);
            }
        }
    }
}

//! The after-write path: what follows a command's writes, in one place. A handler parses,
//! decides, applies and replies; `RedisKeys::apply` records here what its write did to the
//! object ([`Change`]: granted to the caller, released by its owner, force-released, lease
//! changed, freed...), and once the handler returns, [`settle`] serves the marked key's queue,
//! tells sessions, re-arms the key's own check and counts. As Redis' `signalKeyAsReady` marks a
//! key and `handleClientsBlockedOnKeys` serves it after the command: no handler knows the
//! queue is there, so no object can forget a step.
//!
//! The serving before a newcomer is decided ([`serve_first`]) lives here too: a newcomer must
//! not overtake a queue whose object was freed by expiry or by an event not served yet.

use crate::core::decision::Decision;
use crate::core::error::CmdError;
use crate::core::stats::{Counted, ObjectKind};
use crate::core::store::Store;
use crate::core::wait::{Req, Upkeep};
use crate::ffi::{Answer, Ctx, RStr};
use crate::keys::RedisKeys;
use crate::{observe, sessions, wait};
use std::cell::RefCell;

/// What a command's write did to its object, beyond the write itself.
pub enum Change {
    /// Nothing that can free the object or end a watched hold (a re-entry's count, a tidy
    /// before deciding, an announcement).
    Wrote,
    /// The caller was granted what it asked for (`reentry`: a hold it had already).
    /// `watch`: the session it named watches the hold for loss. `own_lease`: a hold with a
    /// lease of its own (a read hold), whose end is looked at even if nobody waits.
    /// `hold`: the hold an owner keeps (objects with owners), timed and listed by `observe`.
    Took {
        reentry: bool,
        watch: Option<(u32, Req)>,
        own_lease: Option<(i64, Upkeep)>,
        hold: Option<HoldBy>,
    },
    /// `owner` (an argv string of the command) released its last hold of a side (`exclusive`:
    /// a lock or a write lock; else a read lock): its watched holds there stop being watched,
    /// and the queue is served.
    Released { owner: RStr, exclusive: bool },
    /// Every hold ended at once: watched holds are looked at, the queue is served.
    ForceReleased,
    /// A lease was renewed; a shorter one moves the object's next change earlier, so the
    /// queue is served (re-arming its check). `own_lease`: when nobody waits, the renewed
    /// hold's end is looked at anyway.
    Renewed { own_lease: Option<(i64, Upkeep)> },
    /// Something was added (permits, an open latch, a drained count): the queue is served.
    /// `counted`: it counts as a release. `announce`: the object's news of what is left is
    /// published once the waiters took their share.
    Freed {
        counted: bool,
        announce: Option<Announce>,
    },
}

/// Whose hold a grant is, and which side: `exclusive` for a lock or a write lock, not for a
/// read lock.
#[derive(Clone, Copy)]
pub struct HoldBy {
    pub owner: RStr,
    pub exclusive: bool,
}

/// An object's news of what a write left, decided once the waiters took their share.
pub type Announce = fn(&RedisKeys) -> Result<Decision<'static>, CmdError>;

/// A command's write, waiting for [`settle`].
struct Mark {
    name: RStr,
    kind: ObjectKind,
    change: Change,
    /// The write deleted the key.
    deleted: bool,
}

thread_local! {
    static MARKS: RefCell<Vec<Mark>> = const { RefCell::new(Vec::new()) };
}

/// Note what the running command's write to `name` (a key of the command, alive until it
/// returns) did to its `kind` object. `RedisKeys::apply` calls it for every command write;
/// an object passed without a write (an open latch) is noted the same way. `deleted`: the
/// write deleted the key.
pub fn mark(name: RStr, kind: ObjectKind, change: Change, deleted: bool) {
    if matches!(change, Change::Wrote) {
        return;
    }
    MARKS.with(|m| {
        m.borrow_mut().push(Mark {
            name,
            kind,
            change,
            deleted,
        })
    });
}

/// Serve the command's key before a newcomer is decided, so that it does not overtake anyone
/// (the object may have been freed by expiry, or by an event whose serving is still due).
/// Returns whether anyone the newcomer must queue behind still waits.
///
/// Latch waiters are behind nobody's back: they take nothing (the count reaching 0 lets them
/// all pass), so a semaphore's newcomer is decided as if they were not there. Otherwise a user
/// who may only read a semaphore's key could queue an `RLATCH.AWAIT` on it (its count is a
/// latch's count) and keep every `RSEM.ACQUIRE` from being granted while permits are free.
pub fn serve_first(keys: &mut RedisKeys) -> bool {
    let queued = wait::serve_now(keys);
    queued
        && (keys.object == Some(ObjectKind::Latch)
            || wait::queued_kind(keys.ctx.db(), keys.key_name()) != Some(ObjectKind::Latch))
}

/// Run a command handler, then what its writes call for (installed around every handler, inside
/// the reply's gate: serving writes through the command's keys, as the command did).
pub fn around(
    ctx: Ctx,
    key: Option<RStr>,
    run: &mut dyn FnMut() -> Result<Answer, CmdError>,
) -> Result<Answer, CmdError> {
    crate::keys::gate_reply(ctx, key, &mut || {
        // Marks of a command that panicked are not this command's.
        MARKS.with(|m| m.borrow_mut().clear());
        let answer = run();
        settle(ctx);
        answer
    })
}

/// Everything the running command's writes call for, in the order they were made.
fn settle(ctx: Ctx) {
    loop {
        let Some(mark) = MARKS.with(|m| {
            let mut m = m.borrow_mut();
            (!m.is_empty()).then(|| m.remove(0))
        }) else {
            return;
        };
        after(ctx, mark);
    }
}

/// The steps after one write. The key is opened again only when someone waits on it, or a
/// session watches holds and what they need is not known without it (the uncontended path
/// only counts; a watched lock's grant and its last release open nothing: callgrind counted
/// 1,100 instructions per opening).
fn after(
    ctx: Ctx,
    Mark {
        name,
        kind,
        change,
        deleted,
    }: Mark,
) {
    let open = || RedisKeys::command(ctx, kind, name, &[]);
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
            observe::force_released(ctx, name);
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
            let Some(announce) = announce else {
                serve(None);
                return;
            };
            let mut keys = open();
            if wait::total() > 0 {
                wait::serve_now(&mut keys);
            }
            // Published after the waiters took their share (the object's writes are made: an
            // announcement that cannot be read is not the command's failure).
            if let Ok(d) = announce(&keys) {
                let _ = keys.apply(&d, Change::Wrote);
            }
        }
    }
}

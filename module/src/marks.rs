//! Marks: what a write did to its object, noted where it is made, for the settle step
//! (`settle::settle`) to act on once the command, timer job or event job that made it returns.
//! A command's writes are marked by `RedisKeys::apply`; a background write (a queue due at a
//! lease end or after an event, expired holds tidied, a grant undone) by the job that made it.
//! As Redis' `signalKeyAsReady` marks a key for `handleClientsBlockedOnKeys` to serve: nobody
//! that writes has to remember what follows.

use crate::core::stats::ObjectKind;
use crate::core::wait::{KeyId, Object, Req};
use crate::ffi::ReadStr;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

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
        own_lease: Option<(i64, &'static dyn Object)>,
        hold: Option<HoldBy>,
    },
    /// `owner` (an argv string of the command) released its last hold of a side (`exclusive`:
    /// a lock or a write lock; else a read lock): its watched holds there stop being watched,
    /// and the queue is served.
    Released { owner: ReadStr, exclusive: bool },
    /// Every hold ended at once: watched holds are looked at, the queue is served.
    ForceReleased,
    /// A lease was renewed; a shorter one moves the object's next change earlier, so the
    /// queue is served (re-arming its check). `own_lease`: when nobody waits, the renewed
    /// hold's end is looked at anyway.
    Renewed {
        own_lease: Option<(i64, &'static dyn Object)>,
    },
    /// Something was added (permits, an open latch, a drained count): the queue is served.
    /// `counted`: it counts as a release. `announce`: the object's news of what is left
    /// (`Object::announce_freed`) is published once the waiters took their share.
    Freed { counted: bool, announce: bool },
}

/// Whose hold a grant is, and which side: `exclusive` for a lock or a write lock, not for a
/// read lock.
#[derive(Clone, Copy)]
pub struct HoldBy {
    pub owner: ReadStr,
    pub exclusive: bool,
}

/// What a background write (a timer's or an event's: no command runs) calls for.
pub enum Background {
    /// The key's queue is due to be served: its check at a lease end, an event on its key.
    Due,
    /// Expired holds were tidied away at a lease end: holds sessions watch may have ended.
    Tidied,
    /// A grant whose waiter vanished was undone: `kind`'s, and the hold it gave (its owner and
    /// side), if the object has owners.
    Revoked {
        kind: ObjectKind,
        hold: Option<(Box<[u8]>, bool)>,
    },
}

/// A write waiting to be settled (`settle::settle`).
pub enum Mark {
    /// A command's write to `name` (a key of the command, alive until it returns) of a `kind`
    /// object; `deleted`: the write deleted the key.
    Command {
        name: ReadStr,
        kind: ObjectKind,
        change: Change,
        deleted: bool,
    },
    /// A background write to `id`.
    Background { id: KeyId, what: Background },
}

/// The marks not settled yet, oldest first. A command marks one write, mostly: it is kept in
/// `first`, not queued (a vector's push and front removal cost about 70 instructions of every
/// lock command, callgrind).
struct Marks {
    /// The oldest mark, when it came while none was queued.
    first: Option<Mark>,
    /// The marks after it, in order.
    rest: std::collections::VecDeque<Mark>,
}

/// How many marks are queued, on every thread together (marks are made on Redis' main thread
/// only; the count is at least the running thread's). Every command and job asks for the next
/// mark until there is none and clears them first: with none queued, as after most commands,
/// both answer from this plain atomic, without the thread-local (`__tls_get_addr` and the
/// `RefCell`'s borrow, about 20 instructions each, callgrind).
static PENDING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MARKS: RefCell<Marks> = const {
        RefCell::new(Marks {
            first: None,
            rest: std::collections::VecDeque::new(),
        })
    };
}

/// Note what the running command's write to `name` (a key of the command, alive until it
/// returns) did to its `kind` object. `RedisKeys::apply` calls it for every command write;
/// an object passed without a write (an open latch) is noted the same way. `deleted`: the
/// write deleted the key.
pub fn mark(name: impl Into<ReadStr>, kind: ObjectKind, change: Change, deleted: bool) {
    if matches!(change, Change::Wrote) {
        return;
    }
    push(Mark::Command {
        name: name.into(),
        kind,
        change,
        deleted,
    });
}

/// Note what a background write to `id` calls for, settled once its timer job or event job
/// returns.
pub fn mark_background(id: KeyId, what: Background) {
    push(Mark::Background { id, what });
}

fn push(mark: Mark) {
    MARKS.with(|m| {
        let mut m = m.borrow_mut();
        if m.first.is_none() && m.rest.is_empty() {
            m.first = Some(mark);
        } else {
            m.rest.push_back(mark);
        }
    });
    PENDING.fetch_add(1, Relaxed);
}

/// The oldest mark not settled yet.
#[inline(always)]
pub fn next() -> Option<Mark> {
    if PENDING.load(Relaxed) == 0 {
        return None;
    }
    take_next()
}

fn take_next() -> Option<Mark> {
    let mark = MARKS.with(|m| {
        let mut m = m.borrow_mut();
        m.first.take().or_else(|| m.rest.pop_front())
    });
    if mark.is_some() {
        PENDING.fetch_sub(1, Relaxed);
    }
    mark
}

/// Forget the marks left by a job or command that panicked: they are not the next one's.
#[inline(always)]
pub fn clear() {
    if PENDING.load(Relaxed) != 0 {
        clear_all();
    }
}

fn clear_all() {
    let dropped = MARKS.with(|m| {
        let mut m = m.borrow_mut();
        let n = usize::from(m.first.take().is_some()) + m.rest.len();
        m.rest.clear();
        n
    });
    PENDING.fetch_sub(dropped, Relaxed);
}

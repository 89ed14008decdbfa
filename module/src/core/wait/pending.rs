//! What a queued request must tell the shared waiting mechanism. Each object that waits (lock,
//! read-write lock, semaphore, latch) implements [`Pending`] for its request; the mechanism
//! never looks inside.

use crate::core::decision::{Decision, Reply};
use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::store::Store;
use std::fmt::Debug;

/// Whether the waiter at the head of a queue can be granted now.
#[derive(Debug)]
pub enum Serve<'a> {
    /// Grant it: perform the decision and send its reply to the waiter.
    Grant(Decision<'a>),
    /// Not yet. Waiters behind it wait too (strict FIFO).
    Wait,
    /// It can never be granted (the key now holds something else): end its wait with this
    /// error and serve the next one.
    Fail(CmdError),
}

/// What every queued request tells the waiting mechanism. Objects whose grants an owner holds
/// (locks) add the [`Hold`] facet.
pub trait Pending: Debug {
    fn kind(&self) -> ObjectKind;

    /// Bring the object up to date before its queue is served: holds or permits whose own
    /// lease ended (the read-write lock's expired readers, the semaphore's expired permits).
    /// Most objects have none.
    fn tidy(&self, _store: &dyn Store) -> Result<Tidy, CmdError> {
        Ok(Tidy::default())
    }

    /// Can this waiter be granted now, given the object's keys?
    fn serve(&self, store: &dyn Store) -> Serve<'_>;

    /// When the object's state changes by itself (the earliest lease end): the queue is looked
    /// at again then. `None`: only an event (release, DEL, ...) can change it.
    fn wake_at(&self, store: &dyn Store) -> Option<i64>;

    /// Undo a grant whose reply never reached the waiter (it disconnected, or its session
    /// expired), given the reply it was to receive. `None`: nothing to undo (someone else
    /// changed the object since).
    fn undo(&self, granted: &Reply, store: &dyn Store) -> Option<Decision<'_>>;

    /// Auxiliary keys granting this request would write (a fencing token, a read hold's lease
    /// key): a client may queue only a request whose grant it would be allowed to write.
    fn aux_keys(&self, _store: &dyn Store) -> Vec<Vec<u8>> {
        Vec::new()
    }

    /// How introspection (`*.INFO`'s queue) shows this waiter.
    fn show(&self) -> Reply;

    /// The request as a hold its owner keeps once granted; `None` for objects without owners
    /// (semaphores, latches), which hold nothing a session could lose or a deadlock involve.
    fn holds(&self) -> Option<&dyn Hold> {
        None
    }
}

impl dyn Pending {
    /// The owner whose request this is, if the object has owners.
    pub fn owner(&self) -> Option<&[u8]> {
        self.holds().map(Hold::owner)
    }
}

/// What tidying an object decided: writes made before its queue is served, and news of what
/// they freed, published once the waiters took their share (the semaphore publishes the count
/// its reclaimed permits left). Decided before serving, so `after_serving` must read what it
/// announces when it is made (`Write::PublishCount`).
#[derive(Debug, Default)]
pub struct Tidy {
    pub before: Decision<'static>,
    pub after_serving: Decision<'static>,
}

/// The facet of a request whose grant its owner holds (a lock, a read or write lock): what
/// deadlock detection and sessions' hold watching read.
pub trait Hold {
    /// The owner whose request this is.
    fn owner(&self) -> &[u8];

    /// Whether granting this request excludes every other holder (a lock, a write lock), as
    /// opposed to sharing (a read lock). For deadlock detection, a shared request waits only
    /// for exclusive holds and exclusive requests ahead of it; an exclusive one for all.
    fn exclusive(&self) -> bool {
        true
    }

    /// The owners holding the object now, each with whether its hold is exclusive (deadlock
    /// detection reads it; any request queued on a key may answer for the key).
    fn holders(&self, store: &dyn Store) -> Vec<(Vec<u8>, bool)>;

    /// At most `limit` of [`Hold::holders`], read without reading the others (a read lock
    /// with thousands of readers): deadlock detection gives up on a key with more holders
    /// than it may look at.
    fn holders_upto(&self, store: &dyn Store, limit: usize) -> Vec<(Vec<u8>, bool)> {
        let mut hs = self.holders(store);
        hs.truncate(limit);
        hs
    }

    /// Whether this request's owner holds what it asked for: `None` when not (any more),
    /// else when that hold's lease ends (`None` without one).
    fn held_until(&self, store: &dyn Store) -> Option<Option<i64>>;

    /// [`Hold::held_until`] just after this request was granted at `now`, when the request
    /// alone tells (a lock's hold ends `lease_ms` later); `None`: read the keys. Watching a
    /// lock's hold for its session read it back otherwise: 2,100 of the 12,400 instructions of
    /// an `RLOCK.ACQUIRE ... SESSION s` (callgrind).
    fn granted_until(&self, _now: i64) -> Option<Option<i64>> {
        None
    }
}

/// What the waiting mechanism asks of an object itself rather than of a queued request: how to
/// bring it up to date, and when it next changes by itself. A key whose holds have leases of
/// their own (a read lock's readers) is looked at then although nobody waits for it.
#[derive(Clone, Copy)]
pub struct Upkeep {
    pub tidy: fn(&dyn Store) -> Result<Decision<'static>, CmdError>,
    pub wake_at: fn(&dyn Store) -> Option<i64>,
}

//! What the shared waiting mechanism asks of objects. Each object that waits (lock, read-write
//! lock, semaphore, latch) implements [`Request`] for its queued request and [`Object`] for
//! what it does around its queue; the mechanism never looks inside.

use super::by_value::{Freed, Valued};
use crate::core::args::WaitArgs;
use crate::core::decision::{Decision, Reply};
use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::store::{Store, Target};
use std::fmt::Debug;

/// Whether the waiter at the head of a queue can be granted now.
#[derive(Debug)]
pub enum TryGrant<'a> {
    /// Grant it: perform the decision and send its reply to the waiter.
    Grant(Decision<'a>),
    /// Not yet. Waiters behind it wait too (strict FIFO).
    Wait,
    /// It can never be granted (the key now holds something else): end its wait with this
    /// error and serve the next one.
    Fail(CmdError),
}

/// What an object kind does around its queue, whoever waits or holds: the waiting mechanism,
/// sessions and introspection ask it of the object as a whole, never of one request. One
/// implementation per kind (a unit type in the object's file); [`crate::core::objects::of`]
/// finds it from an [`ObjectKind`].
pub trait Object {
    fn kind(&self) -> ObjectKind;

    /// Bring the object up to date before its queue is served, or when a hold's own lease
    /// ended although nobody waits: holds or permits whose own lease ended (the read-write
    /// lock's expired readers, the semaphore's expired permits), and what to announce once the
    /// waiters took their share. Most objects have none.
    fn tidy(&self, _store: &dyn Store) -> Result<Tidy, CmdError> {
        Ok(Tidy::default())
    }

    /// When the object's state changes by itself (the earliest lease end): its queue, or the
    /// object itself when its holds have leases of their own, is looked at again then.
    /// `None`: only an event (release, DEL, ...) can change it. Unless the object says
    /// otherwise, when its key expires (a lock's lease; a latch's count with a TTL opens then).
    fn wake_at(&self, store: &dyn Store) -> Option<i64> {
        store.expire_at(&Target::Main)
    }

    /// Whether `owner` holds the exclusive (a lock, a write lock) or shared (a read lock) side
    /// of the object whose keys `store` reads: `None` when not (any more), else when that
    /// hold's lease ends (`None` inside: no expiry). Always `None` for objects without owners
    /// (semaphores, latches).
    fn held_until(
        &self,
        _owner: &[u8],
        _exclusive: bool,
        _store: &dyn Store,
    ) -> Option<Option<i64>> {
        None
    }

    /// The objects of this kind that `key` may be an auxiliary key of (a semaphore's
    /// leased-permit set `{name}:timeout`): a change to `key` made outside rlock (Redisson's
    /// scripts lease, release or re-lease permits there) may free them, or move their next
    /// lease end. A lock's fencing counter and a read hold's lease key are written with the
    /// object and change nothing a waiter waits for by themselves: most objects have none.
    fn owners_of_aux(&self, _key: &[u8]) -> Vec<Vec<u8>> {
        Vec::new()
    }

    /// At most `limit` of the owners holding the object now, each with whether its hold is
    /// exclusive, read without reading the others (a read lock with thousands of readers):
    /// what deadlock detection reads, giving up on a key with more holders than it may look
    /// at. None for objects without owners (semaphores, latches).
    fn holders_upto(&self, _store: &dyn Store, _limit: usize) -> Vec<(Vec<u8>, bool)> {
        Vec::new()
    }

    /// For an object whose requests name values ([`Request::values`], a grouped MultiLock):
    /// the values whose holds' leases have ended (their waiters may pass now), or
    /// [`Freed::Gone`] when the object's key is gone. Read when serving its queue, once a lease
    /// may have ended since the last serving read the next lease end ([`Object::wake_at`]).
    fn lapsed_values(&self, _store: &dyn Store) -> Freed {
        Freed::Lapsed(Vec::new())
    }

    /// What the object publishes once its queue took its share of what a command freed (the
    /// semaphore: the count left, as Redisson's release script does); made after serving, so
    /// it reads what is left then. Most objects announce nothing beyond their writes.
    fn announce_freed(&self, _store: &dyn Store) -> Result<Decision<'static>, CmdError> {
        Ok(Decision::default())
    }
}

/// A queued request: each object's own type behind the shared interface. Shared: a session
/// keeps a granted request both to undo the grant and to watch the hold for loss.
pub type Req = std::rc::Rc<dyn Request>;

/// What every queued request tells the waiting mechanism: whether it can be granted, how to
/// undo its grant, the keys it would write, how it shows. What its object does around the
/// queue is the [`Object`]'s; objects whose grants an owner holds (locks) add the [`Hold`]
/// facet.
pub trait Request: Debug {
    /// The kind of object this request waits for, and what that object does around its queue.
    fn object(&self) -> &'static dyn Object;

    /// Can this waiter be granted now, given the object's keys?
    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_>;

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

    /// The values this request takes, when its object hands values out one by one (a grouped
    /// MultiLock): a waiter wanting none of the values of the waiters before it may be granted
    /// past them ([`super::claims`]). `None` (every other object): strict FIFO, a head that
    /// must wait holds everyone behind it.
    fn values(&self) -> Option<&[Box<[u8]>]> {
        None
    }
}

/// The queues index requests that name values by value (`super::by_value`).
impl Valued for Req {
    fn values(&self) -> Option<&[Box<[u8]>]> {
        (**self).values()
    }
}

impl dyn Request {
    /// The owner whose request this is, if the object has owners.
    pub fn owner(&self) -> Option<&[u8]> {
        self.holds().map(Hold::owner)
    }

    pub fn kind(&self) -> ObjectKind {
        self.object().kind()
    }

    /// Whether this request's owner holds what it asked for: `None` when not (any more), or
    /// for a request without an owner; else when that hold's lease ends (`None` inside: no
    /// expiry).
    pub fn held_until(&self, store: &dyn Store) -> Option<Option<i64>> {
        let hold = self.holds()?;
        self.object()
            .held_until(hold.owner(), hold.exclusive(), store)
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

    /// [`Object::held_until`] of this request's owner just after it was granted at `now`, when
    /// the request alone tells (a lock's hold ends `lease_ms` later); `None`: read the keys.
    /// Watching a lock's hold for its session read it back otherwise: 2,100 of the 12,400
    /// instructions of an `RLOCK.ACQUIRE ... SESSION s` (callgrind).
    fn granted_until(&self, _now: i64) -> Option<Option<i64>> {
        None
    }
}

/// What an object's rules decided about an acquire that may wait.
#[derive(Debug)]
pub enum Decided<'a> {
    /// Granted now: the writes; whether the owner re-entered a hold it has; the lease of the
    /// grant's own hold when the object looks at its end even with nobody waiting (a read
    /// hold), else `None`.
    Grant {
        decision: Decision<'a>,
        reentry: bool,
        own_lease_ms: Option<i64>,
    },
    /// Not now: the request waits, or the reply is nil.
    Busy,
    /// Expired holds are in the way: these writes remove them, then the rules decide again.
    TidyFirst(Decision<'static>),
}

/// An acquire that may wait, as parsed: what the acquire pipeline (`commands/acquire.rs`) asks
/// the object, which decides it without the skin in between. One implementation per object
/// whose acquire waits (in the object's file).
pub trait Acquiring<'a> {
    /// The object asked.
    fn object(&self) -> &'static dyn Object;

    /// How long it may wait.
    fn wait(&self) -> &WaitArgs<'a>;

    /// Decide it on the object's keys: `queued`, whether anyone waits before it (a newcomer
    /// never overtakes a queue); `tidied`, whether the expired holds a first decision was
    /// blocked by (`Decided::TidyFirst`) were just removed.
    fn decide<S: Store + ?Sized>(
        &self,
        store: &S,
        queued: bool,
        tidied: bool,
    ) -> Result<Decided<'a>, CmdError>;

    /// The request as it would wait (or as a session watches its hold).
    fn request(&self) -> Req;

    /// `Some(exclusive)` when a grant is a hold its owner keeps (the owner is the command's
    /// argument the pipeline was given); `None` for objects without owners.
    fn hold(&self) -> Option<bool> {
        None
    }
}

//! [`Guard`]: one hold of an object, given back when the guard ends. One type for every object
//! and both call styles ([`LockGuard`], [`AsyncLockGuard`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::{select_all, BoxFuture, FutureExt};

use super::style::{io, Async, Blocking, CallStyle};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::holds::HoldState;
use crate::owner::Owner;
use crate::permit::PermitId;
use crate::transport::Io;

/// What a guard gives back: a hold of an object (an owner's hold of a lock, permits of a
/// semaphore, the locks of a multi-lock), and what it tells about it.
pub(crate) trait Held: Send + Sync + 'static {
    fn ctx(&self) -> &Arc<Context>;
    /// The object's name (its key).
    fn name(&self) -> &str;
    /// Give the hold back, waiting as `io` says.
    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>>;
    /// The owner that holds it (objects with owners).
    fn owner(&self) -> Option<&Owner> {
        None
    }
    /// The fencing token of the acquire (fenced locks).
    fn token(&self) -> Option<u64> {
        None
    }
    /// The permit's id (permits of a permit-expirable semaphore).
    fn permit_id(&self) -> Option<PermitId> {
        None
    }
}

/// What tells whether a guard's hold is lost: the holds it stands for (lost when the watchdog
/// finds one gone or its lease ends), how many of them may be lost before the guard is (a
/// RedLock stands while a quorum does), and an end of validity of its own (a RedLock's).
pub(crate) struct Watch {
    pub(crate) states: Vec<Arc<HoldState>>,
    pub(crate) tolerate: usize,
    pub(crate) valid_until: Option<Instant>,
}

impl Watch {
    /// One hold.
    pub(crate) fn one(state: Arc<HoldState>) -> Watch {
        Watch {
            states: vec![state],
            tolerate: 0,
            valid_until: None,
        }
    }

    /// Nothing to watch: never lost (plain semaphore permits have no lease or owner).
    pub(crate) fn none() -> Watch {
        Watch {
            states: Vec::new(),
            tolerate: 0,
            valid_until: None,
        }
    }

    fn is_lost(&self) -> bool {
        self.valid_until.is_some_and(|t| t <= Instant::now())
            || self.states.iter().filter(|s| s.is_lost()).count() > self.tolerate
    }

    /// The earliest moment a lease or the validity may end the hold.
    fn next_end(&self) -> Option<Instant> {
        self.states
            .iter()
            .filter(|s| !s.is_lost())
            .filter_map(|s| s.lease_end())
            .chain(self.valid_until)
            .min()
    }
}

/// A hold of an object, given back when the guard is dropped (also while a panic unwinds)
/// unless given back before with `unlock`: one owner's hold of a lock or of a side of a
/// read-write lock (re-entry works: each guard is one hold), the locks of a
/// [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock) (all released together),
/// permits of a [`Semaphore`](crate::Semaphore), or one leased permit of a
/// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore). One type for every object.
///
/// - [`LockGuard`] (`Guard<Blocking>`): dropping it releases the hold and waits for the
///   server's answer, blocking the thread for one round trip.
/// - [`AsyncLockGuard`] (`Guard<Async>`): a `Drop` cannot await, so dropping it starts the
///   release in the client's background runtime and the lock frees a moment later; prefer
///   `guard.unlock().await`, which also reports errors.
///
/// A guard remembers its owner (and a permit guard its permit id), so it releases correctly
/// wherever it ends.
///
/// # Lost holds
///
/// [`is_lost`](Guard::is_lost) (and [`lost`](Guard::lost) for async guards) tell whether the
/// hold can no longer be counted on:
///
/// - when the server reports it gone: force-released, deleted, expired, evicted, flushed. The
///   acquire named the client's session, so the server tells the session's listener as soon as
///   the hold ends by anything but its owner's release (within milliseconds). The watchdog's
///   renewal finding it gone does the same, as a backstop. A lost hold is no longer renewed and
///   a `tracing` warning is logged; the lock handle's `is_lost` tells too.
/// - **with an explicit lease**, also once its lease has run out (by this client's clock,
///   counted from the grant as the client sees it: when an attempt that does not wait was
///   sent, when a wait's reply came), as nothing renews it. A leased permit is lost when its
///   lease ends. The server counts from its own grant, up to a one-way network time apart:
///   an `unlock` right after an attempt's hold turned lost may still succeed.
/// - a **multi-lock** is lost when any of its locks is; a **RedLock** when it no longer holds a
///   majority, or when its validity ([`valid_until`](Guard::valid_until)) has passed.
/// - plain semaphore permits are never lost (they have no lease).
#[must_use = "dropping the guard releases the hold at once"]
pub struct Guard<M: CallStyle> {
    held: Arc<dyn Held>,
    watch: Watch,
    armed: bool,
    mode: PhantomData<fn() -> M>,
}

/// A guard for blocking code: of a [`Lock`](crate::Lock), [`FencedLock`](crate::FencedLock), a
/// side of a [`ReadWriteLock`](crate::ReadWriteLock), a [`MultiLock`](crate::MultiLock), a
/// [`Semaphore`](crate::Semaphore)'s permits, ...
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("cache-rebuild");
/// let outer = lock.guard()?;
/// let inner = lock.guard()?;           // re-entry: hold count 2
/// assert_eq!(lock.hold_count()?, 2);
/// drop(inner);
/// assert!(!outer.is_lost());
/// outer.unlock()?;                     // explicit release reports errors
/// # Ok::<(), rlock_client::Error>(())
/// ```
pub type LockGuard = Guard<Blocking>;

/// A guard for async code: of an [`AsyncLock`](crate::AsyncLock),
/// [`AsyncFencedLock`](crate::AsyncFencedLock), a side of an
/// [`AsyncReadWriteLock`](crate::AsyncReadWriteLock), an
/// [`AsyncMultiLock`](crate::AsyncMultiLock), an [`AsyncSemaphore`](crate::AsyncSemaphore)'s
/// permits, ...
///
/// ```no_run
/// # async fn work() {}
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let g = client.async_lock("cache-rebuild").guard().await?;
/// tokio::select! {
///     _ = work() => g.unlock().await?,
///     _ = g.lost() => eprintln!("lock lost, work abandoned"),
/// }
/// # Ok(()) }
/// ```
pub type AsyncLockGuard = Guard<Async>;

impl<M: CallStyle> fmt::Debug for Guard<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.held.name())
            .field("owner", &self.held.owner())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<M: CallStyle> Guard<M> {
    pub(crate) fn new(held: Arc<dyn Held>, watch: Watch) -> Guard<M> {
        Guard {
            held,
            watch,
            armed: true,
            mode: PhantomData,
        }
    }

    /// The object's name (for a multi-lock, its locks' names joined with `,`).
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner that holds it (`None` for semaphore permits, which have no owner).
    pub fn owner(&self) -> Option<&Owner> {
        self.held.owner()
    }

    /// The fencing token of this acquire (guards of a fenced lock only).
    pub fn token(&self) -> Option<u64> {
        self.held.token()
    }

    /// The id of the permit this guard holds (guards of a
    /// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore) only).
    pub fn permit_id(&self) -> Option<PermitId> {
        self.held.permit_id()
    }

    /// Whether the hold can no longer be counted on (see "Lost holds" above).
    pub fn is_lost(&self) -> bool {
        self.watch.is_lost()
    }

    /// When the hold ends, by this client's clock: the end of its lease (counted from the grant
    /// as the client sees it, see "Lost holds" above), or of a [`RedLock`](crate::RedLock)'s
    /// validity. `None` while the watchdog keeps it (or for permits of a plain semaphore, which
    /// never end by themselves).
    pub fn valid_until(&self) -> Option<Instant> {
        self.watch.next_end()
    }

    /// The release this guard owes; it will not release again when dropped.
    fn disarm(&mut self) -> (Arc<dyn Held>, bool) {
        (self.held.clone(), std::mem::take(&mut self.armed))
    }
}

fn warn_release_failed(name: &str, e: &Error) {
    tracing::warn!(name = %name, error = %e, "rlock: guard release failed");
}

impl Guard<Blocking> {
    /// Release this hold now and report the outcome (dropping does the same, silently).
    /// [`Error::NotOwner`] if the hold was lost in the meantime.
    pub fn unlock(mut self) -> Result<()> {
        let (held, _) = self.disarm();
        held.ctx().bg.block_on(held.release(io::<Blocking>()))
    }
}

impl Guard<Async> {
    /// Release this hold and wait for the server's answer ([`Error::NotOwner`] if it was lost
    /// in the meantime).
    pub async fn unlock(mut self) -> Result<()> {
        let (held, _) = self.disarm();
        held.ctx().bg.enter(held.release(io::<Async>())).await
    }

    /// Resolves once the hold is lost (see "Lost holds" above): use it to abort work that must
    /// not go on without the lock.
    pub async fn lost(&self) {
        let bg = &self.held.ctx().bg;
        let mut changes: Vec<_> = self.watch.states.iter().map(|s| s.subscribe()).collect();
        while !self.is_lost() {
            let end = self.watch.next_end();
            let changed = async {
                if changes.is_empty() {
                    return std::future::pending().await;
                }
                let waits = changes.iter_mut().map(|c| c.changed().boxed());
                let (r, i, _) = select_all(waits).await;
                Some(i).filter(|_| r.is_err())
            };
            tokio::select! {
                gone = changed => {
                    // That hold's registry entry let go of it (released): it never becomes lost.
                    if let Some(i) = gone {
                        changes.remove(i);
                    }
                }
                _ = async {
                    match end {
                        Some(t) => bg.sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }
}

impl<M: CallStyle> Drop for Guard<M> {
    fn drop(&mut self) {
        let (held, armed) = self.disarm();
        if !armed {
            return;
        }
        let bg = &held.ctx().bg;
        match io::<M>() {
            Io::Blocking => {
                if let Err(e) = bg.block_on(held.release(Io::Blocking)) {
                    warn_release_failed(held.name(), &e);
                }
            }
            Io::Async => {
                let h = held.clone();
                bg.spawn(async move {
                    if let Err(e) = h.release(Io::Async).await {
                        warn_release_failed(h.name(), &e);
                    }
                });
            }
        }
    }
}

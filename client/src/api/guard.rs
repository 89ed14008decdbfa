//! [`Guard`]: one hold of an object, given back when the guard ends. One type for every object
//! and both modes ([`LockGuard`], [`AsyncLockGuard`]).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::mode::{io, Async, Blocking, Mode};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::holds::HoldState;
use crate::owner::Owner;
use crate::transport::Io;

/// What a guard gives back: one hold of one object (a lock's owner hold today).
pub(crate) trait Held: Send + Sync + 'static {
    fn ctx(&self) -> &Arc<Context>;
    /// The object's name (its key).
    fn name(&self) -> &str;
    /// Give the hold back, waiting as `io` says.
    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>>;
}

/// A hold of an object by one owner, given back when the guard is dropped (also while a panic
/// unwinds) unless given back before with `unlock`. Re-entry works: each guard is one hold.
///
/// - [`LockGuard`] (`Guard<Blocking>`): dropping it releases the hold and waits for the
///   server's answer, blocking the thread for one round trip.
/// - [`AsyncLockGuard`] (`Guard<Async>`): a `Drop` cannot await, so dropping it starts the
///   release in the client's background runtime and the lock frees a moment later; prefer
///   `guard.unlock().await`, which also reports errors.
///
/// A guard remembers its owner, so it releases correctly wherever it ends.
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
///   counted from the grant), as nothing renews it.
#[must_use = "dropping the guard releases the hold at once"]
pub struct Guard<M: Mode> {
    held: Arc<dyn Held>,
    owner: Owner,
    state: Arc<HoldState>,
    token: Option<u64>,
    armed: bool,
    mode: PhantomData<fn() -> M>,
}

/// A held hold of a [`Lock`](crate::Lock) or [`FencedLock`](crate::FencedLock), for blocking
/// code.
///
/// ```no_run
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("cache-rebuild");
/// let outer = lock.guard()?;
/// let inner = lock.guard()?;           // re-entry: hold count 2
/// assert_eq!(lock.hold_count()?, 2);
/// drop(inner);
/// assert!(!outer.is_lost());
/// outer.unlock()?;                     // explicit release reports errors
/// # Ok::<(), rlock::Error>(())
/// ```
pub type LockGuard = Guard<Blocking>;

/// A held hold of an [`AsyncLock`](crate::AsyncLock) or
/// [`AsyncFencedLock`](crate::AsyncFencedLock).
///
/// ```no_run
/// # async fn work() {}
/// # async fn demo() -> rlock::Result<()> {
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let g = client.async_lock("cache-rebuild").guard().await?;
/// tokio::select! {
///     _ = work() => g.unlock().await?,
///     _ = g.lost() => eprintln!("lock lost, work abandoned"),
/// }
/// # Ok(()) }
/// ```
pub type AsyncLockGuard = Guard<Async>;

impl<M: Mode> fmt::Debug for Guard<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.held.name())
            .field("owner", &self.owner)
            .field("lost", &self.state.is_lost())
            .finish()
    }
}

impl<M: Mode> Guard<M> {
    pub(crate) fn new(
        held: Arc<dyn Held>,
        owner: Owner,
        state: Arc<HoldState>,
        token: Option<u64>,
    ) -> Guard<M> {
        Guard {
            held,
            owner,
            state,
            token,
            armed: true,
            mode: PhantomData,
        }
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner that holds it.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// The fencing token of this acquire (guards of a fenced lock only).
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    /// Whether the hold can no longer be counted on (see "Lost holds" above).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
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
        let state = &self.state;
        let bg = &self.held.ctx().bg;
        let mut changes = state.subscribe();
        while !state.is_lost() {
            let lease_end = state.lease_end();
            tokio::select! {
                changed = changes.changed() => {
                    // The registry let go of the hold (released): it never becomes lost.
                    if changed.is_err() && !state.is_lost() {
                        std::future::pending::<()>().await;
                    }
                }
                _ = async {
                    match lease_end {
                        Some(t) => bg.sleep_until(t).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
        }
    }
}

impl<M: Mode> Drop for Guard<M> {
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

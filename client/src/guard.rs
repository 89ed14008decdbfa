//! RAII guards: a held lock that releases itself when dropped.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lock_core::{Grant, LockCore, Op};
use crate::owner::Owner;
use crate::watchdog::HoldState;

/// What both guards hold: one hold of a lock by one owner, released at most once.
struct Hold {
    core: LockCore,
    owner: Owner,
    state: Arc<HoldState>,
    token: Option<u64>,
    armed: bool,
}

impl Hold {
    fn new(core: LockCore, g: Grant) -> Hold {
        let token = core.fence.then_some(g.token());
        Hold {
            core,
            owner: g.owner,
            state: g.state,
            token,
            armed: true,
        }
    }

    fn debug(&self, f: &mut fmt::Formatter<'_>, guard: &str) -> fmt::Result {
        f.debug_struct(guard)
            .field("name", &self.core.name)
            .field("owner", &self.owner)
            .field("lost", &self.state.is_lost())
            .finish()
    }

    /// The release of this hold; dropping the guard will not release it again.
    fn disarm(&mut self) -> impl Op<()> {
        self.armed = false;
        self.core.release(self.owner.clone())
    }

    /// The release a dropped guard still owes, if it owes one.
    fn release_on_drop(&mut self) -> Option<impl Op<()>> {
        self.armed.then(|| self.disarm())
    }
}

fn warn_release_failed(lock: &str, e: &Error) {
    tracing::warn!(lock = %lock, error = %e, "rlock: guard release failed");
}

/// A held hold of a [`Lock`](crate::Lock); dropping it releases that hold (also while a panic
/// unwinds), waiting for the server's answer. Re-entry works: each guard is one hold.
///
/// The guard remembers its owner, so it releases correctly wherever it is dropped. Its drop
/// blocks the thread for one round trip: in async code use [`AsyncLockGuard`] instead.
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
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    hold: Hold,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.hold.debug(f, "LockGuard")
    }
}

impl LockGuard {
    pub(crate) fn new(core: LockCore, g: Grant) -> LockGuard {
        LockGuard {
            hold: Hold::new(core, g),
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// assert_eq!(lock.guard()?.name(), "a");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.hold.core.name
    }

    /// The owner that holds it.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// assert_eq!(lock.guard()?.owner(), &lock.owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The fencing token of this acquire (guards of a [`FencedLock`](crate::FencedLock) only).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// let g = lock.guard()?;
    /// println!("token {}", g.token().unwrap());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.hold.token
    }

    /// Whether the watchdog found the lock gone while this guard held it (it expired, was
    /// deleted, or someone force-released it). A lost lock is no longer renewed; a `tracing`
    /// warning is logged when it happens.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let g = lock.guard()?;
    /// for item in 0..100 {
    ///     if g.is_lost() {
    ///         break; // stop: someone else may hold the lock now
    ///     }
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.state.is_lost()
    }

    /// Release this hold now and report the outcome (dropping does the same, silently).
    /// [`Error::NotOwner`](crate::Error::NotOwner) if the lock was lost in the meantime.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let g = lock.guard()?;
    /// g.unlock()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn unlock(mut self) -> Result<()> {
        let release = self.hold.disarm();
        self.hold.core.block_on(release)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(release) = self.hold.release_on_drop() {
            if let Err(e) = self.hold.core.block_on(release) {
                warn_release_failed(&self.hold.core.name, &e);
            }
        }
    }
}

/// A held hold of an [`AsyncLock`](crate::AsyncLock). Prefer [`AsyncLockGuard::unlock`]:
/// dropping the guard starts the release in the background (a `Drop` cannot wait), so the
/// lock frees a moment later rather than before the next statement.
///
/// ```no_run
/// # async fn demo() -> rlock::Result<()> {
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.async_lock("cache-rebuild");
/// let g = lock.guard().await?;
/// // ... critical section ...
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct AsyncLockGuard {
    hold: Hold,
}

impl fmt::Debug for AsyncLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.hold.debug(f, "AsyncLockGuard")
    }
}

impl AsyncLockGuard {
    pub(crate) fn new(core: LockCore, g: Grant) -> AsyncLockGuard {
        AsyncLockGuard {
            hold: Hold::new(core, g),
        }
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// println!("holding {}", g.name());
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.hold.core.name
    }

    /// The owner that holds it.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// println!("held by {}", g.owner());
    /// # Ok(()) }
    /// ```
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The fencing token of this acquire (fenced locks only).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// let token = g.token().unwrap();
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Option<u64> {
        self.hold.token
    }

    /// Whether the watchdog found the lock gone while this guard held it.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// assert!(!g.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.state.is_lost()
    }

    /// Resolves when the watchdog finds the lock gone; use it to abort work that must not go
    /// on without the lock.
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// tokio::select! {
    ///     _ = work() => g.unlock().await?,
    ///     _ = g.lost() => eprintln!("lock lost, work abandoned"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let mut rx = self.hold.state.subscribe();
        let _ = rx.wait_for(|lost| *lost).await;
        // If the sender is gone the hold is gone too; either way, only return once lost.
        if !self.hold.state.is_lost() {
            std::future::pending::<()>().await;
        }
    }

    /// Release this hold and wait for the server's answer.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.guard().await?.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        let release = self.hold.disarm();
        self.hold.core.run(release).await
    }
}

impl Drop for AsyncLockGuard {
    fn drop(&mut self) {
        if let Some(release) = self.hold.release_on_drop() {
            let name = self.hold.core.name.clone();
            self.hold.core.inner().handle.spawn(async move {
                if let Err(e) = release.await {
                    warn_release_failed(&name, &e);
                }
            });
        }
    }
}

//! RAII guards: a held lock that releases itself when dropped.

use std::sync::Arc;

use crate::error::Result;
use crate::lock::{Grant, LockCore};
use crate::owner::Owner;
use crate::watchdog::HoldState;

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
    core: LockCore,
    owner: Owner,
    state: Arc<HoldState>,
    token: Option<u64>,
    armed: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.core.name)
            .field("owner", &self.owner)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(core: LockCore, g: Grant) -> LockGuard {
        let token = core.fence.then_some(g.value.max(0) as u64);
        LockGuard {
            core,
            owner: g.owner,
            state: g.state,
            token,
            armed: true,
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
        &self.core.name
    }

    /// The owner that holds it.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// assert_eq!(lock.guard()?.owner(), &lock.owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn owner(&self) -> &Owner {
        &self.owner
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
        self.token
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
        self.state.is_lost()
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
        self.armed = false;
        self.release()
    }

    fn release(&self) -> Result<()> {
        let inner = self.core.inner().clone();
        let name = self.core.name.clone();
        let owner = self.owner.clone();
        self.core
            .inner()
            .block_on(async move { inner.release(&name, &owner).await.map(|_| ()) })
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = self.release() {
                tracing::warn!(lock = %self.core.name, error = %e, "rlock: guard release failed");
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
    core: LockCore,
    owner: Owner,
    state: Arc<HoldState>,
    token: Option<u64>,
    armed: bool,
}

impl std::fmt::Debug for AsyncLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncLockGuard")
            .field("name", &self.core.name)
            .field("owner", &self.owner)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl AsyncLockGuard {
    pub(crate) fn new(core: LockCore, g: Grant) -> AsyncLockGuard {
        let token = core.fence.then_some(g.value.max(0) as u64);
        AsyncLockGuard {
            core,
            owner: g.owner,
            state: g.state,
            token,
            armed: true,
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
        &self.core.name
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
        &self.owner
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
        self.token
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
        self.state.is_lost()
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
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|lost| *lost).await;
        // If the sender is gone the hold is gone too; either way, only return once lost.
        if !self.state.is_lost() {
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
        self.armed = false;
        let inner = self.core.inner().clone();
        let name = self.core.name.clone();
        let owner = self.owner.clone();
        self.core
            .inner()
            .run(async move { inner.release(&name, &owner).await.map(|_| ()) })
            .await
    }
}

impl Drop for AsyncLockGuard {
    fn drop(&mut self) {
        if self.armed {
            let inner = self.core.inner().clone();
            let name = self.core.name.clone();
            let owner = self.owner.clone();
            self.core.inner().handle.spawn(async move {
                if let Err(e) = inner.release(&name, &owner).await {
                    tracing::warn!(lock = %name, error = %e, "rlock: guard release failed");
                }
            });
        }
    }
}

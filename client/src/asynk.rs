//! The async API: [`AsyncLock`] and [`AsyncFencedLock`] (Redisson's `RLockAsync`).
//!
//! Owners here are tasks, not threads (see the [`owner`](crate::Owner) notes): a call's owner is
//! the calling tokio task (`UUID:1000000000000+task-id`), or the explicit [`Owner`] given to
//! [`AsyncLock::with_owner`]. A task that locks must unlock from the same task unless it uses an
//! explicit owner; an [`AsyncLockGuard`] remembers its owner and may be released anywhere.
//!
//! Every acquire future is cancellation-safe: dropping it (e.g. in `tokio::select!` or
//! `tokio::time::timeout`) withdraws the waiter from the server's queue, and if the server
//! granted the lock at the same moment, the lock is released at once.

use std::time::Duration;

use crate::error::Result;
use crate::guard::AsyncLockGuard;
use crate::lock::Ttl;
use crate::lock_core::{forever, Grant, LockCore};
use crate::ops::Wait;
use crate::owner::{Owner, OwnerPolicy};

/// A reentrant distributed lock for async code (Redisson's `RLockAsync`).
///
/// ```no_run
/// # async fn demo() -> rlock::Result<()> {
/// use std::time::Duration;
///
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.async_lock("invoices");
/// lock.lock().await?;
/// // ... critical section ...
/// lock.unlock().await?;
///
/// // Cancellation-safe: a timeout around `lock()` leaves nothing behind on the server.
/// let got = tokio::time::timeout(Duration::from_millis(100), lock.lock()).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncLock {
    pub(crate) core: LockCore,
}

impl std::fmt::Debug for AsyncLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncLock")
            .field("name", &self.core.name)
            .finish_non_exhaustive()
    }
}

impl AsyncLock {
    /// The lock's name (its Redis key).
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.async_lock("a").name(), "a");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// This handle acting as `owner` in every task (Redisson's `lockAsync(threadId)`).
    ///
    /// ```no_run
    /// # async fn demo() -> rlock::Result<()> {
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_lock("a").with_owner(client.new_owner());
    /// lock.lock().await?;
    /// let l2 = lock.clone();
    /// tokio::spawn(async move { l2.unlock().await }).await.unwrap()?;
    /// # Ok(()) }
    /// ```
    pub fn with_owner(mut self, owner: Owner) -> AsyncLock {
        self.core.policy = OwnerPolicy::Fixed(owner);
        self
    }

    /// The owner this handle acts as in the calling task.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) {
    /// println!("I am {}", lock.owner());
    /// # }
    /// ```
    pub fn owner(&self) -> Owner {
        self.core.owner()
    }

    /// Wait until acquired, then hold until unlocked (watchdog mode).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock().await?;
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock(&self) -> Result<()> {
        self.core
            .acquire_async(None, Wait::Forever)
            .await
            .map(|_| ())
    }

    /// Wait until acquired; the lock frees by itself after `lease`.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock_with_lease(std::time::Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<()> {
        self.core
            .acquire_async(Some(lease), Wait::Forever)
            .await
            .map(|_| ())
    }

    /// One attempt: `true` if acquired (watchdog mode).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// if lock.try_lock().await? {
    ///     lock.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lock(&self) -> Result<bool> {
        Ok(self.core.acquire_async(None, Wait::No).await?.is_some())
    }

    /// Wait at most `wait`: `true` if acquired (watchdog mode).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let got = lock.try_lock_for(std::time::Duration::from_millis(200)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_for(&self, wait: Duration) -> Result<bool> {
        Ok(self
            .core
            .acquire_async(None, Wait::For(wait))
            .await?
            .is_some())
    }

    /// Wait at most `wait`, hold for at most `lease`: `true` if acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// use std::time::Duration;
    /// let got = lock.try_lock_with(Duration::from_secs(1), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_with(&self, wait: Duration, lease: Duration) -> Result<bool> {
        Ok(self
            .core
            .acquire_async(Some(lease), Wait::For(wait))
            .await?
            .is_some())
    }

    /// Release one hold of the calling task's owner ([`Error::NotOwner`](crate::Error::NotOwner)
    /// if it holds none).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock().await?;
    /// lock.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn unlock(&self) -> Result<()> {
        self.core.run(self.core.release(self.owner())).await
    }

    /// Delete the lock whoever holds it: `true` if it was held.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let was_held = lock.force_unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        self.core.run(self.core.force_release()).await
    }

    /// Whether anyone holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// println!("{}", lock.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.core.run(self.core.is_locked()).await
    }

    /// Whether the calling task's owner holds the lock (Redisson's `isHeldByCurrentThread`).
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock().await?;
    /// assert!(lock.is_held_by_current_task().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        self.is_held_by(&self.owner()).await
    }

    /// Whether `owner` holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock, owner: rlock::Owner) -> rlock::Result<()> {
    /// println!("{}", lock.is_held_by(&owner).await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        self.core.run(self.core.is_held_by(owner.clone())).await
    }

    /// How many times the calling task's owner holds the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock().await?;
    /// lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 2);
    /// # Ok(()) }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.core.run(self.core.hold_count(self.owner())).await
    }

    /// Time left on the lock's lease.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// println!("{:?}", lock.remain_time_to_live().await?);
    /// # Ok(()) }
    /// ```
    pub async fn remain_time_to_live(&self) -> Result<Ttl> {
        self.core.run(self.core.ttl()).await
    }

    /// Whether the watchdog found the calling owner's hold gone since it was acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// lock.lock().await?;
    /// assert!(!lock.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.core.is_lost_for(&self.owner())
    }

    /// Acquire per `lease` and `wait`, as a guard.
    async fn guard_when(
        &self,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<AsyncLockGuard>> {
        let got = self.core.acquire_async(lease, wait).await?;
        Ok(got.map(|g| AsyncLockGuard::new(self.core.clone(), g)))
    }

    /// [`AsyncLock::lock`], returning a guard.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard().await?;
    /// g.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub async fn guard(&self) -> Result<AsyncLockGuard> {
        self.guard_when(None, Wait::Forever).await.map(forever)
    }

    /// [`AsyncLock::lock_with_lease`], returning a guard.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.guard_with_lease(std::time::Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn guard_with_lease(&self, lease: Duration) -> Result<AsyncLockGuard> {
        self.guard_when(Some(lease), Wait::Forever)
            .await
            .map(forever)
    }

    /// [`AsyncLock::try_lock`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// if let Some(g) = lock.try_guard().await? {
    ///     g.unlock().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_guard(&self) -> Result<Option<AsyncLockGuard>> {
        self.guard_when(None, Wait::No).await
    }

    /// [`AsyncLock::try_lock_for`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// let g = lock.try_guard_for(std::time::Duration::from_secs(1)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_guard_for(&self, wait: Duration) -> Result<Option<AsyncLockGuard>> {
        self.guard_when(None, Wait::For(wait)).await
    }

    /// [`AsyncLock::try_lock_with`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncLock) -> rlock::Result<()> {
    /// use std::time::Duration;
    /// let g = lock.try_guard_with(Duration::from_secs(1), Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_guard_with(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<AsyncLockGuard>> {
        self.guard_when(Some(lease), Wait::For(wait)).await
    }
}

/// The async form of [`FencedLock`](crate::FencedLock); plain [`AsyncLock`] methods are reached
/// through `Deref` and take tokens too.
///
/// ```no_run
/// # async fn demo() -> rlock::Result<()> {
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.async_fenced_lock("ledger");
/// let token = lock.lock_and_get_token().await?;
/// lock.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncFencedLock {
    pub(crate) lock: AsyncLock,
}

impl std::ops::Deref for AsyncFencedLock {
    type Target = AsyncLock;

    fn deref(&self) -> &AsyncLock {
        &self.lock
    }
}

impl AsyncFencedLock {
    /// Acquire per `lease` and `wait`, giving the fencing token.
    async fn token_when(&self, lease: Option<Duration>, wait: Wait) -> Result<Option<u64>> {
        let got = self.core.acquire_async(lease, wait).await?;
        Ok(got.as_ref().map(Grant::token))
    }

    /// This handle acting as `owner` in every task.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_fenced_lock("ledger").with_owner(client.new_owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn with_owner(self, owner: Owner) -> AsyncFencedLock {
        AsyncFencedLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// Wait for the lock (watchdog mode) and return its token.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let token = lock.lock_and_get_token().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_and_get_token(&self) -> Result<u64> {
        self.token_when(None, Wait::Forever).await.map(forever)
    }

    /// Wait for the lock, hold it for at most `lease`, and return its token.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let token = lock.lock_and_get_token_with_lease(std::time::Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn lock_and_get_token_with_lease(&self, lease: Duration) -> Result<u64> {
        self.token_when(Some(lease), Wait::Forever)
            .await
            .map(forever)
    }

    /// One attempt: the token if acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let token = lock.try_lock_and_get_token().await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_and_get_token(&self) -> Result<Option<u64>> {
        self.token_when(None, Wait::No).await
    }

    /// Wait at most `wait`: the token if acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let token = lock.try_lock_and_get_token_for(std::time::Duration::from_secs(1)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_and_get_token_for(&self, wait: Duration) -> Result<Option<u64>> {
        self.token_when(None, Wait::For(wait)).await
    }

    /// Wait at most `wait`, hold for at most `lease`: the token if acquired.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// use std::time::Duration;
    /// let t = lock.try_lock_and_get_token_with(Duration::from_secs(1), Duration::from_secs(9)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn try_lock_and_get_token_with(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<u64>> {
        self.token_when(Some(lease), Wait::For(wait)).await
    }

    /// The last token handed out for this name.
    ///
    /// ```no_run
    /// # async fn demo(lock: rlock::AsyncFencedLock) -> rlock::Result<()> {
    /// let last = lock.token().await?;
    /// # Ok(()) }
    /// ```
    pub async fn token(&self) -> Result<Option<u64>> {
        self.core.run(self.core.token()).await
    }
}

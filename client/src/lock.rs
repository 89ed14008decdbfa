//! The blocking API: [`Lock`] (Redisson `RLock`) and [`FencedLock`] (Redisson `RFencedLock`).

use std::time::Duration;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock_core::{forever, Grant, LockCore};
use crate::ops::Wait;
use crate::owner::{Owner, OwnerPolicy};

/// Time left on a lock's lease, as `PTTL` reports it.
///
/// ```
/// use rlock::Ttl;
/// use std::time::Duration;
///
/// assert_eq!(Ttl::from_pttl(-2), Ttl::NotLocked);
/// assert_eq!(Ttl::from_pttl(1500).remaining(), Some(Duration::from_millis(1500)));
/// assert_eq!(Ttl::NoExpiry.as_millis(), -1); // Redisson's remainTimeToLive value
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// The lock does not exist (Redisson: `-2`).
    NotLocked,
    /// The lock exists without an expiry (Redisson: `-1`); only foreign writers do that.
    NoExpiry,
    /// The lock expires after this long.
    Expires(Duration),
}

impl Ttl {
    /// Interpret a `PTTL` reply.
    ///
    /// ```
    /// assert_eq!(rlock::Ttl::from_pttl(-1), rlock::Ttl::NoExpiry);
    /// ```
    pub fn from_pttl(ms: i64) -> Ttl {
        match ms {
            -1 => Ttl::NoExpiry,
            ms if ms < 0 => Ttl::NotLocked,
            ms => Ttl::Expires(Duration::from_millis(ms as u64)),
        }
    }

    /// The time left, if the lock exists and expires.
    ///
    /// ```
    /// assert_eq!(rlock::Ttl::NotLocked.remaining(), None);
    /// ```
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Ttl::Expires(d) => Some(*d),
            _ => None,
        }
    }

    /// Redisson's `remainTimeToLive()` value: milliseconds, `-2` absent, `-1` no expiry.
    ///
    /// ```
    /// assert_eq!(rlock::Ttl::from_pttl(250).as_millis(), 250);
    /// ```
    pub fn as_millis(&self) -> i64 {
        match self {
            Ttl::NotLocked => -2,
            Ttl::NoExpiry => -1,
            Ttl::Expires(d) => d.as_millis() as i64,
        }
    }
}

/// A reentrant distributed lock for blocking code: Redisson's `RLock`.
///
/// The owner of each call is the calling thread (`UUID:thread-number`), so a thread that holds
/// the lock may take it again (the hold count goes up) and must unlock as often as it locked.
/// Waiting happens on the server: a waiting thread is parked in the server's first-come,
/// first-served queue for this name and gets the lock handed over directly, with no polling.
///
/// Without a lease the lock is held until unlocked: the client's watchdog keeps it alive (see
/// [`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)), and if the
/// process dies the lock frees after that timeout. With a lease it frees when the lease ends.
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("reports");
/// if lock.try_lock_with(Duration::from_secs(1), Duration::from_secs(10))? {
///     // held for at most 10 s
///     lock.unlock()?;
/// }
/// # Ok::<(), rlock::Error>(())
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) core: LockCore,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.core.name)
            .finish_non_exhaustive()
    }
}

impl Lock {
    /// The lock's name (its Redis key).
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.lock("a").name(), "a");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// This handle with a fixed owner instead of the calling thread (for handing a held lock
    /// to another thread, or acting as a known owner).
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let owner = client.new_owner();
    /// let lock = client.lock("batch").with_owner(owner);
    /// lock.lock()?;
    /// let l2 = lock.clone();
    /// std::thread::spawn(move || l2.unlock()).join().unwrap()?; // same owner, other thread
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn with_owner(mut self, owner: Owner) -> Lock {
        self.core.policy = OwnerPolicy::Fixed(owner);
        self
    }

    /// The owner this handle acts as on the calling thread.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.lock("a").owner(), client.current_thread_owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn owner(&self) -> Owner {
        self.core.owner()
    }

    /// Wait until the lock is acquired, then hold it until unlocked (watchdog mode).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock()?;
    /// lock.unlock()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn lock(&self) -> Result<()> {
        self.core.acquire_sync(None, Wait::Forever).map(|_| ())
    }

    /// Wait until the lock is acquired; it frees by itself after `lease` (no watchdog).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock_with_lease(Duration::from_secs(5))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn lock_with_lease(&self, lease: Duration) -> Result<()> {
        self.core
            .acquire_sync(Some(lease), Wait::Forever)
            .map(|_| ())
    }

    /// One attempt, no waiting: `true` if acquired (watchdog mode).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// if lock.try_lock()? {
    ///     lock.unlock()?;
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock(&self) -> Result<bool> {
        Ok(self.core.acquire_sync(None, Wait::No)?.is_some())
    }

    /// Wait at most `wait` for the lock: `true` if acquired (watchdog mode).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// if lock.try_lock_for(Duration::from_millis(500))? {
    ///     lock.unlock()?;
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock_for(&self, wait: Duration) -> Result<bool> {
        Ok(self.core.acquire_sync(None, Wait::For(wait))?.is_some())
    }

    /// Wait at most `wait` for the lock, then hold it for at most `lease`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let got = lock.try_lock_with(Duration::from_secs(1), Duration::from_secs(30))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock_with(&self, wait: Duration, lease: Duration) -> Result<bool> {
        Ok(self
            .core
            .acquire_sync(Some(lease), Wait::For(wait))?
            .is_some())
    }

    /// Release one hold. At the last one the lock frees and the next waiter gets it; the
    /// watchdog stops renewing it at once. [`Error::NotOwner`](crate::Error::NotOwner) when this thread does not hold
    /// it (Redisson's `IllegalMonitorStateException`).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock()?;
    /// lock.unlock()?;
    /// assert!(matches!(lock.unlock(), Err(rlock::Error::NotOwner { .. })));
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn unlock(&self) -> Result<()> {
        self.core.block_on(self.core.release(self.owner()))
    }

    /// Delete the lock whoever holds it; the next waiter gets it. `true` if it was held.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let was_held = lock.force_unlock()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.core.block_on(self.core.force_release())
    }

    /// Whether anyone holds the lock (`EXISTS`).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// println!("locked: {}", lock.is_locked()?);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.core.block_on(self.core.is_locked())
    }

    /// Whether the calling thread holds the lock (`HEXISTS`).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock()?;
    /// assert!(lock.is_held_by_current_thread()?);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.is_held_by(&self.owner())
    }

    /// Whether `owner` holds the lock.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.lock("a");
    /// assert!(!lock.is_held_by(&client.new_owner())?);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        self.core.block_on(self.core.is_held_by(owner.clone()))
    }

    /// How many times the calling thread holds the lock (0 if it does not).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock()?;
    /// lock.lock()?;
    /// assert_eq!(lock.hold_count()?, 2);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.core.block_on(self.core.hold_count(self.owner()))
    }

    /// Time left on the lock's lease (`PTTL`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock_with_lease(Duration::from_secs(10))?;
    /// assert!(lock.remain_time_to_live()?.remaining().unwrap() <= Duration::from_secs(10));
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn remain_time_to_live(&self) -> Result<Ttl> {
        self.core.block_on(self.core.ttl())
    }

    /// Whether the watchdog found this thread's hold gone (expired, deleted or force-released
    /// by someone else) since it was acquired. Cleared by the next lock or unlock.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// lock.lock()?;
    /// if lock.is_lost() {
    ///     // stop writing: someone else may hold the lock now
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn is_lost(&self) -> bool {
        self.core.is_lost_for(&self.owner())
    }

    /// Acquire per `lease` and `wait`, as a guard.
    fn guard_when(&self, lease: Option<Duration>, wait: Wait) -> Result<Option<LockGuard>> {
        let got = self.core.acquire_sync(lease, wait)?;
        Ok(got.map(|g| LockGuard::new(self.core.clone(), g)))
    }

    /// [`Lock::lock`], returning a guard that unlocks when dropped (also while a panic
    /// unwinds).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// {
    ///     let _guard = lock.guard()?;
    ///     // critical section
    /// } // unlocked here
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn guard(&self) -> Result<LockGuard> {
        self.guard_when(None, Wait::Forever).map(forever)
    }

    /// [`Lock::lock_with_lease`], returning a guard.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let _guard = lock.guard_with_lease(Duration::from_secs(10))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn guard_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.guard_when(Some(lease), Wait::Forever).map(forever)
    }

    /// [`Lock::try_lock`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// if let Some(_guard) = lock.try_guard()? {
    ///     // critical section
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_guard(&self) -> Result<Option<LockGuard>> {
        self.guard_when(None, Wait::No)
    }

    /// [`Lock::try_lock_for`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// match lock.try_guard_for(Duration::from_secs(2))? {
    ///     Some(_guard) => { /* critical section */ }
    ///     None => eprintln!("busy"),
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_guard_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.guard_when(None, Wait::For(wait))
    }

    /// [`Lock::try_lock_with`], returning a guard when acquired.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.lock("a");
    /// let g = lock.try_guard_with(Duration::from_secs(2), Duration::from_secs(30))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_guard_with(&self, wait: Duration, lease: Duration) -> Result<Option<LockGuard>> {
        self.guard_when(Some(lease), Wait::For(wait))
    }
}

/// A [`Lock`] that hands out fencing tokens: Redisson's `RFencedLock`.
///
/// Every successful acquire, re-entry included and including the plain [`Lock`] methods
/// reachable through `Deref`, increments the token counter `redisson_lock_token:{name}`; a token
/// is greater than every token handed out before for this name. Give the token to the resource
/// you protect so it can refuse a write from a holder whose lock already expired.
///
/// Differences from Redisson, both deliberate fixes: the lease variant honours the lease, and
/// [`FencedLock::try_lock_and_get_token`] makes one attempt (Redisson's waits forever).
///
/// ```no_run
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.fenced_lock("ledger");
/// let t1 = lock.lock_and_get_token()?;
/// lock.unlock()?;
/// let t2 = lock.lock_and_get_token()?;
/// assert!(t2 > t1);
/// lock.unlock()?;
/// # Ok::<(), rlock::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct FencedLock {
    pub(crate) lock: Lock,
}

impl std::ops::Deref for FencedLock {
    type Target = Lock;

    fn deref(&self) -> &Lock {
        &self.lock
    }
}

impl FencedLock {
    /// Acquire per `lease` and `wait`, giving the fencing token.
    fn token_when(&self, lease: Option<Duration>, wait: Wait) -> Result<Option<u64>> {
        Ok(self
            .core
            .acquire_sync(lease, wait)?
            .as_ref()
            .map(Grant::token))
    }

    /// This handle with a fixed owner (see [`Lock::with_owner`]).
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.fenced_lock("ledger").with_owner(client.new_owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn with_owner(self, owner: Owner) -> FencedLock {
        FencedLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// Wait for the lock (watchdog mode) and return its fencing token.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// let token = lock.lock_and_get_token()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn lock_and_get_token(&self) -> Result<u64> {
        self.token_when(None, Wait::Forever).map(forever)
    }

    /// Wait for the lock, hold it for at most `lease`, and return its fencing token.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// let token = lock.lock_and_get_token_with_lease(Duration::from_secs(10))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn lock_and_get_token_with_lease(&self, lease: Duration) -> Result<u64> {
        self.token_when(Some(lease), Wait::Forever).map(forever)
    }

    /// One attempt: the token if acquired.
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// if let Some(token) = lock.try_lock_and_get_token()? {
    ///     lock.unlock()?;
    /// }
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock_and_get_token(&self) -> Result<Option<u64>> {
        self.token_when(None, Wait::No)
    }

    /// Wait at most `wait`: the token if acquired.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// let token = lock.try_lock_and_get_token_for(Duration::from_secs(1))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock_and_get_token_for(&self, wait: Duration) -> Result<Option<u64>> {
        self.token_when(None, Wait::For(wait))
    }

    /// Wait at most `wait`, hold for at most `lease`: the token if acquired.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// let token = lock.try_lock_and_get_token_with(Duration::from_secs(1), Duration::from_secs(10))?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn try_lock_and_get_token_with(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<u64>> {
        self.token_when(Some(lease), Wait::For(wait))
    }

    /// The last token handed out for this name (`None` before the first fenced acquire).
    ///
    /// ```no_run
    /// # let lock = rlock::Client::open("redis://127.0.0.1:6390/")?.fenced_lock("f");
    /// lock.lock()?; // plain lock() also takes a token
    /// let token = lock.token()?.unwrap();
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn token(&self) -> Result<Option<u64>> {
        self.core.block_on(self.core.token())
    }
}

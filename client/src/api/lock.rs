//! The lock handles: [`Lock`] and [`AsyncLock`] (Redisson's `RLock`, `RLockAsync`),
//! [`FencedLock`] and [`AsyncFencedLock`] (`RFencedLock`), each pair written once.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::forever;
use super::guard::{Guard, Held, Watch};
use super::style::CallStyle;
use super::ttl::Ttl;
use crate::context::Context;
use crate::error::Result;
use crate::ops::lock::{self as op, Flavor, Granted, Target};
use crate::owner::{Owner, OwnerPolicy};
use crate::transport::Io;
use crate::wait::Wait;

/// What every lock handle is: client, name, which lock (plain, fenced, a side of a
/// read-write lock), whose calls it makes.
#[derive(Clone)]
pub(crate) struct LockCore {
    pub(crate) ctx: Arc<Context>,
    pub(crate) name: Arc<str>,
    pub(crate) flavor: Flavor,
    pub(crate) policy: OwnerPolicy,
    /// Shared by the handle's clones: while one lives, a task's hold taken through it is not
    /// an orphan (see "Orphaned holds" in the crate docs).
    pub(crate) anchor: Arc<()>,
}

impl LockCore {
    pub(crate) fn target(&self, io: Io) -> Target<'_> {
        Target {
            ctx: &self.ctx,
            io,
            name: &self.name,
            flavor: self.flavor,
            policy: &self.policy,
            anchor: &self.anchor,
        }
    }

    pub(crate) fn owner(&self) -> Owner {
        self.policy.resolve(&self.ctx.id)
    }

    /// Acquire for the calling owner per `lease` and `wait`: whether acquired.
    async fn took(&self, io: Io, lease: Option<Duration>, wait: Wait) -> Result<bool> {
        Ok(self.acquire(io, lease, wait).await?.is_some())
    }

    /// Acquire for the calling owner per `lease` and `wait`.
    pub(crate) async fn acquire(
        &self,
        io: Io,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<(Owner, Granted)>> {
        let owner = self.owner();
        let got = op::acquire(self.target(io), &owner, lease, wait).await?;
        Ok(got.map(|g| (owner, g)))
    }

    /// Acquire, as a guard.
    pub(crate) async fn guard<M: CallStyle>(
        &self,
        io: Io,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Guard<M>>> {
        let Some((owner, g)) = self.acquire(io, lease, wait).await? else {
            return Ok(None);
        };
        let held = Arc::new(LockHeld {
            core: self.clone(),
            owner,
            token: self.flavor.fenced().then_some(g.value.max(0) as u64),
        });
        Ok(Some(Guard::new(held, Watch::one(g.state))))
    }

    /// Acquire, giving the fencing token.
    async fn token_when(&self, io: Io, lease: Option<Duration>, wait: Wait) -> Result<Option<u64>> {
        let got = self.acquire(io, lease, wait).await?;
        Ok(got.map(|(_, g)| g.value.max(0) as u64))
    }

    fn is_lost(&self) -> bool {
        op::is_lost(self.target(Io::Async), &self.owner())
    }
}

/// One owner's hold of a lock, as a guard gives it back.
struct LockHeld {
    core: LockCore,
    owner: Owner,
    token: Option<u64>,
}

impl Held for LockHeld {
    fn ctx(&self) -> &Arc<Context> {
        &self.core.ctx
    }

    fn name(&self) -> &str {
        &self.core.name
    }

    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            op::release(self.core.target(io), &self.owner).await?;
            Ok(())
        })
    }

    fn owner(&self) -> Option<&Owner> {
        Some(&self.owner)
    }

    fn token(&self) -> Option<u64> {
        self.token
    }
}

/// A reentrant distributed lock for blocking code: Redisson's `RLock`. Also each side of a
/// [`ReadWriteLock`](crate::ReadWriteLock) (Redisson's `readLock()` and `writeLock()` are
/// `RLock`s too).
///
/// The owner of each call is the calling thread (`UUID:thread-number`), so a thread that holds
/// the lock may take it again (the hold count goes up) and must unlock as often as it locked.
/// Waiting happens on the server: a waiting thread's request is queued in the server's
/// first-come, first-served queue for this name and the lock is handed over directly, with no
/// polling; the thread sleeps until the client's session listener hands it the grant. Each call
/// runs on the calling thread, over a connection of its own for the call's round trip (a wait
/// holds none).
///
/// Without a lease the lock is held until unlocked: the client's watchdog keeps it alive (see
/// [`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)), and if the
/// process dies the lock frees after that timeout. With a lease it frees when the lease ends
/// (a lease shorter than a millisecond counts as 1 ms; a zero lease is refused).
///
/// The guard methods return a [`LockGuard`](crate::LockGuard) (`Guard<Blocking>`, shown as
/// `Guard<M>` below); [`AsyncLock`]'s return an [`AsyncLockGuard`](crate::AsyncLockGuard).
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("reports");
/// lock.lock()?;                                      // wait, hold until unlock
/// assert_eq!(lock.hold_count()?, 1);
/// lock.unlock()?;
///
/// if lock.try_lock_with(Duration::from_secs(1), Duration::from_secs(10))? {
///     // held for at most 10 s
///     lock.unlock()?;
/// }
/// if let Some(_guard) = lock.try_guard_for(Duration::from_millis(500))? {
///     // released when `_guard` goes out of scope
/// }
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) core: LockCore,
}

/// A reentrant distributed lock for async code (Redisson's `RLockAsync`): the same methods as
/// [`Lock`], awaited.
///
/// Owners here are tasks, not threads (see [`Owner`]): a call's owner is the calling tokio
/// task (`UUID:1000000000000+task-id`), or the explicit [`Owner`] given to
/// [`AsyncLock::with_owner`]. A task that locks must unlock from the same task unless it uses
/// an explicit owner; an [`AsyncLockGuard`](crate::AsyncLockGuard) remembers its owner and may
/// be released anywhere. Requests are awaited on the caller's executor; nothing is spawned.
///
/// Every acquire future is cancellation-safe: dropping it (e.g. in `tokio::select!` or
/// `tokio::time::timeout`) withdraws its request from the server's queue (`RSESSION.CANCEL`)
/// before the drop returns (the dropping thread waits one round trip for it), and if the
/// server granted the lock at the same moment, the lock is released before the drop returns
/// too. Any number of tasks may wait at once: waits go through the client's session and hold
/// no connection (see "Waiting: sessions" in the crate docs).
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// use std::time::Duration;
///
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.async_lock("invoices");
/// lock.lock().await?;
/// // ... critical section ...
/// lock.unlock().await?;
///
/// // Cancellation-safe: a timeout around `lock()` leaves nothing behind on the server.
/// let got = tokio::time::timeout(Duration::from_millis(100), lock.lock()).await;
///
/// let g = lock.guard().await?;
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncLock {
    pub(crate) core: LockCore,
}

/// A [`Lock`] that hands out fencing tokens: Redisson's `RFencedLock`.
///
/// Every successful acquire, re-entry included and including the plain [`Lock`] methods
/// reachable through `Deref`, takes the next token from the counter `redisson_lock_token:{name}`;
/// a token is greater than every token handed out before for this name, also by a primary that
/// failed over (tokens carry the server's clock: numbers around 1.8 × 10^15, see
/// docs/operations.md, "Fencing tokens"). Give the token to the resource you protect so it can
/// refuse a write from a holder whose lock already expired.
///
/// Differences from Redisson, both deliberate fixes: the lease variant honours the lease, and
/// [`FencedLock::try_lock_and_get_token`] makes one attempt (Redisson's waits forever).
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.fenced_lock("ledger");
/// let t1 = lock.lock_and_get_token()?;
/// lock.unlock()?;
/// let t2 = lock.lock_and_get_token()?;
/// assert!(t2 > t1);
/// lock.unlock()?;
/// let g = lock.guard()?;             // guards carry the token
/// assert_eq!(g.token(), lock.token()?);
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct FencedLock {
    pub(crate) lock: Lock,
}

/// The async form of [`FencedLock`]; plain [`AsyncLock`] methods are reached through `Deref`
/// and take tokens too.
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.async_fenced_lock("ledger");
/// let token = lock.lock_and_get_token().await?;
/// lock.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncFencedLock {
    pub(crate) lock: AsyncLock,
}

macro_rules! common {
    ($($T:ident)*) => {$(
        impl fmt::Debug for $T {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($T))
                    .field("name", &self.core.name)
                    .field("lock", &self.core.flavor)
                    .finish_non_exhaustive()
            }
        }

        impl $T {
            /// The lock's name (its Redis key).
            pub fn name(&self) -> &str {
                &self.core.name
            }

            /// This handle acting as `owner` in every call, whatever thread or task makes it
            /// (Redisson's `lockAsync(threadId)`): for handing a held lock to another thread or
            /// task, or acting as a known owner.
            ///
            /// Holds `owner` has now are from then on its caller's to release: they are never
            /// released as orphans when the thread or task that took them ends (see "Orphaned
            /// holds" in the crate docs).
            pub fn with_owner(mut self, owner: Owner) -> $T {
                self.core.ctx.holds.lock().adopt(owner.as_str());
                self.core.policy = OwnerPolicy::Fixed(owner);
                self
            }

            /// The owner this handle acts as in the calling thread (sync) or task (async).
            pub fn owner(&self) -> Owner {
                self.core.owner()
            }

            /// Whether the calling owner's current hold was reported gone by the server or
            /// found gone by the watchdog (see "Lost holds" on [`Guard`]); cleared by the next
            /// lock or unlock. The end of a lease by this client's clock is told by the guard's
            /// `is_lost` only.
            pub fn is_lost(&self) -> bool {
                self.core.is_lost()
            }
        }
    )*};
}

common!(Lock AsyncLock);

twins! {
    Lock, AsyncLock, io = io, style = M;

    /// Release one hold of the calling owner. At the last one the lock frees and the next
    /// waiter gets it; the watchdog stops renewing it at once.
    /// [`Error::NotOwner`](crate::Error::NotOwner) when the owner does not hold it (Redisson's
    /// `IllegalMonitorStateException`).
    fn unlock(&self) -> Result<()> {
        op::release(self.core.target(io), &self.core.owner()).await.map(drop)
    }

    /// Delete the lock whoever holds it; the next waiter gets it. `true` if it was held.
    fn force_unlock(&self) -> Result<bool> {
        op::force_release(self.core.target(io)).await
    }

    /// Whether anyone holds the lock (`EXISTS`).
    fn is_locked(&self) -> Result<bool> {
        op::is_locked(self.core.target(io)).await
    }

    /// Whether `owner` holds the lock (`HEXISTS`).
    fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        op::is_held_by(self.core.target(io), owner).await
    }

    /// How many times the calling owner holds the lock (0 if it does not).
    fn hold_count(&self) -> Result<u64> {
        op::holds_of(self.core.target(io), &self.core.owner()).await
    }

    /// Time left on the lock's lease (`PTTL`).
    fn remain_time_to_live(&self) -> Result<Ttl> {
        op::pttl(self.core.target(io)).await.map(Ttl::from_pttl)
    }
}

lock_api!(Lock, AsyncLock);

impl Lock {
    /// Whether the calling thread holds the lock (`HEXISTS`).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.is_held_by(&self.owner())
    }
}

impl AsyncLock {
    /// Whether the calling task's owner holds the lock (Redisson's `isHeldByCurrentThread`).
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        self.is_held_by(&self.owner()).await
    }
}

macro_rules! fenced {
    ($($F:ident => $L:ident),*) => {$(
        impl std::ops::Deref for $F {
            type Target = $L;

            fn deref(&self) -> &$L {
                &self.lock
            }
        }

        impl $F {
            /// This handle with a fixed owner (see [`Lock::with_owner`]).
            pub fn with_owner(self, owner: Owner) -> $F {
                $F {
                    lock: self.lock.with_owner(owner),
                }
            }
        }
    )*};
}

fenced!(FencedLock => Lock, AsyncFencedLock => AsyncLock);

twins! {
    FencedLock, AsyncFencedLock, io = io, style = M;

    /// Wait for the lock (watchdog mode) and return its fencing token.
    fn lock_and_get_token(&self) -> Result<u64> {
        self.core.token_when(io, None, Wait::Forever).await.map(forever)
    }

    /// Wait for the lock, hold it for at most `lease`, and return its fencing token.
    fn lock_and_get_token_with_lease(&self, lease: Duration) -> Result<u64> {
        self.core.token_when(io, Some(lease), Wait::Forever).await.map(forever)
    }

    /// One attempt: the token if acquired.
    fn try_lock_and_get_token(&self) -> Result<Option<u64>> {
        self.core.token_when(io, None, Wait::No).await
    }

    /// Wait at most `wait`: the token if acquired.
    fn try_lock_and_get_token_for(&self, wait: Duration) -> Result<Option<u64>> {
        self.core.token_when(io, None, Wait::For(wait)).await
    }

    /// Wait at most `wait`, hold for at most `lease`: the token if acquired.
    fn try_lock_and_get_token_with(&self, wait: Duration, lease: Duration) -> Result<Option<u64>> {
        self.core.token_when(io, Some(lease), Wait::For(wait)).await
    }

    /// The last token handed out for this name (`None` before the first fenced acquire).
    fn token(&self) -> Result<Option<u64>> {
        op::token(self.core.target(io)).await
    }
}

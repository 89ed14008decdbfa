//! The semaphore handles: [`Semaphore`] / [`AsyncSemaphore`] (Redisson's `RSemaphore`) and
//! [`PermitExpirableSemaphore`] / [`AsyncPermitExpirableSemaphore`]
//! (`RPermitExpirableSemaphore`), each pair written once, on the same keys.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::forever;
use super::guard::{Guard, Held, Watch};
use super::style::CallStyle;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ops::semaphore as op;
use crate::ops::Obj;
use crate::permit::PermitId;
use crate::transport::Io;
use crate::wait::Wait;

/// What every semaphore handle is: client and name.
#[derive(Clone)]
pub(crate) struct SemCore {
    pub(crate) ctx: Arc<Context>,
    pub(crate) name: Arc<str>,
    /// Shared by the handle's clones: the witness of the permits a watched handle leases.
    pub(crate) anchor: Arc<()>,
    /// Leased permits are renewed by the watchdog (`with_watchdog`).
    pub(crate) watched: bool,
    /// A plain semaphore (Redisson's `RSemaphore`), else a permit-expirable one (their
    /// scripts differ over Redisson's protocol).
    pub(crate) plain: bool,
}

impl SemCore {
    fn obj(&self, io: Io) -> Obj<'_> {
        Obj {
            ctx: &self.ctx,
            io,
            name: &self.name,
        }
    }

    /// The anchor to renew leases under, for a watched handle.
    fn watch(&self) -> Option<&Arc<()>> {
        self.watched.then_some(&self.anchor)
    }

    /// Take `permits` plain permits, as a guard.
    async fn guard<M: CallStyle>(
        &self,
        io: Io,
        permits: u64,
        wait: Wait,
    ) -> Result<Option<Guard<M>>> {
        if !op::acquire(self.obj(io), permits, wait).await? {
            return Ok(None);
        }
        let held = Arc::new(Permits {
            core: self.clone(),
            permits,
        });
        Ok(Some(Guard::new(held, Watch::none())))
    }

    /// Lease `permits` permits, a guard for each.
    async fn lease_guards<M: CallStyle>(
        &self,
        io: Io,
        permits: u64,
        wait: Wait,
        lease: Duration,
    ) -> Result<Option<Vec<Guard<M>>>> {
        let Some(leased) = op::lease(self.obj(io), permits, lease, wait, self.watch()).await?
        else {
            return Ok(None);
        };
        let guards = leased
            .into_iter()
            .map(|p| {
                let held = Arc::new(Permit {
                    core: self.clone(),
                    id: p.id,
                });
                Guard::new(held, Watch::one(p.state))
            })
            .collect();
        Ok(Some(guards))
    }

    async fn lease_ids(
        &self,
        io: Io,
        permits: u64,
        wait: Wait,
        lease: Duration,
    ) -> Result<Option<Vec<PermitId>>> {
        let leased = op::lease(self.obj(io), permits, lease, wait, self.watch()).await?;
        Ok(leased.map(|v| v.into_iter().map(|p| p.id).collect()))
    }

    async fn lease_one(&self, io: Io, wait: Wait, lease: Duration) -> Result<Option<PermitId>> {
        let ids = self.lease_ids(io, 1, wait, lease).await?;
        Ok(ids.and_then(|v| v.into_iter().next()))
    }

    /// Release leased permits; `false` (not an error) when one of them was not leased.
    async fn try_release(&self, io: Io, ids: &[PermitId]) -> Result<bool> {
        match op::release_ids(self.obj(io), ids).await {
            Ok(_) => Ok(true),
            Err(Error::PermitNotLeased { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Plain permits a guard holds.
struct Permits {
    core: SemCore,
    permits: u64,
}

impl Held for Permits {
    fn ctx(&self) -> &Arc<Context> {
        &self.core.ctx
    }

    fn name(&self) -> &str {
        &self.core.name
    }

    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { op::release(self.core.obj(io), self.permits).await.map(drop) })
    }
}

/// One leased permit a guard holds.
struct Permit {
    core: SemCore,
    id: PermitId,
}

impl Held for Permit {
    fn ctx(&self) -> &Arc<Context> {
        &self.core.ctx
    }

    fn name(&self) -> &str {
        &self.core.name
    }

    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            op::release_ids(self.core.obj(io), &[self.id])
                .await
                .map(drop)
        })
    }

    fn permit_id(&self) -> Option<PermitId> {
        Some(self.id)
    }
}

/// A distributed counting semaphore for blocking code: Redisson's `RSemaphore`, in its layout
/// (a string holding the available permits), so a Java service on Redisson shares it.
///
/// Permits have no owner: any thread or process may release them. An absent semaphore has 0
/// permits ([`try_set_permits`](Semaphore::try_set_permits) sets the first count, `release`
/// creates it); the count may go negative through [`add_permits`](Semaphore::add_permits).
/// Waiters wait on the server in a strict first-come, first-served queue: a waiter asking for
/// 5 permits is not overtaken by later ones asking for 1 (Redisson's semaphore lets large
/// requests starve), and released permits go straight to it.
///
/// Guards hold permits and give them back when dropped (also during a panic). After a broken
/// connection an acquire is not sent again (nobody can tell whether it took permits): it fails
/// with an ambiguous [`Error::Connection`].
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let db = client.semaphore("db-connections");
/// db.try_set_permits(4)?;                  // at most 4 at once, in every process
/// {
///     let _permit = db.guard()?;           // waits for a permit
///     // ... use the database ...
/// }                                        // given back here
/// assert_eq!(db.available_permits()?, 4);
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Semaphore {
    pub(crate) core: SemCore,
}

/// The async form of [`Semaphore`] (Redisson's `RSemaphoreAsync`).
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let db = client.async_semaphore("db-connections");
/// let permit = db.guard().await?;
/// permit.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncSemaphore {
    pub(crate) core: SemCore,
}

/// A semaphore whose permits are leased, for blocking code: Redisson's
/// `RPermitExpirableSemaphore`, in its layout. Each acquired permit has an id ([`PermitId`],
/// 32 hex characters) and a lease: it returns to the pool by itself when the lease ends (a
/// crashed worker's permit is not lost), or when released by id, by any process (a Java
/// service on Redisson can release a permit rlock handed out, and the reverse).
///
/// Waiting is as for [`Semaphore`] (a strict FIFO queue on the server); a lease counts from
/// the grant. Each permit's guard gives it back when dropped and counts it lost once its lease
/// has ended ([`Guard::is_lost`], [`Guard::valid_until`]); extend a lease with
/// [`update_lease_time`](PermitExpirableSemaphore::update_lease_time).
///
/// Over Redisson's protocol (a server without the module) it runs Redisson's scripts: waiters
/// retry at a release's message or the earliest lease's end (not first come, first served),
/// and ended leases are judged by the clock of the client whose script runs (keep clocks in
/// sync, as with Redisson).
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let workers = client.permit_expirable_semaphore("render-slots");
/// workers.try_set_permits(8)?;
/// let id = workers.acquire(Duration::from_secs(60))?;
/// println!("working as permit {id}");
/// workers.update_lease_time(id, Duration::from_secs(60))?; // still busy: 60 s more
/// workers.release(id)?;
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    pub(crate) core: SemCore,
}

/// The async form of [`PermitExpirableSemaphore`].
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let workers = client.async_permit_expirable_semaphore("render-slots");
/// let g = workers.guard(std::time::Duration::from_secs(60)).await?;
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncPermitExpirableSemaphore {
    pub(crate) core: SemCore,
}

named!("semaphore": Semaphore AsyncSemaphore PermitExpirableSemaphore AsyncPermitExpirableSemaphore);

macro_rules! watched {
    ($($T:ident)*) => {$(
        impl $T {
            /// This handle with the watchdog renewing the permits it leases (opt-in; Redisson
            /// has no watchdog for permits, redisson#4462): each permit is leased for the
            /// `lease` given and renewed to `lease` every renewal interval
            /// ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout)
            /// ÷ 3) in the watchdog's one round trip per server, until it is released (by id,
            /// or by its guard). The lease is then only how long a crashed process's permit
            /// stays taken, not a guess at how long the work takes. It must be at least twice
            /// the renewal interval ([`Error::InvalidArgument`] otherwise).
            ///
            /// Renewal also stops when no clone of this handle is left (nothing of this
            /// process can give the permit back through it): the permit is reported with a
            /// `tracing` warning naming the semaphore and returns when its lease ends. A
            /// permit found expired or released elsewhere is reported lost
            /// ([`Guard::is_lost`]).
            ///
            /// ```no_run
            /// # use std::time::Duration;
            /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
            /// let slots = client.permit_expirable_semaphore("render-slots").with_watchdog();
            /// // Held as long as the work takes; 30 s after a crash at most.
            /// let permit = slots.guard(Duration::from_secs(30))?;
            /// // ... render for as long as it takes ...
            /// permit.unlock()?;
            /// # Ok::<(), rlock_client::Error>(())
            /// ```
            pub fn with_watchdog(mut self) -> $T {
                self.core.watched = true;
                self
            }
        }
    )*};
}

watched!(PermitExpirableSemaphore AsyncPermitExpirableSemaphore);

/// What both kinds of semaphore have: the count.
macro_rules! counts {
    ($Sync:ident, $Async:ident) => {
        twins! {
            $Sync, $Async, io = io, style = M;

            /// Set the number of permits if the semaphore does not exist yet: whether it was
            /// set. Waiters get the new permits at once.
            fn try_set_permits(&self, permits: u64) -> Result<bool> {
                op::try_set_permits(self.core.obj(io), permits, !self.core.plain).await
            }

            /// Add `delta` permits (negative: remove; the count may go negative), creating the
            /// semaphore if needed: the count after waiters were served.
            fn add_permits(&self, delta: i64) -> Result<i64> {
                op::add_permits(self.core.obj(io), delta, !self.core.plain).await
            }

            /// The permits available now (0 for an absent semaphore; leases that ended count
            /// as returned).
            fn available_permits(&self) -> Result<i64> {
                op::available(self.core.obj(io), !self.core.plain).await
            }
        }
    };
}

counts!(Semaphore, AsyncSemaphore);
counts!(PermitExpirableSemaphore, AsyncPermitExpirableSemaphore);

twins! {
    Semaphore, AsyncSemaphore, io = io, style = M;

    /// Wait for one permit and take it.
    fn acquire(&self) -> Result<()> {
        op::acquire(self.core.obj(io), 1, Wait::Forever).await.map(drop)
    }

    /// Wait for `permits` permits and take them at once (0: at once, without asking).
    fn acquire_many(&self, permits: u64) -> Result<()> {
        op::acquire(self.core.obj(io), permits, Wait::Forever).await.map(drop)
    }

    /// One attempt for one permit: whether it was taken.
    fn try_acquire(&self) -> Result<bool> {
        op::acquire(self.core.obj(io), 1, Wait::No).await
    }

    /// One attempt for `permits` permits.
    fn try_acquire_many(&self, permits: u64) -> Result<bool> {
        op::acquire(self.core.obj(io), permits, Wait::No).await
    }

    /// Wait at most `wait` for one permit.
    fn try_acquire_for(&self, wait: Duration) -> Result<bool> {
        op::acquire(self.core.obj(io), 1, Wait::For(wait)).await
    }

    /// Wait at most `wait` for `permits` permits.
    fn try_acquire_many_for(&self, permits: u64, wait: Duration) -> Result<bool> {
        op::acquire(self.core.obj(io), permits, Wait::For(wait)).await
    }

    /// Give back one permit (anyone may; creates the semaphore if needed). Waiters get it at
    /// once.
    fn release(&self) -> Result<()> {
        op::release(self.core.obj(io), 1).await.map(drop)
    }

    /// Give back `permits` permits.
    fn release_many(&self, permits: u64) -> Result<()> {
        op::release(self.core.obj(io), permits).await.map(drop)
    }

    /// Take every available permit: how many.
    fn drain_permits(&self) -> Result<u64> {
        op::drain(self.core.obj(io)).await
    }

    /// Set the number of permits with a time to live, if the semaphore does not exist yet:
    /// whether it was set (Redisson's `trySetPermits(n, ttl)`). The count is deleted `ttl`
    /// after (a semaphore left alone goes away by itself). Waiters get the new permits at once.
    /// With the module `RSEM.TRYSETPERMITS ... PX` (no `EVAL` needed); over Redisson's
    /// protocol, its script.
    fn try_set_permits_with_ttl(&self, permits: u64, ttl: Duration) -> Result<bool> {
        op::try_set_permits_ttl(self.core.obj(io), permits, ttl).await
    }

    /// Give back `permits` permits only if the semaphore exists: whether it did (Redisson's
    /// `releaseIfExists`). [`release_many`](Self::release_many) creates an absent semaphore
    /// with the permits given back; this leaves an expired or deleted one gone. Zero permits:
    /// `false`, nothing sent. With the module `RSEM.RELEASE ... XX` (no `EVAL` needed); over
    /// Redisson's protocol, its script.
    fn release_if_exists(&self, permits: u64) -> Result<bool> {
        op::release_if_exists(self.core.obj(io), permits).await
    }

    /// [`acquire`](Semaphore::acquire), as a guard that gives the permit back when dropped.
    fn guard(&self) -> Result<Guard<M>> {
        self.core.guard(io, 1, Wait::Forever).await.map(forever)
    }

    /// [`acquire_many`](Semaphore::acquire_many), as one guard for all the permits.
    fn guard_many(&self, permits: u64) -> Result<Guard<M>> {
        self.core.guard(io, permits, Wait::Forever).await.map(forever)
    }

    /// [`try_acquire`](Semaphore::try_acquire), as a guard when taken.
    fn try_guard(&self) -> Result<Option<Guard<M>>> {
        self.core.guard(io, 1, Wait::No).await
    }

    /// [`try_acquire_for`](Semaphore::try_acquire_for), as a guard when taken.
    fn try_guard_for(&self, wait: Duration) -> Result<Option<Guard<M>>> {
        self.core.guard(io, 1, Wait::For(wait)).await
    }

    /// [`try_acquire_many_for`](Semaphore::try_acquire_many_for), as one guard when taken.
    fn try_guard_many_for(&self, permits: u64, wait: Duration) -> Result<Option<Guard<M>>> {
        self.core.guard(io, permits, Wait::For(wait)).await
    }
}

twins! {
    PermitExpirableSemaphore, AsyncPermitExpirableSemaphore, io = io, style = M;

    /// Wait for a permit and lease it for `lease`: its id.
    fn acquire(&self, lease: Duration) -> Result<PermitId> {
        self.core.lease_one(io, Wait::Forever, lease).await.map(forever)
    }

    /// Wait for `permits` permits and lease them together: their ids.
    fn acquire_many(&self, permits: u64, lease: Duration) -> Result<Vec<PermitId>> {
        self.core.lease_ids(io, permits, Wait::Forever, lease).await.map(forever)
    }

    /// One attempt to lease a permit: its id if taken.
    fn try_acquire(&self, lease: Duration) -> Result<Option<PermitId>> {
        self.core.lease_one(io, Wait::No, lease).await
    }

    /// Wait at most `wait` to lease a permit: its id if taken.
    fn try_acquire_for(&self, wait: Duration, lease: Duration) -> Result<Option<PermitId>> {
        self.core.lease_one(io, Wait::For(wait), lease).await
    }

    /// One attempt to lease `permits` permits: their ids, or none (empty).
    fn try_acquire_many(&self, permits: u64, lease: Duration) -> Result<Vec<PermitId>> {
        let ids = self.core.lease_ids(io, permits, Wait::No, lease).await?;
        Ok(ids.unwrap_or_default())
    }

    /// Wait at most `wait` to lease `permits` permits: their ids, or none (empty).
    fn try_acquire_many_for(
        &self,
        permits: u64,
        wait: Duration,
        lease: Duration
    ) -> Result<Vec<PermitId>> {
        let ids = self.core.lease_ids(io, permits, Wait::For(wait), lease).await?;
        Ok(ids.unwrap_or_default())
    }

    /// Give back a leased permit. [`Error::PermitNotLeased`](crate::Error::PermitNotLeased) if
    /// it is not leased (released already, its lease ended, or unknown).
    fn release(&self, id: PermitId) -> Result<()> {
        op::release_ids(self.core.obj(io), &[id]).await.map(drop)
    }

    /// Give back leased permits, all or none
    /// ([`Error::PermitNotLeased`](crate::Error::PermitNotLeased) and nothing released if any
    /// is not leased).
    fn release_many(&self, ids: &[PermitId]) -> Result<()> {
        op::release_ids(self.core.obj(io), ids).await.map(drop)
    }

    /// [`release`](PermitExpirableSemaphore::release), `false` instead of the error.
    fn try_release(&self, id: PermitId) -> Result<bool> {
        self.core.try_release(io, &[id]).await
    }

    /// [`release_many`](PermitExpirableSemaphore::release_many): how many were released
    /// (all of them, or 0 when any was not leased).
    fn try_release_many(&self, ids: &[PermitId]) -> Result<u64> {
        let all = self.core.try_release(io, ids).await?;
        Ok(if all { ids.len() as u64 } else { 0 })
    }

    /// Lease the permit for `lease` from now instead: whether it was still leased.
    fn update_lease_time(&self, id: PermitId, lease: Duration) -> Result<bool> {
        op::update_lease(self.core.obj(io), &id, lease).await
    }

    /// The permits leased now (leases not ended).
    fn acquired_permits(&self) -> Result<u64> {
        op::leased(self.core.obj(io)).await
    }

    /// The permits there are: available plus leased (Redisson's `getPermits()`; 0 when the
    /// semaphore does not exist).
    fn permits(&self) -> Result<i64> {
        op::total_permits(self.core.obj(io)).await
    }

    /// Make the permits there are (available plus leased) `permits`, by moving the available
    /// count by the difference (Redisson's `setPermits`): leased permits stay leased, and the
    /// available count may go negative until enough come back. When it changed anything,
    /// waiters try again (with the module, permits it adds go to queued waiters at once). With
    /// the module `RSEM.SETPERMITS` (no `EVAL` needed); over Redisson's protocol, its script.
    fn set_permits(&self, permits: i64) -> Result<()> {
        op::set_permits(self.core.obj(io), permits).await
    }

    /// The time left of a leased permit's lease (Redisson's `getLeaseTime`): `None` for a
    /// permit without an end ([`acquire_without_lease`](Self::acquire_without_lease)),
    /// [`Error::PermitNotLeased`] when it is not leased (released, its lease ended, or never
    /// existed).
    fn lease_time(&self, id: PermitId) -> Result<Option<Duration>> {
        op::lease_time(self.core.obj(io), &id).await
    }

    /// Lease a permit without an end, waiting as long as it takes (Redisson's `acquire()`
    /// without a lease): its id. It is never lost and never renewed (the watchdog has nothing
    /// to do for it): it is the caller's until released by id, whatever happens to the
    /// caller, so a crash leaks it. Prefer a lease, or [`with_watchdog`](Self::with_watchdog).
    /// Scored as Redisson scores it (`922337203685477`) in both protocols: with the module
    /// `RSEM.ACQUIRE ... NOLEASE`, over Redisson's protocol its script. An acquire whose reply
    /// the connection lost is reported in doubt with the module (the server makes the ids, so
    /// nobody can tell which to release), settled by its ids over Redisson's protocol.
    fn acquire_without_lease(&self) -> Result<PermitId> {
        let ids = op::lease_without_end(self.core.obj(io), 1, Wait::Forever).await;
        Ok(forever(ids?).remove(0))
    }

    /// [`acquire_without_lease`](Self::acquire_without_lease) if a permit is free now
    /// (Redisson's `tryAcquire()`): its id, or `None`.
    fn try_acquire_without_lease(&self) -> Result<Option<PermitId>> {
        let ids = op::lease_without_end(self.core.obj(io), 1, Wait::No).await?;
        Ok(ids.map(|mut v| v.remove(0)))
    }

    /// [`acquire_without_lease`](Self::acquire_without_lease), waiting at most `wait`
    /// (Redisson's `tryAcquire(wait, -1, unit)`): its id, or `None`.
    fn try_acquire_without_lease_for(&self, wait: Duration) -> Result<Option<PermitId>> {
        let ids = op::lease_without_end(self.core.obj(io), 1, Wait::For(wait)).await?;
        Ok(ids.map(|mut v| v.remove(0)))
    }

    /// [`acquire`](PermitExpirableSemaphore::acquire), as a guard that releases the permit when
    /// dropped ([`Guard::permit_id`] gives its id).
    fn guard(&self, lease: Duration) -> Result<Guard<M>> {
        let g = self.core.lease_guards(io, 1, Wait::Forever, lease).await.map(forever)?;
        Ok(g.into_iter().next().expect("one permit leased"))
    }

    /// [`try_acquire`](PermitExpirableSemaphore::try_acquire), as a guard when taken.
    fn try_guard(&self, lease: Duration) -> Result<Option<Guard<M>>> {
        let g = self.core.lease_guards(io, 1, Wait::No, lease).await?;
        Ok(g.and_then(|g| g.into_iter().next()))
    }

    /// [`try_acquire_for`](PermitExpirableSemaphore::try_acquire_for), as a guard when taken.
    fn try_guard_for(&self, wait: Duration, lease: Duration) -> Result<Option<Guard<M>>> {
        let g = self.core.lease_guards(io, 1, Wait::For(wait), lease).await?;
        Ok(g.and_then(|g| g.into_iter().next()))
    }

    /// [`acquire_many`](PermitExpirableSemaphore::acquire_many), a guard per permit.
    fn guard_many(&self, permits: u64, lease: Duration) -> Result<Vec<Guard<M>>> {
        self.core.lease_guards(io, permits, Wait::Forever, lease).await.map(forever)
    }
}

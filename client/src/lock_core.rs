//! What the sync and async lock handles and guards share: [`LockCore`] (client, name, owner
//! policy), acquiring, and each other operation as one future that either API runs.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::client::{Client, Inner};
use crate::error::{Error, Result};
use crate::lock::Ttl;
use crate::ops::{AcquireReq, Acquired, Wait};
use crate::owner::{Owner, OwnerPolicy};
use crate::watchdog::HoldState;

/// What a handle shares between the sync and async APIs: client, name, owner policy.
#[derive(Clone)]
pub(crate) struct LockCore {
    pub(crate) client: Client,
    pub(crate) name: Arc<str>,
    pub(crate) fence: bool,
    pub(crate) policy: OwnerPolicy,
}

/// A granted acquire as the API layer sees it.
pub(crate) struct Grant {
    pub(crate) value: i64,
    pub(crate) state: Arc<HoldState>,
    pub(crate) owner: Owner,
}

impl Grant {
    fn kept(acquired: Acquired, owner: Owner) -> Grant {
        let (value, state) = acquired.keep();
        Grant {
            value,
            state,
            owner,
        }
    }

    /// The fencing token of a fenced acquire.
    pub(crate) fn token(&self) -> u64 {
        self.value.max(0) as u64
    }
}

/// The grant of an acquire that waits without limit (only an error ends such a wait).
pub(crate) fn forever<T>(got: Option<T>) -> T {
    got.expect("a wait without limit")
}

/// An operation ready to run on the client's runtime: it owns everything it needs.
pub(crate) trait Op<T>: Future<Output = Result<T>> + Send + 'static {}

impl<T, F: Future<Output = Result<T>> + Send + 'static> Op<T> for F {}

impl LockCore {
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.client.inner
    }

    pub(crate) fn owner(&self) -> Owner {
        self.policy.resolve(&self.client.inner.id)
    }

    /// The acquire per `lease` and `wait` for the calling owner, as an operation for the
    /// client's runtime; dropping `caller`'s sender withdraws it. Also returns that owner.
    fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Wait,
        caller: Option<oneshot::Receiver<()>>,
    ) -> Result<(Owner, impl Op<Option<Acquired>>)> {
        let owner = self.owner();
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(Error::InvalidArgument(
                "the lease must be at least 1 ms".into(),
            ));
        }
        let req = AcquireReq {
            name: self.name.clone(),
            owner: owner.clone(),
            lease,
            wait,
            fence: self.fence,
        };
        Ok((owner, self.inner().clone().acquire(req, caller)))
    }

    /// Acquire, blocking this thread.
    pub(crate) fn acquire_sync(
        &self,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Grant>> {
        let (owner, acquire) = self.acquire(lease, wait, None)?;
        self.block_on(async move { Ok(acquire.await?.map(|a| Grant::kept(a, owner))) })
    }

    /// Acquire from async code. Dropping the returned future withdraws the wait on the server
    /// and gives back a grant that raced the drop (a grant is kept only once it got here).
    pub(crate) async fn acquire_async(
        &self,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Grant>> {
        let (caller, caller_rx) = oneshot::channel::<()>();
        let (owner, acquire) = self.acquire(lease, wait, Some(caller_rx))?;
        let got = self.run(acquire).await;
        drop(caller);
        Ok(got?.map(|a| Grant::kept(a, owner)))
    }

    /// Run `op` on the client's runtime and wait for it on this thread (the sync API).
    pub(crate) fn block_on<T: Send + 'static>(&self, op: impl Op<T>) -> Result<T> {
        self.inner().block_on(op)
    }

    /// Run `op` on the client's runtime and await it from any executor (the async API).
    pub(crate) async fn run<T: Send + 'static>(&self, op: impl Op<T>) -> Result<T> {
        self.inner().run(op).await
    }

    /// `op` given its own handles on the client and the lock's name.
    fn op<F>(&self, op: impl FnOnce(Arc<Inner>, Arc<str>) -> F) -> F {
        op(self.inner().clone(), self.name.clone())
    }

    /// Release one hold of `owner`.
    pub(crate) fn release(&self, owner: Owner) -> impl Op<()> {
        self.op(|inner, name| async move { inner.release(&name, &owner).await.map(|_| ()) })
    }

    /// Delete the lock whoever holds it: `true` if it was held.
    pub(crate) fn force_release(&self) -> impl Op<bool> {
        self.op(|inner, name| async move { inner.force_release(&name).await })
    }

    pub(crate) fn is_locked(&self) -> impl Op<bool> {
        self.op(|inner, name| async move { inner.is_locked(&name).await })
    }

    pub(crate) fn is_held_by(&self, owner: Owner) -> impl Op<bool> {
        self.op(|inner, name| async move { inner.is_held_by(&name, &owner).await })
    }

    /// How many times `owner` holds the lock, as the server counts.
    pub(crate) fn hold_count(&self, owner: Owner) -> impl Op<u64> {
        self.op(|inner, name| async move { inner.server_holds(&name, &owner).await })
    }

    pub(crate) fn ttl(&self) -> impl Op<Ttl> {
        self.op(|inner, name| async move { inner.pttl(&name).await.map(Ttl::from_pttl) })
    }

    /// The last fencing token handed out for this name.
    pub(crate) fn token(&self) -> impl Op<Option<u64>> {
        self.op(|inner, name| async move { inner.token(&name).await })
    }

    pub(crate) fn is_lost_for(&self, owner: &Owner) -> bool {
        self.inner()
            .registry
            .lock()
            .unwrap()
            .is_lost(&self.name, owner)
    }
}

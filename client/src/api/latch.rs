//! The count-down latch handles: [`CountDownLatch`] and [`AsyncCountDownLatch`] (Redisson's
//! `RCountDownLatch`), written once.

use std::sync::Arc;
use std::time::Duration;

use crate::context::Context;
use crate::error::Result;
use crate::ops::latch as op;
use crate::ops::Obj;
use crate::transport::Io;
use crate::wait::Wait;

/// What every latch handle is: client and name.
#[derive(Clone)]
pub(crate) struct LatchCore {
    pub(crate) ctx: Arc<Context>,
    pub(crate) name: Arc<str>,
}

impl LatchCore {
    fn obj(&self, io: Io) -> Obj<'_> {
        Obj {
            ctx: &self.ctx,
            io,
            name: &self.name,
        }
    }
}

/// A distributed count-down latch for blocking code: Redisson's `RCountDownLatch`, in its
/// layout (a string holding the count), so a Java service on Redisson shares it.
///
/// [`try_set_count`](CountDownLatch::try_set_count) closes an open latch with a count; every
/// [`count_down`](CountDownLatch::count_down) lowers it; at zero the latch opens (the key is
/// deleted) and every waiter passes at once. Waiters wait on the server (no polling); over
/// Redisson's protocol (a server without the module) they wait on the latch's channel and check
/// the count at its messages, as Redisson's do. An absent latch is open. Redisson's `await()` is [`wait`](CountDownLatch::wait) here (`await`
/// is a Rust keyword), `await(timeout)` is [`wait_for`](CountDownLatch::wait_for).
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let ready = client.count_down_latch("workers-ready");
/// ready.try_set_count(3)?;
/// for _ in 0..3 {
///     let r = ready.clone();
///     std::thread::spawn(move || r.count_down()); // each worker, once ready
/// }
/// ready.wait()?;                                  // all three are ready
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    pub(crate) core: LatchCore,
}

/// The async form of [`CountDownLatch`].
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let ready = client.async_count_down_latch("workers-ready");
/// if !ready.wait_for(std::time::Duration::from_secs(5)).await? {
///     eprintln!("still {} to go", ready.get_count().await?);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncCountDownLatch {
    pub(crate) core: LatchCore,
}

named!("latch": CountDownLatch AsyncCountDownLatch);

twins! {
    CountDownLatch, AsyncCountDownLatch, io = io, style = M;

    /// Set the count if the latch is open (absent, or counted down to zero): whether it was
    /// set. `count` must be at least 1.
    fn try_set_count(&self, count: u64) -> Result<bool> {
        op::try_set_count(self.core.obj(io), count).await
    }

    /// Lower the count by one; at zero the latch opens and every waiter passes. On an open
    /// latch it does nothing.
    fn count_down(&self) -> Result<()> {
        op::count_down(self.core.obj(io)).await
    }

    /// The count now (0 when open).
    fn get_count(&self) -> Result<u64> {
        op::count(self.core.obj(io)).await
    }

    /// Wait until the latch is open (Redisson's `await()`).
    fn wait(&self) -> Result<()> {
        op::wait_open(self.core.obj(io), Wait::Forever).await.map(drop)
    }

    /// Wait at most `timeout` for the latch to open: whether it is open (Redisson's
    /// `await(timeout)`). A zero timeout checks once.
    fn wait_for(&self, timeout: Duration) -> Result<bool> {
        op::wait_open(self.core.obj(io), Wait::For(timeout)).await
    }

    /// Count down once, then wait until the latch is open: the barrier of a group whose
    /// members each arrive and wait for the others (`countDown()` then `await()` in Redisson,
    /// whose `RCountDownLatch` has no single call for it). The count-down is sent once,
    /// whatever happens to the wait; a latch that opens and is set again (`try_set_count`)
    /// before the wait begins is waited on in its new round.
    fn count_down_and_await(&self) -> Result<()> {
        op::count_down(self.core.obj(io)).await?;
        op::wait_open(self.core.obj(io), Wait::Forever).await.map(drop)
    }

    /// [`count_down_and_await`](CountDownLatch::count_down_and_await), waiting at most
    /// `timeout` after the count-down: whether the latch is open.
    fn count_down_and_await_for(&self, timeout: Duration) -> Result<bool> {
        op::count_down(self.core.obj(io)).await?;
        op::wait_open(self.core.obj(io), Wait::For(timeout)).await
    }

    /// Delete the latch: whether it existed. Its waiters pass (a deleted latch is open).
    fn delete(&self) -> Result<bool> {
        op::delete(self.core.obj(io)).await
    }
}

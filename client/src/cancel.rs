//! [`CancelToken`]: how another thread ends a blocking wait (Redisson's `lockInterruptibly`
//! and `Thread.interrupt()`).
//!
//! The token reaches the wait path through a thread-local set by [`CancelToken::run`]: a sync
//! call runs its future on the calling thread (see `runtime.rs`), so the wait reads it there
//! when it starts, and every blocking wait of every object is cancellable without a
//! cancellable twin of each method. Async waits don't read it: they are cancelled by dropping
//! their future.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

/// Cancels the blocking waits of the threads that run under it: Redisson's `lockInterruptibly`
/// with `Thread.interrupt()`, for every blocking wait of this crate (locks, read-write locks,
/// semaphores, latches, multi-locks).
///
/// A thread runs code under a token with [`run`](CancelToken::run); any thread calls
/// [`cancel`](CancelToken::cancel). Every wait inside `run` that may wait (`lock`,
/// `try_lock_for`, `acquire`, `wait`, guards, ...) then ends promptly with
/// [`Error::Cancelled`](crate::Error::Cancelled): its request is withdrawn from the server's
/// queue (`RSESSION.CANCEL`), and if the server granted it in the same instant, the grant is
/// given back before the call returns, so a cancelled call never leaves the object held. A
/// grant the call received before it saw the cancel is the call's: it returns `Ok` and holds
/// it (for a sync wait's first 50 ms, while its connection is parked for a direct hand-off, a
/// cancel is seen when that part ends). A wait started after the cancel fails at once without
/// asking the server. Calls that don't
/// wait (`try_lock`, `unlock`, ...) are not affected. A token stays cancelled; use a new one
/// for new work. Clones share one state.
///
/// Async waits don't need a token: dropping their future cancels them the same way.
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let stop = rlock_client::CancelToken::new();
/// let worker = {
///     let (lock, stop) = (client.lock("jobs"), stop.clone());
///     std::thread::spawn(move || stop.run(|| lock.lock()))
/// };
/// // ... shutting down: end the worker's wait.
/// stop.cancel();
/// match worker.join().unwrap() {
///     Err(rlock_client::Error::Cancelled { .. }) => println!("wait withdrawn, nothing held"),
///     other => println!("{other:?}"),
/// }
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct CancelToken {
    state: Arc<watch::Sender<bool>>,
}

thread_local! {
    /// The token the calling thread runs under (innermost [`CancelToken::run`]).
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

impl Default for CancelToken {
    fn default() -> Self {
        CancelToken::new()
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl CancelToken {
    /// A token not cancelled yet.
    ///
    /// ```
    /// let t = rlock_client::CancelToken::new();
    /// assert!(!t.is_cancelled());
    /// ```
    pub fn new() -> CancelToken {
        CancelToken {
            state: Arc::new(watch::Sender::new(false)),
        }
    }

    /// Cancel every wait running under this token now, and every one started under it later.
    /// Any thread may call it, any number of times.
    ///
    /// ```
    /// let t = rlock_client::CancelToken::new();
    /// t.clone().cancel();
    /// assert!(t.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        self.state.send_replace(true);
    }

    /// Whether [`cancel`](CancelToken::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        *self.state.borrow()
    }

    /// Run `f` on the calling thread with its blocking waits cancellable by this token (the
    /// innermost `run` counts when they nest). Returns what `f` returns.
    ///
    /// ```
    /// let t = rlock_client::CancelToken::new();
    /// assert_eq!(t.run(|| 1 + 1), 2);
    /// ```
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Restore(Option<CancelToken>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let outer = self.0.take();
                let _ = CURRENT.try_with(|c| *c.borrow_mut() = outer);
            }
        }
        let outer = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        let _restore = Restore(outer);
        f()
    }

    /// Resolves once the token is cancelled.
    pub(crate) async fn cancelled(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives in `self`: `wait_for` ends only when the value turns true.
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// The token the calling thread runs under, if any.
pub(crate) fn current() -> Option<CancelToken> {
    CURRENT.try_with(|c| c.borrow().clone()).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_scopes_the_token_to_the_thread_and_nests() {
        assert!(current().is_none());
        let (a, b) = (CancelToken::new(), CancelToken::new());
        a.run(|| {
            assert!(Arc::ptr_eq(&current().unwrap().state, &a.state));
            b.run(|| assert!(Arc::ptr_eq(&current().unwrap().state, &b.state)));
            assert!(Arc::ptr_eq(&current().unwrap().state, &a.state));
            std::thread::spawn(|| assert!(current().is_none(), "per thread"))
                .join()
                .unwrap();
        });
        assert!(current().is_none());
    }

    #[test]
    fn cancelled_resolves_after_cancel_from_another_thread() {
        let t = CancelToken::new();
        let t2 = t.clone();
        let h = std::thread::spawn(move || pollster::block_on(t2.cancelled()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!h.is_finished());
        t.cancel();
        h.join().unwrap();
        pollster::block_on(t.cancelled()); // already cancelled: at once
    }
}

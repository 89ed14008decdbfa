//! How a caller waits for its requests: [`Blocking`] (the calling thread) or [`Async`]
//! (`.await`). Handles and guards come in both; the mode is a type parameter of [`Guard`].

use crate::transport::Io;

mod sealed {
    pub trait Sealed {
        /// Whether callers of this mode block their thread.
        const BLOCKING: bool;
    }
}

/// The way a [`Guard`](crate::Guard) is used: [`Blocking`] or [`Async`]. Sealed.
pub trait Mode: sealed::Sealed + Send + Sync + 'static {}

/// Calls block the calling thread (the sync API: [`Lock`](crate::Lock), [`LockGuard`](crate::LockGuard)).
#[derive(Debug)]
pub enum Blocking {}

/// Calls are awaited (the async API: [`AsyncLock`](crate::AsyncLock),
/// [`AsyncLockGuard`](crate::AsyncLockGuard)).
#[derive(Debug)]
pub enum Async {}

impl sealed::Sealed for Blocking {
    const BLOCKING: bool = true;
}

impl sealed::Sealed for Async {
    const BLOCKING: bool = false;
}

impl Mode for Blocking {}
impl Mode for Async {}

/// The transport's view of mode `M`.
pub(crate) fn io<M: Mode>() -> Io {
    if <M as sealed::Sealed>::BLOCKING {
        Io::Blocking
    } else {
        Io::Async
    }
}

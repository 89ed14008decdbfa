//! How a caller waits for its requests: [`Blocking`] (the calling thread) or [`Async`]
//! (`.await`). Handles and guards come in both; the call style is a type parameter of
//! [`Guard`](crate::Guard).

use crate::transport::Io;

mod sealed {
    pub trait Sealed {
        /// Whether callers of this style block their thread.
        const BLOCKING: bool;
    }
}

/// How the calls of a [`Guard`](crate::Guard) are made: [`Blocking`] or [`Async`]. Sealed.
///
/// Formerly `Mode` (renamed: in a crate with a read-write lock, a mode is read or write); the
/// old name is a deprecated alias, [`Mode`].
pub trait CallStyle: sealed::Sealed + Send + Sync + 'static {}

/// The former name of [`CallStyle`], kept so that code written against it still builds: every
/// [`CallStyle`] is a `Mode`, and a bound `M: Mode` still gives `M: CallStyle`.
///
/// ```
/// #[allow(deprecated)]
/// fn name_of<M: rlock_client::Mode>(g: &rlock_client::Guard<M>) -> &str {
///     g.name()
/// }
/// fn token_of<S: rlock_client::CallStyle>(g: &rlock_client::Guard<S>) -> Option<u64> {
///     g.token()
/// }
/// ```
#[deprecated(
    note = "renamed `CallStyle` (a read-write lock's mode is read or write); use `rlock_client::CallStyle`"
)]
pub trait Mode: CallStyle {}

#[allow(deprecated)]
impl<S: CallStyle> Mode for S {}

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

impl CallStyle for Blocking {}
impl CallStyle for Async {}

/// The transport's view of call style `S`.
pub(crate) fn io<S: CallStyle>() -> Io {
    if <S as sealed::Sealed>::BLOCKING {
        Io::Blocking
    } else {
        Io::Async
    }
}

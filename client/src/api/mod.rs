//! The public handles: per object one handle written once ([`twins!`](crate::api::twins)) and
//! given as a blocking type and an async type, and one [`Guard`] for a hold of any object.

#[macro_use]
mod twins;
mod guard;
mod lock;
mod mode;
mod rwlock;
mod ttl;

pub use guard::{AsyncLockGuard, Guard, LockGuard};
pub(crate) use lock::LockCore;
pub use lock::{AsyncFencedLock, AsyncLock, FencedLock, Lock};
pub use mode::{Async, Blocking, Mode};
pub use rwlock::{AsyncReadWriteLock, ReadWriteLock};
pub use ttl::Ttl;

//! The public handles: per object one handle written once ([`twins!`](crate::api::twins)) and
//! given as a blocking type and an async type, and one [`Guard`] for a hold of any object.

#[macro_use]
mod twins;
#[macro_use]
mod acquire;
mod group;
mod guard;
mod latch;
mod lock;
mod multi;
mod rwlock;
mod semaphore;
mod spin;
mod style;
mod ttl;

pub use group::{AsyncGroupLock, GroupLock};
pub use guard::{AsyncLockGuard, Guard, LockGuard};
pub(crate) use latch::LatchCore;
pub use latch::{AsyncCountDownLatch, CountDownLatch};
pub(crate) use lock::LockCore;
pub use lock::{AsyncFencedLock, AsyncLock, FencedLock, Lock};
pub use multi::{AsyncMultiLock, AsyncRedLock, MultiLock, RedLock};
pub use rwlock::{AsyncReadWriteLock, ReadWriteLock};
pub(crate) use semaphore::SemCore;
pub use semaphore::{
    AsyncPermitExpirableSemaphore, AsyncSemaphore, PermitExpirableSemaphore, Semaphore,
};
pub use spin::{AsyncSpinLock, BackOff, Delays, SpinLock};
#[allow(deprecated)]
pub use style::{Async, Blocking, CallStyle, Mode};
pub use ttl::Ttl;

/// The grant of a wait without limit (only an error ends such a wait).
fn forever<T>(got: Option<T>) -> T {
    got.expect("a wait without limit ends granted or with an error")
}

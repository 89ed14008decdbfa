//! Each kind of object's [`Object`]: what the skin asks of an object as a whole rather than of
//! one queued request (sessions' and introspection's hold checks, events on auxiliary keys).
//! The match is exhaustive: a new kind of object is asked to answer here.

use super::group::GroupObject;
use super::latch::LatchObject;
use super::lock::LockObject;
use super::rwlock::RwLockObject;
use super::semaphore::SemaphoreObject;
use super::stats::ObjectKind;
use super::wait::Object;

/// What objects of `kind` do around their queue.
pub fn of(kind: ObjectKind) -> &'static dyn Object {
    match kind {
        ObjectKind::Lock => &LockObject,
        ObjectKind::RwLock => &RwLockObject,
        ObjectKind::Semaphore => &SemaphoreObject,
        ObjectKind::Latch => &LatchObject,
        ObjectKind::GroupLock => &GroupObject,
    }
}

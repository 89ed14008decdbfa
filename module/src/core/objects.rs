//! What the skin asks of each kind of object as a whole, rather than of one queued request
//! ([`super::wait::Pending`]). The matches are exhaustive: a new kind of object is asked to
//! answer each here.

use super::lock::LockWait;
use super::names;
use super::rwlock::{Mode, RwWait};
use super::stats::ObjectKind;
use super::store::Store;
use super::wait::Hold;

/// The objects of `kind` that `key` may be an auxiliary key of (a semaphore's leased-permit
/// set `{name}:timeout`): a change to `key` made outside rlock (Redisson's scripts lease,
/// release or re-lease permits there) may free them, or move their next lease end.
pub fn owners_of_aux(kind: ObjectKind, key: &[u8]) -> Vec<Vec<u8>> {
    match kind {
        ObjectKind::Semaphore => names::semaphores_of_timeouts(key),
        // A lock's fencing counter and a read hold's lease key are written with the object
        // and change nothing a waiter waits for by themselves; a latch has one key.
        ObjectKind::Lock | ObjectKind::RwLock | ObjectKind::Latch => Vec::new(),
    }
}

/// Whether `owner` holds the exclusive (a lock, a write lock) or shared (a read lock) side of
/// the `kind` object whose keys `store` reads, and until when (`None` inside: no expiry):
/// what a tracked hold is checked against (`RLOCK.TOP HELD`). `None` when it does not; always
/// for objects without owners.
pub fn held_until(
    kind: ObjectKind,
    owner: &[u8],
    exclusive: bool,
    store: &dyn Store,
) -> Option<Option<i64>> {
    match kind {
        ObjectKind::Lock => LockWait {
            owner: owner.into(),
            lease_ms: 1,
            fence: false,
        }
        .held_until(store),
        ObjectKind::RwLock => RwWait {
            owner: owner.into(),
            mode: if exclusive { Mode::Write } else { Mode::Read },
            lease_ms: 1,
        }
        .held_until(store),
        ObjectKind::Semaphore | ObjectKind::Latch => None,
    }
}

//! What the skin asks of each kind of object as a whole, rather than of one queued request
//! ([`super::wait::Pending`]). The matches are exhaustive: a new kind of object is asked to
//! answer each here.

use super::names;
use super::stats::ObjectKind;

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

//! Reading the lock's layout: the hash's mode, readers and writer, and the read holds' lease
//! keys.

use super::{Mode, MODE, WRITE_SUFFIX};
use crate::core::args;
use crate::core::error::CmdError;
use crate::core::names;
use crate::core::store::{KeyType, Store, Target};

pub(super) fn writer_field(owner: &[u8]) -> Vec<u8> {
    [owner, WRITE_SUFFIX].concat()
}

/// The key of `owner`'s `k`-th read hold.
pub(super) fn hold_key(store: &(impl Store + ?Sized), owner: &[u8], k: i64) -> Target {
    Target::Aux(names::rwlock_hold(store.key_name(), owner, k))
}

/// The mode of a hash: `None` for a hash that is not a read-write lock (no valid `mode`).
pub(super) fn read_mode(store: &(impl Store + ?Sized)) -> Option<Mode> {
    match store.hget(&Target::Main, MODE).as_deref() {
        Some(b"read") => Some(Mode::Read),
        Some(b"write") => Some(Mode::Write),
        _ => None,
    }
}

/// Everything in the hash: the mode, readers with their counts, the writer.
#[derive(Debug, Default)]
pub(super) struct Holders {
    pub(super) mode: Option<Mode>,
    pub(super) readers: Vec<(Vec<u8>, i64)>,
    pub(super) writer: Option<(Vec<u8>, i64)>,
}

pub(super) fn holders(store: &(impl Store + ?Sized)) -> Holders {
    let mut h = Holders::default();
    for (field, value) in store.hgetall(&Target::Main) {
        if field == MODE {
            h.mode = Mode::of(&value).filter(|_| value == b"read" || value == b"write");
            continue;
        }
        let count = args::parse_i64(&value).unwrap_or(0);
        match field.strip_suffix(WRITE_SUFFIX) {
            Some(w) => h.writer = Some((w.to_vec(), count)),
            None => h.readers.push((field, count)),
        }
    }
    h
}

/// Expiry times of `owner`'s live read holds (1..=count).
pub(super) fn hold_expiries(
    store: &(impl Store + ?Sized),
    owner: &[u8],
    count: i64,
) -> Vec<Option<i64>> {
    (1..=count.clamp(0, MAX_HOLDS_SCANNED))
        .filter_map(|k| {
            let key = hold_key(store, owner, k);
            (store.kind(&key) != KeyType::Empty).then(|| store.expire_at(&key))
        })
        .collect()
}

/// Whether a writer's field (`<owner>:write` with a count above 0) is in the hash: read
/// field by field, stopping at it.
pub(super) fn writer_holds(store: &(impl Store + ?Sized)) -> bool {
    let mut found = false;
    store.hvisit(&Target::Main, &mut |field, value| {
        found = field.ends_with(WRITE_SUFFIX) && args::parse_i64(value).is_some_and(|n| n > 0);
        !found
    });
    found
}

/// Whether any of `owner`'s read holds (1..=count) still has its lease key. Newest first: it
/// is the likeliest to be alive, and the scan stops there.
pub(super) fn has_live_hold(store: &(impl Store + ?Sized), owner: &[u8], count: i64) -> bool {
    (1..=count.clamp(0, MAX_HOLDS_SCANNED))
        .rev()
        .any(|k| store.kind(&hold_key(store, owner, k)) != KeyType::Empty)
}

/// Read holds of one owner looked at (a count beyond this was not written by a lock client).
pub(super) const MAX_HOLDS_SCANNED: i64 = 100_000;

pub(super) fn lease_at(store: &(impl Store + ?Sized), lease_ms: i64) -> Result<i64, CmdError> {
    args::deadline(store.now(), lease_ms, "lease_ms")
}

/// The hash's expiry after a hold with expiry `at` is added: never shortened.
pub(super) fn extended(store: &(impl Store + ?Sized), at: i64) -> i64 {
    store.expire_at(&Target::Main).map_or(at, |cur| cur.max(at))
}

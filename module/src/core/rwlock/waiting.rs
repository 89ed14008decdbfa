//! The read-write lock around its queue: tidying before serving, when it changes by itself,
//! and the queued request ([`RwLockRequest`]) with its hold.

use super::layout::*;
use super::rules::*;
use super::{Mode, MODE, WRITE_SUFFIX};
use crate::core::decision::{Decision, Reply};
use crate::core::error::CmdError;
use crate::core::names;
use crate::core::stats::ObjectKind;
use crate::core::store::{Int, KeyType, Store, Target};
use crate::core::wait::{Hold, Object, Request, Tidy, TryGrant};

/// Writes that bring the lock up to date before its queue is served, or when a hold's own
/// lease ends although nobody waits: expired read holds go (a bounded few at a time when
/// there are many readers).
pub fn tidy_before_serving(store: &dyn Store) -> Result<Decision<'static>, CmdError> {
    if many_readers(store) {
        return Ok(tidy_some(store, TIDY_BUDGET));
    }
    tidy(store)
}

/// When the lock changes by itself: the earliest lease end of any hold.
pub fn next_change(store: &dyn Store) -> Option<i64> {
    if many_readers(store) {
        // The hash's TTL: the longest hold's end (every release keeps it so), when the
        // last reader a writer waits for is gone, or the write lease a reader waits for.
        return store.expire_at(&Target::Main);
    }
    // The earliest lease end of any hold: a reader's hold key, or the hash itself.
    let mut earliest = store.expire_at(&Target::Main);
    for (owner, count) in holders(store).readers {
        for e in hold_expiries(store, &owner, count).into_iter().flatten() {
            earliest = Some(earliest.map_or(e, |x| x.min(e)));
        }
    }
    earliest
}

/// The read-write lock around its queue: its holds have leases of their own (a reader's hold
/// key), so expired read holds are tidied away before serving and when they end although
/// nobody waits; it changes by itself at the earliest lease end.
pub struct RwLockObject;

impl Object for RwLockObject {
    fn kind(&self) -> ObjectKind {
        ObjectKind::RwLock
    }

    fn tidy(&self, store: &dyn Store) -> Result<Tidy, CmdError> {
        Ok(Tidy {
            before: tidy_before_serving(store)?,
            after_serving: Decision::default(),
        })
    }

    fn wake_at(&self, store: &dyn Store) -> Option<i64> {
        next_change(store)
    }

    fn held_until(&self, owner: &[u8], exclusive: bool, store: &dyn Store) -> Option<Option<i64>> {
        if store.kind(&Target::Main) != KeyType::Hash || read_mode(store).is_none() {
            return None;
        }
        if exclusive {
            return match store.hget_int(&Target::Main, &writer_field(owner)) {
                Int::Is(n) if n >= 1 => Some(store.expire_at(&Target::Main)),
                _ => None,
            };
        }
        let Int::Is(n) = store.hget_int(&Target::Main, owner) else {
            return None;
        };
        // Held while any of its read holds lives; it ends with the last of them.
        let ends = hold_expiries(store, owner, n);
        if ends.is_empty() {
            return None;
        }
        Some(ends.iter().try_fold(i64::MIN, |m, e| e.map(|e| m.max(e))))
    }

    fn holders_upto(&self, store: &dyn Store, limit: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        if limit == 0 {
            return out;
        }
        store.hvisit(&Target::Main, &mut |field, _| {
            if field != MODE {
                match field.strip_suffix(WRITE_SUFFIX) {
                    Some(w) => out.push((w.to_vec(), true)),
                    None => out.push((field.to_vec(), false)),
                }
            }
            out.len() < limit
        });
        out
    }
}

/// A queued `RRWLOCK.ACQUIRE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwLockRequest {
    pub owner: Box<[u8]>,
    pub mode: Mode,
    pub lease_ms: i64,
}

impl Request for RwLockRequest {
    fn object(&self) -> &'static dyn Object {
        &RwLockObject
    }

    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_> {
        // At the head of the queue nobody is overtaken: decide as if no one else waited.
        match acquire(store, &self.owner, self.mode, self.lease_ms, false, true) {
            Ok(Acquire::Grant(d, _)) => TryGrant::Grant(d),
            Ok(Acquire::Busy | Acquire::TidyFirst) => TryGrant::Wait,
            // An upgrade (its read holds were taken after it queued) waits for them: the
            // owner may release them; the deadline ends the wait otherwise.
            Err(CmdError::Deadlock(_)) => TryGrant::Wait,
            Err(e) => TryGrant::Fail(e),
        }
    }

    fn undo(&self, _granted: &Reply, store: &dyn Store) -> Option<Decision<'_>> {
        let field = match self.mode {
            Mode::Read => self.owner.to_vec(),
            Mode::Write => writer_field(&self.owner),
        };
        // Only the untouched grant (one hold) is undone.
        if store.hget_int(&Target::Main, &field) != Int::Is(1) {
            return None;
        }
        release(store, &self.owner, self.mode).ok().map(|(d, _)| d)
    }

    fn aux_keys(&self, store: &dyn Store) -> Vec<Vec<u8>> {
        match (self.mode, store.hget_int(&Target::Main, &self.owner)) {
            (Mode::Read, Int::Is(n)) => vec![names::rwlock_hold(
                store.key_name(),
                &self.owner,
                n.max(0) + 1,
            )],
            (Mode::Read, _) => vec![names::rwlock_hold(store.key_name(), &self.owner, 1)],
            (Mode::Write, _) => Vec::new(),
        }
    }

    fn show(&self) -> Reply {
        Reply::Array(vec![
            Reply::Bulk(self.owner.to_vec()),
            Reply::Bulk(self.mode.word().to_vec()),
        ])
    }

    fn holds(&self) -> Option<&dyn Hold> {
        Some(self)
    }
}

impl Hold for RwLockRequest {
    fn owner(&self) -> &[u8] {
        &self.owner
    }

    fn exclusive(&self) -> bool {
        self.mode == Mode::Write
    }

    /// The hold just granted ends `lease_ms` from now: the end of the owner's hold, or before
    /// it when an earlier read hold of a longer lease lives on (a look then finds it still
    /// held and looks again at its real end).
    fn granted_until(&self, now: i64) -> Option<Option<i64>> {
        Some(Some(now.saturating_add(self.lease_ms)))
    }
}

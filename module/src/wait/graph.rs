//! The deadlock-graph adapter: the owner index (who waits where) kept beside the queues, and
//! the wait-for graph `core::wait::deadlock` searches, read from the queues and the keys.

use super::{state, Handle, State};
use crate::config;
use crate::core::error::CmdError;
use crate::core::stats::{self};
use crate::core::store::Store;
use crate::core::wait::deadlock::{self, Place};
use crate::core::wait::{fifo, KeyId, Req, Waiter};
use crate::ffi::Ctx;
use crate::keys::RedisKeys;
use std::collections::HashSet;

/// An owner within a database (the same name in two databases is two owners), as a hash:
/// the index keeps no copy of the name (a queued request's memory matters when thousands
/// wait). Two owners with the same hash share an entry; readers of the index check the
/// waiter's own owner and database.
pub(super) type OwnerId = u64;

pub(super) fn owner_id(db: i32, owner: &[u8]) -> OwnerId {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(Default::default).hash_one((db, owner))
}

/// The waits of one owner: nearly always one, kept in a short list; an owner that waits many
/// times (thousands of requests of one owner through a session) gets a set, so that one of
/// them leaving does not scan the others.
pub(super) enum OwnerWaits {
    Few(smallvec::SmallVec<[Handle; 1]>),
    Many(HashSet<Handle, foldhash::fast::RandomState>),
}

/// Waits of one owner kept in a list before they move to a set.
pub(super) const FEW_WAITS: usize = 16;

impl Default for OwnerWaits {
    fn default() -> Self {
        OwnerWaits::Few(smallvec::SmallVec::new())
    }
}

impl OwnerWaits {
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(super) fn len(&self) -> usize {
        match self {
            OwnerWaits::Few(v) => v.len(),
            OwnerWaits::Many(s) => s.len(),
        }
    }

    pub(super) fn push(&mut self, h: Handle) {
        match self {
            OwnerWaits::Few(v) if v.len() < FEW_WAITS => v.push(h),
            OwnerWaits::Few(v) => {
                let mut set: HashSet<Handle, _> = v.drain(..).collect();
                set.insert(h);
                *self = OwnerWaits::Many(set);
            }
            OwnerWaits::Many(s) => {
                s.insert(h);
            }
        }
    }

    pub(super) fn remove(&mut self, h: Handle) {
        match self {
            OwnerWaits::Few(v) => v.retain(|x| *x != h),
            OwnerWaits::Many(s) => {
                s.remove(&h);
                if s.capacity() > 64 && s.len() * 4 < s.capacity() {
                    s.shrink_to(s.len() * 2);
                }
            }
        }
    }

    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = &Handle> + '_> {
        match self {
            OwnerWaits::Few(v) => Box::new(v.iter()),
            OwnerWaits::Many(s) => Box::new(s.iter()),
        }
    }
}

impl State {
    pub(super) fn index(&mut self, db: i32, waiter: &Waiter<Handle, Req>) {
        if let Some(o) = waiter.req.owner() {
            let id = owner_id(db, o);
            let hs = self.by_owner.entry(id).or_default();
            hs.push(waiter.handle);
            match hs.len() {
                2 => {
                    self.multi.insert(id);
                    self.multi_waits += 2;
                }
                n if n > 2 => self.multi_waits += 1,
                _ => {}
            }
        }
    }

    pub(super) fn unindex(&mut self, db: i32, waiter: &Waiter<Handle, Req>) {
        if let Some(o) = waiter.req.owner() {
            self.unindex_owner(owner_id(db, o), waiter.handle);
        }
    }

    /// `unindex` of many owners' waits (bucket, owner, handle), in the owner index's memory
    /// order (see `withdraw_all`).
    pub(super) fn unindex_many(&mut self, mut owners: Vec<(u64, OwnerId, Handle)>) {
        owners.sort_unstable_by_key(|(bucket, ..)| *bucket);
        for (_, oid, handle) in owners {
            self.unindex_owner(oid, handle);
        }
    }

    pub(super) fn unindex_owner(&mut self, id: OwnerId, handle: Handle) {
        if let Some(hs) = self.by_owner.get_mut(&id) {
            let before = hs.len();
            hs.remove(handle);
            match (before, hs.len()) {
                (2, 1) => {
                    self.multi.remove(&id);
                    self.multi_waits -= 2;
                }
                (b, a) if a < b && a >= 2 => self.multi_waits -= 1,
                _ => {}
            }
            if hs.is_empty() {
                self.by_owner.remove(&id);
                fifo::shrink(&mut self.by_owner);
            }
        }
    }
}

/// The wait-for graph of one database, read from the queues and the keys. Its keys are queue
/// ids; the key the new request is about to wait on may have no queue yet (`new`).
pub(super) struct WaitGraph<'a> {
    ctx: Ctx,
    db: i32,
    s: &'a State,
    new: (&'a KeyId, &'a Req, &'a RedisKeys),
    /// Holders read of one key at most: one more than the search may look at tells it the
    /// key is too large, without reading thousands of readers.
    holders_max: usize,
}

impl WaitGraph<'_> {
    /// The request in slot `pos` of `key`'s queue. Positions are slots (see
    /// `KeyQueue::slots`): a slot whose waiter left reads as a request without owner, which
    /// leads nowhere, as a waiter that is not there.
    pub(super) fn at(&self, key: &KeyId, pos: usize) -> Option<&Req> {
        let req = self.s.queues.get(key)?.at(pos).map(|w| &w.req)?;
        // A grouped MultiLock's waiter waits for those ahead only on shared values, which a
        // search by key cannot tell: its queue shows no edges (never a false DEADLOCK).
        req.values().is_none().then_some(req)
    }
}

impl deadlock::Graph for WaitGraph<'_> {
    type Owner = Box<[u8]>;
    type Key = KeyId;

    fn holders(&self, key: &KeyId) -> Vec<(Box<[u8]>, bool)> {
        let held = |req: &Req, keys: &RedisKeys| {
            let hs = req.object().holders_upto(keys, self.holders_max);
            let hs = hs.into_iter();
            hs.map(|(o, x)| (o.into_boxed_slice(), x)).collect()
        };
        let (new_key, new_req, new_keys) = self.new;
        if key == new_key {
            return held(new_req, new_keys);
        }
        match self.s.queues.get(key).and_then(|q| q.front()) {
            Some(w) => held(&w.req, &RedisKeys::peek(self.ctx, &key.key)),
            None => Vec::new(),
        }
    }

    fn queue_len(&self, key: &KeyId) -> usize {
        self.s.queues.get(key).map_or(0, |q| q.slots())
    }

    fn exclusive_at(&self, key: &KeyId, pos: usize) -> Option<bool> {
        let req = self.at(key, pos)?;
        req.holds().map(|h| h.exclusive())
    }

    fn owner_at(&self, key: &KeyId, pos: usize) -> Option<Box<[u8]>> {
        self.at(key, pos)?.owner().map(Box::from)
    }

    fn waits(&self, owner: &Box<[u8]>) -> Vec<Place<KeyId>> {
        let Some(handles) = self.s.by_owner.get(&owner_id(self.db, owner)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for h in handles.iter() {
            let Some((id, pos, w)) = self.s.queues.locate(*h) else {
                continue;
            };
            if id.db != self.db || w.req.owner() != Some(&owner[..]) {
                continue; // another owner with the same hash
            }
            if w.req.values().is_some() {
                continue; // a grouped MultiLock's wait shows no edges (see `at`)
            }
            out.push(Place {
                key: id.clone(),
                pos,
                exclusive: w.req.holds().is_none_or(|h| h.exclusive()),
            });
        }
        out
    }

    fn multi(&self) -> Vec<Box<[u8]>> {
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut out: Vec<Box<[u8]>> = Vec::new();
        for id in &self.s.multi {
            for h in self
                .s
                .by_owner
                .get(id)
                .into_iter()
                .flat_map(OwnerWaits::iter)
            {
                let Some((key, w)) = self.s.queues.find(*h) else {
                    continue;
                };
                if let Some(o) = w.req.owner().filter(|_| key.db == self.db) {
                    if seen.insert(o) {
                        out.push(o.into());
                    }
                }
            }
        }
        out
    }
}

/// Refuse `req` (about to wait on the command's key) when its owner would close a cycle of
/// owners waiting for one another on this server.
pub fn check_deadlock(ctx: Ctx, keys: &RedisKeys, req: &Req) -> Result<(), CmdError> {
    let Some(owner) = req.owner() else {
        return Ok(());
    };
    let db = ctx.db();
    let budget = config::deadlock_max_steps();
    let found = state(|s| {
        if s.by_owner.is_empty() {
            return Ok(None); // nobody waits anywhere: no cycle can close
        }
        // The search reads every wait of the owners that wait more than once before it
        // starts: more of them than the budget is a graph too large to search.
        if s.multi_waits > budget {
            return Err(deadlock::Exhausted);
        }
        let id = KeyId::new(db, keys.key_name());
        let graph = WaitGraph {
            ctx,
            db,
            s,
            new: (&id, req, keys),
            holders_max: budget.saturating_add(1),
        };
        let owner = Box::from(owner);
        let exclusive = req.holds().is_none_or(|h| h.exclusive());
        deadlock::search(&graph, &owner, &id, exclusive, budget)
    });
    let steps = match found {
        Ok(Some(steps)) => steps,
        Ok(None) => return Ok(()),
        Err(deadlock::Exhausted) => {
            // Admitted undecided, as without detection.
            stats::DEADLOCK_CHECKS_EXHAUSTED.incr();
            return Ok(());
        }
    };
    // Refused only when the caller may read every key of the cycle. Owners are names anyone
    // may use: on keys the caller cannot see, another ACL user could queue waits under the
    // caller's own owner names and so have the caller's sound waits refused, and learn from
    // the error who waits for whom among the caller's owners. What the caller may read it
    // could list anyway (`RLOCK.INFO` shows a key's holder and queue), and there a fake wait
    // costs the caller no more than a lock held against it. A cycle through an unseen key is
    // admitted undecided, as without detection (its waits end by their timeouts), and counted.
    if !steps.iter().all(|st| ctx.may_read_key(&st.key.key)) {
        stats::DEADLOCK_CYCLES_UNSEEN.incr();
        return Ok(());
    }
    stats::DEADLOCKS.incr();
    let echo = crate::core::error::echo;
    let key_name = |k: &[u8]| format!("'{}'", echo(k));
    let hops: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let next = &steps[(i + 1) % steps.len()].owner;
            format!(
                "'{}' waits for '{}' on {}",
                echo(&st.owner),
                echo(next),
                key_name(&st.key.key)
            )
        })
        .collect();
    Err(CmdError::Deadlock(format!(
        "waiting would close a cycle: {}",
        hops.join(", ")
    )))
}

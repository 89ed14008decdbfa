//! The holds rlock granted that have not ended yet, oldest first, in bounded memory: what
//! `RLOCK.TOP HELD` lists and where a hold's start is kept until its end is timed.
//!
//! A hold is an owner's hold of one side of a key in a database: exclusive (a lock, a write
//! lock) or shared (a read lock). A re-entry is the same hold; a read and a write hold of one
//! owner on one key are two. The table learns a hold's start from the grant and its end from a
//! release, a force release, or an event that removed the key; an end it never sees (a read
//! hold's own lease ran out while the lock lived on, a Redisson script released it) is found
//! when the hold is looked at again ([`Live::remove`] after a look at the keys) or when the
//! same hold, or an exclusive one, is granted again on the key ([`Live::start`],
//! [`Live::end_others`]).
//!
//! Every operation costs O(1) (a hash look-up and a few links), whatever the number of holds,
//! except those that end every hold on a key (O(holds there)) or in a database (O(table)):
//! entries sit in a slab, linked three ways: in start order (the report walks it from the
//! oldest), with the other holds of their key, and with the entries of the same hash bucket.
//! The maps hold 64-bit fingerprints, so finding a hold hashes the caller's bytes without
//! copying them; a fingerprint shared by two holds only lengthens a chain, every match is
//! checked on the bytes. Entries come in start order, so a table that is full refuses new
//! holds and keeps the oldest ones, which the report wants.

use crate::core::stats::ObjectKind;
use crate::core::wait::HashMap;
use std::hash::BuildHasher;

const NIL: u32 = u32::MAX;

/// Which hold: `owner`'s exclusive or shared hold of `key` in database `db`.
#[derive(Clone, Copy, Debug)]
pub struct HoldId<'a> {
    pub db: i32,
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub exclusive: bool,
}

/// A tracked hold, copied out of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub db: i32,
    pub key: Vec<u8>,
    pub owner: Vec<u8>,
    pub exclusive: bool,
    pub kind: ObjectKind,
    pub since_us: u64,
}

/// Where a tracked hold sits, while it is tracked (a slot reused later has another
/// generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    slot: u32,
    gen: u32,
}

/// What [`Live::start`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    Tracked,
    /// The same hold was tracked already: it ended without the table seeing it (its lease ran
    /// out, a script released it) and starts again now.
    Restarted,
    /// The table is full: this hold is not tracked.
    Full,
}

/// An ended hold: its kind and when it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    pub kind: ObjectKind,
    pub since_us: u64,
}

struct Slot {
    gen: u32,
    live: bool,
    db: i32,
    exclusive: bool,
    kind: ObjectKind,
    key_len: usize,
    /// The key's bytes, then the owner's (the buffer is kept when the slot is reused).
    bytes: Vec<u8>,
    since_us: u64,
    hold_fp: u64,
    key_fp: u64,
    /// Start order.
    older: u32,
    newer: u32,
    /// The other entries of the same key fingerprint.
    key_prev: u32,
    key_next: u32,
    /// The next entry of the same hold fingerprint.
    same_fp: u32,
}

impl Slot {
    fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    fn owner(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }

    fn is(&self, id: &HoldId) -> bool {
        self.live
            && self.db == id.db
            && self.exclusive == id.exclusive
            && self.key() == id.key
            && self.owner() == id.owner
    }

    fn on(&self, db: i32, key: &[u8]) -> bool {
        self.live && self.db == db && self.key() == key
    }
}

pub struct Live {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_hold: HashMap<u64, u32>,
    by_key: HashMap<u64, u32>,
    oldest: u32,
    newest: u32,
    len: usize,
    /// The next entry a walk of the report visits ([`Live::walk`]); moved on when that entry
    /// is removed, so removals during a walk never lose its place.
    cursor: u32,
    hasher: foldhash::fast::RandomState,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            slots: Vec::new(),
            free: Vec::new(),
            by_hold: HashMap::default(),
            by_key: HashMap::default(),
            oldest: NIL,
            newest: NIL,
            len: 0,
            cursor: NIL,
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl Live {
    /// Holds tracked now.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hold_fp(&self, id: &HoldId) -> u64 {
        self.hasher
            .hash_one((id.db, id.exclusive, id.key, id.owner))
    }

    fn key_fp(&self, db: i32, key: &[u8]) -> u64 {
        self.hasher.hash_one((db, key))
    }

    fn find(&self, id: &HoldId, fp: u64) -> Option<u32> {
        let mut i = *self.by_hold.get(&fp)?;
        while i != NIL {
            let s = &self.slots[i as usize];
            if s.is(id) {
                return Some(i);
            }
            i = s.same_fp;
        }
        None
    }

    /// Track `id`, a `kind` hold granted at `now_us`, unless `len() >= cap` (a hold tracked
    /// already restarts at `now_us` whatever the cap: its entry is reused).
    pub fn start(&mut self, id: HoldId, kind: ObjectKind, now_us: u64, cap: usize) -> Start {
        let fp = self.hold_fp(&id);
        if let Some(i) = self.find(&id, fp) {
            self.unlink_age(i);
            let s = &mut self.slots[i as usize];
            s.since_us = now_us;
            s.kind = kind;
            self.link_newest(i);
            return Start::Restarted;
        }
        if self.len >= cap {
            return Start::Full;
        }
        let key_fp = self.key_fp(id.db, id.key);
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    gen: 0,
                    live: false,
                    db: 0,
                    exclusive: false,
                    kind,
                    key_len: 0,
                    bytes: Vec::new(),
                    since_us: 0,
                    hold_fp: 0,
                    key_fp: 0,
                    older: NIL,
                    newer: NIL,
                    key_prev: NIL,
                    key_next: NIL,
                    same_fp: NIL,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let head_fp = self.by_hold.insert(fp, i).unwrap_or(NIL);
        let head_key = self.by_key.insert(key_fp, i).unwrap_or(NIL);
        if head_key != NIL {
            self.slots[head_key as usize].key_prev = i;
        }
        let s = &mut self.slots[i as usize];
        s.live = true;
        s.db = id.db;
        s.exclusive = id.exclusive;
        s.kind = kind;
        s.key_len = id.key.len();
        s.bytes.clear();
        s.bytes.extend_from_slice(id.key);
        s.bytes.extend_from_slice(id.owner);
        s.since_us = now_us;
        s.hold_fp = fp;
        s.key_fp = key_fp;
        s.same_fp = head_fp;
        s.key_prev = NIL;
        s.key_next = head_key;
        self.link_newest(i);
        self.len += 1;
        Start::Tracked
    }

    /// Stop tracking `id` (its owner released it): when it started, if it was tracked.
    pub fn end(&mut self, id: HoldId) -> Option<Ended> {
        let i = self.find(&id, self.hold_fp(&id))?;
        Some(self.free_slot(i))
    }

    /// Stop tracking every hold on `key` of `db` (force release, expiry, deletion), each
    /// handed to `ended`.
    pub fn end_key(&mut self, db: i32, key: &[u8], mut ended: impl FnMut(Ended)) {
        if self.len == 0 {
            return;
        }
        let Some(&head) = self.by_key.get(&self.key_fp(db, key)) else {
            return;
        };
        let mut i = head;
        while i != NIL {
            let next = self.slots[i as usize].key_next;
            if self.slots[i as usize].on(db, key) {
                ended(self.free_slot(i));
            }
            i = next;
        }
    }

    /// Stop tracking every hold on `id`'s key but `id` itself: `id` was just granted
    /// exclusively, so no other hold there can be alive (they ended unseen). How many went.
    pub fn end_others(&mut self, id: HoldId) -> usize {
        let Some(&head) = self.by_key.get(&self.key_fp(id.db, id.key)) else {
            return 0;
        };
        let mut gone = 0;
        let mut i = head;
        while i != NIL {
            let s = &self.slots[i as usize];
            let next = s.key_next;
            if s.on(id.db, id.key) && !s.is(&id) {
                self.free_slot(i);
                gone += 1;
            }
            i = next;
        }
        gone
    }

    /// Stop tracking every hold of the databases `db` selects (a flush), each handed to
    /// `ended`.
    pub fn end_dbs(&mut self, db: impl Fn(i32) -> bool, mut ended: impl FnMut(Ended)) {
        let mut i = self.oldest;
        while i != NIL {
            let s = &self.slots[i as usize];
            let next = s.newer;
            if db(s.db) {
                ended(self.free_slot(i));
            }
            i = next;
        }
    }

    /// The tracked hold at `place`, if it is still tracked there.
    pub fn get(&self, place: Place) -> Option<Held> {
        let s = self.slots.get(place.slot as usize)?;
        (s.live && s.gen == place.gen).then(|| Held {
            db: s.db,
            key: s.key().to_vec(),
            owner: s.owner().to_vec(),
            exclusive: s.exclusive,
            kind: s.kind,
            since_us: s.since_us,
        })
    }

    /// Stop tracking the hold at `place` (it was found ended), if it is still tracked there.
    pub fn remove(&mut self, place: Place) -> Option<Ended> {
        let s = self.slots.get(place.slot as usize)?;
        (s.live && s.gen == place.gen).then(|| self.free_slot(place.slot))
    }

    /// Start a walk of the tracked holds from the oldest ([`Live::walk`]).
    pub fn walk_from_oldest(&mut self) {
        self.cursor = self.oldest;
    }

    /// The next `n` holds of the walk, oldest first, copied out; the walk goes on after them.
    /// Holds removed meanwhile are skipped; holds started meanwhile are visited if the walk
    /// has not reached the newest end yet.
    pub fn walk(&mut self, n: usize) -> Vec<(Place, Held)> {
        let mut out = Vec::new();
        while out.len() < n && self.cursor != NIL {
            let i = self.cursor;
            let place = Place {
                slot: i,
                gen: self.slots[i as usize].gen,
            };
            self.cursor = self.slots[i as usize].newer;
            out.extend(self.get(place).map(|h| (place, h)));
        }
        out
    }

    /// Forget everything (module load).
    pub fn clear(&mut self) {
        *self = Live::default();
    }

    fn link_newest(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.older = self.newest;
        s.newer = NIL;
        if self.newest != NIL {
            self.slots[self.newest as usize].newer = i;
        } else {
            self.oldest = i;
        }
        self.newest = i;
    }

    fn unlink_age(&mut self, i: u32) {
        let (older, newer) = {
            let s = &self.slots[i as usize];
            (s.older, s.newer)
        };
        if self.cursor == i {
            self.cursor = newer;
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
    }

    fn free_slot(&mut self, i: u32) -> Ended {
        self.unlink_age(i);
        let (key_prev, key_next, key_fp, hold_fp) = {
            let s = &self.slots[i as usize];
            (s.key_prev, s.key_next, s.key_fp, s.hold_fp)
        };
        // Out of its key's list.
        match key_prev {
            NIL => {
                if key_next == NIL {
                    self.by_key.remove(&key_fp);
                } else {
                    self.by_key.insert(key_fp, key_next);
                }
            }
            p => self.slots[p as usize].key_next = key_next,
        }
        if key_next != NIL {
            self.slots[key_next as usize].key_prev = key_prev;
        }
        // Out of its fingerprint's chain (almost always of length one).
        let next_same = self.slots[i as usize].same_fp;
        if self.by_hold.get(&hold_fp) == Some(&i) {
            if next_same == NIL {
                self.by_hold.remove(&hold_fp);
            } else {
                self.by_hold.insert(hold_fp, next_same);
            }
        } else if let Some(&head) = self.by_hold.get(&hold_fp) {
            let mut j = head;
            while j != NIL {
                let after = self.slots[j as usize].same_fp;
                if after == i {
                    self.slots[j as usize].same_fp = next_same;
                    break;
                }
                j = after;
            }
        }
        let s = &mut self.slots[i as usize];
        let ended = Ended {
            kind: s.kind,
            since_us: s.since_us,
        };
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        if s.bytes.capacity() > 256 {
            // A long key's buffer is not kept for the next hold.
            s.bytes = Vec::new();
        }
        self.free.push(i);
        self.len -= 1;
        if self.len == 0 && self.slots.len() > 1024 {
            // After a burst: give the slab and the maps back.
            let hasher = self.hasher.clone();
            *self = Live {
                hasher,
                ..Live::default()
            };
        }
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ObjectKind::{Lock, RwLock};

    fn id<'a>(key: &'a str, owner: &'a str) -> HoldId<'a> {
        HoldId {
            db: 0,
            key: key.as_bytes(),
            owner: owner.as_bytes(),
            exclusive: true,
        }
    }

    fn read<'a>(key: &'a str, owner: &'a str) -> HoldId<'a> {
        HoldId {
            exclusive: false,
            ..id(key, owner)
        }
    }

    fn walk_all(t: &mut Live) -> Vec<(String, String, u64)> {
        t.walk_from_oldest();
        t.walk(usize::MAX)
            .into_iter()
            .map(|(_, h)| {
                (
                    String::from_utf8(h.key).unwrap(),
                    String::from_utf8(h.owner).unwrap(),
                    h.since_us,
                )
            })
            .collect()
    }

    #[test]
    fn holds_come_out_oldest_first_and_end_once() {
        let mut t = Live::default();
        assert_eq!(t.start(id("a", "o1"), Lock, 10, 100), Start::Tracked);
        assert_eq!(t.start(id("b", "o2"), Lock, 20, 100), Start::Tracked);
        assert_eq!(t.start(read("c", "o3"), RwLock, 30, 100), Start::Tracked);
        assert_eq!(t.start(read("c", "o4"), RwLock, 40, 100), Start::Tracked);
        assert_eq!(t.len(), 4);
        assert_eq!(
            walk_all(&mut t),
            [
                ("a".into(), "o1".into(), 10),
                ("b".into(), "o2".into(), 20),
                ("c".into(), "o3".into(), 30),
                ("c".into(), "o4".into(), 40)
            ]
        );
        assert_eq!(
            t.end(id("b", "o2")),
            Some(Ended {
                kind: Lock,
                since_us: 20
            })
        );
        assert_eq!(t.end(id("b", "o2")), None, "ended once");
        assert_eq!(
            t.end(id("c", "o3")),
            None,
            "the exclusive side was never held"
        );
        assert_eq!(t.end(id("a", "o1x")), None);
        assert_eq!(t.len(), 3);
        assert_eq!(walk_all(&mut t).len(), 3);
    }

    #[test]
    fn a_key_ends_all_its_holds_and_only_them() {
        let mut t = Live::default();
        t.start(read("rw", "r1"), RwLock, 1, 100);
        t.start(id("other", "r1"), Lock, 2, 100);
        t.start(read("rw", "r2"), RwLock, 3, 100);
        t.start(
            HoldId {
                db: 1,
                ..read("rw", "r3")
            },
            RwLock,
            4,
            100,
        );
        let mut ended = Vec::new();
        t.end_key(0, b"rw", |e| ended.push(e.since_us));
        ended.sort_unstable();
        assert_eq!(ended, [1, 3]);
        assert_eq!(t.len(), 2, "the other key and the other database stay");
        assert!(t
            .end(HoldId {
                db: 1,
                ..read("rw", "r3")
            })
            .is_some());
    }

    #[test]
    fn an_exclusive_grant_drops_the_holds_it_proves_ended() {
        let mut t = Live::default();
        t.start(id("k", "old"), Lock, 1, 100);
        t.start(id("k", "new"), Lock, 2, 100);
        t.start(id("j", "old"), Lock, 3, 100);
        assert_eq!(t.end_others(id("k", "new")), 1);
        assert_eq!(
            walk_all(&mut t),
            [("k".into(), "new".into(), 2), ("j".into(), "old".into(), 3)]
        );
    }

    #[test]
    fn a_restart_moves_the_hold_to_the_newest_end_even_when_full() {
        let mut t = Live::default();
        t.start(id("a", "o"), Lock, 1, 2);
        t.start(id("b", "o"), Lock, 2, 2);
        assert_eq!(t.start(id("c", "o"), Lock, 3, 2), Start::Full);
        assert_eq!(t.start(id("a", "o"), Lock, 4, 2), Start::Restarted);
        assert_eq!(
            walk_all(&mut t),
            [("b".into(), "o".into(), 2), ("a".into(), "o".into(), 4)]
        );
    }

    #[test]
    fn a_walk_survives_removals_and_flushes() {
        let mut t = Live::default();
        for (i, k) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            t.start(id(k, "o"), Lock, i as u64, 100);
        }
        t.walk_from_oldest();
        let first = t.walk(2);
        assert_eq!(first.len(), 2);
        // The next one ends while the walk is away (an event), and a found one is removed.
        t.end(id("c", "o"));
        assert!(t.remove(first[0].0).is_some());
        assert!(t.remove(first[0].0).is_none(), "removed once");
        assert!(t.get(first[0].0).is_none());
        let rest: Vec<_> = t.walk(10).into_iter().map(|(_, h)| h.key).collect();
        assert_eq!(rest, [b"d".to_vec(), b"e".to_vec()]);
        let mut n = 0;
        t.end_dbs(|db| db == 0, |_| n += 1);
        assert_eq!(n, 3);
        assert!(t.is_empty());
    }

    #[test]
    fn slots_are_reused_and_a_stale_place_finds_nothing() {
        let mut t = Live::default();
        t.start(id("a", "o"), Lock, 1, 100);
        t.walk_from_oldest();
        let (place, _) = t.walk(1).pop().unwrap();
        t.end(id("a", "o"));
        t.start(id("b", "o"), Lock, 2, 100);
        assert_eq!(t.get(place), None, "the slot holds another hold now");
        assert_eq!(t.slots.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Start(u8, u8, bool),
        End(u8, u8, bool),
        EndKey(u8),
        EndOthers(u8, u8),
        Walk(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..6, 0u8..4, any::<bool>()).prop_map(|(k, o, x)| Op::Start(k, o, x)),
            3 => (0u8..6, 0u8..4, any::<bool>()).prop_map(|(k, o, x)| Op::End(k, o, x)),
            1 => (0u8..6).prop_map(Op::EndKey),
            1 => (0u8..6, 0u8..4).prop_map(|(k, o)| Op::EndOthers(k, o)),
            1 => (0usize..4).prop_map(Op::Walk),
        ]
    }

    proptest! {
        /// Against a plain list in start order: the same holds, the same order, the same
        /// start times, the cap kept; a walk taken in steps with removals between them visits
        /// each hold still tracked once.
        #[test]
        fn behaves_as_a_list_in_start_order(ops in prop::collection::vec(op(), 0..300), cap in 1usize..12) {
            let mut t = Live::default();
            let mut model: Vec<(u8, u8, bool, u64)> = Vec::new();
            let keys: Vec<String> = (0..6).map(|k| format!("key:{k}")).collect();
            let owners: Vec<String> = (0..4).map(|o| format!("owner:{o}")).collect();
            let hid = |k: u8, o: u8, x: bool| HoldId { db: 0, key: keys[k as usize].as_bytes(), owner: owners[o as usize].as_bytes(), exclusive: x };
            t.walk_from_oldest();
            for (now, op) in ops.into_iter().enumerate() {
                let now = now as u64;
                match op {
                    Op::Start(k, o, x) => {
                        let got = t.start(hid(k, o, x), Lock, now, cap);
                        match model.iter().position(|m| (m.0, m.1, m.2) == (k, o, x)) {
                            Some(p) => {
                                prop_assert_eq!(got, Start::Restarted);
                                model.remove(p);
                                model.push((k, o, x, now));
                            }
                            None if model.len() >= cap => prop_assert_eq!(got, Start::Full),
                            None => {
                                prop_assert_eq!(got, Start::Tracked);
                                model.push((k, o, x, now));
                            }
                        }
                    }
                    Op::End(k, o, x) => {
                        let got = t.end(hid(k, o, x)).map(|e| e.since_us);
                        let want = model.iter().position(|m| (m.0, m.1, m.2) == (k, o, x)).map(|p| model.remove(p).3);
                        prop_assert_eq!(got, want);
                    }
                    Op::EndKey(k) => {
                        let mut got = Vec::new();
                        t.end_key(0, keys[k as usize].as_bytes(), |e| got.push(e.since_us));
                        got.sort_unstable();
                        let want: Vec<u64> = model.iter().filter(|m| m.0 == k).map(|m| m.3).collect();
                        model.retain(|m| m.0 != k);
                        prop_assert_eq!(got, want);
                    }
                    Op::EndOthers(k, o) => {
                        let gone = t.end_others(hid(k, o, true));
                        let before = model.len();
                        model.retain(|m| m.0 != k || (m.1, m.2) == (o, true));
                        prop_assert_eq!(gone, before - model.len());
                    }
                    Op::Walk(n) => {
                        let seen = t.walk(n);
                        prop_assert!(seen.len() <= n);
                    }
                }
                prop_assert_eq!(t.len(), model.len());
            }
            let got: Vec<(String, String, u64)> = walk_all(&mut t);
            let want: Vec<(String, String, u64)> = model.iter().map(|m| (keys[m.0 as usize].clone(), owners[m.1 as usize].clone(), m.3)).collect();
            prop_assert_eq!(got, want);
        }
    }
}

//! The holds rlock granted that have not ended yet, in bounded memory: what `RLOCK.TOP HELD`
//! lists, oldest first, and where a hold's start is kept until its end is timed.
//!
//! A hold is an owner's hold of one side of a key in a database: exclusive (a lock, a write
//! lock) or shared (a read lock). A re-entry is the same hold; a read and a write hold of one
//! owner on one key are two. The table learns a hold's start from the grant and its end from a
//! release, a force release, or an event that removed the key. An end it never sees (a read
//! hold's own lease ran out while the lock lived on, a Redisson script released it) is found
//! when the hold is looked at in its keys ([`Live::remove`]), or when the same hold, or an
//! exclusive one, is granted again on the key ([`Live::start`]).
//!
//! Cost: this sits on every acquire and release, so a lock's start or end is one hash of its
//! key's name, one probe of one open-addressed array ([`index`]: each bucket the hash's low
//! bits beside a slot number) and a slot written or freed ([`slots`]: key and owner copied
//! in, compared in place when short; no allocation when they fit in 64 bytes). Tracking adds
//! about 450 instructions to a pipelined acquire + release pair (`scripts/instructions.sh`),
//! of the 13,200 the pair takes; the two clock readings, the thread-local state and the
//! module API calls around the table are about 120 of them. (Before: a `HashMap` by key
//! beside the slots, 620; a first design, with a map by hold and one by key and the holds
//! linked in start order, about twice that.) The index is by key: a key with one hold (every lock) leads to its
//! slot; a key with more (readers) leads to a small map of its own, by hold, so a read hold
//! among thousands is still found in O(1). Start order is not kept: the report sorts the
//! tracked holds by start (O(n log n) in the holds tracked, at most `rlock.top-max-holds`),
//! which costs an operator's call, not every grant. A full table refuses new holds and so
//! keeps the oldest ones, which the report wants.
//!
//! Tried and not kept: a short list of holds granted a moment ago in front of the table, where
//! a pipelined pair's release finds its acquire with a copy and a compare, the table's readers
//! taking the list in first. Tracking's cost per pipelined pair went from 845 to 623
//! instructions (`scripts/instructions.sh`), since copying and comparing the key and owner cost
//! about what the hash and probe do; the rest is the clock, the thread-local state and the
//! module API calls around it. Not worth a second structure with its own ordering rules.

use crate::core::stats::ObjectKind;
use index::Index;
use slots::Slab;
use std::hash::{BuildHasher, Hasher};

mod index;
mod slots;

pub use slots::Place;

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

/// A map by fingerprint. A fingerprint is a hash already (foldhash's): the map takes it as
/// its hash instead of hashing it again.
type ByFp<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<Fingerprint>>;

/// The "hasher" of [`ByFp`]: the fingerprint itself.
#[derive(Default)]
struct Fingerprint(u64);

impl std::hash::Hasher for Fingerprint {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input is folded in, still a valid hash.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
}

/// The holds of a key with more than one (readers): by hold fingerprint ([`Live::hold_fp`]).
struct Group {
    /// One of them, to tell the group's key.
    any: u32,
    holds: ByFp<u32>,
}

/// An index entry's value: a key's one hold (its slot + 1) or its group (this bit and the
/// group's number).
const GROUP: u32 = 1 << 31;

/// What a key's index entry leads to.
#[derive(Clone, Copy)]
enum Entry {
    One(u32),
    Group(u32),
}

impl Entry {
    #[inline]
    fn of(value: u32) -> Entry {
        match value & GROUP {
            0 => Entry::One(value - 1),
            _ => Entry::Group(value & !GROUP),
        }
    }

    fn value(self) -> u32 {
        match self {
            Entry::One(slot) => slot + 1,
            Entry::Group(g) => g | GROUP,
        }
    }
}

/// The index entry of `key` of `db`.
struct KeyOf<'a> {
    live: &'a Live,
    db: i32,
    key: &'a [u8],
}

impl index::Which for KeyOf<'_> {
    #[inline(always)]
    fn is(&self, v: u32) -> bool {
        self.live.slots[self.live.any_slot(v)].on(self.db, self.key)
    }
}

#[derive(Default)]
pub struct Live {
    /// Each key with tracked holds, by the hash of its database and key.
    index: Index,
    slots: Slab,
    groups: Vec<Option<Group>>,
    free_groups: Vec<u32>,
    /// Holds tracked.
    len: usize,
    hasher: foldhash::fast::RandomState,
    /// Tests: keep only this many low bits of each key's hash (0: all), to make keys collide.
    #[cfg(test)]
    fp_bits: u32,
}

impl Live {
    /// Holds tracked now.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The hash of a key's name. The database is left out (a key of one name in several
    /// databases shares its hash; the index tells them apart by the slot's database), which
    /// saves a round of mixing on every grant and release.
    #[inline]
    fn key_fp(&self, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        let fp = h.finish();
        #[cfg(test)]
        let fp = match self.fp_bits {
            0 => fp,
            bits => fp & ((1 << bits) - 1),
        };
        fp
    }

    fn hold_fp(&self, key_fp: u64, exclusive: bool, owner: &[u8]) -> u64 {
        self.hasher.hash_one((key_fp, exclusive, owner))
    }

    fn slot_hold_fp(&self, i: u32) -> u64 {
        let s = &self.slots[i];
        self.hold_fp(s.key_fp, s.exclusive, s.owner())
    }

    /// The slot that tells the key of an index entry.
    #[inline(always)]
    fn any_slot(&self, value: u32) -> u32 {
        match Entry::of(value) {
            Entry::One(j) => j,
            Entry::Group(g) => self.group(g).any,
        }
    }

    fn group(&self, g: u32) -> &Group {
        self.groups[g as usize].as_ref().expect("a live group")
    }

    fn group_mut(&mut self, g: u32) -> &mut Group {
        self.groups[g as usize].as_mut().expect("a live group")
    }

    /// Where the index entry of `key` of `db` (hashed `key_fp`) is and its value, or the empty
    /// bucket where it would go.
    #[inline(always)]
    fn find(&self, key_fp: u64, db: i32, key: &[u8]) -> Result<(usize, u32), usize> {
        self.index.find(
            key_fp,
            KeyOf {
                live: self,
                db,
                key,
            },
        )
    }

    /// Track `id`, a `kind` hold granted at `now_us`, unless `len() >= cap` (a hold tracked
    /// already restarts at `now_us` whatever the cap). An exclusive grant first drops every
    /// other hold tracked on its key: none can be alive (they ended unseen); how many went is
    /// returned with what was done.
    pub fn start(
        &mut self,
        id: HoldId,
        kind: ObjectKind,
        now_us: u64,
        cap: usize,
    ) -> (Start, usize) {
        self.index.reserve_one();
        let key_fp = self.key_fp(id.key);
        match self.find(key_fp, id.db, id.key) {
            // The common case: the key's first hold.
            Err(vacant) => {
                if self.len >= cap {
                    return (Start::Full, 0);
                }
                let i = self.slots.alloc(&id, kind, now_us, key_fp);
                self.index.insert(vacant, key_fp, Entry::One(i).value());
                self.len += 1;
                (Start::Tracked, 0)
            }
            Ok((_, v)) => self.start_beside(v, key_fp, id, kind, now_us, cap),
        }
    }

    /// [`Live::start`] on a key with tracked holds (its entry's value `v`): the same hold again
    /// (it ended unseen), holds an exclusive grant proves ended, or a reader beside others.
    #[cold]
    fn start_beside(
        &mut self,
        v: u32,
        key_fp: u64,
        id: HoldId,
        kind: ObjectKind,
        now_us: u64,
        cap: usize,
    ) -> (Start, usize) {
        let fp = self.hold_fp(key_fp, id.exclusive, id.owner);
        let (same, stale): (Option<u32>, Vec<u32>) = match Entry::of(v) {
            Entry::One(j) => match self.slots[j].owned_as(&id) {
                true => (Some(j), Vec::new()),
                false => (None, if id.exclusive { vec![j] } else { Vec::new() }),
            },
            Entry::Group(g) => {
                let m = &self.group(g).holds;
                let same = m.get(&fp).copied().filter(|&j| self.slots[j].owned_as(&id));
                let stale = match id.exclusive {
                    true => m.values().copied().filter(|&j| Some(j) != same).collect(),
                    false => Vec::new(),
                };
                (same, stale)
            }
        };
        let dropped = stale.len();
        for j in stale {
            self.remove_slot(j);
        }
        if let Some(j) = same {
            let s = &mut self.slots[j];
            s.since_us = now_us;
            s.kind = kind;
            return (Start::Restarted, dropped);
        }
        if self.len >= cap {
            return (Start::Full, dropped);
        }
        // Beside the key's other holds (readers), by hold fingerprint; or alone, its others
        // dropped. Two holds sharing a fingerprint (odds 2^-64) would hide each other: the
        // newcomer is not tracked then. (The room reserved at the start may be gone: dropping
        // the last holds gives a large table back.)
        self.index.reserve_one();
        let (pos, v) = match self.find(key_fp, id.db, id.key) {
            Ok(found) => found,
            Err(vacant) => {
                let i = self.slots.alloc(&id, kind, now_us, key_fp);
                self.index.insert(vacant, key_fp, Entry::One(i).value());
                self.len += 1;
                return (Start::Tracked, dropped);
            }
        };
        match Entry::of(v) {
            Entry::One(j) => {
                let first = self.slot_hold_fp(j);
                if first == fp {
                    return (Start::Full, dropped);
                }
                let i = self.slots.alloc(&id, kind, now_us, key_fp);
                let group = Group {
                    any: j,
                    holds: [(first, j), (fp, i)].into_iter().collect(),
                };
                let g = match self.free_groups.pop() {
                    Some(g) => {
                        self.groups[g as usize] = Some(group);
                        g
                    }
                    None => {
                        self.groups.push(Some(group));
                        (self.groups.len() - 1) as u32
                    }
                };
                self.index.set(pos, Entry::Group(g).value());
            }
            Entry::Group(g) => {
                if self.group(g).holds.contains_key(&fp) {
                    return (Start::Full, dropped);
                }
                let i = self.slots.alloc(&id, kind, now_us, key_fp);
                self.group_mut(g).holds.insert(fp, i);
            }
        }
        self.len += 1;
        (Start::Tracked, dropped)
    }

    /// Stop tracking `id` (its owner released it): when it started, if it was tracked.
    pub fn end(&mut self, id: HoldId) -> Option<Ended> {
        if self.len == 0 {
            return None;
        }
        let key_fp = self.key_fp(id.key);
        let (pos, v) = self.find(key_fp, id.db, id.key).ok()?;
        match Entry::of(v) {
            // A lock's hold: its key's only one.
            Entry::One(j) => {
                if !self.slots[j].owned_as(&id) {
                    return None;
                }
                self.index.remove(pos);
                Some(self.free_slot(j))
            }
            Entry::Group(g) => {
                let fp = self.hold_fp(key_fp, id.exclusive, id.owner);
                let j = *self.group(g).holds.get(&fp)?;
                self.slots[j].owned_as(&id).then(|| self.remove_slot(j))
            }
        }
    }

    /// Stop tracking every hold on `key` of `db` (force release, expiry, deletion), each
    /// handed to `ended`.
    pub fn end_key(&mut self, db: i32, key: &[u8], mut ended: impl FnMut(Ended)) {
        for j in self.slots_on(db, key) {
            ended(self.remove_slot(j));
        }
    }

    /// Stop tracking every hold whose database and key `which` selects (a flush, a slot that
    /// left the node), each handed to `ended`.
    pub fn end_where(&mut self, which: impl Fn(i32, &[u8]) -> bool, mut ended: impl FnMut(Ended)) {
        let gone: Vec<u32> = self
            .slots
            .live()
            .filter(|(_, s)| which(s.db, s.key()))
            .map(|(p, _)| p.slot)
            .collect();
        for i in gone {
            ended(self.remove_slot(i));
        }
    }

    /// Whether any hold on `key` of `db` is tracked.
    pub fn has_key(&self, db: i32, key: &[u8]) -> bool {
        !self.is_empty() && self.find(self.key_fp(key), db, key).is_ok()
    }

    /// The slots of the holds on `key` of `db`.
    fn slots_on(&self, db: i32, key: &[u8]) -> Vec<u32> {
        if self.is_empty() {
            return Vec::new();
        }
        match self.find(self.key_fp(key), db, key) {
            Err(_) => Vec::new(),
            Ok((_, v)) => match Entry::of(v) {
                Entry::One(j) => vec![j],
                Entry::Group(g) => self.group(g).holds.values().copied().collect(),
            },
        }
    }

    /// The tracked holds on `key` of `db`, copied out (to be looked at in the keys).
    pub fn holds_on(&self, db: i32, key: &[u8]) -> Vec<(Place, Held)> {
        self.slots_on(db, key)
            .into_iter()
            .filter_map(|j| {
                let place = self.slots.place(j);
                self.get(place).map(|h| (place, h))
            })
            .collect()
    }

    /// The tracked hold at `place`, if it is still tracked there.
    pub fn get(&self, place: Place) -> Option<Held> {
        self.slots.at(place).map(|s| Held {
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
        self.slots.at(place)?;
        Some(self.remove_slot(place.slot))
    }

    /// Where every tracked hold is, oldest first (ties in slot order): O(n log n) in the holds
    /// tracked. Read each with [`Live::get`]: holds removed meanwhile read as `None`.
    pub fn oldest_first(&self) -> Vec<Place> {
        let mut all: Vec<(u64, Place)> = self.slots.live().map(|(p, s)| (s.since_us, p)).collect();
        all.sort_unstable_by_key(|(since, p)| (*since, p.slot));
        all.into_iter().map(|(_, p)| p).collect()
    }

    /// Forget everything (module load).
    pub fn clear(&mut self) {
        *self = Live {
            hasher: self.hasher.clone(),
            #[cfg(test)]
            fp_bits: self.fp_bits,
            ..Live::default()
        };
    }

    /// Take live slot `i` out of the index and free it.
    fn remove_slot(&mut self, i: u32) -> Ended {
        let s = &self.slots[i];
        if let Ok((pos, v)) = self.find(s.key_fp, s.db, s.key()) {
            match Entry::of(v) {
                Entry::One(j) => {
                    if j == i {
                        self.index.remove(pos);
                    }
                }
                Entry::Group(g) => {
                    let fp = self.slot_hold_fp(i);
                    let m = self.group_mut(g);
                    if m.holds.get(&fp) == Some(&i) {
                        m.holds.remove(&fp);
                    }
                    if m.holds.len() == 1 {
                        // Back to one hold: the entry leads to it.
                        let last = *m.holds.values().next().expect("one left");
                        self.groups[g as usize] = None;
                        self.free_groups.push(g);
                        self.index.set(pos, Entry::One(last).value());
                    } else if m.any == i {
                        m.any = *m.holds.values().next().expect("holds left");
                    }
                }
            }
        }
        let ended = self.free_slot(i);
        if self.len == 0 && self.slots.made() > 1024 {
            // After a burst ended by force releases, expiries, a flush: give the slab, the
            // index and the groups back. (Not at a release, as before this index: a lock's
            // holds come and go, and a table given back at each emptying is built again by the
            // next burst, about 250 instructions per grant while it grows.)
            self.clear();
        }
        ended
    }

    /// Free live slot `i` (out of the index already).
    #[inline]
    fn free_slot(&mut self, i: u32) -> Ended {
        let ended = self.slots.free(i);
        self.len -= 1;
        ended
    }

    /// Tests: the index leads to every live slot, once, from its key; `len` counts them.
    #[cfg(test)]
    fn check(&self) {
        self.index.check();
        let live: Vec<u32> = self.slots.live().map(|(p, _)| p.slot).collect();
        assert_eq!(live.len(), self.len);
        let mut keys = std::collections::HashSet::new();
        for &i in &live {
            let s = &self.slots[i];
            assert_eq!(s.key_fp, self.key_fp(s.key()));
            assert!(
                self.slots_on(s.db, s.key()).contains(&i),
                "slot {i} is found by its key"
            );
            keys.insert((s.db, s.key().to_vec()));
        }
        assert_eq!(self.index.len(), keys.len(), "one entry per key");
        let groups = self.groups.iter().flatten().count();
        assert_eq!(groups + self.free_groups.len(), self.groups.len());
        for g in self.groups.iter().flatten() {
            assert!(g.holds.len() >= 2 && g.holds.values().any(|&j| j == g.any));
        }
    }
}

#[cfg(test)]
mod live_tests;

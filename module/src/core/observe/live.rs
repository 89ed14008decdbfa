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
//! key, one probe of one map and a slot written or freed: about 250 instructions each
//! (callgrind), of the 8,000 an `RLOCK.ACQUIRE` takes. (A first design, with a map by hold and
//! one by key and the holds linked in start order, took about twice that.) The map is by key: a
//! key with one hold (every lock) points at its slot; a key with more (readers) has a small map
//! of its own, by hold, so a read hold among thousands is still found in O(1). Start order is
//! not kept: the report sorts the tracked holds by start (O(n log n) in the holds tracked, at
//! most `rlock.top-max-holds`), which costs an operator's call, not every grant. A full table
//! refuses new holds and so keeps the oldest ones, which the report wants.
//!
//! Tried and not kept: a short list of holds granted a moment ago in front of the table, where
//! a pipelined pair's release finds its acquire with a copy and a compare, the table's readers
//! taking the list in first. Tracking's cost per pipelined pair went from 845 to 623
//! instructions (`scripts/instructions.sh`), since copying and comparing the key and owner cost
//! about what the hash and probe do; the rest is the clock, the thread-local state and the
//! module API calls around it. Not worth a second structure with its own ordering rules.

use crate::core::stats::ObjectKind;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

/// Bytes of key and owner kept in the slot itself: a Redisson owner is a 36-byte UUID, a colon
/// and a thread id, so most holds allocate nothing.
const INLINE: usize = 64;

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

/// Where a tracked hold sits, while it is tracked there (a slot reused later, or the same hold
/// started again, has another generation).
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
    exclusive: bool,
    kind: ObjectKind,
    db: i32,
    key_len: u32,
    since_us: u64,
    key_fp: u64,
    /// The key's bytes, then the owner's.
    bytes: Bytes,
}

/// A hold's key and owner: in the slot when they fit (copied with two `memcpy`s), else on the
/// heap.
enum Bytes {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, buf } => &buf[..*len as usize],
            Bytes::Heap(b) => b,
        }
    }

    fn set(&mut self, key: &[u8], owner: &[u8]) {
        let n = key.len() + owner.len();
        if n <= INLINE {
            if !matches!(self, Bytes::Inline { .. }) {
                *self = Bytes::Inline {
                    len: 0,
                    buf: [0; INLINE],
                };
            }
            if let Bytes::Inline { len, buf } = self {
                buf[..key.len()].copy_from_slice(key);
                buf[key.len()..n].copy_from_slice(owner);
                *len = n as u8;
            }
        } else {
            *self = Bytes::Heap([key, owner].concat().into_boxed_slice());
        }
    }
}

impl Slot {
    fn key(&self) -> &[u8] {
        &self.bytes.get()[..self.key_len as usize]
    }

    fn owner(&self) -> &[u8] {
        &self.bytes.get()[self.key_len as usize..]
    }

    fn on(&self, db: i32, key: &[u8]) -> bool {
        self.live && self.db == db && self.key() == key
    }

    fn is(&self, id: &HoldId) -> bool {
        // The cheap fields first: the bytes are compared only for the hold itself.
        if !self.live || self.exclusive != id.exclusive || self.db != id.db {
            return false;
        }
        let (kl, b) = (self.key_len as usize, self.bytes.get());
        kl == id.key.len()
            && b.len() == kl + id.owner.len()
            && b[..kl] == *id.key
            && b[kl..] == *id.owner
    }
}

/// Slots in chunks of a fixed size: growing never moves a slot (a `Vec` of slots copied them
/// all at each doubling: 230 instructions per `RLOCK.ACQUIRE` while 5,000 holds piled up).
#[derive(Default)]
struct Slab {
    chunks: Vec<Vec<Slot>>,
    len: u32,
}

const CHUNK: u32 = 256;

impl Slab {
    fn push(&mut self, slot: Slot) -> u32 {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK as usize));
        }
        self.chunks
            .last_mut()
            .expect("a chunk with room")
            .push(slot);
        self.len += 1;
        self.len - 1
    }

    fn get(&self, i: u32) -> Option<&Slot> {
        self.chunks
            .get((i / CHUNK) as usize)?
            .get((i % CHUNK) as usize)
    }
}

impl std::ops::Index<u32> for Slab {
    type Output = Slot;
    fn index(&self, i: u32) -> &Slot {
        &self.chunks[(i / CHUNK) as usize][(i % CHUNK) as usize]
    }
}

impl std::ops::IndexMut<u32> for Slab {
    fn index_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.chunks[(i / CHUNK) as usize][(i % CHUNK) as usize]
    }
}

/// A map by fingerprint. A fingerprint is a hash already (foldhash's): the map takes it as
/// its hash instead of hashing it again (about 15 instructions per probe, on every grant and
/// release tracked).
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

/// The holds of one key fingerprint (almost always one key).
enum Holders {
    One(u32),
    /// By hold fingerprint ([`Live::hold_fp`]).
    Many(Box<ByFp<u32>>),
}

#[derive(Default)]
pub struct Live {
    /// Holders by key fingerprint.
    keys: ByFp<Holders>,
    store: Store,
    hasher: foldhash::fast::RandomState,
}

/// The slots: apart from `keys`, so that one probe of `keys` (an entry held open) can add or
/// free a slot.
#[derive(Default)]
struct Store {
    slots: Slab,
    free: Vec<u32>,
    len: usize,
}

impl Store {
    fn alloc(&mut self, id: &HoldId, kind: ObjectKind, now_us: u64, key_fp: u64) -> u32 {
        let fill = |s: &mut Slot| {
            s.live = true;
            s.exclusive = id.exclusive;
            s.kind = kind;
            s.db = id.db;
            s.key_len = id.key.len() as u32;
            s.since_us = now_us;
            s.key_fp = key_fp;
            s.bytes.set(id.key, id.owner);
        };
        let i = match self.free.pop() {
            Some(i) => {
                fill(&mut self.slots[i]);
                i
            }
            None => {
                let mut s = Slot {
                    gen: 0,
                    live: false,
                    exclusive: false,
                    kind,
                    db: 0,
                    key_len: 0,
                    since_us: 0,
                    key_fp: 0,
                    bytes: Bytes::Inline {
                        len: 0,
                        buf: [0; INLINE],
                    },
                };
                fill(&mut s);
                self.slots.push(s)
            }
        };
        self.len += 1;
        i
    }

    fn restart(&mut self, i: u32, kind: ObjectKind, now_us: u64) {
        let s = &mut self.slots[i];
        s.since_us = now_us;
        s.kind = kind;
    }

    /// Free slot `i` (already out of `keys`).
    fn free_slot(&mut self, i: u32) -> Ended {
        let s = &mut self.slots[i];
        let ended = Ended {
            kind: s.kind,
            since_us: s.since_us,
        };
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        if matches!(s.bytes, Bytes::Heap(_)) {
            // A long key's buffer is not kept for whichever hold reuses the slot.
            s.bytes = Bytes::Inline {
                len: 0,
                buf: [0; INLINE],
            };
        }
        self.free.push(i);
        self.len -= 1;
        ended
    }

    /// Every live slot, with its place.
    fn live(&self) -> impl Iterator<Item = (Place, &Slot)> {
        self.slots
            .chunks
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, s)| {
                s.live.then_some((
                    Place {
                        slot: i as u32,
                        gen: s.gen,
                    },
                    s,
                ))
            })
    }

    fn get(&self, place: Place) -> Option<&Slot> {
        self.slots
            .get(place.slot)
            .filter(|s| s.live && s.gen == place.gen)
    }
}

impl Live {
    /// Holds tracked now.
    pub fn len(&self) -> usize {
        self.store.len
    }

    pub fn is_empty(&self) -> bool {
        self.store.len == 0
    }

    fn key_fp(&self, db: i32, key: &[u8]) -> u64 {
        self.hasher.hash_one((db, key))
    }

    fn hold_fp(&self, key_fp: u64, exclusive: bool, owner: &[u8]) -> u64 {
        self.hasher.hash_one((key_fp, exclusive, owner))
    }

    fn slot_hold_fp(&self, i: u32) -> u64 {
        let s = &self.store.slots[i];
        self.hold_fp(s.key_fp, s.exclusive, s.owner())
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
        let key_fp = self.key_fp(id.db, id.key);
        // The common case in one probe: the key's first hold.
        if let Entry::Vacant(e) = self.keys.entry(key_fp) {
            if self.store.len >= cap {
                return (Start::Full, 0);
            }
            e.insert(Holders::One(self.store.alloc(&id, kind, now_us, key_fp)));
            return (Start::Tracked, 0);
        }
        // The same hold again (it ended unseen), or holds an exclusive grant proves ended.
        let mut dropped = 0;
        let fp = self.hold_fp(key_fp, id.exclusive, id.owner);
        let (same, stale): (Option<u32>, Vec<u32>) = match &self.keys[&key_fp] {
            Holders::One(j) => {
                let s = &self.store.slots[*j];
                let stale = id.exclusive && !s.is(&id) && s.on(id.db, id.key);
                (
                    s.is(&id).then_some(*j),
                    if stale { vec![*j] } else { Vec::new() },
                )
            }
            Holders::Many(m) => {
                let same = m.get(&fp).copied().filter(|&j| self.store.slots[j].is(&id));
                let stale = match id.exclusive {
                    true => m
                        .values()
                        .copied()
                        .filter(|&j| Some(j) != same && self.store.slots[j].on(id.db, id.key))
                        .collect(),
                    false => Vec::new(),
                };
                (same, stale)
            }
        };
        for j in stale {
            self.remove_slot(j);
            dropped += 1;
        }
        if let Some(j) = same {
            self.store.restart(j, kind, now_us);
            return (Start::Restarted, dropped);
        }
        if self.store.len >= cap {
            return (Start::Full, dropped);
        }
        // Beside the key's other holds (readers), by hold fingerprint. Two holds sharing one
        // (odds 2^-64) would hide each other: the newcomer is not tracked then.
        let first = match self.keys.get(&key_fp) {
            None => None,
            Some(Holders::One(j)) => Some((self.slot_hold_fp(*j), *j)),
            Some(Holders::Many(m)) if m.contains_key(&fp) => return (Start::Full, dropped),
            Some(Holders::Many(_)) => None,
        };
        if first.is_some_and(|(f, _)| f == fp) {
            return (Start::Full, dropped);
        }
        let i = self.store.alloc(&id, kind, now_us, key_fp);
        match (self.keys.get_mut(&key_fp), first) {
            (None, _) => {
                self.keys.insert(key_fp, Holders::One(i));
            }
            (Some(holders), Some((f, j))) => {
                *holders = Holders::Many(Box::new([(f, j), (fp, i)].into_iter().collect()));
            }
            (Some(Holders::Many(m)), None) => {
                m.insert(fp, i);
            }
            (Some(Holders::One(_)), None) => unreachable!("a single holder is `first`"),
        }
        (Start::Tracked, dropped)
    }

    /// Stop tracking `id` (its owner released it): when it started, if it was tracked.
    pub fn end(&mut self, id: HoldId) -> Option<Ended> {
        let key_fp = self.key_fp(id.db, id.key);
        let Entry::Occupied(e) = self.keys.entry(key_fp) else {
            return None;
        };
        // A lock's hold in one probe.
        if let Holders::One(j) = *e.get() {
            if !self.store.slots[j].is(&id) {
                return None;
            }
            e.remove();
            return Some(self.store.free_slot(j));
        }
        let fp = self.hold_fp(key_fp, id.exclusive, id.owner);
        let j = match &self.keys[&key_fp] {
            Holders::Many(m) => *m.get(&fp)?,
            Holders::One(_) => return None,
        };
        self.store.slots[j].is(&id).then(|| self.remove_slot(j))
    }

    /// Stop tracking every hold on `key` of `db` (force release, expiry, deletion), each
    /// handed to `ended`.
    pub fn end_key(&mut self, db: i32, key: &[u8], mut ended: impl FnMut(Ended)) {
        for (place, _) in self.holds_on(db, key) {
            ended(self.remove_slot(place.slot));
        }
    }

    /// Stop tracking every hold whose database and key `which` selects (a flush, a slot that
    /// left the node), each handed to `ended`.
    pub fn end_where(&mut self, which: impl Fn(i32, &[u8]) -> bool, mut ended: impl FnMut(Ended)) {
        let gone: Vec<u32> = self
            .store
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
        !self.is_empty() && !self.holds_on(db, key).is_empty()
    }

    /// The tracked holds on `key` of `db`, copied out (to be looked at in the keys).
    pub fn holds_on(&self, db: i32, key: &[u8]) -> Vec<(Place, Held)> {
        let slots: Vec<u32> = match self.keys.get(&self.key_fp(db, key)) {
            None => Vec::new(),
            Some(Holders::One(j)) => vec![*j],
            Some(Holders::Many(m)) => m.values().copied().collect(),
        };
        slots
            .into_iter()
            .filter(|&j| self.store.slots[j].on(db, key))
            .filter_map(|j| {
                let place = Place {
                    slot: j,
                    gen: self.store.slots[j].gen,
                };
                self.get(place).map(|h| (place, h))
            })
            .collect()
    }

    /// The tracked hold at `place`, if it is still tracked there.
    pub fn get(&self, place: Place) -> Option<Held> {
        self.store.get(place).map(|s| Held {
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
        self.store.get(place)?;
        Some(self.remove_slot(place.slot))
    }

    /// Where every tracked hold is, oldest first (ties in slot order): O(n log n) in the holds
    /// tracked. Read each with [`Live::get`]: holds removed meanwhile read as `None`.
    pub fn oldest_first(&self) -> Vec<Place> {
        let mut all: Vec<(u64, Place)> = self.store.live().map(|(p, s)| (s.since_us, p)).collect();
        all.sort_unstable_by_key(|(since, p)| (*since, p.slot));
        all.into_iter().map(|(_, p)| p).collect()
    }

    /// Forget everything (module load).
    pub fn clear(&mut self) {
        *self = Live::default();
    }

    /// Take live slot `i` out of `keys` and free it.
    fn remove_slot(&mut self, i: u32) -> Ended {
        let key_fp = self.store.slots[i].key_fp;
        let fp = match self.keys.get(&key_fp) {
            Some(Holders::Many(_)) => Some(self.slot_hold_fp(i)),
            _ => None,
        };
        if let Entry::Occupied(mut e) = self.keys.entry(key_fp) {
            match e.get_mut() {
                Holders::One(j) => {
                    if *j == i {
                        e.remove();
                    }
                }
                Holders::Many(m) => {
                    if let Some(fp) = fp.filter(|fp| m.get(fp) == Some(&i)) {
                        m.remove(&fp);
                    }
                    match m.len() {
                        0 => {
                            e.remove();
                        }
                        1 => {
                            let last = *m.values().next().expect("one left");
                            e.insert(Holders::One(last));
                        }
                        _ => {}
                    }
                }
            }
        }
        let ended = self.store.free_slot(i);
        if self.store.len == 0 && self.store.slots.len > 1024 {
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
mod live_tests;

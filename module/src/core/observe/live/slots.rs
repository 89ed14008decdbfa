//! Where the table of live holds keeps each hold: a slot in a slab that never moves one (a
//! [`Place`] stays valid while its hold is tracked), with the hold's key and owner in the slot
//! itself when they fit.
//!
//! Written for the instruction count of a lock's acquire and release (each starts or ends a
//! hold here): fixed-size chunks (one bounds check per slot reached), the bytes compared and
//! copied in place when short, no allocation for a key and owner that fit.

use super::{Ended, HoldId};
use crate::core::stats::ObjectKind;

/// Bytes of key and owner kept in the slot itself: a Redisson owner is a 36-byte UUID, a colon
/// and a thread id, so most holds allocate nothing (an allocation and its free cost about 200
/// instructions through Redis's allocator).
const INLINE: usize = 64;

/// Where a tracked hold sits, while it is tracked there (a slot reused later, or the same hold
/// started again, has another generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub(super) slot: u32,
    pub(super) gen: u32,
}

pub(super) struct Slot {
    pub since_us: u64,
    /// The hash of the hold's key (its index entry's).
    pub key_fp: u64,
    pub gen: u32,
    pub db: i32,
    key_len: u32,
    /// Bytes of key and owner.
    len: u32,
    pub live: bool,
    pub exclusive: bool,
    pub kind: ObjectKind,
    /// The key's bytes, then the owner's, when they fit.
    inline: [u8; INLINE],
    /// The key's bytes, then the owner's, when they do not.
    heap: Option<Box<[u8]>>,
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            since_us: 0,
            key_fp: 0,
            gen: 0,
            db: 0,
            key_len: 0,
            len: 0,
            live: false,
            exclusive: false,
            kind: ObjectKind::Lock,
            inline: [0; INLINE],
            heap: None,
        }
    }

    /// Make this (free) slot `id`'s, a `kind` hold since `now_us`.
    #[inline(always)]
    fn fill(&mut self, id: &HoldId, kind: ObjectKind, now_us: u64, key_fp: u64) {
        let (k, n) = (id.key.len(), id.key.len() + id.owner.len());
        self.since_us = now_us;
        self.key_fp = key_fp;
        self.db = id.db;
        self.key_len = k as u32;
        self.len = n as u32;
        self.live = true;
        self.exclusive = id.exclusive;
        self.kind = kind;
        if n <= INLINE {
            put(&mut self.inline[..k], id.key);
            put(&mut self.inline[k..n], id.owner);
        } else {
            self.heap = Some([id.key, id.owner].concat().into_boxed_slice());
        }
    }

    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        match &self.heap {
            Some(b) => b,
            // (`min`: no bounds check; `len` fits whenever there is no heap copy.)
            None => &self.inline[..(self.len as usize).min(INLINE)],
        }
    }

    pub fn key(&self) -> &[u8] {
        let b = self.bytes();
        &b[..(self.key_len as usize).min(b.len())]
    }

    pub fn owner(&self) -> &[u8] {
        let b = self.bytes();
        &b[(self.key_len as usize).min(b.len())..]
    }

    /// Whether this is a hold on `key` of `db`.
    #[inline(always)]
    pub fn on(&self, db: i32, key: &[u8]) -> bool {
        self.db == db && self.key_len as usize == key.len() && same(self.key(), key)
    }

    /// Whether this hold, on `id`'s key, is `id`'s owner's of `id`'s side.
    #[inline(always)]
    pub fn owned_as(&self, id: &HoldId) -> bool {
        self.exclusive == id.exclusive
            && self.len as usize == id.key.len() + id.owner.len()
            && same(self.owner(), id.owner)
    }
}

/// Slots in chunks of a fixed size: growing never moves a slot (a `Vec` of slots copied them
/// all at each doubling: 230 instructions per `RLOCK.ACQUIRE` while 5,000 holds piled up).
/// Freed slots are reused, last freed first.
#[derive(Default)]
pub(super) struct Slab {
    chunks: Vec<Box<[Slot; CHUNK]>>,
    free: Vec<u32>,
    /// Slots handed out so far (live and free); those after are unused.
    made: u32,
}

const CHUNK: usize = 256;

impl Slab {
    /// Slots made so far (live and free).
    pub fn made(&self) -> u32 {
        self.made
    }

    /// A slot for `id`: a free one, else a new one.
    #[inline(always)]
    pub fn alloc(&mut self, id: &HoldId, kind: ObjectKind, now_us: u64, key_fp: u64) -> u32 {
        let i = match self.free.pop() {
            Some(i) => i,
            None => self.fresh(),
        };
        self[i].fill(id, kind, now_us, key_fp);
        i
    }

    #[cold]
    fn fresh(&mut self) -> u32 {
        if self.made as usize == self.chunks.len() * CHUNK {
            let chunk: Vec<Slot> = (0..CHUNK).map(|_| Slot::empty()).collect();
            let chunk: Box<[Slot; CHUNK]> =
                chunk.into_boxed_slice().try_into().ok().expect("a chunk");
            self.chunks.push(chunk);
        }
        self.made += 1;
        self.made - 1
    }

    /// Free live slot `i`: the hold it had, as it ended.
    #[inline(always)]
    pub fn free(&mut self, i: u32) -> Ended {
        let s = &mut self[i];
        let ended = Ended {
            kind: s.kind,
            since_us: s.since_us,
        };
        s.live = false;
        s.gen = s.gen.wrapping_add(1);
        if s.heap.is_some() {
            // A long key's buffer is not kept for whichever hold reuses the slot.
            s.heap = None;
        }
        self.free.push(i);
        ended
    }

    /// The slot at `place`, if its hold is still tracked there.
    pub fn at(&self, place: Place) -> Option<&Slot> {
        let s = self.chunks.get(place.slot as usize / CHUNK)?;
        Some(&s[place.slot as usize % CHUNK]).filter(|s| s.live && s.gen == place.gen)
    }

    /// Every live slot, with its place.
    pub fn live(&self) -> impl Iterator<Item = (Place, &Slot)> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .take(self.made as usize)
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

    /// The place of live slot `i`.
    pub fn place(&self, i: u32) -> Place {
        Place {
            slot: i,
            gen: self[i].gen,
        }
    }
}

impl std::ops::Index<u32> for Slab {
    type Output = Slot;
    #[inline(always)]
    fn index(&self, i: u32) -> &Slot {
        &self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }
}

impl std::ops::IndexMut<u32> for Slab {
    #[inline(always)]
    fn index_mut(&mut self, i: u32) -> &mut Slot {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }
}

/// `to.copy_from_slice(from)`, with 8 to 16 bytes copied in place (two overlapping words)
/// rather than by a call to `memcpy`: most keys are that short.
#[inline(always)]
fn put(to: &mut [u8], from: &[u8]) {
    let n = from.len();
    if (8..=16).contains(&n) && to.len() == n {
        to[..8].copy_from_slice(&from[..8]);
        to[n - 8..].copy_from_slice(&from[n - 8..]);
    } else {
        to.copy_from_slice(from);
    }
}

/// `a == b`, with 8 to 16 bytes compared in place (two overlapping words) rather than by a
/// call to `bcmp`: most keys are that short. (Longer, `bcmp` is as quick as a loop of words.)
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if !(8..=16).contains(&n) {
        return a == b;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8)
}

#[cfg(test)]
mod tests {
    use super::{put, same};

    #[test]
    fn same_is_equality_and_put_is_a_copy() {
        let s: Vec<u8> = (0..80u8).collect();
        for n in 0..=s.len() {
            for i in 0..n {
                let mut t = s[..n].to_vec();
                assert!(same(&s[..n], &t));
                t[i] ^= 1;
                assert!(!same(&s[..n], &t), "a difference at {i} of {n}");
            }
            assert!(n == 0 || !same(&s[..n], &s[..n - 1]));
            let mut to = vec![0xFF; n];
            put(&mut to, &s[..n]);
            assert_eq!(to, &s[..n]);
        }
    }
}

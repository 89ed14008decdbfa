//! The index of the table of live holds: one open-addressed array of 8-byte buckets, each the
//! low 32 bits of an entry's hash beside its value (a `u32`, never 0: an all-zero bucket is
//! empty). Linear probing from the hash's home bucket; a removal shifts the entries after it
//! back (no tombstones, so a probe ends at the first empty bucket however many removals came
//! before). The caller hashes once and says which of the entries with its hash bits is the one
//! it wants: the bucket carries no key.
//!
//! Cost: a lookup reads one bucket when the table is sparse (at most half full), and touches
//! the caller's entry only when the 32 hash bits match. Growth doubles the array and places
//! every entry again: O(n) in that one call, amortised O(1) per insertion (each doubling pays
//! for the insertions since the last one), as any hash map's growth; the buckets are 8 bytes,
//! so 100,000 holds move in about a millisecond.

/// Which entry a lookup wants, among those with its hash bits: a trait rather than a closure
/// so that the check is inlined into the probe (a closure was left a call, 15 instructions per
/// lookup).
pub(super) trait Which {
    fn is(&self, value: u32) -> bool;
}

impl<F: Fn(u32) -> bool> Which for F {
    #[inline(always)]
    fn is(&self, value: u32) -> bool {
        self(value)
    }
}

/// The fewest buckets an array has once it has any.
const LEAST: usize = 16;

#[derive(Default)]
pub(super) struct Index {
    buckets: Vec<u64>,
    used: usize,
}

/// A bucket: the value in the high half, the hash's low 32 bits in the low half.
fn bucket(hash: u64, value: u32) -> u64 {
    (u64::from(value) << 32) | u64::from(hash as u32)
}

fn value_of(bucket: u64) -> u32 {
    (bucket >> 32) as u32
}

impl Index {
    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.used
    }

    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// Where the entry of `hash` that `is` accepts (asked only of values whose bucket has the
    /// same hash bits) sits, and its value (`Ok`), or the empty bucket where it would go
    /// (`Err`: valid for [`Index::insert`] until the index next changes, when
    /// [`Index::reserve_one`] came first).
    #[inline(always)]
    pub fn find(&self, hash: u64, is: impl Which) -> Result<(usize, u32), usize> {
        let mask = self.mask();
        if self.buckets.is_empty() {
            return Err(0);
        }
        let tag = hash as u32;
        let mut i = tag as usize & mask;
        loop {
            let b = self.buckets[i];
            if b == 0 {
                return Err(i);
            }
            if b as u32 == tag && is.is(value_of(b)) {
                return Ok((i, value_of(b)));
            }
            i = (i + 1) & mask;
        }
    }

    /// Replace the value at `pos` (an entry's, which keeps its hash).
    pub fn set(&mut self, pos: usize, value: u32) {
        debug_assert!(value != 0 && self.buckets[pos] != 0);
        self.buckets[pos] = (self.buckets[pos] & u64::from(u32::MAX)) | (u64::from(value) << 32);
    }

    /// Room for one more entry: call before the [`Index::find`] whose empty bucket
    /// [`Index::insert`] fills. Keeps the array at most half full.
    #[inline]
    pub fn reserve_one(&mut self) {
        if (self.used + 1) * 2 > self.buckets.len() {
            self.grow();
        }
    }

    #[cold]
    fn grow(&mut self) {
        let n = (self.buckets.len() * 2).max(LEAST);
        let old = std::mem::replace(&mut self.buckets, vec![0; n]);
        let mask = n - 1;
        for b in old.into_iter().filter(|&b| b != 0) {
            let mut i = b as u32 as usize & mask;
            while self.buckets[i] != 0 {
                i = (i + 1) & mask;
            }
            self.buckets[i] = b;
        }
    }

    /// Put `value` (not 0) for `hash` at `vacant`, the empty bucket [`Index::find`] returned.
    #[inline]
    pub fn insert(&mut self, vacant: usize, hash: u64, value: u32) {
        debug_assert!(value != 0 && self.buckets[vacant] == 0);
        self.buckets[vacant] = bucket(hash, value);
        self.used += 1;
    }

    /// Remove the entry at `pos`: the entries after it in its run move back where their
    /// probes will find them (each is read once; the run is short while the array is at most
    /// half full).
    #[inline]
    pub fn remove(&mut self, pos: usize) {
        let mask = self.mask();
        let mut hole = pos;
        let mut i = pos;
        loop {
            i = (i + 1) & mask;
            let b = self.buckets[i];
            if b == 0 {
                break;
            }
            // `b` may fill the hole when its home is not after the hole (cyclically): its
            // probe from home passes the hole before reaching `i`.
            let home = b as u32 as usize & mask;
            if i.wrapping_sub(home) & mask >= i.wrapping_sub(hole) & mask {
                self.buckets[hole] = b;
                hole = i;
            }
        }
        self.buckets[hole] = 0;
        self.used -= 1;
    }

    /// Every entry is found from its home through occupied buckets only, and `used` counts
    /// them (the invariant of linear probing without tombstones).
    #[cfg(test)]
    pub fn check(&self) {
        let mask = self.mask();
        let mut n = 0;
        for (i, &b) in self.buckets.iter().enumerate() {
            if b == 0 {
                continue;
            }
            n += 1;
            let mut j = b as u32 as usize & mask;
            while j != i {
                assert_ne!(self.buckets[j], 0, "bucket {i} is cut off from its home");
                j = (j + 1) & mask;
            }
        }
        assert_eq!(n, self.used);
        assert!(self.used * 2 <= self.buckets.len() || self.buckets.is_empty() && n == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn an_empty_index_finds_nothing() {
        let ix = Index::default();
        assert_eq!(ix.find(7, |_| true), Err(0));
        ix.check();
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_the_caller() {
        let mut ix = Index::default();
        for v in 1..=5u32 {
            ix.reserve_one();
            let vacant = ix.find(42, |x| x == v).unwrap_err();
            ix.insert(vacant, 42, v);
        }
        ix.check();
        for v in 1..=5u32 {
            let (_, got) = ix.find(42, |x| x == v).unwrap();
            assert_eq!(got, v);
        }
        ix.remove(ix.find(42, |x| x == 2).unwrap().0);
        ix.check();
        assert!(ix.find(42, |x| x == 2).is_err());
        assert!((1..=5)
            .filter(|&v| v != 2)
            .all(|v| ix.find(42, |x| x == v).is_ok()));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16, u32),
        Remove(u16),
        Set(u16, u32),
    }

    proptest! {
        /// Against a `HashMap`, with hashes of few bits (most entries collide, runs wrap
        /// around the array's end, removals shift runs back): the same entries found, the
        /// invariant kept after every step.
        #[test]
        fn behaves_as_a_map(
            ops in prop::collection::vec(
                prop_oneof![
                    3 => (0u16..200, 1u32..1000).prop_map(|(k, v)| Op::Put(k, v)),
                    2 => (0u16..200).prop_map(Op::Remove),
                    1 => (0u16..200, 1u32..1000).prop_map(|(k, v)| Op::Set(k, v)),
                ],
                0..400,
            ),
            bits in 0u32..7,
        ) {
            // The entry's value carries its key (high bits) so that `is` can tell keys apart.
            let hash = |k: u16| (u64::from(k).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) & ((1 << bits) - 1);
            let val = |k: u16, v: u32| (u32::from(k) << 16) | v;
            let key_of = |x: u32| (x >> 16) as u16;
            let mut ix = Index::default();
            let mut model: HashMap<u16, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        ix.reserve_one();
                        match ix.find(hash(k), |x| key_of(x) == k) {
                            Ok((pos, _)) => ix.set(pos, val(k, v)),
                            Err(vacant) => ix.insert(vacant, hash(k), val(k, v)),
                        }
                        model.insert(k, v);
                    }
                    Op::Remove(k) => {
                        let found = ix.find(hash(k), |x| key_of(x) == k);
                        prop_assert_eq!(found.is_ok(), model.remove(&k).is_some());
                        if let Ok((pos, _)) = found {
                            ix.remove(pos);
                        }
                    }
                    Op::Set(k, v) => {
                        if let Ok((pos, _)) = ix.find(hash(k), |x| key_of(x) == k) {
                            ix.set(pos, val(k, v));
                            model.insert(k, v);
                        }
                    }
                }
                ix.check();
                prop_assert_eq!(ix.len(), model.len());
            }
            for k in 0..200u16 {
                let got = ix.find(hash(k), |x| key_of(x) == k).ok().map(|(_, x)| x & 0xFFFF);
                prop_assert_eq!(got, model.get(&k).copied());
            }
        }
    }
}

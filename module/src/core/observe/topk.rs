//! The most frequent keys of a stream in fixed memory (`RLOCK.TOP WAITS|HANDOFFS`): the
//! Space-Saving sketch (Metwally, Agrawal, El Abbadi, 2005) over a sliding pair of windows.
//!
//! Space-Saving keeps at most `capacity` keys with a count each. A key already kept counts up;
//! a new key takes the place of the key with the smallest count `m` and starts at `m + 1`,
//! remembering `m` as its possible overcount. Every key whose true count exceeds
//! `total / capacity` is guaranteed to be kept, and a kept key's count is at most its error
//! above the truth. So the hot keys of a busy server are found without a table per key.
//!
//! "Recent" is two windows: counts go to the current one; when it is `window_ms` old it becomes
//! the previous one (the one before is dropped). A report sums both, so it covers the last one
//! to two windows, and a key that went quiet leaves the report within two windows.
//!
//! Cost: a kept key is one hash look-up and an add. A new key, once the sketch is full, also
//! looks for a slot holding the smallest count. Counts never fall, so the smallest count seen
//! last is a lower bound of the smallest now, and a slot still holding it holds a smallest:
//! the look goes on from the slot after the last one replaced and stops at the first such
//! slot. A stream of new keys (hand-offs on thousands of distinct locks) finds one at once,
//! where a scan of every count cost 2,400 instructions a grant (callgrind, 5,000 distinct
//! locks handed on); at worst (the smallest count rose) it is one pass over the counts, which
//! lie in one contiguous array (`capacity` is small and fixed, 256 in `observe`): bounded
//! whatever the stream.

use crate::core::wait::HashMap;
use std::hash::Hash;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    /// An upper bound of the key's true count.
    pub count: u64,
    /// How much of `count` may be overcounted: the true count is at least `count - error`.
    pub error: u64,
}

#[derive(Debug, Clone)]
pub struct SpaceSaving<K> {
    capacity: usize,
    /// The kept keys and their counts, side by side (the counts contiguous for the scan).
    keys: Vec<K>,
    counts: Vec<Count>,
    /// Where each kept key is in `keys`.
    index: HashMap<K, u32>,
    /// A key was ever replaced: from then on a key not kept may have been counted up to the
    /// smallest kept count (before, a key not kept was never seen).
    evicted: bool,
    /// At most the smallest kept count (exact when last found: counts never fall).
    low: u64,
    /// Where the next look for a smallest count starts.
    cursor: usize,
}

impl<K: Eq + Hash + Clone> SpaceSaving<K> {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity: capacity.max(1),
            keys: Vec::new(),
            counts: Vec::new(),
            index: HashMap::default(),
            evicted: false,
            low: 0,
            cursor: 0,
        }
    }

    pub fn add(&mut self, key: &K) {
        if let Some(&i) = self.index.get(key) {
            self.counts[i as usize].count += 1;
            return;
        }
        if self.keys.len() < self.capacity {
            self.index.insert(key.clone(), self.keys.len() as u32);
            self.keys.push(key.clone());
            self.counts.push(Count { count: 1, error: 0 });
            return;
        }
        let (slot, min) = self.smallest();
        self.index.remove(&self.keys[slot]);
        self.index.insert(key.clone(), slot as u32);
        self.keys[slot] = key.clone();
        self.counts[slot] = Count {
            count: min + 1,
            error: min,
        };
        self.evicted = true;
    }

    /// A slot holding the smallest count, and that count: the first slot from `cursor` on that
    /// still holds `low` (no count is below it), else the smallest found in one pass.
    fn smallest(&mut self) -> (usize, u64) {
        let n = self.counts.len();
        let mut best = (self.cursor % n, u64::MAX);
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let c = self.counts[i].count;
            if c <= self.low {
                best = (i, c);
                break;
            }
            if c < best.1 {
                best = (i, c);
            }
        }
        self.low = best.1;
        self.cursor = (best.0 + 1) % n;
        best
    }

    /// What a key not kept may have been counted: 0 until a key was replaced, then the
    /// smallest kept count (Space-Saving's bound for every key it does not keep).
    pub fn floor(&self) -> u64 {
        if !self.evicted {
            return 0;
        }
        self.counts.iter().map(|c| c.count).min().unwrap_or(0)
    }

    /// The count of `key`: its own if kept, else the bounds any key not kept has.
    pub fn get(&self, key: &K) -> Count {
        self.counted(key).unwrap_or_else(|| {
            let f = self.floor();
            Count { count: f, error: f }
        })
    }

    /// The count of `key` if it is kept. Inlined: `RLOCK.TOP` asks it of every key kept, most
    /// often of an empty window, where it is three instructions (out of line, 19: 4,900 of a
    /// `RLOCK.TOP`'s 102,000, callgrind).
    #[inline(always)]
    fn counted(&self, key: &K) -> Option<Count> {
        self.index.get(key).map(|&i| self.counts[i as usize])
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &Count)> {
        self.keys.iter().zip(self.counts.iter())
    }
}

/// Space-Saving over the current and the previous window.
#[derive(Debug, Clone)]
pub struct Recent<K> {
    window_ms: i64,
    started_ms: i64,
    current: SpaceSaving<K>,
    previous: SpaceSaving<K>,
}

impl<K: Eq + Hash + Clone + Ord> Recent<K> {
    pub fn new(capacity: usize, window_ms: i64, now_ms: i64) -> Self {
        Recent {
            window_ms: window_ms.max(1),
            started_ms: now_ms,
            current: SpaceSaving::new(capacity),
            previous: SpaceSaving::new(capacity),
        }
    }

    fn roll(&mut self, now_ms: i64) {
        let age = now_ms.saturating_sub(self.started_ms);
        if age < self.window_ms {
            return;
        }
        let fresh = SpaceSaving::new(self.current.capacity);
        if age < 2 * self.window_ms {
            self.previous = std::mem::replace(&mut self.current, fresh);
            self.started_ms += self.window_ms;
        } else {
            // Quiet for two windows or more: nothing recent is left.
            self.previous = SpaceSaving::new(self.current.capacity);
            self.current = fresh;
            self.started_ms = now_ms;
        }
    }

    pub fn add(&mut self, key: &K, now_ms: i64) {
        self.roll(now_ms);
        self.current.add(key);
    }

    /// The `n` keys with the largest counts over both windows, largest first (ties by key).
    ///
    /// A key kept in one window only may still have been counted in the other before it was
    /// replaced there: that window adds its floor to both the count and the error, so every
    /// reported count stays an upper bound and `count - error` a lower bound of the truth.
    pub fn top(&mut self, n: usize, now_ms: i64) -> Vec<(K, Count)> {
        self.top_where(n, now_ms, |_| true)
    }

    /// As [`Recent::top`], among the keys `keep` lets through.
    ///
    /// Bounded by the sketches' size whatever the windows hold: each window's floor is found
    /// once (it was found again for every key kept in one window only, a scan of the other's
    /// 256 counts each: about 1.2 million instructions a `RLOCK.TOP` against 250,000 once both
    /// windows had replaced keys, callgrind), and only the `n` keys reported are copied.
    pub fn top_where(
        &mut self,
        n: usize,
        now_ms: i64,
        keep: impl Fn(&K) -> bool,
    ) -> Vec<(K, Count)> {
        self.roll(now_ms);
        let plus = |a: Count, b: Count| Count {
            count: a.count + b.count,
            error: a.error + b.error,
        };
        let floor = |w: &SpaceSaving<K>| {
            let f = w.floor();
            Count { count: f, error: f }
        };
        let (previous_floor, current_floor) = (floor(&self.previous), floor(&self.current));
        let mut all: Vec<(&K, Count)> = Vec::with_capacity(self.kept());
        for (k, &p) in self.previous.iter() {
            all.push((k, plus(p, self.current.counted(k).unwrap_or(current_floor))));
        }
        for (k, &c) in self.current.iter() {
            if self.previous.counted(k).is_none() {
                all.push((k, plus(previous_floor, c)));
            }
        }
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(b.0)));
        all.into_iter()
            .filter(|(k, _)| keep(k))
            .take(n)
            .map(|(k, c)| (k.clone(), c))
            .collect()
    }

    /// What the report covers now: from `started_ms - window_ms` (the previous window's start).
    pub fn since_ms(&self) -> i64 {
        self.started_ms.saturating_sub(self.window_ms)
    }

    /// Keys kept now, both windows told (at most twice the capacity: the memory bound).
    pub fn kept(&self) -> usize {
        self.previous.len() + self.current.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hot_keys_are_found_among_many_cold_ones() {
        let mut s = Recent::new(16, 60_000, 0);
        for i in 0..10_000u32 {
            s.add(&format!("cold:{i}"), 10);
            if i % 2 == 0 {
                s.add(&"hot:a".to_string(), 10);
            }
            if i % 5 == 0 {
                s.add(&"hot:b".to_string(), 10);
            }
        }
        let top = s.top(2, 20);
        assert_eq!(top[0].0, "hot:a");
        assert_eq!(top[1].0, "hot:b");
        // Both are above total / capacity (17,000 / 16), so both are kept, each counted from
        // above by at most its error.
        assert!(top[0].1.count >= 5000 && top[0].1.count - top[0].1.error <= 5000);
        assert!(top[1].1.count >= 2000 && top[1].1.count - top[1].1.error <= 2000);
        assert!(s.kept() <= 32);
    }

    #[test]
    fn a_quiet_key_leaves_within_two_windows() {
        let mut s = Recent::new(8, 1000, 0);
        for _ in 0..5 {
            s.add(&"k", 100);
        }
        assert_eq!(s.top(1, 500)[0].1.count, 5);
        assert_eq!(s.top(1, 1500)[0].1.count, 5, "still in the previous window");
        assert!(s.top(1, 2100).is_empty(), "two windows later it is gone");
        s.add(&"j", 10_000);
        assert_eq!(s.top(5, 10_001), vec![("j", Count { count: 1, error: 0 })]);
    }

    #[test]
    fn windows_add_up() {
        let mut s = Recent::new(8, 1000, 0);
        s.add(&"k", 10);
        s.add(&"k", 1010);
        s.add(&"k", 1020);
        assert_eq!(s.top(1, 1030)[0].1.count, 3);
        assert_eq!(s.since_ms(), 0);
        assert_eq!(s.top(1, 2030)[0].1.count, 2);
        assert_eq!(s.since_ms(), 1000);
    }

    /// A key replaced in the current window but kept in the previous one: its count in the
    /// current window is unknown up to that window's floor, which the report adds (it used to
    /// add nothing, and the sum fell below the truth).
    #[test]
    fn a_key_replaced_in_one_window_is_still_bounded_from_above() {
        let mut s = Recent::new(2, 1000, 0);
        for _ in 0..10 {
            s.add(&0u32, 10);
        }
        // Next window: key 0 counted 3 times, then pushed out by keys 1..=6, each counted 4
        // times in turns (two slots).
        for _ in 0..3 {
            s.add(&0u32, 1010);
        }
        for k in 1..=6u32 {
            for _ in 0..4 {
                s.add(&k, 1020);
            }
        }
        assert!(!s.current.index.contains_key(&0));
        let top = s.top(10, 1030);
        let (_, c) = top
            .iter()
            .find(|(k, _)| *k == 0)
            .expect("kept in the previous window");
        assert!(c.count >= 13, "{c:?}: an upper bound of 10 + 3");
        assert!(c.count - c.error <= 13, "{c:?}");
    }

    /// A sketch of 1 s windows fed `stream` (keys at their times, sorted here), the stream
    /// sorted, and the time of its last event.
    fn windows_of(mut stream: Vec<(u8, i64)>, cap: usize) -> (Recent<u8>, Vec<(u8, i64)>, i64) {
        stream.sort_by_key(|(_, t)| *t);
        let mut s = Recent::new(cap, 1000, 0);
        for (k, t) in &stream {
            s.add(k, *t);
        }
        let now = stream.last().map_or(0, |(_, t)| *t);
        (s, stream, now)
    }

    proptest! {
        /// Space-Saving's guarantees: memory never exceeds the capacity; a kept key's count
        /// bounds its true count from above by at most its error; any key more frequent than
        /// total / capacity is kept.
        #[test]
        fn space_saving_guarantees(stream in prop::collection::vec(0u8..40, 0..2000), cap in 1usize..20) {
            let mut s = SpaceSaving::new(cap);
            let mut truth: std::collections::HashMap<u8, u64> = Default::default();
            for k in &stream {
                s.add(k);
                *truth.entry(*k).or_default() += 1;
                prop_assert!(s.len() <= cap);
            }
            for (k, c) in s.iter() {
                let t = truth[k];
                prop_assert!(c.count >= t && c.count - c.error <= t, "{} {:?} truth {}", k, c, t);
            }
            let total = stream.len() as u64;
            for (k, t) in &truth {
                if *t > total / cap as u64 {
                    prop_assert!(s.iter().any(|(kk, _)| kk == k), "frequent key {} dropped", k);
                }
                let c = s.get(k);
                prop_assert!(c.count >= *t && c.count - c.error <= *t, "{} {:?} truth {}", k, c, t);
            }
        }

        /// A new key takes the place of a key with the smallest count, as a scan of every
        /// count finds it (the look from the last replaced slot, stopping at the smallest
        /// count seen last, must not settle for a larger one).
        #[test]
        fn a_new_key_replaces_a_smallest_count(stream in prop::collection::vec(0u8..60, 0..2000), cap in 1usize..20) {
            let mut s = SpaceSaving::new(cap);
            for k in &stream {
                let new = !s.index.contains_key(k) && s.len() == cap;
                let min = s.counts.iter().map(|c| c.count).min().unwrap_or(0);
                s.add(k);
                if new {
                    prop_assert_eq!(s.get(k), Count { count: min + 1, error: min });
                }
            }
        }

        /// The same bounds over two windows: every key reported is bounded by its count from
        /// above and by count - error from below, counting what it got in both windows.
        #[test]
        fn the_report_bounds_the_truth_over_both_windows(
            stream in prop::collection::vec((0u8..30, 0i64..2000), 0..1500),
            cap in 1usize..12,
        ) {
            let (mut s, stream, now) = windows_of(stream, cap);
            let top = s.top(usize::MAX, now);
            let since = s.since_ms();
            for (k, c) in top {
                let t = stream.iter().filter(|(kk, at)| *kk == k && *at >= since).count() as u64;
                prop_assert!(c.count >= t && c.count - c.error <= t, "{} {:?} truth {}", k, c, t);
            }
        }

        /// `top_where` reports what the report of every key, each window's count looked up
        /// key by key and then filtered, would: the same keys, counts and order, whatever the
        /// windows hold (both with replaced keys included) and whatever is filtered out.
        #[test]
        fn top_where_is_the_filtered_full_report(
            stream in prop::collection::vec((0u8..40, 0i64..2000), 0..1500),
            cap in 1usize..12,
            n in 0usize..15,
            hidden in 0u8..5,
        ) {
            let (mut s, _, now) = windows_of(stream, cap);
            let keep = |k: &u8| k % 5 != hidden;
            let got = s.top_where(n, now, keep);
            // The model: each key once, both windows' `get` (the floor for a key not kept).
            let mut all: Vec<(u8, Count)> = Vec::new();
            for (k, _) in s.previous.iter().chain(s.current.iter()) {
                if all.iter().any(|(kk, _)| kk == k) {
                    continue;
                }
                let (p, c) = (s.previous.get(k), s.current.get(k));
                all.push((*k, Count { count: p.count + c.count, error: p.error + c.error }));
            }
            all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
            let want: Vec<(u8, Count)> = all.into_iter().filter(|(k, _)| keep(k)).take(n).collect();
            prop_assert_eq!(got, want);
        }
    }
}

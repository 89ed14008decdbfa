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
//! Cost: a kept key is one hash look-up; a new key when the sketch is full scans the kept keys
//! for the smallest (`capacity` is small and fixed, 64 by default, so this is bounded).

use std::collections::HashMap;
use std::hash::Hash;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub count: u64,
    /// How much of `count` may have been inherited from an evicted key.
    pub error: u64,
}

#[derive(Debug, Clone)]
pub struct SpaceSaving<K> {
    capacity: usize,
    kept: HashMap<K, Count>,
}

impl<K: Eq + Hash + Clone> SpaceSaving<K> {
    pub fn new(capacity: usize) -> Self {
        SpaceSaving {
            capacity: capacity.max(1),
            kept: HashMap::new(),
        }
    }

    pub fn add(&mut self, key: &K) {
        if let Some(c) = self.kept.get_mut(key) {
            c.count += 1;
            return;
        }
        if self.kept.len() < self.capacity {
            self.kept.insert(key.clone(), Count { count: 1, error: 0 });
            return;
        }
        let (victim, min) = self
            .kept
            .iter()
            .min_by_key(|(_, c)| c.count)
            .map(|(k, c)| (k.clone(), c.count))
            .expect("a full sketch keeps at least one key");
        self.kept.remove(&victim);
        self.kept.insert(
            key.clone(),
            Count {
                count: min + 1,
                error: min,
            },
        );
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &Count)> {
        self.kept.iter()
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
    pub fn top(&mut self, n: usize, now_ms: i64) -> Vec<(K, Count)> {
        self.roll(now_ms);
        let mut sum: HashMap<&K, Count> = HashMap::new();
        for (k, c) in self.previous.iter().chain(self.current.iter()) {
            let e = sum.entry(k).or_insert(Count { count: 0, error: 0 });
            e.count += c.count;
            e.error += c.error;
        }
        let mut all: Vec<(K, Count)> = sum.into_iter().map(|(k, c)| (k.clone(), c)).collect();
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then_with(|| a.0.cmp(&b.0)));
        all.truncate(n);
        all
    }

    /// What the report covers now: from `started_ms - window_ms` (the previous window's start).
    pub fn since_ms(&self) -> i64 {
        self.started_ms.saturating_sub(self.window_ms)
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

    proptest! {
        /// Space-Saving's guarantees: memory never exceeds the capacity; a kept key's count
        /// bounds its true count from above by at most its error; any key more frequent than
        /// total / capacity is kept.
        #[test]
        fn space_saving_guarantees(stream in prop::collection::vec(0u8..40, 0..2000), cap in 1usize..20) {
            let mut s = SpaceSaving::new(cap);
            let mut truth: HashMap<u8, u64> = HashMap::new();
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
            }
        }
    }
}

//! A fixed-size histogram of durations (microseconds), for the wait- and hold-time percentiles
//! of `INFO rlock`.
//!
//! Log-linear buckets, as HdrHistogram (behind Redis 7's `latencystats`) lays them out: values
//! below 32 have a bucket each; above, every power of two is cut into 32 equal buckets, so a
//! bucket is at most 1/32 of its values wide and a percentile read from it is within 3.2 % of
//! the true value. 1,920 buckets cover every `u64`: recording is one `leading_zeros` and one
//! add, whatever was recorded before, and the memory is fixed (15 KiB) however many values
//! come.

/// Bits of the sub-bucket index: 2^5 = 32 buckets per power of two.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// 32 exact buckets for 0..32, then 32 per power of two from 2^5 to 2^63.
pub const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max: 0,
        }
    }
}

/// The bucket of `v`.
fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // ≥ SUB_BITS
    let shift = exp - SUB_BITS;
    (((shift + 1) as u64) << SUB_BITS) as usize + ((v >> shift) - SUB) as usize
}

/// The largest value that falls in bucket `i`.
fn highest(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i >> SUB_BITS) - 1;
    let m = (i & (SUB - 1)) + SUB;
    // For the last bucket ((m + 1) << shift) is 2^64: saturate instead of wrapping.
    ((m + 1) << shift).wrapping_sub(1).max(m << shift)
}

impl Histogram {
    pub fn record(&mut self, v: u64) {
        self.counts[index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value below or at which `q` (0 < q ≤ 1) of the recorded values lie, as the highest
    /// value of its bucket (never above the largest value recorded); `None` when empty.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(highest(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// `p50=…,p99=…,p99.9=…` in microseconds with three decimals, as Redis 7 prints
    /// `latency_percentiles_usec_<command>`; `None` when nothing was recorded.
    pub fn latencystats(&self) -> Option<String> {
        let p = |q| self.percentile(q).unwrap_or(0) as f64;
        (self.total > 0).then(|| {
            format!(
                "p50={:.3},p99={:.3},p99.9={:.3}",
                p(0.50),
                p(0.99),
                p(0.999)
            )
        })
    }

    pub fn reset(&mut self) {
        *self = Histogram::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn buckets_are_contiguous_and_cover_every_value() {
        assert_eq!(index(0), 0);
        assert_eq!(index(31), 31);
        assert_eq!(index(32), 32);
        assert_eq!(index(63), 63);
        assert_eq!(index(64), 64);
        assert_eq!(index(u64::MAX), BUCKETS - 1);
        assert_eq!(highest(BUCKETS - 1), u64::MAX);
        for i in 1..BUCKETS {
            assert_eq!(highest(i - 1) + 1, lowest(i), "bucket {i}");
        }
    }

    fn lowest(i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            highest(i - 1) + 1
        }
    }

    #[test]
    fn percentiles_of_known_values() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(0.5), None);
        assert_eq!(h.latencystats(), None);
        // 1..=1000 ms in microseconds.
        for ms in 1..=1000u64 {
            h.record(ms * 1000);
        }
        let within = |got: u64, want: u64| {
            let err = (got as f64 - want as f64).abs() / want as f64;
            assert!(err <= 1.0 / 32.0, "got {got}, want {want}");
            assert!(got >= want, "a bucket's highest value is an upper bound");
        };
        within(h.percentile(0.5).unwrap(), 500_000);
        within(h.percentile(0.99).unwrap(), 990_000);
        within(h.percentile(0.999).unwrap(), 999_000);
        assert_eq!(
            h.percentile(1.0),
            Some(1_000_000),
            "capped at the largest value"
        );
        assert_eq!(h.count(), 1000);
        let s = h.latencystats().unwrap();
        assert!(
            s.starts_with("p50=5") && s.contains(",p99=") && s.contains(",p99.9="),
            "{s}"
        );
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in [0, 1, 2, 3, 4, 5, 6, 7, 8, 31] {
            h.record(v);
        }
        assert_eq!(h.percentile(0.5), Some(4));
        assert_eq!(h.percentile(1.0), Some(31));
        assert_eq!(
            h.latencystats().unwrap(),
            "p50=4.000,p99=31.000,p99.9=31.000"
        );
    }

    proptest! {
        #[test]
        fn a_value_lies_in_its_bucket(v in any::<u64>()) {
            let i = index(v);
            prop_assert!(i < BUCKETS);
            prop_assert!(lowest(i) <= v && v <= highest(i));
            // The bucket is at most 1/32 of its values wide.
            prop_assert!((highest(i) - lowest(i)) <= lowest(i) / 32 + 1);
        }

        #[test]
        fn percentiles_bound_the_true_ones(mut vs in prop::collection::vec(0u64..10_000_000, 1..300), q in 0.01f64..1.0) {
            let mut h = Histogram::default();
            for v in &vs {
                h.record(*v);
            }
            vs.sort_unstable();
            let rank = ((q * vs.len() as f64).ceil() as usize).clamp(1, vs.len());
            let truth = vs[rank - 1];
            let got = h.percentile(q).unwrap();
            prop_assert!(got >= truth);
            prop_assert!(got - truth <= truth / 32 + 1, "got {} truth {}", got, truth);
        }
    }
}

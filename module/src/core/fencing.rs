//! Fencing tokens that never repeat, not even across a failover that lost the counter's last
//! writes.
//!
//! A token is the lock's counter (`redisson_lock_token:{name}`, an integer Redisson's
//! `RFencedLock` script `INCR`s as well) plus one, or the node's clock in microsecond-sized
//! steps — unix milliseconds × 1,000 — if that is larger. The counter keeps tokens increasing
//! on one node whatever its clock does; the clock term keeps them increasing across nodes and
//! across lost writes: a new primary that lost the old one's last `INCR`s (asynchronous
//! replication), a restart that lost them (`appendfsync everysec`), a counter deleted by
//! `FLUSHALL` or `DEL`.
//!
//! It rests on two assumptions, both with wide margins:
//! - One lock is granted fewer than 1,000 times per millisecond on average (a grant takes a
//!   command round trip, and one server runs about 100-200 commands per millisecond in all),
//!   so the counter never runs ahead of the clock term.
//! - The clocks of the nodes that can become primary agree to within the time between the old
//!   primary's last grant and the new primary's first: at least the failure detection time
//!   (Sentinel's `down-after-milliseconds`, the cluster's `cluster-node-timeout`; an operator's
//!   `REPLICAOF NO ONE` or `CLUSTER FAILOVER` takes seconds). NTP keeps clocks within
//!   milliseconds.

/// Microsecond-sized steps: the clock term of a token is unix milliseconds × `PER_MS`.
pub const PER_MS: i64 = 1_000;

/// The token after a counter at `counter` (0 when the key does not exist), at `now_ms` (unix
/// milliseconds): the counter plus one, or the clock term if larger. `None` when the counter
/// cannot grow (it is at `i64::MAX`).
pub fn next_token(counter: i64, now_ms: i64) -> Option<i64> {
    let next = counter.checked_add(1)?;
    Some(next.max(now_ms.saturating_mul(PER_MS)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_clock_term_lifts_a_counter_that_lags_it() {
        assert_eq!(
            next_token(0, 1_700_000_000_000),
            Some(1_700_000_000_000_000)
        );
        assert_eq!(next_token(41, 0), Some(42));
        assert_eq!(next_token(i64::MAX, 1), None);
        assert_eq!(next_token(-5, 2), Some(2_000));
    }

    proptest! {
        /// Tokens strictly increase on one node whatever its clock does, and a node whose clock
        /// is later by a millisecond or more than another's last grant (at fewer than 1,000
        /// grants per millisecond) hands out a larger token even from a counter that lost
        /// writes.
        #[test]
        fn tokens_increase_and_survive_a_lost_counter(
            steps in prop::collection::vec((-5i64..5, 0usize..3), 1..200),
            lost in 0usize..200,
            later_ms in 1i64..10_000,
        ) {
            let mut now = 1_700_000_000_000i64;
            let mut counter = 0i64;
            let mut issued = Vec::new();
            for (dt, grants) in steps {
                now += dt; // the clock may step back
                for _ in 0..grants {
                    let t = next_token(counter, now).unwrap();
                    prop_assert!(t > counter);
                    counter = t;
                    issued.push((t, now));
                }
            }
            prop_assert!(issued.windows(2).all(|w| w[0].0 < w[1].0));
            // A new primary whose counter lost the last `lost` tokens, with a clock later than
            // every grant's clock by `later_ms`.
            let kept = issued.len().saturating_sub(lost);
            let base = if kept == 0 { 0 } else { issued[kept - 1].0 };
            let last_clock = issued.iter().map(|(_, at)| *at).max().unwrap_or(now);
            let t = next_token(base, last_clock + later_ms).unwrap();
            prop_assert!(issued.iter().all(|(old, _)| *old < t), "{t} repeats or goes back");
        }
    }
}

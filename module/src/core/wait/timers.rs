//! Every timed job of the module (wait deadlines, re-checks of objects at their lease end,
//! deferred work) in one ordered map. The skin keeps a single Redis timer armed at the earliest
//! entry, instead of one Redis timer per job: cancelling is a map removal, and nothing is
//! allocated for Redis to hand back.

use std::collections::BTreeMap;

/// Identifies a scheduled job: its due time and a sequence number that orders equal times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerKey {
    pub at_ms: i64,
    seq: u64,
}

#[derive(Debug)]
pub struct Timers<J> {
    jobs: BTreeMap<TimerKey, J>,
    seq: u64,
}

impl<J> Default for Timers<J> {
    fn default() -> Self {
        Timers {
            jobs: BTreeMap::new(),
            seq: 0,
        }
    }
}

impl<J> Timers<J> {
    pub fn schedule(&mut self, at_ms: i64, job: J) -> TimerKey {
        self.seq += 1;
        let key = TimerKey {
            at_ms,
            seq: self.seq,
        };
        self.jobs.insert(key, job);
        key
    }

    pub fn cancel(&mut self, key: TimerKey) -> Option<J> {
        self.jobs.remove(&key)
    }

    /// When the earliest job is due.
    pub fn next_at(&self) -> Option<i64> {
        self.jobs.keys().next().map(|k| k.at_ms)
    }

    /// The earliest job due at or before `now`, removed.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<(TimerKey, J)> {
        let first = *self.jobs.keys().next()?;
        if first.at_ms > now_ms {
            return None;
        }
        self.jobs.remove(&first).map(|j| (first, j))
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_in_time_order_then_sequence() {
        let mut t = Timers::default();
        let b = t.schedule(20, "b");
        t.schedule(10, "a");
        t.schedule(20, "c");
        assert_eq!(t.next_at(), Some(10));
        assert_eq!(t.pop_due(5), None);
        assert_eq!(t.pop_due(10).map(|(_, j)| j), Some("a"));
        assert_eq!(t.cancel(b), Some("b"));
        assert_eq!(t.cancel(b), None, "cancelled once");
        assert_eq!(t.pop_due(100).map(|(_, j)| j), Some("c"));
        assert!(t.is_empty());
        assert_eq!(t.next_at(), None);
    }
}

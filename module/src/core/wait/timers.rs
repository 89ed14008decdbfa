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

    /// Marks the jobs scheduled so far: [`Timers::pop_due`] with it leaves out jobs scheduled
    /// after.
    pub fn mark(&self) -> u64 {
        self.seq
    }

    /// The earliest job due at or before `now` among those scheduled up to `mark` (`u64::MAX`:
    /// all of them), removed.
    /// A pass over due jobs uses it so that a job which schedules another one already due (a
    /// re-check of a key whose lease end the server does not see passed yet) cannot keep the
    /// pass running: the new job waits for the next wake-up.
    pub fn pop_due(&mut self, now_ms: i64, mark: u64) -> Option<(TimerKey, J)> {
        let last = TimerKey {
            at_ms: now_ms,
            seq: u64::MAX,
        };
        let key = *self
            .jobs
            .range(..=last)
            .map(|(k, _)| k)
            .find(|k| k.seq <= mark)?;
        self.jobs.remove(&key).map(|j| (key, j))
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
        assert_eq!(t.pop_due(5, u64::MAX), None);
        assert_eq!(t.pop_due(10, u64::MAX).map(|(_, j)| j), Some("a"));
        assert_eq!(t.cancel(b), Some("b"));
        assert_eq!(t.cancel(b), None, "cancelled once");
        assert_eq!(t.pop_due(100, u64::MAX).map(|(_, j)| j), Some("c"));
        assert!(t.is_empty());
        assert_eq!(t.next_at(), None);
    }

    #[test]
    fn a_pass_leaves_out_jobs_scheduled_during_it() {
        let mut t = Timers::default();
        t.schedule(10, "old");
        let mark = t.mark();
        t.schedule(5, "new, due earlier");
        assert_eq!(t.pop_due(10, mark).map(|(_, j)| j), Some("old"));
        assert_eq!(
            t.pop_due(10, mark),
            None,
            "the new job waits for the next pass"
        );
        assert_eq!(t.next_at(), Some(5));
        assert_eq!(
            t.pop_due(10, u64::MAX).map(|(_, j)| j),
            Some("new, due earlier")
        );
    }
}

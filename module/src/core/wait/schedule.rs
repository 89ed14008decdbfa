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

/// Identifies an entry of [`Deadlines`]: its due time, its sequence number (which also tells
/// a stale handle from the entry now in its slot) and its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    pub at_ms: i64,
    seq: u64,
    slot: u32,
}

/// Due times of many items, each cancellable: a binary min-heap by (time, sequence) whose
/// entries name their item's slot. Inserting in time order (leases of one length, granted one
/// after another) is O(1). Cancelling is O(1): the item leaves its slot and its heap entry
/// stays behind, dead (its slot is empty or holds a later item, of another sequence), to be
/// skipped when it reaches the top; once the dead outnumber the live (plus a few), one pass
/// drops them all and re-heaps (O(n), so O(1) amortised over the cancels that made them), so
/// the heap stays under twice the live entries. Nothing is allocated per item once the vectors
/// have grown. A session's watched holds' lease ends: a [`Timers`] entry per hold cost 1,200
/// instructions per watch in its B-tree (insert and remove, callgrind), removing the entry
/// from the heap at once about 500 (its hole sifted down through the heap's 13 levels with
/// 10,000 watched) against about 40 left dead.
#[derive(Debug)]
pub struct Deadlines<T> {
    /// (time, sequence, slot), a min-heap; dead entries among them.
    heap: Vec<(i64, u64, u32)>,
    /// Per slot: its sequence number and item (`None`: free).
    slots: Vec<(u64, Option<T>)>,
    free: Vec<u32>,
    seq: u64,
    /// Entries of `heap` whose item was cancelled.
    dead: usize,
}

/// Dead entries allowed beyond the live ones before a pass drops them.
const SLACK: usize = 32;

impl<T> Default for Deadlines<T> {
    fn default() -> Self {
        Deadlines {
            heap: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
            dead: 0,
        }
    }
}

impl<T> Deadlines<T> {
    pub fn push(&mut self, at_ms: i64, item: T) -> Deadline {
        self.seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = (self.seq, Some(item));
                slot
            }
            None => {
                self.slots.push((self.seq, Some(item)));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap.push((at_ms, self.seq, slot));
        self.up(self.heap.len() - 1);
        Deadline {
            at_ms,
            seq: self.seq,
            slot,
        }
    }

    /// The item of `d`, removed (`None`: it was popped or cancelled already).
    pub fn cancel(&mut self, d: Deadline) -> Option<T> {
        let item = self.take(d.slot, d.seq)?;
        self.dead += 1;
        if self.dead > self.len() + SLACK {
            self.drop_dead();
        }
        self.tidy();
        Some(item)
    }

    /// When the earliest item is due.
    pub fn next_at(&mut self) -> Option<i64> {
        self.pop_dead();
        self.heap.first().map(|e| e.0)
    }

    /// The earliest item due at or before `now`, removed, with its handle.
    pub fn pop_due(&mut self, now_ms: i64) -> Option<(Deadline, T)> {
        self.pop_dead();
        let &(at_ms, seq, slot) = self.heap.first().filter(|e| e.0 <= now_ms)?;
        let d = Deadline { at_ms, seq, slot };
        self.pop_top();
        let item = self
            .take(slot, seq)
            .expect("a live entry's slot holds its item");
        self.tidy();
        Some((d, item))
    }

    /// Items pending.
    pub fn len(&self) -> usize {
        self.heap.len() - self.dead
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The item in `slot` if it is the one of sequence `seq`, taken out; the slot is free.
    fn take(&mut self, slot: u32, seq: u64) -> Option<T> {
        let (s, item) = self.slots.get_mut(slot as usize)?;
        if *s != seq {
            return None;
        }
        let item = item.take()?;
        self.free.push(slot);
        Some(item)
    }

    /// Whether heap entry `e` is dead: its slot no longer holds its item.
    fn is_dead(&self, e: (i64, u64, u32)) -> bool {
        let (seq, item) = &self.slots[e.2 as usize];
        *seq != e.1 || item.is_none()
    }

    /// Take the dead entries off the top.
    fn pop_dead(&mut self) {
        while let Some(&e) = self.heap.first() {
            if !self.is_dead(e) {
                break;
            }
            self.pop_top();
            self.dead -= 1;
        }
    }

    /// Remove the top entry.
    fn pop_top(&mut self) {
        let last = self.heap.pop().expect("an entry is in the heap");
        if !self.heap.is_empty() {
            self.refill(0, last);
        }
    }

    /// Drop every dead entry and make a heap of the rest again (Floyd's bottom-up build).
    fn drop_dead(&mut self) {
        let mut heap = std::mem::take(&mut self.heap);
        heap.retain(|&e| !self.is_dead(e));
        self.heap = heap;
        self.dead = 0;
        for i in (0..self.heap.len() / 2).rev() {
            let e = self.heap[i];
            self.down(i, e);
        }
    }

    fn key(&self, i: usize) -> (i64, u64) {
        (self.heap[i].0, self.heap[i].1)
    }

    /// Sift the entry at `i` towards the root while it is less than its parent.
    fn up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.key(parent) <= (e.0, e.1) {
                break;
            }
            self.heap[i] = self.heap[parent];
            i = parent;
        }
        self.heap[i] = e;
    }

    /// The lesser of `i`'s children, if it has any.
    fn lesser_child(&self, i: usize) -> Option<usize> {
        let (l, n) = (2 * i + 1, self.heap.len());
        if l >= n {
            return None;
        }
        Some(if l + 1 < n && self.key(l + 1) < self.key(l) {
            l + 1
        } else {
            l
        })
    }

    /// Put `e` at `i`, sifted down while a child is less.
    fn down(&mut self, mut i: usize, e: (i64, u64, u32)) {
        while let Some(c) = self.lesser_child(i) {
            if (e.0, e.1) <= self.key(c) {
                break;
            }
            self.heap[i] = self.heap[c];
            i = c;
        }
        self.heap[i] = e;
    }

    /// Fill the hole at `i` with `e` (the heap's last entry, just taken off). The hole first
    /// goes down to a leaf along the lesser children, one comparison a level, and `e` rises
    /// from there (Floyd's way: `e`, the last and mostly the latest, rarely rises far).
    fn refill(&mut self, mut i: usize, e: (i64, u64, u32)) {
        while let Some(c) = self.lesser_child(i) {
            self.heap[i] = self.heap[c];
            i = c;
        }
        self.heap[i] = e;
        self.up(i);
    }

    /// Give memory back: all of it once nothing is pending (dead entries included); the
    /// heap's spare room after a burst (the slots stay while any is used: handles name them).
    fn tidy(&mut self) {
        if self.is_empty() {
            if self.slots.capacity() > 64 || self.heap.capacity() > 64 {
                *self = Deadlines {
                    seq: self.seq,
                    ..Deadlines::default()
                };
            } else {
                self.heap.clear();
                self.slots.clear();
                self.free.clear();
                self.dead = 0;
            }
        } else if self.heap.capacity() > 64 && self.heap.len() * 4 < self.heap.capacity() {
            self.heap.shrink_to(self.heap.len() * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_come_due_in_time_order_then_sequence() {
        let mut d = Deadlines::default();
        let b = d.push(20, "b");
        d.push(10, "a");
        let c = d.push(20, "c");
        d.push(30, "d");
        assert_eq!(d.next_at(), Some(10));
        assert_eq!(d.pop_due(5), None);
        assert_eq!(d.pop_due(10).map(|(_, x)| x), Some("a"));
        assert_eq!(d.cancel(b), Some("b"));
        assert_eq!(d.cancel(b), None, "cancelled once");
        let e = d.push(20, "e");
        assert_eq!(
            d.cancel(b),
            None,
            "a stale handle does not name the slot's new entry"
        );
        assert_eq!(d.pop_due(100), Some((c, "c")));
        assert_eq!(d.cancel(c), None, "popped");
        assert_eq!(d.pop_due(100), Some((e, "e")));
        assert_eq!(d.pop_due(100).map(|(_, x)| x), Some("d"));
        assert!(d.is_empty());
        assert_eq!(d.next_at(), None);
    }

    /// Against a sorted list, with cancellations anywhere: the order stays (time, sequence).
    #[test]
    fn deadlines_keep_their_order_whatever_is_cancelled() {
        let mut d = Deadlines::default();
        let mut model: Vec<(i64, u64, Deadline)> = Vec::new();
        let mut x: u64 = 7;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        for round in 0..4000u64 {
            match next() % 4 {
                0 | 1 => {
                    let at = (next() % 50) as i64;
                    let h = d.push(at, round);
                    model.push((at, round, h));
                }
                2 if !model.is_empty() => {
                    let i = (next() as usize) % model.len();
                    let (_, item, h) = model.remove(i);
                    assert_eq!(d.cancel(h), Some(item));
                }
                _ => {
                    model.sort_by_key(|e| (e.0, e.2.seq));
                    let now = (next() % 50) as i64;
                    let want = model.first().filter(|e| e.0 <= now).map(|e| e.1);
                    let got = d.pop_due(now).map(|(_, item)| item);
                    assert_eq!(got, want);
                    if want.is_some() {
                        model.remove(0);
                    }
                }
            }
            assert_eq!(d.len(), model.len());
            assert!(
                d.heap.len() <= 2 * d.len() + SLACK + 1,
                "cancelled entries left behind stay bounded by the live ones"
            );
        }
    }

    /// Cancelled in due order (a pipeline releasing what it took, in turn): every cancel leaves
    /// its entry dead at the top, and the next live one still comes due first.
    #[test]
    fn deadlines_cancelled_from_the_top_leave_the_next_due() {
        let mut d = Deadlines::default();
        let hs: Vec<Deadline> = (0..1000).map(|i| d.push(i, i)).collect();
        for (i, h) in hs.iter().enumerate().take(999) {
            assert_eq!(d.cancel(*h), Some(i as i64));
            assert!(d.heap.len() <= 2 * d.len() + SLACK + 1);
        }
        assert_eq!(d.len(), 1);
        assert_eq!(d.next_at(), Some(999));
        assert_eq!(d.pop_due(998), None);
        assert_eq!(d.pop_due(999).map(|(_, x)| x), Some(999));
        assert!(d.is_empty());
        assert!(d.heap.is_empty(), "nothing pending: the dead go too");
    }

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

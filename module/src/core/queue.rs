//! FIFO queues of parked waiters, one per (database, key), shared by every object type.
//!
//! Generic over the waiter handle `H` (a blocked-client pointer in the module, a number in the
//! tests) so the bookkeeping unit-tests without Redis. An index from handle to lock lets a
//! timeout or disconnect remove its waiter without scanning every queue.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::rc::Rc;

/// A lock's identity: database number and key bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockId {
    pub db: i32,
    pub key: Rc<[u8]>,
}

impl LockId {
    pub fn new(db: i32, key: &[u8]) -> LockId {
        LockId {
            db,
            key: key.into(),
        }
    }
}

/// One parked acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter<H> {
    pub handle: H,
    pub owner: Box<[u8]>,
    pub lease_ms: i64,
    pub fence: bool,
}

/// The waiters of one lock, plus the module timer that watches it (armed at the holder's
/// expiry, or at once after an event that may have freed it).
#[derive(Debug)]
pub struct KeyQueue<H> {
    waiters: VecDeque<Waiter<H>>,
    pub timer: Option<Timer>,
    /// The key was seen to expire since the last grant (for the `grants_after_expiry` counter).
    pub expired: bool,
}

impl<H> KeyQueue<H> {
    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    pub id: u64,
    /// Absolute ms time the timer fires.
    pub at_ms: i64,
}

#[derive(Debug)]
pub struct Queues<H> {
    locks: HashMap<LockId, KeyQueue<H>>,
    index: HashMap<H, LockId>,
}

impl<H> Default for Queues<H> {
    fn default() -> Self {
        Queues {
            locks: HashMap::new(),
            index: HashMap::new(),
        }
    }
}

impl<H: Copy + Eq + Hash> Queues<H> {
    /// Park `waiter` at the tail of `id`'s queue.
    pub fn push(&mut self, id: &LockId, waiter: Waiter<H>) {
        // Reuse the queue's own Rc for the index so the key bytes are stored once per lock.
        let (id, queue) = match self.locks.get_key_value(id) {
            Some((k, _)) => (k.clone(), self.locks.get_mut(id).unwrap()),
            None => {
                let q = self.locks.entry(id.clone()).or_insert_with(|| KeyQueue {
                    waiters: VecDeque::new(),
                    timer: None,
                    expired: false,
                });
                (id.clone(), q)
            }
        };
        self.index.insert(waiter.handle, id);
        queue.waiters.push_back(waiter);
    }

    pub fn is_queued(&self, id: &LockId) -> bool {
        self.locks.get(id).is_some_and(|q| !q.waiters.is_empty())
    }

    pub fn get(&self, id: &LockId) -> Option<&KeyQueue<H>> {
        self.locks.get(id)
    }

    pub fn get_mut(&mut self, id: &LockId) -> Option<&mut KeyQueue<H>> {
        self.locks.get_mut(id)
    }

    /// The next waiter of `id`, removed from the queue.
    pub fn pop_front(&mut self, id: &LockId) -> Option<Waiter<H>> {
        let waiter = self.locks.get_mut(id)?.waiters.pop_front()?;
        self.index.remove(&waiter.handle);
        Some(waiter)
    }

    /// Remove a waiter wherever it is queued (timeout, disconnect). `None` when it is not queued
    /// any more, e.g. because it was just granted.
    pub fn remove(&mut self, handle: H) -> Option<(LockId, Waiter<H>)> {
        let id = self.index.remove(&handle)?;
        let queue = self.locks.get_mut(&id)?;
        let pos = queue.waiters.iter().position(|w| w.handle == handle)?;
        let waiter = queue.waiters.remove(pos)?;
        Some((id, waiter))
    }

    /// Drop `id`'s entry if nobody waits; returns its timer so the caller can stop it.
    pub fn forget_if_idle(&mut self, id: &LockId) -> Option<Timer> {
        if self.locks.get(id)?.waiters.is_empty() {
            self.locks.remove(id).and_then(|q| q.timer)
        } else {
            None
        }
    }

    /// Take every waiter of `id` (the key became something that is not a lock).
    pub fn drain(&mut self, id: &LockId) -> Vec<Waiter<H>> {
        let Some(queue) = self.locks.get_mut(id) else {
            return Vec::new();
        };
        let waiters: Vec<_> = queue.waiters.drain(..).collect();
        for w in &waiters {
            self.index.remove(&w.handle);
        }
        waiters
    }

    /// Owners waiting for `id`, in FIFO order.
    pub fn owners(&self, id: &LockId) -> Vec<&[u8]> {
        self.locks
            .get(id)
            .map_or_else(Vec::new, |q| q.waiters.iter().map(|w| &*w.owner).collect())
    }

    pub fn len(&self, id: &LockId) -> usize {
        self.locks.get(id).map_or(0, |q| q.waiters.len())
    }

    /// Locks with waiters in database `db`, or in every database when `db` is `None`.
    pub fn ids(&self, db: Option<i32>) -> Vec<LockId> {
        self.locks
            .keys()
            .filter(|id| db.is_none_or(|d| id.db == d))
            .cloned()
            .collect()
    }

    /// Waiters parked across all locks.
    pub fn total(&self) -> usize {
        self.index.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(handle: u32, owner: &str) -> Waiter<u32> {
        Waiter {
            handle,
            owner: owner.as_bytes().into(),
            lease_ms: 100,
            fence: false,
        }
    }

    #[test]
    fn fifo_per_lock() {
        let mut q = Queues::default();
        let a = LockId::new(0, b"a");
        let b = LockId::new(0, b"b");
        q.push(&a, w(1, "x"));
        q.push(&b, w(2, "y"));
        q.push(&a, w(3, "z"));
        assert_eq!(q.owners(&a), vec![&b"x"[..], &b"z"[..]]);
        assert_eq!(q.total(), 3);
        assert_eq!(q.pop_front(&a).unwrap().handle, 1);
        assert_eq!(q.pop_front(&a).unwrap().handle, 3);
        assert!(q.pop_front(&a).is_none());
        assert!(!q.is_queued(&a));
        assert!(q.is_queued(&b));
        assert_eq!(q.total(), 1);
    }

    #[test]
    fn databases_are_separate() {
        let mut q = Queues::default();
        q.push(&LockId::new(0, b"k"), w(1, "x"));
        assert!(!q.is_queued(&LockId::new(1, b"k")));
        assert_eq!(q.ids(Some(0)).len(), 1);
        assert!(q.ids(Some(1)).is_empty());
        assert_eq!(q.ids(None).len(), 1);
    }

    #[test]
    fn remove_from_the_middle_and_twice() {
        let mut q = Queues::default();
        let a = LockId::new(0, b"a");
        for h in 1..=3 {
            q.push(&a, w(h, "o"));
        }
        let (id, gone) = q.remove(2).unwrap();
        assert_eq!((id, gone.handle), (a.clone(), 2));
        assert!(q.remove(2).is_none(), "a waiter is removed once");
        assert_eq!(q.pop_front(&a).unwrap().handle, 1);
        assert!(
            q.remove(1).is_none(),
            "a granted waiter is no longer queued"
        );
        assert_eq!(q.len(&a), 1);
    }

    #[test]
    fn idle_entries_are_forgotten_with_their_timer() {
        let mut q = Queues::default();
        let a = LockId::new(0, b"a");
        q.push(&a, w(1, "o"));
        q.get_mut(&a).unwrap().timer = Some(Timer { id: 7, at_ms: 10 });
        assert_eq!(q.forget_if_idle(&a), None, "still has a waiter");
        q.pop_front(&a);
        assert_eq!(q.forget_if_idle(&a), Some(Timer { id: 7, at_ms: 10 }));
        assert!(q.get(&a).is_none());
    }

    #[test]
    fn drain_empties_index() {
        let mut q = Queues::default();
        let a = LockId::new(0, b"a");
        q.push(&a, w(1, "o"));
        q.push(&a, w(2, "p"));
        assert_eq!(q.drain(&a).len(), 2);
        assert_eq!(q.total(), 0);
        assert!(q.remove(1).is_none());
    }
}

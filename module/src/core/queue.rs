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
    /// Unique per parked acquire: a deadline timer acts only on the wait it was made for, even
    /// if the handle is reused by a later wait.
    pub serial: u64,
    /// The timer that ends this wait at its BLOCK deadline (none for BLOCK 0).
    pub deadline_timer: Option<u64>,
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

    /// The queued waiter with this handle, if any.
    pub fn find(&self, handle: H) -> Option<&Waiter<H>> {
        let id = self.index.get(&handle)?;
        self.locks
            .get(id)?
            .waiters
            .iter()
            .find(|w| w.handle == handle)
    }

    pub fn find_mut(&mut self, handle: H) -> Option<&mut Waiter<H>> {
        let id = self.index.get(&handle)?;
        self.locks
            .get_mut(id)?
            .waiters
            .iter_mut()
            .find(|w| w.handle == handle)
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
            serial: handle as u64,
            deadline_timer: None,
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
        assert!(q.find(2).is_none());
        assert_eq!(q.find(3).map(|w| w.serial), Some(3));
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

/// Property tests: `Queues` against a plain model (a list of per-lock FIFO lists) under random
/// push / pop / remove / drain / forget sequences over a few locks in two databases.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push {
            lock: usize,
        },
        Pop {
            lock: usize,
        },
        /// Remove the waiter with this handle (it may be queued, granted or never existed).
        Remove {
            handle: u32,
        },
        Drain {
            lock: usize,
        },
        Forget {
            lock: usize,
        },
    }

    const LOCKS: [(i32, &[u8]); 4] = [(0, b"a"), (0, b"b"), (1, b"a"), (0, b"")];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..LOCKS.len()).prop_map(|lock| Op::Push { lock }),
            2 => (0..LOCKS.len()).prop_map(|lock| Op::Pop { lock }),
            3 => (0u32..40).prop_map(|handle| Op::Remove { handle }),
            1 => (0..LOCKS.len()).prop_map(|lock| Op::Drain { lock }),
            1 => (0..LOCKS.len()).prop_map(|lock| Op::Forget { lock }),
        ]
    }

    proptest! {
        #[test]
        fn queues_match_a_model(ops in prop::collection::vec(op(), 1..200)) {
            let ids: Vec<LockId> = LOCKS.iter().map(|(db, k)| LockId::new(*db, k)).collect();
            let mut q: Queues<u32> = Queues::default();
            let mut model: Vec<VecDeque<u32>> = vec![VecDeque::new(); LOCKS.len()];
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Push { lock } => {
                        q.push(&ids[lock], Waiter { handle: next, owner: next.to_string().into_bytes().into(), lease_ms: 1, fence: false, serial: next as u64, deadline_timer: None });
                        model[lock].push_back(next);
                        next += 1;
                    }
                    Op::Pop { lock } => {
                        prop_assert_eq!(q.pop_front(&ids[lock]).map(|w| w.handle), model[lock].pop_front());
                    }
                    Op::Remove { handle } => {
                        let want = model.iter().position(|m| m.contains(&handle));
                        let got = q.remove(handle);
                        match want {
                            Some(lock) => {
                                let (id, w) = got.expect("queued waiter found");
                                prop_assert_eq!(&id, &ids[lock]);
                                prop_assert_eq!(w.handle, handle);
                                model[lock].retain(|h| *h != handle);
                            }
                            None => prop_assert!(got.is_none()),
                        }
                    }
                    Op::Drain { lock } => {
                        let got: Vec<u32> = q.drain(&ids[lock]).iter().map(|w| w.handle).collect();
                        let want: Vec<u32> = model[lock].drain(..).collect();
                        prop_assert_eq!(got, want);
                    }
                    Op::Forget { lock } => {
                        q.forget_if_idle(&ids[lock]);
                    }
                }
                let total: usize = model.iter().map(|m| m.len()).sum();
                prop_assert_eq!(q.total(), total);
                for (lock, id) in ids.iter().enumerate() {
                    prop_assert_eq!(q.len(id), model[lock].len());
                    prop_assert_eq!(q.is_queued(id), !model[lock].is_empty());
                    let owners: Vec<Vec<u8>> = q.owners(id).iter().map(|o| o.to_vec()).collect();
                    let want: Vec<Vec<u8>> = model[lock].iter().map(|h| h.to_string().into_bytes()).collect();
                    prop_assert_eq!(owners, want);
                }
                let mut with_waiters: Vec<LockId> = q.ids(None).into_iter().filter(|id| q.is_queued(id)).collect();
                with_waiters.sort_by(|a, b| (a.db, &a.key[..]).cmp(&(b.db, &b.key[..])));
                let mut want: Vec<LockId> = ids.iter().enumerate().filter(|(i, _)| !model[*i].is_empty()).map(|(_, id)| id.clone()).collect();
                want.sort_by(|a, b| (a.db, &a.key[..]).cmp(&(b.db, &b.key[..])));
                prop_assert_eq!(with_waiters, want);
            }
        }
    }
}

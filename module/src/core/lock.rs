//! The reentrant lock's decisions, from what the key holds (Redisson's RLock layout: a hash whose
//! one field, the owner, counts the holds; PEXPIRE is the lease). The skin reads the key into a
//! [`View`], asks here what to do, and performs the writes.

use super::error::CmdError;

/// What the lock key holds, as far as one owner is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// No key: the lock is free.
    Free,
    /// A hash where `mine` is this owner's field: `None` when absent, `Some(None)` when it is
    /// not an integer, `Some(Some(n))` for a hold count.
    Hash { mine: Option<Option<i64>> },
    /// Any other type: not a lock.
    WrongType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// Free with nobody queued: create `{owner: 1}`.
    Grant,
    /// Free but waiters are queued: they come first (hand off, then decide again).
    ServeQueueFirst,
    /// Already held by this owner: set the count to `count` (re-entry never waits).
    Reenter { count: i64 },
    /// Held by someone else: wait if allowed, else fail.
    Busy,
}

pub fn acquire(view: View, queued: bool) -> Result<Acquire, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free if queued => Ok(Acquire::ServeQueueFirst),
        View::Free => Ok(Acquire::Grant),
        View::Hash { mine: None } => Ok(Acquire::Busy),
        View::Hash { mine: Some(None) } => Err(CmdError::CorruptCount),
        View::Hash {
            mine: Some(Some(n)),
        } => {
            // A count below 1 was not written by a lock client; re-entry repairs it to 1.
            let count = n.max(0).checked_add(1).ok_or(CmdError::CountOverflow)?;
            Ok(Acquire::Reenter { count })
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Holds remain: write the new count, keep the TTL.
    Partial { remaining: i64 },
    /// Last hold: delete the key, publish, hand off.
    Full,
}

pub fn release(view: View) -> Result<Release, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free | View::Hash { mine: None } => Err(CmdError::NotOwner),
        View::Hash { mine: Some(None) } => Err(CmdError::CorruptCount),
        View::Hash {
            mine: Some(Some(n)),
        } if n > 1 => Ok(Release::Partial { remaining: n - 1 }),
        View::Hash {
            mine: Some(Some(_)),
        } => Ok(Release::Full),
    }
}

/// Whether RENEW extends the lease (the owner holds it, as Redisson's `hexists` check).
pub fn renew(view: View) -> Result<bool, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Hash { mine: Some(_) } => Ok(true),
        View::Free | View::Hash { mine: None } => Ok(false),
    }
}

/// Whether FORCERELEASE deletes the key (never data that is not a lock).
pub fn force_release(view: View) -> Result<bool, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free => Ok(false),
        View::Hash { .. } => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE_2: View = View::Hash {
        mine: Some(Some(2)),
    };
    const MINE_1: View = View::Hash {
        mine: Some(Some(1)),
    };
    const OTHERS: View = View::Hash { mine: None };
    const CORRUPT: View = View::Hash { mine: Some(None) };

    #[test]
    fn acquire_decisions() {
        assert_eq!(acquire(View::Free, false), Ok(Acquire::Grant));
        assert_eq!(acquire(View::Free, true), Ok(Acquire::ServeQueueFirst));
        assert_eq!(acquire(MINE_2, true), Ok(Acquire::Reenter { count: 3 }));
        assert_eq!(acquire(OTHERS, false), Ok(Acquire::Busy));
        assert_eq!(acquire(CORRUPT, false), Err(CmdError::CorruptCount));
        assert_eq!(acquire(View::WrongType, false), Err(CmdError::WrongType));
        assert_eq!(
            acquire(
                View::Hash {
                    mine: Some(Some(i64::MAX))
                },
                false
            ),
            Err(CmdError::CountOverflow)
        );
        assert_eq!(
            acquire(
                View::Hash {
                    mine: Some(Some(-4))
                },
                false
            ),
            Ok(Acquire::Reenter { count: 1 })
        );
    }

    #[test]
    fn release_decisions() {
        assert_eq!(release(MINE_2), Ok(Release::Partial { remaining: 1 }));
        assert_eq!(release(MINE_1), Ok(Release::Full));
        assert_eq!(
            release(View::Hash {
                mine: Some(Some(0))
            }),
            Ok(Release::Full)
        );
        assert_eq!(release(OTHERS), Err(CmdError::NotOwner));
        assert_eq!(release(View::Free), Err(CmdError::NotOwner));
        assert_eq!(release(CORRUPT), Err(CmdError::CorruptCount));
        assert_eq!(release(View::WrongType), Err(CmdError::WrongType));
    }

    #[test]
    fn renew_and_force() {
        assert_eq!(renew(MINE_1), Ok(true));
        assert_eq!(renew(OTHERS), Ok(false));
        assert_eq!(renew(View::Free), Ok(false));
        assert_eq!(renew(View::WrongType), Err(CmdError::WrongType));
        assert_eq!(force_release(OTHERS), Ok(true));
        assert_eq!(force_release(View::Free), Ok(false));
        assert_eq!(force_release(View::WrongType), Err(CmdError::WrongType));
    }
}

/// Property tests: random operation sequences on one lock through these decisions and the
/// waiter queue, driven the way the module's skin drives them (serve the queue first when the
/// lock is free, hand off on every full release, force release and expiry), checked against a
/// plain model. `make fuzz` raises the case count through `PROPTEST_CASES`.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use crate::core::queue::{LockId, Queues, Waiter};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        /// Owner `o` acquires; `block`: parks when busy.
        Acquire {
            o: u8,
            block: bool,
        },
        Release {
            o: u8,
        },
        Renew {
            o: u8,
        },
        Force,
        /// The lease runs out.
        Expire,
        /// The `i`-th queued waiter (modulo the queue length) times out or disconnects.
        Leave {
            i: usize,
        },
        /// The key is overwritten with a non-hash (SET): waiters are drained with an error.
        Clobber,
        /// The clobbering value is deleted again.
        Unclobber,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..4, any::<bool>()).prop_map(|(o, block)| Op::Acquire { o, block }),
            3 => (0u8..4).prop_map(|o| Op::Release { o }),
            1 => (0u8..4).prop_map(|o| Op::Renew { o }),
            1 => Just(Op::Force),
            2 => Just(Op::Expire),
            2 => (0usize..8).prop_map(|i| Op::Leave { i }),
            1 => Just(Op::Clobber),
            1 => Just(Op::Unclobber),
        ]
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Key {
        Free,
        Held { owner: u8, count: i64 },
        NotALock,
    }

    struct Sim {
        key: Key,
        queues: Queues<u32>,
        /// The model of the queue: (handle, owner) in arrival order.
        model: VecDeque<(u32, u8)>,
        next_handle: u32,
        /// Handles granted by hand-off, in order.
        granted: Vec<u32>,
        /// Handles in the order they queued (FIFO check).
        arrivals: Vec<u32>,
    }

    const ID: fn() -> LockId = || LockId::new(0, b"lock");

    impl Sim {
        fn view(&self, o: u8) -> View {
            match self.key {
                Key::Free => View::Free,
                Key::NotALock => View::WrongType,
                Key::Held { owner, count } => View::Hash {
                    mine: (owner == o).then_some(Some(count)),
                },
            }
        }

        /// The skin's hand-off: the head waiter gets the lock in the same step it frees.
        fn hand_off(&mut self) {
            if self.key != Key::Free {
                return;
            }
            if let Some(w) = self.queues.pop_front(&ID()) {
                let (h, o) = self.model.pop_front().expect("model has the waiter");
                assert_eq!((w.handle, w.owner[0]), (h, o), "FIFO head");
                self.key = Key::Held { owner: o, count: 1 };
                self.granted.push(h);
            }
            self.queues.forget_if_idle(&ID());
        }

        fn step(&mut self, op: &Op) {
            match *op {
                Op::Acquire { o, block } => loop {
                    match acquire(self.view(o), self.queues.is_queued(&ID())) {
                        Ok(Acquire::Grant) => {
                            assert!(self.model.is_empty(), "no grant over queued waiters");
                            self.key = Key::Held { owner: o, count: 1 };
                        }
                        Ok(Acquire::ServeQueueFirst) => {
                            assert_eq!(self.key, Key::Free);
                            self.hand_off();
                            continue;
                        }
                        Ok(Acquire::Reenter { count }) => {
                            let Key::Held { owner, count: c } = self.key else {
                                panic!("re-entry of a lock that is not held")
                            };
                            assert_eq!((owner, count), (o, c + 1));
                            self.key = Key::Held { owner, count };
                        }
                        Ok(Acquire::Busy) => {
                            assert!(matches!(self.key, Key::Held { owner, .. } if owner != o));
                            if block {
                                let h = self.next_handle;
                                self.next_handle += 1;
                                self.queues.push(
                                    &ID(),
                                    Waiter {
                                        handle: h,
                                        owner: vec![o].into(),
                                        lease_ms: 1,
                                        fence: false,
                                        serial: h as u64,
                                        deadline_timer: None,
                                    },
                                );
                                self.model.push_back((h, o));
                                self.arrivals.push(h);
                            }
                        }
                        Err(e) => assert_eq!((e, self.key), (CmdError::WrongType, Key::NotALock)),
                    }
                    break;
                },
                Op::Release { o } => match release(self.view(o)) {
                    Ok(Release::Partial { remaining }) => {
                        let Key::Held { owner, count } = self.key else {
                            panic!()
                        };
                        assert_eq!((owner, remaining), (o, count - 1));
                        assert!(remaining >= 1);
                        self.key = Key::Held {
                            owner,
                            count: remaining,
                        };
                    }
                    Ok(Release::Full) => {
                        assert!(matches!(self.key, Key::Held { owner, count: 1 } if owner == o));
                        self.key = Key::Free;
                        self.hand_off();
                    }
                    Err(CmdError::NotOwner) => {
                        assert!(!matches!(self.key, Key::Held { owner, .. } if owner == o));
                    }
                    Err(e) => assert_eq!((e, self.key), (CmdError::WrongType, Key::NotALock)),
                },
                Op::Renew { o } => match renew(self.view(o)) {
                    Ok(r) => {
                        assert_eq!(r, matches!(self.key, Key::Held { owner, .. } if owner == o))
                    }
                    Err(e) => assert_eq!((e, self.key), (CmdError::WrongType, Key::NotALock)),
                },
                Op::Force => match force_release(self.view(0)) {
                    Ok(deleted) => {
                        assert_eq!(deleted, matches!(self.key, Key::Held { .. }));
                        if deleted {
                            self.key = Key::Free;
                            self.hand_off();
                        }
                    }
                    Err(e) => assert_eq!((e, self.key), (CmdError::WrongType, Key::NotALock)),
                },
                Op::Expire => {
                    if matches!(self.key, Key::Held { .. }) {
                        self.key = Key::Free;
                        self.hand_off();
                    }
                }
                Op::Leave { i } => {
                    if !self.model.is_empty() {
                        let (h, _) = self.model.remove(i % self.model.len()).unwrap();
                        let (id, w) = self.queues.remove(h).expect("a queued waiter is found");
                        assert_eq!((id, w.handle), (ID(), h));
                        assert!(self.queues.remove(h).is_none(), "removed once");
                        self.queues.forget_if_idle(&ID());
                    }
                }
                Op::Clobber => {
                    self.key = Key::NotALock;
                    let drained = self.queues.drain(&ID());
                    let expect: Vec<u32> = self.model.drain(..).map(|(h, _)| h).collect();
                    assert_eq!(drained.iter().map(|w| w.handle).collect::<Vec<_>>(), expect);
                    self.queues.forget_if_idle(&ID());
                }
                Op::Unclobber => {
                    if self.key == Key::NotALock {
                        self.key = Key::Free;
                    }
                }
            }
        }

        fn check(&self) {
            // Never free (observably) while someone waits.
            if !self.model.is_empty() {
                assert!(
                    matches!(self.key, Key::Held { .. }),
                    "free lock with waiters: {:?}",
                    self.key
                );
            }
            if let Key::Held { count, .. } = self.key {
                assert!(count >= 1);
            }
            assert_eq!(self.queues.total(), self.model.len());
            assert_eq!(self.queues.len(&ID()), self.model.len());
            let owners: Vec<u8> = self.queues.owners(&ID()).iter().map(|o| o[0]).collect();
            let model: Vec<u8> = self.model.iter().map(|&(_, o)| o).collect();
            assert_eq!(owners, model);
            assert_eq!(self.queues.is_queued(&ID()), !self.model.is_empty());
            // Idle queues are forgotten (no per-lock memory left behind).
            assert_eq!(self.queues.get(&ID()).is_some(), !self.model.is_empty());
            // Grants follow arrival order (a waiter that left is skipped, never overtaken).
            let pos = |h: &u32| self.arrivals.iter().position(|a| a == h).unwrap();
            assert!(
                self.granted.windows(2).all(|w| pos(&w[0]) < pos(&w[1])),
                "FIFO grants"
            );
        }
    }

    proptest! {
        #[test]
        fn lock_and_queue_state_machine(ops in prop::collection::vec(op(), 1..120)) {
            let mut sim = Sim {
                key: Key::Free,
                queues: Queues::default(),
                model: VecDeque::new(),
                next_handle: 0,
                granted: Vec::new(),
                arrivals: Vec::new(),
            };
            for op in &ops {
                sim.step(op);
                sim.check();
            }
        }

        /// Decisions never panic for any view, and re-entry never overflows silently.
        #[test]
        fn decisions_are_total(mine in prop::option::of(prop::option::of(any::<i64>())), queued in any::<bool>()) {
            let v = View::Hash { mine };
            match acquire(v, queued) {
                Ok(Acquire::Reenter { count }) => prop_assert!(count >= 1),
                Ok(Acquire::Busy) => prop_assert!(mine.is_none()),
                Ok(other) => prop_assert!(false, "{:?} for a hash", other),
                Err(e) => prop_assert!(matches!(e, CmdError::CorruptCount | CmdError::CountOverflow)),
            }
            match release(v) {
                Ok(Release::Partial { remaining }) => prop_assert!(remaining >= 1),
                Ok(Release::Full) => prop_assert!(matches!(mine, Some(Some(n)) if n <= 1)),
                Err(e) => prop_assert!(matches!(e, CmdError::NotOwner | CmdError::CorruptCount)),
            }
            prop_assert_eq!(renew(v), Ok(mine.is_some()));
            prop_assert_eq!(force_release(v), Ok(true));
        }
    }
}

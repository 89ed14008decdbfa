use super::*;
use crate::core::mem::Mem;
use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    /// Owner `o` acquires; `block`: queues when busy.
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
    /// Time passes (the lease may run out).
    Tick {
        ms: i64,
    },
    /// The `i`-th queued waiter (modulo the queue length) times out or disconnects.
    Leave {
        i: usize,
    },
    /// The key is overwritten with a string (SET): waiters end with WRONGTYPE.
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
        2 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
        2 => (0usize..8).prop_map(|i| Op::Leave { i }),
        1 => Just(Op::Clobber),
        1 => Just(Op::Unclobber),
    ]
}

const LEASE: i64 = 100;

struct Sim {
    mem: Mem,
    queues: Queues<u32, Req>,
    /// The model of the queue: (handle, owner) in arrival order.
    model: VecDeque<(u32, u8)>,
    next: u32,
    /// Handles granted from the queue, in order.
    granted: Vec<u32>,
    arrivals: Vec<u32>,
}

fn id() -> KeyId {
    KeyId::new(0, b"lock")
}

fn owner(o: u8) -> Vec<u8> {
    vec![b'a' + o]
}

impl Sim {
    fn holder(&self) -> Option<(u8, i64)> {
        let h = self.mem.hash(b"lock");
        let (f, v) = h.iter().next()?;
        Some((f[0] - b'a', String::from_utf8_lossy(v).parse().unwrap()))
    }

    fn serve(&mut self) {
        let served = serve(&mut self.queues, &id(), &mut self.mem);
        for o in served.outcomes {
            match o {
                Outcome::Granted { waiter, reply, .. } => {
                    assert_eq!(reply, Reply::Int(1));
                    let (h, ow) = self.model.pop_front().expect("model has the waiter");
                    assert_eq!(waiter.handle, h, "FIFO head");
                    assert_eq!(self.holder(), Some((ow, 1)));
                    self.granted.push(h);
                }
                Outcome::Failed { waiter, error } => {
                    assert_eq!(error, CmdError::WrongType);
                    self.model.retain(|(h, _)| *h != waiter.handle);
                }
            }
        }
        self.queues.forget_if_idle(&id());
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Acquire { o, block } => {
                self.serve();
                let queued = self.queues.is_queued(&id());
                let who = owner(o);
                match acquire(&self.mem, &who, LEASE, false, queued) {
                    Ok(Acquire::Grant(d, took)) => {
                        let before = self.holder();
                        let n = self.mem.apply_ok(&d);
                        match took {
                            Took::Fresh => {
                                assert!(before.is_none() && !queued);
                                assert_eq!(n, Reply::Int(1));
                            }
                            Took::Reentry => {
                                let (b, c) = before.expect("re-entry of a held lock");
                                assert_eq!((b, n), (o, Reply::Int(c + 1)));
                            }
                        }
                    }
                    Ok(Acquire::Busy) => {
                        assert!(queued || self.holder().is_some_and(|(b, _)| b != o));
                        if block {
                            let h = self.next;
                            self.next += 1;
                            let req: Req = std::rc::Rc::new(LockRequest {
                                owner: who.into(),
                                lease_ms: LEASE,
                                fence: false,
                            });
                            self.queues.push(
                                &id(),
                                Waiter {
                                    handle: h,
                                    serial: h as u64,
                                    req,
                                    deadline: None,
                                    queued_us: 0,
                                },
                            );
                            self.model.push_back((h, o));
                            self.arrivals.push(h);
                        }
                    }
                    Err(e) => assert_eq!(e, CmdError::WrongType),
                }
            }
            Op::Release { o } => {
                match release(&self.mem, &owner(o)) {
                    Ok((d, full)) => {
                        let (b, c) = self.holder().expect("held");
                        assert_eq!((b, full), (o, c == 1));
                        self.mem.apply_ok(&d);
                    }
                    Err(CmdError::NotOwner) => {
                        assert!(self.holder().is_none_or(|(b, _)| b != o))
                    }
                    Err(e) => assert_eq!(e, CmdError::WrongType),
                }
                self.serve();
            }
            Op::Renew { o } => match renew(&self.mem, &owner(o), LEASE) {
                Ok(d) => {
                    let r = self.mem.apply_ok(&d);
                    let mine = self.holder().is_some_and(|(b, _)| b == o);
                    assert_eq!(r, Reply::Int(mine as i64));
                }
                Err(e) => assert_eq!(e, CmdError::WrongType),
            },
            Op::Force => {
                if let Ok(d) = force_release(&self.mem) {
                    self.mem.apply_ok(&d);
                }
                self.serve();
            }
            Op::Tick { ms } => {
                self.mem.now += ms;
                self.mem.expire();
                self.serve();
            }
            Op::Leave { i } => {
                if !self.model.is_empty() {
                    let (h, _) = self.model.remove(i % self.model.len()).unwrap();
                    let (kid, w) = self.queues.remove(h).expect("a queued waiter is found");
                    assert_eq!((kid, w.handle), (id(), h));
                    assert!(self.queues.remove(h).is_none(), "removed once");
                    self.serve();
                }
            }
            Op::Clobber => {
                self.mem.set_str(b"lock", b"x");
                self.serve();
                assert!(self.model.is_empty(), "every waiter ended with WRONGTYPE");
            }
            Op::Unclobber => {
                if self.mem.kind(&Target::Main) == KeyType::String {
                    self.mem.del(b"lock");
                }
            }
        }
    }

    fn check(&self) {
        // Never free (observably) while someone waits.
        if !self.model.is_empty() {
            assert!(self.holder().is_some(), "free lock with waiters");
        }
        if let Some((_, c)) = self.holder() {
            assert!(c >= 1);
        }
        // Redisson's layout: at most one field (`holder` reads only the first).
        let fields = self.mem.hash(b"lock").len();
        assert!(fields <= 1, "{fields} fields in the lock's hash");
        assert_eq!(self.queues.total(), self.model.len());
        let queued: Vec<u32> = self.queues.queued(&id());
        let model: Vec<u32> = self.model.iter().map(|&(h, _)| h).collect();
        assert_eq!(queued, model);
        // Idle queues are forgotten (no per-key memory left behind).
        assert_eq!(self.queues.get(&id()).is_some(), !self.model.is_empty());
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
            mem: Mem::new(b"lock"),
            queues: Queues::default(),
            model: VecDeque::new(),
            next: 0,
            granted: Vec::new(),
            arrivals: Vec::new(),
        };
        for op in &ops {
            sim.step(op);
            sim.check();
        }
    }

    /// Decisions never panic for any hold count, and re-entry never overflows silently.
    #[test]
    fn decisions_are_total(count in prop::option::of(any::<i64>()), queued in any::<bool>()) {
        let mut m = Mem::new(b"k");
        m.hset(b"k", b"other", b"1");
        if let Some(c) = count {
            m.hset(b"k", b"me", c.to_string().as_bytes());
        }
        match acquire(&m, b"me", 10, false, queued) {
            Ok(Acquire::Grant(d, Took::Reentry)) => {
                prop_assert!(matches!(d.reply, Some(Reply::Int(n)) if n >= 1))
            }
            Ok(Acquire::Busy) => prop_assert!(count.is_none()),
            Ok(other) => prop_assert!(false, "{:?} for a held lock", other),
            Err(e) => prop_assert_eq!(e, CmdError::CountOverflow),
        }
        match release(&m, b"me") {
            Ok((d, full)) => prop_assert_eq!(full, d.reply == Some(Reply::Int(0))),
            Err(e) => prop_assert_eq!(e, CmdError::NotOwner),
        }
    }
}

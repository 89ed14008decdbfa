use super::*;
use super::{layout::*, rules::*, waiting::*};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::mem::Mem;
use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    Acquire { o: u8, write: bool, block: bool },
    Release { o: u8, write: bool },
    Renew { o: u8 },
    Tick { ms: i64 },
    Leave { i: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, any::<bool>(), any::<bool>())
            .prop_map(|(o, write, block)| Op::Acquire { o, write, block }),
        4 => (0u8..4, any::<bool>()).prop_map(|(o, write)| Op::Release { o, write }),
        1 => (0u8..4).prop_map(|o| Op::Renew { o }),
        2 => (1i64..120).prop_map(|ms| Op::Tick { ms }),
        1 => (0usize..8).prop_map(|i| Op::Leave { i }),
    ]
}

const LEASE: i64 = 100;

fn who(o: u8) -> Vec<u8> {
    vec![b'a' + o]
}

struct Sim {
    mem: Mem,
    q: Queues<u32, Req>,
    model: VecDeque<(u32, u8, Mode)>,
    next: u32,
    granted: Vec<u32>,
}

fn id() -> KeyId {
    KeyId::new(0, b"rw")
}

impl Sim {
    fn serve(&mut self) {
        let served = serve(&mut self.q, &id(), &mut self.mem);
        for o in served.outcomes {
            match o {
                Outcome::Granted { waiter, .. } => {
                    let (h, _, _) = self.model.pop_front().expect("model has it");
                    assert_eq!(h, waiter.handle, "FIFO");
                    self.granted.push(h);
                }
                Outcome::Failed { error, .. } => panic!("unexpected failure: {error}"),
            }
        }
        self.q.forget_if_idle(&id());
    }

    fn acquire(&mut self, o: u8, mode: Mode, block: bool) {
        self.serve();
        let queued = self.q.is_queued(&id());
        let owner = who(o);
        let mut r = acquire(&self.mem, &owner, mode, LEASE, queued, false);
        if r == Ok(Acquire::TidyFirst) {
            let t = tidy(&self.mem).unwrap();
            self.mem.apply_ok(&t);
            r = acquire(&self.mem, &owner, mode, LEASE, queued, true);
        }
        match r {
            Ok(Acquire::Grant(d, _)) => {
                if queued {
                    // Nobody is overtaken but by a re-entry or a downgrade: the owner
                    // already holds the lock (a write hold covers a read).
                    let held = self.holders();
                    let mine = |write: bool| held.iter().any(|(h, w)| *h == owner && *w == write);
                    let ok = match mode {
                        Mode::Read => mine(false) || mine(true),
                        Mode::Write => mine(true),
                    };
                    assert!(
                        ok,
                        "{mode:?} for {owner:?} granted past a queued waiter: {held:?}"
                    );
                }
                self.mem.apply_ok(&d);
            }
            Ok(Acquire::Busy) if block => {
                let h = self.next;
                self.next += 1;
                let req: Req = std::rc::Rc::new(RwLockRequest {
                    owner: owner.into(),
                    mode,
                    lease_ms: LEASE,
                });
                self.q.push(
                    &id(),
                    Waiter {
                        handle: h,
                        serial: h as u64,
                        req,
                        deadline: None,
                        queued_us: 0,
                    },
                );
                self.model.push_back((h, o, mode));
            }
            Ok(_) | Err(CmdError::Deadlock(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Acquire { o, write, block } => {
                let mode = if write { Mode::Write } else { Mode::Read };
                self.acquire(o, mode, block);
            }
            Op::Release { o, write } => {
                let mode = if write { Mode::Write } else { Mode::Read };
                let owner = who(o);
                let field = if write {
                    writer_field(&owner)
                } else {
                    owner.clone()
                };
                let had_field = self.mem.hash(b"rw").contains_key(&field);
                let held = self
                    .holders()
                    .iter()
                    .any(|(h, w)| *h == owner && *w == write);
                match release(&self.mem, &owner, mode) {
                    Ok((d, r)) => {
                        assert!(
                            had_field,
                            "{owner:?} released a {mode:?} hold it had no field for"
                        );
                        let reply = self.mem.apply_ok(&d);
                        let Reply::Int(left) = reply else {
                            panic!("release reply {reply:?}")
                        };
                        assert!(left >= 0);
                        assert_eq!(r.last, left == 0, "last hold <=> nothing left");
                        if r.freed {
                            assert!(!self.mem.exists(b"rw"), "freed, yet the lock is there");
                        }
                    }
                    Err(CmdError::NotOwner) => {
                        assert!(!held, "{owner:?} holds a {mode:?} hold, yet NOTOWNER");
                    }
                    Err(e) => panic!("release: {e}"),
                }
                self.serve();
            }
            Op::Renew { o } => {
                let d = renew(&self.mem, &who(o), LEASE).unwrap();
                self.mem.apply_ok(&d);
            }
            Op::Tick { ms } => {
                self.mem.now += ms;
                self.mem.expire();
                self.serve();
            }
            Op::Leave { i } => {
                if !self.model.is_empty() {
                    let (h, _, _) = self.model.remove(i % self.model.len()).unwrap();
                    self.q.remove(h).expect("queued");
                    self.serve();
                }
            }
        }
    }

    /// Owners holding anything, with whether it is a write hold (expired read holds are
    /// not holds, even before their field is tidied away).
    fn holders(&self) -> Vec<(Vec<u8>, bool)> {
        let h = holders(&self.mem);
        let mut out: Vec<(Vec<u8>, bool)> = h
            .readers
            .iter()
            .filter(|(o, c)| !hold_expiries(&self.mem, o, *c).is_empty())
            .map(|(o, _)| (o.clone(), false))
            .collect();
        if let Some((w, _)) = h.writer {
            out.push((w, true));
        }
        out
    }

    fn check(&self) {
        let hs = self.holders();
        if let Some((w, _)) = hs.iter().find(|(_, write)| *write) {
            assert!(
                hs.iter().all(|(o, _)| o == w),
                "a writer with another owner's hold: {hs:?}"
            );
        }
        let queued: Vec<u32> = self.q.queued(&id());
        assert_eq!(queued, self.model.iter().map(|m| m.0).collect::<Vec<_>>());
        assert!(
            self.granted.windows(2).all(|w| w[0] < w[1]),
            "grants in arrival order"
        );
    }
}

proptest! {
    #[test]
    fn rwlock_and_queue_state_machine(ops in prop::collection::vec(op(), 1..100)) {
        let mut sim = Sim {
            mem: Mem::new(b"rw"),
            q: Queues::default(),
            model: VecDeque::new(),
            next: 0,
            granted: Vec::new(),
        };
        for op in &ops {
            sim.step(op);
            sim.check();
        }
        // Liveness: let every lease run out, repeatedly; every waiter is granted.
        for _ in 0..(sim.model.len() + 2) {
            sim.mem.now += LEASE + 1;
            sim.mem.expire();
            sim.serve();
            sim.check();
        }
        prop_assert!(sim.model.is_empty(), "waiters left: {:?}", sim.model);
    }
}

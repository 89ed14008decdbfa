//! A model-based property test of a session's grants: random histories of queue, grant, read,
//! acknowledge, release, re-acquire and end, over a semaphore and a lock shared with holders
//! outside the session. Whatever the history: permits are conserved (none created, none lost),
//! a lock never has two holders, and ending the session undoes exactly the grants no read
//! returned (a hold its owner received, even if released and taken again, stays).

use super::session_rules::{New, OutcomeKind, Outcomes};
use super::{serve, KeyId, Outcome, Queues, Req, Waiter};
use crate::core::decision::Reply;
use crate::core::lock::{self, Acquire, LockRequest};
use crate::core::mem::Mem;
use crate::core::semaphore::{self, SemaphoreRequest};
use crate::core::store::{Int, Store, Target};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::rc::Rc;

const PERMITS: i64 = 3;
const OWNERS: [&[u8]; 2] = [b"w1", b"w2"];

#[derive(Debug, Clone)]
enum Op {
    /// The session asks for a permit (granted at once, or queued).
    SemAsk,
    /// The session's owner `o` asks for the lock.
    LockAsk(usize),
    /// The client gives back a permit it received.
    SemGiveBack,
    /// Owner `o` releases the lock it received; `again`: and takes it again at once.
    LockRelease(usize, bool),
    /// Someone outside the session takes or gives back a permit, or the lock.
    OtherSem(bool),
    OtherLock(bool),
    /// The listener reads up to `n` outcomes after its cursor (delivering them).
    Read(usize),
    /// The listener acknowledges what it read.
    Ack,
    /// The session ends (closed or expired).
    End,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::SemAsk),
        3 => (0usize..2).prop_map(Op::LockAsk),
        2 => Just(Op::SemGiveBack),
        2 => (0usize..2, any::<bool>()).prop_map(|(o, a)| Op::LockRelease(o, a)),
        2 => any::<bool>().prop_map(Op::OtherSem),
        2 => any::<bool>().prop_map(Op::OtherLock),
        3 => (1usize..4).prop_map(Op::Read),
        1 => Just(Op::Ack),
        1 => Just(Op::End),
    ]
}

type Grant = (KeyId, Req, Reply);

/// What a request was for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ask {
    Permit,
    Lock(usize),
}

struct Sim {
    sem: Mem,
    lock: Mem,
    queues: Queues<u64, Req>,
    outcomes: Outcomes<Grant>,
    open: bool,
    next_request: u64,
    asks: BTreeMap<u64, Ask>,
    /// Outcomes appended but not yet returned by a read: seq -> what it grants.
    in_transit: BTreeMap<u64, Ask>,
    /// The last sequence number a read returned.
    cursor: u64,
    /// What the session's client holds, as it learnt it.
    permits_held: i64,
    lock_held_by: Option<usize>,
    /// Held outside the session.
    other_permits: i64,
    other_lock: bool,
}

fn sem_id() -> KeyId {
    KeyId::new(0, b"s")
}

fn lock_id() -> KeyId {
    KeyId::new(0, b"L")
}

impl Sim {
    fn new() -> Sim {
        let mut sem = Mem::new(b"s");
        sem.apply_ok(&semaphore::try_set(&sem, PERMITS).unwrap());
        Sim {
            sem,
            lock: Mem::new(b"L"),
            queues: Queues::default(),
            outcomes: Outcomes::default(),
            open: true,
            next_request: 1,
            asks: BTreeMap::new(),
            in_transit: BTreeMap::new(),
            cursor: 0,
            permits_held: 0,
            lock_held_by: None,
            other_permits: 0,
            other_lock: false,
        }
    }

    fn available(&self) -> i64 {
        match self.sem.get_int(&Target::Main) {
            Int::Is(n) => n,
            _ => 0,
        }
    }

    fn lock_fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.lock.hash(b"L").into_iter().collect()
    }

    /// Grant what can be granted of `id`'s queue; each grant becomes an outcome in transit.
    fn serve(&mut self, id: &KeyId) {
        let mem = if *id == sem_id() {
            &mut self.sem
        } else {
            &mut self.lock
        };
        let served = serve(&mut self.queues, id, mem);
        for o in served.outcomes {
            let Outcome::Granted { waiter, reply, .. } = o else {
                panic!("nothing fails here")
            };
            let seq = self.outcomes.push(New {
                kind: OutcomeKind::Granted,
                request: Some(waiter.handle),
                key: Some(id.key.clone()),
                object: Some(waiter.req.kind().name()),
                value: reply.clone(),
                grant: Some((id.clone(), waiter.req.clone(), reply)),
            });
            self.in_transit.insert(seq, self.asks[&waiter.handle]);
        }
        self.queues.forget_if_idle(id);
    }

    fn queue(&mut self, id: &KeyId, req: Req, ask: Ask) {
        let request = self.next_request;
        self.next_request += 1;
        self.asks.insert(request, ask);
        let waiter = Waiter {
            handle: request,
            serial: request,
            req,
            deadline: None,
            queued_us: 0,
        };
        self.queues.push(id, waiter);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::SemAsk if self.open => {
                let queued = self.queues.is_queued(&sem_id());
                match semaphore::acquire(&self.sem, 1, None, queued).unwrap() {
                    Some(d) => {
                        self.sem.apply_ok(&d);
                        self.permits_held += 1;
                    }
                    None => {
                        let req: Req = Rc::new(SemaphoreRequest {
                            permits: 1,
                            lease_ms: None,
                        });
                        self.queue(&sem_id(), req, Ask::Permit);
                    }
                }
            }
            Op::LockAsk(o) if self.open && self.lock_held_by != Some(o) => {
                // An owner asks once at a time (a client never queues a second wait of one
                // owner on the same lock).
                let waiting = self.asks.iter().any(|(r, a)| {
                    *a == Ask::Lock(o)
                        && (self.queues.find(*r).is_some()
                            || self.in_transit.values().any(|t| *t == Ask::Lock(o)))
                });
                if waiting {
                    return;
                }
                let queued = self.queues.is_queued(&lock_id());
                match lock::acquire(&self.lock, OWNERS[o], 60_000, false, queued).unwrap() {
                    Acquire::Grant(d, _) => {
                        self.lock.apply_ok(&d);
                        self.lock_held_by = Some(o);
                    }
                    Acquire::Busy => {
                        let req: Req = Rc::new(LockRequest {
                            owner: OWNERS[o].into(),
                            lease_ms: 60_000,
                            fence: false,
                        });
                        self.queue(&lock_id(), req, Ask::Lock(o));
                    }
                }
            }
            Op::SemGiveBack if self.permits_held > 0 => {
                self.permits_held -= 1;
                self.sem
                    .apply_ok(&semaphore::release_permits(&self.sem, 1).unwrap());
                self.serve(&sem_id());
            }
            Op::LockRelease(o, again) if self.lock_held_by == Some(o) => {
                let (d, last) = lock::release(&self.lock, OWNERS[o]).unwrap();
                assert!(last, "held once");
                self.lock.apply_ok(&d);
                self.lock_held_by = None;
                if again {
                    // Taken anew at once, barging nobody: only when nobody waits.
                    if let Acquire::Grant(d, _) =
                        lock::acquire(&self.lock, OWNERS[o], 60_000, false, false).unwrap()
                    {
                        if !self.queues.is_queued(&lock_id()) {
                            self.lock.apply_ok(&d);
                            self.lock_held_by = Some(o);
                        }
                    }
                }
                self.serve(&lock_id());
            }
            Op::OtherSem(take) => {
                if take {
                    let queued = self.queues.is_queued(&sem_id());
                    if let Some(d) = semaphore::acquire(&self.sem, 1, None, queued).unwrap() {
                        self.sem.apply_ok(&d);
                        self.other_permits += 1;
                    }
                } else if self.other_permits > 0 {
                    self.other_permits -= 1;
                    self.sem
                        .apply_ok(&semaphore::release_permits(&self.sem, 1).unwrap());
                    self.serve(&sem_id());
                }
            }
            Op::OtherLock(take) => {
                if take && !self.other_lock {
                    let queued = self.queues.is_queued(&lock_id());
                    if let Acquire::Grant(d, _) =
                        lock::acquire(&self.lock, b"x", 60_000, false, queued).unwrap()
                    {
                        self.lock.apply_ok(&d);
                        self.other_lock = true;
                    }
                } else if !take && self.other_lock {
                    let (d, _) = lock::release(&self.lock, b"x").unwrap();
                    self.lock.apply_ok(&d);
                    self.other_lock = false;
                    self.serve(&lock_id());
                }
            }
            Op::Read(n) if self.open => {
                let Reply::Array(shown) = self.outcomes.read(self.cursor, n, drop) else {
                    panic!("read gives an array")
                };
                for e in shown {
                    let Reply::Array(f) = e else { panic!() };
                    let Reply::Int(seq) = f[0] else { panic!() };
                    let seq = seq as u64;
                    // Delivered: the client holds it now.
                    match self.in_transit.remove(&seq).expect("a grant in transit") {
                        Ask::Permit => self.permits_held += 1,
                        Ask::Lock(o) => {
                            assert_eq!(self.lock_held_by, None, "two holders of one owner");
                            self.lock_held_by = Some(o);
                        }
                    }
                    self.cursor = seq;
                }
            }
            Op::Ack if self.open => {
                self.outcomes.ack(self.cursor, drop);
            }
            Op::End if self.open => {
                self.open = false;
                // Queued requests leave their queues; what no read returned is undone.
                let queued: Vec<u64> = self
                    .asks
                    .keys()
                    .copied()
                    .filter(|r| self.queues.find(*r).is_some())
                    .collect();
                for r in queued {
                    self.queues.remove(r);
                }
                let undo: Vec<Grant> = self
                    .outcomes
                    .drain()
                    .filter_map(|e| e.outcome.grant)
                    .collect();
                for (id, req, reply) in undo {
                    let mem = if id == sem_id() {
                        &mut self.sem
                    } else {
                        &mut self.lock
                    };
                    if let Some(d) = req.undo(&reply, mem) {
                        mem.apply_ok(&d);
                    }
                }
                self.in_transit.clear();
                self.serve(&sem_id());
                self.serve(&lock_id());
            }
            _ => {}
        }
    }

    fn check(&self) {
        let in_transit_permits = self
            .in_transit
            .values()
            .filter(|a| **a == Ask::Permit)
            .count() as i64;
        assert_eq!(
            self.available() + self.permits_held + self.other_permits + in_transit_permits,
            PERMITS,
            "permits conserved"
        );
        assert!(self.available() >= 0);
        let fields = self.lock_fields();
        assert!(fields.len() <= 1, "two holders: {fields:?}");
        let transit_lock: Vec<usize> = self
            .in_transit
            .values()
            .filter_map(|a| match a {
                Ask::Lock(o) => Some(*o),
                Ask::Permit => None,
            })
            .collect();
        let mut want: Vec<Vec<u8>> = Vec::new();
        if self.other_lock {
            want.push(b"x".to_vec());
        }
        if let Some(o) = self.lock_held_by {
            want.push(OWNERS[o].to_vec());
        }
        want.extend(transit_lock.iter().map(|o| OWNERS[*o].to_vec()));
        let got: Vec<Vec<u8>> = fields.into_iter().map(|(f, _)| f).collect();
        assert_eq!(got, want, "the lock's holder is the one the model knows");
    }
}

proptest! {
    #[test]
    fn ending_a_session_undoes_exactly_what_no_read_returned(
        ops in prop::collection::vec(op(), 1..120)
    ) {
        let mut sim = Sim::new();
        for op in &ops {
            sim.step(op);
            sim.check();
        }
        sim.step(&Op::End);
        sim.check();
        prop_assert!(sim.in_transit.is_empty());
    }
}

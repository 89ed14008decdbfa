//! Serving a group's queue through its index by value (`core::wait::by_value`) grants exactly
//! what the whole-queue walk it replaced grants (`core::wait::grant::walk_past_head`, the rule
//! of [`super::walk`]): the same waiters, in the same order, leaving the same keys, under
//! random sequences of newcomers (queued or granted at once), releases, force releases, leases
//! that end (one value's, or the whole hash's TTL), waiters leaving, and writes outside rlock.
//! Owners repeat, so re-entries (a waiter whose owner holds some of its values) are covered.

use super::*;
use crate::core::mem::Mem;
use crate::core::wait::grant::{serve_by, walk_past_head};
use crate::core::wait::{serve, KeyId, Outcome, Queues, Waiter};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// An `RMLOCK.ACQUIRE ... BLOCK` of these values.
    Acquire {
        owner: u8,
        lease: i64,
        values: Vec<u8>,
    },
    /// `RMLOCK.RELEASE` by the holder of the first value (if any), of these values.
    Release {
        values: Vec<u8>,
    },
    ForceRelease {
        values: Vec<u8>,
    },
    /// Time passes (leases end); the queue's timer serves it.
    Tick {
        ms: i64,
    },
    /// The `i`-th waiter leaves (timeout, cancel, its session ended).
    Leave {
        i: usize,
    },
    /// A write outside rlock: a value's field deleted (Redisson's own unlock script).
    Hdel {
        value: u8,
    },
}

fn values() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::btree_set(0u8..6, 1..4).prop_map(|s| s.into_iter().collect())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, 20i64..400, values())
            .prop_map(|(owner, lease, values)| Op::Acquire { owner, lease, values }),
        3 => values().prop_map(|values| Op::Release { values }),
        1 => values().prop_map(|values| Op::ForceRelease { values }),
        2 => (1i64..300).prop_map(|ms| Op::Tick { ms }),
        1 => (0usize..10).prop_map(|i| Op::Leave { i }),
        1 => (0u8..6).prop_map(|value| Op::Hdel { value }),
    ]
}

fn id() -> KeyId {
    KeyId::new(0, b"g")
}

fn field(v: u8) -> Vec<u8> {
    vec![b'v', b'0' + v]
}

/// One run: the store, the queue, and what happened, in order.
struct Sim {
    m: Mem,
    q: Queues<u32, Req>,
    indexed: bool,
    next: u32,
    log: Vec<String>,
}

impl Sim {
    fn serve(&mut self) {
        let served = if self.indexed {
            serve(&mut self.q, &id(), &mut self.m)
        } else {
            serve_by(&mut self.q, &id(), &mut self.m, walk_past_head)
        };
        for o in served.outcomes {
            self.log.push(match o {
                Outcome::Granted { waiter, reply, .. } => {
                    format!("granted {} {reply:?}", waiter.handle)
                }
                Outcome::Failed { waiter, error } => format!("failed {} {error}", waiter.handle),
            });
        }
        self.q.forget_if_idle(&id());
    }

    fn step(&mut self, op: &Op) {
        match op {
            Op::Acquire {
                owner,
                lease,
                values,
            } => {
                let owner = format!("o{owner}").into_bytes();
                let fields: Vec<Vec<u8>> = values.iter().map(|v| field(*v)).collect();
                let fields: Vec<&[u8]> = fields.iter().map(|f| &f[..]).collect();
                // As `commands::group::acquire`: the claim is read first, then the queue
                // served, then the newcomer decided.
                let claimed = self.q.wants_any(&id(), &fields);
                let now = self.m.now;
                self.serve();
                match acquire(&self.m, &owner, *lease, &fields, claimed) {
                    Ok(Acquire::Grant(d, _)) => {
                        self.m.apply_ok(&d);
                        self.log.push(format!("newcomer {} granted", self.next));
                    }
                    Ok(Acquire::Busy) => {
                        let req: Req = std::rc::Rc::new(GroupRequest {
                            owner: owner.into(),
                            lease_ms: *lease,
                            fields: fields.iter().map(|f| (*f).into()).collect(),
                        });
                        let waiter = Waiter {
                            handle: self.next,
                            serial: self.next as u64,
                            req,
                            deadline: None,
                            queued_us: 0,
                        };
                        self.q.push(&id(), waiter);
                        self.log.push(format!("newcomer {} queued", self.next));
                    }
                    Err(e) => self.log.push(format!("newcomer {} error {e}", self.next)),
                }
                self.q.taken(&id(), now + lease);
                self.next += 1;
            }
            Op::Release { values } => {
                let fields: Vec<Vec<u8>> = values.iter().map(|v| field(*v)).collect();
                let fields: Vec<&[u8]> = fields.iter().map(|f| &f[..]).collect();
                let Value::Theirs { holder, .. } = value(&self.m, fields[0], None) else {
                    return;
                };
                let r = release(&self.m, &holder, 100, &fields).unwrap();
                if r.freed > 0 {
                    self.q.freed(&id(), fields.iter().copied());
                }
                let reply = self.m.apply_ok(&r.decision);
                self.log.push(format!("release {reply:?}"));
                self.serve();
            }
            Op::ForceRelease { values } => {
                let fields: Vec<Vec<u8>> = values.iter().map(|v| field(*v)).collect();
                let fields: Vec<&[u8]> = fields.iter().map(|f| &f[..]).collect();
                let d = force_release(&self.m, &fields).unwrap();
                if !d.writes.is_empty() {
                    self.q.freed(&id(), fields.iter().copied());
                }
                let reply = self.m.apply_ok(&d);
                self.log.push(format!("force {reply:?}"));
                self.serve();
            }
            Op::Tick { ms } => {
                self.m.now += ms;
                self.serve();
            }
            Op::Leave { i } => {
                let Some(h) = self.q.queued(&id()).get(*i).copied() else {
                    return;
                };
                self.q.remove(h);
                self.log.push(format!("left {h}"));
                self.serve();
            }
            Op::Hdel { value } => {
                let mut hash = self.m.hash(b"g");
                if hash.remove(&field(*value)).is_none() {
                    return;
                }
                let ttl = self.m.ttl(b"g");
                self.m.del(b"g");
                for (f, v) in hash {
                    self.m.hset(b"g", &f, &v);
                }
                if let Some(at) = ttl {
                    self.m.set_expire(b"g", at);
                }
                // The keyspace event (`wait::touched`).
                self.q.changed(&id());
                self.serve();
            }
        }
    }
}

fn sim(indexed: bool) -> Sim {
    Sim {
        m: Mem::new(b"g"),
        q: Queues::default(),
        indexed,
        next: 0,
        log: Vec::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn indexed_serving_grants_as_the_whole_queue_walk(ops in prop::collection::vec(op(), 1..40)) {
        let (mut walked, mut indexed) = (sim(false), sim(true));
        for (i, op) in ops.iter().enumerate() {
            walked.step(op);
            indexed.step(op);
            prop_assert_eq!(&walked.log, &indexed.log, "after op {}: {:?}", i, op);
            prop_assert_eq!(walked.m.snapshot(), indexed.m.snapshot());
            prop_assert_eq!(walked.q.queued(&id()), indexed.q.queued(&id()));
        }
    }
}

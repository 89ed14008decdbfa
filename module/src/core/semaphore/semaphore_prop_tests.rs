use super::*;
use crate::core::mem::Mem;
use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        permits: i64,
        lease: Option<i64>,
        block: bool,
    },
    ReleasePlain {
        i: usize,
    },
    ReleaseIds {
        i: usize,
        k: usize,
    },
    Add {
        delta: i64,
    },
    Drain,
    Tick {
        ms: i64,
    },
    Leave {
        i: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Leases of up to 300 ms, or none (NOLEASE: ids that never end).
        6 => (1i64..5, prop::option::of(prop_oneof![4 => 1i64..300, 1 => Just(NO_LEASE)]), any::<bool>())
            .prop_map(|(permits, lease, block)| Op::Acquire { permits, lease, block }),
        3 => (0usize..8).prop_map(|i| Op::ReleasePlain { i }),
        3 => (0usize..16, 1usize..4).prop_map(|(i, k)| Op::ReleaseIds { i, k }),
        2 => (-3i64..6).prop_map(|delta| Op::Add { delta }),
        1 => Just(Op::Drain),
        3 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
        1 => (0usize..8).prop_map(|i| Op::Leave { i }),
    ]
}

const CHANNEL: &[u8] = b"redisson_sc:{s}";

struct Sim {
    mem: Mem,
    q: Queues<u32, Req>,
    /// Queued requests: (handle, permits, leased).
    model: VecDeque<(u32, i64, bool)>,
    next: u32,
    granted: Vec<u32>,
    /// Plain permits held, per grant.
    plain: Vec<i64>,
    /// Ids handed out (some may have expired since).
    leased: Vec<PermitId>,
    /// Every permit ever added, minus drained ones.
    total: i64,
}

fn id() -> KeyId {
    KeyId::new(0, b"s")
}

impl Sim {
    fn count(&self) -> i64 {
        count(&self.mem).unwrap()
    }

    fn held(&mut self, reply: &Reply, permits: i64) {
        match reply {
            Reply::Int(1) => self.plain.push(permits),
            Reply::Array(ids) => {
                assert_eq!(ids.len() as i64, permits);
                for r in ids {
                    let Reply::Bulk(h) = r else { panic!() };
                    self.leased.push(parse_id(h).unwrap());
                }
            }
            other => panic!("grant reply {other:?}"),
        }
    }

    fn serve(&mut self) {
        let served = serve(&mut self.q, &id(), &mut self.mem);
        for o in served.outcomes {
            match o {
                Outcome::Granted { waiter, reply, .. } => {
                    let (h, permits, _) = self.model.pop_front().expect("model has it");
                    assert_eq!(h, waiter.handle, "FIFO");
                    assert!(self.count() >= 0, "a grant took the count below 0");
                    self.granted.push(h);
                    self.held(&reply, permits);
                }
                Outcome::Failed { error, .. } => panic!("unexpected failure: {error}"),
            }
        }
        self.q.forget_if_idle(&id());
    }

    /// What every command does first: reclaim, serve the queue, announce.
    fn prepare(&mut self) -> bool {
        let r = reclaim(&self.mem).unwrap();
        let reclaimed = !r.writes.is_empty();
        self.mem.apply_ok(&r);
        self.serve();
        if reclaimed {
            let a = announce(&self.mem, true).unwrap();
            self.mem.apply_ok(&a);
        }
        self.q.is_queued(&id())
    }

    /// After adding permits: serve, then publish the count a read shows next.
    fn settle(&mut self) {
        self.serve();
        let before = self.mem.published.len();
        let a = announce(&self.mem, false).unwrap();
        let reply = self.mem.apply_ok(&a);
        assert_eq!(reply, Reply::Int(self.count()));
        assert_eq!(
            self.mem.published[before..],
            [(CHANNEL.to_vec(), self.count())]
        );
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Acquire {
                permits,
                lease,
                block,
            } => {
                let queued = self.prepare();
                let before = self.count();
                match acquire(&self.mem, permits, lease, queued).unwrap() {
                    Some(d) => {
                        assert!(!queued, "overtook a queued waiter");
                        let reply = self.mem.apply_ok(&d);
                        assert_eq!(self.count(), before - permits);
                        assert!(self.count() >= 0);
                        self.held(&reply, permits);
                    }
                    None => {
                        assert!(queued || before < permits);
                        if block {
                            let h = self.next;
                            self.next += 1;
                            let req: Req = std::rc::Rc::new(SemaphoreRequest {
                                permits,
                                lease_ms: lease,
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
                            self.model.push_back((h, permits, lease.is_some()));
                        }
                    }
                }
            }
            Op::ReleasePlain { i } => {
                if self.plain.is_empty() {
                    return;
                }
                let n = self.plain.remove(i % self.plain.len());
                self.prepare();
                let d = release_permits(&self.mem, n).unwrap();
                self.mem.apply_ok(&d);
                self.settle();
            }
            Op::ReleaseIds { i, k } => {
                if self.leased.is_empty() {
                    return;
                }
                let start = i % self.leased.len();
                let end = (start + k).min(self.leased.len());
                let ids: Vec<PermitId> = self.leased[start..end].to_vec();
                self.prepare();
                let z = self.mem.zset(b"{s}:timeout");
                let all_live = ids.iter().all(|id| {
                    z.get(id.as_slice())
                        .is_some_and(|at| *at > self.mem.now as f64)
                });
                match release_ids(&self.mem, &ids) {
                    Ok(d) => {
                        assert!(all_live);
                        self.mem.apply_ok(&d);
                        self.leased.drain(start..end);
                        self.settle();
                    }
                    Err(CmdError::NoPermit(_)) => {
                        assert!(!all_live, "a live permit was refused");
                        // Its holder learns it expired; it holds nothing any more.
                        let gone: Vec<PermitId> = ids
                            .iter()
                            .filter(|id| !z.contains_key(id.as_slice()))
                            .copied()
                            .collect();
                        self.leased.retain(|id| !gone.contains(id));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            Op::Add { delta } => {
                self.prepare();
                let d = add_permits(&self.mem, delta).unwrap();
                self.mem.apply_ok(&d);
                self.total += delta;
                self.settle();
            }
            Op::Drain => {
                self.prepare();
                let d = drain(&self.mem).unwrap();
                let Reply::Int(n) = self.mem.apply_ok(&d) else {
                    panic!()
                };
                self.total -= n;
            }
            Op::Tick { ms } => {
                // The timer: with waiters queued, expired leases are reclaimed for them.
                self.mem.now += ms;
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

    fn check(&self) {
        let in_set = self.mem.zset(b"{s}:timeout").len() as i64;
        let plain: i64 = self.plain.iter().sum();
        assert_eq!(
            self.count() + plain + in_set,
            self.total,
            "permits are conserved"
        );
        let queued: Vec<u32> = self.q.queued(&id());
        assert_eq!(queued, self.model.iter().map(|m| m.0).collect::<Vec<_>>());
        assert!(
            self.granted.windows(2).all(|w| w[0] < w[1]),
            "grants in arrival order"
        );
        // Nobody waits behind permits that would serve the head (reclaim included).
        if let Some(&(_, permits, _)) = self.model.front() {
            assert!(available(&self.mem).unwrap() < permits);
        }
    }
}

proptest! {
    #[test]
    fn semaphore_and_queue_state_machine(
        initial in 0i64..6,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut sim = Sim {
            mem: Mem::new(b"s"),
            q: Queues::default(),
            model: VecDeque::new(),
            next: 0,
            granted: Vec::new(),
            plain: Vec::new(),
            leased: Vec::new(),
            total: initial,
        };
        let d = try_set(&sim.mem, initial).unwrap();
        sim.mem.apply_ok(&d);
        for op in &ops {
            sim.step(op);
            sim.check();
        }
        // Liveness: every lease ends and enough permits come back for every waiter.
        sim.mem.now += 1_000;
        sim.serve();
        sim.prepare();
        let wanted: i64 = sim.model.iter().map(|m| m.1).sum::<i64>() - sim.count().min(0);
        let d = add_permits(&sim.mem, wanted).unwrap();
        sim.mem.apply_ok(&d);
        sim.total += wanted;
        sim.settle();
        sim.check();
        prop_assert!(sim.model.is_empty(), "waiters left: {:?}", sim.model);
    }
}

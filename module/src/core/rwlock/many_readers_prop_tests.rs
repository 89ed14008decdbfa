use super::*;
use super::{rules::*, waiting::*};
use crate::core::mem::Mem;
use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
use proptest::prelude::*;

const READERS: usize = 80;

#[derive(Debug, Clone)]
enum Op {
    /// Reader `i` lets go of its hold (if it still holds it).
    Release(usize),
    /// Time passes: some leases run out (their readers crashed).
    Tick(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..READERS).prop_map(Op::Release),
        1 => (1i64..200).prop_map(Op::Tick),
    ]
}

fn id() -> KeyId {
    KeyId::new(0, b"rw")
}

fn live_holds(m: &Mem) -> usize {
    (0..READERS)
        .filter(|i| m.exists(format!("{{rw}}:r{i}:rwlock_timeout:1").as_bytes()))
        .count()
}

fn writer_holds(m: &Mem) -> bool {
    m.hash(b"rw").contains_key(&b"w:write"[..])
}

proptest! {
    #[test]
    fn a_writer_waits_for_every_live_reader_and_no_longer(
        leases in prop::collection::vec(50i64..2_000, READERS),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let mut m = Mem::new(b"rw");
        for (i, lease) in leases.iter().enumerate() {
            let owner = format!("r{i}");
            match acquire(&m, owner.as_bytes(), Mode::Read, *lease, false, false).unwrap() {
                Acquire::Grant(d, _) => { m.apply_ok(&d); }
                other => panic!("reader {i}: {other:?}"),
            }
        }
        let mut q: Queues<u32, Req> = Queues::default();
        let req: Req = std::rc::Rc::new(RwLockRequest { owner: b"w".to_vec().into(), mode: Mode::Write, lease_ms: 60_000 });
        q.push(&id(), Waiter { handle: 1, serial: 1, req, deadline: None, queued_us: 0 });
        let mut released = [false; READERS];
        let mut granted = false;
        let serve_now = |m: &mut Mem, q: &mut Queues<u32, Req>, granted: &mut bool| {
            for o in serve(q, &id(), m).outcomes {
                match o {
                    Outcome::Granted { .. } => *granted = true,
                    Outcome::Failed { error, .. } => panic!("{error}"),
                }
            }
        };
        for op in ops {
            match op {
                Op::Release(i) if !released[i] && !granted => {
                    released[i] = true;
                    let owner = format!("r{i}");
                    // A reader whose lease ran out no longer holds: NOTOWNER, or the field
                    // is still there and its release goes through. Either is fine.
                    if let Ok((d, _)) = release(&m, owner.as_bytes(), Mode::Read) {
                        m.apply_ok(&d);
                    }
                }
                Op::Tick(ms) => {
                    m.now += ms;
                    m.expire();
                }
                _ => {}
            }
            serve_now(&mut m, &mut q, &mut granted);
            prop_assert!(!(granted && live_holds(&m) > 0), "a writer with {} live readers", live_holds(&m));
            prop_assert_eq!(granted, writer_holds(&m));
        }
        // Every lease runs out: the writer gets the lock.
        m.now += 3_000;
        m.expire();
        serve_now(&mut m, &mut q, &mut granted);
        prop_assert!(granted, "the writer is granted once every reader is gone");
        prop_assert_eq!(live_holds(&m), 0);
    }
}

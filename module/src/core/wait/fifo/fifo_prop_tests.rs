use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Push {
        key: usize,
    },
    Pop {
        key: usize,
    },
    /// Remove the waiter with this handle (it may be queued, granted or never existed).
    Remove {
        handle: u32,
    },
    Drain {
        key: usize,
    },
    Forget {
        key: usize,
    },
    /// Look a waiter up by handle (it may be queued, granted or never existed).
    Find {
        handle: u32,
    },
}

const KEYS: [(i32, &[u8]); 4] = [(0, b"a"), (0, b"b"), (1, b"a"), (0, b"")];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..KEYS.len()).prop_map(|key| Op::Push { key }),
        2 => (0..KEYS.len()).prop_map(|key| Op::Pop { key }),
        3 => (0u32..40).prop_map(|handle| Op::Remove { handle }),
        1 => (0..KEYS.len()).prop_map(|key| Op::Drain { key }),
        1 => (0..KEYS.len()).prop_map(|key| Op::Forget { key }),
        2 => (0u32..100).prop_map(|handle| Op::Find { handle }),
    ]
}

proptest! {
    #[test]
    fn queues_match_a_model(ops in prop::collection::vec(op(), 1..200)) {
        let ids: Vec<KeyId> = KEYS.iter().map(|(db, k)| KeyId::new(*db, k)).collect();
        let mut q: Queues<u32, u32> = Queues::default();
        let mut model: Vec<VecDeque<u32>> = vec![VecDeque::new(); KEYS.len()];
        let mut next = 0u32;
        for op in ops {
            match op {
                Op::Push { key } => {
                    q.push(&ids[key], Waiter { handle: next, serial: next as u64, req: next, deadline: None, queued_us: 0 });
                    model[key].push_back(next);
                    next += 1;
                }
                Op::Pop { key } => {
                    prop_assert_eq!(q.pop_front(&ids[key]).map(|w| w.handle), model[key].pop_front());
                }
                Op::Remove { handle } => {
                    let want = model.iter().position(|m| m.contains(&handle));
                    let got = q.remove(handle);
                    match want {
                        Some(key) => {
                            let (id, w) = got.expect("queued waiter found");
                            prop_assert_eq!(&id, &ids[key]);
                            prop_assert_eq!(w.handle, handle);
                            model[key].retain(|h| *h != handle);
                        }
                        None => prop_assert!(got.is_none()),
                    }
                }
                Op::Drain { key } => {
                    let got: Vec<u32> = q.drain(&ids[key]).iter().map(|w| w.handle).collect();
                    let want: Vec<u32> = model[key].drain(..).collect();
                    prop_assert_eq!(got, want);
                }
                Op::Forget { key } => {
                    q.forget_if_idle(&ids[key]);
                }
                Op::Find { handle } => {
                    let want = model.iter().position(|m| m.contains(&handle));
                    let got = q.find(handle).map(|(id, w)| (id.clone(), w.req));
                    prop_assert_eq!(got, want.map(|key| (ids[key].clone(), handle)));
                    if let Some(w) = q.find_mut(handle) {
                        prop_assert_eq!(w.handle, handle);
                    } else {
                        prop_assert!(want.is_none());
                    }
                }
            }
            // Every queued waiter is found by handle, in a slot that keeps the queue's order;
            // tombstones never outnumber the live waiters, and the head is live.
            for (key, id) in ids.iter().enumerate() {
                let mut last = None;
                for h in &model[key] {
                    let (at, pos, w) = q.locate(*h).expect("a queued waiter is found");
                    prop_assert_eq!(at, id);
                    prop_assert_eq!(w.handle, *h);
                    prop_assert!(last.is_none_or(|l| l < pos), "slots keep FIFO order");
                    prop_assert_eq!(q.get(id).and_then(|k| k.at(pos)).map(|w| w.handle), Some(*h));
                    last = Some(pos);
                }
                if let Some(k) = q.get(id) {
                    prop_assert!(k.slots() <= 2 * model[key].len(), "tombstones bounded");
                    prop_assert_eq!(k.front().map(|w| w.handle), model[key].front().copied());
                }
            }
            let total: usize = model.iter().map(|m| m.len()).sum();
            prop_assert_eq!(q.total(), total);
            for (key, id) in ids.iter().enumerate() {
                prop_assert_eq!(q.len(id), model[key].len());
                prop_assert_eq!(q.is_queued(id), !model[key].is_empty());
                let got: Vec<u32> = q.get(id).map_or_else(Vec::new, |k| k.iter().map(|w| w.req).collect());
                let want: Vec<u32> = model[key].iter().copied().collect();
                prop_assert_eq!(got, want);
            }
            let mut with_waiters: Vec<KeyId> = q.ids(None).into_iter().filter(|id| q.is_queued(id)).collect();
            with_waiters.sort_by(|a, b| (a.db, &a.key[..]).cmp(&(b.db, &b.key[..])));
            let mut want: Vec<KeyId> = ids.iter().enumerate().filter(|(i, _)| !model[*i].is_empty()).map(|(_, id)| id.clone()).collect();
            want.sort_by(|a, b| (a.db, &a.key[..]).cmp(&(b.db, &b.key[..])));
            prop_assert_eq!(with_waiters, want);
        }
    }
}

proptest! {
    /// One long queue emptied in random order, with pops and pushes in between: FIFO order,
    /// lookups and the bound on tombstones hold through compactions.
    #[test]
    fn removals_in_any_order(
        n in 1usize..300,
        order in prop::collection::vec(any::<prop::sample::Index>(), 1..300),
        pops in prop::collection::vec(any::<bool>(), 1..300),
    ) {
        let id = KeyId::new(0, b"k");
        let mut q: Queues<u32, u32> = Queues::default();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut next = 0u32;
        for _ in 0..n {
            q.push(&id, Waiter { handle: next, serial: next as u64, req: next, deadline: None, queued_us: 0 });
            model.push_back(next);
            next += 1;
        }
        for (i, ix) in order.iter().enumerate() {
            if model.is_empty() {
                break;
            }
            match pops.get(i).copied().unwrap_or(false) {
                true if i % 3 == 0 => {
                    prop_assert_eq!(q.pop_front(&id).map(|w| w.handle), model.pop_front());
                }
                true => {
                    q.push(&id, Waiter { handle: next, serial: next as u64, req: next, deadline: None, queued_us: 0 });
                    model.push_back(next);
                    next += 1;
                }
                false => {
                    let h = model[ix.index(model.len())];
                    let (_, w) = q.remove(h).expect("queued");
                    prop_assert_eq!(w.handle, h);
                    model.retain(|x| *x != h);
                    prop_assert!(q.find(h).is_none());
                }
            }
            let k = q.get(&id).expect("the key stays until forgotten");
            prop_assert!(k.slots() <= 2 * model.len());
            prop_assert_eq!(k.iter().map(|w| w.handle).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            for h in &model {
                prop_assert_eq!(q.find(*h).map(|(_, w)| w.handle), Some(*h));
            }
        }
    }
}

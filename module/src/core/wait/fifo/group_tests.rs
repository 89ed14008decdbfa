use super::*;
use proptest::prelude::*;

/// A handle in group `.0` (a session), numbered `.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Member(u8, u32);

impl Grouped for Member {
    type Group = u8;
    fn group(&self) -> u8 {
        self.0
    }
}

proptest! {
    #[test]
    fn a_group_leaves_alone_and_in_fifo_order(
        pushes in prop::collection::vec((0u8..3, 0usize..3), 1..300),
        removes in prop::collection::vec(any::<prop::sample::Index>(), 0..50),
        gone in 0u8..4,
    ) {
        let ids: Vec<KeyId> = [b"a", b"b", b"c"].iter().map(|k| KeyId::new(0, *k)).collect();
        let mut q: Queues<Member, u32> = Queues::default();
        // The model: every waiter queued, in push order, with its key.
        let mut model: Vec<(Member, usize)> = Vec::new();
        for (serial, (group, key)) in pushes.iter().enumerate() {
            let handle = Member(*group, serial as u32);
            q.push(&ids[*key], Waiter { handle, serial: serial as u64, req: serial as u32, deadline: None, queued_us: 0 });
            model.push((handle, *key));
        }
        for ix in removes {
            if model.is_empty() {
                break;
            }
            let (handle, _) = model.remove(ix.index(model.len()));
            prop_assert!(q.remove(handle).is_some());
        }
        let mut taken = Vec::new();
        let left = q.remove_group(gone, |id, w| taken.push((w.handle, id.clone())));
        let want: Vec<(Member, KeyId)> = model.iter().filter(|(h, _)| h.0 == gone).map(|(h, k)| (*h, ids[*k].clone())).collect();
        prop_assert_eq!(taken, want);
        let touched: Vec<usize> = model.iter().filter(|(h, _)| h.0 == gone).map(|(_, k)| *k).collect();
        model.retain(|(h, _)| h.0 != gone);
        // A queue the group emptied is forgotten; one that keeps waiters is named, once.
        for (key, id) in ids.iter().enumerate() {
            let waiters = model.iter().any(|(_, k)| *k == key);
            let named = left.queued.iter().filter(|q| *q == id).count();
            if touched.contains(&key) {
                prop_assert_eq!(named, waiters as usize);
                prop_assert_eq!(q.get(id).is_some(), waiters);
            } else {
                prop_assert_eq!(named, 0);
            }
        }
        prop_assert!(left.checks.is_empty(), "no re-check job was set");
        prop_assert_eq!(q.total(), model.len());
        for (key, id) in ids.iter().enumerate() {
            let got: Vec<Member> = q.get(id).map_or_else(Vec::new, |k| k.iter().map(|w| w.handle).collect());
            let want: Vec<Member> = model.iter().filter(|(_, k)| *k == key).map(|(h, _)| *h).collect();
            prop_assert_eq!(got, want);
        }
        for (h, key) in &model {
            prop_assert_eq!(q.find(*h).map(|(id, _)| id.clone()), Some(ids[*key].clone()));
        }
        let mut handles: Vec<Member> = q.handles().collect();
        handles.sort_by_key(|h| h.1);
        prop_assert_eq!(handles, model.iter().map(|(h, _)| *h).collect::<Vec<_>>());
    }
}

use super::model::Model;
use super::*;
use proptest::prelude::*;

const KEYS: usize = 4;

fn model() -> impl Strategy<Value = Model> {
    let entry = (0u8..6, any::<bool>());
    (
        prop::collection::vec(prop::collection::vec(entry.clone(), 0..3), KEYS),
        prop::collection::vec(prop::collection::vec(entry, 0..6), KEYS),
    )
        .prop_map(|(holders, queues)| Model { holders, queues })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    #[test]
    fn matches_brute_force(m in model(), key in 0..KEYS, excl in any::<bool>()) {
        let start = 0u8;
        let want = m.cycle(start, key, excl);
        let got = find_cycle(&m, &start, &key, excl, usize::MAX);
        prop_assert_eq!(got.is_some(), want, "{:?}", got);
        if let Some(steps) = got {
            prop_assert_eq!(steps[0].owner, start);
            prop_assert_eq!(steps[0].key, key);
            for (i, st) in steps.iter().enumerate() {
                let next = steps.get(i + 1).map_or(start, |n| n.owner);
                let new = (i == 0).then_some(excl);
                prop_assert!(
                    m.edge(st.owner, st.key, next, new),
                    "step {} of {:?}: {} does not wait on {} for {}",
                    i, steps, st.owner, st.key, next
                );
            }
            let distinct: HashSet<u8> = steps.iter().map(|s| s.owner).collect();
            prop_assert_eq!(distinct.len(), steps.len(), "a simple cycle: {:?}", steps);
        }
    }
}

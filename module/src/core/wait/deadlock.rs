//! Deadlock detection: would a new wait close a cycle of owners waiting for one another?
//!
//! The graph is read, not kept: an owner waits for every owner whose hold, or whose earlier
//! place in a queue, stands between it and its grant (each object says which, through
//! `Pending::waits_for`). When an owner is about to wait, a depth-first search follows those
//! edges from the owners it would wait for; reaching the owner again means the wait can never
//! be granted. Only the wait path pays for it: an acquire granted at once never searches.

use std::collections::HashMap;
use std::hash::Hash;

/// Who waits for whom, as far as the search needs to know.
pub trait Graph {
    type Owner: Clone + Eq + Hash;
    type Key: Clone;
    /// The waits of `owner`: each key it is queued on, with the owners it waits for there.
    fn waits(&self, owner: &Self::Owner) -> Vec<(Self::Key, Vec<Self::Owner>)>;
}

/// One step of a cycle: `owner` waits, on `key`, for the next step's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<O, K> {
    pub owner: O,
    pub key: K,
}

/// The cycle `start` would close by waiting on `key` for `blockers`, if any: the steps from
/// `start` back to it, in order. Bounded by `budget` owners visited (a graph too large to
/// search counts as no cycle: the wait is allowed, as without detection).
pub fn find_cycle<G: Graph>(
    graph: &G,
    start: &G::Owner,
    key: &G::Key,
    blockers: &[G::Owner],
    budget: usize,
) -> Option<Vec<Step<G::Owner, G::Key>>> {
    // How each owner was reached: the owner before it and the key that one waits on.
    let mut parent: HashMap<G::Owner, (G::Owner, G::Key)> = HashMap::new();
    let mut stack: Vec<G::Owner> = Vec::new();
    for b in blockers {
        if b == start {
            // Waiting for itself (an upgrade is refused before this; any other is a cycle).
            return Some(vec![Step {
                owner: start.clone(),
                key: key.clone(),
            }]);
        }
        if !parent.contains_key(b) {
            parent.insert(b.clone(), (start.clone(), key.clone()));
            stack.push(b.clone());
        }
    }
    let mut visited = 0usize;
    while let Some(owner) = stack.pop() {
        visited += 1;
        if visited > budget {
            return None;
        }
        for (k, next) in graph.waits(&owner) {
            for n in next {
                if &n == start {
                    return Some(path(&parent, start, owner, k));
                }
                if !parent.contains_key(&n) {
                    parent.insert(n.clone(), (owner.clone(), k.clone()));
                    stack.push(n);
                }
            }
        }
    }
    None
}

/// The steps from `start` to `last`, which waits on `key` for `start`.
fn path<O: Clone + Eq + Hash, K: Clone>(
    parent: &HashMap<O, (O, K)>,
    start: &O,
    last: O,
    key: K,
) -> Vec<Step<O, K>> {
    let mut steps = vec![Step {
        owner: last.clone(),
        key,
    }];
    let mut cur = last;
    while &cur != start {
        let (prev, k) = parent[&cur].clone();
        steps.push(Step {
            owner: prev.clone(),
            key: k,
        });
        cur = prev;
    }
    steps.reverse();
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    /// owner -> [(key, [owners it waits for])]
    struct Map(HashMap<u8, Vec<(u8, Vec<u8>)>>);

    impl Graph for Map {
        type Owner = u8;
        type Key = u8;
        fn waits(&self, owner: &u8) -> Vec<(u8, Vec<u8>)> {
            self.0.get(owner).cloned().unwrap_or_default()
        }
    }

    #[test]
    fn two_and_three_cycles() {
        // B waits on key 1 for A. A now asks for key 2, held by B.
        let g = Map(HashMap::from([(b'B', vec![(1, vec![b'A'])])]));
        let c = find_cycle(&g, &b'A', &2, b"B", 100).unwrap();
        assert_eq!(
            c,
            vec![
                Step {
                    owner: b'A',
                    key: 2
                },
                Step {
                    owner: b'B',
                    key: 1
                }
            ]
        );
        let g = Map(HashMap::from([
            (b'B', vec![(3, vec![b'C'])]),
            (b'C', vec![(1, vec![b'A'])]),
        ]));
        let c = find_cycle(&g, &b'A', &2, b"B", 100).unwrap();
        assert_eq!(c.iter().map(|s| s.owner).collect::<Vec<_>>(), b"ABC");
        assert_eq!(c.iter().map(|s| s.key).collect::<Vec<_>>(), vec![2, 3, 1]);
        // A chain without a cycle.
        let g = Map(HashMap::from([(b'B', vec![(3, vec![b'C'])])]));
        assert!(find_cycle(&g, &b'A', &2, b"B", 100).is_none());
        // The budget bounds the search.
        let g = Map(HashMap::from([
            (b'B', vec![(3, vec![b'C'])]),
            (b'C', vec![(1, vec![b'A'])]),
        ]));
        assert!(find_cycle(&g, &b'A', &2, b"B", 1).is_none());
    }
}

/// Property test: on random wait-for graphs, `find_cycle` finds a cycle through the new wait
/// exactly when a brute-force search over all paths does, and what it returns is a real cycle.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use proptest::prelude::*;

    struct Edges(Vec<(u8, u8, u8)>); // (owner, key, waits for owner)

    impl Graph for Edges {
        type Owner = u8;
        type Key = u8;
        fn waits(&self, owner: &u8) -> Vec<(u8, Vec<u8>)> {
            let mut by_key: Vec<(u8, Vec<u8>)> = Vec::new();
            for &(o, k, n) in &self.0 {
                if o == *owner {
                    match by_key.iter_mut().find(|(x, _)| *x == k) {
                        Some((_, v)) => v.push(n),
                        None => by_key.push((k, vec![n])),
                    }
                }
            }
            by_key
        }
    }

    /// Is `start` reachable from `from`? (Plain reachability, every path.)
    fn reaches(g: &Edges, from: u8, start: u8) -> bool {
        let mut seen = vec![false; 256];
        let mut todo = vec![from];
        while let Some(o) = todo.pop() {
            if o == start {
                return true;
            }
            if std::mem::replace(&mut seen[o as usize], true) {
                continue;
            }
            todo.extend(g.0.iter().filter(|e| e.0 == o).map(|e| e.2));
        }
        false
    }

    proptest! {
        #[test]
        fn matches_brute_force(
            edges in prop::collection::vec((0u8..8, 0u8..6, 0u8..8), 0..24),
            blockers in prop::collection::vec(1u8..8, 1..4),
        ) {
            let g = Edges(edges);
            let start = 0u8;
            let want = blockers.iter().any(|b| reaches(&g, *b, start));
            let got = find_cycle(&g, &start, &99, &blockers, usize::MAX);
            prop_assert_eq!(got.is_some(), want);
            if let Some(steps) = got {
                // A real cycle: start first, each step's owner waits on its key for the next
                // step's owner, and the last waits for start.
                prop_assert_eq!(steps[0].owner, start);
                prop_assert_eq!(steps[0].key, 99);
                prop_assert!(blockers.contains(&steps[1 % steps.len()].owner) || steps.len() == 1);
                for w in steps.windows(2).skip(1) {
                    let (a, b) = (&w[0], &w[1]);
                    prop_assert!(g.0.contains(&(a.owner, a.key, b.owner)));
                }
                let last = steps.last().unwrap();
                if steps.len() > 1 {
                    prop_assert!(g.0.contains(&(last.owner, last.key, start)));
                }
            }
        }
    }
}

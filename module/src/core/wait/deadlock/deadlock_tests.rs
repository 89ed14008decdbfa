use super::model::Model;
use super::*;

const A: u8 = 0;
const B: u8 = 1;
const C: u8 = 2;
const D: u8 = 3;

fn owners<O: Copy>(c: &[Step<O, usize>]) -> Vec<O> {
    c.iter().map(|s| s.owner).collect()
}

#[test]
fn two_and_three_cycles() {
    // A holds key 0; B holds key 1 and waits for key 0. A now asks for key 1.
    let m = Model {
        holders: vec![vec![(A, true)], vec![(B, true)]],
        queues: vec![vec![(B, true)], vec![]],
    };
    let c = find_cycle(&m, &A, &1, true, 1000).unwrap();
    assert_eq!(
        c,
        vec![Step { owner: A, key: 1 }, Step { owner: B, key: 0 }]
    );
    // A -> B (key 1) -> C (key 2) -> A (key 0).
    let m = Model {
        holders: vec![vec![(A, true)], vec![(B, true)], vec![(C, true)]],
        queues: vec![vec![(C, true)], vec![], vec![(B, true)]],
    };
    let c = find_cycle(&m, &A, &1, true, 1000).unwrap();
    assert_eq!(owners(&c), [A, B, C]);
    assert_eq!(c.iter().map(|s| s.key).collect::<Vec<_>>(), [1, 2, 0]);
    // A chain without a cycle.
    let m = Model {
        holders: vec![vec![(A, true)], vec![(B, true)], vec![(C, true)]],
        queues: vec![vec![], vec![], vec![(B, true)]],
    };
    assert!(find_cycle(&m, &A, &1, true, 1000).is_none());
}

#[test]
fn a_search_out_of_budget_says_so() {
    // A -> B (key 1) -> C (key 2) -> A (key 0): found with room, undecided without.
    let m = Model {
        holders: vec![vec![(A, true)], vec![(B, true)], vec![(C, true)]],
        queues: vec![vec![(C, true)], vec![], vec![(B, true)]],
    };
    assert!(matches!(search(&m, &A, &1, true, 1000), Ok(Some(_))));
    assert_eq!(search(&m, &A, &1, true, 2), Err(Exhausted));
    assert!(
        find_cycle(&m, &A, &1, true, 2).is_none(),
        "admitted undecided"
    );
    // A key with more holders than the budget is not searched at all.
    let m = Model {
        holders: vec![vec![(B, false), (C, false), (D, false)], vec![(A, true)]],
        queues: vec![vec![], vec![(B, true)]],
    };
    assert!(matches!(search(&m, &A, &0, true, 1000), Ok(Some(_))));
    assert_eq!(search(&m, &A, &0, true, 2), Err(Exhausted));
}

#[test]
fn readers_pass_readers_but_not_a_writer_queued_ahead() {
    // Key 0: B reads; D queued to write; A holds key 1 and B waits for it.
    let m = Model {
        holders: vec![vec![(B, false)], vec![(A, true)]],
        queues: vec![vec![(D, true)], vec![(B, true)]],
    };
    // A reading key 0 waits for D (a writer ahead), D for B's read hold, B for A.
    let c = find_cycle(&m, &A, &0, false, 1000).unwrap();
    assert_eq!(owners(&c), [A, D, B]);
    // Without the writer queued, a reader passes B's read hold: no cycle.
    let m = Model {
        queues: vec![vec![], vec![(B, true)]],
        ..m
    };
    assert!(find_cycle(&m, &A, &0, false, 1000).is_none());
    assert!(find_cycle(&m, &A, &0, true, 1000).is_some());
}

/// Key 0 held by owner 1, with `n` waiters (owners 10, 11, ...) each waiting once; owner 1
/// waits for key 1, held by owner 2.
struct HotKey {
    n: usize,
}

impl Graph for HotKey {
    type Owner = usize;
    type Key = usize;
    fn holders(&self, key: &usize) -> Vec<(usize, bool)> {
        vec![(1 + key, true)]
    }
    fn queue_len(&self, key: &usize) -> usize {
        if *key == 0 {
            self.n
        } else {
            1
        }
    }
    fn exclusive_at(&self, key: &usize, pos: usize) -> Option<bool> {
        (pos < self.queue_len(key)).then_some(true)
    }
    fn owner_at(&self, key: &usize, pos: usize) -> Option<usize> {
        match key {
            0 => (pos < self.n).then_some(10 + pos),
            _ => (pos == 0).then_some(1),
        }
    }
    fn waits(&self, owner: &usize) -> Vec<Place<usize>> {
        let (key, pos) = match owner {
            1 => (1, 0),
            o if *o >= 10 && o - 10 < self.n => (0, o - 10),
            _ => return Vec::new(),
        };
        vec![Place {
            key,
            pos,
            exclusive: true,
        }]
    }
    fn multi(&self) -> Vec<usize> {
        Vec::new()
    }
}

#[test]
fn a_long_queue_is_one_step() {
    // A budget far below the queue's length is enough to follow it to the holder and on.
    let g = HotKey { n: 1_000_000 };
    assert!(find_cycle(&g, &0, &0, true, 20).is_none());
    assert!(find_cycle(&g, &0, &0, false, 20).is_none());
    let c = find_cycle(&g, &2, &0, true, 20).unwrap();
    assert_eq!(owners(&c), [2, 1]);
    assert_eq!(c.iter().map(|s| s.key).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn the_budget_bounds_the_search() {
    let m = Model {
        holders: vec![vec![(A, true)], vec![(B, true)], vec![(C, true)]],
        queues: vec![vec![(C, true)], vec![], vec![(B, true)]],
    };
    assert!(find_cycle(&m, &A, &1, true, 1000).is_some());
    assert!(find_cycle(&m, &A, &1, true, 2).is_none());
}

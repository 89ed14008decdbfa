//! Deadlock detection: would a new wait close a cycle of owners waiting for one another?
//!
//! Who waits for whom follows from holds and queue order. A request waits for every holder of
//! its object and every request ahead of it in the object's FIFO queue, except where both
//! share: a shared request (a read) passes shared holds and shared requests ahead of it. An
//! owner never waits for itself. When an owner is about to wait, the search follows these
//! edges from its new request; reaching the owner again means the wait can never be granted.
//!
//! The search works on queues, not on single waiters, so its cost does not grow with the
//! length of the queues it meets (a hot lock with thousands of waiters is one step, not
//! thousands): reaching the request at position `p` of a queue reaches every request ahead of
//! it (the exclusive ones only, for a shared request), and through the last exclusive request
//! reached, everything ahead of that one and every holder. An owner queued once leads nowhere
//! beyond its queue, so the only ways out of a queue are its holders and the few owners that
//! wait more than once; only those are followed one by one. The requesting owner's own places
//! in queues and its holds are checked directly.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

/// One wait of an owner: the key it is queued on, its place there, whether it is exclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place<K> {
    pub key: K,
    pub pos: usize,
    pub exclusive: bool,
}

/// What the search reads: the holders and queues of one database.
pub trait Graph {
    type Owner: Clone + Eq + Hash;
    type Key: Clone + Eq + Hash;
    /// The holders of `key`, each with whether its hold is exclusive.
    fn holders(&self, key: &Self::Key) -> Vec<(Self::Owner, bool)>;
    /// How many requests are queued on `key`.
    fn queue_len(&self, key: &Self::Key) -> usize;
    /// Whether the request at `pos` of `key`'s queue is exclusive (`None`: it has no owner).
    fn exclusive_at(&self, key: &Self::Key, pos: usize) -> Option<bool>;
    /// The owner of the request at `pos` of `key`'s queue.
    fn owner_at(&self, key: &Self::Key, pos: usize) -> Option<Self::Owner>;
    /// Every wait of `owner`.
    fn waits(&self, owner: &Self::Owner) -> Vec<Place<Self::Key>>;
    /// The owners with more than one wait (usually none).
    fn multi(&self) -> Vec<Self::Owner>;
}

/// One step of a cycle: `owner` waits, on `key`, for the next step's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<O, K> {
    pub owner: O,
    pub key: K,
}

/// Whether a request waits for a hold or an earlier request, by their kinds: only two shared
/// ones pass each other.
pub fn blocks(waiter_exclusive: bool, other_exclusive: bool) -> bool {
    waiter_exclusive || other_exclusive
}

/// How far the search has reached into one key's queue and holders.
struct Reach<O> {
    len: usize,
    /// The highest request followed on this key whose owner is not the start (and the highest
    /// exclusive one), with its owner.
    entry: Option<(usize, O)>,
    entry_excl: Option<(usize, O)>,
    /// Every request before `all` is reached, by the exclusive request of `all_from`.
    all: usize,
    all_from: Option<O>,
    /// Every exclusive request before `excl` is reached, by the shared request of `excl_from`.
    excl: usize,
    excl_from: Option<O>,
    /// Holders reached (all of them / the exclusive ones), and by whom.
    hold_all: Option<O>,
    hold_excl: Option<O>,
    /// 0: no holder followed yet, 1: the exclusive ones, 2: all.
    holders_done: u8,
    holders: Option<Vec<(O, bool)>>,
    /// Positions below `closed` were scanned for the last exclusive request not the start's,
    /// which is `last_excl`.
    closed: usize,
    last_excl: Option<usize>,
    /// The start's own requests on this key: (position, exclusive).
    start: Vec<(usize, bool)>,
}

impl<O> Reach<O> {
    fn is_start(&self, pos: usize) -> bool {
        self.start.iter().any(|(p, _)| *p == pos)
    }

    /// Who reached the request at `pos` (below `all`, or exclusive below `excl`).
    fn cover(&self, pos: usize) -> &Option<O> {
        if pos < self.all {
            &self.all_from
        } else {
            &self.excl_from
        }
    }
}

/// A request of an owner waiting more than once: owner, position, exclusive.
type Queued<O> = (O, usize, bool);

/// A request to follow: key, position, exclusive, owner.
type Todo<O, K> = (K, usize, bool, O);

struct Search<'g, G: Graph> {
    g: &'g G,
    start: G::Owner,
    /// How each reached owner was reached: the owner that waits for it, and on which key.
    parent: HashMap<G::Owner, (G::Owner, G::Key)>,
    keys: HashMap<G::Key, Reach<G::Owner>>,
    /// Owners (not the start) with more than one wait, and their waits by key.
    multi: HashSet<G::Owner>,
    multi_on: HashMap<G::Key, Vec<Queued<G::Owner>>>,
    /// The start's own waits, by key.
    start_waits: HashMap<G::Key, Vec<(usize, bool)>>,
    todo: Vec<Todo<G::Owner, G::Key>>,
    budget: usize,
}

/// The cycle `start` would close by queueing an exclusive (or shared) request on `key`, if
/// any: the steps from `start` back to it, in order. Bounded by `budget` units of work (a
/// graph too large to search counts as no cycle: the wait is allowed, as without detection).
pub fn find_cycle<G: Graph>(
    g: &G,
    start: &G::Owner,
    key: &G::Key,
    exclusive: bool,
    budget: usize,
) -> Option<Vec<Step<G::Owner, G::Key>>> {
    search(g, start, key, exclusive, budget).ok().flatten()
}

/// The search ran out of its budget before it could decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// A cycle found, or none, or a search that could not decide.
pub type Searched<O, K> = Result<Option<Vec<Step<O, K>>>, Exhausted>;

/// As [`find_cycle`], telling a search that ran out of budget (`Err`) from one that found no
/// cycle (`Ok(None)`), so the caller can count the waits admitted undecided.
pub fn search<G: Graph>(
    g: &G,
    start: &G::Owner,
    key: &G::Key,
    exclusive: bool,
    budget: usize,
) -> Searched<G::Owner, G::Key> {
    // The usual case, decided without a search: when nobody waits twice, the owner waits
    // nowhere yet and no holder of the key waits, everyone the request waits for leads back
    // only to this key's queue and holders, none of which waits for the owner.
    let start_waits = g.waits(start);
    let multi = g.multi();
    if start_waits.is_empty() && multi.iter().all(|o| o == start) {
        let holders = g.holders(key);
        // Every holder is looked at: a key held by more holders than the budget (a read lock
        // with thousands of readers) is too large to search.
        if holders.len() > budget {
            return Err(Exhausted);
        }
        if holders
            .iter()
            .all(|(h, _)| h != start && g.waits(h).is_empty())
        {
            return Ok(None);
        }
    }
    let mut s = Search {
        g,
        start: start.clone(),
        parent: HashMap::new(),
        keys: HashMap::new(),
        multi: HashSet::new(),
        multi_on: HashMap::new(),
        start_waits: HashMap::new(),
        todo: vec![(key.clone(), g.queue_len(key), exclusive, start.clone())],
        budget,
    };
    for p in start_waits {
        let at = s.start_waits.entry(p.key).or_default();
        at.push((p.pos, p.exclusive));
    }
    for o in multi {
        if &o == start {
            continue;
        }
        for p in g.waits(&o) {
            let on = s.multi_on.entry(p.key).or_default();
            on.push((o.clone(), p.pos, p.exclusive));
        }
        s.multi.insert(o);
    }
    while let Some((k, pos, excl, from)) = s.todo.pop() {
        if let Some(cycle) = s.follow(k, pos, excl, from).ok_or(Exhausted)? {
            return Ok(Some(cycle));
        }
    }
    Ok(None)
}

/// `None`: out of budget; `Some(None)`: go on; `Some(Some(cycle))`: found.
type Found<O, K> = Option<Option<Vec<Step<O, K>>>>;

impl<G: Graph> Search<'_, G> {
    fn spend(&mut self, n: usize) -> Option<()> {
        self.budget = self.budget.checked_sub(n)?;
        Some(())
    }

    /// Follow the request at `pos` of `k`'s queue owned by `from` (the start's new request:
    /// `pos` is the queue's length).
    fn follow(
        &mut self,
        k: G::Key,
        pos: usize,
        excl: bool,
        from: G::Owner,
    ) -> Found<G::Owner, G::Key> {
        self.spend(1)?;
        if !self.keys.contains_key(&k) {
            let reach = Reach {
                len: self.g.queue_len(&k),
                entry: None,
                entry_excl: None,
                all: 0,
                all_from: None,
                excl: 0,
                excl_from: None,
                hold_all: None,
                hold_excl: None,
                holders_done: 0,
                holders: None,
                closed: 0,
                last_excl: None,
                start: self.start_waits.get(&k).cloned().unwrap_or_default(),
            };
            self.keys.insert(k.clone(), reach);
        }
        let r = self.keys.get_mut(&k).expect("inserted above");
        if from != self.start {
            if r.entry.as_ref().is_none_or(|(p, _)| *p < pos) {
                r.entry = Some((pos, from.clone()));
            }
            if excl && r.entry_excl.as_ref().is_none_or(|(p, _)| *p < pos) {
                r.entry_excl = Some((pos, from.clone()));
            }
        }
        if excl {
            if pos > r.all {
                r.all = pos;
                r.all_from = Some(from.clone());
            }
            r.hold_all.get_or_insert(from);
        } else {
            if pos > r.excl {
                r.excl = pos;
                r.excl_from = Some(from.clone());
            }
            r.hold_excl.get_or_insert(from);
        }
        self.close(&k)?;
        self.follow_holders(&k)?;
        self.follow_multi(&k)?;
        Some(self.start_reached(&k))
    }

    /// Everything ahead of the last exclusive request reached (and every holder) is reached
    /// too: find that request (not the start's) and follow it.
    fn close(&mut self, k: &G::Key) -> Option<()> {
        let g = self.g;
        let r = self.keys.get_mut(k).expect("reached");
        let upto = r.all.max(r.excl).min(r.len);
        if upto <= r.closed {
            return Some(());
        }
        let mut found = None;
        let mut scanned = 0;
        for j in (r.closed..upto).rev() {
            scanned += 1;
            if !r.is_start(j) && g.exclusive_at(k, j) == Some(true) {
                found = Some(j);
                break;
            }
        }
        r.closed = upto;
        if let Some(j) = found {
            r.last_excl = Some(j);
        }
        let by = found.and_then(|j| r.cover(j).clone());
        self.spend(scanned)?;
        let (Some(j), Some(by)) = (found, by) else {
            return Some(());
        };
        match g.owner_at(k, j) {
            Some(o) => self.reach(o, by, k, Some(j)),
            None => Some(()),
        }
    }

    /// Holders reached on `k` are reached owners: follow their waits.
    fn follow_holders(&mut self, k: &G::Key) -> Option<()> {
        let g = self.g;
        let r = self.keys.get_mut(k).expect("reached");
        let level = if r.hold_all.is_some() {
            2
        } else {
            u8::from(r.hold_excl.is_some())
        };
        if level <= r.holders_done {
            return Some(());
        }
        r.holders_done = level;
        let holders = r.holders.get_or_insert_with(|| g.holders(k)).clone();
        let (hold_all, hold_excl) = (r.hold_all.clone(), r.hold_excl.clone());
        self.spend(holders.len())?;
        for (h, hx) in holders {
            let by = match (&hold_all, &hold_excl) {
                (Some(by), _) => by,
                (None, Some(by)) if hx => by,
                _ => continue,
            };
            if h != self.start {
                self.reach(h, by.clone(), k, None)?;
            }
        }
        Some(())
    }

    /// Owners waiting more than once whose place on `k` is reached: follow their other waits.
    fn follow_multi(&mut self, k: &G::Key) -> Option<()> {
        let Some(on) = self.multi_on.get(k) else {
            return Some(());
        };
        let r = &self.keys[k];
        let reached: Vec<(G::Owner, G::Owner)> = on
            .iter()
            .filter(|(o, pos, excl)| {
                !self.parent.contains_key(o) && (*pos < r.all || (*excl && *pos < r.excl))
            })
            .filter_map(|(o, pos, _)| Some((o.clone(), r.cover(*pos).clone()?)))
            .collect();
        self.spend(on.len())?;
        for (o, by) in reached {
            self.reach(o, by, k, None)?;
        }
        Some(())
    }

    /// `o` is reached: `by` waits for it on `k`. Follow its waits: all of them, or only the
    /// request at `at` of `k` when that is its only one.
    fn reach(&mut self, o: G::Owner, by: G::Owner, k: &G::Key, at: Option<usize>) -> Option<()> {
        if self.parent.contains_key(&o) {
            return Some(());
        }
        self.parent.insert(o.clone(), (by, k.clone()));
        match at {
            Some(j) if !self.multi.contains(&o) => {
                self.todo.push((k.clone(), j, true, o));
            }
            _ => {
                let waits = self.g.waits(&o);
                self.spend(waits.len())?;
                for p in waits {
                    self.todo.push((p.key, p.pos, p.exclusive, o.clone()));
                }
            }
        }
        Some(())
    }

    /// Does a reached request of another owner on `k` wait for one of the start's requests
    /// there, or for its hold? Then that closes the cycle.
    fn start_reached(&mut self, k: &G::Key) -> Option<Vec<Step<G::Owner, G::Key>>> {
        let g = self.g;
        let r = self.keys.get_mut(k).expect("reached");
        let mut targets: Vec<(Option<usize>, bool)> =
            r.start.iter().map(|(p, x)| (Some(*p), *x)).collect();
        let holders = r.holders.get_or_insert_with(|| g.holders(k));
        let mine = holders.iter().filter(|(h, _)| *h == self.start);
        // Its holds there (a read and a write hold may be one owner's): the exclusive one
        // blocks every waiter.
        if let Some(hx) = mine.map(|(_, x)| *x).reduce(|a, b| a || b) {
            targets.push((None, hx));
        }
        for (at, target_excl) in targets {
            // The highest reached request of another owner that waits for the target.
            let Some((j, waiter, by)) = self.last_reached(k, !target_excl) else {
                continue;
            };
            if at.is_some_and(|p| j <= p) {
                continue;
            }
            if let Some(by) = by {
                self.parent.entry(waiter.clone()).or_insert((by, k.clone()));
            }
            return Some(path(&self.parent, &self.start, waiter, k.clone()));
        }
        None
    }

    /// The reached request on `k` with the highest position whose owner is not the start (an
    /// exclusive one when `exclusive`): its position, its owner, and who reached it when its
    /// owner is not reached otherwise.
    fn last_reached(
        &self,
        k: &G::Key,
        exclusive: bool,
    ) -> Option<(usize, G::Owner, Option<G::Owner>)> {
        let r = &self.keys[k];
        let mut best: Option<(usize, G::Owner, Option<G::Owner>)> = None;
        let mut offer = |c: (usize, G::Owner, Option<G::Owner>)| {
            if best.as_ref().is_none_or(|b| b.0 < c.0) {
                best = Some(c);
            }
        };
        let entry = if exclusive { &r.entry_excl } else { &r.entry };
        if let Some((p, o)) = entry {
            offer((*p, o.clone(), None));
        }
        if let Some(j) = r.last_excl {
            if let Some(o) = self.g.owner_at(k, j) {
                offer((j, o, r.cover(j).clone()));
            }
        }
        if !exclusive {
            // The highest request before `all` that is not the start's.
            let mut j = r.all.min(r.len);
            while j > 0 {
                j -= 1;
                if r.is_start(j) {
                    continue;
                }
                if let Some(o) = self.g.owner_at(k, j) {
                    offer((j, o, r.all_from.clone()));
                    break;
                }
            }
        }
        best
    }
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

/// An explicit graph for the tests: each key's holders and queue.
#[cfg(test)]
mod model;

#[cfg(test)]
mod deadlock_tests;

/// Property test: on random holders and queues (owners waiting once or several times, the
/// requesting owner holding or queued anywhere), `find_cycle` finds a cycle exactly when a
/// brute-force search over every edge of every owner does, and what it returns is a real
/// cycle: each step's owner waits on its key for the next step's owner.
#[cfg(test)]
mod deadlock_prop_tests;

use super::*;

/// (owner, exclusive)
pub type Entry = (u8, bool);

#[derive(Debug, Clone, Default)]
pub struct Model {
    pub holders: Vec<Vec<Entry>>,
    pub queues: Vec<Vec<Entry>>,
}

impl Graph for Model {
    type Owner = u8;
    type Key = usize;
    fn holders(&self, key: &usize) -> Vec<(u8, bool)> {
        self.holders[*key].clone()
    }
    fn queue_len(&self, key: &usize) -> usize {
        self.queues[*key].len()
    }
    fn exclusive_at(&self, key: &usize, pos: usize) -> Option<bool> {
        self.queues[*key].get(pos).map(|e| e.1)
    }
    fn owner_at(&self, key: &usize, pos: usize) -> Option<u8> {
        self.queues[*key].get(pos).map(|e| e.0)
    }
    fn waits(&self, owner: &u8) -> Vec<Place<usize>> {
        let mut out = Vec::new();
        for (key, q) in self.queues.iter().enumerate() {
            for (pos, (o, exclusive)) in q.iter().enumerate() {
                if o == owner {
                    out.push(Place {
                        key,
                        pos,
                        exclusive: *exclusive,
                    });
                }
            }
        }
        out
    }
    fn multi(&self) -> Vec<u8> {
        let mut counts: HashMap<u8, usize> = HashMap::new();
        for (o, _) in self.queues.iter().flatten() {
            *counts.entry(*o).or_default() += 1;
        }
        counts
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(o, _)| o)
            .collect()
    }
}

impl Model {
    /// The owners the request at `pos` of `key`'s queue (owned by `owner`, `pos` may be
    /// the queue's length for a new request) waits for: holders and earlier requests, by
    /// the rule, never itself.
    pub fn blockers(&self, key: usize, pos: usize, excl: bool, owner: u8) -> Vec<u8> {
        let holds = self.holders[key].iter();
        let ahead = self.queues[key][..pos].iter();
        holds
            .chain(ahead)
            .filter(|(o, x)| *o != owner && blocks(excl, *x))
            .map(|(o, _)| *o)
            .collect()
    }

    /// Brute force: following every edge of every reached owner (but never the start's
    /// other waits), is the start reached from its new request's blockers?
    pub fn cycle(&self, start: u8, key: usize, excl: bool) -> bool {
        let mut seen = HashSet::new();
        let mut todo = self.blockers(key, self.queues[key].len(), excl, start);
        while let Some(o) = todo.pop() {
            if o == start {
                return true;
            }
            if !seen.insert(o) {
                continue;
            }
            for p in self.waits(&o) {
                todo.extend(self.blockers(p.key, p.pos, p.exclusive, o));
            }
        }
        false
    }

    /// Whether `owner` waits on `key` for `next`, through one of its requests there (or
    /// through the start's new request, for the first step).
    pub fn edge(&self, owner: u8, key: usize, next: u8, new: Option<bool>) -> bool {
        if let Some(excl) = new {
            return self
                .blockers(key, self.queues[key].len(), excl, owner)
                .contains(&next);
        }
        self.waits(&owner).iter().filter(|p| p.key == key).any(|p| {
            self.blockers(key, p.pos, p.exclusive, owner)
                .contains(&next)
        })
    }
}

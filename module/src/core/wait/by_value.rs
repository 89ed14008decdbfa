//! A queue's index by value, for objects whose requests name the values they take (a grouped
//! MultiLock, [`super::Request::values`]): for each value, the FIFO of the waiters wanting it
//! (their serials, which are their queue order). Only such queues have one.
//!
//! It makes serving and a newcomer's check cost what the step touches, not the queue's length
//! (the rule of `core::group::walk`, FIFO per value): a waiter may be granted past the queue's
//! head only when it is first in the list of every value it wants, and it can become
//! grantable only when one of those values changes: it is freed (a release, a force release,
//! a lease that ended, a write outside rlock), or the waiter before it in that value's list
//! leaves (granted, timed out, withdrawn, its session ended). Both mark the value *dirty*;
//! serving tries the first waiters of the dirty values' lists and nobody else.

use super::HashMap;
use std::collections::{BTreeSet, HashSet};

/// What a request waits for, when it names values: what the queues index it by.
pub trait Valued {
    fn values(&self) -> Option<&[Box<[u8]>]> {
        None
    }
}

/// The plain requests of the queues' own tests name no values.
impl Valued for u32 {}
impl Valued for &'static str {}

/// Which values serving must look at.
#[derive(Debug, Default)]
enum Dirty {
    #[default]
    None,
    Some(HashSet<Box<[u8]>, foldhash::fast::RandomState>),
    /// Something changed that does not say what (an event on the key outside rlock, a flush):
    /// every value's list.
    All,
}

impl Dirty {
    fn mark(&mut self, value: &[u8]) {
        match self {
            Dirty::All => {}
            Dirty::Some(set) => {
                set.insert(value.into());
            }
            Dirty::None => *self = Dirty::Some(HashSet::from_iter([value.into()])),
        }
    }
}

#[derive(Debug, Default)]
pub struct ByValue {
    /// Each wanted value's waiters, by serial (queue order). A value nobody wants has no entry.
    lists: HashMap<Box<[u8]>, BTreeSet<u64>>,
    dirty: Dirty,
    /// A command said which values it freed since the last serving (see [`Freed`]).
    hinted: bool,
    /// No hold of the object ends before this: until then no lease can have ended, and
    /// serving need not read the object for ones that did. Set from the next lease end read at
    /// the end of serving, lowered by what a newcomer takes (`lowered`), forgotten on any
    /// change rlock did not make (`all`). `None`: look.
    quiet_until: Option<i64>,
}

/// What serving adds to the dirty values, beside what was marked: values whose holds ended by
/// time alone, or (`Gone`) the object's key is gone (or holds another object): unless a command said what it freed
/// (a release that deleted the last value deletes the hash), every value may be free.
pub enum Freed {
    Lapsed(Vec<Vec<u8>>),
    Gone,
}

impl ByValue {
    /// A waiter joins at the tail: a value whose list it starts is dirty (nobody was before it
    /// there; normally it found the value held, but it must not be forgotten if not).
    pub fn add(&mut self, serial: u64, values: &[Box<[u8]>]) {
        for v in values {
            let list = self.lists.entry(v.clone()).or_default();
            list.insert(serial);
            if list.len() == 1 {
                self.mark(v);
            }
        }
    }

    /// A waiter leaves: the waiter after it in a list it headed may be grantable now.
    pub fn remove(&mut self, serial: u64, values: &[Box<[u8]>]) {
        for v in values {
            let Some(list) = self.lists.get_mut(&v[..]) else {
                continue;
            };
            let was_head = list.first() == Some(&serial);
            list.remove(&serial);
            if list.is_empty() {
                self.lists.remove(&v[..]);
                // Give memory back after a burst (as `fifo::shrink` does).
                if self.lists.capacity() > 64 && self.lists.len() * 4 < self.lists.capacity() {
                    self.lists.shrink_to(self.lists.len() * 2);
                }
            } else if was_head {
                self.mark(v);
            }
        }
    }

    /// `value` may be free now, or its first waiter changed.
    fn mark(&mut self, value: &[u8]) {
        self.dirty.mark(value);
    }

    /// A command freed `values` (those nobody waits for are skipped).
    pub fn freed<'v>(&mut self, values: impl IntoIterator<Item = &'v [u8]>) {
        self.hinted = true;
        for v in values {
            if self.lists.contains_key(v) {
                self.mark(v);
            }
        }
    }

    /// Anything may have changed: every list is looked at on the next serving.
    pub fn all(&mut self) {
        self.dirty = Dirty::All;
        self.quiet_until = None;
    }

    /// Whether serving at `now` must read the object for leases that ended.
    pub fn may_have_lapsed(&self, now: i64) -> bool {
        self.quiet_until.is_none_or(|t| now >= t)
    }

    /// Serving read the object's next lease end (`None`: it does not know one).
    pub fn quiet_until(&mut self, at: Option<i64>) {
        self.quiet_until = at;
    }

    /// A hold taken outside serving ends no sooner than `at`.
    pub fn lowered(&mut self, at: i64) {
        if let Some(t) = &mut self.quiet_until {
            *t = (*t).min(at);
        }
    }

    /// Whether a waiter wants one of `values` (a newcomer must not take it past them).
    pub fn wants_any(&self, values: &[&[u8]]) -> bool {
        values.iter().any(|v| self.lists.contains_key(*v))
    }

    /// Whether the waiter `serial` is first in the list of each of its values.
    fn first_in_all(&self, serial: u64, values: &[Box<[u8]>]) -> bool {
        values
            .iter()
            .all(|v| self.lists.get(&v[..]).and_then(|l| l.first()) == Some(&serial))
    }

    /// The serials of the waiters serving tries, in queue order: the first waiter of each
    /// dirty value's list (with `freed` added to them), kept if it is first in every list of
    /// its own values (`values_of` reads them). The dirty values are consumed. O(dirty values)
    /// lookups, plus each kept candidate's values.
    pub fn candidates<'r>(
        &mut self,
        freed: Freed,
        values_of: impl Fn(u64) -> Option<&'r [Box<[u8]>]>,
    ) -> Vec<u64> {
        let hinted = std::mem::take(&mut self.hinted);
        let mut dirty = std::mem::take(&mut self.dirty);
        match freed {
            Freed::Gone if !hinted => dirty = Dirty::All,
            Freed::Gone => {}
            Freed::Lapsed(values) => {
                for v in values {
                    if self.lists.contains_key(&v[..]) {
                        dirty.mark(&v);
                    }
                }
            }
        }
        let mut heads: Vec<u64> = match &dirty {
            Dirty::None => return Vec::new(),
            Dirty::Some(set) => set
                .iter()
                .filter_map(|v| self.lists.get(v)?.first().copied())
                .collect(),
            Dirty::All => self
                .lists
                .values()
                .filter_map(|l| l.first().copied())
                .collect(),
        };
        heads.sort_unstable();
        heads.dedup();
        heads.retain(|s| values_of(*s).is_some_and(|vals| self.first_in_all(*s, vals)));
        heads
    }

    /// Serving stopped (writes are paused) before trying these waiters: their values are
    /// looked at again next time.
    pub fn untried(&mut self, values: &[Box<[u8]>]) {
        for v in values {
            if self.lists.contains_key(&v[..]) {
                self.mark(v);
            }
        }
    }

    /// Distinct values waited for.
    #[cfg(test)]
    pub fn lists(&self) -> usize {
        self.lists.len()
    }
}

#[cfg(test)]
mod by_value_tests;

//! Values claimed by waiters, for objects whose requests name the values they take (a grouped
//! MultiLock, `core::group`): walking a queue in order, a waiter may be granted only if no
//! waiter before it wants one of its values (FIFO per value), so disjoint values never wait on
//! each other. Every waiter walked past claims its values, granted or not.

use std::collections::HashSet;

#[derive(Debug, Default)]
pub struct Claims(HashSet<Box<[u8]>>);

impl Claims {
    /// Whether none of `values` is claimed.
    pub fn free_of<V: AsRef<[u8]>>(&self, values: &[V]) -> bool {
        values.iter().all(|v| !self.0.contains(v.as_ref()))
    }

    pub fn claim<V: AsRef<[u8]>>(&mut self, values: &[V]) {
        self.0.extend(values.iter().map(|v| v.as_ref().into()));
    }

    pub fn contains(&self, value: &[u8]) -> bool {
        self.0.contains(value)
    }
}

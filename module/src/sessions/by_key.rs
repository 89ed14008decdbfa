//! The map of watched keys (`State::tracked`): each entry keeps its key's hash (the one its
//! `KeyId` carries, `fifo::key_hash`) beside it, so growing or shrinking the map moves entries
//! without hashing their keys again. A watched
//! acquire inserts one entry and its release removes it: with a map that hashed each key again
//! at every resize, the resizes alone cost 200 instructions per watched acquire while 10,000
//! holds piled up (callgrind, `scripts/instructions.sh`).

use crate::core::wait::{KeyId, KeyView};
use hashbrown::hash_table::{Entry, HashTable};

pub(super) struct ByKey<V> {
    /// (the key's hash, the key, its value)
    table: HashTable<(u64, KeyId, V)>,
}

impl<V> Default for ByKey<V> {
    fn default() -> Self {
        ByKey {
            table: HashTable::new(),
        }
    }
}

/// Whether `e` is the entry of `id`.
fn is<V>(id: &dyn KeyView) -> impl Fn(&(u64, KeyId, V)) -> bool + '_ {
    move |e| e.1.db == id.db() && *e.1.key == *id.key()
}

impl<V> ByKey<V> {
    /// Already a seeded hash of the key (a `KeyId` keeps it): not hashed again.
    fn hash(&self, id: &dyn KeyView) -> u64 {
        id.key_hash()
    }

    pub(super) fn get(&self, id: &dyn KeyView) -> Option<&V> {
        self.table.find(self.hash(id), is(id)).map(|e| &e.2)
    }

    pub(super) fn get_mut(&mut self, id: &dyn KeyView) -> Option<&mut V> {
        let hash = self.hash(id);
        self.table.find_mut(hash, is(id)).map(|e| &mut e.2)
    }

    pub(super) fn contains_key(&self, id: &dyn KeyView) -> bool {
        self.get(id).is_some()
    }

    /// `id`'s value, removed; the map gives memory back once mostly empty.
    pub(super) fn remove(&mut self, id: &dyn KeyView) -> Option<V> {
        let hash = self.hash(id);
        let v = match self.table.find_entry(hash, is(id)) {
            Ok(e) => Some(e.remove().0 .2),
            Err(_) => None,
        };
        // As `fifo::shrink` does for the other maps by key.
        let (len, cap) = (self.table.len(), self.table.capacity());
        if cap > 64 && len * 4 < cap {
            self.table.shrink_to(len * 2, |e| e.0);
        }
        v
    }

    /// `id`'s value, made with `V::default()` if absent.
    pub(super) fn get_or_default(&mut self, id: &KeyId) -> &mut V
    where
        V: Default,
    {
        let hash = self.hash(id);
        match self.table.entry(hash, is(id), |e| e.0) {
            Entry::Occupied(e) => &mut e.into_mut().2,
            Entry::Vacant(e) => &mut e.insert((hash, id.clone(), V::default())).into_mut().2,
        }
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &KeyId> {
        self.table.iter().map(|e| &e.1)
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter().map(|e| &e.2)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }
}

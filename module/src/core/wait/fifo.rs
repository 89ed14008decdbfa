//! FIFO queues of waiters, one per (database, key), shared by every object type.
//!
//! Generic over the waiter handle `H` (how the skin reaches the waiter: a blocked client, a
//! session request; a number in the tests) and the request `R` (what the waiter asked for; the
//! skin stores each object's [`super::Request`]). An index from handle to key lets a timeout or a
//! disconnect remove its waiter without scanning every queue.
//!
//! Finding and removing a waiter costs O(log n) in its queue's length, not O(n): a key's
//! waiters are kept in the order they were pushed, which is the order of their serials (the
//! caller gives each push a serial larger than any before), so the index maps a handle to its
//! key and serial and a binary search finds its slot. A waiter that leaves from the middle is
//! tombstoned (its slot keeps only the serial, so the order stays searchable) instead of
//! shifting everyone behind it; tombstones are popped off either end at once and the queue is
//! compacted when they outnumber the live waiters (amortised O(1) per removal). Measured
//! before: closing a session with 40,000 requests queued on one key took 1.06 s, and queueing
//! N requests on one key was O(N^2) (each push looked its waiter up by a linear search).

use super::by_value::{ByValue, Freed, Valued};
use super::schedule::{Deadline, TimerKey};
use super::HashMap;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::rc::Rc;
use std::sync::OnceLock;

/// The bucket mask of a hash table with room for `capacity` entries (hashbrown keeps at most
/// 7/8 of its power-of-two buckets full): sorting hashes by it visits the table in order. An
/// estimate off by a factor of two still reads the table in two sequential sweeps.
pub fn bucket_mask(capacity: usize) -> u64 {
    ((capacity.max(1) * 8 / 7).next_power_of_two() as u64).wrapping_sub(1)
}

/// Give memory back after a burst: a map down to a quarter of its capacity is shrunk to twice
/// its length (amortised O(1) per removal; it keeps room to grow back).
pub fn shrink<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// The same for a queue's waiters.
fn shrink_deque<T>(q: &mut VecDeque<T>) {
    if q.capacity() > 64 && q.len() * 4 < q.capacity() {
        q.shrink_to(q.len() * 2);
    }
}

/// A queue's identity: database number and key bytes, with their hash.
///
/// The hash is computed once, when the id is made: a hand-off looks its key up in a dozen
/// maps (the queues, the undo ledger, the sessions' watched holds, the contention sketch...),
/// and hashing the key bytes at each look-up cost 1,100 of its 20,800 instructions
/// (callgrind, `scripts/budget.py`'s `lock_release_handoff`). A map then hashes only this
/// number. It is seeded once per process ([`key_hash`]), so key names chosen to collide in
/// one server do not in another.
#[derive(Debug, Clone, Eq)]
pub struct KeyId {
    pub db: i32,
    pub key: Rc<[u8]>,
    hash: u64,
}

/// The hash of a database and key bytes: what a [`KeyId`] keeps and a [`KeyView`] hashes as.
pub fn key_hash(db: i32, key: &[u8]) -> u64 {
    static SEED: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write_i32(db);
    h.write(key);
    h.finish()
}

/// The queue's ids share its key bytes (see `Queues::push`): equal pointers settle most
/// comparisons without reading the bytes.
impl PartialEq for KeyId {
    fn eq(&self, other: &KeyId) -> bool {
        self.db == other.db && (Rc::ptr_eq(&self.key, &other.key) || self.key == other.key)
    }
}

/// Hashes what `eq` compares, the database and the key bytes, through their hash.
impl Hash for KeyId {
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        state.write_u64(self.hash);
    }
}

/// By database, then key bytes (the order reports list ties in).
impl Ord for KeyId {
    fn cmp(&self, other: &KeyId) -> std::cmp::Ordering {
        (self.db, &self.key[..]).cmp(&(other.db, &other.key[..]))
    }
}

impl PartialOrd for KeyId {
    fn partial_cmp(&self, other: &KeyId) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl KeyId {
    pub fn new(db: i32, key: &[u8]) -> KeyId {
        KeyId {
            db,
            key: key.into(),
            hash: key_hash(db, key),
        }
    }
}

/// A [`KeyId`] seen without owning its bytes: a map keyed by `KeyId` is looked up with
/// `&KeyRef { db, key } as &dyn KeyView`, with no `Rc` allocated and freed for the look-up
/// (about 300 instructions: a session-watched lock's release looked its watched holds up so).
pub trait KeyView {
    fn db(&self) -> i32;
    fn key(&self) -> &[u8];
    /// [`key_hash`] of the two.
    fn key_hash(&self) -> u64;
}

/// A database and borrowed key bytes: the [`KeyView`] of a command's key.
pub struct KeyRef<'a> {
    pub db: i32,
    pub key: &'a [u8],
}

impl KeyView for KeyId {
    fn db(&self) -> i32 {
        self.db
    }
    fn key(&self) -> &[u8] {
        &self.key
    }
    fn key_hash(&self) -> u64 {
        self.hash
    }
}

impl KeyView for KeyRef<'_> {
    fn db(&self) -> i32 {
        self.db
    }
    fn key(&self) -> &[u8] {
        self.key
    }
    fn key_hash(&self) -> u64 {
        key_hash(self.db, self.key)
    }
}

impl<'a> std::borrow::Borrow<dyn KeyView + 'a> for KeyId {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

/// Hashes as `KeyId` does (through [`key_hash`]), as `Borrow` requires.
impl Hash for dyn KeyView + '_ {
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        state.write_u64(self.key_hash());
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.db() == other.db() && self.key() == other.key()
    }
}

impl Eq for dyn KeyView + '_ {}

/// One queued request.
#[derive(Debug)]
pub struct Waiter<H, R> {
    pub handle: H,
    /// Unique per queued request: a deadline acts only on the wait it was made for, even if
    /// the handle is reused by a later wait.
    pub serial: u64,
    pub req: R,
    /// When this wait ends unanswered, among the skin's wait deadlines (none for a wait
    /// without limit).
    pub deadline: Option<Deadline>,
    /// When it was queued (`ffi::clock`, microseconds): its wait time is measured from
    /// here when it is granted.
    pub queued_us: u64,
}

/// A place in a key's queue: a waiter, or the serial of one that left from the middle (a
/// tombstone keeps the serials in order for the binary search).
#[derive(Debug)]
enum Slot<H, R> {
    Live(Waiter<H, R>),
    Gone(u64),
}

impl<H, R> Slot<H, R> {
    fn serial(&self) -> u64 {
        match self {
            Slot::Live(w) => w.serial,
            Slot::Gone(s) => *s,
        }
    }

    fn live(&self) -> Option<&Waiter<H, R>> {
        match self {
            Slot::Live(w) => Some(w),
            Slot::Gone(_) => None,
        }
    }
}

/// The waiters of one key, plus the job that looks at the key again at its next lease end.
/// Its first and last slots are always live (tombstones are popped off the ends at once).
#[derive(Debug)]
pub struct KeyQueue<H, R> {
    slots: VecDeque<Slot<H, R>>,
    /// Live waiters among the slots.
    live: usize,
    pub check: Option<TimerKey>,
    /// The key was seen to expire since the last grant (for the `grants_after_expiry` counter).
    pub expired: bool,
    /// The waiters by value, when they name values (a grouped MultiLock's): only such queues
    /// pay for it.
    by_value: Option<Box<ByValue>>,
}

impl<H, R: Valued> KeyQueue<H, R> {
    /// Take the live waiter of slot `pos`, leaving a tombstone, then drop tombstones off the
    /// ends and compact when they outnumber the live waiters. Every way out of a queue but
    /// [`Queues::drain`] (which empties it) passes here: the index by value follows.
    fn take(&mut self, pos: usize) -> Option<Waiter<H, R>> {
        let serial = self.slots.get(pos)?.serial();
        let Slot::Live(waiter) = std::mem::replace(&mut self.slots[pos], Slot::Gone(serial)) else {
            return None; // already a tombstone (replaced by an identical one)
        };
        self.live -= 1;
        if let (Some(index), Some(values)) = (&mut self.by_value, waiter.req.values()) {
            index.remove(serial, values);
        }
        self.tidy();
        Some(waiter)
    }

    /// The waiters serving tries past the head of a queue whose waiters name values (see
    /// [`ByValue::candidates`]), in queue order, but for the waiter `skip` (the head, just
    /// tried); none for other queues.
    pub fn candidates(&mut self, freed: Freed, skip: Option<u64>) -> Vec<(H, R)>
    where
        H: Copy,
        R: Clone,
    {
        let Some(mut index) = self.by_value.take() else {
            return Vec::new();
        };
        let serials = index.candidates(freed, |s| self.at(self.position(s)?)?.req.values());
        self.by_value = Some(index);
        serials
            .into_iter()
            .filter(|s| Some(*s) != skip)
            .filter_map(|s| self.at(self.position(s)?))
            .map(|w| (w.handle, w.req.clone()))
            .collect()
    }

    /// Serving stopped before trying `req`: its values are looked at next time.
    pub fn untried(&mut self, req: &R) {
        if let (Some(index), Some(values)) = (&mut self.by_value, req.values()) {
            index.untried(values);
        }
    }

    /// The index by value, if the queue has one.
    pub fn by_value(&mut self) -> Option<&mut ByValue> {
        self.by_value.as_deref_mut()
    }
}

impl<H, R> KeyQueue<H, R> {
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub fn front(&self) -> Option<&Waiter<H, R>> {
        self.slots.front().and_then(Slot::live)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Waiter<H, R>> {
        self.slots.iter().filter_map(Slot::live)
    }

    /// Slots, live or not: positions from [`KeyQueue::position`] are below this. Positions
    /// keep the queue's order, so the deadlock search compares them as places in the queue.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The waiter in slot `pos`, if it is live.
    pub fn at(&self, pos: usize) -> Option<&Waiter<H, R>> {
        self.slots.get(pos).and_then(Slot::live)
    }

    /// The slot of the waiter with this serial (O(log n)). The first probe is where the
    /// serial would be if the queue's serials were evenly spread, which they nearly are when
    /// one key gets most pushes: then it is found there, without the binary search's cache
    /// misses across a long queue (closing a session of 100,000 requests on one key, server
    /// time per request: 1.9 us with the binary search alone, 0.9 us with this probe first).
    pub fn position(&self, serial: u64) -> Option<usize> {
        let (first, last) = (self.slots.front()?.serial(), self.slots.back()?.serial());
        if serial < first || serial > last {
            return None;
        }
        let span = (last - first).max(1) as u128;
        let guess = ((serial - first) as u128 * (self.slots.len() - 1) as u128 / span) as usize;
        let pos = match self.slots[guess].serial() {
            s if s == serial => guess,
            s if s < serial => self.search(guess + 1, self.slots.len(), serial)?,
            _ => self.search(0, guess, serial)?,
        };
        self.at(pos).map(|_| pos)
    }

    /// Binary search for `serial` among slots `lo..hi`.
    fn search(&self, mut lo: usize, mut hi: usize, serial: u64) -> Option<usize> {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.slots[mid].serial().cmp(&serial) {
                std::cmp::Ordering::Equal => return Some(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    fn tidy(&mut self) {
        while matches!(self.slots.front(), Some(Slot::Gone(_))) {
            self.slots.pop_front();
        }
        while matches!(self.slots.back(), Some(Slot::Gone(_))) {
            self.slots.pop_back();
        }
        if self.slots.len() - self.live > self.live {
            self.slots.retain(|s| matches!(s, Slot::Live(_)));
        }
        shrink_deque(&mut self.slots);
    }
}

#[derive(Debug)]
pub struct Queues<H: Grouped, R> {
    keys: HashMap<KeyId, KeyQueue<H, R>>,
    /// Where each waiter is: its key and its serial.
    index: Index<H>,
    /// Whether a waiter naming values (a grouped MultiLock's) was ever queued: until then no
    /// queue has an index by value, and serving skips looking for one (two look-ups of the
    /// key's queue per step, measured +234 instructions on a latch count-down with a waiter).
    valued: bool,
}

/// Where each waiter is, in a table per group of handles (see [`Grouped`]).
#[derive(Debug)]
struct Index<H: Grouped> {
    tables: HashMap<H::Group, HashMap<H, (KeyId, u64)>>,
    /// Waiters across the tables.
    total: usize,
}

impl<H: Grouped> Index<H> {
    fn insert(&mut self, handle: H, place: (KeyId, u64)) {
        let table = self.tables.entry(handle.group()).or_default();
        if table.insert(handle, place).is_none() {
            self.total += 1;
        }
    }

    fn remove(&mut self, handle: &H) -> Option<(KeyId, u64)> {
        let group = handle.group();
        let table = self.tables.get_mut(&group)?;
        let place = table.remove(handle)?;
        self.total -= 1;
        if table.is_empty() {
            self.tables.remove(&group);
        } else {
            shrink(table);
        }
        Some(place)
    }

    fn get(&self, handle: &H) -> Option<&(KeyId, u64)> {
        self.tables.get(&handle.group())?.get(handle)
    }

    fn remove_group(&mut self, group: H::Group) -> Option<HashMap<H, (KeyId, u64)>> {
        let table = self.tables.remove(&group)?;
        self.total -= table.len();
        Some(table)
    }
}

/// What a group's leaving left to do: look at the heads of the keys that still have waiters,
/// cancel the re-check jobs of the queues it emptied.
#[derive(Debug, Default)]
pub struct GroupLeft {
    pub queued: Vec<KeyId>,
    pub checks: Vec<TimerKey>,
}

/// A waiter's handle and the group it belongs to. A group's waiters can leave together (a
/// session's requests when it ends), so the index keeps a table per group: the group leaves
/// with its table, in one sweep, instead of one removal from a shared table per waiter (with
/// 100,000 requests, those removals and the sort that put them in memory order were a quarter
/// of `RSESSION.CLOSE`'s time).
pub trait Grouped: Copy + Eq + Hash {
    type Group: Copy + Eq + Hash + std::fmt::Debug;
    fn group(&self) -> Self::Group;
}

/// Plain numbers (the objects' property tests) form one group.
impl Grouped for u32 {
    type Group = ();
    fn group(&self) {}
}

impl Grouped for u64 {
    type Group = ();
    fn group(&self) {}
}

impl<H: Grouped, R> Default for Queues<H, R> {
    fn default() -> Self {
        Queues {
            keys: HashMap::default(),
            index: Index {
                tables: HashMap::default(),
                total: 0,
            },
            valued: false,
        }
    }
}

impl<H: Grouped, R: Valued> Queues<H, R> {
    /// Queue `waiter` at the tail of `id`'s queue.
    pub fn push(&mut self, id: &KeyId, waiter: Waiter<H, R>) {
        // Reuse the queue's own Rc for the index so the key bytes are stored once per key.
        let id = match self.keys.get_key_value(id) {
            Some((k, _)) => k.clone(),
            None => {
                self.keys.insert(
                    id.clone(),
                    KeyQueue {
                        // Room for one: most keys that are waited on have one waiter (a first
                        // push into an empty VecDeque reserves four, 192 B more per key).
                        slots: VecDeque::with_capacity(1),
                        live: 0,
                        check: None,
                        expired: false,
                        by_value: None,
                    },
                );
                id.clone()
            }
        };
        let queue = self.keys.get_mut(&id).expect("inserted above");
        debug_assert!(
            queue
                .slots
                .back()
                .is_none_or(|s| s.serial() < waiter.serial),
            "serials increase"
        );
        self.index.insert(waiter.handle, (id, waiter.serial));
        if let Some(values) = waiter.req.values() {
            let index = queue.by_value.get_or_insert_default();
            index.add(waiter.serial, values);
            self.valued = true;
        }
        queue.slots.push_back(Slot::Live(waiter));
        queue.live += 1;
    }

    /// The id of the queue of `key` (a borrowed name) if anyone waits there: the queue's own,
    /// sharing its key bytes, so nothing is allocated to find it (a command's release asks this
    /// of every key while anyone waits anywhere).
    pub fn queued_id(&self, key: &dyn KeyView) -> Option<KeyId> {
        let (id, queue) = self.keys.get_key_value(key)?;
        (!queue.is_empty()).then(|| id.clone())
    }

    pub fn is_queued(&self, id: &KeyId) -> bool {
        self.keys.get(id).is_some_and(|q| !q.is_empty())
    }

    pub fn get(&self, id: &KeyId) -> Option<&KeyQueue<H, R>> {
        self.keys.get(id)
    }

    pub fn get_mut(&mut self, id: &KeyId) -> Option<&mut KeyQueue<H, R>> {
        self.keys.get_mut(id)
    }

    /// [`Queues::get_mut`] by a borrowed name (no id made for the look-up).
    pub fn get_mut_view(&mut self, key: &dyn KeyView) -> Option<&mut KeyQueue<H, R>> {
        self.keys.get_mut(key)
    }

    /// The next waiter of `id`, removed from the queue.
    pub fn pop_front(&mut self, id: &KeyId) -> Option<Waiter<H, R>> {
        let queue = self.keys.get_mut(id)?;
        let waiter = queue.take(0)?;
        self.index.remove(&waiter.handle);
        Some(waiter)
    }

    /// The head of `id`'s queue, removed as serving removes it, in one look-up of the queue:
    /// with the queue's `expired` flag, taken when `granted` (the first grant since the key
    /// expired), and the request of whoever is first now. Serving looked the queue up six
    /// times per grant before (280 of a hand-off's instructions, callgrind).
    pub fn pop_head(&mut self, id: &KeyId, granted: bool) -> Option<(Waiter<H, R>, bool, Option<R>)>
    where
        R: Clone,
    {
        let queue = self.keys.get_mut(id)?;
        let waiter = queue.take(0)?;
        let expired = granted && std::mem::take(&mut queue.expired);
        let next = queue.front().map(|w| w.req.clone());
        self.index.remove(&waiter.handle);
        Some((waiter, expired, next))
    }

    /// Remove a waiter wherever it is queued (timeout, disconnect, cancel). `None` when it is
    /// not queued any more, e.g. because it was just granted.
    pub fn remove(&mut self, handle: H) -> Option<(KeyId, Waiter<H, R>)> {
        let (id, serial) = self.index.remove(&handle)?;
        let queue = self.keys.get_mut(&id)?;
        let pos = queue.position(serial)?;
        let waiter = queue.take(pos)?;
        debug_assert!(
            waiter.handle == handle,
            "the index names the waiter's serial"
        );
        Some((id, waiter))
    }

    /// Remove every waiter of `group` (a session ends), wherever each is queued, handing each
    /// to `each` in FIFO order. A queue left empty is forgotten at once (its re-check job is
    /// returned for the caller to cancel); the keys whose queues still have waiters are
    /// returned too, for a look at their new heads.
    ///
    /// Memory is read in sequence rather than at random: the group's table of the index in one
    /// sweep, then the waiters in the order they were queued, which is the order their queues'
    /// slots and requests were allocated in, each queue's entry once per run of its waiters.
    /// (Closing a session of 100,000 requests spent most of its time waiting for cache misses
    /// one by one; ordered by the table of queues instead, it was slower on 100,000 keys.) The
    /// waiters are handed on rather than gathered: a vector of 100,000 waiters cost more in
    /// page faults and copies than the rest.
    pub fn remove_group(
        &mut self,
        group: H::Group,
        mut each: impl FnMut(&KeyId, Waiter<H, R>),
    ) -> GroupLeft {
        let mut left = GroupLeft::default();
        let Some(table) = self.index.remove_group(group) else {
            return left;
        };
        let mut found: Vec<(KeyId, u64)> = table.into_values().collect();
        found.sort_unstable_by_key(|(_, serial)| *serial);
        let mut found = found.into_iter().peekable();
        while let Some((id, mut serial)) = found.next() {
            let Some(queue) = self.keys.get_mut(&id) else {
                while found.next_if(|(next, _)| *next == id).is_some() {}
                continue;
            };
            loop {
                if let Some(w) = queue.position(serial).and_then(|pos| queue.take(pos)) {
                    each(&id, w);
                }
                match found.next_if(|(next, _)| *next == id) {
                    Some((_, next)) => serial = next,
                    None => break,
                }
            }
            if queue.is_empty() {
                left.checks
                    .extend(self.keys.remove(&id).and_then(|q| q.check));
            } else {
                left.queued.push(id);
            }
        }
        shrink(&mut self.keys);
        // A key whose waiters of the group were interleaved with others' keys' has several
        // runs: name it once, and only if a later run did not empty it. (Ids of one key share
        // its queue's allocation.)
        left.queued
            .sort_unstable_by_key(|id| (Rc::as_ptr(&id.key) as *const u8, id.db));
        left.queued.dedup();
        left.queued.retain(|id| self.keys.contains_key(id));
        left
    }

    /// The key a waiter is queued on, and the waiter.
    pub fn find(&self, handle: H) -> Option<(&KeyId, &Waiter<H, R>)> {
        self.locate(handle).map(|(id, _, w)| (id, w))
    }

    /// The key a waiter is queued on, its slot there (see [`KeyQueue::slots`]), and the waiter.
    pub fn locate(&self, handle: H) -> Option<(&KeyId, usize, &Waiter<H, R>)> {
        let (id, serial) = self.index.get(&handle)?;
        let (id, queue) = self.keys.get_key_value(id)?;
        let pos = queue.position(*serial)?;
        Some((id, pos, queue.at(pos)?))
    }

    pub fn find_mut(&mut self, handle: H) -> Option<&mut Waiter<H, R>> {
        let (id, serial) = self.index.get(&handle)?;
        let queue = self.keys.get_mut(id)?;
        let pos = queue.position(*serial)?;
        match queue.slots.get_mut(pos)? {
            Slot::Live(w) => Some(w),
            Slot::Gone(_) => None,
        }
    }

    /// Drop `id`'s entry if nobody waits; returns its re-check job so the caller can cancel it.
    pub fn forget_if_idle(&mut self, id: &KeyId) -> Option<TimerKey> {
        if self.keys.get(id)?.is_empty() {
            let check = self.keys.remove(id).and_then(|q| q.check);
            shrink(&mut self.keys);
            check
        } else {
            None
        }
    }

    /// Take every waiter of `id`.
    pub fn drain(&mut self, id: &KeyId) -> Vec<Waiter<H, R>> {
        let Some(queue) = self.keys.get_mut(id) else {
            return Vec::new();
        };
        queue.live = 0;
        queue.by_value = None;
        let waiters: Vec<_> = queue
            .slots
            .drain(..)
            .filter_map(|s| match s {
                Slot::Live(w) => Some(w),
                Slot::Gone(_) => None,
            })
            .collect();
        shrink_deque(&mut queue.slots);
        for w in &waiters {
            self.index.remove(&w.handle);
        }
        waiters
    }

    /// Whether any queue may have an index by value (a waiter naming values was ever queued).
    pub fn may_be_valued(&self) -> bool {
        self.valued
    }

    /// Whether a waiter on `id` wants one of `values` (O(values)).
    pub fn wants_any(&self, id: &KeyId, values: &[&[u8]]) -> bool {
        self.keys
            .get(id)
            .and_then(|q| q.by_value.as_deref())
            .is_some_and(|index| index.wants_any(values))
    }

    /// A command freed `values` of `id`'s object (see [`ByValue::freed`]).
    pub fn freed<'v>(&mut self, id: &KeyId, values: impl IntoIterator<Item = &'v [u8]>) {
        if let Some(index) = self.keys.get_mut(id).and_then(|q| q.by_value()) {
            index.freed(values);
        }
    }

    /// A hold of `id`'s object was taken outside serving, ending no sooner than `at` (see
    /// [`ByValue::lowered`]).
    pub fn taken(&mut self, id: &KeyId, at: i64) {
        if let Some(index) = self.keys.get_mut(id).and_then(|q| q.by_value()) {
            index.lowered(at);
        }
    }

    /// `id`'s object may have changed in any way (see [`ByValue::all`]).
    pub fn changed(&mut self, id: &KeyId) {
        if let Some(index) = self.keys.get_mut(id).and_then(|q| q.by_value()) {
            index.all();
        }
    }

    pub fn len(&self, id: &KeyId) -> usize {
        self.keys.get(id).map_or(0, |q| q.live)
    }

    /// Keys with a queue (possibly idle, until forgotten).
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Keys with waiters in database `db`, or in every database when `db` is `None`.
    pub fn ids(&self, db: Option<i32>) -> Vec<KeyId> {
        self.keys
            .keys()
            .filter(|id| db.is_none_or(|d| id.db == d))
            .cloned()
            .collect()
    }

    /// Every queued waiter's handle.
    pub fn handles(&self) -> impl Iterator<Item = H> + '_ {
        self.index
            .tables
            .values()
            .flat_map(|table| table.keys().copied())
    }

    /// Waiters queued across all keys.
    pub fn total(&self) -> usize {
        self.index.total
    }

    /// The handles queued on `id`, head first (the objects' property tests compare them with
    /// their models).
    #[cfg(test)]
    pub fn queued(&self, id: &KeyId) -> Vec<H> {
        self.get(id)
            .map_or_else(Vec::new, |q| q.iter().map(|w| w.handle).collect())
    }
}

#[cfg(test)]
mod fifo_tests;

/// A group leaves the queues at once, and only that group (sessions end this way).
#[cfg(test)]
mod group_tests;

/// Property tests: `Queues` against a plain model (a list of per-key FIFO lists) under random
/// push / pop / remove / drain / forget sequences over a few keys in two databases.
#[cfg(test)]
mod fifo_prop_tests;

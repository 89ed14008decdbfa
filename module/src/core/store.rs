//! What an object's rules may read: the keys of one object (its main key and the auxiliary keys
//! named from it), through a read-only trait. The module implements it over Redis' key API; the
//! tests implement it over an in-memory model (`core::mem`). Reads are lazy: a rule reads only
//! what its decision needs, so the uncontended path stays a couple of key lookups.

/// Which key of the object a read or write is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// The key named in the command (argv[1]), or the key a waiter queues on.
    Main,
    /// An auxiliary key (fencing token, rwlock hold timeouts, the semaphore's timeout set),
    /// already named by Redisson's rules (`core::names`).
    Aux(Vec<u8>),
}

/// The type of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Empty,
    Hash,
    String,
    ZSet,
    Other,
}

/// A hash field or string read as an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int {
    Absent,
    /// Present, but not an integer.
    NotInt,
    Is(i64),
}

impl Int {
    pub fn from_bytes(bytes: Option<&[u8]>) -> Int {
        match bytes {
            None => Int::Absent,
            Some(b) => super::args::parse_i64(b).map_or(Int::NotInt, Int::Is),
        }
    }
}

pub trait Store {
    /// The server's clock in ms.
    fn now(&self) -> i64;
    /// The main key's name (auxiliary keys and channels are named from it).
    fn key_name(&self) -> &[u8];
    fn kind(&self, key: &Target) -> KeyType;
    /// A hash field as an integer (`Absent` also for a missing key).
    fn hget_int(&self, key: &Target, field: &[u8]) -> Int;
    fn hget(&self, key: &Target, field: &[u8]) -> Option<Vec<u8>>;
    /// Every field and value of a hash: O(fields), for objects whose state is the whole hash.
    fn hgetall(&self, key: &Target) -> Vec<(Vec<u8>, Vec<u8>)>;
    /// The fields of a hash with their values until `f` returns false, in the hash's own
    /// order: a rule that stops at the first field it needs reads O(1) of a large hash (a write
    /// attempt on a read lock with thousands of readers stops at the first live one).
    fn hvisit(&self, key: &Target, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for (field, value) in self.hgetall(key) {
            if !f(&field, &value) {
                break;
            }
        }
    }
    /// Fields of a hash (0 when absent or not a hash), without reading them.
    fn hlen(&self, key: &Target) -> usize;
    /// Some field of a hash and its value, without reading the others (Redisson's lock hash has
    /// one field: its owner).
    fn hfirst(&self, key: &Target) -> Option<(Vec<u8>, Vec<u8>)>;
    /// A string key as an integer.
    fn get_int(&self, key: &Target) -> Int;
    /// Absolute expiry time in ms; `None` without one or for a missing key.
    fn expire_at(&self, key: &Target) -> Option<i64>;
    /// A sorted-set member's score (`None` when absent, or the key is not a sorted set).
    fn zscore(&self, key: &Target, member: &[u8]) -> Option<f64>;
    /// Up to `limit` members with a score of at most `max`, lowest score first (as
    /// `ZRANGEBYSCORE key -inf max WITHSCORES LIMIT 0 limit`); empty for a key that is not a
    /// sorted set.
    fn zrange(&self, key: &Target, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)>;
    /// Members of a sorted set (0 when absent or not a sorted set).
    fn zcard(&self, key: &Target) -> usize;
    /// 16 random bytes (the semaphore's permit ids), from the server's generator.
    fn random_id(&self) -> [u8; 16];
}

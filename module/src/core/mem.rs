//! An in-memory model of the keys of one database, for the tests: implements [`Store`] (with
//! lazy expiry, as Redis) and [`ObjectKeys`] (applying decisions as Redis would apply the native
//! commands they stand for). Test-only.

use super::decision::{count_message, Decision, Reply, Write};
use super::error::CmdError;
use super::store::{Int, KeyType, Store, Target};
use super::wait::ObjectKeys;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Str(Vec<u8>),
    ZSet(BTreeMap<Vec<u8>, f64>),
}

#[derive(Debug, Clone)]
pub struct Mem {
    pub now: i64,
    /// The key `Target::Main` stands for.
    pub main: Vec<u8>,
    keys: HashMap<Vec<u8>, (Value, Option<i64>)>,
    pub published: Vec<(Vec<u8>, i64)>,
    /// Ids handed out by `random_id`: a counter, so tests are deterministic.
    ids: Cell<u64>,
}

impl Mem {
    pub fn new(main: &[u8]) -> Mem {
        Mem {
            now: 1_000_000,
            main: main.to_vec(),
            keys: HashMap::new(),
            published: Vec::new(),
            ids: Cell::new(0),
        }
    }

    fn name(&self, key: &Target) -> Vec<u8> {
        match key {
            Target::Main => self.main.clone(),
            Target::Aux(k) => k.clone(),
        }
    }

    fn live(&self, key: &[u8]) -> Option<&(Value, Option<i64>)> {
        self.keys
            .get(key)
            .filter(|(_, at)| at.is_none_or(|at| at > self.now))
    }

    /// Drop keys whose time has passed (what Redis' lazy and active expiry do).
    pub fn expire(&mut self) {
        let now = self.now;
        self.keys.retain(|_, (_, at)| at.is_none_or(|at| at > now));
    }

    pub fn exists(&self, key: &[u8]) -> bool {
        self.live(key).is_some()
    }

    pub fn ttl(&self, key: &[u8]) -> Option<i64> {
        self.live(key)?.1.map(|at| at - self.now)
    }

    /// Every live key with its value and expiry time, in name order.
    pub fn snapshot(&self) -> BTreeMap<Vec<u8>, (Value, Option<i64>)> {
        self.keys
            .iter()
            .filter(|(_, (_, at))| at.is_none_or(|at| at > self.now))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    pub fn hash(&self, key: &[u8]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        match self.live(key) {
            Some((Value::Hash(h), _)) => h.clone(),
            _ => BTreeMap::new(),
        }
    }

    /// A sorted set's members and scores (empty when absent).
    pub fn zset(&self, key: &[u8]) -> BTreeMap<Vec<u8>, f64> {
        match self.live(key) {
            Some((Value::ZSet(z), _)) => z.clone(),
            _ => BTreeMap::new(),
        }
    }

    pub fn zadd(&mut self, key: &[u8], member: &[u8], score: f64) {
        self.expire();
        let entry = self
            .keys
            .entry(key.to_vec())
            .or_insert_with(|| (Value::ZSet(BTreeMap::new()), None));
        if let Value::ZSet(z) = &mut entry.0 {
            z.insert(member.to_vec(), score);
        }
    }

    pub fn set_str(&mut self, key: &[u8], value: &[u8]) {
        self.keys
            .insert(key.to_vec(), (Value::Str(value.to_vec()), None));
    }

    pub fn hset(&mut self, key: &[u8], field: &[u8], value: &[u8]) {
        self.expire();
        let entry = self
            .keys
            .entry(key.to_vec())
            .or_insert_with(|| (Value::Hash(BTreeMap::new()), None));
        if let Value::Hash(h) = &mut entry.0 {
            h.insert(field.to_vec(), value.to_vec());
        }
    }

    pub fn del(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    pub fn set_expire(&mut self, key: &[u8], at: i64) {
        if let Some(e) = self.keys.get_mut(key) {
            e.1 = Some(at);
        }
    }

    /// Apply and return the resolved reply; panics on error.
    pub fn apply_ok(&mut self, d: &Decision) -> Reply {
        let token = self.write_serving(d).expect("decision applies");
        super::wait::grant::with_token(d.reply.clone().unwrap_or_default(), token)
    }
}

impl Store for Mem {
    fn now(&self) -> i64 {
        self.now
    }

    fn key_name(&self) -> &[u8] {
        &self.main
    }

    fn kind(&self, key: &Target) -> KeyType {
        match self.live(&self.name(key)) {
            None => KeyType::Empty,
            Some((Value::Hash(_), _)) => KeyType::Hash,
            Some((Value::Str(_), _)) => KeyType::String,
            Some((Value::ZSet(_), _)) => KeyType::ZSet,
        }
    }

    fn hget_int(&self, key: &Target, field: &[u8]) -> Int {
        Int::from_bytes(self.hget(key, field).as_deref())
    }

    fn hget(&self, key: &Target, field: &[u8]) -> Option<Vec<u8>> {
        match self.live(&self.name(key)) {
            Some((Value::Hash(h), _)) => h.get(field).cloned(),
            _ => None,
        }
    }

    fn hgetall(&self, key: &Target) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.hash(&self.name(key)).into_iter().collect()
    }

    fn hfirst(&self, key: &Target) -> Option<(Vec<u8>, Vec<u8>)> {
        self.hash(&self.name(key)).into_iter().next()
    }

    fn get_int(&self, key: &Target) -> Int {
        match self.live(&self.name(key)) {
            Some((Value::Str(s), _)) => Int::from_bytes(Some(s)),
            _ => Int::Absent,
        }
    }

    fn expire_at(&self, key: &Target) -> Option<i64> {
        self.live(&self.name(key))?.1
    }

    fn zscore(&self, key: &Target, member: &[u8]) -> Option<f64> {
        self.zset(&self.name(key)).get(member).copied()
    }

    fn hlen(&self, key: &Target) -> usize {
        self.hash(&self.name(key)).len()
    }

    fn zcard(&self, key: &Target) -> usize {
        self.zset(&self.name(key)).len()
    }

    fn zrange(&self, key: &Target, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        let mut all: Vec<(Vec<u8>, f64)> = self
            .zset(&self.name(key))
            .into_iter()
            .filter(|(_, s)| *s <= max)
            .collect();
        // Redis orders by score, then member.
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(limit);
        all
    }

    fn random_id(&self) -> [u8; 16] {
        let n = self.ids.get() + 1;
        self.ids.set(n);
        let mut id = [0xa5; 16];
        id[8..].copy_from_slice(&n.to_be_bytes());
        id
    }
}

impl ObjectKeys for Mem {
    fn store(&self) -> &dyn Store {
        self
    }

    fn write_serving(&mut self, d: &Decision) -> Result<Option<i64>, CmdError> {
        self.expire();
        let mut token = None;
        for w in &d.writes {
            match w {
                Write::NextToken { key } => {
                    let name = self.name(key);
                    let n = match self.live(&name) {
                        None => 0,
                        Some((Value::Str(s), _)) => {
                            super::args::parse_i64(s).ok_or(CmdError::CorruptToken)?
                        }
                        Some(_) => return Err(CmdError::WrongType),
                    };
                    let n =
                        super::fencing::next_token(n, self.now).ok_or(CmdError::CorruptToken)?;
                    let at = self.live(&name).and_then(|e| e.1);
                    self.keys
                        .insert(name, (Value::Str(n.to_string().into_bytes()), at));
                    token = Some(n);
                }
                Write::HSetInt { key, field, value } => {
                    self.hset(&self.name(key), field, value.to_string().as_bytes())
                }
                Write::HSet { key, field, value } => self.hset(&self.name(key), field, value),
                Write::HDel { key, field } => {
                    let name = self.name(key);
                    if let Some((Value::Hash(h), _)) = self.keys.get_mut(&name) {
                        h.remove(field.as_ref());
                        if h.is_empty() {
                            self.keys.remove(&name);
                        }
                    }
                }
                Write::Del { key } => self.del(&self.name(key)),
                Write::SetInt { key, value } => {
                    let name = self.name(key);
                    self.keys
                        .insert(name, (Value::Str(value.to_string().into_bytes()), None));
                }
                Write::PExpireAt { key, at } => self.set_expire(&self.name(key), *at),
                Write::Publish { channel, message } => {
                    self.published.push((channel.clone(), *message))
                }
                Write::PublishOn { prefix, message } => {
                    let channel = super::names::prefixed(prefix, &self.main);
                    self.published.push((channel, *message))
                }
                Write::IncrBy { key, by } => {
                    let name = self.name(key);
                    let (n, at) = match self.live(&name) {
                        None => (0, None),
                        Some((Value::Str(s), at)) => {
                            (super::args::parse_i64(s).ok_or(CmdError::WrongType)?, *at)
                        }
                        Some(_) => return Err(CmdError::WrongType),
                    };
                    let n = n.checked_add(*by).ok_or(CmdError::PermitsOverflow)?;
                    self.keys
                        .insert(name, (Value::Str(n.to_string().into_bytes()), at));
                }
                Write::ZAdd { key, member, score } => {
                    self.zadd(&self.name(key), member, *score as f64)
                }
                Write::ZRem { key, member } => {
                    let name = self.name(key);
                    if let Some((Value::ZSet(z), _)) = self.keys.get_mut(&name) {
                        z.remove(member);
                        if z.is_empty() {
                            self.keys.remove(&name);
                        }
                    }
                }
                Write::PublishCount {
                    channel,
                    key,
                    positive_only,
                } => {
                    if let Some(n) = count_message(self.get_int(key), *positive_only) {
                        self.published.push((channel.clone(), n));
                    }
                }
            }
        }
        Ok(token)
    }
}

use super::rules::*;
use super::*;
use crate::core::args::{self};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::mem::{Mem, Value};
use crate::core::names;
use proptest::prelude::*;
use std::collections::BTreeMap;

const NAME: &[u8] = b"rw";
const CHANNEL: &[u8] = b"redisson_rwlock:{rw}";

/// The few Redis commands the scripts use, on live keys only (lazy expiry).
#[derive(Debug, Clone, Default)]
struct Redis {
    now: i64,
    keys: BTreeMap<Vec<u8>, (Value, Option<i64>)>,
    published: Vec<(Vec<u8>, i64)>,
}

impl Redis {
    fn expire(&mut self) {
        let now = self.now;
        self.keys.retain(|_, (_, at)| at.is_none_or(|at| at > now));
    }
    fn hash(&self) -> Option<&BTreeMap<Vec<u8>, Vec<u8>>> {
        match self.keys.get(NAME) {
            Some((Value::Hash(h), _)) => Some(h),
            _ => None,
        }
    }
    fn hget(&self, field: &[u8]) -> Option<Vec<u8>> {
        self.hash()?.get(field).cloned()
    }
    fn hexists(&self, field: &[u8]) -> bool {
        self.hget(field).is_some()
    }
    fn hlen(&self) -> usize {
        self.hash().map_or(0, |h| h.len())
    }
    fn hset(&mut self, field: &[u8], value: &[u8]) {
        let e = self
            .keys
            .entry(NAME.to_vec())
            .or_insert_with(|| (Value::Hash(BTreeMap::new()), None));
        if let Value::Hash(h) = &mut e.0 {
            h.insert(field.to_vec(), value.to_vec());
        }
    }
    fn hincrby(&mut self, field: &[u8], by: i64) -> i64 {
        let n = self
            .hget(field)
            .and_then(|v| args::parse_i64(&v))
            .unwrap_or(0)
            + by;
        self.hset(field, n.to_string().as_bytes());
        n
    }
    fn hdel(&mut self, field: &[u8]) {
        if let Some((Value::Hash(h), _)) = self.keys.get_mut(NAME) {
            h.remove(field);
            if h.is_empty() {
                self.keys.remove(NAME);
            }
        }
    }
    fn set(&mut self, key: &[u8]) {
        self.keys
            .insert(key.to_vec(), (Value::Str(b"1".to_vec()), None));
    }
    fn del(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }
    fn pexpire(&mut self, key: &[u8], ms: i64) {
        let at = self.now + ms;
        if let Some(e) = self.keys.get_mut(key) {
            e.1 = Some(at);
        }
    }
    fn pttl(&self, key: &[u8]) -> i64 {
        match self.keys.get(key) {
            None => -2,
            Some((_, None)) => -1,
            Some((_, Some(at))) => at - self.now,
        }
    }
    fn publish(&mut self, message: i64) {
        self.published.push((CHANNEL.to_vec(), message));
    }
}

fn hold(owner: &[u8], k: i64) -> Vec<u8> {
    names::rwlock_hold(NAME, owner, k)
}

fn write_field(owner: &[u8]) -> Vec<u8> {
    [owner, b":write"].concat()
}

/// The largest PTTL of every hold key the hash's fields count, as the read unlock script
/// computes it (`-3` when there is none; the `mode` field is skipped by `tonumber`, the
/// writer's field counts keys that never exist).
fn max_remain(r: &Redis) -> i64 {
    let mut max = -3;
    for (field, value) in r.hash().cloned().unwrap_or_default() {
        if let Some(counter) = args::parse_i64(&value) {
            for i in (1..=counter).rev() {
                max = max.max(r.pttl(&hold(&field, i)));
            }
        }
    }
    max
}

/// `RedissonReadLock.tryLockInnerAsync`: granted or not.
fn read_acquire(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
    let mode = r.hget(b"mode");
    if mode.is_none() {
        r.hset(b"mode", b"read");
        r.hset(owner, b"1");
        r.set(&hold(owner, 1));
        r.pexpire(&hold(owner, 1), lease);
        r.pexpire(NAME, lease);
        return true;
    }
    let mode = mode.unwrap();
    if mode == b"read" || (mode == b"write" && r.hexists(&write_field(owner))) {
        let ind = r.hincrby(owner, 1);
        let key = hold(owner, ind);
        r.set(&key);
        r.pexpire(&key, lease);
        let remain = r.pttl(NAME);
        r.pexpire(NAME, remain.max(lease));
        return true;
    }
    false
}

/// `RedissonWriteLock.tryLockInnerAsync`: granted or not.
fn write_acquire(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
    let field = write_field(owner);
    if r.hget(b"mode").as_deref() == Some(b"read") {
        // DIFFERS: readers whose holds all expired hold nothing; unless another owner
        // reads, a writer clears them first, and when none is left the lock is free
        // (published as a read release would). Redisson waits for the hash to expire.
        let others_read = r.hash().cloned().unwrap_or_default().iter().any(|(f, v)| {
            f.as_slice() != b"mode"
                && f.as_slice() != owner
                && !f.ends_with(b":write")
                && args::parse_i64(v).is_some_and(|n| (1..=n).any(|k| r.pttl(&hold(f, k)) > 0))
        });
        if others_read {
            return false;
        }
        let readers: Vec<(Vec<u8>, Vec<u8>)> = r
            .hash()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|(f, _)| f.as_slice() != b"mode")
            .collect();
        let mut live = 0;
        for (f, v) in readers {
            let n = args::parse_i64(&v).unwrap_or(0);
            if (1..=n).any(|k| r.pttl(&hold(&f, k)) > 0) {
                live += 1;
            } else {
                r.hdel(&f);
            }
        }
        if live > 0 {
            // The owner's own live read holds: an upgrade, never granted.
            return false;
        }
        r.del(NAME);
        r.publish(0);
    }
    let mode = r.hget(b"mode");
    if mode.is_none() {
        r.hset(b"mode", b"write");
        r.hset(&field, b"1");
        r.pexpire(NAME, lease);
        return true;
    }
    if mode.as_deref() == Some(b"write") && r.hexists(&field) {
        r.hincrby(&field, 1);
        let current = r.pttl(NAME);
        // DIFFERS: the larger of the two; Redisson adds them (`currentExpire + ARGV[1]`).
        r.pexpire(NAME, current.max(lease));
        return true;
    }
    false
}

/// `RedissonReadLock.unlockInnerAsync` (without the unlock latch): released or not.
fn read_release(r: &mut Redis, owner: &[u8]) -> bool {
    let Some(mode) = r.hget(b"mode") else {
        // DIFFERS: Redisson publishes `0` here as well (its caller then throws).
        return false;
    };
    if !r.hexists(owner) {
        return false;
    }
    let counter = r.hincrby(owner, -1);
    if counter == 0 {
        r.hdel(owner);
    }
    r.del(&hold(owner, counter + 1));
    if r.hlen() > 1 {
        let max = max_remain(r);
        if mode == b"write" {
            // DIFFERS: the writer's lease is the hash's TTL, which no read release cuts;
            // Redisson sets it to the writer's longest read hold when one lives.
            return true;
        }
        if max > 0 {
            r.pexpire(NAME, max);
            return true;
        }
    }
    r.del(NAME);
    r.publish(0);
    true
}

/// `RedissonWriteLock.unlockInnerAsync` (without the unlock latch): released or not.
fn write_release(r: &mut Redis, owner: &[u8]) -> bool {
    let field = write_field(owner);
    // DIFFERS: no publish on an absent lock (as for the read release).
    if r.hget(b"mode").as_deref() != Some(b"write") || !r.hexists(&field) {
        return false;
    }
    let counter = r.hincrby(&field, -1);
    if counter > 0 {
        // DIFFERS: the lease stays; Redisson resets it to its watchdog timeout.
        return true;
    }
    r.hdel(&field);
    if r.hlen() == 1 {
        r.del(NAME);
        r.publish(1);
    } else {
        r.hset(b"mode", b"read");
        // DIFFERS: the read lock left lasts as long as its longest hold (Redisson keeps
        // the write lease), and is freed at once when none of them lives.
        let max = max_remain(r);
        if max > 0 {
            r.pexpire(NAME, max);
        } else {
            r.del(NAME);
            r.publish(1);
        }
    }
    true
}

/// The watchdog's renewal (`ReadLockTask` for read holds, `LockTask` for the write hold):
/// renewed or not.
fn renew(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
    if r.hget(b"mode").is_none() {
        return false;
    }
    let reads = r.hget(owner).and_then(|v| args::parse_i64(&v)).unwrap_or(0);
    let writes = r
        .hget(&write_field(owner))
        .and_then(|v| args::parse_i64(&v))
        .unwrap_or(0);
    let live: Vec<i64> = (1..=reads)
        .filter(|&k| r.pttl(&hold(owner, k)) > 0)
        .collect();
    // DIFFERS: only live holds count (Redisson renews the hash while the field is
    // there, holds expired or not).
    if live.is_empty() && writes <= 0 {
        return false;
    }
    for c in (1..=reads).rev() {
        r.pexpire(&hold(owner, c), lease);
    }
    // DIFFERS: the hash lasts as long as the longest hold of anyone (and the renewed
    // write lease); Redisson sets it to `lease`, cutting longer holds of other readers.
    let longest = max_remain(r).max(if writes > 0 { lease } else { -3 });
    r.pexpire(NAME, longest);
    true
}

#[derive(Debug, Clone)]
enum Op {
    Read { o: u8, lease: i64 },
    Write { o: u8, lease: i64 },
    ReleaseRead { o: u8 },
    ReleaseWrite { o: u8 },
    Renew { o: u8, lease: i64 },
    Tick { ms: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let lease = || prop_oneof![1i64..20, 20i64..400];
    prop_oneof![
        6 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Read { o, lease }),
        2 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Write { o, lease }),
        5 => (0u8..3).prop_map(|o| Op::ReleaseRead { o }),
        2 => (0u8..3).prop_map(|o| Op::ReleaseWrite { o }),
        2 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Renew { o, lease }),
        4 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
    ]
}

fn who(o: u8) -> Vec<u8> {
    vec![b'a' + o]
}

/// The module's answer to `op`: whether it took, released or renewed anything.
fn module_step(m: &mut Mem, op: &Op) -> bool {
    let acquire_now = |m: &mut Mem, owner: &[u8], mode: Mode, lease: i64| {
        let mut r = acquire(m, owner, mode, lease, false, false);
        if r == Ok(Acquire::TidyFirst) {
            let t = tidy(m).unwrap();
            m.apply_ok(&t);
            r = acquire(m, owner, mode, lease, false, true);
        }
        match r {
            Ok(Acquire::Grant(d, _)) => {
                m.apply_ok(&d);
                true
            }
            Ok(_) | Err(CmdError::Deadlock(_)) => false,
            Err(e) => panic!("{e}"),
        }
    };
    let give = |m: &mut Mem, owner: &[u8], mode: Mode| match release(m, owner, mode) {
        Ok((d, _)) => {
            m.apply_ok(&d);
            true
        }
        Err(CmdError::NotOwner) => false,
        Err(e) => panic!("{e}"),
    };
    match *op {
        Op::Read { o, lease } => acquire_now(m, &who(o), Mode::Read, lease),
        Op::Write { o, lease } => acquire_now(m, &who(o), Mode::Write, lease),
        Op::ReleaseRead { o } => give(m, &who(o), Mode::Read),
        Op::ReleaseWrite { o } => give(m, &who(o), Mode::Write),
        Op::Renew { o, lease } => {
            let d = super::renew(m, &who(o), lease).unwrap();
            m.apply_ok(&d);
            d.reply != Some(Reply::Int(0))
        }
        Op::Tick { ms } => {
            m.now += ms;
            m.expire();
            true
        }
    }
}

fn model_step(r: &mut Redis, op: &Op) -> bool {
    match *op {
        Op::Read { o, lease } => read_acquire(r, &who(o), lease),
        Op::Write { o, lease } => write_acquire(r, &who(o), lease),
        Op::ReleaseRead { o } => read_release(r, &who(o)),
        Op::ReleaseWrite { o } => write_release(r, &who(o)),
        Op::Renew { o, lease } => renew(r, &who(o), lease),
        Op::Tick { ms } => {
            r.now += ms;
            r.expire();
            true
        }
    }
}

/// The rule Redisson's read unlock keeps, stated on its own: a lock lives exactly while
/// some hold of it does, and a read lock's hash ends with its longest hold.
fn check_rule(m: &Mem) {
    let keys = m.snapshot();
    let read_holds: Vec<i64> = keys
        .iter()
        .filter(|(k, _)| k.starts_with(b"{rw}:"))
        .map(|(_, (_, at))| at.expect("every hold has a lease"))
        .collect();
    match keys.get(NAME) {
        None => assert!(
            read_holds.is_empty(),
            "hold keys outlive the lock: {keys:?}"
        ),
        Some((Value::Hash(h), at)) => {
            let at = at.expect("the lock has a lease");
            match h.get(b"mode".as_slice()).map(Vec::as_slice) {
                Some(b"read") => assert_eq!(
                    Some(at),
                    read_holds.iter().copied().max(),
                    "a read lock ends with its longest hold: {keys:?}"
                ),
                Some(b"write") => assert!(
                    read_holds.iter().all(|&e| e <= at),
                    "the write lease covers the writer's read holds: {keys:?}"
                ),
                other => panic!("mode {other:?}"),
            }
        }
        Some(other) => panic!("{other:?}"),
    }
}

proptest! {
    // 2,000 cases take about a second; `make fuzz` sets PROPTEST_CASES for more.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000)
    ))]
    #[test]
    fn release_renew_and_expiry_follow_redissons_scripts(ops in prop::collection::vec(op(), 1..80)) {
        let mut m = Mem::new(NAME);
        let mut r = Redis { now: m.now, ..Redis::default() };
        for (i, op) in ops.iter().enumerate() {
            let took = module_step(&mut m, op);
            let expected = model_step(&mut r, op);
            prop_assert_eq!(took, expected, "step {} {:?}", i, op);
            prop_assert_eq!(&m.snapshot(), &r.keys, "step {} {:?}", i, op);
            prop_assert_eq!(&m.published, &r.published, "step {} {:?}", i, op);
            check_rule(&m);
        }
    }
}

/// The issue's two reproductions, in the rules alone.
#[test]
fn a_release_sets_the_hash_to_the_longest_hold_left() {
    let mut m = Mem::new(NAME);
    let take = |m: &mut Mem, o: &[u8], lease| {
        let Ok(Acquire::Grant(d, _)) = acquire(m, o, Mode::Read, lease, false, false) else {
            panic!()
        };
        m.apply_ok(&d);
    };
    take(&mut m, b"A", 3_000);
    take(&mut m, b"B", 30_000);
    assert_eq!(m.ttl(NAME), Some(30_000));
    let (d, _) = release(&m, b"B", Mode::Read).unwrap();
    m.apply_ok(&d);
    assert_eq!(m.ttl(NAME), Some(3_000), "A's lease");
    // Re-entrant holds: releasing the live one of two, the other expired, frees the lock.
    let mut m = Mem::new(NAME);
    take(&mut m, b"r", 100);
    take(&mut m, b"r", 3_000);
    m.now += 400;
    m.expire();
    let (d, released) = release(&m, b"r", Mode::Read).unwrap();
    assert_eq!(
        released,
        Released {
            last: true,
            freed: true
        }
    );
    assert_eq!(m.apply_ok(&d), Reply::Int(0));
    assert!(!m.exists(NAME));
    assert_eq!(m.published, vec![(CHANNEL.to_vec(), 0)]);
}

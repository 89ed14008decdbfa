//! The read-write lock protocols under comparison, behind one trait:
//!
//! - `rrwlock`: the native `RRWLOCK.*` commands, waiting on the server (`BLOCK`).
//! - `redisson`: Redisson's `RReadWriteLock` as Redisson sends it today: its exact read and
//!   write acquire and unlock scripts (reference `redisson.md` §2.5) via EVALSHA, the unlock
//!   latch DEL the client sends after an unlock, and its wait loop on the shared channel
//!   `redisson_rwlock:{name}` ([`redisson_wait`]).
//!
//! The scripts are here rather than in `rlock_tests::redisson` because only the benchmark uses
//! them so far; they belong there once the interop tests need them too.

use crate::protocols::{block_ms, connection, owner, RedissonConn};
use redis::{Connection, Value};
use rlock_tests::prefix_name;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    pub fn word(self) -> &'static str {
        match self {
            Mode::Read => "READ",
            Mode::Write => "WRITE",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwKind {
    Rrwlock,
    Redisson,
}

impl RwKind {
    pub fn name(self) -> &'static str {
        match self {
            RwKind::Rrwlock => "rrwlock",
            RwKind::Redisson => "redisson",
        }
    }
}

pub trait RwProtocol: Send {
    /// Take `key` in `mode`, waiting at most `wait` (`None`: until acquired).
    fn acquire(&mut self, key: &str, mode: Mode, lease_ms: i64, wait: Option<Duration>) -> bool;
    fn release(&mut self, key: &str, mode: Mode);
}

/// `RedissonReadLock.tryLockInnerAsync`.
/// KEYS = [name, `{name}:owner:rwlock_timeout`]; ARGV = [lease, owner, `owner:write`].
const READ_ACQUIRE: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
    redis.call('hset', KEYS[1], 'mode', 'read'); \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('set', KEYS[2] .. ':1', 1); \
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then \
    local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    local key = KEYS[2] .. ':' .. ind; \
    redis.call('set', key, 1); \
    redis.call('pexpire', key, ARGV[1]); \
    local remainTime = redis.call('pttl', KEYS[1]); \
    redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// `RedissonReadLock.unlockInnerAsync`.
/// KEYS = [name, channel, timeout prefix, key prefix `{name}`, unlock latch];
/// ARGV = [0, owner, publish command, latch TTL].
const READ_UNLOCK: &str = "local val = redis.call('get', KEYS[5]); \
    if val ~= false then \
    return tonumber(val); \
    end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
    return nil; \
    end; \
    local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); \
    if (lockExists == 0) then \
    return nil; \
    end; \
    local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); \
    if (counter == 0) then \
    redis.call('hdel', KEYS[1], ARGV[2]); \
    end; \
    redis.call('del', KEYS[3] .. ':' .. (counter+1)); \
    if (redis.call('hlen', KEYS[1]) > 1) then \
    local maxRemainTime = -3; \
    local keys = redis.call('hkeys', KEYS[1]); \
    for n, key in ipairs(keys) do \
    counter = tonumber(redis.call('hget', KEYS[1], key)); \
    if type(counter) == 'number' then \
    for i=counter, 1, -1 do \
    local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); \
    maxRemainTime = math.max(remainTime, maxRemainTime); \
    end; \
    end; \
    end; \
    if maxRemainTime > 0 then \
    redis.call('pexpire', KEYS[1], maxRemainTime); \
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
    return 0; \
    end; \
    if mode == 'write' then \
    redis.call('set', KEYS[5], 0, 'px', ARGV[4]); \
    return 0; \
    end; \
    end; \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[3], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]); \
    return 1;";

/// `RedissonWriteLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease, `owner:write`].
const WRITE_ACQUIRE: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
    redis.call('hset', KEYS[1], 'mode', 'write'); \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    if (mode == 'write') then \
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    local currentExpire = redis.call('pttl', KEYS[1]); \
    redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); \
    return nil; \
    end; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// `RedissonWriteLock.unlockInnerAsync`. KEYS = [name, channel, unlock latch];
/// ARGV = [1, internalLockLeaseTime, `owner:write`, publish command, latch TTL].
const WRITE_UNLOCK: &str = "local val = redis.call('get', KEYS[3]); \
    if val ~= false then \
    return tonumber(val); \
    end; \
    local mode = redis.call('hget', KEYS[1], 'mode'); \
    if (mode == false) then \
    redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return nil; \
    end; \
    if (mode == 'write') then \
    local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); \
    if (lockExists == 0) then \
    return nil; \
    else \
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
    if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
    return 0; \
    else \
    redis.call('hdel', KEYS[1], ARGV[3]); \
    if (redis.call('hlen', KEYS[1]) == 1) then \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    else \
    redis.call('hset', KEYS[1], 'mode', 'read'); \
    end; \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return 1; \
    end; \
    end; \
    end; \
    return nil;";

/// Redisson's default lease with the watchdog (`internalLockLeaseTime`) and latch TTL.
const INTERNAL_LEASE_MS: i64 = 30_000;
const LATCH_TTL_MS: i64 = 18_000;

/// The four scripts, loaded once per server.
#[derive(Clone)]
pub struct RwShas {
    read_acquire: String,
    read_unlock: String,
    write_acquire: String,
    write_unlock: String,
}

impl RwShas {
    pub fn load(conn: &mut Connection) -> RwShas {
        let mut load = |s: &str| -> String {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(s)
                .query(conn)
                .expect("SCRIPT LOAD")
        };
        RwShas {
            read_acquire: load(READ_ACQUIRE),
            read_unlock: load(READ_UNLOCK),
            write_acquire: load(WRITE_ACQUIRE),
            write_unlock: load(WRITE_UNLOCK),
        }
    }
}

/// The name in a hash tag (`{name}`), unless it already holds `{` (Redisson's rule).
fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// Redisson's `suffixName(name, suffix)`.
fn suffix_name(name: &str, suffix: &str) -> String {
    format!("{}:{suffix}", tagged(name))
}

/// The channel readers and writers share.
pub fn rw_channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

pub fn connect(kind: RwKind, url: &str, shas: &RwShas, i: usize) -> Box<dyn RwProtocol> {
    match kind {
        RwKind::Rrwlock => Box::new(Rrwlock {
            conn: connection(url),
            owner: owner(i),
        }),
        RwKind::Redisson => Box::new(RedissonRw {
            client: RedissonConn::new(url, i),
            shas: shas.clone(),
        }),
    }
}

struct Rrwlock {
    conn: Connection,
    owner: String,
}

impl RwProtocol for Rrwlock {
    fn acquire(&mut self, key: &str, mode: Mode, lease_ms: i64, wait: Option<Duration>) -> bool {
        let r: Option<i64> = redis::cmd("RRWLOCK.ACQUIRE")
            .arg(key)
            .arg(&self.owner)
            .arg(mode.word())
            .arg(lease_ms)
            .arg("BLOCK")
            .arg(block_ms(wait))
            .query(&mut self.conn)
            .expect("RRWLOCK.ACQUIRE");
        r.is_some()
    }

    fn release(&mut self, key: &str, mode: Mode) {
        let _: i64 = redis::cmd("RRWLOCK.RELEASE")
            .arg(key)
            .arg(&self.owner)
            .arg(mode.word())
            .query(&mut self.conn)
            .expect("RRWLOCK.RELEASE");
    }
}

struct RedissonRw {
    client: RedissonConn,
    shas: RwShas,
}

impl RwProtocol for RedissonRw {
    fn acquire(&mut self, key: &str, mode: Mode, lease_ms: i64, wait: Option<Duration>) -> bool {
        let shas = &self.shas;
        let owner = &self.client.owner;
        let writer = format!("{owner}:write");
        let timeout_prefix = suffix_name(key, &format!("{owner}:rwlock_timeout"));
        self.client.wait(&rw_channel(key), wait, |c, owner| {
            let mut cmd = redis::cmd("EVALSHA");
            match mode {
                Mode::Read => cmd
                    .arg(&shas.read_acquire)
                    .arg(2)
                    .arg(key)
                    .arg(&timeout_prefix)
                    .arg(lease_ms)
                    .arg(owner)
                    .arg(&writer),
                Mode::Write => cmd
                    .arg(&shas.write_acquire)
                    .arg(1)
                    .arg(key)
                    .arg(lease_ms)
                    .arg(&writer),
            };
            cmd.query(c).expect("EVALSHA rwlock acquire")
        })
    }

    fn release(&mut self, key: &str, mode: Mode) {
        let latch = self.client.latch(key);
        let owner = &self.client.owner;
        let mut pipe = redis::pipe();
        match mode {
            Mode::Read => {
                pipe.cmd("EVALSHA")
                    .arg(&self.shas.read_unlock)
                    .arg(5)
                    .arg(key)
                    .arg(rw_channel(key))
                    .arg(suffix_name(key, &format!("{owner}:rwlock_timeout")))
                    // `getKeyPrefix`: the timeout prefix up to ":<owner>".
                    .arg(tagged(key))
                    .arg(&latch)
                    .arg(0)
                    .arg(owner)
                    .arg("PUBLISH")
                    .arg(LATCH_TTL_MS);
            }
            Mode::Write => {
                pipe.cmd("EVALSHA")
                    .arg(&self.shas.write_unlock)
                    .arg(3)
                    .arg(key)
                    .arg(rw_channel(key))
                    .arg(&latch)
                    .arg(1)
                    .arg(INTERNAL_LEASE_MS)
                    .arg(format!("{owner}:write"))
                    .arg("PUBLISH")
                    .arg(LATCH_TTL_MS);
            }
        }
        let replies = self.client.unlock(pipe, &latch);
        assert!(
            !matches!(replies.first(), Some(Value::Nil)),
            "Redisson {mode:?} unlock of {key}: not held"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_names() {
        assert_eq!(
            suffix_name("a", "o:1:rwlock_timeout"),
            "{a}:o:1:rwlock_timeout"
        );
        assert_eq!(suffix_name("{a}x", "s"), "{a}x:s");
        assert_eq!(rw_channel("a"), "redisson_rwlock:{a}");
    }
}

//! The read-write lock protocols under comparison, behind one trait:
//!
//! - `rrwlock`: the native `RRWLOCK.*` commands, waiting on the server (`BLOCK`).
//! - `redisson`: Redisson's `RReadWriteLock` as Redisson sends it today: its exact read and
//!   write acquire and unlock scripts (reference `redisson.md` §2.5) via EVALSHA, the unlock
//!   latch DEL the client sends after an unlock, and its wait loop on the shared channel
//!   `redisson_rwlock:{name}` ([`redisson_wait`]).
//!
//! The scripts, and Redisson's names for the keys they touch, are `rlock_tests::redisson`'s,
//! the copy the interop tests run too.

use crate::protocols::{block_ms, connection, owner, RedissonConn};
use redis::{Connection, Value};
use rlock_tests::redisson::{
    rw_key_prefix, rw_timeout_prefix, script_load, LATCH_TTL_MS, READ_ACQUIRE, READ_UNLOCK,
    WRITE_ACQUIRE, WRITE_UNLOCK,
};
use rlock_tests::rwlock_channel;
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

/// Redisson's default lease with the watchdog (`internalLockLeaseTime`).
const INTERNAL_LEASE_MS: i64 = 30_000;

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
        RwShas {
            read_acquire: script_load(conn, READ_ACQUIRE),
            read_unlock: script_load(conn, READ_UNLOCK),
            write_acquire: script_load(conn, WRITE_ACQUIRE),
            write_unlock: script_load(conn, WRITE_UNLOCK),
        }
    }
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
        let timeout_prefix = rw_timeout_prefix(key, owner);
        self.client.wait(&rwlock_channel(key), wait, |c, owner| {
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
                    .arg(rwlock_channel(key))
                    .arg(rw_timeout_prefix(key, owner))
                    .arg(rw_key_prefix(key))
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
                    .arg(rwlock_channel(key))
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

//! The protocols under comparison, behind one trait so every scenario drives them alike.
//!
//! - `rlock`: the native commands, waiting on the server (`BLOCK`).
//! - `rlock-client`: the same through the `rlock` crate's sync API.
//! - `redisson`: Redisson's protocol as it is today: its exact acquire and release scripts via
//!   EVALSHA (release with the unlock-latch key, then the latch DEL the client sends), and its
//!   wait loop (subscribe to the lock channel, retry after subscribing, wait for a message or
//!   min(ttl, remaining), retry; unsubscribe when done).
//! - `ceiling`: the cheapest native commands of the same shape (HSET + DEL); not a lock.

use redis::{Connection, Value};
use rlock_tests::{lock_channel, prefix_name, redisson};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rlock,
    RlockClient,
    Redisson,
    Ceiling,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Rlock => "rlock",
            Kind::RlockClient => "rlock-client",
            Kind::Redisson => "redisson",
            Kind::Ceiling => "ceiling (HSET+DEL)",
        }
    }
}

pub trait Protocol: Send {
    /// Take `key` for this client, waiting at most `wait` (`None`: until acquired).
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool;
    fn release(&mut self, key: &str);
}

/// Scripts loaded once per server; EVALSHA is what Redisson sends.
#[derive(Clone)]
pub struct Shas {
    acquire: String,
    unlock: String,
}

impl Shas {
    pub fn load(conn: &mut Connection) -> Shas {
        let load = |c: &mut Connection, s: &str| -> String {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(s)
                .query(c)
                .expect("SCRIPT LOAD")
        };
        Shas {
            acquire: load(conn, redisson::ACQUIRE),
            unlock: load(conn, redisson::UNLOCK),
        }
    }
}

/// A fresh owner id in Redisson's `UUID:thread` shape.
pub fn owner(i: usize) -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!(
        "6e3d30b7-83b1-433a-9335-{:012x}:{i}",
        RUN.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn connect(
    kind: Kind,
    url: &str,
    shas: &Shas,
    client: Option<&rlock::Client>,
    i: usize,
) -> Box<dyn Protocol> {
    let conn = || {
        redis::Client::open(url)
            .unwrap()
            .get_connection()
            .expect("connect")
    };
    match kind {
        Kind::Rlock => Box::new(Rlock {
            conn: conn(),
            owner: owner(i),
        }),
        Kind::RlockClient => Box::new(RlockClient {
            client: client.expect("rlock client").clone(),
        }),
        Kind::Redisson => Box::new(Redisson {
            conn: conn(),
            sub: conn(),
            owner: owner(i),
            shas: shas.clone(),
            request: 0,
        }),
        Kind::Ceiling => Box::new(Ceiling { conn: conn() }),
    }
}

struct Rlock {
    conn: Connection,
    owner: String,
}

impl Protocol for Rlock {
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool {
        let block = wait.map_or(0, |w| (w.as_millis() as i64).max(1));
        let r: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
            .arg(key)
            .arg(&self.owner)
            .arg(lease_ms)
            .arg("BLOCK")
            .arg(block)
            .query(&mut self.conn)
            .expect("RLOCK.ACQUIRE");
        r.is_some()
    }

    fn release(&mut self, key: &str) {
        let _: i64 = redis::cmd("RLOCK.RELEASE")
            .arg(key)
            .arg(&self.owner)
            .query(&mut self.conn)
            .expect("RLOCK.RELEASE");
    }
}

struct RlockClient {
    client: rlock::Client,
}

impl Protocol for RlockClient {
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool {
        let lock = self.client.lock(key);
        let lease = Duration::from_millis(lease_ms as u64);
        match wait {
            None => lock.lock_with_lease(lease).map(|_| true),
            Some(w) => lock.try_lock_with(w, lease),
        }
        .expect("rlock client acquire")
    }

    fn release(&mut self, key: &str) {
        self.client.lock(key).unlock().expect("rlock client unlock");
    }
}

struct Redisson {
    conn: Connection,
    sub: Connection,
    owner: String,
    shas: Shas,
    request: u64,
}

impl Redisson {
    /// The acquire script: `None` when acquired, else the holder's PTTL.
    fn try_acquire(&mut self, key: &str, lease_ms: i64) -> Option<i64> {
        redis::cmd("EVALSHA")
            .arg(&self.shas.acquire)
            .arg(1)
            .arg(key)
            .arg(lease_ms)
            .arg(&self.owner)
            .query(&mut self.conn)
            .expect("EVALSHA acquire")
    }
}

impl Protocol for Redisson {
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool {
        let deadline = wait.map(|w| Instant::now() + w);
        if self.try_acquire(key, lease_ms).is_none() {
            return true;
        }
        if wait.is_some_and(|w| w.is_zero()) {
            return false;
        }
        // Subscribe, then retry before waiting: that is how Redisson avoids a lost wake-up.
        let channel = lock_channel(key);
        let Redisson {
            conn,
            sub,
            owner,
            shas,
            ..
        } = self;
        let mut ps = sub.as_pubsub();
        ps.subscribe(&channel).expect("SUBSCRIBE");
        let acquired = loop {
            let ttl: Option<i64> = redis::cmd("EVALSHA")
                .arg(&shas.acquire)
                .arg(1)
                .arg(key)
                .arg(lease_ms)
                .arg(&*owner)
                .query(conn)
                .expect("EVALSHA acquire");
            let Some(ttl) = ttl else { break true };
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                break false;
            }
            // Wait for an unlock message, or min(ttl, remaining) (forever when the key has no TTL).
            let mut timeout = if ttl >= 0 {
                Some(Duration::from_millis(ttl.max(1) as u64))
            } else {
                None
            };
            if let Some(r) = remaining {
                timeout = Some(timeout.map_or(r, |t| t.min(r)));
            }
            ps.set_read_timeout(timeout.map(|t| t.max(Duration::from_millis(1))))
                .unwrap();
            let _ = ps.get_message(); // a message or a timeout: either way, retry
        };
        ps.unsubscribe(&channel).expect("UNSUBSCRIBE");
        acquired
    }

    fn release(&mut self, key: &str) {
        self.request += 1;
        let latch = format!(
            "{}:{:032x}",
            prefix_name("redisson_unlock_latch", key),
            self.request
        );
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(&self.shas.unlock)
            .arg(3)
            .arg(key)
            .arg(lock_channel(key))
            .arg(&latch)
            .arg(0)
            .arg(30_000)
            .arg(&self.owner)
            .arg("PUBLISH")
            .arg(18_000);
        // The client deletes the latch after a successful unlock (fire-and-forget).
        pipe.cmd("DEL").arg(&latch);
        let _: Vec<Value> = pipe.query(&mut self.conn).expect("EVALSHA unlock");
    }
}

struct Ceiling {
    conn: Connection,
}

impl Protocol for Ceiling {
    fn acquire(&mut self, key: &str, _lease_ms: i64, _wait: Option<Duration>) -> bool {
        let _: i64 = redis::cmd("HSET")
            .arg(key)
            .arg("owner")
            .arg(1)
            .query(&mut self.conn)
            .unwrap();
        true
    }
    fn release(&mut self, key: &str) {
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut self.conn).unwrap();
    }
}

/// Append `pairs` acquire+release pairs on distinct keys to a pipeline, as each protocol sends
/// them (Redisson: acquire script, unlock script, latch DEL).
pub fn pipeline_pairs(
    kind: Kind,
    pipe: &mut redis::Pipeline,
    shas: &Shas,
    owner: &str,
    prefix: &str,
    start: u64,
    pairs: u64,
) {
    for i in start..start + pairs {
        let key = format!("{prefix}:{i}");
        match kind {
            Kind::Rlock | Kind::RlockClient => {
                pipe.cmd("RLOCK.ACQUIRE").arg(&key).arg(owner).arg(30_000);
                pipe.cmd("RLOCK.RELEASE").arg(&key).arg(owner);
            }
            Kind::Redisson => {
                let latch = format!("{}:{i:032x}", prefix_name("redisson_unlock_latch", &key));
                pipe.cmd("EVALSHA")
                    .arg(&shas.acquire)
                    .arg(1)
                    .arg(&key)
                    .arg(30_000)
                    .arg(owner);
                pipe.cmd("EVALSHA")
                    .arg(&shas.unlock)
                    .arg(3)
                    .arg(&key)
                    .arg(lock_channel(&key))
                    .arg(&latch)
                    .arg(0)
                    .arg(30_000)
                    .arg(owner)
                    .arg("PUBLISH")
                    .arg(18_000);
                pipe.cmd("DEL").arg(&latch);
            }
            Kind::Ceiling => {
                pipe.cmd("HSET").arg(&key).arg(owner).arg(1);
                pipe.cmd("DEL").arg(&key);
            }
        }
    }
}

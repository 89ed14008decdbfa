//! The protocols under comparison, behind one trait so every scenario drives them alike.
//!
//! - `rlock`: the native commands, waiting on the server (`BLOCK`).
//! - `rlock-client`: the same through the `rlock-client` crate's sync API.
//! - `redisson`: Redisson's protocol as it is today: its exact acquire and release scripts via
//!   EVALSHA (release with the unlock-latch key, then the latch DEL the client sends), and its
//!   wait loop (subscribe to the lock channel, retry after subscribing, wait for a message or
//!   min(ttl, remaining), retry; unsubscribe when done).
//! - `ceiling`: the cheapest native commands of the same shape (HSET + DEL); not a lock.

use crate::subscriber::Subscriber;
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
    /// Release `key`: false when the server refused it as not this client's (someone took the
    /// lock from under it: the caller counts that as a mutual-exclusion violation).
    fn release(&mut self, key: &str) -> bool;
}

/// Scripts loaded once per server; EVALSHA is what Redisson sends.
#[derive(Clone)]
pub struct Shas {
    acquire: String,
    unlock: String,
}

impl Shas {
    pub fn load(conn: &mut Connection) -> Shas {
        Shas {
            acquire: redisson::script_load(conn, redisson::ACQUIRE),
            unlock: redisson::script_load(conn, redisson::UNLOCK),
        }
    }
}

/// A new connection to the server at `url`.
pub fn connection(url: &str) -> Connection {
    redis::Client::open(url)
        .unwrap()
        .get_connection()
        .expect("connect")
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
    client: Option<&rlock_client::Client>,
    i: usize,
) -> Box<dyn Protocol> {
    let conn = || connection(url);
    match kind {
        Kind::Rlock => Box::new(Rlock {
            conn: conn(),
            owner: owner(i),
        }),
        Kind::RlockClient => Box::new(RlockClient {
            client: client.expect("rlock client").clone(),
        }),
        Kind::Redisson => Box::new(Redisson {
            client: RedissonConn::new(url, i),
            shas: shas.clone(),
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
        let r: Option<i64> = redis::cmd("RLOCK.ACQUIRE")
            .arg(key)
            .arg(&self.owner)
            .arg(lease_ms)
            .arg("BLOCK")
            .arg(block_ms(wait))
            .query(&mut self.conn)
            .expect("RLOCK.ACQUIRE");
        r.is_some()
    }

    fn release(&mut self, key: &str) -> bool {
        let r: redis::RedisResult<i64> = redis::cmd("RLOCK.RELEASE")
            .arg(key)
            .arg(&self.owner)
            .query(&mut self.conn);
        match r {
            Ok(_) => true,
            Err(e) if e.code() == Some("NOTOWNER") => false,
            Err(e) => panic!("RLOCK.RELEASE: {e}"),
        }
    }
}

struct RlockClient {
    client: rlock_client::Client,
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

    fn release(&mut self, key: &str) -> bool {
        match self.client.lock(key).unlock() {
            Ok(()) => true,
            Err(rlock_client::Error::NotOwner { .. }) => false,
            Err(e) => panic!("rlock client unlock: {e}"),
        }
    }
}

/// `BLOCK`'s argument for a wait of at most `wait` (`None`: 0, until acquired).
pub fn block_ms(wait: Option<Duration>) -> i64 {
    wait.map_or(0, |w| (w.as_millis() as i64).max(1))
}

struct Redisson {
    client: RedissonConn,
    shas: Shas,
}

impl Protocol for Redisson {
    fn acquire(&mut self, key: &str, lease_ms: i64, wait: Option<Duration>) -> bool {
        let sha = &self.shas.acquire;
        self.client.wait(&lock_channel(key), wait, |c, owner| {
            redis::cmd("EVALSHA")
                .arg(sha)
                .arg(1)
                .arg(key)
                .arg(lease_ms)
                .arg(owner)
                .query(c)
                .expect("EVALSHA acquire")
        })
    }

    fn release(&mut self, key: &str) -> bool {
        let latch = self.client.latch(key);
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(&self.shas.unlock)
            .arg(3)
            .arg(key)
            .arg(lock_channel(key))
            .arg(&latch)
            .arg(0)
            .arg(30_000)
            .arg(&self.client.owner)
            .arg("PUBLISH")
            .arg(18_000);
        // The unlock script answers nil when the lock is not this owner's.
        let replies = self.client.unlock(pipe, &latch);
        replies.first() != Some(&Value::Nil)
    }
}

/// What a Redisson client has for one of its threads: a command connection, a pub/sub
/// connection read by a thread of its own ([`Subscriber`]), the owner id and a counter of
/// unlock requests.
pub struct RedissonConn {
    conn: Connection,
    sub: Subscriber,
    pub owner: String,
    request: u64,
}

impl RedissonConn {
    pub fn new(url: &str, i: usize) -> RedissonConn {
        RedissonConn {
            conn: connection(url),
            sub: Subscriber::connect(url),
            owner: owner(i),
            request: 0,
        }
    }

    /// The unlock latch key of a new unlock request on `key` (Redisson's
    /// `getUnlockLatchName(requestId)`).
    pub fn latch(&mut self, key: &str) -> String {
        self.request += 1;
        format!(
            "{}:{:032x}",
            prefix_name("redisson_unlock_latch", key),
            self.request
        )
    }

    /// Send an unlock script (`pipe`), then the latch DEL the client sends after an unlock
    /// (fire-and-forget, in the same round trip).
    pub fn unlock(&mut self, mut pipe: redis::Pipeline, latch: &str) -> Vec<Value> {
        pipe.cmd("DEL").arg(latch);
        pipe.query(&mut self.conn).expect("EVALSHA unlock")
    }

    /// Redisson's wait loop (`RedissonLock.lock` / `tryLock`), shared by every Redisson object
    /// here: try the acquire script (`try_acquire(conn, owner)`: `None` when acquired, else the
    /// holder's PTTL); on failure subscribe to `channel`, retry after subscribing (how Redisson
    /// avoids a lost wake-up), then wait for a message or min(ttl, remaining) (forever when the
    /// key has no TTL) and retry; unsubscribe when done. Messages come through a reader
    /// thread, as in Redisson ([`Subscriber`]), so a timed wait ends on time.
    pub fn wait(
        &mut self,
        channel: &str,
        wait: Option<Duration>,
        mut try_acquire: impl FnMut(&mut Connection, &str) -> Option<i64>,
    ) -> bool {
        let RedissonConn {
            conn, sub, owner, ..
        } = self;
        let deadline = wait.map(|w| Instant::now() + w);
        if try_acquire(conn, owner).is_none() {
            return true;
        }
        if wait.is_some_and(|w| w.is_zero()) {
            return false;
        }
        sub.subscribe(channel);
        let acquired = loop {
            let Some(ttl) = try_acquire(conn, owner) else {
                break true;
            };
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                break false;
            }
            // PTTL 0 (the key's last millisecond) waits 0 ms, as Redisson's `tryAcquire(0)`:
            // it retries at once until the key is gone.
            let mut timeout = if ttl >= 0 {
                Some(Duration::from_millis(ttl as u64))
            } else {
                None
            };
            if let Some(r) = remaining {
                timeout = Some(timeout.map_or(r, |t| t.min(r)));
            }
            sub.message(timeout); // a message or a timeout: either way, retry
        };
        sub.unsubscribe(channel);
        acquired
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
    fn release(&mut self, key: &str) -> bool {
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut self.conn).unwrap();
        true
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

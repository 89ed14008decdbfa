//! The semaphore's protocols under comparison (and the latch's countdown; its waiters are in
//! `latch.rs`), as `protocols.rs` does for the lock:
//! - rlock: `RSEM.ACQUIRE ... BLOCK` / `RSEM.RELEASE`: waiters wait on the server.
//! - Redisson: its exact scripts via EVALSHA (`rlock_tests::redisson::{semaphore, latch}`) and
//!   its client-side wait loops: try; subscribe to `redisson_sc:{key}`; try again after
//!   subscribing; wait for a message with a count above 0 (its pub/sub handler wakes no one on
//!   0) or, for the expirable semaphore, until the soonest lease end the script reported;
//!   retry; unsubscribe when done. Every client is its own Redisson instance (its own
//!   subscription), as separate services are.

use redis::{Connection, Value};
use rlock_tests::redisson::{latch as rl, script_load, semaphore as rs};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Rlock,
    Redisson,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Rlock => "rlock",
            Side::Redisson => "redisson",
        }
    }
}

/// Redisson's scripts, loaded once; EVALSHA is what Redisson sends.
#[derive(Clone)]
pub struct Scripts {
    try_acquire: String,
    release: String,
    lease: String,
    count_down: String,
}

impl Scripts {
    pub fn load(conn: &mut Connection) -> Scripts {
        Scripts {
            try_acquire: script_load(conn, rs::TRY_ACQUIRE),
            release: script_load(conn, rs::RELEASE),
            lease: script_load(conn, rs::EXP_TRY_ACQUIRE),
            count_down: script_load(conn, rl::COUNT_DOWN),
        }
    }
}

pub fn connect(url: &str) -> Connection {
    redis::Client::open(url)
        .unwrap()
        .get_connection()
        .expect("connect")
}

/// A subscription made with raw commands on a connection of its own. (redis-rs's `PubSub`
/// sends UNSUBSCRIBE and PUNSUBSCRIBE again when dropped; Redisson sends one UNSUBSCRIBE, and
/// the latch benchmark counts the commands each side makes the server run.)
struct Subscription<'a> {
    conn: &'a mut Connection,
    channel: String,
}

impl<'a> Subscription<'a> {
    fn new(conn: &'a mut Connection, channel: String) -> Subscription<'a> {
        let c = redis::cmd("SUBSCRIBE").arg(&channel).clone();
        conn.send_packed_command(&c.get_packed_command()).unwrap();
        conn.set_read_timeout(None).unwrap();
        conn.recv_response().expect("SUBSCRIBE confirmation");
        Subscription { conn, channel }
    }

    /// Wait for a message whose integer payload `wakes`, at most `timeout` (`None`: without
    /// limit). True when one came.
    fn wait(&mut self, timeout: Option<Duration>, wakes: impl Fn(i64) -> bool) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return false;
            }
            self.conn
                .set_read_timeout(left.map(|l| l.max(Duration::from_millis(1))))
                .unwrap();
            let Ok(Value::Array(parts)) = self.conn.recv_response() else {
                return false; // timed out
            };
            let payload = parts.get(2).and_then(rlock_tests::text).unwrap_or_default();
            if payload.parse::<i64>().is_ok_and(&wakes) {
                return true;
            }
        }
    }
}

impl Drop for Subscription<'_> {
    fn drop(&mut self) {
        let c = redis::cmd("UNSUBSCRIBE").arg(&self.channel).clone();
        self.conn
            .send_packed_command(&c.get_packed_command())
            .unwrap();
        self.conn.set_read_timeout(None).unwrap();
        // Messages that came meanwhile, then the confirmation.
        while let Ok(Value::Array(parts)) = self.conn.recv_response() {
            if parts.first().and_then(rlock_tests::text).as_deref() == Some("unsubscribe") {
                break;
            }
        }
    }
}

/// One semaphore client.
pub struct SemClient {
    side: Side,
    conn: Connection,
    sub: Connection,
    scripts: Scripts,
}

/// What Redisson's expirable `tryAcquire` script said.
enum Leased {
    Ok,
    /// Not acquired; the soonest lease end (ms since the epoch).
    Until(i64),
    /// Not acquired; nothing will end by itself.
    No,
}

impl SemClient {
    pub fn new(side: Side, url: &str, scripts: &Scripts) -> SemClient {
        SemClient {
            side,
            conn: connect(url),
            sub: connect(url),
            scripts: scripts.clone(),
        }
    }

    /// Take `permits` plain permits, waiting at most `wait`.
    pub fn acquire(&mut self, key: &str, permits: i64, wait: Duration) -> bool {
        match self.side {
            Side::Rlock => {
                let r: Option<i64> = redis::cmd("RSEM.ACQUIRE")
                    .arg(key)
                    .arg("PERMITS")
                    .arg(permits)
                    .arg("BLOCK")
                    .arg((wait.as_millis() as i64).max(1))
                    .query(&mut self.conn)
                    .expect("RSEM.ACQUIRE");
                r.is_some()
            }
            // RSemaphore.tryAcquire(permits, wait).
            Side::Redisson => self.redisson_wait(key, wait, |c, s| {
                let r: i64 = redis::cmd("EVALSHA")
                    .arg(&s.try_acquire)
                    .arg(1)
                    .arg(key)
                    .arg(permits)
                    .query(c)
                    .expect("EVALSHA tryAcquire");
                (r == 1, None)
            }),
        }
    }

    pub fn release(&mut self, key: &str, permits: i64) {
        match self.side {
            Side::Rlock => {
                let _: i64 = redis::cmd("RSEM.RELEASE")
                    .arg(key)
                    .arg("PERMITS")
                    .arg(permits)
                    .query(&mut self.conn)
                    .expect("RSEM.RELEASE");
            }
            Side::Redisson => {
                let _: Value = redis::cmd("EVALSHA")
                    .arg(&self.scripts.release)
                    .arg(2)
                    .arg(key)
                    .arg(rs::channel(key))
                    .arg(permits)
                    .arg("PUBLISH")
                    .query(&mut self.conn)
                    .expect("EVALSHA release");
            }
        }
    }

    /// Lease one permit for `lease_ms`, waiting at most `wait` (`Duration::ZERO`: one try).
    pub fn lease(&mut self, key: &str, lease_ms: i64, wait: Duration) -> bool {
        match self.side {
            Side::Rlock => {
                let mut c = redis::cmd("RSEM.ACQUIRE");
                c.arg(key).arg("LEASE").arg(lease_ms);
                if !wait.is_zero() {
                    c.arg("BLOCK").arg((wait.as_millis() as i64).max(1));
                }
                let r: Option<Vec<String>> = c.query(&mut self.conn).expect("RSEM.ACQUIRE LEASE");
                r.is_some()
            }
            // RPermitExpirableSemaphore.tryAcquire(wait, lease): between tries it waits for a
            // message or until the soonest lease end, when its own retry reclaims that permit.
            Side::Redisson => {
                let attempt =
                    |c: &mut Connection, s: &Scripts| match redisson_lease(c, s, key, lease_ms) {
                        Leased::Ok => (true, None),
                        Leased::Until(at) => (false, Some(at)),
                        Leased::No => (false, None),
                    };
                if wait.is_zero() {
                    return attempt(&mut self.conn, &self.scripts).0;
                }
                self.redisson_wait(key, wait, attempt)
            }
        }
    }

    /// Redisson's wait loop around `attempt` (acquired?, soonest lease end).
    fn redisson_wait(
        &mut self,
        key: &str,
        wait: Duration,
        attempt: impl Fn(&mut Connection, &Scripts) -> (bool, Option<i64>),
    ) -> bool {
        let deadline = Instant::now() + wait;
        if attempt(&mut self.conn, &self.scripts).0 {
            return true;
        }
        let SemClient {
            conn, sub, scripts, ..
        } = self;
        let mut ps = Subscription::new(sub, rs::channel(key));
        loop {
            let (got, until) = attempt(conn, scripts);
            if got {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            let timeout = match until {
                Some(at) => left.min(Duration::from_millis((at - rs::now_ms()).max(0) as u64)),
                None => left,
            };
            if !timeout.is_zero() {
                ps.wait(Some(timeout), |n| n > 0);
            }
        }
    }
}

fn redisson_lease(conn: &mut Connection, s: &Scripts, key: &str, lease_ms: i64) -> Leased {
    let now = rs::now_ms();
    let r: Value = redis::cmd("EVALSHA")
        .arg(&s.lease)
        .arg(3)
        .arg(key)
        .arg(rs::timeouts(key))
        .arg(rs::channel(key))
        .arg(1)
        .arg(now + lease_ms)
        .arg(now)
        .arg(rs::PERMANENT)
        .arg("PUBLISH")
        .arg(rs::new_id())
        .query(conn)
        .expect("EVALSHA expirable tryAcquire");
    match rlock_tests::text(&r) {
        Some(t) if t == "OK" => Leased::Ok,
        Some(t) => Leased::Until(t.trim_start_matches(':').parse::<f64>().unwrap_or(0.0) as i64),
        None => Leased::No,
    }
}

/// Open the latch: the last countdown, as each side sends it.
pub fn count_down(side: Side, conn: &mut Connection, scripts: &Scripts, key: &str) {
    match side {
        Side::Rlock => {
            let _: i64 = redis::cmd("RLATCH.COUNTDOWN").arg(key).query(conn).unwrap();
        }
        Side::Redisson => {
            let _: Value = redis::cmd("EVALSHA")
                .arg(&scripts.count_down)
                .arg(2)
                .arg(key)
                .arg(rl::channel(key))
                .arg(0)
                .arg("PUBLISH")
                .query(conn)
                .unwrap();
        }
    }
}

//! Connections: one shared multiplexed connection for non-blocking commands, one for the
//! watchdog, and a pool of dedicated connections for blocked acquires (a blocked command
//! occupies its connection on the server until it is answered).
//!
//! In cluster mode ([`crate::ClientBuilder::cluster`]) idempotent commands (reads, renewals,
//! force release) go through the redis crate's cluster connection, which follows `MOVED`/`ASK`
//! and retries `TRYAGAIN`/`CLUSTERDOWN` itself. Acquires and releases are not idempotent (a
//! blind resend after a lost reply would count a hold twice), so the client routes them itself
//! ([`crate::cluster::Router`]): by the key's slot to its master, following redirects, and leaving
//! a broken connection to the caller's "did it happen anyway?" check. Blocked acquires use a pool
//! of dedicated connections per node.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisResult};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::cluster::Router;
use crate::config::Config;
use crate::error::Error;

pub(crate) struct Connections {
    mode: Mode,
    retry_attempts: u32,
    retry_delay: Duration,
}

enum Mode {
    Single {
        shared: ConnectionManager,
        watchdog: ConnectionManager,
        pool: Arc<Pool>,
    },
    Cluster(Box<Router>),
}

/// What to do after an error reply that a cluster or a failover can cause.
#[derive(Debug)]
pub(crate) enum Redirect {
    /// `MOVED`: the slot map was updated; send again at once.
    Moved,
    /// `ASK host:port`: send once to that node, preceded by `ASKING`.
    Ask(String),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`, `UNBLOCKED` (a waiter
    /// released by a migration or by its node turning into a replica): the command did not run;
    /// pause, re-resolve the node, send again.
    Retry,
}

/// Classify an error reply (`None`: not a redirect; handle as before).
pub(crate) fn redirect_of(e: &redis::RedisError) -> Option<Redirect> {
    match e.code()? {
        "MOVED" => Some(Redirect::Moved),
        "ASK" => e
            .redirect_node()
            .map(|(addr, _)| Redirect::Ask(addr.to_string())),
        "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "LOADING" | "READONLY" | "UNBLOCKED" => {
            Some(Redirect::Retry)
        }
        _ => None,
    }
}

fn manager(client: &redis::Client, cfg: &Config) -> Result<ConnectionManager, Error> {
    let mc = ConnectionManagerConfig::new()
        .set_response_timeout(Some(cfg.response_timeout))
        .set_connection_timeout(Some(cfg.connect_timeout))
        .set_number_of_retries(cfg.retry_attempts as usize)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_secs(1));
    ConnectionManager::new_lazy_with_config(client.clone(), mc)
        .map_err(|e| Error::Config(e.to_string()))
}

/// Settings of a dedicated (waiting) connection: no response timeout (a wait may be long).
pub(crate) fn dedicated_config(cfg: &Config) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.connect_timeout))
        .set_response_timeout(None)
}

impl Connections {
    /// Must be called inside the client's runtime context (the managers spawn helper tasks).
    pub(crate) fn new(client: redis::Client, cfg: &Config) -> Result<Connections, Error> {
        let shared = manager(&client, cfg)?;
        let watchdog = manager(&client, cfg)?;
        let pool = Arc::new(Pool::new(
            client,
            dedicated_config(cfg),
            Arc::new(Semaphore::new(cfg.max_wait_connections)),
            cfg.max_idle_wait_connections,
            None,
        ));
        Ok(Connections {
            mode: Mode::Single {
                shared,
                watchdog,
                pool,
            },
            retry_attempts: cfg.retry_attempts,
            retry_delay: cfg.retry_delay,
        })
    }

    /// Cluster mode: `seeds` are `redis://` URLs of some of the cluster's nodes.
    pub(crate) fn new_cluster(seeds: &[String], cfg: &Config) -> Result<Connections, Error> {
        Ok(Connections {
            mode: Mode::Cluster(Box::new(Router::new(seeds, cfg)?)),
            retry_attempts: cfg.retry_attempts,
            retry_delay: cfg.retry_delay,
        })
    }

    /// One command on the shared connection, no retry (for writes whose retry needs thought).
    /// In cluster mode: on the cluster connection (routed by key, redirects followed).
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match &self.mode {
            Mode::Single { shared, .. } => {
                let mut c = shared.clone();
                cmd.query_async(&mut c).await
            }
            Mode::Cluster(r) => r.query(cmd).await,
        }
    }

    /// A command that must run at most once per call (acquire, release), on `key`'s node. A
    /// broken connection comes back as an error (the caller checks what happened); redirects
    /// are followed.
    pub(crate) async fn write<T: FromRedisValue>(&self, cmd: &Cmd, key: &str) -> RedisResult<T> {
        match &self.mode {
            Mode::Single { .. } => self.query(cmd).await,
            Mode::Cluster(r) => {
                r.write(cmd, key, self.retry_attempts, self.retry_delay)
                    .await
            }
        }
    }

    /// An idempotent command on the shared connection, retried after a connection failure
    /// (the first command after a server restart meets the dead socket).
    pub(crate) async fn query_retry<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        name: &str,
        owner: &str,
    ) -> Result<T, Error> {
        let mut attempt = 0;
        loop {
            match self.query(cmd).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let err = Error::from_redis(e, name, owner);
                    if !err.is_ambiguous() || attempt >= self.retry_attempts {
                        return Err(err);
                    }
                    attempt += 1;
                    tracing::debug!(error = %err, attempt, "rlock: retrying after connection error");
                    tokio::time::sleep(self.retry_delay).await;
                }
            }
        }
    }

    /// Renew every `(name, owner)` to `lease_ms`: one reply per lock, or an error for the whole
    /// batch when it could not be sent.
    pub(crate) async fn renew_all(
        &self,
        locks: &[(String, String)],
        lease_ms: u64,
    ) -> RedisResult<Vec<RedisResult<i64>>> {
        match &self.mode {
            Mode::Single { watchdog, .. } => {
                let mut pipe = redis::pipe();
                for (name, owner) in locks {
                    pipe.cmd("RLOCK.RENEW").arg(name).arg(owner).arg(lease_ms);
                }
                pipe.ignore_errors();
                let mut conn = watchdog.clone();
                pipe.query_async(&mut conn).await
            }
            Mode::Cluster(r) => r.renew_all(locks, lease_ms).await,
        }
    }

    /// The pool of waiting connections to `key`'s node (or to `ask`, the node an `ASK`
    /// redirect named).
    pub(crate) async fn pool_for(&self, key: &str, ask: Option<&str>) -> RedisResult<Arc<Pool>> {
        match &self.mode {
            Mode::Single { pool, .. } => Ok(pool.clone()),
            Mode::Cluster(r) => match ask {
                Some(addr) => r.node(addr),
                None => r.pool_for_key(key).await,
            },
        }
    }

    /// `CLIENT UNBLOCK` the waiting connection `pc`, on the node it waits on.
    pub(crate) async fn unblock(&self, pc: &PoolConn) -> RedisResult<i64> {
        let mut unblock = redis::cmd("CLIENT");
        unblock.arg("UNBLOCK").arg(pc.id());
        match &self.mode {
            Mode::Single { .. } => self.query(&unblock).await,
            Mode::Cluster(_) => pc.pool.control_query(&unblock).await,
        }
    }

    /// Act on a redirect-class error: update the slot map for `MOVED`, re-read it (after the
    /// pause the caller takes) for the others.
    pub(crate) async fn follow(&self, e: &redis::RedisError, key: &str) -> Option<Redirect> {
        let r = redirect_of(e)?;
        if let Mode::Cluster(router) = &self.mode {
            router.on_redirect(e, &r, key).await;
        }
        Some(r)
    }

    /// A connection broke: in cluster mode, read the slot map again before the next lookup (the
    /// node may be gone and its slots served by a promoted replica).
    pub(crate) fn mark_stale(&self) {
        if let Mode::Cluster(r) = &self.mode {
            r.mark_stale();
        }
    }

    pub(crate) fn retry_attempts(&self) -> u32 {
        self.retry_attempts
    }

    pub(crate) fn retry_delay(&self) -> Duration {
        self.retry_delay
    }
}

/// Dedicated connections for blocking commands, bounded by `max_wait_connections`.
pub(crate) struct Pool {
    client: redis::Client,
    cfg: AsyncConnectionConfig,
    idle: Mutex<Vec<Dedicated>>,
    permits: Arc<Semaphore>,
    max_idle: usize,
    /// Cluster mode: settings of the node's shared connection for short commands.
    control_cfg: Option<AsyncConnectionConfig>,
    control: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

/// A connection plus its server-side `CLIENT ID` (for `CLIENT UNBLOCK`).
pub(crate) struct Dedicated {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) id: i64,
}

impl Pool {
    pub(crate) fn new(
        client: redis::Client,
        cfg: AsyncConnectionConfig,
        permits: Arc<Semaphore>,
        max_idle: usize,
        control_cfg: Option<AsyncConnectionConfig>,
    ) -> Pool {
        Pool {
            client,
            cfg,
            idle: Mutex::new(Vec::new()),
            permits,
            max_idle,
            control_cfg,
            control: tokio::sync::Mutex::new(None),
        }
    }

    /// A short command on this node's shared connection (cluster mode), reconnecting when the
    /// last one broke.
    pub(crate) async fn control_query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let mut conn = {
            let mut slot = self.control.lock().await;
            match &*slot {
                Some(c) => c.clone(),
                None => {
                    let cfg = self.control_cfg.clone().unwrap_or_default();
                    let c = self
                        .client
                        .get_multiplexed_async_connection_with_config(&cfg)
                        .await?;
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let r = cmd.query_async(&mut conn).await;
        if let Err(e) = &r {
            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                *self.control.lock().await = None;
            }
        }
        r
    }

    /// A connection nobody else uses until the returned handle is dropped.
    pub(crate) async fn get(self: &Arc<Self>) -> RedisResult<PoolConn> {
        let permit = self.permits.clone().acquire_owned().await.map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Client, "connection pool closed"))
        })?;
        let idle = self.idle.lock().unwrap().pop();
        let d = match idle {
            Some(d) => d,
            None => {
                let mut conn = self
                    .client
                    .get_multiplexed_async_connection_with_config(&self.cfg)
                    .await?;
                let (_, id): ((), i64) = redis::pipe()
                    .cmd("CLIENT")
                    .arg("SETNAME")
                    .arg("rlock-wait")
                    .cmd("CLIENT")
                    .arg("ID")
                    .query_async(&mut conn)
                    .await?;
                Dedicated { conn, id }
            }
        };
        Ok(PoolConn {
            d: Some(d),
            pool: self.clone(),
            _permit: permit,
        })
    }

    fn put(&self, d: Dedicated) {
        let mut idle = self.idle.lock().unwrap();
        if idle.len() < self.max_idle {
            idle.push(d);
        }
    }
}

/// A checked-out dedicated connection; goes back to the pool on drop unless discarded.
pub(crate) struct PoolConn {
    d: Option<Dedicated>,
    pub(crate) pool: Arc<Pool>,
    _permit: OwnedSemaphorePermit,
}

impl PoolConn {
    pub(crate) fn conn(&self) -> MultiplexedConnection {
        self.d.as_ref().expect("live connection").conn.clone()
    }

    pub(crate) fn id(&self) -> i64 {
        self.d.as_ref().expect("live connection").id
    }

    /// Close it instead of returning it (broken, or in an unknown state). Closing the socket
    /// also makes the server drop a waiter still parked on it.
    pub(crate) fn discard(&mut self) {
        self.d = None;
    }
}

impl Drop for PoolConn {
    fn drop(&mut self) {
        if let Some(d) = self.d.take() {
            self.pool.put(d);
        }
    }
}

//! Connections: one shared multiplexed connection for non-blocking commands, one for the
//! watchdog, and a pool of dedicated connections for blocked acquires (a blocked command
//! occupies its connection on the server until it is answered).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, RedisResult};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::Config;
use crate::error::Error;

pub(crate) struct Connections {
    shared: ConnectionManager,
    watchdog: ConnectionManager,
    pool: Arc<Pool>,
    retry_attempts: u32,
    retry_delay: Duration,
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

impl Connections {
    /// Must be called inside the client's runtime context (the managers spawn helper tasks).
    pub(crate) fn new(client: redis::Client, cfg: &Config) -> Result<Connections, Error> {
        let shared = manager(&client, cfg)?;
        let watchdog = manager(&client, cfg)?;
        let dedicated_cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(cfg.connect_timeout))
            .set_response_timeout(None);
        let pool = Arc::new(Pool {
            client,
            cfg: dedicated_cfg,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(cfg.max_wait_connections)),
            max_idle: cfg.max_idle_wait_connections,
        });
        Ok(Connections {
            shared,
            watchdog,
            pool,
            retry_attempts: cfg.retry_attempts,
            retry_delay: cfg.retry_delay,
        })
    }

    /// One command on the shared connection, no retry (for writes whose retry needs thought).
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let mut c = self.shared.clone();
        cmd.query_async(&mut c).await
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

    pub(crate) fn watchdog(&self) -> ConnectionManager {
        self.watchdog.clone()
    }

    pub(crate) fn pool(&self) -> &Arc<Pool> {
        &self.pool
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
}

/// A connection plus its server-side `CLIENT ID` (for `CLIENT UNBLOCK`).
pub(crate) struct Dedicated {
    pub(crate) conn: MultiplexedConnection,
    pub(crate) id: i64,
}

impl Pool {
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
    pool: Arc<Pool>,
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

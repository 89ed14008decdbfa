//! Redis Cluster routing.
//!
//! Every `RLOCK.*` command names one key in position 1, so the node to send it to is the master
//! of that key's hash slot. The [`Router`] keeps a slot map (from `CLUSTER SLOTS`) and, per node,
//! a shared connection for short commands plus a pool of dedicated connections for waits.
//!
//! - Idempotent commands (reads, `RLOCK.RENEW`, `RLOCK.FORCERELEASE`) go through the redis
//!   crate's cluster connection, which follows redirects and retries on its own.
//! - Acquires and releases go through [`Router::write`]: `MOVED` updates the map and resends,
//!   `ASK` resends once to the named node after `ASKING`, `TRYAGAIN`/`CLUSTERDOWN`/`READONLY`/...
//!   pause, re-read the map and resend. A connection that breaks after the command was sent is
//!   reported to the caller, which checks on the server whether the command took effect before
//!   sending it again (a blind resend could count a hold twice).
//! - A waiting acquire runs on a dedicated connection to the slot's master; when the wait ends
//!   with a redirect-class error (the slot migrated away: the module answers `TRYAGAIN`; the node
//!   became a replica: Redis answers `UNBLOCKED`) the caller re-resolves the slot and queues again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue,
    IntoConnectionInfo, RedisError, RedisResult, Value,
};
use tokio::sync::{OnceCell, Semaphore};

use crate::config::Config;
use crate::conn::{dedicated_config, redirect_of, Pool, Redirect};
use crate::error::Error;
use crate::keys;

const SLOTS: usize = 16384;

pub(crate) struct Router {
    client: ClusterClient,
    seeds: Vec<ConnectionInfo>,
    shared: OnceCell<ClusterConnection>,
    watchdog: OnceCell<ClusterConnection>,
    /// slot -> `host:port` of its master.
    slots: RwLock<Vec<Option<Arc<str>>>>,
    /// The map must be read again before it is trusted (after a redirect or a broken node).
    stale: AtomicBool,
    refresh: tokio::sync::Mutex<()>,
    nodes: Mutex<HashMap<Arc<str>, Arc<Pool>>>,
    permits: Arc<Semaphore>,
    dedicated_cfg: AsyncConnectionConfig,
    control_cfg: AsyncConnectionConfig,
    max_idle: usize,
}

fn client_err(msg: String) -> RedisError {
    RedisError::from((ErrorKind::ClusterConnectionNotFound, "rlock cluster", msg))
}

impl Router {
    pub(crate) fn new(seeds: &[String], cfg: &Config) -> Result<Router, Error> {
        if seeds.is_empty() {
            return Err(Error::Config(
                "a cluster needs at least one seed URL".into(),
            ));
        }
        let infos = seeds
            .iter()
            .map(|s| {
                s.as_str()
                    .into_connection_info()
                    .map_err(|e| Error::Config(format!("bad Redis URL '{s}': {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let client = ClusterClientBuilder::new(infos.clone())
            .retries(cfg.retry_attempts.max(1) * 4)
            .connection_timeout(cfg.connect_timeout)
            .response_timeout(cfg.response_timeout)
            .build()
            .map_err(|e| Error::Config(format!("bad cluster configuration: {e}")))?;
        Ok(Router {
            client,
            seeds: infos,
            shared: OnceCell::new(),
            watchdog: OnceCell::new(),
            slots: RwLock::new(vec![None; SLOTS]),
            stale: AtomicBool::new(true),
            refresh: tokio::sync::Mutex::new(()),
            nodes: Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(cfg.max_wait_connections)),
            dedicated_cfg: dedicated_config(cfg),
            control_cfg: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(cfg.connect_timeout))
                .set_response_timeout(Some(cfg.response_timeout)),
            max_idle: cfg.max_idle_wait_connections,
        })
    }

    async fn cluster_conn(&self, watchdog: bool) -> RedisResult<ClusterConnection> {
        let cell = if watchdog {
            &self.watchdog
        } else {
            &self.shared
        };
        cell.get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }

    /// An idempotent command, routed by the redis crate's cluster connection.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let mut c = self.cluster_conn(false).await?;
        cmd.query_async(&mut c).await
    }

    /// `RLOCK.RENEW` per lock, all sent at once (the locks may live on different nodes, so one
    /// pipeline cannot carry them).
    pub(crate) async fn renew_all(
        &self,
        locks: &[(String, String)],
        lease_ms: u64,
    ) -> RedisResult<Vec<RedisResult<i64>>> {
        let conn = self.cluster_conn(true).await?;
        let tasks: Vec<_> = locks
            .iter()
            .map(|(name, owner)| {
                let mut c = conn.clone();
                let mut cmd = redis::cmd("RLOCK.RENEW");
                cmd.arg(name).arg(owner).arg(lease_ms);
                tokio::spawn(async move { cmd.query_async::<i64>(&mut c).await })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(t.await.unwrap_or_else(|e| Err(client_err(e.to_string()))));
        }
        Ok(out)
    }

    /// The pool (and control connection) of the node at `addr` (`host:port`).
    pub(crate) fn node(&self, addr: &str) -> RedisResult<Arc<Pool>> {
        if let Some(p) = self.nodes.lock().unwrap().get(addr) {
            return Ok(p.clone());
        }
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| client_err(format!("bad node address '{addr}'")))?;
        let seed = &self.seeds[0];
        let mut a = seed.addr().clone();
        match &mut a {
            ConnectionAddr::Tcp(h, p) => {
                *h = host;
                *p = port;
            }
            ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                *h = host;
                *p = port;
            }
            _ => return Err(client_err("cluster seeds must be TCP addresses".into())),
        }
        let client = redis::Client::open(seed.clone().set_addr(a))?;
        let pool = Arc::new(Pool::new(
            client,
            self.dedicated_cfg.clone(),
            self.permits.clone(),
            self.max_idle,
            Some(self.control_cfg.clone()),
        ));
        let mut nodes = self.nodes.lock().unwrap();
        Ok(nodes.entry(Arc::from(addr)).or_insert(pool).clone())
    }

    /// The master of `slot`, reading the slot map first when it is stale or lacks the slot.
    async fn owner(&self, slot: u16) -> RedisResult<Arc<str>> {
        if !self.stale.load(Ordering::Acquire) {
            if let Some(a) = &self.slots.read().unwrap()[slot as usize] {
                return Ok(a.clone());
            }
        }
        self.refresh().await?;
        self.slots.read().unwrap()[slot as usize]
            .clone()
            .ok_or_else(|| client_err(format!("no node serves slot {slot}")))
    }

    /// Read `CLUSTER SLOTS` from the first node that answers (known masters, then the seeds).
    async fn refresh(&self) -> RedisResult<()> {
        let _one_at_a_time = self.refresh.lock().await;
        if !self.stale.load(Ordering::Acquire) {
            return Ok(()); // another task just did it
        }
        let mut candidates: Vec<String> = Vec::new();
        for a in self.slots.read().unwrap().iter().flatten() {
            if !candidates.iter().any(|c| c.as_str() == &**a) {
                candidates.push(a.to_string());
            }
        }
        for s in &self.seeds {
            if let ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } = s.addr()
            {
                let a = format!("{h}:{p}");
                if !candidates.contains(&a) {
                    candidates.push(a);
                }
            }
        }
        let mut last = client_err("no cluster node answered CLUSTER SLOTS".into());
        for addr in candidates {
            let pool = match self.node(&addr) {
                Ok(p) => p,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            match pool.control_query::<Value>(&cmd).await {
                Ok(v) => {
                    let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or("");
                    let map = parse_slots(&v, host);
                    if map.iter().all(Option::is_none) {
                        continue; // a node that knows no slots yet
                    }
                    *self.slots.write().unwrap() = map;
                    self.stale.store(false, Ordering::Release);
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    pub(crate) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// The waiting-connection pool of `key`'s master.
    pub(crate) async fn pool_for_key(&self, key: &str) -> RedisResult<Arc<Pool>> {
        let addr = self.owner(keys::slot(key)).await?;
        self.node(&addr)
    }

    /// Bookkeeping after a redirect-class error on `key`.
    pub(crate) async fn on_redirect(&self, e: &RedisError, r: &Redirect, key: &str) {
        match r {
            Redirect::Moved => {
                if let Some((addr, slot)) = e.redirect_node() {
                    let slot = if (slot as usize) < SLOTS {
                        slot
                    } else {
                        keys::slot(key)
                    };
                    self.slots.write().unwrap()[slot as usize] = Some(Arc::from(addr));
                }
                // Slots usually move in ranges: read the whole map before the next lookup.
                self.mark_stale();
            }
            Redirect::Ask(_) => {}
            Redirect::Retry => self.mark_stale(),
        }
    }

    /// Send a command that must not run twice (acquire, release) to `key`'s master, following
    /// redirects. A connection that fails after sending is returned as an error.
    pub(crate) async fn write<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        key: &str,
        attempts: u32,
        delay: Duration,
    ) -> RedisResult<T> {
        let slot = keys::slot(key);
        let budget = attempts.max(1) * 10;
        let mut tries = 0;
        let mut ask: Option<String> = None;
        loop {
            let result: RedisResult<T> = match ask.take() {
                Some(addr) => self.send_asking(&addr, cmd).await,
                None => match self.owner(slot).await {
                    Ok(addr) => match self.node(&addr) {
                        Ok(pool) => pool.control_query(cmd).await,
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                },
            };
            let e = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            tries += 1;
            match redirect_of(&e) {
                Some(r) if tries <= budget => {
                    self.on_redirect(&e, &r, key).await;
                    match r {
                        Redirect::Moved => {}
                        Redirect::Ask(addr) => ask = Some(addr),
                        Redirect::Retry => tokio::time::sleep(delay).await,
                    }
                }
                Some(_) => return Err(e),
                None => {
                    // Nothing was sent when the node refused the connection or is unknown:
                    // safe to resend after re-reading the map.
                    let unsent = e.is_connection_refusal()
                        || e.kind() == ErrorKind::ClusterConnectionNotFound;
                    if e.is_io_error() || e.is_connection_dropped() || unsent {
                        self.mark_stale();
                    }
                    if unsent && tries <= budget {
                        tokio::time::sleep(delay).await;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// `ASKING` then `cmd` on a dedicated connection to `addr` (nobody else may slip a command
    /// in between).
    async fn send_asking<T: FromRedisValue>(&self, addr: &str, cmd: &Cmd) -> RedisResult<T> {
        let pool = self.node(addr)?;
        let mut pc = pool.get().await?;
        let mut conn = pc.conn();
        let r = async {
            redis::cmd("ASKING").query_async::<()>(&mut conn).await?;
            cmd.query_async::<T>(&mut conn).await
        }
        .await;
        if let Err(e) = &r {
            if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                pc.discard();
            }
        }
        r
    }
}

/// `CLUSTER SLOTS` as slot -> `host:port` of the master (`default_host` when the node reports
/// an empty or unknown host).
fn parse_slots(v: &Value, default_host: &str) -> Vec<Option<Arc<str>>> {
    let mut map = vec![None; SLOTS];
    let Value::Array(ranges) = v else { return map };
    for r in ranges {
        let Value::Array(parts) = r else { continue };
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) if !b.is_empty() && b != b"?" => {
                String::from_utf8_lossy(b).into_owned()
            }
            _ => default_host.to_string(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let addr: Arc<str> = Arc::from(format!("{host}:{port}"));
        for s in (*lo).max(0)..=(*hi).min(SLOTS as i64 - 1) {
            map[s as usize] = Some(addr.clone());
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_slots() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.9", 7004),
            ]),
        ]);
        let m = parse_slots(&v, "h");
        assert_eq!(m[0].as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(m[5460].as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(m[5461].as_deref(), Some("h:7001"));
        assert_eq!(m[16383].as_deref(), Some("h:7001"));
    }
}

//! A Redis Cluster: redis-rs' `cluster_async` connection routes every command to the master of
//! its key's slot (`route_command` with the key's `Route`) and keeps the slot map; its own
//! retries are off so the policy in `retry.rs` decides about redirects, broken connections and
//! resends (acquires and releases must not be resent blindly).
//!
//! What `cluster_async` cannot do is give a waiter a connection of its own on the right node
//! (it multiplexes, and a blocked command would stall that node's connection for everyone), nor
//! tell which node serves a slot. So waits keep their own connections per node, and learn where
//! a slot lives from the `MOVED`/`ASK` replies of the waits themselves: a wait sent to a node
//! that does not serve its slot is refused at once with the right address. The first wait on a
//! slot goes to the seeds in turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult, Value};
use tokio::sync::{OnceCell, Semaphore};

use super::pool::{AsyncConn, Node, Pool};
use super::retry::Redirect;
use super::waiter::Waiter;
use crate::config::Config;
use crate::error::{Error, Result};

pub(crate) struct Cluster {
    client: ClusterClient,
    seeds: Vec<ConnectionInfo>,
    shared: OnceCell<ClusterConnection>,
    watchdog: OnceCell<ClusterConnection>,
    /// The node each slot was last seen served by (from redirects), for waits.
    masters: Mutex<HashMap<Route, Arc<str>>>,
    /// Next seed to try for a slot not seen yet.
    next_seed: AtomicUsize,
    pools: Mutex<HashMap<Arc<str>, Arc<Pool<AsyncConn>>>>,
    waits: Arc<Semaphore>,
    max_idle: usize,
    connect_timeout: Duration,
    response_timeout: Duration,
}

fn master(key: &str) -> Route {
    Route::with_key(key, SlotAddr::Master)
}

fn by_address(addr: &str) -> RedisResult<SingleNodeRoutingInfo> {
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::Client,
                "bad node address",
                addr.to_string(),
            ))
        })?;
    Ok(SingleNodeRoutingInfo::ByAddress { host, port })
}

impl Cluster {
    pub(crate) fn new(seeds: &[String], cfg: &Config, waits: Arc<Semaphore>) -> Result<Cluster> {
        let infos = seeds
            .iter()
            .map(|s| {
                s.as_str()
                    .into_connection_info()
                    .map_err(|e| Error::Config(format!("bad Redis URL '{s}': {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        if infos
            .iter()
            .any(|i| matches!(i.addr(), ConnectionAddr::Unix(_)))
        {
            return Err(Error::Config("cluster seeds must be TCP addresses".into()));
        }
        let client = ClusterClientBuilder::new(infos.clone())
            .retries(0)
            .connection_timeout(cfg.connect_timeout)
            .response_timeout(cfg.response_timeout)
            .build()
            .map_err(|e| Error::Config(format!("bad cluster configuration: {e}")))?;
        Ok(Cluster {
            client,
            seeds: infos,
            shared: OnceCell::new(),
            watchdog: OnceCell::new(),
            masters: Mutex::new(HashMap::new()),
            next_seed: AtomicUsize::new(0),
            pools: Mutex::new(HashMap::new()),
            waits,
            max_idle: cfg.max_idle_wait_connections,
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
        })
    }

    async fn conn(&self, watchdog: bool) -> RedisResult<ClusterConnection> {
        let cell = if watchdog {
            &self.watchdog
        } else {
            &self.shared
        };
        cell.get_or_try_init(|| self.client.get_async_connection())
            .await
            .cloned()
    }

    /// One command for `key`, one attempt: to its slot's master, or where `to` points.
    pub(crate) async fn send(
        &self,
        key: &str,
        cmd: &Cmd,
        to: Option<Redirect>,
    ) -> RedisResult<Value> {
        let mut conn = self.conn(false).await?;
        match to {
            None => {
                let route = SingleNodeRoutingInfo::SpecificNode(master(key));
                conn.route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                    .await
            }
            Some(Redirect::Moved(addr)) => {
                self.learn(key, &addr);
                let route = by_address(&addr)?;
                conn.route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                    .await
            }
            Some(Redirect::Ask(addr)) => {
                let mut pipe = redis::pipe();
                pipe.cmd("ASKING").ignore();
                pipe.add_command(cmd.clone());
                // The command's error reply as a value (a pipeline error would hide its code).
                pipe.ignore_errors();
                let mut replies = conn.route_pipeline(pipe, 1, 1, by_address(&addr)?).await?;
                replies.pop().unwrap_or(Value::Nil).extract_error()
            }
        }
    }

    /// Each `(key, command)` to its key's master, all at once on the watchdog's connection
    /// (the keys may live on different nodes, so one pipeline cannot carry them).
    pub(crate) async fn send_each(
        &self,
        cmds: &[(Arc<str>, Cmd)],
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        let conn = self.conn(true).await?;
        Ok(join_all(cmds.iter().map(|(key, cmd)| {
            let mut c = conn.clone();
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(master(key)));
            async move { c.route_command(cmd.clone(), route).await }
        }))
        .await)
    }

    /// `key` was found served by `addr`.
    pub(crate) fn learn(&self, key: &str, addr: &str) {
        self.masters
            .lock()
            .unwrap()
            .insert(master(key), Arc::from(addr));
    }

    /// The node last seen serving `key` could not be reached: look again next time.
    pub(crate) fn forget(&self, key: &str) {
        self.masters.lock().unwrap().remove(&master(key));
    }

    /// Where `key` was last seen, else the next seed.
    pub(crate) fn node_for(&self, key: &str) -> Arc<str> {
        if let Some(a) = self.masters.lock().unwrap().get(&master(key)) {
            return a.clone();
        }
        let i = self.next_seed.fetch_add(1, Ordering::Relaxed) % self.seeds.len();
        Arc::from(self.seeds[i].addr().to_string())
    }

    /// A connection of its own on the node serving `key` (or on `at`, where a redirect pointed).
    pub(crate) async fn waiter(&self, key: &str, at: Option<&str>) -> RedisResult<Waiter> {
        let addr: Arc<str> = match at {
            Some(a) => Arc::from(a),
            None => self.node_for(key),
        };
        Ok(Waiter::asynchronous(self.pool(&addr)?.get(true).await?))
    }

    fn pool(&self, addr: &Arc<str>) -> RedisResult<Arc<Pool<AsyncConn>>> {
        if let Some(p) = self.pools.lock().unwrap().get(addr) {
            return Ok(p.clone());
        }
        let SingleNodeRoutingInfo::ByAddress { host, port } = by_address(addr)? else {
            unreachable!("by_address routes by address")
        };
        // The seed's settings (TLS, credentials, database) with this node's address.
        let seed = &self.seeds[0];
        let a = match seed.addr().clone() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = redis::Client::open(seed.clone().set_addr(a))?;
        let node = Arc::new(Node::new(
            client,
            self.connect_timeout,
            self.response_timeout,
        ));
        let pool = Pool::new(node, self.max_idle, self.waits.clone());
        let mut pools = self.pools.lock().unwrap();
        Ok(pools.entry(addr.clone()).or_insert(pool).clone())
    }
}

//! A Redis Cluster: redis-rs' `cluster_async` connection routes every command to the master of
//! its key's slot (`route_command` with the key's `Route`) and keeps the slot map; its own
//! retries are off so the policy in `retry.rs` decides about redirects, broken connections and
//! resends (acquires and releases must not be resent blindly).
//!
//! What `cluster_async` cannot do is tell which node serves a slot. A wait must know it: it is
//! queued in the client's session on that node, whose listener receives the outcome, and a
//! cancel goes there too. So acquires are routed by address from a slot map of our own, read
//! with `CLUSTER SLOTS` when a slot is not known and corrected by the `MOVED` replies of the
//! commands themselves (a command sent to a node that does not serve its slot is refused at
//! once with the right address). A command that blocks its connection (`WAIT`) gets a
//! connection of its own on the node.
//!
//! `route_command` hands a server's error reply back as a value (`Value::ServerError`) unless
//! it is a redirect or a "try again": every reply is turned into an error here, as a single
//! server's `query_async` does. Taken for a reply, a refused `RSEM.ACQUIRE` read as granted
//! (any reply but nil grants) and every other refusal as a broken connection.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult, Value};
use tokio::sync::OnceCell;

use super::pool::{AsyncConn, Node, Pool};
use super::retry::Redirect;
use super::waiter::Waiter;
use super::{reply_at, Request};
use crate::config::{redis_client, Config};
use crate::error::{Error, Result};

pub(crate) struct Cluster {
    client: ClusterClient,
    seeds: Vec<ConnectionInfo>,
    #[cfg(feature = "tls")]
    certs: Option<crate::config::Certificates>,
    shared: OnceCell<ClusterConnection>,
    watchdog: OnceCell<ClusterConnection>,
    /// The node each slot was last seen served by (`CLUSTER SLOTS`, redirects).
    masters: Mutex<HashMap<Route, Arc<str>>>,
    /// When the slot map was last read (read at most every [`REFRESH_EVERY`]).
    refreshed: Mutex<Option<Instant>>,
    /// Next seed to try for a slot not seen yet.
    next_seed: AtomicUsize,
    pools: Mutex<HashMap<Arc<str>, Arc<Pool<AsyncConn>>>>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// Idle dedicated connections kept per node (replica sync's `WAIT`).
const MAX_IDLE_DEDICATED: usize = 4;

/// The slot map is read again at most this often (many waits may find it stale at once).
const REFRESH_EVERY: Duration = Duration::from_millis(100);

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
    pub(crate) fn new(seeds: &[String], cfg: &Config) -> Result<Cluster> {
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
        let certs = cfg.tls.certificates();
        // The CA and client certificate in every seed's settings too: the connections of our
        // own to each node (`pool`) copy the first seed's.
        let infos = match &certs {
            None => infos,
            Some(c) => infos
                .into_iter()
                .map(|i| {
                    redis_client(i, Some(c))
                        .map(|cl| cl.get_connection_info().clone())
                        .map_err(|e| Error::Config(format!("bad TLS settings: {e}")))
                })
                .collect::<Result<Vec<_>>>()?,
        };
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
        let mut builder = ClusterClientBuilder::new(infos.clone());
        #[cfg(feature = "tls")]
        if let Some(c) = certs.clone() {
            builder = builder.certs(c);
        }
        let client = builder
            .retries(0)
            .connection_timeout(cfg.connect_timeout)
            .response_timeout(cfg.response_timeout)
            .build()
            .map_err(|e| Error::Config(format!("bad cluster configuration: {e}")))?;
        Ok(Cluster {
            client,
            seeds: infos,
            #[cfg(feature = "tls")]
            certs,
            shared: OnceCell::new(),
            watchdog: OnceCell::new(),
            masters: Mutex::new(HashMap::new()),
            refreshed: Mutex::new(None),
            next_seed: AtomicUsize::new(0),
            pools: Mutex::new(HashMap::new()),
            connect_timeout: cfg.connect_timeout,
            response_timeout: cfg.response_timeout,
        })
    }

    /// A cluster client of its own for sharded pub/sub: RESP3 (`SSUBSCRIBE` needs it), each
    /// message pushed to `pushes`. Its connection subscribes each channel on the node serving
    /// the channel's slot, and subscribes again where the slot moves (redis-rs' subscription
    /// tracker).
    pub(crate) fn sharded_pubsub(
        &self,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> RedisResult<ClusterClient> {
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
        let mut builder = ClusterClientBuilder::new(self.seeds.clone())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .connection_timeout(self.connect_timeout);
        #[cfg(feature = "tls")]
        if let Some(c) = self.certs.clone() {
            builder = builder.certs(c);
        }
        builder.build()
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

    /// One request for `key`, one attempt: to its slot's master, or where `to` points.
    pub(crate) async fn send(
        &self,
        key: &str,
        req: Request<'_>,
        to: Option<Redirect>,
    ) -> RedisResult<Value> {
        let mut conn = self.conn(false).await?;
        let (route, asking) = match to {
            None => (SingleNodeRoutingInfo::SpecificNode(master(key)), false),
            Some(Redirect::Moved(addr)) => {
                self.learn(key, &addr);
                (by_address(&addr)?, false)
            }
            Some(Redirect::Ask(addr)) => (by_address(&addr)?, true),
        };
        match req {
            Request::One(cmd) if !asking => conn
                .route_command(cmd.clone(), RoutingInfo::SingleNode(route))
                .await
                .and_then(Value::extract_error),
            _ => {
                // Every reply as a value; the command's is the one after `ASKING`'s.
                let at = usize::from(asking);
                let replies = conn
                    .route_pipeline(req.pipeline(asking), 0, at + req.len(), route)
                    .await?;
                reply_at(replies, at)
            }
        }
    }

    /// One command to the node at `addr` (after `ASKING` when `asking`), one attempt.
    pub(crate) async fn send_at(&self, addr: &str, cmd: &Cmd, asking: bool) -> RedisResult<Value> {
        let mut conn = self.conn(false).await?;
        if !asking {
            let route = RoutingInfo::SingleNode(by_address(addr)?);
            return conn
                .route_command(cmd.clone(), route)
                .await
                .and_then(Value::extract_error);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").ignore();
        pipe.add_command(cmd.clone());
        // The command's error reply as a value (a pipeline error would hide its code).
        pipe.ignore_errors();
        let mut replies = conn.route_pipeline(pipe, 1, 1, by_address(addr)?).await?;
        replies.pop().unwrap_or(Value::Nil).extract_error()
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
            async move {
                c.route_command(cmd.clone(), route)
                    .await
                    .and_then(Value::extract_error)
            }
        }))
        .await)
    }

    /// `key` was found served by `addr`.
    pub(crate) fn learn(&self, key: &str, addr: &str) {
        self.masters.lock().insert(master(key), Arc::from(addr));
    }

    /// The node last seen serving `key` could not be reached: look again next time.
    pub(crate) fn forget(&self, key: &str) {
        self.masters.lock().remove(&master(key));
    }

    /// Where `key` was last seen, else the next seed.
    pub(crate) fn node_for(&self, key: &str) -> Arc<str> {
        if let Some(a) = self.masters.lock().get(&master(key)) {
            return a.clone();
        }
        let i = self.next_seed.fetch_add(1, Ordering::Relaxed) % self.seeds.len();
        Arc::from(self.seeds[i].addr().to_string())
    }

    /// The node serving `key`: from the slot map, read again (`CLUSTER SLOTS`) when the slot is
    /// not in it; else the next seed (which redirects if it is the wrong node).
    pub(crate) async fn node_of(&self, key: &str) -> Arc<str> {
        if let Some(a) = self.masters.lock().get(&master(key)) {
            return a.clone();
        }
        let due = {
            let mut last = self.refreshed.lock();
            let due = last.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if due {
            if let Err(e) = self.refresh().await {
                tracing::debug!(error = %e, "rlock: can't read the cluster's slot map");
            }
        }
        self.node_for(key)
    }

    /// Read the slot map with `CLUSTER SLOTS`.
    async fn refresh(&self) -> RedisResult<()> {
        let mut conn = self.conn(false).await?;
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let slots = conn.route_command(cmd, random).await?;
        let ranges = slot_ranges(slots);
        let mut masters = self.masters.lock();
        for (start, end, addr) in ranges {
            for slot in start..=end {
                masters.insert(Route::new(slot, SlotAddr::Master), addr.clone());
            }
        }
        Ok(())
    }

    /// A connection of its own on the node serving `key` (or on `at`, where a redirect pointed).
    pub(crate) async fn waiter(&self, key: &str, at: Option<&str>) -> RedisResult<Waiter> {
        let addr: Arc<str> = match at {
            Some(a) => Arc::from(a),
            None => self.node_of(key).await,
        };
        Ok(Waiter::asynchronous(self.pool(&addr)?.get().await?))
    }

    /// The node at `addr`, to open connections of its own to.
    pub(crate) fn node(&self, addr: &Arc<str>) -> RedisResult<Arc<Node>> {
        Ok(self.pool(addr)?.node.clone())
    }

    fn pool(&self, addr: &Arc<str>) -> RedisResult<Arc<Pool<AsyncConn>>> {
        if let Some(p) = self.pools.lock().get(addr) {
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
        let pool = Pool::new(node, MAX_IDLE_DEDICATED);
        let mut pools = self.pools.lock();
        Ok(pools.entry(addr.clone()).or_insert(pool).clone())
    }
}

/// The master of each slot range in a `CLUSTER SLOTS` reply: `[start, end, [host, port, ...],
/// replicas...]` per range (a range whose master has no address is left out).
fn slot_ranges(reply: Value) -> Vec<(u16, u16, Arc<str>)> {
    let Value::Array(ranges) = reply else {
        return Vec::new();
    };
    ranges
        .into_iter()
        .filter_map(|r| {
            let Value::Array(f) = r else { return None };
            let (Value::Int(start), Value::Int(end), Value::Array(m)) =
                (f.first()?, f.get(1)?, f.get(2)?)
            else {
                return None;
            };
            let host = match m.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            let Value::Int(port) = m.get(1)? else {
                return None;
            };
            if host.is_empty() || host == "?" {
                return None;
            }
            let (start, end) = (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?);
            Some((start, end.min(16383), Arc::from(format!("{host}:{port}"))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_map_from_cluster_slots() {
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.as_bytes().to_vec()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
        ]);
        let r = slot_ranges(reply);
        assert_eq!(r.len(), 1, "a master without an address is left out");
        assert_eq!((r[0].0, r[0].1, &*r[0].2), (0, 5460, "127.0.0.1:7000"));
        assert!(slot_ranges(Value::Nil).is_empty());
    }
}

//! Transport: the one place that owns connections, routing, redirects and the retry policy.
//! Above it, operations send commands by key (or to a node by address, for what a session
//! queued there) and get replies or errors that already name the server; they never see a
//! connection, except the [`Waiter`] replica sync holds for `WAIT` and the session listener's
//! own connection (to a [`Node`]).

#[cfg(feature = "cluster")]
mod cluster;
mod pool;
mod retry;
#[cfg(feature = "sentinel")]
mod sentinel;
mod single;
mod waiter;

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue, RedisResult, Value};

pub(crate) use pool::overlapped;
pub(crate) use pool::Node;
pub(crate) use retry::{classify, Delivery, Failure, Redirect, RetryPolicy};
pub(crate) use waiter::Waiter;

use crate::config::{redis_client, Config};
use crate::error::{Error, Result};
use crate::runtime::Background;

/// What one attempt writes: a command, or a command with a clean-up behind it in the same
/// write (its reply read and dropped), so that the clean-up costs no round trip of its own.
#[derive(Clone, Copy)]
pub(crate) enum Request<'a> {
    One(&'a Cmd),
    Then(&'a Cmd, &'a Cmd),
}

impl Request<'_> {
    /// The commands it writes.
    fn len(self) -> usize {
        match self {
            Request::One(_) => 1,
            Request::Then(..) => 2,
        }
    }

    /// As one pipeline, after `ASKING` when `asking`; every reply comes back as a value (a
    /// pipeline's error would hide its code), the command's is the first after `ASKING`'s.
    fn pipeline(self, asking: bool) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        match self {
            Request::One(c) => pipe.add_command(c.clone()),
            Request::Then(c, then) => pipe.add_command(c.clone()).add_command(then.clone()),
        };
        pipe.ignore_errors();
        pipe
    }

    /// Written and answered on an async connection: the command's reply, or its error.
    async fn on<C: redis::aio::ConnectionLike>(self, conn: &mut C) -> RedisResult<Value> {
        match self {
            Request::One(c) => c.query_async(conn).await,
            Request::Then(..) => {
                let replies: Vec<Value> = self.pipeline(false).query_async(conn).await?;
                reply_at(replies, 0)
            }
        }
    }
}

/// The reply at `at` of a [`Request::pipeline`]'s replies, an error reply as an error.
fn reply_at(replies: Vec<Value>, at: usize) -> RedisResult<Value> {
    replies
        .into_iter()
        .nth(at)
        .unwrap_or(Value::Nil)
        .extract_error()
}

/// How the caller waits for replies: on its own thread (sync API) or by awaiting (async API).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Io {
    Blocking,
    Async,
}

pub(crate) struct Transport {
    via: Via,
    pub(crate) policy: RetryPolicy,
    response_timeout: Duration,
}

/// The deployment: one server, a cluster (the `cluster` feature) or the primary Sentinel names
/// (the `sentinel` feature).
enum Via {
    Single(single::Single),
    #[cfg(feature = "cluster")]
    Cluster(Box<cluster::Cluster>),
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<sentinel::SentinelTransport>),
}

impl Via {
    /// Must run inside the client runtime's context.
    fn new(cfg: &Config) -> Result<Via> {
        #[cfg(feature = "cluster")]
        if let Some(seeds) = &cfg.cluster {
            return Ok(Via::Cluster(Box::new(cluster::Cluster::new(seeds, cfg)?)));
        }
        #[cfg(feature = "sentinel")]
        if let Some(s) = &cfg.sentinel {
            return Ok(Via::Sentinel(sentinel::SentinelTransport::new(s, cfg)?));
        }
        let client = redis_client(cfg.url.as_str(), cfg.tls.certificates().as_ref())
            .map_err(|e| Error::Config(format!("bad Redis URL '{}': {e}", cfg.url)))?;
        Ok(Via::Single(single::Single::new(client, cfg)?))
    }
}

/// The client's connections use rustls (redis-rs' `tls-rustls`), which takes the process's
/// default crypto provider: install ring's, unless the application installed one already.
#[cfg(feature = "tls")]
fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

// Without the `cluster` feature, keys, redirects and cluster addresses route nothing: one
// server (or the primary Sentinel names) serves every key.
#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
impl Transport {
    /// Must run inside the client runtime's context.
    pub(crate) fn new(cfg: &Config) -> Result<Transport> {
        #[cfg(feature = "tls")]
        tls_provider();
        Ok(Transport {
            via: Via::new(cfg)?,
            policy: RetryPolicy {
                connect_timeout: cfg.connect_timeout,
                delay: cfg.retry_delay,
                attempts: cfg.retry_attempts,
                metrics: cfg.reporting(),
            },
            response_timeout: cfg.response_timeout,
        })
    }

    /// Whether the deployment is one server at one address (every key is served there).
    pub(crate) fn is_single(&self) -> bool {
        matches!(self.via, Via::Single(_))
    }

    /// The address to name in an error about `key`.
    pub(crate) fn addr_of(&self, key: &str) -> Arc<str> {
        match &self.via {
            Via::Single(s) => s.node.addr.clone(),
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => c.node_for(key),
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => s.addr(),
        }
    }

    /// `e`, met while talking about `key`, as the caller's error.
    pub(crate) fn error(&self, e: redis::RedisError, key: &str) -> Error {
        Error::from_redis(e, &self.addr_of(key), self.response_timeout)
    }

    /// `e`, met at the node `addr`, as the caller's error.
    pub(crate) fn error_at(&self, e: redis::RedisError, addr: &str) -> Error {
        Error::from_redis(e, addr, self.response_timeout)
    }

    /// `cmd` about `key`, sent and retried per the policy.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        bg: &Background,
        io: Io,
        key: &str,
        cmd: &Cmd,
        delivery: Delivery,
    ) -> Result<T> {
        self.request(bg, io, key, Request::One(cmd), delivery).await
    }

    /// [`Transport::query`] of `req`: its command's reply.
    pub(crate) async fn request<T: FromRedisValue>(
        &self,
        bg: &Background,
        io: Io,
        key: &str,
        req: Request<'_>,
        delivery: Delivery,
    ) -> Result<T> {
        let reply = self
            .policy
            .run(bg, delivery, |to| self.send(io, key, req, to))
            .await
            .map_err(|e| self.error(e, key))?;
        T::from_redis_value(reply).map_err(|e| self.error(e.into(), key))
    }

    async fn send(
        &self,
        io: Io,
        key: &str,
        req: Request<'_>,
        to: Option<Redirect>,
    ) -> RedisResult<Value> {
        // The cluster's and Sentinel's calls are boxed here and below: inline, their larger
        // states made every caller's future carry them (a single server's acquire included;
        // see `ops::lock`'s `an_awaited_acquire_stays_small`).
        match &self.via {
            Via::Single(s) => s.send(io, req).await,
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => Box::pin(c.send(key, req, to)).await,
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => Box::pin(s.send(io, req)).await,
        }
    }

    /// Each `(key, command)` once, all in one round trip per node (the watchdog's renewals):
    /// a reply per command, or an error when the batch could not be sent.
    pub(crate) async fn send_each(
        &self,
        cmds: &[(Arc<str>, Cmd)],
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        match &self.via {
            Via::Single(s) => {
                let cmds: Vec<Cmd> = cmds.iter().map(|(_, c)| c.clone()).collect();
                s.send_each(&cmds).await
            }
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => c.send_each(cmds).await,
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => {
                let cmds: Vec<Cmd> = cmds.iter().map(|(_, c)| c.clone()).collect();
                s.send_each(&cmds).await
            }
        }
    }

    /// Whether waits subscribe with sharded pub/sub (`SSUBSCRIBE`, and the scripts publish with
    /// `SPUBLISH`): in a cluster, as Redisson 3.23+ does by default (`ShardedSubscriptionMode.AUTO`
    /// on Redis 7+ and Valkey, every server rlock supports), so that a Java service's waits hear
    /// this client's releases and the other way round.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        #[cfg(feature = "cluster")]
        if let Via::Cluster(_) = self.via {
            return true;
        }
        false
    }

    /// The command Redisson's scripts publish with on this deployment.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.sharded_pubsub() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// A cluster client for sharded pub/sub, its messages pushed to `pushes` (clusters only).
    #[cfg(feature = "cluster")]
    pub(crate) fn sharded_client(
        &self,
        pushes: tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
    ) -> Option<RedisResult<redis::cluster::ClusterClient>> {
        match &self.via {
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => Some(c.sharded_pubsub(pushes)),
            _ => None,
        }
    }

    /// The node serving `key` now, by address (a cluster reads its slot map when it does not
    /// know the slot).
    pub(crate) async fn node_of(&self, key: &str) -> Arc<str> {
        match &self.via {
            Via::Single(s) => s.node.addr.clone(),
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => Box::pin(c.node_of(key)).await,
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => Box::pin(s.node_of()).await,
        }
    }

    /// The node at `addr` (for connections of its own: the session listener).
    pub(crate) fn node(&self, addr: &Arc<str>) -> RedisResult<Arc<Node>> {
        match &self.via {
            Via::Single(s) => Ok(s.node.clone()),
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => c.node(addr),
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => s.node(addr),
        }
    }

    /// `cmd` to the node at `addr` (after `ASKING` when `asking`), one attempt: for commands
    /// that must reach a given node (a wait queued in the session there, its cancel). One
    /// server ([`Transport::is_single`]) has one node: `addr` is not read then.
    pub(crate) async fn send_at(
        &self,
        io: Io,
        addr: &str,
        cmd: &Cmd,
        asking: bool,
    ) -> RedisResult<Value> {
        match &self.via {
            Via::Single(s) => s.send(io, Request::One(cmd)).await,
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => Box::pin(c.send_at(addr, cmd, asking)).await,
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => Box::pin(s.send_at(io, addr, cmd)).await,
        }
    }

    /// How long a queued wait sent with `io` may keep its connection parked for a grant
    /// (`QUEUE ... BLOCK park_ms`), if the connection is the caller's alone: a sync caller's
    /// pooled blocking connection (single server, or the primary Sentinel names). A multiplexed connection (async callers, and
    /// every caller in a cluster) must never be parked: it carries everyone's commands.
    ///
    /// Why park at all, measured with `rlock-bench --only contended,family` (one run, client /
    /// raw `BLOCK` clients): 8 threads on one lock 1.17× parked against 0.68× through the
    /// listener, 32 threads 0.98× against 0.76×, read-write lock 0.97× against 0.81×: a grant
    /// through the listener costs one more command and two more thread wake-ups. Why 50 ms: a
    /// hand-off among a few dozen threads takes a few ms, and a longer wait pays one `QUEUED`
    /// reply it no longer notices; the connection is back in the pool after at most that long.
    /// Half the response timeout at most, so the parked read never times out.
    pub(crate) fn park_ms(&self, io: Io) -> Option<u64> {
        const PARK: Duration = Duration::from_millis(50);
        #[cfg(feature = "cluster")]
        if let Via::Cluster(_) = self.via {
            return None;
        }
        if io != Io::Blocking {
            return None;
        }
        let ms = PARK.min(self.response_timeout / 2).as_millis() as u64;
        (ms > 0).then_some(ms)
    }

    /// A connection of its own on the node serving `key` (or on `at`, where a redirect
    /// pointed), for a command that blocks it (`WAIT`).
    pub(crate) async fn waiter(&self, io: Io, key: &str, at: Option<&str>) -> RedisResult<Waiter> {
        match &self.via {
            Via::Single(s) => s.waiter(io).await,
            #[cfg(feature = "cluster")]
            Via::Cluster(c) => c.waiter(key, at).await,
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => s.waiter(io).await,
        }
    }

    /// The primary's address each time Sentinel names another one; `None` when the client does
    /// not use Sentinel (a single server's address never changes; a cluster's waits follow
    /// their slot's redirects).
    #[cfg(feature = "sentinel")]
    pub(crate) fn primary_changes(&self) -> Option<tokio::sync::watch::Receiver<Option<Arc<str>>>> {
        match &self.via {
            #[cfg(feature = "sentinel")]
            Via::Sentinel(s) => Some(s.primary_changes()),
            _ => None,
        }
    }

    /// A wait found `key` served by `addr`.
    pub(crate) fn learn(&self, key: &str, addr: &str) {
        #[cfg(feature = "cluster")]
        if let Via::Cluster(c) = &self.via {
            c.learn(key, addr);
        }
    }

    /// The node a wait for `key` used could not be reached or turned into a replica.
    pub(crate) fn forget(&self, key: &str) {
        #[cfg(feature = "cluster")]
        if let Via::Cluster(c) = &self.via {
            c.forget(key);
        }
    }
}

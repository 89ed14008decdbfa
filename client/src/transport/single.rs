//! One Redis server: how each kind of caller reaches it.
//!
//! - Async requests share one multiplexed `ConnectionManager` (it reconnects by itself; its own
//!   retries are off, see `retry.rs`), the watchdog has another.
//! - Sync requests and sync waits use a blocking connection of their own from a pool, read and
//!   written on the caller's thread. Measured with `rlock-bench --only client` (section 6,
//!   unpipelined acquire+release pairs, client / raw `RLOCK.*` over a blocking connection,
//!   three alternating runs on a shared 2-core machine): the sync API driving the multiplexed
//!   connection with `block_on` (its driver on the client's runtime: two thread wake-ups per
//!   command) 0.20x, 0.42x, 0.40x; the pooled blocking connection 1.03x, 0.79x, 0.90x in the
//!   same runs; the old way (every call spawned onto the client's runtime and answered over a
//!   channel) 0.41x in `make bench`. Nothing but the caller's thread touches the request.
//! - Waits take no connection: they are queued through the client's session, whose listener
//!   (`session/`) has a connection of its own. Replica sync's `WAIT` blocks its connection, so
//!   it takes one from a pool of dedicated connections.

use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, RedisResult, Value};

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use tokio::runtime::Handle;

use super::pool::{self, AsyncConn, BlockingConn, Node, Pool};
use super::waiter::Waiter;
use super::{Io, Request};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime;

pub(crate) struct Single {
    pub(crate) node: Arc<Node>,
    shared: ConnectionManager,
    /// Async requests polled by a multi-thread runtime other than the client's: a multiplexed
    /// connection per such runtime, driven there (see `runtime::caller`).
    local: Mutex<Vec<(tokio::runtime::Id, Local)>>,
    watchdog: ConnectionManager,
    blocking: Arc<Pool<BlockingConn>>,
    dedicated: Arc<Pool<AsyncConn>>,
}

/// A caller runtime's connection, opened once by the first request that needs it: requests
/// that come meanwhile wait for that one. (Each opening its own, the first requests of 1,000
/// tasks spawned at once opened about 970 connections, kept one and closed the rest.)
type Local = Arc<tokio::sync::OnceCell<MultiplexedConnection>>;

/// Idle blocking connections kept for sync calls: one per thread that calls at the same time
/// (a call holds one for its round trip only; waits hold none).
const MAX_IDLE_BLOCKING: usize = 64;

/// Runtimes other than the client's whose requests have a connection of their own: a service
/// has one or two; more are dropped oldest first.
const MAX_CALLER_RUNTIMES: usize = 4;

/// Idle dedicated async connections kept (replica sync's `WAIT`).
const MAX_IDLE_DEDICATED: usize = 4;

impl Single {
    /// Must run inside the client runtime's context (the managers spawn their drivers there).
    pub(crate) fn new(client: redis::Client, cfg: &Config) -> Result<Single> {
        let node = Arc::new(Node::new(client, cfg.connect_timeout, cfg.response_timeout));
        let manager = || {
            let mc = ConnectionManagerConfig::new()
                .set_response_timeout(Some(cfg.response_timeout))
                .set_connection_timeout(Some(cfg.connect_timeout))
                .set_number_of_retries(0);
            ConnectionManager::new_lazy_with_config(node.client.clone(), mc)
                .map_err(|e| Error::Config(format!("bad connection settings: {e}")))
        };
        Ok(Single {
            shared: manager()?,
            local: Mutex::new(Vec::new()),
            watchdog: manager()?,
            blocking: Pool::new(node.clone(), MAX_IDLE_BLOCKING),
            dedicated: Pool::new(node.clone(), MAX_IDLE_DEDICATED),
            node,
        })
    }

    /// One request, one attempt.
    pub(crate) async fn send(&self, io: Io, req: Request<'_>) -> RedisResult<Value> {
        match io {
            Io::Blocking => self.blocking.get().await?.query(req).await,
            Io::Async => match runtime::caller() {
                Some(rt) => self.send_local(rt, req).await,
                None => req.on(&mut self.shared.clone()).await,
            },
        }
    }

    /// `req` on the connection driven by `rt`, the runtime polling the request (opened on first
    /// use; a broken one is dropped, and the next request opens another).
    async fn send_local(&self, rt: Handle, req: Request<'_>) -> RedisResult<Value> {
        let id = rt.id();
        let cell = {
            let mut local = self.local.lock();
            match local.iter().find(|(r, _)| *r == id) {
                Some((_, c)) => c.clone(),
                None => {
                    if local.len() >= MAX_CALLER_RUNTIMES {
                        // The oldest goes (a runtime that ended, most likely): its requests, if
                        // any still come, open it again.
                        local.remove(0);
                    }
                    let c = Local::default();
                    local.push((id, c.clone()));
                    c
                }
            }
        };
        let opened = cell.get_or_try_init(|| async {
            let node = self.node.clone();
            // Opened by a task of `rt`, so that its driver is spawned there.
            rt.spawn(async move { pool::multiplexed(&node, Some(node.response_timeout)).await })
                .await
                .map_err(|e| std::io::Error::other(format!("connecting: {e}")))?
        });
        let mut conn = opened.await?.clone();
        let r = req.on(&mut conn).await;
        if r.as_ref().is_err_and(pool::broken) {
            // This connection only: another may have taken its place already.
            self.local
                .lock()
                .retain(|(r, c)| *r != id || !Arc::ptr_eq(c, &cell));
        }
        r
    }

    /// Every command in one pipelined round trip on the watchdog's connection: one reply each.
    pub(crate) async fn send_each(&self, cmds: &[Cmd]) -> RedisResult<Vec<RedisResult<Value>>> {
        let mut pipe = redis::pipe();
        for c in cmds {
            pipe.add_command(c.clone());
        }
        pipe.ignore_errors();
        let replies: Vec<Value> = pipe.query_async(&mut self.watchdog.clone()).await?;
        Ok(replies.into_iter().map(Value::extract_error).collect())
    }

    /// A connection of its own for a command that blocks it.
    pub(crate) async fn waiter(&self, io: Io) -> RedisResult<Waiter> {
        Ok(match io {
            Io::Blocking => Waiter::blocking(self.blocking.get().await?),
            Io::Async => Waiter::asynchronous(self.dedicated.get().await?),
        })
    }
}

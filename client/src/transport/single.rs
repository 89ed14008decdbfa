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

use super::pool::{AsyncConn, BlockingConn, Node, Pool};
use super::waiter::Waiter;
use super::Io;
use crate::config::Config;
use crate::error::{Error, Result};

pub(crate) struct Single {
    pub(crate) node: Arc<Node>,
    shared: ConnectionManager,
    watchdog: ConnectionManager,
    blocking: Arc<Pool<BlockingConn>>,
    dedicated: Arc<Pool<AsyncConn>>,
}

/// Idle blocking connections kept for sync calls: one per thread that calls at the same time
/// (a call holds one for its round trip only; waits hold none).
const MAX_IDLE_BLOCKING: usize = 64;

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
            watchdog: manager()?,
            blocking: Pool::new(node.clone(), MAX_IDLE_BLOCKING),
            dedicated: Pool::new(node.clone(), MAX_IDLE_DEDICATED),
            node,
        })
    }

    /// One command, one attempt.
    pub(crate) async fn send(&self, io: Io, cmd: &Cmd) -> RedisResult<Value> {
        match io {
            Io::Blocking => self.blocking.get().await?.query(cmd).await,
            Io::Async => cmd.query_async(&mut self.shared.clone()).await,
        }
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

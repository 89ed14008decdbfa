//! [`Waiter`]: a connection of its own for one waiting command, whose reply can be awaited in
//! parts (give up for now, withdraw the command, read the reply it got in the end).

use std::future::Future;
use std::time::Instant;

use futures_util::future::BoxFuture;
use redis::{Cmd, Pipeline, RedisResult, Value};

use super::pool::{broken, AsyncConn, BlockingConn, Leased};
use crate::runtime::Background;

/// A dedicated connection to the node that serves a key, with at most one command in flight.
pub(crate) struct Waiter {
    conn: Conn,
    pending: Pending,
}

enum Conn {
    Blocking(Leased<BlockingConn>),
    Async(Leased<AsyncConn>),
}

enum Pending {
    Idle,
    /// Sync: written and read by `reply`.
    Blocking(Pipeline),
    Async(BoxFuture<'static, RedisResult<Vec<Value>>>),
}

impl Waiter {
    pub(crate) fn blocking(conn: Leased<BlockingConn>) -> Waiter {
        Waiter {
            conn: Conn::Blocking(conn),
            pending: Pending::Idle,
        }
    }

    pub(crate) fn asynchronous(conn: Leased<AsyncConn>) -> Waiter {
        Waiter {
            conn: Conn::Async(conn),
            pending: Pending::Idle,
        }
    }

    /// Send `cmd` (after `ASKING` when `asking`); its reply comes from [`Waiter::reply`].
    pub(crate) fn send(&mut self, cmd: Cmd, asking: bool) {
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(cmd);
        self.send_all(pipe);
    }

    /// Send every command of `pipe` at once; [`Waiter::reply`] gives the last one's reply.
    pub(crate) fn send_all(&mut self, pipe: Pipeline) {
        self.pending = match &mut self.conn {
            Conn::Blocking(_) => Pending::Blocking(pipe),
            Conn::Async(c) => {
                let mut conn = c.get().conn.clone();
                let mut pipe = pipe;
                // Error replies come back as values, read like the blocking connection's.
                pipe.ignore_errors();
                Pending::Async(Box::pin(async move { pipe.query_async(&mut conn).await }))
            }
        };
    }

    /// The last reply of what was sent, once it comes; `None` if it has not come by `until`
    /// (or nothing is pending). An error reply of an earlier command (`ASKING`) is returned as
    /// the reply.
    pub(crate) async fn reply(
        &mut self,
        bg: &Background,
        until: Option<Instant>,
    ) -> Option<RedisResult<Value>> {
        let r = match (&mut self.conn, &mut self.pending) {
            (_, Pending::Idle) => return None,
            (Conn::Blocking(c), Pending::Blocking(pipe)) => match read_blocking(c, pipe, until) {
                Some(r) => r,
                None => {
                    self.discard();
                    return None;
                }
            },
            (Conn::Async(_), Pending::Async(fut)) => {
                let r = match until {
                    None => fut.await,
                    Some(t) => tokio::select! {
                        r = fut => r,
                        _ = bg.sleep_until(t) => return None,
                    },
                };
                r.and_then(last_reply)
            }
            _ => unreachable!("a pending command matches its connection"),
        };
        self.pending = Pending::Idle;
        if r.as_ref().is_err_and(broken) {
            self.discard();
        }
        Some(r)
    }

    /// Send `pipe` and wait for its last reply.
    pub(crate) async fn query(&mut self, bg: &Background, pipe: Pipeline) -> RedisResult<Value> {
        self.send_all(pipe);
        self.reply(bg, None).await.unwrap_or_else(|| {
            Err(redis::RedisError::from(std::io::Error::from(
                std::io::ErrorKind::TimedOut,
            )))
        })
    }

    /// Whether a reply that did not come by `until` can still be read later (async only).
    pub(crate) fn resumable(&self) -> bool {
        matches!(self.pending, Pending::Async(_))
    }

    /// `CLIENT ID` of the connection (for `CLIENT UNBLOCK`).
    pub(crate) fn id(&self) -> i64 {
        match &self.conn {
            Conn::Blocking(c) => c.id(),
            Conn::Async(c) => c.id(),
        }
    }

    /// `CLIENT UNBLOCK` this waiter, from another connection to its node. (The future does
    /// not borrow the waiter, whose pending reply is not `Sync`.)
    pub(crate) fn unblock(&self) -> impl Future<Output = RedisResult<Value>> + Send + 'static {
        let mut cmd = redis::cmd("CLIENT");
        cmd.arg("UNBLOCK").arg(self.id());
        let pool = match &self.conn {
            Conn::Blocking(c) => Ok(c.pool.clone()),
            Conn::Async(c) => Err(c.pool.clone()),
        };
        async move {
            match pool {
                Ok(p) => p.get(false).await?.query(&cmd).await,
                Err(p) => p.get(false).await?.query(&cmd).await,
            }
        }
    }

    /// Close the connection instead of reusing it (see [`Leased::discard`]).
    pub(crate) fn discard(&mut self) {
        self.pending = Pending::Idle;
        match &mut self.conn {
            Conn::Blocking(c) => c.discard(),
            Conn::Async(c) => c.discard(),
        }
    }
}

/// Write `pipe`, then read its replies until `until`. `None`: no complete reply by then. A
/// blocking connection can't resume a read that timed out (redis-rs skips the late reply), so a
/// sync wait that gets no reply is not resumable: the caller discards the connection.
fn read_blocking(
    c: &mut Leased<BlockingConn>,
    pipe: &Pipeline,
    until: Option<Instant>,
) -> Option<RedisResult<Value>> {
    let restore = c.pool.node.response_timeout;
    let conn = &mut c.get().conn;
    if let Err(e) = conn.send_packed_command(&pipe.get_packed_pipeline()) {
        return Some(Err(e));
    }
    // A read timeout of zero is refused by the OS: wait at least a millisecond.
    let timeout = until.map(|t| {
        t.saturating_duration_since(Instant::now())
            .max(std::time::Duration::from_millis(1))
    });
    if let Err(e) = conn.set_read_timeout(timeout) {
        return Some(Err(e));
    }
    let mut replies = Vec::with_capacity(pipe.len());
    for _ in 0..pipe.len() {
        match conn.recv_response() {
            Ok(v) => replies.push(v),
            Err(e) if e.is_timeout() => return None,
            Err(e) => return Some(Err(e)),
        }
    }
    if let Err(e) = conn.set_read_timeout(Some(restore)) {
        return Some(Err(e));
    }
    Some(last_reply(replies))
}

/// The reply of the last command, or the first error reply among them (`ASKING`'s).
fn last_reply(replies: Vec<Value>) -> RedisResult<Value> {
    let mut last = Value::Nil;
    for v in replies {
        last = v.extract_error()?;
    }
    Ok(last)
}

//! Connections of one server that one caller uses at a time: blocking ones for the sync API's
//! requests, and async ones for a command that occupies its connection on the server (`WAIT`
//! for replica sync). Waits do not take connections: they go through the client's session
//! (`session/`).
//!
//! redis-rs has no pool of its own for blocking connections or for connections that must not be
//! shared (`ConnectionManager` multiplexes, which a blocking command would stall), hence this
//! small one: idle connections kept for reuse.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use super::Request;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisResult, Value};

/// A server to connect to, with the timeouts every connection to it uses.
pub(crate) struct Node {
    pub(crate) client: redis::Client,
    /// `host:port`, for messages.
    pub(crate) addr: Arc<str>,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
}

impl Node {
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Node {
        Node {
            addr: Arc::from(client.get_connection_info().addr().to_string()),
            client,
            connect_timeout,
            response_timeout,
        }
    }
}

/// A connection kind the pool can open and use.
pub(crate) trait Dedicated: Sized + Send + 'static {
    /// Open one.
    async fn connect(node: &Node) -> RedisResult<Self>;
    /// One request, answered.
    async fn query(&mut self, req: Request<'_>) -> RedisResult<Value>;
}

/// `CLIENT SETNAME rlock`: the client's connections in `CLIENT LIST` (its session listeners
/// are `rlock-session`).
fn hello() -> Cmd {
    let mut c = redis::cmd("CLIENT");
    c.arg("SETNAME").arg("rlock");
    c
}

/// A blocking connection: the sync API reads and writes it on the caller's thread.
pub(crate) struct BlockingConn {
    pub(crate) conn: redis::Connection,
}

impl Dedicated for BlockingConn {
    async fn connect(node: &Node) -> RedisResult<Self> {
        let mut conn = node
            .client
            .get_connection_with_timeout(node.connect_timeout)?;
        conn.set_read_timeout(Some(node.response_timeout))?;
        conn.set_write_timeout(Some(node.response_timeout))?;
        let () = hello().query(&mut conn)?;
        Ok(BlockingConn { conn })
    }

    /// One command, written and read on the caller's thread. Inside [`overlapped`] (a caller
    /// driving several requests at once: a multi-lock's locks on several servers), written,
    /// then read after one yield, so every request goes out before the first reply is awaited
    /// and the round trips overlap. Measured (`rlock-bench`, sync, MultiLock of 3 locks on 3
    /// servers against the 3 locks one after another): 1.71× with the yield, 0.95× without;
    /// a yield on every command instead cost the lone request about 0.5 µs of CPU (section 6:
    /// 0.91×/0.92× of raw against 0.94×/0.95× without), hence only inside `overlapped`.
    ///
    /// A [`Request::Then`] is written as one pipeline; every reply is read, the first kept.
    async fn query(&mut self, req: Request<'_>) -> RedisResult<Value> {
        let overlapped = OVERLAPPED.get();
        let packed = match req {
            Request::One(cmd) if !overlapped => return cmd.query(&mut self.conn),
            Request::One(cmd) => cmd.get_packed_command(),
            Request::Then(cmd, then) => {
                let mut packed = cmd.get_packed_command();
                then.write_packed_command(&mut packed);
                packed
            }
        };
        self.conn.send_packed_command(&packed)?;
        if overlapped {
            yield_once().await;
        }
        let mut first = None;
        let mut left = req.len();
        while left > 0 {
            match self.conn.recv_response() {
                // RESP3 pushes (invalidations, ...) are not replies.
                Ok(Value::Push { .. }) => continue,
                // The rest of the replies cannot be read from a broken connection.
                Err(e) if broken(&e) => return Err(e),
                reply => {
                    left -= 1;
                    first.get_or_insert(reply);
                }
            }
        }
        first
            .unwrap_or(Ok(Value::Nil))
            .and_then(Value::extract_error)
    }
}

thread_local! {
    /// Set while an [`Overlapped`] future is polled on this thread.
    static OVERLAPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

pin_project_lite::pin_project! {
    /// A future whose blocking requests overlap their round trips (see [`overlapped`]).
    pub(crate) struct Overlapped<F> {
        #[pin]
        fut: F,
    }
}

/// `fut` (which drives several requests at once, e.g. `join_all`), polled so that its blocking
/// requests are all sent before their replies are read.
pub(crate) fn overlapped<F: Future>(fut: F) -> Overlapped<F> {
    Overlapped { fut }
}

impl<F: Future> Future for Overlapped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let outer = OVERLAPPED.replace(true);
        let r = self.project().fut.poll(cx);
        OVERLAPPED.set(outer);
        r
    }
}

/// Pending once, woken at once: lets the caller's other futures run (tokio's `yield_now` would
/// hand the wake to a runtime's scheduler when called on one of its threads, which a thread
/// blocked in the sync API never gives back).
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    })
    .await
}

/// An async connection for one user at a time (no response timeout: its command may wait on
/// the server, the user times it).
/// A multiplexed connection to `node`, its driver spawned on the runtime this runs in.
pub(crate) async fn multiplexed(
    node: &Node,
    response_timeout: Option<Duration>,
) -> RedisResult<MultiplexedConnection> {
    let cfg = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(node.connect_timeout))
        .set_response_timeout(response_timeout);
    let mut conn = node
        .client
        .get_multiplexed_async_connection_with_config(&cfg)
        .await?;
    let () = hello().query_async(&mut conn).await?;
    Ok(conn)
}

pub(crate) struct AsyncConn {
    pub(crate) conn: MultiplexedConnection,
}

impl Dedicated for AsyncConn {
    async fn connect(node: &Node) -> RedisResult<Self> {
        // Its commands block it (`WAIT`): no response timeout of the connection's own.
        Ok(AsyncConn {
            conn: multiplexed(node, None).await?,
        })
    }

    async fn query(&mut self, req: Request<'_>) -> RedisResult<Value> {
        req.on(&mut self.conn).await
    }
}

/// Connections of kind `C` to one node. Each is boxed: a connection inline was copied four
/// times per request (out of the pool, into the lease, back, into the pool), a box is a word.
pub(crate) struct Pool<C> {
    pub(crate) node: Arc<Node>,
    idle: Mutex<Vec<Box<C>>>,
    max_idle: usize,
}

impl<C: Dedicated> Pool<C> {
    pub(crate) fn new(node: Arc<Node>, max_idle: usize) -> Arc<Pool<C>> {
        Arc::new(Pool {
            node,
            idle: Mutex::new(Vec::new()),
            max_idle,
        })
    }

    /// A connection nobody else uses until the lease is dropped.
    pub(crate) async fn get(self: &Arc<Self>) -> RedisResult<Leased<C>> {
        let idle = self.idle.lock().pop();
        let conn = match idle {
            Some(c) => c,
            None => Box::new(C::connect(&self.node).await?),
        };
        Ok(Leased {
            conn: Some(conn),
            pool: self.clone(),
        })
    }

    fn put(&self, c: Box<C>) {
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(c);
        }
    }
}

/// A checked-out connection; goes back to the pool when dropped unless discarded.
pub(crate) struct Leased<C: Dedicated> {
    conn: Option<Box<C>>,
    pub(crate) pool: Arc<Pool<C>>,
}

impl<C: Dedicated> Leased<C> {
    pub(crate) fn get(&mut self) -> &mut C {
        self.conn.as_deref_mut().expect("a live connection")
    }

    /// Close it instead of returning it (broken, or in an unknown state). Closing the socket
    /// also ends a command still waiting on it on the server.
    pub(crate) fn discard(&mut self) {
        self.conn = None;
    }

    /// One request; a connection that failed below the protocol is discarded.
    pub(crate) async fn query(&mut self, req: Request<'_>) -> RedisResult<Value> {
        let r = self.get().query(req).await;
        if r.as_ref().is_err_and(broken) {
            self.discard();
        }
        r
    }
}

impl<C: Dedicated> Drop for Leased<C> {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            self.pool.put(c);
        }
    }
}

/// Whether the connection can't be trusted after `e` (its stream may hold a late reply).
/// `UNBLOCKED ...` is the server's answer to a blocked client as it becomes a replica, and it
/// closes the connection behind it: used again, the connection would fail the next request.
pub(crate) fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.code() == Some("UNBLOCKED")
}

#[cfg(test)]
mod tests {
    use super::broken;
    use crate::session::wire::error_of as server_err;

    /// A reply error leaves the connection usable, but for a demotion's `UNBLOCKED`: the server
    /// closes the connection behind it, so it goes, not back to the pool.
    #[test]
    fn only_a_demotions_error_reply_discards_the_connection() {
        let unblocked = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";
        assert!(broken(&server_err(unblocked)));
        for kept in [
            "READONLY You can't write against a read only replica.",
            "NOTOWNER not held",
            "ERR wrong",
        ] {
            assert!(!broken(&server_err(kept)), "{kept}");
        }
        let reset =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(broken(&reset));
    }
}

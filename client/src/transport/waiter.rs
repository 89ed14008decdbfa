//! [`Waiter`]: a connection of its own for a command that occupies its connection on the server
//! until it is answered (`WAIT` for replica sync). Lock waits do not use it: they go through
//! the client's session.

use redis::{Pipeline, RedisResult, Value};

use super::pool::{broken, AsyncConn, BlockingConn, Leased};

/// A dedicated connection to the node that serves a key.
pub(crate) struct Waiter {
    conn: Conn,
}

enum Conn {
    Blocking(Leased<BlockingConn>),
    Async(Leased<AsyncConn>),
}

impl Waiter {
    pub(crate) fn blocking(conn: Leased<BlockingConn>) -> Waiter {
        Waiter {
            conn: Conn::Blocking(conn),
        }
    }

    pub(crate) fn asynchronous(conn: Leased<AsyncConn>) -> Waiter {
        Waiter {
            conn: Conn::Async(conn),
        }
    }

    /// Send every command of `pipe` at once and return the last one's reply (or the first error
    /// reply among them). A connection that failed below the protocol is closed, not reused.
    pub(crate) async fn query(&mut self, pipe: Pipeline) -> RedisResult<Value> {
        let mut replies = self.query_all(pipe).await?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    /// Every command's reply, or the first error reply among them (see [`Waiter::query`]).
    pub(crate) async fn query_all(&mut self, mut pipe: Pipeline) -> RedisResult<Vec<Value>> {
        // Error replies come back as values, read like the blocking connection's.
        pipe.ignore_errors();
        let r = match &mut self.conn {
            Conn::Blocking(c) => {
                // No read timeout while the server holds the command (as on the async side).
                let restore = c.pool.node.response_timeout;
                let conn = &mut c.get().conn;
                conn.set_read_timeout(None)
                    .and_then(|()| pipe.query::<Vec<Value>>(conn))
                    .and_then(|v| conn.set_read_timeout(Some(restore)).map(|()| v))
            }
            Conn::Async(c) => pipe.query_async::<Vec<Value>>(&mut c.get().conn).await,
        };
        let r = r.and_then(|replies| {
            replies
                .into_iter()
                .map(Value::extract_error)
                .collect::<RedisResult<Vec<Value>>>()
        });
        if r.as_ref().is_err_and(broken) {
            match &mut self.conn {
                Conn::Blocking(c) => c.discard(),
                Conn::Async(c) => c.discard(),
            }
        }
        r
    }
}

//! Commands that block: sent on a connection of their own, the reply read later, so one test
//! thread can park several waiters; and waiting until the server reports them blocked.

use std::time::{Duration, Instant};

use redis::Value;

use crate::{cmd, info_int, int, show, wait_until, Server};

/// Wait until the server reports exactly `n` blocked clients (as Redis' own test suite does
/// with `wait_for_blocked_clients_count`).
pub fn wait_blocked(conn: &mut redis::Connection, n: i64) {
    wait_until(
        Duration::from_secs(10),
        &format!("{n} blocked clients"),
        || info_int(conn, "clients", "blocked_clients") == n,
    );
}

/// A command sent on a connection of its own whose reply is read later, so one test thread can
/// park several waiters without spawning threads.
pub struct Pending {
    conn: redis::Connection,
    /// `CLIENT ID` of the connection (for `CLIENT KILL ID` / `CLIENT UNBLOCK`).
    pub id: i64,
    /// When the command was written to the socket.
    pub sent: Instant,
    what: String,
}

impl Pending {
    /// Open a connection and send `cmd` on it without reading the reply.
    pub fn send(server: &Server, cmd: &redis::Cmd) -> Pending {
        Pending::send_on(server.conn(), cmd)
    }

    /// Send `cmd` on `conn` (e.g. after a SELECT) without reading the reply.
    pub fn send_on(mut conn: redis::Connection, cmd: &redis::Cmd) -> Pending {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let id = int(&mut conn, &cmd!("CLIENT", "ID"));
        conn.send_packed_command(&cmd.get_packed_command()).unwrap();
        Pending {
            conn,
            id,
            sent: Instant::now(),
            what: show(cmd),
        }
    }

    /// Wait at most `limit` for the reply.
    pub fn reply_within(self, limit: Duration) -> Value {
        self.conn.set_read_timeout(Some(limit)).unwrap();
        self.reply()
    }

    /// Wait at most `limit` for the reply, or for the connection to fail (a killed client):
    /// the reply, or the error the read ended with.
    pub fn outcome_within(self, limit: Duration) -> redis::RedisResult<Value> {
        self.conn.set_read_timeout(Some(limit)).unwrap();
        let mut conn = self.conn;
        conn.recv_response()
    }

    /// Wait (at most 10 s) for the reply.
    pub fn reply(mut self) -> Value {
        let what = std::mem::take(&mut self.what);
        self.conn
            .recv_response()
            .unwrap_or_else(|e| panic!("{what}: no reply: {e}"))
    }

    /// Wait (at most 10 s) for the reply, and keep the connection (to see what follows it).
    pub fn reply_and_conn(mut self) -> (Value, redis::Connection) {
        let what = std::mem::take(&mut self.what);
        let v = self
            .conn
            .recv_response()
            .unwrap_or_else(|e| panic!("{what}: no reply: {e}"));
        (v, self.conn)
    }

    /// Wait for the reply, which must be an integer.
    pub fn reply_int(self) -> i64 {
        let what = self.what.clone();
        match self.reply() {
            Value::Int(n) => n,
            other => panic!("{what}: expected an integer, got {other:?}"),
        }
    }
}

/// Send `RLOCK.ACQUIRE key owner lease_ms BLOCK 0` (plus `extra` arguments) on a new connection
/// and wait until the server reports `blocked_after` blocked clients, i.e. the waiter is parked.
pub fn park(
    server: &Server,
    admin: &mut redis::Connection,
    key: &str,
    owner: &str,
    lease_ms: i64,
    extra: &[&str],
    blocked_after: i64,
) -> Pending {
    let mut c = cmd!("RLOCK.ACQUIRE", key, owner, lease_ms, "BLOCK", 0);
    for a in extra {
        c.arg(*a);
    }
    let p = Pending::send(server, &c);
    wait_blocked(admin, blocked_after);
    p
}

//! The typed error every fallible call returns, with messages written for people.

use std::time::Duration;

/// Shorthand for `std::result::Result<T, rlock_client::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to the rlock module.
///
/// Errors the server sends back are mapped to the variant a caller can act on
/// (`NOTOWNER` becomes [`Error::NotOwner`], `WRONGTYPE` becomes [`Error::WrongType`]); a server
/// that cannot be reached or a connection that broke is [`Error::Connection`] (with the address),
/// and a reply that did not arrive in time is [`Error::Timeout`]. The `redis` errors inside are
/// the re-exported [`redis`](crate::redis) crate's.
///
/// ```
/// use rlock_client::Error;
///
/// fn explain(e: &Error) -> &'static str {
///     match e {
///         Error::NotOwner { .. } => "unlock by someone who does not hold the lock",
///         Error::Connection { .. } | Error::Timeout(_) => "Redis is unreachable: retry later",
///         _ => "something else",
///     }
/// }
/// let e = Error::NotOwner { name: "orders".into(), owner: "uuid:1".into() };
/// assert_eq!(explain(&e), "unlock by someone who does not hold the lock");
/// assert_eq!(e.to_string(), "can't unlock 'orders': it is not held by uuid:1");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `unlock` was called by an owner that does not hold the lock (Redisson throws
    /// `IllegalMonitorStateException` here). The lock may have expired, been force-released, or
    /// never been taken by this owner.
    #[error("can't unlock '{name}': it is not held by {owner}")]
    NotOwner {
        /// The lock name.
        name: String,
        /// The owner that tried to release it (`UUID:number`).
        owner: String,
    },

    /// The owner already holds this non-reentrant lock
    /// ([`Client::non_reentrant_lock`](crate::Client::non_reentrant_lock)) and asked for it
    /// again (Redisson's `RedissonNonReentrantLock` throws `IllegalMonitorStateException` here).
    /// Its hold is unchanged: one `unlock` releases it.
    #[error("can't lock '{name}' again: it is non-reentrant and already held by {owner}")]
    NotReentrant {
        /// The lock name.
        name: String,
        /// The owner that holds it and asked again (`UUID:number`).
        owner: String,
    },

    /// A blocking wait was cancelled with [`CancelToken::cancel`](crate::CancelToken::cancel)
    /// (Redisson's `lockInterruptibly` throwing `InterruptedException`). The request was
    /// withdrawn from the server's queue; a grant that raced the cancel was given back, so the
    /// caller holds nothing from this call.
    #[error("the wait for '{name}' was cancelled; nothing was acquired")]
    Cancelled {
        /// The object the wait was for.
        name: String,
    },

    /// The server refused to let the caller wait because the wait could never end (Redisson
    /// would hang forever instead):
    ///
    /// - a read-write lock's reader asked for its write lock (an upgrade: it waits for itself);
    /// - the wait would close a cycle of owners waiting for one another on that server (A holds
    ///   L1 and waits for L2 while B holds L2 and now asks for L1); the message names the cycle,
    ///   e.g. `waiting would close a cycle: 'A' waits for 'B' on 'L2', 'B' waits for 'A' on 'L1'`.
    ///
    /// Nothing was acquired by the refused call; the caller keeps what it held before. Release
    /// something and try again, or take locks in one order everywhere (as
    /// [`MultiLock`](crate::MultiLock) does).
    #[error("deadlock on '{name}': {message}")]
    Deadlock {
        /// The lock the refused wait was for.
        name: String,
        /// The server's words after `DEADLOCK` (the upgrade, or the cycle of owners and locks).
        message: String,
    },

    /// A permit id given to release is not a leased permit of the semaphore: released already,
    /// its lease ended, or it never existed (Redisson's `release(id)` throws
    /// `IllegalArgumentException` here). Nothing was released.
    #[error("can't release permits of '{name}': {message}")]
    PermitNotLeased {
        /// The semaphore's name.
        name: String,
        /// The server's words (they name the permit id).
        message: String,
    },

    /// The key exists but holds another kind of value (a string, a list, ...), not a lock.
    #[error("key '{name}' holds another kind of value, not a lock")]
    WrongType {
        /// The lock name.
        name: String,
        /// The server's own words.
        message: String,
    },

    /// Redis could not be reached within the connect timeout
    /// ([`ClientBuilder::connect_timeout`](crate::ClientBuilder::connect_timeout)), or the
    /// connection broke while a command was under way (its outcome is then unknown; see
    /// [`Error::is_ambiguous`]).
    #[error("can't reach Redis at {addr}: {}", io_words(source))]
    Connection {
        /// `host:port` (or socket path) of the server.
        addr: String,
        /// What the connection reported.
        #[source]
        source: redis::RedisError,
    },

    /// Redis did not answer within the configured response timeout.
    #[error("{0}")]
    Timeout(String),

    /// Replica sync is on, replicas are connected, and none acknowledged the acquire within the
    /// sync timeout (Redisson's `NoSyncedSlavesException`). The acquire was undone.
    #[error(
        "none of {replicas} replica(s) acknowledged the lock write on '{name}' within {timeout:?}; \
         the acquire was undone (increase the replica sync timeout or turn replica sync off)"
    )]
    NoSyncedReplicas {
        /// The lock name.
        name: String,
        /// Replicas connected to the master when the write was made.
        replicas: u64,
        /// The `WAIT` timeout used.
        timeout: Duration,
    },

    /// Replica sync is on and the lock's lease ended before its replicas acknowledged it (or
    /// the hold was already gone when the sync began): another owner may hold it now. The
    /// acquire was undone.
    #[error(
        "the lease of '{name}' ({lease:?}) ended before its replicas acknowledged the lock; \
         the acquire was undone (make the lease longer than the replica sync timeout)"
    )]
    LeaseEndedBeforeSync {
        /// The lock name.
        name: String,
        /// The acquire's lease.
        lease: Duration,
    },

    /// The server does not know the `RLOCK.*` commands: the rlock module is not loaded. Holds
    /// the server's address.
    #[error(
        "the rlock module is not loaded on the Redis server at {0} (start it with --loadmodule)"
    )]
    ModuleNotLoaded(String),

    /// The server has neither the rlock module nor scripting, so the client can speak neither
    /// of its protocols there (see [`ClientBuilder::protocol`](crate::ClientBuilder::protocol)):
    /// `RLOCK.*` is unknown and `EVAL` is refused (an ACL without `@scripting`, or a server
    /// whose Lua engine is off).
    #[error(
        "the Redis server at {addr} can't serve locks: it has no rlock module (RLOCK.* unknown) \
         and refuses the scripts of Redisson's protocol ({scripting}); load the module, or \
         allow EVAL/EVALSHA for this user"
    )]
    NoLockProtocol {
        /// `host:port` of the server.
        addr: String,
        /// The server's words when refusing `EVAL`.
        scripting: String,
    },

    /// The object is not available yet over Redisson's protocol, which the client speaks to
    /// this server (it has no rlock module, or [`Protocol::Redisson`](crate::Protocol) was
    /// forced). Nothing was sent about the object. Which objects work in that mode:
    /// `docs/operations.md`, "Two protocols".
    #[error(
        "the {object} '{name}' is not supported over Redisson's protocol yet, which the client \
         speaks to {addr} (no rlock module there, or Protocol::Redisson forced); load the \
         rlock module on that server to use it"
    )]
    NotInRedissonProtocol {
        /// What kind of object (`read-write lock`, `count-down latch`, ...).
        object: &'static str,
        /// The object's name.
        name: String,
        /// `host:port` of the server.
        addr: String,
    },

    /// An argument the server would refuse, caught before sending (e.g. a zero lease).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A bad URL or configuration value.
    #[error("invalid client configuration: {0}")]
    Config(String),

    /// Any other error reply from Redis, or a reply the client could not read.
    #[error("{}", redis_words(.0))]
    Redis(#[source] redis::RedisError),

    /// A wait was withdrawn by the server because the client's session on it expired: the
    /// process did not read its session's outcomes for longer than the grace period
    /// ([`ClientBuilder::session_grace`](crate::ClientBuilder::session_grace)), typically
    /// because it was frozen (stopped, swapped out, a debugger). The server withdrew the wait
    /// and handed any grant it had not seen acknowledged to the next waiter: the object is not
    /// held. Waits started afterwards use a new session.
    #[error(
        "the client's session on {addr} expired (the process did not read its outcomes for \
         longer than the session grace period): the wait was withdrawn and is not held"
    )]
    SessionExpired {
        /// `host:port` of the server.
        addr: String,
    },

    /// The client's background runtime is gone (the client is shutting down).
    #[error("the rlock client has shut down")]
    Shutdown,
}

/// The operating system's words for a connection failure, without the library's prefixes.
fn io_words(e: &redis::RedisError) -> String {
    e.detail().map_or_else(|| e.to_string(), str::to_string)
}

/// An error reply in a sentence: the server's detail, not its code.
fn redis_words(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(_), Some(detail)) => format!("Redis refused the command: {detail}"),
        _ => format!("unexpected reply from Redis: {e}"),
    }
}

impl Error {
    /// Whether the outcome of a write is unknown: the command may or may not have run on the
    /// server (the connection broke or the reply timed out). A server that could not be reached
    /// at all ran nothing: not ambiguous.
    ///
    /// ```
    /// let e = rlock_client::Error::Timeout("no reply".into());
    /// assert!(e.is_ambiguous());
    /// assert!(!rlock_client::Error::Shutdown.is_ambiguous());
    /// ```
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Error::Connection { source, .. } => {
                !(source.is_connection_refusal()
                    || source.kind() == redis::ErrorKind::ClusterConnectionNotFound)
            }
            Error::Timeout(_) => true,
            _ => false,
        }
    }

    /// Map a `redis` error from the server (or connection) at `addr`.
    pub(crate) fn from_redis(
        e: redis::RedisError,
        addr: &str,
        response_timeout: Duration,
    ) -> Error {
        if e.is_timeout() {
            return Error::Timeout(format!(
                "Redis at {addr} did not answer within {response_timeout:?}"
            ));
        }
        if e.is_io_error()
            || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            return Error::Connection {
                addr: addr.to_string(),
                source: e,
            };
        }
        let unknown = e.detail().unwrap_or_default().to_ascii_lowercase();
        if unknown.contains("unknown command")
            && (unknown.contains("rlock.") || unknown.contains("rsession."))
        {
            return Error::ModuleNotLoaded(addr.to_string());
        }
        Error::Redis(e)
    }

    /// This error as seen by `owner` acting on the object `name`: the server's `NOTOWNER`,
    /// `DEADLOCK`, `NOPERMIT` and `WRONGTYPE` replies become [`Error::NotOwner`],
    /// [`Error::Deadlock`], [`Error::PermitNotLeased`] and [`Error::WrongType`].
    pub(crate) fn about(self, name: &str, owner: &str) -> Error {
        let Error::Redis(e) = &self else { return self };
        let words = || e.detail().unwrap_or_default().to_string();
        // Redisson's non-reentrant lock script, to a holder's second acquire: an error reply of
        // that one word, which redis-rs reads as a detail without a code.
        if [e.code(), e.detail()].contains(&Some("NON_REENTRANT_REACQUIRE")) {
            return Error::NotReentrant {
                name: name.to_string(),
                owner: owner.to_string(),
            };
        }
        match e.code() {
            Some("NOTOWNER") => Error::NotOwner {
                name: name.to_string(),
                owner: owner.to_string(),
            },
            Some("DEADLOCK") => Error::Deadlock {
                name: name.to_string(),
                message: words(),
            },
            Some("NOPERMIT") => Error::PermitNotLeased {
                name: name.to_string(),
                message: words(),
            },
            Some("WRONGTYPE") => Error::WrongType {
                name: name.to_string(),
                message: words(),
            },
            _ => self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::RedisError;

    fn server_err(text: &str) -> RedisError {
        // Parse a real RESP error line so the code/detail split is the library's own.
        let v = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        match v {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("not an error: {other:?}"),
        }
    }

    const T: Duration = Duration::from_secs(3);

    #[test]
    fn notowner_and_wrongtype_read_as_sentences() {
        let e =
            Error::from_redis(server_err("NOTOWNER lock not held by x"), "h:1", T).about("k", "o");
        assert!(
            matches!(e, Error::NotOwner { ref name, ref owner } if name == "k" && owner == "o")
        );
        let e = Error::from_redis(
            server_err("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "h:1",
            T,
        )
        .about("k", "o");
        assert!(matches!(e, Error::WrongType { .. }));
        assert_eq!(
            e.to_string(),
            "key 'k' holds another kind of value, not a lock"
        );
        let cycle =
            "waiting would close a cycle: 'a' waits for 'b' on 'k2', 'b' waits for 'a' on 'k1'";
        let e =
            Error::from_redis(server_err(&format!("DEADLOCK {cycle}")), "h:1", T).about("k1", "a");
        assert!(
            matches!(&e, Error::Deadlock { name, message } if name == "k1" && message == cycle),
            "{e:?}"
        );
        assert_eq!(e.to_string(), format!("deadlock on 'k1': {cycle}"));
        let e = Error::from_redis(
            server_err(
                "NOPERMIT permit 00ff has already been released, has expired or does not exist",
            ),
            "h:1",
            T,
        )
        .about("pool", "");
        assert!(matches!(e, Error::PermitNotLeased { .. }), "{e:?}");
        let e = Error::from_redis(server_err("ERR lease must be a positive integer"), "h:1", T);
        assert_eq!(
            e.to_string(),
            "Redis refused the command: lease must be a positive integer"
        );
    }

    #[test]
    fn connection_errors_name_the_address() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused",
        ));
        let e = Error::from_redis(io, "127.0.0.1:1", T);
        assert!(!e.is_ambiguous(), "nothing was sent");
        assert_eq!(
            e.to_string(),
            "can't reach Redis at 127.0.0.1:1: Connection refused"
        );
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(
            Error::from_redis(reset, "h:2", T).is_ambiguous(),
            "cut under way"
        );
        let to = RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "slow"));
        let e = Error::from_redis(to, "h:2", T);
        assert!(matches!(e, Error::Timeout(_)));
        assert_eq!(e.to_string(), "Redis at h:2 did not answer within 3s");
        let e = server_err("ERR unknown command 'RLOCK.ACQUIRE', with args beginning with: 'k'");
        let e = Error::from_redis(e, "h:3", T);
        assert!(matches!(e, Error::ModuleNotLoaded(_)));
        assert!(e.to_string().contains("h:3"), "{e}");
    }
}

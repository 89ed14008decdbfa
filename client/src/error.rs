//! The typed error every fallible call returns.

use std::time::Duration;

/// Shorthand for `std::result::Result<T, rlock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to the rlock module.
///
/// Errors the server sends back are mapped to the variant a caller can act on
/// (`NOTOWNER` becomes [`Error::NotOwner`], `WRONGTYPE` becomes [`Error::WrongType`]);
/// a lost or refused connection is [`Error::Connection`] and a reply that did not arrive in time
/// is [`Error::Timeout`].
///
/// ```
/// use rlock::Error;
///
/// fn explain(e: &Error) -> &'static str {
///     match e {
///         Error::NotOwner { .. } => "unlock by someone who does not hold the lock",
///         Error::Connection(_) | Error::Timeout(_) => "Redis is unreachable: retry later",
///         _ => "something else",
///     }
/// }
/// let e = Error::NotOwner { name: "orders".into(), owner: "uuid:1".into() };
/// assert_eq!(explain(&e), "unlock by someone who does not hold the lock");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `unlock` was called by an owner that does not hold the lock (Redisson throws
    /// `IllegalMonitorStateException` here). The lock may have expired, been force-released, or
    /// never been taken by this owner.
    #[error("attempt to unlock lock '{name}', not locked by current owner {owner}")]
    NotOwner {
        /// The lock name.
        name: String,
        /// The owner that tried to release it (`UUID:number`).
        owner: String,
    },

    /// The key exists but holds a value that is not a lock (Redis `WRONGTYPE`).
    #[error("key '{name}' holds a value that is not a lock: {message}")]
    WrongType {
        /// The lock name.
        name: String,
        /// The server's message.
        message: String,
    },

    /// The connection to Redis could not be made or was lost (refused, reset, closed).
    #[error("connection to Redis failed: {0}")]
    Connection(#[source] redis::RedisError),

    /// Redis did not answer within the configured response timeout.
    #[error("timed out: {0}")]
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

    /// The server does not know the `RLOCK.*` commands: the rlock module is not loaded.
    #[error("the rlock module is not loaded on this Redis server ({0})")]
    ModuleNotLoaded(String),

    /// An argument the server would refuse, caught before sending (e.g. a zero lease).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A bad URL or configuration value.
    #[error("invalid client configuration: {0}")]
    Config(String),

    /// Any other error reply from Redis.
    #[error("Redis error: {0}")]
    Redis(#[source] redis::RedisError),

    /// The client's background runtime is gone (the client is shutting down).
    #[error("the rlock client has shut down")]
    Shutdown,
}

impl Error {
    /// Whether the outcome of a write is unknown: the command may or may not have run on the
    /// server (the connection broke or the reply timed out).
    ///
    /// ```
    /// let e = rlock::Error::Timeout("no reply".into());
    /// assert!(e.is_ambiguous());
    /// assert!(!rlock::Error::Shutdown.is_ambiguous());
    /// ```
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, Error::Connection(_) | Error::Timeout(_))
    }

    /// Map a `redis` error, with the lock name and owner for context.
    pub(crate) fn from_redis(e: redis::RedisError, name: &str, owner: &str) -> Error {
        match e.code() {
            Some("NOTOWNER") => {
                return Error::NotOwner {
                    name: name.to_string(),
                    owner: owner.to_string(),
                }
            }
            Some("WRONGTYPE") => {
                return Error::WrongType {
                    name: name.to_string(),
                    message: e.to_string(),
                }
            }
            _ => {}
        }
        if e.is_timeout() {
            return Error::Timeout(e.to_string());
        }
        if e.is_io_error()
            || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            return Error::Connection(e);
        }
        let text = e.to_string();
        if text.contains("unknown command") && text.to_ascii_lowercase().contains("rlock.") {
            return Error::ModuleNotLoaded(text);
        }
        Error::Redis(e)
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::from_redis(e, "", "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, RedisError};

    fn server_err(text: &str) -> RedisError {
        // Parse a real RESP error line so the code/detail split is the library's own.
        let v = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        match v {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn maps_notowner_and_wrongtype() {
        let e = Error::from_redis(server_err("NOTOWNER lock not held by x"), "k", "o");
        assert!(
            matches!(e, Error::NotOwner { ref name, ref owner } if name == "k" && owner == "o")
        );
        let e = Error::from_redis(
            server_err("WRONGTYPE Operation against a key holding the wrong kind of value"),
            "k",
            "o",
        );
        assert!(matches!(e, Error::WrongType { .. }));
    }

    #[test]
    fn maps_io_and_unknown_command() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset",
        ));
        assert!(matches!(
            Error::from_redis(io, "k", "o"),
            Error::Connection(_)
        ));
        let to = RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "slow"));
        assert!(matches!(Error::from_redis(to, "k", "o"), Error::Timeout(_)));
        let e = server_err("ERR unknown command 'RLOCK.ACQUIRE', with args beginning with: 'k'");
        assert!(matches!(
            Error::from_redis(e, "k", "o"),
            Error::ModuleNotLoaded(_)
        ));
        let e = server_err("ERR lease must be a positive integer");
        assert!(matches!(Error::from_redis(e, "k", "o"), Error::Redis(_)));
        let _ = ErrorKind::Io;
    }
}

//! The two protocols the client speaks, chosen per server: the rlock module's native commands
//! where the module is loaded, Redisson's own protocol (its Lua scripts, keys and pub/sub
//! channels, `redisson/`) where it is not. [`Protocols`] detects which, once per server, at the
//! first call that reaches it (the client connects lazily: that is its connect).

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use redis::{Cmd, Value};

use crate::config::Protocol;
use crate::error::{Error, Result};
use crate::runtime::Background;
use crate::transport::{Delivery, Io, Transport};

pub(crate) mod redisson;

/// The protocol of each server, as asked for or detected.
pub(crate) struct Protocols {
    asked: Protocol,
    /// Per node address, once detected (Auto only).
    by_node: RwLock<HashMap<Arc<str>, Protocol, foldhash::fast::RandomState>>,
    /// The one node's, once detected, when the deployment is a single server (its address
    /// never changes): read with one plain load. Every call asks (an acquire and its release
    /// three times), and the look-up in `by_node` took a read lock, cloned the address and
    /// hashed it: atomic writes to lines every calling thread shares, which bounced between
    /// the CPUs of threads contending on one lock (see `performance.rs`).
    single: AtomicU8,
}

/// [`Protocols::single`] before detection.
const UNKNOWN: u8 = 0;

fn to_u8(p: Protocol) -> u8 {
    match p {
        Protocol::Auto => UNKNOWN,
        Protocol::Module => 1,
        Protocol::Redisson => 2,
    }
}

fn from_u8(v: u8) -> Option<Protocol> {
    match v {
        1 => Some(Protocol::Module),
        2 => Some(Protocol::Redisson),
        _ => None,
    }
}

impl Protocols {
    pub(crate) fn new(asked: Protocol) -> Protocols {
        Protocols {
            asked,
            by_node: RwLock::new(HashMap::default()),
            single: AtomicU8::new(UNKNOWN),
        }
    }

    /// The protocol spoken to the node serving `key` ([`Protocol::Module`] or
    /// [`Protocol::Redisson`], never `Auto`), detected there on first use.
    pub(crate) async fn at(
        &self,
        transport: &Transport,
        bg: &Background,
        io: Io,
        key: &str,
    ) -> Result<Protocol> {
        if self.asked != Protocol::Auto {
            return Ok(self.asked);
        }
        let single = transport.is_single();
        if single {
            if let Some(p) = from_u8(self.single.load(Ordering::Acquire)) {
                return Ok(p);
            }
        }
        if let Some(p) = self.by_node.read().get(&transport.addr_of(key)) {
            return Ok(*p);
        }
        // Boxed: the rare path (once per server) stays out of every caller's future.
        Box::pin(async {
            // The node itself, looked up if need be: before Sentinel has named the primary,
            // `addr_of` is only a placeholder, which no command can be sent to.
            let addr = transport.node_of(key).await;
            if let Some(p) = self.by_node.read().get(&addr) {
                return Ok(*p);
            }
            let p = detect(transport, bg, io, &addr).await?;
            self.by_node.write().insert(addr, p);
            if single {
                self.single.store(to_u8(p), Ordering::Release);
            }
            Ok(p)
        })
        .await
    }

    /// `Ok` when the node serving `key` speaks the module's commands; else the error saying
    /// that `object` is not supported over Redisson's protocol yet.
    pub(crate) async fn require_module(
        &self,
        transport: &Transport,
        bg: &Background,
        io: Io,
        key: &str,
        object: &'static str,
    ) -> Result<()> {
        match self.at(transport, bg, io, key).await? {
            Protocol::Redisson => Err(self.unsupported(transport, key, object)),
            _ => Ok(()),
        }
    }

    /// The error saying that `object` (named `key`) is not supported over Redisson's protocol.
    pub(crate) fn unsupported(
        &self,
        transport: &Transport,
        key: &str,
        object: &'static str,
    ) -> Error {
        Error::NotInRedissonProtocol {
            object,
            name: key.to_string(),
            addr: transport.addr_of(key).to_string(),
        }
    }
}

/// `COMMAND INFO RLOCK.ACQUIRE` (not `MODULE LIST`, which managed services refuse): the module
/// when the server knows the command; else Redisson's protocol, if the server runs scripts.
async fn detect(
    transport: &Transport,
    bg: &Background,
    io: Io,
    addr: &Arc<str>,
) -> Result<Protocol> {
    let mut info = redis::cmd("COMMAND");
    info.arg("INFO").arg("RLOCK.ACQUIRE");
    let module = match ask(transport, bg, io, addr, &info).await {
        Ok(reply) => knows_command(&reply),
        // Refused (an ACL without `COMMAND`): take the protocol that works everywhere.
        Err(Error::Redis(e)) => {
            tracing::debug!(addr = %addr, error = %e, "rlock: COMMAND INFO refused");
            false
        }
        Err(e) => return Err(e),
    };
    if module {
        tracing::info!(addr = %addr, protocol = "module", "rlock: the server has the rlock module: speaking its commands");
        return Ok(Protocol::Module);
    }
    let mut probe = redis::cmd("EVAL");
    probe.arg("return 1").arg(0);
    match ask(transport, bg, io, addr, &probe).await {
        Ok(_) => {}
        Err(Error::Redis(e)) => {
            return Err(Error::NoLockProtocol {
                addr: addr.to_string(),
                scripting: e.detail().map_or_else(|| e.to_string(), str::to_string),
            })
        }
        Err(e) => return Err(e),
    }
    tracing::info!(
        addr = %addr,
        protocol = "redisson",
        "rlock: the server has no rlock module: speaking Redisson's protocol (scripts and pub/sub)"
    );
    Ok(Protocol::Redisson)
}

/// One read-only command to the node at `addr`, retried per the policy.
async fn ask(
    transport: &Transport,
    bg: &Background,
    io: Io,
    addr: &Arc<str>,
    cmd: &Cmd,
) -> Result<Value> {
    transport
        .policy
        .run(bg, Delivery::Idempotent, |_| {
            transport.send_at(io, addr, cmd, false)
        })
        .await
        .map_err(|e| transport.error_at(e, addr))
}

/// `COMMAND INFO name`'s reply: one entry, nil when the server does not know the command.
fn knows_command(reply: &Value) -> bool {
    match reply {
        Value::Array(entries) => entries.first().is_some_and(|e| !matches!(e, Value::Nil)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_info_says_whether_the_module_is_there() {
        assert!(!knows_command(&Value::Array(vec![Value::Nil])));
        assert!(knows_command(&Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"rlock.acquire".to_vec()),
            Value::Int(-3),
        ])])));
        assert!(!knows_command(&Value::Array(vec![])));
    }
}

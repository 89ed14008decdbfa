//! Every error a command can reply with, and its exact wire text.

use super::stats::ObjectKind;
use std::fmt;

/// Longest piece of user input echoed back in an error (an unknown option of 5 MB must not come
/// back whole).
const ECHO_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// Wrong number of arguments; carries the lower-case command name.
    Arity(&'static str),
    /// A duration or count that is not a base-10 integer in range.
    NotInteger(&'static str),
    /// A lease below 1 ms.
    LeaseTooSmall,
    /// A count argument below its minimum (`what`, minimum).
    TooSmall(&'static str, i64),
    /// A count argument above its maximum (`what`, maximum).
    TooLarge(&'static str, i64),
    /// A negative BLOCK timeout.
    NegativeTimeout,
    /// `now + duration` does not fit in a 64-bit millisecond timestamp.
    OutOfRange(&'static str),
    EmptyOwner,
    /// An owner name that would collide with the object's own fields (rwlock: `mode`, `*:write`).
    ReservedOwner,
    /// An option word the command does not know, or one given twice, or one missing its value.
    Syntax(String),
    /// The key (or one of its auxiliary keys) holds a value of the wrong type.
    WrongType,
    /// Requests of another kind of object wait on the key: a key's queue holds one kind, so a
    /// request that would queue behind them, or be refused because of them, is refused at once.
    QueuedKind(ObjectKind),
    /// The owner's hash field does not hold an integer hold count.
    CorruptCount,
    /// The fencing-token key does not hold an integer.
    CorruptToken,
    /// Re-entry would overflow the hold count.
    CountOverflow,
    /// RELEASE by an owner that does not hold the lock (in that mode).
    NotOwner,
    /// A wait that can never be granted: it would close a cycle of owners waiting for each other.
    Deadlock(String),
    /// The server became a replica while a request waited: queue again on the new master.
    Demoted,
    /// The server answered a parked connection `UNBLOCKED` itself (`CLIENT UNBLOCK <id>
    /// ERROR`, or a demotion): its session request ends with this outcome.
    ServerUnblocked,
    /// The caller's ACL user may not write an auxiliary key the command would write.
    NoPerm(Vec<u8>),
    /// The caller's ACL user may not read an auxiliary key the command reads.
    NoReadPerm(Vec<u8>),
    /// A session bound (queued requests, unacknowledged outcomes) was reached.
    Limit(String),
    /// The session named does not exist (never opened, closed, or expired).
    NoSession,
    /// A request id already queued in the same session.
    DuplicateRequest,
    /// The session named belongs to another ACL user (the name is echoed, its owner is not).
    SessionNoPerm(Vec<u8>),
    /// Cluster: the key's slot is no longer served by this node (migrated away, or migrating
    /// with the key already moved). Cluster clients retry on TRYAGAIN and follow the redirect.
    SlotMoved,
    /// Cluster: some of the object's keys are absent here while its slot is being migrated
    /// (they may have moved already): nothing is decided on half an object. As Redis answers a
    /// multi-key command in that state.
    Unstable,
    /// Writes are paused (CLIENT PAUSE WRITE, FAILOVER) and the write would create a key whose
    /// expired copy Redis still stores: serving waits until the pause ends. Never a reply.
    Paused,
    /// A panic was caught at the FFI boundary; details are in the server log.
    Internal,
    /// A semaphore's permit count would leave the 64-bit range.
    PermitsOverflow,
    /// `RSEM.RELEASE ... ID`: this permit (hex) is not leased (released, expired or unknown).
    NoPermit(String),
    /// A permit id that is not 32 hex characters.
    BadPermitId,
    /// `RLATCH.AWAIT ... BLOCK` on a replica, which never releases waiters.
    WaitOnReplica,
    /// Cluster mode: the object named `name` would write its auxiliary key `key` into another
    /// slot than its own (a name without a proper hash tag, see `core::slots`).
    ForeignSlot {
        name: Vec<u8>,
        name_slot: u16,
        key: Vec<u8>,
        key_slot: u16,
    },
    /// The fencing token's INCR was refused by the server itself (`RM_Call` returned no reply):
    /// why, in words.
    TokenRefused(&'static str),
}

impl CmdError {
    /// `unknown option '<word>'`, with the word cut to a readable length.
    pub fn unknown_option(word: &[u8]) -> CmdError {
        CmdError::Syntax(format!("unknown option '{}'", echo(word)))
    }
}

/// User bytes as they may appear inside an error: lossy UTF-8, at most [`ECHO_MAX`] bytes.
pub fn echo(bytes: &[u8]) -> String {
    if bytes.len() <= ECHO_MAX {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let shown = String::from_utf8_lossy(&bytes[..ECHO_MAX]);
    format!("{shown}... ({} bytes)", bytes.len())
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Arity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            CmdError::NotInteger(what) => write!(f, "ERR {what} is not an integer or out of range"),
            CmdError::LeaseTooSmall => write!(f, "ERR lease_ms must be at least 1"),
            CmdError::TooSmall(what, min) => write!(f, "ERR {what} must be at least {min}"),
            CmdError::TooLarge(what, max) => write!(f, "ERR {what} must be at most {max}"),
            CmdError::NegativeTimeout => write!(f, "ERR timeout is negative"),
            CmdError::OutOfRange(what) => write!(f, "ERR {what} is out of range"),
            CmdError::EmptyOwner => write!(f, "ERR owner must not be empty"),
            CmdError::ReservedOwner => write!(
                f,
                "ERR owner must not be 'mode' or end in ':write' (Redisson's read-write lock fields)"
            ),
            CmdError::Syntax(detail) => write!(f, "ERR syntax error, {detail}"),
            CmdError::WrongType => {
                write!(
                    f,
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                )
            }
            CmdError::QueuedKind(kind) => write!(
                f,
                "WRONGTYPE Operation against a key holding the wrong kind of value: {} requests wait on this key (a key's queue holds one kind of object)",
                kind.name()
            ),
            CmdError::CorruptCount => write!(f, "ERR lock hold count is not an integer"),
            CmdError::CorruptToken => {
                write!(f, "ERR fencing token is not an integer or out of range")
            }
            CmdError::CountOverflow => write!(f, "ERR lock hold count would overflow"),
            CmdError::NotOwner => write!(f, "NOTOWNER lock is not held by this owner"),
            CmdError::Deadlock(detail) => write!(f, "DEADLOCK {detail}"),
            CmdError::Limit(detail) => write!(f, "ERR {detail}"),
            CmdError::NoPerm(key) => write!(
                f,
                "NOPERM this user has no permissions to access the key '{}' that the command writes",
                echo(key)
            ),
            CmdError::NoReadPerm(key) => write!(
                f,
                "NOPERM this user has no permissions to access the key '{}' that the command reads",
                echo(key)
            ),
            // The words Redis itself answers every client blocked on a node that becomes a
            // replica: clients already take them as "queue again on the new master".
            CmdError::Demoted => write!(
                f,
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"
            ),
            CmdError::ServerUnblocked => write!(
                f,
                "UNBLOCKED the server answered the parked connection itself (CLIENT UNBLOCK ... ERROR, or the master became a replica)"
            ),
            CmdError::NoSession => write!(
                f,
                "NOSESSION no such session (never opened, closed, or expired): open it with RSESSION.OPEN"
            ),
            CmdError::SessionNoPerm(name) => write!(
                f,
                "NOPERM session '{}' belongs to another user",
                echo(name)
            ),
            CmdError::DuplicateRequest => {
                write!(f, "ERR request id is already queued in this session")
            }
            CmdError::SlotMoved => {
                write!(
                    f,
                    "TRYAGAIN the key's slot moved to another node while waiting; retry"
                )
            }
            CmdError::Unstable => write!(
                f,
                "TRYAGAIN the object's slot is being migrated and some of its keys are not on \
                 this node; retry"
            ),
            CmdError::Paused => write!(f, "TRYAGAIN writes are paused"),
            CmdError::Internal => write!(f, "ERR rlock internal error, see the server log"),
            CmdError::PermitsOverflow => write!(f, "ERR permit count would overflow"),
            CmdError::NoPermit(id) => write!(
                f,
                "NOPERMIT permit {id} has already been released, has expired or does not exist"
            ),
            CmdError::BadPermitId => write!(f, "ERR permit id must be 32 hex characters"),
            CmdError::ForeignSlot {
                name,
                name_slot,
                key,
                key_slot,
            } => write!(
                f,
                "CROSSSLOT in cluster mode every key of an object must share its slot: '{}' (slot \
                 {name_slot}) would write '{}' (slot {key_slot}). A name with '{{' or '}}' needs a \
                 non-empty hash tag: its first '{{' must open a '{{tag}}' that covers every key \
                 (e.g. '{{app}}:name')",
                echo(name),
                echo(key)
            ),
            CmdError::TokenRefused(why) => {
                write!(f, "ERR the fencing token could not be incremented: {why}")
            }
            CmdError::WaitOnReplica => write!(
                f,
                "READONLY a replica cannot release waiters: BLOCK on the master, or ask without BLOCK"
            ),
        }
    }
}

impl std::error::Error for CmdError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_lead_the_text() {
        assert!(CmdError::WrongType.to_string().starts_with("WRONGTYPE "));
        assert!(CmdError::QueuedKind(ObjectKind::Semaphore)
            .to_string()
            .starts_with("WRONGTYPE Operation against a key holding the wrong kind of value: "));
        assert!(CmdError::NotOwner.to_string().starts_with("NOTOWNER "));
        assert!(CmdError::Deadlock("x".into())
            .to_string()
            .starts_with("DEADLOCK "));
        assert_eq!(
            CmdError::Arity("rlock.release").to_string(),
            "ERR wrong number of arguments for 'rlock.release' command"
        );
    }

    #[test]
    fn long_user_input_is_cut() {
        let word = vec![b'x'; 5_000_000];
        let text = CmdError::unknown_option(&word).to_string();
        assert!(text.len() < 120, "{} bytes", text.len());
        assert!(text.ends_with("(5000000 bytes)'"), "{text}");
        assert_eq!(
            CmdError::unknown_option(b"NOPE").to_string(),
            "ERR syntax error, unknown option 'NOPE'"
        );
    }
}

//! Every error a command can reply with, and its exact wire text.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// Wrong number of arguments; carries the lower-case command name.
    Arity(&'static str),
    /// A duration or count that is not a base-10 integer in range.
    NotInteger(&'static str),
    /// A lease below 1 ms.
    LeaseTooSmall,
    /// A negative BLOCK timeout.
    NegativeTimeout,
    /// `now + duration` does not fit in a 64-bit millisecond timestamp.
    OutOfRange(&'static str),
    EmptyOwner,
    /// An option word the command does not know, or one given twice, or one missing its value.
    Syntax(String),
    /// The key (or the fencing-token key) holds a value that is not a lock.
    WrongType,
    /// The owner's hash field does not hold an integer hold count.
    CorruptCount,
    /// The fencing-token key does not hold an integer.
    CorruptToken,
    /// Re-entry would overflow the hold count.
    CountOverflow,
    /// RELEASE by an owner that does not hold the lock.
    NotOwner,
    /// Cluster: the lock's slot is no longer served by this node (migrated away, or migrating
    /// with the key already moved). Cluster clients retry on TRYAGAIN and follow the redirect.
    SlotMoved,
    /// A panic was caught at the FFI boundary; details are in the server log.
    Internal,
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Arity(cmd) => write!(f, "ERR wrong number of arguments for '{cmd}' command"),
            CmdError::NotInteger(what) => write!(f, "ERR {what} is not an integer or out of range"),
            CmdError::LeaseTooSmall => write!(f, "ERR lease_ms must be at least 1"),
            CmdError::NegativeTimeout => write!(f, "ERR timeout is negative"),
            CmdError::OutOfRange(what) => write!(f, "ERR {what} is out of range"),
            CmdError::EmptyOwner => write!(f, "ERR owner must not be empty"),
            CmdError::Syntax(detail) => write!(f, "ERR syntax error, {detail}"),
            CmdError::WrongType => {
                write!(
                    f,
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                )
            }
            CmdError::CorruptCount => write!(f, "ERR lock hold count is not an integer"),
            CmdError::CorruptToken => {
                write!(f, "ERR fencing token is not an integer or out of range")
            }
            CmdError::CountOverflow => write!(f, "ERR lock hold count would overflow"),
            CmdError::NotOwner => write!(f, "NOTOWNER lock is not held by this owner"),
            CmdError::SlotMoved => {
                write!(
                    f,
                    "TRYAGAIN the lock's slot moved to another node while waiting; retry"
                )
            }
            CmdError::Internal => write!(f, "ERR rlock internal error, see the server log"),
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
        assert!(CmdError::NotOwner.to_string().starts_with("NOTOWNER "));
        assert_eq!(
            CmdError::Arity("rlock.release").to_string(),
            "ERR wrong number of arguments for 'rlock.release' command"
        );
    }
}

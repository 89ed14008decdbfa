//! What a command or an event decided: the writes to make and the reply to give. The rules
//! produce a [`Decision`]; one place in the skin (`apply`) performs it: each [`Write`] becomes a
//! low-level key write, the same native command sent to replicas and the AOF (absolute expiry
//! times only), and the keyspace event a native command would raise.

use super::error::CmdError;
use super::store::{Int, Target};
use std::borrow::Cow;

/// One write, shaped as the native command that replicas receive. With a tag of its own
/// (`repr(u8)`) rather than one folded into a field's spare values: matching and dropping a
/// write read it directly, 11 instructions less per write of a lock's acquire (callgrind). 80
/// bytes: a decision's three writes fit the allocator's kept blocks (`ffi/alloc.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(u8)]
pub enum Write<'a> {
    /// `HSET key field <int>`
    HSetInt {
        key: Target,
        field: Cow<'a, [u8]>,
        value: i64,
    },
    /// `HSET key field value`
    HSet {
        key: Target,
        field: Cow<'a, [u8]>,
        value: Cow<'a, [u8]>,
    },
    /// `HDEL key field`
    HDel { key: Target, field: Cow<'a, [u8]> },
    /// `DEL key`
    Del { key: Target },
    /// `SET key <int>` (a new string; any TTL is dropped, as SET does)
    SetInt { key: Target, value: i64 },
    /// `PEXPIREAT key at`
    PExpireAt { key: Target, at: i64 },
    /// The lock's next fencing token into its counter `key` (see `fencing`): the counter plus
    /// one, or the clock term if larger, written as `INCRBY key <difference>`. Its result is
    /// what [`Reply::Token`] stands for. Always first in a decision: when it fails (the key is
    /// not an integer) nothing else has been written.
    NextToken { key: Target },
    /// `PUBLISH channel message` (SPUBLISH semantics in a cluster).
    Publish { channel: Vec<u8>, message: i64 },
    /// `PUBLISH` on the main key's channel of Redisson's `prefix`
    /// (`names::prefixed(prefix, key)`, e.g. `redisson_lock__channel:{key}`), as
    /// [`Write::Publish`]. The name is made when published, on the stack: a lock's release
    /// builds none on the heap (an allocation, about 230 instructions of each `RLOCK.RELEASE`,
    /// callgrind).
    PublishOn { prefix: &'static str, message: i64 },
    /// `INCRBY key by` on a string holding an integer (creates it at 0, keeps its TTL). The
    /// rules check that the result fits before deciding it.
    IncrBy { key: Target, by: i64 },
    /// `ZADD key score member` (creates the sorted set).
    ZAdd {
        key: Target,
        member: Vec<u8>,
        score: i64,
    },
    /// `ZREM key member` (Redis deletes a sorted set whose last member goes).
    ZRem { key: Target, member: Vec<u8> },
    /// `PUBLISH channel <the integer in key>`, read when this write is made: a count announced
    /// after the writes before it (and, for tidying, after the queue was served). Absent reads
    /// as 0; with `positive_only`, nothing is published unless it is above 0.
    PublishCount {
        channel: Vec<u8>,
        key: Target,
        positive_only: bool,
    },
}

impl Write<'_> {
    /// The key the write changes (`None` for a publish).
    pub fn key(&self) -> Option<&Target> {
        match self {
            Write::Del { key }
            | Write::HSetInt { key, .. }
            | Write::HSet { key, .. }
            | Write::HDel { key, .. }
            | Write::SetInt { key, .. }
            | Write::PExpireAt { key, .. }
            | Write::NextToken { key }
            | Write::IncrBy { key, .. }
            | Write::ZAdd { key, .. }
            | Write::ZRem { key, .. } => Some(key),
            Write::Publish { .. } | Write::PublishOn { .. } | Write::PublishCount { .. } => None,
        }
    }
}

/// The message a [`Write::PublishCount`] sends, given what its key reads as now: `None` when
/// nothing is to be published.
pub fn count_message(read: Int, positive_only: bool) -> Option<i64> {
    let n = match read {
        Int::Is(n) => n,
        _ => 0,
    };
    (n > 0 || !positive_only).then_some(n)
}

/// A reply, as the command (or a parked waiter) receives it. Nil by default: a decision
/// without a reply answers nil (`unwrap_or_default`, which, unlike `unwrap_or_default()`,
/// makes and drops no spare reply: 28 instructions a command, callgrind).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Reply {
    Int(i64),
    #[default]
    Nil,
    /// A simple string (`+QUEUED`, `+OK`).
    Status(&'static str),
    /// The value the decision's [`Write::NextToken`] produced (a fencing token).
    Token,
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    /// A map (RESP3), or a flat array of name/value pairs (RESP2).
    Map(Vec<(&'static str, Reply)>),
    Error(CmdError),
}

impl Reply {
    /// The reply of a request that waits on in its session (`QUEUE`): it is in its queue.
    pub const QUEUED: Reply = Reply::Status("QUEUED");

    pub fn bulk_or_nil(bytes: Option<Vec<u8>>) -> Reply {
        bytes.map_or(Reply::Nil, Reply::Bulk)
    }
}

/// Writes and a reply, made together or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision<'a> {
    pub writes: Vec<Write<'a>>,
    pub reply: Option<Reply>,
}

impl<'a> Decision<'a> {
    pub fn reply(reply: Reply) -> Decision<'a> {
        Decision {
            writes: Vec::new(),
            reply: Some(reply),
        }
    }

    pub fn new(writes: Vec<Write<'a>>, reply: Reply) -> Decision<'a> {
        Decision {
            writes,
            reply: Some(reply),
        }
    }

    /// Writes with no reply of their own (tidying done before serving a queue).
    pub fn writes(writes: Vec<Write<'a>>) -> Decision<'a> {
        Decision {
            writes,
            reply: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reply.is_none()
    }
}

//! `RSESSION.*`: opening, reading, acknowledging, cancelling, closing and listing sessions
//! (the state they act on is `sessions`').

use super::BLOCK;
use crate::config::{self, SESSION_MAX_GRACE_MS, SESSION_MAX_NAME_BYTES};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::wait::session_rules as rules;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::sessions::{calls, resolve, sees_all};

/// `RSESSION.OPEN session grace_ms`: create or resume a session; the calling connection is its
/// listener. Reply: `resumed` (0: new, 1: it existed), `acked`, `last`, `pending`.
pub fn open(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, grace_ms) = rules::parse_open(&argv)?;
    let max = config::get(&SESSION_MAX_GRACE_MS);
    if grace_ms > max {
        return Err(CmdError::Limit(format!(
            "grace_ms {grace_ms} is above rlock.session-max-grace-ms ({max})"
        )));
    }
    let max_name = config::get(&SESSION_MAX_NAME_BYTES);
    if name.len() as i64 > max_name {
        return Err(CmdError::Limit(format!(
            "the session name is {} bytes, above rlock.session-max-name-bytes ({max_name})",
            name.len()
        )));
    }
    let o = calls::open(ctx, name, grace_ms)?;
    Ok(Answer::Reply(Reply::Map(vec![
        ("resumed", Reply::Int(o.resumed as i64)),
        ("acked", Reply::Int(o.acked as i64)),
        ("last", Reply::Int(o.last as i64)),
        ("pending", Reply::Int(o.pending as i64)),
    ])))
}

/// `RSESSION.READ session cursor [COUNT n] [BLOCK ms]`: acknowledge outcomes up to `cursor`,
/// return those after it (waiting for one with BLOCK).
pub fn read(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let r = rules::parse_read(&argv)?;
    let id = resolve(ctx, r.session)?;
    if let Some(ms) = r.block_ms {
        crate::core::args::deadline(ctx.now_ms(), ms, "timeout")?;
    }
    calls::read(ctx, id, &r)
}

/// `RSESSION.ACK session cursor`: acknowledge outcomes up to `cursor`; reply how many.
pub fn ack(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, cursor) = rules::parse_ack(&argv)?;
    let id = resolve(ctx, name)?;
    let n = calls::ack(id, cursor);
    Ok(Answer::Reply(Reply::Int(n as i64)))
}

/// `RSESSION.CANCEL session request`: withdraw a queued request. 1 when it was still queued;
/// 0 when not (its outcome, perhaps a grant, is or will be in the session's outcomes).
pub fn cancel(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, request) = rules::parse_cancel(&argv)?;
    let session = resolve(ctx, name)?;
    let withdrawn = calls::cancel(ctx, session, request);
    Ok(Answer::Reply(Reply::Int(withdrawn as i64)))
}

/// `RSESSION.CLOSE session`: end it now (as if it expired). 1, or 0 when it did not exist.
pub fn close(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let name = rules::parse_named(&argv, "rsession.close")?;
    let id = match resolve(ctx, name) {
        Ok(id) => id,
        Err(CmdError::NoSession) => return Ok(Answer::Reply(Reply::Int(0))),
        Err(e) => return Err(e),
    };
    calls::close(ctx, id);
    Ok(Answer::Reply(Reply::Int(1)))
}

/// `RSESSION.INFO session`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let name = rules::parse_named(&argv, "rsession.info")?;
    let id = match resolve(ctx, name) {
        Err(CmdError::SessionNoPerm(_)) if sees_all(ctx) => {
            calls::id_of(name).ok_or(CmdError::NoSession)?
        }
        other => other?,
    };
    Ok(Answer::Reply(calls::info(ctx, id)?))
}

/// `RSESSION.LIST`: the names of the caller's sessions (an administrator's: every session).
pub fn list(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rules::parse_list(&args.bytes())?;
    let user = ctx.user_name();
    let all = sees_all(ctx);
    let names = calls::names(user.as_deref(), all);
    Ok(Answer::Reply(Reply::Array(names)))
}

const NAME: ArgSpec = ArgSpec::new(c"session", String);

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rsession.open",
        handler: open,
        flags: c"deny-oom fast",
        acl: c"write fast",
        summary: c"Creates or resumes a session (many waits over one connection); the calling connection becomes its listener",
        complexity: c"O(1)",
        arity: 3,
        key: KeyAccess::None,
        args: &[NAME, ArgSpec::new(c"grace_ms", Integer)],
    },
    CommandSpec {
        name: c"rsession.read",
        handler: read,
        flags: c"blocking",
        acl: c"read slow blocking",
        summary: c"Acknowledges a session's outcomes up to cursor and returns those after it; with BLOCK waits for one",
        complexity: c"O(N) where N is the number of outcomes returned or acknowledged",
        arity: -3,
        key: KeyAccess::None,
        args: &[
            NAME,
            ArgSpec::new(c"cursor", Integer),
            ArgSpec::option(c"count", Integer, c"COUNT"),
            BLOCK,
        ],
    },
    CommandSpec {
        name: c"rsession.ack",
        handler: ack,
        flags: c"fast",
        acl: c"write fast",
        summary: c"Acknowledges a session's outcomes up to cursor",
        complexity: c"O(N) where N is the number of outcomes acknowledged",
        arity: 3,
        key: KeyAccess::None,
        args: &[NAME, ArgSpec::new(c"cursor", Integer)],
    },
    CommandSpec {
        name: c"rsession.cancel",
        handler: cancel,
        flags: c"fast",
        acl: c"write fast",
        summary: c"Withdraws a request queued in a session",
        complexity: c"O(N) where N is the number of waiters on the request's key",
        arity: 3,
        key: KeyAccess::None,
        args: &[NAME, ArgSpec::new(c"request", Integer)],
    },
    CommandSpec {
        name: c"rsession.close",
        handler: close,
        flags: c"",
        acl: c"write slow",
        summary: c"Ends a session now: its queued requests leave, unacknowledged grants are undone",
        complexity: c"O(N) where N is the number of the session's requests and outcomes",
        arity: 2,
        key: KeyAccess::None,
        args: &[NAME],
    },
    CommandSpec {
        name: c"rsession.info",
        handler: info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a session's listener, liveness, queued requests and outcomes",
        complexity: c"O(N) where N is the number of holds watched",
        arity: 2,
        key: KeyAccess::None,
        args: &[NAME],
    },
    CommandSpec {
        name: c"rsession.list",
        handler: list,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Lists the sessions of this server",
        complexity: c"O(N) where N is the number of sessions",
        arity: 1,
        key: KeyAccess::None,
        args: &[],
    },
];

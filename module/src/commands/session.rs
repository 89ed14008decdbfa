//! `RSESSION.*`: opening, reading, acknowledging, cancelling, closing and listing sessions
//! (the state they act on is `sessions`').

use crate::config::{self, SESSION_MAX_GRACE_MS, SESSION_MAX_NAME_BYTES, SESSION_MAX_PER_USER};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::Counted;
use crate::core::wait::session::{self as rules, Outcomes};
use crate::ffi::block::BlockedClient;
use crate::ffi::{Answer, Args, Ctx};
use crate::sessions::{
    answer_reader, end, grant_final, left_queue, owns, resolve, schedule_expiry, sees_all, state,
    unblock_reader, Reader, Session, CLOSED, OPENED,
};
use crate::timers;
use crate::wait::{self, Handle};
use std::collections::HashSet;

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
    let user = ctx.user_name();
    let reply = state(|s| {
        let resumed = s.by_name.contains_key(name);
        let id = match s.by_name.get(name) {
            Some(id) => {
                if !owns(user.as_deref(), &s.sessions[id]) {
                    return Err(CmdError::SessionNoPerm(name.to_vec()));
                }
                *id
            }
            None => {
                let owner: Option<Box<[u8]>> = user.as_deref().map(Box::from);
                let mine = s.per_user.get(&owner).copied().unwrap_or(0);
                let max = config::get(&SESSION_MAX_PER_USER);
                if mine as i64 >= max {
                    return Err(CmdError::Limit(format!(
                        "this user has {mine} sessions open (rlock.session-max-per-user)"
                    )));
                }
                *s.per_user.entry(owner.clone()).or_default() += 1;
                s.next_id = s.next_id.wrapping_add(1);
                let id = s.next_id;
                s.by_name.insert(name.into(), id);
                s.sessions.insert(
                    id,
                    Session {
                        name: name.into(),
                        owner,
                        grace_ms,
                        listener: 0,
                        reader: None,
                        expiry: None,
                        watched: 0,
                        watch_keys: Vec::new(),
                        queued: HashSet::default(),
                        outcomes: Outcomes::default(),
                    },
                );
                OPENED.incr();
                id
            }
        };
        let sess = s.sessions.get_mut(&id).expect("just found or made");
        sess.grace_ms = grace_ms;
        sess.listener = ctx.client_id();
        if sess.reader.is_none() {
            schedule_expiry(ctx, sess);
        }
        Ok(Reply::Map(vec![
            ("resumed", Reply::Int(resumed as i64)),
            ("acked", Reply::Int(sess.outcomes.acked() as i64)),
            ("last", Reply::Int(sess.outcomes.last() as i64)),
            ("pending", Reply::Int(sess.outcomes.len() as i64)),
        ]))
    })?;
    Ok(Answer::Reply(reply))
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
    // A new read takes over from a reader still parked for this session.
    let replaced = state(|s| {
        let sess = s.sessions.get_mut(&id)?;
        let old = sess.reader.take()?;
        s.readers.remove(&old.bc.id());
        Some(old)
    });
    if let Some(old) = replaced {
        unblock_reader(old, Reply::Array(Vec::new()));
    }
    let may_block = ctx.may_block();
    state(|s| {
        let sess = s.sessions.get_mut(&id).ok_or(CmdError::NoSession)?;
        sess.outcomes.ack(r.cursor, grant_final);
        sess.listener = ctx.client_id();
        let ready = sess.outcomes.has_after(r.cursor);
        let Some(ms) = r.block_ms.filter(|_| !ready && may_block) else {
            schedule_expiry(ctx, sess);
            return Ok(Answer::Reply(sess.outcomes.read(
                r.cursor,
                r.count,
                grant_final,
            )));
        };
        // Parked: the session lives while its listener waits.
        if let Some(t) = sess.expiry.take() {
            timers::cancel(t);
        }
        let bc = ctx.block();
        let timeout = (ms > 0).then(|| {
            timers::schedule(ctx, ctx.now_ms() + ms, move |ctx| {
                read_timed_out(ctx, id, bc)
            })
        });
        sess.reader = Some(Reader {
            bc,
            cursor: r.cursor,
            count: r.count,
            timeout,
        });
        s.readers.insert(bc.id(), id);
        Ok(Answer::Parked)
    })
}

/// A parked read's BLOCK time passed: it returns with nothing.
fn read_timed_out(ctx: Ctx, id: u32, bc: BlockedClient) {
    state(|s| {
        let Some(sess) = s.sessions.get_mut(&id) else {
            return;
        };
        if sess.reader.as_ref().is_none_or(|r| r.bc != bc) {
            return;
        }
        let r = sess.reader.take().expect("checked above");
        // The timer that called us is this reader's timeout: nothing to cancel.
        let r = Reader { timeout: None, ..r };
        answer_reader(ctx, sess, r, Reply::Array(Vec::new()));
        s.readers.remove(&bc.id());
    });
}

/// `RSESSION.ACK session cursor`: acknowledge outcomes up to `cursor`; reply how many.
pub fn ack(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, cursor) = rules::parse_ack(&argv)?;
    let id = resolve(ctx, name)?;
    let n = state(|s| {
        s.sessions
            .get_mut(&id)
            .map_or(0, |sess| sess.outcomes.ack(cursor, grant_final))
    });
    Ok(Answer::Reply(Reply::Int(n as i64)))
}

/// `RSESSION.CANCEL session request`: withdraw a queued request. 1 when it was still queued;
/// 0 when not (its outcome, perhaps a grant, is or will be in the session's outcomes).
pub fn cancel(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, request) = rules::parse_cancel(&argv)?;
    let session = resolve(ctx, name)?;
    let handle = Handle::Session { session, request };
    let withdrawn = wait::withdraw(ctx, handle, Counted::Cancelled).is_some();
    if withdrawn {
        left_queue(session, request);
    }
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
    CLOSED.incr();
    end(ctx, id);
    Ok(Answer::Reply(Reply::Int(1)))
}

/// `RSESSION.INFO session`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let name = rules::parse_named(&argv, "rsession.info")?;
    let id = match resolve(ctx, name) {
        Err(CmdError::SessionNoPerm(_)) if sees_all(ctx) => {
            state(|s| s.by_name.get(name).copied()).ok_or(CmdError::NoSession)?
        }
        other => other?,
    };
    let now = ctx.now_ms();
    let reply = state(|s| {
        let Some(sess) = s.sessions.get(&id) else {
            return Err(CmdError::NoSession);
        };
        let holds = sess.watched;
        Ok(Reply::Map(vec![
            ("session", Reply::Bulk(sess.name.to_vec())),
            ("listener", Reply::Int(sess.listener as i64)),
            ("reading", Reply::Int(sess.reader.is_some() as i64)),
            ("grace_ms", Reply::Int(sess.grace_ms)),
            (
                "expires_in_ms",
                Reply::Int(sess.expiry.map_or(-1, |t| (t.at_ms - now).max(0))),
            ),
            ("queued", Reply::Int(sess.queued.len() as i64)),
            ("pending", Reply::Int(sess.outcomes.len() as i64)),
            ("acked", Reply::Int(sess.outcomes.acked() as i64)),
            ("last", Reply::Int(sess.outcomes.last() as i64)),
            ("holds", Reply::Int(holds as i64)),
        ]))
    })?;
    Ok(Answer::Reply(reply))
}

/// `RSESSION.LIST`: the names of the caller's sessions (an administrator's: every session).
pub fn list(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rules::parse_list(&args.bytes())?;
    let user = ctx.user_name();
    let all = sees_all(ctx);
    let names = state(|s| {
        s.sessions
            .values()
            .filter(|x| all || owns(user.as_deref(), x))
            .map(|x| Reply::Bulk(x.name.to_vec()))
            .collect()
    });
    Ok(Answer::Reply(Reply::Array(names)))
}

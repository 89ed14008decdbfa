//! What each `RSESSION.*` call does to the sessions' state: `commands::session` parses and
//! checks the arguments, then calls here; nothing outside this room edits a session.

use super::{
    answer_reader, end, grant_final, left_queue, owns, schedule_expiry, state, unblock_reader,
    Reader, Session, CLOSED, OPENED,
};
use crate::config::{self, SESSION_MAX_PER_USER};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::Counted;
use crate::core::wait::session_rules::{Outcomes, ReadArgs};
use crate::ffi::block::BlockedClient;
use crate::ffi::{Answer, Ctx};
use crate::timers;
use crate::wait::{self, Handle};
use std::collections::HashSet;

/// Where a session's outcomes stand, as `RSESSION.OPEN` answers.
pub struct Opened {
    /// It existed (0: new).
    pub resumed: bool,
    pub acked: u64,
    pub last: u64,
    pub pending: usize,
}

impl Session {
    fn new(name: &[u8], owner: Option<Box<[u8]>>, grace_ms: i64) -> Session {
        Session {
            name: name.into(),
            owner,
            grace_ms,
            listener: 0,
            reader: None,
            ends_at: None,
            expiry: None,
            watched: 0,
            watch_keys: Vec::new(),
            queued: HashSet::default(),
            outcomes: Outcomes::default(),
        }
    }
}

/// Create session `name` for the calling user, or resume it (its listener is the calling
/// connection from now on).
pub fn open(ctx: Ctx, name: &[u8], grace_ms: i64) -> Result<Opened, CmdError> {
    let user = ctx.user_name();
    state(|s| {
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
                s.sessions.insert(id, Session::new(name, owner, grace_ms));
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
        Ok(Opened {
            resumed,
            acked: sess.outcomes.acked(),
            last: sess.outcomes.last(),
            pending: sess.outcomes.len(),
        })
    })
}

/// Acknowledge session `id`'s outcomes up to `r.cursor` and return those after it, or park the
/// calling connection until one comes (`r.block_ms`, where the caller may block).
pub fn read(ctx: Ctx, id: u32, r: &ReadArgs) -> Result<Answer, CmdError> {
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
        // Parked: the session lives while its listener waits (its expiry job, if it comes
        // meanwhile, finds the reader and does nothing).
        sess.ends_at = None;
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

/// Acknowledge session `id`'s outcomes up to `cursor`; how many were.
pub fn ack(id: u32, cursor: u64) -> usize {
    state(|s| {
        s.sessions
            .get_mut(&id)
            .map_or(0, |sess| sess.outcomes.ack(cursor, grant_final))
    })
}

/// Withdraw queued request `request` of session `session`; false when it was not queued (its
/// outcome, perhaps a grant, is or will be in the session's outcomes).
pub fn cancel(ctx: Ctx, session: u32, request: u64) -> bool {
    let handle = Handle::Session { session, request };
    let withdrawn = wait::withdraw(ctx, handle, Counted::Cancelled).is_some();
    if withdrawn {
        left_queue(session, request);
    }
    withdrawn
}

/// End session `id` now, as if it expired.
pub fn close(ctx: Ctx, id: u32) {
    CLOSED.incr();
    end(ctx, id);
}

/// Session `name`'s id, whoever owns it (for an administrator's `RSESSION.INFO`).
pub fn id_of(name: &[u8]) -> Option<u32> {
    state(|s| s.by_name.get(name).copied())
}

/// What `RSESSION.INFO` shows of session `id`.
pub fn info(ctx: Ctx, id: u32) -> Result<Reply, CmdError> {
    let now = ctx.now_ms();
    state(|s| {
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
                Reply::Int(sess.ends_at.map_or(-1, |at| (at - now).max(0))),
            ),
            ("queued", Reply::Int(sess.queued.len() as i64)),
            ("pending", Reply::Int(sess.outcomes.len() as i64)),
            ("acked", Reply::Int(sess.outcomes.acked() as i64)),
            ("last", Reply::Int(sess.outcomes.last() as i64)),
            ("holds", Reply::Int(holds as i64)),
        ]))
    })
}

/// The names of the sessions `user` owns (`all`: of every session).
pub fn names(user: Option<&[u8]>, all: bool) -> Vec<Reply> {
    state(|s| {
        s.sessions
            .values()
            .filter(|x| all || owns(user, x))
            .map(|x| Reply::Bulk(x.name.to_vec()))
            .collect()
    })
}

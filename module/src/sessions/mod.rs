//! Sessions, Redis side: many waits over one connection.
//!
//! - A request queued with `SESSION s QUEUE <request> <timeout_ms>` waits in the same FIFO as
//!   blocked clients (`wait`); its outcome (granted, timeout, error) is appended to the
//!   session's outcome list instead of unblocking a client (this room is `wait::Sessions`).
//! - The listener reads outcomes with `RSESSION.READ s <cursor> [BLOCK ms]`; the cursor
//!   acknowledges everything up to it. Unacknowledged outcomes stay, so a listener that
//!   reconnects reads what it missed (at-least-once).
//! - Liveness: a session lives while its listener waits in `RSESSION.READ`, and for its grace
//!   period after the last read returned (or its connection closed). A frozen client stops
//!   reading, so its session ends: queued requests leave their queues, grants it never
//!   acknowledged are undone and handed on, its holds stop being watched.
//! - Holds granted through a session, or taken by an acquire naming it, are watched: when one
//!   ends by anything but its owner's release (FORCERELEASE, DEL, expiry, eviction, FLUSH, a
//!   Redisson force unlock), a `lost` outcome is appended at once.
//! - A session belongs to the ACL user who opened it: no other user may name it in any command
//!   (`NOPERM`), so outcomes only ever reach the user who queued the requests. A user who may
//!   run `ACL LIST` (an administrator) may also see every session (`RSESSION.LIST`, `.INFO`).
//! - Undo is exact: ending a session undoes only the grants no read ever returned (see
//!   `Outcomes::read`); a grant a read returned is its owner's, as a `BLOCK` waiter's grant is
//!   once its reply is sent.
//! - Every cost is the session's own: its queued requests are kept here by id, so ending it or
//!   cancelling one never looks at anybody else's waiters.
//!
//! Rooms: this file keeps session state (queued requests, outcomes, liveness, parked readers);
//! `holds` watches holds for loss; the `RSESSION.*` handlers are `commands::session`.

mod by_key;
pub mod calls;
mod holds;

pub use holds::timed_looks;
use holds::{add, read_until, watch};
pub use holds::{after_write, db_touched, key_touched, keys_left, released, track, watching};

use crate::config::{self, SESSION_MAX_BACKLOG, SESSION_MAX_QUEUED};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::Counter;
use crate::core::wait::session_rules::{self as rules, New, OutcomeKind, Outcomes};
use crate::core::wait::HashMap;
use crate::core::wait::{Deadline, KeyId, Req, TimerKey};
use crate::ffi::block::{self, BlockedClient, Wake};
use crate::ffi::{Answer, Ctx};
use crate::keys::RedisKeys;
use crate::timers;
use crate::wait::{self, Ended, Handle};
use std::cell::RefCell;
use std::collections::HashSet;

/// What undoing a grant needs, kept until a read returns the grant.
type Grant = (KeyId, Req, Reply, wait::Ticket);

struct Session {
    name: Box<[u8]>,
    /// The ACL user who opened it (`None`: opened by a context without a user).
    owner: Option<Box<[u8]>>,
    grace_ms: i64,
    /// The client id of the connection that last opened or read it.
    listener: u64,
    reader: Option<Reader>,
    /// When the session ends unless its listener reads again (none while one waits in READ).
    ends_at: Option<i64>,
    /// The job that looks at `ends_at` (armed no later than it; kept while a reader waits).
    expiry: Option<TimerKey>,
    /// How many of its holds are watched now (`RSESSION.INFO`'s `holds`).
    watched: u32,
    /// The keys where it had holds watched: ending the session visits these. Only appended to
    /// (a release leaves its key here; a key may be listed twice), and compacted when twice as
    /// long as its watched holds (`holds::compact`): a map by key cost a hashed insert and a
    /// removal per watch, 600 instructions of a watched acquire + release (callgrind).
    watch_keys: Vec<KeyId>,
    /// The ids of its requests queued now: ending the session withdraws exactly these.
    queued: HashSet<u64, foldhash::fast::RandomState>,
    outcomes: Outcomes<Grant>,
}

/// A listener parked in `RSESSION.READ ... BLOCK`.
struct Reader {
    bc: BlockedClient,
    cursor: u64,
    count: usize,
    timeout: Option<TimerKey>,
}

/// A hold watched for loss.
struct Tracked {
    session: u32,
    req: Req,
}

/// A key's watched holds and its pending look (at the earliest lease end, or at once after an
/// event), in one map entry: a grant inserts one entry, a release removes it.
#[derive(Default)]
struct Watched {
    /// Mostly one hold: kept inline, with no allocation.
    holds: smallvec::SmallVec<[Tracked; 1]>,
    /// Its pending look, in `State::looks`.
    check: Option<Deadline>,
}

/// The pending looks at watched keys, by due time (at most one per key, `Watched::check`), run
/// by one timer job. A timer job per look cost its boxed closure and a B-tree insert and
/// removal in the module's timers: 1,700 instructions of a watched acquire + release
/// (callgrind).
type Looks = timers::Batch<KeyId>;

#[derive(Default)]
struct State {
    sessions: HashMap<u32, Session>,
    by_name: HashMap<Box<[u8]>, u32>,
    /// Sessions open per ACL user (bounded by `rlock.session-max-per-user`).
    per_user: HashMap<Option<Box<[u8]>>, usize>,
    next_id: u32,
    /// Parked readers by blocked-client id.
    readers: HashMap<usize, u32>,
    tracked: by_key::ByKey<Watched>,
    looks: Looks,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

pub static OPENED: Counter = Counter::new();
pub static EXPIRED: Counter = Counter::new();
pub static CLOSED: Counter = Counter::new();
pub static LOST: Counter = Counter::new();
/// Grants of session requests replied straight to their parked connection (`QUEUE ... BLOCK`).
pub static HANDED: Counter = Counter::new();
/// `lost` outcomes dropped because their session's backlog was full (an `overflow` outcome
/// stands for them).
pub static LOST_DROPPED: Counter = Counter::new();

/// Install this file as the destination of session requests' outcomes; counters start from
/// zero at each load.
pub fn init() {
    wait::install_sessions(&Hooks);
    for c in [&OPENED, &EXPIRED, &CLOSED, &LOST, &HANDED, &LOST_DROPPED] {
        c.reset();
    }
}

/// What sessions do for the waiting mechanism (`wait::Sessions`, its one implementation).
struct Hooks;

impl wait::Sessions for Hooks {
    fn sink(&self, ctx: Ctx, session: u32, request: u64, ended: Ended) {
        sink(ctx, session, request, ended)
    }
    fn watch(&self, ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>) {
        watch(ctx, session, id, req, until)
    }
    fn handed(&self, session: u32, request: u64) {
        handed(session, request)
    }
}

/// The session called `name`, if the calling user owns it (`NOPERM` otherwise: a session is
/// used only by the user who opened it).
pub fn resolve(ctx: Ctx, name: &[u8]) -> Result<u32, CmdError> {
    ctx.with_user_name(|user| {
        state(|s| {
            let id = *s.by_name.get(name).ok_or(CmdError::NoSession)?;
            let sess = s.sessions.get(&id).ok_or(CmdError::NoSession)?;
            if owns(user, sess) {
                Ok(id)
            } else {
                Err(CmdError::SessionNoPerm(name.to_vec()))
            }
        })
    })
}

/// Whether `user` (the caller's ACL user; `None`: a context of the module's own) owns `sess`.
fn owns(user: Option<&[u8]>, sess: &Session) -> bool {
    match (user, &sess.owner) {
        (None, _) => true,
        (Some(u), Some(o)) => u == &o[..],
        (Some(_), None) => false,
    }
}

/// Whether the caller may see every session (`RSESSION.LIST`, `RSESSION.INFO`): an
/// administrator, i.e. a user who may run `ACL LIST`.
pub fn sees_all(ctx: Ctx) -> bool {
    ctx.user_may_run(&[b"ACL", b"LIST"])
}

// ---- queueing and outcomes -----------------------------------------------------------------------

/// A request queued through a session (`SESSION s QUEUE request timeout_ms [BLOCK park_ms]`).
pub struct Queued {
    /// The client's id for it, unique among the session's queued requests.
    pub request: u64,
    /// Its deadline, from now (0: none).
    pub timeout_ms: i64,
    /// How long its connection is parked first (`None`: answered `QUEUED` at once).
    pub park_ms: Option<i64>,
}

/// Queue `req` as request `request` of session `session`, with a deadline `timeout_ms` from
/// now (0: none). Reply `QUEUED`, or with `park_ms` park the connection for that first part of
/// the wait (`wait::park_request`).
pub fn queue(
    ctx: Ctx,
    keys: &RedisKeys,
    session: u32,
    queued: Queued,
    req: Req,
) -> Result<Answer, CmdError> {
    let Queued {
        request,
        timeout_ms,
        park_ms,
    } = queued;
    let handle = Handle::Session { session, request };
    state(|s| {
        let sess = s.sessions.get(&session).ok_or(CmdError::NoSession)?;
        if sess.queued.contains(&request) {
            return Err(CmdError::DuplicateRequest);
        }
        rules::may_queue(
            sess.queued.len(),
            sess.outcomes.len(),
            config::get(&SESSION_MAX_QUEUED),
            config::get(&SESSION_MAX_BACKLOG),
        )
    })?;
    wait::enqueue(ctx, keys, handle, timeout_ms, req);
    state(|s| {
        if let Some(sess) = s.sessions.get_mut(&session) {
            sess.queued.insert(request);
        }
    });
    Ok(match park_ms {
        Some(ms) => wait::park_request(ctx, handle, ms),
        None => Answer::Reply(Reply::QUEUED),
    })
}

/// `wait`'s hook: request `request` of `session` was granted straight to its parked
/// connection.
fn handed(session: u32, request: u64) {
    HANDED.incr();
    left_queue(session, request);
}

/// Request `request` of `session` is no longer queued (granted, failed, timed out, withdrawn).
/// Whether the session still exists.
fn left_queue(session: u32, request: u64) -> bool {
    state(|s| match s.sessions.get_mut(&session) {
        Some(sess) => {
            sess.queued.remove(&request);
            if sess.queued.capacity() > 64 && sess.queued.len() * 4 < sess.queued.capacity() {
                sess.queued.shrink_to(sess.queued.len() * 2);
            }
            true
        }
        None => false,
    })
}

/// `wait`'s sink: how a session request's wait ended.
fn sink(ctx: Ctx, session: u32, request: u64, ended: Ended) {
    let known = left_queue(session, request);
    match ended {
        Ended::Granted { id, req, reply } => {
            if !known {
                // The session ended meanwhile: nobody will receive this grant.
                let ticket = wait::undoable(&id, &req);
                undo_later(ctx, (id, req, reply, ticket));
                return;
            }
            if req.owner().is_some() {
                // Granted in this very step: the request tells its lease end, or the keys do.
                let until = req
                    .holds()
                    .and_then(|h| h.granted_until(ctx.now_ms()))
                    .or_else(|| read_until(ctx, &req, &id));
                add(ctx, session, id.clone(), req.clone(), until);
            }
            let outcome = New {
                kind: OutcomeKind::Granted,
                request: Some(request),
                key: Some(id.key.clone()),
                object: Some(req.kind().name()),
                value: reply.clone(),
                grant: Some((id.clone(), req.clone(), reply, wait::undoable(&id, &req))),
            };
            push(ctx, session, outcome);
        }
        Ended::TimedOut => push(
            ctx,
            session,
            about(OutcomeKind::Timeout, request, Reply::Nil),
        ),
        Ended::Failed(e) => {
            let text = Reply::Bulk(e.to_string().into_bytes());
            push(ctx, session, about(OutcomeKind::Error, request, text))
        }
    }
}

/// An outcome of request `request` that grants nothing.
fn about(kind: OutcomeKind, request: u64, value: Reply) -> New<Grant> {
    New {
        kind,
        request: Some(request),
        key: None,
        object: None,
        value,
        grant: None,
    }
}

/// Append an outcome and hand it to a waiting listener. A `lost` outcome counts against the
/// session's backlog (past it, one `overflow` outcome stands for those dropped).
fn push(ctx: Ctx, session: u32, outcome: New<Grant>) {
    let max = config::get(&SESSION_MAX_BACKLOG).max(1) as usize;
    state(|s| {
        let Some(sess) = s.sessions.get_mut(&session) else {
            return;
        };
        if outcome.kind == OutcomeKind::Lost {
            if !sess.outcomes.push_lost(outcome, max) {
                LOST_DROPPED.incr();
            }
        } else {
            sess.outcomes.push(outcome);
        }
        if let Some(id) = wake_reader(ctx, sess) {
            s.readers.remove(&id);
        }
    });
}

/// Answer the parked reader of `sess`, if it has one and there is something after its cursor.
/// Returns the reader's blocked-client id.
fn wake_reader(ctx: Ctx, sess: &mut Session) -> Option<usize> {
    let cursor = sess.reader.as_ref()?.cursor;
    if !sess.outcomes.has_after(cursor) {
        return None;
    }
    let r = sess.reader.take()?;
    let id = r.bc.id();
    let reply = sess.outcomes.read(r.cursor, r.count, grant_final);
    answer_reader(ctx, sess, r, reply);
    Some(id)
}

/// Send `reply` to a parked reader and start the grace period.
fn answer_reader(ctx: Ctx, sess: &mut Session, r: Reader, reply: Reply) {
    unblock_reader(r, reply);
    schedule_expiry(ctx, sess);
}

/// Send `reply` to a parked reader that stops reading; its read timeout goes.
fn unblock_reader(r: Reader, reply: Reply) {
    if let Some(t) = r.timeout {
        timers::cancel(t);
    }
    block::unblock(
        r.bc,
        Some(Wake {
            handle: r.bc.id(),
            reply,
        }),
    );
}

/// Undo a grant nobody will receive (on the next timer turn).
/// A grant a read returned (or a blind acknowledgement passed) is its owner's: nothing will
/// undo it, so its ticket goes.
fn grant_final((id, _, _, ticket): Grant) {
    wait::grant_final(&id, ticket);
}

fn undo_later(ctx: Ctx, (id, req, reply, ticket): Grant) {
    wait::revoke_later(ctx, id, req, reply, ticket);
}

// ---- liveness --------------------------------------------------------------------------------------

/// The session ends `grace_ms` from now unless its listener reads again.
///
/// A listener reads after every outcome (a hand-off on a busy lock is one read each): the job
/// armed for an earlier end is kept, and when it comes it looks again at the end due then
/// ([`expire_due`]). Cancelling it and scheduling another on every read cost two changes of
/// the module's timers and a boxed job a read (1,500 instructions, callgrind).
fn schedule_expiry(ctx: Ctx, sess: &mut Session) {
    let at = ctx.now_ms().saturating_add(sess.grace_ms);
    sess.ends_at = Some(at);
    if sess.expiry.is_some_and(|t| t.at_ms <= at) {
        return;
    }
    if let Some(t) = sess.expiry.take() {
        timers::cancel(t);
    }
    sess.expiry = Some(arm_expiry(ctx, &sess.name, at));
}

fn arm_expiry(ctx: Ctx, name: &[u8], at: i64) -> TimerKey {
    let name: Box<[u8]> = name.into();
    timers::schedule(ctx, at, move |ctx| expire_due(ctx, &name))
}

/// The session's expiry job came: it ends if its end is due (no read since, and no reader
/// parked); a later end is looked at again then; a parked reader keeps it alive (its grace
/// starts again when it stops reading).
fn expire_due(ctx: Ctx, name: &[u8]) {
    let Some(id) = state(|s| s.by_name.get(name).copied()) else {
        return;
    };
    let due = state(|s| {
        let sess = s.sessions.get_mut(&id)?;
        sess.expiry = None;
        match sess.ends_at {
            Some(at) if sess.reader.is_none() => {
                if at <= ctx.now_ms() {
                    return Some(());
                }
                sess.expiry = Some(arm_expiry(ctx, name, at));
                None
            }
            _ => None,
        }
    });
    if due.is_some() {
        EXPIRED.incr();
        end(ctx, id);
    }
}

/// End session `id`: its queued requests leave their queues, grants it did not acknowledge
/// are undone and handed on, its holds stop being watched, a parked reader is told.
fn end(ctx: Ctx, id: u32) {
    let Some(mut sess) = state(|s| {
        let sess = s.sessions.remove(&id)?;
        s.by_name.remove(&sess.name);
        if let Some(n) = s.per_user.get_mut(&sess.owner) {
            *n -= 1;
            if *n == 0 {
                s.per_user.remove(&sess.owner);
            }
        }
        if let Some(r) = &sess.reader {
            s.readers.remove(&r.bc.id());
        }
        s.unwatch_session(id, &sess.watch_keys);
        Some(sess)
    }) else {
        return;
    };
    if let Some(t) = sess.expiry.take() {
        timers::cancel(t);
    }
    if let Some(r) = sess.reader.take() {
        unblock_reader(r, Reply::Error(CmdError::NoSession));
    }
    wait::withdraw_session(ctx, id);
    for e in sess.outcomes.drain() {
        if let Some(g) = e.outcome.grant {
            undo_later(ctx, g);
        }
    }
}

/// The server became a replica: every queued wait ends (session requests get the error as an
/// outcome), so clients queue again on the new master.
pub fn demoted(ctx: Ctx) {
    wait::fail_all_waits(ctx, CmdError::Demoted);
}

// ---- parked readers ---------------------------------------------------------------------------------

/// `CLIENT UNBLOCK` of a parked reader: it returns with nothing, as XREAD BLOCK does.
pub fn on_unblocked(ctx: Ctx, bc: BlockedClient) -> bool {
    let ours = reader_left(ctx, bc);
    if ours {
        ctx.reply(&Reply::Array(Vec::new()));
    }
    ours
}

/// A parked reader's connection closed: the grace period starts.
pub fn on_disconnected(ctx: Ctx, bc: BlockedClient) -> bool {
    reader_left(ctx, bc)
}

/// `bc`, if it is a parked reader, stops reading: its read timeout goes, its session's grace
/// period starts, and it is unblocked. False when `bc` is not a reader.
fn reader_left(ctx: Ctx, bc: BlockedClient) -> bool {
    let Some(id) = state(|s| s.readers.remove(&bc.id())) else {
        return false;
    };
    state(|s| {
        if let Some(sess) = s.sessions.get_mut(&id) {
            if let Some(r) = sess.reader.take() {
                if let Some(t) = r.timeout {
                    timers::cancel(t);
                }
            }
            schedule_expiry(ctx, sess);
        }
    });
    block::unblock(bc, None);
    true
}

/// Totals for `INFO rlock`: sessions, requests queued through them, outcomes not acknowledged,
/// holds watched.
pub fn totals() -> (usize, usize, usize, usize) {
    state(|s| {
        let queued = s.sessions.values().map(|x| x.queued.len()).sum();
        let pending = s.sessions.values().map(|x| x.outcomes.len()).sum();
        let holds = s.tracked.values().map(|w| w.holds.len()).sum();
        (s.sessions.len(), queued, pending, holds)
    })
}

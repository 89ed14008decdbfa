//! Sessions, Redis side: many waits over one connection.
//!
//! - A request queued with `SESSION s QUEUE <request> <timeout_ms>` waits in the same FIFO as
//!   blocked clients (`wait`); its outcome (granted, timeout, error) is appended to the
//!   session's outcome list instead of unblocking a client (this file is `wait`'s session sink).
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

use crate::config::{
    self, SESSION_MAX_BACKLOG, SESSION_MAX_GRACE_MS, SESSION_MAX_NAME_BYTES, SESSION_MAX_PER_USER,
    SESSION_MAX_QUEUED,
};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats::Counter;
use crate::core::store::{Kind as KeyKind, Store, Target};
use crate::core::wait::session::{self as rules, Kind, New, Outcomes};
use crate::core::wait::HashMap;
use crate::core::wait::{queue, KeyId, Req, TimerKey};
use crate::ffi::block::{self, BlockedClient, Wake};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::timers;
use crate::wait::{self, Ended, Handle};
use std::cell::RefCell;
use std::collections::HashSet;

/// What undoing a grant needs, kept until the grant is acknowledged.
type Grant = (KeyId, Req, Reply);

struct Session {
    name: Box<[u8]>,
    /// The ACL user who opened it (`None`: opened by a context without a user).
    owner: Option<Box<[u8]>>,
    grace_ms: i64,
    /// The client id of the connection that last opened or read it.
    listener: u64,
    reader: Option<Reader>,
    /// When the session ends unless its listener reads again (none while one waits in READ).
    expiry: Option<TimerKey>,
    /// The keys where it has holds watched, with how many: ending the session visits these.
    watching: HashMap<KeyId, u32>,
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

#[derive(Default)]
struct State {
    sessions: HashMap<u32, Session>,
    by_name: HashMap<Box<[u8]>, u32>,
    /// Sessions open per ACL user (bounded by `rlock.session-max-per-user`).
    per_user: HashMap<Option<Box<[u8]>>, usize>,
    next_id: u32,
    /// Parked readers by blocked-client id.
    readers: HashMap<usize, u32>,
    tracked: HashMap<KeyId, Vec<Tracked>>,
    /// The pending loss check of each watched key.
    checks: HashMap<KeyId, TimerKey>,
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
    wait::set_session_hooks(wait::SessionHooks {
        sink,
        watch,
        after_write,
        handed,
    });
    for c in [&OPENED, &EXPIRED, &CLOSED, &LOST, &HANDED, &LOST_DROPPED] {
        c.reset();
    }
}

/// The session called `name`, if the calling user owns it (`NOPERM` otherwise: a session is
/// used only by the user who opened it).
pub fn resolve(ctx: Ctx, name: &[u8]) -> Result<u32, CmdError> {
    let user = ctx.user_name();
    state(|s| {
        let id = *s.by_name.get(name).ok_or(CmdError::NoSession)?;
        let sess = s.sessions.get(&id).ok_or(CmdError::NoSession)?;
        if owns(&user, sess) {
            Ok(id)
        } else {
            Err(CmdError::SessionNoPerm(name.to_vec()))
        }
    })
}

/// Whether `user` (the caller's ACL user; `None`: a context of the module's own) owns `sess`.
fn owns(user: &Option<Vec<u8>>, sess: &Session) -> bool {
    match (user, &sess.owner) {
        (None, _) => true,
        (Some(u), Some(o)) => u[..] == o[..],
        (Some(_), None) => false,
    }
}

/// Whether the caller may see every session (`RSESSION.LIST`, `RSESSION.INFO`): an
/// administrator, i.e. a user who may run `ACL LIST`.
fn sees_all(ctx: Ctx) -> bool {
    ctx.user_may_run(&[b"ACL", b"LIST"])
}

// ---- queueing and outcomes -----------------------------------------------------------------------

/// Queue `req` as request `request` of session `session`, with a deadline `timeout_ms` from
/// now (0: none). Reply `QUEUED`, or with `park_ms` park the connection for that first part of
/// the wait (`wait::park_request`).
pub fn queue(
    ctx: Ctx,
    keys: &RedisKeys,
    session: u32,
    (request, timeout_ms, park_ms): (u64, i64, Option<i64>),
    req: Req,
) -> Result<Answer, CmdError> {
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
        None => Answer::Reply(wait::QUEUED),
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
                undo_later(ctx, (id, req, reply));
                return;
            }
            if req.owner().is_some() {
                // Granted in this very step: the request tells its lease end, or the keys do.
                let until = req
                    .granted_until(ctx.now_ms())
                    .or_else(|| read_until(ctx, &req, &id));
                add(ctx, session, id.clone(), req.clone(), until);
            }
            let outcome = New {
                kind: Kind::Granted,
                request: Some(request),
                key: Some(id.key.to_vec()),
                object: Some(req.kind().name()),
                value: reply.clone(),
                grant: Some((id, req, reply)),
            };
            push(ctx, session, outcome);
        }
        Ended::TimedOut => push(ctx, session, about(Kind::Timeout, request, Reply::Nil)),
        Ended::Failed(e) => {
            let text = Reply::Bulk(e.to_string().into_bytes());
            push(ctx, session, about(Kind::Error, request, text))
        }
    }
}

/// An outcome of request `request` that grants nothing.
fn about(kind: Kind, request: u64, value: Reply) -> New<Grant> {
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
        if outcome.kind == Kind::Lost {
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
    let reply = sess.outcomes.read(r.cursor, r.count);
    answer_reader(ctx, sess, r, reply);
    Some(id)
}

/// Send `reply` to a parked reader and start the grace period.
fn answer_reader(ctx: Ctx, sess: &mut Session, r: Reader, reply: Reply) {
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
    schedule_expiry(ctx, sess);
}

/// Undo a grant nobody will receive, on the next timer turn (undoing writes keys, which must
/// not happen in a client's context: it selects the key's database).
fn undo_later(ctx: Ctx, (id, req, reply): Grant) {
    timers::schedule(ctx, ctx.now_ms(), move |ctx| {
        wait::revoke(ctx, &id, &req, &reply)
    });
}

// ---- liveness --------------------------------------------------------------------------------------

/// The session ends `grace_ms` from now unless its listener reads again.
fn schedule_expiry(ctx: Ctx, sess: &mut Session) {
    if let Some(t) = sess.expiry.take() {
        timers::cancel(t);
    }
    let name = sess.name.clone();
    sess.expiry = Some(timers::schedule(
        ctx,
        ctx.now_ms().saturating_add(sess.grace_ms),
        move |ctx| {
            if let Some(id) = state(|s| s.by_name.get(&name).copied()) {
                if state(|s| s.sessions.get(&id).is_some_and(|x| x.reader.is_none())) {
                    EXPIRED.incr();
                    end(ctx, id);
                }
            }
        },
    ));
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
        s.unwatch_session(id, &sess.watching);
        Some(sess)
    }) else {
        return;
    };
    if let Some(t) = sess.expiry.take() {
        timers::cancel(t);
    }
    if let Some(r) = sess.reader.take() {
        if let Some(t) = r.timeout {
            timers::cancel(t);
        }
        let reply = Reply::Error(CmdError::NoSession);
        block::unblock(
            r.bc,
            Some(Wake {
                handle: r.bc.id(),
                reply,
            }),
        );
    }
    wait::withdraw_session(ctx, id);
    for e in sess.outcomes.drain() {
        if let Some(g) = e.outcome.grant {
            undo_later(ctx, g);
        }
    }
}

// ---- watching holds for loss -----------------------------------------------------------------------

/// Watch the hold `req` stands for on `id` for session `session`; its key is looked at on the
/// next turn, and then at each lease end.
fn watch(ctx: Ctx, session: u32, id: KeyId, req: Req) {
    // Objects without owners (semaphores, latches) hold nothing a session could lose. (Without
    // this check a blocked semaphore grant scheduled a look on the next turn, and found nothing:
    // 8.7 against 2.7 µs of server time per RSEM.ACQUIRE, 16 threads on 4 permits.)
    if req.owner().is_none() || state(|s| !s.sessions.contains_key(&session)) {
        return; // nothing to watch, or the session ended while its client waited
    }
    // The grant's reply was just sent, and other commands may have run since the grant: look
    // at the keys now, and next at its lease end. (A look on the next turn costs the event
    // loop an extra timer wake-up per hand-off: with 8 raw BLOCK clients naming a session on
    // one lock, 12,700 hand-offs/s against 22,900 without it.)
    let until = read_until(ctx, &req, &id);
    add(ctx, session, id, req, until);
}

/// Whether `req`'s owner holds it on `id`, and until when, read from the keys (which can be
/// read here only in their own database: `None` otherwise).
fn read_until(ctx: Ctx, req: &Req, id: &KeyId) -> Option<Option<i64>> {
    (ctx.db() == id.db)
        .then(|| req.held_until(&RedisKeys::background(ctx, &id.key)))
        .flatten()
}

/// Watch `req`'s hold on `id` for `session`, held `until` (`None`: not seen held; look at once).
fn add(ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>) {
    state(|s| s.add_watch(&id, session, req));
    match until {
        Some(Some(at)) => check_at(ctx, &id, at.saturating_add(1)),
        Some(None) => {}
        None => check_at(ctx, &id, ctx.now_ms()),
    }
}

/// Watch what an acquire naming session `session` just took.
pub fn track(ctx: Ctx, session: u32, keys: &RedisKeys, req: Req) {
    let until = req
        .granted_until(ctx.now_ms())
        .or_else(|| req.held_until(keys));
    if until.is_some() {
        add(
            ctx,
            session,
            KeyId::new(ctx.db(), keys.name.bytes()),
            req,
            until,
        );
    }
}

impl State {
    /// Stop watching `id`: no hold there is watched any more.
    fn unwatch(&mut self, id: &KeyId) {
        if let Some(holds) = self.tracked.remove(id) {
            for t in holds {
                self.unnote(t.session, id);
            }
        }
        if let Some(t) = self.checks.remove(id) {
            timers::cancel(t);
        }
        queue::shrink(&mut self.tracked);
    }

    /// Session `session` watches one hold less on `id`.
    fn unnote(&mut self, session: u32, id: &KeyId) {
        if let Some(sess) = self.sessions.get_mut(&session) {
            if let Some(n) = sess.watching.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    sess.watching.remove(id);
                    queue::shrink(&mut sess.watching);
                }
            }
        }
    }

    /// Stop watching the holds of session `session` (ending; already out of `sessions`), on the
    /// keys it watched.
    fn unwatch_session(&mut self, session: u32, watching: &HashMap<KeyId, u32>) {
        for id in watching.keys() {
            if let Some(holds) = self.tracked.get_mut(id) {
                holds.retain(|t| t.session != session);
                if holds.is_empty() {
                    self.unwatch(id);
                }
            }
        }
    }

    /// Watch `req`'s hold for `session`, unless that hold (same object, owner and mode) is
    /// watched already: a re-entry is the same hold, and one loss is one `lost` outcome.
    fn add_watch(&mut self, id: &KeyId, session: u32, req: Req) {
        let Some(sess) = self.sessions.get_mut(&session) else {
            return;
        };
        let holds = self.tracked.entry(id.clone()).or_default();
        let same = |t: &Tracked| {
            t.session == session && t.req.kind() == req.kind() && t.req.show() == req.show()
        };
        if !holds.iter().any(same) {
            holds.push(Tracked { session, req });
            *sess.watching.entry(id.clone()).or_default() += 1;
        }
    }
}

/// Look at `id`'s watched holds no later than `at`.
fn check_at(ctx: Ctx, id: &KeyId, at: i64) {
    if !timers::supersede(state(|s| s.checks.get(id).copied()), at) {
        return;
    }
    let key = id.clone();
    let t = timers::schedule(ctx, at, move |ctx| {
        state(|s| s.checks.remove(&key));
        if ctx.is_replica() || !ctx.select_db(key.db) {
            return;
        }
        let keys = RedisKeys::background(ctx, &key.key);
        check(ctx, &key, &keys);
    });
    state(|s| s.checks.insert(id.clone(), t));
}

/// Compare `id`'s watched holds with what its keys hold now: each that ended is lost.
fn check(ctx: Ctx, id: &KeyId, keys: &RedisKeys) {
    let Some(holds) = state(|s| s.tracked.remove(id)) else {
        return;
    };
    let mut kept = Vec::new();
    let mut next: Option<i64> = None;
    for t in holds {
        match t.req.held_until(keys) {
            Some(until) => {
                if let Some(at) = until {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                kept.push(t);
            }
            None if moved_away(ctx, keys) => {
                // Not lost: its keys (or some of them) are on the node a slot migration moves
                // them to, where the hold lives on. This node can no longer watch it.
                state(|s| s.unnote(t.session, id));
            }
            None => {
                LOST.incr();
                state(|s| s.unnote(t.session, id));
                let owner = t.req.owner().unwrap_or_default().to_vec();
                let outcome = New {
                    kind: Kind::Lost,
                    request: None,
                    key: Some(id.key.to_vec()),
                    object: Some(t.req.kind().name()),
                    value: Reply::Bulk(owner),
                    grant: None,
                };
                push(ctx, t.session, outcome);
            }
        }
    }
    if kept.is_empty() {
        state(|s| s.unwatch(id));
        return;
    }
    // (`kept` stay noted in their sessions' `watching`: they were never un-noted.)
    state(|s| s.tracked.entry(id.clone()).or_default().extend(kept));
    if let Some(at) = next {
        check_at(ctx, id, at.saturating_add(1));
    }
}

/// Whether `keys`' object left this node, wholly or in part, by a slot migration (cluster
/// mode): its key is absent and its slot served elsewhere, or some key it was read from is
/// absent while the slot is migrating (`RedisKeys::whole`).
fn moved_away(ctx: Ctx, keys: &RedisKeys) -> bool {
    if !crate::keys::cluster(ctx) {
        return false;
    }
    if keys.kind(&Target::Main) == KeyKind::Empty && !ctx.serves_key(keys.name.bytes()) {
        return true;
    }
    keys.whole(&[]).is_err()
}

/// `owner` released a hold on the command's key: holds of `owner` that ended are not lost,
/// they stop being watched.
pub fn released(ctx: Ctx, keys: &RedisKeys, owner: &[u8]) {
    if state(|s| s.tracked.is_empty()) {
        return;
    }
    let id = KeyId::new(ctx.db(), keys.name.bytes());
    state(|s| {
        if let Some(holds) = s.tracked.get_mut(&id) {
            // The key is gone with the release (a lock's last hold): none of the owner's holds
            // is left there, no need to read each back (1,400 of an RLOCK.RELEASE's 9,300
            // instructions).
            let gone = keys.kind(&Target::Main) == KeyKind::Empty;
            let mut ended = Vec::new();
            holds.retain(|t| {
                let kept =
                    t.req.owner() != Some(owner) || (!gone && t.req.held_until(keys).is_some());
                if !kept {
                    ended.push(t.session);
                }
                kept
            });
            let empty = holds.is_empty();
            for session in ended {
                s.unnote(session, &id);
            }
            if empty {
                s.unwatch(&id);
            }
        }
    });
}

/// Whether any hold is watched (else a write has nothing to tell sessions).
pub fn watching() -> bool {
    state(|s| !s.tracked.is_empty())
}

/// A command may have ended holds on its key (a force release): look now.
pub fn after_write(ctx: Ctx, keys: &RedisKeys) {
    if state(|s| s.tracked.is_empty()) {
        return;
    }
    let id = KeyId::new(ctx.db(), keys.name.bytes());
    check(ctx, &id, keys);
}

/// A keyspace event on `key`: if a watched hold lives there, look at it on the next turn.
pub fn key_touched(ctx: Ctx, db: i32, key: &[u8]) {
    let id = KeyId::new(db, key);
    let watched = STATE.with(|cell| {
        cell.try_borrow()
            .is_ok_and(|s| !s.tracked.is_empty() && s.tracked.contains_key(&id))
    });
    if watched {
        check_at(ctx, &id, ctx.now_ms());
    }
}

/// FLUSH*, SWAPDB: look at every watched hold of database `db` (or of all).
pub fn db_touched(ctx: Ctx, db: Option<i32>) {
    let ids: Vec<KeyId> = state(|s| {
        s.tracked
            .keys()
            .filter(|id| db.is_none_or(|d| id.db == d))
            .cloned()
            .collect()
    });
    for id in ids {
        check_at(ctx, &id, ctx.now_ms());
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

// ---- commands ------------------------------------------------------------------------------------

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
                if !owns(&user, &s.sessions[id]) {
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
                        watching: HashMap::default(),
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
        if let Some(t) = old.timeout {
            timers::cancel(t);
        }
        block::unblock(
            old.bc,
            Some(Wake {
                handle: old.bc.id(),
                reply: Reply::Array(Vec::new()),
            }),
        );
    }
    let may_block = ctx.may_block();
    state(|s| {
        let sess = s.sessions.get_mut(&id).ok_or(CmdError::NoSession)?;
        sess.outcomes.ack(r.cursor);
        sess.listener = ctx.client_id();
        let ready = sess.outcomes.has_after(r.cursor);
        let Some(ms) = r.block_ms.filter(|_| !ready && may_block) else {
            schedule_expiry(ctx, sess);
            return Ok(Answer::Reply(sess.outcomes.read(r.cursor, r.count)));
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
            .map_or(0, |sess| sess.outcomes.ack(cursor))
    });
    Ok(Answer::Reply(Reply::Int(n as i64)))
}

/// `RSESSION.CANCEL session request`: withdraw a queued request. 1 when it was still queued;
/// 0 when not (its outcome, perhaps a grant, is or will be in the session's outcomes).
pub fn cancel(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (name, request) = rules::parse_cancel(&argv)?;
    let session = resolve(ctx, name)?;
    let withdrawn = wait::withdraw(ctx, Handle::Session { session, request }).is_some();
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
        let holds: u32 = sess.watching.values().sum();
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
            .filter(|x| all || owns(&user, x))
            .map(|x| Reply::Bulk(x.name.to_vec()))
            .collect()
    });
    Ok(Answer::Reply(Reply::Array(names)))
}

/// Totals for `INFO rlock`: sessions, requests queued through them, outcomes not acknowledged,
/// holds watched.
pub fn totals() -> (usize, usize, usize, usize) {
    state(|s| {
        let queued = s.sessions.values().map(|x| x.queued.len()).sum();
        let pending = s.sessions.values().map(|x| x.outcomes.len()).sum();
        let holds = s.tracked.values().map(Vec::len).sum();
        (s.sessions.len(), queued, pending, holds)
    })
}

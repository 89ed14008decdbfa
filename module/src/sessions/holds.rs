//! Hold watching: holds granted through a session, or taken by an acquire naming it, are
//! watched for loss. When one ends by anything but its owner's release (FORCERELEASE, DEL,
//! expiry, eviction, FLUSH, a Redisson force unlock), a `lost` outcome goes to its session.

use super::{push, state, State, Tracked, LOST, STATE};
use crate::core::decision::Reply;
use crate::core::store::{KeyType, Store, Target};
use crate::core::wait::session::{New, OutcomeKind};
use crate::core::wait::HashMap;
use crate::core::wait::{queue, KeyId, Req};
use crate::ffi::Ctx;
use crate::keys::RedisKeys;
use crate::timers;

/// Watch the hold `req` stands for on `id` for session `session`; its key is looked at on the
/// next turn, and then at each lease end.
pub(super) fn watch(ctx: Ctx, session: u32, id: KeyId, req: Req) {
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
pub(super) fn read_until(ctx: Ctx, req: &Req, id: &KeyId) -> Option<Option<i64>> {
    (ctx.db() == id.db)
        .then(|| {
            let held = req.holds()?;
            held.held_until(&RedisKeys::background(ctx, &id.key))
        })
        .flatten()
}

/// Watch `req`'s hold on `id` for `session`, held `until` (`None`: not seen held; look at once).
pub(super) fn add(ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>) {
    state(|s| s.add_watch(&id, session, req));
    match until {
        Some(Some(at)) => check_at(ctx, &id, at.saturating_add(1)),
        Some(None) => {}
        None => check_at(ctx, &id, ctx.now_ms()),
    }
}

/// Watch what an acquire naming session `session` just took on `key` (whose keys `open`
/// opens, if what the grant tells is not enough).
pub fn track(ctx: Ctx, session: u32, key: &[u8], req: Req, open: impl FnOnce() -> RedisKeys) {
    let Some(held) = req.holds() else {
        return; // objects without owners hold nothing a session could lose
    };
    let until = held
        .granted_until(ctx.now_ms())
        .or_else(|| held.held_until(&open()));
    if until.is_some() {
        add(ctx, session, KeyId::new(ctx.db(), key), req, until);
    }
}

impl State {
    /// Stop watching `id`: no hold there is watched any more.
    pub(super) fn unwatch(&mut self, id: &KeyId) {
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
    pub(super) fn unnote(&mut self, session: u32, id: &KeyId) {
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
    pub(super) fn unwatch_session(&mut self, session: u32, watching: &HashMap<KeyId, u32>) {
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
    pub(super) fn add_watch(&mut self, id: &KeyId, session: u32, req: Req) {
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
    let current = state(|s| s.checks.get(id).copied());
    let job = || {
        let key = id.clone();
        move |ctx| {
            state(|s| s.checks.remove(&key));
            if let Some(keys) = RedisKeys::looked_at(ctx, &key) {
                check(ctx, &key, &keys);
            }
        }
    };
    if let Some(t) = timers::keyed(ctx, current, at, job) {
        state(|s| s.checks.insert(id.clone(), t));
    }
}

/// Compare `id`'s watched holds with what its keys hold now: each that ended is lost.
fn check(ctx: Ctx, id: &KeyId, keys: &RedisKeys) {
    let Some(holds) = state(|s| s.tracked.remove(id)) else {
        return;
    };
    let mut kept = Vec::new();
    let mut next: Option<i64> = None;
    for t in holds {
        match t.req.holds().and_then(|h| h.held_until(keys)) {
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
                    kind: OutcomeKind::Lost,
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
    if keys.kind(&Target::Main) == KeyType::Empty && !ctx.serves_key(keys.name.bytes()) {
        return true;
    }
    keys.whole(&[]).is_err()
}

/// `owner` released a hold on the command's key `key`: holds of `owner` that ended are not
/// lost, they stop being watched. `keys`: the key to read them back from; `None` when the
/// release deleted it.
pub fn released(ctx: Ctx, key: &[u8], keys: Option<&RedisKeys>, owner: &[u8]) {
    if state(|s| s.tracked.is_empty()) {
        return;
    }
    let id = KeyId::new(ctx.db(), key);
    state(|s| {
        if let Some(holds) = s.tracked.get_mut(&id) {
            // The key is gone with the release (a lock's last hold): none of the owner's holds
            // is left there, no need to read each back (1,400 of an RLOCK.RELEASE's 9,300
            // instructions).
            let keys = keys.filter(|k| k.kind(&Target::Main) != KeyType::Empty);
            let mut ended = Vec::new();
            holds.retain(|t| {
                let kept = t.req.owner() != Some(owner)
                    || keys.is_some_and(|k| t.req.holds().and_then(|h| h.held_until(k)).is_some());
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

//! Hold watching: holds granted through a session, or taken by an acquire naming it, are
//! watched for loss. When one ends by anything but its owner's release (FORCERELEASE, DEL,
//! expiry, eviction, FLUSH, a Redisson force unlock), a `lost` outcome goes to its session.
//!
//! The cost of a watch is paid on the client's default path (every `lock()` names its session),
//! so it is kept small: one map entry per watched key holds its holds and its pending look
//! (`Watched`); the looks are due times in one heap run by one timer job (`Looks`); a
//! session lists its keys in a vector it only appends to (`Session::watch_keys`), so a release
//! touches no map keyed by the key but this one, looked up without copying the key
//! (`KeyRef`). Callgrind, 20,000 pipelined calls on Redis 7.0.15 (`scripts/instructions.sh`):
//! a watched acquire + release cost 8,900 instructions more than the plain pair with three maps
//! keyed by the key and a boxed job per watch.

use super::by_key::ByKey;
use super::{push, state, Looks, State, Tracked, Watched, LOST, STATE};
use crate::core::decision::Reply;
use crate::core::store::{KeyType, Store, Target};
use crate::core::wait::session_rules::{New, OutcomeKind};
use crate::core::wait::{Deadline, KeyId, KeyRef, KeyView, Req};
use crate::ffi::Ctx;
use crate::keys::RedisKeys;

/// Watch the hold `req` stands for on `id` for session `session`, held `until` if known (else
/// read from its keys); its key is looked at then (at once if not held), and at each lease end.
pub(super) fn watch(ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>) {
    // Objects without owners (semaphores, latches) hold nothing a session could lose. (Without
    // this check a blocked semaphore grant scheduled a look on the next turn, and found nothing:
    // 8.7 against 2.7 µs of server time per RSEM.ACQUIRE, 16 threads on 4 permits.)
    if req.owner().is_none() || state(|s| !s.sessions.contains_key(&session)) {
        return; // nothing to watch, or the session ended while its client waited
    }
    // The grant's reply was just sent, and other commands may have run since the grant: unless
    // the caller knows its hold did not end since, look at the keys now, and next at its lease
    // end. (A look on the next turn costs the event loop an extra timer wake-up per hand-off:
    // with 8 raw BLOCK clients naming a session on one lock, 12,700 hand-offs/s against 22,900
    // without it.)
    let until = until.or_else(|| read_until(ctx, &req, &id));
    add(ctx, session, id, req, until);
}

/// Whether `req`'s owner holds it on `id`, and until when, read from the keys (which can be
/// read here only in their own database: `None` otherwise).
pub(super) fn read_until(ctx: Ctx, req: &Req, id: &KeyId) -> Option<Option<i64>> {
    (ctx.db() == id.db)
        .then(|| req.held_until(&RedisKeys::background(ctx, &id.key)))
        .flatten()
}

/// Watch `req`'s hold on `id` for `session`, held `until` (`None`: not seen held; look at once).
pub(super) fn add(ctx: Ctx, session: u32, id: KeyId, req: Req, until: Option<Option<i64>>) {
    let at = match until {
        Some(Some(at)) => Some(at.saturating_add(1)),
        Some(None) => None,
        None => Some(ctx.now_ms()),
    };
    state(|s| s.add_watch(ctx, &id, session, req, at));
}

/// Watch what an acquire naming session `session` just took on `key` (whose keys `open`
/// opens, if what the grant tells is not enough).
pub fn track(ctx: Ctx, session: u32, key: &[u8], req: Req, open: impl FnOnce() -> RedisKeys) {
    let Some(held) = req.holds() else {
        return; // objects without owners hold nothing a session could lose
    };
    let until = held
        .granted_until(ctx.now_ms())
        .or_else(|| req.held_until(&open()));
    if until.is_some() {
        add(ctx, session, KeyId::new(ctx.db(), key), req, until);
    }
}

impl State {
    /// Stop watching `id`: no hold there is watched any more.
    pub(super) fn unwatch(&mut self, id: &dyn KeyView) {
        if let Some(w) = self.tracked.remove(id) {
            for t in &w.holds {
                self.unnote(t.session);
            }
            if let Some(d) = w.check {
                drop(self.looks.cancel(d)); // its job stays armed (`timers::Batch`)
            }
        }
    }

    /// Session `session` watches one hold less (its `watch_keys` keep the key until the list
    /// is compacted or the session ends).
    pub(super) fn unnote(&mut self, session: u32) {
        if let Some(sess) = self.sessions.get_mut(&session) {
            sess.watched = sess.watched.saturating_sub(1);
        }
    }

    /// Stop watching the holds of session `session` (ending; already out of `sessions`), on the
    /// keys it watched.
    pub(super) fn unwatch_session(&mut self, session: u32, keys: &[KeyId]) {
        for id in keys {
            if let Some(w) = self.tracked.get_mut(id) {
                w.holds.retain(|t| t.session != session);
                if w.holds.is_empty() {
                    self.unwatch(id);
                }
            }
        }
    }

    /// Watch `req`'s hold for `session`, unless that hold (same object, owner and mode) is
    /// watched already: a re-entry is the same hold, and one loss is one `lost` outcome. Its
    /// key is looked at no later than `at`, if given. Nothing without such a session.
    pub(super) fn add_watch(
        &mut self,
        ctx: Ctx,
        id: &KeyId,
        session: u32,
        req: Req,
        at: Option<i64>,
    ) {
        let Some(sess) = self.sessions.get_mut(&session) else {
            return;
        };
        if sess.watch_keys.len() >= 2 * sess.watched as usize + 32 {
            compact(&mut sess.watch_keys, session, &self.tracked);
        }
        let w = self.tracked.get_or_default(id);
        let same = |t: &Tracked| {
            t.session == session && t.req.kind() == req.kind() && t.req.show() == req.show()
        };
        if !w.holds.iter().any(same) {
            w.holds.push(Tracked { session, req });
            sess.watched += 1;
            sess.watch_keys.push(id.clone());
        }
        if let Some(at) = at {
            look_at(&mut self.looks, ctx, id, &mut w.check, at);
        }
    }
}

/// Drop from a session's `watch_keys` the keys where it watches nothing any more, and the
/// repeated ones (amortised O(1) per watch: run when the list is twice its watched holds).
fn compact(keys: &mut Vec<KeyId>, session: u32, tracked: &ByKey<Watched>) {
    keys.sort_unstable();
    keys.dedup();
    keys.retain(|id| {
        tracked
            .get(id)
            .is_some_and(|w| w.holds.iter().any(|t| t.session == session))
    });
    if keys.capacity() > 64 && keys.len() * 4 < keys.capacity() {
        keys.shrink_to(keys.len() * 2);
    }
}

/// Have `id`'s watched holds looked at no later than `at` (`check`: the key's pending look):
/// one look per key, at the earliest anyone asked for.
fn look_at(looks: &mut Looks, ctx: Ctx, id: &KeyId, check: &mut Option<Deadline>, at: i64) {
    match *check {
        Some(d) if d.at_ms <= at => return,
        Some(d) => drop(looks.cancel(d)),
        None => {}
    }
    *check = Some(looks.push(ctx, at, id.clone(), run_looks));
}

/// The looks' job: look at every key whose look is due. Those due are taken first, so a look
/// asked for while they run (a key still held past the lease end the live clock gives, as the
/// server's own clock may lag: `timers::on_timer`) waits for the next wake-up.
fn run_looks(ctx: Ctx) {
    let now = ctx.now_ms();
    let due = state(|s| s.looks.take_due(now));
    for (d, id) in due {
        looked_at(ctx, d, id);
    }
    state(|s| s.looks.arm(ctx, run_looks));
}

/// The look `d` at `id` is due.
fn looked_at(ctx: Ctx, d: Deadline, id: KeyId) {
    state(|s| {
        if let Some(w) = s.tracked.get_mut(&id) {
            if w.check == Some(d) {
                w.check = None;
            }
        }
    });
    if let Some(keys) = RedisKeys::looked_at(ctx, &id) {
        check(ctx, &id, &keys);
    }
}

/// Pending looks at watched holds, and timer jobs of the module's that run them (0 or 1), for
/// `INFO rlock`'s `timer_jobs`.
pub fn timed_looks() -> (usize, usize) {
    state(|s| s.looks.counts())
}

/// Look at `id`'s watched holds, if it has any, no later than `at`.
fn check_at(ctx: Ctx, id: &KeyId, at: i64) {
    state(|s| {
        if let Some(w) = s.tracked.get_mut(id) {
            look_at(&mut s.looks, ctx, id, &mut w.check, at);
        }
    });
}

/// Compare `id`'s watched holds with what its keys hold now: each that ended is lost.
fn check(ctx: Ctx, id: &KeyId, keys: &RedisKeys) {
    // The entry stays, with its pending look, while its holds are compared.
    let Some(holds) = state(|s| s.tracked.get_mut(id).map(|w| std::mem::take(&mut w.holds))) else {
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
                state(|s| s.unnote(t.session));
            }
            None => {
                LOST.incr();
                state(|s| s.unnote(t.session));
                let owner = t.req.owner().unwrap_or_default().to_vec();
                let outcome = New {
                    kind: OutcomeKind::Lost,
                    request: None,
                    key: Some(id.key.clone()),
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
    // (`kept` stay counted in their sessions' `watched`: they were never un-noted.)
    state(|s| {
        let w = s.tracked.get_or_default(id);
        w.holds.extend(kept);
        if let Some(at) = next {
            look_at(&mut s.looks, ctx, id, &mut w.check, at.saturating_add(1));
        }
    });
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
    let id = KeyRef { db: ctx.db(), key };
    let id = &id as &dyn KeyView;
    state(|s| {
        if s.tracked.is_empty() {
            return;
        }
        if let Some(w) = s.tracked.get_mut(id) {
            // The key is gone with the release (a lock's last hold): none of the owner's holds
            // is left there, no need to read each back (1,400 of an RLOCK.RELEASE's 9,300
            // instructions).
            let keys = keys.filter(|k| k.kind(&Target::Main) != KeyType::Empty);
            let mut ended = smallvec::SmallVec::<[u32; 4]>::new();
            w.holds.retain(|t| {
                let kept = t.req.owner() != Some(owner)
                    || keys.is_some_and(|k| t.req.held_until(k).is_some());
                if !kept {
                    ended.push(t.session);
                }
                kept
            });
            let empty = w.holds.is_empty();
            for session in ended {
                s.unnote(session);
            }
            if empty {
                s.unwatch(id);
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
    let key = keys.name.bytes();
    let view = KeyRef { db: ctx.db(), key };
    if state(|s| s.tracked.contains_key(&view as &dyn KeyView)) {
        check(ctx, &KeyId::new(ctx.db(), key), keys);
    }
}

/// A keyspace event on `key`: if a watched hold lives there, look at it on the next turn.
pub fn key_touched(ctx: Ctx, db: i32, key: &[u8]) {
    let view = KeyRef { db, key };
    let watched = STATE.with(|cell| {
        cell.try_borrow()
            .is_ok_and(|s| !s.tracked.is_empty() && s.tracked.contains_key(&view as &dyn KeyView))
    });
    if watched {
        check_at(ctx, &KeyId::new(db, key), ctx.now_ms());
    }
}

/// The keys `left` selects left this node with their slot (a slot migration): their holds are
/// not lost, they live on where the slot went, where this node cannot watch them.
pub fn keys_left(left: impl Fn(&KeyId) -> bool) {
    state(|s| {
        let ids: Vec<KeyId> = s.tracked.keys().filter(|id| left(id)).cloned().collect();
        for id in &ids {
            s.unwatch(id);
        }
    });
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

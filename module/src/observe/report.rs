//! Looking at tracked holds in their keys: the rows of `RLOCK.TOP HELD`, and the holds on a key
//! an event outside rlock touched. A hold whose owner no longer holds it is dropped there.
//!
//! No borrow of the state is held while a key is read: reading an expired key makes Redis
//! delete it, and the `expired` event that follows ends the key's holds here (`key_event`).

use super::{state, DROPPED};
use crate::core::objects;
use crate::core::observe::live::Held;
use crate::core::wait::KeyId;
use crate::ffi::clock::now_us;
use crate::ffi::Ctx;
use crate::keys::RedisKeys;

/// A live hold as `RLOCK.TOP HELD` shows it.
pub struct HeldRow {
    pub held: Held,
    pub age_ms: i64,
    /// Until its lease ends; -1 without one.
    pub ttl_ms: i64,
}

/// The `n` longest-held live holds whose key `visible` lets through, oldest first. Each is
/// checked in its keys first; one found ended (its end unseen) is dropped from the table.
/// Costs O(h log h) in the holds tracked (a sort by start), plus a look at the keys of the
/// oldest `n` alive, of the ended ones found before them (each found once) and of none that
/// `visible` hides.
pub fn held(ctx: Ctx, n: usize, visible: impl Fn(&[u8]) -> bool) -> Vec<HeldRow> {
    let mine = ctx.db();
    let places = state(|s| s.live.oldest_first());
    let mut rows = Vec::new();
    for place in places {
        if rows.len() == n {
            break;
        }
        // Gone meanwhile: an expiry the reads below made Redis notice ended it.
        let Some(held) = state(|s| s.live.get(place)) else {
            continue;
        };
        if !visible(&held.key) {
            continue;
        }
        match look(ctx, &held) {
            Some(until) => {
                let now_ms = ctx.now_ms();
                rows.push(HeldRow {
                    age_ms: (now_us().saturating_sub(held.since_us) / 1000) as i64,
                    ttl_ms: until.map_or(-1, |at| at.saturating_sub(now_ms).max(0)),
                    held,
                });
            }
            None => {
                if state(|s| s.live.remove(place)).is_some() {
                    DROPPED.incr();
                }
            }
        }
    }
    // Reading a hold of another database selected it on the caller's connection.
    ctx.select_db(mine);
    rows
}

/// Whether `held`'s owner still holds it, and until when, read in its own database (the
/// caller restores its own). Unknown (an unselectable database) counts as held.
fn look(ctx: Ctx, held: &Held) -> Option<Option<i64>> {
    if ctx.db() != held.db && !ctx.select_db(held.db) {
        return Some(None);
    }
    let keys = RedisKeys::peek(ctx, &held.key);
    objects::of(held.kind).held_until(&held.owner, held.exclusive, &keys)
}

/// The job [`super::key_event`] schedules: look at the holds on every key an event outside
/// rlock touched; those that ended were seen ending at the event (a moment ago), so they are
/// timed.
pub(super) fn look_at_touched(ctx: Ctx) {
    let ids: Vec<KeyId> = state(|s| s.look.drain().collect());
    for id in ids {
        let holds = state(|s| s.live.holds_on(id.db, &id.key));
        if holds.is_empty() {
            continue;
        }
        let Some(keys) = RedisKeys::looked_at(ctx, &id) else {
            return; // a replica: nothing it stores changes but by replication
        };
        let ended: Vec<_> = holds
            .into_iter()
            .filter(|(_, h)| {
                objects::of(h.kind)
                    .held_until(&h.owner, h.exclusive, &keys)
                    .is_none()
            })
            .collect();
        drop(keys);
        let now = now_us();
        state(|s| {
            for (place, _) in ended {
                if let Some(e) = s.live.remove(place) {
                    s.timed(e, now);
                }
            }
        });
    }
}

//! What rlock observes of its objects, Redis side: wait and hold times (`INFO rlock`), the
//! keys most waited on and handed off recently, and the live holds (`RLOCK.TOP`).
//!
//! The waiting mechanism (`wait`), the settle step (`settle`) and the events (`events`)
//! tell this room what happened, each in O(1): a wait started, a queued waiter was granted
//! (its wait time, measured from the time its `Waiter` was queued), an owner took, released or
//! lost a hold. Nothing here reads a key on those paths; `RLOCK.TOP HELD` reads the keys of the
//! holds it reports ([`held`]), and an event a script or another command raised on a key with
//! tracked holds has them looked at once the event is over ([`key_event`]).
//!
//! What is timed:
//! - a wait: from queueing to its grant. A request granted at once never waited, and is not a
//!   wait (`grants_immediate` counts it); a wait that ended otherwise (timeout, cancel,
//!   disconnect, error) is counted by its counter, not timed: its length is the caller's
//!   budget, not the server's speed.
//! - a hold (locks and read-write locks: the objects with owners): from its grant to its end as
//!   rlock sees it: a release, a force release, or the key's expiry, eviction or removal (at
//!   the event; an expired key is seen when Redis deletes it, within its active expiry cycle or
//!   when a command next touches it). A hold whose end rlock did not see (a read hold's own
//!   lease ran out while the lock lived on; a Redisson script released it; SWAPDB moved it) is
//!   dropped when found, without a time (`holds_dropped`).

mod report;

pub use report::held;

use crate::config::{self, TOP_MAX_HOLDS};
use crate::core::observe::histogram::Histogram;
use crate::core::observe::live::{Ended, HoldId, Live, Start};
use crate::core::observe::topk::{Count, Recent};
use crate::core::stats::{Counter, ObjectKind};
use crate::core::wait::KeyId;
use crate::ffi::boundary::InfoWriter;
use crate::ffi::clock::now_us;
use crate::ffi::{Ctx, RStr, ReadStr};
use crate::timers;
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Keys each window of the contention sketches keeps: any key with more than 1/256 of the
/// window's waits (or hand-offs) is found, with its count off by at most that share.
const SKETCH_KEYS: usize = 256;
/// One window of the contention sketches: a report covers the last one to two.
const WINDOW_MS: i64 = 60_000;

/// A key of a kind of object, as the sketches count it.
pub type Spot = (KeyId, ObjectKind);

struct State {
    waits: [Histogram; ObjectKind::ALL.len()],
    holds: [Histogram; ObjectKind::ALL.len()],
    waited: Recent<Spot>,
    handed: Recent<Spot>,
    live: Live,
    /// Keys with tracked holds that an event outside rlock touched: looked at by one job soon.
    look: HashSet<KeyId, foldhash::fast::RandomState>,
}

impl State {
    fn new() -> State {
        let now_ms = (now_us() / 1000) as i64;
        State {
            waits: Default::default(),
            holds: Default::default(),
            waited: Recent::new(SKETCH_KEYS, WINDOW_MS, now_ms),
            handed: Recent::new(SKETCH_KEYS, WINDOW_MS, now_ms),
            live: Live::default(),
            look: HashSet::default(),
        }
    }

    /// A tracked hold ended at `end_us`, seen: its time goes to its kind's histogram.
    fn timed(&mut self, ended: Ended, end_us: u64) {
        self.holds[ended.kind as usize].record(end_us.saturating_sub(ended.since_us));
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::new());
}

fn state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let r = f(&mut s);
        TRACKED.store(s.live.len(), Relaxed);
        r
    })
}

/// Holds tracked now, readable without the state: a release with nothing tracked (tracking
/// off, or a lock taken before the module loaded) returns before reading its key's name.
static TRACKED: AtomicUsize = AtomicUsize::new(0);

/// Grants not tracked because the table of live holds was full (`rlock.top-max-holds`).
pub static UNTRACKED: Counter = Counter::new();
/// Tracked holds found ended without rlock seeing the end: dropped, not timed.
pub static DROPPED: Counter = Counter::new();

/// Start from nothing (module load: a reloaded module must not show the previous one's).
pub fn init() {
    state(|s| *s = State::new());
    UNTRACKED.reset();
    DROPPED.reset();
}

fn now_ms() -> i64 {
    (now_us() / 1000) as i64
}

fn cap() -> usize {
    config::get(&TOP_MAX_HOLDS).max(0) as usize
}

// ---- what happened --------------------------------------------------------------------------------

/// A request started waiting on `id`.
pub fn wait_started(id: &KeyId, kind: ObjectKind) {
    state(|s| s.waited.add(&(id.clone(), kind), now_ms()));
}

/// A waiter queued at `queued_us` on `id` was granted; `hold`: the owner and side it now
/// holds (objects with owners).
pub fn granted(id: &KeyId, kind: ObjectKind, queued_us: u64, hold: Option<(&[u8], bool)>) {
    let now = now_us();
    state(|s| {
        s.waits[kind as usize].record(now.saturating_sub(queued_us));
        s.handed.add(&(id.clone(), kind), (now / 1000) as i64);
        if let Some((owner, exclusive)) = hold {
            let hold = HoldId {
                db: id.db,
                key: &id.key,
                owner,
                exclusive,
            };
            start(s, hold, kind, now);
        }
    });
}

/// `owner` took its exclusive or shared side of `key` (the command's) at once.
pub fn took(ctx: Ctx, key: ReadStr, kind: ObjectKind, owner: ReadStr, exclusive: bool) {
    if cap() == 0 {
        // Tracking is off (`rlock.top-max-holds 0`): the uncontended path pays nothing more,
        // not even the clock.
        UNTRACKED.incr();
        return;
    }
    let hold = HoldId {
        db: ctx.db(),
        key: key.bytes(),
        owner: owner.bytes(),
        exclusive,
    };
    state(|s| start(s, hold, kind, now_us()));
}

fn start(s: &mut State, hold: HoldId, kind: ObjectKind, now: u64) {
    let (how, dropped) = s.live.start(hold, kind, now, cap());
    match how {
        Start::Tracked => {}
        Start::Restarted => DROPPED.incr(),
        Start::Full => UNTRACKED.incr(),
    }
    if dropped > 0 {
        DROPPED.add(dropped as u64);
    }
}

/// `owner` released the last of its exclusive or shared side of `key` (the command's).
pub fn released(ctx: Ctx, key: ReadStr, owner: ReadStr, exclusive: bool) {
    if TRACKED.load(Relaxed) == 0 {
        return;
    }
    let hold = HoldId {
        db: ctx.db(),
        key: key.bytes(),
        owner: owner.bytes(),
        exclusive,
    };
    state(|s| {
        if let Some(ended) = s.live.end(hold) {
            s.timed(ended, now_us());
        }
    });
}

/// Every hold on `key` (the command's) ended at once (a force release).
pub fn force_released(ctx: Ctx, key: RStr) {
    if TRACKED.load(Relaxed) == 0 {
        return;
    }
    let (db, key) = (ctx.db(), key.bytes());
    let now = now_us();
    state(|s| {
        let mut ended = Vec::new();
        s.live.end_key(db, key, |e| ended.push(e));
        for e in ended {
            s.timed(e, now);
        }
    });
}

/// A grant was undone (its waiter vanished before hearing of it): not a hold.
pub fn revoked(db: i32, key: &[u8], owner: &[u8], exclusive: bool) {
    let hold = HoldId {
        db,
        key,
        owner,
        exclusive,
    };
    state(|s| s.live.end(hold));
}

/// A keyspace event on `key` of `db`. An expiry or eviction ends every hold there (rlock's own
/// reads make Redis expire keys too, so these count whoever raised them). Anything else that
/// did not come from rlock's own writes (which told this room already) may have ended some
/// (DEL, RENAME, a Redisson script): the key's holds are looked at once the event is over.
/// The state may be borrowed when an event comes from rlock's own key reads: a read that
/// expires a key is one of [`held`]'s, which borrows nothing while it reads.
pub fn key_event(ctx: Ctx, db: i32, key: &[u8], event: &[u8], ours: bool) {
    let expired = event == b"expired" || event == b"evicted";
    if ours && !expired {
        return;
    }
    let first = STATE.with(|cell| {
        let Ok(mut s) = cell.try_borrow_mut() else {
            return false;
        };
        if s.live.is_empty() {
            return false;
        }
        if expired {
            let now = now_us();
            let mut ended = Vec::new();
            s.live.end_key(db, key, |e| ended.push(e));
            for e in ended {
                s.timed(e, now);
            }
            TRACKED.store(s.live.len(), Relaxed);
            return false;
        }
        if !s.live.has_key(db, key) {
            return false;
        }
        let first = s.look.is_empty();
        s.look.insert(KeyId::new(db, key));
        first
    });
    if first {
        timers::schedule(ctx, ctx.now_ms(), report::look_at_touched);
    }
}

/// FLUSHDB / FLUSHALL (`None`): every hold of the flushed databases ended now.
pub fn flushed(db: Option<i32>) {
    let now = now_us();
    state(|s| {
        let mut ended = Vec::new();
        s.live
            .end_where(|d, _| db.is_none_or(|f| f == d), |e| ended.push(e));
        for e in ended {
            s.timed(e, now);
        }
    });
}

/// SWAPDB `a` `b`: the holds of both databases live on under the other number, where this
/// table cannot follow them: dropped, not timed.
pub fn swapped(a: i32, b: i32) {
    state(|s| {
        s.live
            .end_where(|d, _| d == a || d == b, |_| DROPPED.incr());
    });
}

/// The keys `left` selects left this node with their slot (a slot migration): their holds live
/// on elsewhere, where this table cannot follow them: dropped, not timed.
pub fn keys_left(left: impl Fn(&[u8]) -> bool) {
    state(|s| {
        s.live.end_where(|_, key| left(key), |_| DROPPED.incr());
    });
}

// ---- what is reported ------------------------------------------------------------------------------

/// The `n` keys with the most waits started (`handoffs`: hand-offs) over the recent window,
/// most first, among those `visible` lets through.
pub fn contended(handoffs: bool, n: usize, visible: impl Fn(&Spot) -> bool) -> Vec<(Spot, Count)> {
    let now = now_ms();
    // `visible` (an ACL check) calls into Redis, never into rlock: safe inside the borrow.
    state(|s| {
        let sketch = if handoffs {
            &mut s.handed
        } else {
            &mut s.waited
        };
        sketch.top_where(n, now, visible)
    })
}

/// `INFO rlock`'s distributions, after the counters: per kind, how many waits and holds were
/// timed and their percentiles (as Redis 7 prints `latencystats`: omitted while empty); then
/// the table of live holds.
pub fn write_info(out: &mut InfoWriter) {
    state(|s| {
        for (what, hists, kinds) in [
            ("wait", &s.waits, &ObjectKind::ALL[..]),
            (
                "hold",
                &s.holds,
                &[ObjectKind::Lock, ObjectKind::RwLock][..],
            ),
        ] {
            for &kind in kinds {
                let h = &hists[kind as usize];
                out.int(&format!("{what}_count_{}", kind.name()), h.count() as i64);
                if let Some(p) = h.latencystats() {
                    out.text(&format!("{what}_percentiles_usec_{}", kind.name()), &p);
                }
            }
        }
        out.int("holds_tracked", s.live.len() as i64);
    });
    out.int("holds_untracked", UNTRACKED.get() as i64);
    out.int("holds_dropped", DROPPED.get() as i64);
}

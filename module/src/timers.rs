//! The module's one wake-up (an exact alarm, or a Redis timer). Every timed job (re-checks of
//! keys at their lease end, deferred undo, session expiry, listener read timeouts) is a closure
//! in one ordered map (`core::wait::Timers`); a single wake-up is kept armed at the earliest.
//! Cancelling is a map removal; jobs run one at a time, outside any borrow of this state. Due
//! times made and mostly cancelled by the thousand (wait deadlines, the ends of parks, looks at
//! watched holds) are a [`Batch`] each: a heap run by one job of this map.

use crate::core::wait::{Deadline, Deadlines, TimerKey, Timers};
use crate::ffi::alarm::Wakeup;
use crate::ffi::Ctx;
use std::cell::RefCell;

pub type Job = Box<dyn FnOnce(Ctx)>;

#[derive(Default)]
struct State {
    jobs: Timers<Job>,
    /// The wake-up armed for the earliest job (the alarm, or a Redis timer), and when.
    armed: Option<(Wakeup, i64)>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

/// Run `job` at `at_ms` (server clock).
pub fn schedule(ctx: Ctx, at_ms: i64, job: impl FnOnce(Ctx) + 'static) -> TimerKey {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let key = s.jobs.schedule(at_ms, Box::new(job));
        arm(&mut s, ctx);
        key
    })
}

pub fn cancel(key: TimerKey) {
    STATE.with(|s| drop(s.borrow_mut().jobs.cancel(key)));
}

/// For a key that keeps one job, due at the earliest time anyone asked for: whether a job
/// wanted at `at` must be scheduled in place of `current` (cancelled here), or `current` comes
/// soon enough.
pub fn supersede(current: Option<TimerKey>, at: i64) -> bool {
    match current {
        Some(t) if t.at_ms <= at => false,
        Some(t) => {
            cancel(t);
            true
        }
        None => true,
    }
}

/// [`supersede`] and [`schedule`] for a key that keeps one job: the job `make` builds is
/// scheduled at `at` in place of `current` (cancelled), unless `current` comes soon enough
/// (`None` then; nothing is built).
pub fn keyed<J: FnOnce(Ctx) + 'static>(
    ctx: Ctx,
    current: Option<TimerKey>,
    at: i64,
    make: impl FnOnce() -> J,
) -> Option<TimerKey> {
    supersede(current, at).then(|| schedule(ctx, at, make()))
}

/// Many cancellable due times run by one job: a [`Deadlines`] heap and one job of these timers
/// armed no later than its earliest entry. A cancel leaves the job armed: it fires, finds
/// nothing due, and re-arms for what is left, or not at all. Cancelling the job when the last
/// entry went, or a job per entry, cost a boxed closure and a B-tree insert and removal per
/// entry: with eight `QUEUE ... BLOCK` waiters on one lock, whose parks each end early and whose
/// hold's watch ends at its release, 1,400 of a hand-off's 51,300 instructions
/// (`scripts/handoff.py`).
pub struct Batch<T> {
    due: Deadlines<T>,
    job: Option<TimerKey>,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Batch {
            due: Deadlines::default(),
            job: None,
        }
    }
}

impl<T> Batch<T> {
    /// `item` is due at `at`. `run` is the job, which takes those due ([`Batch::take_due`]),
    /// handles them and re-arms ([`Batch::arm`]).
    pub fn push(&mut self, ctx: Ctx, at: i64, item: T, run: fn(Ctx)) -> Deadline {
        let d = self.due.push(at, item);
        self.arm(ctx, run);
        d
    }

    /// The item of `d`, no longer due (`None`: taken already).
    pub fn cancel(&mut self, d: Deadline) -> Option<T> {
        self.due.cancel(d)
    }

    /// The job fired: the items due at `now`, removed.
    pub fn take_due(&mut self, now: i64) -> Vec<(Deadline, T)> {
        self.job = None;
        let mut due = Vec::new();
        while let Some(d) = self.due.pop_due(now) {
            due.push(d);
        }
        due
    }

    /// Keep the job armed no later than the earliest item.
    pub fn arm(&mut self, ctx: Ctx, run: fn(Ctx)) {
        if let Some(next) = self.due.next_at() {
            if supersede(self.job, next) {
                self.job = Some(schedule(ctx, next, run));
            }
        }
    }

    /// Items due later, and whether the job is armed (it is one of [`pending`]'s).
    pub fn counts(&self) -> (usize, usize) {
        (self.due.len(), usize::from(self.job.is_some()))
    }
}

/// Items freed at a time by [`free_later`]: about a millisecond of the allocator's time.
const FREE_CHUNK: usize = 10_000;

/// Free `items` a chunk per wake-up, as Redis' lazy free does for a large key: the allocator
/// was a fifth of the server time of ending a session of 100,000 requests, during which no
/// client is served. The first chunk is freed now, the rest on later turns of the event loop.
pub fn free_later<T: 'static>(ctx: Ctx, mut items: Vec<T>) {
    items.truncate(items.len().saturating_sub(FREE_CHUNK));
    if !items.is_empty() {
        schedule(ctx, ctx.now_ms(), move |ctx| free_later(ctx, items));
    }
}

/// Jobs scheduled (for INFO and tests of leaks).
pub fn pending() -> usize {
    STATE.with(|s| s.borrow().jobs.len())
}

/// Keep the Redis timer armed no later than the earliest job.
fn arm(s: &mut State, ctx: Ctx) {
    let Some(next) = s.jobs.next_at() else {
        return;
    };
    if let Some((w, at)) = s.armed {
        if at <= next {
            return; // fires in time; it re-arms for whatever is left
        }
        ctx.cancel_wakeup(w);
    }
    // Exact to the microsecond where the alarm exists (ffi/alarm.rs); a capped module timer
    // elsewhere (one that fires early finds nothing due and re-arms).
    s.armed = Some((ctx.wake_at(next), next));
}

/// The Redis timer fired: run every job that was due when it fired (each through `run`, which
/// settles what its writes call for: `settle::on_timer`), then re-arm for the next.
///
/// Jobs scheduled by this pass wait for the next wake-up even when already due. Jobs are timed
/// by the live clock, while the server decides expiry by a time of its own, which can lag
/// within one event-loop turn (seen on Valkey 9.1.2): a re-check of a key whose lease end the
/// live clock has passed found the key still held and scheduled itself again, due at once.
/// Run in the same pass, that loop never ended and hung the server (CI's network fuzz, `gdb`
/// on the hung server); on the next wake-up the key has expired.
pub fn on_timer(ctx: Ctx, run: impl Fn(Ctx, Job)) {
    STATE.with(|s| s.borrow_mut().armed = None);
    let (now, mark) = (ctx.now_ms(), STATE.with(|s| s.borrow().jobs.mark()));
    loop {
        let Some((_, job)) = STATE.with(|s| s.borrow_mut().jobs.pop_due(now, mark)) else {
            break;
        };
        run(ctx, job);
    }
    STATE.with(|s| arm(&mut s.borrow_mut(), ctx));
}

//! Waiters whose slot leaves this node: every wait on a key of a slot this node stops serving
//! ends with `TRYAGAIN`, so that its client queues again where the slot went.
//!
//! Waiter queues live in this node's memory; `MIGRATE` moves keys, not queues. A key that moves
//! raises `del` here, and serving its queue then finds it gone (`wait::serve_background`). But
//! nothing tells a module that its node stopped serving a slot (`CLUSTER SETSLOT ... NODE`, or a
//! config update from the bus): Redis 7 has no server event for it, and Redis redirects only
//! clients blocked on keys (`clusterRedirectBlockedClientIfNeeded`), which rlock's waiters are
//! not (they are blocked without keys, so that the module alone decides grants and timeouts).
//! A waiter on a key that does not exist (a semaphore with no permits, a latch not yet set)
//! would wait forever on the old node while its object is released on the new one.
//!
//! So, while anyone waits (and only then), a job every [`PERIOD_MS`] looks whether this node
//! still serves the slots waited on:
//! - with waiters on at most [`PROBE_KEYS`] keys (the usual case: waiters crowd on hot
//!   objects), each key is probed with [`Ctx::serves_key`] (`RM_Call EXISTS`, about 2 µs);
//! - with more, or when a probe says no, this node's own line of `CLUSTER NODES` (one
//!   `RM_Call`, about 200 µs on Redis 7.0, so at most once per [`NODES_PERIOD_MS`]) tells which
//!   slots it serves, migrates and imports; with many keys, only the queues of slots whose
//!   state changed since the last look are visited.
//!
//! A slot neither served nor being imported here ends its waits; a migrating slot whose key is
//! absent here (the object moved, or exists nowhere and would be created on the importing node,
//! where `ASK` sends new requests) does too. Waiters on a slot being imported here (they came
//! with `ASKING`) stay.

use crate::core::error::CmdError;
use crate::core::slots;
use crate::ffi::boundary::{handle_atomic_slot_migration, Migration, MigrationEvents};
use crate::ffi::Ctx;
use crate::{keys, observe, sessions, timers, wait};
use std::cell::RefCell;

/// How often the slots waited on are looked at while anyone waits: a waiter on a slot that left
/// ends within this (plus one event-loop turn) when at most [`PROBE_KEYS`] keys have waiters.
pub const PERIOD_MS: i64 = 20;

/// Up to this many keys with waiters are probed one by one each period.
pub const PROBE_KEYS: usize = 32;

/// `CLUSTER NODES` is read at most this often.
pub const NODES_PERIOD_MS: i64 = 100;

const WORDS: usize = slots::SLOTS as usize / 64;

/// One bit per slot.
#[derive(Clone, PartialEq, Eq)]
struct Bits(Box<[u64; WORDS]>);

impl Bits {
    fn new() -> Bits {
        Bits(Box::new([0; WORDS]))
    }

    fn all() -> Bits {
        Bits(Box::new([u64::MAX; WORDS]))
    }

    fn set(&mut self, slot: u16) {
        if let Some(w) = self.0.get_mut(slot as usize / 64) {
            *w |= 1 << (slot % 64);
        }
    }

    fn get(&self, slot: u16) -> bool {
        self.0
            .get(slot as usize / 64)
            .is_some_and(|w| w & (1 << (slot % 64)) != 0)
    }

    fn or_diff(&mut self, a: &Bits, b: &Bits) {
        for ((d, x), y) in self.0.iter_mut().zip(a.0.iter()).zip(b.0.iter()) {
            *d |= x ^ y;
        }
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
}

/// This node's slots as its own line of `CLUSTER NODES` shows them.
#[derive(Clone, PartialEq, Eq)]
struct View {
    mine: Bits,
    migrating: Bits,
    importing: Bits,
}

#[derive(Default)]
struct Watch {
    armed: bool,
    /// When `CLUSTER NODES` was last read.
    nodes_at: i64,
    /// What the last look saw (`None`: look at every queue next time).
    view: Option<View>,
}

thread_local! {
    static WATCH: RefCell<Watch> = RefCell::default();
}

/// Someone started waiting: make sure the job runs (cluster mode only).
pub fn waiting(ctx: Ctx) {
    if !keys::cluster(ctx) {
        return;
    }
    let start = WATCH.with(|w| {
        let mut w = w.borrow_mut();
        !std::mem::replace(&mut w.armed, true)
    });
    if start {
        schedule(ctx);
    }
}

fn schedule(ctx: Ctx) {
    timers::schedule(ctx, ctx.now_ms() + PERIOD_MS, tick);
}

fn tick(ctx: Ctx) {
    if wait::total() == 0 || ctx.is_replica() {
        // Nobody waits (a replica's waits were ended when it was demoted): stop until someone
        // does; the view is stale by then, so every queue is looked at on the first look.
        WATCH.with(|w| *w.borrow_mut() = Watch::default());
        return;
    }
    let few = wait::queued_ids_upto(PROBE_KEYS);
    if let Some(ids) = &few {
        // Only db 0 exists in cluster mode.
        if ids.iter().all(|id| ctx.serves_key(&id.key)) {
            schedule(ctx);
            return;
        }
    }
    let now = ctx.now_ms();
    let due = WATCH.with(|w| {
        let mut w = w.borrow_mut();
        let due = now - w.nodes_at >= NODES_PERIOD_MS;
        if due {
            w.nodes_at = now;
        }
        due
    });
    if due {
        if let Some(view) = ctx.cluster_nodes().and_then(|t| parse(&t)) {
            let prev = WATCH.with(|w| w.borrow_mut().view.replace(view.clone()));
            let changed = match prev {
                // A few keys, one of which is not served as it was: look at them all.
                _ if few.is_some() => Bits::all(),
                None => Bits::all(),
                Some(p) if p == view => Bits::new(),
                Some(p) => {
                    let mut c = Bits::new();
                    c.or_diff(&p.mine, &view.mine);
                    c.or_diff(&p.migrating, &view.migrating);
                    c.or_diff(&p.importing, &view.importing);
                    c
                }
            };
            if !changed.is_empty() {
                look(ctx, &view, &changed);
            }
        }
    }
    schedule(ctx);
}

/// End the waits on keys of `changed` slots that this node no longer serves.
fn look(ctx: Ctx, view: &View, changed: &Bits) {
    for id in wait::queued_ids() {
        let slot = slots::slot(&id.key);
        if !changed.get(slot) {
            continue;
        }
        if !view.mine.get(slot) && !view.importing.get(slot) {
            wait::end_waits(ctx, &id, CmdError::SlotMoved);
        } else if view.migrating.get(slot) {
            // Ends its waits if the key is not here (see `wait::recheck`).
            wait::recheck(ctx, &id);
        }
    }
}

/// Parse `CLUSTER NODES`: this node's line (flag `myself`) lists the slots it serves (`a-b`,
/// `a`), migrates (`[s->-id]`) and imports (`[s-<-id]`).
fn parse(text: &[u8]) -> Option<View> {
    let text = std::str::from_utf8(text).ok()?;
    let line = text.lines().find(|l| {
        l.split(' ')
            .nth(2)
            .is_some_and(|f| f.split(',').any(|f| f == "myself"))
    })?;
    let mut view = View {
        mine: Bits::new(),
        migrating: Bits::new(),
        importing: Bits::new(),
    };
    for part in line.split(' ').skip(8) {
        if let Some(inner) = part.strip_prefix('[').and_then(|p| p.strip_suffix(']')) {
            if let Some((s, _)) = inner.split_once("->-") {
                view.migrating.set(s.parse().ok()?);
            } else if let Some((s, _)) = inner.split_once("-<-") {
                view.importing.set(s.parse().ok()?);
            }
            continue;
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?),
            None => {
                let s = part.parse::<u16>().ok()?;
                (s, s)
            }
        };
        for s in lo..=hi.min(slots::SLOTS - 1) {
            view.mine.set(s);
        }
    }
    Some(view)
}

/// At load: on Valkey 9+ and Redis 8.4+, listen to the steps of atomic slot migration (on
/// Valkey, also declare that rlock handles it: Valkey refuses `CLUSTER MIGRATESLOTS` while any
/// loaded module has not).
pub fn init(ctx: Ctx) {
    match ctx.server_version() {
        Some((true, valkey)) if valkey >= (9, 0) => {
            handle_atomic_slot_migration(ctx, MigrationEvents::Valkey);
        }
        Some((false, redis)) if redis >= (8, 4) => {
            handle_atomic_slot_migration(ctx, MigrationEvents::Redis);
        }
        _ => {}
    }
}

/// A step of an atomic slot migration on this node.
///
/// While the slots stream, the source serves them as ever (every write reaches the target);
/// in the last step writes are paused, and the module's own writes wait too (`paused`).
/// - Export completed: the slots are the target's now and their keys are gone from here, with
///   no keyspace event (Valkey drops them silently): every wait on them ends with `TRYAGAIN`
///   now (not at the next look), and what the module kept about their keys goes (sessions'
///   watches, the table of live holds, undo tickets).
/// - Import aborted: the target drops what it received; anything kept about those keys goes.
///   (Nobody waits there: clients are sent to the source until the import completes.)
/// - Otherwise nothing changes here: a cancelled or failed export leaves the source serving.
pub fn migration(ctx: Ctx, step: Migration, ranges: &[(u16, u16)]) {
    ctx.log(
        c"notice",
        &format!("rlock: atomic slot migration: {step:?} of slots {ranges:?}"),
    );
    match step {
        Migration::ExportCompleted | Migration::ImportAborted => slots_left(ctx, ranges),
        Migration::ExportStarted
        | Migration::ExportAborted
        | Migration::ImportStarted
        | Migration::ImportCompleted => {}
    }
}

/// Whether `ranges` hold `key`'s slot.
fn covers(ranges: &[(u16, u16)], key: &[u8]) -> bool {
    let slot = slots::slot(key);
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&slot))
}

/// The keys of `ranges` are no longer on this node.
fn slots_left(ctx: Ctx, ranges: &[(u16, u16)]) {
    for id in wait::queued_ids() {
        if covers(ranges, &id.key) {
            wait::end_waits(ctx, &id, CmdError::SlotMoved);
        }
    }
    sessions::keys_left(|id| covers(ranges, &id.key));
    observe::keys_left(|key| covers(ranges, key));
    wait::undo_ended_where(|id| covers(ranges, &id.key));
}

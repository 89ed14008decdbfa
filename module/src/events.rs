//! Events that may free an object behind the module's back (keyspace events: DEL/UNLINK,
//! expiry, eviction, RENAME/MOVE away, a type change, Redisson's scripts; FLUSH*, SWAPDB), and
//! the server events the module keeps its policies up to date from.

use crate::core::objects;
use crate::core::stats::ObjectKind;
use crate::ffi::{Ctx, RStr, ServerEvent};
use crate::{intake, observe, propagation, sessions, slotwatch, wait};
use std::cell::Cell;
use std::ffi::c_int;

/// Keyspace events of these classes may free an object or change what its waiters wait for:
/// generic ones (DEL, RENAME, MOVE, RESTORE, COPY), expiry and eviction, the data types the
/// objects are made of (Redisson's scripts write them), and the list and set types too, whose
/// store commands (SORT ... STORE, SUNIONSTORE, ...) can replace a key with another type.
pub const CLASSES: c_int = {
    use redis_module::raw;
    raw::REDISMODULE_NOTIFY_GENERIC
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_EVICTED
        | raw::REDISMODULE_NOTIFY_HASH
        | raw::REDISMODULE_NOTIFY_STRING
        | raw::REDISMODULE_NOTIFY_ZSET
        | raw::REDISMODULE_NOTIFY_LIST
        | raw::REDISMODULE_NOTIFY_SET
};

/// The server's `maxmemory-policy`, and whether it can evict lock keys (they have a TTL, so
/// every policy but `noeviction` can).
static POLICY: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

pub fn eviction_policy() -> Option<String> {
    POLICY.lock().ok().and_then(|p| p.clone())
}

pub fn eviction_can_free_locks() -> bool {
    eviction_policy().is_some_and(|p| p != "noeviction")
}

/// Read `maxmemory-policy`; warn in the log when it lets Redis evict locks (an evicted lock is
/// free: the next waiter gets it while its holder still works).
pub fn check_eviction(ctx: Ctx) {
    let policy = ctx
        .config_get(c"maxmemory-policy")
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    if let Ok(mut p) = POLICY.lock() {
        *p = policy.clone();
    }
    if let Some(policy) = policy.filter(|p| p != "noeviction") {
        ctx.log_warning(&format!(
            "rlock: maxmemory-policy is '{policy}': when memory is full Redis may evict lock \
             keys, and an evicted lock is handed to the next waiter while its holder still \
             runs. Use 'noeviction' on servers that hold locks (see docs/operations.md)."
        ));
    }
}

thread_local! {
    /// The database of the last `move_from` event, until its `move_to` follows.
    static MOVE_FROM: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Keep the calling client on its own database across MOVE's events (Valkey 8.1).
///
/// Valkey 8.1 runs a module's keyspace-event callback on the client that ran the command and
/// selects the event's database on it without selecting the client's own back afterwards
/// (valkey-io/valkey#4024, fixed in 9.x): `MOVE key 1` (whose `move_to` is in db 1) would leave
/// the caller on db 1. MOVE announces the source first (`move_from`, where the caller is), then
/// the target: remember the first and select it again once `move_to` is handled. Elsewhere the
/// callback runs on a temporary client, or the server restores the database itself, so this
/// changes nothing. `COPY ... DB n` names only its target, so on Valkey 8.1 its caller is left
/// on db n (README's server table; `tests/tests/servers.rs`).
fn keep_callers_db(ctx: Ctx, event: &[u8]) {
    match event {
        b"move_from" => MOVE_FROM.with(|m| m.set(Some(ctx.db()))),
        b"move_to" => {
            if let Some(db) = MOVE_FROM.with(Cell::take) {
                ctx.select_db(db);
            }
        }
        _ => {}
    }
}

pub fn on_keyspace(ctx: Ctx, _class: c_int, event: &[u8], key: RStr, ours: bool) {
    touched_key(ctx, event, key, ours);
    keep_callers_db(ctx, event);
}

fn touched_key(ctx: Ctx, event: &[u8], key: RStr, ours: bool) {
    let (db, key) = (ctx.db(), key.bytes());
    intake::key_touched(ctx, db, key, event == b"expired", ours);
    sessions::key_touched(ctx, db, key);
    observe::key_event(ctx, db, key, event, ours);
    // An auxiliary key of an object changed (a semaphore's leased-permit set, by Redisson's
    // script): the object's queue may be served, or its next lease end moved. (rlock's own
    // writes serve the queue themselves, and may hold its state now.)
    if !ours && wait::total() > 0 {
        for kind in ObjectKind::ALL {
            for name in objects::of(kind).owners_of_aux(key) {
                intake::key_touched(ctx, db, &name, false, ours);
            }
        }
    }
}

pub fn on_server_event(ctx: Ctx, event: ServerEvent) {
    match event {
        ServerEvent::Flushed(db) => {
            touched(ctx, db);
            observe::flushed(db);
        }
        ServerEvent::Swapped(a, b) => {
            touched(ctx, Some(a));
            touched(ctx, Some(b));
            observe::swapped(a, b);
        }
        ServerEvent::ClientClosing(id) => wait::client_closing(id),
        ServerEvent::Forked => {
            propagation::stream_seen();
            propagation::refresh(ctx);
        }
        ServerEvent::RoleChanged => {
            propagation::refresh(ctx);
            if ctx.is_replica() {
                sessions::demoted(ctx);
            }
        }
        ServerEvent::ConfigChanged(names) => {
            propagation::refresh(ctx);
            if names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(b"maxmemory-policy"))
            {
                check_eviction(ctx);
            }
        }
        ServerEvent::ReplicasChanged => propagation::refresh(ctx),
        ServerEvent::SlotMigration(step, ranges) => slotwatch::migration(ctx, step, &ranges),
    }
}

fn touched(ctx: Ctx, db: Option<i32>) {
    intake::db_touched(ctx, db);
    sessions::db_touched(ctx, db);
}

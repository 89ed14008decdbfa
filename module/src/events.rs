//! Events that may free an object behind the module's back (keyspace events: DEL/UNLINK,
//! expiry, eviction, RENAME/MOVE away, a type change, Redisson's scripts; FLUSH*, SWAPDB), and
//! the server events the module keeps its policies up to date from.

use crate::core::names;
use crate::ffi::{Ctx, RStr, ServerEvent};
use crate::{propagation, sessions, wait};
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

pub fn on_keyspace(ctx: Ctx, _class: c_int, event: &[u8], key: RStr, ours: bool) {
    let (db, key) = (ctx.db(), key.bytes());
    wait::key_touched(ctx, db, key, event == b"expired", ours);
    sessions::key_touched(ctx, db, key);
    // A semaphore's leased-permit set (`{name}:timeout`) changed, e.g. Redisson's script leased,
    // released or re-leased a permit: the semaphore's queue may be served, or its next lease
    // end moved. (rlock's own writes serve the queue themselves, and may hold its state now.)
    if !ours && wait::total() > 0 {
        for name in names::semaphores_of_timeouts(key) {
            wait::key_touched(ctx, db, &name, false, ours);
        }
    }
}

pub fn on_server_event(ctx: Ctx, event: ServerEvent) {
    match event {
        ServerEvent::Flushed(db) => touched(ctx, db),
        ServerEvent::Swapped(a, b) => {
            touched(ctx, Some(a));
            touched(ctx, Some(b));
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
    }
}

fn touched(ctx: Ctx, db: Option<i32>) {
    wait::db_touched(ctx, db);
    sessions::db_touched(ctx, db);
}

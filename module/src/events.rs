//! Events that may free an object behind the module's back (keyspace events: DEL/UNLINK,
//! expiry, eviction, RENAME/MOVE away, a type change, Redisson's scripts; FLUSH*, SWAPDB), and
//! the server events the module keeps its policies up to date from.

use crate::core::names;
use crate::ffi::{Ctx, RStr, ServerEvent};
use crate::{propagation, wait};
use std::ffi::c_int;

/// Keyspace events of these classes may free an object or change what its waiters wait for.
pub const CLASSES: c_int = {
    use redis_module::raw;
    raw::REDISMODULE_NOTIFY_GENERIC
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_EVICTED
        | raw::REDISMODULE_NOTIFY_HASH
        | raw::REDISMODULE_NOTIFY_STRING
        | raw::REDISMODULE_NOTIFY_ZSET
};

pub fn on_keyspace(ctx: Ctx, _class: c_int, event: &[u8], key: RStr, ours: bool) {
    let (db, key) = (ctx.db(), key.bytes());
    wait::key_touched(ctx, db, key, event == b"expired", ours);
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
        ServerEvent::Flushed(db) => wait::db_touched(ctx, db),
        ServerEvent::Swapped(a, b) => {
            wait::db_touched(ctx, Some(a));
            wait::db_touched(ctx, Some(b));
        }
        ServerEvent::ClientClosing(id) => wait::client_closing(id),
        ServerEvent::Forked => {
            propagation::stream_seen();
            propagation::refresh(ctx);
        }
        ServerEvent::ReplicasChanged | ServerEvent::RoleChanged | ServerEvent::ConfigChanged(_) => {
            propagation::refresh(ctx)
        }
    }
}

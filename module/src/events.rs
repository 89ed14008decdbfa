//! Events that may free an object behind the module's back (keyspace events: DEL/UNLINK,
//! expiry, eviction, RENAME/MOVE away, a type change, Redisson's scripts; FLUSH*, SWAPDB), and
//! the server events the module keeps its policies up to date from.

use crate::ffi::{Ctx, RStr, ServerEvent};
use crate::{propagation, sessions, wait};
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
    sessions::key_touched(ctx, db, key);
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
        ServerEvent::ReplicasChanged | ServerEvent::ConfigChanged(_) => propagation::refresh(ctx),
    }
}

fn touched(ctx: Ctx, db: Option<i32>) {
    wait::db_touched(ctx, db);
    sessions::db_touched(ctx, db);
}

//! rlock: Redisson's distributed locks as a native Redis module.
//!
//! Layout: `core/` is the lock logic in plain Rust (parsing, decisions, waiter queues,
//! counters) and unit-tests without Redis. Around it a thin skin speaks to Redis: `ffi` (every
//! raw call), `entry` (panic boundary), `registry` (command table and docs), `rlock_cmds`
//! (RLOCK.* handlers), `waiters` (parking, hand-off, timers, events), `propagation` (when
//! replication can reach anyone), `info` (INFO rlock) and `client_db` (a Valkey 8.1 fix-up).

pub mod core;

#[cfg(not(test))]
mod client_db;
#[cfg(not(test))]
mod entry;
#[cfg(not(test))]
mod ffi;
#[cfg(not(test))]
mod info;
#[cfg(not(test))]
mod propagation;
#[cfg(not(test))]
mod registry;
#[cfg(not(test))]
mod rlock_cmds;
#[cfg(not(test))]
mod waiters;

#[cfg(not(test))]
mod module {
    use crate::ffi::Ctx;
    use crate::{entry, info, propagation, registry, waiters};
    use redis_module::{raw, Context, RedisString, Status};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        let c = Ctx(ctx.ctx);
        entry::install_panic_hook();
        if let Err(e) = registry::register(c) {
            c.log_warning(&format!("rlock: {e}"));
            return Status::Err;
        }
        // SAFETY: init runs on the main thread with a valid ctx; the callbacks are extern "C"
        // functions that catch panics.
        unsafe {
            raw::RedisModule_RegisterInfoFunc.unwrap()(ctx.ctx, Some(info::info_func));
            let classes = raw::REDISMODULE_NOTIFY_GENERIC
                | raw::REDISMODULE_NOTIFY_EXPIRED
                | raw::REDISMODULE_NOTIFY_EVICTED;
            raw::RedisModule_SubscribeToKeyspaceEvents.unwrap()(
                ctx.ctx,
                classes,
                Some(waiters::on_keyspace),
            );
            for id in [
                raw::REDISMODULE_EVENT_FLUSHDB,
                raw::REDISMODULE_EVENT_SWAPDB,
            ] {
                let event = raw::RedisModuleEvent { id, dataver: 1 };
                raw::RedisModule_SubscribeToServerEvent.unwrap()(
                    ctx.ctx,
                    event,
                    Some(waiters::on_server_event),
                );
            }
            let event = raw::RedisModuleEvent {
                id: raw::REDISMODULE_EVENT_CLIENT_CHANGE,
                dataver: 1,
            };
            raw::RedisModule_SubscribeToServerEvent.unwrap()(
                ctx.ctx,
                event,
                Some(waiters::on_client_change),
            );
            for id in [
                raw::REDISMODULE_EVENT_REPLICA_CHANGE,
                raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
                raw::REDISMODULE_EVENT_FORK_CHILD,
                raw::REDISMODULE_EVENT_CONFIG,
            ] {
                let event = raw::RedisModuleEvent { id, dataver: 1 };
                raw::RedisModule_SubscribeToServerEvent.unwrap()(
                    ctx.ctx,
                    event,
                    Some(propagation::on_event),
                );
            }
        }
        propagation::init(c);
        Status::Ok
    }

    redis_module::redis_module! {
        name: "rlock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        commands: [],
    }
}

//! rlock: Redisson's distributed locks as a native Redis module.
//!
//! Layout: `core/` holds each object's rules and the waiting mechanism's queues and serving
//! loop in plain Rust; it unit-tests without Redis. Around it a thin skin speaks to Redis:
//! `ffi/` (every raw call and callback trampoline), `registry` (command table), `commands/`
//! (one handler file per object), `keys` (reading an object's keys), `apply` (the only
//! writer), `wait` (parking, serving, delivery, deadlines), `events`, `propagation` (when
//! replication can reach anyone) and `info` (INFO rlock).

pub mod core;

#[cfg(not(test))]
mod apply;
#[cfg(not(test))]
mod commands;
#[cfg(not(test))]
mod config;
#[cfg(not(test))]
mod events;
#[cfg(not(test))]
mod ffi;
#[cfg(not(test))]
mod info;
#[cfg(not(test))]
mod keys;
#[cfg(not(test))]
mod propagation;
#[cfg(not(test))]
mod registry;
#[cfg(not(test))]
mod sessions;
#[cfg(not(test))]
mod timers;
#[cfg(not(test))]
mod wait;

#[cfg(not(test))]
mod module {
    use crate::ffi::{boundary, command, BlockedClient, Ctx, Handlers};
    use crate::{config, events, info, propagation, registry, sessions, timers, wait};
    use redis_module::{Context, RedisString, Status};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        let c = Ctx(ctx.ctx);
        boundary::install_panic_hook();
        crate::core::stats::reset();
        if let Err(e) = command::register(c, registry::COMMANDS).and_then(|_| config::register(c)) {
            c.log_warning(&format!("rlock: {e}"));
            return Status::Err;
        }
        sessions::init();
        boundary::install(
            c,
            Handlers {
                keyspace: events::on_keyspace,
                server_event: events::on_server_event,
                timer: timers::on_timer,
                woken: wait::on_woken,
                unblocked,
                freed: wait::on_freed,
                disconnected,
                info: info::write,
            },
            events::CLASSES,
        );
        propagation::init(c);
        Status::Ok
    }

    /// `CLIENT UNBLOCK` of a parked client: a waiter in a queue, or a session's listener.
    fn unblocked(ctx: Ctx, bc: BlockedClient) {
        if !wait::on_unblocked(ctx, bc) && !sessions::on_unblocked(ctx, bc) {
            ctx.reply(&crate::core::decision::Reply::Nil);
        }
    }

    /// A parked client's connection closed.
    fn disconnected(ctx: Ctx, bc: BlockedClient) {
        if !wait::on_disconnected(ctx, bc) {
            sessions::on_disconnected(ctx, bc);
        }
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

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
mod wait;

#[cfg(not(test))]
mod module {
    use crate::ffi::{alarm, boundary, command, Ctx, Handlers};
    use crate::{events, info, propagation, registry, wait};
    use redis_module::{Context, RedisString, Status};

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        let c = Ctx(ctx.ctx);
        boundary::install_panic_hook();
        crate::core::stats::reset();
        if let Err(e) = command::register(c, registry::COMMANDS) {
            c.log_warning(&format!("rlock: {e}"));
            return Status::Err;
        }
        boundary::install(
            c,
            Handlers {
                keyspace: events::on_keyspace,
                server_event: events::on_server_event,
                timer: wait::on_timer,
                woken: wait::on_woken,
                unblocked: wait::on_unblocked,
                freed: wait::on_freed,
                disconnected: wait::on_disconnected,
                info: info::write,
            },
            events::CLASSES,
        );
        // Without it, timers fire up to 2 ms late (see ffi/alarm.rs); still correct.
        alarm::install(c);
        propagation::init(c);
        Status::Ok
    }

    fn deinit(ctx: &Context) -> Status {
        if alarm::uninstall() {
            Status::Ok
        } else {
            Ctx(ctx.ctx).log_warning("rlock: a timer is pending; unload later");
            Status::Err
        }
    }

    redis_module::redis_module! {
        name: "rlock",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: init,
        deinit: deinit,
        commands: [],
    }
}

//! rlock: Redisson's distributed locks as a native Redis module.
//!
//! Layout: `core/` holds each object's rules and the waiting mechanism's queues and serving
//! loop in plain Rust; it unit-tests without Redis. Around it a thin skin speaks to Redis:
//! `ffi/` (every raw call and callback trampoline), `commands/`
//! (one file per object: its handlers and its rows of the command table), `keys` (reading an object's keys), `apply` (the only
//! writer), `wait` (parking, serving, delivery, deadlines), `events`, `propagation` (when
//! replication can reach anyone), `observe` (wait and hold times, contended keys, live holds)
//! and `info` (INFO rlock).
//!
//! `unsafe` lives in `ffi/` only, each block with the reason it is sound beside it: the
//! compiler keeps both rules (`unsafe_code` is denied everywhere else, and clippy's
//! `undocumented_unsafe_blocks` is an error).

#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod core;

/// The module's version: the crate's (`INFO rlock`'s `rlock_version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// [`VERSION`] as Redis modules number theirs (`MODULE LIST`'s `ver`): major * 10000 + minor *
/// 100 + patch (0.1.0 is 100, 1.2.3 is 10203).
pub const VERSION_NUMBER: i32 = version_number(VERSION);

const fn version_number(v: &str) -> i32 {
    let b = v.as_bytes();
    let (mut parts, mut n, mut i) = ([0i32; 3], 0, 0);
    while i < b.len() && n < 3 {
        match b[i] {
            b'0'..=b'9' => parts[n] = parts[n] * 10 + (b[i] - b'0') as i32,
            b'.' => n += 1,
            _ => break, // a pre-release or build suffix
        }
        i += 1;
    }
    parts[0] * 10000 + parts[1] * 100 + parts[2]
}

#[cfg(test)]
mod version_tests {
    #[test]
    fn versions_number_as_redis_modules_do() {
        assert_eq!(super::version_number("0.1.0"), 100);
        assert_eq!(super::version_number("1.2.3"), 10203);
        assert_eq!(super::version_number("2.10.0-rc.1"), 21000);
    }
}

#[cfg(not(test))]
mod apply;
#[cfg(not(test))]
mod commands;
#[cfg(not(test))]
mod config;
#[cfg(not(test))]
mod events;
#[cfg(not(test))]
#[allow(unsafe_code)] // the one room that talks to Redis' C API
mod ffi;
/// The allocator's cache of small blocks (`ffi/alloc.rs`) is plain Rust over any allocator:
/// unit-tested on its own, as the rest of `ffi/` needs a running Redis.
#[cfg(test)]
#[allow(unsafe_code)]
#[path = "ffi/alloc.rs"]
mod ffi_alloc;
#[cfg(not(test))]
mod info;
#[cfg(not(test))]
mod intake;
#[cfg(not(test))]
mod keys;
#[cfg(not(test))]
mod marks;
#[cfg(not(test))]
mod observe;
#[cfg(not(test))]
mod paused;
#[cfg(not(test))]
mod propagation;
#[cfg(not(test))]
mod sessions;
#[cfg(not(test))]
mod settle;
#[cfg(not(test))]
mod slotwatch;
#[cfg(not(test))]
mod timers;
#[cfg(not(test))]
mod wait;

#[cfg(not(test))]
mod module {
    use crate::ffi::{alarm, block, boundary, command, load, BlockedClient, Ctx, Handlers};
    use crate::ffi::{RedisModuleCtx, RedisModuleString};
    use crate::{commands, config, events, info, propagation, sessions, slotwatch, wait};
    use std::ffi::c_int;

    /// Redis loads the module through this symbol.
    #[allow(unsafe_code)] // an unmangled export is what Redis looks up
    #[no_mangle]
    pub extern "C" fn RedisModule_OnLoad(
        ctx: *mut RedisModuleCtx,
        // rlock takes its settings as module configs (`rlock.*`), not as load arguments.
        _argv: *mut *mut RedisModuleString,
        _argc: c_int,
    ) -> c_int {
        load::on_load(ctx, c"rlock", crate::VERSION_NUMBER, init)
    }

    fn init(c: Ctx) -> Result<(), String> {
        boundary::install_panic_hook();
        crate::core::stats::reset();
        crate::observe::init();
        command::register(c, commands::TABLES)?;
        command::set_around(crate::settle::around);
        config::register(c)?;
        sessions::init();
        boundary::install(
            c,
            Handlers {
                keyspace: events::on_keyspace,
                server_event: events::on_server_event,
                timer: crate::settle::on_timer,
                woken: wait::on_woken,
                unblocked,
                freed: wait::on_freed,
                disconnected,
                info: info::write,
            },
            events::CLASSES,
        );
        block::set_unblockable(wait::client_unblock_is_safe(c));
        // Without it, timers fire up to 2 ms late (see ffi/alarm.rs); still correct.
        alarm::install(c);
        slotwatch::init(c);
        propagation::init(c);
        events::check_eviction(c);
        Ok(())
    }

    /// `MODULE UNLOAD`: refused while the alarm is set, as Redis refuses it while a module
    /// timer is pending.
    #[allow(unsafe_code)] // an unmangled export is what Redis looks up
    #[no_mangle]
    pub extern "C" fn RedisModule_OnUnload(ctx: *mut RedisModuleCtx) -> c_int {
        load::on_unload(ctx, alarm::uninstall)
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
}

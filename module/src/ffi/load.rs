//! The module's load entry: `RedisModule_OnLoad` registers the module with Redis and runs the
//! module's own init. Written here instead of with the redis-module crate's `redis_module!`
//! macro, which also registers defrag callbacks and logs, on every start of a Redis 7.0
//! server, a warning that they are not supported (rlock has nothing to defragment).

use super::boundary::guarded;
use super::{Ctx, RedisModuleCtx};
use redis_module::raw;
use std::ffi::c_int;

/// Redis' allocator for everything the module allocates, so `used_memory` and `MEMORY` count
/// it, with freed small blocks kept for reuse (`alloc`); not in unit tests, which run without
/// Redis.
#[cfg(not(test))]
#[global_allocator]
static ALLOCATOR: super::alloc::Cached<redis_module::alloc::RedisAlloc> =
    super::alloc::Cached::new(redis_module::alloc::RedisAlloc);

/// Register the module named `name` at `version` (`MODULE LIST`'s `ver`) and run `init`; a
/// failed init is logged and stops the load.
pub fn on_load(
    ctx: *mut RedisModuleCtx,
    name: &'static std::ffi::CStr,
    version: c_int,
    init: fn(Ctx) -> Result<(), String>,
) -> c_int {
    // SAFETY: Redis calls OnLoad with a valid ctx; Init fills the API function pointers that
    // every other call in this layer uses. The name is a static C string.
    let ok = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            name.as_ptr(),
            version,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if ok == raw::REDISMODULE_ERR as c_int {
        return ok;
    }
    let ctx = Ctx(ctx);
    match guarded(|| init(ctx)) {
        Some(Ok(())) => raw::REDISMODULE_OK as c_int,
        Some(Err(e)) => {
            ctx.log_warning(&format!("rlock: {e}"));
            raw::REDISMODULE_ERR as c_int
        }
        None => raw::REDISMODULE_ERR as c_int,
    }
}

/// `MODULE UNLOAD`: `ready` says whether the module can go now (nothing of it is still armed in
/// Redis' event loop).
pub fn on_unload(ctx: *mut RedisModuleCtx, ready: fn() -> bool) -> c_int {
    if guarded(ready).unwrap_or(false) {
        raw::REDISMODULE_OK as c_int
    } else {
        Ctx(ctx).log_warning("rlock: a timer is pending; unload later");
        raw::REDISMODULE_ERR as c_int
    }
}

//! Module configuration parameters (`CONFIG SET rlock.<name>`, or `rlock.<name>` in
//! redis.conf), each backed by a static the module reads directly.

use super::{Ctx, RedisModuleString};
use redis_module::raw;
use std::ffi::{c_char, c_int, c_longlong, c_void, CString};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// Register integer parameter `rlock.<name>` with its bounds, stored in `value` (whose
/// current contents are the default).
pub fn numeric(ctx: Ctx, name: &str, value: &'static AtomicI64, min: i64, max: i64) -> bool {
    let name = CString::new(name).unwrap_or_default();
    // SAFETY: the callbacks below read and write the static passed as private data, which
    // lives for the whole process; Redis copies the name.
    unsafe {
        api!(RedisModule_RegisterNumericConfig)(
            ctx.0,
            name.as_ptr(),
            value.load(Relaxed),
            raw::REDISMODULE_CONFIG_DEFAULT,
            min,
            max,
            Some(get_numeric),
            Some(set_numeric),
            None,
            (value as *const AtomicI64).cast_mut().cast(),
        ) == raw::REDISMODULE_OK as c_int
    }
}

/// Register `yes`/`no` parameter `rlock.<name>`, stored in `value`.
pub fn boolean(ctx: Ctx, name: &str, value: &'static AtomicBool) -> bool {
    let name = CString::new(name).unwrap_or_default();
    // SAFETY: as above.
    unsafe {
        api!(RedisModule_RegisterBoolConfig)(
            ctx.0,
            name.as_ptr(),
            value.load(Relaxed) as c_int,
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_bool),
            Some(set_bool),
            None,
            (value as *const AtomicBool).cast_mut().cast(),
        ) == raw::REDISMODULE_OK as c_int
    }
}

/// Apply values given at load (module arguments or redis.conf); call after registering.
pub fn load(ctx: Ctx) -> bool {
    // SAFETY: called from the load function with its ctx.
    unsafe { api!(RedisModule_LoadConfigs)(ctx.0) == raw::REDISMODULE_OK as c_int }
}

unsafe extern "C" fn get_numeric(_name: *const c_char, data: *mut c_void) -> c_longlong {
    // SAFETY: data is the &'static AtomicI64 registered above.
    unsafe { &*data.cast::<AtomicI64>() }.load(Relaxed)
}

unsafe extern "C" fn set_numeric(
    _name: *const c_char,
    val: c_longlong,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // SAFETY: as above; Redis checked the bounds.
    unsafe { &*data.cast::<AtomicI64>() }.store(val, Relaxed);
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn get_bool(_name: *const c_char, data: *mut c_void) -> c_int {
    // SAFETY: data is the &'static AtomicBool registered above.
    unsafe { &*data.cast::<AtomicBool>() }.load(Relaxed) as c_int
}

unsafe extern "C" fn set_bool(
    _name: *const c_char,
    val: c_int,
    data: *mut c_void,
    _err: *mut *mut RedisModuleString,
) -> c_int {
    // SAFETY: as above.
    unsafe { &*data.cast::<AtomicBool>() }.store(val != 0, Relaxed);
    raw::REDISMODULE_OK as c_int
}

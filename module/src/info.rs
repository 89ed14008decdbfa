//! The `INFO rlock` section.

use crate::core::stats::{self, Counter};
use crate::entry::guarded;
use crate::waiters;
use redis_module::raw;
use std::ffi::{c_int, CStr};

const COUNTERS: &[(&CStr, &Counter)] = &[
    (c"acquired", &stats::ACQUIRED),
    (c"reentries", &stats::REENTRIES),
    (c"releases", &stats::RELEASES),
    (c"handoffs", &stats::HANDOFFS),
    (c"grants_after_expiry", &stats::GRANTS_AFTER_EXPIRY),
    (c"busy", &stats::BUSY),
    (c"waits_started", &stats::WAITS_STARTED),
    (c"waits_timed_out", &stats::WAITS_TIMED_OUT),
    (c"waiters_disconnected", &stats::WAITERS_DISCONNECTED),
    (c"grants_revoked", &stats::GRANTS_REVOKED),
    (c"renewals", &stats::RENEWALS),
    (c"force_releases", &stats::FORCE_RELEASES),
    (c"errors", &stats::ERRORS),
];

/// Registered with RM_RegisterInfoFunc; the section is named after the module: `# rlock`.
pub unsafe extern "C" fn info_func(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guarded(|| {
        let waiting = waiters::waiting_total() as i64;
        // SAFETY: valid info ctx for the duration of this callback; static C strings.
        unsafe {
            raw::RedisModule_InfoAddSection.unwrap()(ctx, std::ptr::null());
            let add = raw::RedisModule_InfoAddFieldLongLong.unwrap();
            add(ctx, c"waiters".as_ptr(), waiting);
            for (name, counter) in COUNTERS {
                add(ctx, name.as_ptr(), counter.get() as i64);
            }
        }
    });
}

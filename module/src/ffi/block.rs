//! Parking a client (`RM_BlockClient`) and waking it with a reply, and the module's one timer.
//!
//! Redis calls back on four occasions for a parked client; each trampoline here turns the raw
//! call into a safe call of the handler installed at load (`boundary::Handlers`):
//! - reply: after [`unblock`], from `beforeSleep`, with the [`Wake`] given to it;
//! - timeout: only for `CLIENT UNBLOCK` (the module's own deadlines are timers);
//! - free: the [`Wake`] is dropped (also when the client disconnected before its reply);
//! - disconnect: the connection closed while parked.

use super::boundary::{guarded, handlers};
use super::{Ctx, RedisModuleCtx, RedisModuleString};
use crate::core::decision::Reply;
use redis_module::raw;
use std::ffi::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// The longest delay the module timer is set for (one day).
pub const MAX_TIMER_DELAY_MS: i64 = 86_400_000;

/// A parked client, as Redis identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockedClient(*mut raw::RedisModuleBlockedClient);

impl BlockedClient {
    /// A number identifying the parked client while it is parked.
    pub fn id(self) -> usize {
        self.0 as usize
    }
}

/// What a parked client receives when woken.
#[derive(Debug)]
pub struct Wake {
    /// The parked client ([`BlockedClient::id`]).
    pub handle: usize,
    pub reply: Reply,
}

/// Whether `CLIENT UNBLOCK` may end a parked client: Redis lets it only when the client was
/// parked with a timeout callback (`moduleBlockedClientMayTimeout`). Set once at load
/// ([`set_unblockable`]); off where `CLIENT UNBLOCK` would crash the server or could not be
/// told from the server's own `UNBLOCKED` answer (`wait::client_unblock_is_safe`).
static UNBLOCKABLE: AtomicBool = AtomicBool::new(true);

/// Park clients with (true) or without (false) a timeout callback from now on. Without one,
/// `CLIENT UNBLOCK <id>` answers 0 for them and leaves them parked (both forms).
pub fn set_unblockable(yes: bool) {
    UNBLOCKABLE.store(yes, Relaxed);
}

impl Ctx {
    /// Park the calling client, without a Redis timeout (deadlines are the module's timers).
    pub fn block(self) -> BlockedClient {
        let on_timeout: raw::RedisModuleCmdFunc = match UNBLOCKABLE.load(Relaxed) {
            true => Some(on_timeout),
            false => None,
        };
        // SAFETY: valid command ctx; the callbacks are the extern "C" trampolines below, which
        // catch panics (a null timeout callback is allowed: Redis then never times the client
        // out, and `CLIENT UNBLOCK` refuses it).
        unsafe {
            let bc =
                api!(RedisModule_BlockClient)(self.0, Some(on_reply), on_timeout, Some(on_free), 0);
            api!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect));
            BlockedClient(bc)
        }
    }

    /// The module's timer, `delay_ms` from now, capped at [`MAX_TIMER_DELAY_MS`]: Redis
    /// computes the fire time in microseconds, which wraps for huge delays (a lease of 2^62
    /// ms) and would fire at once, forever. The handler re-arms when a capped timer fires early.
    pub fn create_timer(self, delay_ms: i64) -> u64 {
        let delay = delay_ms.clamp(0, MAX_TIMER_DELAY_MS);
        // SAFETY: ctx has a client (command, timer, notification, disconnect contexts); no
        // data is attached.
        unsafe { api!(RedisModule_CreateTimer)(self.0, delay, Some(on_timer), ptr::null_mut()) }
    }

    /// Stop a timer; false when it already fired or never existed.
    pub fn stop_timer(self, id: u64) -> bool {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: unknown ids are rejected by Redis; no data is attached to our timers.
        unsafe {
            api!(RedisModule_StopTimer)(self.0, id, &mut data) == raw::REDISMODULE_OK as c_int
        }
    }
}

/// Wake a parked client; `wake` reaches the reply handler, then the free handler. `None`
/// releases the handle without a reply (the client is gone, or CLIENT UNBLOCK replied).
pub fn unblock(bc: BlockedClient, wake: Option<Wake>) {
    let data = wake.map_or(ptr::null_mut(), |w| {
        Box::into_raw(Box::new(w)).cast::<c_void>()
    });
    // SAFETY: bc came from RM_BlockClient and the waiting mechanism unblocks each once.
    unsafe { api!(RedisModule_UnblockClient)(bc.0, data) };
}

unsafe extern "C" fn on_reply(
    ctx: *mut RedisModuleCtx,
    _argv: *mut *mut RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: valid in reply callbacks; the private data is the Wake passed to unblock (freed
    // later by on_free, not here), or NULL.
    let wake = unsafe { api!(RedisModule_GetBlockedClientPrivateData)(ctx.0) }.cast::<Wake>();
    // SAFETY: see above.
    let wake = unsafe { wake.as_ref() };
    if guarded(|| (handlers().woken)(ctx, wake)).is_none() {
        ctx.reply_error(&crate::core::error::CmdError::Internal.to_string());
    }
    raw::REDISMODULE_OK as c_int
}

/// Redis calls the timeout callback for `CLIENT UNBLOCK` (our own deadlines are timers). The
/// handler must reply.
unsafe extern "C" fn on_timeout(
    ctx: *mut RedisModuleCtx,
    _argv: *mut *mut RedisModuleString,
    _argc: c_int,
) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: valid in timeout callbacks.
    let bc = BlockedClient(unsafe { api!(RedisModule_GetBlockedClientHandle)(ctx.0) });
    if guarded(|| (handlers().unblocked)(ctx, bc)).is_none() {
        ctx.reply(&Reply::Nil);
    }
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_free(_ctx: *mut RedisModuleCtx, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: non-null private data is always a Box<Wake> from `unblock`, freed once here.
    let wake = unsafe { Box::from_raw(data.cast::<Wake>()) };
    guarded(|| (handlers().freed)(*wake));
}

unsafe extern "C" fn on_disconnect(
    ctx: *mut RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guarded(|| (handlers().disconnected)(Ctx(ctx), BlockedClient(bc)));
}

pub(super) unsafe extern "C" fn on_timer(ctx: *mut RedisModuleCtx, _data: *mut c_void) {
    guarded(|| (handlers().timer)(Ctx(ctx)));
}

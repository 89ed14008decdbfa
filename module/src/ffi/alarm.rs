//! When the module's timer fires: on time to the microsecond, not the millisecond.
//!
//! Redis 7.0's module timers fire up to two milliseconds late. `RM_CreateTimer` takes whole
//! milliseconds counted from the current microsecond, so a job due at millisecond T fires
//! anywhere in [T, T+1); and the event loop sleeps in `epoll_wait` with a millisecond timeout
//! rounded up from whenever it last computed it (`aeProcessEvents`), another [0, 1). A lock
//! whose lease ends at T is expired by Redis at T+1 ms (`keyIsExpired`: now > T), so its next
//! waiter was granted 1.3 to 3+ ms after T.
//!
//! The alarm is a Linux timerfd on CLOCK_REALTIME (the clock Redis expires keys by), set to an
//! absolute time and registered in Redis' event loop (`RM_EventLoopAdd`). When it fires, its
//! callback starts a module timer with no delay; Redis runs it in the same event-loop turn
//! (`processTimeEvents` follows the file events), so the module's timer handler still runs in
//! an ordinary timer context. Elsewhere than Linux, or if the timerfd cannot be made, the
//! module timer alone is used ([`Wakeup::Timer`]).

use super::block::{on_timer, MAX_TIMER_DELAY_MS};
use super::boundary::guarded;
use super::{Ctx, RedisModuleCtx};
use redis_module::raw;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr;

/// How the next wake-up was armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// The alarm: setting it again replaces it, nothing to cancel.
    Alarm,
    /// A module timer (its id).
    Timer(u64),
}

#[derive(Clone, Copy)]
struct Alarm {
    fd: c_int,
    /// A context of the module's own (detached), for starting the module timer from the
    /// alarm's callback, which Redis calls without one.
    ctx: *mut RedisModuleCtx,
}

thread_local! {
    // Only Redis' main thread loads the module, arms timers and runs event-loop callbacks.
    static ALARM: Cell<Option<Alarm>> = const { Cell::new(None) };
    /// Set and not yet fired (MODULE UNLOAD must wait, as Redis makes it wait for a timer).
    static PENDING: Cell<bool> = const { Cell::new(false) };
}

/// Make the alarm and register it in Redis' event loop. False when it cannot be had (the
/// module timer then does alone).
pub fn install(ctx: Ctx) -> bool {
    #[cfg(target_os = "linux")]
    {
        if !has!(RedisModule_EventLoopAdd) || !has!(RedisModule_GetDetachedThreadSafeContext) {
            return false;
        }
        // SAFETY: plain syscall; the fd is owned by the module for the life of the process.
        let fd = unsafe {
            libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        };
        if fd < 0 {
            return false;
        }
        // SAFETY: load runs on the main thread with a valid ctx; the detached context lives as
        // long as the process. The callback is the extern "C" function below, which only reads
        // the fd and starts a timer.
        unsafe {
            let detached = api!(RedisModule_GetDetachedThreadSafeContext)(ctx.0);
            let ok = api!(RedisModule_EventLoopAdd)(
                fd,
                raw::REDISMODULE_EVENTLOOP_READABLE as c_int,
                Some(on_alarm),
                ptr::null_mut(),
            ) == raw::REDISMODULE_OK as c_int;
            if ok {
                ALARM.with(|a| a.set(Some(Alarm { fd, ctx: detached })));
            } else {
                api!(RedisModule_FreeThreadSafeContext)(detached);
                libc::close(fd);
            }
            ok
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = ctx;
        false
    }
}

/// Take the alarm out of Redis' event loop before the module is unloaded; false (unload
/// refused) while it is set, as Redis refuses to unload a module that holds a timer.
pub fn uninstall() -> bool {
    if PENDING.with(Cell::get) {
        return false;
    }
    if let Some(alarm) = ALARM.with(|a| a.take()) {
        // SAFETY: the fd and context were made in `install` and are released once, here.
        unsafe {
            api!(RedisModule_EventLoopDel)(alarm.fd, raw::REDISMODULE_EVENTLOOP_READABLE as c_int);
            api!(RedisModule_FreeThreadSafeContext)(alarm.ctx);
            #[cfg(target_os = "linux")]
            libc::close(alarm.fd);
        }
    }
    true
}

impl Ctx {
    /// Run the module's timer handler at `at_ms` (ms since the epoch) or as soon after as
    /// possible; at most a day ahead (the handler re-arms when it fires early).
    pub fn wake_at(self, at_ms: i64) -> Wakeup {
        let now = self.now_ms();
        let at_ms = at_ms.min(now.saturating_add(MAX_TIMER_DELAY_MS));
        if let Some(alarm) = ALARM.with(Cell::get) {
            if set(alarm.fd, at_ms) {
                PENDING.with(|p| p.set(true));
                return Wakeup::Alarm;
            }
        }
        Wakeup::Timer(self.create_timer(at_ms.saturating_sub(now)))
    }

    pub fn cancel_wakeup(self, w: Wakeup) {
        if let Wakeup::Timer(id) = w {
            self.stop_timer(id);
        }
    }
}

/// Set the timerfd to fire once at `at_ms`, replacing any earlier setting.
#[cfg(target_os = "linux")]
fn set(fd: c_int, at_ms: i64) -> bool {
    // A zero time would disarm it: one past the epoch means "already due".
    let at_ms = at_ms.max(1);
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: at_ms / 1000,
            tv_nsec: (at_ms % 1000) * 1_000_000,
        },
    };
    // SAFETY: a timerfd made in `install`; the spec is a valid absolute time.
    unsafe { libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, ptr::null_mut()) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn set(_fd: c_int, _at_ms: i64) -> bool {
    false
}

/// The alarm fired (Redis' main thread, from its event loop): consume it, then run the module's
/// timer handler through a module timer with no delay, in this event-loop turn.
unsafe extern "C" fn on_alarm(fd: c_int, _data: *mut c_void, _mask: c_int) {
    let mut expirations = 0u64;
    // SAFETY: reads the 8-byte expiration count of our non-blocking timerfd; a spurious wake-up
    // reads nothing (EAGAIN), which is harmless.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::read(fd, (&mut expirations as *mut u64).cast(), 8);
    }
    let _ = (fd, expirations);
    PENDING.with(|p| p.set(false));
    guarded(|| {
        if let Some(alarm) = ALARM.with(Cell::get) {
            // SAFETY: the detached context is valid for the life of the process; the callback
            // is the module's timer trampoline, which catches panics.
            unsafe { api!(RedisModule_CreateTimer)(alarm.ctx, 0, Some(on_timer), ptr::null_mut()) };
        }
    });
}

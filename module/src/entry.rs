//! The boundary every call from Redis crosses: panics are caught here (an unwinding panic
//! through `extern "C"` would abort redis-server), and a flag records that rlock itself is
//! running, so keyspace events caused by our own writes are not handled twice.

use crate::core::error::CmdError;
use crate::core::stats;
use crate::ffi::{Args, Ctx};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Whether rlock code is on the stack (events raised by its own key writes arrive then).
pub fn inside() -> bool {
    INSIDE.with(Cell::get)
}

/// Run `f` with panics caught and the `inside` flag set. `None` when it panicked (the panic
/// hook has logged it).
pub fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    let was = INSIDE.with(|i| i.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f)).ok();
    INSIDE.with(|i| i.set(was));
    result
}

/// What a command handler produced.
pub enum Reply {
    Int(i64),
    Null,
    /// The handler already replied, or blocked the client.
    Sent,
}

pub type Handler = fn(Ctx, &Args) -> Result<Reply, CmdError>;

/// Run a command handler and send its reply.
pub fn command(ctx: Ctx, args: &Args, handler: Handler) {
    match guarded(|| handler(ctx, args)).unwrap_or(Err(CmdError::Internal)) {
        Ok(Reply::Int(n)) => ctx.reply_int(n),
        Ok(Reply::Null) => ctx.reply_null(),
        Ok(Reply::Sent) => {}
        Err(e) => {
            stats::ERRORS.incr();
            ctx.reply_error(&e.to_string());
        }
    }
}

/// Log panics to the Redis log instead of stderr, which a daemonized server discards.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        Ctx(std::ptr::null_mut()).log_warning(&format!("rlock: panic caught: {info}"));
    }));
}

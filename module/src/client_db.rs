//! Keep the calling client on its own database across MOVE's keyspace events (Valkey 8.1).
//!
//! Valkey 8.1 runs a module's keyspace-event callback on the client that ran the command (not on
//! a temporary client, as Redis does) and selects the event's database on that client before the
//! call without selecting the client's own back afterwards (valkey-io/valkey#4024, fixed in
//! 9.x). Because rlock subscribes to generic events, `MOVE key 1` (whose `move_to` event is in
//! db 1) would leave the caller selected on db 1, and its next commands would run there.
//!
//! MOVE announces the source database first (`move_from`, where the client is), then the target
//! (`move_to`): remember the first and select it again once `move_to` is handled. Elsewhere the
//! callback's client is a temporary one, or the server restores the caller's database itself,
//! so selecting it again changes nothing. `COPY ... DB n` announces only its target (`copy_to`),
//! so the caller's database is not known here: on Valkey 8.1 that client is left on db n (the
//! README's server table says so, and `tests/tests/servers.rs` shows it).

use crate::ffi::Ctx;
use std::cell::Cell;
use std::ffi::{c_char, CStr};

thread_local! {
    /// The database of the last `move_from` event, until its `move_to` follows.
    static MOVE_FROM: Cell<Option<i32>> = const { Cell::new(None) };
}

/// Call at the end of every keyspace-event callback, after the event's database was used.
pub fn after_keyspace_event(ctx: Ctx, event: *const c_char) {
    if event.is_null() {
        return;
    }
    // SAFETY: Redis passes the event name as a NUL-terminated string that outlives the call.
    match unsafe { CStr::from_ptr(event) }.to_bytes() {
        b"move_from" => MOVE_FROM.with(|m| m.set(Some(ctx.db()))),
        b"move_to" => {
            if let Some(db) = MOVE_FROM.with(Cell::take) {
                ctx.select_db(db);
            }
        }
        _ => {}
    }
}

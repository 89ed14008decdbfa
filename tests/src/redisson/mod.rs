//! Redisson's own Lua scripts, the text Redisson sends, in one place: the tests run them with
//! EVAL beside the module's commands (interop), the benchmark loads them for EVALSHA.
//! One file per object: [`lock`] (and the fenced lock), [`fair`], [`rwlock`], [`semaphore`] (and the
//! permit-expirable semaphore), [`latch`]. The lock's and the read-write lock's names are
//! re-exported here (`redisson::ACQUIRE`, `redisson::read_acquire`, ...).

pub mod fair;
pub mod group;
pub mod latch;
pub mod lock;
pub mod rwlock;
pub mod semaphore;
mod unlock_latch;

pub use lock::*;
pub use rwlock::*;
pub use unlock_latch::LATCH_TTL_MS;

/// `SCRIPT LOAD` a script; its SHA1, for EVALSHA (what Redisson sends once it has loaded it).
pub fn script_load(conn: &mut redis::Connection, script: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(script)
        .query(conn)
        .expect("SCRIPT LOAD")
}

//! The read-write lock handles: [`ReadWriteLock`] and [`AsyncReadWriteLock`] (Redisson's
//! `RReadWriteLock`). Each side is a lock with the whole lock API: a [`Lock`] or an
//! [`AsyncLock`] whose operations are the read-write lock's (`RRWLOCK.*`).

use super::lock::{AsyncLock, Lock, LockCore};
use crate::ops::lock::Flavor;
use crate::ops::rwlock::Side;
use crate::owner::{Owner, OwnerPolicy};

/// A distributed read-write lock for blocking code: Redisson's `RReadWriteLock`. Many readers
/// or one writer; [`read_lock`](ReadWriteLock::read_lock) and
/// [`write_lock`](ReadWriteLock::write_lock) are [`Lock`]s with the whole lock API (guards,
/// leases, the watchdog, `try_lock_for`, `force_unlock`, ...), acting as the calling thread.
///
/// The data is Redisson's (a hash with `mode`, one field per reader, `<owner>:write` for the
/// writer, one key per read hold carrying its lease), so a Java service on Redisson shares the
/// lock. Differences from Redisson, all on the server's side:
///
/// - **Fair.** Readers and writers wait in one first-come, first-served queue: once a writer
///   waits, later readers queue behind it (Redisson lets readers starve writers). Readers at
///   the head of the queue are let in together.
/// - **Upgrade is an error.** A thread that holds only the read lock and asks for the write
///   lock gets [`Error::Deadlock`](crate::Error::Deadlock) at once (Redisson waits forever). The
///   writer may take the read lock (downgrade), as in Redisson.
/// - **Each hold has its own lease**, so a crashed reader frees its share after its own lease
///   even while other readers are renewed. The watchdog renews read and write holds taken
///   without a lease (`RRWLOCK.RENEW`) and reports a hold it finds gone
///   ([`Guard::is_lost`](crate::Guard::is_lost)).
/// - A wait that would close a cycle of owners waiting for one another on the server is
///   refused with [`Error::Deadlock`](crate::Error::Deadlock) naming the cycle.
///
/// Over Redisson's protocol (a server without the module) it is Redisson's own lock, scripts,
/// keys and channel: not fair (readers go in while a writer waits), waits retry at a release's
/// message or the lease's end, no cycle is detected; an upgrade this client knows of (the
/// owner reads through this client) is still refused with
/// [`Error::Deadlock`](crate::Error::Deadlock). Each read hold has its own lease there too,
/// and the watchdog renews with Redisson's scripts (`docs/operations.md`, "Two protocols").
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let rw = client.read_write_lock("prices");
/// {
///     let _r = rw.read_lock().guard()?;       // shared with other readers
///     // ... read ...
/// }
/// let w = rw.write_lock().guard()?;           // alone
/// let r = rw.read_lock().guard()?;            // downgrade: the writer may read too
/// drop(w);                                    // now a reader, others may read as well
/// r.unlock()?;
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    core: LockCore,
}

/// The async form of [`ReadWriteLock`]: its sides are [`AsyncLock`]s acting as the calling
/// task (or an explicit [`Owner`], see [`AsyncReadWriteLock::with_owner`]).
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let rw = client.async_read_write_lock("prices");
/// let g = rw.read_lock().guard().await?;
/// // ... read ...
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncReadWriteLock {
    core: LockCore,
}

macro_rules! rw {
    ($($T:ident => $L:ident),*) => {$(
        impl $T {
            pub(crate) fn new(core: LockCore) -> $T {
                $T { core }
            }

            fn side(&self, side: Side) -> $L {
                let mut core = self.core.clone();
                core.flavor = Flavor::Rw(side);
                $L { core }
            }

            /// The read side: shared with other readers (Redisson's `readLock()`).
            pub fn read_lock(&self) -> $L {
                self.side(Side::Read)
            }

            /// The write side: exclusive (Redisson's `writeLock()`).
            pub fn write_lock(&self) -> $L {
                self.side(Side::Write)
            }

            /// Both sides acting as `owner` in every call, whatever thread or task makes it
            /// (see [`Lock::with_owner`]).
            pub fn with_owner(mut self, owner: Owner) -> $T {
                self.core.ctx.holds.lock().adopt(owner.as_str());
                self.core.policy = OwnerPolicy::Fixed(owner);
                self
            }
        }
    )*};
}

rw!(ReadWriteLock => Lock, AsyncReadWriteLock => AsyncLock);
named!("lock": ReadWriteLock AsyncReadWriteLock);

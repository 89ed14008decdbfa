//! [`lock_api!`]: the acquire methods every lock-like handle has (Redisson's `RLock`: `lock`,
//! `tryLock`, and a guard for each), written once for [`Lock`](crate::Lock) and
//! [`MultiLock`](crate::MultiLock) (and their async twins).

/// The acquire methods of a lock-like handle pair, over its core's
/// `took(io, lease, wait) -> Result<bool>` and `guard::<M>(io, lease, wait) ->
/// Result<Option<Guard<M>>>`.
macro_rules! lock_api {
    ($Sync:ident, $Async:ident) => {
        twins! {
            $Sync, $Async, io = io, style = M;

            /// Wait until acquired, then hold until unlocked: the watchdog keeps it alive (a
            /// multi-lock: every lock; a RedLock: a majority).
            fn lock(&self) -> Result<()> {
                self.core.took(io, None, Wait::Forever).await.map(drop)
            }

            /// Wait until acquired; it frees by itself after `lease` (no watchdog; a lease
            /// shorter than a millisecond counts as 1 ms, a zero lease is refused).
            fn lock_with_lease(&self, lease: Duration) -> Result<()> {
                self.core.took(io, Some(lease), Wait::Forever).await.map(drop)
            }

            /// One attempt, no waiting: `true` if acquired (watchdog mode).
            fn try_lock(&self) -> Result<bool> {
                self.core.took(io, None, Wait::No).await
            }

            /// Wait at most `wait`: `true` if acquired (watchdog mode). A zero `wait` makes one
            /// attempt.
            fn try_lock_for(&self, wait: Duration) -> Result<bool> {
                self.core.took(io, None, Wait::For(wait)).await
            }

            /// Wait at most `wait`, then hold for at most `lease`.
            fn try_lock_with(&self, wait: Duration, lease: Duration) -> Result<bool> {
                self.core.took(io, Some(lease), Wait::For(wait)).await
            }

            /// [`lock`](Self::lock), returning a guard that releases when dropped.
            fn guard(&self) -> Result<Guard<M>> {
                self.core.guard(io, None, Wait::Forever).await.map(forever)
            }

            /// [`lock_with_lease`](Self::lock_with_lease), returning a guard.
            fn guard_with_lease(&self, lease: Duration) -> Result<Guard<M>> {
                self.core.guard(io, Some(lease), Wait::Forever).await.map(forever)
            }

            /// [`try_lock`](Self::try_lock), returning a guard when acquired.
            fn try_guard(&self) -> Result<Option<Guard<M>>> {
                self.core.guard(io, None, Wait::No).await
            }

            /// [`try_lock_for`](Self::try_lock_for), returning a guard when acquired.
            fn try_guard_for(&self, wait: Duration) -> Result<Option<Guard<M>>> {
                self.core.guard(io, None, Wait::For(wait)).await
            }

            /// [`try_lock_with`](Self::try_lock_with), returning a guard when acquired.
            fn try_guard_with(&self, wait: Duration, lease: Duration) -> Result<Option<Guard<M>>> {
                self.core.guard(io, Some(lease), Wait::For(wait)).await
            }
        }
    };
}

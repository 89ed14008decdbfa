//! The spin lock: [`SpinLock`] / [`AsyncSpinLock`] (Redisson's `RedissonSpinLock`,
//! `getSpinLock`), a [`Lock`] whose waits retry with a back-off instead of waiting on the
//! server: no pub/sub and no session, so it works where neither is available.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::forever;
use super::guard::Guard;
use super::lock::{AsyncLock, Lock, LockCore};
use super::style::CallStyle;
use crate::cancel;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::owner::Owner;
use crate::transport::Io;
use crate::wait::Wait;

/// How a spin lock waits between two attempts (Redisson's `LockOptions.BackOff`).
///
/// ```
/// use std::time::Duration;
/// use rlock_client::BackOff;
/// // Redisson's default: 1 ms, doubled after each attempt (plus a jitter), at most 128 ms.
/// assert_eq!(BackOff::default(), BackOff::exponential(Duration::from_millis(1), Duration::from_millis(128), 2));
/// let mut delays = BackOff::constant(Duration::from_millis(64)).delays();
/// assert_eq!(delays.next_delay(), Duration::from_millis(64));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackOff {
    /// Start at `initial`, multiply by `multiplier` after each attempt and add a jitter of up
    /// to one millisecond per failed attempt so far, never above `max` (Redisson's
    /// `ExponentialBackOff`).
    Exponential {
        /// The first delay.
        initial: Duration,
        /// The longest delay.
        max: Duration,
        /// The growth per attempt.
        multiplier: u32,
    },
    /// The same delay every time (Redisson's `ConstantBackOff`, 64 ms by default).
    Constant(Duration),
}

impl Default for BackOff {
    /// Redisson's `LockOptions.defaults()`: exponential, 1 ms to 128 ms, doubling.
    fn default() -> BackOff {
        BackOff::exponential(Duration::from_millis(1), Duration::from_millis(128), 2)
    }
}

impl BackOff {
    /// [`BackOff::Exponential`].
    pub fn exponential(initial: Duration, max: Duration, multiplier: u32) -> BackOff {
        BackOff::Exponential {
            initial,
            max,
            multiplier,
        }
    }

    /// [`BackOff::Constant`].
    pub fn constant(delay: Duration) -> BackOff {
        BackOff::Constant(delay)
    }

    /// Redisson's checks: every option positive.
    fn check(&self) -> Result<()> {
        let ok = match *self {
            BackOff::Exponential {
                initial,
                max,
                multiplier,
            } => !initial.is_zero() && !max.is_zero() && multiplier > 0,
            BackOff::Constant(d) => !d.is_zero(),
        };
        match ok {
            true => Ok(()),
            false => Err(Error::InvalidArgument(format!(
                "{self:?}: every back-off option must be above zero"
            ))),
        }
    }

    /// The delays of one wait, from its first retry on.
    pub fn delays(&self) -> Delays {
        Delays {
            backoff: *self,
            next: match *self {
                BackOff::Exponential { initial, .. } => initial,
                BackOff::Constant(d) => d,
            },
            fails: 0,
        }
    }
}

/// The delays of one wait of a spin lock (see [`BackOff::delays`]).
#[derive(Clone, Debug)]
pub struct Delays {
    backoff: BackOff,
    next: Duration,
    fails: u32,
}

impl Delays {
    /// The delay before the next attempt.
    pub fn next_delay(&mut self) -> Duration {
        let BackOff::Exponential {
            max, multiplier, ..
        } = self.backoff
        else {
            return self.next;
        };
        let now = self.next;
        if now >= max {
            return max;
        }
        self.fails += 1;
        let jitter = Duration::from_millis(jitter(self.fails));
        self.next = (now.saturating_mul(multiplier) + jitter).min(max);
        now
    }
}

/// A number in `0..bound` (Redisson's `nextInt(++fails)`), from the random UUIDs the client
/// already makes (one per retry of a wait: cheap next to the attempt's round trip).
fn jitter(bound: u32) -> u64 {
    (uuid::Uuid::new_v4().as_u128() % u128::from(bound.max(1))) as u64
}

/// What both spin lock handles are: the lock, and how it waits.
#[derive(Clone)]
pub(crate) struct SpinCore {
    pub(crate) ctx: Arc<Context>,
    lock: LockCore,
    backoff: BackOff,
}

impl SpinCore {
    /// One attempt, then retries after each delay of the back-off until acquired or `wait`
    /// has passed since the first (Redisson's `tryLock(wait, ...)`: false once `now - start
    /// >= wait` after an attempt).
    async fn acquire<T, F: Future<Output = Result<Option<T>>>>(
        &self,
        io: Io,
        wait: Wait,
        attempt: impl Fn(Io) -> F,
    ) -> Result<Option<T>> {
        let start = Instant::now();
        let deadline = match wait {
            Wait::For(d) => Some(start.checked_add(d).unwrap_or(start + Duration::MAX / 4)),
            _ => None,
        };
        let mut delays = self.backoff.delays();
        // A blocking wait under a `CancelToken` ends between two attempts when it is
        // cancelled (an attempt itself does not wait).
        let token = match io {
            Io::Blocking => cancel::current(),
            Io::Async => None,
        };
        loop {
            if let Some(got) = attempt(io).await? {
                return Ok(Some(got));
            }
            let now = Instant::now();
            match (wait, deadline) {
                (Wait::No, _) => return Ok(None),
                (_, Some(end)) if now >= end => return Ok(None),
                _ => {}
            }
            let mut next = now + delays.next_delay();
            if let Some(end) = deadline {
                // The last attempt comes at the deadline, not a delay after it.
                next = next.min(end);
            }
            let Some(token) = &token else {
                self.ctx.bg.sleep_until(next).await;
                continue;
            };
            tokio::select! {
                _ = self.ctx.bg.sleep_until(next) => {}
                _ = token.cancelled() => {
                    return Err(Error::Cancelled {
                        name: self.lock.name.to_string(),
                    })
                }
            }
        }
    }

    async fn took(&self, io: Io, lease: Option<Duration>, wait: Wait) -> Result<bool> {
        let lock = &self.lock;
        let got = self
            .acquire(io, wait, |io| lock.acquire(io, lease, Wait::No))
            .await?;
        Ok(got.is_some())
    }

    async fn guard<M: CallStyle>(
        &self,
        io: Io,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Guard<M>>> {
        let lock = &self.lock;
        self.acquire(io, wait, |io| lock.guard::<M>(io, lease, Wait::No))
            .await
    }
}

/// A reentrant lock for blocking code whose waits retry with a back-off (Redisson's
/// `RedissonSpinLock`, from `getSpinLock`): in the lock's layout, the same hash as a
/// [`Lock`] of the same name, so a Java service on Redisson's spin lock or plain `RLock`
/// shares it, and every method of [`Lock`] works on it (through `Deref`: unlock, force unlock,
/// hold count, ...). Only its waits differ: no pub/sub subscription and no server-side queue,
/// each attempt one `RLOCK.ACQUIRE` without waiting (with the module) or one run of the lock's
/// acquire script (Redisson's protocol), the next one after a [`BackOff`] delay. Use it where
/// pub/sub or the module's sessions are unavailable or unwanted (many short waits on many
/// keys). A blocking wait under a [`CancelToken`](crate::CancelToken) ends with
/// [`Error::Cancelled`] between two attempts when the token is cancelled; an async wait ends
/// when its future is dropped. It is not fair: an attempt that comes right after a release takes the lock, whoever
/// waited longest (and with the module it never takes the lock past a queued waiter of a
/// [`Lock`]: the server hands a freed lock to its queue first).
///
/// ```no_run
/// # use std::time::Duration;
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.spin_lock("jobs:nightly");
/// if lock.try_lock_for(Duration::from_secs(2))? {
///     lock.unlock()?;
/// }
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct SpinLock {
    pub(crate) core: SpinCore,
    lock: Lock,
}

/// The async form of [`SpinLock`] (Redisson's `RedissonSpinLock` through `RLockAsync`): its
/// delays are timers of the client's runtime, and dropping a wait between two attempts leaves
/// nothing behind.
#[derive(Clone)]
pub struct AsyncSpinLock {
    pub(crate) core: SpinCore,
    lock: AsyncLock,
}

macro_rules! spin {
    ($($S:ident => $L:ident),*) => {$(
        impl fmt::Debug for $S {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($S))
                    .field("name", &self.core.lock.name)
                    .field("backoff", &self.core.backoff)
                    .finish()
            }
        }

        impl std::ops::Deref for $S {
            type Target = $L;

            /// The lock itself: every method of a lock that does not wait.
            fn deref(&self) -> &$L {
                &self.lock
            }
        }

        impl $S {
            pub(crate) fn new(lock: $L, backoff: BackOff) -> Result<$S> {
                backoff.check()?;
                Ok($S {
                    core: SpinCore {
                        ctx: lock.core.ctx.clone(),
                        lock: lock.core.clone(),
                        backoff,
                    },
                    lock,
                })
            }

            /// How it waits between attempts.
            pub fn backoff(&self) -> BackOff {
                self.core.backoff
            }

            /// This handle with a fixed owner (see [`Lock::with_owner`]).
            pub fn with_owner(self, owner: Owner) -> $S {
                let lock = self.lock.with_owner(owner);
                $S {
                    core: SpinCore {
                        ctx: lock.core.ctx.clone(),
                        lock: lock.core.clone(),
                        backoff: self.core.backoff,
                    },
                    lock,
                }
            }
        }
    )*};
}

spin!(SpinLock => Lock, AsyncSpinLock => AsyncLock);

lock_api!(SpinLock, AsyncSpinLock);

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_delays_grow_with_a_jitter_up_to_the_max_as_redissons() {
        // Redisson's LockOptionsTest: 10, 30, 90, 100, 100 ms with a jitter of up to
        // one ms per failed attempt.
        let mut d = BackOff::exponential(ms(10), ms(100), 3).delays();
        let got: Vec<Duration> = (0..5).map(|_| d.next_delay()).collect();
        assert_eq!(got[0], ms(10));
        assert!(got[1] >= ms(30) && got[1] <= ms(31), "{got:?}");
        assert!(got[2] >= ms(90) && got[2] <= ms(92), "{got:?}");
        assert_eq!(got[3], ms(100));
        assert_eq!(got[4], ms(100));
    }

    #[test]
    fn constant_delays_stay() {
        let mut d = BackOff::constant(ms(30)).delays();
        assert!((0..10).all(|_| d.next_delay() == ms(30)));
    }

    #[test]
    fn every_option_must_be_above_zero() {
        assert!(BackOff::default().check().is_ok());
        assert!(BackOff::constant(Duration::ZERO).check().is_err());
        assert!(BackOff::exponential(ms(1), ms(1), 0).check().is_err());
        assert!(BackOff::exponential(Duration::ZERO, ms(1), 2)
            .check()
            .is_err());
    }
}

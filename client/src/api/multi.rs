//! Several locks as one: [`MultiLock`] / [`AsyncMultiLock`] (Redisson's `RedissonMultiLock`)
//! and [`RedLock`] / [`AsyncRedLock`] (`RedissonRedLock`), written once. The algorithm is in
//! `ops/multi.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture};

use super::forever;
use super::guard::{Guard, Held, Watch};
use super::lock::{AsyncLock, Lock, LockCore};
use super::style::CallStyle;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ops::lock as lock_op;
use crate::ops::multi::{self as op, Part, Rule};
use crate::owner::{Owner, OwnerPolicy};
use crate::transport::{overlapped, Io};
use crate::wait::Wait;

/// What every multi-lock handle is: its locks in acquisition order, and how many make it held.
#[derive(Clone)]
pub(crate) struct MultiCore {
    /// The first lock's client: calls run in its runtime (each lock's requests in its own).
    pub(crate) ctx: Arc<Context>,
    locks: Arc<[LockCore]>,
    rule: Rule,
    /// The locks' names joined with `,`.
    name: Arc<str>,
}

/// The server a client talks to, for ordering locks of several clients.
fn server_of(ctx: &Context) -> String {
    #[cfg(feature = "cluster")]
    if let Some(seeds) = &ctx.config.cluster {
        return seeds.join(",");
    }
    ctx.config.url.clone()
}

impl MultiCore {
    fn new(locks: Vec<LockCore>, red: bool) -> Result<MultiCore> {
        let mut locks = locks;
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one lock".into(),
            ));
        }
        // One order for every handle over the same locks, whatever order they were given in:
        // by name, then server.
        locks.sort_by_cached_key(|l| (l.name.clone(), server_of(&l.ctx)));
        let n = locks.len();
        let rule = Rule {
            quorum: if red { n / 2 + 1 } else { n },
            drift: red,
        };
        let name = locks.iter().map(|l| &*l.name).collect::<Vec<_>>().join(",");
        Ok(MultiCore {
            ctx: locks[0].ctx.clone(),
            locks: locks.into(),
            rule,
            name: name.into(),
        })
    }

    /// Every lock with the owner it acts as in the calling thread or task.
    fn parts(&self, io: Io) -> Vec<Part<'_>> {
        self.locks
            .iter()
            .map(|l| Part {
                t: l.target(io),
                owner: l.owner(),
            })
            .collect()
    }

    async fn took(&self, io: Io, lease: Option<Duration>, wait: Wait) -> Result<bool> {
        let parts = self.parts(io);
        Ok(op::acquire(&parts, self.rule, lease, wait).await?.is_some())
    }

    async fn guard<M: CallStyle>(
        &self,
        io: Io,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Guard<M>>> {
        let parts = self.parts(io);
        let Some(taken) = op::acquire(&parts, self.rule, lease, wait).await? else {
            return Ok(None);
        };
        let held = taken
            .held
            .iter()
            .map(|(i, _)| (*i, parts[*i].owner.clone()))
            .collect();
        let watch = Watch {
            tolerate: taken.held.len() - self.rule.quorum.min(taken.held.len()),
            states: taken.held.into_iter().map(|(_, s)| s).collect(),
            valid_until: taken.valid_until,
        };
        let held = Arc::new(MultiHeld {
            core: self.clone(),
            held,
        });
        Ok(Some(Guard::new(held, watch)))
    }

    /// Release every lock as the calling owners. A multi-lock needs each release to succeed (the
    /// first error is returned after all were tried); a RedLock, which may hold only a
    /// majority, one.
    async fn release(&self, io: Io) -> Result<()> {
        let parts = self.parts(io);
        let all: Vec<usize> = (0..parts.len()).collect();
        let outcomes = op::release_each(&parts, &all).await;
        let ok = outcomes.iter().filter(|r| r.is_ok()).count();
        match outcomes.into_iter().find_map(|r| r.err()) {
            Some(e) if ok == 0 || self.rule.quorum == self.locks.len() => Err(e),
            _ => Ok(()),
        }
    }

    /// Whether the calling owners hold every lock (a RedLock: a majority).
    async fn is_held(&self, io: Io) -> Result<bool> {
        let parts = self.parts(io);
        let checks = parts
            .iter()
            .map(|p| p.t.ctx.bg.enter(lock_op::is_held_by(p.t, &p.owner)));
        let mut held = 0;
        for r in overlapped(join_all(checks)).await {
            match r {
                Ok(h) => held += usize::from(h),
                // A RedLock's server that can't answer holds nothing for it.
                Err(_) if self.rule.quorum < self.locks.len() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(held >= self.rule.quorum)
    }

    fn with_owner(mut self, owner: &Owner) -> MultiCore {
        for l in self.locks.iter() {
            l.ctx.holds.lock().adopt(owner.as_str());
        }
        let locks: Vec<LockCore> = self
            .locks
            .iter()
            .map(|l| LockCore {
                policy: OwnerPolicy::Fixed(owner.clone()),
                ..l.clone()
            })
            .collect();
        self.locks = locks.into();
        self
    }
}

/// The locks a multi-lock guard holds, given back together.
struct MultiHeld {
    core: MultiCore,
    /// Index of each lock taken, and its owner.
    held: Vec<(usize, Owner)>,
}

impl Held for MultiHeld {
    fn ctx(&self) -> &Arc<Context> {
        &self.core.ctx
    }

    fn name(&self) -> &str {
        &self.core.name
    }

    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let parts: Vec<Part<'_>> = self
                .held
                .iter()
                .map(|(i, owner)| Part {
                    t: self.core.locks[*i].target(io),
                    owner: owner.clone(),
                })
                .collect();
            let all: Vec<usize> = (0..parts.len()).collect();
            let outcomes = op::release_each(&parts, &all).await;
            outcomes
                .into_iter()
                .find_map(|r| r.err())
                .map_or(Ok(()), Err)
        })
    }

    fn owner(&self) -> Option<&Owner> {
        self.held.first().map(|(_, o)| o)
    }
}

/// Several locks taken as one, all or none, for blocking code: Redisson's `RedissonMultiLock`
/// (`getMultiLock(lock1, lock2, ...)`). The locks may live on one server or on several, through
/// one client or several.
///
/// - **All or none.** An acquire takes every lock or, when it gives up, none: what it took is
///   released before it returns (also when an async acquire is cancelled).
/// - **One wait budget** for the whole set: `try_lock_for(1 s)` waits at most 1 s in all.
/// - **No deadlock between multi-locks.** Locks are taken in one fixed order (by name, then
///   server), whatever order they were given in; a caller waits (on the server, in its queue)
///   only while holding locks that come earlier in that order, so two multi-locks over the
///   same locks never wait for each other in a circle.
/// - **Parallel round trips.** Each round sends the attempts for all locks at once, to every
///   server; releases likewise. A set of locks on three servers costs about one round trip
///   per step, not three.
/// - **One guard** for the whole set; it releases every lock when dropped.
/// - **Leases**: every lock gets the lease; when the locks were not all taken in the first
///   round, they are all renewed to the full lease at the end, so they expire together
///   ([`Guard::valid_until`](crate::Guard::valid_until)). Without a lease each lock's
///   client's watchdog keeps it.
///
/// The owner of each lock is the calling thread (per lock's client). Errors: an error of any
/// lock ends the acquire with that error, after releasing what was taken
/// ([`Error::Connection`] for a server that is down, [`Error::Deadlock`] when the server
/// refuses a wait that would close a cycle with other owners).
///
/// ```no_run
/// use std::time::Duration;
///
/// let a = rlock_client::Client::open("redis://10.0.0.1:6379/")?;
/// let b = rlock_client::Client::open("redis://10.0.0.2:6379/")?;
/// let both = rlock_client::MultiLock::new([a.lock("account:1"), b.lock("account:2")])?;
/// if let Some(_g) = both.try_guard_for(Duration::from_secs(2))? {
///     // ... move money between the two accounts ...
/// }
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct MultiLock {
    pub(crate) core: MultiCore,
}

/// The async form of [`MultiLock`]: its locks are [`AsyncLock`]s acting as the calling task.
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let both = client.async_multi_lock(["account:1", "account:2"])?;
/// let g = both.guard().await?;
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncMultiLock {
    pub(crate) core: MultiCore,
}

/// The Redlock algorithm over N independent Redis servers, for blocking code: Redisson's
/// (deprecated) `RedissonRedLock`. Give it one lock per server, each from its own
/// [`Client`](crate::Client); it holds when a majority (N/2 + 1) of them are held.
///
/// An acquire tries every server at once; with a majority taken within the lease, the lock is
/// held until [`Guard::valid_until`](crate::Guard::valid_until): lease − time spent acquiring −
/// clock drift (1 % of the lease + 2 ms). Otherwise, and on unlock, it is released on every
/// server where it was taken. A server that is down or refuses counts as a lost vote: with one
/// of three servers down it still acquires, with two it cannot (`try_lock*` gives `false`;
/// `lock()` keeps trying). Waiting follows [`MultiLock`]'s rules (one budget, fixed order,
/// server-side queues, no polling while a server answers "busy").
///
/// The methods are [`MultiLock`]'s (reached through `Deref`).
///
/// # Before you use it
///
/// Redlock's safety rests on timing assumptions: bounded network delays, bounded process
/// pauses (GC, swapping) and clocks that do not jump. Martin Kleppmann's analysis ("How to do
/// distributed locking", 2016) shows how a paused client can keep writing after its lock
/// expired and another client took it; no lock service can prevent that on its own. Redisson
/// deprecated `RedissonRedLock` for this reason and for its operational cost.
///
/// The usual alternative is one lock with **fencing tokens**: a [`FencedLock`](crate::FencedLock)
/// (on a server with replicas and [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync))
/// hands out a token that grows with every acquire; the storage you protect remembers the
/// highest token it has seen and refuses writes carrying a lower one, which stays correct even
/// when a lock holder is paused past its lease.
///
/// ```no_run
/// use std::time::Duration;
///
/// let servers = ["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/", "redis://10.0.0.3:6379/"];
/// let clients = servers
///     .iter()
///     .map(|url| rlock_client::Client::open(*url))
///     .collect::<Result<Vec<_>, _>>()?;
/// let red = rlock_client::RedLock::new(clients.iter().map(|c| c.lock("report")))?;
/// if let Some(g) = red.try_guard_with(Duration::from_millis(500), Duration::from_secs(10))? {
///     // finish before g.valid_until()
/// }
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    multi: MultiLock,
}

/// The async form of [`RedLock`]; the methods are [`AsyncMultiLock`]'s.
///
/// ```no_run
/// # async fn demo(clients: Vec<rlock_client::Client>) -> rlock_client::Result<()> {
/// let red = rlock_client::AsyncRedLock::new(clients.iter().map(|c| c.async_lock("report")))?;
/// let g = red.guard_with_lease(std::time::Duration::from_secs(10)).await?;
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncRedLock {
    multi: AsyncMultiLock,
}

macro_rules! multi {
    ($($T:ident($L:ident) / $R:ident),*) => {$(
        impl fmt::Debug for $T {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($T))
                    .field("names", &self.core.name)
                    .field("quorum", &self.core.rule.quorum)
                    .finish_non_exhaustive()
            }
        }

        impl $T {
            /// All of `locks`, as one lock (Redisson's `new RedissonMultiLock(locks)`). The
            /// locks may come from different clients. [`Error::InvalidArgument`] when there
            /// are none.
            pub fn new(locks: impl IntoIterator<Item = $L>) -> Result<$T> {
                let cores = locks.into_iter().map(|l| l.core).collect();
                Ok($T {
                    core: MultiCore::new(cores, false)?,
                })
            }

            /// The locks' names, in the order they are taken.
            pub fn names(&self) -> Vec<&str> {
                self.core.locks.iter().map(|l| &*l.name).collect()
            }

            /// Every lock acting as `owner` in every call, whatever thread or task makes it
            /// (see [`Lock::with_owner`]).
            pub fn with_owner(self, owner: Owner) -> $T {
                $T {
                    core: self.core.with_owner(&owner),
                }
            }
        }

        impl $R {
            /// A RedLock over `locks`, one per independent server: held while a majority is
            /// (Redisson's `new RedissonRedLock(locks)`). [`Error::InvalidArgument`] when there
            /// are none.
            pub fn new(locks: impl IntoIterator<Item = $L>) -> Result<$R> {
                let cores = locks.into_iter().map(|l| l.core).collect();
                Ok($R {
                    multi: $T {
                        core: MultiCore::new(cores, true)?,
                    },
                })
            }

            /// How many of its locks must be held: N/2 + 1.
            pub fn quorum(&self) -> usize {
                self.multi.core.rule.quorum
            }

            /// Every lock acting as `owner` (see [`Lock::with_owner`]).
            pub fn with_owner(self, owner: Owner) -> $R {
                $R {
                    multi: self.multi.with_owner(owner),
                }
            }
        }

        impl std::ops::Deref for $R {
            type Target = $T;

            fn deref(&self) -> &$T {
                &self.multi
            }
        }
    )*};
}

multi!(
    MultiLock(Lock) / RedLock,
    AsyncMultiLock(AsyncLock) / AsyncRedLock
);

twins! {
    MultiLock, AsyncMultiLock, io = io, style = M;

    /// Release one hold of every lock, all at once. A multi-lock returns the first error
    /// (e.g. [`Error::NotOwner`](crate::Error::NotOwner)) after trying every lock; a RedLock
    /// succeeds when any lock was released.
    fn unlock(&self) -> Result<()> {
        self.core.release(io).await
    }

    /// Whether the calling thread (async: task) holds every lock (a RedLock: a majority):
    /// Redisson's `isHeldByCurrentThread`.
    fn is_held(&self) -> Result<bool> {
        self.core.is_held(io).await
    }
}

lock_api!(MultiLock, AsyncMultiLock);

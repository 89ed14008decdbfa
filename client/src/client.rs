//! [`Client`]: one per application (like a `RedissonClient`), cheap to clone. The factory of
//! handles; nothing below the public API refers to it.

use std::sync::Arc;

use crate::api::{
    AsyncCountDownLatch, AsyncFencedLock, AsyncGroupLock, AsyncLock, AsyncMultiLock,
    AsyncPermitExpirableSemaphore, AsyncReadWriteLock, AsyncSemaphore, AsyncSpinLock, BackOff,
    CountDownLatch, FencedLock, GroupLock, LatchCore, Lock, LockCore, MultiLock,
    PermitExpirableSemaphore, ReadWriteLock, SemCore, Semaphore, SpinLock,
};
use crate::ops::lock::Flavor;

const PLAIN: Flavor = Flavor::Exclusive {
    fence: false,
    reentrant: true,
    fair: false,
};
const FAIR: Flavor = Flavor::Exclusive {
    fence: false,
    reentrant: true,
    fair: true,
};
const FENCED: Flavor = Flavor::Exclusive {
    fence: true,
    reentrant: true,
    fair: false,
};
const NON_REENTRANT: Flavor = Flavor::Exclusive {
    fence: false,
    reentrant: false,
    fair: false,
};
use crate::config::{ClientBuilder, Config, Protocol};
use crate::context::Context;
use crate::error::Result;
#[cfg(feature = "sentinel")]
use crate::failover;
use crate::field::FieldCodec;
use crate::owner::{self, Owner, OwnerPolicy};
use crate::transport::Io;
use crate::wait::millis;
use crate::watchdog;

/// A connection to a Redis server (with the rlock module, or without it over Redisson's
/// protocol: see "Two protocols" in the crate docs), and the factory of lock handles.
///
/// Each client has its own random UUID: the owner of a lock is `UUID:number`, so two clients (or
/// two processes) never mistake each other's holds. Requests run on the caller's thread (sync
/// API) or executor (async API); a small background runtime of the client drives its async
/// connections and its watchdog. Clone the client to share it (clones share everything); it
/// stops when the last clone and the last handle made from it are dropped.
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("orders:42");
/// lock.lock()?;
/// // ... critical section ...
/// lock.unlock()?;
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    ctx: Arc<Context>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.ctx.id)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `url` with every default (watchdog 30 s, renewal every 10 s).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn open(url: impl Into<String>) -> Result<Client> {
        ClientBuilder::new().url(url).build()
    }

    /// A client for a Redis Cluster, given the URLs of some of its nodes (see
    /// [`ClientBuilder::cluster`]). Needs the `cluster` feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open_cluster([
    ///     "redis://127.0.0.1:7000/",
    ///     "redis://127.0.0.1:7001/",
    /// ])?;
    /// let lock = client.lock("{orders}:42");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn open_cluster<I, S>(seeds: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new().cluster(seeds).build()
    }

    /// A client for the primary that Redis Sentinel names for `master`, given the URLs of
    /// some of the Sentinels (Redisson's `useSentinelServers()`; see
    /// [`ClientBuilder::sentinel`] for failover and the other settings). Needs the `sentinel`
    /// feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open_sentinel(
    ///     "mymaster",
    ///     ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380", "redis://127.0.0.1:26381"],
    /// )?;
    /// let lock = client.lock("orders:42");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn open_sentinel<I, S>(master: impl Into<String>, sentinels: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new().sentinel(master, sentinels).build()
    }

    /// A builder to change the defaults (see [`ClientBuilder`]).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder().url("redis://127.0.0.1:6390/").build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    fn start(config: Config) -> Result<Client> {
        let ctx = Arc::new(Context::new(config)?);
        let _ = ctx.me.set(Arc::downgrade(&ctx));
        let interval = ctx.config.renewal_interval();
        let lease_ms = millis(ctx.config.watchdog_timeout);
        ctx.bg
            .spawn(watchdog::run(Arc::downgrade(&ctx), interval, lease_ms));
        #[cfg(feature = "sentinel")]
        if let Some(primary) = ctx.transport.primary_changes() {
            ctx.bg
                .spawn(failover::follow(Arc::downgrade(&ctx), primary, lease_ms));
        }
        Ok(Client { ctx })
    }

    /// The protocol the client speaks to its server (for a cluster: to the node serving
    /// `name`'s slot, see [`Client::protocol_for`]): [`Protocol::Module`] or
    /// [`Protocol::Redisson`], as forced with
    /// [`ClientBuilder::protocol`](crate::ClientBuilder::protocol) or detected (at the first
    /// call that reaches the server; this one, if none did yet). Fails when the server can't
    /// be reached, or has neither the module nor scripting
    /// ([`Error::NoLockProtocol`](crate::Error::NoLockProtocol)).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// if client.protocol()? == rlock_client::Protocol::Redisson {
    ///     println!("no rlock module: speaking Redisson's protocol");
    /// }
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn protocol(&self) -> Result<Protocol> {
        self.protocol_for("")
    }

    /// The protocol the client speaks to the server (cluster node) serving the object `name`.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let p = client.protocol_for("{orders}:42")?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn protocol_for(&self, name: &str) -> Result<Protocol> {
        let ctx = &self.ctx;
        ctx.bg.block_on(
            ctx.protocols
                .at(&ctx.transport, &ctx.bg, Io::Blocking, name),
        )
    }

    /// The async form of [`Client::protocol_for`].
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let p = client.protocol_for_async("orders:42").await?;
    /// # Ok(()) }
    /// ```
    pub async fn protocol_for_async(&self, name: &str) -> Result<Protocol> {
        let ctx = &self.ctx;
        ctx.bg
            .enter(ctx.protocols.at(&ctx.transport, &ctx.bg, Io::Async, name))
            .await
    }

    /// This client's UUID, the first part of every owner it writes.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.id().len(), 36);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.ctx.id
    }

    /// The settings this client runs with.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// println!("watchdog: {:?}", client.config().watchdog_timeout());
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn config(&self) -> &Config {
        &self.ctx.config
    }

    fn core(&self, name: String, flavor: Flavor, policy: OwnerPolicy) -> LockCore {
        LockCore {
            ctx: self.ctx.clone(),
            name: Arc::from(name),
            flavor,
            policy,
            anchor: Arc::new(()),
        }
    }

    /// A reentrant lock handle for blocking code (Redisson `getLock`). The owner of each call is
    /// the calling thread. Creating a handle does not touch Redis.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.lock("inventory");
    /// let _guard = lock.guard()?; // released when `_guard` goes out of scope
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            core: self.core(name.into(), PLAIN, OwnerPolicy::Thread),
        }
    }

    /// A lock whose waits retry with Redisson's default back-off instead of waiting on the
    /// server (Redisson's `getSpinLock`): the lock's layout, every method of [`Lock`]; see
    /// [`SpinLock`].
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let _g = client.spin_lock("jobs:nightly").guard()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        SpinLock::new(self.lock(name), BackOff::default()).expect("the default back-off is valid")
    }

    /// [`Client::spin_lock`] with a back-off of your own (Redisson's `getSpinLock(name,
    /// backOff)`); [`Error::InvalidArgument`](crate::Error::InvalidArgument) when one of its
    /// options is zero.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let every_64ms = rlock_client::BackOff::constant(Duration::from_millis(64));
    /// let lock = client.spin_lock_with_backoff("jobs:nightly", every_64ms)?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn spin_lock_with_backoff(
        &self,
        name: impl Into<String>,
        backoff: BackOff,
    ) -> Result<SpinLock> {
        SpinLock::new(self.lock(name), backoff)
    }

    /// The async form of [`Client::spin_lock`].
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let g = client.async_spin_lock("jobs:nightly").guard().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_spin_lock(&self, name: impl Into<String>) -> AsyncSpinLock {
        AsyncSpinLock::new(self.async_lock(name), BackOff::default())
            .expect("the default back-off is valid")
    }

    /// The async form of [`Client::spin_lock_with_backoff`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_spin_lock_with_backoff("jobs", rlock_client::BackOff::default())?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn async_spin_lock_with_backoff(
        &self,
        name: impl Into<String>,
        backoff: BackOff,
    ) -> Result<AsyncSpinLock> {
        AsyncSpinLock::new(self.async_lock(name), backoff)
    }

    /// Values of one group locked all or none (Redisson 4.x's `getMultiLock(group, values)`,
    /// `RedissonFasterMultiLock`), each value encoded as Redisson's default codec (Kryo 5)
    /// encodes a `String`; see [`GroupLock`]. No value is refused
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let class = client.group_lock("class_100", ["Jack_001", "Mary_002"])?;
    /// let _g = class.guard()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn group_lock<V: AsRef<str>>(
        &self,
        group: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Result<GroupLock> {
        let values: Vec<V> = values.into_iter().collect();
        let bytes = values.iter().map(|v| v.as_ref().as_bytes());
        GroupLock::new(self.ctx.clone(), group.into(), bytes, FieldCodec::Kryo5)
    }

    /// [`Client::group_lock`] with the values encoded by `codec` (the codec of the Redisson
    /// client that shares the group: [`FieldCodec::Utf8`] for its `StringCodec`,
    /// [`FieldCodec::Raw`] for values encoded already).
    ///
    /// ```no_run
    /// use rlock_client::FieldCodec;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let class = client.group_lock_with_codec("class_100", ["Jack_001"], FieldCodec::Utf8)?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn group_lock_with_codec<V: AsRef<[u8]>>(
        &self,
        group: impl Into<String>,
        values: impl IntoIterator<Item = V>,
        codec: FieldCodec,
    ) -> Result<GroupLock> {
        GroupLock::new(self.ctx.clone(), group.into(), values, codec)
    }

    /// The async form of [`Client::group_lock`].
    pub fn async_group_lock<V: AsRef<str>>(
        &self,
        group: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Result<AsyncGroupLock> {
        let values: Vec<V> = values.into_iter().collect();
        let bytes = values.iter().map(|v| v.as_ref().as_bytes());
        AsyncGroupLock::new(self.ctx.clone(), group.into(), bytes, FieldCodec::Kryo5)
    }

    /// The async form of [`Client::group_lock_with_codec`].
    pub fn async_group_lock_with_codec<V: AsRef<[u8]>>(
        &self,
        group: impl Into<String>,
        values: impl IntoIterator<Item = V>,
        codec: FieldCodec,
    ) -> Result<AsyncGroupLock> {
        AsyncGroupLock::new(self.ctx.clone(), group.into(), values, codec)
    }

    /// Redisson's `getFairLock`. With the module it is the same as [`Client::lock`]: the
    /// server always queues waiters first come, first served. Over Redisson's protocol it is
    /// `RFairLock`, its queue and timeout set.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.fair_lock("queue");
    /// lock.lock()?;
    /// lock.unlock()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            core: self.core(name.into(), FAIR, OwnerPolicy::Thread),
        }
    }

    /// A lock that hands out fencing tokens (Redisson `getFencedLock`): every acquire, re-entry
    /// included, gets a token greater than every earlier one for this name.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.fenced_lock("ledger");
    /// let token = lock.lock_and_get_token()?;
    /// // pass `token` to the storage layer, which rejects writes with an older token
    /// lock.unlock()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock {
            lock: Lock {
                core: self.core(name.into(), FENCED, OwnerPolicy::Thread),
            },
        }
    }

    /// A lock that its holder can't take twice (Redisson `getNonReentrantLock`, and
    /// `getNonReentrantFairLock`: the server is always fair): in Redisson's lock layout (the
    /// hold count is always 1), so a Java service on Redisson's non-reentrant lock or on its
    /// plain `RLock` shares it. A second acquire by the owner that holds it (lock, try-lock or
    /// guard, through any handle) fails with [`Error::NotReentrant`](crate::Error::NotReentrant)
    /// and leaves the first hold as it was; one `unlock` releases it.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.non_reentrant_lock("import");
    /// lock.lock()?;
    /// assert!(matches!(lock.try_lock(), Err(rlock_client::Error::NotReentrant { .. })));
    /// lock.unlock()?; // frees it
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            core: self.core(name.into(), NON_REENTRANT, OwnerPolicy::Thread),
        }
    }

    /// The async form of [`Client::non_reentrant_lock`] (the owner is the calling task).
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_non_reentrant_lock("import");
    /// let g = lock.guard().await?;
    /// assert!(lock.try_lock().await.is_err());
    /// g.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_non_reentrant_lock(&self, name: impl Into<String>) -> AsyncLock {
        AsyncLock {
            core: self.core(name.into(), NON_REENTRANT, OwnerPolicy::Task),
        }
    }

    /// A reentrant lock handle for async code. The owner of each call is the calling tokio task;
    /// use [`AsyncLock::with_owner`] to share one owner between tasks.
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_lock("inventory");
    /// let guard = lock.guard().await?;
    /// // ... critical section ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_lock(&self, name: impl Into<String>) -> AsyncLock {
        AsyncLock {
            core: self.core(name.into(), PLAIN, OwnerPolicy::Task),
        }
    }

    /// The async form of [`Client::fair_lock`].
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_fair_lock("queue");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn async_fair_lock(&self, name: impl Into<String>) -> AsyncLock {
        AsyncLock {
            core: self.core(name.into(), FAIR, OwnerPolicy::Task),
        }
    }

    /// The async form of [`Client::fenced_lock`].
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_fenced_lock("ledger");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn async_fenced_lock(&self, name: impl Into<String>) -> AsyncFencedLock {
        AsyncFencedLock {
            lock: AsyncLock {
                core: self.core(name.into(), FENCED, OwnerPolicy::Task),
            },
        }
    }

    /// A read-write lock for blocking code (Redisson `getReadWriteLock`): its
    /// [`read_lock`](ReadWriteLock::read_lock) and [`write_lock`](ReadWriteLock::write_lock) are
    /// [`Lock`]s acting as the calling thread. Creating it does not touch Redis.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let rw = client.read_write_lock("catalog");
    /// let _r = rw.read_lock().guard()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.core(name.into(), PLAIN, OwnerPolicy::Thread))
    }

    /// The async form of [`Client::read_write_lock`]: its sides are [`AsyncLock`]s acting as
    /// the calling task.
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let rw = client.async_read_write_lock("catalog");
    /// let w = rw.write_lock().guard().await?;
    /// w.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_read_write_lock(&self, name: impl Into<String>) -> AsyncReadWriteLock {
        AsyncReadWriteLock::new(self.core(name.into(), PLAIN, OwnerPolicy::Task))
    }

    /// The locks `names` of this client as one [`MultiLock`] (Redisson `getMultiLock`): taken
    /// all or none, in one fixed order. For locks of several clients (servers), use
    /// [`MultiLock::new`]. [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// `names` is empty.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let both = client.multi_lock(["account:1", "account:2"])?;
    /// let _g = both.guard()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock::new(names.into_iter().map(|n| self.lock(n)))
    }

    /// The async form of [`Client::multi_lock`] (locks acting as the calling task).
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let both = client.async_multi_lock(["account:1", "account:2"])?;
    /// both.lock().await?;
    /// both.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_multi_lock<I, S>(&self, names: I) -> Result<AsyncMultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        AsyncMultiLock::new(names.into_iter().map(|n| self.async_lock(n)))
    }

    fn sem(&self, name: String, plain: bool) -> SemCore {
        SemCore {
            ctx: self.ctx.clone(),
            name: Arc::from(name),
            anchor: Arc::new(()),
            watched: false,
            plain,
        }
    }

    /// A counting semaphore for blocking code (Redisson `getSemaphore`). Creating the handle
    /// does not touch Redis.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let slots = client.semaphore("api-slots");
    /// slots.try_set_permits(10)?;
    /// let _permit = slots.guard()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore {
            core: self.sem(name.into(), true),
        }
    }

    /// The async form of [`Client::semaphore`].
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let slots = client.async_semaphore("api-slots");
    /// slots.acquire().await?;
    /// slots.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_semaphore(&self, name: impl Into<String>) -> AsyncSemaphore {
        AsyncSemaphore {
            core: self.sem(name.into(), true),
        }
    }

    /// A semaphore of leased permits with ids, for blocking code (Redisson
    /// `getPermitExpirableSemaphore`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let slots = client.permit_expirable_semaphore("render-slots");
    /// let id = slots.acquire(Duration::from_secs(30))?;
    /// slots.release(id)?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            core: self.sem(name.into(), false),
        }
    }

    /// The async form of [`Client::permit_expirable_semaphore`].
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let slots = client.async_permit_expirable_semaphore("render-slots");
    /// let id = slots.acquire(std::time::Duration::from_secs(30)).await?;
    /// slots.release(id).await?;
    /// # Ok(()) }
    /// ```
    pub fn async_permit_expirable_semaphore(
        &self,
        name: impl Into<String>,
    ) -> AsyncPermitExpirableSemaphore {
        AsyncPermitExpirableSemaphore {
            core: self.sem(name.into(), false),
        }
    }

    fn latch(&self, name: String) -> LatchCore {
        LatchCore {
            ctx: self.ctx.clone(),
            name: Arc::from(name),
        }
    }

    /// A count-down latch for blocking code (Redisson `getCountDownLatch`).
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let start = client.count_down_latch("start");
    /// start.try_set_count(1)?;
    /// start.count_down()?;
    /// start.wait()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch {
            core: self.latch(name.into()),
        }
    }

    /// The async form of [`Client::count_down_latch`].
    ///
    /// ```no_run
    /// # async fn demo() -> rlock_client::Result<()> {
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let start = client.async_count_down_latch("start");
    /// start.wait().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_count_down_latch(&self, name: impl Into<String>) -> AsyncCountDownLatch {
        AsyncCountDownLatch {
            core: self.latch(name.into()),
        }
    }

    /// A new explicit owner `UUID:number`, distinct from every thread and task owner.
    ///
    /// ```no_run
    /// # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let owner = client.new_owner();
    /// assert!(owner.as_str().starts_with(client.id()));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn new_owner(&self) -> Owner {
        Owner::numbered(&self.ctx.id, owner::next_number())
    }

    /// The owner the sync API uses on the calling thread (`UUID:thread-number`).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.current_thread_owner(), client.lock("a").owner());
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn current_thread_owner(&self) -> Owner {
        OwnerPolicy::Thread.resolve(&self.ctx.id)
    }

    /// How many locks the watchdog is renewing right now.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// let _g = client.lock("a").guard()?; // no lease: watchdog mode
    /// assert_eq!(client.renewing_count(), 1);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn renewing_count(&self) -> usize {
        self.ctx.holds.lock().renewing()
    }

    /// How many plain semaphore permits this client may have taken without being able to
    /// confirm it or give them back: an acquire whose reply the connection lost (a plain
    /// permit has no owner the server could be asked about, and the acquire is not sent again:
    /// it could take permits twice), or a give-back (of a dropped or cancelled acquire) that
    /// failed. Such permits are out of the pool until someone adds them back
    /// (`RSEM.ADDPERMITS`, [`Semaphore::add_permits`](crate::Semaphore::add_permits)) once
    /// they know; Redisson has the same limit. Each one is also logged as a `tracing` warning
    /// and counted in `rlock_permits_in_doubt_total`. Leased permits are never in doubt for
    /// long: they end with their lease.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.permits_in_doubt(), 0);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn permits_in_doubt(&self) -> u64 {
        self.ctx.in_doubt()
    }
}

impl ClientBuilder {
    /// Check the settings and create the client. No connection is opened yet: the first call
    /// connects, and a server that is down only fails the calls made while it is down (after at
    /// most the connect timeout, with its address in the error).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .watchdog_timeout(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn build(self) -> Result<Client> {
        Client::start(self.checked()?)
    }
}

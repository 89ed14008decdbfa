//! [`Client`]: one per application (like a `RedissonClient`), cheap to clone.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::runtime::{Handle, Runtime};

use crate::asynk::{AsyncFencedLock, AsyncLock};
use crate::config::{ClientBuilder, Config};
use crate::conn::Connections;
use crate::error::{Error, Result};
use crate::lock::{FencedLock, Lock};
use crate::lock_core::LockCore;
use crate::owner::{self, Owner, OwnerPolicy};
use crate::watchdog::{self, Registry};

/// A connection to a Redis server with the rlock module, and the factory of lock handles.
///
/// Each client has its own random UUID: the owner of a lock is `UUID:number`, so two clients (or
/// two processes) never mistake each other's holds. A client owns a small background runtime
/// that drives its connections and its watchdog; clone the client to share it (clones share
/// everything), drop the last clone to stop it.
///
/// ```no_run
/// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
/// let lock = client.lock("orders:42");
/// lock.lock()?;
/// // ... critical section ...
/// lock.unlock()?;
/// # Ok::<(), rlock::Error>(())
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) id: String,
    pub(crate) handle: Handle,
    pub(crate) conns: Connections,
    pub(crate) registry: Mutex<Registry>,
    rt: Option<Runtime>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            // The last reference may go away on one of the runtime's own threads, where a
            // runtime cannot be shut down: do it from a thread of its own.
            let _ = std::thread::Builder::new()
                .name("rlock-shutdown".into())
                .spawn(move || rt.shutdown_timeout(std::time::Duration::from_secs(1)));
        }
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `url` with every default (watchdog 30 s, renewal every 10 s).
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn open(url: impl Into<String>) -> Result<Client> {
        ClientBuilder::new().url(url).build()
    }

    /// A client for a Redis Cluster, given the URLs of some of its nodes (see
    /// [`ClientBuilder::cluster`]).
    ///
    /// ```no_run
    /// let client = rlock::Client::open_cluster([
    ///     "redis://127.0.0.1:7000/",
    ///     "redis://127.0.0.1:7001/",
    /// ])?;
    /// let lock = client.lock("{orders}:42");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn open_cluster<I, S>(seeds: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new().cluster(seeds).build()
    }

    /// A builder to change the defaults (see [`ClientBuilder`]).
    ///
    /// ```no_run
    /// let client = rlock::Client::builder().url("redis://127.0.0.1:6390/").build()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::new()
    }

    pub(crate) fn from_config(config: Config) -> Result<Client> {
        let redis = match &config.cluster {
            Some(_) => None,
            None => Some(
                redis::Client::open(config.url.as_str())
                    .map_err(|e| Error::Config(format!("bad Redis URL '{}': {e}", config.url)))?,
            ),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.worker_threads)
            .thread_name("rlock")
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("can't start the client runtime: {e}")))?;
        let handle = rt.handle().clone();
        let conns = {
            let _in_rt = rt.enter();
            match (redis, &config.cluster) {
                (Some(redis), _) => Connections::new(redis, &config)?,
                (None, Some(seeds)) => Connections::new_cluster(seeds, &config)?,
                (None, None) => unreachable!("a client is either single-server or cluster"),
            }
        };
        let inner = Arc::new(Inner {
            id: uuid::Uuid::new_v4().to_string(),
            handle: handle.clone(),
            conns,
            registry: Mutex::new(Registry::default()),
            rt: Some(rt),
            config,
        });
        let interval = inner.config.renewal_interval();
        let lease_ms = crate::ops::millis(inner.config.watchdog_timeout);
        handle.spawn(watchdog::run(Arc::downgrade(&inner), interval, lease_ms));
        Ok(Client { inner })
    }

    /// This client's UUID, the first part of every owner it writes.
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.id().len(), 36);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The settings this client runs with.
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// println!("watchdog: {:?}", client.config().watchdog_timeout());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    fn core(&self, name: String, fence: bool, policy: OwnerPolicy) -> LockCore {
        LockCore {
            client: self.clone(),
            name: Arc::from(name),
            fence,
            policy,
        }
    }

    /// A reentrant lock handle for blocking code (Redisson `getLock`). The owner of each call is
    /// the calling thread. Creating a handle does not touch Redis.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.lock("inventory");
    /// let _guard = lock.guard()?; // released when `_guard` goes out of scope
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock {
            core: self.core(name.into(), false, OwnerPolicy::Thread),
        }
    }

    /// Same as [`Client::lock`]: the server always queues waiters first come, first served, so
    /// Redisson's `getFairLock` maps here unchanged.
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.fair_lock("queue");
    /// lock.lock()?;
    /// lock.unlock()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> Lock {
        self.lock(name)
    }

    /// A lock that hands out fencing tokens (Redisson `getFencedLock`): every acquire, re-entry
    /// included, gets a token greater than every earlier one for this name.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.fenced_lock("ledger");
    /// let token = lock.lock_and_get_token()?;
    /// // pass `token` to the storage layer, which rejects writes with an older token
    /// lock.unlock()?;
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock {
            lock: Lock {
                core: self.core(name.into(), true, OwnerPolicy::Thread),
            },
        }
    }

    /// A reentrant lock handle for async code. The owner of each call is the calling tokio task;
    /// use [`AsyncLock::with_owner`] to share one owner between tasks.
    ///
    /// ```no_run
    /// # async fn demo() -> rlock::Result<()> {
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_lock("inventory");
    /// let guard = lock.guard().await?;
    /// // ... critical section ...
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn async_lock(&self, name: impl Into<String>) -> AsyncLock {
        AsyncLock {
            core: self.core(name.into(), false, OwnerPolicy::Task),
        }
    }

    /// Same as [`Client::async_lock`] (the server is always fair).
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_fair_lock("queue");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn async_fair_lock(&self, name: impl Into<String>) -> AsyncLock {
        self.async_lock(name)
    }

    /// The async form of [`Client::fenced_lock`].
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let lock = client.async_fenced_lock("ledger");
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn async_fenced_lock(&self, name: impl Into<String>) -> AsyncFencedLock {
        AsyncFencedLock {
            lock: AsyncLock {
                core: self.core(name.into(), true, OwnerPolicy::Task),
            },
        }
    }

    /// A new explicit owner `UUID:number`, distinct from every thread and task owner.
    ///
    /// ```no_run
    /// # let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let owner = client.new_owner();
    /// assert!(owner.as_str().starts_with(client.id()));
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn new_owner(&self) -> Owner {
        Owner::numbered(&self.inner.id, owner::next_number())
    }

    /// The owner the sync API uses on the calling thread (`UUID:thread-number`).
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.current_thread_owner(), client.lock("a").owner());
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn current_thread_owner(&self) -> Owner {
        OwnerPolicy::Thread.resolve(&self.inner.id)
    }

    /// How many locks the watchdog is renewing right now.
    ///
    /// ```no_run
    /// let client = rlock::Client::open("redis://127.0.0.1:6390/")?;
    /// let _g = client.lock("a").guard()?; // no lease: watchdog mode
    /// assert_eq!(client.renewing_count(), 1);
    /// # Ok::<(), rlock::Error>(())
    /// ```
    pub fn renewing_count(&self) -> usize {
        self.inner.registry.lock().unwrap().renewing()
    }
}

impl Inner {
    /// Run `fut` on the client's runtime and wait for it on this thread (the sync API). Works
    /// from any thread, including one that runs another async runtime (it blocks that thread).
    pub(crate) fn block_on<T, F>(&self, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or(Err(Error::Shutdown))
    }

    /// Run `fut` on the client's runtime and await it from any executor (the async API).
    pub(crate) async fn run<T, F>(&self, fut: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        match self.handle.spawn(fut).await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Error::Shutdown),
        }
    }
}

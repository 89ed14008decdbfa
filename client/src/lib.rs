//! `rlock-client`: Redisson's distributed synchronizers for Rust (locks, read-write locks,
//! semaphores, count-down latches, multi-locks and RedLock) over the native commands of the rlock
//! Redis module (`RLOCK.*`, `RRWLOCK.*`, `RSEM.*`, `RLATCH.*`).
//!
//! Every object lives in Redis with exactly Redisson's layout (a lock is a hash named after it,
//! one field `UUID:number` per owner holding its re-entry count, `PEXPIRE` = the lease; a
//! semaphore is a string count; ...), so a Java service on Redisson and a Rust service on
//! rlock can share one. Waiting happens on the server: a waiter is parked in a first-come,
//! first-served queue and the object is handed to it directly when it frees; the client never
//! polls or sleeps. Every object comes as a blocking handle and an async one, written once,
//! with guards that give the hold back when dropped.
//!
//! # Two protocols
//!
//! Most hosted Redis can't load modules. Where the module is absent, the same
//! [`Client::open`] speaks Redisson's own protocol instead: its Lua scripts (`EVALSHA`, `EVAL`
//! on `NOSCRIPT`), keys and pub/sub channels, so it shares locks with Java services on
//! Redisson. The client detects which per server at the first call that reaches it
//! (`COMMAND INFO RLOCK.ACQUIRE`), says which with [`Client::protocol`] and an `info` log
//! line, and can be forced with [`ClientBuilder::protocol`] ([`Protocol`]). A server with
//! neither the module nor scripting fails with [`Error::NoLockProtocol`].
//!
//! Every object works over Redisson's protocol as well: the locks ([`Client::lock`],
//! [`Client::fair_lock`], [`Client::fenced_lock`], [`Client::non_reentrant_lock`] and their
//! async twins, every method, guards, watchdog, [`Lock::is_lost`]), [`MultiLock`]/[`RedLock`]
//! of such locks, the [`GroupLock`], the [`ReadWriteLock`], the [`Semaphore`], the [`PermitExpirableSemaphore`]
//! and the [`CountDownLatch`], with Redisson's scripts, keys and channels. Waits there are
//! Redisson's (retry on a release's message or when the holder's lease ends; first come first
//! served only for the fair lock, by Redisson's queue), on one pub/sub connection per server
//! (in a cluster, one sharded connection) shared by every wait of the client, one subscription
//! per channel, a message waking only as many of the client's waiters as can win; a lost hold
//! is found by the
//! watchdog's next renewal instead of being pushed. What the sections below say of sessions,
//! server-side queues and pushed losses is the module's. `docs/operations.md`, "Two
//! protocols", has the feature × mode table.
//!
//! # Quick start
//!
//! A lock (Redisson's `RLock`):
//!
//! ```no_run
//! use std::time::Duration;
//!
//! let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
//! let lock = client.lock("orders:42");
//!
//! // Redisson style: lock / unlock (re-entrant, watchdog keeps it alive until unlock).
//! lock.lock()?;
//! lock.unlock()?;
//!
//! // Rust style: a guard that unlocks when dropped.
//! {
//!     let _guard = lock.guard()?;
//!     // ... critical section ...
//! }
//!
//! // Wait at most 1 s, hold at most 10 s.
//! if lock.try_lock_with(Duration::from_secs(1), Duration::from_secs(10))? {
//!     lock.unlock()?;
//! }
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! A read-write lock (`RReadWriteLock`): each side is a [`Lock`] with the whole lock API.
//!
//! ```no_run
//! # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
//! let prices = client.read_write_lock("prices");
//! {
//!     let _r = prices.read_lock().guard()?;   // shared with other readers
//! }
//! let _w = prices.write_lock().guard()?;      // alone; readers wait (fairly)
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! A semaphore (`RSemaphore`):
//!
//! ```no_run
//! # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
//! let db = client.semaphore("db-connections");
//! db.try_set_permits(4)?;
//! let _permit = db.guard()?;                 // one of 4, given back on drop
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! Leased permits with ids (`RPermitExpirableSemaphore`):
//!
//! ```no_run
//! # use std::time::Duration;
//! # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
//! let slots = client.permit_expirable_semaphore("render-slots");
//! slots.try_set_permits(8)?;
//! let id = slots.acquire(Duration::from_secs(60))?;   // back by itself after 60 s
//! slots.update_lease_time(id, Duration::from_secs(60))?;
//! slots.release(id)?;
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! A count-down latch (`RCountDownLatch`):
//!
//! ```no_run
//! # use std::time::Duration;
//! # let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
//! let ready = client.count_down_latch("workers-ready");
//! ready.try_set_count(3)?;
//! // ... each of three workers calls ready.count_down() ...
//! let all_ready = ready.wait_for(Duration::from_secs(30))?;
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! Several locks as one, all or none (`RedissonMultiLock`), here on two servers:
//!
//! ```no_run
//! # use std::time::Duration;
//! let (a, b) = (
//!     rlock_client::Client::open("redis://10.0.0.1:6379/")?,
//!     rlock_client::Client::open("redis://10.0.0.2:6379/")?,
//! );
//! let both = rlock_client::MultiLock::new([a.lock("account:1"), b.lock("account:2")])?;
//! let _g = both.try_guard_for(Duration::from_secs(2))?;
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! RedLock over independent servers (`RedissonRedLock`; read [`RedLock`]'s caveats first):
//!
//! ```no_run
//! # use std::time::Duration;
//! # let clients: Vec<rlock_client::Client> = vec![];
//! let red = rlock_client::RedLock::new(clients.iter().map(|c| c.lock("nightly-report")))?;
//! if let Some(g) = red.try_guard_with(Duration::from_millis(500), Duration::from_secs(30))? {
//!     // ... done before g.valid_until() ...
//! }
//! # Ok::<(), rlock_client::Error>(())
//! ```
//!
//! # Features
//!
//! As in redis-rs, what not every deployment needs is behind a feature, so a service that
//! wants a lock on one server compiles only that:
//!
//! | feature | default | what it adds | what it compiles in |
//! |---|---|---|---|
//! | `tls` | yes | `rediss://` URLs, [`ClientBuilder::tls_ca`], [`ClientBuilder::tls_client_cert`] | rustls with ring, redis-rs' `tls-rustls` |
//! | `metrics` | yes | [`ClientBuilder::metrics`], [`NameLabel`]: series through the [`metrics`](https://docs.rs/metrics) facade | the `metrics` crate (a facade: no recorder) |
//! | `cluster` | no | [`Client::open_cluster`], [`ClientBuilder::cluster`]: Redis Cluster, sharded pub/sub | redis-rs' `cluster-async` |
//! | `sentinel` | no | [`Client::open_sentinel`], [`ClientBuilder::sentinel`]: the primary Sentinel names, followed through failovers | redis-rs' `sentinel` |
//!
//! `tls` and `metrics` are on by default: a hosted Redis hands out `rediss://` URLs, and a
//! `rediss://` URL refused at the first try is a worse start than a longer first build; the
//! metrics facade is small and costs one branch per call until a service turns it on.
//! `cluster` and `sentinel` come with a constructor of their own, chosen with the deployment,
//! so whoever needs them knows to ask. Without `tls`, a `rediss://` URL fails
//! [`ClientBuilder::build`] with [`Error::Config`] naming the feature.
//!
//! The combinations CI builds, lints and unit-tests (`make features`):
//!
//! ```toml
//! rlock-client = { version = "0.1", default-features = false }  # one server, no TLS, no metrics
//! rlock-client = "0.1"                                           # default: tls, metrics
//! rlock-client = { version = "0.1", features = ["cluster", "sentinel"] }  # everything
//! ```
//!
//! Each feature alone on top of the smallest set builds too (`cargo check`), but CI does not
//! run it: every combination costs CI a build of redis-rs and the client (about a minute each),
//! and these three cover every `cfg` branch both ways.
//!
//! A clean release build of the client alone (`cargo build --release -p rlock-client`, empty
//! target directory), measured on the 2-core development VM: 4 min 36 s of CPU time (user +
//! sys) for 119 compilation units with the default features, 3 min 30 s for 98 without
//! (`--no-default-features`); the machine was shared with other builds (load 9–12), so the
//! wall clock (23.5 and 22 min) says little.
//!
//! # Map from Redisson
//!
//! Async forms have the same method names (`Async*` types, from the `async_*` factories).
//!
//! | Redisson | rlock (sync) | rlock (async) |
//! |---|---|---|
//! | `Redisson.create(config)` | [`Client::open`], [`Client::builder`] | same |
//! | `useClusterServers()` | [`Client::open_cluster`], [`ClientBuilder::cluster`] | same |
//! | `useSentinelServers()`: `setMasterName`, `addSentinelAddress`, `setPassword`, `setDatabase` | [`Client::open_sentinel`], [`ClientBuilder::sentinel`], [`ClientBuilder::primary_auth`], [`ClientBuilder::primary_database`] | same |
//! | `rediss://`, `setSslTruststore`, `setSslKeystore` | `rediss://` URLs, [`ClientBuilder::tls_ca`], [`ClientBuilder::tls_client_cert`] | same |
//! | **`RLock`**: `getLock` / `getFairLock` | [`Client::lock`] / [`Client::fair_lock`] | [`Client::async_lock`] |
//! | `getFencedLock` | [`Client::fenced_lock`] | [`Client::async_fenced_lock`] |
//! | try/finally around `lock`/`unlock` | [`Lock::guard`] ([`LockGuard`]) | [`AsyncLock::guard`] ([`AsyncLockGuard`]) |
//! | `lock()`, `lock(lease)` | [`Lock::lock`], [`Lock::lock_with_lease`] | [`AsyncLock::lock`], ... |
//! | `tryLock()`, `tryLock(wait)`, `tryLock(wait, lease)` | [`Lock::try_lock`], [`Lock::try_lock_for`], [`Lock::try_lock_with`] | same names |
//! | `unlock()` (`IllegalMonitorStateException`) | [`Lock::unlock`] ([`Error::NotOwner`]) | [`AsyncLock::unlock`] |
//! | `forceUnlock`, `isLocked`, `isHeldByCurrentThread`, `getHoldCount`, `remainTimeToLive` | [`Lock::force_unlock`], [`Lock::is_locked`], [`Lock::is_held_by_current_thread`], [`Lock::hold_count`], [`Lock::remain_time_to_live`] | [`AsyncLock::is_held_by_current_task`], ... |
//! | `lockAsync(threadId)` | [`Lock::with_owner`] | [`AsyncLock::with_owner`] |
//! | **`getSpinLock(name)`**, `getSpinLock(name, backOff)` (`RedissonSpinLock`: no pub/sub, retries with a back-off) | [`Client::spin_lock`], [`Client::spin_lock_with_backoff`] ([`SpinLock`], every [`Lock`] method) | [`Client::async_spin_lock`] ([`AsyncSpinLock`]) |
//! | `LockOptions.ExponentialBackOff` (`initialDelay`, `maxDelay`, `multiplier`), `ConstantBackOff` (`delay`) | [`BackOff::exponential`], [`BackOff::constant`], [`BackOff::default`] | same |
//! | `lockInterruptibly()`, `lockInterruptibly(lease)` + `Thread.interrupt()` (`InterruptedException`) | [`CancelToken::run`] around [`Lock::lock`] (or any blocking wait) + [`CancelToken::cancel`] ([`Error::Cancelled`]) | drop the future (cancel-safe) |
//! | **`getNonReentrantLock`**, `getNonReentrantFairLock` (`IllegalMonitorStateException` on re-entry) | [`Client::non_reentrant_lock`] ([`Error::NotReentrant`]) | [`Client::async_non_reentrant_lock`] |
//! | `lockAndGetToken`, `tryLockAndGetToken`, `getToken` | [`FencedLock::lock_and_get_token`], [`FencedLock::try_lock_and_get_token`], [`FencedLock::token`] | same names |
//! | **`RReadWriteLock`**: `getReadWriteLock` | [`Client::read_write_lock`] | [`Client::async_read_write_lock`] |
//! | `readLock()`, `writeLock()` (each an `RLock`) | [`ReadWriteLock::read_lock`], [`ReadWriteLock::write_lock`] (each a [`Lock`]: every method above) | [`AsyncReadWriteLock::read_lock`], ... ([`AsyncLock`]) |
//! | read→write upgrade (hangs forever) | [`Error::Deadlock`] at once | same |
//! | **`RSemaphore`**: `getSemaphore` | [`Client::semaphore`] | [`Client::async_semaphore`] |
//! | `trySetPermits`, `addPermits`, `availablePermits`, `drainPermits` | [`Semaphore::try_set_permits`], [`Semaphore::add_permits`], [`Semaphore::available_permits`], [`Semaphore::drain_permits`] | same names |
//! | `acquire()`, `acquire(n)` | [`Semaphore::acquire`], [`Semaphore::acquire_many`] | same names |
//! | `tryAcquire()`, `tryAcquire(n)`, `tryAcquire(wait)`, `tryAcquire(n, wait)` | [`Semaphore::try_acquire`], [`Semaphore::try_acquire_many`], [`Semaphore::try_acquire_for`], [`Semaphore::try_acquire_many_for`] | same names |
//! | `release()`, `release(n)` | [`Semaphore::release`], [`Semaphore::release_many`] | same names |
//! | `trySetPermits(n, ttl)`, `releaseIfExists(n)` | [`Semaphore::try_set_permits_with_ttl`], [`Semaphore::release_if_exists`] | same names |
//! | try/finally around `acquire`/`release` | [`Semaphore::guard`], [`Semaphore::guard_many`], [`Semaphore::try_guard_for`], ... | same names |
//! | **`RPermitExpirableSemaphore`**: `getPermitExpirableSemaphore` | [`Client::permit_expirable_semaphore`] | [`Client::async_permit_expirable_semaphore`] |
//! | `acquire(lease)`, `acquire(n, lease)` (ids) | [`PermitExpirableSemaphore::acquire`], [`PermitExpirableSemaphore::acquire_many`] ([`PermitId`]) | same names |
//! | `tryAcquire(lease)`, `tryAcquire(wait, lease)`, `tryAcquire(n, lease)`, `tryAcquire(n, wait, lease)` | [`PermitExpirableSemaphore::try_acquire`], [`PermitExpirableSemaphore::try_acquire_for`], [`PermitExpirableSemaphore::try_acquire_many`], [`PermitExpirableSemaphore::try_acquire_many_for`] | same names |
//! | `release(id)`, `release(ids)` (`IllegalArgumentException`) | [`PermitExpirableSemaphore::release`], [`PermitExpirableSemaphore::release_many`] ([`Error::PermitNotLeased`]) | same names |
//! | `tryRelease(id)`, `tryRelease(ids)` | [`PermitExpirableSemaphore::try_release`], [`PermitExpirableSemaphore::try_release_many`] | same names |
//! | `getPermits()`, `setPermits(n)`, `getLeaseTime(id)` (`-1`: no end) | [`PermitExpirableSemaphore::permits`], [`PermitExpirableSemaphore::set_permits`], [`PermitExpirableSemaphore::lease_time`] (`None`: no end) | same names |
//! | `acquire()`, `tryAcquire()`, `tryAcquire(wait, -1, unit)`: a permit without a lease | [`PermitExpirableSemaphore::acquire_without_lease`], [`PermitExpirableSemaphore::try_acquire_without_lease`], [`PermitExpirableSemaphore::try_acquire_without_lease_for`] (Redisson's score in both protocols; with the module `RSEM.ACQUIRE ... NOLEASE`) | same names |
//! | `updateLeaseTime`, `acquiredPermits`, `availablePermits`, `trySetPermits`, `addPermits` | [`PermitExpirableSemaphore::update_lease_time`], [`PermitExpirableSemaphore::acquired_permits`], [`PermitExpirableSemaphore::available_permits`], ... | same names |
//! | a permit in try/finally | [`PermitExpirableSemaphore::guard`] ([`Guard::permit_id`]), [`PermitExpirableSemaphore::guard_many`] | same names |
//! | (none: a lease is a guess, redisson#4462) | [`PermitExpirableSemaphore::with_watchdog`]: permits renewed by the watchdog until released | [`AsyncPermitExpirableSemaphore::with_watchdog`] |
//! | **`RCountDownLatch`**: `getCountDownLatch` | [`Client::count_down_latch`] | [`Client::async_count_down_latch`] |
//! | `trySetCount`, `countDown`, `getCount`, `delete` | [`CountDownLatch::try_set_count`], [`CountDownLatch::count_down`], [`CountDownLatch::get_count`], [`CountDownLatch::delete`] | same names |
//! | `await()`, `await(timeout)` | [`CountDownLatch::wait`], [`CountDownLatch::wait_for`] (`await` is a Rust keyword) | same names |
//! | `countDown()` then `await()` (Redisson has no `countDownAndAwait`) | [`CountDownLatch::count_down_and_await`], [`CountDownLatch::count_down_and_await_for`] | same names |
//! | **`RedissonMultiLock`**: `getMultiLock(locks...)` | [`MultiLock::new`], [`Client::multi_lock`] | [`AsyncMultiLock::new`], [`Client::async_multi_lock`] |
//! | `lock`, `tryLock`, `unlock`, `isHeldByCurrentThread` | [`MultiLock::lock`], [`MultiLock::try_lock_for`], [`MultiLock::unlock`], [`MultiLock::is_held`], guards | same names |
//! | `getMultiLock(group, values)` (`RedissonFasterMultiLock`: one hash `group`, a field per value) | [`Client::group_lock`] ([`GroupLock`]: Redisson's default codec, Kryo 5, for string values), [`Client::group_lock_with_codec`] ([`FieldCodec::Utf8`] for `StringCodec`, [`FieldCodec::Raw`] for values encoded already) | [`Client::async_group_lock`] ([`AsyncGroupLock`]) |
//! | **`RedissonRedLock`**: `getRedLock(locks...)` | [`RedLock::new`] (methods of [`MultiLock`]) | [`AsyncRedLock::new`] |
//! | waiting through pub/sub (a subscription per lock, `subscriptionConnectionPoolSize`, `subscriptionsPerConnection`) | every wait through the client's session: one listener connection per server, no pool to size (see "Waiting: sessions") | same |
//! | no notice when a hold is lost (found at the next renewal at best) | [`Guard::is_lost`], [`Lock::is_lost`]: the server pushes the loss through the session within milliseconds | [`Guard::lost`] |
//! | `lockWatchdogTimeout` | [`ClientBuilder::watchdog_timeout`] | same |
//! | a listener told when a watchdog renewal fails | [`ClientBuilder::watchdog_listener`] ([`WatchdogEvent::RenewalFailed`], also `Lost`, `MaxHoldReached`) | same |
//! | (none: the watchdog renews for as long as the process lives; python-redis-lock#114) | [`ClientBuilder::watchdog_max_hold`]: a longest hold, after which the watchdog stops and the holder is told ([`Guard::is_lost`], [`Guard::lost`]) | same |
//! | a lock of a thread that ended without `unlock` is renewed for the life of the process (redisson#7272, #2590) | released by the watchdog within one renewal period (see "Orphaned holds") | a task's: reported and no longer renewed |
//! | (none) | [`ClientBuilder::session_grace`]: how long a frozen process's waits outlive it | same |
//!
//! # Owners: threads in sync code, tasks in async code
//!
//! The sync API acts as `UUID:thread-number` of the calling thread, as Redisson does. The async
//! API acts as the calling tokio task, or an explicit [`Owner`]; thread ids cannot work there
//! because one worker thread runs many tasks (they would re-enter each other's locks instead of
//! excluding each other) and a task moves between threads at any `.await` (its unlock would run
//! as another owner). See [`Owner`].
//!
//! # Watchdog
//!
//! A lock taken without a lease gets the watchdog timeout as lease (default 30 s). One
//! background task per client renews every such hold every `timeout / 3`, of every kind (locks
//! with `RLOCK.RENEW`, read and write holds of read-write locks with `RRWLOCK.RENEW`, the locks
//! of a [`MultiLock`] or [`RedLock`] by their own clients), all in one pipelined round trip per
//! server on a connection of its own. Renewal stops the moment the hold is fully released. If
//! the process dies, its locks free after the watchdog timeout.
//!
//! A lost hold is reported within milliseconds, whether taken with the watchdog or with a lease:
//! every acquire names the client's session, and the server tells the session's listener as
//! soon as a hold ends by anything but its owner's release (force release, deletion, expiry,
//! eviction, `FLUSHALL`, a Redisson force unlock). The hold is then marked lost
//! ([`Guard::is_lost`], [`Guard::lost`], [`Lock::is_lost`]), no longer renewed, and a `tracing`
//! warning is logged. A renewal that finds the hold gone does the same (the backstop while a
//! session is being opened again). A lease hold also counts as lost once its lease has run out
//! (see "Lost holds" on [`Guard`]).
//!
//! A longest hold ([`ClientBuilder::watchdog_max_hold`], none by default) bounds how long the
//! watchdog keeps one hold: past it the hold is renewed no more and counts as lost at once
//! (its holder is told as for any lost hold), and it frees when its last lease ends. A
//! listener of yours ([`ClientBuilder::watchdog_listener`]) is told of every renewal that got
//! no answer ([`WatchdogEvent::RenewalFailed`], retried next period), every hold found or
//! reported gone ([`WatchdogEvent::Lost`]) and every longest hold reached.
//!
//! Semaphore permits and latches have no owner. A leased permit of a
//! [`PermitExpirableSemaphore`] always has a lease; nothing renews it unless you call
//! [`update_lease_time`](PermitExpirableSemaphore::update_lease_time), or lease it through a
//! handle made with [`with_watchdog`](PermitExpirableSemaphore::with_watchdog): the watchdog
//! then renews it to its lease in the same round trip as the locks (an `RSEM.RENEW`, Redisson's
//! `updateLeaseTime`, per permit), until it is released. Its guard counts it lost when the lease
//! has ended, or when a renewal finds it gone.
//!
//! # Orphaned holds
//!
//! A hold taken in watchdog mode without a guard (`lock()`, `try_lock_for(..)`) is renewed
//! until its owner unlocks it. If that owner can no longer unlock it, the hold is an orphan,
//! and the watchdog acts at its next round, within one renewal period:
//!
//! - **A thread that ended** (sync API, the owner is `UUID:thread-number`): its holds are
//!   **released**, every re-entry of every lock and read-write lock side, in the watchdog's
//!   round trip, and a `tracing` warning names each. This is safe: thread numbers are never
//!   reused, so no code can act as that owner any more. A waiter gets the lock at once.
//! - **A task whose handles are all gone** (async API, the owner is the task; also a permit
//!   of a watched semaphore): when no clone of the handle the hold was taken through is left,
//!   the hold is **reported** with a `tracing` warning naming the lock, marked lost
//!   ([`AsyncLock::is_lost`]) and **no longer renewed**; it frees when its lease ends (at most
//!   the watchdog timeout later). It is not released: tokio gives no way to see that a task
//!   ended, and a task that is still running could unlock it later through a new handle. A
//!   task aborted with its handle (`tokio::spawn(async move { lock.lock().await; .. })`) is
//!   the case this catches; a task whose handle lives on elsewhere (shared by other tasks) is
//!   not an orphan by this rule. Guards need none of this: a guard gives its hold back when it
//!   is dropped, also when its task is aborted. In async code, hold the lock with a guard, or
//!   keep a handle while the task holds it.
//! - **An explicit owner** ([`Owner`] given to `with_owner`, including a thread's own owner
//!   handed to another thread with `lock.clone().with_owner(lock.owner())`) can release from
//!   anywhere: its holds are never orphans; they are renewed until released, as in Redisson.
//!   Hand a lock that must outlive the thread that took it on this way.
//!
//! # Durations
//!
//! The server counts in milliseconds: every duration is sent rounded up to a whole millisecond,
//! so a lease of 500 µs is a lease of 1 ms. A zero lease is refused
//! ([`Error::InvalidArgument`]); a zero wait makes one attempt.
//!
//! # Waiting: sessions
//!
//! Every wait of the process goes through one session per server (per node in a cluster),
//! however many tasks or threads wait on however many locks:
//!
//! - **A fixed few connections.** Per server: the multiplexed connection of async calls, the
//!   session's listener (`rlock-session` in `CLIENT LIST`), the watchdog's, and a blocking
//!   connection per sync thread for the length of a call (and at most the first 50 ms of its
//!   wait, see below). A wait holds none of them after that: it is a request queued on the
//!   server (a few hundred bytes there, not a blocked client).
//! - **A free lock is one round trip.** An acquire that may wait names the session with a
//!   request id and its time limit (`SESSION s QUEUE <id> <timeout_ms>`); the server grants it
//!   at once when it can, with the usual reply. Otherwise it queues it in the lock's FIFO queue
//!   and the outcome (granted, timed out, failed) later reaches the listener, which hands it to
//!   the waiting task or thread. One lock's waiters never delay another lock's.
//! - **A short wait of a sync thread is a hand-off like `BLOCK`'s.** A sync call's blocking
//!   connection is the thread's own for the call, so its acquire also says `BLOCK 50`
//!   (single server): for its first 50 ms the request waits in the session *and* its
//!   connection stays parked, and a grant in that time is the acquire's reply, with one command
//!   and one wake-up, as for a raw `BLOCK` client. After 50 ms the server answers `QUEUED`, the
//!   connection goes back to the pool and the wait goes on through the listener. (Measured in
//!   `make bench`: 8 threads on one lock went from 0.68× to 0.94× raw `BLOCK` clients.) A grant
//!   replied on that connection is delivered as a `BLOCK` waiter's: a process frozen in that
//!   instant keeps it until its lease ends. Async waits and cluster clients never park: their
//!   connections carry everyone's commands.
//! - **On time.** The server ends a wait at its deadline; `try_lock_for(d)` returns within `d`
//!   plus a few milliseconds whatever else waits (if the outcome is late, the client withdraws
//!   the request itself).
//! - **Cancellation.** Dropping an async acquire withdraws its request (`RSESSION.CANCEL`)
//!   before the drop returns; a grant that raced the withdrawal is released before the drop
//!   returns too. A blocking wait that runs under a [`CancelToken`] ends the same way when
//!   another thread cancels the token, with [`Error::Cancelled`] (a wait cancelled in its
//!   first 50 ms, while its connection is parked, ends when that part does; a grant within it
//!   is the call's, which then returns `Ok` and holds it).
//! - **Nothing lost, nothing twice.** The listener acknowledges outcomes only after handing them
//!   over; a listener whose connection broke reconnects, resumes the session and reads what it
//!   missed, each outcome once.
//! - **A frozen process loses its waits, never holds a lock it does not know about.** The
//!   session lives while its listener reads, and for the grace period after
//!   ([`ClientBuilder::session_grace`], default 10 s, bounded by the server's
//!   `rlock.session-max-grace-ms`, 60 s by default). A process frozen for longer (stopped,
//!   swapped out, paused in a debugger) loses it: the server withdraws its queued waits and
//!   hands the grants its listener never read to the next waiters; when the process resumes,
//!   those waits fail with [`Error::SessionExpired`], never reporting a hold. (A grant the
//!   server had already sent it is its own, as a `BLOCK` waiter's reply: it is held until its
//!   lease ends, and given back if its wait failed.) A session the
//!   server lost in a restart or failover is opened again and its waits queue again, after the
//!   client checked whether each was granted before.
//! - **Lost holds are pushed** (see "Watchdog").
//! - **Many async tasks on one hot lock.** A hand-off through the session wakes the listener
//!   thread, then the waiting task, whose release goes over a connection driven on the task's
//!   own runtime: 5,000 tasks taking one lock in turn hand it on as fast as raw `BLOCK` waiters
//!   with a connection each (see [`performance`]).
//!
//! `BLOCK` waits (a connection parked per waiter, a blocked client on the server) remain in
//! the module for redis-cli and simple clients; this client's waits are all session requests
//! (a sync wait's first 50 ms park its connection, but its request is in the session).
//!
//! # Connections and cancellation
//!
//! A sync call runs on the calling thread, over a blocking connection of its own taken from a
//! pool (and put back after the call; a wait holds none, see above). Async calls are awaited
//! on the caller's executor and share one multiplexed connection. Nothing is spawned per call.
//! Dropping an async acquire future withdraws its request from the server's queue before the
//! drop returns, and if the server granted the lock at the same moment, releases it before the
//! drop returns too. The same holds for an attempt that does not wait (`try_lock`,
//! `try_acquire`) dropped while its command is on the way: the drop reads the reply and gives
//! back what it granted. After a server restart the client reconnects; a wait broken by the
//! restart queues again.
//!
//! A call against a server that is down fails after at most the connect timeout (default 1 s,
//! [`ClientBuilder::connect_timeout`]) with [`Error::Connection`], which names the address; see
//! "When Redis can't be reached" on [`ClientBuilder`] for the whole retry policy.
//!
//! The client's watchdog and shared connections run on a small runtime of its own, and each
//! session listener on a thread of its own, so the sync API needs no runtime and the async API
//! works from any executor. An async request polled by a multi-thread tokio runtime goes over a
//! connection whose driver is a task of that runtime (one per runtime that calls, opened on its
//! first request, gone with the client or the runtime): its commands and replies wake no thread
//! of the client's, as with a redis-rs connection opened there. Requests from a current-thread
//! runtime or another executor use the client's own connection. Don't call the blocking API
//! from async code: it blocks the calling worker thread.
//!
//! An async service on a multi-thread tokio runtime can also give the client that runtime
//! ([`ClientBuilder::runtime`]): the watchdog and the shared connections then run there too,
//! and no thread of the client's own is started. That runtime must then outlive the client.
//!
//! ```no_run
//! #[tokio::main]
//! async fn main() -> rlock_client::Result<()> {
//!     let client = rlock_client::Client::builder()
//!         .url("redis://127.0.0.1:6390/")
//!         .runtime(tokio::runtime::Handle::current())
//!         .build()?;
//!     let guard = client.async_lock("orders:42").guard().await?;
//!     // ... critical section ...
//!     guard.unlock().await
//! }
//! ```
//!
//! The client is built on the [`redis`] crate (re-exported here, so the `redis` types inside
//! [`Error`] are always the ones this crate was built with).
//!
//! # Redis Cluster
//!
//! [`Client::open_cluster`] (or [`ClientBuilder::cluster`]) takes the URLs of some cluster
//! nodes. Each command goes to the master of its lock's hash slot; a wait is queued in the
//! client's session on that node (a listener per node that has had an acquire). `MOVED`/`ASK`
//! redirects, `TRYAGAIN`, `CLUSTERDOWN`, a wait ended by a slot migration (`TRYAGAIN`) or by
//! its node turning into a replica
//! (`UNBLOCKED`) are all retried transparently: the caller queues again on the node that now
//! serves the lock. Use hash tags (`{orders}:42`) to place related locks in one slot; a lock's
//! fencing-token key and channel always share its slot. A single-server client also queues a
//! wait again after `UNBLOCKED`/`READONLY`/`LOADING` (a failover behind a fixed address).
//!
//! [`Client::open_sentinel`] (or [`ClientBuilder::sentinel`]) finds the primary through Redis
//! Sentinel and follows a failover: its waits queue again on the new primary with the rest of
//! their time, and a hold the new primary does not have is reported lost at once.
//!
//! Failover cannot make a lock stronger than Redis replication: see replica sync
//! ([`ClientBuilder::replica_sync`]) and fencing tokens ([`FencedLock`]), and `docs/operations.md`.

//! # Architecture
//!
//! The crate is layered; each layer uses only the ones below it, and [`Client`] is the factory
//! on top that nothing imports:
//!
//! - **transport** (`transport/`): the one place that owns connections (redis-rs'
//!   `ConnectionManager`, `cluster_async`, and pools of connections a caller uses alone), routing
//!   by key, redirects, and the one retry policy.
//! - **holds and watchdog** (`holds.rs`, `watchdog.rs`): what this client holds, of every kind
//!   of object (kind, key, holder, renew command), renewed in one round trip per node; a lost
//!   hold is an event the registry receives.
//! - **sessions** (`session/`): per server the session every wait goes through, its listener
//!   thread, and the wire form of `RSESSION.*`; lost holds reach the registry from here.
//! - **the wait path** (`wait.rs`): how every object's acquire waits on the server through the
//!   session, withdraws, and queues again after a redirect, a migration, a failover or a broken
//!   connection. Objects implement its `Attempt` trait.
//! - **operations** (`ops/`): per object, requests built and replies read, as plain async
//!   functions shared by both APIs.
//! - **handles** (`api/`): per object one handle written once and given as a blocking type and
//!   an async type ([`Lock`] / [`AsyncLock`]), and one [`Guard`] for holds of any object.
//!
//! Performance: see [`performance`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod api;
mod cancel;
mod client;
mod config;
mod context;
mod error;
mod events;
#[cfg(feature = "sentinel")]
mod failover;
mod field;
mod holds;
mod metrics;
mod ops;
mod owner;
pub mod performance;
mod permit;
mod protocol;
mod runtime;
mod session;
mod transport;
mod wait;
mod watchdog;

/// The former name of [`CallStyle`] (deprecated: a read-write lock's mode is read or write).
#[allow(deprecated)]
pub use api::Mode;
pub use api::{
    Async, AsyncCountDownLatch, AsyncFencedLock, AsyncGroupLock, AsyncLock, AsyncLockGuard,
    AsyncMultiLock, AsyncPermitExpirableSemaphore, AsyncReadWriteLock, AsyncRedLock,
    AsyncSemaphore, AsyncSpinLock, BackOff, Blocking, CallStyle, CountDownLatch, Delays,
    FencedLock, GroupLock, Guard, Lock, LockGuard, MultiLock, PermitExpirableSemaphore,
    ReadWriteLock, RedLock, Semaphore, SpinLock, Ttl,
};
pub use cancel::CancelToken;
pub use client::Client;
pub use config::{ClientBuilder, Config, Protocol};
pub use error::{Error, Result};
pub use events::{HoldInfo, WatchdogEvent};
pub use field::FieldCodec;
#[cfg(feature = "metrics")]
pub use metrics::NameLabel;
pub use owner::Owner;
pub use permit::PermitId;
/// The `redis` crate this client is built on (its errors appear in [`Error`]).
pub use redis;

//! Owner identity: who holds a lock, in Redisson's `UUID:number` format.
//!
//! * Sync API: `UUID:<thread number>`; every OS thread gets a number once, from a process-wide
//!   counter (Redisson uses the Java thread id).
//! * Async API: `UUID:<1000000000000 + tokio task id>` for the task that calls, or an explicit
//!   [`Owner`] from [`Client::new_owner`](crate::Client::new_owner) that any task may use.
//!
//! Why not thread ids in async code: a multi-threaded tokio runtime runs many tasks on one worker
//! thread and moves a task to another worker at any `.await`. With a thread-derived owner, two
//! unrelated tasks on the same worker would look like one owner, so the second would *re-enter*
//! the first one's lock instead of waiting for it (no mutual exclusion at all), and a task that
//! resumed on another worker would get `NotOwner` from its own unlock.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::holds::Witness;

/// Numbers for threads and explicit owners share one counter, so they never collide.
static NEXT_NUMBER: AtomicU64 = AtomicU64::new(1);

/// Task owners are numbered from here on (tokio task ids are small, non-zero integers).
pub(crate) const TASK_BASE: u64 = 1_000_000_000_000;

thread_local! {
    static THREAD_NUMBER: u64 = NEXT_NUMBER.fetch_add(1, Ordering::Relaxed);
    /// The calling thread's owner for the client it last acted for (the sync API asks for it on
    /// every call; formatting it each time would cost two allocations per call).
    static THREAD_OWNER: std::cell::RefCell<Option<Owner>> = const { std::cell::RefCell::new(None) };
    /// The owner of the task this thread last polled a call of, for the client it acted for:
    /// the async API asks for it on every call (a task's calls mostly run on one worker one
    /// after another), and formatting it (the task id written out and read back, then the
    /// owner) was about 1,200 instructions per `lock()` + `unlock()` pair (callgrind).
    static TASK_OWNER: std::cell::RefCell<Option<(tokio::task::Id, Owner)>> = const { std::cell::RefCell::new(None) };
}

/// Whether `o` is an owner of the client `client_id` (`client_id:number`).
fn of_client(o: &Owner, client_id: &str) -> bool {
    o.0.starts_with(client_id) && o.0.as_bytes().get(client_id.len()) == Some(&b':')
}

thread_local! {
    /// Dropped when the thread ends: the witness of its holds ([`Witness::Thread`]).
    static ALIVE: Arc<()> = Arc::new(());
}

/// A weak reference that dies when the calling thread ends (already dead while the thread's
/// locals are torn down).
pub(crate) fn thread_alive() -> Weak<()> {
    ALIVE.try_with(Arc::downgrade).unwrap_or_default()
}

/// `UUID:thread-number` of the calling thread for the client `client_id`.
fn thread_owner(client_id: &str) -> Owner {
    THREAD_OWNER
        .try_with(|cell| {
            let mut cached = cell.borrow_mut();
            match &*cached {
                Some(o) if of_client(o, client_id) => o.clone(),
                _ => {
                    let o = Owner::numbered(client_id, thread_number());
                    *cached = Some(o.clone());
                    o
                }
            }
        })
        // While the thread's locals are torn down (a guard dropped by another local's destructor).
        .unwrap_or_else(|_| Owner::numbered(client_id, thread_number()))
}

/// `UUID:number` of the calling task for the client `client_id`; outside a task, of the
/// calling thread (inside `block_on` the future is pinned to that thread, so the thread is the
/// right identity).
fn task_owner(client_id: &str) -> Owner {
    let Some(id) = tokio::task::try_id() else {
        return thread_owner(client_id);
    };
    TASK_OWNER
        .try_with(|cell| {
            let mut cached = cell.borrow_mut();
            match &*cached {
                Some((task, o)) if *task == id && of_client(o, client_id) => o.clone(),
                _ => {
                    let o = Owner::numbered(client_id, number_of_task(id));
                    *cached = Some((id, o.clone()));
                    o
                }
            }
        })
        // While the thread's locals are torn down.
        .unwrap_or_else(|_| Owner::numbered(client_id, number_of_task(id)))
}

/// A task's owner number.
fn number_of_task(id: tokio::task::Id) -> u64 {
    TASK_BASE + id.to_string().parse::<u64>().unwrap_or(0)
}

/// The number of the calling thread (stable for the thread's life, unique in the process).
pub(crate) fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// The number of the calling tokio task, or of the calling thread outside a task (inside
/// `block_on` the future is pinned to that thread, so the thread is the right identity).
#[cfg(test)]
pub(crate) fn task_number() -> u64 {
    match tokio::task::try_id() {
        Some(id) => number_of_task(id),
        None => thread_number(),
    }
}

pub(crate) fn next_number() -> u64 {
    NEXT_NUMBER.fetch_add(1, Ordering::Relaxed)
}

/// An explicit lock owner: a logical holder that can move between tasks and threads.
///
/// Use it in async code when the task that locks is not the task that unlocks, or when several
/// tasks act as one holder (Redisson's `lockAsync(threadId)`). Cloning gives the same owner.
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let owner = client.new_owner();
/// let lock = client.async_lock("jobs").with_owner(owner.clone());
/// lock.lock().await?;
/// let lock2 = lock.clone();
/// // Another task, same owner: it may release the lock.
/// tokio::spawn(async move { lock2.unlock().await }).await.unwrap()?;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// An owner with exactly this identity string (the hash field written in Redis). Useful to
    /// act on behalf of a known holder, e.g. a Redisson client's `UUID:threadId`.
    ///
    /// ```
    /// let java = rlock_client::Owner::from_raw("6e3d30b7-83b1-433a-9335-5e8b9916d3ac:731");
    /// assert_eq!(java.to_string(), "6e3d30b7-83b1-433a-9335-5e8b9916d3ac:731");
    /// ```
    pub fn from_raw(id: impl Into<String>) -> Owner {
        Owner(Arc::from(id.into()))
    }

    pub(crate) fn numbered(client_id: &str, number: u64) -> Owner {
        Owner(Arc::from(format!("{client_id}:{number}")))
    }

    /// The identity string, shared.
    pub(crate) fn shared(&self) -> Arc<str> {
        self.0.clone()
    }

    /// The identity string, `UUID:number`.
    ///
    /// ```
    /// assert_eq!(rlock_client::Owner::from_raw("u:1").as_str(), "u:1");
    /// ```
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.0)
    }
}

/// How a lock handle finds the owner of each call.
#[derive(Clone, Debug)]
pub(crate) enum OwnerPolicy {
    /// `UUID:thread` of the calling thread (sync API).
    Thread,
    /// `UUID:task` of the calling tokio task (async API).
    Task,
    /// Always this owner.
    Fixed(Owner),
}

impl OwnerPolicy {
    /// What shows that an acquire made now, through a handle anchored by `anchor`, still has
    /// someone to release it: the calling thread, the handle (a task: tokio can't tell when a
    /// task ends), or nothing needed (an explicit owner).
    pub(crate) fn witness(&self, anchor: &Arc<()>) -> Witness {
        match self {
            OwnerPolicy::Thread => Witness::Thread(thread_alive()),
            // Outside a task the owner is the thread (see `task_number`).
            OwnerPolicy::Task if tokio::task::try_id().is_none() => Witness::Thread(thread_alive()),
            OwnerPolicy::Task => Witness::Handle(Arc::downgrade(anchor)),
            OwnerPolicy::Fixed(_) => Witness::Explicit,
        }
    }

    pub(crate) fn resolve(&self, client_id: &str) -> Owner {
        match self {
            OwnerPolicy::Thread => thread_owner(client_id),
            OwnerPolicy::Task => task_owner(client_id),
            OwnerPolicy::Fixed(o) => o.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_stable_numbers() {
        let here = thread_number();
        assert_eq!(here, thread_number());
        let there = std::thread::spawn(thread_number).join().unwrap();
        assert_ne!(here, there);
        assert!(here < TASK_BASE && there < TASK_BASE);
    }

    #[test]
    fn owner_format_is_redisson() {
        let o = OwnerPolicy::Thread.resolve("6e3d30b7-83b1-433a-9335-5e8b9916d3ac");
        let (uuid, n) = o.as_str().rsplit_once(':').unwrap();
        assert_eq!(uuid, "6e3d30b7-83b1-433a-9335-5e8b9916d3ac");
        assert_eq!(n.parse::<u64>().unwrap(), thread_number());
        let other = OwnerPolicy::Thread.resolve("0e3d30b7-83b1-433a-9335-5e8b9916d3ac");
        assert!(other.as_str().starts_with("0e3d30b7-"), "cached per client");
        assert_eq!(
            OwnerPolicy::Thread.resolve("6e3d30b7-83b1-433a-9335-5e8b9916d3ac"),
            o
        );
        let fixed = OwnerPolicy::Fixed(Owner::from_raw("x:1")).resolve("ignored");
        assert_eq!(fixed.as_str(), "x:1");
    }

    #[test]
    fn a_thread_witness_dies_with_its_thread() {
        let here = thread_alive();
        let there = std::thread::spawn(thread_alive).join().unwrap();
        assert!(here.strong_count() > 0);
        assert_eq!(there.strong_count(), 0, "the thread ended");
    }

    #[test]
    fn tasks_are_distinct_owners() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let a = rt.block_on(async { tokio::spawn(async { task_number() }).await.unwrap() });
        let b = rt.block_on(async { tokio::spawn(async { task_number() }).await.unwrap() });
        assert!(a > TASK_BASE && b > TASK_BASE);
        // Outside a task (block_on's own future) the thread identifies the owner.
        assert_eq!(rt.block_on(async { task_number() }), thread_number());
        // Two tasks on the same single worker thread are still two owners.
        let (x, y) = rt.block_on(async {
            let x = tokio::spawn(async { task_number() });
            let y = tokio::spawn(async { task_number() });
            (x.await.unwrap(), y.await.unwrap())
        });
        assert_ne!(x, y);
    }

    #[test]
    fn task_owners_are_cached_per_task_and_client() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        async fn owners(client: &'static str) -> Owner {
            let o = OwnerPolicy::Task.resolve(client);
            let again = OwnerPolicy::Task.resolve(client);
            assert_eq!(o, again, "one task, one owner");
            assert_eq!(o.as_str(), format!("{client}:{}", task_number()));
            o
        }
        let (a, b, c) = rt.block_on(async {
            let a = tokio::spawn(owners("u1")).await.unwrap();
            let b = tokio::spawn(owners("u1")).await.unwrap();
            let c = tokio::spawn(async { (owners("u1").await, owners("u2").await) })
                .await
                .unwrap();
            (a, b, c)
        });
        assert_ne!(a, b, "another task on the same worker: another owner");
        assert!(c.0.as_str().starts_with("u1:") && c.1.as_str().starts_with("u2:"));
        assert_eq!(
            c.0.as_str().strip_prefix("u1:"),
            c.1.as_str().strip_prefix("u2:")
        );
        // Outside a task: the thread's owner.
        let outside = rt.block_on(async { OwnerPolicy::Task.resolve("u1") });
        assert_eq!(outside, Owner::numbered("u1", thread_number()));
    }
}

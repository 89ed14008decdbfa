//! The rlock client's async API against a real redis-server with the module: per-task owners,
//! 16 tasks x 500 non-atomic increments, cancellation safety of a pending acquire, async
//! guards, explicit owners moving between tasks.

mod client_support;

use std::time::Duration;

use client_support::*;
use rlock_client::Error;
use rlock_tests::{redis, wait_until, Server};

#[test]
fn tasks_on_one_thread_are_different_owners() {
    let s = Server::start();
    let client = client(&s);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let lock = client.async_lock("tasks");
        let l1 = lock.clone();
        tokio::spawn(async move { l1.lock().await.unwrap() })
            .await
            .unwrap();
        // Same thread, another task: it must not re-enter the first task's lock.
        let l2 = lock.clone();
        let got = tokio::spawn(async move { l2.try_lock().await.unwrap() })
            .await
            .unwrap();
        assert!(!got, "a task on the same thread is another owner");
        assert!(lock.is_locked().await.unwrap());
        assert!(lock.force_unlock().await.unwrap());
    });
}

#[test]
fn async_reentry_and_explicit_owner_across_tasks() {
    let s = Server::start();
    let client = client(&s);
    runtime(2).block_on(async {
        let owner = client.new_owner();
        let lock = client.async_lock("ao").with_owner(owner.clone());
        lock.lock().await.unwrap();
        lock.lock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        assert!(lock.is_held_by(&owner).await.unwrap());
        let l2 = lock.clone();
        tokio::spawn(async move {
            assert!(l2.is_held_by_current_task().await.unwrap());
            l2.unlock().await.unwrap();
            l2.unlock().await.unwrap();
        })
        .await
        .unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert!(matches!(lock.unlock().await, Err(Error::NotOwner { .. })));
    });
}

#[test]
fn sixteen_tasks_times_500_increments_of_a_non_atomic_counter() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("acounter")
        .arg(0)
        .query(&mut c)
        .unwrap();
    let client = client(&s);
    let url = s.url();
    runtime(4).block_on(async {
        let redis_client = redis::Client::open(url).unwrap();
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let lock = client.async_lock("acounter:lock");
            let mut con = redis_client
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            tasks.push(tokio::spawn(async move {
                for _ in 0..500 {
                    let g = lock.guard().await.unwrap();
                    let v: i64 = redis::cmd("GET")
                        .arg("acounter")
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("acounter")
                        .arg(v + 1)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    g.unlock().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let v: i64 = redis::cmd("GET").arg("acounter").query(&mut c).unwrap();
    assert_eq!(v, 16 * 500);
    assert!(!exists(&mut c, "acounter:lock"));
}

#[test]
fn dropping_a_pending_acquire_leaves_no_holder_and_no_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let holder = client.lock("cancel");
    holder.lock().unwrap();
    runtime(2).block_on(async {
        let lock = client.async_lock("cancel");
        let pending = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        });
        let mut c2 = s.conn();
        wait_until(Duration::from_secs(5), "the acquire is queued", || {
            waiters(&mut c2, "cancel") == 1
        });
        pending.abort();
        assert!(pending.await.unwrap_err().is_cancelled());
        // A timeout around the acquire is the same thing (in a task: block_on's own future
        // acts as the main thread, which is the holder here).
        let timed_out = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(100), lock.lock())
                .await
                .is_err()
        });
        assert!(timed_out.await.unwrap());
    });
    wait_until(Duration::from_secs(2), "the waiters are withdrawn", || {
        waiters(&mut c, "cancel") == 0
    });
    holder.unlock().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(!exists(&mut c, "cancel"), "nobody was handed the lock");
    // Waits are queued in the client's session (no blocked connection): nothing left there.
    assert_no_wait_left(&mut c);
}

/// An attempt that does not wait (`try_lock`, `try_acquire`) dropped while its command is on
/// the way: the server runs the command anyway, so the drop must read the reply and give back
/// what it granted. Before, the reply was dropped with the future and the grant was held by
/// nobody (a lock until its lease ended, a plain permit for good); the family soak saw it as
/// "rwlock held after its acquire was cancelled".
#[test]
fn an_attempt_dropped_in_flight_gives_its_grant_back() {
    use std::future::Future;
    use std::pin::Pin;
    type Attempt = Pin<Box<dyn Future<Output = rlock_client::Result<bool>> + Send>>;
    type Free = Box<dyn Fn(&mut redis::Connection) -> bool>;
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let rt = runtime(1);
    let lease = Duration::from_secs(30);
    // One permit each, in Redisson's layout (the count as a string), which both protocols
    // read.
    for name in ["sem", "psem"] {
        let set: bool = redis::cmd("SET")
            .arg(name)
            .arg(1)
            .arg("NX")
            .query(&mut c)
            .unwrap();
        assert!(set);
    }
    let permits = |c: &mut redis::Connection, name: &str| -> i64 {
        redis::cmd("GET")
            .arg(name)
            .query::<Option<i64>>(c)
            .unwrap()
            .unwrap_or(0)
    };
    // Each attempt on an object of its own, with what says that object is free again.
    let attempts: Vec<(&str, Attempt, Free)> = vec![
        (
            "try_lock",
            {
                let l = client.async_lock("lock");
                Box::pin(async move { l.try_lock().await })
            },
            Box::new(|c| !exists(c, "lock")),
        ),
        (
            "try_lock_with(0, lease)",
            {
                let l = client.async_lock("leased");
                Box::pin(async move { l.try_lock_with(Duration::ZERO, lease).await })
            },
            Box::new(|c| !exists(c, "leased")),
        ),
        (
            // Not an attempt: a wait, dropped while its acquire is in flight (the same drop
            // reads that reply).
            "try_lock_for(5 s)",
            {
                let l = client.async_lock("waited");
                Box::pin(async move { l.try_lock_for(Duration::from_secs(5)).await })
            },
            Box::new(|c| !exists(c, "waited")),
        ),
        (
            "fenced try_lock",
            {
                let l = client.async_fenced_lock("fenced");
                Box::pin(async move { l.try_lock().await })
            },
            Box::new(|c| !exists(c, "fenced")),
        ),
        (
            "write try_lock",
            {
                let l = client.async_read_write_lock("rw").write_lock();
                Box::pin(async move { l.try_lock().await })
            },
            Box::new(|c| !exists(c, "rw")),
        ),
        (
            "semaphore try_acquire",
            {
                let sem = client.async_semaphore("sem");
                Box::pin(async move { sem.try_acquire().await })
            },
            Box::new(move |c| permits(c, "sem") == 1),
        ),
        (
            "leased try_acquire",
            {
                let sem = client.async_permit_expirable_semaphore("psem");
                Box::pin(async move { Ok(sem.try_acquire(lease).await?.is_some()) })
            },
            Box::new(move |c| permits(c, "psem") == 1),
        ),
    ];
    // The connection is up and the session open: what follows only sends the attempts.
    rt.block_on(async {
        let warm = client.async_lock("warm");
        assert!(warm.try_lock().await.unwrap());
        warm.unlock().await.unwrap();
    });
    for (what, attempt, free) in attempts {
        assert!(free(&mut c), "{what}: free before");
        // The server sleeps 300 ms; the attempt is written meanwhile and dropped after 50 ms,
        // before the server has read it.
        let sleeper = rlock_tests::Pending::send(&s, redis::cmd("DEBUG").arg("SLEEP").arg("0.3"));
        std::thread::sleep(Duration::from_millis(50));
        // In a task on the runtime's only worker: the attempt's connection is driven by a task
        // of that runtime, which the drop must not keep from running while it reads the reply.
        let (tx, rx) = std::sync::mpsc::channel();
        rt.spawn(async move {
            let r = tokio::time::timeout(Duration::from_millis(50), attempt).await;
            let _ = tx.send(r.is_err());
        });
        let dropped = rx.recv_timeout(Duration::from_secs(10));
        if dropped != Ok(true) {
            // A runtime whose worker is stuck can't be shut down: leave it.
            std::mem::forget(rt);
            panic!("{what}: dropped by its timeout, and the drop returned: {dropped:?}");
        }
        let _ = sleeper.reply();
        assert!(
            free(&mut c),
            "{what}: the grant of an attempt dropped in flight was not given back"
        );
    }
}

#[test]
fn a_grant_that_races_the_cancel_is_given_back() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let holder = client.lock("race");
    let rt = runtime(2);
    // Rounds the waiter won (granted before its timeout) and lost (timed out).
    let (mut won, mut lost) = (0, 0);
    for i in 0..30u64 {
        holder.lock().unwrap();
        let lock = client.async_lock("race");
        let waiting = rt.spawn(async move {
            let r = tokio::time::timeout(Duration::from_millis(50), lock.lock()).await;
            if let Ok(Ok(())) = r {
                lock.unlock().await.unwrap(); // won before the timeout: a normal hold
                return true;
            }
            false
        });
        // Release around the moment the timeout fires: from 10 ms before it to 8 ms after.
        std::thread::sleep(Duration::from_micros(40_000 + (i % 10) * 2_000));
        holder.unlock().unwrap();
        if rt.block_on(waiting).unwrap() {
            won += 1;
        } else {
            lost += 1;
        }
        // The timeout dropped the acquire inside the task: a grant that raced it was given
        // back before the drop returned, so before the task ended.
        assert!(
            !exists(&mut c, "race"),
            "round {i}: the raced grant was given back"
        );
        assert_no_waiters(&mut c, "race");
    }
    // Both sides of the race ran: releases well before the timeout are won, well after it lost.
    assert!(won > 0 && lost > 0, "won {won}, lost {lost} of 30 rounds");
}

#[test]
fn async_guards_release_on_drop_and_panic() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    runtime(2).block_on(async {
        let lock = client.async_lock("ag");
        let l2 = lock.clone();
        let r = tokio::spawn(async move {
            let _g = l2.guard().await.unwrap();
            panic!("boom in an async critical section");
        })
        .await;
        assert!(r.unwrap_err().is_panic());
        // Drop releases in the background: the lock frees a moment later.
        let mut c2 = s.conn();
        wait_until(Duration::from_secs(2), "released after the panic", || {
            !exists(&mut c2, "ag")
        });
        let g = lock.try_guard().await.unwrap().expect("free again");
        drop(g);
        wait_until(Duration::from_secs(2), "released after drop", || {
            !exists(&mut c2, "ag")
        });
    });
    assert!(!exists(&mut c, "ag"));
}

#[test]
fn async_lost_notification() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    runtime(2).block_on(async {
        let lock = client.async_lock("alost");
        let g = lock.guard().await.unwrap();
        let _: () = redis::cmd("DEL").arg("alost").query(&mut c).unwrap();
        tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .expect("loss reported");
        assert!(g.is_lost());
    });
}

#[test]
fn async_fencing_and_try_lock_with() {
    let s = Server::start();
    let client = client(&s);
    runtime(2).block_on(async {
        let lock = client.async_fenced_lock("afence");
        let t1 = lock.lock_and_get_token().await.unwrap();
        lock.unlock().await.unwrap();
        let t2 = lock
            .try_lock_and_get_token_with(Duration::from_millis(100), Duration::from_secs(2))
            .await
            .unwrap()
            .unwrap();
        assert!(t2 > t1);
        let ttl = lock
            .remain_time_to_live()
            .await
            .unwrap()
            .remaining()
            .unwrap();
        assert!(ttl <= Duration::from_secs(2));
        let other = client.async_fenced_lock("afence");
        let got = tokio::spawn(async move {
            other
                .try_lock_and_get_token_for(Duration::from_millis(100))
                .await
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(got, None);
        lock.unlock().await.unwrap();
        assert_eq!(lock.token().await.unwrap(), Some(t2));
    });
}

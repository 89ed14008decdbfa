//! The rlock client's semaphores (`Client::semaphore`, `Client::permit_expirable_semaphore`)
//! against real servers: every method from sync and async code, strict FIFO waiting, guards on
//! drop and panic, leased permits (ids as 32 hex, all-or-nothing releases, leases that end,
//! `update_lease_time`), Redisson's semaphore scripts on the same keys both ways, and cluster
//! mode.

mod client_support;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use client_support::{calls, client, runtime, subscribers};
use rlock_client::{Error, PermitId};
use rlock_tests::redisson::semaphore as java;
use rlock_tests::*;

fn count(c: &mut redis::Connection, key: &str) -> i64 {
    string(c, &cmd!("GET", key)).parse().unwrap()
}

/// Waiters queued on a semaphore (`RSEM.INFO`'s `waiters`); over Redisson's protocol, the
/// connections subscribed to its channel (see `client_support::waiters`).
fn sem_waiters(c: &mut redis::Connection, key: &str) -> i64 {
    if rlock_tests::without_module() {
        return subscribers(c, &rlock_tests::prefix_name("redisson_sc", key));
    }
    let info = raw(c, &cmd!("RSEM.INFO", key));
    let Value::Array(flat) = info else {
        panic!("RSEM.INFO: {info:?}")
    };
    let at = flat
        .iter()
        .position(|v| text(v).as_deref() == Some("waiters"))
        .expect("waiters");
    match flat[at + 1] {
        Value::Int(n) => n,
        ref other => panic!("waiters: {other:?}"),
    }
}

#[test]
fn plain_permits_every_method() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.semaphore("pool");
    assert_eq!(sem.name(), "pool");
    assert_eq!(sem.available_permits().unwrap(), 0, "absent: no permits");
    assert!(!sem.try_acquire().unwrap());
    assert!(sem.try_set_permits(5).unwrap());
    assert!(!sem.try_set_permits(9).unwrap(), "only when absent");
    assert_eq!(
        count(&mut c, "pool"),
        5,
        "Redisson's layout: a string count"
    );

    sem.acquire().unwrap();
    sem.acquire_many(2).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 2);
    assert!(!sem.try_acquire_many(3).unwrap());
    assert!(sem.try_acquire_many(2).unwrap());
    assert!(!sem.try_acquire().unwrap());
    let t = Instant::now();
    assert!(!sem.try_acquire_for(Duration::from_millis(200)).unwrap());
    assert!(t.elapsed() >= Duration::from_millis(190));
    assert!(sem.try_acquire_many(0).unwrap(), "zero permits: at once");
    sem.release().unwrap();
    sem.release_many(4).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 5);
    assert_eq!(
        sem.add_permits(-7).unwrap(),
        -2,
        "the count may go negative"
    );
    assert_eq!(sem.add_permits(4).unwrap(), 2);
    assert_eq!(sem.drain_permits().unwrap(), 2);
    assert_eq!(sem.available_permits().unwrap(), 0);
    // No permit left: a zero wait answers false at once.
    assert!(!sem.try_acquire_for(Duration::ZERO).unwrap());

    // A release creates the semaphore (Redisson's `release()` on a fresh name).
    let fresh = client.semaphore("fresh");
    fresh.release().unwrap();
    assert_eq!(fresh.available_permits().unwrap(), 1);

    // A waiter is handed released permits at once.
    let sem2 = sem.clone();
    let waiter = std::thread::spawn(move || {
        let t = Instant::now();
        let got = sem2
            .try_acquire_many_for(3, Duration::from_secs(10))
            .unwrap();
        (got, t.elapsed())
    });
    wait_until(Duration::from_secs(5), "queued", || {
        sem_waiters(&mut c, "pool") == 1
    });
    sem.release_many(3).unwrap();
    let (got, _) = waiter.join().unwrap();
    assert!(got);
    assert_eq!(sem.available_permits().unwrap(), 0);
}

#[test]
fn strict_fifo_a_big_request_is_not_overtaken() {
    if skip_without_module("server-side FIFO of a plain semaphore's waiters") {
        return;
    }
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.semaphore("fifo");
    sem.try_set_permits(1).unwrap();
    sem.acquire().unwrap();
    let (tx, rx) = mpsc::channel();
    let big = {
        let (sem, tx) = (sem.clone(), tx.clone());
        std::thread::spawn(move || {
            sem.acquire_many(3).unwrap();
            tx.send("big").unwrap();
            sem.release_many(3).unwrap();
        })
    };
    wait_until(Duration::from_secs(5), "big queued", || {
        sem_waiters(&mut c, "fifo") == 1
    });
    let small = {
        let sem = sem.clone();
        std::thread::spawn(move || {
            sem.acquire().unwrap();
            tx.send("small").unwrap();
            sem.release().unwrap();
        })
    };
    wait_until(Duration::from_secs(5), "small queued", || {
        sem_waiters(&mut c, "fifo") == 2
    });
    assert!(!sem.try_acquire().unwrap(), "a newcomer does not overtake");
    sem.release().unwrap(); // 1 free: the head wants 3, so nobody moves
    assert_eq!(sem_waiters(&mut c, "fifo"), 2);
    assert_eq!(sem.available_permits().unwrap(), 1);
    sem.add_permits(2).unwrap(); // 3 free: the head goes first
    assert_eq!(rx.recv().unwrap(), "big");
    assert_eq!(rx.recv().unwrap(), "small");
    big.join().unwrap();
    small.join().unwrap();
}

#[test]
fn guards_give_permits_back_on_drop_and_on_panic() {
    let s = Server::start();
    let client = client(&s);
    let sem = client.semaphore("g");
    sem.try_set_permits(3).unwrap();
    {
        let g = sem.guard().unwrap();
        let g2 = sem.guard_many(2).unwrap();
        assert_eq!(g.owner(), None, "permits have no owner");
        assert!(!g.is_lost() && g.valid_until().is_none());
        assert!(sem.try_guard().unwrap().is_none());
        assert!(sem
            .try_guard_for(Duration::from_millis(50))
            .unwrap()
            .is_none());
        drop(g2);
        assert_eq!(sem.available_permits().unwrap(), 2);
    }
    assert_eq!(sem.available_permits().unwrap(), 3);
    let g = sem
        .try_guard_many_for(3, Duration::from_millis(50))
        .unwrap()
        .unwrap();
    g.unlock().unwrap();
    let sem2 = sem.clone();
    assert!(std::thread::spawn(move || {
        let _g = sem2.guard_many(2).unwrap();
        panic!("boom");
    })
    .join()
    .is_err());
    assert_eq!(
        sem.available_permits().unwrap(),
        3,
        "given back while the panic unwound"
    );
}

#[test]
fn sixteen_threads_on_four_permits_never_exceed_four() {
    let s = Server::start();
    let client = client(&s);
    let sem = client.semaphore("four");
    sem.try_set_permits(4).unwrap();
    let (inside, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let (sem, inside, most) = (sem.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                for _ in 0..30 {
                    let _p = sem.guard().unwrap();
                    let now = inside.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(now, SeqCst);
                    std::thread::yield_now();
                    inside.fetch_sub(1, SeqCst);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        most.load(SeqCst) <= 4,
        "{} holders at once",
        most.load(SeqCst)
    );
    assert_eq!(sem.available_permits().unwrap(), 4);
}

#[test]
fn leased_permits_every_method() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("lp");
    assert!(sem.try_set_permits(10).unwrap());
    let id = sem.acquire(Duration::from_secs(30)).unwrap();
    assert_eq!(id.to_string().len(), 32);
    let stored = raw(
        &mut c,
        &cmd!("ZSCORE", java::timeouts("lp"), &id.as_bytes()[..]),
    );
    assert!(
        matches!(stored, Value::BulkString(_)),
        "the id is stored as 16 raw bytes"
    );
    let many = sem.acquire_many(3, Duration::from_secs(30)).unwrap();
    assert_eq!(many.len(), 3);
    assert_eq!(sem.available_permits().unwrap(), 6);
    assert_eq!(sem.acquired_permits().unwrap(), 4);
    assert!(sem.try_acquire(Duration::from_secs(30)).unwrap().is_some());
    assert_eq!(
        sem.try_acquire_many(5, Duration::from_secs(30))
            .unwrap()
            .len(),
        5
    );
    assert!(sem.try_acquire(Duration::from_secs(30)).unwrap().is_none());
    assert!(sem
        .try_acquire_many(2, Duration::from_secs(30))
        .unwrap()
        .is_empty());
    assert!(sem
        .try_acquire_for(Duration::from_millis(100), Duration::from_secs(30))
        .unwrap()
        .is_none());
    assert!(sem
        .try_acquire_many_for(2, Duration::from_millis(100), Duration::from_secs(30))
        .unwrap()
        .is_empty());

    sem.release(id).unwrap();
    match sem.release(id) {
        Err(Error::PermitNotLeased { name, message }) => {
            assert_eq!(name, "lp");
            assert!(message.contains(&id.to_string()), "{message}");
        }
        other => panic!("expected PermitNotLeased, got {other:?}"),
    }
    assert!(!sem.try_release(id).unwrap());
    // All or nothing: one unknown id releases nothing.
    let unknown: PermitId = "00000000000000000000000000000001".parse().unwrap();
    let mut with_unknown = many.clone();
    with_unknown.push(unknown);
    assert!(matches!(
        sem.release_many(&with_unknown),
        Err(Error::PermitNotLeased { .. })
    ));
    assert_eq!(sem.try_release_many(&with_unknown).unwrap(), 0);
    assert_eq!(sem.acquired_permits().unwrap(), 9);
    assert_eq!(sem.try_release_many(&many[..2]).unwrap(), 2);
    sem.release_many(&many[2..]).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 4);
    assert_eq!(sem.add_permits(1).unwrap(), 5);

    // A lease ends by itself; update_lease_time moves it.
    let short = sem.acquire(Duration::from_millis(300)).unwrap();
    assert!(sem
        .update_lease_time(short, Duration::from_secs(20))
        .unwrap());
    let score = string(
        &mut c,
        &cmd!("ZSCORE", java::timeouts("lp"), &short.as_bytes()[..]),
    );
    let left = score.parse::<f64>().unwrap() as i64 - java::now_ms();
    assert_between("the new lease", left, 19_000, 20_000);
    assert!(sem
        .update_lease_time(short, Duration::from_millis(200))
        .unwrap());
    assert_eq!(sem.acquired_permits().unwrap(), 7);
    wait_until(Duration::from_secs(2), "the lease ended", || {
        sem.acquired_permits().unwrap() == 6
    });
    assert!(
        !sem.try_release(short).unwrap(),
        "a permit whose lease ended can't be released"
    );
    assert!(!sem
        .update_lease_time(short, Duration::from_secs(1))
        .unwrap());
    assert!(!sem
        .update_lease_time(unknown, Duration::from_secs(1))
        .unwrap());
}

#[test]
fn permit_guards_release_by_id_and_report_the_lease_end() {
    let s = Server::start();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("pg");
    sem.try_set_permits(3).unwrap();
    {
        let g = sem.guard(Duration::from_secs(30)).unwrap();
        let id = g.permit_id().expect("a permit guard has an id");
        assert!(g.valid_until().unwrap() > Instant::now() + Duration::from_secs(29));
        assert_eq!(sem.acquired_permits().unwrap(), 1);
        assert_eq!(id.to_string().len(), 32);
    }
    assert_eq!(sem.available_permits().unwrap(), 3);
    let gs = sem.guard_many(2, Duration::from_secs(30)).unwrap();
    assert_eq!(gs.len(), 2);
    assert_ne!(gs[0].permit_id(), gs[1].permit_id());
    drop(gs);
    assert_eq!(sem.available_permits().unwrap(), 3);
    let g = sem.try_guard(Duration::from_millis(200)).unwrap().unwrap();
    wait_until(
        Duration::from_secs(2),
        "the guard saw its lease end",
        || g.is_lost(),
    );
    // The client counts the lease from before it sent the acquire, so it may call the hold lost
    // a moment before the server's lease (counted from the grant) ends; a release in between
    // still succeeds. Wait for the server's clock too before expecting the refusal.
    wait_until(
        Duration::from_secs(2),
        "the server saw the lease end",
        || sem.available_permits().unwrap() == 3,
    );
    assert!(matches!(g.unlock(), Err(Error::PermitNotLeased { .. })));
    let g = sem
        .try_guard_for(Duration::from_millis(10), Duration::from_secs(5))
        .unwrap()
        .unwrap();
    let sem2 = sem.clone();
    let id = g.permit_id().unwrap();
    assert!(std::thread::spawn(move || {
        let _g = g;
        panic!("boom");
    })
    .join()
    .is_err());
    assert!(
        !sem2.try_release(id).unwrap(),
        "released while the panic unwound"
    );
    assert_eq!(sem.available_permits().unwrap(), 3);
}

#[test]
fn a_crashed_workers_lease_goes_to_the_waiter() {
    let s = Server::start();
    let client = client(&s);
    let sem = client.permit_expirable_semaphore("crash");
    sem.try_set_permits(1).unwrap();
    // A worker takes the permit and "crashes" (never releases it).
    let _lost = sem.acquire(Duration::from_millis(400)).unwrap();
    let t = Instant::now();
    let next = sem
        .try_acquire_for(Duration::from_secs(5), Duration::from_secs(5))
        .unwrap();
    assert!(next.is_some());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(350) && took < Duration::from_millis(1_500),
        "{took:?}"
    );
}

#[test]
fn async_semaphores() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    runtime(2).block_on(async {
        let sem = client.async_semaphore("as");
        assert!(sem.try_set_permits(2).await.unwrap());
        sem.acquire_many(2).await.unwrap();
        // Cancelled while it waits: no waiter left, no permit taken.
        let sem2 = sem.clone();
        let timed_out = tokio::spawn(async move {
            tokio::time::timeout(Duration::from_millis(100), sem2.acquire())
                .await
                .is_err()
        })
        .await
        .unwrap();
        assert!(timed_out);
        if rlock_tests::without_module() {
            wait_until(
                margin(Duration::from_secs(3)),
                "the wait's subscription ended",
                || sem_waiters(&mut c, "as") == 0,
            );
        } else {
            assert_eq!(sem_waiters(&mut c, "as"), 0);
        }
        sem.release_many(2).await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 2);
        let g = sem.guard().await.unwrap();
        assert!(!sem.try_acquire_many(2).await.unwrap());
        g.unlock().await.unwrap();
        assert_eq!(sem.drain_permits().await.unwrap(), 2);
        assert_eq!(sem.add_permits(1).await.unwrap(), 1);

        let leased = client.async_permit_expirable_semaphore("al");
        leased.try_set_permits(2).await.unwrap();
        let id = leased.acquire(Duration::from_secs(10)).await.unwrap();
        let g = leased.guard(Duration::from_secs(10)).await.unwrap();
        assert_eq!(leased.acquired_permits().await.unwrap(), 2);
        assert!(leased
            .try_acquire(Duration::from_secs(1))
            .await
            .unwrap()
            .is_none());
        drop(g);
        wait_until(
            Duration::from_secs(2),
            "the dropped async guard released",
            || count(&mut c, "al") == 1,
        );
        assert!(leased
            .update_lease_time(id, Duration::from_secs(3))
            .await
            .unwrap());
        leased.release(id).await.unwrap();
        assert_eq!(leased.available_permits().await.unwrap(), 2);
    });
}

#[test]
fn redisson_and_the_client_share_semaphores_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);

    // Plain: Java sets and takes, the client sees and releases; the client's waiter is handed
    // what Java's script releases.
    assert_eq!(java::try_set_permits(&mut c, "js", 2), 1);
    let sem = client.semaphore("js");
    assert_eq!(sem.available_permits().unwrap(), 2);
    assert_eq!(java::try_acquire(&mut c, "js", 2), 1);
    let sem2 = sem.clone();
    let waiter = std::thread::spawn(move || sem2.try_acquire_for(Duration::from_secs(10)).unwrap());
    wait_until(Duration::from_secs(5), "queued", || {
        sem_waiters(&mut c, "js") == 1
    });
    java::release(&mut c, "js", 1);
    assert!(
        waiter.join().unwrap(),
        "Java's release went to the client's waiter"
    );
    sem.release_many(2).unwrap();
    assert_eq!(
        java::try_acquire(&mut c, "js", 2),
        1,
        "the client's release, seen by Java"
    );
    assert_eq!(java::drain(&mut c, "js"), Value::BulkString(b"0".to_vec()));

    // Leased: a permit leased by Java is released by the client, and the reverse.
    let exp = client.permit_expirable_semaphore("jx");
    assert!(exp.try_set_permits(2).unwrap());
    let (reply, ids) = java::lease(&mut c, "jx", 1, Some(30_000));
    assert_eq!(text(&reply).as_deref(), Some("OK"));
    let java_id: PermitId = java::hex(&ids[0]).parse().unwrap();
    assert_eq!(exp.acquired_permits().unwrap(), 1);
    assert!(exp
        .update_lease_time(java_id, Duration::from_secs(60))
        .unwrap());
    assert_between(
        "Java sees the client's new lease",
        java::lease_time(&mut c, "jx", &ids[0]),
        59_000,
        60_000,
    );
    exp.release(java_id).unwrap();
    let mine = exp.acquire(Duration::from_secs(30)).unwrap();
    assert_eq!(java::try_release(&mut c, "jx", mine.as_bytes()), 1);
    assert_eq!(java::available(&mut c, "jx"), 2);
    // A permit the client leased goes back when its lease ends, also for Java.
    let _short = exp.acquire(Duration::from_millis(100)).unwrap();
    wait_until(Duration::from_secs(2), "the lease ended for Java", || {
        java::available(&mut c, "jx") == 2
    });
}

#[test]
fn cluster_mode() {
    let cluster = rlock_tests::cluster::Cluster::start();
    let client = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    for name in ["{pool}:db", "sem-a", "sem-b"] {
        let sem = client.semaphore(name);
        sem.try_set_permits(1).unwrap();
        let g = sem.guard().unwrap();
        let sem2 = sem.clone();
        let waiter =
            std::thread::spawn(move || sem2.try_acquire_for(Duration::from_secs(5)).unwrap());
        let mut m = cluster.master_for(name).conn();
        wait_until(Duration::from_secs(5), "queued on its master", || {
            sem_waiters(&mut m, name) == 1
        });
        drop(g);
        assert!(waiter.join().unwrap());
        let exp = client.permit_expirable_semaphore(format!("{name}:x"));
        exp.try_set_permits(1).unwrap();
        let id = exp.acquire(Duration::from_secs(5)).unwrap();
        assert!(exp.update_lease_time(id, Duration::from_secs(10)).unwrap());
        exp.release(id).unwrap();
    }
    served_across_masters_by_another_client(&cluster);
}

/// On `cluster` (whose client seeds are its masters), one semaphore of each kind on every
/// master: a client's wait is granted by another client's release on the master of its slot,
/// and the counts there (the available count, the leased-permit set) are exactly what the two
/// clients took and gave back: no permit created or lost by the routing.
fn served_across_masters_by_another_client(cluster: &rlock_tests::cluster::Cluster) {
    let a = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    let b = rlock_client::Client::open_cluster(cluster.seeds()).unwrap();
    // One name per master for each kind.
    let spread = |prefix: &str| {
        let mut names: Vec<String> = Vec::new();
        let mut ports = Vec::new();
        for i in 0.. {
            let name = format!("{prefix}-{i}");
            let port = cluster.master_for(&name).port;
            if !ports.contains(&port) {
                ports.push(port);
                names.push(name);
            }
            if names.len() == cluster.masters.len() {
                break;
            }
        }
        names
    };
    for name in spread("spread-sem") {
        let mut m = cluster.master_for(&name).conn();
        let (sa, sb) = (a.semaphore(name.as_str()), b.semaphore(name.as_str()));
        assert!(sa.try_set_permits(3).unwrap());
        sa.acquire_many(2).unwrap();
        assert_eq!(count(&mut m, &name), 1, "{name}");
        let waiter = std::thread::spawn(move || {
            sb.try_acquire_many_for(3, Duration::from_secs(10)).unwrap()
        });
        wait_until(Duration::from_secs(5), "queued on its master", || {
            sem_waiters(&mut m, &name) == 1
        });
        sa.release_many(2).unwrap();
        assert!(waiter.join().unwrap(), "{name}: served by a's release");
        assert_eq!(count(&mut m, &name), 0, "{name}: the 3 permits are b's");
        b.semaphore(name.as_str()).release_many(3).unwrap();
        assert_eq!(count(&mut m, &name), 3, "{name}");
        assert_eq!(sa.available_permits().unwrap(), 3);
    }
    for name in spread("spread-exp") {
        let mut m = cluster.master_for(&name).conn();
        let leases = java::timeouts(&name);
        let (ea, eb) = (
            a.permit_expirable_semaphore(name.as_str()),
            b.permit_expirable_semaphore(name.as_str()),
        );
        assert!(ea.try_set_permits(2).unwrap());
        let leased = ea.acquire(Duration::from_secs(60)).unwrap();
        let endless = ea.acquire_without_lease().unwrap();
        assert_eq!(ea.lease_time(endless).unwrap(), None, "{name}");
        assert_eq!(lease_end(&mut m, &name, endless), Some(java::PERMANENT));
        assert_eq!(count(&mut m, &name), 0, "{name}");
        assert_eq!(int(&mut m, &cmd!("ZCARD", &leases)), 2, "{name}");
        let eb2 = eb.clone();
        let waiter = std::thread::spawn(move || {
            eb2.try_acquire_for(Duration::from_secs(10), Duration::from_secs(60))
                .unwrap()
        });
        wait_until(Duration::from_secs(5), "queued on its master", || {
            sem_waiters(&mut m, &name) == 1
        });
        ea.release(endless).unwrap();
        let got = waiter.join().unwrap().expect("served by a's release");
        assert_ne!(got, endless);
        assert!(lease_end(&mut m, &name, got).is_some_and(|end| end < java::PERMANENT));
        assert_eq!(lease_end(&mut m, &name, endless), None, "{name}: released");
        assert_eq!(count(&mut m, &name), 0, "{name}");
        assert_eq!(int(&mut m, &cmd!("ZCARD", &leases)), 2, "{name}");
        assert_eq!(eb.permits().unwrap(), 2, "{name}: available plus leased");
        eb.release(got).unwrap();
        ea.release(leased).unwrap();
        assert_eq!(count(&mut m, &name), 2, "{name}");
        assert_eq!(int(&mut m, &cmd!("ZCARD", &leases)), 0, "{name}");
        // SETPERMITS through the client, on the slot's master.
        let again = ea.acquire(Duration::from_secs(60)).unwrap();
        ea.set_permits(5).unwrap();
        assert_eq!(count(&mut m, &name), 4, "{name}: 5 in all, 1 leased");
        ea.release(again).unwrap();
        assert_eq!(eb.permits().unwrap(), 5, "{name}");
    }
}

/// The score (lease end, ms since the epoch) of a leased permit in `{key}:timeout`.
fn lease_end(c: &mut redis::Connection, key: &str, id: PermitId) -> Option<i64> {
    redis::cmd("ZSCORE")
        .arg(java::timeouts(key))
        .arg(&id.as_bytes()[..])
        .query(c)
        .unwrap()
}

#[test]
fn the_watchdog_renews_permits_of_a_watched_semaphore() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s); // watchdog 600 ms: renewal every 200 ms
    let plain = client.permit_expirable_semaphore("watched");
    let sem = plain.clone().with_watchdog();
    sem.try_set_permits(2).unwrap();
    assert!(
        matches!(
            sem.try_acquire(Duration::from_millis(300)),
            Err(Error::InvalidArgument(_))
        ),
        "a lease shorter than two renewal periods could lapse between renewals"
    );
    let lease = Duration::from_millis(500);
    let g = sem.guard(lease).unwrap();
    let gid = g.permit_id().unwrap();
    let id = sem.acquire(lease).unwrap();
    assert_eq!(client.renewing_count(), 2);
    let (renewals, scripts) = (calls(&mut c, "rsem.renew"), calls(&mut c, "eval"));
    // Three leases later both are still leased, each renewed to end within one lease of now.
    std::thread::sleep(lease * 3);
    assert_eq!(sem.acquired_permits().unwrap(), 2);
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert!(!g.is_lost());
    for p in [gid, id] {
        let left = lease_end(&mut c, "watched", p).unwrap() - java::now_ms();
        assert!(left > 0 && left <= 500, "{left} ms left of a 500 ms lease");
    }
    // Renewed in the watchdog's rounds (one RSEM.RENEW per permit and round, no script;
    // over Redisson's protocol, one `updateLeaseTime` script per permit and round).
    let rounds = if without_module() {
        calls(&mut c, "eval") - scripts
    } else {
        let rounds = calls(&mut c, "rsem.renew") - renewals;
        assert_eq!(
            calls(&mut c, "eval"),
            scripts,
            "no script: an RSEM-only ACL user renews too"
        );
        rounds
    };
    assert!((10..=20).contains(&rounds), "{rounds} renewals in 1.5 s");

    // Released: no longer renewed, back in the pool.
    g.unlock().unwrap();
    sem.release(id).unwrap();
    assert_eq!(client.renewing_count(), 0);
    assert_eq!(sem.available_permits().unwrap(), 2);

    // A permit of an unwatched handle is not renewed: it ends with its lease.
    let once = plain.acquire(lease).unwrap();
    assert_eq!(client.renewing_count(), 0);
    wait_until(margin(lease * 2), "the unwatched lease ends", || {
        plain.available_permits().unwrap() == 2
    });
    assert!(!plain.try_release(once).unwrap());

    // Every clone of the watched handle gone: its permit is reported, no longer renewed, and
    // returns when its lease ends.
    let other = client.permit_expirable_semaphore("watched").with_watchdog();
    let kept = other.acquire(lease).unwrap();
    drop(other);
    let gone = Instant::now();
    wait_until(margin(lease * 3), "the orphaned permit returns", || {
        plain.available_permits().unwrap() == 2
    });
    assert!(gone.elapsed() <= margin(lease + Duration::from_millis(300)));
    assert!(!plain.try_release(kept).unwrap());
}

#[test]
fn async_watched_permits() {
    let s = Server::start();
    let client = client(&s);
    runtime(2).block_on(async {
        let sem = client
            .async_permit_expirable_semaphore("awatched")
            .with_watchdog();
        sem.try_set_permits(1).await.unwrap();
        // Three leases long: kept only by renewals (every 200 ms, with 600 ms of slack for a
        // loaded machine; a 400 ms lease left one late renewal's worth).
        let g = sem.guard(Duration::from_millis(800)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2400)).await;
        assert_eq!(sem.available_permits().await.unwrap(), 0);
        assert!(!g.is_lost());
        g.unlock().await.unwrap();
        assert_eq!(sem.available_permits().await.unwrap(), 1);
    });
}

/// A plain acquire whose reply does not come in time: the client can't tell whether it took
/// the permits (a plain permit has no owner the server could be asked about, and sending it
/// again could take them twice), so it fails the call and counts the permits in doubt. Here
/// the server ran it after the client gave up: the permits really are held by nobody, as the
/// count warned.
#[test]
fn an_acquire_whose_reply_is_lost_counts_its_permits_in_doubt() {
    let s = Server::with(ServerOptions {
        args: vec!["--enable-debug-command".into(), "yes".into()],
        ..Default::default()
    });
    let mut c = s.conn();
    let client =
        client_support::client_with(s.url(), |b| b.response_timeout(Duration::from_millis(200)));
    let sem = client.semaphore("doubt");
    let asem = client.async_semaphore("doubt");
    let rt = runtime(1);
    assert!(sem.try_set_permits(5).unwrap());
    // The connections are up: what follows only sends the acquires.
    assert!(sem.try_acquire().unwrap());
    sem.release().unwrap();
    rt.block_on(async {
        assert!(asem.try_acquire().await.unwrap());
        asem.release().await.unwrap();
    });
    assert_eq!(client.permits_in_doubt(), 0);
    let mut expected = 0;
    for (what, n) in [("sync", 2), ("async", 1)] {
        // The server sleeps past the client's response timeout; the acquire runs after it.
        let sleeper = Pending::send(&s, &cmd!("DEBUG", "SLEEP", "0.6"));
        std::thread::sleep(Duration::from_millis(50));
        let r = match what {
            "sync" => sem.try_acquire_many(n),
            _ => rt.block_on(asem.try_acquire_many(n)),
        };
        assert!(r.is_err(), "{what}: the reply was not there in time: {r:?}");
        let _ = sleeper.reply();
        expected += n;
        assert_eq!(client.permits_in_doubt(), expected, "{what}");
        // The count in Redisson's layout, which both protocols keep.
        assert_eq!(
            count(&mut c, "doubt"),
            5 - expected as i64,
            "{what}: the server took them after the client gave up"
        );
    }
    // An operator who knows gives them back.
    assert_eq!(int(&mut c, &cmd!("INCRBY", "doubt", 3)), 5);
}

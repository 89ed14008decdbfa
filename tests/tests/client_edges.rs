//! The rough edges a new user hits first, each pinned down: a dead server fails fast and says
//! where, errors read as sentences, sub-millisecond leases, a dropped async wait is withdrawn
//! before the drop returns, lease holds and `lost()`, and the re-exported `redis` crate.

mod client_support;

use std::future::Future;
use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{Error, Ttl};
use rlock_tests::{free_port, redis, wait_until, Server, ServerOptions};

/// `f`'s error and how long it took.
fn timed<T: std::fmt::Debug>(f: impl FnOnce() -> rlock_client::Result<T>) -> (Error, Duration) {
    let t = Instant::now();
    let e = f().expect_err("a dead server can't answer");
    (e, t.elapsed())
}

#[track_caller]
fn assert_unreachable(what: &str, (e, took): (Error, Duration), port: u16, limit: Duration) {
    assert!(took < limit, "{what} took {took:?}, limit {limit:?}");
    match &e {
        Error::Connection { addr, .. } => assert_eq!(addr, &format!("127.0.0.1:{port}"), "{what}"),
        other => panic!("{what}: expected a connection error, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("can't reach Redis at 127.0.0.1:{port}: ")),
        "{what}: {msg}"
    );
}

#[test]
fn every_call_against_a_dead_server_fails_within_the_connect_timeout_naming_the_address() {
    assert!(rlock_client::Config::default().connect_timeout() <= Duration::from_secs(1));
    let port = free_port(); // nothing listens there
    let url = format!("redis://127.0.0.1:{port}/");
    // Default connect timeout (1 s): allow scheduling noise, not another second.
    let client = rlock_client::Client::open(url.clone()).unwrap();
    let lock = client.lock("dead");
    let limit = Duration::from_millis(1600);
    assert_unreachable("try_lock", timed(|| lock.try_lock()), port, limit);
    assert_unreachable("lock", timed(|| lock.lock()), port, limit);
    assert_unreachable(
        "try_lock_for",
        timed(|| lock.try_lock_for(Duration::from_secs(5))),
        port,
        limit,
    );
    assert_unreachable("unlock", timed(|| lock.unlock()), port, limit);
    assert_unreachable("is_locked", timed(|| lock.is_locked()), port, limit);
    assert_unreachable("force_unlock", timed(|| lock.force_unlock()), port, limit);
    assert_unreachable("hold_count", timed(|| lock.hold_count()), port, limit);
    assert_unreachable("ttl", timed(|| lock.remain_time_to_live()), port, limit);
    assert_unreachable("guard", timed(|| lock.guard()), port, limit);

    let alock = client.async_lock("dead");
    let rt = runtime(2);
    let at = |f: std::pin::Pin<Box<dyn Future<Output = rlock_client::Result<()>>>>| {
        timed(|| rt.block_on(f))
    };
    assert_unreachable(
        "async try_lock",
        at(Box::pin(async { alock.try_lock().await.map(drop) })),
        port,
        limit,
    );
    assert_unreachable("async lock", at(Box::pin(alock.lock())), port, limit);
    assert_unreachable("async unlock", at(Box::pin(alock.unlock())), port, limit);
    assert_unreachable(
        "async is_locked",
        at(Box::pin(async { alock.is_locked().await.map(drop) })),
        port,
        limit,
    );

    // The timeout is the user's to set.
    let quick = rlock_client::Client::builder()
        .url(url)
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let lock = quick.lock("dead");
    let limit = Duration::from_millis(700);
    assert_unreachable("try_lock, 200 ms", timed(|| lock.try_lock()), port, limit);
    assert_unreachable("lock, 200 ms", timed(|| lock.lock()), port, limit);
}

#[test]
fn errors_read_as_sentences() {
    let s = Server::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut c)
        .unwrap();
    let client = client(&s);
    let e = client.lock("plain").try_lock().unwrap_err();
    assert!(
        matches!(e, Error::WrongType { ref name, .. } if name == "plain"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "key 'plain' holds another kind of value, not a lock"
    );

    let lock = client.lock("free");
    let e = lock.unlock().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("can't unlock 'free': it is not held by {}", lock.owner())
    );

    let bare = Server::with(ServerOptions {
        module: false,
        ..Default::default()
    });
    // Forced to the module's protocol (Auto speaks Redisson's there: client_redisson.rs).
    let e = client_with(bare.url(), |b| b.protocol(rlock_client::Protocol::Module))
        .lock("x")
        .try_lock()
        .unwrap_err();
    assert!(matches!(e, Error::ModuleNotLoaded(_)), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&format!("127.0.0.1:{}", bare.port)), "{msg}");
    for code in ["ERR", "WRONGTYPE", "NOTOWNER", "\""] {
        assert!(!msg.contains(code), "{msg}");
    }
}

#[test]
fn a_sub_millisecond_lease_is_a_one_millisecond_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let lock = client.lock("tiny");
    assert!(lock
        .try_lock_with(Duration::ZERO, Duration::from_micros(500))
        .unwrap());
    // Sent as 1 ms: already gone or about to be, never a longer lease.
    let pttl: i64 = redis::cmd("PTTL").arg("tiny").query(&mut c).unwrap();
    assert!(pttl <= 1, "PTTL {pttl}");
    wait_until(Duration::from_secs(1), "the 1 ms lease ends", || {
        !exists(&mut c, "tiny")
    });
    assert_eq!(client.renewing_count(), 0);
    // Another owner takes it at once.
    let other = client.lock("tiny").with_owner(client.new_owner());
    assert!(other.try_lock().unwrap());
    // Zero is refused before anything is sent, as the server would refuse it.
    assert!(matches!(
        lock.try_lock_with(Duration::ZERO, Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_dropped_async_wait_is_withdrawn_before_the_drop_returns() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s);
    let holder = client.lock("drop");
    holder.lock().unwrap();
    let rt = runtime(2);
    let url = s.url();
    rt.block_on(async {
        let lock = client.async_lock("drop").with_owner(client.new_owner());
        let mut pending = Box::pin(lock.lock());
        let mut probe = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let queued = async {
            loop {
                // Queued in the session; over Redisson's protocol, subscribed to the channel.
                let waiting = if rlock_tests::without_module() {
                    let v: Vec<redis::Value> = redis::cmd("PUBSUB")
                        .arg("NUMSUB")
                        .arg(rlock_tests::lock_channel("drop"))
                        .query_async(&mut probe)
                        .await
                        .unwrap();
                    v.get(1) == Some(&redis::Value::Int(1))
                } else {
                    let stats: String = redis::cmd("INFO")
                        .arg("rlock")
                        .query_async(&mut probe)
                        .await
                        .unwrap();
                    rlock_tests::rlock_stat_in(&stats, "session_requests") == 1
                };
                if waiting {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            r = &mut pending => panic!("granted while held: {r:?}"),
            _ = queued => {}
        }
        drop(pending);
    });
    // No wait_until: the waiter was gone before `drop` returned.
    assert_no_waiters(&mut c, "drop");
    assert_no_wait_left(&mut c);
    holder.unlock().unwrap();
    assert!(!exists(&mut c, "drop"), "nobody was handed the lock");
}

#[test]
fn lease_holds_are_lost_when_the_lease_ends_or_the_server_reports_them_gone() {
    let s = Server::start();
    let mut c = s.conn();
    let client = client(&s); // watchdog renews every 200 ms
    let lock = client.lock("leased");
    let lease = Duration::from_millis(400);

    // Nothing renews a lease hold: it counts as lost once its lease has run out.
    let g = lock.guard_with_lease(lease).unwrap();
    let taken = Instant::now();
    assert!(!g.is_lost() && !lock.is_lost());
    wait_until(Duration::from_secs(2), "lease end", || g.is_lost());
    assert!(taken.elapsed() >= lease - Duration::from_millis(5));
    drop(g);

    // The server watches it (the acquire named the client's session): a deletion before the
    // lease ends is reported at once, to the guard and to the handle. (The module's lost-hold
    // push: over Redisson's protocol such a loss shows at the lease's end, as above.)
    if !rlock_tests::without_module() {
        let g = lock.guard_with_lease(lease).unwrap();
        let taken = Instant::now();
        let _: () = redis::cmd("DEL").arg("leased").query(&mut c).unwrap();
        wait_until(
            Duration::from_secs(1),
            "the server reports the loss",
            || g.is_lost(),
        );
        assert!(
            taken.elapsed() < lease,
            "reported before the lease would have ended: {:?}",
            taken.elapsed()
        );
        assert!(lock.is_lost());
        drop(g);
    }

    // A watchdog hold found gone stays lost for the handle too, past further renewal rounds.
    let g = lock.guard().unwrap();
    let _: () = redis::cmd("DEL").arg("leased").query(&mut c).unwrap();
    wait_until(Duration::from_secs(2), "the loss is reported", || {
        g.is_lost()
    });
    std::thread::sleep(Duration::from_millis(450)); // two more renewal rounds
    assert!(lock.is_lost() && g.is_lost());
    drop(g);

    // Async: lost() resolves at the lease end.
    let rt = runtime(2);
    rt.block_on(async {
        let lock = client.async_lock("leased-async");
        let g = lock.guard_with_lease(lease).await.unwrap();
        let t = Instant::now();
        tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .expect("lost() resolves when the lease ends");
        let after = t.elapsed();
        assert!(after >= lease - Duration::from_millis(50), "{after:?}");
        assert!(g.is_lost());
    });
    assert_eq!(lock.remain_time_to_live().unwrap(), Ttl::NotLocked);
}

#[test]
fn the_redis_types_in_the_api_come_from_the_reexported_crate() {
    // Compiles only if `Error`'s `redis` types are `rlock_client::redis`'s.
    fn source(e: Error) -> Option<rlock_client::redis::RedisError> {
        match e {
            Error::Connection { source, .. } => Some(source),
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
    let port = free_port();
    let client = rlock_client::Client::builder()
        .url(format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let e = client.lock("x").try_lock().unwrap_err();
    let inner = source(e).expect("a redis error inside");
    assert!(inner.is_connection_refusal(), "{inner:?}");
}

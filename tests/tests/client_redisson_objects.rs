//! The rlock client's read-write lock, count-down latch and permit-expirable semaphore over
//! Redisson's own protocol, against a plain redis-server WITHOUT the module (issue 37): the
//! layouts, keys, channels and scripts (by SHA1) Redisson uses, waiters woken by releases and
//! by lease ends, timeouts, the watchdog renewing with Redisson's scripts and reporting holds
//! lost, and interop both ways with Redisson's scripts run by the harness (a "Java" holder).

mod client_support;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use client_support::*;
use rlock_client::{Error, PermitId, Protocol};
use rlock_tests::redisson::{self, latch as rlatch, semaphore as rsem};
use rlock_tests::{
    cmd, int, margin, pttl, raw, redis, rwlock_channel, wait_until, Server, ServerOptions,
    Subscriber, Value,
};

/// A redis-server without the rlock module.
fn plain() -> Server {
    Server::with(ServerOptions {
        module: false,
        ..Default::default()
    })
}

/// A client of `s` with a 30 s watchdog: a holder's TTL can't be what wakes a waiter.
fn slow_dog(s: &Server) -> rlock_client::Client {
    client_with(s.url(), |b| b.watchdog_timeout(Duration::from_secs(30)))
}

/// An integer reply that Redis sends as a string (`GET`, `HGET`); absent: 0.
fn num(c: &mut redis::Connection, cmd: &redis::Cmd) -> i64 {
    cmd.query::<Option<i64>>(c).unwrap().unwrap_or(0)
}

fn text(c: &mut redis::Connection, cmd: &redis::Cmd) -> Option<String> {
    cmd.query::<Option<String>>(c).unwrap()
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`).
fn numsub(c: &mut redis::Connection, channel: &str) -> i64 {
    match raw(c, &cmd!("PUBSUB", "NUMSUB", channel)) {
        Value::Array(v) => redis::from_redis_value(v[1].clone()).unwrap(),
        Value::Map(v) => redis::from_redis_value(v[0].1.clone()).unwrap(),
        other => panic!("PUBSUB NUMSUB: {other:?}"),
    }
}

/// The client's waiters are past their subscribe and re-attempt.
fn wait_subscribed(c: &mut redis::Connection, channel: &str) {
    wait_until(
        margin(Duration::from_secs(3)),
        "the waiter subscribed",
        || numsub(c, channel) == 1,
    );
}

/// Whether the server holds `script`'s SHA1 (the text this client ran is Redisson's).
fn script_loaded(c: &mut redis::Connection, script: &str) -> bool {
    let sha = redis::Script::new(script).get_hash().to_string();
    raw(c, &cmd!("SCRIPT", "EXISTS", &sha)) == Value::Array(vec![Value::Int(1)])
}

fn keys(c: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    k.sort();
    k
}

// ---- read-write lock ---------------------------------------------------------------------------

#[test]
fn rwlock_in_redissons_layout_with_its_scripts() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = client(&s); // 600 ms watchdog
    assert_eq!(client.protocol().unwrap(), Protocol::Redisson);
    let a = client.read_write_lock("rw").with_owner(client.new_owner());
    let b = client.read_write_lock("rw").with_owner(client.new_owner());
    let (oa, ob) = (a.read_lock().owner(), b.read_lock().owner());
    // Two readers, one twice.
    a.read_lock().lock().unwrap();
    a.read_lock().lock().unwrap();
    b.read_lock().lock().unwrap();
    assert_eq!(a.read_lock().hold_count().unwrap(), 2);
    assert_eq!(
        text(&mut c, &cmd!("HGET", "rw", "mode")).as_deref(),
        Some("read")
    );
    assert_eq!(num(&mut c, &cmd!("HGET", "rw", oa.as_str())), 2);
    assert_eq!(num(&mut c, &cmd!("HGET", "rw", ob.as_str())), 1);
    // One key per read hold, each with its lease (the watchdog's 600 ms).
    for k in 1..=2 {
        let key = format!("{{rw}}:{oa}:rwlock_timeout:{k}");
        let ttl = pttl(&mut c, &key);
        assert!(ttl > 0 && ttl <= 600, "{key}: {ttl}");
    }
    assert!(a.read_lock().is_locked().unwrap());
    assert!(!a.write_lock().is_locked().unwrap());
    // A writer waits while they read; a reader asking to write is refused (it would wait for
    // itself forever in Redisson).
    let w = client.read_write_lock("rw").with_owner(client.new_owner());
    assert!(!w.write_lock().try_lock().unwrap());
    assert!(matches!(
        a.write_lock().try_lock(),
        Err(Error::Deadlock { .. })
    ));
    // Byte for byte Redisson's scripts (the harness's copy, by SHA1).
    assert!(script_loaded(&mut c, redisson::READ_ACQUIRE));
    assert!(script_loaded(&mut c, redisson::WRITE_ACQUIRE));
    a.read_lock().unlock().unwrap();
    assert_eq!(a.read_lock().hold_count().unwrap(), 1);
    assert!(!exists(&mut c, &format!("{{rw}}:{oa}:rwlock_timeout:2")));
    a.read_lock().unlock().unwrap();
    assert_eq!(a.read_lock().hold_count().unwrap(), 0);
    assert!(matches!(
        a.read_lock().unlock(),
        Err(Error::NotOwner { .. })
    ));
    b.read_lock().unlock().unwrap();
    assert!(!exists(&mut c, "rw"));
    assert!(script_loaded(&mut c, redisson::READ_UNLOCK));

    // The writer: `owner:write`, re-entrant, and it may read (downgrade).
    let ow = w.write_lock().owner();
    w.write_lock().lock().unwrap();
    w.write_lock().lock().unwrap();
    assert_eq!(
        text(&mut c, &cmd!("HGET", "rw", "mode")).as_deref(),
        Some("write")
    );
    assert_eq!(num(&mut c, &cmd!("HGET", "rw", format!("{ow}:write"))), 2);
    assert_eq!(w.write_lock().hold_count().unwrap(), 2);
    assert!(w.write_lock().is_locked().unwrap());
    assert!(!w.read_lock().is_locked().unwrap());
    assert!(!a.read_lock().try_lock().unwrap());
    w.read_lock().lock().unwrap();
    assert!(
        w.read_lock().is_locked().unwrap(),
        "a writer's own read hold"
    );
    w.write_lock().unlock().unwrap();
    w.write_lock().unlock().unwrap();
    // Downgraded: a read lock now, others may read.
    assert_eq!(
        text(&mut c, &cmd!("HGET", "rw", "mode")).as_deref(),
        Some("read")
    );
    assert!(a.read_lock().try_lock().unwrap());
    a.read_lock().unlock().unwrap();
    w.read_lock().unlock().unwrap();
    assert!(!exists(&mut c, "rw"));
    assert!(script_loaded(&mut c, redisson::WRITE_UNLOCK));
    // The unlock latches' DELs are sent without waiting, as Redisson sends them.
    wait_until(
        margin(Duration::from_secs(2)),
        "no hold key, no unlock latch left",
        || keys(&mut c).is_empty(),
    );
}

#[test]
fn a_write_unlock_wakes_every_waiting_reader_and_a_read_unlock_a_writer() {
    let s = plain();
    let mut c = s.conn();
    let client = slow_dog(&s);
    let w = client.read_write_lock("rw").with_owner(client.new_owner());
    w.write_lock().lock().unwrap();
    const READERS: usize = 3;
    let all_in = Barrier::new(READERS);
    let woken = std::thread::scope(|t| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let (client, all_in) = (&client, &all_in);
                t.spawn(move || {
                    let r = client.read_write_lock("rw").read_lock();
                    assert!(r.try_lock_for(Duration::from_secs(10)).unwrap());
                    let at = Instant::now();
                    // Every reader holds it at once.
                    all_in.wait();
                    r.unlock().unwrap();
                    at
                })
            })
            .collect();
        wait_subscribed(&mut c, &rwlock_channel("rw"));
        let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock:*");
        w.write_lock().unlock().unwrap();
        let unlocked = Instant::now();
        let last = readers
            .into_iter()
            .map(|r| r.join().unwrap().duration_since(unlocked))
            .max()
            .unwrap();
        // Redisson's write unlock publishes READ_UNLOCK_MESSAGE (1): all may go.
        assert_eq!(
            sub.drain(&mut c)[0],
            (rwlock_channel("rw"), "1".to_string())
        );
        last
    });
    assert!(woken < margin(Duration::from_millis(300)), "{woken:?}");
    // A reader's unlock wakes a waiting writer.
    let r = client.read_write_lock("rw").with_owner(client.new_owner());
    r.read_lock().lock().unwrap();
    let woken = std::thread::scope(|t| {
        let writer = t.spawn(|| {
            assert!(w
                .write_lock()
                .try_lock_for(Duration::from_secs(10))
                .unwrap());
            Instant::now()
        });
        wait_subscribed(&mut c, &rwlock_channel("rw"));
        r.read_lock().unlock().unwrap();
        let unlocked = Instant::now();
        writer.join().unwrap().duration_since(unlocked)
    });
    assert!(woken < margin(Duration::from_millis(200)), "{woken:?}");
    // A wait that ends first returns false, on time.
    let start = Instant::now();
    assert!(!r
        .read_lock()
        .try_lock_for(Duration::from_millis(200))
        .unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200)
            && waited < Duration::from_millis(200) + margin(Duration::from_millis(150)),
        "{waited:?}"
    );
    w.write_lock().unlock().unwrap();
}

#[test]
fn rwlock_waiters_take_it_when_a_lease_ends() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    // A "Java" writer with a 400 ms lease that never unlocks: no message, only the TTL.
    assert_eq!(
        redisson::write_acquire(&mut c, "lease", "java:1", 400),
        Value::Nil
    );
    let r = client.read_write_lock("lease").read_lock();
    let start = Instant::now();
    assert!(r.try_lock_for(Duration::from_secs(5)).unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(350)
            && waited < Duration::from_millis(400) + margin(Duration::from_millis(200)),
        "waited {waited:?} for a 400 ms lease"
    );
    r.unlock().unwrap();
}

#[test]
fn the_watchdog_renews_both_sides_with_redissons_scripts_and_reports_lost_holds() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s); // 600 ms watchdog, renewed every 200 ms
    let rd = client.read_write_lock("r").read_lock();
    let wr = client.read_write_lock("w").write_lock();
    let gr = rd.guard().unwrap();
    let gw = wr.guard().unwrap();
    assert_eq!(client.renewing_count(), 2);
    let read_key = format!("{{r}}:{}:rwlock_timeout:1", rd.owner());
    // Timing is the behaviour here: three leases long, still held.
    std::thread::sleep(Duration::from_millis(1800));
    for key in ["r", read_key.as_str(), "w"] {
        let ttl = pttl(&mut c, key);
        assert!(ttl > 0 && ttl <= 600, "{key}: {ttl}");
    }
    assert!(!gr.is_lost() && !gw.is_lost());
    assert!(script_loaded(&mut c, redisson::READ_RENEW));
    // Gone behind their backs: the next renewals find them gone.
    int(&mut c, &cmd!("DEL", "r", "w"));
    wait_until(margin(Duration::from_secs(2)), "both holds lost", || {
        gr.is_lost() && gw.is_lost()
    });
    assert_eq!(client.renewing_count(), 0);
    // A lease given: not renewed, ends with it.
    let g = wr.guard_with_lease(Duration::from_millis(300)).unwrap();
    assert_eq!(client.renewing_count(), 0);
    let ttl = pttl(&mut c, "w");
    assert!(ttl > 0 && ttl <= 300, "{ttl}");
    drop(g);
    assert!(!exists(&mut c, "w"));
}

#[test]
fn rwlock_interop_with_redissons_scripts_both_ways() {
    let s = plain();
    let mut c = s.conn();
    let client = slow_dog(&s);
    let rw = client
        .read_write_lock("shared")
        .with_owner(client.new_owner());
    let me = rw.read_lock().owner();
    // A "Java" reader: this client reads alongside, can't write; its unlock wakes the writer.
    assert_eq!(
        redisson::read_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Nil
    );
    assert!(rw.read_lock().try_lock().unwrap());
    rw.read_lock().unlock().unwrap();
    assert!(!rw.write_lock().try_lock().unwrap());
    let woken = std::thread::scope(|t| {
        let writer = t.spawn(|| {
            assert!(rw
                .write_lock()
                .try_lock_for(Duration::from_secs(10))
                .unwrap());
            Instant::now()
        });
        wait_subscribed(&mut c, &rwlock_channel("shared"));
        assert_eq!(
            redisson::read_unlock(&mut c, "shared", "java:1"),
            Value::Int(1)
        );
        let unlocked = Instant::now();
        writer.join().unwrap().duration_since(unlocked)
    });
    assert!(woken < margin(Duration::from_millis(200)), "{woken:?}");
    // This client writes: Redisson's scripts see it as a Redisson writer.
    assert!(matches!(
        redisson::write_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Int(ms) if ms > 0
    ));
    assert!(matches!(
        redisson::read_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Int(ms) if ms > 0
    ));
    assert_eq!(
        num(&mut c, &cmd!("HGET", "shared", format!("{me}:write"))),
        1
    );
    let mut sub = Subscriber::psubscribe(&s, "redisson_rwlock:*");
    rw.write_lock().unlock().unwrap();
    assert_eq!(
        sub.drain(&mut c),
        [(rwlock_channel("shared"), "1".to_string())]
    );
    // Redisson's writer now; this client's reader waits for its unlock.
    assert_eq!(
        redisson::write_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Nil
    );
    assert!(!rw.read_lock().try_lock().unwrap());
    std::thread::scope(|t| {
        let reader = t.spawn(|| {
            rw.read_lock()
                .try_lock_for(Duration::from_secs(10))
                .unwrap()
        });
        wait_subscribed(&mut c, &rwlock_channel("shared"));
        assert_eq!(
            redisson::write_unlock(&mut c, "shared", "java:1", 30_000),
            Value::Int(1)
        );
        assert!(reader.join().unwrap());
    });
    // Redisson's renewal script renews this client's read hold (one layout).
    assert!(redisson::read_renew(
        &mut c,
        "shared",
        &[me.as_str()],
        50_000
    ));
    assert!(pttl(&mut c, &format!("{{shared}}:{me}:rwlock_timeout:1")) > 30_000);
    // Force unlock: only in the side's mode, as Redisson's.
    assert!(!rw.write_lock().force_unlock().unwrap());
    assert!(exists(&mut c, "shared"));
    assert!(rw.read_lock().force_unlock().unwrap());
    assert!(!exists(&mut c, "shared"));
    assert_eq!(
        redisson::write_acquire(&mut c, "shared", "java:1", 30_000),
        Value::Nil
    );
    assert!(!rw.read_lock().force_unlock().unwrap());
    assert!(rw.write_lock().force_unlock().unwrap());
    // Java's write unlock, then the read and write force unlocks (0 and 1, as Redisson's).
    assert_eq!(
        sub.drain(&mut c),
        [
            (rwlock_channel("shared"), "1".to_string()),
            (rwlock_channel("shared"), "0".to_string()),
            (rwlock_channel("shared"), "1".to_string())
        ]
    );
}

#[test]
fn async_rwlock_waits_are_cancel_safe() {
    let s = plain();
    let mut c = s.conn();
    let client = slow_dog(&s);
    let rt = runtime(2);
    rt.block_on(async {
        let holder = client
            .async_read_write_lock("a")
            .with_owner(client.new_owner());
        holder.write_lock().lock().await.unwrap();
        let rw = client
            .async_read_write_lock("a")
            .with_owner(client.new_owner());
        // A wait dropped by its caller: no hold.
        let dropped = tokio::time::timeout(Duration::from_millis(150), rw.read_lock().lock()).await;
        assert!(dropped.is_err());
        assert_eq!(rw.read_lock().hold_count().await.unwrap(), 0);
        let waiter = {
            let rw = rw.clone();
            tokio::spawn(async move {
                let g = rw.read_lock().guard().await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            })
        };
        while numsub(&mut c, &rwlock_channel("a")) != 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        holder.write_lock().unlock().await.unwrap();
        let unlocked = Instant::now();
        let got = waiter.await.unwrap();
        assert!(got.duration_since(unlocked) < margin(Duration::from_millis(200)));
    });
    wait_until(margin(Duration::from_secs(2)), "unsubscribed", || {
        numsub(&mut c, &rwlock_channel("a")) == 0
    });
    assert!(!exists(&mut c, "a"));
}

// ---- count-down latch --------------------------------------------------------------------------

#[test]
fn latch_in_redissons_layout_with_its_scripts() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = client(&s);
    let l = client.count_down_latch("l");
    let ch = rlatch::channel("l");
    let mut sub = Subscriber::psubscribe(&s, "redisson_countdownlatch__channel__*");
    assert_eq!(l.get_count().unwrap(), 0);
    assert!(l.wait_for(Duration::ZERO).unwrap(), "absent: open");
    assert!(l.try_set_count(2).unwrap());
    assert!(!l.try_set_count(5).unwrap());
    assert_eq!(text(&mut c, &cmd!("GET", "l")).as_deref(), Some("2"));
    assert_eq!(l.get_count().unwrap(), 2);
    l.count_down().unwrap();
    assert_eq!(l.get_count().unwrap(), 1);
    assert!(!l.wait_for(Duration::ZERO).unwrap());
    l.count_down().unwrap();
    assert!(!exists(&mut c, "l"), "deleted at zero");
    assert!(l.wait_for(Duration::ZERO).unwrap());
    l.wait().unwrap();
    // An open latch's count-down does nothing (Redisson's -1 deleted, nothing published).
    l.count_down().unwrap();
    assert!(!exists(&mut c, "l"));
    // Redisson's messages: NEW_COUNT (1) when set, ZERO_COUNT (0) at zero, 1 on a delete.
    assert!(l.try_set_count(1).unwrap());
    assert!(l.delete().unwrap());
    assert!(!l.delete().unwrap());
    assert_eq!(
        sub.drain(&mut c),
        [
            (ch.clone(), "1".to_string()),
            (ch.clone(), "0".to_string()),
            (ch.clone(), "1".to_string()),
            (ch.clone(), "1".to_string())
        ]
    );
    for script in [rlatch::TRY_SET_COUNT, rlatch::COUNT_DOWN, rlatch::DELETE] {
        assert!(script_loaded(&mut c, script));
    }
}

#[test]
fn every_latch_waiter_passes_when_it_opens() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let l = client.count_down_latch("gate");
    assert!(l.try_set_count(2).unwrap());
    const THREADS: usize = 4;
    const TASKS: usize = 4;
    let rt = runtime(2);
    let opened = std::thread::scope(|t| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let client = &client;
                t.spawn(move || {
                    let l = client.count_down_latch("gate");
                    assert!(l.wait_for(Duration::from_secs(10)).unwrap());
                    Instant::now()
                })
            })
            .collect();
        let tasks: Vec<_> = (0..TASKS)
            .map(|_| {
                let l = client.async_count_down_latch("gate");
                rt.spawn(async move {
                    assert!(l.wait_for(Duration::from_secs(10)).await.unwrap());
                    Instant::now()
                })
            })
            .collect();
        wait_subscribed(&mut c, &rlatch::channel("gate"));
        l.count_down().unwrap();
        assert_eq!(l.get_count().unwrap(), 1);
        // One count left: nobody passes (a wait for 100 ms proves the count still holds).
        assert!(!l.wait_for(Duration::from_millis(100)).unwrap());
        l.count_down().unwrap();
        let open = Instant::now();
        let mut last = Duration::ZERO;
        for th in threads {
            last = last.max(th.join().unwrap().duration_since(open));
        }
        for task in tasks {
            last = last.max(rt.block_on(task).unwrap().duration_since(open));
        }
        last
    });
    assert!(opened < margin(Duration::from_millis(300)), "{opened:?}");
    // A wait that ends first says so, on time.
    assert!(l.try_set_count(1).unwrap());
    let start = Instant::now();
    assert!(!l.wait_for(Duration::from_millis(200)).unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200)
            && waited < Duration::from_millis(200) + margin(Duration::from_millis(150)),
        "{waited:?}"
    );
    // A delete lets its waiters through (a deleted latch is open).
    std::thread::scope(|t| {
        let waiter = t.spawn(|| l.wait_for(Duration::from_secs(10)).unwrap());
        wait_subscribed(&mut c, &rlatch::channel("gate"));
        assert!(l.delete().unwrap());
        assert!(waiter.join().unwrap());
    });
}

#[test]
fn latch_interop_with_redissons_scripts_both_ways() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let l = client.count_down_latch("j");
    // Set by "Java", counted down by both, awaited here.
    assert_eq!(rlatch::try_set_count(&mut c, "j", 2), 1);
    assert!(!l.try_set_count(3).unwrap());
    assert_eq!(l.get_count().unwrap(), 2);
    std::thread::scope(|t| {
        let waiter = t.spawn(|| l.wait_for(Duration::from_secs(10)).unwrap());
        wait_subscribed(&mut c, &rlatch::channel("j"));
        l.count_down().unwrap();
        assert_eq!(rlatch::count(&mut c, "j"), 1);
        rlatch::count_down(&mut c, "j");
        assert!(waiter.join().unwrap());
    });
    // Set here: Redisson's scripts read and count it.
    assert!(l.try_set_count(1).unwrap());
    assert_eq!(rlatch::try_set_count(&mut c, "j", 5), 0);
    assert_eq!(rlatch::count(&mut c, "j"), 1);
    rlatch::count_down(&mut c, "j");
    assert!(l.wait_for(Duration::ZERO).unwrap());
    assert!(l.try_set_count(1).unwrap());
    assert_eq!(rlatch::delete(&mut c, "j"), 1);
    assert_eq!(l.get_count().unwrap(), 0);
}

// ---- permit-expirable semaphore ----------------------------------------------------------------

const SEM_CHANNEL: &str = "redisson_sc:{pes}";

/// A leased permit's score in `{pes}:timeout` (its lease's end, epoch ms), by its raw id.
fn lease_end(c: &mut redis::Connection, name: &str, id: PermitId) -> Option<i64> {
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(rsem::timeouts(name))
        .arg(id.as_bytes().as_slice())
        .query(c)
        .unwrap();
    score.map(|s| s as i64)
}

#[test]
fn leased_permits_in_redissons_layout_with_its_scripts() {
    let s = plain();
    let mut c = s.conn();
    raw(&mut c, &cmd!("SCRIPT", "FLUSH"));
    let client = client(&s);
    let pes = client.permit_expirable_semaphore("pes");
    assert!(pes.try_set_permits(2).unwrap());
    assert!(!pes.try_set_permits(9).unwrap());
    assert_eq!(num(&mut c, &cmd!("GET", "pes")), 2);
    let before = rsem::now_ms();
    let id = pes.acquire(Duration::from_secs(5)).unwrap();
    let after = rsem::now_ms();
    // The id as 16 raw bytes in `{pes}:timeout`, scored with its lease's end.
    let end = lease_end(&mut c, "pes", id).expect("leased");
    assert!(end >= before + 5000 && end <= after + 5000, "{end}");
    assert_eq!(num(&mut c, &cmd!("GET", "pes")), 1);
    assert_eq!(pes.available_permits().unwrap(), 1);
    assert_eq!(pes.acquired_permits().unwrap(), 1);
    let more = pes.try_acquire_many(2, Duration::from_secs(5)).unwrap();
    assert!(more.is_empty(), "only one left");
    let other = pes.try_acquire(Duration::from_secs(5)).unwrap().unwrap();
    assert!(pes.try_acquire(Duration::from_secs(5)).unwrap().is_none());
    // Update a lease: its score moves.
    assert!(pes.update_lease_time(id, Duration::from_secs(60)).unwrap());
    assert!(lease_end(&mut c, "pes", id).unwrap() >= after + 59_000);
    pes.release(id).unwrap();
    assert_eq!(lease_end(&mut c, "pes", id), None);
    assert!(matches!(
        pes.release(id),
        Err(Error::PermitNotLeased { .. })
    ));
    assert!(!pes.try_release(id).unwrap());
    assert!(!pes.update_lease_time(id, Duration::from_secs(1)).unwrap());
    // All or none.
    assert_eq!(pes.try_release_many(&[other, id]).unwrap(), 0);
    assert_eq!(pes.try_release_many(&[other]).unwrap(), 1);
    assert_eq!(pes.available_permits().unwrap(), 2);
    assert_eq!(pes.acquired_permits().unwrap(), 0);
    // Permits added (its own addPermits), guards give theirs back.
    assert_eq!(pes.add_permits(1).unwrap(), 3);
    {
        let g = pes.guard(Duration::from_secs(5)).unwrap();
        let gid = g.permit_id().unwrap();
        assert!(lease_end(&mut c, "pes", gid).is_some());
        assert_eq!(pes.available_permits().unwrap(), 2);
    }
    assert_eq!(pes.available_permits().unwrap(), 3);
    for script in [
        rsem::EXP_TRY_ACQUIRE,
        rsem::EXP_TRY_RELEASE,
        rsem::EXP_UPDATE_LEASE,
    ] {
        assert!(script_loaded(&mut c, script));
    }
    assert!(script_loaded(&mut c, rsem::EXP_TRY_RELEASE_MANY));
    assert!(script_loaded(&mut c, rsem::EXP_AVAILABLE));
}

#[test]
fn ended_leases_are_reclaimed_and_wake_a_waiter() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let pes = client.permit_expirable_semaphore("pes");
    assert!(pes.try_set_permits(1).unwrap());
    let g = pes.try_guard(Duration::from_millis(400)).unwrap().unwrap();
    // No release, no message: the waiter tries again when the lease ends.
    let start = Instant::now();
    let id = pes
        .try_acquire_for(Duration::from_secs(5), Duration::from_secs(5))
        .unwrap()
        .expect("the ended lease's permit");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(350)
            && waited < Duration::from_millis(400) + margin(Duration::from_millis(250)),
        "waited {waited:?} for a 400 ms lease"
    );
    assert!(g.is_lost(), "its lease ended");
    assert_eq!(lease_end(&mut c, "pes", g.permit_id().unwrap()), None);
    drop(g);
    assert_eq!(pes.available_permits().unwrap(), 0);
    // A release wakes a waiter at once; it is published as Redisson's new count.
    let woken = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            let got = pes
                .try_acquire_for(Duration::from_secs(10), Duration::from_secs(5))
                .unwrap();
            (got, Instant::now())
        });
        wait_subscribed(&mut c, SEM_CHANNEL);
        let mut sub = Subscriber::psubscribe(&s, "redisson_sc:*");
        pes.release(id).unwrap();
        let released = Instant::now();
        let (got, at) = waiter.join().unwrap();
        assert!(got.is_some());
        assert_eq!(
            sub.drain(&mut c)[0],
            (SEM_CHANNEL.to_string(), "1".to_string())
        );
        at.duration_since(released)
    });
    assert!(woken < margin(Duration::from_millis(200)), "{woken:?}");
    // A wait that ends first returns none, on time.
    let start = Instant::now();
    assert!(pes
        .try_acquire_for(Duration::from_millis(200), Duration::from_secs(1))
        .unwrap()
        .is_none());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(200)
            && waited < Duration::from_millis(200) + margin(Duration::from_millis(150)),
        "{waited:?}"
    );
}

#[test]
fn the_watchdog_renews_leased_permits_and_reports_one_gone() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s); // renewed every 200 ms
    let pes = client.permit_expirable_semaphore("pes").with_watchdog();
    assert!(pes.try_set_permits(1).unwrap());
    let g = pes.guard(Duration::from_millis(500)).unwrap();
    let id = g.permit_id().unwrap();
    // Timing is the behaviour here: three leases long, still leased, its end moving on.
    std::thread::sleep(Duration::from_millis(1500));
    let left = lease_end(&mut c, "pes", id).expect("still leased") - rsem::now_ms();
    assert!(left > 0 && left <= 500, "{left}");
    assert!(!g.is_lost());
    assert_eq!(pes.available_permits().unwrap(), 0);
    // Released behind its back by "Java": the next renewal finds it gone.
    assert_eq!(rsem::try_release(&mut c, "pes", id.as_bytes()), 1);
    wait_until(
        margin(Duration::from_secs(2)),
        "the permit reported lost",
        || g.is_lost(),
    );
    assert_eq!(client.renewing_count(), 0);
}

#[test]
fn leased_permits_interop_with_redissons_scripts_both_ways() {
    let s = plain();
    let mut c = s.conn();
    let client = client(&s);
    let pes = client.permit_expirable_semaphore("pes");
    assert_eq!(rsem::try_set_permits(&mut c, "pes", 1), 1);
    // "Java" leases the only permit: this client waits for its release.
    let (reply, ids) = rsem::lease(&mut c, "pes", 1, Some(30_000));
    assert!(matches!(reply, Value::Okay) || reply == Value::BulkString(b"OK".to_vec()));
    assert!(pes.try_acquire(Duration::from_secs(5)).unwrap().is_none());
    let mine = std::thread::scope(|t| {
        let waiter = t.spawn(|| {
            pes.try_acquire_for(Duration::from_secs(10), Duration::from_secs(30))
                .unwrap()
        });
        wait_subscribed(&mut c, SEM_CHANNEL);
        assert_eq!(rsem::try_release(&mut c, "pes", &ids[0]), 1);
        waiter.join().unwrap().expect("woken by Java's release")
    });
    // This client's permit, as Redisson's scripts see it.
    assert!(rsem::lease_time(&mut c, "pes", mine.as_bytes()) > 29_000);
    let (reply, _) = rsem::lease(&mut c, "pes", 1, Some(30_000));
    assert!(
        matches!(reply, Value::BulkString(ref b) if b.starts_with(b":")),
        "{reply:?}"
    );
    assert_eq!(
        rsem::update_lease(&mut c, "pes", mine.as_bytes(), 60_000),
        1
    );
    assert_eq!(rsem::try_release(&mut c, "pes", mine.as_bytes()), 1);
    assert!(matches!(
        pes.release(mine),
        Err(Error::PermitNotLeased { .. })
    ));
    assert_eq!(rsem::available(&mut c, "pes"), 1);
    // "Java" takes a permit with a 300 ms lease: this client reclaims it when it ends.
    let (_, ids) = rsem::lease(&mut c, "pes", 1, Some(300));
    let id = pes
        .try_acquire_for(Duration::from_secs(5), Duration::from_secs(5))
        .unwrap()
        .expect("reclaimed");
    assert_ne!(id.as_bytes().as_slice(), ids[0].as_slice());
    assert_eq!(
        rsem::try_release(&mut c, "pes", &ids[0]),
        0,
        "its lease ended"
    );
    pes.release(id).unwrap();
    assert_eq!(pes.available_permits().unwrap(), 1);
}

//! The rlock client against a 3-master Redis Cluster with the module on every node: routing by
//! slot, hash tags, fencing, FIFO waiters, and a slot migration under queued waiters.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock_tests::cluster::Cluster;
use rlock_tests::{
    cmd, exists, hgetall, int, lock_channel, lock_info, raw, string, token_key, wait_until, Server,
    Value,
};

const WAIT: Duration = Duration::from_secs(20);

fn client(cluster: &Cluster) -> rlock_client::Client {
    rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .build()
        .expect("cluster client")
}

/// Waiters queued on `key` on `server`, as RLOCK.INFO reports them.
fn queued(server: &Server, key: &str) -> Vec<String> {
    lock_info(&mut server.conn(), key).queue
}

#[test]
fn locks_live_on_the_master_of_their_slot() {
    let cluster = Cluster::start();
    let client = client(&cluster);

    // One lock name per master.
    let mut names: Vec<(String, u16)> = Vec::new();
    for i in 0.. {
        let name = format!("spread-{i}");
        let port = cluster.master_for(&name).port;
        if !names.iter().any(|(_, p)| *p == port) {
            names.push((name, port));
        }
        if names.len() == 3 {
            break;
        }
        assert!(i < 1000, "no names found for every master");
    }

    let locks: Vec<rlock_client::Lock> =
        names.iter().map(|(n, _)| client.lock(n.clone())).collect();
    for l in &locks {
        l.lock_with_lease(Duration::from_secs(30)).unwrap();
        assert_eq!(l.hold_count().unwrap(), 1);
        assert!(l.is_held_by_current_thread().unwrap());
    }
    let owner = client.current_thread_owner();
    for (name, port) in &names {
        for m in &cluster.masters {
            let mut c = m.conn();
            if m.port == *port {
                assert_eq!(
                    hgetall(&mut c, name),
                    rlock_tests::holder(owner.as_str(), 1),
                    "{name} on its master :{port}"
                );
                let info = lock_info(&mut c, name);
                assert_eq!(info.owner.as_deref(), Some(owner.as_str()));
            } else {
                assert_eq!(int(&mut c, &cmd!("DBSIZE")), 1, "one lock per master");
                assert!(
                    matches!(raw(&mut c, &cmd!("EXISTS", name)), Value::ServerError(_)),
                    "a master that does not serve {name} redirects"
                );
            }
        }
    }
    // A second acquire from another thread (another owner) is refused on every node.
    let l2: Vec<rlock_client::Lock> = names.iter().map(|(n, _)| client.lock(n.clone())).collect();
    std::thread::spawn(move || {
        for l in &l2 {
            assert!(!l.try_lock().unwrap());
        }
    })
    .join()
    .unwrap();
    for l in &locks {
        l.unlock().unwrap();
        assert!(!l.is_locked().unwrap());
    }
    for m in &cluster.masters {
        assert_eq!(int(&mut m.conn(), &cmd!("DBSIZE")), 0);
    }

    // The watchdog renews locks on every master (one RLOCK.RENEW per lock, each routed to its
    // node): held for several leases, never lost.
    let wd = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let guards: Vec<_> = names
        .iter()
        .map(|(n, _)| wd.lock(n.clone()).guard().unwrap())
        .collect();
    assert_eq!(wd.renewing_count(), 3);
    std::thread::sleep(Duration::from_millis(2000)); // > 3 leases
    for ((name, port), g) in names.iter().zip(&guards) {
        assert!(!g.is_lost(), "{name} renewed");
        let ttl = rlock_tests::pttl(&mut cluster.by_port(*port).conn(), name);
        assert!(ttl > 0, "{name} still held on :{port} (pttl {ttl})");
    }
    drop(guards);
    for m in &cluster.masters {
        assert_eq!(int(&mut m.conn(), &cmd!("DBSIZE")), 0, "guards released");
    }
}

#[test]
fn hash_tags_keep_token_key_and_channel_in_the_lock_slot_and_fence_works() {
    let cluster = Cluster::start();
    let client = client(&cluster);

    for name in ["{orders}:42", "plain-name"] {
        let slot = cluster.slot(name);
        assert_eq!(
            cluster.slot(&token_key(name)),
            slot,
            "{name}: token key slot"
        );
        assert_eq!(
            cluster.slot(&lock_channel(name)),
            slot,
            "{name}: channel slot"
        );
        let master = cluster.master_for(name);

        // The release message arrives on the shard channel of the lock's slot.
        let mut sub = master.conn();
        sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        sub.send_packed_command(&cmd!("SSUBSCRIBE", lock_channel(name)).get_packed_command())
            .unwrap();
        let confirm = sub.recv_response().unwrap();
        assert!(
            matches!(confirm, Value::Array(_) | Value::Push { .. }),
            "{confirm:?}"
        );

        let lock = client.fenced_lock(name);
        let t1 = lock
            .lock_and_get_token_with_lease(Duration::from_secs(30))
            .unwrap();
        let t2 = lock
            .lock_and_get_token_with_lease(Duration::from_secs(30))
            .unwrap();
        assert!(t2 > t1, "re-entry gets a greater token: {t1} then {t2}");
        assert_eq!(lock.token().unwrap(), Some(t2));
        let mut c = master.conn();
        assert_eq!(
            string(&mut c, &cmd!("GET", token_key(name))),
            t2.to_string(),
            "{name}: the token key lives on the lock's master"
        );
        lock.unlock().unwrap();
        lock.unlock().unwrap();
        let msg = sub.recv_response().expect("release message");
        let parts = match msg {
            Value::Array(p) | Value::Push { data: p, .. } => p,
            other => panic!("unexpected frame {other:?}"),
        };
        let parts: Vec<String> = parts
            .iter()
            .map(|p| rlock_tests::text(p).unwrap_or_default())
            .collect();
        assert_eq!(parts, ["smessage", &lock_channel(name), "0"], "{name}");

        // The token survives the release and keeps growing, from another owner too.
        let other = client.fenced_lock(name);
        let t3 = std::thread::spawn(move || {
            let t = other
                .lock_and_get_token_with_lease(Duration::from_secs(30))
                .unwrap();
            other.unlock().unwrap();
            t
        })
        .join()
        .unwrap();
        assert!(t3 > t2, "{name}: {t3} > {t2}");
        assert!(!exists(&mut c, name));
    }
}

#[test]
fn waiters_are_served_in_arrival_order() {
    let cluster = Cluster::start();
    let client = client(&cluster);
    let name = "{fifo}:lock";
    let master = cluster.master_for(name);

    let holder = client.lock(name);
    holder.lock_with_lease(Duration::from_secs(30)).unwrap();

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    let mut expected = Vec::new();
    for i in 0..4 {
        let lock = client.lock(name);
        let order = order.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        threads.push(std::thread::spawn(move || {
            tx.send(lock.owner().as_str().to_string()).unwrap();
            assert!(lock.try_lock_with(WAIT, Duration::from_secs(30)).unwrap());
            order.lock().unwrap().push(i);
            lock.unlock().unwrap();
        }));
        let owner = rx.recv().unwrap();
        expected.push(owner);
        // Queue the next one only after this one is parked on the server.
        wait_until(WAIT, &format!("waiter {i} queued"), || {
            queued(master, name).len() == i + 1
        });
    }
    assert_eq!(
        queued(master, name),
        expected,
        "server queue in arrival order"
    );
    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    assert!(!exists(&mut master.conn(), name));
}

#[test]
fn waiters_follow_a_migrated_slot() {
    let cluster = Cluster::start();
    let client = client(&cluster);
    let name = "{mig}:lock";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);

    let holder = client.fenced_lock(name);
    let t0 = holder
        .lock_and_get_token_with_lease(Duration::from_secs(60))
        .unwrap();

    // Two client waiters, plus one raw waiter that shows what the server answers.
    let got = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..2 {
        let lock = client.fenced_lock(name);
        let got = got.clone();
        threads.push(std::thread::spawn(move || {
            let token = lock
                .try_lock_and_get_token_with(Duration::from_secs(40), Duration::from_secs(30))
                .unwrap()
                .unwrap_or_else(|| panic!("waiter {i} got the lock"));
            got.lock().unwrap().push(token);
            lock.unlock().unwrap();
        }));
    }
    wait_until(WAIT, "two waiters queued on the source", || {
        queued(source, name).len() == 2
    });
    let raw_waiter = rlock_tests::Pending::send(
        source,
        &cmd!("RLOCK.ACQUIRE", name, "raw:1", 30000, "BLOCK", 0),
    );
    wait_until(WAIT, "raw waiter queued", || {
        queued(source, name).len() == 3
    });

    cluster.migrate_slot(slot, source, target, || {
        // The lock is on the target now; nobody may be left waiting for it on the source.
        let mut src = source.conn();
        wait_until(WAIT, "source waiters released", || {
            rlock_tests::rlock_stat(&mut src, "waiters") == 0
        });
    });
    let reply = raw_waiter.reply();
    let err = rlock_tests::error_text(&reply)
        .unwrap_or_else(|| panic!("the raw waiter gets an error, got {reply:?}"));
    assert!(
        err.starts_with("TRYAGAIN") || err.starts_with("MOVED") || err.starts_with("ASK"),
        "waiter on the migrated slot: {err}"
    );

    // The client waiters queued again on the new owner.
    wait_until(WAIT, "client waiters queued on the target", || {
        queued(target, name).len() == 2
    });
    let mut t = target.conn();
    assert_eq!(
        lock_info(&mut t, name).token,
        Some(t0 as i64),
        "lock and token moved"
    );
    // Nothing waits on the source (the client's waits are queued in its session there:
    // no blocked connection, and no request left).
    assert_eq!(rlock_tests::rlock_stat(&mut source.conn(), "waiters"), 0);
    assert_eq!(
        rlock_tests::rlock_stat(&mut source.conn(), "session_requests"),
        0
    );
    holder.unlock().unwrap();
    for th in threads {
        th.join().unwrap();
    }
    let tokens = got.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert!(
        tokens.iter().all(|&x| x > t0) && tokens[1] > tokens[0],
        "tokens grow across the migration: {t0} then {tokens:?}"
    );
    let distinct: BTreeSet<u64> = tokens.iter().copied().collect();
    assert_eq!(distinct.len(), 2);
    assert!(!exists(&mut t, name));
}

/// Issue 22, item 4: names whose Redisson-derived auxiliary keys would land in another slot
/// (`x}y`: `{x}y}:...` hashes `x`; `{}x`: an empty tag hashes every key whole; `a{b`: no tag,
/// likewise) are refused by the commands that would write those keys, with CROSSSLOT naming
/// both slots, before anything is written. What writes no auxiliary key still works.
#[test]
fn names_whose_keys_would_leave_their_slot_are_refused_before_any_write() {
    let cluster = Cluster::start();
    let refused = |name: &str, cmd: redis::Cmd, aux: &str| {
        let master = cluster.master_for(name);
        let mut c = master.conn();
        let err = rlock_tests::err(&mut c, &cmd);
        let (home, away) = (cluster.slot(name), cluster.slot(aux));
        assert_ne!(home, away, "{aux} shares {name}'s slot");
        assert!(err.starts_with("CROSSSLOT "), "{name}: {err}");
        assert!(err.contains("hash tag"), "{name}: {err}");
        assert!(
            err.contains(&format!("'{name}' (slot {home})"))
                && err.contains(&format!("'{aux}' (slot {away})")),
            "{name}: the error names both keys and slots as CLUSTER KEYSLOT does: {err}"
        );
        // Nothing was written, on any node (the cluster is empty until the refusals are done).
        for m in &cluster.masters {
            assert_eq!(rlock_tests::dbsize(&mut m.conn()), 0, "keys on {}", m.port);
        }
    };
    refused(
        "x}y",
        cmd!("RRWLOCK.ACQUIRE", "x}y", "a:1", "READ", 30_000),
        "{x}y}:a:1:rwlock_timeout:1",
    );
    refused(
        "{}x",
        cmd!(
            "RRWLOCK.ACQUIRE",
            "{}x",
            "a:1",
            "READ",
            30_000,
            "BLOCK",
            100
        ),
        "{}x:a:1:rwlock_timeout:1",
    );
    refused(
        "a{b",
        cmd!("RRWLOCK.ACQUIRE", "a{b", "a:1", "READ", 30_000),
        "a{b:a:1:rwlock_timeout:1",
    );
    refused(
        "x}y-s",
        cmd!("RSEM.ACQUIRE", "x}y-s", "LEASE", 30_000),
        "{x}y-s}:timeout",
    );
    refused(
        "a{b-l",
        cmd!("RLOCK.ACQUIRE", "a{b-l", "a:1", 30_000, "FENCE"),
        "redisson_lock_token:a{b-l",
    );

    // Requests that write no auxiliary key are unchanged: a plain lock, a write lock, a
    // semaphore without leases.
    let mut c = cluster.master_for("a{b-l").conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "a{b-l", "a:1", 30_000)),
        1
    );
    let mut c = cluster.master_for("x}y").conn();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "x}y", "w:1", "WRITE", 30_000)
        ),
        1
    );
    let mut c = cluster.master_for("x}y-s").conn();
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "x}y-s", 2)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "x}y-s")), 1);
    // A leased permit is still refused, and the count is untouched by the refusal.
    let err = rlock_tests::err(&mut c, &cmd!("RSEM.ACQUIRE", "x}y-s", "LEASE", 1_000));
    assert!(err.starts_with("CROSSSLOT "), "{err}");
    assert_eq!(string(&mut c, &cmd!("GET", "x}y-s")), "1");

    // Names with a proper tag, or no brace at all, keep every key in their slot.
    for (name, aux) in [
        ("{app}:rw", "{app}:rw:a:1:rwlock_timeout:1"),
        ("plain-rw", "{plain-rw}:a:1:rwlock_timeout:1"),
    ] {
        let mut c = cluster.master_for(name).conn();
        assert_eq!(
            int(
                &mut c,
                &cmd!("RRWLOCK.ACQUIRE", name, "a:1", "READ", 30_000)
            ),
            1
        );
        assert!(exists(&mut c, aux), "{aux} next to {name}");
    }
}

#[test]
fn odd_names_keep_redissons_keys_outside_a_cluster() {
    // On a single server any name keeps Redisson's exact keys, whatever slot they would hash to.
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "x}y", "a:1", "READ", 30_000)
        ),
        1
    );
    assert!(exists(&mut c, "{x}y}:a:1:rwlock_timeout:1"));
    let t = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "a{b-l", "a:1", 30_000, "FENCE"),
    );
    assert_eq!(
        string(&mut c, &cmd!("GET", "redisson_lock_token:a{b-l")),
        t.to_string()
    );
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "x}y-s", 1)), 1);
    let leased = raw(&mut c, &cmd!("RSEM.ACQUIRE", "x}y-s", "LEASE", 30_000));
    assert!(rlock_tests::error_text(&leased).is_none(), "{leased:?}");
    assert_eq!(int(&mut c, &cmd!("ZCARD", "{x}y-s}:timeout")), 1);
}

/// A refusal through a cluster is an error of its kind, never a grant. redis-rs' cluster
/// connection hands a server's error reply back as a value unless it is a redirect: before, a
/// refused `RSEM.ACQUIRE` read as granted (any reply but nil grants: a permit held by nobody's
/// count, beyond the semaphore's bound), a refused lock as a broken connection, and a release of
/// a permit no longer leased as one too (`NOPERMIT` seen as "can't reach Redis").
#[test]
fn a_refusal_through_a_cluster_is_an_error_never_a_grant() {
    use rlock_client::Error;
    let cluster = Cluster::start();
    let client = client(&cluster);
    for name in ["refused:lock", "refused:sem"] {
        let mut m = cluster.master_for(name).conn();
        assert_eq!(string(&mut m, &cmd!("SET", name, "not an object")), "OK");
    }
    let sem = client.semaphore("refused:sem");
    let got = sem.try_acquire();
    assert!(got.is_err(), "a refused acquire, at once: {got:?}");
    let got = sem.try_acquire_for(Duration::from_millis(100));
    assert!(got.is_err(), "a refused acquire that may wait: {got:?}");
    let got = client.lock("refused:lock").try_lock();
    assert!(matches!(got, Err(Error::WrongType { .. })), "{got:?}");

    let exp = client.permit_expirable_semaphore("granted:sem");
    assert!(exp.try_set_permits(1).unwrap());
    let id = exp.acquire(Duration::from_secs(10)).unwrap();
    exp.release(id).unwrap();
    let again = exp.release(id);
    assert!(
        matches!(again, Err(Error::PermitNotLeased { .. })),
        "{again:?}"
    );
    assert_eq!(exp.available_permits().unwrap(), 1);
}

//! Sessions: memory, failover, cluster.

use super::*;

/// Queue `n` requests (distinct owners) on the held lock `key` in session `name`, pipelined.
fn queue_many(c: &mut redis::Connection, key: &str, name: &str, n: i64, timeout_ms: i64) {
    for chunk in 0..(n + 999) / 1000 {
        let mut p = redis::pipe();
        for i in chunk * 1000..((chunk + 1) * 1000).min(n) {
            p.add_command(queue_cmd(
                key,
                &format!("owner:{i:06}"),
                60_000,
                name,
                i,
                timeout_ms,
            ));
        }
        let replies: Vec<Value> = p.query(c).unwrap();
        assert!(
            replies
                .iter()
                .all(|r| *r == Value::SimpleString("QUEUED".into())),
            "{:?}",
            replies
                .iter()
                .find(|r| **r != Value::SimpleString("QUEUED".into()))
        );
    }
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    info_int(c, "memory", "used_memory")
}

#[test]
fn ten_thousand_queued_requests_leave_no_memory_behind_when_their_session_expires() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "hot", "holder", 600_000);
    // The baseline is taken after a round of 10 requests: Redis 7 allocates a latency
    // histogram of about 50 KB for each command the first time it is called (measured:
    // used_memory +50 KB at the first RSESSION.OPEN, +65 KB at the first RSESSION.READ), and
    // that is not the module's memory.
    let mut baseline = 0;
    let mut results = Vec::new();
    let rounds = [
        ("warm-up", 10, 0),
        ("without deadlines", 10_000, 0),
        ("with deadlines", 10_000, 600_000),
    ];
    for (round, n, timeout_ms) in rounds {
        let l = Listener::open(&s, "big", 100);
        let reader = l.park(&s, &mut c);
        let before = used_memory(&mut c); // with the listener's connections
        let clients = info_int(&mut c, "clients", "connected_clients");
        // Queued from a connection of their own, closed before measuring (its buffers go).
        queue_many(&mut s.conn(), "hot", "big", n, timeout_ms);
        wait_until(
            Duration::from_secs(10),
            "the queueing connection closed",
            || info_int(&mut c, "clients", "connected_clients") == clients,
        );
        assert_eq!(rlock_stat(&mut c, "session_requests"), n);
        assert_eq!(lock_info(&mut c, "hot").waiters, n);
        let per_request = (used_memory(&mut c) - before) / n;
        // The session expires 100 ms after its listener goes: every request leaves.
        assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
        drop((reader, l));
        wait_until(
            Duration::from_secs(30),
            "the session and its requests gone",
            || {
                rlock_stat(&mut c, "sessions") == 0
                    && rlock_stat(&mut c, "waiters") == 0
                    && info_int(&mut c, "clients", "connected_clients") == 1
            },
        );
        assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
        assert_eq!(
            rlock_stat(&mut c, "timer_jobs"),
            0,
            "no timer job left behind"
        );
        assert_eq!(lock_info(&mut c, "hot").queue, Vec::<String>::new());
        assert_eq!(hgetall(&mut c, "hot"), holder("holder", 1));
        let after = used_memory(&mut c);
        if n < 10_000 {
            baseline = after;
            continue;
        }
        println!(
            "{round}: {n} queued requests on one session: {per_request} bytes per request \
             (used_memory); baseline {baseline}, after expiry {after} ({} bytes)",
            after - baseline
        );
        results.push((round, per_request, after));
    }
    for (round, per_request, after) in results {
        // A leak of 8 bytes per request would be 80 KB; the margin is for Redis' own buffers
        // and statistics, which move by a few KB between two readings.
        assert!(
            (after - baseline).abs() <= 32 * 1024,
            "{round}: used_memory {baseline} before, {after} after expiry ({} bytes)",
            after - baseline
        );
        assert!(
            per_request <= 1024,
            "{round}: {per_request} bytes per queued request"
        );
    }
}

#[test]
fn a_demoted_master_ends_queued_session_requests_with_an_unblocked_outcome() {
    let m = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..ServerOptions::default()
    });
    let r = Server::with(ServerOptions {
        replica_of: Some(m.port),
        ..ServerOptions::default()
    });
    let mut rc = r.conn();
    let mut c = m.conn();
    let online = format!("port={},state=online", r.port);
    wait_until(Duration::from_secs(10), "replica online", || {
        info_field(&mut rc, "replication", "master_link_status").as_deref() == Some("up")
            && string(&mut c, &cmd!("INFO", "replication")).contains(&online)
    });
    let l = Listener::open(&m, "app", 10_000);
    hold_and_queue(&mut c, 2, "app");
    let reader = l.park(&m, &mut c);
    assert_eq!(wait_replicas(&mut c, 1), 1, "the locks reached the replica");

    assert_eq!(string(&mut rc, &cmd!("REPLICAOF", "NO", "ONE")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("REPLICAOF", "127.0.0.1", r.port)),
        "OK"
    );
    // Redis itself ends every blocked client of a demoted master, the parked read too.
    let e = error_text(&reader.reply()).unwrap_or_default();
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    // The listener reads the outcomes on the demoted server (sessions answer on a replica).
    let mut c = m.conn();
    let mut got = outcomes(&raw(&mut c, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(got.len(), 2, "{got:?}");
    got.sort_by_key(|o| o.request);
    for (i, o) in got.iter().enumerate() {
        assert_eq!((o.kind.as_str(), o.request), ("error", Some(i as i64 + 1)));
        assert!(o.text().starts_with("UNBLOCKED"), "{o:?}");
    }
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
    // The client queues again on the new master.
    let _l2 = Listener::open(&r, "app", 10_000);
    queued(&mut rc, &queue_cmd("k1", "o1", 60_000, "app", 3, 0));
    assert_eq!(queue_of(&mut rc, "k1"), ["o1"]);
}

#[test]
fn a_slot_migration_ends_queued_session_requests_with_tryagain() {
    let cluster = Cluster::start();
    let name = "{mig}:session-lock";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut c = source.conn();
    acquire(&mut c, name, "holder", 60_000);
    let l = Listener::open(source, "app", 10_000);
    queued(&mut c, &queue_cmd(name, "o1", 60_000, "app", 1, 0));
    let reader = l.park(source, &mut c);
    cluster.migrate_slot(slot, source, target, || {
        wait_until(Duration::from_secs(20), "session request ended", || {
            rlock_stat(&mut c, "session_requests") == 0
        });
    });
    let got = outcomes(&reader.reply());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_kinds(&got, &[("error", Some(1))]);
    assert!(got[0].text().starts_with("TRYAGAIN"), "{got:?}");
    let info = lock_info(&mut target.conn(), name);
    assert_eq!((info.owner.as_deref(), info.waiters), (Some("holder"), 0));
}

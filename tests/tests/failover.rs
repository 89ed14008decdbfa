//! Failover with a lock held and waiters queued: `CLUSTER FAILOVER` in a cluster, and
//! `REPLICAOF NO ONE` + `REPLICAOF` in a plain master/replica pair behind a switchable address.
//! Waiters on the demoted node are released with an error (never left blocked on a replica),
//! the client queues them again on the new master, and with replica sync on every granted lock
//! is on the replica before the client returns. On Valkey 9, which no longer releases clients a
//! module blocked without keys at a failover, rlock releases them itself.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock_tests::cluster::Cluster;
use rlock_tests::{
    cmd, error_text, exists, free_port, info_field, info_int, int, lock_info, raw, redis, string,
    wait_blocked, wait_until, Pending, Server, ServerOptions, Value,
};

const WAIT: Duration = Duration::from_secs(30);

fn role(server: &Server) -> String {
    info_field(&mut server.conn(), "replication", "role").unwrap_or_default()
}

fn wait_link_up(replica: &Server) {
    let mut c = replica.conn();
    wait_until(WAIT, &format!("replica :{} link up", replica.port), || {
        info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
    });
}

/// `HGET key owner` on `server`, reading as a replica may be read (`READONLY` in cluster mode).
fn hold_on(server: &Server, key: &str, owner: &str, cluster: bool) -> Option<String> {
    let mut c = server.conn();
    if cluster {
        assert_eq!(string(&mut c, &cmd!("READONLY")), "OK");
    }
    redis::cmd("HGET")
        .arg(key)
        .arg(owner)
        .query(&mut c)
        .unwrap()
}

fn queued(server: &Server, key: &str) -> usize {
    lock_info(&mut server.conn(), key).queue.len()
}

/// The error a waiter parked on a node gets when the node is demoted.
#[track_caller]
fn assert_demotion_error(reply: Value) {
    let err = error_text(&reply)
        .unwrap_or_else(|| panic!("a waiter on a demoted master gets an error, got {reply:?}"));
    // Redis' own answer to every client blocked on a node that becomes a replica.
    assert!(
        err.starts_with("UNBLOCKED") && err.contains("master -> replica"),
        "demotion error: {err}"
    );
}

/// A demotion in the same event-loop turn as a grant (the grant's reply not sent yet): the
/// server answers the waiter `UNBLOCKED ...` itself and closes its connection, and that must be
/// the waiter's only reply. On Redis 7.0 and 7.2 the module also replied the grant behind the
/// error (`:1` read next on that connection): a client reading on, or a pooled connection used
/// again before the close was seen, took it for the reply to its next command, e.g. another
/// lock's acquire. Every server now gives the one reply.
#[test]
fn a_demotion_in_the_same_turn_as_a_grant_is_the_waiters_only_reply() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "lk", "holder", 30_000)),
        1
    );
    let w = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "lk", "w", 30_000, "BLOCK", 0));
    wait_blocked(&mut c, 1);
    // Nothing listens there: the node stays a replica, with no primary's data over its own.
    let nowhere = free_port();
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RLOCK.RELEASE", "lk", "holder")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut c, &cmd!("REPLICAOF", "127.0.0.1", nowhere)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Int(0), Value::Okay]),
        "released to the waiter, then demoted"
    );
    let (reply, mut conn) = w.reply_and_conn();
    assert_demotion_error(reply);
    match conn.recv_response() {
        Err(e) => assert!(e.is_connection_dropped() || e.is_io_error(), "{e}"),
        Ok(second) => panic!("a second reply after UNBLOCKED: {second:?}"),
    }
    assert_eq!(string(&mut c, &cmd!("PING")), "PONG", "the server lives on");
}

/// Client waiters for `name` that check, once granted, that their hold is already on the node
/// `replica_port` (the replica after the failover) before they do anything else.
fn spawn_waiters(
    client: &rlock_client::Client,
    name: &str,
    n: usize,
    replica_port: u16,
    cluster: bool,
) -> (Vec<std::thread::JoinHandle<()>>, Arc<Mutex<Vec<u64>>>) {
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let threads = (0..n)
        .map(|i| {
            let lock = client.fenced_lock(name);
            let tokens = tokens.clone();
            let name = name.to_string();
            std::thread::spawn(move || {
                let token = lock
                    .try_lock_and_get_token_with(Duration::from_secs(60), Duration::from_secs(30))
                    .unwrap_or_else(|e| panic!("waiter {i}: {e}"))
                    .unwrap_or_else(|| panic!("waiter {i} got the lock"));
                // Replica sync: the grant is on the replica before the client returned.
                let replica = FixedNode(replica_port);
                assert_eq!(
                    replica
                        .hold(&name, lock.owner().as_str(), cluster)
                        .as_deref(),
                    Some("1"),
                    "waiter {i}: the granted lock is on the replica"
                );
                tokens.lock().unwrap().push(token);
                lock.unlock().unwrap();
            })
        })
        .collect();
    (threads, tokens)
}

/// A node known only by its port (the waiter threads can't borrow the `Server`).
struct FixedNode(u16);

impl FixedNode {
    fn hold(&self, key: &str, owner: &str, cluster: bool) -> Option<String> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.0)).unwrap();
        let mut c = client.get_connection().unwrap();
        if cluster {
            let _: () = redis::cmd("READONLY").query(&mut c).unwrap();
        }
        redis::cmd("HGET")
            .arg(key)
            .arg(owner)
            .query(&mut c)
            .unwrap()
    }
}

#[test]
fn cluster_failover_releases_waiters_and_the_client_requeues_them() {
    let cluster = Cluster::with_replicas();
    let name = "{failover}:lock";
    let master = cluster.master_for(name);
    let replica = cluster.replica_of(master.port);
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .replica_sync(Some(Duration::from_secs(5)))
        .build()
        .unwrap();

    let holder = client.fenced_lock(name);
    let t0 = holder
        .lock_and_get_token_with_lease(Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        hold_on(replica, name, holder.owner().as_str(), true).as_deref(),
        Some("1"),
        "replica sync: the lock is on the replica when lock() returns"
    );

    let (threads, tokens) = spawn_waiters(&client, name, 2, master.port, true);
    wait_until(WAIT, "two client waiters queued", || {
        queued(master, name) == 2
    });
    let raw_waiter = Pending::send(
        master,
        &cmd!("RLOCK.ACQUIRE", name, "raw:1", 30000, "BLOCK", 0),
    );
    wait_until(WAIT, "raw waiter queued", || queued(master, name) == 3);

    assert_eq!(
        string(&mut replica.conn(), &cmd!("CLUSTER", "FAILOVER")),
        "OK"
    );
    wait_until(WAIT, "roles swapped", || {
        role(replica) == "master" && role(master) == "slave"
    });
    // Every server releases the waiters with Redis' demotion error. Valkey 9 no longer
    // unblocks clients a module blocked without keys at a failover; rlock ends them itself on
    // the role change, with the same error.
    assert_demotion_error(raw_waiter.reply());
    // The client's session listener reads its waits' demotion outcomes there, then leaves the
    // replica (a moment after the raw waiter's reply).
    let mut m = master.conn();
    wait_until(WAIT, "nobody is left blocked on the demoted node", || {
        info_int(&mut m, "clients", "blocked_clients") == 0
    });
    cluster.wait_ok();

    // The client waiters queued again on the new master, which has the lock and its token.
    wait_until(WAIT, "client waiters queued on the new master", || {
        queued(replica, name) == 2
    });
    let info = lock_info(&mut replica.conn(), name);
    assert_eq!(info.owner.as_deref(), Some(holder.owner().as_str()));
    assert_eq!(info.token, Some(t0 as i64));

    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.iter().all(|&t| t > t0), "{t0} then {tokens:?}");
    assert!(!exists(&mut replica.conn(), name));
}

// ---------------------------------------------------------------------------------------------
// A plain master/replica pair behind one address (as a virtual IP or a proxy provides)
// ---------------------------------------------------------------------------------------------

/// A TCP forwarder on a loopback port: new connections go to the current target; switching
/// the target closes every forwarded connection (as a virtual IP moving to another host does).
struct Proxy {
    port: u16,
    target: Arc<AtomicU16>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let p = Proxy {
            port,
            target: Arc::new(AtomicU16::new(target)),
            conns: Arc::new(Mutex::new(Vec::new())),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let (target, conns, stop) = (p.target.clone(), p.conns.clone(), p.stop.clone());
        std::thread::spawn(move || {
            for down in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(down) = down else { continue };
                let Ok(up) = TcpStream::connect(("127.0.0.1", target.load(Ordering::SeqCst)))
                else {
                    continue;
                };
                {
                    let mut c = conns.lock().unwrap();
                    c.push(down.try_clone().unwrap());
                    c.push(up.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up, down),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        loop {
                            match from.read(&mut buf) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if to.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                        let _ = from.shutdown(Shutdown::Both);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        p
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Send new connections to `port`, leaving the current ones where they are (a load
    /// balancer draining its old backend).
    fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }

    /// Send new connections to `port` and close the current ones.
    fn switch(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
        for s in self.conns.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

#[test]
fn replicaof_failover_releases_waiters_and_the_client_requeues_them() {
    let a = Server::start();
    let b = Server::with(ServerOptions {
        replica_of: Some(a.port),
        ..ServerOptions::default()
    });
    wait_link_up(&b);
    let proxy = Proxy::start(a.port);
    let client = rlock_client::Client::builder()
        .url(proxy.url())
        .replica_sync(Some(Duration::from_secs(5)))
        .build()
        .unwrap();
    let name = "pair-lock";

    let holder = client.fenced_lock(name);
    let t0 = holder
        .lock_and_get_token_with_lease(Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        hold_on(&b, name, holder.owner().as_str(), false).as_deref(),
        Some("1"),
        "replica sync: the lock is on the replica when lock() returns"
    );

    let (threads, tokens) = spawn_waiters(&client, name, 2, a.port, false);
    wait_until(WAIT, "two client waiters queued", || queued(&a, name) == 2);
    let raw_waiter = Pending::send(&a, &cmd!("RLOCK.ACQUIRE", name, "raw:1", 30000, "BLOCK", 0));
    wait_until(WAIT, "raw waiter queued", || queued(&a, name) == 3);

    // Promote B, demote A, move the address.
    assert_eq!(string(&mut b.conn(), &cmd!("REPLICAOF", "NO", "ONE")), "OK");
    assert_eq!(
        string(&mut a.conn(), &cmd!("REPLICAOF", "127.0.0.1", b.port)),
        "OK"
    );
    proxy.switch(b.port);
    assert_demotion_error(raw_waiter.reply());
    assert_eq!(
        info_int(&mut a.conn(), "clients", "blocked_clients"),
        0,
        "nobody is left blocked on the demoted node"
    );
    // A waiter that comes back to the demoted node is refused, not parked.
    let refused = raw(
        &mut a.conn(),
        &cmd!("RLOCK.ACQUIRE", name, "raw:2", 30000, "BLOCK", 0),
    );
    assert!(
        error_text(&refused).is_some_and(|e| e.starts_with("READONLY")),
        "{refused:?}"
    );

    wait_until(WAIT, "client waiters queued on the new master", || {
        queued(&b, name) == 2
    });
    let info = lock_info(&mut b.conn(), name);
    assert_eq!(info.owner.as_deref(), Some(holder.owner().as_str()));
    assert_eq!(info.token, Some(t0 as i64));
    // Replica sync needs the demoted node attached to the new master before the grants.
    wait_link_up(&a);

    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.iter().all(|&t| t > t0), "{t0} then {tokens:?}");
    assert!(!exists(&mut b.conn(), name));
}

/// Close the connections named `name` on `server` (`CLIENT SETNAME`): the rlock client's
/// command connections are `rlock`, its session listener `rlock-session`.
fn kill_named(server: &Server, name: &str) -> usize {
    let mut c = server.conn();
    let list = string(&mut c, &cmd!("CLIENT", "LIST"));
    let ids: Vec<String> = list
        .lines()
        .filter(|l| l.split(' ').any(|f| f == format!("name={name}")))
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("id="))
                .map(str::to_string)
        })
        .collect();
    for id in &ids {
        let _ = raw(&mut c, &cmd!("CLIENT", "KILL", "ID", id.as_str()));
    }
    ids.len()
}

fn sessions_on(server: &Server) -> usize {
    match raw(&mut server.conn(), &cmd!("RSESSION.LIST")) {
        Value::Array(v) => v.len(),
        other => panic!("RSESSION.LIST: {other:?}"),
    }
}

/// An address that moves to another server while established connections stay where they were
/// (a virtual IP or a load balancer that sends new connections to the new server and drains
/// the old ones): the client's session listener still reads its session on the old server,
/// and an acquire that reaches the new one names a session that server never had. The client
/// sees the server there is another process, leaves that session and opens one on the new
/// server. Without it the acquire was refused `NOSESSION` until its retries ran out (the
/// listener, happily reading on the old server, never noticed).
#[test]
fn an_address_that_moves_under_a_live_listener_gets_a_session_on_the_new_server() {
    let a = Server::start();
    let b = Server::start();
    let proxy = Proxy::start(a.port);
    let client = rlock_client::Client::open(proxy.url()).unwrap();
    let first = client.lock("moving:1");
    first.lock().unwrap();
    first.unlock().unwrap();
    assert_eq!(sessions_on(&a), 1, "the client's session is open on A");

    proxy.retarget(b.port);
    // The command connections reconnect (to B); the listener stays on A.
    assert!(kill_named(&a, "rlock") >= 1);
    let lock = client.lock("moving:2");
    let guard = lock.guard().expect("lock() through the moved address");
    assert!(exists(&mut b.conn(), "moving:2"), "taken on B");
    assert!(!exists(&mut a.conn(), "moving:2"));
    assert_eq!(sessions_on(&b), 1, "the client opened a session on B");
    // The new session watches the hold: B tells the client when it is lost.
    let _ = raw(&mut b.conn(), &cmd!("RLOCK.FORCERELEASE", "moving:2"));
    wait_until(WAIT, "the hold on B reported lost", || guard.is_lost());
}

//! The failover torture test on a cluster (3 primaries, 1 replica each, the module on every
//! node): clients take fenced locks in a loop and write to a fenced resource (see
//! `rlock_tests::torture`) while primaries are killed (`SIGKILL`, then restarted: they rejoin as
//! replicas), stopped past the node timeout (`SIGSTOP` / `SIGCONT`), failed over by hand
//! (`CLUSTER FAILOVER`) and cut from their replicas (`CLIENT KILL TYPE master`), and holders
//! pause past their leases. Run twice: without and with `replica_sync`.
//!
//! `make test` runs a short form (`RLOCK_TORTURE_SECS`, default 40 s in all); `make torture`
//! the long one (600 s). Each run prints its report: the zeros it asserts (writes accepted out
//! of order, repeated tokens, tokens that went backwards, waits left hanging), the overlaps of
//! two holders (expected above zero without replica sync), and the time from a primary's death
//! to the next grant of a lock it served.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rlock_tests::cluster::{slot_map, Cluster};
use rlock_tests::torture::{self, Fault, Report};
use rlock_tests::{cmd, env_u64, info_field, int, raw, signal, wait_until, Rng, Server};

/// The cluster's node timeout: a primary silent this long is failed over.
const NODE_TIMEOUT_MS: u64 = 1_000;
/// How long a failover, a restart or a rejoin may take on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);

fn names() -> Vec<String> {
    (0..12).map(|i| format!("torture:{i}")).collect()
}

/// Every node by port, to find a server again after it changed roles.
fn node(cluster: &mut Cluster, port: u16) -> &mut Server {
    cluster
        .masters
        .iter_mut()
        .chain(cluster.replicas.iter_mut())
        .find(|s| s.port == port)
        .expect("a node of the cluster")
}

fn ports(cluster: &Cluster) -> Vec<u16> {
    cluster.nodes().map(|s| s.port).collect()
}

fn role(server: &Server) -> Option<String> {
    let mut c = server.try_conn().ok()?;
    c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map(|r| r.trim().to_string())
}

/// The slot map as the live nodes agree on it (all slots served), skipping `except`.
fn agreed_map(cluster: &Cluster, except: Option<u16>) -> Option<BTreeMap<u16, u16>> {
    let mut maps = Vec::new();
    for s in cluster.nodes().filter(|s| Some(s.port) != except) {
        let mut c = s.try_conn().ok()?;
        c.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()?;
        if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
            return None;
        }
        maps.push(slot_map(&mut c));
    }
    let all = maps.windows(2).all(|w| w[0] == w[1]) && maps.first()?.len() == 16384;
    all.then(|| maps.swap_remove(0))
}

/// Wait until every node is up, agrees on the slot map, and every replica's link is up.
fn wait_healthy(cluster: &Cluster) {
    wait_until(SETTLE, "the cluster is whole again", || {
        agreed_map(cluster, None).is_some()
            && cluster.nodes().all(|s| match role(s).as_deref() {
                Some("master") => true,
                Some("slave") => s.try_conn().is_ok_and(|mut c| {
                    info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
                }),
                _ => false,
            })
    });
}

/// The lock names (indexes) served by the primary on `port`.
fn names_on(map: &BTreeMap<u16, u16>, slots: &[u16], port: u16) -> Vec<usize> {
    (0..slots.len())
        .filter(|&i| map.get(&slots[i]) == Some(&port))
        .collect()
}

/// A primary that serves some of the names, at random.
fn some_primary(map: &BTreeMap<u16, u16>, slots: &[u16], rng: &mut Rng) -> u16 {
    let mut serving: Vec<u16> = slots.iter().filter_map(|s| map.get(s).copied()).collect();
    serving.sort_unstable();
    serving.dedup();
    *rng.pick(&serving)
}

/// Inject one fault at random and wait until the cluster is whole again.
fn inject(cluster: &mut Cluster, slots: &[u16], rng: &mut Rng) -> Fault {
    let map = agreed_map(cluster, None).expect("a whole cluster before each fault");
    let victim = some_primary(&map, slots, rng);
    let names = names_on(&map, slots, victim);
    let moved = |cluster: &Cluster| {
        agreed_map(cluster, Some(victim))
            .is_some_and(|m| slots.iter().all(|s| m.get(s).is_some_and(|&p| p != victim)))
    };
    match rng.below(4) {
        0 => {
            let at = Instant::now();
            node(cluster, victim).kill();
            wait_until(
                SETTLE,
                "a replica takes over the killed primary's slots",
                || moved(cluster),
            );
            node(cluster, victim).restart(); // it rejoins as a replica
            wait_healthy(cluster);
            Fault {
                at,
                what: format!("SIGKILL primary :{victim}"),
                names,
            }
        }
        1 => {
            let pid = node(cluster, victim).pid();
            let at = Instant::now();
            signal(pid, "-STOP");
            wait_until(
                SETTLE,
                "a replica takes over the stopped primary's slots",
                || moved(cluster),
            );
            signal(pid, "-CONT");
            wait_healthy(cluster);
            Fault {
                at,
                what: format!("SIGSTOP primary :{victim}"),
                names,
            }
        }
        2 => {
            let replica = replica_of(cluster, victim);
            let at = Instant::now();
            let mut c = node(cluster, replica).conn();
            assert_eq!(
                raw(&mut c, &cmd!("CLUSTER", "FAILOVER")),
                redis::Value::Okay
            );
            wait_until(SETTLE, "the manual failover completes", || {
                role(node(cluster, replica)).as_deref() == Some("master")
            });
            wait_healthy(cluster);
            Fault {
                at,
                what: format!("CLUSTER FAILOVER of :{victim} to :{replica}"),
                names: Vec::new(),
            }
        }
        _ => {
            let replica = replica_of(cluster, victim);
            let at = Instant::now();
            let mut c = node(cluster, replica).conn();
            let killed = int(&mut c, &cmd!("CLIENT", "KILL", "TYPE", "master"));
            wait_healthy(cluster);
            Fault {
                at,
                what: format!("link cut: replica :{replica} of :{victim} ({killed} killed)"),
                names: Vec::new(),
            }
        }
    }
}

fn replica_of(cluster: &Cluster, master: u16) -> u16 {
    cluster
        .nodes()
        .find(|s| {
            s.try_conn().is_ok_and(|mut c| {
                info_field(&mut c, "replication", "role").as_deref() == Some("slave")
                    && info_field(&mut c, "replication", "master_port") == Some(master.to_string())
            })
        })
        .map(|s| s.port)
        .unwrap_or_else(|| panic!("no replica of :{master}"))
}

/// One run of `secs` seconds; returns the report.
fn run(cluster: &mut Cluster, secs: u64, replica_sync: bool, seed: u64) -> Report {
    let names = names();
    let slots: Vec<u16> = {
        let mut c = cluster.masters[0].conn();
        names
            .iter()
            .map(|n| int(&mut c, &cmd!("CLUSTER", "KEYSLOT", n)) as u16)
            .collect()
    };
    let client = rlock_client::Client::builder()
        .cluster(
            ports(cluster)
                .iter()
                .map(|p| format!("redis://127.0.0.1:{p}/")),
        )
        .replica_sync(replica_sync.then_some(Duration::from_millis(500)))
        .build()
        .expect("cluster client");
    let cell = RefCell::new(cluster);
    torture::run(
        client,
        names,
        &torture::settings(seed),
        secs,
        |rng| inject(&mut cell.borrow_mut(), &slots, rng),
        || torture::no_waiters(cell.borrow().nodes()),
    )
}

#[test]
fn failovers_never_repeat_a_token_nor_leave_a_waiter_hanging() {
    let secs = env_u64("RLOCK_TORTURE_SECS", 40);
    let seed = env_u64(
        "RLOCK_TORTURE_SEED",
        0x70_27_u64 ^ std::process::id() as u64,
    );
    let mut cluster = Cluster::with_replicas_and_node_timeout(NODE_TIMEOUT_MS);
    for replica_sync in [false, true] {
        let r = run(
            &mut cluster,
            secs / 2,
            replica_sync,
            seed + replica_sync as u64,
        );
        eprintln!(
            "torture cluster (replica_sync {replica_sync}, {} s, seed {seed}): {r}",
            secs / 2
        );
        r.assert_zeros();
        assert!(r.faults >= 1, "at least one fault: {r}");
        assert!(r.acquisitions > 0, "{r}");
        assert_eq!(
            r.unrecovered, 0,
            "every dead primary's locks granted again: {r}"
        );
    }
}

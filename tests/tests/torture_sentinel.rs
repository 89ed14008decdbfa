//! The failover torture test behind Sentinel (a primary, two replicas, three Sentinels; the
//! module on every data node): the workload and checks of `torture_cluster.rs`
//! (`rlock_tests::torture`), with the client following the Sentinels, while the primary is
//! killed (`SIGKILL`, then restarted: the Sentinels make it a replica), stopped past
//! `down-after-milliseconds` (`SIGSTOP` / `SIGCONT`), failed over by hand (`SENTINEL
//! FAILOVER`) and a replica's link is cut (`CLIENT KILL TYPE master`). Run twice: without and
//! with `replica_sync`.
//!
//! `make test` runs a short form (`RLOCK_TORTURE_SECS`, default 40 s in all); `make torture`
//! the long one.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use rlock_tests::sentinel::{role, SentinelGroup, MASTER};
use rlock_tests::torture::{self, Fault, Report};
use rlock_tests::{cmd, env_u64, info_field, int, signal, wait_until, Rng, Server};

/// How long a failover, a restart or a rejoin may take on a loaded 2-core machine.
const SETTLE: Duration = Duration::from_secs(60);

fn names() -> Vec<String> {
    (0..8).map(|i| format!("torture:{i}")).collect()
}

fn node(group: &mut SentinelGroup, port: u16) -> &mut Server {
    group
        .nodes
        .iter_mut()
        .find(|s| s.port == port)
        .expect("a node of the group")
}

/// The Sentinels agree on a primary that says it is one, every other node replicates it with
/// its link up, and every Sentinel's view of the replicas has caught up.
fn healthy(group: &SentinelGroup) -> bool {
    let Some(primary) = group.primary_port() else {
        return false;
    };
    group.sentinels_settled()
        && group.nodes.iter().all(|s| {
            let Ok(mut c) = s.try_conn() else {
                return false;
            };
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            if s.port == primary {
                return role(s).as_deref() == Some("master");
            }
            role(s).as_deref() == Some("slave")
                && info_field(&mut c, "replication", "master_port") == Some(primary.to_string())
                && info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
        })
}

fn wait_healthy(group: &SentinelGroup) {
    wait_until(SETTLE, "the group is whole again", || healthy(group));
}

/// Inject one fault at random and wait until the group is whole again.
fn inject(group: &mut SentinelGroup, all: &[usize], rng: &mut Rng) -> Fault {
    let primary = group.primary_port().expect("a primary before each fault");
    match rng.below(4) {
        0 => {
            let at = Instant::now();
            node(group, primary).kill();
            group.wait_new_primary(primary);
            node(group, primary).restart(); // the Sentinels make it a replica
            wait_healthy(group);
            Fault {
                at,
                what: format!("SIGKILL primary :{primary}"),
                names: all.to_vec(),
            }
        }
        1 => {
            let pid = node(group, primary).pid();
            let at = Instant::now();
            signal(pid, "-STOP");
            group.wait_new_primary(primary);
            signal(pid, "-CONT");
            wait_healthy(group);
            Fault {
                at,
                what: format!("SIGSTOP primary :{primary}"),
                names: all.to_vec(),
            }
        }
        2 => {
            let at = Instant::now();
            let new = group.failover_from(primary);
            wait_healthy(group);
            Fault {
                at,
                what: format!("SENTINEL FAILOVER {MASTER}: :{primary} to :{new}"),
                names: Vec::new(),
            }
        }
        _ => {
            let replicas: Vec<u16> = group
                .nodes
                .iter()
                .map(|s| s.port)
                .filter(|p| *p != primary)
                .collect();
            let replica = *rng.pick(&replicas);
            let at = Instant::now();
            let mut c = node(group, replica).conn();
            let killed = int(&mut c, &cmd!("CLIENT", "KILL", "TYPE", "master"));
            wait_healthy(group);
            Fault {
                at,
                what: format!("link cut: replica :{replica} ({killed} killed)"),
                names: Vec::new(),
            }
        }
    }
}

fn run(group: &mut SentinelGroup, secs: u64, replica_sync: bool, seed: u64) -> Report {
    let names = names();
    let all: Vec<usize> = (0..names.len()).collect();
    let client = rlock_client::Client::builder()
        .sentinel(MASTER, group.urls())
        .replica_sync(replica_sync.then_some(Duration::from_millis(500)))
        .build()
        .expect("Sentinel client");
    let cell = RefCell::new(group);
    torture::run(
        client,
        names,
        &torture::settings(seed),
        secs,
        |rng| inject(&mut cell.borrow_mut(), &all, rng),
        || torture::no_waiters(&cell.borrow().nodes),
    )
}

#[test]
fn failovers_behind_sentinel_never_repeat_a_token_nor_leave_a_waiter_hanging() {
    let secs = env_u64("RLOCK_TORTURE_SECS", 40);
    let seed = env_u64(
        "RLOCK_TORTURE_SEED",
        0x5e_27_u64 ^ std::process::id() as u64,
    );
    let mut group = SentinelGroup::start(2);
    for replica_sync in [false, true] {
        let r = run(
            &mut group,
            secs / 2,
            replica_sync,
            seed + replica_sync as u64,
        );
        eprintln!(
            "torture sentinel (replica_sync {replica_sync}, {} s, seed {seed}): {r}",
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

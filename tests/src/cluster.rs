//! A Redis Cluster of real server processes ([`crate::server_binary`]) with the rlock module on
//! every node.
//!
//! [`Cluster::start`] starts 3 masters (and, with [`Cluster::with_replicas`], one replica per
//! master) on free loopback ports, each with `--cluster-enabled yes`, its own `nodes.conf` in its
//! temporary directory and an explicit cluster bus port (the default `port + 10000` may be out of
//! range or taken). The cluster is created with `redis-cli --cluster create ... --cluster-yes`
//! ([`crate::cli_binary`] picks the client) and is ready when every node reports
//! `cluster_state:ok`, every node sees the same slot owners and every replica's link to its master
//! is up. Every process is killed when the `Cluster` is dropped.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::{cmd, info_field, int, raw, string, wait_until, Server, ServerOptions, Value};

/// A running cluster. `masters[i]`'s replica (if any) is `replicas[i]` as created; after a
/// failover use [`Cluster::master_port_of_slot`] / [`Cluster::by_port`] instead of the indexes.
pub struct Cluster {
    pub masters: Vec<Server>,
    pub replicas: Vec<Server>,
}

/// How long cluster formation and convergence may take under load.
const CONVERGE: Duration = Duration::from_secs(30);

/// Start one cluster-enabled node (retrying with fresh ports: the probed port or bus port may be
/// taken by the time redis binds it).
fn start_node(node_timeout_ms: u64, module: bool) -> Server {
    let mut last = String::new();
    for _ in 0..8 {
        let bus = crate::free_port();
        let opts = ServerOptions {
            args: vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                "nodes.conf".into(), // relative to --dir, the server's own temporary directory
                "--cluster-port".into(),
                bus.to_string(),
                "--cluster-node-timeout".into(),
                node_timeout_ms.to_string(),
            ],
            module,
            ..ServerOptions::default()
        };
        match Server::try_start(&opts) {
            Ok(s) => return s,
            Err(e) => last = e,
        }
    }
    panic!("could not start a cluster node: {last}");
}

impl Cluster {
    /// Three masters, no replicas.
    pub fn start() -> Cluster {
        Cluster::create(false, 5000)
    }

    /// Three masters, no replicas, none with the module (a managed service's cluster: the
    /// client speaks Redisson's protocol there).
    pub fn without_module() -> Cluster {
        Cluster::build(false, 5000, false)
    }

    /// Three masters, no replicas, a master counted failed only after `node_timeout_ms`
    /// (`cluster-node-timeout`): the cluster stays up that long with one master dead.
    pub fn with_node_timeout(node_timeout_ms: u64) -> Cluster {
        Cluster::create(false, node_timeout_ms)
    }

    /// Three masters with one replica each.
    pub fn with_replicas() -> Cluster {
        Cluster::create(true, 5000)
    }

    /// Three masters with one replica each, failing over after `node_timeout_ms` without a
    /// master (`cluster-node-timeout`; 5,000 otherwise).
    pub fn with_replicas_and_node_timeout(node_timeout_ms: u64) -> Cluster {
        Cluster::create(true, node_timeout_ms)
    }

    fn create(replicas: bool, node_timeout_ms: u64) -> Cluster {
        Cluster::build(replicas, node_timeout_ms, !crate::without_module())
    }

    fn build(replicas: bool, node_timeout_ms: u64, module: bool) -> Cluster {
        let n = if replicas { 6 } else { 3 };
        let nodes: Vec<Server> = (0..n)
            .map(|_| start_node(node_timeout_ms, module))
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|s| format!("127.0.0.1:{}", s.port)));
        if replicas {
            args.extend(["--cluster-replicas".into(), "1".into()]);
        }
        args.push("--cluster-yes".into());
        let cli = crate::cli_binary();
        let out = Command::new(&cli)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("run {} --cluster create: {e}", cli.display()));
        assert!(
            out.status.success(),
            "{} {}: {}\n{}",
            cli.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Sort the nodes into masters and replicas by what they report, pairing each replica
        // with its master.
        let mut masters = Vec::new();
        let mut by_master: BTreeMap<u16, Server> = BTreeMap::new();
        for s in nodes {
            let mut c = s.conn();
            wait_until(CONVERGE, "node knows its role", || {
                info_field(&mut c, "replication", "role").is_some()
            });
            // A node created as a replica may still report `master` until the CLUSTER
            // REPLICATE from redis-cli has been applied, which it has when redis-cli returns.
            if info_field(&mut c, "replication", "role").as_deref() == Some("slave") {
                let mp: u16 = info_field(&mut c, "replication", "master_port")
                    .and_then(|p| p.parse().ok())
                    .expect("replica's master_port");
                by_master.insert(mp, s);
            } else {
                masters.push(s);
            }
        }
        assert_eq!(masters.len(), 3, "three masters");
        let paired: Vec<Server> = masters
            .iter()
            .filter_map(|m| by_master.remove(&m.port))
            .collect();
        if replicas {
            assert_eq!(paired.len(), 3, "one replica per master");
        }
        let cluster = Cluster {
            masters,
            replicas: paired,
        };
        cluster.wait_ok();
        cluster
    }

    /// Every node, masters first.
    pub fn nodes(&self) -> impl Iterator<Item = &Server> {
        self.masters.iter().chain(self.replicas.iter())
    }

    /// `redis://` URLs of the masters, as seeds for a cluster client.
    pub fn seeds(&self) -> Vec<String> {
        self.masters.iter().map(|s| s.url()).collect()
    }

    /// The node listening on `port`.
    pub fn by_port(&self, port: u16) -> &Server {
        self.nodes()
            .find(|s| s.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// Wait until every node says `cluster_state:ok`, all nodes agree on which master serves
    /// every slot, and every replica's link to its master is up.
    pub fn wait_ok(&self) {
        let mut conns: Vec<(u16, redis::Connection)> =
            self.nodes().map(|s| (s.port, s.conn())).collect();
        wait_until(
            CONVERGE,
            "cluster_state:ok and one slot map on every node",
            || {
                let mut maps = Vec::new();
                for (_, c) in conns.iter_mut() {
                    let info: String = match redis::cmd("CLUSTER").arg("INFO").query(c) {
                        Ok(i) => i,
                        Err(_) => return false,
                    };
                    if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                        return false;
                    }
                    maps.push(slot_map(c));
                }
                maps.windows(2).all(|w| w[0] == w[1]) && maps[0].len() == 16384
            },
        );
        for (port, c) in conns.iter_mut() {
            if info_field(c, "replication", "role").as_deref() == Some("slave") {
                wait_until(CONVERGE, &format!("replica :{port} link up"), || {
                    info_field(c, "replication", "master_link_status").as_deref() == Some("up")
                });
            }
        }
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &str) -> u16 {
        let mut c = self.masters[0].conn();
        int(&mut c, &cmd!("CLUSTER", "KEYSLOT", key)) as u16
    }

    /// Port of the master serving `slot`, as the first live master sees it.
    pub fn master_port_of_slot(&self, slot: u16) -> u16 {
        let mut c = self.masters[0].conn();
        slot_map(&mut c)
            .get(&slot)
            .copied()
            .unwrap_or_else(|| panic!("slot {slot} is not served"))
    }

    /// The master serving `key`.
    pub fn master_for(&self, key: &str) -> &Server {
        self.by_port(self.master_port_of_slot(self.slot(key)))
    }

    /// A master that does not serve `key`.
    pub fn other_master(&self, key: &str) -> &Server {
        let owner = self.master_port_of_slot(self.slot(key));
        self.masters.iter().find(|s| s.port != owner).unwrap()
    }

    /// Move `slot` from `from` to `to` the way `redis-cli --cluster reshard` does, with a hook
    /// between copying the keys and handing the slot over.
    pub fn migrate_slot(&self, slot: u16, from: &Server, to: &Server, between: impl FnOnce()) {
        let (from_id, to_id) = (node_id(from), node_id(to));
        let mut src = from.conn();
        let mut dst = to.conn();
        assert_eq!(
            string(
                &mut dst,
                &cmd!("CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id)
            ),
            "OK"
        );
        assert_eq!(
            string(
                &mut src,
                &cmd!("CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id)
            ),
            "OK"
        );
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1000)
            .query(&mut src)
            .unwrap();
        assert!(!keys.is_empty(), "slot {slot} has keys to move");
        let mut migrate = cmd!("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS");
        for k in &keys {
            migrate.arg(k);
        }
        assert_eq!(string(&mut src, &migrate), "OK");
        between();
        for n in [to, from] {
            let mut c = n.conn();
            assert_eq!(
                string(&mut c, &cmd!("CLUSTER", "SETSLOT", slot, "NODE", &to_id)),
                "OK"
            );
        }
        for n in &self.masters {
            if n.port != to.port && n.port != from.port {
                let _ = raw(
                    &mut n.conn(),
                    &cmd!("CLUSTER", "SETSLOT", slot, "NODE", &to_id),
                );
            }
        }
        self.wait_ok();
        assert_eq!(self.master_port_of_slot(slot), to.port);
    }

    /// `CLUSTER SETSLOT slot IMPORTING` on `to`, then `MIGRATING` on `from`, as
    /// `redis-cli --cluster reshard` opens a slot's migration.
    pub fn open_migration(&self, slot: u16, from: &Server, to: &Server) {
        let (from_id, to_id) = (node_id(from), node_id(to));
        let importing = cmd!("CLUSTER", "SETSLOT", slot, "IMPORTING", &from_id);
        assert_eq!(string(&mut to.conn(), &importing), "OK");
        let migrating = cmd!("CLUSTER", "SETSLOT", slot, "MIGRATING", &to_id);
        assert_eq!(string(&mut from.conn(), &migrating), "OK");
    }

    /// `MIGRATE` exactly `keys` from `from` to `to` (one batch, as reshard sends them).
    pub fn migrate_keys(&self, from: &Server, to: &Server, keys: &[&str]) {
        let mut migrate = cmd!("MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS");
        for k in keys {
            migrate.arg(*k);
        }
        assert_eq!(string(&mut from.conn(), &migrate), "OK");
    }

    /// `CLUSTER SETSLOT slot NODE to` on `to`, `from` and every other master, as reshard closes
    /// a slot's migration; returns once every node agrees.
    pub fn close_migration(&self, slot: u16, from: &Server, to: &Server) {
        let to_id = node_id(to);
        for n in [to, from] {
            let set = cmd!("CLUSTER", "SETSLOT", slot, "NODE", &to_id);
            assert_eq!(string(&mut n.conn(), &set), "OK");
        }
        for n in &self.masters {
            if n.port != to.port && n.port != from.port {
                let _ = raw(
                    &mut n.conn(),
                    &cmd!("CLUSTER", "SETSLOT", slot, "NODE", &to_id),
                );
            }
        }
        self.wait_ok();
        assert_eq!(self.master_port_of_slot(slot), to.port);
    }

    /// The replica replicating the master on `master_port`.
    pub fn replica_of(&self, master_port: u16) -> &Server {
        self.nodes()
            .find(|s| {
                let mut c = s.conn();
                info_field(&mut c, "replication", "role").as_deref() == Some("slave")
                    && info_field(&mut c, "replication", "master_port")
                        .is_some_and(|p| p == master_port.to_string())
            })
            .unwrap_or_else(|| panic!("no replica of :{master_port}"))
    }

    /// An atomic slot migration of `slot` from `from` to `to`, without waiting for it:
    /// Valkey 9's `CLUSTER MIGRATESLOTS SLOTSRANGE slot slot NODE <to>` sent to `from`, or
    /// Redis 8.4's `CLUSTER MIGRATION IMPORT slot slot` sent to `to`. Returns the job's name
    /// (its task id on Redis), as [`slot_migrations`] lists it on both nodes.
    pub fn start_atomic_migration(&self, slot: u16, from: &Server, to: &Server) -> String {
        let mut c = from.conn();
        if crate::ServerKind::of(&mut c).flavor == crate::Flavor::Redis {
            let reply = raw(
                &mut to.conn(),
                &cmd!("CLUSTER", "MIGRATION", "IMPORT", slot, slot),
            );
            return match reply {
                Value::BulkString(id) => String::from_utf8_lossy(&id).into_owned(),
                Value::SimpleString(id) => id,
                other => panic!("CLUSTER MIGRATION IMPORT: {other:?}"),
            };
        }
        let before: Vec<String> = slot_migrations(&mut c)
            .into_iter()
            .map(|j| j.name)
            .collect();
        let reply = raw(
            &mut c,
            &cmd!(
                "CLUSTER",
                "MIGRATESLOTS",
                "SLOTSRANGE",
                slot,
                slot,
                "NODE",
                node_id(to)
            ),
        );
        assert_eq!(reply, Value::Okay, "CLUSTER MIGRATESLOTS: {reply:?}");
        let mut name = None;
        wait_until(CONVERGE, "the migration job is listed", || {
            name = slot_migrations(&mut c)
                .into_iter()
                .map(|j| j.name)
                .find(|n| !before.contains(n));
            name.is_some()
        });
        name.unwrap()
    }

    /// Move `slot` from `from` to `to` with an atomic slot migration, and wait until the job
    /// succeeded and every node agrees on the new owner.
    pub fn migrate_slot_atomic(&self, slot: u16, from: &Server, to: &Server) {
        let job = self.start_atomic_migration(slot, from, to);
        wait_migration(from, &job, &["success"]);
        self.wait_ok();
        assert_eq!(self.master_port_of_slot(slot), to.port, "slot {slot} moved");
    }
}

/// `CLUSTER MYID` of a node.
/// The slot of a key without braces: CRC16-XMODEM modulo 16384, as Redis hashes it.
pub fn key_slot(key: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in key {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

pub fn node_id(server: &Server) -> String {
    let mut c = server.conn();
    string(&mut c, &cmd!("CLUSTER", "MYID"))
}

/// slot -> master port, from `CLUSTER SLOTS` on `conn` (empty while the node can't answer).
pub fn slot_map(conn: &mut redis::Connection) -> BTreeMap<u16, u16> {
    let mut map = BTreeMap::new();
    let v: Value = match redis::cmd("CLUSTER").arg("SLOTS").query(conn) {
        Ok(v) => v,
        Err(_) => return map,
    };
    let Value::Array(ranges) = v else { return map };
    for r in ranges {
        let Value::Array(parts) = r else { continue };
        let (Some(Value::Int(lo)), Some(Value::Int(hi)), Some(Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        for s in *lo..=*hi {
            map.insert(s as u16, *port as u16);
        }
    }
    map
}

/// One job of `CLUSTER GETSLOTMIGRATIONS` (Valkey 9) or `CLUSTER MIGRATION STATUS` (Redis
/// 8.4), in Valkey's words.
#[derive(Debug, Clone)]
pub struct SlotMigration {
    pub name: String,
    /// `EXPORT` or `IMPORT` (Redis' `migrate` or `import`).
    pub operation: String,
    /// `replicating`, `waiting-to-pause`, `failover-paused`, `failover-granted`, `success`,
    /// `cancelled`, `failed`, ...; Redis' own names for the steps between (`send-stream`,
    /// `handoff`, ...), its `completed` as `success` and its `canceled` as `cancelled`.
    pub state: String,
    pub message: String,
}

/// The slot migration jobs `conn`'s node lists (`CLUSTER GETSLOTMIGRATIONS`, or on Redis
/// `CLUSTER MIGRATION STATUS ALL`).
pub fn slot_migrations(conn: &mut redis::Connection) -> Vec<SlotMigration> {
    let (jobs, redis) = match raw(conn, &cmd!("CLUSTER", "GETSLOTMIGRATIONS")) {
        Value::Array(jobs) => (jobs, false),
        _ => match raw(conn, &cmd!("CLUSTER", "MIGRATION", "STATUS", "ALL")) {
            Value::Array(jobs) => (jobs, true),
            _ => return Vec::new(),
        },
    };
    let jobs: Vec<SlotMigration> = jobs
        .into_iter()
        .filter_map(|j| {
            let fields: Vec<(String, String)> = match j {
                Value::Array(kv) => kv
                    .chunks(2)
                    .map(|p| {
                        (
                            string_of(&p[0]),
                            p.get(1).map(string_of).unwrap_or_default(),
                        )
                    })
                    .collect(),
                Value::Map(kv) => kv
                    .iter()
                    .map(|(k, v)| (string_of(k), string_of(v)))
                    .collect(),
                _ => return None,
            };
            let get = |k: &str| {
                fields
                    .iter()
                    .find(|(f, _)| f == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            Some(SlotMigration {
                name: get(if redis { "id" } else { "name" }),
                operation: get("operation"),
                state: get("state"),
                message: get(if redis { "last_error" } else { "message" }),
            })
        })
        .collect();
    if !redis {
        return jobs;
    }
    jobs.into_iter()
        .map(|j| SlotMigration {
            name: j.name,
            operation: match j.operation.as_str() {
                "migrate" => "EXPORT".into(),
                _ => "IMPORT".into(),
            },
            state: match j.state.as_str() {
                "completed" => "success".into(),
                "canceled" => "cancelled".into(),
                other => other.into(),
            },
            message: j.message,
        })
        .collect()
}

fn string_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        _ => String::new(),
    }
}

/// Wait until job `name` on `node` is in one of `states`; the state it reached.
pub fn wait_migration(node: &Server, name: &str, states: &[&str]) -> String {
    let mut c = node.conn();
    let mut last = None;
    wait_until(
        CONVERGE,
        &format!("slot migration {name} in one of {states:?}"),
        || {
            last = slot_migrations(&mut c).into_iter().find(|j| j.name == name);
            last.as_ref()
                .is_some_and(|j| states.contains(&j.state.as_str()))
        },
    );
    last.map(|j| j.state).unwrap_or_default()
}

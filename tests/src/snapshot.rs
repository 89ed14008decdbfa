//! Whole-dataset snapshots, for replication and AOF comparisons: every key's type, content
//! and PTTL; the AOF files and what they may hold; reloading an AOF without the module.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use crate::{cmd, hgetall, pttl, redisson, string, wait_replicas, Server, ServerOptions};

/// The AOF files of a server's directory: (the incremental files, every file), as text.
pub fn aof_text(server: &Server) -> (String, String) {
    let mut incr = String::new();
    let mut all = String::new();
    for entry in std::fs::read_dir(server.dir().join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        if path.to_string_lossy().ends_with(".incr.aof") {
            incr.push_str(&body);
        }
        all.push_str(&body);
    }
    (incr, all)
}

/// One key as seen by a reader: its type, its content rendered as text, its PTTL.
#[derive(Clone, Debug)]
pub struct KeyState {
    pub kind: String,
    pub value: String,
    pub pttl: i64,
}

/// Every key of the current database (hashes, strings and sorted sets rendered in full, binary
/// members as hex; other types by type only).
pub fn snapshot(conn: &mut redis::Connection) -> BTreeMap<String, KeyState> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let kind = string(conn, &cmd!("TYPE", &k));
        let value = match kind.as_str() {
            "hash" => format!("{:?}", hgetall(conn, &k)),
            "string" => string(conn, &cmd!("GET", &k)),
            "zset" => {
                let z: Vec<(Vec<u8>, String)> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
                    .unwrap();
                let shown: Vec<String> = z
                    .iter()
                    .map(|(m, s)| format!("{}={s}", redisson::semaphore::hex(m)))
                    .collect();
                shown.join(",")
            }
            _ => String::new(),
        };
        let pttl = pttl(conn, &k);
        out.insert(k, KeyState { kind, value, pttl });
    }
    out
}

/// Assert two snapshots hold the same keys, types and contents, and PTTLs within `ttl_slack_ms`
/// (both -1, or both positive and close).
#[track_caller]
pub fn assert_same_data(
    what: &str,
    a: &BTreeMap<String, KeyState>,
    b: &BTreeMap<String, KeyState>,
    ttl_slack_ms: i64,
) {
    let ka: Vec<&String> = a.keys().collect();
    let kb: Vec<&String> = b.keys().collect();
    assert_eq!(ka, kb, "{what}: key sets differ\n{a:#?}\nvs\n{b:#?}");
    for (k, sa) in a {
        let sb = &b[k];
        assert_eq!(
            (&sa.kind, &sa.value),
            (&sb.kind, &sb.value),
            "{what}: key {k} differs"
        );
        if sa.pttl < 0 || sb.pttl < 0 {
            assert_eq!(sa.pttl, sb.pttl, "{what}: key {k} expiry differs");
        } else {
            assert!(
                (sa.pttl - sb.pttl).abs() <= ttl_slack_ms,
                "{what}: key {k} PTTL {} vs {} (slack {ttl_slack_ms} ms)",
                sa.pttl,
                sb.pttl
            );
        }
    }
}

/// Assert the AOF files in `dir` hold native commands only: absolute `PEXPIREAT` in the
/// incremental file, no relative `PEXPIRE`, no module command (`RLOCK.*`, `RRWLOCK.*`). Every
/// write has been written to the file before its reply was sent.
#[track_caller]
pub fn assert_aof_native(dir: &Path) {
    let mut incr = String::new();
    let mut all = String::new();
    for entry in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        if path.to_string_lossy().ends_with(".incr.aof") {
            incr.push_str(&body);
        }
        all.push_str(&body);
    }
    let (incr_upper, all_upper) = (incr.to_uppercase(), all.to_uppercase());
    assert!(
        incr_upper.contains("PEXPIREAT"),
        "no PEXPIREAT in the AOF:\n{incr}"
    );
    for module_command in ["RLOCK.", "RRWLOCK."] {
        assert!(
            !all_upper.contains(module_command),
            "the AOF names {module_command}* commands:\n{all}"
        );
    }
    assert!(
        !incr_upper.contains("\nPEXPIRE\r"),
        "relative PEXPIRE in the AOF:\n{incr}"
    );
}

/// Kill `server` (started with AOF on) and start a server WITHOUT the module on its directory,
/// which loads the AOF. The returned directory guard must outlive the new server.
pub fn reload_aof_without_module(server: &mut Server) -> (Server, Option<tempfile::TempDir>) {
    let dir = server.keep_dir();
    server.kill();
    let second = Server::with(ServerOptions {
        module: false,
        aof: true,
        dir: Some(server.dir().to_path_buf()),
        ..Default::default()
    });
    (second, dir)
}

/// WAIT for the replica, then compare every key. With the same absolute expiry on both sides,
/// two PTTL readings differ by at most the time between them.
#[track_caller]
pub fn assert_replica_matches(step: &str, m: &mut redis::Connection, r: &mut redis::Connection) {
    assert!(
        wait_replicas(m, 1) >= 1,
        "{step}: replica did not acknowledge"
    );
    let started = Instant::now();
    let a = snapshot(m);
    let b = snapshot(r);
    let slack = started.elapsed().as_millis() as i64 + 2;
    assert_same_data(step, &a, &b, slack);
}

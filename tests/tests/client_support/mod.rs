//! Helpers shared by the `client_*` test files (the rlock client against real servers).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rlock_tests::redis;
use rlock_tests::Server;

/// A client with defaults except a short watchdog (tests should not wait 30 s).
pub fn client(s: &Server) -> rlock_client::Client {
    client_with(s.url(), |b| b)
}

pub fn client_with(
    url: String,
    f: impl FnOnce(rlock_client::ClientBuilder) -> rlock_client::ClientBuilder,
) -> rlock_client::Client {
    f(rlock_client::Client::builder()
        .url(url)
        .watchdog_timeout(Duration::from_millis(600)))
    .build()
    .expect("build client")
}

/// A multi-thread tokio runtime with `workers` worker threads, as an application runs one.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// `RLOCK.INFO key` as (field -> value) pairs from the flat RESP2 array.
pub fn lock_info(c: &mut redis::Connection, key: &str) -> Vec<(String, redis::Value)> {
    let v: Vec<redis::Value> = redis::cmd("RLOCK.INFO").arg(key).query(c).unwrap();
    v.chunks(2)
        .map(|kv| {
            let k: String = redis::from_redis_value(kv[0].clone()).unwrap();
            (k, kv[1].clone())
        })
        .collect()
}

/// Waits on lock `key` as the server shows them. With the module: the waiters queued
/// (`RLOCK.INFO` `waiters`). Over Redisson's protocol (`RLOCK_CLIENT_PROTOCOL=redisson`): the
/// connections subscribed to its channel, where a waiting client is subscribed once however
/// many of its tasks wait (Redisson's protocol has no queue to read).
pub fn waiters(c: &mut redis::Connection, key: &str) -> i64 {
    if rlock_tests::without_module() {
        return subscribers(c, &rlock_tests::lock_channel(key));
    }
    let info = lock_info(c, key);
    let v = info
        .into_iter()
        .find(|(k, _)| k == "waiters")
        .expect("waiters field")
        .1;
    redis::from_redis_value(v).unwrap()
}

/// No wait left on lock `key`: at once with the module (a wait is withdrawn before its call
/// returns); over Redisson's protocol, once the client's unsubscribe (sent when its last wait
/// on the object ends, without the caller waiting) has reached the server.
pub fn assert_no_waiters(c: &mut redis::Connection, key: &str) {
    if rlock_tests::without_module() {
        rlock_tests::wait_until(
            rlock_tests::margin(Duration::from_secs(3)),
            "the subscription of the last wait ended",
            || waiters(c, key) == 0,
        );
    } else {
        assert_eq!(waiters(c, key), 0, "no waiter left on {key}");
    }
}

/// Connections subscribed to `channel`, plainly or sharded (`PUBSUB NUMSUB` plus `PUBSUB
/// SHARDNUMSUB`: in a cluster the client subscribes with `SSUBSCRIBE`).
pub fn subscribers(c: &mut redis::Connection, channel: &str) -> i64 {
    ["NUMSUB", "SHARDNUMSUB"]
        .into_iter()
        .map(|how| {
            let v: redis::Value = redis::cmd("PUBSUB").arg(how).arg(channel).query(c).unwrap();
            match v {
                redis::Value::Array(v) => redis::from_redis_value::<i64>(v[1].clone()).unwrap(),
                redis::Value::Map(v) => redis::from_redis_value::<i64>(v[0].1.clone()).unwrap(),
                other => panic!("PUBSUB {how}: {other:?}"),
            }
        })
        .sum()
}

pub fn exists(c: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(c).unwrap() == 1
}

/// `calls=` of a command in `INFO commandstats` (0 if never called).
pub fn calls(c: &mut redis::Connection, command: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Run this test binary again as a child process that executes only `test_name`, with `env`
/// set; returns the child and a reader of its stdout. Child tests are `#[ignore]`d (alone they
/// do nothing and must not count as passed tests), so the child runs it with `--ignored`.
pub fn spawn_self(
    test_name: &str,
    env: &[(&str, String)],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([
        test_name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// Read lines until one equals `marker` (panics if the child ends first).
pub fn read_until(out: &mut BufReader<std::process::ChildStdout>, marker: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "child exited before printing {marker}");
        if line.trim_end().ends_with(marker) {
            return;
        }
    }
}

/// The database is empty: at once with the module; over Redisson's protocol, once the unlock
/// latches' `DEL`s (sent after each unlock without waiting, as Redisson sends them) are in.
pub fn assert_emptied(c: &mut redis::Connection, why: &str) {
    if rlock_tests::without_module() {
        rlock_tests::wait_until(rlock_tests::margin(Duration::from_secs(3)), why, || {
            rlock_tests::dbsize(c) == 0
        });
    } else {
        assert_eq!(rlock_tests::dbsize(c), 0, "{why}");
    }
}

/// Nothing of this run's waits is left on the server: with the module, no request queued in
/// any session (`INFO rlock` `session_requests`); over Redisson's protocol, no channel
/// subscribed by anyone (`PUBSUB CHANNELS`), once the client's unsubscribes are in.
pub fn assert_no_wait_left(c: &mut redis::Connection) {
    if rlock_tests::without_module() {
        rlock_tests::wait_until(
            rlock_tests::margin(Duration::from_secs(3)),
            "every subscription of a wait ended",
            || {
                let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").query(c).unwrap();
                channels.is_empty()
            },
        );
    } else {
        assert_eq!(
            rlock_tests::rlock_stat(c, "session_requests"),
            0,
            "no request left in the client's session"
        );
    }
}

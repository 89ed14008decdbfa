//! Helpers shared by the `client_*` test files (the rlock client against real servers).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rlock_tests::redis;
use rlock_tests::Server;

/// A client with defaults except a short watchdog (tests should not wait 30 s).
pub fn client(s: &Server) -> rlock::Client {
    client_with(s.url(), |b| b)
}

pub fn client_with(
    url: String,
    f: impl FnOnce(rlock::ClientBuilder) -> rlock::ClientBuilder,
) -> rlock::Client {
    f(rlock::Client::builder()
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

/// Waiters queued on `key` (RLOCK.INFO `waiters`).
pub fn waiters(c: &mut redis::Connection, key: &str) -> i64 {
    let info = lock_info(c, key);
    let v = info
        .into_iter()
        .find(|(k, _)| k == "waiters")
        .expect("waiters field")
        .1;
    redis::from_redis_value(v).unwrap()
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

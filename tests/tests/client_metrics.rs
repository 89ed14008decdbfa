//! The client's metrics as a service scrapes them: the `metrics` example (client/examples/
//! metrics.rs) runs against a real server with `metrics-exporter-prometheus` serving
//! `/metrics`; this test scrapes it over HTTP and checks the series the docs list, with values
//! the example's known workload must produce.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rlock_tests::{free_port, wait_until, Server};

/// The example's binary: `cargo test` builds every example beside the test binaries
/// (`target/<profile>/examples/`); a test run on its own builds it first.
fn example() -> PathBuf {
    let deps = std::env::current_exe().expect("the test binary");
    let profile = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    let bin = profile.join("examples").join("metrics");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = profile.ends_with("release").then_some("--release");
        let ok = Command::new(cargo)
            .args(["build", "-p", "rlock-client", "--example", "metrics"])
            .args(release)
            .status()
            .expect("run cargo build")
            .success();
        assert!(ok, "cargo build --example metrics");
    }
    bin
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.starts_with("HTTP/1.1 200").then_some(body)
}

/// The value of the series `name{labels}` (labels as the exporter prints them, sorted).
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.split_once(' ').is_some_and(|(s, _)| s == series))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[test]
fn the_metrics_example_serves_the_documented_series() {
    let s = Server::start();
    let port = free_port();
    let rounds = 30;
    let _example = Killed(
        Command::new(example())
            .env("RLOCK_URL", s.url())
            .env("METRICS_ADDR", format!("127.0.0.1:{port}"))
            .env("ROUNDS", rounds.to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the metrics example"),
    );
    // Its rounds are done when every acquire it makes is counted: per round one guard on
    // `jobs:N`, one on `jobs:shared`, one try of `jobs:shared` that finds it held.
    let acquired = r#"rlock_acquires_total{kind="lock",name="jobs:*",outcome="acquired"}"#;
    let busy = r#"rlock_acquires_total{kind="lock",name="jobs:*",outcome="busy"}"#;
    let mut page = String::new();
    wait_until(
        Duration::from_secs(60),
        "the example's rounds counted on /metrics",
        || {
            page = scrape(port).unwrap_or_default();
            value(&page, acquired) == Some(2.0 * rounds as f64)
        },
    );
    assert_eq!(value(&page, busy), Some(rounds as f64), "{page}");
    // Names collapsed by the example's NameLabel: no series names one object.
    assert!(!page.contains("jobs:1\""), "{page}");
    // Nothing held or waiting once it idles; every hold was released, none lost.
    let kn = r#"{kind="lock",name="jobs:*"}"#;
    assert_eq!(
        value(&page, &format!("rlock_held{kn}")),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, &format!("rlock_waiting{kn}")),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(
            &page,
            r#"rlock_hold_seconds_count{kind="lock",name="jobs:*",ended="released"}"#
        ),
        Some(2.0 * rounds as f64),
        "{page}"
    );
    assert!(
        !page.contains("rlock_lost_holds_total{"),
        "no hold was lost: {page}"
    );
    // Wait times are seconds: an uncontended acquire on a local server takes well under one.
    let sum = value(
        &page,
        r#"rlock_wait_seconds_sum{kind="lock",name="jobs:*",outcome="acquired"}"#,
    )
    .expect("a wait-time summary");
    assert!(sum > 0.0 && sum < 2.0 * rounds as f64, "{sum}");
    // Help texts, as Prometheus shows them.
    assert!(page.contains("# HELP rlock_acquires_total"), "{page}");
}

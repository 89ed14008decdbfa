//! Serving the client's metrics to Prometheus: install `metrics-exporter-prometheus` (it serves
//! `GET /metrics`), turn the client's reporting on with a name label that keeps the number of
//! series bounded (`jobs:1` … `jobs:9` all count as `jobs:*`), then use locks as usual.
//!
//! cargo run -p rlock-client --example metrics
//!   RLOCK_URL         the server (default redis://127.0.0.1:6390/)
//!   METRICS_ADDR      where /metrics is served (default 127.0.0.1:9000)
//!   ROUNDS            lock rounds before it idles (default 100); it serves until killed
//!
//! Then: curl -s 127.0.0.1:9000/metrics | grep rlock_

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let url = env("RLOCK_URL", "redis://127.0.0.1:6390/");
    let addr: SocketAddr = env("METRICS_ADDR", "127.0.0.1:9000").parse()?;
    let rounds: u64 = env("ROUNDS", "100").parse()?;

    // The exporter runs its HTTP listener on a runtime of its own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _in = rt.enter();
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()?;

    let client = rlock_client::Client::builder()
        .url(url)
        .metrics(rlock_client::NameLabel::prefix_before(':'))
        .build()?;
    for i in 0..rounds {
        let lock = client.lock(format!("jobs:{}", i % 9 + 1));
        let guard = lock.guard()?;
        std::thread::sleep(Duration::from_millis(1));
        guard.unlock()?;
        // A try that finds the lock held: outcome="busy".
        let other = client.lock("jobs:shared");
        let held = other.guard()?;
        let busy = std::thread::scope(|s| s.spawn(|| other.try_lock()).join().unwrap())?;
        assert!(!busy);
        held.unlock()?;
    }
    println!("{rounds} rounds done; serving http://{addr}/metrics until killed");
    rt.block_on(std::future::pending::<()>());
    Ok(())
}

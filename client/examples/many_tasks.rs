//! Thousands of waiting tasks, two connections: 2,000 async tasks, half taking one hot lock in
//! turn, half each waiting on a lock of its own that a holder releases all at once. Every wait
//! is queued in the client's session on the server; the server's `connected_clients` barely
//! moves. The client's background work runs on this program's runtime
//! (`ClientBuilder::runtime`), as an async service would set it up.
//!
//! Run against `make run`'s server:  cargo run -p rlock-client --release --example many_tasks
//! (set RLOCK_URL to use another server).

use std::time::{Duration, Instant};

use rlock_client::redis;

const TASKS: usize = 2_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::builder()
        .url(url.clone())
        .runtime(tokio::runtime::Handle::current())
        .build()?;
    let mut admin = redis::Client::open(url)?.get_connection()?;
    let clients = |c: &mut redis::Connection| -> redis::RedisResult<i64> {
        let info: String = redis::cmd("INFO").arg("clients").query(c)?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0))
    };

    // A holder (an owner of its own) takes the hot lock and one lock per distinct waiter.
    let holder = client.new_owner();
    let distinct: Vec<String> = (0..TASKS / 2).map(|i| format!("many:job:{i}")).collect();
    for name in distinct.iter().map(String::as_str).chain(["many:hot"]) {
        client
            .async_lock(name)
            .with_owner(holder.clone())
            .lock()
            .await?;
    }
    let before = clients(&mut admin)?;

    let started = Instant::now();
    let tasks: Vec<_> = distinct
        .iter()
        .cloned()
        .chain((0..TASKS / 2).map(|_| "many:hot".to_string()))
        .map(|name| {
            let lock = client.async_lock(name);
            tokio::spawn(async move {
                let guard = lock.guard().await?;
                let granted = Instant::now();
                guard.unlock().await?;
                Ok::<_, rlock_client::Error>(granted)
            })
        })
        .collect();
    // Wait until every task is queued on the server.
    loop {
        let info: String = redis::cmd("INFO").arg("rlock").query(&mut admin)?;
        let queued: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("rlock_session_requests:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        if queued >= TASKS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{TASKS} tasks waiting after {:?}; connections: {before} before, {} now",
        started.elapsed(),
        clients(&mut admin)?
    );

    let released = Instant::now();
    for name in distinct.iter().map(String::as_str).chain(["many:hot"]) {
        client
            .async_lock(name)
            .with_owner(holder.clone())
            .unlock()
            .await?;
    }
    let mut last = Duration::ZERO;
    for t in tasks {
        let granted = t.await.expect("task")?;
        last = last.max(granted.saturating_duration_since(released));
    }
    println!(
        "all {TASKS} granted and released {last:?} after the holder let go \
         ({} of them one after another on the hot lock)",
        TASKS / 2
    );
    Ok(())
}

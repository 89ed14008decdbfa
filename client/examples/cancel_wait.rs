//! Cancelling a blocking wait on shutdown (Redisson's `lockInterruptibly` + `Thread.interrupt`):
//! a worker thread waits for a lock another thread holds; the main thread cancels its
//! `CancelToken`, and the worker's `lock()` returns `Error::Cancelled` at once, its request
//! withdrawn from the server's queue, nothing held.
//!
//! cargo run -p rlock-client --example cancel_wait   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let lock = client.lock("jobs:cancel-demo");
    let held = lock.guard()?; // held by main: the worker will have to wait

    let shutdown = rlock_client::CancelToken::new();
    let worker = {
        let (lock, shutdown) = (lock.clone(), shutdown.clone());
        std::thread::spawn(move || {
            // Every blocking wait inside `run` ends when the token is cancelled.
            shutdown.run(|| lock.lock())
        })
    };
    std::thread::sleep(Duration::from_millis(300)); // the worker waits on the server meanwhile

    let t = Instant::now();
    shutdown.cancel();
    match worker.join().expect("the worker thread") {
        Err(rlock_client::Error::Cancelled { name }) => {
            println!(
                "the wait for '{name}' ended {:?} after the cancel",
                t.elapsed()
            )
        }
        other => println!("unexpected: {other:?}"),
    }
    held.unlock()?;
    println!("locked now: {}", lock.is_locked()?); // false: the cancelled worker holds nothing
    Ok(())
}

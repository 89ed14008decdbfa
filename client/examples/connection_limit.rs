//! A connection limit with a semaphore: sixteen threads (think: sixteen service instances) call
//! a backend that allows four connections at once. Each call holds a permit of one shared
//! semaphore; at most four calls are ever in the backend, the others wait on the server in
//! arrival order and get a permit the moment one is given back.
//!
//! cargo run -p rlock-client --example connection_limit   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: u64 = 4;

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let slots = client.semaphore("backend:connections");
    // The first instance to start sets the limit; the others find it set.
    if !slots.try_set_permits(LIMIT)? {
        println!(
            "limit already set: {} permits free",
            slots.available_permits()?
        );
    }

    let (inside, most, calls) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let start = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let slots = slots.clone();
            let (inside, most, calls) = (inside.clone(), most.clone(), calls.clone());
            std::thread::spawn(move || -> rlock_client::Result<()> {
                for _ in 0..10 {
                    let _permit = slots.guard()?; // given back when the call ends
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(5)); // the backend call
                    inside.fetch_sub(1, Ordering::SeqCst);
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("caller thread")?;
    }
    println!(
        "{} calls by 16 threads in {:?}; at most {} in the backend at once (limit {LIMIT}); {} permits free",
        calls.load(Ordering::Relaxed),
        start.elapsed(),
        most.load(Ordering::SeqCst),
        slots.available_permits()?
    );
    assert!(most.load(Ordering::SeqCst) <= LIMIT);
    Ok(())
}

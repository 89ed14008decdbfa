//! A cache refreshed under a read-write lock: eight reader threads read a two-key cache entry
//! (a price and its currency, written by two separate SETs) under the read lock, while a
//! refresher rewrites both keys under the write lock every 50 ms. Readers run side by side
//! with one another, never during a refresh, so no reader ever sees a price from one refresh
//! with the currency of another. The refresher is not starved by the steady stream of readers:
//! the server queues readers behind a waiting writer.
//!
//! cargo run -p rlock-client --example rw_cache_refresh   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url.clone())?;
    let redis = redis::Client::open(url)?;
    let rw = client.read_write_lock("cache:prices:lock");
    refresh(&rw, &mut redis.get_connection()?, 0)?;

    let stop = Arc::new(AtomicBool::new(false));
    let (reads, torn) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (rw, redis) = (rw.clone(), redis.clone());
            let (stop, reads, torn) = (stop.clone(), reads.clone(), torn.clone());
            std::thread::spawn(move || -> rlock_client::Result<()> {
                let mut con = redis.get_connection().expect("connect");
                while !stop.load(Ordering::Relaxed) {
                    let _read = rw.read_lock().guard()?;
                    let (price, currency): (String, String) = redis::pipe()
                        .get("cache:price")
                        .get("cache:currency")
                        .query(&mut con)
                        .expect("read the cache");
                    // Both keys carry the refresh number they were written by.
                    if price.split(':').next() != currency.split(':').next() {
                        torn.fetch_add(1, Ordering::Relaxed);
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();

    let mut con = redis.get_connection()?;
    let start = Instant::now();
    let mut refreshes = 0;
    let mut longest_wait = Duration::ZERO;
    while start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(50));
        refreshes += 1;
        let t = Instant::now();
        longest_wait = longest_wait.max(refresh(&rw, &mut con, refreshes)?.min(t.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader thread")?;
    }
    println!(
        "{} reads by 8 threads, {refreshes} refreshes (longest wait for the write lock {longest_wait:?}), {} torn reads",
        reads.load(Ordering::Relaxed),
        torn.load(Ordering::Relaxed)
    );
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "a reader saw a half-done refresh"
    );
    Ok(())
}

/// Rewrite both keys under the write lock; returns how long the write lock took to get.
fn refresh(
    rw: &rlock_client::ReadWriteLock,
    con: &mut redis::Connection,
    n: u64,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let _write = rw.write_lock().guard()?;
    let waited = t.elapsed();
    redis::cmd("SET")
        .arg("cache:price")
        .arg(format!("{n}:{}", 100 + n % 7))
        .exec(con)?;
    // Between the two writes the entry is half done: only the lock keeps readers out.
    std::thread::sleep(Duration::from_millis(1));
    redis::cmd("SET")
        .arg("cache:currency")
        .arg(format!("{n}:EUR"))
        .exec(con)?;
    Ok(waited)
}

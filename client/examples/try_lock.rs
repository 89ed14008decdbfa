//! tryLock with a wait and a lease: give up after the wait; the lease frees the lock by itself.
//!
//! cargo run -p rlock-client --example try_lock   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let lock = client.lock("try_lock:lock");

    // This thread holds the lock with a 1.5 s lease and never unlocks it.
    assert!(lock.try_lock_with(Duration::ZERO, Duration::from_millis(1500))?);
    println!(
        "holder: locked with a 1.5 s lease, ttl {:?}",
        lock.remain_time_to_live()?
    );

    let other = lock.clone();
    std::thread::spawn(move || -> rlock_client::Result<()> {
        // No waiting: busy.
        println!("try_lock()            -> {}", other.try_lock()?);
        // Wait 300 ms: still busy, gives up.
        let t = Instant::now();
        let got = other.try_lock_for(Duration::from_millis(300))?;
        println!("try_lock_for(300 ms)  -> {got} after {:?}", t.elapsed());
        // Wait up to 3 s with a 2 s lease: granted when the holder's lease ends.
        let t = Instant::now();
        let got = other.try_lock_with(Duration::from_secs(3), Duration::from_secs(2))?;
        println!(
            "try_lock_with(3 s, 2 s lease) -> {got} after {:?}",
            t.elapsed()
        );
        if got {
            other.unlock()?;
        }
        Ok(())
    })
    .join()
    .unwrap()?;
    Ok(())
}

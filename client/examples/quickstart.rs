//! Quick start: lock, re-enter, unlock, and see a second thread wait its turn.
//!
//! Run against `make run`'s server:  cargo run -p rlock-client --example quickstart
//! (set RLOCK_URL to use another server).

use std::time::{Duration, Instant};

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let lock = client.lock("quickstart:lock");

    // Redisson style: lock() waits until acquired; the watchdog keeps it alive until unlock().
    lock.lock()?;
    lock.lock()?; // re-entry by the same thread
    println!("held {} times by {}", lock.hold_count()?, lock.owner());
    println!("lease left: {:?}", lock.remain_time_to_live()?);

    // Another thread (another owner) waits on the server until we let go.
    let other = lock.clone();
    let waiter = std::thread::spawn(move || -> rlock_client::Result<Duration> {
        let start = Instant::now();
        other.lock()?;
        let waited = start.elapsed();
        other.unlock()?;
        Ok(waited)
    });
    std::thread::sleep(Duration::from_millis(300));
    lock.unlock()?;
    lock.unlock()?; // last hold: the waiting thread gets the lock now
    println!("the other thread waited {:?}", waiter.join().unwrap()?);

    // Rust style: a guard unlocks when it goes out of scope.
    {
        let _guard = lock.guard()?;
        println!("locked by guard: {}", lock.is_locked()?);
    }
    println!("after the guard: locked = {}", lock.is_locked()?);
    Ok(())
}

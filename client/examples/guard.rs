//! Guards: release on scope end, on early return and while a panic unwinds; re-entry with
//! guards; and the async guard.
//!
//! cargo run -p rlock --example guard   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::Duration;

fn main() -> rlock::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock::Client::open(url)?;
    let lock = client.lock("guard:lock");

    {
        let outer = lock.guard()?;
        let inner = lock.guard()?; // re-entry: each guard is one hold
        println!("holds: {}", lock.hold_count()?);
        drop(inner);
        println!(
            "holds after dropping the inner guard: {}",
            lock.hold_count()?
        );
        outer.unlock()?; // explicit unlock reports errors
    }
    println!("locked after both guards: {}", lock.is_locked()?);

    // A panic inside the critical section still releases the lock.
    let l2 = lock.clone();
    let quiet = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {
        eprintln!("(a thread panics while holding the lock)")
    }));
    let result = std::thread::spawn(move || {
        let _g = l2.guard().unwrap();
        panic!("boom inside the critical section");
    })
    .join();
    std::panic::set_hook(quiet);
    println!(
        "thread panicked: {}; locked now: {}",
        result.is_err(),
        lock.is_locked()?
    );

    // A guard with a lease frees by itself even if it is leaked.
    let g = lock.guard_with_lease(Duration::from_millis(500))?;
    std::mem::forget(g);
    std::thread::sleep(Duration::from_millis(700));
    println!(
        "leaked leased guard expired: locked = {}",
        lock.is_locked()?
    );

    // The async guard: unlock().await, or watch for loss while working.
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let lock = client.async_lock("guard:async");
        let g = lock.guard().await?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => println!("async work done"),
            _ = g.lost() => println!("lock lost: work abandoned"),
        }
        g.unlock().await
    })?;
    Ok(())
}

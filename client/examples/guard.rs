//! Guards: release on scope end, on early return and while a panic unwinds; re-entry with
//! guards; and lost-lock detection: another connection force-releases the lock behind the
//! holder's back, and the holder's guard reports it (sync `is_lost`, async `lost()`).
//!
//! cargo run -p rlock-client --example guard   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    // A 3 s watchdog renews every second; a loss is not left to the next renewal: the server
    // pushes it through the client's session within milliseconds.
    let client = rlock_client::Client::builder()
        .url(url.clone())
        .watchdog_timeout(Duration::from_secs(3))
        .build()?;
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

    // Lost-lock detection: an operator (here a second client, on its own connection)
    // force-releases the lock while we hold it. The server tells the client's session at once
    // and the guard says so: stop working, someone else may hold the lock now.
    let operator = rlock_client::Client::open(url)?;
    let g = lock.guard()?;
    println!("holding; lost: {}", g.is_lost());
    assert!(operator.lock("guard:lock").force_unlock()?);
    println!("another connection force-released the lock");
    let t = Instant::now();
    while !g.is_lost() {
        assert!(t.elapsed() < Duration::from_secs(5), "the loss is noticed");
        std::thread::sleep(Duration::from_millis(50)); // ... a unit of work ...
    }
    println!(
        "guard reports the lock lost after {:?}: work stopped",
        t.elapsed()
    );
    assert!(matches!(
        g.unlock(),
        Err(rlock_client::Error::NotOwner { .. })
    ));

    // The async guard: watch for loss while working.
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let lock = client.async_lock("guard:async");
        let g = lock.guard().await?;
        operator.async_lock("guard:async").force_unlock().await?;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(10)) => panic!("the loss goes unnoticed"),
            _ = g.lost() => println!("async guard: lock lost, work abandoned"),
        }
        Ok::<(), rlock_client::Error>(())
    })?;

    // A guard with a lease frees by itself even if it is leaked; nothing renews it, and it
    // counts as lost once the lease has run out.
    let g = lock.guard_with_lease(Duration::from_millis(500))?;
    std::thread::sleep(Duration::from_millis(700));
    println!(
        "leased guard after its lease: lost = {}, locked = {}",
        g.is_lost(),
        lock.is_locked()?
    );
    std::mem::forget(g);
    Ok(())
}

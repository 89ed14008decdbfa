//! Leased worker permits: a render farm allows three jobs at once. Each worker leases a permit
//! for 2 s and extends the lease while it works (`update_lease_time`); one worker "crashes"
//! mid-job and never gives its permit back. Its lease ends and the permit returns to the pool
//! by itself, so the waiting worker gets it about 2 s later instead of never.
//!
//! cargo run -p rlock-client --example leased_permits   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(2);

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let slots = client.permit_expirable_semaphore("render:slots");
    slots.try_set_permits(3)?;
    println!("{} slots free", slots.available_permits()?);

    // Two healthy workers hold a slot each, extending their lease as they go.
    let healthy: Vec<_> = (0..2)
        .map(|w| {
            let slots = slots.clone();
            std::thread::spawn(move || -> rlock_client::Result<()> {
                let permit = slots.guard(LEASE)?;
                let id = permit.permit_id().expect("a leased permit");
                println!("worker {w}: slot {id}");
                for _ in 0..5 {
                    std::thread::sleep(Duration::from_millis(500)); // a step of the job
                    slots.update_lease_time(id, LEASE)?; // still alive: 2 s more
                }
                permit.unlock() // done: the slot goes back at once
            })
        })
        .collect();

    // The third worker takes the last slot and crashes without giving it back.
    let crashed = slots.acquire(LEASE)?;
    println!("worker 2: slot {crashed}, then crashes (a crashed process releases nothing)");

    // A fourth worker waits for a slot: the crashed worker's lease ends and it gets that one.
    let t = Instant::now();
    let id = slots
        .try_acquire_for(Duration::from_secs(10), LEASE)?
        .expect("the crashed worker's slot comes back");
    println!(
        "worker 3: got slot {id} after {:?} (the crashed worker's lease ended)",
        t.elapsed()
    );
    slots.release(id)?;
    for w in healthy {
        w.join().expect("worker thread")?;
    }
    println!(
        "done: {} slots free, {} leased",
        slots.available_permits()?,
        slots.acquired_permits()?
    );
    Ok(())
}

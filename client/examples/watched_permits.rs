//! Watched permits: the render farm of `leased_permits`, without guessing how long a job takes.
//! The semaphore handle is made with `with_watchdog()`: each permit is leased for 3 s and the
//! client's watchdog renews it while the job runs, however long that is. A worker that leaves
//! its permit behind (here: the handle it leased through is dropped without a release, as when
//! a process dies) stops being renewed, and the permit is back 3 s later at most.
//!
//! cargo run -p rlock-client --example watched_permits   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

const LEASE: Duration = Duration::from_secs(3);

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::builder()
        .url(url)
        .watchdog_timeout(Duration::from_secs(3)) // renewal every second
        .build()?;
    let slots = client
        .permit_expirable_semaphore("render:watched")
        .with_watchdog();
    slots.try_set_permits(1)?;

    // A job three times as long as the lease: the permit stays taken throughout.
    let job = slots.guard(LEASE)?;
    std::thread::sleep(LEASE * 3);
    println!(
        "after {:?}: permit {} still leased ({} free), lost: {}",
        LEASE * 3,
        job.permit_id().expect("a leased permit"),
        slots.available_permits()?,
        job.is_lost()
    );
    job.unlock()?;

    // A worker whose handle goes away without releasing: reported, no longer renewed.
    let worker = client
        .permit_expirable_semaphore("render:watched")
        .with_watchdog();
    let left = worker.acquire(LEASE)?;
    drop(worker);
    let t = Instant::now();
    let id = slots
        .try_acquire_for(Duration::from_secs(10), LEASE)?
        .expect("the abandoned permit comes back");
    println!(
        "permit {left} abandoned; {id} granted {:?} later (at most one lease)",
        t.elapsed()
    );
    slots.release(id)
}

//! A start barrier with a count-down latch: a coordinator waits until eight workers (threads
//! here; processes or machines alike) report ready, then opens a second latch that starts them
//! all at once. Nobody polls: waiters wait on the server and are all released in the step that
//! opens the latch.
//!
//! cargo run -p rlock-client --example start_barrier   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::time::{Duration, Instant};

const WORKERS: u64 = 8;

fn main() -> rlock_client::Result<()> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url)?;
    let (ready, go) = (
        client.count_down_latch("barrier:ready"),
        client.count_down_latch("barrier:go"),
    );
    ready.try_set_count(WORKERS)?;
    go.try_set_count(1)?;

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (ready, go) = (ready.clone(), go.clone());
            std::thread::spawn(move || -> rlock_client::Result<Instant> {
                std::thread::sleep(Duration::from_millis(20 * w)); // warming up
                ready.count_down()?;
                go.wait()?; // everyone starts together
                Ok(Instant::now())
            })
        })
        .collect();

    if !ready.wait_for(Duration::from_secs(10))? {
        println!("{} workers never got ready", ready.get_count()?);
        return Ok(());
    }
    println!("all {WORKERS} workers ready; go!");
    let opened = Instant::now();
    go.count_down()?;
    let mut spread = Duration::ZERO;
    for w in workers {
        let started = w.join().expect("worker thread")?;
        spread = spread.max(started.saturating_duration_since(opened));
    }
    println!("every worker started within {spread:?} of the go");
    Ok(())
}

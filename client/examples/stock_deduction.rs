//! The classic stock-deduction scenario: many threads sell from one inventory with a plain
//! read-modify-write (GET, then SET) under the lock. Without the lock they would oversell;
//! with it, exactly the stock is sold and the count ends at zero.
//!
//! cargo run -p rlock-client --example stock_deduction   (RLOCK_URL overrides redis://127.0.0.1:6390/)

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const STOCK: u64 = 500;
const BUYERS: usize = 16;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let client = rlock_client::Client::open(url.clone())?;
    let redis = redis::Client::open(url)?;
    let mut con = redis.get_connection()?;
    redis::cmd("SET")
        .arg("stock:item-1")
        .arg(STOCK)
        .exec(&mut con)?;

    let sold = Arc::new(AtomicU64::new(0));
    let start = std::time::Instant::now();
    let buyers: Vec<_> = (0..BUYERS)
        .map(|_| {
            let lock = client.lock("stock:item-1:lock");
            let redis = redis.clone();
            let sold = sold.clone();
            std::thread::spawn(
                move || -> Result<u64, Box<dyn std::error::Error + Send + Sync>> {
                    let mut con = redis.get_connection()?;
                    let mut mine = 0;
                    loop {
                        let _guard = lock.guard()?;
                        let left: u64 = redis::cmd("GET").arg("stock:item-1").query(&mut con)?;
                        if left == 0 {
                            return Ok(mine);
                        }
                        redis::cmd("SET")
                            .arg("stock:item-1")
                            .arg(left - 1)
                            .exec(&mut con)?;
                        sold.fetch_add(1, Ordering::Relaxed);
                        mine += 1;
                    }
                },
            )
        })
        .collect();
    for (i, b) in buyers.into_iter().enumerate() {
        println!(
            "buyer {i:2} bought {}",
            b.join().unwrap().map_err(|e| e.to_string())?
        );
    }
    let left: u64 = redis::cmd("GET").arg("stock:item-1").query(&mut con)?;
    let sold = sold.load(Ordering::Relaxed);
    println!(
        "sold {sold} of {STOCK} in {:?}; left in stock: {left}",
        start.elapsed()
    );
    assert_eq!((sold, left), (STOCK, 0), "the lock kept the count right");
    Ok(())
}

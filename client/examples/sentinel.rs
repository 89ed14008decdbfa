//! A lock behind Redis Sentinel: the client asks the Sentinels for the primary and follows a
//! failover. It takes and releases `orders:42` once a second and says which primary served
//! each round; start a failover meanwhile (`redis-cli -p 26379 SENTINEL FAILOVER mymaster`, or
//! kill the primary) and watch it move, the rounds going on.
//!
//! Set up the primary, two replicas and three Sentinels as in docs/operations.md ("Sentinel"),
//! then:
//!
//! cargo run -p rlock-client --example sentinel
//!
//! RLOCK_SENTINELS (comma-separated URLs, default the three of the docs' set-up:
//! redis://127.0.0.1:26379,redis://127.0.0.1:26380,redis://127.0.0.1:26381) and RLOCK_MASTER
//! (default mymaster) override where to look; RLOCK_ROUNDS (default 30) how many rounds.

use std::time::{Duration, Instant};

fn main() -> rlock_client::Result<()> {
    let sentinels = std::env::var("RLOCK_SENTINELS").unwrap_or_else(|_| {
        "redis://127.0.0.1:26379,redis://127.0.0.1:26380,redis://127.0.0.1:26381".into()
    });
    let master = std::env::var("RLOCK_MASTER").unwrap_or_else(|_| "mymaster".into());
    let rounds: u32 = std::env::var("RLOCK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let client = rlock_client::Client::builder()
        .sentinel(master, sentinels.split(',').map(str::trim))
        // A call rides out a failover that takes less than this (the docs' Sentinels take
        // about 2 s to notice a dead primary and promote a replica).
        .connect_timeout(Duration::from_secs(10))
        // After each acquire, WAIT until a replica has it: a failover then keeps it.
        .replica_sync(Some(Duration::from_secs(1)))
        .build()?;
    let lock = client.lock("orders:42");
    for round in 1..=rounds {
        let started = Instant::now();
        let guard = lock.guard()?;
        // ... the critical section ...
        guard.unlock()?;
        println!(
            "round {round}: locked and unlocked in {:?} (primary {})",
            started.elapsed(),
            primary_of(&client)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

/// The primary the Sentinels name now, as `host:port` (for the printout only).
fn primary_of(client: &rlock_client::Client) -> String {
    let (master, sentinels) = client.config().sentinel().expect("a Sentinel client");
    for url in sentinels {
        let Ok(c) = redis::Client::open(url.as_str()) else {
            continue;
        };
        let Ok(mut conn) = c.get_connection_with_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let addr: redis::RedisResult<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master)
            .query(&mut conn);
        if let Ok((host, port)) = addr {
            return format!("{host}:{port}");
        }
    }
    "unknown".into()
}

//! Money moved between two accounts under a MultiLock: eight threads transfer random amounts
//! between accounts A and B, in both directions, each transfer holding the locks of both
//! accounts (a plain GET/SET read-modify-write on each balance). Threads that name the
//! accounts in opposite orders do not deadlock: the MultiLock takes its locks in one fixed
//! order. The total never changes.
//!
//! The two accounts' locks may live on two different servers (each lock from its own client):
//! set RLOCK_URL2 to a second server with the module to try that; by default both are on
//! RLOCK_URL (redis://127.0.0.1:6390/).
//!
//! cargo run -p rlock-client --example transfer

use std::time::Instant;

const TRANSFERS: u64 = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390/".into());
    let url2 = std::env::var("RLOCK_URL2").unwrap_or_else(|_| url.clone());
    let (bank_a, bank_b) = (
        rlock_client::Client::open(url.clone())?,
        rlock_client::Client::open(url2)?,
    );
    let redis = redis::Client::open(url)?;
    let mut con = redis.get_connection()?;
    redis::cmd("MSET")
        .arg("acct:A")
        .arg(1000)
        .arg("acct:B")
        .arg(1000)
        .exec(&mut con)?;

    let start = Instant::now();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (a, b) = (bank_a.lock("acct:A:lock"), bank_b.lock("acct:B:lock"));
            // Half the threads name the accounts the other way round.
            let both = if t % 2 == 0 {
                rlock_client::MultiLock::new([a, b])
            } else {
                rlock_client::MultiLock::new([b, a])
            };
            let redis = redis.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let both = both.map_err(|e| e.to_string())?;
                let mut con = redis.get_connection().map_err(|e| e.to_string())?;
                for i in 0..TRANSFERS / 8 {
                    let amount = (t * 7 + i * 13) % 50;
                    let (from, to) = if (t + i) % 2 == 0 {
                        ("acct:A", "acct:B")
                    } else {
                        ("acct:B", "acct:A")
                    };
                    let _both = both.guard().map_err(|e| e.to_string())?;
                    let get = |k: &str, con: &mut redis::Connection| -> i64 {
                        redis::cmd("GET").arg(k).query(con).expect("balance")
                    };
                    let (f, d) = (get(from, &mut con), get(to, &mut con));
                    redis::cmd("MSET")
                        .arg(from)
                        .arg(f - amount as i64)
                        .arg(to)
                        .arg(d + amount as i64)
                        .exec(&mut con)
                        .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("transfer thread")?;
    }
    let (a, b): (i64, i64) = redis::pipe().get("acct:A").get("acct:B").query(&mut con)?;
    println!(
        "{TRANSFERS} transfers in {:?}: A = {a}, B = {b}, total = {}",
        start.elapsed(),
        a + b
    );
    assert_eq!(a + b, 2000, "money was created or lost");
    Ok(())
}

//! RedLock over three independent servers: held while a majority (2 of 3) is held.
//!
//! With RLOCK_URLS set to three comma-separated URLs of servers with the rlock module, it uses
//! those and only shows acquiring and contention. Without it, it starts three redis-server
//! processes of its own (on free ports, no persistence, the module from RLOCK_MODULE or
//! target/release/librlock_module.so: run `make build` first), and then kills them one by one:
//! with one of three down the RedLock is still taken, with two down it is not, and nothing is
//! left behind on the server that is still up. The servers it started are stopped at the end.
//!
//! cargo run -p rlock-client --example redlock
//!
//! Read the RedLock docs before using it: its safety rests on timing assumptions (Kleppmann);
//! a single lock with fencing tokens (`FencedLock`) is the usual alternative.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server this example started; killed when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server() -> Result<(Started, String), Box<dyn std::error::Error>> {
    let module = std::env::var("RLOCK_MODULE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/librlock_module.so"
        )
        .into()
    });
    if !std::path::Path::new(&module).exists() {
        return Err(format!("no module at {module}: run `make build` or set RLOCK_MODULE").into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--loadmodule", &module])
        .stdout(Stdio::null())
        .spawn()?;
    let server = Started(child);
    let url = format!("redis://127.0.0.1:{port}/");
    // Up when it answers PING.
    let t = Instant::now();
    while redis::Client::open(url.as_str())?.get_connection().is_err() {
        if t.elapsed() > Duration::from_secs(5) {
            return Err(format!("redis-server on port {port} did not start").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((server, url))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut started = Vec::new();
    let urls: Vec<String> = match std::env::var("RLOCK_URLS") {
        Ok(list) => list.split(',').map(str::to_string).collect(),
        Err(_) => (0..3)
            .map(|_| {
                let (s, url) = start_server()?;
                started.push(s);
                Ok(url)
            })
            .collect::<Result<_, Box<dyn std::error::Error>>>()?,
    };
    assert_eq!(urls.len(), 3, "RLOCK_URLS must name three servers");
    let clients = urls
        .iter()
        .map(|u| {
            rlock_client::Client::builder()
                .url(u.clone())
                .connect_timeout(Duration::from_millis(300))
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let red = rlock_client::RedLock::new(clients.iter().map(|c| c.lock("report:nightly")))?;
    println!(
        "RedLock over {} servers, quorum {}",
        urls.len(),
        red.quorum()
    );

    let lease = Duration::from_secs(10);
    let g = red
        .try_guard_with(Duration::from_secs(1), lease)?
        .expect("all servers up");
    let valid = g
        .valid_until()
        .expect("a lease")
        .saturating_duration_since(Instant::now());
    println!(
        "taken on all three; valid for {valid:?} (lease {lease:?} minus time taken and drift)"
    );
    // Another thread's RedLock over the same servers can't get a majority meanwhile.
    let other = red.clone();
    let busy = std::thread::spawn(move || other.try_lock_for(Duration::from_millis(200)))
        .join()
        .expect("thread")?;
    println!(
        "another thread, 200 ms wait: {}",
        if busy { "taken (wrong!)" } else { "not taken" }
    );
    assert!(!busy);
    drop(g);

    if started.is_empty() {
        println!("(servers given by RLOCK_URLS: not killing any)");
        return Ok(());
    }
    drop(started.remove(0));
    println!("killed server 1 of 3");
    let g = red.try_guard_with(Duration::from_secs(2), lease)?;
    println!(
        "with one server down: {}",
        if g.is_some() {
            "taken (2 of 3)"
        } else {
            "not taken"
        }
    );
    assert!(g.is_some());
    drop(g);

    drop(started.remove(0));
    println!("killed server 2 of 3");
    let got = red.try_lock_with(Duration::from_millis(500), lease)?;
    println!(
        "with two servers down: {}",
        if got { "taken (wrong!)" } else { "not taken" }
    );
    assert!(!got);
    let mut last = redis::Client::open(urls[2].as_str())?.get_connection()?;
    let left: i64 = redis::cmd("EXISTS")
        .arg("report:nightly")
        .query(&mut last)?;
    println!(
        "left on the server still up: {}",
        if left == 0 {
            "nothing"
        } else {
            "a lock (wrong!)"
        }
    );
    assert_eq!(left, 0);
    Ok(())
}

//! Scenario 5: memory per lock and per parked waiter.

use crate::bench::{info_int, Bench};
use crate::protocols::owner;
use crate::report::{Report, Table};
use redis::Connection;
use rlock_tests::{lock_channel, wait_until};
use std::time::Duration;

pub fn run(b: &Bench, r: &mut Report) {
    let mut conn = b.conn();
    let who = owner(3);
    let _: i64 = redis::cmd("RLOCK.ACQUIRE")
        .arg("mem:lock")
        .arg(&who)
        .arg(30_000)
        .query(&mut conn)
        .unwrap();
    let _: i64 = redis::cmd("RLOCK.ACQUIRE")
        .arg("mem:fenced")
        .arg(&who)
        .arg(30_000)
        .arg("FENCE")
        .query(&mut conn)
        .unwrap();
    let usage = |c: &mut Connection, k: &str| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(k)
            .arg("SAMPLES")
            .arg(0)
            .query(c)
            .unwrap()
    };
    let lock_bytes = usage(&mut conn, "mem:lock");
    let token_bytes = usage(&mut conn, "redisson_lock_token:{mem:fenced}");

    let w = b.sizes.waiters;
    let rl = per_waiter(
        b,
        w,
        |c, i| {
            let cmd = redis::cmd("RLOCK.ACQUIRE")
                .arg("mem:lock")
                .arg(owner(1000 + i))
                .arg(30_000)
                .arg("BLOCK")
                .arg(0)
                .clone();
            c.send_packed_command(&cmd.get_packed_command()).unwrap();
        },
        |c| info_int(c, "clients", "blocked_clients") as usize,
    );
    // A Redisson waiter's server-side state is its subscription to the lock channel.
    let channel = lock_channel("mem:lock");
    let rs = per_waiter(
        b,
        w,
        |c, _| {
            let cmd = redis::cmd("SUBSCRIBE").arg(&channel).clone();
            c.send_packed_command(&cmd.get_packed_command()).unwrap();
        },
        |c| info_int(c, "clients", "pubsub_clients").max(subscribers(c, &channel)) as usize,
    );

    // What Redis itself costs per blocked client: a native BLPOP waiter.
    let blpop = per_waiter(
        b,
        w,
        |c, _| {
            let cmd = redis::cmd("BLPOP").arg("mem:list").arg(0).clone();
            c.send_packed_command(&cmd.get_packed_command()).unwrap();
        },
        |c| info_int(c, "clients", "blocked_clients") as usize,
    );

    let mut t = Table::new("5. Memory", &["what", "rlock bytes", "redisson bytes"]);
    t.row(vec![
        "MEMORY USAGE of a lock key (same layout)".into(),
        lock_bytes.to_string(),
        lock_bytes.to_string(),
    ]);
    t.row(vec![
        "MEMORY USAGE of a fencing-token key".into(),
        token_bytes.to_string(),
        token_bytes.to_string(),
    ]);
    t.row(vec![
        format!("server memory per parked waiter ({w} waiters)"),
        format!("{rl:.0}"),
        format!("{rs:.0} (subscription)"),
    ]);
    t.row(vec![
        format!("for comparison: a native BLPOP waiter ({w} waiters)"),
        format!("{blpop:.0}"),
        String::new(),
    ]);
    r.tables.push(t);
    r.target(
        &format!("server memory per parked waiter ({w} waiters)"),
        format!("{rl:.0} bytes"),
        "≤ 256 bytes",
        rl <= 256.0,
    );
}

fn subscribers(c: &mut Connection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(c)
        .unwrap();
    v.1
}

/// used_memory growth per waiter: `w` idle connections are opened first (a connection's own
/// buffers are not a waiter's cost), then each starts waiting.
fn per_waiter(
    b: &Bench,
    w: usize,
    start: impl Fn(&mut Connection, usize),
    parked: impl Fn(&mut Connection) -> usize,
) -> f64 {
    let mut stats = b.conn();
    let mut conns: Vec<Connection> = (0..w)
        .map(|_| {
            let mut c = b.conn();
            let _: String = redis::cmd("PING").query(&mut c).unwrap();
            c
        })
        .collect();
    // Clients parked before (the bench's rlock client keeps its session listener parked).
    let parked_before = parked(&mut stats);
    let blocked_before = info_int(&mut stats, "clients", "blocked_clients");
    let before = info_int(&mut stats, "memory", "used_memory");
    for (i, c) in conns.iter_mut().enumerate() {
        start(c, i);
    }
    wait_until(Duration::from_secs(30), "waiters parked", || {
        parked(&mut stats) >= parked_before + w
    });
    let after = info_int(&mut stats, "memory", "used_memory");
    drop(conns); // disconnecting withdraws every waiter
    wait_until(Duration::from_secs(30), "waiters gone", || {
        info_int(&mut stats, "clients", "blocked_clients") == blocked_before
    });
    (after - before) as f64 / w as f64
}

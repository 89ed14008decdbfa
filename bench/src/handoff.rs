//! Scenario 2b: the hand-off floor. N clients pass one token through a native list
//! (`BLPOP tok 0` → critical section → `LPUSH tok x`): two native commands and one wake-up of a
//! blocked client per hand-off, the least Redis itself does to hand something from one blocked
//! client to the next. RLOCK's raw `BLOCK` clients (`RLOCK.ACQUIRE ... BLOCK 0`,
//! `RLOCK.RELEASE`) do the same work with their two commands; RLOCK / token says what the lock
//! costs over that floor. Rounds alternate token and RLOCK; the best round of each counts
//! (single runs swing on a shared machine).

use crate::bench::Bench;
use crate::exclusion::{critical, Exclusion};
use crate::protocols::{Kind, Protocol};
use crate::report::{jain, Report, Table};
use redis::Connection;
use std::time::{Duration, Instant};

const ROUNDS: u32 = 3;

pub fn run(b: &Bench, r: &mut Report) {
    let mut t = Table::new(
        &format!(
            "2b. Hand-off floor: N clients passing one token (BLPOP → critical section → LPUSH) vs RLOCK raw BLOCK clients (hand-offs/s, best of {ROUNDS} interleaved rounds)"
        ),
        &["clients", "token", "rlock", "rlock / token", "Jain token / rlock"],
    );
    let run = b.sizes.run / ROUNDS;
    for &n in b.sizes.contended {
        let mut best = [Passed::default(), Passed::default()];
        for round in 0..ROUNDS {
            let key = format!("floor:{n}:{round}:token");
            let mut c = b.conn();
            let _: () = redis::cmd("DEL").arg(&key).query(&mut c).unwrap();
            let _: i64 = redis::cmd("LPUSH")
                .arg(&key)
                .arg("x")
                .query(&mut c)
                .unwrap();
            let tokens = (0..n)
                .map(|_| Box::new(Token::new(b.conn())) as Box<dyn Protocol>)
                .collect();
            best[0] = best[0].better(pass_around(r, tokens, &key, run));
            let locks = (0..n).map(|i| b.protocol(Kind::Rlock, i)).collect();
            let key = format!("floor:{n}:{round}:rlock");
            best[1] = best[1].better(pass_around(r, locks, &key, run));
        }
        let [token, rlock] = &best;
        let ratio = rlock.rate / token.rate;
        t.row(vec![
            n.to_string(),
            format!("{:.0}", token.rate),
            format!("{:.0}", rlock.rate),
            format!("{ratio:.2}×"),
            format!("{:.3} / {:.3}", token.jain, rlock.jain),
        ]);
        r.target(
            &format!("contended hand-offs/s vs native token floor (BLPOP+LPUSH), {n} clients"),
            format!("{ratio:.2}×"),
            "≥ 0.9×",
            ratio >= 0.9,
        );
    }
    r.tables.push(t);
}

/// A token in a list: taking it is `BLPOP`, giving it back `LPUSH`.
pub struct Token {
    conn: Connection,
}

impl Token {
    pub fn new(conn: Connection) -> Token {
        Token { conn }
    }
}

impl Protocol for Token {
    fn acquire(&mut self, key: &str, _lease_ms: i64, _wait: Option<Duration>) -> bool {
        let got: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(key)
            .arg(0)
            .query(&mut self.conn)
            .expect("BLPOP");
        got.is_some()
    }

    fn release(&mut self, key: &str) -> bool {
        let _: i64 = redis::cmd("LPUSH")
            .arg(key)
            .arg("x")
            .query(&mut self.conn)
            .expect("LPUSH");
        true
    }
}

#[derive(Default, Clone, Copy)]
pub struct Passed {
    pub rate: f64,
    jain: f64,
}

impl Passed {
    fn better(&self, other: Passed) -> Passed {
        if other.rate > self.rate {
            other
        } else {
            *self
        }
    }
}

/// Every client loops take → critical section → give back on `key` for `run`; a second
/// client inside the critical section (from the take's reply to the give-back's send) is
/// counted as a mutual-exclusion violation.
pub fn pass_around(
    r: &mut Report,
    clients: Vec<Box<dyn Protocol>>,
    key: &str,
    run: Duration,
) -> Passed {
    let check = Exclusion::default();
    let start = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .map(|mut p| {
                let check = &check;
                scope.spawn(move || {
                    let mut count = 0u64;
                    while start.elapsed() < run {
                        assert!(p.acquire(key, 30_000, None), "blocking take failed");
                        let held = check.exclusive();
                        critical();
                        drop(held);
                        if !p.release(key) {
                            check.refused();
                        }
                        count += 1;
                    }
                    count
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();
    r.violations += check.violations();
    Passed {
        rate: counts.iter().sum::<u64>() as f64 / elapsed.as_secs_f64(),
        jain: jain(&counts),
    }
}

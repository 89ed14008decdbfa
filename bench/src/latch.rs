//! Scenario 7: latch fan-out. N waiters wait on one count-down latch; one countdown opens it.
//! Measured: the time from the countdown until the last waiter has its answer, and what the
//! server executed (commands, counting those a script runs) and sent for the wake-up.
//!
//! - rlock: each waiter sent `RLATCH.AWAIT key BLOCK 0`; its answer is the reply `1`.
//! - Redisson (`RCountDownLatch.await()`, each waiter its own client): `GET`, `SUBSCRIBE` to the
//!   latch channel, `GET` again, wait for the message `0`; then `GET` (0: answered) and, after
//!   await returned, `UNSUBSCRIBE`.
//!
//! One thread drives every waiter's sockets without blocking, sweeping them in turn, so the
//! figures are the server's and the protocol's, not those of a thousand client threads being
//! scheduled on a few cores. A waiter's answer is timed when a sweep finds it (a sweep of every
//! socket takes about a millisecond).

use crate::bench::{commandstats, info_int, reset_stats, Bench};
use crate::report::{ms, percentile, Bar, Report, Table};
use crate::sem_protocols::{count_down, Scripts, Side};
use rlock_tests::redisson::latch as rl;
use rlock_tests::wait_until;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Measured {
    last: Duration,
    p50: Duration,
    cmds: u64,
    bytes: i64,
}

pub fn run(b: &Bench, r: &mut Report) {
    let scripts = Scripts::load(&mut b.conn());
    let n = b.sizes.waiters;
    let mut t = Table::new(
        &format!("7. Latch fan-out: {n} waiters on one latch, one countdown opens it"),
        &[
            "protocol",
            "last waiter answered, ms",
            "p50 ms",
            "server commands",
            "bytes the server sent",
        ],
    );
    let results: Vec<(Side, Measured)> = [Side::Rlock, Side::Redisson]
        .into_iter()
        .map(|side| (side, measure(b, &scripts, side, n)))
        .collect();
    for (side, m) in &results {
        t.row(vec![
            side.name().into(),
            ms(m.last),
            ms(m.p50),
            m.cmds.to_string(),
            m.bytes.to_string(),
        ]);
        r.bars.push(Bar {
            group: format!("latch fan-out ({n}), waiters answered/s"),
            series: side.name().into(),
            value: n as f64 / m.last.as_secs_f64().max(1e-6),
        });
    }
    let (rl, rs) = (&results[0].1, &results[1].1);
    let ratio = rs.last.as_secs_f64() / rl.last.as_secs_f64().max(1e-6);
    r.target(
        &format!("latch fan-out ({n} waiters): last waiter answered, vs Redisson"),
        format!(
            "{} ms vs {} ms ({ratio:.2}× sooner)",
            ms(rl.last),
            ms(rs.last)
        ),
        "sooner than Redisson",
        ratio > 1.0,
    );
    r.target(
        &format!("latch fan-out ({n} waiters): server commands and bytes sent"),
        format!(
            "{} cmds / {} B vs {} cmds / {} B",
            rl.cmds, rl.bytes, rs.cmds, rs.bytes
        ),
        "one command (the countdown), fewer bytes",
        rl.cmds == 1 && rl.bytes < rs.bytes,
    );
    r.tables.push(t);
}

/// A command in RESP.
fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Where a waiter is in its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// rlock: waiting for the reply to `RLATCH.AWAIT`.
    Reply,
    /// Redisson: subscribed, waiting for the message `0`.
    Message,
    /// Redisson: the `GET` after the message sent.
    Count,
    /// Redisson: answered; its `UNSUBSCRIBE` sent.
    Unsubscribe,
    Done,
}

struct Waiter {
    cmd: TcpStream,
    sub: Option<TcpStream>,
    cmd_in: Vec<u8>,
    sub_in: Vec<u8>,
    step: Step,
    answered: Option<Instant>,
}

/// Send `request` on `stream` (blocking) and read until the reply ends with `end`.
fn call(stream: &mut TcpStream, request: &[u8], end: &[u8]) {
    stream.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.ends_with(end) {
        let k = stream.read(&mut buf).expect("a reply");
        assert!(k > 0, "connection closed");
        got.extend_from_slice(&buf[..k]);
    }
}

/// Read what has arrived without waiting.
fn drain(stream: &mut TcpStream, into: &mut Vec<u8>) {
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => panic!("connection closed"),
            Ok(k) => into.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) => panic!("read: {e}"),
        }
    }
}

impl Waiter {
    fn new(side: Side, addr: &str, key: &str) -> Waiter {
        let mut cmd = TcpStream::connect(addr).expect("connect");
        cmd.set_nodelay(true).unwrap();
        let mut sub = None;
        let step = match side {
            Side::Rlock => {
                cmd.write_all(&resp(&[b"RLATCH.AWAIT", key.as_bytes(), b"BLOCK", b"0"]))
                    .unwrap();
                Step::Reply
            }
            Side::Redisson => {
                let get = resp(&[b"GET", key.as_bytes()]);
                call(&mut cmd, &get, b"\r\n1\r\n");
                let mut s = TcpStream::connect(addr).expect("connect");
                s.set_nodelay(true).unwrap();
                let channel = rl::channel(key);
                call(
                    &mut s,
                    &resp(&[b"SUBSCRIBE", channel.as_bytes()]),
                    b":1\r\n",
                );
                // Retry after subscribing (no lost wake-up), then wait.
                call(&mut cmd, &get, b"\r\n1\r\n");
                sub = Some(s);
                Step::Message
            }
        };
        Waiter {
            cmd,
            sub,
            cmd_in: Vec::new(),
            sub_in: Vec::new(),
            step,
            answered: None,
        }
    }

    fn nonblocking(&self) {
        self.cmd.set_nonblocking(true).unwrap();
        if let Some(s) = &self.sub {
            s.set_nonblocking(true).unwrap();
        }
    }

    /// Read what arrived and take the protocol's next step.
    fn advance(&mut self, key: &str) {
        drain(&mut self.cmd, &mut self.cmd_in);
        if let Some(s) = self.sub.as_mut() {
            drain(s, &mut self.sub_in);
        }
        match self.step {
            Step::Reply if self.cmd_in.ends_with(b":1\r\n") => {
                self.answered = Some(Instant::now());
                self.step = Step::Done;
            }
            Step::Message if self.sub_in.ends_with(b"\r\n$1\r\n0\r\n") => {
                self.cmd_in.clear();
                self.cmd
                    .write_all(&resp(&[b"GET", key.as_bytes()]))
                    .unwrap();
                self.step = Step::Count;
            }
            Step::Count if self.cmd_in.ends_with(b"$-1\r\n") => {
                self.answered = Some(Instant::now());
                self.sub_in.clear();
                let unsubscribe = resp(&[b"UNSUBSCRIBE", rl::channel(key).as_bytes()]);
                let s = self.sub.as_mut().expect("a subscription");
                s.write_all(&unsubscribe).unwrap();
                self.step = Step::Unsubscribe;
            }
            Step::Unsubscribe if self.sub_in.ends_with(b":0\r\n") => self.step = Step::Done,
            _ => {}
        }
    }
}

/// Commands run since the stats were reset, not counting this benchmark's own (INFO, CONFIG
/// RESETSTAT).
fn wake_up_commands(conn: &mut redis::Connection) -> u64 {
    commandstats(conn)
        .iter()
        .filter(|(name, _)| !name.starts_with("info") && !name.starts_with("config"))
        .map(|(_, (calls, _))| calls)
        .sum()
}

fn net_out(conn: &mut redis::Connection) -> i64 {
    info_int(conn, "stats", "total_net_output_bytes")
}

fn measure(b: &Bench, scripts: &Scripts, side: Side, n: usize) -> Measured {
    let key = format!("latch:{}", side.name());
    let addr = b
        .url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let mut conn = b.conn();
    let _: i64 = redis::cmd("RLATCH.TRYSETCOUNT")
        .arg(&key)
        .arg(1)
        .query(&mut conn)
        .unwrap();
    // Clients parked before (the bench's rlock client keeps its session listener parked).
    let blocked = info_int(&mut conn, "clients", "blocked_clients");
    let mut waiters: Vec<Waiter> = (0..n).map(|_| Waiter::new(side, &addr, &key)).collect();
    if side == Side::Rlock {
        wait_until(Duration::from_secs(60), "every waiter parked", || {
            info_int(&mut conn, "clients", "blocked_clients") == blocked + n as i64
        });
    }
    for w in &waiters {
        w.nonblocking();
    }
    reset_stats(&mut conn);
    // The size of one INFO stats reply, taken out of the byte count below.
    let first = net_out(&mut conn);
    let before = net_out(&mut conn);
    let info_reply = before - first;
    let started = Instant::now();
    count_down(side, &mut conn, scripts, &key);
    while waiters.iter().any(|w| w.step != Step::Done) {
        for w in waiters.iter_mut().filter(|w| w.step != Step::Done) {
            w.advance(&key);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "waiters never answered"
        );
    }
    let bytes = net_out(&mut conn) - before - info_reply;
    let cmds = wake_up_commands(&mut conn);
    let mut took: Vec<Duration> = waiters
        .iter()
        .map(|w| w.answered.expect("answered") - started)
        .collect();
    Measured {
        last: *took.iter().max().unwrap(),
        p50: percentile(&mut took, 50.0),
        cmds,
        bytes,
    }
}

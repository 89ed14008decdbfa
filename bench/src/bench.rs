//! What every scenario shares: the server, sizes for full and quick runs, and INFO helpers.

use crate::protocols::{self, Kind, Protocol, Shas};
use redis::Connection;
use std::collections::HashMap;
use std::time::Duration;

/// How big each scenario is.
#[derive(Clone)]
pub struct Sizes {
    /// Measuring time per throughput run.
    pub run: Duration,
    /// Connections of the pipelined run, and pairs per pipeline.
    pub pipe_conns: usize,
    pub pipe_pairs: u64,
    /// Calls per server-cost measurement.
    pub cost_calls: u64,
    pub contended: &'static [usize],
    pub expiry_rounds: usize,
    pub watchdog_locks: u64,
    pub waiters: usize,
    /// Tasks of the many-waiters scenario, and force releases timed for the lost-hold signal.
    pub many_waiters: usize,
    pub lost_rounds: usize,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            run: Duration::from_secs(3),
            pipe_conns: 4,
            pipe_pairs: 64,
            cost_calls: 50_000,
            contended: &[2, 8, 32],
            expiry_rounds: 300,
            watchdog_locks: 10_000,
            waiters: 1_000,
            many_waiters: 10_000,
            lost_rounds: 200,
        }
    }

    /// A smoke run for CI: every scenario, small and short.
    pub fn quick() -> Sizes {
        Sizes {
            run: Duration::from_millis(300),
            pipe_conns: 2,
            pipe_pairs: 16,
            cost_calls: 2_000,
            contended: &[2, 8],
            expiry_rounds: 3,
            watchdog_locks: 500,
            waiters: 50,
            many_waiters: 200,
            lost_rounds: 20,
        }
    }
}

pub struct Bench {
    pub url: String,
    pub shas: Shas,
    pub client: rlock_client::Client,
    pub sizes: Sizes,
}

impl Bench {
    pub fn conn(&self) -> Connection {
        protocols::connection(&self.url)
    }

    pub fn protocol(&self, kind: Kind, i: usize) -> Box<dyn Protocol> {
        protocols::connect(kind, &self.url, &self.shas, Some(&self.client), i)
    }
}

/// `INFO commandstats` as command → (calls, usec).
pub fn commandstats(conn: &mut Connection) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(f)?.parse::<u64>().ok())
            };
            Some((name.to_string(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// The server process' CPU time so far, user + system (`INFO cpu`), in seconds: with the
/// command count it gives the server's whole cost per operation (event loop, socket reads and
/// writes, blocked-client bookkeeping), which `INFO commandstats` leaves out.
pub fn server_cpu(conn: &mut Connection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(conn).unwrap();
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

pub fn reset_stats(conn: &mut Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
}

/// Commands executed since the last reset, not counting the benchmark's own INFO/CONFIG.
pub fn commands_executed(conn: &mut Connection) -> u64 {
    commandstats(conn)
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config" | "ping" | "client|list"))
        .map(|(_, (calls, _))| calls)
        .sum()
}

pub fn info_int(conn: &mut Connection, section: &str, field: &str) -> i64 {
    rlock_tests::info_int(conn, section, field)
}

/// Run the two sides of slice `k` of an interleaved comparison, `raw` first on even slices and
/// `client` first on odd ones, and return (raw, client). The side measured second in a slice
/// ran 10-15 % slower, whichever it was (section 6, sync, three runs each: raw first 0.84-0.85×,
/// client first 1.02-1.06×, alternating 0.93-1.00×): a fixed order measured the order.
/// Both sides get `cx` (what they share mutably, such as the report).
pub fn in_turn<C, T>(
    k: u32,
    cx: &mut C,
    raw: impl FnOnce(&mut C) -> T,
    client: impl FnOnce(&mut C) -> T,
) -> (T, T) {
    if k.is_multiple_of(2) {
        let r = raw(cx);
        (r, client(cx))
    } else {
        let c = client(cx);
        (raw(cx), c)
    }
}

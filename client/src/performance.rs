//! # Performance
//!
//! What the client costs on top of the raw `RLOCK.*` commands, measured side by side in one run
//! of `make bench` (which writes `bench/results/latest.md`). Each comparison uses the same
//! connection style on both sides: a blocking connection on the calling thread for the sync
//! API, a multiplexed tokio connection awaited by one task for the async API, and one
//! connection per thread parked with `BLOCK` for the contended runs.
//!
//! Figures of one `make bench` run on a shared 2-core machine (redis-server 7.0.15, other
//! builds running beside it: rates swing by ±20 % from run to run; the CPU columns do not):
//!
//! | what | raw commands | client | client / raw |
//! |---|---|---|---|
//! | sync, uncontended acquire+release pairs/s (section 6, best of 6 rounds) | 31 564 | 28 453 | 0.90× |
//! | async (tokio), uncontended pairs/s (section 6) | 8 269 | 9 080 | 1.10× |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 18 938 | 17 538 | 0.93× |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 14 252 | 17 626 | 1.24× |
//! | this process' CPU per sync pair (section 6) | 15.0 µs | 16.0 µs | +1.0 µs |
//! | this process' CPU per async pair (section 6) | 61.8 µs | 63.8 µs | +2.0 µs |
//!
//! Before this client was restructured (every call spawned onto the client's runtime and
//! answered over a channel), the same benchmark gave 0.41× raw for sync pairs and 0.37× at 32
//! contended threads.
//!
//! To reproduce: `make bench` (about 80 s), or `target/release/rlock-bench --only client` and
//! `--only contended` after a build (`RLOCK_MODULE` pointing at the module, as `make bench`
//! sets it).
//!
//! Where the time goes: a sync call runs on the calling thread over a pooled blocking
//! connection (no thread hop); an async call is awaited on the caller's executor and its reply
//! comes through the multiplexed connection's driver on the client's runtime (as with a raw
//! multiplexed connection, whose driver is a task too). On top of the round trip the client
//! adds the owner's name (cached per thread), a registry entry per hold (for the watchdog and
//! for "did my acquire happen anyway?" after a broken connection) and the pool checkout: about
//! a microsecond of CPU per acquire+release pair.

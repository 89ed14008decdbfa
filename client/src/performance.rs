//! # Performance
//!
//! What the client costs on top of the raw `RLOCK.*` commands, measured side by side in one run
//! of `make bench` (which writes `bench/results/latest.md`). Each comparison uses the same
//! connection style on both sides: a blocking connection on the calling thread for the sync
//! API, a multiplexed tokio connection awaited by one task for the async API, and one
//! connection per thread parked with `BLOCK` for the contended runs.
//!
//! Figures of one `make bench` run on a shared 2-core machine (redis-server 7.0.15, other
//! builds running beside it, so rates swing from run to run):
//!
//! | what | raw commands | client | client / raw |
//! |---|---|---|---|
//! | sync, uncontended acquire+release pairs/s (section 6) | 23 186 | 21 035 | 0.91× |
//! | async (tokio), uncontended pairs/s (section 6) | 8 849 | 8 573 | 0.97× |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 11 666 | 17 120 | 1.47× |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 20 532 | 18 311 | 0.89× |
//! | this process' CPU per sync pair (section 6) | 17.1 µs | 17.8 µs | +0.7 µs |
//! | this process' CPU per async pair (section 6) | 64.1 µs | 65.4 µs | +1.3 µs |
//!
//! Other runs of the same sections on the same day: sync uncontended 0.89× to 1.02×, async
//! 0.87× to 0.99×, 8 threads 0.93× to 1.31×, 32 threads 0.94× to 1.24×. The sync client makes
//! exactly the raw commands' system calls (one `sendto` and one `recvfrom` per command, counted
//! with `strace -c`); what it adds is about a microsecond of CPU per pair, so the spread of the
//! ratios is the machine's, not the client's.
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

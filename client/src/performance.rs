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
//! | sync, uncontended acquire+release pairs/s (section 6) | 21 794 | 20 444 | 0.94× |
//! | async (tokio), uncontended pairs/s (section 6) | 9 436 | 10 571 | 1.12× |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 19 059 | 19 274 | 1.01× |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 19 966 | 20 466 | 1.03× |
//! | this process' CPU per sync pair (section 6) | 20.1 µs | 21.1 µs | +1.0 µs |
//! | this process' CPU per async pair (section 6) | 68.5 µs | 61.3 µs | −7.2 µs |
//!
//! The synchronizer family in the same run (section 8; raw side: one blocking connection per
//! thread, waits parked with `BLOCK 0`; client side: the sync API):
//!
//! | what | raw commands | client | client / raw |
//! |---|---|---|---|
//! | read-write lock, 8 threads, 90 % reads, acquire+release/s | 29 303 | 31 025 | 1.06× |
//! | semaphore, 16 threads on 4 permits, acquire+release/s | 38 568 | 35 715 | 0.93× |
//!
//! | what | 3 locks one after another | MultiLock of the 3 | MultiLock / sequential |
//! |---|---|---|---|
//! | 3 locks on 3 servers (sync), acquire+release of the set per second | 4 490 | 7 288 | 1.62× |
//!
//! A MultiLock sends each step's requests to all servers at once, also from sync code: inside
//! its parallel steps a blocking request is written, and read only after the others were
//! written (`transport/pool.rs` has the measurement; without it the MultiLock was 0.95× of the
//! sequential locks).
//!
//! Other runs of the same sections on the same day: sync uncontended 0.89× to 1.02×, async
//! 0.87× to 0.99×, 8 threads 0.93× to 1.31×, 32 threads 0.94× to 1.24×. The sync client makes
//! exactly the raw commands' system calls (one `sendto` and one `recvfrom` per command, counted
//! with `strace -c`); what it adds is about a microsecond of CPU per pair, so the spread of the
//! ratios is the machine's, not the client's. Section 8 in other runs of the same week: read-write
//! lock 0.90× to 1.06×, semaphore 0.91× to 1.02×, MultiLock 1.42× to 2.03×.
//!
//! Before this client was restructured (every call spawned onto the client's runtime and
//! answered over a channel), the same benchmark gave 0.41× raw for sync pairs and 0.37× at 32
//! contended threads.
//!
//! To reproduce: `make bench` (about 5 minutes), or `target/release/rlock-bench --only client`,
//! `--only contended` and `--only family` after a build (`RLOCK_MODULE` pointing at the
//! module, as `make bench` sets it).
//!
//! Where the time goes: a sync call runs on the calling thread over a pooled blocking
//! connection (no thread hop); an async call is awaited on the caller's executor and its reply
//! comes through the multiplexed connection's driver on the client's runtime (as with a raw
//! multiplexed connection, whose driver is a task too). On top of the round trip the client
//! adds the owner's name (cached per thread), a registry entry per hold (for the watchdog and
//! for "did my acquire happen anyway?" after a broken connection) and the pool checkout: about
//! a microsecond of CPU per acquire+release pair.

//! # Performance
//!
//! What the client costs on top of the raw `RLOCK.*` commands, measured side by side in one run
//! of `make bench` (which writes `bench/results/latest.md`). Each comparison uses the same
//! connection style on both sides: a blocking connection on the calling thread for the sync
//! API, a multiplexed tokio connection awaited by one task for the async API, and one
//! connection per thread (or task) parked with `BLOCK` for the contended runs. The client waits
//! through its session (one listener connection per server, see "Waiting: sessions" in the
//! crate docs); the raw `BLOCK` clients each park a connection.
//!
//! Figures of one `make bench` run on a shared 2-core machine (Redis 7.0.15; the range is
//! over three runs in a row, the README's benchmark section lists them):
//!
//! | what | raw commands | client | client / raw (3 runs) |
//! |---|---|---|---|
//! | sync, uncontended acquire+release pairs/s (section 6) | 10 230 | 8 939 | 0.87× (0.85–0.89×) |
//! | async (tokio), uncontended pairs/s (section 6) | 6 914 | 7 378 | 1.07× (1.07–1.08×) |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 21 406 | 16 047 | 0.75× (0.62–0.76×) |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 18 668 | 16 459 | 0.88× (0.76–0.88×) |
//! | read-write lock, 8 threads, 90 % reads, ops/s (section 8) | 33 785 | 24 636 | 0.73× (0.73–0.80×) |
//! | semaphore, 16 threads on 4 permits, ops/s (section 8) | 43 129 | 25 430 | 0.59× (0.59–0.61×) |
//! | MultiLock of 3 locks on 3 servers vs the 3 one after another (section 8) | 3 691 | 7 093 | 1.92× (1.92–2.06×) |
//! | 10,000 tasks waiting (section 7): server memory per queued request | 35 858 B (a blocked client) | 500 B | 0.014× |
//! | 10,000 tasks waiting: connections per waiter | 1 | 0.0001 | |
//! | 5,000 distinct locks released at once: grant p99 / last | 152 ms / 158 ms | 30 ms / 30 ms | |
//! | hot lock, 5,000 waiters each taking it once: hand-offs/s | 16 868 | 12 699 | 0.75× (0.71–0.83×) |
//! | lost-hold signal, `RLOCK.FORCERELEASE` → `lost()`, p50 / p99 | never (found at the next renewal, 10 s by default) | 0.05 / 0.11 ms | |
//!
//! A sync acquire+release pair costs the calling thread about a microsecond of CPU more than
//! the raw commands (`perf stat`: 17.2 against 15.6 µs per pair); naming the session in every
//! acquire costs the server about 1.6 µs more per pair (it watches the hold for loss;
//! `INFO commandstats`). Contended, the server's whole CPU per operation (`INFO cpu`, section
//! 8) is 20.2 µs raw against 25.9 µs through the client for the semaphore, 24.0 against
//! 29.6 µs for the read-write lock: the listener's reads (about one per two grants). Before
//! waits went through the session (each on a pooled connection of its own, parked with
//! `BLOCK`), the same scenarios measured 0.93× (semaphore) and 1.06× (read-write lock).
//!
//! Where the time goes in a contended hand-off: the grant of a queued request reaches the
//! listener thread, which wakes the waiting thread or task; the releasing thread's next
//! acquire is answered `QUEUED` at once. That is four thread wake-ups per hand-off where raw
//! `BLOCK` clients need two (the releaser and the next holder, each woken by its own socket),
//! and one more command (the listener's next read). The listener runs on a thread of its own
//! over a blocking connection: as a task of the client's runtime over an async connection it
//! measured 0.68×/0.65× at 8/32 threads in the same runs where the thread gave 0.69×/0.89×
//! (every read then also wakes the connection's driver task). A listener's read that goes out
//! before the grants it returned are handed over is parked on the server when the next grant
//! comes, and costs a park and a wake-up per hand-off (0.52× against 0.75×), so it goes out
//! after. Raising the listener thread's priority (`renice -15` during section 8) left the
//! semaphore at 0.59×: the listener is not starved of CPU; the cost is the extra command and
//! the longer chain of wake-ups on every grant.
//!
//! Before sessions, a waiting acquire held a connection of its own from a pool of 64: with 1,000
//! tasks in one process (500 on a hot lock, 500 on distinct locks), only 64 reached the server
//! and the distinct locks' grants took p99 5,065 ms; a `try_lock_for(300 ms)` on a free lock
//! took 5.5 s behind 80 waiting tasks.
//!
//! To reproduce: `make bench` (about 4 minutes), or `target/release/rlock-bench --only
//! client`, `--only contended`, `--only family` and `--only many` after a build (`RLOCK_MODULE` pointing at the
//! module, as `make bench` sets it).
//!
//! Where the time goes in an uncontended call: a sync call runs on the calling thread over a
//! pooled blocking connection (no thread hop); an async call is awaited on the caller's
//! executor and its reply comes through the multiplexed connection's driver on the client's
//! runtime (as with a raw multiplexed connection, whose driver is a task too). On top of the
//! round trip the client adds the owner's name (cached per thread), the session's name in the
//! acquire, a registry entry per hold (for the watchdog, the lost-hold signal and "did my
//! acquire happen anyway?" after a broken connection) and the pool checkout.

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
//! Figures of the last of three `make bench` runs in a row on a shared 2-core machine (Redis
//! 7.0.15); the range is over the three runs (the README's benchmark section lists them). The
//! two sides of each comparison run in turns, each first half of the time: whichever ran first
//! in a fixed order measured up to 0.2× better (see `bench::in_turn`).
//!
//! | what | raw commands | client | client / raw (3 runs) |
//! |---|---|---|---|
//! | sync, uncontended `try_lock_with(0, lease)` + `unlock()` pairs/s (section 6; the default path: below) | 9 982 | 9 568 | 0.96× (0.94–0.96×) |
//! | async (tokio), the same, awaited from the main thread (section 6 of that version) | 7 442 | 7 380 | 0.99× (0.98–0.99×) |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 22 388 | 22 271 | 0.99× (0.98–1.06×) |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 21 351 | 21 599 | 1.01× (0.96–1.01×) |
//! | read-write lock, 8 threads, 90 % reads, ops/s (section 8) | 36 805 | 32 584 | 0.89× (0.89–0.92×) |
//! | semaphore, 16 threads on 4 permits, ops/s (section 8) | 42 533 | 39 553 | 0.93× (0.92–0.93×) |
//! | MultiLock of 3 locks on 3 servers vs the 3 one after another (section 8) | 3 848 | 8 035 | 2.09× (1.86–2.09×) |
//! | 10,000 tasks waiting (section 7): server memory per queued request | 35 859 B (a blocked client) | 327 B (325–413 B) | 0.009× |
//! | 10,000 tasks waiting: connections per waiter | 1 | 0.0001 | |
//! | 5,000 distinct locks released at once: grant p99 / last | 150 ms / 157 ms | 29 ms / 29 ms (24–38 ms / 24–41 ms) | |
//! | hot lock, 5,000 async tasks each taking it once: hand-offs/s, client on the tasks' runtime | 16 862 | 16 719 | 0.99× (0.94–0.99×) |
//! | the same, client on a runtime of its own (the default) | 16 862 | 13 316 | 0.79× (0.73–0.79×) |
//! | lost-hold signal, `RLOCK.FORCERELEASE` → `lost()`, p50 / p99 | never (found at the next renewal, 10 s by default) | 0.04 / 0.08 ms | |
//!
//! **A sync wait parks its own connection for its first 50 ms.** A sync call's pooled blocking
//! connection is the thread's for the call, so a wait says `QUEUE <id> <timeout> BLOCK 50`: it
//! is queued in the session like any wait, and a grant within 50 ms is the acquire's own reply,
//! as for a raw `BLOCK` client: one command and one wake-up per hand-off. Through the listener
//! a hand-off cost a third command (the listener's next `RSESSION.READ`) and two more thread
//! wake-ups (the listener, then the waiting thread): 8 threads on one lock measured 0.62–0.76×
//! raw `BLOCK` clients that way, the semaphore 0.59–0.61×, the read-write lock 0.73–0.80×.
//!
//! **What a session costs the server.** Naming the session in an acquire makes the server
//! watch the hold for loss. A lock's request tells the lease end of the hold it was just granted
//! (`Pending::granted_until`), so watching needs no second read of the keys: callgrind
//! (`scripts/instructions.sh` with `SESSION` added) counts 10.4k instructions for
//! `RLOCK.ACQUIRE ... SESSION s` against 12.4k before, 7.2k without a session.
//!
//! **The hot lock.** 5,000 async tasks each take one lock once, in FIFO order. Every hand-off
//! goes server → the listener thread → the waiting task on the tasks' runtime → the runtime
//! that runs the client's connection driver, which writes the release. With the client on a
//! runtime of its own (the default) that is three thread wake-ups in a row where a raw `BLOCK`
//! waiter needs one (its socket wakes the runtime that runs its task and writes its release):
//! 0.73–0.79×. Given the tasks' runtime ([`ClientBuilder::runtime`](crate::ClientBuilder::runtime)),
//! the driver is woken by the task on the worker it runs on, no thread wake-up at all: 0.94–0.99×.
//! (Section 7 runs the raw waiters first, then the client each way.) Outcomes pushed to the
//! listener instead of read (an experiment: `RSESSION.OPEN ... PUSH` publishing each outcome,
//! acknowledged by a read every 5 ms) saved about 10 % of server CPU per hand-off but no
//! hand-off rate: 0.69–0.72× against 0.70× reading, so it was not kept.
//!
//! Before sessions, a waiting acquire held a connection of its own from a pool of 64: with 1,000
//! tasks in one process (500 on a hot lock, 500 on distinct locks), only 64 reached the server
//! and the distinct locks' grants took p99 5,065 ms; a `try_lock_for(300 ms)` on a free lock
//! took 5.5 s behind 80 waiting tasks.
//!
//! To reproduce: `make bench` (about 5 minutes), or `target/release/rlock-bench --only
//! client`, `--only contended`, `--only family` and `--only many` after a build (`RLOCK_MODULE` pointing at the
//! module, as `make bench` sets it).
//!
//! Where the time goes in an uncontended call: a sync call runs on the calling thread over a
//! pooled blocking connection (no thread hop); an async call is awaited on the caller's
//! executor and its reply comes through the multiplexed connection's driver on the client's
//! runtime, or on the caller's when the client was given it (as with a raw multiplexed
//! connection, whose driver is a task too). On top of the
//! round trip the client adds the owner's name (cached per thread), the session's name in the
//! acquire, a registry entry per hold (for the watchdog, the lost-hold signal and "did my
//! acquire happen anyway?" after a broken connection) and the pool checkout.
//!
//! **The default path: `lock()` + `unlock()`.** Section 6 now measures the call most users
//! write, `lock()` + `unlock()` with the watchdog, sync and async, on distinct keys and on one
//! key, beside the raw pair on the same keys and beside `try_lock_with(0, lease)`, every path
//! once per slice with the order reversed every other slice; the async paths run in a tokio
//! task, as application code does (it used to be awaited from the runtime's `block_on` thread,
//! where the raw connection's driver is a thread away too, which hid the cost below). Where the
//! time went, measured:
//!
//! - **Async: the hop between runtimes, almost all of it.** The client's multiplexed connection
//!   is driven on the client's own runtime, so each command wakes that runtime's thread and
//!   each reply wakes the caller's: client CPU 65–89 µs per pair against 18–25 µs for the raw
//!   pair (whose driver runs on the task's own runtime), 0.35–0.50× in six runs. That is the
//!   default by promise: a client without a runtime runs nothing on its caller's
//!   (`tests/tests/client_runtime.rs`). Given the caller's runtime
//!   ([`ClientBuilder::runtime`](crate::ClientBuilder::runtime)) the same calls measured
//!   0.75–0.88×: the nearest design, and section 6 reports it beside the default. Tried and
//!   not kept: an async request polled on another multi-thread runtime went over a multiplexed
//!   connection driven there, 0.76–0.93× by default, but that ran the client's connection
//!   drivers on the caller's runtime without being asked, which the promise above rules out.
//! - **Sync: no extra round trip; about 1.5 µs of client CPU per pair for the wait's
//!   bookkeeping.** In three runs `lock()` + `unlock()` measured 0.79–0.83× and
//!   `try_lock_with(0, lease)` 0.85–0.88×, client CPU 21.6–25.7 against 20.4–24.0 µs per pair
//!   (the raw pair 16.8–20.0 µs). What only `lock()` does: it may wait, so its request is
//!   registered with the session's listener before it is sent (a reply channel, the slot, the
//!   send kept apart so that a caller going away can't lose a grant) and the acquire carries
//!   `QUEUE <request> 0 BLOCK 50`; a grant at once skips the rest. Both paths pay the session's
//!   name in the acquire (the server watches the hold: `RLOCK.ACQUIRE ... SESSION s` 4.6–7.9 µs
//!   per call in `INFO commandstats` against 3.0–4.2 µs without, on this busy machine, 10.4k
//!   instructions against 7.2k), which the lost-hold signal needs, and the registry entry,
//!   which the watchdog needs. A hold's lost-flag channel is now made only for a guard that
//!   asks (`Guard::lost`), not for every acquire (not measured on its own).

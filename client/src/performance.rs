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
//! | sync, uncontended acquire+release pairs/s (section 6) | 9 054 | 8 738 | 0.97× (0.93–0.97×) |
//! | async (tokio), uncontended pairs/s (section 6) | 6 640 | 6 541 | 0.99× (0.96–0.99×) |
//! | sync, 8 threads on one lock, hand-offs/s (section 2) | 19 092 | 16 708 | 0.88× (0.88–1.01×) |
//! | sync, 32 threads on one lock, hand-offs/s (section 2) | 21 660 | 21 335 | 0.99× (0.96–1.01×) |
//! | read-write lock, 8 threads, 90 % reads, ops/s (section 8) | 34 876 | 31 834 | 0.91× (0.89–0.91×) |
//! | semaphore, 16 threads on 4 permits, ops/s (section 8) | 42 705 | 40 018 | 0.94× (0.89–0.94×) |
//! | MultiLock of 3 locks on 3 servers vs the 3 one after another (section 8) | 3 690 | 7 614 | 2.06× (2.06–2.08×) |
//! | 10,000 tasks waiting (section 7): server memory per queued request | 35 858 B (a blocked client) | 500 B | 0.014× |
//! | 10,000 tasks waiting: connections per waiter | 1 | 0.0001 | |
//! | 5,000 distinct locks released at once: grant p99 / last | 181 ms / 183 ms | 37 ms / 37 ms (26–37 ms) | |
//! | hot lock, 5,000 async tasks each taking it once: hand-offs/s | 12 954 | 8 885 | 0.69× (0.69–0.84×) |
//! | lost-hold signal, `RLOCK.FORCERELEASE` → `lost()`, p50 / p99 | never (found at the next renewal, 10 s by default) | 0.09 / 0.18 ms | |
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
//! goes server → the listener thread → the waiting task on the caller's runtime → the client's
//! runtime, whose connection driver writes the release. That is three thread wake-ups in a row
//! where a raw `BLOCK` waiter needs one (its socket wakes the runtime that runs its task and
//! writes its release). Outcomes pushed to the listener instead of read (an experiment:
//! `RSESSION.OPEN ... PUSH` publishing each outcome, acknowledged by a read every 5 ms) saved
//! about 10 % of server CPU per hand-off but no hand-off rate: 0.69–0.72× against 0.70×
//! reading, and 9.0–13.1k against 10.3–13.5k hand-offs/s with 8 async tasks on one lock. So
//! it was not kept. The figure swings between 0.69× and 0.84× from run to run.
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

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
//! | the same, client on a runtime of its own (the default), before its async requests went over a connection of the tasks' runtime | 16 862 | 13 316 | 0.79× (0.73–0.79×; now 0.86–1.03×) |
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
//! goes server → the listener thread → the waiting task on the tasks' runtime, which writes its
//! release on a connection driven on that runtime. It used to go on through the runtime that
//! ran the client's connection driver: with the client on a runtime of its own, three thread
//! wake-ups in a row where a raw `BLOCK` waiter needs one, 0.73–0.79×. Given the tasks' runtime
//! ([`ClientBuilder::runtime`](crate::ClientBuilder::runtime)) it measured 0.94–0.99×; the
//! default now takes the same path.
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
//! executor, and when a multi-thread tokio runtime polls it, it goes over a multiplexed
//! connection whose driver is a task of that runtime (as with a raw multiplexed connection
//! opened there). On top of the round trip the client adds the owner's name (cached per
//! thread), the session's name in the acquire, a registry entry per hold (for the watchdog, the
//! lost-hold signal and "did my acquire happen anyway?" after a broken connection) and the pool
//! checkout.
//!
//! **The default path: `lock()` + `unlock()`.** Section 6 measures the call most users write,
//! `lock()` + `unlock()` with the watchdog, sync and async, on distinct keys and on one key,
//! beside the raw pair on the same keys and beside `try_lock_with(0, lease)`, every path once
//! per slice with the order reversed every other slice; the async paths run in a tokio task,
//! as application code does. Four runs on the shared 2-core machine, client / raw: sync
//! `lock()` 0.79–0.86× (distinct keys) and 0.82–0.87× (one key), `try_lock_with` 0.83–0.91×;
//! async `lock()` 0.83–0.88× and 0.79–0.90×, `try_lock_with` 0.87–0.92×. The goal is 0.9×.
//!
//! - **Async: no thread crossing per command.** Driven on the client's own runtime, the shared
//!   connection made each command wake that runtime's thread and each reply wake the caller's:
//!   client CPU 65–89 µs per pair against 18–25 µs raw, 0.35–0.50× in six runs. An async
//!   request polled by a multi-thread runtime now sends on a connection driven there, opened
//!   by that runtime's first request (`runtime::caller`; at most 4 runtimes are remembered,
//!   oldest dropped first). Background work stays on the client's runtime, and so do requests
//!   from a current-thread runtime (its driver would run only while its owner drives it), from
//!   another executor, and from blocking drops (the blocked thread may be the worker that
//!   driver needs). The same paths also took the hot lock's hand-offs from 0.73–0.79× to
//!   0.86–1.03× (section 7).
//! - **Client bookkeeping, counted by callgrind** (a loop of 20,000 pairs under `valgrind
//!   --tool=callgrind`): `lock()` 19.8k → 15.0k instructions, `unlock()` 11.8k → 10.1k. SipHash
//!   over the holds, waits-in-flight and listener maps was 2.3k per pair (now foldhash); a
//!   queued acquire grew its command 8 times (now sized once, `ops::keyed_cmd`); a grant was
//!   registered and then witnessed in two look-ups (now one). What `lock()` still does beyond
//!   `try_lock_with`: it may wait, so its request is registered with the session's listener
//!   before it is sent (a reply channel, the slot, the send kept apart so that a caller going
//!   away can't lose a grant) and the acquire carries `QUEUE <request> 0 BLOCK 50`. redis-rs'
//!   reader zero-fills its 8 KB buffer on every read (3.9k instructions per reply), for the raw
//!   pair as much as for the client.
//! - **The server's session watch**, which the lost-hold signal needs: `RLOCK.ACQUIRE ...
//!   SESSION s QUEUE ...` + `RLOCK.RELEASE` cost 24.6k server instructions per pair, 23.0k now
//!   that a watched lock's grant and last release no longer open the key again after the
//!   command, against 15.7k without a session (callgrind on `redis-server`). The rest: parsing
//!   the session's arguments (1.0k), finding the session and checking its ACL user (0.9k),
//!   watching the hold and its lease-end re-check (1.3k), ending the watch (1.5k).
//!   Since then the watch was halved (4.9k above the plain pair in the module's dispatcher,
//!   7.0k counting Redis' own parsing of the acquire's seven more arguments).
//!
//! **Where the rest goes.** Section 6 also runs the raw pair with the words `lock()` sends
//! (`SESSION s QUEUE request 0`, and `BLOCK 50` from a blocking connection), which splits the
//! gap in every run. Three runs on the 2-core machine: raw watched / raw 0.94–0.96× sync and
//! 0.93–0.95× async (the server's watch); `lock()` / raw watched 0.93–0.94× and 0.92–0.94× (the
//! client); `lock()` / raw 0.87–0.89×. The client's part is about 4 µs of CPU per pair with the
//! same system calls and context switches as the raw pair; a side-by-side `perf` profile spreads
//! it over the request's layers (send future, pool checkout, retry wrapper, session
//! registration, hold registry, future moves), a few tenths of a µs each, as that code runs
//! cold after every blocking read. Removing one layer (the boxed send of a blocking request)
//! moved nothing beyond the noise.
//!
//! **Counted per pair** (`rlock-bench --pairs API PATH N` runs one path of section 6 alone;
//! `valgrind --tool=callgrind` on it counts this process only, the server being another; the
//! difference between N = 2,000 and 6,000 sync pairs, or 1,500 and 4,000 async, is the cost of
//! the pairs between). The raw pair: 23.4k instructions sync, 28.9k async, most of it redis-rs
//! (its reader zero-fills 8 KB per reply: 10.8k per pair). `lock()` + `unlock()` added 8.0k
//! sync and 11.1k async; then 7.3k and 7.1k: the async owner is cached per task (formatting it
//! on every call, the task id written out and parsed back into a number, then the owner, with
//! their allocations, was about 3k per pair), and a single server's protocol is one load
//! instead of a read lock, an address clone and a hash three times a pair, and a queued wait
//! registers with one look at the session (0.7k together, and fewer atomic writes to lines
//! every calling thread shares). Now 6.0k and 6.7k (lock 29.4k sync, 35.7k async): the sync
//! API parks on a parker kept per thread (`pollster` made one per call) and builds each call's
//! future where it is pinned (it was copied once per call: 0.5k a pair), pooled connections are
//! boxed (one was copied four times per request), a task's hold witness needs no list, and the
//! session's object word and the hold id's hash cost less (1.3k sync, 0.6k async together).
//! What is left, sync, over the raw pair: the request's layers (send, wait, retry, pool
//! checkout: about 2.2k), the hold registry (1.4k: four look-ups of a hashed hold id, and the
//! hold's state allocated at the grant and freed at the last release), the session's words
//! in the acquire (1.1k, which the raw pair with the same words pays too), the session
//! registration of a wait that may queue (0.6k: a reply channel and a slot, forgotten when the
//! grant is the reply) and, in the benchmark's loop, a handle per pair (0.5k: its name and
//! anchor allocated and freed). Async, the caller's own code moves each call's future (about
//! 0.3k per call: a lock's is 2.6 KB), which a smaller future would make cheaper.
//!
//! Contending threads pay more than these counts say: in section 2 (which shows the server's
//! and this process' CPU per hand-off) the client's process spends 2–8 µs more per hand-off
//! than raw `BLOCK` clients and the server 0–7 µs more (the session's parked request: a timer
//! per park, the watch of each hold), on a 2-core machine shared with other work.

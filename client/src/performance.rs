//! # Performance
//!
//! What the client costs on top of the raw `RLOCK.*` commands, measured side by side in one run
//! of `make bench` (section 6 of its report, "rlock client vs raw commands"). Each row compares
//! the client with the raw commands over the same connection style: a blocking connection per
//! thread for the sync API, a multiplexed tokio connection for the async API, and `BLOCK`
//! waiters for the contended runs.
//!
//! FIGURES
//!
//! Where the time goes: a sync call runs on the calling thread over a pooled blocking
//! connection (no thread hop); an async call is awaited on the caller's executor and its reply
//! comes through the multiplexed connection's driver on the client's runtime. On top of the
//! round trip the client adds the owner's name, a registry entry per hold (for the watchdog and
//! for "did my acquire happen anyway?" after a broken connection), and the pool checkout.

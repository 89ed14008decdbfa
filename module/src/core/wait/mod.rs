//! The one waiting mechanism every object uses: FIFO queues per (db, key) whose waiters carry an
//! object's request ([`Request`]), the serving loop that grants them, and the module's timers
//! (deadlines, re-checks). The skin (`wait/`) parks and wakes clients around these; objects
//! only say, through [`Request`], whether a waiter can be granted now and what granting writes.

pub mod by_value;
pub mod claims;
pub mod deadlock;
pub mod fifo;
pub mod grant;
pub mod request;
pub mod schedule;
#[cfg(test)]
mod session_model;
pub mod session_rules;

pub use fifo::{Grouped, KeyId, KeyRef, KeyView, Queues, Waiter};
pub use grant::{serve, ObjectKeys, Outcome, Served};
pub use request::{Acquiring, Decided, Hold, Object, Req, Request, Tidy, TryGrant};
pub use schedule::{Deadline, Deadlines, TimerKey, Timers};

/// The hash maps of the waiting mechanism. foldhash instead of std's SipHash: a hand-off looks
/// up the queues by key about two dozen times, and SipHash was 17 % of a contended hand-off's
/// instructions (callgrind, 8 clients); foldhash is seeded per process like std's.
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

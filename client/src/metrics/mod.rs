//! What the client reports through the [`metrics`](https://docs.rs/metrics) facade (the
//! `metrics` feature): a service installs the recorder it already uses (Prometheus, StatsD,
//! OpenTelemetry, ...) and turns reporting on with `ClientBuilder::metrics`; off (the default)
//! the hot path pays one branch. Without the feature, `off.rs`'s calls do nothing and compile
//! away.
//!
//! Every series is labelled by object `kind` (`lock`, `fair_lock`, `rwlock`, `semaphore`, ...)
//! and `name`: the object's name as the service's [`NameLabel`] collapses it, so the number of
//! series stays what the service decides (the default collapses every name to `*`).
//!
//! | series | type | labels |
//! |---|---|---|
//! | `rlock_acquires_total` | counter | kind, name, outcome (`acquired`, `busy`, `timeout`, `cancelled`, `error`) |
//! | `rlock_wait_seconds` | histogram | kind, name, outcome: from the call to its outcome |
//! | `rlock_waiting` | gauge | kind, name: acquires under way |
//! | `rlock_held` | gauge | kind, name: holds this client has now |
//! | `rlock_hold_seconds` | histogram | kind, name, ended (`released`, `lost`, `expired`: a lease of its own ran out) |
//! | `rlock_lost_holds_total` | counter | kind, name: holds that ended by anything but a release |
//! | `rlock_watchdog_renewals_total` | counter | outcome (`renewed`, `lost`, `failed`) |
//! | `rlock_session_reconnects_total` | counter | (none): listeners that had to connect again |
//! | `rlock_retries_total` | counter | reason (`connection`, `redirect`, `requeue`) |
//! | `rlock_permits_in_doubt_total` | counter | kind (`semaphore`), name: plain permits that may have been taken and be held by nobody (an acquire's reply lost, a give-back that failed) |

#[cfg(feature = "metrics")]
mod facade;
#[cfg(not(feature = "metrics"))]
mod off;

#[cfg(feature = "metrics")]
pub use facade::NameLabel;
#[cfg(feature = "metrics")]
pub(crate) use facade::{describe, Metrics};
#[cfg(not(feature = "metrics"))]
pub(crate) use off::{describe, Metrics};

/// How an acquire ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// Refused without waiting (a `try_lock` that found it held).
    Busy,
    Timeout,
    Cancelled,
    Error,
}

impl Outcome {
    /// The `outcome` label (of the metrics and the `rlock.acquire` span).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Error => "error",
        }
    }
}

/// How a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HoldEnd {
    /// Released by its owner (or, for an orphan, by the watchdog).
    Released,
    /// Ended by anything else: its lease ran out under the watchdog, FORCERELEASE, DEL, a
    /// failover (found by the watchdog or told by the server).
    Lost,
    /// A hold taken with a lease of its own whose lease ran out before a release.
    Expired,
}

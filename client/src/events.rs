//! What the watchdog tells a listener of the application's
//! ([`ClientBuilder::watchdog_listener`](crate::ClientBuilder::watchdog_listener)): a renewal
//! that failed, a hold found gone, a hold that reached the longest hold.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// One hold the watchdog renews (or renewed): what [`WatchdogEvent`] is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldInfo {
    /// The kind of object: `"lock"`, `"read"`, `"write"`, `"permit"`, ...
    pub kind: &'static str,
    /// The object's name (its key).
    pub name: Arc<str>,
    /// Who holds it: the owner (`UUID:thread-number`), or a leased permit's id.
    pub holder: Arc<str>,
}

impl HoldInfo {
    pub(crate) fn of(id: &crate::holds::HoldId) -> HoldInfo {
        HoldInfo {
            kind: id.kind.name,
            name: id.key.clone(),
            holder: id.holder.clone(),
        }
    }
}

/// What the watchdog tells the listener (see
/// [`ClientBuilder::watchdog_listener`](crate::ClientBuilder::watchdog_listener)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchdogEvent {
    /// A renewal got no answer about the hold (the server could not be reached, the
    /// connection broke, a failover or migration was under way). The hold is kept and
    /// renewed again next period; it is lost if no renewal succeeds before its lease ends.
    RenewalFailed {
        /// The hold.
        hold: HoldInfo,
        /// Why, as the client's error says it.
        error: String,
    },
    /// The hold was found gone (expired, deleted, force-released): by a renewal (refused, or
    /// answered that it is not held), or, with the module, reported by the server through the
    /// client's session within milliseconds. The hold is lost
    /// ([`Guard::is_lost`](crate::Guard::is_lost)) and no longer renewed. Told once per hold.
    Lost {
        /// The hold.
        hold: HoldInfo,
    },
    /// The hold has been renewed for the longest hold
    /// ([`ClientBuilder::watchdog_max_hold`](crate::ClientBuilder::watchdog_max_hold)): the
    /// watchdog renews it no more and counts it lost from now on; on the server it ends when
    /// its last renewal's lease does (at most the watchdog timeout later), unless released.
    MaxHoldReached {
        /// The hold.
        hold: HoldInfo,
        /// How long the watchdog had kept it.
        held: Duration,
    },
}

/// The application's listener, as the configuration keeps it.
#[derive(Clone)]
pub(crate) struct Listener(Arc<dyn Fn(&WatchdogEvent) + Send + Sync>);

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Listener")
    }
}

impl Listener {
    pub(crate) fn new(f: impl Fn(&WatchdogEvent) + Send + Sync + 'static) -> Listener {
        Listener(Arc::new(f))
    }

    /// Tell the listener; a panic in it is logged, never taken into the watchdog (which must
    /// go on renewing every other hold).
    pub(crate) fn tell(&self, event: &WatchdogEvent) {
        if catch_unwind(AssertUnwindSafe(|| (self.0)(event))).is_err() {
            tracing::error!(?event, "rlock: the watchdog listener panicked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_panicking_listener_does_not_take_the_caller_down() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let l = Listener::new(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            panic!("listener bug");
        });
        let hold = HoldInfo {
            kind: "lock",
            name: Arc::from("a"),
            holder: Arc::from("u:1"),
        };
        l.tell(&WatchdogEvent::Lost { hold: hold.clone() });
        l.tell(&WatchdogEvent::Lost { hold });
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}

//! The watchdog: what this client holds, and the one background task per client that renews
//! every lock taken without a lease, all in one pipelined round trip per period.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::client::Inner;
use crate::owner::Owner;

/// The life of one hold as a guard sees it: `lost` turns true when the watchdog finds the lock
/// gone (expired, deleted, force-released by someone else) while this client still held it.
#[derive(Debug)]
pub(crate) struct HoldState {
    lost: watch::Sender<bool>,
}

impl HoldState {
    pub(crate) fn new() -> Arc<HoldState> {
        Arc::new(HoldState {
            lost: watch::Sender::new(false),
        })
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.lost.subscribe()
    }
}

#[derive(Debug)]
struct Entry {
    /// Holds this client believes the owner has (the server's count after our last command).
    holds: u64,
    /// Taken at least once without a lease: renew it.
    watchdog: bool,
    /// For lease-only holds: when the lease ends (the entry is forgotten after that).
    expires_at: Option<Instant>,
    /// The watchdog found it gone; kept until the owner unlocks or locks again.
    lost: bool,
    state: Arc<HoldState>,
}

/// Holds of this client, keyed by (lock name, owner).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: HashMap<(String, Owner), Entry>,
}

/// One lock the watchdog renews this round.
pub(crate) struct Renewal {
    pub(crate) name: String,
    pub(crate) owner: Owner,
    pub(crate) state: Arc<HoldState>,
}

impl Registry {
    /// Holds this client knows `owner` has on `name` (0 when unknown or lost).
    pub(crate) fn holds(&self, name: &str, owner: &Owner) -> u64 {
        match self.map.get(&(name.to_string(), owner.clone())) {
            Some(e) if e.lost || e.expires_at.is_some_and(|t| t <= Instant::now()) => 0,
            Some(e) => e.holds,
            None => 0,
        }
    }

    /// Whether the watchdog found the current hold of `owner` on `name` gone.
    pub(crate) fn is_lost(&self, name: &str, owner: &Owner) -> bool {
        self.map
            .get(&(name.to_string(), owner.clone()))
            .is_some_and(|e| e.lost)
    }

    /// A successful acquire: `holds` is the owner's count now; `lease` None = watchdog mode.
    pub(crate) fn on_acquired(
        &mut self,
        name: &str,
        owner: &Owner,
        holds: u64,
        lease: Option<Duration>,
    ) -> Arc<HoldState> {
        let now = Instant::now();
        let e = self
            .map
            .entry((name.to_string(), owner.clone()))
            .and_modify(|e| {
                if e.lost {
                    *e = Entry::fresh();
                }
            })
            .or_insert_with(Entry::fresh);
        e.holds = holds.max(1);
        match lease {
            None => {
                e.watchdog = true;
                e.expires_at = None;
            }
            Some(l) if !e.watchdog => e.expires_at = Some(now + l),
            Some(_) => {}
        }
        e.state.clone()
    }

    /// A release answered: `remaining` holds are left (0 = fully released: stop renewing).
    pub(crate) fn on_released(&mut self, name: &str, owner: &Owner, remaining: u64) {
        let key = (name.to_string(), owner.clone());
        if remaining == 0 {
            self.map.remove(&key);
        } else if let Some(e) = self.map.get_mut(&key) {
            e.holds = remaining;
        }
    }

    /// The owner does not hold it (NOTOWNER) or a force release removed it.
    pub(crate) fn forget(&mut self, name: &str, owner: &Owner) {
        self.map.remove(&(name.to_string(), owner.clone()));
    }

    /// A force release: nobody holds `name` any more.
    pub(crate) fn forget_name(&mut self, name: &str) {
        self.map.retain(|(n, _), _| n != name);
    }

    /// The locks to renew now; lease-only holds whose lease has ended are dropped.
    pub(crate) fn renewals(&mut self, now: Instant) -> Vec<Renewal> {
        self.map
            .retain(|_, e| e.watchdog || e.lost || e.expires_at.is_none_or(|t| t > now));
        self.map
            .iter()
            .filter(|(_, e)| e.watchdog && !e.lost)
            .map(|((name, owner), e)| Renewal {
                name: name.clone(),
                owner: owner.clone(),
                state: e.state.clone(),
            })
            .collect()
    }

    /// A renewal found the lock not held. Returns whether that hold was still current (a hold
    /// released or re-taken since the renewal was sent is left alone).
    pub(crate) fn on_renew_failed(&mut self, r: &Renewal) -> bool {
        match self.map.get_mut(&(r.name.clone(), r.owner.clone())) {
            Some(e) if Arc::ptr_eq(&e.state, &r.state) && !e.lost => {
                e.lost = true;
                e.watchdog = false;
                e.state.mark_lost();
                true
            }
            _ => false,
        }
    }

    /// Number of locks being renewed.
    pub(crate) fn renewing(&self) -> usize {
        self.map.values().filter(|e| e.watchdog && !e.lost).count()
    }
}

impl Entry {
    fn fresh() -> Entry {
        Entry {
            holds: 0,
            watchdog: false,
            expires_at: None,
            lost: false,
            state: HoldState::new(),
        }
    }
}

/// The renewal loop. Holds only a weak reference: it ends when the client is dropped.
pub(crate) async fn run(inner: Weak<Inner>, interval: Duration, lease_ms: u64) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        renew_once(&inner, lease_ms).await;
    }
}

/// Renew every watchdog lock in one pipelined round trip (`RLOCK.RENEW` per lock).
pub(crate) async fn renew_once(inner: &Arc<Inner>, lease_ms: u64) {
    let batch = inner.registry.lock().unwrap().renewals(Instant::now());
    if batch.is_empty() {
        return;
    }
    let locks: Vec<(String, String)> = batch
        .iter()
        .map(|r| (r.name.clone(), r.owner.as_str().to_string()))
        .collect();
    let replies = match inner.conns.renew_all(&locks, lease_ms).await {
        Ok(v) => v,
        Err(e) => {
            // Keep every entry: the next period tries again (a hiccup must not drop renewals).
            tracing::warn!(error = %e, locks = batch.len(), "rlock: can't renew lock leases; will retry");
            return;
        }
    };
    for (r, reply) in batch.iter().zip(replies) {
        let gone = match reply {
            Ok(1) => false,
            Ok(_) => true,
            // Unreachable, or busy with a migration or failover: not an answer about the lock.
            Err(e)
                if e.is_io_error()
                    || e.is_unrecoverable_error()
                    || e.is_timeout()
                    || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
                    || crate::conn::redirect_of(&e).is_some() =>
            {
                tracing::warn!(lock = %r.name, error = %e, "rlock: can't renew lock lease; will retry");
                false
            }
            Err(e) => {
                tracing::warn!(lock = %r.name, error = %e, "rlock: renewal refused");
                true
            }
        };
        if gone && inner.registry.lock().unwrap().on_renew_failed(r) {
            tracing::warn!(
                lock = %r.name,
                owner = %r.owner,
                "rlock: lock lost: the watchdog found it no longer held by this owner \
                 (expired, deleted or force-released); it is no longer renewed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Owner {
        Owner::from_raw(s)
    }

    #[test]
    fn watchdog_holds_are_renewed_until_fully_released() {
        let mut r = Registry::default();
        r.on_acquired("a", &o("u:1"), 1, None);
        r.on_acquired("a", &o("u:1"), 2, None);
        assert_eq!(r.holds("a", &o("u:1")), 2);
        assert_eq!(r.renewals(Instant::now()).len(), 1);
        r.on_released("a", &o("u:1"), 1);
        assert_eq!(r.renewing(), 1);
        r.on_released("a", &o("u:1"), 0);
        assert_eq!(r.renewing(), 0);
        assert!(r.renewals(Instant::now()).is_empty());
    }

    #[test]
    fn lease_holds_are_not_renewed_and_expire_from_the_registry() {
        let mut r = Registry::default();
        r.on_acquired("a", &o("u:1"), 1, Some(Duration::from_millis(10)));
        assert!(r.renewals(Instant::now()).is_empty());
        assert_eq!(r.holds("a", &o("u:1")), 1);
        std::thread::sleep(Duration::from_millis(15));
        assert_eq!(
            r.holds("a", &o("u:1")),
            0,
            "an ended lease counts as not held"
        );
        r.renewals(Instant::now());
        assert!(
            r.map.is_empty(),
            "and is forgotten at the next watchdog round"
        );
    }

    #[test]
    fn lost_is_reported_once_and_reset_by_a_new_acquire() {
        let mut r = Registry::default();
        let s1 = r.on_acquired("a", &o("u:1"), 1, None);
        let batch = r.renewals(Instant::now());
        assert!(r.on_renew_failed(&batch[0]));
        assert!(s1.is_lost());
        assert!(r.is_lost("a", &o("u:1")));
        assert!(!r.on_renew_failed(&batch[0]));
        assert!(r.renewals(Instant::now()).is_empty());
        let s2 = r.on_acquired("a", &o("u:1"), 1, None);
        assert!(!s2.is_lost());
        assert!(!r.is_lost("a", &o("u:1")));
    }

    #[test]
    fn stale_renewal_result_does_not_touch_a_newer_hold() {
        let mut r = Registry::default();
        r.on_acquired("a", &o("u:1"), 1, None);
        let batch = r.renewals(Instant::now());
        r.on_released("a", &o("u:1"), 0);
        let s2 = r.on_acquired("a", &o("u:1"), 1, None);
        assert!(!r.on_renew_failed(&batch[0]));
        assert!(!s2.is_lost());
    }

    #[test]
    fn force_release_forgets_every_owner() {
        let mut r = Registry::default();
        r.on_acquired("a", &o("u:1"), 1, None);
        r.on_acquired("a", &o("u:2"), 1, None);
        r.on_acquired("b", &o("u:1"), 1, None);
        r.forget_name("a");
        assert_eq!(r.renewing(), 1);
    }
}

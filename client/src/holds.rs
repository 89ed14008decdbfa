//! What this client holds, of every kind of object: the registry behind the watchdog, the
//! "did my acquire happen anyway?" checks, and the lost-hold signal of guards.
//!
//! A hold is named by a [`HoldId`]: the object's [`Kind`] (which knows its renew command), its
//! key, and the holder (an owner, or a permit id). Whoever learns that a hold is gone (the
//! watchdog, or the server's `lost` outcomes read by the session listener) reports it with
//! [`Registry::mark_lost`] or [`Registry::mark_lost_held`].

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use redis::Cmd;
use tokio::sync::watch;

use crate::metrics::{HoldEnd, Metrics};

/// A kind of object that can be held: its name and how to renew a hold of it.
pub(crate) struct Kind {
    pub(crate) name: &'static str,
    /// The command that extends `holder`'s hold of `key` to `lease_ms`; replies an integer
    /// ≥ 1 if held (Redisson's renewal script: an array of one such integer; see
    /// [`held_after_renewal`]). Given the deployment's publish command, as `release` is
    /// (the permit-expirable semaphore's renewal publishes the leases it finds ended).
    pub(crate) renew: fn(key: &str, holder: &str, lease_ms: u64, publish: &'static str) -> Cmd,
    /// The command that gives back one of `holder`'s holds of `key` (replies the holds left),
    /// for kinds whose orphaned holds the watchdog may release; `None`: only reported. Given
    /// the deployment's publish command (Redisson's scripts publish with it; see
    /// `Transport::publish_command`).
    pub(crate) release: Option<fn(key: &str, holder: &str, publish: &'static str) -> Cmd>,
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Whether a renew command's reply says the hold is still there: the module's count of holds
/// renewed, or Redisson's renewal script's array of one 1/0 per key.
pub(crate) fn held_after_renewal(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Int(n) => *n >= 1,
        redis::Value::Array(v) => v.len() == 1 && held_after_renewal(&v[0]),
        _ => false,
    }
}

/// One object held by one holder.
#[derive(Clone, Debug)]
pub(crate) struct HoldId {
    pub(crate) kind: &'static Kind,
    pub(crate) key: Arc<str>,
    pub(crate) holder: Arc<str>,
}

/// The kind name of grouped multi-lock holds, whose holder is `F1,F2,.. owner`: the watchdog
/// renews a hold from its key and holder alone, and a group's renewal names its fields (field
/// names are Base64: no `,` or space; an owner may hold anything, so it comes last).
pub(crate) const GROUP: &str = "group lock";

impl HoldId {
    /// The owner of the hold.
    pub(crate) fn owner(&self) -> &str {
        match self.kind.name {
            GROUP => self
                .holder
                .split_once(' ')
                .map_or(&*self.holder, |(_, o)| o),
            _ => &self.holder,
        }
    }
}

impl PartialEq for HoldId {
    fn eq(&self, o: &HoldId) -> bool {
        self.kind.name == o.kind.name && self.key == o.key && self.holder == o.holder
    }
}

impl Eq for HoldId {}

impl std::hash::Hash for HoldId {
    /// Key and holder only: ids that are equal have equal ones (the kind adds little to tell
    /// holds apart, and the registry hashes an id four times per lock and unlock).
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (&self.key, &self.holder).hash(h);
    }
}

/// What shows that a watchdog hold still has someone to release it. A hold whose witness is
/// gone is an orphan: the watchdog stops renewing it (see [`Registry::round`]).
#[derive(Clone, Debug)]
pub(crate) enum Witness {
    /// An explicit owner ([`Owner`](crate::Owner) given to `with_owner`), or an owner handed to
    /// one: whoever has it may release from anywhere, so the hold is never an orphan.
    Explicit,
    /// The owner is a thread (`UUID:thread-number`); alive while that thread runs. Thread
    /// numbers are never reused, so once the thread ended no code can act as that owner
    /// again: the hold is safe to release.
    Thread(Weak<()>),
    /// The hold was taken through these handles (a task owner's lock, a watched permit); alive
    /// while any clone of any of them is. Whether the task itself still runs can't be seen
    /// (tokio has no stable hook for a task's end), so such an orphan is not released, only
    /// reported and no longer renewed.
    Handles(Vec<Weak<()>>),
    /// [`Witness::Handles`] of one handle, as every acquire gives it (without a list to
    /// allocate per acquire).
    Handle(Weak<()>),
}

impl Witness {
    fn alive(&self) -> bool {
        match self {
            Witness::Explicit => true,
            Witness::Thread(t) => t.strong_count() > 0,
            Witness::Handles(hs) => hs.iter().any(|h| h.strong_count() > 0),
            Witness::Handle(h) => h.strong_count() > 0,
        }
    }

    /// The handles of a handles witness.
    fn into_handles(self) -> Vec<Weak<()>> {
        match self {
            Witness::Handles(hs) => hs,
            Witness::Handle(h) => vec![h],
            Witness::Explicit | Witness::Thread(_) => Vec::new(),
        }
    }

    /// Both witnesses' holds are one hold: alive while either is (a thread and a handle for one
    /// owner can't be told apart by liveness, so such a mix is treated as explicit).
    fn merge(&mut self, other: Witness) {
        *self = match (std::mem::replace(self, Witness::Explicit), other) {
            (Witness::Thread(a), Witness::Thread(_)) => Witness::Thread(a),
            (Witness::Handle(a), Witness::Handle(b)) if a.ptr_eq(&b) => Witness::Handle(a),
            (
                a @ (Witness::Handles(_) | Witness::Handle(_)),
                b @ (Witness::Handles(_) | Witness::Handle(_)),
            ) => {
                let mut a = a.into_handles();
                a.retain(|w| w.strong_count() > 0);
                for w in b.into_handles() {
                    if !a.iter().any(|x| x.ptr_eq(&w)) {
                        a.push(w);
                    }
                }
                Witness::Handles(a)
            }
            _ => Witness::Explicit,
        };
    }
}

/// The life of one hold as a guard sees it: lost when the watchdog finds it gone, or when its
/// lease (if taken with one) has run out.
#[derive(Debug)]
pub(crate) struct HoldState {
    lost: AtomicBool,
    /// Told when the hold is found gone; made for the first subscriber (most holds never have
    /// one: a `watch` channel per hold was an allocation and eight wake-up lists per acquire).
    changes: OnceLock<watch::Sender<bool>>,
    lease_end: Mutex<Option<Instant>>,
}

impl HoldState {
    fn new() -> Arc<HoldState> {
        Arc::new(HoldState {
            lost: AtomicBool::new(false),
            changes: OnceLock::new(),
            lease_end: Mutex::new(None),
        })
    }

    /// When the lease runs out, for a hold taken with a lease (and never in watchdog mode).
    pub(crate) fn lease_end(&self) -> Option<Instant> {
        *self.lease_end.lock()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.found_gone() || self.lease_end().is_some_and(|t| t <= Instant::now())
    }

    /// Whether a witness (the watchdog) found the hold gone.
    fn found_gone(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
        if let Some(tx) = self.changes.get() {
            tx.send_replace(true);
        }
    }

    /// Changes of the lost flag (the lease end is read with [`HoldState::lease_end`]).
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        let tx = self
            .changes
            .get_or_init(|| watch::Sender::new(self.found_gone()));
        // Marked lost while the channel was being made: the channel says so too.
        if self.found_gone() && !*tx.borrow() {
            tx.send_replace(true);
        }
        tx.subscribe()
    }
}

#[derive(Debug)]
struct Entry {
    /// Holds this client believes the holder has (the server's count after our last command).
    holds: u64,
    /// The hold's series in the client's metrics (`None` when they are off).
    tally: Option<Tally>,
    /// Taken at least once without a lease: renew it.
    watchdog: bool,
    /// When the watchdog began renewing it (for the longest hold, see [`Registry::round`]).
    renewed_since: Option<Instant>,
    /// The lease each renewal sets, when not the watchdog timeout (watched permits).
    renew_ms: Option<u64>,
    /// Who can still release it; `None` until an acquire says.
    witness: Option<Witness>,
    state: Arc<HoldState>,
}

/// One hold as the client's metrics count it: started when its entry is made, ended exactly
/// once: when it is found lost, else when the entry goes (released, its lease ran out, or the
/// watchdog gave back an orphan).
#[derive(Debug)]
struct Tally {
    metrics: Metrics,
    kind: &'static str,
    key: Arc<str>,
    since: Instant,
    state: Arc<HoldState>,
    ended: bool,
}

impl Tally {
    fn end(&mut self, how: HoldEnd) {
        if !std::mem::replace(&mut self.ended, true) {
            self.metrics
                .hold_ended(self.kind, &self.key, how, self.since.elapsed());
        }
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let how = if self.state.found_gone() {
            HoldEnd::Lost
        } else if self.state.is_lost() {
            HoldEnd::Expired
        } else {
            HoldEnd::Released
        };
        self.end(how);
    }
}

impl Entry {
    fn fresh(metrics: &Metrics, id: &HoldId) -> Entry {
        let state = HoldState::new();
        let tally = metrics.is_on().then(|| {
            metrics.hold_started(id.kind.name, &id.key);
            Tally {
                metrics: metrics.clone(),
                kind: id.kind.name,
                key: id.key.clone(),
                since: Instant::now(),
                state: state.clone(),
                ended: false,
            }
        });
        Entry {
            tally,
            holds: 0,
            watchdog: false,
            renewed_since: None,
            renew_ms: None,
            witness: None,
            state,
        }
    }

    /// A watchdog hold nobody can release any more.
    fn orphaned(&self) -> bool {
        self.witness.as_ref().is_some_and(|w| !w.alive())
    }

    /// Lost, or a lease hold whose lease ended.
    fn over(&self) -> bool {
        self.state.is_lost()
    }
}

/// Holds of this client.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: HashMap<HoldId, Entry, foldhash::fast::RandomState>,
    metrics: Metrics,
}

/// A hold as a witness saw it (the watchdog renewing it, later the server's pushed
/// outcomes): what [`Registry::mark_lost`] is told about.
pub(crate) struct Seen {
    pub(crate) id: HoldId,
    pub(crate) state: Arc<HoldState>,
    /// The lease a renewal sets, when not the watchdog timeout.
    pub(crate) renew_ms: Option<u64>,
}

/// A watchdog hold whose witness is gone, as one watchdog round found it.
pub(crate) struct Orphan {
    pub(crate) seen: Seen,
    /// The holds to give back (the owner's count as this client knows it).
    pub(crate) holds: u64,
    /// Safe to release (its owner thread ended); else it is only reported, and the registry
    /// has already stopped renewing it.
    pub(crate) release: bool,
}

/// What one watchdog round does: renew these holds, deal with these orphans, tell about these
/// holds that reached the longest hold (no longer renewed, marked lost).
pub(crate) struct Round {
    pub(crate) renew: Vec<Seen>,
    pub(crate) orphans: Vec<Orphan>,
    pub(crate) capped: Vec<(Seen, Duration)>,
}

impl Registry {
    /// A registry that counts its holds in `metrics`.
    pub(crate) fn with_metrics(metrics: Metrics) -> Registry {
        Registry {
            map: HashMap::default(),
            metrics,
        }
    }

    /// Holds this client knows `id`'s holder has (0 when unknown, lost or expired).
    pub(crate) fn holds(&self, id: &HoldId) -> u64 {
        match self.map.get(id) {
            Some(e) if !e.over() => e.holds,
            _ => 0,
        }
    }

    /// When `id`'s lease runs out, for a hold taken with a lease (`None`: a watchdog hold, or
    /// not known).
    pub(crate) fn lease_end(&self, id: &HoldId) -> Option<Instant> {
        self.map.get(id).and_then(|e| e.state.lease_end())
    }

    /// Whether the watchdog found the current hold of `id` gone (kept until the holder
    /// acquires or releases again). A lease hold is not watched: only its guard's state tells
    /// that its lease ended.
    pub(crate) fn is_lost(&self, id: &HoldId) -> bool {
        self.map.get(id).is_some_and(|e| e.state.found_gone())
    }

    /// A successful acquire, granted at `at`: `holds` is the holder's count now; `lease`
    /// `None` = watchdog mode.
    pub(crate) fn on_acquired(
        &mut self,
        id: &HoldId,
        holds: u64,
        lease: Option<Duration>,
        at: Instant,
    ) -> Arc<HoldState> {
        self.acquired(id, holds, lease, at).state.clone()
    }

    /// [`Registry::on_acquired`] and [`Registry::witnessed`] in one look-up (a lock's acquire).
    pub(crate) fn on_acquired_by(
        &mut self,
        id: &HoldId,
        holds: u64,
        lease: Option<Duration>,
        at: Instant,
        witness: Witness,
    ) -> Arc<HoldState> {
        let e = self.acquired(id, holds, lease, at);
        match &mut e.witness {
            Some(w) => w.merge(witness),
            None => e.witness = Some(witness),
        }
        e.state.clone()
    }

    fn acquired(
        &mut self,
        id: &HoldId,
        holds: u64,
        lease: Option<Duration>,
        at: Instant,
    ) -> &mut Entry {
        let metrics = &self.metrics;
        let e = self
            .map
            .entry(id.clone())
            .or_insert_with(|| Entry::fresh(metrics, id));
        if e.over() {
            *e = Entry::fresh(metrics, id);
        }
        e.holds = holds.max(1);
        match lease {
            None => {
                e.watchdog = true;
                e.renewed_since.get_or_insert(at);
                *e.state.lease_end.lock() = None;
            }
            Some(l) if !e.watchdog => *e.state.lease_end.lock() = at.checked_add(l),
            Some(_) => {}
        }
        e
    }

    /// A release answered: `remaining` holds are left (0 = fully released: stop renewing).
    pub(crate) fn on_released(&mut self, id: &HoldId, remaining: u64) {
        if remaining == 0 {
            self.map.remove(id);
        } else if let Some(e) = self.map.get_mut(id) {
            e.holds = remaining;
        }
    }

    /// The holder does not hold it (the server said so).
    pub(crate) fn forget(&mut self, id: &HoldId) {
        self.map.remove(id);
    }

    /// A force release: nobody holds `key` of `kind` any more.
    pub(crate) fn forget_key(&mut self, kind: &Kind, key: &str) {
        self.map
            .retain(|id, _| !(id.kind.name == kind.name && &*id.key == key));
    }

    /// The holds to renew now; ended lease holds are dropped (holds found gone are kept for
    /// [`Registry::is_lost`]).
    #[cfg(test)]
    pub(crate) fn renewals(&mut self) -> Vec<Seen> {
        self.round(None).renew
    }

    /// One watchdog round: the holds to renew, and the orphans (watchdog holds whose witness
    /// is gone). An orphan that can't be released safely is marked lost here (no longer
    /// renewed); one that can stays until [`Registry::on_orphan_released`]. Ended lease holds
    /// are dropped (holds found gone are kept for [`Registry::is_lost`]).
    ///
    /// With `max_hold` (the longest a watchdog may keep a hold), a hold renewed for that long
    /// or longer is renewed no more and marked lost here: its lease then ends at most one
    /// watchdog timeout after its last renewal, and its holder learns it now.
    pub(crate) fn round(&mut self, max_hold: Option<Duration>) -> Round {
        self.map
            .retain(|_, e| e.watchdog || e.state.found_gone() || !e.over());
        let mut round = Round {
            renew: Vec::new(),
            orphans: Vec::new(),
            capped: Vec::new(),
        };
        for (id, e) in self.map.iter_mut() {
            if !e.watchdog || e.over() {
                continue;
            }
            let seen = Seen {
                id: id.clone(),
                state: e.state.clone(),
                renew_ms: e.renew_ms,
            };
            let held = e.renewed_since.map(|t| t.elapsed());
            if let (Some(max), Some(held)) = (max_hold, held) {
                if held >= max {
                    e.watchdog = false;
                    e.state.mark_lost();
                    if let Some(t) = &mut e.tally {
                        t.end(HoldEnd::Lost);
                    }
                    round.capped.push((seen, held));
                    continue;
                }
            }
            if !e.orphaned() {
                round.renew.push(seen);
                continue;
            }
            let release =
                matches!(e.witness, Some(Witness::Thread(_))) && id.kind.release.is_some();
            if !release {
                e.watchdog = false;
                e.state.mark_lost();
            }
            round.orphans.push(Orphan {
                seen,
                holds: e.holds.max(1),
                release,
            });
        }
        round
    }

    /// `witness` also shows that `id`'s holder can release it (after an acquire).
    pub(crate) fn witnessed(&mut self, id: &HoldId, witness: Witness) {
        if let Some(e) = self.map.get_mut(id) {
            match &mut e.witness {
                Some(w) => w.merge(witness),
                None => e.witness = Some(witness),
            }
        }
    }

    /// `holder` was handed to a handle as its explicit owner: its holds are never orphans.
    pub(crate) fn adopt(&mut self, holder: &str) {
        for (id, e) in self.map.iter_mut() {
            if id.owner() == holder {
                e.witness = Some(Witness::Explicit);
            }
        }
    }

    /// Renew `id` (taken in watchdog mode) to `lease_ms` instead of the watchdog timeout.
    pub(crate) fn renew_to(&mut self, id: &HoldId, lease_ms: u64) {
        if let Some(e) = self.map.get_mut(id) {
            e.renew_ms = Some(lease_ms);
        }
    }

    /// The watchdog released the orphan `o` (or found it gone): forget it, unless the holder
    /// took it again since.
    pub(crate) fn on_orphan_released(&mut self, o: &Orphan) {
        if self
            .map
            .get(&o.seen.id)
            .is_some_and(|e| Arc::ptr_eq(&e.state, &o.seen.state))
        {
            self.map.remove(&o.seen.id);
        }
    }

    /// The hold `r` was found gone (by the watchdog, or any other witness). Returns whether
    /// that hold was still current (one released or re-taken since is left alone).
    pub(crate) fn mark_lost(&mut self, r: &Seen) -> bool {
        match self.map.get_mut(&r.id) {
            Some(e) if Arc::ptr_eq(&e.state, &r.state) && !e.over() => {
                e.watchdog = false;
                e.state.mark_lost();
                if let Some(t) = &mut e.tally {
                    t.end(HoldEnd::Lost);
                }
                true
            }
            _ => false,
        }
    }

    /// The server reports that `holder`'s hold of `key` ended (a session's `lost` outcome,
    /// which names key and holder, not the kind): every such current hold is marked lost.
    /// Returns the holds marked.
    pub(crate) fn mark_lost_held(&mut self, held: &[(Arc<str>, Arc<str>)]) -> Vec<HoldId> {
        let ended: HashSet<(&str, &str)> = held.iter().map(|(k, h)| (&**k, &**h)).collect();
        let seen: Vec<Seen> = self
            .map
            .iter()
            .filter(|(id, _)| ended.contains(&(&*id.key, id.owner())))
            .map(|(id, e)| Seen {
                id: id.clone(),
                state: e.state.clone(),
                renew_ms: e.renew_ms,
            })
            .collect();
        seen.into_iter()
            .filter(|s| self.mark_lost(s))
            .map(|s| s.id)
            .collect()
    }

    /// Number of holds being renewed.
    pub(crate) fn renewing(&self) -> usize {
        self.map
            .values()
            .filter(|e| e.watchdog && !e.over())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static THING: Kind = Kind {
        name: "thing",
        renew: |_, _, _, _| redis::cmd("PING"),
        release: Some(|_, _, _| redis::cmd("PING")),
    };

    fn id(key: &str, holder: &str) -> HoldId {
        HoldId {
            kind: &THING,
            key: Arc::from(key),
            holder: Arc::from(holder),
        }
    }

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn watchdog_holds_are_renewed_until_fully_released() {
        let mut r = Registry::default();
        let a = id("a", "u:1");
        r.on_acquired(&a, 1, None, now());
        r.on_acquired(&a, 2, None, now());
        assert_eq!(r.holds(&a), 2);
        assert_eq!(r.renewals().len(), 1);
        r.on_released(&a, 1);
        assert_eq!(r.renewing(), 1);
        r.on_released(&a, 0);
        assert_eq!(r.renewing(), 0);
        assert!(r.renewals().is_empty());
    }

    #[test]
    fn lease_holds_are_not_renewed_and_are_lost_when_the_lease_ends() {
        let mut r = Registry::default();
        let a = id("a", "u:1");
        let s = r.on_acquired(&a, 1, Some(Duration::from_millis(10)), now());
        assert!(r.renewals().is_empty());
        assert_eq!(r.holds(&a), 1);
        assert!(!s.is_lost());
        std::thread::sleep(Duration::from_millis(15));
        assert!(s.is_lost(), "an ended lease is a lost hold");
        assert_eq!(r.holds(&a), 0, "and counts as not held");
        assert!(!r.is_lost(&a), "but nothing found it gone");
        r.renewals();
        assert!(
            r.map.is_empty(),
            "and is forgotten at the next watchdog round"
        );
    }

    #[test]
    fn lost_is_reported_once_and_reset_by_a_new_acquire() {
        let mut r = Registry::default();
        let a = id("a", "u:1");
        let s1 = r.on_acquired(&a, 1, None, now());
        let batch = r.renewals();
        assert!(r.mark_lost(&batch[0]));
        assert!(s1.is_lost());
        assert!(r.is_lost(&a));
        assert!(!r.mark_lost(&batch[0]));
        assert!(r.renewals().is_empty());
        assert!(r.is_lost(&a), "kept past the next round");
        let s2 = r.on_acquired(&a, 1, None, now());
        assert!(!s2.is_lost());
        assert!(!r.is_lost(&a));
    }

    #[test]
    fn stale_renewal_result_does_not_touch_a_newer_hold() {
        let mut r = Registry::default();
        let a = id("a", "u:1");
        r.on_acquired(&a, 1, None, now());
        let batch = r.renewals();
        r.on_released(&a, 0);
        let s2 = r.on_acquired(&a, 1, None, now());
        assert!(!r.mark_lost(&batch[0]));
        assert!(!s2.is_lost());
    }

    #[test]
    fn the_server_names_lost_holds_by_key_and_holder() {
        let mut r = Registry::default();
        let lease = Some(Duration::from_secs(60));
        let a = r.on_acquired(&id("a", "u:1"), 1, None, now());
        let b = r.on_acquired(&id("a", "u:2"), 1, lease, now());
        let c = r.on_acquired(&id("c", "u:1"), 1, None, now());
        let marked = r.mark_lost_held(&[(Arc::from("a"), Arc::from("u:1"))]);
        assert_eq!(marked, vec![id("a", "u:1")]);
        assert!(a.is_lost() && !b.is_lost() && !c.is_lost());
        assert!(r.is_lost(&id("a", "u:1")));
        // A lease hold is marked too (the server watches it), and only once.
        let marked = r.mark_lost_held(&[(Arc::from("a"), Arc::from("u:2"))]);
        assert_eq!(marked.len(), 1);
        assert!(b.is_lost() && r.is_lost(&id("a", "u:2")));
        assert!(r
            .mark_lost_held(&[(Arc::from("a"), Arc::from("u:2"))])
            .is_empty());
        assert_eq!(r.renewing(), 1, "lost holds are no longer renewed");
    }

    #[test]
    fn a_hold_whose_thread_ended_is_released_and_one_of_gone_handles_is_reported() {
        let mut r = Registry::default();
        let (thread, handle, other) = (Arc::new(()), Arc::new(()), Arc::new(()));
        let t = id("t", "u:1");
        let h = id("h", "u:1000000000001");
        let x = id("x", "u:9");
        r.on_acquired(&t, 2, None, now());
        r.witnessed(&t, Witness::Thread(Arc::downgrade(&thread)));
        let hs = r.on_acquired(&h, 1, None, now());
        r.witnessed(&h, Witness::Handles(vec![Arc::downgrade(&handle)]));
        r.witnessed(&h, Witness::Handles(vec![Arc::downgrade(&other)]));
        r.on_acquired(&x, 1, None, now());
        r.witnessed(&x, Witness::Explicit);
        let round = r.round(None);
        assert_eq!((round.renew.len(), round.orphans.len()), (3, 0));

        drop(thread);
        drop(handle);
        let round = r.round(None);
        assert_eq!(round.renew.len(), 2, "one of the handles is left");
        let o = &round.orphans[0];
        assert!(o.release && o.holds == 2 && o.seen.id == t);
        r.on_orphan_released(o);
        assert_eq!(r.holds(&t), 0);

        drop(other);
        let round = r.round(None);
        assert_eq!(round.renew.len(), 1, "an explicit owner is never an orphan");
        assert!(!round.orphans[0].release, "a task's hold is only reported");
        assert!(hs.is_lost() && r.is_lost(&h), "and no longer renewed");
        assert!(r.round(None).orphans.is_empty(), "reported once");
    }

    #[test]
    fn an_adopted_owner_is_never_an_orphan() {
        let mut r = Registry::default();
        let thread = Arc::new(());
        let t = id("t", "u:1");
        r.on_acquired(&t, 1, None, now());
        r.witnessed(&t, Witness::Thread(Arc::downgrade(&thread)));
        r.adopt("u:1");
        drop(thread);
        let round = r.round(None);
        assert_eq!((round.renew.len(), round.orphans.len()), (1, 0));
    }

    #[test]
    fn a_watchdog_hold_past_the_longest_hold_is_no_longer_renewed_and_lost() {
        let mut r = Registry::default();
        let old = id("old", "u:1");
        let young = id("young", "u:1");
        let leased = id("leased", "u:1");
        let long_ago = now() - Duration::from_secs(60);
        let s = r.on_acquired(&old, 1, None, long_ago);
        // Re-entry does not restart the clock: the hold began a minute ago.
        r.on_acquired(&old, 2, None, now());
        r.on_acquired(&young, 1, None, now());
        r.on_acquired(&leased, 1, Some(Duration::from_secs(600)), long_ago);
        let round = r.round(Some(Duration::from_secs(30)));
        assert_eq!(round.renew.len(), 1, "only the young hold is renewed");
        assert_eq!(round.renew[0].id, young);
        assert_eq!(round.capped.len(), 1);
        assert_eq!(round.capped[0].0.id, old);
        assert!(round.capped[0].1 >= Duration::from_secs(60));
        assert!(s.is_lost() && r.is_lost(&old), "its holder is told");
        assert!(
            r.round(Some(Duration::from_secs(30))).capped.is_empty(),
            "once"
        );
        assert_eq!(r.round(None).renew.len(), 1, "and never renewed again");
    }

    #[test]
    fn force_release_forgets_every_holder_of_that_key_and_kind() {
        let mut r = Registry::default();
        r.on_acquired(&id("a", "u:1"), 1, None, now());
        r.on_acquired(&id("a", "u:2"), 1, None, now());
        r.on_acquired(&id("b", "u:1"), 1, None, now());
        r.forget_key(&THING, "a");
        assert_eq!(r.renewing(), 1);
    }
}

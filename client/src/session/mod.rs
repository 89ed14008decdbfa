//! The client's sessions: every wait of every task goes through them, so a process needs a
//! fixed, small number of connections per server however many tasks wait on however many
//! objects.
//!
//! A session is a name the module knows (`RSESSION.OPEN`). An acquire that names it with
//! `SESSION name QUEUE <request> <timeout_ms>` is granted at once when it can be (the usual
//! reply: one round trip), else queued on the server in the object's FIFO with its own deadline,
//! and its outcome (granted, timed out, failed) goes to the session's **listener**: one
//! connection per server (per node in a cluster) parked in `RSESSION.READ ... BLOCK`, which hands
//! each outcome to the task waiting for that request ([`Ticket`]). Holds taken by an acquire
//! naming the session are watched by the server: when one ends by anything but its owner's
//! release, a `lost` outcome arrives and the hold registry marks it lost at once.
//!
//! Guarantees the listener keeps (`listener.rs`):
//! - outcomes are read at least once and handed over once: the cursor acknowledges only what
//!   was dispatched, a reconnecting listener reads again from it, sequence numbers drop repeats;
//! - the session lives while its listener reads, and for the grace period after (the listener's
//!   `BLOCK` is a fifth of the grace, so a live process never lets it lapse);
//! - a session that was lost while its process could not read (frozen beyond the grace) fails
//!   every wait it had with [`Error::SessionExpired`](crate::Error::SessionExpired): the server
//!   withdrew them and undid the grants no read returned; a grant a read returned is the
//!   client's (the server never undoes it), and a wait that failed gives back what took effect. A session lost because the server restarted or failed over
//!   (another `run_id`) interrupts its waits instead: the wait path checks whether each took
//!   effect and queues it again, as after a broken connection. Either way the listener opens a
//!   session under a new name, so nothing is ever queued again under the old one.

mod listener;
pub(crate) mod wire;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, RedisResult, Value};

use crate::holds::Registry;
use crate::metrics::Metrics;
use crate::transport::{Io, Transport};

pub(crate) use listener::Listener;

/// How a queued request ended, as the listener hands it to its waiting task.
#[derive(Debug)]
pub(crate) enum Delivered {
    /// Granted: the reply a `BLOCK` waiter would have got.
    Granted(Value),
    /// Its deadline passed on the server.
    TimedOut,
    /// The server ended it with an error (`TRYAGAIN`, `UNBLOCKED`, `WRONGTYPE`, ...).
    Failed(RedisError),
    /// The session expired on a live server: the request was withdrawn (or its grant undone).
    Expired,
    /// The server lost the session (restart, failover): whether the request took effect before
    /// is unknown to the session.
    Interrupted,
}

/// The settings every listener of a client runs with.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The grace period asked for (the server may bound it: `rlock.session-max-grace-ms`).
    pub(crate) grace: Duration,
    pub(crate) retry_delay: Duration,
    pub(crate) response_timeout: Duration,
    /// Counts listener reconnects (`rlock_session_reconnects_total`).
    pub(crate) metrics: Metrics,
    /// The application's watchdog listener, told of the holds the server reports lost.
    pub(crate) watchdog_listener: Option<crate::events::Listener>,
}

/// The sessions of one client: a listener per node that has had a wait or an acquire.
pub(crate) struct Sessions {
    /// The client's id: its sessions are named `<id>:<incarnation>`.
    id: String,
    settings: Settings,
    holds: Arc<Mutex<Registry>>,
    listeners: Mutex<HashMap<Arc<str>, Arc<Listener>, foldhash::fast::RandomState>>,
}

impl Sessions {
    pub(crate) fn new(id: &str, settings: Settings, holds: Arc<Mutex<Registry>>) -> Sessions {
        Sessions {
            id: id.to_string(),
            settings,
            holds,
            listeners: Mutex::new(HashMap::default()),
        }
    }

    /// The listener of the node at `addr`, started on first use.
    pub(crate) fn at(&self, transport: &Transport, addr: &Arc<str>) -> RedisResult<Arc<Listener>> {
        if let Some(l) = self.listeners.lock().get(addr) {
            if !l.is_retired() {
                return Ok(l.clone());
            }
        }
        let node = transport.node(addr)?;
        let mut all = self.listeners.lock();
        all.retain(|_, l| !l.is_retired());
        let l = all.entry(addr.clone()).or_insert_with(|| {
            let l = Arc::new(Listener::new(
                &self.id,
                node,
                self.settings.clone(),
                self.holds.clone(),
            ));
            listener::start(l.clone());
            l
        });
        Ok(l.clone())
    }
}

impl Sessions {
    /// An acquire sent to `addr` was refused `NOSESSION`: if the server there now is another
    /// process than the one its listener's session lives in (`run_id`), leave that session (its
    /// waits are interrupted, and queue again), so that the next attempt opens one on the
    /// server the address reaches now. Without it, attempts named a session this server never
    /// had until the listener noticed (a virtual IP or a proxy that sends new connections to
    /// another server leaves established ones where they were: the listener may never
    /// notice), and the acquire failed `NOSESSION` once its retries ran out.
    pub(crate) async fn leave_if_moved(&self, transport: &Transport, io: Io, addr: &Arc<str>) {
        let Some(listener) = self.listeners.lock().get(addr).cloned() else {
            return;
        };
        // Not open (being opened again, or left): nothing to compare, and no `INFO` for each
        // of the waits refused meanwhile.
        let Some(ours) = listener.open_in() else {
            return;
        };
        let Ok(reply) = transport
            .send_at(io, addr, &wire::info_server(), false)
            .await
        else {
            return;
        };
        if wire::run_id_of(&reply).is_some_and(|now| now != ours) {
            self.leave(addr, &listener);
        }
    }

    fn leave(&self, addr: &Arc<str>, listener: &Arc<Listener>) {
        {
            let mut all = self.listeners.lock();
            if all.get(addr).is_some_and(|l| Arc::ptr_eq(l, listener)) {
                all.remove(addr);
            }
        }
        tracing::warn!(
            server = %addr,
            "rlock: the server at this address is not the one the client's session lives in \
             (the address moved to another server); opening a session on the new one"
        );
        listener.abandon();
    }

    /// Sentinel names `primary` now: leave the sessions on every other node (their waits are
    /// interrupted, and queue again on the primary).
    #[cfg(feature = "sentinel")]
    pub(crate) fn follow_primary(&self, primary: &Arc<str>) {
        let former: Vec<Arc<Listener>> = {
            let mut all = self.listeners.lock();
            let former = all
                .iter()
                .filter(|(addr, _)| *addr != primary)
                .map(|(_, l)| l.clone())
                .collect();
            all.retain(|addr, _| addr == primary);
            former
        };
        for l in former {
            l.abandon();
        }
    }
}

impl Drop for Sessions {
    /// The client is gone (nothing of it waits or holds): each listener ends its session and
    /// its thread, from a thread of its own (a drop does not wait for the network).
    fn drop(&mut self) {
        let listeners: Vec<_> = self.listeners.lock().drain().map(|(_, l)| l).collect();
        listeners.iter().for_each(|l| l.close());
        if listeners.is_empty() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("rlock-close".into())
            .spawn(move || listeners.iter().for_each(|l| l.end_session()));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "rlock: can't close the client's sessions; they end after their grace");
        }
    }
}

/// A wait registered with a listener before its acquire is sent: the request id it is queued
/// under, the session name to send, and where its outcome arrives. Dropping it forgets the
/// request (an outcome that still comes is then a stray).
pub(crate) struct Ticket {
    listener: Arc<Listener>,
    pub(crate) name: Arc<str>,
    pub(crate) request: u64,
    rx: tokio::sync::oneshot::Receiver<Delivered>,
    /// The listener handed the outcome over (and forgot the request).
    done: bool,
}

impl Ticket {
    /// The outcome, once the listener has it (`Interrupted` if the listener went away).
    pub(crate) async fn outcome(&mut self) -> Delivered {
        let d = (&mut self.rx).await;
        self.done = d.is_ok();
        d.unwrap_or(Delivered::Interrupted)
    }

    /// The outcome if it has come.
    pub(crate) fn try_outcome(&mut self) -> Option<Delivered> {
        let d = self.rx.try_recv().ok();
        self.done |= d.is_some();
        d
    }

    /// The listener this ticket belongs to.
    pub(crate) fn listener(&self) -> &Arc<Listener> {
        &self.listener
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.done {
            self.listener.forget(self.request);
        }
    }
}

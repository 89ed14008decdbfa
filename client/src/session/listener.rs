//! [`Listener`]: one server's session as the client keeps it. A thread of its own ([`start`])
//! holds a blocking connection to the server (`rlock-session` in `CLIENT LIST`), opens the
//! session there, reads its outcomes (`RSESSION.READ ... BLOCK`), hands each to the task or
//! thread waiting for that request, and reconnects when the connection fails.
//!
//! A thread, not a task of the client's runtime: every hand-off to a waiter passes through
//! here, and a blocking read wakes this thread straight from the socket, where an async
//! connection first wakes its driver task, which hands the reply to the reading task (and
//! the next read goes back the same way). Measured with `rlock-bench --only contended,client`
//! (8 and 32 sync threads on one lock, client / raw `BLOCK` clients, same run): the async
//! listener 0.68x and 0.65x; this thread: see `performance.rs`.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, RedisResult, Value};
use tokio::sync::{oneshot, watch};

use super::wire::{self, Kind, Outcome};
use super::{Delivered, Settings, Ticket};
use crate::holds::Registry;
use crate::transport::Node;

/// Longest pause between connection attempts of a listener whose server is down.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Where the listener is.
#[derive(Clone, Debug)]
enum Phase {
    /// Connecting and opening its session.
    Starting,
    /// Its session is open: requests may be queued in it.
    Open,
    /// The last attempt to connect or open failed with this error (it tries again).
    Down(RedisError),
}

/// Why a session was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// It expired on a live server (its process did not read for longer than the grace).
    Expired,
    /// The server is another process now (restart, failover behind one address).
    Interrupted,
}

/// A wait in flight: where its outcome goes, and what it waits for (an outcome for its request
/// id about another key or kind of object is refused, never taken as a grant).
struct Slot {
    tx: oneshot::Sender<Delivered>,
    key: Arc<str>,
    object: Option<&'static str>,
}

/// The listener thread's own state.
struct Inner {
    /// The session's name now: `<client id>:<incarnation>`. A new incarnation starts when a
    /// session is lost, so nothing is queued again under a name the server forgot.
    name: Arc<str>,
    incarnation: u64,
    /// The name was opened on the server (a later `resumed = 0` means it was lost meanwhile).
    opened: bool,
    /// The grace period asked for, after the server's bound.
    grace_ms: u64,
    /// The server process the session lives in (`run_id`).
    run_id: Option<String>,
    /// The last outcome dispatched (the next read acknowledges up to it).
    cursor: u64,
}

pub(crate) struct Listener {
    base: String,
    node: Arc<Node>,
    settings: Settings,
    holds: Arc<Mutex<Registry>>,
    phase: watch::Sender<Phase>,
    /// Wakes a listener that waits before its next connection attempt.
    kick: Kick,
    /// The client is gone: stop after the current read.
    closed: AtomicBool,
    /// The server turned into a replica: the thread ended its session and stopped (a later
    /// wait there starts a new listener).
    retired: AtomicBool,
    /// Retired because Sentinel names another primary ([`Listener::abandon`]): its waits were
    /// interrupted then.
    abandoned: AtomicBool,
    inner: Mutex<Inner>,
    /// The session's name while requests may be queued in it. Kept apart from `inner` and
    /// `slots` so that callers checking it do not wait for a dispatch (locks are taken in the
    /// order `open`, `slots`; `inner` is never held with `open`).
    open: Mutex<Option<Arc<str>>>,
    /// The waits in flight, by request id.
    slots: Mutex<HashMap<u64, Slot, foldhash::fast::RandomState>>,
    next_request: AtomicU64,
}

/// A wake-up for a thread that pauses (a permit is kept if nobody pauses yet).
#[derive(Default)]
struct Kick {
    kicked: Mutex<bool>,
    cv: Condvar,
}

impl Kick {
    fn notify(&self) {
        *self.kicked.lock() = true;
        self.cv.notify_one();
    }

    /// Pause for `d`, or until notified.
    fn pause(&self, d: Duration) {
        let mut kicked = self.kicked.lock();
        self.cv.wait_while_for(&mut kicked, |k| !*k, d);
        *kicked = false;
    }
}

/// What a caller of a listener that stopped for good gets (abandoned: Sentinel names another
/// primary; retired: its node turned into a replica): `NOSESSION` (not run: it sends again, to
/// the node that serves its key now).
fn left() -> RedisError {
    server_error(
        "NOSESSION the client left its session on this node: it is not the primary any more",
    )
}

fn session_name(base: &str, incarnation: u64) -> Arc<str> {
    Arc::from(format!("{base}:{incarnation}"))
}

/// A server error reply as the library reads it (`CODE detail`).
fn server_error(text: &str) -> RedisError {
    wire::error_of(text)
}

impl Listener {
    pub(crate) fn new(
        base: &str,
        node: Arc<Node>,
        settings: Settings,
        holds: Arc<Mutex<Registry>>,
    ) -> Listener {
        // Whole milliseconds (the builder refuses a grace under 100 ms).
        let grace_ms = u64::try_from(settings.grace.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        Listener {
            base: base.to_string(),
            node,
            settings,
            holds,
            phase: watch::Sender::new(Phase::Starting),
            kick: Kick::default(),
            closed: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                name: session_name(base, 1),
                incarnation: 1,
                opened: false,
                grace_ms,
                run_id: None,
                cursor: 0,
            }),
            open: Mutex::new(None),
            slots: Mutex::new(HashMap::default()),
            next_request: AtomicU64::new(1),
        }
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> &Arc<str> {
        &self.node.addr
    }

    fn open_name(&self) -> Option<Arc<str>> {
        self.open.lock().clone()
    }

    /// The session's name once it is open. A listener that could not connect is asked to try
    /// again at once, and its error is returned if that attempt fails too (the caller's retry
    /// policy decides what it means).
    pub(crate) async fn ready(&self) -> RedisResult<Arc<str>> {
        if let Some(name) = self.open_name() {
            return Ok(name);
        }
        let mut rx = self.phase.subscribe();
        let mut kicked = false;
        loop {
            // Nothing opens this session again: the caller goes to the primary now. (A retired
            // thread's last word is `Down`: a caller that kicked it and waited for another
            // would wait forever. The cluster torture found one such acquire, hung 15 minutes
            // after its node was demoted.)
            if self.abandoned.load(Ordering::SeqCst) || self.is_retired() {
                return Err(left());
            }
            let phase = rx.borrow_and_update().clone();
            match phase {
                Phase::Open => {
                    if let Some(name) = self.open_name() {
                        return Ok(name);
                    }
                }
                Phase::Down(e) if kicked => return Err(e),
                Phase::Down(_) => {
                    kicked = true;
                    self.kick.notify();
                }
                Phase::Starting => {}
            }
            if rx.changed().await.is_err() {
                return Err(server_error("NOSESSION the client is shutting down"));
            }
        }
    }

    /// Register a wait on `key` (an object of kind `object`, as outcomes name it) before its
    /// acquire is sent. Refused while the session is not open (the caller tries again after a
    /// pause).
    pub(crate) fn register(
        self: &Arc<Self>,
        key: Arc<str>,
        object: Option<&'static str>,
    ) -> RedisResult<Ticket> {
        let (tx, rx) = oneshot::channel();
        let open = self.open.lock();
        let Some(name) = open.clone() else {
            return Err(server_error("NOSESSION the session is being opened again"));
        };
        let request = self.next_request.fetch_add(1, Ordering::Relaxed);
        let slot = Slot { tx, key, object };
        self.slots.lock().insert(request, slot);
        drop(open);
        Ok(Ticket {
            listener: self.clone(),
            name,
            request,
            rx,
            done: false,
        })
    }

    /// The wait `request` is over; an outcome that still comes for it is a stray.
    pub(crate) fn forget(&self, request: u64) {
        self.slots.lock().remove(&request);
    }

    fn set_phase(&self, p: Phase) {
        self.phase.send_replace(p);
    }

    /// Open the session on `conn`: resume it, or notice it was lost and open a new one.
    fn open(&self, conn: &mut redis::Connection, run_id: &Option<String>) -> RedisResult<()> {
        loop {
            let (name, opened, grace_ms) = {
                let i = self.inner.lock();
                (i.name.clone(), i.opened, i.grace_ms)
            };
            let reply = self.query(conn, &wire::open(&name, grace_ms));
            let resumed = match reply {
                Ok(v) => wire::resumed(v)?,
                Err(e) => match wire::max_grace(&e) {
                    Some(max) if max < grace_ms => {
                        tracing::warn!(
                            asked_ms = grace_ms,
                            max_ms = max,
                            server = %self.node.addr,
                            "rlock: the server bounds the session grace period \
                             (rlock.session-max-grace-ms); using its bound"
                        );
                        self.inner.lock().grace_ms = max.max(1);
                        continue;
                    }
                    _ => return Err(e),
                },
            };
            if opened && !resumed {
                // The session we had is gone, and OPEN just made an empty one under its name:
                // close that one, so a request sent under the old name can't be queued there.
                let _ = self.query(conn, &wire::close(&name));
                let same = run_id.is_some() && self.inner.lock().run_id == *run_id;
                self.lose(if same {
                    Loss::Expired
                } else {
                    Loss::Interrupted
                });
                continue;
            }
            let mut i = self.inner.lock();
            i.opened = true;
            i.run_id = run_id.clone();
            *self.open.lock() = Some(i.name.clone());
            return Ok(());
        }
    }

    /// One command on the listener's connection, within the response timeout.
    fn query(&self, conn: &mut redis::Connection, cmd: &redis::Cmd) -> RedisResult<Value> {
        conn.set_read_timeout(Some(self.settings.response_timeout))?;
        cmd.query(conn)
    }

    /// The session was lost: fail every wait it had, and start a new incarnation.
    fn lose(&self, loss: Loss) {
        let slots = {
            let mut open = self.open.lock();
            *open = None;
            std::mem::take(&mut *self.slots.lock())
        };
        let old = {
            let mut i = self.inner.lock();
            let old = i.name.clone();
            i.incarnation += 1;
            i.name = session_name(&self.base, i.incarnation);
            i.opened = false;
            i.cursor = 0;
            old
        };
        self.set_phase(Phase::Starting);
        match loss {
            Loss::Expired => tracing::warn!(
                session = %old,
                server = %self.node.addr,
                waits = slots.len(),
                "rlock: the client's session expired on the server (its process did not read \
                 outcomes for longer than the grace period): its waits failed, grants it never \
                 read were undone; opening a new session"
            ),
            Loss::Interrupted => tracing::warn!(
                session = %old,
                server = %self.node.addr,
                waits = slots.len(),
                "rlock: the server lost the client's session (restart or failover); \
                 its waits are checked and queued again"
            ),
        }
        for (_, s) in slots {
            let _ = s.tx.send(match loss {
                Loss::Expired => Delivered::Expired,
                Loss::Interrupted => Delivered::Interrupted,
            });
        }
    }

    /// Hand each outcome to its task. A grant a read returned is this client's from then on
    /// (the server no longer undoes it, even if the session ends before it is acknowledged).
    fn dispatch(&self, outcomes: Vec<Outcome>) {
        let mut lost = Vec::new();
        let mut strays = 0;
        let mut handed = Vec::with_capacity(outcomes.len());
        {
            let mut i = self.inner.lock();
            let mut slots = self.slots.lock();
            for o in outcomes {
                // A read after a reconnect may return what was dispatched already.
                if o.seq <= i.cursor {
                    continue;
                }
                i.cursor = o.seq;
                let wrong = o
                    .request
                    .and_then(|r| slots.get(&r))
                    .and_then(|slot| mismatch(&o, slot));
                let delivered = match o.kind {
                    Kind::Lost(owner) => {
                        if let Some(key) = o.key {
                            lost.push((Arc::from(key), Arc::from(owner)));
                        }
                        continue;
                    }
                    Kind::Overflow => {
                        tracing::warn!(
                            server = %self.node.addr,
                            "rlock: the session's backlog overflowed (rlock.session-max-backlog): \
                             some lost-hold reports were dropped; the watchdog's next renewal \
                             finds its holds that ended, a hold with a lease of its own ends by it"
                        );
                        continue;
                    }
                    Kind::Granted(v) => Delivered::Granted(v),
                    Kind::Timeout => Delivered::TimedOut,
                    Kind::Error(e) => Delivered::Failed(e),
                };
                let Some(slot) = o.request.and_then(|r| slots.remove(&r)) else {
                    strays += matches!(delivered, Delivered::Granted(_)) as usize;
                    continue;
                };
                let delivered = match wrong {
                    Some(why) if matches!(delivered, Delivered::Granted(_)) => {
                        tracing::error!(
                            server = %self.node.addr,
                            request = o.request,
                            key = %slot.key,
                            "rlock: protocol error: {why}; the wait fails, nothing is granted"
                        );
                        Delivered::Failed(protocol_error(&why))
                    }
                    _ => delivered,
                };
                handed.push((slot.tx, delivered));
            }
        }
        // Woken after the locks are let go: a waiter that runs at once finds them free.
        for (tx, d) in handed {
            let _ = tx.send(d);
        }
        if strays > 0 {
            // A wait that was cancelled, or resolved by checking the server, while its grant was
            // on its way: the task that cancelled has given it back, or holds it.
            tracing::debug!(strays, "rlock: grants for waits that were already resolved");
        }
        if !lost.is_empty() {
            self.mark_lost(&lost);
        }
    }

    /// The server says these `(key, holder)` holds ended: mark them lost.
    #[allow(clippy::type_complexity)]
    fn mark_lost(&self, held: &[(Arc<str>, Arc<str>)]) {
        if held.is_empty() {
            return;
        }
        let marked = self.holds.lock().mark_lost_held(held);
        for id in marked {
            tracing::warn!(
                kind = id.kind.name,
                key = %id.key,
                holder = %id.holder,
                "rlock: hold lost: the server reports it ended (expired, deleted or \
                 force-released); it is no longer renewed"
            );
            if let Some(l) = &self.settings.watchdog_listener {
                l.tell(&crate::events::WatchdogEvent::Lost {
                    hold: crate::events::HoldInfo::of(&id),
                });
            }
        }
    }

    /// One connection's life: connect, open, read until it fails (or the client is gone).
    /// Returns why it ended, and whether the session was open on it.
    fn serve(&self) -> (RedisError, bool) {
        let node = &self.node;
        let mut conn = match node
            .client
            .get_connection_with_timeout(node.connect_timeout)
        {
            Ok(c) => c,
            Err(e) => return (e, false),
        };
        let mut hello = redis::cmd("CLIENT");
        hello.arg("SETNAME").arg("rlock-session");
        if let Err(e) = conn
            .set_write_timeout(Some(self.settings.response_timeout))
            .and_then(|()| self.query(&mut conn, &hello))
        {
            return (e, false);
        }
        let run_id = match self.query(&mut conn, &wire::info_server()) {
            Ok(reply) => wire::run_id_of(&reply),
            Err(e) => return (e, false),
        };
        if let Err(e) = self.open(&mut conn, &run_id) {
            return (e, false);
        }
        self.set_phase(Phase::Open);
        let mut timeout = None;
        loop {
            let (name, cursor, grace_ms) = {
                let i = self.inner.lock();
                (i.name.clone(), i.cursor, i.grace_ms)
            };
            if self.closed.load(Ordering::Relaxed) {
                // The client is gone: nothing waits, end the session now rather than after
                // its grace.
                let _ = self.query(&mut conn, &wire::close(&name));
                return (server_error("NOSESSION the client is closed"), false);
            }
            // READ's BLOCK: a fifth of the grace, so that the session outlives a read that comes
            // a little late, and a connection that went silent is noticed well before the grace
            // ends.
            let block = Duration::from_millis((grace_ms / 5).max(1));
            // A read that outlasts its BLOCK by this much means a silent connection.
            let stuck = block + block.max(Duration::from_millis(50));
            if timeout != Some(stuck) {
                if let Err(e) = conn.set_read_timeout(Some(stuck)) {
                    return (e, true);
                }
                timeout = Some(stuck);
            }
            let read = wire::read(&name, cursor, block.as_millis() as u64);
            let reply = read.query::<Value>(&mut conn).and_then(wire::outcomes);
            match reply {
                // The next read goes out after the outcomes are handed over. (Sent before, it
                // is parked on the server when the woken waiter's release grants the next one,
                // and every hand-off costs a park and a wake-up of the read: measured with 8
                // threads on one lock, 0.52x raw BLOCK clients against 0.75x; sent after, it
                // usually finds that next outcome already there.)
                Ok(outcomes) => {
                    // A demotion ends every wait with UNBLOCKED; an idle read (nothing for a
                    // whole BLOCK) is a cheap moment to look too.
                    let demoted = outcomes.is_empty()
                        || outcomes.iter().any(
                            |o| matches!(&o.kind, Kind::Error(e) if e.code() == Some("UNBLOCKED")),
                        );
                    self.dispatch(outcomes);
                    if demoted && self.is_replica(&mut conn) {
                        return self.retire(&mut conn, &name);
                    }
                }
                Err(e) if e.code() == Some("NOSESSION") => {
                    if self.closed.load(Ordering::Relaxed) {
                        return (e, false);
                    }
                    // Same connection, same server: the session expired while nobody read.
                    self.lose(Loss::Expired);
                    timeout = None;
                    if let Err(e) = self.open(&mut conn, &run_id) {
                        return (e, false);
                    }
                    self.set_phase(Phase::Open);
                }
                Err(e) => return (e, true),
            }
        }
    }

    /// Whether the server is a replica now (`ROLE`).
    fn is_replica(&self, conn: &mut redis::Connection) -> bool {
        match self.query(conn, &redis::cmd("ROLE")) {
            Ok(Value::Array(v)) => matches!(
                v.first(),
                Some(Value::BulkString(r)) if r == b"slave" || r == b"replica"
            ),
            _ => false,
        }
    }

    /// The server turned into a replica, which ended every wait queued there (their outcomes
    /// were just handed over): end the session and stop, so that no connection stays parked
    /// on a replica.
    fn retire(&self, conn: &mut redis::Connection, name: &str) -> (RedisError, bool) {
        let _ = self.query(conn, &wire::close(name));
        self.retired.store(true, Ordering::Relaxed);
        tracing::debug!(server = %self.node.addr, "rlock: session listener leaves a demoted node");
        (
            server_error("READONLY the server turned into a replica"),
            false,
        )
    }

    /// The server process (`run_id`) its session is open in; `None` while it is not open.
    pub(crate) fn open_in(&self) -> Option<String> {
        self.open_name()?;
        self.inner.lock().run_id.clone()
    }

    /// Whether the thread stopped for good (its server turned into a replica).
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// Sentinel names another node the primary: this one may be down for good, or a primary
    /// nobody uses any more until Sentinel demotes it. Its waits can't be granted to anyone
    /// listening: interrupt them now (the wait path checks whether each took effect and
    /// queues it again on the new primary, with the rest of its time), and stop the thread,
    /// which ends the session there if the node still answers (withdrawing what is queued in
    /// it). A later wait on this address starts a new listener.
    pub(crate) fn abandon(&self) {
        if self.abandoned.swap(true, Ordering::SeqCst) {
            return;
        }
        self.retired.store(true, Ordering::Relaxed);
        self.closed.store(true, Ordering::Relaxed);
        self.kick.notify();
        self.lose(Loss::Interrupted);
        // Wake callers waiting in `ready` (the thread may end without another word).
        self.set_phase(Phase::Down(left()));
    }

    /// The client is gone: the thread stops after its current read.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.kick.notify();
    }

    /// End the session on the server now, so that its reader (parked for up to a fifth of
    /// the grace) is answered `NOSESSION` and the closed thread stops at once. Blocks for a
    /// round trip on a connection of its own.
    pub(crate) fn end_session(&self) {
        let Some(name) = self.open_name() else {
            return;
        };
        let node = &self.node;
        if let Ok(mut c) = node
            .client
            .get_connection_with_timeout(node.connect_timeout)
        {
            let _ = self.query(&mut c, &wire::close(&name));
        }
    }
}

/// Why a grant outcome does not fit the wait its request id names (another key or kind of
/// object): `None` when it fits.
fn mismatch(o: &Outcome, slot: &Slot) -> Option<String> {
    if o.key.as_deref() != Some(&*slot.key) {
        return Some(format!(
            "a grant for request {:?} names key {:?}, the wait is on {:?}",
            o.request, o.key, slot.key
        ));
    }
    match (o.object.as_deref(), slot.object) {
        (Some(got), Some(want)) if got != want => Some(format!(
            "a grant for request {:?} is for a {got}, the wait is for a {want}",
            o.request
        )),
        _ => None,
    }
}

fn protocol_error(why: &str) -> RedisError {
    // A client-side error kind: final (never retried or queued again), unlike a parse error,
    // which the retry policy takes for a broken connection.
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "session outcome does not match its wait",
        why.to_string(),
    ))
}

/// Start the listener's thread.
pub(crate) fn start(l: Arc<Listener>) {
    let spawned = std::thread::Builder::new()
        .name("rlock-session".into())
        .spawn(move || run(&l));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "rlock: can't start a session listener thread");
    }
}

/// The listener's thread: serve, and after a failure connect again (at once after a
/// connection that worked broke, then with growing pauses up to [`MAX_BACKOFF`]), until the
/// client is gone.
fn run(l: &Listener) {
    let mut delay = Duration::ZERO;
    while !l.closed.load(Ordering::Relaxed) {
        let (e, was_open) = l.serve();
        *l.open.lock() = None;
        if l.is_retired() {
            if !l.abandoned.load(Ordering::SeqCst) {
                l.lose(Loss::Interrupted);
            }
            l.set_phase(Phase::Down(e));
            return;
        }
        let opened = l.inner.lock().opened;
        if opened && matches!(e.code(), Some("READONLY" | "UNBLOCKED")) {
            // The server turned into a replica: the demotion ended every wait queued there, and
            // outcomes it holds can't be read from a replica. Whether a wait was granted before
            // is for the wait path to check on the new master.
            l.lose(Loss::Interrupted);
        }
        if was_open {
            l.settings.metrics.session_reconnect();
            tracing::debug!(server = %l.node.addr, error = %e, "rlock: session listener reconnecting");
            l.set_phase(Phase::Starting);
            delay = Duration::ZERO;
        } else {
            tracing::debug!(server = %l.node.addr, error = %e, "rlock: session listener can't open its session");
            l.set_phase(Phase::Down(e));
            delay = (delay * 2)
                .max(l.settings.retry_delay)
                .min(MAX_BACKOFF.max(l.settings.retry_delay));
        }
        if !delay.is_zero() && !l.closed.load(Ordering::Relaxed) {
            l.kick.pause(delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener() -> Arc<Listener> {
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let node = Arc::new(Node::new(
            client,
            Duration::from_millis(100),
            Duration::from_millis(100),
        ));
        let settings = Settings {
            grace: Duration::from_secs(1),
            retry_delay: Duration::from_millis(10),
            response_timeout: Duration::from_millis(100),
            metrics: Default::default(),
            watchdog_listener: None,
        };
        Arc::new(Listener::new("t", node, settings, Default::default()))
    }

    /// A caller waiting for the session when the thread retires (its node was demoted) is
    /// answered, not left waiting for a phase that never comes.
    #[test]
    fn a_caller_waiting_in_ready_is_answered_when_the_listener_retires() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let l = listener();
        rt.block_on(async {
            let waiting = {
                let l = l.clone();
                tokio::spawn(async move { l.ready().await })
            };
            // The caller sees the thread fail once and kicks it (as after any failed attempt).
            tokio::task::yield_now().await;
            l.set_phase(Phase::Down(server_error("ERR connection refused")));
            tokio::task::yield_now().await;
            // Then the thread finds a replica and stops for good: what `run` does last.
            l.retired.store(true, Ordering::Relaxed);
            l.lose(Loss::Interrupted);
            l.set_phase(Phase::Down(server_error(
                "READONLY the server turned into a replica",
            )));
            let got = tokio::time::timeout(Duration::from_secs(5), waiting)
                .await
                .expect("ready() answered after the retirement")
                .unwrap();
            assert_eq!(got.unwrap_err().code(), Some("NOSESSION"));
            // A later caller is answered at once.
            assert_eq!(l.ready().await.unwrap_err().code(), Some("NOSESSION"));
        });
    }
}

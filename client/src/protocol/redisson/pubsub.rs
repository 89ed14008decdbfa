//! The channels waits listen on in Redisson's protocol: ONE pub/sub connection per server,
//! shared by every wait of the client, and one subscription per channel however many tasks or
//! threads wait on it (Redisson's `PublishSubscribe`: reference-counted entries; here a
//! subscription lives while a waiter holds it, and is unsubscribed when the last one goes).
//!
//! A node's connection is driven by one task, which runs the subscribe and unsubscribe
//! requests in the order they were made (both are sent under the node's channel map lock, so
//! an unsubscribe of a channel's last waiter never overtakes the subscribe of its next one)
//! and hands each message to its channel's waiters. If the connection breaks, every
//! subscription on it is marked dead and its waiters woken: they try again and subscribe anew
//! on a new connection.
//!
//! A message wakes only as many of the client's waiters as can win (issue 37, item 3), read
//! as Redisson's handler for the channel reads it ([`Messages`]): a lock's unlock message one
//! waiter, a read lock's unlock every waiter, a semaphore's count the waiters whose permits it
//! covers. Waiters are woken in the order they first waited. A waiter woken alone carries the
//! wake-up (its "baton") until its next attempt has run; if it leaves before (cancelled, timed
//! out, an error), it hands the wake-up to the next waiter, so no waiter is left asleep on a
//! lock nobody holds.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
#[cfg(feature = "cluster")]
use redis::cluster::ClusterClient;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use redis::RedisResult;
#[cfg(feature = "cluster")]
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch, Notify};

use crate::error::{Error, Result};
use crate::runtime::Background;
use crate::transport::Transport;

/// The key of a cluster's one sharded connection in [`PubSub`]'s map.
const SHARDED: &str = "(sharded pub/sub)";

/// The client's subscriptions, per server.
pub(crate) struct PubSub {
    nodes: Mutex<HashMap<Arc<str>, Arc<NodeSubs>>>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

/// One server's connection (its task) and the channels subscribed on it; in a cluster, the
/// one sharded connection (`drive_sharded`, below) and every channel.
struct NodeSubs {
    ops: mpsc::UnboundedSender<Op>,
    /// Live subscriptions by channel; the waiters own them.
    channels: Mutex<HashMap<String, Weak<Subscription>>>,
}

enum Op {
    Subscribe(Weak<Subscription>),
    Unsubscribe(String),
}

impl Op {
    /// The connection could not be opened: a subscribe fails (its waiters subscribe anew).
    fn refuse(self, why: &str) {
        if let Op::Subscribe(w) = self {
            if let Some(s) = w.upgrade() {
                s.die(why);
            }
        }
    }
}

impl NodeSubs {
    /// A message on `channel`, to its waiters.
    fn deliver(&self, channel: &str, payload: Option<i64>) {
        let sub = self.channels.lock().get(channel).and_then(Weak::upgrade);
        if let Some(s) = sub {
            s.deliver(payload);
        }
    }

    /// Every waiter tries again (a message may have been missed).
    #[cfg(feature = "cluster")]
    fn wake_all(&self) {
        let subs: Vec<_> = self
            .channels
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for s in subs {
            s.wake.notify_waiters();
            s.wake.notify_one();
        }
    }
}

/// Where a subscription is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Confirmed,
    /// Refused, or its connection could not be opened or broke.
    Failed(String),
}

/// How a channel's messages say whom to wake: Redisson's handler for the channel
/// (reference/redisson.md §0.5), told by the channel's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Messages {
    /// A lock's channel (`LockPubSub`): `UNLOCK_MESSAGE` (0) frees the lock for one owner: the
    /// first waiter; anything else (`READ_UNLOCK_MESSAGE`, 1: readers may all enter) wakes all.
    Lock,
    /// A semaphore's channel (`SemaphorePubSub`, `redisson_sc:`): the permits available now:
    /// the waiters whose permits fit in it, in the order they came (one that needs more than is
    /// left is passed over for one behind it that needs less).
    Count,
    /// A count-down latch's channel (`CountDownLatchPubSub`): every message wakes all.
    All,
}

impl Messages {
    /// The handler for `channel`.
    pub(crate) fn of(channel: &str) -> Messages {
        if channel.starts_with("redisson_sc:") {
            Messages::Count
        } else if channel.starts_with("redisson_countdownlatch__channel__") {
            Messages::All
        } else {
            Messages::Lock
        }
    }
}

/// One channel subscribed, shared by the waits on it.
pub(crate) struct Subscription {
    channel: String,
    node: Arc<NodeSubs>,
    /// Every message and the subscription's death (for waits that park on it directly).
    wake: Notify,
    messages: Messages,
    /// The waiters parked on the channel, and what was delivered.
    queue: Mutex<Queue>,
    state: watch::Sender<State>,
    /// Its connection broke: subscribe anew.
    dead: AtomicBool,
}

/// The waiters of one channel.
#[derive(Default)]
struct Queue {
    /// Wake-ups delivered so far (messages, hand-overs, the death): a waiter that sees it moved
    /// since its attempt was sent tries again at once instead of parking (the wake-up may have
    /// come before it parked).
    delivered: u64,
    /// Parked waiters, by the order they first waited.
    parked: BTreeMap<u64, Parked>,
    next: u64,
}

struct Parked {
    need: u64,
    slot: Arc<Slot>,
}

/// Where one waiter is woken.
#[derive(Default)]
struct Slot {
    notify: Notify,
    /// Woken since it parked (set under the queue's lock).
    woken: AtomicBool,
    /// Woken alone: it owes the wake-up to the next waiter if it leaves before its attempt.
    baton: AtomicBool,
}

impl Queue {
    /// Wake waiters per `messages` and the message's `payload` (a hand-over: the payload of
    /// the wake-up handed on, for a count the permits of the waiter that handed it on).
    fn deliver(&mut self, messages: Messages, payload: Option<i64>) {
        self.delivered += 1;
        match (messages, payload) {
            (Messages::Lock, Some(super::UNLOCK_MESSAGE)) => self.wake_first(),
            (Messages::Count, count) => self.wake_within(count.unwrap_or(0).max(0) as u64),
            _ => self.wake_all(),
        }
    }

    fn wake(&mut self, seq: u64, baton: bool) {
        if let Some(p) = self.parked.remove(&seq) {
            p.slot.baton.store(baton, Ordering::Release);
            p.slot.woken.store(true, Ordering::Release);
            p.slot.notify.notify_one();
        }
    }

    fn wake_first(&mut self) {
        if let Some(&seq) = self.parked.keys().next() {
            self.wake(seq, true);
        }
    }

    fn wake_within(&mut self, mut permits: u64) {
        let mut fit = Vec::new();
        for (&seq, p) in &self.parked {
            if p.need <= permits {
                permits -= p.need;
                fit.push(seq);
            }
        }
        for seq in fit {
            self.wake(seq, true);
        }
    }

    fn wake_all(&mut self) {
        let all: Vec<u64> = self.parked.keys().copied().collect();
        for seq in all {
            self.wake(seq, false);
        }
    }
}

/// One wait on a subscription: parked between its attempts, woken per the channel's
/// [`Messages`]. Dropped while it carries a wake-up it did not use, it hands it on.
pub(crate) struct Waiter {
    sub: Arc<Subscription>,
    seq: u64,
    need: u64,
    slot: Arc<Slot>,
    /// [`Queue::delivered`] when its last attempt was sent.
    seen: u64,
}

impl Waiter {
    /// The subscription it waits on.
    pub(crate) fn subscription(&self) -> &Arc<Subscription> {
        &self.sub
    }

    /// An attempt is about to be sent: what was delivered before it is covered by it.
    pub(crate) fn attempting(&mut self) {
        self.seen = self.sub.queue.lock().delivered;
    }

    /// The attempt ran (granted or not): a wake-up it carried was used.
    pub(crate) fn attempted(&mut self) {
        self.slot.baton.store(false, Ordering::Release);
    }

    /// Until a message wakes it (at once if one came since its attempt was sent). Cancel-safe:
    /// dropped before it returns, the waiter is still parked until [`Waiter::unpark`] or its
    /// drop.
    pub(crate) async fn woken(&mut self) {
        {
            let mut q = self.sub.queue.lock();
            if q.delivered != self.seen || self.sub.is_dead() {
                return;
            }
            self.slot.woken.store(false, Ordering::Release);
            q.parked.insert(
                self.seq,
                Parked {
                    need: self.need,
                    slot: self.slot.clone(),
                },
            );
        }
        loop {
            let notified = self.slot.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.slot.woken.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Its timer came first: off the queue (a wake-up that came meanwhile is used by the
    /// attempt it makes now).
    pub(crate) fn unpark(&mut self) {
        self.sub.queue.lock().parked.remove(&self.seq);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut q = self.sub.queue.lock();
        q.parked.remove(&self.seq);
        if self.slot.baton.swap(false, Ordering::AcqRel) {
            // Woken alone and gone without its attempt: the next waiter tries in its place.
            let payload = match self.sub.messages {
                Messages::Count => Some(self.need as i64),
                _ => Some(super::UNLOCK_MESSAGE),
            };
            q.deliver(self.sub.messages, payload);
        }
    }
}

impl Subscription {
    /// Woken by a message on the channel (one task per unlock message, all for any other), or
    /// when the subscription died. A message that comes while no task is waiting wakes the
    /// next one to wait. For waits that are not acquires; an acquire parks a [`Waiter`].
    #[allow(dead_code)]
    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    /// A new wait on the channel, for `need` units (a semaphore's permits; 1 otherwise).
    pub(crate) fn waiter(self: &Arc<Self>, need: u64) -> Waiter {
        let mut q = self.queue.lock();
        let seq = q.next;
        q.next += 1;
        Waiter {
            sub: self.clone(),
            seq,
            need: need.max(1),
            slot: Arc::new(Slot::default()),
            seen: q.delivered,
        }
    }

    /// Its connection broke: the waiter must subscribe again.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    #[cfg(feature = "cluster")]
    pub(super) fn channel(&self) -> &str {
        &self.channel
    }

    /// Confirmed by the server.
    pub(super) fn confirm(&self) {
        self.state.send_replace(State::Confirmed);
    }

    pub(super) fn die(&self, why: &str) {
        self.dead.store(true, Ordering::Release);
        self.state.send_replace(State::Failed(why.to_string()));
        self.wake.notify_waiters();
        self.wake.notify_one();
        let mut q = self.queue.lock();
        q.delivered += 1;
        q.wake_all();
    }

    /// A message, per the channel's [`Messages`].
    fn deliver(&self, payload: Option<i64>) {
        if payload == Some(super::UNLOCK_MESSAGE) {
            self.wake.notify_one();
        } else {
            self.wake.notify_waiters();
            self.wake.notify_one();
        }
        self.queue.lock().deliver(self.messages, payload);
    }

    /// The subscription confirmed by the server.
    async fn confirmed(&self) -> std::result::Result<(), String> {
        let mut rx = self.state.subscribe();
        let state = rx
            .wait_for(|s| *s != State::Pending)
            .await
            .map_err(|_| "the client is shutting down".to_string())?;
        match &*state {
            State::Failed(why) => Err(why.clone()),
            _ => Ok(()),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.node.channels.lock();
        // Still this one's entry (not a newer subscription of the channel): unsubscribe, in
        // order with the subscribes, under the map lock.
        let mine = channels
            .get(&self.channel)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), self));
        if mine {
            channels.remove(&self.channel);
            if !self.is_dead() {
                let _ = self.node.ops.send(Op::Unsubscribe(self.channel.clone()));
            }
        }
    }
}

impl PubSub {
    pub(crate) fn new(connect_timeout: Duration, response_timeout: Duration) -> PubSub {
        PubSub {
            nodes: Mutex::new(HashMap::new()),
            connect_timeout,
            response_timeout,
        }
    }

    /// `channel`, subscribed on the server serving `key` (shared with the waits already on
    /// it), once the server confirmed it.
    pub(crate) async fn subscribe(
        &self,
        transport: &Transport,
        bg: &Background,
        key: &str,
        channel: &str,
    ) -> Result<Arc<Subscription>> {
        let addr = if transport.sharded_pubsub() {
            // One sharded connection for the whole cluster: redis-rs routes each channel.
            Arc::from(SHARDED)
        } else {
            transport.node_of(key).await
        };
        let node = self.node(transport, bg, &addr)?;
        // A dead subscription found in the map is dropped after the map's lock (its drop
        // takes the lock).
        let mut _stale = None;
        let sub = {
            let mut channels = node.channels.lock();
            match channels.get(channel).and_then(Weak::upgrade) {
                Some(sub) if !sub.is_dead() => sub,
                found => {
                    _stale = found;
                    let sub = Arc::new(Subscription {
                        channel: channel.to_string(),
                        node: node.clone(),
                        wake: Notify::new(),
                        messages: Messages::of(channel),
                        queue: Mutex::new(Queue::default()),
                        state: watch::Sender::new(State::Pending),
                        dead: AtomicBool::new(false),
                    });
                    channels.insert(channel.to_string(), Arc::downgrade(&sub));
                    node.ops
                        .send(Op::Subscribe(Arc::downgrade(&sub)))
                        .map_err(|_| Error::Shutdown)?;
                    sub
                }
            }
        };
        let t = self.connect_timeout + self.response_timeout;
        match tokio::time::timeout(t, sub.confirmed()).await {
            Ok(Ok(())) => Ok(sub),
            Ok(Err(why)) => Err(Error::Connection {
                addr: addr.to_string(),
                source: redis::RedisError::from(std::io::Error::other(format!(
                    "can't subscribe to {channel}: {why}"
                ))),
            }),
            Err(_) => Err(Error::Timeout(format!(
                "Redis at {addr} did not confirm the subscription to {channel} within {t:?}"
            ))),
        }
    }

    /// The server's subscriptions, its connection's task started on first use.
    fn node(
        &self,
        transport: &Transport,
        bg: &Background,
        addr: &Arc<str>,
    ) -> Result<Arc<NodeSubs>> {
        let mut nodes = self.nodes.lock();
        if let Some(n) = nodes.get(addr) {
            return Ok(n.clone());
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let n = Arc::new(NodeSubs {
            ops: tx,
            channels: Mutex::new(HashMap::new()),
        });
        #[cfg(feature = "cluster")]
        {
            let (push_tx, push_rx) = mpsc::unbounded_channel();
            if let Some(client) = transport.sharded_client(push_tx) {
                let client = client.map_err(|e| transport.error_at(e, addr))?;
                bg.spawn(drive_sharded(
                    Arc::downgrade(&n),
                    client,
                    self.connect_timeout,
                    rx,
                    push_rx,
                ));
                nodes.insert(addr.clone(), n.clone());
                return Ok(n);
            }
        }
        let server = transport
            .node(addr)
            .map_err(|e| transport.error_at(e, addr))?;
        bg.spawn(drive(
            Arc::downgrade(&n),
            server.client.clone(),
            self.connect_timeout,
            rx,
        ));
        nodes.insert(addr.clone(), n.clone());
        Ok(n)
    }
}

/// A node's connection: opened at the first subscribe, and again at the first one after it
/// broke. Ends when the client drops the node (its requests' sender goes).
async fn drive(
    node: Weak<NodeSubs>,
    client: redis::Client,
    connect_timeout: Duration,
    mut ops: mpsc::UnboundedReceiver<Op>,
) {
    while let Some(first) = ops.recv().await {
        let conn = match tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                first.refuse(&e.to_string());
                continue;
            }
            Err(_) => {
                first.refuse("connect timed out");
                continue;
            }
        };
        let (mut sink, mut stream) = conn.split();
        run_op(&mut sink, first).await;
        loop {
            tokio::select! {
                op = ops.recv() => match op {
                    Some(op) => run_op(&mut sink, op).await,
                    None => return,
                },
                msg = stream.next() => match msg {
                    Some(m) => dispatch(&node, &m),
                    None => break,
                },
            }
        }
        // The connection broke: every subscription on it is gone.
        let Some(n) = node.upgrade() else { return };
        let subs: Vec<_> = n.channels.lock().drain().collect();
        tracing::debug!(
            subscriptions = subs.len(),
            "rlock: the pub/sub connection broke; waiters subscribe again"
        );
        for (_, w) in subs {
            if let Some(s) = w.upgrade() {
                s.die("the pub/sub connection broke");
            }
        }
    }
}

async fn run_op(sink: &mut redis::aio::PubSubSink, op: Op) {
    match op {
        Op::Subscribe(w) => {
            let Some(s) = w.upgrade() else { return };
            let r: RedisResult<()> = sink.subscribe(&s.channel).await;
            match r {
                Ok(()) => s.confirm(),
                Err(e) => s.die(&e.to_string()),
            }
        }
        Op::Unsubscribe(channel) => {
            let _ = sink.unsubscribe(&channel).await;
        }
    }
}

fn dispatch(node: &Weak<NodeSubs>, m: &redis::Msg) {
    if let Some(n) = node.upgrade() {
        n.deliver(m.get_channel_name(), m.get_payload::<i64>().ok());
    }
}

// ---- Sharded pub/sub (a cluster) ----
//
// The waits' subscriptions in a cluster: sharded pub/sub, as Redisson 3.23+ subscribes there
// (`SSUBSCRIBE` on the node serving the channel's slot; the scripts publish with `SPUBLISH`).
// Plain `SUBSCRIBE` in a cluster would not hear a Java service's `SPUBLISH`, nor it ours: a
// waiter would sit until the holder's lease ended.
//
// One cluster connection of its own (RESP3: redis-rs takes `SSUBSCRIBE` only there) carries
// every channel of the client; redis-rs routes each to its slot's node and subscribes again
// where a slot moves or a node's connection is made anew. Messages arrive as pushes. A
// connection lost on some node is pushed as a disconnection: every waiter is woken to try
// again (a message may have been missed meanwhile), its subscription kept.

/// The cluster's sharded subscriptions: connected at the first subscribe, and again at the
/// first one after connecting failed. Ends when the client drops them.
#[cfg(feature = "cluster")]
async fn drive_sharded(
    subs: Weak<NodeSubs>,
    client: ClusterClient,
    connect_timeout: Duration,
    mut ops: mpsc::UnboundedReceiver<Op>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
) {
    let mut conn: Option<ClusterConnection> = None;
    loop {
        tokio::select! {
            op = ops.recv() => {
                let Some(op) = op else { return };
                if conn.is_none() {
                    match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
                        Ok(Ok(c)) => conn = Some(c),
                        Ok(Err(e)) => { op.refuse(&e.to_string()); continue; }
                        Err(_) => { op.refuse("connect timed out"); continue; }
                    }
                }
                if let Some(c) = conn.as_mut() {
                    run_sharded_op(c, op).await;
                }
            }
            push = pushes.recv() => match push {
                Some(p) => on_push(&subs, p),
                None => return,
            },
        }
    }
}

#[cfg(feature = "cluster")]
async fn run_sharded_op(conn: &mut ClusterConnection, op: Op) {
    match op {
        Op::Subscribe(w) => {
            let Some(s) = w.upgrade() else { return };
            match conn.ssubscribe(s.channel()).await {
                Ok(()) => s.confirm(),
                Err(e) => s.die(&e.to_string()),
            }
        }
        Op::Unsubscribe(channel) => {
            let _ = conn.sunsubscribe(&channel).await;
        }
    }
}

#[cfg(feature = "cluster")]
fn on_push(subs: &Weak<NodeSubs>, p: PushInfo) {
    let Some(n) = subs.upgrade() else { return };
    match p.kind {
        PushKind::SMessage => {
            let (Some(channel), Some(payload)) = (p.data.first(), p.data.get(1)) else {
                return;
            };
            let Ok(channel) = redis::from_redis_value_ref::<String>(channel) else {
                return;
            };
            n.deliver(&channel, payload_int(payload));
        }
        PushKind::Disconnection => {
            tracing::debug!("rlock: a sharded pub/sub connection broke; waiters try again");
            n.wake_all();
        }
        _ => {}
    }
}

#[cfg(feature = "cluster")]
fn payload_int(v: &Value) -> Option<i64> {
    redis::from_redis_value_ref::<i64>(v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue with waiters of these needs parked, in this order; their slots.
    fn parked(needs: &[u64]) -> (Queue, Vec<Arc<Slot>>) {
        let mut q = Queue::default();
        let slots: Vec<Arc<Slot>> = needs.iter().map(|_| Arc::default()).collect();
        for (seq, (need, slot)) in needs.iter().zip(&slots).enumerate() {
            q.parked.insert(
                seq as u64,
                Parked {
                    need: *need,
                    slot: slot.clone(),
                },
            );
        }
        (q, slots)
    }

    fn woken(slots: &[Arc<Slot>]) -> Vec<(bool, bool)> {
        slots
            .iter()
            .map(|s| {
                (
                    s.woken.load(Ordering::Acquire),
                    s.baton.load(Ordering::Acquire),
                )
            })
            .collect()
    }

    #[test]
    fn handlers_by_channel() {
        assert_eq!(Messages::of("redisson_lock__channel:{l}"), Messages::Lock);
        assert_eq!(
            Messages::of("redisson_lock__channel:{l}:u:1"),
            Messages::Lock
        );
        assert_eq!(Messages::of("redisson_sc:{s}"), Messages::Count);
        assert_eq!(
            Messages::of("redisson_countdownlatch__channel__{c}"),
            Messages::All
        );
    }

    #[test]
    fn an_unlock_wakes_the_first_waiter_alone_a_read_unlock_all() {
        let (mut q, slots) = parked(&[1, 1, 1]);
        q.deliver(Messages::Lock, Some(0));
        assert_eq!(
            woken(&slots),
            [(true, true), (false, false), (false, false)]
        );
        assert_eq!(q.parked.len(), 2);
        q.deliver(Messages::Lock, Some(1));
        assert_eq!(woken(&slots)[1..], [(true, false), (true, false)]);
        assert!(q.parked.is_empty());
        assert_eq!(q.delivered, 2);
        // Nobody parked: counted, for the waiters between attempt and park.
        q.deliver(Messages::Lock, Some(0));
        assert_eq!(q.delivered, 3);
    }

    #[test]
    fn a_count_wakes_the_waiters_it_covers_in_order() {
        let (mut q, slots) = parked(&[2, 1, 3, 1, 1]);
        q.deliver(Messages::Count, Some(4));
        // 2 and 1 fit; 3 does not (1 left), the next 1 does, the last no longer.
        let w: Vec<bool> = woken(&slots).iter().map(|w| w.0).collect();
        assert_eq!(w, [true, true, false, true, false]);
        q.deliver(Messages::Count, Some(0));
        assert_eq!(q.parked.len(), 2, "a count of 0 wakes nobody");
        q.deliver(Messages::All, Some(0));
        assert!(q.parked.is_empty());
    }
}

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

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::RedisResult;
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
/// one sharded connection (`sharded.rs`) and every channel.
pub(super) struct NodeSubs {
    ops: mpsc::UnboundedSender<Op>,
    /// Live subscriptions by channel; the waiters own them.
    channels: Mutex<HashMap<String, Weak<Subscription>>>,
}

pub(super) enum Op {
    Subscribe(Weak<Subscription>),
    Unsubscribe(String),
}

impl Op {
    /// The connection could not be opened: a subscribe fails (its waiters subscribe anew).
    pub(super) fn refuse(self, why: &str) {
        if let Op::Subscribe(w) = self {
            if let Some(s) = w.upgrade() {
                s.die(why);
            }
        }
    }
}

impl NodeSubs {
    /// A message on `channel`, to its waiters.
    pub(super) fn deliver(&self, channel: &str, payload: Option<i64>) {
        let sub = self.channels.lock().get(channel).and_then(Weak::upgrade);
        if let Some(s) = sub {
            s.deliver(payload);
        }
    }

    /// Every waiter tries again (a message may have been missed).
    pub(super) fn wake_all(&self) {
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

/// One channel subscribed, shared by the waits on it.
pub(crate) struct Subscription {
    channel: String,
    node: Arc<NodeSubs>,
    wake: Notify,
    state: watch::Sender<State>,
    /// Its connection broke: subscribe anew.
    dead: AtomicBool,
}

impl Subscription {
    /// Woken by a message on the channel (one waiter per unlock message, as Redisson wakes
    /// one waiter per client), or when the subscription died. A message that comes while no
    /// waiter is waiting wakes the next one to wait.
    pub(crate) fn wake(&self) -> &Notify {
        &self.wake
    }

    /// Its connection broke: the waiter must subscribe again.
    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

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
    }

    /// A message: Redisson's `UNLOCK_MESSAGE` (0) wakes one waiter, anything else all.
    fn deliver(&self, payload: Option<i64>) {
        if payload == Some(super::UNLOCK_MESSAGE) {
            self.wake.notify_one();
        } else {
            self.wake.notify_waiters();
            self.wake.notify_one();
        }
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
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        if let Some(client) = transport.sharded_client(push_tx) {
            let client = client.map_err(|e| transport.error_at(e, addr))?;
            bg.spawn(super::sharded::drive(
                Arc::downgrade(&n),
                client,
                self.connect_timeout,
                rx,
                push_rx,
            ));
        } else {
            let server = transport
                .node(addr)
                .map_err(|e| transport.error_at(e, addr))?;
            bg.spawn(drive(
                Arc::downgrade(&n),
                server.client.clone(),
                self.connect_timeout,
                rx,
            ));
        }
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

//! The waits' subscriptions in a cluster: sharded pub/sub, as Redisson 3.23+ subscribes there
//! (`SSUBSCRIBE` on the node serving the channel's slot; the scripts publish with `SPUBLISH`).
//! Plain `SUBSCRIBE` in a cluster would not hear a Java service's `SPUBLISH`, nor it ours: a
//! waiter would sit until the holder's lease ended.
//!
//! One cluster connection of its own (RESP3: redis-rs takes `SSUBSCRIBE` only there) carries
//! every channel of the client; redis-rs routes each to its slot's node and subscribes again
//! where a slot moves or a node's connection is made anew. Messages arrive as pushes. A
//! connection lost on some node is pushed as a disconnection: every waiter is woken to try
//! again (a message may have been missed meanwhile), its subscription kept.

use std::sync::Weak;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::pubsub::{NodeSubs, Op};

/// The cluster's sharded subscriptions: connected at the first subscribe, and again at the
/// first one after connecting failed. Ends when the client drops them.
pub(super) async fn drive(
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
                    run_op(c, op).await;
                }
            }
            push = pushes.recv() => match push {
                Some(p) => on_push(&subs, p),
                None => return,
            },
        }
    }
}

async fn run_op(conn: &mut ClusterConnection, op: Op) {
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

fn payload_int(v: &Value) -> Option<i64> {
    redis::from_redis_value_ref::<i64>(v).ok()
}

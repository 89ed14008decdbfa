//! Following a failover under Sentinel: when the transport finds that Sentinel names another
//! primary, the client leaves its sessions on the former one (their waits are interrupted:
//! the wait path checks whether each took effect, then queues it again on the new primary with
//! the rest of its time) and renews its watchdog holds at once (a hold whose acquire never
//! reached the promoted replica is reported lost now, not a renewal period later).
//!
//! A task of its own, not the transport's job: the transport sits below the sessions and the
//! hold registry and knows neither.

use std::sync::{Arc, Weak};

use tokio::sync::watch;

use crate::context::Context;
use crate::watchdog;

/// Runs until the client is dropped (the transport, and with it the sender, goes away).
pub(crate) async fn follow(
    ctx: Weak<Context>,
    mut primary: watch::Receiver<Option<Arc<str>>>,
    lease_ms: u64,
) {
    while primary.changed().await.is_ok() {
        let Some(now) = primary.borrow_and_update().clone() else {
            continue;
        };
        let Some(ctx) = ctx.upgrade() else { return };
        ctx.sessions.follow_primary(&now);
        watchdog::renew_once(&ctx, lease_ms).await;
    }
}

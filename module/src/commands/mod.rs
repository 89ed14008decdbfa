//! Command handlers, one file per object: argv → the object's rules → a decision that `apply`
//! performs, with the shared waiting mechanism (`wait`) serving queues before a newcomer is
//! decided and after anything that may free the object, and sessions (`sessions`) for waits
//! that do not block a connection.

pub mod acquire;
pub mod latch;
pub mod lock;
pub mod rwlock;
pub mod semaphore;
pub mod session;
pub mod top;

use crate::core::args::{WaitArgs, WaitMode};
use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::store::Store;
use crate::core::wait::{KeyId, Req};
use crate::ffi::{Answer, Ctx};
use crate::keys::RedisKeys;
use crate::{config, sessions, slotwatch, wait};

/// The session a request names, if any (before anything is written: an unknown session, or
/// another user's, is an error, not a half-done acquire).
pub fn session_of(ctx: Ctx, w: &WaitArgs) -> Result<Option<u32>, CmdError> {
    w.session.map(|n| sessions::resolve(ctx, n)).transpose()
}

/// A request that cannot be granted now: queue it through its session (`QUEUE`), park its
/// client (`BLOCK`), or reply nil.
///
/// Every object's request that is not granted at once passes here, and no request is
/// granted past a queue (a newcomer finds the object busy while anyone waits), so this is
/// where a key's queue is kept to one kind of object: a request of another kind than the
/// waiters' gets `WRONGTYPE` at once, waiting or not. Otherwise a lock request would queue
/// behind semaphore waiters on a free key, and wait for a grant that only their kind's rules
/// decide.
pub fn wait_or_nil(
    ctx: Ctx,
    keys: &RedisKeys,
    w: &WaitArgs,
    session: Option<u32>,
    req: Req,
) -> Result<Answer, CmdError> {
    if let Some(kind) = wait::queued_kind(ctx.db(), keys.key_name()) {
        if kind == ObjectKind::Latch && req.kind() != ObjectKind::Latch {
            // Latch waits on a key a writer uses as another object (a semaphore: both are a
            // count) end with the error a latch wait there would get; the writer's request
            // queues. A wait that only reads must not hold a writer's object hostage (an
            // `RLATCH.AWAIT` needs read access only).
            let id = KeyId::new(ctx.db(), keys.key_name());
            wait::end_waits(ctx, &id, CmdError::QueuedKind(req.kind()));
        } else if kind != req.kind() {
            return Err(CmdError::QueuedKind(kind));
        }
    }
    let waits = match w.wait {
        WaitMode::Queue { .. } => session.is_some(),
        WaitMode::Block(_) => ctx.may_block(),
        WaitMode::No => false,
    };
    if waits {
        for aux in req.aux_keys(keys) {
            if !ctx.may_write_key(&aux, false) {
                return Err(CmdError::NoPerm(aux));
            }
        }
        if config::deadlock_detection() {
            wait::check_deadlock(ctx, keys, &req)?;
        }
    }
    if waits {
        // In a cluster, its slot may leave this node while it waits.
        slotwatch::waiting(ctx);
    }
    match (w.wait, session) {
        (
            WaitMode::Queue {
                request,
                timeout_ms,
                park_ms,
            },
            Some(s),
        ) => {
            let queued = sessions::Queued {
                request,
                timeout_ms,
                park_ms,
            };
            sessions::queue(ctx, keys, s, queued, req)
        }
        _ => Ok(wait::park_or_nil(ctx, keys, w.wait, req, session)),
    }
}

/// In cluster mode, refuse a request whose auxiliary keys (`Request::aux_keys`: a fencing
/// token, a read hold's lease key, the leased-permit set) would land in another slot than its
/// key, before anything is written: they would live on another node, or be left behind by
/// resharding. Outside a cluster every name keeps Redisson's exact keys, whatever they hash to.
pub fn check_slots(ctx: Ctx, keys: &RedisKeys, req: impl FnOnce() -> Req) -> Result<(), CmdError> {
    thread_local! {
        // Cluster mode is fixed at startup: one flags read for the life of the process.
        static CLUSTER: std::cell::OnceCell<bool> = const { std::cell::OnceCell::new() };
    }
    if !CLUSTER.with(|c| *c.get_or_init(|| ctx.is_cluster())) {
        return Ok(());
    }
    crate::core::slots::check(keys.key_name(), &req().aux_keys(keys))
}

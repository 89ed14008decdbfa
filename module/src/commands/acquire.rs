//! The acquire pipeline, written once for every object whose acquire may wait: the deadline and
//! the session checked, the key opened, the auxiliary keys' slots checked, the queue served
//! first, then the object decides (its [`Acquiring`], called directly): a grant is applied and
//! replied, anything else waits (or replies nil). An object's handler only parses.

use crate::core::args::{WaitArgs, WaitMode};
use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::store::Store;
use crate::core::wait::grant::with_token;
use crate::core::wait::{Acquiring, Decided, KeyId, Req};
use crate::ffi::{Answer, Ctx, ReadStr};
use crate::keys::RedisKeys;
use crate::settle::{Change, HoldBy};
use crate::{config, sessions, slotwatch, wait};

/// Run the pipeline for the acquire `a` of the object at `key`; `owner`: the command's owner
/// argument, if the object has owners (the key layer reuses it as a hash field, and a grant's
/// hold is watched under it). `serve_first` serves the key's queue before the newcomer is
/// decided and says whether anyone still waits before it ([`serve_first`], or an object's own
/// tidying around it).
pub fn acquire<'a>(
    ctx: Ctx,
    key: ReadStr,
    owner: Option<ReadStr>,
    a: &impl Acquiring<'a>,
    serve_first: fn(&mut RedisKeys) -> Result<bool, CmdError>,
) -> Result<Answer, CmdError> {
    let wait = a.wait();
    wait.check_deadline(ctx.now_ms())?;
    let session = session_of(ctx, wait)?;
    let object = a.object();
    let mut keys = RedisKeys::command(ctx, object.kind(), key, owner.as_slice());
    keys.check_slots(|| a.request())?;
    let queued = serve_first(&mut keys)?;
    let mut decided = a.decide(&keys, queued, false)?;
    if let Decided::TidyFirst(tidy) = decided {
        keys.apply(&tidy, Change::Wrote)?;
        decided = a.decide(&keys, queued, true)?;
    }
    match decided {
        Decided::Grant {
            decision,
            reentry,
            own_lease_ms,
        } => {
            let hold = owner
                .zip(a.hold())
                .map(|(owner, exclusive)| HoldBy { owner, exclusive });
            // A hold an owner keeps is watched by the session the acquire named.
            let watch = hold.and(session).map(|s| (s, a.request()));
            let own_lease = own_lease_ms.map(|ms| {
                let at = ctx.now_ms().saturating_add(ms).saturating_add(1);
                (at, object)
            });
            let took = Change::Took {
                reentry,
                watch,
                own_lease,
                hold,
            };
            let token = keys.apply(&decision, took)?;
            let reply = decision.reply.unwrap_or_default();
            Ok(Answer::Reply(with_token(reply, token)))
        }
        Decided::Busy | Decided::TidyFirst(_) => {
            wait_or_nil(ctx, &keys, wait, session, a.request())
        }
    }
}

/// The queue served before a newcomer is decided, with nothing of the object's own around it.
pub fn serve_first(keys: &mut RedisKeys) -> Result<bool, CmdError> {
    Ok(wait::serve_first(keys))
}

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
    // Latch waits on a key a writer uses as another object (a semaphore: both are a count)
    // end with the error a latch wait there would get when the writer's request queues: a wait
    // that only reads must not hold a writer's object hostage (an `RLATCH.AWAIT` needs read
    // access only). A request that does not wait (nil), or is refused by its checks below
    // (NOPERM, DEADLOCK), holds nothing up and leaves them waiting.
    let mut ends_latch_waits = false;
    if let Some(kind) = wait::queued_kind(ctx.db(), keys.key_name()) {
        if kind == ObjectKind::Latch && req.kind() != ObjectKind::Latch {
            ends_latch_waits = true;
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
        // In a cluster, its slot may leave this node while it waits.
        slotwatch::waiting(ctx);
    }
    if ends_latch_waits && waits {
        let id = KeyId::new(ctx.db(), keys.key_name());
        wait::end_waits(ctx, &id, CmdError::QueuedKind(req.kind()));
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

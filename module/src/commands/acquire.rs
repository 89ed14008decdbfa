//! The acquire pipeline, written once for every object whose acquire may wait: the deadline and
//! the session checked, the key opened, the auxiliary keys' slots checked, the queue served
//! first, then the object decides: a grant is applied and replied, anything else waits (or
//! replies nil). An object's handler only parses and decides.

use super::{check_slots, session_of, wait_or_nil};
use crate::core::args::WaitArgs;
use crate::core::decision::{Decision, Reply};
use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::wait::grant::with_token;
use crate::core::wait::{Object, Req};
use crate::ffi::{Answer, Ctx, RStr};
use crate::keys::RedisKeys;
use crate::settle::{Change, HoldBy};

/// An acquire of a `kind` object at `key` (`also`: the command's other key-like arguments the
/// key layer needs, such as the owner), waiting as `wait` says.
pub struct Acquiring<'a> {
    pub kind: ObjectKind,
    pub key: RStr,
    pub also: &'a [RStr],
    pub wait: &'a WaitArgs<'a>,
}

/// What the object decided.
pub enum Decided<'a> {
    /// Granted now: the decision to apply, and what the grant is (see `Change::Took`).
    Grant {
        decision: Decision<'a>,
        reentry: bool,
        own_lease: Option<(i64, &'static dyn Object)>,
        hold: Option<HoldBy>,
    },
    /// Not now: the request waits, or the reply is nil.
    Busy,
}

/// Run the pipeline. `req` builds the request as it would wait; `serve_first` serves the
/// key's queue before the newcomer is decided and says whether anyone still waits before it
/// (`settle::serve_first`, or an object's own tidying around it); `decide` is the object's rule,
/// told whether anyone waits.
pub fn acquire<'a>(
    ctx: Ctx,
    a: Acquiring,
    req: impl Fn() -> Req,
    serve_first: fn(&mut RedisKeys) -> Result<bool, CmdError>,
    decide: impl FnOnce(&mut RedisKeys, bool) -> Result<Decided<'a>, CmdError>,
) -> Result<Answer, CmdError> {
    a.wait.check_deadline(ctx.now_ms())?;
    let session = session_of(ctx, a.wait)?;
    let mut keys = RedisKeys::command(ctx, a.kind, a.key, a.also);
    check_slots(ctx, &keys, &req)?;
    let queued = serve_first(&mut keys)?;
    match decide(&mut keys, queued)? {
        Decided::Grant {
            decision,
            reentry,
            own_lease,
            hold,
        } => {
            // A hold an owner keeps is watched by the session the acquire named.
            let watch = hold.and(session).map(|s| (s, req()));
            let took = Change::Took {
                reentry,
                watch,
                own_lease,
                hold,
            };
            let token = keys.apply(&decision, took)?;
            let reply = decision.reply.unwrap_or(Reply::Nil);
            Ok(Answer::Reply(with_token(reply, token)))
        }
        Decided::Busy => wait_or_nil(ctx, &keys, a.wait, session, req()),
    }
}

/// The queue served before a newcomer is decided, with nothing of the object's own around it.
pub fn serve_first(keys: &mut RedisKeys) -> Result<bool, CmdError> {
    Ok(crate::settle::serve_first(keys))
}

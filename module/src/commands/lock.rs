//! `RLOCK.*`: the exclusive reentrant lock (Redisson's RLock layout).

use super::{check_slots, session_of, wait_or_nil};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::lock::{self, Acquire, LockWait, Took};
use crate::core::stats::ObjectKind;
use crate::core::wait::{serve::resolve, Io};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::{sessions, wait};
use std::rc::Rc;

/// `RLOCK.ACQUIRE key owner lease_ms [BLOCK timeout_ms] [SESSION s [QUEUE request timeout_ms]]
/// [FENCE]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let a = lock::parse_acquire(&argv)?;
    a.wait.wait.check(ctx.now_ms())?;
    let session = session_of(ctx, &a.wait)?;
    let owner = argv[2];
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    let req = || {
        Rc::new(LockWait {
            owner: owner.into(),
            lease_ms: a.lease_ms,
            fence: a.fence,
        })
    };
    check_slots(ctx, &keys, || req())?;
    let queued = wait::serve_now(&mut keys);
    let c = ObjectKind::Lock.counters();
    match lock::acquire(&keys, owner, a.lease_ms, a.fence, queued)? {
        Acquire::Grant(d, took) => {
            let token = keys.apply(&d)?;
            match took {
                Took::Fresh => c.acquired.incr(),
                Took::Reentry => c.reentries.incr(),
            }
            if let Some(s) = session {
                sessions::track(ctx, s, &keys, req());
            }
            Ok(Answer::Reply(resolve(d.reply.unwrap_or(Reply::Nil), token)))
        }
        Acquire::Busy => wait_or_nil(ctx, &keys, &a.wait, session, req()),
    }
}

/// `RLOCK.RELEASE key owner`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    lock::parse_release(&argv)?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    let (d, full) = lock::release(&keys, argv[2])?;
    keys.apply(&d)?;
    if full {
        ObjectKind::Lock.counters().releases.incr();
        sessions::released(ctx, &keys, argv[2]);
        wait::serve_now(&mut keys);
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RLOCK.RENEW key owner lease_ms`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let lease_ms = lock::parse_renew(&argv)?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    let d = lock::renew(&keys, argv[2], lease_ms)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
        ObjectKind::Lock.counters().renewals.incr();
        // A shorter lease moves the lock's expiry earlier: serving re-arms the queue's check.
        wait::serve_now(&mut keys);
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RLOCK.FORCERELEASE key`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    lock::parse_force_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    let d = lock::force_release(&keys)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
        ObjectKind::Lock.counters().force_releases.incr();
        sessions::after_write(ctx, &keys);
        wait::serve_now(&mut keys);
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RLOCK.INFO key`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    lock::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let queue = wait::shown(ctx.db(), args.get(1).bytes());
    Ok(Answer::Reply(lock::info(&keys, queue)?))
}

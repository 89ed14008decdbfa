//! `RSEM.*`: the semaphore with optional expiring permits (Redisson's RSemaphore and
//! RPermitExpirableSemaphore layout).

use super::{check_slots, session_of, wait_or_nil};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::semaphore::{self, Release, SemWait};
use crate::core::stats::ObjectKind;
use crate::core::wait::Io;
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::{config, wait};
use std::rc::Rc;

/// What every writing RSEM command does first, as each of Redisson's expirable-semaphore
/// scripts does: return expired leased permits to the pool, let queued waiters take them, and
/// publish what is left. Returns whether anyone still waits (a newcomer queues behind them).
fn prepare(keys: &mut RedisKeys) -> Result<bool, CmdError> {
    let reclaim = semaphore::reclaim(keys)?;
    if reclaim.writes.is_empty() {
        return Ok(wait::serve_now(keys));
    }
    keys.apply(&reclaim)?;
    let queued = wait::serve_now(keys);
    keys.apply(&semaphore::announce(keys, true)?)?;
    Ok(queued)
}

/// After permits were added: serve the queue, then publish (when `publish`) the count that is
/// left, which is also the reply.
fn settle(keys: &mut RedisKeys, publish: bool) -> Result<Reply, CmdError> {
    wait::serve_now(keys);
    let d = semaphore::announce(keys, false)?;
    if publish {
        keys.apply(&d)?;
    }
    Ok(d.reply.unwrap_or(Reply::Nil))
}

/// `RSEM.ACQUIRE key [PERMITS n] [LEASE ms] [BLOCK timeout_ms] [SESSION s [QUEUE request
/// timeout_ms]]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let a = semaphore::parse_acquire(&argv)?;
    // Each leased permit is written, replicated and replied one by one: the configured
    // maximum bounds how long one call holds the server.
    let max_leased = config::get(&config::SEM_MAX_LEASED_PERMITS);
    if a.lease_ms.is_some() && a.permits > max_leased {
        return Err(CmdError::TooLarge("permits with LEASE", max_leased));
    }
    a.wait.wait.check(ctx.now_ms())?;
    let session = session_of(ctx, &a.wait)?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    let req = || {
        Rc::new(SemWait {
            permits: a.permits,
            lease_ms: a.lease_ms,
        })
    };
    check_slots(ctx, &keys, || req())?;
    let queued = prepare(&mut keys)?;
    match semaphore::acquire(&keys, a.permits, a.lease_ms, queued)? {
        Some(d) => {
            keys.apply(&d)?;
            ObjectKind::Semaphore.counters().acquired.incr();
            Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
        }
        None => wait_or_nil(ctx, &keys, &a.wait, session, req()),
    }
}

/// `RSEM.RELEASE key [PERMITS n]` / `RSEM.RELEASE key ID id [id ...]`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let what = semaphore::parse_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = match &what {
        Release::Permits(n) => semaphore::release_permits(&keys, *n)?,
        Release::Ids(ids) => semaphore::release_ids(&keys, ids)?,
    };
    keys.apply(&d)?;
    ObjectKind::Semaphore.counters().releases.incr();
    Ok(Answer::Reply(settle(&mut keys, true)?))
}

/// `RSEM.RENEW key lease_ms ID id [id ...]`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let (lease_ms, ids) = semaphore::parse_renew(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    // Leases that already ended are returned first (and can no longer be renewed).
    prepare(&mut keys)?;
    let d = semaphore::renew(&keys, lease_ms, &ids)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RSEM.TRYSETPERMITS key n`
pub fn try_set_permits(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let n = semaphore::parse_try_set(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = semaphore::try_set(&keys, n)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
        settle(&mut keys, true)?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RSEM.ADDPERMITS key delta`
pub fn add_permits(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let delta = semaphore::parse_add(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    prepare(&mut keys)?;
    keys.apply(&semaphore::add_permits(&keys, delta)?)?;
    Ok(Answer::Reply(settle(&mut keys, delta > 0)?))
}

/// `RSEM.DRAIN key`
pub fn drain(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    semaphore::parse_key(&args.bytes(), "rsem.drain")?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = semaphore::drain(&keys)?;
    keys.apply(&d)?;
    // A count of 0 is an open latch: awaiters on the same key pass in this step (as they do
    // after a SET or INCRBY to 0, seen as events; our own writes raise none).
    wait::serve_now(&mut keys);
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RSEM.AVAILABLE key`
pub fn available(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    semaphore::parse_key(&args.bytes(), "rsem.available")?;
    let keys = RedisKeys::read(ctx, args.get(1));
    Ok(Answer::Reply(Reply::Int(semaphore::available(&keys)?)))
}

/// `RSEM.INFO key [COUNT n]`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let limit = semaphore::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let (queue, waiters) = wait::shown_upto(ctx.db(), args.get(1).bytes(), limit);
    Ok(Answer::Reply(semaphore::info(
        &keys, waiters, queue, limit,
    )?))
}

//! `RRWLOCK.*`: the read-write lock (Redisson's RReadWriteLock layout).

use super::{check_slots, session_of, wait_or_nil};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::rwlock::{self, Acquire, Mode, RwWait, Took};
use crate::core::stats::ObjectKind;
use crate::core::wait::Io;
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::{sessions, wait};
use std::rc::Rc;

/// `RRWLOCK.ACQUIRE key owner READ|WRITE lease_ms [BLOCK timeout_ms] [SESSION s [QUEUE request
/// timeout_ms]]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let a = rwlock::parse_acquire(&argv)?;
    a.wait.wait.check(ctx.now_ms())?;
    let session = session_of(ctx, &a.wait)?;
    let owner = argv[2];
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    check_slots(ctx, &keys, || {
        Rc::new(RwWait {
            owner: owner.into(),
            mode: a.mode,
            lease_ms: a.lease_ms,
        })
    })?;
    let queued = wait::serve_now(&mut keys);
    let mut decided = rwlock::acquire(&keys, owner, a.mode, a.lease_ms, queued, false)?;
    if decided == Acquire::TidyFirst {
        let tidy = rwlock::tidy(&keys)?;
        keys.apply(&tidy)?;
        decided = rwlock::acquire(&keys, owner, a.mode, a.lease_ms, queued, true)?;
    }
    let c = ObjectKind::RwLock.counters();
    let req = || {
        Rc::new(RwWait {
            owner: owner.into(),
            mode: a.mode,
            lease_ms: a.lease_ms,
        })
    };
    match decided {
        Acquire::Grant(d, took) => {
            keys.apply(&d)?;
            match took {
                Took::Fresh => c.acquired.incr(),
                Took::Reentry => c.reentries.incr(),
            }
            if let Some(s) = session {
                sessions::track(ctx, s, &keys, req());
            }
            if a.mode == Mode::Read {
                // A read hold has a lease of its own: its end is looked at even if nobody waits.
                let at = ctx.now_ms().saturating_add(a.lease_ms).saturating_add(1);
                wait::upkeep(ctx, &keys, at, req());
            }
            Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
        }
        Acquire::Busy | Acquire::TidyFirst => wait_or_nil(ctx, &keys, &a.wait, session, req()),
    }
}

/// `RRWLOCK.RELEASE key owner READ|WRITE`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let mode = rwlock::parse_release(&argv)?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    let (d, released) = rwlock::release(&keys, argv[2], mode)?;
    keys.apply(&d)?;
    if released.last {
        ObjectKind::RwLock.counters().releases.incr();
        sessions::released(ctx, &keys, argv[2]);
        // Freed, or turned into a read lock after a downgrade: queued readers may go.
        wait::serve_now(&mut keys);
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RRWLOCK.RENEW key owner lease_ms`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let lease_ms = rwlock::parse_renew(&argv)?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[args.get(2)]);
    let d = rwlock::renew(&keys, argv[2], lease_ms)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
        ObjectKind::RwLock.counters().renewals.incr();
        // A shorter lease moves the next change of the lock earlier: serving the queue
        // re-arms its check for the new earliest expiry (our own PEXPIREAT raises no re-check).
        if !wait::serve_now(&mut keys) {
            let at = ctx.now_ms().saturating_add(lease_ms).saturating_add(1);
            let owner = argv[2];
            let req = Rc::new(RwWait {
                owner: owner.into(),
                mode: Mode::Read,
                lease_ms,
            });
            wait::upkeep(ctx, &keys, at, req);
        }
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RRWLOCK.FORCERELEASE key`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rwlock::parse_force_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, args.get(1), &[]);
    let d = rwlock::force_release(&keys)?;
    if !d.writes.is_empty() {
        keys.apply(&d)?;
        ObjectKind::RwLock.counters().force_releases.incr();
        sessions::after_write(ctx, &keys);
        wait::serve_now(&mut keys);
    }
    Ok(Answer::Reply(d.reply.unwrap_or(Reply::Nil)))
}

/// `RRWLOCK.INFO key`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rwlock::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let queue = wait::shown(ctx.db(), args.get(1).bytes());
    Ok(Answer::Reply(rwlock::info(&keys, queue)?))
}

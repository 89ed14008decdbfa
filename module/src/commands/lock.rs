//! `RLOCK.*`: the exclusive reentrant lock (Redisson's RLock layout).

use super::acquire::{self, serve_first};
use super::{BLOCK, KEY, LEASE, OWNER, SESSION};
use crate::core::error::CmdError;
use crate::core::lock::{self, LockAcquire};
use crate::core::names;
use crate::core::stats::ObjectKind::Lock;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::settle::Change;
use crate::wait;

/// `RLOCK.ACQUIRE key owner lease_ms [BLOCK timeout_ms] [SESSION s [QUEUE request timeout_ms]]
/// [FENCE]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    // Parsed first: the arity is checked before the owner is read.
    let parsed = lock::parse_acquire(&argv)?;
    let a = LockAcquire {
        owner: argv[2],
        args: parsed,
    };
    acquire::acquire(ctx, argv.str(1), Some(argv.str(2)), &a, serve_first)
}

/// `RLOCK.RELEASE key owner`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    lock::parse_release(&argv)?;
    let mut keys = RedisKeys::command(ctx, Lock, argv.str(1), &[argv.str(2)]);
    let (d, full) = lock::release(&keys, argv[2])?;
    let change = match full {
        true => Change::Released {
            owner: argv.str(2),
            exclusive: true,
        },
        false => Change::Wrote,
    };
    keys.apply(&d, change)?;
    if wait::total() > 0 {
        keys.leave_open();
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RLOCK.RENEW key owner lease_ms`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let lease_ms = lock::parse_renew(&argv)?;
    let mut keys = RedisKeys::command(ctx, Lock, argv.str(1), &[argv.str(2)]);
    let d = lock::renew(&keys, argv[2], lease_ms)?;
    if !d.writes.is_empty() {
        // A shorter lease moves the lock's expiry earlier: serving re-arms the queue's check.
        keys.apply(&d, Change::Renewed { own_lease: None })?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RLOCK.FORCERELEASE key`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    lock::parse_force_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Lock, args.get(1), &[]);
    let d = lock::force_release(&keys)?;
    if !d.writes.is_empty() {
        keys.apply(&d, Change::ForceReleased)?;
        if wait::total() > 0 {
            keys.leave_open();
        }
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RLOCK.INFO key`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    lock::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let queue = wait::shown(ctx.db(), args.get(1).bytes());
    let token_key = names::prefixed(names::FENCE_TOKEN, args.get(1).bytes());
    Ok(Answer::Reply(lock::info(
        &keys,
        queue,
        ctx.may_read_key(&token_key),
    )?))
}

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rlock.acquire",
        handler: acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Acquires a reentrant lock (Redisson RLock layout); with BLOCK waits in a FIFO queue on the server",
        complexity: c"O(1)",
        arity: -4,
        key: KeyAccess::Update,
        args: &[
            KEY,
            OWNER,
            LEASE,
            BLOCK,
            SESSION,
            ArgSpec::option(c"fence", Token, c"FENCE"),
        ],
    },
    CommandSpec {
        name: c"rlock.release",
        handler: release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Releases one hold of a lock; the last hold deletes it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 3,
        key: KeyAccess::Delete,
        args: &[KEY, OWNER],
    },
    CommandSpec {
        name: c"rlock.renew",
        handler: renew,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Extends the lease of a lock held by owner",
        complexity: c"O(1)",
        arity: 4,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE],
    },
    CommandSpec {
        name: c"rlock.forcerelease",
        handler: force_release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Deletes a lock whoever holds it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 2,
        key: KeyAccess::Delete,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rlock.info",
        handler: info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a lock's owner, holds, TTL, fencing token and waiting queue",
        complexity: c"O(N) where N is the number of waiters",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
];

//! `RRWLOCK.*`: the read-write lock (Redisson's RReadWriteLock layout).

use super::acquire::{self, serve_first};
use super::{BLOCK, KEY, LEASE, OWNER, SESSION};
use crate::core::error::CmdError;
use crate::core::objects;
use crate::core::rwlock::{self, Mode, RwLockAcquire};
use crate::core::stats::ObjectKind::RwLock;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::settle::Change;
use crate::wait;

/// `RRWLOCK.ACQUIRE key owner READ|WRITE lease_ms [BLOCK timeout_ms] [SESSION s [QUEUE request
/// timeout_ms]]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    // Parsed first: the arity is checked before the owner is read.
    let parsed = rwlock::parse_acquire(&argv)?;
    let a = RwLockAcquire {
        owner: argv[2],
        args: parsed,
    };
    acquire::acquire(ctx, argv.str(1), Some(argv.str(2)), &a, serve_first)
}

/// `RRWLOCK.RELEASE key owner READ|WRITE`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let mode = rwlock::parse_release(&argv)?;
    let mut keys = RedisKeys::command(ctx, RwLock, argv.str(1), &[argv.str(2)]);
    let (d, released) = rwlock::release(&keys, argv[2], mode)?;
    // Freed, or turned into a read lock after a downgrade: queued readers may go.
    let change = match released.last {
        true => Change::Released {
            owner: argv.str(2),
            exclusive: mode == Mode::Write,
        },
        false => Change::Wrote,
    };
    keys.apply(&d, change)?;
    if wait::total() > 0 {
        keys.leave_open();
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RRWLOCK.RENEW key owner lease_ms`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let lease_ms = rwlock::parse_renew(&argv)?;
    let mut keys = RedisKeys::command(ctx, RwLock, argv.str(1), &[argv.str(2)]);
    let d = rwlock::renew(&keys, argv[2], lease_ms)?;
    if !d.writes.is_empty() {
        // A shorter lease moves the next change of the lock earlier: serving the queue
        // re-arms its check for the new earliest expiry (our own PEXPIREAT raises no re-check);
        // with nobody queued, the renewed holds' end is looked at.
        let at = ctx.now_ms().saturating_add(lease_ms).saturating_add(1);
        let own_lease = Some((at, objects::of(RwLock)));
        keys.apply(&d, Change::Renewed { own_lease })?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RRWLOCK.FORCERELEASE key`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rwlock::parse_force_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, RwLock, args.get(1), &[]);
    let d = rwlock::force_release(&keys)?;
    if !d.writes.is_empty() {
        keys.apply(&d, Change::ForceReleased)?;
        if wait::total() > 0 {
            keys.leave_open();
        }
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RRWLOCK.INFO key`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    rwlock::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let queue = wait::shown(ctx.db(), args.get(1).bytes());
    Ok(Answer::Reply(rwlock::info(&keys, queue)?))
}

const MODE: ArgSpec = ArgSpec {
    subargs: &[
        ArgSpec::word(c"read", c"READ"),
        ArgSpec::word(c"write", c"WRITE"),
    ],
    ..ArgSpec::new(c"mode", OneOf)
};

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rrwlock.acquire",
        handler: acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Acquires the read or write side of a read-write lock (Redisson RReadWriteLock layout); with BLOCK waits in a FIFO queue shared by readers and writers",
        complexity: c"O(1) for a read or a first write; O(N) holds when a writer meets a read lock",
        arity: -5,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, MODE, LEASE, BLOCK, SESSION],
    },
    CommandSpec {
        name: c"rrwlock.release",
        handler: release,
        flags: c"write",
        acl: c"write slow",
        summary: c"Releases one read or write hold; the last hold deletes the lock, publishes, and grants queued waiters",
        complexity: c"O(1) for a partial write release; O(N) where N is the number of read holds otherwise (each hold's TTL is read, as Redisson's read unlock does)",
        arity: 4,
        key: KeyAccess::Delete,
        args: &[KEY, OWNER, MODE],
    },
    CommandSpec {
        name: c"rrwlock.renew",
        handler: renew,
        flags: c"write",
        acl: c"write slow",
        summary: c"Extends every lease of owner's read and write holds",
        complexity: c"O(N) where N is the number of read holds",
        arity: 4,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE],
    },
    CommandSpec {
        name: c"rrwlock.forcerelease",
        handler: force_release,
        flags: c"write",
        acl: c"write slow",
        summary: c"Deletes a read-write lock and its read-hold keys whoever holds it, publishes, and grants queued waiters",
        complexity: c"O(N) where N is the number of read holds",
        arity: 2,
        key: KeyAccess::Delete,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rrwlock.info",
        handler: info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a read-write lock's mode, readers, writer, TTL and waiting queue",
        complexity: c"O(N) where N is the number of holders and waiters",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
];

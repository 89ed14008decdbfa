//! `RSEM.*`: the semaphore with optional expiring permits (Redisson's RSemaphore and
//! RPermitExpirableSemaphore layout).

use super::acquire;
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::names;
use crate::core::semaphore::{self, Release, SemaphoreObject};
use crate::core::stats::ObjectKind::Semaphore;
use crate::core::wait::Object;
use crate::ffi::{Answer, Args, Ctx, RStr};
use crate::keys::RedisKeys;
use crate::settle::Change;

use super::{BLOCK, KEY, SESSION};
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::{config, wait};

/// What every writing RSEM command does first, as each of Redisson's expirable-semaphore
/// scripts does: the semaphore's tidying (expired leased permits back to the pool), queued
/// waiters served, then what tidying announces (what is left), as serving a queue does it.
/// Returns whether anyone still waits (a newcomer queues behind them).
fn prepare(keys: &mut RedisKeys) -> Result<bool, CmdError> {
    let tidy = SemaphoreObject.tidy(keys)?;
    if tidy.before.writes.is_empty() {
        return Ok(wait::serve_first(keys));
    }
    keys.apply(&tidy.before, Change::Wrote)?;
    let queued = wait::serve_first(keys);
    keys.apply(&tidy.after_serving, Change::Wrote)?;
    Ok(queued)
}

/// Permits were added: once waiters took theirs, the count left is published.
const FREED_ANNOUNCED: Change = Change::Freed {
    counted: false,
    announce: true,
};

/// The reply of a command that added permits: the count left once waiters took theirs.
fn left(ctx: Ctx, key: RStr) -> Result<Reply, CmdError> {
    let d = semaphore::announce(&RedisKeys::read(ctx, key), false)?;
    Ok(d.reply.unwrap_or_default())
}

/// `RSEM.ACQUIRE key [PERMITS n] [LEASE ms | NOLEASE] [BLOCK timeout_ms] [SESSION s [QUEUE
/// request timeout_ms]]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let a = semaphore::parse_acquire(&argv)?;
    // Each permit with an id is written, replicated and replied one by one: the configured
    // maximum bounds how long one call holds the server.
    let max_leased = config::get(&config::SEM_MAX_LEASED_PERMITS);
    if a.lease_ms.is_some() && a.permits > max_leased {
        return Err(CmdError::TooLarge(
            semaphore::with_ids(a.lease_ms),
            max_leased,
        ));
    }
    acquire::acquire(ctx, argv.str(1), None, &a, prepare)
}

/// `RSEM.RELEASE key [PERMITS n] [XX]` / `RSEM.RELEASE key ID id [id ...]`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let what = semaphore::parse_release(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    // Asked before the tidying, which may create the count (ended leases returned), as
    // Redisson's `releaseIfExists` asks EXISTS first and reclaims nothing.
    if matches!(what, Release::PermitsIfExists(_)) && !semaphore::exists(&keys)? {
        return Ok(Answer::Reply(Reply::Nil));
    }
    prepare(&mut keys)?;
    let d = match &what {
        Release::Permits(n) | Release::PermitsIfExists(n) => semaphore::release_permits(&keys, *n)?,
        Release::Ids(ids) => semaphore::release_ids(&keys, ids)?,
    };
    let released = Change::Freed {
        counted: true,
        announce: true,
    };
    keys.apply(&d, released)?;
    // Its settle step opens the key (to announce what is left).
    keys.leave_open();
    Ok(Answer::ReadAfter(left))
}

/// `RSEM.RENEW key lease_ms ID id [id ...]`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let (lease_ms, ids) = semaphore::parse_renew(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    // Leases that already ended are returned first (and can no longer be renewed).
    prepare(&mut keys)?;
    let d = semaphore::renew(&keys, lease_ms, &ids)?;
    if !d.writes.is_empty() {
        // A shorter lease moves the next reclaim earlier: serving the queue re-arms its check
        // (else a waiter would wait for the end the lease had before).
        keys.apply(&d, Change::Renewed { own_lease: None })?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RSEM.TRYSETPERMITS key n [PX ttl_ms]`
pub fn try_set_permits(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let (n, ttl_ms) = semaphore::parse_try_set(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = match ttl_ms {
        None => semaphore::try_set(&keys, n)?,
        Some(ms) => semaphore::try_set_for(&keys, n, ms)?,
    };
    if !d.writes.is_empty() {
        keys.apply(&d, FREED_ANNOUNCED)?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RSEM.SETPERMITS key total`
pub fn set_permits(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let total = semaphore::parse_set_permits(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = semaphore::set_permits(&keys, total)?;
    if d.writes.is_empty() {
        return Ok(Answer::Reply(d.reply.unwrap_or_default()));
    }
    // Redisson's script publishes whenever it writes, fewer permits included.
    keys.apply(&d, FREED_ANNOUNCED)?;
    Ok(Answer::ReadAfter(left))
}

/// `RSEM.ADDPERMITS key delta`
pub fn add_permits(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let delta = semaphore::parse_add(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    prepare(&mut keys)?;
    let added = match delta > 0 {
        true => FREED_ANNOUNCED,
        // Nothing to announce; the waiters are served all the same.
        false => Change::Freed {
            counted: false,
            announce: false,
        },
    };
    keys.apply(&semaphore::add_permits(&keys, delta)?, added)?;
    Ok(Answer::ReadAfter(left))
}

/// `RSEM.DRAIN key`
pub fn drain(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    semaphore::parse_key(&args.bytes(), "rsem.drain")?;
    let mut keys = RedisKeys::command(ctx, Semaphore, args.get(1), &[]);
    prepare(&mut keys)?;
    let d = semaphore::drain(&keys)?;
    // A count of 0 is an open latch: awaiters on the same key pass in this step (as they do
    // after a SET or INCRBY to 0, seen as events; our own writes raise none).
    let drained = Change::Freed {
        counted: false,
        announce: false,
    };
    keys.apply(&d, drained)?;
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RSEM.AVAILABLE key`
pub fn available(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    semaphore::parse_key(&args.bytes(), "rsem.available")?;
    let keys = RedisKeys::read(ctx, args.get(1));
    Ok(Answer::Reply(Reply::Int(semaphore::available(&keys)?)))
}

/// `RSEM.LEASETIME key id`
pub fn lease_time(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let id = semaphore::parse_lease_time(&args.bytes())?;
    // The id's lease is in the leased-permit set: a user who may not read it learns nothing
    // (ACL names only the count's key, at position 1).
    let leases = names::semaphore_timeouts(args.get(1).bytes());
    if !ctx.may_read_key(&leases) {
        return Err(CmdError::NoReadPerm(leases));
    }
    let keys = RedisKeys::read(ctx, args.get(1));
    Ok(Answer::Reply(semaphore::lease_time(&keys, &id)?))
}

/// `RSEM.INFO key [COUNT n]`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let limit = semaphore::parse_info(&args.bytes())?;
    let keys = RedisKeys::read(ctx, args.get(1));
    let (queue, waiters) = wait::shown_upto(ctx.db(), args.get(1).bytes(), limit);
    let leases = names::semaphore_timeouts(args.get(1).bytes());
    Ok(Answer::Reply(semaphore::info(
        &keys,
        waiters,
        queue,
        limit,
        ctx.may_read_key(&leases),
    )?))
}

const PERMITS: ArgSpec = ArgSpec::option(c"permits", Integer, c"PERMITS");

const RELEASED: ArgSpec = ArgSpec {
    optional: true,
    subargs: &[
        ArgSpec {
            token: Some(c"PERMITS"),
            ..ArgSpec::new(c"permits", Integer)
        },
        ArgSpec {
            token: Some(c"ID"),
            multiple: true,
            ..ArgSpec::new(c"id", String)
        },
    ],
    ..ArgSpec::new(c"released", OneOf)
};

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rsem.acquire",
        handler: acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Takes permits of a semaphore (Redisson RSemaphore layout), with LEASE as ids that return by themselves when the lease ends, with NOLEASE as ids without an end (RPermitExpirableSemaphore layout); with BLOCK waits in a strict FIFO queue on the server",
        complexity: c"O(N) where N is the number of permits with ids (O(1) without LEASE or NOLEASE), plus the expired leases returned first",
        arity: -2,
        key: KeyAccess::Update,
        args: &[
            KEY,
            PERMITS,
            ArgSpec {
                optional: true,
                subargs: &[
                    ArgSpec {
                        token: Some(c"LEASE"),
                        ..ArgSpec::new(c"lease_ms", Integer)
                    },
                    ArgSpec::word(c"nolease", c"NOLEASE"),
                ],
                ..ArgSpec::new(c"lease", OneOf)
            },
            BLOCK,
            SESSION,
        ],
    },
    CommandSpec {
        name: c"rsem.release",
        handler: release,
        flags: c"write",
        acl: c"write slow",
        summary: c"Gives back permits (or the leased permits with these ids, all or none), hands them to queued waiters, publishes and replies the count left; with XX only if the semaphore exists",
        complexity: c"O(N) where N is the number of ids, plus the waiters granted",
        arity: -2,
        key: KeyAccess::Update,
        args: &[
            KEY,
            RELEASED,
            ArgSpec::option(c"xx", Token, c"XX"),
        ],
    },
    CommandSpec {
        name: c"rsem.renew",
        handler: renew,
        flags: c"write",
        // Not @fast: like every writing RSEM command it first returns ended leases to the pool,
        // which can serve waiters.
        acl: c"write slow",
        summary: c"Moves the lease end of leased permits to lease_ms from now; replies how many were still leased",
        complexity: c"O(N log M) where N is the number of ids and M the leased permits, plus the ended leases returned and the waiters granted",
        arity: -5,
        key: KeyAccess::Update,
        args: &[
            KEY,
            ArgSpec::new(c"lease_ms", Integer),
            ArgSpec {
                token: Some(c"ID"),
                multiple: true,
                ..ArgSpec::new(c"id", String)
            },
        ],
    },
    CommandSpec {
        name: c"rsem.trysetpermits",
        handler: try_set_permits,
        flags: c"write deny-oom",
        acl: c"write slow",
        summary: c"Sets a semaphore's permits if it does not exist yet, with PX a time to live for them",
        complexity: c"O(1), plus the waiters granted",
        arity: -3,
        key: KeyAccess::Update,
        args: &[
            KEY,
            ArgSpec::new(c"permits", Integer),
            ArgSpec::option(c"ttl_ms", Integer, c"PX"),
        ],
    },
    CommandSpec {
        name: c"rsem.setpermits",
        handler: set_permits,
        flags: c"write deny-oom",
        acl: c"write slow",
        summary: c"Makes a semaphore's permits, available plus leased, number this many by moving the available count (Redisson's setPermits); publishes when it changes",
        complexity: c"O(1), plus the expired leases returned first and the waiters granted",
        arity: 3,
        key: KeyAccess::Update,
        args: &[KEY, ArgSpec::new(c"permits", Integer)],
    },
    CommandSpec {
        name: c"rsem.addpermits",
        handler: add_permits,
        flags: c"write deny-oom",
        acl: c"write slow",
        summary: c"Adds (or with a negative delta removes) permits; the count may go negative",
        complexity: c"O(1), plus the waiters granted",
        arity: 3,
        key: KeyAccess::Update,
        args: &[KEY, ArgSpec::new(c"delta", Integer)],
    },
    CommandSpec {
        name: c"rsem.available",
        handler: available,
        flags: c"readonly fast",
        acl: c"read fast",
        summary: c"Returns the permits available now (leases that ended count as returned)",
        complexity: c"O(log N) where N is the number of leased permits",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rsem.leasetime",
        handler: lease_time,
        flags: c"readonly fast",
        acl: c"read fast",
        summary: c"Returns the ms left of a leased permit's lease (Redisson's getLeaseTime), -1 for a permit without an end, nil when it is not leased",
        complexity: c"O(1)",
        arity: 3,
        key: KeyAccess::ReadOnly,
        args: &[KEY, ArgSpec::new(c"id", String)],
    },
    CommandSpec {
        name: c"rsem.drain",
        handler: drain,
        flags: c"write",
        // Not @fast: the count it leaves at 0 opens a latch on the key, whose awaiters all pass.
        acl: c"write slow",
        summary: c"Takes every available permit and returns how many",
        complexity: c"O(1), plus the expired leases returned first and the latch awaiters released",
        arity: 2,
        key: KeyAccess::Update,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rsem.info",
        handler: info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a semaphore's available permits, leased permits with their remaining lease, TTL and waiting queue",
        complexity: c"O(N) where N is COUNT (default 1000) plus the expired leases not yet reclaimed",
        arity: -2,
        key: KeyAccess::ReadOnly,
        args: &[KEY, ArgSpec::option(c"count", Integer, c"COUNT")],
    },
];

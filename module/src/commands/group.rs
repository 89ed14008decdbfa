//! `RMLOCK.*`: Redisson 4.x's grouped MultiLock (`RedissonFasterMultiLock`'s layout: one hash
//! per group, three fields per locked value).

use super::acquire::{self, serve_first};
use super::{BLOCK, KEY, LEASE, OWNER, SESSION};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::group::{self, GroupAcquire};
use crate::core::stats::ObjectKind::GroupLock;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::settle::Change;
use crate::wait;

/// `RMLOCK.ACQUIRE group owner lease_ms FIELDS n F1 .. Fn [BLOCK timeout_ms]
/// [SESSION s [QUEUE request timeout_ms]]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let parsed = group::parse_acquire(&argv)?;
    let claimed = wait::claims_any(ctx.db(), argv[1], &parsed.fields);
    // Read before: what it takes is held until this plus its lease at least.
    let now = ctx.now_ms();
    let lease_ms = parsed.lease_ms;
    let a = GroupAcquire {
        owner: argv[2],
        args: parsed,
        claimed,
    };
    let answer = acquire::acquire(ctx, argv.str(1), Some(argv.str(2)), &a, serve_first);
    // A grant is not followed by serving, which reads when the next lease ends: tell the
    // group's queue, if it has one, that one may end sooner now. (A value a waiter wants is
    // taken outside serving only by re-entry, which extends its lease, and a waiter joining a
    // value's list later marks it: this keeps the bound true whatever takes values.)
    wait::taken(ctx.db(), argv[1], now.saturating_add(lease_ms));
    answer
}

/// `RMLOCK.RELEASE group owner lease_ms FIELDS n F1 .. Fn`
pub fn release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (lease_ms, fields) = group::parse_owned(&argv, "rmlock.release")?;
    let mut keys = RedisKeys::command(ctx, GroupLock, argv.str(1), &[argv.str(2)]);
    let r = group::release(&keys, argv[2], lease_ms, &fields)?;
    if r.freed > 0 {
        // Serving the group's queue (when the command settles) looks at these values'
        // waiters only. Every field is named: one still held costs a failed try at most.
        wait::freed(ctx.db(), argv[1], &fields);
    }
    if !r.decision.writes.is_empty() {
        let change = match (r.freed, r.none_left) {
            (0, _) => Change::Wrote,
            (_, true) => Change::Released {
                owner: argv.str(2),
                exclusive: true,
            },
            // Some values freed, others still held by the owner: their waiters are served.
            (_, false) => Change::Freed {
                counted: true,
                announce: false,
            },
        };
        keys.apply(&r.decision, change)?;
    }
    Ok(Answer::Reply(r.decision.reply.unwrap_or_default()))
}

/// `RMLOCK.RENEW group owner lease_ms FIELDS n F1 .. Fn`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let (lease_ms, fields) = group::parse_owned(&argv, "rmlock.renew")?;
    let mut keys = RedisKeys::command(ctx, GroupLock, argv.str(1), &[argv.str(2)]);
    let d = group::renew(&keys, argv[2], lease_ms, &fields)?;
    if d.reply == Some(Reply::Int(1)) {
        keys.apply(&d, Change::Renewed { own_lease: None })?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RMLOCK.FORCERELEASE group FIELDS n F1 .. Fn`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let fields = group::parse_unowned(&argv, "rmlock.forcerelease")?;
    let mut keys = RedisKeys::command(ctx, GroupLock, args.get(1), &[]);
    let d = group::force_release(&keys, &fields)?;
    if !d.writes.is_empty() {
        wait::freed(ctx.db(), argv[1], &fields);
        keys.apply(&d, Change::ForceReleased)?;
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RMLOCK.INFO group FIELDS n F1 .. Fn`
pub fn info(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let fields = group::parse_unowned(&argv, "rmlock.info")?;
    let keys = RedisKeys::read(ctx, args.get(1));
    Ok(Answer::Reply(group::info(&keys, &fields)?))
}

/// `FIELDS n F1 .. Fn`
const FIELDS: ArgSpec = ArgSpec {
    subargs: &[
        ArgSpec::new(c"n", Integer),
        ArgSpec {
            multiple: true,
            ..ArgSpec::new(c"field", String)
        },
    ],
    token: Some(c"FIELDS"),
    ..ArgSpec::new(c"fields", Block)
};

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rmlock.acquire",
        handler: acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Acquires every value of a grouped MultiLock or none (Redisson 4.x FasterMultiLock layout); with BLOCK waits in a FIFO queue on the server",
        complexity: c"O(N) where N is the number of fields; with waiters queued on the group, plus O(log W) per value freed or handed on (W waiters) and O(F) to read the group hash's F fields",
        arity: -7,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE, FIELDS, BLOCK, SESSION],
    },
    CommandSpec {
        name: c"rmlock.release",
        handler: release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Releases one hold of every value of a grouped MultiLock (or nothing when one is not the owner's); freed values are published and handed to waiters",
        complexity: c"O(N) where N is the number of fields; with waiters queued on the group, plus O(log W) per value freed or handed on (W waiters) and O(F) to read the group hash's F fields",
        arity: -7,
        key: KeyAccess::Delete,
        args: &[KEY, OWNER, LEASE, FIELDS],
    },
    CommandSpec {
        name: c"rmlock.renew",
        handler: renew,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Extends the lease of every value of a grouped MultiLock held by owner",
        complexity: c"O(N) where N is the number of fields",
        arity: -7,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE, FIELDS],
    },
    CommandSpec {
        name: c"rmlock.forcerelease",
        handler: force_release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Deletes values of a grouped MultiLock whoever holds them, publishes, and hands them to waiters",
        complexity: c"O(N) where N is the number of fields; with waiters queued on the group, plus O(log W) per value freed or handed on (W waiters) and O(F) to read the group hash's F fields",
        arity: -5,
        key: KeyAccess::Delete,
        args: &[KEY, FIELDS],
    },
    CommandSpec {
        name: c"rmlock.info",
        handler: info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows the holder, hold count and lease end of values of a grouped MultiLock",
        complexity: c"O(N) where N is the number of fields",
        arity: -5,
        key: KeyAccess::ReadOnly,
        args: &[KEY, FIELDS],
    },
];

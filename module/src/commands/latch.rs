//! `RLATCH.*`: the count-down latch (Redisson's RCountDownLatch layout).

use super::acquire::{session_of, wait_or_nil};
use super::{BLOCK, KEY, SESSION};
use crate::core::args::WaitMode;
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::latch::{self, LatchRequest};
use crate::core::stats::ObjectKind::Latch;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::keys::RedisKeys;
use crate::settle::{self, Change};
use crate::wait::{self, serve_first};
use std::rc::Rc;

/// `RLATCH.TRYSETCOUNT key n`
pub fn try_set_count(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let n = latch::parse_try_set(&args.bytes())?;
    let mut keys = RedisKeys::command(ctx, Latch, args.get(1), &[]);
    // Waiters of a latch something just opened (a DEL seen, not yet served) pass before it
    // closes again.
    serve_first(&mut keys);
    let d = latch::try_set(&keys, n)?;
    // The count is a semaphore's permits too: semaphore waiters on the same key take them
    // in this step, as after any other write to it.
    let change = match d.writes.is_empty() {
        true => Change::Wrote,
        false => Change::Freed {
            counted: false,
            announce: false,
        },
    };
    keys.apply(&d, change)?;
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RLATCH.COUNTDOWN key`
pub fn count_down(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    latch::parse_key(&args.bytes(), "rlatch.countdown")?;
    let mut keys = RedisKeys::command(ctx, Latch, args.get(1), &[]);
    let (d, opened) = latch::count_down(&keys)?;
    // Opened: every waiter passes, in this step.
    let change = match opened {
        true => Change::Freed {
            counted: true,
            announce: false,
        },
        false => Change::Wrote,
    };
    keys.apply(&d, change)?;
    if opened && wait::total() > 0 {
        keys.leave_open();
    }
    Ok(Answer::Reply(d.reply.unwrap_or_default()))
}

/// `RLATCH.AWAIT key [BLOCK timeout_ms] [SESSION s [QUEUE request timeout_ms]]`
pub fn await_open(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let argv = args.bytes();
    let w = latch::parse_await(&argv)?;
    w.check_deadline(ctx.now_ms())?;
    let session = session_of(ctx, &w)?;
    let keys = RedisKeys::read(ctx, args.get(1));
    if latch::is_open(&keys)? {
        // Passing takes nothing: nothing is written, but it counts as a grant.
        let passed = Change::Took {
            reentry: false,
            watch: None,
            own_lease: None,
            hold: None,
        };
        settle::mark(args.get(1), Latch, passed, false);
        return Ok(Answer::Reply(Reply::Int(1)));
    }
    // A replica never serves queues (its data changes by replication only): a wait there
    // would only end at its deadline.
    let waits = match w.wait {
        WaitMode::Block(_) => ctx.may_block(),
        WaitMode::Queue { .. } => true,
        WaitMode::No => false,
    };
    if waits && ctx.is_replica() {
        return Err(CmdError::WaitOnReplica);
    }
    wait_or_nil(ctx, &keys, &w, session, Rc::new(LatchRequest))
}

/// `RLATCH.COUNT key`
pub fn count(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    latch::parse_key(&args.bytes(), "rlatch.count")?;
    let keys = RedisKeys::read(ctx, args.get(1));
    Ok(Answer::Reply(Reply::Int(latch::count(&keys)?)))
}

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rlatch.trysetcount",
        handler: try_set_count,
        flags: c"write deny-oom",
        // Not @fast: the count is a semaphore's permits too, and serves its waiters.
        acl: c"write slow",
        summary: c"Sets a count-down latch's count if it is open (Redisson RCountDownLatch layout)",
        complexity: c"O(1), plus the semaphore waiters on the key granted",
        arity: 3,
        key: KeyAccess::Update,
        args: &[KEY, ArgSpec::new(c"count", Integer)],
    },
    CommandSpec {
        name: c"rlatch.countdown",
        handler: count_down,
        flags: c"write",
        acl: c"write slow",
        summary: c"Counts a latch down; at zero deletes it, publishes and releases every waiter",
        complexity: c"O(1), plus the waiters released",
        arity: 2,
        key: KeyAccess::Delete,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rlatch.await",
        handler: await_open,
        flags: c"readonly blocking",
        acl: c"read slow blocking",
        summary: c"Returns 1 when a latch is open; with BLOCK waits on the server until it opens",
        complexity: c"O(1)",
        arity: -2,
        key: KeyAccess::ReadOnly,
        args: &[KEY, BLOCK, SESSION],
    },
    CommandSpec {
        name: c"rlatch.count",
        handler: count,
        flags: c"readonly fast",
        acl: c"read fast",
        summary: c"Returns a latch's count (0 when open)",
        complexity: c"O(1)",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
];

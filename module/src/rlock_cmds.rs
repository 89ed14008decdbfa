//! `RLOCK.*`: the exclusive reentrant lock (Redisson RLock layout). Each handler parses, reads
//! the key, asks the core what to do, and performs the writes (replicated as native commands).

use crate::core::error::CmdError;
use crate::core::lock::{self, Acquire, Release};
use crate::core::parse::{self, deadline};
use crate::core::queue::LockId;
use crate::core::stats;
use crate::entry::Reply;
use crate::ffi::{Args, Ctx, Key, KeyKind, OwnedStr};
use crate::waiters::{self, free_lock, next_token, view, write_hold};
use redis_module::raw;

/// `RLOCK.ACQUIRE key owner lease_ms [BLOCK timeout_ms] [FENCE]`
pub fn acquire(ctx: Ctx, args: &Args) -> Result<Reply, CmdError> {
    let req = parse::acquire(&args.bytes())?;
    let now = ctx.now_ms();
    let at = deadline(now, req.lease_ms, "lease_ms")?;
    if let Some(ms) = req.block_ms {
        deadline(now, ms, "timeout")?;
    }
    let (name, owner) = (args.get(1), args.get(2));
    let key = Key::write(ctx, name);
    loop {
        let queued = waiters::is_queued(ctx.db(), name.bytes());
        let (count, counter) = match lock::acquire(view(&key, owner), queued)? {
            Acquire::Grant => (1, &stats::ACQUIRED),
            Acquire::Reenter { count } => (count, &stats::REENTRIES),
            Acquire::ServeQueueFirst => {
                // Freed (expired or deleted) a moment ago and not yet handed off: the queue is
                // served first, then this caller is decided against the new state.
                waiters::hand_off(ctx, &key, name, &LockId::new(ctx.db(), name.bytes()));
                continue;
            }
            Acquire::Busy => {
                let may_block = ctx.flags() & raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING == 0;
                return match req.block_ms {
                    // Inside MULTI, Lua or RM_Call a wait degrades to one attempt, as BLPOP's.
                    Some(ms) if may_block => {
                        let id = LockId::new(ctx.db(), name.bytes());
                        waiters::park(
                            ctx,
                            &id,
                            owner.bytes(),
                            req.lease_ms,
                            req.fence,
                            ms,
                            key.abs_expire(),
                        );
                        Ok(Reply::Sent)
                    }
                    _ => {
                        stats::BUSY.incr();
                        Ok(Reply::Null)
                    }
                };
            }
        };
        // The token comes first: if its key is unusable, nothing has been written yet.
        let token = if req.fence {
            Some(next_token(ctx, name.bytes())?)
        } else {
            None
        };
        write_hold(ctx, &key, name, owner, count, at);
        counter.incr();
        return Ok(Reply::Int(token.unwrap_or(count)));
    }
}

/// `RLOCK.RELEASE key owner`
pub fn release(ctx: Ctx, args: &Args) -> Result<Reply, CmdError> {
    parse::release(&args.bytes())?;
    let (name, owner) = (args.get(1), args.get(2));
    let key = Key::write(ctx, name);
    match lock::release(view(&key, owner))? {
        Release::Partial { remaining } => {
            // A partial release keeps the TTL (the contract; Redisson re-arms it client-side).
            key.hash_set_int(owner, remaining);
            ctx.replicate(
                c"HSET",
                &[
                    name.bytes(),
                    owner.bytes(),
                    itoa::Buffer::new().format(remaining).as_bytes(),
                ],
                false,
            );
            ctx.notify(raw::REDISMODULE_NOTIFY_HASH, c"hincrby", name);
            Ok(Reply::Int(remaining))
        }
        Release::Full => {
            stats::RELEASES.incr();
            free_lock(ctx, &key, name);
            Ok(Reply::Int(0))
        }
    }
}

/// `RLOCK.RENEW key owner lease_ms`
pub fn renew(ctx: Ctx, args: &Args) -> Result<Reply, CmdError> {
    let req = parse::renew(&args.bytes())?;
    let at = deadline(ctx.now_ms(), req.lease_ms, "lease_ms")?;
    let (name, owner) = (args.get(1), args.get(2));
    let key = Key::write(ctx, name);
    if !lock::renew(view(&key, owner))? {
        return Ok(Reply::Int(0));
    }
    key.set_abs_expire(at);
    ctx.replicate(
        c"PEXPIREAT",
        &[name.bytes(), itoa::Buffer::new().format(at).as_bytes()],
        false,
    );
    ctx.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", name);
    stats::RENEWALS.incr();
    Ok(Reply::Int(1))
}

/// `RLOCK.FORCERELEASE key`
pub fn force_release(ctx: Ctx, args: &Args) -> Result<Reply, CmdError> {
    parse::force_release(&args.bytes())?;
    let name = args.get(1);
    let key = Key::write(ctx, name);
    let kind = match key.kind() {
        KeyKind::Empty => lock::View::Free,
        KeyKind::Hash => lock::View::Hash { mine: None },
        KeyKind::Other => lock::View::WrongType,
    };
    if !lock::force_release(kind)? {
        return Ok(Reply::Int(0));
    }
    stats::FORCE_RELEASES.incr();
    free_lock(ctx, &key, name);
    Ok(Reply::Int(1))
}

/// `RLOCK.INFO key`: owner, holds, ttl_ms, token, waiters, queue.
pub fn info(ctx: Ctx, args: &Args) -> Result<Reply, CmdError> {
    parse::info(&args.bytes())?;
    let name = args.get(1);
    let key = Key::read(ctx, name);
    let (owner, holds, ttl_ms) = match key.kind() {
        KeyKind::Other => return Err(CmdError::WrongType),
        KeyKind::Empty => (None, 0, -2),
        KeyKind::Hash => {
            // Redisson's layout has one field; report the first one found.
            let first = ctx.hash_fields(name).into_iter().next();
            let holds = first
                .as_ref()
                .and_then(|(_, v)| parse::parse_i64(v))
                .unwrap_or(0);
            let ttl = key.abs_expire().map_or(-1, |at| (at - ctx.now_ms()).max(0));
            (first.map(|(f, _)| f), holds, ttl)
        }
    };
    drop(key);
    let token_key = OwnedStr::new(&crate::core::names::prefixed(
        crate::core::names::FENCE_TOKEN,
        name.bytes(),
    ));
    let token = ctx
        .get_string(token_key.get())
        .and_then(|v| parse::parse_i64(&v));
    let queue = waiters::queued_owners(ctx.db(), name.bytes());

    ctx.reply_map(6);
    ctx.reply_bulk(b"owner");
    match owner {
        Some(o) => ctx.reply_bulk(&o),
        None => ctx.reply_null(),
    }
    ctx.reply_bulk(b"holds");
    ctx.reply_int(holds);
    ctx.reply_bulk(b"ttl_ms");
    ctx.reply_int(ttl_ms);
    ctx.reply_bulk(b"token");
    match token {
        Some(t) => ctx.reply_int(t),
        None => ctx.reply_null(),
    }
    ctx.reply_bulk(b"waiters");
    ctx.reply_int(queue.len() as i64);
    ctx.reply_bulk(b"queue");
    ctx.reply_array(queue.len());
    for o in &queue {
        ctx.reply_bulk(o);
    }
    Ok(Reply::Sent)
}

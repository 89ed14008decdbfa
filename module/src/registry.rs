//! Command table: names, flags, key positions, and the `COMMAND DOCS` / `COMMAND INFO` entries.
//!
//! Commands are registered with raw `RM_CreateCommand` (the crate's `#[command]` macro and ACL
//! categories stop the module loading on Redis 7.0), then described with `RM_SetCommandInfo`,
//! which 7.0 has: this gives redis-cli hints, COMMAND DOCS, real arity and key specs.

use crate::entry::{self, Handler};
use crate::ffi::{self, Ctx, RedisModuleCtx, RedisModuleString};
use crate::rlock_cmds;
use redis_module::raw;
use std::ffi::{c_int, CStr};
use std::mem::{size_of, zeroed};
use std::ptr;

struct Arg {
    name: &'static CStr,
    kind: raw::RedisModuleCommandArgType,
    /// Option word for tokens (`BLOCK`, `FENCE`).
    token: Option<&'static CStr>,
    optional: bool,
}

const fn arg(name: &'static CStr, kind: raw::RedisModuleCommandArgType) -> Arg {
    Arg {
        name,
        kind,
        token: None,
        optional: false,
    }
}

const KEY: raw::RedisModuleCommandArgType = raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY;
const STRING: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING;
const INTEGER: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER;
const TOKEN: raw::RedisModuleCommandArgType =
    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN;

struct Spec {
    name: &'static CStr,
    func: ffi::CmdFn,
    /// Acquires can grow memory (deny-oom); releases never refuse, so a lock can always be
    /// freed on a full server; introspection is read-only.
    flags: &'static CStr,
    summary: &'static CStr,
    complexity: &'static CStr,
    arity: c_int,
    key_flags: u32,
    args: &'static [Arg],
}

macro_rules! entry_fn {
    ($name:ident, $handler:path) => {
        unsafe extern "C" fn $name(
            ctx: *mut RedisModuleCtx,
            argv: *mut *mut RedisModuleString,
            argc: c_int,
        ) -> c_int {
            // SAFETY: Redis passes argc valid strings.
            let args = unsafe { ffi::argv(argv, argc) };
            entry::command(Ctx(ctx), &args, $handler as Handler);
            raw::REDISMODULE_OK as c_int
        }
    };
}

entry_fn!(acquire, rlock_cmds::acquire);
entry_fn!(release, rlock_cmds::release);
entry_fn!(renew, rlock_cmds::renew);
entry_fn!(force_release, rlock_cmds::force_release);
entry_fn!(info, rlock_cmds::info);

const RW_UPDATE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE | raw::REDISMODULE_CMD_KEY_ACCESS;
const RW_DELETE: u32 =
    raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE | raw::REDISMODULE_CMD_KEY_ACCESS;
const RO: u32 = raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS;

static COMMANDS: &[Spec] = &[
    Spec {
        name: c"rlock.acquire",
        func: acquire,
        flags: c"write deny-oom blocking",
        summary: c"Acquires a reentrant lock (Redisson RLock layout); with BLOCK waits in a FIFO queue on the server",
        complexity: c"O(1)",
        arity: -4,
        key_flags: RW_UPDATE,
        args: &[
            arg(c"key", KEY),
            arg(c"owner", STRING),
            arg(c"lease_ms", INTEGER),
            Arg { name: c"timeout_ms", kind: INTEGER, token: Some(c"BLOCK"), optional: true },
            Arg { name: c"fence", kind: TOKEN, token: Some(c"FENCE"), optional: true },
        ],
    },
    Spec {
        name: c"rlock.release",
        func: release,
        flags: c"write fast",
        summary: c"Releases one hold of a lock; the last hold deletes it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 3,
        key_flags: RW_DELETE,
        args: &[arg(c"key", KEY), arg(c"owner", STRING)],
    },
    Spec {
        name: c"rlock.renew",
        func: renew,
        flags: c"write fast",
        summary: c"Extends the lease of a lock held by owner",
        complexity: c"O(1)",
        arity: 4,
        key_flags: RW_UPDATE,
        args: &[arg(c"key", KEY), arg(c"owner", STRING), arg(c"lease_ms", INTEGER)],
    },
    Spec {
        name: c"rlock.forcerelease",
        func: force_release,
        flags: c"write fast",
        summary: c"Deletes a lock whoever holds it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 2,
        key_flags: RW_DELETE,
        args: &[arg(c"key", KEY)],
    },
    Spec {
        name: c"rlock.info",
        func: info,
        flags: c"readonly fast",
        summary: c"Shows a lock's owner, holds, TTL, fencing token and waiting queue",
        complexity: c"O(N) where N is the number of waiters",
        arity: 2,
        key_flags: RO,
        args: &[arg(c"key", KEY)],
    },
];

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

/// Register every command; `Err` names the one that failed.
pub fn register(ctx: Ctx) -> Result<(), String> {
    for spec in COMMANDS {
        // SAFETY: static C strings; the function is an extern "C" entry that catches panics.
        let ok = unsafe {
            ffi_create(ctx, spec) == raw::REDISMODULE_OK as c_int
                && describe(ctx, spec) == raw::REDISMODULE_OK as c_int
        };
        if !ok {
            return Err(format!(
                "failed to register {}",
                spec.name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

unsafe fn ffi_create(ctx: Ctx, spec: &Spec) -> c_int {
    raw::RedisModule_CreateCommand.unwrap()(
        ctx.0,
        spec.name.as_ptr(),
        Some(spec.func),
        spec.flags.as_ptr(),
        1,
        1,
        1,
    )
}

/// Attach docs, arity and the key spec (key at position 1). Redis copies everything.
unsafe fn describe(ctx: Ctx, spec: &Spec) -> c_int {
    let mut key_spec: raw::RedisModuleCommandKeySpec = zeroed();
    key_spec.flags = spec.key_flags as u64;
    key_spec.begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    key_spec.bs.index.pos = 1;
    key_spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    key_spec.fk.range.lastkey = 0;
    key_spec.fk.range.keystep = 1;
    key_spec.fk.range.limit = 0;
    let mut key_specs = [key_spec, zeroed()];

    let mut args: Vec<raw::RedisModuleCommandArg> = spec
        .args
        .iter()
        .map(|a| {
            let mut r: raw::RedisModuleCommandArg = zeroed();
            r.name = a.name.as_ptr();
            r.type_ = a.kind;
            r.key_spec_index = if a.kind == KEY { 0 } else { -1 };
            r.token = a.token.map_or(ptr::null(), CStr::as_ptr);
            r.flags = if a.optional {
                raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
            } else {
                0
            };
            r
        })
        .collect();
    args.push(zeroed());

    let mut info: raw::RedisModuleCommandInfo = zeroed();
    info.version = &INFO_VERSION;
    info.summary = spec.summary.as_ptr();
    info.complexity = spec.complexity.as_ptr();
    info.since = c"0.1.0".as_ptr();
    info.arity = spec.arity;
    info.key_specs = key_specs.as_mut_ptr();
    info.args = args.as_mut_ptr();
    let cmd = raw::RedisModule_GetCommand.unwrap()(ctx.0, spec.name.as_ptr());
    if cmd.is_null() {
        return raw::REDISMODULE_ERR as c_int;
    }
    raw::RedisModule_SetCommandInfo.unwrap()(cmd, &mut info)
}

//! The command table: registering commands (`RM_CreateCommand`), describing them for
//! `COMMAND DOCS` / `COMMAND INFO` (`RM_SetCommandInfo`, which Redis 7.0 has), their ACL
//! categories where the server supports them, and the entry trampolines.
//!
//! Each command enters through its own trampoline, `entry::<I>` for its index `I` in the table,
//! so dispatch costs nothing (Redis passes no user data to a command function).

use super::boundary::guarded;
use super::{Args, Ctx, RStr, RedisModuleCtx, RedisModuleString};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::stats;
use redis_module::raw;
use std::ffi::{c_int, CStr};
use std::mem::{size_of, zeroed};
use std::ptr;
use std::sync::OnceLock;

/// What a command handler produced.
pub enum Answer {
    Reply(Reply),
    /// The client was parked; it gets its reply later.
    Parked,
    /// The reply is read from the command's key once everything its writes call for was done
    /// (the count a semaphore has left after its waiters took theirs).
    ReadAfter(fn(Ctx, RStr) -> Result<Reply, CmdError>),
}

pub type Handler = fn(Ctx, &Args) -> Result<Answer, CmdError>;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    Key,
    String,
    Integer,
    /// An option word without a value (`FENCE`).
    Token,
    /// One of the sub-arguments (`READ|WRITE`).
    OneOf,
    /// A group of sub-arguments (`SESSION name [QUEUE ...]`).
    Block,
}

pub struct ArgSpec {
    pub name: &'static CStr,
    pub kind: ArgKind,
    /// The option word that introduces it (`BLOCK`).
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub multiple: bool,
    pub subargs: &'static [ArgSpec],
}

impl ArgSpec {
    pub const fn new(name: &'static CStr, kind: ArgKind) -> ArgSpec {
        ArgSpec {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
            subargs: &[],
        }
    }

    /// A bare option word, as one choice of a [`ArgKind::OneOf`].
    pub const fn word(name: &'static CStr, token: &'static CStr) -> ArgSpec {
        ArgSpec {
            token: Some(token),
            ..ArgSpec::new(name, ArgKind::Token)
        }
    }

    /// An optional `TOKEN value` (or a bare `TOKEN` for [`ArgKind::Token`]).
    pub const fn option(name: &'static CStr, kind: ArgKind, token: &'static CStr) -> ArgSpec {
        ArgSpec {
            token: Some(token),
            optional: true,
            ..ArgSpec::new(name, kind)
        }
    }
}

/// How a command uses its key (argv[1]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyAccess {
    ReadOnly,
    Update,
    Delete,
    /// The command names no key (session commands): any node serves it.
    None,
}

pub struct CommandSpec {
    pub name: &'static CStr,
    pub handler: Handler,
    /// `RM_CreateCommand` flags: acquires can grow memory (`deny-oom`); releases never refuse,
    /// so an object can always be freed on a full server; introspection is read-only.
    pub flags: &'static CStr,
    /// ACL categories (Redis 7.2+), as a native command of the same shape has them.
    pub acl: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub arity: c_int,
    pub key: KeyAccess,
    pub args: &'static [ArgSpec],
}

static TABLE: OnceLock<Vec<&'static CommandSpec>> = OnceLock::new();

/// What the server supports of ACL categories for module commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclSupport {
    /// `RM_SetCommandACLCategories` (Redis 7.2+, Valkey).
    pub categories: bool,
    /// The module's own `@rlock` category (`RM_AddACLCategory`, Redis 7.4+).
    pub own_category: bool,
}

/// Register every command of `tables`, in order; `Err` names the one that failed.
pub fn register(ctx: Ctx, tables: &[&'static [CommandSpec]]) -> Result<AclSupport, String> {
    let table: Vec<&'static CommandSpec> = tables.iter().flat_map(|t| t.iter()).collect();
    if table.len() > ENTRIES.len() {
        return Err(format!("more than {} commands", ENTRIES.len()));
    }
    let table = TABLE.get_or_init(|| table);
    let mut acl = AclSupport {
        categories: has!(RedisModule_SetCommandACLCategories),
        own_category: false,
    };
    if has!(RedisModule_AddACLCategory) {
        // SAFETY: called from the load function with its ctx, as the API requires.
        acl.own_category = unsafe {
            api!(RedisModule_AddACLCategory)(ctx.0, c"rlock".as_ptr())
                == raw::REDISMODULE_OK as c_int
        };
    }
    for (i, spec) in table.iter().enumerate() {
        let name = spec.name.to_string_lossy();
        let key = if spec.key == KeyAccess::None { 0 } else { 1 };
        // SAFETY: static C strings; the function is an extern "C" trampoline that catches
        // panics.
        let created = unsafe {
            api!(RedisModule_CreateCommand)(
                ctx.0,
                spec.name.as_ptr(),
                Some(ENTRIES[i]),
                spec.flags.as_ptr(),
                key,
                key,
                key,
            )
        };
        if created != raw::REDISMODULE_OK as c_int {
            return Err(format!("failed to register {name}"));
        }
        // SAFETY: the name was just registered.
        let cmd = unsafe { api!(RedisModule_GetCommand)(ctx.0, spec.name.as_ptr()) };
        if cmd.is_null() || describe(cmd, spec) != raw::REDISMODULE_OK as c_int {
            return Err(format!("failed to describe {name}"));
        }
        if acl.categories {
            let mut cats = spec.acl.to_bytes().to_vec();
            if acl.own_category {
                cats.extend_from_slice(b" rlock");
            }
            let cats = std::ffi::CString::new(cats).unwrap_or_default();
            // SAFETY: the API exists (probed above); a valid command and C string.
            let ok = unsafe { api!(RedisModule_SetCommandACLCategories)(cmd, cats.as_ptr()) };
            if ok != raw::REDISMODULE_OK as c_int {
                return Err(format!("failed to set the ACL categories of {name}"));
            }
        }
    }
    Ok(acl)
}

static INFO_VERSION: raw::RedisModuleCommandInfoVersion = raw::RedisModuleCommandInfoVersion {
    version: 1,
    sizeof_historyentry: size_of::<raw::RedisModuleCommandHistoryEntry>(),
    sizeof_keyspec: size_of::<raw::RedisModuleCommandKeySpec>(),
    sizeof_arg: size_of::<raw::RedisModuleCommandArg>(),
};

fn arg_type(kind: ArgKind) -> raw::RedisModuleCommandArgType {
    match kind {
        ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
        ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
        ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
        ArgKind::Token => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
        ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        ArgKind::Block => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
    }
}

/// The raw, zero-terminated argument array for `args`; nested arrays are kept in `arena` so
/// every pointer stays valid until `RM_SetCommandInfo` has copied them.
fn raw_args(
    args: &[ArgSpec],
    arena: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out = Vec::with_capacity(args.len() + 1);
    for a in args {
        // SAFETY: the struct is plain C data; all-zero is its documented "unset" state.
        let mut r: raw::RedisModuleCommandArg = unsafe { zeroed() };
        r.name = a.name.as_ptr();
        r.type_ = arg_type(a.kind);
        r.key_spec_index = if a.kind == ArgKind::Key { 0 } else { -1 };
        r.token = a.token.map_or(ptr::null(), CStr::as_ptr);
        let mut flags = 0;
        if a.optional {
            flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
        }
        if a.multiple {
            flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
        }
        r.flags = flags as c_int;
        if !a.subargs.is_empty() {
            r.subargs = raw_args(a.subargs, arena);
        }
        out.push(r);
    }
    // SAFETY: as above; the zeroed entry terminates the array.
    out.push(unsafe { zeroed() });
    arena.push(out);
    arena.last_mut().expect("just pushed").as_mut_ptr()
}

/// Attach docs, arity and the key spec (key at position 1). Redis copies everything.
fn describe(cmd: *mut raw::RedisModuleCommand, spec: &CommandSpec) -> c_int {
    let access = match spec.key {
        KeyAccess::ReadOnly => raw::REDISMODULE_CMD_KEY_RO,
        KeyAccess::Update => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE,
        KeyAccess::Delete => raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE,
        KeyAccess::None => 0,
    };
    // SAFETY: plain C structs, zero meaning "unset"; every pointer stored in them (static
    // strings, `key_specs`, `arena`) outlives the RM_SetCommandInfo call, which copies them.
    unsafe {
        let mut key_spec: raw::RedisModuleCommandKeySpec = zeroed();
        key_spec.flags = (access | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;
        key_spec.begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        key_spec.bs.index.pos = 1;
        key_spec.find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        key_spec.fk.range.lastkey = 0;
        key_spec.fk.range.keystep = 1;
        key_spec.fk.range.limit = 0;
        let mut key_specs = [key_spec, zeroed()];
        if spec.key == KeyAccess::None {
            key_specs = [zeroed(), zeroed()];
        }
        let mut arena = Vec::new();
        let args = raw_args(spec.args, &mut arena);

        let mut info: raw::RedisModuleCommandInfo = zeroed();
        info.version = &INFO_VERSION;
        info.summary = spec.summary.as_ptr();
        info.complexity = spec.complexity.as_ptr();
        info.since = c"0.1.0".as_ptr();
        info.arity = spec.arity;
        info.key_specs = key_specs.as_mut_ptr();
        info.args = args;
        api!(RedisModule_SetCommandInfo)(cmd, &mut info)
    }
}

/// What runs every handler (installed at load): it may replace the handler's result. Given the
/// command's key (argv[1]) when it has one.
pub type Around =
    fn(Ctx, Option<RStr>, &mut dyn FnMut() -> Result<Answer, CmdError>) -> Result<Answer, CmdError>;

static AROUND: OnceLock<Around> = OnceLock::new();

pub fn set_around(around: Around) {
    let _ = AROUND.set(around);
}

/// Run command `index` of the table and send its reply.
fn dispatch(index: usize, ctx: Ctx, args: &Args) {
    let spec = TABLE.get().and_then(|t| t.get(index).copied());
    let handler = spec.map(|s| s.handler);
    let key = spec
        .filter(|s| s.key != KeyAccess::None && args.0.len() > 1)
        .map(|_| args.get(1));
    // A panic was counted as an error by `guarded`.
    let Some(result) = handler.and_then(|h| {
        guarded(|| {
            let answer = match AROUND.get() {
                Some(around) => around(ctx, key, &mut || h(ctx, args)),
                None => h(ctx, args),
            };
            // Not a match on `(answer, key)`: building and taking apart that pair cost 26
            // instructions a command (callgrind).
            if let Ok(Answer::ReadAfter(read)) = answer {
                return match key {
                    Some(key) => read(ctx, key).map(Answer::Reply),
                    None => Err(CmdError::Internal),
                };
            }
            answer
        })
    }) else {
        ctx.reply_error(&CmdError::Internal.to_string());
        return;
    };
    match result {
        Ok(Answer::Reply(r)) => {
            ctx.reply(&r);
            // An integer (most replies) owns nothing: not dropped, it costs no call to the
            // reply's drop glue (28 instructions, callgrind).
            if matches!(r, Reply::Int(_)) {
                std::mem::forget(r);
            }
        }
        Ok(Answer::Parked) => {}
        Ok(Answer::ReadAfter(_)) => ctx.reply_error(&CmdError::Internal.to_string()),
        Err(e) => {
            stats::ERRORS.incr();
            ctx.reply_error(&e.to_string());
        }
    }
}

unsafe extern "C" fn entry<const I: usize>(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let args = if argv.is_null() || argc <= 0 {
        Args(&[])
    } else {
        // SAFETY: Redis passes argc valid strings, alive for the call.
        Args(unsafe { std::slice::from_raw_parts(argv, argc as usize) })
    };
    dispatch(I, Ctx(ctx), &args);
    raw::REDISMODULE_OK as c_int
}

type CmdFn = unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

macro_rules! entries {
    ($($i:literal)*) => { [$(entry::<$i> as CmdFn),*] };
}

/// One trampoline per table slot.
static ENTRIES: [CmdFn; 48] = entries!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23
    24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47
);

//! [`Ctx`]: a command, callback or timer context, and what the module asks of the server through
//! it: the clock, the selected database, replication, publishing, keyspace notifications, and
//! the few commands run through `RM_Call` (off the hot path, or where only Redis itself can do
//! it correctly).

use super::{IntStr, OwnedStr, RStr, RedisModuleCtx};
use redis_module::raw;
use std::ffi::{c_char, c_int, CStr};

/// Why [`Ctx::incr`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncrFailed {
    WrongType,
    /// The value is not an integer, or would leave the 64-bit range.
    NotInteger,
    /// Redis did not run the command (no reply); the reason in words.
    Refused(&'static str),
}

/// The errno values `RM_Call` sets when it refuses a command (Linux numbering; the module is
/// built for Linux, as the alarm's timerfd).
mod libc_errno {
    pub const EPERM: i32 = 1;
    pub const ENOSPC: i32 = 28;
    pub const ESPIPE: i32 = 29;
    pub const EROFS: i32 = 30;
    pub const ENETDOWN: i32 = 100;
}

/// A context, valid for the duration of the call that received it.
#[derive(Clone, Copy)]
pub struct Ctx(pub(crate) *mut RedisModuleCtx);

impl Ctx {
    pub fn now_ms(self) -> i64 {
        // SAFETY: plain clock read.
        unsafe { api!(RedisModule_Milliseconds)() }
    }

    pub fn flags(self) -> u32 {
        // SAFETY: valid ctx.
        unsafe { api!(RedisModule_GetContextFlags)(self.0) as u32 }
    }

    /// Inside MULTI, Lua or RM_Call a command must not block (it degrades to one attempt).
    pub fn may_block(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING == 0
    }

    pub fn is_cluster(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0
    }

    pub fn is_replica(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }

    pub fn db(self) -> i32 {
        // SAFETY: valid ctx with a client.
        unsafe { api!(RedisModule_GetSelectedDb)(self.0) }
    }

    pub fn select_db(self, db: i32) -> bool {
        // SAFETY: valid ctx with a client; fails cleanly for a db that does not exist.
        unsafe { api!(RedisModule_SelectDb)(self.0, db) == raw::REDISMODULE_OK as c_int }
    }

    /// The id of the context's client (0 when it has none).
    pub fn client_id(self) -> u64 {
        // SAFETY: valid ctx; returns 0 without a client.
        unsafe { api!(RedisModule_GetClientId)(self.0) }
    }

    /// Send a native command to replicas and the AOF (`replicas_only`: not the AOF, as Redis
    /// does for PUBLISH). Arguments go as binary-safe buffers. Whether anyone can receive it is
    /// the caller's policy (`propagation`).
    pub fn replicate(self, cmd: &CStr, args: &[&[u8]], replicas_only: bool) {
        let f = self.0;
        let cmd = cmd.as_ptr();
        let api = api!(RedisModule_Replicate);
        // SAFETY: RM_Replicate's 'b' format takes (char*, size_t) pairs, one per 'b'; 'A' means
        // "no AOF". The buffers outlive the call (Redis copies them).
        unsafe {
            let a = |i: usize| args[i].as_ptr().cast::<c_char>();
            let n = |i: usize| args[i].len();
            let fmt = |all: &'static CStr, no_aof: &'static CStr| {
                if replicas_only {
                    no_aof.as_ptr()
                } else {
                    all.as_ptr()
                }
            };
            match args.len() {
                1 => api(f, cmd, fmt(c"b", c"bA"), a(0), n(0)),
                2 => api(f, cmd, fmt(c"bb", c"bbA"), a(0), n(0), a(1), n(1)),
                3 => api(
                    f,
                    cmd,
                    fmt(c"bbb", c"bbbA"),
                    a(0),
                    n(0),
                    a(1),
                    n(1),
                    a(2),
                    n(2),
                ),
                4 => api(
                    f,
                    cmd,
                    fmt(c"bbbb", c"bbbbA"),
                    a(0),
                    n(0),
                    a(1),
                    n(1),
                    a(2),
                    n(2),
                    a(3),
                    n(3),
                ),
                _ => unreachable!("replicate called with an unsupported argument count"),
            };
        }
    }

    /// PUBLISH, or SPUBLISH semantics (the channel's shard) when `shard`.
    pub fn publish(self, channel: &[u8], message: i64, shard: bool) {
        let channel = OwnedStr::new(channel);
        let message = IntStr::new(message);
        // SAFETY: valid ctx and strings; both APIs exist in 7.0.
        unsafe {
            if shard {
                api!(RedisModule_PublishMessageShard)(self.0, channel.get().0, message.get().0);
            } else {
                api!(RedisModule_PublishMessage)(self.0, channel.get().0, message.get().0);
            }
        }
    }

    /// The classes of keyspace events the server's `notify-keyspace-events` enables.
    pub fn notify_flags(self) -> c_int {
        // SAFETY: plain read of the server's notification flags.
        unsafe { api!(RedisModule_GetNotifyKeyspaceEvents)() }
    }

    /// Raise a keyspace event for a write made through the low-level key API (which raises
    /// none), so keyspace listeners see what a native command would show.
    pub fn notify(self, class: c_int, event: &CStr, key: RStr) {
        // SAFETY: valid ctx and key string.
        unsafe { api!(RedisModule_NotifyKeyspaceEvent)(self.0, class, event.as_ptr(), key.0) };
    }

    /// An integer field of `INFO <section>`.
    pub fn info_int(self, section: &CStr, field: &CStr) -> Option<i64> {
        // SAFETY: valid ctx; the info data is freed once.
        unsafe {
            let info = api!(RedisModule_GetServerInfo)(self.0, section.as_ptr());
            if info.is_null() {
                return None;
            }
            let mut err: c_int = 0;
            let n = api!(RedisModule_ServerInfoGetFieldSigned)(info, field.as_ptr(), &mut err);
            api!(RedisModule_FreeServerInfo)(self.0, info);
            (err == 0).then_some(n)
        }
    }

    /// Whether the server pauses writes and their propagation now (`CLIENT PAUSE WRITE`,
    /// `FAILOVER`, a manual cluster failover, a slot migration's last step).
    pub fn avoid_replica_traffic(self) -> bool {
        // SAFETY: takes no arguments; reads the server's pause state on the main thread.
        unsafe { api!(RedisModule_AvoidReplicaTraffic)() != 0 }
    }

    /// A text field of `INFO <section>` (`None` when the server has no such field).
    pub fn info_text(self, section: &CStr, field: &CStr) -> Option<String> {
        // SAFETY: valid ctx; the field's C string belongs to the info data, so it is copied
        // before the data is freed, once.
        unsafe {
            let info = api!(RedisModule_GetServerInfo)(self.0, section.as_ptr());
            if info.is_null() {
                return None;
            }
            let p = api!(RedisModule_ServerInfoGetFieldC)(info, field.as_ptr());
            let text = (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned());
            api!(RedisModule_FreeServerInfo)(self.0, info);
            text
        }
    }

    /// The server's version, major and minor, from `INFO server`, and whether it is Valkey
    /// (whose own `valkey_version` is read: Valkey also reports a `redis_version`, 7.2.4).
    pub fn server_version(self) -> Option<(bool, (u32, u32))> {
        let version = |field: &CStr| {
            let text = self.info_text(c"server", field)?;
            let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next()??))
        };
        match version(c"valkey_version") {
            Some(v) => Some((true, v)),
            None => version(c"redis_version").map(|v| (false, v)),
        }
    }

    /// `CONFIG GET name`'s value.
    pub fn config_get(self, name: &CStr) -> Option<Vec<u8>> {
        let name = OwnedStr::new(name.to_bytes());
        // CONFIG GET replies [name, value].
        self.call_strings(c"CONFIG", Some(c"GET"), name.get())?
            .pop()
    }

    /// INCRBY `key` `by` through Redis itself (keeps a TTL, creates at 0, rejects non-integers
    /// and overflow) without propagating; the caller replicates.
    pub fn incr_by(self, key: &[u8], by: i64) -> Result<i64, IncrFailed> {
        let key = OwnedStr::new(key);
        // SAFETY: fmt "sl" takes one RedisModuleString and one long long; the reply is freed
        // below.
        unsafe {
            let reply = api!(RedisModule_Call)(
                self.0,
                c"INCRBY".as_ptr(),
                c"sl".as_ptr(),
                key.get().0,
                by as std::ffi::c_longlong,
            );
            if reply.is_null() {
                // No reply: Redis refused to run the command and says why in errno (module.c,
                // RM_Call), e.g. a key of a slot this node does not serve.
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                return Err(IncrFailed::Refused(match errno {
                    libc_errno::EPERM => "its key's cluster slot is not served by this node",
                    libc_errno::ENETDOWN => "the cluster is down",
                    libc_errno::EROFS => "the cluster is down and read-only",
                    libc_errno::ENOSPC => "the server is out of memory",
                    libc_errno::ESPIPE => "the server is not accepting writes",
                    _ => "the server refused the INCRBY",
                }));
            }
            let ty = api!(RedisModule_CallReplyType)(reply);
            let result = if ty == raw::REDISMODULE_REPLY_INTEGER as c_int {
                Ok(api!(RedisModule_CallReplyInteger)(reply))
            } else {
                let mut len = 0usize;
                let p = api!(RedisModule_CallReplyStringPtr)(reply, &mut len);
                let text = if p.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), len)
                };
                Err(if text.starts_with(b"WRONGTYPE") {
                    IncrFailed::WrongType
                } else {
                    IncrFailed::NotInteger
                })
            };
            api!(RedisModule_FreeCallReply)(reply);
            result
        }
    }

    /// Run a command (`cmd [sub] arg`) through Redis and collect its string reply (or the
    /// strings of an array reply). `None` for nil or an error reply. Off the hot path only.
    fn call_strings(self, cmd: &CStr, sub: Option<&CStr>, arg: RStr) -> Option<Vec<Vec<u8>>> {
        // SAFETY: fmt "s" takes one RedisModuleString, "cs" a C string then one; every reply
        // element is read while the reply is alive, and the reply is freed once.
        unsafe {
            let call = api!(RedisModule_Call);
            let reply = match sub {
                Some(sub) => call(self.0, cmd.as_ptr(), c"cs".as_ptr(), sub.as_ptr(), arg.0),
                None => call(self.0, cmd.as_ptr(), c"s".as_ptr(), arg.0),
            };
            if reply.is_null() {
                return None;
            }
            let read = |r: *mut raw::RedisModuleCallReply| {
                let mut len = 0usize;
                let p = api!(RedisModule_CallReplyStringPtr)(r, &mut len);
                if p.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec()
                }
            };
            let out = match api!(RedisModule_CallReplyType)(reply) as isize {
                raw::REDISMODULE_REPLY_STRING => Some(vec![read(reply)]),
                raw::REDISMODULE_REPLY_ARRAY => {
                    let n = api!(RedisModule_CallReplyLength)(reply);
                    Some(
                        (0..n)
                            .map(|i| read(api!(RedisModule_CallReplyArrayElement)(reply, i)))
                            .collect(),
                    )
                }
                _ => None,
            };
            api!(RedisModule_FreeCallReply)(reply);
            out
        }
    }

    /// Whether `key` is physically stored, even if logically expired. On Redis 7.0 a key whose
    /// time has passed reads as absent but is not deleted while clients are paused for writes
    /// (CLIENT PAUSE WRITE, FAILOVER); creating it then would trip Redis' own assertion. Only
    /// DEBUG OBJECT looks at the dictionary without expiring (RM_Call does not apply
    /// `enable-debug-command`, which guards client connections).
    pub fn key_stored(self, key: &[u8]) -> bool {
        let key = OwnedStr::new(key);
        // SAFETY: fmt "cs": a C string then a RedisModuleString; the reply is freed once.
        unsafe {
            let reply = api!(RedisModule_Call)(
                self.0,
                c"DEBUG".as_ptr(),
                c"cs".as_ptr(),
                c"OBJECT".as_ptr(),
                key.get().0,
            );
            if reply.is_null() {
                return false;
            }
            let stored =
                api!(RedisModule_CallReplyType)(reply) as isize != raw::REDISMODULE_REPLY_ERROR;
            api!(RedisModule_FreeCallReply)(reply);
            stored
        }
    }

    /// Whether this node serves `key`'s slot (always true outside a cluster). In cluster mode
    /// RM_Call refuses a key whose slot is elsewhere or migrating without the key, which is
    /// exactly "an object for this key must not be created here".
    pub fn serves_key(self, key: &[u8]) -> bool {
        if !self.is_cluster() {
            return true;
        }
        let key = OwnedStr::new(key);
        // SAFETY: fmt "s" takes one RedisModuleString; the reply is freed once.
        unsafe {
            let reply =
                api!(RedisModule_Call)(self.0, c"EXISTS".as_ptr(), c"s".as_ptr(), key.get().0);
            if reply.is_null() {
                return false;
            }
            api!(RedisModule_FreeCallReply)(reply);
            true
        }
    }

    /// Whether Redis would run a native command on all of `keys` here (cluster mode; `keys` share
    /// a slot): `EXISTS keys...` through `RM_Call`, which applies the cluster's routing rules
    /// (`getNodeByQuery`) with the calling client's `ASKING` flag. Refused when the slot is
    /// served elsewhere, or is migrating or importing and some of the keys are missing here
    /// (what Redis answers `TRYAGAIN` or `ASK`).
    pub fn all_local(self, keys: &[&[u8]]) -> bool {
        if !self.is_cluster() {
            return true;
        }
        let owned: Vec<OwnedStr> = keys.iter().map(|k| OwnedStr::new(k)).collect();
        let mut argv: Vec<*mut raw::RedisModuleString> = owned.iter().map(|k| k.get().0).collect();
        // SAFETY: fmt "v" takes an array of RedisModuleString pointers and its length; the
        // strings (`owned`) outlive the call; the reply is freed once.
        unsafe {
            let reply = api!(RedisModule_Call)(
                self.0,
                c"EXISTS".as_ptr(),
                c"v".as_ptr(),
                argv.as_mut_ptr(),
                argv.len(),
            );
            if reply.is_null() {
                return false;
            }
            api!(RedisModule_FreeCallReply)(reply);
            true
        }
    }

    /// `CLUSTER NODES` as Redis prints it (`None` if refused).
    pub fn cluster_nodes(self) -> Option<Vec<u8>> {
        let sub = OwnedStr::new(b"NODES");
        self.call_strings(c"CLUSTER", None, sub.get())?.pop()
    }

    /// `check` run on the calling client's ACL user: true when the context has no user (the
    /// module's own timers and events) or the server lacks the user APIs or `has_check` (the
    /// check's own API); false for a user that no longer exists.
    fn user_check(
        self,
        has_check: bool,
        check: impl FnOnce(*mut raw::RedisModuleUser) -> bool,
    ) -> bool {
        if !has!(RedisModule_GetCurrentUserName)
            || !has!(RedisModule_GetModuleUserFromUserName)
            || !has_check
        {
            return true;
        }
        // SAFETY: the APIs exist (checked above); the user name and user are freed once; a
        // NULL name means no user is attached (a context of the module's own).
        unsafe {
            let name = api!(RedisModule_GetCurrentUserName)(self.0);
            if name.is_null() {
                return true;
            }
            let user = api!(RedisModule_GetModuleUserFromUserName)(name);
            api!(RedisModule_FreeString)(self.0, name);
            if user.is_null() {
                return false;
            }
            let ok = check(user);
            api!(RedisModule_FreeModuleUser)(user);
            ok
        }
    }

    /// Whether the calling client's user may `flags` (access, update, delete) `key`.
    fn may_key(self, key: &[u8], flags: u32) -> bool {
        let key = OwnedStr::new(key);
        self.user_check(has!(RedisModule_ACLCheckKeyPermissions), |user| {
            // SAFETY: a live user (user_check) and a live string (owned above).
            unsafe {
                api!(RedisModule_ACLCheckKeyPermissions)(user, key.get().0, flags as c_int)
                    == raw::REDISMODULE_OK as c_int
            }
        })
    }

    /// Whether the calling client's user may write `key` (`delete`: delete it). True when the
    /// context has no user (the module's own timers and events) or the server has no ACL
    /// key checks for modules.
    pub fn may_write_key(self, key: &[u8], delete: bool) -> bool {
        let flags = if delete {
            raw::REDISMODULE_CMD_KEY_DELETE
        } else {
            raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE
        };
        self.may_key(key, flags)
    }

    /// Whether the calling client's user may read `key` (as [`Ctx::may_write_key`]), to name it
    /// in an error only to those who may see it.
    pub fn may_read_key(self, key: &[u8]) -> bool {
        self.may_key(key, raw::REDISMODULE_CMD_KEY_ACCESS)
    }

    /// Whether the calling client's user may run the command `argv` (name, subcommand, ...).
    /// True when the context has no user or the server has no such check.
    pub fn user_may_run(self, argv: &[&[u8]]) -> bool {
        let args: Vec<OwnedStr> = argv.iter().map(|a| OwnedStr::new(a)).collect();
        let mut raw_args: Vec<*mut raw::RedisModuleString> =
            args.iter().map(|a| a.get().0).collect();
        self.user_check(has!(RedisModule_ACLCheckCommandPermissions), |user| {
            // SAFETY: a live user (user_check); the argument strings live until this returns.
            unsafe {
                api!(RedisModule_ACLCheckCommandPermissions)(
                    user,
                    raw_args.as_mut_ptr(),
                    raw_args.len() as c_int,
                ) == raw::REDISMODULE_OK as c_int
            }
        })
    }

    /// The calling client's ACL user name; `None` when the context has no user (the module's
    /// own timers and events) or the server cannot tell (no such API).
    pub fn user_name(self) -> Option<Vec<u8>> {
        self.with_user_name(|name| name.map(<[u8]>::to_vec))
    }

    /// `f` of the calling client's ACL user name, borrowed (`None` as for [`Ctx::user_name`]):
    /// a comparison copies nothing (the copy and its free were 300 of the 900 instructions of
    /// checking a session's user, callgrind).
    pub fn with_user_name<R>(self, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        if !has!(RedisModule_GetCurrentUserName) {
            return f(None);
        }
        // SAFETY: the API exists (checked above); a NULL name means no user is attached. The
        // name is a new string of ours: its bytes are read while it lives, then it is freed,
        // once (`f` cannot keep them: they are borrowed for its call only).
        unsafe {
            let name = api!(RedisModule_GetCurrentUserName)(self.0);
            if name.is_null() {
                return f(None);
            }
            let r = f(Some(RStr(name).bytes()));
            api!(RedisModule_FreeString)(self.0, name);
            r
        }
    }

    pub fn log(self, level: &CStr, msg: &str) {
        let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: "%s" with a NUL-terminated string; a NULL ctx logs as the module.
        unsafe { api!(RedisModule_Log)(self.0, level.as_ptr(), c"%s".as_ptr(), text.as_ptr()) };
    }

    pub fn log_warning(self, msg: &str) {
        self.log(c"warning", msg);
    }
}

//! The one place that calls Redis' module API directly. Each wrapper is small and says why its
//! `unsafe` is sound; everything above this file is safe Rust.
//!
//! Raw calls instead of the redis-module crate's wrappers where the crate would copy (argv
//! strings), use C-string hash fields (owners may contain NUL), or lacks the API on Redis 7.0
//! (blocking with callbacks, absolute expiry, publish, replicate with flags).

use redis_module::raw;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

/// The longest delay a module timer is set for (one day).
pub const MAX_TIMER_DELAY_MS: i64 = 86_400_000;

pub use raw::{RedisModuleBlockedClient as BlockedClient, RedisModuleCtx, RedisModuleString};

/// Fetch an API function pointer. Redis fills them in `RedisModule_Init`; every function used
/// here exists since Redis 7.0, so a missing one is a load-time bug, reported as a panic that
/// the FFI entry points catch.
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: Redis writes these pointers once, in RedisModule_Init, before any call here.
        #[allow(unused_unsafe)]
        let f = unsafe { raw::$name };
        f.expect(concat!("Redis lacks ", stringify!($name)))
    }};
}

/// A command, callback or timer context, valid for the duration of that call.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut RedisModuleCtx);

/// A Redis string we do not own (argv, or one owned by an [`OwnedStr`]).
#[derive(Clone, Copy)]
pub struct RStr(pub *mut RedisModuleString);

impl RStr {
    pub fn bytes<'a>(self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: the string is alive for the current call; Redis returns its buffer and length.
        unsafe {
            let p = api!(RedisModule_StringPtrLen)(self.0, &mut len);
            if p.is_null() {
                &[]
            } else {
                std::slice::from_raw_parts(p.cast::<u8>(), len)
            }
        }
    }
}

/// A Redis string created by the module, freed on drop.
pub struct OwnedStr(RStr);

impl OwnedStr {
    pub fn new(bytes: &[u8]) -> OwnedStr {
        // SAFETY: a NULL ctx creates a string not tied to any context's auto-memory.
        let s = unsafe {
            api!(RedisModule_CreateString)(ptr::null_mut(), bytes.as_ptr().cast(), bytes.len())
        };
        OwnedStr(RStr(s))
    }
    pub fn from_i64(n: i64) -> OwnedStr {
        // SAFETY: as above.
        OwnedStr(RStr(unsafe {
            api!(RedisModule_CreateStringFromLongLong)(ptr::null_mut(), n)
        }))
    }
    pub fn get(&self) -> RStr {
        self.0
    }
}

impl Drop for OwnedStr {
    fn drop(&mut self) {
        // SAFETY: created with a NULL ctx above and freed exactly once here.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), self.0 .0) }
    }
}

/// The argument vector of a command call.
pub struct Args<'a>(pub &'a [*mut RedisModuleString]);

impl Args<'_> {
    pub fn get(&self, i: usize) -> RStr {
        RStr(self.0[i])
    }
    pub fn bytes(&self) -> Vec<&[u8]> {
        self.0.iter().map(|&s| RStr(s).bytes()).collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Hash,
    Other,
}

/// An open key, closed on drop (closing is when Redis signals WATCH and client-side caching).
pub struct Key(*mut raw::RedisModuleKey);

impl Key {
    /// Open for reading and writing. On a master this also lazily expires a key whose time has
    /// passed, so an expired lock reads as free.
    pub fn write(ctx: Ctx, name: RStr) -> Key {
        let mode = (raw::REDISMODULE_READ | raw::REDISMODULE_WRITE) as c_int;
        // SAFETY: ctx and name are valid for this call; the handle is closed in Drop.
        Key(unsafe { api!(RedisModule_OpenKey)(ctx.0, name.0, mode) }.cast())
    }

    pub fn read(ctx: Ctx, name: RStr) -> Key {
        // SAFETY: as above.
        Key(
            unsafe { api!(RedisModule_OpenKey)(ctx.0, name.0, raw::REDISMODULE_READ as c_int) }
                .cast(),
        )
    }

    pub fn kind(&self) -> KeyKind {
        if self.0.is_null() {
            return KeyKind::Empty;
        }
        // SAFETY: open key handle.
        match unsafe { api!(RedisModule_KeyType)(self.0) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            _ => KeyKind::Other,
        }
    }

    /// The integer in hash field `field`: `None` if absent, `Some(None)` if not an integer.
    pub fn hash_get_int(&self, field: RStr) -> Option<Option<i64>> {
        let mut value: *mut RedisModuleString = ptr::null_mut();
        // SAFETY: variadic (field, out-pointer, NULL terminator) as RM_HashGet documents; the
        // key is an open hash; the returned string is ours to free.
        unsafe {
            api!(RedisModule_HashGet)(
                self.0,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                &mut value as *mut *mut RedisModuleString,
                ptr::null_mut::<c_void>(),
            );
        }
        if value.is_null() {
            return None;
        }
        let mut n: i64 = 0;
        // SAFETY: value is a valid string returned above, freed right after reading it.
        let ok = unsafe {
            let ok =
                api!(RedisModule_StringToLongLong)(value, &mut n) == raw::REDISMODULE_OK as c_int;
            api!(RedisModule_FreeString)(ptr::null_mut(), value);
            ok
        };
        Some(ok.then_some(n))
    }

    /// Set hash field `field` to `n` (creating the hash if the key is empty).
    pub fn hash_set_int(&self, field: RStr, n: i64) {
        let value = OwnedStr::from_i64(n);
        // SAFETY: variadic (field, value, NULL terminator) per RM_HashSet; key open for writing.
        unsafe {
            api!(RedisModule_HashSet)(
                self.0,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                value.get().0,
                ptr::null_mut::<c_void>(),
            );
        }
    }

    /// Set the absolute expiry time (ms since the epoch).
    pub fn set_abs_expire(&self, at_ms: i64) {
        // SAFETY: open, non-empty key.
        unsafe { api!(RedisModule_SetAbsExpire)(self.0, at_ms) };
    }

    /// Absolute expiry time in ms, or `None` without one (or for an empty key).
    pub fn abs_expire(&self) -> Option<i64> {
        if self.0.is_null() {
            return None;
        }
        // SAFETY: open key handle.
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.0) };
        (at >= 0).then_some(at)
    }

    pub fn delete(&self) {
        // SAFETY: key open for writing.
        unsafe { api!(RedisModule_DeleteKey)(self.0) };
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: opened by RM_OpenKey, closed once.
            unsafe { api!(RedisModule_CloseKey)(self.0) };
        }
    }
}

impl Ctx {
    pub fn now_ms(self) -> i64 {
        // SAFETY: plain clock read.
        unsafe { api!(RedisModule_Milliseconds)() }
    }

    pub fn flags(self) -> u32 {
        // SAFETY: valid ctx.
        unsafe { api!(RedisModule_GetContextFlags)(self.0) as u32 }
    }

    pub fn db(self) -> i32 {
        // SAFETY: valid ctx with a client.
        unsafe { api!(RedisModule_GetSelectedDb)(self.0) }
    }

    pub fn select_db(self, db: i32) -> bool {
        // SAFETY: valid ctx with a client; fails cleanly for a db that does not exist.
        unsafe { api!(RedisModule_SelectDb)(self.0, db) == raw::REDISMODULE_OK as c_int }
    }

    /// Send a native command to replicas and the AOF (`replicas_only`: not the AOF, as Redis
    /// does for PUBLISH). Arguments go as binary-safe buffers.
    /// Skipped when nothing can receive it (see `propagation`).
    pub fn replicate(self, cmd: &CStr, args: &[&[u8]], replicas_only: bool) {
        if !crate::propagation::needed(replicas_only) {
            return;
        }
        let f = self.0;
        let cmd = cmd.as_ptr();
        let api = api!(RedisModule_Replicate);
        // SAFETY: RM_Replicate's 'b' format takes (char*, size_t) pairs, one per 'b'; 'A' means
        // "no AOF". The buffers outlive the call (Redis copies them).
        unsafe {
            let a = |i: usize| args[i].as_ptr().cast::<c_char>();
            let n = |i: usize| args[i].len();
            match (args.len(), replicas_only) {
                (1, false) => api(f, cmd, c"b".as_ptr(), a(0), n(0)),
                (2, false) => api(f, cmd, c"bb".as_ptr(), a(0), n(0), a(1), n(1)),
                (3, false) => api(f, cmd, c"bbb".as_ptr(), a(0), n(0), a(1), n(1), a(2), n(2)),
                (2, true) => api(f, cmd, c"bbA".as_ptr(), a(0), n(0), a(1), n(1)),
                _ => unreachable!("replicate called with an unsupported argument count"),
            };
        }
    }

    /// PUBLISH (or SPUBLISH semantics in cluster mode, as Redisson 3.22+ expects).
    pub fn publish(self, channel: &[u8], message: &[u8]) {
        let channel = OwnedStr::new(channel);
        let message = OwnedStr::new(message);
        let cluster = self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER != 0;
        // SAFETY: valid ctx and strings; both APIs exist in 7.0.
        unsafe {
            if cluster {
                api!(RedisModule_PublishMessageShard)(self.0, channel.get().0, message.get().0);
            } else {
                api!(RedisModule_PublishMessage)(self.0, channel.get().0, message.get().0);
            }
        }
        // Outside a cluster Redis forwards PUBLISH to replicas (not to the AOF); so do we, when
        // one is connected: a replica that connects later has no use for old unlock messages.
        if !cluster {
            let args = [channel.get().bytes(), message.get().bytes()];
            self.replicate(c"PUBLISH", &args, true);
        }
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

    /// `CONFIG GET name`'s value.
    pub fn config_get(self, name: &CStr) -> Option<Vec<u8>> {
        let name = OwnedStr::new(name.to_bytes());
        // CONFIG GET replies [name, value].
        self.call_read(c"CONFIG", Some(c"GET"), name.get())?.pop()
    }

    /// Fire a keyspace notification for a write made through the low-level key API (which
    /// fires none), so keyspace listeners (Redisson's lock listeners) see what a native command
    /// would show. Skipped when `notify-keyspace-events` does not enable the class: then no
    /// client could receive it, and raising it would cost every call a context set-up.
    pub fn notify(self, class: c_int, event: &CStr, key: RStr) {
        // SAFETY: plain read of the server's notification flags.
        let enabled = unsafe { api!(RedisModule_GetNotifyKeyspaceEvents)() };
        if enabled & class == 0 {
            return;
        }
        // SAFETY: valid ctx and key string.
        unsafe { api!(RedisModule_NotifyKeyspaceEvent)(self.0, class, event.as_ptr(), key.0) };
    }

    /// INCR `key` through Redis itself (keeps a TTL, creates at 0, rejects non-integers) without
    /// propagating; the caller replicates. `Err(true)` for a wrong type, `Err(false)` for a
    /// non-integer value.
    pub fn incr(self, key: &[u8]) -> Result<i64, bool> {
        let key = OwnedStr::new(key);
        // SAFETY: fmt "s" takes one RedisModuleString; the reply is freed below.
        unsafe {
            let reply =
                api!(RedisModule_Call)(self.0, c"INCR".as_ptr(), c"s".as_ptr(), key.get().0);
            if reply.is_null() {
                return Err(false);
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
                Err(text.starts_with(b"WRONGTYPE"))
            };
            api!(RedisModule_FreeCallReply)(reply);
            result
        }
    }

    /// Run a read command (`cmd [sub] arg`) through Redis and collect its string reply (or the
    /// strings of an array reply). `None` for nil or an error reply. Used only off the hot path.
    fn call_read(self, cmd: &CStr, sub: Option<&CStr>, arg: RStr) -> Option<Vec<Vec<u8>>> {
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
    pub fn key_stored(self, key: RStr) -> bool {
        // SAFETY: fmt "cs": a C string then a RedisModuleString; the reply is freed once.
        unsafe {
            let reply = api!(RedisModule_Call)(
                self.0,
                c"DEBUG".as_ptr(),
                c"cs".as_ptr(),
                c"OBJECT".as_ptr(),
                key.0,
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
    /// exactly "a lock for this key must not be created here".
    pub fn serves_key(self, key: RStr) -> bool {
        if self.flags() & raw::REDISMODULE_CTX_FLAGS_CLUSTER == 0 {
            return true;
        }
        // SAFETY: fmt "s" takes one RedisModuleString; the reply is freed once.
        unsafe {
            let reply = api!(RedisModule_Call)(self.0, c"EXISTS".as_ptr(), c"s".as_ptr(), key.0);
            if reply.is_null() {
                return false;
            }
            api!(RedisModule_FreeCallReply)(reply);
            true
        }
    }

    /// The id of the context's client (0 when it has none).
    pub fn client_id(self) -> u64 {
        // SAFETY: valid ctx; returns 0 without a client.
        unsafe { api!(RedisModule_GetClientId)(self.0) }
    }

    pub fn is_replica(self) -> bool {
        self.flags() & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0
    }

    /// HGETALL as (field, value) pairs.
    pub fn hash_fields(self, key: RStr) -> Vec<(Vec<u8>, Vec<u8>)> {
        let flat = self.call_read(c"HGETALL", None, key).unwrap_or_default();
        flat.chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    }

    /// GET, `None` for a missing key or one that is not a string.
    pub fn get_string(self, key: RStr) -> Option<Vec<u8>> {
        self.call_read(c"GET", None, key)?.pop()
    }

    // ---- replies --------------------------------------------------------------------------

    pub fn reply_int(self, n: i64) {
        // SAFETY: valid command/callback ctx.
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.0, n) };
    }

    pub fn reply_null(self) {
        // SAFETY: as above.
        unsafe { api!(RedisModule_ReplyWithNull)(self.0) };
    }

    pub fn reply_error(self, msg: &str) {
        // Error text must be a C string without CR/LF; ours never contain them, but user bytes
        // (an unknown option) might, so strip anything unsafe.
        let clean: Vec<u8> = msg
            .bytes()
            .map(|b| {
                if b == b'\r' || b == b'\n' || b == 0 {
                    b' '
                } else {
                    b
                }
            })
            .chain(std::iter::once(0))
            .collect();
        // SAFETY: NUL-terminated buffer alive for the call.
        unsafe { api!(RedisModule_ReplyWithError)(self.0, clean.as_ptr().cast()) };
    }

    pub fn reply_bulk(self, bytes: &[u8]) {
        // SAFETY: buffer alive for the call; Redis copies it.
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(self.0, bytes.as_ptr().cast(), bytes.len())
        };
    }

    /// A map of `pairs` entries (RESP3 map; a flat array of 2×pairs on RESP2).
    pub fn reply_map(self, pairs: usize) {
        // SAFETY: the caller then emits exactly 2×pairs elements.
        unsafe { api!(RedisModule_ReplyWithMap)(self.0, pairs as _) };
    }

    pub fn reply_array(self, len: usize) {
        // SAFETY: the caller then emits exactly len elements.
        unsafe { api!(RedisModule_ReplyWithArray)(self.0, len as _) };
    }

    // ---- blocking -------------------------------------------------------------------------

    /// Park the calling client. `timeout_ms` 0 waits forever.
    pub fn block(self, timeout_ms: i64, cb: &BlockCallbacks) -> *mut BlockedClient {
        // SAFETY: valid command ctx; the callbacks are extern "C" fns that catch panics.
        unsafe {
            let bc = api!(RedisModule_BlockClient)(
                self.0,
                Some(cb.reply),
                Some(cb.timeout),
                Some(cb.free),
                timeout_ms,
            );
            api!(RedisModule_SetDisconnectCallback)(bc, Some(cb.disconnect));
            bc
        }
    }

    pub fn blocked_handle(self) -> *mut BlockedClient {
        // SAFETY: valid in reply and timeout callbacks.
        unsafe { api!(RedisModule_GetBlockedClientHandle)(self.0) }
    }

    pub fn blocked_private_data(self) -> *mut c_void {
        // SAFETY: valid in reply callbacks.
        unsafe { api!(RedisModule_GetBlockedClientPrivateData)(self.0) }
    }

    // ---- timers ---------------------------------------------------------------------------

    /// A timer firing after `delay_ms`, capped at [`MAX_TIMER_DELAY_MS`]: Redis computes the
    /// fire time in microseconds, which wraps for huge delays (a lease of 2^62 ms) and would
    /// fire at once, forever. Callers re-arm when a capped timer fires early.
    pub fn create_timer(self, delay_ms: i64, cb: TimerFn, data: *mut c_void) -> u64 {
        let delay = delay_ms.clamp(0, MAX_TIMER_DELAY_MS);
        // SAFETY: ctx must have a client (command, timer, notification, disconnect contexts).
        unsafe { api!(RedisModule_CreateTimer)(self.0, delay, Some(cb), data) }
    }

    /// Stop a timer; returns its data pointer when it had not fired yet.
    pub fn stop_timer(self, id: u64) -> Option<*mut c_void> {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: unknown ids are rejected by Redis.
        let ok = unsafe { api!(RedisModule_StopTimer)(self.0, id, &mut data) };
        (ok == raw::REDISMODULE_OK as c_int).then_some(data)
    }

    pub fn log_warning(self, msg: &str) {
        let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: "%s" with a NUL-terminated string.
        unsafe {
            api!(RedisModule_Log)(self.0, c"warning".as_ptr(), c"%s".as_ptr(), text.as_ptr())
        };
    }
}

pub type TimerFn = unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void);
pub type CmdFn =
    unsafe extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

pub struct BlockCallbacks {
    pub reply: CmdFn,
    pub timeout: CmdFn,
    pub free: unsafe extern "C" fn(*mut RedisModuleCtx, *mut c_void),
    pub disconnect: unsafe extern "C" fn(*mut RedisModuleCtx, *mut BlockedClient),
}

/// Wake a parked client; `data` reaches the reply callback and then the free callback.
pub fn unblock(bc: *mut BlockedClient, data: *mut c_void) {
    // SAFETY: bc came from RM_BlockClient and the queues guarantee one unblock per bc.
    unsafe { api!(RedisModule_UnblockClient)(bc, data) };
}

/// The argv of a command call as a slice.
///
/// # Safety
/// `argv` must point to `argc` strings, as Redis passes to command functions.
pub unsafe fn argv<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> Args<'a> {
    if argv.is_null() || argc <= 0 {
        Args(&[])
    } else {
        Args(std::slice::from_raw_parts(argv, argc as usize))
    }
}

//! The one layer that calls Redis' module API. Each wrapper is small and says why its `unsafe`
//! is sound; everything above this folder is safe Rust. Callbacks from Redis enter through the
//! trampolines in [`boundary`], which catch panics and call the plain Rust handlers the module
//! installs at load ([`boundary::install`]), so this layer imports nothing of the module's own.
//!
//! Raw calls instead of the redis-module crate's wrappers where the crate would copy (argv
//! strings), use C-string hash fields (owners may contain NUL), or lacks the API on Redis 7.0
//! (blocking with callbacks, absolute expiry, publish, replicate with flags, key specs).

use redis_module::raw;
use std::ptr;

/// Fetch an API function pointer. Redis fills them in `RedisModule_Init`; every function used
/// through this macro exists since Redis 7.0, so a missing one is a load-time bug, reported as a
/// panic that the trampolines catch. APIs of later servers are probed with [`has`] instead.
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: Redis writes these pointers once, in RedisModule_Init, before any call here.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        f.expect(concat!("Redis lacks ", stringify!($name)))
    }};
}

/// Whether the server provides an optional API (one newer than Redis 7.0).
macro_rules! has {
    ($name:ident) => {{
        // SAFETY: as in `api!`: written once at load.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        f.is_some()
    }};
}

pub mod alarm;
pub mod alloc;
pub mod block;
pub mod boundary;
pub mod clock;
pub mod command;
pub mod ctx;
pub mod key;
pub mod load;
pub mod module_config;
pub mod reply;

pub use block::{BlockedClient, Wake};
pub use boundary::{Handlers, ServerEvent};
pub use command::Answer;
pub use ctx::Ctx;
pub use key::Key;

pub use raw::{RedisModuleCtx, RedisModuleString};

/// A Redis string we do not own (argv, or one owned by an [`OwnedStr`]).
#[derive(Clone, Copy)]
pub struct RStr(pub(crate) *mut RedisModuleString);

impl RStr {
    /// The string with where its bytes are, read once (see [`ReadStr`]).
    pub fn read(self) -> ReadStr {
        let b = self.bytes();
        ReadStr {
            s: self,
            ptr: b.as_ptr(),
            len: b.len(),
        }
    }

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

/// A Redis string holding an integer. 0 and 1 (a lock's first hold, the unlock messages) are
/// made once and kept for the life of the process, as Redis keeps its shared small integers:
/// making and freeing one cost about 450 of RLOCK.ACQUIRE's 7.6k instructions (callgrind).
/// Safe to share: Redis copies a value it stores (`RM_HashSet`) or publishes.
pub enum IntStr {
    Kept(RStr),
    Made(OwnedStr),
}

/// The kept strings' addresses. Only Redis' main thread runs commands. Never freed (a kept
/// string outlives every call). A static, not a thread-local: in a shared library each
/// thread-local access calls `__tls_get_addr`.
static KEPT: std::sync::OnceLock<[usize; 2]> = std::sync::OnceLock::new();

impl IntStr {
    pub fn new(n: i64) -> IntStr {
        match n {
            0 | 1 => {
                let kept = KEPT.get_or_init(|| {
                    // Leaked on purpose: see KEPT.
                    let make =
                        |n| std::mem::ManuallyDrop::new(OwnedStr::from_i64(n)).get().0 as usize;
                    [make(0), make(1)]
                });
                IntStr::Kept(RStr(kept[n as usize] as *mut RedisModuleString))
            }
            _ => IntStr::Made(OwnedStr::from_i64(n)),
        }
    }

    pub fn get(&self) -> RStr {
        match self {
            IntStr::Kept(s) => *s,
            IntStr::Made(s) => s.get(),
        }
    }
}

impl Drop for OwnedStr {
    fn drop(&mut self) {
        // SAFETY: created with a NULL ctx above and freed exactly once here.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), self.0 .0) }
    }
}

/// Fill `buf` with random bytes from Redis' own generator (seeded from the OS at start).
pub fn random_bytes(buf: &mut [u8]) {
    // SAFETY: Redis writes exactly `buf.len()` bytes into the buffer.
    unsafe { api!(RedisModule_GetRandomBytes)(buf.as_mut_ptr(), buf.len()) };
}

/// A Redis string we do not own, with where its bytes are, read once: reading them again is a
/// call into Redis (`RM_StringPtrLen`, about 25 instructions), and a command's key name and
/// owner were read several times per command (its settle step's tracking and publishing).
#[derive(Clone, Copy)]
pub struct ReadStr {
    s: RStr,
    ptr: *const u8,
    len: usize,
}

impl From<RStr> for ReadStr {
    fn from(s: RStr) -> ReadStr {
        s.read()
    }
}

impl ReadStr {
    pub fn get(self) -> RStr {
        self.s
    }

    pub fn bytes<'a>(self) -> &'a [u8] {
        // SAFETY: `ptr` and `len` are what `RStr::bytes` returned for `s` (a valid slice, or
        // the empty slice's dangling pointer with length 0); the string is alive and
        // unchanged as long as an `RStr` of it may be used (argv: the call; an `OwnedStr`:
        // its owner), which is what `RStr::bytes`'s own slice relies on.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether `bytes` are this string's own (the same place and length).
    pub fn is(self, bytes: &[u8]) -> bool {
        std::ptr::eq(self.ptr, bytes.as_ptr()) && self.len == bytes.len()
    }
}

/// The argument vector of a command call.
pub struct Args<'a>(pub(crate) &'a [*mut RedisModuleString]);

impl<'a> Args<'a> {
    pub fn get(&self, i: usize) -> RStr {
        RStr(self.0[i])
    }

    /// The arguments' bytes, inline for every rlock command's few arguments (a heap vector
    /// cost an allocation, about 220 instructions, per call). Room for 16: the client's default
    /// `RLOCK.ACQUIRE key owner lease_ms SESSION s QUEUE request timeout_ms` has 9, and the
    /// longest forms (`RSEM.ACQUIRE` with `PERMITS`, `LEASE`, `SESSION`, `QUEUE` and `BLOCK`)
    /// 13; with room for 8 the 9 spilled to the heap: 600 instructions per call (callgrind).
    /// Pushed one by one into the vector, built in the handler's frame: collecting an
    /// iterator into it cost about 50 instructions an argument, and copying the 256-byte
    /// vector out of a call 64 more per command (callgrind).
    #[inline(always)]
    pub fn bytes(&self) -> Argv<'a> {
        let mut bytes = smallvec::SmallVec::new();
        if self.0.len() > 16 {
            bytes.reserve_exact(self.0.len());
        }
        // The command's name (argv[0]) is not read: no parser uses it (the command is known
        // by its handler), and an empty slice in its place saves a string lookup per command.
        if !self.0.is_empty() {
            bytes.push(&[][..]);
        }
        for &s in self.0.iter().skip(1) {
            bytes.push(RStr(s).bytes());
        }
        Argv {
            strs: self.0,
            bytes,
        }
    }
}

/// A command's arguments, each with its bytes, read once ([`Args::bytes`]): used as the slice
/// of their bytes, and as strings whose bytes are known ([`Argv::str`]) for the key layer.
/// Reading the key and the owner again there cost about 45 instructions a command
/// (`RM_StringPtrLen`, callgrind).
pub struct Argv<'a> {
    strs: &'a [*mut RedisModuleString],
    bytes: smallvec::SmallVec<[&'a [u8]; 16]>,
}

impl<'a> std::ops::Deref for Argv<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &[&'a [u8]] {
        &self.bytes
    }
}

impl Argv<'_> {
    /// Argument `i` (not the command's name) with the bytes read for it.
    pub fn str(&self, i: usize) -> ReadStr {
        if i == 0 {
            // Not read (see `Args::bytes`).
            return RStr(self.strs[0]).read();
        }
        let b = self.bytes[i];
        // `strs[i]`'s own bytes: `Args::bytes` read them from it, as `RStr::read` does.
        ReadStr {
            s: RStr(self.strs[i]),
            ptr: b.as_ptr(),
            len: b.len(),
        }
    }
}

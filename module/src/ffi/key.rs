//! Open keys: the low-level key API (no command lookup, no argument vector), which is what makes
//! a native command cheaper than a script. These writes neither replicate nor raise keyspace
//! events by themselves: `apply` does both.

use super::{Ctx, OwnedStr, RStr, RedisModuleString};
use crate::core::store::{Int, KeyType};
use redis_module::raw;
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::ptr;

/// An open key, closed on drop (closing is when Redis signals WATCH and client-side caching).
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
    /// The name, when the module created it for this key (auxiliary keys).
    _name: Option<OwnedStr>,
    /// The type last read, until this handle writes: a lock's release asks it three times
    /// (`RM_KeyType` and its wrapper, about 20 instructions each, callgrind). As Redis' own
    /// handle keeps the value it found at opening, this does not see writes made to the key
    /// through another handle or a command while it is open, and nothing here makes any.
    kind: Cell<Option<KeyType>>,
}

impl Key {
    /// Open `name` for reading, or for reading and writing. On a master, opening also expires
    /// a key whose time has passed, so an expired lock reads as free.
    pub fn open(ctx: Ctx, name: RStr, write: bool) -> Key {
        let mut mode = raw::REDISMODULE_READ as c_int;
        if write {
            mode |= raw::REDISMODULE_WRITE as c_int;
        }
        // SAFETY: ctx and name are valid for this call; the handle is closed in Drop.
        let ptr = unsafe { api!(RedisModule_OpenKey)(ctx.0, name.0, mode) }.cast();
        Key {
            ptr,
            _name: None,
            kind: Cell::new(None),
        }
    }

    /// Open a key named by bytes (an auxiliary key).
    pub fn open_bytes(ctx: Ctx, name: &[u8], write: bool) -> Key {
        let owned = OwnedStr::new(name);
        let mut key = Key::open(ctx, owned.get(), write);
        key._name = Some(owned);
        key
    }

    pub fn kind(&self) -> KeyType {
        if self.ptr.is_null() {
            return KeyType::Empty;
        }
        if let Some(kind) = self.kind.get() {
            return kind;
        }
        // SAFETY: open key handle.
        let kind = match unsafe { api!(RedisModule_KeyType)(self.ptr) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyType::Empty,
            raw::REDISMODULE_KEYTYPE_HASH => KeyType::Hash,
            raw::REDISMODULE_KEYTYPE_STRING => KeyType::String,
            raw::REDISMODULE_KEYTYPE_ZSET => KeyType::ZSet,
            _ => KeyType::Other,
        };
        self.kind.set(Some(kind));
        kind
    }

    /// This handle writes: the type is read again next time.
    fn written(&self) {
        self.kind.set(None);
    }

    /// The string in hash field `field`, freed by the caller's `f` reading it in place.
    fn with_hash_field<R>(&self, field: RStr, f: impl FnOnce(Option<RStr>) -> R) -> R {
        if self.ptr.is_null() {
            return f(None);
        }
        let mut value: *mut RedisModuleString = ptr::null_mut();
        // SAFETY: variadic (field, out-pointer, NULL terminator) as RM_HashGet documents; the
        // key is an open hash (callers check the type first); the returned string is ours.
        unsafe {
            api!(RedisModule_HashGet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                &mut value as *mut *mut RedisModuleString,
                ptr::null_mut::<c_void>(),
            );
        }
        if value.is_null() {
            return f(None);
        }
        let out = f(Some(RStr(value)));
        // SAFETY: returned by RM_HashGet above, freed once.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), value) };
        out
    }

    pub fn hash_get(&self, field: RStr) -> Option<Vec<u8>> {
        self.with_hash_field(field, |v| v.map(|s| s.bytes().to_vec()))
    }

    pub fn hash_get_int(&self, field: RStr) -> Int {
        self.with_hash_field(field, |v| match v {
            None => Int::Absent,
            Some(s) => {
                let mut n: i64 = 0;
                // SAFETY: a valid string; Redis parses it with its strict integer syntax.
                let ok = unsafe { api!(RedisModule_StringToLongLong)(s.0, &mut n) };
                if ok == raw::REDISMODULE_OK as c_int {
                    Int::Is(n)
                } else {
                    Int::NotInt
                }
            }
        })
    }

    /// Set hash field `field` to `value` (creating the hash if the key is empty).
    pub fn hash_set(&self, field: RStr, value: RStr) {
        self.written();
        // SAFETY: variadic (field, value, NULL terminator) per RM_HashSet; key open for writing.
        unsafe {
            api!(RedisModule_HashSet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                value.0,
                ptr::null_mut::<c_void>(),
            );
        }
    }

    /// Delete hash field `field` (Redis deletes the key when its last field goes).
    pub fn hash_del(&self, field: RStr) {
        self.written();
        // SAFETY: REDISMODULE_HASH_DELETE as the value deletes the field, per RM_HashSet.
        unsafe {
            api!(RedisModule_HashSet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                raw::REDISMODULE_HASH_DELETE as *mut RedisModuleString,
                ptr::null_mut::<c_void>(),
            );
        }
    }

    /// Up to `limit` fields of a hash with their values (all of them for `usize::MAX`).
    pub fn hash_scan(&self, limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        struct Acc {
            out: Vec<(Vec<u8>, Vec<u8>)>,
            limit: usize,
        }
        unsafe extern "C" fn collect(
            _key: *mut raw::RedisModuleKey,
            field: *mut RedisModuleString,
            value: *mut RedisModuleString,
            data: *mut c_void,
        ) {
            // SAFETY: data is the &mut Acc passed to RM_ScanKey below, alive for the scan;
            // field and value are valid for this callback.
            let acc = unsafe { &mut *data.cast::<Acc>() };
            if acc.out.len() < acc.limit && !field.is_null() && !value.is_null() {
                acc.out
                    .push((RStr(field).bytes().to_vec(), RStr(value).bytes().to_vec()));
            }
        }
        let mut acc = Acc {
            out: Vec::new(),
            limit,
        };
        if self.ptr.is_null() || limit == 0 {
            return acc.out;
        }
        // SAFETY: the cursor is created and destroyed here; the callback above only touches
        // `acc`, which outlives the scan. Each ScanKey step visits a few entries (a small hash
        // in one go), so stopping at `limit` reads O(limit) of a large hash.
        unsafe {
            let cursor = api!(RedisModule_ScanCursorCreate)();
            while api!(RedisModule_ScanKey)(
                self.ptr,
                cursor,
                Some(collect),
                (&mut acc as *mut Acc).cast(),
            ) != 0
                && acc.out.len() < limit
            {}
            api!(RedisModule_ScanCursorDestroy)(cursor);
        }
        acc.out
    }

    /// The fields of a hash with their values, in the hash's own order, until `f` returns
    /// false: a caller that stops early reads only a few entries of a large hash.
    pub fn hash_visit(&self, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        unsafe extern "C" fn collect(
            _key: *mut raw::RedisModuleKey,
            field: *mut RedisModuleString,
            value: *mut RedisModuleString,
            data: *mut c_void,
        ) {
            // SAFETY: data is the &mut Vec passed to RM_ScanKey below, alive for the step;
            // field and value are valid for this callback.
            let step = unsafe { &mut *data.cast::<Vec<(Vec<u8>, Vec<u8>)>>() };
            if !field.is_null() && !value.is_null() {
                step.push((RStr(field).bytes().to_vec(), RStr(value).bytes().to_vec()));
            }
        }
        if self.ptr.is_null() {
            return;
        }
        let mut step: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        // SAFETY: the cursor is created here and destroyed on every way out of the loop; the
        // callback only touches `step`, which outlives each step. `f` runs between steps, not
        // inside the callback, so whatever it reads (other keys) happens outside RM_ScanKey;
        // the hash itself is not written while it is visited (decisions write afterwards).
        unsafe {
            let cursor = api!(RedisModule_ScanCursorCreate)();
            loop {
                let more = api!(RedisModule_ScanKey)(
                    self.ptr,
                    cursor,
                    Some(collect),
                    (&mut step as *mut Vec<(Vec<u8>, Vec<u8>)>).cast(),
                ) != 0;
                let go_on = step.drain(..).all(|(k, v)| f(&k, &v));
                if !more || !go_on {
                    break;
                }
            }
            api!(RedisModule_ScanCursorDestroy)(cursor);
        }
    }

    /// A string key's value.
    pub fn string_get(&self) -> Option<Vec<u8>> {
        if self.ptr.is_null() {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: read-mode DMA on a string key (callers check the type) returns its buffer,
        // valid until the key is closed or written; copied at once.
        unsafe {
            let p = api!(RedisModule_StringDMA)(self.ptr, &mut len, raw::REDISMODULE_READ as c_int);
            if p.is_null() {
                None
            } else {
                Some(std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
            }
        }
    }

    /// Replace the key with a string (dropping any TTL, as SET does).
    pub fn string_set(&self, value: RStr) {
        self.written();
        // SAFETY: key open for writing.
        unsafe { api!(RedisModule_StringSet)(self.ptr, value.0) };
    }

    /// Set the absolute expiry time (ms since the epoch).
    pub fn set_abs_expire(&self, at_ms: i64) {
        // SAFETY: open, non-empty key.
        unsafe { api!(RedisModule_SetAbsExpire)(self.ptr, at_ms) };
    }

    /// Absolute expiry time in ms, or `None` without one (or for an empty key).
    pub fn abs_expire(&self) -> Option<i64> {
        // An empty key opened for writing has a handle but no value: Redis 8.2's
        // RM_GetAbsExpire reads the value without a NULL check and crashes (seen in CI, from a
        // lease-end job on a key deleted meanwhile), so an empty key is answered here.
        if self.ptr.is_null() || self.kind() == KeyType::Empty {
            return None;
        }
        // SAFETY: open key handle on a key that holds a value (checked above).
        let at = unsafe { api!(RedisModule_GetAbsExpire)(self.ptr) };
        (at >= 0).then_some(at)
    }

    /// `ZADD key score member` (creating the sorted set when the key is empty).
    pub fn zset_add(&self, score: f64, member: RStr) {
        self.written();
        let mut flags: c_int = 0;
        // SAFETY: key open for writing and empty or a sorted set (the rules check the type);
        // `flags` is a valid in/out pointer for the call.
        unsafe { api!(RedisModule_ZsetAdd)(self.ptr, score, member.0, &mut flags) };
    }

    /// `ZREM key member`; true when it was there. Redis deletes the key when it empties.
    pub fn zset_rem(&self, member: RStr) -> bool {
        if self.kind() != KeyType::ZSet {
            return false; // RM_ZsetRem reads the value's type without a NULL check on 7.0
        }
        self.written();
        let mut deleted: c_int = 0;
        // SAFETY: key open for writing and holding a sorted set (checked above).
        unsafe { api!(RedisModule_ZsetRem)(self.ptr, member.0, &mut deleted) };
        deleted == 1
    }

    /// The length of the value (members of a sorted set, fields of a hash); 0 for no key.
    pub fn len(&self) -> usize {
        if self.ptr.is_null() {
            return 0;
        }
        // SAFETY: an open key; RM_ValueLength reads its value's length, 0 for an empty key.
        unsafe { api!(RedisModule_ValueLength)(self.ptr) }
    }

    /// A member's score, or `None` (absent member, or not a sorted set).
    pub fn zset_score(&self, member: RStr) -> Option<f64> {
        if self.kind() != KeyType::ZSet {
            return None;
        }
        let mut score = 0.0;
        // SAFETY: open key holding a sorted set (checked above); `score` is a valid out pointer.
        let ok = unsafe { api!(RedisModule_ZsetScore)(self.ptr, member.0, &mut score) };
        (ok == raw::REDISMODULE_OK as c_int).then_some(score)
    }

    /// Up to `limit` members with a score of at most `max`, lowest first, with their scores.
    pub fn zset_range(&self, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        let mut out = Vec::new();
        if self.kind() != KeyType::ZSet || limit == 0 {
            return out;
        }
        // SAFETY: open key holding a sorted set (checked above). The range iterator lives on
        // the key and is stopped before returning; each element string is ours and is freed
        // after it is copied.
        unsafe {
            if api!(RedisModule_ZsetFirstInScoreRange)(self.ptr, f64::NEG_INFINITY, max, 0, 0)
                != raw::REDISMODULE_OK as c_int
            {
                return out;
            }
            while out.len() < limit && api!(RedisModule_ZsetRangeEndReached)(self.ptr) == 0 {
                let mut score = 0.0;
                let ele = api!(RedisModule_ZsetRangeCurrentElement)(self.ptr, &mut score);
                if ele.is_null() {
                    break;
                }
                out.push((RStr(ele).bytes().to_vec(), score));
                api!(RedisModule_FreeString)(ptr::null_mut(), ele);
                if api!(RedisModule_ZsetRangeNext)(self.ptr) == 0 {
                    break;
                }
            }
            api!(RedisModule_ZsetRangeStop)(self.ptr);
        }
        out
    }

    pub fn delete(&self) {
        self.written();
        if !self.ptr.is_null() {
            // SAFETY: key open for writing.
            unsafe { api!(RedisModule_DeleteKey)(self.ptr) };
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: opened by RM_OpenKey, closed once.
            unsafe { api!(RedisModule_CloseKey)(self.ptr) };
        }
    }
}

//! The only writer: performs a [`Decision`]'s writes. Each write is made with the low-level key
//! API, sent to replicas and the AOF as the native command it stands for (absolute expiry
//! times only, so a replay never extends a lease), and announced with the keyspace event that
//! native command raises, for whoever listens.

use crate::core::decision::{count_message, Decision, Write};
use crate::core::error::CmdError;
use crate::core::store::{Int, KeyType, Store, Target};
use crate::core::wait::ObjectKeys;
use crate::core::{fencing, names};
use crate::ffi::ctx::IncrFailed;
use crate::ffi::{IntStr, Key, OwnedStr};
use crate::keys::RedisKeys;
use crate::settle::{self, Change};
use crate::{paused, propagation};
use redis_module::raw;
use std::ffi::{c_int, CStr};

impl ObjectKeys for RedisKeys {
    fn store(&self) -> &dyn Store {
        self
    }

    /// Serving's writes (grants to waiters, tidying): the serving step itself does what
    /// follows them. Not checked against the ACL user of the command that freed the object:
    /// each waiter's auxiliary keys were checked against its own user when it queued
    /// (`commands::acquire::wait_or_nil`), and serving from a timer or an event has no user at all. (A
    /// release by a user without a waiter's patterns made that waiter's grant fail with
    /// `NOPERM` naming its own read-hold, token or lease key.)
    fn write_serving(&mut self, decision: &Decision) -> Result<Option<i64>, CmdError> {
        self.write_as(decision, Writer::Serving)
    }
}

impl RedisKeys {
    /// Perform a command's decision, and record for the step after the command what it did to
    /// the object (`change`): serving its queue, telling sessions and counting happen there
    /// (`settle::settle`), not in the handler. The value the decision's `NextToken` produced.
    pub fn apply(&mut self, decision: &Decision, change: Change) -> Result<Option<i64>, CmdError> {
        let token = self.write(decision)?;
        if let Some(kind) = self.object {
            // Known here without reading the key again after the command.
            let deleted = decision
                .writes
                .iter()
                .any(|w| matches!(w, Write::Del { key: Target::Main }));
            settle::mark(self.name, kind, change, deleted);
        }
        Ok(token)
    }

    /// Perform a command's decision's writes, all or (on error) none.
    pub fn write(&mut self, decision: &Decision) -> Result<Option<i64>, CmdError> {
        self.write_as(decision, Writer::Command)
    }

    fn write_as(&mut self, decision: &Decision, writer: Writer) -> Result<Option<i64>, CmdError> {
        if self.guard_pause {
            self.check_not_paused(decision)?;
        } else if writer == Writer::Command {
            self.check_permissions(decision)?;
        }
        self.check_whole(decision)?;
        if !decision.writes.is_empty() {
            self.note_effect();
        }
        let notify = self.ctx.notify_flags();
        let mut token = None;
        for w in &decision.writes {
            match w {
                Write::NextToken { key } => token = Some(self.next_token(key)?),
                Write::HSetInt { key, field, value } => {
                    let v = IntStr::new(*value);
                    self.hset(key, field, Value::Int(*value), notify, |k, f| {
                        k.hash_set(f, v.get())
                    });
                }
                Write::HSet { key, field, value } => {
                    let v = OwnedStr::new(value);
                    self.hset(key, field, Value::Bytes(value), notify, |k, f| {
                        k.hash_set(f, v.get())
                    });
                }
                Write::HDel { key, field } => {
                    let f = self.string(field);
                    self.on(key, |k| k.hash_del(f.get()));
                    self.replicate(c"HDEL", key, &[field]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_HASH, c"hdel", key);
                }
                Write::Del { key } => {
                    self.on(key, Key::delete);
                    self.replicate(c"DEL", key, &[]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_GENERIC, c"del", key);
                }
                Write::SetInt { key, value } => {
                    let v = IntStr::new(*value);
                    self.on(key, |k| k.string_set(v.get()));
                    self.replicate(c"SET", key, &[v.get().bytes()]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_STRING, c"set", key);
                }
                Write::PExpireAt { key, at } => {
                    self.on(key, |k| k.set_abs_expire(*at));
                    if propagation::needed(false) {
                        let mut text = itoa::Buffer::new();
                        self.replicate(c"PEXPIREAT", key, &[text.format(*at).as_bytes()]);
                    }
                    self.notify(notify, raw::REDISMODULE_NOTIFY_GENERIC, c"expire", key);
                }
                Write::Publish { channel, message } => self.publish(channel, *message),
                Write::PublishOn { prefix, message } => {
                    names::prefixed_with(prefix, self.name.bytes(), |ch| self.publish(ch, *message))
                }
                Write::IncrBy { key, by } => {
                    self.incr_by(key, *by)?;
                    let by = itoa::Buffer::new().format(*by).as_bytes().to_vec();
                    self.replicate(c"INCRBY", key, &[&by]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_STRING, c"incrby", key);
                }
                Write::ZAdd { key, member, score } => {
                    let m = OwnedStr::new(member);
                    self.on(key, |k| k.zset_add(*score as f64, m.get()));
                    let score = itoa::Buffer::new().format(*score).as_bytes().to_vec();
                    self.replicate(c"ZADD", key, &[&score, member]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_ZSET, c"zadd", key);
                }
                Write::ZRem { key, member } => {
                    let m = OwnedStr::new(member);
                    let mut emptied = false;
                    self.on(key, |k| {
                        // Redis 7.0 may leave an empty sorted set to the key's close; delete it
                        // here, as ZREM does.
                        if k.zset_rem(m.get()) && k.zset_range(f64::INFINITY, 1).is_empty() {
                            k.delete();
                            emptied = true;
                        }
                    });
                    self.replicate(c"ZREM", key, &[member]);
                    self.notify(notify, raw::REDISMODULE_NOTIFY_ZSET, c"zrem", key);
                    if emptied {
                        // As ZREM of the last member: the key goes, with its `del` event.
                        self.notify(notify, raw::REDISMODULE_NOTIFY_GENERIC, c"del", key);
                    }
                }
                Write::PublishCount {
                    channel,
                    key,
                    positive_only,
                } => {
                    if let Some(n) = count_message(self.get_int(key), *positive_only) {
                        self.publish(channel, n);
                    }
                }
            }
        }
        Ok(token)
    }
}

/// A hash field's value as the rules gave it.
#[derive(Clone, Copy)]
enum Value<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

/// On whose behalf a decision is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// The running command, for its caller: its auxiliary keys are checked against the caller's
    /// ACL user.
    Command,
    /// Serving a queue, for the waiters it grants (checked when they queued).
    Serving,
}

impl RedisKeys {
    fn name_of<'a>(&'a self, key: &'a Target) -> &'a [u8] {
        match key {
            Target::Main => self.name.bytes(),
            Target::Aux(k) => k,
        }
    }

    /// Run a write on `key`'s open handle (auxiliary keys are opened for it).
    fn on(&self, key: &Target, f: impl FnOnce(&Key)) {
        match key {
            Target::Main => f(&self.main),
            Target::Aux(name) => f(&Key::open_bytes(self.ctx, name, true)),
        }
    }

    fn hset(
        &self,
        key: &Target,
        field: &[u8],
        value: Value,
        notify: c_int,
        write: impl FnOnce(&Key, crate::ffi::RStr),
    ) {
        let f = self.string(field);
        self.on(key, |k| write(k, f.get()));
        // The value's text is made only when a replica or the AOF may receive it.
        if propagation::needed(false) {
            let mut text = itoa::Buffer::new();
            let value = match value {
                Value::Int(n) => text.format(n).as_bytes(),
                Value::Bytes(b) => b,
            };
            self.replicate(c"HSET", key, &[field, value]);
        }
        self.notify(notify, raw::REDISMODULE_NOTIFY_HASH, c"hset", key);
    }

    /// PUBLISH (SPUBLISH semantics in a cluster).
    fn publish(&self, channel: &[u8], message: i64) {
        // Fixed at startup: read once (RM_GetContextFlags cost 130 instructions a release).
        let cluster = crate::keys::cluster(self.ctx);
        self.ctx.publish(channel, message, cluster);
        // Outside a cluster Redis forwards PUBLISH to replicas (not to the AOF); so do we, when
        // one is connected: a later replica has no use for old messages.
        if !cluster && propagation::needed(true) {
            let mut text = itoa::Buffer::new();
            let message = text.format(message).as_bytes();
            self.ctx.replicate(c"PUBLISH", &[channel, message], true);
        }
    }

    /// INCRBY with the low-level API: the new value is set and the TTL kept (as INCRBY keeps
    /// it; RM_StringSet drops it). The rules checked the type and the range; this refuses
    /// anything else before writing.
    fn incr_by(&self, key: &Target, by: i64) -> Result<(), CmdError> {
        let current = match (self.kind(key), self.get_int(key)) {
            (KeyType::Empty, _) => 0,
            (KeyType::String, Int::Is(n)) => n,
            _ => return Err(CmdError::WrongType),
        };
        let next = current.checked_add(by).ok_or(CmdError::PermitsOverflow)?;
        let ttl = self.expire_at(key);
        let v = OwnedStr::from_i64(next);
        self.on(key, |k| {
            k.string_set(v.get());
            if let Some(at) = ttl {
                k.set_abs_expire(at);
            }
        });
        Ok(())
    }

    /// `cmd key args...` to replicas and the AOF, when anyone can receive it.
    fn replicate(&self, cmd: &CStr, key: &Target, args: &[&[u8]]) {
        if !propagation::needed(false) {
            return;
        }
        let mut all: Vec<&[u8]> = Vec::with_capacity(args.len() + 1);
        all.push(self.name_of(key));
        all.extend_from_slice(args);
        self.ctx.replicate(cmd, &all, false);
    }

    /// The keyspace event a native command would raise, when `notify-keyspace-events` enables
    /// its class (otherwise no client could receive it, and raising it costs a context). The
    /// check inline: a call per write to find nothing enabled cost 13 instructions each
    /// (callgrind).
    #[inline(always)]
    fn notify(&self, enabled: c_int, class: c_int, event: &CStr, key: &Target) {
        if enabled & class != 0 {
            self.raise(class, event, key);
        }
    }

    fn raise(&self, class: c_int, event: &CStr, key: &Target) {
        match key {
            Target::Main => self.ctx.notify(class, event, self.name.get()),
            Target::Aux(name) => {
                let name = OwnedStr::new(name);
                self.ctx.notify(class, event, name.get());
            }
        }
    }

    /// The next fencing token (`fencing::next_token`, at the server's clock) into the counter
    /// `key`: INCRBY of the difference through Redis itself (it keeps a TTL, rejects
    /// non-integers, raises the `incrby` event), replicated as that INCRBY, so a replica and
    /// the AOF reach the same value.
    fn next_token(&self, key: &Target) -> Result<i64, CmdError> {
        let counter = match self.get_int(key) {
            Int::Is(n) => n,
            Int::NotInt => return Err(CmdError::CorruptToken),
            Int::Absent => 0, // or not a string: INCRBY below refuses it
        };
        let token =
            fencing::next_token(counter, self.ctx.now_ms()).ok_or(CmdError::CorruptToken)?;
        let by = token.checked_sub(counter).ok_or(CmdError::CorruptToken)?;
        let name = self.name_of(key);
        match self.ctx.incr_by(name, by) {
            Ok(t) => {
                debug_assert_eq!(t, token, "the counter read is the one INCRBY changed");
                self.replicate(c"INCRBY", key, &[itoa::Buffer::new().format(by).as_bytes()]);
                Ok(t)
            }
            Err(IncrFailed::WrongType) => Err(CmdError::WrongType),
            Err(IncrFailed::NotInteger) => Err(CmdError::CorruptToken),
            Err(IncrFailed::Refused(why)) => Err(CmdError::TokenRefused(why)),
        }
    }

    /// In a cluster, nothing is written to an object split by a slot migration: the keys it read
    /// absent, and the auxiliary keys it would create, must all be here by Redis' own rule for a
    /// multi-key command (`RedisKeys::whole`). Otherwise a writer would be granted over a reader
    /// whose lease key already moved, or a key created here that the importing node also has.
    fn check_whole(&self, decision: &Decision) -> Result<(), CmdError> {
        if !crate::keys::cluster(self.ctx) {
            return Ok(());
        }
        let mut created: Vec<&[u8]> = Vec::new();
        for w in &decision.writes {
            if let Some(Target::Aux(name)) = w.key() {
                if !created.contains(&name.as_slice())
                    && crate::keys::same_slot(self.name.bytes(), name)
                    && Key::open_bytes(self.ctx, name, false).kind() == KeyType::Empty
                {
                    created.push(name);
                }
            }
        }
        self.whole(&created)
    }

    /// A client command writes only keys its user may write: the command's own key was checked
    /// by Redis (key positions); auxiliary keys are checked here, before anything is written.
    fn check_permissions(&self, decision: &Decision) -> Result<(), CmdError> {
        for w in &decision.writes {
            let delete = matches!(w, Write::Del { .. });
            if let Some(Target::Aux(name)) = w.key() {
                if !self.ctx.may_write_key(name, delete) {
                    return Err(CmdError::NoPerm(name.clone()));
                }
            }
        }
        Ok(())
    }

    /// A timer or an event writes nothing while the server pauses writes (see `paused`), as
    /// Redis' own expiry waits. Behind that, the older, narrower guard: during a pause Redis 7.0
    /// keeps keys whose time has passed (they read as absent but are still stored), and
    /// creating one trips its own assertion.
    fn check_not_paused(&self, decision: &Decision) -> Result<(), CmdError> {
        if !decision.writes.is_empty() && paused::writes(self.ctx) {
            return Err(CmdError::Paused);
        }
        for w in &decision.writes {
            let key = match w {
                Write::HSetInt { key, .. }
                | Write::HSet { key, .. }
                | Write::SetInt { key, .. }
                | Write::NextToken { key }
                | Write::IncrBy { key, .. }
                | Write::ZAdd { key, .. } => key,
                _ => continue,
            };
            if self.kind(key) == KeyType::Empty && self.ctx.key_stored(self.name_of(key)) {
                return Err(CmdError::Paused);
            }
        }
        Ok(())
    }
}

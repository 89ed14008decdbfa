//! The grouped multi-lock's operations (Redisson's `RedissonFasterMultiLock`): one group (a
//! hash) and the field names of its values, taken all or none by one owner. With the module:
//! `RMLOCK.*` (docs/commands.md); over Redisson's protocol: its scripts
//! (`protocol/redisson/group.rs`), waiting on the group's lock channel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use super::{lease_millis, Obj};
use crate::config::Protocol;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::holds::{HoldId, HoldState, Kind};
use crate::owner::{Owner, OwnerPolicy};
use crate::protocol::redisson::group::{self as redisson, now_ms, split_holder};
use crate::protocol::redisson::lock::{read_acquire, Try};
use crate::protocol::redisson::{lock_channel, Script};
use crate::transport::Delivery;
use crate::transport::Io;
use crate::wait::{self, millis, Attempt, Scripted, Wait};

/// Group holds taken with the module, in the hold registry: renewed with `RMLOCK.RENEW`, an
/// orphan given back with `RMLOCK.RELEASE`. The holder names the fields (see
/// [`redisson::holder`]).
pub(crate) static GROUP: Kind = Kind {
    name: crate::holds::GROUP,
    renew: |key, holder, lease_ms, _publish| {
        let (owner, fields) = split_holder(holder);
        module_cmd("RMLOCK.RENEW", key, Some((owner, lease_ms)), &fields)
    },
    release: Some(|key, holder, _publish| {
        let (owner, fields) = split_holder(holder);
        module_cmd("RMLOCK.RELEASE", key, Some((owner, 30_000)), &fields)
    }),
};

/// `name group [owner lease_ms] FIELDS n F1 .. Fn`.
pub(crate) fn module_cmd<S: AsRef<str>>(
    name: &str,
    group: &str,
    owner: Option<(&str, u64)>,
    fields: &[S],
) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(group);
    if let Some((owner, lease_ms)) = owner {
        cmd.arg(owner).arg(lease_ms);
    }
    cmd.arg("FIELDS").arg(fields.len());
    for f in fields {
        cmd.arg(f.as_ref());
    }
    cmd
}

/// `RMLOCK.ACQUIRE group owner lease_ms FIELDS n F.. [BLOCK ms]` (the wait path appends the
/// session's options after it).
fn acquire_cmd(
    group: &str,
    owner: &str,
    lease_ms: u64,
    fields: &[String],
    block: Option<u64>,
) -> Cmd {
    let mut cmd = module_cmd("RMLOCK.ACQUIRE", group, Some((owner, lease_ms)), fields);
    if let Some(ms) = block {
        cmd.arg("BLOCK").arg(ms);
    }
    cmd
}

/// One group and its values' field names, as its operations reach it.
#[derive(Clone, Copy)]
pub(crate) struct Group<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) io: Io,
    pub(crate) name: &'a Arc<str>,
    /// Sorted, without duplicates.
    pub(crate) fields: &'a [String],
    pub(crate) policy: &'a OwnerPolicy,
    pub(crate) anchor: &'a Arc<()>,
}

impl Group<'_> {
    fn obj(&self) -> Obj<'_> {
        Obj {
            ctx: self.ctx,
            io: self.io,
            name: self.name,
        }
    }

    /// The hold of `owner`, as the registry renews it over `protocol`.
    fn hold_in(&self, owner: &Owner, protocol: Protocol) -> HoldId {
        HoldId {
            kind: self.hold_in_kind(protocol),
            key: self.name.clone(),
            holder: Arc::from(redisson::holder(owner.as_str(), self.fields)),
        }
    }

    async fn script<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        keys: &[String],
        args: &[String],
        d: Delivery,
    ) -> Result<T> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.obj().script(script, &keys, &args, d).await
    }

    /// Each value's `[holder, lock_count, expire_time]` of `owner` in the hash (`HMGET`: the
    /// layout is Redisson's in both protocols).
    async fn own_fields(&self, owner: &Owner) -> Result<Vec<Own>> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&**self.name);
        for f in self.fields {
            cmd.arg(f)
                .arg(format!("{f}:{owner}:lock_count"))
                .arg(format!("{f}:{owner}:expire_time"));
        }
        let got: Vec<Option<String>> = self.obj().read(&cmd).await?;
        Ok(got
            .chunks(3)
            .map(|c| Own {
                mine: c[0].as_deref() == Some(owner.as_str()),
                count: c[1].as_deref().and_then(|s| s.parse().ok()).unwrap_or(0),
                expire_ms: c[2].as_deref().and_then(|s| s.parse().ok()),
            })
            .collect())
    }

    /// After an ambiguous acquire: whether `owner` now holds every value more often than the
    /// client counted before (the lowest count of its values; values shared with another of
    /// the owner's groups may count more, which then reads as taken).
    async fn took_effect(&self, owner: &Owner, before: u64) -> Result<bool> {
        let own = self.own_fields(owner).await?;
        Ok(own.iter().all(|o| o.mine) && own.iter().map(|o| o.count).min().unwrap_or(0) > before)
    }
}

/// One value's state for one owner.
struct Own {
    mine: bool,
    count: u64,
    expire_ms: Option<u64>,
}

/// `RMLOCK.ACQUIRE` for one owner.
struct Acquire<'a> {
    g: Group<'a>,
    owner: &'a Owner,
    lease_ms: u64,
    before: u64,
}

impl Attempt for Acquire<'_> {
    fn key(&self) -> &str {
        self.g.name
    }

    fn kind(&self) -> &'static str {
        GROUP.name
    }

    fn command(&self, block: Option<u64>) -> Cmd {
        let g = self.g;
        acquire_cmd(g.name, self.owner.as_str(), self.lease_ms, g.fields, block)
    }

    fn granted(&self, reply: &Value) -> bool {
        !matches!(reply, Value::Nil)
    }

    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        let took = self.g.took_effect(self.owner, self.before).await?;
        Ok(took.then_some(Value::Int(1)))
    }

    async fn give_back(&self, _ctx: &Context) {
        let _ = release(self.g, self.owner).await;
    }
}

/// Redisson's acquire scripts for one owner: `tryLockOnceInnerAsync` for one attempt,
/// `tryLockInnerAsync` (which says how long until the holders' leases end) for a wait.
struct ScriptAcquire<'a> {
    g: Group<'a>,
    owner: &'a Owner,
    lease_ms: u64,
    before: u64,
    once: bool,
}

impl Scripted for ScriptAcquire<'_> {
    fn key(&self) -> &str {
        self.g.name
    }

    fn kind(&self) -> &'static str {
        GROUP.name
    }

    /// Redisson's `getChannelName()`: the lock channel of the group.
    fn channel(&self) -> String {
        lock_channel(self.g.name)
    }

    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>) {
        let g = self.g;
        let args = redisson::acquire_args(
            self.owner.as_str(),
            g.fields,
            self.lease_ms,
            now_ms(),
            self.once,
        );
        let script = match self.once {
            true => &redisson::TRY_LOCK_ONCE,
            false => &redisson::TRY_LOCK,
        };
        (script, vec![g.name.to_string()], args)
    }

    fn read(&self, reply: &Value) -> redis::RedisResult<Try> {
        if !self.once {
            return read_acquire(reply);
        }
        match reply {
            Value::Int(1) => Ok(Try::Granted),
            Value::Int(0) => Ok(Try::Busy(None)),
            other => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected reply to Redisson's grouped multi-lock acquire",
                format!("{other:?}"),
            ))),
        }
    }

    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        let took = self.g.took_effect(self.owner, self.before).await?;
        // The reply that reads as granted.
        Ok(took.then_some(match self.once {
            true => Value::Int(1),
            false => Value::Nil,
        }))
    }

    async fn give_back(&self, _ctx: &Context) {
        let _ = release(self.g, self.owner).await;
    }

    /// Redisson's acquire scripts raise the group's TTL to the lease only when `PTTL` reads
    /// more than 0: a hash due to expire within the millisecond (the previous holder's lease
    /// ending as this one is granted) keeps its TTL, and expires with the grant in it right
    /// after (seen: a waiter granted at a holder's lease end found the hash gone, 4 times in
    /// 14 runs of `a_wait_ends_when_the_holder_unlocks_or_its_lease_ends`, and another
    /// owner could then take the values it believed held). So the TTL is read after a grant:
    /// gone, the grant vanished and the wait goes on; shorter than the lease, it is raised
    /// (`PEXPIRE` answering 0: gone meanwhile, likewise).
    async fn confirm(&self) -> Result<bool> {
        let obj = self.g.obj();
        let mut pttl = redis::cmd("PTTL");
        pttl.arg(&**self.g.name);
        let ttl: i64 = obj.read(&pttl).await?;
        if ttl == -2 {
            return Ok(false);
        }
        if ttl < 0 || ttl >= self.lease_ms as i64 {
            return Ok(true);
        }
        let mut raise = redis::cmd("PEXPIRE");
        raise.arg(&**self.g.name).arg(self.lease_ms);
        Ok(obj.write::<i64>(&raise).await? == 1)
    }
}

/// Acquire every value for `owner` per `lease` (`None`: the watchdog's) and `wait`: the hold's
/// state when granted.
pub(crate) async fn acquire(
    g: Group<'_>,
    owner: &Owner,
    lease: Option<Duration>,
    wait: Wait,
) -> Result<Option<Arc<HoldState>>> {
    let ctx = g.ctx;
    let lease_ms = lease_millis(lease.unwrap_or(ctx.config.watchdog_timeout))?;
    let protocol = g.obj().protocol().await?;
    let id = g.hold_in(owner, protocol);
    let before = ctx.holds.lock().holds(&id);
    let sent = Instant::now();
    let granted = match protocol {
        Protocol::Redisson => {
            let s = ScriptAcquire {
                g,
                owner,
                lease_ms,
                before,
                once: wait == Wait::No,
            };
            let got = wait::acquire_scripted(ctx, g.io, &s, wait).await;
            got.map_err(|e| e.about(g.name, owner.as_str()))?.is_some()
        }
        _ => {
            let a = Acquire {
                g,
                owner,
                lease_ms,
                before,
            };
            let reply = wait::acquire(ctx, g.io, &a, wait)
                .await
                .map_err(|e| e.about(g.name, owner.as_str()))?;
            a.granted(&reply)
        }
    };
    if !granted {
        return Ok(None);
    }
    // The lease runs from the grant (see the lock's acquire).
    let granted_at = match wait {
        Wait::No | Wait::For(Duration::ZERO) => sent,
        _ => Instant::now(),
    };
    let witness = g.policy.witness(g.anchor);
    let state = ctx
        .holds
        .lock()
        .on_acquired_by(&id, before + 1, lease, granted_at, witness);
    Ok(Some(state))
}

/// Release one hold of `owner` on every value: the holds left (0: every value freed).
/// [`Error::NotOwner`] when one value is not the owner's.
pub(crate) async fn release(g: Group<'_>, owner: &Owner) -> Result<u64> {
    let ctx = g.ctx;
    let protocol = g.obj().protocol().await?;
    let id = g.hold_in(owner, protocol);
    let (before, lease_end) = {
        let holds = ctx.holds.lock();
        (holds.holds(&id), holds.lease_end(&id))
    };
    // A partial release sets the values' leases to what is left of the hold's lease, or the
    // watchdog timeout (Redisson: its `internalLockLeaseTime`).
    let lease_ms = match lease_end {
        Some(end) => millis(end.saturating_duration_since(Instant::now())).max(1),
        None => millis(ctx.config.watchdog_timeout),
    };
    let reply: Result<Option<i64>> = match protocol {
        Protocol::Redisson => {
            let publish = ctx.transport.publish_command();
            let (keys, args) = redisson::unlock_words(
                g.name,
                owner.as_str(),
                g.fields,
                lease_ms,
                publish,
                now_ms(),
            );
            // Its unlock latch makes it safe to send again after a broken connection.
            let r = g
                .script(&redisson::UNLOCK, &keys, &args, Delivery::Idempotent)
                .await;
            if r.is_ok() {
                // The latch has served once the reply is here (Redisson deletes it too).
                let mut del = redis::cmd("DEL");
                del.arg(&keys[2]);
                ctx.send_off(keys[0].clone(), del);
            }
            r
        }
        _ => {
            let cmd = module_cmd(
                "RMLOCK.RELEASE",
                g.name,
                Some((owner.as_str(), lease_ms)),
                g.fields,
            );
            g.obj()
                .query(&cmd, owner.as_str(), Delivery::AtMostOnce)
                .await
        }
    };
    let r = match reply.map_err(|e| e.about(g.name, owner.as_str())) {
        Ok(None) => Err(Error::NotOwner {
            name: g.name.to_string(),
            owner: owner.to_string(),
        }),
        // 1: every value freed; 0: still held (re-entry).
        Ok(Some(1)) => Ok(0),
        Ok(Some(_)) => Ok(before.saturating_sub(1).max(1)),
        Err(e) => Err(e),
    };
    let mut holds = ctx.holds.lock();
    match &r {
        Ok(n) => holds.on_released(&id, *n),
        Err(Error::NotOwner { .. }) => holds.forget(&id),
        Err(_) => {}
    }
    r
}

/// Whether `owner`'s current hold was found gone (see `Lock::is_lost`). The registry tells
/// holds apart by kind name, the same in both protocols.
pub(crate) fn is_lost(g: Group<'_>, owner: &Owner) -> bool {
    let id = g.hold_in(owner, Protocol::Module);
    g.ctx.holds.lock().is_lost(&id)
}

/// Free every value whoever holds it: whether one was held.
pub(crate) async fn force_release(g: Group<'_>) -> Result<bool> {
    let ctx = g.ctx;
    let protocol = g.obj().protocol().await?;
    let n: i64 = match protocol {
        Protocol::Redisson => Box::pin(script_force_release(g)).await?,
        _ => {
            let cmd = module_cmd("RMLOCK.FORCERELEASE", g.name, None, g.fields);
            g.obj().read(&cmd).await?
        }
    };
    // Nobody holds these values any more; this client's holds of the group go (Redisson
    // cancels the renewal too).
    ctx.holds
        .lock()
        .forget_key(g.hold_in_kind(protocol), g.name);
    Ok(n > 0)
}

/// Redisson's force-unlock script, given the values held now: it fails on a free value
/// (`..lockName..` with `lockName` false: Redisson's Java gets that error too) after deleting the
/// values before it (a script is not rolled back). A value freed between the read and the
/// script fails it the same way: read again and retry.
async fn script_force_release(g: Group<'_>) -> Result<i64> {
    let publish = g.ctx.transport.publish_command();
    for _ in 0..3 {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&**g.name).arg(g.fields);
        let holders: Vec<Option<String>> = g.obj().read(&cmd).await?;
        let held: Vec<&String> = g
            .fields
            .iter()
            .zip(&holders)
            .filter(|(_, h)| h.is_some())
            .map(|(f, _)| f)
            .collect();
        if held.is_empty() {
            return Ok(0);
        }
        let (keys, args) = redisson::force_unlock_words(g.name, &held, publish);
        match g
            .script::<i64>(&redisson::FORCE_UNLOCK, &keys, &args, Delivery::Idempotent)
            .await
        {
            Ok(n) => return Ok(n),
            // The values before the free one were deleted: what is held now goes next.
            Err(Error::Redis(e)) if e.to_string().contains("lockName") => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(0)
}

impl Group<'_> {
    fn hold_in_kind(&self, protocol: Protocol) -> &'static Kind {
        match protocol {
            Protocol::Redisson => &redisson::GROUP,
            _ => &GROUP,
        }
    }
}

/// `RMLOCK.INFO`'s holder of each value (nil: free, or its lease ended).
async fn holders(g: Group<'_>) -> Result<Vec<Option<String>>> {
    let cmd = module_cmd("RMLOCK.INFO", g.name, None, g.fields);
    let reply: Vec<Vec<Value>> = g.obj().read(&cmd).await?;
    reply
        .into_iter()
        .map(|entry| {
            let holder = entry.get(1).cloned().unwrap_or(Value::Nil);
            redis::from_redis_value::<Option<String>>(holder).map_err(|e| g.obj().error(e.into()))
        })
        .collect()
}

/// Whether any value is held by someone whose lease has not ended (Redisson's `isLocked`).
pub(crate) async fn is_locked(g: Group<'_>) -> Result<bool> {
    match g.obj().protocol().await? {
        Protocol::Redisson => {
            let mut args = vec![now_ms().to_string()];
            args.extend(g.fields.iter().cloned());
            let n: i64 = g
                .script(
                    &redisson::IS_LOCKED,
                    &[g.name.to_string()],
                    &args,
                    Delivery::Idempotent,
                )
                .await?;
            Ok(n == 1)
        }
        _ => Ok(holders(g).await?.iter().any(Option::is_some)),
    }
}

/// Whether `owner` holds every value, its lease not ended. Over Redisson's protocol from the
/// hash (`HMGET`) by this client's clock, as Redisson's `isHeldByThread` reads it (its script
/// skips the first value: its loop starts at `ARGV[4]` where the values start at `ARGV[3]`,
/// so with one value it answers true for anyone while the hash exists; not copied).
pub(crate) async fn is_held_by(g: Group<'_>, owner: &Owner) -> Result<bool> {
    match g.obj().protocol().await? {
        Protocol::Redisson => {
            let now = now_ms();
            let own = g.own_fields(owner).await?;
            Ok(own
                .iter()
                .all(|o| o.mine && o.expire_ms.is_some_and(|t| t >= now)))
        }
        _ => {
            let holders = holders(g).await?;
            Ok(holders.iter().all(|h| h.as_deref() == Some(owner.as_str())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn module_commands_follow_the_spec() {
        let f = vec!["AA".to_string(), "BB".to_string()];
        assert_eq!(
            words(&acquire_cmd("g", "u:1", 30_000, &f, None)),
            [
                "RMLOCK.ACQUIRE",
                "g",
                "u:1",
                "30000",
                "FIELDS",
                "2",
                "AA",
                "BB"
            ]
        );
        assert_eq!(
            words(&acquire_cmd("g", "u:1", 5, &f, Some(0)))[8..],
            ["BLOCK", "0"]
        );
        assert_eq!(
            words(&module_cmd("RMLOCK.FORCERELEASE", "g", None, &f)),
            ["RMLOCK.FORCERELEASE", "g", "FIELDS", "2", "AA", "BB"]
        );
        let holder = redisson::holder("u:1", &f);
        assert_eq!(
            words(&(GROUP.renew)("g", &holder, 10, "PUBLISH")),
            ["RMLOCK.RENEW", "g", "u:1", "10", "FIELDS", "2", "AA", "BB"]
        );
        let id = HoldId {
            kind: &GROUP,
            key: Arc::from("g"),
            holder: Arc::from(redisson::holder("a b:1", &f)),
        };
        assert_eq!(
            id.owner(),
            "a b:1",
            "the registry finds a group hold's owner"
        );
        let release = GROUP.release.unwrap();
        assert_eq!(
            words(&release("g", &holder, "PUBLISH"))[..4],
            ["RMLOCK.RELEASE", "g", "u:1", "30000"]
        );
    }
}

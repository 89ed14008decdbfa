//! The lock's operations: requests built, sent through the transport and the wait path,
//! replies read, and the hold registry kept in step. For Redisson's `RLock` (`RLOCK.*`) and for
//! each side of a read-write lock (`RRWLOCK.*`, whose commands and fields come from
//! `ops/rwlock.rs`): the same operations, the [`Flavor`] picks the commands.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, Value};

use super::rwlock::{self, Side};
use super::{lease_millis, prefix_name, Obj};
use crate::config::Protocol;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::holds::{held_after_renewal, HoldId, HoldState, Kind};
use crate::owner::{Owner, OwnerPolicy};
use crate::protocol::redisson::fair::{self, Polls};
use crate::protocol::redisson::lock::{self as redisson, Try};
use crate::protocol::redisson::rwlock as redisson_rw;
use crate::protocol::redisson::Script;
use crate::transport::{Delivery, Io};
use crate::wait::{self, millis, Attempt, Scripted, Wait};

/// Locks in the hold registry: renewed with `RLOCK.RENEW`.
pub(crate) static LOCK: Kind = Kind {
    name: "lock",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: Some(|name, owner, _| release_cmd(name, owner)),
};

/// `RLOCK.RELEASE name owner`: the holds left.
fn release_cmd(name: &str, owner: &str) -> Cmd {
    super::keyed_cmd("RLOCK.RELEASE", name, owner)
}

fn renew_cmd(name: &str, owner: &str, lease_ms: u64) -> Cmd {
    let mut cmd = redis::cmd("RLOCK.RENEW");
    cmd.arg(name).arg(owner).arg(lease_ms);
    cmd
}

/// The fencing token counter of a lock (Redisson `RFencedLock`).
pub(crate) fn token_key(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// Which lock a handle is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Redisson's `RLock`; with `fence`, every acquire takes a fencing token (`RFencedLock`);
    /// without `reentrant`, a second acquire by the holder is refused
    /// (`RedissonNonReentrantLock`, never fenced); `fair`: Redisson's `RFairLock` (the
    /// module's queue is always fair, so only Redisson's protocol tells them apart).
    Exclusive {
        fence: bool,
        reentrant: bool,
        fair: bool,
    },
    /// One side of a read-write lock (`RReadWriteLock.readLock()` / `writeLock()`).
    Rw(Side),
}

impl Flavor {
    pub(crate) fn fenced(self) -> bool {
        matches!(self, Flavor::Exclusive { fence: true, .. })
    }

    /// Redisson's `RFairLock` (its own scripts and queue over Redisson's protocol).
    fn fair(self) -> bool {
        matches!(self, Flavor::Exclusive { fair: true, .. })
    }

    /// Whether a holder's second acquire is refused.
    pub(crate) fn refuses_reentry(self) -> bool {
        matches!(
            self,
            Flavor::Exclusive {
                reentrant: false,
                ..
            }
        )
    }

    fn kind(self) -> &'static Kind {
        match self {
            Flavor::Exclusive { .. } => &LOCK,
            Flavor::Rw(side) => rwlock::kind(side),
        }
    }

    /// The command that sets `owner`'s lease to `lease_ms` (the watchdog's); `publish` is the
    /// deployment's publish command.
    pub(crate) fn renew_cmd(
        self,
        name: &str,
        owner: &str,
        lease_ms: u64,
        publish: &'static str,
    ) -> Cmd {
        (self.kind().renew)(name, owner, lease_ms, publish)
    }
}

/// One lock, as its operations reach it.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) io: Io,
    pub(crate) name: &'a Arc<str>,
    pub(crate) flavor: Flavor,
    /// How the handle finds its owner, and the anchor its clones share: together, what
    /// shows that a hold it takes can still be released ([`OwnerPolicy::witness`]).
    pub(crate) policy: &'a OwnerPolicy,
    pub(crate) anchor: &'a Arc<()>,
}

impl Target<'_> {
    fn hold(&self, owner: &Owner) -> HoldId {
        self.hold_in(owner, Protocol::Module)
    }

    /// The hold, as the registry renews it over `protocol` (the same hold whichever).
    fn hold_in(&self, owner: &Owner, protocol: Protocol) -> HoldId {
        let kind = match (protocol, self.flavor) {
            (Protocol::Redisson, Flavor::Rw(side)) => redisson_rw::kind(side),
            (Protocol::Redisson, f) if f.fair() => &fair::FAIR_LOCK,
            (Protocol::Redisson, _) => &redisson::LOCK,
            _ => self.flavor.kind(),
        };
        HoldId {
            kind,
            key: self.name.clone(),
            holder: owner.shared(),
        }
    }

    /// The protocol the lock's server gets ([`Protocol::Module`] or [`Protocol::Redisson`]);
    /// a lock Redisson's protocol can't serve yet fails here, before anything is sent about it.
    async fn protocol(&self) -> Result<Protocol> {
        let ctx = self.ctx;
        ctx.protocols
            .at(&ctx.transport, &ctx.bg, self.io, self.name)
            .await
    }

    /// The hash field that counts `owner`'s holds.
    fn field<'o>(&self, owner: &'o Owner) -> std::borrow::Cow<'o, str> {
        match self.flavor {
            Flavor::Exclusive { .. } => owner.as_str().into(),
            Flavor::Rw(side) => rwlock::field(owner.as_str(), side),
        }
    }

    fn obj(&self) -> Obj<'_> {
        Obj {
            ctx: self.ctx,
            io: self.io,
            name: self.name,
        }
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd, owner: &str, d: Delivery) -> Result<T> {
        self.obj().query(cmd, owner, d).await
    }

    async fn read<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.obj().read(cmd).await
    }
}

/// A granted acquire.
pub(crate) struct Granted {
    /// The hold count, or the fencing token of a fenced acquire.
    pub(crate) value: i64,
    pub(crate) state: Arc<HoldState>,
}

/// `RLOCK.ACQUIRE name owner lease_ms [BLOCK ms] [FENCE]`, or the read-write lock's.
fn acquire_cmd(name: &str, owner: &str, lease_ms: u64, block: Option<u64>, f: Flavor) -> Cmd {
    let fence = match f {
        Flavor::Exclusive { fence, .. } => fence,
        Flavor::Rw(side) => return rwlock::acquire_cmd(name, owner, side, lease_ms, block),
    };
    let mut cmd = super::keyed_cmd("RLOCK.ACQUIRE", name, owner);
    cmd.arg(lease_ms);
    if let Some(ms) = block {
        cmd.arg("BLOCK").arg(ms);
    }
    if fence {
        cmd.arg("FENCE");
    }
    cmd
}

/// The session's word for the object a flavor's commands act on (`RLOCK.*`, `RRWLOCK.*`).
fn object(f: Flavor) -> &'static str {
    match f {
        Flavor::Exclusive { .. } => "lock",
        Flavor::Rw(_) => "rwlock",
    }
}

/// An acquire's reply: the hold count or fencing token, `None` when not granted.
fn grant_of(reply: Value) -> redis::RedisResult<Option<i64>> {
    Ok(Option::<i64>::from_redis_value(reply)?)
}

/// `RLOCK.ACQUIRE` for one owner.
struct Acquire<'a> {
    t: Target<'a>,
    owner: &'a Owner,
    lease_ms: u64,
    /// The owner's holds before (to tell whether an ambiguous attempt took effect).
    before: u64,
}

impl Attempt for Acquire<'_> {
    fn key(&self) -> &str {
        self.t.name
    }

    fn shared_key(&self) -> Arc<str> {
        self.t.name.clone()
    }

    fn kind(&self) -> &'static str {
        self.t.flavor.kind().name
    }

    fn command(&self, block: Option<u64>) -> Cmd {
        let t = self.t;
        acquire_cmd(t.name, self.owner.as_str(), self.lease_ms, block, t.flavor)
    }

    /// What `wire::object_of` reads from the command's name, without reading it.
    fn object(&self, _cmd: &Cmd) -> Option<&'static str> {
        Some(object(self.t.flavor))
    }

    fn granted(&self, reply: &Value) -> bool {
        !matches!(reply, Value::Nil)
    }

    /// The owner's count went above what it was: granted (with the token now current).
    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        let now = holds_of(self.t, self.owner).await?;
        if now <= self.before {
            return Ok(None);
        }
        if self.t.flavor.fenced() {
            let token = token(self.t).await?.unwrap_or(0);
            return Ok(Some(Value::Int(token as i64)));
        }
        Ok(Some(Value::Int(now as i64)))
    }

    async fn give_back(&self, _ctx: &Context) {
        let _ = release(self.t, self.owner).await;
    }
}

/// Redisson's acquire script for one owner (Redisson's protocol): `RLock`'s, `RFencedLock`'s,
/// `RedissonNonReentrantLock`'s or `RFairLock`'s, per the flavor.
struct ScriptAcquire<'a> {
    t: Target<'a>,
    owner: &'a Owner,
    lease_ms: u64,
    /// The owner's holds before (to tell whether an ambiguous attempt took effect).
    before: u64,
    /// A fair lock: whether the attempt queues the owner (it may wait), and Redisson's
    /// `threadWaitTime` it queues with.
    queues: bool,
    wait_ms: u64,
    polls: Polls,
}

impl Scripted for ScriptAcquire<'_> {
    fn key(&self) -> &str {
        self.t.name
    }

    fn kind(&self) -> &'static str {
        self.t.flavor.kind().name
    }

    /// The lock's channel; a fair lock's waiter is told on its own.
    fn channel(&self) -> String {
        let name = self.t.name;
        match self.t.flavor {
            Flavor::Rw(_) => redisson_rw::channel(name),
            f if f.fair() => fair::owner_channel(name, self.owner.as_str()),
            Flavor::Exclusive { .. } => crate::protocol::redisson::lock_channel(name),
        }
    }

    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>) {
        let (name, owner) = (self.t.name, self.owner.as_str());
        let lease = self.lease_ms.to_string();
        match self.t.flavor {
            Flavor::Rw(side) => redisson_rw::acquire_words(name, owner, side, self.lease_ms),
            f if f.fair() => {
                fair::acquire_words(name, owner, self.lease_ms, self.wait_ms, self.queues)
            }
            f if f.fenced() => (
                &redisson::FENCED_ACQUIRE,
                vec![name.to_string(), token_key(name)],
                vec![lease, owner.to_string()],
            ),
            f if f.refuses_reentry() => (
                &redisson::NON_REENTRANT_ACQUIRE,
                vec![name.to_string()],
                vec![lease, owner.to_string(), redisson::REENTRY_ERR.to_string()],
            ),
            _ => (
                &redisson::ACQUIRE,
                vec![name.to_string()],
                vec![lease, owner.to_string()],
            ),
        }
    }

    fn read(&self, reply: &Value) -> redis::RedisResult<Try> {
        match self.t.flavor {
            f if f.fair() => fair::read_acquire(reply, &self.polls),
            f if f.fenced() => Ok(redisson::read_fenced(reply)?.0),
            _ => redisson::read_acquire(reply),
        }
    }

    /// The owner's count went above what it was: granted (the script's granting reply).
    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        let now = holds_of(self.t, self.owner).await?;
        if now <= self.before {
            return Ok(None);
        }
        if self.t.flavor.fenced() {
            let token = token(self.t).await?.unwrap_or(0);
            return Ok(Some(Value::Array(vec![
                Value::Int(-1),
                Value::Int(token as i64),
            ])));
        }
        Ok(Some(Value::Nil))
    }

    async fn give_back(&self, _ctx: &Context) {
        let _ = release(self.t, self.owner).await;
    }
}

/// A fair waiter in Redisson's queue, from its first attempt that may queue it until it is
/// granted. A wait that ends otherwise (its time is up, it is cancelled or dropped, an error)
/// takes it off the queue with Redisson's removal script, so that it does not hold up those
/// behind it until its deadline, and tells the new first waiter if the lock is free (an unlock
/// may have told this one). Dropped armed, it does so before the drop returns.
struct FairQueued<'a> {
    t: Target<'a>,
    owner: &'a Owner,
    wait_ms: u64,
    armed: bool,
}

impl FairQueued<'_> {
    async fn leave(&mut self) {
        self.armed = false;
        let t = self.t;
        let (keys, args) = fair::acquire_failed_words(t.name, self.owner.as_str(), self.wait_ms);
        let (hkeys, hargs) = fair::hand_on_words(t.name, t.ctx.transport.publish_command());
        let left = async {
            run_script::<()>(t, &fair::ACQUIRE_FAILED, &keys, &args).await?;
            run_script::<i64>(t, &fair::HAND_ON, &hkeys, &hargs).await
        };
        if let Err(e) = left.await {
            // Its deadline drops it from the queue anyway.
            tracing::debug!(
                key = %t.name,
                error = %e,
                "rlock: a fair waiter could not leave Redisson's queue"
            );
        }
    }
}

impl Drop for FairQueued<'_> {
    fn drop(&mut self) {
        if self.armed {
            let bg = &self.t.ctx.bg;
            bg.block_on(self.leave());
        }
    }
}

/// One of Redisson's scripts about the lock, retried as a read is (each is safe to run again).
async fn run_script<T: FromRedisValue>(
    t: Target<'_>,
    script: &Script,
    keys: &[String],
    args: &[String],
) -> Result<T> {
    let ctx = t.ctx;
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    script
        .run(
            &ctx.transport,
            &ctx.bg,
            t.io,
            &keys,
            &args,
            Delivery::Idempotent,
        )
        .await
}

/// Acquire for `owner` per `lease` (`None`: the watchdog's) and `wait`. `None`: not granted.
pub(crate) async fn acquire(
    t: Target<'_>,
    owner: &Owner,
    lease: Option<Duration>,
    wait: Wait,
) -> Result<Option<Granted>> {
    let ctx = t.ctx;
    let lease_ms = lease_millis(lease.unwrap_or(ctx.config.watchdog_timeout))?;
    let protocol = t.protocol().await?;
    let id = t.hold_in(owner, protocol);
    let before = ctx.holds.lock().holds(&id);
    let refuse = t.flavor.refuses_reentry();
    if refuse && before > 0 {
        return Err(not_reentrant(t, owner));
    }
    if protocol == Protocol::Redisson && t.flavor == Flavor::Rw(Side::Write) && before == 0 {
        upgrade_check(t, owner)?;
    }
    let sent = Instant::now();
    let granted = match protocol {
        // Boxed: its state would make every acquire's future larger (see
        // `an_awaited_acquire_stays_small`), module mode's included.
        Protocol::Redisson => Box::pin(script_acquire(t, owner, lease_ms, before, wait)).await?,
        _ => {
            let a = Acquire {
                t,
                owner,
                lease_ms,
                before,
            };
            let reply = wait::acquire(ctx, t.io, &a, wait)
                .await
                .map_err(|e| e.about(t.name, owner.as_str()))?;
            grant_of(reply).map_err(|e| ctx.transport.error(e, t.name))?
        }
    };
    let Some(value) = granted else {
        return Ok(None);
    };
    // The lease runs from the grant: at the latest when the reply came for a wait, at the
    // earliest when the request left for an attempt that did not wait.
    let granted_at = match wait {
        Wait::No | Wait::For(Duration::ZERO) => sent,
        _ => Instant::now(),
    };
    let holds = if t.flavor.fenced() {
        before + 1
    } else {
        value.max(1) as u64
    };
    let state = {
        let witness = t.policy.witness(t.anchor);
        ctx.holds
            .lock()
            .on_acquired_by(&id, holds, lease, granted_at, witness)
    };
    // Ours to give back until the caller has it (it may go away while replicas sync).
    let mut unclaimed = Unclaimed {
        t,
        owner,
        armed: true,
    };
    if let Some(timeout) = ctx.config.replica_sync {
        // Boxed, as the paths below off the usual one: see `wait::acquire_untraced`.
        if let Err(e) = Box::pin(sync_replicas(t, &id, lease_ms, timeout)).await {
            unclaimed.armed = false;
            let _ = Box::pin(release(t, owner)).await;
            return Err(e);
        }
    }
    unclaimed.armed = false;
    // Held already although this client did not know (a hold count above 1): give the
    // re-entry back, keeping the first hold.
    if refuse && value > 1 {
        Box::pin(release(t, owner)).await?;
        return Err(not_reentrant(t, owner));
    }
    Ok(Some(Granted { value, state }))
}

/// Redisson's write lock waits forever for a reader asking for it (an upgrade: the read hold
/// it keeps blocks it); the module refuses it with `DEADLOCK`. Over Redisson's protocol the
/// client refuses it the same way when it knows the owner reads and does not write.
fn upgrade_check(t: Target<'_>, owner: &Owner) -> Result<()> {
    let reading = HoldId {
        kind: redisson_rw::kind(Side::Read),
        key: t.name.clone(),
        holder: owner.shared(),
    };
    if t.ctx.holds.lock().holds(&reading) == 0 {
        return Ok(());
    }
    Err(Error::Deadlock {
        name: t.name.to_string(),
        message: format!(
            "{owner} holds the read lock of '{}' and asks for its write lock (an upgrade): \
             it would wait for itself forever",
            t.name
        ),
    })
}

/// The acquire over Redisson's protocol: the hold count (the scripts say nothing of it: this
/// client's own, plus this one) or the fencing token; `None` when not granted.
async fn script_acquire(
    t: Target<'_>,
    owner: &Owner,
    lease_ms: u64,
    before: u64,
    wait: Wait,
) -> Result<Option<i64>> {
    let queues = match wait {
        Wait::No => false,
        Wait::For(d) => !d.is_zero(),
        Wait::Forever => true,
    };
    // Redisson's `threadWaitTime`: the caller's wait, or `fairLockWaitTimeout`.
    let wait_ms = match wait {
        Wait::For(d) if !d.is_zero() => millis(d),
        _ => millis(fair::WAIT_TIMEOUT),
    };
    let a = ScriptAcquire {
        t,
        owner,
        lease_ms,
        before,
        queues,
        wait_ms,
        polls: Polls::default(),
    };
    let mut queued = FairQueued {
        t,
        owner,
        wait_ms,
        armed: queues && t.flavor.fair(),
    };
    let got = wait::acquire_scripted(t.ctx, t.io, &a, wait).await;
    if queued.armed && !matches!(got, Ok(Some(_))) {
        Box::pin(queued.leave()).await;
    }
    queued.armed = false;
    let Some(reply) = got.map_err(|e| e.about(t.name, owner.as_str()))? else {
        return Ok(None);
    };
    if t.flavor.fenced() {
        let (_, token) =
            redisson::read_fenced(&reply).map_err(|e| t.ctx.transport.error(e, t.name))?;
        return Ok(token);
    }
    Ok(Some(before as i64 + 1))
}

fn not_reentrant(t: Target<'_>, owner: &Owner) -> Error {
    Error::NotReentrant {
        name: t.name.to_string(),
        owner: owner.to_string(),
    }
}

/// A grant the caller has not received yet; dropped armed, it is released before the drop
/// returns.
struct Unclaimed<'a> {
    t: Target<'a>,
    owner: &'a Owner,
    armed: bool,
}

impl Drop for Unclaimed<'_> {
    fn drop(&mut self) {
        if self.armed {
            let (t, owner) = (self.t, self.owner);
            t.ctx.bg.block_on(async {
                let _ = release(t, owner).await;
            });
        }
    }
}

/// `RLOCK.RELEASE` (Redisson's unlock script in its protocol): the holds `owner` has left.
pub(crate) async fn release(t: Target<'_>, owner: &Owner) -> Result<u64> {
    let ctx = t.ctx;
    let protocol = t.protocol().await?;
    let id = t.hold_in(owner, protocol);
    let before = ctx.holds.lock().holds(&id);
    let r = match protocol {
        Protocol::Redisson => Box::pin(script_release(t, &id, owner, before)).await,
        _ => module_release(t, owner, before).await,
    };
    let mut holds = ctx.holds.lock();
    match &r {
        Ok(n) => holds.on_released(&id, *n),
        Err(Error::NotOwner { .. }) => holds.forget(&id),
        Err(_) => {}
    }
    r
}

async fn module_release(t: Target<'_>, owner: &Owner, before: u64) -> Result<u64> {
    let ctx = t.ctx;
    let cmd = match t.flavor {
        Flavor::Exclusive { .. } => release_cmd(t.name, owner.as_str()),
        Flavor::Rw(side) => rwlock::release_cmd(t.name, owner.as_str(), side),
    };
    ctx.transport
        .policy
        .at_most_once(
            &ctx.bg,
            || async {
                let n: i64 = t.query(&cmd, owner.as_str(), Delivery::AtMostOnce).await?;
                Ok(n.max(0) as u64)
            },
            || released_meanwhile(t, owner, before),
        )
        .await
}

/// After a broken connection: whether `owner`'s release took effect before it broke (its
/// holds fell below `before`), and the holds left if so.
async fn released_meanwhile(t: Target<'_>, owner: &Owner, before: u64) -> Result<Option<u64>> {
    let now = holds_of(t, owner).await?;
    Ok((before > 0 && now < before).then_some(now))
}

/// Redisson's unlock script (`RFairLock`'s for a fair lock: it tells the first waiter, and
/// answers 1 when the lock no longer exists, as Redisson's does). A partial release sets the
/// lease to what is left of the hold's lease, or the watchdog timeout (Redisson: its
/// `internalLockLeaseTime`).
///
/// The script sets an unlock latch, which Redisson deletes once the reply is in. Here the
/// latch's `DEL` is written behind the script in the same write: sent on its own it cost a
/// round trip's worth per unlock (`rlock-bench --only "redisson mode"`, R1: 116 µs a pair
/// against 85 µs without it, on a 2-core machine), and awaited it was one more round trip.
/// With the latch gone at once, it cannot answer a resent unlock, so after a broken connection
/// the release is checked as the module's is: by the owner's count of holds, before sending
/// again (a latch left by a break between the two commands ends with its TTL).
async fn script_release(t: Target<'_>, id: &HoldId, owner: &Owner, before: u64) -> Result<u64> {
    let ctx = t.ctx;
    let lease_end = ctx.holds.lock().lease_end(id);
    let lease_ms = match lease_end {
        Some(end) => millis(end.saturating_duration_since(Instant::now())).max(1),
        None => millis(ctx.config.watchdog_timeout),
    };
    let publish = ctx.transport.publish_command();
    let (script, keys, args): (_, Vec<String>, Vec<String>) = match t.flavor {
        Flavor::Rw(side) => {
            redisson_rw::unlock_words(t.name, owner.as_str(), side, lease_ms, publish)
        }
        f if f.fair() => {
            let (k, a) = fair::unlock_words(t.name, owner.as_str(), lease_ms, publish);
            (&fair::UNLOCK, k.into(), a.into())
        }
        Flavor::Exclusive { .. } => {
            let (k, a) = redisson::unlock_words(t.name, owner.as_str(), lease_ms, publish);
            (&redisson::UNLOCK, k.into(), a.into())
        }
    };
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let args: Vec<&[u8]> = args.iter().map(String::as_bytes).collect();
    // The unlock latch is the last key.
    let mut del = redis::cmd("DEL");
    del.arg(*keys.last().expect("an unlock latch"));
    ctx.transport
        .policy
        .at_most_once(
            &ctx.bg,
            || async {
                let reply: Option<i64> = script
                    .run_bytes(
                        &ctx.transport,
                        &ctx.bg,
                        t.io,
                        &keys,
                        &args,
                        Some(&del),
                        Delivery::AtMostOnce,
                    )
                    .await
                    .map_err(|e| e.about(t.name, owner.as_str()))?;
                let Some(n) = reply else {
                    return Err(Error::NotOwner {
                        name: t.name.to_string(),
                        owner: owner.to_string(),
                    });
                };
                Ok(match t.flavor {
                    // 1: the lock was freed; 0: still held, by this owner or by other readers:
                    // the script does not say which, this client's count does.
                    Flavor::Rw(Side::Read) => before.saturating_sub(1),
                    // 1: the owner's last hold went; 0: still held (the script does not say how
                    // often).
                    _ if n == 1 => 0,
                    _ => before.saturating_sub(1).max(1),
                })
            },
            || released_meanwhile(t, owner, before),
        )
        .await
}

/// Set `owner`'s lease to `lease` from now (`RLOCK.RENEW`, `RRWLOCK.RENEW`): whether it still
/// held the lock. The hold's lease end is moved to match.
pub(crate) async fn renew(t: Target<'_>, owner: &Owner, lease: Duration) -> Result<bool> {
    let ctx = t.ctx;
    let lease_ms = lease_millis(lease)?;
    let protocol = t.protocol().await?;
    let id = t.hold_in(owner, protocol);
    let at = Instant::now();
    let reply: Value = match protocol {
        Protocol::Redisson => {
            let (script, keys, args) = match t.flavor {
                Flavor::Rw(side) => {
                    redisson_rw::renew_words(t.name, owner.as_str(), side, lease_ms)
                }
                Flavor::Exclusive { .. } => (
                    &redisson::RENEW,
                    vec![t.name.to_string()],
                    vec![lease_ms.to_string(), owner.as_str().to_string()],
                ),
            };
            run_script(t, script, &keys, &args).await?
        }
        _ => {
            t.read(&t.flavor.renew_cmd(
                t.name,
                owner.as_str(),
                lease_ms,
                t.ctx.transport.publish_command(),
            ))
            .await?
        }
    };
    let mut holds = ctx.holds.lock();
    let held = holds.holds(&id);
    // Held as this client knows it (a hold whose lease ended by this client's clock is not).
    let renewed = held_after_renewal(&reply) && held > 0;
    if renewed {
        holds.on_acquired(&id, held, Some(lease), at);
    }
    Ok(renewed)
}

/// `RLOCK.FORCERELEASE` (a read-write lock: deleted only in this side's mode, see
/// [`rwlock::force_release_cmd`]): whether a lock was deleted.
pub(crate) async fn force_release(t: Target<'_>) -> Result<bool> {
    if t.protocol().await? == Protocol::Redisson {
        let ctx = t.ctx;
        let publish = ctx.transport.publish_command();
        let n: i64 = match t.flavor {
            // Redisson's: deleted only in this side's mode.
            Flavor::Rw(side) => {
                let (script, keys, args) = redisson_rw::force_unlock_words(t.name, side, publish);
                run_script(t, script, &keys, &args).await?
            }
            f if f.fair() => {
                let (keys, args) = fair::force_unlock_words(t.name, publish);
                run_script(t, &fair::FORCE_UNLOCK, &keys, &args).await?
            }
            Flavor::Exclusive { .. } => {
                let (keys, args) = redisson::force_unlock_words(t.name, publish);
                run_script(t, &redisson::FORCE_UNLOCK, &keys, &args).await?
            }
        };
        if n == 1 {
            forget_all(t);
        }
        return Ok(n == 1);
    }
    let cmd = match t.flavor {
        Flavor::Exclusive { .. } => {
            let mut cmd = redis::cmd("RLOCK.FORCERELEASE");
            cmd.arg(&**t.name);
            cmd
        }
        Flavor::Rw(side) => rwlock::force_release_cmd(t.name, side),
    };
    let n: i64 = t.read(&cmd).await?;
    if n == 1 {
        forget_all(t);
    }
    Ok(n == 1)
}

/// The lock was deleted: no hold of it is left in the registry (of a read-write lock: both
/// sides; kinds are one by name whichever protocol took the hold).
fn forget_all(t: Target<'_>) {
    let mut holds = t.ctx.holds.lock();
    match t.flavor {
        Flavor::Exclusive { .. } => holds.forget_key(&LOCK, t.name),
        Flavor::Rw(_) => {
            holds.forget_key(&rwlock::READ, t.name);
            holds.forget_key(&rwlock::WRITE, t.name);
        }
    }
}

/// `HGET name field` as a count (0 when absent).
pub(crate) async fn holds_of(t: Target<'_>, owner: &Owner) -> Result<u64> {
    t.protocol().await?;
    let mut cmd = redis::cmd("HGET");
    cmd.arg(&**t.name).arg(&*t.field(owner));
    Ok(t.read::<Option<u64>>(&cmd).await?.unwrap_or(0))
}

/// `EXISTS name`; for a side of a read-write lock, whether that side is held (`RRWLOCK.INFO`).
pub(crate) async fn is_locked(t: Target<'_>) -> Result<bool> {
    let protocol = t.protocol().await?;
    match t.flavor {
        Flavor::Exclusive { .. } => {
            let mut cmd = redis::cmd("EXISTS");
            cmd.arg(&**t.name);
            Ok(t.read::<i64>(&cmd).await? == 1)
        }
        // Redisson's: a read hold exists (its script), or the mode is `write`.
        Flavor::Rw(Side::Read) if protocol == Protocol::Redisson => {
            let ctx = t.ctx;
            let n: i64 = redisson_rw::READ_IS_LOCKED
                .run(
                    &ctx.transport,
                    &ctx.bg,
                    t.io,
                    &[t.name],
                    &[],
                    Delivery::Idempotent,
                )
                .await?;
            Ok(n == 1)
        }
        Flavor::Rw(Side::Write) if protocol == Protocol::Redisson => {
            let mut cmd = redis::cmd("HGET");
            cmd.arg(&**t.name).arg("mode");
            Ok(t.read::<Option<String>>(&cmd).await?.as_deref() == Some("write"))
        }
        Flavor::Rw(side) => {
            let info: Value = t.read(&rwlock::info_cmd(t.name)).await?;
            rwlock::side_locked(&info, side).map_err(|e| t.ctx.transport.error(e, t.name))
        }
    }
}

/// `HEXISTS name field`.
pub(crate) async fn is_held_by(t: Target<'_>, owner: &Owner) -> Result<bool> {
    t.protocol().await?;
    let mut cmd = redis::cmd("HEXISTS");
    cmd.arg(&**t.name).arg(&*t.field(owner));
    Ok(t.read::<i64>(&cmd).await? == 1)
}

/// `PTTL name` (Redis: -2 absent, -1 no expiry).
pub(crate) async fn pttl(t: Target<'_>) -> Result<i64> {
    t.protocol().await?;
    let mut cmd = redis::cmd("PTTL");
    cmd.arg(&**t.name);
    t.read(&cmd).await
}

/// `GET redisson_lock_token:{name}`: the last fencing token handed out.
pub(crate) async fn token(t: Target<'_>) -> Result<Option<u64>> {
    t.protocol().await?;
    let mut cmd = redis::cmd("GET");
    cmd.arg(token_key(t.name));
    t.read(&cmd).await
}

/// Whether the registry says `owner`'s hold is lost (see `HoldState::is_lost`).
pub(crate) fn is_lost(t: Target<'_>, owner: &Owner) -> bool {
    t.ctx.holds.lock().is_lost(&t.hold(owner))
}

/// Replica sync after an acquire (Redisson's `checkLockSyncedSlaves`). On a connection of its
/// own (WAIT blocks it): `RLOCK.RENEW` re-writes the lease so this connection's replication
/// offset covers the acquire (a grant to a waiter is written while serving another client),
/// then `WAIT <connected replicas> <timeout>`. No acknowledgement while replicas are connected,
/// a hold already gone when the renewal ran, or a lease that ended before `WAIT` answered (the
/// failover torture found holders that went on after their lease had run out during a slow
/// `WAIT`, overlapping the next holder): the caller undoes the acquire.
async fn sync_replicas(t: Target<'_>, id: &HoldId, lease_ms: u64, timeout: Duration) -> Result<()> {
    let ctx = t.ctx;
    let wait_ms = millis(timeout).max(1);
    let lease = Duration::from_millis(lease_ms);
    let synced = ctx
        .transport
        .policy
        .run(&ctx.bg, Delivery::Idempotent, |to| async move {
            let at = to.as_ref().map(|r| match r {
                crate::transport::Redirect::Moved(a) | crate::transport::Redirect::Ask(a) => {
                    a.as_str()
                }
            });
            let mut w = ctx.transport.waiter(t.io, t.name, at).await?;
            let mut pipe = redis::pipe();
            // The hold's kind's renew command: `RLOCK.RENEW`, or Redisson's renewal script.
            pipe.add_command((id.kind.renew)(
                t.name,
                &id.holder,
                lease_ms,
                t.ctx.transport.publish_command(),
            ));
            pipe.cmd("INFO").arg("replication");
            // The renewed lease runs from no earlier than this.
            let renewed_at = Instant::now();
            let mut replies = w.query_all(pipe).await?.into_iter();
            let (Some(renewed), Some(info)) = (replies.next(), replies.next()) else {
                return Ok(Synced::Lost);
            };
            if !held_after_renewal(&renewed) {
                return Ok(Synced::Lost);
            }
            let info = String::from_redis_value(info)?;
            let replicas = info
                .lines()
                .find_map(|l| l.strip_prefix("connected_slaves:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            if replicas == 0 {
                return Ok(Synced::Acked);
            }
            let mut pipe = redis::pipe();
            pipe.cmd("WAIT").arg(replicas).arg(wait_ms);
            let acked = i64::from_redis_value(w.query(pipe).await?)?;
            Ok(if renewed_at.elapsed() >= lease {
                Synced::Lost
            } else if acked > 0 {
                Synced::Acked
            } else {
                Synced::NotAcked(replicas)
            })
        })
        .await
        .map_err(|e| ctx.transport.error(e, t.name))?;
    match synced {
        Synced::Acked => Ok(()),
        Synced::Lost => Err(Error::LeaseEndedBeforeSync {
            name: t.name.to_string(),
            lease,
        }),
        Synced::NotAcked(replicas) => Err(Error::NoSyncedReplicas {
            name: t.name.to_string(),
            replicas,
            timeout,
        }),
    }
}

/// How a replica sync ended.
enum Synced {
    /// Acknowledged by a replica (or no replica is connected), within the lease.
    Acked,
    /// The hold was gone when the sync began, or its lease ended before `WAIT` answered.
    Lost,
    /// None of this many connected replicas acknowledged within the timeout.
    NotAcked(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    /// A task awaiting an acquire holds its whole state. The paths off the usual one (a
    /// queued wait's outcome, "did it take effect?", replica sync, the cluster and Sentinel
    /// transports) are boxed so that the state stays small: an `AsyncLock::lock()` future was
    /// 4,680 bytes with them inline, 2,624 boxed (rustc 1.95). The bound has room; a large
    /// state added inline on the usual path fails it.
    #[test]
    fn an_awaited_acquire_stays_small() {
        let client = crate::Client::open("redis://127.0.0.1:1/").expect("a lazy client");
        let lock = client.async_lock("k");
        let lock_future = std::mem::size_of_val(&lock.lock());
        let guard_future = std::mem::size_of_val(&lock.guard());
        assert!(
            lock_future <= 3_072,
            "AsyncLock::lock(): {lock_future} bytes"
        );
        assert!(
            guard_future <= 3_072,
            "AsyncLock::guard(): {guard_future} bytes"
        );
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn token_key_shares_the_lock_slot() {
        assert_eq!(token_key("myLock"), "redisson_lock_token:{myLock}");
        assert_eq!(
            token_key("{app}:myLock"),
            "redisson_lock_token:{app}:myLock"
        );
        let slot = |k: &str| {
            redis::cluster_routing::Route::with_key(k, redis::cluster_routing::SlotAddr::Master)
        };
        assert_eq!(slot(&token_key("orders")), slot("orders"));
        assert_eq!(slot(&token_key("{o}:1")), slot("{o}:2"));
    }

    #[test]
    fn requests_follow_the_wire_contract() {
        assert_eq!(
            words(&acquire_cmd(
                "k",
                "u:1",
                30_000,
                None,
                Flavor::Exclusive {
                    fence: false,
                    reentrant: true,
                    fair: false
                }
            )),
            ["RLOCK.ACQUIRE", "k", "u:1", "30000"]
        );
        assert_eq!(
            words(&acquire_cmd(
                "k",
                "u:1",
                5,
                Some(0),
                Flavor::Exclusive {
                    fence: true,
                    reentrant: true,
                    fair: false
                }
            )),
            ["RLOCK.ACQUIRE", "k", "u:1", "5", "BLOCK", "0", "FENCE"]
        );
        assert_eq!(
            words(&renew_cmd("k", "u:1", 10)),
            ["RLOCK.RENEW", "k", "u:1", "10"]
        );
    }

    #[test]
    fn the_session_word_is_the_commands() {
        let plain = Flavor::Exclusive {
            fence: false,
            reentrant: true,
            fair: false,
        };
        for f in [plain, Flavor::Rw(Side::Read), Flavor::Rw(Side::Write)] {
            let cmd = acquire_cmd("k", "u:1", 5, None, f);
            assert_eq!(Some(object(f)), crate::session::wire::object_of(&cmd));
        }
    }

    #[test]
    fn grant_replies() {
        assert_eq!(grant_of(Value::Nil).unwrap(), None);
        assert_eq!(grant_of(Value::Int(3)).unwrap(), Some(3));
        assert!(grant_of(Value::SimpleString("OK".into())).is_err());
    }
}

//! The semaphores' operations (`RSEM.*`): plain permits (Redisson's `RSemaphore`) and leased
//! permits with ids (`RPermitExpirableSemaphore`), on the same keys; over Redisson's protocol,
//! its scripts (`protocol/redisson/semaphore.rs`, `protocol/redisson/permits.rs`).
//!
//! A semaphore has no owner: after a broken connection nobody can tell whether an acquire took
//! its permits, so such an acquire is not sent again; the caller gets an error saying the
//! outcome is unknown (as Redisson, which does not retry semaphore scripts either).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, FromRedisValue, Value};

use super::{lease_millis, Obj};
use crate::config::Protocol;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::holds::{HoldId, HoldState, Kind, Witness};
use crate::permit::PermitId;
use crate::protocol::redisson::lock::Try;
use crate::protocol::redisson::{permits, semaphore as redisson, Script};
use crate::transport::Delivery;
use crate::wait::{self, Attempt, Scripted, Wait};

/// Leased permits in the hold registry: there for the lost-hold signal of their guards, and
/// renewed by the watchdog when taken through a watched handle
/// ([`PermitExpirableSemaphore::with_watchdog`](crate::PermitExpirableSemaphore::with_watchdog)),
/// with [`update_lease_cmd`] in the watchdog's round trip. A permit has no owner: an orphaned
/// one is reported, not released (its id may have been handed on).
pub(crate) static PERMIT: Kind = Kind {
    name: "permit",
    renew: |key, holder, lease_ms, _publish| renew_cmd(key, holder, lease_ms),
    release: None,
};

fn renew_cmd(name: &str, hex: &str, lease_ms: u64) -> Cmd {
    let id: PermitId = hex.parse().expect("permit holds are named by their hex id");
    update_lease_cmd(name, &id, lease_ms)
}

/// Move a leased permit's end to `lease_ms` from now (Redisson's `updateLeaseTime`): 1 if the
/// permit was leased and its lease had not ended, else 0 (`RSEM.RENEW`: a user allowed only
/// `RSEM.*` can renew, which an `EVAL` would not let them).
fn update_lease_cmd(name: &str, id: &PermitId, lease_ms: u64) -> Cmd {
    let mut cmd = redis::cmd("RSEM.RENEW");
    cmd.arg(name).arg(lease_ms).arg("ID").arg(id.to_string());
    cmd
}

/// What an `RSEM.ACQUIRE` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// Plain permits: a count, given back by count.
    Plain,
    /// Permits with ids, each returning by itself this many ms after the grant (`LEASE`).
    Leased(u64),
    /// Permits with ids and no end (`NOLEASE`): the caller's until released by id.
    NoEnd,
}

/// `RSEM.ACQUIRE name [PERMITS n] [LEASE ms | NOLEASE] [BLOCK ms]`.
fn acquire_cmd(name: &str, permits: u64, taken: Taken, block: Option<u64>) -> Cmd {
    let mut cmd = redis::cmd("RSEM.ACQUIRE");
    cmd.arg(name);
    if permits != 1 {
        cmd.arg("PERMITS").arg(permits);
    }
    match taken {
        Taken::Plain => {}
        Taken::Leased(ms) => {
            cmd.arg("LEASE").arg(ms);
        }
        Taken::NoEnd => {
            cmd.arg("NOLEASE");
        }
    }
    if let Some(ms) = block {
        cmd.arg("BLOCK").arg(ms);
    }
    cmd
}

/// A permit count as Redisson's scripts and the module take it (a signed integer).
fn permit_count(permits: u64) -> Result<i64> {
    i64::try_from(permits).map_err(|_| Error::InvalidArgument("too many permits".into()))
}

/// `RSEM.RELEASE name PERMITS n`.
fn release_cmd(name: &str, permits: u64) -> Cmd {
    let mut cmd = redis::cmd("RSEM.RELEASE");
    cmd.arg(name).arg("PERMITS").arg(permits);
    cmd
}

/// `RSEM.RELEASE name ID id ...`.
fn release_ids_cmd(name: &str, ids: &[PermitId]) -> Cmd {
    let mut cmd = redis::cmd("RSEM.RELEASE");
    cmd.arg(name).arg("ID");
    for id in ids {
        cmd.arg(id.to_string());
    }
    cmd
}

/// The ids of a leased acquire's reply.
fn ids_of(reply: &Value) -> redis::RedisResult<Vec<PermitId>> {
    let texts = Vec::<String>::from_redis_value_ref(reply)?;
    texts
        .iter()
        .map(|t| {
            t.parse().map_err(|_| {
                redis::RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a permit id that is not 32 hex characters",
                ))
            })
        })
        .collect()
}

/// `RSEM.ACQUIRE` of `permits`, leased or not.
struct Acquire<'a> {
    s: Obj<'a>,
    permits: u64,
    taken: Taken,
}

impl Attempt for Acquire<'_> {
    fn key(&self) -> &str {
        self.s.name
    }

    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn command(&self, block: Option<u64>) -> Cmd {
        acquire_cmd(self.s.name, self.permits, self.taken, block)
    }

    fn granted(&self, reply: &Value) -> bool {
        !matches!(reply, Value::Nil)
    }

    /// Unknowable: no owner to ask, and the server makes the ids. Not sent again (it could
    /// take permits twice). Plain permits and permits without an end are then in doubt for
    /// good; leased ones end with their lease.
    async fn took_effect(&self, ctx: &Context) -> Result<Option<Value>> {
        let lasting = !matches!(self.taken, Taken::Leased(_));
        Err(unknowable(ctx, self.s, self.permits, lasting))
    }

    /// Plain permits go back by count; ids nobody learnt of cannot be given back: leased ones
    /// end with their lease, ones without an end are in doubt for good.
    async fn give_back(&self, ctx: &Context) {
        let failed = match self.taken {
            Taken::Plain => release(self.s, self.permits).await.is_err(),
            Taken::Leased(_) => false,
            Taken::NoEnd => true,
        };
        if failed {
            ctx.permits_in_doubt(self.s.name, self.permits, "giving them back failed");
        }
    }

    async fn give_back_granted(&self, ctx: &Context, reply: &Value) {
        match ids_of(reply) {
            Ok(ids) if self.taken != Taken::Plain => {
                if release_ids(self.s, &ids).await.is_err() && self.taken == Taken::NoEnd {
                    // A leased permit not given back ends with its lease; this one never does.
                    ctx.permits_in_doubt(self.s.name, self.permits, "giving them back failed");
                }
            }
            _ => self.give_back(ctx).await,
        }
    }
}

/// An acquire whose reply was lost: whether it took permits is unknowable (a semaphore has no
/// owner to ask); `lasting` ones (plain, or without an end) are then in doubt for good.
fn unknowable(ctx: &Context, s: Obj<'_>, permits: u64, lasting: bool) -> Error {
    if lasting {
        ctx.permits_in_doubt(s.name, permits, "an acquire's reply was lost");
    }
    let cut = std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the connection broke before the reply to an acquire: whether it took permits is \
         unknown (a semaphore has no owner to ask)",
    );
    Error::Connection {
        addr: ctx.transport.addr_of(s.name).to_string(),
        source: cut.into(),
    }
}

/// Redisson's `tryAcquire(n)` script (Redisson's protocol): plain permits.
struct ScriptAcquire<'a> {
    s: Obj<'a>,
    permits: u64,
}

impl Scripted for ScriptAcquire<'_> {
    fn key(&self) -> &str {
        self.s.name
    }

    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn channel(&self) -> String {
        redisson::channel(self.s.name)
    }

    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>) {
        (
            &redisson::TRY_ACQUIRE,
            vec![self.s.name.to_string()],
            vec![self.permits.to_string()],
        )
    }

    /// 1: taken; 0: not enough, wait for a release's message (a count has no TTL).
    fn read(&self, reply: &Value) -> redis::RedisResult<Try> {
        Ok(match i64::from_redis_value_ref(reply)? {
            1 => Try::Granted,
            _ => Try::Busy(None),
        })
    }

    async fn took_effect(&self, ctx: &Context) -> Result<Option<Value>> {
        Err(unknowable(ctx, self.s, self.permits, true))
    }

    async fn give_back(&self, ctx: &Context) {
        if release(self.s, self.permits).await.is_err() {
            ctx.permits_in_doubt(self.s.name, self.permits, "giving them back failed");
        }
    }

    fn need(&self) -> u64 {
        self.permits
    }
}

/// Redisson's permit-expirable `tryAcquire(n, lease)` script (Redisson's protocol): the ids
/// are made here, once, and sent with every attempt (an attempt not granted adds none), so a
/// grant is known by its ids: whether an attempt cut off took effect is asked of the server.
struct ScriptLease<'a> {
    s: Obj<'a>,
    permits: u64,
    /// `None`: permits without an end (Redisson's `acquire()` without a lease).
    lease_ms: Option<u64>,
    ids: Vec<PermitId>,
    /// When the last attempt was made: a grant's lease ends `lease_ms` after it.
    sent: Mutex<Instant>,
}

impl<'a> ScriptLease<'a> {
    /// `permits` new random ids (the client makes them over Redisson's protocol).
    fn new(s: Obj<'a>, permits: u64, lease_ms: Option<u64>) -> Self {
        ScriptLease {
            s,
            permits,
            lease_ms,
            ids: (0..permits).map(|_| PermitId::new_random()).collect(),
            sent: Mutex::new(Instant::now()),
        }
    }
}

impl ScriptLease<'_> {
    /// Give the ids back, all or none (the ones the script added, when it took effect).
    async fn release(&self) {
        if let Err(e) = release_ids(self.s, &self.ids).await {
            tracing::debug!(key = %self.s.name, error = %e, "rlock: can't give leased permits back; they end with their lease");
        }
    }
}

impl Scripted for ScriptLease<'_> {
    fn key(&self) -> &str {
        self.s.name
    }

    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn channel(&self) -> String {
        redisson::channel(self.s.name)
    }

    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>) {
        let name = self.s.name;
        *self.sent.lock() = Instant::now();
        let now = permits::now_ms();
        (
            &permits::TRY_ACQUIRE,
            vec![
                name.to_string(),
                permits::timeouts(name),
                redisson::channel(name),
            ],
            vec![
                self.permits.to_string(),
                match self.lease_ms {
                    Some(ms) => now.saturating_add(ms).to_string(),
                    None => permits::PERMANENT.to_string(),
                },
                now.to_string(),
                permits::PERMANENT.to_string(),
                self.s.ctx.transport.publish_command().to_string(),
            ],
        )
    }

    fn byte_args(&self) -> Vec<Vec<u8>> {
        self.ids.iter().map(|id| id.as_bytes().to_vec()).collect()
    }

    /// `OK`; else wait for a release's message or the earliest lease's end.
    fn read(&self, reply: &Value) -> redis::RedisResult<Try> {
        permits::read_acquire(reply, permits::now_ms())
    }

    /// Its ids are in the timeout set: granted.
    async fn took_effect(&self, _ctx: &Context) -> Result<Option<Value>> {
        let mut cmd = redis::cmd("ZSCORE");
        cmd.arg(permits::timeouts(self.s.name))
            .arg(self.ids[0].as_bytes().as_slice());
        let score: Option<String> = self.s.read(&cmd).await?;
        Ok(score.map(|_| Value::Okay))
    }

    async fn give_back(&self, _ctx: &Context) {
        self.release().await
    }
}

/// One of Redisson's semaphore scripts about `s`, with KEYS = [name, channel] and ARGV = [n,
/// publish command] (or KEYS = [name] and ARGV = `one`), not sent again after a broken
/// connection.
async fn script<T: FromRedisValue>(s: Obj<'_>, script: &Script, n: Option<i64>) -> Result<T> {
    let ctx = s.ctx;
    let channel = redisson::channel(s.name);
    let n = n.map(|n| n.to_string());
    let (keys, args): (Vec<&str>, Vec<&str>) = match &n {
        Some(n) => (
            vec![s.name, &channel],
            vec![n, ctx.transport.publish_command()],
        ),
        None => (vec![s.name], vec![]),
    };
    script
        .run(
            &ctx.transport,
            &ctx.bg,
            s.io,
            &keys,
            &args,
            Delivery::AtMostOnce,
        )
        .await
}

/// A leased permit: its id and what tells when it ends.
pub(crate) struct Leased {
    pub(crate) id: PermitId,
    pub(crate) state: Arc<HoldState>,
}

/// A leased permit in the hold registry, renewed over `protocol` (one hold whichever: the
/// kinds are one by name).
fn hold(s: Obj<'_>, id: &PermitId, protocol: Protocol) -> HoldId {
    HoldId {
        kind: match protocol {
            Protocol::Redisson => &permits::PERMIT,
            _ => &PERMIT,
        },
        key: s.name.clone(),
        holder: Arc::from(id.to_string()),
    }
}

/// Take `permits` plain permits per `wait`: whether they were taken. Zero permits are taken
/// at once without asking the server (Redisson's `tryAcquire(0)`).
pub(crate) async fn acquire(s: Obj<'_>, permits: u64, wait: Wait) -> Result<bool> {
    if permits == 0 {
        return Ok(true);
    }
    if s.protocol().await? == Protocol::Redisson {
        let a = ScriptAcquire { s, permits };
        let got = Box::pin(wait::acquire_scripted(s.ctx, s.io, &a, wait)).await?;
        return Ok(got.is_some());
    }
    let a = Acquire {
        s,
        permits,
        taken: Taken::Plain,
    };
    let reply = wait::acquire(s.ctx, s.io, &a, wait).await?;
    Ok(a.granted(&reply))
}

/// Lease `permits` permits for `lease` per `wait`: their ids, `None` when not taken. With
/// `watched` (the anchor of the handle that takes them), the watchdog renews each to `lease`
/// every period until it is released, or until no clone of that handle is left.
pub(crate) async fn lease(
    s: Obj<'_>,
    permits: u64,
    lease: Duration,
    wait: Wait,
    watched: Option<&Arc<()>>,
) -> Result<Option<Vec<Leased>>> {
    let lease_ms = lease_millis(lease)?;
    if watched.is_some() {
        // A renewal must come before the lease ends, with a period to spare for a slow one.
        let period = s.ctx.config.renewal_interval();
        if lease < period * 2 {
            return Err(Error::InvalidArgument(format!(
                "a permit the watchdog renews needs a lease of at least twice the renewal \
                 interval ({:?}); got {lease:?}",
                period * 2
            )));
        }
    }
    if permits == 0 {
        return Ok(Some(Vec::new()));
    }
    let protocol = s.protocol().await?;
    let (ids, granted_at) = match protocol {
        Protocol::Redisson => {
            let a = ScriptLease::new(s, permits, Some(lease_ms));
            if Box::pin(wait::acquire_scripted(s.ctx, s.io, &a, wait))
                .await?
                .is_none()
            {
                return Ok(None);
            }
            // The lease the script set ends `lease_ms` after the granting attempt was made.
            let at = *a.sent.lock();
            (a.ids, at)
        }
        _ => {
            let a = Acquire {
                s,
                permits,
                taken: Taken::Leased(lease_ms),
            };
            let sent = Instant::now();
            let reply = wait::acquire(s.ctx, s.io, &a, wait).await?;
            if !a.granted(&reply) {
                return Ok(None);
            }
            // The lease runs from the grant (see `ops::lock::acquire`).
            let granted_at = match wait {
                Wait::No | Wait::For(Duration::ZERO) => sent,
                _ => Instant::now(),
            };
            (ids_of(&reply).map_err(|e| s.error(e))?, granted_at)
        }
    };
    let mut holds = s.ctx.holds.lock();
    Ok(Some(
        ids.into_iter()
            .map(|id| {
                let h = hold(s, &id, protocol);
                let state = match watched {
                    None => holds.on_acquired(&h, 1, Some(lease), granted_at),
                    Some(anchor) => {
                        // Watchdog mode, renewed to its own lease.
                        let state = holds.on_acquired(&h, 1, None, granted_at);
                        holds.renew_to(&h, lease_ms);
                        holds.witnessed(&h, Witness::Handle(Arc::downgrade(anchor)));
                        state
                    }
                };
                Leased { state, id }
            })
            .collect(),
    ))
}

/// Lease `permits` permits without an end (Redisson's `acquire()`/`tryAcquire()` without a
/// lease: scored [`permits::PERMANENT`]) per `wait`: their ids, `None` when not taken. Such a
/// permit is never lost and never renewed: it is the caller's until released by id. With the
/// module, `RSEM.ACQUIRE ... NOLEASE` (the same score); over Redisson's protocol, its script.
pub(crate) async fn lease_without_end(
    s: Obj<'_>,
    permits: u64,
    wait: Wait,
) -> Result<Option<Vec<PermitId>>> {
    if permits == 0 {
        return Ok(Some(Vec::new()));
    }
    if s.protocol().await? != Protocol::Redisson {
        let a = Acquire {
            s,
            permits,
            taken: Taken::NoEnd,
        };
        let reply = wait::acquire(s.ctx, s.io, &a, wait).await?;
        if !a.granted(&reply) {
            return Ok(None);
        }
        return ids_of(&reply).map(Some).map_err(|e| s.error(e));
    }
    let a = ScriptLease::new(s, permits, None);
    let got = Box::pin(wait::acquire_scripted(s.ctx, s.io, &a, wait)).await?;
    Ok(got.map(|_| a.ids))
}

/// Redisson's `releaseIfExists(n)`: gives `n` plain permits back only if the semaphore
/// exists (`release` creates it); whether it did. With the module `RSEM.RELEASE ... XX` (a user
/// allowed only `RSEM.*` can call it); over Redisson's protocol, its script.
pub(crate) async fn release_if_exists(s: Obj<'_>, permits: u64) -> Result<bool> {
    if permits == 0 {
        return Ok(false);
    }
    let n = permit_count(permits)?;
    if s.protocol().await? != Protocol::Redisson {
        let mut cmd = redis::cmd("RSEM.RELEASE");
        cmd.arg(&**s.name).arg("PERMITS").arg(n).arg("XX");
        return Ok(s.write::<Option<i64>>(&cmd).await?.is_some());
    }
    Ok(script::<i64>(s, &redisson::RELEASE_IF_EXISTS, Some(n)).await? == 1)
}

/// Redisson's `trySetPermits(n, ttl)`: sets the count to `permits` with a time to live if the
/// semaphore does not exist; whether it did. With the module `RSEM.TRYSETPERMITS ... PX`
/// (a user allowed only `RSEM.*` can call it); over Redisson's protocol, its script.
pub(crate) async fn try_set_permits_ttl(s: Obj<'_>, permits: u64, ttl: Duration) -> Result<bool> {
    let ttl_ms = lease_millis(ttl)?;
    let n = permit_count(permits)?;
    if s.protocol().await? != Protocol::Redisson {
        let mut cmd = redis::cmd("RSEM.TRYSETPERMITS");
        cmd.arg(&**s.name).arg(n).arg("PX").arg(ttl_ms);
        return Ok(s.write::<i64>(&cmd).await? == 1);
    }
    let (ttl_ms, n) = (ttl_ms.to_string(), n.to_string());
    let channel = redisson::channel(s.name);
    let publish = s.ctx.transport.publish_command();
    let set: i64 = s
        .script(
            &redisson::TRY_SET_PERMITS_TTL,
            &[s.name, &channel],
            &[&n, publish, &ttl_ms],
            Delivery::AtMostOnce,
        )
        .await?;
    Ok(set == 1)
}

/// Redisson's `setPermits(n)` of a permit-expirable semaphore: the permits there are
/// (available plus leased) become `permits`, by moving the available count (it may go
/// negative while more are leased). With the module `RSEM.SETPERMITS`; over Redisson's
/// protocol, its script. Sent again after a broken connection: a second run finds the total
/// already right and writes nothing.
pub(crate) async fn set_permits(s: Obj<'_>, permits: i64) -> Result<()> {
    if s.protocol().await? != Protocol::Redisson {
        let mut cmd = redis::cmd("RSEM.SETPERMITS");
        cmd.arg(&**s.name).arg(permits);
        return s
            .query::<i64>(&cmd, "", Delivery::Idempotent)
            .await
            .map(drop);
    }
    let (channel, timeouts) = (redisson::channel(s.name), permits::timeouts(s.name));
    let n = permits.to_string();
    let publish = s.ctx.transport.publish_command();
    s.script::<()>(
        &permits::SET_PERMITS,
        &[s.name, &channel, &timeouts],
        &[&n, publish],
        Delivery::Idempotent,
    )
    .await
}

/// Redisson's `getPermits()` of a permit-expirable semaphore: available plus leased. With the
/// module, `RSEM.INFO`'s `available` plus its leased count, read in one command.
pub(crate) async fn total_permits(s: Obj<'_>) -> Result<i64> {
    if s.protocol().await? == Protocol::Redisson {
        let reply: Value = reclaiming(s, &permits::PERMITS).await?;
        return permits::read_count(&reply).map_err(|e| s.error(e));
    }
    let info = sem_info(s).await?;
    let available = match super::info_field(&info, "available") {
        Some(Value::Int(n)) => *n,
        _ => return Err(unexpected_info(s)),
    };
    Ok(available.saturating_add(leased_in(s, &info)? as i64))
}

/// Redisson's `getLeaseTime(id)`: the time left of a leased permit's lease, `None` for a
/// permit without an end; [`Error::PermitNotLeased`] when it is not leased (released, ended,
/// never existed), with Redisson's words. With the module `RSEM.LEASETIME` (a user allowed
/// `RSEM.*` and the lease set's key can ask; no `EVAL`); over Redisson's protocol, its script.
pub(crate) async fn lease_time(s: Obj<'_>, id: &PermitId) -> Result<Option<Duration>> {
    let left: i64 = if s.protocol().await? == Protocol::Redisson {
        let (name, timeouts, channel) = (
            s.name.to_string(),
            permits::timeouts(s.name),
            redisson::channel(s.name),
        );
        let now = permits::now_ms().to_string();
        let publish = s.ctx.transport.publish_command();
        let args: [&[u8]; 4] = [
            id.as_bytes(),
            permits::PERMANENT.as_bytes(),
            now.as_bytes(),
            publish.as_bytes(),
        ];
        let ctx = s.ctx;
        // Reads, and returns ended leases as any script would: safe to send again.
        permits::LEASE_TIME
            .run_bytes(
                &ctx.transport,
                &ctx.bg,
                s.io,
                &[&name, &timeouts, &channel],
                &args,
                None,
                Delivery::Idempotent,
            )
            .await
            .map_err(|e| e.about(s.name, ""))?
    } else {
        let mut cmd = redis::cmd("RSEM.LEASETIME");
        cmd.arg(&**s.name).arg(id.to_string());
        // nil: not leased.
        s.read::<Option<i64>>(&cmd).await?.unwrap_or(0)
    };
    match left {
        -1 => Ok(None),
        n if n > 0 => Ok(Some(Duration::from_millis(n as u64))),
        _ => Err(Error::PermitNotLeased {
            name: s.name.to_string(),
            message: format!("Permit with id {id} has already been released or doesn't exist"),
        }),
    }
}

/// `RSEM.INFO name`.
async fn sem_info(s: Obj<'_>) -> Result<Value> {
    let mut cmd = redis::cmd("RSEM.INFO");
    cmd.arg(&**s.name);
    s.read(&cmd).await
}

fn unexpected_info(s: Obj<'_>) -> Error {
    s.error(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected RSEM.INFO reply",
    )))
}

/// The leased permits an `RSEM.INFO` reply counts: `leased` lists at most COUNT (default
/// 1000) permits; past that, `leased_total` counts them all.
fn leased_in(s: Obj<'_>, info: &Value) -> Result<u64> {
    if let Some(Value::Int(n)) = super::info_field(info, "leased_total") {
        return Ok((*n).max(0) as u64);
    }
    match super::info_field(info, "leased") {
        Some(Value::Array(permits)) => Ok(permits.len() as u64),
        _ => Err(unexpected_info(s)),
    }
}

/// `RSEM.RELEASE name PERMITS n`: the count available after queued waiters were served.
pub(crate) async fn release(s: Obj<'_>, permits: u64) -> Result<i64> {
    if permits == 0 {
        return available(s, false).await;
    }
    if s.protocol().await? == Protocol::Redisson {
        let n = permit_count(permits)?;
        let () = script(s, &redisson::RELEASE, Some(n)).await?;
        // Redisson's script replies nothing: the count a moment after.
        return available(s, false).await;
    }
    s.write(&release_cmd(s.name, permits)).await
}

/// `RSEM.RELEASE name ID ...` (Redisson's `tryRelease`): all of `ids` or none
/// ([`Error::PermitNotLeased`]).
pub(crate) async fn release_ids(s: Obj<'_>, ids: &[PermitId]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let protocol = s.protocol().await?;
    if protocol == Protocol::Redisson {
        Box::pin(script_release_ids(s, ids)).await?;
    } else {
        s.write::<i64>(&release_ids_cmd(s.name, ids)).await?;
    }
    let mut holds = s.ctx.holds.lock();
    for id in ids {
        holds.forget(&hold(s, id, protocol));
    }
    Ok(())
}

/// Redisson's `tryRelease(id)` or `tryRelease(ids)` (all or none): a permit not leased, or
/// whose lease ended (Redisson returns that one to the pool and says 0), is
/// [`Error::PermitNotLeased`], with Redisson's words.
async fn script_release_ids(s: Obj<'_>, ids: &[PermitId]) -> Result<()> {
    let (name, channel, timeouts) = (
        s.name.to_string(),
        redisson::channel(s.name),
        permits::timeouts(s.name),
    );
    let keys = [name.as_str(), &channel, &timeouts];
    let now = permits::now_ms().to_string();
    let publish = s.ctx.transport.publish_command();
    let released: i64 = if let [id] = ids {
        let args: [&[u8]; 4] = [id.as_bytes(), b"1", now.as_bytes(), publish.as_bytes()];
        run_bytes(s, &permits::TRY_RELEASE, &keys, &args).await?
    } else {
        let count = ids.len().to_string();
        let mut args: Vec<&[u8]> = vec![count.as_bytes(), now.as_bytes(), publish.as_bytes()];
        args.extend(ids.iter().map(|id| id.as_bytes().as_slice()));
        run_bytes(s, &permits::TRY_RELEASE_MANY, &keys, &args).await?
    };
    if released == ids.len() as i64 {
        return Ok(());
    }
    let message = match ids {
        [id] => format!("Permit with id {id} has already been released or doesn't exist"),
        _ => {
            let all: Vec<String> = ids.iter().map(PermitId::to_string).collect();
            format!(
                "Permits with ids [{}] have already been released or don't exist",
                all.join(", ")
            )
        }
    };
    Err(Error::PermitNotLeased {
        name: s.name.to_string(),
        message,
    })
}

/// One of Redisson's scripts with arguments that are bytes (permit ids), not sent again after
/// a broken connection.
async fn run_bytes<T: FromRedisValue>(
    s: Obj<'_>,
    script: &Script,
    keys: &[&str],
    args: &[&[u8]],
) -> Result<T> {
    let ctx = s.ctx;
    script
        .run_bytes(
            &ctx.transport,
            &ctx.bg,
            s.io,
            keys,
            args,
            None,
            Delivery::AtMostOnce,
        )
        .await
        .map_err(|e| e.about(s.name, ""))
}

/// Redisson's `updateLeaseTime`: whether the permit was leased (and is now until `lease` from
/// now).
pub(crate) async fn update_lease(s: Obj<'_>, id: &PermitId, lease: Duration) -> Result<bool> {
    let lease_ms = lease_millis(lease)?;
    let protocol = s.protocol().await?;
    let at = Instant::now();
    let n: i64 = match protocol {
        Protocol::Redisson => {
            let publish = s.ctx.transport.publish_command();
            let (keys, args) = permits::update_lease_words(s.name, id, lease_ms, publish);
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let ctx = s.ctx;
            // A lease set twice is the same lease: sent again after a broken connection.
            permits::UPDATE_LEASE
                .run_bytes(
                    &ctx.transport,
                    &ctx.bg,
                    s.io,
                    &keys,
                    &args,
                    None,
                    Delivery::Idempotent,
                )
                .await?
        }
        _ => s.read(&update_lease_cmd(s.name, id, lease_ms)).await?,
    };
    let mut holds = s.ctx.holds.lock();
    let h = hold(s, id, protocol);
    if n == 1 && holds.holds(&h) > 0 {
        holds.on_acquired(&h, 1, Some(lease), at);
    }
    Ok(n == 1)
}

/// `RSEM.TRYSETPERMITS`: whether the count was set (the semaphore did not exist). Over
/// Redisson's protocol, the script of the semaphore's kind (`expirable`: the
/// permit-expirable semaphore's).
pub(crate) async fn try_set_permits(s: Obj<'_>, permits: u64, expirable: bool) -> Result<bool> {
    if s.protocol().await? == Protocol::Redisson {
        let n = permit_count(permits)?;
        let set = match expirable {
            true => &permits::TRY_SET_PERMITS,
            false => &redisson::TRY_SET_PERMITS,
        };
        return Ok(script::<i64>(s, set, Some(n)).await? == 1);
    }
    let mut cmd = redis::cmd("RSEM.TRYSETPERMITS");
    cmd.arg(&**s.name).arg(permits);
    Ok(s.write::<i64>(&cmd).await? == 1)
}

/// `RSEM.ADDPERMITS`: the count after queued waiters were served (over Redisson's protocol,
/// the script of the semaphore's kind, see [`try_set_permits`]).
pub(crate) async fn add_permits(s: Obj<'_>, delta: i64, expirable: bool) -> Result<i64> {
    if s.protocol().await? == Protocol::Redisson {
        let add = match expirable {
            true => &permits::ADD_PERMITS,
            false => &redisson::ADD_PERMITS,
        };
        let () = script(s, add, Some(delta)).await?;
        // Redisson's script replies nothing: the count a moment after.
        return available(s, expirable).await;
    }
    let mut cmd = redis::cmd("RSEM.ADDPERMITS");
    cmd.arg(&**s.name).arg(delta);
    s.write(&cmd).await
}

/// `RSEM.AVAILABLE`. Over Redisson's protocol `availablePermits()`: `GET` (absent: 0), or for
/// a permit-expirable semaphore (`expirable`) its script, which returns ended leases first.
pub(crate) async fn available(s: Obj<'_>, expirable: bool) -> Result<i64> {
    if s.protocol().await? == Protocol::Redisson {
        if expirable {
            let reply: Value = reclaiming(s, &permits::AVAILABLE).await?;
            return permits::read_count(&reply).map_err(|e| s.error(e));
        }
        let mut cmd = redis::cmd("GET");
        cmd.arg(&**s.name);
        return Ok(s.read::<Option<i64>>(&cmd).await?.unwrap_or(0));
    }
    let mut cmd = redis::cmd("RSEM.AVAILABLE");
    cmd.arg(&**s.name);
    s.read(&cmd).await
}

/// `RSEM.DRAIN`: the permits taken.
pub(crate) async fn drain(s: Obj<'_>) -> Result<u64> {
    if s.protocol().await? == Protocol::Redisson {
        let n: i64 = script(s, &redisson::DRAIN, None).await?;
        return Ok(n.max(0) as u64);
    }
    let mut cmd = redis::cmd("RSEM.DRAIN");
    cmd.arg(&**s.name);
    s.write(&cmd).await
}

/// One of the permit-expirable semaphore's scripts that return ended leases, then read
/// (KEYS = [name, timeout set, channel]; ARGV = [now, publish command]). Sent again after a
/// broken connection: what it writes is what any later script would (the ended leases are
/// ended either way).
async fn reclaiming<T: FromRedisValue>(s: Obj<'_>, script: &Script) -> Result<T> {
    let (timeouts, channel) = (permits::timeouts(s.name), redisson::channel(s.name));
    let now = permits::now_ms().to_string();
    s.script(
        script,
        &[s.name, &timeouts, &channel],
        &[&now, s.ctx.transport.publish_command()],
        Delivery::Idempotent,
    )
    .await
}

/// The permits leased now and not ended (`RSEM.INFO`'s `leased`; Redisson's
/// `acquiredPermits()`).
pub(crate) async fn leased(s: Obj<'_>) -> Result<u64> {
    if s.protocol().await? == Protocol::Redisson {
        let n: i64 = reclaiming(s, &permits::ACQUIRED).await?;
        return Ok(n.max(0) as u64);
    }
    let info = sem_info(s).await?;
    leased_in(s, &info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::words;

    #[test]
    fn requests_follow_the_wire_contract() {
        assert_eq!(
            words(&acquire_cmd("s", 1, Taken::Plain, None)),
            ["RSEM.ACQUIRE", "s"]
        );
        assert_eq!(
            words(&acquire_cmd("s", 3, Taken::Leased(500), Some(0))),
            [
                "RSEM.ACQUIRE",
                "s",
                "PERMITS",
                "3",
                "LEASE",
                "500",
                "BLOCK",
                "0"
            ]
        );
        assert_eq!(
            words(&release_cmd("s", 2)),
            ["RSEM.RELEASE", "s", "PERMITS", "2"]
        );
        let id: PermitId = "7034183b6982aae9385b7798796c1ef5".parse().unwrap();
        assert_eq!(
            words(&release_ids_cmd("s", &[id])),
            [
                "RSEM.RELEASE",
                "s",
                "ID",
                "7034183b6982aae9385b7798796c1ef5"
            ]
        );
        assert_eq!(
            words(&update_lease_cmd("{app}:s", &id, 10)),
            [
                "RSEM.RENEW",
                "{app}:s",
                "10",
                "ID",
                "7034183b6982aae9385b7798796c1ef5"
            ]
        );
    }

    #[test]
    fn leased_replies_are_ids() {
        let reply = Value::Array(vec![Value::BulkString(
            b"7034183b6982aae9385b7798796c1ef5".to_vec(),
        )]);
        assert_eq!(
            ids_of(&reply).unwrap()[0].to_string(),
            "7034183b6982aae9385b7798796c1ef5"
        );
        assert!(ids_of(&Value::Array(vec![Value::BulkString(b"x".to_vec())])).is_err());
    }
}

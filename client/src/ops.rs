//! The operations behind every API: acquire (immediate or waiting on the server), release,
//! force release, queries, replica sync. All run as tasks on the client's runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Cmd;
use tokio::sync::oneshot;

use crate::client::Inner;
use crate::conn::{PoolConn, Redirect};
use crate::error::{Error, Result};
use crate::keys;
use crate::owner::Owner;
use crate::watchdog::HoldState;

/// How long an acquire may wait for the lock.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// One attempt.
    No,
    /// Wait on the server at most this long.
    For(Duration),
    /// Wait on the server until granted.
    Forever,
}

pub(crate) struct AcquireReq {
    pub(crate) name: Arc<str>,
    pub(crate) owner: Owner,
    pub(crate) lease: Option<Duration>,
    pub(crate) wait: Wait,
    pub(crate) fence: bool,
}

/// A granted acquire. Until [`Acquired::keep`] is called it releases the hold when dropped, so a
/// grant that nobody receives (the caller went away) never leaves the lock held.
pub(crate) struct Acquired {
    /// The hold count, or the fencing token for a fenced acquire.
    pub(crate) value: i64,
    pub(crate) state: Arc<HoldState>,
    undo: Option<(Arc<Inner>, Arc<str>, Owner)>,
}

impl Acquired {
    pub(crate) fn keep(mut self) -> (i64, Arc<HoldState>) {
        self.undo = None;
        (self.value, self.state.clone())
    }
}

impl Drop for Acquired {
    fn drop(&mut self) {
        if let Some((inner, name, owner)) = self.undo.take() {
            tracing::debug!(lock = %name, "rlock: acquire completed after its caller left; releasing");
            let handle = inner.handle.clone();
            handle.spawn(async move {
                let _ = inner.release(&name, &owner).await;
            });
        }
    }
}

/// Milliseconds, rounded up, as the server wants them.
pub(crate) fn millis(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

fn lease_millis(d: Duration) -> Result<u64> {
    let ms = millis(d);
    if ms == 0 {
        return Err(Error::InvalidArgument(
            "the lease must be at least 1 ms".into(),
        ));
    }
    if ms > (i64::MAX as u64) / 4 {
        return Err(Error::InvalidArgument("the lease is too long".into()));
    }
    Ok(ms)
}

fn acquire_cmd(req: &AcquireReq, lease_ms: u64, block_ms: Option<u64>) -> Cmd {
    let mut cmd = redis::cmd("RLOCK.ACQUIRE");
    cmd.arg(&*req.name).arg(req.owner.as_str()).arg(lease_ms);
    if let Some(ms) = block_ms {
        cmd.arg("BLOCK").arg(ms);
    }
    if req.fence {
        cmd.arg("FENCE");
    }
    cmd
}

/// Resolves when the caller has gone away (its end of the channel was dropped); never when
/// there is no caller to watch.
async fn caller_gone(rx: &mut Option<oneshot::Receiver<()>>) {
    match rx {
        Some(rx) => {
            let _ = rx.await;
        }
        None => std::future::pending().await,
    }
}

impl Inner {
    /// A dedicated connection to the node serving `name` (or to `ask`, after an `ASK`).
    async fn wait_conn(&self, name: &str, ask: Option<&str>) -> redis::RedisResult<PoolConn> {
        self.conns.pool_for(name, ask).await?.get().await
    }

    fn lock_err(&self, e: redis::RedisError, req: &AcquireReq) -> Error {
        Error::from_redis(e, &req.name, req.owner.as_str())
    }

    /// Acquire per `req`. `Ok(None)`: not acquired (busy, wait over, or the caller left).
    pub(crate) async fn acquire(
        self: Arc<Self>,
        req: AcquireReq,
        mut caller: Option<oneshot::Receiver<()>>,
    ) -> Result<Option<Acquired>> {
        let lease_ms = lease_millis(req.lease.unwrap_or(self.config.watchdog_timeout))?;
        let before = self.registry.lock().unwrap().holds(&req.name, &req.owner);
        let value = match req.wait {
            Wait::No => self.acquire_now(&req, lease_ms, before).await?,
            Wait::For(d) if d.is_zero() => self.acquire_now(&req, lease_ms, before).await?,
            Wait::For(_) | Wait::Forever => {
                self.acquire_blocking(&req, lease_ms, before, &mut caller)
                    .await?
            }
        };
        let Some(value) = value else { return Ok(None) };
        let holds = if req.fence {
            before + 1
        } else {
            value.max(1) as u64
        };
        let state = self
            .registry
            .lock()
            .unwrap()
            .on_acquired(&req.name, &req.owner, holds, req.lease);
        let acquired = Acquired {
            value,
            state,
            undo: Some((self.clone(), req.name.clone(), req.owner.clone())),
        };
        if let Some(timeout) = self.config.replica_sync {
            if let Err(e) = self.sync_replicas(&req, lease_ms, timeout).await {
                // Undo before reporting, so the caller sees the lock given back.
                acquired.keep();
                let _ = self.release(&req.name, &req.owner).await;
                return Err(e);
            }
        }
        Ok(Some(acquired))
    }

    /// After an ambiguous failure: did the acquire happen anyway? (The owner's count on the
    /// server went above what it was before.) Returns the reply it would have had.
    async fn acquired_anyway(&self, req: &AcquireReq, before: u64) -> Result<Option<i64>> {
        let now = self.server_holds(&req.name, &req.owner).await?;
        if now <= before {
            return Ok(None);
        }
        if req.fence {
            return Ok(Some(self.token(&req.name).await?.unwrap_or(0) as i64));
        }
        Ok(Some(now as i64))
    }

    /// One attempt on the shared connection.
    async fn acquire_now(
        &self,
        req: &AcquireReq,
        lease_ms: u64,
        before: u64,
    ) -> Result<Option<i64>> {
        let cmd = acquire_cmd(req, lease_ms, None);
        let mut attempt = 0;
        loop {
            let err = match self.conns.write::<Option<i64>>(&cmd, &req.name).await {
                Ok(v) => return Ok(v),
                Err(e) => self.lock_err(e, req),
            };
            if !err.is_ambiguous() || attempt >= self.conns.retry_attempts() {
                return Err(err);
            }
            attempt += 1;
            tokio::time::sleep(self.conns.retry_delay()).await;
            if let Some(v) = self.acquired_anyway(req, before).await? {
                return Ok(Some(v));
            }
        }
    }

    /// Wait on the server (`BLOCK`) on a dedicated connection.
    async fn acquire_blocking(
        &self,
        req: &AcquireReq,
        lease_ms: u64,
        before: u64,
        caller: &mut Option<oneshot::Receiver<()>>,
    ) -> Result<Option<i64>> {
        // A wait too long to represent is a wait without limit.
        let deadline = match req.wait {
            Wait::For(d) => Instant::now().checked_add(d),
            _ => None,
        };
        let mut attempt = 0;
        // Waits ended by a migration or failover (the command did not run): queue again, as
        // often as it takes within this budget.
        let mut redirects = 0;
        let redirect_budget = self.conns.retry_attempts().max(1) * 10;
        let mut ask: Option<String> = None;
        loop {
            let block_ms = match deadline {
                None => 0,
                Some(d) => millis(d.saturating_duration_since(Instant::now())).max(1),
            };
            let asking = ask.take();
            let pc = tokio::select! {
                pc = self.wait_conn(&req.name, asking.as_deref()) => pc,
                _ = caller_gone(caller) => return Ok(None),
            };
            let mut pc = match pc {
                Ok(pc) => pc,
                Err(e) => {
                    let err = self.lock_err(e, req);
                    if !err.is_ambiguous() || attempt >= self.conns.retry_attempts() {
                        return Err(err);
                    }
                    attempt += 1;
                    tokio::time::sleep(self.conns.retry_delay()).await;
                    continue;
                }
            };
            let cmd = acquire_cmd(req, lease_ms, Some(block_ms));
            let mut conn = pc.conn();
            let reply = async move {
                if asking.is_some() {
                    redis::cmd("ASKING").query_async::<()>(&mut conn).await?;
                }
                cmd.query_async::<Option<i64>>(&mut conn).await
            };
            tokio::pin!(reply);
            // Guard against a server that never answers: the wait plus a response timeout.
            let stuck_at = deadline
                .and_then(|d| d.checked_add(self.config.response_timeout + Duration::from_secs(1)));
            let stuck = async {
                match stuck_at {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            let outcome = tokio::select! {
                r = &mut reply => Some(r),
                _ = caller_gone(caller) => {
                    // The caller gave up: take the waiter off the server's queue; if the grant
                    // raced the cancel, give the lock back at once.
                    if let Some(Ok(Some(_))) = self.withdraw(&mut pc, reply, req, before).await {
                        let _ = self.release(&req.name, &req.owner).await;
                    }
                    return Ok(None);
                }
                _ = stuck => None,
            };
            let result = match outcome {
                Some(r) => r,
                None => match self.withdraw(&mut pc, reply, req, before).await {
                    Some(r) => r,
                    None => {
                        return Err(Error::Timeout(format!(
                            "no reply to a blocked acquire of '{}'",
                            req.name
                        )))
                    }
                },
            };
            let e = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if let Some(r) = self.conns.follow(&e, &req.name).await {
                // Not granted: the slot moved (MOVED, ASK, TRYAGAIN from a migration), the node
                // became a replica (UNBLOCKED; Redis closes that connection) or is not ready.
                // Queue again where the lock is served now.
                if matches!(r, Redirect::Retry) {
                    pc.discard();
                }
                drop(pc);
                redirects += 1;
                let time_left = deadline.is_none_or(|d| Instant::now() < d);
                if redirects > redirect_budget || !time_left {
                    return Err(self.lock_err(e, req));
                }
                tracing::debug!(lock = %req.name, error = %e, "rlock: wait redirected; queueing again");
                match r {
                    Redirect::Moved => {}
                    Redirect::Ask(addr) => ask = Some(addr),
                    Redirect::Retry => tokio::time::sleep(self.conns.retry_delay()).await,
                }
                continue;
            }
            let err = self.lock_err(e, req);
            if !err.is_ambiguous() {
                return Err(err);
            }
            self.conns.mark_stale();
            // The connection broke during the wait (e.g. the server restarted): the server
            // dropped our place in the queue. Check whether the grant came first, else queue
            // again on a fresh connection.
            pc.discard();
            let time_left = deadline.is_none_or(|d| Instant::now() < d);
            if attempt >= self.conns.retry_attempts() || !time_left {
                return Err(err);
            }
            attempt += 1;
            tracing::debug!(lock = %req.name, error = %err, "rlock: wait interrupted; queueing again");
            tokio::time::sleep(self.conns.retry_delay()).await;
            if let Some(v) = self.acquired_anyway(req, before).await? {
                return Ok(Some(v));
            }
        }
    }

    /// Take a blocked acquire off the server: `CLIENT UNBLOCK` it (repeated while the command
    /// may not have reached the server yet) and read its reply. `None` when no reply came; the
    /// connection is then closed, which also removes the waiter on the server.
    async fn withdraw(
        &self,
        pc: &mut PoolConn,
        mut reply: std::pin::Pin<
            &mut impl std::future::Future<Output = redis::RedisResult<Option<i64>>>,
        >,
        req: &AcquireReq,
        before: u64,
    ) -> Option<redis::RedisResult<Option<i64>>> {
        let give_up = Instant::now() + Duration::from_secs(3);
        while Instant::now() < give_up {
            let _ = self.conns.unblock(pc).await;
            tokio::select! {
                r = reply.as_mut() => {
                    if r.is_err() {
                        pc.discard();
                    }
                    return Some(r);
                }
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        pc.discard();
        // Without a reply we cannot tell whether the grant came first: check the server.
        if let Ok(Some(v)) = self.acquired_anyway(req, before).await {
            return Some(Ok(Some(v)));
        }
        None
    }

    /// `RLOCK.RELEASE`: the holds that remain.
    pub(crate) async fn release(&self, name: &str, owner: &Owner) -> Result<u64> {
        let before = self.registry.lock().unwrap().holds(name, owner);
        let mut cmd = redis::cmd("RLOCK.RELEASE");
        cmd.arg(name).arg(owner.as_str());
        let mut attempt = 0;
        loop {
            let err = match self.conns.write::<i64>(&cmd, name).await {
                Ok(n) => {
                    let n = n.max(0) as u64;
                    self.registry.lock().unwrap().on_released(name, owner, n);
                    return Ok(n);
                }
                Err(e) => Error::from_redis(e, name, owner.as_str()),
            };
            if let Error::NotOwner { .. } = err {
                self.registry.lock().unwrap().forget(name, owner);
                return Err(err);
            }
            if !err.is_ambiguous() || attempt >= self.conns.retry_attempts() {
                return Err(err);
            }
            attempt += 1;
            tokio::time::sleep(self.conns.retry_delay()).await;
            // Did the release happen before the connection broke?
            let now = self.server_holds(name, owner).await?;
            if before > 0 && now < before {
                self.registry.lock().unwrap().on_released(name, owner, now);
                return Ok(now);
            }
        }
    }

    /// `RLOCK.FORCERELEASE`: whether a lock was deleted.
    pub(crate) async fn force_release(&self, name: &str) -> Result<bool> {
        let mut cmd = redis::cmd("RLOCK.FORCERELEASE");
        cmd.arg(name);
        let n: i64 = self.conns.query_retry(&cmd, name, "").await?;
        self.registry.lock().unwrap().forget_name(name);
        Ok(n == 1)
    }

    /// `HGET name owner` as a count (0 when absent).
    pub(crate) async fn server_holds(&self, name: &str, owner: &Owner) -> Result<u64> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(name).arg(owner.as_str());
        let v: Option<u64> = self.conns.query_retry(&cmd, name, owner.as_str()).await?;
        Ok(v.unwrap_or(0))
    }

    /// `EXISTS name`.
    pub(crate) async fn is_locked(&self, name: &str) -> Result<bool> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(name);
        let n: i64 = self.conns.query_retry(&cmd, name, "").await?;
        Ok(n == 1)
    }

    /// `HEXISTS name owner`.
    pub(crate) async fn is_held_by(&self, name: &str, owner: &Owner) -> Result<bool> {
        let mut cmd = redis::cmd("HEXISTS");
        cmd.arg(name).arg(owner.as_str());
        let n: i64 = self.conns.query_retry(&cmd, name, owner.as_str()).await?;
        Ok(n == 1)
    }

    /// `PTTL name` (Redis: -2 absent, -1 no expiry).
    pub(crate) async fn pttl(&self, name: &str) -> Result<i64> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(name);
        self.conns.query_retry(&cmd, name, "").await
    }

    /// `GET redisson_lock_token:{name}`: the last fencing token handed out.
    pub(crate) async fn token(&self, name: &str) -> Result<Option<u64>> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(keys::token_key(name));
        self.conns.query_retry(&cmd, name, "").await
    }

    /// Replica sync after an acquire (Redisson's `checkLockSyncedSlaves`). On a dedicated
    /// connection (WAIT blocks it): `RLOCK.RENEW` re-writes the lease so this connection's
    /// replication offset covers the acquire (a grant to a blocked waiter is written while
    /// serving another client), then `WAIT <connected replicas> <timeout>`. No acknowledgement
    /// while replicas are connected: undo the acquire and fail.
    async fn sync_replicas(
        &self,
        req: &AcquireReq,
        lease_ms: u64,
        timeout: Duration,
    ) -> Result<()> {
        // An idle pooled connection may have died with its server (restart, failover): one
        // more try on a fresh connection (RENEW and INFO are idempotent).
        let mut fresh_tries = 1;
        let (mut pc, info) = loop {
            let mut pc = self
                .wait_conn(&req.name, None)
                .await
                .map_err(|e| self.lock_err(e, req))?;
            let mut conn = pc.conn();
            let r: redis::RedisResult<(i64, String)> = redis::pipe()
                .cmd("RLOCK.RENEW")
                .arg(&*req.name)
                .arg(req.owner.as_str())
                .arg(lease_ms)
                .cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await;
            match r {
                Ok((_, info)) => break (pc, info),
                Err(e) => {
                    pc.discard();
                    let err = self.lock_err(e, req);
                    if !err.is_ambiguous() || fresh_tries == 0 {
                        return Err(err);
                    }
                    fresh_tries -= 1;
                }
            }
        };
        let mut conn = pc.conn();
        let replicas = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if replicas == 0 {
            return Ok(());
        }
        let acked: i64 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(millis(timeout).max(1))
            .query_async(&mut conn)
            .await
            .map_err(|e| {
                pc.discard();
                self.lock_err(e, req)
            })?;
        if acked > 0 {
            return Ok(());
        }
        Err(Error::NoSyncedReplicas {
            name: req.name.to_string(),
            replicas,
            timeout,
        })
    }
}

//! The one wait path: every object's acquire goes through [`acquire`].
//!
//! Every acquire names the client's session on the node that serves its key (`SESSION s`): a
//! hold it takes is watched by the server, which tells the listener at once when the hold ends
//! by anything but its owner's release. An acquire that may wait also says
//! `QUEUE <request> <timeout_ms>`: granted at once when it can be (one round trip, the usual
//! reply), else queued on the server with the wait's deadline, its outcome delivered through the
//! session's listener (`session/`). No connection is held while waiting, so any number of tasks
//! wait on any number of objects over the node's command connection and its listener. A sync
//! caller on a connection of its own also says `BLOCK park_ms` ([`Transport::park_ms`]): a
//! grant within that first part of the wait is the acquire's reply, so a short hand-off costs
//! what a raw `BLOCK` waiter's does; after it the connection goes back to the pool and the wait
//! goes on in the session. Around that:
//!
//! - a redirect (`MOVED`/`ASK`) means the command did not run: it is sent where the object is
//!   served now; an outcome saying the request can't be served here (a migration's `TRYAGAIN`,
//!   a failover's `UNBLOCKED`) queues it again on the node that serves the key now;
//! - a connection that breaks under the acquire leaves its outcome unknown: the request is
//!   withdrawn (`RSESSION.CANCEL`); if it was still queued it took nothing and is queued
//!   again, else the object's [`Attempt::took_effect`] check decides before queueing again;
//!   so does a session the server lost (restart, failover);
//! - a session that expired while its process could not read (frozen longer than the grace)
//!   fails the wait with [`Error::SessionExpired`]: the server withdrew it;
//! - the server ends a wait at its deadline; if its outcome is not there shortly after, the
//!   client withdraws the request itself, so a wait returns within its time plus a few
//!   milliseconds whatever else waits;
//! - an acquire dropped while it waits is withdrawn before the drop returns, and a grant that
//!   raced the withdrawal is given back ([`Attempt::give_back`]); an attempt that does not wait,
//!   dropped while its command is on the way, reads the reply and gives back a grant in it;
//! - a blocking wait that runs under a [`CancelToken`] that is cancelled is withdrawn the same
//!   way and fails with [`Error::Cancelled`].
//!
//! Only this file and `session/` know how a wait is carried, so objects implement [`Attempt`]
//! and nothing else.

use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, RedisError, RedisResult, Value};

use crate::cancel::{self, CancelToken};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::Outcome;
use crate::protocol::redisson::lock::Try;
use crate::protocol::redisson::pubsub::Waiter;
use crate::protocol::redisson::Script;
use crate::session::{wire, Delivered, Ticket};
#[cfg(doc)]
use crate::transport::Transport;
use crate::transport::{classify, Delivery, Failure, Io, Redirect};

/// How long an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One attempt.
    No,
    /// Wait on the server at most this long (zero: one attempt).
    For(Duration),
    /// Wait on the server until granted.
    Forever,
}

/// Milliseconds, rounded up, as the server counts them.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// How long after a wait's end the client waits for the server's timeout outcome before it
/// withdraws the request itself (the outcome normally comes within a millisecond or two).
const OUTCOME_LATE: Duration = Duration::from_millis(25);

/// One object's acquire, as the wait path drives it.
pub(crate) trait Attempt: Sync {
    /// The key that routes it.
    fn key(&self) -> &str;
    /// The key, shared: a queued wait's slot keeps it (objects that have it shared already
    /// give it without copying).
    fn shared_key(&self) -> Arc<str> {
        Arc::from(self.key())
    }
    /// The object's kind, as metrics label it (`lock`, `read lock`, `semaphore`, ...).
    fn kind(&self) -> &'static str;
    /// The command. The wait path passes `None` and appends the session options itself;
    /// `Some(ms)` would make it wait with `BLOCK ms` (0: no limit), as redis-cli users do.
    fn command(&self, block: Option<u64>) -> Cmd;
    /// The object's word in the session's outcomes (`lock`, `rwlock`, ...) for `cmd`, this
    /// attempt's command: read from the command's name unless the object knows it.
    fn object(&self, cmd: &Cmd) -> Option<&'static str> {
        wire::object_of(cmd)
    }
    /// Whether `reply` grants the object.
    fn granted(&self, reply: &Value) -> bool;
    /// After an ambiguous failure: the reply it would have had, if it took effect anyway.
    async fn took_effect(&self, ctx: &Context) -> Result<Option<Value>>;
    /// A grant nobody will receive: give it back.
    async fn give_back(&self, ctx: &Context);
    /// A grant nobody will receive, with the reply that granted it: give it back. Objects whose
    /// grant is named by its reply (leased permits: their ids) override it.
    async fn give_back_granted(&self, ctx: &Context, _reply: &Value) {
        self.give_back(ctx).await
    }
}

/// When a wait ends.
#[derive(Clone, Copy, Debug)]
enum Until {
    /// It does not wait: one attempt.
    Now,
    At(Instant),
    Forever,
}

impl Until {
    fn of(wait: Wait) -> Until {
        match wait {
            Wait::No => Until::Now,
            Wait::For(d) if d.is_zero() => Until::Now,
            // A wait too long to represent is a wait without limit.
            Wait::For(d) => Instant::now()
                .checked_add(d)
                .map_or(Until::Forever, Until::At),
            Wait::Forever => Until::Forever,
        }
    }

    /// What is left of the wait; `None`: no limit.
    fn left(self) -> Option<Duration> {
        match self {
            Until::Now => Some(Duration::ZERO),
            Until::At(t) => Some(t.saturating_duration_since(Instant::now())),
            Until::Forever => None,
        }
    }

    /// The server-side timeout to queue with right now (0: none); `None`: don't queue, make one
    /// attempt (no wait, or its time is up after redirects).
    fn queue_ms(self) -> Option<u64> {
        match self {
            Until::Now => None,
            Until::Forever => Some(0),
            Until::At(t) => match t.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(millis(left)),
                _ => None,
            },
        }
    }
}

/// Acquire per `wait`: the server's reply (its "not granted" reply, nil, when the wait ended).
/// Reported to the client's metrics, and traced as an `rlock.acquire` span with its outcome.
pub(crate) async fn acquire<A: Attempt>(ctx: &Context, io: Io, a: &A, wait: Wait) -> Result<Value> {
    let run = || acquire_untraced(ctx, io, a, wait);
    observed(ctx, a.kind(), a.key(), wait, |v| a.granted(v), run).await
}

/// The acquire `run` makes (per `wait`; `granted` reads its result), reported to the client's
/// metrics and traced as an `rlock.acquire` span with its outcome. The future is made where it
/// is awaited: made before, it would be held twice in the caller's state.
async fn observed<T, F: Future<Output = Result<T>>>(
    ctx: &Context,
    kind: &'static str,
    key: &str,
    wait: Wait,
    granted: impl Fn(&T) -> bool,
    run: impl FnOnce() -> F,
) -> Result<T> {
    let span = tracing::info_span!(
        "rlock.acquire",
        kind = kind,
        name = key,
        outcome = tracing::field::Empty,
        wait_ms = tracing::field::Empty,
    );
    let m = &ctx.metrics;
    // With neither metrics nor a subscriber that wants the span (the common hot path), the
    // acquire runs as it is: no clock reads, no outcome to work out.
    if !m.is_on() && span.is_disabled() {
        return run().await;
    }
    m.wait_started(kind, key);
    let start = Instant::now();
    let r = tracing::Instrument::instrument(run(), span.clone()).await;
    let outcome = match &r {
        Ok(v) if granted(v) => Outcome::Acquired,
        Ok(_) if matches!(wait, Wait::No | Wait::For(Duration::ZERO)) => Outcome::Busy,
        Ok(_) => Outcome::Timeout,
        Err(Error::Cancelled { .. }) => Outcome::Cancelled,
        Err(_) => Outcome::Error,
    };
    let waited = start.elapsed();
    m.wait_ended(kind, key, outcome, waited);
    span.record("outcome", outcome.label());
    span.record("wait_ms", waited.as_secs_f64() * 1000.0);
    r
}

async fn acquire_untraced<A: Attempt>(ctx: &Context, io: Io, a: &A, wait: Wait) -> Result<Value> {
    let object = match a.kind() {
        "latch" => "count-down latch",
        kind => kind,
    };
    ctx.protocols
        .require_module(&ctx.transport, &ctx.bg, io, a.key(), object)
        .await?;
    let until = Until::of(wait);
    let cancel = cancel_token(io, until);
    if cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
        return Err(cancelled(a.key()));
    }
    let cancel = cancel.as_ref();
    ctx.transport
        .policy
        .at_most_once(
            &ctx.bg,
            || waited(ctx, io, a, until, cancel),
            // Boxed, as every path off the usual one below: an async call's state is held
            // inline in its caller's, so the rare paths' states made every acquire's future
            // (4.6 KB for a lock's) larger, and it is moved whole at least twice per call.
            || Box::pin(a.took_effect(ctx)),
        )
        .await
}

fn cancelled(key: &str) -> Error {
    Error::Cancelled {
        name: key.to_string(),
    }
}

/// A blocking wait runs on its caller's thread: the token it runs under, if any.
fn cancel_token(io: Io, until: Until) -> Option<CancelToken> {
    match (io, until) {
        (Io::Blocking, Until::At(_) | Until::Forever) => cancel::current(),
        _ => None,
    }
}

/// One object's acquire in Redisson's protocol, as the wait path drives it: a script tried,
/// and tried again when the object's channel says it was released or when the holder's lease
/// ends (reference/redisson.md §0.5), never polled.
pub(crate) trait Scripted: Sync {
    /// The key that routes it.
    fn key(&self) -> &str;
    /// The object's kind, as metrics label it.
    fn kind(&self) -> &'static str;
    /// The channel its releases are published on.
    fn channel(&self) -> String;
    /// The acquire script and its KEYS and ARGV.
    fn call(&self) -> (&'static Script, Vec<String>, Vec<String>);
    /// Arguments after `call`'s that are bytes, not text (permit ids); none by default.
    fn byte_args(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
    /// What the script's reply says.
    fn read(&self, reply: &Value) -> RedisResult<Try>;
    /// After an ambiguous failure: the reply it would have had, if it took effect anyway.
    async fn took_effect(&self, ctx: &Context) -> Result<Option<Value>>;
    /// A grant nobody will receive: give it back.
    async fn give_back(&self, ctx: &Context);
    /// After a granting reply: whether the grant still stands (a script whose grant can vanish
    /// right after it, see the grouped multi-lock's); `false` tries again as if it were busy.
    async fn confirm(&self) -> Result<bool> {
        Ok(true)
    }
    /// How much it takes (a semaphore's permits): a message carrying a count wakes the waiters
    /// whose need fits in it.
    fn need(&self) -> u64 {
        1
    }
}

/// Acquire per `wait` over Redisson's protocol: the granting reply, `None` when the wait
/// ended first. Reported and traced as [`acquire`] is.
///
/// As Redisson waits, done on the client's shared subscriptions: one attempt; if it must wait,
/// subscribe to the object's channel (one subscription per channel for every waiter of the
/// client, on one connection per server), try again (a release between the first attempt and
/// the subscription is not missed), then wait for a message, the holder's lease end or the
/// deadline, whichever comes first, and try again. A message wakes one waiter of the client
/// (only one can win the lock). Cancellation (a dropped future, a [`CancelToken`]) and
/// deadlines as in module mode; an attempt dropped while its script is on the way reads the
/// reply and gives back a grant in it.
pub(crate) async fn acquire_scripted<S: Scripted>(
    ctx: &Context,
    io: Io,
    s: &S,
    wait: Wait,
) -> Result<Option<Value>> {
    let run = || scripted_untraced(ctx, io, s, wait);
    observed(ctx, s.kind(), s.key(), wait, Option::is_some, run).await
}

async fn scripted_untraced<S: Scripted>(
    ctx: &Context,
    io: Io,
    s: &S,
    wait: Wait,
) -> Result<Option<Value>> {
    let until = Until::of(wait);
    let cancel = cancel_token(io, until);
    let cancelled_now = || cancel.as_ref().is_some_and(CancelToken::is_cancelled);
    if cancelled_now() {
        return Err(cancelled(s.key()));
    }
    let on_cancel = async {
        match &cancel {
            Some(c) => c.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(on_cancel);
    // Parked between attempts on the object's channel, once subscribed.
    let mut waiter: Option<Waiter> = None;
    // Subscriptions refused in a row (connection errors).
    let mut refused = 0u32;
    loop {
        if let Some(w) = &mut waiter {
            w.attempting();
        }
        let reply = attempt_scripted(ctx, io, s).await?;
        let tried = s
            .read(&reply)
            .map_err(|e| ctx.transport.error(e, s.key()))?;
        if let Some(w) = &mut waiter {
            w.attempted();
        }
        let retry_in = match tried {
            Try::Granted if s.confirm().await? => return Ok(Some(reply)),
            Try::Granted => Some(Duration::ZERO),
            Try::Busy(ttl) => ttl,
        };
        let left = until.left();
        if left == Some(Duration::ZERO) {
            return Ok(None);
        }
        let nap = match (retry_in, left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let Some(w) = waiter.as_mut().filter(|w| !w.subscription().is_dead()) else {
            // Subscribe within what is left of the wait, then try again before waiting.
            let channel = s.channel();
            let subscribing = ctx
                .pubsub
                .subscribe(&ctx.transport, &ctx.bg, s.key(), &channel);
            tokio::select! {
                biased;
                _ = &mut on_cancel => return Err(cancelled(s.key())),
                r = subscribing => match r {
                    Ok(live) => {
                        waiter = Some(live.waiter(s.need()));
                        refused = 0;
                    }
                    // The server went away (a restart, a failover): after the retry delay,
                    // try again from the acquire, which waits for the server as every
                    // command does; the wait fails once the retries are spent.
                    Err(e @ Error::Connection { .. }) => {
                        refused += 1;
                        if refused > ctx.config.retry_attempts {
                            return Err(e);
                        }
                        tracing::debug!(key = %s.key(), error = %e, "rlock: can't subscribe; trying again");
                        let pause = left.map_or(ctx.config.retry_delay, |l| l.min(ctx.config.retry_delay));
                        tokio::select! {
                            biased;
                            _ = &mut on_cancel => return Err(cancelled(s.key())),
                            _ = ctx.bg.sleep(pause) => {}
                        }
                    }
                    Err(e) => return Err(e),
                },
                _ = sleep_for(ctx, left) => return Ok(None),
            }
            continue;
        };
        let napped = tokio::select! {
            biased;
            _ = &mut on_cancel => return Err(cancelled(s.key())),
            _ = w.woken() => false,
            _ = sleep_for(ctx, nap) => true,
        };
        if napped {
            w.unpark();
        }
        if cancelled_now() {
            return Err(cancelled(s.key()));
        }
    }
}

/// Sleep `d` on the client's runtime; `None`: forever.
async fn sleep_for(ctx: &Context, d: Option<Duration>) {
    match d {
        Some(d) => ctx.bg.sleep(d).await,
        None => std::future::pending().await,
    }
}

/// One attempt of the acquire script: its reply. Sent again only after the object's
/// [`Scripted::took_effect`] says an ambiguous failure did not take effect.
async fn attempt_scripted<S: Scripted>(ctx: &Context, io: Io, s: &S) -> Result<Value> {
    ctx.transport
        .policy
        .at_most_once(
            &ctx.bg,
            || async {
                let (script, keys, args) = s.call();
                let bytes = s.byte_args();
                let (transport, bg) = (&ctx.transport, &ctx.bg);
                let mut trying = Trying {
                    ctx,
                    s,
                    sending: InFlight::new(async move {
                        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                        let args: Vec<&[u8]> = args
                            .iter()
                            .map(String::as_bytes)
                            .chain(bytes.iter().map(Vec::as_slice))
                            .collect();
                        script
                            .run_bytes::<Value>(
                                transport,
                                bg,
                                io,
                                &keys,
                                &args,
                                None,
                                Delivery::AtMostOnce,
                            )
                            .await
                    }),
                };
                trying.sending.reply().await
            },
            || Box::pin(s.took_effect(ctx)),
        )
        .await
}

/// An acquire script on its way. Dropped before its reply was read (its caller went away), it
/// reads the reply before the drop returns and gives back a grant in it, as [`Attempting`]
/// does for the module's commands.
struct Trying<'a, S: Scripted> {
    ctx: &'a Context,
    s: &'a S,
    sending: InFlight<'a, Result<Value>>,
}

impl<S: Scripted> Drop for Trying<'_, S> {
    fn drop(&mut self) {
        let Some(sending) = self.sending.unread() else {
            return;
        };
        let (ctx, s) = (self.ctx, self.s);
        ctx.bg.block_on(async {
            match sending.await {
                Ok(v) => {
                    if matches!(s.read(&v), Ok(Try::Granted)) {
                        tracing::debug!(
                            key = s.key(),
                            "rlock: an acquire was granted as its caller left; giving it back"
                        );
                        s.give_back(ctx).await;
                    }
                }
                Err(e) if e.is_ambiguous() => {
                    if matches!(s.took_effect(ctx).await, Ok(Some(_))) {
                        s.give_back(ctx).await;
                    }
                }
                Err(_) => {}
            }
        });
    }
}

/// Send, then wait for the outcome; an outcome that says "not here" queues again where the key
/// is served now.
async fn waited<A: Attempt>(
    ctx: &Context,
    io: Io,
    a: &A,
    until: Until,
    cancel: Option<&CancelToken>,
) -> Result<Value> {
    let policy = &ctx.transport.policy;
    let mut requeued = 0;
    loop {
        let sent = policy
            .run(&ctx.bg, Delivery::AtMostOnce, |to| {
                send(ctx, io, a, until, to)
            })
            .await
            .map_err(|e| ctx.transport.error(e, a.key()))?;
        let mut queued = match sent {
            Sent::Reply(v) => return Ok(v),
            Sent::Queued(q) => q,
            Sent::Withdrawn(e) => {
                requeued += 1;
                if requeued > policy.redirect_budget() {
                    return Err(ctx.transport.error(e, a.key()));
                }
                tracing::debug!(key = a.key(), error = %e, "rlock: a wait cut off while queued must queue again");
                ctx.bg.sleep(policy.delay).await;
                continue;
            }
        };
        let Some(outcome) = Box::pin(queued.outcome(until, cancel)).await else {
            return Err(cancelled(a.key()));
        };
        let e = match outcome {
            Delivered::Granted(v) => return Ok(v),
            Delivered::TimedOut => return Ok(Value::Nil),
            Delivered::Expired => {
                // A grant a read returned is ours even after the session ended; one whose reply
                // never reached us (the connection died with it) would be held by nobody until
                // its lease ends: give it back.
                if matches!(Box::pin(a.took_effect(ctx)).await, Ok(Some(_))) {
                    Box::pin(a.give_back(ctx)).await;
                }
                return Err(Error::SessionExpired {
                    addr: queued.addr().to_string(),
                });
            }
            Delivered::Interrupted => return Err(interrupted(queued.addr())),
            Delivered::Failed(e) => e,
        };
        requeued += 1;
        match classify(&e) {
            Failure::Redirected(Redirect::Moved(addr)) if requeued <= policy.redirect_budget() => {
                ctx.transport.learn(a.key(), &addr)
            }
            Failure::NotRun | Failure::Redirected(_) if requeued <= policy.redirect_budget() => {
                tracing::debug!(key = a.key(), error = %e, "rlock: a queued wait must queue again");
                ctx.transport.forget(a.key());
                ctx.bg.sleep(policy.delay).await;
            }
            _ => return Err(ctx.transport.error(e, a.key())),
        }
    }
}

/// The server lost the session the wait was queued in: whether it took effect is unknown.
fn interrupted(addr: &str) -> Error {
    Error::Connection {
        addr: addr.to_string(),
        source: RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the server lost the client's session (restart or failover)",
        )),
    }
}

/// What sending an acquire gave.
enum Sent<'a, A: Attempt> {
    /// The server's reply: granted at once, or not granted and not queued.
    Reply(Value),
    /// Queued: the outcome comes through the session.
    Queued(Queued<'a, A>),
    /// The connection broke under the acquire, and withdrawing it proved that it was still
    /// queued: it took nothing, so it is queued again (with the error, should the retries run
    /// out). Not settled by [`Attempt::took_effect`], which cannot tell for a semaphore and
    /// would count its permits in doubt.
    Withdrawn(RedisError),
}

/// Send the acquire once: to the node `to` points at (a redirect), else the one serving the
/// key, in that node's session.
async fn send<'a, A: Attempt>(
    ctx: &'a Context,
    io: Io,
    a: &'a A,
    until: Until,
    to: Option<Redirect>,
) -> RedisResult<Sent<'a, A>> {
    let key = a.key();
    let (addr, asking): (Arc<str>, bool) = match &to {
        Some(Redirect::Moved(addr)) => {
            ctx.transport.learn(key, addr);
            (Arc::from(addr.as_str()), false)
        }
        Some(Redirect::Ask(addr)) => (Arc::from(addr.as_str()), true),
        None => (ctx.transport.node_of(key).await, false),
    };
    let r = send_at(ctx, io, a, until, &addr, asking).await;
    if r.as_ref().is_err_and(|e| e.code() == Some("NOSESSION")) {
        // Boxed, as the other rare paths: see `acquire_untraced`.
        Box::pin(ctx.sessions.leave_if_moved(&ctx.transport, io, &addr)).await;
    }
    // Keep the node map right for the next attempt.
    if let Err(e) = &r {
        match classify(e) {
            Failure::Redirected(Redirect::Moved(addr)) => ctx.transport.learn(key, &addr),
            Failure::Unreachable | Failure::NotRun => ctx.transport.forget(key),
            _ => {}
        }
    }
    r
}

async fn send_at<'a, A: Attempt>(
    ctx: &'a Context,
    io: Io,
    a: &'a A,
    until: Until,
    addr: &Arc<str>,
    asking: bool,
) -> RedisResult<Sent<'a, A>> {
    let listener = ctx.sessions.at(&ctx.transport, addr)?;
    let mut cmd = a.command(None);
    let transport = &ctx.transport;
    // The address goes with the send (which may outlive this call: see `Queued`); one server
    // is reached without it, and each clone was two atomic writes to a count every calling
    // thread shares.
    let to = (!transport.is_single()).then(|| addr.clone());
    // A wait is registered before it is sent (its outcome may reach the listener before the
    // reply here), which takes the session open: at once when it is (the usual case: one look
    // at the session), else once the listener has opened it.
    let ticket = match until {
        Until::Now => None,
        Until::At(_) | Until::Forever => {
            let register = || listener.register(a.shared_key(), a.object(&cmd));
            Some(match register() {
                Ok(t) => t,
                Err(_) => {
                    listener.ready().await?;
                    register()?
                }
            })
        }
    };
    let (Some(ticket), Some(timeout_ms)) = (ticket, until.queue_ms()) else {
        let name = listener.ready().await?;
        wire::name_session(&mut cmd, &name, None);
        let mut attempt = Attempting {
            ctx,
            a,
            sending: InFlight::new(async move {
                let to = to.as_deref().unwrap_or_default();
                transport.send_at(io, to, &cmd, asking).await
            }),
        };
        return Ok(Sent::Reply(attempt.sending.reply().await?));
    };
    let queue = wire::Queue {
        request: ticket.request,
        timeout_ms,
        park_ms: ctx.transport.park_ms(io),
    };
    wire::name_session(&mut cmd, &ticket.name, Some(queue));
    let mut queued = Queued {
        ctx,
        a,
        io,
        ticket,
        armed: true,
        sending: InFlight::new(async move {
            let to = to.as_deref().unwrap_or_default();
            transport.send_at(io, to, &cmd, asking).await
        }),
    };
    match queued.sending.reply().await {
        Ok(v) if wire::is_queued(&v) => Ok(Sent::Queued(queued)),
        Ok(v) => {
            queued.armed = false;
            Ok(Sent::Reply(v))
        }
        Err(e) if classify(&e) == Failure::Cut => match Box::pin(queued.unknown()).await {
            Withdrawal::Granted(v) => Ok(Sent::Reply(v)),
            Withdrawal::StillQueued => Ok(Sent::Withdrawn(e)),
            Withdrawal::Unknown => Err(e),
        },
        Err(e) => {
            queued.armed = false;
            Err(e)
        }
    }
}

/// The acquire on its way: owned by [`Queued`] or [`Attempting`] (in an [`InFlight`]), so that a
/// caller who goes away while it is in flight does not take its reply with it.
type Sending<'a, T = RedisResult<Value>> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An acquire's send until its reply is read (`None` then). In a mutex only so that the wait's
/// future stays `Sync` (it is never locked: every use has `&mut self`).
struct InFlight<'a, T = RedisResult<Value>>(Mutex<Option<Sending<'a, T>>>);

impl<'a, T> InFlight<'a, T> {
    fn new(send: impl Future<Output = T> + Send + 'a) -> Self {
        InFlight(Mutex::new(Some(Box::pin(send))))
    }

    /// The reply (read once).
    async fn reply(&mut self) -> T {
        let sending = self.0.get_mut();
        let reply = sending.as_mut().expect("read once").as_mut().await;
        *sending = None;
        reply
    }

    /// The send, if its reply was not read: its caller went away.
    fn unread(&mut self) -> Option<Sending<'a, T>> {
        self.0.get_mut().take()
    }
}

/// A grant in a reply whose caller went away: give it back.
async fn give_back_if_granted<A: Attempt>(ctx: &Context, a: &A, reply: &Value) {
    if a.granted(reply) {
        tracing::debug!(
            key = a.key(),
            "rlock: an acquire was granted as its caller left; giving it back"
        );
        a.give_back_granted(ctx, reply).await;
    }
}

/// An attempt that does not queue (`try_lock`, `try_acquire`, ...), on its way. Dropped before
/// its reply was read (its caller went away), it reads the reply before the drop returns and
/// gives back a grant in it: the command runs on the server whether or not anyone waits for
/// the reply, and a grant nobody received would be held by nobody until its lease ends (plain
/// permits: for good). A reply the connection lost is settled by [`Attempt::took_effect`].
struct Attempting<'a, A: Attempt> {
    ctx: &'a Context,
    a: &'a A,
    sending: InFlight<'a>,
}

impl<A: Attempt> Drop for Attempting<'_, A> {
    fn drop(&mut self) {
        let Some(sending) = self.sending.unread() else {
            return;
        };
        let (ctx, a) = (self.ctx, self.a);
        ctx.bg.block_on(async {
            match sending.await {
                Ok(v) => give_back_if_granted(ctx, a, &v).await,
                Err(_) => {
                    if matches!(a.took_effect(ctx).await, Ok(Some(_))) {
                        a.give_back(ctx).await;
                    }
                }
            }
        });
    }
}

/// A request queued in a session. Dropped while armed (its caller went away), it is withdrawn
/// before the drop returns, and a grant that came first is given back: the acquire's own reply
/// included, when the caller went away while the acquire was in flight (a permit granted at
/// once has no owner the server could be asked about: it was lost for good when that reply was
/// dropped with the caller's future).
struct Queued<'a, A: Attempt> {
    ctx: &'a Context,
    a: &'a A,
    io: Io,
    ticket: Ticket,
    armed: bool,
    sending: InFlight<'a>,
}

impl<A: Attempt> Queued<'_, A> {
    fn addr(&self) -> &str {
        self.ticket.listener().addr()
    }

    /// The outcome; `None` when `cancel` was cancelled first: the request was then withdrawn
    /// and a grant that raced the withdrawal given back. The server times the wait out at its
    /// deadline; if that outcome is late (the listener cut off), the request is withdrawn here.
    async fn outcome(&mut self, until: Until, cancel: Option<&CancelToken>) -> Option<Delivered> {
        let ctx = self.ctx;
        let late = async {
            match until {
                Until::At(t) => ctx.bg.sleep_until(t + OUTCOME_LATE).await,
                _ => std::future::pending().await,
            }
        };
        let cancelled = async {
            match cancel {
                Some(c) => c.cancelled().await,
                None => std::future::pending().await,
            }
        };
        enum Ended {
            Delivered(Delivered),
            Late,
            Cancelled,
        }
        let ended = tokio::select! {
            biased;
            d = self.ticket.outcome() => Ended::Delivered(d),
            _ = late => Ended::Late,
            _ = cancelled => Ended::Cancelled,
        };
        let d = match ended {
            Ended::Delivered(d) => d,
            Ended::Late => self.withdraw().await,
            Ended::Cancelled => {
                self.abandon().await;
                self.armed = false;
                return None;
            }
        };
        self.armed = false;
        Some(d)
    }

    /// The caller gives up on a queued request: withdraw it, and give back a grant that came
    /// first (what dropping an armed request does, awaited here).
    async fn abandon(&mut self) {
        let ctx = self.ctx;
        let d = match self.ticket.try_outcome() {
            Some(d) => d,
            None => self.withdraw().await,
        };
        match d {
            Delivered::Granted(v) => give_back_if_granted(ctx, self.a, &v).await,
            // No word from the listener: ask the server whether the grant came first.
            Delivered::Interrupted => {
                if matches!(self.a.took_effect(ctx).await, Ok(Some(_))) {
                    self.a.give_back(ctx).await;
                }
            }
            _ => {}
        }
    }

    /// Take the request off the server's queue and read its outcome: `TimedOut` when it was
    /// still queued, else the outcome the listener hands over (a grant that raced the cancel
    /// included), `Interrupted` if none comes within the response timeout.
    async fn withdraw(&mut self) -> Delivered {
        if let Ok(true) = self.cancel().await {
            return Delivered::TimedOut;
        }
        let t = self.ctx.config.response_timeout;
        match tokio::time::timeout(t, self.ticket.outcome()).await {
            Ok(d) => d,
            Err(_) => Delivered::Interrupted,
        }
    }

    /// `RSESSION.CANCEL`: whether the request was still queued. A session the server no longer
    /// knows withdrew it already (its listener reports how): not cancelled here.
    async fn cancel(&self) -> RedisResult<bool> {
        let (ctx, io) = (self.ctx, self.io);
        let cmd = wire::cancel(&self.ticket.name, self.ticket.request);
        let addr = self.addr();
        let reply = ctx
            .transport
            .policy
            .run(&ctx.bg, Delivery::Idempotent, |_| async {
                match ctx.transport.send_at(io, addr, &cmd, false).await {
                    Err(e) if e.code() == Some("NOSESSION") => Ok(Value::Int(0)),
                    r => r,
                }
            })
            .await?;
        Ok(reply == Value::Int(1))
    }

    /// The acquire's connection broke: its request may be queued, decided, or lost on the
    /// way. Withdraw it, so that what follows sees the whole truth.
    async fn unknown(mut self) -> Withdrawal {
        self.armed = false;
        match self.cancel().await {
            Ok(true) => Withdrawal::StillQueued,
            Ok(false) => match self.ticket.try_outcome() {
                Some(Delivered::Granted(v)) => Withdrawal::Granted(v),
                _ => Withdrawal::Unknown,
            },
            Err(e) => {
                tracing::warn!(
                    key = self.a.key(),
                    error = %e,
                    "rlock: can't withdraw a wait whose acquire was cut off; if the server \
                     grants it later, the grant frees when its lease ends"
                );
                Withdrawal::Unknown
            }
        }
    }
}

/// What withdrawing an acquire whose connection broke found.
enum Withdrawal {
    /// Granted before the cancel: the grant.
    Granted(Value),
    /// Still queued, and now withdrawn: it took nothing.
    StillQueued,
    /// Decided some other way, or the cancel failed: the at-most-once check must ask.
    Unknown,
}

impl<A: Attempt> Drop for Queued<'_, A> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let ctx = self.ctx;
        ctx.bg.block_on(async {
            if let Some(sending) = self.sending.unread() {
                // The caller went away while the acquire was in flight: its reply decides.
                match sending.await {
                    Ok(v) if wire::is_queued(&v) => {} // queued: withdraw it, below
                    Ok(v) => return give_back_if_granted(ctx, self.a, &v).await,
                    Err(_) => {} // unknown: withdraw, then ask the server, below
                }
            }
            self.abandon().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_round_up() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn a_wait_queues_with_what_is_left_of_its_time() {
        assert_eq!(Until::Now.queue_ms(), None);
        assert_eq!(Until::Forever.queue_ms(), Some(0));
        let soon = Until::At(Instant::now() + Duration::from_secs(5));
        assert!(matches!(soon.queue_ms(), Some(ms) if ms > 4000 && ms <= 5000));
        let past = Until::At(Instant::now() - Duration::from_millis(1));
        assert_eq!(past.queue_ms(), None, "time is up: one last attempt");
    }
}

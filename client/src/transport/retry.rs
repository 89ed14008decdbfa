//! The one retry policy: what a failure means, and whether and when to send again.
//!
//! Every connection below is opened with no retries of its own (`ConnectionManager` and the
//! cluster connection with zero retries): all retrying happens here, so the limits the user
//! configures are the whole story. The meaning of an error comes from redis-rs
//! (`RedisError::retry_method`, `redirect_node`), with one addition it does not know:
//! `UNBLOCKED`, Redis' reply to a client blocked on a node that turns into a replica (the
//! command did not run; redis-rs files it under "don't retry").

use std::future::Future;
use std::time::{Duration, Instant};

use redis::{RedisError, RetryMethod};

use crate::error::Result;
use crate::metrics::Metrics;
use crate::runtime::Background;

/// Whether a command may run twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// Reads, renewals, force release: sent again after a broken connection.
    Idempotent,
    /// Acquire, release: a blind resend could count a hold twice. A broken connection is
    /// reported as ambiguous; the operation checks what happened ([`RetryPolicy::at_most_once`]).
    AtMostOnce,
}

/// Where to send after a redirect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED`: this node serves the slot now.
    Moved(String),
    /// `ASK`: send once to this node, preceded by `ASKING`.
    Ask(String),
}

/// What a failed send means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Nothing was sent: no connection could be made.
    Unreachable,
    /// The connection broke or the reply timed out after sending: the command may have run.
    Cut,
    /// Not run here; another node serves the key.
    Redirected(Redirect),
    /// Not run: a migration, failover or load is under way; try again after a pause.
    NotRun,
    /// An answer (an error reply): final.
    Final,
}

/// What `e` means for the command that got it.
pub(crate) fn classify(e: &RedisError) -> Failure {
    // UNBLOCKED: Redis' reply to a client blocked on a node that turns into a replica (also the
    // outcome of a session request queued there). NOSESSION: the session named is not open on
    // the server yet (it is being opened again); nothing ran.
    if matches!(e.code(), Some("UNBLOCKED" | "NOSESSION")) {
        return Failure::NotRun;
    }
    match e.retry_method() {
        RetryMethod::MovedRedirect => redirect(e, Redirect::Moved),
        RetryMethod::AskRedirect => redirect(e, Redirect::Ask),
        RetryMethod::WaitAndRetry | RetryMethod::RefreshSlotsAndRetry => Failure::NotRun,
        RetryMethod::Reconnect
        | RetryMethod::RetryImmediately
        | RetryMethod::ReconnectFromInitialConnections => {
            if e.is_connection_refusal() || e.kind() == redis::ErrorKind::ClusterConnectionNotFound
            {
                Failure::Unreachable
            } else {
                Failure::Cut
            }
        }
        _ => Failure::Final,
    }
}

fn redirect(e: &RedisError, to: fn(String) -> Redirect) -> Failure {
    match e.redirect_node() {
        Some((addr, _slot)) => Failure::Redirected(to(addr.to_string())),
        None => Failure::NotRun,
    }
}

/// The limits of retrying (see "When Redis can't be reached" on
/// [`ClientBuilder`](crate::ClientBuilder)).
#[derive(Clone, Debug)]
pub(crate) struct RetryPolicy {
    /// How long a call may keep trying to reach the server.
    pub(crate) connect_timeout: Duration,
    /// Pause between connection attempts, and before resending what the server did not run.
    pub(crate) delay: Duration,
    /// Resends after a connection broke under a command.
    pub(crate) attempts: u32,
    /// Counts each resend (`rlock_retries_total`).
    pub(crate) metrics: Metrics,
}

impl RetryPolicy {
    /// Redirects and "not run" replies followed per call before giving up (a migration or
    /// failover settles within a few).
    pub(crate) fn redirect_budget(&self) -> u32 {
        self.attempts.max(1) * 10
    }

    /// Send with `send(redirect)` until it succeeds or the policy gives up; `redirect` is where
    /// the last reply pointed. Returns the last error when giving up.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        bg: &Background,
        delivery: Delivery,
        mut send: F,
    ) -> std::result::Result<T, RedisError>
    where
        F: FnMut(Option<Redirect>) -> Fut,
        Fut: Future<Output = std::result::Result<T, RedisError>>,
    {
        let mut unreachable_since: Option<Instant> = None;
        let (mut cuts, mut redirects) = (0, 0);
        let mut to: Option<Redirect> = None;
        loop {
            let e = match send(to.take()).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match classify(&e) {
                Failure::Unreachable => {
                    let since = *unreachable_since.get_or_insert_with(Instant::now);
                    let left = self.connect_timeout.saturating_sub(since.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    self.metrics.retry("connection");
                    bg.sleep(self.delay.min(left)).await;
                }
                Failure::Cut if delivery == Delivery::Idempotent && cuts < self.attempts => {
                    self.metrics.retry("connection");
                    cuts += 1;
                }
                Failure::Redirected(r) if redirects < self.redirect_budget() => {
                    self.metrics.retry("redirect");
                    redirects += 1;
                    to = Some(r);
                }
                Failure::NotRun if redirects < self.redirect_budget() => {
                    self.metrics.retry("requeue");
                    redirects += 1;
                    bg.sleep(self.delay).await;
                }
                _ => return Err(e),
            }
        }
    }

    /// A command that must take effect at most once: `send` it; after an ambiguous failure
    /// (the connection broke, the reply timed out) ask `happened` whether it took effect anyway
    /// (`Some`: the reply it would have had) before sending it again.
    pub(crate) async fn at_most_once<T, S, SF, H, HF>(
        &self,
        bg: &Background,
        mut send: S,
        mut happened: H,
    ) -> Result<T>
    where
        S: FnMut() -> SF,
        SF: Future<Output = Result<T>>,
        H: FnMut() -> HF,
        HF: Future<Output = Result<Option<T>>>,
    {
        let mut attempt = 0;
        loop {
            let err = match send().await {
                Err(e) if e.is_ambiguous() && attempt < self.attempts => e,
                done => return done,
            };
            attempt += 1;
            tracing::debug!(error = %err, attempt, "rlock: outcome unknown; checking before sending again");
            bg.sleep(self.delay).await;
            if let Some(v) = happened().await? {
                return Ok(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_err(text: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap() {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn classifies_what_redis_replies() {
        assert_eq!(
            classify(&server_err("MOVED 3999 127.0.0.1:6381")),
            Failure::Redirected(Redirect::Moved("127.0.0.1:6381".into()))
        );
        assert_eq!(
            classify(&server_err("ASK 3999 127.0.0.1:6382")),
            Failure::Redirected(Redirect::Ask("127.0.0.1:6382".into()))
        );
        for busy in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "LOADING Redis is loading the dataset in memory",
            "READONLY You can't write against a read only replica.",
            "MASTERDOWN Link with MASTER is down",
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
            "NOSESSION no such session (never opened, closed, or expired): open it with RSESSION.OPEN",
        ] {
            assert_eq!(classify(&server_err(busy)), Failure::NotRun, "{busy}");
        }
        assert_eq!(classify(&server_err("NOTOWNER not held")), Failure::Final);
        assert_eq!(classify(&server_err("ERR wrong")), Failure::Final);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), Failure::Unreachable);
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&reset), Failure::Cut);
        let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(classify(&slow), Failure::Cut);
    }
}

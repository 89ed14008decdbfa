//! Redis Sentinel: a primary with replicas, whose address the Sentinels know.
//!
//! redis-rs' `sentinel` module finds the primary (`SENTINEL MASTERS` on each Sentinel in turn,
//! then `ROLE` on the node named, which must answer `master`). On that primary the client works
//! exactly as on a single server: a [`Single`] per primary address, with its multiplexed and
//! pooled connections. What this file adds is following a failover:
//!
//! - a send whose failure says the primary may have changed (it could not be reached, the
//!   connection broke, or it answered `READONLY`/`UNBLOCKED`/`MASTERDOWN`: it is a replica
//!   now) asks the Sentinels again, at most every [`LOOK_EVERY`]; the retry policy then sends
//!   again, to the primary they name;
//! - a subscriber on the Sentinels' `+switch-master` channel asks at once when they announce
//!   a new primary, so the client moves before its next command fails;
//! - every change of primary is published ([`SentinelTransport::primary_changes`]): the client
//!   ends its sessions on the former primary (their waits queue again on the new one) and
//!   renews its holds there at once (those that did not survive are reported lost).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult};
use redis::{TlsMode, Value};
use tokio::sync::watch;

use super::pool::Node;
use super::retry::{classify, Failure};
use super::single::Single;
use super::waiter::Waiter;
use super::{Io, Request};
use crate::config::{redis_client, Certificates, Config, SentinelConfig};
use crate::error::{Error, Result};

/// What the transport's calls return here: the look-up and failover logic make deep futures,
/// and every caller's future would embed them (deep enough to overflow rustc's limits when
/// an application checks its own future for `Send`); boxed, a caller embeds a pointer.
pub(crate) type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The Sentinels are asked again after a failure at most this often (many callers may fail
/// at once).
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Longest pause between attempts of the `+switch-master` subscriber to reach a Sentinel.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub(crate) struct SentinelTransport {
    master: String,
    /// redis-rs' look-up of the primary (needs `&mut`: one look-up at a time).
    lookup: tokio::sync::Mutex<SentinelClient>,
    /// The same look-up on each Sentinel alone: after a Sentinel announced a switch, it is the
    /// one to ask (the others may not have learnt it yet, and the former primary answers `ROLE`
    /// as a master until it is demoted, so the look-up across all of them may still name it).
    each: Vec<tokio::sync::Mutex<SentinelClient>>,
    /// The primary now; `None` until the first look-up.
    primary: Mutex<Option<Arc<Single>>>,
    /// Every primary seen, by address: a session, a cancel or a `WAIT` may still name one.
    seen: Mutex<HashMap<Arc<str>, Arc<Single>>>,
    /// When the Sentinels were last asked after a failure.
    looked: Mutex<Option<Instant>>,
    /// The primary's address, for whoever follows failovers.
    changes: watch::Sender<Option<Arc<str>>>,
    /// A look-up may take this long (redis-rs' own connections to Sentinels and to the node
    /// they name have no timeout of ours).
    lookup_timeout: Duration,
    cfg: Config,
    /// The client's runtime: the managers of a new primary's [`Single`] spawn their drivers
    /// there, whoever found it.
    handle: tokio::runtime::Handle,
    /// Dropped with the transport: ends the `+switch-master` subscriber.
    _stop: watch::Sender<()>,
}

/// The Sentinels' own connection settings, from their URLs.
#[derive(Clone)]
struct Sentinels {
    infos: Vec<ConnectionInfo>,
    tls: bool,
}

fn parse_sentinels(urls: &[String]) -> Result<Sentinels> {
    let infos = urls
        .iter()
        .map(|u| {
            u.as_str()
                .into_connection_info()
                .map_err(|e| Error::Config(format!("bad Sentinel URL '{u}': {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let tls = infos
        .iter()
        .filter(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. }))
        .count();
    if tls != 0 && tls != infos.len() {
        return Err(Error::Config(
            "Sentinel URLs must all be redis:// or all rediss://".into(),
        ));
    }
    if infos
        .iter()
        .any(|i| matches!(i.addr(), ConnectionAddr::Unix(_)))
    {
        return Err(Error::Config("Sentinels must be TCP addresses".into()));
    }
    let creds = |i: &ConnectionInfo| {
        let r = i.redis_settings();
        (
            r.username().map(str::to_string),
            r.password().map(str::to_string),
        )
    };
    if infos.iter().any(|i| creds(i) != creds(&infos[0])) {
        return Err(Error::Config(
            "Sentinel URLs must all carry the same user and password (redis-rs authenticates \
             to every Sentinel alike)"
                .into(),
        ));
    }
    Ok(Sentinels {
        tls: tls != 0,
        infos,
    })
}

/// redis-rs' Sentinel client for `s`: the Sentinels' credentials and TLS from their URLs; the
/// primary's from the builder, with TLS when the Sentinels use it (as Redisson does).
// `cfg` gives the certificates only (the `tls` feature).
#[cfg_attr(not(feature = "tls"), allow(unused_variables))]
fn sentinel_client(
    s: &SentinelConfig,
    cfg: &Config,
    sentinels: &Sentinels,
) -> Result<SentinelClient> {
    let bad = |e: RedisError| Error::Config(format!("bad Sentinel configuration: {e}"));
    let addrs = sentinels.infos.iter().map(|i| i.addr().clone());
    let mut b =
        SentinelClientBuilder::new(addrs, &s.master, SentinelServerType::Master).map_err(bad)?;
    let first = sentinels.infos[0].redis_settings();
    if let Some(u) = first.username() {
        b = b.set_client_to_sentinel_username(u);
    }
    if let Some(p) = first.password() {
        b = b.set_client_to_sentinel_password(p);
    }
    if let Some(u) = &s.username {
        b = b.set_client_to_redis_username(u);
    }
    if let Some(p) = &s.password {
        b = b.set_client_to_redis_password(p);
    }
    if s.database != 0 {
        b = b.set_client_to_redis_db(s.database);
    }
    if sentinels.tls {
        b = b.set_client_to_redis_tls_mode(TlsMode::Secure);
        #[cfg(feature = "tls")]
        if let Some(certs) = cfg.tls.certificates() {
            b = b
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs);
        }
    }
    b.build().map_err(bad)
}

/// An error the retry policy takes for "the server can't be reached" (it tries again within
/// the connect timeout): no primary is known, or the one named is not ours to reach.
fn unreachable(what: String) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        what,
    ))
}

/// `NOSESSION`: the error a command naming a session at a former primary gets (the retry
/// policy reads it as "not run: try again").
fn left_behind(addr: &str, master: &str) -> RedisError {
    let text = format!(
        "-NOSESSION {addr} is not the primary of '{master}' any more: the client left its session there\r\n"
    );
    match redis::parse_redis_value(text.as_bytes()) {
        Ok(Value::ServerError(e)) => e.into(),
        _ => unreachable(text),
    }
}

/// Whether `e`, met on the primary, may mean that it is not the primary any more.
fn primary_in_doubt(e: &RedisError) -> bool {
    match classify(e) {
        Failure::Unreachable | Failure::Cut => true,
        Failure::NotRun => matches!(e.code(), Some("READONLY" | "UNBLOCKED" | "MASTERDOWN")),
        _ => false,
    }
}

impl SentinelTransport {
    /// Must run inside the client runtime's context (the subscriber is spawned there).
    pub(crate) fn new(s: &SentinelConfig, cfg: &Config) -> Result<Arc<SentinelTransport>> {
        let sentinels = parse_sentinels(&s.sentinels)?;
        let client = sentinel_client(s, cfg, &sentinels)?;
        let each = sentinels
            .infos
            .iter()
            .map(|i| {
                let one = Sentinels {
                    infos: vec![i.clone()],
                    tls: sentinels.tls,
                };
                sentinel_client(s, cfg, &one).map(tokio::sync::Mutex::new)
            })
            .collect::<Result<Vec<_>>>()?;
        let (stop, stopped) = watch::channel(());
        let t = Arc::new(SentinelTransport {
            master: s.master.clone(),
            lookup: tokio::sync::Mutex::new(client),
            each,
            primary: Mutex::new(None),
            seen: Mutex::new(HashMap::new()),
            looked: Mutex::new(None),
            changes: watch::Sender::new(None),
            lookup_timeout: cfg.connect_timeout + cfg.response_timeout,
            cfg: cfg.clone(),
            handle: tokio::runtime::Handle::current(),
            _stop: stop,
        });
        let infos = sentinels.infos;
        let certs = if sentinels.tls {
            cfg.tls.certificates()
        } else {
            None
        };
        tokio::spawn(switches(Arc::downgrade(&t), infos, certs, stopped));
        Ok(t)
    }

    /// The primary's address each time it changes (`None` before the first look-up).
    pub(crate) fn primary_changes(&self) -> watch::Receiver<Option<Arc<str>>> {
        self.changes.subscribe()
    }

    fn current(&self) -> Option<Arc<Single>> {
        self.primary.lock().clone()
    }

    /// The address to name in errors: the primary's, or the master name before it is known.
    pub(crate) fn addr(&self) -> Arc<str> {
        match self.current() {
            Some(p) => p.node.addr.clone(),
            None => Arc::from(format!("sentinel master '{}'", self.master)),
        }
    }

    /// The primary, looked up first if none is known yet.
    pub(crate) async fn primary(&self) -> RedisResult<Arc<Single>> {
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let mut lookup = self.lookup.lock().await;
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let client = self.look(&mut lookup).await?;
        Ok(self.adopt(client))
    }

    /// Ask the Sentinels for the primary, within the look-up timeout.
    async fn look(&self, lookup: &mut SentinelClient) -> RedisResult<redis::Client> {
        // Boxed: redis-rs' look-up future is deep, and every send's future would embed it.
        let found = Box::pin(tokio::time::timeout(
            self.lookup_timeout,
            lookup.async_get_client(),
        ))
        .await;
        match found {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(unreachable(format!(
                "no Sentinel names a reachable primary for '{}': {e}",
                self.master
            ))),
            Err(_) => Err(unreachable(format!(
                "the Sentinels did not name a primary for '{}' within {:?}",
                self.master, self.lookup_timeout
            ))),
        }
    }

    /// Make the node `client` reaches the primary (if it is not already) and tell followers.
    fn adopt(&self, client: redis::Client) -> Arc<Single> {
        let addr: Arc<str> = Arc::from(client.get_connection_info().addr().to_string());
        let mut primary = self.primary.lock();
        if let Some(p) = primary.as_ref().filter(|p| p.node.addr == addr) {
            return p.clone();
        }
        let single = {
            let mut seen = self.seen.lock();
            match seen.get(&addr) {
                Some(s) => s.clone(),
                None => {
                    let _in = self.handle.enter();
                    // Only the client's settings are checked here, and they were at build.
                    let s = Arc::new(Single::new(client, &self.cfg).expect("settings checked"));
                    seen.insert(addr.clone(), s.clone());
                    s
                }
            }
        };
        let old = primary.replace(single.clone());
        drop(primary);
        match old {
            Some(o) => tracing::warn!(
                master = %self.master,
                from = %o.node.addr,
                to = %addr,
                "rlock: Sentinel names a new primary; following it"
            ),
            None => {
                tracing::debug!(master = %self.master, primary = %addr, "rlock: Sentinel names the primary")
            }
        }
        self.changes.send_replace(Some(addr));
        single
    }

    /// Ask the Sentinels again after a failure on the primary at `failed` (skipped if the
    /// primary changed since, or was looked up within [`LOOK_EVERY`]).
    async fn relook(&self, failed: &Arc<str>) {
        let mut lookup = self.lookup.lock().await;
        if self.current().is_some_and(|p| p.node.addr != *failed) {
            return;
        }
        {
            let mut looked = self.looked.lock();
            if looked.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
                return;
            }
            *looked = Some(Instant::now());
        }
        match self.look(&mut lookup).await {
            Ok(client) => {
                self.adopt(client);
            }
            Err(e) => {
                tracing::debug!(error = %e, "rlock: Sentinel look-up failed; keeping the primary")
            }
        }
    }

    /// The Sentinel `by` announced that `announced` is the primary now: ask that Sentinel
    /// (the others may not know yet) until its look-up names it, within the look-up timeout
    /// (redis-rs' look-up decides, checking `ROLE` on the node; the announcement only says when
    /// and whom to ask).
    async fn follow(&self, announced: &str, by: usize) {
        let until = Instant::now() + self.lookup_timeout;
        loop {
            let found = {
                let mut lookup = self.each[by].lock().await;
                if self.current().is_some_and(|p| &*p.node.addr == announced) {
                    return;
                }
                self.look(&mut lookup).await.map(|c| self.adopt(c))
            };
            match found {
                Ok(p) if &*p.node.addr == announced => return,
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "rlock: Sentinel look-up failed"),
            }
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep(self.cfg.retry_delay).await;
        }
    }

    /// Look again if `r`, met on `p`, puts the primary in doubt.
    async fn check<T>(&self, p: &Single, r: &RedisResult<T>) {
        if let Err(e) = r {
            if primary_in_doubt(e) {
                self.relook(&p.node.addr).await;
            }
        }
    }

    /// One request to the primary, one attempt.
    pub(crate) fn send<'a>(&'a self, io: Io, req: Request<'a>) -> Boxed<'a, RedisResult<Value>> {
        Box::pin(async move {
            let p = self.primary().await?;
            let r = p.send(io, req).await;
            self.check(&p, &r).await;
            r
        })
    }

    /// The watchdog's batch, on the primary.
    pub(crate) fn send_each<'a>(
        &'a self,
        cmds: &'a [Cmd],
    ) -> Boxed<'a, RedisResult<Vec<RedisResult<Value>>>> {
        Box::pin(async move {
            let p = self.primary().await?;
            let r = p.send_each(cmds).await;
            self.check(&p, &r).await;
            r
        })
    }

    /// One command to the node at `addr` (a wait queued there, its cancel), one attempt; only
    /// to the primary.
    pub(crate) fn send_at<'a>(
        &'a self,
        io: Io,
        addr: &'a str,
        cmd: &'a Cmd,
    ) -> Boxed<'a, RedisResult<Value>> {
        Box::pin(async move {
            let Some(s) = self.current().filter(|p| &*p.node.addr == addr) else {
                // The client left its sessions there when Sentinel named another primary
                // (`failover.rs`): what names them did not run, and there is nothing left to
                // cancel. Its caller queues again on the primary.
                return Err(left_behind(addr, &self.master));
            };
            let r = s.send(io, Request::One(cmd)).await;
            self.check(&s, &r).await;
            r
        })
    }

    /// The primary's address (looked up if none is known; a placeholder that no node has if
    /// the look-up fails: the caller's next step reports it unreachable).
    pub(crate) fn node_of(&self) -> Boxed<'_, Arc<str>> {
        Box::pin(async move {
            match self.primary().await {
                Ok(p) => p.node.addr.clone(),
                Err(_) => self.addr(),
            }
        })
    }

    /// The node at `addr`, for the session listener's own connection.
    pub(crate) fn node(&self, addr: &Arc<str>) -> RedisResult<Arc<Node>> {
        match self.seen.lock().get(addr) {
            Some(s) => Ok(s.node.clone()),
            None => Err(unreachable(format!(
                "no primary of '{}' known at {addr}",
                self.master
            ))),
        }
    }

    /// A connection of its own on the primary (replica sync's `WAIT`).
    pub(crate) fn waiter(&self, io: Io) -> Boxed<'_, RedisResult<Waiter>> {
        Box::pin(async move {
            let p = self.primary().await?;
            let r = p.waiter(io).await;
            self.check(&p, &r).await;
            r
        })
    }
}

/// The `+switch-master` subscriber: on one Sentinel at a time (the next after a failure), it
/// asks for the primary again whenever a switch of our master is announced. Ends when the
/// transport is dropped. (A subscription per Sentinel would hear a switch sooner when the
/// one subscribed to is down; one is enough: a failure on the primary asks again anyway.)
async fn switches(
    t: Weak<SentinelTransport>,
    sentinels: Vec<ConnectionInfo>,
    certs: Option<Certificates>,
    mut stopped: watch::Receiver<()>,
) {
    let mut delay = Duration::ZERO;
    for i in (0..sentinels.len()).cycle() {
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stopped.changed() => return,
            }
        }
        let Some((master, retry)) = t.upgrade().map(|t| (t.master.clone(), t.cfg.retry_delay))
        else {
            return;
        };
        let info = sentinels[i].clone();
        let client = redis_client(info, certs.as_ref());
        let pubsub = match client {
            Ok(c) => tokio::time::timeout(MAX_BACKOFF * 5, c.get_async_pubsub()).await,
            Err(e) => Ok(Err(e)),
        };
        let mut pubsub = match pubsub {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "rlock: can't subscribe to a Sentinel's +switch-master");
                delay = (delay * 2).max(retry).min(MAX_BACKOFF);
                continue;
            }
            Err(_) => {
                delay = (delay * 2).max(retry).min(MAX_BACKOFF);
                continue;
            }
        };
        if pubsub.subscribe("+switch-master").await.is_err() {
            delay = (delay * 2).max(retry).min(MAX_BACKOFF);
            continue;
        }
        let mut messages = pubsub.on_message();
        loop {
            let msg = tokio::select! {
                m = messages.next() => m,
                _ = stopped.changed() => return,
            };
            let Some(msg) = msg else { break };
            // `<master name> <old ip> <old port> <new ip> <new port>`
            let payload: String = msg.get_payload().unwrap_or_default();
            let words: Vec<&str> = payload.split(' ').collect();
            let [name, _, _, ip, port] = words[..] else {
                continue;
            };
            if name != master {
                continue;
            }
            let Some(t) = t.upgrade() else { return };
            tracing::debug!(%payload, "rlock: Sentinel announces +switch-master");
            t.follow(&format!("{ip}:{port}"), i).await;
        }
        // The Sentinel went away: the next one, after a pause.
        delay = retry;
    }
}

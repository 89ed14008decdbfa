//! Client configuration: [`ClientBuilder`] and its defaults (Redisson's where Redisson has one).

use std::time::Duration;

use crate::metrics::Metrics;
#[cfg(feature = "metrics")]
use crate::metrics::NameLabel;

use crate::error::{Error, Result};
use crate::events::{Listener, WatchdogEvent};

/// Settings of a [`Client`](crate::Client). Built with
/// [`Client::builder`](crate::Client::builder); read back with
/// [`Client::config`](crate::Client::config).
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) url: String,
    #[cfg(feature = "cluster")]
    pub(crate) cluster: Option<Vec<String>>,
    #[cfg(feature = "sentinel")]
    pub(crate) sentinel: Option<SentinelConfig>,
    pub(crate) tls: TlsConfig,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) renewal_interval: Option<Duration>,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_grace: Duration,
    pub(crate) retry_attempts: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) replica_sync: Option<Duration>,
    pub(crate) worker_threads: usize,
    /// A runtime of the caller's to run the background work on, instead of one of its own.
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    /// Report through the `metrics` facade, naming objects as this says; `None`: off.
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<NameLabel>,
    /// Which protocol to speak: detected per server, or forced.
    pub(crate) protocol: Protocol,
    /// The longest the watchdog keeps a hold; `None`: until released.
    pub(crate) watchdog_max_hold: Option<Duration>,
    /// Told what the watchdog meets (failed renewals, holds found gone, the longest hold).
    pub(crate) watchdog_listener: Option<Listener>,
}

/// How the client talks to a server (see [`ClientBuilder::protocol`]).
///
/// ```
/// assert_eq!(rlock_client::Protocol::default(), rlock_client::Protocol::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Detect per server at its first use: the module's commands where `COMMAND INFO` knows
    /// `RLOCK.ACQUIRE`, else Redisson's protocol if the server runs scripts.
    #[default]
    Auto,
    /// The rlock module's native commands (`RLOCK.*`, `RSEM.*`, ...): server-side FIFO
    /// queues, sessions, lost-hold push. A server without the module fails calls with
    /// [`Error::ModuleNotLoaded`].
    Module,
    /// Redisson's own protocol: its Lua scripts (`EVALSHA`, `EVAL` on `NOSCRIPT`), keys and
    /// pub/sub channels, for servers that cannot load modules (every hosted Redis). Every
    /// object works in this mode (see `docs/operations.md`, "Two protocols", for what
    /// differs).
    Redisson,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Auto => "auto",
            Protocol::Module => "module",
            Protocol::Redisson => "redisson",
        })
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            url: "redis://127.0.0.1:6379/".to_string(),
            #[cfg(feature = "cluster")]
            cluster: None,
            #[cfg(feature = "sentinel")]
            sentinel: None,
            tls: TlsConfig::default(),
            watchdog_timeout: Duration::from_secs(30),
            renewal_interval: None,
            response_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            session_grace: Duration::from_secs(10),
            retry_attempts: 3,
            retry_delay: Duration::from_millis(50),
            replica_sync: None,
            worker_threads: 2,
            runtime: None,
            #[cfg(feature = "metrics")]
            metrics: None,
            protocol: Protocol::Auto,
            watchdog_max_hold: None,
            watchdog_listener: None,
        }
    }
}

/// Where the Sentinels are and how to reach the primary they name (see
/// [`ClientBuilder::sentinel`]).
#[cfg(feature = "sentinel")]
#[derive(Clone, Debug, Default)]
pub(crate) struct SentinelConfig {
    pub(crate) master: String,
    pub(crate) sentinels: Vec<String>,
    /// The primary's credentials and database (the Sentinels' come with their URLs).
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) database: i64,
}

/// A CA and a client certificate for `rediss://` connections, PEM (see
/// [`ClientBuilder::tls_ca`]).
#[derive(Clone, Default)]
pub(crate) struct TlsConfig {
    pub(crate) ca: Option<Vec<u8>>,
    /// Certificate chain and private key.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A private key is never printed.
        f.debug_struct("TlsConfig")
            .field("ca", &self.ca.as_ref().map(|_| "<PEM>"))
            .field("client", &self.client.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A CA and client certificate in redis-rs' form; without the `tls` feature, a type with no
/// value (there is nothing to set them with).
#[cfg(feature = "tls")]
pub(crate) type Certificates = redis::TlsCertificates;
#[cfg(not(feature = "tls"))]
pub(crate) type Certificates = std::convert::Infallible;

impl TlsConfig {
    /// redis-rs' form, `None` when neither is set (the system's roots, no client certificate).
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<Certificates> {
        if self.ca.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        })
    }

    /// Never any: `tls_ca` and `tls_client_cert` need the `tls` feature.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn certificates(&self) -> Option<Certificates> {
        None
    }
}

/// A redis-rs client for `info`, over TLS with `certs` when given (a `rediss://` URL without
/// them trusts the system's roots).
pub(crate) fn redis_client(
    info: impl redis::IntoConnectionInfo,
    certs: Option<&Certificates>,
) -> redis::RedisResult<redis::Client> {
    match certs {
        None => redis::Client::open(info),
        #[cfg(feature = "tls")]
        Some(c) => redis::Client::build_with_tls(info, c.clone()),
        #[cfg(not(feature = "tls"))]
        Some(never) => match *never {},
    }
}

fn is_tls(url: &str) -> bool {
    url.starts_with("rediss://")
}

impl Config {
    /// The client's reporting as configured (always off without the `metrics` feature).
    pub(crate) fn reporting(&self) -> Metrics {
        #[cfg(feature = "metrics")]
        {
            Metrics::new(self.metrics.clone())
        }
        #[cfg(not(feature = "metrics"))]
        {
            Metrics
        }
    }

    /// The Redis URL (`redis://host:port/db`, `rediss://`, `redis+unix:///path`).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().url(), "redis://127.0.0.1:6390/");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The seed URLs of a Redis Cluster, `None` for a single server (see
    /// [`ClientBuilder::cluster`]). Needs the `cluster` feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open_cluster(["redis://127.0.0.1:7000/"])?;
    /// assert_eq!(client.config().cluster_nodes().unwrap().len(), 1);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn cluster_nodes(&self) -> Option<&[String]> {
        self.cluster.as_deref()
    }

    /// The master name and the Sentinel URLs, `None` unless the client finds its server
    /// through Sentinel (see [`ClientBuilder::sentinel`]). Needs the `sentinel` feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open_sentinel("mymaster", ["redis://127.0.0.1:26379"])?;
    /// let (master, sentinels) = client.config().sentinel().unwrap();
    /// assert_eq!((master, sentinels.len()), ("mymaster", 1));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn sentinel(&self) -> Option<(&str, &[String])> {
        self.sentinel
            .as_ref()
            .map(|s| (s.master.as_str(), s.sentinels.as_slice()))
    }

    /// Lease of a lock taken without an explicit lease; the watchdog keeps renewing it to this
    /// value while the lock is held (Redisson's `lockWatchdogTimeout`, default 30 s).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().watchdog_timeout(), Duration::from_secs(30));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn watchdog_timeout(&self) -> Duration {
        self.watchdog_timeout
    }

    /// The longest the watchdog keeps one hold (see
    /// [`ClientBuilder::watchdog_max_hold`]); `None`: no limit (the default).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().watchdog_max_hold(), None);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn watchdog_max_hold(&self) -> Option<Duration> {
        self.watchdog_max_hold
    }

    /// How often the watchdog renews: the configured interval, or `watchdog_timeout / 3`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder().watchdog_timeout(Duration::from_secs(9)).build()?;
    /// assert_eq!(client.config().renewal_interval(), Duration::from_secs(3));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn renewal_interval(&self) -> Duration {
        self.renewal_interval.unwrap_or(self.watchdog_timeout / 3)
    }

    /// How long a non-blocking command may take before it fails with [`Error::Timeout`].
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().response_timeout(), Duration::from_secs(3));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// How long a call may spend reaching the server before it fails with
    /// [`Error::Connection`] naming the address (see [`ClientBuilder::connect_timeout`]).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().connect_timeout(), Duration::from_secs(1));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// How long the client's sessions outlive their listener on the server (see
    /// [`ClientBuilder::session_grace`]; default 10 s).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().session_grace(), Duration::from_secs(10));
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn session_grace(&self) -> Duration {
        self.session_grace
    }

    /// `WAIT` timeout used after each acquire when replica sync is on (`None`: off).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().replica_sync(), None);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn replica_sync(&self) -> Option<Duration> {
        self.replica_sync
    }

    /// The protocol asked for ([`Protocol::Auto`] unless forced with
    /// [`ClientBuilder::protocol`]); [`Client::protocol`](crate::Client::protocol) says which
    /// one a server gets.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
    /// assert_eq!(client.config().protocol(), rlock_client::Protocol::Auto);
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }
}

/// Builds a [`Client`](crate::Client). Every setting has a default; only the URL usually
/// changes.
///
/// # When Redis can't be reached
///
/// One policy covers every call. A call that finds no usable connection keeps trying to
/// connect, pausing [`retry`](ClientBuilder::retry)'s delay between tries, for at most
/// [`connect_timeout`](ClientBuilder::connect_timeout) (default 1 s); then it fails with
/// [`Error::Connection`], which names the server's address. A connection that breaks while a
/// command is under way is reconnected (within the same connect timeout) and the command sent
/// again, at most [`retry`](ClientBuilder::retry)'s attempts times; an acquire or release is
/// sent again only after the client has checked on the server that it did not take effect
/// (a blind resend could count a hold twice). Redirects and "busy" replies of a cluster
/// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, a failover's `READONLY`/`UNBLOCKED`) mean the
/// command did not run, and are followed or retried after the same pause.
///
/// ```no_run
/// use std::time::Duration;
///
/// let client = rlock_client::Client::builder()
///     .url("redis://127.0.0.1:6390/")
///     .watchdog_timeout(Duration::from_secs(10)) // renewals every 10/3 s
///     .session_grace(Duration::from_secs(5))     // a frozen process's waits end after 5 s
///     .replica_sync(Some(Duration::from_secs(1))) // WAIT for replicas after each acquire
///     .build()?;
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ClientBuilder {
    config: Config,
}

impl ClientBuilder {
    /// A builder with every default (URL `redis://127.0.0.1:6379/`).
    ///
    /// ```no_run
    /// let client = rlock_client::ClientBuilder::new().url("redis://127.0.0.1:6390/").build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn new() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The Redis URL, e.g. `redis://127.0.0.1:6390/` or `redis://:password@host:6379/2`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .worker_threads(2)
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.config.url = url.into();
        self
    }

    /// Talk to a Redis Cluster: `seeds` are `redis://host:port` URLs of some of its nodes (one
    /// that answers is enough; the client learns the rest from `CLUSTER SLOTS`). Replaces
    /// [`ClientBuilder::url`]. Needs the `cluster` feature.
    ///
    /// Every command goes to the master of its lock's hash slot. Name locks with a hash tag
    /// (`{orders}:42`) to choose the slot yourself; a lock's fencing-token key and channel
    /// always share its slot. Redirects (`MOVED`, `ASK`), `TRYAGAIN`, `CLUSTERDOWN` and a wait
    /// ended by a slot migration or a failover are retried transparently: a waiting caller
    /// queues again on the node that now serves the lock (behind the waiters already there).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])
    ///     .build()?;
    /// let lock = client.lock("{orders}:42");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "cluster")]
    pub fn cluster<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.cluster = Some(seeds.into_iter().map(Into::into).collect());
        self
    }

    /// Find the server through Redis Sentinel (Redisson's `useSentinelServers()`, with
    /// `setMasterName` and `addSentinelAddress`): `master` is the name the Sentinels monitor
    /// (`sentinel monitor <master> ...`), `sentinels` the `redis://host:port` URLs of some of
    /// them (one that answers is enough). Replaces [`ClientBuilder::url`] (and
    /// `ClientBuilder::cluster`: choose one). Needs the `sentinel` feature.
    ///
    /// The client asks the Sentinels for the primary (redis-rs' `sentinel` module: `SENTINEL
    /// MASTERS`, then `ROLE` on the node named) on its first call, and works with it as with a
    /// single server. It follows a failover: when a Sentinel announces `+switch-master`, or a
    /// command finds the primary unreachable or a replica (`READONLY`, `UNBLOCKED`), it asks
    /// the Sentinels again and sends to the new primary. Then:
    ///
    /// - waits queued on the former primary are queued again on the new one, with what is
    ///   left of their wait time (behind the waiters already there);
    /// - the watchdog renews its holds on the new primary at once: a hold whose acquire had
    ///   not reached the promoted replica is reported lost (`is_lost`, a warning);
    /// - a call under way rides the failover out if it lasts less than
    ///   [`connect_timeout`](ClientBuilder::connect_timeout) (set it above the Sentinels'
    ///   `down-after-milliseconds` plus the failover itself; the default 1 s is shorter).
    ///
    /// The Sentinels' own password (`requirepass` in sentinel.conf) goes in their URLs
    /// (`redis://:secret@host:26379`), the same in each; the primary's in
    /// [`primary_auth`](ClientBuilder::primary_auth). With `rediss://` Sentinel URLs, the
    /// primary is reached over TLS too (as Redisson), with [`tls_ca`](ClientBuilder::tls_ca)
    /// and [`tls_client_cert`](ClientBuilder::tls_client_cert) for both. Load the rlock module
    /// on every node, replicas included: any of them may become the primary.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .sentinel("mymaster", ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"])
    ///     .primary_auth(None, "secret")
    ///     .connect_timeout(Duration::from_secs(10)) // ride out a failover
    ///     .build()?;
    /// let lock = client.lock("orders:42");
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn sentinel<I, S>(mut self, master: impl Into<String>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let (username, password, database) = match self.config.sentinel.take() {
            Some(s) => (s.username, s.password, s.database),
            None => (None, None, 0),
        };
        self.config.sentinel = Some(SentinelConfig {
            master: master.into(),
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            username,
            password,
            database,
        });
        self
    }

    /// The user (ACL) and password for the primary the Sentinels name (Redisson's
    /// `setUsername`/`setPassword` on `useSentinelServers()`). Sentinel mode only: for a single
    /// server or a cluster they go in the URL. Needs the `sentinel` feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .sentinel("mymaster", ["redis://127.0.0.1:26379"])
    ///     .primary_auth(Some("app"), "secret")
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        let s = self
            .config
            .sentinel
            .get_or_insert_with(SentinelConfig::default);
        s.username = username.map(str::to_string);
        s.password = Some(password.to_string());
        self
    }

    /// The database to use on the primary the Sentinels name (Redisson's `setDatabase`;
    /// default 0). Sentinel mode only: for a single server it goes in the URL. Needs the
    /// `sentinel` feature.
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .sentinel("mymaster", ["redis://127.0.0.1:26379"])
    ///     .primary_database(2)
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "sentinel")]
    pub fn primary_database(mut self, db: i64) -> Self {
        let s = self
            .config
            .sentinel
            .get_or_insert_with(SentinelConfig::default);
        s.database = db;
        self
    }

    /// Trust this CA (PEM, one or more certificates) for `rediss://` connections, instead of
    /// the system's roots (Redisson's `setSslTruststore`). Applies to the server, every
    /// cluster node, and the Sentinels and the primary in Sentinel mode. The server's
    /// certificate must name the host the client connects to (its IP address for
    /// `rediss://127.0.0.1`): hostnames are always verified. Needs the `tls` feature (a default
    /// one).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .url("rediss://redis.internal:6380/")
    ///     .tls_ca(std::fs::read("ca.crt")?)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.config.tls.ca = Some(ca_pem.into());
        self
    }

    /// Present this client certificate (PEM chain) and private key (PEM) on `rediss://`
    /// connections: mutual TLS, for a server with `tls-auth-clients yes` (Redisson's
    /// `setSslKeystore`). Needs the `tls` feature (a default one).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .url("rediss://redis.internal:6380/")
    ///     .tls_ca(std::fs::read("ca.crt")?)
    ///     .tls_client_cert(std::fs::read("client.crt")?, std::fs::read("client.key")?)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.config.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Which protocol to speak (default [`Protocol::Auto`]). Auto asks each server, at its
    /// first use, whether it has the rlock module (`COMMAND INFO RLOCK.ACQUIRE`; managed
    /// services refuse `MODULE LIST`), and speaks the module's commands where it has, Redisson's
    /// protocol (its Lua scripts, keys and channels) where it has not. A server with neither
    /// the module nor scripting (`EVAL` refused by ACL, or a Lua engine turned off) fails calls
    /// with [`Error::NoLockProtocol`]. [`Protocol::Module`] never falls back: a server without
    /// the module fails calls with [`Error::ModuleNotLoaded`]. [`Protocol::Redisson`] speaks
    /// Redisson's protocol even where the module is loaded (it interoperates with module
    /// clients: the layouts are the same).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://my-managed-redis:6379/")
    ///     .protocol(rlock_client::Protocol::Redisson)
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.config.protocol = protocol;
        self
    }

    /// Lease used when no lease is given, renewed by the watchdog (default 30 s).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .watchdog_timeout(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.config.watchdog_timeout = timeout;
        self
    }

    /// Renewal period of the watchdog (default `watchdog_timeout / 3`, as Redisson).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .renewal_interval(Duration::from_secs(5))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn renewal_interval(mut self, interval: Duration) -> Self {
        self.config.renewal_interval = Some(interval);
        self
    }

    /// The longest the watchdog keeps renewing one hold (default: no limit, as Redisson). A
    /// hold taken without a lease and renewed for this long is renewed no more at the
    /// watchdog's next round (within one [renewal interval](ClientBuilder::renewal_interval)):
    /// its holder is told at once ([`Guard::is_lost`](crate::Guard::is_lost),
    /// [`Guard::lost`](crate::Guard::lost), [`Lock::is_lost`](crate::Lock::is_lost), and
    /// [`WatchdogEvent::MaxHoldReached`] to the [listener](ClientBuilder::watchdog_listener)),
    /// and the hold ends on the server when its last renewal's lease does (at most
    /// [`watchdog_timeout`](ClientBuilder::watchdog_timeout) later), unless released before.
    /// A bound on how long a stuck holder can keep everyone else out (python-redis-lock#114).
    /// Re-entering a hold does not restart its clock; releasing it fully and taking it again
    /// does.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .watchdog_max_hold(Duration::from_secs(600)) // no job holds a lock for > 10 min
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn watchdog_max_hold(mut self, max: Duration) -> Self {
        self.config.watchdog_max_hold = Some(max);
        self
    }

    /// Tell `listener` what the watchdog meets: a renewal that failed
    /// ([`WatchdogEvent::RenewalFailed`]: no answer, retried next period), a hold it found
    /// gone ([`WatchdogEvent::Lost`]), a hold that reached the
    /// [longest hold](ClientBuilder::watchdog_max_hold) ([`WatchdogEvent::MaxHoldReached`]).
    /// It runs on the watchdog's task, once per hold and event: keep it short and never
    /// block in it (send the event on to your own task). A panic in it is logged and does not
    /// stop the watchdog.
    ///
    /// ```no_run
    /// use rlock_client::WatchdogEvent;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .watchdog_listener(|e: &WatchdogEvent| {
    ///         if let WatchdogEvent::RenewalFailed { hold, error, .. } = e {
    ///             eprintln!("can't renew {}: {error}", hold.name);
    ///         }
    ///     })
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn watchdog_listener(
        mut self,
        listener: impl Fn(&WatchdogEvent) + Send + Sync + 'static,
    ) -> Self {
        self.config.watchdog_listener = Some(Listener::new(listener));
        self
    }

    /// Timeout for every non-blocking command (default 3 s, as Redisson's `timeout`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .response_timeout(Duration::from_secs(1))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.config.response_timeout = timeout;
        self
    }

    /// How long a call may spend reaching the server (default 1 s): connecting, and
    /// reconnecting after a connection broke, with a pause of [`ClientBuilder::retry`]'s delay
    /// between tries. A call against a server that is down fails after at most this long with
    /// [`Error::Connection`], whose message names the address. A server that is back within it
    /// (a restart, a failover behind one address) is not noticed by the caller.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .connect_timeout(Duration::from_secs(1))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// The grace period of the client's sessions (default 10 s): how long the server keeps a
    /// session whose listener stopped reading, with its queued waits and the grants it has not
    /// read. Waits go through one session per server (see "Waiting: sessions" in the
    /// crate docs); its listener reads with a `BLOCK` of a fifth of the grace, so a live
    /// process never lets it lapse, and a listener whose connection broke reconnects and picks
    /// up what it missed. When the process is frozen (stopped, swapped out, in a debugger)
    /// for longer than the grace, the server withdraws its queued waits and hands the grants it
    /// never read to the next waiters; on resume those waits fail with
    /// [`Error::SessionExpired`]. A shorter grace frees a frozen process's waits sooner; a
    /// longer one rides out longer network outages. The server bounds it
    /// (`rlock.session-max-grace-ms`, 60 s by default): a longer grace is lowered to that bound
    /// with a warning.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .session_grace(Duration::from_secs(3))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn session_grace(mut self, grace: Duration) -> Self {
        self.config.session_grace = grace;
        self
    }

    /// Deprecated, without effect: waits no longer take connections (every wait goes through
    /// the client's session, over one listener connection per server), so there is nothing to
    /// bound. Kept so that existing builder code compiles.
    #[deprecated(
        since = "0.1.0",
        note = "waits go through the client's session and take no connection: remove the call"
    )]
    pub fn max_wait_connections(self, _n: usize) -> Self {
        self
    }

    /// Deprecated, without effect: waits no longer take connections (see
    /// [`ClientBuilder::max_wait_connections`]).
    #[deprecated(
        since = "0.1.0",
        note = "waits go through the client's session and take no connection: remove the call"
    )]
    pub fn max_idle_wait_connections(self, _n: usize) -> Self {
        self
    }

    /// How often a command whose connection broke while it was under way is sent again
    /// (default 3), and the pause between connection attempts and between retries of a
    /// command the server did not run (default 50 ms). See "When Redis can't be reached" above.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .retry(5, Duration::from_millis(500))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn retry(mut self, attempts: u32, delay: Duration) -> Self {
        self.config.retry_attempts = attempts;
        self.config.retry_delay = delay;
        self
    }

    /// Replica sync (Redisson's `checkLockSyncedSlaves`): after each acquire, `WAIT` up to
    /// `timeout` for the connected replicas; if replicas are connected and none acknowledged,
    /// undo the acquire and fail with [`Error::NoSyncedReplicas`]. Off (`None`) by default, unlike
    /// Redisson, because it costs a round trip per acquire and most deployments have no replica.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .replica_sync(Some(Duration::from_secs(1)))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn replica_sync(mut self, timeout: Option<Duration>) -> Self {
        self.config.replica_sync = timeout;
        self
    }

    /// Report acquisitions, waits, holds, lost holds, watchdog renewals, session reconnects and
    /// retries through the [`metrics`](https://docs.rs/metrics) facade, to whatever recorder
    /// the service installed (Prometheus, StatsD, OpenTelemetry...). Every series is labelled
    /// with the object's kind and its name as `names` collapses it, which bounds the number of
    /// series ([`NameLabel::prefix_before`]`(':')` counts `orders:1` and `orders:2` as
    /// `orders:*`). Off by default: then the calls cost one branch. The series are listed in
    /// docs/operations.md ("Client metrics") and served in the `metrics` example. Needs the
    /// `metrics` feature (a default one).
    ///
    /// ```no_run
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .metrics(rlock_client::NameLabel::prefix_before(':'))
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, names: NameLabel) -> Self {
        self.config.metrics = Some(names);
        self
    }

    /// Threads of the client's background runtime (default 2). Requests run on the caller's
    /// thread or executor; this runtime drives the async connections, the watchdog and the
    /// releases of dropped async guards.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .worker_threads(1)
    ///     .build()?;
    /// # Ok::<(), rlock_client::Error>(())
    /// ```
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.config.worker_threads = n;
        self
    }

    /// Run the client's background work (its async connections' drivers, the watchdog, the
    /// releases of dropped async guards) on this multi-thread tokio runtime instead of a
    /// runtime of its own ([`worker_threads`](Self::worker_threads) is then unused).
    ///
    /// Without it, an async request polled by a multi-thread tokio runtime is already sent over
    /// a connection driven on that runtime (see "Connections and cancellation" in the crate
    /// docs). Given the runtime, the client also starts no threads of its own for the rest (the
    /// watchdog, the shared connections, a dropped guard's release).
    ///
    /// - The runtime must outlive the client, as for a redis-rs connection opened on it: once
    ///   it shuts down, the client's connections and watchdog are gone with it (its holds are
    ///   no longer renewed and end with their lease), and tokio panics in any timed call.
    /// - The sync API may still be called from that runtime's tasks: the call moves the
    ///   worker's other tasks to another thread first (tokio's `block_in_place`), so the
    ///   drivers it needs keep running.
    /// - `build` refuses a current-thread runtime: it runs only while its owner drives it, and
    ///   the watchdog must run whatever the caller does.
    ///
    /// ```no_run
    /// # async fn f() -> rlock_client::Result<()> {
    /// // Inside `#[tokio::main]`:
    /// let client = rlock_client::Client::builder()
    ///     .url("redis://127.0.0.1:6390/")
    ///     .runtime(tokio::runtime::Handle::current())
    ///     .build()?;
    /// let lock = client.async_lock("orders:42");
    /// let guard = lock.guard().await?;
    /// # Ok(()) }
    /// ```
    pub fn runtime(mut self, handle: tokio::runtime::Handle) -> Self {
        self.config.runtime = Some(handle);
        self
    }

    /// The settings, checked.
    pub(crate) fn checked(self) -> Result<Config> {
        let c = &self.config;
        if c.watchdog_timeout < Duration::from_millis(3) {
            return Err(Error::Config(
                "watchdog_timeout must be at least 3 ms".into(),
            ));
        }
        if c.renewal_interval() >= c.watchdog_timeout || c.renewal_interval().is_zero() {
            return Err(Error::Config(
                "renewal_interval must be above zero and shorter than watchdog_timeout".into(),
            ));
        }
        if c.watchdog_max_hold.is_some_and(|m| m.is_zero()) {
            return Err(Error::Config("watchdog_max_hold must be above zero".into()));
        }
        if c.session_grace < Duration::from_millis(100) {
            return Err(Error::Config(
                "session_grace must be at least 100 ms".into(),
            ));
        }
        if c.worker_threads == 0 {
            return Err(Error::Config("worker_threads must be at least 1".into()));
        }
        if let Some(h) = &c.runtime {
            if h.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
                return Err(Error::Config(
                    "runtime: the client needs a multi-thread runtime (a current-thread one \
                     runs only while its owner drives it); leave it out to let the client run \
                     its own"
                        .into(),
                ));
            }
        }
        if c.response_timeout.is_zero() || c.connect_timeout.is_zero() {
            return Err(Error::Config("timeouts must be above zero".into()));
        }
        #[cfg(feature = "sentinel")]
        if let Some(s) = &c.sentinel {
            #[cfg(feature = "cluster")]
            if c.cluster.is_some() {
                return Err(Error::Config(
                    "choose one of cluster and sentinel, not both".into(),
                ));
            }
            if s.master.is_empty() || s.sentinels.is_empty() {
                return Err(Error::Config(
                    "Sentinel mode needs the master name and at least one Sentinel URL \
                     (ClientBuilder::sentinel); primary_auth and primary_database apply to it only"
                        .into(),
                ));
            }
        }
        let urls = c.urls();
        if !cfg!(feature = "tls") && urls.iter().any(|u| is_tls(u)) {
            return Err(Error::Config(
                "rediss:// URLs need rlock-client's `tls` feature (a default feature: \
                 turned off here by `default-features = false`)"
                    .into(),
            ));
        }
        if (c.tls.ca.is_some() || c.tls.client.is_some()) && !urls.iter().all(|u| is_tls(u)) {
            return Err(Error::Config(
                "tls_ca and tls_client_cert need rediss:// URLs".into(),
            ));
        }
        #[cfg(feature = "cluster")]
        if c.cluster.as_ref().is_some_and(Vec::is_empty) {
            return Err(Error::Config(
                "a cluster needs at least one seed URL".into(),
            ));
        }
        Ok(self.config)
    }
}

impl Config {
    /// The URLs the client connects to first: the cluster's seeds, the Sentinels, or the
    /// server.
    fn urls(&self) -> Vec<&str> {
        #[cfg(feature = "cluster")]
        if let Some(seeds) = &self.cluster {
            return seeds.iter().map(String::as_str).collect();
        }
        #[cfg(feature = "sentinel")]
        if let Some(s) = &self.sentinel {
            return s.sentinels.iter().map(String::as_str).collect();
        }
        vec![self.url.as_str()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_redisson() {
        let c = Config::default();
        assert_eq!(c.watchdog_timeout(), Duration::from_secs(30));
        assert_eq!(c.renewal_interval(), Duration::from_secs(10));
        assert_eq!(c.response_timeout(), Duration::from_secs(3));
        assert_eq!(c.connect_timeout(), Duration::from_secs(1));
        assert_eq!(c.replica_sync(), None);
        assert_eq!(c.session_grace(), Duration::from_secs(10));
    }

    #[test]
    fn rejects_bad_settings() {
        let b = ClientBuilder::new().url("redis://127.0.0.1:1/");
        assert!(matches!(
            b.clone().watchdog_timeout(Duration::from_millis(1)).build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            b.clone().renewal_interval(Duration::from_secs(40)).build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            b.clone().session_grace(Duration::from_millis(10)).build(),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            ClientBuilder::new().url("nonsense://x").build(),
            Err(Error::Config(_))
        ));
    }

    #[cfg(feature = "sentinel")]
    #[test]
    fn sentinel_settings_are_checked() {
        let sentinel = || ClientBuilder::new().sentinel("mymaster", ["redis://127.0.0.1:1"]);
        #[cfg(feature = "cluster")]
        {
            let both = sentinel().cluster(["redis://127.0.0.1:2"]).checked();
            assert!(
                matches!(both, Err(Error::Config(_))),
                "cluster and sentinel"
            );
        }
        let no_master = ClientBuilder::new().primary_auth(None, "pw").checked();
        assert!(
            matches!(no_master, Err(Error::Config(_))),
            "primary_auth alone"
        );
        let no_sentinels = ClientBuilder::new()
            .sentinel("m", Vec::<String>::new())
            .checked();
        assert!(matches!(no_sentinels, Err(Error::Config(_))));
        let c = sentinel()
            .primary_auth(Some("u"), "pw")
            .primary_database(3)
            .checked()
            .unwrap();
        let s = c.sentinel.as_ref().unwrap();
        assert_eq!(
            (s.username.as_deref(), s.password.as_deref(), s.database),
            (Some("u"), Some("pw"), 3)
        );
        assert_eq!(c.sentinel().unwrap().0, "mymaster");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_settings_are_checked() {
        #[cfg(feature = "cluster")]
        {
            let mixed = ClientBuilder::new()
                .cluster(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"])
                .tls_ca(b"ca".to_vec())
                .checked();
            assert!(
                matches!(mixed, Err(Error::Config(_))),
                "TLS settings with a plain seed"
            );
        }
        let plain = ClientBuilder::new()
            .url("redis://127.0.0.1:1/")
            .tls_ca(b"ca".to_vec())
            .checked();
        assert!(
            matches!(plain, Err(Error::Config(_))),
            "TLS settings with a plain URL"
        );
        let tls = ClientBuilder::new()
            .url("rediss://127.0.0.1:1/")
            .tls_client_cert(b"cert".to_vec(), b"key".to_vec())
            .checked()
            .unwrap();
        let shown = format!("{tls:?}");
        assert!(
            shown.contains("<redacted>") && !shown.contains("107, 101, 121"),
            "{shown}"
        );
        let certs = tls.tls.certificates().unwrap();
        assert!(certs.root_cert.is_none() && certs.client_tls.is_some());
        assert!(Config::default().tls.certificates().is_none());
    }

    /// Without the `tls` feature a `rediss://` URL is refused at `build`, naming the feature
    /// (not as redis-rs' "can't connect with TLS" at the first call).
    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_without_the_tls_feature_names_it() {
        let e = ClientBuilder::new()
            .url("rediss://127.0.0.1:1/")
            .build()
            .unwrap_err();
        assert!(
            matches!(&e, Error::Config(m) if m.contains("`tls` feature")),
            "{e}"
        );
        #[cfg(feature = "cluster")]
        {
            let e = ClientBuilder::new()
                .cluster(["rediss://127.0.0.1:1"])
                .checked()
                .unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.contains("`tls` feature")),
                "{e}"
            );
        }
        assert!(ClientBuilder::new()
            .url("redis://127.0.0.1:1/")
            .checked()
            .is_ok());
    }

    #[test]
    fn custom_interval() {
        let b = ClientBuilder::new()
            .watchdog_timeout(Duration::from_millis(600))
            .renewal_interval(Duration::from_millis(100));
        assert_eq!(b.config.renewal_interval(), Duration::from_millis(100));
    }
}

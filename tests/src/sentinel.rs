//! A primary with replicas behind Redis Sentinel, as real processes: [`SentinelGroup::start`]
//! starts a primary and `replicas` replicas ([`Server`]s, each loading the module: any of them
//! may be promoted) and three Sentinels (`redis-server <conf> --sentinel`, the same binary),
//! each on its own free loopback port and in its own temporary directory, all killed on drop.
//!
//! Failover is made fast: `down-after-milliseconds 1000` (a killed primary is down after a
//! second) and a small `failover-timeout`.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cmd, info_field, server_binary, wait_until, Server, ServerOptions};

/// The master name the Sentinels monitor.
pub const MASTER: &str = "mymaster";

/// How long forming the group, or a failover, may take on a busy machine.
const CONVERGE: Duration = Duration::from_secs(30);

/// One Sentinel process, killed on drop.
pub struct SentinelProc {
    pub port: u16,
    child: Child,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl SentinelProc {
    /// Start a Sentinel monitoring the primary at `primary_port` (quorum 2). Retries with a
    /// fresh port when the probed one was taken meanwhile.
    fn start(primary_port: u16, extra: &[String]) -> SentinelProc {
        let mut last = String::new();
        for _ in 0..5 {
            match SentinelProc::try_start(primary_port, extra) {
                Ok(s) => return s,
                Err(e) => last = e,
            }
        }
        panic!("could not start a Sentinel: {last}");
    }

    fn try_start(primary_port: u16, extra: &[String]) -> Result<SentinelProc, String> {
        let tmp = tempfile::Builder::new()
            .prefix("rlock-sentinel-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let port = crate::free_port();
        // The Sentinel rewrites this file (it must be writable): what it learns of replicas,
        // other Sentinels and failovers.
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
             dir {dir}\nlogfile {dir}/sentinel.log\n",
            dir = dir.display()
        );
        for line in extra {
            conf.push_str(line);
            conf.push('\n');
        }
        conf.push_str(&format!(
            "sentinel monitor {MASTER} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {MASTER} 1000\n\
             sentinel failover-timeout {MASTER} 4000\n\
             sentinel parallel-syncs {MASTER} 2\n"
        ));
        let path = dir.join("sentinel.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(server_binary())
            .arg(&path)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {} --sentinel: {e}", server_binary().display()))?;
        let mut s = SentinelProc {
            port,
            child,
            dir,
            _tmp: tmp,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!("sentinel exited with {status}: {}", s.log_tail(20)));
            }
            if let Ok(mut c) = s.try_conn() {
                let pid = info_field(&mut c, "server", "process_id");
                if pid.as_deref() == Some(&s.child.id().to_string()) {
                    return Ok(s);
                }
                return Err(format!("port {port} answered by another process"));
            }
            if Instant::now() > deadline {
                return Err(format!("sentinel did not answer: {}", s.log_tail(20)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:<port>`, for the client's Sentinel list.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let c =
            redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(c)
    }

    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to the Sentinel")
    }

    /// The primary's port as this Sentinel knows it.
    pub fn primary_port(&self) -> Option<u16> {
        let mut c = self.try_conn().ok()?;
        let addr: Option<(String, u16)> = cmd!("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            .query(&mut c)
            .ok()?;
        addr.map(|(_, p)| p)
    }

    /// How many replicas and other Sentinels this Sentinel knows of.
    fn known(&self) -> (usize, usize) {
        let Ok(mut c) = self.try_conn() else {
            return (0, 0);
        };
        let count = |sub: &str, c: &mut redis::Connection| {
            cmd!("SENTINEL", sub, MASTER)
                .query::<Vec<redis::Value>>(c)
                .map_or(0, |v| v.len())
        };
        (count("REPLICAS", &mut c), count("SENTINELS", &mut c))
    }

    /// Whether this Sentinel sees `primary` as the primary and every replica it knows of as a
    /// replica of it with its link up. A Sentinel looks at replicas only every 10 s, so one
    /// that still remembers a replica as a master (a failover's old primary, before it was
    /// turned) takes the next promotion of that node for a stray master and turns it back:
    /// the next fault must wait until every Sentinel's view has caught up.
    pub fn settled_on(&self, primary: u16) -> bool {
        let Ok(mut c) = self.try_conn() else {
            return false;
        };
        let Ok(replicas) = cmd!("SENTINEL", "REPLICAS", MASTER)
            .query::<Vec<std::collections::HashMap<String, String>>>(&mut c)
        else {
            return false;
        };
        let field = |r: &std::collections::HashMap<String, String>, k: &str| r.get(k).cloned();
        self.primary_port() == Some(primary)
            && replicas.iter().all(|r| {
                field(r, "role-reported").as_deref() == Some("slave")
                    && field(r, "master-link-status").as_deref() == Some("ok")
                    && field(r, "master-port") == Some(primary.to_string())
                    && !field(r, "flags").unwrap_or_default().contains("down")
            })
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for SentinelProc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- sentinel :{} log tail ---\n{}",
                self.port,
                self.log_tail(30)
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A primary, its replicas and three Sentinels.
pub struct SentinelGroup {
    /// Data nodes: the first is the primary as started (after a failover, ask
    /// [`SentinelGroup::primary`]).
    pub nodes: Vec<Server>,
    pub sentinels: Vec<SentinelProc>,
}

impl SentinelGroup {
    /// A primary with `replicas` replicas and three Sentinels that know every one of them and
    /// each other (so a failover can start at once).
    pub fn start(replicas: usize) -> SentinelGroup {
        SentinelGroup::start_with(replicas, &ServerOptions::default(), &[])
    }

    /// As [`SentinelGroup::start`], the data nodes started with `opts` (its `replica_of` is
    /// set here) and `sentinel_conf` lines added to each Sentinel's configuration.
    pub fn start_with(
        replicas: usize,
        opts: &ServerOptions,
        sentinel_conf: &[String],
    ) -> SentinelGroup {
        // Every node may become the primary: none waits 5 s for more replicas before a sync.
        let mut opts = opts.clone();
        opts.args
            .extend(["--repl-diskless-sync-delay".into(), "0".into()]);
        let primary = Server::with(opts.clone());
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let o = ServerOptions {
                replica_of: Some(nodes[0].port),
                ..opts.clone()
            };
            nodes.push(Server::with(o));
        }
        let sentinels: Vec<SentinelProc> = (0..3)
            .map(|_| SentinelProc::start(nodes[0].port, sentinel_conf))
            .collect();
        for r in &nodes[1..] {
            let mut c = r.conn();
            wait_until(CONVERGE, "each replica's link to the primary is up", || {
                info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
            });
        }
        let group = SentinelGroup { nodes, sentinels };
        wait_until(
            CONVERGE,
            "every Sentinel knows every replica and the other Sentinels",
            || {
                group
                    .sentinels
                    .iter()
                    .all(|s| s.known() == (replicas, group.sentinels.len() - 1))
            },
        );
        group
    }

    /// The Sentinels' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(SentinelProc::url).collect()
    }

    /// The primary's port, as the Sentinels agree on it.
    pub fn primary_port(&self) -> Option<u16> {
        let ports: Vec<Option<u16>> = self.sentinels.iter().map(|s| s.primary_port()).collect();
        let first = ports.iter().flatten().next().copied()?;
        ports
            .iter()
            .all(|p| p.is_none_or(|p| p == first))
            .then_some(first)
    }

    /// The data node on `port`.
    pub fn node(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .expect("a node of the group")
    }

    /// The data node the Sentinels name the primary.
    pub fn primary(&self) -> &Server {
        self.node(
            self.primary_port()
                .expect("the Sentinels agree on a primary"),
        )
    }

    /// Wait until every Sentinel that answers names a primary other than `old`, and that node
    /// says it is a master; returns its port.
    pub fn wait_new_primary(&self, old: u16) -> u16 {
        let mut new = None;
        wait_until(CONVERGE, "the Sentinels name a new primary", || {
            new = self.new_primary(old);
            new.is_some()
        });
        new.unwrap()
    }

    fn new_primary(&self, old: u16) -> Option<u16> {
        self.primary_port().filter(|p| *p != old).filter(|p| {
            TcpStream::connect(("127.0.0.1", *p)).is_ok()
                && role(self.node(*p)).as_deref() == Some("master")
        })
    }

    /// Whether every Sentinel agrees on the primary and sees every replica replicating it
    /// (see [`SentinelProc::settled_on`]).
    pub fn sentinels_settled(&self) -> bool {
        self.primary_port()
            .is_some_and(|p| self.sentinels.iter().all(|s| s.settled_on(p)))
    }

    /// `SENTINEL FAILOVER` away from `old` until a new primary is named; returns its port. A
    /// manual failover can be aborted (another Sentinel turns the promoted replica back
    /// before it hears of the new epoch); an operator asks again, and so does this.
    pub fn failover_from(&self, old: u16) -> u16 {
        let deadline = Instant::now() + CONVERGE;
        loop {
            // INPROG (a failover still under way, or the last one's timeout) is retried.
            let _ = cmd!("SENTINEL", "FAILOVER", MASTER).query::<()>(&mut self.sentinels[0].conn());
            let asked = Instant::now();
            while asked.elapsed() < Duration::from_secs(10) {
                if let Some(p) = self.new_primary(old) {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: the Sentinels name a new primary after SENTINEL FAILOVER"
            );
        }
    }
}

/// `ROLE`'s first word on `s` (`master`, `slave`), if it answers.
pub fn role(s: &Server) -> Option<String> {
    let mut c = s
        .client()
        .get_connection_with_timeout(Duration::from_secs(1))
        .ok()?;
    let v: Vec<redis::Value> = cmd!("ROLE").query(&mut c).ok()?;
    redis::from_redis_value(v.first()?.clone()).ok()
}

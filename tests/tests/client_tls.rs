//! The rlock client over TLS (`rediss://`, `ClientBuilder::tls_ca`, `tls_client_cert`) against
//! a real `redis-server --port 0 --tls-port ...` that requires client certificates, with a CA
//! and certificates the test makes (`rlock_tests::tls`).

mod client_support;

use std::sync::mpsc;
use std::time::Duration;

use client_support::{exists, waiters};
use rlock_client::Error;
use rlock_tests::tls::{Pki, TlsServer};
use rlock_tests::wait_until;

fn builder(s: &TlsServer, pki: &Pki) -> rlock_client::ClientBuilder {
    rlock_client::Client::builder()
        .url(s.url())
        .tls_ca(pki.ca.as_bytes())
        .tls_client_cert(pki.client_cert.as_bytes(), pki.client_key.as_bytes())
}

#[test]
fn locks_and_waits_over_mutual_tls() {
    let pki = Pki::generate();
    let Some(s) = TlsServer::start(&pki) else {
        return; // a matrix server built without TLS
    };
    let client = builder(&s, &pki).build().unwrap();
    let lock = client.lock("tls-orders");
    let guard = lock.guard().unwrap();
    let mut c = s.conn();
    assert!(exists(&mut c, "tls-orders"));

    // A waiter's outcome comes through the session listener, on a TLS connection of its own.
    let waiter_lock = client.lock("tls-orders");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = waiter_lock.try_lock_for(Duration::from_secs(20));
        if matches!(r, Ok(true)) {
            waiter_lock.unlock().unwrap();
        }
        tx.send(r).unwrap();
    });
    wait_until(Duration::from_secs(10), "the waiter queued", || {
        waiters(&mut c, "tls-orders") == 1
    });
    guard.unlock().unwrap();
    let r = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(r, Ok(true)),
        "the waiter got the lock over TLS: {r:?}"
    );

    // The async API's multiplexed connection too.
    let rt = client_support::runtime(1);
    rt.block_on(async {
        let lock = client.async_lock("tls-async");
        let g = lock.guard().await.unwrap();
        assert!(lock.is_locked().await.unwrap());
        g.unlock().await.unwrap();
    });
    assert!(!exists(&mut c, "tls-async"));
}

#[test]
fn refuses_a_server_its_ca_did_not_sign() {
    let pki = Pki::generate();
    let Some(s) = TlsServer::start(&pki) else {
        return; // a matrix server built without TLS
    };
    let client = rlock_client::Client::builder()
        .url(s.url())
        .tls_ca(pki.other_ca.as_bytes())
        .tls_client_cert(pki.client_cert.as_bytes(), pki.client_key.as_bytes())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = client.lock("x").try_lock().unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, Error::Connection { .. }) && text.contains(&s.port.to_string()),
        "a connection error naming the server: {text}"
    );
    assert!(
        text.to_lowercase().contains("certificate") || text.contains("UnknownIssuer"),
        "the error says why: {text}"
    );
}

#[test]
fn a_server_requiring_client_certificates_refuses_a_client_without_one() {
    let pki = Pki::generate();
    let Some(s) = TlsServer::start(&pki) else {
        return; // a matrix server built without TLS
    };
    let client = rlock_client::Client::builder()
        .url(s.url())
        .tls_ca(pki.ca.as_bytes())
        .connect_timeout(Duration::from_millis(300))
        .retry(0, Duration::from_millis(50))
        .build()
        .unwrap();
    let e = client.lock("x").try_lock().unwrap_err();
    assert!(
        matches!(e, Error::Connection { .. } | Error::Timeout(_)),
        "refused: {e}"
    );
    assert!(!exists(&mut s.conn(), "x"));
}

#[test]
fn tls_settings_need_rediss_urls() {
    let e = rlock_client::Client::builder()
        .url("redis://127.0.0.1:1/")
        .tls_ca(b"-----BEGIN CERTIFICATE-----".to_vec())
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    let e = rlock_client::Client::builder()
        .sentinel("mymaster", ["redis://127.0.0.1:1"])
        .tls_ca(b"x".to_vec())
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
}

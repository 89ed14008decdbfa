//! Sessions (`RSESSION.*`, the `SESSION s QUEUE <request> <timeout_ms>` options): many waits
//! over one connection, at the module's wire level against real servers (raw connections).
//!
//! Covered: an immediate grant in one round trip; queued requests granted with the reply a
//! blocked waiter gets, in one FIFO with BLOCK waiters; server-side deadlines; a parked
//! listener woken at once; at-least-once delivery to a reconnecting listener; cancel; the grace
//! period after the listener goes (killed, silent, or its process frozen) and what an expired
//! session leaves behind; `lost` outcomes for holds ended by anything but their owner's
//! release; the limits and errors; MULTI and Lua; introspection; read-write locks; memory of
//! 10,000 queued requests; failover and cluster slot migration.
//!
//! One file per part, the shared helpers here. Child processes (the frozen listener) are this
//! test binary run again on one `*_child` test, as in `faults.rs`; that test returns at once
//! when its environment variable is unset.

#[path = "../client_support/mod.rs"]
mod client_support;
mod introspection;
mod limits;
mod liveness;
mod lost_holds;
mod memory_failover_cluster;
mod parked;
mod queueing;
mod rwlock;

use std::collections::BTreeMap;
use std::io::BufRead;
use std::time::{Duration, Instant};

use client_support::{read_until, spawn_self};
use rlock_tests::cluster::Cluster;
use rlock_tests::*;

const CHILD_URL: &str = "RLOCK_SESSION_CHILD_URL";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// One outcome as `RSESSION.READ` returns it: `[seq, kind, request|nil, key|nil, value,
/// object|nil]` (the object kind is checked by the tests of session_trust.rs).
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    seq: i64,
    kind: String,
    request: Option<i64>,
    key: Option<String>,
    value: Value,
}

impl Outcome {
    /// The value as text (an owner, an error message).
    fn text(&self) -> String {
        text(&self.value).unwrap_or_else(|| panic!("outcome value is not text: {self:?}"))
    }
}

fn outcomes(v: &Value) -> Vec<Outcome> {
    let Value::Array(items) = v else {
        panic!("RSESSION.READ: expected an array, got {v:?}");
    };
    items
        .iter()
        .map(|item| {
            let Value::Array(f) = item else {
                panic!("outcome: expected an array, got {item:?}");
            };
            assert_eq!(f.len(), 6, "outcome has six fields: {f:?}");
            let int_or_nil = |v: &Value| match v {
                Value::Int(n) => Some(*n),
                Value::Nil => None,
                other => panic!("outcome field: {other:?}"),
            };
            Outcome {
                seq: int_or_nil(&f[0]).expect("seq"),
                kind: text(&f[1]).expect("kind"),
                request: int_or_nil(&f[2]),
                key: match &f[3] {
                    Value::Nil => None,
                    k => Some(text(k).expect("key")),
                },
                value: f[4].clone(),
            }
        })
        .collect()
}

/// A map reply (RESP2 flat array or RESP3 map) by field name.
fn fields(v: &Value) -> BTreeMap<String, Value> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (text(&kv[0]).expect("field name"), kv[1].clone()))
            .collect(),
        Value::Map(kvs) => kvs
            .iter()
            .map(|(k, v)| (text(k).expect("field name"), v.clone()))
            .collect(),
        other => panic!("expected a map, got {other:?}"),
    }
}

fn field_int(m: &BTreeMap<String, Value>, name: &str) -> i64 {
    match m.get(name) {
        Some(Value::Int(n)) => *n,
        other => panic!("field {name}: {other:?} in {m:?}"),
    }
}

fn session_info(c: &mut redis::Connection, s: &str) -> BTreeMap<String, Value> {
    fields(&raw(c, &cmd!("RSESSION.INFO", s)))
}

/// `RLOCK.ACQUIRE key owner lease SESSION s QUEUE request timeout`.
fn queue_cmd(
    key: &str,
    owner: &str,
    lease: i64,
    s: &str,
    request: i64,
    timeout: i64,
) -> redis::Cmd {
    cmd!(
        "RLOCK.ACQUIRE",
        key,
        owner,
        lease,
        "SESSION",
        s,
        "QUEUE",
        request,
        timeout
    )
}

/// Queue a request; the reply must be `+QUEUED`.
#[track_caller]
fn queued(c: &mut redis::Connection, command: &redis::Cmd) {
    let v = raw(c, command);
    assert_eq!(v, Value::SimpleString("QUEUED".into()), "{}", show(command));
}

fn acquire(c: &mut redis::Connection, key: &str, owner: &str, lease: i64) {
    assert_eq!(
        int(c, &cmd!("RLOCK.ACQUIRE", key, owner, lease)),
        1,
        "{key} taken by {owner}"
    );
}

fn release(c: &mut redis::Connection, key: &str, owner: &str) {
    assert_eq!(
        int(c, &cmd!("RLOCK.RELEASE", key, owner)),
        0,
        "{key} released by {owner}"
    );
}

fn queue_of(c: &mut redis::Connection, key: &str) -> Vec<String> {
    lock_info(c, key).queue
}

/// Hold `k1`..`kn` for `holder` and queue one request per key in session `s` (request `i`,
/// owner `o<i>`).
fn hold_and_queue(c: &mut redis::Connection, n: i64, s: &str) {
    for i in 1..=n {
        let key = format!("k{i}");
        acquire(c, &key, "holder", 60_000);
        queued(c, &queue_cmd(&key, &format!("o{i}"), 60_000, s, i, 0));
    }
}

/// The outcomes' kinds and requests, in order.
#[track_caller]
fn assert_kinds(got: &[Outcome], want: &[(&str, Option<i64>)]) {
    let kinds: Vec<(&str, Option<i64>)> =
        got.iter().map(|o| (o.kind.as_str(), o.request)).collect();
    assert_eq!(kinds, want, "{got:?}");
}

/// A session's listener on its own connection. `read` returns the outcomes after the cursor
/// and moves the cursor past them, so the next read acknowledges them (a client's loop).
struct Listener {
    conn: redis::Connection,
    name: String,
    cursor: i64,
    id: i64,
}

impl Listener {
    fn open(s: &Server, name: &str, grace_ms: i64) -> Listener {
        let mut conn = s.conn();
        let opened = fields(&raw(&mut conn, &cmd!("RSESSION.OPEN", name, grace_ms)));
        assert_eq!(field_int(&opened, "resumed"), 0, "{name} is new");
        let id = int(&mut conn, &cmd!("CLIENT", "ID"));
        Listener {
            conn,
            name: name.into(),
            cursor: 0,
            id,
        }
    }

    fn take(&mut self, v: &Value) -> Vec<Outcome> {
        let got = outcomes(v);
        if let Some(last) = got.last() {
            self.cursor = last.seq;
        }
        got
    }

    fn read(&mut self) -> Vec<Outcome> {
        let v = raw(
            &mut self.conn,
            &cmd!("RSESSION.READ", &self.name, self.cursor),
        );
        self.take(&v)
    }

    /// Read until `n` outcomes arrived (each read parks up to 5 s).
    fn read_n(&mut self, n: usize) -> Vec<Outcome> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < n {
            assert!(Instant::now() < deadline, "{n} outcomes: got {got:?}");
            let v = raw(
                &mut self.conn,
                &cmd!("RSESSION.READ", &self.name, self.cursor, "BLOCK", 5000),
            );
            got.extend(self.take(&v));
        }
        got
    }

    /// Send a parked `RSESSION.READ ... BLOCK 0` on a connection of its own and wait until the
    /// server shows the session as read.
    fn park(&self, s: &Server, admin: &mut redis::Connection) -> Pending {
        let p = Pending::send(
            s,
            &cmd!("RSESSION.READ", &self.name, self.cursor, "BLOCK", 0),
        );
        wait_until(Duration::from_secs(10), "listener parked", || {
            field_int(&session_info(admin, &self.name), "reading") == 1
        });
        p
    }
}

/// The one outcome in `got` is a `lost` report of `owner`'s hold on `key`.
#[track_caller]
fn assert_lost(got: &[Outcome], key: &str, owner: &str) {
    assert_eq!(got.len(), 1, "{got:?}");
    let o = &got[0];
    assert_eq!(
        (o.kind.as_str(), o.request, o.key.as_deref(), o.text()),
        ("lost", None, Some(key), owner.to_string()),
        "{o:?}"
    );
}

/// A server, a connection to it, and the listener of session `app` with `grace_ms`.
fn start(grace_ms: i64) -> (Server, redis::Connection, Listener) {
    let s = Server::start();
    let c = s.conn();
    let l = Listener::open(&s, "app", grace_ms);
    (s, c, l)
}

/// The reply of a parked read, as outcomes, and how long after `since` it arrived.
fn parked_outcomes(p: Pending, since: Instant) -> (Vec<Outcome>, Duration) {
    let v = p.reply_within(Duration::from_secs(10));
    (outcomes(&v), since.elapsed())
}

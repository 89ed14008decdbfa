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
//! Child processes (the frozen listener) are this test binary run again on one `*_child` test,
//! as in `faults.rs`; that test returns at once when its environment variable is unset.

mod client_support;

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

// ---------------------------------------------------------------------------------------------
// Queueing and outcomes
// ---------------------------------------------------------------------------------------------

#[test]
fn a_free_lock_is_granted_at_once_in_one_round_trip() {
    let (_s, mut c, mut l) = start(5000);
    // The reply is the grant itself: no outcome follows, nothing is queued.
    assert_eq!(
        int(&mut c, &queue_cmd("free", "o1", 30_000, "app", 1, 5000)),
        1
    );
    assert_eq!(hgetall(&mut c, "free"), holder("o1", 1));
    assert_between("pttl", pttl(&mut c, "free"), 29_000, 30_000);
    let mut fenced = queue_cmd("fenced", "o1", 30_000, "app", 2, 5000);
    fenced.arg("FENCE");
    let t = int(&mut c, &fenced);
    assert_eq!(
        string(&mut c, &cmd!("GET", token_key("fenced"))),
        t.to_string(),
        "FENCE: the token"
    );
    let rw = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "o1",
        "READ",
        30_000,
        "SESSION",
        "app",
        "QUEUE",
        3,
        5000
    );
    assert_eq!(int(&mut c, &rw), 1);
    assert_eq!(l.read(), vec![]);
    let info = session_info(&mut c, "app");
    assert_eq!(
        (field_int(&info, "queued"), field_int(&info, "last")),
        (0, 0)
    );
    assert_eq!(rlock_stat(&mut c, "waits_started"), 0);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
}

#[test]
fn a_queued_request_is_granted_with_the_reply_a_blocked_waiter_gets() {
    let (s, mut c, mut l) = start(5000);
    let t0 = int(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "k", "holder", 30_000, "FENCE"),
    );
    let token_now = |c: &mut redis::Connection| -> i64 {
        string(c, &cmd!("GET", token_key("k")))
            .parse()
            .expect("a token")
    };
    assert_eq!(token_now(&mut c), t0);

    let mut q = queue_cmd("k", "o1", 20_000, "app", 7, 0);
    q.arg("FENCE");
    queued(&mut c, &q);
    queued(&mut c, &queue_cmd("k", "o2", 20_000, "app", 8, 0));
    assert_eq!(queue_of(&mut c, "k"), ["o1", "o2"]);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 2);
    assert_eq!(rlock_stat(&mut c, "waits_started"), 2);
    assert_eq!(l.read(), vec![], "nothing happened yet");

    release(&mut c, "k", "holder");
    // Handed off in the same step: the new holder is visible at once, with its lease counted
    // from the grant and the next fencing token.
    assert_eq!(hgetall(&mut c, "k"), holder("o1", 1));
    assert_between("pttl", pttl(&mut c, "k"), 19_000, 20_000);
    let got = l.read();
    let t1 = token_now(&mut c);
    assert!(t1 > t0);
    assert_eq!(
        got,
        vec![Outcome {
            seq: 1,
            kind: "granted".into(),
            request: Some(7),
            key: Some("k".into()),
            value: Value::Int(t1),
        }],
        "granted with the token a blocked FENCE waiter gets"
    );
    release(&mut c, "k", "o1");
    assert_eq!(hgetall(&mut c, "k"), holder("o2", 1));
    let got = l.read();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].seq, got[0].request, got[0].value.clone()),
        (2, Some(8), Value::Int(1)),
        "the hold count, as a blocked waiter gets it"
    );
    // The same grant to a blocked waiter, for comparison.
    let w = park(&s, &mut c, "k", "w", 20_000, &["FENCE"], 1);
    release(&mut c, "k", "o2");
    let t3 = w.reply_int();
    assert!(t3 > t1);
    assert_eq!(token_now(&mut c), t3);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "handoffs"), 3);
}

#[test]
fn session_requests_and_block_waiters_share_one_fifo() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    let b1 = park(&s, &mut c, "k", "b1", 30_000, &[], 1);
    queued(&mut c, &queue_cmd("k", "q1", 30_000, "app", 1, 0));
    let b2 = park(&s, &mut c, "k", "b2", 30_000, &[], 2);
    queued(&mut c, &queue_cmd("k", "q2", 30_000, "app", 2, 0));
    queued(&mut c, &queue_cmd("k", "q3", 30_000, "app", 3, 0));
    let b3 = park(&s, &mut c, "k", "b3", 30_000, &[], 3);
    assert_eq!(queue_of(&mut c, "k"), ["b1", "q1", "b2", "q2", "q3", "b3"]);
    // A newcomer does not overtake anyone, whichever way it waits.
    assert_eq!(
        raw(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "late", 30_000)),
        Value::Nil
    );

    let mut prev = "holder".to_string();
    let mut blocked = vec![("b1", b1), ("b2", b2), ("b3", b3)].into_iter();
    for next in ["b1", "q1", "b2", "q2", "q3", "b3"] {
        release(&mut c, "k", &prev);
        assert_eq!(hgetall(&mut c, "k"), holder(next, 1), "after {prev}");
        if next.starts_with('b') {
            let (name, w) = blocked.next().unwrap();
            assert_eq!((name, w.reply_int()), (next, 1));
        } else {
            let got = l.read();
            assert_eq!(got.len(), 1, "{next}: {got:?}");
            assert_eq!(got[0].kind, "granted");
            assert_eq!(got[0].request, Some(next[1..].parse().unwrap()));
        }
        prev = next.to_string();
    }
    release(&mut c, "k", &prev);
    assert!(!exists(&mut c, "k"));
}

#[test]
fn a_server_side_deadline_ends_a_request_with_a_timeout_outcome() {
    let (s, mut c, l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    let reader = l.park(&s, &mut c);
    let t0 = Instant::now();
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 3, 250));
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "timeout outcome {} ms after queueing (deadline 250 ms)",
        after.as_millis()
    );
    assert_eq!(
        got,
        vec![Outcome {
            seq: 1,
            kind: "timeout".into(),
            request: Some(3),
            key: None,
            value: Value::Nil,
        }]
    );
    assert_between(
        "ms until the timeout outcome",
        after.as_millis() as i64,
        249,
        2000,
    );
    // Nothing is left queued; the holder is untouched.
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    assert_eq!(hgetall(&mut c, "k"), holder("holder", 1));
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "waits_timed_out"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 0);
}

#[test]
fn a_request_that_can_never_be_granted_ends_with_an_error_outcome() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    queued(&mut c, &queue_cmd("k", "o1", 60_000, "app", 1, 0));
    // The lock's key is overwritten with a string: the request can never be granted.
    assert_eq!(string(&mut c, &cmd!("SET", "k", "not a lock")), "OK");
    let got = l.read_n(1);
    assert_eq!(
        (got[0].kind.as_str(), got[0].request, got[0].key.as_deref()),
        ("error", Some(1), None)
    );
    assert_eq!(
        got[0].text(),
        "WRONGTYPE Operation against a key holding the wrong kind of value"
    );
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(string(&mut c, &cmd!("GET", "k")), "not a lock");
}

#[test]
fn a_parked_read_is_woken_at_once_by_an_outcome() {
    let (s, mut c, _l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 1, 0));
    // Parked for up to 10 s: only the grant can end it early.
    let reader = Pending::send(&s, &cmd!("RSESSION.READ", "app", 0, "BLOCK", 10_000));
    wait_until(Duration::from_secs(10), "listener parked", || {
        field_int(&session_info(&mut c, "app"), "reading") == 1
    });
    let t0 = Instant::now();
    release(&mut c, "k", "holder");
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "parked RSESSION.READ answered {} us after the release was sent",
        after.as_micros()
    );
    assert_eq!(got.len(), 1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert!(after < Duration::from_millis(500), "woken after {after:?}");
    assert_eq!(field_int(&session_info(&mut c, "app"), "reading"), 0);
}

#[test]
fn outcomes_stay_until_acknowledged_and_a_new_listener_reads_what_it_missed() {
    let (s, mut c, l) = start(10_000);
    hold_and_queue(&mut c, 3, "app");
    // The first listener is parked, then killed; the grants arrive after it is gone.
    let reader = l.park(&s, &mut c);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
    drop(reader);
    wait_until(Duration::from_secs(10), "listener gone", || {
        field_int(&session_info(&mut c, "app"), "reading") == 0
    });
    for i in 1..=3 {
        release(&mut c, &format!("k{i}"), "holder");
    }

    // A new listener resumes the session and reads what it missed, as often as it asks, until
    // it acknowledges.
    let mut c2 = s.conn();
    let resumed = fields(&raw(&mut c2, &cmd!("RSESSION.OPEN", "app", 10_000)));
    assert_eq!(
        [
            field_int(&resumed, "resumed"),
            field_int(&resumed, "acked"),
            field_int(&resumed, "last"),
            field_int(&resumed, "pending")
        ],
        [1, 0, 3, 3]
    );
    let first = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(
        first
            .iter()
            .map(|o| (o.seq, o.kind.as_str(), o.request, o.key.clone()))
            .collect::<Vec<_>>(),
        (1..=3)
            .map(|i| (i, "granted", Some(i), Some(format!("k{i}"))))
            .collect::<Vec<_>>()
    );
    let again = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0, "COUNT", 2)));
    assert_eq!(
        again,
        first[..2].to_vec(),
        "not acknowledged: read again (COUNT 2)"
    );
    // Acknowledge the first with RSESSION.ACK, the rest with the cursor of the next read.
    assert_eq!(int(&mut c2, &cmd!("RSESSION.ACK", "app", 1)), 1);
    let rest = outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(rest, first[1..].to_vec());
    assert_eq!(
        outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 3))),
        vec![]
    );
    assert_eq!(
        outcomes(&raw(&mut c2, &cmd!("RSESSION.READ", "app", 0))),
        vec![],
        "exactly once"
    );
    let info = session_info(&mut c2, "app");
    assert_eq!(
        (field_int(&info, "pending"), field_int(&info, "acked")),
        (0, 3)
    );
    assert_eq!(rlock_stat(&mut c2, "session_outcomes_pending"), 0);
    for i in 1..=3 {
        assert_eq!(
            hgetall(&mut c, &format!("k{i}")),
            holder(&format!("o{i}"), 1)
        );
    }
}

#[test]
fn cancel_withdraws_a_queued_request_and_a_grant_that_won_is_still_delivered() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 30_000);
    queued(&mut c, &queue_cmd("k", "o1", 30_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("k", "o2", 30_000, "app", 2, 0));
    assert_eq!(
        int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)),
        1,
        "withdrawn"
    );
    assert_eq!(
        int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)),
        0,
        "not queued any more"
    );
    assert_eq!(queue_of(&mut c, "k"), ["o2"]);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 1);

    // The grant races the cancel and wins: CANCEL says 0, the grant is delivered.
    release(&mut c, "k", "holder");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 0);
    let got = l.read();
    assert_eq!(got.len(), 1);
    assert_kinds(&got, &[("granted", Some(2))]);
    assert_eq!(
        hgetall(&mut c, "k"),
        holder("o2", 1),
        "the client releases it"
    );
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(l.read(), vec![], "a cancel adds no outcome");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 99)), 0);
}

// ---------------------------------------------------------------------------------------------
// Liveness: the grace period
// ---------------------------------------------------------------------------------------------

#[test]
fn after_the_grace_period_queued_requests_leave_and_unacknowledged_grants_go_on() {
    let (s, mut c, mut l) = start(400);
    for k in ["acked", "unacked", "queued"] {
        acquire(&mut c, k, "holder", 60_000);
    }
    queued(&mut c, &queue_cmd("acked", "qa", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("unacked", "qu", 60_000, "app", 2, 0));
    queued(&mut c, &queue_cmd("queued", "qq", 60_000, "app", 3, 0));
    let taken = cmd!("RLOCK.ACQUIRE", "taken", "qt", 60_000, "SESSION", "app");
    assert_eq!(int(&mut c, &taken), 1);
    release(&mut c, "acked", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert_eq!(l.read(), vec![], "acknowledged by the cursor");
    let wu = park(&s, &mut c, "unacked", "wu", 60_000, &[], 1);
    let wq = park(&s, &mut c, "queued", "wq", 60_000, &[], 2);

    // The listener goes; then a grant arrives for nobody.
    let reader = l.park(&s, &mut c);
    let gone = Instant::now();
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
    release(&mut c, "unacked", "holder");
    assert_eq!(hgetall(&mut c, "unacked"), holder("qu", 1));
    // Within the grace period everything is kept for a listener that comes back.
    let info = session_info(&mut c, "app");
    assert_eq!(
        (field_int(&info, "queued"), field_int(&info, "pending")),
        (1, 1)
    );
    assert_eq!(
        field_int(&info, "holds"),
        3,
        "acked, unacked and taken are watched"
    );

    // After it, the unacknowledged grant is undone and handed to the next waiter.
    assert_eq!(wu.reply_within(Duration::from_secs(5)), Value::Int(1));
    let after = gone.elapsed();
    println!(
        "grant handed on {} ms after the listener was killed (grace 400 ms)",
        after.as_millis()
    );
    assert_between("ms until the hand-off", after.as_millis() as i64, 398, 3000);
    assert_eq!(hgetall(&mut c, "unacked"), holder("wu", 1));
    let e = err(&mut c, &cmd!("RSESSION.INFO", "app"));
    assert!(e.starts_with("NOSESSION"), "{e}");
    // The queued request left its queue; acknowledged holds are untouched.
    assert_eq!(queue_of(&mut c, "queued"), ["wq"]);
    assert_eq!(hgetall(&mut c, "acked"), holder("qa", 1));
    assert_eq!(hgetall(&mut c, "taken"), holder("qt", 1));
    assert_between("acked pttl", pttl(&mut c, "acked"), 50_000, 60_000);
    for (field, want) in [
        ("sessions", 0),
        ("session_requests", 0),
        ("session_outcomes_pending", 0),
        ("session_holds_watched", 0),
        ("sessions_expired", 1),
        ("grants_revoked", 1),
        ("waiters", 1),
    ] {
        assert_eq!(rlock_stat(&mut c, field), want, "INFO rlock {field}");
    }
    assert!(
        rlock_stat(&mut c, "timer_jobs") <= 1,
        "no job left for the session"
    );
    release(&mut c, "queued", "holder");
    assert_eq!(wq.reply_int(), 1);
}

#[test]
fn a_listener_that_stops_reading_loses_its_session_after_the_grace_period() {
    let s = Server::start();
    let mut c = s.conn();
    let mut l = Listener::open(&s, "quiet", 300);
    acquire(&mut c, "k", "holder", 60_000);
    queued(&mut c, &queue_cmd("k", "q", 60_000, "quiet", 1, 0));
    assert_eq!(l.read(), vec![]);
    let last_read = Instant::now();
    wait_until(Duration::from_secs(5), "session expired", || {
        error_text(&raw(&mut c, &cmd!("RSESSION.INFO", "quiet"))).is_some()
    });
    let after = last_read.elapsed();
    println!(
        "silent session ended {} ms after its last read (grace 300 ms)",
        after.as_millis()
    );
    assert!(after >= Duration::from_millis(298), "{after:?}");
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), 1);
    let e = err(&mut l.conn, &cmd!("RSESSION.READ", "quiet", 0));
    assert!(e.starts_with("NOSESSION"), "{e}");
}

#[test]
fn a_parked_listener_keeps_its_session_beyond_the_grace_period() {
    let (s, mut c, l) = start(200);
    let reader = l.park(&s, &mut c);
    // Nothing can be awaited here: the behaviour is that nothing happens for a while.
    std::thread::sleep(Duration::from_millis(800));
    let info = session_info(&mut c, "app");
    assert_eq!(field_int(&info, "reading"), 1);
    assert_eq!(
        field_int(&info, "expires_in_ms"),
        -1,
        "no expiry while parked"
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    let e = error_text(&reader.reply()).unwrap_or_default();
    assert!(
        e.starts_with("NOSESSION"),
        "a parked read of a closed session: {e}"
    );
    assert_eq!(rlock_stat(&mut c, "sessions_closed"), 1);
}

#[test]
fn rsession_close_ends_a_session_at_once_as_expiry_would() {
    let (s, mut c, _l) = start(60_000);
    acquire(&mut c, "granted", "holder", 60_000);
    acquire(&mut c, "queued", "holder", 60_000);
    queued(&mut c, &queue_cmd("granted", "qg", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("queued", "qq", 60_000, "app", 2, 0));
    let w = park(&s, &mut c, "granted", "w", 60_000, &[], 1);
    release(&mut c, "granted", "holder");
    assert_eq!(
        hgetall(&mut c, "granted"),
        holder("qg", 1),
        "granted, not acknowledged"
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(
        w.reply_int(),
        1,
        "the unacknowledged grant went to the next waiter"
    );
    assert_eq!(hgetall(&mut c, "granted"), holder("w", 1));
    assert_eq!(lock_info(&mut c, "queued").waiters, 0);
    assert_eq!(rlock_stat(&mut c, "sessions_closed"), 1);
    assert_eq!(rlock_stat(&mut c, "sessions"), 0);
    let e = err(&mut c, &cmd!("RSESSION.READ", "app", 0));
    assert!(e.starts_with("NOSESSION"), "{e}");
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 0);
}

/// Ending a session hands every key it waited on to whoever waits behind its requests, also
/// when its requests on one key were queued at different times (interleaved with its requests
/// on other keys), and forgets the queues it leaves empty with their re-check jobs.
#[test]
fn closing_a_session_hands_each_key_it_waited_on_to_the_waiters_behind() {
    const KEYS: i64 = 200;
    let (s, mut c, _l) = start(60_000);
    let mut other = Listener::open(&s, "other", 60_000);
    let timers_before = rlock_stat(&mut c, "timer_jobs");
    let rw = |key: &str, owner: &str, mode: &str, session: &str, req: i64| {
        cmd!(
            "RRWLOCK.ACQUIRE",
            key,
            owner,
            mode,
            60_000,
            "SESSION",
            session,
            "QUEUE",
            req,
            0
        )
    };
    for i in 0..KEYS {
        let key = format!("rw{i}");
        assert_eq!(
            int(&mut c, &cmd!("RRWLOCK.ACQUIRE", &key, "r", "READ", 60_000)),
            1
        );
        // app's writer first, then other's reader behind it (a reader waits behind a writer).
        queued(&mut c, &rw(&key, &format!("w{i}"), "WRITE", "app", i));
        queued(&mut c, &rw(&key, &format!("r{i}"), "READ", "other", i));
        // Keys only app waits on: their queues end empty.
        let lone = format!("lone{i}");
        acquire(&mut c, &lone, "holder", 60_000);
        queued(
            &mut c,
            &queue_cmd(&lone, &format!("q{i}"), 60_000, "app", 10_000 + i, 0),
        );
    }
    // A second pass: app's requests on each key now come in two runs of its FIFO order.
    for i in 0..KEYS {
        let key = format!("rw{i}");
        queued(
            &mut c,
            &rw(&key, &format!("x{i}"), "WRITE", "app", 20_000 + i),
        );
    }
    assert_eq!(rlock_stat(&mut c, "waiters"), 4 * KEYS);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    // Every reader of `other` is granted (its writer ahead left), on the server's next turn.
    let got = other.read_n(KEYS as usize);
    assert!(got.iter().all(|o| o.kind == "granted"), "{got:?}");
    for i in 0..KEYS {
        let h = hgetall(&mut c, &format!("rw{i}"));
        assert_eq!(
            (
                h.get("mode").map(String::as_str),
                h.get(&format!("r{i}")).map(String::as_str)
            ),
            (Some("read"), Some("1")),
            "rw{i}: {h:?}"
        );
    }
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
    // Nothing left behind: no queue and no re-check job of one. The jobs left are app's
    // expiry gone (-1), and per rw key the read holds' lease-end upkeep and other's watched
    // hold.
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), KEYS);
    wait_until(Duration::from_secs(10), "timer jobs back", || {
        rlock_stat(&mut c, "timer_jobs") == timers_before - 1 + 2 * KEYS
    });
}

/// Child: the client process of `a_frozen_client_loses_its_requests_and_grants_to_the_next_waiter`.
/// It queues two requests, then reads outcomes (BLOCK 100) and acknowledges each batch,
/// printing what it got and `ACKED <seq>` when the acknowledgement succeeded, until an error.
#[test]
#[ignore = "child process: its parent test runs it (spawn_self), it does nothing alone"]
fn frozen_listener_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    fields(&raw(&mut c, &cmd!("RSESSION.OPEN", "frozen", 400)));
    queued(
        &mut c,
        &queue_cmd("fz:1", "child:1", 60_000, "frozen", 1, 0),
    );
    queued(
        &mut c,
        &queue_cmd("fz:2", "child:2", 60_000, "frozen", 2, 0),
    );
    println!("QUEUED");
    let mut cursor = 0;
    loop {
        let v = raw(
            &mut c,
            &cmd!("RSESSION.READ", "frozen", cursor, "BLOCK", 100),
        );
        if let Some(e) = error_text(&v) {
            println!("ERROR {e}");
            return;
        }
        let got = outcomes(&v);
        for o in &got {
            println!("OUTCOME {} {} {:?}", o.seq, o.kind, o.request);
            cursor = o.seq;
        }
        if !got.is_empty() {
            // A grant is the client's only once acknowledged.
            match raw(&mut c, &cmd!("RSESSION.ACK", "frozen", cursor)) {
                Value::Int(_) => println!("ACKED {cursor}"),
                other => {
                    println!("ERROR {}", error_text(&other).unwrap_or_default());
                    return;
                }
            }
        }
    }
}

#[test]
fn a_frozen_client_loses_its_requests_and_grants_to_the_next_waiter() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "fz:1", "holder", 60_000);
    acquire(&mut c, "fz:2", "holder", 60_000);
    let (mut child, mut out) = spawn_self("frozen_listener_child", &[(CHILD_URL, s.url())]);
    read_until(&mut out, "QUEUED");
    // (Not wait_blocked: the child's parked reads count as blocked clients too.)
    let w1 = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "fz:1", "w1", 60_000, "BLOCK", 0));
    let w2 = Pending::send(&s, &cmd!("RLOCK.ACQUIRE", "fz:2", "w2", 60_000, "BLOCK", 0));
    wait_until(Duration::from_secs(10), "both waiters queued", || {
        queue_of(&mut c, "fz:1") == ["child:1", "w1"]
            && queue_of(&mut c, "fz:2") == ["child:2", "w2"]
    });

    signal(child.id(), "-STOP");
    // kill(1) returns before the process has stopped (measured: up to 0.6 ms later).
    let status = format!("/proc/{}/status", child.id());
    wait_until(Duration::from_secs(5), "child stopped", || {
        let st = std::fs::read_to_string(&status).unwrap_or_default();
        st.lines()
            .any(|l| l.starts_with("State:") && l.contains("stopped"))
    });
    // Its last read returns (BLOCK 100), then nothing: the grace period runs from there. (A
    // grant that read had returned would be the frozen client's own until its lease ends.)
    wait_until(
        Duration::from_secs(5),
        "the frozen listener's read returned",
        || field_int(&session_info(&mut c, "frozen"), "reading") == 0,
    );
    let frozen = Instant::now();
    // Granted to the frozen client, which never reads it.
    release(&mut c, "fz:1", "holder");
    assert_eq!(hgetall(&mut c, "fz:1"), holder("child:1", 1));
    // After the grace period the grant goes to the next waiter and the queued request leaves.
    assert_eq!(w1.reply_within(Duration::from_secs(5)), Value::Int(1));
    println!(
        "frozen client's grant handed on {} ms after its read returned (grace 400)",
        frozen.elapsed().as_millis()
    );
    assert_eq!(hgetall(&mut c, "fz:1"), holder("w1", 1));
    assert_eq!(queue_of(&mut c, "fz:2"), ["w2"]);
    assert_eq!(rlock_stat(&mut c, "sessions_expired"), 1);
    release(&mut c, "fz:2", "holder");
    assert_eq!(w2.reply_int(), 1);

    // Resumed, the client learns its session is gone before it could acknowledge the grant.
    signal(child.id(), "-CONT");
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child ended: {lines:?}"
        );
        let line = line.trim_end().to_string();
        let last = line.starts_with("ERROR");
        lines.push(line);
        if last {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    println!("child after SIGCONT: {lines:?}");
    assert!(
        lines.last().unwrap().starts_with("ERROR NOSESSION"),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("ACKED")), "{lines:?}");
    assert_eq!(hgetall(&mut c, "fz:1"), holder("w1", 1));
    assert_eq!(hgetall(&mut c, "fz:2"), holder("w2", 1));
}

// ---------------------------------------------------------------------------------------------
// Lost holds
// ---------------------------------------------------------------------------------------------

/// How a watched hold is taken: by an acquire naming the session, or granted to a request
/// queued in it.
#[derive(Debug, Clone, Copy)]
enum Take {
    AtOnce,
    Granted,
}

/// Take `key` for `owner` in session `app` (listener `l`), with `lease_ms`.
fn take(
    c: &mut redis::Connection,
    l: &mut Listener,
    how: Take,
    key: &str,
    owner: &str,
    lease_ms: i64,
) {
    match how {
        Take::AtOnce => {
            let q = cmd!("RLOCK.ACQUIRE", key, owner, lease_ms, "SESSION", &l.name);
            assert_eq!(int(c, &q), 1);
        }
        Take::Granted => {
            acquire(c, key, "before", 60_000);
            queued(c, &queue_cmd(key, owner, lease_ms, &l.name, 100, 0));
            release(c, key, "before");
            let got = l.read_n(1);
            assert_eq!(got[0].kind, "granted");
            assert_eq!(l.read(), vec![], "acknowledged");
        }
    }
    assert_eq!(hgetall(c, key), holder(owner, 1));
}

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

#[test]
fn a_hold_ended_by_anything_but_its_owner_is_reported_lost_within_milliseconds() {
    type End = fn(&mut redis::Connection, &str);
    let ends: [(&str, End); 5] = [
        ("RLOCK.FORCERELEASE", |c, k| {
            assert_eq!(int(c, &cmd!("RLOCK.FORCERELEASE", k)), 1)
        }),
        ("DEL", |c, k| assert_eq!(int(c, &cmd!("DEL", k)), 1)),
        ("UNLINK", |c, k| assert_eq!(int(c, &cmd!("UNLINK", k)), 1)),
        ("FLUSHALL", |c, _| {
            assert_eq!(string(c, &cmd!("FLUSHALL")), "OK")
        }),
        ("Redisson force unlock", |c, k| {
            assert_eq!(redisson::force_unlock(c, k), Value::Int(1))
        }),
    ];
    for how in [Take::AtOnce, Take::Granted] {
        for (name, end) in ends {
            let s = Server::start();
            let mut c = s.conn();
            let mut l = Listener::open(&s, "app", 5000);
            take(&mut c, &mut l, how, "k", "o1", 60_000);
            let reader = l.park(&s, &mut c);
            let t0 = Instant::now();
            end(&mut c, "k");
            let (got, after) = parked_outcomes(reader, t0);
            println!(
                "{how:?} hold ended by {name}: lost outcome after {} us",
                after.as_micros()
            );
            assert_lost(&got, "k", "o1");
            assert!(after < Duration::from_millis(100), "{name}: {after:?}");
            assert_eq!(rlock_stat(&mut c, "holds_lost"), 1);
            assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);
        }
        // Lease expiry: reported when the lease ends, not at some later check.
        let s = Server::start();
        let mut c = s.conn();
        let mut l = Listener::open(&s, "app", 5000);
        let t0 = Instant::now();
        take(&mut c, &mut l, how, "k", "o1", 300);
        let reader = l.park(&s, &mut c);
        let (got, after) = parked_outcomes(reader, t0);
        println!(
            "{how:?} hold ended by its lease (300 ms): lost after {} ms",
            after.as_millis()
        );
        assert_lost(&got, "k", "o1");
        assert_between("ms until lost", after.as_millis() as i64, 299, 400);
    }
}

#[test]
fn a_read_write_hold_ended_by_force_release_is_reported_lost() {
    let (s, mut c, mut l) = start(5000);
    let read = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "r1",
        "READ",
        60_000,
        "SESSION",
        "app"
    );
    assert_eq!(int(&mut c, &read), 1);
    let reader = l.park(&s, &mut c);
    let t0 = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    let (got, after) = parked_outcomes(reader, t0);
    println!(
        "read hold ended by RRWLOCK.FORCERELEASE: lost after {} us",
        after.as_micros()
    );
    assert_lost(&got, "rw", "r1");
    assert!(after < Duration::from_millis(100), "{after:?}");
    l.cursor = got[0].seq;

    // A write hold granted through the session.
    let held = cmd!("RRWLOCK.ACQUIRE", "rw", "other", "READ", 60_000);
    assert_eq!(int(&mut c, &held), 1);
    let w = cmd!(
        "RRWLOCK.ACQUIRE",
        "rw",
        "w1",
        "WRITE",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        5,
        0
    );
    queued(&mut c, &w);
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "other", "READ")),
        0
    );
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(5))]);
    let reader = l.park(&s, &mut c);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_lost(&outcomes(&reader.reply()), "rw", "w1");
}

#[test]
fn the_owners_own_release_partial_release_and_renewal_are_not_losses() {
    let (_s, mut c, mut l) = start(5000);
    let take = cmd!("RLOCK.ACQUIRE", "k", "o1", 300, "SESSION", "app");
    assert_eq!(int(&mut c, &take), 1);
    // A re-entry is the same hold: watched once, lost once.
    assert_eq!(int(&mut c, &take), 2);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "holds"), 1);
    // Renewed past its first lease end (a loss check runs then and finds it held).
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "k", "o1", 60_000)), 1);
    let marker = cmd!("RLOCK.ACQUIRE", "m", "o2", 350, "SESSION", "app");
    assert_eq!(int(&mut c, &marker), 1);
    // The marker's lease ends after k's first one: when its loss arrives, k's check has run.
    let got = l.read_n(1);
    assert_lost(&got, "m", "o2");
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o1")),
        1,
        "partial release"
    );
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.RELEASE", "k", "o1")),
        0,
        "full release"
    );
    // Another marker, ended by DEL, after the releases: the only outcome.
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "m2", "o3", 60_000, "SESSION", "app")
        ),
        1
    );
    assert_eq!(int(&mut c, &cmd!("DEL", "m2")), 1);
    assert_lost(&l.read_n(1), "m2", "o3");
    assert_eq!(rlock_stat(&mut c, "holds_lost"), 2);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);

    // A re-entered hold that is then lost gives one outcome, not one per re-entry.
    assert_eq!(int(&mut c, &take), 1);
    assert_eq!(int(&mut c, &take), 2);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "o1");
    assert_eq!(int(&mut c, &cmd!("DEL", "nothing")), 0);
    assert_eq!(l.read(), vec![]);
}

#[test]
fn a_blocked_acquire_that_names_a_session_has_its_later_grant_watched() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park(&s, &mut c, "k", "w", 60_000, &["SESSION", "app"], 1);
    release(&mut c, "k", "holder");
    assert_eq!(w.reply_int(), 1);
    wait_until(Duration::from_secs(5), "hold watched", || {
        rlock_stat(&mut c, "session_holds_watched") == 1
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "w");
}

// ---------------------------------------------------------------------------------------------
// Parked session requests (`QUEUE ... BLOCK park_ms`)
// ---------------------------------------------------------------------------------------------

/// `queue_cmd` with `BLOCK park_ms`, sent on a connection of its own; returns once the server
/// shows it blocked (`blocked_after` blocked clients in all).
fn park_queued(
    s: &Server,
    admin: &mut redis::Connection,
    (key, owner, request, timeout): (&str, &str, i64, i64),
    park_ms: i64,
    blocked_after: i64,
) -> Pending {
    let mut q = queue_cmd(key, owner, 60_000, "app", request, timeout);
    q.arg("BLOCK").arg(park_ms);
    let p = Pending::send(s, &q);
    wait_blocked(admin, blocked_after);
    p
}

#[test]
fn a_parked_session_request_granted_in_time_gets_the_grant_as_its_reply() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 10_000, 1);
    // Queued in the session like any request: in the FIFO, counted, watched for deadlock.
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 1);
    release(&mut c, "k", "holder");
    assert_eq!(w.reply_int(), 1, "the reply a BLOCK waiter gets");
    assert_eq!(hgetall(&mut c, "k"), holder("w", 1));
    assert_eq!(rlock_stat(&mut c, "session_grants_direct"), 1);
    assert_eq!(field_int(&session_info(&mut c, "app"), "queued"), 0);
    assert_eq!(l.read(), vec![], "delivered once: nothing for the listener");
    // The hold is the session's: its loss is pushed to the listener.
    wait_until(Duration::from_secs(5), "hold watched", || {
        rlock_stat(&mut c, "session_holds_watched") == 1
    });
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "k")), 1);
    assert_lost(&l.read_n(1), "k", "w");
}

#[test]
fn a_parked_session_request_not_granted_in_time_is_answered_queued_and_waits_on() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 100, 1);
    let v = w.reply_within(Duration::from_secs(5));
    assert_eq!(v, Value::SimpleString("QUEUED".into()));
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0, "let go");
    assert_eq!(queue_of(&mut c, "k"), ["w"], "still in its place");
    release(&mut c, "k", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    assert_eq!(got[0].value, Value::Int(1));
    assert_eq!(rlock_stat(&mut c, "session_grants_direct"), 0);
}

#[test]
fn a_parked_session_request_whose_deadline_passes_is_answered_queued_then_times_out() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 100), 0, 1);
    let v = w.reply_within(Duration::from_secs(5));
    assert_eq!(v, Value::SimpleString("QUEUED".into()));
    assert_kinds(&l.read_n(1), &[("timeout", Some(1))]);
    assert_eq!(queue_of(&mut c, "k"), Vec::<String>::new());
}

#[test]
fn a_parked_session_request_outlives_its_connection() {
    let (s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)), 1);
    // Closed by the kill, not a read that timed out.
    let e = w
        .outcome_within(Duration::from_secs(5))
        .expect_err("the killed connection has no reply");
    assert!(
        !e.is_timeout() && e.is_connection_dropped(),
        "expected the connection closed, got {e:?}"
    );
    wait_blocked(&mut c, 0);
    // The wait is the session's: still queued, its grant goes to the listener.
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    release(&mut c, "k", "holder");
    assert_kinds(&l.read_n(1), &[("granted", Some(1))]);
    assert_eq!(hgetall(&mut c, "k"), holder("w", 1));
}

#[test]
fn a_parked_session_request_ended_otherwise_frees_its_connection_with_queued() {
    let (s, mut c, mut l) = start(5000);
    // CLIENT UNBLOCK: the connection is let go, the wait goes on.
    acquire(&mut c, "k", "holder", 60_000);
    let w = park_queued(&s, &mut c, ("k", "w", 1, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id)), 1);
    assert_eq!(w.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    // RSESSION.CANCEL from another connection: withdrawn, its connection answered.
    let w2 = park_queued(&s, &mut c, ("k", "w2", 2, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 1);
    assert_eq!(w2.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), ["w"]);
    // An error outcome (the key turned into another type) goes to the listener.
    acquire(&mut c, "other", "holder", 60_000);
    let w3 = park_queued(&s, &mut c, ("other", "w3", 3, 0), 0, 1);
    raw(&mut c, &cmd!("SET", "other", "x"));
    assert_eq!(w3.reply(), Value::SimpleString("QUEUED".into()));
    let got = l.read_n(1);
    assert_kinds(&got, &[("error", Some(3))]);
    assert!(got[0].text().starts_with("WRONGTYPE"), "{got:?}");
    // The session ends: its parked connections are answered, its requests withdrawn.
    let w4 = park_queued(&s, &mut c, ("k", "w4", 4, 0), 0, 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(w4.reply(), Value::SimpleString("QUEUED".into()));
    assert_eq!(queue_of(&mut c, "k"), Vec::<String>::new());
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
}

#[test]
fn inside_multi_a_parked_session_request_is_queued_without_parking() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    let mut q = queue_cmd("k", "in-multi", 60_000, "app", 1, 0);
    q.arg("BLOCK").arg(0);
    let mut p = redis::pipe();
    p.atomic().add_command(q);
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(replies, vec![Value::SimpleString("QUEUED".into())]);
    release(&mut c, "k", "holder");
    assert_kinds(&l.read_n(1), &[("granted", Some(1))]);
}

#[test]
fn semaphore_grants_to_parked_waiters_are_not_watched_as_holds() {
    // A semaphore has no owner: nothing of it can be lost, nothing is watched (a grant to a
    // blocked waiter that named a session used to be watched, and reported "lost" at once).
    let (s, mut c, mut l) = start(5000);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "sem")), 1);
    let blocked = Pending::send(
        &s,
        &cmd!("RSEM.ACQUIRE", "sem", "BLOCK", 0, "SESSION", "app"),
    );
    wait_blocked(&mut c, 1);
    let mut q = cmd!("RSEM.ACQUIRE", "sem", "SESSION", "app", "QUEUE", 1, 0);
    q.arg("BLOCK").arg(0);
    let parked = Pending::send(&s, &q);
    wait_blocked(&mut c, 2);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "sem")), 0);
    assert_eq!(blocked.reply_int(), 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "sem")), 0);
    assert_eq!(parked.reply_int(), 1);
    // A marker outcome: everything before it would have been read with it.
    acquire(&mut c, "marker", "holder", 60_000);
    queued(&mut c, &queue_cmd("marker", "m", 60_000, "app", 2, 50));
    assert_kinds(&l.read_n(1), &[("timeout", Some(2))]);
    assert_eq!(rlock_stat(&mut c, "session_holds_watched"), 0);
    assert_eq!(rlock_stat(&mut c, "holds_lost"), 0);
}

// ---------------------------------------------------------------------------------------------
// Limits and errors
// ---------------------------------------------------------------------------------------------

#[test]
fn limits_are_clear_errors_and_nothing_is_queued() {
    let s = Server::start();
    let mut c = s.conn();
    let get = |c: &mut redis::Connection, name: &str| -> String {
        let v: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(c).unwrap();
        v[1].clone()
    };
    assert_eq!(get(&mut c, "rlock.session-max-grace-ms"), "60000");
    assert_eq!(get(&mut c, "rlock.session-max-queued"), "100000");
    assert_eq!(get(&mut c, "rlock.session-max-backlog"), "100000");
    acquire(&mut c, "k", "holder", 60_000);

    // Grace period.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-grace-ms", 1000),
    );
    let e = err(&mut c, &cmd!("RSESSION.OPEN", "big", 1001));
    assert_eq!(
        e,
        "ERR grace_ms 1001 is above rlock.session-max-grace-ms (1000)"
    );
    assert_eq!(raw(&mut c, &cmd!("RSESSION.LIST")), Value::Array(vec![]));
    let mut l = Listener::open(&s, "app", 1000);

    // Queued requests.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-queued", 2),
    );
    queued(&mut c, &queue_cmd("k", "o1", 60_000, "app", 1, 0));
    queued(&mut c, &queue_cmd("k", "o2", 60_000, "app", 2, 0));
    let started = rlock_stat(&mut c, "waits_started");
    let e = err(&mut c, &queue_cmd("k", "o3", 60_000, "app", 3, 0));
    assert_eq!(
        e,
        "ERR the session has 2 requests queued (rlock.session-max-queued)"
    );
    assert_eq!(queue_of(&mut c, "k"), ["o1", "o2"]);
    assert_eq!(rlock_stat(&mut c, "waits_started"), started);
    // A request granted at once queues nothing: the limit does not apply.
    assert_eq!(
        int(&mut c, &queue_cmd("free", "o3", 60_000, "app", 3, 0)),
        1
    );
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)), 1);
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 2)), 1);

    // Outcomes not acknowledged.
    string(
        &mut c,
        &cmd!("CONFIG", "SET", "rlock.session-max-backlog", 2),
    );
    queued(&mut c, &queue_cmd("k", "o4", 60_000, "app", 4, 1));
    queued(&mut c, &queue_cmd("k", "o5", 60_000, "app", 5, 1));
    wait_until(Duration::from_secs(5), "two timeouts", || {
        field_int(&session_info(&mut c, "app"), "pending") == 2
    });
    let e = err(&mut c, &queue_cmd("k", "o6", 60_000, "app", 6, 0));
    assert_eq!(
        e,
        "ERR the session has 2 outcomes not acknowledged (rlock.session-max-backlog): read them with RSESSION.READ"
    );
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    let timeouts = l.read();
    assert!(timeouts.iter().all(|o| o.kind == "timeout"), "{timeouts:?}");
    assert_eq!(l.read(), vec![], "acknowledges the two");
    queued(&mut c, &queue_cmd("k", "o6", 60_000, "app", 6, 0));
    assert_eq!(rlock_stat(&mut c, "session_requests"), 1);
}

#[test]
fn unknown_sessions_and_bad_combinations_are_refused_before_anything_is_written() {
    let s = Server::start();
    let mut c = s.conn();
    let nosession = |c: &mut redis::Connection, command: redis::Cmd| {
        let e = err(c, &command);
        assert_eq!(
            e,
            "NOSESSION no such session (never opened, closed, or expired): open it with RSESSION.OPEN",
            "{}",
            show(&command)
        );
    };
    // A free lock is not taken, the token not incremented.
    nosession(
        &mut c,
        cmd!("RLOCK.ACQUIRE", "k", "o", 1000, "SESSION", "nope", "FENCE"),
    );
    nosession(&mut c, queue_cmd("k", "o", 1000, "nope", 1, 0));
    nosession(
        &mut c,
        cmd!(
            "RRWLOCK.ACQUIRE",
            "rw",
            "o",
            "WRITE",
            1000,
            "SESSION",
            "nope",
            "QUEUE",
            1,
            0
        ),
    );
    assert_eq!(dbsize(&mut c), 0);
    acquire(&mut c, "k", "holder", 60_000);
    nosession(&mut c, queue_cmd("k", "o", 1000, "nope", 1, 0));
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    for command in [
        cmd!("RSESSION.READ", "nope", 0),
        cmd!("RSESSION.READ", "nope", 0, "BLOCK", 100),
        cmd!("RSESSION.ACK", "nope", 0),
        cmd!("RSESSION.CANCEL", "nope", 1),
        cmd!("RSESSION.INFO", "nope"),
    ] {
        nosession(&mut c, command);
    }
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "nope")), 0);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);

    let _l = Listener::open(&s, "app", 1000);
    for (command, want) in [
        (
            "RLOCK.ACQUIRE k o 1000 SESSION app QUEUE 1 0 BLOCK -1",
            "ERR timeout is negative",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 BLOCK x SESSION app QUEUE 1 0",
            "ERR timeout is not an integer or out of range",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 QUEUE 1 0",
            "ERR syntax error, QUEUE needs SESSION",
        ),
        (
            "RLOCK.ACQUIRE k o 1000 SESSION app QUEUE 1 -1",
            "ERR timeout is negative",
        ),
        ("RSESSION.OPEN app -1", "ERR grace_ms must be at least 0"),
    ] {
        let mut words = command.split(' ');
        let mut c2 = redis::cmd(words.next().unwrap());
        c2.arg(words.collect::<Vec<_>>());
        assert_eq!(err(&mut c, &c2), want, "{command}");
    }
    // A request id may be queued once at a time in a session.
    queued(&mut c, &queue_cmd("k", "o1", 1000, "app", 5, 0));
    acquire(&mut c, "k2", "holder", 60_000);
    let e = err(&mut c, &queue_cmd("k2", "o2", 1000, "app", 5, 0));
    assert_eq!(e, "ERR request id is already queued in this session");
    assert_eq!(lock_info(&mut c, "k2").waiters, 0);
    assert_eq!(queue_of(&mut c, "k"), ["o1"]);
    assert_eq!(rlock_stat(&mut c, "waits_started"), 1);
}

#[test]
fn queue_works_inside_multi_and_lua_where_block_cannot() {
    let (_s, mut c, mut l) = start(5000);
    acquire(&mut c, "k", "holder", 60_000);
    // Queueing never blocks the connection, so a transaction or a script may queue.
    let mut p = redis::pipe();
    p.atomic()
        .add_command(queue_cmd("k", "in-multi", 60_000, "app", 1, 0))
        .add_command(cmd!("RLOCK.ACQUIRE", "k", "blocked", 60_000, "BLOCK", 0));
    let replies: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(
        replies,
        vec![Value::SimpleString("QUEUED".into()), Value::Nil],
        "QUEUE queues inside MULTI; BLOCK degrades to one attempt"
    );
    let script = "return redis.call('RLOCK.ACQUIRE', KEYS[1], ARGV[1], 60000, 'SESSION', 'app', 'QUEUE', 2, 0)";
    let v = raw(&mut c, &cmd!("EVAL", script, 1, "k", "in-lua"));
    assert_eq!(text(&v).as_deref(), Some("QUEUED"), "{v:?}");
    assert_eq!(queue_of(&mut c, "k"), ["in-multi", "in-lua"]);
    release(&mut c, "k", "holder");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(1))]);
    release(&mut c, "k", "in-multi");
    let got = l.read_n(1);
    assert_kinds(&got, &[("granted", Some(2))]);
    assert_eq!(hgetall(&mut c, "k"), holder("in-lua", 1));
}

// ---------------------------------------------------------------------------------------------
// Introspection
// ---------------------------------------------------------------------------------------------

#[test]
fn rsession_info_and_list_show_each_session() {
    let s = Server::start();
    let mut c = s.conn();
    let mut a = Listener::open(&s, "a", 3000);
    let _b = Listener::open(&s, "b", 4000);
    acquire(&mut c, "k", "holder", 60_000);
    queued(&mut c, &queue_cmd("k", "o1", 60_000, "a", 1, 0));
    queued(&mut c, &queue_cmd("k", "o2", 60_000, "a", 2, 0));
    assert_eq!(
        int(
            &mut c,
            &cmd!("RLOCK.ACQUIRE", "h", "o3", 60_000, "SESSION", "a")
        ),
        1
    );
    release(&mut c, "k", "holder");
    let mut names: Vec<String> = redis::cmd("RSESSION.LIST").query(&mut c).unwrap();
    names.sort();
    assert_eq!(names, ["a", "b"]);
    let info = session_info(&mut c, "a");
    assert_eq!(
        info.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "acked",
            "expires_in_ms",
            "grace_ms",
            "holds",
            "last",
            "listener",
            "pending",
            "queued",
            "reading",
            "session"
        ]
    );
    assert_eq!(text(&info["session"]).as_deref(), Some("a"));
    for (field, want) in [
        ("listener", a.id),
        ("reading", 0),
        ("grace_ms", 3000),
        ("queued", 1),
        ("pending", 1),
        ("acked", 0),
        ("last", 1),
        ("holds", 2),
    ] {
        assert_eq!(field_int(&info, field), want, "{field}");
    }
    assert_between("expires_in_ms", field_int(&info, "expires_in_ms"), 1, 3000);
    assert_eq!(a.read().len(), 1);
    let reader = a.park(&s, &mut c);
    let info = session_info(&mut c, "a");
    assert_eq!(field_int(&info, "reading"), 1);
    assert_eq!(
        field_int(&info, "listener"),
        reader.id,
        "the last reader is the listener"
    );
    assert_eq!(field_int(&info, "expires_in_ms"), -1);
    assert_eq!(field_int(&info, "acked"), 1);
    for (field, want) in [
        ("sessions", 2),
        ("session_requests", 1),
        ("session_outcomes_pending", 0),
        ("session_holds_watched", 2),
        ("sessions_opened", 2),
    ] {
        assert_eq!(rlock_stat(&mut c, field), want, "INFO rlock {field}");
    }
}

#[test]
fn client_unblock_of_a_parked_read_returns_an_empty_array() {
    let (s, mut c, l) = start(5000);
    let reader = l.park(&s, &mut c);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", reader.id)), 1);
    assert_eq!(reader.reply(), Value::Array(vec![]));
    let info = session_info(&mut c, "app");
    assert_eq!(field_int(&info, "reading"), 0);
    assert_between("expires_in_ms", field_int(&info, "expires_in_ms"), 1, 5000);
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    // A read parked by another connection takes over from the first, which returns empty.
    let first = l.park(&s, &mut c);
    let second = Pending::send(&s, &cmd!("RSESSION.READ", "app", 0, "BLOCK", 0));
    assert_eq!(first.reply(), Value::Array(vec![]));
    wait_until(Duration::from_secs(5), "second reader parked", || {
        field_int(&session_info(&mut c, "app"), "listener") == second.id
    });
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", second.id)), 1);
    assert_eq!(second.reply(), Value::Array(vec![]));
}

// ---------------------------------------------------------------------------------------------
// Read-write locks
// ---------------------------------------------------------------------------------------------

#[test]
fn readers_queued_in_a_session_are_granted_together() {
    let (s, mut c, mut l) = start(5000);
    let rw = |owner: &str, mode: &str, req: i64| {
        cmd!(
            "RRWLOCK.ACQUIRE",
            "rw",
            owner,
            mode,
            60_000,
            "SESSION",
            "app",
            "QUEUE",
            req,
            0
        )
    };
    assert_eq!(
        int(
            &mut c,
            &cmd!("RRWLOCK.ACQUIRE", "rw", "writer", "WRITE", 60_000)
        ),
        1
    );
    queued(&mut c, &rw("r1", "READ", 1));
    let b = Pending::send(
        &s,
        &cmd!("RRWLOCK.ACQUIRE", "rw", "r2", "READ", 60_000, "BLOCK", 0),
    );
    wait_blocked(&mut c, 1);
    queued(&mut c, &rw("r3", "READ", 3));
    queued(&mut c, &rw("w4", "WRITE", 4));
    assert_eq!(
        int(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", "writer", "WRITE")),
        0
    );
    // The three readers at the head pass together; the writer behind them waits.
    let h = hgetall(&mut c, "rw");
    assert_eq!(
        (
            h.get("mode"),
            h.get("r1"),
            h.get("r2"),
            h.get("r3"),
            h.get("w4:write")
        ),
        (
            Some(&"read".into()),
            Some(&"1".into()),
            Some(&"1".into()),
            Some(&"1".into()),
            None
        ),
        "{h:?}"
    );
    assert_eq!(b.reply_int(), 1);
    let got = l.read();
    assert_kinds(&got, &[("granted", Some(1)), ("granted", Some(3))]);
    for r in ["r1", "r2", "r3"] {
        assert_eq!(int(&mut c, &cmd!("RRWLOCK.RELEASE", "rw", r, "READ")), 0);
    }
    let got = l.read();
    assert_kinds(&got, &[("granted", Some(4))]);
    assert_eq!(
        hgetall(&mut c, "rw").get("w4:write").map(String::as_str),
        Some("1")
    );
}

// ---------------------------------------------------------------------------------------------
// Memory, failover, cluster
// ---------------------------------------------------------------------------------------------

/// Queue `n` requests (distinct owners) on the held lock `key` in session `name`, pipelined.
fn queue_many(c: &mut redis::Connection, key: &str, name: &str, n: i64, timeout_ms: i64) {
    for chunk in 0..(n + 999) / 1000 {
        let mut p = redis::pipe();
        for i in chunk * 1000..((chunk + 1) * 1000).min(n) {
            p.add_command(queue_cmd(
                key,
                &format!("owner:{i:06}"),
                60_000,
                name,
                i,
                timeout_ms,
            ));
        }
        let replies: Vec<Value> = p.query(c).unwrap();
        assert!(
            replies
                .iter()
                .all(|r| *r == Value::SimpleString("QUEUED".into())),
            "{:?}",
            replies
                .iter()
                .find(|r| **r != Value::SimpleString("QUEUED".into()))
        );
    }
}

fn used_memory(c: &mut redis::Connection) -> i64 {
    info_int(c, "memory", "used_memory")
}

#[test]
fn ten_thousand_queued_requests_leave_no_memory_behind_when_their_session_expires() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "hot", "holder", 600_000);
    // The baseline is taken after a round of 10 requests: Redis 7 allocates a latency
    // histogram of about 50 KB for each command the first time it is called (measured:
    // used_memory +50 KB at the first RSESSION.OPEN, +65 KB at the first RSESSION.READ), and
    // that is not the module's memory.
    let mut baseline = 0;
    let mut results = Vec::new();
    let rounds = [
        ("warm-up", 10, 0),
        ("without deadlines", 10_000, 0),
        ("with deadlines", 10_000, 600_000),
    ];
    for (round, n, timeout_ms) in rounds {
        let l = Listener::open(&s, "big", 100);
        let reader = l.park(&s, &mut c);
        let before = used_memory(&mut c); // with the listener's connections
        let clients = info_int(&mut c, "clients", "connected_clients");
        // Queued from a connection of their own, closed before measuring (its buffers go).
        queue_many(&mut s.conn(), "hot", "big", n, timeout_ms);
        wait_until(
            Duration::from_secs(10),
            "the queueing connection closed",
            || info_int(&mut c, "clients", "connected_clients") == clients,
        );
        assert_eq!(rlock_stat(&mut c, "session_requests"), n);
        assert_eq!(lock_info(&mut c, "hot").waiters, n);
        let per_request = (used_memory(&mut c) - before) / n;
        // The session expires 100 ms after its listener goes: every request leaves.
        assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", reader.id)), 1);
        drop((reader, l));
        wait_until(
            Duration::from_secs(30),
            "the session and its requests gone",
            || {
                rlock_stat(&mut c, "sessions") == 0
                    && rlock_stat(&mut c, "waiters") == 0
                    && info_int(&mut c, "clients", "connected_clients") == 1
            },
        );
        assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
        assert_eq!(
            rlock_stat(&mut c, "timer_jobs"),
            0,
            "no timer job left behind"
        );
        assert_eq!(lock_info(&mut c, "hot").queue, Vec::<String>::new());
        assert_eq!(hgetall(&mut c, "hot"), holder("holder", 1));
        let after = used_memory(&mut c);
        if n < 10_000 {
            baseline = after;
            continue;
        }
        println!(
            "{round}: {n} queued requests on one session: {per_request} bytes per request \
             (used_memory); baseline {baseline}, after expiry {after} ({} bytes)",
            after - baseline
        );
        results.push((round, per_request, after));
    }
    for (round, per_request, after) in results {
        // A leak of 8 bytes per request would be 80 KB; the margin is for Redis' own buffers
        // and statistics, which move by a few KB between two readings.
        assert!(
            (after - baseline).abs() <= 32 * 1024,
            "{round}: used_memory {baseline} before, {after} after expiry ({} bytes)",
            after - baseline
        );
        assert!(
            per_request <= 1024,
            "{round}: {per_request} bytes per queued request"
        );
    }
}

#[test]
fn a_demoted_master_ends_queued_session_requests_with_an_unblocked_outcome() {
    let m = Server::with(ServerOptions {
        args: vec!["--repl-diskless-sync-delay".into(), "0".into()],
        ..ServerOptions::default()
    });
    let r = Server::with(ServerOptions {
        replica_of: Some(m.port),
        ..ServerOptions::default()
    });
    let mut rc = r.conn();
    let mut c = m.conn();
    let online = format!("port={},state=online", r.port);
    wait_until(Duration::from_secs(10), "replica online", || {
        info_field(&mut rc, "replication", "master_link_status").as_deref() == Some("up")
            && string(&mut c, &cmd!("INFO", "replication")).contains(&online)
    });
    let l = Listener::open(&m, "app", 10_000);
    hold_and_queue(&mut c, 2, "app");
    let reader = l.park(&m, &mut c);
    assert_eq!(
        int(&mut c, &cmd!("WAIT", 1, 5000)),
        1,
        "the locks reached the replica"
    );

    assert_eq!(string(&mut rc, &cmd!("REPLICAOF", "NO", "ONE")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("REPLICAOF", "127.0.0.1", r.port)),
        "OK"
    );
    // Redis itself ends every blocked client of a demoted master, the parked read too.
    let e = error_text(&reader.reply()).unwrap_or_default();
    assert!(e.starts_with("UNBLOCKED"), "{e}");
    // The listener reads the outcomes on the demoted server (sessions answer on a replica).
    let mut c = m.conn();
    let mut got = outcomes(&raw(&mut c, &cmd!("RSESSION.READ", "app", 0)));
    assert_eq!(got.len(), 2, "{got:?}");
    got.sort_by_key(|o| o.request);
    for (i, o) in got.iter().enumerate() {
        assert_eq!((o.kind.as_str(), o.request), ("error", Some(i as i64 + 1)));
        assert!(o.text().starts_with("UNBLOCKED"), "{o:?}");
    }
    assert_eq!(rlock_stat(&mut c, "session_requests"), 0);
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
    // The client queues again on the new master.
    let _l2 = Listener::open(&r, "app", 10_000);
    queued(&mut rc, &queue_cmd("k1", "o1", 60_000, "app", 3, 0));
    assert_eq!(queue_of(&mut rc, "k1"), ["o1"]);
}

#[test]
fn a_slot_migration_ends_queued_session_requests_with_tryagain() {
    let cluster = Cluster::start();
    let name = "{mig}:session-lock";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut c = source.conn();
    acquire(&mut c, name, "holder", 60_000);
    let l = Listener::open(source, "app", 10_000);
    queued(&mut c, &queue_cmd(name, "o1", 60_000, "app", 1, 0));
    let reader = l.park(source, &mut c);
    cluster.migrate_slot(slot, source, target, || {
        wait_until(Duration::from_secs(20), "session request ended", || {
            rlock_stat(&mut c, "session_requests") == 0
        });
    });
    let got = outcomes(&reader.reply());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_kinds(&got, &[("error", Some(1))]);
    assert!(got[0].text().starts_with("TRYAGAIN"), "{got:?}");
    let info = lock_info(&mut target.conn(), name);
    assert_eq!((info.owner.as_deref(), info.waiters), (Some("holder"), 0));
}

//! The module's session commands as the client sends them and reads their replies (the wire
//! form is the module's: `docs/commands.md`, "Sessions"). Pure: no connection here.

use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value};

/// `RSESSION.OPEN name grace_ms`: create or resume the session; the calling connection becomes
/// its listener.
pub(crate) fn open(name: &str, grace_ms: u64) -> Cmd {
    let mut c = redis::cmd("RSESSION.OPEN");
    c.arg(name).arg(grace_ms);
    c
}

/// `RSESSION.READ name cursor BLOCK ms`: acknowledge every outcome up to `cursor`, return those
/// after it, waiting up to `block_ms` for one.
pub(crate) fn read(name: &str, cursor: u64, block_ms: u64) -> Cmd {
    let mut c = redis::cmd("RSESSION.READ");
    c.arg(name).arg(cursor).arg("BLOCK").arg(block_ms);
    c
}

/// `RSESSION.CANCEL name request`: 1 when the request was still queued (it is withdrawn), 0 when
/// not (its outcome is or will be in the session's outcomes).
pub(crate) fn cancel(name: &str, request: u64) -> Cmd {
    let mut c = redis::cmd("RSESSION.CANCEL");
    c.arg(name).arg(request);
    c
}

/// `RSESSION.CLOSE name`: end the session now.
pub(crate) fn close(name: &str) -> Cmd {
    let mut c = redis::cmd("RSESSION.CLOSE");
    c.arg(name);
    c
}

/// A wait queued in the session: `QUEUE request timeout_ms` (0: no limit), and `BLOCK park_ms`
/// when the caller's connection is its own for a while (see [`name_session`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Queue {
    pub(crate) request: u64,
    pub(crate) timeout_ms: u64,
    pub(crate) park_ms: Option<u64>,
}

/// Append the session options to an acquire: `SESSION name` (a hold it takes is watched for
/// loss) and, for a wait, `QUEUE request timeout_ms`, with `BLOCK park_ms` when the connection
/// may wait for a grant that comes within `park_ms` (it is the reply then, as to a `BLOCK`
/// waiter; else the reply is `QUEUED` and the outcome comes through the listener).
pub(crate) fn name_session(cmd: &mut Cmd, name: &str, queue: Option<Queue>) {
    cmd.arg("SESSION").arg(name);
    if let Some(q) = queue {
        cmd.arg("QUEUE").arg(q.request).arg(q.timeout_ms);
        if let Some(ms) = q.park_ms {
            cmd.arg("BLOCK").arg(ms);
        }
    }
}

/// Whether an acquire's reply says it was queued (its outcome comes to the listener).
pub(crate) fn is_queued(reply: &Value) -> bool {
    matches!(reply, Value::SimpleString(s) if s == "QUEUED")
}

/// What an outcome says.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    /// A queued request was granted: the reply a `BLOCK` waiter would have got.
    Granted(Value),
    /// A queued request's deadline passed.
    Timeout,
    /// A queued request can never be granted here (the error, e.g. `TRYAGAIN` after a slot
    /// migration or `UNBLOCKED` after a demotion).
    Error(RedisError),
    /// A hold of the session ended by something other than its owner's release: the owner.
    Lost(String),
    /// The session's backlog was full, so `lost` outcomes were dropped: some hold of this
    /// client on that server may have ended unreported.
    Overflow,
}

impl PartialEq for Kind {
    fn eq(&self, o: &Kind) -> bool {
        match (self, o) {
            (Kind::Granted(a), Kind::Granted(b)) => a == b,
            (Kind::Timeout, Kind::Timeout) => true,
            (Kind::Error(a), Kind::Error(b)) => a.to_string() == b.to_string(),
            (Kind::Lost(a), Kind::Lost(b)) => a == b,
            (Kind::Overflow, Kind::Overflow) => true,
            _ => false,
        }
    }
}

/// One entry of `RSESSION.READ`: `[seq, kind, request|nil, key|nil, value, object|nil]` (the
/// object's kind, `lock`, `rwlock`, `semaphore`, `latch` or `multilock`; older servers send five fields).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) seq: u64,
    pub(crate) request: Option<u64>,
    pub(crate) key: Option<String>,
    pub(crate) object: Option<String>,
    pub(crate) kind: Kind,
}

/// The object kind a command acts on, as outcomes name it (`RLOCK.*`: `lock`, ...).
pub(crate) fn object_of(cmd: &Cmd) -> Option<&'static str> {
    let redis::Arg::Simple(name) = cmd.args_iter().next()? else {
        return None;
    };
    let family = name.split(|b| *b == b'.').next()?;
    [
        (&b"RLOCK"[..], "lock"),
        (b"RRWLOCK", "rwlock"),
        (b"RSEM", "semaphore"),
        (b"RLATCH", "latch"),
        (b"RMLOCK", "multilock"),
    ]
    .into_iter()
    .find(|(f, _)| family.eq_ignore_ascii_case(f))
    .map(|(_, object)| object)
}

fn bad(what: &str, v: &Value) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "unexpected session reply",
        format!("{what}: {v:?}"),
    ))
}

/// An error outcome's text (`CODE detail`) as the error a blocked waiter would have got.
pub(crate) fn error_of(text: &str) -> RedisError {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(Value::ServerError(e)) => e.into(),
        _ => RedisError::from((ErrorKind::Parse, "bad error outcome", text.to_string())),
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn number(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) if *n >= 0 => Some(*n as u64),
        _ => None,
    }
}

/// The outcomes of an `RSESSION.READ` reply, in sequence order.
pub(crate) fn outcomes(reply: Value) -> RedisResult<Vec<Outcome>> {
    let entries = match reply {
        Value::Array(v) => v,
        Value::Nil => Vec::new(),
        other => return Err(bad("RSESSION.READ", &other)),
    };
    entries.into_iter().map(outcome).collect()
}

fn outcome(entry: Value) -> RedisResult<Outcome> {
    let Value::Array(f) = &entry else {
        return Err(bad("outcome", &entry));
    };
    let (seq, kind, request, key, value, object) = match &f[..] {
        [seq, kind, request, key, value] => (seq, kind, request, key, value, None),
        [seq, kind, request, key, value, object] => (seq, kind, request, key, value, text(object)),
        _ => return Err(bad("outcome", &entry)),
    };
    let seq = number(seq).ok_or_else(|| bad("outcome seq", &entry))?;
    let kind = match text(kind).as_deref() {
        Some("granted") => Kind::Granted(value.clone()),
        Some("timeout") => Kind::Timeout,
        Some("error") => Kind::Error(error_of(&text(value).unwrap_or_default())),
        Some("lost") => Kind::Lost(text(value).unwrap_or_default()),
        Some("overflow") => Kind::Overflow,
        _ => return Err(bad("outcome kind", &entry)),
    };
    Ok(Outcome {
        seq,
        request: number(request),
        key: text(key),
        object,
        kind,
    })
}

/// The part of `RSESSION.OPEN`'s reply the listener needs: whether the session existed.
pub(crate) fn resumed(reply: Value) -> RedisResult<bool> {
    // A map in RESP3, a flat array of field/value pairs in RESP2.
    let pairs: Vec<(Value, Value)> = match reply {
        Value::Map(m) => m,
        Value::Array(v) if v.len() % 2 == 0 => {
            let mut it = v.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => return Err(bad("RSESSION.OPEN", &other)),
    };
    pairs
        .into_iter()
        .find(|(k, _)| text(k).as_deref() == Some("resumed"))
        .and_then(|(_, v)| number(&v))
        .map(|n| n == 1)
        .ok_or_else(|| bad("RSESSION.OPEN without resumed", &Value::Nil))
}

/// The server's bound on the grace period, from `RSESSION.OPEN`'s refusal of a longer one
/// (`ERR grace_ms 90000 is above rlock.session-max-grace-ms (60000)`).
pub(crate) fn max_grace(e: &RedisError) -> Option<u64> {
    let detail = e.detail()?;
    if !detail.contains("session-max-grace-ms") {
        return None;
    }
    let (_, rest) = detail.rsplit_once('(')?;
    rest.trim_end_matches(')').parse().ok()
}

/// `INFO server`: where [`run_id_of`] reads the server process' id.
pub(crate) fn info_server() -> Cmd {
    let mut info = redis::cmd("INFO");
    info.arg("server");
    info
}

/// The `run_id` in an `INFO server` reply (RESP2 bulk or RESP3 verbatim string).
pub(crate) fn run_id_of(reply: &Value) -> Option<String> {
    match reply {
        Value::BulkString(b) => run_id(&String::from_utf8_lossy(b)),
        Value::VerbatimString { text, .. } => run_id(text),
        _ => None,
    }
}

/// `run_id` of an `INFO server` reply: which process the listener reached (a different one
/// after a restart or a failover behind one address).
fn run_id(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|v| v.trim().to_string())
}

/// A command's words, to compare with the wire contract in tests.
#[cfg(test)]
pub(crate) fn words(c: &Cmd) -> Vec<String> {
    c.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => "<other>".into(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn commands_follow_the_wire_contract() {
        assert_eq!(words(&open("s", 5000)), ["RSESSION.OPEN", "s", "5000"]);
        assert_eq!(
            words(&read("s", 7, 2000)),
            ["RSESSION.READ", "s", "7", "BLOCK", "2000"]
        );
        assert_eq!(words(&cancel("s", 9)), ["RSESSION.CANCEL", "s", "9"]);
        assert_eq!(words(&close("s")), ["RSESSION.CLOSE", "s"]);
        let mut acquire = redis::cmd("RLOCK.ACQUIRE");
        acquire.arg("k").arg("o").arg(100);
        let queue = Queue {
            request: 12,
            timeout_ms: 250,
            park_ms: None,
        };
        name_session(&mut acquire, "s", Some(queue));
        assert_eq!(
            words(&acquire),
            [
                "RLOCK.ACQUIRE",
                "k",
                "o",
                "100",
                "SESSION",
                "s",
                "QUEUE",
                "12",
                "250"
            ]
        );
        let mut parked = redis::cmd("RSEM.ACQUIRE");
        let queue = Queue {
            park_ms: Some(50),
            ..queue
        };
        name_session(&mut parked, "s", Some(queue));
        assert_eq!(
            words(&parked),
            [
                "RSEM.ACQUIRE",
                "SESSION",
                "s",
                "QUEUE",
                "12",
                "250",
                "BLOCK",
                "50"
            ]
        );
        let mut once = redis::cmd("RLOCK.ACQUIRE");
        name_session(&mut once, "s", None);
        assert_eq!(words(&once), ["RLOCK.ACQUIRE", "SESSION", "s"]);
        assert!(is_queued(&Value::SimpleString("QUEUED".into())));
        assert!(!is_queued(&Value::Int(1)) && !is_queued(&Value::Nil));
    }

    #[test]
    fn outcomes_are_read_in_order() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(1),
                bulk("timeout"),
                Value::Int(3),
                Value::Nil,
                Value::Nil,
            ]),
            Value::Array(vec![
                Value::Int(2),
                bulk("granted"),
                Value::Int(2),
                bulk("k"),
                Value::Int(1),
            ]),
            Value::Array(vec![
                Value::Int(3),
                bulk("lost"),
                Value::Nil,
                bulk("k"),
                bulk("uuid:7"),
                bulk("lock"),
            ]),
            Value::Array(vec![
                Value::Int(4),
                bulk("error"),
                Value::Int(5),
                Value::Nil,
                bulk("TRYAGAIN the slot moved"),
            ]),
        ]);
        let o = outcomes(reply).unwrap();
        assert_eq!(o.len(), 4);
        assert_eq!(
            (o[0].seq, o[0].request, &o[0].kind),
            (1, Some(3), &Kind::Timeout)
        );
        assert_eq!(o[1].kind, Kind::Granted(Value::Int(1)));
        assert_eq!(o[1].key.as_deref(), Some("k"));
        assert_eq!(
            (o[2].request, &o[2].kind),
            (None, &Kind::Lost("uuid:7".into()))
        );
        assert_eq!(
            (o[1].object.as_deref(), o[2].object.as_deref()),
            (None, Some("lock"))
        );
        match &o[3].kind {
            Kind::Error(e) => assert_eq!(e.code(), Some("TRYAGAIN")),
            other => panic!("{other:?}"),
        }
        assert!(outcomes(Value::Array(vec![])).unwrap().is_empty());
        assert!(outcomes(Value::Int(3)).is_err());
        assert!(outcomes(Value::Array(vec![Value::Array(vec![Value::Int(1)])])).is_err());
    }

    #[test]
    fn the_object_of_a_command() {
        let mut c = redis::cmd("RLOCK.ACQUIRE");
        c.arg("k");
        assert_eq!(object_of(&c), Some("lock"));
        assert_eq!(object_of(&redis::cmd("rrwlock.acquire")), Some("rwlock"));
        assert_eq!(object_of(&redis::cmd("RSEM.ACQUIRE")), Some("semaphore"));
        assert_eq!(object_of(&redis::cmd("RLATCH.AWAIT")), Some("latch"));
        assert_eq!(object_of(&redis::cmd("RMLOCK.ACQUIRE")), Some("multilock"));
        assert_eq!(object_of(&redis::cmd("GET")), None);
    }

    #[test]
    fn open_replies_in_both_protocols() {
        let resp2 = Value::Array(vec![
            bulk("resumed"),
            Value::Int(1),
            bulk("acked"),
            Value::Int(4),
        ]);
        assert!(resumed(resp2).unwrap());
        let resp3 = Value::Map(vec![(bulk("resumed"), Value::Int(0))]);
        assert!(!resumed(resp3).unwrap());
        assert!(resumed(Value::Int(1)).is_err());
    }

    #[test]
    fn the_server_bound_on_grace_is_read_from_its_refusal() {
        let e = error_of("ERR grace_ms 90000 is above rlock.session-max-grace-ms (60000)");
        assert_eq!(max_grace(&e), Some(60_000));
        assert_eq!(max_grace(&error_of("ERR something else (5)")), None);
        assert_eq!(
            run_id("# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n").as_deref(),
            Some("abc123")
        );
    }
}

//! What an operator on call asks the server (issue 25): how long waits and holds take (the
//! percentiles `INFO rlock` prints per kind), how grants happen and waits end (counters), and
//! `RLOCK.TOP`: the keys most waited on or handed off recently, and the oldest live holds. Each
//! is checked against a scripted workload whose answer is known.

use redis::Value;
use rlock_tests::*;
use std::time::Duration;

/// `INFO rlock`'s `<what>_percentiles_usec_<kind>` (p50, p99, p99.9), in microseconds; `None`
/// while nothing was timed (the line is absent then, as Redis' `latencystats` omits commands
/// never called).
fn percentiles(c: &mut redis::Connection, what: &str, kind: &str) -> Option<[f64; 3]> {
    let line = info_field(c, "rlock", &format!("rlock_{what}_percentiles_usec_{kind}"))?;
    let values: Vec<f64> = line
        .split(',')
        .zip(["p50=", "p99=", "p99.9="])
        .map(|(part, name)| {
            part.strip_prefix(name)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what} {kind}: {line}"))
        })
        .collect();
    Some([values[0], values[1], values[2]])
}

/// `value` (µs, as a percentile reads: the highest value of its bucket, at most 1/32 above the
/// true one) is a time of at least `ms` and at most `ms` plus `slack_ms` (scaled).
#[track_caller]
fn about_ms(what: &str, value: f64, ms: f64, slack_ms: i64) {
    let lo = ms * 1000.0;
    let hi = (ms * 1000.0) * (1.0 + 1.0 / 32.0) + margin_ms(slack_ms) as f64 * 1000.0;
    assert!(
        lo <= value && value <= hi,
        "{what} = {value} µs, expected within [{lo}, {hi}]"
    );
}

const TOP_FIELDS: &[&str] = &["key", "db", "kind", "count", "error", "waiters"];
const HELD_FIELDS: &[&str] = &[
    "key", "db", "kind", "mode", "owner", "age_ms", "ttl_ms", "waiters",
];

/// One row of `RLOCK.TOP`, by field name.
struct Row(Vec<(String, Value)>);

impl Row {
    fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Value::Int(n) => *n,
            other => panic!("{name}: {other:?}"),
        }
    }

    fn text(&self, name: &str) -> String {
        text(self.get(name)).unwrap_or_else(|| panic!("{name}: {:?}", self.get(name)))
    }

    fn get(&self, name: &str) -> &Value {
        &self.0.iter().find(|(n, _)| n == name).expect(name).1
    }
}

/// `RLOCK.TOP args...`, each row checked to have exactly its report's fields, in order.
fn top(c: &mut redis::Connection, args: &[&str]) -> Vec<Row> {
    let mut cmd = cmd!("RLOCK.TOP");
    for a in args {
        cmd.arg(*a);
    }
    let fields = if args.iter().any(|a| a.eq_ignore_ascii_case("HELD")) {
        HELD_FIELDS
    } else {
        TOP_FIELDS
    };
    match raw(c, &cmd) {
        Value::Array(rows) => rows
            .iter()
            .map(|r| Row(info_pairs("RLOCK.TOP", r, fields)))
            .collect(),
        other => panic!("RLOCK.TOP {args:?}: {other:?}"),
    }
}

fn keys(rows: &[Row]) -> Vec<String> {
    rows.iter().map(|r| r.text("key")).collect()
}

fn acquire(c: &mut redis::Connection, key: &str, owner: &str, lease_ms: i64) {
    assert_eq!(
        int(c, &cmd!("RLOCK.ACQUIRE", key, owner, lease_ms)),
        1,
        "{key} by {owner}"
    );
}

fn release(c: &mut redis::Connection, key: &str, owner: &str) {
    assert_eq!(int(c, &cmd!("RLOCK.RELEASE", key, owner)), 0, "{key}");
}

// ---- INFO rlock: wait and hold times ------------------------------------------------------------

/// Five waits of about 100 ms, then five of about 300 ms: p50 is the slowest of the first five,
/// p99 and p99.9 the slowest of all. A grant without waiting, and a wait that timed out, are
/// not waits timed.
#[test]
fn wait_percentiles_are_those_of_the_waits_granted() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(rlock_stat(&mut c, "wait_count_lock"), 0);
    assert_eq!(
        percentiles(&mut c, "wait", "lock"),
        None,
        "nothing timed yet"
    );
    for (round, ms) in [(0, 100), (1, 300)] {
        let keys: Vec<String> = (0..5).map(|i| format!("w{round}:{i}")).collect();
        for k in &keys {
            acquire(&mut c, k, "holder", 60_000);
        }
        // The five sent back to back on connections opened beforehand, then one wait until all
        // are blocked: parked one by one, the first waited for the others to be seen blocked,
        // which on a loaded machine could add more than the slack to its wait.
        let conns: Vec<redis::Connection> = keys.iter().map(|_| s.conn()).collect();
        let waiters: Vec<Pending> = keys
            .iter()
            .zip(conns)
            .enumerate()
            .map(|(i, (k, conn))| {
                let w = format!("w{i}");
                Pending::send_on(conn, &cmd!("RLOCK.ACQUIRE", k, w, 60_000, "BLOCK", 0))
            })
            .collect();
        wait_blocked(&mut c, keys.len() as i64);
        // The waits themselves: what the histogram measures.
        std::thread::sleep(Duration::from_millis(ms));
        for k in &keys {
            release(&mut c, k, "holder");
        }
        for w in waiters {
            assert_eq!(w.reply_int(), 1);
        }
    }
    // Not waits: a grant at once, a wait that timed out.
    acquire(&mut c, "free", "o", 60_000);
    nil(
        &mut c,
        &cmd!("RLOCK.ACQUIRE", "free", "late", 1_000, "BLOCK", 20),
    );
    assert_eq!(rlock_stat(&mut c, "wait_count_lock"), 10);
    assert_eq!(rlock_stat(&mut c, "handoffs"), 10);
    let [p50, p99, p999] = percentiles(&mut c, "wait", "lock").expect("ten waits timed");
    about_ms("p50", p50, 100.0, 150);
    about_ms("p99", p99, 300.0, 150);
    assert_eq!(p999, p99, "the slowest wait, both");
    for kind in ["rwlock", "semaphore", "latch"] {
        assert_eq!(rlock_stat(&mut c, &format!("wait_count_{kind}")), 0);
        assert_eq!(percentiles(&mut c, "wait", kind), None, "{kind}");
    }
}

/// Every kind's waits are timed under its own name: a read-write lock's, a semaphore's, a
/// latch's.
#[test]
fn each_kind_has_its_wait_percentiles() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        rw_acquire(&mut c, "rw", "w", "WRITE", 60_000),
        Value::Int(1)
    );
    let reader = park_rw(&s, &mut c, "rw", "r", "READ", 60_000, 1);
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "sem", 0)), 1);
    let permit = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "sem", "BLOCK", 0));
    wait_blocked(&mut c, 2);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "latch", 1)), 1);
    let awaiter = Pending::send(&s, &cmd!("RLATCH.AWAIT", "latch", "BLOCK", 0));
    wait_blocked(&mut c, 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rw_release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    raw(&mut c, &cmd!("RSEM.RELEASE", "sem"));
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "latch")), 0);
    assert_eq!(reader.reply_int(), 1);
    assert_eq!(permit.reply_int(), 1);
    assert_eq!(awaiter.reply_int(), 1);
    for kind in ["rwlock", "semaphore", "latch"] {
        assert_eq!(
            rlock_stat(&mut c, &format!("wait_count_{kind}")),
            1,
            "{kind}"
        );
        let [p50, ..] = percentiles(&mut c, "wait", kind).expect(kind);
        about_ms(kind, p50, 50.0, 250);
    }
    assert_eq!(rlock_stat(&mut c, "wait_count_lock"), 0);
}

/// Holds of about 50 ms released by their owner, one force-released after about 250 ms and one
/// whose 250 ms lease ran out (timed when Redis expires the key); a re-entry is the same hold,
/// counted once. A read-write lock's read holds are timed under its own name.
#[test]
fn hold_percentiles_are_those_of_the_holds_that_ended() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(percentiles(&mut c, "hold", "lock"), None);
    for k in ["h:1", "h:2", "h:3", "h:forced"] {
        acquire(&mut c, k, "o", 60_000);
    }
    acquire(&mut c, "h:expires", "o", 250);
    // Re-entered, then released twice: one hold.
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "h:1", "o", 60_000)), 2);
    for r in ["r1", "r2"] {
        assert_eq!(rw_acquire(&mut c, "rw", r, "READ", 60_000), Value::Int(1));
    }
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 7);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(int(&mut c, &cmd!("RLOCK.RELEASE", "h:1", "o")), 1);
    for k in ["h:1", "h:2", "h:3"] {
        release(&mut c, k, "o");
    }
    for r in ["r1", "r2"] {
        assert_eq!(rw_release(&mut c, "rw", r, "READ"), Value::Int(0));
    }
    assert_eq!(rlock_stat(&mut c, "hold_count_lock"), 3);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "h:forced")), 1);
    // The lease's end is seen when Redis expires the key (its active expiry, no command).
    wait_until(
        margin(Duration::from_secs(3)),
        "the expired hold timed",
        || rlock_stat(&mut c, "hold_count_lock") == 5,
    );
    let [p50, p99, _] = percentiles(&mut c, "hold", "lock").unwrap();
    about_ms("p50 (rank 3 of 5)", p50, 50.0, 150);
    // The force release (~250 ms) or the expiry (250 ms, seen within Redis' active expiry).
    about_ms("p99", p99, 250.0, 400);
    assert_eq!(rlock_stat(&mut c, "hold_count_rwlock"), 2);
    let [p50, ..] = percentiles(&mut c, "hold", "rwlock").unwrap();
    about_ms("read holds", p50, 50.0, 150);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 0);
    assert_eq!(rlock_stat(&mut c, "holds_dropped"), 0);
}

/// A hold removed behind rlock's back (DEL, a Redisson script) is timed when rlock sees it go:
/// at the keyspace event, looked at once the command is over.
#[test]
fn a_hold_deleted_outside_rlock_is_timed_at_the_event() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "del", "o", 60_000);
    acquire(&mut c, "script", "o", 60_000);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(int(&mut c, &cmd!("DEL", "del")), 1);
    // Redisson's unlock, as its script does it: count down, delete at 0.
    let unlock = "if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then redis.call('del', KEYS[1]) end return 1";
    assert_eq!(int(&mut c, &cmd!("EVAL", unlock, 1, "script", "o")), 1);
    wait_until(margin(Duration::from_secs(2)), "both holds timed", || {
        rlock_stat(&mut c, "hold_count_lock") == 2
    });
    let [p50, ..] = percentiles(&mut c, "hold", "lock").unwrap();
    about_ms("p50", p50, 50.0, 150);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 0);
}

/// FLUSHALL ends every hold at once: each is timed, none is listed any more.
#[test]
fn a_flush_ends_every_hold() {
    let s = Server::start();
    let mut c = s.conn();
    for k in ["a", "b", "c"] {
        acquire(&mut c, k, "o", 60_000);
    }
    assert_eq!(rw_acquire(&mut c, "rw", "r", "READ", 60_000), Value::Int(1));
    assert_eq!(top(&mut c, &["HELD"]).len(), 4);
    raw(&mut c, &cmd!("FLUSHALL"));
    assert_eq!(rlock_stat(&mut c, "hold_count_lock"), 3);
    assert_eq!(rlock_stat(&mut c, "hold_count_rwlock"), 1);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 0);
    assert!(top(&mut c, &["HELD"]).is_empty());
}

// ---- INFO rlock: grants by path, how waits end -----------------------------------------------

/// Every grant is counted by its path (at once, by hand-off, by hand-off after a lease ran out)
/// and every wait by how it ended; the counters add up.
#[test]
fn grants_by_path_and_wait_endings_add_up() {
    let s = Server::start();
    let mut c = s.conn();
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
    let stat = |c: &mut redis::Connection, f: &str| rlock_stat(c, f);
    // At once.
    acquire(&mut c, "k", "holder", 60_000);
    assert_eq!(stat(&mut c, "grants_immediate"), 1);
    // By hand-off.
    let w = park(&s, &mut c, "k", "w1", 60_000, &[], 1);
    release(&mut c, "k", "holder");
    assert_eq!(w.reply_int(), 1);
    assert_eq!(stat(&mut c, "handoffs"), 1);
    // By hand-off after the holder's lease ran out (shortened once the waiter is parked: a
    // 100 ms lease could end before a loaded machine showed the waiter blocked).
    let w = park(&s, &mut c, "k", "w2", 60_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.RENEW", "k", "w1", 100)), 1);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(stat(&mut c, "grants_after_expiry"), 1);
    assert_eq!(stat(&mut c, "handoffs"), 2);
    // Timed out.
    nil(&mut c, &cmd!("RLOCK.ACQUIRE", "k", "t", 1_000, "BLOCK", 20));
    assert_eq!(stat(&mut c, "waits_timed_out"), 1);
    // Cancelled: CLIENT UNBLOCK (nil, as BLPOP), and a session request withdrawn.
    let w = park(&s, &mut c, "k", "u", 60_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id)), 1);
    assert_eq!(w.reply(), Value::Nil);
    raw(&mut c, &cmd!("RSESSION.OPEN", "app", 10_000));
    let queued = cmd!(
        "RLOCK.ACQUIRE",
        "k",
        "q",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        1,
        0
    );
    assert_eq!(raw(&mut c, &queued), Value::SimpleString("QUEUED".into()));
    assert_eq!(int(&mut c, &cmd!("RSESSION.CANCEL", "app", 1)), 1);
    assert_eq!(stat(&mut c, "waits_cancelled"), 2);
    assert_eq!(
        stat(&mut c, "waits_timed_out"),
        1,
        "a cancel is not a timeout"
    );
    // Gone: a blocked waiter's connection closed, a session ended with its request queued.
    let w = park(&s, &mut c, "k", "d", 60_000, &[], 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", w.id)), 1);
    wait_until(margin(Duration::from_secs(2)), "the waiter gone", || {
        stat(&mut c, "waiters") == 0
    });
    let queued = cmd!(
        "RLOCK.ACQUIRE",
        "k",
        "q2",
        60_000,
        "SESSION",
        "app",
        "QUEUE",
        2,
        0
    );
    assert_eq!(raw(&mut c, &queued), Value::SimpleString("QUEUED".into()));
    assert_eq!(int(&mut c, &cmd!("RSESSION.CLOSE", "app")), 1);
    assert_eq!(stat(&mut c, "waiters_disconnected"), 2);
    // Failed: the key became another type while it waited.
    let w = park(&s, &mut c, "k", "f", 60_000, &[], 1);
    assert_eq!(string(&mut c, &cmd!("SET", "k", "x")), "OK");
    let reply = w.reply();
    assert!(
        error_text(&reply).is_some_and(|e| e.starts_with("WRONGTYPE")),
        "{reply:?}"
    );
    assert_eq!(stat(&mut c, "waits_failed"), 1);
    // One waits on, parked.
    int(&mut c, &cmd!("DEL", "k"));
    acquire(&mut c, "k", "holder", 60_000);
    let _still = park(&s, &mut c, "k", "s", 60_000, &[], 1);
    let info: String = redis::cmd("INFO").arg("rlock").query(&mut c).unwrap();
    let n = |f: &str| rlock_stat_in(&info, f);
    assert_eq!(
        n("acquired"),
        n("grants_immediate") + n("handoffs"),
        "acquired = at once + by hand-off"
    );
    assert_eq!(
        n("waits_started"),
        n("handoffs")
            + n("waits_timed_out")
            + n("waits_cancelled")
            + n("waiters_disconnected")
            + n("waits_failed")
            + n("waiters"),
        "every wait ended one way, or waits on:\n{info}"
    );
    assert_eq!(n("waits_started"), 9);
}

// ---- RLOCK.TOP WAITS / HANDOFFS ---------------------------------------------------------------

/// Key A gets 50 waits, B 20, C 5, among 600 keys that get one each (more keys than the sketch
/// keeps, so it must replace some): A, B and C come first, in order, each counted from above
/// within its error bound. A waiter parked on A now shows in its row.
#[test]
fn top_waits_ranks_the_hot_keys_above_the_noise() {
    let s = Server::start();
    let mut c = s.conn();
    let mut waits: Vec<String> = Vec::new();
    for (k, n) in [("A", 50), ("B", 20), ("C", 5)] {
        waits.extend(std::iter::repeat_n(k.to_string(), n));
    }
    waits.extend((0..600).map(|i| format!("noise:{i}")));
    // A fixed shuffle: hot and cold waits interleaved.
    let mut rng = Rng::new(25);
    for i in (1..waits.len()).rev() {
        waits.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut pipe = redis::pipe();
    let holds = ["A", "B", "C"].map(String::from);
    for k in holds
        .into_iter()
        .chain((0..600).map(|i| format!("noise:{i}")))
    {
        pipe.cmd("RLOCK.ACQUIRE").arg(k).arg("holder").arg(600_000);
    }
    let _: Vec<Value> = pipe.query(&mut c).unwrap();
    // Waits through a session: queued at once, each ending at its 1 ms deadline.
    raw(&mut c, &cmd!("RSESSION.OPEN", "load", 60_000));
    let mut pipe = redis::pipe();
    for (i, k) in waits.iter().enumerate() {
        pipe.cmd("RLOCK.ACQUIRE")
            .arg(k)
            .arg("waiter")
            .arg(60_000)
            .arg("SESSION")
            .arg("load")
            .arg("QUEUE")
            .arg(i + 1)
            .arg(1);
    }
    let _: Vec<Value> = pipe.query(&mut c).unwrap();
    assert_eq!(rlock_stat(&mut c, "waits_started"), 675);
    // Every 1 ms wait ended before the waiter parks (on a busy machine some were still queued
    // on A when TOP looked, and A showed 2 waiters).
    wait_until(
        Duration::from_secs(10),
        "the session's waits timed out",
        || rlock_stat(&mut c, "waiters") == 0 && rlock_stat(&mut c, "session_requests") == 0,
    );
    let parked = park(&s, &mut c, "A", "now", 60_000, &[], 1);
    let rows = top(&mut c, &["WAITS", "COUNT", "3"]);
    assert_eq!(keys(&rows), ["A", "B", "C"]);
    for (row, truth) in rows.iter().zip([51, 20, 5]) {
        let (count, error) = (row.int("count"), row.int("error"));
        assert!(
            count >= truth && count - error <= truth,
            "{}: count {count} error {error}, truly {truth}",
            row.text("key")
        );
        assert_eq!(row.text("kind"), "lock");
        assert_eq!(row.int("db"), 0);
    }
    assert_eq!(rows[0].int("waiters"), 1, "the waiter parked on A");
    assert_eq!(rows[1].int("waiters"), 0);
    // WAITS and COUNT 10 by default. The rest are cold keys: each counted from at most the
    // smallest kept count (at most 676 waits / 256 keys kept) plus its one wait.
    let rows = top(&mut c, &[]);
    assert_eq!(rows.len(), 10);
    assert_eq!(keys(&rows)[..3], ["A", "B", "C"]);
    assert!(rows[3..].iter().all(|r| r.int("count") <= 3), "cold keys");
    drop(parked);
}

/// HANDOFFS ranks keys by grants to queued waiters, for every kind of object.
#[test]
fn top_handoffs_ranks_the_keys_handed_on_most() {
    let s = Server::start();
    let mut c = s.conn();
    // Three hand-offs on X: each waiter, once granted, releases to the next.
    acquire(&mut c, "X", "h", 60_000);
    let waiters: Vec<Pending> = (0..3)
        .map(|i| park(&s, &mut c, "X", &format!("x{i}"), 60_000, &[], i + 1))
        .collect();
    let mut owner = "h".to_string();
    for (i, w) in waiters.into_iter().enumerate() {
        release(&mut c, "X", &owner);
        assert_eq!(w.reply_int(), 1);
        owner = format!("x{i}");
    }
    // Two on a read-write lock, one on a semaphore.
    assert_eq!(
        rw_acquire(&mut c, "RW", "w", "WRITE", 60_000),
        Value::Int(1)
    );
    let readers: Vec<Pending> = (0..2)
        .map(|i| park_rw(&s, &mut c, "RW", &format!("r{i}"), "READ", 60_000, i + 1))
        .collect();
    assert_eq!(rw_release(&mut c, "RW", "w", "WRITE"), Value::Int(0));
    for r in readers {
        assert_eq!(r.reply_int(), 1);
    }
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "S", 0)), 1);
    let p = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "S", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    raw(&mut c, &cmd!("RSEM.RELEASE", "S"));
    assert_eq!(p.reply_int(), 1);
    let rows = top(&mut c, &["HANDOFFS"]);
    let got: Vec<(String, String, i64, i64)> = rows
        .iter()
        .map(|r| {
            (
                r.text("key"),
                r.text("kind"),
                r.int("count"),
                r.int("error"),
            )
        })
        .collect();
    let want = [("X", "lock", 3), ("RW", "rwlock", 2), ("S", "semaphore", 1)]
        .map(|(k, kind, n)| (k.to_string(), kind.to_string(), n, 0));
    assert_eq!(got, want);
}

// ---- RLOCK.TOP HELD ---------------------------------------------------------------------------

/// The live holds, oldest first, with owner, age, lease and waiters behind them; a re-entry is
/// the hold it re-enters; a hold in another database is listed with its number and reading it
/// leaves the caller on its own. Holds that ended (released, force-released, expired, deleted)
/// are not listed, nor are holds taken by Redisson's own scripts (rlock never granted them).
#[test]
fn top_held_lists_the_live_holds_oldest_first() {
    let s = Server::start();
    let mut c = s.conn();
    acquire(&mut c, "old", "o1", 60_000);
    for r in ["r1", "r2"] {
        assert_eq!(rw_acquire(&mut c, "rw", r, "READ", 60_000), Value::Int(1));
    }
    for k in ["gone:rel", "gone:del", "gone:force"] {
        acquire(&mut c, k, "o", 60_000);
    }
    acquire(&mut c, "gone:exp", "o", 100);
    release(&mut c, "gone:rel", "o");
    assert_eq!(int(&mut c, &cmd!("DEL", "gone:del")), 1);
    assert_eq!(int(&mut c, &cmd!("RLOCK.FORCERELEASE", "gone:force")), 1);
    // Redisson's own acquire script: a hold rlock never granted.
    let lock = "redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return 1";
    assert_eq!(
        int(&mut c, &cmd!("EVAL", lock, 1, "script", 60_000, "o")),
        1
    );
    assert_eq!(string(&mut c, &cmd!("SELECT", 1)), "OK");
    acquire(&mut c, "other", "o5", 60_000);
    assert_eq!(string(&mut c, &cmd!("SELECT", 0)), "OK");
    // Ages apart: what the report orders by.
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(int(&mut c, &cmd!("RLOCK.ACQUIRE", "old", "o1", 60_000)), 2);
    acquire(&mut c, "young", "o3", 60_000);
    let _waiter = park(&s, &mut c, "old", "w", 60_000, &[], 1);
    wait_until(margin(Duration::from_secs(2)), "gone:exp expired", || {
        !exists(&mut c, "gone:exp")
    });
    let rows = top(&mut c, &["HELD"]);
    let got: Vec<(String, i64, String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.text("key"),
                r.int("db"),
                r.text("kind"),
                r.text("mode"),
                r.text("owner"),
            )
        })
        .collect();
    let want = [
        ("old", 0, "lock", "exclusive", "o1"),
        ("rw", 0, "rwlock", "read", "r1"),
        ("rw", 0, "rwlock", "read", "r2"),
        ("other", 1, "lock", "exclusive", "o5"),
        ("young", 0, "lock", "exclusive", "o3"),
    ]
    .map(|(k, db, kind, mode, o)| (k.into(), db, kind.into(), mode.into(), o.into()));
    assert_eq!(got, want);
    let old = &rows[0];
    assert!(old.int("age_ms") >= 150, "age {}", old.int("age_ms"));
    assert!(rows[4].int("age_ms") < old.int("age_ms"));
    assert_between("old's ttl_ms", old.int("ttl_ms"), 50_000, 60_000);
    assert_eq!(old.int("waiters"), 1);
    assert_eq!(rows[4].int("waiters"), 0);
    // The caller is still on its own database.
    let client = string(&mut c, &cmd!("CLIENT", "INFO"));
    assert!(client.contains(" db=0 "), "{client}");
    // COUNT takes the oldest.
    let rows = top(&mut c, &["HELD", "COUNT", "2"]);
    assert_eq!(keys(&rows), ["old", "rw"]);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 5);
}

/// A hold that ended where rlock did not see it (a read hold's own lease ran out while the lock
/// lived on) is found when the report looks at its keys, and dropped there.
#[test]
fn top_held_drops_a_hold_found_ended() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        rw_acquire(&mut c, "rw", "short", "READ", 100),
        Value::Int(1)
    );
    assert_eq!(
        rw_acquire(&mut c, "rw", "long", "READ", 60_000),
        Value::Int(1)
    );
    let lease = "{rw}:short:rwlock_timeout:1";
    wait_until(
        margin(Duration::from_secs(2)),
        "the short read hold ended",
        || !exists(&mut c, lease),
    );
    let rows = top(&mut c, &["HELD"]);
    assert_eq!(keys(&rows), ["rw"]);
    assert_eq!(rows[0].text("owner"), "long");
    assert_eq!(rlock_stat(&mut c, "holds_dropped"), 1);
    assert_eq!(rlock_stat(&mut c, "holds_tracked"), 1);
}

/// The table is capped (`rlock.top-max-holds`): a full table refuses new holds and keeps the
/// oldest; 0 tracks none.
#[test]
fn a_full_table_keeps_the_oldest_holds() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        string(&mut c, &cmd!("CONFIG", "SET", "rlock.top-max-holds", 2)),
        "OK"
    );
    for k in ["first", "second", "third"] {
        acquire(&mut c, k, "o", 60_000);
    }
    assert_eq!(keys(&top(&mut c, &["HELD"])), ["first", "second"]);
    assert_eq!(rlock_stat(&mut c, "holds_untracked"), 1);
    // A release of the untracked hold times nothing.
    release(&mut c, "third", "o");
    assert_eq!(rlock_stat(&mut c, "hold_count_lock"), 0);
    assert_eq!(
        string(&mut c, &cmd!("CONFIG", "SET", "rlock.top-max-holds", 0)),
        "OK"
    );
    acquire(&mut c, "fourth", "o", 60_000);
    assert_eq!(rlock_stat(&mut c, "holds_untracked"), 2);
    assert_eq!(keys(&top(&mut c, &["HELD"])), ["first", "second"]);
}

// ---- RLOCK.TOP: arguments, metadata, ACL ------------------------------------------------------

#[test]
fn top_refuses_bad_arguments_with_a_reason() {
    let s = Server::start();
    let mut c = s.conn();
    for (args, want) in [
        (&["COUNT", "0"][..], "ERR count must be at least 1"),
        (&["COUNT", "1001"], "ERR count must be at most 1000"),
        (
            &["COUNT", "ten"],
            "ERR count is not an integer or out of range",
        ),
        (&["COUNT"], "ERR syntax error, COUNT needs a number"),
        (
            &["HELD", "WAITS"],
            "ERR syntax error, WAITS, HELD and HANDOFFS exclude one another",
        ),
        (&["WAITS", "WAITS"], "ERR syntax error, WAITS given twice"),
        (&["SLOWEST"], "ERR syntax error, unknown option 'SLOWEST'"),
        (
            &["HELD", "COUNT", "1", "MORE"],
            "ERR wrong number of arguments for 'rlock.top' command",
        ),
    ] {
        let mut cmd = cmd!("RLOCK.TOP");
        for a in args {
            cmd.arg(*a);
        }
        assert_eq!(err(&mut c, &cmd), want, "{args:?}");
    }
    // Any case, any order.
    assert!(top(&mut c, &["count", "1000", "held"]).is_empty());
}

#[test]
fn top_is_a_read_only_command_without_keys_with_docs() {
    let s = Server::start();
    let mut c = s.conn();
    let entry = match raw(&mut c, &cmd!("COMMAND", "INFO", "rlock.top")) {
        Value::Array(v) => match &v[0] {
            Value::Array(e) => e.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(entry[1], Value::Int(-1), "arity");
    let flags = strings(&entry[2]);
    assert!(flags.contains(&"readonly".to_string()), "{flags:?}");
    assert!(!flags.contains(&"write".to_string()), "{flags:?}");
    assert_eq!(
        entry[3..6],
        [Value::Int(0), Value::Int(0), Value::Int(0)],
        "no keys"
    );
    let summary = command_summary(&mut c, "rlock.top");
    assert!(
        summary.contains("HELD") && summary.contains("node"),
        "{summary}"
    );
    let docs = format!("{:?}", command_docs(&mut c, "rlock.top"));
    for word in ["WAITS", "HELD", "HANDOFFS", "COUNT"] {
        assert!(docs.contains(word), "COMMAND DOCS names {word}: {docs}");
    }
}

/// `RLOCK.TOP` is `@read`: a user with only `+@read` runs it (Redis 7.0 has no categories for
/// module commands: it is granted by name there). It lists only keys the user may read, as
/// `RLOCK.INFO` shows a key only to those who may read it.
#[test]
fn top_is_read_and_shows_only_keys_the_caller_may_read() {
    let s = Server::start();
    let mut admin = s.conn();
    let categories = ServerKind::of(&mut admin).acl_categories();
    let grant = if categories { "+@read" } else { "+rlock.top" };
    let mut reader = acl_user(&s, &mut admin, "reader", &["~app:*", grant]);
    acquire(&mut admin, "app:1", "o", 60_000);
    acquire(&mut admin, "secret:1", "o", 60_000);
    for k in ["app:1", "secret:1"] {
        nil(
            &mut admin,
            &cmd!("RLOCK.ACQUIRE", k, "w", 1_000, "BLOCK", 5),
        );
    }
    assert_eq!(keys(&top(&mut admin, &["HELD"])), ["app:1", "secret:1"]);
    assert_eq!(keys(&top(&mut reader, &["HELD"])), ["app:1"]);
    assert_eq!(keys(&top(&mut reader, &["WAITS"])), ["app:1"]);
    assert_eq!(keys(&top(&mut admin, &["WAITS"])).len(), 2);
    if categories {
        let mut writer = acl_user(&s, &mut admin, "writer", &["~*", "+@write"]);
        assert!(err(&mut writer, &cmd!("RLOCK.TOP")).starts_with("NOPERM"));
    }
}

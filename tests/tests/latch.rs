//! `RLATCH.*` against a real server, line by line of the contract's latch section: Redisson's
//! layout and channel, every waiter released at once by whatever opens the latch (COUNTDOWN,
//! Redisson's countDown script, DEL/UNLINK, expiry, FLUSH*), and Redisson's scripts both ways.

use rlock_tests::redisson::latch::{self as rl, channel};
use rlock_tests::*;
use std::time::{Duration, Instant};

/// How soon an event (a keyspace notification, a flush) reaches the waiters.
const PROMPT: Duration = Duration::from_millis(100);

fn park_all(s: &Server, admin: &mut redis::Connection, key: &str, n: usize) -> Vec<Pending> {
    let before = info_int(admin, "clients", "blocked_clients");
    let ws: Vec<Pending> = (0..n)
        .map(|_| Pending::send(s, &cmd!("RLATCH.AWAIT", key, "BLOCK", 0)))
        .collect();
    wait_blocked(admin, before + n as i64);
    ws
}

/// Every waiter gets 1 within `PROMPT` of `opened`.
#[track_caller]
fn all_pass(ws: Vec<Pending>, opened: Instant, what: &str) {
    for w in ws {
        assert_eq!(w.reply_within(PROMPT * 5), Value::Int(1), "{what}");
    }
    assert!(
        opened.elapsed() <= PROMPT * 5,
        "{what}: the last waiter passed {:?} after the latch opened",
        opened.elapsed()
    );
}

fn latch_stat(c: &mut redis::Connection, field: &str) -> i64 {
    rlock_stat(c, &format!("latch_{field}"))
}

#[test]
fn counts_down_to_open_as_redissons_latch_and_publishes_on_its_channel() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_countdownlatch__channel__*");
    for name in ["l", "{app}:l"] {
        let ch = channel(name);
        assert_eq!(ch, format!("redisson_countdownlatch__channel__{{{name}}}"));
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNT", name)), 0);
        // Counting down an absent latch changes nothing and publishes nothing.
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", name)), 0);
        assert!(!exists(&mut c, name));
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", name, 2)), 1);
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", name, 5)), 0);
        assert_eq!(string(&mut c, &cmd!("GET", name)), "2");
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNT", name)), 2);
        assert_eq!(sub.drain(&mut c), [(ch.clone(), "1".to_string())]);
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", name)), 1);
        assert!(sub.drain(&mut c).is_empty());
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", name)), 0);
        assert!(!exists(&mut c, name), "zero deletes the key");
        assert_eq!(sub.drain(&mut c), [(ch.clone(), "0".to_string())]);
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", name)), 0);
        assert!(sub.drain(&mut c).is_empty(), "opened once, published once");
        assert_eq!(int(&mut c, &cmd!("RLATCH.AWAIT", name)), 1);
        // Set again after opening (Redisson's trySetCount works on an open latch).
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", name, 1)), 1);
        nil(&mut c, &cmd!("RLATCH.AWAIT", name));
        assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", name)), 0);
        sub.drain(&mut c);
    }
    // A count at 0 or below (written by hand) is open; counting down deletes it silently.
    assert_eq!(string(&mut c, &cmd!("SET", "neg", -3)), "OK");
    assert_eq!(int(&mut c, &cmd!("RLATCH.AWAIT", "neg")), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "neg")), 0);
    assert!(!exists(&mut c, "neg"));
    assert!(sub.drain(&mut c).is_empty());
}

#[test]
fn a_countdown_to_zero_releases_every_waiter_at_once() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 3)), 1);
    let ws = park_all(&s, &mut c, "l", 25);
    assert_eq!(latch_stat(&mut c, "waiters"), 25);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 2);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 1);
    assert_eq!(
        info_int(&mut c, "clients", "blocked_clients"),
        25,
        "nobody passes a closed latch"
    );
    let opened = Instant::now();
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 0);
    // Released in the countdown's own step: nobody is blocked once its reply is in.
    assert_eq!(info_int(&mut c, "clients", "blocked_clients"), 0);
    all_pass(ws, opened, "COUNTDOWN");
    assert_eq!(latch_stat(&mut c, "waiters"), 0);
}

#[test]
fn whatever_opens_the_latch_releases_every_waiter() {
    type Opener = fn(&Server, &mut redis::Connection);
    let openers: [(&str, Opener); 10] = [
        ("Redisson's countDown script", |_, c| {
            rl::count_down(c, "l");
        }),
        ("Redisson's delete script", |_, c| {
            assert_eq!(rl::delete(c, "l"), 1);
        }),
        ("DEL", |_, c| assert_eq!(int(c, &cmd!("DEL", "l")), 1)),
        ("UNLINK", |_, c| assert_eq!(int(c, &cmd!("UNLINK", "l")), 1)),
        ("expiry", |_, c| {
            assert_eq!(int(c, &cmd!("PEXPIRE", "l", 30)), 1)
        }),
        ("FLUSHDB", |_, c| {
            assert_eq!(string(c, &cmd!("FLUSHDB")), "OK")
        }),
        ("FLUSHALL", |_, c| {
            assert_eq!(string(c, &cmd!("FLUSHALL")), "OK")
        }),
        ("SET to 0", |_, c| {
            assert_eq!(string(c, &cmd!("SET", "l", 0)), "OK")
        }),
        // The count is a semaphore's permits too: what leaves it at 0 opens the latch.
        ("RSEM.ADDPERMITS -1", |_, c| {
            assert_eq!(int(c, &cmd!("RSEM.ADDPERMITS", "l", -1)), 0)
        }),
        // Issue 22 (6): the module's own write raises no event; before, a drain to 0 left
        // the awaiters blocked.
        ("RSEM.DRAIN", |_, c| {
            assert_eq!(int(c, &cmd!("RSEM.DRAIN", "l")), 1)
        }),
    ];
    for (what, open) in openers {
        let s = Server::start();
        let mut c = s.conn();
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 1)), 1);
        let ws = park_all(&s, &mut c, "l", 5);
        let opened = Instant::now();
        open(&s, &mut c);
        all_pass(ws, opened, what);
    }
}

/// Issue 22 (6): one kind per key's queue. A closed latch's count is also a semaphore's
/// permits. Before issue 22 a semaphore acquire there queued behind the awaiters and was
/// granted by the latch's rules; issue 22 refused it with WRONGTYPE while awaiters waited. But
/// `RLATCH.AWAIT` needs read access only, so a user who may only read a semaphore's key could
/// then keep every acquire of its writers refused (an ACL probe found it). Awaiters take
/// nothing, so they hold nobody up: a semaphore acquire is decided as if they were not there,
/// and one that must wait ends their waits with WRONGTYPE and queues. The queue still holds
/// one kind at a time, and a latch request behind semaphore waiters is still refused.
#[test]
fn latch_awaiters_hold_no_semaphore_acquire_up_and_a_queue_keeps_one_kind() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 3)), 1);
    let ws = park_all(&s, &mut c, "l", 2);
    // Permits there: granted at once, the awaiters untouched (the count is now 2).
    assert_eq!(int(&mut c, &cmd!("RSEM.ACQUIRE", "l")), 1);
    assert_eq!(string(&mut c, &cmd!("GET", "l")), "2");
    assert_eq!(latch_stat(&mut c, "waiters"), 2);
    // Three permits must wait: the awaiters end, the acquire queues alone.
    let sem = Pending::send(&s, &cmd!("RSEM.ACQUIRE", "l", "PERMITS", 3, "BLOCK", 0));
    for w in ws {
        let e = w.reply_within(PROMPT * 5);
        let text = error_text(&e).unwrap_or_else(|| panic!("an awaiter: {e:?}"));
        assert!(
            text.starts_with("WRONGTYPE Operation against a key holding the wrong kind of value: semaphore requests wait on this key"),
            "{text}"
        );
    }
    wait_blocked(&mut c, 1);
    assert_eq!(latch_stat(&mut c, "waiters"), 0);
    assert_eq!(rlock_stat(&mut c, "waiters"), 1);
    // Now the queue is the semaphore's: an await there is refused at once.
    let e = Pending::send(&s, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0)).reply_within(PROMPT);
    let text = error_text(&e).unwrap_or_else(|| panic!("an await: {e:?}"));
    assert!(
        text.contains("semaphore requests wait on this key"),
        "{text}"
    );
    // A permit more and the semaphore waiter takes all three.
    assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", "l")), 0);
    assert_eq!(sem.reply_within(PROMPT * 5), Value::Int(1));
    assert_eq!(string(&mut c, &cmd!("GET", "l")), "0");
    assert_eq!(rlock_stat(&mut c, "waiters"), 0);
}

#[test]
fn redissons_scripts_and_rlatch_share_the_latch_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = Subscriber::psubscribe(&s, "redisson_countdownlatch__channel__*");
    // Set by Redisson, counted down by rlock.
    assert_eq!(rl::try_set_count(&mut c, "l", 2), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 9)), 0);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNT", "l")), 2);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 1);
    assert_eq!(rl::count(&mut c, "l"), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), 0);
    assert_eq!(rl::count(&mut c, "l"), 0);
    assert_eq!(
        sub.drain(&mut c),
        [
            (channel("l"), "1".to_string()),
            (channel("l"), "0".to_string())
        ]
    );
    // Set by rlock, counted down by Redisson (which publishes 0 the same way).
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 2)), 1);
    assert_eq!(rl::try_set_count(&mut c, "l", 5), 0);
    rl::count_down(&mut c, "l");
    assert_eq!(int(&mut c, &cmd!("RLATCH.COUNT", "l")), 1);
    let w = Pending::send(&s, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    rl::count_down(&mut c, "l");
    assert_eq!(w.reply_within(PROMPT), Value::Int(1));
    assert!(!exists(&mut c, "l"));
    assert_eq!(
        sub.drain(&mut c),
        [
            (channel("l"), "1".to_string()),
            (channel("l"), "0".to_string())
        ]
    );
}

#[test]
fn await_without_block_and_deadlines_and_degrading() {
    let s = Server::start();
    let mut c = s.conn();
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
    assert_eq!(int(&mut c, &cmd!("RLATCH.AWAIT", "absent")), 1);
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 1)), 1);
    nil(&mut c, &cmd!("RLATCH.AWAIT", "l"));
    let started = Instant::now();
    nil(&mut c, &cmd!("RLATCH.AWAIT", "l", "block", 50));
    assert!(started.elapsed() >= Duration::from_millis(45));
    assert_eq!(latch_stat(&mut c, "waits_timed_out"), 1);
    // CLIENT UNBLOCK ends a wait with nil; a closed connection leaves the queue.
    let w = Pending::send(&s, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "UNBLOCK", w.id)), 1);
    assert_eq!(w.reply(), Value::Nil);
    let gone = Pending::send(&s, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("CLIENT", "KILL", "ID", gone.id)), 1);
    assert_eq!(latch_stat(&mut c, "waiters"), 0);
    // Inside MULTI and Lua, BLOCK is one attempt.
    assert_eq!(string(&mut c, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut c, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0)),
        "QUEUED"
    );
    assert_eq!(string(&mut c, &cmd!("RLATCH.COUNTDOWN", "l")), "QUEUED");
    assert_eq!(
        string(&mut c, &cmd!("RLATCH.AWAIT", "l", "BLOCK", 0)),
        "QUEUED"
    );
    assert_eq!(
        raw(&mut c, &cmd!("EXEC")),
        Value::Array(vec![Value::Nil, Value::Int(0), Value::Int(1)])
    );
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "l", 1)), 1);
    let script = "return redis.call('RLATCH.AWAIT', KEYS[1], 'BLOCK', 0)";
    assert_eq!(raw(&mut c, &cmd!("EVAL", script, 1, "l")), Value::Nil);
    // Counters: passes (the absent latch, the one after the countdown), waits, openings.
    assert_eq!(latch_stat(&mut c, "acquired"), 2);
    assert_eq!(latch_stat(&mut c, "waits_started"), 3);
    assert_eq!(latch_stat(&mut c, "releases"), 1);
}

#[test]
fn bad_arguments_and_wrong_types() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: Vec<(redis::Cmd, &str)> = vec![
        (
            cmd!("RLATCH.TRYSETCOUNT", "l", 0),
            "ERR count must be at least 1",
        ),
        (
            cmd!("RLATCH.TRYSETCOUNT", "l", "x"),
            "ERR count is not an integer or out of range",
        ),
        (
            cmd!("RLATCH.TRYSETCOUNT", "l"),
            "ERR wrong number of arguments for 'rlatch.trysetcount' command",
        ),
        (
            cmd!("RLATCH.AWAIT", "l", "BLOCK", -5),
            "ERR timeout is negative",
        ),
        (
            cmd!("RLATCH.AWAIT", "l", "BLOCK"),
            "ERR syntax error, BLOCK needs a timeout in milliseconds",
        ),
        (
            cmd!("RLATCH.AWAIT", "l", "WAIT", 5),
            "ERR syntax error, unknown option 'WAIT'",
        ),
        (
            cmd!("RLATCH.COUNTDOWN", "l", 1),
            "ERR wrong number of arguments for 'rlatch.countdown' command",
        ),
        (
            cmd!("RLATCH.COUNT"),
            "ERR wrong number of arguments for 'rlatch.count' command",
        ),
    ];
    for (command, want) in cases {
        assert_eq!(err(&mut c, &command), want, "{}", show(&command));
    }
    assert_eq!(dbsize(&mut c), 0);

    assert_eq!(int(&mut c, &cmd!("HSET", "h", "f", 1)), 1);
    assert_eq!(string(&mut c, &cmd!("SET", "str", "abc")), "OK");
    for key in ["h", "str"] {
        for command in [
            cmd!("RLATCH.TRYSETCOUNT", key, 1),
            cmd!("RLATCH.COUNTDOWN", key),
            cmd!("RLATCH.AWAIT", key),
            cmd!("RLATCH.AWAIT", key, "BLOCK", 0),
            cmd!("RLATCH.COUNT", key),
        ] {
            let e = err(&mut c, &command);
            assert!(e.starts_with("WRONGTYPE"), "{}: {e}", show(&command));
        }
    }
    assert_eq!(string(&mut c, &cmd!("GET", "str")), "abc");
    // A waiter whose latch turns into another type ends with WRONGTYPE.
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "q", 1)), 1);
    let w = Pending::send(&s, &cmd!("RLATCH.AWAIT", "q", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(int(&mut c, &cmd!("DEL", "q")), 1);
    assert_eq!(w.reply_within(PROMPT), Value::Int(1), "DEL opened it");
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "q", 1)), 1);
    let w = Pending::send(&s, &cmd!("RLATCH.AWAIT", "q", "BLOCK", 0));
    wait_blocked(&mut c, 1);
    assert_eq!(string(&mut c, &cmd!("SET", "q", "not a count")), "OK");
    let e = error_text(&w.reply_within(PROMPT)).expect("an error");
    assert!(e.starts_with("WRONGTYPE"), "{e}");
}

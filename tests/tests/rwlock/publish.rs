//! Publishing on `redisson_rwlock:{key}`: only when the last hold of any owner goes (`0` after a
//! read release, `1` after a write release), nothing after a downgrade's write release,
//! FORCERELEASE `1` or `0` by mode, and a hand-off to a queued waiter does not suppress it.

use super::*;

fn msg(channel: &str, payload: &str) -> (String, String) {
    (channel.to_string(), payload.to_string())
}

fn subscribe(s: &Server) -> Subscriber {
    Subscriber::psubscribe(s, "redisson_rwlock*")
}

#[test]
fn the_last_read_release_publishes_0_once() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    let ch = rwlock_channel("rw");
    assert_eq!(ch, "redisson_rwlock:{rw}");
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(2));
    assert_eq!(acquire(&mut c, "rw", "b", "READ", 10_000), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(1));
    assert!(sub.drain(&mut c).is_empty(), "partial release");
    assert_eq!(release(&mut c, "rw", "a", "READ"), Value::Int(0));
    assert!(sub.drain(&mut c).is_empty(), "b still reads");
    assert_eq!(release(&mut c, "rw", "b", "READ"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "0")]);
}

#[test]
fn the_last_write_release_publishes_1_once() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    let ch = rwlock_channel("rw");
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(2));
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(1));
    assert!(sub.drain(&mut c).is_empty(), "partial release");
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")]);
}

#[test]
fn a_downgrades_write_release_publishes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    let ch = rwlock_channel("rw");
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert!(sub.drain(&mut c).is_empty(), "the writer still reads");
    assert_eq!(fields(&mut c, "rw"), pairs(&[("mode", "read"), ("w", "1")]));
    assert_eq!(release(&mut c, "rw", "w", "READ"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "0")], "now a read release");

    // The other order: the read hold goes first, then the write release frees the lock.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    assert_eq!(release(&mut c, "rw", "w", "READ"), Value::Int(0));
    assert!(sub.drain(&mut c).is_empty(), "the writer still writes");
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")]);
}

#[test]
fn force_release_publishes_by_mode() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    let ch = rwlock_channel("rw");
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 0);
    assert!(sub.drain(&mut c).is_empty(), "nothing to release");

    assert_eq!(acquire(&mut c, "rw", "a", "READ", 10_000), Value::Int(1));
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(sub.drain(&mut c), [msg(&ch, "0")], "read mode");

    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")], "write mode");

    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    assert_eq!(acquire(&mut c, "rw", "w", "READ", 10_000), Value::Int(1));
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")], "write mode with reads");
}

#[test]
fn a_hand_off_does_not_suppress_the_publish() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    let ch = rwlock_channel("rw");
    // Write release handing off to two readers.
    assert_eq!(acquire(&mut c, "rw", "w", "WRITE", 10_000), Value::Int(1));
    let r1 = park_rw(&s, &mut c, "rw", "r1", "READ", 10_000, 1);
    let r2 = park_rw(&s, &mut c, "rw", "r2", "READ", 10_000, 2);
    assert_eq!(release(&mut c, "rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")]);
    assert_eq!((r1.reply_int(), r2.reply_int()), (1, 1));
    // Read release handing off to a writer.
    let w = park_rw(&s, &mut c, "rw", "w", "WRITE", 10_000, 1);
    assert_eq!(release(&mut c, "rw", "r1", "READ"), Value::Int(0));
    assert!(sub.drain(&mut c).is_empty(), "r2 still reads");
    assert_eq!(release(&mut c, "rw", "r2", "READ"), Value::Int(0));
    assert_eq!(sub.drain(&mut c), [msg(&ch, "0")]);
    assert_eq!(w.reply_int(), 1);
    assert_eq!(
        fields(&mut c, "rw"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    // Force release handing off.
    let r = park_rw(&s, &mut c, "rw", "r", "READ", 10_000, 1);
    assert_eq!(int(&mut c, &cmd!("RRWLOCK.FORCERELEASE", "rw")), 1);
    assert_eq!(sub.drain(&mut c), [msg(&ch, "1")]);
    assert_eq!(r.reply_int(), 1);
}

#[test]
fn brace_names_publish_on_the_brace_style_channel() {
    let s = Server::start();
    let mut c = s.conn();
    let mut sub = subscribe(&s);
    assert_eq!(
        acquire(&mut c, "{app}:rw", "w", "WRITE", 10_000),
        Value::Int(1)
    );
    assert_eq!(release(&mut c, "{app}:rw", "w", "WRITE"), Value::Int(0));
    assert_eq!(
        acquire(&mut c, "{app}:rw", "a", "READ", 10_000),
        Value::Int(1)
    );
    assert_eq!(release(&mut c, "{app}:rw", "a", "READ"), Value::Int(0));
    assert_eq!(
        sub.drain(&mut c),
        [
            msg("redisson_rwlock:{app}:rw", "1"),
            msg("redisson_rwlock:{app}:rw", "0")
        ]
    );
}

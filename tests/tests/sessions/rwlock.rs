//! Sessions: read-write locks.

use super::*;

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

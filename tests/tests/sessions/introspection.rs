//! Sessions: introspection.

use super::*;

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
    if !client_unblock_reaches_waits(&mut c) {
        return;
    }
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

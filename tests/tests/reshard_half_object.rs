//! An object whose auxiliary key reached the importing node before its main key is not decided
//! there: a command sent with `ASKING` finds half the object (a semaphore's leased-permit set
//! without its count) and must answer `TRYAGAIN`, as Redis answers a multi-key command whose
//! keys are split by a migration.

use rlock_tests::cluster::Cluster;
use rlock_tests::{cmd, error_text, int, raw, string, Value};

/// `cmd` sent after `ASKING` on one connection, as a cluster client follows `ASK`.
fn asking(conn: &mut redis::Connection, cmd: &redis::Cmd) -> Value {
    assert_eq!(string(conn, &cmd!("ASKING")), "OK");
    raw(conn, cmd)
}

fn keys(conn: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = cmd!("KEYS", "*").query(conn).unwrap();
    k.sort();
    k
}

/// Before: the release ran on the target with only the leased-permit set there. It took the
/// permit out of the set and created the count (1) beside the source's, so the count's
/// `MIGRATE` then failed with `BUSYKEY` and the permit's holder, releasing again, got
/// `NOPERMIT` for a permit it held.
#[test]
fn a_permit_is_not_released_where_its_semaphores_count_has_not_arrived() {
    let cluster = Cluster::start();
    let name = "{halfsem}:sem";
    let leases = "{halfsem}:sem:timeout";
    let slot = cluster.slot(name);
    let source = cluster.master_for(name);
    let target = cluster.other_master(name);
    let mut src = source.conn();
    let mut dst = target.conn();
    assert_eq!(int(&mut src, &cmd!("RSEM.TRYSETPERMITS", name, 2)), 1);
    let id = match raw(&mut src, &cmd!("RSEM.ACQUIRE", name, "LEASE", 60_000)) {
        Value::Array(ids) => match &ids[..] {
            [Value::BulkString(b)] => String::from_utf8(b.clone()).unwrap(),
            other => panic!("one id: {other:?}"),
        },
        other => panic!("leased: {other:?}"),
    };
    let release = cmd!("RSEM.RELEASE", name, "ID", &id);

    cluster.open_migration(slot, source, target);
    cluster.migrate_keys(source, target, &[leases]);
    let v = raw(&mut src, &release);
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("TRYAGAIN")),
        "source, its leased-permit set gone: {v:?}"
    );
    let v = asking(&mut dst, &release);
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("TRYAGAIN")),
        "target, its count not there yet: {v:?}"
    );
    assert_eq!(keys(&mut dst), [leases], "nothing written on the target");

    // The count follows: whole on the target, the permit is released there once.
    cluster.migrate_keys(source, target, &[name]);
    assert_eq!(asking(&mut dst, &release), Value::Int(2));
    cluster.close_migration(slot, source, target);
    assert_eq!(int(&mut dst, &cmd!("RSEM.AVAILABLE", name)), 2);
    let again = raw(&mut dst, &release);
    assert!(
        error_text(&again).is_some_and(|e| e.starts_with("NOPERMIT")),
        "{again:?}"
    );
}

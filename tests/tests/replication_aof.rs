//! Effects replicate as native commands with absolute expiry: a replica without the module
//! matches the master after every kind of write. (An AOF written with the module reloads on a
//! server without it: every_object.rs, for every object.)

use rlock_tests::*;

#[test]
fn replica_without_the_module_matches_the_master_after_every_kind_of_write() {
    let (master, replica) = start_pair();
    let mut m = master.conn();
    let mut r = replica.conn();

    assert_eq!(int(&mut m, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 20_000)), 1);
    assert_replica_matches("acquire", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("o1", 1));
    assert_between("replica PTTL", pttl(&mut r, "lk"), 17_000, 20_000);

    assert_eq!(int(&mut m, &cmd!("RLOCK.ACQUIRE", "lk", "o1", 30_000)), 2);
    assert_replica_matches("re-entry", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("o1", 2));

    assert_eq!(int(&mut m, &cmd!("RLOCK.RENEW", "lk", "o1", 15_000)), 1);
    assert_replica_matches("renew", &mut m, &mut r);
    assert_between(
        "replica PTTL after renew",
        pttl(&mut r, "lk"),
        12_000,
        15_000,
    );

    assert_eq!(int(&mut m, &cmd!("RLOCK.RELEASE", "lk", "o1")), 1);
    assert_replica_matches("partial release", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("o1", 1));

    assert_eq!(int(&mut m, &cmd!("RLOCK.RELEASE", "lk", "o1")), 0);
    assert_replica_matches("full release", &mut m, &mut r);
    assert!(!exists(&mut r, "lk"));

    let t = int(&mut m, &cmd!("RLOCK.ACQUIRE", "lk", "o2", 20_000, "FENCE"));
    assert_replica_matches("FENCE acquire", &mut m, &mut r);
    assert_eq!(string(&mut r, &cmd!("GET", token_key("lk"))), t.to_string());

    assert_eq!(int(&mut m, &cmd!("RLOCK.FORCERELEASE", "lk")), 1);
    assert_replica_matches("force release", &mut m, &mut r);
    assert!(!exists(&mut r, "lk"));

    // Hand-off on release.
    assert_eq!(int(&mut m, &cmd!("RLOCK.ACQUIRE", "lk", "o3", 20_000)), 1);
    let w = park(&master, &mut m, "lk", "w1", 12_000, &["FENCE"], 1);
    assert_eq!(int(&mut m, &cmd!("RLOCK.RELEASE", "lk", "o3")), 0);
    let tw = w.reply_int();
    assert_replica_matches("hand-off on release", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("w1", 1));
    assert_eq!(
        string(&mut r, &cmd!("GET", token_key("lk"))),
        tw.to_string()
    );

    // Hand-off on lease expiry.
    assert_eq!(int(&mut m, &cmd!("RLOCK.RENEW", "lk", "w1", 200)), 1);
    let w = park(&master, &mut m, "lk", "w2", 11_000, &[], 1);
    assert_eq!(w.reply_int(), 1);
    assert_replica_matches("hand-off on lease expiry", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("w2", 1));
    assert_between(
        "replica PTTL after expiry hand-off",
        pttl(&mut r, "lk"),
        9_000,
        11_000,
    );

    // Hand-off on DEL (the module writes the waiter's lock after the native DEL).
    let w = park(&master, &mut m, "lk", "w3", 13_000, &[], 1);
    assert_eq!(int(&mut m, &cmd!("DEL", "lk")), 1);
    assert_eq!(w.reply_int(), 1);
    assert_replica_matches("hand-off on DEL", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "lk"), holder("w3", 1));

    // Inside MULTI/EXEC and Lua the effects replicate the same way.
    assert_eq!(string(&mut m, &cmd!("MULTI")), "OK");
    assert_eq!(
        string(&mut m, &cmd!("RLOCK.ACQUIRE", "tx", "o5", 16_000, "FENCE")),
        "QUEUED"
    );
    assert_eq!(
        string(&mut m, &cmd!("RLOCK.ACQUIRE", "tx", "o5", 17_000)),
        "QUEUED"
    );
    assert_eq!(string(&mut m, &cmd!("RLOCK.RELEASE", "lk", "w3")), "QUEUED");
    assert!(matches!(raw(&mut m, &cmd!("EXEC")), Value::Array(_)));
    assert_replica_matches("MULTI/EXEC", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "tx"), holder("o5", 2));
    assert!(!exists(&mut r, "lk"));

    let w = park(&master, &mut m, "tx", "w4", 14_000, &[], 1);
    let script = "redis.call('RLOCK.RELEASE', KEYS[1], ARGV[1]) \
        return redis.call('RLOCK.RELEASE', KEYS[1], ARGV[1])";
    assert_eq!(
        raw(&mut m, &cmd!("EVAL", script, 1, "tx", "o5")),
        Value::Int(0)
    );
    assert_eq!(w.reply_int(), 1);
    assert_replica_matches("hand-off inside EVAL", &mut m, &mut r);
    assert_eq!(hgetall(&mut r, "tx"), holder("w4", 1));
}

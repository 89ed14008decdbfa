//! Redis Cluster: every RRWLOCK command routes by its key in position 1, the read-hold keys and
//! the channel share the lock's slot (with and without `{` in the name), and releases publish on
//! the shard channel (SPUBLISH), as Redisson 3.22+ subscribes.

use super::*;
use rlock_tests::cluster::Cluster;

/// The next `smessage` frame on a connection that ran SSUBSCRIBE, as `[kind, channel, payload]`.
fn next_frame(conn: &mut redis::Connection) -> Vec<String> {
    let parts = match conn.recv_response().expect("shard message") {
        Value::Array(p) | Value::Push { data: p, .. } => p,
        other => panic!("unexpected frame {other:?}"),
    };
    parts.iter().map(|p| text(p).unwrap_or_default()).collect()
}

#[test]
fn keys_share_the_slot_and_releases_publish_on_the_shard_channel() {
    let cluster = Cluster::start();
    for name in ["plain-rw", "{app}:rw"] {
        let slot = cluster.slot(name);
        let hold = rwlock_hold(name, "a", 1);
        let channel = rwlock_channel(name);
        assert_eq!(cluster.slot(&hold), slot, "{hold}");
        assert_eq!(cluster.slot(&channel), slot, "{channel}");
        let master = cluster.master_for(name);
        let mut c = master.conn();

        // A node that does not serve the slot redirects every command, like a native one.
        let mut other = cluster.other_master(name).conn();
        for command in [
            cmd!("RRWLOCK.ACQUIRE", name, "a", "READ", 10_000),
            cmd!("RRWLOCK.RELEASE", name, "a", "READ"),
            cmd!("RRWLOCK.RENEW", name, "a", 10_000),
            cmd!("RRWLOCK.FORCERELEASE", name),
            cmd!("RRWLOCK.INFO", name),
        ] {
            let e = err(&mut other, &command);
            assert!(e.starts_with("MOVED "), "{}: {e}", show(&command));
        }
        assert_eq!(dbsize(&mut other), 0);

        let mut shard = master.conn();
        shard
            .send_packed_command(&cmd!("SSUBSCRIBE", &channel).get_packed_command())
            .unwrap();
        assert_eq!(next_frame(&mut shard)[0], "ssubscribe");
        let mut plain = Subscriber::psubscribe(master, "redisson_rwlock*");

        assert_eq!(acquire(&mut c, name, "a", "READ", 10_000), Value::Int(1));
        assert_eq!(
            string(&mut c, &cmd!("GET", &hold)),
            "1",
            "{name}: hold key on the master"
        );
        // A writer waits on the master, granted by the read release.
        let w = park_rw(master, &mut c, name, "w", "WRITE", 10_000, 1);
        assert_eq!(release(&mut c, name, "a", "READ"), Value::Int(0));
        assert_eq!(w.reply_int(), 1);
        assert_eq!(next_frame(&mut shard), ["smessage", channel.as_str(), "0"]);
        assert_eq!(release(&mut c, name, "w", "WRITE"), Value::Int(0));
        assert_eq!(next_frame(&mut shard), ["smessage", channel.as_str(), "1"]);
        assert!(
            plain.drain(&mut c).is_empty(),
            "{name}: no cluster-wide PUBLISH in cluster mode"
        );
        assert_eq!(dbsize(&mut c), 0);
    }
}

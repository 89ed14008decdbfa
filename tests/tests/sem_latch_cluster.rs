//! RSEM.* and RLATCH.* in a 3-master Redis Cluster: each command is routed by its key (other
//! masters redirect), the lease set and the channels share the key's slot, and publishes go to
//! the slot's shard channel (SPUBLISH), as Redisson 3.22+ subscribes.

use rlock_tests::cluster::Cluster;
use rlock_tests::redisson::{latch, semaphore};
use rlock_tests::*;
use std::time::Duration;

/// SSUBSCRIBE on `server` to `channel`.
fn ssubscribe(server: &Server, channel: &str) -> redis::Connection {
    let mut sub = server.conn();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sub.send_packed_command(&cmd!("SSUBSCRIBE", channel).get_packed_command())
        .unwrap();
    let confirm = sub.recv_response().unwrap();
    assert!(
        matches!(confirm, Value::Array(_) | Value::Push { .. }),
        "{confirm:?}"
    );
    sub
}

/// The next shard message: [kind, channel, payload].
fn next_message(sub: &mut redis::Connection) -> Vec<String> {
    match sub.recv_response().expect("a message") {
        Value::Array(p) | Value::Push { data: p, .. } => {
            p.iter().map(|x| text(x).unwrap_or_default()).collect()
        }
        other => panic!("unexpected frame {other:?}"),
    }
}

#[test]
fn semaphores_and_latches_live_on_their_slots_master_and_publish_on_the_shard() {
    let cluster = Cluster::start();
    for (name, latch_name) in [
        ("plain-sem", "plain-latch"),
        ("{orders}:sem", "{orders}:latch"),
    ] {
        let slot = cluster.slot(name);
        let sem_channel = semaphore::channel(name);
        let latch_channel = latch::channel(latch_name);
        for aux in [&semaphore::timeouts(name), &sem_channel] {
            assert_eq!(cluster.slot(aux), slot, "{name}: {aux} shares the slot");
        }
        let master = cluster.master_for(name);
        let mut other = cluster.other_master(name).conn();
        let e = err(&mut other, &cmd!("RSEM.TRYSETPERMITS", name, 1));
        assert!(e.starts_with("MOVED"), "{name} elsewhere: {e}");

        let mut c = master.conn();
        let mut sub = ssubscribe(master, &sem_channel);
        assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", name, 1)), 1);
        assert_eq!(next_message(&mut sub), ["smessage", &sem_channel, "1"]);
        let ids = match raw(&mut c, &cmd!("RSEM.ACQUIRE", name, "LEASE", 30_000)) {
            Value::Array(v) => v.iter().map(|x| text(x).unwrap()).collect::<Vec<_>>(),
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(
            int(&mut c, &cmd!("ZCARD", semaphore::timeouts(name))),
            1,
            "{name}: the lease set is on the same node"
        );
        assert_eq!(int(&mut c, &cmd!("RSEM.RELEASE", name, "ID", &ids[0])), 1);
        assert_eq!(next_message(&mut sub), ["smessage", &sem_channel, "1"]);

        // The latch's channel is Redisson's own `...__{name}`: for a name with a hash tag the
        // braces nest and the channel hashes elsewhere (Redisson's quirk), so only a plain
        // name's latch channel shares its slot.
        if latch_name.contains('{') {
            assert_ne!(cluster.slot(&latch_channel), cluster.slot(latch_name));
            assert_eq!(int(&mut c, &cmd!("DEL", name)), 1);
            continue;
        }
        assert_eq!(cluster.slot(&latch_channel), cluster.slot(latch_name));
        let lmaster = cluster.master_for(latch_name);
        let mut lc = lmaster.conn();
        let e = err(
            &mut cluster.other_master(latch_name).conn(),
            &cmd!("RLATCH.COUNT", latch_name),
        );
        assert!(e.starts_with("MOVED"), "{latch_name} elsewhere: {e}");
        let mut lsub = ssubscribe(lmaster, &latch_channel);
        assert_eq!(int(&mut lc, &cmd!("RLATCH.TRYSETCOUNT", latch_name, 1)), 1);
        assert_eq!(next_message(&mut lsub), ["smessage", &latch_channel, "1"]);
        let w = Pending::send(lmaster, &cmd!("RLATCH.AWAIT", latch_name, "BLOCK", 0));
        wait_blocked(&mut lc, 1);
        assert_eq!(int(&mut lc, &cmd!("RLATCH.COUNTDOWN", latch_name)), 0);
        assert_eq!(w.reply(), Value::Int(1));
        assert_eq!(next_message(&mut lsub), ["smessage", &latch_channel, "0"]);
        assert_eq!(int(&mut c, &cmd!("DEL", name)), 1);
    }
}

//! Atomic slot migration with rlock loaded: Valkey 9's `CLUSTER MIGRATESLOTS` (issue 38) and
//! Redis 8.4's `CLUSTER MIGRATION IMPORT`.
//!
//! The source streams the slot's keys and then every write to them to the target, pauses client
//! writes, grants the target ownership and, once it hears the target took the slot, drops the
//! keys without a keyspace event. Checked: every object arrives intact, no waiter is granted on
//! the source once the slot has left (not even by a lease that ends in the migration's last
//! step), waiters end with `TRYAGAIN` and are served on the target, and a cancelled migration,
//! or one whose target dies, leaves the source serving as before.
//!
//! Every test here needs Valkey 9+ or Redis 8.4+ (the last-step one, Valkey 9+); on other
//! servers each says so and passes without running (`make matrix` runs them on Valkey 9.1 and
//! Redis 8.6).

use std::time::{Duration, Instant};

use rlock_tests::cluster::{slot_migrations, wait_migration, Cluster};
use rlock_tests::redisson::semaphore;
use rlock_tests::reshard::{check_moved, park_raw_waiters, Load, WAIT};
use rlock_tests::{
    cmd, error_text, hgetall, int, margin, margin_ms, pttl, raw, rlock_stat, string, wait_until,
    Pending, Server, ServerKind, Value,
};

/// Whether this server has atomic slot migration (Valkey 9.0+'s `CLUSTER MIGRATESLOTS`, Redis
/// 8.4+'s `CLUSTER MIGRATION IMPORT`); prints why not.
fn has_atomic_migration(test: &str) -> bool {
    let s = Server::start();
    let kind = ServerKind::of(&mut s.conn());
    let ok = match kind.flavor {
        rlock_tests::Flavor::Valkey => kind.version.0 >= 9,
        rlock_tests::Flavor::Redis => (kind.version.0, kind.version.1) >= (8, 4),
    };
    if !ok {
        eprintln!("{test}: skipped: {kind} has no atomic slot migration (Valkey 9.0+, Redis 8.4+)");
    }
    ok
}

/// Whether this server can hold a migration after the source paused and granted the slot,
/// before the target takes it (Valkey 9's `DEBUG SLOTMIGRATION PREVENT-FAILOVER`); prints why
/// not. Redis 8.4's fail points (`DEBUG ASM-FAILPOINT`) end a migration at that step rather than
/// hold it there, and the step lasts a few milliseconds: there the module's guard is the one
/// `tests/tests/pause.rs` checks (Redis pauses writes for the handoff with the same actions as
/// `CLIENT PAUSE WRITE`, replica traffic included).
fn has_migration_hooks(test: &str) -> bool {
    let s = Server::start();
    let kind = ServerKind::of(&mut s.conn());
    let ok = kind.flavor == rlock_tests::Flavor::Valkey && kind.version.0 >= 9;
    if !ok {
        eprintln!("{test}: skipped: {kind} cannot hold a migration between its handoff and the target taking the slot (Valkey 9.0+ can)");
    }
    ok
}

/// The permit id an `RSEM.ACQUIRE ... LEASE` replied (an array of one).
fn permit(v: Value) -> String {
    rlock_tests::strings(&v)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("a permit id, got {v:?}"))
}

fn ended_by_move(v: &Value) -> bool {
    error_text(v).is_some_and(|e| e.starts_with("TRYAGAIN") || e.starts_with("MOVED"))
}

/// The objects of slot `{t}` on `node`: a lock held by `A` (and `B` waiting), a fenced lock
/// `t` (its name hashes whole, like its token key's tag), a semaphore of 2 with a leased permit,
/// and a latch counted down once.
struct Objects {
    token: i64,
    permit: String,
}

fn set_up(node: &Server) -> Objects {
    let mut c = node.conn();
    assert_eq!(
        int(&mut c, &cmd!("RLOCK.ACQUIRE", "{t}:lock", "A", 60_000)),
        1
    );
    int(&mut c, &cmd!("RLOCK.ACQUIRE", "t", "A", 60_000, "FENCE"));
    let token = int(&mut c, &cmd!("RLOCK.ACQUIRE", "t", "A", 60_000, "FENCE"));
    assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", "{t}:sem", 2)), 1);
    let permit = permit(raw(
        &mut c,
        &cmd!("RSEM.ACQUIRE", "{t}:sem", "LEASE", 60_000),
    ));
    assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", "{t}:latch", 2)), 1);
    int(&mut c, &cmd!("RLATCH.COUNTDOWN", "{t}:latch"));
    Objects { token, permit }
}

/// `B` queued on `node` behind `A`'s hold of `{t}:lock`: a raw `BLOCK 0` waiter.
fn queue_waiter(node: &Server) -> Pending {
    let waiter = Pending::send(
        node,
        &cmd!("RLOCK.ACQUIRE", "{t}:lock", "B", 60_000, "BLOCK", 0),
    );
    let mut c = node.conn();
    wait_until(WAIT, "waiter queued", || rlock_stat(&mut c, "waiters") == 1);
    waiter
}

/// Valkey's own test hook that holds a migration before the target takes the slot
/// (`PREVENT-FAILOVER`, on the target).
fn hold_migration(node: &Server, hook: &str, on: bool) {
    let v = raw(
        &mut node.conn(),
        &cmd!("DEBUG", "SLOTMIGRATION", hook, i64::from(on)),
    );
    assert_eq!(v, Value::Okay, "DEBUG SLOTMIGRATION {hook}");
}

/// Hold (or let go) a migration from `node` before its pause, the slot streaming: Valkey's
/// `DEBUG SLOTMIGRATION PREVENT-PAUSE`, or Redis' fail point at the step before the handoff
/// (`DEBUG ASM-FAILPOINT migrate-main-channel handoff-prep`, which keeps the source streaming).
fn hold_before_pause(node: &Server, on: bool) {
    let mut c = node.conn();
    let v = if ServerKind::of(&mut c).flavor == rlock_tests::Flavor::Valkey {
        raw(
            &mut c,
            &cmd!("DEBUG", "SLOTMIGRATION", "PREVENT-PAUSE", i64::from(on)),
        )
    } else if on {
        raw(
            &mut c,
            &cmd!(
                "DEBUG",
                "ASM-FAILPOINT",
                "migrate-main-channel",
                "handoff-prep"
            ),
        )
    } else {
        raw(&mut c, &cmd!("DEBUG", "ASM-FAILPOINT", "", ""))
    };
    assert_eq!(v, Value::Okay, "holding the migration before its pause");
}

/// The source's states of a migration held by [`hold_before_pause`] once the snapshot is sent
/// (Valkey's, Redis').
const HELD_BEFORE_PAUSE: &[&str] = &["waiting-to-pause", "send-stream"];

/// The "done when" of issue 38: `CLUSTER MIGRATESLOTS` moves a slot holding a held lock with a
/// blocked waiter, a fenced lock, a semaphore with a leased permit and a latch; the migration
/// completes, everything arrives intact, the waiter is not granted on the source but ends with
/// `TRYAGAIN` and is served on the target, and the next fencing token exceeds the earlier ones.
#[test]
fn migrateslots_moves_every_object_intact_and_grants_nothing_on_the_source() {
    if !has_atomic_migration("migrateslots_moves_every_object_intact") {
        return;
    }
    let cluster = Cluster::start();
    let slot = cluster.slot("{t}");
    assert_eq!(cluster.slot("t"), slot);
    let source = cluster.master_for("{t}");
    let target = cluster.other_master("{t}");
    let objects = set_up(source);
    let mut src = source.conn();
    let lease_before = pttl(&mut src, "{t}:lock");
    let leases = raw(
        &mut src,
        &cmd!("ZRANGE", "{t}:sem:timeout", 0, -1, "WITHSCORES"),
    );
    let waiter = queue_waiter(source);
    assert!(rlock_stat(&mut src, "holds_tracked") >= 2);

    cluster.migrate_slot_atomic(slot, source, target);
    let moved = Instant::now();
    let v = waiter.reply_within(Duration::from_secs(5));
    assert!(ended_by_move(&v), "the waiter's reply on the source: {v:?}");
    eprintln!(
        "source waiter ended {:?} after the job's success was seen",
        moved.elapsed()
    );

    // Nothing is left on the source, and nothing of the module's about those keys.
    assert_eq!(rlock_tests::dbsize(&mut src), 0);
    assert_eq!(rlock_stat(&mut src, "waiters"), 0);
    assert_eq!(rlock_stat(&mut src, "holds_tracked"), 0);
    assert_eq!(
        raw(&mut src, &cmd!("RLOCK.TOP", "HELD")),
        Value::Array(vec![])
    );

    // Everything arrived intact.
    let mut dst = target.conn();
    let h = hgetall(&mut dst, "{t}:lock");
    assert_eq!(h.get("A").map(String::as_str), Some("1"), "{h:?}");
    assert_eq!(h.len(), 1, "only A holds: {h:?}");
    let lease_after = pttl(&mut dst, "{t}:lock");
    assert!(
        lease_after > 0 && lease_after <= lease_before,
        "lease {lease_before} ms before, {lease_after} ms after"
    );
    assert_eq!(
        hgetall(&mut dst, "t").get("A").map(String::as_str),
        Some("2")
    );
    assert_eq!(string(&mut dst, &cmd!("GET", "{t}:sem")), "1");
    assert_eq!(
        raw(
            &mut dst,
            &cmd!("ZRANGE", "{t}:sem:timeout", 0, -1, "WITHSCORES")
        ),
        leases
    );
    assert_eq!(string(&mut dst, &cmd!("GET", "{t}:latch")), "1");
    let next = int(&mut dst, &cmd!("RLOCK.ACQUIRE", "t", "A", 60_000, "FENCE"));
    assert!(next > objects.token, "token {next} after {}", objects.token);
    // The leased permit is released on the target by its id: both permits are there again.
    assert_eq!(
        int(
            &mut dst,
            &cmd!("RSEM.RELEASE", "{t}:sem", "ID", &objects.permit)
        ),
        2
    );

    // The waiter, queued again on the target, gets the lock there at A's release.
    let again = Pending::send(
        target,
        &cmd!("RLOCK.ACQUIRE", "{t}:lock", "B", 60_000, "BLOCK", 10_000),
    );
    wait_until(WAIT, "waiter queued on the target", || {
        rlock_stat(&mut dst, "waiters") == 1
    });
    assert_eq!(int(&mut dst, &cmd!("RLOCK.RELEASE", "{t}:lock", "A")), 0);
    assert_eq!(again.reply_within(Duration::from_secs(5)), Value::Int(1));
    assert_eq!(
        hgetall(&mut dst, "{t}:lock").get("B").map(String::as_str),
        Some("1")
    );
}

/// The migration's last step: the source has paused writes and granted the target ownership,
/// and hears only later that the target took it. A permit's lease that ends then must not be
/// handed to the source's waiter: that write would never reach the target, which serves the
/// slot from then on (two holders of one permit). Held in that step with Valkey's own test hook
/// (`DEBUG SLOTMIGRATION PREVENT-FAILOVER` on the target).
#[test]
fn a_lease_ending_in_the_migrations_last_step_is_not_granted_on_the_source() {
    if !has_migration_hooks("a_lease_ending_in_the_migrations_last_step") {
        return;
    }
    let cluster = Cluster::start();
    let slot = cluster.slot("{t}");
    let source = cluster.master_for("{t}");
    let target = cluster.other_master("{t}");
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(int(&mut src, &cmd!("RSEM.TRYSETPERMITS", "{t}:sem", 1)), 1);
    let lease = margin(Duration::from_millis(1500));
    let a = permit(raw(
        &mut src,
        &cmd!("RSEM.ACQUIRE", "{t}:sem", "LEASE", lease.as_millis() as u64),
    ));
    let leased_at = Instant::now();
    let waiter = Pending::send(
        source,
        &cmd!("RSEM.ACQUIRE", "{t}:sem", "LEASE", 60_000, "BLOCK", 0),
    );
    wait_until(WAIT, "waiter queued", || {
        rlock_stat(&mut src, "sem_waiters") == 1
    });

    hold_migration(target, "PREVENT-FAILOVER", true);
    let job = cluster.start_atomic_migration(slot, source, target);
    wait_migration(source, &job, &["failover-granted"]);
    assert!(
        leased_at.elapsed() < lease,
        "the migration reached its last step only after the lease ended"
    );
    // The lease ends while the source stays in its last step.
    let after_lease = lease + margin(Duration::from_millis(300));
    std::thread::sleep(after_lease.saturating_sub(leased_at.elapsed()));
    let state = slot_migrations(&mut src)
        .into_iter()
        .find(|j| j.name == job)
        .map(|j| j.state);
    assert_eq!(state.as_deref(), Some("failover-granted"));
    // Not granted on the source: still queued, A's expired lease not reclaimed.
    assert_eq!(rlock_stat(&mut src, "sem_waiters"), 1);
    assert_eq!(rlock_stat(&mut src, "sem_acquired"), 1, "only A's permit");
    assert_eq!(
        int(&mut src, &cmd!("ZCARD", "{t}:sem:timeout")),
        1,
        "A's lease only"
    );

    hold_migration(target, "PREVENT-FAILOVER", false);
    wait_migration(source, &job, &["success"]);
    let v = waiter.reply_within(Duration::from_secs(5));
    assert!(ended_by_move(&v), "the waiter's reply on the source: {v:?}");
    cluster.wait_ok();

    // On the target the one permit is A's expired one: the waiter, queued again there, gets it.
    let b = permit(raw(
        &mut dst,
        &cmd!("RSEM.ACQUIRE", "{t}:sem", "LEASE", 60_000, "BLOCK", 5_000),
    ));
    assert_ne!(b, a);
    assert_eq!(string(&mut dst, &cmd!("GET", "{t}:sem")), "0");
    assert_eq!(
        int(&mut dst, &cmd!("ZCARD", "{t}:sem:timeout")),
        1,
        "B's lease only"
    );
}

/// The migration cancelled midway (`CLUSTER CANCELSLOTMIGRATIONS`, Redis' `CLUSTER MIGRATION
/// CANCEL`; held before its pause by [`hold_before_pause`]): the source goes on serving the slot as
/// before: its waiter is granted at the release, on the source; the target keeps nothing.
#[test]
fn a_cancelled_migration_leaves_the_source_serving_as_before() {
    if !has_atomic_migration("a_cancelled_migration_leaves_the_source_serving") {
        return;
    }
    let cluster = Cluster::start();
    let slot = cluster.slot("{t}");
    let source = cluster.master_for("{t}");
    let target = cluster.other_master("{t}");
    let objects = set_up(source);
    let mut src = source.conn();
    let waiter = queue_waiter(source);

    hold_before_pause(source, true);
    let job = cluster.start_atomic_migration(slot, source, target);
    wait_migration(source, &job, HELD_BEFORE_PAUSE);
    // Writes during the migration are streamed: a lease taken now arrives if it completes.
    assert_eq!(
        int(&mut src, &cmd!("RLOCK.ACQUIRE", "{t}:other", "C", 60_000)),
        1
    );
    if ServerKind::of(&mut src).flavor == rlock_tests::Flavor::Valkey {
        assert_eq!(
            raw(&mut src, &cmd!("CLUSTER", "CANCELSLOTMIGRATIONS")),
            Value::Okay
        );
    } else {
        // Redis: the target retries an import cancelled only on the source.
        for node in [target, source] {
            let v = raw(
                &mut node.conn(),
                &cmd!("CLUSTER", "MIGRATION", "CANCEL", "ALL"),
            );
            assert_eq!(
                v,
                Value::Int(1),
                "CLUSTER MIGRATION CANCEL ALL on :{}",
                node.port
            );
        }
    }
    wait_migration(source, &job, &["cancelled"]);
    hold_before_pause(source, false);
    assert_eq!(cluster.master_port_of_slot(slot), source.port);

    // The source serves as before: the waiter is still queued and gets the lock at A's
    // release, here.
    assert_eq!(rlock_stat(&mut src, "waiters"), 1);
    assert_eq!(int(&mut src, &cmd!("RLOCK.RELEASE", "{t}:lock", "A")), 0);
    assert_eq!(waiter.reply_within(Duration::from_secs(5)), Value::Int(1));
    let next = int(&mut src, &cmd!("RLOCK.ACQUIRE", "t", "A", 60_000, "FENCE"));
    assert!(next > objects.token);
    assert_eq!(
        int(
            &mut src,
            &cmd!("RSEM.RELEASE", "{t}:sem", "ID", &objects.permit)
        ),
        2
    );
    let mut dst = target.conn();
    wait_until(WAIT, "the target dropped what it received", || {
        int(&mut dst, &cmd!("CLUSTER", "COUNTKEYSINSLOT", slot)) == 0
    });
}

/// The target dies midway: the source's export fails and the source goes on serving the slot,
/// its waiter granted there at the release.
#[test]
fn a_migration_whose_target_dies_leaves_the_source_serving() {
    if !has_atomic_migration("a_migration_whose_target_dies") {
        return;
    }
    // The cluster stays up with one master dead for the test's length.
    let mut cluster = Cluster::with_node_timeout(60_000);
    let slot = cluster.slot("{t}");
    let source_port = cluster.master_for("{t}").port;
    let target_port = cluster.other_master("{t}").port;
    let source = cluster.by_port(source_port);
    let target = cluster.by_port(target_port);
    set_up(source);
    let waiter = queue_waiter(source);
    hold_before_pause(source, true);
    let job = cluster.start_atomic_migration(slot, source, target);
    wait_migration(source, &job, HELD_BEFORE_PAUSE);
    cluster
        .masters
        .iter_mut()
        .find(|m| m.port == target_port)
        .unwrap()
        .kill();
    let source = cluster.by_port(source_port);
    let state = wait_migration(source, &job, &["failed"]);
    assert_eq!(state, "failed");
    let mut src = source.conn();
    hold_before_pause(source, false);
    assert_eq!(rlock_stat(&mut src, "waiters"), 1);
    assert_eq!(int(&mut src, &cmd!("RLOCK.RELEASE", "{t}:lock", "A")), 0);
    assert_eq!(waiter.reply_within(Duration::from_secs(5)), Value::Int(1));
}

/// As `reshard.rs` does for `redis-cli --cluster reshard`: the slot moves back and forth five
/// times with `CLUSTER MIGRATESLOTS` while the rlock client's lockers, readers, writers and
/// permit holders (their waits go through sessions) work on it, with raw `BLOCK` waiters parked
/// on the node it leaves. Checked: nobody ever holds what another holds (in the clients, and in
/// the keys after each move), every raw waiter on the old node ends with `TRYAGAIN` or a
/// redirect within a second, nothing is left on the old node, and the clients go on.
#[test]
fn migrateslots_under_load_keeps_exclusion_and_strands_no_waiter() {
    if !has_atomic_migration("migrateslots_under_load") {
        return;
    }
    let cluster = Cluster::start();
    let tag = "t";
    let key = |s: &str| format!("{{{tag}}}:{s}");
    let (lock, rw, sem, latch, held) = (
        key("lock"),
        key("rw"),
        key("sem"),
        key("latch"),
        key("held"),
    );
    let slot = cluster.slot(&lock);
    {
        let mut c = cluster.master_for(&lock).conn();
        assert_eq!(int(&mut c, &cmd!("RSEM.TRYSETPERMITS", &sem, 2)), 1);
        assert_eq!(int(&mut c, &cmd!("RLATCH.TRYSETCOUNT", &latch, 1)), 1);
        assert_eq!(
            int(&mut c, &cmd!("RLOCK.ACQUIRE", &held, "keeper", 120_000)),
            1
        );
    }
    let client = rlock_client::Client::builder()
        .cluster(cluster.seeds())
        .retry(10, Duration::from_millis(20))
        .build()
        .unwrap();
    let load = Load::start(&client, &lock, &rw, &sem);

    let mut worst = Duration::ZERO;
    let mut raw_ends = std::collections::BTreeMap::<String, usize>::new();
    let mut ended_waits = 0;
    for round in 0..5 {
        let from = cluster.master_for(&lock);
        let to = cluster
            .masters
            .iter()
            .find(|m| m.port != from.port && (round % 2 == 0 || m.port != cluster.masters[0].port))
            .unwrap();
        load.progress(20, "clients make progress before the move");
        let raw_waiters = park_raw_waiters(from, tag, round);
        let errors_before = rlock_stat(&mut from.conn(), "errors");
        cluster.migrate_slot_atomic(slot, from, to);
        let moved = Instant::now();
        for w in raw_waiters {
            let v = w.pending.reply_within(Duration::from_secs(5));
            let took = moved.elapsed();
            worst = worst.max(took);
            assert!(ended_by_move(&v), "round {round}: {}: {v:?}", w.what);
            let word = error_text(&v).unwrap_or_default();
            *raw_ends
                .entry(word.split(' ').next().unwrap_or_default().to_string())
                .or_default() += 1;
            assert!(
                took < Duration::from_secs(1),
                "{} ended after {took:?}",
                w.what
            );
        }
        let mut f = from.conn();
        // Each wait the move ended counts once in rlock_errors: the raw ones and the client's.
        ended_waits += rlock_stat(&mut f, "errors") - errors_before;
        check_moved(from, to, &rw, &load);
    }
    let (grants, errors) = load.finish();
    eprintln!(
        "{grants} grants; raw waiters on the old node ended with {raw_ends:?}, the worst \
         {worst:?} after the move; waits ended by the moves (raw, and the client's, which it \
         queued again): {ended_waits}; client errors: {errors:?}"
    );
    // Every permit the clients took came back, wherever the moves found it: the semaphore's
    // 2 permits are available on its owner and none is leased (none created or lost).
    rlock_tests::reshard::check_permits(cluster.master_for(&sem), &sem, 2);
    let mut c = cluster.master_for(&held).conn();
    assert_eq!(
        hgetall(&mut c, &held).get("keeper").map(String::as_str),
        Some("1")
    );
    assert_eq!(string(&mut c, &cmd!("GET", &latch)), "1");
}

/// The semaphore's commands the tests above do not move, under an atomic migration: permits
/// without an end (`NOLEASE`), a count with a TTL (`TRYSETPERMITS ... PX`), `SETPERMITS`
/// serving parked waiters and `RELEASE ... XX` while the slot streams (held before the pause),
/// and a waiter still parked on the source when the slot leaves. On the target: the permits
/// counted are the total set plus the one given back, every permit without an end still has
/// none, the TTLs carried over, the waiter left parked ends with `TRYAGAIN`/`MOVED` (nothing
/// granted on the source), and `XX` on the source is redirected without creating a count.
#[test]
fn nolease_permits_ttls_xx_and_setpermits_carry_over_an_atomic_migration() {
    if !has_atomic_migration("nolease_permits_ttls_xx_and_setpermits_carry_over") {
        return;
    }
    let cluster = Cluster::start();
    let sem = "{am}:sem";
    let fresh = "{am}:fresh";
    let leases = semaphore::timeouts(sem);
    let slot = cluster.slot(sem);
    let source = cluster.master_for(sem);
    let target = cluster.other_master(sem);
    let (mut src, mut dst) = (source.conn(), target.conn());
    assert_eq!(
        int(&mut src, &cmd!("RSEM.TRYSETPERMITS", sem, 4, "PX", 60_000)),
        1
    );
    let nolease = permit(raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "NOLEASE")));
    let leased = permit(raw(&mut src, &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000)));
    // Two waiters, FIFO: 3 permits without an end (2 are there), then one leased.
    let w1 = Pending::send(
        source,
        &cmd!("RSEM.ACQUIRE", sem, "PERMITS", 3, "NOLEASE", "BLOCK", 0),
    );
    wait_until(WAIT, "first waiter queued", || {
        rlock_stat(&mut src, "sem_waiters") == 1
    });
    let w2 = Pending::send(
        source,
        &cmd!("RSEM.ACQUIRE", sem, "LEASE", 60_000, "BLOCK", 0),
    );
    wait_until(WAIT, "second waiter queued", || {
        rlock_stat(&mut src, "sem_waiters") == 2
    });

    hold_before_pause(source, true);
    let job = cluster.start_atomic_migration(slot, source, target);
    wait_migration(source, &job, HELD_BEFORE_PAUSE);
    // While the slot streams: 6 in all (2 leased, so 4 added) serves both waiters.
    assert_eq!(int(&mut src, &cmd!("RSEM.SETPERMITS", sem, 6)), 0);
    let w1_ids = rlock_tests::strings(&w1.reply_within(Duration::from_secs(5)));
    assert_eq!(w1_ids.len(), 3, "{w1_ids:?}");
    let w2_id = permit(w2.reply_within(Duration::from_secs(5)));
    assert_eq!(int(&mut src, &cmd!("RSEM.RELEASE", sem, "XX")), 1);
    assert_eq!(
        int(
            &mut src,
            &cmd!("RSEM.TRYSETPERMITS", fresh, 2, "PX", 30_000)
        ),
        1
    );
    // A third waiter, for 2 plain permits (1 is there), still parked when the slot leaves.
    let w3 = Pending::send(source, &cmd!("RSEM.ACQUIRE", sem, "PERMITS", 2, "BLOCK", 0));
    wait_until(WAIT, "third waiter queued", || {
        rlock_stat(&mut src, "sem_waiters") == 1
    });
    let ttls = [
        (sem.to_string(), pttl(&mut src, sem)),
        (leases.clone(), pttl(&mut src, &leases)),
        (fresh.to_string(), pttl(&mut src, fresh)),
    ];
    let read_at = Instant::now();
    hold_before_pause(source, false);
    wait_migration(source, &job, &["success"]);
    cluster.wait_ok();
    let v = w3.reply_within(Duration::from_secs(5));
    assert!(ended_by_move(&v), "the waiter left on the source: {v:?}");

    // On the target: 1 available and 6 leased, 7 in all (6 set, 1 given back); the 4 permits
    // without an end still without one; the TTLs carried over.
    assert_eq!(string(&mut dst, &cmd!("GET", sem)), "1");
    assert_eq!(int(&mut dst, &cmd!("ZCARD", &leases)), 6);
    assert_eq!(semaphore::total(&mut dst, sem), 7);
    for id in w1_ids.iter().chain([&nolease]) {
        assert_eq!(
            semaphore::lease_score(&mut dst, sem, id),
            Some(semaphore::PERMANENT),
            "{id}"
        );
        assert_eq!(int(&mut dst, &cmd!("RSEM.LEASETIME", sem, id)), -1, "{id}");
    }
    for id in [&leased, &w2_id] {
        let left = int(&mut dst, &cmd!("RSEM.LEASETIME", sem, id));
        assert!(left > 0 && left <= 60_000, "{id}: {left}");
    }
    let passed = read_at.elapsed().as_millis() as i64;
    for (key, before) in ttls {
        assert!(before > 0, "{key}: a TTL on the source ({before})");
        rlock_tests::assert_between(
            &format!("{key}'s PTTL on the target"),
            pttl(&mut dst, &key),
            before - passed - margin_ms(100),
            before,
        );
    }
    assert_eq!(string(&mut dst, &cmd!("GET", fresh)), "2");
    // Nothing left on the source, and XX there is sent to the target, creating nothing.
    assert_eq!(rlock_tests::dbsize(&mut src), 0);
    assert_eq!(rlock_stat(&mut src, "waiters"), 0);
    let v = raw(&mut src, &cmd!("RSEM.RELEASE", sem, "XX"));
    assert!(
        error_text(&v).is_some_and(|e| e.starts_with("MOVED")),
        "{v:?}"
    );
    assert_eq!(rlock_tests::dbsize(&mut src), 0);
    // The totals go on from there on the target.
    assert_eq!(int(&mut dst, &cmd!("RSEM.SETPERMITS", sem, 8)), 2);
    assert_eq!(
        int(&mut dst, &cmd!("RSEM.RELEASE", sem, "ID", &w1_ids[0])),
        3
    );
    assert_eq!(semaphore::total(&mut dst, sem), 8);
}

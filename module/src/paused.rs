//! Whether the server pauses writes now, so that a write the module makes on its own (a lease
//! end's grant, an event's, the undo of a grant whose waiter vanished) waits for the pause to
//! end, as Redis' own expiry and eviction do.
//!
//! `CLIENT PAUSE WRITE`, `FAILOVER`, a cluster's manual failover and Valkey 9's atomic slot
//! migration pause client writes so that replicas (or the slot's target) catch up and nothing
//! more is written. A module timer is not a client: left alone it writes through the pause.
//! With a replica attached the server then stops on its own assertion that nothing is
//! propagated during the pause (Redis 7.0-8.x and Valkey: `server.c`, `propagatePendingCommands`,
//! `!isPausedActions(PAUSE_ACTION_REPLICA) ...`; seen with a semaphore lease ending during
//! `CLIENT PAUSE WRITE`, `tests/tests/pause.rs`, and while `CLUSTER MIGRATESLOTS` waited for its
//! target, `tests/tests/reshard_atomic.rs`); without one, the grant is made during the pause,
//! which a failover or a migration counted on not happening.
//!
//! `RM_AvoidReplicaTraffic` is the module API's own answer, on every supported server: true
//! exactly while that action is paused.

use crate::ffi::Ctx;

/// Whether the server pauses writes now.
pub fn writes(ctx: Ctx) -> bool {
    ctx.avoid_replica_traffic()
}

//! Test harness: real `redis-server` processes with the freshly built rlock module.
//!
//! Every [`Server`] gets its own free loopback port and temporary directory, and is killed when
//! dropped, so tests run in parallel and never leave a server behind. The harness never touches
//! the default port 6379. The binary is `RLOCK_SERVER` (any Redis 7.0+ or Valkey 8.1+ server, see
//! [`server_binary`]); a test that meets a server-specific behaviour branches on
//! [`Server::kind`] and asserts what that server does.
//!
//! One file per job: `server.rs` (the harness), `resp.rs` (commands and replies), `names.rs`
//! (Redisson's key names), `info.rs` (what a server reports), `timing.rs` (margins and waiting),
//! `pending.rs` (commands that block), `subscriber.rs` (pub/sub), `snapshot.rs` (whole-dataset
//! comparisons, AOF), `rng.rs` (randomized tests), [`redisson`] (Redisson's own scripts), and the
//! read-write lock's, the metadata's, the cluster's, Sentinel's, TLS's and the torture run's
//! helpers. Everything a test uses is re-exported here: `use rlock_tests::*`.

pub mod cluster;
mod info;
mod metadata;
mod names;
mod pending;
pub mod redisson;
pub mod reshard;
mod resp;
mod rng;
mod rwlock;
pub mod sentinel;
mod server;
mod snapshot;
mod subscriber;
mod timing;
pub mod tls;
pub mod torture;

pub use info::{info_field, info_int, info_pairs, lock_info, rlock_stat, rlock_stat_in, LockInfo};
pub use metadata::{assert_command_info, command_docs, command_summary, map_field, strings};
pub use names::{lock_channel, prefix_name, suffix_name, token_key};
pub use pending::{park, wait_blocked, Pending};
pub use resp::{
    assert_between, dbsize, err, error_text, exists, fields, hgetall, holder, int, nil, pairs,
    permit_ids, pttl, raw, show, string, text,
};
pub use rng::{env_seed, env_u64, Rng};
pub use rwlock::{park_rw, rw_acquire, rw_info, rw_release, rwlock_channel, rwlock_hold, RwInfo};
pub use server::{
    acl_user, cli_binary, client_unblock_reaches_waits, free_port, module_path, server_binary,
    signal, skip_without_module, start_pair, start_replica, wait_replicas, without_module,
    workspace_root, Flavor, Server, ServerKind, ServerOptions,
};
pub use snapshot::{
    aof_text, assert_aof_native, assert_replica_matches, assert_same_data,
    reload_aof_without_module, snapshot, KeyState,
};
pub use subscriber::Subscriber;
pub use timing::{margin, margin_ms, time_scale, wait_until};

pub use redis;
pub use redis::Value;

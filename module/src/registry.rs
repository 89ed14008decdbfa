//! The command table: every command's handler, flags, ACL categories, key position and the
//! `COMMAND DOCS` entries. A new object adds its rows here.

use crate::commands::lock;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};

const KEY: ArgSpec = ArgSpec::new(c"key", Key);
const OWNER: ArgSpec = ArgSpec::new(c"owner", String);
const LEASE: ArgSpec = ArgSpec::new(c"lease_ms", Integer);
const BLOCK: ArgSpec = ArgSpec::option(c"timeout_ms", Integer, c"BLOCK");

pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rlock.acquire",
        handler: lock::acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Acquires a reentrant lock (Redisson RLock layout); with BLOCK waits in a FIFO queue on the server",
        complexity: c"O(1)",
        arity: -4,
        key: KeyAccess::Update,
        args: &[
            KEY,
            OWNER,
            LEASE,
            BLOCK,
            ArgSpec::option(c"fence", Token, c"FENCE"),
        ],
    },
    CommandSpec {
        name: c"rlock.release",
        handler: lock::release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Releases one hold of a lock; the last hold deletes it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 3,
        key: KeyAccess::Delete,
        args: &[KEY, OWNER],
    },
    CommandSpec {
        name: c"rlock.renew",
        handler: lock::renew,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Extends the lease of a lock held by owner",
        complexity: c"O(1)",
        arity: 4,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE],
    },
    CommandSpec {
        name: c"rlock.forcerelease",
        handler: lock::force_release,
        flags: c"write fast",
        acl: c"write fast",
        summary: c"Deletes a lock whoever holds it, publishes, and hands it to the next waiter",
        complexity: c"O(1)",
        arity: 2,
        key: KeyAccess::Delete,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rlock.info",
        handler: lock::info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a lock's owner, holds, TTL, fencing token and waiting queue",
        complexity: c"O(N) where N is the number of waiters",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
];

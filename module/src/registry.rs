//! The command table: every command's handler, flags, ACL categories, key position and the
//! `COMMAND DOCS` entries. A new object adds its rows here.

use crate::commands::{lock, rwlock};
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};

const KEY: ArgSpec = ArgSpec::new(c"key", Key);
const OWNER: ArgSpec = ArgSpec::new(c"owner", String);
const LEASE: ArgSpec = ArgSpec::new(c"lease_ms", Integer);
const BLOCK: ArgSpec = ArgSpec::option(c"timeout_ms", Integer, c"BLOCK");
const MODE: ArgSpec = ArgSpec {
    subargs: &[
        ArgSpec::word(c"read", c"READ"),
        ArgSpec::word(c"write", c"WRITE"),
    ],
    ..ArgSpec::new(c"mode", OneOf)
};

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
    CommandSpec {
        name: c"rrwlock.acquire",
        handler: rwlock::acquire,
        flags: c"write deny-oom blocking",
        acl: c"write slow blocking",
        summary: c"Acquires the read or write side of a read-write lock (Redisson RReadWriteLock layout); with BLOCK waits in a FIFO queue shared by readers and writers",
        complexity: c"O(1) for a read or a first write; O(N) holds when a writer meets a read lock",
        arity: -5,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, MODE, LEASE, BLOCK],
    },
    CommandSpec {
        name: c"rrwlock.release",
        handler: rwlock::release,
        flags: c"write",
        acl: c"write slow",
        summary: c"Releases one read or write hold; the last hold deletes the lock, publishes, and grants queued waiters",
        complexity: c"O(1) for a partial release; O(N) holds for the last",
        arity: 4,
        key: KeyAccess::Delete,
        args: &[KEY, OWNER, MODE],
    },
    CommandSpec {
        name: c"rrwlock.renew",
        handler: rwlock::renew,
        flags: c"write",
        acl: c"write slow",
        summary: c"Extends every lease of owner's read and write holds",
        complexity: c"O(N) where N is the number of read holds",
        arity: 4,
        key: KeyAccess::Update,
        args: &[KEY, OWNER, LEASE],
    },
    CommandSpec {
        name: c"rrwlock.forcerelease",
        handler: rwlock::force_release,
        flags: c"write",
        acl: c"write slow",
        summary: c"Deletes a read-write lock and its read-hold keys whoever holds it, publishes, and grants queued waiters",
        complexity: c"O(N) where N is the number of read holds",
        arity: 2,
        key: KeyAccess::Delete,
        args: &[KEY],
    },
    CommandSpec {
        name: c"rrwlock.info",
        handler: rwlock::info,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Shows a read-write lock's mode, readers, writer, TTL and waiting queue",
        complexity: c"O(N) where N is the number of holders and waiters",
        arity: 2,
        key: KeyAccess::ReadOnly,
        args: &[KEY],
    },
];

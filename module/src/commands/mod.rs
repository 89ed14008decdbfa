//! Command handlers and the command table, one file per object (its handlers and its rows of
//! the table: name, flags, ACL categories, key position, `COMMAND DOCS`): argv → the object's rules → a decision that `apply`
//! performs, with the shared waiting mechanism (`wait`) serving queues before a newcomer is
//! decided and after anything that may free the object, and sessions (`sessions`) for waits
//! that do not block a connection.

pub mod acquire;
pub mod group;
pub mod latch;
pub mod lock;
pub mod rwlock;
pub mod semaphore;
pub mod session;
pub mod top;

use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec};

/// The command table, registered at load in this order: each file's rows. A new object adds
/// its file's `COMMANDS` here.
pub static TABLES: &[&[CommandSpec]] = &[
    lock::COMMANDS,
    top::COMMANDS,
    rwlock::COMMANDS,
    semaphore::COMMANDS,
    latch::COMMANDS,
    session::COMMANDS,
    group::COMMANDS,
];

// The arguments several objects' commands share.
pub const KEY: ArgSpec = ArgSpec::new(c"key", Key);
pub const OWNER: ArgSpec = ArgSpec::new(c"owner", String);
pub const LEASE: ArgSpec = ArgSpec::new(c"lease_ms", Integer);
pub const BLOCK: ArgSpec = ArgSpec::option(c"timeout_ms", Integer, c"BLOCK");
/// `SESSION name [QUEUE request timeout_ms]`, taken by every acquire that can wait.
pub const SESSION: ArgSpec = ArgSpec {
    subargs: &[
        ArgSpec::new(c"session", String),
        ArgSpec {
            subargs: &[
                ArgSpec::new(c"request", Integer),
                ArgSpec::new(c"timeout_ms", Integer),
            ],
            token: Some(c"QUEUE"),
            optional: true,
            ..ArgSpec::new(c"queue", Block)
        },
    ],
    token: Some(c"SESSION"),
    optional: true,
    ..ArgSpec::new(c"session", Block)
};

//! Command handlers, one file per object: argv → the object's rules → a decision that `apply`
//! performs, with the shared waiting mechanism (`wait`) serving queues before a newcomer is
//! decided and after anything that may free the object, and sessions (`sessions`) for waits
//! that do not block a connection.

pub mod acquire;
pub mod latch;
pub mod lock;
pub mod rwlock;
pub mod semaphore;
pub mod session;
pub mod top;

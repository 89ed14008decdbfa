//! The objects' rules in plain Rust: no Redis types, unit- and property-tested with
//! `cargo test`. The skin reads keys through [`store::Store`], asks an object's rules, and
//! performs the [`decision::Decision`] they return.

pub mod args;
pub mod decision;
pub mod error;
pub mod fencing;
pub mod group;
pub mod latch;
pub mod lock;
pub mod names;
pub mod objects;
pub mod observe;
pub mod rwlock;
pub mod semaphore;
pub mod slots;
pub mod stats;
pub mod store;
pub mod wait;

#[cfg(test)]
pub mod mem;

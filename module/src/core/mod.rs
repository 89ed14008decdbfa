//! The lock logic in plain Rust: no Redis types, unit-tested with `cargo test`.

pub mod error;
pub mod lock;
pub mod names;
pub mod parse;
pub mod queue;
pub mod stats;

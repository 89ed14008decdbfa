//! `rlock`: the Rust client for the rlock Redis module (see the client issue).

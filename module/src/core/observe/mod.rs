//! What rlock measures about its objects, in plain Rust: wait- and hold-time histograms
//! (`INFO rlock`), the recently most contended keys and the live holds (`RLOCK.TOP`). Each
//! piece has fixed or capped memory and O(1) work per event; the skin (`crate::observe`)
//! feeds them.

pub mod histogram;
pub mod live;
pub mod top_query;
pub mod topk;

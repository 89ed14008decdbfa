//! The client's reporting when built without the `metrics` feature: the same calls as
//! `facade.rs`, each doing nothing, so the rest of the client calls them alike and the
//! compiler removes them.

use std::time::Duration;

use super::{HoldEnd, Outcome};

/// Reporting that is always off.
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics;

impl Metrics {
    pub(crate) fn is_on(&self) -> bool {
        false
    }

    pub(crate) fn wait_started(&self, _kind: &'static str, _name: &str) {}

    pub(crate) fn wait_ended(&self, _: &'static str, _: &str, _: Outcome, _: Duration) {}

    pub(crate) fn hold_started(&self, _kind: &'static str, _name: &str) {}

    pub(crate) fn hold_ended(&self, _: &'static str, _: &str, _: HoldEnd, _: Duration) {}

    pub(crate) fn renewals(&self, _outcome: &'static str, _n: u64) {}

    pub(crate) fn session_reconnect(&self) {}

    pub(crate) fn permits_in_doubt(&self, _name: &str, _permits: u64) {}

    pub(crate) fn retry(&self, _reason: &'static str) {}
}

/// No recorder to describe the series to.
pub(crate) fn describe() {}

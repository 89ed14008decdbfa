//! The client's reporting through the [`metrics`] facade (the `metrics` feature): the
//! series are listed in [the parent module](super).

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Unit};

use super::{HoldEnd, Outcome};

/// Turns an object's name into the `name` label of its series.
///
/// ```
/// use rlock_client::NameLabel;
/// // Every name its own series: only for a small, fixed set of names.
/// let exact = NameLabel::exact();
/// assert_eq!(exact.apply("orders:42"), "orders:42");
/// // `orders:42` and `orders:43` in one series, `orders:*`.
/// let prefix = NameLabel::prefix_before(':');
/// assert_eq!(prefix.apply("orders:42"), "orders:*");
/// assert_eq!(prefix.apply("payroll"), "payroll");
/// // Whatever the service decides.
/// let custom = NameLabel::new(|name| name.trim_end_matches(char::is_numeric).to_string());
/// assert_eq!(custom.apply("job-17"), "job-");
/// ```
#[derive(Clone)]
pub struct NameLabel(Arc<dyn Fn(&str) -> String + Send + Sync>);

impl NameLabel {
    /// The label is what `f` makes of the name.
    pub fn new(f: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        NameLabel(Arc::new(f))
    }

    /// Every name collapsed to `*`: one series per kind (the default).
    pub fn none() -> Self {
        NameLabel::new(|_| "*".to_string())
    }

    /// The name itself: one series per object.
    pub fn exact() -> Self {
        NameLabel::new(str::to_string)
    }

    /// The name up to its first `sep`, then `sep*` (`orders:42` → `orders:*`); a name without
    /// `sep` is its own label.
    pub fn prefix_before(sep: char) -> Self {
        NameLabel::new(move |name| match name.split_once(sep) {
            Some((head, _)) => format!("{head}{sep}*"),
            None => name.to_string(),
        })
    }

    /// The label of `name`.
    pub fn apply(&self, name: &str) -> String {
        (self.0)(name)
    }
}

impl Default for NameLabel {
    fn default() -> Self {
        NameLabel::none()
    }
}

impl std::fmt::Debug for NameLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameLabel(..)")
    }
}

/// The client's reporting: `None` inside when off.
#[derive(Clone, Debug, Default)]
pub(crate) struct Metrics(Option<NameLabel>);

impl Metrics {
    pub(crate) fn new(names: Option<NameLabel>) -> Self {
        Metrics(names)
    }

    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    fn labels(&self, kind: &'static str, name: &str) -> Option<[(&'static str, String); 2]> {
        let names = self.0.as_ref()?;
        Some([("kind", kind.to_string()), ("name", names.apply(name))])
    }

    pub(crate) fn wait_started(&self, kind: &'static str, name: &str) {
        if let Some(l) = self.labels(kind, name) {
            gauge!("rlock_waiting", &l).increment(1.0);
        }
    }

    pub(crate) fn wait_ended(
        &self,
        kind: &'static str,
        name: &str,
        outcome: Outcome,
        waited: Duration,
    ) {
        let Some([k, n]) = self.labels(kind, name) else {
            return;
        };
        gauge!("rlock_waiting", &[k.clone(), n.clone()]).decrement(1.0);
        let l = [k, n, ("outcome", outcome.label().to_string())];
        counter!("rlock_acquires_total", &l).increment(1);
        histogram!("rlock_wait_seconds", &l).record(waited.as_secs_f64());
    }

    pub(crate) fn hold_started(&self, kind: &'static str, name: &str) {
        if let Some(l) = self.labels(kind, name) {
            gauge!("rlock_held", &l).increment(1.0);
        }
    }

    pub(crate) fn hold_ended(&self, kind: &'static str, name: &str, end: HoldEnd, held: Duration) {
        let Some([k, n]) = self.labels(kind, name) else {
            return;
        };
        gauge!("rlock_held", &[k.clone(), n.clone()]).decrement(1.0);
        if end == HoldEnd::Lost {
            counter!("rlock_lost_holds_total", &[k.clone(), n.clone()]).increment(1);
        }
        let ended = match end {
            HoldEnd::Released => "released",
            HoldEnd::Lost => "lost",
            HoldEnd::Expired => "expired",
        };
        histogram!("rlock_hold_seconds", &[k, n, ("ended", ended.to_string())])
            .record(held.as_secs_f64());
    }

    pub(crate) fn renewals(&self, outcome: &'static str, n: u64) {
        if self.0.is_some() && n > 0 {
            counter!("rlock_watchdog_renewals_total", "outcome" => outcome).increment(n);
        }
    }

    pub(crate) fn session_reconnect(&self) {
        if self.0.is_some() {
            counter!("rlock_session_reconnects_total").increment(1);
        }
    }

    pub(crate) fn permits_in_doubt(&self, name: &str, permits: u64) {
        if let Some(l) = self.labels("semaphore", name) {
            counter!("rlock_permits_in_doubt_total", &l).increment(permits);
        }
    }

    pub(crate) fn retry(&self, reason: &'static str) {
        if self.0.is_some() {
            counter!("rlock_retries_total", "reason" => reason).increment(1);
        }
    }
}

/// Units and help texts, for recorders that print them (Prometheus' `# HELP`): told to the
/// recorder installed when the client is built.
pub(crate) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("rlock_acquires_total", "Acquires by how they ended.");
    describe_histogram!(
        "rlock_wait_seconds",
        Unit::Seconds,
        "Time from an acquire's call to its outcome."
    );
    describe_gauge!("rlock_waiting", "Acquires under way.");
    describe_gauge!("rlock_held", "Holds this client has now.");
    describe_histogram!(
        "rlock_hold_seconds",
        Unit::Seconds,
        "Time from a grant to the hold's end (released or lost)."
    );
    describe_counter!(
        "rlock_lost_holds_total",
        "Holds that ended by anything but their owner's release (lease end, FORCERELEASE, DEL, failover)."
    );
    describe_counter!(
        "rlock_watchdog_renewals_total",
        "Lease renewals by the watchdog, by outcome."
    );
    describe_counter!(
        "rlock_session_reconnects_total",
        "Session listeners that had to connect again."
    );
    describe_counter!("rlock_retries_total", "Commands sent again, by reason.");
    describe_counter!(
        "rlock_permits_in_doubt_total",
        "Plain semaphore permits that may have been taken and be held by nobody (an acquire's reply lost, a give-back that failed)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    /// A series as recorded: its name, its labels, its value.
    type Series = (String, Vec<(String, String)>, DebugValue);

    fn snapshot(f: impl FnOnce()) -> Vec<Series> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, f);
        let mut out: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(k, _, _, v)| {
                let key = k.key();
                let labels = key
                    .labels()
                    .map(|l| (l.key().to_string(), l.value().to_string()))
                    .collect();
                (key.name().to_string(), labels, v)
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn off_records_nothing() {
        let m = Metrics::new(None);
        let seen = snapshot(|| {
            m.wait_started("lock", "a");
            m.wait_ended("lock", "a", Outcome::Acquired, Duration::from_millis(3));
            m.renewals("renewed", 4);
            m.retry("connection");
        });
        assert!(seen.is_empty(), "{seen:?}");
    }

    #[test]
    fn an_acquire_and_its_hold_are_counted_under_the_collapsed_name() {
        let m = Metrics::new(Some(NameLabel::prefix_before(':')));
        let seen = snapshot(|| {
            m.wait_started("lock", "orders:1");
            m.wait_ended(
                "lock",
                "orders:1",
                Outcome::Acquired,
                Duration::from_millis(250),
            );
            m.hold_started("lock", "orders:1");
            m.hold_ended("lock", "orders:1", HoldEnd::Lost, Duration::from_secs(2));
            m.renewals("renewed", 3);
        });
        let find = |name: &str, l: &[(&str, &str)]| {
            seen.iter()
                .find(|(n, ls, _)| n == name && *ls == labels(l))
                .map(|(_, _, v)| v)
                .unwrap_or_else(|| panic!("{name} {l:?} not in {seen:?}"))
        };
        let kn = [("kind", "lock"), ("name", "orders:*")];
        let acquired = [kn[0], kn[1], ("outcome", "acquired")];
        assert_eq!(
            *find("rlock_acquires_total", &acquired),
            DebugValue::Counter(1)
        );
        let DebugValue::Histogram(w) = find("rlock_wait_seconds", &acquired) else {
            panic!()
        };
        assert_eq!(w.len(), 1);
        assert!((w[0].into_inner() - 0.25).abs() < 1e-9);
        assert_eq!(*find("rlock_waiting", &kn), DebugValue::Gauge(0.0.into()));
        assert_eq!(*find("rlock_held", &kn), DebugValue::Gauge(0.0.into()));
        assert_eq!(*find("rlock_lost_holds_total", &kn), DebugValue::Counter(1));
        let lost = [kn[0], kn[1], ("ended", "lost")];
        let DebugValue::Histogram(h) = find("rlock_hold_seconds", &lost) else {
            panic!()
        };
        assert!((h[0].into_inner() - 2.0).abs() < 1e-9);
        assert_eq!(
            *find("rlock_watchdog_renewals_total", &[("outcome", "renewed")]),
            DebugValue::Counter(3)
        );
    }
}

//! Time in the tests: the one scale of every timing margin, and waiting for a condition.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The one scale of every timing margin in the tests: how much longer than on the 2-core
/// development VM something may take and still count as prompt. `RLOCK_TIME_SCALE`, a positive
/// number, default 1; a slower or busier machine sets it for the whole run
/// (`RLOCK_TIME_SCALE=3 make test`). It widens margins only, never the times a test gives the
/// server (leases, wait timeouts), so what is checked stays the same.
pub fn time_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("RLOCK_TIME_SCALE") {
        Err(_) => 1.0,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => x,
            _ => panic!("RLOCK_TIME_SCALE={v:?}: expected a positive number"),
        },
    })
}

/// A timing margin `d`, widened by [`time_scale`].
pub fn margin(d: Duration) -> Duration {
    d.mul_f64(time_scale())
}

/// A timing margin of `ms` milliseconds, widened by [`time_scale`].
pub fn margin_ms(ms: i64) -> i64 {
    (ms as f64 * time_scale()).round() as i64
}

/// Wait until `cond` holds, checking every 2 ms, or panic with `what` after `timeout` (as
/// given: a tight one is passed through [`margin`] by its caller).
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

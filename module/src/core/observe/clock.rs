//! The clock of wait and hold times: microseconds of a monotonic clock, from the first reading
//! in this process. Not the server's `mstime()`: that is in milliseconds (a hand-off takes
//! tens of microseconds) and moves with the wall clock, which must not stretch or shrink a
//! measured wait. One vDSO `clock_gettime` per reading.

use std::sync::OnceLock;
use std::time::Instant;

static BASE: OnceLock<Instant> = OnceLock::new();

/// Microseconds since the first call in this process (never decreasing).
pub fn now_us() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_never_goes_back() {
        let a = super::now_us();
        let b = super::now_us();
        assert!(b >= a);
    }
}

//! The clock of wait and hold times: microseconds of the monotonic clock. Not the server's
//! `mstime()`: that is in milliseconds (a hand-off takes tens of microseconds) and moves with
//! the wall clock, which must not stretch or shrink a measured wait.
//!
//! Read with `clock_gettime(CLOCK_MONOTONIC)` itself (a vDSO call, no system call): callgrind
//! counted about 100 instructions per reading through `Instant::elapsed` (its checked
//! subtraction and `u128` conversion) against 26 this way, and a lock's acquire and release
//! read it once each.

/// Microseconds of the monotonic clock (never decreasing; only differences mean anything).
pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on every Linux and
    // macOS this module builds for, so the call cannot fail (a failure would leave zeros, a
    // reading in the past, which the callers' saturating differences absorb).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

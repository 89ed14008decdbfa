//! Operations per object: requests built, replies read, holds recorded. Plain async functions
//! over the transport and the wait path, the same for the sync and async APIs.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::wait::millis;

pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod rwlock;

/// A lease in whole milliseconds, as the server takes it. A lease shorter than a millisecond is
/// rounded up to 1 ms (every duration is sent rounded up); a zero lease is refused, as the
/// server would.
pub(crate) fn lease_millis(d: Duration) -> Result<u64> {
    if d.is_zero() {
        return Err(Error::InvalidArgument(
            "the lease must be longer than zero".into(),
        ));
    }
    let ms = millis(d);
    if ms > (i64::MAX as u64) / 4 {
        return Err(Error::InvalidArgument("the lease is too long".into()));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_millisecond_leases_round_up_to_one_millisecond() {
        assert_eq!(lease_millis(Duration::from_nanos(1)).unwrap(), 1);
        assert_eq!(lease_millis(Duration::from_micros(500)).unwrap(), 1);
        assert_eq!(lease_millis(Duration::from_micros(1001)).unwrap(), 2);
        assert_eq!(lease_millis(Duration::from_secs(30)).unwrap(), 30_000);
        assert!(matches!(
            lease_millis(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lease_millis(Duration::MAX),
            Err(Error::InvalidArgument(_))
        ));
    }
}

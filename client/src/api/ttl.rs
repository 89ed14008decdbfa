//! [`Ttl`]: time left on a lease.

use std::time::Duration;

/// Time left on a lock's lease, as `PTTL` reports it.
///
/// ```
/// use rlock_client::Ttl;
/// use std::time::Duration;
///
/// assert_eq!(Ttl::from_pttl(-2), Ttl::NotLocked);
/// assert_eq!(Ttl::from_pttl(1500).remaining(), Some(Duration::from_millis(1500)));
/// assert_eq!(Ttl::NoExpiry.as_millis(), -1); // Redisson's remainTimeToLive value
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// The lock does not exist (Redisson: `-2`).
    NotLocked,
    /// The lock exists without an expiry (Redisson: `-1`); only foreign writers do that.
    NoExpiry,
    /// The lock expires after this long.
    Expires(Duration),
}

impl Ttl {
    /// Interpret a `PTTL` reply.
    ///
    /// ```
    /// assert_eq!(rlock_client::Ttl::from_pttl(-1), rlock_client::Ttl::NoExpiry);
    /// ```
    pub fn from_pttl(ms: i64) -> Ttl {
        match ms {
            -1 => Ttl::NoExpiry,
            ms if ms < 0 => Ttl::NotLocked,
            ms => Ttl::Expires(Duration::from_millis(ms as u64)),
        }
    }

    /// The time left, if the lock exists and expires.
    ///
    /// ```
    /// assert_eq!(rlock_client::Ttl::NotLocked.remaining(), None);
    /// ```
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Ttl::Expires(d) => Some(*d),
            _ => None,
        }
    }

    /// Redisson's `remainTimeToLive()` value: milliseconds, `-2` absent, `-1` no expiry.
    ///
    /// ```
    /// assert_eq!(rlock_client::Ttl::from_pttl(250).as_millis(), 250);
    /// ```
    pub fn as_millis(&self) -> i64 {
        match self {
            Ttl::NotLocked => -2,
            Ttl::NoExpiry => -1,
            Ttl::Expires(d) => d.as_millis() as i64,
        }
    }
}

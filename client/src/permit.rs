//! [`PermitId`]: the id of a leased permit of a permit-expirable semaphore.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The id of one leased permit of a [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore):
/// 16 random bytes, chosen by the server, shown as 32 lowercase hex characters (Redisson's
/// form), so an id handed out by rlock can be released by a Java service on Redisson and the
/// reverse.
///
/// ```
/// use rlock_client::PermitId;
///
/// let id: PermitId = "7034183b6982aae9385b7798796c1ef5".parse()?;
/// assert_eq!(id.to_string(), "7034183b6982aae9385b7798796c1ef5");
/// assert_eq!(id.as_bytes()[0], 0x70);
/// assert!("not hex".parse::<PermitId>().is_err());
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId([u8; 16]);

impl PermitId {
    /// The id from its 16 bytes (as stored in Redis).
    pub fn from_bytes(bytes: [u8; 16]) -> PermitId {
        PermitId(bytes)
    }

    /// The 16 bytes stored in Redis.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// A fresh id of 16 bytes (a random UUID; Redisson's `generateId`: 16 random bytes), for
    /// permits this client leases over Redisson's protocol (its script takes the ids given).
    pub(crate) fn new_random() -> PermitId {
        PermitId(uuid::Uuid::new_v4().into_bytes())
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// 32 hex characters, either case.
    fn from_str(s: &str) -> Result<PermitId, Error> {
        let bad =
            || Error::InvalidArgument(format!("'{s}' is not a permit id (32 hex characters)"));
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_both_ways() {
        let id: PermitId = "00FF10ab00000000000000000000000a".parse().unwrap();
        assert_eq!(id.to_string(), "00ff10ab00000000000000000000000a");
        assert_eq!(PermitId::from_bytes(*id.as_bytes()), id);
        for bad in [
            "",
            "00ff",
            "zz000000000000000000000000000000",
            "+f000000000000000000000000000000",
        ] {
            assert!(bad.parse::<PermitId>().is_err(), "{bad}");
        }
    }
}

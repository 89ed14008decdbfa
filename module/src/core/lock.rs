//! The reentrant lock's decisions, from what the key holds (Redisson's RLock layout: a hash whose
//! one field, the owner, counts the holds; PEXPIRE is the lease). The skin reads the key into a
//! [`View`], asks here what to do, and performs the writes.

use super::error::CmdError;

/// What the lock key holds, as far as one owner is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// No key: the lock is free.
    Free,
    /// A hash where `mine` is this owner's field: `None` when absent, `Some(None)` when it is
    /// not an integer, `Some(Some(n))` for a hold count.
    Hash { mine: Option<Option<i64>> },
    /// Any other type: not a lock.
    WrongType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquire {
    /// Free with nobody queued: create `{owner: 1}`.
    Grant,
    /// Free but waiters are queued: they come first (hand off, then decide again).
    ServeQueueFirst,
    /// Already held by this owner: set the count to `count` (re-entry never waits).
    Reenter { count: i64 },
    /// Held by someone else: wait if allowed, else fail.
    Busy,
}

pub fn acquire(view: View, queued: bool) -> Result<Acquire, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free if queued => Ok(Acquire::ServeQueueFirst),
        View::Free => Ok(Acquire::Grant),
        View::Hash { mine: None } => Ok(Acquire::Busy),
        View::Hash { mine: Some(None) } => Err(CmdError::CorruptCount),
        View::Hash {
            mine: Some(Some(n)),
        } => {
            // A count below 1 was not written by a lock client; re-entry repairs it to 1.
            let count = n.max(0).checked_add(1).ok_or(CmdError::CountOverflow)?;
            Ok(Acquire::Reenter { count })
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Holds remain: write the new count, keep the TTL.
    Partial { remaining: i64 },
    /// Last hold: delete the key, publish, hand off.
    Full,
}

pub fn release(view: View) -> Result<Release, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free | View::Hash { mine: None } => Err(CmdError::NotOwner),
        View::Hash { mine: Some(None) } => Err(CmdError::CorruptCount),
        View::Hash {
            mine: Some(Some(n)),
        } if n > 1 => Ok(Release::Partial { remaining: n - 1 }),
        View::Hash {
            mine: Some(Some(_)),
        } => Ok(Release::Full),
    }
}

/// Whether RENEW extends the lease (the owner holds it, as Redisson's `hexists` check).
pub fn renew(view: View) -> Result<bool, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Hash { mine: Some(_) } => Ok(true),
        View::Free | View::Hash { mine: None } => Ok(false),
    }
}

/// Whether FORCERELEASE deletes the key (never data that is not a lock).
pub fn force_release(view: View) -> Result<bool, CmdError> {
    match view {
        View::WrongType => Err(CmdError::WrongType),
        View::Free => Ok(false),
        View::Hash { .. } => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE_2: View = View::Hash {
        mine: Some(Some(2)),
    };
    const MINE_1: View = View::Hash {
        mine: Some(Some(1)),
    };
    const OTHERS: View = View::Hash { mine: None };
    const CORRUPT: View = View::Hash { mine: Some(None) };

    #[test]
    fn acquire_decisions() {
        assert_eq!(acquire(View::Free, false), Ok(Acquire::Grant));
        assert_eq!(acquire(View::Free, true), Ok(Acquire::ServeQueueFirst));
        assert_eq!(acquire(MINE_2, true), Ok(Acquire::Reenter { count: 3 }));
        assert_eq!(acquire(OTHERS, false), Ok(Acquire::Busy));
        assert_eq!(acquire(CORRUPT, false), Err(CmdError::CorruptCount));
        assert_eq!(acquire(View::WrongType, false), Err(CmdError::WrongType));
        assert_eq!(
            acquire(
                View::Hash {
                    mine: Some(Some(i64::MAX))
                },
                false
            ),
            Err(CmdError::CountOverflow)
        );
        assert_eq!(
            acquire(
                View::Hash {
                    mine: Some(Some(-4))
                },
                false
            ),
            Ok(Acquire::Reenter { count: 1 })
        );
    }

    #[test]
    fn release_decisions() {
        assert_eq!(release(MINE_2), Ok(Release::Partial { remaining: 1 }));
        assert_eq!(release(MINE_1), Ok(Release::Full));
        assert_eq!(
            release(View::Hash {
                mine: Some(Some(0))
            }),
            Ok(Release::Full)
        );
        assert_eq!(release(OTHERS), Err(CmdError::NotOwner));
        assert_eq!(release(View::Free), Err(CmdError::NotOwner));
        assert_eq!(release(CORRUPT), Err(CmdError::CorruptCount));
        assert_eq!(release(View::WrongType), Err(CmdError::WrongType));
    }

    #[test]
    fn renew_and_force() {
        assert_eq!(renew(MINE_1), Ok(true));
        assert_eq!(renew(OTHERS), Ok(false));
        assert_eq!(renew(View::Free), Ok(false));
        assert_eq!(renew(View::WrongType), Err(CmdError::WrongType));
        assert_eq!(force_release(OTHERS), Ok(true));
        assert_eq!(force_release(View::Free), Ok(false));
        assert_eq!(force_release(View::WrongType), Err(CmdError::WrongType));
    }
}

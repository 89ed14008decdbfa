//! The read-write lock's arguments: `RRWLOCK.*` argv checked and parsed.

use super::{Mode, MODE, WRITE_SUFFIX};
use crate::core::args::{self, WaitArgs, WAIT_OPTS};
use crate::core::error::CmdError;

/// `RRWLOCK.ACQUIRE key owner READ|WRITE lease_ms [BLOCK timeout_ms] [SESSION name [QUEUE
/// request timeout_ms]]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub mode: Mode,
    pub lease_ms: i64,
    pub wait: WaitArgs<'a>,
}

/// An owner that cannot collide with Redisson's own fields.
pub(super) fn owner(bytes: &[u8]) -> Result<(), CmdError> {
    args::owner(bytes)?;
    if bytes == MODE || bytes.ends_with(WRITE_SUFFIX) {
        return Err(CmdError::ReservedOwner);
    }
    Ok(())
}

pub(super) fn mode(word: &[u8]) -> Result<Mode, CmdError> {
    Mode::of(word).ok_or_else(|| {
        CmdError::Syntax(format!(
            "expected READ or WRITE, got '{}'",
            crate::core::error::echo(word)
        ))
    })
}

pub fn parse_acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, CmdError> {
    args::arity(argv, |n| n >= 5, "rrwlock.acquire")?;
    owner(argv[2])?;
    let mut wait = WaitArgs::new();
    args::options(&argv[5..], &WAIT_OPTS, |k, v| wait.take(k, v))?;
    Ok(AcquireArgs {
        mode: mode(argv[3])?,
        lease_ms: args::lease(argv[4])?,
        wait: wait.finish()?,
    })
}

/// `RRWLOCK.RELEASE key owner READ|WRITE`
pub fn parse_release(argv: &[&[u8]]) -> Result<Mode, CmdError> {
    args::arity(argv, |n| n == 4, "rrwlock.release")?;
    owner(argv[2])?;
    mode(argv[3])
}

/// `RRWLOCK.RENEW key owner lease_ms`
pub fn parse_renew(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 4, "rrwlock.renew")?;
    owner(argv[2])?;
    args::lease(argv[3])
}

/// `RRWLOCK.FORCERELEASE key`
pub fn parse_force_release(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, "rrwlock.forcerelease")
}

/// `RRWLOCK.INFO key`
pub fn parse_info(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, "rrwlock.info")
}

//! Several locks taken as one: all of them (Redisson's `RedissonMultiLock`) or a majority of
//! independent servers (`RedissonRedLock`), with one wait budget for the whole acquisition.
//!
//! Each round tries every lock not held yet, all at once (one round trip per server, in
//! parallel). When not enough were taken, the caller waits on the server for the first lock,
//! in the handle's fixed order, that someone else holds, keeping only the locks before it and
//! giving back those after it. A caller therefore only ever waits while holding locks that come
//! earlier in the order, as with ordered locking: two multi-locks over the same locks cannot
//! deadlock each other, and no polling is needed (the wait is the server's queue). Once the
//! waited lock is granted, the next round tries the rest.
//!
//! Leases: every lock is taken with the caller's lease; when the acquisition took more than one
//! round, all locks are renewed to the lease at the end, so they expire together, and the
//! validity (RedLock: lease − elapsed − clock drift) is counted from that renewal.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::lock::{self as op, Target};
use crate::error::{Error, Result};
use crate::holds::HoldState;
use crate::owner::Owner;
use crate::transport::overlapped;
use crate::wait::Wait;

/// One lock of the set, with the owner it is taken for in this call.
pub(crate) struct Part<'a> {
    pub(crate) t: Target<'a>,
    pub(crate) owner: Owner,
}

/// How many locks make the set held, and the clock drift allowed for (RedLock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    pub(crate) quorum: usize,
    /// Subtract the clock drift (1 % of the lease + 2 ms, as in the Redlock algorithm) from the
    /// validity.
    pub(crate) drift: bool,
}

impl Rule {
    fn all_required(&self, n: usize) -> bool {
        self.quorum >= n
    }
}

/// A set taken: the holds of the locks taken (by index), and until when it may be counted on.
pub(crate) struct Taken {
    pub(crate) held: Vec<(usize, Arc<HoldState>)>,
    pub(crate) valid_until: Option<Instant>,
}

/// What a round left each lock in.
enum Got {
    Held { state: Arc<HoldState>, round: u32 },
    Busy,
    Failed(Error),
    Untried,
}

/// Take the set per `rule`, `lease` and `wait`; `None` when not taken by the end of the wait.
/// Whatever was taken is given back when the set is not taken, and when the caller goes away
/// in the middle.
pub(crate) async fn acquire(
    parts: &[Part<'_>],
    rule: Rule,
    lease: Option<Duration>,
    wait: Wait,
) -> Result<Option<Taken>> {
    let deadline = match wait {
        Wait::No => Some(Instant::now()),
        Wait::For(d) => Instant::now().checked_add(d),
        Wait::Forever => None,
    };
    let mut taking = Taking {
        parts,
        got: parts.iter().map(|_| Got::Untried).collect(),
        armed: true,
    };
    let r = taking.run(rule, lease, deadline).await;
    if !matches!(r, Ok(Some(_))) {
        taking.give_back(|_| true).await;
    }
    taking.armed = false;
    r
}

struct Taking<'p, 'a> {
    parts: &'p [Part<'a>],
    got: Vec<Got>,
    /// Dropped armed (the caller went away): whatever is held is given back.
    armed: bool,
}

impl Taking<'_, '_> {
    fn held(&self) -> usize {
        self.got
            .iter()
            .filter(|g| matches!(g, Got::Held { .. }))
            .count()
    }

    async fn run(
        &mut self,
        rule: Rule,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<Taken>> {
        let n = self.parts.len();
        let pause = self.parts[0].t.ctx.config.retry_delay;
        let mut round = 0;
        loop {
            round += 1;
            let started = Instant::now();
            self.try_rest(lease, round).await;
            if rule.all_required(n) {
                if let Some(i) = self.got.iter().position(|g| matches!(g, Got::Failed(_))) {
                    let Got::Failed(e) = std::mem::replace(&mut self.got[i], Got::Untried) else {
                        unreachable!()
                    };
                    return Err(e);
                }
            }
            if self.held() >= rule.quorum {
                let (from, all_held) = self.align(lease, round, started).await?;
                if all_held >= rule.quorum {
                    let valid_until = lease.map(|l| from + l - drift(rule, l));
                    if valid_until.is_none_or(|t| t > Instant::now()) {
                        return Ok(Some(self.taken(valid_until)));
                    }
                    // Took so long that nothing is left of the lease: start again.
                    self.give_back(|_| true).await;
                }
                continue;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
                None => None,
            };
            let busy = self.got.iter().position(|g| matches!(g, Got::Busy));
            let Some(k) = busy else {
                // Only unreachable or refusing servers stand in the way (RedLock): nothing to
                // wait on, so give everything back and try again after a pause.
                self.give_back(|_| true).await;
                let pause = left.map_or(pause, |l| l.min(pause));
                self.parts[0].t.ctx.bg.sleep(pause).await;
                continue;
            };
            // Keep the locks before `k`, give back those after it, and wait for `k`.
            self.give_back(|i| i > k).await;
            let p = &self.parts[k];
            let wait_k = match left {
                Some(l) => Wait::For(l),
                None => Wait::Forever,
            };
            let r =
                p.t.ctx
                    .bg
                    .enter(op::acquire(p.t, &p.owner, lease, wait_k))
                    .await;
            self.got[k] = match r {
                Ok(Some(g)) => Got::Held {
                    state: g.state,
                    round,
                },
                // The wait ran out.
                Ok(None) => return Ok(None),
                // A cancelled wait ends the whole acquire (what it took is given back).
                Err(e) if rule.all_required(n) || matches!(e, Error::Cancelled { .. }) => {
                    return Err(e)
                }
                Err(e) => Got::Failed(e),
            };
        }
    }

    /// Try every lock not held, all at once.
    async fn try_rest(&mut self, lease: Option<Duration>, round: u32) {
        let todo: Vec<usize> = (0..self.parts.len())
            .filter(|&i| !matches!(self.got[i], Got::Held { .. }))
            .collect();
        let tries = todo.iter().map(|&i| {
            let p = &self.parts[i];
            p.t.ctx
                .bg
                .enter(op::acquire(p.t, &p.owner, lease, Wait::No))
        });
        for (i, r) in todo.iter().zip(overlapped(join_all(tries)).await) {
            self.got[*i] = match r {
                Ok(Some(g)) => Got::Held {
                    state: g.state,
                    round,
                },
                Ok(None) => Got::Busy,
                Err(e) => Got::Failed(e),
            };
        }
    }

    /// With a lease, locks taken in earlier rounds have part of it behind them: renew every
    /// held lock to the full lease so they all end together. Returns when the leases were
    /// (re)started and how many locks are still held (a lock whose lease ran out while the
    /// others were awaited is given back and tried again).
    async fn align(
        &mut self,
        lease: Option<Duration>,
        round: u32,
        started: Instant,
    ) -> Result<(Instant, usize)> {
        let Some(lease) = lease else {
            return Ok((started, self.held()));
        };
        let older = |g: &Got| matches!(g, Got::Held { round: r, .. } if *r < round);
        if !self.got.iter().any(older) {
            return Ok((started, self.held()));
        }
        let from = Instant::now();
        let held: Vec<usize> = (0..self.parts.len())
            .filter(|&i| matches!(self.got[i], Got::Held { .. }))
            .collect();
        let renewals = held.iter().map(|&i| {
            let p = &self.parts[i];
            p.t.ctx.bg.enter(op::renew(p.t, &p.owner, lease))
        });
        let outcomes = overlapped(join_all(renewals)).await;
        let mut lost = Vec::new();
        for (i, r) in held.into_iter().zip(outcomes) {
            match r {
                Ok(true) => {}
                Ok(false) => lost.push(i),
                Err(e) => {
                    lost.push(i);
                    tracing::debug!(error = %e, "rlock: a multi-lock's renewal failed");
                }
            }
        }
        // Whatever is left of a lost hold (a re-entry count) is given back before retrying.
        self.give_back(|i| lost.contains(&i)).await;
        Ok((from, self.held()))
    }

    fn taken(&mut self, valid_until: Option<Instant>) -> Taken {
        let held = self
            .got
            .iter()
            .enumerate()
            .filter_map(|(i, g)| match g {
                Got::Held { state, .. } => Some((i, state.clone())),
                _ => None,
            })
            .collect();
        Taken { held, valid_until }
    }

    /// Release the held locks whose index `which` picks, all at once (errors are logged: a
    /// lock that can't be released ends with its lease).
    async fn give_back(&mut self, which: impl Fn(usize) -> bool) {
        let picked: Vec<usize> = (0..self.parts.len())
            .filter(|&i| which(i) && matches!(self.got[i], Got::Held { .. }))
            .collect();
        release_each(self.parts, &picked).await;
        for i in picked {
            self.got[i] = Got::Untried;
        }
    }
}

impl Drop for Taking<'_, '_> {
    fn drop(&mut self) {
        if self.armed && self.held() > 0 {
            let ctx = self.parts[0].t.ctx;
            ctx.bg.block_on(self.give_back(|_| true));
        }
    }
}

fn drift(rule: Rule, lease: Duration) -> Duration {
    match rule.drift {
        true => lease / 100 + Duration::from_millis(2),
        false => Duration::ZERO,
    }
}

/// Release the locks `which` (indices of `parts`) all at once: each one's outcome.
pub(crate) async fn release_each(parts: &[Part<'_>], which: &[usize]) -> Vec<Result<u64>> {
    let releases = which.iter().map(|&i| {
        let p = &parts[i];
        p.t.ctx.bg.enter(op::release(p.t, &p.owner))
    });
    let outcomes = overlapped(join_all(releases)).await;
    for e in outcomes.iter().filter_map(|r| r.as_ref().err()) {
        if !matches!(e, Error::NotOwner { .. }) {
            tracing::warn!(error = %e, "rlock: can't release one lock of a multi-lock");
        }
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_and_two_milliseconds() {
        let red = Rule {
            quorum: 2,
            drift: true,
        };
        assert_eq!(
            drift(red, Duration::from_secs(10)),
            Duration::from_millis(102)
        );
        let multi = Rule {
            quorum: 3,
            drift: false,
        };
        assert_eq!(drift(multi, Duration::from_secs(10)), Duration::ZERO);
        assert!(multi.all_required(3) && !red.all_required(3));
    }
}

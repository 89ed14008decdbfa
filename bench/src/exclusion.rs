//! The benchmark's own check of mutual exclusion. A client marks itself inside from the moment
//! its acquire's reply arrives to the moment it sends its release (a [`Held`] guard, dropped
//! right before the release is sent), so a second holder overlapping it by anything down to a
//! few instructions is seen: two holders a network round trip apart overlap for that whole
//! round trip. Two independent checks:
//!
//! - the marker: entering finds someone inside who may not be there (a second exclusive
//!   holder, a reader beside a writer, more permits out than exist), or leaving finds that
//!   someone is inside or (for an exclusive holder) entered meanwhile;
//! - a read-modify-write counter (exclusive holders only): read on entry, written back plus one
//!   on exit with a plain load and store, not an atomic add, so two exclusive sections that
//!   overlap lose an update. At the end the counter must equal the number of exclusive
//!   sections; every lost update is a violation. A reader reads the counter on entry and on
//!   exit: a writer inside meanwhile changed it.
//!
//! A violation fails the run (`Report::violations`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};

/// The protected section's own work, the same in every scenario and for every protocol: a few
/// hundred nanoseconds of spinning (about 1-3 % of a contended hand-off), so that the window
/// the checks watch is a real section and not a single instruction.
pub fn critical() {
    for _ in 0..50 {
        std::hint::spin_loop();
    }
}

/// What a writer adds to the state: anyone else inside sees it negative.
const WRITER: i64 = -1_000_000;

/// Who is inside: readers count 1 each, a writer (or an exclusive holder) [`WRITER`].
#[derive(Default)]
pub struct Exclusion {
    state: AtomicI64,
    violations: AtomicU64,
    /// Written by exclusive holders only, read-modify-write across the whole section.
    counter: AtomicU64,
    /// Exclusive sections completed.
    sections: AtomicU64,
    /// Sections entered, of either kind: an exclusive holder sees anyone who entered during
    /// its section, even someone who left again before it did.
    entries: AtomicU64,
}

/// Inside a critical section until dropped: drop it right before sending the release.
#[must_use = "the marker is held until this is dropped: drop it right before the release"]
pub struct Held<'a> {
    x: &'a Exclusion,
    exclusive: bool,
    /// Someone was inside who may not be (seen on entry).
    bad: bool,
    /// The counter as read on entry.
    read: u64,
    /// `entries` once this section entered.
    entry: u64,
}

impl Exclusion {
    /// An exclusive holder's (or a writer's) critical section, from now until the guard drops.
    pub fn exclusive(&self) -> Held<'_> {
        let before = self.state.fetch_add(WRITER, SeqCst);
        Held {
            x: self,
            exclusive: true,
            bad: before != 0,
            read: self.counter.load(SeqCst),
            entry: self.entries.fetch_add(1, SeqCst) + 1,
        }
    }

    /// A reader's critical section: others may read at the same time, nobody may write.
    pub fn shared(&self) -> Held<'_> {
        let before = self.state.fetch_add(1, SeqCst);
        Held {
            x: self,
            exclusive: false,
            bad: before < 0,
            read: self.counter.load(SeqCst),
            entry: self.entries.fetch_add(1, SeqCst) + 1,
        }
    }

    /// A release the server refused as not the releaser's: the lock was taken from under its
    /// holder, a violation even if no overlap was seen here.
    pub fn refused(&self) {
        self.violations.fetch_add(1, SeqCst);
    }

    /// Violations seen: sections that met another holder, plus updates of the counter lost to
    /// an overlapping writer.
    pub fn violations(&self) -> u64 {
        let lost = self
            .sections
            .load(SeqCst)
            .saturating_sub(self.counter.load(SeqCst));
        self.violations.load(SeqCst) + lost
    }

    /// Exclusive sections completed (what the counter must read).
    pub fn sections(&self) -> u64 {
        self.sections.load(SeqCst)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let x = self.x;
        let mut bad = self.bad;
        if self.exclusive {
            // The plain store of the value read on entry: an overlapping writer's update is lost.
            x.counter.store(self.read + 1, SeqCst);
            x.sections.fetch_add(1, SeqCst);
            // Anyone inside now is still counted in the state; anyone who entered meanwhile,
            // even if gone again, moved `entries` on.
            bad |= x.entries.load(SeqCst) != self.entry;
            bad |= x.state.fetch_sub(WRITER, SeqCst) != WRITER;
        } else {
            bad |= x.counter.load(SeqCst) != self.read;
            bad |= x.state.fetch_sub(1, SeqCst) < 0;
        }
        if bad {
            x.violations.fetch_add(1, SeqCst);
        }
    }
}

/// The semaphore's check: permits out right now, from each acquire's reply to its release's
/// send ([`Lease`], dropped right before the release); more than exist is a violation, seen by
/// whoever takes one too many and by everyone who leaves while too many are out.
pub struct Permits {
    limit: i64,
    out: AtomicI64,
    violations: AtomicU64,
}

/// Permits held until dropped: drop it right before sending the release.
#[must_use = "the permits are counted until this is dropped: drop it right before the release"]
pub struct Lease<'a> {
    p: &'a Permits,
    n: i64,
    bad: bool,
}

impl Permits {
    pub fn new(limit: i64) -> Permits {
        Permits {
            limit,
            out: AtomicI64::new(0),
            violations: AtomicU64::new(0),
        }
    }

    pub fn take(&self, n: i64) -> Lease<'_> {
        let out = self.out.fetch_add(n, SeqCst) + n;
        Lease {
            p: self,
            n,
            bad: out > self.limit,
        }
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(SeqCst)
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let out = self.p.out.fetch_sub(self.n, SeqCst);
        if self.bad || out > self.p.limit {
            self.p.violations.fetch_add(1, SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::Protocol;
    use crate::report::Report;
    use rlock_tests::{Server, ServerOptions};
    use std::time::Duration;

    #[test]
    fn one_holder_at_a_time_is_no_violation() {
        let x = Exclusion::default();
        drop(x.exclusive());
        drop(x.shared());
        let (a, b) = (x.shared(), x.shared());
        drop((a, b));
        drop(x.exclusive());
        assert_eq!(x.violations(), 0);
        assert_eq!(x.sections(), 2);
    }

    #[test]
    fn counts_overlapping_holders() {
        // Two exclusive holders: the second sees the first on entry, the first sees the second
        // on exit, and one of the two counter updates is lost.
        let x = Exclusion::default();
        let a = x.exclusive();
        let b = x.exclusive();
        drop(a);
        drop(b);
        assert_eq!(x.sections(), 2);
        assert_eq!(x.violations(), 2 + 1);

        // A writer entering under a reader: both sections are violations, no update lost.
        let x = Exclusion::default();
        let r = x.shared();
        let w = x.exclusive();
        drop(w);
        drop(r);
        assert_eq!(x.violations(), 2);

        // A reader entering under a writer.
        let x = Exclusion::default();
        let w = x.exclusive();
        let r = x.shared();
        drop(r);
        drop(w);
        assert_eq!(x.violations(), 2);
    }

    #[test]
    fn the_counter_alone_sees_a_lost_update() {
        // The marker cannot see writers that never meet in it (here: entered one after
        // another and left in order), but a writer that read the counter before another one
        // wrote it loses that update.
        let x = Exclusion::default();
        let stale = x.counter.load(SeqCst);
        drop(x.exclusive());
        x.counter.store(stale + 1, SeqCst);
        x.sections.fetch_add(1, SeqCst);
        assert_eq!(x.violations(), 1);
    }

    #[test]
    fn counts_a_permit_too_many() {
        let p = Permits::new(2);
        let (a, b) = (p.take(1), p.take(1));
        drop((a, b));
        assert_eq!(p.violations(), 0);
        let a = p.take(2);
        let b = p.take(1);
        drop(a);
        drop(b);
        // The taker of one too many on entry, the first holder on exit (3 out when it left).
        assert_eq!(p.violations(), 2);
    }

    /// A "lock" that grants every request: a round trip to the server (so holders overlap as
    /// they would over a network) and never a refusal.
    struct AlwaysGrants(redis::Connection);

    impl Protocol for AlwaysGrants {
        fn acquire(&mut self, _key: &str, _lease_ms: i64, _wait: Option<Duration>) -> bool {
            let _: String = redis::cmd("PING").query(&mut self.0).unwrap();
            true
        }
        fn release(&mut self, _key: &str) -> bool {
            let _: String = redis::cmd("PING").query(&mut self.0).unwrap();
            true
        }
    }

    /// The scenarios' own loop (`handoff::pass_around`, which `contended` and `deadlock` share
    /// in shape) catches a broken lock: the same run with a correct one counts none (below).
    #[test]
    fn a_lock_that_always_grants_is_caught() {
        let server = Server::with(ServerOptions {
            module: false,
            ..Default::default()
        });
        let clients = || -> Vec<Box<dyn Protocol>> {
            (0..4)
                .map(|_| Box::new(AlwaysGrants(server.conn())) as Box<dyn Protocol>)
                .collect()
        };
        let mut r = Report::default();
        let passed =
            crate::handoff::pass_around(&mut r, clients(), "broken", Duration::from_millis(300));
        assert!(passed.rate > 0.0);
        // 4 clients all "holding" at once: their critical sections overlap whenever two are
        // scheduled together, which on a busy 2-core machine can take a while (3 overlaps in
        // 300 ms were seen under load). More runs until 10 are seen, for at most 10 s: a
        // checker that missed overlaps would never get there.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while r.violations < 10 && std::time::Instant::now() < deadline {
            crate::handoff::pass_around(&mut r, clients(), "broken", Duration::from_millis(300));
        }
        assert!(r.violations >= 10, "only {} violations seen", r.violations);
    }

    /// A correct token (one list element passed with BLPOP/LPUSH) through the same loop: no
    /// violation, so the one above is the broken lock's and not the checker's.
    #[test]
    fn a_correct_token_is_not_flagged() {
        let server = Server::with(ServerOptions {
            module: false,
            ..Default::default()
        });
        let mut c = server.conn();
        let _: i64 = redis::cmd("LPUSH")
            .arg("tok")
            .arg("x")
            .query(&mut c)
            .unwrap();
        let clients: Vec<Box<dyn Protocol>> = (0..4)
            .map(|_| Box::new(crate::handoff::Token::new(server.conn())) as Box<dyn Protocol>)
            .collect();
        let mut r = Report::default();
        let passed =
            crate::handoff::pass_around(&mut r, clients, "tok", Duration::from_millis(300));
        assert!(passed.rate > 0.0);
        assert_eq!(r.violations, 0);
    }
}

//! The `INFO rlock` section: waiters now, then each object kind's counters (the lock's under
//! their bare names, the others prefixed with the kind), the wait- and hold-time distributions
//! and the table of live holds (`observe`), sessions, then errors.

use crate::core::stats::{self, ObjectKind};
use crate::ffi::boundary::InfoWriter;
use crate::ffi::Ctx;
use crate::{events, observe, sessions, timers, wait};

pub fn write(_ctx: Ctx, out: &mut InfoWriter) {
    out.text("version", crate::VERSION);
    let by_kind = wait::waiters_by_kind();
    out.int("waiters", by_kind.iter().map(|(_, n)| *n as i64).sum());
    for (kind, n) in &by_kind {
        if *kind != ObjectKind::Lock {
            out.int(&format!("{}waiters", kind.info_prefix()), *n as i64);
        }
    }
    for kind in ObjectKind::ALL {
        for (name, counter) in kind.counters().fields() {
            out.int(
                &format!("{}{name}", kind.info_prefix()),
                counter.get() as i64,
            );
        }
    }
    observe::write_info(out);
    let (open, queued, pending, holds) = sessions::totals();
    out.int("sessions", open as i64);
    out.int("session_requests", queued as i64);
    out.int("session_requests_parked", wait::parked_requests() as i64);
    out.int("session_outcomes_pending", pending as i64);
    out.int("session_holds_watched", holds as i64);
    out.int("sessions_opened", sessions::OPENED.get() as i64);
    out.int("sessions_expired", sessions::EXPIRED.get() as i64);
    out.int("sessions_closed", sessions::CLOSED.get() as i64);
    out.int("holds_lost", sessions::LOST.get() as i64);
    out.int("session_grants_direct", sessions::HANDED.get() as i64);
    out.int("session_lost_dropped", sessions::LOST_DROPPED.get() as i64);
    // The looks at sessions' watched holds, wait deadlines and the ends of parks are timed jobs
    // too, each kind run by one job of the module's timers (`timers::Batch`): counted one by
    // one, those jobs not.
    let (looks, looks_job) = sessions::timed_looks();
    let (parks, parks_job) = wait::timed_ends();
    out.int(
        "timer_jobs",
        (timers::pending() + looks + parks).saturating_sub(looks_job + parks_job) as i64,
    );
    out.int("deadlocks", stats::DEADLOCKS.get() as i64);
    out.int(
        "deadlock_checks_exhausted",
        stats::DEADLOCK_CHECKS_EXHAUSTED.get() as i64,
    );
    out.int(
        "deadlock_cycles_unseen",
        stats::DEADLOCK_CYCLES_UNSEEN.get() as i64,
    );
    out.text(
        "maxmemory_policy",
        &events::eviction_policy().unwrap_or_default(),
    );
    out.int(
        "eviction_can_free_locks",
        events::eviction_can_free_locks() as i64,
    );
    out.int("errors", stats::ERRORS.get() as i64);
}

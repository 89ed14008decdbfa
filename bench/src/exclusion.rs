//! The benchmark's own check of mutual exclusion: each client marks itself inside its critical
//! section, so a second holder (a lock bug) is seen and counted; a violation fails the run.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};

/// What a writer adds to the state: anyone else inside sees it negative.
const WRITER: i64 = -1_000_000;

/// Who is inside: readers count 1 each, a writer (or an exclusive holder) [`WRITER`].
#[derive(Default)]
pub struct Exclusion {
    state: AtomicI64,
    violations: AtomicU64,
}

impl Exclusion {
    /// An exclusive holder's (or a writer's) critical section.
    pub fn exclusive(&self) {
        let entered = self
            .state
            .compare_exchange(0, WRITER, SeqCst, SeqCst)
            .is_ok();
        self.inside(entered);
        if entered {
            self.state.fetch_sub(WRITER, SeqCst);
        }
    }

    /// A reader's critical section: others may read at the same time, nobody may write.
    pub fn shared(&self) {
        let entered = self.state.fetch_add(1, SeqCst) >= 0;
        self.inside(entered);
        self.state.fetch_sub(1, SeqCst);
    }

    fn inside(&self, entered: bool) {
        if !entered {
            self.violations.fetch_add(1, SeqCst);
        }
        std::hint::spin_loop();
    }

    pub fn violations(&self) -> u64 {
        self.violations.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_second_holder() {
        let x = Exclusion::default();
        x.exclusive();
        x.shared();
        assert_eq!(x.violations(), 0);
        // A reader inside while a writer enters, and a reader meeting a writer.
        x.state.fetch_add(1, SeqCst);
        x.exclusive();
        x.state.fetch_sub(1, SeqCst);
        x.state.fetch_add(WRITER, SeqCst);
        x.shared();
        assert_eq!(x.violations(), 2);
    }
}

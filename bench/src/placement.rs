//! Where the server and the benchmark run: pinned CPUs for the client-cost comparison.
//!
//! Why: an unpipelined pair is four hops between the benchmark and redis-server, and on a
//! virtual machine a wake-up that crosses CPUs costs far more than the commands themselves.
//! Measured on the 2-core development VM (raw `RLOCK.ACQUIRE` + `RELEASE` pairs, one
//! connection): 24.9k pairs/s with the client and the server on one CPU, 5.6k with them on
//! two. Left to the scheduler, each slice of a comparison lands on one placement or the other,
//! and the ratios measured the placement: the raw pair with `lock()`'s session words read 0.61×
//! to 0.65× of the plain pair in three runs, 0.95× to 1.00× with the placement fixed. So
//! section 6 runs twice, with the placement fixed each time:
//!
//! - apart: the server on one CPU, every thread of the benchmark on another (a client and its
//!   Redis on separate hosts: what the round trip costs dominates);
//! - shared: both on one CPU (each side's CPU time adds up: the client's own cost shows in
//!   full).
//!
//! On a machine with one CPU, or where affinity can't be set, it runs once, unpinned.

use std::mem::{size_of, zeroed};

/// How the server and the benchmark share the machine's CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The server on the first CPU, the benchmark on the second.
    Apart,
    /// Both on the first CPU.
    Shared,
    /// As the scheduler places them.
    Unpinned,
}

impl Placement {
    pub fn label(self) -> &'static str {
        match self {
            Placement::Apart => "apart (server and client on separate CPUs)",
            Placement::Shared => "shared (server and client on one CPU)",
            Placement::Unpinned => "unpinned",
        }
    }

    /// The placements this machine can measure: apart and shared when it has two CPUs this
    /// process may use, else unpinned only.
    pub fn available() -> Vec<Placement> {
        match allowed(0).as_deref() {
            Some([_, _, ..]) => vec![Placement::Apart, Placement::Shared],
            _ => vec![Placement::Unpinned],
        }
    }
}

/// The process id of the server `conn` talks to (`INFO server`), to pin it.
pub fn server_pid(conn: &mut redis::Connection) -> i32 {
    rlock_tests::info_int(conn, "server", "process_id") as i32
}

/// The CPUs the benchmark and the server were allowed before pinning, given back on drop.
pub struct Pinned {
    server: i32,
    server_cpus: Vec<usize>,
    own_cpus: Vec<usize>,
}

/// Pin the server (process `server`) and every thread of this process per `p`; `None` when
/// unpinned (or pinning failed: the run goes on as the scheduler places it, and says so).
pub fn pin(p: Placement, server: i32) -> Option<Pinned> {
    let own_cpus = allowed(0)?;
    let server_cpus = allowed(server)?;
    let (first, second) = (own_cpus[0], *own_cpus.get(1)?);
    let (server_cpu, own_cpu) = match p {
        Placement::Apart => (first, second),
        Placement::Shared => (first, first),
        Placement::Unpinned => return None,
    };
    let pinned = Pinned {
        server,
        server_cpus,
        own_cpus,
    };
    // Every thread of this process: one that ended meanwhile (a runtime shutting down) can't
    // be pinned and does not matter; the calling thread must be.
    threads().into_iter().for_each(|t| {
        set(t, &[own_cpu]);
    });
    if !set(server, &[server_cpu]) || !set(0, &[own_cpu]) {
        eprintln!("warning: can't pin to CPUs ({p:?}); running unpinned");
        return None;
    }
    Some(pinned)
}

impl Drop for Pinned {
    fn drop(&mut self) {
        set(self.server, &self.server_cpus);
        for t in threads() {
            set(t, &self.own_cpus);
        }
    }
}

/// This process' threads (a new thread inherits its creator's CPUs, so pinning these covers
/// the runtimes' and the client's threads started later).
pub fn threads() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The CPUs thread or process `tid` may run on (0: the calling thread).
fn allowed(tid: i32) -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r = unsafe { libc::sched_getaffinity(tid, size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

/// Let thread or process `tid` run on `cpus` only: whether it was set.
fn set(tid: i32, cpus: &[usize]) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    for &cpu in cpus {
        // SAFETY: CPUs come from sched_getaffinity, below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(tid, size_of::<libc::cpu_set_t>(), &set) == 0 }
}

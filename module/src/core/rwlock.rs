//! `RRWLOCK.*`: the read-write lock, in Redisson's `RReadWriteLock` layout, so Redisson's own
//! read and write lock scripts work on the same key:
//! - hash `<key>`: field `mode` (`read`/`write`), one field `<owner>` per reader (its read
//!   holds), field `<owner>:write` for the writer (its write holds);
//! - one string key per read hold, `{<key>}:<owner>:rwlock_timeout:<k>`, whose TTL is that
//!   hold's lease; the hash's TTL covers the longest lease;
//! - channel `redisson_rwlock:{<key>}`: `0` when a read release frees the lock, `1` when a
//!   write release does.
//!
//! Many readers or one writer; reentrant per mode; the writer may also read (downgrade). The
//! queue is FIFO across modes: once a writer waits, later readers queue behind it, and readers
//! at the head of the queue are granted together ([`RwWait`]).

use super::args::{self, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::{Hold, Pending, Serve, Tidy, Upkeep};
use std::borrow::Cow;

const MODE: &[u8] = names::RWLOCK_MODE;
const WRITE_SUFFIX: &[u8] = b":write";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    fn word(self) -> &'static [u8] {
        match self {
            Mode::Read => b"read",
            Mode::Write => b"write",
        }
    }

    fn of(word: &[u8]) -> Option<Mode> {
        if word.eq_ignore_ascii_case(b"READ") {
            Some(Mode::Read)
        } else if word.eq_ignore_ascii_case(b"WRITE") {
            Some(Mode::Write)
        } else {
            None
        }
    }
}

// ---- arguments ---------------------------------------------------------------------------------

/// `RRWLOCK.ACQUIRE key owner READ|WRITE lease_ms [BLOCK timeout_ms] [SESSION name [QUEUE
/// request timeout_ms]]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub mode: Mode,
    pub lease_ms: i64,
    pub wait: WaitArgs<'a>,
}

/// An owner that cannot collide with Redisson's own fields.
fn owner(bytes: &[u8]) -> Result<(), CmdError> {
    args::owner(bytes)?;
    if bytes == MODE || bytes.ends_with(WRITE_SUFFIX) {
        return Err(CmdError::ReservedOwner);
    }
    Ok(())
}

fn mode(word: &[u8]) -> Result<Mode, CmdError> {
    Mode::of(word).ok_or_else(|| {
        CmdError::Syntax(format!(
            "expected READ or WRITE, got '{}'",
            super::error::echo(word)
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

// ---- reading the lock ----------------------------------------------------------------------------

fn writer_field(owner: &[u8]) -> Vec<u8> {
    [owner, WRITE_SUFFIX].concat()
}

/// The key of `owner`'s `k`-th read hold.
fn hold_key(store: &(impl Store + ?Sized), owner: &[u8], k: i64) -> Target {
    Target::Aux(names::rwlock_hold(store.key_name(), owner, k))
}

/// The mode of a hash: `None` for a hash that is not a read-write lock (no valid `mode`).
fn read_mode(store: &(impl Store + ?Sized)) -> Option<Mode> {
    match store.hget(&Target::Main, MODE).as_deref() {
        Some(b"read") => Some(Mode::Read),
        Some(b"write") => Some(Mode::Write),
        _ => None,
    }
}

/// Everything in the hash: the mode, readers with their counts, the writer.
#[derive(Debug, Default)]
struct Holders {
    mode: Option<Mode>,
    readers: Vec<(Vec<u8>, i64)>,
    writer: Option<(Vec<u8>, i64)>,
}

fn holders(store: &(impl Store + ?Sized)) -> Holders {
    let mut h = Holders::default();
    for (field, value) in store.hgetall(&Target::Main) {
        if field == MODE {
            h.mode = Mode::of(&value).filter(|_| value == b"read" || value == b"write");
            continue;
        }
        let count = args::parse_i64(&value).unwrap_or(0);
        match field.strip_suffix(WRITE_SUFFIX) {
            Some(w) => h.writer = Some((w.to_vec(), count)),
            None => h.readers.push((field, count)),
        }
    }
    h
}

/// Expiry times of `owner`'s live read holds (1..=count).
fn hold_expiries(store: &(impl Store + ?Sized), owner: &[u8], count: i64) -> Vec<Option<i64>> {
    (1..=count.clamp(0, MAX_HOLDS_SCANNED))
        .filter_map(|k| {
            let key = hold_key(store, owner, k);
            (store.kind(&key) != KeyType::Empty).then(|| store.expire_at(&key))
        })
        .collect()
}

/// Whether a writer's field (`<owner>:write` with a count above 0) is in the hash: read
/// field by field, stopping at it.
fn writer_holds(store: &(impl Store + ?Sized)) -> bool {
    let mut found = false;
    store.hvisit(&Target::Main, &mut |field, value| {
        found = field.ends_with(WRITE_SUFFIX) && args::parse_i64(value).is_some_and(|n| n > 0);
        !found
    });
    found
}

/// Whether any of `owner`'s read holds (1..=count) still has its lease key. Newest first: it
/// is the likeliest to be alive, and the scan stops there.
fn has_live_hold(store: &(impl Store + ?Sized), owner: &[u8], count: i64) -> bool {
    (1..=count.clamp(0, MAX_HOLDS_SCANNED))
        .rev()
        .any(|k| store.kind(&hold_key(store, owner, k)) != KeyType::Empty)
}

/// Read holds of one owner looked at (a count beyond this was not written by a lock client).
const MAX_HOLDS_SCANNED: i64 = 100_000;

fn lease_at(store: &(impl Store + ?Sized), lease_ms: i64) -> Result<i64, CmdError> {
    args::deadline(store.now(), lease_ms, "lease_ms")
}

/// The hash's expiry after a hold with expiry `at` is added: never shortened.
fn extended(store: &(impl Store + ?Sized), at: i64) -> i64 {
    store.expire_at(&Target::Main).map_or(at, |cur| cur.max(at))
}

// ---- decisions -----------------------------------------------------------------------------------

/// How an acquire ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Took {
    Fresh,
    Reentry,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Acquire<'a> {
    Grant(Decision<'a>, Took),
    Busy,
    /// Readers whose holds all expired may stand in the way: remove them ([`tidy`]) and decide
    /// again.
    TidyFirst,
}

/// The writes of a read hold number `count` for `owner`. Its lease key is a string Redisson's
/// script would `SET` over anything; a key of another type there (another object named so) is
/// refused rather than overwritten.
fn read_grant<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    count: i64,
    at: i64,
    fresh_hash: bool,
) -> Result<Decision<'a>, CmdError> {
    let hold = hold_key(store, owner, count);
    if !matches!(store.kind(&hold), KeyType::Empty | KeyType::String) {
        return Err(CmdError::WrongType);
    }
    let mut writes = Vec::with_capacity(5);
    if fresh_hash {
        writes.push(Write::HSet {
            key: Target::Main,
            field: Cow::Borrowed(MODE),
            value: b"read",
        });
    }
    writes.push(Write::HSetInt {
        key: Target::Main,
        field: Cow::Borrowed(owner),
        value: count,
    });
    writes.push(Write::SetInt {
        key: hold.clone(),
        value: 1,
    });
    writes.push(Write::PExpireAt { key: hold, at });
    writes.push(Write::PExpireAt {
        key: Target::Main,
        at: if fresh_hash { at } else { extended(store, at) },
    });
    Ok(Decision::new(writes, Reply::Int(count)))
}

/// The writes of a write hold number `count` for `owner`.
fn write_grant<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    count: i64,
    at: i64,
    fresh_hash: bool,
) -> Decision<'a> {
    let mut writes = Vec::with_capacity(3);
    if fresh_hash {
        writes.push(Write::HSet {
            key: Target::Main,
            field: Cow::Borrowed(MODE),
            value: b"write",
        });
    }
    writes.push(Write::HSetInt {
        key: Target::Main,
        field: Cow::Owned(writer_field(owner)),
        value: count,
    });
    writes.push(Write::PExpireAt {
        key: Target::Main,
        at: if fresh_hash { at } else { extended(store, at) },
    });
    Decision::new(writes, Reply::Int(count))
}

fn next_count(n: i64) -> Result<i64, CmdError> {
    // A count below 1 was not written by a lock client; re-entry repairs it to 1.
    n.max(0).checked_add(1).ok_or(CmdError::CountOverflow)
}

/// Acquire `mode` for `owner`; `queued`: others wait for this key (a newcomer never overtakes
/// them; re-entry and downgrade never wait). `tidied`: expired readers were just removed.
pub fn acquire<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    mode: Mode,
    lease_ms: i64,
    queued: bool,
    tidied: bool,
) -> Result<Acquire<'a>, CmdError> {
    let at = lease_at(store, lease_ms)?;
    match store.kind(&Target::Main) {
        KeyType::Empty if queued => return Ok(Acquire::Busy),
        KeyType::Empty => {
            let d = match mode {
                Mode::Read => read_grant(store, owner, 1, at, true)?,
                Mode::Write => write_grant(store, owner, 1, at, true),
            };
            return Ok(Acquire::Grant(d, Took::Fresh));
        }
        KeyType::Hash => {}
        _ => return Err(CmdError::WrongType),
    }
    let current = read_mode(store);
    let reads = store.hget_int(&Target::Main, owner);
    let writes = store.hget_int(&Target::Main, &writer_field(owner));
    if reads == Int::NotInt || writes == Int::NotInt {
        return Err(CmdError::CorruptCount);
    }
    let held = |i: Int| matches!(i, Int::Is(n) if n > 0);
    match (mode, current) {
        // A hash that is not a read-write lock (a lock, or another hash): one kind per key.
        (_, None) => Err(CmdError::WrongType),
        (Mode::Read, Some(Mode::Read)) => match reads {
            Int::Is(n) => Ok(Acquire::Grant(
                read_grant(store, owner, next_count(n)?, at, false)?,
                Took::Reentry,
            )),
            _ if queued => Ok(Acquire::Busy),
            _ => Ok(Acquire::Grant(
                read_grant(store, owner, 1, at, false)?,
                Took::Fresh,
            )),
        },
        // The writer may also read (downgrade), at once even when others queue.
        (Mode::Read, Some(Mode::Write)) if held(writes) => {
            let n = if let Int::Is(n) = reads { n } else { 0 };
            let took = if n > 0 { Took::Reentry } else { Took::Fresh };
            Ok(Acquire::Grant(
                read_grant(store, owner, next_count(n)?, at, false)?,
                took,
            ))
        }
        (Mode::Read, Some(Mode::Write)) => Ok(Acquire::Busy),
        (Mode::Write, Some(Mode::Write)) => match writes {
            Int::Is(n) => Ok(Acquire::Grant(
                write_grant(store, owner, next_count(n)?, at, false),
                Took::Reentry,
            )),
            _ => Ok(Acquire::Busy),
        },
        // Another live reader keeps the lock in read mode whatever tidying would remove: busy
        // (or an upgrade, below) without reading every reader. Readers whose holds expired
        // stay until the lock is tidied (at the next lease end, or when no live reader is
        // found here), so a write attempt costs O(1), not O(readers): 17 ms per attempt with
        // 20,000 readers before.
        (Mode::Write, Some(Mode::Read)) if !tidied && another_live_reader(store, owner) => {
            match reads {
                Int::Is(n) if n > 0 && has_live_hold(store, owner, n) => Err(upgrade(store, owner)),
                _ => Ok(Acquire::Busy),
            }
        }
        (Mode::Write, Some(Mode::Read)) if !tidied => Ok(Acquire::TidyFirst),
        // An upgrade can never be granted: the owner would wait for its own read holds.
        (Mode::Write, Some(Mode::Read)) if held(reads) => Err(upgrade(store, owner)),
        (Mode::Write, Some(Mode::Read)) => Ok(Acquire::Busy),
    }
}

fn upgrade(store: &(impl Store + ?Sized), owner: &[u8]) -> CmdError {
    CmdError::Deadlock(format!(
        "owner '{}' holds a read lock on '{}' and asks for its write lock: an upgrade can never be granted",
        super::error::echo(owner),
        super::error::echo(store.key_name()),
    ))
}

/// Whether a reader other than `owner` holds the lock now, looked for in the hash's order and
/// stopping at the first one found alive. Readers found dead on the way are counted: past a
/// few, the caller tidies instead (their removal pays for the reading).
fn another_live_reader(store: &(impl Store + ?Sized), owner: &[u8]) -> bool {
    /// Dead readers read before giving up (and tidying every one of them).
    const DEAD_SEEN: usize = 8;
    let mut found = false;
    let mut dead = 0;
    store.hvisit(&Target::Main, &mut |field, value| {
        if field == MODE || field.ends_with(WRITE_SUFFIX) || field == owner {
            return true;
        }
        let count = args::parse_i64(value).unwrap_or(0);
        if has_live_hold(store, field, count) {
            found = true;
            return false;
        }
        dead += 1;
        dead < DEAD_SEEN
    });
    found
}

/// Remove readers whose holds all expired; when no hold is left, delete the lock and publish
/// `0`, as a read release that frees it does.
pub fn tidy(store: &(impl Store + ?Sized)) -> Result<Decision<'static>, CmdError> {
    match store.kind(&Target::Main) {
        KeyType::Empty => return Ok(Decision::default()),
        KeyType::Hash => {}
        _ => return Err(CmdError::WrongType),
    }
    let h = holders(store);
    if h.mode.is_none() {
        return Ok(Decision::default());
    }
    let mut writes = Vec::new();
    let mut live_readers = 0;
    for (owner, count) in &h.readers {
        if !has_live_hold(store, owner, *count) {
            writes.push(Write::HDel {
                key: Target::Main,
                field: Cow::Owned(owner.clone()),
            });
        } else {
            live_readers += 1;
        }
    }
    if live_readers == 0 && h.writer.is_none() {
        // Nothing holds the lock any more (a `mode` field alone is no hold).
        writes = free(store, &h);
    }
    Ok(Decision::writes(writes))
}

/// Readers beyond which serving a queue no longer reads them all (fields of the hash, `mode`
/// included). Each command on a key with waiters serves its queue first: with 20,000 readers
/// and a writer queued, reading every reader's hold made each `RRWLOCK.RELEASE` cost 100 ms
/// of server time, and releasing them all O(readers²).
const MANY_READERS: usize = 64;

/// Holds a read release reads at most when the lock has many readers (see
/// [`read_holds_end`]).
const RELEASE_BUDGET: usize = 64;

/// Dead readers a serve tidies at most when the lock has many (see [`tidy_some`]).
const TIDY_BUDGET: usize = 8;

fn many_readers(store: &(impl Store + ?Sized)) -> bool {
    store.hlen(&Target::Main) > MANY_READERS
}

/// A bounded [`tidy`] for a lock with many readers: the first `budget` readers in the hash's
/// order are looked at, and those whose holds all ended lose their field. It never frees the
/// lock (it has not seen every reader): a lock whose readers are all gone is freed by the last
/// release, or expires with its last hold (the hash's TTL is its longest hold's). A dead
/// reader's field left behind holds nothing: writers wait for the live ones.
fn tidy_some(store: &(impl Store + ?Sized), budget: usize) -> Decision<'static> {
    let mut writes = Vec::new();
    let mut seen = 0;
    store.hvisit(&Target::Main, &mut |field, value| {
        if field == MODE || field.ends_with(WRITE_SUFFIX) {
            return true;
        }
        let count = args::parse_i64(value).unwrap_or(0);
        if !has_live_hold(store, field, count) {
            writes.push(Write::HDel {
                key: Target::Main,
                field: Cow::Owned(field.to_vec()),
            });
        }
        seen += 1;
        seen < budget
    });
    Decision::writes(writes)
}

/// Delete the lock and every read-hold key, and tell Redisson's waiters.
fn free(store: &(impl Store + ?Sized), h: &Holders) -> Vec<Write<'static>> {
    let mut writes = Vec::new();
    for (owner, count) in &h.readers {
        for k in 1..=(*count).clamp(0, MAX_HOLDS_SCANNED) {
            let key = hold_key(store, owner, k);
            if store.kind(&key) != KeyType::Empty {
                writes.push(Write::Del { key });
            }
        }
    }
    writes.push(Write::Del { key: Target::Main });
    writes.push(Write::Publish {
        channel: names::prefixed(names::RWLOCK_CHANNEL, store.key_name()),
        message: (h.mode == Some(Mode::Write)) as i64,
    });
    writes
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    /// The owner holds no hold of that mode any more (its last one went, or the release freed
    /// the lock).
    pub last: bool,
    /// The lock is free now (it was deleted and published).
    pub freed: bool,
}

/// When the live read holds end: `None` when no read hold is alive, `Some(None)` when one
/// has no expiry (not written by a lock client: it never ends), else the latest end.
type HoldsEnd = Option<Option<i64>>;

/// The end of the live read holds of every reader (each reader's holds 1..=count, as
/// Redisson's read unlock reads them; `owner`'s count is `left`, what its release leaves). The
/// hash is read field by field and the scan stops at a hold that ends at `enough` (the hash's
/// own expiry, which covers every hold it was extended for): the TTL stays. So a release
/// among thousands of readers reads a few of them, not all (the hold the TTL was set for is
/// usually not the one released).
///
/// With many readers ([`MANY_READERS`]) at most [`RELEASE_BUDGET`] holds are read: when
/// that is not enough, the TTL stays as it is (`enough`, an upper bound: never shorter than a
/// live hold), and the lock is not freed. Releasing 20,000 readers newest first (each release
/// the longest hold's) read them all each time: 590 us per release, O(readers²) in all.
fn read_holds_end(
    store: &(impl Store + ?Sized),
    (owner, left): (&[u8], i64),
    enough: Option<i64>,
) -> HoldsEnd {
    let mut end: HoldsEnd = None;
    let mut budget = if many_readers(store) {
        RELEASE_BUDGET
    } else {
        usize::MAX
    };
    let mut cut = false;
    store.hvisit(&Target::Main, &mut |field, value| {
        if field == MODE || field.ends_with(WRITE_SUFFIX) {
            return true;
        }
        let count = if field == owner {
            left
        } else {
            args::parse_i64(value).unwrap_or(0)
        };
        for k in (1..=count.clamp(0, MAX_HOLDS_SCANNED)).rev() {
            if budget == 0 {
                cut = true;
                return false;
            }
            budget -= 1;
            let key = hold_key(store, field, k);
            if store.kind(&key) == KeyType::Empty {
                continue;
            }
            let Some(at) = store.expire_at(&key) else {
                end = Some(None);
                return false;
            };
            if enough == Some(at) {
                end = Some(Some(at));
                return false;
            }
            end = Some(Some(end.flatten().map_or(at, |e: i64| e.max(at))));
        }
        true
    });
    if cut && end != Some(None) {
        // Not every hold was read: keep the TTL, which covers them all.
        return Some(enough.or(end.flatten()));
    }
    end
}

/// Release one `mode` hold of `owner`, as Redisson's unlock scripts do, hold by hold: a read
/// release deletes the owner's newest hold key (number `count`); then the hash's TTL becomes
/// the longest lease of the holds left alive, and when none is left the lock is deleted and
/// published at once (the caller hands it to the queue in the same step).
///
/// Where the module differs from Redisson's scripts, on purpose:
/// - while a writer holds the lock its lease is the hash's TTL, which no release shortens
///   (Redisson's read unlock cuts it to the writer's longest read hold);
/// - a partial write release leaves the TTL as it is (Redisson resets it to the watchdog
///   timeout, a client setting the module does not know);
/// - the writer's last write release with read holds left (a downgrade) sets the TTL to the
///   longest of them, and frees the lock (publishing `1`) when none is alive (Redisson keeps
///   the write lease on a read lock, or a read lock of dead holds until it expires).
pub fn release<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    mode: Mode,
) -> Result<(Decision<'a>, Released), CmdError> {
    match store.kind(&Target::Main) {
        KeyType::Empty => return Err(CmdError::NotOwner),
        KeyType::Hash => {}
        _ => return Err(CmdError::WrongType),
    }
    let current = read_mode(store).ok_or(CmdError::WrongType)?;
    let field: Cow<'a, [u8]> = match mode {
        Mode::Read => Cow::Borrowed(owner),
        Mode::Write => Cow::Owned(writer_field(owner)),
    };
    if mode == Mode::Write && current != Mode::Write {
        return Err(CmdError::NotOwner);
    }
    let n = match store.hget_int(&Target::Main, &field) {
        Int::Absent => return Err(CmdError::NotOwner),
        Int::NotInt => return Err(CmdError::CorruptCount),
        Int::Is(n) => n,
    };
    let mut writes = Vec::new();
    if mode == Mode::Read && n >= 1 {
        // The newest hold goes, with its lease key (as Redisson's read unlock).
        writes.push(Write::Del {
            key: hold_key(store, owner, n),
        });
    }
    let left = n - 1;
    if mode == Mode::Write && left > 0 {
        // Still the writer: its lease (the hash's TTL) stays as it is.
        writes.push(Write::HSetInt {
            key: Target::Main,
            field,
            value: left,
        });
        let released = Released {
            last: false,
            freed: false,
        };
        return Ok((Decision::new(writes, Reply::Int(left)), released));
    }
    if mode == Mode::Read && current == Mode::Write && writer_holds(store) {
        // A reading writer let go of a read hold: it still holds the lock, with its lease.
        writes.push(owner_count(field, left));
        let released = Released {
            last: left <= 0,
            freed: false,
        };
        return Ok((Decision::new(writes, Reply::Int(left.max(0))), released));
    }
    let current_end = store.expire_at(&Target::Main);
    if mode == Mode::Read && n >= 1 {
        // The hold that goes ends before the hash: the hold the TTL was set for (the longest)
        // lives on, so the lock stays held and its TTL stays. Only the longest hold's release
        // reads the others (with thousands of readers, the rest cost O(1)).
        //
        // Only if some hold is left to be that longest one: this owner's others, or another
        // field than `mode` and this owner's. Redisson's read unlock sets the hash's TTL from a
        // PTTL it read, which can land a millisecond or more past the hold it measured (seen
        // under load: after a Redisson reader and an rlock reader let go, the hash was left
        // with `mode` alone and its whole lease to run, a lock held by nobody).
        let gone_end = store.expire_at(&hold_key(store, owner, n));
        let others = left > 0 || store.hlen(&Target::Main) > 2;
        if let (Some(gone), Some(ttl), true) = (gone_end, current_end, others) {
            if gone < ttl {
                writes.push(owner_count(field, left));
                let released = Released {
                    last: left <= 0,
                    freed: false,
                };
                return Ok((Decision::new(writes, Reply::Int(left.max(0))), released));
            }
        }
    }
    // A read release stops at the hold the hash's TTL was set for (the longest); the
    // downgrade's TTL was the write lease, so every read hold is looked at.
    let enough = match mode {
        Mode::Read => current_end,
        Mode::Write => None,
    };
    let released_owner = match mode {
        Mode::Read => (owner, left),
        // The writer's own read holds (a downgrade) are all left.
        Mode::Write => (&b""[..], 0),
    };
    match read_holds_end(store, released_owner, enough) {
        None => {
            // No hold is left alive: delete the lock (and the fields of dead holds with it),
            // publish `0` for a read release, `1` for a write release. (Reading every reader
            // here is paid once per reader: the lock goes with them.)
            let mut h = holders(store);
            if mode == Mode::Read {
                for r in h.readers.iter_mut().filter(|(o, _)| o.as_slice() == owner) {
                    r.1 = left;
                }
                h.readers.retain(|(_, count)| *count > 0);
            } else {
                h.writer = None;
            }
            h.mode = Some(mode);
            writes.extend(free(store, &h));
            let released = Released {
                last: true,
                freed: true,
            };
            Ok((Decision::new(writes, Reply::Int(0)), released))
        }
        Some(end) => {
            writes.push(owner_count(field, left));
            if mode == Mode::Write {
                // The writer keeps read holds (a downgrade): the lock becomes a read lock, and
                // queued readers may go. Nothing is published (Redisson does the same).
                writes.push(Write::HSet {
                    key: Target::Main,
                    field: Cow::Borrowed(MODE),
                    value: b"read",
                });
            }
            match end {
                Some(at) if Some(at) != current_end => writes.push(Write::PExpireAt {
                    key: Target::Main,
                    at,
                }),
                // Unchanged; or a hold key without expiry (not a lock client's), which the
                // hash's TTL cannot cover: left as it is.
                _ => {}
            }
            let released = Released {
                last: left <= 0,
                freed: false,
            };
            Ok((Decision::new(writes, Reply::Int(left.max(0))), released))
        }
    }
}

/// The owner's field once a hold went: `left` holds, or no field when none is left.
fn owner_count(field: Cow<'_, [u8]>, left: i64) -> Write<'_> {
    if left > 0 {
        Write::HSetInt {
            key: Target::Main,
            field,
            value: left,
        }
    } else {
        Write::HDel {
            key: Target::Main,
            field,
        }
    }
}

/// Set each of `owner`'s read-hold leases to `lease_ms`, and the hash's TTL to the longest
/// remaining lease of all holds (at least `lease_ms` when the owner holds the write lock).
/// Reply: the owner's holds renewed (read holds with a live lease, plus write holds).
pub fn renew(
    store: &(impl Store + ?Sized),
    owner: &[u8],
    lease_ms: i64,
) -> Result<Decision<'static>, CmdError> {
    let at = lease_at(store, lease_ms)?;
    match store.kind(&Target::Main) {
        KeyType::Empty => return Ok(Decision::reply(Reply::Int(0))),
        KeyType::Hash => {}
        _ => return Err(CmdError::WrongType),
    }
    let h = holders(store);
    if h.mode.is_none() {
        return Err(CmdError::WrongType); // a lock, or another hash
    }
    let mut writes = Vec::new();
    let mut renewed = 0;
    let mut longest: Option<i64> = None;
    for (reader, count) in &h.readers {
        let mine = reader.as_slice() == owner;
        for k in 1..=(*count).clamp(0, MAX_HOLDS_SCANNED) {
            let key = hold_key(store, reader, k);
            if store.kind(&key) == KeyType::Empty {
                continue;
            }
            let expiry = if mine {
                renewed += 1;
                writes.push(Write::PExpireAt {
                    key: key.clone(),
                    at,
                });
                Some(at)
            } else {
                store.expire_at(&key)
            };
            if let Some(e) = expiry {
                longest = Some(longest.map_or(e, |l| l.max(e)));
            }
        }
    }
    if let Some((writer, count)) = &h.writer {
        if writer.as_slice() == owner && *count > 0 {
            renewed += count;
            longest = Some(longest.map_or(at, |l| l.max(at)));
        }
    }
    if renewed == 0 {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    if let Some(l) = longest {
        writes.push(Write::PExpireAt {
            key: Target::Main,
            at: l,
        });
    }
    Ok(Decision::new(writes, Reply::Int(renewed)))
}

/// Delete the lock whoever holds it, with every read-hold key; publish `1` if it was in write
/// mode, else `0`. Reply 1, or 0 when there was no read-write lock.
pub fn force_release(store: &(impl Store + ?Sized)) -> Result<Decision<'static>, CmdError> {
    match store.kind(&Target::Main) {
        KeyType::Empty => return Ok(Decision::reply(Reply::Int(0))),
        KeyType::Hash => {}
        _ => return Err(CmdError::WrongType),
    }
    let h = holders(store);
    if h.mode.is_none() {
        // Never delete data that is not a read-write lock.
        return Err(CmdError::WrongType);
    }
    Ok(Decision::new(free(store, &h), Reply::Int(1)))
}

/// `RRWLOCK.INFO`: mode, readers (owner, holds, ...), writer (owner, holds), ttl_ms, waiters,
/// queue (each `[owner, mode]`).
pub fn info(store: &(impl Store + ?Sized), queue: Vec<Reply>) -> Result<Reply, CmdError> {
    let kind = store.kind(&Target::Main);
    if !matches!(kind, KeyType::Empty | KeyType::Hash) {
        return Err(CmdError::WrongType);
    }
    let h = holders(store);
    if kind == KeyType::Hash && h.mode.is_none() {
        return Err(CmdError::WrongType); // a lock, or another hash
    }
    let readers = h
        .readers
        .iter()
        .flat_map(|(o, n)| [Reply::Bulk(o.clone()), Reply::Int(*n)])
        .collect();
    let writer = match &h.writer {
        Some((o, n)) => Reply::Array(vec![Reply::Bulk(o.clone()), Reply::Int(*n)]),
        None => Reply::Nil,
    };
    Ok(Reply::Map(vec![
        (
            "mode",
            Reply::bulk_or_nil(h.mode.map(|m| m.word().to_vec())),
        ),
        ("readers", Reply::Array(readers)),
        ("writer", writer),
        (
            "ttl_ms",
            Reply::Int(super::lock::ttl_ms(
                store,
                &Target::Main,
                kind == KeyType::Hash,
            )),
        ),
        ("waiters", Reply::Int(queue.len() as i64)),
        ("queue", Reply::Array(queue)),
    ]))
}

// ---- waiting -------------------------------------------------------------------------------------

/// Writes that bring the lock up to date before its queue is served, or when a hold's own
/// lease ends although nobody waits: expired read holds go (a bounded few at a time when
/// there are many readers).
pub fn tidy_before_serving(store: &dyn Store) -> Result<Decision<'static>, CmdError> {
    if many_readers(store) {
        return Ok(tidy_some(store, TIDY_BUDGET));
    }
    tidy(store)
}

/// When the lock changes by itself: the earliest lease end of any hold.
pub fn next_change(store: &dyn Store) -> Option<i64> {
    if many_readers(store) {
        // The hash's TTL: the longest hold's end (every release keeps it so), when the
        // last reader a writer waits for is gone, or the write lease a reader waits for.
        return store.expire_at(&Target::Main);
    }
    // The earliest lease end of any hold: a reader's hold key, or the hash itself.
    let mut earliest = store.expire_at(&Target::Main);
    for (owner, count) in holders(store).readers {
        for e in hold_expiries(store, &owner, count).into_iter().flatten() {
            earliest = Some(earliest.map_or(e, |x| x.min(e)));
        }
    }
    earliest
}

/// The read-write lock's holds have leases of their own (a reader's hold key).
pub const UPKEEP: Upkeep = Upkeep {
    tidy: tidy_before_serving,
    wake_at: next_change,
};

/// A queued `RRWLOCK.ACQUIRE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RwWait {
    pub owner: Box<[u8]>,
    pub mode: Mode,
    pub lease_ms: i64,
}

impl Pending for RwWait {
    fn kind(&self) -> ObjectKind {
        ObjectKind::RwLock
    }

    fn tidy(&self, store: &dyn Store) -> Result<Tidy, CmdError> {
        Ok(Tidy {
            before: tidy_before_serving(store)?,
            after_serving: Decision::default(),
        })
    }

    fn serve(&self, store: &dyn Store) -> Serve<'_> {
        // At the head of the queue nobody is overtaken: decide as if no one else waited.
        match acquire(store, &self.owner, self.mode, self.lease_ms, false, true) {
            Ok(Acquire::Grant(d, _)) => Serve::Grant(d),
            Ok(Acquire::Busy | Acquire::TidyFirst) => Serve::Wait,
            // An upgrade (its read holds were taken after it queued) waits for them: the
            // owner may release them; the deadline ends the wait otherwise.
            Err(CmdError::Deadlock(_)) => Serve::Wait,
            Err(e) => Serve::Fail(e),
        }
    }

    fn wake_at(&self, store: &dyn Store) -> Option<i64> {
        next_change(store)
    }

    fn undo(&self, _granted: &Reply, store: &dyn Store) -> Option<Decision<'_>> {
        let field = match self.mode {
            Mode::Read => self.owner.to_vec(),
            Mode::Write => writer_field(&self.owner),
        };
        // Only the untouched grant (one hold) is undone.
        if store.hget_int(&Target::Main, &field) != Int::Is(1) {
            return None;
        }
        release(store, &self.owner, self.mode).ok().map(|(d, _)| d)
    }

    fn aux_keys(&self, store: &dyn Store) -> Vec<Vec<u8>> {
        match (self.mode, store.hget_int(&Target::Main, &self.owner)) {
            (Mode::Read, Int::Is(n)) => vec![names::rwlock_hold(
                store.key_name(),
                &self.owner,
                n.max(0) + 1,
            )],
            (Mode::Read, _) => vec![names::rwlock_hold(store.key_name(), &self.owner, 1)],
            (Mode::Write, _) => Vec::new(),
        }
    }

    fn show(&self) -> Reply {
        Reply::Array(vec![
            Reply::Bulk(self.owner.to_vec()),
            Reply::Bulk(self.mode.word().to_vec()),
        ])
    }

    fn holds(&self) -> Option<&dyn Hold> {
        Some(self)
    }
}

impl Hold for RwWait {
    fn owner(&self) -> &[u8] {
        &self.owner
    }

    fn holders(&self, store: &dyn Store) -> Vec<(Vec<u8>, bool)> {
        let h = holders(store);
        let readers = h.readers.into_iter().map(|(r, _)| (r, false));
        h.writer
            .map(|(w, _)| (w, true))
            .into_iter()
            .chain(readers)
            .collect()
    }

    fn holders_upto(&self, store: &dyn Store, limit: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        if limit == 0 {
            return out;
        }
        store.hvisit(&Target::Main, &mut |field, _| {
            if field != MODE {
                match field.strip_suffix(WRITE_SUFFIX) {
                    Some(w) => out.push((w.to_vec(), true)),
                    None => out.push((field.to_vec(), false)),
                }
            }
            out.len() < limit
        });
        out
    }

    fn exclusive(&self) -> bool {
        self.mode == Mode::Write
    }

    fn held_until(&self, store: &dyn Store) -> Option<Option<i64>> {
        if store.kind(&Target::Main) != KeyType::Hash || read_mode(store).is_none() {
            return None;
        }
        match self.mode {
            Mode::Write => match store.hget_int(&Target::Main, &writer_field(&self.owner)) {
                Int::Is(n) if n >= 1 => Some(store.expire_at(&Target::Main)),
                _ => None,
            },
            Mode::Read => {
                let Int::Is(n) = store.hget_int(&Target::Main, &self.owner) else {
                    return None;
                };
                // Held while any of its read holds lives; it ends with the last of them.
                let ends = hold_expiries(store, &self.owner, n);
                if ends.is_empty() {
                    return None;
                }
                Some(ends.iter().try_fold(i64::MIN, |m, e| e.map(|e| m.max(e))))
            }
        }
    }

    /// The hold just granted ends `lease_ms` from now: the end of the owner's hold, or before
    /// it when an earlier read hold of a longer lease lives on (a look then finds it still
    /// held and looks again at its real end).
    fn granted_until(&self, now: i64) -> Option<Option<i64>> {
        Some(Some(now.saturating_add(self.lease_ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};

    fn argv<'a>(v: &[&'a str]) -> Vec<&'a [u8]> {
        v.iter().map(|s| s.as_bytes()).collect()
    }

    fn take(m: &mut Mem, owner: &[u8], mode: Mode, lease: i64) -> Reply {
        match acquire(m, owner, mode, lease, false, false).unwrap() {
            Acquire::Grant(d, _) => m.apply_ok(&d),
            Acquire::TidyFirst => {
                let t = tidy(m).unwrap();
                m.apply_ok(&t);
                match acquire(m, owner, mode, lease, false, true).unwrap() {
                    Acquire::Grant(d, _) => m.apply_ok(&d),
                    _ => Reply::Nil,
                }
            }
            Acquire::Busy => Reply::Nil,
        }
    }

    fn give(m: &mut Mem, owner: &[u8], mode: Mode) -> Result<Reply, CmdError> {
        let (d, _) = release(m, owner, mode)?;
        Ok(m.apply_ok(&d))
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse_acquire(&argv(&["rrwlock.acquire", "k", "o", "read", "100"])),
            Ok(AcquireArgs {
                mode: Mode::Read,
                lease_ms: 100,
                wait: WaitArgs::new()
            })
        );
        assert_eq!(
            parse_acquire(&argv(&[
                "rrwlock.acquire",
                "k",
                "o",
                "WRITE",
                "5",
                "block",
                "0"
            ])),
            Ok(AcquireArgs {
                mode: Mode::Write,
                lease_ms: 5,
                wait: WaitArgs {
                    wait: args::Wait::Block(0),
                    session: None
                }
            })
        );
        assert_eq!(
            parse_acquire(&argv(&["rrwlock.acquire", "k", "o", "rw", "5"])),
            Err(CmdError::Syntax("expected READ or WRITE, got 'rw'".into()))
        );
        assert_eq!(
            parse_acquire(&argv(&["rrwlock.acquire", "k", "a:write", "read", "5"])),
            Err(CmdError::ReservedOwner)
        );
        assert_eq!(
            parse_release(&argv(&["rrwlock.release", "k", "mode", "read"])),
            Err(CmdError::ReservedOwner)
        );
        assert_eq!(
            parse_acquire(&argv(&["rrwlock.acquire", "k", "o", "read"])),
            Err(CmdError::Arity("rrwlock.acquire"))
        );
        assert_eq!(
            parse_renew(&argv(&["rrwlock.renew", "k", "o", "0"])),
            Err(CmdError::LeaseTooSmall)
        );
    }

    #[test]
    fn readers_share_writers_exclude() {
        let mut m = Mem::new(b"rw");
        assert_eq!(take(&mut m, b"a", Mode::Read, 100), Reply::Int(1));
        assert_eq!(take(&mut m, b"b", Mode::Read, 300), Reply::Int(1));
        assert_eq!(take(&mut m, b"a", Mode::Read, 50), Reply::Int(2));
        assert_eq!(m.hget(&Target::Main, b"mode"), Some(b"read".to_vec()));
        assert_eq!(m.ttl(b"{rw}:a:rwlock_timeout:1"), Some(100));
        assert_eq!(m.ttl(b"{rw}:a:rwlock_timeout:2"), Some(50));
        assert_eq!(m.ttl(b"{rw}:b:rwlock_timeout:1"), Some(300));
        assert_eq!(m.ttl(b"rw"), Some(300), "the hash covers the longest lease");
        assert_eq!(take(&mut m, b"c", Mode::Write, 100), Reply::Nil);
        // An upgrade can never succeed.
        assert!(matches!(
            acquire(&m, b"a", Mode::Write, 100, false, true),
            Err(CmdError::Deadlock(_))
        ));
        assert_eq!(give(&mut m, b"a", Mode::Read), Ok(Reply::Int(1)));
        assert!(
            !m.exists(b"{rw}:a:rwlock_timeout:2"),
            "the newest hold's key goes"
        );
        assert_eq!(give(&mut m, b"a", Mode::Read), Ok(Reply::Int(0)));
        assert_eq!(give(&mut m, b"a", Mode::Read), Err(CmdError::NotOwner));
        assert!(m.published.is_empty(), "b still reads");
        assert_eq!(give(&mut m, b"b", Mode::Read), Ok(Reply::Int(0)));
        assert!(!m.exists(b"rw"));
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
        assert_eq!(take(&mut m, b"c", Mode::Write, 100), Reply::Int(1));
        assert_eq!(take(&mut m, b"c", Mode::Write, 400), Reply::Int(2));
        assert_eq!(m.ttl(b"rw"), Some(400));
        assert_eq!(take(&mut m, b"c", Mode::Write, 10), Reply::Int(3));
        assert_eq!(m.ttl(b"rw"), Some(400), "never shortened");
        assert_eq!(take(&mut m, b"d", Mode::Read, 100), Reply::Nil);
        assert_eq!(give(&mut m, b"c", Mode::Read), Err(CmdError::NotOwner));
        for left in [2, 1, 0] {
            assert_eq!(give(&mut m, b"c", Mode::Write), Ok(Reply::Int(left)));
        }
        assert_eq!(
            m.published.last(),
            Some(&(b"redisson_rwlock:{rw}".to_vec(), 1))
        );
        assert!(!m.exists(b"rw"));
    }

    #[test]
    fn downgrade_keeps_the_read_hold_and_publishes_nothing() {
        let mut m = Mem::new(b"rw");
        take(&mut m, b"w", Mode::Write, 100);
        let Acquire::Grant(d, _) = acquire(&m, b"w", Mode::Read, 100, true, false).unwrap() else {
            panic!("a downgrade never waits")
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        assert_eq!(give(&mut m, b"w", Mode::Write), Ok(Reply::Int(0)));
        assert_eq!(m.hget(&Target::Main, b"mode"), Some(b"read".to_vec()));
        assert!(m.published.is_empty());
        assert_eq!(take(&mut m, b"r", Mode::Read, 100), Reply::Int(1));
        assert_eq!(give(&mut m, b"w", Mode::Read), Ok(Reply::Int(0)));
        assert_eq!(give(&mut m, b"r", Mode::Read), Ok(Reply::Int(0)));
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
    }

    #[test]
    fn expired_readers_are_tidied_away() {
        let mut m = Mem::new(b"rw");
        take(&mut m, b"a", Mode::Read, 100);
        take(&mut m, b"b", Mode::Read, 1_000);
        m.now += 150;
        m.expire();
        let t = tidy(&m).unwrap();
        assert_eq!(
            t.writes,
            vec![Write::HDel {
                key: Target::Main,
                field: Cow::Owned(b"a".to_vec())
            }]
        );
        m.apply_ok(&t);
        assert_eq!(
            take(&mut m, b"w", Mode::Write, 100),
            Reply::Nil,
            "b still reads"
        );
        m.now += 1_000;
        // The hash expires with b's lease; a writer gets it.
        assert_eq!(take(&mut m, b"w", Mode::Write, 100), Reply::Int(1));
        // With the hash kept alive by a renewing reader, a crashed reader is tidied out.
        let mut m = Mem::new(b"rw");
        take(&mut m, b"dead", Mode::Read, 100);
        m.now += 150;
        m.expire();
        assert!(m.exists(b"rw") || !m.exists(b"rw"));
        m.hset(b"rw", b"mode", b"read");
        m.hset(b"rw", b"dead", b"1");
        assert_eq!(take(&mut m, b"w", Mode::Write, 100), Reply::Int(1));
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
    }

    #[test]
    fn the_last_reader_frees_a_hash_whose_ttl_runs_past_its_hold() {
        // Redisson's read unlock sets the hash's TTL from a PTTL it read: a millisecond or
        // more past the last hold's own end. That hold's release still frees the lock.
        let mut m = Mem::new(b"rw");
        take(&mut m, b"j", Mode::Read, 10_000);
        let end = m.expire_at(&hold_key(&m, b"j", 1)).unwrap();
        m.set_expire(b"rw", end + 2);
        assert_eq!(give(&mut m, b"j", Mode::Read), Ok(Reply::Int(0)));
        assert!(!m.exists(b"rw"), "no hold is left: the lock is free");
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
        // Another reader's field keeps it, with its TTL, as before.
        let mut m = Mem::new(b"rw");
        take(&mut m, b"j", Mode::Read, 1_000);
        take(&mut m, b"k", Mode::Read, 10_000);
        assert_eq!(give(&mut m, b"j", Mode::Read), Ok(Reply::Int(0)));
        assert!(m.exists(b"rw"), "k still reads");
    }

    #[test]
    fn the_last_live_release_frees_a_lock_whose_other_readers_expired() {
        let mut m = Mem::new(b"rw");
        take(&mut m, b"dead", Mode::Read, 100);
        take(&mut m, b"b", Mode::Read, 1_000);
        m.now += 150;
        m.expire();
        assert_eq!(give(&mut m, b"b", Mode::Read), Ok(Reply::Int(0)));
        assert!(!m.exists(b"rw"), "no live hold is left");
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
        // A writer whose downgrade's read holds expired frees it too, as a write release.
        let mut m = Mem::new(b"rw");
        take(&mut m, b"w", Mode::Write, 1_000);
        take(&mut m, b"w", Mode::Read, 100);
        m.now += 150;
        m.expire();
        assert_eq!(give(&mut m, b"w", Mode::Write), Ok(Reply::Int(0)));
        assert!(!m.exists(b"rw"));
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 1)]);
    }

    #[test]
    fn renew_sets_hold_leases_and_the_longest() {
        let mut m = Mem::new(b"rw");
        take(&mut m, b"a", Mode::Read, 100);
        take(&mut m, b"a", Mode::Read, 100);
        take(&mut m, b"b", Mode::Read, 500);
        m.now += 50;
        let d = renew(&m, b"a", 1_000).unwrap();
        assert_eq!(m.apply_ok(&d), Reply::Int(2));
        assert_eq!(m.ttl(b"{rw}:a:rwlock_timeout:1"), Some(1_000));
        assert_eq!(m.ttl(b"{rw}:a:rwlock_timeout:2"), Some(1_000));
        assert_eq!(m.ttl(b"rw"), Some(1_000));
        let d = renew(&m, b"zz", 1_000).unwrap();
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        let d = renew(&m, b"b", 10).unwrap();
        m.apply_ok(&d);
        assert_eq!(m.ttl(b"rw"), Some(1_000), "a's holds are longer");
        let mut m = Mem::new(b"rw");
        take(&mut m, b"w", Mode::Write, 100);
        let d = renew(&m, b"w", 5_000).unwrap();
        assert_eq!(m.apply_ok(&d), Reply::Int(1));
        assert_eq!(m.ttl(b"rw"), Some(5_000));
    }

    #[test]
    fn force_release_and_info() {
        let mut m = Mem::new(b"rw");
        assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(0));
        take(&mut m, b"a", Mode::Read, 100);
        take(&mut m, b"b", Mode::Read, 100);
        let shown = info(&m, vec![]).unwrap();
        let Reply::Map(fields) = shown else { panic!() };
        assert_eq!(fields[0], ("mode", Reply::Bulk(b"read".to_vec())));
        assert_eq!(
            fields[1],
            (
                "readers",
                Reply::Array(vec![
                    Reply::Bulk(b"a".to_vec()),
                    Reply::Int(1),
                    Reply::Bulk(b"b".to_vec()),
                    Reply::Int(1)
                ])
            )
        );
        assert_eq!(fields[2], ("writer", Reply::Nil));
        assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(1));
        assert!(!m.exists(b"rw"));
        assert!(!m.exists(b"{rw}:a:rwlock_timeout:1"));
        assert!(!m.exists(b"{rw}:b:rwlock_timeout:1"));
        assert_eq!(m.published, vec![(b"redisson_rwlock:{rw}".to_vec(), 0)]);
        // A plain lock's hash is not a read-write lock: left alone, WRONGTYPE for every command.
        m.hset(b"rw", b"owner", b"1");
        assert_eq!(force_release(&m), Err(CmdError::WrongType));
        assert_eq!(
            acquire(&m, b"a", Mode::Read, 1, false, false),
            Err(CmdError::WrongType)
        );
        assert_eq!(
            release(&m, b"owner", Mode::Read).err(),
            Some(CmdError::WrongType)
        );
        assert_eq!(renew(&m, b"owner", 100).err(), Some(CmdError::WrongType));
        assert_eq!(info(&m, vec![]), Err(CmdError::WrongType));
        assert!(m.exists(b"rw"));
        m.set_str(b"rw", b"x");
        assert_eq!(
            acquire(&m, b"a", Mode::Read, 1, false, false),
            Err(CmdError::WrongType)
        );
        assert_eq!(info(&m, vec![]), Err(CmdError::WrongType));
    }

    #[test]
    fn fifo_across_modes_with_readers_granted_together() {
        let mut m = Mem::new(b"rw");
        let id = KeyId::new(0, b"rw");
        let mut q: Queues<u32, Req> = Queues::default();
        take(&mut m, b"w0", Mode::Write, 100);
        let arrivals = [
            (b"r1", Mode::Read),
            (b"r2", Mode::Read),
            (b"w3", Mode::Write),
            (b"r4", Mode::Read),
        ];
        for (i, (o, mode)) in arrivals.iter().enumerate() {
            let req: Req = std::rc::Rc::new(RwWait {
                owner: o.as_slice().into(),
                mode: *mode,
                lease_ms: 100,
            });
            q.push(
                &id,
                Waiter {
                    handle: i as u32,
                    serial: i as u64,
                    req,
                    deadline: None,
                    queued_us: 0,
                },
            );
        }
        let granted = |s: crate::core::wait::Served<u32>| -> Vec<u32> {
            s.outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Granted { waiter, .. } => waiter.handle,
                    Outcome::Failed { error, .. } => panic!("{error}"),
                })
                .collect()
        };
        assert!(granted(serve(&mut q, &id, &mut m)).is_empty());
        give(&mut m, b"w0", Mode::Write).unwrap();
        assert_eq!(
            granted(serve(&mut q, &id, &mut m)),
            vec![0, 1],
            "readers together"
        );
        // A newcomer reader queues behind the waiting writer.
        assert_eq!(
            acquire(&m, b"r9", Mode::Read, 100, true, false),
            Ok(Acquire::Busy)
        );
        give(&mut m, b"r1", Mode::Read).unwrap();
        assert!(granted(serve(&mut q, &id, &mut m)).is_empty());
        give(&mut m, b"r2", Mode::Read).unwrap();
        assert_eq!(granted(serve(&mut q, &id, &mut m)), vec![2]);
        give(&mut m, b"w3", Mode::Write).unwrap();
        assert_eq!(granted(serve(&mut q, &id, &mut m)), vec![3]);
        assert_eq!(q.total(), 0);
    }

    #[test]
    fn undo_gives_back_an_untouched_grant() {
        let mut m = Mem::new(b"rw");
        let w = RwWait {
            owner: b"a".as_slice().into(),
            mode: Mode::Read,
            lease_ms: 100,
        };
        let Serve::Grant(d) = w.serve(&m) else {
            panic!()
        };
        m.apply_ok(&d);
        let undo = w.undo(&Reply::Int(1), &m).unwrap();
        m.apply_ok(&undo);
        assert!(!m.exists(b"rw"));
        assert!(!m.exists(b"{rw}:a:rwlock_timeout:1"));
    }
}

/// Property tests: random sequences of acquires (waiting or not), releases, renewals, time
/// passing and waiters leaving, over a few owners, through these rules and the shared serving
/// loop. Checked after every step: never a writer together with another owner's hold, grants
/// from the queue in arrival order, the queue model matches; and at the end, once every holder
/// lets go, every waiter is granted.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire { o: u8, write: bool, block: bool },
        Release { o: u8, write: bool },
        Renew { o: u8 },
        Tick { ms: i64 },
        Leave { i: usize },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u8..4, any::<bool>(), any::<bool>())
                .prop_map(|(o, write, block)| Op::Acquire { o, write, block }),
            4 => (0u8..4, any::<bool>()).prop_map(|(o, write)| Op::Release { o, write }),
            1 => (0u8..4).prop_map(|o| Op::Renew { o }),
            2 => (1i64..120).prop_map(|ms| Op::Tick { ms }),
            1 => (0usize..8).prop_map(|i| Op::Leave { i }),
        ]
    }

    const LEASE: i64 = 100;

    fn who(o: u8) -> Vec<u8> {
        vec![b'a' + o]
    }

    struct Sim {
        mem: Mem,
        q: Queues<u32, Req>,
        model: VecDeque<(u32, u8, Mode)>,
        next: u32,
        granted: Vec<u32>,
    }

    fn id() -> KeyId {
        KeyId::new(0, b"rw")
    }

    impl Sim {
        fn serve(&mut self) {
            let served = serve(&mut self.q, &id(), &mut self.mem);
            for o in served.outcomes {
                match o {
                    Outcome::Granted { waiter, .. } => {
                        let (h, _, _) = self.model.pop_front().expect("model has it");
                        assert_eq!(h, waiter.handle, "FIFO");
                        self.granted.push(h);
                    }
                    Outcome::Failed { error, .. } => panic!("unexpected failure: {error}"),
                }
            }
            self.q.forget_if_idle(&id());
        }

        fn acquire(&mut self, o: u8, mode: Mode, block: bool) {
            self.serve();
            let queued = self.q.is_queued(&id());
            let owner = who(o);
            let mut r = acquire(&self.mem, &owner, mode, LEASE, queued, false);
            if r == Ok(Acquire::TidyFirst) {
                let t = tidy(&self.mem).unwrap();
                self.mem.apply_ok(&t);
                r = acquire(&self.mem, &owner, mode, LEASE, queued, true);
            }
            match r {
                Ok(Acquire::Grant(d, _)) => {
                    if queued {
                        // Nobody is overtaken but by a re-entry or a downgrade: the owner
                        // already holds the lock (a write hold covers a read).
                        let held = self.holders();
                        let mine =
                            |write: bool| held.iter().any(|(h, w)| *h == owner && *w == write);
                        let ok = match mode {
                            Mode::Read => mine(false) || mine(true),
                            Mode::Write => mine(true),
                        };
                        assert!(
                            ok,
                            "{mode:?} for {owner:?} granted past a queued waiter: {held:?}"
                        );
                    }
                    self.mem.apply_ok(&d);
                }
                Ok(Acquire::Busy) if block => {
                    let h = self.next;
                    self.next += 1;
                    let req: Req = std::rc::Rc::new(RwWait {
                        owner: owner.into(),
                        mode,
                        lease_ms: LEASE,
                    });
                    self.q.push(
                        &id(),
                        Waiter {
                            handle: h,
                            serial: h as u64,
                            req,
                            deadline: None,
                            queued_us: 0,
                        },
                    );
                    self.model.push_back((h, o, mode));
                }
                Ok(_) | Err(CmdError::Deadlock(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }

        fn step(&mut self, op: &Op) {
            match *op {
                Op::Acquire { o, write, block } => {
                    let mode = if write { Mode::Write } else { Mode::Read };
                    self.acquire(o, mode, block);
                }
                Op::Release { o, write } => {
                    let mode = if write { Mode::Write } else { Mode::Read };
                    let owner = who(o);
                    let field = if write {
                        writer_field(&owner)
                    } else {
                        owner.clone()
                    };
                    let had_field = self.mem.hash(b"rw").contains_key(&field);
                    let held = self
                        .holders()
                        .iter()
                        .any(|(h, w)| *h == owner && *w == write);
                    match release(&self.mem, &owner, mode) {
                        Ok((d, r)) => {
                            assert!(
                                had_field,
                                "{owner:?} released a {mode:?} hold it had no field for"
                            );
                            let reply = self.mem.apply_ok(&d);
                            let Reply::Int(left) = reply else {
                                panic!("release reply {reply:?}")
                            };
                            assert!(left >= 0);
                            assert_eq!(r.last, left == 0, "last hold <=> nothing left");
                            if r.freed {
                                assert!(!self.mem.exists(b"rw"), "freed, yet the lock is there");
                            }
                        }
                        Err(CmdError::NotOwner) => {
                            assert!(!held, "{owner:?} holds a {mode:?} hold, yet NOTOWNER");
                        }
                        Err(e) => panic!("release: {e}"),
                    }
                    self.serve();
                }
                Op::Renew { o } => {
                    let d = renew(&self.mem, &who(o), LEASE).unwrap();
                    self.mem.apply_ok(&d);
                }
                Op::Tick { ms } => {
                    self.mem.now += ms;
                    self.mem.expire();
                    self.serve();
                }
                Op::Leave { i } => {
                    if !self.model.is_empty() {
                        let (h, _, _) = self.model.remove(i % self.model.len()).unwrap();
                        self.q.remove(h).expect("queued");
                        self.serve();
                    }
                }
            }
        }

        /// Owners holding anything, with whether it is a write hold (expired read holds are
        /// not holds, even before their field is tidied away).
        fn holders(&self) -> Vec<(Vec<u8>, bool)> {
            let h = holders(&self.mem);
            let mut out: Vec<(Vec<u8>, bool)> = h
                .readers
                .iter()
                .filter(|(o, c)| !hold_expiries(&self.mem, o, *c).is_empty())
                .map(|(o, _)| (o.clone(), false))
                .collect();
            if let Some((w, _)) = h.writer {
                out.push((w, true));
            }
            out
        }

        fn check(&self) {
            let hs = self.holders();
            if let Some((w, _)) = hs.iter().find(|(_, write)| *write) {
                assert!(
                    hs.iter().all(|(o, _)| o == w),
                    "a writer with another owner's hold: {hs:?}"
                );
            }
            let queued: Vec<u32> = self.q.queued(&id());
            assert_eq!(queued, self.model.iter().map(|m| m.0).collect::<Vec<_>>());
            assert!(
                self.granted.windows(2).all(|w| w[0] < w[1]),
                "grants in arrival order"
            );
        }
    }

    proptest! {
        #[test]
        fn rwlock_and_queue_state_machine(ops in prop::collection::vec(op(), 1..100)) {
            let mut sim = Sim {
                mem: Mem::new(b"rw"),
                q: Queues::default(),
                model: VecDeque::new(),
                next: 0,
                granted: Vec::new(),
            };
            for op in &ops {
                sim.step(op);
                sim.check();
            }
            // Liveness: let every lease run out, repeatedly; every waiter is granted.
            for _ in 0..(sim.model.len() + 2) {
                sim.mem.now += LEASE + 1;
                sim.mem.expire();
                sim.serve();
                sim.check();
            }
            prop_assert!(sim.model.is_empty(), "waiters left: {:?}", sim.model);
        }
    }
}

/// Property tests against Redisson: its read-write lock scripts (`RedissonReadLock`,
/// `RedissonWriteLock`, the watchdog's `ReadLockTask`), translated line by line into Rust over a
/// tiny Redis, run side by side with these rules over random sequences of read and write
/// acquires (re-entrant, each hold with its own lease), releases, renewals and time passing.
/// After every step both must hold the same keys, with the same values and expiry times, and
/// have published the same messages; and the rule the scripts' read unlock keeps must hold: a
/// read lock's hash expires with its longest live hold, and a lock exists only while some hold
/// of it is alive.
///
/// Where the module differs from Redisson's scripts on purpose, the model does what the module
/// does, marked `DIFFERS:` (each is in docs/commands.md).
#[cfg(test)]
mod redisson_prop_tests {
    use super::*;
    use crate::core::mem::{Mem, Value};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const NAME: &[u8] = b"rw";
    const CHANNEL: &[u8] = b"redisson_rwlock:{rw}";

    /// The few Redis commands the scripts use, on live keys only (lazy expiry).
    #[derive(Debug, Clone, Default)]
    struct Redis {
        now: i64,
        keys: BTreeMap<Vec<u8>, (Value, Option<i64>)>,
        published: Vec<(Vec<u8>, i64)>,
    }

    impl Redis {
        fn expire(&mut self) {
            let now = self.now;
            self.keys.retain(|_, (_, at)| at.is_none_or(|at| at > now));
        }
        fn hash(&self) -> Option<&BTreeMap<Vec<u8>, Vec<u8>>> {
            match self.keys.get(NAME) {
                Some((Value::Hash(h), _)) => Some(h),
                _ => None,
            }
        }
        fn hget(&self, field: &[u8]) -> Option<Vec<u8>> {
            self.hash()?.get(field).cloned()
        }
        fn hexists(&self, field: &[u8]) -> bool {
            self.hget(field).is_some()
        }
        fn hlen(&self) -> usize {
            self.hash().map_or(0, |h| h.len())
        }
        fn hset(&mut self, field: &[u8], value: &[u8]) {
            let e = self
                .keys
                .entry(NAME.to_vec())
                .or_insert_with(|| (Value::Hash(BTreeMap::new()), None));
            if let Value::Hash(h) = &mut e.0 {
                h.insert(field.to_vec(), value.to_vec());
            }
        }
        fn hincrby(&mut self, field: &[u8], by: i64) -> i64 {
            let n = self
                .hget(field)
                .and_then(|v| args::parse_i64(&v))
                .unwrap_or(0)
                + by;
            self.hset(field, n.to_string().as_bytes());
            n
        }
        fn hdel(&mut self, field: &[u8]) {
            if let Some((Value::Hash(h), _)) = self.keys.get_mut(NAME) {
                h.remove(field);
                if h.is_empty() {
                    self.keys.remove(NAME);
                }
            }
        }
        fn set(&mut self, key: &[u8]) {
            self.keys
                .insert(key.to_vec(), (Value::Str(b"1".to_vec()), None));
        }
        fn del(&mut self, key: &[u8]) {
            self.keys.remove(key);
        }
        fn pexpire(&mut self, key: &[u8], ms: i64) {
            let at = self.now + ms;
            if let Some(e) = self.keys.get_mut(key) {
                e.1 = Some(at);
            }
        }
        fn pttl(&self, key: &[u8]) -> i64 {
            match self.keys.get(key) {
                None => -2,
                Some((_, None)) => -1,
                Some((_, Some(at))) => at - self.now,
            }
        }
        fn publish(&mut self, message: i64) {
            self.published.push((CHANNEL.to_vec(), message));
        }
    }

    fn hold(owner: &[u8], k: i64) -> Vec<u8> {
        names::rwlock_hold(NAME, owner, k)
    }

    fn write_field(owner: &[u8]) -> Vec<u8> {
        [owner, b":write"].concat()
    }

    /// The largest PTTL of every hold key the hash's fields count, as the read unlock script
    /// computes it (`-3` when there is none; the `mode` field is skipped by `tonumber`, the
    /// writer's field counts keys that never exist).
    fn max_remain(r: &Redis) -> i64 {
        let mut max = -3;
        for (field, value) in r.hash().cloned().unwrap_or_default() {
            if let Some(counter) = args::parse_i64(&value) {
                for i in (1..=counter).rev() {
                    max = max.max(r.pttl(&hold(&field, i)));
                }
            }
        }
        max
    }

    /// `RedissonReadLock.tryLockInnerAsync`: granted or not.
    fn read_acquire(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
        let mode = r.hget(b"mode");
        if mode.is_none() {
            r.hset(b"mode", b"read");
            r.hset(owner, b"1");
            r.set(&hold(owner, 1));
            r.pexpire(&hold(owner, 1), lease);
            r.pexpire(NAME, lease);
            return true;
        }
        let mode = mode.unwrap();
        if mode == b"read" || (mode == b"write" && r.hexists(&write_field(owner))) {
            let ind = r.hincrby(owner, 1);
            let key = hold(owner, ind);
            r.set(&key);
            r.pexpire(&key, lease);
            let remain = r.pttl(NAME);
            r.pexpire(NAME, remain.max(lease));
            return true;
        }
        false
    }

    /// `RedissonWriteLock.tryLockInnerAsync`: granted or not.
    fn write_acquire(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
        let field = write_field(owner);
        if r.hget(b"mode").as_deref() == Some(b"read") {
            // DIFFERS: readers whose holds all expired hold nothing; unless another owner
            // reads, a writer clears them first, and when none is left the lock is free
            // (published as a read release would). Redisson waits for the hash to expire.
            let others_read = r.hash().cloned().unwrap_or_default().iter().any(|(f, v)| {
                f.as_slice() != b"mode"
                    && f.as_slice() != owner
                    && !f.ends_with(b":write")
                    && args::parse_i64(v).is_some_and(|n| (1..=n).any(|k| r.pttl(&hold(f, k)) > 0))
            });
            if others_read {
                return false;
            }
            let readers: Vec<(Vec<u8>, Vec<u8>)> = r
                .hash()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|(f, _)| f.as_slice() != b"mode")
                .collect();
            let mut live = 0;
            for (f, v) in readers {
                let n = args::parse_i64(&v).unwrap_or(0);
                if (1..=n).any(|k| r.pttl(&hold(&f, k)) > 0) {
                    live += 1;
                } else {
                    r.hdel(&f);
                }
            }
            if live > 0 {
                // The owner's own live read holds: an upgrade, never granted.
                return false;
            }
            r.del(NAME);
            r.publish(0);
        }
        let mode = r.hget(b"mode");
        if mode.is_none() {
            r.hset(b"mode", b"write");
            r.hset(&field, b"1");
            r.pexpire(NAME, lease);
            return true;
        }
        if mode.as_deref() == Some(b"write") && r.hexists(&field) {
            r.hincrby(&field, 1);
            let current = r.pttl(NAME);
            // DIFFERS: the larger of the two; Redisson adds them (`currentExpire + ARGV[1]`).
            r.pexpire(NAME, current.max(lease));
            return true;
        }
        false
    }

    /// `RedissonReadLock.unlockInnerAsync` (without the unlock latch): released or not.
    fn read_release(r: &mut Redis, owner: &[u8]) -> bool {
        let Some(mode) = r.hget(b"mode") else {
            // DIFFERS: Redisson publishes `0` here as well (its caller then throws).
            return false;
        };
        if !r.hexists(owner) {
            return false;
        }
        let counter = r.hincrby(owner, -1);
        if counter == 0 {
            r.hdel(owner);
        }
        r.del(&hold(owner, counter + 1));
        if r.hlen() > 1 {
            let max = max_remain(r);
            if mode == b"write" {
                // DIFFERS: the writer's lease is the hash's TTL, which no read release cuts;
                // Redisson sets it to the writer's longest read hold when one lives.
                return true;
            }
            if max > 0 {
                r.pexpire(NAME, max);
                return true;
            }
        }
        r.del(NAME);
        r.publish(0);
        true
    }

    /// `RedissonWriteLock.unlockInnerAsync` (without the unlock latch): released or not.
    fn write_release(r: &mut Redis, owner: &[u8]) -> bool {
        let field = write_field(owner);
        // DIFFERS: no publish on an absent lock (as for the read release).
        if r.hget(b"mode").as_deref() != Some(b"write") || !r.hexists(&field) {
            return false;
        }
        let counter = r.hincrby(&field, -1);
        if counter > 0 {
            // DIFFERS: the lease stays; Redisson resets it to its watchdog timeout.
            return true;
        }
        r.hdel(&field);
        if r.hlen() == 1 {
            r.del(NAME);
            r.publish(1);
        } else {
            r.hset(b"mode", b"read");
            // DIFFERS: the read lock left lasts as long as its longest hold (Redisson keeps
            // the write lease), and is freed at once when none of them lives.
            let max = max_remain(r);
            if max > 0 {
                r.pexpire(NAME, max);
            } else {
                r.del(NAME);
                r.publish(1);
            }
        }
        true
    }

    /// The watchdog's renewal (`ReadLockTask` for read holds, `LockTask` for the write hold):
    /// renewed or not.
    fn renew(r: &mut Redis, owner: &[u8], lease: i64) -> bool {
        if r.hget(b"mode").is_none() {
            return false;
        }
        let reads = r.hget(owner).and_then(|v| args::parse_i64(&v)).unwrap_or(0);
        let writes = r
            .hget(&write_field(owner))
            .and_then(|v| args::parse_i64(&v))
            .unwrap_or(0);
        let live: Vec<i64> = (1..=reads)
            .filter(|&k| r.pttl(&hold(owner, k)) > 0)
            .collect();
        // DIFFERS: only live holds count (Redisson renews the hash while the field is
        // there, holds expired or not).
        if live.is_empty() && writes <= 0 {
            return false;
        }
        for c in (1..=reads).rev() {
            r.pexpire(&hold(owner, c), lease);
        }
        // DIFFERS: the hash lasts as long as the longest hold of anyone (and the renewed
        // write lease); Redisson sets it to `lease`, cutting longer holds of other readers.
        let longest = max_remain(r).max(if writes > 0 { lease } else { -3 });
        r.pexpire(NAME, longest);
        true
    }

    #[derive(Debug, Clone)]
    enum Op {
        Read { o: u8, lease: i64 },
        Write { o: u8, lease: i64 },
        ReleaseRead { o: u8 },
        ReleaseWrite { o: u8 },
        Renew { o: u8, lease: i64 },
        Tick { ms: i64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let lease = || prop_oneof![1i64..20, 20i64..400];
        prop_oneof![
            6 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Read { o, lease }),
            2 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Write { o, lease }),
            5 => (0u8..3).prop_map(|o| Op::ReleaseRead { o }),
            2 => (0u8..3).prop_map(|o| Op::ReleaseWrite { o }),
            2 => (0u8..3, lease()).prop_map(|(o, lease)| Op::Renew { o, lease }),
            4 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
        ]
    }

    fn who(o: u8) -> Vec<u8> {
        vec![b'a' + o]
    }

    /// The module's answer to `op`: whether it took, released or renewed anything.
    fn module_step(m: &mut Mem, op: &Op) -> bool {
        let acquire_now = |m: &mut Mem, owner: &[u8], mode: Mode, lease: i64| {
            let mut r = acquire(m, owner, mode, lease, false, false);
            if r == Ok(Acquire::TidyFirst) {
                let t = tidy(m).unwrap();
                m.apply_ok(&t);
                r = acquire(m, owner, mode, lease, false, true);
            }
            match r {
                Ok(Acquire::Grant(d, _)) => {
                    m.apply_ok(&d);
                    true
                }
                Ok(_) | Err(CmdError::Deadlock(_)) => false,
                Err(e) => panic!("{e}"),
            }
        };
        let give = |m: &mut Mem, owner: &[u8], mode: Mode| match release(m, owner, mode) {
            Ok((d, _)) => {
                m.apply_ok(&d);
                true
            }
            Err(CmdError::NotOwner) => false,
            Err(e) => panic!("{e}"),
        };
        match *op {
            Op::Read { o, lease } => acquire_now(m, &who(o), Mode::Read, lease),
            Op::Write { o, lease } => acquire_now(m, &who(o), Mode::Write, lease),
            Op::ReleaseRead { o } => give(m, &who(o), Mode::Read),
            Op::ReleaseWrite { o } => give(m, &who(o), Mode::Write),
            Op::Renew { o, lease } => {
                let d = super::renew(m, &who(o), lease).unwrap();
                m.apply_ok(&d);
                d.reply != Some(Reply::Int(0))
            }
            Op::Tick { ms } => {
                m.now += ms;
                m.expire();
                true
            }
        }
    }

    fn model_step(r: &mut Redis, op: &Op) -> bool {
        match *op {
            Op::Read { o, lease } => read_acquire(r, &who(o), lease),
            Op::Write { o, lease } => write_acquire(r, &who(o), lease),
            Op::ReleaseRead { o } => read_release(r, &who(o)),
            Op::ReleaseWrite { o } => write_release(r, &who(o)),
            Op::Renew { o, lease } => renew(r, &who(o), lease),
            Op::Tick { ms } => {
                r.now += ms;
                r.expire();
                true
            }
        }
    }

    /// The rule Redisson's read unlock keeps, stated on its own: a lock lives exactly while
    /// some hold of it does, and a read lock's hash ends with its longest hold.
    fn check_rule(m: &Mem) {
        let keys = m.snapshot();
        let read_holds: Vec<i64> = keys
            .iter()
            .filter(|(k, _)| k.starts_with(b"{rw}:"))
            .map(|(_, (_, at))| at.expect("every hold has a lease"))
            .collect();
        match keys.get(NAME) {
            None => assert!(
                read_holds.is_empty(),
                "hold keys outlive the lock: {keys:?}"
            ),
            Some((Value::Hash(h), at)) => {
                let at = at.expect("the lock has a lease");
                match h.get(b"mode".as_slice()).map(Vec::as_slice) {
                    Some(b"read") => assert_eq!(
                        Some(at),
                        read_holds.iter().copied().max(),
                        "a read lock ends with its longest hold: {keys:?}"
                    ),
                    Some(b"write") => assert!(
                        read_holds.iter().all(|&e| e <= at),
                        "the write lease covers the writer's read holds: {keys:?}"
                    ),
                    other => panic!("mode {other:?}"),
                }
            }
            Some(other) => panic!("{other:?}"),
        }
    }

    proptest! {
        // 2,000 cases take about a second; `make fuzz` sets PROPTEST_CASES for more.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2_000)
        ))]
        #[test]
        fn release_renew_and_expiry_follow_redissons_scripts(ops in prop::collection::vec(op(), 1..80)) {
            let mut m = Mem::new(NAME);
            let mut r = Redis { now: m.now, ..Redis::default() };
            for (i, op) in ops.iter().enumerate() {
                let took = module_step(&mut m, op);
                let expected = model_step(&mut r, op);
                prop_assert_eq!(took, expected, "step {} {:?}", i, op);
                prop_assert_eq!(&m.snapshot(), &r.keys, "step {} {:?}", i, op);
                prop_assert_eq!(&m.published, &r.published, "step {} {:?}", i, op);
                check_rule(&m);
            }
        }
    }

    /// The issue's two reproductions, in the rules alone.
    #[test]
    fn a_release_sets_the_hash_to_the_longest_hold_left() {
        let mut m = Mem::new(NAME);
        let take = |m: &mut Mem, o: &[u8], lease| {
            let Ok(Acquire::Grant(d, _)) = acquire(m, o, Mode::Read, lease, false, false) else {
                panic!()
            };
            m.apply_ok(&d);
        };
        take(&mut m, b"A", 3_000);
        take(&mut m, b"B", 30_000);
        assert_eq!(m.ttl(NAME), Some(30_000));
        let (d, _) = release(&m, b"B", Mode::Read).unwrap();
        m.apply_ok(&d);
        assert_eq!(m.ttl(NAME), Some(3_000), "A's lease");
        // Re-entrant holds: releasing the live one of two, the other expired, frees the lock.
        let mut m = Mem::new(NAME);
        take(&mut m, b"r", 100);
        take(&mut m, b"r", 3_000);
        m.now += 400;
        m.expire();
        let (d, released) = release(&m, b"r", Mode::Read).unwrap();
        assert_eq!(
            released,
            Released {
                last: true,
                freed: true
            }
        );
        assert_eq!(m.apply_ok(&d), Reply::Int(0));
        assert!(!m.exists(NAME));
        assert_eq!(m.published, vec![(CHANNEL.to_vec(), 0)]);
    }
}

/// Property test of the bounded paths for a lock with many readers (more than
/// [`MANY_READERS`]): whatever the order of releases, crashes (leases running out) and time,
/// a queued writer is never granted while a read hold is alive, and it is granted once every
/// reader is gone (by its release, or when the hash expires with the longest hold).
#[cfg(test)]
mod many_readers_prop_tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
    use proptest::prelude::*;

    const READERS: usize = 80;

    #[derive(Debug, Clone)]
    enum Op {
        /// Reader `i` lets go of its hold (if it still holds it).
        Release(usize),
        /// Time passes: some leases run out (their readers crashed).
        Tick(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..READERS).prop_map(Op::Release),
            1 => (1i64..200).prop_map(Op::Tick),
        ]
    }

    fn id() -> KeyId {
        KeyId::new(0, b"rw")
    }

    fn live_holds(m: &Mem) -> usize {
        (0..READERS)
            .filter(|i| m.exists(format!("{{rw}}:r{i}:rwlock_timeout:1").as_bytes()))
            .count()
    }

    fn writer_holds(m: &Mem) -> bool {
        m.hash(b"rw").contains_key(&b"w:write"[..])
    }

    proptest! {
        #[test]
        fn a_writer_waits_for_every_live_reader_and_no_longer(
            leases in prop::collection::vec(50i64..2_000, READERS),
            ops in prop::collection::vec(op(), 1..300),
        ) {
            let mut m = Mem::new(b"rw");
            for (i, lease) in leases.iter().enumerate() {
                let owner = format!("r{i}");
                match acquire(&m, owner.as_bytes(), Mode::Read, *lease, false, false).unwrap() {
                    Acquire::Grant(d, _) => { m.apply_ok(&d); }
                    other => panic!("reader {i}: {other:?}"),
                }
            }
            let mut q: Queues<u32, Req> = Queues::default();
            let req: Req = std::rc::Rc::new(RwWait { owner: b"w".to_vec().into(), mode: Mode::Write, lease_ms: 60_000 });
            q.push(&id(), Waiter { handle: 1, serial: 1, req, deadline: None, queued_us: 0 });
            let mut released = [false; READERS];
            let mut granted = false;
            let serve_now = |m: &mut Mem, q: &mut Queues<u32, Req>, granted: &mut bool| {
                for o in serve(q, &id(), m).outcomes {
                    match o {
                        Outcome::Granted { .. } => *granted = true,
                        Outcome::Failed { error, .. } => panic!("{error}"),
                    }
                }
            };
            for op in ops {
                match op {
                    Op::Release(i) if !released[i] && !granted => {
                        released[i] = true;
                        let owner = format!("r{i}");
                        // A reader whose lease ran out no longer holds: NOTOWNER, or the field
                        // is still there and its release goes through. Either is fine.
                        if let Ok((d, _)) = release(&m, owner.as_bytes(), Mode::Read) {
                            m.apply_ok(&d);
                        }
                    }
                    Op::Tick(ms) => {
                        m.now += ms;
                        m.expire();
                    }
                    _ => {}
                }
                serve_now(&mut m, &mut q, &mut granted);
                prop_assert!(!(granted && live_holds(&m) > 0), "a writer with {} live readers", live_holds(&m));
                prop_assert_eq!(granted, writer_holds(&m));
            }
            // Every lease runs out: the writer gets the lock.
            m.now += 3_000;
            m.expire();
            serve_now(&mut m, &mut q, &mut granted);
            prop_assert!(granted, "the writer is granted once every reader is gone");
            prop_assert_eq!(live_holds(&m), 0);
        }
    }
}

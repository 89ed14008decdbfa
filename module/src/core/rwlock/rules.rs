//! The read-write lock's rules: acquire, release, renew, force release, tidy and info, each
//! deciding the writes on Redisson's layout.

use super::layout::*;
use super::{Mode, MODE, WRITE_SUFFIX};
use crate::core::args;
use crate::core::decision::{Decision, Reply, Write};
use crate::core::error::CmdError;
use crate::core::names;
use crate::core::store::{Int, KeyType, Store, Target};
use std::borrow::Cow;

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
pub(super) fn read_grant<'a>(
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
            value: Cow::Borrowed(b"read"),
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
pub(super) fn write_grant<'a>(
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
            value: Cow::Borrowed(b"write"),
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

pub(super) fn next_count(n: i64) -> Result<i64, CmdError> {
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

pub(super) fn upgrade(store: &(impl Store + ?Sized), owner: &[u8]) -> CmdError {
    CmdError::Deadlock(format!(
        "owner '{}' holds a read lock on '{}' and asks for its write lock: an upgrade can never be granted",
        crate::core::error::echo(owner),
        crate::core::error::echo(store.key_name()),
    ))
}

/// Whether a reader other than `owner` holds the lock now, looked for in the hash's order and
/// stopping at the first one found alive. Readers found dead on the way are counted: past a
/// few, the caller tidies instead (their removal pays for the reading).
pub(super) fn another_live_reader(store: &(impl Store + ?Sized), owner: &[u8]) -> bool {
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
pub(super) const MANY_READERS: usize = 64;

/// Holds a read release reads at most when the lock has many readers (see
/// [`read_holds_end`]).
pub(super) const RELEASE_BUDGET: usize = 64;

/// Dead readers a serve tidies at most when the lock has many (see [`tidy_some`]).
pub(super) const TIDY_BUDGET: usize = 8;

pub(super) fn many_readers(store: &(impl Store + ?Sized)) -> bool {
    store.hlen(&Target::Main) > MANY_READERS
}

/// A bounded [`tidy`] for a lock with many readers: the first `budget` readers in the hash's
/// order are looked at, and those whose holds all ended lose their field. It never frees the
/// lock (it has not seen every reader): a lock whose readers are all gone is freed by the last
/// release, or expires with its last hold (the hash's TTL is its longest hold's). A dead
/// reader's field left behind holds nothing: writers wait for the live ones.
pub(super) fn tidy_some(store: &(impl Store + ?Sized), budget: usize) -> Decision<'static> {
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
pub(super) fn free(store: &(impl Store + ?Sized), h: &Holders) -> Vec<Write<'static>> {
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
    writes.push(Write::PublishOn {
        prefix: names::RWLOCK_CHANNEL,
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
pub(super) type HoldsEnd = Option<Option<i64>>;

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
pub(super) fn read_holds_end(
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
    if mode == Mode::Write && store.hlen(&Target::Main) == 2 {
        // The hash holds `mode` and this writer's field alone (both read above): no read hold
        // is left, and the lock goes without reading the hash twice more (`read_holds_end`,
        // then `holders`, below: 5,600 of a write release's 16,000 instructions, callgrind).
        let h = Holders {
            mode: Some(Mode::Write),
            ..Holders::default()
        };
        writes.extend(free(store, &h));
        let released = Released {
            last: true,
            freed: true,
        };
        return Ok((Decision::new(writes, Reply::Int(0)), released));
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
                    value: Cow::Borrowed(b"read"),
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
pub(super) fn owner_count(field: Cow<'_, [u8]>, left: i64) -> Write<'_> {
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
            Reply::Int(crate::core::lock::ttl_ms(
                store,
                &Target::Main,
                kind == KeyType::Hash,
            )),
        ),
        ("waiters", Reply::Int(queue.len() as i64)),
        ("queue", Reply::Array(queue)),
    ]))
}

//! `RSEM.*`: the counting semaphore with optional expiring permits, in Redisson's layout, so
//! Redisson's `RSemaphore` and `RPermitExpirableSemaphore` scripts work on the same keys:
//! - string `<key>`: the available permits (it may go negative through `ADDPERMITS`);
//! - sorted set `{<key>}:timeout`: one member per leased permit, its id as 16 raw bytes (shown
//!   to users as 32 lowercase hex characters), scored with the lease's end in ms (Redisson
//!   scores a permit leased without an end with [`PERMANENT`]);
//! - channel `redisson_sc:{<key>}`: the available count, whenever permits are added.
//!
//! Waiters are strict FIFO: a head asking for 5 permits is not overtaken by later ones asking
//! for 1 ([`SemaphoreRequest`]). A leased permit whose lease ended goes back to the pool: lazily at the
//! next command (as Redisson's scripts do), and by the waiting mechanism's timer while waiters
//! are queued ([`SemaphoreRequest::tidy`]), straight to the head of the queue.

use super::args::{self, Opt, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::{Object, Request, Tidy, TryGrant};

/// Redisson's score for a permit without an end (`nonExpirableTimeout`): never reclaimed.
pub const PERMANENT: i64 = 922_337_203_685_477;

/// Most permits one leased acquire may take: each is a member of the set and an id in the
/// reply, so the request's size bounds the memory it needs.
pub const MAX_LEASED: i64 = 100_000;

/// Bytes in a permit id.
pub const ID_LEN: usize = 16;

pub type PermitId = [u8; ID_LEN];

/// How soon a queue whose expired permits could not be reclaimed (writes paused) is looked at
/// again.
const RECLAIM_RETRY_MS: i64 = 10;

// ---- permit ids ----------------------------------------------------------------------------------

/// A permit id as users see it: 32 lowercase hex characters.
pub fn hex(id: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    id.iter()
        .flat_map(|b| [DIGITS[(b >> 4) as usize], DIGITS[(b & 15) as usize]])
        .collect()
}

/// A permit id from its hex form (either case).
pub fn parse_id(text: &[u8]) -> Result<PermitId, CmdError> {
    if text.len() != 2 * ID_LEN {
        return Err(CmdError::BadPermitId);
    }
    let digit = |c: u8| (c as char).to_digit(16).ok_or(CmdError::BadPermitId);
    let mut id = [0u8; ID_LEN];
    for (i, pair) in text.chunks(2).enumerate() {
        id[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Ok(id)
}

// ---- arguments ---------------------------------------------------------------------------------

/// `RSEM.ACQUIRE key [PERMITS n] [LEASE ms] [BLOCK timeout_ms] [SESSION s [QUEUE request
/// timeout_ms]]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub permits: i64,
    pub lease_ms: Option<i64>,
    pub wait: WaitArgs<'a>,
}

const PERMITS: Opt = Opt {
    name: "PERMITS",
    values: 1,
    needs: "PERMITS needs a count",
};

const LEASE: Opt = Opt {
    name: "LEASE",
    values: 1,
    needs: "LEASE needs a duration in milliseconds",
};

fn permits(bytes: &[u8]) -> Result<i64, CmdError> {
    args::at_least(bytes, "permits", 1)
}

pub fn parse_acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, CmdError> {
    args::arity(argv, |n| n >= 2, "rsem.acquire")?;
    let mut req = AcquireArgs {
        permits: 1,
        lease_ms: None,
        wait: WaitArgs::new(),
    };
    let [block, session, queue] = WAIT_OPTS;
    args::options(
        &argv[2..],
        &[block, session, queue, &PERMITS, &LEASE],
        |k, v| {
            match k {
                args::AT_BLOCK..=args::AT_QUEUE => req.wait.take(k, v)?,
                3 => req.permits = permits(v[0])?,
                _ => req.lease_ms = Some(args::lease(v[0])?),
            }
            Ok(())
        },
    )?;
    req.wait = req.wait.finish()?;
    if req.lease_ms.is_some() && req.permits > MAX_LEASED {
        return Err(CmdError::TooLarge("permits with LEASE", MAX_LEASED));
    }
    Ok(req)
}

/// What `RSEM.RELEASE` gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// `[PERMITS n]`: n plain permits (1 by default).
    Permits(i64),
    /// `ID id [id ...]`: these leased permits, all or none.
    Ids(Vec<PermitId>),
}

/// `RSEM.RELEASE key [PERMITS n]` or `RSEM.RELEASE key ID id [id ...]`
pub fn parse_release(argv: &[&[u8]]) -> Result<Release, CmdError> {
    args::arity(argv, |n| n >= 2, "rsem.release")?;
    let rest = &argv[2..];
    let Some(word) = rest.first() else {
        return Ok(Release::Permits(1));
    };
    if word.eq_ignore_ascii_case(b"ID") {
        if rest.len() < 2 {
            return Err(CmdError::Syntax("ID needs at least one permit id".into()));
        }
        return rest[1..]
            .iter()
            .map(|t| parse_id(t))
            .collect::<Result<_, _>>()
            .map(Release::Ids);
    }
    let mut n = 1;
    args::options(rest, &[&PERMITS], |_, v| {
        n = permits(v[0])?;
        Ok(())
    })?;
    Ok(Release::Permits(n))
}

/// `RSEM.RENEW key lease_ms ID id [id ...]`: the new lease and the permits.
pub fn parse_renew(argv: &[&[u8]]) -> Result<(i64, Vec<PermitId>), CmdError> {
    args::arity(argv, |n| n >= 5, "rsem.renew")?;
    let lease_ms = args::lease(argv[2])?;
    if !argv[3].eq_ignore_ascii_case(b"ID") {
        return Err(CmdError::Syntax(format!(
            "expected ID, got '{}'",
            super::error::echo(argv[3])
        )));
    }
    let ids = argv[4..]
        .iter()
        .map(|t| parse_id(t))
        .collect::<Result<_, _>>()?;
    Ok((lease_ms, ids))
}

/// `RSEM.TRYSETPERMITS key n`
pub fn parse_try_set(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 3, "rsem.trysetpermits")?;
    args::at_least(argv[2], "permits", 0)
}

/// `RSEM.ADDPERMITS key delta`
pub fn parse_add(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 3, "rsem.addpermits")?;
    args::integer(argv[2], "delta")
}

/// Leased permits (and queued requests) `RSEM.INFO` lists without `COUNT`: its cost is
/// bounded by what it lists (about 1 us per permit), not by the semaphore's size.
pub const INFO_COUNT: usize = 1_000;

const COUNT: Opt = Opt {
    name: "COUNT",
    values: 1,
    needs: "COUNT needs a number",
};

/// `RSEM.INFO key [COUNT n]`: how many leased permits (and queued requests) to list.
pub fn parse_info(argv: &[&[u8]]) -> Result<usize, CmdError> {
    args::arity(argv, |n| n >= 2, "rsem.info")?;
    let mut count = INFO_COUNT;
    args::options(&argv[2..], &[&COUNT], |_, v| {
        count = usize::try_from(args::at_least(v[0], "count", 1)?).unwrap_or(usize::MAX);
        Ok(())
    })?;
    Ok(count)
}

/// `RSEM.AVAILABLE key`, `RSEM.DRAIN key`: the key only.
pub fn parse_key(argv: &[&[u8]], name: &'static str) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 2, name)
}

// ---- reading the semaphore -----------------------------------------------------------------------

fn timeouts(store: &(impl Store + ?Sized)) -> Target {
    Target::Aux(names::semaphore_timeouts(store.key_name()))
}

fn channel(store: &(impl Store + ?Sized)) -> Vec<u8> {
    names::prefixed(names::SEMAPHORE_CHANNEL, store.key_name())
}

/// The available count (0 when absent), once both keys are known to be a semaphore's.
fn count(store: &(impl Store + ?Sized)) -> Result<i64, CmdError> {
    if !matches!(store.kind(&timeouts(store)), KeyType::Empty | KeyType::ZSet) {
        return Err(CmdError::WrongType);
    }
    match (store.kind(&Target::Main), store.get_int(&Target::Main)) {
        (KeyType::Empty, _) => Ok(0),
        (KeyType::String, Int::Is(n)) => Ok(n),
        _ => Err(CmdError::WrongType),
    }
}

/// Leased permits whose lease has ended (score at or before now, as Redisson's scripts read it).
fn expired(store: &(impl Store + ?Sized)) -> Vec<Vec<u8>> {
    store
        .zrange(&timeouts(store), store.now() as f64, usize::MAX)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

fn add(count: i64, n: i64) -> Result<i64, CmdError> {
    count.checked_add(n).ok_or(CmdError::PermitsOverflow)
}

// ---- decisions -----------------------------------------------------------------------------------

/// Return expired leased permits to the pool: `ZREM` them and `INCRBY` the count (what each of
/// Redisson's expirable-semaphore scripts does first). Nothing when none expired.
pub fn reclaim(store: &(impl Store + ?Sized)) -> Result<Decision<'static>, CmdError> {
    let available = count(store)?;
    let gone = expired(store);
    if gone.is_empty() {
        return Ok(Decision::default());
    }
    let n = gone.len() as i64;
    add(available, n)?;
    let key = timeouts(store);
    let mut writes: Vec<Write<'static>> = gone
        .into_iter()
        .map(|member| Write::ZRem {
            key: key.clone(),
            member,
        })
        .collect();
    writes.push(Write::IncrBy {
        key: Target::Main,
        by: n,
    });
    Ok(Decision::writes(writes))
}

/// Publish the available count (read when published) on the semaphore's channel, and reply
/// with it: what a command that added permits sends once queued waiters took theirs.
/// `positive_only`: as Redisson's reclaim, say nothing unless permits are left.
pub fn announce(
    store: &(impl Store + ?Sized),
    positive_only: bool,
) -> Result<Decision<'static>, CmdError> {
    Ok(Decision::new(
        vec![Write::PublishCount {
            channel: channel(store),
            key: Target::Main,
            positive_only,
        }],
        Reply::Int(count(store)?),
    ))
}

/// Take `permits` (leased until now + `lease_ms` when given): the writes and the reply, or
/// `None` when fewer are available or others queue first (`queued`).
pub fn acquire(
    store: &(impl Store + ?Sized),
    permits: i64,
    lease_ms: Option<i64>,
    queued: bool,
) -> Result<Option<Decision<'static>>, CmdError> {
    let available = count(store)?;
    let at = lease_ms
        .map(|ms| args::deadline(store.now(), ms, "lease_ms"))
        .transpose()?;
    if queued || available < permits {
        return Ok(None);
    }
    let mut writes = vec![Write::IncrBy {
        key: Target::Main,
        by: -permits,
    }];
    let reply = match at {
        None => Reply::Int(1),
        Some(at) => {
            let key = timeouts(store);
            let mut ids = Vec::with_capacity(permits as usize);
            for _ in 0..permits {
                let id = store.random_id();
                ids.push(Reply::Bulk(hex(&id)));
                writes.push(Write::ZAdd {
                    key: key.clone(),
                    member: id.to_vec(),
                    score: at,
                });
            }
            // As Redisson's script: the set lives as long as the count does.
            if let Some(ttl) = store.expire_at(&Target::Main) {
                writes.push(Write::PExpireAt { key, at: ttl });
            }
            Reply::Array(ids)
        }
    };
    Ok(Some(Decision::new(writes, reply)))
}

/// Give back `n` plain permits (creating the key, as Redisson's `release`). Reply: the count.
pub fn release_permits(
    store: &(impl Store + ?Sized),
    n: i64,
) -> Result<Decision<'static>, CmdError> {
    let now = add(count(store)?, n)?;
    Ok(Decision::new(
        vec![Write::IncrBy {
            key: Target::Main,
            by: n,
        }],
        Reply::Int(now),
    ))
}

/// Give back leased permits: every id must be leased and unexpired, or nothing is released.
pub fn release_ids(
    store: &(impl Store + ?Sized),
    ids: &[PermitId],
) -> Result<Decision<'static>, CmdError> {
    let available = count(store)?;
    let key = timeouts(store);
    let now = store.now() as f64;
    let mut writes = Vec::with_capacity(ids.len() + 1);
    for (i, id) in ids.iter().enumerate() {
        let live = store.zscore(&key, id).is_some_and(|at| at > now);
        // An id given twice is released once: the second one is already released.
        if !live || ids[..i].contains(id) {
            return Err(CmdError::NoPermit(String::from_utf8_lossy(&hex(id)).into()));
        }
        writes.push(Write::ZRem {
            key: key.clone(),
            member: id.to_vec(),
        });
    }
    let n = ids.len() as i64;
    let after = add(available, n)?;
    writes.push(Write::IncrBy {
        key: Target::Main,
        by: n,
    });
    Ok(Decision::new(writes, Reply::Int(after)))
}

/// Move the lease end of each permit in `ids` that is still leased to `lease_ms` from now
/// (Redisson's `updateLeaseTime`, for many permits in one call: a watchdog renews all of a
/// client's permits of one semaphore at once). Reply: how many were renewed; a permit that is
/// not leased (released, its lease ended, never issued) is skipped, as is an id given twice.
pub fn renew(
    store: &(impl Store + ?Sized),
    lease_ms: i64,
    ids: &[PermitId],
) -> Result<Decision<'static>, CmdError> {
    count(store)?; // both keys are a semaphore's
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    let key = timeouts(store);
    let now = store.now() as f64;
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    let mut writes = Vec::new();
    for id in ids {
        if seen.insert(id) && store.zscore(&key, id).is_some_and(|end| end > now) {
            writes.push(Write::ZAdd {
                key: key.clone(),
                member: id.to_vec(),
                score: at,
            });
        }
    }
    let renewed = writes.len() as i64;
    Ok(Decision::new(writes, Reply::Int(renewed)))
}

/// Take every available permit. Reply: how many (0 when none, or the count is negative).
pub fn drain(store: &(impl Store + ?Sized)) -> Result<Decision<'static>, CmdError> {
    let available = count(store)?;
    if available <= 0 {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    Ok(Decision::new(
        vec![Write::IncrBy {
            key: Target::Main,
            by: -available,
        }],
        Reply::Int(available),
    ))
}

/// Add `delta` permits (any sign; creates the key). Reply: the count.
pub fn add_permits(
    store: &(impl Store + ?Sized),
    delta: i64,
) -> Result<Decision<'static>, CmdError> {
    let now = add(count(store)?, delta)?;
    Ok(Decision::new(
        vec![Write::IncrBy {
            key: Target::Main,
            by: delta,
        }],
        Reply::Int(now),
    ))
}

/// Set the count to `n` if the semaphore does not exist. Reply: 1 set, 0 not.
pub fn try_set(store: &(impl Store + ?Sized), n: i64) -> Result<Decision<'static>, CmdError> {
    count(store)?;
    if store.kind(&Target::Main) != KeyType::Empty {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    Ok(Decision::new(
        vec![Write::SetInt {
            key: Target::Main,
            value: n,
        }],
        Reply::Int(1),
    ))
}

/// The available count as the next command will see it: expired leases count as returned.
/// Never writes (`RSEM.AVAILABLE` is read-only).
pub fn available(store: &(impl Store + ?Sized)) -> Result<i64, CmdError> {
    Ok(count(store)?.saturating_add(expired(store).len() as i64))
}

/// Leased permits with their lease ends.
type Leases = Vec<(Vec<u8>, f64)>;

/// `RSEM.INFO`'s view: the available count, the first `limit` live leases (soonest end
/// first) and how many live leases there are in all.
fn leases(store: &(impl Store + ?Sized), limit: usize) -> Result<(i64, Leases, usize), CmdError> {
    // One clock reading for both: the server's clock moves on between two reads, and a lease
    // ending in between was counted live but not listed (`leased_total` 4 beside 3 leases).
    let now = store.now() as f64;
    let key = timeouts(store);
    let gone = store.zrange(&key, now, usize::MAX).len();
    let available = count(store)?.saturating_add(gone as i64);
    let live: Vec<(Vec<u8>, f64)> = store
        .zrange(&key, f64::INFINITY, gone.saturating_add(limit))
        .into_iter()
        .filter(|(_, at)| *at > now)
        .collect();
    let total = store.zcard(&key).saturating_sub(gone);
    Ok((available, live, total))
}

/// `RSEM.INFO`: available, leased (`[id, remaining ms or -1]` per live permit, soonest end
/// first, at most `limit`), ttl_ms of the count, waiters, queue (`[permits, lease_ms or nil]`
/// each, the first `limit`; `waiters` is the queue's length). When either list was cut, a
/// sixth field `leased_total` says how many live leases there are.
///
/// `ids_readable`: whether the caller may read the leased-permit set; if not, each lease's id
/// is nil (an id is what releases or renews a leased permit: a user who may read the count is
/// not thereby allowed to read the set beside it).
pub fn info(
    store: &(impl Store + ?Sized),
    waiters: usize,
    queue: Vec<Reply>,
    limit: usize,
    ids_readable: bool,
) -> Result<Reply, CmdError> {
    let (available, leased, total) = leases(store, limit)?;
    let now = store.now();
    let cut = total > leased.len() || waiters > queue.len();
    let leased = leased
        .into_iter()
        .map(|(id, at)| {
            let left = if at >= PERMANENT as f64 {
                -1
            } else {
                at as i64 - now
            };
            let id = match ids_readable {
                true => Reply::Bulk(hex(&id)),
                false => Reply::Nil,
            };
            Reply::Array(vec![id, Reply::Int(left)])
        })
        .collect();
    let exists = store.kind(&Target::Main) != KeyType::Empty;
    let mut fields = vec![
        ("available", Reply::Int(available)),
        ("leased", Reply::Array(leased)),
        (
            "ttl_ms",
            Reply::Int(super::lock::ttl_ms(store, &Target::Main, exists)),
        ),
        ("waiters", Reply::Int(waiters as i64)),
        ("queue", Reply::Array(queue)),
    ];
    if cut {
        fields.push(("leased_total", Reply::Int(total as i64)));
    }
    Ok(Reply::Map(fields))
}

// ---- waiting -------------------------------------------------------------------------------------

/// The semaphore around its queue: leased permits whose lease ended go back to the pool before
/// its queue is served (and what is left is published once the waiters took theirs), and the
/// queue is looked at again when the soonest lease ends. Its leased-permit set is a key of its
/// own, which Redisson's scripts write.
pub struct SemaphoreObject;

impl Object for SemaphoreObject {
    fn kind(&self) -> ObjectKind {
        ObjectKind::Semaphore
    }

    fn tidy(&self, store: &dyn Store) -> Result<Tidy, CmdError> {
        let before = reclaim(store)?;
        if before.writes.is_empty() {
            return Ok(Tidy::default());
        }
        Ok(Tidy {
            before,
            // As Redisson's reclaim: what is left, once waiters took theirs, if anything.
            after_serving: Decision::writes(vec![Write::PublishCount {
                channel: channel(store),
                key: Target::Main,
                positive_only: true,
            }]),
        })
    }

    fn wake_at(&self, store: &dyn Store) -> Option<i64> {
        // The soonest lease end, whoever leased it; Redisson's permanent permits never end.
        let (_, at) = store
            .zrange(&timeouts(store), f64::INFINITY, 1)
            .into_iter()
            .next()?;
        if at >= PERMANENT as f64 {
            return None;
        }
        let now = store.now();
        // Already ended: tidying just ran and could not reclaim it (writes paused); retry soon
        // instead of at once.
        Some(if (at as i64) < now {
            now + RECLAIM_RETRY_MS
        } else {
            at as i64
        })
    }

    fn owners_of_aux(&self, key: &[u8]) -> Vec<Vec<u8>> {
        names::semaphores_of_timeouts(key)
    }
}

/// A queued `RSEM.ACQUIRE`: granted when its permits are available, leased from the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreRequest {
    pub permits: i64,
    pub lease_ms: Option<i64>,
}

impl Request for SemaphoreRequest {
    fn object(&self) -> &'static dyn Object {
        &SemaphoreObject
    }

    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_> {
        match acquire(store, self.permits, self.lease_ms, false) {
            Ok(Some(d)) => TryGrant::Grant(d),
            Ok(None) => TryGrant::Wait,
            Err(e) => TryGrant::Fail(e),
        }
    }

    fn undo(&self, granted: &Reply, store: &dyn Store) -> Option<Decision<'_>> {
        // The waiter never learnt of its permits: nobody else can hold them. Give back what is
        // still leased (all of it, unless a lease ended and was reclaimed meanwhile).
        let d = match granted {
            Reply::Array(ids) => {
                let ids: Vec<PermitId> = ids
                    .iter()
                    .filter_map(|r| match r {
                        Reply::Bulk(h) => parse_id(h).ok(),
                        _ => None,
                    })
                    .filter(|id| store.zscore(&timeouts(store), id).is_some())
                    .collect();
                if ids.is_empty() {
                    return None;
                }
                release_ids(store, &ids).ok()?
            }
            _ => release_permits(store, self.permits).ok()?,
        };
        let mut writes = d.writes;
        writes.extend(announce(store, false).ok()?.writes);
        Some(Decision::writes(writes))
    }

    fn aux_keys(&self, store: &dyn Store) -> Vec<Vec<u8>> {
        // Leased permits are recorded in `{key}:timeout`.
        match (self.lease_ms, timeouts(store)) {
            (Some(_), Target::Aux(k)) => vec![k],
            _ => Vec::new(),
        }
    }

    fn show(&self) -> Reply {
        Reply::Array(vec![
            Reply::Int(self.permits),
            self.lease_ms.map_or(Reply::Nil, Reply::Int),
        ])
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

    fn count_of(m: &Mem) -> i64 {
        count(m).unwrap()
    }

    fn take(m: &mut Mem, permits: i64, lease: Option<i64>) -> Reply {
        match acquire(m, permits, lease, false).unwrap() {
            Some(d) => m.apply_ok(&d),
            None => Reply::Nil,
        }
    }

    fn ids_of(r: &Reply) -> Vec<PermitId> {
        match r {
            Reply::Array(v) => v
                .iter()
                .map(|x| match x {
                    Reply::Bulk(h) => parse_id(h).unwrap(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("not ids: {other:?}"),
        }
    }

    #[test]
    fn ids_round_trip_as_lowercase_hex() {
        let id: PermitId = *b"\x00\x01\xab\xcd\xef\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xff";
        let h = hex(&id);
        assert_eq!(h, b"0001abcdef102030405060708090a0ff");
        assert_eq!(parse_id(&h), Ok(id));
        assert_eq!(parse_id(b"0001ABCDEF102030405060708090A0FF"), Ok(id));
        assert_eq!(parse_id(b"0001"), Err(CmdError::BadPermitId));
        assert_eq!(
            parse_id(b"0001abcdef102030405060708090a0fg"),
            Err(CmdError::BadPermitId)
        );
        assert_eq!(
            parse_id("é001abcdef102030405060708090a0f".as_bytes()),
            Err(CmdError::BadPermitId)
        );
    }

    #[test]
    fn arguments() {
        assert_eq!(
            parse_acquire(&argv(&["rsem.acquire", "s"])),
            Ok(AcquireArgs {
                permits: 1,
                lease_ms: None,
                wait: WaitArgs::new()
            })
        );
        assert_eq!(
            parse_acquire(&argv(&[
                "rsem.acquire",
                "s",
                "lease",
                "50",
                "Permits",
                "3",
                "BLOCK",
                "0"
            ])),
            Ok(AcquireArgs {
                permits: 3,
                lease_ms: Some(50),
                wait: WaitArgs {
                    wait: crate::core::args::WaitMode::Block(0),
                    session: None
                }
            })
        );
        assert_eq!(
            parse_acquire(&argv(&["rsem.acquire", "s", "PERMITS", "0"])),
            Err(CmdError::TooSmall("permits", 1))
        );
        assert_eq!(
            parse_acquire(&argv(&["rsem.acquire", "s", "LEASE", "0"])),
            Err(CmdError::LeaseTooSmall)
        );
        assert_eq!(
            parse_acquire(&argv(&[
                "rsem.acquire",
                "s",
                "PERMITS",
                "100001",
                "LEASE",
                "5"
            ])),
            Err(CmdError::TooLarge("permits with LEASE", MAX_LEASED))
        );
        assert!(parse_acquire(&argv(&["rsem.acquire", "s", "PERMITS", "100001"])).is_ok());
        assert_eq!(
            parse_acquire(&argv(&["rsem.acquire"])),
            Err(CmdError::Arity("rsem.acquire"))
        );
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s"])),
            Ok(Release::Permits(1))
        );
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s", "permits", "4"])),
            Ok(Release::Permits(4))
        );
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s", "PERMITS", "-1"])),
            Err(CmdError::TooSmall("permits", 1))
        );
        let id = "00112233445566778899aabbccddeeff";
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s", "id", id, id])),
            Ok(Release::Ids(vec![parse_id(id.as_bytes()).unwrap(); 2]))
        );
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s", "ID"])),
            Err(CmdError::Syntax("ID needs at least one permit id".into()))
        );
        assert_eq!(
            parse_release(&argv(&["rsem.release", "s", "ID", "xyz"])),
            Err(CmdError::BadPermitId)
        );
        assert_eq!(
            parse_release(&argv(&[
                "rsem.release",
                "s",
                "PERMITS",
                "1",
                "PERMITS",
                "2"
            ])),
            Err(CmdError::Syntax("PERMITS given twice".into()))
        );
        assert_eq!(
            parse_try_set(&argv(&["rsem.trysetpermits", "s", "0"])),
            Ok(0)
        );
        assert_eq!(
            parse_try_set(&argv(&["rsem.trysetpermits", "s", "-1"])),
            Err(CmdError::TooSmall("permits", 0))
        );
        assert_eq!(parse_add(&argv(&["rsem.addpermits", "s", "-7"])), Ok(-7));
        assert_eq!(
            parse_add(&argv(&["rsem.addpermits", "s", "x"])),
            Err(CmdError::NotInteger("delta"))
        );
        assert_eq!(
            parse_key(&argv(&["rsem.drain", "s", "x"]), "rsem.drain"),
            Err(CmdError::Arity("rsem.drain"))
        );
    }

    #[test]
    fn plain_permits_as_redissons_semaphore() {
        let mut m = Mem::new(b"s");
        assert_eq!(take(&mut m, 1, None), Reply::Nil, "absent: 0 permits");
        assert_eq!(m.apply_ok(&try_set(&m, 10).unwrap()), Reply::Int(1));
        assert_eq!(m.apply_ok(&try_set(&m, 15).unwrap()), Reply::Int(0));
        assert_eq!(take(&mut m, 10, None), Reply::Int(1));
        assert_eq!(count_of(&m), 0);
        assert_eq!(m.apply_ok(&add_permits(&m, -5).unwrap()), Reply::Int(-5));
        assert_eq!(take(&mut m, 1, None), Reply::Nil);
        assert_eq!(m.apply_ok(&release_permits(&m, 10).unwrap()), Reply::Int(5));
        assert_eq!(m.apply_ok(&drain(&m).unwrap()), Reply::Int(5));
        assert_eq!(m.apply_ok(&drain(&m).unwrap()), Reply::Int(0));
        assert_eq!(count_of(&m), 0);
        assert!(m.exists(b"s"), "drain keeps the key at 0");
        let mut fresh = Mem::new(b"t");
        assert_eq!(
            fresh.apply_ok(&release_permits(&fresh, 2).unwrap()),
            Reply::Int(2)
        );
        assert_eq!(take(&mut fresh, 2, None), Reply::Int(1));
        assert_eq!(
            m.apply_ok(&add_permits(&m, i64::MAX).unwrap()),
            Reply::Int(i64::MAX)
        );
        assert_eq!(release_permits(&m, 1), Err(CmdError::PermitsOverflow));
        assert_eq!(add_permits(&m, 1), Err(CmdError::PermitsOverflow));
    }

    #[test]
    fn the_count_keeps_its_ttl() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 3).unwrap());
        m.set_expire(b"s", m.now + 5_000);
        take(&mut m, 1, None);
        m.apply_ok(&release_permits(&m, 1).unwrap());
        m.apply_ok(&add_permits(&m, 1).unwrap());
        assert_eq!(m.ttl(b"s"), Some(5_000));
        // A leased acquire gives the set the count's TTL, as Redisson's script does.
        take(&mut m, 1, Some(100));
        assert_eq!(m.ttl(b"{s}:timeout"), Some(5_000));
    }

    #[test]
    fn leased_permits_have_ids_and_come_back_when_their_lease_ends() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 3).unwrap());
        let ids = ids_of(&take(&mut m, 2, Some(100)));
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        let z = m.zset(b"{s}:timeout");
        for id in &ids {
            assert_eq!(z.get(id.as_slice()), Some(&((m.now + 100) as f64)));
        }
        assert_eq!(count_of(&m), 1);
        m.now += 100;
        assert_eq!(available(&m), Ok(3), "ended at their score");
        assert_eq!(
            release_ids(&m, &ids[..1]),
            Err(CmdError::NoPermit(String::from_utf8(hex(&ids[0])).unwrap()))
        );
        let r = reclaim(&m).unwrap();
        m.apply_ok(&r);
        assert_eq!(count_of(&m), 3);
        assert!(!m.exists(b"{s}:timeout"));
        assert!(reclaim(&m).unwrap().writes.is_empty());
        // Redisson's permanent permits never end.
        m.zadd(b"{s}:timeout", b"0123456789abcdef", PERMANENT as f64);
        m.now += 1_000_000;
        assert!(reclaim(&m).unwrap().writes.is_empty());
        let w = SemaphoreRequest {
            permits: 9,
            lease_ms: None,
        };
        assert_eq!(w.object().wake_at(&m), None);
    }

    #[test]
    fn renew_moves_live_leases_and_skips_the_rest() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 3).unwrap());
        let ids = ids_of(&take(&mut m, 3, Some(100)));
        let released = ids[2];
        m.apply_ok(&release_ids(&m, &[released]).unwrap());
        m.now += 50;
        let never: PermitId = [7; 16];
        let all = [ids[0], ids[1], ids[0], released, never];
        // Two live leases renewed (the repeated id once); released and unknown ids skipped.
        assert_eq!(m.apply_ok(&renew(&m, 1_000, &all).unwrap()), Reply::Int(2));
        let z = m.zset(b"{s}:timeout");
        for id in &ids[..2] {
            assert_eq!(z.get(id.as_slice()), Some(&((m.now + 1_000) as f64)));
        }
        assert_eq!(z.get(released.as_slice()), None);
        assert_eq!(z.get(never.as_slice()), None, "never created");
        // A lease that ended is not brought back.
        m.now += 1_000;
        assert_eq!(
            m.apply_ok(&renew(&m, 1_000, &ids[..2]).unwrap()),
            Reply::Int(0)
        );
        assert_eq!(
            parse_renew(&[b"rsem.renew", b"s", b"100", b"PERMITS", b"1"]).err(),
            Some(CmdError::Syntax("expected ID, got 'PERMITS'".into()))
        );
    }

    #[test]
    fn release_of_ids_is_all_or_nothing() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 10).unwrap());
        let ids = ids_of(&take(&mut m, 6, Some(1_000)));
        let unknown = [7u8; 16];
        let e = release_ids(&m, &[ids[0], unknown]).unwrap_err();
        assert_eq!(
            e,
            CmdError::NoPermit(String::from_utf8(hex(&unknown)).unwrap())
        );
        assert!(matches!(
            release_ids(&m, &[ids[0], ids[0]]),
            Err(CmdError::NoPermit(_))
        ));
        assert_eq!(
            m.apply_ok(&release_ids(&m, &ids[..4]).unwrap()),
            Reply::Int(8)
        );
        assert_eq!(m.zset(b"{s}:timeout").len(), 2);
        assert!(release_ids(&m, &ids[..1]).is_err(), "released once");
        assert_eq!(
            m.apply_ok(&release_ids(&m, &ids[4..]).unwrap()),
            Reply::Int(10)
        );
    }

    #[test]
    fn wrong_types() {
        let mut m = Mem::new(b"s");
        m.set_str(b"s", b"x");
        assert_eq!(count(&m), Err(CmdError::WrongType));
        assert_eq!(acquire(&m, 1, None, false), Err(CmdError::WrongType));
        assert_eq!(release_permits(&m, 1), Err(CmdError::WrongType));
        assert_eq!(available(&m), Err(CmdError::WrongType));
        let mut m = Mem::new(b"s");
        m.hset(b"s", b"f", b"1");
        assert_eq!(try_set(&m, 1), Err(CmdError::WrongType));
        let mut m = Mem::new(b"s");
        m.set_str(b"{s}:timeout", b"1");
        assert_eq!(drain(&m), Err(CmdError::WrongType));
        assert_eq!(
            info(&m, 0, vec![], INFO_COUNT, true),
            Err(CmdError::WrongType)
        );
    }

    #[test]
    fn info_shows_leases_and_the_queue() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 2).unwrap());
        let ids = ids_of(&take(&mut m, 1, Some(500)));
        let w = SemaphoreRequest {
            permits: 3,
            lease_ms: Some(10),
        };
        let shown = info(&m, 1, vec![w.show()], INFO_COUNT, true).unwrap();
        assert_eq!(
            shown,
            Reply::Map(vec![
                ("available", Reply::Int(1)),
                (
                    "leased",
                    Reply::Array(vec![Reply::Array(vec![
                        Reply::Bulk(hex(&ids[0])),
                        Reply::Int(500)
                    ])])
                ),
                ("ttl_ms", Reply::Int(-1)),
                ("waiters", Reply::Int(1)),
                (
                    "queue",
                    Reply::Array(vec![Reply::Array(vec![Reply::Int(3), Reply::Int(10)])])
                ),
            ])
        );
    }

    #[test]
    fn info_lists_count_leases_and_says_how_many_there_are() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 10).unwrap());
        take(&mut m, 2, Some(100));
        let late = ids_of(&take(&mut m, 3, Some(500)));
        m.now += 200; // the first two expired (not reclaimed yet: INFO never writes)
        let leased = |r: &Reply| match r {
            Reply::Map(f) => (
                f.iter().find(|(k, _)| *k == "leased").unwrap().1.clone(),
                f.len(),
            ),
            _ => panic!(),
        };
        let (all, fields) = leased(&info(&m, 0, vec![], 3, true).unwrap());
        assert_eq!(fields, 5, "nothing cut: the usual shape");
        let Reply::Array(all) = all else { panic!() };
        assert_eq!(all.len(), 3);
        let cut = info(&m, 0, vec![], 2, true).unwrap();
        let (two, fields) = leased(&cut);
        assert_eq!(fields, 6);
        let Reply::Array(two) = two else { panic!() };
        assert_eq!(two.len(), 2);
        assert!(late
            .iter()
            .any(|id| two[0] == Reply::Array(vec![Reply::Bulk(hex(id)), Reply::Int(300)])));
        let Reply::Map(f) = cut else { panic!() };
        assert_eq!(f[5], ("leased_total", Reply::Int(3)));
        assert_eq!(
            f[0],
            ("available", Reply::Int(7)),
            "expired leases count as available"
        );
        assert_eq!(parse_info(&argv(&["rsem.info", "s"])), Ok(INFO_COUNT));
        assert_eq!(parse_info(&argv(&["rsem.info", "s", "COUNT", "5"])), Ok(5));
        assert!(parse_info(&argv(&["rsem.info", "s", "COUNT", "0"])).is_err());
        assert!(parse_info(&argv(&["rsem.info", "s", "COUNT"])).is_err());
    }

    #[test]
    fn strict_fifo_a_large_request_is_not_overtaken() {
        let mut m = Mem::new(b"s");
        let id = KeyId::new(0, b"s");
        let mut q: Queues<u32, Req> = Queues::default();
        m.apply_ok(&try_set(&m, 1).unwrap());
        for (h, permits) in [(0, 5), (1, 1), (2, 1)] {
            let req: Req = std::rc::Rc::new(SemaphoreRequest {
                permits,
                lease_ms: None,
            });
            q.push(
                &id,
                Waiter {
                    handle: h,
                    serial: h as u64,
                    req,
                    deadline: None,
                    queued_us: 0,
                },
            );
        }
        let granted = |q: &mut Queues<u32, Req>, m: &mut Mem| -> Vec<u32> {
            serve(q, &id, m)
                .outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Granted { waiter, .. } => waiter.handle,
                    Outcome::Failed { error, .. } => panic!("{error}"),
                })
                .collect()
        };
        assert!(granted(&mut q, &mut m).is_empty(), "1 of 5: the head waits");
        assert_eq!(acquire(&m, 1, None, true), Ok(None), "no overtaking");
        m.apply_ok(&release_permits(&m, 3).unwrap());
        assert!(granted(&mut q, &mut m).is_empty(), "4 of 5");
        m.apply_ok(&release_permits(&m, 2).unwrap());
        assert_eq!(granted(&mut q, &mut m), vec![0, 1]);
        assert_eq!(count_of(&m), 0);
        m.apply_ok(&release_permits(&m, 1).unwrap());
        assert_eq!(granted(&mut q, &mut m), vec![2]);
    }

    #[test]
    fn expired_leases_go_to_the_head_and_the_rest_is_announced_after() {
        let mut m = Mem::new(b"s");
        let id = KeyId::new(0, b"s");
        let mut q: Queues<u32, Req> = Queues::default();
        m.apply_ok(&try_set(&m, 3).unwrap());
        m.published.clear();
        take(&mut m, 3, Some(200));
        let req: Req = std::rc::Rc::new(SemaphoreRequest {
            permits: 2,
            lease_ms: Some(50),
        });
        let w = Waiter {
            handle: 7,
            serial: 7,
            req,
            deadline: None,
            queued_us: 0,
        };
        assert_eq!(w.req.object().wake_at(&m), Some(m.now + 200));
        q.push(&id, w);
        m.now += 200;
        let served = serve(&mut q, &id, &mut m);
        let [Outcome::Granted {
            reply,
            after_expiry,
            ..
        }] = &served.outcomes[..]
        else {
            panic!("{:?}", served.outcomes)
        };
        assert!(after_expiry);
        assert_eq!(ids_of(reply).len(), 2);
        assert_eq!(count_of(&m), 1);
        assert_eq!(m.published, vec![(b"redisson_sc:{s}".to_vec(), 1)]);
        assert_eq!(served.wake_at, None, "nobody waits");
    }

    #[test]
    fn undo_gives_back_what_is_still_leased() {
        let mut m = Mem::new(b"s");
        m.apply_ok(&try_set(&m, 2).unwrap());
        let w = SemaphoreRequest {
            permits: 2,
            lease_ms: Some(100),
        };
        let TryGrant::Grant(d) = w.try_grant(&m) else {
            panic!()
        };
        let reply = m.apply_ok(&d);
        assert_eq!(count_of(&m), 0);
        let undo = w.undo(&reply, &m).unwrap();
        m.apply_ok(&undo);
        assert_eq!(count_of(&m), 2);
        assert!(!m.exists(b"{s}:timeout"));
        assert!(w.undo(&reply, &m).is_none(), "nothing left to undo");
        let plain = SemaphoreRequest {
            permits: 2,
            lease_ms: None,
        };
        let TryGrant::Grant(d) = plain.try_grant(&m) else {
            panic!()
        };
        let reply = m.apply_ok(&d);
        m.apply_ok(&plain.undo(&reply, &m).unwrap());
        assert_eq!(count_of(&m), 2);
    }
}

/// Property tests: random sequences of acquires (plain or leased, waiting or not), releases of
/// plain permits and of ids, added permits, drains, time passing and waiters leaving, driven as
/// the skin drives them (reclaim, serve the queue, then decide; serve after anything that adds
/// permits), through these rules and the shared serving loop. Checked after every step:
/// conservation (available + plain permits held + leased permits still in the set = every
/// permit ever added), no acquire takes the count below 0, grants in arrival order, nobody
/// overtakes a queued waiter, and a publish after each addition carries the count that a
/// following read shows. At the end, enough permits let every waiter through.
#[cfg(test)]
mod prop_tests {
    use super::*;
    use crate::core::mem::Mem;
    use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[derive(Debug, Clone)]
    enum Op {
        Acquire {
            permits: i64,
            lease: Option<i64>,
            block: bool,
        },
        ReleasePlain {
            i: usize,
        },
        ReleaseIds {
            i: usize,
            k: usize,
        },
        Add {
            delta: i64,
        },
        Drain,
        Tick {
            ms: i64,
        },
        Leave {
            i: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1i64..5, prop::option::of(1i64..300), any::<bool>())
                .prop_map(|(permits, lease, block)| Op::Acquire { permits, lease, block }),
            3 => (0usize..8).prop_map(|i| Op::ReleasePlain { i }),
            3 => (0usize..16, 1usize..4).prop_map(|(i, k)| Op::ReleaseIds { i, k }),
            2 => (-3i64..6).prop_map(|delta| Op::Add { delta }),
            1 => Just(Op::Drain),
            3 => (1i64..150).prop_map(|ms| Op::Tick { ms }),
            1 => (0usize..8).prop_map(|i| Op::Leave { i }),
        ]
    }

    const CHANNEL: &[u8] = b"redisson_sc:{s}";

    struct Sim {
        mem: Mem,
        q: Queues<u32, Req>,
        /// Queued requests: (handle, permits, leased).
        model: VecDeque<(u32, i64, bool)>,
        next: u32,
        granted: Vec<u32>,
        /// Plain permits held, per grant.
        plain: Vec<i64>,
        /// Ids handed out (some may have expired since).
        leased: Vec<PermitId>,
        /// Every permit ever added, minus drained ones.
        total: i64,
    }

    fn id() -> KeyId {
        KeyId::new(0, b"s")
    }

    impl Sim {
        fn count(&self) -> i64 {
            count(&self.mem).unwrap()
        }

        fn held(&mut self, reply: &Reply, permits: i64) {
            match reply {
                Reply::Int(1) => self.plain.push(permits),
                Reply::Array(ids) => {
                    assert_eq!(ids.len() as i64, permits);
                    for r in ids {
                        let Reply::Bulk(h) = r else { panic!() };
                        self.leased.push(parse_id(h).unwrap());
                    }
                }
                other => panic!("grant reply {other:?}"),
            }
        }

        fn serve(&mut self) {
            let served = serve(&mut self.q, &id(), &mut self.mem);
            for o in served.outcomes {
                match o {
                    Outcome::Granted { waiter, reply, .. } => {
                        let (h, permits, _) = self.model.pop_front().expect("model has it");
                        assert_eq!(h, waiter.handle, "FIFO");
                        assert!(self.count() >= 0, "a grant took the count below 0");
                        self.granted.push(h);
                        self.held(&reply, permits);
                    }
                    Outcome::Failed { error, .. } => panic!("unexpected failure: {error}"),
                }
            }
            self.q.forget_if_idle(&id());
        }

        /// What every command does first: reclaim, serve the queue, announce.
        fn prepare(&mut self) -> bool {
            let r = reclaim(&self.mem).unwrap();
            let reclaimed = !r.writes.is_empty();
            self.mem.apply_ok(&r);
            self.serve();
            if reclaimed {
                let a = announce(&self.mem, true).unwrap();
                self.mem.apply_ok(&a);
            }
            self.q.is_queued(&id())
        }

        /// After adding permits: serve, then publish the count a read shows next.
        fn settle(&mut self) {
            self.serve();
            let before = self.mem.published.len();
            let a = announce(&self.mem, false).unwrap();
            let reply = self.mem.apply_ok(&a);
            assert_eq!(reply, Reply::Int(self.count()));
            assert_eq!(
                self.mem.published[before..],
                [(CHANNEL.to_vec(), self.count())]
            );
        }

        fn step(&mut self, op: &Op) {
            match *op {
                Op::Acquire {
                    permits,
                    lease,
                    block,
                } => {
                    let queued = self.prepare();
                    let before = self.count();
                    match acquire(&self.mem, permits, lease, queued).unwrap() {
                        Some(d) => {
                            assert!(!queued, "overtook a queued waiter");
                            let reply = self.mem.apply_ok(&d);
                            assert_eq!(self.count(), before - permits);
                            assert!(self.count() >= 0);
                            self.held(&reply, permits);
                        }
                        None => {
                            assert!(queued || before < permits);
                            if block {
                                let h = self.next;
                                self.next += 1;
                                let req: Req = std::rc::Rc::new(SemaphoreRequest {
                                    permits,
                                    lease_ms: lease,
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
                                self.model.push_back((h, permits, lease.is_some()));
                            }
                        }
                    }
                }
                Op::ReleasePlain { i } => {
                    if self.plain.is_empty() {
                        return;
                    }
                    let n = self.plain.remove(i % self.plain.len());
                    self.prepare();
                    let d = release_permits(&self.mem, n).unwrap();
                    self.mem.apply_ok(&d);
                    self.settle();
                }
                Op::ReleaseIds { i, k } => {
                    if self.leased.is_empty() {
                        return;
                    }
                    let start = i % self.leased.len();
                    let end = (start + k).min(self.leased.len());
                    let ids: Vec<PermitId> = self.leased[start..end].to_vec();
                    self.prepare();
                    let z = self.mem.zset(b"{s}:timeout");
                    let all_live = ids.iter().all(|id| {
                        z.get(id.as_slice())
                            .is_some_and(|at| *at > self.mem.now as f64)
                    });
                    match release_ids(&self.mem, &ids) {
                        Ok(d) => {
                            assert!(all_live);
                            self.mem.apply_ok(&d);
                            self.leased.drain(start..end);
                            self.settle();
                        }
                        Err(CmdError::NoPermit(_)) => {
                            assert!(!all_live, "a live permit was refused");
                            // Its holder learns it expired; it holds nothing any more.
                            let gone: Vec<PermitId> = ids
                                .iter()
                                .filter(|id| !z.contains_key(id.as_slice()))
                                .copied()
                                .collect();
                            self.leased.retain(|id| !gone.contains(id));
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                Op::Add { delta } => {
                    self.prepare();
                    let d = add_permits(&self.mem, delta).unwrap();
                    self.mem.apply_ok(&d);
                    self.total += delta;
                    self.settle();
                }
                Op::Drain => {
                    self.prepare();
                    let d = drain(&self.mem).unwrap();
                    let Reply::Int(n) = self.mem.apply_ok(&d) else {
                        panic!()
                    };
                    self.total -= n;
                }
                Op::Tick { ms } => {
                    // The timer: with waiters queued, expired leases are reclaimed for them.
                    self.mem.now += ms;
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

        fn check(&self) {
            let in_set = self.mem.zset(b"{s}:timeout").len() as i64;
            let plain: i64 = self.plain.iter().sum();
            assert_eq!(
                self.count() + plain + in_set,
                self.total,
                "permits are conserved"
            );
            let queued: Vec<u32> = self.q.queued(&id());
            assert_eq!(queued, self.model.iter().map(|m| m.0).collect::<Vec<_>>());
            assert!(
                self.granted.windows(2).all(|w| w[0] < w[1]),
                "grants in arrival order"
            );
            // Nobody waits behind permits that would serve the head (reclaim included).
            if let Some(&(_, permits, _)) = self.model.front() {
                assert!(available(&self.mem).unwrap() < permits);
            }
        }
    }

    proptest! {
        #[test]
        fn semaphore_and_queue_state_machine(
            initial in 0i64..6,
            ops in prop::collection::vec(op(), 1..120),
        ) {
            let mut sim = Sim {
                mem: Mem::new(b"s"),
                q: Queues::default(),
                model: VecDeque::new(),
                next: 0,
                granted: Vec::new(),
                plain: Vec::new(),
                leased: Vec::new(),
                total: initial,
            };
            let d = try_set(&sim.mem, initial).unwrap();
            sim.mem.apply_ok(&d);
            for op in &ops {
                sim.step(op);
                sim.check();
            }
            // Liveness: every lease ends and enough permits come back for every waiter.
            sim.mem.now += 1_000;
            sim.serve();
            sim.prepare();
            let wanted: i64 = sim.model.iter().map(|m| m.1).sum::<i64>() - sim.count().min(0);
            let d = add_permits(&sim.mem, wanted).unwrap();
            sim.mem.apply_ok(&d);
            sim.total += wanted;
            sim.settle();
            sim.check();
            prop_assert!(sim.model.is_empty(), "waiters left: {:?}", sim.model);
        }
    }
}

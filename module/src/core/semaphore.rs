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
use super::wait::{Acquiring, Decided, Object, Req, Request, Tidy, TryGrant};

/// Redisson's score for a permit without an end (`nonExpirableTimeout`): never reclaimed.
pub const PERMANENT: i64 = 922_337_203_685_477;

/// The `lease_ms` of an acquire with `NOLEASE`: ids scored [`PERMANENT`]. Redisson's API says
/// a lease of -1 for it too; on the wire it is the flag, so that no lease computed by a client
/// (a duration rounded to 0, a subtraction gone negative) can ask for a permit that never ends.
pub const NO_LEASE: i64 = -1;

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

/// `RSEM.ACQUIRE key [PERMITS n] [LEASE ms | NOLEASE] [BLOCK timeout_ms] [SESSION s [QUEUE
/// request timeout_ms]]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub permits: i64,
    /// `None`: plain permits (a count). `Some`: permits with ids, leased for that long, or
    /// without an end ([`NO_LEASE`]).
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

const NOLEASE: Opt = Opt {
    name: "NOLEASE",
    values: 0,
    needs: "",
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
        &[block, session, queue, &PERMITS, &LEASE, &NOLEASE],
        |k, v| {
            let lease = match k {
                args::AT_BLOCK..=args::AT_QUEUE => return req.wait.take(k, v),
                3 => {
                    req.permits = permits(v[0])?;
                    return Ok(());
                }
                4 => args::lease(v[0])?,
                _ => NO_LEASE,
            };
            // Either option given twice is refused by `options`: here only the other one was.
            if req.lease_ms.is_some() {
                return Err(CmdError::Syntax(
                    "LEASE and NOLEASE exclude each other".into(),
                ));
            }
            req.lease_ms = Some(lease);
            Ok(())
        },
    )?;
    req.wait = req.wait.finish()?;
    if req.lease_ms.is_some() && req.permits > MAX_LEASED {
        return Err(CmdError::TooLarge(with_ids(req.lease_ms), MAX_LEASED));
    }
    Ok(req)
}

/// How errors name an acquire of permits with ids.
pub fn with_ids(lease_ms: Option<i64>) -> &'static str {
    match lease_ms {
        Some(NO_LEASE) => "permits with NOLEASE",
        _ => "permits with LEASE",
    }
}

/// What `RSEM.RELEASE` gives back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// `[PERMITS n]`: n plain permits (1 by default).
    Permits(i64),
    /// `[PERMITS n] XX`: n plain permits only if the semaphore exists (Redisson's
    /// `releaseIfExists`: a release that does not create it).
    PermitsIfExists(i64),
    /// `ID id [id ...]`: these leased permits, all or none.
    Ids(Vec<PermitId>),
}

const XX: Opt = Opt {
    name: "XX",
    values: 0,
    needs: "",
};

/// `RSEM.RELEASE key [PERMITS n] [XX]` or `RSEM.RELEASE key ID id [id ...]`
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
    let (mut n, mut if_exists) = (1, false);
    args::options(rest, &[&PERMITS, &XX], |k, v| {
        match k {
            0 => n = permits(v[0])?,
            _ => if_exists = true,
        }
        Ok(())
    })?;
    Ok(match if_exists {
        true => Release::PermitsIfExists(n),
        false => Release::Permits(n),
    })
}

/// `RSEM.SETPERMITS key n`: the total number of permits (available plus leased).
pub fn parse_set_permits(argv: &[&[u8]]) -> Result<i64, CmdError> {
    args::arity(argv, |n| n == 3, "rsem.setpermits")?;
    args::integer(argv[2], "permits")
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

const PX: Opt = Opt {
    name: "PX",
    values: 1,
    needs: "PX needs a time to live in milliseconds",
};

/// `RSEM.TRYSETPERMITS key n [PX ttl_ms]`: the count, and the time to live it is set with.
pub fn parse_try_set(argv: &[&[u8]]) -> Result<(i64, Option<i64>), CmdError> {
    args::arity(argv, |n| n == 3 || n == 5, "rsem.trysetpermits")?;
    let n = args::at_least(argv[2], "permits", 0)?;
    let mut ttl_ms = None;
    args::options(&argv[3..], &[&PX], |_, v| {
        ttl_ms = Some(args::at_least(v[0], "ttl_ms", 1)?);
        Ok(())
    })?;
    Ok((n, ttl_ms))
}

/// `RSEM.LEASETIME key id`: the permit.
pub fn parse_lease_time(argv: &[&[u8]]) -> Result<PermitId, CmdError> {
    args::arity(argv, |n| n == 3, "rsem.leasetime")?;
    parse_id(argv[2])
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

/// An `RSEM.ACQUIRE` as the acquire pipeline decides it.
impl<'a> Acquiring<'a> for AcquireArgs<'a> {
    fn object(&self) -> &'static dyn Object {
        &SemaphoreObject
    }

    fn wait(&self) -> &WaitArgs<'a> {
        &self.wait
    }

    fn decide<S: Store + ?Sized>(
        &self,
        store: &S,
        queued: bool,
        _tidied: bool,
    ) -> Result<Decided<'a>, CmdError> {
        Ok(match acquire(store, self.permits, self.lease_ms, queued)? {
            Some(decision) => Decided::Grant {
                decision,
                reentry: false,
                own_lease_ms: None,
            },
            None => Decided::Busy,
        })
    }

    fn request(&self) -> Req {
        std::rc::Rc::new(SemaphoreRequest {
            permits: self.permits,
            lease_ms: self.lease_ms,
        })
    }
}

/// Take `permits` (with ids when `lease_ms` is given: leased until now + `lease_ms`, or scored
/// [`PERMANENT`] for [`NO_LEASE`]): the writes and the reply, or `None` when fewer are
/// available or others queue first (`queued`).
pub fn acquire(
    store: &(impl Store + ?Sized),
    permits: i64,
    lease_ms: Option<i64>,
    queued: bool,
) -> Result<Option<Decision<'static>>, CmdError> {
    let available = count(store)?;
    let at = lease_ms
        .map(|ms| match ms {
            NO_LEASE => Ok(PERMANENT),
            ms => args::deadline(store.now(), ms, "lease_ms"),
        })
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
/// A permit without an end (`NOLEASE`, or Redisson's) gets this lease, as `updateLeaseTime`
/// gives it one: a Java service renewing it and rlock agree on what it then is.
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

/// Whether the semaphore's count exists (after a type check of both keys): what
/// `RSEM.RELEASE ... XX` asks before it gives anything back, as Redisson's `releaseIfExists`
/// asks `EXISTS` of the count alone.
pub fn exists(store: &(impl Store + ?Sized)) -> Result<bool, CmdError> {
    count(store)?;
    Ok(store.kind(&Target::Main) != KeyType::Empty)
}

/// Make the semaphore's permits, available plus leased, number `total`, by moving the
/// available count (negative while more are leased): Redisson's `setPermits(n)` of a
/// permit-expirable semaphore. Creates the count when absent. Reply: the available count; no
/// write when the total is already `total`. Run after the semaphore's tidying, so every lease
/// left in the set is live (`ZCARD` counts them, as the script's `ZCOUNT 0 +inf`).
pub fn set_permits(
    store: &(impl Store + ?Sized),
    total: i64,
) -> Result<Decision<'static>, CmdError> {
    let available = count(store)?;
    if store.kind(&Target::Main) == KeyType::Empty {
        let set = Write::SetInt {
            key: Target::Main,
            value: total,
        };
        return Ok(Decision::new(vec![set], Reply::Int(total)));
    }
    let leased = i64::try_from(store.zcard(&timeouts(store))).unwrap_or(i64::MAX);
    let delta = total
        .checked_sub(add(available, leased)?)
        .ok_or(CmdError::PermitsOverflow)?;
    if delta == 0 {
        return Ok(Decision::reply(Reply::Int(available)));
    }
    let by = Write::IncrBy {
        key: Target::Main,
        by: delta,
    };
    Ok(Decision::new(vec![by], Reply::Int(add(available, delta)?)))
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

/// [`try_set`], the count set to expire `ttl_ms` from now (Redisson's `trySetPermits(n, ttl)`,
/// which sets it with `SET ... PX`; the lease set keeps its own TTL, as there).
pub fn try_set_for(
    store: &(impl Store + ?Sized),
    n: i64,
    ttl_ms: i64,
) -> Result<Decision<'static>, CmdError> {
    let at = args::deadline(store.now(), ttl_ms, "ttl_ms")?;
    let mut d = try_set(store, n)?;
    if !d.writes.is_empty() {
        d.writes.push(Write::PExpireAt {
            key: Target::Main,
            at,
        });
    }
    Ok(d)
}

/// The available count as the next command will see it: expired leases count as returned.
/// Never writes (`RSEM.AVAILABLE` is read-only).
pub fn available(store: &(impl Store + ?Sized)) -> Result<i64, CmdError> {
    Ok(count(store)?.saturating_add(expired(store).len() as i64))
}

/// The time left of a leased permit's lease: Redisson's `getLeaseTime(id)`. Reply: the ms left
/// (at least 1), `-1` for a permit without an end, nil when the permit is not leased
/// (released, never issued, or its lease ended: read-only, so an ended lease not yet returned
/// counts as ended, as `RSEM.AVAILABLE` counts it returned).
pub fn lease_time(store: &(impl Store + ?Sized), id: &PermitId) -> Result<Reply, CmdError> {
    count(store)?; // both keys are a semaphore's
    let now = store.now();
    Ok(match store.zscore(&timeouts(store), id) {
        Some(at) if at >= PERMANENT as f64 => Reply::Int(-1),
        Some(at) if at > now as f64 => Reply::Int(at as i64 - now),
        _ => Reply::Nil,
    })
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

    fn announce_freed(&self, store: &dyn Store) -> Result<Decision<'static>, CmdError> {
        announce(store, false)
    }
}

/// A queued `RSEM.ACQUIRE`: granted when its permits are available, leased from the grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreRequest {
    pub permits: i64,
    /// As [`AcquireArgs::lease_ms`] ([`NO_LEASE`] is shown as -1 in `RSEM.INFO`'s queue).
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
mod semaphore_tests;

/// Property tests: random sequences of acquires (plain or leased, waiting or not), releases of
/// plain permits and of ids, added permits, drains, time passing and waiters leaving, driven as
/// the skin drives them (reclaim, serve the queue, then decide; serve after anything that adds
/// permits), through these rules and the shared serving loop. Checked after every step:
/// conservation (available + plain permits held + leased permits still in the set = every
/// permit ever added), no acquire takes the count below 0, grants in arrival order, nobody
/// overtakes a queued waiter, and a publish after each addition carries the count that a
/// following read shows. At the end, enough permits let every waiter through.
#[cfg(test)]
mod semaphore_prop_tests;

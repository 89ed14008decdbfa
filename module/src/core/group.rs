//! `RMLOCK.*`: Redisson 4.x's grouped MultiLock (`RedissonFasterMultiLock`) in its own layout:
//! one hash per group; for each locked value, field `F` (the value's hash, opaque here) names
//! its holder, `F:<holder>:expire_time` its absolute lease end (ms) and `F:<holder>:lock_count`
//! its re-entries; the hash's own TTL is the longest lease. A value is free when `F` is absent
//! or its holder's `expire_time` has passed (a holder that died keeps the hash alive through
//! other values, yet loses this one at its lease end, as Redisson's scripts read it).
//!
//! Parsing, the rules (all or none), and the group's side of the waiting mechanism.

use super::args::{self, Opt, WaitArgs, WAIT_OPTS};
use super::decision::{Decision, Reply, Write};
use super::error::CmdError;
use super::names;
use super::stats::ObjectKind;
use super::store::{Int, KeyType, Store, Target};
use super::wait::by_value::Freed;
use super::wait::claims::Claims;
use super::wait::{Acquiring, Decided, Hold, Object, Req, Request, TryGrant};
use std::borrow::Cow;

const EXPIRE_TIME: &[u8] = b":expire_time";
const LOCK_COUNT: &[u8] = b":lock_count";

// ---- arguments ---------------------------------------------------------------------------------

/// `FIELDS n F1 .. Fn` starting at `argv[at]`: the fields (duplicates dropped, first place
/// kept: one value locked twice in one call is one value) and the index after them.
pub fn parse_fields<'a>(
    argv: &[&'a [u8]],
    at: usize,
    cmd: &'static str,
) -> Result<(Vec<&'a [u8]>, usize), CmdError> {
    let word = argv.get(at).ok_or(CmdError::Arity(cmd))?;
    if !word.eq_ignore_ascii_case(b"FIELDS") {
        return Err(CmdError::Syntax(format!(
            "expected FIELDS n F1 .. Fn, got '{}'",
            super::error::echo(word)
        )));
    }
    let n = argv.get(at + 1).ok_or(CmdError::Arity(cmd))?;
    let n = args::at_least(n, "FIELDS count", 1)?;
    let first = at + 2;
    let given = argv.len() - first.min(argv.len());
    if n as u64 > given as u64 {
        return Err(CmdError::Syntax(format!(
            "FIELDS count is {n} but only {given} arguments follow"
        )));
    }
    let end = first + n as usize;
    let mut fields: Vec<&'a [u8]> = Vec::with_capacity(n as usize);
    for f in &argv[first..end] {
        if f.is_empty() {
            return Err(CmdError::Syntax("a field must not be empty".into()));
        }
        if !fields.contains(f) {
            fields.push(f);
        }
    }
    Ok((fields, end))
}

/// `RMLOCK.ACQUIRE group owner lease_ms FIELDS n F1 .. Fn [BLOCK timeout_ms]
/// [SESSION s [QUEUE request timeout_ms]]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    pub lease_ms: i64,
    pub fields: Vec<&'a [u8]>,
    pub wait: WaitArgs<'a>,
}

pub fn parse_acquire<'a>(argv: &[&'a [u8]]) -> Result<AcquireArgs<'a>, CmdError> {
    const CMD: &str = "rmlock.acquire";
    args::arity(argv, |n| n >= 7, CMD)?;
    args::owner(argv[2])?;
    let lease_ms = args::lease(argv[3])?;
    let (fields, end) = parse_fields(argv, 4, CMD)?;
    let mut wait = WaitArgs::new();
    let opts: [&Opt; 3] = WAIT_OPTS;
    args::options(&argv[end..], &opts, |k, v| wait.take(k, v))?;
    Ok(AcquireArgs {
        lease_ms,
        fields,
        wait: wait.finish()?,
    })
}

/// `RMLOCK.RELEASE|RENEW group owner lease_ms FIELDS n F1 .. Fn`: the lease and the fields.
pub fn parse_owned<'a>(
    argv: &[&'a [u8]],
    cmd: &'static str,
) -> Result<(i64, Vec<&'a [u8]>), CmdError> {
    args::arity(argv, |n| n >= 7, cmd)?;
    args::owner(argv[2])?;
    let lease_ms = args::lease(argv[3])?;
    let (fields, end) = parse_fields(argv, 4, cmd)?;
    exact(argv, end, cmd)?;
    Ok((lease_ms, fields))
}

/// `RMLOCK.FORCERELEASE|INFO group FIELDS n F1 .. Fn`: the fields.
pub fn parse_unowned<'a>(argv: &[&'a [u8]], cmd: &'static str) -> Result<Vec<&'a [u8]>, CmdError> {
    args::arity(argv, |n| n >= 4, cmd)?;
    let (fields, end) = parse_fields(argv, 2, cmd)?;
    exact(argv, end, cmd)?;
    Ok(fields)
}

/// Nothing may follow the fields of a command without options.
fn exact(argv: &[&[u8]], end: usize, cmd: &'static str) -> Result<(), CmdError> {
    match argv.get(end) {
        None => Ok(()),
        Some(extra) => Err(CmdError::Syntax(format!(
            "'{}' after the fields ({cmd} takes no options; check the FIELDS count)",
            super::error::echo(extra)
        ))),
    }
}

// ---- the layout ----------------------------------------------------------------------------------

/// `F:<holder>:expire_time`
pub fn expire_field(f: &[u8], holder: &[u8]) -> Vec<u8> {
    [f, b":", holder, EXPIRE_TIME].concat()
}

/// `F:<holder>:lock_count`
pub fn count_field(f: &[u8], holder: &[u8]) -> Vec<u8> {
    [f, b":", holder, LOCK_COUNT].concat()
}

/// What the key holds: a group's hash, nothing, or something else: a read-write lock's hash
/// (its `mode` field no group writes), or a lock's (see [`a_locks_hash`]).
fn kind(store: &(impl Store + ?Sized)) -> KeyType {
    match store.kind(&Target::Main) {
        KeyType::Hash if store.hget(&Target::Main, names::RWLOCK_MODE).is_some() => KeyType::Other,
        KeyType::Hash if a_locks_hash(store) => KeyType::Other,
        k => k,
    }
}

/// A lock's hash (Redisson's `RLock`, fair or not: one field, its owner, whose value is the
/// hold count). Taking values in it would put them beside a lock that its own release
/// deletes whole. A group's hash never has such a field: each value's `F` holds an owner name
/// and its other fields end in `:expire_time` or `:lock_count`. Only a hash of one or two
/// fields is read (two: a lapsed holder's leftovers may be all a group has), so the check
/// costs O(1).
fn a_locks_hash(store: &(impl Store + ?Sized)) -> bool {
    if store.hlen(&Target::Main) > 2 {
        return false;
    }
    store.hgetall(&Target::Main).iter().any(|(f, v)| {
        !f.ends_with(EXPIRE_TIME)
            && !f.ends_with(LOCK_COUNT)
            && std::str::from_utf8(v).is_ok_and(|v| v.parse::<i64>().is_ok())
    })
}

fn checked(store: &(impl Store + ?Sized)) -> Result<bool, CmdError> {
    match kind(store) {
        KeyType::Empty => Ok(false),
        KeyType::Hash => Ok(true),
        _ => Err(CmdError::WrongType),
    }
}

/// One value as the rules read it at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Nobody holds it. `stale`: the holder whose lease ended (its fields are left over).
    Free { stale: Option<Vec<u8>> },
    /// The asking owner holds it: its lease end and count.
    Mine { expire: i64, count: i64 },
    /// Someone else holds it until `expire`.
    Theirs { holder: Vec<u8>, expire: i64 },
}

/// Read value `f` at `now`, for `owner` (`None`: as nobody's).
pub fn value(store: &(impl Store + ?Sized), f: &[u8], owner: Option<&[u8]>) -> Value {
    let Some(holder) = store.hget(&Target::Main, f) else {
        return Value::Free { stale: None };
    };
    // A holder without a readable lease end is free to take, as Redisson's acquire reads it.
    let expire = match store.hget_int(&Target::Main, &expire_field(f, &holder)) {
        Int::Is(t) if t > store.now() => t,
        _ => {
            return Value::Free {
                stale: Some(holder),
            }
        }
    };
    if owner == Some(&holder[..]) {
        let count = match store.hget_int(&Target::Main, &count_field(f, &holder)) {
            Int::Is(n) => n,
            // A count below 1 or missing was not written by a lock client: re-entry repairs it.
            _ => 0,
        };
        Value::Mine { expire, count }
    } else {
        Value::Theirs { holder, expire }
    }
}

/// The hash's TTL raised to `at` when lower (set on a new hash), as Redisson's scripts keep the
/// hash alive for the longest lease. A hash without a TTL keeps none when `exists` (Redisson's
/// acquire raises only a positive PTTL; its release and renewal compare PTTL -1 as lower and
/// set one: they pass `exists = false`).
fn raise_ttl<'a>(store: &(impl Store + ?Sized), exists: bool, at: i64, out: &mut Vec<Write<'a>>) {
    let raise = match store.expire_at(&Target::Main) {
        Some(t) => t < at,
        None => !exists,
    };
    if raise {
        out.push(Write::PExpireAt {
            key: Target::Main,
            at,
        });
    }
}

/// The three fields of value `f` held by `holder`, deleted.
fn delete_value<'a>(f: &'a [u8], holder: &[u8], out: &mut Vec<Write<'a>>) {
    for field in [
        Cow::Owned(expire_field(f, holder)),
        Cow::Owned(count_field(f, holder)),
        Cow::Borrowed(f),
    ] {
        out.push(Write::HDel {
            key: Target::Main,
            field,
        });
    }
}

/// How many of the hash's fields `writes` deletes (that exist): when all, the key is deleted
/// instead (one `DEL`, the `deleted` mark of the settle step).
fn empties(store: &(impl Store + ?Sized), writes: &[Write]) -> bool {
    let mut gone = std::collections::BTreeSet::new();
    for w in writes {
        match w {
            Write::HDel { field, .. } if store.hget(&Target::Main, field).is_some() => {
                gone.insert(field.as_ref());
            }
            Write::HSet { .. } | Write::HSetInt { .. } => return false,
            _ => {}
        }
    }
    !gone.is_empty() && gone.len() == store.hlen(&Target::Main)
}

fn publish() -> Write<'static> {
    Write::PublishOn {
        prefix: names::LOCK_CHANNEL,
        message: 0,
    }
}

// ---- decisions -----------------------------------------------------------------------------------

#[derive(Debug, PartialEq, Eq)]
pub enum Acquire<'a> {
    /// Granted; whether the owner held a value of the group already (a re-entry of its hold
    /// of the group).
    Grant(Decision<'a>, bool),
    /// Some value is someone else's: wait, or fail.
    Busy,
}

/// Acquire every field for `owner`, or none. `queued`: a waiter wants one of these values (a
/// newcomer does not overtake it, unless it holds every value already: re-entry never waits).
pub fn acquire<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    lease_ms: i64,
    fields: &[&'a [u8]],
    queued: bool,
) -> Result<Acquire<'a>, CmdError> {
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    let exists = checked(store)?;
    let mut values = Vec::with_capacity(fields.len());
    for f in fields {
        let v = match exists {
            true => value(store, f, Some(owner)),
            false => Value::Free { stale: None },
        };
        if matches!(v, Value::Theirs { .. }) {
            // Read no further: a queue's waiters are tried on every serving step.
            return Ok(Acquire::Busy);
        }
        values.push(v);
    }
    let reentry = values.iter().all(|v| matches!(v, Value::Mine { .. }));
    if queued && !reentry {
        return Ok(Acquire::Busy);
    }
    let mut writes = Vec::with_capacity(fields.len() * 3 + 1);
    for (f, v) in fields.iter().zip(&values) {
        let (expire, count) = match v {
            Value::Mine { expire, count } => (
                (*expire).max(at),
                count
                    .max(&0)
                    .checked_add(1)
                    .ok_or(CmdError::CountOverflow)?,
            ),
            Value::Free { stale } => {
                if let Some(stale) = stale {
                    // The lapsed holder's lease and count go (its own, if it was the asker:
                    // a hold whose lease ended is not re-entered, it starts again at 1).
                    for field in [expire_field(f, stale), count_field(f, stale)] {
                        writes.push(Write::HDel {
                            key: Target::Main,
                            field: Cow::Owned(field),
                        });
                    }
                }
                writes.push(Write::HSet {
                    key: Target::Main,
                    field: Cow::Borrowed(f),
                    value: Cow::Borrowed(owner),
                });
                (at, 1)
            }
            Value::Theirs { .. } => unreachable!("refused above"),
        };
        writes.push(Write::HSetInt {
            key: Target::Main,
            field: Cow::Owned(expire_field(f, owner)),
            value: expire,
        });
        writes.push(Write::HSetInt {
            key: Target::Main,
            field: Cow::Owned(count_field(f, owner)),
            value: count,
        });
    }
    raise_ttl(store, exists, at, &mut writes);
    // The owner's hold of the group (what counters and `RLOCK.TOP` follow) starts with its
    // first value and ends with its last: taking more values while holding some re-enters it.
    let held_some = values.iter().any(|v| matches!(v, Value::Mine { .. }))
        || (exists && !holds_none_but(store, owner, &[]));
    Ok(Acquire::Grant(
        Decision::new(writes, Reply::Int(1)),
        held_some,
    ))
}

/// What a release did.
#[derive(Debug, PartialEq, Eq)]
pub struct Released<'a> {
    pub decision: Decision<'a>,
    /// Values it freed.
    pub freed: usize,
    /// `owner` holds no value of the group any more.
    pub none_left: bool,
}

/// Release one hold of every field, or nothing (reply nil) when any is not `owner`'s (absent,
/// another's, or its lease ended). Reply 1 when every field was freed, 0 when some are still
/// held (Redisson's `allDeleted`); a value still held has its lease raised to `lease_ms` from
/// now, as Redisson's unlock script does.
pub fn release<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    lease_ms: i64,
    fields: &[&'a [u8]],
) -> Result<Released<'a>, CmdError> {
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    let refused = Released {
        decision: Decision::reply(Reply::Nil),
        freed: 0,
        none_left: false,
    };
    if !checked(store)? {
        return Ok(refused);
    }
    let mut held = Vec::with_capacity(fields.len());
    for f in fields {
        match value(store, f, Some(owner)) {
            Value::Mine { expire, count } => held.push((f, expire, count)),
            _ => return Ok(refused),
        }
    }
    let mut writes = Vec::with_capacity(fields.len() * 3 + 2);
    let mut freed = 0;
    let mut raised = false;
    for (f, expire, count) in held {
        if count <= 1 {
            delete_value(f, owner, &mut writes);
            freed += 1;
        } else {
            writes.push(Write::HSetInt {
                key: Target::Main,
                field: Cow::Owned(count_field(f, owner)),
                value: count - 1,
            });
            if expire < at {
                writes.push(Write::HSetInt {
                    key: Target::Main,
                    field: Cow::Owned(expire_field(f, owner)),
                    value: at,
                });
                raised = true;
            }
        }
    }
    let all = freed == fields.len();
    if raised {
        raise_ttl(store, false, at, &mut writes);
    }
    if empties(store, &writes) {
        writes = vec![Write::Del { key: Target::Main }];
    }
    if freed > 0 {
        writes.push(publish());
    }
    let none_left = all && holds_none_but(store, owner, fields);
    Ok(Released {
        decision: Decision::new(writes, Reply::Int(all as i64)),
        freed,
        none_left,
    })
}

/// Whether `owner` holds no value of the group outside `fields` (it released its last ones).
fn holds_none_but(store: &(impl Store + ?Sized), owner: &[u8], fields: &[&[u8]]) -> bool {
    let mut none = true;
    store.hvisit(&Target::Main, &mut |field, holder| {
        if holder == owner && !is_aux(field) && !fields.contains(&field) {
            none = false;
        }
        none
    });
    none
}

/// Whether a field is a holder's `expire_time` or `lock_count` rather than a value's own.
pub fn is_aux(field: &[u8]) -> bool {
    field.ends_with(EXPIRE_TIME) || field.ends_with(LOCK_COUNT)
}

/// Extend the lease of every field `owner` holds: reply 1, or 0 (nothing written) when any is
/// not `owner`'s live hold, as Redisson's renewal script answers.
pub fn renew<'a>(
    store: &(impl Store + ?Sized),
    owner: &'a [u8],
    lease_ms: i64,
    fields: &[&'a [u8]],
) -> Result<Decision<'a>, CmdError> {
    let at = args::deadline(store.now(), lease_ms, "lease_ms")?;
    if !checked(store)? {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    let mut writes = Vec::new();
    for f in fields {
        match value(store, f, Some(owner)) {
            Value::Mine { expire, .. } if expire < at => writes.push(Write::HSetInt {
                key: Target::Main,
                field: Cow::Owned(expire_field(f, owner)),
                value: at,
            }),
            Value::Mine { .. } => {}
            _ => return Ok(Decision::reply(Reply::Int(0))),
        }
    }
    raise_ttl(store, false, at, &mut writes);
    Ok(Decision::new(writes, Reply::Int(1)))
}

/// Delete every field's value whoever holds it (a lapsed hold too); reply the number of values
/// removed.
pub fn force_release<'a>(
    store: &(impl Store + ?Sized),
    fields: &[&'a [u8]],
) -> Result<Decision<'a>, CmdError> {
    if !checked(store)? {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    let mut writes = Vec::new();
    let mut removed = 0;
    for f in fields {
        if let Some(holder) = store.hget(&Target::Main, f) {
            delete_value(f, &holder, &mut writes);
            removed += 1;
        }
    }
    if removed == 0 {
        return Ok(Decision::reply(Reply::Int(0)));
    }
    if empties(store, &writes) {
        writes = vec![Write::Del { key: Target::Main }];
    }
    writes.push(publish());
    Ok(Decision::new(writes, Reply::Int(removed)))
}

/// `RMLOCK.INFO`: for each field `[F, holder or nil, lock_count, expire_time or nil]`; a value
/// whose lease ended shows as free (`[F, nil, 0, nil]`).
pub fn info(store: &(impl Store + ?Sized), fields: &[&[u8]]) -> Result<Reply, CmdError> {
    let exists = checked(store)?;
    let rows = fields.iter().map(|f| {
        let v = match exists {
            true => value(store, f, None),
            false => Value::Free { stale: None },
        };
        let (holder, count, expire) = match v {
            Value::Theirs { holder, expire } => {
                let count = match store.hget_int(&Target::Main, &count_field(f, &holder)) {
                    Int::Is(n) => n,
                    _ => 0,
                };
                (Reply::Bulk(holder), count, Reply::Int(expire))
            }
            _ => (Reply::Nil, 0, Reply::Nil),
        };
        Reply::Array(vec![
            Reply::Bulk(f.to_vec()),
            holder,
            Reply::Int(count),
            expire,
        ])
    });
    Ok(Reply::Array(rows.collect()))
}

// ---- the hand-off walk ---------------------------------------------------------------------------

/// The hand-off rule, on the queue's value sets in order: a waiter whose values are all free
/// and none claimed by a waiter before it is granted (its values become held); any other
/// waiter claims its values. FIFO per value, and disjoint values never wait on each other.
/// `freed`: the values this step freed, when known; the walk stops once each is granted or
/// claimed (a waiter behind that point waits on values that did not change, so it could not be
/// granted before either). `None` walks the whole queue. This is the specification: serving
/// (`core::wait::grant`'s `serve_past_head`) applies it through the queue's index by value,
/// trying only the first waiters of the values that changed, and its property tests
/// (`serving_prop_tests`) check it grants what the whole walk does. Returns the granted
/// waiters' indices.
pub fn walk<'v, V: AsRef<[u8]> + 'v>(
    waiters: impl IntoIterator<Item = &'v [V]>,
    free: impl Fn(&[u8]) -> bool,
    freed: Option<&[&[u8]]>,
) -> Vec<usize> {
    let mut claims = Claims::default();
    let mut granted = Vec::new();
    for (i, values) in waiters.into_iter().enumerate() {
        if freed.is_some_and(|fr| fr.iter().all(|v| claims.contains(v))) {
            break;
        }
        if claims.free_of(values) && values.iter().all(|v| free(v.as_ref())) {
            granted.push(i);
        }
        // Granted or not, its values are no one else's in this step.
        claims.claim(values);
    }
    granted
}

// ---- waiting -------------------------------------------------------------------------------------

/// An `RMLOCK.ACQUIRE` as the acquire pipeline decides it.
pub struct GroupAcquire<'a> {
    pub owner: &'a [u8],
    pub args: AcquireArgs<'a>,
    /// A waiter wants one of its values: it may not take them past that waiter (FIFO per
    /// value), though it may take values nobody waits for. Read before the queue is served:
    /// a waiter granted then holds its values, so the newcomer is refused them anyway.
    pub claimed: bool,
}

impl<'a> Acquiring<'a> for GroupAcquire<'a> {
    fn object(&self) -> &'static dyn Object {
        &GroupObject
    }

    fn wait(&self) -> &WaitArgs<'a> {
        &self.args.wait
    }

    fn decide<S: Store + ?Sized>(
        &self,
        store: &S,
        _queued: bool,
        _tidied: bool,
    ) -> Result<Decided<'a>, CmdError> {
        let a = &self.args;
        Ok(
            match acquire(store, self.owner, a.lease_ms, &a.fields, self.claimed)? {
                Acquire::Grant(decision, reentry) => Decided::Grant {
                    decision,
                    reentry,
                    own_lease_ms: None,
                },
                Acquire::Busy => Decided::Busy,
            },
        )
    }

    fn request(&self) -> Req {
        std::rc::Rc::new(GroupRequest {
            owner: self.owner.into(),
            lease_ms: self.args.lease_ms,
            fields: self.args.fields.iter().map(|f| (*f).into()).collect(),
        })
    }

    fn hold(&self) -> Option<bool> {
        Some(true)
    }
}

/// The group around its queue: each value's lease ends on its own (its `expire_time`), while
/// the hash lives on for the others'.
pub struct GroupObject;

impl GroupObject {
    /// Every live hold in the group: (holder, its lease end).
    fn live_holds(store: &dyn Store) -> Vec<(Vec<u8>, i64)> {
        let all = store.hgetall(&Target::Main);
        let get = |name: &[u8]| all.iter().find(|(f, _)| f == name).map(|(_, v)| v);
        let now = store.now();
        all.iter()
            .filter(|(f, _)| !is_aux(f))
            .filter_map(|(f, holder)| {
                let t = args::parse_i64(get(&expire_field(f, holder))?)?;
                (t > now).then(|| (holder.clone(), t))
            })
            .collect()
    }
}

impl Object for GroupObject {
    fn kind(&self) -> ObjectKind {
        ObjectKind::GroupLock
    }

    /// The earliest lease end of a value still held (its waiters may pass then), or the
    /// hash's own expiry.
    fn wake_at(&self, store: &dyn Store) -> Option<i64> {
        let first = Self::live_holds(store).into_iter().map(|(_, t)| t).min();
        match (first, store.expire_at(&Target::Main)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Held while `owner` holds any value of the group: until its earliest lease end.
    fn held_until(&self, owner: &[u8], _exclusive: bool, store: &dyn Store) -> Option<Option<i64>> {
        let ends = Self::live_holds(store).into_iter();
        ends.filter(|(h, _)| h == owner)
            .map(|(_, t)| t)
            .min()
            .map(Some)
    }

    /// The values whose holds' leases have ended while the hash lives on for other values
    /// (their leftover fields name them), read in one `HGETALL`, as [`Object::wake_at`] reads
    /// the next lease end. The hash gone (expired: every value is free), or not a group's any
    /// more (its waiters fail): [`Freed::Gone`].
    fn lapsed_values(&self, store: &dyn Store) -> Freed {
        if kind(store) != KeyType::Hash {
            return Freed::Gone;
        }
        let all = store.hgetall(&Target::Main);
        let fields: std::collections::HashMap<&[u8], &[u8]> =
            all.iter().map(|(f, v)| (&f[..], &v[..])).collect();
        let now = store.now();
        let lapsed = all
            .iter()
            .filter(|(f, _)| !is_aux(f))
            .filter(|(f, holder)| {
                // As `value` reads it: a holder without a readable lease end holds nothing.
                fields
                    .get(&expire_field(f, holder)[..])
                    .and_then(|t| args::parse_i64(t))
                    .is_none_or(|t| t <= now)
            });
        Freed::Lapsed(lapsed.map(|(f, _)| f.clone()).collect())
    }

    // `holders_upto` stays empty: deadlock detection reads holders per key, and a group's
    // holders hold values a waiter may not want (a waiter on `a` does not wait for the holder
    // of `b`): reporting them would refuse waits that are no deadlock.
}

/// A queued `RMLOCK.ACQUIRE`: granted when every value is free (or its owner's), with its
/// lease counted from then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRequest {
    pub owner: Box<[u8]>,
    pub lease_ms: i64,
    pub fields: Vec<Box<[u8]>>,
}

impl Request for GroupRequest {
    fn object(&self) -> &'static dyn Object {
        &GroupObject
    }

    fn try_grant(&self, store: &dyn Store) -> TryGrant<'_> {
        let fields: Vec<&[u8]> = self.fields.iter().map(|f| &f[..]).collect();
        match acquire(store, &self.owner, self.lease_ms, &fields, false) {
            Ok(Acquire::Grant(d, _)) => TryGrant::Grant(d),
            Ok(Acquire::Busy) => TryGrant::Wait,
            Err(e) => TryGrant::Fail(e),
        }
    }

    fn undo(&self, _granted: &Reply, store: &dyn Store) -> Option<Decision<'_>> {
        // Only the untouched grant (each value held once by this owner) is undone.
        let fields: Vec<&[u8]> = self.fields.iter().map(|f| &f[..]).collect();
        let untouched = fields.iter().all(|f| {
            matches!(
                value(store, f, Some(&self.owner)),
                Value::Mine { count: 1, .. }
            )
        });
        if !untouched {
            return None;
        }
        let r = release(store, &self.owner, 1, &fields).ok()?;
        Some(Decision::writes(r.decision.writes))
    }

    fn show(&self) -> Reply {
        Reply::Bulk(self.owner.to_vec())
    }

    fn holds(&self) -> Option<&dyn Hold> {
        Some(self)
    }

    fn values(&self) -> Option<&[Box<[u8]>]> {
        Some(&self.fields)
    }
}

impl Hold for GroupRequest {
    fn owner(&self) -> &[u8] {
        &self.owner
    }
}

#[cfg(test)]
mod group_tests;

/// Property tests: serving through the index by value grants as the whole-queue walk did.
#[cfg(test)]
mod serving_prop_tests;

//! [`RedisKeys`]: one object's keys as the rules see them ([`Store`]), read through the
//! low-level key API. The main key stays open (for writing) while a command or a serving step
//! runs; auxiliary keys are opened per read.

use crate::core::error::CmdError;
use crate::core::stats::ObjectKind;
use crate::core::store::{Int, KeyType, Store, Target};
use crate::core::wait::{KeyId, Req};
use crate::ffi::{Ctx, Key, OwnedStr, RStr, ReadStr};

const HINTS: usize = 2;

pub struct RedisKeys {
    pub(crate) ctx: Ctx,
    /// A command's key: the kind of object it names. Its writes are marked for the settle step
    /// after the command (`settle`); a timer's or an event's job marks its own (`marks`).
    pub(crate) object: Option<ObjectKind>,
    pub(crate) name: ReadStr,
    pub(crate) main: Key,
    /// Argument strings (the owner) the rules pass back as hash fields: reused as they are
    /// instead of copied into new Redis strings. Inline (a heap vector cost an allocation per
    /// command); a command has at most [`HINTS`], more would only be made afresh. Each with
    /// where its bytes are, read once: a field is matched by address at every read and write
    /// (`RM_StringPtrLen` twice a match cost 60 instructions each time, callgrind).
    hints: [Option<ReadStr>; HINTS],
    /// Outside a client command (timers, events): a write that creates a key checks first that
    /// no expired copy of it is still stored, which happens while writes are paused.
    pub(crate) guard_pause: bool,
    /// Cluster mode only: auxiliary keys read and found absent, or read while the main key is
    /// absent (see [`RedisKeys::whole`]).
    /// `None` until one is noted: dropping an empty vector of vectors was a call of its own,
    /// 22 instructions of every command (callgrind).
    absent: std::cell::RefCell<Option<Vec<Vec<u8>>>>,
    /// The command's own key (not a timer's, not another object's read for deadlock
    /// detection): its absent reads also gate the command's reply (see [`gate_reply`]).
    command: bool,
    _owned: Option<OwnedStr>,
}

impl RedisKeys {
    /// The key of a command (argv[1]), a `kind` object; `hints`: other argv strings the rules
    /// may use as fields.
    /// Inlined into each command (out of line, its result is copied out of the call: 110
    /// instructions a command, callgrind).
    #[inline(always)]
    pub fn command(
        ctx: Ctx,
        kind: ObjectKind,
        name: impl Into<ReadStr>,
        hints: &[ReadStr],
    ) -> RedisKeys {
        let name = name.into();
        RedisKeys {
            ctx,
            object: Some(kind),
            name,
            main: Key::open(ctx, name.get(), true),
            hints: std::array::from_fn(|i| hints.get(i).copied()),
            guard_pause: false,
            absent: Default::default(),
            command: true,
            _owned: None,
        }
    }

    /// The key of a read-only command (introspection): opened for reading only.
    pub fn read(ctx: Ctx, name: RStr) -> RedisKeys {
        RedisKeys {
            ctx,
            object: None,
            name: name.read(),
            main: Key::open(ctx, name, false),
            hints: [None; HINTS],
            guard_pause: false,
            absent: Default::default(),
            command: false,
            _owned: None,
        }
    }

    /// Another key of the command's database, read only (deadlock detection reads the keys
    /// an owner waits on).
    pub fn peek(ctx: Ctx, name: &[u8]) -> RedisKeys {
        Self::named(ctx, name, false)
    }

    /// A key named by bytes, looked at from a timer or an event (the ctx's db is selected).
    pub fn background(ctx: Ctx, name: &[u8]) -> RedisKeys {
        Self::named(ctx, name, true)
    }

    /// The key `id` looked at from a timer or an event: its database selected and the key
    /// opened. `None` on a replica (its data changes by replication only: it never serves,
    /// tidies or undoes) or when the database cannot be selected.
    pub fn looked_at(ctx: Ctx, id: &KeyId) -> Option<RedisKeys> {
        (!ctx.is_replica() && ctx.select_db(id.db)).then(|| Self::background(ctx, &id.key))
    }

    /// A key named by bytes rather than by the command's argv; one that may be written checks
    /// for a write pause first.
    fn named(ctx: Ctx, name: &[u8], write: bool) -> RedisKeys {
        let owned = OwnedStr::new(name);
        let name = owned.get();
        RedisKeys {
            ctx,
            object: None,
            name: name.read(),
            main: Key::open(ctx, name, write),
            hints: [None; HINTS],
            guard_pause: write,
            absent: Default::default(),
            command: false,
            _owned: Some(owned),
        }
    }

    /// `bytes` as a Redis string: a hinted argv string when it is one, else a new string.
    pub(crate) fn string(&self, bytes: &[u8]) -> Field {
        match self.hints.iter().flatten().find(|h| h.is(bytes)) {
            Some(h) => Field::Borrowed(h.get()),
            None => Field::Owned(OwnedStr::new(bytes)),
        }
    }

    /// Read `key` through `f`, opening an auxiliary key for reading.
    fn with<R>(&self, key: &Target, f: impl FnOnce(&Key) -> R) -> R {
        match key {
            Target::Main => f(&self.main),
            Target::Aux(name) => {
                let k = Key::open_bytes(self.ctx, name, false);
                // Present here while the object's main key is not, the key may have arrived
                // ahead of it on the node importing the slot (a semaphore's leased-permit set
                // moved, its count not yet): confirmed as an absent one is, or a release sent
                // with ASKING would run on half the object.
                if k.kind() == KeyType::Empty || self.main.kind() == KeyType::Empty {
                    self.note_absent(name);
                }
                f(&k)
            }
        }
    }

    /// An auxiliary key is absent here. In a cluster whose slot is being migrated it may have
    /// moved to the importing node already (`redis-cli --cluster reshard` moves a slot's keys
    /// ten at a time in `CLUSTER GETKEYSINSLOT` order, so a read hold's lease key can leave
    /// before the lock's hash): noted, so that nothing is decided on the object before Redis
    /// confirms every key of it is here ([`RedisKeys::whole`]).
    pub(crate) fn note_absent(&self, name: &[u8]) {
        // A key of another slot (an odd name's, see `core::slots`) is not moved with this one.
        if !cluster(self.ctx) || !same_slot(self.name.bytes(), name) {
            return;
        }
        let mut absent = self.absent.borrow_mut();
        let absent = absent.get_or_insert_with(Vec::new);
        if !absent.iter().any(|k| k == name) {
            absent.push(name.to_vec());
            if self.command {
                COMMAND_ABSENT.with(|c| {
                    let mut c = c.borrow_mut();
                    // After its first write a command's reads see its own deletions: only what
                    // it read before counts (`apply` checked those before writing).
                    if !c.took_effect {
                        c.absent.push(name.to_vec());
                    }
                });
            }
        }
    }

    /// `Ok` unless this object is split by a slot migration: some of its keys read (or about to
    /// be written, `more`) are absent here while its slot is migrating or importing. Redis itself
    /// decides, as for a native multi-key command: `EXISTS key aux...` through `RM_Call` is
    /// refused exactly when Redis would answer such a command `TRYAGAIN` (some keys here, some
    /// not, on either side of a migration) or `ASK`/`MOVED`. Outside a cluster, or when every key
    /// read was there, nothing is asked.
    pub(crate) fn whole(&self, more: &[&[u8]]) -> Result<(), crate::core::error::CmdError> {
        let absent = self.absent.borrow();
        let absent = absent.as_deref().unwrap_or_default();
        if absent.is_empty() && more.is_empty() {
            return Ok(());
        }
        let mut keys: Vec<&[u8]> = Vec::with_capacity(absent.len() + more.len() + 1);
        keys.push(self.name.bytes());
        keys.extend(absent.iter().map(Vec::as_slice));
        keys.extend_from_slice(more);
        if self.ctx.all_local(&keys) {
            Ok(())
        } else {
            Err(crate::core::error::CmdError::Unstable)
        }
    }
}

impl RedisKeys {
    /// In cluster mode, refuse a request whose auxiliary keys (`Request::aux_keys`: a fencing
    /// token, a read hold's lease key, the leased-permit set) would land in another slot than
    /// its key, before anything is written: they would live on another node, or be left behind
    /// by resharding. Outside a cluster every name keeps Redisson's exact keys, whatever they
    /// hash to.
    pub fn check_slots(&self, req: impl FnOnce() -> Req) -> Result<(), CmdError> {
        if !cluster(self.ctx) {
            return Ok(());
        }
        crate::core::slots::check(self.name.bytes(), &req().aux_keys(self))
    }
}

pub(crate) fn same_slot(a: &[u8], b: &[u8]) -> bool {
    crate::core::slots::slot(a) == crate::core::slots::slot(b)
}

/// Whether the server runs in cluster mode (fixed at startup: one flags read for the life of
/// the process). A plain atomic, not a thread-local: in a shared library each thread-local
/// access calls `__tls_get_addr`, and this is read several times per command.
pub fn cluster(ctx: Ctx) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    /// 0: not read yet; 1: no; 2: yes.
    static CLUSTER: AtomicU8 = AtomicU8::new(0);
    match CLUSTER.load(Relaxed) {
        0 => {
            let yes = ctx.is_cluster();
            CLUSTER.store(if yes { 2 } else { 1 }, Relaxed);
            yes
        }
        n => n == 2,
    }
}

/// A command's key handle left open for the settle step after it ([`RedisKeys::leave_open`]),
/// with the name it was opened by.
struct Kept {
    name: ReadStr,
    key: Key,
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<Kept>> = const { std::cell::RefCell::new(None) };
}

/// Whether a handle is kept: most commands leave none, and ask this plain atomic rather than
/// the thread-local (`__tls_get_addr`, about 20 instructions, callgrind). Only Redis' main
/// thread runs commands.
static KEPT_ANY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl RedisKeys {
    /// The command is done with its key, and the settle step after it will open the key
    /// again (to serve a queue, to announce): its open handle is left to that step
    /// ([`RedisKeys::reopened`]) instead of closed here and opened again there (`RM_OpenKey`
    /// and `RM_CloseKey`, 590 of a hand-off's instructions, callgrind, `scripts/budget.py`).
    /// Whatever the step does not take is closed when it ends ([`CloseKept`]). Called only
    /// then (`if wait::total() > 0`): moving the keys into a call cost the uncontended release
    /// 30 instructions (a copy) even when nothing was kept.
    #[inline(never)]
    pub fn leave_open(self) {
        if !self.command {
            return;
        }
        let RedisKeys { name, main, .. } = self;
        KEPT.with(|k| *k.borrow_mut() = Some(Kept { name, key: main }));
        KEPT_ANY.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The key of a command (argv[1]), a `kind` object, for the settle step after it: the
    /// handle the command left open, if it left one for this name, else opened anew.
    pub fn reopened(ctx: Ctx, kind: ObjectKind, name: ReadStr) -> RedisKeys {
        let kept = KEPT_ANY
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| {
                KEPT.with(|k| {
                    let mut k = k.borrow_mut();
                    let same = k.as_ref().is_some_and(|kept| kept.name.is(name.bytes()));
                    same.then(|| k.take()).flatten()
                })
            })
            .flatten();
        match kept {
            Some(Kept { key, .. }) => {
                KEPT_ANY.store(false, std::sync::atomic::Ordering::Relaxed);
                RedisKeys {
                    ctx,
                    object: Some(kind),
                    name,
                    main: key,
                    hints: [None; HINTS],
                    guard_pause: false,
                    absent: Default::default(),
                    command: true,
                    _owned: None,
                }
            }
            None => RedisKeys::command(ctx, kind, name, &[]),
        }
    }
}

/// Closes the handle a command left open ([`RedisKeys::leave_open`]) if the settle step did not
/// take it, when dropped: at the end of the command's settle step, or while a panic unwinds
/// it (a handle kept past its command would be closed against a freed context).
pub struct CloseKept;

impl Drop for CloseKept {
    #[inline(always)]
    fn drop(&mut self) {
        if KEPT_ANY.load(std::sync::atomic::Ordering::Relaxed) {
            close_kept();
        }
    }
}

#[cold]
fn close_kept() {
    KEPT_ANY.store(false, std::sync::atomic::Ordering::Relaxed);
    let kept = KEPT.with(|k| k.try_borrow_mut().ok().and_then(|mut k| k.take()));
    drop(kept);
}

/// What the running command's object read absent before it wrote anything, and whether it
/// left an effect (`RedisKeys::note_effect`; cluster mode).
#[derive(Default)]
struct CommandReads {
    absent: Vec<Vec<u8>>,
    took_effect: bool,
}

thread_local! {
    static COMMAND_ABSENT: std::cell::RefCell<CommandReads> = const {
        std::cell::RefCell::new(CommandReads { absent: Vec::new(), took_effect: false })
    };
}

impl RedisKeys {
    /// The command left an effect its reply reports, so the reply stands: its object was
    /// written (after `apply` found it whole), or a request was queued behind it (its reply
    /// `QUEUED`, or the parked connection's later one). A `TRYAGAIN` in its place would have
    /// the client queue the request again while this one is granted later to a wait that is
    /// gone: a permit or a lock held by nobody.
    pub(crate) fn note_effect(&self) {
        if self.command && cluster(self.ctx) {
            COMMAND_ABSENT.with(|c| c.borrow_mut().took_effect = true);
        }
    }
}

/// Run a command handler; in cluster mode, a reply decided on an object some of whose keys
/// were absent (a hold's lease key, the leased-permit set, the token counter) is replaced by
/// `TRYAGAIN` when Redis says those keys may be on the other side of a slot migration: without
/// this, `RRWLOCK.RENEW` of a reader whose lease key moved first would answer 0 (lost), and
/// read-only replies would describe half an object. Writes are gated in `apply` already.
pub fn gate_reply(
    ctx: Ctx,
    key: Option<RStr>,
    run: &mut dyn FnMut() -> Result<crate::ffi::Answer, crate::core::error::CmdError>,
) -> Result<crate::ffi::Answer, crate::core::error::CmdError> {
    // Outside a cluster nothing is noted (`note_absent`, `note_effect`): the reply stands, and
    // resetting and taking the notes cost 140 instructions per command (callgrind).
    if !cluster(ctx) {
        return run();
    }
    COMMAND_ABSENT.with(|c| *c.borrow_mut() = CommandReads::default());
    let result = run();
    let CommandReads {
        absent,
        took_effect,
    } = COMMAND_ABSENT.with(|c| std::mem::take(&mut *c.borrow_mut()));
    // A command that wrote was found whole by `apply` first; one that queued a request was
    // granted nothing (a queued request ends with TRYAGAIN or MOVED if its slot leaves): either
    // way its reply reports what it did (`RedisKeys::note_effect`). Errors are gated as replies
    // are: `NOPERMIT` for a permit whose leased-permit set has not arrived yet is as wrong as a 0.
    if absent.is_empty() || took_effect {
        return result;
    }
    let Some(name) = key else {
        return result;
    };
    let mut keys: Vec<&[u8]> = vec![name.bytes()];
    keys.extend(absent.iter().map(Vec::as_slice));
    if ctx.all_local(&keys) {
        result
    } else {
        Err(crate::core::error::CmdError::Unstable)
    }
}

/// A Redis string for a field: borrowed from argv, or made for the occasion.
pub(crate) enum Field {
    Borrowed(RStr),
    Owned(OwnedStr),
}

impl Field {
    pub(crate) fn get(&self) -> RStr {
        match self {
            Field::Borrowed(s) => *s,
            Field::Owned(s) => s.get(),
        }
    }
}

impl Store for RedisKeys {
    fn now(&self) -> i64 {
        self.ctx.now_ms()
    }

    fn key_name(&self) -> &[u8] {
        self.name.bytes()
    }

    fn kind(&self, key: &Target) -> KeyType {
        self.with(key, Key::kind)
    }

    fn hget_int(&self, key: &Target, field: &[u8]) -> Int {
        let field = self.string(field);
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.hash_get_int(field.get())
            } else {
                Int::Absent
            }
        })
    }

    fn hget(&self, key: &Target, field: &[u8]) -> Option<Vec<u8>> {
        let field = self.string(field);
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.hash_get(field.get())
            } else {
                None
            }
        })
    }

    fn hgetall(&self, key: &Target) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.hash_scan(usize::MAX)
            } else {
                Vec::new()
            }
        })
    }

    fn hvisit(&self, key: &Target, f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.hash_visit(f)
            }
        })
    }

    fn hlen(&self, key: &Target) -> usize {
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.len()
            } else {
                0
            }
        })
    }

    fn hfirst(&self, key: &Target) -> Option<(Vec<u8>, Vec<u8>)> {
        self.with(key, |k| {
            if k.kind() == KeyType::Hash {
                k.hash_scan(1).pop()
            } else {
                None
            }
        })
    }

    fn get_int(&self, key: &Target) -> Int {
        self.with(key, |k| {
            if k.kind() == KeyType::String {
                Int::from_bytes(k.string_get().as_deref())
            } else {
                Int::Absent
            }
        })
    }

    fn expire_at(&self, key: &Target) -> Option<i64> {
        self.with(key, Key::abs_expire)
    }

    fn zscore(&self, key: &Target, member: &[u8]) -> Option<f64> {
        let member = OwnedStr::new(member);
        self.with(key, |k| k.zset_score(member.get()))
    }

    fn zrange(&self, key: &Target, max: f64, limit: usize) -> Vec<(Vec<u8>, f64)> {
        self.with(key, |k| k.zset_range(max, limit))
    }

    fn zcard(&self, key: &Target) -> usize {
        self.with(key, |k| {
            if k.kind() == KeyType::ZSet {
                k.len()
            } else {
                0
            }
        })
    }

    fn random_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        crate::ffi::random_bytes(&mut id);
        id
    }
}

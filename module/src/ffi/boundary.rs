//! The boundary every call from Redis crosses. Panics are caught here (an unwinding panic
//! through `extern "C"` would abort redis-server), a flag records that rlock itself is running
//! (so keyspace events raised by its own writes are not handled twice), and the module's plain
//! Rust handlers, installed once at load, are called from the trampolines.

use super::{Ctx, RStr, RedisModuleCtx, RedisModuleString};
use crate::core::stats;
use redis_module::raw;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

/// Whether rlock code is on the stack. Every call from Redis (commands, timers, events) comes
/// on its main thread, so one flag for the process says it; a static, not a thread-local: in a
/// shared library each thread-local access calls `__tls_get_addr`, twice per command here.
static INSIDE: AtomicBool = AtomicBool::new(false);

/// Whether rlock code is on the stack (events raised by its own key writes arrive then).
pub fn inside() -> bool {
    INSIDE.load(Ordering::Relaxed)
}

/// Run `f` with panics caught and the `inside` flag set. `None` when it panicked (the panic
/// hook has logged it).
pub fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    let was = INSIDE.swap(true, Ordering::Relaxed);
    let result = catch_unwind(AssertUnwindSafe(f)).ok();
    INSIDE.store(was, Ordering::Relaxed);
    if result.is_none() {
        stats::ERRORS.incr();
    }
    result
}

/// Log panics to the Redis log instead of stderr, which a daemonized server discards.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        Ctx(std::ptr::null_mut()).log_warning(&format!("rlock: panic caught: {info}"));
    }));
}

/// Server events the module listens to, in safe form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// FLUSHDB (`Some(db)`) or FLUSHALL (`None`) finished.
    Flushed(Option<i32>),
    Swapped(i32, i32),
    /// A client connection is being freed (its blocked-client disconnect callback follows).
    ClientClosing(u64),
    /// A child process was forked (a replica's full sync, an AOF rewrite, BGSAVE).
    Forked,
    ReplicasChanged,
    RoleChanged,
    /// `CONFIG SET` changed these parameters.
    ConfigChanged(Vec<Vec<u8>>),
    /// A step of an atomic slot migration on this node (Valkey 9's `CLUSTER MIGRATESLOTS`,
    /// Redis 8.4's `CLUSTER MIGRATION IMPORT`), with the job's slot ranges (inclusive).
    SlotMigration(Migration, Vec<(u16, u16)>),
}

/// The steps of an atomic slot migration a node is told of (valkeymodule.h's
/// `VALKEYMODULE_SUBEVENT_ATOMIC_SLOT_MIGRATION_*`, in their order; Redis names an export a
/// migrate, an abort a failure or a cancel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Migration {
    ImportStarted,
    ExportStarted,
    ImportAborted,
    ExportAborted,
    ImportCompleted,
    ExportCompleted,
}

/// Valkey 9's server event of atomic slot migration and its module option (valkeymodule.h:
/// `VALKEYMODULE_EVENT_ATOMIC_SLOT_MIGRATION`, `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION`).
/// The redis-module crate's bindings are Redis' and know neither.
const EVENT_ATOMIC_SLOT_MIGRATION: u64 = 19;
const OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

/// `ValkeyModuleSlotRange`: inclusive.
#[repr(C)]
struct SlotRange {
    start: c_int,
    end: c_int,
}

/// `ValkeyModuleAtomicSlotMigrationInfoV1`, the event's data.
#[repr(C)]
struct MigrationInfoV1 {
    version: u64,
    job_name: [c_char; 41],
    slot_ranges: *const SlotRange,
    num_slot_ranges: u32,
}

/// Redis 8.4's server event of atomic slot migration (redismodule.h:
/// `REDISMODULE_EVENT_CLUSTER_SLOT_MIGRATION`; its id 19 is the trim event, Valkey's 19 its
/// migration event: which one the module subscribed to is kept in [`MIGRATION_EVENTS`]). Its
/// sub-events, in order: import started, import failed, import completed, migrate started,
/// migrate failed, migrate completed, and (6) a module's chance to propagate, unused.
const EVENT_CLUSTER_SLOT_MIGRATION: u64 = 18;

/// `RedisModuleSlotRange`: inclusive.
#[repr(C)]
struct RedisSlotRange {
    start: u16,
    end: u16,
}

/// `RedisModuleSlotRangeArray`'s head; `num_ranges` ranges follow it.
#[repr(C)]
struct RedisSlotRanges {
    num_ranges: i32,
    ranges: [RedisSlotRange; 0],
}

/// `RedisModuleClusterSlotMigrationInfoV1`, the event's data.
#[repr(C)]
struct RedisMigrationInfoV1 {
    version: u64,
    source_node_id: [c_char; 41],
    destination_node_id: [c_char; 41],
    task_id: *const c_char,
    slots: *const RedisSlotRanges,
}

/// Which server's migration event the module subscribed to at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationEvents {
    /// Valkey 9+: `CLUSTER MIGRATESLOTS`.
    Valkey = 1,
    /// Redis 8.4+: `CLUSTER MIGRATION IMPORT`.
    Redis = 2,
}

/// 0 until [`handle_atomic_slot_migration`] subscribed; then a [`MigrationEvents`].
static MIGRATION_EVENTS: AtomicU8 = AtomicU8::new(0);

fn subscribed_to(events: MigrationEvents) -> bool {
    MIGRATION_EVENTS.load(Ordering::Relaxed) == events as u8
}

/// Subscribe to the server's atomic slot migration event. Only on the server named: there the
/// event ids are that server's; another server gives the same numbers other meanings. On Valkey,
/// also declare that the module handles it: Valkey refuses `CLUSTER MIGRATESLOTS` while a
/// loaded module has not (Redis asks nothing of modules).
pub fn handle_atomic_slot_migration(ctx: Ctx, events: MigrationEvents) {
    MIGRATION_EVENTS.store(events as u8, Ordering::Relaxed);
    let id = match events {
        MigrationEvents::Valkey => EVENT_ATOMIC_SLOT_MIGRATION,
        MigrationEvents::Redis => EVENT_CLUSTER_SLOT_MIGRATION,
    };
    // SAFETY: load runs on the main thread with a valid ctx; the callback is the trampoline
    // below, which catches panics. No other module option is declared (the mask is complete).
    unsafe {
        if events == MigrationEvents::Valkey {
            api!(RedisModule_SetModuleOptions)(ctx.0, OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION);
        }
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        api!(RedisModule_SubscribeToServerEvent)(ctx.0, event, Some(on_server_event));
    }
}

/// `INFO rlock`'s writer, valid during the info callback.
pub struct InfoWriter(*mut raw::RedisModuleInfoCtx);

impl InfoWriter {
    pub fn int(&mut self, field: &str, value: i64) {
        let field = std::ffi::CString::new(field).unwrap_or_default();
        // SAFETY: valid info ctx for the duration of the callback.
        unsafe { api!(RedisModule_InfoAddFieldLongLong)(self.0, field.as_ptr(), value) };
    }

    pub fn text(&mut self, field: &str, value: &str) {
        let field = std::ffi::CString::new(field).unwrap_or_default();
        let value = std::ffi::CString::new(value).unwrap_or_default();
        // SAFETY: valid info ctx; NUL-terminated strings.
        unsafe { api!(RedisModule_InfoAddFieldCString)(self.0, field.as_ptr(), value.as_ptr()) };
    }
}

/// The module's handlers of everything Redis calls back for (commands aside: see `command`).
pub struct Handlers {
    /// A keyspace event: class, event name, key, and whether rlock's own code raised it (its
    /// writes, or a key it opened expiring on the spot).
    pub keyspace: fn(Ctx, c_int, &[u8], RStr, bool),
    pub server_event: fn(Ctx, ServerEvent),
    /// The module's one timer fired.
    pub timer: fn(Ctx),
    /// A parked client is being answered (reply callback), with what it was woken with.
    pub woken: fn(Ctx, Option<&super::Wake>),
    /// `CLIENT UNBLOCK` of a parked client; must reply.
    pub unblocked: fn(Ctx, super::BlockedClient),
    /// The wake-up data of a parked client is freed (its reply was sent, or it was gone).
    pub freed: fn(super::Wake),
    /// A parked client's connection closed.
    pub disconnected: fn(Ctx, super::BlockedClient),
    /// Write the `INFO rlock` section's fields.
    pub info: fn(Ctx, &mut InfoWriter),
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

pub(super) fn handlers() -> &'static Handlers {
    HANDLERS.get().expect("rlock handlers installed at load")
}

/// Install the handlers and subscribe to the keyspace event `classes` and the server events
/// above. Called once, from the module's load function.
pub fn install(ctx: Ctx, h: Handlers, classes: c_int) {
    // A module reloaded into the same process finds its statics kept: the handlers are the same
    // functions, so keeping the first set is right.
    let _ = HANDLERS.set(h);
    // SAFETY: load runs on the main thread with a valid ctx; the callbacks are the extern "C"
    // trampolines below, which catch panics.
    unsafe {
        api!(RedisModule_RegisterInfoFunc)(ctx.0, Some(on_info));
        api!(RedisModule_SubscribeToKeyspaceEvents)(ctx.0, classes, Some(on_keyspace));
        for id in [
            raw::REDISMODULE_EVENT_FLUSHDB,
            raw::REDISMODULE_EVENT_SWAPDB,
            raw::REDISMODULE_EVENT_CLIENT_CHANGE,
            raw::REDISMODULE_EVENT_REPLICA_CHANGE,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            raw::REDISMODULE_EVENT_FORK_CHILD,
            raw::REDISMODULE_EVENT_CONFIG,
        ] {
            let event = raw::RedisModuleEvent { id, dataver: 1 };
            api!(RedisModule_SubscribeToServerEvent)(ctx.0, event, Some(on_server_event));
        }
    }
}

unsafe extern "C" fn on_keyspace(
    ctx: *mut RedisModuleCtx,
    class: c_int,
    event: *const c_char,
    key: *mut RedisModuleString,
) -> c_int {
    let event = if event.is_null() {
        &[][..]
    } else {
        // SAFETY: Redis passes a NUL-terminated event name valid for this call.
        unsafe { CStr::from_ptr(event) }.to_bytes()
    };
    // Decide `inside` before `guarded` sets it: an event raised by rlock's own writes arrives
    // while rlock is on the stack.
    let ours = inside();
    guarded(|| (handlers().keyspace)(Ctx(ctx), class, event, RStr(key), ours));
    raw::REDISMODULE_OK as c_int
}

unsafe extern "C" fn on_server_event(
    ctx: *mut RedisModuleCtx,
    event: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    // SAFETY: (each arm) Redis documents the data type of each event; it is valid for this call.
    let e = unsafe {
        match event.id {
            raw::REDISMODULE_EVENT_FLUSHDB if sub == raw::REDISMODULE_SUBEVENT_FLUSHDB_END => {
                let db = (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum;
                ServerEvent::Flushed((db >= 0).then_some(db))
            }
            raw::REDISMODULE_EVENT_SWAPDB => {
                let info = &*data.cast::<raw::RedisModuleSwapDbInfo>();
                ServerEvent::Swapped(info.dbnum_first, info.dbnum_second)
            }
            raw::REDISMODULE_EVENT_CLIENT_CHANGE
                if sub == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED
                    && !data.is_null() =>
            {
                ServerEvent::ClientClosing((*data.cast::<raw::RedisModuleClientInfo>()).id)
            }
            raw::REDISMODULE_EVENT_FORK_CHILD
                if sub == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN =>
            {
                ServerEvent::Forked
            }
            EVENT_CLUSTER_SLOT_MIGRATION
                if subscribed_to(MigrationEvents::Redis) && !data.is_null() && sub <= 5 =>
            {
                let info = &*data.cast::<RedisMigrationInfoV1>();
                let ranges = if info.slots.is_null() {
                    &[][..]
                } else {
                    let head = &*info.slots;
                    std::slice::from_raw_parts(
                        head.ranges.as_ptr(),
                        usize::try_from(head.num_ranges).unwrap_or(0),
                    )
                };
                let step = [
                    Migration::ImportStarted,
                    Migration::ImportAborted,
                    Migration::ImportCompleted,
                    Migration::ExportStarted,
                    Migration::ExportAborted,
                    Migration::ExportCompleted,
                ][sub as usize];
                let ranges = ranges.iter().map(|r| (r.start, r.end)).collect();
                ServerEvent::SlotMigration(step, ranges)
            }
            EVENT_ATOMIC_SLOT_MIGRATION
                if subscribed_to(MigrationEvents::Valkey) && !data.is_null() && sub <= 5 =>
            {
                let info = &*data.cast::<MigrationInfoV1>();
                let ranges = if info.slot_ranges.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(info.slot_ranges, info.num_slot_ranges as usize)
                };
                let step = [
                    Migration::ImportStarted,
                    Migration::ExportStarted,
                    Migration::ImportAborted,
                    Migration::ExportAborted,
                    Migration::ImportCompleted,
                    Migration::ExportCompleted,
                ][sub as usize];
                let ranges = ranges
                    .iter()
                    .filter_map(|r| {
                        Some((u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?))
                    })
                    .collect();
                ServerEvent::SlotMigration(step, ranges)
            }
            raw::REDISMODULE_EVENT_REPLICA_CHANGE => ServerEvent::ReplicasChanged,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => ServerEvent::RoleChanged,
            raw::REDISMODULE_EVENT_CONFIG if !data.is_null() => {
                let change = &*data.cast::<raw::RedisModuleConfigChangeV1>();
                let names = (0..change.num_changes as usize)
                    .map(|i| {
                        let p = *change.config_names.add(i);
                        if p.is_null() {
                            Vec::new()
                        } else {
                            CStr::from_ptr(p).to_bytes().to_vec()
                        }
                    })
                    .collect();
                ServerEvent::ConfigChanged(names)
            }
            _ => return,
        }
    };
    guarded(|| (handlers().server_event)(Ctx(ctx), e));
}

unsafe extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    guarded(|| {
        // SAFETY: valid info ctx for this callback; NULL names the section after the module.
        unsafe { api!(RedisModule_InfoAddSection)(ctx, std::ptr::null()) };
        (handlers().info)(Ctx(std::ptr::null_mut()), &mut InfoWriter(ctx));
    });
}

/// Whether the server runs jobs at the end of an execution unit (`RM_AddPostNotificationJob`:
/// Redis 7.2+, Valkey; not Redis 7.0).
pub fn has_post_jobs() -> bool {
    has!(RedisModule_AddPostNotificationJob)
}

/// Run `job` once the execution unit the server is in has ended: after the command, script or
/// MULTI/EXEC that raised the current keyspace event, after the active expiry or eviction of
/// one key, before any other command runs. Writes made there are propagated after the unit's
/// own, inside the same MULTI/EXEC (module.c, `firePostExecutionUnitJobs`, called from
/// `postExecutionUnitOperations` before `propagatePendingCommands`). False when the server has
/// no such jobs (Redis 7.0) or refuses one (while loading, or on a read-only replica).
pub fn after_unit(ctx: Ctx, job: fn(Ctx)) -> bool {
    if !has_post_jobs() {
        return false;
    }
    let pd = Box::into_raw(Box::new(job)).cast::<c_void>();
    // SAFETY: the API exists (checked above); `ctx` is the live context of the current callback,
    // which has a client (Redis reads its database). Redis calls `on_post_job` with `pd` once,
    // then `free_post_job`, which frees the box; on refusal it keeps neither, so we free it.
    let ok = unsafe {
        api!(RedisModule_AddPostNotificationJob)(ctx.0, Some(on_post_job), pd, Some(free_post_job))
            == raw::REDISMODULE_OK as c_int
    };
    if !ok {
        // SAFETY: refused, so Redis dropped `pd`: we still own the box made above.
        drop(unsafe { Box::from_raw(pd.cast::<fn(Ctx)>()) });
    }
    ok
}

unsafe extern "C" fn on_post_job(ctx: *mut RedisModuleCtx, pd: *mut c_void) {
    // SAFETY: `pd` is the `Box<fn(Ctx)>` made in `after_unit`, alive until `free_post_job`.
    let job = unsafe { *pd.cast::<fn(Ctx)>() };
    guarded(|| job(Ctx(ctx)));
}

unsafe extern "C" fn free_post_job(pd: *mut c_void) {
    // SAFETY: `pd` is the box made in `after_unit`; Redis frees each job's data once.
    drop(unsafe { Box::from_raw(pd.cast::<fn(Ctx)>()) });
}

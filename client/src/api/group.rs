//! The grouped multi-lock: [`GroupLock`] / [`AsyncGroupLock`] (Redisson 4.x's
//! `getMultiLock(group, values)`, `RedissonFasterMultiLock`): several values of one group
//! locked all or none, in one hash.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::forever;
use super::guard::{Guard, Held, Watch};
use super::style::CallStyle;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::field::FieldCodec;
use crate::ops::group::{self as op, Group};
use crate::owner::{Owner, OwnerPolicy};
use crate::transport::Io;
use crate::wait::Wait;

/// What both handles are: the client, the group, its values' field names, whose calls it makes.
#[derive(Clone)]
pub(crate) struct GroupCore {
    pub(crate) ctx: Arc<Context>,
    pub(crate) name: Arc<str>,
    /// Sorted, without duplicates (Redisson keeps a set).
    fields: Arc<[String]>,
    codec: FieldCodec,
    policy: OwnerPolicy,
    /// Shared by the handle's clones (see `LockCore::anchor`).
    anchor: Arc<()>,
}

impl GroupCore {
    /// The handle of `values` in `group`, each encoded by `codec` and hashed into its field
    /// name. No value, or one the codec can't encode, is refused.
    pub(crate) fn new<V: AsRef<[u8]>>(
        ctx: Arc<Context>,
        group: String,
        values: impl IntoIterator<Item = V>,
        codec: FieldCodec,
        policy: OwnerPolicy,
    ) -> Result<GroupCore> {
        let mut fields = values
            .into_iter()
            .map(|v| codec.field(v.as_ref()))
            .collect::<Result<Vec<String>>>()?;
        if fields.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the grouped multi-lock '{group}' needs at least one value"
            )));
        }
        fields.sort_unstable();
        fields.dedup();
        Ok(GroupCore {
            ctx,
            name: Arc::from(group),
            fields: fields.into(),
            codec,
            policy,
            anchor: Arc::new(()),
        })
    }

    fn target(&self, io: Io) -> Group<'_> {
        Group {
            ctx: &self.ctx,
            io,
            name: &self.name,
            fields: &self.fields,
            policy: &self.policy,
            anchor: &self.anchor,
        }
    }

    fn owner(&self) -> Owner {
        self.policy.resolve(&self.ctx.id)
    }

    async fn took(&self, io: Io, lease: Option<Duration>, wait: Wait) -> Result<bool> {
        let owner = self.owner();
        Ok(op::acquire(self.target(io), &owner, lease, wait)
            .await?
            .is_some())
    }

    async fn guard<M: CallStyle>(
        &self,
        io: Io,
        lease: Option<Duration>,
        wait: Wait,
    ) -> Result<Option<Guard<M>>> {
        let owner = self.owner();
        let Some(state) = op::acquire(self.target(io), &owner, lease, wait).await? else {
            return Ok(None);
        };
        let held = Arc::new(GroupHeld {
            core: self.clone(),
            owner,
        });
        Ok(Some(Guard::new(held, Watch::one(state))))
    }
}

/// One owner's hold of a group's values, as a guard gives it back.
struct GroupHeld {
    core: GroupCore,
    owner: Owner,
}

impl Held for GroupHeld {
    fn ctx(&self) -> &Arc<Context> {
        &self.core.ctx
    }

    fn name(&self) -> &str {
        &self.core.name
    }

    fn release(&self, io: Io) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            op::release(self.core.target(io), &self.owner).await?;
            Ok(())
        })
    }

    fn owner(&self) -> Option<&Owner> {
        Some(&self.owner)
    }
}

/// Several values of one group locked together, all or none, for blocking code: Redisson
/// 4.x's `getMultiLock(group, values)` (`RedissonFasterMultiLock`), in its layout, so a Java
/// service on Redisson shares it.
///
/// The group is one hash; each value is a field named by the value's hash (the value encoded
/// by a [`FieldCodec`], Redisson's default Kryo 5 codec unless told otherwise, then
/// HighwayHash-128 in Base64), holding its owner, with the owner's re-entry count and lease
/// end beside it. Values of one group that do not overlap are locked independently; a value
/// held by another owner makes the whole acquire wait (or fail, for `try_lock`). Re-entrant per
/// owner; without a lease the watchdog keeps every value alive until unlocked.
///
/// With the module the commands are `RMLOCK.*` (waits queue on the server, first come first
/// served per value); over Redisson's protocol, Redisson's scripts, waiting on the group's
/// lock channel (`redisson_lock__channel:{group}`) and retrying when a message comes or the
/// holders' leases end.
///
/// Differences from Redisson: [`is_held_by`](GroupLock::is_held_by) checks every value
/// (Redisson's script skips the first one); the hold count and remaining time are not offered
/// (Redisson throws `UnsupportedOperationException` for them).
///
/// ```no_run
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let class = client.group_lock("class_100", ["Jack_001", "Mary_002"])?;
/// class.lock()?;
/// // ... both students are ours ...
/// class.unlock()?;
/// let _g = class.guard()?;
/// # Ok::<(), rlock_client::Error>(())
/// ```
#[derive(Clone)]
pub struct GroupLock {
    pub(crate) core: GroupCore,
}

/// The async form of [`GroupLock`] (Redisson's `RedissonFasterMultiLock` through
/// `RLockAsync`): owners are tasks (see [`AsyncLock`](crate::AsyncLock)).
///
/// ```no_run
/// # async fn demo() -> rlock_client::Result<()> {
/// let client = rlock_client::Client::open("redis://127.0.0.1:6390/")?;
/// let class = client.async_group_lock("class_100", ["Jack_001", "Mary_002"])?;
/// let g = class.guard().await?;
/// g.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncGroupLock {
    pub(crate) core: GroupCore,
}

macro_rules! group_common {
    ($($T:ident = $policy:expr),*) => {$(
        impl fmt::Debug for $T {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($T))
                    .field("group", &self.core.name)
                    .field("fields", &self.core.fields)
                    .field("codec", &self.core.codec)
                    .finish_non_exhaustive()
            }
        }

        impl $T {
            pub(crate) fn new<V: AsRef<[u8]>>(
                ctx: Arc<Context>,
                group: String,
                values: impl IntoIterator<Item = V>,
                codec: FieldCodec,
            ) -> Result<$T> {
                Ok($T {
                    core: GroupCore::new(ctx, group, values, codec, $policy)?,
                })
            }

            /// The group's name (its Redis key).
            pub fn name(&self) -> &str {
                &self.core.name
            }

            /// The values' field names in the group's hash (sorted, duplicates once).
            pub fn fields(&self) -> &[String] {
                &self.core.fields
            }

            /// The codec the values were encoded with.
            pub fn codec(&self) -> FieldCodec {
                self.core.codec
            }

            /// This handle acting as `owner` in every call (see
            /// [`Lock::with_owner`](crate::Lock::with_owner)).
            pub fn with_owner(mut self, owner: Owner) -> $T {
                self.core.ctx.holds.lock().adopt(owner.as_str());
                self.core.policy = OwnerPolicy::Fixed(owner);
                self
            }

            /// The owner this handle acts as in the calling thread (sync) or task (async).
            pub fn owner(&self) -> Owner {
                self.core.owner()
            }

            /// Whether the calling owner's current hold was reported gone by the server or
            /// found gone by the watchdog (see [`Lock::is_lost`](crate::Lock::is_lost)).
            pub fn is_lost(&self) -> bool {
                op::is_lost(self.core.target(Io::Async), &self.core.owner())
            }
        }
    )*};
}

group_common!(
    GroupLock = OwnerPolicy::Thread,
    AsyncGroupLock = OwnerPolicy::Task
);

twins! {
    GroupLock, AsyncGroupLock, io = io, style = M;

    /// Release one hold of the calling owner on every value; at the last one the values free
    /// (and Redisson's waiters are told). [`Error::NotOwner`](crate::Error::NotOwner) when one
    /// value is not the owner's.
    fn unlock(&self) -> Result<()> {
        op::release(self.core.target(io), &self.core.owner()).await.map(drop)
    }

    /// Free every value whoever holds it: `true` if one was held.
    fn force_unlock(&self) -> Result<bool> {
        op::force_release(self.core.target(io)).await
    }

    /// Whether any value is held by someone whose lease has not ended (Redisson's `isLocked`).
    fn is_locked(&self) -> Result<bool> {
        op::is_locked(self.core.target(io)).await
    }

    /// Whether `owner` holds every value.
    fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        op::is_held_by(self.core.target(io), owner).await
    }
}

lock_api!(GroupLock, AsyncGroupLock);

impl GroupLock {
    /// Whether the calling thread holds every value (Redisson's `isHeldByCurrentThread`).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.is_held_by(&self.owner())
    }
}

impl AsyncGroupLock {
    /// Whether the calling task's owner holds every value.
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        self.is_held_by(&self.owner()).await
    }
}

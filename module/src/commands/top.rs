//! `RLOCK.TOP [WAITS|HELD|HANDOFFS] [COUNT n]`: what an operator on call runs first, for every
//! kind of object at once. WAITS and HANDOFFS rank the keys of this node with the most waits
//! started, or hand-offs made, over the recent window (`observe`'s sketches: counts with their
//! error bound); HELD lists the longest-held live holds with their owner, age and lease. Each
//! row tells how many wait on its key now.
//!
//! Only keys the caller may read are shown, as `RLOCK.INFO` shows a key's holder and queue only
//! to those who may read the key: a user limited by key patterns sees its own objects.

use crate::core::decision::Reply;
use crate::core::error::CmdError;
use crate::core::observe::top_query::{self, Report};
use crate::core::stats::ObjectKind;
use crate::ffi::command::{ArgKind::*, ArgSpec, CommandSpec, KeyAccess};
use crate::ffi::{Answer, Args, Ctx};
use crate::{observe, wait};

/// `RLOCK.TOP [WAITS|HELD|HANDOFFS] [COUNT n]`
pub fn top(ctx: Ctx, args: &Args) -> Result<Answer, CmdError> {
    let t = top_query::parse(&args.bytes())?;
    let visible = |key: &[u8]| ctx.may_read_key(key);
    let rows = match t.report {
        Report::Waits | Report::Handoffs => {
            let handoffs = t.report == Report::Handoffs;
            observe::contended(handoffs, t.count, |(id, _)| visible(&id.key))
                .into_iter()
                .map(|((id, kind), c)| {
                    Reply::Map(vec![
                        ("key", Reply::Bulk(id.key.to_vec())),
                        ("db", Reply::Int(id.db.into())),
                        ("kind", Reply::Bulk(kind.name().into())),
                        ("count", Reply::Int(c.count as i64)),
                        ("error", Reply::Int(c.error as i64)),
                        ("waiters", waiters(id.db, &id.key)),
                    ])
                })
                .collect()
        }
        Report::Held => observe::held(ctx, t.count, visible)
            .into_iter()
            .map(|row| {
                let h = row.held;
                let mode = match (h.kind, h.exclusive) {
                    (ObjectKind::RwLock, true) => "write",
                    (ObjectKind::RwLock, false) => "read",
                    _ => "exclusive",
                };
                Reply::Map(vec![
                    ("key", Reply::Bulk(h.key.clone())),
                    ("db", Reply::Int(h.db.into())),
                    ("kind", Reply::Bulk(h.kind.name().into())),
                    ("mode", Reply::Bulk(mode.into())),
                    ("owner", Reply::Bulk(h.owner)),
                    ("age_ms", Reply::Int(row.age_ms)),
                    ("ttl_ms", Reply::Int(row.ttl_ms)),
                    ("waiters", waiters(h.db, &h.key)),
                ])
            })
            .collect(),
    };
    Ok(Answer::Reply(Reply::Array(rows)))
}

fn waiters(db: i32, key: &[u8]) -> Reply {
    Reply::Int(wait::queue_len(db, key) as i64)
}

/// This file's rows of the command table (see `super::TABLES`).
pub static COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: c"rlock.top",
        handler: top,
        flags: c"readonly",
        acl: c"read slow",
        summary: c"Lists, for every kind of object on this node, the keys with the most waits (WAITS, the default) or hand-offs (HANDOFFS) over the last one to two minutes, or the longest-held live holds (HELD) with owner, age, lease and waiters; only keys the caller may read",
        complexity: c"O(N) where N is COUNT, plus for HELD the holds found ended or hidden from the caller",
        arity: -1,
        key: KeyAccess::None,
        args: &[
            ArgSpec {
                optional: true,
                subargs: &[
                    ArgSpec::word(c"waits", c"WAITS"),
                    ArgSpec::word(c"held", c"HELD"),
                    ArgSpec::word(c"handoffs", c"HANDOFFS"),
                ],
                ..ArgSpec::new(c"report", OneOf)
            },
            ArgSpec::option(c"count", Integer, c"COUNT"),
        ],
    },
];

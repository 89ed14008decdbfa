use super::*;
use super::{layout::*, parse::*, rules::*, waiting::*};
use crate::core::args::{self, WaitArgs};
use crate::core::decision::{Reply, Write};
use crate::core::error::CmdError;
use crate::core::mem::Mem;
use crate::core::store::{Store, Target};
use crate::core::wait::{serve, KeyId, Outcome, Queues, Req, Waiter};
use crate::core::wait::{Request, TryGrant};
use std::borrow::Cow;

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
                wait: args::WaitMode::Block(0),
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
        let req: Req = std::rc::Rc::new(RwLockRequest {
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
    let w = RwLockRequest {
        owner: b"a".as_slice().into(),
        mode: Mode::Read,
        lease_ms: 100,
    };
    let TryGrant::Grant(d) = w.try_grant(&m) else {
        panic!()
    };
    m.apply_ok(&d);
    let undo = w.undo(&Reply::Int(1), &m).unwrap();
    m.apply_ok(&undo);
    assert!(!m.exists(b"rw"));
    assert!(!m.exists(b"{rw}:a:rwlock_timeout:1"));
}

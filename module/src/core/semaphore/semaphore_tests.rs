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
        parse_release(&argv(&["rsem.release", "s", "xx"])),
        Ok(Release::PermitsIfExists(1))
    );
    assert_eq!(
        parse_release(&argv(&["rsem.release", "s", "XX", "PERMITS", "3"])),
        Ok(Release::PermitsIfExists(3))
    );
    assert_eq!(
        parse_release(&argv(&["rsem.release", "s", "XX", "XX"])),
        Err(CmdError::Syntax("XX given twice".into()))
    );
    assert_eq!(
        parse_set_permits(&argv(&["rsem.setpermits", "s", "-2"])),
        Ok(-2)
    );
    assert_eq!(
        parse_set_permits(&argv(&["rsem.setpermits", "s"])),
        Err(CmdError::Arity("rsem.setpermits"))
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
        Ok((0, None))
    );
    assert_eq!(
        parse_try_set(&argv(&["rsem.trysetpermits", "s", "2", "px", "500"])),
        Ok((2, Some(500)))
    );
    assert_eq!(
        parse_try_set(&argv(&["rsem.trysetpermits", "s", "2", "PX", "0"])),
        Err(CmdError::TooSmall("ttl_ms", 1))
    );
    assert_eq!(
        parse_try_set(&argv(&["rsem.trysetpermits", "s", "2", "PX"])),
        Err(CmdError::Arity("rsem.trysetpermits"))
    );
    assert_eq!(
        parse_try_set(&argv(&["rsem.trysetpermits", "s", "2", "EX", "5"])),
        Err(CmdError::unknown_option(b"EX"))
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

#[test]
fn nolease_is_a_flag_apart_from_lease() {
    assert_eq!(
        parse_acquire(&argv(&["rsem.acquire", "s", "PERMITS", "2", "nolease"])),
        Ok(AcquireArgs {
            permits: 2,
            lease_ms: Some(NO_LEASE),
            wait: WaitArgs::new()
        })
    );
    let both = CmdError::Syntax("LEASE and NOLEASE exclude each other".into());
    for words in [
        ["rsem.acquire", "s", "NOLEASE", "LEASE", "5"],
        ["rsem.acquire", "s", "LEASE", "5", "NOLEASE"],
    ] {
        assert_eq!(parse_acquire(&argv(&words)), Err(both.clone()));
    }
    assert_eq!(
        parse_acquire(&argv(&["rsem.acquire", "s", "NOLEASE", "NOLEASE"])),
        Err(CmdError::Syntax("NOLEASE given twice".into()))
    );
    // LEASE 0 and LEASE -1 stay errors: no computed lease can ask for a permit without an end.
    for ms in ["0", "-1"] {
        assert_eq!(
            parse_acquire(&argv(&["rsem.acquire", "s", "LEASE", ms])),
            Err(CmdError::LeaseTooSmall)
        );
    }
    assert_eq!(
        parse_acquire(&argv(&[
            "rsem.acquire",
            "s",
            "PERMITS",
            "100001",
            "NOLEASE"
        ])),
        Err(CmdError::TooLarge("permits with NOLEASE", MAX_LEASED))
    );
}

#[test]
fn a_permit_without_a_lease_is_scored_as_redissons_and_never_ends() {
    let mut m = Mem::new(b"s");
    m.apply_ok(&try_set(&m, 3).unwrap());
    let ids = ids_of(&take(&mut m, 2, Some(NO_LEASE)));
    assert_eq!(ids.len(), 2);
    assert_eq!(count_of(&m), 1);
    let z = m.zset(b"{s}:timeout");
    for id in &ids {
        assert_eq!(z.get(id.as_slice()), Some(&(PERMANENT as f64)));
    }
    m.now += 10_000_000_000;
    assert!(reclaim(&m).unwrap().writes.is_empty(), "never reclaimed");
    assert_eq!(available(&m), Ok(1));
    assert_eq!(SemaphoreObject.wake_at(&m), None, "no timer for it");
    // Released by id like a leased one.
    assert_eq!(
        m.apply_ok(&release_ids(&m, &ids[..1]).unwrap()),
        Reply::Int(2)
    );
    // Renewing gives it a lease, as Redisson's updateLeaseTime does; then it ends.
    assert_eq!(
        m.apply_ok(&renew(&m, 500, &ids[1..]).unwrap()),
        Reply::Int(1)
    );
    assert_eq!(
        m.zset(b"{s}:timeout").get(ids[1].as_slice()),
        Some(&((m.now + 500) as f64))
    );
    assert_eq!(SemaphoreObject.wake_at(&m), Some(m.now + 500));
    m.now += 500;
    m.apply_ok(&reclaim(&m).unwrap());
    assert_eq!(count_of(&m), 3);
    // Queued, it shows -1 (RSEM.INFO's queue) and its grant has ids without an end.
    let w = SemaphoreRequest {
        permits: 1,
        lease_ms: Some(NO_LEASE),
    };
    assert_eq!(w.show(), Reply::Array(vec![Reply::Int(1), Reply::Int(-1)]));
    let TryGrant::Grant(d) = w.try_grant(&m) else {
        panic!()
    };
    let granted = ids_of(&m.apply_ok(&d));
    assert_eq!(
        m.zset(b"{s}:timeout").get(granted[0].as_slice()),
        Some(&(PERMANENT as f64))
    );
    assert_eq!(w.aux_keys(&m), vec![b"{s}:timeout".to_vec()]);
    // Undone (its waiter gone before the reply), it comes back.
    m.apply_ok(
        &w.undo(&Reply::Array(vec![Reply::Bulk(hex(&granted[0]))]), &m)
            .unwrap(),
    );
    assert_eq!(count_of(&m), 3);
}

#[test]
fn try_set_with_a_ttl_sets_an_absent_count_that_expires() {
    let mut m = Mem::new(b"s");
    assert_eq!(m.apply_ok(&try_set_for(&m, 2, 700).unwrap()), Reply::Int(1));
    assert_eq!(count_of(&m), 2);
    assert_eq!(m.ttl(b"s"), Some(700));
    // Already there: nothing changes, its TTL neither.
    let again = try_set_for(&m, 5, 60_000).unwrap();
    assert!(again.writes.is_empty());
    assert_eq!(m.apply_ok(&again), Reply::Int(0));
    assert_eq!((count_of(&m), m.ttl(b"s")), (2, Some(700)));
    assert_eq!(
        try_set_for(&m, 1, i64::MAX).err(),
        Some(CmdError::OutOfRange("ttl_ms"))
    );
}

#[test]
fn set_permits_moves_the_available_count_to_make_the_total() {
    let mut m = Mem::new(b"s");
    assert!(!exists(&m).unwrap());
    // Absent: the count is set (Redisson's script SETs it).
    assert_eq!(m.apply_ok(&set_permits(&m, 3).unwrap()), Reply::Int(3));
    assert!(exists(&m).unwrap());
    let leased = ids_of(&take(&mut m, 2, Some(60_000)));
    assert_eq!((count_of(&m), leased.len()), (1, 2));
    // Total 3 already (1 available + 2 leased): nothing written.
    assert!(set_permits(&m, 3).unwrap().writes.is_empty());
    // Total 5: two more available.
    assert_eq!(m.apply_ok(&set_permits(&m, 5).unwrap()), Reply::Int(3));
    // Total 1 while 2 are leased: the available count goes negative.
    assert_eq!(m.apply_ok(&set_permits(&m, 1).unwrap()), Reply::Int(-1));
    assert_eq!(count_of(&m), -1);
    assert_eq!(set_permits(&m, i64::MIN), Err(CmdError::PermitsOverflow));
}

#[test]
fn lease_time_tells_the_ms_left_minus_one_without_an_end_and_nil_when_not_leased() {
    let mut m = Mem::new(b"s");
    let unknown = parse_id(b"00112233445566778899aabbccddeeff").unwrap();
    assert_eq!(lease_time(&m, &unknown), Ok(Reply::Nil), "absent");
    m.apply_ok(&try_set(&m, 3).unwrap());
    let leased = ids_of(&take(&mut m, 1, Some(5_000)))[0];
    let endless = ids_of(&take(&mut m, 1, Some(NO_LEASE)))[0];
    assert_eq!(lease_time(&m, &leased), Ok(Reply::Int(5_000)));
    assert_eq!(lease_time(&m, &endless), Ok(Reply::Int(-1)));
    assert_eq!(lease_time(&m, &unknown), Ok(Reply::Nil));
    m.now += 5_000;
    assert_eq!(lease_time(&m, &leased), Ok(Reply::Nil), "ended");
    assert_eq!(lease_time(&m, &endless), Ok(Reply::Int(-1)));
    assert_eq!(
        parse_lease_time(&argv(&["rsem.leasetime", "s", "zz"])),
        Err(CmdError::BadPermitId)
    );
}

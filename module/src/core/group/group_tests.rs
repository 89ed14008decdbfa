use super::*;
use crate::core::mem::Mem;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn v(args: &[&'static str]) -> Vec<&'static [u8]> {
    args.iter().map(|s| s.as_bytes()).collect()
}

fn grant(m: &mut Mem, owner: &'static [u8], lease: i64, fields: &[&'static str]) -> bool {
    match acquire(m, owner, lease, &v(fields), false).unwrap() {
        Acquire::Grant(d, _) => {
            assert_eq!(m.apply_ok(&d), Reply::Int(1));
            true
        }
        Acquire::Busy => false,
    }
}

fn hash(m: &Mem) -> BTreeMap<String, String> {
    m.hash(b"g")
        .into_iter()
        .map(|(f, v)| (String::from_utf8(f).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

#[test]
fn parsing() {
    let a = parse_acquire(&v(&[
        "rmlock.acquire",
        "g",
        "o",
        "100",
        "fields",
        "3",
        "a",
        "b",
        "a",
        "BLOCK",
        "5",
    ]))
    .unwrap();
    assert_eq!(a.fields, v(&["a", "b"]), "a duplicate is one value");
    assert_eq!(a.lease_ms, 100);
    assert_eq!(a.wait.wait, crate::core::args::WaitMode::Block(5));
    let e = |args: &[&'static str]| parse_acquire(&v(args)).unwrap_err();
    assert_eq!(
        e(&["rmlock.acquire", "g", "o", "1", "FIELDS", "0", "a"]),
        CmdError::TooSmall("FIELDS count", 1)
    );
    assert_eq!(
        e(&["rmlock.acquire", "g", "o", "1", "FIELDS", "x", "a"]),
        CmdError::NotInteger("FIELDS count")
    );
    assert!(matches!(
        e(&["rmlock.acquire", "g", "o", "1", "FIELDS", "3", "a"]),
        CmdError::Syntax(s) if s.contains("FIELDS count is 3")
    ));
    assert!(matches!(
        e(&["rmlock.acquire", "g", "o", "1", "FELDS", "1", "a"]),
        CmdError::Syntax(s) if s.contains("expected FIELDS")
    ));
    assert_eq!(
        e(&["rmlock.acquire", "g", "o", "1", "FIELDS", "1"]),
        CmdError::Arity("rmlock.acquire")
    );
    assert_eq!(
        e(&["rmlock.acquire", "g", "o", "1", "FIELDS", "1", "a", "NX"]),
        CmdError::unknown_option(b"NX")
    );
    assert!(matches!(
        parse_owned(&v(&["rmlock.release", "g", "o", "1", "FIELDS", "1", "a", "b"]), "rmlock.release"),
        Err(CmdError::Syntax(s)) if s.contains("after the fields")
    ));
    assert_eq!(
        parse_unowned(
            &v(&["rmlock.info", "g", "FIELDS", "2", "a", "b"]),
            "rmlock.info"
        ),
        Ok(v(&["a", "b"]))
    );
}

#[test]
fn redisson_layout_and_reentry() {
    let mut m = Mem::new(b"g");
    let at = m.now + 100;
    assert!(grant(&mut m, b"o1", 100, &["a", "b"]));
    let want: BTreeMap<String, String> = [
        ("a", "o1"),
        ("a:o1:expire_time", &*at.to_string()),
        ("a:o1:lock_count", "1"),
        ("b", "o1"),
        ("b:o1:expire_time", &*at.to_string()),
        ("b:o1:lock_count", "1"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(hash(&m), want);
    assert_eq!(m.ttl(b"g"), Some(100));
    // Re-entry with a shorter lease keeps the longer end; a longer one raises it and the TTL.
    assert!(grant(&mut m, b"o1", 50, &["a"]));
    assert_eq!(hash(&m)["a:o1:lock_count"], "2");
    assert_eq!(hash(&m)["a:o1:expire_time"], at.to_string());
    assert_eq!(m.ttl(b"g"), Some(100));
    assert!(grant(&mut m, b"o1", 300, &["a"]));
    assert_eq!(hash(&m)["a:o1:expire_time"], (m.now + 300).to_string());
    assert_eq!(m.ttl(b"g"), Some(300));
}

#[test]
fn all_or_none() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["b"]));
    let before = hash(&m);
    assert!(!grant(&mut m, b"o2", 100, &["a", "b"]));
    assert_eq!(hash(&m), before, "a refused acquire writes nothing");
    assert!(grant(&mut m, b"o2", 100, &["a", "c"]), "disjoint values");
}

#[test]
fn expired_holder_is_free_and_tidied() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert!(grant(&mut m, b"o1", 1_000, &["b"]));
    m.now += 100;
    // `a`'s lease ended while the hash lives on for `b`.
    assert_eq!(
        value(&m, b"a", None),
        Value::Free {
            stale: Some(b"o1".to_vec())
        }
    );
    assert!(grant(&mut m, b"o2", 100, &["a"]));
    let h = hash(&m);
    assert_eq!(h["a"], "o2");
    assert!(!h.contains_key("a:o1:expire_time") && !h.contains_key("a:o1:lock_count"));
    // The lapsed holder cannot release or renew it.
    let r = release(&m, b"o1", 100, &v(&["a"])).unwrap();
    assert_eq!(r.decision, Decision::reply(Reply::Nil));
    assert_eq!(
        renew(&m, b"o1", 100, &v(&["a", "b"])).unwrap().reply,
        Some(Reply::Int(0))
    );
}

#[test]
fn own_lapsed_hold_starts_again() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    m.hset(b"g", b"keep", b"x"); // the hash outlives the lease
    m.set_expire(b"g", m.now + 10_000);
    m.now += 100;
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert_eq!(hash(&m)["a:o1:lock_count"], "1");
}

#[test]
fn release_all_or_nothing() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a", "b"]));
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert!(grant(&mut m, b"o2", 100, &["c"]));
    // One field not the owner's: nothing is written.
    let r = release(&m, b"o1", 100, &v(&["a", "c"])).unwrap();
    assert_eq!(r.decision, Decision::reply(Reply::Nil));
    let r = release(&m, b"o1", 500, &v(&["a", "b"])).unwrap();
    assert_eq!((r.freed, r.none_left), (1, false));
    assert_eq!(m.apply_ok(&r.decision), Reply::Int(0), "a is still held");
    let h = hash(&m);
    assert_eq!(h["a:o1:lock_count"], "1");
    assert_eq!(h["a:o1:expire_time"], (m.now + 500).to_string());
    assert!(!h.contains_key("b"));
    assert_eq!(
        m.published,
        vec![(b"redisson_lock__channel:{g}".to_vec(), 0)]
    );
    let r = release(&m, b"o1", 500, &v(&["a"])).unwrap();
    assert_eq!((r.freed, r.none_left), (1, true));
    assert_eq!(m.apply_ok(&r.decision), Reply::Int(1));
    assert_eq!(
        hash(&m).keys().collect::<Vec<_>>(),
        ["c", "c:o2:expire_time", "c:o2:lock_count"]
    );
    let r = release(&m, b"o2", 500, &v(&["c"])).unwrap();
    assert_eq!(r.decision.writes[0], Write::Del { key: Target::Main });
    m.apply_ok(&r.decision);
    assert!(!m.exists(b"g"));
}

#[test]
fn renew_and_force_release() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a", "b"]));
    let d = renew(&m, b"o1", 1_000, &v(&["a", "b"])).unwrap();
    assert_eq!(m.apply_ok(&d), Reply::Int(1));
    assert_eq!(hash(&m)["b:o1:expire_time"], (m.now + 1_000).to_string());
    assert_eq!(m.ttl(b"g"), Some(1_000));
    assert_eq!(
        renew(&m, b"o2", 1_000, &v(&["a"])).unwrap(),
        Decision::reply(Reply::Int(0))
    );
    assert!(grant(&mut m, b"o2", 100, &["c"]));
    let d = force_release(&m, &v(&["a", "x"])).unwrap();
    assert_eq!(m.apply_ok(&d), Reply::Int(1));
    assert!(!hash(&m).contains_key("a:o1:lock_count"));
    let d = force_release(&m, &v(&["b", "c"])).unwrap();
    assert_eq!(m.apply_ok(&d), Reply::Int(2));
    assert!(!m.exists(b"g"));
    assert_eq!(
        force_release(&m, &v(&["a"])).unwrap(),
        Decision::reply(Reply::Int(0))
    );
}

#[test]
fn info_rows() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert!(grant(&mut m, b"o1", 1_000, &["b"]));
    m.now += 100;
    let at = m.now + 900;
    assert_eq!(
        info(&m, &v(&["a", "b", "c"])).unwrap(),
        Reply::Array(vec![
            Reply::Array(vec![
                Reply::Bulk(b"a".to_vec()),
                Reply::Nil,
                Reply::Int(0),
                Reply::Nil
            ]),
            Reply::Array(vec![
                Reply::Bulk(b"b".to_vec()),
                Reply::Bulk(b"o1".to_vec()),
                Reply::Int(1),
                Reply::Int(at)
            ]),
            Reply::Array(vec![
                Reply::Bulk(b"c".to_vec()),
                Reply::Nil,
                Reply::Int(0),
                Reply::Nil
            ]),
        ])
    );
}

#[test]
fn wrong_types() {
    let mut m = Mem::new(b"g");
    m.set_str(b"g", b"x");
    assert_eq!(
        acquire(&m, b"o", 1, &v(&["a"]), false),
        Err(CmdError::WrongType)
    );
    assert_eq!(info(&m, &v(&["a"])), Err(CmdError::WrongType));
    let mut m = Mem::new(b"g");
    m.hset(b"g", b"mode", b"read");
    assert_eq!(force_release(&m, &v(&["a"])), Err(CmdError::WrongType));
    // A lock's hash (its owner's field, the hold count): not a group's.
    let mut m = Mem::new(b"g");
    m.hset(b"g", b"uuid-1:7", b"2");
    assert_eq!(
        acquire(&m, b"o", 1, &v(&["a"]), false),
        Err(CmdError::WrongType)
    );
    // A group left with only a lapsed holder's two fields is still a group's.
    let mut m = Mem::new(b"g");
    m.hset(b"g", b"a:old:1:expire_time", b"5");
    m.hset(b"g", b"a:old:1:lock_count", b"1");
    assert!(grant(&mut m, b"o", 100, &["a"]));
}

#[test]
fn wake_at_is_the_first_live_lease_end() {
    let mut m = Mem::new(b"g");
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert!(grant(&mut m, b"o2", 1_000, &["b"]));
    assert_eq!(GroupObject.wake_at(&m), Some(m.now + 100));
    assert_eq!(
        GroupObject.held_until(b"o2", true, &m),
        Some(Some(m.now + 1_000))
    );
    m.now += 100;
    assert_eq!(GroupObject.wake_at(&m), Some(m.now + 900));
    assert_eq!(GroupObject.held_until(b"o1", true, &m), None);
}

#[test]
fn walk_hands_off_per_value() {
    let q: Vec<Vec<&[u8]>> = vec![v(&["a", "b"]), v(&["a"]), v(&["c"]), v(&["b"])];
    let slices: Vec<&[&[u8]]> = q.iter().map(|w| &w[..]).collect();
    // b held: the first waits and claims a; the second may not overtake it on a; c passes.
    let free = |x: &[u8]| x != b"b";
    assert_eq!(walk(slices.iter().copied(), free, None), vec![2]);
    // All free: the first takes a and b, the third takes c; the others wait for the first.
    assert_eq!(walk(slices.iter().copied(), |_| true, None), vec![0, 2]);
    // Only a was freed: the walk stops at the first waiter, which claimed it.
    assert_eq!(
        walk(slices.iter().copied(), |_| true, Some(&v(&["a"]))),
        vec![0]
    );
}

proptest! {
    /// Never two holders of one value, and FIFO per value: a granted waiter has no waiter
    /// before it wanting one of its values (granted ones hold theirs; waiting ones claim them).
    #[test]
    fn walk_never_double_grants(
        q in prop::collection::vec(prop::collection::btree_set(0u8..6, 1..4), 0..12),
        held in prop::collection::btree_set(0u8..6, 0..6),
    ) {
        let q: Vec<Vec<[u8; 1]>> = q.iter().map(|s| s.iter().map(|x| [*x]).collect()).collect();
        let granted = walk(q.iter().map(|w| &w[..]), |x| !held.contains(&x[0]), None);
        let mut taken = std::collections::BTreeSet::new();
        for (i, w) in q.iter().enumerate() {
            let before: std::collections::BTreeSet<u8> =
                q[..i].iter().flatten().map(|x| x[0]).collect();
            if granted.contains(&i) {
                for x in w {
                    prop_assert!(!held.contains(&x[0]));
                    prop_assert!(!before.contains(&x[0]), "FIFO per value");
                    prop_assert!(taken.insert(x[0]), "two holders of one value");
                }
            } else {
                // Not granted: some value of it is held or wanted by someone before it.
                prop_assert!(w.iter().any(|x| held.contains(&x[0]) || before.contains(&x[0])));
            }
        }
    }
}

/// Queue group requests (as the skin does when they find values held), then release holds one
/// by one and serve through the shared serving loop over the in-memory store.
fn queue(queues: &mut crate::core::wait::Queues<u32, Req>, h: u32, owner: &str, fields: &[u8]) {
    let req: Req = std::rc::Rc::new(GroupRequest {
        owner: owner.as_bytes().into(),
        lease_ms: 1_000,
        fields: fields.iter().map(|f| vec![*f].into_boxed_slice()).collect(),
    });
    let waiter = crate::core::wait::Waiter {
        handle: h,
        serial: h as u64,
        req,
        deadline: None,
        queued_us: 0,
    };
    queues.push(&crate::core::wait::KeyId::new(0, b"g"), waiter);
}

fn granted(served: crate::core::wait::Served<u32>) -> Vec<u32> {
    served
        .outcomes
        .into_iter()
        .map(|o| match o {
            crate::core::wait::Outcome::Granted { waiter, .. } => waiter.handle,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn serving_hands_off_per_value_past_a_waiting_head() {
    use crate::core::wait::{serve, KeyId, Queues};
    let mut m = Mem::new(b"g");
    let mut q: Queues<u32, Req> = Queues::default();
    let id = KeyId::new(0, b"g");
    assert!(grant(&mut m, b"h", 1_000, &["a", "b"]));
    queue(&mut q, 1, "w1", b"ab"); // waits for a and b
    queue(&mut q, 2, "w2", b"a"); // may not overtake w1 on a
    queue(&mut q, 3, "w3", b"c"); // c is free: disjoint, granted past them
    assert_eq!(granted(serve(&mut q, &id, &mut m)), vec![3]);
    // b alone freed: w1 still waits for a, w2 for w1.
    let d = force_release(&m, &v(&["b"])).unwrap();
    m.apply_ok(&d);
    q.freed(&id, [&b"b"[..]]);
    assert_eq!(granted(serve(&mut q, &id, &mut m)), Vec::<u32>::new());
    let d = force_release(&m, &v(&["a"])).unwrap();
    m.apply_ok(&d);
    q.freed(&id, [&b"a"[..]]);
    assert_eq!(granted(serve(&mut q, &id, &mut m)), vec![1]);
    let r = release(&m, b"w1", 1_000, &v(&["a", "b"])).unwrap();
    m.apply_ok(&r.decision);
    q.freed(&id, v(&["a", "b"]));
    assert_eq!(granted(serve(&mut q, &id, &mut m)), vec![2]);
    assert!(q.get(&id).is_none_or(|q| q.is_empty()));
}

proptest! {
    /// Through the real serving loop: never two live holders of one value, every grant made
    /// to a waiter with no earlier waiter still queued for one of its values, and nobody left
    /// waiting for values all free once serving is done.
    #[test]
    fn serving_never_double_grants(
        waits in prop::collection::vec(prop::collection::btree_set(0u8..5, 1..4), 1..10),
        frees in prop::collection::vec(0u8..5, 0..8),
    ) {
        use crate::core::wait::{serve, KeyId, Queues};
        let mut m = Mem::new(b"g");
        let mut q: Queues<u32, Req> = Queues::default();
        let id = KeyId::new(0, b"g");
        let all: Vec<&'static str> = vec!["\0", "\x01", "\x02", "\x03", "\x04"];
        assert!(grant(&mut m, b"h", 1_000_000, &all));
        let want: Vec<Vec<u8>> = waits.iter().map(|s| s.iter().copied().collect()).collect();
        for (i, w) in want.iter().enumerate() {
            queue(&mut q, i as u32, &format!("w{i}"), w);
        }
        let mut holders: BTreeMap<u8, u32> = BTreeMap::new();
        for f in frees {
            let field = [f];
            if let Some(holder) = m.hash(b"g").get(&field[..]).cloned() {
                if holder == b"h" {
                    let d = force_release(&m, &[&field[..]]).unwrap();
                    m.apply_ok(&d);
                    q.freed(&id, [&field[..]]);
                } else {
                    // A waiter holds it: it gives all its values back.
                    let h: u32 = std::str::from_utf8(&holder[1..]).unwrap().parse().unwrap();
                    let fields: Vec<&[u8]> = want[h as usize].iter().map(std::slice::from_ref).collect();
                    let r = release(&m, &holder, 1_000, &fields).unwrap();
                    prop_assert_eq!(m.apply_ok(&r.decision), Reply::Int(1));
                    q.freed(&id, fields.iter().copied());
                    for x in &want[h as usize] { holders.remove(x); }
                }
            }
            let before: Vec<u32> = q.get(&id).map(|q| q.iter().map(|w| w.handle).collect()).unwrap_or_default();
            for h in granted(serve(&mut q, &id, &mut m)) {
                for x in &want[h as usize] {
                    prop_assert!(holders.insert(*x, h).is_none(), "two holders of {}", x);
                }
                // FIFO per value: no waiter queued before it (and still queued) wants its values.
                for e in before.iter().take_while(|e| **e != h) {
                    let still = q.get(&id).is_some_and(|q| q.iter().any(|w| w.handle == *e));
                    if still {
                        prop_assert!(want[*e as usize].iter().all(|x| !want[h as usize].contains(x)));
                    }
                }
            }
            // Nobody still waits whose values are all free and unclaimed before it.
            let mut claims = crate::core::wait::claims::Claims::default();
            for w in q.get(&id).map(|q| q.iter().collect::<Vec<_>>()).unwrap_or_default() {
                let vals = &want[w.handle as usize];
                let frees_all = vals.iter().all(|x| matches!(value(&m, &[*x], None), Value::Free { .. }));
                let fields: Vec<[u8; 1]> = vals.iter().map(|x| [*x]).collect();
                prop_assert!(!(frees_all && claims.free_of(&fields)), "w{} left waiting", w.handle);
                claims.claim(&fields);
            }
        }
    }
}

#[test]
fn an_owners_hold_of_the_group_spans_its_values() {
    let mut m = Mem::new(b"g");
    let Acquire::Grant(d, false) = acquire(&m, b"o1", 100, &v(&["a"]), false).unwrap() else {
        panic!("the first value starts the hold")
    };
    m.apply_ok(&d);
    let Acquire::Grant(_, true) = acquire(&m, b"o1", 100, &v(&["b"]), false).unwrap() else {
        panic!("another value while holding one re-enters the hold")
    };
    let Acquire::Grant(_, false) = acquire(&m, b"o2", 100, &v(&["c"]), false).unwrap() else {
        panic!("another owner starts its own")
    };
}

#[test]
fn a_hash_without_ttl_gets_one_from_renewal_and_release_not_acquire() {
    let mut m = Mem::new(b"g");
    m.hset(b"g", b"other", b"x");
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    assert_eq!(
        m.ttl(b"g"),
        None,
        "Redisson's acquire raises only a positive PTTL"
    );
    assert!(grant(&mut m, b"o1", 100, &["a"]));
    let d = renew(&m, b"o1", 500, &v(&["a"])).unwrap();
    m.apply_ok(&d);
    assert_eq!(m.ttl(b"g"), Some(500));
}

use super::*;
use proptest::prelude::*;
use ObjectKind::{Lock, RwLock};

fn id<'a>(key: &'a str, owner: &'a str) -> HoldId<'a> {
    HoldId {
        db: 0,
        key: key.as_bytes(),
        owner: owner.as_bytes(),
        exclusive: true,
    }
}

fn read<'a>(key: &'a str, owner: &'a str) -> HoldId<'a> {
    HoldId {
        exclusive: false,
        ..id(key, owner)
    }
}

fn walk_all(t: &mut Live) -> Vec<(String, String, u64)> {
    t.oldest_first()
        .into_iter()
        .filter_map(|p| t.get(p))
        .map(|h| {
            (
                String::from_utf8(h.key).unwrap(),
                String::from_utf8(h.owner).unwrap(),
                h.since_us,
            )
        })
        .collect()
}

#[test]
fn holds_come_out_oldest_first_and_end_once() {
    let mut t = Live::default();
    assert_eq!(t.start(id("a", "o1"), Lock, 10, 100), (Start::Tracked, 0));
    assert_eq!(t.start(id("b", "o2"), Lock, 20, 100), (Start::Tracked, 0));
    assert_eq!(
        t.start(read("c", "o3"), RwLock, 30, 100),
        (Start::Tracked, 0)
    );
    assert_eq!(
        t.start(read("c", "o4"), RwLock, 40, 100),
        (Start::Tracked, 0)
    );
    assert_eq!(t.len(), 4);
    assert_eq!(
        walk_all(&mut t),
        [
            ("a".into(), "o1".into(), 10),
            ("b".into(), "o2".into(), 20),
            ("c".into(), "o3".into(), 30),
            ("c".into(), "o4".into(), 40)
        ]
    );
    assert_eq!(
        t.end(id("b", "o2")),
        Some(Ended {
            kind: Lock,
            since_us: 20
        })
    );
    assert_eq!(t.end(id("b", "o2")), None, "ended once");
    assert_eq!(
        t.end(id("c", "o3")),
        None,
        "the exclusive side was never held"
    );
    assert_eq!(t.end(id("a", "o1x")), None);
    assert_eq!(t.len(), 3);
    assert_eq!(walk_all(&mut t).len(), 3);
}

#[test]
fn a_key_ends_all_its_holds_and_only_them() {
    let mut t = Live::default();
    t.start(read("rw", "r1"), RwLock, 1, 100);
    t.start(id("other", "r1"), Lock, 2, 100);
    t.start(read("rw", "r2"), RwLock, 3, 100);
    t.start(
        HoldId {
            db: 1,
            ..read("rw", "r3")
        },
        RwLock,
        4,
        100,
    );
    let mut ended = Vec::new();
    t.end_key(0, b"rw", |e| ended.push(e.since_us));
    ended.sort_unstable();
    assert_eq!(ended, [1, 3]);
    assert_eq!(t.len(), 2, "the other key and the other database stay");
    assert!(t
        .end(HoldId {
            db: 1,
            ..read("rw", "r3")
        })
        .is_some());
}

#[test]
fn the_holds_on_a_key_are_found_by_the_key() {
    let mut t = Live::default();
    assert!(!t.has_key(0, b"rw"));
    t.start(read("rw", "r1"), RwLock, 1, 100);
    t.start(read("rw", "r2"), RwLock, 2, 100);
    t.start(id("x", "r1"), Lock, 3, 100);
    assert!(t.has_key(0, b"rw") && !t.has_key(1, b"rw"));
    let mut on: Vec<Vec<u8>> = t
        .holds_on(0, b"rw")
        .into_iter()
        .map(|(_, h)| h.owner)
        .collect();
    on.sort();
    assert_eq!(on, [b"r1".to_vec(), b"r2".to_vec()]);
    let (place, _) = t.holds_on(0, b"x").pop().unwrap();
    assert!(t.remove(place).is_some());
    assert!(!t.has_key(0, b"x"));
}

#[test]
fn an_exclusive_grant_drops_the_holds_it_proves_ended() {
    let mut t = Live::default();
    t.start(id("k", "old"), Lock, 1, 100);
    t.start(id("j", "old"), Lock, 2, 100);
    assert_eq!(t.start(id("k", "new"), Lock, 3, 100), (Start::Tracked, 1));
    assert_eq!(
        walk_all(&mut t),
        [("j".into(), "old".into(), 2), ("k".into(), "new".into(), 3)]
    );
    // Readers ended unseen, then a writer: all of them go; a reader beside readers stays.
    t.start(read("rw", "r1"), RwLock, 4, 100);
    assert_eq!(
        t.start(read("rw", "r2"), RwLock, 5, 100),
        (Start::Tracked, 0)
    );
    assert_eq!(t.start(id("rw", "w"), RwLock, 6, 100), (Start::Tracked, 2));
    assert_eq!(t.len(), 3);
}

#[test]
fn a_restart_moves_the_hold_to_the_newest_end_even_when_full() {
    let mut t = Live::default();
    t.start(id("a", "o"), Lock, 1, 2);
    t.start(id("b", "o"), Lock, 2, 2);
    assert_eq!(t.start(id("c", "o"), Lock, 3, 2), (Start::Full, 0));
    assert_eq!(t.start(id("a", "o"), Lock, 4, 2), (Start::Restarted, 0));
    assert_eq!(
        walk_all(&mut t),
        [("b".into(), "o".into(), 2), ("a".into(), "o".into(), 4)]
    );
}

#[test]
fn a_snapshot_of_places_survives_removals_and_flushes() {
    let mut t = Live::default();
    for (i, k) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        t.start(id(k, "o"), Lock, 10 - i as u64, 100);
    }
    // Started later, at earlier clock readings: the order is by start time.
    let places = t.oldest_first();
    let keys = |t: &Live, ps: &[Place]| -> Vec<Vec<u8>> {
        ps.iter().filter_map(|p| t.get(*p)).map(|h| h.key).collect()
    };
    assert_eq!(
        keys(&t, &places),
        [b"e", b"d", b"c", b"b", b"a"].map(|k| k.to_vec())
    );
    // One ends by an event, a found one is removed: the snapshot reads them as gone.
    t.end(id("c", "o"));
    assert!(t.remove(places[0]).is_some());
    assert!(t.remove(places[0]).is_none(), "removed once");
    assert_eq!(keys(&t, &places), [b"d", b"b", b"a"].map(|k| k.to_vec()));
    let mut n = 0;
    t.end_where(|db, _| db == 0, |_| n += 1);
    assert_eq!(n, 3);
    assert!(t.is_empty());
}

#[test]
fn a_long_key_is_kept_whole() {
    let mut t = Live::default();
    let long = "k".repeat(300);
    t.start(id(&long, "owner"), Lock, 1, 100);
    assert_eq!(walk_all(&mut t), [(long.clone(), "owner".into(), 1)]);
    assert!(t.end(id(&long, "owner")).is_some());
    t.start(id("short", "o"), Lock, 2, 100);
    assert_eq!(walk_all(&mut t), [("short".into(), "o".into(), 2)]);
}

#[test]
fn slots_are_reused_and_a_stale_place_finds_nothing() {
    let mut t = Live::default();
    t.start(id("a", "o"), Lock, 1, 100);
    let place = t.oldest_first()[0];
    t.end(id("a", "o"));
    t.start(id("b", "o"), Lock, 2, 100);
    assert_eq!(t.get(place), None, "the slot holds another hold now");
    assert_eq!(t.slots.made(), 1);
}

#[test]
fn an_exclusive_grant_that_empties_a_large_table_is_tracked() {
    // Over 1,024 slots made, then the last hold dropped by a grant on its key: the table is
    // given back in the middle of the grant, which then tracks the new hold in a fresh one.
    let mut t = Live::default();
    let keys: Vec<String> = (0..1100).map(|i| format!("k{i}")).collect();
    for k in &keys {
        t.start(id(k, "old"), Lock, 1, 10_000);
    }
    for k in &keys[1..] {
        assert!(t.end(id(k, "old")).is_some());
    }
    assert_eq!(
        t.start(id("k0", "new"), Lock, 2, 10_000),
        (Start::Tracked, 1)
    );
    t.check();
    assert_eq!(walk_all(&mut t), [("k0".into(), "new".into(), 2)]);
    // The same with readers: a writer drops both.
    t.start(read("k0", "r"), RwLock, 3, 10_000);
    assert_eq!(t.len(), 2);
    t.check();
}

#[derive(Debug, Clone)]
enum Op {
    Start(u8, u8, bool),
    End(u8, u8, bool),
    EndKey(u8),
    Walk(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6, 0u8..4, any::<bool>()).prop_map(|(k, o, x)| Op::Start(k, o, x)),
        3 => (0u8..6, 0u8..4, any::<bool>()).prop_map(|(k, o, x)| Op::End(k, o, x)),
        1 => (0u8..6).prop_map(Op::EndKey),
        1 => (0usize..4).prop_map(Op::Walk),
    ]
}

proptest! {
    /// Against a plain list in start order: the same holds, the same order, the same
    /// start times, the cap kept. Keys 0, 2, 4 are in database 0 and 1, 3, 5 in database 1,
    /// with the same names in pairs; with `bits`, keys' hashes keep that many bits (0: all), so
    /// that keys collide in the index.
    #[test]
    fn behaves_as_a_list_in_start_order(
        ops in prop::collection::vec(op(), 0..300),
        cap in 1usize..12,
        bits in 0u32..3,
    ) {
        let mut t = Live { fp_bits: bits, ..Live::default() };
        let mut model: Vec<(u8, u8, bool, u64)> = Vec::new();
        let keys: Vec<String> = (0..6).map(|k| format!("key:{}", k / 2)).collect();
        let db = |k: u8| i32::from(k % 2);
        let owners: Vec<String> = (0..4).map(|o| format!("owner:{o}")).collect();
        let hid = |k: u8, o: u8, x: bool| HoldId { db: db(k), key: keys[k as usize].as_bytes(), owner: owners[o as usize].as_bytes(), exclusive: x };
        for (now, op) in ops.into_iter().enumerate() {
            let now = now as u64;
            match op {
                Op::Start(k, o, x) => {
                    let got = t.start(hid(k, o, x), Lock, now, cap);
                    let same = model.iter().position(|m| (m.0, m.1, m.2) == (k, o, x));
                    let before = model.len();
                    if x {
                        model.retain(|m| m.0 != k || (m.1, m.2) == (o, x));
                    }
                    let dropped = before - model.len();
                    match same {
                        Some(_) => {
                            prop_assert_eq!(got, (Start::Restarted, dropped));
                            let p = model.iter().position(|m| (m.0, m.1, m.2) == (k, o, x)).unwrap();
                            model.remove(p);
                            model.push((k, o, x, now));
                        }
                        None if model.len() >= cap => prop_assert_eq!(got, (Start::Full, dropped)),
                        None => {
                            prop_assert_eq!(got, (Start::Tracked, dropped));
                            model.push((k, o, x, now));
                        }
                    }
                }
                Op::End(k, o, x) => {
                    let got = t.end(hid(k, o, x)).map(|e| e.since_us);
                    let want = model.iter().position(|m| (m.0, m.1, m.2) == (k, o, x)).map(|p| model.remove(p).3);
                    prop_assert_eq!(got, want);
                }
                Op::EndKey(k) => {
                    let mut got = Vec::new();
                    t.end_key(db(k), keys[k as usize].as_bytes(), |e| got.push(e.since_us));
                    got.sort_unstable();
                    let want: Vec<u64> = model.iter().filter(|m| m.0 == k).map(|m| m.3).collect();
                    model.retain(|m| m.0 != k);
                    prop_assert_eq!(got, want);
                }
                Op::Walk(n) => {
                    let seen = t.oldest_first();
                    prop_assert_eq!(seen.len(), model.len());
                    prop_assert!(seen.iter().take(n).all(|p| t.get(*p).is_some()));
                }
            }
            t.check();
            prop_assert_eq!(t.len(), model.len());
            for k in 0..6u8 {
                let mut on: Vec<u64> = t.holds_on(db(k), keys[k as usize].as_bytes()).into_iter().map(|(_, h)| h.since_us).collect();
                on.sort_unstable();
                let mut want: Vec<u64> = model.iter().filter(|m| m.0 == k).map(|m| m.3).collect();
                want.sort_unstable();
                prop_assert_eq!(t.has_key(db(k), keys[k as usize].as_bytes()), !want.is_empty());
                prop_assert_eq!(on, want);
            }
        }
        let got: Vec<(String, String, u64)> = walk_all(&mut t);
        let want: Vec<(String, String, u64)> = model.iter().map(|m| (keys[m.0 as usize].clone(), owners[m.1 as usize].clone(), m.3)).collect();
        prop_assert_eq!(got, want);
    }
}

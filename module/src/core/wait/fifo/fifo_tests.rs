use super::*;

type Q = Queues<u32, &'static str>;

/// A map keyed by `KeyId` finds its entries by a borrowed `KeyRef` (same hash, same
/// equality), and only those: another database or other bytes are another key.
#[test]
fn borrowed_keys_find_owned_ones() {
    let mut m: HashMap<KeyId, u32> = HashMap::default();
    m.insert(KeyId::new(0, b"a"), 1);
    m.insert(KeyId::new(1, b"a"), 2);
    m.insert(KeyId::new(0, b"ab"), 3);
    let get = |db, key: &[u8]| m.get(&KeyRef { db, key } as &dyn KeyView).copied();
    assert_eq!(get(0, b"a"), Some(1));
    assert_eq!(get(1, b"a"), Some(2));
    assert_eq!(get(0, b"ab"), Some(3));
    assert_eq!(get(2, b"a"), None);
    assert_eq!(get(0, b"b"), None);
    assert_eq!(get(0, b""), None);
    assert_eq!(
        m.remove(&KeyRef { db: 1, key: b"a" } as &dyn KeyView),
        Some(2)
    );
    assert_eq!(m.len(), 2);
}

fn w(handle: u32, owner: &'static str) -> Waiter<u32, &'static str> {
    Waiter {
        handle,
        serial: handle as u64,
        req: owner,
        deadline: None,
        queued_us: 0,
    }
}

fn reqs(q: &Q, id: &KeyId) -> Vec<&'static str> {
    q.get(id)
        .map_or_else(Vec::new, |k| k.iter().map(|w| w.req).collect())
}

#[test]
fn fifo_per_key() {
    let mut q = Q::default();
    let a = KeyId::new(0, b"a");
    let b = KeyId::new(0, b"b");
    q.push(&a, w(1, "x"));
    q.push(&b, w(2, "y"));
    q.push(&a, w(3, "z"));
    assert_eq!(reqs(&q, &a), vec!["x", "z"]);
    assert_eq!(q.total(), 3);
    assert_eq!(q.pop_front(&a).unwrap().handle, 1);
    assert_eq!(q.pop_front(&a).unwrap().handle, 3);
    assert!(q.pop_front(&a).is_none());
    assert!(!q.is_queued(&a));
    assert!(q.is_queued(&b));
    assert_eq!(q.total(), 1);
}

#[test]
fn databases_are_separate() {
    let mut q = Q::default();
    q.push(&KeyId::new(0, b"k"), w(1, "x"));
    assert!(!q.is_queued(&KeyId::new(1, b"k")));
    assert_eq!(q.ids(Some(0)).len(), 1);
    assert!(q.ids(Some(1)).is_empty());
    assert_eq!(q.ids(None).len(), 1);
}

#[test]
fn remove_from_the_middle_and_twice() {
    let mut q = Q::default();
    let a = KeyId::new(0, b"a");
    for h in 1..=3 {
        q.push(&a, w(h, "o"));
    }
    let (id, gone) = q.remove(2).unwrap();
    assert_eq!((id, gone.handle), (a.clone(), 2));
    assert!(q.remove(2).is_none(), "a waiter is removed once");
    assert!(q.find(2).is_none());
    assert_eq!(q.find(3).map(|(_, w)| w.serial), Some(3));
    assert_eq!(q.pop_front(&a).unwrap().handle, 1);
    assert!(
        q.remove(1).is_none(),
        "a granted waiter is no longer queued"
    );
    assert_eq!(q.len(&a), 1);
}

#[test]
fn idle_entries_are_forgotten_with_their_check() {
    let mut q = Q::default();
    let mut timers = super::super::Timers::default();
    let a = KeyId::new(0, b"a");
    q.push(&a, w(1, "o"));
    let t = timers.schedule(10, ());
    q.get_mut(&a).unwrap().check = Some(t);
    assert_eq!(q.forget_if_idle(&a), None, "still has a waiter");
    q.pop_front(&a);
    assert_eq!(q.forget_if_idle(&a), Some(t));
    assert!(q.get(&a).is_none());
}

#[test]
fn drain_empties_index() {
    let mut q = Q::default();
    let a = KeyId::new(0, b"a");
    q.push(&a, w(1, "o"));
    q.push(&a, w(2, "p"));
    assert_eq!(q.drain(&a).len(), 2);
    assert_eq!(q.total(), 0);
    assert!(q.remove(1).is_none());
}

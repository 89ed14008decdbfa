use super::*;

fn vals(vs: &[&str]) -> Vec<Box<[u8]>> {
    vs.iter().map(|v| v.as_bytes().into()).collect()
}

#[test]
fn only_the_first_waiters_of_changed_values_are_candidates() {
    let mut ix = ByValue::default();
    let all: Vec<Vec<Box<[u8]>>> = vec![vals(&["a", "b"]), vals(&["a"]), vals(&["c"])];
    for (s, v) in all.iter().enumerate() {
        ix.add(s as u64, v);
    }
    let of = |s: u64| all.get(s as usize).map(|v| &v[..]);
    // Joining marks the lists each waiter started: 0 (a, b) and 2 (c).
    assert_eq!(ix.candidates(Freed::Lapsed(vec![]), of), vec![0, 2]);
    // Nothing changed since.
    assert_eq!(ix.candidates(Freed::Lapsed(vec![]), of), Vec::<u64>::new());
    // a freed: its first waiter, 0; 1 is behind it.
    ix.freed([&b"a"[..], b"z"]);
    assert_eq!(ix.candidates(Freed::Lapsed(vec![]), of), vec![0]);
    // 0 leaves: 1 heads a's list now.
    ix.remove(0, &all[0]);
    assert_eq!(ix.candidates(Freed::Lapsed(vec![]), of), vec![1]);
    assert!(ix.wants_any(&[b"c"]) && !ix.wants_any(&[b"b"]));
    // A lease that ended names its value.
    assert_eq!(
        ix.candidates(Freed::Lapsed(vec![b"c".to_vec()]), of),
        vec![2]
    );
    // The key gone with no command's word on what it freed: every list's first waiter.
    assert_eq!(ix.candidates(Freed::Gone, of), vec![1, 2]);
    ix.freed([&b"q"[..]]);
    assert_eq!(ix.candidates(Freed::Gone, of), Vec::<u64>::new());
    ix.all();
    assert_eq!(ix.candidates(Freed::Lapsed(vec![]), of), vec![1, 2]);
    ix.remove(1, &all[1]);
    ix.remove(2, &all[2]);
    assert_eq!(ix.lists(), 0);
}

use super::*;
use crate::core::args::WaitMode;
use crate::core::mem::Mem;
use crate::core::wait::ObjectKeys;

fn a(args: &[&'static str]) -> Result<AcquireArgs<'static>, CmdError> {
    let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    parse_acquire(&v)
}

#[test]
fn acquire_options() {
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "100"]),
        Ok(AcquireArgs {
            lease_ms: 100,
            wait: WaitArgs::new(),
            fence: false
        })
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "100", "block", "0", "Fence"]),
        Ok(AcquireArgs {
            lease_ms: 100,
            wait: WaitArgs {
                wait: WaitMode::Block(0),
                session: None
            },
            fence: true
        })
    );
}

#[test]
fn argument_errors() {
    let r = |v: &[&'static str]| -> Vec<&'static [u8]> { v.iter().map(|s| s.as_bytes()).collect() };
    assert_eq!(
        a(&["rlock.acquire", "k", "o"]),
        Err(CmdError::Arity("rlock.acquire"))
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "", "1"]),
        Err(CmdError::EmptyOwner)
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "0"]),
        Err(CmdError::LeaseTooSmall)
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "x"]),
        Err(CmdError::NotInteger("lease_ms"))
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "1", "BLOCK", "-1"]),
        Err(CmdError::NegativeTimeout)
    );
    assert_eq!(
        a(&["rlock.acquire", "k", "o", "1", "NX"]),
        Err(CmdError::Syntax("unknown option 'NX'".into()))
    );
    assert_eq!(parse_release(&r(&["rlock.release", "k", "o"])), Ok(()));
    assert_eq!(
        parse_release(&r(&["rlock.release", "k"])),
        Err(CmdError::Arity("rlock.release"))
    );
    assert_eq!(parse_renew(&r(&["rlock.renew", "k", "o", "5"])), Ok(5));
    assert_eq!(
        parse_renew(&r(&["rlock.renew", "k", "o", "0"])),
        Err(CmdError::LeaseTooSmall)
    );
    assert_eq!(
        parse_force_release(&r(&["rlock.forcerelease", "k", "x"])),
        Err(CmdError::Arity("rlock.forcerelease"))
    );
    assert_eq!(parse_info(&r(&["rlock.info", "k"])), Ok(()));
}

#[test]
fn acquire_reenter_release() {
    let mut m = Mem::new(b"k");
    let Acquire::Grant(d, Took::Fresh) = acquire(&m, b"a", 100, false, false).unwrap() else {
        panic!()
    };
    assert_eq!(m.apply_ok(&d), Reply::Int(1));
    assert_eq!(m.ttl(b"k"), Some(100));
    assert_eq!(acquire(&m, b"b", 100, false, false), Ok(Acquire::Busy));
    let Acquire::Grant(d, Took::Reentry) = acquire(&m, b"a", 500, false, true).unwrap() else {
        panic!("re-entry never waits")
    };
    assert_eq!(m.apply_ok(&d), Reply::Int(2));
    assert_eq!(m.ttl(b"k"), Some(500));
    assert_eq!(release(&m, b"b").unwrap_err(), CmdError::NotOwner);
    let (d, full) = release(&m, b"a").unwrap();
    assert!(!full);
    assert_eq!(m.apply_ok(&d), Reply::Int(1));
    let (d, full) = release(&m, b"a").unwrap();
    assert!(full);
    assert_eq!(m.apply_ok(&d), Reply::Int(0));
    assert!(!m.exists(b"k"));
    assert_eq!(
        m.published,
        vec![(b"redisson_lock__channel:{k}".to_vec(), 0)]
    );
}

#[test]
fn fencing_tokens_increase() {
    let mut m = Mem::new(b"k");
    // The counter goes on within one millisecond of the clock, and jumps to the clock term
    // when the clock passed it.
    let first = m.now * super::super::fencing::PER_MS;
    for want in [first, first + 1, first + 2] {
        let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
            panic!()
        };
        assert_eq!(m.apply_ok(&d), Reply::Int(want));
    }
    m.now += 1;
    let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
        panic!()
    };
    assert_eq!(m.apply_ok(&d), Reply::Int(m.now * 1_000));
    m.set_str(b"redisson_lock_token:{k}", b"nope");
    let Acquire::Grant(d, _) = acquire(&m, b"a", 100, true, false).unwrap() else {
        panic!()
    };
    assert_eq!(m.write_serving(&d), Err(CmdError::CorruptToken));
    assert_eq!(
        m.hget_int(&Target::Main, b"a"),
        Int::Is(4),
        "nothing written"
    );
}

#[test]
fn wrong_types_and_corrupt_counts() {
    let mut m = Mem::new(b"k");
    m.set_str(b"k", b"x");
    assert_eq!(acquire(&m, b"a", 1, false, false), Err(CmdError::WrongType));
    assert_eq!(release(&m, b"a").unwrap_err(), CmdError::WrongType);
    assert_eq!(renew(&m, b"a", 5), Err(CmdError::WrongType));
    assert_eq!(force_release(&m), Err(CmdError::WrongType));
    assert_eq!(info(&m, vec![], true), Err(CmdError::WrongType));
    let mut m = Mem::new(b"k");
    m.hset(b"k", b"a", b"x");
    assert_eq!(
        acquire(&m, b"a", 1, false, false),
        Err(CmdError::CorruptCount)
    );
    assert_eq!(release(&m, b"a").unwrap_err(), CmdError::CorruptCount);
    m.hset(b"k", b"a", itoa::Buffer::new().format(i64::MAX).as_bytes());
    assert_eq!(
        acquire(&m, b"a", 1, false, false),
        Err(CmdError::CountOverflow)
    );
    m.hset(b"k", b"a", b"-4");
    assert!(matches!(
        acquire(&m, b"a", 1, false, false),
        Ok(Acquire::Grant(_, Took::Reentry))
    ));
}

#[test]
fn renew_force_and_info() {
    let mut m = Mem::new(b"k");
    assert_eq!(m.apply_ok(&renew(&m, b"a", 5).unwrap()), Reply::Int(0));
    assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(0));
    let Acquire::Grant(d, _) = acquire(&m, b"a", 100, false, false).unwrap() else {
        panic!()
    };
    m.apply_ok(&d);
    m.now += 40;
    assert_eq!(m.apply_ok(&renew(&m, b"a", 500).unwrap()), Reply::Int(1));
    assert_eq!(m.ttl(b"k"), Some(500));
    let shown = info(&m, vec![Reply::Bulk(b"w".to_vec())], true).unwrap();
    assert_eq!(
        shown,
        Reply::Map(vec![
            ("owner", Reply::Bulk(b"a".to_vec())),
            ("holds", Reply::Int(1)),
            ("ttl_ms", Reply::Int(500)),
            ("token", Reply::Nil),
            ("waiters", Reply::Int(1)),
            ("queue", Reply::Array(vec![Reply::Bulk(b"w".to_vec())])),
        ])
    );
    assert_eq!(m.apply_ok(&force_release(&m).unwrap()), Reply::Int(1));
    assert!(!m.exists(b"k"));
}

#[test]
fn a_read_write_locks_hash_is_another_kind() {
    let mut m = Mem::new(b"k");
    m.hset(b"k", b"mode", b"read");
    m.hset(b"k", b"r", b"1");
    assert_eq!(
        acquire(&m, b"r", 100, false, false),
        Err(CmdError::WrongType)
    );
    assert_eq!(release(&m, b"r").err(), Some(CmdError::WrongType));
    assert_eq!(renew(&m, b"r", 100).err(), Some(CmdError::WrongType));
    assert_eq!(force_release(&m), Err(CmdError::WrongType));
    assert_eq!(info(&m, vec![], true), Err(CmdError::WrongType));
    let w = LockRequest {
        owner: b"w".as_slice().into(),
        lease_ms: 50,
        fence: false,
    };
    assert!(matches!(
        w.try_grant(&m),
        TryGrant::Fail(CmdError::WrongType)
    ));
    assert!(m.exists(b"k"), "never deleted");
    assert_eq!(
        parse_acquire(&[b"rlock.acquire", b"k", b"mode", b"100"]),
        Err(CmdError::ReservedOwner),
        "a lock held by `mode` would read as a read-write lock"
    );
}

#[test]
fn a_waiter_is_served_when_free_and_undone_only_untouched() {
    let mut m = Mem::new(b"k");
    let w = LockRequest {
        owner: b"w".as_slice().into(),
        lease_ms: 50,
        fence: false,
    };
    m.hset(b"k", b"a", b"1");
    assert!(matches!(w.try_grant(&m), TryGrant::Wait));
    m.del(b"k");
    let TryGrant::Grant(d) = w.try_grant(&m) else {
        panic!()
    };
    assert_eq!(m.apply_ok(&d), Reply::Int(1));
    assert_eq!(m.ttl(b"k"), Some(50));
    assert_eq!(w.object().wake_at(&m), Some(m.now + 50));
    let undo = w
        .undo(&Reply::Int(1), &m)
        .expect("untouched grant is undone");
    m.apply_ok(&undo);
    assert!(!m.exists(b"k"));
    m.hset(b"k", b"w", b"2");
    assert!(w.undo(&Reply::Int(1), &m).is_none(), "re-entered since");
    m.set_str(b"k", b"x");
    assert!(matches!(
        w.try_grant(&m),
        TryGrant::Fail(CmdError::WrongType)
    ));
}

//! Grants that may still be undone, and what makes them final: a grant whose waiter never
//! heard of it (a blocked client that closed before its reply, a session that ended before a
//! read returned it) is undone on the next timer turn, by the object's rule (`Request::undo`:
//! for a lock, free it if its owner's count is still the grant's 1). That rule cannot tell the
//! grant from a new hold of the same owner: an owner that gave the grant back blind and took
//! the lock anew before the undo ran (within the session's grace) lost its new hold to the
//! undo, and the next acquirer held the lock beside it. So each such grant of an object with
//! owners gets a ticket here, and any end of a hold on its key (its owner's release, a force
//! release, an event on the key, a flush) takes the ticket back: an undo runs only on a ticket
//! still here, i.e. on a hold that did not end since the grant.
//!
//! A ticket lives from the grant until the grant reaches its waiter (a reply sent, a read or an
//! acknowledgement passing it), its undo runs, or its hold ends: the ledger holds only grants
//! on their way. Kept apart from the wait state: events report ends while that state may be
//! borrowed.

use crate::core::wait::{HashMap, KeyId, KeyRef, KeyView, Req};
use std::cell::RefCell;

#[derive(Default)]
struct Ledger {
    /// Per key, its undoable grants, each with the request it granted (whose owner it is): a
    /// grant reaching its waiter takes its ticket back in O(1), however many readers were
    /// granted the key at once.
    keys: HashMap<KeyId, Grants>,
    next: u64,
}

/// The undoable grants of one key: nearly always one (a lock handed to its next waiter), kept
/// inline. A table per key cost its allocation and first insert, and a copy of the owner
/// another allocation: 650 of a hand-off's instructions (callgrind, `scripts/budget.py`).
enum Grants {
    One(u64, Req),
    Many(HashMap<u64, Req>),
}

impl Grants {
    fn insert(&mut self, ticket: u64, req: Req) {
        match self {
            Grants::One(t, r) => {
                let mut many = HashMap::default();
                many.insert(*t, r.clone());
                many.insert(ticket, req);
                *self = Grants::Many(many);
            }
            Grants::Many(m) => {
                m.insert(ticket, req);
            }
        }
    }

    /// Take `ticket` back; whether it was here, and whether none is left.
    fn remove(&mut self, ticket: u64) -> (bool, bool) {
        match self {
            Grants::One(t, _) => (*t == ticket, *t == ticket),
            Grants::Many(m) => (m.remove(&ticket).is_some(), m.is_empty()),
        }
    }

    /// Drop the grants `owner` holds (every grant: `None`); whether none is left.
    fn end(&mut self, owner: Option<&[u8]>) -> bool {
        let ends = |r: &Req| owner.is_none_or(|o| r.owner() == Some(o));
        match self {
            Grants::One(_, r) => ends(r),
            Grants::Many(m) => {
                m.retain(|_, r| !ends(r));
                m.is_empty()
            }
        }
    }
}

thread_local! {
    static LEDGER: RefCell<Ledger> = RefCell::default();
}

/// Whether undoing a grant of `req` on `id` may still run: `None` for objects without owners
/// (their undo gives back what the grant took, which no later hold can be mistaken for).
pub type Ticket = Option<u64>;

/// Note a grant that may be undone later.
pub fn undoable(id: &KeyId, req: &Req) -> Ticket {
    req.holds()?;
    LEDGER.with(|l| {
        let mut l = l.borrow_mut();
        l.next += 1;
        let t = l.next;
        match l.keys.get_mut(id) {
            Some(grants) => grants.insert(t, req.clone()),
            None => {
                l.keys.insert(id.clone(), Grants::One(t, req.clone()));
            }
        }
        Some(t)
    })
}

/// Whether the grant with `ticket` on `id` may still be undone; its ticket is taken back
/// either way (called when the undo runs, or when the grant reached its waiter).
pub fn take(id: &KeyId, ticket: Ticket) -> bool {
    let Some(t) = ticket else {
        return true;
    };
    LEDGER.with(|l| {
        let mut l = l.borrow_mut();
        let Some(grants) = l.keys.get_mut(id) else {
            return false;
        };
        let (found, emptied) = grants.remove(t);
        if emptied {
            l.keys.remove(id);
        }
        found
    })
}

/// Whether any grant may still be undone: when none (nearly always), a hold's end costs its
/// caller nothing more, not even the key's name and database (three module API calls: 128
/// instructions of an `RLOCK.RELEASE`, `scripts/instructions.sh`).
pub fn pending() -> bool {
    LEDGER.with(|l| l.try_borrow().map_or(true, |l| !l.keys.is_empty()))
}

/// A hold on `key` of `db` ended: `owner`'s (its release), or every hold there (`None`: a
/// force release, a deletion, an expiry, another write the module did not make). Its grants
/// are final: nothing undoes them any more.
pub fn ended(db: i32, key: &[u8], owner: Option<&[u8]>) {
    LEDGER.with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return;
        };
        if l.keys.is_empty() {
            return;
        }
        // Looked up by the borrowed name: no id is made for a key with no grant pending.
        let id = KeyRef { db, key };
        let Some(grants) = l.keys.get_mut(&id as &dyn KeyView) else {
            return;
        };
        if grants.end(owner) {
            l.keys.remove(&id as &dyn KeyView);
        }
    })
}

/// Every key of `db` (`None`: of every database) may have changed (FLUSH*, SWAPDB).
pub fn db_ended(db: Option<i32>) {
    ended_where(|id| db.is_none_or(|d| id.db == d));
}

/// Every key `which` selects may have changed or left the node (a slot migration).
pub fn ended_where(which: impl Fn(&KeyId) -> bool) {
    LEDGER.with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.keys.retain(|id, _| !which(id));
        }
    })
}

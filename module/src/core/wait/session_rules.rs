//! Sessions: many waits over one connection. A client names a session, queues requests in it
//! (`... SESSION s QUEUE <request> <timeout_ms>`), and one listener connection reads their
//! outcomes (`RSESSION.READ`), acknowledging what it has processed by its cursor, as XREAD /
//! XACK do. This file holds what is pure: a session's outcome list and its rules, and the
//! commands' arguments. The skin (`sessions/`) parks the listener, runs the timers and
//! undoes what an expired session leaves.

use crate::core::args::{self, Opt};
use crate::core::decision::Reply;
use crate::core::error::CmdError;
use std::collections::VecDeque;

/// What an outcome says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// A queued request was granted; the value is the reply a blocked waiter would get.
    Granted,
    /// A queued request's deadline passed.
    Timeout,
    /// A queued request can never be granted; the value is the error text.
    Error,
    /// A hold of the session ended by something other than its owner's release; the value is
    /// the owner.
    Lost,
    /// `lost` outcomes were dropped because the backlog was full (`rlock.session-max-backlog`):
    /// the listener must look at every hold it has on this server.
    Overflow,
}

impl OutcomeKind {
    pub fn word(self) -> &'static str {
        match self {
            OutcomeKind::Granted => "granted",
            OutcomeKind::Timeout => "timeout",
            OutcomeKind::Error => "error",
            OutcomeKind::Lost => "lost",
            OutcomeKind::Overflow => "overflow",
        }
    }
}

/// One outcome awaiting acknowledgement. `G` is what undoing a grant needs: kept until a read
/// delivers the grant (from then on the grant is its owner's, see [`Outcomes::read`]).
#[derive(Debug)]
pub struct Entry<G> {
    pub seq: u64,
    pub outcome: New<G>,
}

impl<G> Entry<G> {
    /// `[seq, kind, request, key, value, object]`, as `RSESSION.READ` shows it.
    pub fn show(&self) -> Reply {
        let o = &self.outcome;
        Reply::Array(vec![
            Reply::Int(self.seq as i64),
            Reply::Bulk(o.kind.word().as_bytes().to_vec()),
            o.request.map_or(Reply::Nil, |r| Reply::Int(r as i64)),
            Reply::bulk_or_nil(o.key.as_deref().map(<[u8]>::to_vec)),
            o.value.clone(),
            Reply::bulk_or_nil(o.object.map(|w| w.as_bytes().to_vec())),
        ])
    }
}

/// An outcome, as appended.
#[derive(Debug)]
pub struct New<G> {
    pub kind: OutcomeKind,
    pub request: Option<u64>,
    /// The key's name, shared with its queue's id (not copied per outcome).
    pub key: Option<std::rc::Rc<[u8]>>,
    /// The object kind's word (`lock`, `rwlock`, ...) for outcomes about an object.
    pub object: Option<&'static str>,
    pub value: Reply,
    pub grant: Option<G>,
}

/// A session's outcomes, in sequence order.
#[derive(Debug)]
pub struct Outcomes<G> {
    entries: VecDeque<Entry<G>>,
    /// The sequence number of the next outcome (the first is 1).
    next: u64,
    /// Everything up to here was acknowledged.
    acked: u64,
}

impl<G> Default for Outcomes<G> {
    fn default() -> Self {
        Outcomes {
            entries: VecDeque::new(),
            next: 1,
            acked: 0,
        }
    }
}

impl<G> Outcomes<G> {
    pub fn push(&mut self, e: New<G>) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.entries.push_back(Entry { seq, outcome: e });
        seq
    }

    /// Append a `lost` outcome unless `max` outcomes already wait for acknowledgement: then
    /// one `overflow` outcome stands for every `lost` dropped until the listener catches up
    /// (the backlog bounds a session's memory; a request's own outcome is never dropped, and
    /// `may_queue` bounds those). Returns false when the outcome was dropped.
    pub fn push_lost(&mut self, e: New<G>, max: usize) -> bool {
        if self.entries.len() < max {
            self.push(e);
            return true;
        }
        if self
            .entries
            .back()
            .is_none_or(|b| b.outcome.kind != OutcomeKind::Overflow)
        {
            self.push(New {
                kind: OutcomeKind::Overflow,
                request: None,
                key: None,
                object: None,
                value: Reply::Nil,
                grant: None,
            });
        }
        false
    }

    /// Up to `count` outcomes after `cursor`, as `RSESSION.READ` returns them. A grant a read
    /// returns is delivered: from then on it is its owner's, and ending the session no longer
    /// undoes it (the same rule as for a `BLOCK` waiter, whose grant is its own once the reply
    /// is sent). Only grants no read ever returned are undone. `delivered` gets each grant
    /// that became its owner's here.
    pub fn read(&mut self, cursor: u64, count: usize, mut delivered: impl FnMut(G)) -> Reply {
        Reply::Array(
            self.entries
                .iter_mut()
                .skip_while(|e| e.seq <= cursor)
                .take(count)
                .map(|e| {
                    if let Some(g) = e.outcome.grant.take() {
                        delivered(g);
                    }
                    e.show()
                })
                .collect(),
        )
    }

    /// Acknowledge every outcome up to `cursor` (a cursor beyond the last outcome acknowledges
    /// them all). Returns how many outcomes were dropped. (Acknowledging an outcome no read
    /// returned, by a cursor given blind, makes its grant its owner's too: `delivered` gets
    /// it.)
    pub fn ack(&mut self, cursor: u64, mut delivered: impl FnMut(G)) -> usize {
        let upto = cursor.min(self.next - 1);
        let mut n = 0;
        while self.entries.front().is_some_and(|e| e.seq <= upto) {
            if let Some(g) = self.entries.pop_front().and_then(|e| e.outcome.grant) {
                delivered(g);
            }
            n += 1;
        }
        self.acked = self.acked.max(upto);
        n
    }

    /// Up to `count` outcomes after `cursor`.
    #[cfg(test)]
    pub fn after(&self, cursor: u64, count: usize) -> impl Iterator<Item = &Entry<G>> {
        self.entries
            .iter()
            .skip_while(move |e| e.seq <= cursor)
            .take(count)
    }

    pub fn has_after(&self, cursor: u64) -> bool {
        self.entries.back().is_some_and(|e| e.seq > cursor)
    }

    /// Outcomes not yet acknowledged.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// The sequence number of the last outcome (0 before the first).
    pub fn last(&self) -> u64 {
        self.next - 1
    }

    /// Take every entry (the session ends): grants not acknowledged must be undone.
    pub fn drain(&mut self) -> impl Iterator<Item = Entry<G>> + '_ {
        self.entries.drain(..)
    }
}

/// Whether a session may queue one more request.
pub fn may_queue(
    queued: usize,
    backlog: usize,
    max_queued: i64,
    max_backlog: i64,
) -> Result<(), CmdError> {
    if queued as i64 >= max_queued {
        return Err(CmdError::Limit(format!(
            "the session has {queued} requests queued (rlock.session-max-queued)"
        )));
    }
    if backlog as i64 >= max_backlog {
        return Err(CmdError::Limit(format!(
            "the session has {backlog} outcomes not acknowledged (rlock.session-max-backlog): read them with RSESSION.READ"
        )));
    }
    Ok(())
}

// ---- arguments -----------------------------------------------------------------------------------

fn name<'a>(argv: &[&'a [u8]]) -> Result<&'a [u8], CmdError> {
    match argv.get(1) {
        Some(n) if !n.is_empty() => Ok(n),
        _ => Err(CmdError::Syntax(
            "the session name must not be empty".into(),
        )),
    }
}

/// `RSESSION.OPEN session grace_ms`: the session and its grace period.
pub fn parse_open<'a>(argv: &[&'a [u8]]) -> Result<(&'a [u8], i64), CmdError> {
    args::arity(argv, |n| n == 3, "rsession.open")?;
    let grace = args::at_least(argv[2], "grace_ms", 0)?;
    Ok((name(argv)?, grace))
}

/// `RSESSION.READ session cursor [COUNT n] [BLOCK timeout_ms]`
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadArgs<'a> {
    pub session: &'a [u8],
    pub cursor: u64,
    pub count: usize,
    pub block_ms: Option<i64>,
}

/// Outcomes one `RSESSION.READ` returns when it gives no `COUNT`.
pub const DEFAULT_COUNT: usize = 1000;

const COUNT: Opt = Opt {
    name: "COUNT",
    values: 1,
    needs: "COUNT needs a number",
};

pub fn parse_read<'a>(argv: &[&'a [u8]]) -> Result<ReadArgs<'a>, CmdError> {
    args::arity(argv, |n| n >= 3, "rsession.read")?;
    let mut r = ReadArgs {
        session: name(argv)?,
        cursor: args::at_least(argv[2], "cursor", 0)? as u64,
        count: DEFAULT_COUNT,
        block_ms: None,
    };
    args::options(&argv[3..], &[&COUNT, &args::BLOCK], |k, v| {
        match k {
            0 => r.count = args::at_least(v[0], "count", 1)? as usize,
            _ => {
                let args::WaitMode::Block(ms) = args::block(v[0])? else {
                    unreachable!("block() gives Block")
                };
                r.block_ms = Some(ms);
            }
        }
        Ok(())
    })?;
    Ok(r)
}

/// `RSESSION.ACK session cursor`
pub fn parse_ack<'a>(argv: &[&'a [u8]]) -> Result<(&'a [u8], u64), CmdError> {
    args::arity(argv, |n| n == 3, "rsession.ack")?;
    Ok((name(argv)?, args::at_least(argv[2], "cursor", 0)? as u64))
}

/// `RSESSION.CANCEL session request`
pub fn parse_cancel<'a>(argv: &[&'a [u8]]) -> Result<(&'a [u8], u64), CmdError> {
    args::arity(argv, |n| n == 3, "rsession.cancel")?;
    let request = args::parse_i64(argv[2])
        .filter(|n| *n >= 0)
        .ok_or(CmdError::NotInteger("request id"))?;
    Ok((name(argv)?, request as u64))
}

/// `RSESSION.CLOSE session` / `RSESSION.INFO session`
pub fn parse_named<'a>(argv: &[&'a [u8]], cmd: &'static str) -> Result<&'a [u8], CmdError> {
    args::arity(argv, |n| n == 2, cmd)?;
    name(argv)
}

/// `RSESSION.LIST`
pub fn parse_list(argv: &[&[u8]]) -> Result<(), CmdError> {
    args::arity(argv, |n| n == 1, "rsession.list")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(
        kind: OutcomeKind,
        request: Option<u64>,
        grant: Option<&'static str>,
    ) -> New<&'static str> {
        New {
            kind,
            request,
            key: Some(b"k"[..].into()),
            object: Some("lock"),
            value: Reply::Int(1),
            grant,
        }
    }

    #[test]
    fn outcomes_are_read_after_a_cursor_and_acknowledged_by_it() {
        let mut o: Outcomes<&'static str> = Outcomes::default();
        assert_eq!(o.push(new(OutcomeKind::Granted, Some(7), Some("g7"))), 1);
        assert_eq!(o.push(new(OutcomeKind::Timeout, Some(8), None)), 2);
        assert_eq!(o.push(new(OutcomeKind::Granted, Some(9), Some("g9"))), 3);
        assert_eq!(
            o.after(0, 10).map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(o.after(1, 1).map(|e| e.seq).collect::<Vec<_>>(), vec![2]);
        assert!(o.has_after(2) && !o.has_after(3));
        // A reconnecting listener re-reads from its own cursor: nothing acknowledged is lost.
        assert_eq!(o.ack(2, drop), 2);
        assert_eq!(o.acked(), 2);
        assert_eq!(o.after(0, 10).map(|e| e.seq).collect::<Vec<_>>(), vec![3]);
        assert_eq!(o.ack(99, drop), 1, "a cursor past the end acknowledges all");
        assert_eq!(o.acked(), 3);
        assert!(o.is_empty());
        let lost = New {
            kind: OutcomeKind::Lost,
            request: None,
            key: Some(b"k"[..].into()),
            object: Some("lock"),
            value: Reply::Bulk(b"o".to_vec()),
            grant: None,
        };
        assert_eq!(o.push(lost), 4);
        assert_eq!(
            o.read(3, 10, drop),
            Reply::Array(vec![Reply::Array(vec![
                Reply::Int(4),
                Reply::Bulk(b"lost".to_vec()),
                Reply::Nil,
                Reply::Bulk(b"k".to_vec()),
                Reply::Bulk(b"o".to_vec()),
                Reply::Bulk(b"lock".to_vec()),
            ])])
        );
    }

    #[test]
    fn a_grant_a_read_returned_is_no_longer_undone() {
        let mut o: Outcomes<&'static str> = Outcomes::default();
        o.push(new(OutcomeKind::Granted, Some(1), Some("g1")));
        o.push(new(OutcomeKind::Granted, Some(2), Some("g2")));
        o.push(new(OutcomeKind::Granted, Some(3), Some("g3")));
        // The read returns only the first two (COUNT 2): the third was never delivered.
        let Reply::Array(shown) = o.read(0, 2, drop) else {
            panic!("an array")
        };
        assert_eq!(shown.len(), 2);
        // Read again from the same cursor (a listener that reconnected): still delivered.
        o.read(0, 1, drop);
        let undo: Vec<_> = o.drain().filter_map(|e| e.outcome.grant).collect();
        assert_eq!(
            undo,
            vec!["g3"],
            "only the grant no read returned is undone"
        );
    }

    #[test]
    fn lost_outcomes_past_the_backlog_become_one_overflow() {
        let mut o: Outcomes<&'static str> = Outcomes::default();
        let lost = || New {
            kind: OutcomeKind::Lost,
            request: None,
            key: Some(b"k"[..].into()),
            object: Some("lock"),
            value: Reply::Bulk(b"o".to_vec()),
            grant: None,
        };
        assert!(o.push_lost(lost(), 2));
        assert!(o.push_lost(lost(), 2));
        for _ in 0..1000 {
            assert!(!o.push_lost(lost(), 2));
        }
        let kinds: Vec<OutcomeKind> = o.after(0, 100).map(|e| e.outcome.kind).collect();
        assert_eq!(
            kinds,
            vec![OutcomeKind::Lost, OutcomeKind::Lost, OutcomeKind::Overflow]
        );
        // A request's own outcome is never dropped.
        o.push(new(OutcomeKind::Granted, Some(5), Some("g5")));
        assert_eq!(o.len(), 4);
        // Once acknowledged, lost outcomes are kept again.
        o.ack(4, drop);
        assert!(o.push_lost(lost(), 2));
    }

    #[test]
    fn limits_are_errors() {
        assert!(may_queue(0, 0, 1, 1).is_ok());
        assert!(matches!(may_queue(1, 0, 1, 5), Err(CmdError::Limit(_))));
        assert!(matches!(may_queue(0, 5, 9, 5), Err(CmdError::Limit(_))));
    }

    #[test]
    fn arguments() {
        let v =
            |w: &[&'static str]| -> Vec<&'static [u8]> { w.iter().map(|s| s.as_bytes()).collect() };
        assert_eq!(
            parse_open(&v(&["rsession.open", "s", "5000"])),
            Ok((&b"s"[..], 5000))
        );
        assert_eq!(
            parse_open(&v(&["rsession.open", "", "5000"])),
            Err(CmdError::Syntax(
                "the session name must not be empty".into()
            ))
        );
        assert_eq!(
            parse_open(&v(&["rsession.open", "s", "-1"])),
            Err(CmdError::TooSmall("grace_ms", 0))
        );
        assert_eq!(
            parse_read(&v(&[
                "rsession.read",
                "s",
                "3",
                "block",
                "100",
                "COUNT",
                "5"
            ])),
            Ok(ReadArgs {
                session: b"s",
                cursor: 3,
                count: 5,
                block_ms: Some(100)
            })
        );
        assert_eq!(
            parse_read(&v(&["rsession.read", "s", "x"])),
            Err(CmdError::NotInteger("cursor"))
        );
        assert_eq!(
            parse_cancel(&v(&["rsession.cancel", "s", "12"])),
            Ok((&b"s"[..], 12))
        );
        assert_eq!(
            parse_ack(&v(&["rsession.ack", "s"])),
            Err(CmdError::Arity("rsession.ack"))
        );
        assert_eq!(parse_list(&v(&["rsession.list"])), Ok(()));
    }
}

//! `RLOCK.TOP [WAITS|HELD|HANDOFFS] [COUNT n]`: what it reports and how many rows.

use crate::core::args::{self, Opt};
use crate::core::error::CmdError;

/// Which ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The objects with the most waits started over the recent window.
    Waits,
    /// The longest-held live holds.
    Held,
    /// The objects with the most hand-offs (grants to a queued waiter) over the recent window.
    Handoffs,
}

impl Report {
    const ALL: [Report; 3] = [Report::Waits, Report::Held, Report::Handoffs];

    pub fn name(self) -> &'static str {
        match self {
            Report::Waits => "WAITS",
            Report::Held => "HELD",
            Report::Handoffs => "HANDOFFS",
        }
    }
}

/// Rows without `COUNT`.
pub const DEFAULT_COUNT: usize = 10;
/// The most rows one call may ask for: each HELD row reads its keys (about a microsecond),
/// so the bound keeps a call short whatever the caller asks.
pub const MAX_COUNT: i64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Top {
    pub report: Report,
    pub count: usize,
}

const OPTS: [Opt; 4] = [
    Opt {
        name: "WAITS",
        values: 0,
        needs: "",
    },
    Opt {
        name: "HELD",
        values: 0,
        needs: "",
    },
    Opt {
        name: "HANDOFFS",
        values: 0,
        needs: "",
    },
    Opt {
        name: "COUNT",
        values: 1,
        needs: "COUNT needs a number",
    },
];

/// `RLOCK.TOP [WAITS|HELD|HANDOFFS] [COUNT n]`, the words in any order, case-insensitive.
pub fn parse(argv: &[&[u8]]) -> Result<Top, CmdError> {
    args::arity(argv, |n| n <= 4, "rlock.top")?;
    let mut report = None;
    let mut count = DEFAULT_COUNT;
    let known: Vec<&Opt> = OPTS.iter().collect();
    args::options(&argv[1..], &known, |k, v| {
        if let Some(&r) = Report::ALL.get(k) {
            if report.is_some() {
                return Err(CmdError::Syntax(
                    "WAITS, HELD and HANDOFFS exclude one another".into(),
                ));
            }
            report = Some(r);
            return Ok(());
        }
        let n = args::at_least(v[0], "count", 1)?;
        if n > MAX_COUNT {
            return Err(CmdError::TooLarge("count", MAX_COUNT));
        }
        count = n as usize;
        Ok(())
    })?;
    Ok(Top {
        report: report.unwrap_or(Report::Waits),
        count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &[&str]) -> Result<Top, CmdError> {
        let argv: Vec<&[u8]> = std::iter::once("rlock.top")
            .chain(words.iter().copied())
            .map(str::as_bytes)
            .collect();
        parse(&argv)
    }

    #[test]
    fn defaults_words_and_counts() {
        let top = |report, count| Ok(Top { report, count });
        assert_eq!(p(&[]), top(Report::Waits, 10));
        assert_eq!(p(&["held"]), top(Report::Held, 10));
        assert_eq!(p(&["HANDOFFS", "COUNT", "3"]), top(Report::Handoffs, 3));
        assert_eq!(p(&["count", "1000", "Waits"]), top(Report::Waits, 1000));
    }

    #[test]
    fn bad_arguments_are_refused_with_a_reason() {
        let e = |w: &[&str]| p(w).unwrap_err().to_string();
        assert_eq!(e(&["COUNT", "0"]), "ERR count must be at least 1");
        assert_eq!(e(&["COUNT", "1001"]), "ERR count must be at most 1000");
        assert_eq!(
            e(&["COUNT", "x"]),
            "ERR count is not an integer or out of range"
        );
        assert_eq!(e(&["COUNT"]), "ERR syntax error, COUNT needs a number");
        assert_eq!(
            e(&["HELD", "WAITS"]),
            "ERR syntax error, WAITS, HELD and HANDOFFS exclude one another"
        );
        assert_eq!(e(&["HELD", "HELD"]), "ERR syntax error, HELD given twice");
        assert_eq!(e(&["SLOW"]), "ERR syntax error, unknown option 'SLOW'");
        assert_eq!(
            e(&["HELD", "COUNT", "1", "X"]),
            "ERR wrong number of arguments for 'rlock.top' command"
        );
    }
}

//! Every redis-cli transcript in README.md, docs/commands.md and docs/operations.md, pasted into
//! a server with the module, must get the replies the page shows: the docs cannot drift from
//! the server.
//!
//! What is replayed. A fenced block is a transcript when it has a command line:
//! `127.0.0.1:6390> CMD` (the reader's redis-cli) or `$ redis-cli -p 6390 CMD` (another
//! terminal). The lines after a command, up to the next command, are its reply in redis-cli's
//! terminal format (`(integer) 1`, `(nil)`, `(error) ...`, `"bulk"`, ` 1) ...`, `OK`,
//! `QUEUED`). Prompt commands run in order on one connection; each `$ redis-cli` command on a
//! connection of its own. A command shown with its reply must reply within 5 s (× scale),
//! plus the time redis-cli shows it took (`(1.02s)`, a line it prints for commands of half a
//! second or more) if the page shows one: a command that would hang a reader pasting the page
//! line by line fails.
//!
//! Waiting terminals. A command shown without a reply (a `$ redis-cli` line, or a prompt line
//! that ends its block) waits on its own connection: the test sends it and goes on only once
//! the server has parked it (`CLIENT LIST ID` shows flag `b`), so the next line finds it
//! queued. Its reply is checked where the page shows it:
//! - `<!-- transcript: reply -->` before a block: that block is the reply of the oldest
//!   command still waiting;
//! - `<!-- transcript: reply (integer) 1 -->`: a one-line reply the prose gives ("its
//!   terminal prints `(integer) 1`"), again for the oldest command still waiting.
//!
//! The reply must come within 10 s (× `RLOCK_TIME_SCALE`). When its server is dropped, every
//! command still waiting must still be parked: a reply the page never shows fails the test.
//!
//! Servers. Each section (text under a heading) replays on a fresh server, so a reader can
//! paste any one example into a fresh `make run`. `<!-- transcript: continues -->` after a
//! heading replays that section on the server of the section before, after it (an example
//! that goes on from the one above). `<!-- transcript: skip (reason) -->` before a block shows
//! it without replaying it: for what cannot be replayed, used sparingly.
//!
//! Masking: three rules, nothing else. Every other value must match exactly.
//! 1. Times and tokens: an integer shown as 1000 or more (TTLs and remaining leases in ms,
//!    fencing tokens, which carry the clock as ms × 1000) matches a server integer within a
//!    quarter of it. Counts, `-1`/`-2` and the like are below 1000 and match exactly; a lease
//!    of 30000 shown for one of 60000 still fails.
//! 2. Permit ids: a 32-hex-digit bulk string the page shows stands for the id the server
//!    handed out (ids are random). The first time it is seen it is bound to the server's id;
//!    from then on, commands and replies of the page use the server's id in its place, so a
//!    later `RSEM.RELEASE pool ID <id>` releases the real permit and a reply naming the id
//!    must name the real one.
//! 3. Ages: the integer after an `"age_ms"` field (`RLOCK.TOP HELD`: how long a hold has
//!    lasted, which depends on how fast the page is pasted) matches any age of 0 or more.
//!
//! Ids, ports, client ids and memory figures appear in no transcript; a page that shows one
//! needs a rule here first. A mismatch names the file and line of the command and of the
//! first reply line that differs, with both replies in full.

mod parse;
mod reply;

use parse::{Conn, Section, Shown, Step};
use reply::Bindings;
use rlock_tests::redis::ConnectionLike;
use rlock_tests::*;
use std::collections::VecDeque;
use std::time::Duration;

/// A command shown waiting, sent on its own connection.
struct Waiting {
    line: usize,
    what: String,
    pending: Pending,
}

/// One page replayed section by section; mismatches are collected, and the test fails with all
/// of them at the end.
struct Replay<'a> {
    file: &'a str,
    server: Option<Server>,
    main: Option<redis::Connection>,
    admin: Option<redis::Connection>,
    waiting: VecDeque<Waiting>,
    bindings: Bindings,
    failures: Vec<String>,
    /// The heading of the section being replayed, for failure messages.
    heading: String,
}

impl<'a> Replay<'a> {
    fn new(file: &'a str) -> Replay<'a> {
        Replay {
            file,
            server: None,
            main: None,
            admin: None,
            waiting: VecDeque::new(),
            bindings: Bindings::default(),
            failures: Vec::new(),
            heading: String::new(),
        }
    }

    fn fail(&mut self, line: usize, msg: String) {
        let (file, heading) = (self.file, &self.heading);
        self.failures
            .push(format!("{file}:{line} (under \"{heading}\"): {msg}"));
    }

    /// End the current server: every command still waiting must still be parked.
    fn end_server(&mut self) {
        for w in std::mem::take(&mut self.waiting) {
            let admin = self.admin.as_mut().unwrap();
            if !parked(admin, w.pending.id) {
                let got = match w.pending.outcome_within(Duration::from_secs(1)) {
                    Ok(v) => reply::lines(&v).join("\n"),
                    Err(e) => format!("(connection failed: {e})"),
                };
                self.fail(
                    w.line,
                    format!(
                        "`{}` replied, but the page shows no reply for it (show it, with \
                         `<!-- transcript: reply ... -->` where it arrives):\n{got}",
                        w.what
                    ),
                );
            }
        }
        self.main = None;
        self.admin = None;
        self.server = None;
    }

    fn section(&mut self, s: &Section) {
        if !s.continues || self.server.is_none() {
            self.end_server();
            let server = Server::start();
            self.main = Some(server.conn());
            self.admin = Some(server.conn());
            self.server = Some(server);
        }
        self.heading = format!("{}, line {}", s.heading, s.line);
        for step in &s.steps {
            match step {
                Step::Command {
                    line,
                    args,
                    conn,
                    reply,
                    took,
                } => self.command(*line, args, *conn, reply, *took),
                Step::Reply { line, reply } => self.reply(*line, reply),
            }
        }
    }

    fn command(
        &mut self,
        line: usize,
        args: &[String],
        conn: Conn,
        shown: &[Shown],
        took: Option<f64>,
    ) {
        let args: Vec<String> = args.iter().map(|a| self.bindings.apply(a)).collect();
        let what = args.join(" ");
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a);
        }
        let server = self.server.as_ref().unwrap();
        let limit = margin(Duration::from_secs(5)) + Duration::from_secs_f64(took.unwrap_or(0.0));
        let answered = match conn {
            Conn::Main => Some(within(self.main.as_mut().unwrap(), &cmd, limit)),
            Conn::Once => Some(within(&mut server.conn(), &cmd, limit)),
            Conn::Waiting => None,
        };
        match conn {
            Conn::Main | Conn::Once => match answered.unwrap() {
                Ok(v) => self.check(line, &what, shown, &v),
                Err(e) => {
                    let why = if e.is_timeout() {
                        String::new()
                    } else {
                        format!(" ({e})")
                    };
                    self.fail(
                        line,
                        format!(
                            "`{what}` did not reply within {limit:?}{why}: pasted line by line, \
                             the page waits here"
                        ),
                    );
                    // Go on with a connection that is not stuck in the command.
                    self.main = Some(self.server.as_ref().unwrap().conn());
                }
            },
            Conn::Waiting => {
                let pending = Pending::send(server, &cmd);
                let id = pending.id;
                let admin = self.admin.as_mut().unwrap();
                let limit = margin(Duration::from_secs(10));
                let deadline = std::time::Instant::now() + limit;
                // Parked, or answered at once (then the page is wrong: it shows it waiting).
                while !parked(admin, id) {
                    if std::time::Instant::now() > deadline {
                        let got = match pending.outcome_within(Duration::from_secs(1)) {
                            Ok(v) => reply::lines(&v).join("\n"),
                            Err(e) => format!("(no reply: {e})"),
                        };
                        self.fail(
                            line,
                            format!("`{what}` is shown waiting, but it did not wait:\n{got}"),
                        );
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                self.waiting.push_back(Waiting {
                    line,
                    what,
                    pending,
                });
            }
        }
    }

    /// The reply of the oldest command still waiting, shown at `line`.
    fn reply(&mut self, line: usize, shown: &[Shown]) {
        let Some(w) = self.waiting.pop_front() else {
            self.fail(
                line,
                "a reply is shown here, but no command is waiting".into(),
            );
            return;
        };
        match w.pending.outcome_within(margin(Duration::from_secs(10))) {
            Ok(v) => {
                let what = format!("{} (sent at line {})", w.what, w.line);
                self.check(line, &what, shown, &v)
            }
            Err(e) => self.fail(
                line,
                format!(
                    "the reply of `{}` (line {}) is shown here, but none came: {e}",
                    w.what, w.line
                ),
            ),
        }
    }

    fn check(&mut self, line: usize, what: &str, shown: &[Shown], got: &Value) {
        let want: Vec<String> = shown.iter().map(|s| self.bindings.apply(&s.text)).collect();
        let real = reply::lines(got);
        if let Some(k) = reply::compare(&want, &real, &mut self.bindings) {
            let at = shown.get(k).map_or(line, |s| s.line);
            let diff = |v: &[String]| {
                v.iter()
                    .enumerate()
                    .map(|(i, l)| format!("  {} {l}", if i == k { ">" } else { " " }))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            self.fail(
                line,
                format!(
                    "`{what}`: the reply differs at {}:{at}\n  page:\n{}\n  server:\n{}",
                    self.file,
                    diff(&want),
                    diff(&real)
                ),
            );
        }
    }
}

/// `cmd`'s reply on `conn`, or the error of a connection that gave none within `limit`.
fn within(
    conn: &mut redis::Connection,
    cmd: &redis::Cmd,
    limit: Duration,
) -> redis::RedisResult<Value> {
    conn.set_read_timeout(Some(limit)).unwrap();
    conn.req_command(cmd)
}

/// Whether client `id` is blocked (parked by a command) right now.
fn parked(admin: &mut redis::Connection, id: i64) -> bool {
    let list = string(admin, &cmd!("CLIENT", "LIST", "ID", id));
    list.split_whitespace()
        .find_map(|f| f.strip_prefix("flags="))
        .is_some_and(|f| f.contains('b'))
}

/// Replay every transcript of `file` (relative to the workspace root).
fn replay(file: &str) {
    let text = std::fs::read_to_string(workspace_root().join(file))
        .unwrap_or_else(|e| panic!("read {file}: {e}"));
    let sections = parse::page(file, &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!sections.is_empty(), "{file} has no transcript");
    let mut r = Replay::new(file);
    for s in &sections {
        r.section(s);
    }
    r.end_server();
    let commands: usize = sections
        .iter()
        .flat_map(|s| &s.steps)
        .filter(|s| matches!(s, Step::Command { .. }))
        .count();
    assert!(
        r.failures.is_empty(),
        "{} of {commands} transcript commands in {file} do not get the reply the page shows:\n\n{}",
        r.failures.len(),
        r.failures.join("\n\n")
    );
}

#[test]
fn readme_transcripts_get_the_replies_shown() {
    replay("README.md");
}

#[test]
fn command_reference_transcripts_get_the_replies_shown() {
    replay("docs/commands.md");
}

#[test]
fn operations_guide_transcripts_get_the_replies_shown() {
    replay("docs/operations.md");
}

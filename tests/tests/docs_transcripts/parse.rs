//! A page's redis-cli transcripts as steps to replay: which commands run where, and which
//! replies the page shows for them (see `main.rs` for the conventions it reads).

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conn {
    /// The page's own redis-cli session (`127.0.0.1:6390> CMD` followed by its reply).
    Main,
    /// A terminal of its own whose reply the same block shows (`$ redis-cli -p 6390 CMD`
    /// followed by its reply).
    Once,
    /// A terminal of its own that waits: `$ redis-cli -p 6390 CMD` with no reply, or a
    /// prompt line that ends its block with no reply. Its reply is shown later, by a `reply`
    /// directive, or never (it is still waiting when the page ends).
    Waiting,
}

/// One line of the page shown as a reply, with its line number.
#[derive(Debug, Clone)]
pub struct Shown {
    pub line: usize,
    pub text: String,
}

#[derive(Debug, Clone)]
pub enum Step {
    Command {
        line: usize,
        args: Vec<String>,
        conn: Conn,
        reply: Vec<Shown>,
        /// The seconds redis-cli shows the command took (`(1.02s)`), if the page shows them.
        took: Option<f64>,
    },
    /// The reply the oldest command still waiting gets here.
    Reply { line: usize, reply: Vec<Shown> },
}

/// The transcripts under one heading: replayed on a server of their own, unless the section
/// says it continues the one before.
#[derive(Debug, Default)]
pub struct Section {
    pub heading: String,
    pub line: usize,
    pub continues: bool,
    pub steps: Vec<Step>,
}

const PROMPT: &str = "127.0.0.1:6390";
const DIRECTIVE: &str = "<!-- transcript:";

/// The command of a prompt line (`127.0.0.1:6390> CMD`, `127.0.0.1:6390[1]> CMD`,
/// `127.0.0.1:6390(TX)> CMD`), if it is one.
fn prompt_command(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(PROMPT)?;
    let gt = rest.find("> ")?;
    let between = &rest[..gt];
    let ok = between.is_empty() || between.chars().all(|c| "[]()TX0123456789".contains(c));
    ok.then(|| rest[gt + 2..].trim())
}

/// The command of `$ redis-cli -p 6390 CMD`, if the line is one.
fn shell_command(line: &str) -> Option<&str> {
    line.strip_prefix("$ redis-cli -p 6390 ").map(str::trim)
}

/// redis-cli prints how long a command took on a line of its own (`(1.02s)`) when it took half
/// a second or more; it is not part of the reply.
fn timing(line: &str) -> Option<f64> {
    line.strip_prefix('(')?.strip_suffix("s)")?.parse().ok()
}

fn is_timing(line: &str) -> bool {
    timing(line).is_some()
}

/// Split a command line as redis-cli does: words separated by spaces, `"..."` with
/// backslash escapes, `'...'` taken as is.
pub fn split_args(line: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return Ok(args);
        };
        let mut arg = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unbalanced quotes in: {line}")),
                    Some(c) if c == first => break,
                    Some('\\') if first == '"' => match chars.next() {
                        Some('n') => arg.push('\n'),
                        Some('r') => arg.push('\r'),
                        Some('t') => arg.push('\t'),
                        Some(c) => arg.push(c),
                        None => return Err(format!("unbalanced quotes in: {line}")),
                    },
                    Some(c) => arg.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                arg.push(c);
                chars.next();
            }
        }
        args.push(arg);
    }
}

/// A directive `<!-- transcript: WORD rest -->` on a line of its own.
enum Directive {
    /// The next fenced block is shown but not replayed.
    Skip,
    /// This section replays on the server of the section before, after it.
    Continues,
    /// The next fenced block is the reply of the oldest command still waiting.
    ReplyBlock,
    /// This one-line reply (the page says it in prose) is the reply of the oldest command
    /// still waiting.
    Reply(String),
}

fn directive(line: &str, at: &str) -> Result<Option<Directive>, String> {
    let Some(rest) = line.trim().strip_prefix(DIRECTIVE) else {
        return Ok(None);
    };
    let body = rest
        .strip_suffix("-->")
        .ok_or_else(|| format!("{at}: a transcript directive must end on its line with -->"))?
        .trim();
    let (word, arg) = body.split_once(' ').unwrap_or((body, ""));
    let arg = arg.trim();
    Ok(Some(match word {
        "skip" if arg.starts_with('(') && arg.ends_with(')') => Directive::Skip,
        "skip" => return Err(format!("{at}: `transcript: skip` needs a (reason)")),
        "continues" => Directive::Continues,
        "reply" if arg.is_empty() => Directive::ReplyBlock,
        "reply" => Directive::Reply(arg.to_string()),
        other => return Err(format!("{at}: unknown transcript directive `{other}`")),
    }))
}

/// Every section of `text` (the file `file`) that holds a transcript, in page order.
pub fn page(file: &str, text: &str) -> Result<Vec<Section>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut sections: Vec<Section> = Vec::new();
    let mut current = Section {
        heading: "(top of the page)".into(),
        line: 1,
        ..Section::default()
    };
    let mut skip_next = false;
    let mut reply_next: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let at = format!("{file}:{}", i + 1);
        if line.starts_with('#') {
            if reply_next.is_some() || skip_next {
                return Err(format!(
                    "{at}: a directive before this heading names no block"
                ));
            }
            let done = std::mem::take(&mut current);
            if !done.steps.is_empty() || done.continues {
                sections.push(done);
            }
            current = Section {
                heading: line.trim_start_matches('#').trim().to_string(),
                line: i + 1,
                ..Section::default()
            };
            i += 1;
            continue;
        }
        match directive(line, &at)? {
            Some(Directive::Skip) => skip_next = true,
            Some(Directive::Continues) => {
                if !current.steps.is_empty() {
                    return Err(format!(
                        "{at}: `transcript: continues` must come before the section's first transcript"
                    ));
                }
                current.continues = true;
            }
            Some(Directive::ReplyBlock) => reply_next = Some(i + 1),
            Some(Directive::Reply(text)) => current.steps.push(Step::Reply {
                line: i + 1,
                reply: vec![Shown { line: i + 1, text }],
            }),
            None => {}
        }
        if !line.starts_with("```") {
            i += 1;
            continue;
        }
        // A fenced block: its lines up to the closing fence.
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].starts_with("```") {
            end += 1;
        }
        if end == lines.len() {
            return Err(format!("{at}: the code block never ends"));
        }
        let body: Vec<(usize, &str)> = (start..end).map(|n| (n + 1, lines[n])).collect();
        i = end + 1;
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if let Some(d) = reply_next.take() {
            let reply = body
                .iter()
                .filter(|(_, l)| !is_timing(l))
                .map(|&(line, l)| Shown {
                    line,
                    text: l.to_string(),
                })
                .collect();
            current.steps.push(Step::Reply { line: d, reply });
            continue;
        }
        block(file, &body, &mut current.steps)?;
    }
    if reply_next.is_some() || skip_next {
        return Err(format!("{file}: a directive at the end names no block"));
    }
    if !current.steps.is_empty() {
        sections.push(current);
    }
    Ok(sections)
}

/// The steps of one fenced block; a block with no command line is not a transcript.
fn block(file: &str, body: &[(usize, &str)], steps: &mut Vec<Step>) -> Result<(), String> {
    let is_command = |l: &str| prompt_command(l).is_some() || shell_command(l).is_some();
    if !body.iter().any(|(_, l)| is_command(l)) {
        return Ok(());
    }
    let mut k = 0;
    while k < body.len() {
        let (line, text) = body[k];
        let at = format!("{file}:{line}");
        let (cmd, shell) = match (prompt_command(text), shell_command(text)) {
            (Some(c), _) => (c, false),
            (None, Some(c)) => (c, true),
            (None, None) => {
                return Err(format!(
                    "{at}: a reply line with no command before it in its block: {text}"
                ))
            }
        };
        let args = split_args(cmd).map_err(|e| format!("{at}: {e}"))?;
        if args.is_empty() {
            return Err(format!("{at}: an empty command"));
        }
        k += 1;
        let mut reply = Vec::new();
        let mut took = None;
        while k < body.len() && !is_command(body[k].1) {
            if let Some(t) = timing(body[k].1) {
                took = Some(t);
            } else {
                reply.push(Shown {
                    line: body[k].0,
                    text: body[k].1.to_string(),
                });
            }
            k += 1;
        }
        let conn = match (shell, reply.is_empty(), k == body.len()) {
            (true, true, _) => Conn::Waiting,
            (true, false, _) => Conn::Once,
            (false, true, true) => Conn::Waiting,
            (false, true, false) => {
                return Err(format!(
                    "{at}: the command shows no reply, yet is not the last line of its block"
                ))
            }
            (false, false, _) => Conn::Main,
        };
        steps.push(Step::Command {
            line,
            args,
            conn,
            reply,
            took,
        });
    }
    Ok(())
}

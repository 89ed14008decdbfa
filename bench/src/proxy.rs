//! A counting proxy: a loopback TCP forwarder between clients and the server that reads the
//! RESP traffic going through it and reports each *flight*: the commands a connection sent from
//! a moment it had no reply outstanding until every one of them was answered. A client that
//! pipelines a batch sends it as one flight; one that waits for a reply before sending the next
//! command sends one flight per command. So flights are the round trips the client really made,
//! counted from its traffic, whatever its code says it does.
//!
//! Both directions are parsed *before* they are forwarded, so the count cannot be fooled by
//! timing: a reply is counted before the client can see it, and a command before the server
//! can answer it. One caveat: a pipeline larger than the sockets' buffers reaches the proxy in
//! pieces, and if the server answers a piece before the next arrives, the count shows two
//! flights where the client sent one (seen: 10,000 renewals as 698 + 9,302 on a busy 2-core
//! machine). The proxy reads with a buffer, and asks for a receive buffer, of
//! [`RECEIVE_BUFFER`] to keep such pipelines whole.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The proxy's read size and requested socket receive buffer: room for the largest pipeline
/// a scenario sends (the watchdog's 10,000 renewals are about 900 KB).
const RECEIVE_BUFFER: usize = 4 << 20;

/// Ask for a receive buffer of `bytes` on `listener` (its accepted sockets inherit it; the
/// kernel caps it at `net.core.rmem_max`, and a refusal only leaves the default).
fn set_receive_buffer(listener: &TcpListener, bytes: usize) {
    use std::os::fd::AsRawFd;
    let size = bytes as libc::c_int;
    // SAFETY: a valid socket fd owned by `listener`, and a pointer to a c_int with its size.
    unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// One round trip of one connection.
#[derive(Debug, Clone)]
pub struct Flight {
    /// Calls per command name (lower case).
    pub calls: HashMap<String, u64>,
    /// When the proxy read its first command and its last reply.
    pub start: Instant,
    pub end: Instant,
}

impl Flight {
    pub fn calls_of(&self, name: &str) -> u64 {
        self.calls.get(name).copied().unwrap_or(0)
    }
}

pub struct Proxy {
    pub port: u16,
    flights: Receiver<Flight>,
}

impl Proxy {
    /// Forward 127.0.0.1:<new port> to `to_port`; runs until the process ends (its threads are
    /// blocked in accept or read, holding nothing but their sockets).
    pub fn start(to_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listen");
        // A receive buffer that holds a whole pipeline (accepted sockets inherit it), so that
        // one the client writes without waiting reaches the proxy without waiting either.
        set_receive_buffer(&listener, RECEIVE_BUFFER);
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to_port)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let state = Arc::new(Mutex::new(Conn::default()));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (st, tx2) = (state.clone(), tx.clone());
                std::thread::spawn(move || pump(c2, s2, &st, &tx2, true));
                let tx2 = tx.clone();
                std::thread::spawn(move || pump(server, client, &state, &tx2, false));
            }
        });
        Proxy { port, flights: rx }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The next completed flight in which `name` was called, waiting at most `limit`.
    pub fn next_flight_with(&self, name: &str, limit: Duration) -> Flight {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let f = self
                .flights
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no flight calling {name} within {limit:?}"));
            if f.calls_of(name) > 0 {
                return f;
            }
        }
    }

    /// The next completed flight in which `name` was called, if one completes within `limit`.
    pub fn flight_within(&self, name: &str, limit: Duration) -> Option<Flight> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let f = self.flights.recv_timeout(left).ok()?;
            if f.calls_of(name) > 0 {
                return Some(f);
            }
        }
    }

    /// Every flight completed so far.
    pub fn drain(&self) -> Vec<Flight> {
        self.flights.try_iter().collect()
    }
}

/// One proxied connection: what each direction has not parsed yet, and the open flight.
#[derive(Default)]
struct Conn {
    from_client: Vec<u8>,
    from_server: Vec<u8>,
    outstanding: u64,
    open: Option<(Instant, HashMap<String, u64>)>,
}

/// Copy `from` to `to`, parsing each chunk into `state` first; `requests`: client → server.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    state: &Mutex<Conn>,
    tx: &Sender<Flight>,
    requests: bool,
) {
    let mut buf = vec![0u8; RECEIVE_BUFFER];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut c = state.lock().unwrap();
            if requests {
                c.from_client.extend_from_slice(&buf[..n]);
                // Parsed up to here; what follows waits for more bytes.
                let mut at = 0;
                while let Some(len) = value_len(&c.from_client[at..]) {
                    let name = command_name(&c.from_client[at..at + len]);
                    at += len;
                    if c.outstanding == 0 {
                        c.open = Some((Instant::now(), HashMap::new()));
                    }
                    c.outstanding += 1;
                    if let Some((_, calls)) = c.open.as_mut() {
                        *calls.entry(name).or_default() += 1;
                    }
                }
                c.from_client.drain(..at);
            } else {
                c.from_server.extend_from_slice(&buf[..n]);
                let mut at = 0;
                while let Some(len) = value_len(&c.from_server[at..]) {
                    // RESP3 pushes are not replies.
                    let push = c.from_server[at] == b'>';
                    at += len;
                    if push || c.outstanding == 0 {
                        continue;
                    }
                    c.outstanding -= 1;
                    if c.outstanding == 0 {
                        if let Some((t0, calls)) = c.open.take() {
                            let _ = tx.send(Flight {
                                calls,
                                start: t0,
                                end: Instant::now(),
                            });
                        }
                    }
                }
                c.from_server.drain(..at);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// The length in bytes of the complete RESP value at the start of `b`, or `None` while it is
/// incomplete.
pub fn value_len(b: &[u8]) -> Option<usize> {
    let line_end = |from: usize| -> Option<usize> {
        b.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let &kind = b.first()?;
    let end = line_end(1)?;
    let head = std::str::from_utf8(&b[1..end]).ok();
    let after = end + 2;
    let number = || head.and_then(|h| h.parse::<i64>().ok());
    match kind {
        // Simple strings, errors, integers, null, booleans, doubles, big numbers.
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Some(after),
        // Bulk strings, verbatim strings, bulk errors: length, then that many bytes and CRLF.
        b'$' | b'=' | b'!' => {
            let n = number()?;
            if n < 0 {
                return Some(after);
            }
            let total = after + n as usize + 2;
            (b.len() >= total).then_some(total)
        }
        // Arrays, sets, pushes: n values; maps and attributes: 2n values (an attribute is
        // followed by the value it describes).
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number()?;
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut at = after;
            for _ in 0..items.max(0) {
                at += value_len(&b[at..])?;
            }
            if kind == b'|' {
                at += value_len(&b[at..])?;
            }
            Some(at)
        }
        // Anything else would be an inline command (a client that is not a RESP client): the
        // whole line.
        _ => Some(after),
    }
}

/// The name of the command in a complete request (`*n`, then `$len name`), lower case.
fn command_name(req: &[u8]) -> String {
    let mut lines = req.split(|&c| c == b'\n');
    let _count = lines.next();
    let _len = lines.next();
    lines
        .next()
        .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).to_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_whole_values_only() {
        assert_eq!(value_len(b":1\r\n"), Some(4));
        assert_eq!(value_len(b":1\r"), None);
        assert_eq!(value_len(b"$3\r\nabc\r\n+OK\r\n"), Some(9));
        assert_eq!(value_len(b"$3\r\nab"), None);
        assert_eq!(value_len(b"$-1\r\n"), Some(5));
        assert_eq!(value_len(b"*2\r\n:1\r\n$1\r\nx\r\n"), Some(15));
        assert_eq!(value_len(b"*2\r\n:1\r\n"), None);
        assert_eq!(value_len(b"%1\r\n+a\r\n:1\r\n"), Some(12));
        assert_eq!(value_len(b"*-1\r\n"), Some(5));
        let req = b"*3\r\n$11\r\nRLOCK.RENEW\r\n$1\r\nk\r\n$2\r\n10\r\n";
        assert_eq!(value_len(req), Some(req.len()));
        assert_eq!(command_name(req), "rlock.renew");
    }

    /// One pipeline is one flight; the same commands each awaited are one flight each.
    #[test]
    fn counts_round_trips_not_commands() {
        let server = rlock_tests::Server::with(rlock_tests::ServerOptions {
            module: false,
            ..Default::default()
        });
        let proxy = Proxy::start(server.port);
        let mut c = crate::protocols::connection(&proxy.url());
        let mut pipe = redis::pipe();
        for i in 0..1000 {
            pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
        }
        let _: () = pipe.query(&mut c).unwrap();
        let f = proxy.next_flight_with("set", Duration::from_secs(10));
        assert_eq!(f.calls_of("set"), 1000);
        for i in 0..3 {
            let _: i64 = redis::cmd("INCR")
                .arg(format!("n{i}"))
                .query(&mut c)
                .unwrap();
        }
        for _ in 0..3 {
            let f = proxy.next_flight_with("incr", Duration::from_secs(10));
            assert_eq!(f.calls_of("incr"), 1);
        }
        assert!(proxy.drain().iter().all(|f| f.calls_of("incr") == 0));
    }
}

//! A pub/sub connection as Redisson's client has one: a reader thread (Netty's event loop in
//! Redisson) takes every frame off the socket and hands it over, and the waiting thread waits
//! for the hand-over with a precise timeout (Redisson parks on a semaphore with a nanosecond
//! deadline).
//!
//! Why not redis-rs' `PubSub::get_message` with a read timeout: Linux rounds a socket's
//! `SO_RCVTIMEO` up to scheduler ticks (4 ms at HZ=250), so a waiter told to sleep for the
//! holder's 15 ms TTL woke after 19 ms (measured), overstating Redisson's expiry hand-off by
//! up to 4 ms. A channel's `recv_timeout` sleeps on a high-resolution timer.

use redis::{ConnectionAddr, Value};
use std::io::{BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

pub struct Subscriber {
    socket: TcpStream,
    frames: Receiver<Value>,
}

impl Subscriber {
    pub fn connect(url: &str) -> Subscriber {
        let client = redis::Client::open(url).expect("url");
        let ConnectionAddr::Tcp(host, port) = client.get_connection_info().addr() else {
            panic!("{url}: the benchmark subscribes over plain TCP");
        };
        let socket = TcpStream::connect((host.as_str(), *port)).expect("connect");
        socket.set_nodelay(true).unwrap();
        let mut reader = BufReader::new(socket.try_clone().unwrap());
        let (tx, frames) = mpsc::channel();
        // Ends when the socket is shut down (on drop) or the server goes away.
        std::thread::spawn(move || {
            let mut parser = redis::Parser::new();
            while let Ok(frame) = parser.parse_value(&mut reader) {
                if tx.send(frame).is_err() {
                    break;
                }
            }
        });
        Subscriber { socket, frames }
    }

    pub fn subscribe(&mut self, channel: &str) {
        self.command("SUBSCRIBE", channel);
    }

    pub fn unsubscribe(&mut self, channel: &str) {
        self.command("UNSUBSCRIBE", channel);
    }

    /// Send `cmd channel` and wait for its confirmation; messages that arrive before it are
    /// dropped (a message before SUBSCRIBE's confirmation cannot exist; one before
    /// UNSUBSCRIBE's is no longer wanted).
    fn command(&mut self, cmd: &str, channel: &str) {
        let packed = redis::cmd(cmd).arg(channel).get_packed_command();
        self.socket.write_all(&packed).expect("pub/sub write");
        let want = cmd.to_ascii_lowercase();
        loop {
            let frame = self.frames.recv().expect("pub/sub connection closed");
            if kind(&frame).is_some_and(|k| k == want.as_bytes()) {
                return;
            }
        }
    }

    /// Wait at most `timeout` (`None`: forever) for a message; whether one came.
    pub fn message(&mut self, timeout: Option<Duration>) -> bool {
        loop {
            let frame = match timeout {
                None => self.frames.recv().ok(),
                Some(t) => match self.frames.recv_timeout(t) {
                    Ok(f) => Some(f),
                    Err(RecvTimeoutError::Timeout) => return false,
                    Err(RecvTimeoutError::Disconnected) => None,
                },
            };
            let frame = frame.expect("pub/sub connection closed");
            if kind(&frame) == Some(b"message") {
                return true;
            }
        }
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

/// The first element of a pub/sub frame (`message`, `subscribe`, ...).
fn kind(frame: &Value) -> Option<&[u8]> {
    match frame {
        Value::Array(items) | Value::Push { data: items, .. } => match items.first() {
            Some(Value::BulkString(b)) => Some(b),
            Some(Value::SimpleString(s)) => Some(s.as_bytes()),
            _ => None,
        },
        _ => None,
    }
}

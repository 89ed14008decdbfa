//! Pub/sub: a PSUBSCRIBE connection that collects what was published, drained with a marker
//! so no sleep is needed.

use std::time::Duration;

use redis::Value;

use crate::{cmd, int, text, Server};

const MARKER_CHANNEL: &str = "rlock-test:marker";

/// A connection subscribed with PSUBSCRIBE that collects `(channel, payload)` messages.
pub struct Subscriber {
    conn: redis::Connection,
    markers: u64,
}

impl Subscriber {
    /// PSUBSCRIBE to `pattern` (and to the marker channel used by [`Subscriber::drain`]).
    pub fn psubscribe(server: &Server, pattern: &str) -> Subscriber {
        let mut conn = server.conn();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.send_packed_command(&cmd!("PSUBSCRIBE", pattern, MARKER_CHANNEL).get_packed_command())
            .unwrap();
        for _ in 0..2 {
            let confirm = conn.recv_response().unwrap();
            assert!(
                matches!(confirm, Value::Array(_)),
                "PSUBSCRIBE confirmation: {confirm:?}"
            );
        }
        Subscriber { conn, markers: 0 }
    }

    /// Every message published so far, in order: publishes a fresh marker through `publisher`
    /// and reads until it arrives (the server delivers messages to one subscriber in order), so
    /// no sleep is needed to know that nothing else was published. Markers of earlier calls
    /// (delivered twice when the pattern also matches the marker channel) are skipped.
    pub fn drain(&mut self, publisher: &mut redis::Connection) -> Vec<(String, String)> {
        self.markers += 1;
        let marker = format!("marker-{}", self.markers);
        int(publisher, &cmd!("PUBLISH", MARKER_CHANNEL, &marker));
        let mut got = Vec::new();
        loop {
            let msg = self.conn.recv_response().expect("pub/sub message");
            let parts = match msg {
                Value::Array(p) | Value::Push { data: p, .. } => p,
                other => panic!("unexpected pub/sub frame {other:?}"),
            };
            let parts: Vec<String> = parts.iter().map(|p| text(p).unwrap_or_default()).collect();
            // ["pmessage", pattern, channel, payload]
            assert_eq!(
                parts.first().map(String::as_str),
                Some("pmessage"),
                "{parts:?}"
            );
            if parts[2] == MARKER_CHANNEL {
                if parts[3] == marker {
                    return got;
                }
                continue;
            }
            got.push((parts[2].clone(), parts[3].clone()));
        }
    }
}

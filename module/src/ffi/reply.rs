//! Writing a [`Reply`] to the client of a context (a command, or a blocked client's reply
//! callback).

use super::Ctx;
use crate::core::decision::Reply;

impl Ctx {
    pub fn reply(self, reply: &Reply) {
        // SAFETY: (all calls below) a command or reply-callback ctx; aggregate lengths are
        // announced before exactly that many elements are written.
        unsafe {
            match reply {
                Reply::Int(n) => {
                    api!(RedisModule_ReplyWithLongLong)(self.0, *n);
                }
                // A token that no NextToken produced cannot reach a client; nil is the safe
                // reading.
                Reply::Nil | Reply::Token => {
                    api!(RedisModule_ReplyWithNull)(self.0);
                }
                Reply::Status(text) => {
                    let text = std::ffi::CString::new(*text).unwrap_or_default();
                    api!(RedisModule_ReplyWithSimpleString)(self.0, text.as_ptr());
                }
                Reply::Bulk(b) => {
                    api!(RedisModule_ReplyWithStringBuffer)(self.0, b.as_ptr().cast(), b.len());
                }
                Reply::Array(items) => {
                    api!(RedisModule_ReplyWithArray)(self.0, items.len() as _);
                    for i in items {
                        self.reply(i);
                    }
                }
                Reply::Map(pairs) => {
                    // A map in RESP3; Redis writes a flat array of 2×pairs on RESP2.
                    api!(RedisModule_ReplyWithMap)(self.0, pairs.len() as _);
                    for (name, value) in pairs {
                        api!(RedisModule_ReplyWithStringBuffer)(
                            self.0,
                            name.as_ptr().cast(),
                            name.len(),
                        );
                        self.reply(value);
                    }
                }
                Reply::Error(e) => self.reply_error(&e.to_string()),
            }
        }
    }

    pub fn reply_error(self, msg: &str) {
        // Error text must be a C string without CR/LF; ours never contain them, but user bytes
        // (an unknown option) might, so strip anything unsafe.
        let clean: Vec<u8> = msg
            .bytes()
            .map(|b| {
                if b == b'\r' || b == b'\n' || b == 0 {
                    b' '
                } else {
                    b
                }
            })
            .chain(std::iter::once(0))
            .collect();
        // SAFETY: NUL-terminated buffer alive for the call.
        unsafe { api!(RedisModule_ReplyWithError)(self.0, clean.as_ptr().cast()) };
    }
}

//! The field names of a grouped multi-lock (Redisson's `RedissonFasterMultiLock`,
//! reference/redisson.md §2.12): each value is encoded by a codec ([`FieldCodec`]: Redisson's
//! default Kryo 5 codec, its `StringCodec`, or bytes encoded already), hashed with
//! HighwayHash-128 under Redisson's key, and the two 64-bit halves, big-endian, written in
//! standard Base64 without the trailing `==` (Redisson's `Hash.hash128toBase64`).

use base64::Engine as _;
use highway::{HighwayHash, HighwayHasher, Key};

use crate::error::{Error, Result};

/// Redisson's HighwayHash key (`org.redisson.misc.Hash.KEY`).
const KEY: [u64; 4] = [
    0x9e37_79b9_7f4a_7c15,
    0xf39c_c060_5ced_c834,
    0x1082_276b_f3a2_7251,
    0xf86c_6a11_d0c1_8e95,
];

/// How a grouped multi-lock's values are turned into bytes before they are hashed into field
/// names: it must be the codec of the Redisson client that shares the lock (its
/// `Config.setCodec`, or the codec given to `getMultiLock`), else the two compute other field
/// names for the same value and never meet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FieldCodec {
    /// Redisson's default codec, `Kryo5Codec` (Kryo 5 with references off, its default), for
    /// a `java.lang.String` value: Kryo's `writeClassAndObject` bytes.
    #[default]
    Kryo5,
    /// Redisson's `StringCodec`: the value's UTF-8 bytes.
    Utf8,
    /// The values are the codec's bytes already (another codec, or other types than strings):
    /// hashed as they are.
    Raw,
}

impl FieldCodec {
    /// The bytes this codec writes for `value`. [`FieldCodec::Kryo5`] and [`FieldCodec::Utf8`]
    /// encode strings: a value that is not UTF-8 is refused
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    pub fn encode(self, value: &[u8]) -> Result<Vec<u8>> {
        if self == FieldCodec::Raw {
            return Ok(value.to_vec());
        }
        let s = std::str::from_utf8(value).map_err(|_| {
            Error::InvalidArgument(format!(
                "{self:?} encodes strings: a value is not UTF-8 (use FieldCodec::Raw for bytes)"
            ))
        })?;
        Ok(match self {
            FieldCodec::Kryo5 => kryo5_string(s),
            _ => s.as_bytes().to_vec(),
        })
    }

    /// The field name of `value` in the group's hash.
    pub fn field(self, value: &[u8]) -> Result<String> {
        Ok(field_of(&self.encode(value)?))
    }
}

/// The field name of a value's encoded bytes: Redisson's `Hash.hash128toBase64`.
pub(crate) fn field_of(encoded: &[u8]) -> String {
    let mut h = HighwayHasher::new(Key(KEY));
    h.append(encoded);
    let [a, b] = h.finalize128();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_be_bytes());
    bytes[8..].copy_from_slice(&b.to_be_bytes());
    let mut s = base64::engine::general_purpose::STANDARD.encode(bytes);
    // 16 bytes are 24 Base64 characters, the last two padding.
    s.truncate(s.len() - 2);
    s
}

/// Kryo 5's registration id of `java.lang.String`, written as `id + 2`: `Kryo()` registers
/// `int` (0) then `String` (1) first (Kryo 5.6.2's Kryo.java lines 239-241, "Primitives and
/// string"; Redisson's `Kryo5Codec` registers its allowed classes after them), and
/// `DefaultClassResolver.writeClass` writes `registration.getId() + 2` as a positive varint
/// (util/DefaultClassResolver.java line 117).
const KRYO_STRING_CLASS: u8 = 1 + 2;

/// `Kryo.writeClassAndObject(output, s)` for a `String`, with references off (Redisson's
/// `Kryo5Codec()`; with them on Kryo would write a `NOT_NULL` byte after the class): the
/// class byte, then `Output.writeString` (Kryo 5.6.2, io/Output.java lines 688-731 and
/// `writeUtf8_slow`, 763-780):
/// - `""`: one byte `1 | 0x80`;
/// - 2 to 32 chars, all ASCII: the chars' bytes, the last one `| 0x80`;
/// - otherwise: `writeVarIntFlag(true, chars + 1)` (bit 8 set; 6 bits of value in the first
///   byte, bit 7 saying more follow, then 7-bit groups with bit 8 saying more follow), then
///   each UTF-16 unit (Java's `charAt`): ≤ 0x7F one byte, ≤ 0x7FF two, else three, so a
///   character outside the BMP is two 3-byte surrogates (not UTF-8's 4 bytes).
pub(crate) fn kryo5_string(s: &str) -> Vec<u8> {
    let units: Vec<u16> = s.encode_utf16().collect();
    let n = units.len();
    let mut out = Vec::with_capacity(2 + 3 * n);
    out.push(KRYO_STRING_CLASS);
    if n == 0 {
        out.push(1 | 0x80);
        return out;
    }
    if n > 1 && n <= 32 && units.iter().all(|&c| c <= 127) {
        out.extend(units.iter().map(|&c| c as u8));
        *out.last_mut().expect("two chars at least") |= 0x80;
        return out;
    }
    var_int_flag(&mut out, n as u32 + 1);
    for c in units {
        let c = u32::from(c);
        if c <= 0x7F {
            out.push(c as u8);
        } else if c > 0x7FF {
            out.push((0xE0 | (c >> 12 & 0x0F)) as u8);
            out.push((0x80 | (c >> 6 & 0x3F)) as u8);
            out.push((0x80 | (c & 0x3F)) as u8);
        } else {
            out.push((0xC0 | (c >> 6 & 0x1F)) as u8);
            out.push((0x80 | (c & 0x3F)) as u8);
        }
    }
    out
}

/// Kryo's `Output.writeVarIntFlag(true, value, true)` (io/Output.java lines 400-447).
fn var_int_flag(out: &mut Vec<u8>, value: u32) {
    let first = (value & 0x3F) as u8 | 0x80;
    if value >> 6 == 0 {
        out.push(first);
        return;
    }
    out.push(first | 0x40);
    let mut rest = value >> 6;
    // Then 7 bits a byte, bit 8 set while more follow (at most four more bytes).
    while rest >> 7 != 0 {
        out.push((rest & 0x7F) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: usize) -> Vec<u8> {
        (0..n).map(|i| i as u8).collect()
    }

    /// Expected field names printed by Redisson's own `HighwayHash` (misc/HighwayHash.java,
    /// compiled from its source with a driver doing `Hash.hash128toBase64`'s steps) for these
    /// inputs: bytes 0, 1, 2, ... of each length, and the UTF-8 of two strings.
    #[test]
    fn field_names_are_redissons_highway_hash_in_base64() {
        let cases = [
            (seq(0), "t6rZwibGo2uy1OSmNVe8pg"),
            (seq(1), "ntmkVtE20ANYrJ9J+qTLcA"),
            (seq(31), "xXA/NcZ51ZyOR9te7OLjww"),
            (seq(32), "Uj5yBxCrdmS0UOYKjEgNDg"),
            (seq(33), "JOHEc24cnBwpegsX2HPXTw"),
            (seq(100), "AuNncGCUwMfMuTk0WEL10g"),
            (b"Jack_001".to_vec(), "7pNoDdizVy2xY792MaFv+w"),
            (
                "héllo wörld ✓".as_bytes().to_vec(),
                "EilA1gUYPy2kZQLkH9aiwA",
            ),
        ];
        for (data, want) in cases {
            assert_eq!(field_of(&data), want, "{} bytes", data.len());
        }
        assert_eq!(
            FieldCodec::Utf8.field(b"Jack_001").unwrap(),
            "7pNoDdizVy2xY792MaFv+w"
        );
        assert_eq!(
            FieldCodec::Raw.field(&seq(33)).unwrap(),
            "JOHEc24cnBwpegsX2HPXTw"
        );
    }

    #[test]
    fn kryo_writes_strings_as_kryo_5() {
        // "": class 3, then 0x81 (Output.java 694-696).
        assert_eq!(kryo5_string(""), [3, 0x81]);
        // One char is not on the ASCII path (it needs more than one): flag varint of 2.
        assert_eq!(kryo5_string("a"), [3, 0x82, b'a']);
        // 2..=32 ASCII chars: the last byte marked.
        assert_eq!(kryo5_string("ab"), [3, b'a', b'b' | 0x80]);
        let mut want = vec![3];
        want.extend_from_slice(b"Jack_001");
        *want.last_mut().unwrap() |= 0x80;
        assert_eq!(kryo5_string("Jack_001"), want);
        let s32 = "x".repeat(32);
        assert_eq!(kryo5_string(&s32).len(), 33);
        assert_eq!(kryo5_string(&s32)[32], b'x' | 0x80);
        // 33 ASCII chars: varint flag of 34 (0x80 | 34), then the bytes unmarked.
        let s33 = "y".repeat(33);
        let mut want = vec![3, 0x80 | 34];
        want.extend_from_slice(s33.as_bytes());
        assert_eq!(kryo5_string(&s33), want);
        // 100 chars: 101 = 0b1_100101: first byte 0x80 | 0x40 | 0x25, then 1.
        let s100 = "z".repeat(100);
        assert_eq!(kryo5_string(&s100)[..3], [3, 0xE5, 0x01]);
        assert_eq!(kryo5_string(&s100).len(), 103);
        // 10000 chars: 10001 = 0x2711: 0xC0 | 0x11, then (10001 >> 6) = 156 → 0x9C 0x01.
        assert_eq!(
            kryo5_string(&"q".repeat(10_000))[..4],
            [3, 0xD1, 0x9C, 0x01]
        );
    }

    #[test]
    fn kryo_writes_non_ascii_strings_by_utf16_unit() {
        // "é" (U+00E9): one char, two bytes C3 A9.
        assert_eq!(kryo5_string("é"), [3, 0x82, 0xC3, 0xA9]);
        // "hé": not ASCII, so varint flag of 3, then h, C3 A9.
        assert_eq!(kryo5_string("hé"), [3, 0x83, b'h', 0xC3, 0xA9]);
        // "✓" (U+2713): three bytes.
        assert_eq!(kryo5_string("✓"), [3, 0x82, 0xE2, 0x9C, 0x93]);
        // U+1F600 is two UTF-16 units (D83D DE00), each written in three bytes.
        assert_eq!(
            kryo5_string("😀"),
            [3, 0x83, 0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]
        );
        // NUL is ASCII to Kryo (one byte), on the marked path.
        assert_eq!(kryo5_string("a\0"), [3, b'a', 0x80]);
    }

    #[test]
    fn the_kryo_codec_hashes_kryos_bytes() {
        assert_eq!(
            FieldCodec::Kryo5.field(b"Jack_001").unwrap(),
            field_of(&kryo5_string("Jack_001"))
        );
        assert_ne!(
            FieldCodec::Kryo5.field(b"Jack_001").unwrap(),
            FieldCodec::Utf8.field(b"Jack_001").unwrap()
        );
        assert!(FieldCodec::Kryo5.field(&[0xFF]).is_err());
        assert!(FieldCodec::Utf8.field(&[0xFF]).is_err());
        assert!(FieldCodec::Raw.field(&[0xFF]).is_ok());
        assert_eq!(FieldCodec::default(), FieldCodec::Kryo5);
    }
}

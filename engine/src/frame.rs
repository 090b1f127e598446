//! The write-ahead-log frame: one sled value under one LSN key.
//!
//! ```text
//! offset size field
//!      0    4 magic       b"CRNF"
//!      4    1 version     1
//!      5    1 kind        1 = records chunk, 2 = tombstone
//!      6    2 flags       u16 LE: bit 0 MORE, bit 1 CONT; others must be 0
//!      8    4 body_len    u32 LE, at most FRAME_BODY_BYTES_MAX
//!     12    4 crc         u32 LE: CRC-32 (IEEE) of lsn (u64 LE) ++ bytes 0..12 ++ body
//!     16    n body
//! ```
//!
//! # Invariants
//! - A frame decodes only under the LSN it was encoded for: the CRC covers the
//!   LSN, so a frame copied or moved to another key fails its checksum.
//! - `decode` never allocates and never panics, whatever the bytes; the body
//!   length is checked against `FRAME_BODY_BYTES_MAX` before it is used.
//! - A logical entry larger than one frame is split into consecutive LSNs:
//!   the first chunk has MORE, middle chunks MORE|CONT, the last CONT.

use crate::error::CorruptionKind;

/// First four bytes of every frame.
pub const FRAME_MAGIC: [u8; 4] = *b"CRNF";
/// The only frame version this build writes and reads.
pub const FRAME_VERSION: u8 = 1;
/// Bytes before the body.
pub const FRAME_HEADER_BYTES: usize = 16;
/// Hard upper bound on one frame's body when decoding, whatever the
/// configuration says. What a store writes is bounded lower
/// (`config::FRAME_BODY_BYTES_WRITE_MAX`), so that no leaf of frames grows
/// to the size at which sled moves it into a blob file.
pub const FRAME_BODY_BYTES_MAX: usize = 1 << 20;

/// Another chunk of the same entry follows at `lsn + 1`.
pub const FLAG_MORE: u16 = 0x1;
/// This chunk continues an entry begun at a lower LSN.
pub const FLAG_CONT: u16 = 0x2;
const FLAGS_KNOWN: u16 = FLAG_MORE | FLAG_CONT;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// A chunk of an encoded record entry (see `body.rs`).
    Records = 1,
    /// A placeholder left by retention: `span` LSNs starting here were deleted.
    Tombstone = 2,
}

impl FrameKind {
    fn from_u8(b: u8) -> Result<Self, CorruptionKind> {
        match b {
            1 => Ok(FrameKind::Records),
            2 => Ok(FrameKind::Tombstone),
            found => Err(CorruptionKind::UnknownKind { found }),
        }
    }
}

/// A decoded frame borrowing its body from the stored bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    pub kind: FrameKind,
    pub flags: u16,
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// How many LSNs this frame accounts for: 1 for a chunk, the recorded
    /// span for a tombstone.
    pub fn span(&self) -> Result<u64, CorruptionKind> {
        match self.kind {
            FrameKind::Records => Ok(1),
            FrameKind::Tombstone => decode_tombstone(self.body),
        }
    }

    /// The LSN after this frame, stored at `lsn`, and the run it spans:
    /// `LengthTooLarge` past [`crate::keys::LSN_MAX`] (a span no build
    /// writes, which would make the next LSN wrap).
    pub fn lsn_after(&self, lsn: u64) -> Result<u64, CorruptionKind> {
        let span = self.span()?;
        match lsn.checked_add(span) {
            Some(next) if next <= crate::keys::LSN_MAX => Ok(next),
            _ => Err(CorruptionKind::LengthTooLarge {
                length: span,
                max: crate::keys::LSN_MAX.saturating_sub(lsn),
            }),
        }
    }
}

pub(crate) fn crc(lsn: u64, header12: &[u8], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&lsn.to_le_bytes());
    h.update(header12);
    h.update(body);
    h.finalize()
}

/// Encode a frame for `lsn`, appending to `out`.
pub fn encode_into(lsn: u64, kind: FrameKind, flags: u16, body: &[u8], out: &mut Vec<u8>) {
    assert!(
        body.len() <= FRAME_BODY_BYTES_MAX,
        "frame body over the format maximum"
    );
    assert_eq!(flags & !FLAGS_KNOWN, 0, "unknown frame flags");
    let mut header = [0u8; FRAME_HEADER_BYTES];
    header[0..4].copy_from_slice(&FRAME_MAGIC);
    header[4] = FRAME_VERSION;
    header[5] = kind as u8;
    header[6..8].copy_from_slice(&flags.to_le_bytes());
    header[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
    let c = crc(lsn, &header[0..12], body);
    header[12..16].copy_from_slice(&c.to_le_bytes());
    out.reserve(FRAME_HEADER_BYTES + body.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(body);
}

/// Encode a frame for `lsn` into a new buffer.
pub fn encode(lsn: u64, kind: FrameKind, flags: u16, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
    encode_into(lsn, kind, flags, body, &mut out);
    out
}

/// The kind a frame's header declares, if its bytes reach the kind byte
/// after the magic and name a known kind: unchecked (the CRC covers the
/// whole frame), for telling what a frame cut short was meant to be.
pub(crate) fn header_kind(bytes: &[u8]) -> Option<FrameKind> {
    if bytes.len() < 6 || bytes[0..4] != FRAME_MAGIC {
        return None;
    }
    FrameKind::from_u8(bytes[5]).ok()
}

/// Whether a frame's header declares it a continuation chunk (CONT), if its
/// bytes reach the flags' low byte after the magic: unchecked, as
/// [`header_kind`], for telling whether a frame cut short follows the
/// frame before it.
pub(crate) fn header_cont(bytes: &[u8]) -> Option<bool> {
    if bytes.len() < 7 || bytes[0..4] != FRAME_MAGIC {
        return None;
    }
    Some(u16::from(bytes[6]) & FLAG_CONT != 0)
}

/// Check the header fields `bytes` reaches, all of them once it holds a
/// whole header. The length is little-endian, so its bytes that are there
/// are its low ones and bound it from below: past
/// [`FRAME_BODY_BYTES_MAX`] already, it is too large whatever follows
/// (until 2026-12-05 it was checked only once all four bytes were there,
/// and an 11-byte value whose three length bytes were already past the
/// bound was `Truncated`). A value shorter than a header is a frame cut
/// short only if it is the start of a header this build writes: anything
/// else is refused by what is wrong with it (until 2026-12-05 every value
/// under 16 bytes was `Truncated`, and recovery truncated short garbage at
/// the log's end as a torn frame).
fn check_header(bytes: &[u8]) -> Result<(), CorruptionKind> {
    let n = bytes.len().min(FRAME_MAGIC.len());
    if bytes[..n] != FRAME_MAGIC[..n] {
        let mut found = [0u8; 4];
        found[..n].copy_from_slice(&bytes[..n]);
        return Err(CorruptionKind::BadMagic { found });
    }
    if let Some(&found) = bytes.get(4) {
        if found != FRAME_VERSION {
            return Err(CorruptionKind::UnsupportedVersion { found });
        }
    }
    let kind = bytes.get(5).map(|&k| FrameKind::from_u8(k)).transpose()?;
    // Flags are u16 LE: with only the low byte there, its bits are known.
    let flags = match bytes.get(6..8) {
        Some(f) => Some(u16::from_le_bytes([f[0], f[1]])),
        None => bytes.get(6).map(|&low| u16::from(low)),
    };
    if let Some(found) = flags {
        if found & !FLAGS_KNOWN != 0 || (kind == Some(FrameKind::Tombstone) && found != 0) {
            return Err(CorruptionKind::UnknownFlags { found });
        }
    }
    if let Some(length) = length_at_least(bytes) {
        if length > FRAME_BODY_BYTES_MAX as u64 {
            return Err(CorruptionKind::LengthTooLarge {
                length,
                max: FRAME_BODY_BYTES_MAX as u64,
            });
        }
    }
    Ok(())
}

/// The least body length the length bytes `bytes` reaches can declare
/// (those missing taken as 0; the whole length once all four are there),
/// if it reaches any.
fn length_at_least(bytes: &[u8]) -> Option<u64> {
    let present = bytes
        .get(8..bytes.len().min(12))
        .filter(|l| !l.is_empty())?;
    let mut l = [0u8; 4];
    l[..present.len()].copy_from_slice(present);
    Some(u64::from(u32::from_le_bytes(l)))
}

/// Decode and verify a frame stored under `lsn`. Never panics, never allocates.
pub fn decode(lsn: u64, bytes: &[u8]) -> Result<Frame<'_>, CorruptionKind> {
    if bytes.len() < FRAME_HEADER_BYTES {
        check_header(bytes)?;
        return Err(CorruptionKind::Truncated {
            expected: FRAME_HEADER_BYTES as u64,
            actual: bytes.len() as u64,
        });
    }
    let body_len = u64::from(u32::from_le_bytes([
        bytes[8], bytes[9], bytes[10], bytes[11],
    ]));
    let expected = FRAME_HEADER_BYTES as u64 + body_len;
    let actual = bytes.len() as u64;
    let stored = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    let body = &bytes[FRAME_HEADER_BYTES..];
    if actual != expected && u32::try_from(body.len()).is_ok() {
        // The CRC covers the length field: a frame whose checksum matches
        // the bytes stored, under the length they have, is whole and its
        // length field damaged. Told apart from a frame cut short, which
        // recovery may truncate as torn: this one it must not. Checked
        // before the length's bound (since 2026-12-05), so that a length
        // damaged past the bound is named for what it is too.
        let mut header = [0u8; 12];
        header.copy_from_slice(&bytes[0..12]);
        header[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
        if crc(lsn, &header, body) == stored {
            return Err(CorruptionKind::LengthDamaged {
                declared: body_len,
                stored: body.len() as u64,
            });
        }
    }
    check_header(bytes)?;
    let kind = FrameKind::from_u8(bytes[5])?;
    let flags = u16::from_le_bytes([bytes[6], bytes[7]]);
    if actual != expected {
        return Err(if actual < expected {
            CorruptionKind::Truncated { expected, actual }
        } else {
            CorruptionKind::TrailingBytes { expected, actual }
        });
    }
    let computed = crc(lsn, &bytes[0..12], body);
    if stored != computed {
        return Err(CorruptionKind::Checksum {
            expected: stored,
            actual: computed,
        });
    }
    Ok(Frame { kind, flags, body })
}

/// The body of a tombstone: the number of LSNs it stands for, u64 LE.
pub fn encode_tombstone(span: u64) -> [u8; 8] {
    assert!(span >= 1, "a tombstone covers at least its own lsn");
    span.to_le_bytes()
}

fn decode_tombstone(body: &[u8]) -> Result<u64, CorruptionKind> {
    let arr: [u8; 8] = body.try_into().map_err(|_| CorruptionKind::Decode {
        detail: format!("tombstone body is {} bytes, expected 8", body.len()),
    })?;
    let span = u64::from_le_bytes(arr);
    if span == 0 {
        return Err(CorruptionKind::Decode {
            detail: "tombstone span is 0".into(),
        });
    }
    Ok(span)
}

/// Split an entry body into chunk bodies with their flags.
pub fn chunks(body: &[u8], chunk_bytes_max: usize) -> impl Iterator<Item = (u16, &[u8])> {
    assert!(chunk_bytes_max > 0 && chunk_bytes_max <= FRAME_BODY_BYTES_MAX);
    let n = body.len().div_ceil(chunk_bytes_max).max(1);
    (0..n).map(move |i| {
        let start = i * chunk_bytes_max;
        let end = (start + chunk_bytes_max).min(body.len());
        let mut flags = 0;
        if i + 1 < n {
            flags |= FLAG_MORE;
        }
        if i > 0 {
            flags |= FLAG_CONT;
        }
        (flags, &body[start..end])
    })
}

/// Number of chunks `body_len` bytes need.
pub fn chunk_count(body_len: usize, chunk_bytes_max: usize) -> u64 {
    body_len.div_ceil(chunk_bytes_max).max(1) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_known_answer() {
        // Pins the algorithm: CRC-32 (IEEE 802.3), not CRC-32C.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn round_trip() {
        let f = encode(42, FrameKind::Records, FLAG_MORE, b"hello");
        let d = decode(42, &f).unwrap();
        assert_eq!(d.kind, FrameKind::Records);
        assert_eq!(d.flags, FLAG_MORE);
        assert_eq!(d.body, b"hello");
        let empty = encode(1, FrameKind::Records, 0, b"");
        assert_eq!(decode(1, &empty).unwrap().body, b"");
    }

    #[test]
    fn bound_to_lsn() {
        let f = encode(7, FrameKind::Records, 0, b"x");
        assert!(matches!(
            decode(8, &f),
            Err(CorruptionKind::Checksum { .. })
        ));
    }

    #[test]
    fn every_bit_flip_detected() {
        let f = encode(3, FrameKind::Records, 0, b"some body bytes");
        for i in 0..f.len() * 8 {
            let mut g = f.clone();
            g[i / 8] ^= 1 << (i % 8);
            assert!(decode(3, &g).is_err(), "flip of bit {i} not detected");
        }
    }

    #[test]
    fn truncation_and_trailing() {
        let f = encode(3, FrameKind::Records, 0, b"body");
        for n in 0..f.len() {
            assert!(matches!(
                decode(3, &f[..n]),
                Err(CorruptionKind::Truncated { .. })
            ));
        }
        let mut g = f.clone();
        g.push(0);
        assert!(matches!(
            decode(3, &g),
            Err(CorruptionKind::TrailingBytes { .. })
        ));
    }

    /// A whole frame whose length field reads more or fewer bytes than it
    /// holds is damage, named as such, never a frame cut short (which
    /// recovery may truncate as torn at the log's end).
    #[test]
    fn a_damaged_length_is_told_from_a_cut() {
        let f = encode(3, FrameKind::Records, 0, b"body");
        for declared in [0u32, 3, 5, 1000] {
            let mut g = f.clone();
            g[8..12].copy_from_slice(&declared.to_le_bytes());
            assert_eq!(
                decode(3, &g).unwrap_err(),
                CorruptionKind::LengthDamaged {
                    declared: declared.into(),
                    stored: 4
                }
            );
        }
        // Cut short, the checksum matches no length: truncated.
        assert!(matches!(
            decode(3, &f[..f.len() - 1]),
            Err(CorruptionKind::Truncated { .. })
        ));
    }

    #[test]
    fn oversize_length_refused_before_use() {
        let mut f = encode(3, FrameKind::Records, 0, b"body");
        f[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        // The checksum matches the bytes under their own length: a whole
        // frame whose length field was damaged, named so (until 2026-12-05
        // `LengthTooLarge`, where FORMAT.md said `LengthDamaged`).
        assert_eq!(
            decode(3, &f).unwrap_err(),
            CorruptionKind::LengthDamaged {
                declared: u32::MAX.into(),
                stored: 4
            }
        );
        // With no length under which it matches: over the bound.
        f[12] ^= 1;
        assert!(matches!(
            decode(3, &f),
            Err(CorruptionKind::LengthTooLarge { .. })
        ));
        // So too in a value shorter than a header, once the length's four
        // bytes are there.
        assert!(matches!(
            decode(3, &f[..12]),
            Err(CorruptionKind::LengthTooLarge { .. })
        ));
    }

    /// A value shorter than a header is a frame cut short only if it is
    /// the start of one this build writes; anything else is refused by
    /// what is wrong with it, as the same bytes in a whole header are, and
    /// recovery never truncates it as torn.
    #[test]
    fn a_short_value_is_cut_only_if_it_starts_a_header() {
        let tombstone = encode(3, FrameKind::Tombstone, 0, &encode_tombstone(1));
        for n in 0..FRAME_HEADER_BYTES {
            assert!(matches!(
                decode(3, &tombstone[..n]),
                Err(CorruptionKind::Truncated { .. })
            ));
        }
        // Three of the length's four bytes: a bound at most, within it,
        // cut short; past it whatever the fourth byte is, too large (since
        // 2026-12-05).
        assert!(matches!(
            decode(3, b"CRNF\x01\x01\x00\x00\x00\x00\x10"),
            Err(CorruptionKind::Truncated { .. })
        ));
        let cases: [(&[u8], CorruptionKind); 8] = [
            (
                b"\x00",
                CorruptionKind::BadMagic {
                    found: [0, 0, 0, 0],
                },
            ),
            (b"garbage", CorruptionKind::BadMagic { found: *b"garb" }),
            (b"CRX", CorruptionKind::BadMagic { found: *b"CRX\0" }),
            (b"CRNF\x07", CorruptionKind::UnsupportedVersion { found: 7 }),
            (
                b"CRNF\x01\x09\x00",
                CorruptionKind::UnknownKind { found: 9 },
            ),
            (
                b"CRNF\x01\x01\x04",
                CorruptionKind::UnknownFlags { found: 4 },
            ),
            (
                b"CRNF\x01\x02\x01\x00\x08",
                CorruptionKind::UnknownFlags { found: 1 },
            ),
            (
                b"CRNF\x01\x01\x00\x00\x01\x00\x10",
                CorruptionKind::LengthTooLarge {
                    length: FRAME_BODY_BYTES_MAX as u64 + 1,
                    max: FRAME_BODY_BYTES_MAX as u64,
                },
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(decode(3, bytes).unwrap_err(), want, "{bytes:?}");
            // The same bytes padded to a whole header: the same refusal.
            let mut whole = bytes.to_vec();
            whole.resize(FRAME_HEADER_BYTES, 0);
            assert_eq!(decode(3, &whole).unwrap_err(), want, "{bytes:?} padded");
        }
    }

    #[test]
    fn chunking() {
        let body = vec![7u8; 10];
        let c: Vec<_> = chunks(&body, 4).collect();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].0, FLAG_MORE);
        assert_eq!(c[1].0, FLAG_MORE | FLAG_CONT);
        assert_eq!(c[2].0, FLAG_CONT);
        assert_eq!(c[2].1.len(), 2);
        assert_eq!(chunks(&[], 4).count(), 1);
        assert_eq!(chunk_count(10, 4), 3);
        assert_eq!(chunk_count(0, 4), 1);
    }

    #[test]
    fn tombstone() {
        let f = encode(9, FrameKind::Tombstone, 0, &encode_tombstone(5));
        assert_eq!(decode(9, &f).unwrap().span().unwrap(), 5);
    }
}

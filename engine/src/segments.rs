//! The headers of sled's log segments, checked from outside sled.
//!
//! sled 0.34.7 cuts its data file (`sled/db`) into segments of
//! [`SLED_SEGMENT_BYTES`]. Each begins with a 20-byte header: a CRC-32 of
//! the next 16 bytes (little-endian, xored with `0xFFFF_FFFF`), the
//! segment's LSN and the highest stable LSN when it was written (each
//! little-endian, xored with `0x7FFF_FFFF_FFFF_FFFF`). sled writes zeros
//! over a segment it frees when it opens (its `Corrupted` message kind is
//! byte 0), so a header is either whole or all zeros.
//!
//! sled reads these headers as it opens: those of the segments written
//! since its last snapshot at every open, and all of them when it rebuilds
//! its state from the log, as it does when its snapshot is missing or
//! damaged (sled does not fsync its snapshots: a power loss can take one).
//! It takes a segment whose header fails its CRC for a free one, without a
//! word, and the frames in it are gone from the store it opens (cairn's
//! watermark then refuses the open if they were synced). Below the
//! snapshot, nothing reads the header, so nothing else finds such damage
//! before it matters (until 2026-12-07 `cairn verify` called such a store
//! clean; found by an audit; the open-time reading of the tail's headers
//! was found in review the same day).
//!
//! # Invariants
//! - Read only with the store's lock held and sled writing nothing: closed
//!   (a stopped verify), or just opened, before anything is written (an
//!   engine's open: sled writes a header only as it begins a segment). A
//!   header sled is writing could read torn. After sled's open, not
//!   before: that open writes zeros over a segment whose header it read
//!   and took for a free one's (one a crash tore as sled began it, which
//!   held nothing synced).
//! - An open to write refuses a store with a damaged header, and an
//!   engine opened to read with one refuses every write of records, summaries and topic ids (`EngineConfig::
//!   open_to_read`): sled keeps appending into the segment it was writing,
//!   and a later open that reads its header would lose what it got.
//! - Reports every damaged header with its offset in the file; never
//!   panics on any bytes, and reads nothing past the file's end.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::config::SLED_SEGMENT_BYTES;
use crate::error::{CorruptionKind, Location};

/// The length of a segment header (sled's `SEG_HEADER_LEN`).
pub const SEGMENT_HEADER_BYTES: usize = 20;

/// A segment header that fails its CRC and is not a freed segment's zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedHeader {
    /// The header's offset in `sled/db` (a multiple of the segment size).
    pub file_offset: u64,
    pub stored_crc: u32,
    pub computed_crc: u32,
}

impl DamagedHeader {
    /// Where and what the damage is, for an error or a verify's problem:
    /// at its offset in `sled_data_file` (the store's `sled/db`).
    pub fn located(&self, sled_data_file: PathBuf) -> (Location, CorruptionKind) {
        (
            Location::SledFiles {
                path: sled_data_file,
                log_offset: Some(self.file_offset),
            },
            CorruptionKind::SegmentHeader {
                stored: self.stored_crc,
                computed: self.computed_crc,
            },
        )
    }
}

/// Whether `header` is whole (its CRC matches) or a freed segment's zeros;
/// else what is wrong with it. `file_offset` is where it was read.
pub fn check_header(
    file_offset: u64,
    header: &[u8; SEGMENT_HEADER_BYTES],
) -> Option<DamagedHeader> {
    if header.iter().all(|&b| b == 0) {
        return None;
    }
    let stored_crc = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) ^ 0xFFFF_FFFF;
    let computed_crc = crc32fast::hash(&header[4..]);
    (stored_crc != computed_crc).then_some(DamagedHeader {
        file_offset,
        stored_crc,
        computed_crc,
    })
}

/// Every damaged segment header of the sled data file at `data` (as sled
/// counts segments: one begun past the last whole one counts once its
/// header is all there).
pub fn damaged_headers(data: &Path) -> std::io::Result<Vec<DamagedHeader>> {
    let file = std::fs::File::open(data)?;
    let len = file.metadata()?.len();
    let segment = SLED_SEGMENT_BYTES as u64;
    let mut segments = len / segment;
    if len % segment >= SEGMENT_HEADER_BYTES as u64 {
        segments += 1;
    }
    let mut damaged = Vec::new();
    for i in 0..segments {
        let offset = i * segment;
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        file.read_exact_at(&mut header, offset)?;
        if let Some(d) = check_header(offset, &header) {
            damaged.push(d);
        }
    }
    Ok(damaged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header as sled 0.34.7 writes it (`Into<[u8; 20]> for
    /// SegmentHeader`), for the checks below.
    fn sled_header(lsn: i64, max_stable_lsn: i64) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut h = [0u8; SEGMENT_HEADER_BYTES];
        h[4..12].copy_from_slice(&(lsn ^ 0x7FFF_FFFF_FFFF_FFFF).to_le_bytes());
        h[12..20].copy_from_slice(&(max_stable_lsn ^ 0x7FFF_FFFF_FFFF_FFFF).to_le_bytes());
        let crc = crc32fast::hash(&h[4..20]) ^ 0xFFFF_FFFF;
        h[0..4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    #[test]
    fn whole_and_freed_headers_pass_and_any_flipped_bit_is_found() {
        let h = sled_header(8 << 20, 12_345);
        assert_eq!(check_header(0, &h), None);
        assert_eq!(check_header(0, &[0; SEGMENT_HEADER_BYTES]), None);
        for byte in 0..SEGMENT_HEADER_BYTES {
            for bit in 0..8 {
                let mut bad = h;
                bad[byte] ^= 1 << bit;
                let d = check_header(16 << 20, &bad).expect("a flipped bit is found");
                assert_eq!(d.file_offset, 16 << 20);
                assert_ne!(d.stored_crc, d.computed_crc);
            }
        }
    }

    /// Against a real store: sled's own headers all pass, over several
    /// segments, with segments freed by truncations and reused, and after
    /// reopens (which zero freed segments); a flipped byte in any of them
    /// is found at its segment's offset.
    #[test]
    fn a_real_stores_headers_pass_until_one_is_damaged() {
        use crate::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        let data = EngineConfig::new(dir.path()).sled_data_path();
        let mut next = 0;
        for _ in 0..12 {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            // About 10 MiB a round: more than a segment; most of it then
            // deleted, so that sled frees segments and later reuses them.
            for _ in 0..40 {
                e.append(&[batch(&tp, next..next + 64, 4096)]).unwrap();
                next += 64;
            }
            e.truncate_before(&tp, next - 64).unwrap();
            e.append(&[batch(&tp, next..next + 64, 4096)]).unwrap();
            next += 64;
            assert_eq!(damaged_headers(&data).unwrap(), vec![], "while open");
            e.close().unwrap();
            assert_eq!(damaged_headers(&data).unwrap(), vec![]);
        }
        let len = std::fs::metadata(&data).unwrap().len();
        assert!(
            len > 2 * SLED_SEGMENT_BYTES as u64,
            "{len} bytes: too few segments"
        );
        assert_eq!(damaged_headers(&data).unwrap(), vec![]);
        let mut bytes = std::fs::read(&data).unwrap();
        let whole = (0..bytes.len())
            .step_by(SLED_SEGMENT_BYTES)
            .filter(|&o| bytes[o..o + SEGMENT_HEADER_BYTES].iter().any(|&b| b != 0))
            .collect::<Vec<_>>();
        assert!(whole.len() >= 2, "{whole:?}");
        // Segments were reused: 12 rounds wrote over 120 MiB (a run of this
        // test saw 56 MiB of file, one segment of it freed and zeroed).
        assert!(len < 100 << 20, "{len} bytes: no segment reused");
        let at = whole[1];
        bytes[at + 7] ^= 0x40;
        std::fs::write(&data, &bytes).unwrap();
        let found = damaged_headers(&data).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].file_offset, at as u64);
    }
}

//! Assembling frames into entries, and reading one entry by its index entry.
//!
//! # Invariants
//! - An entry is returned only if every chunk passed its CRC, the chunk flags
//!   form one FIRST..LAST sequence on consecutive LSNs, the body decodes, and
//!   the decoded records agree with the index entry that pointed at them.

use crate::body::{decode_entry, Entry, ENTRY_BODY_BYTES_MAX};
use crate::error::{CorruptionKind, Error, Location, Result};
use crate::frame::{self, Frame, FrameKind, FLAG_CONT, FLAG_MORE};
use crate::index::{IndexEntry, CHUNKS_PER_ENTRY_MAX};
use crate::keys;
use crate::record::TopicPartition;

/// Collects the chunks of one entry in LSN order.
#[derive(Debug, Default)]
pub struct Assembler {
    first_lsn: Option<u64>,
    chunks: u32,
    body: Vec<u8>,
}

/// What feeding one frame produced.
pub enum Fed {
    /// The entry continues in the next LSN.
    Partial,
    /// A whole entry body: its first LSN, chunk count and bytes.
    Complete {
        first_lsn: u64,
        chunks: u32,
        body: Vec<u8>,
    },
}

impl Assembler {
    /// True while an entry has started but not finished.
    pub fn in_progress(&self) -> Option<u64> {
        self.first_lsn
    }

    pub fn reset(&mut self) {
        self.first_lsn = None;
        self.chunks = 0;
        self.body.clear();
    }

    /// Feed the records frame stored at `lsn`. The caller guarantees LSNs
    /// arrive consecutively.
    pub fn feed(&mut self, lsn: u64, f: &Frame<'_>) -> Result<Fed, CorruptionKind> {
        debug_assert_eq!(f.kind, FrameKind::Records);
        let seq = |detail: &str| CorruptionKind::BadChunkSequence {
            detail: detail.to_owned(),
        };
        let cont = f.flags & FLAG_CONT != 0;
        match (self.first_lsn.is_some(), cont) {
            (false, true) => return Err(seq("continuation chunk without a first chunk")),
            (true, false) => return Err(seq("new entry starts before the previous one ended")),
            _ => {}
        }
        if self.first_lsn.is_none() {
            self.first_lsn = Some(lsn);
        }
        if self.body.len() + f.body.len() > ENTRY_BODY_BYTES_MAX {
            return Err(CorruptionKind::LengthTooLarge {
                length: (self.body.len() + f.body.len()) as u64,
                max: ENTRY_BODY_BYTES_MAX as u64,
            });
        }
        // The index entry that will describe this entry cannot name more
        // chunks (`IndexEntry::decode` refuses it): refuse here, before
        // recovery writes any repair for it.
        if self.chunks as usize >= CHUNKS_PER_ENTRY_MAX {
            return Err(seq(&format!(
                "entry goes on past {CHUNKS_PER_ENTRY_MAX} chunks, more than any entry takes"
            )));
        }
        self.chunks += 1;
        self.body.extend_from_slice(f.body);
        if f.flags & FLAG_MORE != 0 {
            return Ok(Fed::Partial);
        }
        let first_lsn = self.first_lsn.take().unwrap_or(lsn);
        let chunks = std::mem::take(&mut self.chunks);
        Ok(Fed::Complete {
            first_lsn,
            chunks,
            body: std::mem::take(&mut self.body),
        })
    }
}

/// Compare a decoded entry with the index entry that describes it.
pub fn check_against_index(
    tp: &TopicPartition,
    idx: &IndexEntry,
    entry: &Entry,
) -> Result<(), CorruptionKind> {
    let described = IndexEntry::describe(idx.lsn, idx.chunks, &entry.records);
    if &entry.tp != tp || described != *idx {
        return Err(CorruptionKind::IndexMismatch {
            detail: format!(
                "index says {tp} {idx:?}, log at lsn {} holds {} {described:?}",
                idx.lsn, entry.tp
            ),
        });
    }
    Ok(())
}

/// Read, verify and decode the entry an index entry points at.
pub fn read_entry(tree: &sled::Tree, tp: &TopicPartition, idx: &IndexEntry) -> Result<Entry> {
    let mut asm = Assembler::default();
    let corrupt = |lsn, kind| Error::corruption(Location::Wal { lsn }, kind);
    for i in 0..idx.chunks as u64 {
        let lsn = idx.lsn + i;
        let bytes = tree
            .get(keys::wal_key(lsn))
            .map_err(crate::engine::store_err("read frame"))?
            // A reserved slot (an empty value) holds no frame: missing, as
            // retention's check says, not a torn frame (until 2026-12-05 it
            // was decoded, and read as one cut short).
            .filter(|v| !crate::slots::is_slot(v))
            .ok_or_else(|| corrupt(lsn, CorruptionKind::MissingFrame))?;
        let f = frame::decode(lsn, &bytes).map_err(|k| corrupt(lsn, k))?;
        if f.kind != FrameKind::Records {
            return Err(corrupt(
                lsn,
                CorruptionKind::IndexMismatch {
                    detail: "index points at a tombstone".into(),
                },
            ));
        }
        match asm.feed(lsn, &f).map_err(|k| corrupt(lsn, k))? {
            Fed::Partial if i + 1 == idx.chunks as u64 => {
                return Err(corrupt(
                    lsn,
                    CorruptionKind::IndexMismatch {
                        detail: format!(
                            "entry continues past the {} chunks the index names",
                            idx.chunks
                        ),
                    },
                ))
            }
            Fed::Partial => {}
            Fed::Complete { chunks, body, .. } => {
                if chunks != idx.chunks {
                    return Err(corrupt(
                        lsn,
                        CorruptionKind::IndexMismatch {
                            detail: format!(
                                "entry ends after {chunks} chunks, index says {}",
                                idx.chunks
                            ),
                        },
                    ));
                }
                let entry = decode_entry(&body).map_err(|k| corrupt(idx.lsn, k))?;
                check_against_index(tp, idx, &entry).map_err(|k| corrupt(idx.lsn, k))?;
                return Ok(entry);
            }
        }
    }
    Err(corrupt(idx.lsn, CorruptionKind::MissingFrame))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty chunks keep an entry under its body limit for ever: the chunk
    /// count is bounded on its own, at what an index entry can name.
    #[test]
    fn an_entry_of_more_chunks_than_an_index_entry_names_is_refused() {
        let mut asm = Assembler::default();
        let chunk = |i: usize| {
            let cont = if i == 0 { 0 } else { FLAG_CONT };
            Frame {
                kind: FrameKind::Records,
                flags: FLAG_MORE | cont,
                body: &[],
            }
        };
        for i in 0..CHUNKS_PER_ENTRY_MAX {
            assert!(matches!(
                asm.feed(1 + i as u64, &chunk(i)),
                Ok(Fed::Partial)
            ));
        }
        let last = CHUNKS_PER_ENTRY_MAX as u64 + 1;
        match asm.feed(last, &chunk(CHUNKS_PER_ENTRY_MAX)) {
            Err(CorruptionKind::BadChunkSequence { detail }) => {
                assert!(detail.contains("chunks"), "{detail}")
            }
            Err(other) => panic!("refused as {other:?}"),
            Ok(_) => panic!("fed past {CHUNKS_PER_ENTRY_MAX} chunks"),
        }
    }
}

//! Reserved log slots: empty values written ahead of the log's tail so that
//! a frame is written into sled once, not three to four times.
//!
//! sled 0.34.7 keeps values inside its leaves. An insert is logged as a
//! delta that carries the value; a leaf is split once it holds more than 16
//! items and both halves are logged again, in full (`should_split`,
//! `node.rs`); and a leaf with 10 deltas is consolidated, logged again in
//! full (`PAGE_CONSOLIDATION_THRESHOLD`). Frames appended at the right edge
//! of the tree go through two splits each, so sled wrote every frame byte
//! ~3.5 times (measured with `/proc/self/io`; docs/BENCHMARKS.md).
//!
//! A slot is the frame's key with an empty value, inserted in a run of at
//! least [`SLOTS_RESERVED_CHUNK`] keys well ahead of the frames. The splits then
//! happen while those leaves hold nothing but keys, and the frame later
//! replaces its slot with one delta: a leaf built from a split holds at most
//! 9 keys, so it never collects the 10 deltas that would consolidate it.
//! [`SLOTS_AHEAD_MIN`] keeps the frames being written out of the right-edge
//! leaf, which the next run of slots will split. Measured with raw sled
//! (1500 appends of 4 × 26 KB + flush + fdatasync): 3.51× → 1.01× of the
//! payload written, and 25–30 % less time per append.
//!
//! A run costs sled's CPU (~2 µs a slot: the key, its delta, a leaf split
//! every eight or so), and a write that stops for one is that much slower:
//! at 32 frames per write every ninth took ~600 µs longer. So a sync also
//! tops the slots up ([`to_top_up`]), from a thread of its own while it
//! waits on the disk, and writes rarely find too few.
//!
//! # Invariants
//! - A slot is a `W<lsn>` key with an empty value. No frame is ever empty
//!   (it has at least its header), so the two cannot be confused.
//! - Every slot lies above every frame. Slots are inserted before the frames
//!   that fill them, always under the engine's write lock (a write's run and
//!   a sync's top-up alike, so never beside a frame being written), from the
//!   end of the slots or the log, whichever is higher, and frames are written
//!   in LSN order, so the prefix of sled's log that survives a crash keeps
//!   this true. A frame found above a slot is corruption
//!   ([`CorruptionKind::FrameAfterSlot`]): the log has a hole.
//! - Slots are never read as records and never reported: they are the
//!   space the next frames will be written into, nothing more.
//!
//! [`CorruptionKind::FrameAfterSlot`]: crate::error::CorruptionKind::FrameAfterSlot

use std::ops::Range;

use crate::keys::LSN_MAX;

/// Slots kept reserved beyond the last frame a write fills. Four leaves'
/// worth: the frames written land in leaves no later run of slots splits.
pub const SLOTS_AHEAD_MIN: u64 = 64;

/// Slots reserved at once (beyond the minimum). Larger runs cost nothing
/// per frame; the run is a few KB of keys in sled's log.
pub const SLOTS_RESERVED_CHUNK: u64 = 256;

/// A sync tops the slots up (see [`to_top_up`]) only when at least this
/// many are missing: below it, starting a thread costs more than it saves.
pub const SLOTS_TOPPED_UP_MIN: u64 = 32;

/// Most slots a sync inserts. About 2 µs of sled's CPU each (the key, the
/// delta, a leaf split every eight or so), so a top-up of this size ends
/// inside the sync's own wait on the disk (~250 µs for sled's flush alone).
pub const SLOTS_TOPPED_UP_MAX: u64 = 64;

/// True when a stored `W<lsn>` value is a reserved slot, not a frame.
pub fn is_slot(value: &[u8]) -> bool {
    value.is_empty()
}

/// The slots to insert before a write whose frames end (exclusive) at
/// `frames_end`, when slots are reserved up to `slots_end` (exclusive).
/// Empty while enough are reserved.
/// Never past [`LSN_MAX`], where no frame can go (the write refuses
/// frames past it before asking).
pub fn to_reserve(frames_end: u64, slots_end: u64) -> Range<u64> {
    if slots_end >= frames_end.saturating_add(SLOTS_AHEAD_MIN).min(LSN_MAX) {
        return slots_end..slots_end;
    }
    slots_end..reserve_end(frames_end)
}

/// Where a full reserve ends for frames that end at `frames_end`: capped at
/// [`LSN_MAX`] (until 2026-12-05 a store whose log neared it, which only a
/// forged tombstone can make, got up to 320 slots past it).
fn reserve_end(frames_end: u64) -> u64 {
    frames_end
        .saturating_add(SLOTS_AHEAD_MIN + SLOTS_RESERVED_CHUNK)
        .min(LSN_MAX)
}

/// The slots a sync inserts beside its flush and fdatasync, while the
/// next frames are written from `next_lsn` and slots are reserved up to
/// `slots_end`: part of the run [`to_reserve`] would insert later, ending
/// where that run ends. A write then finds its slots already there instead
/// of stopping for a run of 320 (measured at 32 frames per write: every
/// ninth write took ~600 µs longer). Empty when few are missing.
pub fn to_top_up(next_lsn: u64, slots_end: u64) -> Range<u64> {
    // Never at or below a frame: slots only ever go above the log's tail.
    let start = slots_end.max(next_lsn);
    let end = reserve_end(next_lsn);
    // Saturating: `slots_end` comes from the store, where damage can put
    // a slot anywhere up to the top of the key space.
    if start.saturating_add(SLOTS_TOPPED_UP_MIN) > end {
        return start..start;
    }
    start..end.min(start.saturating_add(SLOTS_TOPPED_UP_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_a_run_ahead_of_the_frames_and_only_when_short() {
        // A new store: the first write's frames and a run beyond them.
        assert_eq!(to_reserve(33, 1), 1..33 + 64 + 256);
        // Enough ahead: nothing.
        assert!(to_reserve(100, 353).is_empty());
        assert!(to_reserve(289, 353).is_empty());
        // Short: the next run starts where the last ended.
        assert_eq!(to_reserve(290, 353), 353..290 + 64 + 256);
        // A write larger than the reserve: its own frames are covered too.
        assert_eq!(to_reserve(5000, 353), 353..5000 + 64 + 256);
    }

    #[test]
    fn a_top_up_adds_at_most_a_bounded_run_and_never_beyond_a_full_reserve() {
        let full = SLOTS_AHEAD_MIN + SLOTS_RESERVED_CHUNK;
        // A full reserve: nothing to add.
        assert!(to_top_up(100, 100 + full).is_empty());
        // Fewer missing than the minimum: not worth a thread.
        assert!(to_top_up(100, 100 + full - SLOTS_TOPPED_UP_MIN + 1).is_empty());
        assert_eq!(
            to_top_up(100, 100 + full - SLOTS_TOPPED_UP_MIN),
            100 + full - SLOTS_TOPPED_UP_MIN..100 + full
        );
        // Many missing: a bounded run from the end of the slots.
        assert_eq!(to_top_up(100, 150), 150..150 + SLOTS_TOPPED_UP_MAX);
        // Slots that end below the frames (no reserve at all) start at the
        // frames, never over them.
        assert_eq!(to_top_up(100, 0), 100..100 + SLOTS_TOPPED_UP_MAX);
    }

    /// A log near the top of the key space: no slot at or past `LSN_MAX`.
    #[test]
    fn no_slot_is_reserved_at_or_past_the_largest_lsn() {
        for tail in [LSN_MAX - 400, LSN_MAX - 100, LSN_MAX - 5, LSN_MAX] {
            for slots_end in [tail, tail + 10, LSN_MAX] {
                let r = to_reserve(tail, slots_end);
                assert!(
                    r.is_empty() || r.end <= LSN_MAX,
                    "{tail} {slots_end}: {r:?}"
                );
                let t = to_top_up(tail, slots_end);
                assert!(
                    t.is_empty() || t.end <= LSN_MAX,
                    "{tail} {slots_end}: {t:?}"
                );
            }
        }
        // Far from the top, the same runs as before.
        assert_eq!(to_reserve(LSN_MAX - 400, LSN_MAX - 400).end, LSN_MAX - 80);
        assert_eq!(to_reserve(LSN_MAX - 100, LSN_MAX - 100).end, LSN_MAX);
    }

    #[test]
    fn only_the_empty_value_is_a_slot() {
        assert!(is_slot(&[]));
        assert!(!is_slot(&[0]));
    }
}

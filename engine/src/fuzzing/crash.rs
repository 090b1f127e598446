//! Target `wal_crash`: a store as a process crash leaves it, no damage.
//!
//! Appends made durable, then writes never synced, the last of them (of
//! one partition or both) cut by the crash after any of its inserts into
//! sled. sled's log survives a crash as a prefix, so what the crash leaves
//! is every insert of that write up to the cut and none after (engine.rs,
//! `write`: its slots, then each entry's frames and its index entry, then
//! its partitions' summaries, then the checkpoint). The store is built as that prefix, from the whole
//! write and the write state before it, rather than by killing a process:
//! every cut of every write is reachable, and each run is deterministic.
//!
//! `wal_recover` damages stores whose every record was acknowledged, so
//! the half of recovery that truncates a torn tail, and the one that
//! rebuilds index entries and summaries a crash left missing, are reached
//! there only through damage, where an error is always an acceptable
//! answer. Here nothing is damaged, and the answers are exact.
//!
//! # Invariants checked
//! - The default open succeeds, reports a truncation exactly when the cut
//!   fell inside an entry's frames (that entry's, from its first frame),
//!   calls no index entry damaged (a crash leaves one missing, never
//!   wrong),
//!   and keeps every other record: every acknowledged one, every one the
//!   earlier unsynced writes wrote (whole, as sled's prefix holds them),
//!   and every entry of the cut write whose frames all precede the cut;
//!   records read back byte for byte as written; verify is clean; each
//!   partition's durable offset is its last kept record's, plus one.
//! - A strict open refuses a trace of the cut write (some of its frames,
//!   without all of its frames, index entries and summary), as its mode
//!   says, with corruption located in that write's frames, index entries
//!   or partition; with no trace (none of its frames, or all of them and
//!   their index entries and summary) it opens to the same records.
//! - The recovered store takes more appends, behind a redelivery of the
//!   last records it kept (dropped, not stored twice), and a close and a
//!   strict reopen read back all of them after the kept records.

use std::collections::BTreeMap;
use std::path::Path;

use super::{batch, copy_dir, recover_partitions, small_config, Input};
use crate::engine::WriteState;
use crate::error::Location;
use crate::index::IndexEntry;
use crate::{keys, meta, poisoned, slots, watermark};
use crate::{Engine, Error, Record, RecordBatch, RecoveryMode, TopicPartition};

/// A `wal_crash` input, read.
#[derive(Debug)]
struct CrashPlan {
    /// Appends made durable (fsynced) before the crash: each its
    /// partition's index, its record count, its values' length.
    acked: Vec<(usize, usize, usize)>,
    /// Writes never synced, at least one; the crash cuts the last.
    unacked: Vec<(usize, usize, usize)>,
    /// Where among the last write's inserts the crash fell (modulo their
    /// count plus one: all of them made it).
    cut: usize,
    /// How far below the acknowledged LSN the watermark file names: a power
    /// loss may lose its last rewrite, which only an open's fdatasync, a
    /// close's or one a second apart made durable (watermark.rs).
    watermark_back: u64,
    /// Leave the open mark as a crash does (the next open then fsyncs the
    /// store and drops its cached pages first, poisoned.rs).
    open_mark: bool,
    /// The cut write also writes the other partition (a batch of this
    /// record count and value length, after its own): a write of two
    /// partitions, its entries in turn, then both summaries. Read from the
    /// input's last bytes, so that inputs from before it (since the night
    /// of 2026-12-04) still cut a write of one.
    also: Option<(usize, usize)>,
    /// After the durable appends, a partition (its index) advanced this far
    /// past its next offset (`advance_partitions`, as past transaction
    /// markers) and synced: the writes after it go on from there. Read
    /// after `also`, so that inputs from before it (since the night of
    /// 2026-12-04) advance nothing.
    advance: Option<(usize, i64)>,
    /// After the cut write, unsynced, its first partition advanced this far
    /// past the write's last record: the order `cairn run` writes in (a
    /// put, then `caught_up`, then one sync). The advance's summary is then
    /// the crash's last insert to keep or lose. Read after `advance`, so
    /// that inputs from before it (since later the same night) leave it
    /// out.
    advance_after: Option<i64>,
}

fn crash_plan(data: &[u8]) -> CrashPlan {
    let mut input = Input::new(data);
    let shape = |input: &mut Input| (input.below(2), 1 + input.below(40), 1 + input.below(300));
    let acked_count = input.below(4);
    let acked = (0..acked_count).map(|_| shape(&mut input)).collect();
    let unacked_count = 1 + input.below(3);
    let unacked = (0..unacked_count).map(|_| shape(&mut input)).collect();
    let cut = input.u16() as usize;
    let flags = input.u8();
    let watermark_back = if flags & 1 == 1 {
        u64::from(input.u8())
    } else {
        0
    };
    let also = (input.u8() % 2 == 1).then(|| (1 + input.below(40), 1 + input.below(300)));
    let advance = (input.u8() % 2 == 1).then(|| (input.below(2), 1 + input.below(4) as i64));
    let advance_after = (input.u8() % 2 == 1).then(|| 1 + input.below(4) as i64);
    CrashPlan {
        acked,
        unacked,
        cut,
        watermark_back,
        open_mark: flags & 2 == 2,
        also,
        advance,
        advance_after,
    }
}

/// One insert of a write, as engine.rs makes them, in their order.
#[derive(Debug)]
enum Insert {
    Slot(u64),
    Frame(u64),
    Index(Vec<u8>),
    Summary(TopicPartition),
    Checkpoint,
    /// The summary of an advance made after the write (`advance_after`).
    Advance(TopicPartition),
}

impl Insert {
    fn kind(&self) -> &'static str {
        match self {
            Insert::Slot(_) => "slot",
            Insert::Frame(_) => "frame",
            Insert::Index(_) => "index",
            Insert::Summary(_) => "summary",
            Insert::Checkpoint => "checkpoint",
            Insert::Advance(_) => "advance",
        }
    }
}

/// What the crash left, to hold the open to.
struct Crashed {
    /// Per partition, the records every open must keep, in order.
    kept: BTreeMap<TopicPartition, Vec<Record>>,
    /// The partition advanced, and to where (`CrashPlan::advance`).
    floors: BTreeMap<TopicPartition, i64>,
    /// The entry the cut tore, if it fell among an entry's frames: its
    /// first LSN and the frames of it that made it.
    torn: Option<(u64, u64)>,
    /// The watermark file the crash left, if it names one.
    watermark: Option<u64>,
    /// The first of the cut write's inserts the crash undid, by kind
    /// (`None`: it made them all). For the seeds' test.
    #[cfg_attr(not(test), allow(dead_code))]
    first_undone: Option<&'static str>,
    /// The cut write left a trace a strict open refuses: some of its
    /// frames, without all of its frames, index entries and summary.
    trace: bool,
    /// The cut write's partitions and LSNs, where a strict open's refusal
    /// must point.
    cut_tps: Vec<TopicPartition>,
    cut_lsns: std::ops::Range<u64>,
}

/// The next offset of `tp` after what `written` holds, and where
/// `floors` says it was advanced to; `None` for a partition with neither.
fn next_offset(
    written: &BTreeMap<TopicPartition, Vec<Record>>,
    floors: &BTreeMap<TopicPartition, i64>,
    tp: &TopicPartition,
) -> Option<i64> {
    let last = written.get(tp).and_then(|v| v.last()).map(|r| r.offset + 1);
    last.max(floors.get(tp).copied())
}

/// The next batch of `shape` for its partition, after what `written`
/// holds and where `floors` advanced it.
fn next_batch(
    written: &BTreeMap<TopicPartition, Vec<Record>>,
    floors: &BTreeMap<TopicPartition, i64>,
    (tp, count, value_len): (usize, usize, usize),
) -> RecordBatch {
    let tp = &recover_partitions()[tp];
    let start = next_offset(written, floors, tp).unwrap_or(0);
    batch(tp, start..start + count as i64, value_len)
}

/// Write the plan's store at `store` and leave it as its crash would.
fn crash(plan: &CrashPlan, store: &Path) -> Crashed {
    let mut written: BTreeMap<TopicPartition, Vec<Record>> = BTreeMap::new();
    let engine = Engine::open(small_config(store)).expect("open a fresh store");
    let mut floors: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for &shape in &plan.acked {
        let b = next_batch(&written, &floors, shape);
        engine.append(std::slice::from_ref(&b)).expect("append");
        written.entry(b.tp).or_default().extend(b.records);
    }
    if let Some((p, ahead)) = plan.advance {
        let tp = recover_partitions()[p].clone();
        let to = next_offset(&written, &floors, &tp).unwrap_or(0) + ahead;
        floors.insert(tp, to);
        engine.advance_partitions(&floors).expect("advance");
        engine.sync().expect("sync the advance");
    }
    // The files as the crash finds them: the watermark is rewritten (into
    // the page cache) after every sync, the open mark stays while open.
    let watermark_bytes = std::fs::read(store.join(watermark::WATERMARK_FILE)).ok();
    let open_mark = std::fs::read(store.join(poisoned::OPEN_FILE)).ok();
    let (last, earlier) = plan.unacked.split_last().expect("one unsynced write");
    for &shape in earlier {
        let b = next_batch(&written, &floors, shape);
        engine.write(std::slice::from_ref(&b)).expect("write");
        written.entry(b.tp).or_default().extend(b.records);
    }
    let before: WriteState = engine.write_state_copy();
    let mut cut_batches = vec![next_batch(&written, &floors, *last)];
    if let Some((count, value_len)) = plan.also {
        cut_batches.push(next_batch(
            &written,
            &floors,
            (1 - last.0, count, value_len),
        ));
    }
    engine.write(&cut_batches).expect("write");
    let after: WriteState = engine.write_state_copy();
    let advanced_after = plan.advance_after.map(|ahead| {
        let b = &cut_batches[0];
        let last = b.records.last().expect("a batch holds records").offset;
        let to = (b.tp.clone(), last + 1 + ahead);
        engine
            .advance_partitions(&[to.clone()].into_iter().collect())
            .expect("advance after the write");
        to
    });
    // A drop syncs (not a crash): the crash is made below, from sled's
    // tree and the two files.
    drop(engine);

    let db = small_config(store).open_sled().expect("open sled");
    let tree = db.open_tree("cairn").expect("open tree");
    // The write's entries, in the order it wrote them: by LSN.
    let mut entries: Vec<(Vec<u8>, TopicPartition, IndexEntry)> = Vec::new();
    for b in &cut_batches {
        for kv in tree.scan_prefix(keys::index_prefix(&b.tp)) {
            let (k, v) = kv.expect("scan");
            let (tp, e) = IndexEntry::decode(&k, &v).expect("an index entry the engine wrote");
            if e.lsn >= before.next_lsn {
                entries.push((k.to_vec(), tp, e));
            }
        }
    }
    entries.sort_by_key(|(_, _, e)| e.lsn);
    let mut inserts: Vec<Insert> = slots::to_reserve(after.next_lsn, before.slots_end)
        .map(Insert::Slot)
        .collect();
    let mut lsn = before.next_lsn;
    for (k, _, e) in &entries {
        assert_eq!(e.lsn, lsn, "the cut write's entries follow each other");
        inserts.extend((e.lsn..e.lsn + u64::from(e.chunks)).map(Insert::Frame));
        inserts.push(Insert::Index(k.clone()));
        lsn += u64::from(e.chunks);
    }
    assert_eq!(lsn, after.next_lsn, "the cut write's entries fill its LSNs");
    // Its summaries after all its entries, in partition order (a map's).
    let mut cut_tps: Vec<TopicPartition> = cut_batches.iter().map(|b| b.tp.clone()).collect();
    cut_tps.sort();
    inserts.extend(cut_tps.iter().cloned().map(Insert::Summary));
    if after.checkpoint_lsn != before.checkpoint_lsn {
        inserts.push(Insert::Checkpoint);
    }
    if let Some((tp, _)) = &advanced_after {
        inserts.push(Insert::Advance(tp.clone()));
    }
    let cut = plan.cut % (inserts.len() + 1);
    // Undone last to first: a frame goes back to the slot it filled, and
    // that slot goes too if its own insert is undone.
    for undone in inserts[cut..].iter().rev() {
        match undone {
            Insert::Slot(lsn) => {
                tree.remove(keys::wal_key(*lsn)).expect("remove");
            }
            Insert::Frame(lsn) => {
                tree.insert(keys::wal_key(*lsn), Vec::new())
                    .expect("insert");
            }
            Insert::Index(k) => {
                tree.remove(k).expect("remove");
            }
            Insert::Summary(tp) => match before.partitions.get(tp) {
                Some(s) => {
                    let (k, v) = s.encode(tp);
                    tree.insert(k, v).expect("insert");
                }
                None => {
                    tree.remove(keys::partition_key(tp)).expect("remove");
                }
            },
            Insert::Checkpoint => {
                tree.insert(
                    keys::META_CHECKPOINT,
                    meta::encode_checkpoint(before.checkpoint_lsn),
                )
                .expect("insert");
            }
            // Back to the summary the write left.
            Insert::Advance(tp) => {
                let (k, v) = after.partitions[tp].encode(tp);
                tree.insert(k, v).expect("insert");
            }
        }
    }
    db.flush().expect("flush");
    drop(tree);
    drop(db);

    let frames_end = inserts[..cut]
        .iter()
        .filter_map(|i| match i {
            Insert::Frame(lsn) => Some(lsn + 1),
            _ => None,
        })
        .max()
        .unwrap_or(before.next_lsn);
    let mut torn = None;
    for (_, tp, e) in &entries {
        let end = e.lsn + u64::from(e.chunks);
        if end <= frames_end {
            let records = &cut_batches
                .iter()
                .find(|b| &b.tp == tp)
                .expect("an entry of the write's")
                .records;
            written.entry(tp.clone()).or_default().extend(
                records
                    .iter()
                    .filter(|r| (e.first_offset..=e.last_offset).contains(&r.offset))
                    .cloned(),
            );
        } else if e.lsn < frames_end {
            torn = Some((e.lsn, frames_end - e.lsn));
        }
    }

    let watermark_path = store.join(watermark::WATERMARK_FILE);
    let mut watermark = None;
    match watermark_bytes {
        Some(b) => {
            let b = match watermark::decode(&b) {
                Ok(lsn) if plan.watermark_back > 0 => {
                    watermark::encode(lsn.saturating_sub(plan.watermark_back)).to_vec()
                }
                _ => b,
            };
            watermark = watermark::decode(&b).ok();
            std::fs::write(&watermark_path, b).expect("write the watermark file");
        }
        None => {
            let _ = std::fs::remove_file(&watermark_path);
        }
    }
    if let (true, Some(mark)) = (plan.open_mark, open_mark) {
        std::fs::write(store.join(poisoned::OPEN_FILE), mark).expect("write the open mark");
    }
    // The advance after the write outlived the crash only if every insert
    // did (it was the last).
    if let (Some((tp, to)), true) = (advanced_after, cut == inserts.len()) {
        floors.insert(tp, to);
    }
    let made_frame = inserts[..cut].iter().any(|i| matches!(i, Insert::Frame(_)));
    let undid_write = inserts[cut..]
        .iter()
        .any(|i| matches!(i, Insert::Frame(_) | Insert::Index(_) | Insert::Summary(_)));
    Crashed {
        kept: written,
        floors,
        torn,
        watermark,
        first_undone: inserts.get(cut).map(Insert::kind),
        trace: made_frame && undid_write,
        cut_tps,
        cut_lsns: before.next_lsn..after.next_lsn,
    }
}

/// Every partition's records, read whole; a read error is a finding here.
fn read_back(engine: &Engine, what: &str) -> BTreeMap<TopicPartition, Vec<Record>> {
    let mut out = BTreeMap::new();
    for tp in recover_partitions() {
        let records: Vec<Record> = engine
            .read(&tp, 0)
            .and_then(|iter| iter.collect::<crate::Result<Vec<_>>>())
            .unwrap_or_else(|e| panic!("{what}: {tp} did not read back: {e}"));
        if !records.is_empty() {
            out.insert(tp, records);
        }
    }
    out
}

/// The records kept, compared partition by partition: their offsets first
/// (a failure shows two lists of numbers, not two dumps of records), then
/// their bytes.
fn assert_kept(
    got: &BTreeMap<TopicPartition, Vec<Record>>,
    want: &BTreeMap<TopicPartition, Vec<Record>>,
    what: &str,
) {
    for tp in recover_partitions() {
        let (g, w) = (
            got.get(&tp).map_or(&[][..], Vec::as_slice),
            want.get(&tp).map_or(&[][..], Vec::as_slice),
        );
        let offsets = |rs: &[Record]| rs.iter().map(|r| r.offset).collect::<Vec<_>>();
        assert_eq!(offsets(g), offsets(w), "{what}: {tp}'s offsets");
        assert!(g == w, "{what}: {tp}'s records differ from those written");
    }
}

pub fn wal_crash(data: &[u8], scratch: &Path) {
    let plan = crash_plan(data);
    let store = scratch.join("store");
    let crashed = crash(&plan, &store);
    let strict = scratch.join("strict");
    copy_dir(&store, &strict);
    let what = format!("{plan:?}");

    let engine = Engine::open(small_config(&store))
        .unwrap_or_else(|e| panic!("a crashed store did not open: {e} ({what})"));
    let report = engine.recovery_report().clone();
    match (&report.truncated, crashed.torn) {
        (None, None) => {}
        (Some(t), Some((first_lsn, frames))) => {
            assert_eq!(
                (t.first_lsn, t.frames),
                (first_lsn, frames),
                "the truncation is the torn entry's ({what})"
            );
            if let Some(w) = crashed.watermark {
                assert!(t.first_lsn > w, "truncated at or below the watermark {w}");
            }
        }
        (t, torn) => panic!("truncated {t:?} where the crash tore {torn:?} ({what})"),
    }
    // sled writes each value whole, so a crash leaves an index entry
    // missing (rebuilt from its frames) but never one that disagrees with
    // them: a damaged one here is recovery misreading a sound entry.
    assert_eq!(
        report.index_entries_damaged, 0,
        "recovery called an index entry damaged after a crash ({what})"
    );
    assert_kept(&read_back(&engine, &what), &crashed.kept, &what);
    let verified = engine.verify().expect("verify");
    assert!(
        verified.is_clean(),
        "verify after recovery: {verified:?} ({what})"
    );
    for tp in recover_partitions() {
        assert_eq!(
            engine.durable_offset(&tp),
            next_offset(&crashed.kept, &crashed.floors, &tp),
            "{tp}'s durable offset ({what})"
        );
    }
    // The recovered store takes the next records of both partitions,
    // behind the last one or two it kept again, as Kafka redelivers from
    // a commit that lagged the archive: those are dropped, never stored
    // twice (since 2026-12-06, an audit: nothing was redelivered).
    let mut kept = crashed.kept.clone();
    for p in 0..2 {
        let b = next_batch(&kept, &crashed.floors, (p, 3, 50));
        let held = kept.get(&b.tp).map_or(&[][..], Vec::as_slice);
        let again = &held[held.len().saturating_sub(1 + p)..];
        let mut redelivered = RecordBatch {
            tp: b.tp.clone(),
            records: again.to_vec(),
        };
        redelivered.records.extend(b.records.iter().cloned());
        let durable = engine
            .append(std::slice::from_ref(&redelivered))
            .unwrap_or_else(|e| panic!("append after recovery: {e} ({what})"));
        let last = b.records.last().expect("three records").offset;
        assert_eq!(
            (
                durable.get(&b.tp),
                durable.appended_records,
                durable.duplicate_records
            ),
            (Some(last + 1), 3, again.len() as u64),
            "{}: the durable offset and counts after a redelivery ({what})",
            b.tp
        );
        kept.entry(b.tp).or_default().extend(b.records);
    }
    engine.close().expect("close");
    let engine = Engine::open(small_config(&store).recovery_mode(RecoveryMode::Strict))
        .unwrap_or_else(|e| panic!("strict reopen after recovery: {e} ({what})"));
    assert_kept(&read_back(&engine, &what), &kept, &what);
    drop(engine);

    let in_cut_write = |location: &Location| match location {
        Location::Wal { lsn } => crashed.cut_lsns.contains(lsn),
        Location::Index {
            topic, partition, ..
        }
        | Location::Partition { topic, partition } => crashed
            .cut_tps
            .iter()
            .any(|tp| (tp.topic.as_str(), tp.partition) == (topic.as_str(), *partition)),
        _ => false,
    };
    match Engine::open(small_config(&strict).recovery_mode(RecoveryMode::Strict)) {
        Ok(engine) => {
            assert!(
                !crashed.trace,
                "strict opened a trace of the cut write ({what})"
            );
            assert_kept(&read_back(&engine, &what), &crashed.kept, &what);
        }
        Err(Error::Corruption { location, .. }) if crashed.trace && in_cut_write(&location) => {}
        Err(e) => panic!(
            "strict refused with {e} where the cut write (LSNs {:?}) left {} ({what})",
            crashed.cut_lsns,
            if crashed.trace { "a trace" } else { "no trace" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed seeds named for a cut (`cut_<insert>*` in
    /// fuzz/corpus/wal_crash: the first insert the crash undid; `whole*`:
    /// none) cut there, one of each is committed, and only the
    /// `cut_frame_torn*` seeds tear an entry.
    #[test]
    fn named_seeds_cut_where_they_say() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/wal_crash");
        let mut seen = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(&corpus).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let named = match name.strip_prefix("cut_") {
                Some(rest) => rest.split('_').next(),
                None if name.starts_with("whole") => None,
                None => continue,
            };
            let data = std::fs::read(corpus.join(&name)).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let plan = crash_plan(&data);
            let crashed = crash(&plan, &dir.path().join("store"));
            assert_eq!(crashed.first_undone, named, "{name}: {plan:?}");
            assert_eq!(
                crashed.torn.is_some(),
                name.starts_with("cut_frame_torn"),
                "{name} tears {:?}: {plan:?}",
                crashed.torn
            );
            seen.insert(named.unwrap_or("whole").to_owned());
        }
        let want = ["checkpoint", "frame", "index", "slot", "summary", "whole"];
        assert_eq!(
            seen,
            want.into_iter().map(str::to_owned).collect(),
            "a seed for each cut"
        );
    }

    /// The committed wal_crash seeds whose names start with `prefix`, each
    /// with its plan and the store its crash left (in a scratch directory
    /// dropped meanwhile: only what the crash says is kept).
    fn crashed_seeds(prefix: &str) -> Vec<(String, CrashPlan, Crashed)> {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/wal_crash");
        let mut seeds = Vec::new();
        for entry in std::fs::read_dir(&corpus).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            if !name.starts_with(prefix) {
                continue;
            }
            let plan = crash_plan(&std::fs::read(corpus.join(&name)).unwrap());
            let dir = tempfile::tempdir().unwrap();
            let crashed = crash(&plan, &dir.path().join("store"));
            seeds.push((name, plan, crashed));
        }
        assert!(!seeds.is_empty(), "no seed {prefix}*");
        seeds
    }

    /// The committed `advanced_then_cut_*` seeds advance a partition
    /// before the cut write, and between them cut it before its index
    /// entry and before its summary: recovery then rebuilds or extends
    /// an advanced summary.
    #[test]
    fn advanced_seeds_advance_and_cut_before_the_summary() {
        let mut undone = std::collections::BTreeSet::new();
        for (name, plan, crashed) in crashed_seeds("advanced_then_cut_") {
            let advanced = plan.advance.expect("an advance").0;
            // The advanced partition's write is the one cut.
            assert_eq!(plan.unacked.last().unwrap().0, advanced, "{name}: {plan:?}");
            assert_eq!(crashed.floors.len(), 1, "{name}");
            undone.insert(crashed.first_undone.unwrap_or("whole"));
        }
        assert!(
            undone.contains("index") && undone.contains("summary"),
            "{undone:?}"
        );
    }

    /// The committed `advanced_after_the_write_cut_*` seeds advance the
    /// cut write's partition after it, unsynced (as `cairn run` does: a
    /// put, `caught_up`, one sync), and between them lose only the
    /// advance's summary, and keep it.
    #[test]
    fn advanced_after_seeds_lose_and_keep_the_advance() {
        let mut undone = std::collections::BTreeSet::new();
        for (name, plan, crashed) in crashed_seeds("advanced_after_the_write_cut_") {
            assert!(plan.advance_after.is_some(), "{name}: {plan:?}");
            let first_undone = crashed.first_undone.unwrap_or("whole");
            assert_eq!(
                crashed.floors.len(),
                usize::from(first_undone == "whole"),
                "{name}"
            );
            undone.insert(first_undone);
        }
        assert!(
            undone.contains("advance") && undone.contains("whole"),
            "{undone:?}"
        );
    }
}

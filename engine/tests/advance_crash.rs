//! A crash in the middle of a write after an advance
//! (`Engine::advance_partitions`): recovery extends or rebuilds the
//! advanced summary, keeps its floor, and leaves a store every open and
//! verify take as sound. Uses the `wal::append::mid_write` failpoint; one
//! test per binary (failpoints are process-global).

mod common;

use std::collections::BTreeMap;

use cairn_engine::{Engine, EngineConfig, RecoveryMode, TopicPartition, FAILPOINT_MID_WRITE};
use common::{batch, read_all};

#[test]
fn a_write_cut_after_an_advance_recovers_to_a_sound_store() {
    let scenario = fail::FailScenario::setup();
    let tp = TopicPartition::new("t", 0);
    let mut cuts = 0;
    for after in 1..14 {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            e.append(&[batch(&tp, 0..5, 20)]).unwrap();
            e.advance_partitions(&BTreeMap::from([(tp.clone(), 7)]))
                .unwrap();
            e.sync().unwrap();
            fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
            let cut = e.append(&[batch(&tp, 7..9, 20)]).is_err();
            fail::remove(FAILPOINT_MID_WRITE);
            if !cut {
                break; // the write has fewer inserts than `after`
            }
            cuts += 1;
        }
        for mode in [RecoveryMode::default(), RecoveryMode::Strict] {
            let e = Engine::open(EngineConfig::new(dir.path()).recovery_mode(mode))
                .unwrap_or_else(|err| panic!("cut after {after} inserts, {mode:?}: {err}"));
            let p = e.partition(&tp).unwrap();
            let held: Vec<i64> = read_all(&e, &tp).iter().map(|r| r.offset).collect();
            // The advance was durable; of the cut write, whole entries only.
            let want = match p.next_offset {
                7 => vec![0, 1, 2, 3, 4],
                9 => vec![0, 1, 2, 3, 4, 7, 8],
                other => panic!("cut after {after}: next offset {other}"),
            };
            assert_eq!(held, want, "cut after {after}, {mode:?}");
            assert_eq!(p.record_count, want.len() as u64);
            let report = e.verify().unwrap();
            assert!(report.is_clean(), "cut after {after}, {mode:?}: {report:?}");
            e.close().unwrap();
        }
    }
    // Each cut keeps the entry (its one frame is whole, so recovery
    // rebuilds what the cut left out: the index entry, the summary, the
    // checkpoint), extending the advanced summary: cut after the frame,
    // and after its index entry.
    assert!(cuts >= 2, "only {cuts} cuts");

    // A partition of 200 entries, advanced, then a write cut after its
    // first inserts: recovery extends the advanced summary from the tail's
    // entries, not from the partition's whole index (a transactional
    // partition of `cairn run`'s is advanced after most puts).
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for o in (0..20_000).step_by(100) {
            e.append(&[batch(&tp, o..o + 100, 20)]).unwrap();
        }
        e.advance_partitions(&BTreeMap::from([(tp.clone(), 20_003)]))
            .unwrap();
        e.sync().unwrap();
    }
    let mut extended = None;
    for after in 1..14 {
        fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
        let cut = {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            e.append(&[batch(&tp, 20_003..20_005, 20)]).is_err()
        };
        fail::remove(FAILPOINT_MID_WRITE);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let report = e.recovery_report().clone();
        if report.partitions_repaired > 0 && report.truncated.is_none() {
            extended = Some((report, e));
            break;
        }
        assert!(cut, "no cut left the summary behind its entry");
    }
    let (report, e) = extended.expect("a cut between the entry and its summary");
    assert!(
        report.summary_index_entries_read <= 2,
        "read {} index entries to repair an advanced summary one entry behind",
        report.summary_index_entries_read
    );
    assert_eq!(e.durable_offset(&tp), Some(20_005));
    assert!(e.verify().unwrap().is_clean());
    scenario.teardown();
}

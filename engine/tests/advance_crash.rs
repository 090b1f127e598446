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
    scenario.teardown();
}

//! A truncation that empties a partition while an append lands between its
//! look at the newest index entry and its count of the whole index (the
//! failpoint): the appended entry, from the summary's next offset on, is
//! not counted against that summary, and the truncation goes on (until
//! 2026-12-05 it was refused as `SummaryMismatch`, a healthy archive
//! reported damaged, which stopped a run's `--retain` pass). A process of
//! its own: the failpoint's callback would meet other tests' truncations.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_EMPTYING_COUNT};
use common::batch;

#[test]
fn an_append_racing_an_emptying_truncation_is_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("race", 0);
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    for i in 0..50 {
        engine
            .append(&[batch(&tp, i * 10..i * 10 + 10, 20)])
            .unwrap();
    }
    let fired = Arc::new(AtomicBool::new(false));
    let (writer, once, tp2) = (engine.clone(), fired.clone(), tp.clone());
    fail::cfg_callback(FAILPOINT_EMPTYING_COUNT, move || {
        if !once.swap(true, Ordering::SeqCst) {
            writer.append(&[batch(&tp2, 500..510, 20)]).unwrap();
        }
    })
    .unwrap();
    let report = engine.truncate_before(&tp, 500);
    fail::remove(FAILPOINT_EMPTYING_COUNT);
    assert!(
        fired.load(Ordering::SeqCst),
        "the failpoint was not reached"
    );
    let report = report.unwrap();
    assert_eq!(report.records_deleted, 500, "{report:?}");
    assert_eq!(report.first_offset_after, Some(500), "{report:?}");
    // The appended records are all that is left, read whole.
    let left: Vec<i64> = engine
        .read(&tp, 0)
        .unwrap()
        .map(|r| r.unwrap().offset)
        .collect();
    assert_eq!(left, (500..510).collect::<Vec<_>>());
    assert!(engine.verify().unwrap().is_clean());
}

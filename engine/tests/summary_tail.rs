//! After a crash between an append's index entries and its partition
//! summary, recovery brings the summary up to date by reading only the
//! index entries written since it: work proportional to the tail, not to
//! the partition (a partition's whole index can hold millions of entries).
//! Uses the `wal::append::mid_write` failpoint; one test per binary
//! (failpoints are process-global).

mod common;

use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_MID_WRITE};
use common::{batch, read_all};

#[test]
fn a_summary_behind_the_log_is_extended_from_the_tail() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("s", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // 500 entries of 100 records.
    for o in (0..50_000).step_by(100) {
        e.append(&[batch(&tp, o..o + 100, 50)]).unwrap();
    }
    drop(e);
    let mut next = 50_000;
    let mut extended = None;
    // Cut the next append after `after` inserts, until a cut falls between
    // its index entry and its summary (slot inserts move where that is).
    for after in 1..12 {
        fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
        {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            assert!(e.append(&[batch(&tp, next..next + 100, 50)]).is_err());
        }
        fail::remove(FAILPOINT_MID_WRITE);
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let report = e.recovery_report().clone();
        next = e.durable_offset(&tp).unwrap();
        if report.partitions_repaired > 0 && report.truncated.is_none() {
            extended = Some((report, e));
            break;
        }
    }
    let (report, e) = extended.expect("no cut fell between an index entry and its summary");
    eprintln!("{report:?}");
    assert_eq!(next, 50_100, "the cut append's entry was kept");
    assert!(
        report.summary_index_entries_read <= 2,
        "read {} index entries to repair a summary one entry behind",
        report.summary_index_entries_read
    );
    let p = &e.partitions()[0];
    assert_eq!(
        (p.first_offset, p.next_offset, p.record_count),
        (0, 50_100, 50_100)
    );
    assert_eq!(read_all(&e, &tp).len(), 50_100);
    assert!(e.verify().unwrap().is_clean());
    drop(e);
    scenario.teardown();
}

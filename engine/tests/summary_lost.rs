//! A partition whose stored summary is lost (damage: sled lost the value)
//! is refused at the open, at the partition, whether or not a write to it
//! after the last checkpoint was cut by a crash. With such a write, the
//! summary used to be rebuilt from the index, as if the partition's first
//! write had been cut before its summary: what the lost summary held
//! beyond the index (the floor of an advance past offsets that held no
//! record) was dropped without a word (seen in review, 2026-12-05). Uses
//! the `wal::append::mid_write` failpoint; one test per binary (failpoints
//! are process-global).

mod common;

use cairn_engine::fuzzing::copy_dir;
use cairn_engine::offsets::PartitionSummary;
use cairn_engine::{
    CorruptionKind, Engine, EngineConfig, Location, TopicPartition, FAILPOINT_MID_WRITE,
};
use common::{batch, open_refused, with_raw_tree};

#[test]
fn a_lost_summary_is_refused_whatever_cut_the_write_after_it_had() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let closed = dir.path().join("closed");
    let tp = TopicPartition::new("s", 0);
    let e = Engine::open(EngineConfig::new(&closed)).unwrap();
    for o in (0..300).step_by(100) {
        e.append(&[batch(&tp, o..o + 100, 50)]).unwrap();
    }
    // Past offsets that held no record: only the summary says so.
    let to = [(tp.clone(), 350)].into_iter().collect();
    e.advance_partitions(&to).unwrap();
    e.close().unwrap();
    let (summary_key, _) = PartitionSummary::empty_at(0).encode(&tp);
    let lose_summary = |store: &std::path::Path| {
        with_raw_tree(store, |t| {
            assert!(
                t.remove(&summary_key).unwrap().is_some(),
                "no summary to lose"
            );
        })
    };
    let want = (
        Location::Partition {
            topic: "s".into(),
            partition: 0,
        },
        CorruptionKind::SummaryMismatch {
            detail: "index entries exist but the summary is missing".into(),
        },
    );
    // Lost with no write after the checkpoint.
    let store = dir.path().join("unwritten");
    copy_dir(&closed, &store);
    lose_summary(&store);
    assert_eq!(
        open_refused(EngineConfig::new(&store), "no write"),
        want.clone()
    );
    // Lost as a run's write to the partition was cut by a crash after each
    // of its inserts in turn (slots, frames, the index entry, its own
    // summary, or none: the whole write): refused at every cut. Before
    // 2026-12-05 a cut that kept the write's frames opened, the summary
    // rebuilt from the index with no floor.
    let mut kept_frames = 0;
    for after in 1..16 {
        let store = dir.path().join(format!("cut{after}"));
        copy_dir(&closed, &store);
        fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
        let whole = {
            let e = Engine::open(EngineConfig::new(&store)).unwrap();
            e.write(&[batch(&tp, 350..450, 50)]).is_ok()
        };
        fail::remove(FAILPOINT_MID_WRITE);
        // Whether the cut kept the write's frames: the store before the
        // loss opens with the partition past 350.
        let probe = dir.path().join(format!("probe{after}"));
        copy_dir(&store, &probe);
        let next = Engine::open(EngineConfig::new(&probe))
            .unwrap()
            .durable_offset(&tp);
        if next == Some(450) {
            kept_frames += 1;
        }
        lose_summary(&store);
        assert_eq!(
            open_refused(
                EngineConfig::new(&store),
                &format!("cut after {after} inserts")
            ),
            want.clone(),
            "cut after {after} inserts (whole: {whole}, next offset before the loss {next:?})"
        );
        // Nor does verify say an open repairs it (until 2026-12-05 it did,
        // the tail having written to the partition).
        let report = cairn_engine::verify_store(&EngineConfig::new(&store)).unwrap();
        assert!(!report.is_clean(), "cut after {after}: {report:?}");
        assert!(
            !report
                .notes
                .iter()
                .any(|n| n.contains("Opening the archive repairs them")),
            "cut after {after}: {:?}",
            report.notes
        );
        if whole {
            break;
        }
    }
    assert!(kept_frames > 0, "no cut kept the write's frames");
    scenario.teardown();
}

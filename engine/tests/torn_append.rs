//! An append is several sled inserts (frames, index entries, summaries), not
//! one batch. A crash between any two of them must leave a store that opens
//! clean: complete entries kept (their index and summary rebuilt), an entry
//! missing chunks truncated, nothing acknowledged lost, and the redelivered
//! records written exactly once. Every third cut also crashes the recovery
//! that follows, after its repairs and before its summaries and sync, and
//! the next open must still come out clean. Uses the `wal::append::mid_write`
//! and `wal::recovery::mid_repair` failpoints; one test per binary
//! (failpoints are process-global).

mod common;

use cairn_engine::{
    Engine, EngineConfig, Error, Record, TopicPartition, FAILPOINT_MID_WRITE,
    FAILPOINT_RECOVERY_MID_REPAIR,
};
use common::{batch, read_all};

fn config(dir: &std::path::Path) -> EngineConfig {
    // Small frames and entries: the second append is several entries per
    // partition, most of them several frames.
    EngineConfig::new(dir)
        .frame_body_bytes_max(1024)
        .entry_bytes_target(4096)
}

/// A verify of the store as the crash left it (before any open) finds it
/// clean, or finds only what the open then repairs, and says so (true).
fn stopped_verify_says_the_open_repairs(dir: &std::path::Path, after: u64) -> bool {
    let v = cairn_engine::verify_store(&config(dir)).unwrap();
    if v.is_clean() {
        return false;
    }
    let all = format!("all {} problems lie past the checkpoint", v.problems.len());
    assert!(
        v.problems_unlisted == 0 && v.notes.iter().any(|n| n.starts_with(&all)),
        "cut after {after}: {:?}\n{:#?}",
        v.notes,
        v.problems
    );
    true
}

#[test]
fn a_crash_between_any_two_inserts_recovers_clean() {
    let scenario = fail::FailScenario::setup();
    let tps: Vec<TopicPartition> = (0..2).map(|p| TopicPartition::new("mid", p)).collect();
    let first: Vec<_> = tps.iter().map(|tp| batch(tp, 0..20, 300)).collect();
    let second: Vec<_> = tps.iter().map(|tp| batch(tp, 20..60, 300)).collect();
    let mut stopped_at = 0;
    // Cuts whose stopped verify found what the open repairs.
    let mut noted = 0;
    for after in 0.. {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(config(dir.path())).unwrap();
            e.append(&first).unwrap();
            fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
            let r = e.append(&second);
            fail::remove(FAILPOINT_MID_WRITE);
            match r {
                Ok(_) => {
                    stopped_at = after;
                    break; // every insert went through: all cut points tried
                }
                Err(err) => assert!(matches!(err, Error::Poisoned { op: "write", .. }), "{err}"),
            }
        } // dropped without close: a crash
        noted += usize::from(stopped_verify_says_the_open_repairs(dir.path(), after));
        if after % 3 == 1 {
            // And a crash in the middle of the recovery that follows.
            fail::cfg(FAILPOINT_RECOVERY_MID_REPAIR, "return").unwrap();
            let r = Engine::open(config(dir.path()));
            fail::remove(FAILPOINT_RECOVERY_MID_REPAIR);
            assert!(
                r.is_err(),
                "cut after {after}: the failpoint should stop recovery"
            );
        }
        let e = Engine::open(config(dir.path())).unwrap();
        let v = e.verify().unwrap();
        assert!(v.is_clean(), "cut after {after} inserts: {:?}", v.problems);
        for (i, tp) in tps.iter().enumerate() {
            let got = read_all(&e, tp);
            assert!(
                got.len() >= 20,
                "cut after {after}: acknowledged records lost"
            );
            let want: Vec<Record> = batch(tp, 0..got.len() as i64, 300).records;
            assert_eq!(
                got, want,
                "cut after {after}: {tp} is not a prefix of what was written"
            );
            assert_eq!(e.durable_offset(tp), Some(got.len() as i64));
            // Kafka redelivers the unacknowledged append; it lands exactly once.
            let d = e.append(&[second[i].clone()]).unwrap();
            assert_eq!(d.get(tp), Some(60));
            assert_eq!(read_all(&e, tp), batch(tp, 0..60, 300).records);
        }
        assert!(e.verify().unwrap().is_clean());
    }
    assert!(
        stopped_at > 4,
        "the second append should take several inserts, took {stopped_at}"
    );
    eprintln!(
        "tried a crash after each of {stopped_at} inserts; {noted} left what the open repairs"
    );
    // Most cuts leave an entry without its index entry or summary: a
    // verify that saw none would not be looking.
    assert!(noted > 0, "no cut left anything for the open to repair");

    // The first append of a store also reserves its first run of slots
    // (slots.rs) ahead of its frames: a crash inside that run, or between
    // it and the frames, leaves slots and no frames. Cut points inside the
    // run are alike (a prefix of empty values), so a few are tried there,
    // then every one from near its end through the frames.
    let mut first_stopped_at = 0;
    for after in (0..4).chain([64, 128, 256]).chain(300..) {
        let dir = tempfile::tempdir().unwrap();
        {
            let e = Engine::open(config(dir.path())).unwrap();
            fail::cfg(FAILPOINT_MID_WRITE, &format!("{after}*off->return(crash)")).unwrap();
            let r = e.append(&first);
            fail::remove(FAILPOINT_MID_WRITE);
            match r {
                Ok(_) => {
                    first_stopped_at = after;
                    break;
                }
                Err(err) => assert!(matches!(err, Error::Poisoned { op: "write", .. }), "{err}"),
            }
        }
        stopped_verify_says_the_open_repairs(dir.path(), after);
        let e = Engine::open(config(dir.path())).unwrap();
        let v = e.verify().unwrap();
        assert!(
            v.is_clean(),
            "first append cut after {after}: {:?}",
            v.problems
        );
        for (i, tp) in tps.iter().enumerate() {
            let got = read_all(&e, tp);
            assert_eq!(got, batch(tp, 0..got.len() as i64, 300).records);
            let d = e.append(&[first[i].clone()]).unwrap();
            assert_eq!(d.get(tp), Some(20));
            assert_eq!(read_all(&e, tp), batch(tp, 0..20, 300).records);
        }
        assert!(e.verify().unwrap().is_clean());
    }
    assert!(
        first_stopped_at > 300,
        "the first append should reserve a run of slots, took {first_stopped_at} inserts"
    );
    eprintln!("first append: tried crashes up to insert {first_stopped_at}");
    scenario.teardown();
}

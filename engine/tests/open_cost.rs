//! Open costs O(tail), not O(archive): the work recovery does is bounded by
//! what was written since the last checkpoint, whatever the store's size.
//! Counts work (frames checked), not time: timings on shared machines lie.
//! The timed comparison is in the bench crate (`cargo bench -p cairn-bench`).

mod common;

use cairn_engine::{Engine, EngineConfig, TopicPartition};

fn build(records: i64, interval: u64, close: bool) -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("o", 0);
    let e =
        Engine::open(EngineConfig::new(dir.path()).checkpoint_interval_bytes(interval)).unwrap();
    let mut o = 0;
    while o < records {
        e.append(&[common::batch(&tp, o..o + 100, 50)]).unwrap();
        o += 100;
    }
    let frames = e.stats().frames;
    if close {
        e.close().unwrap();
    }
    (dir, frames)
}

fn frames_checked(dir: &std::path::Path) -> u64 {
    Engine::open(EngineConfig::new(dir))
        .unwrap()
        .recovery_report()
        .frames_checked
}

#[test]
fn clean_open_checks_nothing_whatever_the_size() {
    let (small, _) = build(1_000, 64 << 20, true);
    let (large, frames) = build(50_000, 64 << 20, true);
    assert_eq!(frames, 500);
    assert_eq!(frames_checked(small.path()), 0);
    assert_eq!(frames_checked(large.path()), 0);
}

#[test]
fn crash_open_checks_only_since_the_checkpoint() {
    // Each 100-record append is one ~7 KB frame; checkpoint every 64 KiB.
    let interval = 64 << 10;
    let (small, small_frames) = build(1_000, interval, false);
    let (large, large_frames) = build(50_000, interval, false);
    let checked_small = frames_checked(small.path());
    let checked_large = frames_checked(large.path());
    eprintln!("small {checked_small}/{small_frames}, large {checked_large}/{large_frames}");
    assert_eq!(
        checked_small, small_frames,
        "small store: whole log is tail"
    );
    // The large store's tail is at most about two checkpoint intervals.
    assert!(
        checked_large <= 2 * (interval / 7000 + 2),
        "checked {checked_large} of {large_frames}"
    );
    assert!(checked_large < large_frames / 10);
}

//! A sync leader that panics (inside sled's flush, say) ends its sync as a
//! failure: the engine is poisoned and every appender is told so, where the
//! others would have waited for good for a sync that never ends. Appends
//! written while the sync is held (at the `wal::flush::err` failpoint,
//! which then panics) are waiting on it when it panics. One test per
//! binary, since failpoints are process-global.

mod common;

use cairn_engine::{Engine, EngineConfig, Error, TopicPartition, FAILPOINT_FLUSH_ERR};

#[test]
fn a_panicking_sync_poisons_instead_of_hanging_the_others() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("p", 0);
    let e = std::sync::Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    e.append(&[common::batch(&tp, 0..10, 50)]).unwrap();
    // The leader's sync is held, then panics, while others wait on it.
    let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(Some((entered_tx, release_rx)));
    fail::cfg_callback(FAILPOINT_FLUSH_ERR, move || {
        if let Some((entered, release)) = held.lock().unwrap().take() {
            entered.send(()).unwrap();
            release.recv().unwrap();
            panic!("the sync panics");
        }
    })
    .unwrap();
    let append = |p: i32, offsets: std::ops::Range<i64>| {
        let e = e.clone();
        std::thread::spawn(move || {
            e.append(&[common::batch(&TopicPartition::new("p", p), offsets, 50)])
        })
    };
    let leader = append(0, 10..20);
    entered
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the leader's sync reached the failpoint (built with fail/failpoints?)");
    // Written while the leader's sync is held: they wait for the next sync.
    let appends_before = e.stats().appends;
    let waiting: Vec<_> = (1..4).map(|p| append(p, 0..10)).collect();
    common::wait_until("the waiting appends' writes", || {
        e.stats().appends == appends_before + 3
    });
    release.send(()).unwrap();
    assert!(leader.join().is_err(), "the sync panicked");
    for w in waiting {
        let err = w.join().unwrap().unwrap_err();
        assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    }
    fail::remove(FAILPOINT_FLUSH_ERR);
    // Before: `syncing` stayed set, and this waited for ever.
    let err = e.append(&[common::batch(&tp, 20..30, 50)]).unwrap_err();
    assert!(matches!(err, Error::Poisoned { op: "fsync", .. }), "{err}");
    assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(e.durable_offset(&tp), Some(10));
    scenario.teardown();
}

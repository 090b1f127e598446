//! Group commit, made deterministic: the first append's sync is held at
//! the `wal::flush::err` failpoint (a callback that reports it entered and
//! waits to be released) while seven more appends are written, and then
//! all seven share the one sync that follows. One test per binary:
//! failpoints are process-global.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_FLUSH_ERR};
use common::wait_until;

#[test]
fn appends_written_during_a_sync_share_the_next_one() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let fsyncs_before = e.stats().fsyncs;
    let append = |t: i32| {
        let e = e.clone();
        std::thread::spawn(move || {
            let tp = TopicPartition::new("group", t);
            e.append(&[common::batch(&tp, [0], 100)]).unwrap()
        })
    };
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    let first = Mutex::new(Some((entered_tx, release_rx)));
    fail::cfg_callback(FAILPOINT_FLUSH_ERR, move || {
        // Only the first sync is held; the one after runs through.
        let held = first.lock().unwrap().take();
        if let Some((entered, release)) = held {
            entered.send(()).unwrap();
            release.recv().unwrap();
        }
    })
    .unwrap();
    let leader = append(0);
    entered
        .recv_timeout(Duration::from_secs(60))
        .expect("the leader's sync reached the failpoint (built with fail/failpoints?)");
    // The leader is inside its sync, which covers its own write only.
    let followers: Vec<_> = (1..8).map(append).collect();
    wait_until("the followers' writes", || e.stats().appends == 8);
    assert_eq!(e.stats().fsyncs, fsyncs_before, "the leader's sync is held");
    release.send(()).unwrap();
    for (t, h) in std::iter::once(leader).chain(followers).enumerate() {
        let durable = h.join().unwrap();
        // Each append returns once its own record is durable.
        assert_eq!(
            durable.get(&TopicPartition::new("group", t as i32)),
            Some(1),
            "{durable:?}"
        );
    }
    // The leader's sync, then one more for the seven written meanwhile.
    assert_eq!(e.stats().fsyncs, fsyncs_before + 2, "{:?}", e.stats());
    fail::remove(FAILPOINT_FLUSH_ERR);
    scenario.teardown();
}

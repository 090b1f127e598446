//! A retention pass that fails on the pruner's thread, while the run is
//! idle (failpoint `wal::flush::err`; a test binary of its own because
//! failpoints are process-wide): the failure hook hears of it at once, so
//! `cairn run` stops; the sink refuses every later put naming retention;
//! the pass is not retried; and the stop reports the error.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use cairn_connector::{ArchiveSink, SinkTask, TaskError};
use cairn_engine::fuzzing::batch;
use cairn_engine::{Engine, EngineConfig, TopicPartition};

const FLUSH_ERR: &str = "wal::flush::err";

#[test]
fn a_failed_pass_is_reported_at_once_and_stops_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let a = TopicPartition::new("t", 0);
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let (tx, failures) = mpsc::channel::<String>();
    let hook = Box::new(move |e: &str| tx.send(e.to_owned()).unwrap());
    // A pass every millisecond: the pruner is busy while the test runs.
    let mut sink = ArchiveSink::new(engine.clone())
        .with_retention(Duration::from_secs(86_400), Duration::from_millis(1), hook)
        .unwrap();
    sink.put(&[batch(&a, 0..10, 20)]).unwrap();
    // Every fsync from here on fails: the engine is poisoned by this one,
    // and the pruner's next pass meets the poisoned engine.
    fail::cfg(FLUSH_ERR, "return").unwrap();
    let consumed = BTreeMap::from([(a.clone(), 10)]);
    assert!(matches!(
        sink.pre_commit(&consumed),
        Err(TaskError::Fatal(_))
    ));
    // No put or pre_commit reaches the sink from here on (an idle run):
    // the hook alone must tell.
    let e = failures
        .recv_timeout(Duration::from_secs(60))
        .expect("the failure hook was called");
    assert!(e.contains("retention") && e.contains("poisoned"), "{e}");
    match sink.put(&[batch(&a, 10..11, 20)]) {
        Err(TaskError::Fatal(m)) => assert!(m.contains("retention"), "{m}"),
        other => panic!("a put after a failed pass must fail: {other:?}"),
    }
    assert!(
        failures.try_recv().is_err(),
        "called once: the pass is not retried"
    );
    fail::remove(FLUSH_ERR);
    drop(engine);
    match sink.stop() {
        Err(TaskError::Fatal(m)) => {
            assert!(m.contains("retention") || m.contains("poisoned"), "{m}")
        }
        Ok(()) => panic!("the stop must report the failure"),
        Err(e) => panic!("{e}"),
    }
}

//! A restore into the archive's own topic whose pass-over of the copies
//! cannot be made durable (its fsync fails) says so, leading the error,
//! with what it means: a run would archive the copies again. The engine is
//! poisoned, as after any failed fsync, and the command exits 1. A file of
//! its own: the failpoint is process-wide, and other tests' appends must
//! not meet it.

use cairn_connector::restore::{restore, RestoreConfig};
use cairn_connector::ConnectorError;
use cairn_engine::{Engine, EngineConfig};
use cairn_tests::{init_logs, TestKafka};

const FLUSH_ERR: &str = "wal::flush::err";

#[test]
fn a_pass_over_whose_fsync_fails_is_said_first() {
    init_logs();
    let k = TestKafka::new("pass-over-fsync", 3);
    let n = 60u64;
    cairn_connector::cli::demo::produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    cairn_tests::run_to_end(
        &cairn_tests::config(&k, "pass-over-fsync-group", dir.path()),
        n,
        || {},
    );
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let before = engine.durable_offsets();
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.connect_timeout_ms = 10_000;
    cfg.append = true;
    fail::cfg(FLUSH_ERR, "1*return").unwrap();
    let r = restore(&engine, &cfg);
    fail::remove(FLUSH_ERR);
    match r {
        Err(e @ ConnectorError::CopiesNotPassedOver { .. }) => {
            let said = e.to_string();
            assert!(
                said.starts_with(&format!(
                    "the restore is complete ({n} records, all acknowledged), but the archive could not record that it passes over the copies restored into its own topic"
                )) && said.contains("archive them again"),
                "{said}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(engine.is_poisoned());
    // Nothing moved in the durable view the failed fsync would have
    // published.
    assert_eq!(engine.durable_offsets(), before);
}

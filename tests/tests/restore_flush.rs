//! A restore whose last flush fails with no delivery failed says so in its
//! error, with what to run next (until the night of 2026-12-04 that was
//! only in an ERROR log line before a bare flush error). A file of its
//! own: the failpoint is process-wide, and other restores must not meet it.
//!
//! What this shows is the wording of a guard, not the path a real timeout
//! takes: the flush waits `message.timeout.ms` and a margin, and librdkafka
//! reports every record by `message.timeout.ms`, so a real flush ends with
//! every report in, those of records that timed out as failures ("may have
//! been written": restore.rs `a_timeout_is_reported_as_possibly_written`).
//! The failpoint fails a flush whose reports are all in, which only a
//! librdkafka that broke its own deadline would do (seen in review,
//! 2026-12-05). A record written by the brokers but timed out at the client
//! (its response delayed) is not reached by any test: the mock cluster's
//! per-request delay is not in rust-rdkafka's API.

use cairn_connector::restore::{restore, RestoreConfig, FAILPOINT_FLUSH_FAILS};
use cairn_connector::ConnectorError;
use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
use cairn_tests::{init_logs, TestKafka};

#[test]
fn a_failed_last_flush_says_what_to_run_next() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    engine
        .append(&[batch(&TopicPartition::new("orders", 0), 0..20, 10)])
        .unwrap();
    let k = TestKafka::new("flush-fails", 1);
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.rename.insert("orders".into(), k.topic.clone());
    cfg.connect_timeout_ms = 10_000;
    fail::cfg(FAILPOINT_FLUSH_FAILS, "return").unwrap();
    let r = restore(&engine, &cfg);
    fail::remove(FAILPOINT_FLUSH_FAILS);
    match r {
        Err(e @ ConnectorError::RestoreCut { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("kafka error during flush restored records"),
                "{said}"
            );
            // Every record was acknowledged: nothing is left to restore.
            assert!(
                said.contains("restore stopped after 20 records were delivered"),
                "{said}"
            );
            assert!(said.contains("Next: nothing is left to restore"), "{said}");
        }
        other => panic!("expected the flush's failure with a next step, got {other:?}"),
    }
}

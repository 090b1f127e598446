//! A restore into the archive's own topic whose pass-over of the copies
//! cannot be made durable (its fsync fails) says so, leading the error,
//! with what it means: a run would archive the copies again. The engine is
//! poisoned, as after any failed fsync, and the command exits 1. A file of
//! its own: the failpoint is process-wide, and other tests' appends must
//! not meet it (the two here take turns).

use cairn_connector::restore::{restore, RestoreConfig};
use cairn_connector::ConnectorError;
use cairn_engine::{Engine, EngineConfig};
use cairn_tests::{init_logs, TestKafka};

const FLUSH_ERR: &str = "wal::flush::err";

/// Held by each test for its whole length: the failpoint would fail the
/// other's syncs (its run's, its open's).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The next fsync fails while this is held; removed when dropped, however
/// the test ends (a panic too), so that the other test's syncs do not meet
/// it.
struct FailedFsync;

impl FailedFsync {
    fn arm() -> FailedFsync {
        fail::cfg(FLUSH_ERR, "1*return").unwrap();
        FailedFsync
    }
}

impl Drop for FailedFsync {
    fn drop(&mut self) {
        fail::remove(FLUSH_ERR);
    }
}

/// Demo records produced into a topic of its own.
const N: u64 = 60;

/// `N` demo records produced into a topic named for `name` and archived by
/// a run to their end, the archive open, and a restore of it into that
/// same topic, after its records.
fn archived_to_its_end(name: &str) -> (TestKafka, tempfile::TempDir, Engine, RestoreConfig) {
    init_logs();
    let k = TestKafka::new(name, 3);
    cairn_connector::cli::demo::produce(&k.brokers, &k.topic, 0..N).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let group = format!("{name}-group");
    cairn_tests::run_to_end(&cairn_tests::config(&k, &group, dir.path()), N, || {});
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let mut cfg = RestoreConfig::new(&k.brokers);
    cfg.connect_timeout_ms = 10_000;
    cfg.append = true;
    (k, dir, engine, cfg)
}

#[test]
fn a_pass_over_whose_fsync_fails_is_said_first() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_k, _dir, engine, cfg) = archived_to_its_end("pass-over-fsync");
    let n = N;
    let before = engine.durable_offsets();
    let armed = FailedFsync::arm();
    let r = restore(&engine, &cfg);
    drop(armed);
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

/// A restore stopped part way whose pass-over of what it delivered fails:
/// the failure leads, with how the restore ended behind it, exit 1 rather
/// than a stop's 130.
#[test]
fn a_stopped_restore_whose_pass_over_fails_says_that_first() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (k, _dir, engine, cfg) = archived_to_its_end("pass-over-fsync-stopped");
    // Asked before each partition (and every 256 records, more than one
    // holds): the restore stops at the second partition's start, once the
    // first's 20 copies are written (a stop withdraws what librdkafka
    // still holds queued: waited for, the cut stays where it is put).
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let waited = std::sync::atomic::AtomicBool::new(false);
    let stop = || {
        if asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < 1 {
            return false;
        }
        if !waited.swap(true, std::sync::atomic::Ordering::Relaxed) {
            use rdkafka::consumer::Consumer;
            let c: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &k.brokers)
                .create()
                .unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while c
                .fetch_watermarks(&k.topic, 0, std::time::Duration::from_secs(10))
                .unwrap()
                .1
                < 2 * (N as i64) / 3
            {
                assert!(std::time::Instant::now() < deadline, "copies not written");
            }
        }
        true
    };
    let armed = FailedFsync::arm();
    let r = cairn_connector::restore::restore_until_split(&engine, &cfg, &|| false, &stop);
    drop(armed);
    match r {
        Err(e @ ConnectorError::CopiesNotPassedOver { .. }) => {
            let said = e.to_string();
            assert!(
                said.starts_with("the restore did not finish (restore stopped on request after 20 records were delivered")
                    && said.contains("a next step named there is refused for the partitions restored into the archive's own topic unless given --into-archived-topic")
                    && said.contains("but the archive could not record that it passes over"),
                "{said}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(engine.is_poisoned());
}

//! An archive restored from an older backup fetches again what it lost.
//!
//! The store's identity goes to Kafka as the metadata of every offset it
//! commits. A store restored in place of the archive finds Kafka's committed
//! offsets past its own, committed under its own identity: it held those
//! records and lost them, so it resumes at its own offsets and archives them
//! again, exactly once. (Committed under another store's identity, the
//! records are another member's, and it resumes at Kafka's: the rebalance
//! tests cover that.)

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_connector::cli::demo::{check_archive, demo_next_offsets, produce, DEMO_PARTITIONS};
use cairn_connector::offsets::{committed_with_metadata, group_client, read_committed};
use cairn_connector::testing::{run_bounded, WatchedSink, RUN_LIMIT};
use cairn_connector::{ArchiveSink, PipelineOptions, TaskError};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use cairn_tests::{
    config, durable, init_logs, run_to_end, run_to_error, with_request_errors, TestKafka,
};

#[test]
fn a_store_restored_from_an_older_backup_archives_what_it_lost_again() {
    init_logs();
    let k = TestKafka::new("restored", DEMO_PARTITIONS);
    let group = "restored-group";
    let (live, backups) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let copy = backups.path().join("copy");

    // The archive takes 1,000 records; a backup of it is made.
    produce(&k.brokers, &k.topic, 0..1_000).unwrap();
    run_to_end(&config(&k, group, live.path()), 1_000, || {});
    let id = {
        let e = Engine::open(EngineConfig::new(live.path())).unwrap();
        e.backup_to(&copy, &AtomicBool::new(false)).unwrap();
        e.store_id()
    };
    let at_backup = durable(&copy);
    assert_eq!(at_backup, demo_next_offsets(&k.topic, 1_000));

    // It goes on to 3,000, committed under its identity.
    produce(&k.brokers, &k.topic, 1_000..3_000).unwrap();
    run_to_end(&config(&k, group, live.path()), 3_000, || {});
    let want = demo_next_offsets(&k.topic, 3_000);
    let tps: Vec<TopicPartition> = want.keys().cloned().collect();
    let c = group_client(&k.brokers, &k.group(group)).unwrap();
    let kafka = committed_with_metadata(&c, &tps, Duration::from_secs(10)).unwrap();
    drop(c);
    for (tp, next) in &want {
        assert_eq!(kafka[tp].offset, *next, "{tp}");
        assert_eq!(kafka[tp].metadata, format!("cairn-store:{id}"), "{tp}");
    }

    // The archive is lost; the backup is restored in its place and run in
    // the same group. Kafka's offsets are past the copy's, and the copy's
    // own: it archives 1,000..3,000 again.
    let report = run_to_end(&config(&k, group, &copy), 3_000, || {});
    assert_eq!(report.stats.records_duplicate, 0);
    let e = Engine::open(EngineConfig::new(&copy)).unwrap();
    assert_eq!(e.store_id(), id);
    check_archive(&e, &k.topic, 3_000).unwrap();
    assert!(e.verify().unwrap().is_clean());
    assert_eq!(e.durable_offsets(), want);
}

/// Restored from a backup made before it ever held the partitions, a store
/// finds Kafka's offsets committed under its own identity and nothing of
/// its own: it archives them from Kafka's log start, also under
/// `--auto-offset-reset latest` (which would skip all it lost).
#[test]
fn a_store_restored_from_before_it_held_a_partition_archives_it_from_the_start() {
    init_logs();
    let k = TestKafka::new("restored-whole", DEMO_PARTITIONS);
    let group = "restored-whole-group";
    let (_backups, copy) = backed_up_before_it_held(&k, group, 1_500);

    let mut cfg = config(&k, group, &copy);
    cfg.auto_offset_reset = "latest".into();
    run_to_end(&cfg, 1_500, || {});
    let e = Engine::open(EngineConfig::new(&copy)).unwrap();
    check_archive(&e, &k.topic, 1_500).unwrap();
    assert_eq!(e.durable_offsets(), demo_next_offsets(&k.topic, 1_500));
}

/// As above: the log start a partition lost entirely is fetched again
/// from is recorded and committed at the assignment, before any record of
/// it is archived (the first put here waits for a commit, so without it
/// the run would wait for ever). A member taking a partition over before
/// then (a join, or this one's death) resumes there, not at the store's
/// old commit: below that neither archive would hold the records. Before
/// 2026-12-03 nothing was committed until a put of the partition was
/// durable.
#[test]
fn a_partition_lost_entirely_is_committed_at_its_log_start_before_any_put() {
    init_logs();
    let k = TestKafka::new("restored-start", DEMO_PARTITIONS);
    let group = "restored-start-group";
    let (_backups, copy) = backed_up_before_it_held(&k, group, 1_500);
    let want = demo_next_offsets(&k.topic, 1_500);
    let engine = Arc::new(Engine::open(EngineConfig::new(&copy)).unwrap());
    let (commits, first_commit) = std::sync::mpsc::channel();
    let seen_by_first_put = Arc::new(Mutex::new(None));
    // The archive, whose first put waits (at most `RUN_LIMIT`) for the
    // run's first commit, and keeps what it committed.
    let mut first_commit = Some(first_commit);
    let seen = seen_by_first_put.clone();
    let sink = WatchedSink::new(Box::new(ArchiveSink::new(engine.clone()))).before_put(Box::new(
        move |_| {
            if let Some(first_commit) = first_commit.take() {
                let committed = first_commit
                    .recv_timeout(RUN_LIMIT)
                    .map_err(|_| TaskError::Fatal("no commit came before the first put".into()))?;
                *seen.lock().unwrap() = Some(committed);
            }
            Ok(())
        },
    ));
    let done = want.clone();
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| {
            done.iter().all(|(tp, o)| c.get(tp) == Some(o))
        })),
        on_commit: Some(Box::new(move |committed, _| {
            // The first put has its commit; later ones go nowhere.
            let _ = commits.send(committed.clone());
        })),
        ..Default::default()
    };
    run_bounded(&config(&k, group, &copy), Box::new(sink), opts).unwrap();
    let first = seen_by_first_put.lock().unwrap().take().expect("a put");
    let starts: BTreeMap<TopicPartition, i64> = want.keys().map(|tp| (tp.clone(), 0)).collect();
    assert_eq!(
        first, starts,
        "every partition committed at its log start, before any put"
    );
    check_archive(&engine, &k.topic, 1_500).unwrap();
    assert_eq!(engine.durable_offsets(), want);
}

/// As above, when Kafka's committed offsets cannot be read at assignment:
/// the store holds nothing of the partitions, and only Kafka's offsets (and
/// the identity committed with them) tell whether it held them and lost
/// them. Read as "none committed", `--auto-offset-reset latest` would start
/// at the log end and skip every record it lost. The run stops with an
/// error instead, archiving and committing nothing; run again once the
/// offsets can be read (at the second read: one failed read is read
/// again), it archives the partitions from the start. (Once it holds
/// them, unread offsets no longer stop a run.)
#[test]
fn a_restored_store_that_cannot_read_kafkas_offsets_stops_and_archives_nothing() {
    init_logs();
    let k = TestKafka::new("restored-unread", DEMO_PARTITIONS);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let group = "restored-unread-group";
    let (_backups, copy) = backed_up_before_it_held(&k, group, 1_500);
    let want = demo_next_offsets(&k.topic, 1_500);
    let tps: Vec<TopicPartition> = want.keys().cloned().collect();

    let mut cfg = config(&k, group, &copy);
    cfg.auto_offset_reset = "latest".into();
    use rdkafka::types::RDKafkaApiKey;
    let engine = Arc::new(Engine::open(EngineConfig::new(&copy)).unwrap());
    // More errors than librdkafka's own retries of the read go through.
    let err = with_request_errors(mock, RDKafkaApiKey::OffsetFetch, 200, || {
        run_to_error(&cfg, &engine)
    });
    assert!(
        err.contains("committed offsets") && err.contains(&format!("{}/", k.topic)),
        "{err}"
    );
    assert!(engine.durable_offsets().is_empty(), "archived nothing");
    drop(engine);
    let c = group_client(&k.brokers, &k.group(group)).unwrap();
    let kafka = committed_with_metadata(&c, &tps, Duration::from_secs(10)).unwrap();
    // One partition Kafka fails to read (the mock has no partition 99) is
    // an error of that partition, never "nothing committed".
    let missing = TopicPartition::new(&k.topic, 99);
    let mut asked = tps.clone();
    asked.push(missing.clone());
    let read = read_committed(&c, &asked, Duration::from_secs(10)).unwrap();
    assert_eq!(read.offsets.len(), tps.len());
    assert_eq!(read.unread.keys().collect::<Vec<_>>(), [&missing]);
    assert!(committed_with_metadata(&c, &asked, Duration::from_secs(10)).is_err());
    drop(c);
    for (tp, next) in &want {
        assert_eq!(kafka[tp].offset, *next, "{tp}: Kafka's offsets untouched");
    }

    // Run again with one failed read left: the second read answers.
    with_request_errors(mock, RDKafkaApiKey::OffsetFetch, 1, || {
        run_to_end(&cfg, 1_500, || {})
    });
    let e = Engine::open(EngineConfig::new(&copy)).unwrap();
    check_archive(&e, &k.topic, 1_500).unwrap();
    assert_eq!(e.durable_offsets(), want);
    drop(e);

    // Now that the archive holds every partition, the same errors do not
    // stop a run: each partition resumes at the archive's offset.
    produce(&k.brokers, &k.topic, 1_500..2_000).unwrap();
    with_request_errors(mock, RDKafkaApiKey::OffsetFetch, 200, || {
        run_to_end(&cfg, 2_000, || {})
    });
    let e = Engine::open(EngineConfig::new(&copy)).unwrap();
    check_archive(&e, &k.topic, 2_000).unwrap();
}

/// A backup of an empty store (in a temporary directory, with the copy's
/// path), after which the store archived `n` demo records in `group`,
/// committing them under its identity.
fn backed_up_before_it_held(k: &TestKafka, group: &str, n: u64) -> (tempfile::TempDir, PathBuf) {
    let (live, backups) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let copy = backups.path().join("copy");
    {
        let e = Engine::open(EngineConfig::new(live.path())).unwrap();
        e.backup_to(&copy, &AtomicBool::new(false)).unwrap();
    }
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    run_to_end(&config(k, group, live.path()), n, || {});
    (backups, copy)
}

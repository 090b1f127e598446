//! Rebalance: two archive sinks in one consumer group, the second joining
//! and leaving while records keep arriving. Every (topic, partition,
//! offset) must be archived (none lost), each store must be free of
//! duplicates on its own, and what both stores hold may only be a tail
//! from an offset a revoke committed or sent (`join_and_leave`). Under the
//! cooperative protocol, with every revoke's commit accepted, nothing may
//! be in both: exactly once across the stores. A revoke commit Kafka
//! refused (counted; the mock cluster does so while its group syncs) lets
//! the next owner archive the uncommitted tail again, which is reported,
//! not failed: DURABILITY.md says so.
//!
//! The same with the README's second sink (`connector/examples/file_sink.rs`)
//! in place of the archive: the commit-after-durable loop across
//! rebalances for a sink that is not cairn's engine, each commit checked
//! against the marks the sink has on disk.

#[allow(dead_code)]
#[path = "../../connector/examples/file_sink.rs"]
mod file_sink;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use cairn_connector::cli::demo::{
    archived_offsets, demo_next_offsets, demo_producer, produce_with, DEMO_PARTITIONS,
};
use cairn_connector::{ArchiveSink, CommitPolicy, PipelineOptions, RunConfig, RunReport, SinkTask};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use cairn_tests::{assert_committed_within_durable, fast_group, run_bounded, TestKafka};

const CHUNK: u64 = 1_000;

/// Every offset a member handed to librdkafka as a commit, per partition:
/// one whose answer was an error (or never came) may still have been
/// applied by the broker.
type Sent = Arc<std::sync::Mutex<BTreeMap<i32, std::collections::BTreeSet<i64>>>>;

/// What a member stores its records in.
#[derive(Clone, Copy, Debug)]
enum Store {
    /// cairn's archive (`ArchiveSink` on the engine).
    Archive,
    /// The example file sink: a file per partition, and a mark beside it.
    Files,
}

/// The offset the example file sink's mark for `tp` in `dir` says is
/// durable (its next offset), and the data file's length it covers: read
/// as the sink reads it.
fn file_mark(dir: &std::path::Path, tp: &TopicPartition) -> Option<(i64, u64)> {
    let mark = dir.join(format!("{}-{}.mark", tp.topic, tp.partition));
    file_sink::read_mark(&mark).unwrap()
}

#[allow(clippy::too_many_arguments)]
fn member(
    k: &TestKafka,
    store_kind: Store,
    strategy: &str,
    policy: CommitPolicy,
    data: &std::path::Path,
    stop: Arc<AtomicBool>,
    // Where its acknowledged commits go, and the record of those it sent.
    (commits, sent): (mpsc::Sender<BTreeMap<TopicPartition, i64>>, Sent),
    target: Option<Arc<AtomicU64>>,
) -> thread::JoinHandle<RunReport> {
    // A group per topic: the tests run at once, and against one real
    // broker (CAIRN_TEST_BROKERS) a shared group would join them together
    // (and refuse members of different assignment strategies).
    let mut cfg = RunConfig::new(
        &k.brokers,
        format!("rebalance-{}", k.topic),
        vec![k.topic.clone()],
        data.to_path_buf(),
    );
    cfg.batch_records_max = 500;
    cfg.commit = policy;
    fast_group(&mut cfg);
    cfg.kafka
        .insert("partition.assignment.strategy".into(), strategy.into());
    let topic = k.topic.clone();
    thread::spawn(move || {
        let (sink, mut check): (Box<dyn SinkTask>, cairn_connector::CommitObserver) =
            match store_kind {
                Store::Archive => {
                    let engine = Arc::new(Engine::open(EngineConfig::new(&cfg.data)).unwrap());
                    let store = Arc::downgrade(&engine);
                    (
                        Box::new(ArchiveSink::new(engine)),
                        Box::new(move |committed, durable| {
                            assert_committed_within_durable(&store, committed, durable)
                        }),
                    )
                }
                Store::Files => {
                    let dir = cfg.data.clone();
                    (
                        Box::new(file_sink::FileSink::new(&cfg.data)),
                        // Against the sink's marks on disk: each commit at or
                        // below what its mark says is durable.
                        Box::new(move |committed, _| {
                            for (tp, &o) in committed {
                                let marked = file_mark(&dir, tp).map_or(0, |(next, _)| next);
                                assert!(
                                    o <= marked,
                                    "committed {tp}@{o} above the sink's mark {marked}"
                                );
                            }
                        }),
                    )
                }
            };
        let opts = PipelineOptions {
            stop,
            on_commit_sent: Some(Box::new(move |committed, durable| {
                check(committed, durable);
                let mut sent = sent.lock().unwrap();
                for (tp, o) in committed {
                    sent.entry(tp.partition).or_default().insert(*o);
                }
            })),
            on_commit: Some(Box::new(move |committed, _| {
                let _ = commits.send(committed.clone());
            })),
            done: target.map(|t| -> cairn_connector::DonePredicate {
                Box::new(move |c| {
                    let n = t.load(Ordering::Acquire);
                    n > 0
                        && demo_next_offsets(&topic, n)
                            .iter()
                            .all(|(tp, o)| c.get(tp) == Some(o))
                })
            }),
            ..Default::default()
        };
        run_bounded(&cfg, sink, opts).unwrap()
    })
}

/// Every record in the store at `dir`, as (partition, offset), checking
/// that offsets strictly increase, and for the archive each record against
/// what was produced. For the file sink, what its marks say is durable (a
/// partition lost without a commit may hold bytes past its mark, which its
/// next open cuts off); its values are the example's own test's to check
/// (`example_file_sink.rs`), here only its offsets.
fn archived(store: Store, dir: &std::path::Path, topic: &str) -> Vec<(i32, i64)> {
    if let Store::Files = store {
        let mut held = Vec::new();
        for p in 0..DEMO_PARTITIONS {
            let Some((next, len)) = file_mark(dir, &TopicPartition::new(topic, p)) else {
                continue;
            };
            let bytes = std::fs::read(dir.join(format!("{topic}-{p}.lines"))).unwrap();
            let offsets = file_sink::read_offsets(&bytes[..len as usize]).unwrap();
            assert!(
                offsets.windows(2).all(|w| w[0] < w[1]),
                "{topic}/{p}: offsets rise"
            );
            assert!(offsets.last().is_none_or(|&o| o < next), "{topic}/{p}");
            held.extend(offsets.into_iter().map(|o| (p, o)));
        }
        return held;
    }
    let engine = Engine::open(EngineConfig::new(dir)).unwrap();
    assert!(engine.verify().unwrap().is_clean());
    archived_offsets(&engine, topic)
        .unwrap()
        .into_iter()
        .flat_map(|(p, offsets)| offsets.into_iter().map(move |o| (p, o)))
        .collect()
}

/// Records archived by both members: none with the default
/// cooperative-sticky protocol, as long as every revoke could commit. A
/// revoke's commit can meet a group still syncing its other member; it is
/// retried for up to 2 s (before the retry, 2 runs in 12 here failed it).
/// A commit that still fails is counted, and the next owner archives the
/// uncommitted tail again (DURABILITY.md).
#[test]
fn member_joining_and_leaving_archives_every_offset_exactly_once() {
    exactly_once_unless_a_revoke_failed("rebalance-coop", Store::Archive, CommitPolicy::EveryPut);
}

/// The same with the example file sink: the loop's guarantees hold for a
/// sink that is not cairn's engine (every commit at or below the sink's
/// marks, every offset held, none twice unless a revoke's commit failed).
#[test]
fn file_sinks_joining_and_leaving_hold_every_offset_exactly_once() {
    exactly_once_unless_a_revoke_failed("rebalance-files", Store::Files, CommitPolicy::EveryPut);
}

/// The same under `interval:MS`: puts are written without an fsync and wait
/// in a deeper queue, so a revoke has more to finish and make durable.
#[test]
fn member_joining_and_leaving_under_interval_commits_archives_every_offset_exactly_once() {
    exactly_once_unless_a_revoke_failed(
        "rebalance-coop-interval",
        Store::Archive,
        CommitPolicy::Interval(std::time::Duration::from_millis(50)),
    );
}

fn exactly_once_unless_a_revoke_failed(topic: &str, store: Store, policy: CommitPolicy) {
    let (overlap, revoke_commit_failures) =
        join_and_leave(topic, store, "cooperative-sticky", policy);
    if revoke_commit_failures == 0 {
        assert_eq!(overlap, 0, "records archived by both members");
    } else {
        eprintln!(
            "{revoke_commit_failures} revoke or final commit(s) failed: {overlap} records archived by both members"
        );
    }
}

/// The eager protocol revokes while the group is re-joining. A broker that
/// refuses commits then (the mock cluster does) leaves the revoked tail
/// uncommitted, and the next owner archives it again. Nothing may be lost,
/// each store stays free of duplicates, and what both hold is only such a
/// tail (checked in `join_and_leave`).
#[test]
fn eager_rebalance_loses_nothing_and_each_store_stays_duplicate_free() {
    let (overlap, _) = join_and_leave(
        "rebalance-eager",
        Store::Archive,
        "range",
        CommitPolicy::EveryPut,
    );
    eprintln!("eager protocol: {overlap} records archived by both members");
}

/// Run the join-and-leave scenario; return how many records both stores
/// hold, and how many revokes failed to commit.
fn join_and_leave(topic: &str, store: Store, strategy: &str, policy: CommitPolicy) -> (usize, u64) {
    cairn_tests::init_logs();
    let k = TestKafka::new(topic, DEMO_PARTITIONS);
    let mut produced = 0u64;
    let producer = demo_producer(&k.brokers).unwrap();
    let produce_chunk = |produced: &mut u64| {
        produce_with(&producer, &k.topic, *produced..*produced + CHUNK).unwrap();
        *produced += CHUNK;
    };
    for _ in 0..10 {
        produce_chunk(&mut produced);
    }
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let target = Arc::new(AtomicU64::new(0));
    let (tx_a, rx_a) = mpsc::channel();
    let sent = Sent::default();
    let a = member(
        &k,
        store,
        strategy,
        policy,
        dir_a.path(),
        Arc::new(AtomicBool::new(false)),
        (tx_a, sent.clone()),
        Some(target.clone()),
    );
    let mut observed = vec![rx_a.recv().expect("first member commits")];
    observed.extend(rx_a.try_iter());
    // The partitions Kafka held a commit of before the second member came:
    // no later owner of one may start at the log start.
    let committed_before_b: std::collections::BTreeSet<i32> = observed
        .iter()
        .flat_map(|c| c.keys().map(|tp| tp.partition))
        .collect();

    // The second member joins; keep records coming until it has archived and
    // committed some of its own.
    let stop_b = Arc::new(AtomicBool::new(false));
    let (tx_b, rx_b) = mpsc::channel();
    let b = member(
        &k,
        store,
        strategy,
        policy,
        dir_b.path(),
        stop_b.clone(),
        (tx_b, sent.clone()),
        None,
    );
    // Paced by B's commits, not by time: a chunk per 100 ms without one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        produce_chunk(&mut produced);
        match rx_b.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(c) => {
                observed.push(c);
                break;
            }
            Err(_) => assert!(
                std::time::Instant::now() < deadline,
                "the second member got no partition within 120 s ({produced} produced)"
            ),
        }
    }
    for _ in 0..5 {
        produce_chunk(&mut produced);
    }

    // It leaves (clean stop: drain, fsync, commit, leave the group); the
    // first member takes its partitions back and finishes everything.
    stop_b.store(true, Ordering::Release);
    let report_b = b.join().unwrap();
    target.store(produced + 5 * CHUNK, Ordering::Release);
    for _ in 0..5 {
        produce_chunk(&mut produced);
    }
    let report_a = a.join().unwrap();
    eprintln!(
        "produced {produced}; member A wrote {}, member B wrote {}",
        report_a.stats.records_written, report_b.stats.records_written
    );
    assert!(report_b.stats.records_written > 0);

    let mut union: BTreeMap<(i32, i64), u32> = BTreeMap::new();
    for dir in [dir_a.path(), dir_b.path()] {
        for key in archived(store, dir, &k.topic) {
            *union.entry(key).or_default() += 1;
        }
    }
    let twice: Vec<_> = union.iter().filter(|(_, n)| **n > 1).collect();
    if !twice.is_empty() {
        eprintln!(
            "archived by both members, e.g. {:?}",
            &twice[..twice.len().min(5)]
        );
    }
    // Whatever failed, a record is archived twice only in the tail past a
    // commit: its next owner started at Kafka's committed offset, which one
    // of the members committed, while the store that had it durable had
    // not committed that far. So each run of records held by both starts
    // at an offset one of them committed: one it saw acknowledged, or one
    // it sent (a commit whose answer was an error, or came too late, may
    // still have been applied). Seen once, in a full workspace run on 2
    // loaded cores (2026-12-03): a run starting at an offset no member saw
    // acknowledged; the message did not say then whether it was sent, and
    // now does (five runs under load since did not repeat it).
    observed.extend(rx_a.try_iter().chain(rx_b.try_iter()));
    // (Or at 0: a partition nothing was committed of starts at the log
    // start, --auto-offset-reset earliest. Only one of which no commit was
    // seen acknowledged before the second member came: until 2026-12-05
    // every partition, so a member that ignored Kafka's committed offset
    // and fetched from the log start passed this check.)
    let mut commits: BTreeMap<i32, std::collections::BTreeSet<i64>> = (0..DEMO_PARTITIONS)
        .filter(|p| !committed_before_b.contains(p))
        .map(|p| (p, std::collections::BTreeSet::from([0])))
        .collect();
    for c in &observed {
        for (tp, o) in c {
            commits.entry(tp.partition).or_default().insert(*o);
        }
    }
    let sent = sent.lock().unwrap().clone();
    let mut run_start: Option<(i32, i64, i64)> = None;
    for ((p, o), _) in &twice {
        let (p, o) = (*p, *o);
        let starts_run = !matches!(run_start, Some((rp, _, last)) if rp == p && last + 1 == o);
        if starts_run {
            let acknowledged = commits.get(&p).is_some_and(|c| c.contains(&o));
            let handed_over = sent.get(&p).is_some_and(|c| c.contains(&o));
            if !acknowledged && handed_over {
                eprintln!("{}/{p}: records from offset {o} archived by both members: a commit of {o} was sent, never seen acknowledged", k.topic);
            }
            assert!(
                acknowledged || handed_over,
                "{}/{p}: records from offset {o} archived by both members, and no member committed {o} (commits seen: {:?}; sent: {:?})",
                k.topic,
                commits.get(&p),
                sent.get(&p)
            );
            run_start = Some((p, o, o));
        } else if let Some(r) = run_start.as_mut() {
            r.2 = o;
        }
    }
    for (tp, next) in demo_next_offsets(&k.topic, produced) {
        for o in 0..next {
            assert!(
                union.contains_key(&(tp.partition, o)),
                "{tp}@{o} archived by neither member"
            );
        }
    }
    assert_eq!(union.len() as u64, produced);
    // A failed final commit (a leaving member's, refused while the mock
    // group re-joins) leaves its tail uncommitted just as a failed revoke
    // commit does: the next owner archives it again.
    let revoke_commit_failures = report_a.stats.revoke_commit_failures
        + report_b.stats.revoke_commit_failures
        + u64::from(report_a.stats.final_commit_failed)
        + u64::from(report_b.stats.final_commit_failed);
    if revoke_commit_failures == 0 && !twice.is_empty() {
        eprintln!("archived twice although every revoke and final commit succeeded");
    }
    (twice.len(), revoke_commit_failures)
}

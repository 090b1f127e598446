//! Another sink on the same loop: an in-memory `SinkTask` that buffers (it
//! reports records durable only when it flushes them, one put later) and
//! fails its first put, and others at seeded moments, retriably. The loop must retry the same
//! batch, commit only what the sink reported durable, resume where the
//! sink says on restart, and hand every record over exactly once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn_connector::cli::demo::{demo_record, produce, DEMO_PARTITIONS};
use cairn_connector::{CommitPolicy, PipelineOptions, PutOutcome, RunConfig, SinkTask, TaskError};
use cairn_engine::{Record, RecordBatch, TopicPartition};
use cairn_tests::{fast_group, init_logs, run_bounded, TestKafka};
use rand::{Rng, SeedableRng};

/// What the sink holds, shared with the test.
#[derive(Default)]
struct Store {
    /// Flushed ("durable") records per partition, in put order.
    flushed: BTreeMap<TopicPartition, Vec<Record>>,
    retriable_failures: u64,
    /// Retries met, and any whose batches were not the failed put's.
    retries: u64,
    retries_changed: Vec<String>,
    closed: BTreeSet<TopicPartition>,
    stopped: bool,
}

struct BufferingSink {
    store: Arc<Mutex<Store>>,
    /// Written by the last put, reported durable by the next one.
    buffer: Vec<RecordBatch>,
    rng: rand::rngs::StdRng,
    /// Put calls so far: the first always fails, so every run retries.
    put_calls: u64,
    /// The batches of the put that failed last, which the loop must retry
    /// as they were (less any partition lost meanwhile).
    failed: Option<Vec<RecordBatch>>,
    /// Stop the run once this many records were put.
    stop_after: u64,
    stop: Arc<AtomicBool>,
}

fn next_offsets(flushed: &BTreeMap<TopicPartition, Vec<Record>>) -> BTreeMap<TopicPartition, i64> {
    flushed
        .iter()
        .filter_map(|(tp, v)| v.last().map(|r| (tp.clone(), r.offset + 1)))
        .collect()
}

/// A put of `batches` that reports `durable`.
fn outcome(batches: &[RecordBatch], durable: BTreeMap<TopicPartition, i64>) -> PutOutcome {
    PutOutcome {
        durable,
        records_written: batches.iter().map(|b| b.records.len() as u64).sum(),
        records_duplicate: 0,
    }
}

/// Make buffered records durable.
fn flush(buffer: &mut Vec<RecordBatch>, store: &mut Store) {
    for b in buffer.drain(..) {
        store.flushed.entry(b.tp).or_default().extend(b.records);
    }
}

impl SinkTask for BufferingSink {
    fn open(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let store = self.store.lock().unwrap();
        // A first run can already have been handed everything (the queue to
        // the put drains on stop): then there is no put to notice it.
        let held: usize = store.flushed.values().map(Vec::len).sum();
        if held as u64 >= self.stop_after {
            self.stop.store(true, Ordering::Relaxed);
        }
        let next = next_offsets(&store.flushed);
        Ok(partitions
            .iter()
            .filter_map(|tp| next.get(tp).map(|&o| (tp.clone(), o)))
            .collect())
    }

    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
        let mut store = self.store.lock().unwrap();
        self.put_calls += 1;
        if let Some(failed) = self.failed.take() {
            store.retries += 1;
            let was: BTreeMap<&TopicPartition, &Vec<Record>> =
                failed.iter().map(|b| (&b.tp, &b.records)).collect();
            for b in batches {
                if was.get(&b.tp) != Some(&&b.records) {
                    store
                        .retries_changed
                        .push(format!("put {}: {} differs", self.put_calls, b.tp));
                }
            }
        }
        if self.put_calls == 1 || self.rng.gen_ratio(1, 4) {
            store.retriable_failures += 1;
            self.failed = Some(batches.to_vec());
            return Err(TaskError::Retriable("injected".into()));
        }
        // The previous put's records become durable; this one's are buffered.
        flush(&mut self.buffer, &mut store);
        self.buffer.extend(batches.iter().cloned());
        let buffered: usize = self.buffer.iter().map(|b| b.records.len()).sum();
        let total: usize = store.flushed.values().map(Vec::len).sum::<usize>() + buffered;
        if total as u64 >= self.stop_after {
            self.stop.store(true, Ordering::Relaxed);
        }
        Ok(outcome(batches, next_offsets(&store.flushed)))
    }

    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let store = self.store.lock().unwrap();
        let next = next_offsets(&store.flushed);
        Ok(consumed
            .keys()
            .filter_map(|tp| next.get(tp).map(|&o| (tp.clone(), o)))
            .collect())
    }

    /// Makes what it buffered of them durable, as the contract allows (the
    /// other choice is to drop it): if they come back, `open` then says
    /// where, and no later `pre_commit` reports records put before the
    /// close that `open` did not count.
    fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), TaskError> {
        let mut store = self.store.lock().unwrap();
        let (closing, kept) = std::mem::take(&mut self.buffer)
            .into_iter()
            .partition(|b| partitions.contains(&b.tp));
        self.buffer = kept;
        flush(&mut { closing }, &mut store);
        store.closed.extend(partitions.iter().cloned());
        Ok(())
    }

    fn stop(&mut self) -> Result<(), TaskError> {
        let mut store = self.store.lock().unwrap();
        flush(&mut self.buffer, &mut store);
        store.stopped = true;
        Ok(())
    }
}

fn run(
    cfg: &RunConfig,
    store: &Arc<Mutex<Store>>,
    seed: u64,
    stop_after: u64,
) -> cairn_connector::RunReport {
    let stop = Arc::new(AtomicBool::new(false));
    let sink = BufferingSink {
        store: store.clone(),
        buffer: Vec::new(),
        rng: rand::rngs::StdRng::seed_from_u64(seed),
        put_calls: 0,
        failed: None,
        stop_after,
        stop: stop.clone(),
    };
    let durable_seen = store.clone();
    let opts = PipelineOptions {
        stop,
        // As each commit is sent: at its acknowledgement a flush made
        // meanwhile could cover a commit sent before it (until 2026-12-05
        // this checked there).
        on_commit_sent: Some(Box::new(move |committed, durable| {
            let flushed = next_offsets(&durable_seen.lock().unwrap().flushed);
            for (tp, o) in committed {
                assert!(
                    *o <= durable[tp],
                    "committed {tp}@{o} above reported durable"
                );
                assert!(
                    *o <= flushed[tp],
                    "committed {tp}@{o} above what the sink holds"
                );
            }
        })),
        ..Default::default()
    };
    run_bounded(cfg, Box::new(sink), opts).unwrap()
}

#[test]
fn a_buffering_retrying_sink_gets_every_record_once_and_commits_only_what_it_flushed() {
    init_logs();
    let seed = cairn_engine::fuzzing::seed("sink_task");
    let k = TestKafka::new("sinktask", DEMO_PARTITIONS);
    let n = 6_000u64;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for policy in [
        CommitPolicy::EveryPut,
        CommitPolicy::Interval(std::time::Duration::from_millis(20)),
    ] {
        let group = format!("sinktask-{}", matches!(policy, CommitPolicy::EveryPut));
        let mut cfg = RunConfig::new(
            &k.brokers,
            k.group(&group),
            vec![k.topic.clone()],
            dir.path().into(),
        );
        cfg.batch_records_max = 300;
        // Bounds the queue to the put too (interval): the first run stops
        // with most of the topic still to go.
        cfg.batch_bytes_max = 64 << 10;
        cfg.commit = policy;
        fast_group(&mut cfg);
        let store = Arc::new(Mutex::new(Store::default()));

        // First run: stop after about half, with a put still buffered
        // (its close makes it durable, after the final commit: the second
        // run resumes after it).
        let report = run(&cfg, &store, seed, n / 2);
        {
            let s = store.lock().unwrap();
            assert!(s.stopped, "stop() was called");
            // The first put always fails (the retry path is met every
            // run); the seed adds more at random.
            assert!(
                s.retriable_failures > 0,
                "seed {seed}: not even the first put's failure was met"
            );
            let kafka = k.committed(&group, DEMO_PARTITIONS);
            let flushed = next_offsets(&s.flushed);
            // Every partition Kafka holds a commit for, including any the
            // sink flushed nothing of (it must then have no commit at all).
            for (p, o) in &kafka {
                let tp = TopicPartition::new(&k.topic, *p);
                let held = flushed.get(&tp).copied().unwrap_or(0);
                assert!(*o <= held, "{tp}: committed {o}, past the sink's {held}");
            }
            assert!(report.stats.commits > 0);
            assert_eq!(
                s.closed.len() as i32,
                DEMO_PARTITIONS,
                "close() for every partition"
            );
        }

        // Second run: resumes where the sink says, and finishes.
        let report = run(&cfg, &store, seed ^ 1, n);
        assert!(report.stats.commits > 0);
        assert!(
            report.stats.records_written > 0,
            "{policy:?}: the first run already took everything"
        );
        let s = store.lock().unwrap();
        let mut total = 0u64;
        for (tp, records) in &s.flushed {
            for (i, r) in records.iter().enumerate() {
                assert_eq!(
                    r.offset, i as i64,
                    "{tp}: offset {} at position {i} (seed {seed}): loss or duplicate",
                    r.offset
                );
                let produced = r.offset as u64 * DEMO_PARTITIONS as u64 + tp.partition as u64;
                assert_eq!(*r, demo_record(produced).1, "{tp}@{}", r.offset);
            }
            total += records.len() as u64;
        }
        assert_eq!(total, n, "seed {seed}: every record handed over once");
        // Each failed put was retried with its own batches, record for
        // record (none lost here: one member).
        assert!(s.retries > 0);
        assert!(
            s.retries_changed.is_empty(),
            "seed {seed}: retries with other batches: {:?}",
            s.retries_changed
        );
    }
}

/// A sink with a bug: `open` says every partition resumes at `open_at`
/// (if given), `pre_commit` declares durable `overclaim` records more
/// than it was handed, and (if given) its store's own word is that
/// `store_durable` is durable for every partition (`Some(Ok(None))`: that
/// it holds nothing of any; `Some(Err(why))`: that it takes no more
/// commits, as a poisoned store says).
struct BuggySink {
    open_at: Option<i64>,
    overclaim: i64,
    store_durable: Option<Result<Option<i64>, &'static str>>,
}

impl SinkTask for BuggySink {
    fn open(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        Ok(self
            .open_at
            .map(|o| partitions.iter().map(|tp| (tp.clone(), o)).collect())
            .unwrap_or_default())
    }

    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
        Ok(outcome(batches, BTreeMap::new()))
    }

    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let claim = self.overclaim;
        Ok(consumed
            .iter()
            .map(|(tp, o)| (tp.clone(), o + claim))
            .collect())
    }

    fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), TaskError> {
        Ok(())
    }

    fn durable_check(&self) -> Option<cairn_connector::DurableCheck> {
        let d = self.store_durable?;
        Some(Box::new(move |_| d.map_err(str::to_owned)))
    }
}

/// Runs `sink` in group `group` over `k`'s demo topic (3,000 records)
/// until it fails, inside `around` (which may inject broker errors), and
/// returns the error and Kafka's committed offsets after it.
fn run_buggy(
    k: &TestKafka,
    group: &str,
    sink: BuggySink,
    around: impl FnOnce(
        &dyn Fn() -> cairn_connector::Result<cairn_connector::RunReport>,
    ) -> cairn_connector::Result<cairn_connector::RunReport>,
) -> (String, BTreeMap<i32, i64>) {
    init_logs();
    produce(&k.brokers, &k.topic, 0..3_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = RunConfig::new(
        &k.brokers,
        k.group(group),
        vec![k.topic.clone()],
        dir.path().into(),
    );
    cfg.batch_records_max = 500;
    fast_group(&mut cfg);
    let sink = std::cell::RefCell::new(Some(sink));
    let run = || {
        let sink = sink.borrow_mut().take().expect("run once");
        run_bounded(&cfg, Box::new(sink), PipelineOptions::default())
    };
    let err = around(&run).expect_err("the sink's bug must stop the run");
    let kafka = k.committed(group, DEMO_PARTITIONS);
    (err.to_string(), kafka)
}

#[test]
fn a_sink_declaring_records_it_was_never_handed_stops_the_run_and_nothing_is_committed() {
    let k = TestKafka::new("overclaim", DEMO_PARTITIONS);
    let sink = BuggySink {
        open_at: None,
        overclaim: 1,
        store_durable: None,
    };
    let (err, kafka) = run_buggy(&k, "overclaim", sink, |run| run());
    // The handed-over check itself, as the sink's error (a panic of the
    // task thread until 2026-12-05).
    assert!(
        err.contains("the sink's pre_commit reported")
            && err.contains("past the records handed to it")
            && !err.contains("panicked"),
        "{err}"
    );
    // The first pre_commit failed the check: nothing may have been
    // committed.
    assert!(kafka.values().all(|&o| o == 0), "committed {kafka:?}");
}

/// A sink whose reports run ahead of what its store holds durable (its
/// `pre_commit` declares what it was handed; its store says nothing is
/// durable): the loop's check against the store's own word
/// (`SinkTask::durable_check`) stops the run with the commit unsent (since
/// 2026-12-05; before, the only check in the code compared a commit with
/// the sink's reports, which it is chosen from).
#[test]
fn a_commit_above_what_the_store_holds_durable_is_not_sent() {
    let k = TestKafka::new("unsynced", DEMO_PARTITIONS);
    let sink = BuggySink {
        open_at: None,
        overclaim: 0,
        store_durable: Some(Ok(Some(0))),
    };
    let (err, kafka) = run_buggy(&k, "unsynced", sink, |run| run());
    assert!(
        err.contains("BUG: a commit of") && err.contains("not sent"),
        "{err}"
    );
    assert!(kafka.values().all(|&o| o == 0), "committed {kafka:?}");
}

/// The same where the store says it holds nothing of the partitions: a
/// commit of one has nothing durable under it, and is not sent (until the
/// last review of 2026-12-05 the check passed a partition its store did
/// not hold).
#[test]
fn a_commit_of_a_partition_the_store_does_not_hold_is_not_sent() {
    let k = TestKafka::new("unheld", DEMO_PARTITIONS);
    let sink = BuggySink {
        open_at: None,
        overclaim: 0,
        store_durable: Some(Ok(None)),
    };
    let (err, kafka) = run_buggy(&k, "unheld", sink, |run| run());
    assert!(
        err.contains("BUG: a commit of") && err.contains("the store holds nothing of it"),
        "{err}"
    );
    assert!(kafka.values().all(|&o| o == 0), "committed {kafka:?}");
}

/// A store that takes no more commits (its engine poisoned by a failed
/// write or fsync on another thread than the loop's, a retention pass's
/// say) refuses every commit from then on, offsets it held durable before
/// the failure too: none is sent, and the run fails with the store's
/// reason, not as a bug of the loop's (since 2026-12-06, an audit: the
/// committer went on sending until the loop itself stopped).
#[test]
fn a_store_that_takes_no_more_commits_stops_the_run_with_nothing_committed() {
    let k = TestKafka::new("refusing", DEMO_PARTITIONS);
    let sink = BuggySink {
        open_at: None,
        overclaim: 0,
        store_durable: Some(Err("engine is poisoned after a failed sync (injected)")),
    };
    let (err, kafka) = run_buggy(&k, "refusing", sink, |run| run());
    assert!(
        err.contains("was not sent: the store takes no more commits")
            && err.contains("engine is poisoned after a failed sync (injected)")
            && !err.contains("BUG"),
        "{err}"
    );
    assert!(kafka.values().all(|&o| o == 0), "committed {kafka:?}");
}

/// When the log's bounds cannot be read at the assignment (a leader moving
/// in a rolling restart), the run resumes where `open` says unchecked, and
/// the fetch judges it later; `open`'s offset alone is not committed
/// meanwhile. Before, it was committed at once, so a resume point past the
/// log's end reached Kafka before the fetch stopped the run, and a later
/// run resuming at Kafka's offset would skip everything produced below it.
#[test]
fn a_resume_point_the_log_bounds_did_not_confirm_is_not_committed() {
    let k = TestKafka::new("far-open", DEMO_PARTITIONS);
    let Some(mock) = k.mock() else {
        cairn_tests::skipped("error injection needs the mock cluster");
        return;
    };
    let sink = BuggySink {
        open_at: Some(1_000_000),
        overclaim: 0,
        store_durable: None,
    };
    let (err, kafka) = run_buggy(&k, "far-open", sink, |run| {
        let list_offsets = rdkafka::types::RDKafkaApiKey::ListOffsets;
        cairn_tests::with_request_errors(mock, list_offsets, 200, run)
    });
    assert!(err.contains("1000000"), "{err}");
    assert!(kafka.values().all(|&o| o == 0), "committed {kafka:?}");
}

/// A sink that loses records after they were committed: every put is
/// durable at once, until a commit is acknowledged; the next put then
/// reports each committed partition durable one record below its commit.
struct LosingSink {
    /// The offsets of the first commit Kafka acknowledged, when it comes.
    acked: Arc<(Mutex<BTreeMap<TopicPartition, i64>>, std::sync::Condvar)>,
    puts: u64,
}

impl SinkTask for LosingSink {
    fn open(
        &mut self,
        _partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        Ok(BTreeMap::new())
    }

    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
        self.puts += 1;
        if self.puts == 1 {
            let durable = batches
                .iter()
                .filter_map(|b| b.records.last().map(|r| (b.tp.clone(), r.offset + 1)))
                .collect();
            return Ok(outcome(batches, durable));
        }
        // The first put's records are committed by the committer while
        // this put waits (every-put): woken by the ack, not timed.
        let (lock, acked) = &*self.acked;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let mut seen = lock.lock().unwrap();
        while seen.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(TaskError::Fatal("no commit was acknowledged".into()));
            }
            seen = acked.wait_timeout(seen, left).unwrap().0;
        }
        let lost = seen.iter().map(|(tp, o)| (tp.clone(), o - 1)).collect();
        Ok(outcome(batches, lost))
    }

    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        Ok(if self.puts == 1 {
            consumed.clone()
        } else {
            BTreeMap::new()
        })
    }

    fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), TaskError> {
        Ok(())
    }
}

/// committed <= durable, held after the fact: a sink whose word goes back
/// below what the run committed stops the run with an error naming the
/// partition and both offsets, and nothing more is committed. Until the
/// night of 2026-12-04 this was a warning, and the run went on.
#[test]
fn a_sink_that_loses_committed_records_stops_the_run() {
    init_logs();
    let k = TestKafka::new("losing", DEMO_PARTITIONS);
    produce(&k.brokers, &k.topic, 0..3_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = RunConfig::new(
        &k.brokers,
        k.group("losing"),
        vec![k.topic.clone()],
        dir.path().into(),
    );
    cfg.batch_records_max = 500;
    cfg.commit = CommitPolicy::EveryPut;
    fast_group(&mut cfg);
    let acked = Arc::new((Mutex::new(BTreeMap::new()), std::sync::Condvar::new()));
    let seen = acked.clone();
    let opts = PipelineOptions {
        on_commit: Some(Box::new(move |committed, _durable| {
            let mut first = seen.0.lock().unwrap();
            if first.is_empty() {
                *first = committed.clone();
                seen.1.notify_all();
            }
        })),
        ..Default::default()
    };
    let sink = LosingSink {
        acked: acked.clone(),
        puts: 0,
    };
    let err = run_bounded(&cfg, Box::new(sink), opts)
        .expect_err("a sink that lost committed records must stop the run")
        .to_string();
    let first = acked.0.lock().unwrap().clone();
    let (tp, o) = first.iter().next().expect("a commit was acknowledged");
    assert!(
        err.contains(&format!(
            "{tp} durable only up to offset {}, below offset {o}, which this run committed",
            o - 1
        )),
        "{err}"
    );
    // Kafka holds the first commit, and nothing after it.
    let kafka = k.committed("losing", DEMO_PARTITIONS);
    for (tp, o) in &first {
        assert_eq!(kafka.get(&tp.partition), Some(o), "{tp}: {kafka:?}");
    }
}

//! The consume → put → fsync → commit loop.
//!
//! A blocking rdkafka `BaseConsumer` runs on its own thread: rebalance
//! callbacks, fsyncs and synchronous commits all block, and this way they
//! block nothing else. Rebalance callbacks run inside `poll` on this thread,
//! so no put is ever in flight when one runs.
//!
//! # Invariants
//! - `enable.auto.commit=false` and `enable.auto.offset.store=false`: only
//!   this loop commits, and only offsets the sink reported durable.
//! - Memory between poll and put is bounded by `batch_bytes_max` plus one
//!   record: the loop stops polling to put when the buffer is full.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_engine::{Record, RecordBatch, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::commit::CommitTracker;
use crate::config::{CommitPolicy, OnOffsetOutOfRange, OnOversize, RunConfig};
use crate::convert::to_record;
use crate::error::{ConnectorError, Result};
use crate::rebalance::SinkContext;
use crate::task::{SinkTask, TaskError};

/// Counters of one pipeline run.
#[derive(Debug, Default, Clone)]
pub struct RunStats {
    pub records_polled: u64,
    pub records_written: u64,
    pub records_duplicate: u64,
    pub records_oversize_skipped: u64,
    pub payload_bytes: u64,
    pub puts: u64,
    pub commits: u64,
    pub commit_failures: u64,
    pub first_record_at: Option<Instant>,
    pub last_put_at: Option<Instant>,
}

/// What a finished run reports.
#[derive(Debug)]
pub struct RunReport {
    pub stats: RunStats,
    pub put_to_commit_us: hdrhistogram::Histogram<u64>,
    pub committed: BTreeMap<TopicPartition, i64>,
}

/// Observes every successful commit: (offsets committed, what puts reported durable).
pub type CommitObserver =
    Box<dyn FnMut(&BTreeMap<TopicPartition, i64>, &BTreeMap<TopicPartition, i64>) + Send>;
/// Decides, after each commit, whether the run is complete.
pub type DonePredicate = Box<dyn FnMut(&BTreeMap<TopicPartition, i64>) -> bool + Send>;

/// Hooks for embedding (demo, tests).
#[derive(Default)]
pub struct PipelineOptions {
    /// Set to stop cleanly: drain, fsync, commit, close.
    pub stop: Arc<AtomicBool>,
    /// Simulate a crash once this many records were written: right after the
    /// put's fsync, before its commit. The run returns `SimulatedCrash`.
    pub crash_after_records: Option<u64>,
    pub on_commit: Option<CommitObserver>,
    /// Stop cleanly once this returns true for the committed offsets.
    pub done: Option<DonePredicate>,
}

pub(crate) struct Shared {
    pub sink: Box<dyn SinkTask>,
    pub commit_policy: CommitPolicy,
    pub on_offset_out_of_range: OnOffsetOutOfRange,
    pending: BTreeMap<TopicPartition, Vec<Record>>,
    pending_bytes: usize,
    pending_records: usize,
    pending_since: Option<Instant>,
    /// Next offset after what was put, per assigned partition.
    pub consumed: BTreeMap<TopicPartition, i64>,
    pub assigned: BTreeSet<TopicPartition>,
    pub tracker: CommitTracker,
    pub stats: RunStats,
    pub fatal: Option<ConnectorError>,
    /// Set once the run is over (clean stop, crash or fatal error): the
    /// revoke that closing the consumer triggers must commit nothing.
    pub commits_closed: bool,
    /// The run ended cleanly: the final commit was made before closing.
    pub clean_finish: bool,
    crash_after_records: Option<u64>,
    on_commit: Option<CommitObserver>,
    done: Option<DonePredicate>,
    finished: bool,
    /// An assignment brought durable offsets Kafka may not have yet: commit
    /// them without waiting for a put (a fully archived partition gets none).
    pub commit_after_assign: bool,
}

/// Payload bytes of buffered records, as `pending_bytes` counts them.
fn payload_bytes(records: &[Record]) -> usize {
    records.iter().map(|r| r.payload_bytes() as usize).sum()
}

impl Shared {
    pub(crate) fn drop_pending(&mut self, tps: &BTreeSet<TopicPartition>) {
        for tp in tps {
            if let Some(v) = self.pending.remove(tp) {
                self.pending_records -= v.len();
                self.pending_bytes -= payload_bytes(&v);
            }
        }
    }

    /// Put what is buffered (only `only`'s partitions, if given).
    pub(crate) fn put_pending<C: Consumer<SinkContext>>(
        &mut self,
        consumer: &C,
        only: Option<&BTreeSet<TopicPartition>>,
    ) -> Result<()> {
        let tps: Vec<TopicPartition> = self
            .pending
            .keys()
            .filter(|tp| only.is_none_or(|o| o.contains(*tp)))
            .cloned()
            .collect();
        if tps.is_empty() {
            self.pending_since = None;
            return Ok(());
        }
        // The poll phase of this batch: from its first record to now.
        let poll_us = self
            .pending_since
            .map_or(0, |t| t.elapsed().as_micros() as u64);
        let mut batches = Vec::with_capacity(tps.len());
        for tp in tps {
            let records = self.pending.remove(&tp).unwrap_or_default();
            self.pending_records -= records.len();
            self.pending_bytes -= payload_bytes(&records);
            batches.push(RecordBatch { tp, records });
        }
        if self.pending.is_empty() {
            self.pending_since = None;
        }
        let records: usize = batches.iter().map(|b| b.records.len()).sum();
        tracing::debug!(records, poll_us, "poll");
        let t0 = Instant::now();
        let span = tracing::debug_span!("put", records, put_us = tracing::field::Empty);
        let _g = span.enter();
        match self.sink.put(&batches) {
            Ok(outcome) => {
                span.record("put_us", t0.elapsed().as_micros() as u64);
                for b in &batches {
                    if let Some(last) = b.records.last() {
                        self.consumed.insert(b.tp.clone(), last.offset + 1);
                    }
                }
                self.tracker.record_put(t0, &outcome.durable);
                self.stats.puts += 1;
                self.stats.records_written += outcome.records_written;
                self.stats.records_duplicate += outcome.records_duplicate;
                self.stats.last_put_at = Some(Instant::now());
                if let Some(n) = self.crash_after_records {
                    if self.stats.records_written >= n {
                        // Durable but not committed: exactly the crash window.
                        self.commits_closed = true;
                        return Err(ConnectorError::SimulatedCrash);
                    }
                }
                crate::crashpoint::reached(crate::crashpoint::PUT_BEFORE_COMMIT);
                if self.commit_policy == CommitPolicy::EveryPut {
                    self.commit(consumer, None)?;
                }
                Ok(())
            }
            Err(TaskError::Retriable(msg)) => {
                tracing::warn!(%msg, "put failed (retriable); redelivering the batch");
                for b in batches.into_iter().rev() {
                    self.pending_records += b.records.len();
                    self.pending_bytes += payload_bytes(&b.records);
                    self.pending.insert(b.tp, b.records);
                }
                self.pending_since.get_or_insert_with(Instant::now);
                Ok(())
            }
            Err(TaskError::Fatal(msg)) => Err(ConnectorError::Sink(msg)),
        }
    }

    /// Commit the sink's durable offsets synchronously. A failed commit is
    /// logged and retried on the next cycle; it never stalls durability.
    pub(crate) fn commit<C: Consumer<SinkContext>>(
        &mut self,
        consumer: &C,
        only: Option<&BTreeSet<TopicPartition>>,
    ) -> Result<()> {
        let consumed: BTreeMap<TopicPartition, i64> = self
            .consumed
            .iter()
            .filter(|(tp, _)| self.assigned.contains(*tp) && only.is_none_or(|o| o.contains(*tp)))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let safe = self
            .sink
            .pre_commit(&consumed)
            .map_err(|e| ConnectorError::Sink(format!("pre_commit: {e}")))?;
        let offsets = self.tracker.check_committable(&safe);
        if offsets.is_empty() {
            self.tracker.nothing_to_commit();
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (tp, o) in &offsets {
            tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*o))
                .map_err(ConnectorError::kafka("build commit list"))?;
        }
        let t0 = Instant::now();
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                tracing::debug!(
                    partitions = offsets.len(),
                    commit_us = t0.elapsed().as_micros() as u64,
                    "commit"
                );
                self.tracker.record_commit(&offsets);
                self.stats.commits += 1;
                if let Some(f) = self.on_commit.as_mut() {
                    f(&offsets, &self.tracker.durable_reported);
                }
                if let Some(d) = self.done.as_mut() {
                    if d(&self.tracker.committed) {
                        self.finished = true;
                    }
                }
            }
            Err(e) => {
                self.stats.commit_failures += 1;
                tracing::warn!(error = %e, "commit failed; durable offsets will be committed on the next cycle");
            }
        }
        Ok(())
    }
}

/// Build the consumer configuration. Auto-commit and the auto offset store
/// are off: committing is this loop's job, and only after fsync.
pub fn client_config(cfg: &RunConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        .set("group.id", &cfg.group)
        // Never let librdkafka commit on its own: it would commit offsets
        // that are not durable yet.
        .set("enable.auto.commit", "false")
        // Nothing is stored for commit implicitly; we commit explicit lists.
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", &cfg.auto_offset_reset)
        .set("enable.partition.eof", "false")
        // Incremental rebalancing: a member gives up a partition, and commits
        // its durable offset, while the group is stable, before another
        // member is handed it. Under the eager protocol the revoke happens
        // while the group is re-joining, and brokers that refuse commits in
        // that state (librdkafka's mock cluster does) leave the next owner
        // to re-archive the uncommitted tail. `-X` may choose eager anyway.
        .set("partition.assignment.strategy", "cooperative-sticky")
        // librdkafka's default (1000 ms) postpones the next fetch whenever the
        // prefetch queue is over its thresholds. A loop that drains the queue
        // in bursts between fsyncs then sits idle for up to a second with
        // nothing to poll: measured here, it cut archiving from ~400k to
        // ~120k records/s (docs/BENCHMARKS.md).
        .set("fetch.queue.backoff.ms", "10");
    for (k, v) in &cfg.kafka {
        c.set(k, v);
    }
    c
}

/// Check the brokers answer and every topic exists, within the connect timeout.
pub fn preflight<C: Consumer<SinkContext>>(consumer: &C, cfg: &RunConfig) -> Result<()> {
    let t0 = Instant::now();
    let md = consumer
        .fetch_metadata(None, Duration::from_millis(cfg.connect_timeout_ms))
        .map_err(|e| ConnectorError::BrokerUnreachable {
            brokers: cfg.brokers.clone(),
            waited_ms: t0.elapsed().as_millis() as u64,
            detail: e.to_string(),
        })?;
    for t in &cfg.topics {
        let found = md
            .topics()
            .iter()
            .find(|mt| mt.name() == t)
            .is_some_and(|mt| mt.error().is_none() && !mt.partitions().is_empty());
        if !found {
            return Err(ConnectorError::UnknownTopic {
                topic: t.clone(),
                brokers: cfg.brokers.clone(),
            });
        }
    }
    Ok(())
}

/// Run the loop until stopped, done, a fatal error, or a simulated crash.
pub fn run_pipeline(
    cfg: &RunConfig,
    sink: Box<dyn SinkTask>,
    opts: PipelineOptions,
) -> Result<RunReport> {
    cfg.validate()?;
    let shared = Arc::new(Mutex::new(Shared {
        sink,
        commit_policy: cfg.commit,
        on_offset_out_of_range: cfg.on_offset_out_of_range,
        pending: BTreeMap::new(),
        pending_bytes: 0,
        pending_records: 0,
        pending_since: None,
        consumed: BTreeMap::new(),
        assigned: BTreeSet::new(),
        tracker: CommitTracker::default(),
        stats: RunStats::default(),
        fatal: None,
        commits_closed: false,
        clean_finish: false,
        crash_after_records: opts.crash_after_records,
        on_commit: opts.on_commit,
        done: opts.done,
        finished: false,
        commit_after_assign: false,
    }));
    let consumer: BaseConsumer<SinkContext> = client_config(cfg)
        .create_with_context(SinkContext {
            shared: shared.clone(),
        })
        .map_err(|e| ConnectorError::Config(format!("kafka client: {e}")))?;
    preflight(&consumer, cfg)?;
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(ConnectorError::kafka("subscribe"))?;
    let result = consume(&consumer, &shared, cfg, &opts.stop);
    let outcome = {
        let mut s = shared.lock().expect("shared state");
        let outcome = match result {
            Ok(()) => finish(&mut s, &consumer).map(|()| RunReport {
                stats: s.stats.clone(),
                put_to_commit_us: s.tracker.put_to_commit_us.clone(),
                committed: s.tracker.committed.clone(),
            }),
            Err(e) => Err(e),
        };
        // After a clean finish everything durable is committed; after a crash
        // or a fatal error nothing more may be. Either way the revoke that
        // closing the consumer triggers commits nothing.
        s.commits_closed = true;
        s.clean_finish = outcome.is_ok();
        outcome
    };
    match &outcome {
        // The demo's and the tests' deliberate crash is not an operator's error.
        Err(e @ ConnectorError::SimulatedCrash) => tracing::info!(error = %e, "pipeline stopped"),
        Err(e) => tracing::error!(error = %e, "pipeline stopped"),
        Ok(_) => {}
    }
    // The shared lock is free here: closing serves a final revoke callback.
    close(consumer);
    outcome
}

/// Clean stop: drain, fsync, commit synchronously, close the sink.
fn finish(s: &mut Shared, consumer: &BaseConsumer<SinkContext>) -> Result<()> {
    s.put_pending(consumer, None)?;
    s.commit(consumer, None)?;
    let assigned: Vec<TopicPartition> = s.assigned.iter().cloned().collect();
    s.sink
        .close(&assigned)
        .map_err(|e| ConnectorError::Sink(e.to_string()))?;
    s.sink
        .stop()
        .map_err(|e| ConnectorError::Sink(e.to_string()))?;
    Ok(())
}

/// Leave the group and close, serving the final revoke here rather than in
/// `Drop` (where librdkafka's destroy can wait forever on a close that was
/// never driven).
fn close(consumer: BaseConsumer<SinkContext>) {
    consumer.unsubscribe();
    match consumer.close_queue() {
        Ok(()) => {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !consumer.closed() && Instant::now() < deadline {
                consumer.poll(Duration::from_millis(100));
            }
        }
        Err(e) => tracing::warn!(error = %e, "consumer close failed"),
    }
    if consumer.closed() {
        drop(consumer);
    } else {
        // If a rebalance callback panicked (an invariant assertion), the
        // close never completes and dropping would block forever inside
        // rd_kafka_destroy. Leak the handle rather than hang the process:
        // nothing more is committed either way.
        tracing::warn!("consumer did not close within 10 s; abandoning the handle");
        std::mem::forget(consumer);
    }
}

fn consume(
    consumer: &BaseConsumer<SinkContext>,
    shared: &Arc<Mutex<Shared>>,
    cfg: &RunConfig,
    stop: &AtomicBool,
) -> Result<()> {
    let linger = Duration::from_millis(cfg.linger_ms);
    let mut last_commit = Instant::now();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let timeout = {
            let s = shared.lock().expect("shared state");
            match s.pending_since {
                Some(t) => linger.saturating_sub(t.elapsed()),
                None => Duration::from_millis(100),
            }
        };
        let polled = consumer.poll(timeout);
        let mut s = shared.lock().expect("shared state");
        if let Some(e) = s.fatal.take() {
            return Err(e);
        }
        match polled {
            None => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "consumer error");
                if let rdkafka::error::KafkaError::MessageConsumption(code) = &e {
                    use rdkafka::types::RDKafkaErrorCode as C;
                    if matches!(
                        code,
                        C::UnknownTopicOrPartition | C::UnknownTopic | C::TopicAuthorizationFailed
                    ) {
                        return Err(ConnectorError::Kafka {
                            op: "consume",
                            source: e,
                        });
                    }
                }
            }
            Some(Ok(m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                if s.assigned.contains(&tp) {
                    let r = to_record(&m);
                    drop(m);
                    s.stats.records_polled += 1;
                    s.stats.first_record_at.get_or_insert_with(Instant::now);
                    let size = r.payload_bytes();
                    if size > cfg.record_bytes_max {
                        match cfg.on_oversize {
                            OnOversize::Fail => {
                                return Err(ConnectorError::OversizeRecord {
                                    topic: tp.topic,
                                    partition: tp.partition,
                                    offset: r.offset,
                                    size_bytes: size,
                                    max_bytes: cfg.record_bytes_max,
                                })
                            }
                            OnOversize::Skip => {
                                tracing::warn!(%tp, offset = r.offset, size_bytes = size, max = cfg.record_bytes_max, "skipping oversize record");
                                s.stats.records_oversize_skipped += 1;
                            }
                        }
                    } else {
                        s.stats.payload_bytes += size;
                        s.pending_bytes += size as usize;
                        s.pending_records += 1;
                        s.pending_since.get_or_insert_with(Instant::now);
                        s.pending.entry(tp).or_default().push(r);
                    }
                }
            }
        }
        let full =
            s.pending_records >= cfg.batch_records_max || s.pending_bytes >= cfg.batch_bytes_max;
        let lingered = s.pending_since.is_some_and(|t| t.elapsed() >= linger);
        if full || lingered {
            s.put_pending(consumer, None)?;
        }
        let interval_due = match cfg.commit {
            CommitPolicy::Interval(every) => last_commit.elapsed() >= every,
            CommitPolicy::EveryPut => false,
        };
        if interval_due || std::mem::take(&mut s.commit_after_assign) {
            s.commit(consumer, None)?;
            last_commit = Instant::now();
        }
        if s.finished {
            return Ok(());
        }
    }
}

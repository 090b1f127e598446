//! The consumer context: rebalance handling for the commit-after-durable loop.
//!
//! - **Assign:** ask the sink where each partition resumes (`open`), write
//!   those offsets into the assignment list, then assign (or incrementally
//!   assign, for cooperative-sticky). Writing them into the list before
//!   assigning is what makes the first fetch start there; a `seek` right
//!   after assign can fail with "Erroneous state". A resume offset that
//!   Kafka no longer has follows `retention.rs`.
//! - **Revoke:** wait for the puts already handed to the task thread, put
//!   what is buffered for the revoked partitions, ask the sink's
//!   `pre_commit` once (the archive makes it all durable), commit what it
//!   declared synchronously, then `close`. The committer leaves
//!   the revoked partitions alone from the start of the revoke.
//! - **Lost:** commit nothing; drop the buffer; `close`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_engine::TopicPartition;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use crate::consumer::{lock, Shared};
use crate::error::ConnectorError;
use crate::fetch::Forwarder;
use crate::offsets::{read_committed, Committed, CommittedRead};
use crate::pipeline::CommitOutcome;
use crate::progress::LogBounds;
use crate::retention::{no_offset_start, refetch_lost, resume_at, Bounds};
use crate::worker::Job;

pub struct SinkContext {
    pub(crate) shared: Arc<Mutex<Shared>>,
    /// Forwards to the run's queue while the consumer loop runs
    /// (`fetch.rs`): each partition assigned is forwarded to it before the
    /// assignment.
    pub(crate) forwarder: Mutex<Option<Forwarder>>,
    /// librdkafka's description of the last client error reported, which
    /// rust-rdkafka's `poll` then returns as a bare code: it names the
    /// topic ("Subscribed topic not available: t: ..."), so a run that
    /// stops on the error says which.
    pub(crate) last_error: Mutex<Option<(rdkafka::types::RDKafkaErrorCode, String)>>,
    /// The cause of the last client error: a run that cannot reach Kafka
    /// says it.
    pub(crate) last_cause: crate::librdkafka::LastCause,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if crate::librdkafka::said_as_client_error(level, fac) {
            crate::librdkafka::log_client_failure(&self.last_cause, fac, log_message);
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", fac, "{log_message}")
            }
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", fac, "{log_message}"),
            _ => tracing::debug!(target: "librdkafka", fac, "{log_message}"),
        }
    }

    /// Said here, the first of each kind at WARN (`LastCause`); the
    /// consumer loop then gets the same error from `poll` without its
    /// description, takes that from `last_error`, and says it again only
    /// when it acts on it (a reset, a stop). Before 2026-12-07 every
    /// error was said at WARN here and again by the loop, with no limit:
    /// a broker gone mid-run was a pair of lines every few seconds.
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(code) = error.rdkafka_error_code() {
            *lock(&self.last_error) = Some((code, reason.to_owned()));
        }
        crate::librdkafka::say_client_error(&self.last_cause, &error, reason);
    }

    /// librdkafka's statistics, every `progress_interval_s`: keep each
    /// assigned partition's log bounds, and have the consumer loop report
    /// progress (progress.rs). Read for those bounds alone (`log_bounds`),
    /// not into rust-rdkafka's whole `Statistics` (brokers, windows, some
    /// forty fields a partition), whose parse failure it logs through the
    /// `log` crate, which nothing here listens to: the progress lines then
    /// stopped without a word (since the night of 2026-12-04, a WARN, and
    /// the line still comes, its lags from the bounds known before).
    fn stats_raw(&self, statistics: &[u8]) {
        let bounds = log_bounds(statistics);
        let mut s = lock(&self.shared);
        match bounds {
            Ok((bounds, group_state)) => {
                s.group_state = group_state;
                for (tp, b) in bounds {
                    // Only ours (librdkafka keeps offsets of revoked
                    // partitions, and -1 is its internal unassigned one).
                    if s.assigned.contains(&tp) {
                        s.log_bounds.insert(tp, b);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, bytes = statistics.len(), "librdkafka's statistics did not parse: this progress line's lags are from the log bounds known before")
            }
        }
        s.progress_due = true;
    }
}

/// An assignment's start as the resuming line shows it: the offset, or
/// where in the log.
fn offset_text(start: Offset) -> String {
    match start {
        Offset::Offset(o) => o.to_string(),
        Offset::Beginning => "beginning".into(),
        Offset::End => "end".into(),
        other => format!("{other:?}"),
    }
}

/// Each partition's log start and last stable offset in a librdkafka
/// statistics report (`topics.<name>.partitions.<id>.lo_offset` and
/// `ls_offset`; every other field is passed over).
/// Also the group's state (`cgrp.state`: `up` once it has a coordinator;
/// `query-coord` and `wait-coord` while it looks for one), for the WARN of
/// a run not in its group.
type Statistics = (Vec<(TopicPartition, LogBounds)>, Option<String>);

fn log_bounds(statistics: &[u8]) -> serde_json::Result<Statistics> {
    #[derive(serde::Deserialize)]
    struct Report {
        #[serde(default)]
        topics: BTreeMap<String, Topic>,
        #[serde(default)]
        cgrp: Option<Group>,
    }
    #[derive(serde::Deserialize)]
    struct Group {
        state: String,
    }
    #[derive(serde::Deserialize)]
    struct Topic {
        #[serde(default)]
        partitions: BTreeMap<String, Partition>,
    }
    #[derive(serde::Deserialize)]
    struct Partition {
        partition: i32,
        lo_offset: i64,
        ls_offset: i64,
    }
    let report: Report = serde_json::from_slice(statistics)?;
    let group_state = report.cgrp.map(|g| g.state);
    let bounds = report
        .topics
        .into_iter()
        .flat_map(|(topic, t)| {
            t.partitions.into_values().map(move |p| {
                (
                    TopicPartition::new(&topic, p.partition),
                    LogBounds {
                        start: p.lo_offset,
                        end: p.ls_offset,
                    },
                )
            })
        })
        .collect();
    Ok((bounds, group_state))
}

fn tps_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl ConsumerContext for SinkContext {
    fn rebalance(&self, c: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let cooperative = matches!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.on_assign(c, tpl);
                // Before the assignment starts any fetch (fetch.rs): the
                // partitions' records then never reach the consumer queue.
                // The forwarder's lock let go first: `fail` takes the
                // shared state's, which a revoke holds while it takes the
                // forwarder's (a lock-order inversion, found by an audit;
                // no deadlock yet, as both run on the consumer thread).
                let forwarder = self.forwarder().clone();
                if let Some(forwarder) = forwarder {
                    for tp in tps_of(tpl) {
                        if !forwarder.forward(c, &tp) {
                            self.fail(ConnectorError::Failed(format!(
                                "librdkafka has no fetch queue for {tp}; nothing of it is archived"
                            )));
                        }
                    }
                }
                let r = if cooperative {
                    c.incremental_assign(tpl)
                } else {
                    c.assign(tpl)
                };
                if let Err(e) = r {
                    self.fail(ConnectorError::Kafka {
                        op: "assign",
                        source: e,
                    });
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                self.on_revoke(c, tpl);
                let r = if cooperative {
                    c.incremental_unassign(tpl)
                } else {
                    c.unassign()
                };
                // librdkafka keeps the rest of the assignment paused until
                // an unassign succeeds: the run would sit idle, the
                // partitions held from the group. They are flushed,
                // committed and closed by now, so the run stops instead
                // (unless it is stopping already: then it is only logged).
                if let Err(e) = r {
                    if lock(&self.shared).pipeline.state().commits_closed {
                        tracing::warn!(error = %e, "unassign failed while the run stops");
                    } else {
                        self.fail(ConnectorError::Kafka {
                            op: "unassign the revoked partitions",
                            source: e,
                        });
                    }
                }
            }
            other => {
                // librdkafka (2.x) passes only the two codes above. Were it
                // to pass another, the partitions would go without cairn's
                // revoke: the run stops (nothing more is committed, so no
                // commit lands on partitions this member no longer holds).
                self.fail(ConnectorError::Failed(format!(
                    "librdkafka's rebalance callback came with {other:?}, neither an assignment nor a revoke; stopping, so that nothing is committed for partitions this member may no longer hold"
                )));
                let _ = c.unassign();
            }
        }
    }
}

/// How long a cooperative revoke keeps retrying its commit.
const REVOKE_COMMIT_RETRY: Duration = Duration::from_millis(2_000);

/// Longest a read of Kafka's committed offsets inside a consumer callback
/// may take (less under a short `max.poll.interval.ms`: `Shared::bounds_budget`).
const COMMITTED_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Kafka's topic id of each topic of `tps`, read within `timeout` (one
/// metadata request to learn a broker, one `DescribeTopics`), or why it
/// could not be: the sink decides what a missing one means
/// (`SinkTask::check_topics`).
fn read_topic_ids<X: ConsumerContext>(
    c: &BaseConsumer<X>,
    tps: &[TopicPartition],
    timeout: std::time::Duration,
) -> BTreeMap<String, crate::task::KafkaTopicId> {
    let topics: Vec<String> = tps
        .iter()
        .map(|tp| tp.topic.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    crate::topic_ids::describe(c.client(), &topics, timeout)
}

/// `tps`' committed offsets, read again once for the partitions the first
/// read failed on (a coordinator moving fails a read that the next one
/// answers). A read that fails as a whole leaves every partition unread.
fn read_committed_twice<X: ConsumerContext>(
    c: &BaseConsumer<X>,
    tps: &[TopicPartition],
    timeout: Duration,
) -> CommittedRead {
    let read = |tps: &[TopicPartition]| {
        read_committed(c, tps, timeout).unwrap_or_else(|e| CommittedRead {
            offsets: BTreeMap::new(),
            unread: tps.iter().map(|tp| (tp.clone(), e.clone())).collect(),
        })
    };
    let mut got = read(tps);
    if !got.unread.is_empty() {
        for (tp, error) in &got.unread {
            tracing::warn!(%tp, %error, "could not read the committed offset during assignment; reading it again");
        }
        let again: Vec<TopicPartition> = got.unread.keys().cloned().collect();
        let second = read(&again);
        for (tp, error) in &second.unread {
            tracing::warn!(%tp, %error, "could not read the committed offset during assignment");
        }
        got.offsets.extend(second.offsets);
        got.unread = second.unread;
    }
    got
}

/// Commit the revoked partitions' durable offsets. Under the cooperative
/// protocol a revoke runs once this member has its new assignment, but the
/// group can still be completing the rebalance for the others (librdkafka's
/// mock cluster refuses commits until every member has synced), so a failed
/// commit is retried for up to `REVOKE_COMMIT_RETRY` (10 ms doubling to
/// 200 ms). Under the eager protocol the group waits for this member to
/// re-join, which it does only after this returns: no retry.
fn commit_revoked(
    c: &BaseConsumer<SinkContext>,
    pipeline: &crate::pipeline::Pipeline,
    revoked: &BTreeSet<TopicPartition>,
) -> CommitOutcome {
    let retry = matches!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
    commit_retrying(c, pipeline, Some(revoked), retry)
}

/// Commit (`only` those partitions, or all), retrying a failure for up to
/// `REVOKE_COMMIT_RETRY` when `retry` is set. Used by the revoke and by the
/// clean stop's final commit.
pub(crate) fn commit_retrying(
    c: &BaseConsumer<SinkContext>,
    pipeline: &crate::pipeline::Pipeline,
    only: Option<&BTreeSet<TopicPartition>>,
    retry: bool,
) -> CommitOutcome {
    let deadline = std::time::Instant::now() + REVOKE_COMMIT_RETRY;
    let mut backoff = Duration::from_millis(10);
    // Commits Kafka refused; a Stale one was never sent.
    let mut failed = 0u32;
    loop {
        let outcome = pipeline.commit_now(c, only);
        // Chosen before the sink lowered its word: taken again at once, at
        // what it says now (until the deadline; never sent above it).
        if outcome == CommitOutcome::Stale {
            if std::time::Instant::now() < deadline {
                continue;
            }
            return CommitOutcome::Failed;
        }
        if outcome != CommitOutcome::Failed {
            if failed > 0 && outcome == CommitOutcome::Done {
                tracing::info!(attempt = failed + 1, "the commit went through on a retry");
            }
            return outcome;
        }
        failed += 1;
        // Lost meanwhile (`commit_now` sends nothing then): no retry goes
        // through until the loss is served, which waits for this caller
        // to return (found in review, 2026-12-05: 2 s of retries).
        if !retry || c.assignment_lost() || std::time::Instant::now() + backoff > deadline {
            return outcome;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(200));
    }
}

impl SinkContext {
    /// The forwarder, if the consumer loop runs. Its critical sections
    /// only replace or clone it: a panic cannot leave it half changed.
    pub(crate) fn forwarder(&self) -> std::sync::MutexGuard<'_, Option<Forwarder>> {
        lock(&self.forwarder)
    }

    /// librdkafka's description of the last client error, if it was of
    /// `error`'s code (taken: each description is given once).
    pub(crate) fn take_error_reason(&self, error: &KafkaError) -> Option<String> {
        let code = error.rdkafka_error_code()?;
        let last = lock(&self.last_error).take()?;
        (last.0 == code).then_some(last.1)
    }

    fn fail(&self, e: ConnectorError) {
        tracing::error!(error = %e, "fatal during rebalance");
        lock(&self.shared).pipeline.fail(e);
    }

    fn on_assign(&self, c: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let tps = tps_of(tpl);
        let mut s = lock(&self.shared);
        s.membership = crate::consumer::Membership::Joined;
        let _span = tracing::info_span!("assign", partitions = tps.len()).entered();
        if s.pipeline.state().commits_closed {
            // The run is over (a clean stop or a fatal error) and the sink
            // may already be stopped: an assignment served while closing is
            // not opened, nothing of it is fetched into the archive or
            // committed, and it is not a failure of the run.
            tracing::debug!("assigned while the run stops: not opened");
            return;
        }
        // Before any partition resumes: is each topic the one the sink
        // stored offsets for? (topic_ids.rs)
        // Not read for a run already failed: its stop need not wait on it.
        let ids = if s.pipeline.failed.load(Ordering::Acquire) {
            BTreeMap::new()
        } else {
            read_topic_ids(c, &tps, s.bounds_budget.min(COMMITTED_READ_TIMEOUT))
        };
        if let Err(e) = s.request(|reply| Job::CheckTopics { ids, reply }) {
            s.pipeline.fail(e);
            return;
        }
        let partitions = tps.clone();
        let mut resume = match s.request(|reply| Job::Open { partitions, reply }) {
            Ok(r) => {
                crate::crashpoint::reached(crate::crashpoint::ASSIGN_AFTER_OPEN);
                r
            }
            Err(e) => {
                s.pipeline.fail(e);
                return;
            }
        };
        let CommittedRead {
            offsets: committed,
            unread,
        } = read_committed_twice(c, &tps, s.bounds_budget.min(COMMITTED_READ_TIMEOUT));
        // A partition the archive holds resumes at its own offset, whatever
        // Kafka says. One it holds nothing of needs Kafka's offset, and the
        // identity committed with it, to tell whether this store held it
        // and lost it (restored from an older backup): read as "nothing
        // committed", --auto-offset-reset latest would skip what it lost,
        // and librdkafka's own read of the offset would skip it too. So
        // the run stops instead of guessing.
        let blind: Vec<&TopicPartition> = unread
            .keys()
            .filter(|tp| !resume.contains_key(*tp))
            .collect();
        if let Some(first) = blind.first() {
            let names: Vec<String> = blind.iter().map(|tp| tp.to_string()).collect();
            s.pipeline.fail(ConnectorError::KafkaWhy {
                op: "reading committed offsets at assignment",
                why: format!(
                    "the archive holds nothing of {}, and only Kafka's committed offsets tell whether this store held them and lost them (a store restored from an older backup): stopping rather than risk skipping records; run again once Kafka answers",
                    names.join(", ")
                )
                .into(),
                source: unread[*first].clone(),
            });
        }
        let identity = s.pipeline.identity.clone();
        let mut bounds = Bounds::new(c, tps.clone(), s.bounds_budget);
        // Kafka's committed offsets as the commit tracker takes them: not
        // one that this store committed and no longer holds, so that the
        // next commit brings Kafka back to what the store does hold.
        let mut kafka = BTreeMap::new();
        let mut consumed = BTreeMap::new();
        // Archived partitions the group has no committed offset for (read,
        // not failed to read): one WARN for them all, below.
        let mut uncommitted: Vec<String> = Vec::new();
        // Partitions this archive holds nothing of that the group committed
        // past their start: one WARN for them all, below.
        let mut unheld: Vec<String> = Vec::new();
        // The same, committed by another store of this kind, to a run that
        // holds partitions already (assigned earlier in this run, or
        // archived among those assigned now: the sink's `open` speaks of
        // these only): an ordinary hand-over in a group of several, one
        // INFO line (a WARN at every rebalance until 2026-12-07; found by
        // an audit). A run's first assignment with nothing else keeps the
        // WARN: a new or mistyped --data looks just like it.
        let established = !s.assigned.is_empty() || resume.values().any(|&o| o > 0);
        // Partitions started at their log end (`--auto-offset-reset
        // latest`) over records Kafka holds, which this store will not:
        // one WARN with their count (an INFO "resuming" line was all until
        // 2026-12-07; found by an audit).
        let mut passed_over: Vec<String> = Vec::new();
        let mut passed_over_records: i64 = 0;
        let mut handed_over: Vec<String> = Vec::new();
        // Archived partitions whose group offset is past the archive's and
        // names no store (an offsets reset, another client's commit): one
        // WARN for them all, below.
        let mut skipped: Vec<String> = Vec::new();
        // Starts for the sink to record (`SinkTask::start`) before the
        // first fetch, and to commit at once: log ends read under
        // `--auto-offset-reset latest`, and the log start a partition this
        // store lost entirely is fetched again from.
        let mut recorded_starts = BTreeMap::new();
        // Partitions `--on-offset-out-of-range earliest` moved past records
        // that aged out of Kafka, and where to: recorded in the archive
        // (`Shared::record_moves`) once they are assigned here.
        let mut moved = BTreeMap::new();
        // Where each partition resumes: one INFO line for the assignment,
        // each partition at DEBUG (an assignment of 10,000 partitions wrote
        // 10,000 INFO lines until 2026-12-06).
        // Only the first few are written out (`first_few`).
        let mut resuming: Vec<(&TopicPartition, Offset)> = Vec::with_capacity(tps.len());
        for tp in &tps {
            let archive = resume.get(tp).copied();
            let point = resume_point(archive, committed.get(tp), identity.as_deref());
            if let (Some(k), false) = (committed.get(tp), matches!(point, ResumePoint::Lost { .. }))
            {
                kafka.insert(tp.clone(), k.offset);
            }
            let stored = match point {
                ResumePoint::Archive(a) => {
                    if a > 0 && !committed.contains_key(tp) && !unread.contains_key(tp) {
                        uncommitted.push(format!("{tp}@{a}"));
                    }
                    Some(a)
                }
                ResumePoint::Nowhere => None,
                ResumePoint::Kafka(k) => {
                    let named = committed
                        .get(tp)
                        .is_some_and(|c| names_a_store(&c.metadata, identity.as_deref()));
                    match kafka_resume(archive, k, named, identity.is_some()) {
                        KafkaResume::Skipped(a) => skipped.push(format!("{tp}@{a}..{k}")),
                        KafkaResume::AnotherStore => {
                            tracing::info!(%tp, archive = ?archive, kafka = k, "another store in this group archived past this one; resuming at Kafka's committed offset")
                        }
                        KafkaResume::Untold(a) => {
                            tracing::info!(%tp, archive = a, kafka = k, "the group's committed offset is past this sink's; resuming there (the sink has no identity, so another member's commit cannot be told from an offsets reset)")
                        }
                        KafkaResume::Unheld if named && established => {
                            handed_over.push(format!("{tp}@{k}"))
                        }
                        KafkaResume::Unheld => unheld.push(format!("{tp}@{k}")),
                        KafkaResume::UnheldUntold => {
                            tracing::info!(%tp, kafka = k, "this sink holds nothing of the partition, and the group committed an offset for it: resuming there (the sink has no identity: another member's commit, as in an ordinary rebalance, cannot be told from another tool's)")
                        }
                        KafkaResume::Start => {}
                    }
                    Some(k)
                }
                ResumePoint::Lost { archive, kafka: k } => {
                    tracing::warn!(
                        %tp,
                        archive = ?archive,
                        kafka = k,
                        "the offset Kafka holds was committed under this sink's identity, past what the sink's open says it holds (its store restored from an older backup, or its newest records lost; or an open that returned no offset for a partition its store holds): fetching the records after the sink's own offset again (from Kafka's log start when it gave none)"
                    );
                    archive
                }
            };
            // The commit of a store that lost records below it: those were
            // archived once, and what lies past it is judged as any resume
            // point is (retention.rs). A partition lost entirely starts at
            // Kafka's log start whatever --auto-offset-reset says: `latest`
            // would skip what it lost and what came since.
            let lost_below = match point {
                ResumePoint::Lost { kafka, .. } => Some(kafka),
                _ => None,
            };
            // Every partition gets an explicit start: librdkafka's own
            // `auto.offset.reset` is `error` (retention.rs).
            // A run that is failed fetches nothing: the consumer loop stops
            // before it takes a record. Its other partitions' starts are
            // not worked out (a bounds read could delay the stop by its
            // budget).
            let stopping = s.pipeline.failed.load(Ordering::Acquire);
            let start = match (stored, lost_below) {
                (None, _) if stopping => Offset::End,
                (None, Some(committed)) => {
                    match refetch_lost(&mut bounds, tp, committed, s.on_offset_out_of_range) {
                        // Recorded and committed at once, as a store that
                        // lost only some records commits what it holds:
                        // Kafka's offset comes down to where this store
                        // starts again. Left at the old commit until a put,
                        // a member taking the partition over before then
                        // (a join, or this one's death) would resume at
                        // that commit, and the records below it would be
                        // in neither archive.
                        Ok(from) => {
                            recorded_starts.insert(tp.clone(), from);
                            Offset::Offset(from)
                        }
                        Err(e) => {
                            s.pipeline.fail(e);
                            Offset::End
                        }
                    }
                }
                (None, None) => match no_offset_start(&mut bounds, tp, &s.auto_offset_reset) {
                    Ok((start, passed)) => {
                        tracing::debug!(%tp, ?start, "neither the archive nor Kafka has an offset for this partition: --auto-offset-reset");
                        if let Offset::Offset(end) = start {
                            recorded_starts.insert(tp.clone(), end);
                            if passed > 0 {
                                passed_over.push(format!("{tp}@{end} ({passed})"));
                                passed_over_records += passed;
                            }
                        }
                        start
                    }
                    Err(e) => {
                        s.pipeline.fail(e);
                        Offset::End
                    }
                },
                (Some(stored), _) if stopping => Offset::Offset(stored),
                (Some(stored), lost_below) => {
                    let policy = s.on_offset_out_of_range;
                    let resumed = resume_at(&mut bounds, tp, stored, lost_below, policy);
                    if matches!(resumed, Ok((_, false))) {
                        s.pipeline.state().stats.resumed_unchecked += 1;
                    }
                    match resumed {
                        // The archive's own offset, unchecked (the log's
                        // bounds were unreadable): not committed on `open`'s
                        // word alone, which could lie past the log's end
                        // (the fetch then stops the run with an offset
                        // reset error first), nor one the sink is asked
                        // about (`pre_commit` reports consumed partitions),
                        // until a put of it, or its fetch at the log's end
                        // at or past it, shows it in the log (consumer.rs,
                        // `reached_end`). Kafka's offset (another
                        // store's) and a store's that lost records (whose
                        // commit brings Kafka back down to what it holds,
                        // and can only lower it) go on as checked.
                        Ok((offset, false)) if lost_below.is_none() && archive == Some(stored) => {
                            resume.remove(tp);
                            Offset::Offset(offset)
                        }
                        // Moved past records that aged out of Kafka
                        // (`earliest`): consumed up to where the archive
                        // is, and the move recorded in it below, before the
                        // first fetch.
                        Ok((offset, _)) if offset > stored => {
                            consumed.insert(tp.clone(), stored);
                            moved.insert(tp.clone(), offset);
                            Offset::Offset(offset)
                        }
                        Ok((offset, _)) => {
                            consumed.insert(tp.clone(), offset);
                            Offset::Offset(offset)
                        }
                        Err(e) => {
                            s.pipeline.fail(e);
                            Offset::Offset(stored)
                        }
                    }
                }
            };
            s.started_at(tp, start, lost_below);
            if let Err(e) = tpl.set_partition_offset(&tp.topic, tp.partition, start) {
                s.pipeline.fail(ConnectorError::Kafka {
                    op: "set assignment offset",
                    source: e,
                });
            }
            tracing::debug!(%tp, ?start, "resuming");
            resuming.push((tp, start));
        }
        if !resuming.is_empty() {
            tracing::info!(
                partitions = resuming.len(),
                at = %crate::selection::first_few(
                    resuming.iter().map(|(tp, start)| format!("{tp}@{}", offset_text(*start)))
                ),
                "resuming (each partition at DEBUG)"
            );
        }
        if !passed_over.is_empty() {
            tracing::warn!(
                partitions = passed_over.len(),
                records = passed_over_records,
                at = %crate::selection::first_few(passed_over.into_iter()),
                "starting at the log end (--auto-offset-reset latest): the {passed_over_records} records Kafka holds before it are not archived (partition@start (records before it))"
            );
        }
        if !handed_over.is_empty() {
            tracing::info!(
                partitions = handed_over.len(),
                committed = %crate::selection::first_few(handed_over.into_iter()),
                "partitions another store of this group archived up to these offsets: archiving them from there on (a hand-over in a group of several archives)"
            );
        }
        if !unheld.is_empty() {
            // Expected of a new member of a group of several archives; also
            // what an archive folder on a volume not yet mounted, or a
            // mistyped path, looks like.
            tracing::warn!(
                partitions = unheld.len(),
                committed = %crate::selection::first_few(unheld.into_iter()),
                "this archive holds nothing of these partitions, and the group committed offsets for them (another archive's, or another tool's): it archives from those offsets on, without the records before them. Expected for a new member of a group of several archives; if this --data should have held them (a volume not mounted yet, a mistyped path), stop now"
            );
        }
        if !skipped.is_empty() {
            // Another archive's commit names its store; one that names
            // none came from elsewhere, and nothing holds what it passed.
            tracing::warn!(
                partitions = skipped.len(),
                skipped = %crate::selection::first_few(skipped.into_iter()),
                "the group's committed offsets for these partitions are past this archive's and name no archive (an offsets reset, or a client other than an archive committed them): this run resumes at them, so this archive will not hold the records between (shown as archive..committed). If no other archive holds them and they should be archived, stop now, reset the group's offsets for these partitions to the archive's (kafka-consumer-groups --reset-offsets --to-offset), and run again"
            );
        }
        if !uncommitted.is_empty() {
            // Kafka drops a deleted topic's committed offsets: a topic
            // recreated and grown past the archive's offset cannot be told
            // apart otherwise (rule 5 of OPERATIONS.md, "Where a partition
            // resumes").
            let partitions = uncommitted.len();
            tracing::warn!(
                partitions,
                archived = %crate::selection::first_few(uncommitted.into_iter()),
                "the archive holds these partitions but the group has no committed offset for them: a run into this archive stopped before its first commit of them (a crash: it resumes at the archive's offset, as it should), a new --group, the group's offsets expired (offsets.retention.minutes), or the topic was deleted and recreated; if recreated, resuming at the archive's offset skips the new topic's first records and appends the rest to the old one's history (archive a recreated topic into a new --data)"
            );
        }
        if !recorded_starts.is_empty() && !s.pipeline.failed.load(Ordering::Acquire) {
            // Recorded before the first fetch: a restart or a rebalance
            // before the first of these partitions' records is durable then
            // resumes at this start, not at a later log end that would skip
            // what was produced in between (or at a lost store's old commit).
            match s.request(|reply| Job::Start {
                starts: recorded_starts.clone(),
                reply,
            }) {
                Ok(recorded) => {
                    for (tp, o) in recorded {
                        if recorded_starts.get(&tp) == Some(&o) {
                            resume.insert(tp.clone(), o);
                            consumed.insert(tp, o);
                        } else {
                            tracing::warn!(%tp, offset = o, start = ?recorded_starts.get(&tp), "the sink recorded a start it was not given: ignored");
                        }
                    }
                }
                Err(e) => s.pipeline.fail(e),
            }
        }
        {
            let mut st = s.pipeline.state();
            let ignored = st.tracker.record_open(&tps, &resume, &kafka);
            if !ignored.is_empty() {
                tracing::warn!(
                    partitions = %crate::selection::first_few(ignored.iter().map(|(tp, o)| format!("{tp}@{o}"))),
                    "the sink's open reported offsets of partitions it was not opening: ignored"
                );
            }
            st.assigned.extend(tps.iter().cloned());
            st.consumed.extend(consumed);
        }
        s.assignment_changed(&tps);
        s.assigned.extend(tps);
        if !moved.is_empty() && !s.pipeline.failed.load(Ordering::Acquire) {
            if let Err(e) = s.record_moves(&moved) {
                s.pipeline.fail(e);
            }
        }
        // A partition that resumes fully archived gets no put, yet its
        // durable offset may be ahead of Kafka's: commit it now.
        s.pipeline.wake.notify_one();
    }

    fn on_revoke(&self, c: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = tps_of(tpl);
        let lost = c.assignment_lost();
        let mut s = lock(&self.shared);
        let _span = tracing::info_span!("revoke", partitions = tps.len(), lost).entered();
        let revoked: BTreeSet<TopicPartition> = tps.iter().cloned().collect();
        let commits_closed = s.pipeline.state().commits_closed;
        let clean_finish = s.clean_finish;
        if clean_finish && !lost {
            // Closing after a clean stop: the final commit was made and the
            // sink closed every partition.
            tracing::debug!("revoked at close after the final commit");
            s.drop_pending(&revoked);
        } else if lost || commits_closed {
            tracing::warn!(lost, commits_closed, "partitions gone without a commit");
            s.drop_pending(&revoked);
        } else {
            // Finish the puts in flight and the buffer, make them durable,
            // then commit the revoked partitions' durable offsets synchronously.
            s.pipeline.begin_revoke(&revoked);
            match s.flush(Some(&revoked)) {
                Err(e) => s.pipeline.fail(e),
                Ok(()) => {
                    crate::crashpoint::reached(crate::crashpoint::REVOKE_BEFORE_COMMIT);
                    match commit_revoked(c, &s.pipeline, &revoked) {
                        CommitOutcome::Done => {
                            tracing::info!(partitions = ?revoked, "revoked partitions committed at their durable offsets");
                        }
                        CommitOutcome::Nothing => {
                            tracing::info!(partitions = ?revoked, "revoked partitions: nothing to commit (Kafka holds offsets at or past what is durable here, or none is known here: the next owner resumes at Kafka's)");
                        }
                        CommitOutcome::Closed => {
                            tracing::warn!(partitions = ?revoked, "revoked as the run stops: commits are closed, and their durable offsets may not have been committed (the run's error says why it stops)");
                        }
                        CommitOutcome::Failed | CommitOutcome::Stale => {
                            // The next owner resumes from Kafka's older offset and
                            // archives the records between again (its store and
                            // this one each stay duplicate-free).
                            tracing::warn!(partitions = ?revoked, "the revoke's commit failed: the next owner will archive the records after Kafka's committed offset again");
                            s.pipeline.state().stats.revoke_commit_failures += 1;
                        }
                    }
                }
            }
        }
        s.pipeline.drop_partitions(&tps);
        let forwarder = self.forwarder().clone();
        for tp in &tps {
            if let Some(f) = &forwarder {
                f.release(c, tp);
            }
            s.assigned.remove(tp);
            s.log_bounds.remove(tp);
            s.starts.remove(tp);
        }
        s.assignment_changed(&tps);
        // Every partition gone as lost: out of the group until it assigns
        // again (the consumer loop warns while it lasts).
        if lost && s.assigned.is_empty() && !clean_finish {
            s.membership = crate::consumer::Membership::Lost;
        }
        if !clean_finish {
            let partitions = tps;
            if let Err(e) = s.request(|reply| Job::Close { partitions, reply }) {
                s.pipeline.fail(e);
            }
        }
    }
}

/// Where an assigned partition resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResumePoint {
    /// At the archive's durable offset: Kafka's committed offset is not
    /// past it, or Kafka has none.
    Archive(i64),
    /// At Kafka's committed offset, which another store committed past
    /// this one's (or this one has none): another member of the group
    /// archived the records between, and the stores together hold every
    /// record once.
    Kafka(i64),
    /// At the archive's offset (or, without one, at Kafka's log start),
    /// although Kafka's is past it: this store committed `kafka` itself and
    /// has lost records it archived. They are fetched again.
    Lost { archive: Option<i64>, kafka: i64 },
    /// Neither the archive nor Kafka has an offset.
    Nowhere,
}

/// What a partition resuming at Kafka's committed offset `kafka` says,
/// given what the store holds of it (`archive`), whether that commit names
/// a store (`named`) and whether this sink has an identity at all.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KafkaResume {
    /// Past the store's records, and named by no store: an offsets reset
    /// or another client's commit, and the records between are in no
    /// archive (a WARN, gathered).
    Skipped(i64),
    /// Past the store's records, committed by another store of the group.
    AnotherStore,
    /// Past the records of a sink without an identity: no member of its
    /// group names its commits, so another member's cannot be told from
    /// an offsets reset (until 2026-12-05 the WARN for a reset, at every
    /// ordinary rebalance of such a group, the example file sink's).
    Untold(i64),
    /// The store holds nothing of it, and the group committed past 0 (a
    /// WARN, gathered: for an archive, a new member, or a `--data` that
    /// should have held it).
    Unheld,
    /// The same for a sink without an identity, which has no `--data` to
    /// mistype and whose group's commits name no member: INFO.
    UnheldUntold,
    /// The store holds nothing of it, and the commit is at 0.
    Start,
}

/// Whether a commit's `metadata` names another store of this sink's kind:
/// it begins with the kind of `identity`, its text up to and including
/// the first `:` (`cairn-store:` for an archive's, `pg:` for a sink
/// named `pg:db-a`). A sink without an identity, or with one that has no
/// `:`, takes the archive's kind (until 2026-12-06 the archive's kind was
/// the only one, so another member of a group of sinks of another kind,
/// each named, was taken for an offsets reset, with its WARN, at every
/// ordinary rebalance).
pub(crate) fn names_a_store(metadata: &str, identity: Option<&str>) -> bool {
    let kind = identity
        .and_then(|id| id.find(':').map(|end| &id[..=end]))
        .unwrap_or(crate::task::STORE_IDENTITY_PREFIX);
    metadata.starts_with(kind)
}

/// [`KafkaResume`] for one partition. Another store's commit carries its
/// identity; other metadata (Kafka Streams', a Java client's
/// `OffsetAndMetadata`) names no archive, and the records skipped are in
/// none (until 2026-12-05 any metadata read as another store's, logged at
/// INFO; `cairn status` already told them apart).
pub(crate) fn kafka_resume(
    archive: Option<i64>,
    kafka: i64,
    named: bool,
    has_identity: bool,
) -> KafkaResume {
    match archive {
        Some(_) if named => KafkaResume::AnotherStore,
        Some(a) if has_identity => KafkaResume::Skipped(a),
        Some(a) => KafkaResume::Untold(a),
        None if kafka > 0 && has_identity => KafkaResume::Unheld,
        None if kafka > 0 => KafkaResume::UnheldUntold,
        None => KafkaResume::Start,
    }
}

/// The rule for [`ResumePoint`]: the archive's offset, unless Kafka's
/// committed offset is past it and was committed by another store (its
/// metadata is not `identity`). Alone, committed <= durable always holds and
/// the archive's offset wins; a store that finds its own commit past what
/// it holds was restored from an older backup, or lost its newest records.
pub(crate) fn resume_point(
    archive: Option<i64>,
    kafka: Option<&Committed>,
    identity: Option<&str>,
) -> ResumePoint {
    let ours = |k: &Committed| identity.is_some_and(|id| k.metadata == id);
    match (archive, kafka) {
        (Some(a), Some(k)) if k.offset > a => match ours(k) {
            true => ResumePoint::Lost {
                archive: Some(a),
                kafka: k.offset,
            },
            false => ResumePoint::Kafka(k.offset),
        },
        (Some(a), _) => ResumePoint::Archive(a),
        (None, Some(k)) if ours(k) => ResumePoint::Lost {
            archive: None,
            kafka: k.offset,
        },
        (None, Some(k)) => ResumePoint::Kafka(k.offset),
        (None, None) => ResumePoint::Nowhere,
    }
}

#[cfg(test)]
mod tests {
    /// The bounds are read out of a whole report, every other field passed
    /// over; a report that does not parse is an error, not a silence.
    #[test]
    fn log_bounds_are_read_from_librdkafkas_statistics() {
        let report = br#"{"name":"c#consumer-1","type":"consumer","ts":1,"brokers":{"b:1/1":{"name":"b:1/1","rtt":{"min":1,"p50":2}}},
            "topics":{"t":{"topic":"t","age":5,"partitions":{
                "0":{"partition":0,"fetch_state":"active","lo_offset":10,"hi_offset":120,"ls_offset":118,"msgs":5},
                "-1":{"partition":-1,"lo_offset":-1001,"hi_offset":-1001,"ls_offset":-1001}}}},
            "cgrp":{"state":"up"}}"#;
        let (mut got, group_state) = super::log_bounds(report).unwrap();
        assert_eq!(group_state.as_deref(), Some("up"));
        got.sort_by_key(|(tp, _)| tp.partition);
        assert_eq!(
            got,
            vec![
                (
                    super::TopicPartition::new("t", -1),
                    super::LogBounds {
                        start: -1001,
                        end: -1001
                    }
                ),
                (
                    super::TopicPartition::new("t", 0),
                    super::LogBounds {
                        start: 10,
                        end: 118
                    }
                ),
            ]
        );
        assert!(
            super::log_bounds(br#"{"topics":{"t":{"partitions":{"0":{"partition":01}}}}}"#)
                .is_err()
        );
        assert_eq!(super::log_bounds(b"{}").unwrap(), (vec![], None));
    }

    use super::*;

    fn committed(offset: i64, metadata: &str) -> Committed {
        Committed {
            offset,
            metadata: metadata.to_owned(),
        }
    }

    /// A commit past the store's records is a WARN (records skipped into
    /// no archive) only where the commit names no store and this sink has
    /// an identity to tell one by: a sink without one (the example file
    /// sink) cannot, and its ordinary rebalances are not alarms. Nor is a
    /// partition such a sink holds nothing of, which a group committed:
    /// an archive's WARN there is about a mistyped `--data`.
    #[test]
    fn only_a_sink_with_an_identity_calls_an_unnamed_commit_a_skip() {
        use super::{kafka_resume, KafkaResume};
        assert_eq!(
            kafka_resume(Some(5), 9, false, true),
            KafkaResume::Skipped(5)
        );
        assert_eq!(
            kafka_resume(Some(5), 9, true, true),
            KafkaResume::AnotherStore
        );
        assert_eq!(
            kafka_resume(Some(5), 9, false, false),
            KafkaResume::Untold(5)
        );
        assert_eq!(kafka_resume(None, 9, false, true), KafkaResume::Unheld);
        assert_eq!(
            kafka_resume(None, 9, false, false),
            KafkaResume::UnheldUntold
        );
        assert_eq!(kafka_resume(None, 0, false, true), KafkaResume::Start);
    }

    /// Another store is told by its identity's kind, the archive's or a
    /// sink's own (a sink of another kind, named, took every other
    /// member's commit for an offsets reset until 2026-12-06).
    #[test]
    fn another_store_is_one_of_this_sinks_kind() {
        let archive = Some("cairn-store:aa");
        assert!(names_a_store("cairn-store:bb", archive));
        assert!(!names_a_store("pg:db-b", archive));
        assert!(!names_a_store("", archive));
        let pg = Some("pg:db-a");
        assert!(names_a_store("pg:db-b", pg));
        assert!(!names_a_store("cairn-store:bb", pg));
        assert!(!names_a_store("pgx:db-b", pg));
        assert!(!names_a_store("", pg));
        // An empty kind is a kind too.
        assert!(names_a_store(":y", Some(":x")));
        assert!(!names_a_store("cairn-store:bb", Some(":x")));
        // No kind of its own: the archive's.
        for none in [None, Some("plain")] {
            assert!(names_a_store("cairn-store:bb", none));
            assert!(!names_a_store("pg:db-b", none));
        }
    }

    #[test]
    fn the_archive_wins_unless_another_store_committed_past_it() {
        let me = Some("cairn-store:aa");
        let mine = committed(100, "cairn-store:aa");
        let other = committed(100, "cairn-store:bb");
        let foreign = committed(100, "");
        // Kafka behind or level: the archive's offset.
        for k in [&mine, &other, &foreign] {
            assert_eq!(
                resume_point(Some(100), Some(k), me),
                ResumePoint::Archive(100)
            );
            assert_eq!(
                resume_point(Some(150), Some(k), me),
                ResumePoint::Archive(150)
            );
        }
        assert_eq!(resume_point(Some(7), None, me), ResumePoint::Archive(7));
        // Kafka past it, committed by another store or another client.
        assert_eq!(
            resume_point(Some(60), Some(&other), me),
            ResumePoint::Kafka(100)
        );
        assert_eq!(
            resume_point(Some(60), Some(&foreign), me),
            ResumePoint::Kafka(100)
        );
        assert_eq!(
            resume_point(None, Some(&other), me),
            ResumePoint::Kafka(100)
        );
        // Kafka past it, committed by this store: records it lost.
        assert_eq!(
            resume_point(Some(60), Some(&mine), me),
            ResumePoint::Lost {
                archive: Some(60),
                kafka: 100
            }
        );
        assert_eq!(
            resume_point(None, Some(&mine), me),
            ResumePoint::Lost {
                archive: None,
                kafka: 100
            }
        );
        // A sink without an identity: every commit is another's.
        assert_eq!(
            resume_point(Some(60), Some(&mine), None),
            ResumePoint::Kafka(100)
        );
        assert_eq!(resume_point(None, None, me), ResumePoint::Nowhere);
    }
}

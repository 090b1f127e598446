//! Restore: produce archived records back into Kafka.
//!
//! Each archived partition goes to the partition with the same number in its
//! target topic (the archived topic's own name, or the name `rename` maps it
//! to), in offset order, with its key, value, headers and timestamp. Kafka
//! assigns the restored records new offsets; `offset_header` keeps each
//! record's archived offset beside it, and lets `resume` find where each
//! partition stopped.
//!
//! # Invariants
//! - Nothing is produced before every check has passed: the brokers answer,
//!   every target topic exists with a partition for every archived one, and
//!   every target partition is empty (or, with `append`, may hold records;
//!   or, with `resume`, ends with a record an earlier restore of this
//!   archive wrote: its offset header names an archived record with the same
//!   key and value).
//! - The records of one partition reach Kafka in archive order, each at most
//!   once per run: the producer is idempotent, and the run sends nothing
//!   after the first failure it sees (and drops what it had queued, if the
//!   failure came back from the brokers).
//! - A gap (a record that failed below one that was acknowledged) is never
//!   papered over: librdkafka's gapless guarantee turns a batch that fails
//!   for good into a fatal error that stops the producer, and what it does
//!   not cover (timeouts) is detected per partition and reported as a gap,
//!   with no resume point that would skip it.
//! - What the report (or the error) calls delivered was acknowledged by the
//!   brokers. Every partition that is neither complete nor gapped gets a
//!   resume point: the one after its last acknowledged record (below its
//!   first failure, whose lower records' reports may not all have come),
//!   else where it started. A failed or stopped run's
//!   error carries them; damage met in the archive is returned as itself,
//!   with the resume points logged. Records from a resume point on that were
//!   in flight when they failed (a timeout) may have been written anyway:
//!   `from` cannot settle that, `resume` can (it reads the target, and checks
//!   its last record against the archive).
//! - The archive is written only to pass over copies of a topic's own
//!   records restored into it (Kafka's topic id is the one the archive
//!   recorded under that name), so a run does not archive them again: a
//!   target partition's next offset moves to where Kafka's log and the
//!   archive's both ended plus the records Kafka acknowledged, when those
//!   acknowledgements, each at an offset of its own (the producer is
//!   idempotent), fill exactly the offsets up to it; a failed or stopped
//!   restore's too. Nothing of another producer's is passed over: it
//!   would take an offset in that span. Into such a topic whose log ends
//!   elsewhere than the archive's, or which cannot be told apart, nothing
//!   is produced unless `into_archived_topic`. (An unclean leader election
//!   that drops acknowledged copies, whose offsets other records then
//!   take, is outside what the brokers promise and this relies on.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_engine::{Engine, Record, TimestampType, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, Producer, ProducerContext, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::config::{check_connect_timeout_ms, refuse_managed_keys};
use crate::convert::{sendable_timestamp, to_base_record};
use crate::error::{ConnectorError, RestoreFailure, Result};
use crate::librdkafka::{
    check_message_timeout, check_producer_settings, log_ignoring_confwarn, log_to_tracing,
    message_timeout_ms, sliced_wait, worth_waiting_for, Waited,
};
use crate::retention::read_bounds;
use crate::selection::Selection;
use crate::task::KafkaTopicId;

/// librdkafka's default `message.timeout.ms`: every record sent gets its
/// delivery report within it.
const MESSAGE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// Added to the message timeout for the final flush: librdkafka scans for
/// timed-out records about once a second.
const FLUSH_MARGIN_MS: u64 = 30_000;

/// Failpoint: the last flush, every report in, is taken as failed
/// (reports missing past its wait: librdkafka owes them, so only a bug of
/// its would leave them missing).
#[doc(hidden)]
pub const FAILPOINT_FLUSH_FAILS: &str = "restore::flush_fails";

/// Failpoint: the preflight is about to wait for a target partition's
/// watermarks (the cluster's metadata answered). For a test to act on that
/// moment rather than on a clock.
#[doc(hidden)]
pub const FAILPOINT_WATERMARKS: &str = "restore::watermarks";
// A record's archived offset travels with it as librdkafka's opaque pointer
// value (no allocation per record): offsets are non-negative `i64`s.
const _: () = assert!(usize::BITS >= 64, "archived offsets travel as usize");

fn opaque(offset: i64) -> usize {
    debug_assert!(offset >= 0);
    offset as usize
}

/// Records sent between two polls for delivery reports (a full queue polls
/// at once).
const POLL_EVERY_RECORDS: u64 = 256;
/// Producer properties cairn sets and will not take from `-X`.
const MANAGED: [&str; 7] = [
    "bootstrap.servers",
    "metadata.broker.list",
    "enable.idempotence",
    "enable.gapless.guarantee",
    "delivery.report.only.error",
    "allow.auto.create.topics",
    "transactional.id",
];

/// What to restore, and where.
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    pub brokers: String,
    /// Which archived records (all by default).
    pub select: Selection,
    /// Archived topic → target topic. Topics not named keep their name.
    pub rename: BTreeMap<String, String>,
    /// Restore into partitions that already hold records, after them.
    pub append: bool,
    /// Add a header of this name holding the archived offset (decimal).
    pub offset_header: Option<String>,
    /// Continue each target partition after the archived offset in its last
    /// record's `offset_header` (partitions that are empty start at `from`).
    pub resume: bool,
    /// How long to wait for the brokers before giving up.
    pub connect_timeout_ms: u64,
    /// librdkafka producer properties passed through (`-X`).
    pub kafka: BTreeMap<String, String>,
    /// Restore into the archive's own topic even where its copies cannot
    /// be passed over in the archive (its log and Kafka's apart, or the
    /// topic's id not comparable): refused without it; a run then
    /// archives the copies again.
    pub into_archived_topic: bool,
}

impl RestoreConfig {
    pub fn new(brokers: &str) -> Self {
        RestoreConfig {
            brokers: brokers.to_owned(),
            select: Selection::default(),
            rename: BTreeMap::new(),
            append: false,
            offset_header: None,
            resume: false,
            connect_timeout_ms: 30_000,
            kafka: BTreeMap::new(),
            into_archived_topic: false,
        }
    }

    /// Check every setting; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ConnectorError::Config(m));
        if self.brokers.trim().is_empty() {
            return bad("brokers: empty (use --brokers host:port[,host:port])".into());
        }
        crate::config::check_brokers(&self.brokers, &self.kafka)?;
        refuse_managed_keys(&self.kafka, &MANAGED, "cairn restore")?;
        crate::config::refuse_old_protocol(&self.kafka)?;
        crate::config::refuse_signal_takeover(&self.kafka)?;
        crate::librdkafka::refuse_ambiguous_settings(&self.kafka)
            .map_err(ConnectorError::Config)?;
        check_message_timeout(&self.kafka, "the restored records")
            .map_err(ConnectorError::Config)?;
        self.select.check_range()?;
        check_connect_timeout_ms(self.connect_timeout_ms)?;
        if self.offset_header.as_ref().is_some_and(String::is_empty) {
            return bad("--offset-header: the name is empty".into());
        }
        if self.resume && self.offset_header.is_none() {
            return bad("--resume needs --offset-header NAME: that header is how it finds where each partition stopped".into());
        }
        if self.resume && self.append {
            return bad("--resume and --append: choose one (--resume continues after this restore's own records; --append adds after anything)".into());
        }
        for dst in self.rename.values() {
            if let Err(e) = cairn_engine::validate_topic(dst) {
                return bad(format!("--rename: {e}"));
            }
        }
        check_producer_settings(&producer_config(self)).map_err(ConnectorError::Config)?;
        if self.resume {
            // The reader takes `-X` too: checked now, before the archive
            // is opened and the brokers are asked anything.
            crate::config::refuse_settings(&self.kafka, READER_SETS, "cairn restore --resume")?;
            crate::librdkafka::check_consumer_settings(&reader_config(self)).map_err(|e| {
                ConnectorError::Config(format!("reader settings for --resume: {e}"))
            })?;
        }
        Ok(())
    }

    fn target(&self, tp: &TopicPartition) -> TopicPartition {
        let topic = self.rename.get(&tp.topic).unwrap_or(&tp.topic);
        TopicPartition::new(topic, tp.partition)
    }

    fn message_timeout_ms(&self) -> u64 {
        message_timeout_ms(&self.kafka).unwrap_or(MESSAGE_TIMEOUT_MS_DEFAULT)
    }
}

/// One partition's part of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionRestore {
    pub source: TopicPartition,
    pub target: TopicPartition,
    /// Records acknowledged by the brokers.
    pub records: u64,
    /// Lowest and highest archived offset among them.
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
    /// The archived offset the restore started the partition at (`--from`,
    /// or where `--resume` found the target's last record).
    pub from: i64,
}

/// Restored copies in a partition of a topic the archive archives, passed
/// over in the archive: its next offset moved from `from` to `to`, past
/// them, so that a run does not archive them again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassedOver {
    pub partition: TopicPartition,
    pub from: i64,
    pub to: i64,
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RestoreReport {
    pub partitions: Vec<PartitionRestore>,
    /// The archive's partitions whose restored copies it passes over.
    pub passed_over: Vec<PassedOver>,
    pub records: u64,
    pub payload_bytes: u64,
    /// Records whose archived timestamp Kafka's producer cannot send (0 or
    /// negative with a timestamp type): they carry the time of restore.
    pub timestamps_replaced: u64,
    /// Records handed to the producer that already carried a header of
    /// `--offset-header`'s name: their copies carry two, the archived
    /// offset last.
    pub offset_header_clashes: u64,
    pub elapsed: Duration,
}

/// The archived partitions `cfg` selects, each with its target.
pub fn plan(engine: &Engine, cfg: &RestoreConfig) -> Result<Vec<(TopicPartition, TopicPartition)>> {
    cfg.validate()?;
    let archived = engine.partitions();
    if archived.is_empty() {
        return Err(ConnectorError::RestoreRefused(
            "the archive holds no records: nothing to restore".into(),
        ));
    }
    let renamed: Vec<&str> = cfg.rename.keys().map(String::as_str).collect();
    let chosen = cfg.select.choose(archived, &renamed)?;
    if let Some(later) = cfg.select.starts_below_held(&chosen) {
        tracing::warn!("{later}");
    }
    // Partitions a prune emptied are still listed, with nothing in them: a
    // restore of only those would send nothing and look like success.
    // (An export of them is empty and fine: retention may empty an idle
    // archive.)
    if !chosen.is_empty() && chosen.iter().all(|p| p.record_count == 0) {
        return Err(ConnectorError::RestoreRefused(format!(
            "the chosen partitions hold no records (emptied by a prune, or recorded with none archived: a `latest` start, or a log end past offsets that held none, such as transaction markers): {}; nothing to restore",
            crate::selection::held(&chosen)
        )));
    }
    let empty: BTreeSet<TopicPartition> = chosen
        .iter()
        .filter(|p| p.record_count == 0)
        .map(|p| p.tp.clone())
        .collect();
    let chosen: Vec<_> = chosen
        .into_iter()
        .map(|p| {
            let target = cfg.target(&p.tp);
            (p.tp, target)
        })
        .collect();
    // A rename of a topic that is not restored would be ignored without a
    // word: `--topic b --rename a=x` restoring only b, into b.
    if let Some(unused) = renamed
        .iter()
        .find(|t| !chosen.iter().any(|(source, _)| source.topic == **t))
    {
        return Err(ConnectorError::Config(format!(
            "--rename {unused}=…: nothing of topic {unused:?} is among the partitions chosen to restore (check --topic and --partition, or leave the rename out)"
        )));
    }
    // A partition that holds no record sends nothing: it needs no target
    // partition, and a target's records are no reason to refuse it (until
    // 2026-12-06 both were asked of it; found by an audit). `--resume`
    // keeps it, to tell a prune that emptied it under an earlier restore
    // that stopped part-way, where the target's last record is that
    // restore's; `preflight` leaves it out where it is not.
    let chosen: Vec<_> = if cfg.resume || empty.is_empty() {
        chosen
    } else {
        tracing::info!(
            partitions = %crate::selection::first_few(empty.iter().map(ToString::to_string)),
            "holding no records: nothing of them to restore"
        );
        chosen
            .into_iter()
            .filter(|(source, _)| !empty.contains(source))
            .collect()
    };
    // A range within what the partitions hold that meets no record (a gap
    // of offsets) is refused before anything is produced, as export
    // refuses it: an empty restore would look like success. (A resumed
    // restore may still send nothing: what is left of the range was sent.)
    if cfg.select.ranged() {
        let mut met = false;
        for (source, _) in &chosen {
            // The first record at or after `from` (the index count comes
            // with the restore's own read, or below).
            let first = engine.read(source, cfg.select.from)?.next().transpose()?;
            if first.is_some_and(|r| cfg.select.to.is_none_or(|to| r.offset < to)) {
                met = true;
                break;
            }
        }
        if !met {
            // Unless an index entry is lost: then the range may hold
            // records no read found, and that damage is the error.
            for (source, _) in &chosen {
                engine.read_range(source, cfg.select.from, cfg.select.to)?;
            }
            return Err(cfg.select.nothing_in_range());
        }
    }
    // Two chosen topics into one target would interleave their partitions.
    let mut into: BTreeMap<&str, &str> = BTreeMap::new();
    for (source, target) in &chosen {
        if let Some(other) = into.insert(&target.topic, &source.topic) {
            if other != source.topic {
                return Err(ConnectorError::Config(format!(
                    "--rename: topics {other:?} and {:?} would both be restored into {:?}",
                    source.topic, target.topic
                )));
            }
        }
    }
    Ok(chosen)
}

/// Restore what `cfg` selects from `engine` into Kafka. Blocking.
pub fn restore(engine: &Engine, cfg: &RestoreConfig) -> Result<RestoreReport> {
    restore_until(engine, cfg, &|| false)
}

/// [`restore`], stopping early (cleanly: what librdkafka has sent is
/// acknowledged, what it still holds queued is withdrawn unsent, and the
/// error says where each partition resumes) once `stop` says so. It is
/// asked at every partition's start, every `POLL_EVERY_RECORDS` records,
/// while waiting for room in librdkafka's queue, and while waiting for the
/// last acknowledgements.
pub fn restore_until(
    engine: &Engine,
    cfg: &RestoreConfig,
    stop: &dyn Fn() -> bool,
) -> Result<RestoreReport> {
    restore_until_split(engine, cfg, stop, stop)
}

/// [`restore_until`] with one stop for the waits before anything is sent
/// (for the brokers, the metadata, the watermarks: asked after each slice
/// of a wait that got no answer) and another for the sending. Tests that
/// stop the sending at a given point use it, so that a slow answer before
/// it cannot stop the restore first.
#[doc(hidden)]
pub fn restore_until_split(
    engine: &Engine,
    cfg: &RestoreConfig,
    stop_waiting: &dyn Fn() -> bool,
    stop: &dyn Fn() -> bool,
) -> Result<RestoreReport> {
    let t0 = Instant::now();
    let plan = plan(engine, cfg)?;
    let producer = producer(cfg)?;
    let Preflight {
        starts,
        emptied,
        highs,
        pass_over,
    } = preflight(engine, &producer, cfg, &plan, stop_waiting)?;

    let mut report = RestoreReport::default();
    // Records handed to librdkafka, per partition whose every selected record
    // was (a partition cut short by a stop or failure has no entry).
    let mut sent: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    // Damage met while reading stops the restore after what was sent has
    // been acknowledged, so that the resume points logged below are exact.
    let mut unreadable: Option<ConnectorError> = None;
    // The archived partition being read when that came.
    let mut damaged: Option<TopicPartition> = None;
    let mut interrupted = false;
    // Targets some record was handed to librdkafka for (written, or maybe
    // written if it failed after).
    let mut queued_to: BTreeSet<TopicPartition> = BTreeSet::new();
    // Records sent since the last poll, over the whole run (partitions may
    // hold fewer than POLL_EVERY_RECORDS each).
    let mut since_poll = 0u64;
    'partitions: for (source, target) in &plan {
        if stop() {
            interrupted = true;
            break;
        }
        let from = starts[target];
        let mut n = 0u64;
        if cfg.select.to.is_none_or(|to| from < to) {
            let mut records =
                match read_caught(engine, || engine.read_range(source, from, cfg.select.to)) {
                    Ok(it) => it,
                    Err(e) => {
                        unreadable = Some(e);
                        damaged = Some(source.clone());
                        break;
                    }
                };
            while let Some(r) = read_caught(engine, || records.next().transpose()).transpose() {
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        unreadable = Some(e);
                        damaged = Some(source.clone());
                        break 'partitions;
                    }
                };
                match send(&producer, cfg, target, &r, stop) {
                    Ok(Sent::Queued { timestamp_replaced }) => {
                        producer.context().note_handed();
                        crate::crashpoint::reached(crate::crashpoint::RESTORE_AFTER_SEND);
                        n += 1;
                        if n == 1 {
                            queued_to.insert(target.clone());
                        }
                        report.payload_bytes += r.payload_bytes();
                        report.timestamps_replaced += u64::from(timestamp_replaced);
                        if let Some(name) = cfg.offset_header.as_deref() {
                            report.offset_header_clashes +=
                                u64::from(r.headers.iter().any(|h| h.name == name));
                        }
                        // Serve delivery reports in batches: a poll per
                        // record cost a tenth of the run in clock reads.
                        // Failures only arrive in a poll (on this thread).
                        since_poll += 1;
                        if since_poll >= POLL_EVERY_RECORDS {
                            since_poll = 0;
                            drain_reports(&producer);
                            if producer.context().failed() {
                                break 'partitions;
                            }
                            if stop() {
                                interrupted = true;
                                break 'partitions;
                            }
                        }
                    }
                    Ok(Sent::Failed) => break 'partitions,
                    Ok(Sent::Interrupted) => {
                        interrupted = true;
                        break 'partitions;
                    }
                    Err(Unsent::Kafka(e)) => {
                        let mut detail = e.to_string();
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge) {
                            // librdkafka's own check in `send`: no broker
                            // saw it, though the text says "Broker".
                            // The offset header counts, and librdkafka
                            // adds the record's framing (until 2026-12-06
                            // the size said neither, and could read below
                            // the limit; found by an audit).
                            let header = cfg
                                .offset_header
                                .as_deref()
                                .map_or(0, |name| name.len() + r.offset.to_string().len());
                            detail.push_str(&format!(
                                " (refused by the producer before it was sent, not by a broker: the record ({} bytes of key, value and headers{}, plus the framing librdkafka counts with them) is over the producer's message.max.bytes{}; raise it with -X message.max.bytes, within the topic's max.message.bytes)",
                                r.payload_bytes() + header as u64,
                                if header > 0 {
                                    format!(", the offset header's {header} included")
                                } else {
                                    String::new()
                                },
                                cfg.kafka
                                    .get("message.max.bytes")
                                    .map_or(String::new(), |v| format!(" ({v}, set by -X)"))
                            ));
                        }
                        producer
                            .context()
                            .fail_with(target, r.offset, detail, is_consequence(&e));
                        break 'partitions;
                    }
                    Err(Unsent::TooBigForQueue(detail)) => {
                        producer
                            .context()
                            .fail_with(target, r.offset, detail, false);
                        break 'partitions;
                    }
                }
            }
        }
        sent.insert(target.clone(), n);
        // Handed to the producer, not yet acknowledged: said so (until
        // 2026-12-06 "partition sent" read as delivered; an audit).
        tracing::info!(%source, %target, records = n, "partition handed to the producer (acknowledged records are counted at the end)");
    }

    // Every record sent gets its delivery report within message.timeout.ms.
    let flush_ms = cfg.message_timeout_ms() + FLUSH_MARGIN_MS;
    // Said, as the wait can be minutes with a broker away (it was silent).
    // Records, not librdkafka's queue length, which counts its requests
    // and events too (30 records read as 31; an audit).
    let in_flight = producer.context().unreported();
    if in_flight > 0 {
        tracing::info!(
            in_flight,
            wait_up_to_s = flush_ms / 1000,
            "waiting for the brokers to acknowledge the records still in flight"
        );
    }
    let flushed =
        flush(&producer, Duration::from_millis(flush_ms), stop).and_then(|()| flush_failpoint());
    if flushed.is_err() {
        // Reports still missing: give up on those records (they fail with
        // "purged", and may have been written), and collect the reports.
        producer.purge(PurgeConfig::default().queue().inflight());
        let deadline = Instant::now() + Duration::from_secs(10);
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            producer.poll(Duration::from_millis(100));
        }
    }
    producer.poll(Duration::ZERO);
    let mut state = producer.context().take();
    // A partition some of whose records a stop withdrew was cut short
    // there: it resumes after its last acknowledged record.
    sent.retain(|target, _| {
        state
            .partitions
            .get(target)
            .is_none_or(|d| d.withdrawn == 0)
    });
    // A stop during the wait that withdrew records stopped the restore
    // (exit 130, with resume points), counted by every withdrawal reported
    // (one served after the withdrawal's own drain too); one that found
    // nothing left to withdraw stops nothing.
    interrupted |= state.partitions.values().any(|d| d.withdrawn > 0);
    let withdrawn_maybe_sent: u64 = state
        .partitions
        .values()
        .map(|d| d.withdrawn_maybe_sent)
        .sum();
    // The client's own word on a fatal error: its error event may not have
    // been served by now. A refusal of the producer's id comes before any
    // record leaves, each then failing as only "purged" (until 2026-12-06
    // the error said no more than that, and to rerun, which met the same
    // refusal; found by an audit).
    let fatal_code = producer.client().fatal_error().map(|(code, reason)| {
        state.fatal.get_or_insert(reason);
        code
    });
    for (source, target) in &plan {
        let d = state.partitions.get(target).cloned().unwrap_or_default();
        report.records += d.acked;
        report.partitions.push(PartitionRestore {
            source: source.clone(),
            target: target.clone(),
            records: d.acked,
            first_offset: d.first_acked,
            last_offset: d.last_acked,
            from: starts[target],
        });
    }
    report.elapsed = t0.elapsed();
    // Said (until 2026-12-07 silently two headers; an audit): `--resume`
    // reads the last, which is the offset's, but a consumer of the target
    // that reads the first gets the producer's value.
    if report.offset_header_clashes > 0 {
        tracing::warn!(
            records = report.offset_header_clashes,
            header = cfg.offset_header.as_deref().unwrap_or_default(),
            "records already carried a header of --offset-header's name: their copies carry two of that name, the archived offset last (which --resume reads); a consumer that reads the first gets the record's own (choose a name the records do not use)"
        );
    }
    if report.timestamps_replaced > 0 {
        tracing::warn!(
            records = report.timestamps_replaced,
            "records archived with a timestamp of 0 (which librdkafka's producer reads as \"now\") or below -1 (which a broker refuses when it rebuilds a batch) carry the time of restore"
        );
    }

    let standings: Vec<(&PartitionRestore, Standing)> = report
        .partitions
        .iter()
        .map(|p| {
            let d = state.partitions.get(&p.target).cloned().unwrap_or_default();
            // Finished: every record sent was acknowledged (a report that
            // never came leaves its records unconfirmed).
            let finished = sent.get(&p.target).is_some_and(|&n| n == d.acked);
            let none_written = none_written(queued_to.contains(&p.target), flushed.is_ok(), &d);
            let st = match standing(starts[&p.target], finished, &d) {
                // Nothing written to a target whose records are all gone:
                // it is as empty as before, and --resume would refuse it
                // (no last record). (One sent, even unacknowledged, may be
                // there: --resume reads it.)
                Standing::Resume(o) if none_written && emptied.contains(&p.target) => {
                    Standing::AppendFrom(o)
                }
                // An --append run into a target it sent nothing: its last
                // record is another producer's (or none), which --resume
                // refuses. One it sent records to, with --offset-header,
                // --resume continues exactly (since the night of
                // 2026-12-04; before, every partition of an --append run
                // was advised --from and --append, its records in flight
                // then sent twice).
                Standing::Resume(o) if none_written && cfg.append => Standing::AppendFrom(o),
                st => st,
            };
            (p, left_to_restore(engine, &p.source, cfg.select.to, st))
        })
        .collect();
    // After the resume points are worked out (a failed pass-over poisons
    // the engine, which they read), before any way out, failed ones too: a
    // `--resume` then finds the archive's log ending where Kafka's does.
    let (passed, mut pass_failed) = passed_over(engine, &pass_over, &state);
    // A failed pass-over leads whatever else stopped the restore: it holds
    // for the archive, not for one run.
    let mut with_pass = |e: ConnectorError| -> ConnectorError {
        match pass_failed.take() {
            None => e,
            Some(p) => ConnectorError::CopiesNotPassedOver {
                head: format!(
                    "the restore did not finish ({e}; a next step named there is refused for the partitions restored into the archive's own topic unless given --into-archived-topic, the archive's log no longer ending where Kafka's does)"
                ),
                source: Box::new(p),
            },
        }
    };
    let stopped =
        state.first_failed.is_some() || unreadable.is_some() || flushed.is_err() || interrupted;
    if stopped {
        for (p, st) in &standings {
            tracing::warn!(
                archived = %p.source,
                target = %p.target,
                delivered = p.records,
                standing = %st,
                "restore stopped"
            );
        }
    }
    // Judged only with every report in: records written whose reports
    // never came would leave holes that read as another producer's.
    let interleaved = if flushed.is_ok() {
        state.interleaved(&highs)
    } else {
        None
    };
    // A restore cut short (failed, stopped, or met damage) says so, with
    // what is left to run, and logs the interleaving: its own error says
    // every record was delivered, which only a whole restore can say.
    let log_interleaved = || match &interleaved {
        Some(ConnectorError::RestoreInterleaved {
            target,
            acknowledged,
            first,
            last,
            held,
        }) => tracing::error!(
            target = %target,
            acknowledged,
            first,
            last,
            held,
            "another producer wrote to the target during the restore: other records lie among the restored ones"
        ),
        Some(ConnectorError::RestoreStartedPast {
            target,
            checked_end,
            first,
            ..
        }) => tracing::error!(
            target = %target,
            checked_end,
            first,
            "records appeared in the target between its check and the restore's first record: another producer's, or an earlier restore's not yet replicated when it was checked (now there twice)"
        ),
        _ => {}
    };
    if let Some(tp) = state.headline() {
        log_interleaved();
        if let Some(e) = &unreadable {
            tracing::error!(error = %e, "the archive could not be read either");
        }
        let d = &state.partitions[tp];
        let p = report
            .partitions
            .iter()
            .find(|p| p.target == *tp)
            .expect("failures are reported for planned partitions");
        let f = d.first_failed.as_ref().expect("a failed partition");
        let mut detail = f.detail.clone();
        // Refused its id: a rerun meets the same refusal until the cause
        // is fixed, and one that changed nothing in the targets is the
        // same command again.
        let refused_id = state.first_cause.is_none() && fatal_code.is_some_and(refuses_producer);
        match (&state.fatal, fatal_code) {
            // Every record's failure followed from it (purged, or fatal
            // itself): the cause leads.
            (Some(fatal), Some(code)) if state.first_cause.is_none() => {
                detail = format!(
                    "the producer stopped for good{}: {fatal}{}; this record then failed with: {detail}",
                    if refused_id {
                        ", and every rerun fails the same way until this is fixed"
                    } else {
                        ""
                    },
                    fatal_advice(code).unwrap_or("")
                );
            }
            // A record's own refusal made it fatal (the gapless guarantee
            // restore asks for): the record's failure is the cause.
            (Some(fatal), _) => detail = format!("{detail} ({fatal})"),
            (None, _) => {}
        }
        if flushed.is_err() {
            detail = format!(
                "{detail}; delivery reports were still missing after {flush_ms} ms, so the records in flight were given up and may have been written{}",
                // Once: a purged record's own detail may say it already.
                if detail.contains(REPLICAS_WAIT) { "" } else { REPLICAS_WAIT }
            );
        }
        // Damage met as well: its partition told apart, as below.
        let untouched = plan.iter().all(|(_, target)| {
            let d = state.partitions.get(target).cloned().unwrap_or_default();
            none_written(queued_to.contains(target), flushed.is_ok(), &d)
        });
        let next_step = match &damaged {
            Some(d) => next_step_past_damage(cfg, &standings, d),
            None if refused_id && untouched => {
                "fix that, then run the same command again: nothing of this run reached the targets"
                    .to_owned()
            }
            None => next_step(cfg, &standings),
        };
        return Err(with_pass(ConnectorError::RestoreFailed(Box::new(
            RestoreFailure {
                archived: p.source.clone(),
                target: p.target.clone(),
                offset: f.offset,
                delivered: p.records,
                next_step,
                detail,
            },
        ))));
    }
    if let Some(e) = unreadable {
        log_interleaved();
        let damaged = damaged.expect("set with unreadable");
        return Err(with_pass(ConnectorError::RestoreCut {
            delivered: report.records,
            source: Box::new(e),
            next_step: next_step_past_damage(cfg, &standings, &damaged),
        }));
    }
    if let Err(e) = confirm(&report, &sent, || next_step(cfg, &standings)) {
        log_interleaved();
        return Err(with_pass(e));
    }
    // A stop that came after the last record was sent stopped nothing:
    // the restore is whole, and says so (exit 0, every partition listed).
    let left = standings
        .iter()
        .any(|(_, st)| !matches!(st, Standing::Complete));
    if interrupted && flushed.is_ok() && left {
        log_interleaved();
        let mut next_step = next_step_around(cfg, &standings, false, withdrawn_maybe_sent > 0);
        if withdrawn_maybe_sent > 0 {
            next_step.push_str(&format!(
                "; {} withdrawn at the stop had been sent once and queued again for a retry{REPLICAS_WAIT}",
                crate::count::counted(withdrawn_maybe_sent, "record")
            ));
        }
        return Err(with_pass(ConnectorError::RestoreStopped {
            delivered: report.records,
            next_step,
        }));
    }
    if let Err(e) = flushed {
        log_interleaved();
        return Err(with_pass(ConnectorError::RestoreCut {
            delivered: report.records,
            source: Box::new(ConnectorError::Kafka {
                op: "flush restored records",
                source: e,
            }),
            next_step: next_step(cfg, &standings),
        }));
    }
    if let Some(e) = interleaved {
        return Err(with_pass(e));
    }
    if let Some(e) = pass_failed {
        return Err(ConnectorError::CopiesNotPassedOver {
            head: format!(
                "the restore is complete ({}, all acknowledged)",
                crate::count::counted(report.records, "record")
            ),
            source: Box::new(e),
        });
    }
    report.passed_over.extend(passed);
    Ok(report)
}

/// The failpoint [`FAILPOINT_FLUSH_FAILS`], after a flush that ended well.
fn flush_failpoint() -> KafkaResult<()> {
    fail::fail_point!(FAILPOINT_FLUSH_FAILS, |_| Err(KafkaError::Flush(
        RDKafkaErrorCode::OperationTimedOut
    )));
    Ok(())
}

/// Every finished partition (in `sent`) had each record it sent
/// acknowledged: anything else is a failure nobody reported.
fn confirm(
    report: &RestoreReport,
    sent: &BTreeMap<TopicPartition, u64>,
    advice: impl FnOnce() -> String,
) -> Result<()> {
    for p in &report.partitions {
        let Some(&n) = sent.get(&p.target) else {
            continue;
        };
        if p.records != n {
            return Err(ConnectorError::RestoreUnconfirmed {
                target: p.target.clone(),
                sent: n,
                acknowledged: p.records,
                next_step: advice(),
            });
        }
    }
    Ok(())
}

/// Said of a record that may have been written although it failed: the
/// leader can hold it above the high watermark, unseen by `--resume`'s
/// reader until a follower catches up, when it appears behind the rerun's
/// first records.
const REPLICAS_WAIT: &str = " (it may be in Kafka, not yet visible: before --resume, wait until the target's replicas have caught up, at most replica.lag.time.max.ms, 30 s by default, or records still waiting for a follower may arrive twice)";

/// The target offsets a partition's acknowledgements span (first, last,
/// how many offsets), if they hold records this restore did not write.
fn foreign_in_span(d: &PartitionDeliveries) -> Option<(i64, i64, u64)> {
    let (first, last) = d.target_span?;
    let held = u64::try_from(last - first + 1).unwrap_or(0);
    // Records acknowledged without an offset may lie in the span, or
    // beside it: the span holds at least the placed ones, at most all.
    let placed = d.acked - d.unplaced;
    (!(placed..=d.acked).contains(&held)).then_some((first, last, held))
}

/// Whether nothing of a run was written to a target partition: nothing
/// was handed to librdkafka for it (`queued`), or every record was
/// reported failed and certainly not persisted (since the night of
/// 2026-12-04): once the flush ended well every record handed over has its
/// report, and none was acknowledged or may have been written (at least
/// one report is asked for: records handed over and never reported on are
/// not taken as unwritten, however the flush ended).
fn none_written(queued: bool, flushed: bool, d: &PartitionDeliveries) -> bool {
    !queued || (flushed && d.acked == 0 && d.refused > 0 && d.refused == d.not_persisted)
}

/// Where a partition stands after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    /// Every selected record was acknowledged.
    Complete,
    /// Nothing is missing below this archived offset; restore from it.
    Resume(i64),
    /// As `Resume`, into a target that held records once, all gone now,
    /// and was sent none of this restore's records: `--resume` cannot read where it
    /// stands (no last record), so `--from` and `--append` restore it.
    AppendFrom(i64),
    /// A record failed below one that was acknowledged: the target lacks
    /// records, and no resume point can fix that.
    Gap { failed: i64, acknowledged: i64 },
}

/// Said in the `restore stopped` warnings (until 2026-12-07 Rust's own
/// `Resume(1760)`; an audit).
impl std::fmt::Display for Standing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Standing::Complete => f.write_str("complete"),
            Standing::Resume(o) => write!(f, "resumes at archived offset {o}"),
            Standing::AppendFrom(o) => {
                write!(
                    f,
                    "resumes at archived offset {o}, with --from and --append"
                )
            }
            Standing::Gap {
                failed,
                acknowledged,
            } => write!(
                f,
                "a gap: archived offset {failed} failed, below {acknowledged}, which was acknowledged"
            ),
        }
    }
}

fn standing(start: i64, finished: bool, d: &PartitionDeliveries) -> Standing {
    match (&d.first_failed, d.last_acked) {
        (Some(f), Some(last)) if last > f.offset => Standing::Gap {
            failed: f.offset,
            acknowledged: last,
        },
        (None, _) if finished => Standing::Complete,
        // After the last acknowledged record, failed or not: below the
        // first failure every record is acknowledged unless its report
        // never came (purged reports cut short at the flush's deadline),
        // and resuming at the failure would skip those (at worst they are
        // sent twice, as the advice for a timeout says).
        (_, last) => Standing::Resume(last.map_or(start, |o| o + 1)),
    }
}

/// `st`, except that a resume point with no archived record at or after it
/// within the selection (`to`, exclusive) is `Complete`: the stop came
/// right after the partition's last record, or a prune emptied it, and a
/// rerun from there would be refused as restoring nothing. A read that
/// fails keeps the resume point: the rerun reports the failure. The read
/// is a range read, which counts the partition's index first: a lost
/// index entry above the resume point fails it, rather than look like
/// nothing left (a stop would then end "whole" with records unsent).
fn left_to_restore(
    engine: &Engine,
    source: &TopicPartition,
    to: Option<i64>,
    st: Standing,
) -> Standing {
    let (Standing::Resume(from) | Standing::AppendFrom(from)) = st else {
        return st;
    };
    // Not read again after a read panicked (it poisoned the engine: sled
    // may panic again): records may be left.
    if engine.is_poisoned() {
        return st;
    }
    let end = to.unwrap_or(i64::MAX);
    let holds = match engine.read_range(source, from, to) {
        Ok(mut records) => match records.next() {
            Some(Ok(r)) => r.offset < end,
            Some(Err(_)) => true,
            None => false,
        },
        Err(_) => true,
    };
    if holds {
        st
    } else {
        Standing::Complete
    }
}

/// `read`, a read of the archive in the send loop, with a panic in it
/// (sled on damage to its own files that it does not handle) caught: the
/// engine is poisoned, as a command's read poisons it
/// (`cli::read_unpanicked`), and the restore stops as on damage it can
/// read, after what was sent is acknowledged, with exact resume points.
/// Until the night of 2026-12-04 the panic unwound out of the restore,
/// whose producer's drop then purged the records in flight unreported.
fn read_caught<T>(engine: &Engine, read: impl FnOnce() -> cairn_engine::Result<T>) -> Result<T> {
    crate::cli::read_unpanicked("restore", &engine.config().path, engine, "", || {
        read().map_err(Into::into)
    })
}

/// What to run next, for the error message: the partitions with a gap
/// first (no resume point fills one), then how to finish the others.
fn next_step(cfg: &RestoreConfig, standings: &[(&PartitionRestore, Standing)]) -> String {
    next_step_around(cfg, standings, false, true)
}

/// [`next_step`] for a restore that damage in archived partition
/// `damaged` stopped: a rerun of that partition stops at the damage again,
/// so it is left out of the others' advice, which names each partition
/// (a plain `--resume` would stop there again and never reach those after
/// it; until 2026-12-06 it was advised, found in review), and it is told
/// apart: its records past the damage, with `--from` and `--append`.
fn next_step_past_damage(
    cfg: &RestoreConfig,
    standings: &[(&PartitionRestore, Standing)],
    damaged: &TopicPartition,
) -> String {
    // A gap in it (a delivery failure met as well) stays among the
    // others: its advice (restore it again whole) is the one that holds.
    let others: Vec<(&PartitionRestore, Standing)> = standings
        .iter()
        .filter(|(p, st)| p.source != *damaged || matches!(st, Standing::Gap { .. }))
        .map(|(p, st)| (*p, st.clone()))
        .collect();
    let rest = next_step_around(cfg, &others, true, true);
    let part = format!(
        "--topic {} --partition {}",
        damaged.topic, damaged.partition
    );
    // Where the damaged partition stands: what a rerun once the damage is
    // repaired takes, as for any partition.
    let standing = standings
        .iter()
        .find(|(p, _)| p.source == *damaged)
        .map(|(_, st)| st);
    // A gap in it is restored again whole into an empty topic (the advice
    // above): the damage then stops that restore too, so it goes in two
    // parts there, never appended into the target with the gap.
    if matches!(standing, Some(Standing::Gap { .. })) {
        // Named for the empty topic, not the target with the gap; part 1
        // keeps the command's own --from, part 2 replaces it.
        return format!(
            "{rest}. The damage stays in {damaged} too: restoring it again stops there while it does (cairn verify says what is damaged, and names the damaged entry's offsets), so restore it into the empty topic in two parts, each the same command with {part} --rename {}=<the empty topic>, in place of its own --topic, --partition and any --rename, without --resume or --append: first with --to the damaged entry's first offset, then with --from an offset past the damaged entry (in place of its own --from) and --append",
            damaged.topic,
        );
    }
    let rename = rename_of(cfg, &damaged.topic);
    let in_place = in_place_of(cfg, &["--topic", "--partition", "--from"]);
    let once_repaired = match standing {
        // Its own --from kept: --resume starts an empty target there.
        Some(Standing::Resume(_)) if cfg.offset_header.is_some() && !cfg.append => format!(
            "once it is repaired, the same command with --resume and {part}{rename}, in place of its own {}; ",
            in_place_of(cfg, &["--topic", "--partition"])
        ),
        Some(Standing::Resume(o) | Standing::AppendFrom(o)) => format!(
            "once it is repaired, the same command with {part} --from {o}{rename} and --append, in place of its own {in_place}, without --resume; "
        ),
        _ => String::new(),
    };
    format!(
        "{rest}. The damage stays in {damaged}: a rerun of it stops there again while it does (cairn verify says what is damaged); {once_repaired}to skip the damaged records instead, the same command with {part} --from an offset past the damaged entry (cairn verify names its offsets){rename} and --append, in place of its own {in_place}, without --resume"
    )
}

/// ` --rename T=TO` for archived topic `topic` when the command renames
/// it, else nothing: only this topic's rename, since a rerun for one of
/// its partitions restores only this topic, and a rename of another
/// would be refused.
fn rename_of(cfg: &RestoreConfig, topic: &str) -> String {
    cfg.rename
        .get(topic)
        .map_or(String::new(), |to| format!(" --rename {topic}={to}"))
}

/// The flags a named rerun stands in for, as "A, B and C", with every
/// `--rename` among them when the command has any.
fn in_place_of(cfg: &RestoreConfig, flags: &[&str]) -> String {
    let mut all = flags.to_vec();
    if !cfg.rename.is_empty() {
        all.push("every --rename");
    }
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => all.concat(),
    }
}

/// [`next_step`]; `damage` when a partition was left out for damage, so
/// that every partition left is named (see [`next_step_past_damage`]);
/// `in_doubt` unless every record sent was acknowledged (a stop by a
/// signal, its flush whole): then no record from a resume point on can be
/// in Kafka already, and none is said to be (until 2026-12-06 it was;
/// found by an audit).
fn next_step_around(
    cfg: &RestoreConfig,
    standings: &[(&PartitionRestore, Standing)],
    damage: bool,
    in_doubt: bool,
) -> String {
    let gaps: Vec<String> = standings
        .iter()
        .filter_map(|(p, st)| match st {
            Standing::Gap {
                failed,
                acknowledged,
            } => Some(format!(
                "{} lacks archived offset {failed} and maybe more below {acknowledged}",
                p.target
            )),
            _ => None,
        })
        .collect();
    let rest = finish_the_rest(cfg, standings, !gaps.is_empty(), damage, in_doubt);
    if gaps.is_empty() {
        return rest.unwrap_or_else(|| {
            if damage {
                "every other partition is restored whole".into()
            } else {
                "nothing is left to restore".into()
            }
        });
    }
    let gaps = format!(
        "records above a failed one were acknowledged ({}): restore those partitions again into an empty topic; no resume point would fill the gap",
        gaps.join("; ")
    );
    match rest {
        Some(rest) => format!("{gaps}. For the other partitions: {rest}"),
        None => gaps,
    }
}

/// How to finish the partitions that stopped at a resume point, if any
/// did. With a gap elsewhere, `--resume` must be limited to them: it would
/// continue a gapped partition past its missing records.
fn finish_the_rest(
    cfg: &RestoreConfig,
    standings: &[(&PartitionRestore, Standing)],
    gaps: bool,
    damage: bool,
    in_doubt: bool,
) -> Option<String> {
    // The partitions left, with their resume points: those `--resume`
    // can continue, or those it cannot (`AppendFrom`), or both.
    let left = |resumable: bool, appendable: bool| -> Vec<(&PartitionRestore, i64)> {
        standings
            .iter()
            .filter_map(|(p, st)| match *st {
                Standing::Resume(o) if resumable => Some((*p, o)),
                Standing::AppendFrom(o) if appendable => Some((*p, o)),
                _ => None,
            })
            .collect()
    };
    let named = |left: &[(&PartitionRestore, i64)], with_from: bool| -> String {
        let each: Vec<String> = left
            .iter()
            .map(|(p, o)| {
                let from = if with_from {
                    format!(" --from {o}")
                } else {
                    String::new()
                };
                format!(
                    "--topic {} --partition {}{from}{}",
                    p.source.topic,
                    p.source.partition,
                    rename_of(cfg, &p.source.topic)
                )
            })
            .collect();
        each.join(", ")
    };
    let in_place_of = |flags: &[&str]| in_place_of(cfg, flags);
    let append = |left: &[(&PartitionRestore, i64)]| {
        format!(
            "rerun the same command once for each of [{}], with --append, in place of its own {}",
            named(left, true),
            in_place_of(&["--topic", "--partition", "--from"])
        )
    };
    if cfg.offset_header.is_some() {
        let (to_resume, to_append) = (left(true, false), left(false, true));
        // An --append run's command has --append and --from, which
        // --resume refuses: it takes their place.
        let replaced: &[&str] = if cfg.append {
            &["--topic", "--partition", "--append", "--from"]
        } else {
            &["--topic", "--partition"]
        };
        // After an --append run, --resume is always limited to the
        // partitions it sent records to, each with its resume point as
        // --from: a plain one would take the others again too (those it
        // had nothing left to send, whose targets' last records are
        // another producer's, and are refused; or which are empty, and
        // would get the archive's records from the first, outside the
        // command's --from). Until 2026-12-05 it was advised plain, with
        // --from dropped.
        let resume = if to_resume.is_empty() {
            None
        } else if gaps || damage || !to_append.is_empty() || cfg.append {
            Some(format!(
                "rerun the same command with --resume once for each of [{}], in place of its own {} (a plain --resume would {})",
                named(&to_resume, cfg.append),
                in_place_of(replaced),
                if damage {
                    "stop at the damage again, and never reach the partitions after it"
                } else if gaps {
                    "continue the gapped partitions too"
                } else if !to_append.is_empty() {
                    "be refused by the partitions named next"
                } else {
                    "take again the partitions this --append run had nothing left to send to: refused where a target's last record is another producer's, and from the archive's first record, outside --from, where a target is empty"
                }
            ))
        } else {
            Some("rerun the same command with --resume: it continues each partition after the last record found there".into())
        };
        let appended = (!to_append.is_empty()).then(|| {
            let why = if cfg.append {
                "this restore sent them none of its records, so their last records are another producer's (or none), and --resume cannot read where they stand"
            } else {
                "their targets held records that are all gone, and were sent none of this restore's records, so --resume cannot read where they stand"
            };
            format!("{}: {why}", append(&to_append))
        });
        return match (resume, appended) {
            (Some(r), Some(a)) => Some(format!("{r}; and {a}")),
            (r, a) => r.or(a),
        };
    }
    let left = left(true, true);
    if left.is_empty() {
        return None;
    }
    if !in_doubt {
        return Some(append(&left));
    }
    Some(format!(
        "{}; records that timed out may be in Kafka already, so records from each resume point on that were in flight may arrive twice{}",
        append(&left),
        if cfg.offset_header.is_some() {
            ""
        } else {
            " (restoring with --offset-header makes --resume exact)"
        }
    ))
}

fn producer(cfg: &RestoreConfig) -> Result<BaseProducer<Deliveries>> {
    producer_config(cfg)
        .create_with_context(Deliveries::default())
        .map_err(ConnectorError::client_settings("producer settings"))
}

fn producer_config(cfg: &RestoreConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        // Ordered, retried without duplicates, acknowledged by all in-sync
        // replicas (idempotence implies acks=all); and a batch that fails
        // for good stops the producer instead of leaving a gap.
        .set("enable.idempotence", "true")
        .set("enable.gapless.guarantee", "true")
        // Never create a topic by producing to it.
        .set("allow.auto.create.topics", "false")
        // Above the archive's own record limit (16 MiB at most) with the
        // wire overhead; the brokers' and the topic's limits still apply.
        .set("message.max.bytes", (32 << 20).to_string());
    // Unless -X gives it, under either name.
    if !crate::librdkafka::given_any(&cfg.kafka, &["linger.ms", "queue.buffering.max.ms"]) {
        c.set("linger.ms", "5");
    }
    // `group.id` names the `--resume` reader's group; a producer has none
    // (librdkafka would warn that it ignores it).
    crate::librdkafka::set_kafka(&mut c, &cfg.kafka, &["group.id"]);
    c
}

/// What [`preflight`] found of the target partitions.
struct Preflight {
    /// The archived offset each target partition starts at.
    starts: BTreeMap<TopicPartition, i64>,
    /// Each target partition's high watermark as checked: where this
    /// restore's first record must land if nothing else is written to it.
    highs: BTreeMap<TopicPartition, i64>,
    /// Targets that held records once, all gone now (taken as empty).
    emptied: BTreeSet<TopicPartition>,
    /// Target partitions of topics this archive archives whose copies it
    /// passes over, with where Kafka's log and the archive's ended.
    pass_over: BTreeMap<TopicPartition, i64>,
}

/// The cluster's metadata, waited for up to the connect timeout.
fn metadata(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    stop: &dyn Fn() -> bool,
) -> Result<rdkafka::metadata::Metadata> {
    let timeout = Duration::from_millis(cfg.connect_timeout_ms);
    // Its errors (a refused connection) said as they come, not after the
    // whole wait: nothing is produced yet, so only they come on its queue.
    let md = crate::librdkafka::serving_queue(
        || producer.poll(Duration::from_millis(50)),
        || crate::librdkafka::cluster_metadata(producer.client(), &cfg.brokers, timeout, stop),
    );
    md.map_err(|e| {
        // Their error events, served now, name the cause (as `run`'s
        // does, since the night of 2026-12-04).
        drain_reports(producer);
        crate::librdkafka::with_cause(e, &producer.context().last_cause)
    })
}

/// `topic` as Kafka's metadata lists it; an error for one it lacks
/// (`missing` says what to do), cannot serve yet, or lists with an error.
fn target_topic<'m>(
    md: &'m rdkafka::metadata::Metadata,
    topic: &str,
    cfg: &RestoreConfig,
    missing: impl FnOnce() -> String,
) -> Result<&'m rdkafka::metadata::MetadataTopic> {
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Err(ConnectorError::UnknownTopic {
            topic: topic.to_owned(),
            brokers: cfg.brokers.clone(),
            next_step: missing(),
        });
    };
    if let Some(err) = t.error() {
        // Kafka lists a topic it cannot serve yet (being created, no
        // leader) with an error of its own: said as `run` says it.
        if crate::librdkafka::topic_not_ready(err) {
            return Err(ConnectorError::TopicUnavailable {
                topic: topic.to_owned(),
                named_by: " (the restore's target)".to_owned(),
                brokers: cfg.brokers.clone(),
                why: RDKafkaErrorCode::from(err).to_string(),
            });
        }
        return Err(ConnectorError::KafkaAt {
            op: "read the metadata",
            at: format!("target topic {topic}"),
            source: KafkaError::MetadataFetch(err.into()),
        });
    }
    Ok(t)
}

/// Check that the brokers answer and that every target topic the flags
/// name (`--rename`'s targets, and `--topic`'s through them) is there,
/// before the archive is opened (since 2026-12-04): the open may recover
/// it and upgrade its format (which older builds then refuse), none of
/// which a mistyped broker or topic should set off. The full check, with
/// the partitions the archive needs, follows the open (`preflight`).
pub fn check_kafka(cfg: &RestoreConfig, stop: &dyn Fn() -> bool) -> Result<()> {
    let t0 = std::time::Instant::now();
    let producer = producer(cfg)?;
    tracing::info!(brokers = %cfg.brokers, connect_timeout_ms = cfg.connect_timeout_ms, "waiting for Kafka to answer, before the archive is opened");
    let md = metadata(&producer, cfg, stop)?;
    // The targets of what is selected: with `--topic`, each one through
    // its rename; without, every rename's (a rename of a topic not
    // selected, or of one the archive lacks, is the plan's to refuse,
    // with its own message).
    let named: BTreeSet<&str> = if cfg.select.topics.is_empty() {
        cfg.rename.values().map(String::as_str).collect()
    } else {
        cfg.select
            .topics
            .iter()
            .map(|t| cfg.rename.get(t).map_or(t.as_str(), String::as_str))
            .collect()
    };
    for topic in named {
        target_topic(&md, topic, cfg, || {
            "restore never creates a topic: check the name given to --topic or --rename (the archive is not opened yet, so a name it does not hold is refused here too), or, if the archive holds that topic, create it (with at least as many partitions as the archive holds of the topic restored into it), then run the restore again".into()
        })?;
    }
    crate::librdkafka::stopped_while_checking(stop(), &cfg.brokers, t0)
}

/// Check the brokers answer, and every target partition exists and may be
/// restored into, before anything is produced.
fn preflight(
    engine: &Engine,
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    plan: &[(TopicPartition, TopicPartition)],
    stop: &dyn Fn() -> bool,
) -> Result<Preflight> {
    let md = metadata(producer, cfg, stop)?;
    let timeout = Duration::from_millis(cfg.connect_timeout_ms);
    // In i64: an archive may hold partition i32::MAX (the engine's API
    // takes any partition), whose count does not fit an i32.
    // Under `--resume`, the chosen partitions that hold no record (`plan`
    // leaves them out otherwise): one with no target partition, or whose
    // target's last record is not a restore's, has nothing to resume, and
    // is passed over (a first run into such a target is accepted, and its
    // `--resume` must go on: seen in review, 2026-12-06); one whose
    // target's last record is a restore's is judged by it, and refused if
    // a prune emptied it under that restore (`check_last`).
    // (by target, with the source's next offset)
    let empty: BTreeMap<&TopicPartition, i64> = plan
        .iter()
        .filter_map(|(source, target)| match engine.partition(source) {
            Some(p) if p.record_count > 0 => None,
            p => Some((target, p.map_or(0, |p| p.next_offset))),
        })
        .collect();
    let mut needed: BTreeMap<&str, i64> = BTreeMap::new();
    for (_, target) in plan.iter().filter(|(_, t)| !empty.contains_key(t)) {
        let n = needed.entry(&target.topic).or_default();
        *n = (*n).max(i64::from(target.partition) + 1);
    }
    for (topic, needed) in needed {
        let t = target_topic(&md, topic, cfg, || {
            format!(
                "restore never creates a topic: create it with at least {} (or restore into another with --rename), then run the restore again",
                crate::count::counted(needed as u64, "partition")
            )
        })?;
        let partitions = t.partitions().len() as i64;
        if partitions < needed {
            return Err(ConnectorError::TooFewPartitions {
                topic: topic.to_owned(),
                partitions,
                needed,
            });
        }
    }
    let here = archived_here(engine, producer, cfg, plan, &empty, timeout)?;
    let mut starts = BTreeMap::new();
    let mut emptied = BTreeSet::new();
    let mut highs = BTreeMap::new();
    // Partitions whose last record says where an earlier restore stopped:
    // read together (one at a time, each waited out the reader's previous
    // fetch long-poll: 15.7 s for 32 partitions).
    // (source, target, the target's low and high watermarks)
    let mut to_read: Vec<(&TopicPartition, &TopicPartition, i64, i64)> = Vec::new();
    // Every target that holds records, to name them all in one refusal.
    let mut occupied: Vec<(&TopicPartition, i64, i64)> = Vec::new();
    fail::fail_point!(FAILPOINT_WATERMARKS);
    let missing = |t: &TopicPartition| {
        md.topics()
            .iter()
            .find(|m| m.name() == t.topic)
            .is_none_or(|m| i64::from(t.partition) >= m.partitions().len() as i64)
    };
    let targets: BTreeSet<TopicPartition> = plan
        .iter()
        .map(|(_, t)| t)
        .filter(|t| !(empty.contains_key(t) && missing(t)))
        .cloned()
        .collect();
    let watermarks = target_watermarks(producer, cfg, targets, timeout, stop)?;
    for (source, target) in plan {
        let Some(&(low, high)) = watermarks.get(target) else {
            // An empty source with no target partition: nothing to send.
            starts.insert(target.clone(), cfg.select.from);
            continue;
        };
        highs.insert(target.clone(), high);
        if cfg.append || high == 0 {
            starts.insert(target.clone(), cfg.select.from);
        } else if cfg.resume {
            // All gone, and the archive has nothing of the selection for
            // it: nothing to resume, so nothing to read (an earlier run
            // counted it complete and advised a plain --resume, which this
            // refused until the night of 2026-12-04).
            if high <= low
                && left_to_restore(
                    engine,
                    source,
                    cfg.select.to,
                    Standing::Resume(cfg.select.from),
                ) == Standing::Complete
            {
                starts.insert(target.clone(), cfg.select.from);
                emptied.insert(target.clone());
                continue;
            }
            if high <= low {
                return Err(ConnectorError::RestoreRefused(format!(
                    "--resume: {target} held records (up to offset {high}) that are all gone (retention or deletion), so where an earlier restore stopped cannot be read; use --partition, --from and --append"
                )));
            }
            to_read.push((source, target, low, high));
        } else if high <= low {
            // Held records once, all gone now: nothing to interleave with.
            starts.insert(target.clone(), cfg.select.from);
            emptied.insert(target.clone());
        } else {
            occupied.push((target, low, high));
        }
    }
    if let Some((&(target, low, high), others)) = occupied.split_first() {
        return Err(ConnectorError::TargetNotEmpty {
            target: target.clone(),
            low,
            high,
            others: if others.is_empty() {
                String::new()
            } else {
                let others = others
                    .iter()
                    .map(|(t, low, high)| format!("{t} (offsets {low}..{high})"));
                format!(", and so do {}", crate::selection::first_few(others))
            },
        });
    }
    if !to_read.is_empty() {
        let reader = resume_reader(cfg)?;
        let at = |first: bool| -> Vec<(TopicPartition, i64)> {
            to_read
                .iter()
                .map(|(_, target, low, high)| {
                    ((*target).clone(), if first { *low } else { high - 1 })
                })
                .collect()
        };
        // The first records first: a record the reader fetched before it
        // was moved on is below the last one, which the second read skips.
        let mut first = target_records(&reader, &at(true), "first", cfg, timeout, stop)?;
        let mut last = target_records(&reader, &at(false), "last", cfg, timeout, stop)?;
        // Every partition's refusal, said at once: one at a time, each fix
        // met the next refusal (until 2026-12-07; found by an audit).
        let mut refused: Vec<String> = Vec::new();
        for (source, target, low, high) in to_read {
            let record = last.remove(target).expect("read above");
            // Another producer's record, or another archive's restore's
            // (an offset this partition never reached): nothing of it to
            // resume. One below its next offset is this archive's, judged.
            let skipped = empty
                .get(target)
                .is_some_and(|&next| record.archived.is_none_or(|a| a >= next));
            if skipped {
                starts.insert(target.clone(), cfg.select.from);
                continue;
            }
            let first = first.remove(target).expect("read above");
            let checked = check_last(engine, source, target, &record, cfg).and_then(|archived| {
                check_count(engine, cfg, source, target, (low, high), &first, archived)
                    .map(|()| archived)
            });
            let archived = match checked {
                Ok(archived) => archived,
                Err(ConnectorError::RestoreRefused(why)) => {
                    refused.push(why);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let next = archived.checked_add(1).ok_or_else(|| {
                ConnectorError::RestoreRefused(format!(
                    "--resume: the last record of {target} names archived offset {archived}, past any archive"
                ))
            })?;
            if cfg.select.from > next {
                tracing::warn!(%target, resume_at = next, from = cfg.select.from, "--from skips records after where the earlier restore stopped");
            }
            starts.insert(target.clone(), cfg.select.from.max(next));
        }
        match refused.len() {
            0 => {}
            1 => return Err(ConnectorError::RestoreRefused(refused.remove(0))),
            n => {
                return Err(ConnectorError::RestoreRefused(format!(
                    "{n} partitions refused: {}",
                    refused
                        .iter()
                        .enumerate()
                        .map(|(i, why)| format!("({}) {why}", i + 1))
                        .collect::<Vec<_>>()
                        .join("; ")
                )))
            }
        }
    }
    let pass_over = pass_over(engine, cfg, plan, &empty, &here, &highs, &starts)?;
    Ok(Preflight {
        starts,
        emptied,
        highs,
        pass_over,
    })
}

/// Whether `source` is restored into its own topic: only such copies are
/// ones the archive holds already (under `--rename`, another topic's
/// records become new records of the target, which a run archives as its).
fn into_itself(source: &TopicPartition, target: &TopicPartition) -> bool {
    source.topic == target.topic
}

/// The target topics this archive archives that records of their own are
/// restored into: Kafka's topic id of the target is the one the archive
/// recorded under that name. A run of the archive would take the copies
/// for new records and archive each again, beside its original (found in
/// an audit, 2026-12-06): the restore passes over them in the archive
/// instead ([`pass_over`]). A topic of the same name with another id
/// (another cluster's, or one deleted and created again), or with none
/// (brokers before 2.8, which no id was recorded from), is another topic.
/// Where the two cannot be compared (Kafka's id could not be read, or the
/// archive's record of it is damaged), the restore is refused unless
/// `--into-archived-topic`. Only topics records are sent to are asked.
fn archived_here(
    engine: &Engine,
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    plan: &[(TopicPartition, TopicPartition)],
    empty: &BTreeMap<&TopicPartition, i64>,
    timeout: Duration,
) -> Result<BTreeSet<String>> {
    let mut recorded = BTreeMap::new();
    let mut unknown = Vec::new();
    let mut unbound = BTreeSet::new();
    let sending: BTreeSet<&String> = plan
        .iter()
        .filter(|(s, t)| into_itself(s, t) && !empty.contains_key(t))
        .map(|(_, t)| &t.topic)
        .collect();
    for topic in sending {
        // The target's own binding alone: a damaged one of another topic
        // does not stand in the way of a restore.
        match engine.topic_id(topic) {
            Ok(Some(id)) => {
                recorded.insert(topic.clone(), id);
            }
            Ok(None) => {
                unbound.insert(topic.clone());
            }
            Err(e) => unknown.push(format!(
                "{topic} (the archive's record of its id is unreadable: {e})"
            )),
        }
    }
    if !unbound.is_empty() {
        tracing::warn!(topics = %crate::selection::first_few(unbound.iter().cloned()), "the archive recorded no Kafka topic id for these target topics (its runs were by builds before format 5, or against brokers before 2.8), so whether they are the topics it archives cannot be told: if they are, a run of this archive will archive the restored records again");
    }
    let topics: Vec<String> = recorded.keys().cloned().collect();
    let mut here = BTreeSet::new();
    if !topics.is_empty() {
        for (topic, kafka) in crate::topic_ids::describe(producer.client(), &topics, timeout) {
            match kafka {
                KafkaTopicId::Id(id) if id == recorded[&topic] => {
                    here.insert(topic);
                }
                KafkaTopicId::Id(_) => {}
                KafkaTopicId::NoId => {
                    tracing::warn!(%topic, "Kafka gives the target topic no id (brokers before 2.8, or a client kept to old requests), and the archive recorded one: taken for another cluster's topic, its copies not passed over (if it is the archive's own, a run of it will archive them again)");
                }
                KafkaTopicId::Unread(why) => unknown.push(format!(
                    "{topic} (Kafka's topic id could not be read: {why})"
                )),
            }
        }
    }
    if !unknown.is_empty() {
        let topics = crate::selection::first_few(unknown.into_iter());
        if !cfg.into_archived_topic {
            return Err(ConnectorError::RestoreRefused(format!(
                "whether these target topics are the ones this archive archives cannot be told: {topics}. Restored into its own topic, the restore must pass over the copies in the archive, or a `cairn run` of it would archive each again beside its original. Run again once Kafka answers (a damaged record of an id is written over by a `cairn run` with --rebind-topic T); or, if they are other topics (another cluster's), or to have the copies archived again, give --into-archived-topic; nothing was sent"
            )));
        }
        tracing::warn!(topics = %topics, "whether these target topics are the ones this archive archives cannot be told (--into-archived-topic): if they are, a run of this archive will archive the restored records again");
    }
    Ok(here)
}

/// The target partitions of topics this archive archives (`here`),
/// restored into with records of their own, whose copies the restore can
/// pass over in the archive, with where Kafka's log of each ends: the
/// archive's next offset there is that end, so the copies land right after
/// what it holds (a topic emptied by retention or `kafka-delete-records`;
/// with `--append`, one it has archived to the end; a `--resume` of such a
/// restore, which passed over what it delivered). Anywhere else the copies
/// would not follow what it holds: refused unless `--into-archived-topic`.
fn pass_over(
    engine: &Engine,
    cfg: &RestoreConfig,
    plan: &[(TopicPartition, TopicPartition)],
    empty: &BTreeMap<&TopicPartition, i64>,
    here: &BTreeSet<String>,
    highs: &BTreeMap<TopicPartition, i64>,
    starts: &BTreeMap<TopicPartition, i64>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let mut at = BTreeMap::new();
    let mut apart = Vec::new();
    for (source, target) in plan {
        if !into_itself(source, target)
            || !here.contains(&target.topic)
            || empty.contains_key(target)
        {
            continue;
        }
        // Nothing left to send to it (past `--to`, or a `--resume` that
        // finished it): no copies, nothing to pass over or refuse.
        let start = starts.get(target).copied().unwrap_or(cfg.select.from);
        if left_to_restore(engine, source, cfg.select.to, Standing::Resume(start))
            == Standing::Complete
        {
            continue;
        }
        let Some(&high) = highs.get(target) else {
            continue;
        };
        match engine.durable_offset(target) {
            Some(next) if next == high => {
                at.insert(target.clone(), high);
            }
            Some(next) if next < high => apart.push(format!(
                "{target} (the archive's log ends at {next}, Kafka's at {high})"
            )),
            Some(next) => apart.push(format!(
                "{target} (the archive's log ends at {next}, past Kafka's at {high}: Kafka lost records the archive holds, so only another topic will do)"
            )),
            // Not met: a source with records is the archive's partition
            // itself, which then has a summary. Said rather than unwrapped.
            None => apart.push(format!(
                "{target} (the archive holds nothing of it; Kafka's log ends at {high})"
            )),
        }
    }
    if !apart.is_empty() {
        let parts = crate::selection::first_few(apart.into_iter());
        if !cfg.into_archived_topic {
            return Err(ConnectorError::RestoreRefused(format!(
                "these target partitions are the archive's own topics' (the same Kafka topic id), and its log of them does not end where Kafka's does: {parts}. The copies would not follow what the archive holds, so it cannot pass over them, and a `cairn run` of it would archive each again beside its original. Where Kafka's log ends past the archive's, past it lie records the archive has not archived yet, or copies an earlier restore wrote and did not pass over (it was killed, or wrote them without their acknowledgement). Where they are the topic's own, run the archive until it has archived them (with the topic's producers stopped), then restore; copies an earlier restore left there cannot be told apart for certain without reading them all (a record of another producer's passed over would be lost to the archive), so they are not passed over. Or restore into another topic (--rename, into one created for it), or give --into-archived-topic to restore all the same, the copies then archived again; nothing was sent"
            )));
        }
        tracing::warn!(partitions = %parts, "restoring into the archive's own topics where it cannot pass over the copies (--into-archived-topic): a run of this archive will archive them again");
    }
    Ok(at)
}

/// Failpoint: `return(TOPIC)` leaves the copies delivered into `TOPIC`
/// not passed over, as a restore killed after its last delivery would.
#[doc(hidden)]
pub const FAILPOINT_PASS_OVER_LOST: &str = "restore::pass_over_lost";

/// Pass over, in the archive, the copies a restore delivered into its own
/// topics (`at`: each target partition, with where Kafka's log and the
/// archive's ended), so that a run of it does not archive them again: its
/// next offset moves past them, as past offsets that held no record to
/// archive, and is fsynced. Passed over: `acked` records acknowledged at
/// offsets from where the logs ended to `acked` − 1 past it, none without
/// an offset. The producer is idempotent (its settings are cairn's), so
/// each record is acknowledged once, at an offset of its own: that many
/// filling that many offsets leaves none for another producer's record, a
/// transaction marker, or a record written before the first copy (any of
/// which moves the span). A failed or stopped restore passes over its
/// acknowledged records the same way, so a `--resume` finds the logs
/// ending together again. Otherwise (records among the copies, or copies
/// Kafka reported no offset for) nothing is passed over, said: a run
/// archives them. (An unclean leader election that drops acknowledged
/// copies, whose offsets other records then take, is outside what the
/// brokers promised and this relies on.)
fn passed_over(
    engine: &Engine,
    at: &BTreeMap<TopicPartition, i64>,
    state: &DeliveryState,
) -> (Vec<PassedOver>, Option<ConnectorError>) {
    let mut done = Vec::new();
    for (target, &high) in at {
        let Some(d) = state.partitions.get(target).filter(|d| d.acked > 0) else {
            continue;
        };
        if fail::eval(FAILPOINT_PASS_OVER_LOST, |t| {
            t.as_deref() == Some(&target.topic)
        }) == Some(true)
        {
            continue;
        }
        let end = high.saturating_add(i64::try_from(d.acked).unwrap_or(i64::MAX));
        if d.unplaced == 0 && d.target_span == Some((high, end - 1)) {
            done.push(PassedOver {
                partition: target.clone(),
                from: high,
                to: end,
            });
        } else {
            tracing::warn!(%target, acknowledged = d.acked, span = ?d.target_span, from = high, "the restored copies in this partition of the archive's own topic are not where they alone would be (other records among them, or copies Kafka gave no offset for): not passed over, so a run of the archive will archive them again, and the next restore into this partition is refused without --into-archived-topic");
        }
    }
    if done.is_empty() {
        return (done, None);
    }
    let to: BTreeMap<TopicPartition, i64> =
        done.iter().map(|p| (p.partition.clone(), p.to)).collect();
    match engine.advance_partitions(&to).and_then(|()| engine.sync()) {
        Ok(()) => {
            for p in &done {
                tracing::info!(partition = %p.partition, to = p.to, "the archive passes over the restored copies");
            }
            (done, None)
        }
        Err(e) => {
            tracing::error!(error = %e, "the archive could not record that it passes over the restored copies: a run of it would archive them again");
            (Vec::new(), Some(e.into()))
        }
    }
}

/// The watermarks (log start, log end) of every target partition, read
/// together: two `ListOffsets` requests per leader (per 1,000 partitions),
/// in a wait that a partition Kafka did not answer for yet keeps going, and
/// that `stop` ends. A partition whose read failed otherwise (librdkafka
/// fails a whole request for one partition's error, and the read asks its
/// halves again down to that partition) is asked again alone, within a
/// `timeout` of its own. Asked one partition at a time
/// in turn until 2026-12-06, 9,808 targets behind a 5 ms round trip took
/// 52 s before the first record was produced; 0.4 s now.
fn target_watermarks(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    targets: BTreeSet<TopicPartition>,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<BTreeMap<TopicPartition, (i64, i64)>> {
    let failed = |target: &TopicPartition| {
        let target = target.clone();
        move |failed| match failed {
            Waited::Stopped(e) => e,
            Waited::Failed { error, .. } => ConnectorError::kafka_at(
                "fetch the watermarks",
                format!("target partition {target}"),
            )(error),
        }
    };
    let mut pending: Vec<TopicPartition> = targets.into_iter().collect();
    let mut got = BTreeMap::new();
    let mut alone = Vec::new();
    let first = pending.first().cloned();
    let asked_for = match &pending[..] {
        [one] => format!("the watermarks of target partition {one}"),
        all => format!(
            "the watermarks of target partitions {}",
            crate::selection::first_few(all.iter().map(ToString::to_string))
        ),
    };
    match watermark_reader(cfg) {
        // A setting a producer takes and a consumer refuses (a fetch size
        // below `fetch.max.bytes`): one at a time, as before.
        Err(error) => {
            tracing::debug!(%error, "no consumer for the targets' watermarks: reading them one at a time");
            alone = std::mem::take(&mut pending);
        }
        Ok(reader) => {
            sliced_wait(&cfg.brokers, &asked_for, timeout, stop, |wait| {
                let mut again = Vec::new();
                let mut waiting_for = None;
                // All the slice's requests within the slice, so that a stop
                // ends the wait within one: what they answered stays read
                // (1,000 partitions at a time, start and end, so a slice
                // that fits two requests makes progress).
                let slice_end = Instant::now() + wait;
                for (tp, read) in read_bounds(&reader, &pending, wait, slice_end) {
                    match read {
                        Ok(w) => {
                            got.insert(tp, w);
                        }
                        Err(e) if worth_waiting_for(&e) => {
                            waiting_for.get_or_insert(e);
                            again.push(tp);
                        }
                        Err(_) => alone.push(tp),
                    }
                }
                pending = again;
                waiting_for.map_or(Ok(()), Err)
            })
            .map_err(|e| failed(pending.first().or(first.as_ref()).expect("a target"))(e))?;
        }
    }
    for target in alone {
        // Each within a timeout of its own, as every target was before
        // 2026-12-06: a share of one timeout would fail a restore that
        // took long (many partitions in error), not one that failed.
        let asked_for = format!("the watermarks of target partition {target}");
        let w = sliced_wait(&cfg.brokers, &asked_for, timeout, stop, |wait| {
            producer
                .client()
                .fetch_watermarks(&target.topic, target.partition, wait)
        })
        .map_err(failed(&target))?;
        got.insert(target, w);
    }
    Ok(got)
}

/// The client [`target_watermarks`] asks with: a consumer (librdkafka
/// answers `offsets_for_times` to consumers only) with the brokers and `-X`
/// settings of the producer (security ones above all), in no group unless
/// `-X group.id` names one (a consumer in a group looks for its
/// coordinator, which a cluster may refuse cairn).
fn watermark_reader(cfg: &RestoreConfig) -> Result<BaseConsumer<ReaderContext>> {
    let mut c = ClientConfig::new();
    crate::librdkafka::set_kafka(&mut c, &cfg.kafka, &[]);
    c.set("bootstrap.servers", &cfg.brokers)
        .create_with_context(ReaderContext::default())
        .map_err(ConnectorError::client_settings(
            "the client reading the targets' watermarks",
        ))
}

/// The consumer `--resume` reads target partitions with: the brokers and
/// `-X` settings of the producer (security ones above all), and never moves
/// on its own past what it was told to read.
fn resume_reader(cfg: &RestoreConfig) -> Result<BaseConsumer<ReaderContext>> {
    reader_config(cfg)
        .create_with_context(ReaderContext::default())
        .map_err(ConnectorError::client_settings(
            "reader settings for --resume",
        ))
}

/// The settings of `--resume`'s reader: `-X` (the producer's), and what
/// the reader sets itself, which [`RestoreConfig::validate`] refuses from
/// `-X` under any other name.
fn reader_config(cfg: &RestoreConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    crate::librdkafka::set_kafka(&mut c, &cfg.kafka, &[]);
    // librdkafka assigns only within a group; this one never commits or
    // subscribes. `-X group.id` names it (a secured cluster may allow only
    // some groups), else cairn does.
    if !cfg.kafka.contains_key("group.id") {
        c.set("group.id", "cairn-restore-resume");
    }
    c.set("bootstrap.servers", &cfg.brokers)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error");
    c
}

/// What `--resume`'s reader sets, with the value it sets: `-X` may give
/// the same value, under any name, but no other (under another name than
/// the reader's, which of the two librdkafka took would change from run
/// to run).
const READER_SETS: [(&str, Option<&str>); 3] = [
    ("enable.auto.commit", Some("false")),
    ("auto.commit.enable", Some("false")),
    ("auto.offset.reset", Some("error")),
];

/// A record of a target partition (its first or its last), as `--resume`
/// needs it.
struct TargetRecord {
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    /// The archived offset in its offset header, if it has one.
    archived: Option<i64>,
}

/// Read the record at each wanted offset (each partition's first, or its
/// last: `which`, for messages), all partitions at once, until `timeout`
/// or `stop`.
fn target_records(
    consumer: &BaseConsumer<ReaderContext>,
    wanted: &[(TopicPartition, i64)],
    which: &str,
    cfg: &RestoreConfig,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<BTreeMap<TopicPartition, TargetRecord>> {
    let name = cfg.offset_header.as_deref().expect("validated");
    let mut tpl = TopicPartitionList::new();
    for (tp, offset) in wanted {
        tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*offset))
            .map_err(ConnectorError::kafka_at(
                "position a reader for --resume",
                format!("target partition {tp} at {offset}"),
            ))?;
    }
    let at: Vec<String> = wanted.iter().map(|(tp, o)| format!("{tp}@{o}")).collect();
    consumer.assign(&tpl).map_err(ConnectorError::kafka_at(
        "position a reader for --resume",
        format!("target partitions {}", at.join(", ")),
    ))?;
    let offsets: BTreeMap<&TopicPartition, i64> = wanted.iter().map(|(tp, o)| (tp, *o)).collect();
    let mut found: BTreeMap<TopicPartition, TargetRecord> = BTreeMap::new();
    let t0 = Instant::now();
    let deadline = t0 + timeout;
    let mut last_error = None;
    while found.len() < wanted.len() {
        if stop() {
            return Err(ConnectorError::StoppedWaiting {
                brokers: cfg.brokers.clone(),
                asked_for: format!("the {which} records of {} for --resume", at.join(", ")),
                waited_ms: t0.elapsed().as_millis() as u64,
            });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let missing: Vec<String> = wanted
                .iter()
                .filter(|(tp, _)| !found.contains_key(tp))
                .map(|(tp, o)| format!("{tp}@{o}"))
                .collect();
            return Err(ConnectorError::RestoreRefused(format!(
                "--resume: could not read the {which} record of {} within {} ms{}; if Kafka did not answer, run the command again once it does; if the {which} offset holds no record (a transaction marker, or compacted away), where an earlier restore stopped cannot be read: use --partition, --from and --append",
                missing.join(", "),
                timeout.as_millis(),
                last_error.map_or(String::new(), |e: KafkaError| format!(" (last error: {e})"))
            )));
        }
        match consumer.poll(left.min(Duration::from_millis(500))) {
            Some(Ok(m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                let Some(&offset) = offsets.get(&tp) else {
                    continue;
                };
                if m.offset() < offset || found.contains_key(&tp) {
                    continue;
                }
                // Headers another client wrote may not read (a name that is
                // not UTF-8): then the record is not one a restore wrote,
                // which `check_last` refuses with its reason.
                let archived = m
                    .headers()
                    .and_then(|hs| crate::convert::headers_of(hs).ok())
                    .and_then(|hs| {
                        hs.into_iter()
                            .rev()
                            .filter(|h| h.name == name)
                            .find_map(|h| h.value)
                    })
                    .and_then(|v| String::from_utf8(v).ok())
                    .and_then(|s| s.parse::<i64>().ok())
                    // No Kafka offset is negative: not an archived one.
                    .filter(|o| *o >= 0);
                found.insert(
                    tp,
                    TargetRecord {
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                        archived,
                    },
                );
            }
            // Transient trouble (a reconnect, a coordinator lookup) is
            // retried until the deadline.
            Some(Err(e)) => {
                tracing::debug!(error = %e, "reading for --resume");
                last_error = Some(e);
            }
            None => {}
        }
    }
    Ok(found)
}

/// Refuses a target whose records from its first to its last do not
/// number what the archive holds between the archived offsets those two
/// name: an earlier restore that stopped with a gap (its error said not
/// to resume the partition; a script retrying until exit 0 would not
/// see it), records whose acknowledgement was lost below one that failed,
/// another producer's records (compaction of the target is not seen: it
/// keeps the offsets counted). A gap at the head, which a count from the
/// first record cannot see, is refused apart: more archived records from
/// `--from` below the first record than target offsets below it.
/// Trusting the last
/// record alone, a resume would go on above the gap and end whole.
/// Checked only when the first record is a restore's of this archive
/// (its offset header names an archived record with its key and value):
/// an `--append` into a topic that held other records starts with those.
fn check_count(
    engine: &Engine,
    cfg: &RestoreConfig,
    source: &TopicPartition,
    target: &TopicPartition,
    (low, high): (i64, i64),
    first: &TargetRecord,
    last_archived: i64,
) -> Result<()> {
    let first_archived = match first.archived {
        Some(a) if record_at(engine, source, a)?.is_some_and(|r| first.is(&r)) => a,
        // Below what the archive holds now: maybe this archive's, pruned
        // since, and then the count is the one check a gap left by an
        // earlier restore meets. Said, not skipped quietly (until the
        // night of 2026-12-04 at DEBUG, as for another's record).
        Some(a) if engine.partition(source).is_some_and(|p| a < p.first_offset) => {
            tracing::warn!(%target, first_archived = a, "--resume: the target's first record names an archived offset pruned from the archive since, so the target's records cannot be counted against the archive's: a gap an earlier restore left (its error said not to resume this partition) is not caught");
            return Ok(());
        }
        _ => {
            // An `--append` into a topic that held other records starts
            // with theirs: said at WARN as the pruned case is (until
            // 2026-12-05 at DEBUG), since a gap an earlier `--append` run
            // left goes uncaught here too.
            tracing::warn!(%target, "--resume: the target's first record is not this archive's (an --append into a topic that held other records), so the target's records cannot be counted against the archive's: a gap an earlier restore left (its error said not to resume this partition) is not caught");
            return Ok(());
        }
    };
    // A gap at the head: the target's log has lost nothing from its start
    // (no retention or deletion moved it), yet the archive holds more
    // records from `--from` below its first record than the target has
    // offsets below it. The count below starts at the first record and
    // misses them, and the resume ended whole (until 2026-12-06; found by
    // an audit). Records lost so took no offsets, while records compacted
    // away keep theirs (the log cleaner starts at the head): a compacted
    // target is not refused. An archive pruned since holds none below.
    if low == 0 {
        let below = engine.count_range(source, cfg.select.from, first_archived)?;
        if below > u64::try_from(first.offset).unwrap_or(0) {
            return Err(ConnectorError::RestoreRefused(format!(
                "--resume: {target} begins with archived offset {first_archived} at offset {}, its log having lost nothing from its start, but the archive holds {} from --from {} below it: an earlier restore lost its first records (its error said not to resume this partition), or it began at a higher --from than this command's; resuming after the last would not make it whole: restore into an empty topic, or give the earlier restore's --from",
                first.offset,
                crate::count::counted(below, "record"),
                cfg.select.from
            )));
        }
    }
    // From the first record read, not the log start: offsets between hold
    // no record a reader gets (compacted away, or an aborted producer's),
    // and counted, a target whose first record had gone was refused as
    // holding records the archive does not account for (until 2026-12-05;
    // found in review).
    let from = first.offset.max(low);
    let held = u64::try_from(high - from).unwrap_or(0);
    let archived = engine.count_range(source, first_archived, last_archived.saturating_add(1))?;
    if held != archived {
        // Extra records only: another producer's, between an earlier
        // restore of this archive and an --append one (whose own advice
        // was --resume), leave nothing missing after the last, which
        // names where to go on (since 2026-12-05; before, only the
        // general advice, which names no offset). The rerun is this
        // partition's alone, as the advice for a pruned one says: the
        // command's own --topic and --partition would select the others
        // too, and --append checks no overlap.
        let extra = if held > archived {
            format!(
                "; if the difference is another producer's records, written between restores of this archive, and none of this archive's are missing before the last, go on with this partition alone: {}",
                this_partition_alone(cfg, source, last_archived.saturating_add(1))
            )
        } else {
            String::new()
        };
        return Err(ConnectorError::RestoreRefused(format!(
            "--resume: {target} holds {held} records (offsets {from}..{high}) from archived offset {first_archived} to {last_archived}, but the archive holds {archived} between those two: records are {} (an earlier restore that stopped with a gap, whose error said not to resume this partition; or another producer), so resuming after the last would not make it whole; restore into an empty topic, or use --partition, --from and --append for what is missing{extra}",
            if held < archived { "missing from the target" } else { "in the target that the archive does not account for" }
        )));
    }
    Ok(())
}

/// The archived offset `last` says it holds, once checked against the
/// archive: the record there must have the same key and value. A record
/// written from something else (another archive, another topic, another
/// producer using the same header name) is refused rather than trusted.
fn check_last(
    engine: &Engine,
    source: &TopicPartition,
    target: &TopicPartition,
    last: &TargetRecord,
    cfg: &RestoreConfig,
) -> Result<i64> {
    let name = cfg.offset_header.as_deref().expect("validated");
    let refuse = |why: String| {
        ConnectorError::RestoreRefused(format!(
            "--resume: the last record of {target} (offset {}) {why}, so it was not written by restoring {source} with --offset-header {name}; restore into an empty topic, or use --append with --from the first archived offset the target lacks (read the target for it: --append without --from starts at the archive's first record, and would send the partition again)",
            last.offset
        ))
    };
    let Some(archived) = last.archived else {
        return Err(refuse(format!(
            "has no {name:?} header holding an archived offset"
        )));
    };
    match record_at(engine, source, archived)? {
        Some(r) if last.is(&r) => Ok(archived),
        Some(_) => Err(refuse(format!(
            "names archived offset {archived}, but its key or value differ from the archive's"
        ))),
        None => {
            // Below what the archive still holds: written by this restore,
            // maybe, and pruned since; not someone else's record.
            let held = engine.partition(source);
            let first = held.as_ref().map(|p| p.first_offset);
            match first {
                // The archive goes on right after it (a prune that cut just
                // above it, or one that emptied the partition): nothing it
                // held is missed by going on. Its key and value cannot be
                // compared any more, so a target written from another
                // archive that names that very offset is not told apart
                // (before the night of 2026-12-04 this was refused too, with
                // advice for records that were never lost).
                Some(first) if archived.checked_add(1) == Some(first) => {
                    tracing::info!(%target, archived, "--resume: the archived record the target's last one names was pruned since; the archive goes on right after it, so nothing is missed (its key and value could not be compared)");
                    Ok(archived)
                }
                // Emptied by a prune since: nothing is left to restore of
                // it, and --append --from there would be refused as
                // holding no records (seen in review, the night of
                // 2026-12-04: it was advised).
                Some(first) if archived < first && held.is_some_and(|p| p.record_count == 0) => {
                    Err(ConnectorError::RestoreRefused(format!(
                        "--resume: the last record of {target} (offset {}) names archived offset {archived}, but the archive holds nothing of {source} any more (a prune emptied it; its next offset is {first}): whatever was archived between {} and {first} is gone from it, restored or not, and nothing is left to restore of this partition: resume the others limited to them, one run each with --topic and --partition (a --resume that includes this partition is refused again)",
                        last.offset,
                        archived.saturating_add(1),
                    )))
                }
                Some(first) if archived < first => Err(ConnectorError::RestoreRefused(format!(
                    "--resume: the last record of {target} (offset {}) names archived offset {archived}, which is below what the archive holds (its {source} starts at offset {first}): a prune deleted it, if this archive held it, so whatever was archived between {} and {first} is gone from it, restored or not (if this archive never held it, the target's records are another archive's: restore into an empty topic); to go on with what it holds, restore this partition with {}",
                    last.offset,
                    archived.saturating_add(1),
                    this_partition_alone(cfg, source, first),
                ))),
                _ => Err(refuse(format!(
                    "names archived offset {archived}, which the archive does not hold"
                ))),
            }
        }
    }
}

/// The flags that restore `source` alone from `from` on, in place of a
/// refused `--resume` (the command's own `--topic` and `--partition` would
/// select its other partitions too, and `--append` checks no overlap), and
/// what to do with the others.
fn this_partition_alone(cfg: &RestoreConfig, source: &TopicPartition, from: i64) -> String {
    format!(
        "--topic {} --partition {} --append --from {from}{} in place of --resume and of the command's own {}, and resume the others limited to them, one run each with --topic and --partition (a --resume that includes this partition is refused again)",
        source.topic,
        source.partition,
        cfg.rename.get(&source.topic).map_or(String::new(), |to| format!(" --rename {}={to}", source.topic)),
        if cfg.rename.is_empty() {
            "--topic, --partition and --from"
        } else {
            "--topic, --partition, --from and every --rename"
        },
    )
}

/// The archive's record of `source` at exactly `offset`, if it holds one.
/// A range read: a lost index entry is `Corruption`, not a record the
/// archive does not hold (which `--resume` would blame on the target).
fn record_at(engine: &Engine, source: &TopicPartition, offset: i64) -> Result<Option<Record>> {
    match engine
        .read_range(source, offset, Some(offset.saturating_add(1)))?
        .next()
    {
        Some(r) => {
            let r = r?;
            Ok((r.offset == offset).then_some(r))
        }
        None => Ok(None),
    }
}

impl TargetRecord {
    /// Whether `r` has this target record's key and value.
    fn is(&self, r: &Record) -> bool {
        r.key == self.key && r.value == self.value
    }
}

/// What `send` did with a record.
enum Sent {
    Queued {
        timestamp_replaced: bool,
    },
    /// A failure was reported while waiting for room: not sent.
    Failed,
    /// Asked to stop while waiting for room: not sent.
    Interrupted,
}

/// librdkafka's flush, served here: every report waiting is served first,
/// and the first broker failure seen, before or during the flush, purges
/// what is still queued at once. Queued records must not leave after a
/// failed one: they would land above it, leaving a gap no resume point
/// fills. Purged records fail with "purged in queue" and get resume points.
///
/// A stop request withdraws what is still queued, never sent (librdkafka
/// takes in up to a GiB, which is most restores whole within seconds of
/// the start: a SIGTERM then stopped nothing, and the restore went on to
/// the end, or waited out `message.timeout.ms` for a broker gone; until
/// 2026-12-07, found by two audits). What is in flight finishes: each
/// partition's resume point is then after its last acknowledged record.
fn flush(
    producer: &BaseProducer<Deliveries>,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    let mut asked = false;
    flush_until(producer, deadline, &mut || {
        if !asked && stop() {
            asked = true;
            withdraw_queued(producer);
        }
    })
}

/// Withdraw every record still queued in the producer, for a stop (none
/// left: librdkafka had sent every record, and the stop stops nothing:
/// the restore waits for their acknowledgements and is whole).
fn withdraw_queued(producer: &BaseProducer<Deliveries>) {
    let before = producer.context().unreported();
    producer
        .context()
        .stop_purged
        .store(true, std::sync::atomic::Ordering::Relaxed);
    producer.purge(PurgeConfig::default().queue());
    drain_reports(producer);
    let withdrawn = producer.context().withdrawn();
    let left = producer.context().unreported();
    // (A report of a record withdrawn may come after this drain: the end
    // of the restore counts them all again.)
    if withdrawn > 0 {
        tracing::info!(
            withdrawn,
            left_in_flight = left,
            "stopping: the records queued and not yet sent are withdrawn; waiting for the brokers to acknowledge those already sent (up to message.timeout.ms: again to exit at once)"
        );
    } else {
        tracing::info!(
            unacknowledged = before,
            "stop asked once every record was sent: waiting for their acknowledgements, and the restore is whole if they come"
        );
    }
}

/// [`flush`]'s wait until `deadline`, calling `on_wait` between looks.
fn flush_until(
    producer: &BaseProducer<Deliveries>,
    deadline: Instant,
    on_wait: &mut dyn FnMut(),
) -> KafkaResult<()> {
    // Serve the reports waiting and purge the queue at the first failure.
    let purge_after_failure = |purged: &mut bool| {
        drain_reports(producer);
        if !*purged && producer.context().failed_in_delivery() {
            producer.purge(PurgeConfig::default().queue());
            *purged = true;
        }
    };
    let mut purged = false;
    // A failure seen already purges first: the flush below wakes the broker
    // threads to send what lingers, which would then leave. So does a
    // stop.
    purge_after_failure(&mut purged);
    on_wait();
    // Flags librdkafka's queues as flushing, for a moment (a broker thread
    // awake then sends what lingers without waiting out `linger.ms`, 5 ms
    // unless -X sets it; one that wakes later waits it out); its timeout
    // error only says records are in flight.
    if !purged {
        let _ = producer.flush(Duration::ZERO);
    }
    loop {
        purge_after_failure(&mut purged);
        on_wait();
        if producer.in_flight_count() == 0 {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        // Reports are served above, each one looked at for a failure; the
        // next are waited for 1 ms at a time. (rust-rdkafka's `poll` with a
        // timeout spins through the last millisecond of it, and its flush
        // serves reports for 100 ms slices: a failure would be seen only
        // after the slice, while librdkafka kept sending what was queued.)
        std::thread::sleep(left.min(Duration::from_millis(1)));
    }
}

/// Serve every delivery report waiting (rust-rdkafka's `poll(0)` serves
/// one event, and one event reports one produce batch): a report left
/// waiting keeps its records in librdkafka's memory, and a failure unseen.
/// Log and error events share the queue, ahead of reports as often as
/// not: the draining goes on past them, and ends at a poll that served
/// nothing (no callback of the context's ran, and librdkafka's out queue,
/// which counts the events waiting, did not shorten: an event of a kind
/// the context does not see).
fn drain_reports(producer: &BaseProducer<Deliveries>) {
    loop {
        let before = (producer.context().served(), producer.in_flight_count());
        producer.poll(Duration::ZERO);
        let (served, queued) = (producer.context().served(), producer.in_flight_count());
        if served == before.0 && queued >= before.1 {
            return;
        }
    }
}

/// Why a record was not handed to librdkafka: both are the record's.
enum Unsent {
    /// librdkafka refused it (a record over `message.max.bytes`, say).
    Kafka(KafkaError),
    /// librdkafka's queue is empty and still has no room for it: the record
    /// alone is over `queue.buffering.max.kbytes`, and waiting would never
    /// end.
    TooBigForQueue(String),
}

/// Hand one record to librdkafka, waiting while its queue is full.
fn send(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    target: &TopicPartition,
    r: &Record,
    stop: &dyn Fn() -> bool,
) -> std::result::Result<Sent, Unsent> {
    let offset_text = r.offset.to_string();
    let extra: Vec<(&str, &[u8])> = cfg
        .offset_header
        .as_deref()
        .map(|name| (name, offset_text.as_bytes()))
        .into_iter()
        .collect();
    let mut record = to_base_record(r, &target.topic, target.partition, opaque(r.offset), &extra);
    // A timestamp the producer cannot send is counted, not hidden.
    let timestamp_replaced =
        r.timestamp_type != TimestampType::NotAvailable && sendable_timestamp(r).is_none();
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(Sent::Queued { timestamp_replaced }),
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                // Only this thread sends, and a record leaves librdkafka's
                // count only when its report is served (below): an empty
                // queue now was empty when the send was refused.
                if producer.in_flight_count() == 0 {
                    return Err(Unsent::TooBigForQueue(
                        crate::librdkafka::too_big_for_queue(r.payload_bytes()),
                    ));
                }
                // Serves reports for the whole 10 ms (a timeout above zero
                // keeps rust-rdkafka's poll serving until it ends).
                producer.poll(Duration::from_millis(10));
                if producer.context().failed() {
                    return Ok(Sent::Failed);
                }
                if stop() {
                    return Ok(Sent::Interrupted);
                }
            }
            Err((e, _)) => return Err(Unsent::Kafka(e)),
        }
    }
}

/// The first failed record of a partition.
#[derive(Debug, Clone)]
struct Failed {
    offset: i64,
    detail: String,
}

/// Delivery reports of one target partition.
#[derive(Debug, Default, Clone)]
struct PartitionDeliveries {
    acked: u64,
    first_acked: Option<i64>,
    last_acked: Option<i64>,
    /// The lowest and highest target offsets Kafka acknowledged them at.
    target_span: Option<(i64, i64)>,
    /// Acknowledged without an offset (-1: a duplicate sequence, whose
    /// records an earlier attempt wrote, somewhere in the span or beside
    /// it).
    unplaced: u64,
    /// The lowest failed archived offset, with its error.
    first_failed: Option<Failed>,
    /// Records whose delivery report was a failure.
    refused: u64,
    /// Of those, records librdkafka reports certainly not persisted
    /// (`rd_kafka_message_status`: never sent, as one purged from its
    /// queue before its first send).
    not_persisted: u64,
    /// Of those, records withdrawn from the producer's queue at a stop
    /// (`flush`): no failure.
    withdrawn: u64,
    /// Of those, records librdkafka had sent once and queued again for a
    /// retry: they may be in Kafka.
    withdrawn_maybe_sent: u64,
}

#[derive(Debug, Default)]
struct DeliveryState {
    partitions: BTreeMap<TopicPartition, PartitionDeliveries>,
    /// The partition whose failure was reported first.
    first_failed: Option<TopicPartition>,
    /// The first partition that failed for a reason of its own: not purged
    /// behind another failure, not stopped by a fatal error elsewhere.
    first_cause: Option<TopicPartition>,
    /// A failure came back from the brokers (rather than from `send`).
    failed_in_delivery: bool,
    /// librdkafka's fatal error, if one stopped the producer.
    fatal: Option<String>,
}

impl DeliveryState {
    /// The first target partition another producer wrote to during the
    /// restore: the idempotent producer writes each record once, in order,
    /// so records acknowledged at offsets with a hole between them share
    /// it with someone else's. Only partitions where nothing failed are
    /// judged (until the night of 2026-12-04 the check ran only when the
    /// restore did not fail): a failed record may have been written (a
    /// report that timed out), and would read as another's.
    ///
    /// Nor may records come before the first: `highs` holds where each
    /// target ended when it was checked, and a first record acknowledged
    /// past it (by more than the records acknowledged without an offset)
    /// has records before it that appeared since. Another producer's, or
    /// a killed restore's that the leader held above the high watermark,
    /// unreplicated, when `--resume` read the target: those are now there
    /// twice (until 2026-12-05 this went unseen, exit 0; seen in review).
    fn interleaved(&self, highs: &BTreeMap<TopicPartition, i64>) -> Option<ConnectorError> {
        self.partitions.iter().find_map(|(target, d)| {
            if d.first_failed.is_some() {
                return None;
            }
            if let Some((first, last, held)) = foreign_in_span(d) {
                return Some(ConnectorError::RestoreInterleaved {
                    target: target.clone(),
                    acknowledged: d.acked,
                    first,
                    last,
                    held,
                });
            }
            let (first, _) = d.target_span?;
            let checked_end = *highs.get(target)?;
            let unplaced = i64::try_from(d.unplaced).unwrap_or(i64::MAX);
            (first > checked_end.saturating_add(unplaced)).then(|| {
                ConnectorError::RestoreStartedPast {
                    target: target.clone(),
                    acknowledged: d.acked,
                    checked_end,
                    first,
                }
            })
        })
    }

    /// The partition an error should name: one with a gap, else the first
    /// real cause, else the first failure.
    fn headline(&self) -> Option<&TopicPartition> {
        let gap = self.partitions.iter().find_map(|(tp, d)| {
            let f = d.first_failed.as_ref()?;
            d.last_acked.is_some_and(|l| l > f.offset).then_some(tp)
        });
        gap.or(self.first_cause.as_ref())
            .or(self.first_failed.as_ref())
    }
}

/// Failures that only follow from another one.
fn is_consequence(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::PurgeQueue
                | RDKafkaErrorCode::PurgeInflight
                | RDKafkaErrorCode::Fatal
        )
    )
}

/// What to change for a refusal a rerun would meet again at the same
/// record, said after the broker's text (which names no setting). Only the
/// size had one until the night of 2026-12-04: the others read as a bare
/// broker error followed by "--resume", which stopped there again.
fn refusal_advice(code: RDKafkaErrorCode) -> Option<&'static str> {
    match code {
        // The brokers refuse a whole batch, and each record in it fails
        // with this: the one named is the batch's first, which need not be
        // large itself. (librdkafka's own refusal of one record over
        // message.max.bytes comes from `send`, not here.)
        RDKafkaErrorCode::MessageSizeTooLarge => Some(" (the brokers refused the batch that starts with this record: a record in it, or the batch itself, is over the topic's max.message.bytes; if no record is that large, lower -X batch.size below that limit, else raise the limit)"),
        // What was restored went with the topic: a rerun starts over, not
        // from a resume point (found in review, 2026-12-06).
        RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic | RDKafkaErrorCode::UnknownPartition => Some(" (the brokers no longer have the target topic, or that partition of it: deleted during the restore? what was restored into it went with it: create it again, with the archive's partitions, and restore it again from the start, not from a resume point; a topic created again has a new topic id and new offsets, so a `cairn run` archiving that topic stops at it: archive it into a new --data and --group, not with --rebind-topic, which is for a topic moved with its offsets)"),
        code => crate::librdkafka::produce_refusal_advice(code),
    }
}

/// Whether librdkafka's fatal error `code` is the brokers' refusal of the
/// idempotent producer itself (its id), which every rerun meets again
/// until it is fixed.
fn refuses_producer(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            | RDKafkaErrorCode::UnsupportedFeature
    )
}

/// What to change for librdkafka's fatal error `code` (the error under
/// `Fatal`).
fn fatal_advice(code: RDKafkaErrorCode) -> Option<&'static str> {
    match code {
        RDKafkaErrorCode::UnsupportedFeature => Some(" (restore's producer is idempotent, to keep each partition's records in order and once across retries: the target's brokers must run Kafka 0.11 or later)"),
        code => refusal_advice(code),
    }
}

/// Delivery reports, per target partition.
#[derive(Debug, Default)]
struct Deliveries {
    state: Mutex<DeliveryState>,
    /// Events served to this context (delivery reports, log lines,
    /// errors): `drain_reports` polls until a poll serves none.
    served: std::sync::atomic::AtomicU64,
    /// The client's last error that names a cause, for an unreachable
    /// broker's error.
    last_cause: crate::librdkafka::LastCause,
    /// A stop withdrew the records still queued (`flush`): those purged
    /// unsent are where sending stopped, not failures.
    stop_purged: std::sync::atomic::AtomicBool,
    /// Records handed to librdkafka.
    handed: std::sync::atomic::AtomicU64,
}

impl Deliveries {
    fn lock(&self) -> std::sync::MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The record at `offset` failed with `e` (the tests' shorthand).
    #[cfg(test)]
    fn fail(&self, target: &TopicPartition, offset: i64, e: &KafkaError) {
        self.fail_with(target, offset, e.to_string(), is_consequence(e));
    }

    /// A record the brokers refused (its delivery report); `unsent`: one
    /// librdkafka reports certainly not persisted.
    fn refused(&self, target: &TopicPartition, offset: i64, e: &KafkaError, unsent: bool) {
        let mut detail = e.to_string();
        if let Some(advice) = e.rdkafka_error_code().and_then(refusal_advice) {
            detail.push_str(advice);
        }
        // A record purged from the queue that librdkafka does not call
        // unsent was sent once and queued again for a retry (a stop's
        // withdrawal meets those when a broker is away): it may be there
        // too (until review, 2026-12-07, it went without the advice).
        if matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageTimedOut | RDKafkaErrorCode::PurgeInflight)
        ) || (!unsent && e.rdkafka_error_code() == Some(RDKafkaErrorCode::PurgeQueue))
        {
            detail.push_str(REPLICAS_WAIT);
        }
        {
            let mut s = self.lock();
            let d = s.partitions.entry(target.clone()).or_default();
            d.refused += 1;
            if unsent {
                d.not_persisted += 1;
            }
        }
        self.fail_with(target, offset, detail, is_consequence(e));
    }

    /// The record at `offset` failed for `detail`; a `consequence` of
    /// another failure (a purge) does not name the cause.
    fn fail_with(&self, target: &TopicPartition, offset: i64, detail: String, consequence: bool) {
        let mut s = self.lock();
        let d = s.partitions.entry(target.clone()).or_default();
        if d.first_failed.as_ref().is_none_or(|f| offset < f.offset) {
            d.first_failed = Some(Failed { offset, detail });
        }
        s.first_failed.get_or_insert_with(|| target.clone());
        if !consequence {
            s.first_cause.get_or_insert_with(|| target.clone());
        }
    }

    fn failed(&self) -> bool {
        self.lock().first_failed.is_some()
    }

    /// A record was handed to librdkafka.
    fn note_handed(&self) {
        self.handed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records withdrawn at a stop, over every partition.
    fn withdrawn(&self) -> u64 {
        self.lock().partitions.values().map(|d| d.withdrawn).sum()
    }

    /// Records handed over whose delivery report has not come yet: every
    /// report is counted acknowledged or refused (a withdrawn record too).
    fn unreported(&self) -> u64 {
        let handed = self.handed.load(std::sync::atomic::Ordering::Relaxed);
        let reported: u64 = self
            .lock()
            .partitions
            .values()
            .map(|d| d.acked + d.refused)
            .sum();
        handed.saturating_sub(reported)
    }

    fn note_served(&self) {
        self.served
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn failed_in_delivery(&self) -> bool {
        self.lock().failed_in_delivery
    }

    fn take(&self) -> DeliveryState {
        std::mem::take(&mut *self.lock())
    }
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        self.note_served();
        // librdkafka still calls the gapless guarantee "experimental" (since
        // 1.4) and warns on every start; restore sets it on purpose and
        // checks for gaps itself (`next_step`), so that warning is noise.
        if fac == "CONFWARN" && message.contains("enable.gapless.guarantee") {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
            return;
        }
        log_to_tracing(&self.last_cause, level, fac, message);
    }

    /// Statistics (only with `-X statistics.interval.ms`) are not used:
    /// counted as served, not parsed.
    fn stats_raw(&self, _statistics: &[u8]) {
        self.note_served();
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.note_served();
        if self.last_cause.note(&error, reason) {
            tracing::warn!(%error, reason, "kafka producer");
        } else {
            tracing::debug!(%error, reason, "kafka producer (said already)");
        }
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            self.lock().fatal.get_or_insert_with(|| reason.to_owned());
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, offset: usize) {
        self.note_served();
        let offset = offset as i64;
        match result {
            Ok(m) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                let mut s = self.lock();
                let d = s.partitions.entry(tp).or_default();
                d.acked += 1;
                d.first_acked = Some(d.first_acked.map_or(offset, |o| o.min(offset)));
                d.last_acked = Some(d.last_acked.map_or(offset, |o| o.max(offset)));
                let at = m.offset();
                // librdkafka reports a duplicate sequence as delivered with
                // no offset (-1): it says nothing of where records went.
                if at >= 0 {
                    d.target_span = Some(
                        d.target_span
                            .map_or((at, at), |(lo, hi)| (lo.min(at), hi.max(at))),
                    );
                } else {
                    d.unplaced += 1;
                }
                drop(s);
                crate::crashpoint::reached(crate::crashpoint::RESTORE_AFTER_ACK);
            }
            Err((e, m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                // librdkafka's own word on whether the record may be in
                // Kafka: a purge from the queue alone does not say (a
                // record sent, then queued again for a retry, may be).
                let unsent = crate::fetch::certainly_not_persisted(m);
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::PurgeQueue)
                    && self.stop_purged.load(std::sync::atomic::Ordering::Relaxed)
                {
                    // Withdrawn at a stop: where sending stopped, not a
                    // failure (its partition resumes after its last
                    // acknowledged record, as one whose sending the stop
                    // cut short). One librdkafka does not call unsent was
                    // sent once and queued again for a retry (a broker
                    // away): it may be in Kafka, which the stop's advice
                    // then says (until review, 2026-12-07, such a stop
                    // ended as a failure of the purge).
                    let mut s = self.lock();
                    let d = s.partitions.entry(tp).or_default();
                    d.refused += 1;
                    d.withdrawn += 1;
                    if unsent {
                        d.not_persisted += 1;
                    } else {
                        d.withdrawn_maybe_sent += 1;
                    }
                    return;
                }
                self.refused(&tp, offset, e, unsent);
                let mut s = self.lock();
                s.failed_in_delivery = true;
            }
        }
    }
}

/// The `--resume` reader's context: `-X` holds producer properties too, and
/// librdkafka warns about each one a consumer ignores; those warnings are
/// expected here. Its client errors are said each kind once a minute at
/// most (rust-rdkafka's default said every one at ERROR).
#[derive(Default)]
struct ReaderContext(crate::librdkafka::LastCause);

impl ClientContext for ReaderContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_ignoring_confwarn(&self.0, level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        crate::librdkafka::say_client_error(&self.0, &error, reason);
    }
}

impl ConsumerContext for ReaderContext {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule that keeps a pass-over from skipping a record of anyone
    /// else's: copies are passed over only where Kafka acknowledged
    /// exactly that many records, each with an offset, filling the offsets
    /// from where the logs ended. A record of another producer's among
    /// them widens the span; one written before the first copy moves it;
    /// an acknowledgement without an offset may be a copy anywhere. Each
    /// moves nothing.
    #[test]
    fn only_a_span_the_copies_fill_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(cairn_engine::EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        let records: Vec<Record> = (0..10).map(|o| Record::with_value(o, "v")).collect();
        engine
            .append(&[cairn_engine::RecordBatch {
                tp: tp.clone(),
                records,
            }])
            .unwrap();
        let at = BTreeMap::from([(tp.clone(), 10)]);
        let state = |acked, target_span, unplaced| {
            let mut s = DeliveryState::default();
            s.partitions.insert(
                tp.clone(),
                PartitionDeliveries {
                    acked,
                    target_span,
                    unplaced,
                    ..Default::default()
                },
            );
            s
        };
        for (acked, span, unplaced, why) in [
            (
                5,
                Some((10, 15)),
                0,
                "a record of another producer's among them",
            ),
            (
                5,
                Some((11, 15)),
                0,
                "a record written before the first copy",
            ),
            (4, Some((10, 13)), 1, "an acknowledgement without an offset"),
            (5, Some((9, 13)), 0, "a span below where the logs ended"),
            (0, None, 0, "nothing acknowledged"),
        ] {
            let (done, failed) = passed_over(&engine, &at, &state(acked, span, unplaced));
            assert!(done.is_empty() && failed.is_none(), "{why}");
            assert_eq!(engine.durable_offset(&tp), Some(10), "{why}");
        }
        let (done, failed) = passed_over(&engine, &at, &state(5, Some((10, 14)), 0));
        assert!(failed.is_none());
        let want = PassedOver {
            partition: tp.clone(),
            from: 10,
            to: 15,
        };
        assert_eq!(done, vec![want]);
        assert_eq!(engine.durable_offset(&tp), Some(15));
        // Durable: it holds through a reopen, the records as they were.
        drop(engine);
        let engine = Engine::open(cairn_engine::EngineConfig::new(dir.path())).unwrap();
        let p = engine.partition(&tp).unwrap();
        assert_eq!((p.next_offset, p.record_count), (15, 10));
    }

    /// An archive at `dir` holding t/0 offsets 0..=9 (values `v0`..`v9`),
    /// and those records.
    fn ten_archived(dir: &std::path::Path) -> (Engine, TopicPartition, Vec<Record>) {
        let engine = Engine::open(cairn_engine::EngineConfig::new(dir)).unwrap();
        let source = TopicPartition::new("t", 0);
        let records: Vec<Record> = (0..10)
            .map(|o| Record::with_value(o, format!("v{o}")))
            .collect();
        engine
            .append(&[cairn_engine::RecordBatch {
                tp: source.clone(),
                records: records.clone(),
            }])
            .unwrap();
        (engine, source, records)
    }

    /// The target's records are counted from the first one read: offsets
    /// below it (its log start, compacted or aborted records) hold none.
    #[test]
    fn the_count_starts_at_the_first_record_read() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, source, records) = ten_archived(dir.path());
        let target = TopicPartition::new("t-restored", 0);
        let cfg = RestoreConfig::new("b:1");
        // Archived 0..=9 restored at target offsets 3..13: 3 offsets below
        // the first record read held nothing.
        let first = TargetRecord {
            offset: 3,
            key: None,
            value: records[0].value.clone(),
            archived: Some(0),
        };
        check_count(&engine, &cfg, &source, &target, (0, 13), &first, 9).unwrap();
        // One missing: refused, naming the offsets counted.
        match check_count(&engine, &cfg, &source, &target, (0, 12), &first, 9) {
            Err(ConnectorError::RestoreRefused(m)) => {
                assert!(m.contains("holds 9 records (offsets 3..12)"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A target whose log lost nothing from its start, with more records
    /// archived from `--from` below its first record than it has offsets
    /// below it, is refused: an earlier restore lost its first records,
    /// which the count from the first record does not see (until
    /// 2026-12-06 the resume ended whole). A head compacted away (its
    /// offsets kept), a target whose log start moved, or a `--from` at
    /// that first record, is counted as before.
    #[test]
    fn a_gap_at_the_targets_head_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, source, records) = ten_archived(dir.path());
        let target = TopicPartition::new("t-restored", 0);
        let mut cfg = RestoreConfig::new("b:1");
        // Archived 2..=9 at target offsets 0..8: 0 and 1 lost.
        let first = |offset| TargetRecord {
            offset,
            key: None,
            value: records[2].value.clone(),
            archived: Some(2),
        };
        match check_count(&engine, &cfg, &source, &target, (0, 8), &first(0), 9) {
            Err(ConnectorError::RestoreRefused(m)) => assert!(
                m.contains("begins with archived offset 2")
                    && m.contains("holds 2 records from --from 0 below it"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        // One lost, one compacted away (its offset kept): refused too.
        assert!(check_count(&engine, &cfg, &source, &target, (0, 9), &first(1), 9).is_err());
        // Both compacted away, their offsets kept: nothing is missing.
        check_count(&engine, &cfg, &source, &target, (0, 10), &first(2), 9).unwrap();
        // The target's log start moved: what went before is not known.
        check_count(&engine, &cfg, &source, &target, (1, 9), &first(1), 9).unwrap();
        // The earlier restore began at --from 2.
        cfg.select.from = 2;
        check_count(&engine, &cfg, &source, &target, (0, 8), &first(0), 9).unwrap();
    }

    fn delivered(acked: &[i64], failed: Option<i64>) -> PartitionDeliveries {
        PartitionDeliveries {
            acked: acked.len() as u64,
            first_acked: acked.iter().copied().min(),
            last_acked: acked.iter().copied().max(),
            target_span: None,
            unplaced: 0,
            first_failed: failed.map(|offset| Failed {
                offset,
                detail: "boom".into(),
            }),
            ..Default::default()
        }
    }

    /// Acknowledged offsets with a hole between them hold someone else's
    /// records; acknowledgements without an offset (a duplicate sequence)
    /// may fill the span or lie beside it, and raise no false alarm (until
    /// the night of 2026-12-03 they were counted as placed).
    #[test]
    fn a_span_with_records_not_written_here_is_found() {
        let d = |acked: &[i64], span: Option<(i64, i64)>, unplaced: u64| PartitionDeliveries {
            target_span: span,
            unplaced,
            ..delivered(acked, None)
        };
        assert_eq!(foreign_in_span(&d(&[0, 1, 2], Some((10, 12)), 0)), None);
        assert_eq!(
            foreign_in_span(&d(&[0, 1, 2], Some((10, 13)), 0)),
            Some((10, 13, 4))
        );
        // Two of four acknowledged without an offset: the span may hold two
        // to four records, as they lie beside it or in it.
        for (span, foreign) in [((10, 11), false), ((10, 13), false), ((10, 14), true)] {
            assert_eq!(
                foreign_in_span(&d(&[0, 1, 2, 3], Some(span), 2)).is_some(),
                foreign,
                "{span:?}"
            );
        }
    }

    /// A target is written to unless nothing was handed over for it, or
    /// every record was reported certainly not persisted, every report in.
    #[test]
    fn only_records_not_persisted_leave_a_target_unwritten() {
        let purged = |refused, not_persisted| PartitionDeliveries {
            refused,
            not_persisted,
            ..delivered(&[], Some(0))
        };
        assert!(none_written(false, false, &delivered(&[], None)));
        assert!(none_written(true, true, &purged(3, 3)));
        assert!(
            !none_written(true, true, &purged(3, 2)),
            "one may be written"
        );
        assert!(!none_written(true, false, &purged(3, 3)), "reports missing");
        assert!(!none_written(true, true, &delivered(&[0], None)));
        assert!(!none_written(true, true, &purged(0, 0)), "no report at all");
    }

    /// A partition that failed is not judged for another producer's records
    /// (its failed record may be in the span); one beside it that did not
    /// fail is, also when the restore as a whole failed.
    #[test]
    fn only_partitions_that_did_not_fail_are_judged_for_interleaving() {
        let mut state = DeliveryState::default();
        let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let holed = |failed| PartitionDeliveries {
            target_span: Some((0, 3)),
            ..delivered(&[0, 1, 2], failed)
        };
        state.partitions.insert(a.clone(), holed(Some(3)));
        let highs = BTreeMap::new();
        assert!(
            state.interleaved(&highs).is_none(),
            "a failed record may be there"
        );
        state.partitions.insert(b.clone(), holed(None));
        match state.interleaved(&highs) {
            Some(ConnectorError::RestoreInterleaved {
                target,
                acknowledged,
                held,
                ..
            }) => assert_eq!((target, acknowledged, held), (b, 3, 4)),
            other => panic!("{other:?}"),
        }
    }

    /// A first record acknowledged past where the target ended at its
    /// check is reported, unless records acknowledged without an offset
    /// (an earlier attempt's) can fill the offsets before it; one at the
    /// check's end is not.
    #[test]
    fn records_before_the_first_acknowledged_are_found() {
        let tp = TopicPartition::new("t", 0);
        let at = |first: i64, unplaced: u64| {
            let mut state = DeliveryState::default();
            let mut d = delivered(&[0, 1, 2], None);
            d.target_span = Some((first, first + 2));
            d.acked += unplaced;
            d.unplaced = unplaced;
            state.partitions.insert(tp.clone(), d);
            state.interleaved(&BTreeMap::from([(tp.clone(), 10)]))
        };
        assert!(at(10, 0).is_none());
        assert!(at(11, 1).is_none(), "one unplaced record may lie before");
        match at(12, 1) {
            Some(ConnectorError::RestoreStartedPast {
                checked_end, first, ..
            }) => assert_eq!((checked_end, first), (10, 12)),
            other => panic!("{other:?}"),
        }
        assert!(at(12, 0)
            .unwrap()
            .to_string()
            .contains("offsets 10 to 11 meanwhile"),);
    }

    /// `-X group.id` is the `--resume` reader's, never the producer's.
    #[test]
    fn the_group_id_goes_to_the_reader_not_the_producer() {
        let mut cfg = RestoreConfig::new("127.0.0.1:1");
        cfg.kafka.insert("group.id".into(), "mine".into());
        cfg.kafka.insert("compression.type".into(), "zstd".into());
        let p = producer_config(&cfg);
        assert_eq!(p.get("group.id"), None);
        assert_eq!(p.get("compression.type"), Some("zstd"));
        assert_eq!(p.get("linger.ms"), Some("5"));
        assert!(resume_reader(&cfg).is_ok());
        assert_eq!(reader_config(&cfg).get("group.id"), Some("mine"));
        // A linger given under its other name is the only one.
        cfg.kafka
            .insert("queue.buffering.max.ms".into(), "50".into());
        let p = producer_config(&cfg);
        assert_eq!(p.get("linger.ms"), None);
        assert_eq!(p.get("queue.buffering.max.ms"), Some("50"));
    }

    /// `--resume`'s reader takes `-X` too: what it sets itself may not be
    /// given otherwise under another name, and what librdkafka refuses for
    /// a consumer is refused before anything is opened.
    #[test]
    fn resume_reader_settings_are_checked_up_front() {
        let with = |k: &str, v: &str, resume: bool| {
            let mut cfg = RestoreConfig::new("127.0.0.1:1");
            cfg.offset_header = Some("cairn.offset".into());
            cfg.resume = resume;
            cfg.kafka.insert(k.into(), v.into());
            cfg.validate().map_err(|e| e.to_string())
        };
        for (k, v) in [
            ("auto.commit.enable", "true"),
            ("topic.auto.commit.enable", "true"),
            ("topic.auto.offset.reset", "earliest"),
            ("enable.auto.commit", "true"),
        ] {
            let e = with(k, v, true).unwrap_err();
            assert!(
                e.contains(&format!("-X {k}={v}: cairn restore --resume sets")),
                "{e}"
            );
            assert_eq!(with(k, v, false), Ok(()), "no reader without --resume");
        }
        assert_eq!(with("auto.commit.enable", "false", true), Ok(()));
        let e = with("fetch.max.bytes", "1024", true).unwrap_err();
        assert!(
            e.contains("reader settings for --resume") && e.contains("fetch.max.bytes"),
            "{e}"
        );
        assert_eq!(with("fetch.max.bytes", "1024", false), Ok(()));
    }

    /// Without the brokers' API versions records would go without headers.
    #[test]
    fn the_old_protocol_is_refused() {
        let mut cfg = RestoreConfig::new("127.0.0.1:1");
        cfg.kafka.insert("api.version.request".into(), "0".into());
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("-X api.version.request=0"));
    }

    /// A resume point with nothing archived at or after it within the
    /// selection leaves nothing to restore: past the last record, past the
    /// selection's end, or in a partition a prune emptied.
    #[test]
    fn a_resume_point_past_every_record_left_is_complete() {
        use cairn_engine::{EngineConfig, Record, RecordBatch};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let (kept, pruned) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        for tp in [&kept, &pruned] {
            let records = (0..5).map(|o| Record::with_value(o, "v")).collect();
            let batch = RecordBatch {
                tp: tp.clone(),
                records,
            };
            engine.append(&[batch]).unwrap();
        }
        engine.truncate_before(&pruned, 5).unwrap();
        let left = |tp, to, o| left_to_restore(&engine, tp, to, Standing::Resume(o));
        assert_eq!(left(&kept, None, 3), Standing::Resume(3));
        assert_eq!(left(&kept, None, 5), Standing::Complete);
        assert_eq!(left(&kept, Some(3), 3), Standing::Complete);
        assert_eq!(left(&kept, Some(4), 3), Standing::Resume(3));
        assert_eq!(left(&pruned, None, 0), Standing::Complete);
        let gap = Standing::Gap {
            failed: 1,
            acknowledged: 2,
        };
        assert_eq!(left_to_restore(&engine, &kept, None, gap.clone()), gap);
    }

    /// A lost index entry above a resume point is damage, not "nothing
    /// left": a stop there must not end whole with records unsent, and
    /// `--resume`'s checks must report it rather than blame the target.
    #[test]
    fn a_lost_index_entry_is_not_nothing_left() {
        use cairn_engine::{EngineConfig, Record, RecordBatch};
        let dir = tempfile::tempdir().unwrap();
        let tp = TopicPartition::new("t", 0);
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for entry in 0..3 {
            let records = (entry * 5..entry * 5 + 5)
                .map(|o| Record::with_value(o, "v"))
                .collect();
            let batch = RecordBatch {
                tp: tp.clone(),
                records,
            };
            engine.append(&[batch]).unwrap();
        }
        engine.close().unwrap();
        cairn_engine::fuzzing::with_raw_tree(dir.path(), |tree| {
            tree.remove(cairn_engine::keys::index_key(&tp, 5)).unwrap();
        });
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // A restore `--to 10` stopped at 5 or 7: the read from there
        // meets offset 10 first, past the selection.
        for from in [5, 7] {
            assert_eq!(
                left_to_restore(&engine, &tp, Some(10), Standing::Resume(from)),
                Standing::Resume(from),
                "a lost entry at the resume point {from}"
            );
        }
        assert!(matches!(
            record_at(&engine, &tp, 7),
            Err(ConnectorError::Engine(
                cairn_engine::Error::Corruption { .. }
            ))
        ));
        assert!(matches!(
            record_at(&engine, &tp, 12),
            Err(ConnectorError::Engine(
                cairn_engine::Error::Corruption { .. }
            ))
        ));
    }

    #[test]
    fn standing_never_resumes_past_a_failed_record() {
        // Failed below an acknowledged one: a gap, whatever came first.
        assert_eq!(
            standing(0, true, &delivered(&[0, 1, 5, 6], Some(3))),
            Standing::Gap {
                failed: 3,
                acknowledged: 6
            }
        );
        assert_eq!(
            standing(0, true, &delivered(&[0, 1, 2], Some(3))),
            Standing::Resume(3)
        );
        assert_eq!(
            standing(7, false, &delivered(&[], Some(7))),
            Standing::Resume(7)
        );
        // Failed above records whose reports never came (given up at the
        // flush's deadline): resumed after the last acknowledged one, not
        // at the failure (until the night of 2026-12-03 at 5, skipping 2..5).
        assert_eq!(
            standing(0, false, &delivered(&[0, 1], Some(5))),
            Standing::Resume(2)
        );
        assert_eq!(
            standing(3, false, &delivered(&[], Some(5))),
            Standing::Resume(3)
        );
        // Not failed: complete if every record was handed over, else after
        // the last acknowledged one, else where it started.
        assert_eq!(
            standing(0, true, &delivered(&[0, 1], None)),
            Standing::Complete
        );
        assert_eq!(
            standing(0, false, &delivered(&[0, 1], None)),
            Standing::Resume(2)
        );
        assert_eq!(
            standing(4, false, &delivered(&[], None)),
            Standing::Resume(4)
        );
    }

    fn part(p: i32) -> PartitionRestore {
        PartitionRestore {
            source: TopicPartition::new("orders", p),
            target: TopicPartition::new("restored", p),
            records: 0,
            first_offset: None,
            last_offset: None,
            from: 0,
        }
    }

    #[test]
    fn next_step_names_every_partition_left_and_never_resumes_across_a_gap() {
        let (p0, p1, p2) = (part(0), part(1), part(2));
        let mut cfg = RestoreConfig::new("b:9092");
        let resumable = [
            (&p0, Standing::Resume(20)),
            (&p1, Standing::Complete),
            (&p2, Standing::Resume(0)),
        ];
        let step = next_step(&cfg, &resumable);
        assert!(
            step.contains("[--topic orders --partition 0 --from 20, --topic orders --partition 2 --from 0], with --append, in place of its own --topic, --partition and --from;"),
            "{step}"
        );
        cfg.offset_header = Some("cairn.offset".into());
        assert!(next_step(&cfg, &resumable).contains("--resume"));
        // An --append run with the offset header: --resume in place of its
        // --append, for the partitions it sent records to (`Resume`), each
        // named with its resume point as --from, and never the others: a
        // plain --resume would take the complete one (p1) again, whose
        // target may hold another producer's records (refused) or none
        // (restored from the archive's first record, outside --from).
        cfg.append = true;
        let step = next_step(&cfg, &resumable);
        assert!(
            step.starts_with(
                "rerun the same command with --resume once for each of [--topic orders --partition 0 --from 20, --topic orders --partition 2 --from 0], in place of its own --topic, --partition, --append and --from (a plain --resume would take again the partitions this --append run had nothing left to send to"
            ) && !step.contains("--partition 1"),
            "{step}"
        );
        let mixed = [(&p0, Standing::Resume(20)), (&p2, Standing::AppendFrom(0))];
        let step = next_step(&cfg, &mixed);
        assert!(
            step.starts_with("rerun the same command with --resume once for each of [--topic orders --partition 0 --from 20], in place of its own --topic, --partition, --append and --from")
                && step.contains("[--topic orders --partition 2 --from 0], with --append")
                && step.contains("this restore sent them none of its records"),
            "{step}"
        );
        // A gap anywhere wins, named, with no resume point.
        let gapped = [
            (&p0, Standing::Resume(20)),
            (
                &p2,
                Standing::Gap {
                    failed: 3,
                    acknowledged: 9,
                },
            ),
        ];
        // The gap is named first, then how to finish the others, never
        // the gapped partition.
        let step = next_step(&cfg, &gapped);
        assert!(
            step.starts_with("records above a failed one")
                && step.contains("restored/2 lacks archived offset 3")
                && step.contains("--resume once for each of [--topic orders --partition 0 --from 20], in place of its own --topic, --partition, --append and --from (a plain --resume would continue the gapped partitions too)")
                && !step.contains("--partition 2"),
            "{step}"
        );
        cfg.append = false;
        let step = next_step(&cfg, &gapped);
        assert!(
            step.contains("--resume once for each of [--topic orders --partition 0], in place of its own --topic and --partition (")
                && !step.contains("--partition 2"),
            "{step}"
        );
        // Only gaps: nothing else to run.
        let step = next_step(&cfg, &gapped[1..]);
        assert!(!step.contains("For the other"), "{step}");
        // A target that held records, all gone, and was sent none of this
        // restore's has no last record for --resume to read: it is named
        // with --from and --append, the others with --resume alone.
        let emptied = [
            (&p0, Standing::Resume(20)),
            (&p1, Standing::AppendFrom(0)),
            (&p2, Standing::Complete),
        ];
        let step = next_step(&cfg, &emptied);
        assert!(
            step.starts_with("rerun the same command with --resume once for each of [--topic orders --partition 0], in place of its own --topic and --partition (a plain --resume would be refused by the partitions named next); and rerun the same command once for each of [--topic orders --partition 1 --from 0], with --append, in place of its own --topic, --partition and --from: their targets held records that are all gone"),
            "{step}"
        );
        let step = next_step(&cfg, &emptied[1..]);
        assert!(
            step.starts_with("rerun the same command once for each of [--topic orders --partition 1 --from 0], with --append")
                && !step.contains("with --resume"),
            "{step}"
        );
        // Without --offset-header every partition left gets --from advice.
        cfg.offset_header = None;
        let step = next_step(&cfg, &emptied);
        assert!(
            step.contains("[--topic orders --partition 0 --from 20, --topic orders --partition 1 --from 0], with --append"),
            "{step}"
        );
        cfg.offset_header = Some("cairn.offset".into());
        // With renames of several topics, each command carries only its
        // own topic's (a rerun restoring one topic refuses the others').
        cfg.rename.insert("orders".into(), "o2".into());
        cfg.rename.insert("payments".into(), "p2".into());
        let step = next_step(&cfg, &gapped);
        assert!(
            step.contains("[--topic orders --partition 0 --rename orders=o2]")
                && step.contains("in place of its own --topic, --partition and every --rename")
                && !step.contains("payments"),
            "{step}"
        );
        cfg.append = true;
        let step = next_step(&cfg, &gapped);
        assert!(
            step.contains("[--topic orders --partition 0 --from 20 --rename orders=o2], in place of its own --topic, --partition, --append, --from and every --rename"),
            "{step}"
        );
        cfg.offset_header = None;
        let step = next_step(&cfg, &gapped);
        assert!(
            step.contains("[--topic orders --partition 0 --from 20 --rename orders=o2], with --append, in place of its own --topic, --partition, --from and every --rename"),
            "{step}"
        );
    }

    /// Each refusal a rerun would meet again at the same record names what
    /// to change; a passing one (a timeout) has none of these.
    #[test]
    fn refusals_that_repeat_name_what_to_change() {
        use RDKafkaErrorCode as C;
        for (code, names) in [
            (C::MessageSizeTooLarge, "max.message.bytes"),
            (C::InvalidTimestamp, "message.timestamp.before.max.ms"),
            (C::InvalidRecord, "cleanup.policy=compact"),
            (C::PolicyViolation, "administrator"),
            (C::TopicAuthorizationFailed, "WRITE"),
            (C::ClusterAuthorizationFailed, "IDEMPOTENT_WRITE"),
        ] {
            let advice = refusal_advice(code).unwrap_or_else(|| panic!("{code:?}"));
            assert!(advice.contains(names), "{code:?}: {advice}");
        }
        assert_eq!(refusal_advice(C::MessageTimedOut), None);
    }

    #[test]
    fn the_error_names_a_gap_first_then_a_real_cause() {
        let d = Deliveries::default();
        let (a, b, c) = (
            TopicPartition::new("t", 0),
            TopicPartition::new("t", 1),
            TopicPartition::new("t", 2),
        );
        let purged = KafkaError::MessageProduction(RDKafkaErrorCode::PurgeQueue);
        let refused = KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord);
        d.fail(&a, 5, &purged);
        d.fail(&b, 9, &refused);
        assert_eq!(d.lock().headline(), Some(&b), "a purge is a consequence");
        d.lock().partitions.entry(c.clone()).or_default().last_acked = Some(4);
        d.fail(&c, 2, &purged);
        assert_eq!(d.lock().headline(), Some(&c), "a gap comes first");
    }

    /// Damage met in a partition: it is told apart from the others, which
    /// are each named (a plain --resume would stop at the damage again),
    /// with its own --from kept under --resume; a gap in it (a delivery
    /// failure met too) stays with the others, whose advice holds.
    #[test]
    fn next_step_past_damage_tells_the_damaged_partition_apart() {
        let (p0, p1, p2) = (part(0), part(1), part(2));
        let mut cfg = RestoreConfig::new("b:9092");
        cfg.offset_header = Some("cairn.offset".into());
        let standings = [
            (&p0, Standing::Complete),
            (&p1, Standing::Resume(7)),
            (&p2, Standing::Resume(0)),
        ];
        let step = next_step_past_damage(&cfg, &standings, &p1.source);
        for said in [
            "rerun the same command with --resume once for each of [--topic orders --partition 2], in place of its own --topic and --partition (a plain --resume would stop at the damage again",
            "The damage stays in orders/1",
            "once it is repaired, the same command with --resume and --topic orders --partition 1, in place of its own --topic and --partition;",
            "--topic orders --partition 1 --from an offset past the damaged entry",
        ] {
            assert!(step.contains(said), "{said}: {step}");
        }
        // Without the header: --from and --append, at its resume point.
        cfg.offset_header = None;
        let step = next_step_past_damage(&cfg, &standings, &p1.source);
        assert!(
            step.contains("[--topic orders --partition 2 --from 0], with --append")
                && step.contains("once it is repaired, the same command with --topic orders --partition 1 --from 7 and --append"),
            "{step}"
        );
        // A gap in the damaged partition is said as a gap.
        let gapped = [
            (
                &p1,
                Standing::Gap {
                    failed: 3,
                    acknowledged: 5,
                },
            ),
            (&p2, Standing::Resume(0)),
        ];
        let step = next_step_past_damage(&cfg, &gapped, &p1.source);
        assert!(
            step.contains("restored/1 lacks archived offset 3")
                && step.contains("restore it into the empty topic in two parts, each the same command with --topic orders --partition 1 --rename orders=<the empty topic>")
                && step.contains("without --resume or --append")
                && !step.contains("once it is repaired")
                && !step.contains("to skip the damaged records instead"),
            "{step}"
        );
    }
}

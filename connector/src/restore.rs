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
//!   or, with `resume`, ends with a record this restore wrote).
//! - The records of one partition reach Kafka in archive order, each at most
//!   once per run, without gaps: the producer is idempotent with librdkafka's
//!   gapless guarantee (a batch that fails for good stops the producer rather
//!   than let later batches through), and the run stops producing at the
//!   first failure and drops what has not left.
//! - What the report (or the error) calls delivered was acknowledged by the
//!   brokers. A failure names the first failed record, which is where that
//!   partition resumes. A failure that may have been written anyway (a
//!   timeout) is the one case `--from` cannot settle; `resume` reads the
//!   target instead, so it can.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_engine::{Engine, Record, TimestampType, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::error::{ConnectorError, RestoreFailure, Result};

/// librdkafka's default `message.timeout.ms`: every record sent gets its
/// delivery report within it.
const MESSAGE_TIMEOUT_MS_DEFAULT: u64 = 300_000;
/// Added to the message timeout for the final flush: librdkafka scans for
/// timed-out records about once a second.
const FLUSH_MARGIN_MS: u64 = 30_000;
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
    /// Only these archived topics (all when empty).
    pub topics: Vec<String>,
    /// Only this partition number.
    pub partition: Option<i32>,
    /// First archived offset to restore (inclusive).
    pub from: i64,
    /// Stop before this archived offset (exclusive).
    pub to: Option<i64>,
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
}

impl RestoreConfig {
    pub fn new(brokers: &str) -> Self {
        RestoreConfig {
            brokers: brokers.to_owned(),
            topics: Vec::new(),
            partition: None,
            from: 0,
            to: None,
            rename: BTreeMap::new(),
            append: false,
            offset_header: None,
            resume: false,
            connect_timeout_ms: 30_000,
            kafka: BTreeMap::new(),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ConnectorError::Config(m));
        for key in MANAGED {
            if self.kafka.contains_key(key) {
                return bad(format!(
                    "-X {key}: cairn restore manages this property itself"
                ));
            }
        }
        if let Some(v) = self.kafka.get("message.timeout.ms") {
            if !v.parse::<u64>().is_ok_and(|ms| ms > 0) {
                return bad(format!(
                    "-X message.timeout.ms={v}: must be a positive number of ms (0 would let a restore wait forever)"
                ));
            }
        }
        if self.from < 0 {
            return bad(format!("--from {}: must be at least 0", self.from));
        }
        if let Some(to) = self.to {
            if to <= self.from {
                return bad(format!("--to {to}: must be above --from {}", self.from));
            }
        }
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
        Ok(())
    }

    fn target(&self, tp: &TopicPartition) -> TopicPartition {
        let topic = self.rename.get(&tp.topic).unwrap_or(&tp.topic);
        TopicPartition::new(topic, tp.partition)
    }

    fn message_timeout_ms(&self) -> u64 {
        self.kafka
            .get("message.timeout.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(MESSAGE_TIMEOUT_MS_DEFAULT)
    }
}

/// One partition's part of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRestore {
    pub source: TopicPartition,
    pub target: TopicPartition,
    /// Records acknowledged by the brokers.
    pub records: u64,
    /// Lowest and highest archived offset among them.
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    pub partitions: Vec<PartitionRestore>,
    pub records: u64,
    pub payload_bytes: u64,
    /// Records whose archived timestamp Kafka's producer cannot send (0 or
    /// negative with a timestamp type): they carry the time of restore.
    pub timestamps_replaced: u64,
    pub elapsed: Duration,
}

/// The archived partitions `cfg` selects, each with its target.
pub fn plan(engine: &Engine, cfg: &RestoreConfig) -> Result<Vec<(TopicPartition, TopicPartition)>> {
    cfg.validate()?;
    let archived = engine.partitions();
    let topics: BTreeSet<String> = archived.iter().map(|p| p.tp.topic.clone()).collect();
    if topics.is_empty() {
        return Err(ConnectorError::Config(
            "the archive holds no records: nothing to restore".into(),
        ));
    }
    for t in cfg.topics.iter().chain(cfg.rename.keys()) {
        if !topics.contains(t) {
            return Err(ConnectorError::Config(format!(
                "topic {t:?}: the archive holds no such topic (it holds {})",
                topics
                    .iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let chosen: Vec<_> = archived
        .into_iter()
        .filter(|p| cfg.topics.is_empty() || cfg.topics.contains(&p.tp.topic))
        .filter(|p| cfg.partition.is_none_or(|n| n == p.tp.partition))
        .map(|p| {
            let target = cfg.target(&p.tp);
            (p.tp, target)
        })
        .collect();
    if let (Some(n), true) = (cfg.partition, chosen.is_empty()) {
        return Err(ConnectorError::Config(format!(
            "--partition {n}: the archive holds no such partition of the chosen topics"
        )));
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
    let t0 = Instant::now();
    let plan = plan(engine, cfg)?;
    let producer = producer(cfg)?;
    let starts = preflight(&producer, cfg, &plan)?;

    let mut report = RestoreReport::default();
    let mut sent: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    // Damage met while reading stops the restore like a failed delivery
    // does: after what was sent has been acknowledged, so that the resume
    // points below are exact.
    let mut unreadable: Option<ConnectorError> = None;
    'partitions: for (source, target) in &plan {
        let from = starts[target];
        if cfg.to.is_some_and(|to| from >= to) {
            sent.insert(target.clone(), 0);
            continue;
        }
        let records = match engine.read(source, from) {
            Ok(it) => it,
            Err(e) => {
                unreadable = Some(e.into());
                break;
            }
        };
        let mut n = 0u64;
        for r in records {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    unreadable = Some(e.into());
                    break 'partitions;
                }
            };
            if cfg.to.is_some_and(|to| r.offset >= to) {
                break;
            }
            match send(&producer, cfg, target, &r) {
                Ok(Sent::Queued { timestamp_replaced }) => {
                    n += 1;
                    report.payload_bytes += r.payload_bytes();
                    report.timestamps_replaced += u64::from(timestamp_replaced);
                }
                Ok(Sent::Stopped) => break 'partitions,
                Err(detail) => {
                    producer.context().fail(target, r.offset, detail);
                    break 'partitions;
                }
            }
            if producer.context().failed() {
                break 'partitions;
            }
        }
        sent.insert(target.clone(), n);
        tracing::info!(%source, %target, records = n, "partition sent");
    }

    // Nothing is sent after a failure or damage (the loop stops), and under
    // the gapless guarantee a batch that fails for good fails everything
    // after it in its partition; what other partitions have queued lies
    // below their own resume points, so it is delivered, not dropped.
    // Every record sent gets its delivery report within message.timeout.ms.
    let flush_ms = cfg.message_timeout_ms() + FLUSH_MARGIN_MS;
    let flushed = producer.flush(Duration::from_millis(flush_ms));
    if flushed.is_err() {
        // Reports still missing: give up on those records (they fail with
        // "purged", and count as possibly written), and collect the reports.
        producer.purge(PurgeConfig::default().queue().inflight());
        let deadline = Instant::now() + Duration::from_secs(10);
        while producer.in_flight_count() > 0 && Instant::now() < deadline {
            producer.poll(Duration::from_millis(100));
        }
    }
    producer.poll(Duration::ZERO);
    let state = producer.context().take();
    for (source, target) in &plan {
        let d = state.partitions.get(target).cloned().unwrap_or_default();
        report.records += d.acked;
        report.partitions.push(PartitionRestore {
            source: source.clone(),
            target: target.clone(),
            records: d.acked,
            first_offset: d.first_acked,
            last_offset: d.last_acked,
        });
    }
    report.elapsed = t0.elapsed();
    if report.timestamps_replaced > 0 {
        tracing::warn!(
            records = report.timestamps_replaced,
            "records archived with a timestamp of 0 or below carry the time of restore: Kafka's producer cannot send those"
        );
    }

    let failed = state.first_failed.as_ref().map(|tp| {
        let d = &state.partitions[tp];
        let p = report
            .partitions
            .iter()
            .find(|p| p.target == *tp)
            .expect("failures are reported for planned partitions");
        (p, d)
    });
    if failed.is_some() || unreadable.is_some() || flushed.is_err() {
        for p in &report.partitions {
            let d = state.partitions.get(&p.target).cloned().unwrap_or_default();
            tracing::warn!(
                archived = %p.source,
                target = %p.target,
                delivered = p.records,
                resume_from = resume_point(cfg, &starts, p, &d),
                "restore stopped"
            );
        }
    }
    if let Some((p, d)) = failed {
        if let Some(e) = &unreadable {
            tracing::error!(error = %e, "the archive could not be read either");
        }
        let (offset, detail) = d.first_failed.clone().expect("a failed partition");
        let detail = match &state.fatal {
            Some(fatal) => format!("{detail} ({fatal})"),
            None => detail,
        };
        return Err(ConnectorError::RestoreFailed(Box::new(RestoreFailure {
            archived: p.source.clone(),
            target: p.target.clone(),
            offset,
            delivered: p.records,
            next_step: next_step(cfg, &starts, p, d),
            detail,
        })));
    }
    if let Some(e) = unreadable {
        return Err(e);
    }
    if let Err(e) = flushed {
        return Err(ConnectorError::Kafka {
            op: "flush restored records",
            source: e,
        });
    }
    for p in &report.partitions {
        let n = sent.get(&p.target).copied().unwrap_or(0);
        if p.records != n {
            return Err(ConnectorError::RestoreUnconfirmed {
                target: p.target.clone(),
                sent: n,
                acknowledged: p.records,
            });
        }
    }
    Ok(report)
}

/// The archived offset `p` resumes at: its first failed record, else after
/// its last acknowledged one, else where it started.
fn resume_point(
    cfg: &RestoreConfig,
    starts: &BTreeMap<TopicPartition, i64>,
    p: &PartitionRestore,
    d: &PartitionDeliveries,
) -> i64 {
    match (&d.first_failed, p.last_offset) {
        (Some((failed, _)), _) => *failed,
        (None, Some(last)) => last + 1,
        (None, None) => starts.get(&p.target).copied().unwrap_or(cfg.from),
    }
}

/// What to run next, for the error message.
fn next_step(
    cfg: &RestoreConfig,
    starts: &BTreeMap<TopicPartition, i64>,
    p: &PartitionRestore,
    d: &PartitionDeliveries,
) -> String {
    let failed = d.first_failed.as_ref().map_or(cfg.from, |(o, _)| *o);
    if p.last_offset.is_some_and(|last| last > failed) {
        // Not expected under the gapless guarantee, but never papered over.
        return format!(
            "records above archived offset {failed} were acknowledged although it failed, so {} now lacks some of them; restore this partition again into an empty topic",
            p.target
        );
    }
    if cfg.offset_header.is_some() {
        return "rerun the same command with --resume: it continues each partition after the last record found there".into();
    }
    let from = resume_point(cfg, starts, p, d);
    format!(
        "rerun the same command with --partition {} --from {from} --append in place of its own --partition, --from and --append; if the failure was a timeout, the record at {from} may be in Kafka already (restore with --offset-header and use --resume to make resuming exact)",
        p.source.partition
    )
}

fn producer(cfg: &RestoreConfig) -> Result<BaseProducer<Deliveries>> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        // Ordered, retried without duplicates, acknowledged by all in-sync
        // replicas (idempotence implies acks=all); and a batch that fails
        // for good stops the producer instead of leaving a gap.
        .set("enable.idempotence", "true")
        .set("enable.gapless.guarantee", "true")
        // Never create a topic by producing to it.
        .set("allow.auto.create.topics", "false")
        .set("linger.ms", "5")
        // Above the archive's own record limit (16 MiB at most) with the
        // wire overhead; the brokers' and the topic's limits still apply.
        .set("message.max.bytes", (32 << 20).to_string());
    for (k, v) in &cfg.kafka {
        c.set(k, v);
    }
    c.create_with_context(Deliveries::default())
        .map_err(|e| ConnectorError::Config(format!("producer settings: {e}")))
}

/// Check the brokers answer, and every target partition exists and may be
/// restored into, before anything is produced. Returns the archived offset
/// each target partition starts at.
fn preflight(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    plan: &[(TopicPartition, TopicPartition)],
) -> Result<BTreeMap<TopicPartition, i64>> {
    let t0 = Instant::now();
    let timeout = Duration::from_millis(cfg.connect_timeout_ms);
    // All topics: asking for one by name could create it on brokers that
    // auto-create topics.
    let md = producer
        .client()
        .fetch_metadata(None, timeout)
        .map_err(|e| ConnectorError::BrokerUnreachable {
            brokers: cfg.brokers.clone(),
            waited_ms: t0.elapsed().as_millis() as u64,
            detail: e.to_string(),
        })?;
    let mut needed: BTreeMap<&str, i32> = BTreeMap::new();
    for (_, target) in plan {
        let n = needed.entry(&target.topic).or_default();
        *n = (*n).max(target.partition + 1);
    }
    for (topic, needed) in needed {
        let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
            return Err(ConnectorError::UnknownTopic {
                topic: topic.to_owned(),
                brokers: cfg.brokers.clone(),
            });
        };
        if let Some(err) = t.error() {
            return Err(ConnectorError::Kafka {
                op: "read the target topic's metadata",
                source: KafkaError::MetadataFetch(err.into()),
            });
        }
        let partitions = t.partitions().len() as i32;
        if partitions < needed {
            return Err(ConnectorError::TooFewPartitions {
                topic: topic.to_owned(),
                partitions,
                needed,
            });
        }
    }
    let mut starts = BTreeMap::new();
    let mut reader: Option<BaseConsumer> = None;
    for (_, target) in plan {
        let (low, high) = producer
            .client()
            .fetch_watermarks(&target.topic, target.partition, timeout)
            .map_err(ConnectorError::kafka(
                "fetch watermarks of a target partition",
            ))?;
        let start = if high <= low || cfg.append {
            cfg.from
        } else if cfg.resume {
            let name = cfg.offset_header.as_deref().expect("validated");
            if reader.is_none() {
                reader = Some(
                    ClientConfig::new()
                        .set("bootstrap.servers", &cfg.brokers)
                        // librdkafka assigns only within a group; this one
                        // never commits or subscribes.
                        .set("group.id", "cairn-restore-resume")
                        .set("enable.auto.commit", "false")
                        .create()
                        .map_err(ConnectorError::kafka("create a reader for --resume"))?,
                );
            }
            let consumer = reader.as_ref().expect("just created");
            let archived = last_archived_offset(consumer, target, high - 1, name, timeout)?;
            cfg.from.max(archived + 1)
        } else {
            return Err(ConnectorError::TargetNotEmpty {
                target: target.clone(),
                low,
                high,
            });
        };
        starts.insert(target.clone(), start);
    }
    Ok(starts)
}

/// The archived offset in the `name` header of the record at `offset` of
/// `target` (its last one).
fn last_archived_offset(
    consumer: &BaseConsumer,
    target: &TopicPartition,
    offset: i64,
    name: &str,
    timeout: Duration,
) -> Result<i64> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&target.topic, target.partition, Offset::Offset(offset))
        .map_err(ConnectorError::kafka("position a reader for --resume"))?;
    consumer
        .assign(&tpl)
        .map_err(ConnectorError::kafka("position a reader for --resume"))?;
    let deadline = Instant::now() + timeout;
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ConnectorError::Config(format!(
                "--resume: could not read the last record of {target} (offset {offset}) within {} ms",
                timeout.as_millis()
            )));
        }
        match consumer.poll(left.min(Duration::from_millis(500))) {
            Some(Ok(m)) if m.partition() == target.partition && m.offset() >= offset => {
                break m.headers().and_then(|hs| {
                    hs.iter()
                        .filter(|h| h.key == name)
                        .filter_map(|h| h.value)
                        .last()
                        .and_then(|v| std::str::from_utf8(v).ok())
                        .and_then(|s| s.parse::<i64>().ok())
                });
            }
            Some(Err(e)) => return Err(ConnectorError::kafka("read for --resume")(e)),
            _ => {}
        }
    };
    found.ok_or_else(|| {
        ConnectorError::Config(format!(
            "--resume: the last record of {target} (offset {offset}) has no {name:?} header holding an archived offset, so it was not written by cairn restore --offset-header {name}; restore into an empty topic, or use --append"
        ))
    })
}

/// What `send` did with a record.
enum Sent {
    Queued {
        timestamp_replaced: bool,
    },
    /// A failure was reported while waiting for room: not sent.
    Stopped,
}

/// Hand one record to librdkafka, waiting while its queue is full. An
/// error here (a record over `message.max.bytes`, say) is the record's.
fn send(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    target: &TopicPartition,
    r: &Record,
) -> Result<Sent, String> {
    let mut headers = OwnedHeaders::new_with_capacity(r.headers.len() + 1);
    for h in &r.headers {
        headers = headers.insert(Header {
            key: &h.name,
            value: h.value.as_deref(),
        });
    }
    let offset_text = r.offset.to_string();
    if let Some(name) = &cfg.offset_header {
        headers = headers.insert(Header {
            key: name,
            value: Some(offset_text.as_bytes()),
        });
    }
    let mut record: BaseRecord<'_, [u8], [u8], Box<i64>> =
        BaseRecord::with_opaque_to(&target.topic, Box::new(r.offset))
            .partition(target.partition)
            .headers(headers);
    if let Some(k) = &r.key {
        record = record.key(k.as_slice());
    }
    if let Some(v) = &r.value {
        record = record.payload(v.as_slice());
    }
    // librdkafka reads a timestamp of 0 as "now" and has no way to send one
    // at or below 0. A log-append time becomes the restored record's create
    // time; a topic set to LogAppendTime replaces it with the time of
    // restore.
    let mut timestamp_replaced = false;
    match r.timestamp_type {
        TimestampType::CreateTime | TimestampType::LogAppendTime if r.timestamp_ms > 0 => {
            record = record.timestamp(r.timestamp_ms);
        }
        TimestampType::CreateTime | TimestampType::LogAppendTime => timestamp_replaced = true,
        TimestampType::NotAvailable => {}
    }
    loop {
        match producer.send(record) {
            Ok(()) => {
                producer.poll(Duration::ZERO);
                return Ok(Sent::Queued { timestamp_replaced });
            }
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                producer.poll(Duration::from_millis(100));
                if producer.context().failed() {
                    return Ok(Sent::Stopped);
                }
            }
            Err((e, _)) => return Err(e.to_string()),
        }
    }
}

/// Delivery reports of one target partition.
#[derive(Debug, Default, Clone)]
struct PartitionDeliveries {
    acked: u64,
    first_acked: Option<i64>,
    last_acked: Option<i64>,
    /// The lowest failed archived offset, with its error.
    first_failed: Option<(i64, String)>,
}

#[derive(Debug, Default)]
struct DeliveryState {
    partitions: BTreeMap<TopicPartition, PartitionDeliveries>,
    /// The partition whose failure was reported first.
    first_failed: Option<TopicPartition>,
    /// librdkafka's fatal error, if one stopped the producer.
    fatal: Option<String>,
}

/// Delivery reports, per target partition.
#[derive(Debug, Default)]
struct Deliveries {
    state: Mutex<DeliveryState>,
}

impl Deliveries {
    fn lock(&self) -> std::sync::MutexGuard<'_, DeliveryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn fail(&self, target: &TopicPartition, offset: i64, detail: String) {
        let mut s = self.lock();
        let d = s.partitions.entry(target.clone()).or_default();
        if d.first_failed.as_ref().is_none_or(|(o, _)| offset < *o) {
            d.first_failed = Some((offset, detail));
        }
        s.first_failed.get_or_insert_with(|| target.clone());
    }

    fn failed(&self) -> bool {
        self.lock().first_failed.is_some()
    }

    fn take(&self) -> DeliveryState {
        std::mem::take(&mut *self.lock())
    }
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        // librdkafka still calls the gapless guarantee "experimental" (since
        // 1.4) and warns on every start; restore sets it on purpose and
        // checks for gaps itself (`next_step`), so that warning is noise.
        if fac == "CONFWARN" && message.contains("enable.gapless.guarantee") {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}");
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "kafka producer");
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::Fatal) {
            self.lock().fatal.get_or_insert_with(|| reason.to_owned());
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<i64>;

    fn delivery(&self, result: &DeliveryResult<'_>, offset: Box<i64>) {
        match result {
            Ok(m) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                let mut s = self.lock();
                let d = s.partitions.entry(tp).or_default();
                d.acked += 1;
                d.first_acked = Some(d.first_acked.map_or(*offset, |o| o.min(*offset)));
                d.last_acked = Some(d.last_acked.map_or(*offset, |o| o.max(*offset)));
            }
            Err((e, m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                self.fail(&tp, *offset, e.to_string());
            }
        }
    }
}

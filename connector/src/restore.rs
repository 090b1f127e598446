//! Restore: produce archived records back into Kafka.
//!
//! Each archived partition goes to the partition with the same number in its
//! target topic (the archived topic's own name, or the name `rename` maps it
//! to), in offset order, with its key, value, headers and timestamp. Kafka
//! assigns the restored records new offsets; `offset_header` keeps the
//! archived offset beside each one.
//!
//! # Invariants
//! - Nothing is produced before every check has passed: the brokers answer,
//!   every target topic exists with a partition for every archived one, and,
//!   unless `append` is set, every target partition is empty.
//! - The records of one partition reach Kafka in archive order, each once per
//!   run: the producer is idempotent (librdkafka then keeps order and retries
//!   without duplicates), and the run stops producing at the first failure.
//! - What the report (or the error) says was delivered was acknowledged by
//!   the brokers. After a failure, the failed record's archived offset is
//!   where a rerun with `from` and `append` resumes that partition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_engine::{Engine, Record, TimestampType, TopicPartition};
use rdkafka::config::ClientConfig;
use rdkafka::message::{DeliveryResult, Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::error::{ConnectorError, Result};

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
    /// Restore into partitions that already hold records.
    pub append: bool,
    /// Add a header of this name holding the archived offset (decimal).
    pub offset_header: Option<String>,
    /// How long to wait for the brokers before giving up.
    pub connect_timeout_ms: u64,
    /// How long to wait, at the end, for the brokers to acknowledge.
    pub flush_timeout_ms: u64,
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
            connect_timeout_ms: 30_000,
            flush_timeout_ms: 300_000,
            kafka: BTreeMap::new(),
        }
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(ConnectorError::Config(m));
        for key in ["bootstrap.servers", "enable.idempotence"] {
            if self.kafka.contains_key(key) {
                return bad(format!(
                    "-X {key}: cairn restore manages this property itself"
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
        if let Some(name) = &self.offset_header {
            if name.is_empty() {
                return bad("--offset-header: the name is empty".into());
            }
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
}

/// One partition's part of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRestore {
    pub source: TopicPartition,
    pub target: TopicPartition,
    /// Records acknowledged by the brokers.
    pub records: u64,
    /// Archived offsets of the first and last of them.
    pub first_offset: Option<i64>,
    pub last_offset: Option<i64>,
}

/// What a restore did.
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    pub partitions: Vec<PartitionRestore>,
    pub records: u64,
    pub payload_bytes: u64,
    pub elapsed: Duration,
}

/// The archived partitions `cfg` selects, each with its target.
pub fn plan(engine: &Engine, cfg: &RestoreConfig) -> Result<Vec<(TopicPartition, TopicPartition)>> {
    cfg.validate()?;
    let archived = engine.partitions();
    let topics: BTreeSet<String> = archived.iter().map(|p| p.tp.topic.clone()).collect();
    for t in cfg.topics.iter().chain(cfg.rename.keys()) {
        if !topics.contains(t) {
            return Err(ConnectorError::Config(format!(
                "topic {t:?}: the archive holds no such topic (it holds {})",
                list(&topics)
            )));
        }
    }
    let mut sources: BTreeMap<&str, &str> = BTreeMap::new();
    for t in &topics {
        let dst = cfg.rename.get(t).unwrap_or(t).as_str();
        if let Some(other) = sources.insert(dst, t) {
            return Err(ConnectorError::Config(format!(
                "--rename: topics {other:?} and {t:?} would both be restored into {dst:?}"
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
    if let (Some(n), true) = (cfg.partition, chosen.is_empty() && !topics.is_empty()) {
        return Err(ConnectorError::Config(format!(
            "--partition {n}: the archive holds no such partition of the chosen topics"
        )));
    }
    Ok(chosen)
}

fn list(topics: &BTreeSet<String>) -> String {
    if topics.is_empty() {
        return "none".into();
    }
    topics
        .iter()
        .map(|t| format!("{t:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Restore what `cfg` selects from `engine` into Kafka. Blocking.
pub fn restore(engine: &Engine, cfg: &RestoreConfig) -> Result<RestoreReport> {
    let t0 = Instant::now();
    let plan = plan(engine, cfg)?;
    let producer = producer(cfg)?;
    preflight(&producer, cfg, &plan)?;

    let mut report = RestoreReport::default();
    let mut sent: BTreeMap<TopicPartition, u64> = BTreeMap::new();
    // An archive that cannot be read (damage) stops the restore like a
    // failed delivery does: after what was sent has been acknowledged, so
    // that the resume points below are exact.
    let mut unreadable: Option<ConnectorError> = None;
    'partitions: for (source, target) in &plan {
        let records = match engine.read(source, cfg.from) {
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
            if let Err(detail) = send(&producer, cfg, target, &r) {
                producer.context().fail(target, r.offset, detail);
                break 'partitions;
            }
            n += 1;
            report.payload_bytes += r.payload_bytes();
            if producer.context().failed() {
                break 'partitions;
            }
        }
        sent.insert(target.clone(), n);
        tracing::info!(%source, %target, records = n, "partition sent");
    }

    // Every record sent gets its delivery report (or fails) within
    // librdkafka's message.timeout.ms; the flush waits for them all.
    let flushed = producer.flush(Duration::from_millis(cfg.flush_timeout_ms));
    producer.poll(Duration::ZERO);
    let acked = producer.context().take();
    for (source, target) in &plan {
        let a = acked.acked.get(target).copied().unwrap_or_default();
        report.records += a.records;
        report.partitions.push(PartitionRestore {
            source: source.clone(),
            target: target.clone(),
            records: a.records,
            first_offset: a.first,
            last_offset: a.last,
        });
    }
    report.elapsed = t0.elapsed();
    // Where each partition resumes: after its last acknowledged record
    // (offsets only increase, so gaps do not matter).
    let resume = |p: &PartitionRestore| p.last_offset.map_or(cfg.from, |o| o + 1);
    if acked.failure.is_some() || unreadable.is_some() {
        for p in &report.partitions {
            tracing::warn!(
                archived = %p.source,
                target = %p.target,
                delivered = p.records,
                resume_from = resume(p),
                "restore stopped"
            );
        }
    }
    if let Some(f) = acked.failure {
        let failed = report
            .partitions
            .iter()
            .find(|p| p.target == f.target)
            .expect("failures are reported for planned partitions");
        return Err(ConnectorError::RestoreFailed {
            archived: failed.source.clone(),
            target: f.target,
            offset: f.offset,
            delivered: failed.records,
            resume_from: resume(failed),
            detail: f.detail,
        });
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
        // Idempotent delivery reports every record once; a mismatch is a
        // bug, not something to report as a success.
        assert_eq!(
            p.records, n,
            "{}: {} records sent but {} acknowledged",
            p.target, n, p.records
        );
    }
    Ok(report)
}

fn producer(cfg: &RestoreConfig) -> Result<BaseProducer<Deliveries>> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.brokers)
        // Ordered, retried without duplicates, acknowledged by all in-sync
        // replicas (idempotence implies acks=all).
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        // Records up to the archive's own limit (8 MiB by default) fit; the
        // brokers' and the topic's limits still apply.
        .set("message.max.bytes", (16 << 20).to_string());
    for (k, v) in &cfg.kafka {
        c.set(k, v);
    }
    c.create_with_context(Deliveries::default())
        .map_err(|e| ConnectorError::Config(format!("producer settings: {e}")))
}

/// Check the brokers answer, and every target partition exists (and is
/// empty unless `append`), before anything is produced.
fn preflight(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    plan: &[(TopicPartition, TopicPartition)],
) -> Result<()> {
    let t0 = Instant::now();
    let timeout = Duration::from_millis(cfg.connect_timeout_ms);
    let unreachable = |detail: String| ConnectorError::BrokerUnreachable {
        brokers: cfg.brokers.clone(),
        waited_ms: t0.elapsed().as_millis() as u64,
        detail,
    };
    // All topics: asking for one by name could create it on brokers that
    // auto-create topics.
    let md = producer
        .client()
        .fetch_metadata(None, timeout)
        .map_err(|e| unreachable(e.to_string()))?;
    let partitions: BTreeMap<&str, usize> = md
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| (t.name(), t.partitions().len()))
        .collect();
    let mut needed: BTreeMap<&str, i32> = BTreeMap::new();
    for (_, target) in plan {
        let n = needed.entry(&target.topic).or_default();
        *n = (*n).max(target.partition + 1);
    }
    for (topic, needed) in needed {
        match partitions.get(topic) {
            None | Some(0) => {
                return Err(ConnectorError::UnknownTopic {
                    topic: topic.to_owned(),
                    brokers: cfg.brokers.clone(),
                })
            }
            Some(&n) if (n as i64) < needed as i64 => {
                return Err(ConnectorError::TooFewPartitions {
                    topic: topic.to_owned(),
                    partitions: n as i32,
                    needed,
                })
            }
            Some(_) => {}
        }
    }
    if !cfg.append {
        for (_, target) in plan {
            let (low, high) = producer
                .client()
                .fetch_watermarks(&target.topic, target.partition, timeout)
                .map_err(ConnectorError::kafka(
                    "fetch watermarks of a target partition",
                ))?;
            if high > low {
                return Err(ConnectorError::TargetNotEmpty {
                    target: target.clone(),
                    low,
                    high,
                });
            }
        }
    }
    Ok(())
}

/// Hand one record to librdkafka, waiting while its queue is full. An
/// error here (a record over `message.max.bytes`, say) is the record's.
fn send(
    producer: &BaseProducer<Deliveries>,
    cfg: &RestoreConfig,
    target: &TopicPartition,
    r: &Record,
) -> Result<(), String> {
    let mut headers = OwnedHeaders::new_with_capacity(r.headers.len() + 1);
    for h in &r.headers {
        headers = headers.insert(Header {
            key: &h.name,
            value: h.value.as_deref(),
        });
    }
    let offset_text = cfg.offset_header.as_ref().map(|_| r.offset.to_string());
    if let (Some(name), Some(text)) = (&cfg.offset_header, &offset_text) {
        headers = headers.insert(Header {
            key: name,
            value: Some(text.as_bytes()),
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
    match r.timestamp_type {
        // A log-append time becomes the restored record's create time; a
        // topic set to LogAppendTime replaces it with the time of restore.
        TimestampType::CreateTime | TimestampType::LogAppendTime if r.timestamp_ms >= 0 => {
            record = record.timestamp(r.timestamp_ms);
        }
        _ => {}
    }
    loop {
        match producer.send(record) {
            Ok(()) => {
                producer.poll(Duration::ZERO);
                return Ok(());
            }
            Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                record = back;
                producer.poll(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(e.to_string()),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Acked {
    records: u64,
    first: Option<i64>,
    last: Option<i64>,
}

#[derive(Debug)]
struct Failure {
    target: TopicPartition,
    offset: i64,
    detail: String,
}

#[derive(Debug, Default)]
struct DeliveryState {
    acked: BTreeMap<TopicPartition, Acked>,
    failure: Option<Failure>,
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

    /// Keep the first failure: the records after it in its partition fail
    /// too, and it is where that partition resumes.
    fn fail(&self, target: &TopicPartition, offset: i64, detail: String) {
        let mut s = self.lock();
        if s.failure.is_none() {
            s.failure = Some(Failure {
                target: target.clone(),
                offset,
                detail,
            });
        }
    }

    fn failed(&self) -> bool {
        self.lock().failure.is_some()
    }

    fn take(&self) -> DeliveryState {
        std::mem::take(&mut *self.lock())
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<i64>;

    fn delivery(&self, result: &DeliveryResult<'_>, offset: Box<i64>) {
        match result {
            Ok(m) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                let mut s = self.lock();
                let a = s.acked.entry(tp).or_default();
                a.records += 1;
                a.first.get_or_insert(*offset);
                a.last = Some(*offset);
            }
            Err((e, m)) => {
                let tp = TopicPartition::new(m.topic(), m.partition());
                self.fail(&tp, *offset, e.to_string());
            }
        }
    }
}

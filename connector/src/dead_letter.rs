//! Dead letters: records the archive will not hold (over
//! `--record-bytes-max`, or with more headers than a record may carry),
//! produced with their reason to a Kafka topic
//! (`--on-oversize dead-letter --dead-letter-topic T`) before the run goes
//! on.
//!
//! A dead letter keeps the record's key, value and headers, and adds
//! `cairn.dead-letter.reason`, `cairn.dead-letter.source`
//! (`topic/partition@offset`) and, when the record has one,
//! `cairn.dead-letter.timestamp` (its timestamp, milliseconds since the
//! epoch, in decimal). Its own timestamp is the time it is sent: the dead-
//! letter topic's time-based retention counts from a record's timestamp,
//! so a dead letter of a record older than that retention (a backlog being
//! caught up) would be deleted minutes after Kafka acknowledged it, and
//! then be neither archived nor dead-lettered (until 2026-12-06 the
//! record's own timestamp was sent).
//!
//! # Invariants
//! - A dead letter is acknowledged by Kafka (idempotent producer, all
//!   in-sync replicas) before the consumer thread takes the next record, so
//!   no commit passes a record that is neither archived nor dead-lettered.
//! - A dead letter that cannot be delivered stops the run with an error
//!   naming the record; nothing after it is committed.
//! - At least once: a crash after a dead letter and before a commit passes
//!   it sends it again on restart (the source header tells copies apart).
//!   The archive itself stays exactly once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use cairn_engine::{Record, TopicPartition};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::config::RunConfig;
use crate::convert::to_base_record;
use crate::error::{ConnectorError, Result};
use crate::librdkafka::{log_ignoring_confwarn, message_timeout_ms};

/// Header naming why a record was dead-lettered.
pub const REASON_HEADER: &str = "cairn.dead-letter.reason";
/// Header naming where a dead letter came from: `topic/partition@offset`.
pub const SOURCE_HEADER: &str = "cairn.dead-letter.source";
/// The fewest bytes a dead letter's own headers add to the record's: the
/// reason's and the source's names, a reason of one character (every
/// reason is longer) and the shortest source (`t/0@0`). librdkafka counts
/// them against `message.max.bytes` with the record's key, value and
/// headers, so an oversize record's dead letter is at least
/// `--record-bytes-max` + 1 + this.
pub const OWN_HEADERS_BYTES_MIN: u64 =
    (REASON_HEADER.len() + 1 + SOURCE_HEADER.len() + "t/0@0".len()) as u64;
/// Header holding the record's own timestamp (milliseconds since the
/// epoch, in decimal), when it has one: the dead letter's is the time it
/// was sent.
pub const TIMESTAMP_HEADER: &str = "cairn.dead-letter.timestamp";
/// librdkafka's "any partition": the producer's partitioner picks.
const ANY_PARTITION: i32 = -1;
/// librdkafka's `message.timeout.ms` for dead letters, unless `-X` sets it.
const MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// How much longer than the message timeout the wait for a report lasts.
const WAIT_MARGIN_MS: u64 = 5_000;

/// How long a dead letter's report is waited for, given its producer's
/// message timeout.
pub(crate) fn report_wait(message_timeout_ms: u64) -> Duration {
    Duration::from_millis(message_timeout_ms.saturating_add(WAIT_MARGIN_MS))
}

/// The timestamp `r` came with, for [`TIMESTAMP_HEADER`]: none when it
/// has no timestamp type, or Kafka's -1 ("no timestamp").
fn original_timestamp(r: &Record) -> Option<i64> {
    (r.timestamp_type != cairn_engine::TimestampType::NotAvailable && r.timestamp_ms != -1)
        .then_some(r.timestamp_ms)
}

/// The dead-letter producer of a run.
pub(crate) struct DeadLetters {
    producer: BaseProducer<Report>,
    topic: String,
    timeout: Duration,
    /// The producer's `message.max.bytes`, for the message of a dead
    /// letter it refuses as over it.
    message_max_bytes: String,
}

/// Producer properties the dead-letter producer sets, with the value it
/// sets (librdkafka's aliases too: with a key and its alias both set, which
/// one librdkafka keeps is random). `-X` may give the same value (the
/// consumer reads `allow.auto.create.topics` as well), not another.
/// `transactional.id` (no value of cairn's) is refused outright: it would
/// make the producer refuse every send outside a transaction it never
/// begins.
pub const MANAGED_KEYS: [(&str, Option<&str>); 6] = [
    ("enable.idempotence", Some("true")),
    // Each dead letter is waited for by its report: with only errors
    // reported, every delivered one would time out and stop the run, and
    // each restart would send it again (accepted until the night of
    // 2026-12-04; `restore` refused it already).
    ("delivery.report.only.error", Some("false")),
    ("allow.auto.create.topics", Some("false")),
    ("linger.ms", Some("0")),
    // librdkafka's alias of `linger.ms`.
    ("queue.buffering.max.ms", Some("0")),
    ("transactional.id", None),
];

/// Refuse `-X` settings that the dead-letter producer would override, or
/// that would stop it ([`MANAGED_KEYS`]).
pub(crate) fn refuse_managed_keys(
    kafka: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    crate::config::refuse_settings(kafka, MANAGED_KEYS, "the dead-letter producer")
}

/// The dead-letter producer's settings for `cfg`, and its message timeout
/// (ms). Also what `RunConfig::validate` checks, before the archive opens.
pub(crate) fn client_config(cfg: &RunConfig) -> (ClientConfig, u64) {
    let mut c = ClientConfig::new();
    // Dead letters are over the archive's limit, so as large as records
    // get: compressed (unless -X says otherwise, under either name), and
    // librdkafka's own cap at its maximum (the topic's `max.message.bytes`
    // is what limits them), unless -X gives one: set before the -X
    // settings, which override it (until the night of 2026-12-04 it was
    // set after them, and a `-X message.max.bytes` was silently ignored).
    if !crate::librdkafka::given_any(&cfg.kafka, &["compression.type", "compression.codec"]) {
        c.set("compression.type", "lz4");
    }
    c.set("message.max.bytes", "1000000000");
    // The run's -X settings (security ones above all); the consumer-only
    // ones draw a warning from librdkafka, logged at debug (`Report`).
    crate::librdkafka::set_kafka(&mut c, &cfg.kafka, &[]);
    // Every dead letter gets a definite delivery report before the wait
    // for it ends: librdkafka gives up at message.timeout.ms.
    // RunConfig::validate refused a timeout given twice or not positive.
    let message_timeout_ms = message_timeout_ms(&cfg.kafka)
        .filter(|ms| *ms > 0)
        .unwrap_or(MESSAGE_TIMEOUT_MS);
    c.set("bootstrap.servers", &cfg.brokers)
        .set("enable.idempotence", "true")
        .set("allow.auto.create.topics", "false")
        .set("delivery.report.only.error", "false")
        // One record at a time, each waited for: nothing to batch.
        .set("linger.ms", "0")
        .set("message.timeout.ms", message_timeout_ms.to_string());
    (c, message_timeout_ms)
}

impl DeadLetters {
    /// The producer for `cfg`'s dead-letter topic, if it has one.
    pub fn new(cfg: &RunConfig) -> Result<Option<DeadLetters>> {
        let Some(topic) = &cfg.dead_letter_topic else {
            return Ok(None);
        };
        let (c, message_timeout_ms) = client_config(cfg);
        let message_max_bytes = c.get("message.max.bytes").unwrap_or("?").to_owned();
        let producer = c
            .create_with_context(Report::default())
            .map_err(ConnectorError::client_settings("dead-letter producer"))?;
        Ok(Some(DeadLetters {
            producer,
            topic: topic.clone(),
            timeout: report_wait(message_timeout_ms),
            message_max_bytes,
        }))
    }

    /// Produce `r` of `tp` with its reason, and wait until Kafka has it.
    pub fn send(&self, tp: &TopicPartition, r: &Record, reason: &str) -> Result<()> {
        let source = format!("{tp}@{}", r.offset);
        let timestamp = original_timestamp(r).map(|ts| ts.to_string());
        let mut extra = vec![
            (REASON_HEADER, reason.as_bytes()),
            (SOURCE_HEADER, source.as_bytes()),
        ];
        extra.extend(
            timestamp
                .as_deref()
                .map(|ts| (TIMESTAMP_HEADER, ts.as_bytes())),
        );
        let mut record = to_base_record(r, &self.topic, ANY_PARTITION, (), &extra);
        // Stamped by the producer as it sends: the topic's retention then
        // counts from now, not from the record's own time (the header
        // keeps that).
        record.timestamp = None;
        let failed = |detail: String| ConnectorError::DeadLetterFailed {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset: r.offset,
            dead_letter_topic: self.topic.clone(),
            detail,
        };
        let last = &self.producer.context().last;
        let take = || last.lock().unwrap_or_else(|e| e.into_inner()).take();
        take();
        self.producer.send(record).map_err(|(e, _)| {
            failed(match e.rdkafka_error_code() {
                // Only one dead letter is ever in the producer's queue,
                // and none is now (each is waited for): this one alone
                // does not fit it.
                Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => format!(
                    "{e}: its value's {}",
                    crate::librdkafka::too_big_for_queue(
                        r.value.as_ref().map_or(0, |v| v.len() as u64)
                    )
                ),
                // Refused before it was sent: librdkafka's words name the
                // broker, whose limit is not what refused it.
                Some(rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge) => format!(
                    "{e}: refused by this producer, not the broker: the record ({} bytes of key, value and headers, and the dead letter's own headers) is over -X message.max.bytes ({}); raise it, or leave it unset (cairn then sets librdkafka's maximum)",
                    r.payload_bytes(),
                    self.message_max_bytes
                ),
                _ => e.to_string(),
            })
        })?;
        // Wait for the report in short polls: rust-rdkafka's flush polls in
        // 100 ms steps that run to their end, which made every dead letter
        // take at least 100 ms.
        let deadline = Instant::now() + self.timeout;
        loop {
            self.producer.poll(Duration::from_millis(1));
            match take() {
                Some(Ok(())) => return Ok(()),
                Some(Err(detail)) => return Err(failed(detail)),
                None if Instant::now() >= deadline => {
                    return Err(failed(format!(
                        "no delivery report within {} ms",
                        self.timeout.as_millis()
                    )))
                }
                None => {}
            }
        }
    }
}

/// The delivery report of the last dead letter, and the producer's client
/// errors' repeats.
#[derive(Default)]
struct Report {
    last: Mutex<Option<std::result::Result<(), String>>>,
    causes: crate::librdkafka::LastCause,
}

impl ClientContext for Report {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_ignoring_confwarn(&self.causes, level, fac, message);
    }

    /// Said here, each kind once a minute at most (rust-rdkafka's default
    /// said every one at ERROR, after its log line had said it too).
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        crate::librdkafka::say_client_error(&self.causes, &error, reason);
    }
}

impl ProducerContext for Report {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| {
            let advice = match e.rdkafka_error_code() {
                Some(rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge) => Some(" (the dead-letter topic's max.message.bytes is below this record, whose key, value and headers are sent whole: raise it on the topic, or run with --on-oversize skip or fail)"),
                // Sent with the time of sending, not the record's: only
                // this machine's clock can be out of the topic's limits.
                Some(rdkafka::types::RDKafkaErrorCode::InvalidTimestamp) => Some(" (the dead-letter topic refuses the time the dead letter was sent, which this machine's clock gave, as too far from the brokers' clock: its message.timestamp.before.max.ms and message.timestamp.after.max.ms, or message.timestamp.difference.max.ms on brokers before 3.6, are narrower than the difference; set this machine's clock right, widen them on the topic, or set message.timestamp.type=LogAppendTime there, which stamps each record with the time it is written instead)"),
                Some(code) => crate::librdkafka::produce_refusal_advice(code),
                None => None,
            };
            format!("{e}{}", advice.unwrap_or_default())
        });
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::client_config;

    /// librdkafka's cap on a dead letter is at its maximum unless `-X`
    /// gives one, which is kept (it was overridden, silently).
    #[test]
    fn message_max_bytes_is_the_users_when_given() {
        let mut cfg = crate::RunConfig::new("b:1", "g", vec!["t".into()], "/nonexistent".into());
        let cap = |cfg: &crate::RunConfig| {
            client_config(cfg)
                .0
                .get("message.max.bytes")
                .map(str::to_owned)
        };
        assert_eq!(cap(&cfg).as_deref(), Some("1000000000"));
        cfg.kafka
            .insert("message.max.bytes".into(), "2000000".into());
        assert_eq!(cap(&cfg).as_deref(), Some("2000000"));
    }
}

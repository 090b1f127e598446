//! Dead letters: records the archive will not hold (over
//! `--record-bytes-max`), produced with their reason to a Kafka topic
//! (`--on-oversize dead-letter --dead-letter-topic T`) before the run goes
//! on.
//!
//! A dead letter keeps the record's key, value, headers and timestamp, and
//! adds two headers: `cairn.dead-letter.reason` and
//! `cairn.dead-letter.source` (`topic/partition@offset`).
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
use std::time::Duration;

use cairn_engine::{Record, TimestampType, TopicPartition};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::config::RunConfig;
use crate::convert::to_base_record;
use crate::error::{ConnectorError, Result};

/// Header naming why a record was dead-lettered.
pub const REASON_HEADER: &str = "cairn.dead-letter.reason";
/// Header naming where a dead letter came from: `topic/partition@offset`.
pub const SOURCE_HEADER: &str = "cairn.dead-letter.source";
/// librdkafka's "any partition": the dead-letter topic's partitioner picks.
const ANY_PARTITION: i32 = -1;

/// The dead-letter producer of a run.
pub(crate) struct DeadLetters {
    producer: BaseProducer<Report>,
    topic: String,
    timeout: Duration,
}

impl DeadLetters {
    /// The producer for `cfg`'s dead-letter topic, if it has one.
    pub fn new(cfg: &RunConfig) -> Result<Option<DeadLetters>> {
        let Some(topic) = &cfg.dead_letter_topic else {
            return Ok(None);
        };
        let mut c = ClientConfig::new();
        // The run's -X settings (security ones above all); the consumer-only
        // ones draw a warning from librdkafka, logged at debug (`Report`).
        for (k, v) in &cfg.kafka {
            c.set(k, v);
        }
        c.set("bootstrap.servers", &cfg.brokers)
            .set("enable.idempotence", "true")
            // A dead letter is as large as the archive's limit or larger.
            .set("message.max.bytes", (64 << 20).to_string());
        let producer = c
            .create_with_context(Report::default())
            .map_err(|e| ConnectorError::Config(format!("dead-letter producer: {e}")))?;
        Ok(Some(DeadLetters {
            producer,
            topic: topic.clone(),
            timeout: Duration::from_millis(cfg.connect_timeout_ms.max(30_000)),
        }))
    }

    /// Produce `r` of `tp` with its reason, and wait until Kafka has it.
    pub fn send(&self, tp: &TopicPartition, r: &Record, reason: &str) -> Result<()> {
        let source = format!("{tp}@{}", r.offset);
        let extra = [
            (REASON_HEADER, reason.as_bytes()),
            (SOURCE_HEADER, source.as_bytes()),
        ];
        let mut record = to_base_record(r, &self.topic, ANY_PARTITION, (), &extra);
        if r.timestamp_type != TimestampType::NotAvailable && r.timestamp_ms > 0 {
            record = record.timestamp(r.timestamp_ms);
        }
        let failed = |detail: String| ConnectorError::DeadLetterFailed {
            topic: tp.topic.clone(),
            partition: tp.partition,
            offset: r.offset,
            dead_letter_topic: self.topic.clone(),
            detail,
        };
        *self
            .producer
            .context()
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        self.producer
            .send(record)
            .map_err(|(e, _)| failed(e.to_string()))?;
        self.producer
            .flush(self.timeout)
            .map_err(|e| failed(format!("not acknowledged within {:?}: {e}", self.timeout)))?;
        let outcome = self
            .producer
            .context()
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match outcome {
            Some(Ok(())) => Ok(()),
            Some(Err(detail)) => Err(failed(detail)),
            None => Err(failed("no delivery report".into())),
        }
    }
}

/// The delivery report of the last dead letter.
#[derive(Default)]
struct Report {
    last: Mutex<Option<std::result::Result<(), String>>>,
}

impl ClientContext for Report {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel as L;
        match level {
            _ if fac == "CONFWARN" => {
                tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning => {
                tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            _ => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
    }
}

impl ProducerContext for Report {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string());
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
    }
}

//! The consumer context: rebalance handling for the commit-after-durable loop.
//!
//! - **Assign:** ask the sink where each partition resumes (`open`), write
//!   those offsets into the assignment list, then assign (or incrementally
//!   assign, for cooperative-sticky). Writing them into the list before
//!   assigning is what makes the first fetch start there; a `seek` right
//!   after assign can fail with "Erroneous state". A resume offset below
//!   Kafka's earliest follows `on_offset_out_of_range`.
//! - **Revoke:** put what is buffered for the revoked partitions, make it
//!   durable, commit their durable offsets synchronously, then `close`.
//! - **Lost:** commit nothing; drop the buffer; `close`.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_engine::TopicPartition;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::OnOffsetOutOfRange;
use crate::consumer::Shared;
use crate::error::ConnectorError;
use crate::offsets::committed_offsets;

pub struct SinkContext {
    pub(crate) shared: Arc<Mutex<Shared>>,
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
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

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "librdkafka", %error, "{reason}");
    }
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
                if let Err(e) = r {
                    tracing::warn!(error = %e, "unassign failed");
                }
            }
            other => {
                tracing::error!(?other, "rebalance error; unassigning");
                let _ = c.unassign();
            }
        }
    }
}

impl SinkContext {
    fn fail(&self, e: ConnectorError) {
        let mut s = self.shared.lock().expect("shared state");
        tracing::error!(error = %e, "fatal during rebalance");
        s.fatal.get_or_insert(e);
    }

    fn on_assign(&self, c: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let tps = tps_of(tpl);
        let mut s = self.shared.lock().expect("shared state");
        let _span = tracing::info_span!("assign", partitions = tps.len()).entered();
        let resume = match s.sink.open(&tps) {
            Ok(r) => {
                crate::crashpoint::reached(crate::crashpoint::ASSIGN_AFTER_OPEN);
                r
            }
            Err(e) => {
                s.fatal
                    .get_or_insert(ConnectorError::Sink(format!("open: {e}")));
                return;
            }
        };
        // With several archive instances in one group, a partition can come
        // back after another instance archived (and committed) past this
        // store's offset. Resume from the later of the two, so the union of
        // the stores holds every record once. Alone, committed <= durable
        // always holds, and this is the archive's own offset.
        let kafka = committed_offsets(c, &tps, Duration::from_secs(10)).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "could not read committed offsets during assignment");
            Default::default()
        });
        s.tracker.record_open(&resume, &kafka);
        s.commit_after_assign = true;
        for tp in &tps {
            s.assigned.insert(tp.clone());
            let stored = match (resume.get(tp).copied(), kafka.get(tp).copied()) {
                (Some(a), Some(k)) if k > a => {
                    tracing::info!(%tp, archive = a, kafka = k, "another instance archived past this store; resuming at Kafka's committed offset");
                    Some(k)
                }
                (Some(a), _) => Some(a),
                (None, _) => None,
            };
            let Some(stored) = stored else {
                tracing::info!(%tp, "archive has nothing for this partition: resuming from Kafka's committed offset, else auto.offset.reset");
                continue;
            };
            let mut offset = stored;
            match c.fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(5)) {
                Ok((low, high)) => {
                    if stored < low {
                        match s.on_offset_out_of_range {
                            OnOffsetOutOfRange::Fail => {
                                s.fatal.get_or_insert(ConnectorError::OffsetAgedOut {
                                    topic: tp.topic.clone(),
                                    partition: tp.partition,
                                    stored,
                                    earliest: low,
                                });
                            }
                            OnOffsetOutOfRange::Earliest => {
                                tracing::error!(%tp, stored, earliest = low, lost = low - stored,
                                    "RECORDS AGED OUT OF KAFKA BEFORE THEY WERE ARCHIVED: skipping to the earliest offset");
                                offset = low;
                            }
                        }
                    } else if stored > high {
                        tracing::warn!(%tp, stored, high, "archive is ahead of Kafka's high watermark (topic recreated?)");
                    }
                }
                Err(e) => {
                    tracing::warn!(%tp, error = %e, "could not read watermarks to check retention")
                }
            }
            if let Err(e) =
                tpl.set_partition_offset(&tp.topic, tp.partition, Offset::Offset(offset))
            {
                s.fatal.get_or_insert(ConnectorError::Kafka {
                    op: "set assignment offset",
                    source: e,
                });
            }
            s.consumed.insert(tp.clone(), offset);
            tracing::info!(%tp, offset, "resuming");
        }
    }

    fn on_revoke(&self, c: &BaseConsumer<Self>, tpl: &TopicPartitionList) {
        let tps = tps_of(tpl);
        let lost = c.assignment_lost();
        let mut s = self.shared.lock().expect("shared state");
        let _span = tracing::info_span!("revoke", partitions = tps.len(), lost).entered();
        let revoked: BTreeSet<TopicPartition> = tps.iter().cloned().collect();
        if s.clean_finish && !lost {
            // Closing after a clean stop: the final commit was already made.
            tracing::debug!("revoked at close after the final commit");
            s.drop_pending(&revoked);
        } else if lost || s.commits_closed || s.fatal.is_some() {
            tracing::warn!(
                lost,
                commits_closed = s.commits_closed,
                "partitions gone without a commit"
            );
            s.drop_pending(&revoked);
        } else {
            // Finish: put what is buffered, then commit durable offsets synchronously.
            if let Err(e) = s.put_pending(c, Some(&revoked)) {
                s.fatal.get_or_insert(e);
            } else if let Err(e) = {
                crate::crashpoint::reached(crate::crashpoint::REVOKE_BEFORE_COMMIT);
                s.commit(c, Some(&revoked))
            } {
                s.fatal.get_or_insert(e);
            }
        }
        if let Err(e) = s.sink.close(&tps) {
            s.fatal
                .get_or_insert(ConnectorError::Sink(format!("close: {e}")));
        }
        for tp in &tps {
            s.assigned.remove(tp);
            s.consumed.remove(tp);
            s.tracker.forget(tp);
        }
    }
}

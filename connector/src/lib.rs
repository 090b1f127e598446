//! cairn-connector: the commit-after-durable Kafka consumer loop, the
//! `SinkTask` trait it drives, and the `cairn` command-line tool.
//!
//! # Invariants
//! - The offset committed to Kafka never passes what the sink reported
//!   durable (`commit.rs`: commits are taken only from what `open`, `start`
//!   and `pre_commit` declared, which a `put`'s report can only lower, never
//!   raise; `open`'s and `start`'s are checked against Kafka's log bounds
//!   at the assignment, `put`'s and `pre_commit`'s against the records
//!   handed to the sink; the archive
//!   sink reports the engine's durable offsets, read after its fsync).
//! - A fatal sink error (a poisoned engine) stops the loop with nothing more
//!   committed.

// Hidden from the docs: the `cairn` binary's own (its commands, its
// process-wide malloc settings, its test hooks) and the bench's (the raw
// fetch queue), public for them and for tests, not an embedder's API.
#[doc(hidden)]
pub mod allocator;
#[doc(hidden)]
pub mod cli;
pub mod commit;
mod committer;
pub mod config;
pub mod consumer;
pub mod convert;
mod count;
#[doc(hidden)]
pub mod crashpoint;
pub mod dead_letter;
pub mod error;
mod handed;
// librdkafka's queue forwarding and queue consumer, which rust-rdkafka does
// not offer: with `handover` below, the crate's only FFI beyond the
// allocator's.
#[allow(unsafe_code)]
#[doc(hidden)]
pub mod fetch;
// A commit handed to librdkafka under the pipeline's lock and waited for
// outside it, which rust-rdkafka's `commit` does not offer.
#[allow(unsafe_code)]
mod handover;
mod librdkafka;
pub mod live;
mod metrics;
pub mod offsets;
mod pipeline;
mod progress;
pub mod pruner;
mod queue;
pub mod rebalance;
mod recycle;
mod reset;
pub mod restore;
mod retention;
pub mod selection;
mod set_aside_log;
pub mod task;
// librdkafka's DescribeTopics (Kafka's topic ids), which rust-rdkafka does
// not offer.
#[doc(hidden)]
pub mod testing;
#[allow(unsafe_code)]
mod topic_ids;
mod worker;

/// The record types a [`SinkTask`] is handed, re-exported so that a sink
/// of its own needs no dependency on `cairn-engine`.
pub use cairn_engine::{Header, Record, RecordBatch, TimestampType, TopicId, TopicPartition};
pub use config::{CommitPolicy, OnOffsetOutOfRange, OnOversize, RunConfig};
pub use consumer::{
    run_pipeline, CommitObserver, DonePredicate, PipelineOptions, ProgressObserver, RunReport,
    RunStats,
};
pub use error::{ConnectorError, RestoreFailure, Result};
pub use progress::{Lag, PartitionProgress, Progress};
pub use task::{ArchiveSink, DurableCheck, KafkaTopicId, PutOutcome, SinkTask, TaskError};
pub use worker::REVOKE_RETRY;

//! cairn-engine: a durable, checksummed write-ahead record log in sled.
//!
//! Callers hand it batches of records that carry their source offsets. It
//! writes each batch as CRC-protected frames, then a read index entry and
//! per-partition summaries (ordered inserts: sled's log is a prefix after a
//! crash, and recovery rebuilds the derived keys); then it flushes sled
//! and fdatasyncs sled's data file (sled's own flush is not an fsync), and
//! only then reports the new durable next offsets. Concurrent appends share
//! one fsync (group commit). `write` and `sync` split an append in two, so
//! that a caller can pay one fsync for many writes.
//!
//! ```no_run
//! use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
//! let engine = Engine::open(EngineConfig::new("/tmp/archive"))?;
//! let tp = TopicPartition::new("orders", 0);
//! let durable = engine.append(&[RecordBatch {
//!     tp: tp.clone(),
//!     records: vec![Record::with_value(0, "hello")],
//! }])?;
//! assert_eq!(durable.get(&tp), Some(1)); // commit 1 to Kafka
//! for r in engine.read(&tp, 0)? {
//!     println!("{:?}", r?);
//! }
//! engine.close()?;
//! # Ok::<(), cairn_engine::Error>(())
//! ```
//!
//! # Invariants
//! - What `append` reports durable is on stable storage.
//! - Stored offsets strictly increase per partition; nothing is stored twice.
//! - Corruption is returned as a typed error with its location, never
//!   skipped; only a torn last entry may be truncated, by recovery.
//! - After a failed fsync the engine is poisoned and never retries.
//!
//! The on-disk format is specified in `docs/FORMAT.md`.

#![forbid(unsafe_code)]

// The on-disk format's modules (`body`, `frame`, `index`, `keys`, `meta`,
// `slots`, `watermark`) are public for the golden-bytes and corruption
// tests, the benches and the fuzz targets, and hidden from the docs: they
// are not the embedding API. Their decoders take any bytes and return typed
// corruption; their encoders take the engine's own, already validated
// arguments and may panic on others (a negative offset, an empty entry).
mod backup;
#[doc(hidden)]
pub mod body;
pub mod config;
pub mod crashpoint;
mod engine;
mod entry;
pub mod error;
#[doc(hidden)]
pub mod frame;
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod index;
#[doc(hidden)]
pub mod keys;
mod lock;
#[doc(hidden)]
pub mod meta;
pub mod offsets;
pub mod poisoned;
mod reader;
pub mod record;
mod recovery;
mod removal;
mod retention;
mod segments;
mod sled_conf;
#[doc(hidden)]
pub mod slots;
mod summaries;
mod sync;
pub mod topics;
mod truncation_lock;
mod verify;
#[doc(hidden)]
pub mod watermark;
#[doc(hidden)]
pub mod writeback;

pub use backup::{
    empty_but_for_a_lock, mode_refusal, named_inside, occupied_refusal, refuse_unfinished_backup,
    BackupReport, BACKUP_INCOMPLETE_FILE, FAILPOINT_BACKUP_AFTER_LOG,
    FAILPOINT_BACKUP_COMPLETE_SYNC,
};
pub use config::{
    EngineConfig, RecoveryMode, CHECKPOINT_INTERVAL_BYTES_MAX, CHECKPOINT_INTERVAL_BYTES_MIN,
    FRAME_BODY_BYTES_WRITE_MAX, RECORD_BYTES_MAX_LIMIT, SLED_SEGMENT_BYTES,
};
pub use engine::{
    dropping_failing_store, Engine, EngineStats, PartitionInfo, Written, DURABLE_VIEW_OP,
    FAILPOINT_AFTER_SYNC, FAILPOINT_AFTER_WRITE, FAILPOINT_CLOSE_SYNCED, FAILPOINT_MID_WRITE,
    FAILPOINT_READ_TOPIC_ID, FAILPOINT_SYNC_LEAD, FAILPOINT_TOP_UP, FAILPOINT_VIEW_CHECK,
};
pub use error::{panic_message, shell_word, CorruptionKind, Error, InvalidInput, Location, Result};
pub use lock::{FAILPOINT_LOCK_AFTER_OPEN, LOCK_FILE};
pub use meta::StoreId;
pub use offsets::DurableOffsets;
pub use reader::{HoldingRecord, RecordIter, FAILPOINT_READ_FILL};
pub use record::{
    validate_topic, Header, Record, RecordBatch, TimestampType, TopicPartition, AGELESS_BEFORE_MS,
    HEADERS_PER_RECORD_MAX,
};
pub use recovery::{RecoveryReport, TruncatedTail, FAILPOINT_RECOVERY_MID_REPAIR};
pub use removal::{
    is_store_file, remove_if_empty, EmptyStoreRemoval, FAILPOINT_REMOVAL_BEFORE_DB,
    FAILPOINT_REMOVAL_DIR,
};
pub use retention::{
    TruncateReport, TruncationPass, FAILPOINT_EMPTYING_COUNT, PLAN_ENTRIES_PER_ASK,
    TRUNCATE_ENTRIES_PER_STEP, TRUNCATE_FRAMES_PER_STEP,
};
pub use segments::DamagedHeader;
pub use sync::{FAILPOINT_FLUSH_ERR, FAILPOINT_SYNC_DIR};
pub use topics::TopicId;
pub use verify::{
    verify_store, verify_store_unless, Problem, VerifyReport, FAILPOINT_VERIFY_AFTER_LOG,
    PROBLEMS_LISTED_MAX,
};
pub use writeback::{FAILPOINT_WRITEBACK_ERR, WRITEBACK_BYTES, WRITEBACK_OP};

//! The connector's one error type. Every variant names the setting, broker,
//! topic or record it is about, in one line.

use crate::count::{counted, counted_were};
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorError {
    /// A flag, setting or argument refused, or one that meets nothing in
    /// the archive or Kafka; the message begins with what it is about
    /// (`--partition 9: …`). (Until 2026-12-07 every one was headed
    /// "invalid configuration", also those about no configuration at all:
    /// an export's range, a prune's cut; an audit.)
    #[error("{0}")]
    Config(String),
    /// A restore refused before it sent anything, for what the archive or
    /// the target holds, or what could not be read of it (not its flags).
    #[error("restore refused: {0}")]
    RestoreRefused(String),
    /// A read served by the running `cairn run` (live.rs) failed.
    #[error("{0}")]
    Live(String),
    /// A signal stopped the wait for the brokers to answer, before
    /// anything was archived, sent or committed.
    #[error("stopped by a signal after {waited_ms} ms of waiting for Kafka at {brokers} to answer (asked for {asked_for}): nothing was archived, sent or committed")]
    StoppedWaiting {
        brokers: String,
        /// What was asked: "the cluster's metadata", a partition's watermarks.
        asked_for: String,
        waited_ms: u64,
    },
    #[error("cannot reach Kafka at {brokers} after {waited_ms} ms: {detail}; check the address and any -X security settings, or give Kafka longer with --connect-timeout-ms")]
    BrokerUnreachable {
        brokers: String,
        waited_ms: u64,
        detail: String,
    },
    /// Kafka answered the caller's check before the store was opened
    /// (`cairn run`'s), and not the run's own after it: gone meanwhile (a
    /// broker restarting during a long recovery), not a mistyped address.
    #[error("Kafka at {brokers} answered before the archive was opened, but not again within {waited_ms} ms after it: {detail}; nothing was fetched or committed. Run again once Kafka is back (a broker restarting, a network cut), or give Kafka longer with --connect-timeout-ms (a wait this short can end before a healthy cluster answers twice)")]
    KafkaGone {
        brokers: String,
        waited_ms: u64,
        detail: String,
    },
    #[error("topic {topic:?} does not exist on {brokers} (or is not visible to this client: check its ACLs); {next_step}")]
    UnknownTopic {
        topic: String,
        brokers: String,
        /// What to do about it, which depends on the command.
        next_step: String,
    },
    /// A topic the brokers list with an error of its own: it exists (or
    /// is being created), but cannot be read from yet.
    #[error("topic {topic:?}{named_by} on {brokers} cannot be used now: Kafka answered {why} for it (a topic still being created, or partitions without a leader); run again once the topic has settled")]
    TopicUnavailable {
        topic: String,
        /// What named it, as ` (given to --dead-letter-topic)` or ` (topics
        /// set in FILE)`, as `UnknownTopic`'s next step names it (since the
        /// night of 2026-12-04).
        named_by: String,
        brokers: String,
        why: String,
    },
    #[error("record {topic}/{partition}@{offset} is {size_bytes} bytes, over the limit of {max_bytes} ({})", oversize_remedy(*size_bytes))]
    OversizeRecord {
        topic: String,
        partition: i32,
        offset: i64,
        size_bytes: u64,
        max_bytes: u64,
    },
    /// A record whose header name is not UTF-8: Kafka's protocol makes
    /// header names strings, the archive stores them as such, and
    /// rust-rdkafka cannot hand such a name over.
    #[error("record {topic}/{partition}@{offset} cannot be archived: {detail} (--on-oversize skip skips such records, and oversize ones too)")]
    UnreadableRecord {
        topic: String,
        partition: i32,
        offset: i64,
        detail: String,
    },
    /// A record the engine would refuse for its shape (too many headers),
    /// caught before it reaches the engine and handled as oversize.
    #[error("{0} (use --on-oversize skip to skip such records, or --on-oversize dead-letter to send them to a topic)")]
    RecordRefused(cairn_engine::InvalidInput),
    #[error("record {topic}/{partition}@{offset} could not be dead-lettered to {dead_letter_topic}: {detail} (nothing after it is committed)")]
    DeadLetterFailed {
        topic: String,
        partition: i32,
        offset: i64,
        dead_letter_topic: String,
        detail: String,
    },
    #[error("stored offset {stored} of {topic}/{partition} is older than Kafka's earliest {earliest}: {} aged out of retention (set --on-offset-out-of-range earliest to skip them)", records_from_to(*.stored, *.earliest))]
    OffsetAgedOut {
        topic: String,
        partition: i32,
        stored: i64,
        earliest: i64,
    },
    #[error("position {position} of {topic}/{partition} is past Kafka's log end {log_end}: the partition was truncated or the topic recreated, and its new records would reuse offsets the archive holds (archive them into a new --data directory, with a new --group: one this group committed here is past the log end too, if it committed one)")]
    OffsetBeyondLogEnd {
        topic: String,
        partition: i32,
        position: i64,
        log_end: i64,
    },
    #[error("topic {topic:?} has {}, but the archive's partition {last} needs {needed} (a restore puts each record in the partition of its number: give the topic at least {needed} partitions, or restore the partitions below {partitions} one at a time, each with --partition N)", counted(*partitions as u64, "partition"), last = needed - 1)]
    TooFewPartitions {
        topic: String,
        partitions: i64,
        needed: i64,
    },
    #[error("{target} already holds records (offsets {low}..{high}){others}; restoring would add the archive's records after them (pass --append to do that, or --resume to continue an earlier restore made with --offset-header). If they are an earlier restore's of this archive, stopped or killed, --append would write them a second time: read the target's last record, find its archived offset (cairn export of that partition prints each record's: match its key, value and timestamp; the target's offsets are not the archive's wherever the archive's have gaps, as transaction markers and compaction leave), and go on after it with --from and --append, per partition")]
    TargetNotEmpty {
        target: cairn_engine::TopicPartition,
        low: i64,
        high: i64,
        /// The other target partitions that hold records, as text
        /// (", and so do …"), or empty: all are named at once.
        others: String,
    },
    #[error(transparent)]
    RestoreFailed(Box<RestoreFailure>),
    /// A restore into the archive's own topic whose passing over of its
    /// copies in the archive failed (`head`: how the restore itself went).
    #[error("{head}, but the archive could not record that it passes over the copies restored into its own topic: {source}. A `cairn run` of it would archive them again beside their originals: archive that topic into a new --data from now on, or expect each copy twice in this archive")]
    CopiesNotPassedOver {
        head: String,
        #[source]
        source: Box<ConnectorError>,
    },
    #[error(
        "restore stopped on request after {} delivered. Next: {next_step}", counted_were(*delivered, "record")
    )]
    RestoreStopped { delivered: u64, next_step: String },
    /// A restore that stopped part-way for a cause of its own (damage
    /// met in the archive, its last flush failed), with what to run next.
    #[error(
        "restore stopped after {} delivered: {source}. Next: {next_step}", counted_were(*delivered, "record")
    )]
    RestoreCut {
        delivered: u64,
        #[source]
        source: Box<ConnectorError>,
        next_step: String,
    },
    #[error("{target}: {} sent but {acknowledged} acknowledged, with no failure reported: the others may or may not be in Kafka. Next: {next_step}", counted_were(*sent, "record"))]
    RestoreUnconfirmed {
        target: cairn_engine::TopicPartition,
        sent: u64,
        acknowledged: u64,
        next_step: String,
    },
    /// A restore's records were all acknowledged, but at target offsets
    /// with others between them.
    #[error("{target}: the restore's {} acknowledged at offsets {first} to {last}, which hold {held}: another producer wrote to the topic during the restore, so other records lie among the archive's. Every record was delivered, once: do not run this restore again, which would write them all a second time; for the archive's records alone and in order, restore into an empty topic nothing else writes to", counted_were(*acknowledged, "record"))]
    RestoreInterleaved {
        target: cairn_engine::TopicPartition,
        acknowledged: u64,
        first: i64,
        last: i64,
        held: u64,
    },
    /// The restore's records lie together, but records appeared in the
    /// target between its check (which found it ending at `checked_end`)
    /// and the first of them (at `first`).
    #[error("{target}: the restore's {} acknowledged from offset {first}, but the target ended at offset {checked_end} when it was checked: records appeared at offsets {checked_end} to {appeared_last} meanwhile. Either another producer wrote them (or had them in a transaction still open when the target was checked: its records then sat past the offset the check reads, the last stable one), or an earlier restore of this archive that was stopped (killed) had written them and they were not yet replicated when this run read the target: then they are in it twice. Every record of this run was delivered, once: do not run it again; read those offsets to tell which (kcat -C -t TOPIC -p PARTITION -o {checked_end}), and for the archive's records alone and once, restore into an empty topic nothing else writes to", counted_were(*acknowledged, "record"), appeared_last = .first - 1)]
    RestoreStartedPast {
        target: cairn_engine::TopicPartition,
        acknowledged: u64,
        checked_end: i64,
        first: i64,
    },
    #[error("kafka error during {op}: {source}")]
    Kafka {
        op: &'static str,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// As `Kafka`, with librdkafka's description of it (which names the
    /// topic or partition).
    #[error("kafka error during {op}: {why} ({source})")]
    KafkaWhy {
        op: &'static str,
        why: Box<str>,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// As `Kafka`, naming the topic or partition it concerned.
    #[error("kafka error during {op} of {at}: {source}")]
    KafkaAt {
        op: &'static str,
        at: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error(transparent)]
    Engine(#[from] cairn_engine::Error),
    /// The archive is held by another process (`Error::Locked`), and no
    /// running cairn answered on its socket.
    #[error("store {} is locked by {holder}: {advice}", path.display())]
    ArchiveLocked {
        path: PathBuf,
        holder: String,
        /// When to try again, for the holder found.
        advice: String,
    },
    /// sled 0.34.7 panics on some damage to its own files (its issues
    /// #1155, #1387): an open that panicked, caught and said as an error.
    #[error("the archive at {} could not be opened: the open panicked ({detail}): damage in sled's own files that sled does not handle, or a bug; no record was changed (cairn verify --data {} says what it can)", path.display(), cairn_engine::shell_word(path))]
    OpenPanicked { path: PathBuf, detail: String },
    /// A panic in sled after the open, while a command read (or pruned) a
    /// stopped archive: caught and said as an error, as the open's is.
    #[error("{command} of the archive at {} stopped: reading it panicked ({detail}): damage in sled's own files that sled does not handle, or a bug (cairn verify --data {} says what it can){output}", path.display(), cairn_engine::shell_word(path))]
    ReadPanicked {
        command: &'static str,
        path: PathBuf,
        detail: String,
        /// What the command's output holds, or what it did.
        output: String,
    },
    /// A byte string `--format jsonl-text` cannot write as text.
    #[error("record {record}: its {field} is not UTF-8 from its byte {valid_up_to} (counted from 0), so --format jsonl-text cannot write it; --format jsonl writes it in base64")]
    NotText {
        record: String,
        field: String,
        valid_up_to: usize,
    },
    /// A call of the sink's ([`SinkTask`](crate::SinkTask)) failed, or
    /// kept failing: the message names the call (`put: fatal: …`). Only
    /// the sink's own failures read "sink failed" (since 2026-12-07; before,
    /// the loop's own failures, such as a thread that did not start, the
    /// demo's checks, or a request refused after the run failed, did too,
    /// and an embedder could not tell them from its sink's).
    #[error("sink failed: {0}")]
    Sink(String),
    /// A step outside the sink failed (the first retention pass of a run,
    /// before it archives; installing the signal handlers; joining or
    /// starting the run's threads; an invariant of the loop; the demo's
    /// checks), or a request refused because the run had failed already:
    /// the message names it. Until the night of 2026-12-04 the first of
    /// these read "sink failed", and the rest until 2026-12-07.
    #[error("{0}")]
    Failed(String),
    /// A thread of the loop panicked (an invariant assertion, a sink's or
    /// an embedder's observer's panic): the run stopped, and nothing more
    /// was committed.
    #[error("the {thread} thread panicked ({detail}); nothing more is committed")]
    Panicked {
        /// `task` (the sink's calls), `consumer` (the loop's own).
        thread: &'static str,
        detail: String,
    },
    /// The sink's word went back below an offset this run committed on
    /// its earlier word (a commit handed to librdkafka, acknowledged or
    /// not): committed <= durable no longer holds.
    #[error("the sink reported {topic}/{partition} durable only up to offset {durable}, below offset {committed}, which this run committed to Kafka on its earlier word (acknowledged or not, Kafka may hold it): records {durable}..{committed} may be counted as archived by Kafka but the sink no longer holds them (it lost them, or has a bug); nothing more is committed. A sink with an identity resumes from its own offset on the next run and reads them again; for one without, set the group's offset of {topic}/{partition} back to {durable} before running again")]
    SinkLostCommitted {
        topic: String,
        partition: i32,
        durable: i64,
        committed: i64,
    },
    /// The sink reported durable an offset past the records handed to it
    /// (or where its partition resumed): a bug of the sink's, which would
    /// have Kafka count records the sink never held.
    #[error("the sink's {call} reported {topic}/{partition} durable at offset {offset}, past the records handed to it (below {handed}): a bug in the sink; nothing more is committed, and none of that call's offsets")]
    SinkOverclaimed {
        call: &'static str,
        topic: String,
        partition: i32,
        offset: i64,
        /// The offset below which records were handed (or where the
        /// partition resumed).
        handed: i64,
    },
    #[error("i/o error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An export whose last write, or putting its file in place, failed
    /// after every record was handed to the output.
    #[error("the export's output {path} failed at its end: {source}{output}")]
    ExportOutput {
        path: PathBuf,
        #[source]
        source: std::io::Error,
        /// What the output holds (`; <stdout> received ...`).
        output: String,
    },
    /// An export that stopped part-way: damage met, or its output failed.
    #[error("export stopped after {}{after}{at}: {source}{output}", counted(*records, "record"), after = last.as_ref().map(|l| format!(" (the last {l})")).unwrap_or_default(), at = reading.as_ref().map(|r| format!(", reading {r}")).unwrap_or_default())]
    ExportStopped {
        records: u64,
        /// The last record written, as `t/p@o`.
        last: Option<String>,
        /// Where the read stood when the archive's damage (or a read
        /// error) stopped it: the partition, and the offset after which
        /// its records are missing; `None` when the output stopped it.
        reading: Option<String>,
        #[source]
        source: Box<ConnectorError>,
        /// What the output holds, as the command that owns it tells
        /// (`; <stdout> received ...`), or empty.
        output: String,
    },
    #[error("pipeline stopped by a simulated crash (test hook)")]
    SimulatedCrash,
}

impl ConnectorError {
    /// A librdkafka error of `op`, with any credential a refused setting
    /// quotes left out (`librdkafka::redacted`).
    pub fn kafka(op: &'static str) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| ConnectorError::Kafka {
            op,
            source: crate::librdkafka::redacted(source),
        }
    }

    /// A client's settings that librdkafka refused when `what` was made,
    /// as a configuration error, with any credential it quotes left out.
    pub(crate) fn client_settings(
        what: &'static str,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |e| {
            ConnectorError::Config(format!(
                "{what}: {}",
                crate::librdkafka::settings_refused(e)
            ))
        }
    }

    /// [`kafka`](Self::kafka), naming what it concerned (`t`, `t/p`).
    pub fn kafka_at(
        op: &'static str,
        at: impl std::fmt::Display,
    ) -> impl FnOnce(rdkafka::error::KafkaError) -> Self {
        move |source| ConnectorError::KafkaAt {
            op,
            at: at.to_string(),
            source: crate::librdkafka::redacted(source),
        }
    }
}

pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;

/// The offsets `from..to` as a reader counts them: "record 11040" for one
/// (until 2026-12-07 the half-open "records 11040..11041"; found by an
/// audit), "records 100 to 149 (50)" for more.
pub(crate) fn records_from_to(from: i64, to: i64) -> String {
    match to.saturating_sub(from) {
        1 => format!("record {from}"),
        n => format!("records {from} to {} ({n})", to.saturating_sub(1)),
    }
}

/// What to do about a record over `--record-bytes-max`: first what loses
/// nothing, a higher limit, while the record is within the archive's
/// largest; then the policies that leave it out of the archive.
fn oversize_remedy(size_bytes: u64) -> String {
    let others = "--on-oversize skip to skip such records, or --on-oversize dead-letter to send them to a topic";
    let limit = cairn_engine::RECORD_BYTES_MAX_LIMIT;
    if size_bytes <= limit {
        format!("to archive it, raise --record-bytes-max to {size_bytes} or more, up to {limit}; or use {others}")
    } else {
        format!("over the largest --record-bytes-max, {limit}: use {others}")
    }
}

/// Where a restore stopped (boxed in [`ConnectorError::RestoreFailed`]: it
/// is large).
#[derive(Debug, thiserror::Error)]
#[error("restoring {archived} into {target} failed at archived offset {offset}: {detail}; {delivered} of its records were delivered. Next: {next_step}")]
pub struct RestoreFailure {
    pub archived: cairn_engine::TopicPartition,
    pub target: cairn_engine::TopicPartition,
    /// The first record that failed.
    pub offset: i64,
    /// Records of the partition acknowledged.
    pub delivered: u64,
    /// What to run next.
    pub next_step: String,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Aged-out records are said as a reader counts them.
    #[test]
    fn aged_out_records_are_counted_as_a_reader_counts() {
        let e = |stored, earliest| {
            ConnectorError::OffsetAgedOut {
                topic: "t".into(),
                partition: 0,
                stored,
                earliest,
            }
            .to_string()
        };
        assert!(
            e(11_040, 11_041).contains(": record 11040 aged out"),
            "{}",
            e(11_040, 11_041)
        );
        assert!(
            e(100, 150).contains(": records 100 to 149 (50) aged out"),
            "{}",
            e(100, 150)
        );
    }
}

//! The Kafka Connect sink contract, in Rust, and the archive sink on the engine.
//!
//! # Writing a sink
//! The loop commits to Kafka only offsets the sink declared durable. What a
//! correct sink must do, in short (the numbered list below has the whole
//! contract):
//! - **`open`** returns, per partition, the next offset it holds durably
//!   if it keeps offsets of its own (the loop rewinds there, unless
//!   Kafka's committed offset is ahead of it and not this sink's: see 1.
//!   below), or nothing, to resume at Kafka's committed offset (records
//!   made durable but not yet committed before a crash then come again:
//!   at least once). Either way, what it made durable before must stay:
//!   Kafka's commits count it as archived.
//! - **`put`** writes the records (each carries its offset) and may return
//!   nothing durable yet. A write that fails for good returns
//!   [`TaskError::Fatal`]; [`TaskError::Retriable`] brings the same batch
//!   again, so it must leave none of it written.
//! - **`pre_commit`** makes what was put durable (an fsync, a transaction's
//!   commit) and returns the next offset after the records now durable,
//!   never past those handed to it. A failed fsync returns `Fatal`: it is
//!   never retried, and nothing more is committed.
//! - **`close`** drops what the sink buffered of partitions taken away; it
//!   must not write them to a store other members share.
//!
//! The commit policy ([`RunConfig::commit`](crate::RunConfig::commit)) sets
//! how often `pre_commit` runs: after every put (`CommitPolicy::EveryPut`,
//! `--commit every-put`) or once an interval (`CommitPolicy::Interval`,
//! `--commit interval:MS`). Below, the flags of `cairn run` name the
//! [`RunConfig`](crate::RunConfig) fields of the same names.
//! `connector/examples/file_sink.rs` is a whole sink with offsets of its
//! own; this one, one file appended to across runs, resumed from Kafka's
//! offsets, is the least a durable sink needs:
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::fs::{File, OpenOptions};
//! use std::io::Write;
//!
//! use cairn_connector::{
//!     run_pipeline, PipelineOptions, PutOutcome, RecordBatch, RunConfig, SinkTask, TaskError,
//!     TopicPartition,
//! };
//!
//! struct Lines {
//!     file: File,
//!     /// Next offset after what each partition put: durable at the next fsync.
//!     written: BTreeMap<TopicPartition, i64>,
//! }
//!
//! impl SinkTask for Lines {
//!     fn open(
//!         &mut self,
//!         _partitions: &[TopicPartition],
//!     ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
//!         Ok(BTreeMap::new()) // no offsets of its own: resume at Kafka's
//!     }
//!
//!     fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
//!         let mut out = PutOutcome::default(); // nothing durable until the fsync
//!         for b in batches {
//!             for r in &b.records {
//!                 let value = r.value.as_deref().unwrap_or_default();
//!                 writeln!(self.file, "{} {}", b.tp, String::from_utf8_lossy(value))
//!                     .map_err(|e| TaskError::Fatal(format!("write: {e}")))?;
//!                 self.written.insert(b.tp.clone(), r.offset + 1);
//!                 out.records_written += 1;
//!             }
//!         }
//!         Ok(out)
//!     }
//!
//!     fn pre_commit(
//!         &mut self,
//!         _consumed: &BTreeMap<TopicPartition, i64>,
//!     ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
//!         // Never retried: a failed fsync may have dropped the pages.
//!         self.file.sync_data().map_err(|e| TaskError::Fatal(format!("fsync: {e}")))?;
//!         Ok(std::mem::take(&mut self.written))
//!     }
//!
//!     fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), TaskError> {
//!         // Its file is its own: what was written may stay (and is fetched
//!         // again by the partition's next owner, from Kafka's offset).
//!         for tp in partitions {
//!             self.written.remove(tp);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cfg = RunConfig::new("localhost:9092", "lines", vec!["events".into()], "unused".into());
//! // Appended to, never truncated: what an earlier run made durable is
//! // committed in Kafka already. The directory is synced once, so that a
//! // file just created survives a crash with the records fsynced into it.
//! let file = OpenOptions::new().create(true).append(true).open("events.lines")?;
//! File::open(".")?.sync_all()?;
//! let sink = Lines { file, written: BTreeMap::new() };
//! // Runs until `PipelineOptions::stop` is set (or `done` says so).
//! let report = run_pipeline(&cfg, Box::new(sink), PipelineOptions::default())?;
//! println!("{} records written", report.stats.records_written);
//! # Ok(())
//! # }
//! ```
//!
//! The consumer loop drives a [`SinkTask`] from one thread of its own, the
//! task thread (`worker.rs`): every call below runs there, one at a time, in
//! the order the consumer thread handed the work over. A sink needs no
//! locking of its own, except for what its
//! [`durable_check`](SinkTask::durable_check) closure shares with it: that
//! is called on other threads, while the task thread may be in a call.
//! Every call should be bounded in time: the loop has no deadline on a
//! call that never returns (only a `put` that keeps failing retriably is
//! bounded, below), and a revoke, the final commit and the run's stop wait
//! behind it (`cairn run` exits at a second signal; an embedder's run has
//! no such way out). Three calls come from the thread that started the run
//! instead, before the task thread exists: `identity`, `durable_check` (its
//! closure then runs on the loop's other threads), and the `stop` of a run
//! stopped (a signal, a failed retention pass) while it waited for Kafka to
//! answer, before any `open`: the sink then holds nothing of this run.
//!
//! 1. **`check_topics(ids)`** runs first at every assignment, with Kafka's
//!    topic id of each topic in it (or why it could not be read): a sink
//!    that resumes from offsets it stored refuses a topic that is not the
//!    one it stored them for (deleted and created again under its name),
//!    and the run fails before `open`.
//!    **`open(partitions)`** runs after every assignment, before the first
//!    fetch. It returns the offset to resume each partition from, if the sink
//!    owns it; the loop rewinds the consumer there ("rewind on open"), and
//!    commits it as it is, with no `pre_commit`: it must be durable already
//!    (unless Kafka's log bounds could not be read at the assignment: then
//!    it is committed only once a put of the partition is durable, or, with
//!    no record to put, once its fetch reaches the log's end there, through
//!    a `pre_commit`). One
//!    exception: when Kafka's committed offset is past it and was not
//!    committed by this sink (its [`identity`](SinkTask::identity); a sink
//!    without one never claims a commit), another member is taken to have
//!    written the records between, and the partition resumes at Kafka's
//!    offset (logged). A sink whose storage can go back in time (restored
//!    from an older copy) should have an identity, so that it gets those
//!    records again. A partition the sink does not know resumes from Kafka's
//!    committed offset, and failing that from `auto.offset.reset`; one whose
//!    Kafka offset this sink committed itself (it held the partition and
//!    lost it) resumes at Kafka's log start.
//!    Then **`start(starts)`**, for the partitions that start at a number
//!    neither `open` nor Kafka's committed offset gave (`latest`'s log end,
//!    or that log start): a sink that records them durably returns them,
//!    and the loop treats them as `open`'s (the default records nothing).
//! 2. **`put(batches)`** writes records, or buffers them. It returns what the
//!    sink now reports durable, if anything (Kafka Connect's `put` reports
//!    nothing; a sink that makes each put durable may say so at once). Of
//!    what follows a put, only `pre_commit`'s offsets are committed (`open`'s
//!    are committed as checked against Kafka's log bounds, above, and
//!    `start`'s as the sink recorded them): `put`'s are checked
//!    against what was handed over and timed, and one below an offset
//!    declared safe before lowers it (the sink's latest word, as for
//!    `pre_commit`). A partition a `put` or `pre_commit` leaves out keeps
//!    the sink's earlier word for it: an offset declared safe and not yet
//!    committed (its commit due, or failed and retried) is still committed
//!    (unlike Kafka Connect, which commits only its latest `preCommit`'s
//!    map). A word is a durability promise, so this keeps committed ≤
//!    durable; a sink that must take one back reports a lower offset.
//! 3. **`pre_commit(consumed)`** runs after a `put` (after every one with
//!    `--commit every-put`, once per interval with `interval:MS`), on
//!    revoke and on stop, and inside an assignment whose partitions
//!    `--on-offset-out-of-range earliest` moved (after `caught_up`, so
//!    that the move is durable before their fetch goes on). Like Kafka Connect's `flush` / `preCommit`, it makes
//!    what was put durable (or as much as the sink chooses) and returns the
//!    offsets that are durable and safe to commit, never past the records
//!    handed to it (the loop checks: the run fails, `SinkOverclaimed`, with
//!    nothing of that call committed); an empty map declares nothing
//!    new (an earlier word still stands: 2. above).
//!    `consumed` holds, per partition assigned that the sink has not yet
//!    declared safe up to what it was handed, the next offset after what
//!    was put, or, before any put since its assignment, where it resumed
//!    (a partition whose resume point is not a known offset, one starting
//!    at the log's beginning or one whose offset Kafka's log bounds could
//!    not confirm, is left out until its first put; one starting at the
//!    log's beginning or end also once a record of it is set aside, from
//!    that record's offset): that may be past
//!    what this sink holds (Kafka's offset, committed by
//!    another member), so a sink that returns `consumed` as it is
//!    declares such a resume point durable (harmless, Kafka holds it
//!    already; a sink that knows better reports what it holds). A
//!    partition is in it until the sink's word reaches what it was handed
//!    (or Kafka's committed offset does: a partition resumed at another
//!    store's commit has nothing to commit), and again once more is
//!    handed over (or a word falls below it): a partition declared in
//!    full, with nothing put since, is left out. While a word stays below
//!    what was handed (a sink that buffers), `pre_commit` is called again
//!    with no put, about the partitions still short: 50 ms after the
//!    `pre_commit` that followed a put, the wait doubling to 1 s while
//!    only such calls find it short, never sooner than the interval under
//!    `interval:MS`, and not after `stop` (since 2026-12-06; Kafka Connect
//!    calls `preCommit` on its interval, put or not).
//!    (Until 2026-12-06 it held every assigned partition, as Kafka
//!    Connect's `preCommit` does, and a put of one record paid for all of
//!    them: BENCHMARKS.md, "Partitions".) A word on an assigned partition
//!    left out is checked against what it was handed, as any; one on a
//!    partition never handed over (revoked since) is ignored, with a
//!    warning, as Kafka Connect ignores them. A partition the sink holds
//!    with records put since its last word that `consumed` leaves out (it
//!    was lost while the put before ran, a loss not waiting for the task
//!    thread) gets its `close` next: a sink whose storage other members
//!    share must not write it here, since another member may own it
//!    already (Kafka Connect closes a lost partition before any further
//!    `preCommit`; the example sink leaves it unsynced). (A negative
//!    offset fails the run, whatever its partition). An offset below one declared before is
//!    taken as the sink's latest word: the higher one is not committed
//!    (with a warning; a durable offset that goes back means lost records
//!    or a bug). If this run already committed the higher one (handed a
//!    commit of it to librdkafka, acknowledged or not), Kafka may count
//!    records as archived that the sink no longer holds: the run fails
//!    (`SinkLostCommitted`, naming the partition and both offsets) and
//!    commits nothing more; a sink with an identity resumes at its own
//!    offset on the next run. The commit
//!    itself follows on the loop's committer, while the next `put` runs.
//!    **`caught_up(positions)`** runs, after the puts of every record
//!    below them, where the consumer caught up with a partition's log end
//!    at an offset past the records handed over (or past where it
//!    resumed), or took a record it set aside (over `--record-bytes-max`:
//!    skipped, or dead-lettered), just past it: the offsets between held
//!    no record to archive (Kafka's transaction markers, an aborted
//!    transaction's records, the record set aside). They count
//!    as consumed once it returns, so a `pre_commit` may declare them
//!    durable: one that has recorded them (the archive's), or one that
//!    returns `consumed` as it is (harmless: they hold no record). The
//!    default records nothing; a sink that reports what it holds then
//!    stays below them until its next record, as before.
//! 4. **`close(partitions)`** runs after revoked partitions were committed
//!    (or, for lost partitions, without any commit). The revoke's commit
//!    holds what its one `pre_commit` declared (it is not asked about them
//!    again): a sink that declares less there (one that buffers) has the
//!    rest fetched again by the partition's next owner. So a sink whose
//!    store members share drops here what it holds of them that it did
//!    not declare (made durable, the shared store would hold it twice); one
//!    with a store of its own may drop it or make it durable now (its
//!    `open` then resumes after it, should the partition come back, and
//!    the next owner's store holds those records too, as across stores
//!    after any revoke whose commit fails). `close` is not told whether a
//!    partition was revoked or lost; a lost one may be another member's
//!    already, which is one more reason a store members share is not
//!    written here.
//! 5. **`stop()`** runs once, after the final commit of a clean stop and a
//!    `close` of every partition still assigned.
//!
//! A retriable error from `put` retries the same batch (backoff from 10 ms,
//! doubling to 1 s) until it succeeds; meanwhile nothing else is put and
//! the consumer stops polling once its buffer is full. It then calls
//! nothing of librdkafka's, so a put that keeps failing past
//! `max.poll.interval.ms` (300 s by default) gets the member put out of
//! its group, its partitions given to others, and a rebalance of the group
//! waits on it meanwhile (nothing is lost: commits of the old generation
//! fail). Once a revoke has begun, each such put is retried for at most
//! [`REVOKE_RETRY`](crate::REVOKE_RETRY) (60 s) from its first failure
//! after that, or half of `max.poll.interval.ms` where that is shorter,
//! and then the run fails (a put that never returns is not bounded: above):
//! nothing more is committed, and the partitions' next owner fetches from
//! Kafka's committed offset. A sink whose backend can be away longer returns `Fatal` instead,
//! and the run stops, to be started again. Once the run is
//! asked to stop, a put that keeps failing is retried for 5 s more, then
//! the run fails. Only `put` is retried: a retriable error from any other
//! call is fatal. So a `put` that syncs must return `Fatal` when its sync
//! fails (a failed fsync is never retried), and one that fails retriably
//! must leave nothing of its batch written, or drop on the retry what it
//! did write (the records carry their offsets): the same batch comes again.
//! A fatal error stops the loop: nothing more is put or committed, the sink
//! is called no more (not `close`, not `stop`: either may sync) and is
//! dropped, and the run fails. A panic in a call on the task thread does
//! the same (commits are closed before the sink is dropped: since
//! 2026-12-04); so does one on the consumer thread (the loop's own, the
//! thread that called the run: an invariant assertion in a revoke's or the
//! final commit, or an embedder's observer), which until the night of
//! 2026-12-04 unwound out of the run without closing commits. One in
//! `identity` or in a `stop` made before any `open` reaches the caller of
//! the run.
//!
//! What else a sink can count on:
//! - `open` and `close` name only the partitions added or removed (the
//!   default assignment is cooperative, incremental), not the whole
//!   assignment; a `close` at a clean stop names those still assigned,
//!   and may name none.
//! - `pre_commit` may come before any `open`, with an empty `consumed`:
//!   the final flush of a run stopped before it was assigned anything.
//! - `put` is never called with no batch, nor with an empty one, nor
//!   (since 2026-12-04) with a batch of a partition lost since the put
//!   was queued (another member owns it then; its records were never
//!   committed, and that member fetches them again). A put retried after
//!   `TaskError::Retriable` is the same batches, less those of partitions
//!   lost since the last attempt (since the night of 2026-12-04; before,
//!   the same batches whole), and is not retried when that leaves none.
//!
//! # Invariants
//! - Offsets are "next offset to read" (last + 1), as Kafka commits them.
//! - Batches reach `put` in offset order per partition, each record once
//!   while the partition stays assigned (a retried batch is the same
//!   batch); after a `close`, a restart or a rebalance the loop resumes
//!   where `open` says (or where Kafka's offset or a start says, in the
//!   cases of 1. above), so records a sink dropped at `close` come again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_engine::{Engine, RecordBatch, TopicId, TopicPartition};

use crate::live::LiveServer;
use crate::pruner::{FailureHook, Pruner, Retention};

/// What a sink can fail with.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// Try the same batch again later (less the batches of partitions lost
    /// meanwhile: see the module's docs). Only a `put` is retried: from any
    /// other call this fails the run, as `Fatal` does (a `pre_commit` may
    /// have failed an fsync, which is never retried).
    #[error("retriable: {0}")]
    Retriable(String),
    /// Stop the task; commit nothing more.
    #[error("fatal: {0}")]
    Fatal(String),
}

/// The result of a `put`.
#[derive(Debug, Default, Clone)]
pub struct PutOutcome {
    /// Per partition, the next offset the sink reports durable after this
    /// put. Checked against what was handed over (past it is a bug, and
    /// stops the run); a partition handed nothing since its assignment is
    /// ignored, with a warning; one revoked or lost while the put ran is
    /// ignored too (logged at INFO: no longer this member's to commit);
    /// an offset below one declared safe before
    /// is the sink's latest word, as for `pre_commit` (since the night of
    /// 2026-12-03; before, the first failed the run and the second was
    /// not heeded).
    pub durable: BTreeMap<TopicPartition, i64>,
    /// Records this put wrote: counted in the run's statistics and progress
    /// reports (a sink that does not count leaves it 0).
    pub records_written: u64,
    /// Records this put was handed and already held, so did not write
    /// again (a sink that keeps offsets of its own; counted as above).
    pub records_duplicate: u64,
}

/// What Kafka said of a topic's id, read at an assignment
/// ([`SinkTask::check_topics`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaTopicId {
    Id(TopicId),
    /// The topic exists and Kafka gave it no id (zero: brokers before
    /// Kafka 2.8 have none, and so does a client kept to old requests,
    /// `api.version.request=false`).
    NoId,
    /// Not read, and why: the topic's own error (not authorized to
    /// describe it, unknown), or the request's (no answer in time).
    Unread(String),
}

/// A sink driven by cairn's commit-after-durable consumer loop
/// ([`run_pipeline`](crate::run_pipeline)): Kafka Connect's sink contract.
/// The [module docs](crate::task) say it in full; in short:
/// - the calls run on one thread of the loop's, one at a time (but for the
///   two below), in the order `check_topics`, `open` (and `start`) at each
///   assignment, then
///   `put`s each followed (now or on the commit interval) by `pre_commit`,
///   `close` at a revoke or a loss, and `stop` once at a clean stop;
/// - offsets are the next offset to read (the last record's + 1), as Kafka
///   commits them;
/// - only what `open`, `start` and `pre_commit` declare durable is
///   committed (a `put`'s report is checked, never committed), never past the records handed over (the loop checks,
///   and fails the run);
/// - an error fails the run and nothing more is committed, except a
///   [`TaskError::Retriable`] from `put`, which brings the same batches
///   again;
/// - a revoke's one `pre_commit` is the sink's last word on a revoked
///   partition: records it does not declare there are fetched again by the
///   partition's next owner;
/// - `identity` and `durable_check` are asked on the thread that starts the
///   run, and `durable_check`'s closure runs on the loop's other threads,
///   beside the calls above.
///
/// `connector/examples/file_sink.rs` is a complete one.
pub trait SinkTask: Send {
    /// Kafka's topic id (KIP-516) of each topic of an assignment, as read
    /// just before (or why it could not be), called before `open` for its
    /// partitions. A sink that resumes from offsets it stored checks that
    /// each topic is the one it stored them for: a topic deleted and
    /// created again under its name, or the same name in another cluster,
    /// reuses those offsets for other records, and resuming at them would
    /// skip the new topic's records below them. An error fails the run
    /// before `open`: nothing of the assignment is handed to the sink or
    /// committed. The default checks nothing. Not called after the run has
    /// failed.
    fn check_topics(&mut self, ids: &BTreeMap<String, KafkaTopicId>) -> Result<(), TaskError> {
        let _ = ids;
        Ok(())
    }
    /// Partitions were assigned. Return the offsets to resume from. A
    /// partition given none starts at Kafka's committed offset (or by
    /// `--auto-offset-reset`); if Kafka cannot read that offset at the
    /// assignment, twice, the run stops with an error naming the partition
    /// rather than guess where it starts. An offset returned for a
    /// partition not in `partitions` is ignored, with a WARN; a negative
    /// one, for any partition, fails the run (as from every call). Not called
    /// after the run has failed (its open may sync, and a failed fsync is
    /// never retried).
    ///
    /// With an [`identity`](SinkTask::identity), Kafka's committed offset
    /// is the sink's own word only when it was committed under that name:
    /// a partition given none (or one below Kafka's) whose Kafka offset was
    /// committed under this identity is taken for records the store held
    /// and lost, and is fetched again from the offset returned, or from
    /// the start of Kafka's log when none is (with a WARN). So a sink with
    /// an identity returns an offset for every partition its store holds
    /// anything of. Without an identity, or under another name, an offset
    /// below Kafka's committed one is not a rewind: the partition resumes
    /// at Kafka's offset (said at INFO), unlike Kafka Connect's
    /// `context.offset()`, because another member's commit cannot be told
    /// from this sink's own; give an identity to have `open`'s offsets
    /// honoured (module docs, 1.).
    ///
    /// `partitions` may be empty: a cooperative rebalance that assigns
    /// this member nothing new still calls `open` (and `check_topics`)
    /// with none, as it may call `close` with none.
    fn open(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError>;
    /// Write records: at most one batch per partition, each non-empty,
    /// offsets increasing within it and across puts while the partition
    /// stays assigned. Offsets may have gaps (Kafka's transaction markers,
    /// compacted records, records set aside as oversize or dead-lettered),
    /// and a partition's first batch after `open` may start above the
    /// offset `open` returned (Kafka's committed offset was ahead: module
    /// docs, 1.; or `--on-offset-out-of-range earliest` moved it). A
    /// `Retriable` error brings the same batches again, less those of
    /// partitions lost since; `Fatal` stops the run. `PutOutcome::durable`
    /// may report what is durable already (checked, as `pre_commit`'s
    /// offsets are), but is never committed itself: only `pre_commit`'s
    /// offsets are, and a put's report can only lower one declared safe
    /// before (module docs, 2.), so a sink that makes each put durable
    /// still returns its offsets from `pre_commit` (an empty map there
    /// commits nothing new). Its counters only feed the run's statistics. Every
    /// offset returned here, by `open`, `start` or `pre_commit` must be
    /// at least 0: a negative one fails the run (since 2026-12-05).
    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError>;
    /// Make what was put durable (as much as the sink chooses) and return,
    /// per partition of `consumed` (those with something handed over that
    /// the sink has not declared safe yet: module docs, 3.), the next
    /// offset that is durable and
    /// safe to commit: never past `consumed`'s (the loop stops the run on
    /// one past what was handed over), and not below an earlier word
    /// unless records were lost (that lowers it, or fails the run if it
    /// was committed already: module docs, 3.). A partition left out keeps
    /// its earlier word. Called after puts (per `--commit`), with no put
    /// while an earlier word stays below what was handed (module docs,
    /// 3.), before a revoke's commit, at a clean stop and where an assignment's
    /// partitions were moved past records gone from Kafka (module docs,
    /// 3.). Only `put` is retried: a backend that can fail for a moment
    /// (a remote store's 503) retries inside this call, within the time a
    /// revoke can wait. An error fails the run, and
    /// `pre_commit` is never called again (it may have failed an fsync).
    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError>;
    /// Partitions that neither `open` nor Kafka gave an offset start at
    /// these offsets: under `--auto-offset-reset latest`, each one's log
    /// end, read at the assignment; and a partition this store held and
    /// lost entirely (Kafka's offset was committed under its identity,
    /// and `open` gives none), the log start it is fetched again from.
    /// Nothing below them is wanted. A sink
    /// that records a start durably returns it as given (any other offset
    /// is ignored, with a WARN, but a negative one fails the run);
    /// the loop then takes it as it takes `open`'s offsets, commits it,
    /// and a restart or rebalance before the partition's first record
    /// resumes there, not at a later log end, which would skip the records
    /// produced in between. The default records nothing, and such a
    /// partition's start is read again at each assignment until a record
    /// of it is durable. A sink with an [`identity`](SinkTask::identity)
    /// should record them: for a partition it lost whole, Kafka keeps the
    /// old commit, made under its name, until a record is durable, and a
    /// member taking the partition over meanwhile resumes there, above the
    /// records being fetched again. Not called after the run has failed.
    fn start(
        &mut self,
        starts: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let _ = starts;
        Ok(BTreeMap::new())
    }
    /// The consumer caught up with each partition's log end (librdkafka's
    /// end-of-partition event) at the offset given, past every record
    /// handed to `put` and past where the partition resumed (or, for one
    /// that started at Kafka's log start and was handed nothing, above 0:
    /// its offsets from the log start on, so a partition `open` returned
    /// nothing for may be named): the offsets
    /// between held no record for this run (Kafka's transaction markers,
    /// which take an offset each, and an aborted transaction's records,
    /// which `read_committed` never delivers; or a record the loop set
    /// aside, under `--on-oversize skip` or `dead-letter`). Runs after the
    /// puts of every record below them, and only where the offset is past
    /// what was handed over. Once it returns `Ok`, the offsets count as
    /// consumed: a sink that records, durably by its next `pre_commit`,
    /// that the partition resumes there, may report them (the archive's
    /// does: a partition whose last offsets are markers is committed past
    /// them, and its restart does not read them as records that aged out
    /// of Kafka); one whose `pre_commit` returns `consumed` as it is
    /// declares them too (harmless: they hold no record; but a sink with
    /// an [`identity`](SinkTask::identity) whose `open` then returns less
    /// than was committed under it is taken to have lost records, with a
    /// WARN, and fetches from its own offset: so such a sink records the
    /// position, or reports only what it holds). The default
    /// records nothing: a sink that reports what it holds stays below them
    /// until its next record, and meanwhile its `pre_commit` is asked about
    /// the partition again about every second (what was handed is not yet
    /// declared), which a sink whose `pre_commit` costs a remote call pays
    /// for as long as the partition stays idle. An error fails the run. Not
    /// called after the run has failed.
    fn caught_up(&mut self, positions: &BTreeMap<TopicPartition, i64>) -> Result<(), TaskError> {
        let _ = positions;
        Ok(())
    }
    /// Partitions were revoked (after their commit) or lost (without one);
    /// the sink is not told which. A sink that buffers drops what it holds
    /// of them that is not durable, or, with a store of its own, may make
    /// it durable now (module docs, 4.: a store members share must not be
    /// written here): if they are assigned again, the loop fetches from the
    /// offset `open` then returns (or Kafka's), and a `pre_commit` that
    /// reported records put before the close, and not durable by that
    /// `open`, would name offsets never handed over since (the loop
    /// fails the run on it). Not called after the run has failed: the sink
    /// is dropped instead.
    fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), TaskError>;
    /// The loop is stopping cleanly, after its final commit and a `close`
    /// of the partitions still assigned; or it stopped while waiting for
    /// Kafka, before any `open` (called then on the thread that started the
    /// run). Not called after the run has failed: the sink is dropped
    /// instead.
    fn stop(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    /// A name for the store this sink writes, the same for its whole life
    /// (and for a backup of it), or `None`. Asked once, on the thread that
    /// starts the run. The loop commits it to Kafka
    /// as the metadata of every offset. At an assignment where Kafka's
    /// committed offset is past the one `open` returns, it tells two cases
    /// apart: committed under another name, another sink in the group
    /// stored those records, and the partition resumes at Kafka's offset;
    /// committed under this name, this store held them and lost them
    /// (restored from an older backup, say), and the partition resumes at
    /// `open`'s offset, to store them again. Without a name, the first
    /// (logged at INFO: another member's commit cannot be told from an
    /// offsets reset, so neither is called a skip).
    ///
    /// Give it a kind, the text up to its first `:` (`pg:db-a`, with
    /// `pg:db-b` for another member's store): a commit under another name
    /// of the same kind is another member's, resumed after at INFO, and
    /// one under no name of the kind (an offsets reset, another tool's
    /// commit) is a WARN naming the records this store will not hold. A
    /// name without a `:` is of the archive's kind (`cairn-store:`), as is
    /// every commit to a sink without a name. An empty name (or one of
    /// spaces) fails the run at its start: Kafka's default commit metadata
    /// is empty, so every other tool's commit would read as this store's.
    fn identity(&self) -> Option<String> {
        None
    }
    /// What the store holds durable for a partition, as the store itself
    /// knows it now (`Ok(None)` for a partition it does not hold; `Err`
    /// with the reason for a store that takes no more commits, one
    /// poisoned by a failed write or fsync, or by a panic while it was
    /// used: the commit is not sent, and the
    /// run fails with that reason), asked by the
    /// loop for each offset of each commit just before it is sent (on the
    /// committer's thread, or, for a revoke's commit and the final one, on
    /// the consumer thread): a second word, besides what `put` and
    /// `pre_commit` reported, that a commit above it is a bug the loop
    /// stops on, failing the run with the commit unsent. Asked once, on
    /// the thread that starts the run; `None` (the default): no such check.
    /// A sink that gives one must report from `pre_commit` only what its
    /// store holds: one that returns `consumed` as it is (harmless without
    /// the check, see `caught_up`) would be stopped by it where Kafka's
    /// offsets run ahead of the store (a partition resumed at another
    /// store's commit). It must also answer for partitions the store holds
    /// no record of but a position: the offsets `open` returned and the
    /// starts `start` recorded are committed at once, each asked here
    /// first, so a store that answers `None` for a recorded start (one
    /// that knows only partitions holding records) fails the run at its
    /// first `--auto-offset-reset latest` assignment; so do positions
    /// `caught_up` recorded, once `pre_commit` declares them.
    ///
    /// The closure runs while the loop holds its own state lock, beside
    /// any call on the task thread: it must not block (not on a lock a
    /// sink call holds across a flush, which would stall the commits and
    /// the rebalance callbacks behind it), and should read an atomic or a
    /// short-held snapshot. A panic in it fails the run, with its message,
    /// as a commit invariant's does.
    fn durable_check(&self) -> Option<DurableCheck> {
        None
    }
}

/// [`SinkTask::durable_check`]'s answer: the durable next offset the store
/// holds for a partition now (`None`: it holds none; the archive's says so
/// too once its engine is gone, after `stop` or once a failed run drops the
/// sink), or why nothing more may be committed (a store poisoned: a failed
/// write or fsync, or a panic while it was used).
pub type DurableCheck = Box<dyn Fn(&TopicPartition) -> Result<Option<i64>, String> + Send + Sync>;

/// What an archive's run commits as every offset's metadata, naming the
/// store (`store`: its `Mstore`, as 32 hex digits).
pub(crate) fn store_identity(store: &str) -> String {
    format!("{STORE_IDENTITY_PREFIX}{store}")
}

/// How [`store_identity`] begins.
pub(crate) const STORE_IDENTITY_PREFIX: &str = "cairn-store:";

/// The archive: a sink on the cairn engine. The archive, not Kafka, is the
/// source of truth for where each partition resumes.
///
/// When a failed run drops the sink without its `stop`, the live server is
/// stopped first, cutting off a live verify or backup (which holds
/// truncations off), so that the pruner's thread, joined next, is not left
/// waiting for one to finish; if one is stuck in a system call, the pruner
/// is not waited for at all (`Drop`).
pub struct ArchiveSink {
    /// Answers `status`, `export`, `verify`, `prune` and `backup` while the
    /// run holds the archive (live.rs).
    live: Option<LiveServer>,
    /// `--retain`: deletes archived records older than an age.
    pruner: Option<Pruner>,
    engine: Option<Arc<Engine>>,
    /// `--rebind-topic`: topics whose Kafka id may differ from the one
    /// recorded, and is recorded in its place.
    rebind: BTreeSet<String>,
}

impl ArchiveSink {
    pub fn new(engine: Arc<Engine>) -> Self {
        ArchiveSink {
            engine: Some(engine),
            pruner: None,
            live: None,
            rebind: BTreeSet::new(),
        }
    }

    /// Take Kafka's id of each of `topics` for the one the archive holds
    /// (`--rebind-topic`), recording it in place of the one recorded (or
    /// of a damaged one), with a WARN naming both: for a topic moved to
    /// another cluster with its offsets kept, whose records at each offset
    /// are the archived ones. A topic whose ids agree is left as it is.
    /// Spent at the first assignment that reads Kafka's id of the topic
    /// (recorded or found equal), so a later change in the same run is
    /// refused. A topic Kafka gives no id for is taken unchecked, with a
    /// WARN, at every assignment; one whose id could not be read is
    /// refused all the same.
    pub fn with_rebound_topics(mut self, topics: impl IntoIterator<Item = String>) -> Self {
        self.rebind.extend(topics);
        self
    }

    /// Also prune the archive to `retention`: now (an archive that cannot
    /// be pruned is an error here), every `check_every`, and once more at a
    /// clean `stop` (pruner.rs). `on_failure` hears of a later pass that
    /// fails, so that an idle run stops too.
    pub fn with_retention(
        self,
        retention: Retention,
        check_every: Duration,
        on_failure: FailureHook,
    ) -> Result<Self, TaskError> {
        let never = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.with_retention_until(retention, check_every, on_failure, never)
    }

    /// [`with_retention`](Self::with_retention) for a run that stops once
    /// `stop` is set: a pass in progress then ends after its durable step,
    /// the first one too (`Pruner::start_until`).
    pub fn with_retention_until(
        mut self,
        retention: Retention,
        check_every: Duration,
        on_failure: FailureHook,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<Self, TaskError> {
        if let Some(e) = &self.engine {
            let p = Pruner::start_until(e.clone(), retention, check_every, on_failure, stop)
                .map_err(TaskError::Fatal)?;
            self.pruner = Some(p);
        }
        Ok(self)
    }

    /// Also answer `status`, `export`, `verify`, `prune` and `backup` of
    /// this archive on its socket (live.rs) until `stop`. An archive whose socket cannot be
    /// made (a data directory path too long for a socket's, for one) is
    /// archived all the same: the reads then wait for the run to stop.
    ///
    /// `on_poisoned` is called when a request leaves the engine poisoned (a
    /// live prune whose fsync failed, or any request that panicked), so that
    /// the run stops even when no
    /// put comes to find it out: `cairn run` sets its stop flag, and the
    /// clean stop's fsync then fails with the poisoning's reason.
    pub fn with_live_reads(mut self, on_poisoned: crate::live::OnPoisoned) -> Self {
        if let Some(e) = &self.engine {
            match LiveServer::start_with(e.clone(), Some(on_poisoned)) {
                Ok(server) => self.live = Some(server),
                Err(err) => tracing::warn!(
                    error = %err,
                    socket = %e.config().path.join(crate::live::SOCKET_FILE).display(),
                    "cannot serve the live archive; status, export, verify, prune and backup will need the run stopped"
                ),
            }
        }
        self
    }

    pub fn engine(&self) -> Option<&Arc<Engine>> {
        self.engine.as_ref()
    }

    fn eng(&self) -> Result<&Arc<Engine>, TaskError> {
        self.engine
            .as_ref()
            .ok_or_else(|| TaskError::Fatal("archive already stopped".into()))
    }
}

fn engine_error(e: cairn_engine::Error) -> TaskError {
    // A poisoned engine, corruption or bad input cannot be fixed by retrying.
    TaskError::Fatal(e.to_string())
}

impl SinkTask for ArchiveSink {
    fn open(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let e = self.eng()?;
        // Under `interval:MS` a partition can come back (lost, then assigned
        // again) with records written and not yet synced. Reporting their
        // durable offset would resume the fetch below records the engine
        // holds, and the next sync would then report an offset past what
        // was handed to it. Syncing first makes what the engine holds and
        // what it reports one offset (no flush when nothing is pending), and
        // a poisoned engine refuses it, so nothing is opened, and nothing
        // committed, on an engine that can no longer make records durable.
        e.sync().map_err(engine_error)?;
        Ok(partitions
            .iter()
            .filter_map(|tp| e.durable_offset(tp).map(|o| (tp.clone(), o)))
            .collect())
    }

    /// Refuses a topic whose Kafka id is not the one the archive recorded
    /// for it, or whose id could not be compared with it (not read, or
    /// none given: it cannot be told from a recreated topic), unless
    /// `--rebind-topic` names it; records, durably, the id of each topic it
    /// has none for, before any of its partitions resumes. The flag takes
    /// Kafka's id in place of the archive's (or of a damaged one) at the
    /// first assignment that reads one, and is spent then, whether the ids
    /// differed or not: later assignments of the run check against the id
    /// recorded. Against brokers that give no id it passes the topic
    /// unchecked, at every assignment; an id that could not be read is
    /// refused with or without it.
    fn check_topics(&mut self, ids: &BTreeMap<String, KafkaTopicId>) -> Result<(), TaskError> {
        let e = self.eng()?.clone();
        let mut bind = BTreeMap::new();
        // Another id than the archive's, and ids that could not be
        // compared with the archive's.
        let (mut other, mut unknown) = (Vec::new(), Vec::new());
        // `--rebind-topic` topics Kafka gave an id for: the flag is spent.
        let mut spent = Vec::new();
        for (topic, read) in ids {
            let rebind = self.rebind.contains(topic);
            if rebind && matches!(read, KafkaTopicId::Id(_)) {
                spent.push(topic.clone());
            }
            let recorded = match e.topic_id(topic) {
                Ok(r) => Ok(r),
                Err(err) if err.is_corruption() => Err(err),
                Err(err) => return Err(engine_error(err)),
            };
            match (recorded, read) {
                (Err(err), KafkaTopicId::Id(kafka)) if rebind => {
                    tracing::warn!(%topic, error = %err, %kafka, "--rebind-topic: the topic id the archive recorded is damaged; recording Kafka's in its place");
                    bind.insert(topic.clone(), *kafka);
                }
                (Err(err), KafkaTopicId::NoId) if rebind => {
                    tracing::warn!(%topic, error = %err, "--rebind-topic: the topic id the archive recorded is damaged, and Kafka gives none to record in its place: taken for the archived topic, unchecked");
                }
                (Err(err), KafkaTopicId::Unread(why)) => {
                    unknown.push(format!("{topic} (the archive's is damaged: {err}; Kafka's not read: {why})"))
                }
                (Err(err), _) => {
                    return Err(TaskError::Fatal(format!(
                        "{err}: the archive cannot tell whether Kafka's topic {topic} is the one it archived, so nothing of it is archived or committed. If it is, run once with --rebind-topic {topic} to record Kafka's id in place of the damaged one (against brokers that give no topic id, the flag is needed at every run)"
                    )))
                }
                (Ok(Some(archived)), KafkaTopicId::Id(kafka)) if archived == *kafka => {
                    if rebind {
                        tracing::warn!(%topic, id = %kafka, "--rebind-topic: Kafka's topic id is the one archived, nothing to rebind (the flag is spent for this run)");
                    }
                }
                (Ok(Some(archived)), KafkaTopicId::Id(kafka)) if rebind => {
                    tracing::warn!(%topic, %archived, %kafka, "--rebind-topic: recording Kafka's topic id in place of the archive's; the archive's offsets are taken to name this topic's records");
                    bind.insert(topic.clone(), *kafka);
                }
                (Ok(Some(archived)), KafkaTopicId::Id(kafka)) => {
                    other.push((
                        topic.clone(),
                        format!("{topic} (archived: {archived}, Kafka's now: {kafka})"),
                    ))
                }
                (Ok(None), KafkaTopicId::Id(kafka)) => {
                    tracing::info!(%topic, id = %kafka, "recording the topic's Kafka id: a topic of this name with another id will be refused");
                    bind.insert(topic.clone(), *kafka);
                }
                (Ok(Some(archived)), KafkaTopicId::NoId) if rebind => {
                    tracing::warn!(%topic, %archived, "--rebind-topic: Kafka gives no topic id to compare with the archive's: taken for the archived topic, unchecked");
                }
                (Ok(Some(archived)), KafkaTopicId::NoId) => unknown.push(format!(
                    "{topic} (archived: {archived}; Kafka gave none: brokers before Kafka 2.8; against such brokers, --rebind-topic {topic} at every run takes it unchecked)"
                )),
                (Ok(Some(archived)), KafkaTopicId::Unread(why)) => {
                    unknown.push(format!("{topic} (archived: {archived}; not read: {why})"))
                }
                (Ok(None), KafkaTopicId::NoId) => {
                    tracing::info!(%topic, "Kafka gave this topic no topic id (brokers before Kafka 2.8): none recorded, and it is not checked");
                }
                (Ok(None), KafkaTopicId::Unread(why)) => {
                    tracing::warn!(%topic, %why, "Kafka's topic id of this topic could not be read: none recorded yet (the next assignment tries again), and a topic of this name deleted and created again meanwhile would be taken for the archived one");
                }
            }
        }
        if !other.is_empty() {
            // The flags named, ready to give (until 2026-12-06 "TOPIC").
            let (topics, said): (Vec<String>, Vec<String>) = other.into_iter().unzip();
            let flags: Vec<String> = topics
                .iter()
                .map(|t| format!("--rebind-topic {t}"))
                .collect();
            return Err(TaskError::Fatal(format!(
                "Kafka's topic id is not the one archived for {}: the topic was deleted and created again, or these brokers are another cluster's, and its offsets name other records than the archive's. Resuming at the archive's offsets would skip the new topic's records below them, so nothing of it is archived or committed. Archive the new topic into a new --data (with a new --group); if it is the same topic, moved to another cluster with its offsets kept, run once with {}",
                said.join(", "),
                flags.join(" ")
            )));
        }
        if !unknown.is_empty() {
            return Err(TaskError::Fatal(format!(
                "Kafka's topic id could not be compared with the one archived for {}: a topic deleted and created again under its name could not be told from the archived one, and resuming at the archive's offsets would skip its records below them, so nothing of it is archived or committed. Run again once Kafka answers (where the archive's is damaged, with --rebind-topic TOPIC)",
                unknown.join(", ")
            )));
        }
        e.bind_topics(&bind).map_err(engine_error)?;
        // Spent once written: a later id change in this run is refused as
        // any other.
        for topic in spent {
            self.rebind.remove(&topic);
        }
        Ok(())
    }

    /// Writes the records to the log without an fsync: `pre_commit` pays
    /// one fsync for every put since the last (all of them under
    /// `--commit every-put`, one per interval under `interval:MS`).
    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
        let w = self.eng()?.write(batches).map_err(engine_error)?;
        Ok(PutOutcome {
            durable: BTreeMap::new(),
            records_written: w.appended_records,
            records_duplicate: w.duplicate_records,
        })
    }

    /// fsyncs every put so far (the engine's group commit: one flush and
    /// fdatasync), then returns the durable offsets of the partitions consumed.
    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let e = self.eng()?;
        // A poisoned engine refuses the sync, naming the failed operation.
        e.sync().map_err(engine_error)?;
        // Only the partitions consumed, read beside the durable view: not a
        // copy of every partition's offset searched for each (at 10,000
        // partitions about 30 % of a put's pre_commit: BENCHMARKS.md,
        // "Partitions").
        Ok(e.durable_offsets_of(consumed))
    }

    /// Records each start in the archive as an empty partition (a summary
    /// with no records, made durable), so the archive says where it
    /// resumes.
    fn start(
        &mut self,
        starts: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        self.eng()?.start_partitions(starts).map_err(engine_error)
    }

    /// Records each partition's new next offset in the archive (a summary
    /// whose next offset and floor are the one given; engine
    /// `advance_partitions`), made durable by the next `pre_commit`'s sync.
    fn caught_up(&mut self, positions: &BTreeMap<TopicPartition, i64>) -> Result<(), TaskError> {
        let e = self.eng()?;
        tracing::debug!(
            ?positions,
            "caught up past offsets that held no record to archive"
        );
        e.advance_partitions(positions).map_err(engine_error)
    }

    fn close(&mut self, _partitions: &[TopicPartition]) -> Result<(), TaskError> {
        Ok(())
    }

    /// The store's identity (format 3's `Mstore`), which a backup keeps.
    fn identity(&self) -> Option<String> {
        let e = self.engine.as_ref()?;
        Some(store_identity(&e.store_id().to_string()))
    }

    /// The engine's own durable offsets (published only after the fsync
    /// that made them durable), not the offsets this sink reported: the
    /// loop's runtime check of committed <= durable (since 2026-12-05;
    /// before, the code's assertion compared a commit with the sink's
    /// reports, which it is chosen from, and so could not fail). Held
    /// weakly, so that `stop` still closes the engine. A poisoned engine
    /// refuses: its offsets were durable before the failure, but nothing
    /// more is committed after a failed write or fsync, whichever thread
    /// met it (a retention pass, a live prune), not only once the loop
    /// has heard of it (since 2026-12-06, an audit: the committer went on
    /// sending until the loop stopped).
    fn durable_check(&self) -> Option<DurableCheck> {
        let engine = Arc::downgrade(self.engine.as_ref()?);
        Some(Box::new(move |tp| {
            // Gone only after `stop`, which comes after the final commit, or
            // the drop of a failed or crashed run's sink (commits are closed
            // by then; after a panic on the task thread, before its error
            // is recorded): a commit asked about then is the loop's bug,
            // refused as one (`Ok(None)`: the store holds nothing of it),
            // not blamed on the store.
            let Some(engine) = engine.upgrade() else {
                return Ok(None);
            };
            engine.check_usable().map_err(|e| e.to_string())?;
            Ok(engine.durable_offset(tp))
        }))
    }

    fn stop(&mut self) -> Result<(), TaskError> {
        // The live reads, the pruner's last pass, and their threads'
        // references to the engine, end before the engine closes.
        let pruned = if self.stop_live() {
            self.pruner.take().map_or(Ok(()), Pruner::stop)
        } else {
            // A live backup stuck in a system call holds truncations off:
            // a last pass (or the pass in progress) would wait for it for
            // ever, and the stop with it. A pass that failed before still
            // fails the run.
            self.pruner.take().map_or(Ok(()), Pruner::abandon)
        };
        let closed = match self.engine.take() {
            None => Ok(()),
            Some(e) => match Arc::try_unwrap(e) {
                Ok(e) => e.close().map_err(engine_error),
                Err(e) => {
                    // An embedder still holds the engine (`engine()`): its
                    // writes are made durable, but closing is the last
                    // holder's (the checkpoint then moves to the log's end).
                    tracing::info!(
                        holders = Arc::strong_count(&e),
                        "the engine is still held elsewhere: synced, not closed; the last holder closes it (until then the next open re-checks the log since the last checkpoint)"
                    );
                    e.sync().map_err(engine_error)
                }
            },
        };
        // Both said when both failed, the pruner's first: a failed pass
        // (a failed fsync in it) is usually why the close fails too, and
        // until the night of 2026-12-04 the close's error alone was
        // returned.
        match (pruned, closed) {
            (Err(p), Err(c)) => Err(TaskError::Fatal(format!(
                "{p}; and closing the engine then failed: {c}"
            ))),
            (Err(p), Ok(())) => Err(TaskError::Fatal(p)),
            (Ok(()), c) => c,
        }
    }
}

impl ArchiveSink {
    /// Stop the live server, if any; whether every request it served ended
    /// (`false`: one is stuck, holding the engine).
    fn stop_live(&mut self) -> bool {
        self.live.take().is_none_or(LiveServer::stop)
    }
}

impl Drop for ArchiveSink {
    /// A failed run's sink, dropped without its `stop`: the pruner is
    /// joined (its pass ends at its next check) unless a live request is
    /// stuck.
    fn drop(&mut self) {
        if !self.stop_live() {
            // A failed pass was logged when it failed; the run failed
            // anyway.
            if let Some(p) = self.pruner.take() {
                let _ = p.abandon();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::{EngineConfig, Record};

    fn id(bits: u128) -> TopicId {
        TopicId::new(bits).unwrap()
    }

    fn read(pairs: &[(&str, KafkaTopicId)]) -> BTreeMap<String, KafkaTopicId> {
        pairs
            .iter()
            .map(|(t, r)| (t.to_string(), r.clone()))
            .collect()
    }

    fn fatal(r: Result<(), TaskError>) -> String {
        match r {
            Err(TaskError::Fatal(m)) => m,
            other => panic!("expected a fatal error, got {other:?}"),
        }
    }

    /// What the archive does with each answer Kafka can give about a
    /// topic's id: records the first, refuses another or a missing one
    /// where it has one (it could be a recreated topic), lets
    /// `--rebind-topic` take Kafka's in its place once.
    #[test]
    fn check_topics_records_refuses_and_rebinds() {
        use KafkaTopicId::{Id, NoId, Unread};
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let mut sink = ArchiveSink::new(engine.clone());
        // Unknown to the archive: recorded if Kafka gave one.
        let unread = Unread("timed out".into());
        sink.check_topics(&read(&[
            ("a", Id(id(1))),
            ("b", NoId),
            ("c", unread.clone()),
        ]))
        .unwrap();
        assert_eq!(
            engine.topic_ids().unwrap(),
            [("a".to_owned(), id(1))].into()
        );
        // The same id: nothing to do.
        sink.check_topics(&read(&[("a", Id(id(1)))])).unwrap();
        // Another id, none, or one not read, where the archive has one:
        // refused, the binding kept.
        let m = fatal(sink.check_topics(&read(&[("a", Id(id(2)))])));
        assert!(
            m.contains(&format!(
                "archived for a (archived: {}, Kafka's now: {})",
                id(1),
                id(2)
            )) && m.ends_with("run once with --rebind-topic a"),
            "{m}"
        );
        for answer in [NoId, unread] {
            let m = fatal(sink.check_topics(&read(&[("a", answer.clone())])));
            assert!(
                m.contains("could not be compared with the one archived for a"),
                "{answer:?}: {m}"
            );
        }
        assert_eq!(engine.topic_id("a").unwrap(), Some(id(1)));
        // Rebound: Kafka's taken, once.
        let mut sink = ArchiveSink::new(engine.clone()).with_rebound_topics(["a".to_owned()]);
        sink.check_topics(&read(&[("a", NoId)])).unwrap();
        assert_eq!(
            engine.topic_id("a").unwrap(),
            Some(id(1)),
            "nothing to record"
        );
        // One not read is refused all the same.
        let m = fatal(sink.check_topics(&read(&[("a", Unread("timed out".into()))])));
        assert!(m.contains("not read: timed out"), "{m}");
        sink.check_topics(&read(&[("a", Id(id(2)))])).unwrap();
        assert_eq!(engine.topic_id("a").unwrap(), Some(id(2)));
        sink.check_topics(&read(&[("a", Id(id(2)))])).unwrap();
        fatal(sink.check_topics(&read(&[("a", Id(id(3)))])));
        assert_eq!(engine.topic_id("a").unwrap(), Some(id(2)));
        // Spent by an assignment that finds the ids equal too: a flag left
        // in a unit file does not take a later recreation.
        let mut sink = ArchiveSink::new(engine.clone()).with_rebound_topics(["a".to_owned()]);
        sink.check_topics(&read(&[("a", Id(id(2)))])).unwrap();
        fatal(sink.check_topics(&read(&[("a", Id(id(4)))])));
        assert_eq!(engine.topic_id("a").unwrap(), Some(id(2)));
    }

    /// A damaged binding is not taken for none (the run would record
    /// Kafka's over it unchecked): refused, naming the way out, which
    /// `--rebind-topic` takes.
    #[test]
    fn a_damaged_binding_is_refused_until_rebound() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        engine
            .bind_topics(&[("a".to_owned(), id(1))].into())
            .unwrap();
        engine.close().unwrap();
        cairn_engine::fuzzing::with_raw_tree(dir.path(), |tree| {
            let k = cairn_engine::topics::key("a");
            let mut v = tree.get(&k).unwrap().unwrap().to_vec();
            v[0] ^= 1;
            tree.insert(k, v).unwrap();
        });
        let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let kafka = read(&[("a", KafkaTopicId::Id(id(1)))]);
        let m = fatal(ArchiveSink::new(engine.clone()).check_topics(&kafka));
        assert!(
            m.contains("topic id of a") && m.contains("--rebind-topic a"),
            "{m}"
        );
        let rebound = || ArchiveSink::new(engine.clone()).with_rebound_topics(["a".to_owned()]);
        // Nothing to write over it with: refused when not read, taken
        // unchecked where Kafka gives none.
        let unread = read(&[("a", KafkaTopicId::Unread("timed out".into()))]);
        let m = fatal(rebound().check_topics(&unread));
        assert!(m.contains("the archive's is damaged"), "{m}");
        rebound()
            .check_topics(&read(&[("a", KafkaTopicId::NoId)]))
            .unwrap();
        assert!(engine.topic_id("a").is_err(), "still damaged");
        ArchiveSink::new(engine.clone())
            .with_rebound_topics(["a".to_owned()])
            .check_topics(&kafka)
            .unwrap();
        assert_eq!(engine.topic_id("a").unwrap(), Some(id(1)));
    }

    /// A partition lost and assigned again before the interval's sync: the
    /// records written for it are made durable and reported, so the fetch
    /// resumes after them and the next sync reports nothing beyond what
    /// the loop handed over.
    #[test]
    fn open_reports_the_records_written_before_it_as_durable() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let mut sink = ArchiveSink::new(engine.clone());
        let tp = TopicPartition::new("t", 0);
        assert_eq!(
            sink.open(std::slice::from_ref(&tp)).unwrap(),
            BTreeMap::new()
        );
        let records = (0..200)
            .map(|o| Record::with_value(o, vec![b'x'; 10]))
            .collect();
        let batch = RecordBatch {
            tp: tp.clone(),
            records,
        };
        sink.put(&[batch]).unwrap();
        assert_eq!(engine.durable_offset(&tp), None, "put does not sync");
        let fsyncs = engine.stats().fsyncs;
        let opened = sink.open(std::slice::from_ref(&tp)).unwrap();
        assert_eq!(opened, BTreeMap::from([(tp.clone(), 200)]));
        assert_eq!(engine.stats().fsyncs, fsyncs + 1);
        // Nothing pending: opening again costs no fsync.
        sink.open(std::slice::from_ref(&tp)).unwrap();
        assert_eq!(engine.stats().fsyncs, fsyncs + 1);
        sink.stop().unwrap();
    }

    /// The archive's check of a commit against its engine answers the
    /// durable offset while the engine takes writes, and refuses with the
    /// poisoning's reason once a write or fsync failed anywhere (here a
    /// caught panic, as a retention pass's poisons it), though the offset
    /// it held was durable (since 2026-12-06, an audit).
    #[test]
    fn durable_check_refuses_once_the_engine_is_poisoned() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let mut sink = ArchiveSink::new(engine.clone());
        let tp = TopicPartition::new("t", 0);
        sink.open(std::slice::from_ref(&tp)).unwrap();
        let batch = RecordBatch {
            tp: tp.clone(),
            records: (0..5).map(|o| Record::with_value(o, vec![1])).collect(),
        };
        sink.put(&[batch]).unwrap();
        sink.pre_commit(&BTreeMap::from([(tp.clone(), 5)])).unwrap();
        let check = sink.durable_check().expect("the archive checks commits");
        assert_eq!(check(&tp), Ok(Some(5)));
        assert_eq!(check(&TopicPartition::new("t", 1)), Ok(None));
        engine.poison_after_caught_panic("retention pass", "injected");
        let why = check(&tp).expect_err("a poisoned engine refuses");
        assert!(
            why.contains("poisoned") && why.contains("retention pass"),
            "{why}"
        );
        drop(sink.stop());
    }
}

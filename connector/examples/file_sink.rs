//! A second sink on cairn's commit-after-durable loop: each partition's
//! records (offset and value only: keys, headers and timestamps are left
//! out to keep it short) as length-prefixed lines in a file of its own,
//! with the offsets the sink owns beside them. What another sink needs from cairn is the
//! `SinkTask` trait and `run_pipeline`; the engine is not involved.
//!
//! `cargo run --release -p cairn-connector --example file_sink`
//!
//! It runs on librdkafka's mock cluster: produces records, archives them,
//! then runs again to show the second run resumes from the sink's own
//! offsets (nothing is written twice).
//!
//! # Invariants
//! - `<topic>-<partition>.mark` names a next offset and a length: the data
//!   file's first `length` bytes are durable and hold the records this sink
//!   took below that offset (all of them, unless Kafka's committed offset
//!   was ahead of the mark when a partition was opened: another instance of
//!   the group archived those). The mark is written (and synced, and
//!   renamed into place) only after the data file's fdatasync, and only
//!   after the directory entry of a newly created data file is durable.
//! - `open` cuts the data file back to the mark's length (bytes written
//!   after it were never made durable, and may be torn) and resumes there.
//!   A data file shorter than its mark is damage, and stops the run.
//! - `open` syncs the directory before it returns any mark: a run killed
//!   between a mark's rename and its directory sync leaves the new mark in
//!   the page cache only, and the loop commits what `open` returns as
//!   durable.
//! - File names are built whole from the topic and partition: never with
//!   `Path::with_extension`, which would cut a dotted topic name.
//! - `pre_commit` never reports an offset whose record is not behind a
//!   synced mark.
//! - A mark of length 0 is a recorded start (`start`, under
//!   `--auto-offset-reset latest`): the partition resumes there.
//! - `<topic>.id` holds Kafka's id of the topic the marks were taken from
//!   (`check_topics`, before `open`): another id (the topic deleted and
//!   created again, or the same name in another cluster) stops the run,
//!   since resuming at its marks would skip the new topic's records below
//!   them. One that cannot be compared with the recorded id (not read, or
//!   none given) stops it too, and so does one not read where none is
//!   recorded yet (marks are never taken with no id where Kafka can give
//!   one; the archive's sink goes on there with a WARN, and records the id
//!   at the next assignment that reads one); marks held with no id
//!   recorded (an older build of this sink) are not taken for the topic
//!   Kafka names now.
//!
//! It has no `identity`: its files are never put back from an older copy,
//! so a Kafka offset past a mark is always another member's. A sink whose
//! storage can go back in time needs one (see `SinkTask::identity`).
//! Nor does it remember a failed fsync across runs: after one (the run
//! stops), a next run in the same boot may read back what the disk never
//! kept. The archive sink leaves a mark for that (`cairn.poisoned`, in
//! docs/DURABILITY.md); a sink for production needs the same.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use cairn_connector::cli::demo::{demo_next_offsets, produce};
// The record types come re-exported: a sink needs no `cairn-engine`.
use cairn_connector::{
    run_pipeline, CommitPolicy, KafkaTopicId, PipelineOptions, PutOutcome, RecordBatch, RunConfig,
    SinkTask, TaskError, TopicPartition,
};

use rdkafka::mocking::MockCluster;

/// One partition's data file, and where it stands.
struct PartitionFile {
    file: File,
    mark: PathBuf,
    /// Bytes written, durable or not.
    len: u64,
    /// Next offset after the last record written.
    next: i64,
    /// Written since the last sync.
    dirty: bool,
}

pub(crate) struct FileSink {
    dir: PathBuf,
    open: BTreeMap<TopicPartition, PartitionFile>,
}

impl FileSink {
    /// A sink keeping its files in `dir`.
    pub(crate) fn new(dir: &Path) -> FileSink {
        FileSink {
            dir: dir.to_path_buf(),
            open: BTreeMap::new(),
        }
    }

    /// Whether `dir` holds a mark of a partition of `topic`
    /// (`<topic>-<digits>.mark`: split at the last `-`, so that topic `a`
    /// is not taken for `a-1`'s).
    fn holds_marks_of(&self, topic: &str) -> Result<bool, TaskError> {
        let entries = std::fs::read_dir(&self.dir).map_err(io_fatal("read", &self.dir))?;
        for entry in entries {
            let entry = entry.map_err(io_fatal("read", &self.dir))?;
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".mark")) else {
                continue;
            };
            if let Some((t, p)) = stem.rsplit_once('-') {
                if t == topic && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

fn io_fatal(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> TaskError {
    let what = format!("{what} {}", path.display());
    // A failed write or sync is never retried: what the kernel dropped
    // cannot be told from what it kept (cairn's engine is poisoned the same way).
    move |e| TaskError::Fatal(format!("{what}: {e}"))
}

/// The mark: "next_offset length\n", or none yet.
pub(crate) fn read_mark(path: &Path) -> Result<Option<(i64, u64)>, TaskError> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let mut it = s.split_whitespace().map(str::parse::<i64>);
            match (it.next(), it.next()) {
                (Some(Ok(next)), Some(Ok(len))) if next >= 0 && len >= 0 => {
                    Ok(Some((next, len as u64)))
                }
                _ => Err(TaskError::Fatal(format!(
                    "{}: not a mark ({s:?})",
                    path.display()
                ))),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_fatal("read", path)(e)),
    }
}

/// Replace the mark whole: write and sync a new file, rename it over the old
/// one, sync the directory.
fn write_mark(dir: &Path, path: &Path, next: i64, len: u64) -> Result<(), TaskError> {
    write_whole(dir, path, &format!("{next} {len}\n"))
}

/// Replace `path` in `dir` whole with `text`: write and sync a new file,
/// rename it over the old one, sync the directory.
fn write_whole(dir: &Path, path: &Path, text: &str) -> Result<(), TaskError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".new");
    let tmp = PathBuf::from(tmp);
    let mut f = File::create(&tmp).map_err(io_fatal("create", &tmp))?;
    f.write_all(text.as_bytes())
        .map_err(io_fatal("write", &tmp))?;
    f.sync_data().map_err(io_fatal("sync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io_fatal("rename", path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_fatal("sync", dir))
}

impl SinkTask for FileSink {
    /// Each topic's Kafka id is the one its marks were taken from, or is
    /// recorded (durably, before any of its partitions opens) when none
    /// was. Until 2026-12-07 the example checked nothing, and a topic
    /// created again resumed at the old topic's marks (found by an audit).
    fn check_topics(&mut self, ids: &BTreeMap<String, KafkaTopicId>) -> Result<(), TaskError> {
        for (topic, id) in ids {
            let path = self.dir.join(format!("{topic}.id"));
            let recorded = match std::fs::read_to_string(&path) {
                Ok(s) => Some(s.trim().to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_fatal("read", &path)(e)),
            };
            match (id, recorded) {
                (KafkaTopicId::Id(id), Some(r)) if r == id.to_string() => {}
                (KafkaTopicId::Id(id), Some(r)) => {
                    return Err(TaskError::Fatal(format!(
                        "{topic}: Kafka's topic id is {id}, but this sink's files were taken from the topic of id {r} (deleted and created again, or another cluster's): move its files out of {} to archive it anew",
                        self.dir.display()
                    )))
                }
                // Marks taken with no id recorded (Kafka gave none then, or
                // an older build of this sink) may be another topic's of
                // the name: recorded only when the operator says so.
                (KafkaTopicId::Id(id), None) if self.holds_marks_of(topic)? => {
                    return Err(TaskError::Fatal(format!(
                        "{topic}: this sink holds marks of it with no topic id recorded, so Kafka's topic (id {id}) cannot be told from one deleted and created again since: if it is the same topic, write {id} into {} to go on",
                        path.display()
                    )))
                }
                (KafkaTopicId::Id(id), None) => {
                    write_whole(&self.dir, &path, &format!("{id}\n"))?;
                }
                // Old brokers give no id: nothing to compare, and nothing
                // recorded to compare it with.
                (KafkaTopicId::NoId, None) => {}
                (KafkaTopicId::NoId, Some(r)) => {
                    return Err(TaskError::Fatal(format!(
                        "{topic}: Kafka gives no topic id, but this sink's files were taken from the topic of id {r}: another cluster's?"
                    )))
                }
                (KafkaTopicId::Unread(why), Some(r)) => {
                    return Err(TaskError::Fatal(format!(
                        "{topic}: its Kafka id could not be read ({why}), so it cannot be told from a topic created again; this sink's files were taken from the topic of id {r}"
                    )))
                }
                // Not known yet: no mark is taken of it until it is (the
                // archive's sink goes on with a WARN; this one, whose
                // marks taken with no id it refuses above, stops).
                (KafkaTopicId::Unread(why), None) => {
                    return Err(TaskError::Fatal(format!(
                        "{topic}: its Kafka id could not be read ({why}): run again once Kafka answers"
                    )))
                }
            }
        }
        Ok(())
    }

    fn open(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let mut resume = BTreeMap::new();
        for tp in partitions {
            let name = format!("{}-{}", tp.topic, tp.partition);
            let data = self.dir.join(format!("{name}.lines"));
            let mark = self.dir.join(format!("{name}.mark"));
            let (next, len) = match read_mark(&mark)? {
                Some((next, len)) => {
                    resume.insert(tp.clone(), next);
                    (next, len)
                }
                // Never synced: Kafka's committed offset (or
                // --auto-offset-reset) decides where it starts; the run
                // stops if Kafka cannot read that offset.
                None => (0, 0),
            };
            let mut file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&data)
                .map_err(io_fatal("open", &data))?;
            let on_disk = file.metadata().map_err(io_fatal("stat", &data))?.len();
            if on_disk < len {
                return Err(TaskError::Fatal(format!(
                    "{}: {on_disk} bytes, but its mark says {len} are durable",
                    data.display()
                )));
            }
            // Bytes past the mark were written but never synced. Without a
            // mark (a crash before the first sync, or a mark deleted since)
            // that is all of them: said, since a deleted mark loses them.
            if on_disk > len {
                tracing::warn!(
                    file = %data.display(),
                    bytes = on_disk - len,
                    marked = len,
                    "dropping bytes past the mark, never synced (or their mark was lost)"
                );
            }
            file.set_len(len).map_err(io_fatal("truncate", &data))?;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
                .map_err(io_fatal("seek", &data))?;
            self.open.insert(
                tp.clone(),
                PartitionFile {
                    file,
                    mark,
                    len,
                    next,
                    dirty: false,
                },
            );
        }
        // Every time, not only when a data file was created here: a mark
        // must never name a data file whose directory entry a crash could
        // still take away, and a mark returned must itself be durable (a
        // run killed after renaming it, before syncing the directory, left
        // it in the page cache only).
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io_fatal("sync", &self.dir))?;
        Ok(resume)
    }

    fn put(&mut self, batches: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
        let mut out = PutOutcome::default();
        for b in batches {
            let pf = self
                .open
                .get_mut(&b.tp)
                .ok_or_else(|| TaskError::Fatal(format!("{} was never opened", b.tp)))?;
            let mut buf = Vec::new();
            for r in &b.records {
                // The loop hands each record once, and none below the
                // offset `open` resumed from; kept as a guard, since a
                // record this file holds must never be written twice.
                if r.offset < pf.next {
                    out.records_duplicate += 1;
                    continue;
                }
                // offset, value length (-1 for null), value: any bytes.
                let value = r.value.as_deref();
                let n = value.map_or(-1, |v| v.len() as i64);
                write!(buf, "{} {n} ", r.offset).expect("write to a Vec");
                buf.extend_from_slice(value.unwrap_or_default());
                buf.push(b'\n');
                pf.next = r.offset + 1;
                out.records_written += 1;
            }
            pf.file
                .write_all(&buf)
                .map_err(|e| TaskError::Fatal(format!("write {}: {e}", b.tp)))?;
            pf.len += buf.len() as u64;
            pf.dirty |= !buf.is_empty();
        }
        // Nothing is durable yet: `pre_commit` says what is.
        Ok(out)
    }

    fn pre_commit(
        &mut self,
        consumed: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let mut safe = BTreeMap::new();
        for (tp, pf) in &mut self.open {
            // A partition held here but not in `consumed` was declared in
            // full already, with nothing put since (not dirty), or was lost
            // (or revoked) since: its `close` comes next, and another
            // member may own it already. Not written on: its unsynced bytes
            // stay past its mark, which the next `open` cuts off. (A sink
            // whose store other members share must not write it either.)
            if !consumed.contains_key(tp) {
                continue;
            }
            if pf.dirty {
                pf.file
                    .sync_data()
                    .map_err(|e| TaskError::Fatal(format!("sync {tp}: {e}")))?;
                write_mark(&self.dir, &pf.mark, pf.next, pf.len)?;
                pf.dirty = false;
            }
            if pf.len > 0 {
                safe.insert(tp.clone(), pf.next);
            }
        }
        Ok(safe)
    }

    /// `--auto-offset-reset latest`'s starts, made durable as marks with
    /// nothing behind them yet: a restart or rebalance before a partition's
    /// first record resumes there, not at a later log end that would skip
    /// what was produced in between.
    fn start(
        &mut self,
        starts: &BTreeMap<TopicPartition, i64>,
    ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
        let mut recorded = BTreeMap::new();
        for (tp, &offset) in starts {
            let Some(pf) = self.open.get_mut(tp) else {
                continue;
            };
            // Only a partition this sink holds nothing of is given a start.
            if pf.len == 0 && !pf.dirty {
                write_mark(&self.dir, &pf.mark, offset, 0)?;
                pf.next = offset;
                recorded.insert(tp.clone(), offset);
            }
        }
        Ok(recorded)
    }

    fn close(&mut self, partitions: &[TopicPartition]) -> Result<(), TaskError> {
        // A revoked partition was synced by the `pre_commit` before its
        // commit; a lost one may keep unsynced bytes, which the next `open`
        // cuts off.
        for tp in partitions {
            self.open.remove(tp);
        }
        Ok(())
    }
}

/// Public so that `connector/tests/example_file_sink.rs` runs it as a test.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = MockCluster::new(1)?;
    // A dotted name, as Kafka topics often have.
    let topic = "shop.events";
    cluster.create_topic(topic, 3, 1)?;
    let brokers = cluster.bootstrap_servers();
    let n = 30_000;
    produce(&brokers, topic, 0..n)?;

    let dir = tempfile::tempdir()?;
    // Each run's records written and records the sink skipped as already
    // held.
    let run = |label: &str| -> Result<(u64, u64), Box<dyn std::error::Error>> {
        let cfg = loop_config(&brokers, topic, dir.path());
        let sink = FileSink::new(dir.path());
        let report = run_pipeline(&cfg, Box::new(sink), until_committed(topic, n))?;
        let s = &report.stats;
        println!(
            "{label}: {} records written, {} puts, {} commits",
            s.records_written, s.puts, s.commits
        );
        Ok((s.records_written, s.records_duplicate))
    };
    assert_eq!(run("first run")?, (n, 0));
    // Everything is committed and in the files: the second run resumes from
    // the sink's marks, so Kafka sends it nothing and it writes nothing.
    assert_eq!(run("second run")?, (0, 0));
    let total = held_once(dir.path(), topic, 3)?;
    assert_eq!(total, n);
    println!("{total} records, each once");
    Ok(())
}

/// The loop's settings for this sink; `data` is the archive's folder,
/// which this sink does not use. (Public, as the items below, for
/// `connector/tests/example_file_sink.rs`.)
pub(crate) fn loop_config(brokers: &str, topic: &str, dir: &Path) -> RunConfig {
    let mut cfg = RunConfig::new(brokers, "file-sink", vec![topic.into()], dir.into());
    cfg.commit = CommitPolicy::EveryPut;
    // A short session, as the demo uses: the group then settles in
    // seconds on the mock cluster (librdkafka's 45 s default makes each
    // run wait for the previous member's session to end).
    cfg.kafka.insert("session.timeout.ms".into(), "6000".into());
    cfg.kafka
        .insert("heartbeat.interval.ms".into(), "500".into());
    cfg
}

/// A run that ends once Kafka holds the commits of all `n` demo records
/// produced to `topic`.
pub(crate) fn until_committed(topic: &str, n: u64) -> PipelineOptions {
    let want = demo_next_offsets(topic, n);
    PipelineOptions {
        done: Some(Box::new(move |committed| {
            want.iter().all(|(tp, o)| committed.get(tp) == Some(o))
        })),
        ..Default::default()
    }
}

/// The records the files of `topic`'s `partitions` hold, each partition's
/// checked to hold every offset once, in order, from 0.
pub(crate) fn held_once(
    dir: &Path,
    topic: &str,
    partitions: i32,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut total = 0;
    for p in 0..partitions {
        let path = dir.join(format!("{topic}-{p}.lines"));
        let offsets = read_offsets(&std::fs::read(&path)?)?;
        assert!(
            offsets.iter().copied().eq(0..offsets.len() as i64),
            "{}: each offset once, in order, from 0",
            path.display()
        );
        println!("{}: offsets 0..{}", path.display(), offsets.len());
        total += offsets.len() as u64;
    }
    Ok(total)
}

/// The offsets in a data file, read back through its length prefixes.
pub(crate) fn read_offsets(mut bytes: &[u8]) -> Result<Vec<i64>, String> {
    let mut offsets = Vec::new();
    while !bytes.is_empty() {
        let mut field = || -> Result<i64, String> {
            let end = bytes.iter().position(|b| *b == b' ').ok_or("no field")?;
            let v = std::str::from_utf8(&bytes[..end])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or("bad field")?;
            bytes = &bytes[end + 1..];
            Ok(v)
        };
        let offset = field()?;
        let len = field()?.max(0) as usize;
        if bytes.len() < len + 1 || bytes[len] != b'\n' {
            return Err(format!("record {offset} is cut off"));
        }
        bytes = &bytes[len + 1..];
        offsets.push(offset);
    }
    Ok(offsets)
}

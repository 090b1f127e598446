//! The engine's one error type.
//!
//! Every variant names what failed and where. Corruption carries a typed
//! [`CorruptionKind`] and a [`Location`], so tests and operators can match on
//! it instead of parsing text.

use std::fmt;
use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the engine can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file-system call failed.
    #[error("i/o error during {op} on {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// sled reported an error.
    #[error("sled error during {op}: {source}")]
    Store {
        op: &'static str,
        #[source]
        source: sled::Error,
    },
    /// Stored bytes failed a check. Never skipped silently.
    #[error("corruption at {location}: {kind}")]
    Corruption {
        location: Location,
        kind: CorruptionKind,
    },
    /// A durability step failed earlier. The engine refuses all writes; close
    /// it and open it again to recover from what is on disk.
    #[error("engine is poisoned after a failed {op} ({reason}); it retries no failed write or fsync, and writes nothing more: reopen to recover from what is durable")]
    Poisoned { op: &'static str, reason: String },
    /// The caller passed something the engine will not write. Nothing was written.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InvalidInput),
    /// The store was written by a format this build does not read.
    #[error(
        "unsupported format version {found} in {path} (this build reads versions 1 to {supported}): a newer cairn wrote it: open it with that cairn or a later one (its records are untouched)"
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// Another process (or another engine in this process) holds the store.
    #[error("store {path} is locked by {holder}; stop that process first")]
    Locked { path: PathBuf, holder: String },
    /// The directory holds a backup that never finished: its copy was not
    /// verified (the backup was stopped or killed first), so it may lack
    /// records. Opened as an archive it would pass for a whole one.
    #[error("{path} holds a backup that did not finish (its file cairn.backup-incomplete is there: it was stopped or killed before its copy was verified), so it may lack records: remove the directory and back up again (if an older build has archived into it since, which ignores that file, delete only the file, then run cairn verify)")]
    IncompleteBackup { path: PathBuf },
    /// The engine was closed.
    #[error("engine is closed")]
    Closed,
    /// A truncation deleted records a read had not reached yet, after it
    /// had yielded some: stepping over them would leave a gap in what it
    /// yields, which nothing else would tell.
    #[error("records of {tp} from offset {position} up to offset {pruned_through} were deleted (retention or a prune) while this read was taking them; read again from offset {position} to get what the archive holds now")]
    PrunedUnderRead {
        tp: crate::TopicPartition,
        position: i64,
        pruned_through: i64,
    },
    /// A long read (a verify) was asked to stop before it finished. It
    /// changed nothing.
    #[error("{op} interrupted: asked to stop before it finished")]
    Interrupted { op: &'static str },
}

impl Error {
    /// An I/O failure that may have left pages in the page cache the disk
    /// does not hold (a failed write or fsync), as opposed to one that wrote
    /// nothing (no such file, no permission, a read-only filesystem) or no
    /// I/O failure at all (poison.rs decides on this whether to leave its mark).
    pub(crate) fn may_leave_unwritten_pages(&self) -> bool {
        let wrote = |e: &std::io::Error| {
            !matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::ReadOnlyFilesystem
                    | std::io::ErrorKind::WouldBlock
            ) && !crate::config::is_sled_lock_contention(e)
        };
        match self {
            Error::Io { source, .. } => wrote(source),
            Error::Store {
                source: sled::Error::Io(e),
                ..
            } => wrote(e),
            _ => false,
        }
    }

    /// Build a corruption error.
    pub fn corruption(location: Location, kind: CorruptionKind) -> Self {
        Error::Corruption { location, kind }
    }

    /// True when the error is a directory fsync that failed: one after it
    /// of the same directory is not to be trusted.
    pub(crate) fn is_failed_dir_sync(&self) -> bool {
        matches!(self, Error::Io { source, .. } if crate::sync::is_failed_dir_sync(source))
    }

    /// True when the error reports damaged stored bytes.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// A stable short code for metrics and logs.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Store { .. } => "store",
            Error::Corruption { .. } => "corruption",
            Error::Poisoned { .. } => "poisoned",
            Error::InvalidInput(_) => "invalid_input",
            Error::UnsupportedFormat { .. } => "unsupported_format",
            Error::Locked { .. } => "locked",
            Error::IncompleteBackup { .. } => "incomplete_backup",
            Error::Closed => "closed",
            Error::Interrupted { .. } => "interrupted",
            Error::PrunedUnderRead { .. } => "pruned_under_read",
        }
    }
}

/// Where a corruption was found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A write-ahead-log frame, by its LSN (the sled key).
    Wal { lsn: u64 },
    /// A read-index entry, by topic, partition and the first offset it covers.
    Index {
        topic: String,
        partition: i32,
        first_offset: i64,
    },
    /// A per-partition summary.
    Partition { topic: String, partition: i32 },
    /// A metadata key.
    Meta { key: &'static str },
    /// The Kafka topic id recorded for a topic (format 5).
    TopicId { topic: String },
    /// A key that does not belong to any known key space.
    Key { key_hex: String },
    /// The durable watermark file, `cairn.durable`, beside sled.
    Watermark,
    /// sled's own files (its log `db`, snapshots `snap.*`, `blobs/`, its
    /// settings `conf`), found damaged by sled while opening them, or by
    /// cairn's checks of them before sled opens (`conf` not the one cairn's
    /// settings make, `db` gone); at this offset of its log when sled
    /// says.
    SledFiles {
        path: std::path::PathBuf,
        log_offset: Option<u64>,
    },
    /// sled's log, found damaged by sled while reading a page of it after
    /// open (pages are read from the log as they are needed); at this
    /// offset of its log when sled says.
    SledLog { log_offset: Option<u64> },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Wal { lsn } => write!(f, "wal lsn {lsn}"),
            Location::Index {
                topic,
                partition,
                first_offset,
            } => write!(f, "index {topic}/{partition}@{first_offset}"),
            Location::Partition { topic, partition } => {
                write!(f, "partition summary {topic}/{partition}")
            }
            Location::Meta { key } => write!(f, "meta key {key}"),
            Location::TopicId { topic } => write!(f, "topic id of {topic}"),
            Location::Key { key_hex } => write!(f, "key {key_hex}"),
            Location::Watermark => write!(f, "watermark file cairn.durable"),
            Location::SledFiles { path, log_offset } => {
                write!(f, "sled's files in {}", path.display())?;
                match log_offset {
                    Some(o) => write!(f, " (log offset {o})"),
                    None => Ok(()),
                }
            }
            Location::SledLog { log_offset } => {
                write!(f, "sled's log")?;
                match log_offset {
                    Some(o) => write!(f, " at offset {o}"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What exactly is wrong with stored bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CorruptionKind {
    #[error("bad magic {found:02x?}")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported frame version {found}")]
    UnsupportedVersion { found: u8 },
    #[error("unknown frame kind {found}")]
    UnknownKind { found: u8 },
    #[error("unknown flag bits {found:#06x}")]
    UnknownFlags { found: u16 },
    #[error("truncated: need {expected} bytes, found {actual}")]
    Truncated { expected: u64, actual: u64 },
    /// `actual` is the whole length found, not the bytes past `expected`.
    #[error("{} trailing bytes after the declared length {expected} ({actual} bytes in all)", actual.saturating_sub(*expected))]
    TrailingBytes { expected: u64, actual: u64 },
    /// A frame whose checksum matches the bytes stored once its length
    /// field is read as their length: whole, with that field damaged (not
    /// cut short, so never truncated as a torn tail).
    #[error("length field reads {declared} body bytes, but the frame is whole at the {stored} stored: the length field is damaged")]
    LengthDamaged { declared: u64, stored: u64 },
    #[error("length {length} exceeds the maximum {max}")]
    LengthTooLarge { length: u64, max: u64 },
    #[error("checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    Checksum { expected: u32, actual: u32 },
    #[error("lsn gap: expected {expected}, found {found}")]
    LsnGap { expected: u64, found: u64 },
    /// A frame stored above an empty reserved slot (slots.rs): the log has
    /// a hole where the slot is.
    #[error("frame stored above the empty slot at lsn {slot_lsn}: the log has a hole")]
    FrameAfterSlot { slot_lsn: u64 },
    #[error("bad chunk sequence: {detail}")]
    BadChunkSequence { detail: String },
    #[error("body does not decode: {detail}")]
    Decode { detail: String },
    #[error("offsets out of order: {detail}")]
    OffsetOrder { detail: String },
    #[error("index does not match the log: {detail}")]
    IndexMismatch { detail: String },
    /// No frame where one must be: an index entry names this LSN, or it
    /// lies below the log's end (a live verify's snapshot of it).
    #[error("frame missing: the index or the log's end says one is stored here")]
    MissingFrame,
    #[error("bad key: {detail}")]
    BadKey { detail: String },
    #[error("metadata missing or invalid: {detail}")]
    BadMeta { detail: String },
    #[error("partition summary does not match the log: {detail}")]
    SummaryMismatch { detail: String },
    /// sled's recovery dropped the end of its log (it treats a damaged log
    /// record as the end), leaving an older but self-consistent store.
    #[error("the log ends at lsn {log_end} but lsn {durable} was durable (cairn.durable): the store lost its newest records")]
    LostSuffix { log_end: u64, durable: u64 },
    /// sled found bytes in its own files it cannot read (a damaged snapshot
    /// or log segment): on open, when nothing of the store can be read
    /// through sled until those files are repaired or restored; or later,
    /// reading a page of its log ([`Location::SledLog`]). Also cairn's own
    /// finding, before sled opens, that its settings file is not the one
    /// cairn's settings make (sled_conf.rs), or that its data file is gone
    /// (watermark.rs).
    #[error("sled cannot read its own files: {detail}")]
    SledUnreadable { detail: String },
    /// A header of one of sled's log segments fails its checksum
    /// (segments.rs): sled takes the segment for a free one whenever it
    /// reads that header as it opens.
    #[error("a log segment's header fails its checksum (stored {stored:#010x}, computed {computed:#010x}): whenever sled reads this header as it opens (for a segment written since its last snapshot, at every open; for any segment, when it rebuilds its state from the log, its snapshot lost, which a power loss can do, or damaged) it takes the segment for a free one and the frames in it are lost; copy the archive now with `cairn backup`, which copies records, not sled's segments, and run from the copy (docs/OPERATIONS.md, \"When the archive is damaged\")")]
    SegmentHeader { stored: u32, computed: u32 },
}

/// Input the engine refuses. Nothing is written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    #[error("topic name {topic:?} is invalid: {reason}")]
    Topic { topic: String, reason: &'static str },
    #[error("partition {partition} of topic {topic:?} is negative")]
    NegativePartition { topic: String, partition: i32 },
    #[error("record at {topic}/{partition}@{offset} has a negative offset")]
    NegativeOffset {
        topic: String,
        partition: i32,
        offset: i64,
    },
    #[error(
        "offsets for {topic}/{partition} are not increasing within one call: {previous} then {offset}"
    )]
    OffsetsNotIncreasing {
        topic: String,
        partition: i32,
        previous: i64,
        offset: i64,
    },
    #[error("record {topic}/{partition}@{offset} is {size_bytes} bytes, over record_bytes_max {max_bytes}")]
    RecordTooLarge {
        topic: String,
        partition: i32,
        offset: i64,
        size_bytes: u64,
        max_bytes: u64,
    },
    #[error("record at {topic}/{partition}@{offset} has offset {offset}, the largest a Kafka offset can be; the partition's next offset would not fit")]
    OffsetTooLarge {
        topic: String,
        partition: i32,
        offset: i64,
    },
    #[error("record {topic}/{partition}@{offset} has {count} headers, over the {max} a record may carry")]
    TooManyHeaders {
        topic: String,
        partition: i32,
        offset: i64,
        count: usize,
        max: usize,
    },
    #[error("records of {topic}/{partition} from offset {first_offset} encode to {bytes} bytes, over the {max} an entry may hold")]
    EntryTooLarge {
        topic: String,
        partition: i32,
        first_offset: i64,
        bytes: u64,
        max: u64,
    },
    #[error("offset {offset} for {topic}/{partition} to start or resume at is not a Kafka offset a partition can start at (0 up to, not including, {max})", max = i64::MAX)]
    StartOffset {
        topic: String,
        partition: i32,
        offset: i64,
    },
    #[error("configuration: {0}")]
    Config(String),
}

/// `text` with each OS error in Rust's debug form (`Os { code: 28, kind:
/// StorageFull, message: "No space left on device" }`) written as its
/// `Display` writes it (`No space left on device (os error 28)`). sled
/// 0.34.7 clones an I/O error into a new one holding the old one's debug
/// text (`Error::clone`, `result.rs`), which a full disk's message showed
/// (until 2026-12-07; an audit). Only a whole debug form is rewritten: a
/// code, then `, kind: `, then a message, then ` }`, with no ` }` before
/// the message; anything else stays as it is.
pub fn tidy_os_errors(text: &str) -> String {
    const OPEN: &str = "Os { code: ";
    const KIND: &str = ", kind: ";
    const MESSAGE: &str = ", message: \"";
    const CLOSE: &str = "\" }";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at]);
        let after = &rest[at + OPEN.len()..];
        let tidied = (|| {
            let digits = after.find(|c: char| !c.is_ascii_digit() && c != '-')?;
            let code: i32 = after[..digits].parse().ok()?;
            let kinded = after[digits..].strip_prefix(KIND)?;
            // The message must come before this error's own end.
            let m = kinded.find(MESSAGE)?;
            if kinded[..m].contains(" }") {
                return None;
            }
            let msg = &kinded[m + MESSAGE.len()..];
            let end = msg.find(CLOSE)?;
            let used = after.len() - msg.len() + end + CLOSE.len();
            Some((format!("{} (os error {code})", &msg[..end]), used))
        })();
        match tidied {
            Some((t, used)) => {
                out.push_str(&t);
                rest = &after[used..];
            }
            None => {
                out.push_str(OPEN);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `path` as one word of a shell command, for the commands messages give
/// to copy: as it is when every character is one no shell treats
/// specially, else in single quotes (a `'` in it written `'\''`). A path
/// that is not UTF-8 is given as `Path::display` shows it, which is no
/// longer that path: the message names it all the same. A relative path
/// that starts with `-` (read as options) or `=` (zsh expands it) gets
/// `./` before it.
pub fn shell_word(path: &std::path::Path) -> String {
    let text = path.to_string_lossy();
    let text = if text.starts_with(['-', '=']) {
        std::borrow::Cow::Owned(format!("./{text}"))
    } else {
        text
    };
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c));
    if plain {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// What a caught panic said: its message when it was given one (a `&str`
/// or a `String`, as `panic!` makes them), for an error or a poison reason.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tidy_tests {
    use super::{shell_word, tidy_os_errors};
    use std::path::Path;

    #[test]
    fn a_path_is_one_shell_word() {
        assert_eq!(
            shell_word(Path::new("/var/lib/cairn/a-1_b.c")),
            "/var/lib/cairn/a-1_b.c"
        );
        assert_eq!(
            shell_word(Path::new("/data/my archive")),
            "'/data/my archive'"
        );
        assert_eq!(shell_word(Path::new("/d/it's")), "'/d/it'\\''s'");
        assert_eq!(shell_word(Path::new("/d/$HOME*")), "'/d/$HOME*'");
        assert_eq!(shell_word(Path::new("")), "''");
        assert_eq!(shell_word(Path::new("-x/conf")), "./-x/conf");
        assert_eq!(shell_word(Path::new("=x")), "./=x");
        assert_eq!(shell_word(Path::new("-my x")), "'./-my x'");
    }

    #[test]
    fn os_errors_in_debug_form_are_written_as_displayed() {
        let io = std::io::Error::from_raw_os_error(28);
        let debug = format!("IO error: {io:?}, writing into /d/sled");
        assert_eq!(
            tidy_os_errors(&debug),
            format!("IO error: {io}, writing into /d/sled")
        );
        assert_eq!(
            tidy_os_errors("a: Os { code: 5, kind: Uncategorized, message: \"Input/output error\" }; b: Os { code: 28, kind: StorageFull, message: \"No space left on device\" }"),
            "a: Input/output error (os error 5); b: No space left on device (os error 28)"
        );
        for left in [
            "no error here",
            "Os { code: x",
            "Os { code: 5, kind: K }",
            "Os { code: 28é, message: \"x\" }",
            "Os { code: é",
            "",
        ] {
            assert_eq!(tidy_os_errors(left), left);
        }
        // One error's end is not crossed to take the next one's message.
        assert_eq!(
            tidy_os_errors("Os { code: 5, kind: K }; b: Os { code: 28, kind: StorageFull, message: \"No space left on device\" }"),
            "Os { code: 5, kind: K }; b: No space left on device (os error 28)"
        );
    }
}

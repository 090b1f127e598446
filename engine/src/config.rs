//! Engine configuration.

use std::path::{Path, PathBuf};

use crate::body::ENTRY_BODY_BYTES_MAX;
use crate::error::InvalidInput;

/// What recovery does with a torn last entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Verify the whole store on open (O(archive)); any damage, and any
    /// trace of an interrupted write (a torn tail, or an entry a crash left
    /// without its index entry or summary), refuses the open. For checking a
    /// store that was closed cleanly; after a crash, open it with the
    /// default mode.
    Strict,
    /// A torn last entry (incomplete final write) is truncated and reported;
    /// anything else in the tail still refuses the open. Open is O(tail).
    #[default]
    TolerateTail,
}

/// sled's folder in the store's directory.
pub const SLED_DIR: &str = "sled";

/// sled segment size. Large enough that a consolidated leaf of 64 KiB
/// frames stays below sled's blob threshold (segment / 4). Fixed at creation.
pub const SLED_SEGMENT_BYTES: usize = 8 << 20;

/// Largest frame body a store may be configured to write. sled moves a
/// logged node (a whole leaf, not one value) into a blob file once it is
/// over a quarter of a segment, and writes blobs from inside an insert,
/// where cairn's blob fsync could find one half written. A leaf holds at
/// most 16 items before it splits (a merge may leave 19): 19 frames of
/// 96 KiB and their keys stay under `SLED_SEGMENT_BYTES / 4`, so no frame
/// leaf becomes a blob. Frames up to `frame::FRAME_BODY_BYTES_MAX` are still read.
pub const FRAME_BODY_BYTES_WRITE_MAX: usize = 96 << 10;
const _: () = assert!(
    19 * (FRAME_BODY_BYTES_WRITE_MAX + 64) < SLED_SEGMENT_BYTES / 4
        && FRAME_BODY_BYTES_WRITE_MAX <= crate::frame::FRAME_BODY_BYTES_MAX
);

/// Smallest frame body a store may be configured to write (every build
/// has refused smaller): it bounds how many frames an entry can take.
pub const FRAME_BODY_BYTES_MIN: usize = 1024;

/// Hard cap on `record_bytes_max`: a record must fit in one entry body.
pub const RECORD_BYTES_MAX_LIMIT: u64 = 16 << 20;

/// Smallest and largest `checkpoint_interval_bytes`. Below the smallest,
/// nearly every write would add a checkpoint insert; above the largest,
/// an open after a crash could scan that much of the log again (the
/// checkpoint bounds recovery's work: ARCHITECTURE.md).
pub const CHECKPOINT_INTERVAL_BYTES_MIN: u64 = 4 << 10;
pub const CHECKPOINT_INTERVAL_BYTES_MAX: u64 = 16 << 30;

/// How an engine is opened.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The data directory. The engine keeps `cairn.lock` and `sled/` in it.
    pub path: PathBuf,
    pub recovery_mode: RecoveryMode,
    /// Largest record payload (key + value + headers) accepted. Default 8 MiB.
    pub record_bytes_max: u64,
    /// Target payload size of one entry; larger batches become several
    /// entries, so reads stay fine-grained. Default 1 MiB.
    pub entry_bytes_target: usize,
    /// Largest frame body (one sled value). Default 64 KiB.
    pub frame_body_bytes_max: usize,
    /// sled's page cache. sled's own default (1 GiB) is far too large.
    pub cache_capacity_bytes: u64,
    /// Move the recovery checkpoint forward after this many bytes of frames,
    /// which bounds the work of recovery after a crash.
    pub checkpoint_interval_bytes: u64,
    /// An open to read only (an export, a status, a backup's source, a
    /// restore's): a store with a damaged header of one of sled's log
    /// segments opens, the damage listed in its recovery report
    /// (`damaged_segment_headers`), and every write of records, summaries
    /// and topic ids is refused with that damage's error (sled's and
    /// recovery's own writes at the open, and a close's checkpoint, are
    /// made as at any open: the next open works them out again).
    /// Otherwise (the default) such a store is refused as it opens: sled
    /// takes a segment whose header fails its CRC for a free one whenever
    /// an open reads that header, so records written into it would be gone
    /// at a later open, after their offsets were committed (segments.rs;
    /// until 2026-12-07 `cairn run` archived onto such a store; found by an
    /// audit).
    pub open_to_read: bool,
}

/// The first of sled's files in `sled_dir` that this process may not open
/// as sled does (its folder and `blobs/` read and written, `conf` and the
/// snapshots read, `db` read and written), if one is.
fn refused_file(sled_dir: &Path) -> Option<PathBuf> {
    use std::fs::OpenOptions;
    let denied = |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied);
    let dir_ok = |p: &Path| -> std::io::Result<()> {
        std::fs::read_dir(p)?;
        rustix::fs::access(
            p,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        )?;
        Ok(())
    };
    if denied(dir_ok(sled_dir)) {
        return Some(sled_dir.to_path_buf());
    }
    let mut files = vec![(sled_dir.join("conf"), false), (sled_dir.join("db"), true)];
    if let Ok(entries) = std::fs::read_dir(sled_dir) {
        let mut snaps: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("snap."))
            })
            .collect();
        snaps.sort();
        files.extend(snaps.into_iter().map(|p| (p, false)));
    }
    for (path, write) in files {
        let opened = OpenOptions::new()
            .read(true)
            .write(write)
            .open(&path)
            .map(drop);
        if denied(opened) {
            return Some(path);
        }
    }
    let blobs = sled_dir.join("blobs");
    denied(dir_ok(&blobs)).then_some(blobs)
}

/// sled's refusal of a database whose lock another handle holds (it says
/// so only in its message).
pub(crate) fn is_sled_lock_contention(e: &std::io::Error) -> bool {
    e.to_string().contains("could not acquire lock")
}

impl EngineConfig {
    pub fn new(path: impl AsRef<Path>) -> Self {
        EngineConfig {
            path: path.as_ref().to_path_buf(),
            recovery_mode: RecoveryMode::default(),
            record_bytes_max: 8 << 20,
            entry_bytes_target: 1 << 20,
            frame_body_bytes_max: 64 << 10,
            cache_capacity_bytes: 64 << 20,
            checkpoint_interval_bytes: 64 << 20,
            open_to_read: false,
        }
    }

    pub fn recovery_mode(mut self, mode: RecoveryMode) -> Self {
        self.recovery_mode = mode;
        self
    }

    pub fn record_bytes_max(mut self, n: u64) -> Self {
        self.record_bytes_max = n;
        self
    }

    pub fn frame_body_bytes_max(mut self, n: usize) -> Self {
        self.frame_body_bytes_max = n;
        self
    }

    pub fn entry_bytes_target(mut self, n: usize) -> Self {
        self.entry_bytes_target = n;
        self
    }

    pub fn checkpoint_interval_bytes(mut self, n: u64) -> Self {
        self.checkpoint_interval_bytes = n;
        self
    }

    /// See [`open_to_read`](Self::open_to_read) (the field).
    pub fn open_to_read(mut self, yes: bool) -> Self {
        self.open_to_read = yes;
        self
    }

    /// Where sled's files live: `<path>/sled`.
    pub fn sled_path(&self) -> PathBuf {
        self.path.join(SLED_DIR)
    }

    /// sled's data file, `<path>/sled/db`: the file cairn fdatasyncs.
    pub fn sled_data_path(&self) -> PathBuf {
        self.sled_path().join("db")
    }

    /// Whether a store is here: sled's data file exists (an empty or new
    /// folder holds none, and opening one starts a new store). A path that
    /// cannot be looked at (permission denied, a loop of links) is an I/O
    /// error naming it: until 2026-12-07 it read as no data file, which a
    /// watermark beside it then called a store that lost its records
    /// (found by an audit).
    pub fn store_exists(&self) -> crate::Result<bool> {
        is_present(&self.sled_data_path(), "look for the store's data file")
    }

    /// The sled configuration for this store. Tools that open the sled tree
    /// directly (tests, fuzzers) must use it: sled refuses a different
    /// segment size.
    pub fn sled_config(&self) -> sled::Config {
        sled::Config::new()
            .path(self.sled_path())
            .cache_capacity(self.cache_capacity_bytes)
            .segment_size(SLED_SEGMENT_BYTES)
            // The engine decides when sled flushes (a sync; a writeback,
            // writeback.rs); sled's 500 ms flusher would add unplanned ones.
            .flush_every_ms(None)
    }

    /// Wait, for at most 5 s, until no sled handle holds this store's
    /// files ([`Self::open_sled`] waits so too, before it opens them). A `RecordIter` or tree handle kept
    /// after its engine was dropped still holds them, and writes and
    /// fsyncs sled's buffers at its own drop: the poison and open marks
    /// (poisoned.rs) are acted on only after that, since a sync and a
    /// cache drop made before it would not cover what that drop writes
    /// (until the night of 2026-12-04 an open acted on them first, and
    /// then waited for sled's lock). A store not made yet, or a file system
    /// without `flock`, waits for nothing: sled's own open says the rest.
    pub(crate) fn wait_for_sled_handles(&self) -> Result<(), crate::Error> {
        let db = self.sled_data_path();
        let Ok(file) = std::fs::File::open(&db) else {
            return Ok(());
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match file.try_lock() {
                Ok(()) => {
                    // Let go at once: sled takes it through its own handle.
                    let _ = file.unlock();
                    return Ok(());
                }
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    // Polling, not synchronisation: sled offers no way to
                    // wait for another handle's threads to let go.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(crate::Error::Io {
                        op: "wait for sled's files to be let go",
                        path: db,
                        source: std::io::Error::new(
                            std::io::ErrorKind::WouldBlock,
                            "still held after 5 s, by a RecordIter or tree handle that outlived an engine of this process, or by another process: nothing was done to the store",
                        ),
                    })
                }
                Err(std::fs::TryLockError::Error(_)) => return Ok(()),
            }
        }
    }

    /// Open the sled database with [`Self::sled_config`].
    ///
    /// A store's sled lock can still be held for a moment by the I/O threads
    /// of an engine that was just dropped in this process, so the open
    /// first waits for it, bounded (`wait_for_sled_handles`, 5 s).
    /// Callers outside the engine must hold `cairn.lock` or know the store
    /// is closed.
    pub fn open_sled(&self) -> Result<sled::Db, crate::Error> {
        // sled panics on some settings (a cache under 256 bytes): refused
        // here first, for every path that opens the store.
        self.validate()?;
        self.wait_for_sled_handles()?;
        // Before sled reads it: sled takes a damaged settings file for
        // other settings (sled_conf.rs).
        crate::sled_conf::check(&self.sled_path())?;
        match self.sled_config().open() {
            Ok(db) => Ok(db),
            // Damage sled found in its own files is corruption like any
            // other: typed, and naming where.
            Err(sled::Error::Corruption { at, .. }) => Err(crate::Error::Corruption {
                location: crate::error::Location::SledFiles {
                    path: self.sled_path(),
                    log_offset: at.map(|p| p.lid()),
                },
                kind: crate::error::CorruptionKind::SledUnreadable {
                    detail: "a snapshot or log record failed sled's own checks on open (sled's own log line before this, when it writes one, says which it took it for, and can blame the snapshot for damage to the log; on a copy of the archive, sled can be made to rebuild from its log without its snapshots, which verify then checks: docs/OPERATIONS.md, \"When the archive is damaged\")".into(),
                },
            }),
            // Taken again since the wait: by another process that got past
            // cairn's own lock (cairn.lock).
            Err(sled::Error::Io(source)) if is_sled_lock_contention(&source) => {
                Err(crate::Error::Store {
                    op: "open sled: its files are held by another handle (another process, or a RecordIter or tree handle of this one)",
                    source: sled::Error::Io(source),
                })
            }
            // A file sled could not open or read (permissions, a missing
            // folder): named, as every I/O error is (until the night of
            // 2026-12-04 only sled's own text said which).
            Err(sled::Error::Io(source)) => Err(crate::Error::Io {
                op: "open sled",
                path: match source.kind() {
                    // sled names none of its files: the one refused is
                    // found by trying each as sled opens it (until
                    // 2026-12-07 only sled's folder was named; found by an
                    // audit).
                    std::io::ErrorKind::PermissionDenied => refused_file(&self.sled_path())
                        .unwrap_or_else(|| self.sled_path()),
                    _ => self.sled_path(),
                },
                source,
            }),
            Err(source) => Err(crate::Error::Store {
                op: "open sled",
                source,
            }),
        }
    }

    /// Checks the settings as [`crate::Engine::open`] and every other
    /// opening of the store do, before anything is opened:
    /// `InvalidInput::Config` names the first one out of range.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        let bad = |s: String| Err(InvalidInput::Config(s));
        if self.record_bytes_max == 0 || self.record_bytes_max > RECORD_BYTES_MAX_LIMIT {
            return bad(format!(
                "record_bytes_max {} must be in 1..={RECORD_BYTES_MAX_LIMIT}",
                self.record_bytes_max
            ));
        }
        if self.frame_body_bytes_max < FRAME_BODY_BYTES_MIN
            || self.frame_body_bytes_max > FRAME_BODY_BYTES_WRITE_MAX
        {
            return bad(format!(
                "frame_body_bytes_max {} must be in {FRAME_BODY_BYTES_MIN}..={FRAME_BODY_BYTES_WRITE_MAX}",
                self.frame_body_bytes_max
            ));
        }
        if self.entry_bytes_target == 0 || self.entry_bytes_target > ENTRY_BODY_BYTES_MAX / 4 {
            return bad(format!(
                "entry_bytes_target {} must be in 1..={}",
                self.entry_bytes_target,
                ENTRY_BODY_BYTES_MAX / 4
            ));
        }
        if !(CHECKPOINT_INTERVAL_BYTES_MIN..=CHECKPOINT_INTERVAL_BYTES_MAX)
            .contains(&self.checkpoint_interval_bytes)
        {
            return bad(format!(
                "checkpoint_interval_bytes {} must be in {CHECKPOINT_INTERVAL_BYTES_MIN}..={CHECKPOINT_INTERVAL_BYTES_MAX}",
                self.checkpoint_interval_bytes
            ));
        }
        if self.cache_capacity_bytes < (1 << 20) {
            return bad("cache_capacity_bytes must be at least 1 MiB".into());
        }
        Ok(())
    }
}

/// Whether something is at `path` (not followed, if a link): false for
/// nothing there, or a file where a folder on the way would be; any other
/// failure to look (permission denied, a loop of links) is an I/O error of
/// `op` naming `path`, not an absence.
pub(crate) fn is_present(path: &std::path::Path, op: &'static str) -> crate::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(source) => Err(crate::Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }),
    }
}

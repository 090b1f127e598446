//! The durable watermark: the highest LSN this store has reported durable,
//! kept in `cairn.durable` beside sled's directory, not inside it.
//!
//! Why it exists: sled 0.34's own recovery treats a damaged log record as
//! the end of its log and silently drops everything after it. The tree it
//! leaves behind is self-consistent, only older: frames, index, summaries
//! and checkpoint all agree, so no check inside sled can see the loss.
//! Measured: without this file, 21 of 24 seeded damage trials on a closed
//! archive lost records with `verify` and `export` both exiting 0
//! (connector/tests/corruption_trials.rs). An independent record of how far
//! the log reached turns that into a typed `LostSuffix` error.
//!
//! Layout (16 bytes, little-endian; docs/FORMAT.md):
//! `[0..4)` magic `CRNW`, `[4..12)` LSN, `[12..16)` CRC-32 of `[0..12)`.
//!
//! # Invariants
//! - The file never names an LSN before the fdatasync of sled that made it
//!   durable has returned, so it is never ahead of the log, even after power
//!   loss (an older value only narrows what can be detected).
//! - It is written after a durable sync that moved the durable LSN (into
//!   the page cache, which survives a process crash); a value written and
//!   not yet synced is fdatasynced on open, at close (and a
//!   drop's sync), and by the first sync at least `WATERMARK_SYNC_INTERVAL`
//!   after its previous one, whether or not that sync moves the LSN.
//! - A store whose log ends below the watermark is refused on open.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{CorruptionKind, Error, Location, Result};

pub const WATERMARK_FILE: &str = "cairn.durable";
/// A new watermark file's name until it is renamed into place
/// (`Watermark::open`); removal.rs removes one a crash left.
pub const WATERMARK_REPLACEMENT_FILE: &str = "cairn.durable.new";

/// Where a new watermark file is written before it is renamed into place.
pub(crate) fn replacement_path(dir: &Path) -> PathBuf {
    dir.join(WATERMARK_REPLACEMENT_FILE)
}
pub const WATERMARK_MAGIC: [u8; 4] = *b"CRNW";
pub const WATERMARK_BYTES: usize = 16;
/// Least time between two fdatasyncs of the watermark during appends.
pub const WATERMARK_SYNC_INTERVAL: Duration = Duration::from_secs(1);

pub fn encode(lsn: u64) -> [u8; WATERMARK_BYTES] {
    let mut b = [0u8; WATERMARK_BYTES];
    b[0..4].copy_from_slice(&WATERMARK_MAGIC);
    b[4..12].copy_from_slice(&lsn.to_le_bytes());
    let crc = crc32fast::hash(&b[0..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

pub fn decode(b: &[u8]) -> std::result::Result<u64, CorruptionKind> {
    if b.len() > WATERMARK_BYTES {
        return Err(CorruptionKind::TrailingBytes {
            expected: WATERMARK_BYTES as u64,
            actual: b.len() as u64,
        });
    }
    if b.len() < WATERMARK_BYTES {
        return Err(CorruptionKind::Truncated {
            expected: WATERMARK_BYTES as u64,
            actual: b.len() as u64,
        });
    }
    let mut magic = [0u8; 4];
    magic.copy_from_slice(&b[0..4]);
    if magic != WATERMARK_MAGIC {
        return Err(CorruptionKind::BadMagic { found: magic });
    }
    let expected = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
    let actual = crc32fast::hash(&b[0..12]);
    if expected != actual {
        return Err(CorruptionKind::Checksum { expected, actual });
    }
    Ok(u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")))
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::Io { op, path, source }
}

/// `options` opened at `path`, refusing a symbolic link there (ELOOP)
/// and anything but a regular file: a FIFO put under the name would
/// otherwise hang every open of the store, holding its lock, until
/// something wrote to it (O_NONBLOCK opens it at once, to be refused; it
/// changes nothing for a regular file). Since the night of 2026-12-04.
fn no_follow(options: &mut std::fs::OpenOptions, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (the watermark is one; something else was put under its name)",
        ));
    }
    Ok(file)
}

/// Read the watermark of the store at `dir`, if it has one.
pub fn read(dir: &Path) -> Result<Option<u64>> {
    use std::io::Read;
    let path = dir.join(WATERMARK_FILE);
    // At most one byte more than a watermark: a longer file is damage
    // that `decode` names (with the file's length), never an allocation of
    // whatever length the file has.
    // Never through a link someone left in a directory that may be
    // anyone's (a backup's target), as the lock file and the marks.
    let read = no_follow(std::fs::OpenOptions::new().read(true), &path).and_then(|f| {
        let file_bytes = f.metadata()?.len();
        let mut b = Vec::with_capacity(WATERMARK_BYTES + 1);
        f.take(WATERMARK_BYTES as u64 + 1).read_to_end(&mut b)?;
        Ok((b, file_bytes))
    });
    match read {
        Ok((b, file_bytes)) => decode(&b)
            .map_err(|kind| match kind {
                CorruptionKind::TrailingBytes { expected, .. } => CorruptionKind::TrailingBytes {
                    expected,
                    actual: file_bytes,
                },
                kind => kind,
            })
            .map(Some)
            .map_err(|kind| Error::corruption(Location::Watermark, kind)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read watermark", &path)(e)),
    }
}

/// A store folder whose sled data file is gone while its watermark says
/// records were durable lost them: damage, named, not "no store here"
/// (which a read-only command would say of it, and an open would take as
/// a new store). Reads only the watermark.
pub fn refuse_lost_store(cfg: &crate::EngineConfig) -> Result<()> {
    if cfg.store_exists()? {
        return Ok(());
    }
    match read(&cfg.path)? {
        Some(durable) if durable > 0 => Err(Error::corruption(
            Location::Watermark,
            CorruptionKind::SledUnreadable {
                detail: format!(
                    "sled's data file (sled/db) is missing, while this file says lsn {durable} was durable: the store lost its records"
                ),
            },
        )),
        _ => Ok(()),
    }
}

/// The log ends at `last_lsn`; the watermark says `durable` was reached.
pub fn check(last_lsn: u64, durable: Option<u64>) -> Result<()> {
    match durable {
        Some(d) if last_lsn < d => Err(Error::corruption(
            Location::Wal { lsn: last_lsn + 1 },
            CorruptionKind::LostSuffix {
                log_end: last_lsn,
                durable: d,
            },
        )),
        _ => Ok(()),
    }
}

#[derive(Debug)]
pub struct Watermark {
    file: File,
    path: PathBuf,
    written: u64,
    synced: u64,
    last_sync: Instant,
}

impl Watermark {
    /// Open (creating it at `lsn` if missing) the watermark file of `dir`.
    pub fn open(dir: &Path, lsn: u64) -> Result<Watermark> {
        let path = dir.join(WATERMARK_FILE);
        // Only a file that is not there is missing: a stat that fails for
        // another reason (EIO, a parent's permission) must not have a
        // witness that is still there replaced (`exists` says false then).
        let existed = match std::fs::symlink_metadata(&path) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(io_err("stat watermark", &path)(e)),
        };
        if !existed {
            // Created whole or not at all: written and synced under another
            // name, then renamed into place. Created in place, a crash
            // between the create and the first write (or a power loss that
            // kept the directory entry but not the bytes) would leave an
            // empty file that every later open refuses as damaged.
            let tmp = replacement_path(dir);
            // One a crash left is the store's own: replaced. One made new,
            // never through a link someone planted under its name (a
            // backup's directory may be anyone's): that would truncate the
            // link's target.
            let _ = std::fs::remove_file(&tmp);
            let created = no_follow(
                std::fs::OpenOptions::new().write(true).create_new(true),
                &tmp,
            )
            .and_then(|f| {
                f.write_all_at(&encode(lsn), 0)?;
                f.sync_data()
            })
            .and_then(|()| std::fs::rename(&tmp, &path));
            created.map_err(io_err("create watermark", &path))?;
            crate::sync::sync_dir(dir).map_err(io_err("sync data directory", dir))?;
        }
        let file = no_follow(std::fs::OpenOptions::new().read(true).write(true), &path)
            .map_err(io_err("open watermark", &path))?;
        let mut w = Watermark {
            file,
            path,
            written: 0,
            synced: 0,
            last_sync: Instant::now(),
        };
        if existed {
            let p = w.path.clone();
            w.write(lsn).map_err(io_err("write watermark", &p))?;
            w.sync().map_err(io_err("sync watermark", &p))?;
        } else {
            // Created holding `lsn`, synced: nothing to write again.
            (w.written, w.synced) = (lsn, lsn);
        }
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, lsn: u64) -> io::Result<()> {
        self.file.write_all_at(&encode(lsn), 0)?;
        self.written = lsn;
        Ok(())
    }

    /// Record that `lsn` is durable in sled. Call only after the sync that
    /// made it durable returned.
    ///
    /// A value written since the last fdatasync is synced by the first
    /// call at least [`WATERMARK_SYNC_INTERVAL`] after it, also one that
    /// does not move the LSN (a retention step's sync, an idle archive's):
    /// until the night of 2026-12-03, only a sync that moved it did.
    pub fn advance(&mut self, lsn: u64) -> io::Result<()> {
        if lsn > self.written {
            self.write(lsn)?;
        }
        self.sync_if_due()
    }

    /// Whether a value waits for its fdatasync; then, with `age`, the
    /// interval is taken to have passed, and without it, to have just
    /// begun (for an hour: a test's slow fdatasync does not end it). For
    /// the engine's tests, which set the clock rather than race it.
    #[cfg(test)]
    pub(crate) fn pending(&mut self, age: bool) -> bool {
        self.last_sync = if age {
            Instant::now() - WATERMARK_SYNC_INTERVAL
        } else {
            Instant::now() + std::time::Duration::from_secs(3600)
        };
        self.synced != self.written
    }

    /// fdatasync a value written since the last fdatasync, once
    /// [`WATERMARK_SYNC_INTERVAL`] has passed since it: also for an idle
    /// store, whose syncs have nothing to flush.
    pub fn sync_if_due(&mut self) -> io::Result<()> {
        if self.synced != self.written && self.last_sync.elapsed() >= WATERMARK_SYNC_INTERVAL {
            self.sync()?;
        }
        Ok(())
    }

    /// fdatasync the file if it holds a value not yet synced.
    pub fn sync(&mut self) -> io::Result<()> {
        if self.synced != self.written || self.synced == 0 {
            self.file.sync_data()?;
            self.synced = self.written;
        }
        self.last_sync = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value left unsynced (written within the interval of the last
    /// fdatasync) is synced by the first call after the interval, even
    /// one that does not move the LSN; never before it.
    #[test]
    fn a_pending_value_is_synced_by_a_later_sync_that_does_not_move_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Watermark::open(dir.path(), 1).unwrap();
        assert_eq!((w.written, w.synced), (1, 1));
        // Set, not raced: the interval begins now and lasts (an hour).
        w.last_sync = Instant::now() + std::time::Duration::from_secs(3600);
        w.advance(5).unwrap();
        assert_eq!((w.written, w.synced), (5, 1), "within the interval");
        w.advance(5).unwrap();
        assert_eq!(w.synced, 1, "still within the interval");
        w.last_sync = Instant::now() - WATERMARK_SYNC_INTERVAL;
        w.advance(5).unwrap();
        assert_eq!((w.written, w.synced), (5, 5), "synced, the LSN unmoved");
        // Nothing pending: nothing to sync, the interval's clock untouched.
        let before = w.last_sync;
        w.advance(4).unwrap();
        assert_eq!((w.written, w.synced, w.last_sync), (5, 5, before));
        assert_eq!(read(dir.path()).unwrap(), Some(5));
    }

    /// Something under the watermark's name that a stat sees (here a
    /// link to nothing, which `Path::exists` took for no file) is never
    /// replaced as if the watermark were missing: the open fails.
    #[test]
    fn a_name_taken_by_something_else_is_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WATERMARK_FILE);
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &path).unwrap();
        let e = Watermark::open(dir.path(), 7).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_symlink());
    }
}

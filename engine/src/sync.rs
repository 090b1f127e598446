//! Making sled's writes durable.
//!
//! sled 0.34.7's `flush()` writes its buffers and calls `sync_file_range`,
//! never `fsync`/`fdatasync` (spacejam/sled#1452). That survives a process
//! crash but not power loss: the drive cache is not flushed and the file size
//! is not persisted. So after every `flush()` this module:
//!
//! 1. fsyncs any file in `sled/blobs/` it has not synced yet, then the
//!    `blobs` directory (sled writes blobs with a plain `write_all`);
//! 2. `fdatasync`s `sled/db` through a handle opened once at start.
//!
//! sled does fsync in three places of its own: in `Log::drop` (unwrapping
//! the result), when its recovery zeroes a torn segment, and when it
//! truncates segments. None of them is relied on (one that fails at open
//! fails the open, which leaves the poison mark). That the handle here is
//! this module's own, opened as the store opens, is: a writeback error the
//! kernel reported to one of sled's later fsyncs is still reported to it
//! (Linux tells each descriptor open then), where a descriptor opened after
//! the report would not be told.
//!
//! # Invariants
//! - A failure here is never retried: the caller poisons the engine, and
//!   this module refuses every later sync without a system call. The
//!   refusal is its own, not left to the caller's poison check: a sync
//!   leader that passed that check just before an idle `sync`'s watermark
//!   fdatasync failed (the poison is set after the syncer is let go) would
//!   otherwise fdatasync the watermark again, which Linux answers with
//!   success once it has reported the error (until the night of
//!   2026-12-04 it could).

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::watermark::Watermark;

/// Failpoint: make the next sync fail as an I/O error would.
#[doc(hidden)]
pub const FAILPOINT_FLUSH_ERR: &str = "wal::flush::err";

#[derive(Debug)]
pub struct DurableSync {
    data_file: File,
    data_path: PathBuf,
    blobs_dir: PathBuf,
    /// The blobs fsynced, by name, with the length each had then.
    synced_blobs: HashMap<OsString, u64>,
    /// Blob fsyncs so far, for the tests.
    #[cfg(test)]
    blob_fsyncs: u64,
    /// Set once recovery is done; advanced after every successful sync.
    watermark: Option<Watermark>,
    /// The first failure, once one happened: every later sync is refused.
    failed: Option<String>,
    /// Whether sled's folder's entries (and the folder's in its parent)
    /// are still to be synced by the next sync (`open_unsynced`).
    dirs_pending: bool,
}

impl DurableSync {
    pub fn open(sled_dir: &Path) -> io::Result<Self> {
        let mut s = Self::open_unsynced(sled_dir)?;
        // Files sled created before we got here: sync them and their directories.
        s.sync_blobs(true)?;
        sync_dirs(sled_dir)?;
        s.dirs_pending = false;
        Ok(s)
    }

    /// The data file's handle alone, opened before sled opens the store (a
    /// verify of a stopped store, which must not fail on a failing disk
    /// before it has checked anything): nothing is synced here, and the
    /// first `sync` also syncs what `open` would have (the blobs, sled's
    /// folder and its entry in its parent; sled renames a new snapshot
    /// into its folder as it opens).
    pub fn open_unsynced(sled_dir: &Path) -> io::Result<Self> {
        let data_path = sled_dir.join("db");
        let data_file = File::open(&data_path).map_err(at("open", &data_path))?;
        Ok(DurableSync {
            data_file,
            data_path,
            blobs_dir: sled_dir.join("blobs"),
            synced_blobs: HashMap::new(),
            #[cfg(test)]
            blob_fsyncs: 0,
            watermark: None,
            failed: None,
            dirs_pending: true,
        })
    }

    pub fn data_path(&self) -> &Path {
        &self.data_path
    }

    /// Start keeping the durable watermark (after recovery).
    pub fn set_watermark(&mut self, w: Watermark) {
        self.watermark = Some(w);
    }

    /// Flush sled and make everything it wrote durable, then record that
    /// `durable_lsn` is durable in the watermark file.
    pub fn sync(&mut self, db: &sled::Db, durable_lsn: u64) -> io::Result<()> {
        self.once(|s| {
            let flushing = "flush sled's log into";
            fail::fail_point!(FAILPOINT_FLUSH_ERR, |_| Err(at(flushing, &s.data_path)(
                io::Error::other("injected failure at wal::flush::err")
            )));
            db.flush()
                .map_err(|e| at(flushing, &s.data_path)(sled_to_io(e)))?;
            s.sync_blobs(s.dirs_pending)?;
            s.data_file
                .sync_data()
                .map_err(at("fdatasync", &s.data_path))?;
            if s.dirs_pending {
                // sled's folder: the data file's.
                if let Some(dir) = s.data_path.parent() {
                    sync_dirs(dir)?;
                }
                s.dirs_pending = false;
            }
            if let Some(w) = s.watermark.as_mut() {
                w.advance(durable_lsn)
                    .map_err(at("write or fdatasync", w.path()))?;
            }
            Ok(())
        })
    }

    /// Run `step` unless an earlier step failed, and remember its failure:
    /// a failed sync is never followed by another (module invariants).
    fn once(&mut self, step: impl FnOnce(&mut Self) -> io::Result<()>) -> io::Result<()> {
        if let Some(first) = &self.failed {
            return Err(io::Error::other(format!(
                "an earlier sync of this store failed ({first}); never retried"
            )));
        }
        step(self).inspect_err(|e| self.failed = Some(e.to_string()))
    }

    /// [`Watermark::pending`], for the engine's tests.
    #[cfg(test)]
    pub(crate) fn watermark_pending(&mut self, age: bool) -> bool {
        self.watermark.as_mut().is_some_and(|w| w.pending(age))
    }

    /// fdatasync the watermark file if a value waits past its interval
    /// (an idle store's sync, which flushes nothing).
    pub fn sync_watermark_if_due(&mut self) -> io::Result<()> {
        self.once(|s| match s.watermark.as_mut() {
            Some(w) => w.sync_if_due().map_err(at("fdatasync", w.path())),
            None => Ok(()),
        })
    }

    /// fdatasync the watermark file (at close).
    pub fn sync_watermark(&mut self) -> io::Result<()> {
        self.once(|s| match s.watermark.as_mut() {
            Some(w) => w.sync().map_err(at("fdatasync", w.path())),
            None => Ok(()),
        })
    }

    fn sync_blobs(&mut self, force_dir: bool) -> io::Result<()> {
        let blobs = &self.blobs_dir;
        let entries = match std::fs::read_dir(blobs) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(at("list", blobs)(e)),
        };
        let mut present = HashMap::new();
        let mut new_files = false;
        // sled may delete a blob it no longer needs at any time.
        let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
        for entry in entries {
            let entry = entry.map_err(at("list", blobs))?;
            let name = entry.file_name();
            let path = entry.path();
            // Its length, read before the fsync: a blob sled was still
            // writing (an insert beside this sync writes it in three
            // `write_all`s) is fsynced again once it has grown, so the
            // sync that covers that insert does not skip it.
            let len = match entry.metadata() {
                Ok(m) => m.len(),
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(at("stat", &path)(e)),
            };
            if self.synced_blobs.get(&name) != Some(&len) {
                match File::open(&path) {
                    Ok(f) => f.sync_all().map_err(at("fsync", &path))?,
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(at("open", &path)(e)),
                }
                #[cfg(test)]
                {
                    self.blob_fsyncs += 1;
                }
                new_files |= !self.synced_blobs.contains_key(&name);
            }
            present.insert(name, len);
        }
        self.synced_blobs = present;
        if new_files || force_dir {
            sync_dir_named(blobs)?;
        }
        Ok(())
    }
}

/// Failpoint: at every directory fsync (`sync_dir`); `return` fails it
/// as a failed fsync (`is_failed_dir_sync`).
#[doc(hidden)]
pub const FAILPOINT_SYNC_DIR: &str = "sync::dir";

/// fsync a directory so that the entries created in it are durable. A
/// failed fsync comes back marked ([`is_failed_dir_sync`]): one that
/// failed must not be followed by another of the same directory that is
/// trusted (a second may pass with nothing written).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    // Said, so that a caller's "fsync directory D" is not taken for the
    // fsync's failure.
    let file = File::open(dir).map_err(|e| io::Error::new(e.kind(), format!("open: {e}")))?;
    fail::fail_point!(FAILPOINT_SYNC_DIR, |_| Err(DirSyncFailed::wrap(
        io::Error::other("injected by the failpoint sync::dir")
    )));
    file.sync_all().map_err(DirSyncFailed::wrap)
}

/// A directory fsync's error, as [`sync_dir`] returns it: the kind and
/// the text are the fsync's own.
#[derive(Debug)]
struct DirSyncFailed(io::Error);

impl DirSyncFailed {
    fn wrap(e: io::Error) -> io::Error {
        io::Error::new(e.kind(), DirSyncFailed(e))
    }
}

impl std::fmt::Display for DirSyncFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for DirSyncFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Whether `e` is a directory fsync that failed ([`sync_dir`]'s, not its
/// open of the directory).
pub(crate) fn is_failed_dir_sync(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<DirSyncFailed>())
}

/// fsync sled's folder and its parent (the folder's own entry).
fn sync_dirs(sled_dir: &Path) -> io::Result<()> {
    // sled writes its `conf` once, as it creates a store, and never
    // fsyncs it: a power loss soon after could leave it part-written, and
    // sled then refuses the store (seen in review, 2026-12-05; its
    // directory entry was synced, its bytes not).
    let conf = sled_dir.join("conf");
    match File::open(&conf) {
        Ok(f) => f.sync_all().map_err(at("fsync", &conf))?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(at("open", &conf)(e)),
    }
    sync_dir_named(sled_dir)?;
    if let Some(parent) = sled_dir.parent() {
        sync_dir_named(parent)?;
    }
    Ok(())
}

/// [`sync_dir`], its error naming the directory ([`at`]).
fn sync_dir_named(dir: &Path) -> io::Result<()> {
    sync_dir(dir).map_err(at("fsync directory", dir))
}

/// `e` with what failed, and on which file, before its text: a sync
/// touches several (sled's data file and blobs, its folder and that
/// folder's parent, the watermark), and the errors name none (until
/// 2026-12-05 the engine blamed `sled/db` for any of them, in its log and
/// its poison mark). The kind is kept, and so is a failed directory
/// fsync's mark ([`is_failed_dir_sync`]).
fn at<'a>(what: &'a str, path: &'a Path) -> impl Fn(io::Error) -> io::Error + 'a {
    move |e| {
        let kind = e.kind();
        let text = io::Error::new(kind, format!("{what} {}: {e}", path.display()));
        if is_failed_dir_sync(&e) {
            DirSyncFailed::wrap(text)
        } else {
            text
        }
    }
}

fn sled_to_io(e: sled::Error) -> io::Error {
    match e {
        sled::Error::Io(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::DurableSync;
    use std::io::Write;

    /// A failing step's error names the step and its file, keeps its
    /// kind, and a failed directory fsync stays marked as one.
    #[test]
    fn a_failed_step_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db"), b"").unwrap();
        // A file where sled keeps its blobs' folder: listing it fails.
        let blobs = dir.path().join("blobs");
        std::fs::write(&blobs, b"").unwrap();
        let e = DurableSync::open(dir.path()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory);
        let listed = format!("list {}: ", blobs.display());
        assert!(e.to_string().starts_with(&listed), "{e}");
        let e = DurableSync::open_unsynced(&dir.path().join("gone")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("gone/db: "), "{e}");
        let failed = super::DirSyncFailed::wrap(std::io::Error::other("EIO"));
        let e = super::at("fsync directory", dir.path())(failed);
        assert!(super::is_failed_dir_sync(&e));
        assert_eq!(
            e.to_string(),
            format!("fsync directory {}: EIO", dir.path().display())
        );
    }

    /// A blob listed while sled was still writing it (fsynced part-written)
    /// is fsynced again once it has grown; one unchanged is not.
    #[test]
    fn a_blob_that_grew_since_its_fsync_is_fsynced_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("db"), b"").unwrap();
        std::fs::create_dir(dir.path().join("blobs")).unwrap();
        let blob = dir.path().join("blobs").join("7");
        std::fs::write(&blob, b"crc.k").unwrap();
        let mut s = DurableSync::open(dir.path()).unwrap();
        assert_eq!(s.blob_fsyncs, 1);
        s.sync_blobs(false).unwrap();
        assert_eq!(s.blob_fsyncs, 1, "unchanged: not fsynced again");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&blob)
            .unwrap()
            .write_all(&[0u8; 4096])
            .unwrap();
        s.sync_blobs(false).unwrap();
        assert_eq!(s.blob_fsyncs, 2, "grown: fsynced again");
        std::fs::remove_file(&blob).unwrap();
        s.sync_blobs(false).unwrap();
        assert_eq!(s.blob_fsyncs, 2);
    }

    /// After one failed step, every later sync is refused without a system
    /// call, the watermark's included, naming the first failure.
    #[test]
    fn a_failed_sync_refuses_every_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new()
            .path(dir.path().join("sled"))
            .open()
            .unwrap();
        let mut s = DurableSync::open(&dir.path().join("sled")).unwrap();
        s.set_watermark(crate::watermark::Watermark::open(dir.path(), 1).unwrap());
        s.sync(&db, 1).unwrap();
        let failed = s.once(|_| Err(std::io::Error::other("the disk said no")));
        assert!(failed.is_err());
        for (what, later) in [
            ("sync", s.sync(&db, 2)),
            ("watermark", s.sync_watermark()),
            ("watermark if due", s.sync_watermark_if_due()),
        ] {
            let e = later.expect_err(what).to_string();
            assert!(
                e.contains("the disk said no") && e.contains("never retried"),
                "{what}: {e}"
            );
        }
    }
}

//! The mark a poisoned engine leaves in its directory, the mark an open
//! engine keeps there until it is closed, and what the next open does
//! about them.
//!
//! After a failed fsync, Linux marks the pages that did not reach the disk
//! clean and keeps them in its page cache; a file handle opened later is not
//! told of the error ("fsyncgate"). A reopen in the same boot would then
//! read those pages, recovery would find a whole tail, and its own fsync
//! would succeed and vouch for records a power loss would take. So a
//! poisoned engine writes [`POISON_FILE`], naming the boot, and an open that
//! finds it from the same boot first fsyncs every file of the store (a disk
//! that still fails refuses the open) and then drops their cached pages, so
//! that recovery reads what the disk holds. A successful open removes it.
//!
//! An engine that stops without a close (a crash, a kill) may have met the
//! same failure without knowing it: sled writes full log buffers from its
//! own threads with `sync_file_range`, which takes a writeback error from
//! the file and only sets sled's error, reported at the engine's next
//! flush, which never came. A descriptor opened by the next open is not
//! told of that error either. So an open engine keeps [`OPEN_FILE`] in its
//! directory, naming the boot, and removes it once closed (or dropped
//! after a sync that succeeded, which would have reported such an error);
//! an open that finds one from the same boot acts as on a poison mark:
//! every store file is fsynced and its cached pages dropped first.
//!
//! # Invariants
//! - The mark is written before the poisoned engine reports anything, also
//!   when an open fails on an I/O error (its recovery's fsync, say), and
//!   best effort: a disk that fails may refuse it too (the error is logged).
//!   It is not fsynced: it matters only in the boot that wrote it, where the
//!   page cache holds it, and an fsync on a failing disk could hang the
//!   engine's stop (it is written under the commit lock).
//! - An open that finds a mark from this boot reads nothing through sled
//!   before every store file was fsynced and its cache dropped.
//! - The mark is removed only after recovery, including its fsync, succeeded.
//! - The open mark is written before sled opens the store (recovery's
//!   writes are covered), and goes only after a close, or a drop's sync
//!   that flushed sled whatever the write count said (sled writes what no
//!   write counts: slots, a read's node split) with no slot top-up beside
//!   it, succeeded. Like the poison mark it is not fsynced: it matters only
//!   in the boot that wrote it.
//! - A verify of a stopped store (`verify_store`), which opens sled
//!   without an engine, leaves the open mark before sled opens the store
//!   too, and removes it (unless it found one of this boot) once sled's
//!   handles are dropped cleanly: sled writes as it opens and drops.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::config::EngineConfig;

/// The mark's name in the data directory.
pub const POISON_FILE: &str = "cairn.poisoned";

/// The open engine's mark's name in the data directory.
pub const OPEN_FILE: &str = "cairn.open";

/// The poison mark's new copy, written whole and renamed over the mark:
/// briefly, or left by a crash in between (replaced by the next write).
pub const POISON_REPLACEMENT_FILE: &str = "cairn.poisoned.new";

/// The open mark's new copy, as [`POISON_REPLACEMENT_FILE`] is the
/// poison mark's.
pub const OPEN_REPLACEMENT_FILE: &str = "cairn.open.new";

/// What an open found of an earlier poisoning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoisonedBefore {
    /// Why the engine was poisoned, as it recorded.
    pub reason: String,
    /// The poisoning was in this boot: the store's cached pages were
    /// dropped before recovery.
    pub cache_dropped: bool,
}

/// This boot's identity, if the kernel gives one.
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Whether `text` has the shape of the kernel's boot identity: a UUID in
/// its 36-character text form.
fn is_boot_id(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Write `name` in `dir`, by way of its new copy `replacement`: this
/// boot's identity, then `lines`.
fn write_mark(dir: &Path, name: &str, replacement: &str, lines: &[&str]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // Never through a link someone left in a directory that may be
    // anyone's (as the lock file, lock.rs).
    // Nor may a FIFO put there block it (the poison mark is written under
    // the commit lock): O_NONBLOCK fails at once where no one reads one.
    // Nor through a hard link, which O_NOFOLLOW lets through: the mark is
    // written whole as a new file and renamed over whatever stands under
    // its name, which is replaced, never written into, and stays until
    // the new one is whole (until the night of 2026-12-04 the poison mark
    // was written into an existing file, which a hard link to another file
    // would have truncated).
    let path = dir.join(name);
    let new = dir.join(replacement);
    match std::fs::remove_file(&new) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&new)?;
    writeln!(f, "{}", boot_id().unwrap_or_default())?;
    for line in lines {
        writeln!(f, "{line}")?;
    }
    drop(f);
    std::fs::rename(&new, &path)
}

/// Leave the mark (best effort: the disk may be failing).
pub(crate) fn record(dir: &Path, op: &str, reason: &str) {
    if let Err(e) = write_mark(
        dir,
        POISON_FILE,
        POISON_REPLACEMENT_FILE,
        &[&format!("{op}: {reason}")],
    ) {
        // A backup's unfinished copy (a full destination, say) is refused
        // by every open while its mark stands, and the backup removes it:
        // said as the copy's, not as an archive's that a reopen could
        // misread (until 2026-12-07 it read as the archive's own; found
        // by an audit).
        if dir.join(crate::backup::BACKUP_INCOMPLETE_FILE).exists() {
            tracing::warn!(error = %e, dir = %dir.display(), "the backup's unfinished copy failed, and the poison mark could not be left in it either: no open takes an unfinished copy, and the backup removes it");
        } else {
            tracing::error!(error = %e, dir = %dir.display(), "could not leave the poison mark; a reopen in this boot may read pages the disk does not hold");
        }
    }
}

/// Mark the store open: before sled opens it, so that recovery's own
/// writes are covered too (a failed open leaves the mark, which costs the
/// next open a cold read). Whatever stands under the mark's name (one
/// left, a link or FIFO someone planted) is replaced, never written
/// through.
pub(crate) fn mark_open(dir: &Path) -> io::Result<()> {
    write_mark(dir, OPEN_FILE, OPEN_REPLACEMENT_FILE, &[])
}

/// The engine was closed, or synced with nothing written since: the open
/// mark goes. A mark left costs the next open in this boot a cold read,
/// nothing more: logged, not an error.
pub(crate) fn unmark_open(dir: &Path) {
    match std::fs::remove_file(dir.join(OPEN_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(error = %e, dir = %dir.display(), "could not remove the open mark: the next open in this boot will sync the store and read it from the disk");
        }
        _ => {}
    }
}

/// What an open found of the engines before it.
#[derive(Debug, Default)]
pub(crate) struct Before {
    pub poisoned: Option<PoisonedBefore>,
    /// An engine open in this boot stopped without a close (its open mark
    /// was found): the cache was dropped.
    pub unclean_cache_dropped: bool,
}

/// Before sled opens the store: act on a mark, if there is one.
pub(crate) fn before_open(cfg: &EngineConfig) -> crate::Result<Before> {
    act_on_marks(cfg).map_err(|source| crate::Error::Io {
        op: "act on the poison or open mark",
        path: cfg.path.clone(),
        source,
    })
}

/// Whether a mark's first line names this boot. An unknown boot on either
/// side counts as this one: dropping the cache costs a cold read, trusting
/// it may cost records. So does a first line that is no boot identity (a
/// mark cut short, stray bytes).
fn marked_this_boot(marked_boot: &str) -> bool {
    boot_id().is_none_or(|now| !is_boot_id(marked_boot) || now == marked_boot)
}

fn act_on_marks(cfg: &EngineConfig) -> io::Result<Before> {
    let unclean = match read_mark(&cfg.path.join(OPEN_FILE)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
        Ok(text) => marked_this_boot(text.lines().next().unwrap_or_default().trim()),
    };
    // The poison mark's reason, and whether it names this boot.
    let poisoned = match read_mark(&cfg.path.join(POISON_FILE)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
        Ok(text) => {
            let mut lines = text.lines();
            let same_boot = marked_this_boot(lines.next().unwrap_or_default().trim());
            let reason = lines.next().unwrap_or("(no reason recorded)").to_owned();
            Some((reason, same_boot))
        }
    };
    let cache_dropped = unclean || poisoned.as_ref().is_some_and(|(_, same_boot)| *same_boot);
    if cache_dropped {
        let why = match &poisoned {
            Some((reason, _)) => format!("the store was poisoned ({reason})"),
            None => "the store was not closed".to_owned(),
        };
        drop_store_cache(cfg, &why)?;
    }
    match &poisoned {
        Some((reason, _)) => tracing::warn!(%reason, cache_dropped, "the store was poisoned before this open; recovering from what the disk holds"),
        None if unclean => tracing::warn!("the store was not closed by the engine that had it open in this boot (a crash or a kill, or an open that failed otherwise than on a write or sync, which leaves the mark as sled may have written): its files are synced and their cached pages dropped, so that recovery reads what the disk holds"),
        None => {}
    }
    Ok(Before {
        poisoned: poisoned.map(|(reason, _)| PoisonedBefore {
            reason,
            cache_dropped,
        }),
        unclean_cache_dropped: unclean,
    })
}

/// fsync every store file and drop its cached pages; `why` the store needs
/// it, for the error of a file that cannot be synced.
fn drop_store_cache(cfg: &EngineConfig, why: &str) -> io::Result<()> {
    for file in store_files(cfg)? {
        drop_cached_pages(&file).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: {why} and its files still cannot be synced: {e}",
                    file.display()
                ),
            )
        })?;
    }
    Ok(())
}

/// The mark's text, at most 4 KiB of it. Whatever else stands there (a
/// link, a FIFO, garbage) is a mark whose boot cannot be read: empty text,
/// acted on as this boot's. Opened once, without following a link or
/// waiting for a writer, and checked through its handle.
fn read_mark(path: &Path) -> io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        // A symlink (ELOOP): there, but not ours to read.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    if !f.metadata()?.is_file() {
        return Ok(String::new());
    }
    let mut bytes = Vec::new();
    f.take(4096).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A poison mark's new copy left behind (its write failed part-way, as on
/// a full disk), removed once the store is recovered. Best effort: it
/// costs nothing where it stays (`write_mark` replaces it).
pub(crate) fn remove_stale_replacement(dir: &Path) {
    match std::fs::remove_file(dir.join(POISON_REPLACEMENT_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            tracing::debug!(error = %e, dir = %dir.display(), "could not remove a stale cairn.poisoned.new");
        }
        _ => {}
    }
}

/// Recovery succeeded: the mark has done its work.
pub(crate) fn clear(dir: &Path) -> io::Result<()> {
    std::fs::remove_file(dir.join(POISON_FILE))?;
    crate::sync::sync_dir(dir)
}

/// Every regular file of the store: sled's (its log, config, snapshots,
/// blobs) and the watermark.
fn store_files(cfg: &EngineConfig) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut dirs = vec![cfg.sled_path()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if kind.is_file() {
                files.push(entry.path());
            }
        }
    }
    // Only a regular file, not through a link: a FIFO under its name
    // would block this open for ever (the open refuses it after, naming
    // it; since the night of 2026-12-04).
    let watermark = cfg.path.join(crate::watermark::WATERMARK_FILE);
    if std::fs::symlink_metadata(&watermark).is_ok_and(|m| m.is_file()) {
        files.push(watermark);
    }
    Ok(files)
}

/// fsync `file` (pages still dirty are written, or the open fails), then
/// drop its pages from the cache, so that the next read comes from the disk.
/// `posix_fadvise(DONTNEED)` is advice: pages mapped or locked elsewhere
/// stay, and nothing says which went. No other process has the store open
/// (the lock) and sled maps nothing, so the cache is dropped in practice;
/// that is assumed, not checked.
fn drop_cached_pages(file: &Path) -> io::Result<()> {
    let f = std::fs::File::open(file)?;
    f.sync_all()?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A mark's name hard-linked to another file: the mark is made new,
    /// and the other file is left as it was.
    #[test]
    fn a_mark_is_never_written_through_a_hard_link() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        for name in [super::POISON_FILE, super::OPEN_FILE] {
            std::fs::write(&victim, "not cairn's").unwrap();
            std::fs::hard_link(&victim, dir.path().join(name)).unwrap();
            if name == super::POISON_FILE {
                super::record(dir.path(), "fsync", "injected");
            } else {
                super::mark_open(dir.path()).unwrap();
            }
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not cairn's");
            let mark = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert_ne!(mark, "not cairn's", "{name}");
            std::fs::remove_file(&victim).unwrap();
        }
    }
}

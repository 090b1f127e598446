//! The mark a poisoned engine leaves in its directory, and what the next
//! open does about it.
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

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::config::EngineConfig;

/// The mark's name in the data directory.
pub const POISON_FILE: &str = "cairn.poisoned";

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

/// Leave the mark (best effort: the disk may be failing).
pub(crate) fn record(dir: &Path, op: &str, reason: &str) {
    let write = || -> io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link someone left in a directory that may be
        // anyone's (as the lock file, lock.rs).
        // Nor may a FIFO put there block it (it is written under the commit
        // lock): O_NONBLOCK fails at once where no one reads one.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(dir.join(POISON_FILE))?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        f.set_len(0)?;
        writeln!(f, "{}", boot_id().unwrap_or_default())?;
        writeln!(f, "{op}: {reason}")
    };
    if let Err(e) = write() {
        tracing::error!(error = %e, dir = %dir.display(), "could not leave the poison mark; a reopen in this boot may read pages the disk does not hold");
    }
}

/// Before sled opens the store: act on a mark, if there is one.
pub(crate) fn before_open(cfg: &EngineConfig) -> crate::Result<Option<PoisonedBefore>> {
    act_on_mark(cfg).map_err(|source| crate::Error::Io {
        op: "act on the poison mark",
        path: cfg.path.clone(),
        source,
    })
}

fn act_on_mark(cfg: &EngineConfig) -> io::Result<Option<PoisonedBefore>> {
    let text = match read_mark(&cfg.path.join(POISON_FILE)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(text) => text,
    };
    let mut lines = text.lines();
    let marked_boot = lines.next().unwrap_or_default().trim();
    let reason = lines.next().unwrap_or("(no reason recorded)").to_owned();
    // An unknown boot on either side counts as this one: dropping the
    // cache costs a cold read, trusting it may cost records. So does a
    // first line that is no boot identity (a mark cut short, stray bytes).
    let same_boot = boot_id().is_none_or(|now| !is_boot_id(marked_boot) || now == marked_boot);
    if same_boot {
        for file in store_files(cfg)? {
            drop_cached_pages(&file).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{}: the store was poisoned ({reason}) and its files still cannot be synced: {e}",
                        file.display()
                    ),
                )
            })?;
        }
    }
    tracing::warn!(%reason, cache_dropped = same_boot, "the store was poisoned before this open; recovering from what the disk holds");
    Ok(Some(PoisonedBefore {
        reason,
        cache_dropped: same_boot,
    }))
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
    let watermark = cfg.path.join(crate::watermark::WATERMARK_FILE);
    if watermark.exists() {
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

//! Removing a store that holds nothing: what a command leaves that made a
//! data directory and then failed before archiving anything (`cairn run`
//! against brokers that do not answer). Left, that directory would pass
//! for an archive from then on.
//!
//! # Invariants
//! - Nothing is removed from a store that holds a partition or ever held
//!   a frame: one record ever appended (even if retention pruned it since,
//!   and even if the partition's summary was lost since) keeps the store.
//! - The directory's lock is held from before the store is looked at until
//!   its files are gone, and the lock file goes last: no other process can
//!   open the store in between (`DirLock::acquire` refuses a lock file
//!   unlinked while it locked it).
//! - Only the store's own files are removed, by name; the directory itself
//!   only if that empties it (`remove_dir`, never recursive).
//! - A poisoned store (its mark there), or one whose watermark names a
//!   durable frame, is kept without being opened: the open would recover
//!   and sync it (and clear the poison mark) in the process whose fsync or
//!   write just failed, where the next run's open is where recovery
//!   belongs.

use std::path::Path;

use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::lock::{DirLock, LOCK_FILE};

/// Failpoint: in removing sled's folder, once every file but `db` is gone
/// and the folder synced, before `db` goes; `return` fails there as a
/// crash would stop it.
#[doc(hidden)]
pub const FAILPOINT_REMOVAL_BEFORE_DB: &str = "removal::before_db";

/// Failpoint: at the removal of the store's directory, once the store's
/// files and its lock are gone; `return` fails it as a mount on it, or a
/// failing disk, would.
#[doc(hidden)]
pub const FAILPOINT_REMOVAL_DIR: &str = "removal::dir";

/// What [`remove_if_empty`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EmptyStoreRemoval {
    /// The store holds a partition: nothing was removed.
    Kept,
    /// The store and its directory are gone.
    Removed,
    /// The store is gone; its directory holds other files, and stays.
    DirectoryKept,
    /// The store is gone; its directory, empty of it, could not be
    /// removed (the error's text): it stays. Not an error: what the
    /// removal was for is done (until 2026-12-05 this was an `Err`, which
    /// `cairn run` reported as an archive kept).
    DirectoryNotRemoved(String),
}

/// Remove the store at `dir`, and `dir` if that empties it, if the store
/// holds no partition. An error (the store is locked, cannot be opened, or
/// a file cannot be removed) removes nothing more.
pub fn remove_if_empty(dir: &Path) -> Result<EmptyStoreRemoval> {
    let lock = DirLock::acquire(dir)?;
    crate::backup::refuse_unfinished_backup(dir)?;
    // Kept without an open (since 2026-12-05; before, `cairn run` failing
    // on a failed fsync in an archive it made reopened it here, recovered
    // it, synced it again and cleared the poison mark before it exited).
    let poisoned = std::fs::symlink_metadata(dir.join(crate::poisoned::POISON_FILE)).is_ok();
    let durable_frame = matches!(crate::watermark::read(dir), Ok(Some(lsn)) if lsn >= 1);
    if poisoned || durable_frame {
        return Ok(EmptyStoreRemoval::Kept);
    }
    let engine = Engine::open_locking(EngineConfig::new(dir), false)?;
    // No partition, and no frame ever written: a store whose summaries
    // were lost (damage) after retention emptied it still has its
    // tombstones, and its identity may be in offsets committed to Kafka
    // (seen in review, 2026-12-05; until then summaries alone decided).
    let stats = engine.stats();
    let empty = stats.partitions.is_empty() && stats.next_lsn <= 1;
    // Closed (sled's handles dropped, and its own lock on its files with
    // them) before anything is removed.
    engine.close()?;
    if !empty {
        return Ok(EmptyStoreRemoval::Kept);
    }
    let io = |op: &'static str| {
        move |source| Error::Io {
            op,
            path: dir.to_owned(),
            source,
        }
    };
    remove_store_files(dir).map_err(io("remove an empty store"))?;
    // Last, still locked: an opener that opened the file before it went
    // finds it locked, and one after it makes a new one (and then finds no
    // store, or no directory).
    std::fs::remove_file(dir.join(LOCK_FILE)).map_err(io("remove the lock file"))?;
    drop(lock);
    match remove_store_dir(dir) {
        Ok(()) => Ok(EmptyStoreRemoval::Removed),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(EmptyStoreRemoval::Removed),
        // Something else is in it: not ours to remove.
        Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => {
            Ok(EmptyStoreRemoval::DirectoryKept)
        }
        Err(e) => Ok(EmptyStoreRemoval::DirectoryNotRemoved(e.to_string())),
    }
}

/// Remove the store's directory, empty of the store (the failpoint
/// [`FAILPOINT_REMOVAL_DIR`] fails it).
fn remove_store_dir(dir: &Path) -> std::io::Result<()> {
    fail::fail_point!(FAILPOINT_REMOVAL_DIR, |_| Err(std::io::Error::other(
        "failpoint removal::dir"
    )));
    std::fs::remove_dir(dir)
}

/// Whether `name` is one the store itself puts in its directory (sled's
/// folder, the lock, the watermark and its new copy, a poison mark, the
/// open mark and their new copies, an unfinished backup's mark): for a caller that refuses to start a store
/// in a directory that holds anything else.
pub fn is_store_file(name: &str) -> bool {
    name == crate::config::SLED_DIR
        || name == LOCK_FILE
        || name == crate::watermark::WATERMARK_FILE
        || name == crate::watermark::WATERMARK_REPLACEMENT_FILE
        || name == crate::poisoned::POISON_FILE
        || name == crate::poisoned::OPEN_FILE
        || name == crate::poisoned::POISON_REPLACEMENT_FILE
        || name == crate::poisoned::OPEN_REPLACEMENT_FILE
        || name == crate::backup::BACKUP_INCOMPLETE_FILE
}

/// Remove the store's own files in `dir` (sled's folder, the watermark and
/// its new copy, a poison mark, the open mark and their new copies), under the caller's lock; one that is not
/// there is no error. Not the lock file: the caller's, removed last.
pub(crate) fn remove_store_files(dir: &Path) -> std::io::Result<()> {
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    remove_sled_dir(&EngineConfig::new(dir).sled_path())?;
    for path in [
        dir.join(crate::watermark::WATERMARK_FILE),
        crate::watermark::replacement_path(dir),
        dir.join(crate::poisoned::POISON_FILE),
        dir.join(crate::poisoned::OPEN_FILE),
        dir.join(crate::poisoned::POISON_REPLACEMENT_FILE),
        dir.join(crate::poisoned::OPEN_REPLACEMENT_FILE),
    ] {
        gone(std::fs::remove_file(path))?;
    }
    Ok(())
}

/// Remove sled's folder: every file in it but `db` first, then `db`,
/// then the folder. A crash part-way leaves `db`, so that the folder still
/// reads as a store (`EngineConfig::store_exists`), which opens (sled
/// rebuilds from its log what a removed snapshot or `conf` held) and is
/// removed again. Removed in listing order (until the night of 2026-12-04),
/// a crash could leave a snapshot without its `db`: the next open made a
/// new, empty `db` beside it, which sled's snapshot no longer matched.
fn remove_sled_dir(sled: &Path) -> std::io::Result<()> {
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    let entries = match std::fs::read_dir(sled) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_name() == "db" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            gone(std::fs::remove_dir_all(entry.path()))?;
        } else {
            gone(std::fs::remove_file(entry.path()))?;
        }
    }
    // Those removals reach the disk before `db`'s.
    crate::sync::sync_dir(sled)?;
    fail::fail_point!(FAILPOINT_REMOVAL_BEFORE_DB, |_| Err(std::io::Error::other(
        "failpoint removal::before_db"
    )));
    gone(std::fs::remove_file(sled.join("db")))?;
    gone(std::fs::remove_dir(sled))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Why `db` goes last (the order itself is tested through a failpoint
    /// in `tests/removal_cut.rs`): what the listing order could leave, `db`
    /// gone and the snapshot there, no longer opens, nor is removed.
    #[test]
    fn a_snapshot_without_db_neither_opens_nor_goes() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let sled = EngineConfig::new(&store).sled_path();
        for _ in 0..2 {
            Engine::open(EngineConfig::new(&store))
                .unwrap()
                .close()
                .unwrap();
        }
        std::fs::remove_file(sled.join("db")).unwrap();
        assert!(matches!(
            Engine::open(EngineConfig::new(&store)),
            Err(Error::Corruption { .. })
        ));
        assert!(remove_if_empty(&store).is_err());
    }
    use crate::fuzzing::batch;
    use crate::record::TopicPartition;

    /// An empty store goes, with its directory; one with a partition stays,
    /// pruned empty or not; files that are not the store's stay, with the
    /// directory; a store another engine holds is refused.
    #[test]
    fn only_a_store_that_holds_nothing_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        Engine::open(EngineConfig::new(&empty))
            .unwrap()
            .close()
            .unwrap();
        assert_eq!(remove_if_empty(&empty).unwrap(), EmptyStoreRemoval::Removed);
        assert!(!empty.exists());

        let held = dir.path().join("held");
        let tp = TopicPartition::new("t", 0);
        let e = Engine::open(EngineConfig::new(&held)).unwrap();
        e.append(&[batch(&tp, 0..2, 10)]).unwrap();
        e.truncate_before(&tp, 2).unwrap();
        e.close().unwrap();
        assert_eq!(remove_if_empty(&held).unwrap(), EmptyStoreRemoval::Kept);
        let e = Engine::open(EngineConfig::new(&held)).unwrap();
        assert_eq!(e.durable_offset(&tp), Some(2), "pruned, still there");
        assert!(matches!(remove_if_empty(&held), Err(Error::Locked { .. })));
        e.close().unwrap();

        let other = dir.path().join("other");
        Engine::open(EngineConfig::new(&other))
            .unwrap()
            .close()
            .unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        assert_eq!(
            remove_if_empty(&other).unwrap(),
            EmptyStoreRemoval::DirectoryKept
        );
        assert!(other.join("notes.txt").exists());
        assert!(!EngineConfig::new(&other).store_exists().unwrap());
    }

    /// A store retention emptied whose partition summary was then lost
    /// (damage) lists no partition, but its log holds the tombstone: it
    /// is kept. A fresh store is removed.
    #[test]
    fn a_store_with_frames_is_kept_even_with_no_partition_listed() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh");
        Engine::open(EngineConfig::new(&fresh))
            .unwrap()
            .close()
            .unwrap();
        assert_eq!(remove_if_empty(&fresh).unwrap(), EmptyStoreRemoval::Removed);

        let store = dir.path().join("pruned");
        let tp = TopicPartition::new("t", 0);
        let e = Engine::open(EngineConfig::new(&store)).unwrap();
        e.append(&[crate::fuzzing::batch(&tp, 0..10, 20)]).unwrap();
        assert_eq!(e.truncate_before(&tp, 10).unwrap().records_deleted, 10);
        let (key, _) = crate::offsets::PartitionSummary::empty_at(0).encode(&tp);
        assert!(e.tree.remove(key).unwrap().is_some());
        e.close().unwrap();
        let e = Engine::open(EngineConfig::new(&store)).unwrap();
        assert!(e.partitions().is_empty(), "the lost summary lists nothing");
        e.close().unwrap();
        assert_eq!(remove_if_empty(&store).unwrap(), EmptyStoreRemoval::Kept);
        assert!(EngineConfig::new(&store).store_exists().unwrap());
    }
}

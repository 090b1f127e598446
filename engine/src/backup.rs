//! A consistent copy of an open engine's durable records, taken while it
//! goes on being written: a backup without stopping the archive.
//!
//! A copy of sled's files while sled writes them is not a store. This copies
//! cairn's values instead, as they stood at one moment: everything durable
//! then (the log below the durable LSN, their index entries, the durable
//! partition summaries), and none of what is written after.
//!
//! # Invariants
//! - The copy holds exactly the records that were durable when the backup
//!   started, with their offsets, and each partition's next offset (also of
//!   partitions emptied by retention), so an archive run from it resumes
//!   where the source was then.
//! - Frames are copied byte for byte under their LSNs (their checksums bind
//!   them to those), tombstones included.
//! - [`BACKUP_INCOMPLETE_FILE`] is made (and synced) before anything is
//!   copied and removed only once the copy is verified: a backup cut short
//!   (even by `kill -9`, or during its verify) cannot be opened as an
//!   archive. The format key is written last too. A backup that fails
//!   removes what it wrote.
//! - Truncations of the source wait for the backup (the `truncating` lock);
//!   appends do not.

use std::collections::VecDeque;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::config::EngineConfig;
use crate::engine::{store_err, DurableView, Engine};
use crate::error::{Error, Location, Result};
use crate::keys;
use crate::lock::{DirLock, LOCK_FILE};
use crate::meta;
use crate::slots;
use crate::sync::DurableSync;
use crate::verify::{check_stop, VerifyReport};

/// A file in a backup's directory from before anything is copied until the
/// copy is verified: an open refuses the directory while it is there
/// (`Error::IncompleteBackup`), so a backup killed part-way, or during its
/// verify, never passes for a whole archive.
pub const BACKUP_INCOMPLETE_FILE: &str = "cairn.backup-incomplete";

/// Why a backup's target `dir` that is not empty ([`empty_but_for_a_lock`]
/// said no) is refused: the remains of a backup cut short
/// ([`BACKUP_INCOMPLETE_FILE`] there) are named as such, since "must be
/// new or empty" alone left the user to find out what they were (found in
/// an audit, 2026-12-06). Asked by the engine and, before it opens the
/// archive, by the command.
/// Why an existing, empty backup directory of mode `found` is refused for
/// an archive of mode `archive` (permission bits), if it is: it is more
/// open to group or others than the archive, and the copy's records could
/// be read by users the archive keeps out. Said after "the backup's
/// directory" or "the directory". Asked by the engine and, before it opens
/// the archive, by the command (since 2026-12-07).
#[doc(hidden)]
pub fn mode_refusal(found: u32, archive: u32) -> Option<String> {
    let (found, archive) = (found & 0o777, archive & 0o777);
    (found & 0o077 & !archive != 0).then(|| {
        format!(
            "is mode {found:o}, open to users the archive ({archive:o}) keeps out, who could read the copy's records: chmod it to {:o} or tighter, or give a new directory",
            archive | 0o700
        )
    })
}

#[doc(hidden)]
pub fn occupied_refusal(dir: &Path) -> String {
    if std::fs::symlink_metadata(dir.join(BACKUP_INCOMPLETE_FILE)).is_ok() {
        format!(
            "the backup's directory must be new or empty, and this one holds what an earlier backup left when it was cut short ({BACKUP_INCOMPLETE_FILE} is there): it is no archive; remove the directory, or give another"
        )
    } else {
        "the backup's directory must be new or empty".to_owned()
    }
}

/// `Error::IncompleteBackup` if `dir` holds [`BACKUP_INCOMPLETE_FILE`]:
/// the check of every open, of a stopped verify, and of a command that
/// looks for an archive there first.
/// A mark that cannot be looked for (`stat` failing with EIO or EACCES)
/// is an error too: taken for absent, it would let the remains of a copy
/// pass for an archive.
pub fn refuse_unfinished_backup(dir: &Path) -> Result<()> {
    let mark = dir.join(BACKUP_INCOMPLETE_FILE);
    // No such directory, or a file in its place: no mark there, and what
    // looks for an archive says what is.
    if crate::config::is_present(&mark, "look for an unfinished backup's mark")? {
        return Err(Error::IncompleteBackup {
            path: dir.to_owned(),
        });
    }
    Ok(())
}

/// Failpoint: in a backup, after the log is copied and before the index,
/// where appends racing it are most likely to confuse it.
#[doc(hidden)]
pub const FAILPOINT_BACKUP_AFTER_LOG: &str = "backup::after_log";

/// Failpoint: in a backup, at the directory sync that makes its mark's
/// removal (the copy verified) durable; `return` fails that sync.
#[doc(hidden)]
pub const FAILPOINT_BACKUP_COMPLETE_SYNC: &str = "backup::complete_sync";

/// The directory sync that makes a verified copy's completion (its mark's
/// removal) durable, behind its failpoint.
fn sync_completion(dir: &Path) -> std::io::Result<()> {
    fail::fail_point!(FAILPOINT_BACKUP_COMPLETE_SYNC, |_| Err(
        std::io::Error::other("injected by the failpoint")
    ));
    crate::sync::sync_dir(dir)
}

/// What a backup copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupReport {
    /// Log values (frames and tombstones) copied.
    pub frames: u64,
    pub index_entries: u64,
    pub partitions: u64,
    pub records: u64,
    pub payload_bytes: u64,
    /// The last LSN copied: the source's durable LSN when the backup began.
    pub lsn: u64,
    /// The copy, opened as an engine and verified.
    pub verify: VerifyReport,
    pub duration: Duration,
}

/// Whether `dest`, by its place as named (its parent resolved, its own
/// name as it is: a link named inside is inside, wherever it leads), lies
/// inside the archive at `source` (canonical). Also asked by the command
/// before it opens the archive.
#[doc(hidden)]
pub fn named_inside(dest: &Path, source: &Path) -> bool {
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return false;
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    parent
        .canonicalize()
        .is_ok_and(|p| p.join(name).starts_with(source))
}

/// Whether `dir` holds nothing but, at most, a lock file (a regular
/// file, not a link) and a fresh filesystem's `lost+found` (a directory,
/// not a link: the root of a new disk, as `cairn run` takes for `--data`;
/// refused until 2026-12-06, found by an audit; the backup neither writes
/// nor removes it): the directory a backup may be made in. Also asked by
/// the command before it opens the archive.
#[doc(hidden)]
pub fn empty_but_for_a_lock(dir: &Path) -> std::io::Result<bool> {
    let mut entries = std::fs::read_dir(dir)?;
    Ok(entries.all(|e| {
        e.is_ok_and(|e| {
            let kind = e.file_type();
            (e.file_name() == LOCK_FILE && kind.as_ref().is_ok_and(|t| t.is_file()))
                || (e.file_name() == "lost+found" && kind.is_ok_and(|t| t.is_dir()))
        })
    }))
}

impl Engine {
    /// Copy what is durable now into a new store at `dest` (a directory
    /// that does not exist or is empty, outside this store's), sync it,
    /// then open and verify the copy. Appends go on meanwhile; `stop` gives
    /// up with `Error::Interrupted`, and what the backup wrote is removed.
    pub fn backup_to(&self, dest: &Path, stop: &AtomicBool) -> Result<BackupReport> {
        let t0 = Instant::now();
        // A stop asked before anything is made (a signal while the archive
        // opened) makes nothing: until the night of 2026-12-04 a small
        // archive was then backed up whole, and a large one's directory
        // made and removed again.
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::Interrupted { op: "backup" });
        }
        let io = |op: &'static str| {
            move |source| Error::Io {
                op,
                path: dest.to_owned(),
                source,
            }
        };
        let refuse = |why: &str| {
            io("back up")(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                why.to_owned(),
            ))
        };
        let source = self.cfg.path.canonicalize().map_err(|source| Error::Io {
            op: "resolve the archive's path",
            path: self.cfg.path.clone(),
            source,
        })?;
        // Refused before anything is made where the parent already says
        // so: a directory made inside the archive, then found there and
        // removed, would be left in it by a crash in between (seen in
        // review, the night of 2026-12-04). Checked again below on the
        // directory itself (a link among its own path).
        if named_inside(dest, &source) {
            return Err(refuse(
                "the backup's directory must lie outside the archive's",
            ));
        }
        // Made here (create_dir fails if another made it meanwhile), or
        // found empty. Either way only what the backup writes into it is
        // removed on failure: the directory itself only if it made it, and
        // then only once empty (`remove_dir`, never recursive).
        // With the archive's permission bits for group and others at most
        // (the umask still applies; the owner's are rwx, for the copy to
        // be written), from its creation on: an archive kept 0700 is not
        // backed up into a folder others can read.
        let source_mode = std::fs::metadata(&source).map_err(|e| Error::Io {
            op: "back up",
            path: source.clone(),
            source: e,
        })?;
        let mode = (source_mode.mode() & 0o777) | 0o700;
        let made = match std::fs::DirBuilder::new().mode(mode).create(dest) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(io("create backup directory")(e)),
        };
        let unmake = |real: Option<&Path>| {
            if made {
                let _ = std::fs::remove_dir(real.unwrap_or(dest));
            }
        };
        let real = match dest.canonicalize() {
            Ok(r) => r,
            Err(e) => {
                unmake(None);
                return Err(io("back up")(e));
            }
        };
        if real.starts_with(&source) {
            unmake(Some(&real));
            return Err(refuse(
                "the backup's directory must lie outside the archive's",
            ));
        }
        // Found as well as made: a directory made just before the backup
        // (`mkdir` then `cairn backup --to` it) may not be durable in its
        // parent either, and a complete copy must not vanish with it
        // (until the night of 2026-12-04 only one made here was synced).
        // A parent this user may not read (0311, say) cannot be opened to
        // be synced: fatal for a directory made here (its entry must be
        // durable), a WARN for one found (as it was before); a failed
        // fsync is fatal either way.
        let parent = real.parent().unwrap_or(Path::new("/"));
        match crate::sync::sync_dir(parent) {
            Ok(()) => {}
            Err(e) if !made && !crate::sync::is_failed_dir_sync(&e) => {
                tracing::warn!(parent = %parent.display(), error = %e, "the backup directory's parent could not be opened to be synced: the directory's own entry in it may not survive a power loss (it was there before the backup)");
            }
            Err(e) => {
                unmake(Some(&real));
                return Err(io("sync backup's parent directory")(e));
            }
        }
        // Empty but for a lock file (a regular file, not a link): checked
        // before the lock is taken, so that nothing is created in a
        // directory that is refused, and again once it is held, so that two
        // backups cannot both find it empty. The lock is held to the end,
        // cleanup included.
        // Anything of that name (a link too, which is refused below) is
        // not this backup's to remove.
        let lock_file_before = std::fs::symlink_metadata(real.join(LOCK_FILE)).is_ok();
        match empty_but_for_a_lock(&real).map_err(io("back up")) {
            Ok(true) => {}
            Ok(false) => {
                // Made here and filled by someone else since: left, as
                // `remove_dir` leaves a directory that holds anything.
                unmake(Some(&real));
                return Err(refuse(&occupied_refusal(&real)));
            }
            Err(e) => {
                unmake(Some(&real));
                return Err(e);
            }
        }
        // One found (and empty: a directory refused for what it holds is
        // not told to change its mode): no more open to group and others than the archive,
        // or the copy's records could be read by users the archive keeps
        // out (sled makes its files with the umask's modes, 0644 say).
        if !made {
            let found = std::fs::metadata(&real).map_err(io("back up"))?.mode();
            if let Some(why) = mode_refusal(found, source_mode.mode()) {
                return Err(io("back up")(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("the backup's directory {why}"),
                )));
            }
        }
        let lock = match DirLock::acquire(&real) {
            Ok(l) => l,
            Err(e) => {
                // A lock file the acquire made and then could not lock is
                // removed by the acquire; another backup's lock file keeps
                // a directory made here.
                unmake(Some(&real));
                return Err(e);
            }
        };
        let still_empty = empty_but_for_a_lock(&real).map_err(io("back up"));
        if !matches!(still_empty, Ok(true)) {
            // Something else was written meanwhile (not ours), or the
            // directory could not be read.
            if !lock_file_before {
                let _ = std::fs::remove_file(real.join(LOCK_FILE));
            }
            drop(lock);
            unmake(Some(&real));
            still_empty?;
            return Err(refuse("the backup's directory must be new or empty"));
        }
        let mark = real.join(BACKUP_INCOMPLETE_FILE);
        // The directory is empty: a new file, never one a link names.
        let new_mark = || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&mark)
        };
        let marked = (|| {
            new_mark()?.sync_all()?;
            crate::sync::sync_dir(&real)
        })()
        .map_err(io("mark the backup incomplete"));
        let mut left_unsynced = false;
        // A panic reading the archive (sled's, on damage to its own files):
        // the partial copy is cleaned up below as after any failure, and
        // the panic then goes on to the caller, which poisons the engine as
        // for any read that panicked (a stopped archive's command, or the
        // run serving a live backup). Panics on the copy's own store are
        // the destination's failures, errors here (`on_the_copy`).
        let mut source_panic = None;
        let report = marked
            .and_then(|()| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.copy_to(&real, stop)))
                    .unwrap_or_else(|payload| {
                        let what = crate::error::panic_message(&*payload).to_owned();
                        source_panic = Some(payload);
                        Err(io("back up")(std::io::Error::other(format!(
                            "reading the archive panicked ({what})"
                        ))))
                    })
            })
            .and_then(|mut r| {
                // The copy, as any archive is opened (under the lock held
                // here): cairn's recovery, then a full verify; its close syncs
                // it and writes its watermark.
                let copy = on_the_copy(&real, "open the backup's copy", || {
                    Engine::open_locking(EngineConfig::new(&real), false)
                })?;
                let created = copy.recovery_report().created;
                r.verify = match on_the_copy(&real, "verify the backup's copy", || {
                    copy.verify_unless(stop)
                }) {
                    Ok(v) => v,
                    Err(e) => {
                        crate::engine::drop_failing_store(copy);
                        return Err(e);
                    }
                };
                // An error reading the copy that stopped its verify
                // part-way (after problems copied from the source) is the
                // copy's failure too: it is not verified whole.
                if let Some(e) = r.verify.stopped_at_error.clone() {
                    crate::engine::drop_failing_store(copy);
                    return Err(io("verify the backup's copy")(std::io::Error::other(
                        format!("the copy's verify stopped at an error reading it: {e}"),
                    )));
                }
                // A page of the copy's own sled log that cannot be read is
                // the copy's failure (its disk), not damage copied from the
                // source.
                if let Some(p) = r
                    .verify
                    .problems
                    .iter()
                    .find(|p| crate::verify::is_sled_log(&p.location))
                {
                    // Its disk may be failing: sled's fsync in its drop
                    // would panic past the cleanup below.
                    crate::engine::drop_failing_store(copy);
                    return Err(copy_unreadable(
                        &real,
                        "verify the backup's copy",
                        Error::corruption(p.location.clone(), p.kind.clone()),
                    ));
                }
                on_the_copy(&real, "close the backup's copy", || copy.close())?;
                // Damage copied from the source reads as fewer records in the
                // copy: the verify's problems say where it is, and the report
                // carries them (counts that differ in a clean copy are the
                // backup's own failure).
                let counts_differ =
                    r.verify.records != r.records || r.verify.index_entries != r.index_entries;
                if created {
                    // The format key is the copy's last write: a copy that
                    // opens as a new store lacks it, whatever it holds.
                    return Err(io("back up")(std::io::Error::other(
                        "the copy opened as a new store: its format key, written last, is not in it",
                    )));
                }
                if r.verify.is_clean() && counts_differ {
                    return Err(io("back up")(std::io::Error::other(format!(
                        "the copy holds {} records in {} index entries; {} in {} were copied",
                        r.verify.records, r.verify.index_entries, r.records, r.index_entries
                    ))));
                }
                // Verified: the copy may be opened from now on.
                std::fs::remove_file(&mark).map_err(io("mark the backup complete"))?;
                if let Err(e) = sync_completion(&real) {
                    // Whether the mark's removal is on disk is unknown, and
                    // a failed fsync is never retried (a second one may pass
                    // with nothing written): the mark is put back, unsynced,
                    // and the copy left for its owner, not removed under a
                    // directory sync that cannot be trusted.
                    left_unsynced = true;
                    if let Err(again) = new_mark() {
                        tracing::error!(path = %mark.display(), error = %again, "could not put the unfinished mark back");
                    }
                    return Err(io("mark the backup complete")(e));
                }
                r.duration = t0.elapsed();
                Ok(r)
            });
        if left_unsynced {
            tracing::error!(path = %real.display(), "the backup's directory could not be synced once its copy was verified: the copy (whole and synced itself) is left, marked unfinished ({BACKUP_INCOMPLETE_FILE}) if the mark could be put back, unsynced (a power loss may take the mark); remove it and back up again to another directory");
        } else if report.as_ref().is_err_and(Error::is_failed_dir_sync) {
            // A directory fsync failed (the mark's, or one of the copy's
            // own): the cleanup's would be a retry, which may pass with
            // nothing written, and without a trusted one the mark's removal
            // could reach the disk before the copy's (until the night of
            // 2026-12-04 it synced again and removed the mark). The copy's
            // files go, the mark stays: their removal syncs sled's folder
            // (perhaps the one that failed), which nothing here relies on.
            let removed = crate::removal::remove_store_files(&real);
            tracing::error!(path = %real.display(), removal_error = ?removed.err(), "a directory fsync failed during the backup: what it copied is removed as far as it could be, and the directory stays marked unfinished ({BACKUP_INCOMPLETE_FILE}), as no later fsync of it can be trusted; remove it by hand");
        } else if report.is_err() {
            // Still under the lock: what the backup wrote, by name (anything
            // else put there meanwhile is not the backup's to remove).
            // Their removal is made durable before the mark's: a power cut
            // must not leave the mark gone and the copy's remains there,
            // which sled would open as a store (an empty one, its data file
            // gone).
            let removed = match crate::removal::remove_store_files(&real)
                .and_then(|()| crate::sync::sync_dir(&real))
            {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(path = %real.display(), error = %e, "could not remove the backup's partial copy: it stays marked unfinished ({BACKUP_INCOMPLETE_FILE}); remove it by hand");
                    false
                }
            };
            // What is left of a copy that could not be removed whole (a
            // failing disk) stays marked unfinished: without the mark, sled
            // would open the remains as a store.
            if removed {
                let _ = std::fs::remove_file(&mark);
                if !lock_file_before {
                    let _ = std::fs::remove_file(real.join(LOCK_FILE));
                }
                drop(lock);
                unmake(Some(&real));
            }
        }
        if let Some(payload) = source_panic {
            std::panic::resume_unwind(payload);
        }
        report
    }

    fn copy_to(&self, dest: &Path, stop: &AtomicBool) -> Result<BackupReport> {
        let _no_truncation = self.no_truncation_unless(stop, "backup")?;
        // A poisoned engine's durable view may not match its tree (a write
        // or truncation that failed part-way): nothing to copy consistently.
        self.check_usable()?;
        let view = self.durable_view();
        let cfg = EngineConfig::new(dest);
        let db = on_the_copy(dest, "open the backup's store", || cfg.open_sled())?;
        // The copy's fdatasync handle, opened before anything is written
        // to it: a writeback error the kernel reports meanwhile (to sled's
        // own syncs) is still reported to this descriptor, which one
        // opened after the copy (the copy's open below) would not be told
        // of (sync.rs). Only this sync makes the copy durable: sled's
        // `flush` does not, and sled's fsync in its drop unwraps.
        let copied = DurableSync::open(&cfg.sled_path())
            .map_err(|e| Error::Io {
                op: "open the backup's data file for fdatasync",
                path: cfg.sled_path(),
                source: e,
            })
            .and_then(|syncer| {
                let tree = on_the_copy(dest, "open the backup's tree", || {
                    db.open_tree("cairn").map_err(store_err("open backup tree"))
                })?;
                let copied = self.copy_into(dest, &db, &tree, &view, syncer, stop);
                drop_copy_handles(tree, copied, &cfg)
            });
        drop_copy_handles(db, copied, &cfg)
    }

    /// The body of [`copy_to`](Self::copy_to): the durable store as `view`
    /// holds it, into the new store's `tree`, synced by `syncer`.
    fn copy_into(
        &self,
        dest: &Path,
        db: &sled::Db,
        tree: &sled::Tree,
        view: &DurableView,
        mut syncer: DurableSync,
        stop: &AtomicBool,
    ) -> Result<BackupReport> {
        // Everything at or below the durable LSN was written whole before
        // it became durable; what is written from now on lies above it.
        let lsn_end = view.lsn + 1;
        let mut r = BackupReport {
            frames: 0,
            index_entries: 0,
            partitions: view.partitions.len() as u64,
            // Saturating, as the writer counts them: the counters come from
            // the store.
            records: view
                .partitions
                .values()
                .fold(0u64, |n, s| n.saturating_add(s.record_count)),
            payload_bytes: view
                .partitions
                .values()
                .fold(0u64, |n, s| n.saturating_add(s.payload_bytes)),
            lsn: view.lsn,
            verify: VerifyReport::default(),
            duration: Duration::ZERO,
        };
        let mut written = 0u64;
        let mut put = |k: &[u8], v: &[u8]| -> Result<()> {
            check_stop(stop, &mut written, "backup")?;
            on_the_copy(dest, "write the backup's copy", || {
                tree.insert(k, v).map_err(store_err("write backup"))
            })?;
            Ok(())
        };
        // In the order a new store is made (recovery.rs): the fence before
        // any frame or summary.
        for i in 0..keys::FENCE_KEYS {
            put(&keys::fence_key(i), &[])?;
        }
        // Each frame goes into a slot inserted well ahead of it, as an
        // append's do (slots.rs): sled then writes it once, where plain
        // inserts at the tree's right edge are written three to four times.
        // Slots only for keys the source has (a tombstone's span has none),
        // so every slot is filled and none is left in the copy. A slot in
        // the source at or below the durable LSN is a frame emptied by
        // damage (slots lie only above the last frame written): it is
        // copied as it is, as damaged frames are, for the copy's verify to
        // report where the source's does. Left out, it would leave a copy
        // whose log just skips that LSN.
        let ahead_max = (slots::SLOTS_AHEAD_MIN + slots::SLOTS_RESERVED_CHUNK) as usize;
        let mut ahead: VecDeque<(sled::IVec, sled::IVec)> = VecDeque::with_capacity(ahead_max);
        // The first `slotted` of `ahead` have their slots.
        let mut slotted = 0usize;
        let mut log = self
            .tree
            .range(keys::wal_key(0)..keys::wal_key(lsn_end))
            .fuse();
        loop {
            while ahead.len() < ahead_max {
                match log.next() {
                    Some(item) => {
                        let (k, v) = item.map_err(store_err("read log"))?;
                        ahead.push_back((k, v));
                    }
                    None => break,
                }
            }
            // At least SLOTS_AHEAD_MIN slots beyond the frame filled next;
            // when fewer, a run for everything read ahead.
            let wanted = ahead.len().min(slots::SLOTS_AHEAD_MIN as usize + 1);
            if slotted < wanted {
                for (k, _) in ahead.iter().skip(slotted) {
                    put(k, &[])?;
                }
                slotted = ahead.len();
            }
            let Some((k, v)) = ahead.pop_front() else {
                break;
            };
            slotted -= 1;
            put(&k, &v)?;
            if !slots::is_slot(&v) {
                r.frames += 1;
            }
        }
        fail::fail_point!(FAILPOINT_BACKUP_AFTER_LOG);
        for item in self.tree.scan_prefix([keys::PREFIX_INDEX]) {
            let (k, v) = item.map_err(store_err("read index"))?;
            // Of a record durable at the start: not one appended since.
            // Its key says which (an append since starts at or past the
            // durable next offset, or in a partition new since). A damaged
            // value is copied as it is, as damaged frames are, for the
            // copy's verify to report; so is an entry below the next offset
            // whose LSN lies past the durable log, which no append writes:
            // dropped, it would leave a clean copy of a damaged archive. (A
            // key that does not parse is copied too; the copy's open
            // refuses most such keys, as the source's would, and the backup
            // fails.)
            let durable = match keys::parse_index_key(&k) {
                // Below the durable next offset of a partition durable at
                // the start.
                Ok((tp, first_offset)) => view
                    .partitions
                    .get(&tp)
                    .is_some_and(|s| first_offset < s.next_offset),
                Err(_) => true,
            };
            if durable {
                put(&k, &v)?;
                r.index_entries += 1;
            }
        }
        for (tp, s) in &view.partitions {
            let (k, v) = s.encode(tp);
            put(&k, &v)?;
        }
        // The copy archives the same topics: restored in the archive's
        // place, it must refuse the same recreated ones. Copied as they
        // are (a damaged one for the copy's verify to report).
        for item in self.tree.scan_prefix([keys::PREFIX_TOPIC]) {
            let (k, v) = item.map_err(store_err("read topic ids"))?;
            put(&k, &v)?;
        }
        put(keys::META_CHECKPOINT, &meta::encode_checkpoint(view.lsn))?;
        // The copy is the same store, at an earlier point: restored in its
        // place, it must know the offsets Kafka holds under this identity
        // for its own, and fetch the records it lacks again.
        put(keys::META_STORE, &meta::encode_store_id(self.store_id()))?;
        // Last: without it the copy is no store (an open refuses it).
        put(
            keys::META_FORMAT,
            &meta::encode_format(meta::FORMAT_VERSION),
        )?;
        on_the_copy(dest, "fdatasync the backup", || {
            syncer.sync(db, view.lsn).map_err(|e| Error::Io {
                op: "fdatasync the backup",
                path: syncer.data_path().to_owned(),
                source: e,
            })
        })?;
        Ok(r)
    }
}

/// Run `f` on the backup's copy, a store of its own on the destination's
/// disk: a panic in it (sled's, on a failing destination) is the
/// destination's failure, returned as an error naming it (`op`), and the
/// backup's cleanup runs. The archive's engine is not poisoned for it:
/// until 2026-12-05 such a panic reached the caller, which took it for
/// damage in the archive (a live backup's poisoned the archive and
/// stopped its run), and skipped the cleanup. Likewise a page of the copy
/// sled refuses to read back ([`copy_unreadable`]); other corruption is
/// passed on as it is.
fn on_the_copy<T>(dest: &Path, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // Only sled's own refusal of a page: cairn-level corruption the
    // copy's open or verify finds was copied from the archive as it was
    // (a damaged key, say), and is the archive's.
    let result = result.map(|r| {
        r.map_err(|e| match e {
            // sled's log or its files as sled opens them: the copy's sled
            // files are written by sled alone, so damage found there is
            // the destination's.
            Error::Corruption {
                location: Location::SledLog { .. } | Location::SledFiles { .. },
                ..
            } => copy_unreadable(dest, op, e),
            // sled names no file: said as the copy's, so that a full or
            // failing disk is known for the destination's and not taken
            // for the archive's ("sled error during write backup: … No
            // space left on device", until 2026-12-07; found by a review).
            Error::Store {
                source: sled::Error::Io(io),
                op: sled_op,
            } => Error::Io {
                op,
                path: dest.to_owned(),
                source: std::io::Error::new(io.kind(), format!("sled's {sled_op}: {io}")),
            },
            e => e,
        })
    });
    result.unwrap_or_else(|payload| {
        Err(Error::Io {
            op,
            path: dest.to_owned(),
            source: std::io::Error::other(format!(
                "sled panicked on the backup's copy ({}): the destination's disk may be failing; the archive itself is not affected",
                crate::error::panic_message(&*payload)
            )),
        })
    })
}

/// A page of the backup's copy that sled cannot read back (found by sled
/// as the copy is written, or by the copy's verify): the destination's
/// failure, an I/O error naming the copy. As the corruption it is typed,
/// it read as damage to the archive being backed up, whose path the
/// commands print (until 2026-12-05; found in review).
fn copy_unreadable(dest: &Path, op: &'static str, e: Error) -> Error {
    Error::Io {
        op,
        path: dest.to_owned(),
        source: std::io::Error::other(format!(
            "{e}, in the backup's copy, not in the archive: the destination's disk may be failing"
        )),
    }
}

/// Drop sled's handles of a backup's copy, guarded: after a copy that
/// succeeded, a failure of sled's own shutdown (its flush or fsync: the
/// disk failing since the copy's fdatasync) fails the backup, which is
/// then not taken for complete (nothing marks the copy for the next open
/// to sync first, as an engine's open mark would; until the night of
/// 2026-12-04 it was logged and the copy verified from the page cache);
/// after a failed one, it is logged and the copy's error stands.
fn drop_copy_handles<T, R>(handles: T, copied: Result<R>, cfg: &EngineConfig) -> Result<R> {
    if copied.is_err() {
        crate::engine::drop_failing_store(handles);
        return copied;
    }
    if crate::engine::drop_sound_store(handles, "the backup's copy: the backup fails") {
        copied
    } else {
        Err(Error::Io {
            op: "close the backup's copy",
            path: cfg.sled_path(),
            source: std::io::Error::other(
                "sled's own shutdown of the copy failed (its flush or fsync): the disk may be failing",
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CorruptionKind;

    /// sled's refusal of a page of the copy comes back as the copy's I/O
    /// failure, naming the copy, not as corruption (which the commands
    /// print beside the archive's path, as damage to it); other errors
    /// pass as they are.
    #[test]
    fn an_unreadable_page_of_the_copy_is_the_copys_failure() {
        let dest = Path::new("/backups/copy");
        let unreadable = || {
            Err::<(), _>(Error::corruption(
                Location::SledLog {
                    log_offset: Some(4096),
                },
                CorruptionKind::SledUnreadable {
                    detail: "a page failed sled's own checks during write backup".into(),
                },
            ))
        };
        match on_the_copy(dest, "write the backup's copy", unreadable) {
            Err(Error::Io { op, path, source }) => {
                assert_eq!(op, "write the backup's copy");
                assert_eq!(path, dest);
                let said = source.to_string();
                assert!(
                    said.contains("sled's log")
                        && said.contains("in the backup's copy, not in the archive"),
                    "{said}"
                );
            }
            other => panic!("{other:?}"),
        }
        let interrupted = on_the_copy(dest, "write the backup's copy", || {
            Err::<(), _>(Error::Interrupted { op: "backup" })
        });
        assert!(matches!(interrupted, Err(Error::Interrupted { .. })));
        // sled's files of the copy, as sled opens them: the copy's too.
        let files = on_the_copy(dest, "open the backup's copy", || {
            Err::<(), _>(Error::corruption(
                Location::SledFiles {
                    path: dest.join("sled"),
                    log_offset: None,
                },
                CorruptionKind::SledUnreadable {
                    detail: "sled panicked".into(),
                },
            ))
        });
        assert!(matches!(files, Err(Error::Io { .. })), "{files:?}");
        // Damage the copy holds because the archive held it is the
        // archive's: passed on as the corruption it is.
        let copied = on_the_copy(dest, "open the backup's copy", || {
            Err::<(), _>(Error::corruption(
                Location::Key {
                    key_hex: "49".into(),
                },
                CorruptionKind::BadKey {
                    detail: "a forged index key".into(),
                },
            ))
        });
        assert!(
            matches!(
                copied,
                Err(Error::Corruption {
                    location: Location::Key { .. },
                    ..
                })
            ),
            "{copied:?}"
        );
    }
}

//! `Engine::backup_to`: a consistent copy of what was durable when the
//! backup began, taken while the engine goes on being written.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cairn_engine::fuzzing::small_config;
use cairn_engine::{Engine, EngineConfig, Error, PartitionInfo, TopicPartition};

/// The failpoint is process-wide: one test at a time in this binary.
static SERIAL: Mutex<()> = Mutex::new(());

fn tps() -> [TopicPartition; 3] {
    [
        TopicPartition::new("b", 0),
        TopicPartition::new("b", 1),
        TopicPartition::new("b", 2),
    ]
}

/// A store with records in three partitions: one pruned in part, one
/// emptied by retention (its next offset must survive the copy).
fn source(dir: &std::path::Path) -> Arc<Engine> {
    let engine = Engine::open(small_config(dir)).unwrap();
    let [a, b, c] = tps();
    // Enough frames for several runs of slots in the copy (slots.rs).
    for round in 0..5 {
        let from = round * 100;
        engine
            .append(&[
                common::batch(&a, from..from + 100, 3000),
                common::batch(&b, from..from + 100, 50),
                common::batch(&c, from..from + 10, 2000),
            ])
            .unwrap();
    }
    engine.truncate_before(&b, 250).unwrap();
    engine.truncate_before(&c, 410).unwrap();
    Arc::new(engine)
}

fn all_records(e: &Engine, tp: &TopicPartition) -> Vec<cairn_engine::Record> {
    common::read_all(e, tp)
}

#[test]
fn a_backup_holds_what_was_durable_when_it_began_while_appends_go_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let before: Vec<PartitionInfo> = engine.partitions();
    let expected: Vec<_> = tps().iter().map(|tp| all_records(&engine, tp)).collect();
    assert_eq!(
        before
            .iter()
            .find(|p| p.tp == tps()[2])
            .unwrap()
            .record_count,
        0,
        "c was emptied"
    );

    // Mid-backup: more records, durable and not, and a new partition.
    let fired = Arc::new(AtomicBool::new(false));
    let (writer, once) = (engine.clone(), fired.clone());
    fail::cfg_callback(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG, move || {
        if once.swap(true, Ordering::SeqCst) {
            return;
        }
        let [a, b, c] = tps();
        writer
            .append(&[
                common::batch(&a, 500..600, 3000),
                common::batch(&c, 500..510, 2000),
                common::batch(&TopicPartition::new("late", 0), 0..10, 10),
            ])
            .unwrap();
        writer.write(&[common::batch(&b, 500..520, 50)]).unwrap();
    })
    .unwrap();
    let copy_dir = dir.path().join("copy");
    let report = engine.backup_to(&copy_dir, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
    let report = report.unwrap();
    assert!(fired.load(Ordering::SeqCst));
    assert!(report.verify.is_clean(), "{:?}", report.verify.problems);
    assert_eq!(report.partitions, 3);
    assert_eq!(report.verify.records, report.records);
    assert_eq!(report.verify.index_entries, report.index_entries);
    assert!(report.frames > 3 * 320, "{} frames", report.frames);
    assert_eq!(
        report.records,
        before.iter().map(|p| p.record_count).sum::<u64>()
    );

    let copy = Engine::open(EngineConfig::new(&copy_dir)).unwrap();
    assert_eq!(
        copy.partitions(),
        before,
        "first and next offsets, counts, bytes"
    );
    for (tp, want) in tps().iter().zip(&expected) {
        assert_eq!(&all_records(&copy, tp), want, "{tp}");
    }
    assert!(copy.verify().unwrap().is_clean());
    // An archive run from the copy resumes where the source was: what it
    // is handed again is dropped, the rest appended.
    let [a, _, c] = tps();
    let w = copy
        .append(&[
            common::batch(&a, 450..550, 3000),
            // c was emptied at next offset 410: that survived the copy.
            common::batch(&c, 405..415, 2000),
        ])
        .unwrap();
    assert_eq!(w.get(&a), Some(550));
    assert_eq!(w.get(&c), Some(415));
    assert_eq!(copy.stats().records_duplicate, 50 + 5);
    assert!(copy.verify().unwrap().is_clean());
}

/// Partitions advanced past offsets that held no record (format 4: a
/// summary whose next offset is its floor, above its newest entry, or of
/// an emptied partition) are copied as they are: same next offsets, the
/// floor kept (records below it are duplicates in the copy too), verify
/// clean, and a strict open of the copy takes them.
#[test]
fn advanced_partitions_are_copied_with_their_floor() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let [a, _, c] = tps();
    engine
        .advance_partitions(&[(a.clone(), 503), (c.clone(), 420)].into_iter().collect())
        .unwrap();
    engine.sync().unwrap();
    let before = engine.partitions();
    let copy_dir = dir.path().join("copy");
    let report = engine
        .backup_to(&copy_dir, &AtomicBool::new(false))
        .unwrap();
    assert!(report.verify.is_clean(), "{:?}", report.verify.problems);
    let copy = Engine::open(
        EngineConfig::new(&copy_dir).recovery_mode(cairn_engine::RecoveryMode::Strict),
    )
    .unwrap();
    assert_eq!(copy.partitions(), before);
    assert_eq!(copy.durable_offset(&a), Some(503));
    assert_eq!(copy.durable_offset(&c), Some(420));
    let w = copy
        .append(&[
            common::batch(&a, 500..505, 3000),
            common::batch(&c, 418..421, 2000),
        ])
        .unwrap();
    assert_eq!((w.appended_records, w.duplicate_records), (3, 5));
    assert!(copy.verify().unwrap().is_clean());
}

#[test]
fn a_backup_refuses_a_directory_in_use_and_removes_itself_when_stopped() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));

    let busy = dir.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("keep"), "mine").unwrap();
    match engine.backup_to(&busy, &AtomicBool::new(false)) {
        Err(Error::Io { source, .. }) => {
            assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(busy.join("keep")).unwrap(), "mine");

    // Stopped mid-copy (after the log): the partial copy goes; a directory
    // that was there stays, empty. And stopped before it began: nothing is
    // made.
    static MID_COPY: AtomicBool = AtomicBool::new(false);
    for (existed, stopped_first) in [(false, false), (true, false), (false, true), (true, true)] {
        let dest = dir
            .path()
            .join(format!("stopped-{existed}-{stopped_first}"));
        if existed {
            std::fs::create_dir(&dest).unwrap();
        }
        MID_COPY.store(stopped_first, Ordering::Relaxed);
        let reached = Arc::new(AtomicBool::new(false));
        fail::cfg_callback(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG, {
            let reached = reached.clone();
            move || {
                reached.store(true, Ordering::Relaxed);
                MID_COPY.store(true, Ordering::Relaxed);
            }
        })
        .unwrap();
        let r = engine.backup_to(&dest, &MID_COPY);
        fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
        match r {
            Err(Error::Interrupted { op: "backup" }) => {}
            other => panic!("expected Interrupted, got {other:?}"),
        }
        assert_eq!(
            reached.load(Ordering::Relaxed),
            !stopped_first,
            "a stop asked first makes nothing"
        );
        assert_eq!(dest.exists(), existed);
        if existed {
            assert_eq!(std::fs::read_dir(&dest).unwrap().count(), 0);
        }
    }
    // Not inside the archive's own directory.
    let inside = dir.path().join("src").join("copy");
    match engine.backup_to(&inside, &AtomicBool::new(false)) {
        Err(Error::Io { source, .. }) => assert!(source.to_string().contains("outside")),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(!inside.exists());

    // Through a link to an empty directory: the copy lands in the target,
    // and a stopped one leaves both the link and its target as they were.
    let target = dir.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        stopped_mid_copy(&engine, &link),
        Err(Error::Interrupted { .. })
    ));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
    let r = engine.backup_to(&link, &AtomicBool::new(false)).unwrap();
    assert!(r.verify.is_clean());
    assert!(target.join("sled").exists());

    // The source is untouched by any of it.
    assert!(engine.verify().unwrap().is_clean());
}

#[test]
fn a_poisoned_engine_is_not_backed_up() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    fail::cfg(cairn_engine::FAILPOINT_FLUSH_ERR, "return").unwrap();
    let failed = engine.append(&[common::batch(&tps()[0], 500..510, 10)]);
    fail::remove(cairn_engine::FAILPOINT_FLUSH_ERR);
    assert!(failed.is_err());
    let dest = dir.path().join("copy");
    match engine.backup_to(&dest, &AtomicBool::new(false)) {
        Err(Error::Poisoned { .. }) => {}
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(!dest.exists(), "a refused backup leaves nothing");
}

/// An unfinished backup's mark that cannot be looked for is an error, not
/// taken for absent (the remains of a copy would pass for an archive);
/// no directory there, or a file in its place, holds no mark.
#[test]
fn a_mark_that_cannot_be_looked_for_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let looped = dir.path().join("loop");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    match cairn_engine::refuse_unfinished_backup(&looped) {
        Err(Error::Io { op, path, .. }) => {
            assert_eq!(op, "look for an unfinished backup's mark");
            assert_eq!(path, looped.join(cairn_engine::BACKUP_INCOMPLETE_FILE));
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
    cairn_engine::refuse_unfinished_backup(&dir.path().join("none")).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    cairn_engine::refuse_unfinished_backup(&file).unwrap();
    std::fs::write(dir.path().join(cairn_engine::BACKUP_INCOMPLETE_FILE), b"").unwrap();
    assert!(matches!(
        cairn_engine::refuse_unfinished_backup(dir.path()),
        Err(Error::IncompleteBackup { .. })
    ));
}

/// The copy is made durable by its own fdatasync, through a handle opened
/// before the copy was written (sled's `flush` is no fsync, and the fsync
/// in sled's drop unwraps). One that fails fails the backup, which removes
/// its copy; the source is not touched, and a backup after it succeeds.
#[test]
fn a_failed_sync_of_the_copy_fails_the_backup_not_the_source() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    fail::cfg(cairn_engine::FAILPOINT_FLUSH_ERR, "return").unwrap();
    let failed = engine.backup_to(&dest, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_FLUSH_ERR);
    match failed {
        Err(Error::Io { op, .. }) => assert_eq!(op, "fdatasync the backup"),
        other => panic!("expected the copy's fdatasync to fail, got {other:?}"),
    }
    assert!(!dest.exists(), "a failed backup leaves nothing");
    assert!(!engine.is_poisoned(), "the source is not the copy");
    engine
        .append(&[common::batch(&tps()[0], 500..510, 10)])
        .unwrap();
    let report = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
    assert!(report.verify.is_clean());
}

/// A panic on the copy's own store (sled's, on a failing destination disk;
/// here in its fdatasync) is the destination's failure: an error naming
/// it, the copy removed, the source neither poisoned nor harmed. Until
/// 2026-12-05 it reached the caller as a panic, which a running archive
/// serving a live backup took for damage in the archive: it poisoned it,
/// and stopped the run.
#[test]
fn a_panic_on_the_copy_fails_the_backup_not_the_source() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    fail::cfg(cairn_engine::FAILPOINT_FLUSH_ERR, "panic(the copy's disk)").unwrap();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.backup_to(&dest, &AtomicBool::new(false))
    }));
    fail::remove(cairn_engine::FAILPOINT_FLUSH_ERR);
    match failed {
        Ok(Err(Error::Io { op, source, .. })) => {
            assert_eq!(op, "fdatasync the backup");
            assert!(source.to_string().contains("the copy's disk"), "{source}");
        }
        Ok(other) => panic!("expected the copy's panic as an error, got {other:?}"),
        Err(_) => panic!("a panic on the copy's store reached the caller"),
    }
    assert!(!dest.exists(), "a failed backup leaves nothing");
    assert!(!engine.is_poisoned(), "the source is not the copy");
    engine
        .append(&[common::batch(&tps()[0], 500..510, 10)])
        .unwrap();
    let report = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
    assert!(report.verify.is_clean());
}

/// A panic reading the archive (sled's, on damage to its own files) goes
/// on to the caller, which poisons the engine as for any read that
/// panicked; the partial copy is removed first, as after any failure
/// (until 2026-12-05 it was left, marked unfinished).
#[test]
fn a_panic_reading_the_source_cleans_up_and_goes_on_to_the_caller() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    fail::cfg(
        cairn_engine::FAILPOINT_BACKUP_AFTER_LOG,
        "panic(the archive's page)",
    )
    .unwrap();
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.backup_to(&dest, &AtomicBool::new(false))
    }));
    fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
    let payload = failed.expect_err("the source's panic goes on to the caller");
    assert!(cairn_engine::panic_message(&*payload).contains("the archive's page"));
    assert!(
        !dest.exists(),
        "the partial copy is removed before the panic goes on"
    );
}

/// The directory sync that makes a verified copy's completion durable
/// fails: the backup fails, the sync is not retried, and the copy is left
/// marked unfinished, so no open takes it (until the night of 2026-12-03
/// the mark was gone and the cleanup synced the directory again).
#[test]
fn a_failed_sync_of_the_completion_leaves_the_copy_marked_unfinished() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    fail::cfg(cairn_engine::FAILPOINT_BACKUP_COMPLETE_SYNC, "return").unwrap();
    let failed = engine.backup_to(&dest, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_BACKUP_COMPLETE_SYNC);
    match failed {
        Err(Error::Io { op, .. }) => assert_eq!(op, "mark the backup complete"),
        other => panic!("expected the completion's sync to fail, got {other:?}"),
    }
    assert!(dest.join(cairn_engine::BACKUP_INCOMPLETE_FILE).exists());
    match Engine::open(EngineConfig::new(&dest)) {
        Err(Error::IncompleteBackup { path }) => assert_eq!(path, dest),
        other => panic!(
            "expected the copy refused as unfinished, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(!engine.is_poisoned(), "the source is not the copy");
}

/// A directory fsync that fails during the backup (here the first one,
/// the mark's) is not followed by a trusted one: the backup fails, and its
/// directory stays marked unfinished, so no open takes it (until the night
/// of 2026-12-04 the cleanup synced the directory again and, that passing,
/// removed the mark).
#[test]
fn a_failed_directory_sync_leaves_the_backup_marked_unfinished() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    // The mark's sync is the backup's second of a directory: its parent's
    // comes first (for a directory found, as here, too: since the night
    // of 2026-12-04, a `mkdir` just before the backup may not be durable).
    let dest = dir.path().join("copy");
    std::fs::create_dir(&dest).unwrap();
    fail::cfg(cairn_engine::FAILPOINT_SYNC_DIR, "1*off->1*return->off").unwrap();
    let failed = engine.backup_to(&dest, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_SYNC_DIR);
    match failed {
        Err(Error::Io { op, .. }) => assert_eq!(op, "mark the backup incomplete"),
        other => panic!("expected the mark's directory sync to fail, got {other:?}"),
    }
    assert!(dest.join(cairn_engine::BACKUP_INCOMPLETE_FILE).exists());
    assert!(
        !EngineConfig::new(&dest).store_exists().unwrap(),
        "nothing copied"
    );
    match Engine::open(EngineConfig::new(&dest)) {
        Err(Error::IncompleteBackup { path }) => assert_eq!(path, dest),
        other => panic!(
            "expected the directory refused as unfinished, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(!engine.is_poisoned(), "the source is not the copy");
}

/// A backup killed part-way leaves its directory as it was at that moment:
/// such a directory (copied mid-backup, as `kill -9` would leave it) is
/// refused by every open as an unfinished backup, rather than opened as an
/// archive that lacks records; the finished backup opens.
#[test]
fn a_backup_cut_short_is_refused_as_unfinished() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    let killed = dir.path().join("killed");
    let (from, to) = (dest.clone(), killed.clone());
    fail::cfg_callback(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG, move || {
        if !to.exists() {
            cairn_engine::fuzzing::copy_dir(&from, &to);
        }
    })
    .unwrap();
    let done = engine.backup_to(&dest, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
    done.unwrap();
    match Engine::open(EngineConfig::new(&killed)) {
        Err(Error::IncompleteBackup { path }) => assert_eq!(path, killed),
        other => panic!(
            "expected the unfinished backup refused, got {:?}",
            other.map(|_| ())
        ),
    }
    // verify too, which reads the store without opening an engine.
    match cairn_engine::verify_store(&EngineConfig::new(&killed)) {
        Err(Error::IncompleteBackup { .. }) => {}
        other => panic!("expected verify to refuse it, got {other:?}"),
    }
    assert!(!dest.join(cairn_engine::BACKUP_INCOMPLETE_FILE).exists());
    let copy = Engine::open(EngineConfig::new(&dest)).unwrap();
    assert_eq!(copy.partitions(), engine.partitions());

    // Cut short before its store was made: the marker alone. verify says
    // what it is, not "no cairn store here".
    let bare = dir.path().join("bare");
    std::fs::create_dir(&bare).unwrap();
    std::fs::write(bare.join(cairn_engine::BACKUP_INCOMPLETE_FILE), b"").unwrap();
    match cairn_engine::verify_store(&EngineConfig::new(&bare)) {
        Err(Error::IncompleteBackup { path }) => assert_eq!(path, bare),
        other => panic!("expected verify to refuse it as unfinished, got {other:?}"),
    }
}

#[test]
fn a_second_backup_into_the_same_directory_is_refused_and_harms_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let dest = dir.path().join("copy");
    // Mid-copy, a second backup into the same directory.
    let second = Arc::new(Mutex::new(None));
    let (other, into, seen) = (engine.clone(), dest.clone(), second.clone());
    fail::cfg_callback(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG, move || {
        let mut seen = seen.lock().unwrap();
        if seen.is_none() {
            *seen = Some(other.backup_to(&into, &AtomicBool::new(false)).map(|_| ()));
        }
    })
    .unwrap();
    let first = engine.backup_to(&dest, &AtomicBool::new(false));
    fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
    let first = first.unwrap();
    match second.lock().unwrap().take() {
        Some(Err(Error::Locked { .. })) => {}
        Some(Err(Error::Io { source, .. })) => {
            assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists, "{source}")
        }
        other => panic!("expected the second backup refused, got {other:?}"),
    }
    assert!(first.verify.is_clean(), "{:?}", first.verify.problems);
    let copy = Engine::open(EngineConfig::new(&dest)).unwrap();
    assert_eq!(copy.partitions(), engine.partitions());
}

/// A backup into `dest` stopped once its log is copied.
fn stopped_mid_copy(engine: &Engine, dest: &std::path::Path) -> cairn_engine::Result<()> {
    static STOP: AtomicBool = AtomicBool::new(false);
    STOP.store(false, Ordering::Relaxed);
    fail::cfg_callback(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG, || {
        STOP.store(true, Ordering::Relaxed)
    })
    .unwrap();
    let r = engine.backup_to(dest, &STOP);
    fail::remove(cairn_engine::FAILPOINT_BACKUP_AFTER_LOG);
    r.map(|_| ())
}

/// The root of a fresh filesystem (an empty directory but for
/// `lost+found`, a new disk mounted for backups) takes a backup, which
/// opens and verifies; the backup's own stop removes what it wrote and
/// leaves `lost+found`. A file of that name is something else, and refused
/// (until 2026-12-06 the directory was refused too, as not empty).
#[test]
fn a_fresh_filesystems_root_takes_a_backup() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let disk = dir.path().join("disk");
    std::fs::create_dir_all(disk.join("lost+found")).unwrap();
    stopped_mid_copy(&engine, &disk).expect_err("stopped");
    let left: Vec<_> = std::fs::read_dir(&disk)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec!["lost+found"], "what the stopped backup left");
    let r = engine.backup_to(&disk, &AtomicBool::new(false)).unwrap();
    assert!(r.verify.is_clean(), "{:?}", r.verify.problems);
    let copy = Engine::open(small_config(&disk)).unwrap();
    for tp in tps() {
        assert_eq!(all_records(&copy, &tp), all_records(&engine, &tp), "{tp}");
    }
    drop(copy);
    assert!(disk.join("lost+found").is_dir());

    let file = dir.path().join("file");
    std::fs::create_dir(&file).unwrap();
    std::fs::write(file.join("lost+found"), "not a directory").unwrap();
    let err = engine
        .backup_to(&file, &AtomicBool::new(false))
        .expect_err("a file named lost+found");
    assert!(
        err.to_string()
            .contains("the backup's directory must be new or empty"),
        "{err}"
    );
}

/// A lock that cannot be taken once its file is made (a file system
/// without locks: ENOLCK) leaves nothing behind: the lock file it made
/// goes, and a directory the backup made too (until the night of
/// 2026-12-04 the file stayed, and kept the directory).
#[test]
fn a_lock_that_cannot_be_taken_leaves_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let new = dir.path().join("new");
    fail::cfg(cairn_engine::FAILPOINT_LOCK_AFTER_OPEN, "return").unwrap();
    let results = [&empty, &new].map(|d| engine.backup_to(d, &AtomicBool::new(false)));
    fail::remove(cairn_engine::FAILPOINT_LOCK_AFTER_OPEN);
    for r in results {
        match r {
            Err(Error::Io {
                op: "lock", source, ..
            }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOLCK))
            }
            other => panic!("expected the lock's failure, got {other:?}"),
        }
    }
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
    assert!(!new.exists());
}

#[test]
fn a_lock_file_that_was_there_stays_and_a_linked_one_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let engine = source(&dir.path().join("src"));
    // Empty but for a lock file left by an earlier, stopped backup: usable,
    // and left as it was when this one stops too.
    let dest = dir.path().join("with-lock");
    std::fs::create_dir(&dest).unwrap();
    std::fs::write(dest.join("cairn.lock"), "").unwrap();
    assert!(matches!(
        stopped_mid_copy(&engine, &dest),
        Err(Error::Interrupted { .. })
    ));
    let left: Vec<_> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["cairn.lock"]);
    assert!(engine
        .backup_to(&dest, &AtomicBool::new(false))
        .unwrap()
        .verify
        .is_clean());
    // A lock file that is a link is not taken (nor the file it names).
    let dest = dir.path().join("linked-lock");
    std::fs::create_dir(&dest).unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, dest.join("cairn.lock")).unwrap();
    assert!(matches!(
        engine.backup_to(&dest, &AtomicBool::new(false)),
        Err(Error::Io { .. })
    ));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    // Nor by an open: the lock file is never opened through a link.
    match Engine::open(EngineConfig::new(&dest)) {
        Err(Error::Io { op, .. }) => assert_eq!(op, "open lock file"),
        Err(other) => panic!("expected the linked lock file refused, got {other}"),
        Ok(_) => panic!("expected the linked lock file refused, got an engine"),
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
}

/// A closed store at `src` holding three entries of ten records (offsets
/// 0..30) of partition 0 of `topic`, at LSNs 1 to 3.
fn three_entries(src: &std::path::Path, topic: &str) -> TopicPartition {
    let tp = TopicPartition::new(topic, 0);
    let e = Engine::open(EngineConfig::new(src)).unwrap();
    for i in 0..3 {
        e.append(&[common::batch(&tp, i * 10..i * 10 + 10, 20)])
            .unwrap();
    }
    e.close().unwrap();
    tp
}

/// A frame damaged in the source is copied as it is: the backup reports
/// the copy's verify, which names the damage's location, and keeps the
/// copy (before, the copy's record count fell short first, and the backup
/// failed with an i/o error that named no location).
#[test]
fn damage_in_the_source_is_reported_where_it_is() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let tp = three_entries(&src, "d");
    // The second entry's frame: a byte of its records flipped; and the
    // first entry's index entry (before 2026-12-02, that failed the whole
    // backup).
    common::with_raw_tree(&src, |t| {
        let mut v = t.get(common::wal_key(2)).unwrap().unwrap().to_vec();
        let last = v.len() - 1;
        v[last] ^= 0x40;
        t.insert(common::wal_key(2), v).unwrap();
        let k = cairn_engine::keys::index_key(&tp, 0);
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[0] ^= 0x40;
        t.insert(k, v).unwrap();
    });
    let engine = Engine::open(EngineConfig::new(&src)).unwrap();
    let dest = dir.path().join("copy");
    let r = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
    assert_eq!(r.records, 30);
    assert!(!r.verify.is_clean());
    for at in [
        cairn_engine::Location::Wal { lsn: 2 },
        cairn_engine::Location::Index {
            topic: "d".into(),
            partition: 0,
            first_offset: 0,
        },
    ] {
        assert!(
            r.verify.problems.iter().any(|p| p.location == at),
            "{at}: {:?}",
            r.verify.problems
        );
    }
    assert_eq!(r.index_entries, 3, "the damaged index entry copied");
    assert!(dest.exists(), "the copy is kept, with its damage reported");
}

/// An index entry in the source that names a log entry past the log's
/// end (a stray, below its partition's next offset: no append writes one)
/// is copied and reported where it is, as the source's own verify reports
/// it. Before, the backup dropped it without a word and reported a clean
/// copy of a damaged archive.
#[test]
fn a_stray_index_entry_past_the_log_is_reported_not_dropped() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let tp = three_entries(&src, "s");
    let stray = cairn_engine::Location::Index {
        topic: "s".into(),
        partition: 0,
        first_offset: 5,
    };
    common::with_raw_tree(&src, |t| {
        let k = cairn_engine::keys::index_key(&tp, 0);
        let (_, mut e) =
            cairn_engine::index::IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        e.first_offset = 5;
        e.last_offset = 5;
        e.record_count = 1;
        e.lsn = 1_000_000;
        let (k, v) = e.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let engine = Engine::open(EngineConfig::new(&src)).unwrap();
    let own = engine.verify().unwrap();
    assert!(
        own.problems.iter().any(|p| p.location == stray),
        "the source's verify names it: {:?}",
        own.problems
    );
    let dest = dir.path().join("copy");
    let r = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
    assert!(
        r.verify.problems.iter().any(|p| p.location == stray),
        "the copy's verify names it: {:?}",
        r.verify.problems
    );
    assert_eq!(r.index_entries, 4, "the stray index entry copied");
    assert_eq!(r.records, 30);
}

/// A frame emptied in the source (its value gone, as a reserved slot's is)
/// is copied as it is, and the copy's verify reports it where the source's
/// does. Before, the backup took it for a slot and left it out: the copy's
/// log skipped that LSN, and its verify named the hole differently.
#[test]
fn an_emptied_frame_is_copied_and_reported_where_it_is() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    three_entries(&src, "e");
    common::with_raw_tree(&src, |t| {
        assert!(!t.get(common::wal_key(2)).unwrap().unwrap().is_empty());
        t.insert(common::wal_key(2), Vec::<u8>::new()).unwrap();
    });
    let engine = Engine::open(EngineConfig::new(&src)).unwrap();
    let own = engine.verify().unwrap();
    assert!(!own.is_clean(), "the source's verify finds the hole");
    let dest = dir.path().join("copy");
    let r = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
    let places = |v: &cairn_engine::VerifyReport| {
        v.problems.iter().map(|p| p.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(
        places(&r.verify),
        places(&own),
        "the copy's verify reports what the source's does"
    );
    assert_eq!(r.frames, 2, "two frames and the emptied one copied");
    assert_eq!(r.records, 30);
    common::with_raw_tree(&dest, |t| {
        assert_eq!(
            t.get(common::wal_key(2)).unwrap().map(|v| v.len()),
            Some(0),
            "the emptied frame is in the copy, empty"
        );
    });
}

/// A directory the backup makes has the archive's permissions at most
/// (the umask still applies): an archive kept 0700 is not copied into a
/// folder others can read. Before, it got 0777 less the umask.
#[test]
fn a_backup_directory_is_no_more_open_than_the_archive() {
    use std::os::unix::fs::PermissionsExt;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let engine = source(&src);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    // A read-only archive folder still gets a copy its owner can write.
    for (archive, most) in [(0o700, 0o700), (0o750, 0o750), (0o500, 0o700)] {
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(archive)).unwrap();
        let dest = dir.path().join(format!("copy-{archive:o}"));
        let r = engine.backup_to(&dest, &AtomicBool::new(false)).unwrap();
        assert!(r.verify.is_clean(), "{:?}", r.verify.problems);
        let got = mode(&dest);
        assert_eq!(got & !most, 0, "archive {archive:o}: backup made {got:o}");
        assert_eq!(
            got & 0o700,
            0o700,
            "archive {archive:o}: backup made {got:o}"
        );
    }
    // A directory found (made by the user) that is more open than the
    // archive is refused, with nothing written into it (before 2026-12-03
    // it was taken as it was, and the copy was readable by all); one as
    // closed is taken.
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o700)).unwrap();
    let found = dir.path().join("found");
    std::fs::create_dir(&found).unwrap();
    std::fs::set_permissions(&found, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = engine
        .backup_to(&found, &AtomicBool::new(false))
        .expect_err("a directory more open than the archive");
    assert!(
        err.to_string().contains(
            "the backup's directory is mode 755, open to users the archive (700) keeps out"
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&found).unwrap().count(),
        0,
        "nothing written"
    );
    // One that holds something is refused for that, whatever its mode: it
    // is not told to change a mode that would not make it usable (until
    // the night of 2026-12-03 the mode was judged first).
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep"), "mine").unwrap();
    std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = engine
        .backup_to(&full, &AtomicBool::new(false))
        .expect_err("a directory that holds something");
    assert!(
        err.to_string()
            .contains("the backup's directory must be new or empty"),
        "{err}"
    );
    assert_eq!(std::fs::read(full.join("keep")).unwrap(), b"mine");
    // One holding a backup's remains, cut short: said as such.
    let remains = dir.path().join("remains");
    std::fs::create_dir(&remains).unwrap();
    std::fs::write(remains.join(cairn_engine::BACKUP_INCOMPLETE_FILE), "").unwrap();
    let err = engine
        .backup_to(&remains, &AtomicBool::new(false))
        .expect_err("a directory holding a backup's remains");
    assert!(
        err.to_string()
            .contains("holds what an earlier backup left when it was cut short"),
        "{err}"
    );
    std::fs::set_permissions(&found, std::fs::Permissions::from_mode(0o700)).unwrap();
    let r = engine.backup_to(&found, &AtomicBool::new(false)).unwrap();
    assert!(r.verify.is_clean(), "{:?}", r.verify.problems);
    // For the temporary folder's removal.
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o700)).unwrap();
}

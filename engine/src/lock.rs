//! An advisory lock on the data directory that names its holder.
//!
//! sled takes its own lock on `sled/db`, but its error does not say who holds
//! it. `cairn.lock` holds the pid, so `cairn status` on a live archive can say
//! "locked by pid 1234" instead of failing obscurely.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "cairn.lock";

/// Failpoint: in taking the lock, once the lock file is open and before it
/// is locked; `return` fails as a file system without locks does (ENOLCK).
#[doc(hidden)]
pub const FAILPOINT_LOCK_AFTER_OPEN: &str = "lock::after_open";

/// Held for the life of an engine; released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    /// The lock file's identity, listed in [`HELD_HERE`] while held.
    id: (u64, u64),
}

/// The lock files (device, inode) this process holds: how a lock found
/// taken is told to be this process's own, not by the pid written in it,
/// which another PID namespace (two containers on one `--data`, each
/// `cairn` its pid 1) or another NFS host can share (until 2026-12-05 the
/// pid alone decided, and such a holder was called "this process").
static HELD_HERE: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

fn held_here() -> std::sync::MutexGuard<'static, Vec<(u64, u64)>> {
    HELD_HERE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Take one listing of `id` off [`HELD_HERE`].
fn unlist(id: (u64, u64)) {
    let mut held = held_here();
    if let Some(i) = held.iter().position(|h| *h == id) {
        held.swap_remove(i);
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        unlist(self.id);
    }
}

impl DirLock {
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let io = io_at(&path);
        // Not through a link: the pid is written into the file opened, and
        // a link would aim that write (and the truncation before it) at a
        // file of someone else's choosing (a backup's directory may be
        // anyone's).
        let open = |new: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).custom_flags(libc::O_NOFOLLOW);
            if new {
                o.create_new(true);
            } else {
                o.create(true).truncate(false);
            }
            o.open(&path)
        };
        // Made here, or found: one made here and then not locked (ENOLCK
        // on a file system without locks) or not written is removed again,
        // so that a failed open or backup leaves no lock file in a
        // directory it found empty (until the night of 2026-12-04 it
        // stayed, and backup removed it itself). One another process
        // locked first (`Locked`) is never removed: it is that holder's.
        // Refused for want of permission: said as what it is, as every
        // open takes the lock, reads of a stopped archive too (until
        // 2026-12-07 a bare "Permission denied" on the lock file; an
        // audit).
        let lock_io = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                io("open lock file (every open of a store takes its lock, and may recover it: it needs write access to the directory; run as the user that owns it, or work on a copy, `cp -a`)", e)
            } else {
                io("open lock file", e)
            }
        };
        let (file, made) = match open(true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (open(false).map_err(lock_io)?, false)
            }
            Err(e) => return Err(lock_io(e)),
        };
        let mut file = file;
        match Self::lock_opened(dir, &path, &mut file) {
            Ok(id) => Ok(DirLock { _file: file, id }),
            Err(e) => {
                // Removed while still held (the file is closed below, after
                // it), so that no other opener can lock it in between and
                // then hold a lock on a file no longer there (until
                // 2026-12-05 it was closed first; seen in review).
                if made && !matches!(e, Error::Locked { .. }) {
                    let _ = std::fs::remove_file(&path);
                }
                drop(file);
                Err(e)
            }
        }
    }

    /// Lock the lock file `file`, opened at `path` in `dir`, and write this
    /// process's pid into it; its identity (device, inode) once done.
    fn lock_opened(dir: &Path, path: &Path, file: &mut File) -> Result<(u64, u64)> {
        let io = io_at(path);
        fail::fail_point!(FAILPOINT_LOCK_AFTER_OPEN, |_| Err(io(
            "lock",
            std::io::Error::from_raw_os_error(libc::ENOLCK)
        )));
        // A process that forks (to spawn a child) while another of its
        // engines holds a lock shares that lock's file description with the
        // child until the child's exec closes it: an engine dropped and
        // reopened in that moment finds its own lock still held. Held by
        // this process, it is therefore retried for a bounded second
        // (polling, as `open_sled` does for sled's lock), then reported.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut locked = file.try_lock();
        while matches!(locked, Err(TryLockError::WouldBlock))
            && holder_pid(file) == Some(std::process::id())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
            locked = file.try_lock();
        }
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let meta = file.metadata().ok();
                let here = meta
                    .as_ref()
                    .is_some_and(|m| held_here().contains(&(m.dev(), m.ino())));
                // The kernel's word first: the pid in the file is the last
                // cairn holder's, and a holder that is no cairn (a `flock`
                // of the file, a copy of the directory's tools) writes none
                // (until 2026-12-07 a dead earlier holder's pid was named;
                // found by an audit).
                let pid = meta
                    .as_ref()
                    .and_then(flock_holder)
                    .or_else(|| holder_pid(file));
                let holder = match pid {
                    _ if here => format!(
                        "this process (pid {}): an engine on it is already open",
                        std::process::id()
                    ),
                    // Not one of this process's locks, yet its pid: another
                    // PID namespace's or host's process with the same number.
                    Some(pid) if pid == std::process::id() => format!(
                        "pid {pid}, this process's own number, though no engine of this process holds it: a process of another PID namespace (a container) or host, or a child this process forked that still holds the lock's file"
                    ),
                    Some(pid) => format!("pid {pid}"),
                    None => "another process (pid unknown)".to_owned(),
                };
                return Err(Error::Locked {
                    path: dir.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io("lock", e)),
        }
        // A lock file unlinked while this locked it (a store being
        // removed, removal.rs) locks nothing: the next opener makes a new
        // one. Told by the path no longer naming the file held (gone, or
        // another file): a link count alone misses NFS's rename of an open
        // file and a directory copied with hard links.
        let held = file.metadata().map_err(|e| io("stat lock file", e))?;
        // Listed as this process's as soon as it is known which file is
        // held, so that another thread of this process meeting it takes it
        // for its own (listed only once the pid was written, until review
        // the same day), and taken off again if it is not kept.
        let id = (held.dev(), held.ino());
        held_here().push(id);
        let claimed = Self::claim(dir, path, file, &held);
        if claimed.is_err() {
            unlist(id);
        }
        claimed.map(|()| id)
    }

    /// The lock on `file` (metadata `held`) is taken: check that `path`
    /// still names it, and write this process's pid into it.
    fn claim(dir: &Path, path: &Path, file: &mut File, held: &std::fs::Metadata) -> Result<()> {
        let io = io_at(path);
        let unlinked = match std::fs::symlink_metadata(path) {
            Ok(named) => named.dev() != held.dev() || named.ino() != held.ino(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io("stat lock file", e)),
        };
        if unlinked {
            return Err(Error::Locked {
                path: dir.to_path_buf(),
                holder: "a process that removed it as this locked it (an empty store removed)"
                    .to_owned(),
            });
        }
        // The pid is written only into a file that is the lock file alone:
        // one with other hard links (O_NOFOLLOW lets those through) may be
        // anyone's file, which the truncation would destroy (a backup's
        // directory may be anyone's). Its lock still holds; only its
        // holder goes unnamed. Until the night of 2026-12-04 it was
        // written whatever the link count.
        if held.is_file() && held.nlink() == 1 {
            file.set_len(0).map_err(|e| io("truncate lock file", e))?;
            file.seek(SeekFrom::Start(0))
                .map_err(|e| io("seek lock file", e))?;
            writeln!(file, "{}", std::process::id()).map_err(|e| io("write lock file", e))?;
        } else {
            tracing::warn!(path = %path.display(), links = held.nlink(), "the lock file is linked elsewhere too (or is no regular file): locked, but its holder's pid is not written into it");
        }
        Ok(())
    }
}

/// An I/O error of the lock file at `path`, for the operation named.
fn io_at(path: &Path) -> impl Fn(&'static str, std::io::Error) -> Error + '_ {
    move |op, source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// The pid of the process holding a `flock` on the file of `meta`, as
/// `/proc/locks` lists it: `N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`
/// (the device in hex; a waiter's line has `->` after `N:`, so it is not
/// taken). `None` without `/proc`, or with the holder in no PID namespace
/// this process sees (pid 0).
fn flock_holder(meta: &std::fs::Metadata) -> Option<u32> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let want = format!(
        "{:02x}:{:02x}:{}",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields[..] {
            [_, "FLOCK", _, _, pid, at, ..] if at == want => {
                pid.parse().ok().filter(|&p: &u32| p != 0)
            }
            _ => None,
        }
    })
}

/// The pid the lock file names, if it names one.
fn holder_pid(file: &mut File) -> Option<u32> {
    // A lock file with other links holds no pid of its holder's (`acquire`
    // writes none into it): what it says is someone else's.
    if file.metadata().ok()?.nlink() != 1 {
        return None;
    }
    // Bounded, as every side file's read is: a pid and a newline are at
    // most 11 bytes, and a file held by someone else may hold anything.
    const READ_MAX: u64 = 64;
    let mut s = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    let n = Read::by_ref(file)
        .take(READ_MAX)
        .read_to_string(&mut s)
        .ok()?;
    if n as u64 == READ_MAX {
        return None;
    }
    s.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    /// A lock file hard-linked to another file locks, and leaves the other
    /// file as it was.
    #[test]
    fn the_lock_never_writes_through_a_hard_link() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("victim");
        std::fs::write(&victim, "not cairn's").unwrap();
        std::fs::hard_link(&victim, dir.path().join(super::LOCK_FILE)).unwrap();
        let lock = super::DirLock::acquire(dir.path()).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "not cairn's");
        // Held all the same, by this process, which knows its own locks
        // without reading a pid from a file that is not only its own.
        std::fs::write(&victim, "4242").unwrap();
        match super::DirLock::acquire(dir.path()) {
            Err(crate::Error::Locked { holder, .. }) => {
                assert!(holder.starts_with("this process"), "{holder}")
            }
            other => panic!("{other:?}"),
        }
        drop(lock);
    }

    /// A lock held by another process whose file names this process's pid
    /// (another PID namespace's pid 1, say; or an earlier holder's, the
    /// holder being no cairn) is not called this process's own (until
    /// 2026-12-05 the pid alone decided): the kernel's holder is named
    /// (until 2026-12-07 the file's pid was). One an engine of this process
    /// holds is its own.
    #[test]
    fn only_a_lock_this_process_holds_is_called_its_own() {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(super::LOCK_FILE);
        std::fs::write(&path, format!("{}\n", std::process::id())).unwrap();
        let mut child = std::process::Command::new("flock")
            // -o: the command does not inherit the lock; killing flock
            // lets go of it.
            .args(["-x", "-o"])
            .arg(&path)
            // Held until its stdin closes: nothing outlives the test.
            .args(["-c", "echo locked; exec cat >/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("flock (util-linux)");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "locked\n");
        let refused = super::DirLock::acquire(dir.path());
        // Where /proc/locks lists the file's device as its stat does (not
        // a btrfs subvolume's), the kernel's holder is named; else the
        // file's pid, which is this process's number.
        let listed = super::flock_holder(&std::fs::metadata(&path).unwrap());
        let flock_pid = child.id();
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        match (refused, listed) {
            (Err(crate::Error::Locked { holder, .. }), Some(_)) => assert_eq!(
                holder,
                format!("pid {flock_pid}"),
                "named by the kernel's /proc/locks, not by the file"
            ),
            (Err(crate::Error::Locked { holder, .. }), None) => assert!(
                !holder.starts_with("this process") && holder.contains("another PID namespace"),
                "{holder}"
            ),
            (other, _) => panic!("{other:?}"),
        }
        // Held by this process now: its own.
        let lock = super::DirLock::acquire(dir.path()).unwrap();
        match super::DirLock::acquire(dir.path()) {
            Err(crate::Error::Locked { holder, .. }) => {
                assert!(holder.starts_with("this process"), "{holder}")
            }
            other => panic!("{other:?}"),
        }
        drop(lock);
        drop(super::DirLock::acquire(dir.path()).unwrap());
    }

    /// The holder's pid is read from at most 64 bytes: a larger file names
    /// none (it was read whole into memory, whatever its size).
    #[test]
    fn a_lock_file_is_read_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let pid = |text: &[u8]| {
            std::fs::write(&path, text).unwrap();
            super::holder_pid(&mut std::fs::File::open(&path).unwrap())
        };
        assert_eq!(pid(b"4242\n"), Some(4242));
        assert_eq!(pid(format!("{:>62}\n", 4242).as_bytes()), Some(4242));
        assert_eq!(pid(format!("{:>63}\n", 4242).as_bytes()), None);
        assert_eq!(pid(&vec![b'7'; 1 << 20]), None);
    }
}

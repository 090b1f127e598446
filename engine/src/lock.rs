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
pub const FAILPOINT_LOCK_AFTER_OPEN: &str = "lock::after_open";

/// Held for the life of an engine; released on drop.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    pub fn acquire(dir: &Path) -> Result<DirLock> {
        let path = dir.join(LOCK_FILE);
        let io = |op, e| Error::Io {
            op,
            path: path.clone(),
            source: e,
        };
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
        let (file, made) = match open(true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (open(false).map_err(|e| io("open lock file", e))?, false)
            }
            Err(e) => return Err(io("open lock file", e)),
        };
        let locked = Self::lock_opened(dir, &path, file);
        if let Err(e) = &locked {
            if made && !matches!(e, Error::Locked { .. }) {
                let _ = std::fs::remove_file(&path);
            }
        }
        locked
    }

    /// Lock the lock file `file`, opened at `path` in `dir`, and write this
    /// process's pid into it.
    fn lock_opened(dir: &Path, path: &Path, mut file: File) -> Result<DirLock> {
        let io = |op, e| Error::Io {
            op,
            path: path.to_path_buf(),
            source: e,
        };
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
            && holder_pid(&mut file) == Some(std::process::id())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
            locked = file.try_lock();
        }
        match locked {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = match holder_pid(&mut file) {
                    Some(pid) if pid == std::process::id() => {
                        format!("this process (pid {pid}): an engine on it is already open")
                    }
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
        Ok(DirLock { _file: file })
    }
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
        // Held all the same, by a holder it cannot name (the file's text
        // is not its pid).
        std::fs::write(&victim, std::process::id().to_string()).unwrap();
        match super::DirLock::acquire(dir.path()) {
            Err(crate::Error::Locked { holder, .. }) => {
                assert!(holder.contains("pid unknown"), "{holder}")
            }
            other => panic!("{other:?}"),
        }
        drop(lock);
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

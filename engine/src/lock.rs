//! An advisory lock on the data directory that names its holder.
//!
//! sled takes its own lock on `sled/db`, but its error does not say who holds
//! it. `cairn.lock` holds the pid, so `cairn status` on a live archive can say
//! "locked by pid 1234" instead of failing obscurely.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "cairn.lock";

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
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| io("open lock file", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                let holder = match s.trim().parse::<u32>() {
                    Ok(pid) if pid == std::process::id() => {
                        format!("this process (pid {pid}): an engine on it is already open")
                    }
                    Ok(pid) => format!("pid {pid}"),
                    Err(_) => "another process (pid unknown)".to_owned(),
                };
                return Err(Error::Locked {
                    path: dir.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io("lock", e)),
        }
        file.set_len(0).map_err(|e| io("truncate lock file", e))?;
        file.seek(SeekFrom::Start(0))
            .map_err(|e| io("seek lock file", e))?;
        writeln!(file, "{}", std::process::id()).map_err(|e| io("write lock file", e))?;
        Ok(DirLock { _file: file })
    }
}

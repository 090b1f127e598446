//! Child processes with a deadline: a peer or an archive child that hangs
//! (a broker that stopped answering, a stuck group join) is killed and
//! reported, instead of hanging the whole benchmark.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How a child's stdout arrived.
pub struct Finished {
    pub status: ExitStatus,
    /// When the first byte of stdout was read ([`run`]), or the first look
    /// found the file non-empty ([`run_to_file`]), if either happened.
    pub first_byte_at: Option<Instant>,
}

/// Run `cmd` with stdout piped into `sink`, chunk by chunk, and stderr
/// inherited. A child still writing after `limit` is killed and the run is
/// an error naming `what`.
pub fn run(
    what: &str,
    cmd: &mut Command,
    limit: Duration,
    mut sink: impl FnMut(&[u8]) + Send + 'static,
) -> Result<Finished, std::io::Error> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        let mut first = None;
        let result = loop {
            match stdout.read(&mut buf) {
                Ok(0) => break Ok(first),
                Ok(n) => {
                    first.get_or_insert_with(Instant::now);
                    sink(&buf[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let _ = tx.send(result);
    });
    let read = match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(_) => {
            // Killing the child closes its stdout, which ends the reader.
            let e = kill_late(&mut child, what, limit);
            let _ = reader.join();
            return Err(e);
        }
    };
    let _ = reader.join();
    let first_byte_at = match read {
        Ok(r) => r,
        Err(e) => {
            end(&mut child);
            return Err(e);
        }
    };
    // stdout is closed: every child this harness runs closes it by
    // exiting, so this wait is short.
    let status = child.wait()?;
    Ok(Finished {
        status,
        first_byte_at,
    })
}

/// Kills `child` (if it is still running) and reaps it.
fn end(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Kills `child`, still running past `limit`, and waits for it: the error
/// that names it.
fn kill_late(child: &mut Child, what: &str, limit: Duration) -> std::io::Error {
    end(child);
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "{what} was still running after {:.1} s: killed",
            limit.as_secs_f64()
        ),
    )
}

/// [`run`], keeping all of stdout.
pub fn output(
    what: &str,
    cmd: &mut Command,
    limit: Duration,
) -> Result<(Finished, Vec<u8>), std::io::Error> {
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let collected = stdout.clone();
    let finished = run(what, cmd, limit, move |chunk| {
        collected.lock().unwrap().extend_from_slice(chunk)
    })?;
    let bytes = std::mem::take(&mut *stdout.lock().unwrap());
    Ok((finished, bytes))
}

/// Run `cmd` with stdout written straight to the file at `path` (created or
/// truncated) and stderr inherited, reporting the file's length to `watch`
/// every millisecond until the child exits, with whether that look found
/// the child gone (its last). `first_byte_at` is the first
/// look that found the file non-empty: a millisecond's resolution, which is
/// what a peer writing into a file (not a pipe the harness reads) allows.
/// A child still running after `limit` is killed and the run is an error
/// naming `what`.
pub fn run_to_file(
    what: &str,
    cmd: &mut Command,
    limit: Duration,
    path: &std::path::Path,
    mut watch: impl FnMut(u64, bool),
) -> Result<Finished, std::io::Error> {
    let file = std::fs::File::create(path)?;
    // Looked at through its own handle (fstat): no path lookup per look.
    let look = file.try_clone()?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(file))
        .stderr(Stdio::inherit())
        .spawn()?;
    let started = Instant::now();
    let mut first_byte_at = None;
    loop {
        // The exit is checked before the length is read, so the look that
        // finds the child gone sees all it wrote.
        let looked = child
            .try_wait()
            .and_then(|exited| Ok((exited, look.metadata()?.len())));
        let (exited, len) = match looked {
            Ok(l) => l,
            Err(e) => {
                // Not left running unwatched.
                end(&mut child);
                return Err(e);
            }
        };
        if len > 0 {
            first_byte_at.get_or_insert_with(Instant::now);
        }
        watch(len, exited.is_some());
        if let Some(status) = exited {
            return Ok(Finished {
                status,
                first_byte_at,
            });
        }
        if started.elapsed() > limit {
            return Err(kill_late(&mut child, what, limit));
        }
        // A measuring interval, not synchronisation: the child's exit is
        // what ends the loop.
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_writing_into_a_file_is_watched_to_its_exit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut looks = Vec::new();
        let f = run_to_file(
            "sh",
            Command::new("sh").args(["-c", "printf abc"]),
            Duration::from_secs(60),
            &path,
            |len, exited| looks.push((len, exited)),
        )
        .unwrap();
        assert!(f.status.success());
        assert!(f.first_byte_at.is_some());
        // The last look, and only it, found the child gone, and saw all of
        // its output; lengths never went back.
        assert_eq!(looks.last(), Some(&(3, true)), "{looks:?}");
        assert_eq!(looks.iter().filter(|(_, e)| *e).count(), 1);
        assert!(looks.windows(2).all(|w| w[0].0 <= w[1].0), "{looks:?}");
        assert_eq!(std::fs::read(&path).unwrap(), b"abc");
    }

    #[test]
    fn a_child_past_its_limit_is_killed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let e = match run_to_file(
            "sleeper",
            Command::new("sleep").arg("600"),
            Duration::from_millis(100),
            &dir.path().join("out"),
            |_, _| {},
        ) {
            Err(e) => e,
            Ok(_) => panic!("a child sleeping 600 s finished within its 100 ms limit"),
        };
        // Killed at its limit, not waited out: a child waited out would
        // have finished, and returned Ok.
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("sleeper"), "{e}");
    }
}

//! Child processes with a deadline: a peer or an archive child that hangs
//! (a broker that stopped answering, a stuck group join) is killed and
//! reported, instead of hanging the whole benchmark.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How a child's stdout arrived.
pub struct Finished {
    pub status: ExitStatus,
    /// When the first byte of stdout was read, if any was.
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
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "{what} was still running after {} s: killed",
                    limit.as_secs()
                ),
            ));
        }
    };
    let _ = reader.join();
    let first_byte_at = match read {
        Ok(r) => r,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
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

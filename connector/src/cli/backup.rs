//! `cairn backup`: a consistent copy of an archive, also of one that a
//! running `cairn run` is writing (it then makes the copy itself, from what
//! is durable when the backup begins, while it goes on archiving).
//!
//! The copy is an archive like any other: `cairn run --data COPY` resumes
//! where the source was when the backup began, and `status`, `export`,
//! `verify` and `restore` read it.

use crate::count::counted;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cairn_engine::{BackupReport, Engine};

use crate::error::{ConnectorError, Result};

/// The exit code of a backup stopped by SIGINT or SIGTERM (128 + SIGINT,
/// as a shell reports it).
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    /// Where to write the copy: a directory that does not exist, or an
    /// empty one no more open to group and others than the archive's.
    #[arg(long, value_name = "DIR")]
    pub to: PathBuf,
}

/// The engine's own checks of the destination, made before the archive is
/// opened (since 2026-12-04; before, a mistyped `--to` was refused only
/// after the open, which may recover the archive and upgrade its format).
/// The engine checks again as it makes the copy, under its lock (another
/// process may fill or make the directory meanwhile).
fn refuse_destination(data: &std::path::Path, to: &std::path::Path) -> Result<()> {
    let refuse = |why: &str| ConnectorError::Config(format!("--to {}: {why}", to.display()));
    let io = |source| ConnectorError::Io {
        path: to.to_owned(),
        source,
    };
    let source = data.canonicalize().ok();
    let outside = |real: &std::path::Path| match &source {
        Some(source) if real.starts_with(source) => Err(refuse(
            "the backup's directory must lie outside the archive's",
        )),
        _ => Ok(()),
    };
    // Its place as named, the link itself if it is one, by the engine's
    // own rule: a COPY named inside DIR is refused even where it links to
    // a directory outside (until 2026-12-05 this check followed the link,
    // passed it, and the archive was opened for a backup the engine then
    // refused).
    if source
        .as_ref()
        .is_some_and(|s| cairn_engine::named_inside(to, s))
    {
        return Err(refuse(
            "the backup's directory must lie outside the archive's",
        ));
    }
    match std::fs::metadata(to) {
        Ok(m) if !m.is_dir() => Err(refuse("not a directory")),
        Ok(m) => {
            outside(&to.canonicalize().map_err(io)?)?;
            if !cairn_engine::empty_but_for_a_lock(to).map_err(io)? {
                return Err(refuse(&cairn_engine::occupied_refusal(to)));
            }
            // The engine's rule, said before the open (until 2026-12-07
            // only the engine said it, after the open, as an i/o error):
            // no more open to group and others than the archive, or the
            // copy's records could be read by users the archive keeps out.
            use std::os::unix::fs::PermissionsExt;
            if let Some(why) = std::fs::metadata(data).ok().and_then(|archive| {
                cairn_engine::mode_refusal(m.permissions().mode(), archive.permissions().mode())
            }) {
                return Err(refuse(&format!("the directory {why}")));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = to.parent().unwrap_or(std::path::Path::new("/"));
            match parent.canonicalize() {
                Ok(p) => outside(&to.file_name().map_or(p.clone(), |n| p.join(n))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(refuse(&format!(
                    "its parent {} does not exist (the backup makes one directory, not the folders above it)",
                    parent.display()
                ))),
                // Said as it is (a path through a file, a link loop, no
                // permission), not as a missing parent.
                Err(e) => Err(io(e)),
            }
        }
        // A dangling link, no permission: the engine says what it finds.
        Err(_) => Ok(()),
    }
}

pub async fn run(args: BackupArgs) -> Result<ExitCode> {
    let data = &args.data.data;
    // Absolute: a running cairn resolves it, from its own directory.
    let to = std::path::absolute(&args.to).map_err(|source| ConnectorError::Io {
        path: args.to.clone(),
        source,
    })?;
    // Said, as `run` says it of `--data` (since 2026-12-06; found by an
    // audit): the copy is synced and verified, and then a reboot takes it
    // (`/tmp` is tmpfs on many systems).
    if let Some(fs) = super::run::memory_backed(&to) {
        super::say_warn!(
            "--to {}: on {fs}, which keeps files in memory only: the backup's fsyncs make nothing durable, and a reboot or power loss takes the copy (put it on a disk)",
            to.display()
        );
    }
    // Before a running archive is asked too (until 2026-12-07 only a
    // stopped archive's backup made them: a running one's engine refused
    // the same mistakes as i/o errors, without the advice; an audit).
    refuse_destination(data, &to)?;
    if let Some(conn) = crate::live::connect(data)? {
        if to.to_str().is_none() {
            return Err(ConnectorError::Config(format!(
                "--to {}: a running cairn is sent paths as UTF-8 (stop it, or choose another path)",
                to.display()
            )));
        }
        let req = crate::live::Request::Backup { to };
        return Ok(crate::live::exit_code(&super::live_report(
            conn, &req, data,
        )??));
    }
    // SIGINT or SIGTERM: give up, removing the partial copy. The handlers
    // are in place before the archive is opened (its recovery can take
    // long), and stay until the command ends: a second signal exits at
    // once (tokio keeps the handlers installed, so without this nothing
    // short of SIGKILL would stop a removal hung on a failing disk).
    let signals = super::run::Signals::for_command()?;
    let stop = Arc::new(AtomicBool::new(false));
    let dest = to.clone();
    // Watching before the open, not after it (until 2026-12-06, an audit):
    // the handlers replace the signals' default, so a signal during a long
    // recovery did nothing until the open was done, and a second one did
    // not exit. One now stops the backup before it writes anything, once
    // the open is done; a second exits at once.
    let signals = signals.stop_then_exit(
        stop.clone(),
        // Said whatever RUST_LOG keeps, as `run`'s.
        || super::say("INFO", &"signal received: stopping the backup and removing what it wrote (again to exit at once)", None),
        move || super::say_warn!(
            "interrupted again: exiting at once; what the backup wrote in {} stays marked unfinished if it was not removed yet",
            dest.display()
        ),
    );
    // On this thread, with the watcher free to run on another; which
    // goes when either fails, as restore's does (an embedder's runtime
    // lives on).
    let opened = tokio::task::block_in_place(|| super::open_unserved(data, super::Access::Read));
    let engine = match opened {
        Ok(engine) => engine,
        Err(e) => {
            signals.abort();
            return Err(e);
        }
    };
    let dest = to.clone();
    let stopped = stop.clone();
    let archive = data.to_path_buf();
    let (engine, done) = tokio::task::spawn_blocking(move || {
        let mut text = Vec::new();
        // A panic reading the archive (sled's, on damage to its own files)
        // is said as export's and prune's are, the engine poisoned (until
        // 2026-12-05 it ended the command as "backup thread: … panicked").
        // The backup removed its partial copy before the panic went on.
        let left = format!(
            "; what the backup wrote in {} was removed, or, where it could not be, stays marked unfinished ({})",
            to.display(),
            cairn_engine::BACKUP_INCOMPLETE_FILE
        );
        let done = super::read_unpanicked("backup", &archive, &engine, &left, || {
            backup(&engine, &to, &stop, &mut text)
        })
        .map(|exit| (exit, text));
        (engine, done)
    })
    .await
    .map_err(|e| {
        signals.abort();
        ConnectorError::Failed(format!("backup thread: {e}"))
    })?;
    // The source is closed however the backup went (a second signal still
    // exits at once meanwhile). Whether it was poisoned before: its close
    // then fails saying so, which is no news beside the backup's error.
    let poisoned = engine.is_poisoned();
    let closed = engine.close();
    signals.abort();
    if let Err(ConnectorError::Engine(cairn_engine::Error::Interrupted { .. })) = &done {
        // The mark stays on a partial copy the backup could not remove.
        // Looked for as the engine's opens do: a mark that cannot be
        // looked for (a failing disk) is not taken for one gone (until
        // 2026-12-05 `exists()` took it so, and said nothing was left).
        let mark = dest.join(cairn_engine::BACKUP_INCOMPLETE_FILE);
        match std::fs::symlink_metadata(&mark) {
            Ok(_) => super::say_warn!(
                "interrupted: the backup stopped, but could not remove what it had written: {} stays marked unfinished; remove what is in it",
                dest.display()
            ),
            // (Also a stop before the backup began, which wrote nothing.)
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                super::say_warn!("interrupted: the backup stopped, and nothing it wrote is left")
            }
            Err(e) => super::say_warn!(
                "interrupted: the backup stopped; whether what it wrote in {} was removed could not be told ({}: {e}): every open refuses the directory while the mark stays",
                dest.display(),
                mark.display()
            ),
        }
        closed?;
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    let (exit, text) = match done {
        Ok(d) => d,
        Err(e) => {
            // The backup's error is the one returned.
            super::log_close_after_failure(poisoned, closed);
            return Err(e);
        }
    };
    // The copy's report first: a source that fails to close does not
    // make a finished, verified copy go unreported; and its close's error
    // (a failed fsync, say) before a failed write of the report.
    let written = super::write_text(&text);
    // A signal the backup did not see in time (it looks at every 256th
    // value copied or verified: a small archive's may see none) stopped
    // nothing: the copy is whole, verified and kept, which the signal's
    // "stopping" log line alone would not say (until the night of
    // 2026-12-04 nothing more was said).
    if stopped.load(std::sync::atomic::Ordering::Acquire) {
        super::say_warn!(
            "interrupted after the backup was complete: {} holds all of it, and was kept{}",
            dest.display(),
            if exit == 0 {
                ""
            } else {
                " (with the problems its verify found, above)"
            }
        );
    }
    if let Err(e) = closed {
        // The copy is made, verified and kept: said, so that the error is
        // not taken for a failed backup, as for a report that could not be
        // written below (until 2026-12-06 it was not; found by an audit).
        super::say_warn!(
            "the backup is complete in {} (its verify's exit: {exit}), but closing the archive it was taken from failed",
            dest.display()
        );
        if let Err(w) = written {
            tracing::error!(error = %w, "the backup's report could not be written either");
        }
        return Err(e.into());
    }
    if let Err(e) = written {
        // The copy is made and kept whatever its report met (a full disk
        // behind a redirect): said, so that the error is not taken for a
        // failed backup (until 2026-12-05 it was not).
        super::say_warn!(
            "the backup is complete in {} (its verify's exit: {exit}), but its report could not be written",
            dest.display()
        );
        return Err(e);
    }
    Ok(ExitCode::from(exit))
}

/// Back `engine` up to `to`, writing the report's lines to `out`: exit 0,
/// or 1 when the copy did not verify clean.
pub(crate) fn backup(
    engine: &Engine,
    to: &Path,
    stop: &AtomicBool,
    out: &mut Vec<u8>,
) -> Result<u8> {
    let r = engine.backup_to(to, stop)?;
    report(to, &r, out);
    Ok(if r.verify.is_clean() { 0 } else { 1 })
}

fn report(to: &Path, r: &BackupReport, out: &mut Vec<u8>) {
    let mut line = super::line_into(out);
    line(format_args!(
        "backed up {} ({}) in {} to {} in {:.2} s: {}, {}, up to lsn {}",
        counted(r.records, "record"),
        counted(r.payload_bytes, "payload byte"),
        counted(r.partitions, "partition"),
        to.display(),
        r.duration.as_secs_f64(),
        counted(r.frames, "log value"),
        counted(r.index_entries, "index entry"),
        r.lsn
    ));
    let v = &r.verify;
    if v.is_clean() {
        line(format_args!(
            "verified the copy: {} in {}, clean",
            counted(v.records, "record"),
            counted(v.entries, "entry")
        ));
        return;
    }
    for p in &v.problems {
        line(format_args!("problem in the copy: {p}"));
    }
    line(format_args!(
        "{} in the copy (the source's own: cairn verify --data on it)",
        counted(v.problem_count(), "problem")
    ));
}

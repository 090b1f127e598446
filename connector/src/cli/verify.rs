//! `cairn verify`: check every frame, index entry and summary.
//!
//! Exit status: 0 clean; 1 damage found (each problem on a `problem:` line,
//! naming where; a backup that did not finish is one), or the check's own
//! last fdatasync of the store failed;
//! 2 the archive could not be checked (no archive there,
//! held by a process that does not serve it, an I/O error, a live verify
//! cut off or refused as busy; also clap's usage errors); 130 a verify of a
//! stopped archive stopped by SIGINT or SIGTERM, nothing judged. An archive
//! a running `cairn run` holds is verified by that run (live.rs).

use crate::count::counted;
use std::process::ExitCode;

use cairn_engine::{verify_store_unless, EngineConfig, Problem, VerifyReport};

use crate::error::Result;

/// `cairn verify` found damage, or its own last fdatasync of a stopped
/// archive failed (a failed fsync stops a command non-zero).
pub const EXIT_DAMAGED: u8 = 1;
/// `cairn verify` could not check the archive at all.
pub const EXIT_NOT_CHECKED: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub data: super::DataArg,
}

pub async fn run(args: VerifyArgs) -> Result<ExitCode> {
    // A report that cannot be written (a full disk behind a redirect) was
    // not seen: to a script that is "not checked", never "damaged".
    Ok(check(args).unwrap_or_else(|e| {
        super::say_stopped(&e);
        ExitCode::from(EXIT_NOT_CHECKED)
    }))
}

fn check(args: VerifyArgs) -> Result<ExitCode> {
    let path = &args.data.data;
    super::refuse_not_a_directory(path)?;
    if let Some(conn) = crate::live::connect(path)? {
        let end = match super::live_report(conn, &crate::live::Request::Verify, path)? {
            Ok(end) => end,
            Err(e) => {
                super::say_stopped(&format_args!("could not verify {}: {e}", path.display()));
                return Ok(ExitCode::from(EXIT_NOT_CHECKED));
            }
        };
        if let Some(e) = end.error {
            super::say_stopped(&format_args!("could not verify {}: {e}", path.display()));
        }
        return Ok(ExitCode::from(end.exit));
    }
    // sled 0.34.7 panics on some damage to its own files (its issues
    // #1155, #1387): never a crash with exit 101, and damage found (exit
    // 1), not "not checked" (until the night of 2026-12-04 exit 2, which a
    // monitor takes as "try again later", and so never raised an alarm for
    // a store no open can read).
    // SIGINT or SIGTERM: the verify stops soon after, lets the store go as
    // a whole verify does (its open mark removed), and says so, exit 130
    // (until 2026-12-06 the signal killed it, and the mark it left read as
    // a crash to the next open in this boot; found by an audit). Again to
    // exit at once.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signals = super::run::Signals::for_command()?.stop_then_exit(
        stop.clone(),
        // Said whatever RUST_LOG keeps, as `run`'s.
        || super::say("INFO", &"signal received: stopping the verify (again to exit at once)", None),
        || super::say("ERROR", &"second signal: exiting at once; the store's open mark stays, and the next open in this boot syncs the store before it trusts it", None),
    );
    // Kept to the command's end: a second signal exits at once while the
    // report is written too (a stalled pipe).
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _signals = Abort(signals);
    let verified =
        std::panic::catch_unwind(|| verify_store_unless(&EngineConfig::new(path), &stop));
    if let Ok(Err(cairn_engine::Error::Interrupted { .. })) = &verified {
        super::say(
            "ERROR",
            &format_args!("interrupted: the verify of {} stopped before it finished, so nothing is judged (not checked)", path.display()),
            None,
        );
        return Ok(ExitCode::from(super::backup::EXIT_INTERRUPTED));
    }
    let verified = match verified {
        Ok(v) => v,
        Err(payload) => {
            let mut text = Vec::new();
            let exit = panicked(&path.display().to_string(), &*payload, &mut text);
            super::write_text(&text)?;
            return Ok(ExitCode::from(exit));
        }
    };
    let r = match verified {
        Ok(r) => r,
        // Damage that keeps the store from opening (sled's own files, the
        // watermark) is a finding like any other, not a failure to check.
        Err(cairn_engine::Error::Corruption { location, kind }) => {
            let mut text = Vec::new();
            let exit = stopped_by_damage(
                &path.display().to_string(),
                "the store does not open",
                Problem { location, kind },
                &mut text,
            );
            super::write_text(&text)?;
            return Ok(ExitCode::from(exit));
        }
        // A backup that did not finish is a finding, exit 1: "not
        // checked" (2, until 2026-12-07) reads to a monitor as "try again",
        // and no later verify would check it either (an audit).
        Err(e @ cairn_engine::Error::IncompleteBackup { .. }) => {
            let mut text = Vec::new();
            let exit = one_problem(
                &mut text,
                format_args!(
                    "checked {}: a backup that did not finish, not an archive",
                    path.display()
                ),
                format_args!("{e}"),
            );
            super::write_text(&text)?;
            return Ok(ExitCode::from(exit));
        }
        // Nothing there: said as the other commands say it (until
        // 2026-12-07 "i/o error during open store on DIR: no cairn store
        // here"; an audit).
        Err(cairn_engine::Error::Io {
            op: "open store",
            source,
            ..
        }) if source.kind() == std::io::ErrorKind::NotFound => {
            super::say_stopped(&format_args!(
                "could not verify {}: --data {}: no cairn archive there",
                path.display(),
                path.display()
            ));
            return Ok(ExitCode::from(EXIT_NOT_CHECKED));
        }
        Err(e) => {
            let e = super::open_failed(e);
            super::say_stopped(&format_args!("could not verify {}: {e}", path.display()));
            return Ok(ExitCode::from(EXIT_NOT_CHECKED));
        }
    };
    let mut text = Vec::new();
    let exit = report(&path.display().to_string(), &r, &mut text);
    super::write_text(&text)?;
    Ok(ExitCode::from(exit))
}

/// What a live verify leaves unchecked, said as a note of its report.
pub(crate) const LIVE_LIMITS: &str = "live: sled's own files and the cairn.durable watermark are not checked while the run holds the archive, and pages sled holds in memory are checked as held there; a verify of the stopped archive checks them on disk";

/// The live answer to `verify` (live.rs): the open engine's verify, which
/// checks the store as it stood when it started while archiving goes on.
/// sled's own files and the watermark are checked by a verify of the
/// stopped archive.
pub(crate) fn serve(
    engine: &cairn_engine::Engine,
    stop: &std::sync::atomic::AtomicBool,
    out: &mut dyn std::io::Write,
) -> Result<u8> {
    // A poisoned engine's verify checks what was written, durable or not
    // (`Engine::verify_unless`): not labelled durable (until 2026-12-07's
    // torture run it was).
    let label = format!(
        "{} (live: {} when the verify started)",
        engine.config().path.display(),
        if engine.is_poisoned() {
            "what was written, durable or not (the engine is poisoned)"
        } else {
            "what was durable"
        }
    );
    let mut text = Vec::new();
    // A panic in sled's reads is damage found, as for the stopped archive
    // (until the night of 2026-12-04 the live one answered exit 2). The
    // engine is poisoned, as the stopped archive's is: what sled left in
    // memory is not to be flushed; the server then stops the run (since
    // the night of 2026-12-04; before, the run went on writing).
    let verified =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.verify_unless(stop)));
    let exit = match verified {
        Err(payload) => {
            engine.poison_after_caught_panic("live verify", cairn_engine::panic_message(&*payload));
            panicked(&label, &*payload, &mut text)
        }
        Ok(Ok(mut r)) => {
            // Said on every live report of a check that ran to its end,
            // "clean" or not: a monitor that reads only the verdict would
            // take it for the stopped archive's, which checks more.
            r.notes.push(LIVE_LIMITS.to_owned());
            report(&label, &r, &mut text)
        }
        // A page of sled's log it could not read: damage, as the verify of
        // the stopped archive reports it, not a failure to check.
        Ok(Err(cairn_engine::Error::Corruption { location, kind })) => stopped_by_damage(
            &label,
            "the check stopped",
            Problem { location, kind },
            &mut text,
        ),
        Ok(Err(e)) => return Err(e.into()),
    };
    out.write_all(&text).map_err(crate::live::socket_error)?;
    Ok(exit)
}

/// The lines of a check that panicked (sled 0.34.7 does on some damage
/// to its own files: its issues #1155, #1387), and the exit code: damage
/// found, never "not checked" (exit 2, which a monitor retries rather than
/// raising an alarm).
fn panicked(label: &str, payload: &(dyn std::any::Any + Send), out: &mut Vec<u8>) -> u8 {
    one_problem(
        out,
        format_args!("verified {label}: the check stopped at a panic"),
        format_args!(
            "sled's own files: the check panicked in them ({}): damage sled does not handle (or a bug); the verify wrote nothing of the archive's",
            cairn_engine::panic_message(payload)
        ),
    )
}

/// A report of one problem, which ended the check: its first line, the
/// problem, the count; and the exit code, damage found.
fn one_problem(
    out: &mut Vec<u8>,
    first: std::fmt::Arguments<'_>,
    problem: std::fmt::Arguments<'_>,
) -> u8 {
    let mut line = super::line_into(out);
    line(first);
    line(format_args!("problem: {problem}"));
    line(format_args!("{}", problems(1)));
    EXIT_DAMAGED
}

/// The lines of a check that damage stopped (`otherwise` says how, when
/// it is not sled failing to read its log), and the exit code.
fn stopped_by_damage(label: &str, otherwise: &str, problem: Problem, out: &mut Vec<u8>) -> u8 {
    let what = match problem.location {
        cairn_engine::Location::SledLog { .. } => {
            "sled could not read a page of its log, and the check stopped there"
        }
        _ => otherwise,
    };
    one_problem(
        out,
        format_args!("verified {label}: {what}"),
        format_args!("{problem}"),
    )
}

/// The report's lines, and the exit code it calls for.
fn report(label: &str, r: &VerifyReport, out: &mut Vec<u8>) -> u8 {
    let mut line = super::line_into(out);
    line(format_args!(
        "verified {label}: {} ({}), {}, {}, {}, {}, {}",
        counted(r.frames, "frame"),
        counted(r.tombstones, "tombstone"),
        counted(r.entries, "entry"),
        counted(r.records, "record"),
        counted(r.payload_bytes, "payload byte"),
        counted(r.index_entries, "index entry"),
        counted(r.partitions, "partition")
    ));
    for n in &r.notes {
        line(format_args!("note: {n}"));
    }
    if r.is_clean() && r.closing_sync_failed.is_none() {
        line(format_args!("clean"));
        return 0;
    }
    for p in &r.problems {
        line(format_args!("problem: {p}"));
    }
    if r.problems_unlisted > 0 {
        line(format_args!(
            "... and {} more problems",
            r.problems_unlisted
        ));
    }
    // A failed fsync stops a command non-zero, this one's too (since
    // 2026-12-05: before, a clean report exited 0 on it). Damage to a
    // monitor, not "not checked" (exit 2), which it would retry for ever
    // on a disk that keeps failing.
    if let Some(e) = &r.closing_sync_failed {
        line(format_args!(
            "problem: {label}: the verify's last flush and fdatasync of the store failed ({e}); never retried: the disk may be failing, and what sled wrote as the verify opened and read the store may not be on it (the check above stands for what was read; the next open re-reads the store from the disk)"
        ));
    }
    let failed_sync = u64::from(r.closing_sync_failed.is_some());
    line(format_args!(
        "{}",
        problems(r.problem_count() + failed_sync)
    ));
    EXIT_DAMAGED
}

/// A report's last line: how many problems it found.
fn problems(n: u64) -> String {
    counted(n, "problem")
}

#[cfg(test)]
mod tests {
    /// A live verify is labelled as what it checked: what was durable, or,
    /// on a poisoned engine (which it checks as written), not so.
    #[test]
    fn a_live_verify_says_what_it_checked() {
        use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        engine
            .append(&[batch(&TopicPartition::new("t", 0), 0..10, 10)])
            .unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let report = |engine: &Engine| {
            let mut out = Vec::new();
            super::serve(engine, &stop, &mut out).unwrap();
            String::from_utf8_lossy(&out).into_owned()
        };
        let healthy = report(&engine);
        assert!(
            healthy.contains("(live: what was durable when the verify started)"),
            "{healthy}"
        );
        engine.poison_after_caught_panic("test", "a test's poisoning");
        let poisoned = report(&engine);
        assert!(
            poisoned.contains("(live: what was written, durable or not (the engine is poisoned) when the verify started)"),
            "{poisoned}"
        );
        assert!(!poisoned.contains("what was durable"), "{poisoned}");
    }
}

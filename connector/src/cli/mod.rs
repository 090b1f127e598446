//! The `cairn` command line.

pub mod backup;
pub mod demo;
pub mod export;
pub mod mock_broker;
pub mod prune;
pub mod restore;
pub mod run;
pub mod status;
pub mod verify;

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// cairn: a durable local Kafka archive. Records are fsynced before their
/// offsets are committed, so nothing is lost or duplicated across crashes.
#[derive(Debug, Parser)]
#[command(name = "cairn", version, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr. Levels come from RUST_LOG (unset:
    /// info,librdkafka=warn; for demo, warn,cairn_engine::poisoned=error).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The binary's `--log-format`, for the lines [`say`] writes (set once, at
/// start; text until then).
pub fn set_log_format(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
}

/// A line for stderr that is no tracing event (what an interrupted command
/// says it left, the error a command stops on): as it is, or under
/// `--log-format json` one JSON line shaped as tracing's, at `level`, with
/// `text` its message, and `error` in a field of its own when given.
/// Written whatever `RUST_LOG` keeps. (Until 2026-12-05 several commands
/// wrote such lines as text under `--log-format json`.)
pub fn say(level: &str, text: &dyn std::fmt::Display, error: Option<&dyn std::fmt::Display>) {
    match LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text) {
        LogFormat::Text => match error {
            Some(e) => stderr_line(&format_args!("error: {e}")),
            None => stderr_line(text),
        },
        LogFormat::Json => {
            let mut fields = serde_json::json!({ "message": text.to_string() });
            if let Some(e) = error {
                fields["error"] = e.to_string().into();
            }
            stderr_line(&json_line(level, fields, "cairn"));
        }
    }
}

/// One line shaped as tracing's JSON lines.
fn json_line(level: &str, fields: serde_json::Value, target: &str) -> serde_json::Value {
    serde_json::json!({
        "timestamp": humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string(),
        "level": level,
        "fields": fields,
        "target": target,
    })
}

/// The `cairn` binary's panic hook. Rust's own prints a panic as text,
/// before any `catch_unwind` that turns it into an error (sled's panics on
/// damage to its own files, which `verify`, `export` and `status` report
/// as errors): under `--log-format json` that broke the promise of JSON
/// on every line of stderr (seen in review, 2026-12-05). So under JSON a
/// panic is one ERROR line ([`panic_line`]); as text, Rust's. Either way,
/// the panic a failing store's own shutdown may raise on the failed disk
/// (sled unwraps its last fsync; after a poisoning, a failed open or a
/// failed backup) is not printed: the engine catches it and logs it in
/// one line, and a backtrace would only alarm.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if cairn_engine::dropping_failing_store() {
            return;
        }
        let format = LOG_FORMAT.get().copied().unwrap_or(LogFormat::Text);
        match panic_line(format, info) {
            Some(line) => stderr_line(&line),
            None => default(info),
        }
    }));
}

/// A panic as the log's `format` writes it: `None` for text (Rust's own
/// lines); under JSON one ERROR line, target `panic`, whose message says
/// where it panicked and why, with the thread's name and, when
/// `RUST_BACKTRACE` asks for one, the backtrace.
pub fn panic_line(
    format: LogFormat,
    info: &std::panic::PanicHookInfo<'_>,
) -> Option<serde_json::Value> {
    if format != LogFormat::Json {
        return None;
    }
    let why = cairn_engine::panic_message(info.payload());
    let message = match info.location() {
        Some(at) => format!("panicked at {at}: {why}"),
        None => format!("panicked: {why}"),
    };
    let mut fields = serde_json::json!({
        "message": message,
        "thread": std::thread::current().name().unwrap_or("<unnamed>"),
    });
    let trace = std::backtrace::Backtrace::capture();
    if trace.status() == std::backtrace::BacktraceStatus::Captured {
        fields["backtrace"] = trace.to_string().into();
    }
    Some(json_line("ERROR", fields, "panic"))
}

/// One line to stderr, whatever becomes of it: a stderr that cannot be
/// written (a full disk behind it, a pipe whose reader is gone) loses the
/// line but must not change the exit code. `eprintln!` panics then, and
/// the process exited 101 in place of the 1 or 2 the line was about (seen
/// in review, 2026-12-05).
pub fn stderr_line(line: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// [`say`] at WARN, taking its arguments as `format!` does.
macro_rules! say_warn {
    ($($t:tt)*) => {
        $crate::cli::say("WARN", &format_args!($($t)*), None)
    };
}
pub(crate) use say_warn;

/// A size bound for retention below the size the engine cuts entries at
/// (`EngineConfig::entry_bytes_target`, 1 MiB by default): deletion is by
/// whole entries, and a partition whose newest entry alone is larger than
/// the bound is emptied by every pass, its newest records included
/// (documented, and until 2026-12-06 said nowhere else; found by an audit).
///
/// `record_bytes_max` is the largest record the run archives, when known
/// (`cairn run`; `prune` cannot know what earlier runs took): an entry holds
/// up to about the target plus its last record, so a bound below their sum
/// is said too, naming `--record-bytes-max` (until 2026-12-07 only a bound
/// below the target was, and one large record emptied its partition at
/// every pass without a word).
pub(crate) fn warn_if_below_an_entry(
    flag: &str,
    bytes: u64,
    record_bytes_max: Option<u64>,
    said: &str,
) {
    let entry = cairn_engine::EngineConfig::new("").entry_bytes_target as u64;
    if bytes < entry {
        say_warn!(
            "{flag} {bytes}B{said}: entries (a put's records of one partition) are cut once they reach about {} MiB, so one holds up to about that plus its last record, and retention deletes whole entries: a partition whose newest entry holds more than this bound is emptied at every pass, its newest records included",
            entry >> 20
        );
    } else if let Some(record) = record_bytes_max.filter(|&r| bytes < entry.saturating_add(r)) {
        say_warn!(
            "{flag} {bytes}B{said}: entries (a put's records of one partition) are cut once they reach about {} MiB, so one holds up to about that plus its last record, which may be up to --record-bytes-max ({record}B), and retention deletes whole entries: a partition whose newest entry holds more than this bound is emptied at every pass, its newest records included (a bound of at least {}B, or a lower --record-bytes-max, keeps every newest entry)",
            entry >> 20,
            entry.saturating_add(record)
        );
    }
}

/// The error a command stops on: `error: …` as text, or a JSON ERROR line
/// `cairn stopped` with the error in its `error` field ([`say`]).
pub fn say_stopped(e: &dyn std::fmt::Display) {
    say("ERROR", &"cairn stopped", Some(e));
}

/// The command line as a refusal of it may quote it: `None` when it sets
/// no credential; else `args` with each credential's value (`-X
/// sasl.password=…`, `-Xsasl.password=…`) and every word after it up to
/// the next of cairn's own flags replaced. A value the shell split at a
/// space (an unquoted `$PW`) leaves its rest as a word of its own, which
/// clap refuses as an unexpected argument by quoting it (seen in review,
/// 2026-12-05); a piece that starts with `-` is such a word too, unless it
/// is one of cairn's flags (until the second review of 2026-12-05 any word
/// starting with `-` ended the hiding).
pub fn shown_command_line(args: &[std::ffi::OsString]) -> Option<Vec<std::ffi::OsString>> {
    const HIDDEN: &str = "<not shown>";
    /// `kv` as shown if any of it names a credential: `key=<not shown>`,
    /// its key kept (empty in `=sasl.password=x`, shown whole until
    /// 2026-12-07; found by an audit), so that the line shown still parses
    /// as the given one did and clap's error stays the given line's (a
    /// version that hid such a `-X` whole had clap refuse it, not the flag
    /// at fault; found in review the same day). A bare word naming one is
    /// hidden whole.
    fn credential_shown(kv: &str) -> Option<String> {
        if !crate::librdkafka::names_a_credential(kv) {
            return None;
        }
        Some(match kv.split_once('=') {
            Some((key, _)) => format!("{key}={HIDDEN}"),
            None => HIDDEN.to_owned(),
        })
    }
    let mut shown = Vec::with_capacity(args.len());
    let (mut hid, mut after_secret) = (false, false);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        // `-X k=v`, `-Xk=v` or `-X=k=v`: the flag given apart, what comes
        // before the property in the same word, and the property.
        let (flag, before, kv) = match a.as_ref() {
            "-X" => (
                "-X",
                String::new(),
                args.get(i + 1).map(|v| v.to_string_lossy().into_owned()),
            ),
            x if x.starts_with("-X") => {
                let kv = x["-X".len()..].trim_start_matches('=');
                ("", x[..x.len() - kv.len()].to_owned(), Some(kv.to_owned()))
            }
            _ => ("", String::new(), None),
        };
        match kv.as_deref().and_then(credential_shown) {
            Some(kv) => {
                if !flag.is_empty() {
                    shown.push(flag.into());
                    i += 1;
                }
                shown.push(format!("{before}{kv}").into());
                (hid, after_secret) = (true, true);
            }
            _ if after_secret && !is_cairn_flag(&a) => {
                shown.push(HIDDEN.into());
                hid = true;
            }
            _ => {
                after_secret = false;
                shown.push(args[i].clone());
            }
        }
        i += 1;
    }
    hid.then_some(shown)
}

/// Whether `word` is one of the flags of cairn's command line, as a word of
/// its own (`--brokers`, `--brokers=b:1`, `-t`, `-X…`, or `--`).
fn is_cairn_flag(word: &str) -> bool {
    use clap::CommandFactory;
    if word == "--" || word.starts_with("-X") {
        return true;
    }
    let cmd = Cli::command();
    let mut args = cmd.get_arguments().collect::<Vec<_>>();
    for sub in cmd.get_subcommands() {
        args.extend(sub.get_arguments());
    }
    let long = word
        .strip_prefix("--")
        .map(|w| w.split_once('=').map_or(w, |(name, _)| name));
    let short = word
        .strip_prefix('-')
        .filter(|w| !w.starts_with('-'))
        .and_then(|w| {
            let mut c = w.chars();
            c.next().filter(|_| c.next().is_none())
        });
    args.iter().any(|a| {
        long.is_some_and(|l| {
            a.get_long() == Some(l) || a.get_all_aliases().is_some_and(|al| al.contains(&l))
        }) || short.is_some_and(|c| a.get_short() == Some(c))
    }) || matches!(long, Some("help" | "version"))
        || matches!(short, Some('h' | 'V'))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Archive Kafka topics durably into a local directory.
    // Boxed: the largest of the commands' arguments by far.
    Run(Box<run::RunArgs>),
    /// Archive, crash, recover, verify and restore on an embedded Kafka (no broker needed).
    Demo(demo::DemoArgs),
    /// Start librdkafka's in-process mock Kafka cluster until SIGINT/SIGTERM.
    MockBroker(mock_broker::MockBrokerArgs),
    /// Show what the archive holds per partition (and Kafka's view, with --brokers).
    #[command(
        after_help = "Exit status: 0 every figure printed; 1 an error, said on stderr (nothing printed: the archive could not be read, a refused setting), or the figures printed, but something needs a look, said on stderr (Kafka's view could not be read, damaged index entries the open rebuilt, a damaged topic id or summary); 2 a usage error, a running cairn run refused the request, or another command holds the stopped archive (docs/OPERATIONS.md, \"Exit codes\")."
    )]
    Status(status::StatusArgs),
    /// Stream archived records out as JSON lines or raw values.
    Export(export::ExportArgs),
    /// Re-read and check every frame, index entry and summary of an archive (a running archive's: what the run can check, which it says).
    #[command(
        after_help = "Exit status: 0 clean; 1 damage found (each problem on a `problem:` line, naming where), or the check's own last fdatasync failed; 2 not checked (no archive there, held by a process that does not serve it, an I/O error before any problem was found, a live verify cut off or refused as busy; also usage errors); 130 a verify of a stopped archive stopped by SIGINT or SIGTERM, nothing judged."
    )]
    Verify(verify::VerifyArgs),
    /// Produce archived records back into Kafka: same partitions, keys, values, headers and timestamps (as create time; see docs/OPERATIONS.md).
    Restore(restore::RestoreArgs),
    /// Delete archived records below an offset, a time or an age, per partition, or the oldest beyond a size.
    Prune(prune::PruneArgs),
    /// Copy an archive consistently, also one a `cairn run` is archiving into.
    Backup(backup::BackupArgs),
}

/// Arguments shared by the commands that read an archive.
#[derive(Debug, clap::Args)]
pub struct DataArg {
    /// The archive's data directory. A running `cairn run` there answers
    /// `status`, `export`, `verify`, `prune` and `backup` through its
    /// socket (`restore` needs it stopped); a stopped archive is opened, its lock held
    /// meanwhile, and (but by `verify`) recovered after a crash and
    /// upgraded from an older format, which an older cairn then no longer
    /// opens, as a run opens it: it needs write access (docs/OPERATIONS.md,
    /// "What reading writes").
    #[arg(long, value_name = "DIR")]
    pub data: PathBuf,
}

/// Which archived records `export` and `restore` take.
#[derive(Debug, clap::Args)]
pub struct SelectArgs {
    /// Only these archived topics, comma-separated (default: all).
    #[arg(long, short = 't', visible_alias = "topics", value_delimiter = ',')]
    pub topic: Vec<String>,
    /// Only this partition.
    #[arg(value_parser = crate::config::whole::<i32>, long, allow_negative_numbers = true)]
    pub partition: Option<i32>,
    /// First archived offset to take (inclusive).
    #[arg(value_parser = crate::config::whole::<i64>,
        long,
        default_value_t = 0,
        allow_negative_numbers = true,
        value_name = "OFFSET"
    )]
    pub from: i64,
    /// Stop before this archived offset (exclusive).
    #[arg(value_parser = crate::config::whole::<i64>, long, allow_negative_numbers = true, value_name = "OFFSET")]
    pub to: Option<i64>,
}

impl SelectArgs {
    pub fn into_selection(self) -> crate::selection::Selection {
        crate::selection::Selection {
            topics: self.topic,
            partition: self.partition,
            from: self.from,
            to: self.to,
        }
    }
}

/// The `-X` flags as settings, refusing one name given twice with two
/// values: the last would win without a word, where one property under two
/// names is refused (`librdkafka::refuse_two_names`). Two values are two
/// texts: `librdkafka::same_value`, which reads `1` as `true` and `01` as
/// `1`, is for cairn's own booleans and numbers, and would pass a string
/// property (a password `0123`, then `123`) given twice (until the night
/// of 2026-12-04 it did).
pub(crate) fn kafka_flags(flags: Vec<(String, String)>) -> crate::Result<BTreeMap<String, String>> {
    let mut settings: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in flags {
        if let Some(prev) = settings.get(&k) {
            if v != *prev {
                return Err(crate::ConnectorError::Config(format!(
                    "-X {} and -X {}: one property given twice with two values; give it once",
                    crate::librdkafka::shown(&k, prev),
                    crate::librdkafka::shown(&k, &v)
                )));
            }
        }
        settings.insert(k, v);
    }
    Ok(settings)
}

/// Whether `dir` holds an archive (not an empty or new folder); an error
/// if it cannot be looked at.
pub fn holds_archive(dir: &std::path::Path) -> crate::Result<bool> {
    Ok(cairn_engine::EngineConfig::new(dir).store_exists()?)
}

/// Refuse a `--data` that is there but no directory (a file, or a link to
/// one): an archive is a directory. Until 2026-12-05 a file got the
/// watermark's read error ("i/o error during read watermark on
/// FILE/cairn.durable: Not a directory"), which names the path but not
/// what is wrong.
pub(crate) fn refuse_not_a_directory(data: &std::path::Path) -> crate::Result<()> {
    match std::fs::metadata(data) {
        Ok(m) if !m.is_dir() => Err(crate::ConnectorError::Config(format!(
            "--data {}: not a directory, so no cairn archive (an archive is the directory `cairn run --data` was given)",
            data.display()
        ))),
        // Missing, or unreadable: said where it is read.
        _ => Ok(()),
    }
}

/// What a command does to the archive it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads it only: a damaged segment header is said, not refused.
    Read,
    /// Writes it (a prune): a damaged segment header refuses the open, as
    /// `run`'s, since what is written there would be lost.
    Write,
}

/// Open an archive, with a clear message when it is in use. Opened to
/// read, a damaged header of one of sled's log segments is said, and the
/// engine refuses writes of records
/// ([`cairn_engine::EngineConfig::open_to_read`]): the records are still
/// there to export or back up.
fn open_archive(data: &std::path::Path, access: Access) -> crate::Result<cairn_engine::Engine> {
    refuse_no_archive(data)?;
    let engine = cairn_engine::Engine::open(
        cairn_engine::EngineConfig::new(data).open_to_read(access == Access::Read),
    )?;
    say_repaired(data, engine.recovery_report());
    Ok(engine)
}

/// [`open_archive`]'s checks before it opens anything: `data` is a
/// directory that holds an archive (not one a killed backup left, nor one
/// that lost its data file). Cheap, and opens nothing: a command that asks
/// Kafka first says a wrong `--data` before that wait.
pub(crate) fn refuse_no_archive(data: &std::path::Path) -> crate::Result<()> {
    refuse_not_a_directory(data)?;
    // Before "no archive there": a backup killed before sled wrote its
    // files has the mark and nothing else.
    cairn_engine::refuse_unfinished_backup(data)?;
    // A store that lost its data file is damaged, not absent.
    cairn_engine::watermark::refuse_lost_store(&cairn_engine::EngineConfig::new(data))?;
    if !holds_archive(data)? {
        return Err(crate::ConnectorError::Config(format!(
            "--data {}: no cairn archive there",
            data.display()
        )));
    }
    Ok(())
}

/// A failed command's archive closed (`closed`) beside its error: a
/// close that failed is logged, not dropped unheard, unless the engine was
/// poisoned before it (`poisoned_before`: by the failure, a read that
/// panicked or a pass-over that failed), whose close only says so again.
pub(crate) fn log_close_after_failure(poisoned_before: bool, closed: cairn_engine::Result<()>) {
    if let (false, Err(c)) = (poisoned_before, closed) {
        tracing::error!(error = %c, "closing the archive failed too");
    }
}

/// Say, whatever `RUST_LOG` keeps, that the open found damaged index
/// entries and rebuilt them: once rebuilt, no later command (`verify`
/// included) finds them, so a command that only reads would otherwise
/// erase the evidence of a failing disk behind a WARN a filter can drop
/// (until 2026-12-06; found by an audit of `status`, which also exits 1
/// for it).
pub(crate) fn say_repaired(data: &std::path::Path, r: &cairn_engine::RecoveryReport) {
    // Read as the archive opened, opened only to read: the records are
    // all there, but a later open could lose a segment's (segments.rs).
    for d in &r.damaged_segment_headers {
        let (location, kind) = d.located(cairn_engine::EngineConfig::new(data).sled_data_path());
        let e = cairn_engine::Error::corruption(location, kind);
        say_warn!("{e} (`cairn run` and a `cairn prune` that deletes refuse this archive: run from the copy)");
    }
    let n = r.index_entries_damaged;
    if n > 0 {
        say_warn!(
            "{}: the archive's open found {n} index {} damaged (not matching the log's checksummed frames, which no crash leaves) and rebuilt {} from those frames: no record was lost, but the disk under the archive may be failing (check its health); a later verify will not find {}, rebuilt",
            data.display(),
            if n == 1 { "entry" } else { "entries" },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "it" } else { "them" },
        );
    }
}

/// [`open_archive`], for a command that a running cairn answers when its
/// socket does not: a lock held also says when to try again.
///
/// sled 0.34.7 panics on some damage to its own files (its issues #1155,
/// #1387): such an open is an error naming the archive, as `verify`'s is,
/// not a crash with exit 101.
pub(crate) fn open_unserved(
    data: &std::path::Path,
    access: Access,
) -> crate::Result<cairn_engine::Engine> {
    open_stopped(data, access, Opener::Served)
}

/// [`open_unserved`] for the command `opener`, whose advice for a lock
/// held differs (a restore, which a run does not serve).
pub(crate) fn open_stopped(
    data: &std::path::Path,
    access: Access,
    opener: Opener,
) -> crate::Result<cairn_engine::Engine> {
    unpanicked(data, || open_archive(data, access)).map_err(|e| match e {
        crate::ConnectorError::Engine(e) => open_failed_for(e, opener),
        e => e,
    })
}

/// `open`, an open of the archive at `data`, with a panic in it (sled's,
/// on some damage to its own files) made an error naming the archive.
pub(crate) fn unpanicked<T>(
    data: &std::path::Path,
    open: impl FnOnce() -> crate::Result<T>,
) -> crate::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(open)).map_err(|payload| {
        crate::ConnectorError::OpenPanicked {
            path: data.to_path_buf(),
            detail: cairn_engine::panic_message(&*payload).to_string(),
        }
    })?
}

/// Run `work` on `engine`, the stopped archive at `data`, a panic in it
/// (sled's, on damage to its own files past the open) returned as
/// [`ReadPanicked`](crate::ConnectorError::ReadPanicked) with `output`
/// (since the night of 2026-12-04; before, the command crashed, exit 101).
/// The engine is poisoned then: its drop does not flush what sled may have
/// left half-changed.
pub(crate) fn read_unpanicked<T>(
    command: &'static str,
    data: &std::path::Path,
    engine: &cairn_engine::Engine,
    output: &str,
    work: impl FnOnce() -> crate::Result<T>,
) -> crate::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|payload| {
        let detail = cairn_engine::panic_message(&*payload).to_string();
        engine.poison_after_caught_panic(command, &detail);
        crate::ConnectorError::ReadPanicked {
            command,
            path: data.to_path_buf(),
            detail,
            output: output.to_owned(),
        }
    })?
}

/// Why an archive did not open, as a command that a running cairn answers
/// says it (see [`open_unserved`]): a lock's holder is named with its cairn
/// command where it is one, and the advice fits it. (Until 2026-12-07 every
/// holder got the advice for a run still starting, an export reading the
/// stopped archive included; found by an audit.)
pub(crate) fn open_failed(e: cairn_engine::Error) -> crate::ConnectorError {
    open_failed_for(e, Opener::Served)
}

/// The command whose open of a stopped archive a lock refused: the advice
/// differs for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opener {
    /// One a running cairn serves (status, export, verify, prune, backup):
    /// a run holding the archive is waited for.
    Served,
    /// `restore`, which a run does not serve: a run is to be stopped.
    Restore,
    /// `run`: exit 1, as its errors are (until 2026-12-07 it named only
    /// the pid; found by an audit): a run given to a supervisor is
    /// restarted on it, and starts once the holder has finished.
    Run,
}

/// The cairn command a lock's `holder` ("pid N") runs, if it is one.
fn holder_command(holder: &str) -> Option<String> {
    holder
        .strip_prefix("pid ")
        .and_then(|pid| pid.parse::<u32>().ok())
        .and_then(cairn_command_of)
}

/// [`open_failed`] for the command `opener`: a lock's holder is named with
/// its cairn command where it is one, and the advice fits both. Other
/// errors as they are.
pub(crate) fn open_failed_for(e: cairn_engine::Error, opener: Opener) -> crate::ConnectorError {
    let cairn_engine::Error::Locked { path, holder } = e else {
        return e.into();
    };
    let command = holder_command(&holder);
    let named = |c: &str| format!("{holder} (cairn {c})");
    let (holder, advice) = match (command.as_deref(), opener) {
        (Some("run"), Opener::Restore) => (
            named("run"),
            "a restore opens the archive itself: stop the run first (SIGINT or SIGTERM; it stops cleanly), then restore",
        ),
        (Some("run"), Opener::Run) => (
            named("run"),
            "another run is starting on this archive: give this one an archive of its own",
        ),
        (Some("run"), Opener::Served) => (named("run"), LOCKED_BY_A_RUN_STARTING),
        (Some(c), Opener::Run) => (
            named(c),
            "a stopped archive is opened by one command at a time: start the run once that one has finished",
        ),
        (Some(c), _) => (
            named(c),
            "a stopped archive is opened by one command at a time: try again once that one has finished (a cairn run, once started, answers status, export, verify, prune and backup beside it)",
        ),
        (None, Opener::Restore) => (holder, "stop that process first (a cairn run stops cleanly on SIGINT or SIGTERM; another command, once it has finished)"),
        (None, Opener::Run) => (holder, "stop that process first"),
        (None, Opener::Served) => (holder, LOCKED_BY_A_RUN_STARTING),
    };
    match opener {
        Opener::Run => crate::ConnectorError::Config(format!(
            "store {} is locked by {holder}: {advice}",
            path.display()
        )),
        Opener::Served | Opener::Restore => crate::ConnectorError::ArchiveLocked {
            path,
            holder,
            advice: advice.to_owned(),
        },
    }
}

/// The cairn command process `pid` runs (`run`, `export`, …), as its
/// command line says: `None` for a process that is not a `cairn` binary,
/// or one whose command line cannot be read (gone, another user's under
/// `hidepid`).
pub(crate) fn cairn_command_of(pid: u32) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let mut args = cmdline.split(|&b| b == 0);
    let exe = std::path::Path::new(std::ffi::OsStr::from_bytes(args.next()?));
    // By its name, or (a link or copy under another name) by being this
    // very binary.
    let same_binary = || {
        let theirs = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
        theirs.is_some() && theirs == std::env::current_exe().ok()
    };
    if exe.file_name() != Some(std::ffi::OsStr::new("cairn")) && !same_binary() {
        return None;
    }
    // The first word that names a command: `--log-format json` may come first.
    const COMMANDS: [&str; 9] = [
        "run",
        "demo",
        "mock-broker",
        "status",
        "export",
        "verify",
        "restore",
        "prune",
        "backup",
    ];
    args.filter_map(|a| std::str::from_utf8(a).ok())
        .find(|a| COMMANDS.contains(a))
        .map(str::to_owned)
}

/// Said of an archive found locked by a command that a running cairn
/// answers: the run's socket opens only once it has started.
pub const LOCKED_BY_A_RUN_STARTING: &str = "a cairn run answers status, export, verify, prune and backup on its socket once it has started (recovery, or a first --retain pass over a large archive, can take minutes), so try again then; a run that logged 'cannot serve the live archive' or 'live reads are off' (a file system that makes no socket files, say) serves no reads until it stops; any other holder (a restore, a command reading the stopped archive) must finish first";

/// Write one line to stdout. A reader that went away (`cairn status | head`)
/// is not an error: the rest of the output is dropped quietly, where
/// `println!` would panic with a backtrace. Any other write error (a full
/// disk behind a redirect) is returned, naming stdout.
pub(crate) fn write_line(args: std::fmt::Arguments<'_>) -> crate::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    stdout_written(out.write_fmt(args).and_then(|()| out.write_all(b"\n")))
}

/// A writer of report lines into `out` (sent to stdout, or through a
/// running cairn's socket, once complete).
pub(crate) fn line_into(out: &mut Vec<u8>) -> impl FnMut(std::fmt::Arguments<'_>) + '_ {
    use std::io::Write;
    move |args| {
        out.write_fmt(args).expect("writing to a Vec");
        out.push(b'\n');
    }
}

/// Ask the running cairn at `conn` for `req`, and show its answer on
/// stdout as it arrives, however the request ends: a prune's line for each
/// partition once that partition is done, as a local prune prints them,
/// so that an interrupted one has shown what it deleted. The outer error is
/// stdout's at the last flush; the inner one is the request's, including a
/// write to stdout that failed while the answer arrived. A request that
/// writes (a prune, a backup) goes with the proof that this process may
/// write the archive at `data` (`live::write_proof`), or not at all.
pub(crate) fn live_report(
    conn: std::os::unix::net::UnixStream,
    req: &crate::live::Request,
    data: &std::path::Path,
) -> crate::Result<crate::Result<crate::live::End>> {
    use std::io::Write;
    // A closed pipe is a reader gone only where stdout can be one: a
    // regular file answering EPIPE has failed (until 2026-12-06 the live
    // answer's report, cut short into such a file, exited quietly; found
    // in review).
    let mut out = PipeOnlyIfSpecial {
        inner: std::io::stdout().lock(),
        special: !is_regular_file(std::io::stdout()),
    };
    let stdout = std::path::Path::new("<stdout>");
    let end = crate::live::request_for(data, conn, req, &mut out, stdout);
    stdout_written(out.flush())?;
    Ok(end)
}

/// `inner`, whose EPIPE is a reader gone only when `special` (stdout not
/// a regular file): [`pipe_only_if_special`] on every write.
struct PipeOnlyIfSpecial<W> {
    inner: W,
    special: bool,
}

impl<W: std::io::Write> std::io::Write for PipeOnlyIfSpecial<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner
            .write(buf)
            .map_err(|e| pipe_only_if_special(e, self.special))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner
            .flush()
            .map_err(|e| pipe_only_if_special(e, self.special))
    }
}

/// A write to stdout's result, where a reader that went away is not an
/// error: a closed pipe, where stdout can be one (not a regular file, which
/// answering EPIPE has failed: `status --json > F` on a FUSE or network file
/// system exited 0 with F cut short until 2026-12-06, as an export did
/// until 2026-12-05; found in review).
fn stdout_written(written: std::io::Result<()>) -> crate::Result<()> {
    written_to_stdout(written, || is_regular_file(std::io::stdout()))
}

/// [`stdout_written`], asking `regular` whether stdout is a regular file
/// only when a write met a closed pipe.
fn written_to_stdout(
    written: std::io::Result<()>,
    regular: impl FnOnce() -> bool,
) -> crate::Result<()> {
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && !regular() => Ok(()),
        Err(e) => Err(crate::ConnectorError::Io {
            path: PathBuf::from("<stdout>"),
            source: pipe_only_if_special(e, false),
        }),
    }
}

/// Whether `fd` is a regular file (one whose `fstat` fails is taken for
/// something else: a closed pipe there stays a reader gone).
pub(crate) fn is_regular_file(fd: impl std::os::fd::AsFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
    })
}

/// A closed pipe ends an export quietly, with exit 0, only where the output
/// can be one: stdout, or a special file (a FIFO). A regular file that
/// answers EPIPE (a FUSE or network file system can) has failed like any
/// other: until 2026-12-05 that too read as a reader gone, the export
/// exited 0, and a live export's staged file, cut short, was put in place
/// as if whole (seen in review).
pub(crate) fn pipe_only_if_special(e: std::io::Error, special: bool) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe && !special {
        std::io::Error::other(format!("{e}, from a regular file"))
    } else {
        e
    }
}

/// Write `text` to stdout as [`write_line`] writes a line: a reader that
/// went away is not an error.
pub(crate) fn write_text(text: &[u8]) -> crate::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    stdout_written(out.write_all(text).and_then(|()| out.flush()))
}

/// `println!` for the commands: see [`write_line`]. Evaluates to a
/// `Result` for `?`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

#[cfg(test)]
mod tests {
    /// A closed pipe on stdout is a reader gone (exit 0) unless stdout is
    /// a regular file, which answering EPIPE has failed; any other error
    /// fails either way.
    #[test]
    fn epipe_on_stdout_is_quiet_only_where_stdout_can_be_a_pipe() {
        use std::io::{Error, ErrorKind};
        let pipe = || Err(Error::from(ErrorKind::BrokenPipe));
        assert!(super::written_to_stdout(pipe(), || false).is_ok());
        let err = super::written_to_stdout(pipe(), || true).unwrap_err();
        assert!(err.to_string().contains("from a regular file"), "{err}");
        let full = || Err(Error::from_raw_os_error(28));
        assert!(super::written_to_stdout(full(), || false).is_err());
        assert!(super::written_to_stdout(full(), || true).is_err());
        assert!(super::written_to_stdout(Ok(()), || panic!("not asked")).is_ok());
        // The live answers' writer: the same rule, write by write.
        struct Closed;
        impl std::io::Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        use std::io::Write;
        let kind = |special| {
            let mut w = super::PipeOnlyIfSpecial {
                inner: Closed,
                special,
            };
            w.write(b"x").unwrap_err().kind()
        };
        assert_eq!(kind(true), ErrorKind::BrokenPipe);
        assert_eq!(kind(false), ErrorKind::Other);
    }

    /// A credential's value, and what the shell split off it, are never
    /// quoted; nor are the words of a command line that sets none changed.
    #[test]
    fn a_credential_on_the_command_line_is_not_shown() {
        let line = |s: &str| -> Vec<std::ffi::OsString> { s.split(' ').map(Into::into).collect() };
        let shown = |s: &str| {
            super::shown_command_line(&line(s)).map(|v| {
                v.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
        };
        assert_eq!(
            shown("cairn run -X sasl.password=hunter2 part2 --brokers b:1 x"),
            Some("cairn run -X sasl.password=<not shown> <not shown> --brokers b:1 x".into())
        );
        assert_eq!(
            shown("cairn run -Xsasl.jaas.secret=a b -X acks=all"),
            Some("cairn run -Xsasl.jaas.secret=<not shown> <not shown> -X acks=all".into())
        );
        assert_eq!(
            shown("cairn run -X=sasl.password=a b"),
            Some("cairn run -X=sasl.password=<not shown> <not shown>".into())
        );
        // A piece of the secret that starts with `-` is hidden too, up to
        // one of cairn's own flags.
        assert_eq!(
            shown("cairn run -X sasl.password=abc -xyz --oops --brokers b:1 -t t --data=d"),
            Some("cairn run -X sasl.password=<not shown> <not shown> <not shown> --brokers b:1 -t t --data=d".into())
        );
        assert_eq!(shown("cairn run -X acks=all stray --brokers b:1"), None);
        assert_eq!(shown("cairn run -X"), None);
    }

    /// One `-X` name given twice with two values is refused, and a
    /// credential's values are not in the message.
    #[test]
    fn a_credential_given_twice_is_refused_unshown() {
        let flags = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let e = super::kafka_flags(flags(&[
            ("sasl.password", "old-hunter2"),
            ("sasl.password", "new-hunter2"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(e.contains("one property given twice"), "{e}");
        let e = crate::config::parse_kv("sasl.password:hunter2").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        // In any letter case (until 2026-12-06 only lower case was hidden).
        let e = super::kafka_flags(flags(&[
            ("SASL.PASSWORD", "old-hunter2"),
            ("SASL.PASSWORD", "new-hunter2"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let e = crate::config::parse_kv("SASL.PASSWORD:hunter2").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
        assert!(super::kafka_flags(flags(&[("linger.ms", "5"), ("linger.ms", "5")])).is_ok());
        // Two texts are two values, even where a number or a boolean would
        // read the same: a string property's are not the same.
        for (a, b) in [("0123", "123"), ("1", "true")] {
            let e = super::kafka_flags(flags(&[("ssl.key.password", a), ("ssl.key.password", b)]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("one property given twice"), "{e}");
        }
    }
}

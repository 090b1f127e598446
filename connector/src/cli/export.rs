//! `cairn export`: stream archived records out, losslessly.
//!
//! jsonl: one object per record, `{"topic","partition","offset","timestamp",
//! "timestamp_type","key","value","headers"}`; key and value are standard
//! padded base64 or null; headers are `[name, base64-or-null]` pairs.
//! jsonl-text: the same, with key, value and header values as JSON strings
//! (to read, or for `jq`); a byte string that is not UTF-8 stops the export
//! naming its record, rather than be written altered.
//! raw: the values, newline-delimited, like `kcat -C`.

use crate::count::counted;
use std::borrow::Cow;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cairn_engine::{Record, TimestampType, TopicPartition};
use serde::Serialize;

use crate::selection::Selection;

use crate::error::{ConnectorError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// JSON lines; key, value and header values in base64 (lossless).
    Jsonl,
    /// JSON lines; key, value and header values as text (UTF-8 only).
    JsonlText,
    /// The values, one per line (lossy).
    Raw,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    #[command(flatten)]
    pub select: super::SelectArgs,
    /// Only records with a timestamp at or after this time: RFC 3339 with
    /// its zone (`2026-11-01T00:00:00Z`) or milliseconds since the Unix
    /// epoch. Timestamps need not rise with offsets, so every record of the
    /// offset range is read; one without a timestamp is left out.
    #[arg(long, value_name = "TIME", value_parser = parse_from_time, allow_negative_numbers = true)]
    pub from_time: Option<i64>,
    /// Only records with a timestamp before this time (as --from-time).
    #[arg(long, value_name = "TIME", value_parser = parse_to_time, allow_negative_numbers = true)]
    pub to_time: Option<i64>,
    /// How each record is written.
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// Write here instead of stdout (`-`, `/dev/stdout`, `/dev/fd/1` and
    /// `/proc/self/fd/1` are stdout itself, so that `>>` appends). An
    /// existing file is replaced only once the export is complete: a failed
    /// or interrupted export leaves it as it was (in a directory that takes
    /// no new files it is written in place, and emptied if the export fails
    /// after its first 1 MiB).
    #[arg(long)]
    pub output: Option<PathBuf>,
}

/// A number below 1973's milliseconds is taken for a unit slip, whichever
/// end it bounds: records stamped so early are rare (a producer that sets
/// its own), and are reached with the RFC 3339 form. Until 2026-12-07 the
/// message said such a bound would leave out every record (or none),
/// which is not so of an archive that holds such records (an audit).
const EARLY: &str = "taken for a unit slip (to bound records stamped before 1973, give the time in RFC 3339: 1970-01-01T00:00:01Z)";

fn parse_from_time(s: &str) -> std::result::Result<i64, String> {
    dated(super::prune::time_ms(s, EARLY)?)
}

fn parse_to_time(s: &str) -> std::result::Result<i64, String> {
    dated(super::prune::time_ms(s, EARLY)?)
}

/// A time after the year 9999 is refused: no record has one, and a number
/// that large is in all likelihood microseconds or nanoseconds (humantime
/// could not show it either: its display fails, which panicked the
/// message of a range that kept nothing, until review the same day).
fn dated(ms: i64) -> std::result::Result<i64, String> {
    match super::prune::datable(ms) {
        Some(_) => Ok(ms),
        None => Err("after the year 9999: it takes milliseconds since the Unix epoch (given as a number, was this microseconds or nanoseconds?) or RFC 3339".into()),
    }
}

/// The records' timestamps an export takes (`--from-time`, `--to-time`):
/// `from_ms..to_ms`, either end open. A record without a timestamp (-1,
/// or none) is in no bounded range. Sent to a running archive only when
/// set (a server of before 2026-12-07 refuses the field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<i64>,
}

impl TimeRange {
    /// Whether no bound is set: every record is taken.
    pub fn is_unset(&self) -> bool {
        self.from_ms.is_none() && self.to_ms.is_none()
    }

    /// Whether a record stamped `timestamp_ms` is in the range.
    pub fn contains(&self, timestamp_ms: i64) -> bool {
        self.is_unset()
            || (timestamp_ms >= 0
                && self.from_ms.is_none_or(|f| timestamp_ms >= f)
                && self.to_ms.is_none_or(|t| timestamp_ms < t))
    }

    /// The bounds given, as (flag, ms): what a message names.
    fn given(&self) -> impl Iterator<Item = (&'static str, i64)> {
        [("--from-time", self.from_ms), ("--to-time", self.to_ms)]
            .into_iter()
            .filter_map(|(flag, ms)| Some((flag, ms?)))
    }

    /// Refuse a range that holds no time.
    pub fn check(&self) -> Result<()> {
        match (self.from_ms, self.to_ms) {
            (Some(f), Some(t)) if f >= t => Err(ConnectorError::Config(format!(
                "--from-time {} and --to-time {}: an empty time range (--to-time is exclusive)",
                shown_ms(f),
                shown_ms(t)
            ))),
            _ => Ok(()),
        }
    }
}

/// Milliseconds since the epoch, as RFC 3339 in UTC where humantime shows
/// one (up to the year 9999), else the number.
fn shown_ms(ms: i64) -> String {
    super::prune::datable(ms).map_or_else(
        || ms.to_string(),
        |at| humantime::format_rfc3339_millis(at).to_string(),
    )
}

#[derive(Serialize)]
struct Line<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    timestamp_type: &'static str,
    key: Option<Cow<'a, str>>,
    value: Option<Cow<'a, str>>,
    headers: Vec<(&'a str, Option<Cow<'a, str>>)>,
}

/// `r` as a jsonl line: its byte strings in base64, or as text (`text`),
/// which fails, naming the record and the field, on bytes that are not
/// UTF-8.
fn line<'a>(tp: &'a TopicPartition, r: &'a Record, text: bool) -> Result<Line<'a>> {
    let bytes = |field: &dyn Fn() -> String, v: &'a Option<Vec<u8>>| {
        let Some(b) = v else {
            return Ok(None);
        };
        if !text {
            return Ok(Some(Cow::Owned(STANDARD.encode(b))));
        }
        std::str::from_utf8(b)
            .map(|s| Some(Cow::Borrowed(s)))
            .map_err(|e| ConnectorError::NotText {
                record: format!("{tp}@{}", r.offset),
                field: field(),
                valid_up_to: e.valid_up_to(),
            })
    };
    Ok(Line {
        topic: &tp.topic,
        partition: tp.partition,
        offset: r.offset,
        timestamp: r.timestamp_ms,
        timestamp_type: match r.timestamp_type {
            TimestampType::NotAvailable => "none",
            TimestampType::CreateTime => "create",
            TimestampType::LogAppendTime => "log-append",
        },
        key: bytes(&|| "key".into(), &r.key)?,
        value: bytes(&|| "value".into(), &r.value)?,
        headers: r
            .headers
            .iter()
            .map(|h| {
                let field = || format!("header {:?}'s value", h.name);
                Ok((h.name.as_str(), bytes(&field, &h.value)?))
            })
            .collect::<Result<_>>()?,
    })
}

pub async fn run(args: ExportArgs) -> Result<ExitCode> {
    let select = args.select.into_selection();
    select.check_range()?;
    let times = TimeRange {
        from_ms: args.from_time,
        to_ms: args.to_time,
    };
    times.check()?;
    let data = &args.data.data;
    // Names of stdout are written to as stdout: followed as links to the
    // file behind it, the export would be staged beside that file and
    // renamed over it, so that `--output /dev/stdout >> all.jsonl` lost
    // what the file held (before 2026-12-03; and `-` made a file named -).
    // Its names read once: stdout, or another descriptor (refused below).
    let named = args.output.as_deref().and_then(output_descriptor);
    let output = args.output.filter(|_| named != Some(Descriptor::Stdout));
    if let Some(output) = &output {
        let end = link_end(output);
        check_output(output, &end, named)?;
        refuse_inside(output, &end, data)?;
    }
    let out_path = output.clone().unwrap_or_else(|| PathBuf::from("<stdout>"));
    // A file is written under a staged name and renamed into place once the
    // export is complete: a refused, failed or interrupted export leaves an
    // existing file as it was.
    let staged = Staged::default();
    // A served export holds no archive here: a signal ends it at once. (A
    // signal before the watcher is in place ends the process as it would
    // any: nothing is open or staged yet.)
    let conn = crate::live::connect(data)?;
    let watcher = remove_on_interrupt(
        staged.clone(),
        out_path.clone(),
        output.is_some(),
        conn.is_none(),
    )?;
    let out = BufWriter::with_capacity(1 << 20, Output::new(output, staged.clone()));
    let result = match conn {
        Some(conn) => export_live(conn, select, times, args.format, out, &out_path),
        None => export_stopped(data, &select, times, args.format, out, &out_path, &staged),
    };
    watcher.abort();
    result
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Where writing to `path` lands: its symlinks followed one after another
/// (at most 40, as the kernel does) to a path that is no link, which may
/// not exist yet (the export would create it).
fn link_end(path: &Path) -> PathBuf {
    link_chain(path).pop().unwrap_or_else(|| path.to_path_buf())
}

/// `path` and each path its symlinks lead to in turn (at most 40, as the
/// kernel follows), each with `.` and repeated `/` taken out.
fn link_chain(path: &Path) -> Vec<PathBuf> {
    links_followed(path)
        .iter()
        .map(|at| at.components().collect())
        .collect()
}

/// `path` and each path its symlinks lead to in turn (at most 40), as
/// the links spell them.
fn links_followed(path: &Path) -> Vec<PathBuf> {
    let mut at = path.to_path_buf();
    let mut chain = vec![at.clone()];
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            // Relative to the link's own directory; an absolute one replaces.
            Ok(to) => at = parent_dir(&at).join(to),
            Err(_) => break,
        }
        chain.push(at.clone());
    }
    chain
}

/// Whether a link on the way from `path` names its target as a
/// directory: with a trailing `/`, or ending in `.` or `..` (`newdir/.`),
/// which [`link_chain`]'s paths, normalised, no longer say.
fn link_names_a_directory(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    links_followed(path).iter().skip(1).any(|to| {
        let last = to.as_os_str().as_bytes().rsplit(|&b| b == b'/').next();
        matches!(last, Some(b"" | b"." | b".."))
    })
}

/// The descriptor `--output` names, if any: stdout when it is spelt so
/// (`-` too), or a link to a name of it (`/dev/./stdout`, a `latest.jsonl`
/// linked to `/dev/stdout`: before 2026-12-03 those were followed to the
/// file behind stdout, which the export then replaced), or through a
/// directory that leads to one (`/dev/fd/../fd/1`, a `~/fd` linked to
/// `/proc/self/fd`); else another of this process's descriptors, or
/// another's, named so or through links (`/dev/fd/N`, `/proc/self/fd/N`,
/// `/proc/PID/fd/N`, `/dev/stderr`, `/dev/stdin`).
fn output_descriptor(output: &Path) -> Option<Descriptor> {
    if output.as_os_str() == "-" {
        return Some(Descriptor::Stdout);
    }
    let named: Vec<Descriptor> = output_names(output)
        .iter()
        .filter_map(|p| descriptor_named(p))
        .collect();
    if named.contains(&Descriptor::Stdout) {
        Some(Descriptor::Stdout)
    } else {
        named.into_iter().next()
    }
}

/// The names `output` goes by: each path of its [`link_chain`], and each
/// again with its directory's links and `..` resolved (the directory's own
/// path may pass through `/dev/fd`, a link to `/proc/self/fd`).
fn output_names(output: &Path) -> Vec<PathBuf> {
    let chain = link_chain(output);
    let resolved: Vec<PathBuf> = chain
        .iter()
        .filter_map(|p| Some(parent_dir(p).canonicalize().ok()?.join(p.file_name()?)))
        .collect();
    chain.into_iter().chain(resolved).collect()
}

#[derive(Debug, PartialEq, Eq)]
enum Descriptor {
    /// This process's descriptor 1.
    Stdout,
    /// Another descriptor, or another process's.
    Other,
}

/// The descriptor `p` names, if it is spelt as one: `/dev/stdout`,
/// `/dev/stderr`, `/dev/stdin`, `/dev/fd/N`, or `/proc/X/fd/N` with X
/// `self`, `thread-self`, a process id or `PID/task/TID` (the last two
/// are how a resolved `/proc/self` and `/proc/thread-self` read).
fn descriptor_named(p: &Path) -> Option<Descriptor> {
    let s = p.to_str()?;
    let number = |rest: &str| -> Option<u32> {
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        // Too many digits for a u32 is still a descriptor's spelling.
        Some(rest.parse().unwrap_or(u32::MAX))
    };
    let ours = |fd: u32, own: bool| {
        Some(if fd == 1 && own {
            Descriptor::Stdout
        } else {
            Descriptor::Other
        })
    };
    match s {
        "/dev/stdout" => return Some(Descriptor::Stdout),
        "/dev/stderr" | "/dev/stdin" => return Some(Descriptor::Other),
        _ => {}
    }
    if let Some(rest) = s.strip_prefix("/dev/fd/") {
        return ours(number(rest)?, true);
    }
    let (owner, fd) = s.strip_prefix("/proc/")?.split_once("/fd/")?;
    let fd = number(fd)?;
    let own = match owner {
        "self" | "thread-self" => true,
        _ => {
            let pid = match owner.split_once("/task/") {
                Some((pid, tid)) => {
                    number(tid)?;
                    pid
                }
                None => owner,
            };
            number(pid)? == std::process::id()
        }
    };
    ours(fd, own)
}

/// Refuses, before anything is read, an `--output` the export could not
/// create: a directory, or a file in a directory that is not there. Found
/// only at the first write, it would cost the read of up to 1 MiB of
/// records (the whole export, when smaller) and read like an export cut
/// short. `end`: where its links lead ([`link_end`]); `named`: the
/// descriptor it names ([`output_descriptor`]), other than stdout.
fn check_output(output: &Path, end: &Path, named: Option<Descriptor>) -> Result<()> {
    let refused = |why: String| {
        Err(ConnectorError::Config(format!(
            "--output {}: {why}; nothing was read or written",
            output.display()
        )))
    };
    if named.is_some() {
        // Followed as a link, it leads to the file behind the descriptor,
        // which the export, staged beside it and renamed into place, would
        // replace rather than append to (or to a pipe, not renamed over).
        return refused("names a file descriptor other than stdout, not a file (write to stdout, `--output -` or none, and redirect it; or name the file)".into());
    }
    // A link another user planted in a sticky, world-writable directory
    // (`/tmp`) is not followed, as the kernel refuses to follow it
    // (`fs.protected_symlinks`, on by default, root included): the export
    // follows `--output`'s links itself (`links_followed`, and the staged
    // file renamed onto where they lead), which the kernel's check never
    // sees, so such a link could have an export replace, or create, any
    // file this user may write (found by an audit, 2026-12-06).
    let chain = links_followed(output);
    for link in &chain[..chain.len() - 1] {
        use std::os::unix::fs::MetadataExt;
        let (Ok(l), Ok(d)) = (
            std::fs::symlink_metadata(link),
            std::fs::metadata(parent_dir(link)),
        ) else {
            continue;
        };
        let fsuid = rustix::process::geteuid().as_raw();
        if protected_link(d.mode(), d.uid(), l.uid(), fsuid) {
            return refused(format!(
                "{} is a symbolic link of another user's in the sticky directory {}, which the kernel refuses to follow for this user (as a shell's `>` would be refused): name the file it leads to, or a file of your own",
                link.display(),
                parent_dir(link).display()
            ));
        }
    }
    // Its last component as given: `F/.` (which the links followed above
    // normalise to `F`) names a directory as `F/` does, and was refused
    // only at the rename, after the whole export (until 2026-12-06).
    let given = output.as_os_str().as_encoded_bytes();
    let last = given.rsplit(|b| *b == b'/').next().unwrap_or_default();
    if std::fs::metadata(end).is_ok_and(|m| m.is_dir())
        || given.ends_with(b"/")
        || last == b"."
        || last == b".."
    {
        return refused("a directory (name a file to write the export to)".into());
    }
    let dir = parent_dir(end);
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return refused(format!("{} is not a directory", dir.display())),
        Err(e) => return refused(format!("its directory {}: {e}", dir.display())),
    }
    // A special file (a FIFO, a device) is written in place, whatever its
    // directory takes; a regular one is staged beside it, or written in
    // place if its directory takes no new files. One neither can be
    // written is refused here (a read-only filesystem, a directory and a
    // file this user may not write), not after up to 1 MiB of records
    // (until the night of 2026-12-04).
    let existing = match std::fs::metadata(end) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        // A link loop (ELOOP), a path through a file: nothing can be
        // created there (found only at the first write until 2026-12-05).
        Err(e) => return refused(format!("cannot be written: {e}")),
    };
    if existing
        .as_ref()
        .is_some_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
    {
        // open(2) answers ENXIO for a socket (found only at the first
        // write until 2026-12-05).
        return refused("a socket, which no export can be written to".into());
    }
    let Some(existing) = existing else {
        return match writable(dir) {
            Ok(()) => Ok(()),
            Err(dir_refused) => refused(format!(
                "its directory {} takes no new files ({dir_refused})",
                dir.display()
            )),
        };
    };
    if !existing.is_file() {
        return Ok(());
    }
    // A file this user may not write is not replaced by the staged export
    // (a shell's `>` refuses it too), and one a sticky directory keeps for
    // another user could not be renamed over, which was found only after
    // the whole export (seen in review, 2026-12-05: the first was replaced
    // without a word).
    if let Err(e) = writable(end) {
        return refused(format!("may not be written ({e})"));
    }
    {
        use std::os::unix::fs::MetadataExt;
        let euid = rustix::process::geteuid();
        let kept = std::fs::metadata(dir).is_ok_and(|d| {
            sticky_keeps(
                d.mode(),
                d.uid(),
                existing.uid(),
                euid.as_raw(),
                euid.is_root(),
            )
        });
        if kept {
            return refused(format!(
                "another user's file in {}, whose sticky bit keeps it from being replaced (name a file of your own)",
                dir.display()
            ));
        }
    }
    // Staged beside it, or, if its directory takes no new files, written
    // in place.
    Ok(())
}

/// Whether a directory of `dir_mode`, owned by `dir_uid`, keeps a file of
/// `file_uid` from being renamed over by a process of `euid`: its sticky
/// bit lets only the file's owner, the directory's owner, or root remove
/// or replace it (rename(2), EPERM).
fn sticky_keeps(dir_mode: u32, dir_uid: u32, file_uid: u32, euid: u32, root: bool) -> bool {
    dir_mode & 0o1000 != 0 && !root && dir_uid != euid && file_uid != euid
}

/// Whether the kernel refuses to follow a symlink owned by `link_uid`, in
/// a directory of `dir_mode` owned by `dir_uid`, for a process of `fsuid`
/// (`fs.protected_symlinks`, `may_follow_link`): in a sticky directory
/// that others may write, only a link of the process's own or of the
/// directory's owner is followed. Root is held to it too.
fn protected_link(dir_mode: u32, dir_uid: u32, link_uid: u32, fsuid: u32) -> bool {
    dir_mode & 0o1000 != 0 && dir_mode & 0o002 != 0 && link_uid != fsuid && link_uid != dir_uid
}

/// Whether this process may write `path` (access(2) with `W_OK`: a
/// read-only filesystem refuses root too).
fn writable(path: &Path) -> std::io::Result<()> {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).map_err(std::io::Error::from)
}

/// Refuses an `--output` in the archive's directory (or below it): the
/// export, renamed into place, could replace one of the archive's files
/// (`cairn.durable`, sled's `conf`), damaging the archive it read. `end`:
/// where its links lead ([`link_end`]).
fn refuse_inside(output: &Path, end: &Path, data: &Path) -> Result<()> {
    let (Ok(parent), Ok(data)) = (parent_dir(output).canonicalize(), data.canonicalize()) else {
        // Either is missing: the export fails on it, naming it.
        return Ok(());
    };
    // A symlink is written through (in place): where its chain of links
    // leads counts too, also when nothing is there yet (the export would
    // create it).
    let target = if end != output {
        end.canonicalize()
            .or_else(|_| parent_dir(end).canonicalize())
            .ok()
    } else {
        None
    };
    if parent.starts_with(&data) || target.is_some_and(|t| t.starts_with(&data)) {
        return Err(ConnectorError::Config(format!(
            "--output {}: inside the archive's directory {}, where the export could replace a file of the archive; write it elsewhere",
            output.display(),
            data.display()
        )));
    }
    Ok(())
}

/// The export, served by the running `cairn run` that holds `data`.
fn export_live(
    conn: std::os::unix::net::UnixStream,
    selection: Selection,
    times: TimeRange,
    format: Format,
    mut out: BufWriter<Output>,
    out_path: &Path,
) -> Result<ExitCode> {
    let req = crate::live::Request::Export {
        selection,
        times,
        format,
    };
    match crate::live::request(conn, &req, &mut out, out_path) {
        Ok(mut end) => {
            // Said before the output is finished, as a local export says it
            // before it reads: an output failing at its end stops this
            // command before the answer's own exit is said (until
            // 2026-12-06 the warning was lost then; found by an audit).
            if let Some(warning) = end.warning.take() {
                super::say_warn!("{warning}");
            }
            match &mut end.error {
                None => {
                    // pid 0: the reader went away (`| head`) while the
                    // answer came, which ends an export quietly, as a
                    // local one does; `finish` finds it at the last flush.
                    if finish(out, out_path)? && end.pid != 0 {
                        match end.records {
                            Some(records) => tracing::info!(
                                records,
                                "export done (served by the running cairn run)"
                            ),
                            // A server of before 2026-12-07 sends no count.
                            None => tracing::info!("export done (served by the running cairn run)"),
                        }
                    }
                }
                Some(error) => {
                    // A run of a build before the time range refuses
                    // the field; retried as it is, it refuses it again.
                    if !times.is_unset() && error.contains("unknown field `times`") {
                        error.push_str(" (the running cairn run is of an older build, which takes no --from-time or --to-time: export without them, or once the run is of this build)");
                    }
                    error.push_str(&abandon(out));
                }
            }
            Ok(crate::live::exit_code(&end))
        }
        // Cut off (the run stopped, went silent, or the output failed).
        Err(e) => Err(ConnectorError::Live(format!("{e}{}", abandon(out)))),
    }
}

/// The export, from the stopped archive at `data`.
fn export_stopped(
    data: &Path,
    select: &Selection,
    times: TimeRange,
    format: Format,
    mut out: BufWriter<Output>,
    out_path: &Path,
    shared: &Shared,
) -> Result<ExitCode> {
    let stop = &shared.stop;
    // Closed, not dropped: a failed sync of what the open wrote (recovery,
    // a node split) exits 1, as any failed fsync does (since 2026-12-05;
    // the drop's sync left the poison mark, but the command exited 0).
    let close = |engine: cairn_engine::Engine| {
        let closed = engine.close();
        shared.closed.store(closed.is_ok(), Ordering::SeqCst);
        closed
    };
    let engine = super::open_unserved(data, super::Access::Read)?;
    let chosen = select.choose(engine.partitions(), &[])?;
    if let Some(later) = select.starts_below_held(&chosen) {
        super::say_warn!("{later}");
    }
    // Not served: a signal stops the read between records
    // (`remove_on_interrupt`).
    let written = super::read_unpanicked("export", data, &engine, "", || {
        write_records(
            &engine, &chosen, select, times, format, &mut out, out_path, stop,
        )
    });
    match written {
        // Interrupted: the output given up as a failed export's is, and the
        // archive closed (its open mark removed); exit 130.
        Err(ConnectorError::ExportStopped {
            records, source, ..
        }) if stop.load(Ordering::SeqCst) && matches!(*source, ConnectorError::Live(_)) => {
            let note = abandon(out);
            // Said before the close, whose failure is the error then.
            super::say_warn!(
                "interrupted: the export stopped after {}{note}",
                counted(records, "record")
            );
            close(engine)?;
            Ok(ExitCode::from(super::backup::EXIT_INTERRUPTED))
        }
        Ok(count) => {
            let to_file = matches!(out.get_ref(), Output::File(_));
            let delivered = match finish(out, out_path) {
                // Stopped before the staged file was put in place.
                Err(ConnectorError::ExportOutput { source, .. })
                    if stop.load(Ordering::SeqCst)
                        && source.kind() == std::io::ErrorKind::Interrupted =>
                {
                    super::say_warn!("{source}");
                    close(engine)?;
                    return Ok(ExitCode::from(super::backup::EXIT_INTERRUPTED));
                }
                // A reader gone (`Ok(None)`) took less than all of it.
                finished => finished? && count.is_some(),
            };
            // The export itself is whole: said, so that the error is not
            // taken for it.
            if let Err(e) = close(engine) {
                if delivered {
                    super::say_warn!(
                        "the export is complete (in {}), but the archive's closing sync failed: the archive needs a look, not the export",
                        out_path.display()
                    );
                }
                return Err(e.into());
            }
            if let (true, Some(records)) = (delivered, count) {
                tracing::info!(records, "export done");
            }
            // A signal after the last record: the export is whole, and said
            // so as the watcher says it.
            if stop.load(Ordering::SeqCst) {
                match delivered {
                    // A Ctrl-C in a pipeline ends its reader too.
                    false => super::say_warn!("interrupted: the export is incomplete"),
                    true => say_interrupted_complete(to_file, out_path),
                }
                return Ok(ExitCode::from(super::backup::EXIT_INTERRUPTED));
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(mut e) => {
            let note = abandon(out);
            if let ConnectorError::ExportStopped { output, .. }
            | ConnectorError::ReadPanicked { output, .. } = &mut e
            {
                *output = note;
            }
            Err(e)
        }
    }
}

/// What the export's output shares with the signal watcher ([`Shared`]):
/// where a file export stands, which the watcher reads to remove a staged
/// file and say what the output holds, and the stop it asks for.
type Staged = Arc<Shared>;

/// What the export's output shares with the signal watcher.
#[derive(Default)]
struct Shared {
    stage: Mutex<Stage>,
    /// Calls into the output (a write, which may open the file, a flush,
    /// or the open of a file not opened before the output is put in place,
    /// which for a FIFO waits for its reader), counted at their start and
    /// at their end: odd while one is under way. The watcher of a stopped archive's export exits at once
    /// when the same call is still under way a tick after the signal: a
    /// reader that stopped reading (a pager, a FIFO no one opened) would
    /// otherwise hold the export, and its archive, open for good.
    calls: std::sync::atomic::AtomicU64,
    /// Set by the first signal, for an export of a stopped archive: the
    /// read stops between records, and a staged file is not put in place.
    stop: AtomicBool,
    /// The archive was closed (its open mark removed).
    closed: AtomicBool,
}

/// The most handed in one call to an output that can block (a pipe, a
/// FIFO, a terminal): `PIPE_BUF`, so that a reader that still reads, if
/// slowly (a serial console, `| ssh` over a slow link), returns a call
/// within a tick of the signal watcher, which takes a call that does not
/// return for a tick for an output that takes nothing. (Slower than 4 KiB
/// a second, it is taken for one.)
const SPECIAL_CALL_BYTES_MAX: usize = 4096;

/// One call into the output, counted ([`Shared::calls`]) from its start to
/// its drop.
struct OutputCall(Staged);

impl OutputCall {
    fn begin(shared: Staged) -> OutputCall {
        shared.calls.fetch_add(1, Ordering::SeqCst);
        OutputCall(shared)
    }
}

impl Drop for OutputCall {
    fn drop(&mut self) {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
enum Stage {
    /// Nothing staged: standard output, or nothing written yet.
    #[default]
    Unstaged,
    /// A FIFO or a device written in place (nothing of theirs could pass
    /// for an export, so nothing is emptied).
    Special,
    /// Written under this hidden name until it is complete.
    Staged(PathBuf),
    /// A regular file written in place (its directory takes no new
    /// files), not complete yet.
    InPlace(PathBuf),
    /// Complete and in place.
    Complete,
    /// The staged file was taken by the one putting it in place (or
    /// removing it): what the output holds is said by that one's error.
    Taken,
}

impl Stage {
    /// The staged file, which is no longer this stage's to remove.
    fn take_staged(&mut self) -> Option<PathBuf> {
        match std::mem::replace(self, Stage::Taken) {
            Stage::Staged(path) => Some(path),
            other => {
                *self = other;
                None
            }
        }
    }
}

fn lock_staged(s: &Staged) -> std::sync::MutexGuard<'_, Stage> {
    s.stage.lock().unwrap_or_else(|e| e.into_inner())
}

/// On SIGINT or SIGTERM: remove the staged file, say so, exit 130.
/// `to_file`: `out` is `--output F`, not stdout.
///
/// `stopping`: the export reads a stopped archive that this process
/// opens. The first signal then asks it to stop ([`Shared::stop`]:
/// `export_stopped` gives its output up and closes the archive, so that its
/// open mark goes); the watcher exits at once only at a second signal, or
/// when a call into the output has not returned for a tick
/// ([`Shared::calls`]). Until 2026-12-07 the first signal exited at once, leaving the open mark: the
/// next open in this boot took it for a crash, with a WARN, and synced the
/// whole store (found by an audit).
fn remove_on_interrupt(
    staged: Staged,
    out: PathBuf,
    to_file: bool,
    stopping: bool,
) -> Result<tokio::task::JoinHandle<()>> {
    let mut signals = super::run::Signals::for_command()?;
    Ok(tokio::spawn(async move {
        signals.recv().await;
        if stopping {
            // Asked before it is said: once said, the export stops at its
            // next record.
            staged.stop.store(true, Ordering::SeqCst);
            // Said whatever RUST_LOG keeps, as `run`'s.
            super::say(
                "INFO",
                &"signal received: stopping the export (again to exit at once)",
                None,
            );
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick is at once.
            tick.tick().await;
            let mut seen = staged.calls.load(Ordering::SeqCst);
            let why = loop {
                tokio::select! {
                    _ = signals.recv() => break "second signal",
                    _ = tick.tick() => {
                        let now = staged.calls.load(Ordering::SeqCst);
                        if now == seen && now % 2 == 1 {
                            break "a call into the output has not returned for a second";
                        }
                        seen = now;
                    }
                }
            };
            let mark = match staged.closed.load(Ordering::SeqCst) {
                true => "",
                false => "; the archive's open mark stays, and the next open in this boot syncs the store before it trusts it",
            };
            super::say("ERROR", &format_args!("{why}: exiting at once{mark}"), None);
        }
        // Held to the exit: a rename in progress finishes first, and none
        // starts after.
        let mut guard = lock_staged(&staged);
        match std::mem::take(&mut *guard) {
            Stage::Staged(path) => {
                let _ = std::fs::remove_file(path);
                super::say_warn!("interrupted: {} was left as it was", out.display());
            }
            Stage::Complete => say_interrupted_complete(to_file, &out),
            // Emptied, as a failed export's is (`abandon`), so that no
            // prefix passes for the whole export (before the night of
            // 2026-12-04 it was left holding one).
            Stage::InPlace(path) => match std::fs::OpenOptions::new().write(true).open(&path) {
                Ok(file) => super::say_warn!("interrupted: {}", empty_in_place(&file, &path)),
                Err(e) => super::say_warn!(
                    "interrupted: {} (written in place) holds part of the export and could not be emptied ({e}): the export is incomplete",
                    path.display()
                ),
            },
            // Not opened yet (before the first 1 MiB of records, or the
            // archive's open): F is untouched, and says so as a staged
            // F does (until the night of 2026-12-04, only "incomplete").
            Stage::Unstaged if to_file => super::say_warn!(
                "interrupted before anything was written: {} was left as it was",
                out.display()
            ),
            Stage::Unstaged | Stage::Special | Stage::Taken => {
                super::say_warn!("interrupted: the export is incomplete")
            }
        }
        std::process::exit(130);
    }))
}

/// Say that a signal came after the export was complete, into `out` (a
/// file when `to_file`, else stdout).
fn say_interrupted_complete(to_file: bool, out: &Path) {
    match to_file {
        true => super::say_warn!(
            "interrupted after the export was complete: {} holds all of it",
            out.display()
        ),
        false => super::say_warn!(
            "interrupted after the export was complete: <stdout> received all of it"
        ),
    }
}

/// Flush what is buffered and put a file in place: true when the output
/// took all of it, false when its reader went away (a closed pipe), which
/// is no error. A failure names `out_path` and says what it holds: a last
/// flush that fails (most of a small export is written there) gives the
/// export up as any failed write does ([`abandon`]).
fn finish(mut out: BufWriter<Output>, out_path: &Path) -> Result<bool> {
    let failed = |source, output| ConnectorError::ExportOutput {
        path: out_path.to_owned(),
        source,
        output,
    };
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(failed(e, abandon(out))),
        Ok(()) => match out.into_parts().0 {
            // Until 2026-12-05 a signal from here on (the archive's
            // closing sync) said the export was incomplete.
            Output::Stdout { staged, .. } => {
                *lock_staged(&staged) = Stage::Complete;
                Ok(true)
            }
            // Its errors say what the file holds.
            Output::File(mut f) => f
                .complete()
                .map(|()| true)
                .map_err(|e| failed(e, String::new())),
        },
    }
}

/// Give up an export that failed, and say what its output holds (for its
/// error). Buffered records precede the failure: stdout, or a special file
/// written in place, gets them if it still takes writes (the count in the
/// error is of records handed to the buffer); a file not opened yet (the
/// failure came within the first 1 MiB) is left as it was; a staged file
/// is removed; a regular file written in place (its directory takes no new
/// files) is emptied, so that no prefix of the export passes for all of it.
fn abandon(mut out: BufWriter<Output>) -> String {
    let buffered = !out.buffer().is_empty();
    // A file is opened at the first flush. One not opened yet stays so:
    // opening it now, for an export that failed, could only truncate what
    // it held (a file written in place, its directory taking no new files).
    let unopened = matches!(out.get_ref(), Output::File(f) if f.file.is_none());
    let received = match if unopened { Ok(()) } else { out.flush() } {
        Ok(()) => "received the records before it",
        Err(_) => {
            "received the records before it but up to the last 1 MiB of them (the output failed)"
        }
    };
    // (Not flushed again: `into_parts` hands the buffer back unwritten.)
    let out = out.into_parts().0;
    match &out {
        // A refusal (a busy run, a bad selection) before any output.
        Output::Stdout { written: false, .. } if !buffered => {
            "; nothing was written to <stdout>".into()
        }
        Output::Stdout { .. } => format!("; <stdout> {received}: the export is incomplete"),
        Output::File(f)
            if f.file.is_none() || matches!(*lock_staged(&f.staged), Stage::Staged(_)) =>
        {
            format!("; {} was left as it was", f.path.display())
        }
        Output::File(FileOutput {
            file: Some(file),
            path,
            ..
        }) if file.metadata().is_ok_and(|m| m.is_file()) => {
            format!("; {}", empty_in_place(file, path))
        }
        Output::File(f) => format!(
            "; {} {received}: the export is incomplete",
            f.path.display()
        ),
    }
}

/// Empty a regular file the export was written into in place, so that no
/// part of it passes for the whole export, and say what it holds now.
/// The emptying is synced: the writes before it may be on the disk
/// already (the page cache writes back on its own), and a power loss would
/// otherwise bring a part of the export back (since 2026-12-05).
fn empty_in_place(file: &std::fs::File, path: &Path) -> String {
    match file.set_len(0) {
        Ok(()) => match file.sync_all() {
            Ok(()) => format!(
                "{} (written in place: its directory takes no new files) was emptied, so that no part of the export passes for all of it",
                path.display()
            ),
            Err(e) => format!(
                "{} (written in place) was emptied, but the emptying could not be synced ({e}): after a power loss it may hold part of the export, which is incomplete",
                path.display()
            ),
        },
        Err(e) => format!(
            "{} (written in place) holds part of the export and could not be emptied ({e}): the export is incomplete",
            path.display()
        ),
    }
}

/// Standard output (and whether it was written to, and whether it is
/// something other than a regular file), or a file.
enum Output {
    Stdout {
        stdout: std::io::Stdout,
        /// Set `Complete` once the last flush took every record, so that a
        /// signal after it (the archive's closing sync may take a while)
        /// says the export was complete.
        staged: Staged,
        written: bool,
        /// Not a regular file (a pipe, a terminal): a closed pipe there is
        /// a reader gone. A redirect into a regular file that answers
        /// EPIPE (FUSE, a network file system) has failed, as an
        /// `--output` file's has (since 2026-12-05; before, the export
        /// exited 0 with the file cut short).
        special: bool,
    },
    File(FileOutput),
}

impl Output {
    /// What it shares with the signal watcher.
    fn shared(&self) -> Staged {
        match self {
            Output::Stdout { staged, .. } => staged.clone(),
            Output::File(f) => f.staged.clone(),
        }
    }

    fn new(path: Option<PathBuf>, staged: Staged) -> Output {
        match path {
            None => {
                let stdout = std::io::stdout();
                let special = !super::is_regular_file(&stdout);
                Output::Stdout {
                    stdout,
                    staged,
                    written: false,
                    special,
                }
            }
            Some(path) => Output::File(FileOutput {
                path,
                file: None,
                staged,
            }),
        }
    }
}

/// A file output: a regular file (or none yet) is written under a staged
/// name beside it, renamed into place by [`FileOutput::complete`] and
/// removed when dropped before; through a symlink, beside the file the link
/// names, or, for a link to nothing yet, beside where it leads. A special
/// file (a FIFO, `/dev/null`), or a file in a directory the export may not
/// create files in, is written in place.
struct FileOutput {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Where the file is written until it is complete, if staged; shared
    /// with the signal watcher, which removes it.
    staged: Staged,
}

impl FileOutput {
    /// A signal asked a stopped archive's export to stop (its watcher
    /// leaves the output to it): `F` is left as it was, the staged file
    /// removed, and said in the error (of kind `Interrupted`). `None` when
    /// not stopped, or when the file is written in place already.
    fn interrupted(&self, stage: &mut Stage) -> Option<std::io::Error> {
        if !self.staged.stop.load(Ordering::SeqCst) {
            return None;
        }
        match stage {
            Stage::Staged(_) => {
                if let Some(staged) = stage.take_staged() {
                    let _ = std::fs::remove_file(staged);
                }
            }
            Stage::Unstaged if self.file.is_none() => {}
            _ => return None,
        }
        Some(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            format!(
                "interrupted before the export was put in place: {} was left as it was",
                self.path.display()
            ),
        ))
    }

    fn open(&mut self) -> std::io::Result<&mut std::fs::File> {
        if self.file.is_none() {
            let named = |e: std::io::Error, path: &Path| {
                std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
            };
            let mut existing = std::fs::symlink_metadata(&self.path).ok();
            // A link to a regular file: staged beside the file it names,
            // which the export then replaces (the link stays). Written in
            // place through the link, a failed export would leave a prefix
            // that looks whole.
            if existing
                .as_ref()
                .is_some_and(|m| m.file_type().is_symlink())
            {
                if let Ok(target) = std::fs::canonicalize(&self.path) {
                    if std::fs::metadata(&target).is_ok_and(|m| m.is_file()) {
                        existing = std::fs::symlink_metadata(&target).ok();
                        self.path = target;
                    }
                } else {
                    // A link to nothing yet (`latest.jsonl` to tomorrow's
                    // name): staged beside where it leads, and renamed
                    // there, durably, or removed on failure (since
                    // 2026-12-05; before, the file was created in place
                    // through the link, its directory never synced, and a
                    // failed export left it empty).
                    // (Not one that names a directory, `newdir/`: its
                    // create fails, as it did, rather than make a file.)
                    let end = link_end(&self.path);
                    if !link_names_a_directory(&self.path)
                        && std::fs::symlink_metadata(&end)
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
                    {
                        existing = None;
                        self.path = end;
                    }
                }
            }
            let staged = match &existing {
                Some(m) if !m.file_type().is_file() => None,
                _ => {
                    // Held from before the staged file exists until it is
                    // recorded: a signal in between would leave it behind.
                    // (Not around the open in place below: a FIFO's blocks
                    // until a reader comes, and the signal must still end
                    // the export.)
                    let stage = self.staged.clone();
                    let mut guard = lock_staged(&stage);
                    match self.create_staged(existing.as_ref()) {
                        Ok((path, file)) => {
                            *guard = Stage::Staged(path);
                            Some(file)
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => None,
                        Err(e) => return Err(e),
                    }
                }
            };
            let file = match staged {
                Some(file) => file,
                None => {
                    // Held around the create of a regular file, which
                    // empties it: a signal in between would say it was left
                    // as it was. Not around a FIFO's open, which blocks
                    // until a reader comes (the signal must still end the
                    // export).
                    // (Followed: a dangling link makes a regular file.)
                    let special = std::fs::metadata(&self.path).is_ok_and(|m| !m.is_file());
                    let stage = self.staged.clone();
                    let mut held = (!special).then(|| lock_staged(&stage));
                    let file =
                        std::fs::File::create(&self.path).map_err(|e| named(e, &self.path))?;
                    // A signal from now on empties it (not a FIFO or a
                    // device: nothing of theirs could pass for an export).
                    let now = if file.metadata().is_ok_and(|m| m.is_file()) {
                        Stage::InPlace(self.path.clone())
                    } else {
                        Stage::Special
                    };
                    match held.as_deref_mut() {
                        Some(stage) => *stage = now,
                        None => *lock_staged(&self.staged) = now,
                    }
                    file
                }
            };
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// A new file beside the path, under a hidden name no one else holds
    /// (`O_EXCL`: never a file or link that is already there), with the
    /// permissions of the file it will replace.
    fn create_staged(
        &self,
        existing: Option<&std::fs::Metadata>,
    ) -> std::io::Result<(PathBuf, std::fs::File)> {
        let name = self.path.file_name().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{}: not a file name", self.path.display()),
            )
        })?;
        let mut last = None;
        for attempt in 0..16u32 {
            // Need not be secret: O_EXCL refuses a name someone took.
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let suffix = format!(
                ".cairn-export-{}-{:08x}",
                std::process::id(),
                nanos ^ attempt
            );
            // A file name holds at most 255 bytes: a long output name is cut
            // in the staged one (before 2026-12-03 its staging failed at the
            // first flush, after up to 1 MiB was read).
            let room = 255usize.saturating_sub(1 + suffix.len());
            let bytes = std::os::unix::ffi::OsStrExt::as_bytes(name);
            let kept: &std::ffi::OsStr =
                std::os::unix::ffi::OsStrExt::from_bytes(&bytes[..bytes.len().min(room)]);
            let mut staged = std::ffi::OsString::from(".");
            staged.push(kept);
            staged.push(suffix);
            let staged = self.path.with_file_name(staged);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&staged)
            {
                Ok(file) => {
                    if let Some(m) = existing {
                        // Its owner too, as `sed -i` keeps it: root
                        // replacing a user's file left it root's, which
                        // the user could then not read (until 2026-12-07;
                        // found by an audit). Only root may give a file
                        // away; another user keeps what the group allows.
                        use std::os::unix::fs::MetadataExt;
                        let made = file.metadata()?;
                        if (made.uid(), made.gid()) != (m.uid(), m.gid()) {
                            if let Err(e) =
                                std::os::unix::fs::fchown(&file, Some(m.uid()), Some(m.gid()))
                                    .or_else(|_| {
                                        std::os::unix::fs::fchown(&file, None, Some(m.gid()))
                                    })
                            {
                                tracing::warn!(error = %e, path = %self.path.display(), uid = m.uid(), gid = m.gid(), "could not give the export the owner of the file it replaces: it is this user's");
                            }
                        }
                        // Some filesystems refuse (vfat, a root-squashed
                        // NFS): the export still goes where it was asked.
                        // After the owner: a change of owner clears the
                        // set-id bits.
                        if let Err(e) = file.set_permissions(m.permissions()) {
                            tracing::warn!(error = %e, path = %self.path.display(), "could not give the export the permissions of the file it replaces");
                        }
                    }
                    return Ok((staged, file));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    /// The export is complete: put the file in place, durably (an export
    /// taken before a wipe of the archive must survive a power loss too).
    fn complete(&mut self) -> std::io::Result<()> {
        // Stopped already: neither opened nor synced (the sync of a large
        // export may take a while), and left as it was.
        if let Some(e) = self.interrupted(&mut lock_staged(&self.staged)) {
            return Err(e);
        }
        {
            // A FIFO's open may wait for its reader (an export of no
            // record opens it only now): a call into the output.
            let _call = OutputCall::begin(self.staged.clone());
            self.open()?;
        }
        let file = self.file.take().expect("opened above");
        let staged = matches!(*lock_staged(&self.staged), Stage::Staged(_));
        // fsync of a FIFO or /dev/null fails (EINVAL), and means nothing.
        if file.metadata()?.is_file() {
            if let Err(e) = file.sync_all() {
                let holds = if staged {
                    // Removed when dropped.
                    format!(
                        "the export was not put in place, and {} was left as it was",
                        self.path.display()
                    )
                } else {
                    // A failed fsync may have lost written pages already:
                    // what is left is not known to be whole.
                    empty_in_place(&file, &self.path)
                };
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("fsync of the export: {e}; {holds}"),
                ));
            }
        }
        drop(file);
        // Held through the rename: the signal watcher waits, and then
        // finds nothing to remove.
        let mut guard = lock_staged(&self.staged);
        // Stopped during the sync.
        if let Some(e) = self.interrupted(&mut guard) {
            return Err(e);
        }
        let Some(staged) = guard.take_staged() else {
            // Written in place: already where it goes.
            *guard = Stage::Complete;
            return Ok(());
        };
        if let Err(e) = std::fs::rename(&staged, &self.path) {
            // A bind-mounted file cannot be renamed over (EBUSY), nor one on
            // another filesystem (EXDEV): copy into it instead. Any other
            // refusal leaves the old file alone.
            if !matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EXDEV)) {
                let _ = std::fs::remove_file(&staged);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "putting the export in place at {}: {e} (it was left as it was)",
                        self.path.display()
                    ),
                ));
            }
            let copied = std::fs::copy(&staged, &self.path)
                .and_then(|_| std::fs::File::open(&self.path)?.sync_all());
            return match copied {
                Ok(()) => {
                    let _ = std::fs::remove_file(&staged);
                    *guard = Stage::Complete;
                    Ok(())
                }
                // The staged file is the only whole copy now: kept, named.
                Err(c) => Err(std::io::Error::new(
                    c.kind(),
                    format!(
                        "copying the export into {} ({e}, so not renamed): {c}; it may be damaged, and the whole export is in {}",
                        self.path.display(),
                        staged.display()
                    ),
                )),
            };
        }
        // In place now, whole: a failure from here on says so.
        *guard = Stage::Complete;
        std::fs::File::open(parent_dir(&self.path))
            .and_then(|d| d.sync_all())
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "fsync of its directory: {e}; {} holds the whole export, but its rename into place may not survive a power loss",
                        self.path.display()
                    ),
                )
            })
    }
}

impl Drop for FileOutput {
    fn drop(&mut self) {
        if let Some(staged) = lock_staged(&self.staged).take_staged() {
            self.file = None;
            let _ = std::fs::remove_file(staged);
        }
    }
}

/// Failpoint: a write to an `--output` file fails with EPIPE, as a FUSE or
/// network file system's can (tests, with the `failpoints` feature).
#[doc(hidden)]
pub const FAILPOINT_FILE_WRITE: &str = "export::file_write";

/// Failpoint: a write to standard output fails with EPIPE (tests, with the
/// `failpoints` feature).
#[doc(hidden)]
pub const FAILPOINT_STDOUT_WRITE: &str = "export::stdout_write";

/// `w.write(buf)`, which `failpoint` fails as a broken pipe. A function of
/// its own: without the failpoints feature the macro is empty, and a
/// closure around it would be called where it is declared.
fn write_failpointed<W: Write + ?Sized>(
    failpoint: &str,
    w: &mut W,
    buf: &[u8],
) -> std::io::Result<usize> {
    fail::fail_point!(failpoint, |_| Err(std::io::ErrorKind::BrokenPipe.into()));
    // Read by the macro only with the failpoints feature.
    let _ = failpoint;
    w.write(buf)
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _call = OutputCall::begin(self.shared());
        let capped = |buf: &[u8], special: bool| -> usize {
            match special {
                true => buf.len().min(SPECIAL_CALL_BYTES_MAX),
                false => buf.len(),
            }
        };
        match self {
            Output::Stdout {
                stdout,
                written,
                special,
                ..
            } => {
                let buf = &buf[..capped(buf, *special)];
                let written_now = write_failpointed(FAILPOINT_STDOUT_WRITE, stdout, buf);
                let n = written_now.map_err(|e| super::pipe_only_if_special(e, *special))?;
                *written |= n > 0;
                Ok(n)
            }
            Output::File(f) => {
                let staged = f.staged.clone();
                let file = f.open()?;
                // A regular file written in place is written under the
                // stage's lock, which the signal's handler holds from
                // emptying it to the exit: no write lands after the
                // emptying (at the old offset, past a hole). Not others: a
                // write to a FIFO may block, and the signal must still end
                // the export.
                let guard = lock_staged(&staged);
                let special = matches!(*guard, Stage::Special);
                let buf = &buf[..capped(buf, special)];
                let _held = matches!(*guard, Stage::InPlace(_)).then_some(guard);
                let mut file = file;
                let written = write_failpointed(FAILPOINT_FILE_WRITE, &mut file, buf);
                written.map_err(|e| super::pipe_only_if_special(e, special))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _call = OutputCall::begin(self.shared());
        match self {
            Output::Stdout {
                stdout, special, ..
            } => stdout
                .flush()
                .map_err(|e| super::pipe_only_if_special(e, *special)),
            Output::File(FileOutput { file: Some(f), .. }) => f.flush(),
            Output::File(_) => Ok(()),
        }
    }
}

/// Write the selected records to `out` in `format`: the number written, or
/// `None` when the reader went away (a closed pipe, `| head`), which ends an
/// export quietly. Damage met, or an output that fails (naming `out_name`),
/// is [`ConnectorError::ExportStopped`], saying how far it got.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_records(
    engine: &cairn_engine::Engine,
    chosen: &[cairn_engine::PartitionInfo],
    select: &Selection,
    times: TimeRange,
    format: Format,
    out: &mut dyn Write,
    out_name: &std::path::Path,
    stop: &AtomicBool,
) -> Result<Option<u64>> {
    let mut count = 0u64;
    let mut last: Option<String> = None;
    let stopped =
        |records, last: &Option<String>, source: ConnectorError| ConnectorError::ExportStopped {
            records,
            last: last.clone(),
            reading: None,
            source: Box::new(source),
            output: String::new(),
        };
    // A read that fails names its partition, and the offset its missing
    // records start after: the last record written may be another
    // partition's (until 2026-12-05 it alone was named), and a --from
    // that skips the damage is chosen from this.
    // The partitions after it were not read either, and a `--from` past
    // the damage would skip their records below it too (it applies to
    // every partition chosen): named, with the way round (seen in review,
    // 2026-12-06: the docs advised a bare `--from`).
    // The ways on below repeat the export's offset flags; its time range,
    // if any, goes with them (until review the same day it went unsaid,
    // and an export that followed them took every time).
    let with_times = |reading: String| {
        let given: Vec<&str> = times.given().map(|(flag, _)| flag).collect();
        if given.is_empty() {
            reading
        } else {
            format!(
                "{reading}; in each, keep this export's {} as well",
                given.join(" and ")
            )
        }
    };
    let stopped_reading = |records,
                           last: &Option<String>,
                           i: usize,
                           written_in_tp: Option<i64>,
                           source: cairn_engine::Error| {
        let tp: &cairn_engine::TopicPartition = &chosen[i].tp;
        let at = match written_in_tp {
            Some(o) => format!("{tp} after its offset {o}"),
            None => format!("{tp} before any of its records was written"),
        };
        let rest = &chosen[i + 1..];
        // Records deleted under the read (a running archive's retention,
        // or a prune) are no damage: `cairn verify` finds none, and the
        // way on starts where the read was (until 2026-12-06 it was told
        // the damage advice; found by an audit).
        if let cairn_engine::Error::PrunedUnderRead { position, .. } = &source {
            let on = format!(
                "--topic {} --partition {} --from {position}",
                tp.topic, tp.partition
            );
            // Going on suits only an output that kept the records before
            // the error (stdout, a FIFO or a device); a file was left as it
            // was or emptied.
            let go_on = if rest.is_empty() {
                format!("go on with {on}, keeping this export's --to")
            } else {
                format!(
                    "go on one partition at a time, keeping this export's --to: {on}, then, with this export's --from, --topic T --partition N for each partition after it, which were not read: {}",
                    crate::selection::first_few(rest.iter().map(|p| p.tp.to_string()))
                )
            };
            let reading = with_times(format!("{at} (records deleted under the read by retention or a prune, not damage: export again; or, where the output kept the records before it (stdout, a FIFO or a device), {go_on})"));
            return ConnectorError::ExportStopped {
                records,
                last: last.clone(),
                reading: Some(reading),
                source: Box::new(source.into()),
                output: String::new(),
            };
        }
        // Records of it below the damage went out only when some of it
        // was written: then, into an output left as it was, they are to
        // be exported again, up to (`--to`, exclusive) the one after the
        // last written (until 2026-12-07 "the damaged entry's first
        // offset, which `cairn verify` names", which it does not for a
        // page of sled's; found by an audit).
        let below = match written_in_tp {
            Some(o) => format!(
                ", and {tp}'s records below the damage, with this export's --from and --to {}",
                o.saturating_add(1)
            ),
            None => String::new(),
        };
        // Where to go on: `cairn verify` names the damaged entries of
        // cairn's own, but of a page of sled's log only its offset in
        // sled's file, and such a page can hold many entries.
        let past = match &source {
            cairn_engine::Error::Corruption {
                location: cairn_engine::Location::SledLog { .. },
                ..
            } => "a --from past the damage (a page of sled's log, which can hold many entries: `cairn verify` names its offset in sled's file, not the records in it, so try a --from further on until the read passes it)",
            _ => "a --from past the damage, which `cairn verify` names",
        };
        // The ways on (not for the only partition, damaged before anything
        // of it was written: there is none to give) keep the time range.
        let reading = if rest.is_empty() && i == 0 {
            at
        } else if rest.is_empty() {
            // The last of several: a --from past the damage alone would
            // skip the earlier partitions' records below it as well.
            with_times(format!(
                "{at} (the last partition chosen: a --from applies to every partition chosen, so go on with --topic {} --partition {} and {past}, keeping this export's --to; where the output was left as it was or emptied, as said below, the partitions before {tp}, one at a time with this export's --from and --to{below})",
                tp.topic, tp.partition
            ))
        } else {
            with_times(format!(
                "{at} (the partitions after it, in the order `cairn status` lists them, were not read either: {}; a --from applies to every partition chosen, so go on one partition at a time, keeping this export's --from and --to: --topic {} --partition {} with {past}, and --topic T --partition N for each of those; where the output was left as it was or emptied, as said below, the partitions before {tp} as well{below})",
                crate::selection::first_few(rest.iter().map(|p| p.tp.to_string())),
                tp.topic,
                tp.partition
            ))
        };
        ConnectorError::ExportStopped {
            records,
            last: last.clone(),
            reading: Some(reading),
            source: Box::new(source.into()),
            output: String::new(),
        }
    };
    // A live export gives up between records once the run stops or the
    // client goes, not only at its next full frame: with a narrow range,
    // filling one could take a scan of every partition's index.
    let stopping = |count, last: &Option<String>| {
        stopped(
            count,
            last,
            ConnectorError::Live("stopped (the run is stopping, or the command went away)".into()),
        )
    };
    // Whether the offsets chosen held any record, in the time range or not.
    let mut read_any = false;
    for (i, p) in chosen.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            return Err(stopping(count, &last));
        }
        let mut written_in_tp: Option<i64> = None;
        let records = engine
            .read_range(&p.tp, select.from, select.to)
            .map_err(|e| stopped_reading(count, &last, i, None, e))?;
        for r in records {
            if stop.load(Ordering::Relaxed) {
                return Err(stopping(count, &last));
            }
            let r = r.map_err(|e| stopped_reading(count, &last, i, written_in_tp, e))?;
            read_any = true;
            if !times.contains(r.timestamp_ms) {
                continue;
            }
            let res = match format {
                // `From` keeps the writer's own error (its kind: a closed
                // pipe), where `io::Error::other` would hide it.
                Format::Jsonl | Format::JsonlText => {
                    let l = line(&p.tp, &r, format == Format::JsonlText)
                        .map_err(|e| stopped(count, &last, e))?;
                    serde_json::to_writer(&mut *out, &l)
                        .map_err(std::io::Error::from)
                        .and_then(|_| out.write_all(b"\n"))
                }
                Format::Raw => out
                    .write_all(r.value.as_deref().unwrap_or_default())
                    .and_then(|_| out.write_all(b"\n")),
            };
            match res {
                Ok(()) => {
                    count += 1;
                    written_in_tp = Some(r.offset);
                    last = Some(format!("{}@{}", p.tp, r.offset));
                }
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(None),
                Err(source) => {
                    let e = ConnectorError::Io {
                        path: out_name.to_owned(),
                        source,
                    };
                    return Err(stopped(count, &last, e));
                }
            }
        }
    }
    // An empty result of a range would look like success. Chosen before
    // a prune that ran meanwhile, the range may no longer meet what the
    // partitions hold: that error, which lists what they do hold, first.
    if count == 0 && !chosen.is_empty() {
        if select.ranged() {
            select.choose(engine.partitions(), &[])?;
            // A gap of offsets is said as such, a time range or not (until
            // review the same day, as a time range that kept nothing).
            if times.is_unset() || !read_any {
                return Err(select.nothing_in_range());
            }
        }
        // Nor would one of a time range: said with the times, and what to
        // look at (the timestamps the chosen records carry).
        if !times.is_unset() {
            let asked: Vec<String> = times
                .given()
                .map(|(flag, ms)| format!("{flag} {}", shown_ms(ms)))
                .collect();
            return Err(ConnectorError::Config(format!(
                "{}: no record of the chosen partitions{} has a timestamp in that range (`cairn export` without it shows the records' timestamps; a record without one is in no range)",
                asked.join(" "),
                if select.ranged() {
                    " in the offsets chosen"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(Some(count))
}

#[cfg(test)]
mod tests {
    use cairn_engine::{Engine, EngineConfig, Header, Record, RecordBatch, TimestampType};

    use super::*;

    /// Outputs nothing can be written to are refused before anything is
    /// read: a socket (open(2) answers ENXIO) and a link loop (ELOOP);
    /// until 2026-12-05 both were found at the first write, after up to
    /// 1 MiB of records. A FIFO and a new file pass.
    #[test]
    fn a_socket_or_a_link_loop_is_refused_before_anything_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let looped = dir.path().join("loop");
        std::os::unix::fs::symlink(&looped, &looped).unwrap();
        for (path, says) in [(&socket, "a socket"), (&looped, "cannot be written")] {
            let err = check_output(path, &link_end(path), None).unwrap_err();
            let said = err.to_string();
            assert!(
                said.contains(says) && said.contains("nothing was read or written"),
                "{said}"
            );
        }
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let new = dir.path().join("new.jsonl");
        for path in [&fifo, &new] {
            check_output(path, &link_end(path), None).unwrap();
        }
    }

    /// Descriptors by every spelling a resolved path takes; stdout only
    /// for this process's descriptor 1.
    #[test]
    fn descriptors_are_known_by_their_resolved_names() {
        let pid = std::process::id();
        for (name, want) in [
            ("/dev/stdout".to_string(), Some(Descriptor::Stdout)),
            ("/dev/fd/1".into(), Some(Descriptor::Stdout)),
            ("/proc/self/fd/1".into(), Some(Descriptor::Stdout)),
            ("/proc/thread-self/fd/1".into(), Some(Descriptor::Stdout)),
            (format!("/proc/{pid}/fd/1"), Some(Descriptor::Stdout)),
            (
                format!("/proc/{pid}/task/{pid}/fd/1"),
                Some(Descriptor::Stdout),
            ),
            (format!("/proc/{}/fd/1", pid + 1), Some(Descriptor::Other)),
            (format!("/proc/{pid}/fd/3"), Some(Descriptor::Other)),
            ("/dev/fd/99999999999".into(), Some(Descriptor::Other)),
            ("/dev/stderr".into(), Some(Descriptor::Other)),
            ("/dev/fd/".into(), None),
            ("/proc/self/fd/x".into(), None),
            ("/proc/x/fd/1".into(), None),
            ("/tmp/fd/1".into(), None),
        ] {
            assert_eq!(descriptor_named(Path::new(&name)), want, "{name}");
        }
        // A directory that resolves to the descriptors.
        let named = |p: &str| output_descriptor(Path::new(p));
        assert_eq!(named("/dev/fd/../fd/1"), Some(Descriptor::Stdout));
        assert_eq!(named("-"), Some(Descriptor::Stdout));
        assert_eq!(named("/dev/fd/../fd/3"), Some(Descriptor::Other));
        assert_eq!(named("/tmp/out.jsonl"), None);
    }

    fn record(offset: i64, value: &[u8]) -> Record {
        Record {
            offset,
            timestamp_type: TimestampType::CreateTime,
            timestamp_ms: 7,
            key: Some(b"k".to_vec()),
            value: Some(value.to_vec()),
            headers: vec![
                Header {
                    name: "h".into(),
                    value: Some("v\u{e9}".as_bytes().to_vec()),
                },
                Header {
                    name: "n".into(),
                    value: None,
                },
            ],
        }
    }

    /// Standard output that took an export's last flush has all of it: a
    /// signal from then on (the archive's closing sync) says the export
    /// was complete, not incomplete.
    #[test]
    fn stdout_is_complete_once_its_last_flush_took_everything() {
        let staged = Staged::default();
        let w = BufWriter::new(Output::new(None, staged.clone()));
        assert!(matches!(*lock_staged(&staged), Stage::Unstaged));
        assert!(finish(w, Path::new("<stdout>")).unwrap());
        assert!(matches!(*lock_staged(&staged), Stage::Complete));
    }

    /// An export that fails within its first 1 MiB, its output a file in a
    /// directory that takes no new files (so the file would be written in
    /// place), leaves that file as it was. (Before 2026-12-03 giving up
    /// flushed the buffer, which opened the file, truncating it, and then
    /// emptied it: the previous export was lost.)
    #[test]
    fn a_failure_before_the_output_is_opened_leaves_it_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("daily.jsonl");
        std::fs::write(&out, "the previous export\n").unwrap();
        let Some(_undo) = refusing_writes(dir.path()) else {
            return;
        };
        assert!(
            std::fs::File::create(dir.path().join("probe")).is_err(),
            "the directory still takes new files"
        );
        let mut w =
            BufWriter::with_capacity(1 << 20, Output::new(Some(out.clone()), Staged::default()));
        w.write_all(b"{\"offset\":0}\n").unwrap();
        let said = abandon(w);
        assert!(said.contains("was left as it was"), "{said}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "the previous export\n"
        );
    }

    /// A stopped archive's export asked to stop by a signal once its last
    /// record was written (during its last flush, or the sync of its staged
    /// file) does not put its output in place: `F` is left as it was, the
    /// staged file removed, and the error says so, of kind `Interrupted`
    /// (`export_stopped` then exits 130). Also for an export of no record,
    /// whose file was never opened.
    #[test]
    fn a_stop_before_the_output_is_put_in_place_leaves_it_as_it_was() {
        for records in [&b"{\"offset\":0}\n"[..], b""] {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("daily.jsonl");
            std::fs::write(&out, "the previous export\n").unwrap();
            let shared = Staged::default();
            let mut w =
                BufWriter::with_capacity(1 << 20, Output::new(Some(out.clone()), shared.clone()));
            w.write_all(records).unwrap();
            w.flush().unwrap();
            shared.stop.store(true, Ordering::SeqCst);
            let calls = shared.calls.load(Ordering::SeqCst);
            let Err(ConnectorError::ExportOutput { source, .. }) = finish(w, &out) else {
                panic!("put in place")
            };
            assert_eq!(source.kind(), std::io::ErrorKind::Interrupted, "{source}");
            assert!(
                source.to_string().contains("was left as it was"),
                "{source}"
            );
            assert_eq!(
                std::fs::read_to_string(&out).unwrap(),
                "the previous export\n"
            );
            let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
            assert_eq!(files.len(), 1, "no staged file left: {files:?}");
            // Of no record: never opened (a FIFO's open could wait for
            // good), counted as no call into the output.
            if records.is_empty() {
                // The last flush's call (an empty buffer), and no open.
                assert_eq!(shared.calls.load(Ordering::SeqCst), calls + 2);
            }
        }
    }

    /// An export that fails after its output, written in place (its
    /// directory takes no new files), was opened: the file is emptied (and
    /// the emptying synced, which this test cannot see), and said so.
    #[test]
    fn a_failure_after_the_output_is_opened_in_place_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("daily.jsonl");
        std::fs::write(&out, "the previous export\n").unwrap();
        let Some(_undo) = refusing_writes(dir.path()) else {
            return;
        };
        let mut w =
            BufWriter::with_capacity(1 << 20, Output::new(Some(out.clone()), Staged::default()));
        // Past the buffer: the file is opened and written.
        w.write_all(&vec![b'x'; 3 << 20]).unwrap();
        assert!(std::fs::metadata(&out).unwrap().len() >= 2 << 20);
        let said = abandon(w);
        assert!(said.contains("was emptied, so that no part"), "{said}");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), 0);
    }

    /// An `--output` link to nothing yet is staged beside where it leads:
    /// a complete export is renamed there (the link left as it was), and a
    /// failed one leaves nothing there. Until 2026-12-05 the file was made
    /// in place through the link, its directory never synced, and a failed
    /// export left it there, empty.
    #[test]
    fn a_link_to_nothing_yet_is_staged_where_it_leads() {
        let dir = tempfile::tempdir().unwrap();
        let (link, there) = (
            dir.path().join("latest.jsonl"),
            dir.path().join("day2.jsonl"),
        );
        std::os::unix::fs::symlink("day2.jsonl", &link).unwrap();
        let export = |data: &[u8]| {
            let mut w = BufWriter::with_capacity(
                1 << 20,
                Output::new(Some(link.clone()), Staged::default()),
            );
            w.write_all(data).unwrap();
            w
        };
        // Failed, after its output was opened: nothing is left there.
        let w = export(&vec![b'x'; 3 << 20]);
        assert!(!there.exists(), "written in place");
        let said = abandon(w);
        assert!(!there.exists(), "{said}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "{said}");
        // A link to a directory not made yet is no file to make, however
        // it says so.
        let to_dir = dir.path().join("to-dir");
        for named in ["newdir/", "newdir/.", "newdir/..", "newdir//"] {
            std::os::unix::fs::symlink(named, &to_dir).unwrap();
            let mut w = BufWriter::with_capacity(
                1 << 20,
                Output::new(Some(to_dir.clone()), Staged::default()),
            );
            assert!(w.write_all(&vec![b'x'; 3 << 20]).is_err(), "{named}");
            drop(w);
            assert!(!dir.path().join("newdir").exists(), "{named}");
            std::fs::remove_file(&to_dir).unwrap();
        }
        // Complete: renamed where the link leads.
        let w = export(b"{\"offset\":0}\n");
        assert!(finish(w, &link).unwrap());
        assert_eq!(std::fs::read(&there).unwrap(), b"{\"offset\":0}\n");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    /// Makes `path` refuse writes (a directory new files, a file any
    /// write): `chattr +i` as root (who may write anything else), a
    /// read-only mode otherwise; undone when what is returned drops, so
    /// that the test's directory can be removed. As root, `chattr` and the
    /// capability to set the immutable flag are the machine's (an
    /// unprivileged container has neither): `None`, the test skipped,
    /// outside CI, which has them (until the night of 2026-12-04 it failed
    /// `cargo test` there).
    fn refusing_writes(path: &Path) -> Option<impl Drop> {
        let root = rustix::process::geteuid().is_root();
        let dir = path.is_dir();
        let path = path.to_owned();
        let set = move |on: bool| {
            if root {
                let flag = if on { "+i" } else { "-i" };
                std::process::Command::new("chattr")
                    .arg(flag)
                    .arg(&path)
                    .status()
                    .is_ok_and(|s| s.success())
            } else {
                use std::os::unix::fs::PermissionsExt;
                let mode = match (on, dir) {
                    (true, true) => 0o555,
                    (false, true) => 0o755,
                    (true, false) => 0o444,
                    (false, false) => 0o644,
                };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).is_ok()
            }
        };
        struct Undo<F: Fn(bool) -> bool>(F);
        impl<F: Fn(bool) -> bool> Drop for Undo<F> {
            fn drop(&mut self) {
                (self.0)(false);
            }
        }
        if !set(true) {
            // A mode change of one's own file does not fail.
            assert!(root, "could not make it refuse writes");
            cairn_engine::fuzzing::skip("chattr +i failed (no chattr, or no CAP_LINUX_IMMUTABLE)");
            return None;
        }
        Some(Undo(set))
    }

    /// A sticky directory that others may write (`/tmp`) keeps another
    /// user's link from being followed, unless the directory is the link
    /// owner's: for root too.
    #[test]
    fn a_sticky_directory_protects_only_another_users_link() {
        let tmp = 0o41777;
        let (me, other, root_uid) = (1000, 1001, 0);
        assert!(
            protected_link(tmp, root_uid, other, me),
            "another's link in /tmp"
        );
        assert!(protected_link(tmp, root_uid, other, root_uid), "root too");
        assert!(!protected_link(tmp, root_uid, me, me), "my own link");
        assert!(
            !protected_link(tmp, other, other, me),
            "the directory owner's"
        );
        assert!(
            !protected_link(0o40777, root_uid, other, me),
            "no sticky bit"
        );
        assert!(
            !protected_link(0o41755, root_uid, other, me),
            "not world-writable"
        );
    }

    /// A sticky directory (`/tmp`) keeps another user's file from being
    /// replaced, unless the directory is this user's, or this user is root.
    #[test]
    fn a_sticky_directory_keeps_only_another_users_file() {
        let (tmp, plain) = (0o41777, 0o40777);
        let (me, other, root_uid) = (1000, 1001, 0);
        assert!(sticky_keeps(tmp, root_uid, other, me, false));
        assert!(!sticky_keeps(tmp, root_uid, me, me, false), "my own file");
        assert!(!sticky_keeps(tmp, me, other, me, false), "my own directory");
        assert!(!sticky_keeps(tmp, root_uid, other, root_uid, true), "root");
        assert!(
            !sticky_keeps(plain, root_uid, other, me, false),
            "no sticky bit"
        );
    }

    /// An `--output` file this user may not write is refused before
    /// anything is read, and left as it was: the export, staged beside it,
    /// used to be renamed over it (or, for a file that may not be
    /// unlinked, to fail only after the whole export).
    #[test]
    fn a_write_protected_output_is_refused_before_anything_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("kept.jsonl");
        std::fs::write(&out, "kept\n").unwrap();
        let Some(_undo) = refusing_writes(&out) else {
            return;
        };
        let e = check_output(&out, &link_end(&out), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("may not be written") && e.contains("nothing was read or written"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "kept\n");
        // A writable file in the same directory is taken.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, "old\n").unwrap();
        check_output(&other, &link_end(&other), None).unwrap();
    }

    /// [`write_records`] of every record of `chosen`, raw, into `out`.
    fn raw_export(
        engine: &Engine,
        chosen: &[cairn_engine::PartitionInfo],
        out: &mut dyn Write,
        stop: &AtomicBool,
    ) -> Result<Option<u64>> {
        let all = Selection::default();
        write_records(
            engine,
            chosen,
            &all,
            TimeRange::default(),
            Format::Raw,
            out,
            Path::new("-"),
            stop,
        )
    }

    /// A live export gives up at the next record once its stop is set (the
    /// run stopping, the client gone), saying how far it got.
    #[test]
    fn an_export_gives_up_between_records_once_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        let records = (0..3).map(|o| record(o, b"v")).collect();
        engine.append(&[RecordBatch { tp, records }]).unwrap();
        let chosen = engine.partitions();
        let export = |stopped: bool| {
            let mut out = Vec::new();
            let r = raw_export(&engine, &chosen, &mut out, &AtomicBool::new(stopped));
            (r, out)
        };
        let (r, out) = export(true);
        let e = r.unwrap_err().to_string();
        assert!(out.is_empty());
        assert!(
            e.contains("export stopped after 0 records") && e.contains("the run is stopping"),
            "{e}"
        );
        let (r, out) = export(false);
        assert_eq!(r.unwrap(), Some(3));
        assert_eq!(out, b"v\nv\nv\n");
    }

    /// Records deleted under the export's read (retention on a running
    /// archive) stop it with the way on from where the read was, not the
    /// damage advice: `cairn verify` would find nothing.
    #[test]
    fn records_deleted_under_the_read_are_no_damage() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        for p in 0..2 {
            let tp = TopicPartition::new("t", p);
            for o in [0, 5, 10] {
                let records = (o..o + 5).map(|o| record(o, b"v")).collect();
                let tp = tp.clone();
                engine.append(&[RecordBatch { tp, records }]).unwrap();
            }
        }
        let chosen = engine.partitions();
        /// Deletes t/0's records below 10 at its first write: after the
        /// read took its first entry, before its second.
        struct PrunesAtFirstWrite<'e>(&'e Engine, bool, Vec<u8>);
        impl Write for PrunesAtFirstWrite<'_> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if !self.1 {
                    self.1 = true;
                    let (_, r, _) = self
                        .0
                        .truncate_by_while(&TopicPartition::new("t", 0), |_| Ok(10), || true)
                        .unwrap();
                    assert_eq!(r.entries_deleted, 2);
                }
                self.2.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut out = PrunesAtFirstWrite(&engine, false, Vec::new());
        let e = raw_export(&engine, &chosen, &mut out, &AtomicBool::new(false))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("records deleted under the read by retention or a prune, not damage")
                && e.contains("--topic t --partition 0 --from 5")
                && e.contains("which were not read: t/1"),
            "{e}"
        );
        assert!(!e.contains("cairn verify"), "{e}");
        assert_eq!(out.2, b"v\nv\nv\nv\nv\n");
    }

    /// jsonl read back gives the records archived, field for field: a null
    /// key, value or header value apart from an empty one, each timestamp
    /// type (none with -1), repeated header names in their order.
    #[test]
    fn jsonl_reads_back_as_the_records_archived() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        let h = |name: &str, value: Option<&[u8]>| Header {
            name: name.into(),
            value: value.map(<[u8]>::to_vec),
        };
        let records = vec![
            Record {
                offset: 0,
                timestamp_type: TimestampType::CreateTime,
                timestamp_ms: 1_700_000_000_000,
                key: None,
                value: Some(Vec::new()),
                headers: vec![h("a", Some(b"")), h("a", None), h("b", Some(b"\x00\xff"))],
            },
            Record {
                offset: 1,
                timestamp_type: TimestampType::LogAppendTime,
                timestamp_ms: 5,
                key: Some(Vec::new()),
                value: None,
                headers: Vec::new(),
            },
            Record {
                offset: 2,
                timestamp_type: TimestampType::NotAvailable,
                timestamp_ms: -1,
                key: Some(b"k".to_vec()),
                value: Some(b"v\n".to_vec()),
                headers: Vec::new(),
            },
        ];
        engine
            .append(&[RecordBatch {
                tp: tp.clone(),
                records: records.clone(),
            }])
            .unwrap();
        let mut out = Vec::new();
        let n = write_records(
            &engine,
            &engine.partitions(),
            &Selection::default(),
            TimeRange::default(),
            Format::Jsonl,
            &mut out,
            Path::new("-"),
            &AtomicBool::new(false),
        )
        .unwrap();
        assert_eq!(n, Some(3));
        let bytes = |v: &serde_json::Value| v.as_str().map(|s| STANDARD.decode(s).unwrap());
        let back: Vec<Record> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(
                    (v["topic"].as_str(), v["partition"].as_i64()),
                    (Some("t"), Some(0))
                );
                Record {
                    offset: v["offset"].as_i64().unwrap(),
                    timestamp_type: match v["timestamp_type"].as_str().unwrap() {
                        "create" => TimestampType::CreateTime,
                        "log-append" => TimestampType::LogAppendTime,
                        "none" => TimestampType::NotAvailable,
                        other => panic!("{other}"),
                    },
                    timestamp_ms: v["timestamp"].as_i64().unwrap(),
                    key: bytes(&v["key"]),
                    value: bytes(&v["value"]),
                    headers: v["headers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| Header {
                            name: p[0].as_str().unwrap().into(),
                            value: bytes(&p[1]),
                        })
                        .collect(),
                }
            })
            .collect();
        assert_eq!(back, records);
    }

    /// `--from-time` and `--to-time` take the records stamped in
    /// `from..to`, whatever their order by offset; a record without a
    /// timestamp is in no bounded range; a range that takes none is an
    /// error naming it, and an empty one is refused before anything.
    #[test]
    fn a_time_range_takes_the_records_stamped_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        // Timestamps out of offset order, and one record without one.
        let stamps = [3_000, 1_000, 2_000, -1, 5_000, 2_500];
        let records = stamps
            .iter()
            .enumerate()
            .map(|(o, &ts)| {
                let mut r = record(o as i64, format!("v{o}").as_bytes());
                r.timestamp_ms = ts;
                if ts < 0 {
                    r.timestamp_type = TimestampType::NotAvailable;
                }
                r
            })
            .collect();
        engine.append(&[RecordBatch { tp, records }]).unwrap();
        let chosen = engine.partitions();
        let export = |from_ms, to_ms, select: &Selection| {
            let mut out = Vec::new();
            let times = TimeRange { from_ms, to_ms };
            let r = write_records(
                &engine,
                &chosen,
                select,
                times,
                Format::Raw,
                &mut out,
                Path::new("-"),
                &AtomicBool::new(false),
            );
            (
                r.map_err(|e| e.to_string()),
                String::from_utf8(out).unwrap(),
            )
        };
        let all = Selection::default();
        assert_eq!(
            export(Some(2_000), Some(3_001), &all),
            (Ok(Some(3)), "v0\nv2\nv5\n".to_owned())
        );
        assert_eq!(
            export(None, Some(2_000), &all),
            (Ok(Some(1)), "v1\n".to_owned())
        );
        assert_eq!(
            export(Some(2_500), None, &all),
            (Ok(Some(3)), "v0\nv4\nv5\n".to_owned())
        );
        // With an offset range: both apply.
        let from_2 = Selection {
            from: 2,
            ..Default::default()
        };
        assert_eq!(
            export(Some(2_000), None, &from_2),
            (Ok(Some(3)), "v2\nv4\nv5\n".to_owned())
        );
        // Nothing stamped there: an error, not an empty export.
        let (r, out) = export(Some(6_000), None, &all);
        let e = r.unwrap_err();
        assert!(
            e.starts_with("--from-time 1970-01-01T00:00:06.000Z: no record of the chosen partitions has a timestamp in that range"),
            "{e}"
        );
        assert_eq!(out, "");
        let (r, _) = export(Some(4_000), Some(4_500), &from_2);
        let e = r.unwrap_err();
        assert!(
            e.starts_with("--from-time 1970-01-01T00:00:04.000Z --to-time 1970-01-01T00:00:04.500Z: no record of the chosen partitions in the offsets chosen has"),
            "{e}"
        );
        // An empty range is refused up front.
        let e = TimeRange {
            from_ms: Some(5),
            to_ms: Some(5),
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("an empty time range (--to-time is exclusive)"),
            "{e}"
        );
        // The flags' parser refuses what prune's refuses, in export's words.
        let e = parse_to_time("1700000000").unwrap_err();
        assert!(
            e.contains("taken for a unit slip (to bound records stamped before 1973, give the time in RFC 3339")
                && e.contains("then 1700000000000"),
            "{e}"
        );
        assert_eq!(
            parse_from_time("2023-11-14T22:13:20Z"),
            Ok(1_700_000_000_000)
        );
        // A time before 1973 is taken in RFC 3339, as the refusal says.
        assert_eq!(parse_to_time("1970-01-01T00:00:01Z"), Ok(1000));
        // Microseconds given for milliseconds: refused, not a date past
        // 9999 that humantime cannot show (its display failed, and the
        // message of a range that kept nothing panicked).
        let e = parse_from_time("1700000000000000").unwrap_err();
        assert!(e.starts_with("after the year 9999"), "{e}");
        assert_eq!(shown_ms(i64::MAX), i64::MAX.to_string());
        assert_eq!(shown_ms(-5), "-5");
    }

    /// An offset range that falls in a gap is said as a gap, also with a
    /// time range beside it (the time range's own error would blame the
    /// timestamps of records that are not there).
    #[test]
    fn a_gap_is_a_gap_whatever_the_time_range() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        let records = [0, 1, 2, 10, 11]
            .into_iter()
            .map(|o| record(o, b"v"))
            .collect();
        engine.append(&[RecordBatch { tp, records }]).unwrap();
        let gap = Selection {
            from: 4,
            to: Some(9),
            ..Default::default()
        };
        let mut out = Vec::new();
        let e = write_records(
            &engine,
            &engine.partitions(),
            &gap,
            TimeRange {
                from_ms: Some(1),
                to_ms: None,
            },
            Format::Raw,
            &mut out,
            Path::new("-"),
            &AtomicBool::new(false),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with(
                "offsets 4..9: the chosen partitions hold no records there (a gap in their offsets"
            ),
            "{e}"
        );
    }

    /// `jsonl-text` writes byte strings as text, nulls as null; bytes that
    /// are not UTF-8 stop it at their record, naming it, the field and
    /// where the text ends, after the records before it. `jsonl` writes
    /// the same record in base64.
    #[test]
    fn jsonl_text_writes_text_and_stops_at_bytes_that_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        let bad = record(1, b"ok\xffok");
        let mut null = record(2, b"");
        null.value = None;
        let records = vec![record(0, "h\u{e9}llo \"q\"\n".as_bytes()), bad, null];
        engine
            .append(&[RecordBatch {
                tp: tp.clone(),
                records,
            }])
            .unwrap();
        let chosen = engine.partitions();
        let export = |format: Format, select: &Selection| {
            let mut out = Vec::new();
            let r = write_records(
                &engine,
                &chosen,
                select,
                TimeRange::default(),
                format,
                &mut out,
                Path::new("-"),
                &AtomicBool::new(false),
            );
            (r, String::from_utf8(out).unwrap())
        };
        let all = Selection::default();
        let (r, out) = export(Format::JsonlText, &all);
        assert_eq!(
            out,
            "{\"topic\":\"t\",\"partition\":0,\"offset\":0,\"timestamp\":7,\"timestamp_type\":\"create\",\"key\":\"k\",\"value\":\"h\u{e9}llo \\\"q\\\"\\n\",\"headers\":[[\"h\",\"v\u{e9}\"],[\"n\",null]]}\n"
        );
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("export stopped after 1 record (the last t/0@0)")
                && e.contains(
                    "record t/0@1: its value is not UTF-8 from its byte 2 (counted from 0)"
                )
                && e.contains("--format jsonl writes it in base64"),
            "{e}"
        );
        let past = Selection {
            from: 2,
            ..Selection::default()
        };
        let (r, out) = export(Format::JsonlText, &past);
        assert_eq!(r.unwrap(), Some(1));
        assert!(out.contains("\"value\":null"), "{out}");
        let (r, out) = export(Format::Jsonl, &all);
        assert_eq!(r.unwrap(), Some(3));
        assert!(out.contains("\"value\":\"b2v/b2s=\""), "{out}");
        assert!(out.contains("[\"h\",\"dsOp\"]"), "{out}");
    }
}

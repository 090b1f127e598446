//! `cairn prune`: delete archived records below a cut, per partition.
//!
//! The cut is an offset (`--before`), a time (`--before-time`), an age
//! (`--older-than`) or a size to keep (`--keep-bytes`, payload bytes per
//! partition, newest entries first). A time cut becomes, per partition, the
//! first archived offset whose timestamp is at or after it, or that has no
//! age (no timestamp, or one before 1973: `cairn_engine::AGELESS_BEFORE_MS`;
//! `Engine::offset_for_retention`): everything below it is older. Records at or above the cut are never deleted.
//!
//! # Invariants
//! - Whole entries only (the engine's unit of writing): an entry that holds
//!   the cut is kept whole, so some records just below the cut may stay.
//! - A partition's next offset never moves: `cairn run` resumes where it
//!   was, and pruned records are not fetched again.
//! - `--dry-run` deletes nothing. Of a stopped archive it opens the engine,
//!   which writes as any open does (OPERATIONS.md, "What reading writes":
//!   a torn tail truncated, the checkpoint, a format-1 or format-2 archive
//!   upgraded to format 3). It checks the ends of every entry it counts as
//!   a prune would: damage that would stop the prune stops it.

use crate::count::counted;
use std::process::ExitCode;
use std::time::Duration;

use cairn_engine::{Engine, PartitionInfo};

use crate::error::{ConnectorError, Result};
use crate::pruner;
use crate::selection::Selection;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("cut").required(true).args(["before", "before_time", "older_than", "keep_bytes"])))]
pub struct PruneArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    /// Only these archived topics, comma-separated (default: all).
    #[arg(long, short = 't', visible_alias = "topics", value_delimiter = ',')]
    pub topic: Vec<String>,
    /// Only this partition (needs --topic).
    #[arg(value_parser = crate::config::whole::<i32>, long, allow_negative_numbers = true)]
    pub partition: Option<i32>,
    /// Delete records below this offset (needs --topic).
    #[arg(value_parser = crate::config::whole::<i64>, long, value_name = "OFFSET", allow_negative_numbers = true)]
    pub before: Option<i64>,
    /// Delete records with a timestamp before this time: RFC 3339 with its
    /// zone (`2026-11-01T00:00:00Z`, `2026-11-01T09:00:00+09:00`) or
    /// milliseconds since the Unix epoch.
    #[arg(long, value_name = "TIME", value_parser = parse_time_ms, allow_negative_numbers = true)]
    pub before_time: Option<i64>,
    /// Delete records older than this age (`7d`, `12h`, `90min`), measured
    /// from now by their timestamps.
    #[arg(long, value_name = "AGE", value_parser = crate::config::parse_age, allow_hyphen_values = true)]
    pub older_than: Option<Duration>,
    /// Keep at most this many payload bytes per partition (`50GiB`,
    /// `500MB`: a size with its unit; a bare number is refused): delete the
    /// oldest entries beyond it.
    #[arg(long, value_name = "SIZE", value_parser = crate::config::parse_size, allow_hyphen_values = true)]
    pub keep_bytes: Option<u64>,
    /// Report what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A time as milliseconds since the Unix epoch.
pub fn parse_time_ms(s: &str) -> std::result::Result<i64, String> {
    time_ms(s, "which would delete nothing")
}

/// [`parse_time_ms`], for a time that bounds what is read: `consequence`
/// says what a time before 1973 would do.
pub(crate) fn time_ms(s: &str, consequence: &str) -> std::result::Result<i64, String> {
    let ms = match s.parse::<i64>() {
        Ok(ms) if (0..BEFORE_TIME_MS_MIN).contains(&ms) => {
            // Seconds suggested only where they would be a time after
            // 1973 (`0` was told "then 0000"; an audit).
            let seconds = if ms >= BEFORE_TIME_MS_MIN / 1000 {
                format!(" (was this seconds? then {ms}000)")
            } else {
                String::new()
            };
            return Err(format!("before 1973 in milliseconds since the Unix epoch, {consequence}; it takes milliseconds{seconds} or RFC 3339"));
        }
        Ok(ms) => ms,
        Err(_) => rfc3339_ms(s)?,
    };
    if ms < 0 {
        return Err("must not be before the Unix epoch".into());
    }
    Ok(ms)
}

/// An RFC 3339 time with its zone, `Z` or an offset (`+09:00`), as
/// milliseconds since the Unix epoch. A time without a zone is refused
/// (since 2026-12-05; before, it was read as UTC): an operator east of UTC
/// who meant local time would have deleted hours of records more than
/// asked, and a deletion is not undone.
fn rfc3339_ms(s: &str) -> std::result::Result<i64, String> {
    // RFC 3339 allows a lower-case `t` between date and time; humantime
    // takes only `T` (or a space).
    // Messages quote what was given (`orig`), not the text changed here.
    let orig = s;
    let upper;
    let s = if s.as_bytes().get(10) == Some(&b't') {
        upper = format!("{}T{}", &s[..10], &s[11..]);
        upper.as_str()
    } else {
        s
    };
    const EXPECTED: &str = "expected RFC 3339 with its zone (2026-11-01T00:00:00Z, or an offset: 2026-11-01T09:00:00+09:00) or milliseconds since the Unix epoch";
    // `t` is the time with its zone taken off: humantime's weak parse
    // takes a `Z` of its own, which would let `…Z+09:00` or `…ZZ` through
    // with two zones, one of them ignored.
    let parse = |t: &str| {
        if t.ends_with(['Z', 'z']) {
            return Err(format!("{orig:?} has two zones: {EXPECTED}"));
        }
        // Rounded up to the millisecond: a record stamped r (whole ms) is
        // before t exactly when r < ceil(t), for a cut and a range's ends
        // alike (truncated, `…00.1235Z` took the record at …00.123 for one
        // at or after it, until 2026-12-07; found by an audit).
        humantime::parse_rfc3339_weak(t)
            .map(|at| {
                let ms = pruner::epoch_millis(at);
                let sub_ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .is_ok_and(|d| d.subsec_nanos() % 1_000_000 != 0);
                if sub_ms {
                    ms.saturating_add(1)
                } else {
                    ms
                }
            })
            .map_err(|e| format!("{e}: {EXPECTED}"))
    };
    if s.ends_with('Z') || s.ends_with('z') {
        return parse(&s[..s.len() - 1]);
    }
    // `+HH:MM` or `-HH:MM` last; humantime reads only UTC.
    let offset = s.len().checked_sub(6).and_then(|at| {
        let zone = s.get(at..)?.as_bytes();
        let sign = match zone[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let digits = |d: &[u8]| -> Option<i64> {
            d.iter().try_fold(0i64, |n, b| {
                b.is_ascii_digit().then(|| n * 10 + i64::from(b - b'0'))
            })
        };
        let (hours, minutes) = (digits(&zone[1..3])?, digits(&zone[4..6])?);
        (zone[3] == b':' && hours < 24 && minutes < 60)
            .then(|| (at, sign * (hours * 60 + minutes) * 60_000, sign < 0))
    });
    match offset {
        // `-00:00`: RFC 3339 writes a time known in UTC, its local offset
        // unknown, so; tools also write it for a local time of unknown
        // zone. For a deletion, said which (the reason given until
        // 2026-12-07 misread the RFC; an audit).
        Some((at, 0, true)) => parse(&s[..at]).and_then(|_| {
            Err(format!(
                "{orig:?} ends with -00:00, which RFC 3339 gives a time in UTC whose local offset is unknown, but which tools also write for a local time of unknown zone, so it is ambiguous here: end it with Z for UTC or its offset such as +09:00"
            ))
        }),
        Some((at, offset_ms, _)) => parse(&s[..at]).map(|ms| ms - offset_ms),
        None => parse(s).and_then(|_| {
            Err(format!(
                "{orig:?} has no zone, and a time without one is ambiguous (local time, or UTC?): end it with Z for UTC or an offset such as +09:00"
            ))
        }),
    }
}

/// Where the cut falls, before it is resolved per partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cut {
    Offset(i64),
    TimeMs(i64),
    KeepBytes(u64),
}

impl Cut {
    /// Refuse a cut no command line may give; checked again by `prune`,
    /// which a running archive calls for a cut sent to it (live.rs).
    /// `--keep-bytes 0` would empty every chosen partition
    /// (`--retain-bytes 0` is refused as well); a time more than a day
    /// ahead is one in another unit, and would delete every record with a
    /// timestamp.
    pub fn check(self) -> Result<Cut> {
        let bad = |m: String| Err(ConnectorError::Config(m));
        let now = pruner::epoch_millis(std::time::SystemTime::now());
        match self {
            Cut::Offset(o) if o < 0 => bad(format!("--before {o}: must be at least 0")),
            Cut::TimeMs(t) if t < 0 => bad(format!(
                "--before-time {t}: must not be before the Unix epoch"
            )),
            Cut::TimeMs(t) if t > now.saturating_add(BEFORE_TIME_AHEAD_MS_MAX) => bad(format!(
                "--before-time {t}{}: more than a day in the future, which would delete every record with an age: give a time at most a day ahead (a number is read as milliseconds since the Unix epoch, and one this far ahead is often microseconds or nanoseconds)",
                // The time as a date too: given in RFC 3339, the number
                // alone read as if it had been given so (until
                // 2026-12-07; found by an audit).
                date_of_ms(t).map_or(String::new(), |d| format!(" ({d})"))
            )),
            Cut::KeepBytes(0) => bad(
                "--keep-bytes 0: must be positive (to empty partitions, prune --before their next offset)"
                    .into(),
            ),
            cut => Ok(cut),
        }
    }
}

/// `ms` since the Unix epoch as an RFC 3339 date, where humantime formats
/// one (up to the year 9999).
pub(crate) fn date_of_ms(ms: i64) -> Option<String> {
    let at = datable(ms)?;
    Some(humantime::format_rfc3339(at).to_string())
}

/// `ms` since the Unix epoch as a time humantime can show as a date (from
/// 1970 up to the year 9999; its display fails past that).
pub(crate) fn datable(ms: i64) -> Option<std::time::SystemTime> {
    let ms = u64::try_from(ms)
        .ok()
        .filter(|&ms| ms < 253_402_300_800_000)?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

fn cut_of(args: &PruneArgs) -> Result<Cut> {
    cut_of_args(args)?.check()
}

/// How far ahead of now a `--before-time` may be: a clock a little ahead
/// is allowed for; anything further is a timestamp in another unit.
const BEFORE_TIME_AHEAD_MS_MAX: i64 = pruner::FUTURE_SLACK_MS;

/// The earliest `--before-time` taken as a number, 1973-03-03 in
/// milliseconds: any time of this century in seconds is below it, and no
/// record stamped earlier has an age for retention (the engine's own
/// bound, so that the two cannot drift).
const BEFORE_TIME_MS_MIN: i64 = cairn_engine::AGELESS_BEFORE_MS;

/// Refuse a selection a prune must not take with `cut`; checked by the
/// command line before it opens or asks anything, and again by [`prune`]
/// for a request sent to a running archive. A partition number alone would
/// prune that partition of every archived topic; an offset alone would cut
/// every partition of every archived topic at it, though offsets mean
/// nothing across topics; an offset range is not a cut (the cut says where
/// a prune ends) and would be ignored.
fn check_selection(selection: &Selection, cut: Cut) -> Result<()> {
    let bad = |m: &str| Err(ConnectorError::Config(m.into()));
    if selection.partition.is_some() && selection.topics.is_empty() {
        return bad("--partition: give --topic too (a partition number alone would prune that partition of every archived topic)");
    }
    if selection.from != 0 || selection.to.is_some() {
        return bad(
            "a prune takes no offset range: its cut (--before and the others) says where it ends",
        );
    }
    if let (Cut::Offset(o), true) = (cut, selection.topics.is_empty()) {
        return Err(ConnectorError::Config(format!("--before {o}: give --topic too (an offset alone would cut every partition of every archived topic at {o}, though offsets mean nothing across topics)")));
    }
    Ok(())
}

fn cut_of_args(args: &PruneArgs) -> Result<Cut> {
    let bad = |m: String| ConnectorError::Config(m);
    match (
        args.before,
        args.before_time,
        args.older_than,
        args.keep_bytes,
    ) {
        (Some(o), None, None, None) => Ok(Cut::Offset(o)),
        (None, Some(t), None, None) => Ok(Cut::TimeMs(t)),
        (None, None, Some(age), None) if age.is_zero() => Err(bad(
            "--older-than 0 (in whatever unit): must be a positive age".into(),
        )),
        // An age reaching back before 1970 deletes nothing, as `run
        // --retain` does: no record is older than the epoch (cut 0).
        (None, None, Some(age), None) => Ok(Cut::TimeMs(pruner::cut_for_age_ms(age).max(0))),
        (None, None, None, Some(b)) => Ok(Cut::KeepBytes(b)),
        // clap's group admits exactly one.
        _ => Err(bad(
            "give exactly one of --before, --before-time, --older-than, --keep-bytes".into(),
        )),
    }
}

/// The offset below which `p` is pruned under `cut`.
fn cut_offset(engine: &Engine, p: &PartitionInfo, cut: Cut) -> cairn_engine::Result<i64> {
    match cut {
        Cut::Offset(o) => Ok(o),
        Cut::TimeMs(t) => engine.offset_for_retention(&p.tp, t),
        Cut::KeepBytes(b) => engine.offset_for_retained_bytes(&p.tp, b),
    }
}

pub async fn run(args: PruneArgs) -> Result<ExitCode> {
    let selection = Selection {
        topics: args.topic.clone(),
        partition: args.partition,
        ..Selection::default()
    };
    let cut = cut_of(&args)?;
    check_selection(&selection, cut)?;
    if let Cut::KeepBytes(b) = cut {
        super::warn_if_below_an_entry("--keep-bytes", b, None, "");
    }
    let data = &args.data.data;
    if let Some(conn) = crate::live::connect(data)? {
        // The running cairn prunes, as its own --retain pass would.
        let req = crate::live::Request::Prune {
            selection,
            cut,
            dry_run: args.dry_run,
        };
        return Ok(crate::live::exit_code(&super::live_report(
            conn, &req, data,
        )??));
    }
    // A dry run deletes nothing: it reads an archive a run would refuse,
    // as the other reading commands do.
    let access = if args.dry_run {
        super::Access::Read
    } else {
        super::Access::Write
    };
    let engine = super::open_unserved(data, access)?;
    let never = std::sync::atomic::AtomicBool::new(false);
    // The report lines written, and the line that failed, if one did (a
    // full disk behind a redirect): a partition's, or one of the totals
    // after every partition was pruned. The prune stops there, and says
    // what it had done by then.
    let mut lines = 0usize;
    // The line, and the write's error.
    let mut failed: Option<(String, String)> = None;
    // Every partition pruned, and only the report's lines missing.
    let mut complete = false;
    let mut emit = |args: std::fmt::Arguments<'_>| {
        super::write_line(args)
            .inspect(|()| lines += 1)
            .inspect_err(|e| failed = Some((args.to_string(), e.to_string())))
    };
    // A panic inside a truncation poisons the engine (its own guard, or
    // the pass's as it unwinds, syncing nothing): the steps made durable
    // before it stand, later ones may be undone (the next open keeps a
    // prefix of them), and a rerun finishes.
    let pruned = super::read_unpanicked(
        "prune",
        data,
        &engine,
        if args.dry_run {
            "; a dry run: nothing was changed"
        } else {
            "; the steps it made durable stand, each whole, and of those after them the next open keeps a prefix (a step is whole or not made); run cairn verify on the archive before pruning again"
        },
        || {
            prune_noting(
                &engine,
                &selection,
                cut,
                args.dry_run,
                &never,
                &mut emit,
                &mut complete,
            )
        },
    );
    if let (Some((line, write_error)), Err(e)) = (failed, &pruned) {
        if !args.dry_run {
            // Said, so that the error is not taken for a prune that
            // deleted nothing (until 2026-12-05 it was the error alone);
            // and whether the failed write stopped it, or damage did first.
            let by_report = e.to_string() == write_error;
            super::say_warn!("{}", unwritten_report(&line, lines, by_report, complete));
        }
    }
    pruned?;
    // A dry run's too (since 2026-12-05; its drop's failed sync left the
    // poison mark, but the command exited 0).
    engine.close()?;
    Ok(ExitCode::SUCCESS)
}

/// What a prune whose report line `line` could not be written, after
/// `lines` lines were, had done. A partition's lines start with its topic
/// (its own, and a held-back age cut's), which has no space in it (Kafka's
/// rule); the totals' lines, written once every partition is pruned, start
/// with words.
/// `by_report`: the failed write is what stopped it (else an error before
/// it did, which the command ends on: a rerun meets it again).
/// `complete`: every partition chosen was pruned (the lines held back
/// until the pass's sync could not be written).
fn unwritten_report(line: &str, lines: usize, by_report: bool, complete: bool) -> String {
    let lines = counted(lines as u64, "line");
    if complete || line.starts_with("pruned ") || line.starts_with("store on disk") {
        "the prune is complete (every partition chosen was pruned as asked), but its report could not be written".into()
    } else if by_report {
        format!(
            "the prune stopped because its report could not be written, after {lines} of it: each partition reported, the one it was reporting and each a warning names are pruned (durably); a rerun prunes the rest"
        )
    } else {
        format!(
            "the prune stopped on the error below, and its report could not be written either, after {lines} of it: each partition reported, the one it was reporting and each a warning names are pruned (durably)"
        )
    }
}

/// Write the lines of partitions whose deletions are durable to `emit`.
/// Once one cannot be written, the rest are logged instead (each says a
/// durable deletion: said somewhere, also to a live prune's run log), and
/// the first error is returned.
/// A dry run's lines are logged as what it found, not as deletions (until
/// 2026-12-07 they said "pruned (durably)"; an audit).
fn say_durable(
    lines: impl Iterator<Item = String>,
    dry_run: bool,
    emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>,
) -> Result<()> {
    let mut unwritten = None;
    for line in lines {
        if unwritten.is_some() {
            if dry_run {
                tracing::warn!(%line, "a dry run, nothing deleted; its report line was not written");
            } else {
                tracing::warn!(%line, "pruned (durably); its report line was not written");
            }
        } else if let Err(e) = emit(format_args!("{line}")) {
            if dry_run {
                tracing::warn!(%line, "a dry run, nothing deleted; its report line could not be written");
            } else {
                tracing::warn!(%line, "pruned (durably); its report line could not be written");
            }
            unwritten = Some(e);
        }
    }
    unwritten.map_or(Ok(()), Err)
}

/// One prune of the selected partitions of `engine` below `cut` (or, with
/// `dry_run`, what it would delete), reported line by line to `emit`. Once
/// `stop` is set it stops after the durable step in progress, with an
/// error (a dry run, within 256 entries of its count). The
/// selection and the cut are checked first, as the command line checks
/// them: a running archive serves requests no command line built.
#[doc(hidden)] // Public for the fault-injection tests (tests/).
pub fn prune(
    engine: &Engine,
    selection: &Selection,
    cut: Cut,
    dry_run: bool,
    stop: &std::sync::atomic::AtomicBool,
    emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>,
) -> Result<()> {
    prune_noting(engine, selection, cut, dry_run, stop, emit, &mut false)
}

/// [`prune`], setting `complete` when every partition chosen was pruned
/// and the error is only that the report could not be written whole.
fn prune_noting(
    engine: &Engine,
    selection: &Selection,
    cut: Cut,
    dry_run: bool,
    stop: &std::sync::atomic::AtomicBool,
    emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>,
    complete: &mut bool,
) -> Result<()> {
    let cut = cut.check()?;
    check_selection(selection, cut)?;
    let chosen = selection.choose(engine.partitions(), &[])?;
    // An offset past everything chosen (a digit too many) would empty
    // every partition without a word: refused. To empty them, the largest
    // next offset is the cut (smaller partitions are emptied by it too).
    if let Cut::Offset(o) = cut {
        if let Some(largest) = chosen.iter().map(|p| p.next_offset).max() {
            if o > largest {
                return Err(ConnectorError::Config(format!(
                    "--before {o} is past the next offset of every partition chosen (the largest is {largest}), so it would empty them all: to do that, give --before {largest}"
                )));
            }
        }
    }
    let size_before = engine.size_on_disk()?;
    let verb = if dry_run { "would prune" } else { "pruned" };
    let mut total = pruner::PassReport::default();
    let stopping = || stop.load(std::sync::atomic::Ordering::SeqCst);
    let stopped = || {
        ConnectorError::Live(
            "stopped (the run is stopping, or the command went away) after the partitions above"
                .into(),
        )
    };
    // One pass for every partition: their deletions are made durable
    // together (one fsync for many partitions, not one each), and each
    // partition's line is written once its deletions are durable, so a
    // line never reports a deletion a crash could undo.
    let mut pass = engine.truncation_pass();
    let mut unsynced_lines: Vec<String> = Vec::new();
    // A record stamped more than a day past now holds an age cut back.
    let now_ms = pruner::epoch_millis(std::time::SystemTime::now());
    let looped = (|| -> Result<()> {
        for (i, p) in chosen.iter().enumerate() {
            if stopping() {
                return Err(stopped());
            }
            // The cut is picked under the same lock as the deletion: the
            // run's own pruner may be pruning this partition too. The
            // figures before it are read there as well: the partition may
            // have been pruned, or grown, since the partitions were chosen.
            let before = std::cell::Cell::new(None);
            let pick = |e: &Engine| {
                before.set(e.partition(&p.tp));
                cut_offset(e, p, cut)
            };
            // A stop does not wait out a large partition's steps: it ends
            // the prune after the step in progress.
            let (offset, r, finished) = if dry_run {
                // Stopped while it waited for the truncation lock: ended as
                // a prune stopped there ends.
                match engine.truncate_plan_by_while(&p.tp, pick, || !stopping()) {
                    Err(cairn_engine::Error::Interrupted { .. }) => return Err(stopped()),
                    planned => planned?,
                }
            } else {
                pass.truncate_by_while(&p.tp, pick, || !stopping())?
            };
            // Never picked and not finished: stopped while it waited for
            // the truncation lock (behind a backup or a verify), nothing
            // deleted. No line for it, as for a dry run stopped there.
            let picked = before.take();
            if picked.is_none() && !finished {
                return Err(stopped());
            }
            let before = picked.unwrap_or_else(|| p.clone());
            // Only a deletion moves the first offset: with none, the
            // engine's figure is its in-memory one, which a live write not
            // yet durable (into an emptied partition) may have moved.
            let first = match r.first_offset_after {
                Some(f) if f != before.first_offset && r.entries_deleted > 0 => {
                    format!("first offset {} -> {f}", before.first_offset)
                }
                _ => format!("first offset {}", before.first_offset),
            };
            let part_way = match (finished, dry_run) {
                (true, _) => "",
                (false, false) => " (stopped part-way; a rerun finishes it)",
                (false, true) => " (stopped part-way through counting: the counts so far)",
            };
            // A cut past this partition's end (one a larger partition
            // chosen with it reaches) takes all it holds: said, since the
            // line's "below offset N" is its end, not the offset given
            // (until 2026-12-07 only the numbers showed it; an audit).
            // Only of a partition that held records and was pruned whole.
            let past_end = match cut {
                Cut::Offset(asked)
                    if asked > before.next_offset
                        && before.first_offset < before.next_offset
                        && finished =>
                {
                    format!(" (all it held: --before {asked} is past its next offset)")
                }
                _ => String::new(),
            };
            unsynced_lines.push(format!(
                "{}/{}: {verb} {} ({}, {}) below offset {offset}; {first}; next offset {}{past_end}{part_way}",
                p.tp.topic,
                p.tp.partition,
                counted(r.records_deleted, "record"),
                counted(r.payload_bytes_deleted, "payload byte"),
                counted(r.entries_deleted, "entry"),
                before.next_offset
            ));
            // An age cut stopped by a record with no timestamp, or one far
            // ahead, not by a young one: said on a line of its own, with
            // what to do, as a run's retention says it (until 2026-12-06
            // only the run did; found by an audit).
            if let (Cut::TimeMs(_), true) = (cut, finished) {
                // A failed read here fails nothing the prune did: said.
                if let Some(h) = pruner::HeldBack::find_or_warn(engine, &p.tp, offset, now_ms) {
                    unsynced_lines.push(h.why_for_prune());
                }
            }
            if !pass.waiting() {
                // The last partition's line: nothing is left to prune.
                let last = i + 1 == chosen.len() && finished;
                say_durable(unsynced_lines.drain(..), dry_run, emit)
                    .inspect_err(|_| *complete |= last)?;
            }
            if !finished {
                return Err(stopped());
            }
            total.add(&r);
        }
        Ok(())
    })();
    // The lines held back are written only once the pass has made their
    // deletions durable. A failed sync (the engine poisoned, by this pass
    // or by the run) leaves their durability unknown, and outranks how
    // the loop ended: they are logged as such, not reported as pruned.
    let (looped, durable) = pass.finish_after_telling(looped);
    if !durable {
        for line in unsynced_lines {
            tracing::warn!(%line, "deleted, but not known to be durable (the engine is poisoned): a reopen shows whether it stands");
        }
        return looped;
    }
    match (
        looped,
        say_durable(unsynced_lines.into_iter(), dry_run, emit),
    ) {
        (looped, Ok(())) => looped?,
        // What stopped the prune (damage met in a later partition) is the
        // error, not the report's failure to be written after it: a rerun
        // meets the first again, and is told so (until 2026-12-06 the
        // command ended on the write's error, saying a rerun prunes the
        // rest; found by an audit).
        (Err(e), Err(unwritten)) => {
            tracing::error!(error = %unwritten, "the prune's report could not be written either");
            return Err(e);
        }
        // Every partition was pruned; only lines of the report are
        // missing (said so by the command, not as a stop: until
        // 2026-12-07 it said a rerun prunes the rest; an audit).
        (Ok(()), Err(unwritten)) => {
            *complete = true;
            return Err(unwritten);
        }
    }
    emit(format_args!(
        "{verb} {} ({}) in {} of {} partitions",
        counted(total.deleted.records_deleted, "record"),
        counted(total.deleted.payload_bytes_deleted, "payload byte"),
        total.partitions_pruned,
        chosen.len()
    ))?;
    if !dry_run {
        // sled reuses the space of deleted records for new ones; its files
        // shrink only as it cleans segments, so this number lags.
        let size_after = engine.size_on_disk()?;
        emit(format_args!("store on disk: {size_before} bytes before, {size_after} after (freed space is reused by new records)"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A time too far ahead is said as the number and as a date: one given
    /// in RFC 3339 is recognised in the refusal.
    #[test]
    fn a_time_too_far_ahead_is_said_as_a_date_too() {
        let e = Cut::TimeMs(4_070_908_800_000)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "--before-time 4070908800000 (2099-01-01T00:00:00Z): more than a day in the future"
            ),
            "{e}"
        );
        let e = Cut::TimeMs(i64::MAX).check().unwrap_err().to_string();
        assert!(
            e.contains(&format!("--before-time {}: more", i64::MAX)),
            "{e}"
        );
    }
    use std::sync::atomic::AtomicBool;

    /// What a running archive is sent is checked as a command line is:
    /// a request no command line builds prunes nothing.
    #[test]
    fn a_prune_refuses_what_no_command_line_may_ask_and_deletes_nothing() {
        use cairn_engine::{EngineConfig, Record, RecordBatch, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let records = (0..5).map(|o| Record::with_value(o, "v")).collect();
        let tp = TopicPartition::new("t", 0);
        engine.append(&[RecordBatch { tp, records }]).unwrap();
        let now = pruner::epoch_millis(std::time::SystemTime::now());
        let all = Selection::default();
        let cases = [
            (
                Selection {
                    partition: Some(0),
                    ..Selection::default()
                },
                Cut::Offset(5),
                "give --topic too",
            ),
            (
                Selection {
                    from: 2,
                    ..Selection::default()
                },
                Cut::Offset(5),
                "no offset range",
            ),
            (
                Selection {
                    to: Some(3),
                    ..Selection::default()
                },
                Cut::Offset(5),
                "no offset range",
            ),
            // Microseconds for milliseconds.
            (
                all.clone(),
                Cut::TimeMs(now * 1000),
                "more than a day in the future",
            ),
            (all.clone(), Cut::KeepBytes(0), "must be positive"),
            (all.clone(), Cut::Offset(-1), "at least 0"),
            (all, Cut::Offset(5), "--before 5: give --topic too"),
        ];
        for (selection, cut, want) in cases {
            for dry_run in [true, false] {
                let mut emit = |_: std::fmt::Arguments<'_>| Ok(());
                let never = AtomicBool::new(false);
                match prune(&engine, &selection, cut, dry_run, &never, &mut emit) {
                    Err(ConnectorError::Config(m)) if m.contains(want) => {}
                    other => panic!("{selection:?} {cut:?}: {other:?}"),
                }
            }
        }
        assert_eq!(engine.partitions()[0].record_count, 5, "nothing deleted");
    }

    #[test]
    fn a_stop_ends_a_prune_before_its_next_partition() {
        use cairn_engine::{EngineConfig, Record, RecordBatch, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // The first partition holds a step's bound of entries, so that its
        // deletions are made durable at once and its line is written
        // before the second partition is pruned (the pass holds back the
        // line of a partition whose deletions wait for its sync).
        let entries = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64;
        for o in 0..entries {
            let tp = TopicPartition::new("t", 0);
            let records = vec![Record::with_value(o, "v")];
            engine.write(&[RecordBatch { tp, records }]).unwrap();
        }
        let records = (0..5).map(|o| Record::with_value(o, "v")).collect();
        let tp = TopicPartition::new("t", 1);
        engine.append(&[RecordBatch { tp, records }]).unwrap();
        let mut lines = Vec::new();
        let prune_t =
            |stop: &AtomicBool, emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>| {
                let all = Selection {
                    topics: vec!["t".into()],
                    ..Selection::default()
                };
                prune(&engine, &all, Cut::Offset(entries), false, stop, emit)
            };
        let prune_all = |stop: bool, lines: &mut Vec<String>| {
            let mut emit = |a: std::fmt::Arguments<'_>| {
                lines.push(a.to_string());
                Ok(())
            };
            prune_t(&AtomicBool::new(stop), &mut emit)
        };
        let r = prune_all(true, &mut lines);
        assert!(matches!(r, Err(ConnectorError::Live(_))), "{r:?}");
        assert!(lines.is_empty(), "{lines:?}");
        let kept: u64 = engine.partitions().iter().map(|p| p.record_count).sum();
        assert_eq!(kept, entries as u64 + 5);
        // A stop that comes once the first partition is pruned (at its
        // line): the second is left whole, and the prune says it stopped.
        let stop = AtomicBool::new(false);
        let mut mid = Vec::new();
        let mut emit = |a: std::fmt::Arguments<'_>| {
            mid.push(a.to_string());
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        };
        let r = prune_t(&stop, &mut emit);
        assert!(matches!(r, Err(ConnectorError::Live(_))), "{r:?}");
        assert_eq!(mid.len(), 1, "{mid:?}");
        let counts: Vec<u64> = engine.partitions().iter().map(|p| p.record_count).collect();
        assert_eq!(counts, [0, 5], "the first pruned, the second left");
        prune_all(false, &mut lines).unwrap();
        assert_eq!(lines.len(), 4, "{lines:?}");
        let kept: u64 = engine.partitions().iter().map(|p| p.record_count).sum();
        assert_eq!(kept, 0);
    }

    /// [`prune`] of every partition of `topic` below offset 5, not a dry
    /// run and never stopped, its report into `emit`.
    fn prune_below_5(
        engine: &Engine,
        topic: &str,
        emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>,
    ) -> Result<()> {
        prune_below_5_noting(engine, topic, emit, &mut false)
    }

    /// [`prune_below_5`], noting whether every partition was pruned.
    fn prune_below_5_noting(
        engine: &Engine,
        topic: &str,
        emit: &mut dyn FnMut(std::fmt::Arguments<'_>) -> Result<()>,
        complete: &mut bool,
    ) -> Result<()> {
        let selection = Selection {
            topics: vec![topic.into()],
            ..Selection::default()
        };
        let never = AtomicBool::new(false);
        prune_noting(
            engine,
            &selection,
            Cut::Offset(5),
            false,
            &never,
            emit,
            complete,
        )
    }

    /// Partitions `0..partitions` of `topic`, each holding two entries
    /// of five records (offsets 0 to 9), written and not synced.
    fn two_entries_each(engine: &Engine, topic: &str, partitions: i32) {
        use cairn_engine::{Record, RecordBatch, TopicPartition};
        for p in 0..partitions {
            for o in [0, 5] {
                let records = (o..o + 5).map(|o| Record::with_value(o, "v")).collect();
                let tp = TopicPartition::new(topic, p);
                engine.write(&[RecordBatch { tp, records }]).unwrap();
            }
        }
    }

    /// One fsync for a prune of many partitions (until 2026-12-06, one
    /// per partition: ~1.3 s of them at 10,000 partitions), and no line
    /// written before the deletion it reports is durable.
    #[test]
    fn a_prune_of_many_partitions_makes_one_fsync_and_reports_what_is_durable() {
        use cairn_engine::{EngineConfig, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let partitions = 40;
        two_entries_each(&engine, "t", partitions);
        engine.sync().unwrap();
        let fsyncs = engine.stats().fsyncs;
        let mut lines = Vec::new();
        let mut emit = |args: std::fmt::Arguments<'_>| {
            // Each partition's line comes once its deletion is durable:
            // the durable view (what `partitions` reads) already has it.
            let line = args.to_string();
            if let Some((tp, _)) = line.split_once(": pruned ") {
                let (topic, p) = tp.split_once('/').unwrap();
                let tp = TopicPartition::new(topic, p.parse().unwrap());
                assert_eq!(engine.partition(&tp).unwrap().first_offset, 5, "{line}");
            }
            lines.push(line);
            Ok(())
        };
        prune_below_5(&engine, "t", &mut emit).unwrap();
        assert_eq!(engine.stats().fsyncs, fsyncs + 1, "one fsync for the prune");
        assert_eq!(lines.len(), partitions as usize + 2, "{lines:?}");
        assert!(lines[0].starts_with("t/0: pruned 5 records"), "{lines:?}");
        assert!(
            lines[partitions as usize].starts_with("pruned 200 records"),
            "{lines:?}"
        );
        engine.close().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert!(engine.verify().unwrap().is_clean());
        for p in engine.partitions() {
            assert_eq!((p.first_offset, p.record_count), (5, 5), "{p:?}");
        }
    }

    #[test]
    fn cuts_that_would_delete_more_than_meant_are_refused() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            prune: PruneArgs,
        }
        let cut = |args: &[&str]| {
            let mut all = vec!["prune", "--data", "/nonexistent"];
            all.extend_from_slice(args);
            cut_of(&<Cli as clap::Parser>::try_parse_from(all).unwrap().prune)
        };
        assert_eq!(
            cut(&["--topic", "t", "--partition", "0", "--before", "10"]).unwrap(),
            Cut::Offset(10)
        );
        // Microseconds where milliseconds were meant: 54,000 years ahead.
        let e = cut(&["--before-time", "1700000000000000"]).unwrap_err();
        assert!(e.to_string().contains("microseconds"), "{e}");
        let now = pruner::epoch_millis(std::time::SystemTime::now());
        let soon = (now + 3_600_000).to_string();
        assert!(matches!(cut(&["--before-time", &soon]), Ok(Cut::TimeMs(_))));
    }

    /// A report that fails at the totals, after every partition was
    /// pruned, says it is complete (until 2026-12-05 it said the prune
    /// stopped), and so does one that fails at a partition's line once
    /// every partition is pruned (until 2026-12-07).
    #[test]
    fn an_unwritten_report_says_how_far_the_prune_got() {
        use cairn_engine::EngineConfig;
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        two_entries_each(&engine, "t.x-1", 2);
        engine.sync().unwrap();
        // Fails at the line numbered `at` (0-based): what is said then.
        let said = |at: usize| said_failing_at(&engine, "t.x-1", at);
        // The first call prunes both partitions, their lines held back for
        // the pass's sync; later calls find nothing to delete, and write
        // each partition's line within the pass. Either way the last
        // partition's line, or any before it once all are pruned, fails
        // with the prune complete (until 2026-12-07 the first two said it
        // stopped, and that a rerun prunes the rest; an audit). Then the
        // totals, then the sizes.
        for at in [0, 1, 2, 3] {
            assert!(
                said(at).starts_with("the prune is complete"),
                "{at}: {}",
                said(at)
            );
        }
    }

    /// What a prune below 5 of `topic` says of itself when its report's
    /// line numbered `at` (0-based) cannot be written.
    fn said_failing_at(engine: &Engine, topic: &str, at: usize) -> String {
        let (mut lines, mut failed) = (0, None);
        let mut emit = |args: std::fmt::Arguments<'_>| {
            if lines == at {
                failed = Some(args.to_string());
                return Err(ConnectorError::Live("full".into()));
            }
            lines += 1;
            Ok(())
        };
        let mut complete = false;
        assert!(prune_below_5_noting(engine, topic, &mut emit, &mut complete).is_err());
        unwritten_report(&failed.expect("a line failed"), lines, true, complete)
    }

    /// Whatever line of the report fails, the prune says it is complete
    /// exactly when every partition was pruned, and says it stopped
    /// otherwise: with every partition's line held back for the pass's
    /// fsync, and with partitions pruned before (nothing to delete, so
    /// their lines are written at once, within the pass).
    #[test]
    fn an_unwritten_report_says_complete_only_when_it_is() {
        use cairn_engine::{EngineConfig, TopicPartition};
        let mut stopped = 0;
        for (partitions, pruned_before) in [(1, 0), (3, 0), (40, 0), (3, 1), (3, 2), (5, 3)] {
            for at in 0..partitions as usize + 2 {
                let dir = tempfile::tempdir().unwrap();
                let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
                two_entries_each(&engine, "t", partitions);
                // A truncation cuts only what is durable.
                engine.sync().unwrap();
                for p in 0..pruned_before {
                    let r = engine
                        .truncate_before(&TopicPartition::new("t", p), 5)
                        .unwrap();
                    assert_eq!(r.records_deleted, 5);
                }
                let said = said_failing_at(&engine, "t", at);
                let pruned = (0..partitions).all(|p| {
                    engine
                        .partition(&TopicPartition::new("t", p))
                        .unwrap()
                        .first_offset
                        == 5
                });
                assert_eq!(
                    said.starts_with("the prune is complete"),
                    pruned,
                    "{partitions} partitions, {pruned_before} pruned before, failing at line {at}: {said}"
                );
                stopped += usize::from(said.contains("a rerun prunes the rest"));
            }
        }
        assert!(stopped > 0, "no case stopped before the end");
    }

    /// Damage that stops a prune at a later partition is what it ends on,
    /// not the failure to write the earlier partitions' lines after it
    /// (held until the pass's fsync), and what it says of itself names
    /// both (until 2026-12-06 it ended on the write's error, saying a rerun
    /// prunes the rest, which meets the damage again; found by an audit).
    #[test]
    fn damage_outranks_an_unwritten_report() {
        use cairn_engine::{EngineConfig, TopicPartition};
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
            two_entries_each(&engine, "t", 2);
            engine.close().unwrap();
        }
        cairn_engine::fuzzing::with_raw_tree(dir.path(), |t| {
            let k = cairn_engine::keys::index_key(&TopicPartition::new("t", 1), 0);
            let mut v = t.get(&k).unwrap().expect("t/1's first entry").to_vec();
            v[2] ^= 1;
            t.insert(k, v).unwrap();
        });
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let mut failed = None;
        let mut emit = |args: std::fmt::Arguments<'_>| {
            failed = Some(args.to_string());
            Err(ConnectorError::Live("full".into()))
        };
        let err = prune_below_5(&engine, "t", &mut emit).expect_err("t/1 is damaged");
        assert!(
            matches!(&err, ConnectorError::Engine(e) if e.is_corruption()),
            "{err}"
        );
        let line = failed.expect("t/0's line was written after the damage");
        assert!(line.starts_with("t/0: pruned 5 records"), "{line}");
        let said = unwritten_report(&line, 0, false, false);
        assert!(
            said.starts_with("the prune stopped on the error below, and its report could not be written either, after 0 lines"),
            "{said}"
        );
    }

    #[test]
    fn times_parse_as_rfc3339_or_millis() {
        assert_eq!(parse_time_ms("1700000000000"), Ok(1_700_000_000_000));
        assert_eq!(parse_time_ms("2023-11-14T22:13:20Z"), Ok(1_700_000_000_000));
        assert_eq!(
            parse_time_ms("2023-11-14T22:13:20.5Z"),
            Ok(1_700_000_000_500)
        );
        assert!(parse_time_ms("-1").is_err());
        // With an offset, or with a space for the `T`.
        for t in [
            "2023-11-15T07:13:20+09:00",
            "2023-11-14T22:13:20+00:00",
            "2023-11-14T17:43:20-04:30",
            "2023-11-14 22:13:20Z",
            "2023-11-14T22:13:20z",
        ] {
            assert_eq!(parse_time_ms(t), Ok(1_700_000_000_000), "{t}");
        }
        // No zone: ambiguous, refused (it was read as UTC).
        for t in ["2023-11-14T22:13:20", "2023-11-14 22:13:20"] {
            let e = parse_time_ms(t).unwrap_err();
            assert!(
                e.contains("has no zone") && e.contains("+09:00"),
                "{t}: {e}"
            );
        }
        for t in [
            "2023-11-14T22:13:20+24:00",
            "2023-11-14T22:13:20+0900",
            "2023-11-14T22:13:20+09:60",
            // A bad time before an unknown offset is said as bad.
            "2023-11-14T25:13:20-00:00",
            // Two zones, one of which humantime's weak parse took.
            "2023-11-14T22:13:20Z+09:00",
            "2023-11-14T22:13:20ZZ",
            "2023-11-14T22:13:20zZ",
        ] {
            let e = parse_time_ms(t).unwrap_err();
            assert!(e.contains("RFC 3339 with its zone"), "{t}: {e}");
        }
        // RFC 3339's UTC with an unknown local offset: ambiguous here, and
        // said so (it was told as a time badly written).
        for t in ["2023-11-14T22:13:20-00:00", "2023-11-14T22:13:20.5-00:00"] {
            let e = parse_time_ms(t).unwrap_err();
            assert!(
                e.contains("local offset is unknown")
                    && e.contains("ambiguous here")
                    && e.contains("+09:00"),
                "{t}: {e}"
            );
        }
        // A fraction of a millisecond rounds up: a record stamped at the
        // whole millisecond below is before the time.
        for (t, ms) in [
            ("2023-11-14T22:13:20.0005Z", 1_700_000_000_001),
            ("2023-11-14T22:13:20.123456789Z", 1_700_000_000_124),
            ("2023-11-14T22:13:20.123Z", 1_700_000_000_123),
            ("2023-11-14T22:13:20.1235+00:00", 1_700_000_000_124),
        ] {
            assert_eq!(parse_time_ms(t), Ok(ms), "{t}");
        }
        // RFC 3339's lower-case separators; a refusal quotes what was given.
        assert_eq!(parse_time_ms("2023-11-14t22:13:20z"), Ok(1_700_000_000_000));
        let e = parse_time_ms("2023-11-14t22:13:20").unwrap_err();
        assert!(e.starts_with("\"2023-11-14t22:13:20\" has no zone"), "{e}");
        // Seconds for milliseconds.
        let e = parse_time_ms("1767225600").unwrap_err();
        assert!(e.contains("was this seconds? then 1767225600000"), "{e}");
        // Not for a number no seconds make a time after 1973.
        let e = parse_time_ms("0").unwrap_err();
        assert!(e.contains("before 1973") && !e.contains("seconds?"), "{e}");
        let e = parse_time_ms("yesterday").unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
        assert!(crate::config::parse_age("7d").is_ok());
        assert!(crate::config::parse_age("soon").unwrap_err().contains("7d"));
        // Under a millisecond, an age cuts at now: every record would go.
        for age in ["500us", "999999ns", "1ns"] {
            let e = crate::config::parse_age(age).unwrap_err();
            assert!(e.contains("under a millisecond"), "{age}: {e}");
        }
        assert_eq!(crate::config::parse_age("1ms").unwrap().as_millis(), 1);
        assert!(crate::config::parse_age("0s").unwrap().is_zero());
        // `m` is minutes to humantime and months to many people.
        for age in ["6m", "6M", "1h30m", "2 m"] {
            let e = crate::config::parse_age(age).unwrap_err();
            assert!(e.contains("write min or months"), "{age}: {e}");
        }
        for (age, s) in [
            ("90min", 5_400),
            ("6months", 6 * 2_630_016),
            ("1h30min", 5_400),
        ] {
            assert_eq!(crate::config::parse_age(age).unwrap().as_secs(), s, "{age}");
        }
    }
}

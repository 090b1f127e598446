//! Archive retention: deleting archived records older than an age, or
//! beyond a size per partition.
//!
//! `cairn prune` runs one pass and exits. `cairn run --retain AGE` (and/or
//! `--retain-bytes SIZE`) makes a
//! pass before it starts consuming (an archive the pass cannot prune stops
//! the start), then runs a [`Pruner`] thread beside the archive: a pass
//! every `--retention-check-interval-s`, and a last one at a clean stop.
//!
//! A time cut becomes, per partition, the first archived offset whose
//! timestamp is at or after it, or unknown (`Engine::offset_for_retention`),
//! A size cut is the lowest entry from which the partition's entries hold at
//! most the size in payload bytes (`Engine::offset_for_retained_bytes`).
//! With both, the higher cut wins. The engine deletes the whole entries
//! below the cut.
//!
//! # Invariants
//! - A pass's deletions are durable before it returns its report (one
//!   [`TruncationPass`](cairn_engine::TruncationPass): an fsync per step's
//!   worth of deletions, not per partition).
//! - Nothing at or above a partition's cut is deleted. An entry that holds
//!   the cut is kept whole, so a few older records may stay until the next
//!   pass after it falls entirely below.
//! - A partition's durable next offset never moves: the run resumes and
//!   commits exactly as it would without pruning, and pruned records are
//!   never fetched again.
//! - A failed pass (I/O error, corruption, a poisoned engine, a panic) is
//!   never retried. The pruner stops and says so through its failure hook
//!   at once; `cairn run`'s hook stops the run cleanly, idle or not (what
//!   was archived is fsynced and committed unless the engine itself
//!   failed), and the sink's `stop` returns the error, so the run fails
//!   with it.
//! - A record without a timestamp (any negative one), or stamped before
//!   1973 (`cairn_engine::AGELESS_BEFORE_MS`: a stamp in seconds, most
//!   likely), has no age: it and everything above it stay, and a pass
//!   reports it ([`HeldBack`], as it does a record stamped more than a day
//!   ahead).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_engine::{Engine, TopicPartition, TruncateReport};

/// `t` in milliseconds since the Unix epoch, negative before it
/// (saturating at `i64`'s bounds).
pub fn epoch_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// The time `age` before now, in milliseconds since the Unix epoch:
/// negative before 1970, where no Kafka timestamp is, so nothing is older.
pub fn cut_for_age_ms(age: Duration) -> i64 {
    age_cut_ms(epoch_millis(SystemTime::now()), age)
}

/// The time `age` before `now_ms` (saturating: an age beyond the epoch
/// cuts nothing).
pub fn age_cut_ms(now_ms: i64, age: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX))
}

/// How far this machine's clock may run ahead of the time a run has
/// counted since it started before `cairn run`'s retention stops following
/// it ([`RunClock`]): an hour. Clock corrections of a synchronised host
/// are seconds; a jump of hours is a bad time source, or a VM resumed with
/// the wrong time.
pub const CLOCK_JUMP_MS: i64 = 3_600_000;

/// The clock `cairn run`'s retention measures ages from: this machine's,
/// unless it has run ahead (by more than [`CLOCK_JUMP_MS`]) of the
/// machine's clock at the pruner's start plus the time counted since
/// (`counted_time`: the raw monotonic clock, plus suspends); then that
/// count, until the clock is in line again or the next start. A clock set ahead by days would otherwise delete, at
/// the next pass, every record younger than the retention by as much, for
/// good (seen in review, 2026-12-05). A clock that goes back is followed:
/// its cut deletes less. One wrong when the run starts is taken as it is.
pub struct RunClock {
    wall0_ms: i64,
    counted0: Duration,
}

impl RunClock {
    pub fn start() -> RunClock {
        RunClock {
            wall0_ms: epoch_millis(SystemTime::now()),
            counted0: counted_time(),
        }
    }

    /// Now, in milliseconds since the epoch, as age cuts take it; and how
    /// far the machine's clock is ahead of it, when it is not followed.
    pub fn now_ms(&self) -> (i64, Option<i64>) {
        let counted = counted_time().saturating_sub(self.counted0);
        let counted_ms = i64::try_from(counted.as_millis()).unwrap_or(i64::MAX);
        judge_clock(
            epoch_millis(SystemTime::now()),
            self.wall0_ms.saturating_add(counted_ms),
        )
    }
}

/// The time since boot as the hardware counts it: `CLOCK_MONOTONIC_RAW`,
/// which no time daemon adjusts (`CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`
/// are slewed with the machine's clock, so a bad time source that slews
/// it ahead would move the count along with it), plus the time spent
/// suspended (`CLOCK_BOOTTIME` less `CLOCK_MONOTONIC`), which the raw
/// clock does not count. It drifts from true time by the oscillator's
/// error, tens of parts per million: seconds a day, far below
/// [`CLOCK_JUMP_MS`] for any run but one of years.
fn counted_time() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    let at = |id| {
        let t = clock_gettime(id);
        Duration::new(
            t.tv_sec.max(0) as u64,
            t.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    };
    let suspended = at(ClockId::Boottime).saturating_sub(at(ClockId::Monotonic));
    at(ClockId::MonotonicRaw).saturating_add(suspended)
}

/// [`RunClock::now_ms`]'s judgement: the machine's clock `wall_ms`, unless
/// it is more than [`CLOCK_JUMP_MS`] ahead of the run's count `run_ms`;
/// then the count, and by how much the clock is ahead.
pub fn judge_clock(wall_ms: i64, run_ms: i64) -> (i64, Option<i64>) {
    let ahead = wall_ms.saturating_sub(run_ms);
    if ahead > CLOCK_JUMP_MS {
        (run_ms, Some(ahead))
    } else {
        (wall_ms, None)
    }
}

/// What one pass over the archive deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub partitions_pruned: u64,
    pub deleted: TruncateReport,
    /// The partitions whose age cut stopped at a record that holds it back
    /// ([`HeldBack`]).
    pub held_back: Vec<HeldBack>,
    /// The partitions the size bound emptied: their newest entry alone
    /// holds more payload than it keeps, so every pass deletes all they
    /// archived since the last.
    pub emptied_by_size: Vec<TopicPartition>,
}

/// A day: how far ahead of this machine's clock a timestamp must be to
/// hold age retention back in a pass's report (a few minutes of clock skew
/// is no such record), and how far ahead a `prune --before-time` may lie
/// (a time further ahead is a timestamp in another unit).
pub const FUTURE_SLACK_MS: i64 = 24 * 3600 * 1000;

/// A partition whose age cut stopped at a record with no age (a negative
/// timestamp, or one before 1973: `cairn_engine::AGELESS_BEFORE_MS`) or
/// stamped more than [`FUTURE_SLACK_MS`] ahead: it and every
/// record above it are kept, whatever their age, for good or until then.
/// The pass says so (a WARN, once per partition and offset in a run): the
/// archive would otherwise grow under a `--retain` the operator believes
/// in force, with nothing but a DEBUG "nothing to prune" (found in review,
/// 2026-12-05).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBack {
    pub tp: TopicPartition,
    pub offset: i64,
    pub timestamp_ms: i64,
    /// The offset above the last record of its entry: `prune --before`
    /// deletes whole entries, so this is the lowest that deletes it.
    pub entry_next_offset: i64,
}

impl HeldBack {
    /// The record holding `tp`'s age cut back at `cut`, if one does: one
    /// with no timestamp (or one before 1973), or stamped more than [`FUTURE_SLACK_MS`] past
    /// `now_ms` (`Engine::timestamp_holding_back`). For a run's pass and a
    /// `cairn prune` alike.
    pub fn find(
        engine: &Engine,
        tp: &TopicPartition,
        cut: i64,
        now_ms: i64,
    ) -> cairn_engine::Result<Option<HeldBack>> {
        let ahead = now_ms.saturating_add(FUTURE_SLACK_MS);
        Ok(engine
            .timestamp_holding_back(tp, cut, ahead)?
            .map(|h| HeldBack {
                tp: tp.clone(),
                offset: cut,
                timestamp_ms: h.timestamp_ms,
                entry_next_offset: h.entry_next_offset,
            }))
    }

    /// [`find`](Self::find), a failure WARNed (naming where, for damage)
    /// and taken as no record found: the read only tells why the cut is
    /// where it is, and fails nothing the pass did. It reads the cut's
    /// whole entry, which the cut itself may not have read (an entry its
    /// index says is young throughout), so damage there would otherwise
    /// fail every pass of a run, and stop every start (until 2026-12-07;
    /// found by an audit), though `cairn prune` went on.
    pub fn find_or_warn(
        engine: &Engine,
        tp: &TopicPartition,
        cut: i64,
        now_ms: i64,
    ) -> Option<HeldBack> {
        Self::find(engine, tp, cut, now_ms).unwrap_or_else(|e| {
            tracing::warn!(%tp, error = %e, "could not tell whether a record with no timestamp, or one far ahead, holds the age cut back{}", if e.is_corruption() { " (the archive is damaged there: run `cairn verify`)" } else { "" });
            None
        })
    }

    /// What holds retention back, and what to do about it (`by_size`: a
    /// size bound is set already).
    pub fn why(&self, by_size: bool) -> String {
        let Self {
            tp,
            offset,
            entry_next_offset: end,
            ..
        } = self;
        let what = self.what();
        let bound = if by_size {
            ""
        } else {
            "bound the partition by size (--retain-bytes), or "
        };
        format!(
            "retention by age is held back in {tp} at offset {offset}: that record {what}; it and every record above it are kept whatever their age. To go on, {bound}delete it once it is no longer needed with cairn prune --topic {} --partition {} --before {end} (a prune deletes whole entries: that deletes every record below offset {end}, the younger ones of its entry too)",
            tp.topic,
            tp.partition,
        )
    }

    /// The same for `cairn prune --older-than` / `--before-time`: a line
    /// of the prune's report, after the partition's own.
    pub fn why_for_prune(&self) -> String {
        let Self {
            tp,
            offset,
            entry_next_offset: end,
            ..
        } = self;
        format!(
            "{tp}: the age cut stops at offset {offset}: that record {}; it and every record above it are kept whatever their age. To delete it once it is no longer needed: cairn prune --topic {} --partition {} --before {end} (whole entries: every record below offset {end}, the younger ones of its entry too)",
            self.what(),
            tp.topic,
            tp.partition,
        )
    }

    /// What the record's timestamp is, as it holds an age cut back.
    fn what(&self) -> String {
        let ts = &self.timestamp_ms;
        if *ts < 0 {
            format!("has no timestamp ({ts}), so no age")
        } else if *ts < cairn_engine::AGELESS_BEFORE_MS {
            let at = UNIX_EPOCH + Duration::from_millis(*ts as u64);
            // Seconds since 2001 (10^9) read as milliseconds; below that
            // it is no time of Kafka's in either unit.
            let seconds = if *ts >= 1_000_000_000 {
                format!(
                    ": most likely a timestamp in seconds (it would be {})",
                    humantime::format_rfc3339(UNIX_EPOCH + Duration::from_secs(*ts as u64))
                )
            } else {
                String::new()
            };
            format!(
                "is stamped {} ({ts} ms since the epoch), before 1973{seconds}, so no age is taken from it",
                humantime::format_rfc3339_millis(at),
            )
        } else {
            // humantime formats years up to 9999 only.
            let date = if *ts < 253_402_300_800_000 {
                let at = UNIX_EPOCH + Duration::from_millis(*ts as u64);
                format!("{} ", humantime::format_rfc3339_millis(at))
            } else {
                String::new()
            };
            format!("is stamped {date}({ts} ms since the epoch), more than a day in the future (a producer's clock set ahead, or a timestamp in microseconds), and is young until then")
        }
    }
}

/// What `cairn run` keeps: records younger than `age`, and per partition
/// the newest entries holding at most `partition_bytes_max` payload bytes.
/// Either, both, or (not pruning at all) neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub age: Option<Duration>,
    pub partition_bytes_max: Option<u64>,
}

impl PassReport {
    /// Count one partition's truncation.
    pub fn add(&mut self, r: &TruncateReport) {
        if r.entries_deleted > 0 {
            self.partitions_pruned += 1;
            self.deleted.add_counts(r);
        }
    }
}

impl Retention {
    pub fn is_set(&self) -> bool {
        self.age.is_some() || self.partition_bytes_max.is_some()
    }
}

/// Where `tp` is cut under `retention`, with the age measured from `now_ms`
/// (milliseconds since the epoch): the higher of the age's cut and the
/// size's; and the age's cut alone, if one is set.
pub fn cut_offset(
    engine: &Engine,
    tp: &TopicPartition,
    retention: &Retention,
    now_ms: i64,
) -> cairn_engine::Result<(i64, Option<i64>)> {
    let by_age = retention
        .age
        .map(|age| engine.offset_for_retention(tp, age_cut_ms(now_ms, age)))
        .transpose()?;
    let mut cut = by_age.unwrap_or(0);
    if let Some(bytes) = retention.partition_bytes_max {
        cut = cut.max(engine.offset_for_retained_bytes(tp, bytes)?);
    }
    Ok((cut, by_age))
}

/// One pass: prune every archived partition to `retention`, ages measured
/// from `now_ms()` (milliseconds since the epoch, read at each cut), asking
/// `go` before each partition and between a partition's durable steps. Once
/// it says no the pass ends after the step in progress, with what it
/// deleted (a prefix of each partition, the archive consistent) and
/// `false`.
pub fn prune(
    engine: &Engine,
    retention: &Retention,
    now_ms: &dyn Fn() -> i64,
    go: &dyn Fn() -> bool,
) -> cairn_engine::Result<(PassReport, bool)> {
    // A poisoned engine fails the pass even when nothing is due.
    engine.check_usable()?;
    // One fsync for the pass's deletions, not one per partition (a pass
    // over 10,000 partitions each losing an entry took 10,000 until
    // 2026-12-06): made durable before the report goes out.
    let mut truncations = engine.truncation_pass();
    let pruned = prune_in(engine, &mut truncations, retention, now_ms, go);
    truncations.finish_after(pruned)
}

/// [`prune`]'s partitions, truncated in `truncations`.
fn prune_in(
    engine: &Engine,
    truncations: &mut cairn_engine::TruncationPass<'_>,
    retention: &Retention,
    now_ms: &dyn Fn() -> i64,
    go: &dyn Fn() -> bool,
) -> cairn_engine::Result<(PassReport, bool)> {
    let mut pass = PassReport::default();
    for p in engine.partitions() {
        if p.record_count == 0 {
            continue;
        }
        if !go() {
            return Ok((pass, false));
        }
        // The age's cut and the time it was measured from, kept from the
        // truncation's pick (under its lock) for the report below.
        let mut by_age = None;
        let mut cut_at = 0;
        let (_, deleted, finished) = truncations.truncate_by_while(
            &p.tp,
            |e| {
                let now = now_ms();
                let (cut, age_cut) = cut_offset(e, &p.tp, retention, now)?;
                by_age = age_cut.map(|c| (c, now));
                cut_at = cut;
                Ok(cut)
            },
            go,
        )?;
        pass.add(&deleted);
        // Emptied by the size bound, not by age: a bound below one entry
        // (about 1 MiB, plus its last record) keeps nothing, pass after
        // pass (found by an audit, 2026-12-07: said at INFO only, as
        // "pruned").
        let emptied = deleted.records_deleted > 0
            && deleted.first_offset_after == Some(p.next_offset)
            && cut_at >= p.next_offset;
        if emptied
            && retention.partition_bytes_max.is_some()
            && by_age.is_none_or(|(c, _)| c < p.next_offset)
        {
            pass.emptied_by_size.push(p.tp.clone());
        }
        if !finished {
            return Ok((pass, false));
        }
        // An index lookup, unless the cut stopped at a record that may
        // hold it back (`timestamp_holding_back`).
        if let Some((cut, now)) = by_age {
            pass.held_back
                .extend(HeldBack::find_or_warn(engine, &p.tp, cut, now));
        }
    }
    Ok((pass, true))
}

/// Called once, from the pruner's thread, when a pass fails: `cairn run`
/// asks the run to stop (it then fails with the pruner's error).
pub type FailureHook = Box<dyn Fn(&str) + Send>;

/// What the owner tells the thread.
enum Order {
    /// Make a last pass, then end.
    Finish,
}

/// The retention thread of `cairn run --retain`.
pub struct Pruner {
    /// `Finish` for a last pass; dropped without it (the run failed, or the
    /// sink was dropped) the thread ends without one.
    orders: Option<mpsc::Sender<Order>>,
    thread: Option<JoinHandle<()>>,
    failure: Arc<Mutex<Option<String>>>,
    /// Set when dropped: a pass in progress ends after its durable step
    /// (a failed run's teardown does not wait out a large pass).
    cancelled: Arc<AtomicBool>,
}

impl Pruner {
    /// Prune to `retention` now, on this thread; then start the thread
    /// that prunes every `check_every`, and once more when stopped.
    /// `on_failure` hears of a pass that fails (or panics) on the thread;
    /// the pass is not retried, and the pruner stops.
    pub fn start(
        engine: Arc<Engine>,
        retention: Retention,
        check_every: Duration,
        on_failure: FailureHook,
    ) -> Result<Pruner, String> {
        let never = Arc::new(AtomicBool::new(false));
        Self::start_until(engine, retention, check_every, on_failure, never)
    }

    /// [`start`](Self::start), for a run that stops once `stop` is set:
    /// a pass in progress then ends after its durable step (the first
    /// pass of `--retain` on a large archive takes minutes, which a stop
    /// must not wait out), and no last pass follows one cut short (it
    /// would do the same work). A first pass cut short starts no thread.
    /// The last pass of a stop that cut nothing short runs whole.
    pub fn start_until(
        engine: Arc<Engine>,
        retention: Retention,
        check_every: Duration,
        on_failure: FailureHook,
        stop: Arc<AtomicBool>,
    ) -> Result<Pruner, String> {
        let cancelled = Arc::new(AtomicBool::new(false));
        let go = {
            let cancelled = cancelled.clone();
            move || !stop.load(Ordering::Relaxed) && !cancelled.load(Ordering::Relaxed)
        };
        let no_thread = || Pruner {
            orders: None,
            thread: None,
            failure: Arc::new(Mutex::new(None)),
            cancelled: cancelled.clone(),
        };
        let mut passes = Passes::new(RunClock::start());
        if !guarded_pass(&engine, &retention, &go, &mut passes)? {
            return Ok(no_thread());
        }
        let (tx, rx) = mpsc::channel::<Order>();
        let failure = Arc::new(Mutex::new(None));
        let failed = failure.clone();
        let thread = std::thread::Builder::new()
            .name("cairn-pruner".into())
            .spawn(move || loop {
                let last = match rx.recv_timeout(check_every) {
                    // Stopping: the stop's own last pass follows.
                    Err(RecvTimeoutError::Timeout) if !go() => continue,
                    Err(RecvTimeoutError::Timeout) => false,
                    Ok(Order::Finish) => true,
                    Err(RecvTimeoutError::Disconnected) => return,
                };
                // The last pass runs whole: the stop that asks for it has
                // set the flag already (a second signal exits at once).
                let whole = || true;
                let go: &dyn Fn() -> bool = if last { &whole } else { &go };
                match guarded_pass(&engine, &retention, go, &mut passes) {
                    Err(e) => {
                        tracing::error!(error = %e, "retention pass failed; not retried, the run stops");
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                        on_failure(&e);
                        return;
                    }
                    // Cut short by the stop: the last pass would do its work.
                    Ok(false) => return,
                    Ok(true) if last => return,
                    Ok(true) => {}
                }
            })
            .map_err(|e| format!("start the pruner thread: {e}"))?;
        Ok(Pruner {
            orders: Some(tx),
            thread: Some(thread),
            failure,
            cancelled,
        })
    }

    /// Why the pruner stopped, if a pass failed.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Make a last pass, stop the thread and wait for it; the error of any
    /// failed pass.
    pub fn stop(mut self) -> Result<(), String> {
        if let Some(tx) = self.orders.take() {
            // The thread may have ended already (a failed pass).
            let _ = tx.send(Order::Finish);
        }
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| "retention: the pruner thread panicked".to_owned())?;
        }
        self.failure().map_or(Ok(()), Err)
    }

    /// [`stop`](Self::stop) without a last pass and without waiting for
    /// the thread: a pass in progress may wait for ever behind a live
    /// backup stuck in a system call (which holds truncations off). The
    /// thread is left to stop at its next check (the drop cancels it), or
    /// with the process; every pass step is durable alone. The error of a
    /// pass that failed before, as `stop`'s.
    pub fn abandon(mut self) -> Result<(), String> {
        if self.thread.take().is_some_and(|t| !t.is_finished()) {
            tracing::warn!("the pruner is not waited for (a live request is stuck): no last retention pass at this stop, and one in progress ends at its next step or with the process");
        }
        self.failure().map_or(Ok(()), Err)
    }
}

impl Drop for Pruner {
    /// Ends the thread without a last pass (a stop that is not clean),
    /// a pass in progress after its durable step.
    fn drop(&mut self) {
        self.cancelled.store(true, Ordering::Relaxed);
        self.orders.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The failpoint in every pass (`fail` crate; compiled in with the
/// connector's `failpoints` feature, for tests).
#[doc(hidden)]
pub const FAILPOINT_PASS: &str = "pruner::pass";

/// [`pass`], with a panic turned into its error: the first pass runs on
/// the starting thread, the others on the pruner's, and either way a
/// panicking pass is a failed pass that stops the run, not a process ended
/// by the panic. The engine is poisoned first, as for any panic caught
/// while the engine was used (a live request's, a command's): the pass
/// reads through sled (its cuts, the record holding age retention back),
/// which panics on damage to its own files, and a store it may have left
/// half-changed is then neither flushed by the engine's close nor trusted
/// from the page cache by the next open; nothing more is committed (until
/// 2026-12-06 the run's clean stop committed and closed it as usual; found
/// by an audit).
fn guarded_pass(
    engine: &Engine,
    retention: &Retention,
    go: &dyn Fn() -> bool,
    passes: &mut Passes,
) -> Result<bool, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pass(engine, retention, go, passes)
    }))
    .unwrap_or_else(|payload| {
        let what = cairn_engine::panic_message(&*payload);
        engine.poison_after_caught_panic("retention pass", what);
        Err(format!("retention: the pruner panicked: {what}"))
    })
}

/// What a run's passes keep from one to the next.
struct Passes {
    /// Where ages are measured from.
    clock: RunClock,
    /// The offset each partition's age retention was last said to be held
    /// back at ([`HeldBack`]): said once per partition and offset in a
    /// run, not every pass.
    held_said: std::collections::HashMap<TopicPartition, i64>,
    /// How far ahead the machine's clock was when that was last said:
    /// said again only for another jump.
    jump_said: Option<i64>,
    /// Partitions the size bound was said to empty (once per run each).
    emptied_said: std::collections::HashSet<TopicPartition>,
}

impl Passes {
    fn new(clock: RunClock) -> Passes {
        Passes {
            clock,
            held_said: Default::default(),
            jump_said: None,
            emptied_said: Default::default(),
        }
    }

    /// Say (a WARN) when the machine's clock has jumped ahead of the run's
    /// count, once per jump, and (an INFO) when it is back in line: a
    /// pass's ages are measured from the count meanwhile ([`RunClock`]).
    fn say_clock(&mut self) {
        let (now, ahead) = self.clock.now_ms();
        let again = ahead.is_some_and(|a| {
            self.jump_said
                .is_none_or(|said| (a - said).abs() > CLOCK_JUMP_MS)
        });
        if again {
            let ahead_s = ahead.unwrap_or_default() / 1000;
            tracing::warn!(
                ahead_s,
                counted_ms = now,
                "this machine's clock is {ahead_s} s ahead of the time this run has counted since it started: retention by age goes on measuring from the run's count, not from the clock, which would delete records younger than the retention; set the clock right, or, if it is right now (corrected after a VM was paused, or after a start before the first time sync), start the run again to measure from it",
            );
        }
        if ahead.is_none() && self.jump_said.is_some() {
            tracing::info!("this machine's clock is back in line with the time this run has counted: retention by age measures from the clock again");
        }
        self.jump_said = match ahead {
            Some(a) if again => Some(a),
            Some(_) => self.jump_said,
            None => None,
        };
    }
}

/// One pass, logged; whether it finished (`go` said no part-way).
fn pass(
    engine: &Engine,
    retention: &Retention,
    go: &dyn Fn() -> bool,
    passes: &mut Passes,
) -> Result<bool, String> {
    fail::fail_point!(FAILPOINT_PASS, |a| Err(format!(
        "retention: failpoint {FAILPOINT_PASS}: {}",
        a.unwrap_or_default()
    )));
    let t0 = std::time::Instant::now();
    if retention.age.is_some() {
        passes.say_clock();
    }
    let clock = &passes.clock;
    let now_ms = || clock.now_ms().0;
    let (r, finished) = prune(engine, retention, &now_ms, go).map_err(|e| match e {
        // Every start would meet it again: say how to go on meanwhile.
        cairn_engine::Error::Corruption { .. } => format!(
            "retention: {e}; the archive is damaged there (cairn verify lists all its damage): to go on archiving meanwhile, start with --retain none --retain-bytes none and without --retention-check-interval-s, which also set aside a retention the config file gives (docs/OPERATIONS.md, \"When the archive is damaged\")"
        ),
        e => format!("retention: {e}"),
    })?;
    let took_ms = t0.elapsed().as_millis() as u64;
    if !finished {
        tracing::info!(
            records = r.deleted.records_deleted,
            took_ms,
            "retention pass cut short by the stop (what it deleted is durable; the next start's pass goes on)"
        );
        return Ok(false);
    }
    if r.deleted.records_deleted > 0 {
        tracing::info!(
            records = r.deleted.records_deleted,
            payload_bytes = r.deleted.payload_bytes_deleted,
            entries = r.deleted.entries_deleted,
            partitions = r.partitions_pruned,
            took_ms,
            "pruned"
        );
    } else {
        tracing::debug!(took_ms, "retention pass: nothing to prune");
    }
    for tp in &r.emptied_by_size {
        if passes.emptied_said.insert(tp.clone()) {
            tracing::warn!(
                partition = %tp,
                retain_bytes = retention.partition_bytes_max.unwrap_or_default(),
                "--retain-bytes keeps nothing of this partition: its newest entry alone holds more payload than that (entries are cut at about 1 MiB, plus their last record), so every pass deletes all it archived since; raise --retain-bytes above 1 MiB plus --record-bytes-max (said once per partition in a run)"
            );
        }
    }
    for h in &r.held_back {
        if passes.held_said.insert(h.tp.clone(), h.offset) != Some(h.offset) {
            let why = h.why(retention.partition_bytes_max.is_some());
            tracing::warn!(partition = %h.tp, offset = h.offset, timestamp_ms = h.timestamp_ms, "{why}");
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::{EngineConfig, Record, RecordBatch};

    const DAY_MS: i64 = 86_400_000;

    /// A store in a new temporary folder, and a put of one record of
    /// t/0 at `offset` stamped `ts`.
    fn store() -> (tempfile::TempDir, Engine, impl Fn(i64, i64) -> RecordBatch) {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let one = |offset, ts| {
            let mut r = Record::with_value(offset, "v");
            r.timestamp_ms = ts;
            RecordBatch {
                tp: TopicPartition::new("t", 0),
                records: vec![r],
            }
        };
        (dir, e, one)
    }

    /// Age retention of `days`.
    fn keeping_days(days: u64) -> Retention {
        Retention {
            age: Some(Duration::from_secs(days * 86_400)),
            ..Retention::default()
        }
    }

    /// The machine's clock is followed unless it is more than an hour
    /// ahead of the run's count; behind it, it is followed (it deletes
    /// less).
    #[test]
    fn a_clock_far_ahead_of_the_runs_count_is_not_followed() {
        let run = 1_700_000_000_000;
        assert_eq!(judge_clock(run, run), (run, None));
        assert_eq!(
            judge_clock(run + CLOCK_JUMP_MS, run),
            (run + CLOCK_JUMP_MS, None)
        );
        assert_eq!(
            judge_clock(run + CLOCK_JUMP_MS + 1, run),
            (run, Some(CLOCK_JUMP_MS + 1))
        );
        assert_eq!(
            judge_clock(run - 30 * DAY_MS, run),
            (run - 30 * DAY_MS, None)
        );
        assert_eq!(judge_clock(i64::MAX, i64::MIN), (i64::MIN, Some(i64::MAX)));
    }

    /// A run whose machine clock jumped ten days ahead of its count keeps
    /// records a week old under a week's retention, measuring from its
    /// count; the clock, followed, would have deleted them. Once the clock
    /// is in line again the same pass deletes them.
    #[test]
    fn a_pass_after_a_jump_ahead_measures_ages_from_the_runs_count() {
        let (_dir, e, one) = store();
        let wall = epoch_millis(SystemTime::now());
        // Eight days old by the clock, then an hour old.
        e.append(&[one(0, wall - 8 * DAY_MS)]).unwrap();
        e.append(&[one(1, wall - 3_600_000)]).unwrap();
        let week = keeping_days(7);
        // The run started, by its count, ten days before the clock's now.
        let mut passes = Passes::new(RunClock {
            wall0_ms: wall - 10 * DAY_MS,
            counted0: counted_time(),
        });
        let (now, ahead) = passes.clock.now_ms();
        assert!(now < wall - 9 * DAY_MS, "{now}");
        assert!(ahead.is_some_and(|a| a > 9 * DAY_MS), "{ahead:?}");
        assert!(pass(&e, &week, &|| true, &mut passes).unwrap());
        assert!(passes.jump_said.is_some());
        assert_eq!(e.partitions()[0].first_offset, 0, "nothing deleted");
        // In line again: the week old record goes.
        passes.clock = RunClock::start();
        assert!(pass(&e, &week, &|| true, &mut passes).unwrap());
        assert_eq!(passes.jump_said, None);
        assert_eq!(e.partitions()[0].first_offset, 1);
    }

    /// A size bound below the partition's newest entry empties it at every
    /// pass: said once per partition in a run (the WARN itself is not
    /// captured; what decides it is). A bound that keeps the newest entry
    /// says nothing.
    #[test]
    fn a_size_bound_that_keeps_nothing_is_said_once() {
        let (_dir, e, _) = store();
        let tp = TopicPartition::new("t", 0);
        let entry = |from: i64| RecordBatch {
            tp: tp.clone(),
            records: (from..from + 10)
                .map(|o| Record::with_value(o, vec![b'v'; 1000]))
                .collect(),
        };
        e.append(&[entry(0)]).unwrap();
        let small = Retention {
            partition_bytes_max: Some(5_000),
            ..Retention::default()
        };
        let mut passes = Passes::new(RunClock::start());
        let (r, _) = prune(&e, &small, &|| 0, &|| true).unwrap();
        assert_eq!(r.emptied_by_size, vec![tp.clone()]);
        assert_eq!(e.partitions()[0].record_count, 0);
        e.append(&[entry(10)]).unwrap();
        assert!(pass(&e, &small, &|| true, &mut passes).unwrap());
        assert!(passes.emptied_said.contains(&tp));
        // One that keeps the newest entry: nothing to say.
        e.append(&[entry(20)]).unwrap();
        let roomy = Retention {
            partition_bytes_max: Some(20_000),
            ..Retention::default()
        };
        let (r, _) = prune(&e, &roomy, &|| 0, &|| true).unwrap();
        assert_eq!(r.emptied_by_size, vec![]);
        assert_eq!(e.partitions()[0].record_count, 10);
    }

    /// A record that holds age retention back is said once per partition
    /// and offset in a run: what decides it, the offsets said, follows the
    /// record that holds it back (the WARN itself is not captured).
    #[test]
    fn a_hold_is_said_once_per_partition_and_offset() {
        let (_dir, e, one) = store();
        let tp = TopicPartition::new("t", 0);
        e.append(&[one(0, -1)]).unwrap();
        let day = keeping_days(1);
        let mut passes = Passes::new(RunClock::start());
        assert!(pass(&e, &day, &|| true, &mut passes).unwrap());
        assert_eq!(passes.held_said.get(&tp), Some(&0));
        // Another record without a timestamp, the first deleted by hand:
        // said for its own offset.
        e.append(&[one(1, -1)]).unwrap();
        e.truncate_before(&tp, 1).unwrap();
        assert!(pass(&e, &day, &|| true, &mut passes).unwrap());
        assert_eq!(passes.held_said.get(&tp), Some(&1));
    }

    /// Damage in the entry at the age cut, which the cut did not read (its
    /// index says every record in it is young), fails no pass: the read
    /// that tells whether a record far ahead holds the cut back is WARNed.
    /// Until 2026-12-07 it failed every pass, and so every start of the
    /// run, while `cairn prune` went on.
    #[test]
    fn damage_read_only_to_tell_a_hold_fails_no_pass() {
        let (dir, e, _) = store();
        let wall = epoch_millis(SystemTime::now());
        let mut young = Record::with_value(0, "v");
        young.timestamp_ms = wall;
        let mut ahead = Record::with_value(1, "v");
        ahead.timestamp_ms = wall + 2 * DAY_MS;
        e.append(&[RecordBatch {
            tp: TopicPartition::new("t", 0),
            records: vec![young, ahead],
        }])
        .unwrap();
        // Not the last frame, which every open checks.
        let mut later = Record::with_value(0, "v");
        later.timestamp_ms = wall;
        e.append(&[RecordBatch {
            tp: TopicPartition::new("t", 1),
            records: vec![later],
        }])
        .unwrap();
        e.close().unwrap();
        // A byte of the records frame's body flipped, under its checksum.
        cairn_engine::fuzzing::with_raw_tree(dir.path(), |t| {
            let (key, value) = t
                .scan_prefix([cairn_engine::keys::wal_key(0)[0]])
                .map(Result::unwrap)
                .find(|(_, v)| !v.is_empty())
                .expect("t/0's frame, the first");
            let mut value = value.to_vec();
            let at = value.len() - 2;
            value[at] ^= 0x40;
            t.insert(key, value).unwrap();
        });
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        assert!(e.read(&tp, 0).unwrap().any(|r| r.is_err()), "damaged");
        let mut passes = Passes::new(RunClock::start());
        assert!(pass(&e, &keeping_days(7), &|| true, &mut passes).unwrap());
        assert_eq!(e.partitions()[0].first_offset, 0, "nothing deleted");
    }
}

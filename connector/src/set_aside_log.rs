//! What a run says of the records it sets aside: oversize records skipped
//! or dead-lettered under `--on-oversize`, and records that cannot be
//! archived, skipped under `--on-oversize skip`.
//!
//! One WARN per record flooded the log when a topic held many such records
//! (980 lines for 980 records of a 1,000-record topic under a low
//! `--record-bytes-max`; a million for a million), and a log that floods
//! hides the lines that matter. The first record of each partition and kind
//! is still said in full at WARN; those after it are said at DEBUG and
//! counted, and their count, first and last offsets and largest size are
//! said in one WARN once [`SAID_INTERVAL`] has passed since the partition
//! was last said, at each progress report, and when the run stops.
//!
//! # Invariants
//! - Every record set aside is either said at WARN itself or counted in a
//!   WARN summary that names its partition and an offset range holding it:
//!   the log accounts for each one (the archive shows them too, as gaps in
//!   their partition's offsets).
//! - At most one summary per partition and kind per [`SAID_INTERVAL`] while
//!   records keep coming, besides those said with progress reports.
//! - A count waits at most [`SAID_INTERVAL`] (and a turn of the consumer's
//!   loop) to be said. A process killed outright (SIGKILL, a crash) loses
//!   the counts it had not said: at most that long's worth. The log is no
//!   durable record; the dead-letter topic is, and the archive's offsets
//!   show every record set aside as a gap.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::TopicPartition;

/// How often a partition's records set aside of one kind are said again at
/// WARN while they keep coming.
pub(crate) const SAID_INTERVAL: Duration = Duration::from_secs(10);

/// Why a record was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Over `--record-bytes-max` or the header limit, skipped.
    OversizeSkipped,
    /// Over `--record-bytes-max` or the header limit, sent to the
    /// dead-letter topic.
    DeadLettered,
    /// Not convertible into a record (`ConnectorError::UnreadableRecord`),
    /// skipped.
    UnreadableSkipped,
}

impl Kind {
    fn said(self, records: u64) -> &'static str {
        match (self, records == 1) {
            (Kind::OversizeSkipped, false) => "oversize records skipped",
            (Kind::OversizeSkipped, true) => "oversize record skipped",
            (Kind::DeadLettered, false) => "oversize records dead-lettered",
            (Kind::DeadLettered, true) => "oversize record dead-lettered",
            (Kind::UnreadableSkipped, false) => "records that cannot be archived skipped",
            (Kind::UnreadableSkipped, true) => "record that cannot be archived skipped",
        }
    }
}

/// Records of one partition and kind set aside since it was last said.
#[derive(Debug)]
struct Quiet {
    said_at: Instant,
    records: u64,
    first: i64,
    last: i64,
    size_bytes_max: u64,
}

/// A summary of records set aside and not said one by one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    pub kind: Kind,
    pub tp: TopicPartition,
    pub records: u64,
    pub first: i64,
    pub last: i64,
    pub size_bytes_max: u64,
}

impl Summary {
    pub(crate) fn log(&self) {
        tracing::warn!(
            tp = %self.tp,
            records = self.records,
            first_offset = self.first,
            last_offset = self.last,
            size_bytes_max = self.size_bytes_max,
            "{} more {} {} (said at DEBUG; the archive shows each as a gap in the partition's offsets)",
            self.records,
            self.kind.said(self.records),
            if self.first == self.last {
                format!("at offset {}", self.first)
            } else {
                format!("between offsets {} and {}", self.first, self.last)
            },
        );
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct SetAsideLog {
    quiet: BTreeMap<(Kind, TopicPartition), Quiet>,
    /// When the oldest count not yet said is due ([`SetAsideLog::say_due`]),
    /// if any is waiting: the consumer's loop asks at every turn, and reads
    /// the clock only then.
    due_at: Option<Instant>,
}

/// What to say of one record set aside.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Say {
    /// Say it in full at WARN.
    Warn,
    /// Say it at DEBUG: it is counted for a summary.
    Debug,
    /// Say it at DEBUG and this summary, which counts it, at WARN.
    Summary(Summary),
}

impl Say {
    /// Say the record with `record` (given `true` for WARN, `false` for
    /// DEBUG: a tracing level is fixed per call site), then the summary
    /// that counts it, if any.
    pub(crate) fn say(self, record: impl FnOnce(bool)) {
        match self {
            Say::Warn => record(true),
            Say::Debug => record(false),
            Say::Summary(s) => {
                record(false);
                s.log();
            }
        }
    }
}

impl SetAsideLog {
    /// A record of `tp` at `offset`, `size_bytes` of payload, was set aside
    /// as `kind` at `now`.
    pub(crate) fn note(
        &mut self,
        kind: Kind,
        tp: &TopicPartition,
        offset: i64,
        size_bytes: u64,
        now: Instant,
    ) -> Say {
        let Some(q) = self.quiet.get_mut(&(kind, tp.clone())) else {
            self.quiet.insert(
                (kind, tp.clone()),
                Quiet {
                    said_at: now,
                    records: 0,
                    first: offset,
                    last: offset,
                    size_bytes_max: 0,
                },
            );
            return Say::Warn;
        };
        if q.records == 0 {
            q.first = offset;
            q.size_bytes_max = 0;
        }
        q.records += 1;
        q.last = offset;
        q.size_bytes_max = q.size_bytes_max.max(size_bytes);
        if now.saturating_duration_since(q.said_at) < SAID_INTERVAL {
            wait_for(&mut self.due_at, q.said_at);
            return Say::Debug;
        }
        q.said_at = now;
        Say::Summary(take(kind, tp, q))
    }

    /// The summaries of every record counted and not yet said, to say at a
    /// progress report or at the end of the run.
    pub(crate) fn drain(&mut self, now: Instant) -> Vec<Summary> {
        self.said_since(now, Duration::ZERO)
    }

    /// Say the counts whose [`SAID_INTERVAL`] has passed since their
    /// partition was last said: the first WARN's promise of a count within
    /// the interval holds when no more records come (the next one, a
    /// progress report or the stop said it, which with progress reports
    /// off could be days; until review, 2026-12-07).
    pub(crate) fn say_due(&mut self) {
        let Some(due) = self.due_at else {
            return;
        };
        let now = Instant::now();
        if now >= due {
            for s in self.due(now) {
                s.log();
            }
        }
    }

    /// The summaries due at `now`, each counted partition's said then.
    fn due(&mut self, now: Instant) -> Vec<Summary> {
        self.said_since(now, SAID_INTERVAL)
    }

    /// The summaries of the counts whose partition was last said `age` or
    /// longer before `now`, each said then; the next due time of the rest.
    fn said_since(&mut self, now: Instant, age: Duration) -> Vec<Summary> {
        self.due_at = None;
        let mut out = Vec::new();
        for ((kind, tp), q) in &mut self.quiet {
            if q.records == 0 {
                continue;
            }
            if now.saturating_duration_since(q.said_at) >= age {
                q.said_at = now;
                out.push(take(*kind, tp, q));
            } else {
                wait_for(&mut self.due_at, q.said_at);
            }
        }
        out
    }
}

/// `due_at`, made no later than [`SAID_INTERVAL`] after `said_at`.
fn wait_for(due_at: &mut Option<Instant>, said_at: Instant) {
    let due = said_at + SAID_INTERVAL;
    *due_at = Some(due_at.map_or(due, |d| d.min(due)));
}

fn take(kind: Kind, tp: &TopicPartition, q: &mut Quiet) -> Summary {
    let s = Summary {
        kind,
        tp: tp.clone(),
        records: q.records,
        first: q.first,
        last: q.last,
        size_bytes_max: q.size_bytes_max,
    };
    q.records = 0;
    s
}

/// A run that stops on an error never reaches its last progress report:
/// what was counted is said here, so that no record set aside goes
/// unaccounted in the log.
impl Drop for SetAsideLog {
    fn drop(&mut self) {
        for s in self.drain(Instant::now()) {
            s.log();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn the_first_of_each_partition_and_kind_is_said_in_full_and_the_rest_counted() {
        let t0 = Instant::now();
        let mut log = SetAsideLog::default();
        assert_eq!(
            log.note(Kind::OversizeSkipped, &tp(0), 5, 200, t0),
            Say::Warn
        );
        assert_eq!(
            log.note(Kind::OversizeSkipped, &tp(1), 9, 200, t0),
            Say::Warn
        );
        assert_eq!(log.note(Kind::DeadLettered, &tp(0), 6, 200, t0), Say::Warn);
        for (i, offset) in (7..1000).enumerate() {
            let at = t0 + Duration::from_millis(i as u64);
            assert_eq!(
                log.note(Kind::OversizeSkipped, &tp(0), offset, 300 + i as u64, at),
                Say::Debug
            );
        }
        // The interval passed: the next one is said with the count, and
        // the offsets and largest size of all those counted.
        let at = t0 + SAID_INTERVAL;
        assert_eq!(
            log.note(Kind::OversizeSkipped, &tp(0), 1000, 100, at),
            Say::Summary(Summary {
                kind: Kind::OversizeSkipped,
                tp: tp(0),
                records: 994,
                first: 7,
                last: 1000,
                size_bytes_max: 300 + 992,
            })
        );
        // Said: the next within the interval is counted afresh.
        assert_eq!(
            log.note(Kind::OversizeSkipped, &tp(0), 1001, 100, at),
            Say::Debug
        );
        assert_eq!(
            log.drain(at),
            vec![Summary {
                kind: Kind::OversizeSkipped,
                tp: tp(0),
                records: 1,
                first: 1001,
                last: 1001,
                size_bytes_max: 100,
            }]
        );
        assert_eq!(log.drain(at), vec![], "each counted record is said once");
        // After a drain the interval starts again.
        assert_eq!(
            log.note(Kind::OversizeSkipped, &tp(0), 1002, 100, at),
            Say::Debug
        );
    }

    #[test]
    fn counts_are_said_when_due_though_no_more_records_come() {
        let t0 = Instant::now();
        let mut log = SetAsideLog::default();
        assert_eq!(log.note(Kind::DeadLettered, &tp(0), 1, 10, t0), Say::Warn);
        assert_eq!(log.note(Kind::DeadLettered, &tp(1), 1, 10, t0), Say::Warn);
        let t1 = t0 + Duration::from_secs(4);
        assert_eq!(log.note(Kind::DeadLettered, &tp(0), 2, 10, t1), Say::Debug);
        assert_eq!(log.due_at, Some(t0 + SAID_INTERVAL));
        assert_eq!(log.due(t0 + Duration::from_secs(9)), vec![]);
        assert_eq!(log.due_at, Some(t0 + SAID_INTERVAL), "still due");
        assert_eq!(
            log.due(t0 + SAID_INTERVAL),
            vec![Summary {
                kind: Kind::DeadLettered,
                tp: tp(0),
                records: 1,
                first: 2,
                last: 2,
                size_bytes_max: 10,
            }]
        );
        assert_eq!(log.due_at, None, "nothing left to say");
    }
}

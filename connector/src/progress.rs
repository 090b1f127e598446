//! A running archive's progress and lag, reported while it runs.
//!
//! `cairn status` on a running archive shows the durable figures the run
//! serves (and, with `--brokers`, Kafka's view beside them), not the run's
//! rate, latency or lag as it sees them; the run reports those itself. Every
//! `progress_interval_s` (and once more at a clean stop) the consumer thread
//! logs one line and hands a [`Progress`] to `PipelineOptions::on_progress`.
//!
//! The interval is librdkafka's `statistics.interval.ms`: its statistics
//! carry each assigned partition's log start and end as the last fetch saw
//! them (the end is the last stable offset, as cairn reads
//! `read_committed`: the high watermark unless transactions are open), so
//! a report costs no request to Kafka. The commit tracker knows what is durable and what is committed.
//!
//! Limits, by design: the report at stop uses the last statistics (up to an
//! interval old; asking the consumer's own connection for watermarks queues
//! behind its fetch long-polls, about 0.3 s a partition against the mock
//! cluster); with an interval of 0 there are no statistics, so no lag; and
//! statistics are served by `poll`, so while the consumer thread waits (for
//! room in the hand-over queue, or for a revoke) no line appears.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use hdrhistogram::Histogram;

/// Where a partition started fetching, for its lag before the first put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    At(i64),
    /// At `from`, for a partition this store committed `committed` of and
    /// then lost records below it: all of them (`from` is Kafka's log start
    /// at the assignment: retention.rs, `refetch_lost`), or those past what
    /// its archive holds. Records before `committed` were archived once;
    /// records from it on never were, and if they age out before they are
    /// fetched, `--on-offset-out-of-range` judges them.
    Refetch {
        from: i64,
        committed: i64,
    },
    /// Kafka's log start (`--auto-offset-reset earliest`).
    Beginning,
    /// Kafka's log end (`--auto-offset-reset latest`).
    End,
}

impl Start {
    /// The offset it starts at, when that is a number (`At`, `Refetch`).
    pub(crate) fn offset(&self) -> Option<i64> {
        match self {
            Start::At(o) | Start::Refetch { from: o, .. } => Some(*o),
            Start::Beginning | Start::End => None,
        }
    }

    /// The commit below which records were archived once, of a
    /// [`Start::Refetch`].
    pub(crate) fn archived_below(&self) -> Option<i64> {
        match self {
            Start::Refetch { committed, .. } => Some(*committed),
            _ => None,
        }
    }
}

/// A partition's log start and end, from librdkafka's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogBounds {
    pub start: i64,
    pub end: i64,
}

/// One assigned partition, as of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProgress {
    pub tp: TopicPartition,
    /// Kafka's log end as the consumer last saw it: the last stable offset
    /// (None until the partition was fetched and a statistics report came).
    pub log_end: Option<i64>,
    /// The next offset the archive holds durably (None until this run made
    /// one durable or opened the archive with one).
    pub durable: Option<i64>,
    /// The offset last committed to Kafka.
    pub committed: Option<i64>,
    /// Records Kafka has that the archive has not made durable: from the
    /// later of the durable offset and where the partition started
    /// (records below where the run fetches from are not waiting for it:
    /// another store in the group archived them, or they aged out).
    pub archive_lag: Option<i64>,
}

impl PartitionProgress {
    /// Records Kafka has past the committed offset: what a lag monitor sees
    /// for the group. A transaction's commit marker takes an offset too: on
    /// transactional topics this (and the archive lag) reads 1 until the
    /// fetch catches up past the marker and that is committed
    /// (`SinkTask::caught_up`; before the night of 2026-12-04, for ever).
    pub fn commit_lag(&self) -> Option<i64> {
        Some((self.log_end? - self.committed?).max(0))
    }
}

/// A lag summed over the partitions where it is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lag {
    pub records: i64,
    /// Partitions left out: not fetched yet, no statistics (interval 0), or,
    /// for the commit lag, nothing committed yet.
    pub unknown_partitions: usize,
}

/// A run's progress: totals since the start, rates and latencies over the
/// interval since the previous report, and the lag of every assigned
/// partition.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The report made at a clean stop (the others are periodic).
    pub at_stop: bool,
    pub elapsed: Duration,
    /// The time this report covers: since the previous one, or, at the
    /// stop, the whole run (as `elapsed`).
    pub interval: Duration,
    pub records_written: u64,
    /// Records written per second over the interval.
    pub records_per_s: f64,
    pub puts: u64,
    pub commits: u64,
    /// Records set aside so far, as `--on-oversize` says: skipped (with a
    /// record that cannot be read as the archive stores it), and sent to
    /// the dead-letter topic. Until 2026-12-05 only the stop's line said
    /// how many, and a run that failed never did.
    pub records_skipped: u64,
    pub records_dead_lettered: u64,
    /// Put-to-commit of the puts whose commit was acknowledged in the
    /// interval (None when there was none).
    pub put_to_commit_p50_us: Option<u64>,
    pub put_to_commit_p99_us: Option<u64>,
    pub partitions: Vec<PartitionProgress>,
}

impl Progress {
    fn total(&self, lag: impl Fn(&PartitionProgress) -> Option<i64>) -> Lag {
        let known: Vec<i64> = self.partitions.iter().filter_map(&lag).collect();
        Lag {
            // Saturating: log ends come from the brokers' statistics.
            records: known.iter().fold(0i64, |a, &b| a.saturating_add(b)),
            unknown_partitions: self.partitions.len() - known.len(),
        }
    }

    pub fn archive_lag(&self) -> Lag {
        self.total(|p| p.archive_lag)
    }

    pub fn commit_lag(&self) -> Lag {
        self.total(PartitionProgress::commit_lag)
    }

    /// The partition furthest behind in the archive, if any is.
    pub fn most_behind(&self) -> Option<&PartitionProgress> {
        self.partitions
            .iter()
            .filter(|p| p.archive_lag.is_some_and(|l| l > 0))
            .max_by_key(|p| p.archive_lag)
    }

    /// A lag as the line gives it: none (the field left out) when no
    /// partition's is known (none assigned yet, no statistics yet,
    /// `--progress-interval-s 0`), never a 0 that reads as caught up
    /// (until 2026-12-05 it was 0 then; seen in review). A number when
    /// given, also in `--log-format json`.
    fn shown(&self, lag: &Lag) -> Option<i64> {
        (lag.unknown_partitions != self.partitions.len()).then_some(lag.records)
    }

    /// One log line's worth.
    pub fn log(&self) {
        let (archive, commit) = (self.archive_lag(), self.commit_lag());
        let ms =
            |us: Option<u64>| us.map_or("-".to_owned(), |us| format!("{:.2}", us as f64 / 1e3));
        tracing::info!(
            records_written = self.records_written,
            records_per_s = self.records_per_s.round() as u64,
            puts = self.puts,
            commits = self.commits,
            records_skipped = self.records_skipped,
            records_dead_lettered = self.records_dead_lettered,
            put_to_commit_p50_ms = %ms(self.put_to_commit_p50_us),
            put_to_commit_p99_ms = %ms(self.put_to_commit_p99_us),
            partitions = self.partitions.len(),
            archive_lag = self.shown(&archive),
            commit_lag = self.shown(&commit),
            lag_unknown_partitions = archive.unknown_partitions,
            commit_lag_unknown_partitions = commit.unknown_partitions,
            most_behind = %self.most_behind().map_or("-".to_owned(), |p| p.tp.to_string()),
            "{}",
            if self.at_stop { "progress at stop" } else { "progress" }
        );
    }
}

/// What the previous report saw, for the next one's interval figures.
#[derive(Debug)]
pub(crate) struct ProgressClock {
    started: Instant,
    last_at: Instant,
    last_written: u64,
    last_latency: Histogram<u64>,
}

impl ProgressClock {
    pub fn new() -> Self {
        let now = Instant::now();
        ProgressClock {
            started: now,
            last_at: now,
            last_written: 0,
            last_latency: Histogram::new(3).expect("histogram"),
        }
    }

    /// The progress since the previous report; starts the next interval.
    /// The report at a clean stop covers the whole run instead: one that
    /// came milliseconds after a periodic report gave a rate and
    /// percentiles of those milliseconds (a handful of records read as a
    /// huge rate; until 2026-12-05).
    pub fn report(&mut self, now: Instant, run: Snapshot<'_>) -> Progress {
        let whole = run.at_stop;
        let interval = now - if whole { self.started } else { self.last_at };
        let written = run
            .records_written
            .saturating_sub(if whole { 0 } else { self.last_written });
        // The puts settled in this interval: the histogram's growth since
        // the last report (it only ever grows); at the stop, all of it.
        let mut recent = run.latency.clone();
        let grown = if whole {
            Ok(())
        } else {
            recent.subtract(&self.last_latency)
        };
        let (p50, p99) = match grown {
            Ok(()) if !recent.is_empty() => (
                Some(recent.value_at_quantile(0.5)),
                Some(recent.value_at_quantile(0.99)),
            ),
            _ => (None, None),
        };
        let partitions = run
            .assigned
            .iter()
            .map(|tp| {
                // librdkafka reports -1001 for an offset it does not know.
                let bounds = run.bounds.get(tp).copied();
                let log_end = bounds.map(|b| b.end).filter(|o| *o >= 0);
                let durable = run.durable.get(tp).copied();
                let start = run.starts.get(tp).and_then(|s| match s {
                    Start::At(o) | Start::Refetch { from: o, .. } => Some(*o),
                    Start::Beginning => bounds.map(|b| b.start).filter(|o| *o >= 0),
                    Start::End => log_end,
                });
                // Records below where the run fetches from are not waiting
                // for it (another store in the group archived them, or they
                // aged out of Kafka and the policy skipped them): the lag
                // counts from the later of the two (either, when only one is
                // known: `None` orders below every `Some`).
                let base = durable.max(start);
                PartitionProgress {
                    tp: tp.clone(),
                    log_end,
                    durable,
                    committed: run.committed.get(tp).copied(),
                    archive_lag: log_end.zip(base).map(|(end, base)| (end - base).max(0)),
                }
            })
            .collect();
        let progress = Progress {
            at_stop: run.at_stop,
            elapsed: now - self.started,
            interval,
            records_written: run.records_written,
            records_per_s: written as f64 / interval.as_secs_f64().max(1e-3),
            puts: run.puts,
            commits: run.commits,
            records_skipped: run.records_skipped,
            records_dead_lettered: run.records_dead_lettered,
            put_to_commit_p50_us: p50,
            put_to_commit_p99_us: p99,
            partitions,
        };
        self.last_at = now;
        self.last_written = run.records_written;
        self.last_latency = run.latency.clone();
        progress
    }
}

/// What a report reads from the run.
pub(crate) struct Snapshot<'a> {
    pub at_stop: bool,
    pub records_written: u64,
    pub puts: u64,
    pub commits: u64,
    pub records_skipped: u64,
    pub records_dead_lettered: u64,
    pub latency: &'a Histogram<u64>,
    pub assigned: &'a BTreeSet<TopicPartition>,
    pub durable: &'a BTreeMap<TopicPartition, i64>,
    pub committed: &'a BTreeMap<TopicPartition, i64>,
    pub starts: &'a BTreeMap<TopicPartition, Start>,
    pub bounds: &'a BTreeMap<TopicPartition, LogBounds>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn lags_rates_and_interval_latency() {
        let mut clock = ProgressClock::new();
        let t0 = clock.started;
        let mut latency = Histogram::<u64>::new(3).unwrap();
        for us in [1_000, 1_000, 1_000, 9_000] {
            latency.record(us).unwrap();
        }
        let assigned: BTreeSet<_> = (0..7).map(tp).collect();
        // 6 resumed at 60, another store's commit, past its own 20.
        let durable = BTreeMap::from([(tp(0), 90), (tp(1), 50), (tp(6), 20)]);
        let committed = BTreeMap::from([(tp(0), 80), (tp(1), 50), (tp(6), 60)]);
        // 2..5 hold nothing durable yet: their lag counts from their start.
        let starts = BTreeMap::from([
            (tp(2), Start::At(30)),
            (tp(3), Start::Beginning),
            (tp(4), Start::End),
            (tp(5), Start::At(0)),
            (tp(6), Start::At(60)),
        ]);
        let b = |start, end| LogBounds { start, end };
        let bounds = BTreeMap::from([
            (tp(0), b(0, 100)),
            (tp(1), b(0, 50)),
            (tp(2), b(0, 40)),
            (tp(3), b(5, 25)),
            (tp(4), b(0, 70)),
            // Not fetched yet.
            (tp(5), b(-1001, -1001)),
            (tp(6), b(0, 60)),
        ]);
        let run = |written, puts, latency| Snapshot {
            at_stop: false,
            records_written: written,
            puts,
            commits: 6,
            records_skipped: 2,
            records_dead_lettered: 3,
            latency,
            assigned: &assigned,
            durable: &durable,
            committed: &committed,
            starts: &starts,
            bounds: &bounds,
        };
        let at = t0 + Duration::from_secs(10);
        let p = clock.report(at, run(5_000, 7, &latency));
        assert_eq!(p.records_per_s, 500.0);
        assert_eq!(p.put_to_commit_p50_us, Some(1_000));
        assert_eq!(p.put_to_commit_p99_us.map(|us| us / 1_000), Some(9));
        let lags: Vec<_> = p.partitions.iter().map(|q| q.archive_lag).collect();
        assert_eq!(
            lags,
            [
                Some(10),
                Some(0),
                Some(10),
                Some(20),
                Some(0),
                None,
                Some(0)
            ]
        );
        assert_eq!(
            p.archive_lag(),
            Lag {
                records: 40,
                unknown_partitions: 1
            }
        );
        assert_eq!(p.shown(&p.archive_lag()), Some(40));
        // No partition's lag known (none assigned, here): `-`, not 0.
        let none = Progress {
            partitions: Vec::new(),
            ..p.clone()
        };
        assert_eq!(none.shown(&none.archive_lag()), None);
        let unknown = Progress {
            partitions: p
                .partitions
                .iter()
                .map(|q| PartitionProgress {
                    archive_lag: None,
                    ..q.clone()
                })
                .collect(),
            ..p.clone()
        };
        assert_eq!(unknown.shown(&unknown.archive_lag()), None);
        assert_eq!(
            p.commit_lag(),
            Lag {
                records: 20,
                unknown_partitions: 4
            }
        );
        assert_eq!(p.most_behind().map(|p| p.tp.clone()), Some(tp(3)));
        // The next report covers only what happened since: no new commit
        // settled a put, and 1,000 more records in 5 s.
        let p = clock.report(at + Duration::from_secs(5), run(6_000, 8, &latency));
        assert_eq!(p.records_per_s, 200.0);
        assert_eq!(p.put_to_commit_p50_us, None);
        assert_eq!(p.elapsed, Duration::from_secs(15));
        // The stop's report, 10 ms later with 10 more records: the whole
        // run's rate and percentiles, not those 10 ms'.
        let stop = Snapshot {
            at_stop: true,
            ..run(6_010, 9, &latency)
        };
        let p = clock.report(at + Duration::from_millis(5_010), stop);
        assert!(
            (p.records_per_s - 6_010.0 / 15.01).abs() < 1e-6,
            "{}",
            p.records_per_s
        );
        assert_eq!(p.put_to_commit_p50_us, Some(1_000));
        // The run's counts so far, as given.
        assert_eq!((p.records_skipped, p.records_dead_lettered), (2, 3));
    }
}

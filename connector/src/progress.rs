//! A running archive's progress and lag, reported while it runs.
//!
//! The archive is locked while `cairn run` holds it, so `cairn status`
//! cannot show a running archive's lag; the run reports it itself. Every
//! `progress_interval_s` (and once more at a clean stop) the consumer thread
//! logs one line and hands a [`Progress`] to `PipelineOptions::on_progress`.
//!
//! The interval is librdkafka's `statistics.interval.ms`: its statistics
//! carry each assigned partition's log end as the last fetch saw it (the
//! last stable offset under `read_committed`, librdkafka's default, else the
//! high watermark), so a report costs no request to Kafka. The commit
//! tracker knows what is durable and what is committed. The report at stop
//! uses the last statistics too: asking the consumer's own connection for
//! watermarks queues behind its fetch long-polls (about 0.3 s a partition
//! against the mock cluster).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use hdrhistogram::Histogram;

/// One assigned partition, as of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProgress {
    pub tp: TopicPartition,
    /// Kafka's log end as the consumer last saw it (None until it fetched).
    pub high_watermark: Option<i64>,
    /// The next offset the archive holds durably (None until a put or open
    /// reported one).
    pub durable: Option<i64>,
    /// The offset last committed to Kafka.
    pub committed: Option<i64>,
}

impl PartitionProgress {
    /// Records Kafka has that the archive has not made durable yet.
    pub fn archive_lag(&self) -> Option<i64> {
        Some((self.high_watermark? - self.durable?).max(0))
    }

    /// Records Kafka has past the committed offset: what a lag monitor sees.
    pub fn commit_lag(&self) -> Option<i64> {
        Some((self.high_watermark? - self.committed?).max(0))
    }
}

/// A run's progress: totals since the start, rates and latencies over the
/// interval since the previous report, and the lag of every assigned
/// partition.
#[derive(Debug, Clone)]
pub struct Progress {
    pub elapsed: Duration,
    pub interval: Duration,
    pub records_written: u64,
    /// Records written per second over the interval.
    pub records_per_s: f64,
    pub puts: u64,
    pub commits: u64,
    /// Put-to-commit of the puts whose commit was acknowledged in the
    /// interval (None when there was none).
    pub put_to_commit_p50_us: Option<u64>,
    pub put_to_commit_p99_us: Option<u64>,
    pub partitions: Vec<PartitionProgress>,
}

impl Progress {
    /// Sum over the partitions whose lag is known, and how many are not.
    fn total(&self, lag: impl Fn(&PartitionProgress) -> Option<i64>) -> (i64, usize) {
        let known: Vec<i64> = self.partitions.iter().filter_map(&lag).collect();
        (known.iter().sum(), self.partitions.len() - known.len())
    }

    pub fn archive_lag(&self) -> i64 {
        self.total(PartitionProgress::archive_lag).0
    }

    pub fn commit_lag(&self) -> i64 {
        self.total(PartitionProgress::commit_lag).0
    }

    /// The partition furthest behind in the archive, if any is.
    pub fn most_behind(&self) -> Option<&PartitionProgress> {
        self.partitions
            .iter()
            .filter(|p| p.archive_lag().is_some_and(|l| l > 0))
            .max_by_key(|p| p.archive_lag())
    }

    /// One log line's worth.
    pub fn log(&self, what: &'static str) {
        let (archive_lag, unknown) = self.total(PartitionProgress::archive_lag);
        let ms =
            |us: Option<u64>| us.map_or("-".to_owned(), |us| format!("{:.2}", us as f64 / 1e3));
        tracing::info!(
            records_written = self.records_written,
            records_per_s = self.records_per_s.round() as u64,
            puts = self.puts,
            commits = self.commits,
            put_to_commit_p50_ms = %ms(self.put_to_commit_p50_us),
            put_to_commit_p99_ms = %ms(self.put_to_commit_p99_us),
            partitions = self.partitions.len(),
            archive_lag,
            commit_lag = self.commit_lag(),
            lag_unknown_partitions = unknown,
            most_behind = %self.most_behind().map_or("-".to_owned(), |p| p.tp.to_string()),
            "{what}"
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
    #[allow(clippy::too_many_arguments)]
    pub fn report(
        &mut self,
        now: Instant,
        records_written: u64,
        puts: u64,
        commits: u64,
        latency: &Histogram<u64>,
        assigned: &BTreeSet<TopicPartition>,
        durable: &BTreeMap<TopicPartition, i64>,
        committed: &BTreeMap<TopicPartition, i64>,
        high_watermark: impl Fn(&TopicPartition) -> Option<i64>,
    ) -> Progress {
        let interval = now - self.last_at;
        let written = records_written.saturating_sub(self.last_written);
        // The puts settled in this interval: the histogram's growth since
        // the last report (it only ever grows).
        let mut recent = latency.clone();
        let (p50, p99) = match recent.subtract(&self.last_latency) {
            Ok(()) if !recent.is_empty() => (
                Some(recent.value_at_quantile(0.5)),
                Some(recent.value_at_quantile(0.99)),
            ),
            _ => (None, None),
        };
        let progress = Progress {
            elapsed: now - self.started,
            interval,
            records_written,
            records_per_s: written as f64 / interval.as_secs_f64().max(1e-3),
            puts,
            commits,
            put_to_commit_p50_us: p50,
            put_to_commit_p99_us: p99,
            partitions: assigned
                .iter()
                .map(|tp| PartitionProgress {
                    tp: tp.clone(),
                    high_watermark: high_watermark(tp),
                    durable: durable.get(tp).copied(),
                    committed: committed.get(tp).copied(),
                })
                .collect(),
        };
        self.last_at = now;
        self.last_written = records_written;
        self.last_latency = latency.clone();
        progress
    }
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
        let assigned: BTreeSet<_> = [tp(0), tp(1), tp(2)].into();
        let durable = BTreeMap::from([(tp(0), 90), (tp(1), 50)]);
        let committed = BTreeMap::from([(tp(0), 80), (tp(1), 50)]);
        let highs = |t: &TopicPartition| match t.partition {
            0 => Some(100),
            1 => Some(50),
            _ => None,
        };
        let at = t0 + Duration::from_secs(10);
        let p = clock.report(
            at, 5_000, 7, 6, &latency, &assigned, &durable, &committed, highs,
        );
        assert_eq!(p.records_per_s, 500.0);
        assert_eq!(p.put_to_commit_p50_us, Some(1_000));
        assert_eq!(p.put_to_commit_p99_us.map(|us| us / 1_000), Some(9));
        assert_eq!(p.archive_lag(), 10);
        assert_eq!(p.commit_lag(), 20);
        assert_eq!(p.partitions[2].archive_lag(), None, "no watermark yet");
        assert_eq!(p.most_behind().map(|p| p.tp.clone()), Some(tp(0)));
        // The next report covers only what happened since: no new commit
        // settled a put, and 1,000 more records in 5 s.
        let p = clock.report(
            at + Duration::from_secs(5),
            6_000,
            8,
            6,
            &latency,
            &assigned,
            &durable,
            &committed,
            highs,
        );
        assert_eq!(p.records_per_s, 200.0);
        assert_eq!(p.put_to_commit_p50_us, None);
        assert_eq!(p.elapsed, Duration::from_secs(15));
    }
}

//! The put-to-commit harness.
//!
//! For each record size: pre-produce the records, then in one run measure
//! cairn's real connector loop under each commit policy, the floor (an
//! `fdatasync` of a put's bytes plus a commit round trip, each measured
//! alone), the consume-only ceiling, the disk's sequential bandwidth, kcat
//! into a file, and a hand-written confluent-kafka loop. Ratios are taken
//! within a round: absolute times on a shared machine are noisy, ratios
//! much less so. Still, one round's ratios moved by more than most gaps to
//! the targets (two runs a minute apart read 0.85× and 1.17× kcat), so each
//! case is measured in several rounds, each in an order rotated from the
//! last, and the targets are judged on the median of each ratio, printed
//! with its range.
//!
//! The mock cluster keeps only the newest 5 MiB or 100 000 records per
//! partition, so the record count is capped to what the partitions hold and
//! the low watermarks are checked before anything is measured: every record
//! produced must still be there to be archived.

mod child;
pub mod measure;
mod output;
mod peers;
mod setup;
mod summary;

use std::path::PathBuf;

use cairn_connector::CommitPolicy;
use hdrhistogram::Histogram;
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Brokers to use; default: start `cairn-bench mock-broker`.
    #[arg(long)]
    pub brokers: Option<String>,
    /// Records per case (capped to what the mock cluster's partitions hold).
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Record sizes in bytes, one case each.
    #[arg(long, value_delimiter = ',', default_values_t = vec![100usize, 1024, 10240])]
    pub record_bytes: Vec<usize>,
    #[arg(long, default_value_t = 32)]
    pub partitions: i32,
    /// Commit policies to measure cairn under.
    #[arg(long, value_delimiter = ',', value_parser = parse_policy,
          default_values = ["every-put", "interval:100"])]
    pub policies: Vec<CommitPolicy>,
    /// cairn's --batch-records-max, and the Python loop's batch size.
    #[arg(long, default_value_t = 1_000)]
    pub batch_records_max: usize,
    /// Samples for each floor component.
    #[arg(long, default_value_t = 2_000)]
    pub floor_samples: usize,
    /// Skip kcat and the Python loop.
    #[arg(long)]
    pub no_peers: bool,
    /// MiB the disk bandwidth probe writes (with one fdatasync) each time
    /// it runs: once at the start and once a round. Smaller is faster and
    /// less exact (the test of the harness itself writes little).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub disk_probe_mib: u32,
    /// Rounds per record size. Each measures everything again, the order
    /// rotated by one step per round, and the targets are judged on the
    /// medians of the rounds' ratios: one round's spread on a shared
    /// machine is wider than most of the gaps being judged.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where the JSON, the SVG and the scratch data go.
    #[arg(long, default_value_os_t = default_out())]
    pub out: PathBuf,
}

fn default_out() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench")
}

/// The Python loop's batch until an every-put run measures cairn's mean
/// put: as many records as cairn's puts hold, which
/// stop at `--batch-records-max` records or at the connector's default
/// `batch_bytes_max` (8 MiB) of buffered records, as the consumer counts
/// them (a value's buffer plus the record's own struct; these records have
/// no key and no headers). At 10 KiB that is about 800, not 1000.
fn python_batch(batch_records_max: usize, size: usize) -> usize {
    let held = size + std::mem::size_of::<cairn_engine::Record>();
    let by_bytes = cairn_connector::config::RunConfig::DEFAULT_BATCH_BYTES_MAX.div_ceil(held);
    batch_records_max.min(by_bytes).max(1)
}

pub fn parse_policy(s: &str) -> Result<CommitPolicy, String> {
    s.parse::<CommitPolicy>().map_err(|e| e.to_string())
}

/// Fewest samples a p50 is reported for, and compared, with: 10 beyond it.
/// Below it the table prints `n/a(N)` and the JSON ratio is `null` (a
/// 10 KiB case has about 17 puts a policy).
pub const P50_SAMPLES_MIN: u64 = 20;
/// Fewest samples a p90 is reported for: 10 beyond it.
pub const P90_SAMPLES_MIN: u64 = 100;
/// Fewest samples a p99 is reported for, and compared, with: 10 beyond it.
/// Below it the table prints `n/a(N)` and the JSON ratio is `null`.
pub const P99_SAMPLES_MIN: u64 = 1000;
/// Fewest samples a p99.9 is reported for: 10 beyond it.
pub const P999_SAMPLES_MIN: u64 = 10_000;

/// Latency percentiles in microseconds. In the JSON, a quantile of fewer
/// samples than it needs ([`P50_SAMPLES_MIN`] and the others) is `null`,
/// as the table prints `n/a(N)`.
#[derive(Debug, Clone)]
pub struct Latency {
    pub samples: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl Serialize for Latency {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown {
            samples: u64,
            p50_us: Option<u64>,
            p90_us: Option<u64>,
            p99_us: Option<u64>,
            p999_us: Option<u64>,
            max_us: u64,
        }
        Shown {
            samples: self.samples,
            p50_us: self.p50(),
            p90_us: self.p90(),
            p99_us: self.p99(),
            p999_us: self.p999(),
            max_us: self.max_us,
        }
        .serialize(s)
    }
}

impl Latency {
    /// `value`, a quantile that needs `samples_min` samples, if there are
    /// that many: the one place the rule is applied.
    fn enough(&self, value: u64, samples_min: u64) -> Option<u64> {
        (self.samples >= samples_min).then_some(value)
    }

    /// The p50, if there are samples enough for one; and the others.
    pub fn p50(&self) -> Option<u64> {
        self.enough(self.p50_us, P50_SAMPLES_MIN)
    }

    pub fn p90(&self) -> Option<u64> {
        self.enough(self.p90_us, P90_SAMPLES_MIN)
    }

    pub fn p99(&self) -> Option<u64> {
        self.enough(self.p99_us, P99_SAMPLES_MIN)
    }

    pub fn p999(&self) -> Option<u64> {
        self.enough(self.p999_us, P999_SAMPLES_MIN)
    }

    pub fn of(h: &Histogram<u64>) -> Latency {
        Latency {
            samples: h.len(),
            p50_us: h.value_at_quantile(0.5),
            p90_us: h.value_at_quantile(0.9),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

/// Throughput of one consumer run, timed from its first record.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    pub mb_per_s: f64,
    /// The run without its ends ([`Steady`]); `None` where the run has no
    /// such window, or is not a consumer's (the disk probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steady: Option<Steady>,
}

impl Throughput {
    pub fn new(records: u64, bytes: u64, seconds: f64) -> Throughput {
        let seconds = seconds.max(1e-9);
        Throughput {
            records,
            seconds,
            records_per_s: records as f64 / seconds,
            mb_per_s: bytes as f64 / seconds / 1e6,
            steady: None,
        }
    }

    /// With the steady window of `progress`, a run of `self.records`.
    pub fn with_steady(mut self, progress: &[(f64, u64)]) -> Throughput {
        self.steady = Steady::of(progress, self.records);
        self
    }
}

/// Where a steady window starts and ends: at the first point of a run's
/// progress with at least a tenth of its records done, and at the last
/// with at most nine tenths done.
pub const STEADY_FROM: f64 = 0.1;
pub const STEADY_TO: f64 = 0.9;
/// The least share of a run's records a steady window must span to give a
/// rate, and the fewest points of its progress it must hold: progress seen
/// at too few points gives none (since 2026-12-05 after review: the
/// first rule, half the records and any two points, let cairn's
/// `interval:100` commits, 2 to 7 a run, give windows of 58-65 % where
/// every other consumer's spanned 80 %).
pub const STEADY_SPAN_MIN: f64 = 0.7;
pub const STEADY_POINTS_MIN: usize = 8;

/// A consumer's records/s without the ends of its run, by one rule for
/// every consumer measured, each by its own progress: cairn's syncs
/// (records durable, at each `pre_commit`'s return; records written at
/// each put's return until the second review of 2026-12-05, which left
/// the sync of a window's last records out under `interval:MS`), the
/// ceiling's takes (records
/// taken), kcat's output (lines in its file, looked at every millisecond)
/// and the Python loop's commits (one a batch, after its write and
/// fdatasync).
///
/// Why (since 2026-12-05): the whole-run figures end at different points.
/// cairn's end at the commit of its last record, which under
/// `interval:MS` waits for the interval after the last put, up to 100 ms
/// of a run under a second; the ceiling's at its last record, kcat's at
/// its last output, the Python loop's at its last commit (it commits each
/// batch). Each also starts with its own ramp. The window from a tenth of
/// the records to nine tenths leaves out both ends of every run alike.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Steady {
    pub records: u64,
    pub seconds: f64,
    pub records_per_s: f64,
    /// Points of the run's progress in the window, its ends included.
    pub points: usize,
}

impl Steady {
    /// From `progress`, points of (seconds on one clock, records done by
    /// then) in time order, of a run of `total` records. `None` when the
    /// window spans less than [`STEADY_SPAN_MIN`] of the records, holds
    /// fewer than [`STEADY_POINTS_MIN`] points, or no time passed in it.
    pub fn of(progress: &[(f64, u64)], total: u64) -> Option<Steady> {
        let from = (total as f64 * STEADY_FROM).ceil() as u64;
        let to = (total as f64 * STEADY_TO).floor() as u64;
        let i0 = progress.iter().position(|(_, c)| *c >= from)?;
        let i1 = progress.iter().rposition(|(_, c)| *c <= to)?;
        let ((t0, c0), (t1, c1)) = (progress[i0], progress[i1]);
        let records = c1.checked_sub(c0)?;
        let points = i1.checked_sub(i0)? + 1;
        let seconds = t1 - t0;
        ((records as f64) >= total as f64 * STEADY_SPAN_MIN
            && points >= STEADY_POINTS_MIN
            && seconds > 0.0)
            .then(|| Steady {
                records,
                seconds,
                records_per_s: records as f64 / seconds,
                points,
            })
    }
}

/// One measurement that may have been skipped (the tool is missing, or
/// the run could not be timed), or may have failed, with the reason. A
/// failure fails the whole command once its report is written (until the
/// night of 2026-12-04 every failure read as a skip, and the command
/// exited 0 with that round's figure left out of the medians).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Peer<T> {
    Ran(T),
    Skipped { skipped: String },
    Failed { failed: String },
}

impl<T> Peer<T> {
    /// The measurement, if it ran.
    pub fn ran(&self) -> Option<&T> {
        match self {
            Peer::Ran(t) => Some(t),
            Peer::Skipped { .. } | Peer::Failed { .. } => None,
        }
    }

    /// Why there is no measurement, as the table prints it.
    pub fn why_not(&self) -> Option<String> {
        match self {
            Peer::Ran(_) => None,
            Peer::Skipped { skipped } => Some(format!("skipped: {skipped}")),
            Peer::Failed { failed } => Some(format!("FAILED: {failed}")),
        }
    }

    fn failed(&self) -> bool {
        matches!(self, Peer::Failed { .. })
    }

    /// The measurement through `f`, a skip or failure as it was.
    fn map<U>(self, f: impl FnOnce(T) -> U) -> Peer<U> {
        match self {
            Peer::Ran(t) => Peer::Ran(f(t)),
            Peer::Skipped { skipped } => Peer::Skipped { skipped },
            Peer::Failed { failed } => Peer::Failed { failed },
        }
    }
}

/// One record size: every round measured, the medians of their ratios,
/// and the footprint (measured once: memory and space do not depend on
/// what else shares the machine the way times do).
#[derive(Debug, Serialize)]
pub struct CaseResult {
    pub record_bytes: usize,
    pub records: u64,
    pub partitions: i32,
    pub note: Option<String>,
    pub rounds: Vec<Round>,
    /// Each ratio's median over the rounds, with its range: what the
    /// targets are judged on.
    pub medians: Vec<summary::Medians>,
    /// The targets as judged on these medians, each as the table's
    /// target column says it (the bound, and "met" or "MISSED", or what
    /// judges it instead), keyed "policy ratio" (`every-put p50_vs_floor`);
    /// and the peak RSS's, keyed "policy peak_rss". Since 2026-12-07:
    /// before, only the table said them.
    pub targets: std::collections::BTreeMap<String, String>,
    /// cairn archiving the case in a process of its own, per policy.
    pub footprints: Vec<Peer<measure::Footprint>>,
    /// Every round's samples pooled, for the plot.
    #[serde(skip)]
    pub histograms: Histograms,
}

impl CaseResult {
    /// How the target of `name` on `policy`'s row reads (empty where none
    /// applies): the JSON's `targets`, which the table prints.
    pub fn target(&self, policy: &str, name: &str) -> &str {
        self.targets
            .get(&summary::target_key(policy, name))
            .map_or("", String::as_str)
    }
}

/// Everything measured once, in the order `order` names.
#[derive(Debug, Serialize)]
pub struct Round {
    /// From 1.
    pub round: usize,
    pub order: Vec<String>,
    pub cairn: Vec<measure::CairnRun>,
    pub floor: measure::Floor,
    pub ceiling: Throughput,
    /// What the ceiling cost in CPU.
    pub ceiling_cpu: Option<measure::Cpu>,
    /// The async commit requests the ceiling queued: one each 100 ms from
    /// its first record, and one after its last (outside its timed
    /// window); what the broker answered is not awaited (since 2026-12-06: before, the 100 ms ran
    /// from before its first record, nothing was sent after its last, and
    /// a failure to send was dropped, so a short run sent none).
    pub ceiling_commits: u64,
    /// The disk's sequential write bandwidth, measured in this round: the
    /// baseline of its runs' `pct_of_disk_bandwidth`.
    pub disk_bandwidth: Throughput,
    pub kcat: Peer<peers::KcatRun>,
    pub python: Peer<peers::PythonRun>,
    /// Each policy's ratios to this round's baselines.
    pub ratios: Vec<summary::Ratios>,
}

/// Full distributions, for the plot.
#[derive(Debug, Default)]
pub struct Histograms {
    pub cairn: Vec<(String, Histogram<u64>)>,
    pub floor: Option<Histogram<u64>>,
    pub python: Option<Histogram<u64>>,
}

/// Adds `h` to what `slot` holds, or starts it with `h`. Pooled
/// histograms share the bounds of the first (a failed add would need a
/// sample past a minute, beyond where the plot's scale ends).
fn pool(slot: &mut Option<Histogram<u64>>, h: &Histogram<u64>) {
    match slot {
        Some(pooled) => {
            let _ = pooled.add(h);
        }
        None => *slot = Some(h.clone()),
    }
}

impl Histograms {
    fn pool_cairn(&mut self, policy: &str, h: &Histogram<u64>) {
        match self.cairn.iter_mut().find(|(p, _)| p == policy) {
            Some((_, pooled)) => {
                let _ = pooled.add(h);
            }
            None => self.cairn.push((policy.to_owned(), h.clone())),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub command: String,
    pub date_utc: String,
    /// The source the figures were measured at (`git describe --always
    /// --dirty` in the crate's tree), `null` where git cannot tell (since
    /// 2026-12-06; before, BENCHMARKS.md named it by hand).
    pub source: Option<String>,
    pub machine: String,
    pub brokers: String,
    /// Sequential write bandwidth of the disk under `--out`, measured once
    /// before the cases; its `records` are the 1 MiB writes, not Kafka
    /// records. The ratios use each round's own (`Round::disk_bandwidth`).
    pub disk_bandwidth: Throughput,
    pub cases: Vec<CaseResult>,
}

/// One measurement of a round.
#[derive(Debug, Clone, Copy)]
enum Step {
    Ceiling,
    Cairn(usize),
    Floor,
    Disk,
    Kcat,
    Python,
}

/// The steps of round `round` (from 0): the first in the order the
/// harness always had (the ceiling first, kcat and Python last), each
/// later one rotated by one more step, so no measurement always runs in
/// the same place in a round. Neighbours mostly stay (each step follows
/// the same one except where it runs first): a run measuring one step
/// after another (`--policies every-put --no-peers`, then three steps) found
/// no effect of the order beside the host's own swings (BENCHMARKS).
fn steps(policies: usize, peers: bool, round: usize) -> Vec<Step> {
    let mut steps = vec![Step::Ceiling];
    steps.extend((0..policies).map(Step::Cairn));
    steps.extend([Step::Floor, Step::Disk]);
    if peers {
        steps.extend([Step::Kcat, Step::Python]);
    }
    let n = steps.len();
    steps.rotate_left(round % n);
    steps
}

/// One round of a case: every step measured once, in `steps`' order.
/// `put_bytes` is the floor's put size and, over the record size, the
/// Python loop's batch: every-put's mean put, from this round's run when
/// it came first, else from the last one measured.
#[allow(clippy::too_many_arguments)]
fn round(
    args: &Args,
    case: &measure::Case,
    records: u64,
    round: usize,
    put_bytes: &mut usize,
    histograms: &mut Histograms,
) -> Result<Round, String> {
    let steps = steps(args.policies.len(), !args.no_peers, round);
    let mut cairn: Vec<Option<measure::CairnRun>> = vec![None; args.policies.len()];
    let mut ceiling = None;
    let mut floor = None;
    let mut disk = None;
    let mut kcat = Peer::Skipped {
        skipped: "--no-peers".into(),
    };
    let mut python = Peer::Skipped {
        skipped: "--no-peers".into(),
    };
    let mut order = Vec::new();
    for step in steps {
        match step {
            Step::Ceiling => {
                // The allocator as at start for the ceiling: an interval
                // run before it left it tuned for itself.
                cairn_connector::allocator::tune();
                let (t, cpu, commits) = measure::ceiling(
                    case.brokers,
                    case.broker_pid,
                    case.topic,
                    records,
                    case.size,
                )?;
                eprintln!(
                    "   ceiling (consume only): {:.0} records/s",
                    t.records_per_s
                );
                ceiling = Some((t, cpu, commits));
                order.push("ceiling".to_owned());
            }
            Step::Cairn(i) => {
                let policy = args.policies[i];
                let (run, h) = measure::cairn(case, policy)?;
                // As the table shows them: a quantile of too few puts is
                // n/a (until 2026-12-05 printed here from any number).
                let shown = |q: Option<u64>| q.map_or_else(|| "n/a".to_owned(), |v| v.to_string());
                eprintln!(
                    "   cairn {}: {:.0} records/s, put-to-commit p50 {} us p99 {} us (of {} puts)",
                    run.policy,
                    run.throughput.records_per_s,
                    shown(run.put_to_commit.p50()),
                    shown(run.put_to_commit.p99()),
                    run.put_to_commit.samples
                );
                if policy == CommitPolicy::EveryPut && run.puts > 0 {
                    *put_bytes = (run.payload_bytes / run.puts) as usize;
                }
                histograms.pool_cairn(&run.policy, &h);
                order.push(format!("cairn {}", run.policy));
                cairn[i] = Some(run);
            }
            Step::Floor => {
                let (f, h) = measure::floor(
                    case.brokers,
                    case.topic,
                    *put_bytes,
                    args.floor_samples,
                    case.out,
                )?;
                eprintln!(
                    "   floor: write + fdatasync p50 {} us (the write {} us) + commit p50 {} us",
                    f.fdatasync.p50_us, f.write.p50_us, f.commit.p50_us
                );
                pool(&mut histograms.floor, &h);
                floor = Some(f);
                order.push("floor".to_owned());
            }
            Step::Disk => {
                let d = measure::disk_bandwidth(case.out, case.disk_probe_mib)?;
                eprintln!(
                    "   disk: sequential writes + fdatasync {:.0} MB/s",
                    d.mb_per_s
                );
                disk = Some(d);
                order.push("disk".to_owned());
            }
            Step::Kcat => {
                kcat = peers::kcat(case.brokers, case.topic, records, case.size, case.out);
                order.push("kcat".to_owned());
            }
            Step::Python => {
                python = peers::python(
                    case.brokers,
                    case.topic,
                    records,
                    case.size,
                    // cairn's mean put, as the floor takes it: measured
                    // by every-put once it ran (since the second review
                    // of 2026-12-05: at 10 KiB cairn's puts held 768
                    // records where this estimate gave the loop 812).
                    ((*put_bytes as f64 / case.size as f64).round() as usize).max(1),
                    case.out,
                )
                .map(|(run, h)| {
                    pool(&mut histograms.python, &h);
                    run
                });
                order.push("python".to_owned());
            }
        }
    }
    let (Some((ceiling, ceiling_cpu, ceiling_commits)), Some(floor), Some(disk_bandwidth)) =
        (ceiling, floor, disk)
    else {
        unreachable!("every round measures the ceiling, the floor and the disk");
    };
    let mut cairn: Vec<measure::CairnRun> = cairn.into_iter().flatten().collect();
    for run in &mut cairn {
        run.relate(&floor, &ceiling, ceiling_cpu.as_ref(), &disk_bandwidth);
    }
    let ratios = cairn
        .iter()
        .map(|run| summary::Ratios::of(run, &kcat, &python))
        .collect();
    Ok(Round {
        round: round + 1,
        order,
        cairn,
        floor,
        ceiling,
        ceiling_cpu,
        ceiling_commits,
        disk_bandwidth,
        kcat,
        python,
        ratios,
    })
}

pub fn run(args: Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    if args.records == 0
        || args.partitions <= 0
        || args.record_bytes.contains(&0)
        || args.rounds == 0
    {
        return Err("--records, --partitions, --record-bytes and --rounds must be positive".into());
    }
    // A policy given twice would be pooled and summarised as one.
    let names: Vec<String> = args
        .policies
        .iter()
        .map(|p| measure::policy_name(*p))
        .collect();
    if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
        return Err(format!("--policies {}: each policy once", names.join(",")));
    }
    let broker = setup::Broker::start(&args)?;
    let disk_bandwidth = measure::disk_bandwidth(&args.out, args.disk_probe_mib as usize)?;
    eprintln!(
        "disk: sequential writes + fdatasync {:.0} MB/s",
        disk_bandwidth.mb_per_s
    );
    let mut cases = Vec::new();
    for &size in &args.record_bytes {
        let (records, note) =
            setup::capacity(args.records, size, args.partitions, broker.is_mock());
        if let Some(n) = &note {
            eprintln!("note: {n}");
        }
        let topic = broker.topic_for(size);
        eprintln!(
            "== {records} records of {size} B over {} partitions ({topic})",
            args.partitions
        );
        let ends = setup::produce(broker.brokers(), &topic, records, size, args.partitions)?;
        let case = measure::Case {
            brokers: broker.brokers(),
            topic: &topic,
            ends: &ends,
            batch_records_max: args.batch_records_max,
            size,
            out: &args.out,
            disk_probe_mib: args.disk_probe_mib as usize,
            broker_pid: broker.pid(),
        };
        // Until an every-put run measures it: a put's records as the
        // batch limits cut them (the records limit, or the bytes limit of
        // the records as held), not the records limit alone (10 KiB
        // records would make a 10 MB floor where puts are 8 MiB).
        let mut put_bytes = size * python_batch(args.batch_records_max, size);
        let mut histograms = Histograms::default();
        let mut rounds = Vec::new();
        for r in 0..args.rounds {
            eprintln!("-- round {}/{}", r + 1, args.rounds);
            rounds.push(round(
                &args,
                &case,
                records,
                r,
                &mut put_bytes,
                &mut histograms,
            )?);
        }
        let mut footprints = Vec::new();
        for policy in &args.policies {
            let f = match measure::footprint(&case, *policy) {
                Ok(f) => {
                    eprintln!(
                        "   footprint ({}, own process): peak RSS {} MiB, store {:.2}x the payload",
                        f.policy,
                        f.peak_rss_bytes >> 20,
                        f.space_amplification
                    );
                    Peer::Ran(f)
                }
                Err(e) => Peer::Failed {
                    failed: format!("{}: {e}", measure::policy_name(*policy)),
                },
            };
            footprints.push(f);
        }
        let medians = summary::medians(&rounds);
        let mut targets = summary::targets(&medians, size);
        for f in footprints.iter().filter_map(Peer::ran) {
            targets.insert(
                summary::target_key(&f.policy, "peak_rss"),
                summary::rss_judgement(output::mib(f.peak_rss_bytes), records),
            );
        }
        cases.push(CaseResult {
            record_bytes: size,
            records,
            partitions: args.partitions,
            note,
            medians,
            targets,
            rounds,
            footprints,
            histograms,
        });
    }
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date_utc: output::date_utc(),
        source: output::source_revision(),
        machine: output::machine(),
        brokers: if broker.is_mock() {
            "cairn-bench mock-broker (librdkafka mock cluster, 1 broker)".into()
        } else {
            broker.brokers().to_owned()
        },
        disk_bandwidth,
        cases,
    };
    output::table(&report);
    output::json(&report, &args.out.join("put_to_commit.json"))?;
    output::svg(&report, &args.out.join("put_to_commit_cdf.svg"))?;
    eprintln!(
        "wrote {} and {}",
        args.out.join("put_to_commit.json").display(),
        args.out.join("put_to_commit_cdf.svg").display()
    );
    let failed = report
        .cases
        .iter()
        .map(|c| {
            c.footprints.iter().filter(|f| f.failed()).count()
                + c.rounds
                    .iter()
                    .map(|r| usize::from(r.kcat.failed()) + usize::from(r.python.failed()))
                    .sum::<usize>()
        })
        .sum::<usize>();
    if failed > 0 {
        return Err(format!(
            "{failed} measurement(s) FAILED (see the table; the JSON and the plot were written, without them)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{python_batch, Steady};

    /// The window runs from the first point with a tenth of the records
    /// done to the last with at most nine tenths; too few points, or none
    /// inside the window, give no rate.
    #[test]
    fn the_steady_window_leaves_out_both_ends_alike() {
        // A slow start, then 100 records per 0.1 s, then a long tail.
        let progress = [
            (0.0, 0),
            (1.0, 5),
            (1.1, 100),
            (1.2, 200),
            (1.3, 300),
            (1.4, 400),
            (1.5, 500),
            (1.6, 600),
            (1.7, 700),
            (1.8, 800),
            (1.9, 900),
            (5.0, 1000),
        ];
        let s = Steady::of(&progress, 1000).unwrap();
        assert_eq!((s.records, s.points), (800, 9));
        assert!((s.seconds - 0.8).abs() < 1e-9, "{s:?}");
        assert!((s.records_per_s - 1000.0).abs() < 1e-6, "{s:?}");
        // Points only at the ends: nothing spans the records inside.
        assert!(Steady::of(&[(0.0, 50), (0.2, 950), (0.3, 1000)], 1000).is_none());
        // Seven tenths of the records, exactly, is enough, at enough points.
        let even: Vec<(f64, u64)> = (0..=10).map(|i| (i as f64 * 0.1, i * 100)).collect();
        let mut spanning = even.clone();
        spanning.retain(|&(_, c)| c != 100);
        let s = Steady::of(&spanning, 1000).unwrap();
        assert_eq!(
            (s.records, s.points, s.records_per_s.round()),
            (700, 8, 1000.0)
        );
        // ... but one point fewer than the least is not.
        let few: Vec<(f64, u64)> = spanning
            .iter()
            .copied()
            .filter(|&(_, c)| c != 500)
            .collect();
        assert!(Steady::of(&few, 1000).is_none());
        // Commits every fifth of a run (as interval:100's in a short run):
        // the window between them spans too little.
        let coarse = [
            (0.0, 0),
            (0.1, 150),
            (0.2, 400),
            (0.3, 650),
            (0.4, 850),
            (0.5, 1000),
        ];
        assert!(Steady::of(&coarse, 1000).is_none());
        // No time between the two ends.
        let still: Vec<(f64, u64)> = (1..=9).map(|i| (1.0, i * 100)).collect();
        assert!(Steady::of(&still, 1000).is_none());
        assert!(Steady::of(&[], 1000).is_none());
        assert!(Steady::of(&[(0.0, 1)], 0).is_none());
    }

    /// The Python loop batches as cairn's puts do: by records while they
    /// are small, by the 8 MiB byte bound once that comes first.
    #[test]
    fn the_python_loops_batch_is_cairns_put() {
        assert_eq!(python_batch(1000, 100), 1000);
        assert_eq!(python_batch(1000, 1024), 1000);
        let at_10k = python_batch(1000, 10 * 1024);
        assert!((700..900).contains(&at_10k), "{at_10k}");
        assert_eq!(python_batch(1000, 64 << 20), 1);
    }
}

//! cairn's connector loop, the floor and the ceiling.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_connector::fetch::{Fetch, Flow};
use cairn_connector::pruner::Retention;
use cairn_connector::testing::WatchedSink;
use cairn_connector::{
    run_pipeline, ArchiveSink, CommitPolicy, PipelineOptions, RunConfig, RunReport,
};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::Serialize;

use super::{child, histogram, Latency, Throughput};

fn unique_group(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "p2c-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn policy_name(p: CommitPolicy) -> String {
    match p {
        CommitPolicy::EveryPut => "every-put".into(),
        CommitPolicy::Interval(d) => format!("interval:{}", d.as_millis()),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CairnRun {
    pub policy: String,
    pub throughput: Throughput,
    pub put_to_commit: Latency,
    pub puts: u64,
    pub commits: u64,
    pub fsyncs: u64,
    pub fsyncs_per_s: f64,
    pub payload_bytes: u64,
    /// p50 over the floor's p50 (target for every-put: <= 1.5).
    pub p50_vs_floor: Option<f64>,
    /// p99 over the floor's p99 (target for every-put: <= 3); `null` when
    /// either has fewer than [`super::P99_SAMPLES_MIN`] samples.
    pub p99_vs_floor: Option<f64>,
    /// Records/s as a percentage of the consume-only ceiling.
    pub pct_of_ceiling: f64,
    /// The steady records/s (`throughput.steady`, counted at each
    /// `pre_commit`'s return: records durable, not put) as a
    /// percentage of the ceiling's steady records/s (by records taken).
    /// Until 2026-12-05 this divided by the ceiling's whole run, and
    /// cairn's window ran from its first commit to its next-to-last.
    pub steady_pct_of_ceiling: Option<f64>,
    /// Payload MB/s as a percentage of the disk's sequential write
    /// bandwidth measured in the same round (target for 1 KiB: >= 70).
    pub pct_of_disk_bandwidth: f64,
    /// The store's size on disk after the run: file lengths, and blocks
    /// allocated (what `du` shows).
    pub disk_bytes: u64,
    pub disk_bytes_allocated: u64,
    /// `disk_bytes` over the payload bytes archived.
    pub space_amplification: f64,
    /// What the run cost in CPU; `None` where `/proc` cannot tell.
    pub cpu: Option<Cpu>,
    /// The ceiling's CPU per record over this run's, the mock broker's
    /// included in both: the share of the ceiling's records/s this run gets
    /// where both are CPU-bound (see [`Cpu`]).
    pub ceiling_cpu_ratio: Option<f64>,
}

impl CairnRun {
    pub fn relate(
        &mut self,
        floor: &Floor,
        ceiling: &Throughput,
        ceiling_cpu: Option<&Cpu>,
        disk: &Throughput,
    ) {
        self.ceiling_cpu_ratio = self
            .cpu
            .zip(ceiling_cpu)
            .map(|(own, c)| c.total_us_per_record() / own.total_us_per_record().max(1e-9));
        self.p50_vs_floor = over(self.put_to_commit.p50(), floor.sum.p50());
        self.p99_vs_floor = over(self.put_to_commit.p99(), floor.sum.p99());
        self.pct_of_ceiling = 100.0 * self.throughput.records_per_s / ceiling.records_per_s;
        self.steady_pct_of_ceiling = self
            .throughput
            .steady
            .zip(ceiling.steady)
            .map(|(own, c)| 100.0 * own.records_per_s / c.records_per_s);
        self.pct_of_disk_bandwidth = 100.0 * self.throughput.mb_per_s / disk.mb_per_s;
    }
}

/// CPU time a process has used so far (user + system, every thread, exited
/// ones included), in seconds: `/proc/PID/stat` (`self` for this one),
/// whose times count USER_HZ ticks, 100 a second on Linux. `None` where it
/// cannot be read.
fn cpu_seconds(pid: &str) -> Option<f64> {
    stat_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// utime + stime of a `/proc/PID/stat` line, in seconds.
fn stat_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name, in parentheses, may hold spaces and parentheses:
    // count fields after the last `)`. The first is the state (field 3);
    // utime and stime are fields 14 and 15.
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// What a consumer's run cost in CPU. Where a run keeps every core busy,
/// its throughput is cores over CPU per record, so two runs that are both
/// CPU-bound relate as their CPU per record does. Neither run here quite
/// keeps both cores busy (see `cores_busy`), so the ratio of the two is what
/// the ratio of their records/s tracks, not a hard bound on it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Cpu {
    /// This process, all its threads, in µs per record, from just before the
    /// run starts (creating the consumer and joining the group, tens of ms;
    /// the ceiling reads metadata and assigns instead; cairn's store is
    /// opened before) to its last record.
    pub own_us_per_record: f64,
    /// The mock broker's process serving the run, over the same span; `None`
    /// against `--brokers`.
    pub broker_us_per_record: Option<f64>,
    /// Both together over the run's seconds (first record to last): how
    /// many cores the run kept busy (a little high: the CPU counted includes
    /// the start, which the seconds do not).
    pub cores_busy: f64,
}

impl Cpu {
    /// Every process's CPU per record that was measured.
    pub fn total_us_per_record(&self) -> f64 {
        self.own_us_per_record + self.broker_us_per_record.unwrap_or(0.0)
    }
}

/// CPU used since it was started, by this process and the mock broker.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    own_s: Option<f64>,
    broker: Option<(u32, f64)>,
}

impl CpuMeter {
    pub fn start(broker_pid: Option<u32>) -> CpuMeter {
        CpuMeter {
            own_s: cpu_seconds("self"),
            broker: broker_pid.and_then(|pid| Some((pid, cpu_seconds(&pid.to_string())?))),
        }
    }

    /// CPU seconds used since `start`: this process's and the broker's.
    pub fn used(&self) -> Option<(f64, Option<f64>)> {
        let own = cpu_seconds("self")? - self.own_s?;
        let broker = self
            .broker
            .and_then(|(pid, s)| Some(cpu_seconds(&pid.to_string())? - s));
        Some((own, broker))
    }
}

/// Least CPU time a run must use for its CPU per record to be reported:
/// `/proc` counts 10 ms ticks, so a reading is good to about ±20 ms.
const CPU_SECONDS_MIN: f64 = 0.5;

/// CPU per record of a run that `used` that much over `seconds`; `None` for
/// a run too short to measure.
fn per_record(used: Option<(f64, Option<f64>)>, records: u64, seconds: f64) -> Option<Cpu> {
    let (own, broker) = used?;
    if own < CPU_SECONDS_MIN {
        return None;
    }
    let records = records.max(1) as f64;
    Some(Cpu {
        own_us_per_record: own * 1e6 / records,
        broker_us_per_record: broker.map(|b| b * 1e6 / records),
        cores_busy: (own + broker.unwrap_or(0.0)) / seconds.max(1e-9),
    })
}

/// The process's peak resident set size (`VmHWM`).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// File lengths and allocated bytes of everything under `dir`.
/// Remove a scratch file and fsync the directory it was in: the removal's
/// journal commit is paid here, not by the next measured step's first
/// fsync.
pub(crate) fn remove_synced(path: &Path) {
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
}

/// A scratch store's directory, removed, and `out` (where it was) synced,
/// for the same reason as [`remove_synced`].
fn scratch_removed(dir: tempfile::TempDir, out: &Path) {
    let _ = dir.close();
    let _ = std::fs::File::open(out).and_then(|d| d.sync_all());
}

fn dir_bytes(dir: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let (mut len, mut allocated) = (0, 0);
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let m = entry.metadata()?;
        if m.is_dir() {
            let (l, a) = dir_bytes(&entry.path())?;
            len += l;
            allocated += a;
        } else {
            len += m.len();
            allocated += m.blocks() * 512;
        }
    }
    Ok((len, allocated))
}

/// The disk's sequential write bandwidth: `mib` MiB (256 by default) in
/// 1 MiB writes, then one fdatasync, timed together, in the directory the
/// stores use.
pub fn disk_bandwidth(out: &Path, mib: usize) -> Result<Throughput, String> {
    const CHUNK: usize = 1 << 20;
    let total = mib.max(1) * CHUNK;
    let path = out.join("bandwidth.dat");
    let mut f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let buf = vec![0xA5u8; CHUNK];
    let t = Instant::now();
    for _ in 0..total / CHUNK {
        f.write_all(&buf)
            .map_err(|e| format!("bandwidth write: {e}"))?;
    }
    f.sync_data()
        .map_err(|e| format!("bandwidth fdatasync: {e}"))?;
    let seconds = t.elapsed().as_secs_f64();
    drop(f);
    remove_synced(&path);
    Ok(Throughput::new(
        (total / CHUNK) as u64,
        total as u64,
        seconds,
    ))
}

/// Longest a measured run may take before it is stopped and reported.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// Sets `stop` once `limit` has passed, unless the returned sender is
/// dropped first. The thread's result says whether it set `stop`.
fn deadline(
    stop: Arc<AtomicBool>,
    limit: Duration,
) -> (mpsc::Sender<()>, std::thread::JoinHandle<bool>) {
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || match rx.recv_timeout(limit) {
        Err(mpsc::RecvTimeoutError::Timeout) => {
            stop.store(true, Ordering::Relaxed);
            true
        }
        _ => false,
    });
    (tx, watchdog)
}

/// What one archiving run produced.
struct Archived {
    report: RunReport,
    /// Records archived: every record produced to the case's topic.
    records: u64,
    fsyncs: u64,
    /// From the first record polled to the commit of the last.
    seconds: f64,
    /// Records durable over time: (seconds from the first record polled,
    /// records durable by then), at each `pre_commit`'s return.
    progress: Vec<(f64, u64)>,
    /// CPU used from just before the run to the commit of the last record.
    cpu: Option<Cpu>,
}

/// cairn's real loop (consume, put, fsync, commit) into the store at
/// `data`, until every partition's end offset is committed.
///
/// With `retention`, the archive is pruned beside the run as `cairn run
/// --retain-bytes` does (what retention costs while archiving). With
/// `live_reads`, the run serves its socket as `cairn run` does, so that
/// reads of the archive can be timed against the archiving.
fn archive(
    case: &Case,
    policy: CommitPolicy,
    data: &Path,
    retention: Option<(Retention, Duration)>,
    live_reads: bool,
) -> Result<Archived, String> {
    let ends = case.ends;
    let mut cfg = RunConfig::new(
        case.brokers,
        unique_group("cairn"),
        vec![case.topic.to_owned()],
        data.to_path_buf(),
    );
    cfg.commit = policy;
    cfg.batch_records_max = case.batch_records_max;
    let engine =
        Arc::new(Engine::open(EngineConfig::new(data)).map_err(|e| format!("engine: {e}"))?);
    let want: BTreeMap<TopicPartition, i64> = ends
        .iter()
        .filter(|(_, o)| **o > 0)
        .map(|(t, o)| (t.clone(), *o))
        .collect();
    let meter = CpuMeter::start(case.broker_pid);
    let done_at = Arc::new(Mutex::new(None));
    let done_at_w = done_at.clone();
    // Each `pre_commit`'s return and the records durable by then (below).
    let durable_at = Arc::new(Mutex::new(Vec::<(Instant, u64)>::new()));
    // A run that never completes (a broker that stopped answering) is
    // stopped cleanly at the deadline and reported, not waited on forever.
    let stop = Arc::new(AtomicBool::new(false));
    let (finished, watchdog) = deadline(stop.clone(), RUN_LIMIT);
    let opts = PipelineOptions {
        stop,
        done: Some(Box::new(move |c| {
            let done = want.iter().all(|(tp, o)| c.get(tp) == Some(o));
            if done {
                done_at_w
                    .lock()
                    .unwrap()
                    .get_or_insert_with(|| (Instant::now(), meter.used()));
            }
            done
        })),
        ..Default::default()
    };
    let mut sink = ArchiveSink::new(engine.clone());
    if live_reads {
        sink = sink.with_live_reads(Box::new(|| panic!("a live read poisoned the engine")));
    }
    if let Some((r, every)) = retention {
        let hook = Box::new(|e: &str| panic!("retention pass failed: {e}"));
        sink = sink
            .with_retention(r, every, hook)
            .map_err(|e| format!("retention: {e}"))?;
    }
    // cairn's progress for its steady window ([`super::Steady`]): each
    // `pre_commit`'s return and the records durable by then (each
    // partition's durable next offset, its records: fresh topics from 0,
    // no markers). Durable, as the Python loop's progress is (after its
    // fdatasync): until the second review of 2026-12-05 it was each put's
    // return and the records written, which under `interval:100` are in
    // the page cache until the next interval's sync, so a window could
    // leave the sync of its last records out (cairn's interval:100 steady
    // rate ran at up to 2.2x its whole run's at 1 KiB, every other
    // consumer's at 0.84-1.23x). Under `interval:100` that is one point an
    // interval, a handful a run: too few for a steady window, which is
    // then not given, and the run is judged whole.
    let mut durable = BTreeMap::<TopicPartition, i64>::new();
    let progress = durable_at.clone();
    let sink = WatchedSink::new(Box::new(sink)).after_pre_commit(Box::new(move |safe| {
        for (tp, &o) in safe {
            let d = durable.entry(tp.clone()).or_insert(o);
            *d = (*d).max(o);
        }
        let records = durable.values().map(|&o| o.max(0) as u64).sum();
        progress.lock().unwrap().push((Instant::now(), records));
    }));
    let report = run_pipeline(&cfg, Box::new(sink), opts);
    drop(finished);
    let timed_out = watchdog.join().unwrap_or(true);
    let report = report.map_err(|e| format!("cairn run: {e}"))?;
    if timed_out {
        return Err(format!(
            "cairn run: not done after {} s: stopped",
            RUN_LIMIT.as_secs()
        ));
    }
    let stats = engine.stats();
    let records = produced(ends);
    if stats.records_appended != records || report.stats.records_duplicate != 0 {
        return Err(format!(
            "cairn archived {} records ({} duplicates) of {records}",
            stats.records_appended, report.stats.records_duplicate
        ));
    }
    // Every put's latency is in the histogram (none went untimed while
    // commits were failing).
    if report.put_to_commit_us.len() != report.stats.puts {
        return Err(format!(
            "cairn timed {} of {} puts",
            report.put_to_commit_us.len(),
            report.stats.puts
        ));
    }
    let first = report.stats.first_record_at.ok_or("no record consumed")?;
    let (end, used) = done_at.lock().unwrap().ok_or("never done")?;
    let seconds = end.duration_since(first).as_secs_f64();
    let progress = durable_at
        .lock()
        .unwrap()
        .iter()
        .map(|(t, n)| (t.saturating_duration_since(first).as_secs_f64(), *n))
        .collect();
    Ok(Archived {
        report,
        records,
        fsyncs: stats.fsyncs,
        seconds,
        progress,
        cpu: per_record(used, records, seconds),
    })
}

/// What every measurement of cairn on one case shares.
pub struct Case<'a> {
    pub brokers: &'a str,
    pub topic: &'a str,
    /// Each partition's end offset: everything produced.
    pub ends: &'a BTreeMap<TopicPartition, i64>,
    pub batch_records_max: usize,
    /// Record size in bytes.
    pub size: usize,
    /// Where scratch stores go.
    pub out: &'a Path,
    /// MiB the disk bandwidth probe writes.
    pub disk_probe_mib: usize,
    /// The mock broker's process, whose CPU a run costs too.
    pub broker_pid: Option<u32>,
}

/// cairn's real loop into a fresh store, measured.
pub fn cairn(case: &Case, policy: CommitPolicy) -> Result<(CairnRun, Histogram<u64>), String> {
    // As `cairn run` does for its policy (and back to the defaults for the
    // next policy measured in this process).
    cairn_connector::allocator::tune();
    cairn_connector::allocator::tune_for(policy);
    let dir = tempfile::tempdir_in(case.out).map_err(|e| format!("scratch dir: {e}"))?;
    let a = archive(case, policy, dir.path(), None, false)?;
    let size = case.size;
    let (disk_bytes, disk_bytes_allocated) =
        dir_bytes(dir.path()).map_err(|e| format!("store size: {e}"))?;
    scratch_removed(dir, case.out);
    let records = a.records;
    let report = a.report;
    let run = CairnRun {
        policy: policy_name(policy),
        throughput: Throughput::new(records, records * size as u64, a.seconds)
            .with_steady(&a.progress),
        put_to_commit: Latency::of(&report.put_to_commit_us),
        puts: report.stats.puts,
        commits: report.stats.commits,
        fsyncs: a.fsyncs,
        fsyncs_per_s: a.fsyncs as f64 / a.seconds,
        payload_bytes: report.stats.payload_bytes,
        p50_vs_floor: None,
        p99_vs_floor: None,
        pct_of_ceiling: 0.0,
        steady_pct_of_ceiling: None,
        pct_of_disk_bandwidth: 0.0,
        disk_bytes,
        disk_bytes_allocated,
        space_amplification: disk_bytes as f64 / report.stats.payload_bytes.max(1) as f64,
        cpu: a.cpu,
        ceiling_cpu_ratio: None,
    };
    Ok((run, report.put_to_commit_us))
}

/// `cairn-bench archive`: archive in a process of its own, for its memory.
#[derive(Debug, clap::Args)]
pub struct ArchiveArgs {
    #[arg(long)]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    /// Each partition's end offset, `partition=offset,...`.
    #[arg(long)]
    pub ends: String,
    #[arg(long, value_parser = super::parse_policy)]
    pub policy: CommitPolicy,
    #[arg(long)]
    pub batch_records_max: usize,
    #[arg(long)]
    pub data: std::path::PathBuf,
    /// Prune to this many payload bytes per partition while archiving
    /// (`cairn run --retain-bytes`), every `--retention-check-interval-s`.
    #[arg(long, value_parser = cairn_connector::config::parse_size)]
    pub retain_bytes: Option<u64>,
    #[arg(long, default_value_t = 1)]
    pub retention_check_interval_s: u64,
    /// Serve status, export, verify, prune and backup on `DATA/cairn.sock`
    /// while archiving, as `cairn run` does.
    #[arg(long)]
    pub live_reads: bool,
}

/// The child's side: archive, then print the process's peak RSS.
pub fn archive_main(args: ArchiveArgs) -> Result<(), String> {
    let mut ends = BTreeMap::new();
    for pair in args.ends.split(',') {
        let (p, o) = pair.split_once('=').ok_or("--ends: partition=offset")?;
        let p: i32 = p.parse().map_err(|_| "--ends: partition")?;
        let o: i64 = o.parse().map_err(|_| "--ends: offset")?;
        ends.insert(TopicPartition::new(&args.topic, p), o);
    }
    // `archive` reads neither the record size, the scratch directory nor
    // the disk probe's size.
    let case = Case {
        brokers: &args.brokers,
        topic: &args.topic,
        ends: &ends,
        batch_records_max: args.batch_records_max,
        size: 0,
        out: &args.data,
        disk_probe_mib: 0,
        broker_pid: None,
    };
    // As `cairn run` does for its policy.
    cairn_connector::allocator::tune_for(args.policy);
    let retention = args.retain_bytes.map(|b| {
        (
            Retention {
                age: None,
                partition_bytes_max: Some(b),
            },
            Duration::from_secs(args.retention_check_interval_s),
        )
    });
    let a = archive(&case, args.policy, &args.data, retention, args.live_reads)?;
    println!(
        "peak_rss_bytes={} records_per_s={:.0} fsyncs={} p50_us={}",
        peak_rss_bytes().ok_or("no VmHWM in /proc/self/status")?,
        a.records as f64 / a.seconds,
        a.fsyncs,
        a.report.put_to_commit_us.value_at_quantile(0.5)
    );
    Ok(())
}

/// Memory and space of cairn archiving the case in a fresh process (this
/// harness's own RSS includes the other measurements).
#[derive(Debug, Clone, Serialize)]
pub struct Footprint {
    pub policy: String,
    /// The archiving process's peak resident set size (`VmHWM`).
    pub peak_rss_bytes: u64,
    pub disk_bytes: u64,
    pub disk_bytes_allocated: u64,
    pub payload_bytes: u64,
    pub space_amplification: f64,
}

pub fn footprint(case: &Case, policy: CommitPolicy) -> Result<Footprint, String> {
    let dir = tempfile::tempdir_in(case.out).map_err(|e| format!("scratch dir: {e}"))?;
    let ends_arg = case
        .ends
        .iter()
        .map(|(tp, o)| format!("{}={o}", tp.partition))
        .collect::<Vec<_>>()
        .join(",");
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    // The child stops its own run at RUN_LIMIT; the extra minute is for
    // opening and closing.
    let (finished, stdout) = child::output(
        "the archive child",
        std::process::Command::new(exe)
            .args(["archive", "--brokers", case.brokers, "--topic", case.topic])
            .args(["--ends", &ends_arg, "--policy", &policy_name(policy)])
            .args(["--batch-records-max", &case.batch_records_max.to_string()])
            .arg("--data")
            .arg(dir.path()),
        RUN_LIMIT + Duration::from_secs(60),
    )
    .map_err(|e| format!("archive child: {e}"))?;
    if !finished.status.success() {
        return Err(format!(
            "archive child exited with {} (its errors are above)",
            finished.status
        ));
    }
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let peak_rss_bytes = stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_bytes="))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("archive child printed no peak RSS: {stdout}"))?;
    let (disk_bytes, disk_bytes_allocated) =
        dir_bytes(dir.path()).map_err(|e| format!("store size: {e}"))?;
    scratch_removed(dir, case.out);
    let payload_bytes = produced(case.ends) * case.size as u64;
    Ok(Footprint {
        policy: policy_name(policy),
        peak_rss_bytes,
        disk_bytes,
        disk_bytes_allocated,
        payload_bytes,
        space_amplification: disk_bytes as f64 / payload_bytes.max(1) as f64,
    })
}

fn consumer(brokers: &str, group: &str) -> Result<BaseConsumer, String> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        // The same fetch tuning cairn uses, so the ceiling is not held back
        // by librdkafka's 1 s fetch backoff either.
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .map_err(|e| format!("consumer: {e}"))
}

/// Consume-only: take and drop, commit asynchronously every 100 ms. The
/// fastest a consumer of this broker can go: records are taken as cairn
/// takes them, from every partition's fetch queue forwarded to one queue
/// (`cairn_connector::fetch`), which costs the consumer thread less than
/// rust-rdkafka's `poll` (`take-cost`). The partitions are assigned
/// directly: there is no rebalance to serve, and the timing starts at the
/// first record.
pub fn ceiling(
    brokers: &str,
    broker_pid: Option<u32>,
    topic: &str,
    records: u64,
    size: usize,
) -> Result<(Throughput, Option<Cpu>, u64), String> {
    if records == 0 {
        return Err("ceiling: no records to consume".into());
    }
    let meter = CpuMeter::start(broker_pid);
    let c = consumer(brokers, &unique_group("ceiling"))?;
    let partitions = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| format!("ceiling: metadata: {e}"))?
        .topics()
        .first()
        .map_or(0, |t| t.partitions().len()) as i32;
    if partitions == 0 {
        return Err(format!("ceiling: {topic} has no partitions"));
    }
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.map_err(|e| format!("ceiling: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .map_err(|e| format!("ceiling: {e}"))?;
    }
    // Each partition forwarded before it is assigned, as cairn does: its
    // records then come only through the fetch queue.
    fetch
        .assign(&c, &tpl)
        .map_err(|e| format!("ceiling: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut n, mut bytes, mut first) = (0u64, 0u64, None);
    // Async commits, each 100 ms from the first record: counted as
    // requests queued (an async commit returns once queued; what the
    // broker answers is not awaited), and a refusal to queue one fails the
    // run.
    let (mut last_commit, mut commits): (Option<Instant>, u64) = (None, 0);
    let commit = |commits: &mut u64| {
        c.commit_consumer_state(CommitMode::Async)
            .map(|()| *commits += 1)
            .map_err(|e| format!("ceiling: async commit: {e}"))
    };
    let mut failed = None;
    // Records taken by then, after each take that took any: its steady
    // window.
    let mut progress: Vec<(Instant, u64)> = Vec::new();
    while n < records {
        if Instant::now() > deadline {
            return Err(format!("ceiling: {n} of {records} records in 600 s"));
        }
        // Client errors (the async commits' results go to the context's
        // commit callback, which does nothing with them).
        if let Some(Err(e)) = c.poll(Duration::ZERO) {
            return Err(format!("ceiling consumer: {e}"));
        }
        // No more than asked for: a topic may hold more.
        let want = (records - n).min(cairn_connector::fetch::TAKE_MAX as u64) as usize;
        fetch.take(Duration::from_millis(100), want, |m| {
            if let Some(e) = m.error() {
                failed = Some(format!("ceiling consumer: {e}"));
                return Flow::Stop;
            }
            first.get_or_insert_with(Instant::now);
            n += 1;
            bytes += m.payload().map_or(0, <[u8]>::len) as u64;
            Flow::Go
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if progress.last().map_or(0, |&(_, done)| done) < n {
            progress.push((Instant::now(), n));
        }
        if let Some(first) = first {
            let since = *last_commit.get_or_insert(first);
            if since.elapsed() >= Duration::from_millis(100) {
                commit(&mut commits)?;
                last_commit = Some(Instant::now());
            }
        }
    }
    let used = meter.used();
    let first = first.ok_or("ceiling: no record consumed")?;
    let seconds = first.elapsed().as_secs_f64();
    // The last position, outside the timed window: a run shorter than an
    // interval commits too.
    commit(&mut commits)?;
    let progress: Vec<(f64, u64)> = progress
        .iter()
        .map(|(t, n)| (t.saturating_duration_since(first).as_secs_f64(), *n))
        .collect();
    if bytes != records * size as u64 {
        return Err(format!(
            "ceiling: {bytes} payload bytes for {records} records of {size} B"
        ));
    }
    Ok((
        Throughput::new(records, bytes, seconds).with_steady(&progress),
        per_record(used, records, seconds),
        commits,
    ))
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Floor {
    /// Bytes appended before each fdatasync: cairn's mean put size.
    pub put_bytes: usize,
    /// The write of a put's bytes and the fdatasync that makes them
    /// durable, timed together (an fdatasync with nothing written before
    /// it has nothing to do): the floor's first term.
    pub fdatasync: Latency,
    /// The write alone, its share of `fdatasync` (reported since the night
    /// of 2026-12-04; its copy into the page cache is a part of the floor
    /// that grows with the record size).
    pub write: Latency,
    pub commit: Latency,
    /// The fdatasync's sample of rank i plus the commit's of rank i: each
    /// percentile is the sum of the two percentiles (hdrhistogram's
    /// precision aside).
    pub sum: Latency,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::of(&histogram())
    }
}

/// Largest the floor's file grows to before it is replaced by a new one
/// (2000 puts of 10 KiB records, 1000 to a put, would be 20 GB).
const FLOOR_FILE_BYTES_MAX: u64 = 1 << 30;

/// The floor: append a put's bytes to a file and fdatasync it, and commit
/// synchronously, each measured alone, `samples` times. The commit is one
/// partition's offset, with metadata as long as cairn's store identity
/// (an every-put commit of cairn's names the few partitions its put
/// covered, about 3 of 32 here), from a consumer whose partitions are
/// paused: one fetching the topic meanwhile slowed the commits it is the
/// floor of, and so flattered cairn's ratio.
///
/// The two are paired by rank (below), so that each percentile of the
/// floor is the fdatasync's plus the commit's.
///
/// Every sample appends, as cairn's puts do (an append changes the file's
/// size, which fdatasync must persist too; an overwrite would not): past
/// [`FLOOR_FILE_BYTES_MAX`] the file is removed and a new one started,
/// outside the timing.
pub fn floor(
    brokers: &str,
    topic: &str,
    put_bytes: usize,
    samples: usize,
    out: &Path,
) -> Result<(Floor, Histogram<u64>), String> {
    let path = out.join("floor.dat");
    // A new file, its creation (and the removal of the one it replaces)
    // committed before timing starts, not by the next timed fdatasync.
    let create = || {
        let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        f.sync_all().map_err(|e| format!("floor fsync: {e}"))?;
        std::fs::File::open(out)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("floor directory fsync: {e}"))?;
        Ok::<_, String>(f)
    };
    let mut f = create()?;
    let mut file_bytes = 0u64;
    let buf = vec![b'f'; put_bytes];
    let mut fsync_us = Vec::with_capacity(samples);
    let mut write_us = Vec::with_capacity(samples);
    for _ in 0..samples {
        if file_bytes > 0 && file_bytes + put_bytes as u64 > FLOOR_FILE_BYTES_MAX {
            drop(f);
            let _ = std::fs::remove_file(&path);
            f = create()?;
            file_bytes = 0;
        }
        file_bytes += put_bytes as u64;
        let t = Instant::now();
        f.write_all(&buf).map_err(|e| format!("floor write: {e}"))?;
        write_us.push(t.elapsed().as_micros() as u64);
        f.sync_data().map_err(|e| format!("floor fdatasync: {e}"))?;
        fsync_us.push(t.elapsed().as_micros() as u64);
    }
    drop(f);
    // The removal's journal commit is paid here, not by the next step's
    // first fsync (rotated rounds keep the disk step right after this one).
    remove_synced(&path);

    let c = consumer(brokers, &unique_group("floor"))?;
    c.subscribe(&[topic])
        .map_err(|e| format!("subscribe: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let assigned = loop {
        // Polling drives the group join; records polled are dropped.
        let _ = c.poll(Duration::from_millis(50));
        let a = c.assignment().map_err(|e| format!("assignment: {e}"))?;
        if a.count() > 0 {
            break a;
        }
        if Instant::now() > deadline {
            return Err("floor: no partition assigned in 60 s".into());
        }
    };
    c.pause(&assigned)
        .map_err(|e| format!("floor: pause: {e}"))?;
    // As long as cairn's: "cairn-store:" and 32 hex digits.
    let metadata = format!("cairn-store:{:032x}", 0u128);
    let mut commit_us = Vec::with_capacity(samples);
    for i in 0..samples {
        let mut tpl = TopicPartitionList::new();
        let first = &assigned.elements()[0];
        let mut p = tpl.add_partition(first.topic(), first.partition());
        p.set_offset(Offset::Offset(1 + (i % 2) as i64))
            .map_err(|e| e.to_string())?;
        p.set_metadata(&metadata);
        let t = Instant::now();
        c.commit(&tpl, CommitMode::Sync)
            .map_err(|e| format!("floor commit: {e}"))?;
        commit_us.push(t.elapsed().as_micros() as u64);
    }
    // Paired by rank, not by time: the floor's every percentile is then the
    // fdatasync's plus the commit's, as the issue defines the floor
    // ("fdatasync p50 + commit-RTT p50"). Until the night of 2026-12-04
    // sample i of one was paired with sample i of the other, in the order
    // taken, which the two measured apart do not justify: that floor's p50
    // read mostly above the sum of the p50s, and its p99 below the sum of
    // the p99s.
    let mut hw = histogram();
    for w in &write_us {
        hw.saturating_record((*w).max(1));
    }
    let (hf, hc, hs) = by_rank(&mut fsync_us, &mut commit_us);
    Ok((
        Floor {
            put_bytes,
            fdatasync: Latency::of(&hf),
            write: Latency::of(&hw),
            commit: Latency::of(&hc),
            sum: Latency::of(&hs),
        },
        hs,
    ))
}

/// Two series measured apart, as histograms of each and of their sum
/// paired by rank (the i-th smallest of one with the i-th smallest of the
/// other): the sum's every percentile is then the two's at that percentile
/// added, as the floor is defined. Sorts both.
fn by_rank(a: &mut [u64], b: &mut [u64]) -> (Histogram<u64>, Histogram<u64>, Histogram<u64>) {
    a.sort_unstable();
    b.sort_unstable();
    let (mut ha, mut hb, mut sum) = (histogram(), histogram(), histogram());
    for (x, y) in a.iter().zip(b.iter()) {
        ha.saturating_record((*x).max(1));
        hb.saturating_record((*y).max(1));
        sum.saturating_record((x + y).max(1));
    }
    (ha, hb, sum)
}

/// A ratio of two latencies, `own` over `base` (`None` where either has
/// too few samples for the quantile).
pub(super) fn over(own: Option<u64>, base: Option<u64>) -> Option<f64> {
    own.zip(base)
        .map(|(own, base)| own as f64 / base.max(1) as f64)
}

/// Records produced to a case's topic: the sum of its partitions' end
/// offsets (the harness produces from offset 0).
fn produced(ends: &BTreeMap<TopicPartition, i64>) -> u64 {
    ends.values().map(|o| *o as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::{by_rank, cpu_seconds, over, per_record, stat_cpu_seconds};

    /// The floor's sum, paired by rank, has at each percentile the sum of
    /// the two series' percentiles, whatever order they were taken in: here
    /// the slow fdatasyncs came with the fast commits, which paired by time
    /// would flatten the sum's tail.
    #[test]
    fn the_floor_pairs_its_two_parts_by_rank() {
        let mut fsync: Vec<u64> = (1..=1000).map(|i| 100 + i).collect();
        let mut commit: Vec<u64> = (1..=1000).rev().map(|i| 40 + 10 * i).collect();
        let (hf, hc, hs) = by_rank(&mut fsync, &mut commit);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let parts = hf.value_at_quantile(q) + hc.value_at_quantile(q);
            let sum = hs.value_at_quantile(q);
            // Within the histograms' precision (3 significant digits).
            assert!(
                sum.abs_diff(parts) * 500 <= parts,
                "{q}: {sum} against {parts}"
            );
        }
        let top = hf.max() + hc.max();
        assert!(
            hs.max().abs_diff(top) * 500 <= top,
            "{} against {top}",
            hs.max()
        );
        assert_eq!(hs.len(), 1000);
    }

    /// A latency ratio is cairn's over the baseline's, not the reverse;
    /// none where either side is missing.
    #[test]
    fn a_latency_ratio_is_own_over_base() {
        assert_eq!(over(Some(300), Some(200)), Some(1.5));
        assert_eq!(over(Some(5), Some(0)), Some(5.0));
        assert_eq!(over(None, Some(200)), None);
        assert_eq!(over(Some(300), None), None);
    }

    #[test]
    fn cpu_per_record_and_cores_busy() {
        let c = per_record(Some((1.0, Some(0.5))), 1_000_000, 2.0).unwrap();
        assert!((c.own_us_per_record - 1.0).abs() < 1e-9);
        assert!((c.broker_us_per_record.unwrap() - 0.5).abs() < 1e-9);
        assert!((c.cores_busy - 0.75).abs() < 1e-9);
        assert!((c.total_us_per_record() - 1.5).abs() < 1e-9);
        let c = per_record(Some((1.0, None)), 1_000_000, 2.0).unwrap();
        assert_eq!(c.broker_us_per_record, None);
        // Too little CPU to tell from 10 ms ticks, or none read.
        assert!(per_record(Some((0.4, Some(0.1))), 1_000_000, 2.0).is_none());
        assert!(per_record(None, 1_000_000, 2.0).is_none());
    }

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        // A command name with spaces and a `)` of its own; utime 250 and
        // stime 50 ticks.
        let stat = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(stat_cpu_seconds(stat), Some(3.0));
        assert_eq!(stat_cpu_seconds("4242 (x) S 1"), None);
        assert_eq!(stat_cpu_seconds("no parenthesis"), None);
        // This process has run (the test itself), and reading it twice
        // never goes backwards.
        let a = cpu_seconds("self").expect("/proc/self/stat");
        let b = cpu_seconds("self").expect("/proc/self/stat");
        assert!(a >= 0.0 && b >= a);
    }
}

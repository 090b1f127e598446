//! `cairn run`: the archive process.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_engine::{Engine, EngineConfig};

use crate::config::{
    parse_age, parse_kv, parse_size, CommitPolicy, FileConfig, OnOffsetOutOfRange, OnOversize,
    RunConfig, RETENTION_CHECK_INTERVAL_S_DEFAULT,
};
use crate::consumer::{run_pipeline, PipelineOptions};
use crate::error::{ConnectorError, Result};
use crate::task::ArchiveSink;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kafka bootstrap servers, host:port[,host:port].
    #[arg(long, short = 'b')]
    pub brokers: Option<String>,
    /// Consumer group id.
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Topics to archive, comma-separated.
    #[arg(long, short = 't', value_delimiter = ',')]
    pub topics: Vec<String>,
    /// The archive's data directory (created if missing).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// every-put: fsync each put and commit it at once; interval:<ms>: fsync and commit every <ms> (puts in between are written without an fsync).
    #[arg(long)]
    pub commit: Option<CommitPolicy>,
    /// Most records in one put.
    #[arg(long)]
    pub batch_records_max: Option<usize>,
    /// Most bytes a batch holds between poll and put (the backpressure
    /// bound): payload plus ~100 per record and 48 per header.
    #[arg(long)]
    pub batch_bytes_max: Option<usize>,
    /// Longest a polled record waits before its put.
    #[arg(long)]
    pub linger_ms: Option<u64>,
    /// Largest record accepted (key + value + headers).
    #[arg(long)]
    pub record_bytes_max: Option<u64>,
    /// What to do with a record over --record-bytes-max.
    #[arg(long, value_enum)]
    pub on_oversize: Option<OnOversize>,
    /// The topic `--on-oversize dead-letter` produces oversize records to (it must exist).
    #[arg(long)]
    pub dead_letter_topic: Option<String>,
    /// What to do when the archive's offset has aged out of Kafka's retention.
    #[arg(long, value_enum)]
    pub on_offset_out_of_range: Option<OnOffsetOutOfRange>,
    /// Where to start partitions neither the archive nor Kafka has an offset for.
    #[arg(long)]
    pub auto_offset_reset: Option<String>,
    /// How long to wait for the brokers before giving up.
    #[arg(long)]
    pub connect_timeout_ms: Option<u64>,
    /// Log progress and lag this often, in seconds (0: only at stop) [default: 60].
    #[arg(long)]
    pub progress_interval_s: Option<u64>,
    /// Delete archived records older than this age (`30d`, `12h`), by their
    /// timestamps, while archiving [default: keep everything].
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub retain: Option<std::time::Duration>,
    /// Keep at most this many payload bytes per partition (`50GiB`, `500MB`),
    /// deleting the oldest entries, while archiving [default: no bound].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub retain_bytes: Option<u64>,
    /// How often to prune to --retain / --retain-bytes, in seconds [default: 60].
    #[arg(long)]
    pub retention_check_interval_s: Option<u64>,
    /// librdkafka property, as with kcat (repeatable).
    #[arg(short = 'X', value_parser = parse_kv, value_name = "KEY=VALUE")]
    pub kafka: Vec<(String, String)>,
    /// TOML file with the same keys as these flags; flags win.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl RunArgs {
    pub fn into_config(self) -> Result<RunConfig> {
        let file = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let missing = |what: &str, flag: &str| {
            ConnectorError::Config(format!(
                "{what}: missing (use {flag} or set it in --config)"
            ))
        };
        let brokers = self
            .brokers
            .or(file.brokers)
            .ok_or_else(|| missing("brokers", "--brokers"))?;
        let group = self
            .group
            .or(file.group)
            .ok_or_else(|| missing("group", "--group"))?;
        let topics = if self.topics.is_empty() {
            file.topics.unwrap_or_default()
        } else {
            self.topics
        };
        let data = self
            .data
            .or(file.data)
            .ok_or_else(|| missing("data", "--data"))?;
        let mut c = RunConfig::new(brokers, group, topics, data);
        let commit = match (self.commit, file.commit) {
            (Some(c), _) => Some(c),
            (None, Some(s)) => Some(s.parse().map_err(ConnectorError::Config)?),
            (None, None) => None,
        };
        if let Some(v) = commit {
            c.commit = v;
        }
        macro_rules! take {
            ($field:ident) => {
                if let Some(v) = self.$field.or(file.$field) {
                    c.$field = v;
                }
            };
        }
        take!(batch_records_max);
        take!(batch_bytes_max);
        take!(linger_ms);
        take!(record_bytes_max);
        take!(on_oversize);
        if let Some(t) = self.dead_letter_topic.or(file.dead_letter_topic) {
            c.dead_letter_topic = Some(t);
        }
        take!(on_offset_out_of_range);
        take!(auto_offset_reset);
        take!(connect_timeout_ms);
        take!(progress_interval_s);
        let retain = match (self.retain, file.retain) {
            (Some(r), _) => Some(r),
            (None, Some(s)) => Some(
                parse_age(&s).map_err(|e| ConnectorError::Config(format!("retain {s:?}: {e}")))?,
            ),
            (None, None) => None,
        };
        c.retain = retain;
        c.retain_bytes = self.retain_bytes.or(file.retain_bytes.map(|b| b.as_u64()));
        c.retention_check_interval_s = self
            .retention_check_interval_s
            .or(file.retention_check_interval_s);
        let mut kafka: BTreeMap<String, String> = file.kafka.unwrap_or_default();
        kafka.extend(self.kafka);
        c.kafka = kafka;
        c.validate()?;
        Ok(c)
    }
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let cfg = args.into_config()?;
    crate::allocator::tune_for(cfg.commit);
    let engine_cfg = EngineConfig::new(&cfg.data).record_bytes_max(cfg.record_bytes_max);
    let engine = Arc::new(Engine::open(engine_cfg)?);
    let r = engine.recovery_report();
    tracing::info!(data = %cfg.data.display(), frames_checked = r.frames_checked, truncated = r.truncated.is_some(), "archive open");
    let stop = Arc::new(AtomicBool::new(false));
    let signal_stop = stop.clone();
    // Installed before the archive is read, not when the task first runs.
    let mut signals = Signals::for_command()?;
    tokio::spawn(async move {
        signals.recv().await;
        tracing::info!(
            "signal received: draining, fsyncing, committing, closing (again to exit at once)"
        );
        signal_stop.store(true, Ordering::Relaxed);
        // A stop can take seconds (a put's fsync, the pruner's last pass, a
        // live prune finishing its partition, the consumer's close). Exiting
        // at once loses nothing: only what is durable was committed, and
        // the next start recovers the archive and resumes from it.
        signals.recv().await;
        tracing::error!("second signal: exiting at once, without the final commit; the next start recovers the archive and resumes from what is durable");
        std::process::exit(130);
    });
    let opts = PipelineOptions {
        stop: stop.clone(),
        ..Default::default()
    };
    let stop_on_poison = stop.clone();
    let mut sink = ArchiveSink::new(engine).with_live_reads(Box::new(move || {
        stop_on_poison.store(true, Ordering::Relaxed)
    }));
    let retention = cfg.retention();
    if retention.is_set() {
        let every_s = cfg
            .retention_check_interval_s
            .unwrap_or(RETENTION_CHECK_INTERVAL_S_DEFAULT);
        tracing::info!(
            retain = %cfg.retain.map_or("-".into(), |r| humantime::format_duration(r).to_string()),
            retain_bytes_per_partition = %cfg.retain_bytes.map_or("-".into(), |b| b.to_string()),
            every_s,
            "pruning the archive to its retention"
        );
        // A failed pass stops the run, even an idle one: a clean stop,
        // whose end reports the pruner's error and exits non-zero.
        let stop_run = stop.clone();
        let on_failure = Box::new(move |_: &str| stop_run.store(true, Ordering::Relaxed));
        sink = sink
            .with_retention(retention, Duration::from_secs(every_s), on_failure)
            .map_err(|e| ConnectorError::Sink(e.to_string()))?;
    }
    let sink = Box::new(sink);
    let report = tokio::task::spawn_blocking(move || run_pipeline(&cfg, sink, opts))
        .await
        .map_err(|e| ConnectorError::Sink(format!("pipeline thread: {e}")))??;
    let h = &report.put_to_commit_us;
    tracing::info!(
        records = report.stats.records_written,
        duplicates = report.stats.records_duplicate,
        puts = report.stats.puts,
        commits = report.stats.commits,
        put_to_commit_p50_us = h.value_at_quantile(0.5),
        put_to_commit_p99_us = h.value_at_quantile(0.99),
        dead_lettered = report.stats.records_dead_lettered,
        oversize_skipped = report.stats.records_oversize_skipped,
        revoke_commit_failures = report.stats.revoke_commit_failures,
        final_commit_failed = report.stats.final_commit_failed,
        "stopped cleanly"
    );
    Ok(ExitCode::SUCCESS)
}

/// SIGINT or SIGTERM.
pub async fn wait_for_signal() {
    signals().expect("install signal handlers").await
}

/// SIGINT or SIGTERM, with both handlers installed before this returns (a
/// signal that comes before the future is first polled is not lost).
pub fn signals() -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut s = Signals::install()?;
    Ok(async move { s.recv().await })
}

/// SIGINT and SIGTERM, their handlers installed when this is made, for a
/// caller that waits for more than one (`restore`: the second exits at
/// once). Keep one and read it again: a second one made now would hear the
/// first signal too, and one made after it could miss a quick second.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// [`install`](Self::install), for a command: its failure as the
    /// command's error.
    pub fn for_command() -> crate::Result<Signals> {
        Signals::install()
            .map_err(|e| ConnectorError::Sink(format!("cannot install signal handlers: {e}")))
    }

    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next SIGINT or SIGTERM since installing or the last `recv`.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

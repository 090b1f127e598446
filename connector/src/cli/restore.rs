//! `cairn restore`: produce archived records back into Kafka (see
//! `crate::restore`).

use crate::count::{counted, counted_were};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::outln;
use crate::config::parse_kv;
use crate::error::{ConnectorError, Result};
use crate::restore::{restore_until, RestoreConfig};

#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    /// Kafka bootstrap servers to restore into: host:port, comma-separated for several.
    #[arg(long, short = 'b')]
    pub brokers: String,
    #[command(flatten)]
    pub select: super::SelectArgs,
    /// Restore an archived topic into another topic (repeatable).
    #[arg(long, value_parser = parse_rename, value_name = "ARCHIVED=TARGET")]
    pub rename: Vec<(String, String)>,
    /// Restore into partitions that already hold records, after them.
    #[arg(long)]
    pub append: bool,
    /// Add a header of this name holding each record's archived offset.
    #[arg(long, value_name = "NAME")]
    pub offset_header: Option<String>,
    /// Continue each partition after the archived offset in its last record's --offset-header (a restore that stopped part way).
    #[arg(long)]
    pub resume: bool,
    /// How long to wait for the brokers before giving up (and, with --resume, for each of its two reads of the target partitions' first and last records), 1 to 3600000 (an hour).
    #[arg(value_parser = crate::config::whole::<u64>, long, default_value_t = 30_000, allow_negative_numbers = true)]
    pub connect_timeout_ms: u64,
    /// librdkafka producer property, as with kcat (repeatable).
    #[arg(short = 'X', value_parser = parse_kv, value_name = "KEY=VALUE")]
    pub kafka: Vec<(String, String)>,
    /// Restore into the archive's own topic even where the archive cannot pass over the copies (its log of a target partition does not end where Kafka's does, or the topic's id cannot be compared): a run of the archive then archives those past its log's end again. Refused without it.
    #[arg(long)]
    pub into_archived_topic: bool,
}

fn parse_rename(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_owned(), b.to_owned())),
        _ => Err(format!("{s:?}: expected ARCHIVED=TARGET")),
    }
}

impl RestoreArgs {
    pub fn into_config(self) -> Result<RestoreConfig> {
        let mut cfg = RestoreConfig::new(&self.brokers);
        cfg.select = self.select.into_selection();
        for (a, b) in self.rename {
            if let Some(prev) = cfg.rename.insert(a.clone(), b) {
                return Err(ConnectorError::Config(format!(
                    "--rename {a}: given twice (first into {prev:?})"
                )));
            }
        }
        cfg.append = self.append;
        cfg.offset_header = self.offset_header;
        cfg.resume = self.resume;
        cfg.into_archived_topic = self.into_archived_topic;
        cfg.connect_timeout_ms = self.connect_timeout_ms;
        cfg.kafka = super::kafka_flags(self.kafka)?;
        Ok(cfg)
    }
}

pub async fn run(args: RestoreArgs) -> Result<ExitCode> {
    // Settings first: a bad flag is refused before the archive is opened.
    let data = args.data.data.clone();
    let cfg = args.into_config()?;
    cfg.validate()?;
    // Before the wait for Kafka: a file named as the archive, or a folder
    // that holds none, is said at once, not after "cannot reach Kafka"
    // (until 2026-12-07 only a file was; found by an audit).
    super::refuse_no_archive(&data)?;
    // Installed before Kafka is asked and the archive is opened (its
    // recovery can take long): a signal meanwhile stops the restore before
    // it sends anything.
    let signals = super::run::Signals::for_command()?;
    // SIGINT or SIGTERM: stop sending, wait for what was sent, and say where
    // each partition resumes, rather than die with records in flight. A
    // second signal exits at once (tokio keeps the handler installed, so
    // without this nothing short of SIGKILL would).
    let stop = Arc::new(AtomicBool::new(false));
    // What a killed restore needs, said as it exits like one (seen in
    // review, 2026-12-06: it named no way on).
    let second = format!(
        "second signal: exiting without waiting; records in flight may or may not have been written: as after a killed restore, wait until the targets' replicas have caught up (at most replica.lag.time.max.ms, 30 s by default), then {}",
        way_on_unplanned(&cfg)
    );
    let watcher = signals.stop_then_exit(
        stop.clone(),
        // Said whatever RUST_LOG keeps, as `run`'s.
        || super::say("WARN", &"signal received: stopping the restore: records not yet sent are withdrawn, those sent acknowledged (again to exit at once)", None),
        move || super::say("ERROR", &second, None),
    );
    // Kafka first: a mistyped broker or target topic is refused before the
    // archive is opened (recovered, perhaps upgraded).
    let opened = tokio::task::block_in_place(|| {
        crate::restore::check_kafka(&cfg, &|| stop.load(Ordering::Relaxed))
    })
    // A lock's holder named, as the reading commands name it, with advice
    // for a restore, which a run does not serve (until 2026-12-07 the
    // engine's "stop that process first", also of a prune part-way).
    .and_then(|()| super::open_stopped(&data, super::Access::Read, super::Opener::Restore));
    let engine = match opened {
        Ok(engine) => engine,
        Err(e) => {
            watcher.abort();
            return Err(e);
        }
    };
    let output = format!(
        "; records sent before it may or may not have been written, and no resume point was worked out: the targets hold what was acknowledged; {}",
        way_on_unplanned(&cfg)
    );
    let output = output.as_str();
    let result = tokio::task::block_in_place(|| {
        super::read_unpanicked("restore", &data, &engine, output, || {
            restore_until(&engine, &cfg, &|| stop.load(Ordering::Relaxed))
        })
    });
    watcher.abort();
    if let Err(e @ ConnectorError::RestoreStopped { .. }) = &result {
        // Interrupted, as asked: the shell's convention for SIGINT. Closed,
        // not dropped, here too (until 2026-12-06 the drop's sync failing
        // only logged, and the exit stayed 130; found by an audit).
        super::say_stopped(&e);
        engine.close()?;
        return Ok(ExitCode::from(130));
    }
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            // The restore's error is the one returned.
            let poisoned = engine.is_poisoned();
            super::log_close_after_failure(poisoned, engine.close());
            return Err(e);
        }
    };
    // Closed, not dropped: a failed sync of what the open wrote exits 1,
    // as any failed fsync does (since 2026-12-05; the drop's sync left the
    // poison mark, but the command exited 0). After the report, which
    // says what Kafka acknowledged whatever the archive's disk does.
    let written = print_report(&report);
    let closed = engine.close();
    if written.is_err() || closed.is_err() {
        // Every record was acknowledged: said, so that neither error is
        // taken for a failed restore and run again with --append, which
        // would send everything twice (until 2026-12-05 it was not).
        super::say_warn!(
            "the restore is complete ({} into {}, all acknowledged), but {}",
            counted(report.records, "record"),
            counted(report.partitions.len() as u64, "partition"),
            match (&written, &closed) {
                (Err(_), Ok(())) => "its report could not be written".to_owned(),
                (Ok(()), _) => "the archive's closing sync failed (the archive, not the restore, needs a look)".to_owned(),
                (Err(_), Err(e)) => format!("its report could not be written, and the archive's closing sync failed too ({e}): the archive, not the restore, needs a look"),
            }
        );
    }
    written?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

/// The restore's report, on standard output.
fn print_report(report: &crate::restore::RestoreReport) -> Result<()> {
    for p in &report.partitions {
        let range = match (p.first_offset, p.last_offset) {
            (Some(a), Some(b)) => format!("archived offsets {a}..={b}"),
            // A `--resume` of a restore that had finished: said as where
            // it looked (until 2026-12-07 "nothing in range", which read
            // as a selection gone wrong; an audit).
            _ if p.from > 0 => format!("nothing in range from archived offset {}", p.from),
            _ => "nothing in range".to_owned(),
        };
        outln!(
            "{} -> {}: {} ({range})",
            p.source,
            p.target,
            counted(p.records, "record")
        )?;
    }
    for p in &report.passed_over {
        outln!(
            "archive: {} passes over the {} restored copies at offsets {}..={}: a run of the archive resumes at {}",
            p.partition,
            p.to - p.from,
            p.from,
            p.to - 1,
            p.to
        )?;
    }
    if report.timestamps_replaced > 0 {
        outln!(
            "{} archived with a timestamp of 0 (which librdkafka's producer reads as \"now\") or below -1 (which a broker refuses when it rebuilds a batch): {} the time of restore",
            counted_were(report.timestamps_replaced, "record"),
            if report.timestamps_replaced == 1 {
                "it carries"
            } else {
                "they carry"
            }
        )?;
    }
    let secs = report.elapsed.as_secs_f64();
    outln!(
        "restored {} ({}) into {} in {:.1} s",
        counted(report.records, "record"),
        counted(report.payload_bytes, "payload byte"),
        counted(report.partitions.len() as u64, "partition"),
        secs
    )?;
    Ok(())
}

/// How a restore goes on that stopped with no resume points worked out
/// (killed by a second signal, or its planning cut short): only one made
/// with `--offset-header`, and not `--append` (which `--resume` refuses,
/// and after which a plain one would take partitions the run sent
/// nothing to), continues with `--resume` (until 2026-12-06 an `--append`
/// run was told to as well; found in review).
fn way_on_unplanned(cfg: &RestoreConfig) -> &'static str {
    if cfg.offset_header.is_some() && !cfg.append {
        "rerun the same command with --resume: it continues from what each target holds"
    } else {
        "read each target's last record, find it in the archive (cairn export of that partition prints each record's archived offset: match its key, value and timestamp; the target's own offsets differ wherever the archive's have gaps, as transaction markers and compaction leave), and restore the rest from the archived offset after it with --topic, --partition, --from and --append (records in flight may arrive twice)"
    }
}

#[cfg(test)]
mod tests {
    use super::RestoreArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: RestoreArgs,
    }

    /// `--into-archived-topic` reaches the restore's settings, and is off
    /// unless given (tests/tests/restore.rs has what it changes).
    #[test]
    fn into_archived_topic_is_off_unless_given() {
        let cfg = |flags: &[&str]| {
            let base = ["restore", "--data", "d", "--brokers", "b:1"];
            let argv = base.iter().chain(flags);
            Command::try_parse_from(argv)
                .unwrap()
                .args
                .into_config()
                .unwrap()
        };
        assert!(!cfg(&[]).into_archived_topic);
        assert!(cfg(&["--into-archived-topic"]).into_archived_topic);
    }
}

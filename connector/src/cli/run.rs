//! `cairn run`: the archive process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_engine::{Engine, EngineConfig};

use super::holds_archive;
use crate::config::{
    parse_age_flag, parse_kv, parse_size_flag, CommitPolicy, FileConfig, FlagValue,
    OnOffsetOutOfRange, OnOversize, RunConfig, RETENTION_CHECK_INTERVAL_S_DEFAULT,
};
use crate::consumer::{run_pipeline, PipelineOptions};
use crate::error::{ConnectorError, Result};
use crate::task::ArchiveSink;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kafka bootstrap servers: host:port, comma-separated for several
    /// (required, here or in --config).
    #[arg(long, short = 'b')]
    pub brokers: Option<String>,
    /// Consumer group id (required, here or in --config).
    #[arg(long, short = 'g')]
    pub group: Option<String>,
    /// Topics to archive, comma-separated (required, here or in --config).
    #[arg(long, short = 't', visible_alias = "topic", value_delimiter = ',')]
    pub topics: Vec<String>,
    /// The archive's data directory, created if missing (required, here or in --config).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// every-put: fsync each put and commit it at once; interval:MS: fsync and commit every MS milliseconds, 1 to 3600000 (puts in between are written without an fsync) [default: every-put].
    #[arg(long)]
    pub commit: Option<CommitPolicy>,
    /// Most records in one put, 1 to 1000000 [default: 10000].
    #[arg(value_parser = crate::config::whole::<usize>, long, allow_negative_numbers = true)]
    pub batch_records_max: Option<usize>,
    /// Most bytes a batch holds between poll and put (the backpressure
    /// bound): payload plus ~100 per record and 48 per header; a number of
    /// bytes, or a size with its unit (8MiB), 1024 to 268435456 [default: 8388608].
    #[arg(long, allow_negative_numbers = true, value_name = "BYTES", value_parser = crate::config::parse_byte_count_usize)]
    pub batch_bytes_max: Option<usize>,
    /// Longest a polled record waits before its put, 0 to 60000 [default: 5].
    #[arg(value_parser = crate::config::whole::<u64>, long, allow_negative_numbers = true)]
    pub linger_ms: Option<u64>,
    /// Largest record accepted (key + value + headers), a number of bytes
    /// or a size with its unit (16MiB), at most 16777216 [default: 8388608]; a larger one is
    /// handled as `--on-oversize` says.
    #[arg(long, allow_negative_numbers = true, value_name = "BYTES", value_parser = crate::config::parse_byte_count)]
    pub record_bytes_max: Option<u64>,
    /// What to do with a record over --record-bytes-max [default: fail].
    #[arg(long, value_enum)]
    pub on_oversize: Option<OnOversize>,
    /// The topic `--on-oversize dead-letter` produces oversize records to (it must exist).
    #[arg(long)]
    pub dead_letter_topic: Option<String>,
    /// What to do when the archive's offset has aged out of Kafka's retention [default: fail].
    #[arg(long, value_enum)]
    pub on_offset_out_of_range: Option<OnOffsetOutOfRange>,
    /// Where to start partitions neither the archive nor Kafka has an offset for: earliest or latest [default: earliest].
    // Refused by its parser, exit 2, as the other choices are (until
    // 2026-12-05 a bad value was found after parsing, exit 1).
    #[arg(long, value_name = "earliest|latest", value_parser = ["earliest", "latest"])]
    pub auto_offset_reset: Option<String>,
    /// How long to wait for the brokers before giving up, 1 to 3600000 (an hour) [default: 10000].
    #[arg(value_parser = crate::config::whole::<u64>, long, allow_negative_numbers = true)]
    pub connect_timeout_ms: Option<u64>,
    /// Log progress and lag this often, in seconds, at most 86400 (0: only at stop) [default: 60].
    #[arg(value_parser = crate::config::whole::<u64>, long, allow_negative_numbers = true)]
    pub progress_interval_s: Option<u64>,
    /// Delete archived records older than this age (`30d`, `12h`), by their
    /// timestamps, while archiving; `none` keeps everything, whatever
    /// --config says [default: keep everything].
    #[arg(long, value_name = "AGE", value_parser = parse_age_flag, allow_hyphen_values = true)]
    pub retain: Option<FlagValue<std::time::Duration>>,
    /// Keep at most this many payload bytes per partition (`50GiB`, `500MB`:
    /// a size with its unit; a bare number is refused), deleting the oldest
    /// entries, while archiving; `none` sets no bound, whatever --config
    /// says [default: no bound].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_flag, allow_hyphen_values = true)]
    pub retain_bytes: Option<FlagValue<u64>>,
    /// Seconds between the end of one retention pass and the start of the
    /// next, 1 to 86400; only with --retain or --retain-bytes [default: 60].
    #[arg(value_parser = crate::config::whole::<u64>, long, allow_negative_numbers = true)]
    pub retention_check_interval_s: Option<u64>,
    /// Serve the progress report's figures (counts, lag and offsets per
    /// partition, put-to-commit) as Prometheus metrics at
    /// http://ADDR/metrics, updated every --progress-interval-s
    /// (127.0.0.1:9464: this machine only) [default: no endpoint].
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// librdkafka property, as with kcat (repeatable).
    #[arg(short = 'X', value_parser = parse_kv, value_name = "KEY=VALUE")]
    pub kafka: Vec<(String, String)>,
    /// Take Kafka's topic id of these archived topics for the archive's
    /// when they differ, and record it (comma-separated, repeatable): for
    /// a topic moved to another cluster with its offsets kept. For this
    /// run only; not a config file key.
    #[arg(long, value_name = "TOPIC", value_delimiter = ',')]
    pub rebind_topic: Vec<String>,
    /// TOML file with the keys of these flags (not --rebind-topic or --log-format; -X as a table named kafka); flags win.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The keys whose value the config file gave (no flag overrode it), and
/// the file: an error about one of them names the file too.
#[derive(Debug, Default)]
pub struct FileKeys {
    path: Option<PathBuf>,
    keys: Vec<&'static str>,
    /// Keys the file gave that a flag overrode (`-X` ones as `kafka.KEY`).
    overridden: Vec<String>,
    /// The keys of the file's `[kafka]` table no `-X` overrode.
    kafka: Vec<String>,
    /// Where in the file each key is.
    lines: crate::config::KeyLines,
}

impl FileKeys {
    /// An INFO line naming the file's keys that flags overrode, if any:
    /// flags win, and until 2026-12-06 nothing said so when they did
    /// (`--topics` replaces the file's whole list; seen in review).
    pub fn say_overridden(&self) {
        if let (Some(path), false) = (&self.path, self.overridden.is_empty()) {
            tracing::info!(
                file = %path.display(),
                keys = %self.overridden.join(", "),
                "flags given on the command line override these keys of the config file (a flag's value replaces the file's whole value: --topics replaces its list of topics)"
            );
        }
    }

    /// `" (KEY, … set in [kafka] of FILE)"` for those of the librdkafka
    /// settings `keys` the file's `[kafka]` table gave and no `-X`
    /// overrode, or nothing if none: to follow a message naming them as
    /// `-X KEY`.
    pub fn said_kafka<'k>(&self, keys: impl IntoIterator<Item = &'k str>) -> String {
        let named: Vec<&str> = keys
            .into_iter()
            .filter(|key| self.kafka.iter().any(|k| k == key))
            .collect();
        let lines: Vec<String> = named
            .iter()
            .filter_map(|k| self.lines.kafka(k))
            .map(|l| l.to_string())
            .collect();
        match &self.path {
            Some(path) if !named.is_empty() => {
                format!(
                    " ({} set in [kafka] of {}{})",
                    named.join(", "),
                    path.display(),
                    match lines.len() {
                        0 => String::new(),
                        1 => format!(", line {}", lines[0]),
                        _ => format!(", lines {}", lines.join(", ")),
                    }
                )
            }
            _ => String::new(),
        }
    }

    /// " (KEY set in FILE)" when the file gave `key`, else nothing: to
    /// follow a message naming the setting.
    pub fn said(&self, key: &str) -> String {
        match &self.path {
            Some(path) if self.keys.contains(&key) => {
                let line = self
                    .lines
                    .own(key)
                    .map_or(String::new(), |l| format!(", line {l}"));
                format!(" ({key} set in {}{line})", path.display())
            }
            _ => String::new(),
        }
    }
}

impl RunArgs {
    pub fn into_config(self) -> Result<RunConfig> {
        self.into_config_noting().map(|(c, _)| c)
    }

    /// [`Self::into_config`], and which keys the config file gave.
    pub fn into_config_noting(self) -> Result<(RunConfig, FileKeys)> {
        // A value the file gives that does not parse: named with the file
        // and its key (a flag's is named by clap).
        let file_path = self.config.clone();
        let in_file = |key: &str, e: String| {
            let at = file_path.as_deref().unwrap_or(Path::new("the config file"));
            ConnectorError::Config(format!("{}: {key}: {e}", at.display()))
        };
        let file = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        // The keys whose value the file gave (no flag overrode it): a value
        // refused after parsing is named with the file too.
        let mut file_keys: Vec<&'static str> = Vec::new();
        let mut overridden: Vec<String> = Vec::new();
        let mut from_file = |key: &'static str, flag_given: bool, file_gives: bool| {
            if !flag_given && file_gives {
                file_keys.push(key);
            }
            if flag_given && file_gives {
                overridden.push(key.to_owned());
            }
        };
        from_file("brokers", self.brokers.is_some(), file.brokers.is_some());
        from_file("data", self.data.is_some(), file.data.is_some());
        from_file("group", self.group.is_some(), file.group.is_some());
        from_file("topics", !self.topics.is_empty(), file.topics.is_some());
        from_file("commit", self.commit.is_some(), file.commit.is_some());
        from_file("retain", self.retain.is_some(), file.retain.is_some());
        from_file(
            "retain-bytes",
            self.retain_bytes.is_some(),
            file.retain_bytes.is_some(),
        );
        from_file(
            "retention-check-interval-s",
            self.retention_check_interval_s.is_some(),
            file.retention_check_interval_s.is_some(),
        );
        from_file(
            "dead-letter-topic",
            self.dead_letter_topic.is_some(),
            file.dead_letter_topic.is_some(),
        );
        // A file that set no key (empty, or only comments: a template
        // that rendered nothing) is said to, beside the key missing: the
        // message read as a flag forgotten (until 2026-12-07; an audit).
        let sets_nothing = match &file_path {
            Some(p) if file.sets_no_key => format!("; {} sets no key", p.display()),
            _ => String::new(),
        };
        let missing = |what: &str, flag: &str| {
            ConnectorError::Config(format!(
                "{what}: missing (use {flag} or set it in --config{sets_nothing})"
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
        // The file's `data`, unless --data overrides it.
        if let (None, Some(d)) = (&self.data, &file.data) {
            // Empty (clap refuses an empty --data): a template rendered
            // empty (`data = "${DATA}"`) would put an archive in the file's
            // own folder, or the working directory.
            if d.as_os_str().is_empty() {
                return Err(ConnectorError::Config(format!(
                    "data = \"\" in {}{}: empty; give the archive's directory",
                    file_path
                        .as_deref()
                        .unwrap_or(Path::new("the config file"))
                        .display(),
                    file.lines
                        .own("data")
                        .map_or(String::new(), |l| format!(", line {l}"))
                )));
            }
            // `~` (`~/a`, `~user/a`) and `$VAR` are the shell's: TOML keeps
            // them, and the archive would start in a folder so named beside
            // the file (a template never rendered: `data = "${DATA}/a"`).
            // A real folder name with `$` in it is rarer than that mistake.
            let text = d.to_string_lossy();
            if text.starts_with('~') || text.contains('$') {
                return Err(ConnectorError::Config(format!(
                    "data = {:?} in {}{}: `~` and `$VARIABLES` are expanded by a shell, not in the file; write the full path (or give --data)",
                    d.display().to_string(),
                    file_path.as_deref().unwrap_or(Path::new("the config file")).display(),
                    file.lines.own("data").map_or(String::new(), |l| format!(", line {l}"))
                )));
            }
        }
        // A relative `data` in the file is the file's neighbour, wherever
        // the run is started from (a service's working directory is not the
        // file's): read from the working directory it would name another
        // folder, and a new empty archive would start there.
        // (Only when no --data overrides it: the flag wins.)
        let file_data = match (&self.config, file.data) {
            _ if self.data.is_some() => None,
            (Some(path), Some(d)) if d.is_relative() => {
                let beside = path.parent().unwrap_or(Path::new("")).join(&d);
                // Before 2026-12-02 it was read from the working directory:
                // an archive found only there is the one meant, not a new
                // one to start beside the file.
                if !holds_archive(&beside)? && holds_archive(&d)? && beside != d {
                    return Err(ConnectorError::Config(format!(
                        "data = {:?} in {}: a relative path there is now read from the file's folder ({}), which holds no archive, but {} from the working directory does: write the path absolute",
                        d.display().to_string(),
                        path.display(),
                        beside.display(),
                        d.display()
                    )));
                }
                Some(beside)
            }
            (_, d) => d,
        };
        let data = self
            .data
            .or(file_data)
            .ok_or_else(|| missing("data", "--data"))?;
        let mut c = RunConfig::new(brokers, group, topics, data);
        let commit = match (self.commit, file.commit) {
            (Some(c), _) => Some(c),
            (None, Some(s)) => Some(s.parse().map_err(|e| in_file("commit", e))?),
            (None, None) => None,
        };
        if let Some(v) = commit {
            c.commit = v;
        }
        macro_rules! take {
            ($field:ident, $key:literal) => {
                from_file($key, self.$field.is_some(), file.$field.is_some());
                if let Some(v) = self.$field.or(file.$field) {
                    c.$field = v;
                }
            };
        }
        take!(batch_records_max, "batch-records-max");
        take!(batch_bytes_max, "batch-bytes-max");
        take!(linger_ms, "linger-ms");
        take!(record_bytes_max, "record-bytes-max");
        // The file's dead-letter topic goes with the file's `on-oversize =
        // "dead-letter"`: a flag choosing another policy leaves it unused,
        // not an error. (A topic the file sets without that policy is
        // still refused.)
        let dead_letter_overridden = file.on_oversize == Some(OnOversize::DeadLetter)
            && self
                .on_oversize
                .is_some_and(|o| o != OnOversize::DeadLetter);
        take!(on_oversize, "on-oversize");
        c.dead_letter_topic = match self.dead_letter_topic {
            Some(t) => Some(t),
            None if dead_letter_overridden => None,
            None => file.dead_letter_topic,
        };
        take!(on_offset_out_of_range, "on-offset-out-of-range");
        take!(auto_offset_reset, "auto-offset-reset");
        take!(connect_timeout_ms, "connect-timeout-ms");
        take!(progress_interval_s, "progress-interval-s");
        from_file(
            "metrics-addr",
            self.metrics_addr.is_some(),
            file.metrics_addr.is_some(),
        );
        c.metrics_addr = self.metrics_addr.or(file.metrics_addr);
        let file_sets_retention = file.retain.is_some() || file.retain_bytes.is_some();
        c.retain = match self.retain {
            Some(flag) => flag.setting(),
            // The file's value is read only when no flag overrides it.
            // `none` as the flag takes it (refused in the file until
            // 2026-12-07; found by an audit).
            None => match file.retain {
                Some(s) => parse_age_flag(&s)
                    .map_err(|e| in_file("retain", format!("{s:?}: {e}")))?
                    .setting(),
                None => None,
            },
        };
        c.retain_bytes = match self.retain_bytes {
            Some(flag) => flag.setting(),
            None => match file.retain_bytes {
                Some(s) => parse_size_flag(&s)
                    .map_err(|e| in_file("retain-bytes", format!("{s:?}: {e}")))?
                    .setting(),
                None => None,
            },
        };
        // Likewise the file's check interval goes with the file's retention:
        // cleared by flags, it leaves the interval unused, not an error.
        let file_interval = file
            .retention_check_interval_s
            .filter(|_| !file_sets_retention || c.retention().is_set());
        c.retention_check_interval_s = self.retention_check_interval_s.or(file_interval);
        let mut kafka: BTreeMap<String, String> = file.kafka.unwrap_or_default();
        // The file's settings no flag overrides: an error about one names
        // it as `-X` (the form every source shares), so it says where it
        // came from too.
        // And those a flag overrides, said at the start.
        let (overridden_x, from_file): (Vec<String>, Vec<String>) = kafka
            .keys()
            .cloned()
            .partition(|k| self.kafka.iter().any(|(f, _)| f == k));
        overridden.extend(overridden_x.iter().map(|k| format!("kafka.{k}")));
        kafka.extend(super::kafka_flags(self.kafka)?);
        c.kafka = kafka;
        c.rebind_topics = self.rebind_topic;
        let noted = FileKeys {
            path: file_path,
            keys: file_keys,
            overridden,
            kafka: from_file,
            lines: file.lines,
        };
        c.validate().map_err(|e| match (e, &noted.path) {
            (ConnectorError::Config(m), Some(_)) => {
                let named = noted.said_kafka(
                    noted
                        .kafka
                        .iter()
                        .map(String::as_str)
                        .filter(|k| names_setting(&m, k)),
                );
                if named.is_empty() {
                    // A value the file gave, refused after parsing (`linger-ms
                    // = 70000`, `topics = []`): the error starts with its key.
                    let key = noted.keys.iter().find(|k| {
                        m.strip_prefix(**k)
                            .is_some_and(|rest| rest.starts_with([' ', ':']))
                    });
                    let said = key.map_or(String::new(), |k| noted.said(k));
                    return ConnectorError::Config(format!("{m}{said}"));
                }
                ConnectorError::Config(format!("{m}{named}"))
            }
            (e, _) => e,
        })?;
        Ok((c, noted))
    }
}

/// Whether the error `m` names the librdkafka setting `key`: as cairn
/// names one (`-X key=value`, `-X key:`, `-X key)`, `-X key and`), or as
/// librdkafka does (`"key"` for one property, `` `key` `` in a check
/// across several).
fn names_setting(m: &str, key: &str) -> bool {
    let as_flag = format!("-X {key}");
    let flagged = m.match_indices(&as_flag).any(|(at, _)| {
        m[at + as_flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| matches!(c, '=' | ':' | ')' | ' ' | ','))
    });
    flagged || m.contains(&format!("\"{key}\"")) || m.contains(&format!("`{key}`"))
}

pub async fn run(args: RunArgs) -> Result<ExitCode> {
    // The checks below name a setting as its flag; one the config file
    // gave is named with the file too, as `into_config` names its own
    // (until the night of 2026-12-04 these named the flag alone).
    let (cfg, file_keys) = args.into_config_noting()?;
    file_keys.say_overridden();
    crate::allocator::tune_for(cfg.commit);
    refuse_foreign_dir(&cfg.data).map_err(|e| match e {
        ConnectorError::Config(m) => {
            ConnectorError::Config(format!("{m}{}", file_keys.said("data")))
        }
        e => e,
    })?;
    if let Some(fs) = memory_backed(&cfg.data) {
        super::say_warn!(
            "--data {}: on {fs}, which keeps files in memory only: its fsyncs make nothing durable, so Kafka's offsets will be committed for records a reboot or power loss takes from the archive (put the archive on a disk){}",
            cfg.data.display(),
            file_keys.said("data")
        );
    }
    // Allowed (a test may want it), but never silently: an age under a
    // minute deletes nearly all that is archived at every pass, and is
    // most likely a unit slip (`--retain 1ms`, taken without a word until
    // 2026-12-07; an audit), as `--retain-bytes` below an entry is.
    if let Some(age) = cfg.retain.filter(|a| *a < Duration::from_secs(60)) {
        super::say_warn!(
            "--retain {}: records older than that are deleted at every pass, which is nearly everything archived (ages are most likely days or hours: 7d, 12h){}",
            humantime::format_duration(age),
            file_keys.said("retain")
        );
    }
    if let Some(b) = cfg.retain_bytes {
        super::warn_if_below_an_entry(
            "--retain-bytes",
            b,
            Some(cfg.record_bytes_max),
            &file_keys.said("retain-bytes"),
        );
    }
    // Allowed (OPERATIONS.md), but never silently: a copied kcat or
    // client command line can carry it, and then a batch Kafka damaged in
    // flight or at rest is archived as it arrives (since 2026-12-06; found
    // by an audit).
    if let Some((key, value)) =
        crate::librdkafka::setting_other_than(&cfg.kafka, "check.crcs", Some("true"))
    {
        super::say_warn!(
            "-X {key}={value}: librdkafka will not check the CRC of the record batches it fetches, so a batch damaged on the way or on the brokers' disks is archived as it arrives, its damage checksummed as if it were the record (leave it out to keep the check){}",
            file_keys.said_kafka([key])
        );
    }
    // Allowed (OPERATIONS.md, "Defaults cairn sets"), but never silently:
    // under eager assignment a partition moving between members may be
    // archived twice across their stores, and an offset reset restarts
    // every partition's fetch (until 2026-12-07 nothing said so; an audit).
    if let Some((key, value)) = crate::librdkafka::setting_other_than(
        &cfg.kafka,
        "partition.assignment.strategy",
        Some("cooperative-sticky"),
    ) {
        super::say_warn!(
            "-X {key}={value}: eager assignment, in place of cairn's cooperative-sticky: a partition that moves to another member while the group refuses commits is archived again by its new owner's store (each store stays free of duplicates, the two together are not), and an offset reset restarts the fetch of every partition (docs/OPERATIONS.md, \"Defaults cairn sets\"; leave it out to keep cooperative-sticky){}",
            file_keys.said_kafka([key])
        );
    }
    // A directory this run makes is removed again if the run fails or
    // stops having archived nothing (a broker that does not answer, a topic
    // it lacks, a signal while waiting, or a stop before the group assigned
    // it anything): left, it would pass for an archive from then on (a
    // mistyped --data, kept). (A dangling link is taken as there.)
    let made_here = std::fs::symlink_metadata(&cfg.data).is_err();
    // The open makes the missing folders above it too (`--data a/b/c`
    // with no `a`): those go with it, when empty.
    let made_above = missing_ancestors(&cfg.data);
    let data = cfg.data.clone();
    let dead_letter_topic = cfg.dead_letter_topic.clone();
    // A topic the file named is said to be set there.
    let set_in = |topic: &String| {
        file_keys.said(if dead_letter_topic.as_ref() == Some(topic) {
            "dead-letter-topic"
        } else {
            "topics"
        })
    };
    let ran = archive(cfg).await.map_err(|mut e| {
        // Where the brokers came from, when the file gave them (since
        // 2026-12-05), whether Kafka never answered or went away since.
        if let ConnectorError::BrokerUnreachable { brokers, .. }
        | ConnectorError::KafkaGone { brokers, .. } = &mut e
        {
            brokers.push_str(&file_keys.said("brokers"));
        }
        match e {
            ConnectorError::UnknownTopic {
                topic,
                brokers,
                next_step,
            } => ConnectorError::UnknownTopic {
                next_step: format!("{next_step}{}", set_in(&topic)),
                topic,
                brokers,
            },
            ConnectorError::TopicUnavailable {
                topic,
                named_by,
                brokers,
                why,
            } => {
                let set_in = set_in(&topic);
                ConnectorError::TopicUnavailable {
                    named_by: if set_in.is_empty() { named_by } else { set_in },
                    topic,
                    brokers,
                    why,
                }
            }
            e => e,
        }
    });
    // (Not when the open failed before making it: nothing to remove. A run
    // that wrote records keeps its archive without opening it again to
    // look; one that failed after writing some (a failed fsync), by its
    // poison mark or its watermark, also unopened: `remove_if_empty`.)
    let wrote = matches!(ran, Ok((_, written)) if written > 0);
    if !wrote && made_here && data.exists() {
        remove_unused_archive(&data, ran.is_ok());
        if !data.exists() {
            for dir in made_above {
                // Only an empty one: another process may have put
                // something there meanwhile.
                if std::fs::remove_dir(&dir).is_err() {
                    break;
                }
            }
        }
    }
    ran.map(|(code, _)| code)
}

/// The folders above `path` that do not exist, nearest first.
fn missing_ancestors(path: &Path) -> Vec<PathBuf> {
    path.ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .map(Path::to_path_buf)
        .collect()
}

/// The archive's run under `cfg`, from the engine's open on.
/// The run, to its exit code and the records it wrote.
async fn archive(cfg: RunConfig) -> Result<(ExitCode, u64)> {
    // Installed, and watched, before the archive is read (its recovery,
    // or a format upgrade, can take minutes): a signal meanwhile stops the
    // run cleanly once the open is done, and a second exits at once.
    let stop = Arc::new(AtomicBool::new(false));
    // Where the run is, for what the first signal says: "draining,
    // fsyncing, committing" while it still waited for Kafka claimed work
    // there was none of (until 2026-12-07; an audit).
    const WAITING: u8 = 0;
    const OPENING: u8 = 1;
    const RUNNING: u8 = 2;
    let phase = Arc::new(std::sync::atomic::AtomicU8::new(WAITING));
    let said_phase = phase.clone();
    // A stop can take seconds (a put's fsync, the pruner's step or last
    // pass, a live prune finishing its step, the consumer's close). Exiting
    // at once loses nothing: only what is durable was committed, and the
    // next start recovers the archive and resumes from it.
    Signals::for_command()?.stop_then_exit(
        stop.clone(),
        // Both said whatever RUST_LOG keeps: the first so that a stop that
        // takes a while is not taken for a hang and signalled again (until
        // 2026-12-06 a tracing event, which RUST_LOG=warn dropped; found by
        // an audit), the second because it is why the exit is 130 (until
        // 2026-12-05 a tracing event too). The second comes in any phase
        // (Kafka's check, the open, the run, its stop), so it claims no
        // more than holds in each.
        move || {
            let what = match said_phase.load(Ordering::Relaxed) {
                WAITING => "signal received: stopping the wait for Kafka, with nothing opened or written yet (again to exit at once)",
                OPENING => "signal received: stopping once the archive's open is done (a recovery or a format upgrade can take a while); nothing will be fetched (again to exit at once)",
                _ => "signal received: draining, fsyncing, committing, closing (again to exit at once)",
            };
            super::say("INFO", &what, None)
        },
        || super::say("ERROR", &"second signal: exiting at once, without waiting for the stop to finish (a final commit not made yet is not made); Kafka's committed offsets never pass what is durable, so the next start loses nothing: it recovers the archive and resumes from what it holds", None),
    );
    // A run already archiving into --data is said at once, before Kafka
    // is waited for: the open would only refuse the archive as locked, and
    // with Kafka unreachable the error was Kafka's, after the whole connect
    // timeout, without a word of the lock (until 2026-12-07; found by an
    // audit). Its socket answering is proof enough; no lock is touched.
    if crate::live::connect(&cfg.data)?.is_some() {
        return Err(ConnectorError::Config(format!(
            "--data {}: a cairn run is archiving into it already (its socket, {}, answers): stop that run first, or give this one an archive of its own",
            cfg.data.display(),
            cfg.data.join(crate::live::SOCKET_FILE).display()
        )));
    }
    // Bound before Kafka is waited for: an address in use is refused at
    // once, with nothing fetched or committed.
    let metrics = cfg
        .metrics_addr
        .as_deref()
        .map(crate::metrics::MetricsServer::start)
        .transpose()?;
    // Kafka first: a mistyped broker or topic refused before the archive
    // is opened (recovered, perhaps upgraded, pruned) or even made. The
    // pipeline checks again, for embedders (a quick metadata read).
    crate::consumer::check_kafka(&cfg, &stop)?;
    phase.store(OPENING, Ordering::Relaxed);
    // Said, so that a long recovery does not read as Kafka's silence (the
    // last line was "waiting for Kafka to answer" until "archive open").
    tracing::info!(data = %cfg.data.display(), "Kafka answered; opening the archive (a recovery after a crash, or a format upgrade, can take a while)");
    let engine_cfg = EngineConfig::new(&cfg.data).record_bytes_max(cfg.record_bytes_max);
    let engine = Arc::new(super::unpanicked(&cfg.data, || {
        Engine::open(engine_cfg).map_err(|e| super::open_failed_for(e, super::Opener::Run))
    })?);
    let r = engine.recovery_report();
    // The run's open is the first after a crash, as a rule: damage it
    // rebuilt is said as a stopped archive's other commands say it.
    super::say_repaired(&cfg.data, r);
    tracing::info!(data = %cfg.data.display(), frames_checked = r.frames_checked, truncated = r.truncated.is_some(), "archive open");
    phase.store(RUNNING, Ordering::Relaxed);
    let opts = PipelineOptions {
        stop: stop.clone(),
        kafka_checked: true,
        on_progress: metrics.as_ref().map(|m| m.observer()),
        ..Default::default()
    };
    let mut sink = ArchiveSink::new(engine).with_rebound_topics(cfg.rebind_topics.clone());
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
        // whose end reports the pruner's error and exits non-zero (a
        // panicking pass poisons the engine first: the stop then commits
        // nothing more, and the run ends on the poisoning, which names it).
        let stop_run = stop.clone();
        let on_failure = Box::new(move |_: &str| stop_run.store(true, Ordering::Relaxed));
        sink = sink
            .with_retention_until(
                retention,
                Duration::from_secs(every_s),
                on_failure,
                stop.clone(),
            )
            .map_err(|e| {
                let (crate::task::TaskError::Fatal(m) | crate::task::TaskError::Retriable(m)) = e;
                ConnectorError::Failed(format!(
                    "{m} (the first retention pass, before archiving began: nothing was archived or committed)"
                ))
            })?;
    }
    // Served once retention's first pass (synchronous, in `with_retention`)
    // is done: a live verify or backup arriving meanwhile would hold that
    // pass, and the start of archiving, behind it.
    let stop_on_poison = stop.clone();
    let sink = Box::new(sink.with_live_reads(Box::new(move || {
        stop_on_poison.store(true, Ordering::Relaxed)
    })));
    let report = tokio::task::spawn_blocking(move || run_pipeline(&cfg, sink, opts))
        .await
        .map_err(|e| ConnectorError::Failed(format!("the run's thread failed: {e}")))??;
    // Served until the run has stopped: its last figures are the report
    // at the stop.
    drop(metrics);
    let h = &report.put_to_commit_us;
    // Of the whole run; `-` when no commit settled a put (an empty
    // histogram's quantiles read 0, a latency nobody measured: until the
    // night of 2026-12-04 it was printed so).
    let quantile = |q| {
        if h.is_empty() {
            "-".to_owned()
        } else {
            h.value_at_quantile(q).to_string()
        }
    };
    tracing::info!(
        records = report.stats.records_written,
        duplicates = report.stats.records_duplicate,
        puts = report.stats.puts,
        commits = report.stats.commits,
        put_to_commit_p50_us = %quantile(0.5),
        put_to_commit_p99_us = %quantile(0.99),
        dead_lettered = report.stats.records_dead_lettered,
        oversize_skipped = report.stats.records_oversize_skipped,
        revoke_commit_failures = report.stats.revoke_commit_failures,
        resumed_unchecked = report.stats.resumed_unchecked,
        final_commit_failed = report.stats.final_commit_failed,
        "stopped cleanly"
    );
    Ok((ExitCode::SUCCESS, report.stats.records_written))
}

/// SIGINT and SIGTERM, their handlers installed when this is made (a
/// signal that comes before the first read is not lost), for every
/// command that handles them; `run`, `restore`, `backup`, `verify` and a
/// stopped archive's `export` read it twice (the second exits at once). Keep one and read it again: a second one made now would hear the
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
            .map_err(|e| ConnectorError::Failed(format!("cannot install signal handlers: {e}")))
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

    /// A task that, at the first signal, calls `first` and sets `stop`
    /// (the command stops cleanly), and at a second calls `second` and
    /// exits at once with 130 (tokio keeps the handlers installed, so
    /// without it nothing short of SIGKILL would stop a stop that hangs).
    pub fn stop_then_exit(
        mut self,
        stop: Arc<AtomicBool>,
        first: impl FnOnce() + Send + 'static,
        second: impl FnOnce() + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            self.recv().await;
            first();
            stop.store(true, Ordering::SeqCst);
            self.recv().await;
            second();
            std::process::exit(130);
        })
    }
}

/// Remove the archive directory `data` this run made, if its store holds
/// nothing (`cairn_engine::remove_if_empty`: under the directory's lock,
/// so an engine of this run still open, or another process's, keeps it).
/// What cannot be removed stays, with a WARN: an empty archive harms
/// nothing.
fn remove_unused_archive(data: &Path, ran_ok: bool) {
    use cairn_engine::EmptyStoreRemoval;
    let at = data.display();
    match cairn_engine::remove_if_empty(data) {
        // A run that ended well and wrote no record keeps a store that
        // holds its partitions' starts (`--auto-offset-reset latest`'s log
        // ends, recorded and committed before any record): its own words,
        // not the failed run's (until 2026-12-06 such a clean stop was told
        // of records and a poisoned engine; found by an audit).
        Ok(EmptyStoreRemoval::Kept) if ran_ok => {
            tracing::info!(data = %at, "the archive this run made stays: it holds no record yet, but records where its partitions start, for the next run to resume there")
        }
        Ok(EmptyStoreRemoval::Kept) => {
            tracing::info!(data = %at, "the archive this run made stays: it holds records or where its partitions start, or its engine was poisoned (the next open recovers it)")
        }
        Ok(EmptyStoreRemoval::Removed) => {
            tracing::info!(data = %at, "removed the archive directory this run made: nothing was archived")
        }
        Ok(EmptyStoreRemoval::DirectoryKept) => {
            tracing::info!(data = %at, "removed the empty archive this run made; the directory stays, as it holds other files")
        }
        Ok(EmptyStoreRemoval::DirectoryNotRemoved(error)) => {
            tracing::warn!(data = %at, %error, "removed the empty archive this run made; its directory, left empty of it, could not be removed and stays")
        }
        // Another process holds it: two runs started on the same new
        // directory, and the other made the store (until 2026-12-07 this
        // said the archive was this run's, to be removed; found by an
        // audit). Its own.
        Err(e @ cairn_engine::Error::Locked { .. }) => {
            tracing::info!(data = %at, error = %e, "the archive directory stays: another process holds it")
        }
        Err(e) => {
            tracing::warn!(data = %at, error = %e, "the archive this run made stays: it could not be checked for records, to be removed if it held none")
        }
    }
}

/// `--data` must be an archive, or new, or empty: a mistyped path (or a
/// volume not mounted yet) would otherwise start a second archive inside
/// some other directory, resume there from Kafka's offsets, and leave the
/// records it takes only there. Besides the archive's own files (`sled`,
/// `cairn.lock` and the others `is_store_file` names, the live socket and
/// the folder it is bound in), only a fresh filesystem's `lost+found` is
/// allowed.
fn refuse_foreign_dir(data: &std::path::Path) -> Result<()> {
    // `new/..` (a folder not there yet, then up out of it) would read as
    // new below, and the open would make `new` and start the archive in
    // the directory above it, whatever that holds: refused, naming the
    // folder (since the night of 2026-12-04).
    let mut walked = std::path::PathBuf::new();
    for c in data.components() {
        if c == std::path::Component::ParentDir
            && !walked.as_os_str().is_empty()
            && std::fs::symlink_metadata(&walked).is_err()
        {
            return Err(ConnectorError::Config(format!(
                "--data {}: goes up out of {}, which does not exist; name the archive's directory without it",
                data.display(),
                walked.display()
            )));
        }
        walked.push(c);
    }
    if holds_archive(data)? {
        return Ok(());
    }
    // `~` and `$VAR` are a shell's to expand, and none did: bash leaves
    // `--data=~/a` as it is, as do systemd's `ExecStart` and Docker's exec
    // form, and the archive would start in a folder so named (the run
    // after the path is fixed then starts a new archive at the group's
    // offsets, without this one's records). Refused as the config file's
    // `data` is (since 2026-12-06; found by an audit); an archive already
    // there is taken, above.
    let text = data.to_string_lossy();
    if text.starts_with('~') || text.contains('$') {
        return Err(ConnectorError::Config(format!(
            "--data {}: `~` and `$VARIABLES` are expanded by a shell, and none expanded these (bash leaves `--data=~/a` as it is, as do systemd's ExecStart and Docker's exec form): write the full path",
            data.display()
        )));
    }
    // A space or control character at either end of a name the run would
    // make (`"/srv/a "`, a line's end copied with it): a new archive would
    // start beside the one meant, named so that no log line shows the
    // difference (until 2026-12-07; found by an audit, as `--group` refuses
    // them). Folders already there are taken as named, and an archive
    // already there is taken, above.
    let mut walked = std::path::PathBuf::new();
    let padded = data.components().any(|c| {
        walked.push(c);
        let name = c.as_os_str().to_string_lossy();
        let odd = |ch: Option<char>| ch.is_some_and(|ch| ch.is_whitespace() || ch.is_control());
        let padded = odd(name.chars().next())
            || odd(name.chars().last())
            || name.chars().any(char::is_control);
        padded && std::fs::symlink_metadata(&walked).is_err()
    });
    if padded {
        return Err(ConnectorError::Config(format!(
            "--data {:?}: a name in it begins or ends with a space, or holds a control character (a newline): a new archive would start under that name, beside the one meant; write the path without it",
            data.display().to_string()
        )));
    }
    // A link to nothing (a volume not mounted), at `data` or above it: the
    // open would fail with EEXIST, after Kafka was asked (seen in review,
    // 2026-12-05; a second review found a link above `data` passed over).
    if std::fs::metadata(data).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        for at in data.ancestors() {
            let link = std::fs::symlink_metadata(at).is_ok_and(|m| m.is_symlink());
            if link && std::fs::metadata(at).is_err() {
                let to = std::fs::read_link(at)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|e| format!("(unreadable: {e})"));
                return Err(ConnectorError::Config(format!(
                    "--data {}: {} is a symbolic link to {to}, which does not exist (a volume not mounted?); nothing was made there",
                    data.display(),
                    at.display()
                )));
            }
        }
    }
    let entries = match std::fs::read_dir(data) {
        Ok(entries) => entries,
        Err(_) if std::fs::metadata(data).is_ok_and(|m| !m.is_dir()) => {
            return Err(ConnectorError::Config(format!(
                "--data {}: not a directory (a file is there; the archive is a directory of its own)",
                data.display()
            )));
        }
        // New (created by the open), or unreadable (the open names why).
        Err(_) => return Ok(()),
    };
    let mut foreign = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ConnectorError::Io {
            path: data.to_owned(),
            source,
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // The store's own names exactly: `cairn.toml` or `cairn.log` in a
        // mistyped --data is someone else's directory, not an archive's.
        let ours = cairn_engine::is_store_file(&name)
            || name == crate::live::SOCKET_FILE
            || name == crate::live::PRIVATE_DIR;
        if !ours && name != "lost+found" {
            foreign.push(name);
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    Err(ConnectorError::Config(format!(
        "--data {}: not a cairn archive, and not empty (it holds {}); give an archive's directory, or a new or empty one",
        data.display(),
        crate::selection::first_few(foreign.into_iter())
    )))
}

/// The kind of file system `path` (or, not made yet, its nearest folder
/// that is there) is on, when that keeps its files in memory only (tmpfs,
/// ramfs: `/dev/shm`, and `/tmp` on many systems). An fsync there returns
/// at once and makes nothing durable, so an archive there breaks the one
/// promise cairn makes: what Kafka is told is archived survives a crash of
/// the machine. `None` for a disk, or when the kind cannot be read.
pub(crate) fn memory_backed(path: &Path) -> Option<&'static str> {
    let there = path
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .unwrap_or(Path::new("."));
    // statfs64 where the C library has both: no overflow on a large file
    // system of a 32-bit target.
    let fs = rustix::fs::statfs(there).ok()?;
    // linux/magic.h (libc names only tmpfs's).
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    // `f_type` is signed or not, 32 or 64 bits wide, by target and C
    // library: its low 32 bits are the magic.
    #[allow(clippy::unnecessary_cast)]
    match fs.f_type as u64 & 0xffff_ffff {
        TMPFS_MAGIC => Some("tmpfs"),
        RAMFS_MAGIC => Some("ramfs"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::RunArgs;
    use crate::config::{OnOversize, RunConfig};
    use crate::error::Result;

    /// An archive in memory (tmpfs) is told apart from one on a disk, also
    /// where the folder is not made yet. /dev/shm is tmpfs on Linux; the
    /// working tree (target/) is on a disk here: either not so on another
    /// machine is said, and that half is not checked.
    #[test]
    fn an_archive_in_memory_is_told_apart() {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            assert_eq!(super::memory_backed(shm), Some("tmpfs"));
            assert_eq!(
                super::memory_backed(&shm.join("not-made").join("archive")),
                Some("tmpfs")
            );
        } else {
            cairn_engine::fuzzing::skip("no /dev/shm here: the tmpfs half is not checked");
        }
        let disk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        match super::memory_backed(disk) {
            None => assert_eq!(super::memory_backed(&disk.join("not-made")), None),
            // Fails under CAIRN_CI (`.ci/run` refuses a tree in memory
            // first, naming it), as every machine-bound skip does (until
            // 2026-12-06 a bare print that CI let pass).
            Some(fs) => cairn_engine::fuzzing::skip(&format!(
                "the source tree is on {fs} here: the disk half is not checked"
            )),
        }
    }

    /// `--data` that is, or lies under, a link to nothing (a volume not
    /// mounted) is refused naming the link's target, before Kafka is
    /// asked; a link to a directory that is there is followed.
    #[test]
    fn data_that_links_to_nothing_is_refused_naming_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("archive");
        let target = dir.path().join("volume").join("cairn");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for data in [link.clone(), link.join("store")] {
            let e = super::refuse_foreign_dir(&data).unwrap_err().to_string();
            assert!(
                e.contains("is a symbolic link to") && e.contains(&*target.to_string_lossy()),
                "{e}"
            );
        }
        assert!(!target.exists() && !dir.path().join("volume").exists());
        std::fs::create_dir_all(&target).unwrap();
        assert!(super::refuse_foreign_dir(&link).is_ok());
        assert!(super::refuse_foreign_dir(&link.join("store")).is_ok());
    }

    /// `--data` with a `~` or `$VARIABLE` no shell expanded is refused
    /// before anything is made; a `~` inside a name is a name.
    #[test]
    fn data_with_an_unexpanded_tilde_or_variable_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for data in [
            std::path::PathBuf::from("~/archive"),
            std::path::PathBuf::from("~cairn/archive"),
            dir.path().join("$DATA").join("archive"),
            dir.path().join("${DATA}"),
        ] {
            let e = super::refuse_foreign_dir(&data).unwrap_err().to_string();
            assert!(
                e.contains("are expanded by a shell") && e.contains("write the full path"),
                "{e}"
            );
            assert!(!data.exists());
        }
        assert!(super::refuse_foreign_dir(&dir.path().join("a~b")).is_ok());
    }

    /// A name the run would make that begins or ends with a space, or holds
    /// a control character, is refused before anything is made; a folder
    /// already there so named is taken.
    #[test]
    fn data_with_a_padded_new_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["archive ", " archive", "archive\n", "arch\tive"] {
            let data = dir.path().join(name).join("x");
            let e = super::refuse_foreign_dir(&data).unwrap_err().to_string();
            assert!(e.contains("begins or ends with a space"), "{name:?}: {e}");
            assert!(!dir.path().join(name).exists());
        }
        std::fs::create_dir(dir.path().join("made ")).unwrap();
        assert!(super::refuse_foreign_dir(&dir.path().join("made ").join("archive")).is_ok());
        assert!(super::refuse_foreign_dir(&dir.path().join("a b")).is_ok());
    }

    /// `--data new/..` is refused before anything is made: it reads as a
    /// new directory, and the open would make `new` and archive into the
    /// directory above, whatever it holds. `..` out of a folder that is
    /// there is that folder's parent, checked as any other.
    #[test]
    fn data_that_goes_up_out_of_a_missing_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not an archive").unwrap();
        let e = super::refuse_foreign_dir(&dir.path().join("new").join(".."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("goes up out of") && e.contains("new"), "{e}");
        assert!(!dir.path().join("new").exists());
        std::fs::create_dir(dir.path().join("there")).unwrap();
        let e = super::refuse_foreign_dir(&dir.path().join("there").join(".."))
            .unwrap_err()
            .to_string();
        assert!(e.contains("(it holds notes.txt, there)"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        std::fs::create_dir(empty.path().join("there")).unwrap();
        let e = super::refuse_foreign_dir(&empty.path().join("there").join("..").join("new"));
        assert!(e.is_ok(), "{e:?}");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    /// `cairn run` with its required flags but `--data`.
    fn required() -> Vec<&'static str> {
        vec!["run", "--brokers", "b:1", "--group", "g", "--topics", "t"]
    }

    /// `cairn run` with the required flags, `file` as its --config, and
    /// `flags`.
    fn config(file: &str, flags: &[&str]) -> Result<RunConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        std::fs::write(&path, file).unwrap();
        let mut args = required();
        args.extend(["--data", "/nonexistent", "--config", path.to_str().unwrap()]);
        args.extend_from_slice(flags);
        Cli::try_parse_from(args)
            .expect("flags parse")
            .run
            .into_config()
    }

    const DAY: Duration = Duration::from_secs(86_400);

    /// `metrics-addr` in the file, and the flag over it; refused when the
    /// file turns the periodic report off.
    #[test]
    fn the_metrics_address_comes_from_the_file_or_the_flag() {
        let c = config("metrics-addr = \"127.0.0.1:9464\"\n", &[]).unwrap();
        assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:9464"));
        let c = config(
            "metrics-addr = \"127.0.0.1:9464\"\n",
            &["--metrics-addr", "[::1]:9000"],
        )
        .unwrap();
        assert_eq!(c.metrics_addr.as_deref(), Some("[::1]:9000"));
        let e = config(
            "metrics-addr = \"127.0.0.1:9464\"\nprogress-interval-s = 0\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("progress-interval-s 0 with metrics-addr")
                && e.contains("(progress-interval-s set in "),
            "{e}"
        );
        assert_eq!(config("", &[]).unwrap().metrics_addr, None);
    }

    /// A setting missing beside a config file that set no key (empty, or
    /// only comments) says so: the message had read as a flag forgotten.
    #[test]
    fn a_missing_setting_beside_a_file_that_sets_nothing_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        for (file, says) in [
            ("", true),
            ("# all as flags\n\n", true),
            ("group = \"g\"\n", false),
        ] {
            std::fs::write(&path, file).unwrap();
            let args = [
                "run",
                "--data",
                "/nonexistent",
                "--topics",
                "t",
                "--config",
                path.to_str().unwrap(),
            ];
            let e = Cli::try_parse_from(args)
                .unwrap()
                .run
                .into_config()
                .unwrap_err()
                .to_string();
            let sets_nothing = format!(
                "brokers: missing (use --brokers or set it in --config; {} sets no key)",
                path.display()
            );
            assert_eq!(e == sets_nothing, says, "{file:?}: {e}");
            assert!(
                e.starts_with("brokers: missing (use --brokers or set it in --config"),
                "{e}"
            );
        }
    }

    /// A relative `data` in the file is the file's neighbour; an absolute
    /// one, or the flag, is taken as it is.
    #[test]
    fn the_files_relative_data_is_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        let parse = |file: &str, flags: &[&str]| {
            std::fs::write(&path, file).unwrap();
            let mut args = vec!["run", "--brokers", "b:1", "--group", "g", "--topics", "t"];
            args.extend(["--config", path.to_str().unwrap()]);
            args.extend_from_slice(flags);
            Cli::try_parse_from(args)
                .unwrap()
                .run
                .into_config()
                .unwrap()
                .data
        };
        assert_eq!(
            parse("data = \"archive\"\n", &[]),
            dir.path().join("archive")
        );
        assert_eq!(
            parse("data = \"/srv/a\"\n", &[]),
            std::path::Path::new("/srv/a")
        );
        assert_eq!(
            parse("data = \"archive\"\n", &["--data", "here"]),
            std::path::Path::new("here")
        );
    }

    /// `--batch-bytes-max` and `--record-bytes-max` take a number of bytes,
    /// as always, or a size with its unit; anything else is refused at
    /// parsing saying both forms (until 2026-12-06 `8MiB` was an "invalid
    /// digit").
    #[test]
    fn byte_limits_take_a_number_or_a_size_with_its_unit() {
        let c = config(
            "",
            &["--batch-bytes-max", "4MiB", "--record-bytes-max", "1048576"],
        )
        .unwrap();
        assert_eq!((c.batch_bytes_max, c.record_bytes_max), (4 << 20, 1 << 20));
        let c = config("", &["--record-bytes-max", "1.5KiB"]).unwrap();
        assert_eq!(c.record_bytes_max, 1536);
        for bad in ["8 apples", "-1", "0.5B"] {
            let mut args = required();
            args.extend(["--data", "/nonexistent", "--record-bytes-max", bad]);
            let e = Cli::try_parse_from(args)
                .err()
                .unwrap_or_else(|| panic!("{bad} parsed"))
                .to_string();
            assert!(
                e.contains("--record-bytes-max") && (e.contains("8MiB") || e.contains("byte")),
                "{bad}: {e}"
            );
        }
    }

    /// One `-X` name given twice with two values is refused (before
    /// 2026-12-03 the last won without a word); with the same value, taken;
    /// a flag over the file's setting of it is an override, not a repeat.
    #[test]
    fn an_x_flag_given_twice_with_two_values_is_refused() {
        let err = config(
            "",
            &[
                "-X",
                "session.timeout.ms=6000",
                "-X",
                "session.timeout.ms=10000",
            ],
        )
        .expect_err("two values")
        .to_string();
        assert!(
            err.contains("-X session.timeout.ms=6000 and -X session.timeout.ms=10000: one property given twice with two values"),
            "{err}"
        );
        let same = config("", &["-X", "linger.ms=5", "-X", "linger.ms=5"]).unwrap();
        assert_eq!(same.kafka["linger.ms"], "5");
        let over = config("[kafka]\n\"linger.ms\" = \"5\"\n", &["-X", "linger.ms=7"]).unwrap();
        assert_eq!(over.kafka["linger.ms"], "7");
    }

    /// An empty `data` in the file (a template rendered empty) is refused:
    /// it would name the working directory, or the file's own folder.
    /// The flag overrides it.
    #[test]
    fn an_empty_data_in_the_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        std::fs::write(&path, "data = \"\"\n").unwrap();
        let parse = |flags: &[&str]| {
            let mut args = vec!["run", "--brokers", "b:1", "--group", "g", "--topics", "t"];
            args.extend(["--config", path.to_str().unwrap()]);
            args.extend_from_slice(flags);
            Cli::try_parse_from(args).unwrap().run.into_config()
        };
        let err = parse(&[]).expect_err("refused").to_string();
        assert!(
            err.contains(&format!("data = \"\" in {}, line 1: empty", path.display())),
            "{err}"
        );
        assert_eq!(
            parse(&["--data", "/srv/a"]).unwrap().data,
            std::path::Path::new("/srv/a")
        );
        // `~` is the shell's: kept by TOML, it named a folder `~` beside
        // the file (before 2026-12-03).
        // So are `~user` and `$VARIABLES` (a template never rendered):
        // before 2026-12-03 each named a folder beside the file.
        for data in ["~/arch", "~cairn/arch", "${DATA}/arch", "/srv/$ENV/arch"] {
            std::fs::write(&path, format!("data = \"{data}\"\n")).unwrap();
            let err = parse(&[]).expect_err("refused").to_string();
            assert!(
                err.contains(&format!(
                    "in {}, line 1: `~` and `$VARIABLES` are expanded by a shell",
                    path.display()
                )),
                "{data}: {err}"
            );
        }
        assert_eq!(
            parse(&["--data", "/srv/a"]).unwrap().data,
            std::path::Path::new("/srv/a")
        );
    }

    /// An archive that a relative `data` named from the working directory
    /// (as before the path was read beside the file), with none beside the
    /// file: refused, naming both, rather than a new archive started.
    #[test]
    fn an_archive_only_the_working_directory_names_is_not_left_behind() {
        let conf = tempfile::tempdir().unwrap();
        let path = conf.path().join("cairn.toml");
        // The working directory is the process's: name the archive by a
        // relative path from it.
        let cwd = std::env::current_dir().unwrap();
        let archive = tempfile::tempdir_in(&cwd).unwrap();
        std::fs::create_dir_all(archive.path().join("sled").join("db")).unwrap();
        let rel = archive
            .path()
            .strip_prefix(&cwd)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        std::fs::write(&path, format!("data = {rel:?}\n")).unwrap();
        let mut args = required();
        args.extend(["--config", path.to_str().unwrap()]);
        let e = Cli::try_parse_from(args.clone())
            .unwrap()
            .run
            .into_config()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("write the path absolute") && e.contains(&rel),
            "{e}"
        );
        // A --data flag wins over the file's data, which is then not looked
        // at.
        let c = Cli::try_parse_from([args, vec!["--data", "/srv/other"]].concat())
            .unwrap()
            .run
            .into_config()
            .unwrap();
        assert_eq!(c.data, std::path::Path::new("/srv/other"));
    }

    /// A refused librdkafka setting from the file's `[kafka]` table is
    /// named as `-X` would be, and said to come from the file; one a flag
    /// gives is not.
    #[test]
    fn a_refused_setting_from_the_file_names_the_file() {
        let file = "[kafka]\n\"group.id\" = \"x\"\n";
        let e = config(file, &[]).unwrap_err().to_string();
        assert!(
            e.contains("-X group.id=x") && e.contains("(group.id set in [kafka] of "),
            "{e}"
        );
        let e = config("", &["-X", "group.id=x"]).unwrap_err().to_string();
        assert!(e.contains("-X group.id=x") && !e.contains("[kafka]"), "{e}");
        // Named as cairn names it without a value, and as librdkafka names
        // a property it does not know (a typo in the file).
        let e = config("[kafka]\n\"auto.offset.reset\" = \"latest\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("(auto.offset.reset set in [kafka] of "), "{e}");
        let e = config("[kafka]\n\"no.such.thing\" = \"1\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("(no.such.thing set in [kafka] of "), "{e}");
        // And as librdkafka names properties in a check across several.
        let e = config("[kafka]\n\"max.poll.interval.ms\" = 1000\n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`max.poll.interval.ms`")
                && e.contains("(max.poll.interval.ms set in [kafka] of "),
            "{e}"
        );
        // Not a longer name that starts the same.
        assert!(!super::names_setting(
            "-X topic.group.id=x: no",
            "topic.group"
        ));
        assert!(super::names_setting("-X group.id=x: no", "group.id"));
    }

    #[test]
    fn a_flag_overrides_or_clears_what_the_config_file_sets() {
        let file = "retain = \"30d\"\nretain-bytes = \"1GiB\"\nretention-check-interval-s = 30\n";
        let c = config(file, &[]).unwrap();
        assert_eq!(
            (c.retain, c.retain_bytes, c.retention_check_interval_s),
            (Some(30 * DAY), Some(1 << 30), Some(30))
        );
        // Sizes the file gives with a unit, read as they say.
        for (given, bytes) in [("50GiB", 50u64 << 30), ("1000000B", 1_000_000)] {
            let c = config(&format!("retain-bytes = \"{given}\"\n"), &[]).unwrap();
            assert_eq!(c.retain_bytes, Some(bytes), "{given}");
        }
        let c = config(file, &["--retain", "7d"]).unwrap();
        assert_eq!((c.retain, c.retain_bytes), (Some(7 * DAY), Some(1 << 30)));
        // The file's age is refused under a millisecond, as the flag's.
        let e = config("retain = \"500us\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retain: \"500us\": under a millisecond"), "{e}");
        let c = config(file, &["--retain", "none"]).unwrap();
        assert_eq!(
            (c.retain, c.retain_bytes, c.retention_check_interval_s),
            (None, Some(1 << 30), Some(30))
        );
        // `none` in the file, as the flag takes it: no bound, and the
        // file's interval unused.
        let c = config(
            "retain = \"none\"\nretain-bytes = \"none\"\nretention-check-interval-s = 30\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            (c.retain, c.retain_bytes, c.retention_check_interval_s),
            (None, None, None)
        );
        // Retention cleared by flags: the file's check interval went with it.
        let c = config(file, &["--retain", "none", "--retain-bytes", "none"]).unwrap();
        assert_eq!(
            (c.retain, c.retain_bytes, c.retention_check_interval_s),
            (None, None, None)
        );
        assert!(!c.retention().is_set());
        // A file with only an age: `--retain none` leaves no retention, and
        // the file's interval goes with it; a flag's size keeps it in use.
        let aged = "retain = \"30d\"\nretention-check-interval-s = 30\n";
        let c = config(aged, &["--retain", "none"]).unwrap();
        assert_eq!((c.retain, c.retention_check_interval_s), (None, None));
        let c = config(aged, &["--retain", "none", "--retain-bytes", "1GiB"]).unwrap();
        assert_eq!(
            (c.retain, c.retain_bytes, c.retention_check_interval_s),
            (None, Some(1 << 30), Some(30))
        );
        // An interval given by flag, or by a file without retention, is
        // still refused: nothing would use it.
        for (file, flags) in [
            (
                file,
                &[
                    "--retain",
                    "none",
                    "--retain-bytes",
                    "none",
                    "--retention-check-interval-s",
                    "5",
                ][..],
            ),
            ("retention-check-interval-s = 30\n", &[][..]),
            // `none` clears nothing here: the file's interval had no
            // retention to go with.
            (
                "retention-check-interval-s = 30\n",
                &["--retain", "none"][..],
            ),
        ] {
            let e = config(file, flags).unwrap_err().to_string();
            assert!(e.contains("only used with a retention"), "{flags:?}: {e}");
        }
        // A flag's value wins without the file's being read (as for --commit).
        let c = config("retain = \"soon\"\n", &["--retain", "7d"]).unwrap();
        assert_eq!(c.retain, Some(7 * DAY));
        // A bad value says `none` is one too.
        let e = Cli::try_parse_from(["run", "--retain", "soon"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("7d") && e.contains("or none"), "{e}");
    }

    #[test]
    fn the_config_files_dead_letter_topic_goes_with_its_oversize_policy() {
        let file = "on-oversize = \"dead-letter\"\ndead-letter-topic = \"dlq\"\n";
        let c = config(file, &[]).unwrap();
        assert_eq!(
            (c.on_oversize, c.dead_letter_topic.as_deref()),
            (OnOversize::DeadLetter, Some("dlq"))
        );
        let c = config(file, &["--on-oversize", "fail"]).unwrap();
        assert_eq!(
            (c.on_oversize, c.dead_letter_topic),
            (OnOversize::Fail, None)
        );
        let c = config(file, &["--dead-letter-topic", "other"]).unwrap();
        assert_eq!(c.dead_letter_topic.as_deref(), Some("other"));
        // Given by flag with another policy, or by a file without the
        // dead-letter policy, the topic is still refused.
        for (file, flags) in [
            (
                "",
                &["--on-oversize", "fail", "--dead-letter-topic", "dlq"][..],
            ),
            (
                "dead-letter-topic = \"dlq\"\n",
                &["--on-oversize", "skip"][..],
            ),
            (
                "on-oversize = \"fail\"\ndead-letter-topic = \"dlq\"\n",
                &["--on-oversize", "fail"][..],
            ),
        ] {
            let e = config(file, flags).unwrap_err().to_string();
            assert!(
                e.contains("only used with --on-oversize dead-letter"),
                "{flags:?}: {e}"
            );
        }
    }
}

//! `cairn run` configuration: flags, an optional TOML file with the same
//! keys (flags win), and checks that name the bad setting.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::error::{ConnectorError, Result};
use crate::librdkafka::setting_other_than;

/// When durable offsets are committed to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPolicy {
    /// Make every put durable (one fsync each) and commit it at once.
    EveryPut,
    /// Write puts without an fsync; every N ms, one fsync makes all of them
    /// durable and their offsets are committed.
    Interval(Duration),
}

impl CommitPolicy {
    /// An interval's bounds, 1 ms to an hour: for the flag's parser and for
    /// an embedder's `RunConfig` (`validate`).
    fn interval_in_range(every: Duration) -> bool {
        (Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&every)
    }
}

impl FromStr for CommitPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "every-put" {
            return Ok(CommitPolicy::EveryPut);
        }
        if let Some(ms) = s.strip_prefix("interval:") {
            let ms: u64 = ms.parse().map_err(|_| {
                format!("commit policy {s:?}: interval must be a whole number of ms")
            })?;
            if !CommitPolicy::interval_in_range(Duration::from_millis(ms)) {
                return Err(format!(
                    "commit policy {s:?}: interval must be 1..=3600000 ms"
                ));
            }
            return Ok(CommitPolicy::Interval(Duration::from_millis(ms)));
        }
        Err(format!(
            "commit policy {s:?}: expected every-put or interval:<ms>"
        ))
    }
}

/// What to do with a record over the size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OnOversize {
    /// Stop with an error naming the record; nothing after it is committed.
    Fail,
    /// Log the record's coordinates, count it, and go on.
    Skip,
    /// Produce it, with the reason, to `--dead-letter-topic`, and go on once
    /// Kafka has acknowledged it.
    DeadLetter,
}

/// What to do when the archive's resume offset has aged out of Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OnOffsetOutOfRange {
    /// Stop with an error naming the partition and the missing range.
    Fail,
    /// Log the gap loudly and resume from Kafka's earliest offset.
    Earliest,
}

/// Everything `cairn run` needs.
///
/// `run_pipeline` drives the sink it is given and does not make one: the
/// fields `cairn run` builds its sink from are not read by it. An embedder
/// gives its sink's engine `record_bytes_max` too (`EngineConfig`: the
/// loop's oversize check uses this one, and an engine with a lower limit
/// refuses what passed it, stopping the run), and attaches retention with
/// `ArchiveSink::with_retention` (`retain`, `retain_bytes` and
/// `retention_check_interval_s` are only checked here).
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub brokers: String,
    pub group: String,
    pub topics: Vec<String>,
    /// The archive's directory: `cairn run` opens the engine there
    /// (`run_pipeline` does not read it).
    pub data: PathBuf,
    pub commit: CommitPolicy,
    pub batch_records_max: usize,
    pub batch_bytes_max: usize,
    pub linger_ms: u64,
    pub record_bytes_max: u64,
    pub on_oversize: OnOversize,
    /// Where `--on-oversize dead-letter` sends records (dead_letter.rs).
    pub dead_letter_topic: Option<String>,
    pub on_offset_out_of_range: OnOffsetOutOfRange,
    /// `earliest` or `latest`, for partitions neither the archive nor Kafka has an offset for.
    pub auto_offset_reset: String,
    /// How long to wait for the brokers before giving up.
    pub connect_timeout_ms: u64,
    /// Log progress and lag this often (0: only at a clean stop).
    pub progress_interval_s: u64,
    /// Delete archived records older than this (pruner.rs); `None` keeps
    /// everything. `cairn run` attaches the pruner; an embedder, with
    /// `ArchiveSink::with_retention`.
    pub retain: Option<std::time::Duration>,
    /// Keep at most this many payload bytes per partition (the newest
    /// entries; pruner.rs); `None` sets no bound.
    pub retain_bytes: Option<u64>,
    /// How often the pruner looks for records past the retention.
    pub retention_check_interval_s: Option<u64>,
    /// `--metrics-addr`: where `cairn run` serves the progress report's
    /// figures as Prometheus metrics (metrics.rs; `run_pipeline` does not
    /// read it: an embedder has `PipelineOptions::on_progress`).
    pub metrics_addr: Option<String>,
    /// librdkafka properties passed through (`-X key=value`).
    pub kafka: BTreeMap<String, String>,
    /// `--rebind-topic`: topics of `topics` whose Kafka topic id is taken
    /// for the archived one's when they differ, and recorded in its place
    /// (`ArchiveSink::with_rebound_topics`; `run_pipeline` does not read
    /// it). A flag only, for one run: not in the config file.
    pub rebind_topics: Vec<String>,
}

impl RunConfig {
    /// `batch_bytes_max` unless set: 8 MiB.
    pub const DEFAULT_BATCH_BYTES_MAX: usize = 8 << 20;

    pub fn new(
        brokers: impl Into<String>,
        group: impl Into<String>,
        topics: Vec<String>,
        data: PathBuf,
    ) -> Self {
        RunConfig {
            brokers: brokers.into(),
            group: group.into(),
            topics,
            data,
            commit: CommitPolicy::EveryPut,
            batch_records_max: 10_000,
            batch_bytes_max: Self::DEFAULT_BATCH_BYTES_MAX,
            linger_ms: 5,
            record_bytes_max: 8 << 20,
            on_oversize: OnOversize::Fail,
            dead_letter_topic: None,
            on_offset_out_of_range: OnOffsetOutOfRange::Fail,
            auto_offset_reset: "earliest".into(),
            connect_timeout_ms: 10_000,
            progress_interval_s: 60,
            retain: None,
            retain_bytes: None,
            retention_check_interval_s: None,
            kafka: BTreeMap::new(),
            rebind_topics: Vec::new(),
            metrics_addr: None,
        }
    }

    /// What the pruner keeps (pruner.rs).
    pub fn retention(&self) -> crate::pruner::Retention {
        crate::pruner::Retention {
            age: self.retain,
            partition_bytes_max: self.retain_bytes,
        }
    }

    /// Check every setting; the error names the one that is wrong.
    pub fn validate(&self) -> Result<()> {
        check_connect_timeout_ms(self.connect_timeout_ms)?;
        let bad = |s: String| Err(ConnectorError::Config(s));
        if self.brokers.trim().is_empty() {
            return bad("brokers: empty (use --brokers host:port[,host:port])".into());
        }
        // In no broker's address, and written into librdkafka's
        // statistics unescaped, as a broker's name.
        if breaks_statistics(&self.brokers) {
            return bad(format!(
                "brokers {:?}: a `\"`, a `\\` or a control character is in no broker's address, and {UNESCAPED}",
                self.brokers
            ));
        }
        check_brokers(&self.brokers, &self.kafka)?;
        if self.group.trim().is_empty() {
            return bad("group: empty (use --group NAME)".into());
        }
        // Kafka takes any text as a group id, so these would run as another
        // group than meant, without a word: a new one, with no committed
        // offsets (its lag watched under the meant name), and, for a new
        // archive under `--auto-offset-reset latest`, the backlog skipped.
        if self.group.trim() != self.group {
            return bad(format!(
                "group {:?}: leading or trailing whitespace (Kafka would take it as part of the group's name)",
                self.group
            ));
        }
        // A control character (a newline pasted with the name) is part of
        // the name too, and no log line shows it (accepted until
        // 2026-12-07; found by an audit). Kafka's limit on a group id is
        // its protocol's string length, 32,767 bytes: a longer one never
        // joins, waiting with a WARN that blames the coordinator.
        if self.group.chars().any(char::is_control) {
            return bad(format!(
                "group {:?}: a control character (a newline?) in it (Kafka would take it as part of the group's name)",
                self.group
            ));
        }
        if self.group.len() > i16::MAX as usize {
            return bad(format!(
                "group: {} bytes long, over the 32767 a Kafka group id may hold",
                self.group.len()
            ));
        }
        if unrendered_template(&self.group) {
            return bad(format!(
                "group {:?}: `${{VARIABLES}}` (and `$VAR`, `$(VAR)`, `{{{{var}}}}`) are expanded by a shell or a template engine, not by cairn or in the config file (a template never rendered?): give the group's name",
                self.group
            ));
        }
        if self.topics.is_empty() {
            return bad("topics: none given (use --topics t1,t2)".into());
        }
        for (i, t) in self.topics.iter().enumerate() {
            if let Err(e) = cairn_engine::validate_topic(t) {
                // librdkafka subscribes to a name starting with `^` as a
                // pattern; cairn archives named topics only.
                let pattern = t.starts_with('^') || t.contains(['*', '[', '(', '|', '$', '+', '?']);
                let hint = if pattern {
                    " (a pattern? cairn subscribes to topics by name only: list each topic)"
                } else {
                    ""
                };
                return bad(format!("topics: {e}{hint}"));
            }
            // Every commit, this run's own included, is a record there:
            // each would be archived and committed in turn, a new record to
            // archive, without end (seen in an audit, 2026-12-06).
            if t == "__consumer_offsets" {
                return bad("topics: \"__consumer_offsets\" holds the groups' committed offsets, and every commit cairn makes adds a record to it: archiving it would archive each of cairn's own commits and commit again, without end (leave it out)".into());
            }
            // Named twice, it is subscribed to once: a typo for another
            // topic, most likely, which would then go unarchived.
            if self.topics[..i].contains(t) {
                return bad(format!(
                    "topics: {t:?} is named twice (was another topic meant?)"
                ));
            }
        }
        // A topic the run does not archive would never be rebound: a
        // typo, which would leave the refused topic refused.
        for t in &self.rebind_topics {
            if !self.topics.contains(t) {
                return bad(format!(
                    "rebind-topic: {t:?} is not among the topics archived ({})",
                    self.topics.join(",")
                ));
            }
        }
        // Before the checks that build librdkafka configurations from this
        // one (the dead letters' wait reads the poll interval from the
        // consumer's): out of librdkafka's range it would fail those, and
        // be blamed on another setting (until the night of 2026-12-04).
        if self.progress_interval_s > 86_400 {
            return bad(format!(
                "progress-interval-s {}: must be at most 86400 (0 reports only at stop)",
                self.progress_interval_s
            ));
        }
        // The metrics are the progress report's figures: with no periodic
        // report they would stand still at the start's.
        // Named first: the flag or the file may give either.
        if let (Some(addr), 0) = (&self.metrics_addr, self.progress_interval_s) {
            return bad(format!(
                "progress-interval-s 0 with metrics-addr {addr}: the metrics are the progress report's figures, and an interval of 0 takes none while the run goes on: give an interval (10 suits a scrape every 15 s)"
            ));
        }
        if let Some(addr) = self.metrics_addr.as_deref() {
            let host_port = addr.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && !host.contains(['/', ' ', '\t']) && port.parse::<u16>().is_ok()
            });
            if !host_port {
                return bad(format!(
                    "metrics-addr {addr:?}: not host:port, such as 127.0.0.1:9464 (this machine only), without a scheme or a path"
                ));
            }
        }
        if self.batch_records_max == 0 || self.batch_records_max > 1_000_000 {
            return bad(format!(
                "batch-records-max {}: must be 1..=1000000",
                self.batch_records_max
            ));
        }
        if self.batch_bytes_max < 1024 || self.batch_bytes_max > 256 << 20 {
            return bad(format!(
                "batch-bytes-max {}: must be 1024..=268435456",
                self.batch_bytes_max
            ));
        }
        if self.linger_ms > 60_000 {
            return bad(format!(
                "linger-ms {}: must be at most 60000",
                self.linger_ms
            ));
        }
        // The flag's parser checks this too; an embedder's `RunConfig` is
        // checked here (a week's interval would commit nothing while the
        // run lasts).
        if let CommitPolicy::Interval(every) = self.commit {
            if !CommitPolicy::interval_in_range(every) {
                return bad(format!(
                    "commit interval {every:?}: must be 1 ms..=1 h (1..=3600000 ms)"
                ));
            }
        }
        if self.record_bytes_max == 0
            || self.record_bytes_max > cairn_engine::RECORD_BYTES_MAX_LIMIT
        {
            return bad(format!(
                "record-bytes-max {}: must be 1..={}",
                self.record_bytes_max,
                cairn_engine::RECORD_BYTES_MAX_LIMIT
            ));
        }
        if !matches!(self.auto_offset_reset.as_str(), "earliest" | "latest") {
            return bad(format!(
                "auto-offset-reset {:?}: must be earliest or latest",
                self.auto_offset_reset
            ));
        }
        refuse_managed_keys(&self.kafka, &MANAGED_CONSUMER_KEYS, "cairn")?;
        // The consumer's metadata requests would create a subscribed topic
        // that is gone: one deleted while the run holds it could come back
        // empty under the same name, widening the window in which a
        // recreated topic is not told apart ("Where a partition resumes",
        // rule 0; found in review, 2026-12-06).
        if let Some((k, v)) = crate::librdkafka::setting_other_than(
            &self.kafka,
            "allow.auto.create.topics",
            Some("false"),
        ) {
            return bad(format!("-X {k}={v}: cairn never creates a topic (its metadata requests would bring back an archived topic deleted while it runs, empty, under the same name); create topics with Kafka's tools"));
        }
        match (self.on_oversize, &self.dead_letter_topic) {
            (OnOversize::DeadLetter, None) => {
                return bad("on-oversize dead-letter: needs --dead-letter-topic".into())
            }
            (OnOversize::DeadLetter, Some(t)) => {
                if let Err(e) = cairn_engine::validate_topic(t) {
                    return bad(format!("dead-letter-topic: {e}"));
                }
                // The dead-letter producer waits for each report as long as
                // its message timeout.
                crate::librdkafka::check_message_timeout(&self.kafka, "the dead letters")
                    .map_err(ConnectorError::Config)?;
                if self.topics.contains(t) {
                    return bad(format!(
                        "dead-letter-topic {t:?}: it is also archived (its dead letters would come back)"
                    ));
                }
                // Kafka's own topics exist, so the start-up check passes
                // them, but a broker refuses a client's records there: the
                // first oversize record, perhaps days later, would stop
                // the run, and every restart at it (found in an audit,
                // 2026-12-06).
                if INTERNAL_TOPICS.contains(&t.as_str()) {
                    return bad(format!(
                        "dead-letter-topic {t:?}: it is one of Kafka's internal topics, which brokers take no client's records into (the first oversize record would stop the run there): name a topic of its own"
                    ));
                }
                // Checked now, not when the producer is made after the
                // archive has been opened (and perhaps upgraded).
                crate::dead_letter::refuse_managed_keys(&self.kafka)?;
                let (producer, message_timeout_ms) = crate::dead_letter::client_config(self);
                crate::librdkafka::check_producer_settings(&producer)
                    .map_err(|e| ConnectorError::Config(format!("dead-letter producer: {e}")))?;
                // An oversize record's dead letter is over --record-bytes-max,
                // with its own headers beside: a producer cap below the smallest one
                // (librdkafka checks a record's size, its headers counted,
                // before it compresses it) refuses every one, and the run
                // would stop at its first oversize record. (Until
                // 2026-12-06 a cap up to the headers' bytes above
                // --record-bytes-max was taken; found by an audit.)
                if let Some((k, v)) =
                    crate::librdkafka::settings_of(&self.kafka, "message.max.bytes").next()
                {
                    // The cap as librdkafka read it (`strtol`: `0x800000`
                    // and `8388608B` are 8 MiB to it), not as the text reads.
                    let cap = producer
                        .create_native_config()
                        .and_then(|c| c.get("message.max.bytes"))
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok());
                    let smallest = self
                        .record_bytes_max
                        .saturating_add(1 + crate::dead_letter::OWN_HEADERS_BYTES_MIN);
                    if cap.is_some_and(|cap| cap < smallest) {
                        return bad(format!(
                            "-X {k}={v}: with --on-oversize dead-letter it caps the dead letters too, and an oversize record's dead letter is over --record-bytes-max ({}) with its own headers beside (at least {smallest} bytes), so none would fit: give it more than the largest record Kafka may hand the archive with its dead-letter headers, or leave it out (it is the consumer's too, and raises its fetch.max.bytes to it)",
                            self.record_bytes_max
                        ));
                    }
                }
                // The consumer thread waits for each dead letter's report
                // and polls nothing meanwhile: a wait as long as the poll
                // interval would have the group drop this member mid-wait.
                let wait = crate::dead_letter::report_wait(message_timeout_ms);
                let interval = crate::consumer::max_poll_interval(self);
                if wait >= interval {
                    let given = crate::librdkafka::message_timeout_settings(&self.kafka)
                        .first()
                        .map_or("its default".to_owned(), |(k, _)| format!("-X {k}"));
                    return bad(format!(
                        "the dead letters' message timeout ({message_timeout_ms} ms, {given}): each is waited for up to {} ms, during which the archive polls nothing, so it must stay below max.poll.interval.ms ({} ms) or the group drops this member mid-wait",
                        wait.as_millis(),
                        interval.as_millis()
                    ));
                }
            }
            (_, Some(_)) => {
                return bad("dead-letter-topic: only used with --on-oversize dead-letter".into())
            }
            (_, None) => {}
        }
        if crate::librdkafka::settings_of(&self.kafka, "statistics.interval.ms")
            .next()
            .is_some()
        {
            return bad("-X statistics.interval.ms: use --progress-interval-s; cairn reads librdkafka's statistics for its progress reports".into());
        }
        // The client id goes into the statistics unescaped too (`CORP\svc`):
        // every report was unreadable JSON, and the progress lines showed no
        // lag for the whole run (until 2026-12-06 a WARN every interval;
        // found by an audit). No statistics are asked for without progress
        // lines.
        for (k, v) in crate::librdkafka::settings_of(&self.kafka, "client.id") {
            if self.progress_interval_s > 0 && breaks_statistics(v) {
                return bad(format!(
                    "-X {k}={v:?}: a `\"`, a `\\` or a control character in the client id: {UNESCAPED}; choose one without (or turn the progress lines off, --progress-interval-s 0)"
                ));
            }
        }
        // librdkafka leaves a topic it matches out of its metadata cache and
        // of the group's assignment without a word, while the metadata
        // cairn checks the topics against still lists it: a named topic
        // would go unarchived, and a run of only such topics would wait
        // for a group it never joins.
        if let Some((k, v)) = crate::librdkafka::settings_of(&self.kafka, "topic.blacklist").next()
        {
            return bad(format!("-X {k}={v}: name the topics to archive with --topics (librdkafka would leave a topic it matches unassigned and unarchived without an error)"));
        }
        // librdkafka looks for partitions added to a subscribed topic only
        // in its periodic metadata refresh: turned off (librdkafka starts
        // its timer only for a positive interval), an added partition
        // would go unassigned and unarchived without an error.
        // As librdkafka reads it (`0.5`, `0x0` and `4294967296` are 0 to
        // it; until 2026-12-06 only the text was read, found in review); a
        // value it refuses is refused when the consumer is made.
        if let Some((k, v, ms)) =
            crate::librdkafka::settings_of(&self.kafka, "topic.metadata.refresh.interval.ms")
                .find_map(|(k, v)| {
                    crate::librdkafka::read_as_librdkafka(k, v)
                        .ok()
                        .filter(|ms| *ms <= 0)
                        .map(|ms| (k, v, ms))
                })
        {
            return bad(format!("-X {k}={v}: librdkafka reads it as {ms}: must be positive (librdkafka's default is 300000): with the periodic metadata refresh off, partitions added to an archived topic would never be assigned, and go unarchived without an error"));
        }
        if self.retain_bytes == Some(0) {
            return bad(
                "retain-bytes 0: must be positive (leave it out, or give none, to set no bound)"
                    .into(),
            );
        }
        if self.retain.is_some_and(|r| r.is_zero()) {
            return bad(
                "retain 0 (in whatever unit): must be a positive age (leave it out, or give none, to keep everything)".into(),
            );
        }
        match self.retention_check_interval_s {
            Some(s) if s == 0 || s > 86_400 => {
                return bad(format!(
                    "retention-check-interval-s {s}: must be 1 to 86400"
                ))
            }
            Some(_) if !self.retention().is_set() => {
                return bad(
                    "retention-check-interval-s (--retention-check-interval-s, or the config file's key): only used with a retention (--retain or --retain-bytes, or the file's retain or retain-bytes); leave it out".into(),
                )
            }
            _ => {}
        }
        if let Some((k, _)) = setting_other_than(&self.kafka, "auto.offset.reset", None) {
            return bad(format!("-X {k}: use --auto-offset-reset; cairn keeps librdkafka's at `error` so that records that aged out of Kafka are never skipped silently"));
        }
        if let Some((k, v)) =
            setting_other_than(&self.kafka, "isolation.level", Some("read_committed"))
        {
            return bad(format!("-X {k}={v}: cairn archives committed records only (read_committed, librdkafka's default); records of aborted transactions would be archived, and restored as if committed"));
        }
        if let Some((k, v)) = setting_other_than(&self.kafka, "enable.partition.eof", Some("true"))
        {
            return bad(format!("-X {k}={v}: cairn keeps end-of-partition events on (they say where a partition's fetch caught up, past transaction markers, which the archive records so that they are committed)"));
        }
        refuse_old_protocol(&self.kafka)?;
        refuse_signal_takeover(&self.kafka)?;
        crate::librdkafka::refuse_ambiguous_settings(&self.kafka)
            .map_err(ConnectorError::Config)?;
        if let Some((k, v)) = setting_other_than(&self.kafka, "group.protocol", Some("classic")) {
            return bad(format!("-X {k}={v}: cairn runs the classic group protocol (its cooperative-sticky assignment and rebalance handling are built and tested on it)"));
        }
        // librdkafka refuses any other with an error that blames cairn's
        // own assignment strategy and names neither key (until 2026-12-07;
        // found by an audit).
        // Compared exactly, as librdkafka compares it (`CONSUMER` passed a
        // case-blind check; found in review).
        if let Some((k, v)) = crate::librdkafka::settings_of(&self.kafka, "group.protocol.type")
            .find(|(_, v)| *v != "consumer")
        {
            return bad(format!("-X {k}={v}: a consumer group's protocol type is `consumer`, which cairn's group runs; leave it out"));
        }
        crate::librdkafka::check_consumer_settings(&crate::consumer::client_config(self))
            .map_err(ConnectorError::Config)?;
        Ok(())
    }
}

/// Consumer properties cairn sets and will not take from `-X`, with
/// librdkafka's aliases for them: with both a key and its alias set, which
/// one librdkafka ends up with depends on the order rdkafka hands them over
/// (a hash map's), so an alias would override cairn's setting at random.
pub const MANAGED_CONSUMER_KEYS: [&str; 6] = [
    "bootstrap.servers",
    "metadata.broker.list",
    "group.id",
    "enable.auto.commit",
    // The topic-level alias of `enable.auto.commit` (deprecated).
    "auto.commit.enable",
    "enable.auto.offset.store",
];

/// Refuse settings that can make librdkafka speak a protocol older than
/// Kafka 0.11's, whose records have no headers and whose fetch knows no
/// transactions (read_committed is lost). Archiving and restoring both
/// need 0.11's.
///
/// - `-X api.version.request=false`: librdkafka then takes the protocol
///   `broker.version.fallback` names instead of asking the broker.
/// - `-X broker.version.fallback` below 0.10 (librdkafka knows 0.9.0 and
///   0.8.x): the fallback applies whenever a broker's answer to the API
///   version request is lost (a connection dropped mid-request, for
///   `api.version.fallback.ms`), so even with the request on, a broker
///   would then be fetched from without headers or transactions. (From
///   0.10 on, librdkafka asks the broker anyway.)
pub fn refuse_old_protocol(kafka: &BTreeMap<String, String>) -> Result<()> {
    if let Some((k, v)) = setting_other_than(kafka, "api.version.request", Some("true")) {
        return Err(ConnectorError::Config(format!("-X {k}={v}: cairn needs the brokers' API versions (record headers and read_committed need Kafka 0.11 or later, which answer the request)")));
    }
    if let Some((k, v)) = crate::librdkafka::settings_of(kafka, "broker.version.fallback")
        .find(|(_, v)| below_0_10(v))
    {
        return Err(ConnectorError::Config(format!("-X {k}={v}: a broker version below 0.10 would have librdkafka fetch without record headers or read_committed whenever a broker's API versions are not known; cairn needs Kafka 0.11 or later (leave the setting out)")));
    }
    Ok(())
}

/// Refuse `-X internal.termination.signal`: librdkafka installs its own
/// handler for that signal as each client is made (the settings check's
/// first), replacing cairn's, so a SIGTERM or SIGINT no longer stopped the
/// run cleanly (no final commit: another member then archives the records
/// since the last commit again) and was not heard while waiting for Kafka
/// (until 2026-12-07; found by an audit). cairn handles its signals itself.
pub fn refuse_signal_takeover(kafka: &BTreeMap<String, String>) -> Result<()> {
    // 0, librdkafka's default, takes nothing over.
    match crate::librdkafka::settings_of(kafka, "internal.termination.signal")
        .find(|(_, v)| v.trim() != "0")
    {
        Some((k, v)) => Err(ConnectorError::Config(format!(
            "-X {k}={v}: librdkafka would take that signal over from cairn, which handles SIGINT and SIGTERM itself (a clean stop: drain, fsync, commit); leave it out"
        ))),
        None => Ok(()),
    }
}

/// Whether a `broker.version.fallback` value names a version below 0.10:
/// `0.` then a minor version under 10 (`0.9.0`, `0.8.2`, `0.9`).
fn below_0_10(version: &str) -> bool {
    let mut parts = version.trim().split('.');
    parts.next() == Some("0")
        && parts
            .next()
            .and_then(|minor| minor.parse::<u32>().ok())
            .is_some_and(|minor| minor < 10)
}

/// Refuse `-X` settings of properties `who` (a command) sets itself.
pub fn refuse_managed_keys(
    kafka: &BTreeMap<String, String>,
    managed: &[&str],
    who: &str,
) -> Result<()> {
    refuse_settings(kafka, managed.iter().map(|key| (*key, None)), who)
}

/// Refuse `-X` settings of properties `who` sets itself: each key with the
/// value `who` sets, which `-X` may give too (as librdkafka reads it), or
/// `None` for one `-X` may not set at all.
pub(crate) fn refuse_settings<'k>(
    kafka: &BTreeMap<String, String>,
    managed: impl IntoIterator<Item = (&'k str, Option<&'k str>)>,
    who: &str,
) -> Result<()> {
    for (key, ours) in managed {
        if let Some((k, v)) = crate::librdkafka::setting_other_than(kafka, key, ours) {
            let why = match ours {
                Some(o) => format!("{who} sets {key}={o}"),
                None => format!("{who} manages this property itself{}", managed_hint(key)),
            };
            return Err(ConnectorError::Config(format!("-X {k}={v}: {why}")));
        }
    }
    Ok(())
}

/// What to do instead of setting a property a command manages itself, or
/// why it may not be set: the refusal alone left an operator guessing
/// which flag gives it (seen in review, 2026-12-05).
fn managed_hint(key: &str) -> &'static str {
    match key {
        "bootstrap.servers" | "metadata.broker.list" => ": give the brokers with --brokers",
        "group.id" => ": give the consumer group with --group",
        "enable.auto.commit" | "auto.commit.enable" | "enable.auto.offset.store" => {
            ": cairn commits an offset only once the archive holds its record durably (after its fsync); librdkafka's own commits would run ahead of that"
        }
        "transactional.id" => {
            ": the producer sends outside any transaction, and a transactional one refuses every such send"
        }
        "enable.idempotence" | "enable.gapless.guarantee" => {
            ": the restore keeps them on, so that a retried send neither duplicates nor reorders records"
        }
        "delivery.report.only.error" => {
            ": the restore waits for every record's report to know what was delivered"
        }
        "allow.auto.create.topics" => {
            ": the restore never creates a topic (create the target with the partitions it needs)"
        }
        _ => "",
    }
}

/// The longest `--connect-timeout-ms`: an hour. librdkafka takes a timeout
/// as an `i32` of milliseconds, and rdkafka casts larger values into
/// negative ones, which mean "wait forever".
pub const CONNECT_TIMEOUT_MS_MAX: u64 = 3_600_000;

/// `--connect-timeout-ms` must be 1 ms to an hour.
pub fn check_connect_timeout_ms(ms: u64) -> Result<()> {
    if ms == 0 || ms > CONNECT_TIMEOUT_MS_MAX {
        return Err(ConnectorError::Config(format!(
            "connect-timeout-ms {ms}: must be 1..={CONNECT_TIMEOUT_MS_MAX} (an hour)"
        )));
    }
    Ok(())
}

/// The TOML file: the same keys as the flags, all optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    pub brokers: Option<String>,
    pub group: Option<String>,
    pub topics: Option<Vec<String>>,
    pub data: Option<PathBuf>,
    pub commit: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    pub batch_records_max: Option<usize>,
    /// A number of bytes, or a size with its unit (`"8MiB"`), as the flag.
    #[serde(default, deserialize_with = "byte_count")]
    pub batch_bytes_max: Option<usize>,
    #[serde(default, deserialize_with = "whole_number")]
    pub linger_ms: Option<u64>,
    /// A number of bytes, or a size with its unit (`"8MiB"`), as the flag.
    #[serde(default, deserialize_with = "byte_count")]
    pub record_bytes_max: Option<u64>,
    pub on_oversize: Option<OnOversize>,
    pub dead_letter_topic: Option<String>,
    pub on_offset_out_of_range: Option<OnOffsetOutOfRange>,
    pub auto_offset_reset: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    pub connect_timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "whole_number")]
    pub progress_interval_s: Option<u64>,
    /// An age such as `30d`, like `--retain`.
    pub retain: Option<String>,
    /// A size per partition with its unit, such as `"50GiB"`, like
    /// `--retain-bytes` (a TOML number is taken as its text, which
    /// `parse_size` refuses as a size without a unit).
    #[serde(default, deserialize_with = "size_text")]
    pub retain_bytes: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    pub retention_check_interval_s: Option<u64>,
    /// `host:port` for the metrics endpoint, like `--metrics-addr`.
    pub metrics_addr: Option<String>,
    /// The `[kafka]` table as written, with where each key and value is:
    /// [`FileConfig::from_text`] reads it into `kafka`.
    #[serde(default, rename = "kafka")]
    kafka_as_written: Option<BTreeMap<String, toml::Value>>,
    /// librdkafka properties, like `-X`: strings, or TOML numbers and
    /// booleans, which librdkafka reads from their text.
    #[serde(skip)]
    pub kafka: Option<BTreeMap<String, String>>,
    /// The line of each key the file gave.
    #[serde(skip)]
    pub lines: KeyLines,
    /// The file gives no key at all (empty, or only comments).
    #[serde(skip)]
    pub sets_no_key: bool,
}

/// The line each key of a config file is on, for the messages that refuse
/// a value after the file has parsed: a number out of its range, a
/// librdkafka property cairn manages. Until 2026-12-07 they named the file
/// and the key, not the line (an audit).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KeyLines {
    own: BTreeMap<String, usize>,
    kafka: BTreeMap<String, usize>,
}

impl KeyLines {
    /// The line of the file's own key `key` (`linger-ms`).
    pub fn own(&self, key: &str) -> Option<usize> {
        self.own.get(key).copied()
    }

    /// The line of `key` in the `[kafka]` table.
    pub fn kafka(&self, key: &str) -> Option<usize> {
        self.kafka.get(key).copied()
    }
}

/// A whole number the file gives (`linger-ms = 5`), refused in
/// [`whole`]'s words, as the flag's is: serde's own said ``invalid value:
/// integer `-1`, expected u64`` (until 2026-12-07; an audit).
fn whole_number<'de, D: serde::Deserializer<'de>, T: TryFrom<i128>>(
    d: D,
) -> std::result::Result<Option<T>, D::Error> {
    use serde::de::Error;
    match <Option<toml::Value> as serde::Deserialize>::deserialize(d)? {
        None => Ok(None),
        Some(toml::Value::Integer(i)) => whole::<T>(&i.to_string())
            .map(Some)
            .map_err(D::Error::custom),
        Some(toml::Value::String(s)) => Err(D::Error::custom(format!(
            "{s:?} is text, not a number: write the number without quotes"
        ))),
        // As written: `5.0` is no whole number, though `{f}` shows 5.
        Some(toml::Value::Float(f)) => Err(D::Error::custom(format!(
            "{f:?} is a decimal number: give a whole number"
        ))),
        Some(other) => Err(D::Error::custom(format!(
            "{} is no number: give a whole number",
            match other.type_str() {
                "array" => "an array",
                "table" => "a table",
                "boolean" => "a boolean",
                _ => "a datetime",
            }
        ))),
    }
}

/// A size as text: a string, or a TOML integer's digits (refused later
/// with the advice to give a unit, as the flag's bare number is).
fn size_text<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<String>, D::Error> {
    use serde::de::Error;
    match <Option<toml::Value> as serde::Deserialize>::deserialize(d)? {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(toml::Value::Integer(i)) => Ok(Some(i.to_string())),
        Some(other) => Err(D::Error::custom(format!(
            "a {} is no size: write one with its unit, such as \"50GiB\"",
            other.type_str()
        ))),
    }
}

/// A number of bytes (a TOML integer), or a size with its unit as text
/// (`"8MiB"`), as `--batch-bytes-max` and `--record-bytes-max` take it.
/// Until 2026-12-06 the file took only the number and refused `"8MiB"`
/// as a type error, while `retain-bytes` beside it needs the unit (found
/// in an audit).
fn byte_count<'de, D: serde::Deserializer<'de>, T: TryFrom<u64>>(
    d: D,
) -> std::result::Result<Option<T>, D::Error> {
    use serde::de::Error;
    let forms = "give a number of bytes (8388608) or a size with its unit (\"8MiB\")";
    let n = match <Option<toml::Value> as serde::Deserialize>::deserialize(d)? {
        None => return Ok(None),
        Some(toml::Value::String(s)) => {
            parse_byte_count(&s).map_err(|e| D::Error::custom(format!("{s:?}: {e}")))?
        }
        Some(toml::Value::Integer(i)) => {
            u64::try_from(i).map_err(|_| D::Error::custom(format!("{i}: negative: {forms}")))?
        }
        Some(other) => {
            return Err(D::Error::custom(format!(
                "a {} is no size: {forms}",
                other.type_str()
            )))
        }
    };
    T::try_from(n)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{n}: too large for this machine")))
}

/// Check a `bootstrap.servers` list as librdkafka reads it
/// (`rd_kafka_broker_name_parse`, `rdkafka_broker.c`): entries
/// `[PROTOCOL://]host[:port]` between commas, the protocol that of
/// `security.protocol` among the `kafka` settings (librdkafka refuses
/// another),
/// the port 1 to 65535. librdkafka reads a port with `atoi` into 16 bits,
/// so `host:99999` connected to port 34463 (99999 - 65536), and `host:abc`
/// to port 0; a list it cannot use at all (`,`, `http://host:80`) failed
/// only once the connect timeout had run out, as if Kafka were down (until
/// 2026-12-07; found by an audit). A bracketed IPv6 address takes a port
/// (`[::1]:9092`), a bare one none, as librdkafka reads them.
pub fn check_brokers(brokers: &str, kafka: &BTreeMap<String, String>) -> Result<()> {
    brokers_as_read(brokers, kafka.get("security.protocol").map(String::as_str))
        .map_err(ConnectorError::Config)
}

/// [`check_brokers`]'s work, given `security.protocol`.
fn brokers_as_read(
    brokers: &str,
    security_protocol: Option<&str>,
) -> std::result::Result<(), String> {
    const PROTOCOLS: [&str; 4] = ["plaintext", "ssl", "sasl_plaintext", "sasl_ssl"];
    let usage = "give host:port[,host:port]";
    let mut entries = 0;
    for raw in brokers.split(',') {
        // librdkafka skips spaces before an entry, not after it.
        let entry = raw.trim_start();
        if entry.is_empty() {
            continue; // librdkafka skips them
        }
        entries += 1;
        let bad = |why: String| {
            if entry == brokers.trim() {
                Err(format!("brokers {entry:?}: {why}"))
            } else {
                Err(format!("brokers {brokers:?}: {entry:?}: {why}"))
            }
        };
        let address = match entry.split_once("://") {
            Some((protocol, rest)) => {
                let protocol = protocol.to_ascii_lowercase();
                if !PROTOCOLS.contains(&protocol.as_str()) {
                    return bad(format!(
                        "{protocol}:// is not a protocol librdkafka connects with ({}); {usage}",
                        PROTOCOLS
                            .map(|p| format!("{}://", p.to_ascii_uppercase()))
                            .join(", ")
                    ));
                }
                let set = security_protocol
                    .unwrap_or("plaintext")
                    .to_ascii_lowercase();
                if protocol != set {
                    return bad(format!(
                        "its protocol is not security.protocol's ({set}), and librdkafka refuses such a broker: set -X security.protocol={protocol}, or leave the protocol out"
                    ));
                }
                // librdkafka ignores a URL's path.
                rest.split('/').next().unwrap_or_default()
            }
            None => entry,
        };
        if address.ends_with(char::is_whitespace) {
            return bad(format!(
                "a space after it, which librdkafka reads as part of the host or port; {usage}"
            ));
        }
        if address.contains(char::is_whitespace) || address.contains('/') {
            return bad(format!("not host:port; {usage}"));
        }
        // librdkafka's rule: a port after the only `:`, or after `]:`.
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') || host.ends_with(']') => (host, Some(port)),
            _ => (address, None),
        };
        // librdkafka reads an empty host as localhost; refused here, as
        // an unset variable far more often than meant.
        if host.is_empty() || host == "[]" {
            return bad(format!("no host (an unset variable?); {usage}"));
        }
        if let Some(port) = port {
            let valid = port.bytes().all(|b| b.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|p| p > 0);
            if !valid {
                return bad(format!("port {port:?} is not a port (1 to 65535)"));
            }
        }
    }
    if entries == 0 {
        return Err(format!("brokers {brokers:?}: no broker in it; {usage}"));
    }
    Ok(())
}

/// Whether `text` holds what librdkafka writes into its statistics
/// unescaped ([`UNESCAPED`]): a `"`, a `\` or a control character.
fn breaks_statistics(text: &str) -> bool {
    text.chars()
        .any(|c| c == '"' || c == '\\' || c.is_control())
}

/// Why [`breaks_statistics`] text is refused.
const UNESCAPED: &str = "librdkafka writes it into its statistics without escaping it, which leaves cairn unable to read them (no lag in its progress lines)";

/// Whether a group's name looks like a template never rendered: `${VAR}`,
/// `$(VAR)` (Kubernetes' form), `{{var}}`, or the whole name one
/// upper-case `$VAR` (Docker's exec form passes it as it is). Until 2026-12-06 only `${`
/// was refused (an audit): a `$` elsewhere is still a name's (`a$b`).
fn unrendered_template(name: &str) -> bool {
    // An environment variable's name by convention: upper case (Azure
    // Event Hubs' built-in group is `$Default`, a real name).
    let whole_var = name.strip_prefix('$').is_some_and(|v| {
        v.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && v.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    });
    name.contains("${") || name.contains("$(") || name.contains("{{") || whole_var
}

/// The file's own keys ([`FileConfig`]'s fields, as the file spells them;
/// a test holds the two together).
const FILE_KEYS: &[&str] = &[
    "brokers",
    "group",
    "topics",
    "data",
    "commit",
    "batch-records-max",
    "batch-bytes-max",
    "linger-ms",
    "record-bytes-max",
    "on-oversize",
    "dead-letter-topic",
    "on-offset-out-of-range",
    "auto-offset-reset",
    "connect-timeout-ms",
    "progress-interval-s",
    "retain",
    "retain-bytes",
    "retention-check-interval-s",
    "metrics-addr",
    "kafka",
];

/// The `[kafka]` table's values as librdkafka takes them: text. A number
/// or a boolean is its TOML text (`"session.timeout.ms" = 10000`); a table
/// or an array is no property's value. A refusal quotes the key's line
/// (until 2026-12-07 it quoted the `[kafka]` header's, the place toml
/// gives a table's own checks; an audit).
///
/// A key of the file's own there is refused, saying where it goes: TOML
/// puts every key after a `[kafka]` header into that table, and until
/// 2026-12-06 `group = "g"` written below it was reported as missing
/// ("use --group or set it in --config"), `topics = [..]` got advice for
/// a librdkafka list, and `retain` went to librdkafka as an unknown `-X`.
fn kafka_properties(
    text: &str,
    table: BTreeMap<String, toml::Value>,
    spans: &Spans,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let mut properties = BTreeMap::new();
    for (k, v) in table {
        let (k_span, v_span) = spans.kafka.get(&k).cloned().unwrap_or_default();
        // A table is an unquoted dotted name (`group.instance.id`),
        // told to quote it below.
        if k != "kafka" && FILE_KEYS.contains(&k.as_str()) && !v.is_table() {
            return Err(shown_at(text, k_span, &format!(
                "[kafka] {k:?}: a key of cairn's own, not a librdkafka property: TOML puts every key written below the [kafka] header into that table, so move `{k}` above the header"
            )));
        }
        let value = match v {
            toml::Value::String(s) if s.trim().is_empty() => {
                return Err(shown_at(
                    text,
                    v_span,
                    &empty_property(&k, "[kafka] ", &format!(" = {s:?}")),
                ))
            }
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                // A dotted name's table starts at its first word, the key.
                let at = if other.is_table() { k_span } else { v_span };
                return Err(shown_at(text, at, &format!(
                    "[kafka] {k:?}: {} is no property value: give text, a number or a boolean (a list as librdkafka takes it, in one string: \"a,b\"; and quote a property name with dots: \"session.timeout.ms\" = 10000)",
                    match other.type_str() {
                        "array" => "an array",
                        "table" => "a table",
                        _ => "a datetime",
                    }
                )));
            }
        };
        properties.insert(k, value);
    }
    Ok(properties)
}

/// The largest config file read (1 MiB).
pub const CONFIG_BYTES_MAX: u64 = 1 << 20;

impl FileConfig {
    pub fn load(path: &std::path::Path) -> Result<FileConfig> {
        let refused =
            |e: String| ConnectorError::Config(format!("--config {}: {e}", path.display()));
        // At most a mebibyte, ample for any settings: `--config
        // /dev/zero` (or a log given by mistake) read until memory ran out
        // (until 2026-12-07; an audit). Read, not sized: a FIFO works.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(f, CONFIG_BYTES_MAX + 1),
                    &mut bytes,
                )
            })
            .map_err(|e| refused(e.to_string()))?;
        if bytes.len() as u64 > CONFIG_BYTES_MAX {
            return Err(refused(format!(
                "over {CONFIG_BYTES_MAX} bytes, far more than any settings take: is it the config file?"
            )));
        }
        // Where, as a parse error says it: std's "stream did not contain
        // valid UTF-8" named no place (until 2026-12-07; an audit). The
        // bytes are not quoted: the line may hold a credential.
        let text = String::from_utf8(bytes).map_err(|e| {
            let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            // In characters, as toml counts its columns (until 2026-12-07
            // in bytes; an audit).
            let (line, column, _) =
                line_column(std::str::from_utf8(good).unwrap_or_default(), good.len());
            refused(format!(
                "not UTF-8 text (TOML is): the first byte that is not UTF-8 is at line {line}, column {column} (byte {} of the file)",
                good.len()
            ))
        })?;
        Self::from_text(&text).map_err(refused)
    }

    /// The file `text` holds, or why not, with where (toml's message, or
    /// one of the same form).
    pub fn from_text(text: &str) -> std::result::Result<FileConfig, String> {
        let mut file: FileConfig = toml::from_str(text).map_err(|e| shown_parse_error(text, &e))?;
        // From what toml read, not from the spans (which a parser that
        // differed from toml's would leave empty).
        file.sets_no_key = toml::from_str::<toml::Table>(text).is_ok_and(|t| t.is_empty());
        let spans = Spans::of(text);
        file.lines.own = spans
            .own
            .iter()
            .filter(|(_, at)| !at.is_empty())
            .map(|(k, at)| (k.clone(), line_column(text, at.start).0))
            .collect();
        if let Some(table) = file.kafka_as_written.take() {
            file.kafka = Some(kafka_properties(text, table, &spans)?);
            file.lines.kafka = spans
                .kafka
                .iter()
                .filter(|(_, (key, _))| !key.is_empty())
                .map(|(k, (key, _))| (k.clone(), line_column(text, key.start).0))
                .collect();
        }
        Ok(file)
    }
}

/// Where a config file's keys are, read with toml_edit (whose document
/// keeps the spans of keys, which toml's serde form gives only for
/// values, and not for a dotted key's). Read once toml has parsed the
/// file: a span missing is an empty range, said without a line.
#[derive(Debug, Default)]
struct Spans {
    /// The file's own keys: each key's span.
    own: BTreeMap<String, std::ops::Range<usize>>,
    /// The `[kafka]` table's keys: each key's span and its value's.
    kafka: BTreeMap<String, (std::ops::Range<usize>, std::ops::Range<usize>)>,
}

impl Spans {
    fn of(text: &str) -> Spans {
        let Ok(doc) = toml_edit::ImDocument::parse(text) else {
            return Spans::default();
        };
        let mut spans = Spans::default();
        let root = doc.as_table();
        for (name, _) in root.iter() {
            if let Some((key, _)) = root.get_key_value(name) {
                spans
                    .own
                    .insert(name.to_owned(), key.span().unwrap_or_default());
            }
        }
        if let Some(kafka) = root.get("kafka").and_then(|t| t.as_table_like()) {
            for (name, _) in kafka.iter() {
                if let Some((key, value)) = kafka.get_key_value(name) {
                    spans.kafka.insert(
                        name.to_owned(),
                        (
                            key.span().unwrap_or_default(),
                            value.span().unwrap_or_default(),
                        ),
                    );
                }
            }
        }
        spans
    }
}

/// The line and column (of characters, both from 1) of byte `at` of
/// `text`, and the byte its line starts at.
fn line_column(text: &str, at: usize) -> (usize, usize, usize) {
    let at = at.min(text.len());
    // A byte inside a character counts from the character's start.
    let at = (0..=at)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[..start].matches('\n').count() + 1;
    (line, text[start..at].chars().count() + 1, start)
}

/// Whether a message about `text` may quote its lines: not in a file that
/// names a credential or a security setting ([`shown_parse_error`]).
fn hides_lines(text: &str) -> bool {
    // A security setting with its name mistyped (`"sasl.pasword"`) names
    // no credential, and its value may be one (until 2026-12-06 quoted).
    let lower = text.to_ascii_lowercase();
    crate::librdkafka::names_a_credential(text) || lower.contains("sasl.") || lower.contains("ssl.")
}

/// `message` about bytes `span` of `text`, as toml says its own errors:
/// the line and column, and the line quoted with carets under the span
/// (unless the file [`hides_lines`]).
fn shown_at(text: &str, span: std::ops::Range<usize>, message: &str) -> String {
    if span.is_empty() && span.start == 0 {
        // No span found: the message alone (not line 1's place).
        return message.to_owned();
    }
    let (line, column, start) = line_column(text, span.start);
    if hides_lines(text) {
        return format!(
            "TOML parse error at line {line}, column {column}: {message} (the line is not shown: the file names a credential or a security setting)"
        );
    }
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let shown = text[start..end].trim_end_matches('\r');
    let from = span.start.clamp(start, end);
    let to = span.end.clamp(from, end);
    let carets = text.get(from..to).map_or(1, |t| t.chars().count().max(1));
    let gutter = " ".repeat(line.to_string().len());
    format!(
        "TOML parse error at line {line}, column {column}\n{gutter} |\n{line} | {shown}\n{gutter} | {}{}\n{message}",
        " ".repeat(column - 1),
        "^".repeat(carets)
    )
}

/// toml's parse error as an error message may show it: toml quotes the
/// line it failed on, and in a file that names a credential that line may
/// hold the secret (a `"sasl.password"` above the `[kafka]` header, a bad
/// escape in its value, the key given twice), and so may a line that does
/// not name it: one inside a multi-line value (an inline `ssl.key.pem`
/// whose closing `"""` is missing, a password with a bad escape on its
/// second line). The secret would go to stderr and the journal, as
/// `librdkafka::shown` keeps flags from doing. So in a file that names a
/// credential anywhere no line is quoted, only its line and column (since
/// 2026-12-05; since the night of 2026-12-04 only a line naming one was
/// left out, and before, every line was quoted).
fn shown_parse_error(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.to_string();
    };
    if !hides_lines(text) {
        return e.to_string();
    }
    let (line, column, _) = line_column(text, span.start);
    format!(
        "TOML parse error at line {line}, column {column}: {} (the line is not shown: the file names a credential or a security setting)",
        e.message().trim_end()
    )
}

/// The pruner's check interval when `--retain` is set and it is not.
pub const RETENTION_CHECK_INTERVAL_S_DEFAULT: u64 = 60;

/// Parse an age for `--retain` (`30d`, `12h`, `90min`).
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    // An age decides what is deleted. humantime reads `m` as minutes and
    // `M` as months: `--retain 6m` meant as half a year would delete all
    // but the last six minutes, for good. Refused; the words are plain.
    if s.split(|c: char| !c.is_ascii_alphabetic())
        .any(|unit| unit == "m" || unit == "M")
    {
        return Err(
            "the unit m is refused as ambiguous (minutes or months?): write min or months".into(),
        );
    }
    let age = humantime::parse_duration(s)
        .map_err(|e| format!("{e}: expected an age such as 7d, 12h or 90min"))?;
    // Kafka's timestamps are milliseconds, and an age is cut in them: one
    // under a millisecond cuts at now, as an age of 0 would, and deletes
    // every record (`500us` passed the check for 0 until 2026-12-06, found
    // in an audit).
    if !age.is_zero() && age.as_millis() == 0 {
        return Err(
            "under a millisecond, the unit of Kafka's timestamps: it would cut at now, as an age of 0 would, and delete every record (a unit slip? an age is most likely days or hours: 7d, 12h)".into()
        );
    }
    Ok(age)
}

/// A flag's value, or `none`, which clears what the config file sets: flags
/// win over the file, also to unset a setting (`--retain none`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagValue<T> {
    Set(T),
    Cleared,
}

impl<T> FlagValue<T> {
    /// The setting the flag makes, whatever the file says: its value, or
    /// none.
    pub fn setting(self) -> Option<T> {
        match self {
            FlagValue::Set(v) => Some(v),
            FlagValue::Cleared => None,
        }
    }
}

fn or_none<T>(s: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<FlagValue<T>, String> {
    if s == "none" {
        return Ok(FlagValue::Cleared);
    }
    parse(s)
        .map(FlagValue::Set)
        .map_err(|e| format!("{e}, or none"))
}

/// Parse `--retain`: an age, or `none` to keep everything.
pub fn parse_age_flag(s: &str) -> Result<FlagValue<std::time::Duration>, String> {
    or_none(s, parse_age)
}

/// Parse `--retain-bytes`: a size, or `none` for no bound.
pub fn parse_size_flag(s: &str) -> Result<FlagValue<u64>, String> {
    or_none(s, parse_size)
}

/// Parse a size for `--retain-bytes` and `prune --keep-bytes` (`50GiB`,
/// `500MB`, `4096B`). The unit is required: a bare number would be bytes,
/// and `--retain-bytes 50` meant as gigabytes keeps 50 bytes of each
/// partition, deleting the rest of the archive at the first pass.
pub fn parse_size(s: &str) -> Result<u64, String> {
    // 0 is 0 in any unit (and refused where a size must be positive).
    if s.trim().parse::<u64>().is_ok_and(|n| n != 0) {
        return Err(format!(
            "give a unit (50GiB, 500MB, or {}B for bytes): a bare number would be bytes",
            s.trim()
        ));
    }
    // Trimmed, as a byte count is (`parse_byte_count`): bytesize reads a
    // trailing space as part of the unit (until 2026-12-06 `"50GiB "` was
    // refused as the unknown unit "GiB ").
    // Said in the flag's words: bytesize's own ("couldn't parse \"\" into
    // a ByteSize, cannot parse float from empty string") named its
    // internals, not the mistake (until 2026-12-07; an audit).
    let t = s.trim();
    let expected = "expected a size with its unit, such as 50GiB, 500MB or 4096B";
    let digits = t
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .count();
    let (number, unit) = t.split_at(digits);
    if t.is_empty() {
        return Err(format!("empty: {expected}"));
    }
    if t.starts_with('-') {
        return Err(format!("negative: {expected}"));
    }
    if number.is_empty() {
        return Err(format!(
            "not a size (it must start with a number): {expected}"
        ));
    }
    if number.parse::<f64>().is_err() {
        return Err(format!("{number} is not a number: {expected}"));
    }
    let bytes = t
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|_| {
            format!(
                "unknown unit {:?}: B, KB, MB, GB, TB, PB, EB (powers of 1000) or KiB, MiB, GiB, TiB, PiB, EiB (powers of 1024)",
                unit.trim()
            )
        })?;
    // A fraction of a byte (`0.5B`) parses as 0: said as given, not as a
    // 0 nobody wrote.
    let number: String = s
        .trim()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    if bytes == 0 && number.parse::<f64>().is_ok_and(|n| n != 0.0) {
        return Err("less than one byte (a fraction of a byte)".into());
    }
    // In bytes, a fraction is no size (`1.5B` was taken as 1 B until
    // 2026-12-07; an audit). In a larger unit the bytes are whole.
    if unit.trim().eq_ignore_ascii_case("b")
        && number.parse::<f64>().is_ok_and(|n| n.fract() != 0.0)
    {
        return Err(format!("{number} bytes: not a whole number of bytes"));
    }
    // bytesize saturates a size past u64 (`20000000000EiB`) to u64::MAX,
    // which reads as no bound at all: said, not taken (since 2026-12-05).
    if bytes >= SIZE_BYTES_MAX {
        // Whether `none` may be given instead is the flag's to say
        // (`or_none`): `prune --keep-bytes` takes none.
        return Err(format!(
            "too large: at most {} bytes (1 byte under 8 EiB)",
            SIZE_BYTES_MAX - 1
        ));
    }
    Ok(bytes)
}

/// Parse `--batch-bytes-max` and `--record-bytes-max`: a number of bytes
/// (`8388608`), as always, or a size with its unit (`8MiB`, as
/// `--retain-bytes` takes: since 2026-12-06; before, `8MiB` was refused as
/// an "invalid digit", which did not say what was wanted).
pub fn parse_byte_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    if t.starts_with('-') {
        return Err(
            "negative: give a number of bytes (8388608) or a size with its unit (8MiB)".into(),
        );
    }
    parse_size(t)
        .map_err(|e| format!("{e} (a number of bytes, such as 8388608, is taken as it is)"))
}

/// [`parse_byte_count`] for a `usize` flag.
pub fn parse_byte_count_usize(s: &str) -> Result<usize, String> {
    let n = parse_byte_count(s)?;
    usize::try_from(n).map_err(|_| format!("too large: at most {} bytes", usize::MAX))
}

/// A whole number for a flag, said in the flag's words: clap's own parser
/// said "invalid digit found in string" of `-5`, `5.5` and `x` alike, and
/// "number too large to fit in target type" (until 2026-12-07; an audit).
/// Ranges are the flags' own to check, after parsing.
pub fn whole<T: TryFrom<i128>>(s: &str) -> Result<T, String> {
    let t = s.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    let n: i128 = match t.parse() {
        Ok(n) => n,
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            i128::MAX.saturating_mul(if t.starts_with('-') { -1 } else { 1 })
        }
        Err(_) if t.is_empty() => return Err("empty: give a whole number".into()),
        Err(_) if t.parse::<f64>().is_ok() => {
            return Err(format!("{t} is not a whole number"));
        }
        Err(_) => return Err(format!("{t:?} is not a number")),
    };
    T::try_from(n).map_err(|_| {
        if n < 0 && T::try_from(-1).is_err() {
            "negative: give a whole number, 0 or more".to_owned()
        } else if n < 0 {
            format!("{t} is too small")
        } else {
            format!("{t} is too large")
        }
    })
}

/// [`whole`], within `range` (said as the flag's bounds).
pub fn whole_in<T>(s: &str, range: std::ops::RangeInclusive<T>) -> Result<T, String>
where
    T: TryFrom<i128> + PartialOrd + std::fmt::Display,
{
    let n = whole::<T>(s)?;
    if !range.contains(&n) {
        return Err(format!("{n}: must be {} to {}", range.start(), range.end()));
    }
    Ok(n)
}

/// Sizes from [`parse_size`] are below this (2^63 bytes, 8 EiB): more than
/// any disk, and far from where bytesize's arithmetic saturates.
pub const SIZE_BYTES_MAX: u64 = 1 << 63;

/// Why a librdkafka property given an empty value (or only spaces) is
/// refused: librdkafka reads "" as unset, and a text property then goes
/// back to librdkafka's own default, which may undo one of cairn's
/// (`partition.assignment.strategy=`, its cooperative assignment), or,
/// given spaces, is left empty; one of a list of choices given only
/// spaces keeps what it had, silently (`debug= `). Neither is what the
/// empty value says, and a template that rendered nothing gives one.
/// Other kinds librdkafka refuses itself.
/// Until 2026-12-06 they were taken (found in an audit).
fn empty_property(key: &str, before: &str, after: &str) -> String {
    format!(
        "{before}{key}{after}: an empty value is no value: librdkafka takes it as unset or empty (a text property loses its value, librdkafka's or cairn's; a list of choices keeps what it had) or refuses it: leave {key} out for the default, or give the value"
    )
}

/// Kafka's internal topics: its groups' committed offsets, its
/// transactions' state, its share groups' state (Kafka 4) and a KRaft
/// cluster's metadata log. Brokers take no client's records into them.
const INTERNAL_TOPICS: [&str; 4] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
    "__cluster_metadata",
];

/// Parse `key=value` for `-X`.
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() && v.trim().is_empty() => {
            Err(empty_property(k.trim(), "-X ", &format!("={v}")))
        }
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
        // An argument without `=` may hold a credential all the same
        // (`sasl.password:x`): not shown then.
        _ if crate::librdkafka::names_a_credential(s) => Err(format!(
            "an argument of {} characters naming a credential (not shown): expected key=value",
            s.chars().count()
        )),
        _ => Err(format!("{s:?}: expected key=value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Broker lists librdkafka would read wrongly (a port it wraps or
    /// reads as 0) or not at all are refused at once, naming the entry;
    /// those it reads as meant pass.
    #[test]
    fn broker_lists_librdkafka_would_misread_are_refused() {
        for good in [
            "localhost:9092",
            "a:1,b:2",
            " a:1, b:65535,",
            "under_score.example.:9092",
            "kafka-0.svc.cluster.local",
            "PLAINTEXT://k:9092",
            "plaintext://k:9092/",
            "[::1]:9092",
            "::1",
            "10.0.0.1:9092,[fe80::1]:19092",
        ] {
            assert_eq!(brokers_as_read(good, None), Ok(()), "{good}");
        }
        assert_eq!(brokers_as_read("SSL://k:9093", Some("ssl")), Ok(()));
        assert_eq!(
            brokers_as_read("sasl_ssl://k:9093", Some("SASL_SSL")),
            Ok(())
        );
        for (bad, says) in [
            (
                "127.0.0.1:99999",
                "\"127.0.0.1:99999\": port \"99999\" is not a port (1 to 65535)",
            ),
            ("k:abc", "port \"abc\" is not a port"),
            ("k:-5", "port \"-5\""),
            ("k:0", "port \"0\""),
            ("k:", "port \"\""),
            ("a:1,b:70000", "\"b:70000\": port"),
            (",", "no broker in it"),
            (" , ", "no broker in it"),
            (
                "http://k:80",
                "http:// is not a protocol librdkafka connects with",
            ),
            ("SSL://k:9093", "not security.protocol's (plaintext)"),
            (":9092", "no host (an unset variable?)"),
            ("[]:9092", "no host"),
            ("a:1 b:2", "not host:port"),
            ("a:1 ,b:2", "\"a:1 \": a space after it"),
            ("k/path:9092", "not host:port"),
        ] {
            let e = brokers_as_read(bad, None).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // In a run's settings, with -X security.protocol read.
        let mut cfg = RunConfig::new("k:99999", "g", vec!["t".into()], "/tmp/x".into());
        assert!(
            matches!(cfg.validate(), Err(ConnectorError::Config(m)) if m.contains("port \"99999\"")),
        );
        cfg.brokers = "SSL://k:9093".into();
        assert!(cfg.validate().is_err());
        cfg.kafka.insert("security.protocol".into(), "ssl".into());
        assert!(!matches!(cfg.validate(), Err(ConnectorError::Config(m)) if m.contains("brokers")),);
    }

    /// The file's byte limits take a number of bytes or a size with its
    /// unit, as the flags do; anything else is refused saying both forms.
    #[test]
    fn the_files_byte_limits_take_a_number_or_a_size_with_its_unit() {
        let f = FileConfig::from_text("batch-bytes-max = \"4MiB\"\nrecord-bytes-max = 1048576\n")
            .unwrap();
        assert_eq!(
            (f.batch_bytes_max, f.record_bytes_max),
            (Some(4 << 20), Some(1 << 20))
        );
        let f = FileConfig::from_text("record-bytes-max = \"1.5KiB\"\n").unwrap();
        assert_eq!(f.record_bytes_max, Some(1536));
        for (bad, says) in [
            ("record-bytes-max = \"8 apples\"", "8 apples"),
            ("record-bytes-max = -1", "-1: negative"),
            ("batch-bytes-max = 1.5", "a float is no size"),
            ("batch-bytes-max = \"50\"", ""),
        ] {
            match FileConfig::from_text(bad) {
                Err(e) if !says.is_empty() => {
                    let e = e.to_string();
                    assert!(
                        e.contains(says) && e.contains("a number of bytes"),
                        "{bad}: {e}"
                    );
                }
                // A quoted bare number is bytes, as the flag's.
                Ok(f) if says.is_empty() => assert_eq!(f.batch_bytes_max, Some(50)),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    /// An empty property value, which librdkafka reads as its own default,
    /// is refused as a flag and in the file, naming the key.
    #[test]
    fn an_empty_property_value_is_refused() {
        let e = parse_kv("partition.assignment.strategy=").unwrap_err();
        assert!(
            e.contains("-X partition.assignment.strategy=: an empty value is no value"),
            "{e}"
        );
        let e = parse_kv("debug= ").unwrap_err();
        assert!(e.contains("-X debug= : an empty value is no value"), "{e}");
        assert_eq!(
            parse_kv("client.id= x").unwrap(),
            ("client.id".to_owned(), " x".to_owned())
        );
        for (value, shown) in [("\"\"", "\"\""), ("\"  \"", "\"  \"")] {
            let e = FileConfig::from_text(&format!("[kafka]\n\"client.id\" = {value}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!(
                    "[kafka] client.id = {shown}: an empty value is no value"
                )),
                "{e}"
            );
        }
    }

    /// `[kafka]` takes numbers and booleans as their text; a table (an
    /// unquoted name with dots) is refused, saying to quote it.
    #[test]
    fn kafka_table_values_are_text() {
        let f = FileConfig::from_text(
            "[kafka]\n\"session.timeout.ms\" = 10000\n\"enable.partition.eof\" = true\n\"x.y\" = \"z\"\n",
        )
        .unwrap();
        let kafka = f.kafka.unwrap();
        assert_eq!(kafka["session.timeout.ms"], "10000");
        assert_eq!(kafka["enable.partition.eof"], "true");
        assert_eq!(kafka["x.y"], "z");
        let e = FileConfig::from_text("[kafka]\nsession.timeout.ms = 10000\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("quote a property name with dots"), "{e}");
        let none = FileConfig::from_text("").unwrap();
        assert_eq!(none.kafka, None);
    }

    /// A key of the file's own written below the `[kafka]` header is
    /// refused, saying to move it above (it was taken for missing, or for a
    /// librdkafka property). The list of them is the file's: every one is
    /// a field, and every field is listed (serde names them all when it
    /// refuses an unknown one).
    /// A refusal in the `[kafka]` table quotes the line of the key or value
    /// refused, as toml's own errors do, not the `[kafka]` header's (until
    /// 2026-12-07; an audit).
    #[test]
    fn a_kafka_refusal_points_at_its_line() {
        let e = FileConfig::from_text(
            "brokers = \"b:1\"\n[kafka]\n\"linger.ms\" = 5\n\n  retain = \"7d\"\n",
        )
        .unwrap_err();
        assert!(
            e.starts_with(
                "TOML parse error at line 5, column 3\n  |\n5 |   retain = \"7d\"\n  |   ^^^^^^\n[kafka] \"retain\": a key of cairn's own"
            ),
            "{e}"
        );
        for (line, at) in [
            ("\"client.id\" = \"\"", "line 4, column 15"),
            ("\"client.id\" = [1]", "line 4, column 15"),
            ("client.id = \"x\"", "line 4, column 1"),
            ("\"client.id\" = 1979-05-27", "line 4, column 15"),
        ] {
            let text = format!("[kafka]\n\"acks\" = 1\n\n{line}\n");
            let e = FileConfig::from_text(&text).unwrap_err();
            assert!(
                e.starts_with(&format!("TOML parse error at {at}\n"))
                    && e.contains(&format!("4 | {line}\n")),
                "{line}: {e}"
            );
        }
        // A file naming a credential shows where, not the line.
        let e = FileConfig::from_text("[kafka]\n\"sasl.password\" = \"hunter2\"\nretain = 1\n")
            .unwrap_err();
        assert!(
            e.starts_with("TOML parse error at line 3, column 1: [kafka] \"retain\"")
                && !e.contains("hunter2"),
            "{e}"
        );
    }

    /// The line of each key the file gives, for the messages that refuse a
    /// value after parsing.
    #[test]
    fn the_lines_of_the_keys_are_kept() {
        let f = FileConfig::from_text(
            "# settings\nbrokers = \"b:1\"\n\ntopics = [\n  \"a\",\n]\n[kafka]\n\"acks\" = \"all\"\n\"linger.ms\" = 5\n",
        )
        .unwrap();
        assert_eq!(f.lines.own("brokers"), Some(2));
        assert_eq!(f.lines.own("topics"), Some(4));
        assert_eq!(f.lines.own("group"), None);
        assert_eq!(f.lines.kafka("acks"), Some(8));
        assert_eq!(f.lines.kafka("linger.ms"), Some(9));
    }

    /// The file's whole numbers are refused in the flags' words, not
    /// serde's (``invalid value: integer `-1`, expected u64``).
    #[test]
    fn the_files_whole_numbers_are_refused_in_plain_words() {
        for (bad, says) in [
            ("linger-ms = -1", "negative: give a whole number, 0 or more"),
            (
                "linger-ms = \"5\"",
                "\"5\" is text, not a number: write the number without quotes",
            ),
            (
                "batch-records-max = 1.5",
                "1.5 is a decimal number: give a whole number",
            ),
            ("linger-ms = 5.0", "5.0 is a decimal number"),
            ("connect-timeout-ms = true", "a boolean is no number"),
            ("progress-interval-s = [1]", "an array is no number"),
            ("retention-check-interval-s = -5", "negative"),
        ] {
            let e = FileConfig::from_text(bad).unwrap_err();
            assert!(e.contains(says) && !e.contains("expected u"), "{bad}: {e}");
        }
        let f = FileConfig::from_text("linger-ms = 0\nbatch-records-max = 7\n").unwrap();
        assert_eq!((f.linger_ms, f.batch_records_max), (Some(0), Some(7)));
    }

    /// A file too large to be settings is refused as the file's, naming it
    /// (a FIFO and a file of a mebibyte are read).
    #[test]
    fn a_huge_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        let mut huge = b"brokers = \"b:1\"\n".to_vec();
        huge.resize(CONFIG_BYTES_MAX as usize + 1, b'\n');
        std::fs::write(&path, &huge).unwrap();
        let e = FileConfig::load(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("over {CONFIG_BYTES_MAX} bytes")), "{e}");
        huge.truncate(CONFIG_BYTES_MAX as usize);
        std::fs::write(&path, &huge).unwrap();
        assert_eq!(
            FileConfig::load(&path).unwrap().brokers.as_deref(),
            Some("b:1")
        );
    }

    /// A file that is not UTF-8 is refused with where (not what: the line
    /// may hold a credential).
    #[test]
    fn a_file_not_utf8_is_refused_with_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        std::fs::write(&path, b"brokers = \"b:1\"\ngroup = \"g\xe9\"\n").unwrap();
        let e = FileConfig::load(&path).unwrap_err().to_string();
        assert!(
            e.ends_with(
                "not UTF-8 text (TOML is): the first byte that is not UTF-8 is at line 2, column 11 (byte 26 of the file)"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_key_of_the_files_own_below_the_kafka_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        for (line, key) in [
            ("group = \"archive\"", "group"),
            ("topics = [\"a\", \"b\"]", "topics"),
            ("retain = \"30d\"", "retain"),
            ("record-bytes-max = \"1MiB\"", "record-bytes-max"),
        ] {
            let text = format!(
                "brokers = \"b:1\"\ndata = \"d\"\n[kafka]\n\"session.timeout.ms\" = 10000\n{line}\n"
            );
            std::fs::write(&path, text).unwrap();
            let e = FileConfig::load(&path).unwrap_err().to_string();
            assert!(
                e.contains(&format!("[kafka] {key:?}: a key of cairn's own"))
                    && e.contains(&format!("move `{key}` above the header")),
                "{e}"
            );
        }
        // An unquoted dotted property whose first word is a key of the
        // file's: told to quote it, not to move it.
        let e = FileConfig::from_text("[kafka]\ngroup.instance.id = \"i\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("quote a property name with dots"), "{e}");
        let e = FileConfig::from_text("not-a-key = 1\n")
            .unwrap_err()
            .to_string();
        let expected = e
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("{e}"));
        let fields: Vec<&str> = expected
            .split(',')
            .map(|f| f.trim().trim_matches('`'))
            .take_while(|f| !f.is_empty())
            .map(|f| f.split('`').next().unwrap())
            .collect();
        assert_eq!(fields, FILE_KEYS, "{e}");
    }

    /// The whole file OPERATIONS.md shows ("A whole file") loads, with
    /// each key read as the flag reads it.
    #[test]
    fn the_documented_file_loads() {
        let text = r#"
brokers = "kafka-1:9092,kafka-2:9092"
group = "archive"
topics = ["orders", "payments"]
data = "archive"
commit = "interval:100"
retain = "30d"
retain-bytes = "50GiB"

[kafka]
"session.timeout.ms" = 10000
"security.protocol" = "ssl"
"#;
        let docs = include_str!("../../docs/OPERATIONS.md");
        let shown: String = text
            .trim()
            .lines()
            .map(|l| format!("  {l}").trim_end().to_owned() + "\n")
            .collect();
        assert!(docs.contains(&shown), "OPERATIONS.md's example differs");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        std::fs::write(&path, text).unwrap();
        let f = FileConfig::load(&path).unwrap();
        assert_eq!(f.topics, Some(vec!["orders".into(), "payments".into()]));
        assert_eq!(f.retain_bytes.as_deref(), Some("50GiB"));
        assert_eq!(f.kafka.unwrap()["session.timeout.ms"], "10000");
        assert_eq!(
            f.commit.unwrap().parse::<CommitPolicy>().unwrap(),
            CommitPolicy::Interval(Duration::from_millis(100))
        );
    }

    /// A file toml cannot parse is refused naming the place, and a line
    /// naming a credential is not quoted (toml's own message quotes it).
    #[test]
    fn a_parse_error_on_a_credential_line_does_not_show_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        for (text, line) in [
            // A bad escape in the secret.
            ("[kafka]\n\"sasl.password\" = \"pa\\ss-hunter2\"\n", 2),
            // Above the table's header: an unknown key of the file.
            (
                "brokers = \"b:1\"\n\"sasl.password\" = \"hunter2\"\n[kafka]\n",
                2,
            ),
            // Given twice.
            (
                "[kafka]\n\"sasl.password\" = \"x\"\n\"sasl.password\" = \"hunter2\"\n",
                3,
            ),
            // Inside a multi-line value, on a line that names no
            // credential (until 2026-12-05 quoted): not closed, and a bad
            // escape on its second line.
            ("[kafka]\n\"sasl.password\" = \"\"\"\nhunter2\n", 4),
            (
                "[kafka]\n\"sasl.password\" = \"\"\"\nhunter2\\q\"\"\"\n",
                3,
            ),
            (
                "[kafka]\n\"ssl.key.pem\" = \"\"\"\n-----BEGIN PRIVATE KEY-----\nMIIEhunter2\n-----END PRIVATE KEY-----\n",
                6,
            ),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = FileConfig::load(&path).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains(&format!("line {line}")), "{e}");
            assert!(e.contains("not shown"), "{e}");
        }
        // A security setting's name mistyped: its value is not shown
        // either (the name is no credential's any more).
        for typo in [
            "sasl.pasword",
            "ssl.key.passwd",
            "SASL.Oauthbearer.Client.Secrte",
        ] {
            std::fs::write(&path, format!("[kafka]\n\"{typo}\" = \"hunter2\\q\"\n")).unwrap();
            let e = FileConfig::load(&path).unwrap_err().to_string();
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("line 2") && e.contains("not shown"), "{e}");
        }
        // Other lines are quoted as toml quotes them.
        std::fs::write(&path, "group = \"g\"\nbrokers = b:1\n").unwrap();
        let e = FileConfig::load(&path).unwrap_err().to_string();
        assert!(e.contains("brokers = b:1"), "{e}");
    }

    /// A topic named twice is refused (subscribed once, it hides a typo
    /// for another topic, which would go unarchived).
    #[test]
    fn a_topic_named_twice_is_refused() {
        let twice = RunConfig::new(
            "b:1",
            "g",
            vec!["a".into(), "b".into(), "a".into()],
            "d".into(),
        );
        let e = twice.validate().unwrap_err().to_string();
        assert!(e.contains("\"a\" is named twice"), "{e}");
        let once = RunConfig::new("b:1", "g", vec!["a".into(), "b".into()], "d".into());
        assert!(once.validate().is_ok());
    }

    /// `__consumer_offsets` is refused: every commit cairn makes is a
    /// record in it, which archived would be committed again, without end.
    /// Other internal-looking names are topics like any.
    #[test]
    fn the_committed_offsets_topic_is_refused() {
        let cfg = RunConfig::new(
            "b:1",
            "g",
            vec!["a".into(), "__consumer_offsets".into()],
            "d".into(),
        );
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("every commit cairn makes adds a record to it"),
            "{e}"
        );
        let cfg = RunConfig::new("b:1", "g", vec!["__transaction_state".into()], "d".into());
        assert!(cfg.validate().is_ok());
    }

    /// `--rebind-topic` names a topic the run archives: another (a typo)
    /// would leave the refused topic refused, and is said at once.
    #[test]
    fn a_rebound_topic_not_archived_is_refused() {
        let mut c = RunConfig::new("b:1", "g", vec!["a".into(), "b".into()], "d".into());
        c.rebind_topics = vec!["b".into()];
        assert!(c.validate().is_ok());
        c.rebind_topics = vec!["b".into(), "c".into()];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("rebind-topic: \"c\" is not among the topics archived (a,b)"),
            "{e}"
        );
    }

    /// A pattern (librdkafka's `^…` subscription) is refused, saying that
    /// topics are named one by one; a plain bad name is refused without
    /// that guess.
    #[test]
    fn a_topic_pattern_is_refused_as_one() {
        for t in ["^orders-.*", "orders-[0-9]", "orders|payments"] {
            let cfg = RunConfig::new("b:1", "g", vec![t.into()], "d".into());
            let e = cfg.validate().unwrap_err().to_string();
            assert!(
                e.contains("a pattern? cairn subscribes to topics by name only"),
                "{t}: {e}"
            );
        }
        let cfg = RunConfig::new("b:1", "g", vec!["orders/eu".into()], "d".into());
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("orders/eu") && !e.contains("a pattern?"), "{e}");
    }

    /// A size is refused as given: a fraction of a byte is not a 0 nobody
    /// wrote; 0 in any unit is 0 (refused later where a size must be
    /// positive).
    #[test]
    fn a_size_under_one_byte_is_refused_as_given() {
        let e = parse_size("0.5B").unwrap_err();
        assert!(e.contains("less than one byte"), "{e}");
        assert_eq!(parse_size("0GiB"), Ok(0));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size(" 50GiB "), Ok(50 << 30), "trimmed");
        assert!(parse_size("50").unwrap_err().contains("give a unit"));
        // A fraction of a byte above one is refused too, not cut to 1 B.
        let e = parse_size("1.5B").unwrap_err();
        assert!(e.contains("not a whole number of bytes"), "{e}");
        assert_eq!(parse_size("2.0B"), Ok(2));
        assert_eq!(parse_size("1EiB"), Ok(1 << 60));
        assert!(parse_size("8EiB")
            .unwrap_err()
            .contains("1 byte under 8 EiB"));
        assert!(parse_size("5ZiB")
            .unwrap_err()
            .contains("EiB (powers of 1024)"));
    }

    /// A whole number that is none is said in the flag's words.
    #[test]
    fn a_whole_number_that_is_none_says_what_is_wrong() {
        assert_eq!(whole::<u64>(" 42 "), Ok(42));
        assert_eq!(whole::<i32>("-1"), Ok(-1));
        assert_eq!(whole::<u64>("18446744073709551615"), Ok(u64::MAX));
        for (s, says) in [
            ("-5", "negative: give a whole number, 0 or more"),
            ("5.5", "5.5 is not a whole number"),
            ("x", "\"x\" is not a number"),
            ("", "empty: give a whole number"),
            ("18446744073709551616", "18446744073709551616 is too large"),
            ("99999999999999999999999999999999999999999", "is too large"),
        ] {
            let e = whole::<u64>(s).unwrap_err();
            assert!(e.contains(says), "{s:?}: {e}");
        }
        assert!(whole::<i32>("-99999999999")
            .unwrap_err()
            .contains("is too small"));
    }

    /// A size that is none is said in the flag's words, not bytesize's
    /// ("couldn't parse \"\" into a ByteSize, cannot parse float from empty
    /// string", until 2026-12-07).
    #[test]
    fn a_size_that_is_none_says_what_is_wrong() {
        for (s, says) in [
            ("", "empty: expected a size with its unit"),
            (" ", "empty: expected a size with its unit"),
            ("-1B", "negative: expected a size with its unit"),
            ("GB", "not a size (it must start with a number)"),
            ("+5GB", "not a size (it must start with a number)"),
            ("abc", "not a size (it must start with a number)"),
            ("5.5.5GB", "5.5.5 is not a number"),
            ("5XB", "unknown unit \"XB\": B, KB"),
        ] {
            let e = parse_size(s).unwrap_err();
            assert!(e.starts_with(says), "{s:?}: {e}");
            assert!(
                !e.contains("ByteSize") && !e.contains("float"),
                "{s:?}: {e}"
            );
        }
        assert_eq!(parse_size("5 GiB"), Ok(5 << 30), "a space before the unit");
    }

    /// A size past what a u64 holds is refused, not saturated into no
    /// bound; the largest taken is just under 8 EiB.
    #[test]
    fn a_size_too_large_is_refused() {
        for s in [
            "20000000000EiB",
            "99999999999999999999GiB",
            "8EiB",
            "16EiB",
            "1e30B",
        ] {
            let e = parse_size(s).unwrap_err();
            assert!(
                e.contains("too large") || e.contains("unknown unit \"e30B\""),
                "{s}: {e}"
            );
        }
        assert!(parse_size("20000000000EiB")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_size("7EiB"), Ok(7 << 60));
    }

    #[test]
    fn commit_policy_parses() {
        assert_eq!(
            "every-put".parse::<CommitPolicy>().unwrap(),
            CommitPolicy::EveryPut
        );
        assert_eq!(
            "interval:100".parse::<CommitPolicy>().unwrap(),
            CommitPolicy::Interval(Duration::from_millis(100))
        );
        assert!("interval:".parse::<CommitPolicy>().is_err());
        assert!("interval:0".parse::<CommitPolicy>().is_err());
        assert!("sometimes".parse::<CommitPolicy>().is_err());
    }

    /// An embedder's commit interval is held to the flag's range.
    #[test]
    fn a_commit_interval_out_of_range_is_refused() {
        let mut cfg = RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        for (every, ok) in [
            (Duration::ZERO, false),
            (Duration::from_micros(999), false),
            (Duration::from_millis(1), true),
            (Duration::from_secs(3600), true),
            (Duration::from_secs(3601), false),
        ] {
            cfg.commit = CommitPolicy::Interval(every);
            let r = cfg.validate();
            assert_eq!(r.is_ok(), ok, "{every:?}: {r:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains("commit interval"), "{e}");
            }
        }
    }

    /// A progress interval out of range is named as itself, not as the
    /// dead letters' wait that reads the consumer's configuration built
    /// with it (until the night of 2026-12-04 that was blamed).
    #[test]
    fn a_progress_interval_out_of_range_is_named_before_the_dead_letter_wait() {
        let mut cfg = RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        cfg.on_oversize = OnOversize::DeadLetter;
        cfg.dead_letter_topic = Some("dlq".into());
        cfg.progress_interval_s = 100_000;
        for (k, v) in [
            ("max.poll.interval.ms", "1000000"),
            ("message.timeout.ms", "900000"),
        ] {
            cfg.kafka.insert(k.into(), v.into());
        }
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("progress-interval-s 100000"), "{e}");
    }

    /// Kafka's internal topics, where a broker refuses a client's records,
    /// are refused as the dead-letter topic up front.
    #[test]
    fn an_internal_topic_is_no_dead_letter_topic() {
        let mut cfg = RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        cfg.on_oversize = OnOversize::DeadLetter;
        for t in INTERNAL_TOPICS {
            cfg.dead_letter_topic = Some(t.to_string());
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains("one of Kafka's internal topics"), "{t}: {e}");
        }
        cfg.dead_letter_topic = Some("__dead_letters".into());
        assert!(cfg.validate().is_ok());
    }

    /// The dead-letter producer's settings are checked by `validate`, before
    /// the archive opens: librdkafka's refusals, and the keys it manages.
    #[test]
    fn dead_letter_producer_settings_are_checked_up_front() {
        let mut ok = RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        ok.on_oversize = OnOversize::DeadLetter;
        ok.dead_letter_topic = Some("dlq".into());
        assert!(ok.validate().is_ok());
        for (k, v, says) in [
            ("acks", "1", "dead-letter producer: -X:"),
            (
                "transactional.id",
                "x",
                "-X transactional.id=x: the dead-letter producer manages",
            ),
            (
                "queue.buffering.max.ms",
                "5",
                "-X queue.buffering.max.ms=5: the dead-letter producer sets queue.buffering.max.ms=0",
            ),
            (
                "enable.idempotence",
                "false",
                "-X enable.idempotence=false: the dead-letter producer sets",
            ),
            // Every dead letter is waited for by its delivery report.
            (
                "delivery.report.only.error",
                "true",
                "-X delivery.report.only.error=true: the dead-letter producer sets delivery.report.only.error=false",
            ),
            // Waited for on the consumer thread beyond the poll interval.
            (
                "message.timeout.ms",
                "900000",
                "each is waited for up to 905000 ms, during which the archive polls nothing",
            ),
            // A cap no dead letter fits under, in any spelling librdkafka
            // reads.
            (
                "message.max.bytes",
                "8388608",
                "-X message.max.bytes=8388608: with --on-oversize dead-letter it caps the dead letters too",
            ),
            (
                "message.max.bytes",
                "0x800000",
                "-X message.max.bytes=0x800000: with --on-oversize dead-letter it caps the dead letters too",
            ),
            // Above --record-bytes-max by less than a dead letter's own
            // headers (until 2026-12-06 taken), to the last byte.
            (
                "message.max.bytes",
                "8388609",
                "with its own headers beside (at least 8388663 bytes)",
            ),
            (
                "message.max.bytes",
                "8388662",
                "with its own headers beside (at least 8388663 bytes)",
            ),
        ] {
            let mut c = ok.clone();
            c.kafka.insert(k.into(), v.into());
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(says), "-X {k}={v}: {e}");
        }
        // Within the poll interval, a longer message timeout is taken; so
        // is a longer one with a longer interval.
        let mut c = ok.clone();
        c.kafka.insert("message.timeout.ms".into(), "200000".into());
        assert!(c.validate().is_ok());
        c.kafka.insert("message.timeout.ms".into(), "900000".into());
        c.kafka
            .insert("max.poll.interval.ms".into(), "1000000".into());
        assert!(c.validate().is_ok());
        // A cap above --record-bytes-max is taken (and kept: dead_letter.rs),
        // from the smallest dead letter's size up.
        let mut c = ok.clone();
        c.kafka
            .insert("message.max.bytes".into(), "16777216".into());
        assert!(c.validate().is_ok());
        c.kafka.insert("message.max.bytes".into(), "8388663".into());
        assert!(c.validate().is_ok());
        // The value cairn sets itself may be given (the consumer reads this
        // one too).
        let mut c = ok.clone();
        c.kafka
            .insert("allow.auto.create.topics".into(), "false".into());
        assert!(c.validate().is_ok());
        // A codec under either name replaces cairn's lz4 (one key, not two
        // at random).
        let mut c = ok.clone();
        c.kafka.insert("compression.codec".into(), "none".into());
        assert!(c.validate().is_ok());
        let (producer, _) = crate::dead_letter::client_config(&c);
        assert_eq!(producer.get("compression.type"), None);
        assert_eq!(producer.get("compression.codec"), Some("none"));
        // Without dead letters, producer keys are librdkafka's to ignore.
        let mut c = ok.clone();
        c.on_oversize = OnOversize::Fail;
        c.dead_letter_topic = None;
        c.kafka.insert("linger.ms".into(), "5".into());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn validation_names_the_setting() {
        let ok = RunConfig::new("b:1", "g", vec!["t".into()], "d".into());
        assert!(ok.validate().is_ok());
        // `ok` with one -X setting more, validated.
        let with = |key: &str, value: &str| {
            let mut c = ok.clone();
            c.kafka.insert(key.into(), value.into());
            c.validate().map_err(|e| e.to_string())
        };
        let e = with("enable.partition.eof", "false").unwrap_err();
        assert!(e.contains("-X enable.partition.eof=false"), "{e}");
        let e = with("api.version.request", "false").unwrap_err();
        assert!(e.contains("-X api.version.request=false"), "{e}");
        for group in ["archive\nline", "a\tb"] {
            let mut c = ok.clone();
            c.group = group.into();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("a control character"), "{e}");
        }
        let mut c = ok.clone();
        c.group = "g".repeat(40_000);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("40000 bytes long"), "{e}");
        let e = with("group.protocol.type", "x").unwrap_err();
        assert!(e.contains("-X group.protocol.type=x"), "{e}");
        assert!(with("group.protocol.type", "consumer").is_ok());
        assert!(with("group.protocol.type", "CONSUMER").is_err());
        assert!(with("internal.termination.signal", "0").is_ok());
        // librdkafka would take SIGTERM from cairn's clean stop.
        let e = with("internal.termination.signal", "15").unwrap_err();
        assert!(
            e.contains("-X internal.termination.signal=15") && e.contains("leave it out"),
            "{e}"
        );
        for fallback in ["0.9.0", "0.8.2", "0.9", "0.8.0"] {
            let e = with("broker.version.fallback", fallback).unwrap_err();
            assert!(e.contains("-X broker.version.fallback="), "{fallback}: {e}");
        }
        for fallback in ["0.10.0", "0.10.2.1", "2.8.0", "1.0"] {
            assert!(
                with("broker.version.fallback", fallback).is_ok(),
                "{fallback}"
            );
        }
        // As librdkafka reads them: `0ms`, `0.5`, `0x0` and 2^32 are 0 to
        // its `strtol` into an int.
        for ms in ["-1", "0", "0ms", "0.5", "0x0", "4294967296"] {
            let e = with("topic.metadata.refresh.interval.ms", ms).unwrap_err();
            assert!(
                e.contains(&format!("-X topic.metadata.refresh.interval.ms={ms}")),
                "{e}"
            );
        }
        assert!(with("topic.metadata.refresh.interval.ms", "60000").is_ok());
        assert!(with("topic.metadata.refresh.interval.ms", "0xEA60").is_ok());
        let e = with("allow.auto.create.topics", "true").unwrap_err();
        assert!(
            e.contains("-X allow.auto.create.topics=true") && e.contains("never creates a topic"),
            "{e}"
        );
        assert!(with("allow.auto.create.topics", "false").is_ok());
        // Written unescaped into librdkafka's statistics.
        for id in ["CORP\\svc", "a\"b", "a\tb"] {
            let e = with("client.id", id).unwrap_err();
            assert!(e.contains("without escaping it"), "{id}: {e}");
        }
        assert!(with("client.id", "archive-1.eu").is_ok());
        // No statistics are asked for without progress lines.
        let mut c = ok.clone();
        c.progress_interval_s = 0;
        c.kafka.insert("client.id".into(), "CORP\\svc".into());
        assert!(c.validate().is_ok());
        // So are the brokers' names.
        let mut c = ok.clone();
        c.brokers = "good:9092,bad\"h:9092".into();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("in no broker's address"), "{e}");
        let e = with("topic.blacklist", "^t$").unwrap_err();
        assert!(e.contains("-X topic.blacklist=^t$"), "{e}");
        let e = with("enable.auto.commit", "true").unwrap_err();
        assert!(
            e.contains("enable.auto.commit") && e.contains("after its fsync"),
            "{e}"
        );
        for group in [
            "archive ",
            " archive",
            "${GROUP}",
            "cairn-${ENV}",
            "$GROUP",
            "$(GROUP)",
            "archive-$(ENV)",
            "{{ group }}",
        ] {
            let mut c = ok.clone();
            c.group = group.into();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.starts_with(&format!("group {group:?}: ")), "{e}");
            let why = if group.trim() != group {
                "whitespace"
            } else {
                "a template never rendered"
            };
            assert!(e.contains(why), "{e}");
        }
        let mut c = ok.clone();
        c.group = "a$b".into();
        assert!(c.validate().is_ok(), "a `$` alone is a name");
        for name in ["$", "$1", "a-$GROUP", "{group}", "$Default"] {
            c.group = name.into();
            assert!(c.validate().is_ok(), "{name}");
        }
        // A managed property says which flag gives it.
        let e = with("group.id", "other").unwrap_err();
        assert!(
            e.contains("-X group.id=other") && e.contains("--group"),
            "{e}"
        );
        let e = with("bootstrap.servers", "h:1").unwrap_err();
        assert!(e.contains("--brokers"), "{e}");
        let e = with("auto.offset.reset", "earliest").unwrap_err();
        assert!(
            e.contains("auto.offset.reset") && e.contains("--auto-offset-reset"),
            "{e}"
        );
        let mut c = ok.clone();
        c.topics = vec!["bad topic".into()];
        assert!(c.validate().unwrap_err().to_string().contains("topics"));
        let mut c = ok;
        c.batch_records_max = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("batch-records-max"));
    }

    #[test]
    fn file_config_rejects_unknown_keys() {
        assert!(FileConfig::from_text("brokers = \"x\"\ncommit = \"every-put\"").is_ok());
        assert!(FileConfig::from_text("brokerz = \"x\"").is_err());
    }
}

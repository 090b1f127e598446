//! `cairn status`: per partition, what the archive holds, and with
//! `--brokers` Kafka's committed offset, high watermark and lag.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cairn_engine::TopicPartition;
use rdkafka::consumer::Consumer;
use serde::{Deserialize, Serialize};

use super::outln;
use crate::config::{check_connect_timeout_ms, refuse_managed_keys, MANAGED_CONSUMER_KEYS};
use crate::consumer::CheckContext;
use crate::error::{ConnectorError, Result};
use crate::offsets::{client_in, read_committed};
use crate::retention::{read_bounds_each_within, read_bounds_of, unanswered};

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    /// Also ask Kafka for its watermarks (and with `--group`, committed
    /// offsets), and list the partitions of archived topics that the
    /// archive holds nothing of.
    #[arg(long, short = 'b', value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub brokers: Option<String>,
    /// The archive's own consumer group, as `cairn run --group` names it
    /// (needs `--brokers`): its committed offsets are shown, and the archive
    /// lag counts from where that run resumes, which is that group's commit
    /// where it is past the archive's and made by another store or tool. Not
    /// another application's group: its commits would be taken for the
    /// archive's resume points.
    #[arg(long, short = 'g', requires = "brokers", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub group: Option<String>,
    /// How long to wait for the brokers before giving up, 1 to 3600000 (an hour).
    #[arg(value_parser = crate::config::whole::<u64>,
        long,
        default_value_t = 10_000,
        requires = "brokers",
        allow_negative_numbers = true
    )]
    pub connect_timeout_ms: u64,
    /// librdkafka property for the client that reads Kafka's view, as with
    /// kcat (repeatable): security settings, for instance.
    #[arg(short = 'X', value_parser = crate::config::parse_kv, value_name = "KEY=VALUE", requires = "brokers")]
    pub kafka: Vec<(String, String)>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    topic: String,
    partition: i32,
    /// `None` for a partition Kafka has and the archive holds nothing of.
    first_offset: Option<i64>,
    durable_next_offset: Option<i64>,
    records: u64,
    bytes: u64,
    // Kafka's figures are `null` in JSON when not asked for or not given:
    // every row has every key, whatever the flags.
    kafka_committed: Option<i64>,
    high_watermark: Option<i64>,
    /// high watermark − committed offset
    lag: Option<i64>,
    /// What the archive has yet to store: [`archive_lag`].
    archive_lag: Option<i64>,
    /// Why Kafka figures asked for are missing (`null` when none is, or
    /// none was asked for): a JSON reader tells a read that failed from
    /// "nothing committed" without parsing stderr's WARN (since the night
    /// of 2026-12-04). Reasons are joined with "; ".
    #[serde(default)]
    kafka_missing: Option<String>,
    /// The pid of the running `cairn run` whose answer the archive's
    /// figures are (`null` when read from a stopped archive): the table's
    /// "(live: ...)" line, for a JSON reader (since 2026-12-04). Set by
    /// the asking side, so an answer from an older run parses too.
    #[serde(default)]
    live_pid: Option<u32>,
    /// The archive's identity (`Mstore`: 32 hex digits), as its run names
    /// it in the metadata of every offset it commits (`cairn-store:`), in
    /// every row (since the night of 2026-12-04; `null` in an answer from
    /// an older run).
    #[serde(default)]
    store: Option<String>,
    /// Who committed `kafka_committed`, by its metadata: `this archive`,
    /// `another store` (another archive's identity), `not cairn` (no cairn
    /// identity: another tool, or a member without one); `null` with no
    /// commit, or with no identity to compare (an older run's answer).
    /// Where a run would resume depends on it, and the archive lag counts
    /// from there (since the night of 2026-12-04).
    #[serde(default)]
    committed_by: Option<String>,
    /// The Kafka topic id the archive recorded for the row's topic
    /// (store format 5; Kafka's own form, as `kafka-topics --describe`
    /// prints it): `null` before a run recorded one (since 2026-12-06;
    /// `null` in an answer from an older run).
    #[serde(default)]
    topic_id: Option<String>,
    /// The damage found where the topic's id is recorded (`topic_id` is
    /// then `null`; `cairn verify` names it too, and a run stops on it
    /// until `--rebind-topic` writes Kafka's over it); the command exits 1.
    #[serde(default)]
    topic_id_damage: Option<String>,
    /// Why the partition's summary, whose figures these are, cannot be
    /// true (more records than offsets, payload bytes in no record): a
    /// store opens with such a summary so that `cairn verify` can name the
    /// loss behind it; the command exits 1 (since 2026-12-06; before, the
    /// figures were printed as they were, exit 0). `null` when sound.
    /// Worked out by `status` itself from the row's figures, also those
    /// of an older run's answer.
    #[serde(default)]
    summary_damage: Option<String>,
    /// With `--brokers`: the topic's id in Kafka now (`null` when Kafka
    /// gave none or it could not be read). Another than `topic_id` means
    /// the topic was deleted and created again, or the brokers are
    /// another cluster's: `cairn run` would stop at its assignment, and
    /// the row has no archive lag (its offsets name another topic's
    /// records).
    #[serde(default)]
    kafka_topic_id: Option<String>,
    /// The committed offset with its metadata, kept to work out where a
    /// run would resume (`resume_from`); not printed.
    #[serde(skip)]
    committed: Option<crate::offsets::Committed>,
    /// Kafka's log start, kept to work the archive lag out again from a
    /// running archive's newer figures (`refresh`); not printed.
    #[serde(skip)]
    low_watermark: Option<i64>,
    /// The group's committed offset was asked for and could not be read:
    /// where a run would start a partition the archive holds nothing of
    /// is then not known.
    #[serde(skip)]
    committed_unread: bool,
}

impl Row {
    /// A partition of an archived topic that Kafka has and the archive
    /// holds nothing of (a partition added since, or never assigned).
    fn unarchived(topic: &str, partition: i32) -> Row {
        Row {
            topic: topic.to_owned(),
            partition,
            first_offset: None,
            durable_next_offset: None,
            records: 0,
            bytes: 0,
            kafka_committed: None,
            high_watermark: None,
            lag: None,
            archive_lag: None,
            kafka_missing: None,
            live_pid: None,
            store: None,
            committed_by: None,
            topic_id: None,
            topic_id_damage: None,
            summary_damage: None,
            kafka_topic_id: None,
            committed: None,
            low_watermark: None,
            committed_unread: false,
        }
    }

    /// Kafka's topic id is known and is not the one archived.
    fn topic_replaced(&self) -> bool {
        matches!((&self.topic_id, &self.kafka_topic_id), (Some(a), Some(k)) if a != k)
    }

    /// Note why some of this row's Kafka figures are missing.
    fn missing(&mut self, why: impl std::fmt::Display) {
        let why = why.to_string();
        self.kafka_missing = Some(match self.kafka_missing.take() {
            Some(before) => format!("{before}; {why}"),
            None => why,
        });
    }

    /// Take back a note [`missing`](Self::missing) made (`why`, whole),
    /// once what it said no longer holds.
    fn unsay(&mut self, why: &str) {
        self.kafka_missing = self.kafka_missing.take().and_then(|m| {
            let kept: Vec<&str> = m.split("; ").filter(|w| *w != why).collect();
            (!kept.is_empty()).then(|| kept.join("; "))
        });
    }
}

pub async fn run(args: StatusArgs) -> Result<ExitCode> {
    check_connect_timeout_ms(args.connect_timeout_ms)?;
    let mut kafka: BTreeMap<String, String> = super::kafka_flags(args.kafka.clone())?;
    refuse_managed_keys(&kafka, &MANAGED_CONSUMER_KEYS, "cairn status")?;
    // The watermarks are read uncommitted: the `high` column is the high
    // watermark, records of a transaction still open included, which a
    // hung producer holds back from `run` (its progress line counts to the
    // last stable offset). librdkafka's default, read_committed, answered
    // the last stable offset (seen in review, the night of 2026-12-04).
    if let Some((k, v)) =
        crate::librdkafka::setting_other_than(&kafka, "isolation.level", Some("read_uncommitted"))
    {
        return Err(ConnectorError::Config(format!(
            "-X {k}={v}: cairn status reads Kafka's high watermark (isolation.level=read_uncommitted), whatever a run reads"
        )));
    }
    kafka.insert("isolation.level".into(), "read_uncommitted".into());
    // As `run` and `restore` refuse it: which of two names librdkafka
    // takes changes from run to run (before 2026-12-03 status took it).
    crate::librdkafka::refuse_ambiguous_settings(&kafka).map_err(ConnectorError::Config)?;
    if let Some(brokers) = &args.brokers {
        crate::config::check_brokers(brokers, &kafka)?;
    }
    // Made now, so that librdkafka checks the -X settings before the
    // archive is opened (an open may recover it, or upgrade its format).
    // Its context keeps the client's last error: brokers that do not
    // answer are said with why (a refused login, a failed TLS handshake),
    // as `run` says it (since the night of 2026-12-04; before, only
    // "cannot reach Kafka").
    let consumer = match &args.brokers {
        None => None,
        Some(brokers) => Some(client_in(
            brokers,
            args.group.as_deref(),
            &kafka,
            CheckContext::default(),
        )?),
    };
    let data = &args.data.data;
    let mut repaired = false;
    let (mut rows, served_by) = match crate::live::connect(data)? {
        Some(conn) => match live_rows(conn)? {
            Ok((rows, pid)) => (rows, Some(pid)),
            Err(end) => return Ok(crate::live::exit_code(&end)),
        },
        None => {
            let engine = super::open_unserved(data, super::Access::Read)?;
            // Damage the open rebuilt is said (`say_repaired`), and the
            // exit is 1, as for damage status finds itself: a monitor
            // that goes by the exit learns of it (nothing finds it again).
            let report = engine.recovery_report();
            repaired =
                report.index_entries_damaged > 0 || !report.damaged_segment_headers.is_empty();
            // Its reads of the topic ids go through sled: a panic there
            // (sled's, on damage to its own files) is an error naming the
            // archive, as the open's is (until 2026-12-06 it exited 101).
            let rows = super::read_unpanicked("status", data, &engine, "", || rows(&engine))?;
            // Closed, not dropped: a failed sync of what the open wrote
            // (recovery, a node split) exits 1, as any failed fsync does
            // (since 2026-12-05; the drop's sync left the poison mark, but
            // the command exited 0).
            engine.close()?;
            (rows, None)
        }
    };
    // Kafka's side failing whole (no metadata: brokers unreachable, a
    // refused login) leaves the archive's own figures worth printing: they
    // are, with the Kafka columns empty, and the run exits 1 with the
    // error logged (until the night of 2026-12-03 it printed nothing).
    let mut exit = if repaired {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    // Why Kafka's figures are missing from every row, if they are: rows a
    // refresh adds say the same.
    let mut kafka_unread: Option<String> = None;
    if let (Some(brokers), Some(consumer)) = (&args.brokers, consumer) {
        let timeout = Duration::from_millis(args.connect_timeout_ms);
        tracing::info!(%brokers, connect_timeout_ms = args.connect_timeout_ms, "reading Kafka's figures");
        // The client's errors (a refused connection) said as they come,
        // not after the whole wait; it joins no group, so nothing else
        // comes on its queue.
        let viewed = crate::librdkafka::serving_queue(
            || {
                let _ = consumer.poll(Duration::from_millis(50));
            },
            || {
                kafka_view(
                    &consumer,
                    brokers,
                    args.group.as_deref(),
                    timeout,
                    &mut rows,
                )
            },
        );
        if let Err(e) = viewed {
            let e = crate::consumer::with_last_client_error(e, &consumer, |c| &c.last_cause);
            // Said whatever `RUST_LOG` keeps: it is why the exit is 1
            // (until 2026-12-05 a tracing event, which a filter naming
            // other targets dropped).
            super::say(
                "ERROR",
                &"could not read Kafka's figures: the archive's are printed, the Kafka columns left empty",
                Some(&format_args!("could not read Kafka's figures: {e}")),
            );
            let why = format!("could not read Kafka's figures: {e}");
            for r in &mut rows {
                (r.kafka_committed, r.high_watermark, r.lag, r.archive_lag) =
                    (None, None, None, None);
                r.kafka_missing = Some(why.clone());
            }
            kafka_unread = Some(why);
            exit = ExitCode::FAILURE;
        }
    }
    // A running archive went on while Kafka was read: its figures are
    // asked for again (`refresh`), from the same run.
    if let (Some(pid), Some(_)) = (served_by, &args.brokers) {
        let again = crate::live::connect(data).ok().flatten().map(live_rows);
        match again {
            Some(Ok(Ok((newer, p)))) if p == pid => {
                refresh(&mut rows, newer, kafka_unread.as_deref())
            }
            // Said (a WARN and every row's `kafka_missing`), not only
            // logged at DEBUG: a committed offset read after the archive's
            // first figures can then show above the durable one, which
            // status otherwise never shows of this archive's own commits
            // (seen in review, the night of 2026-12-04).
            other => {
                let why = match other {
                    None => "the running cairn run no longer answers".to_owned(),
                    Some(Ok(Ok((_, p)))) => format!("another cairn run (pid {p}) answered"),
                    Some(Ok(Err(end))) => {
                        format!("the run refused: {}", end.error.unwrap_or_default())
                    }
                    Some(Err(e)) => e.to_string(),
                };
                // A committed offset only if one was read (a --group, and
                // Kafka answered): said of none when none was (until
                // 2026-12-07; an audit).
                let commits_read = args.group.is_some() && kafka_unread.is_none();
                if commits_read {
                    tracing::warn!(%why, "the running archive's figures were not read again after Kafka's: they are those read before, and a committed offset read since may be above them");
                } else {
                    tracing::warn!(%why, "the running archive's figures were not read again after Kafka's: they are those read before, and may be behind Kafka's log end as read since");
                }
                for r in &mut rows {
                    r.missing(format_args!(
                        "the archive's figures are from before Kafka's were read ({why})"
                    ));
                }
            }
        }
    }
    // Every row, those `--brokers` added too.
    for r in &mut rows {
        r.live_pid = served_by;
        r.summary_damage = summary_damage(r);
    }
    // Damage is an error, said (on stderr) before the figures are printed.
    let damaged: std::collections::BTreeSet<(&str, &str)> = rows
        .iter()
        .filter_map(|r| Some((r.topic.as_str(), r.topic_id_damage.as_deref()?)))
        .collect();
    // Said whatever `RUST_LOG` keeps: it is why the exit is 1.
    for (topic, damage) in &damaged {
        super::say(
            "ERROR",
            &format_args!("the topic id the archive recorded for {topic} is damaged"),
            Some(&format_args!(
                "the topic id the archive recorded for {topic} is damaged ({damage}): cairn run stops on it until a run with --rebind-topic {topic} records Kafka's over it (against brokers that give no topic id, the flag is needed at every run); cairn verify names it too"
            )),
        );
    }
    if !damaged.is_empty() {
        exit = ExitCode::FAILURE;
    }
    for damage in rows.iter().filter_map(|r| r.summary_damage.as_deref()) {
        super::say(
            "ERROR",
            &format_args!("a partition's summary in the archive is damaged"),
            Some(&format_args!(
                "{damage}: its row's figures are what the summary says, not what the archive holds; cairn verify names the damage behind it"
            )),
        );
        exit = ExitCode::FAILURE;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows).expect("json"))?;
        return Ok(exit);
    }
    for line in table(&rows) {
        outln!("{line}")?;
    }
    if rows.is_empty() {
        outln!("(archive is empty)")?;
    }
    if let Some(pid) = served_by {
        outln!("(live: durable figures from the running cairn run, pid {pid})")?;
    }
    for line in committed_elsewhere(&rows) {
        outln!("{line}")?;
    }
    Ok(exit)
}

/// A note per row whose committed offset this archive did not commit: the
/// JSON says so in `committed_by`, and the table showed such an offset,
/// above the durable one, with nothing to tell it from a commit past what
/// the archive holds (until 2026-12-07; an audit). The archive lag counts
/// from where a run of this archive would resume.
fn committed_elsewhere(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter_map(|r| {
            let by = r.committed_by.as_deref().filter(|&by| by != THIS_ARCHIVE)?;
            let committed = r.kafka_committed?;
            let who = if by == ANOTHER_STORE {
                "another cairn archive (another member of the group archived it, or the group is another archive's)"
            } else {
                "no cairn archive (another tool, or a member without an identity)"
            };
            let resume = match resume_from(r.durable_next_offset, r.committed.as_ref(), r.store.as_deref()) {
                Some(o) => format!("a run of this archive resumes at {o}"),
                None => "a run of this archive starts at Kafka's log start".to_owned(),
            };
            Some(format!(
                "({}/{}: committed {committed} by {who}: {resume})",
                r.topic, r.partition
            ))
        })
        .collect()
}

/// The table's lines, its header first. Each column is as wide as its
/// widest cell, and at least its usual width: a long topic name (or a huge
/// count) pushed its row's columns right of the header's (until 2026-12-07;
/// found by an audit).
fn table(rows: &[Row]) -> Vec<String> {
    let opt = |v: Option<i64>| v.map_or("-".to_owned(), |v| v.to_string());
    let header = [
        "topic",
        "part",
        "first",
        "durable",
        "records",
        "bytes",
        "committed",
        "high",
        "lag",
        "arch-lag",
    ]
    .map(str::to_owned);
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            [
                r.topic.clone(),
                r.partition.to_string(),
                opt(r.first_offset),
                opt(r.durable_next_offset),
                r.records.to_string(),
                r.bytes.to_string(),
                opt(r.kafka_committed),
                opt(r.high_watermark),
                opt(r.lag),
                opt(r.archive_lag),
            ]
        })
        .collect();
    let mut widths = [30, 5, 12, 12, 10, 12, 12, 12, 8, 8];
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut lines = Vec::with_capacity(cells.len() + 1);
    for row in std::iter::once(&header).chain(&cells) {
        let mut line = format!("{:<w$}", row[0], w = widths[0]);
        for (cell, w) in row.iter().zip(widths).skip(1) {
            line.push_str(&format!(" {cell:>w$}"));
        }
        lines.push(line);
    }
    lines
}

/// The archive's figures per partition (the Kafka columns empty). A
/// damaged topic id is shown as such in its topic's rows
/// (`topic_id_damage`), the rest of the table printed: the command then
/// exits 1.
fn rows(engine: &cairn_engine::Engine) -> Result<Vec<Row>> {
    let partitions = engine.partitions();
    let mut ids: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    for p in &partitions {
        if ids.contains_key(&p.tp.topic) {
            continue;
        }
        let read = match engine.topic_id(&p.tp.topic) {
            Ok(id) => (id.map(|id| id.to_string()), None),
            Err(e) if e.is_corruption() => (None, Some(e.to_string())),
            Err(e) => return Err(e.into()),
        };
        ids.insert(p.tp.topic.clone(), read);
    }
    Ok(partitions
        .into_iter()
        .map(|p| Row {
            topic_id: ids[&p.tp.topic].0.clone(),
            topic_id_damage: ids[&p.tp.topic].1.clone(),
            summary_damage: None,
            topic: p.tp.topic,
            partition: p.tp.partition,
            first_offset: Some(p.first_offset),
            durable_next_offset: Some(p.next_offset),
            records: p.record_count,
            bytes: p.payload_bytes,
            kafka_committed: None,
            high_watermark: None,
            lag: None,
            archive_lag: None,
            kafka_missing: None,
            live_pid: None,
            store: Some(engine.store_id().to_string()),
            committed_by: None,
            kafka_topic_id: None,
            committed: None,
            low_watermark: None,
            committed_unread: false,
        })
        .collect())
}

/// Why the archive's figures in `r` (its partition's summary) cannot be
/// true together, if they cannot: more records than offsets between its
/// first and next offsets, or payload bytes with no record. The engine
/// opens a store with such a summary (a truncation over a lost index entry
/// writes one) so that verify can name the loss; status shows the figures
/// it has, and says they are damaged (found in an audit, 2026-12-06).
/// Worked out by the asking side, from the row, so that an answer from a
/// run older than the check is judged too.
fn summary_damage(r: &Row) -> Option<String> {
    let (Some(first), Some(next)) = (r.first_offset, r.durable_next_offset) else {
        return None;
    };
    let offsets = u64::try_from(next.saturating_sub(first)).unwrap_or(0);
    let tp = format!("{}/{}", r.topic, r.partition);
    if r.records > offsets {
        return Some(format!(
            "partition summary {tp}: {} records between offsets {first} and {next}, more than the {offsets} offsets there",
            r.records
        ));
    }
    if r.records == 0 && r.bytes > 0 {
        return Some(format!(
            "partition summary {tp}: {} payload bytes in no record",
            r.bytes
        ));
    }
    None
}

/// A running archive's rows and the pid of the run that answered, or the
/// end of an answer that refused.
fn live_rows(
    conn: std::os::unix::net::UnixStream,
) -> Result<std::result::Result<(Vec<Row>, u32), crate::live::End>> {
    let mut json = Vec::new();
    let end = crate::live::request(
        conn,
        &crate::live::Request::Status,
        &mut json,
        std::path::Path::new("<status>"),
    )?;
    if end.error.is_some() {
        return Ok(Err(end));
    }
    let rows: Vec<Row> = serde_json::from_slice(&json).map_err(|e| {
        ConnectorError::Live(format!("the running cairn's status did not parse: {e}"))
    })?;
    Ok(Ok((rows, end.pid)))
}

/// The live answer to `status` (live.rs): the rows as JSON.
pub(crate) fn serve(engine: &cairn_engine::Engine, out: &mut dyn std::io::Write) -> Result<u8> {
    serde_json::to_writer(out, &rows(engine)?).map_err(|e| crate::live::socket_error(e.into()))?;
    Ok(0)
}

/// The group's committed offsets into `rows`, with a WARN for each error
/// Kafka could not read partitions for (naming how many and the first few:
/// read 1,000 partitions a request, one that fails whole fails them all),
/// and one for partitions the group committed nothing for.
fn note_committed(
    rows: &mut [Row],
    tps: &[TopicPartition],
    committed: &crate::offsets::CommittedRead,
    group: Option<&str>,
    store: Option<&str>,
) {
    let mut unread: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (tp, error) in &committed.unread {
        unread
            .entry(error.to_string())
            .or_default()
            .push(tp.to_string());
    }
    for (error, tps) in unread {
        let count = tps.len();
        let first = crate::selection::first_few(tps.into_iter());
        tracing::warn!(%error, partitions = count, first = %first, "Kafka could not read these partitions' committed offsets: their column is left empty");
    }
    // A mistyped group reads as one that committed nothing: say so,
    // rather than show an idle-looking table without a word.
    let uncommitted = tps
        .iter()
        .filter(|tp| !committed.offsets.contains_key(*tp) && !committed.unread.contains_key(*tp))
        .count();
    if uncommitted > 0 {
        tracing::warn!(
            group = group.unwrap_or_default(),
            partitions = uncommitted,
            of = tps.len(),
            "the group has no committed offset for these partitions (a group that never ran on them, a mistyped --group, a run that stopped before its first commit of them, as a crash can leave it: the next run resumes at the archive's offsets, or the group's offsets expired): their committed and lag columns are left empty"
        );
    }
    // Looked up, not scanned: a slice's `contains` per row would take
    // time in the square of the partitions.
    let asked: std::collections::BTreeSet<&TopicPartition> = tps.iter().collect();
    for r in rows.iter_mut() {
        let tp = TopicPartition::new(&r.topic, r.partition);
        r.committed = committed.offsets.get(&tp).cloned();
        r.kafka_committed = r.committed.as_ref().map(|c| c.offset);
        r.committed_by = r
            .committed
            .as_ref()
            .and_then(|c| committed_by(&c.metadata, store))
            .map(str::to_owned);
        if let Some(error) = committed.unread.get(&tp) {
            r.committed_unread = true;
            r.missing(format_args!(
                "its committed offset could not be read: {error}"
            ));
        } else if r.kafka_committed.is_none() && asked.contains(&tp) {
            r.missing("the group has no committed offset for it");
        }
    }
}

/// Kafka's figures beside the archive's: committed offsets (with a group),
/// watermarks and lags, and a row for every partition of an archived topic
/// the archive holds nothing of. A figure Kafka did not give is left empty
/// with a WARN saying why, never silently.
fn kafka_view(
    consumer: &rdkafka::consumer::BaseConsumer<CheckContext>,
    brokers: &str,
    group: Option<&str>,
    timeout: Duration,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let metadata =
        crate::librdkafka::cluster_metadata(consumer.client(), brokers, timeout, &|| false)?;
    // The archive's identity, which every row of it carries.
    let store: Option<String> = rows.iter().find_map(|r| r.store.clone());
    // The topic ids the archive recorded, which every row of the topic
    // carries.
    let topic_ids: BTreeMap<String, (Option<String>, Option<String>)> = rows
        .iter()
        .map(|r| {
            let id = (r.topic_id.clone(), r.topic_id_damage.clone());
            (r.topic.clone(), id)
        })
        .collect();
    // Partitions per archived topic, as Kafka has them.
    // Sets, not lists: looked up once per row (tens of thousands of
    // partitions made the lists' scans quadratic).
    let mut in_kafka: BTreeMap<String, std::collections::BTreeSet<i32>> = BTreeMap::new();
    for r in rows.iter() {
        in_kafka.entry(r.topic.clone()).or_default();
    }
    let mut listed = std::collections::BTreeSet::new();
    // Partitions without a leader: a watermark request for one waits out
    // the whole timeout, so none is made.
    let mut leaderless = std::collections::BTreeSet::new();
    // Each partition's leader: one that did not answer in time is not
    // asked again, for its other partitions.
    let mut leader_of: BTreeMap<(String, i32), i32> = BTreeMap::new();
    // Why a whole topic has no Kafka figures.
    let mut topic_missing: BTreeMap<String, String> = BTreeMap::new();
    for t in metadata.topics() {
        if let Some(ps) = in_kafka.get_mut(t.name()) {
            listed.insert(t.name().to_owned());
            match t.error() {
                // Listed whole with no partition (a topic being deleted or
                // created): said, as any other missing figure is (until
                // the night of 2026-12-04 its rows were left empty without
                // a word).
                None if t.partitions().is_empty() => {
                    tracing::warn!(
                        topic = t.name(),
                        "Kafka lists this topic with no partitions (being created or deleted?): no Kafka figures for it"
                    );
                    topic_missing.insert(
                        t.name().to_owned(),
                        "Kafka lists the topic with no partitions".into(),
                    );
                }
                None => {
                    ps.extend(t.partitions().iter().map(|p| p.id()));
                    leader_of.extend(
                        t.partitions()
                            .iter()
                            .map(|p| ((t.name().to_owned(), p.id()), p.leader())),
                    );
                    leaderless.extend(
                        t.partitions()
                            .iter()
                            .filter(|p| p.leader() < 0)
                            .map(|p| (t.name().to_owned(), p.id())),
                    );
                }
                Some(e) => {
                    tracing::warn!(
                        topic = t.name(),
                        error = ?e,
                        "Kafka answered this topic's metadata with an error: no Kafka figures for it"
                    );
                    topic_missing.insert(
                        t.name().to_owned(),
                        format!(
                            "Kafka answered the topic's metadata with {}",
                            rdkafka::error::RDKafkaErrorCode::from(e)
                        ),
                    );
                }
            }
        }
    }
    let archived: std::collections::BTreeSet<(String, i32)> = rows
        .iter()
        .map(|r| (r.topic.clone(), r.partition))
        .collect();
    for (topic, partitions) in &in_kafka {
        if !listed.contains(topic) {
            tracing::warn!(
                topic,
                brokers,
                "the archive holds this topic but Kafka does not have it (deleted?): no Kafka figures for it"
            );
            topic_missing.insert(topic.clone(), "Kafka does not have the topic".into());
        }
        for &p in partitions {
            if !archived.contains(&(topic.clone(), p)) {
                let mut r = Row::unarchived(topic, p);
                r.store = store.clone();
                (r.topic_id, r.topic_id_damage) = topic_ids[topic].clone();
                rows.push(r);
            }
        }
    }
    note_topic_ids(consumer, timeout, rows, &listed);
    for r in rows.iter_mut() {
        let ps = &in_kafka[&r.topic];
        if let Some(why) = topic_missing.get(&r.topic) {
            r.missing(why);
        } else if !ps.contains(&r.partition) {
            tracing::warn!(
                topic = %r.topic,
                partition = r.partition,
                "the archive holds this partition but Kafka's topic has no such partition (recreated with fewer?): no Kafka figures for it"
            );
            r.missing("Kafka's topic has no such partition");
        }
    }
    rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let asked = |r: &Row| {
        in_kafka
            .get(&r.topic)
            .is_some_and(|ps| ps.contains(&r.partition))
    };
    if group.is_some() {
        let tps: Vec<TopicPartition> = rows
            .iter()
            .filter(|r| asked(r))
            .map(|r| TopicPartition::new(&r.topic, r.partition))
            .collect();
        match read_committed(consumer, &tps, timeout) {
            Ok(committed) => note_committed(rows, &tps, &committed, group, store.as_deref()),
            // Failed whole: every committed column is left empty, with one
            // WARN, as a failed watermark request leaves its own; the rest
            // of the table still stands.
            Err(error) => {
                tracing::warn!(%error, group = group.unwrap_or_default(), "Kafka could not read the group's committed offsets: the committed and lag columns are left empty");
                for r in rows.iter_mut().filter(|r| asked(r)) {
                    r.committed_unread = true;
                    r.missing(format_args!(
                        "the group's committed offsets could not be read: {error}"
                    ));
                }
            }
        }
    }
    let to_ask: Vec<(TopicPartition, Option<i32>)> = rows
        .iter_mut()
        .filter(|r| asked(r))
        .filter_map(|r| {
            let key = (r.topic.clone(), r.partition);
            // Not asked: the request would wait out the timeout (before
            // 2026-12-03, a hundred leaderless partitions took a hundred).
            if leaderless.contains(&key) {
                tracing::warn!(topic = %r.topic, partition = r.partition, "the partition has no leader in Kafka's metadata: no watermarks asked for, its columns are left empty");
                r.missing("the partition has no leader: no watermarks asked for");
                return None;
            }
            let leader = leader_of.get(&key).copied();
            Some((TopicPartition::new(&r.topic, r.partition), leader))
        })
        .collect();
    let mut watermarks = read_watermarks(consumer, to_ask, timeout);
    for r in rows.iter_mut().filter(|r| asked(r)) {
        let Some(read) = watermarks.remove(&TopicPartition::new(&r.topic, r.partition)) else {
            // Not asked (no leader): said above.
            continue;
        };
        let (low, high) = match read {
            Ok(w) => w,
            Err(why) => {
                r.missing(why);
                continue;
            }
        };
        r.high_watermark = Some(high);
        r.low_watermark = Some(low);
        r.archive_lag = row_archive_lag(r);
        // A topic Kafka has under another id than the archived one: its
        // offsets are another topic's, so what they say of retention or
        // truncation is not so; its own WARN says what it is (until
        // 2026-12-06 these were said beside it; found by an audit). Judged
        // on the ids as read before the watermarks: a running archive's
        // refresh after them may record or rebind one.
        let same_topic = !r.topic_replaced();
        if let Some(durable) = r.durable_next_offset.filter(|&d| same_topic && d < low) {
            tracing::warn!(
                topic = %r.topic,
                partition = r.partition,
                low,
                durable,
                "Kafka's log starts above what the archive holds: offsets {durable}..{low} (records, or transaction markers the archive had not caught up past) left Kafka (retention) before this archive stored them, or another store archives this partition; they are not counted in the archive lag (cairn run handles them by --on-offset-out-of-range)"
            );
        }
        r.lag = r.kafka_committed.map(|c| high - c);
        // What stops `cairn run` is said whatever RUST_LOG keeps (since
        // 2026-12-06: a filter dropped it, and the table's empty columns
        // went unexplained; found by an audit).
        if let Some(durable) = r.durable_next_offset.filter(|&d| same_topic && high < d) {
            super::say_warn!(
                "{}/{}: Kafka's log ends below what the archive holds (Kafka's end {high}, the archive's next offset {durable}): the topic was deleted and recreated, or truncated (cairn run stops on it; see OPERATIONS.md, \"Where a partition resumes\")",
                r.topic,
                r.partition
            );
        }
        if let Some(committed) = r.kafka_committed.filter(|&c| high < c) {
            tracing::warn!(
                topic = %r.topic,
                partition = r.partition,
                high,
                committed,
                "Kafka's log ends below the group's committed offset (negative lag): the topic was deleted and recreated, or truncated"
            );
        }
    }
    Ok(())
}

/// The watermarks (log start, log end) of `to_ask`, each with its leader,
/// or why a partition has none (each said at WARN).
///
/// Read a leader at a time, the log starts of all its partitions in one
/// request, then their log ends in another (1,000 partitions a request at
/// most: see `retention::read_bounds_each_within`). Asked one partition at
/// a time until 2026-12-06, 10,000 partitions took 20,000 round trips:
/// 23 s with a 2 ms round trip, 0.35 s now (docs/BENCHMARKS.md). A leader that lets a request
/// time out is not asked again: the timeout bounds the wait per leader
/// (until the night of 2026-12-03 it bounded it per partition). A request
/// that failed otherwise may have failed for one partition's error
/// (librdkafka fails the whole request): the read asks its halves again,
/// down to that partition, which is then asked once more alone.
fn read_watermarks(
    consumer: &rdkafka::consumer::BaseConsumer<CheckContext>,
    to_ask: Vec<(TopicPartition, Option<i32>)>,
    timeout: Duration,
) -> BTreeMap<TopicPartition, std::result::Result<(i64, i64), String>> {
    // Alone: both requests within the one timeout, as one partition's
    // watermark query took.
    let alone =
        |tp: &TopicPartition| read_bounds_of(consumer, tp, timeout, Instant::now() + timeout);
    let mut by_leader: BTreeMap<Option<i32>, Vec<TopicPartition>> = BTreeMap::new();
    for (tp, leader) in to_ask {
        by_leader.entry(leader).or_default().push(tp);
    }
    let mut answers = BTreeMap::new();
    for (leader, tps) in by_leader {
        let leader_name = leader.map_or_else(|| "unknown".to_owned(), |l| format!("broker {l}"));
        let silent_why = format!(
            "its leader ({leader_name}) did not answer the watermark request within {} ms",
            timeout.as_millis()
        );
        let read = read_bounds_each_within(consumer, &tps, timeout);
        // Known before any partition is asked alone, whichever sorts first.
        let mut silent = read.values().any(|r| matches!(r, Err(e) if unanswered(e)));
        for (tp, got) in read {
            let (error, why) = match got {
                Ok(w) => {
                    answers.insert(tp, Ok(w));
                    continue;
                }
                Err(e) if unanswered(&e) => (e, silent_why.clone()),
                Err(e) if silent => {
                    let why = format!("no watermarks from Kafka: {e}; not asked again alone, as its leader ({leader_name}) did not answer for another partition within {} ms", timeout.as_millis());
                    (e, why)
                }
                Err(_) => match alone(&tp) {
                    Ok(w) => {
                        answers.insert(tp, Ok(w));
                        continue;
                    }
                    Err(e) if unanswered(&e) => {
                        silent = true;
                        (e, silent_why.clone())
                    }
                    Err(e) => {
                        let why = format!("no watermarks from Kafka: {e}");
                        (e, why)
                    }
                },
            };
            tracing::warn!(topic = %tp.topic, partition = tp.partition, leader = %leader_name, %error, "{why}: its columns are left empty");
            answers.insert(tp, Err(why));
        }
    }
    answers
}

/// Kafka's topic id of each topic of `rows` Kafka lists (`listed`), into
/// the rows, with a WARN for a topic whose id is not the one archived (a
/// run would stop at its assignment: OPERATIONS.md, "Where a partition
/// resumes", rule 0), whose rows get no archive lag, and one for the
/// topics whose id could not be read.
fn note_topic_ids(
    consumer: &rdkafka::consumer::BaseConsumer<CheckContext>,
    timeout: Duration,
    rows: &mut [Row],
    listed: &std::collections::BTreeSet<String>,
) {
    use crate::task::KafkaTopicId;
    let topics: Vec<String> = listed.iter().cloned().collect();
    let mut unread = Vec::new();
    let read = crate::topic_ids::describe(consumer.client(), &topics, timeout);
    for (topic, d) in &read {
        if let KafkaTopicId::Unread(why) = d {
            unread.push(format!("{topic} ({why})"));
        }
    }
    if !unread.is_empty() {
        tracing::warn!(topics = %crate::selection::first_few(unread.into_iter()), "Kafka's topic ids of these topics could not be read: not compared with the archive's");
    }
    let mut warned = std::collections::BTreeSet::new();
    for r in rows.iter_mut() {
        let answer = read.get(&r.topic);
        r.kafka_topic_id = match answer {
            Some(KafkaTopicId::Id(id)) => Some(id.to_string()),
            _ => None,
        };
        if r.topic_id_damage.is_some() {
            r.missing("the archive's topic id is damaged: not compared with Kafka's (cairn run stops on it)");
        }
        // Recorded, and nothing to compare it with: a run stops on it.
        if r.topic_id.is_some() {
            match answer {
                Some(KafkaTopicId::NoId) => {
                    if warned.insert(r.topic.clone()) {
                        super::say_warn!("topic {}: Kafka gives no topic id for this topic (brokers before Kafka 2.8; or this status's own -X api.version.request=false, which cairn run refuses), and the archive recorded one: it cannot be told from a recreated topic, and cairn run against such brokers would stop at its assignment (--rebind-topic takes it unchecked)", r.topic);
                    }
                    r.missing("Kafka gives no topic id: not compared with the archive's");
                }
                Some(KafkaTopicId::Unread(why)) => {
                    r.missing(format_args!("Kafka's topic id could not be read ({why}): not compared with the archive's"));
                }
                _ => {}
            }
        }
        if !r.topic_replaced() {
            continue;
        }
        if warned.insert(r.topic.clone()) {
            super::say_warn!(
                "topic {}: Kafka's topic id is not the one archived (archived: {}, Kafka's: {}): the topic was deleted and created again, or these brokers are another cluster's. Its offsets name other records than the archive's: cairn run would stop at its assignment, and no archive lag is shown for it",
                r.topic,
                r.topic_id.as_deref().unwrap_or_default(),
                r.kafka_topic_id.as_deref().unwrap_or_default()
            );
        }
        r.missing(TOPIC_REPLACED);
    }
}

/// Why a row whose topic Kafka has under another id has no archive lag.
const TOPIC_REPLACED: &str =
    "Kafka's topic id is not the one archived: no archive lag (its offsets name another topic's records)";

/// Why a row has no archive lag ([`row_archive_lag`]), in its
/// `kafka_missing`; taken out again by [`refresh`] once the lag is known.
const NO_ARCHIVE_LAG: &str =
    "no archive lag: it counts from the committed offset, which could not be read";

/// A row's archive lag, from its watermarks; `None` (said in
/// `kafka_missing`) for a partition the archive holds nothing of whose
/// committed offset could not be read: where a run would start it is not
/// known (until the night of 2026-12-04 it was counted from the log start,
/// without a word).
fn row_archive_lag(r: &mut Row) -> Option<i64> {
    let (low, high) = (r.low_watermark?, r.high_watermark?);
    // Said in `kafka_missing` once, by `note_topic_ids`.
    if r.topic_replaced() {
        return None;
    }
    if r.durable_next_offset.is_none() && r.committed_unread {
        r.missing(NO_ARCHIVE_LAG);
        return None;
    }
    let from = resume_from(
        r.durable_next_offset,
        r.committed.as_ref(),
        r.store.as_deref(),
    );
    Some(archive_lag(low, high, from))
}

/// Who made a commit whose metadata is `metadata`, for the `committed_by`
/// column: `None` without this archive's identity to compare.
fn committed_by(metadata: &str, store: Option<&str>) -> Option<&'static str> {
    let store = store?;
    Some(
        match metadata.strip_prefix(crate::task::STORE_IDENTITY_PREFIX) {
            Some(id) if id == store => THIS_ARCHIVE,
            Some(_) => ANOTHER_STORE,
            None => NOT_CAIRN,
        },
    )
}

/// `committed_by`'s values.
const THIS_ARCHIVE: &str = "this archive";
const ANOTHER_STORE: &str = "another store";
const NOT_CAIRN: &str = "not cairn";

/// Where a run of the archive `store` would resume a partition, by the
/// rule its assignment follows (`rebalance::resume_point`): the archive's
/// next offset, unless Kafka's committed offset is past it and was
/// committed by another store or another tool (another member archived
/// what lies between); for a partition the archive holds nothing of,
/// Kafka's committed offset, unless this archive committed it itself (it
/// lost those records: the run starts at the log start, `None`). With no
/// identity to compare (an older run's answer), the archive's offset wins,
/// as before the night of 2026-12-04, when status did not tell them apart.
fn resume_from(
    durable: Option<i64>,
    committed: Option<&crate::offsets::Committed>,
    store: Option<&str>,
) -> Option<i64> {
    use crate::rebalance::ResumePoint;
    let Some(store) = store else {
        return durable.or(committed.map(|c| c.offset));
    };
    let identity = crate::task::store_identity(store);
    match crate::rebalance::resume_point(durable, committed, Some(&identity)) {
        ResumePoint::Archive(o) | ResumePoint::Kafka(o) => Some(o),
        ResumePoint::Lost { archive, .. } => archive,
        ResumePoint::Nowhere => None,
    }
}

/// A running archive's figures asked for again once Kafka's were read
/// (`newer`), into `rows`: a committed offset this archive's run made,
/// read before them, is then never shown above the durable one (it was at
/// most the durable offset when it was read, and that only grows; one
/// another member made for its own store, or one a store restored from an
/// older backup is behind, can still be above), and the archive lag counts
/// from the newer durable offset, never below 0 unless it was so before
/// (a log that ends below the archive). Until the night of 2026-12-04 the
/// archive's figures were the ones read before Kafka's, and a busy run
/// showed a committed offset past its durable one and a lag it no longer
/// had. A partition first archived between the two reads (a run's first
/// assignment of it; of a topic the first read had no row of, or one
/// `--brokers` did not list) is added as the newer answer has it, its
/// Kafka figures said not read (`kafka_unread`: why none were, if none
/// were) (until 2026-12-06 it was left out; found in an audit).
fn refresh(rows: &mut Vec<Row>, newer: Vec<Row>, kafka_unread: Option<&str>) {
    let mut newer: BTreeMap<(String, i32), Row> = newer
        .into_iter()
        .map(|n| ((n.topic.clone(), n.partition), n))
        .collect();
    for r in rows.iter_mut() {
        let Some(n) = newer.remove(&(r.topic.clone(), r.partition)) else {
            continue;
        };
        // Archived since the first read: its lag counts from the archive
        // now, and the note that it had none goes.
        if r.durable_next_offset.is_none() && n.durable_next_offset.is_some() {
            r.unsay(NO_ARCHIVE_LAG);
        }
        (r.first_offset, r.durable_next_offset, r.records, r.bytes) =
            (n.first_offset, n.durable_next_offset, n.records, n.bytes);
        // Recorded or rebound since the first read (a run's assignment):
        // the newer word, compared with Kafka's id read between.
        let was_replaced = r.topic_replaced();
        (r.topic_id, r.topic_id_damage) = (n.topic_id, n.topic_id_damage);
        if was_replaced && !r.topic_replaced() {
            r.unsay(TOPIC_REPLACED);
        } else if !was_replaced && r.topic_replaced() {
            tracing::warn!(topic = %r.topic, "the running archive recorded a topic id since Kafka's was read, and they differ: no archive lag is shown for it");
            r.missing(TOPIC_REPLACED);
            r.archive_lag = None;
        }
        // Below 0 only when the first read was (a log that ends below the
        // archive: warned about then); otherwise the run archived past the
        // high watermark read before (until the night of 2026-12-04 a row
        // with no lag at the first read could show one below 0 here).
        let before = r.archive_lag;
        if let Some(now) = row_archive_lag(r) {
            r.archive_lag = Some(if before.is_some_and(|b| b < 0) {
                now
            } else {
                now.max(0)
            });
        }
    }
    if !newer.is_empty() {
        for mut n in newer.into_values() {
            n.missing(kafka_unread.unwrap_or(ARCHIVED_SINCE));
            rows.push(n);
        }
        rows.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    }
}

/// Why a row [`refresh`] added has no Kafka figures.
const ARCHIVED_SINCE: &str =
    "first archived after Kafka's figures were read: run status again for them";

/// What Kafka holds that the archive has not stored yet: from where a run
/// would resume the partition ([`resume_from`]; the log start when that is
/// nowhere), but not below the log start, whose records can no longer be
/// archived (before the night of 2026-12-04 they were counted, so a lag
/// that could never close was shown, where a run's progress line showed
/// none). Negative when the log ends below where the archive goes on (a
/// recreated or truncated topic: warned about).
fn archive_lag(low: i64, high: i64, from: Option<i64>) -> i64 {
    high - from.unwrap_or(low).max(low)
}

#[cfg(test)]
mod tests {
    use super::{
        archive_lag, committed_by, committed_elsewhere, refresh, resume_from, row_archive_lag,
        summary_damage, table, Row, ANOTHER_STORE, NOT_CAIRN, THIS_ARCHIVE, TOPIC_REPLACED,
    };

    /// Every column of the table lines up with its header, a topic name
    /// longer than the column's usual width and a count wider than its
    /// included.
    #[test]
    fn the_table_s_columns_line_up_whatever_their_widths() {
        let long = "a-topic-name-of-fifty-six-characters-for-the-table-width";
        let mut rows = vec![Row::unarchived("t", 0), Row::unarchived(long, 12)];
        (rows[1].records, rows[1].bytes) = (7, 123_456_789_012_345);
        rows[1].durable_next_offset = Some(i64::MAX);
        let lines = table(&rows);
        assert_eq!(lines.len(), 3);
        // Right-aligned columns end where their header ends.
        let ends = |line: &str| -> Vec<usize> {
            let mut ends = Vec::new();
            let mut prev = ' ';
            for (i, c) in line.char_indices() {
                if c == ' ' && prev != ' ' {
                    ends.push(i);
                }
                prev = c;
            }
            ends.push(line.len());
            ends
        };
        let header = ends(&lines[0]);
        for line in &lines[1..] {
            // The first column is left-aligned: the rest end together.
            assert_eq!(ends(line)[1..], header[1..], "{lines:#?}");
        }
        assert!(lines[2].starts_with(&format!("{long} ")), "{lines:#?}");
        assert!(lines[2].contains(&format!(" {}", i64::MAX)), "{lines:#?}");
    }

    /// A topic id the running archive recorded between the two reads is
    /// the one compared with Kafka's: rebound to Kafka's, the row gets its
    /// archive lag back and loses the note; recorded as another, it loses
    /// its lag and gets the note.
    #[test]
    fn a_topic_id_recorded_between_the_reads_is_compared_again() {
        let archived = |id: Option<&str>| {
            let mut r = Row::unarchived("t", 0);
            (r.first_offset, r.durable_next_offset, r.records) = (Some(0), Some(100), 100);
            r.topic_id = id.map(str::to_owned);
            r
        };
        // Replaced at the first read, rebound since.
        let mut r = archived(Some("old"));
        (r.low_watermark, r.high_watermark) = (Some(0), Some(150));
        r.kafka_topic_id = Some("new".into());
        r.missing(TOPIC_REPLACED);
        assert_eq!(row_archive_lag(&mut r), None);
        let mut rows = vec![r];
        refresh(&mut rows, vec![archived(Some("new"))], None);
        assert_eq!(rows[0].archive_lag, Some(50));
        assert_eq!(rows[0].kafka_missing, None);
        // Not recorded at the first read, recorded as another since.
        let mut r = archived(None);
        (r.low_watermark, r.high_watermark) = (Some(0), Some(150));
        r.kafka_topic_id = Some("new".into());
        r.archive_lag = row_archive_lag(&mut r);
        assert_eq!(r.archive_lag, Some(50));
        let mut rows = vec![r];
        refresh(&mut rows, vec![archived(Some("other"))], None);
        assert_eq!(rows[0].archive_lag, None);
        assert_eq!(rows[0].kafka_missing.as_deref(), Some(TOPIC_REPLACED));
    }

    /// A row's archive figures that no sound summary gives (more records
    /// than offsets, payload bytes in no record) are damage; gaps, an
    /// emptied partition and an advance past offsets with no record are
    /// not.
    #[test]
    fn figures_that_cannot_be_true_together_are_damage() {
        let row = |first, next, records, bytes| {
            let mut r = Row::unarchived("t", 3);
            (r.first_offset, r.durable_next_offset, r.records, r.bytes) =
                (Some(first), Some(next), records, bytes);
            r
        };
        // Sound: gaps in the offsets, an emptied partition, an advance.
        for r in [
            row(0, 10, 10, 99),
            row(0, 10, 3, 5),
            row(7, 7, 0, 0),
            row(0, 50, 0, 0),
        ] {
            assert_eq!(summary_damage(&r), None, "{r:?}");
        }
        assert_eq!(
            summary_damage(&row(0, 10, 11, 5)).as_deref(),
            Some("partition summary t/3: 11 records between offsets 0 and 10, more than the 10 offsets there")
        );
        assert_eq!(
            summary_damage(&row(10, 10, 0, 7)).as_deref(),
            Some("partition summary t/3: 7 payload bytes in no record")
        );
        assert_eq!(summary_damage(&Row::unarchived("t", 0)), None);
    }

    /// A running archive's newer figures replace the older ones: the
    /// committed offset read between them is then at most the durable one,
    /// and the lag counts from the newer durable offset, never below 0
    /// when it was not before.
    #[test]
    fn a_running_archives_newer_figures_replace_the_older() {
        let mut r = Row::unarchived("t", 0);
        (r.first_offset, r.durable_next_offset, r.records) = (Some(0), Some(100), 100);
        (r.low_watermark, r.high_watermark, r.kafka_committed) = (Some(0), Some(150), Some(120));
        r.archive_lag = row_archive_lag(&mut r);
        assert_eq!(r.archive_lag, Some(50));
        let mut newer = Row::unarchived("t", 0);
        (newer.first_offset, newer.durable_next_offset, newer.records) = (Some(0), Some(160), 160);
        let mut rows = vec![r];
        let mut added = Row::unarchived("a", 0);
        (added.first_offset, added.durable_next_offset, added.records) = (Some(0), Some(5), 5);
        refresh(&mut rows, vec![newer, added.clone()], None);
        // A topic first archived between the reads is added, in its place
        // among the others, said.
        assert_eq!((rows.len(), rows[0].topic.as_str()), (2, "a"), "{rows:?}");
        assert_eq!(rows[0].records, 5);
        assert_eq!(
            rows[0].kafka_missing.as_deref(),
            Some(super::ARCHIVED_SINCE)
        );
        // When Kafka could not be read at all, it says that instead.
        let mut unread = vec![Row::unarchived("t", 0)];
        refresh(
            &mut unread,
            vec![added],
            Some("could not read Kafka's figures: down"),
        );
        assert_eq!(
            unread[0].kafka_missing.as_deref(),
            Some("could not read Kafka's figures: down")
        );
        let r = &rows[1];
        assert_eq!(r.durable_next_offset, Some(160));
        assert!(r.kafka_committed <= r.durable_next_offset);
        assert_eq!(r.records, 160);
        // Archived past the high watermark read before: 0, not -10.
        assert_eq!(r.archive_lag, Some(0));
    }

    /// A partition the archive holds nothing of, whose committed offset
    /// could not be read, has no archive lag, and says why.
    #[test]
    fn no_archive_lag_without_the_committed_offset_it_counts_from() {
        let mut r = Row::unarchived("t", 0);
        (r.low_watermark, r.high_watermark, r.committed_unread) = (Some(0), Some(100), true);
        assert_eq!(row_archive_lag(&mut r), None);
        assert!(r
            .kafka_missing
            .as_deref()
            .is_some_and(|m| m.contains("no archive lag")));
        // Held records: the lag counts from the archive, read or not.
        let mut held = Row::unarchived("t", 0);
        (
            held.low_watermark,
            held.high_watermark,
            held.committed_unread,
        ) = (Some(0), Some(100), true);
        held.durable_next_offset = Some(40);
        assert_eq!(row_archive_lag(&mut held), Some(60));
        // Archived between a running archive's two answers: the lag is the
        // archive's, and the note that there was none goes.
        r.archive_lag = None;
        let mut newer = Row::unarchived("t", 0);
        newer.durable_next_offset = Some(40);
        let mut rows = vec![r];
        refresh(&mut rows, vec![newer], None);
        assert_eq!(rows[0].archive_lag, Some(60));
        assert_eq!(rows[0].kafka_missing, None);
        // Archived past the high watermark read before, with no lag at the
        // first read: 0, not below (a negative lag means a log that ends
        // below the archive, which the first read would have shown).
        let mut r = Row::unarchived("t", 0);
        (r.low_watermark, r.high_watermark, r.committed_unread) = (Some(0), Some(100), true);
        r.archive_lag = row_archive_lag(&mut r);
        assert_eq!(r.archive_lag, None);
        let mut newer = Row::unarchived("t", 0);
        newer.durable_next_offset = Some(130);
        let mut rows = vec![r];
        refresh(&mut rows, vec![newer], None);
        assert_eq!(rows[0].archive_lag, Some(0));
    }

    #[test]
    fn archive_lag_counts_from_where_a_run_would_start_within_the_log() {
        // `by`: the commit's metadata (`None`: no identity to compare, an
        // older run's answer).
        const STORE: &str = "0123456789abcdef0123456789abcdef";
        let lag = |low, high, durable, committed: Option<i64>, by: Option<&str>| {
            let committed = committed.map(|offset| crate::offsets::Committed {
                offset,
                metadata: by.unwrap_or_default().to_owned(),
            });
            let store = by.map(|_| STORE);
            archive_lag(low, high, resume_from(durable, committed.as_ref(), store))
        };
        let mine = crate::task::store_identity(STORE);
        let (ours, other, tool) = (
            Some(mine.as_str()),
            Some("cairn-store:ffffffffffffffffffffffffffffffff"),
            Some(""),
        );
        // Archived up to 100 of a log 0..120.
        assert_eq!(lag(0, 120, Some(100), None, None), 20);
        // The log ends below the archive: negative, as warned.
        assert_eq!(lag(0, 20, Some(50), Some(10), ours), -30);
        // Records 100..150 aged out of Kafka before they were archived: they
        // can never be, and are not counted.
        assert_eq!(lag(150, 170, Some(100), Some(160), ours), 20);
        // Nothing archived: from the group's committed offset, if any,
        // else the log start; never below the log start.
        assert_eq!(lag(0, 10, None, Some(4), other), 6);
        assert_eq!(lag(3, 10, None, None, None), 7);
        assert_eq!(lag(5, 10, None, Some(2), tool), 5);
        // Another store, or another tool, committed past the archive: a
        // run resumes there (another member archived what lies between),
        // so the lag counts from it (since the night of 2026-12-04; before,
        // from the archive's offset, a lag that never closed).
        assert_eq!(lag(0, 1_000, Some(100), Some(900), other), 100);
        assert_eq!(lag(0, 1_000, Some(100), Some(900), tool), 100);
        // This archive's own commit past what it holds (restored from an
        // older copy): the run resumes at the archive's offset; with
        // nothing of the partition held, at the log start.
        assert_eq!(lag(0, 1_000, Some(100), Some(900), ours), 900);
        assert_eq!(lag(0, 1_000, None, Some(900), ours), 1_000);
        // No identity to compare (an older run's answer): the archive's
        // offset, as before.
        assert_eq!(lag(0, 1_000, Some(100), Some(900), None), 900);
    }

    /// A commit's metadata says whose it is, against the archive's
    /// identity; without one, nothing is said.
    #[test]
    fn committed_by_reads_the_commits_metadata() {
        let id = "0123456789abcdef0123456789abcdef";
        let ours = format!("cairn-store:{id}");
        assert_eq!(committed_by(&ours, Some(id)), Some(THIS_ARCHIVE));
        assert_eq!(
            committed_by("cairn-store:ffffffffffffffffffffffffffffffff", Some(id)),
            Some(ANOTHER_STORE)
        );
        assert_eq!(committed_by("", Some(id)), Some(NOT_CAIRN));
        assert_eq!(committed_by(&ours, None), None);
    }

    /// The table says of a committed offset this archive did not commit
    /// whose it is, and where a run of this archive resumes; of its own
    /// commits, nothing.
    #[test]
    fn a_commit_not_this_archives_is_said_under_the_table() {
        let id = "0123456789abcdef0123456789abcdef";
        let row = |durable: Option<i64>, committed: i64, metadata: &str| {
            let mut r = Row::unarchived("t", 0);
            r.durable_next_offset = durable;
            r.store = Some(id.to_owned());
            r.kafka_committed = Some(committed);
            r.committed_by = committed_by(metadata, Some(id)).map(str::to_owned);
            r.committed = Some(crate::offsets::Committed {
                offset: committed,
                metadata: metadata.to_owned(),
            });
            r
        };
        let ours = format!("cairn-store:{id}");
        assert!(committed_elsewhere(&[row(Some(40), 40, &ours)]).is_empty());
        assert_eq!(
            committed_elsewhere(&[row(Some(40), 90, "cairn-store:ffffffffffffffffffffffffffffffff")]),
            ["(t/0: committed 90 by another cairn archive (another member of the group archived it, or the group is another archive's): a run of this archive resumes at 90)"]
        );
        assert_eq!(
            committed_elsewhere(&[row(Some(40), 30, "")]),
            ["(t/0: committed 30 by no cairn archive (another tool, or a member without an identity): a run of this archive resumes at 40)"]
        );
    }
}

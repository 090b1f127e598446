//! The broker, the topics, and the pre-produced records.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cairn_engine::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use super::Args;

/// librdkafka's mock cluster keeps the newest 5 MiB or 100 000 records per
/// partition (rdkafka_mock.c); stay well inside both.
const MOCK_PARTITION_BYTES: u64 = 4 << 20;
const MOCK_PARTITION_RECORDS: u64 = 90_000;
/// Bytes the mock cluster stores per record beyond its value (record
/// overhead in a v2 batch), measured loosely; errs on the large side.
const RECORD_OVERHEAD_BYTES: u64 = 24;

pub enum Broker {
    Mock {
        child: Child,
        brokers: String,
        sizes: Vec<usize>,
    },
    External {
        brokers: String,
        run: String,
    },
}

impl Broker {
    pub fn start(args: &Args) -> Result<Broker, String> {
        if let Some(b) = &args.brokers {
            // The clock too: a shared broker keeps the topics of earlier
            // runs, and a rerun in a fresh container may have the same pid.
            let run = format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            );
            for &size in &args.record_bytes {
                create_topic(b, &format!("p2c-{run}-{size}"), args.partitions)?;
            }
            return Ok(Broker::External {
                brokers: b.clone(),
                run,
            });
        }
        let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
        let mut cmd = Command::new(exe);
        cmd.arg("mock-broker");
        for &size in &args.record_bytes {
            cmd.args(["--topic", &format!("p2c-{size}:{}", args.partitions)]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start mock broker: {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .map_err(|e| format!("mock broker: {e}"))?;
        let brokers = line
            .trim()
            .strip_prefix("bootstrap.servers=")
            .ok_or_else(|| format!("mock broker said {line:?}"))?
            .to_owned();
        Ok(Broker::Mock {
            child,
            brokers,
            sizes: args.record_bytes.clone(),
        })
    }

    pub fn brokers(&self) -> &str {
        match self {
            Broker::Mock { brokers, .. } | Broker::External { brokers, .. } => brokers,
        }
    }

    /// The mock broker's process, if this harness started one.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Broker::Mock { child, .. } => Some(child.id()),
            Broker::External { .. } => None,
        }
    }

    pub fn is_mock(&self) -> bool {
        matches!(self, Broker::Mock { .. })
    }

    pub fn topic_for(&self, size: usize) -> String {
        match self {
            Broker::Mock { sizes, .. } => {
                debug_assert!(sizes.contains(&size));
                format!("p2c-{size}")
            }
            Broker::External { run, .. } => format!("p2c-{run}-{size}"),
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Broker::Mock { child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let admin: AdminClient<_> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("admin client: {e}"))?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let res = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    for r in res {
        r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
    }
    Ok(())
}

/// How many records of `size` bytes fit, and a note if fewer than asked.
pub fn capacity(records: u64, size: usize, partitions: i32, mock: bool) -> (u64, Option<String>) {
    if !mock {
        return (records, None);
    }
    let per_partition =
        (MOCK_PARTITION_BYTES / (size as u64 + RECORD_OVERHEAD_BYTES)).min(MOCK_PARTITION_RECORDS);
    let fits = per_partition * partitions as u64;
    if records <= fits {
        (records, None)
    } else {
        (
            fits,
            Some(format!(
                "{records} records of {size} B do not fit the mock cluster's 5 MiB / 100k records per partition over {partitions} partitions; measuring {fits}"
            )),
        )
    }
}

/// A record's value: printable, newline-free (kcat's output is checked by
/// size), and different per record.
pub fn value(i: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|j| b'a' + ((i as usize).wrapping_mul(31).wrapping_add(j) % 26) as u8)
        .collect()
}

/// Produce `records` values round-robin over the partitions; return each
/// partition's end offset, after checking nothing was deleted.
pub fn produce(
    brokers: &str,
    topic: &str,
    records: u64,
    size: usize,
    partitions: i32,
) -> Result<BTreeMap<TopicPartition, i64>, String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    let t0 = std::time::Instant::now();
    for i in 0..records {
        let v = value(i, size);
        let p = (i % partitions as u64) as i32;
        loop {
            match producer.send(BaseRecord::<(), [u8]>::to(topic).partition(p).payload(&v)) {
                Ok(()) => break,
                Err((e, _))
                    if e.rdkafka_error_code()
                        == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) =>
                {
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(format!("produce: {e}")),
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .map_err(|e| format!("produce flush: {e}"))?;
    eprintln!(
        "   produced {records} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut ends = BTreeMap::new();
    let mut total = 0;
    for p in 0..partitions {
        let (low, high) = c
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(|e| format!("watermarks {topic}/{p}: {e}"))?;
        if low != 0 {
            return Err(format!(
                "{topic}/{p}: the broker deleted records (low watermark {low}); use more partitions or fewer records"
            ));
        }
        total += high;
        ends.insert(TopicPartition::new(topic, p), high);
    }
    if total as u64 != records {
        return Err(format!(
            "{topic}: {total} records on the broker, {records} produced (topic not fresh?)"
        ));
    }
    Ok(ends)
}

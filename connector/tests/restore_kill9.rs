//! kill -9 during `cairn restore`: the restore runs as a child process
//! against `cairn mock-broker` (or `CAIRN_TEST_BROKERS`), with
//! `--offset-header`, and dies at seeded moments: aborted right after
//! handing its n-th record to librdkafka (`restore-after-send`), right after
//! the brokers acknowledged its n-th record (`restore-after-ack`), or
//! SIGKILLed once it has queued a seeded number of whole partitions (while
//! their records are in flight). Each death leaves records queued, in
//! flight or written without their acknowledgement read.
//!
//! After every death each target partition must hold a prefix of its
//! archived partition, in order, with nothing twice; the next round runs
//! the same command with `--resume`. At the end, a last `--resume` must
//! complete the restore, and the target must hold every archived record
//! exactly once, byte for byte, each with its archived offset in the header.
//!
//! `CAIRN_CRASH_ROUNDS` sets the most deaths per restore (default 5; a
//! restore that completes sooner ends its rounds), `CAIRN_RESTORE_CYCLES`
//! how many whole restores run, each into a fresh topic (default 1), and
//! `CAIRN_SEED` replays.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cairn_connector::cli::demo::{demo_record, DEMO_PARTITIONS};
use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use common::{env_count, seed, KillOnDrop, TestBroker, CAIRN};
use rand::{Rng, SeedableRng};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

/// The topic in the archive, and the one restored into.
const ARCHIVED: &str = "k9r-archived";
const TARGET: &str = "k9r";
const OFFSET_HEADER: &str = "cairn.offset";
/// Records archived (demo records, spread over `DEMO_PARTITIONS`).
const RECORDS: u64 = 24_000;

/// An archive of the first `RECORDS` demo records, in `ARCHIVED`.
fn archive(dir: &std::path::Path) {
    let engine = Engine::open(EngineConfig::new(dir)).unwrap();
    let mut by_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    for i in 0..RECORDS {
        let (p, r) = demo_record(i);
        by_partition.entry(p).or_default().push(r);
    }
    for (p, records) in by_partition {
        for chunk in records.chunks(1_000) {
            engine
                .append(&[RecordBatch {
                    tp: TopicPartition::new(ARCHIVED, p),
                    records: chunk.to_vec(),
                }])
                .unwrap();
        }
    }
}

/// What a consumer of the target reads, per partition, in order.
struct Restored {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    timestamp: Option<i64>,
}

/// Every record the target holds, per partition.
fn read_target(brokers: &str, topic: &str) -> BTreeMap<i32, Vec<Restored>> {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "k9r-check")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    let mut highs = BTreeMap::new();
    for p in 0..DEMO_PARTITIONS {
        let (low, high) = c
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(low, 0, "partition {p}: records deleted from the target");
        highs.insert(p, high as usize);
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut got: BTreeMap<i32, Vec<Restored>> =
        (0..DEMO_PARTITIONS).map(|p| (p, Vec::new())).collect();
    // A bound on a hung read, not a timing: the records are all there.
    let deadline = Instant::now() + Duration::from_secs(120);
    while got.iter().any(|(p, v)| v.len() < highs[p]) {
        assert!(
            Instant::now() < deadline,
            "read {:?} of {highs:?}",
            got.iter().map(|(p, v)| (p, v.len())).collect::<Vec<_>>()
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.unwrap();
        let headers = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        got.get_mut(&m.partition()).unwrap().push(Restored {
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
            timestamp: m.timestamp().to_millis(),
        });
    }
    got
}

/// Each target partition holds its archived partition's first records, in
/// order, each once and byte for byte, with its archived offset in the
/// header. Returns the records restored.
fn check_prefix(got: &BTreeMap<i32, Vec<Restored>>, when: &str) -> u64 {
    let mut total = 0;
    for (p, records) in got {
        for (o, r) in records.iter().enumerate() {
            let (wp, want) = demo_record(o as u64 * DEMO_PARTITIONS as u64 + *p as u64);
            assert_eq!(wp, *p);
            let mut headers: Vec<(String, Option<Vec<u8>>)> = want
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect();
            headers.push((OFFSET_HEADER.into(), Some(o.to_string().into_bytes())));
            let at = format!("{when}: target partition {p}, record {o}");
            // The header first: it says which archived record this is, so a
            // duplicate or a gap reads as one.
            assert_eq!(
                r.headers.last(),
                headers.last(),
                "{at}: a duplicate or a gap"
            );
            assert_eq!(r.headers, headers, "{at}: headers");
            assert_eq!(r.key, want.key, "{at}: key");
            assert_eq!(r.value, want.value, "{at}: value");
            assert_eq!(r.timestamp, Some(want.timestamp_ms), "{at}: timestamp");
        }
        total += records.len() as u64;
    }
    total
}

/// How a round's child is to die.
enum Death {
    /// `CAIRN_ABORT_AT=<point>:<n>`.
    Abort(&'static str, u64),
    /// SIGKILL after its n-th "partition handed to the producer" line.
    Kill(u32),
}

/// `cairn --log-format json restore` of the archive into `target`,
/// `--resume` if asked.
fn restore_child(
    data: &str,
    mb: &TestBroker,
    target: &str,
    resume: bool,
    abort_at: Option<String>,
) -> KillOnDrop {
    let mut cmd = Command::new(CAIRN);
    cmd.args(["--log-format", "json", "restore", "--data", data])
        .args(["--brokers", &mb.brokers])
        .args(["--rename", &format!("{ARCHIVED}={target}")])
        .args(["--offset-header", OFFSET_HEADER]);
    if resume {
        cmd.arg("--resume");
    }
    match abort_at {
        Some(a) => cmd.env("CAIRN_ABORT_AT", a),
        None => cmd.env_remove("CAIRN_ABORT_AT"),
    };
    cmd.env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    KillOnDrop::spawn(&mut cmd)
}

#[test]
fn a_restore_killed_at_seeded_moments_resumes_exactly_once() {
    let seed = seed("restore_kill9");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rounds = env_count("CAIRN_CRASH_ROUNDS", 5);
    let cycles = env_count("CAIRN_RESTORE_CYCLES", 1);
    let topics: Vec<String> = (0..cycles)
        .map(|c| format!("{TARGET}-{c}:{DEMO_PARTITIONS}"))
        .collect();
    let mb = TestBroker::start(&topics.iter().map(String::as_str).collect::<Vec<_>>());
    let data = tempfile::tempdir().unwrap();
    archive(data.path());
    let data = data.path().to_str().unwrap().to_owned();
    let mut deaths: BTreeMap<&str, u32> = BTreeMap::new();
    let mut rounds_run = 0;
    for cycle in 0..cycles {
        let target = mb.topic(&format!("{TARGET}-{cycle}"));
        rounds_run += restore_cycle(&mut rng, &mb, &data, &target, rounds, &mut deaths);
    }
    eprintln!(
        "restore_kill9: {cycles} restores of {RECORDS} records, each exactly once, through {rounds_run} deaths (CAIRN_SEED={seed}): {deaths:?}"
    );
}

/// Restore the whole archive into `target` (empty) through at most
/// `rounds` seeded deaths, checking the target after each, and a last
/// `--resume` that must complete it. Returns the rounds run.
fn restore_cycle(
    rng: &mut impl Rng,
    mb: &TestBroker,
    data: &str,
    target: &str,
    rounds: u32,
    deaths: &mut BTreeMap<&'static str, u32>,
) -> u32 {
    let mut restored = 0u64;
    let mut rounds_run = 0;
    for round in 0..rounds {
        let left = RECORDS - restored;
        if left == 0 {
            break;
        }
        // Small steps, so that rounds go on dying part-way for a while.
        let n = rng.gen_range(1..=left.min(1_000));
        let death = match rng.gen_range(0..3) {
            0 => Death::Abort("restore-after-send", n),
            1 => Death::Abort("restore-after-ack", n),
            _ => Death::Kill(rng.gen_range(1..=DEMO_PARTITIONS as u32)),
        };
        let abort_at = match &death {
            Death::Abort(point, n) => Some(format!("{point}:{n}")),
            Death::Kill(_) => None,
        };
        rounds_run += 1;
        let mut child = restore_child(data, mb, target, round > 0, abort_at);
        let mut sent = 0;
        let mut tail: Vec<String> = Vec::new();
        for line in BufReader::new(child.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok)
        {
            sent += u32::from(line.contains(r#""message":"partition handed to the producer"#));
            tail.push(line);
            if matches!(death, Death::Kill(k) if sent == k) {
                child.kill().unwrap(); // SIGKILL, records in flight
                break;
            }
        }
        let status = child.wait().unwrap();
        let at = format!("{target} round {round}");
        let how = match &death {
            // After the last partition was queued, the restore may finish
            // before the SIGKILL lands.
            Death::Kill(k) if status.success() && sent == DEMO_PARTITIONS as u32 => {
                *deaths.entry("finished first").or_default() += 1;
                format!("finished before the SIGKILL after {k} partitions queued")
            }
            Death::Kill(k) => {
                assert!(
                    status.signal() == Some(9),
                    "{at}: the restore ended on its own before it queued {k} partitions ({status:?}):\n{}",
                    tail.join("\n")
                );
                *deaths.entry("SIGKILL").or_default() += 1;
                format!("SIGKILL after {k} partitions queued")
            }
            Death::Abort(point, n) => {
                // SIGABRT, from the crash point (it says so on stderr).
                assert!(
                    status.signal() == Some(6) && tail.iter().any(|l| l.contains("CAIRN_ABORT_AT")),
                    "{at}: the restore did not reach {point}:{n} ({status:?}):\n{}",
                    tail.join("\n")
                );
                *deaths.entry(point).or_default() += 1;
                format!("aborted at {point}:{n}")
            }
        };
        restored = check_prefix(&read_target(&mb.brokers, target), &at);
        eprintln!("{at}: {how}; {restored} of {RECORDS} restored, in order, none twice");
    }

    // The last run completes it, and says so.
    let mut child = restore_child(data, mb, target, rounds_run > 0, None);
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "{target}: the last restore failed ({status:?}):\n{stderr}"
    );
    let got = read_target(&mb.brokers, target);
    assert_eq!(
        check_prefix(&got, &format!("{target} at the end")),
        RECORDS,
        "{target}: records restored"
    );
    rounds_run
}

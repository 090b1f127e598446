//! kill -9: `cairn run` as a child process against `cairn mock-broker`,
//! SIGKILLed at seeded moments while records keep being produced, then
//! restarted. Whenever it is dead, Kafka's committed offsets must not pass
//! the archive's durable offsets; at the end the archive must hold every
//! record produced exactly once, byte for byte.
//!
//! Half the rounds also arm a named crash point (`CAIRN_ABORT_AT`, see
//! connector/src/crashpoint.rs): the child aborts between an append's
//! writes and their fsync, between a put's fsync and its commit, or inside
//! an assignment right after the archive was opened, whichever the seed
//! picks; a round whose armed point is not reached before its kill fails
//! (one that meets the 60 s deadline first is counted, not failed: a slow
//! machine is no bug; but not every round may end so). (Inside a revoke
//! before its commit needs a second member: revoke_crash.rs.)
//!
//! What "durable" means here: a SIGKILL keeps the page cache, so the store
//! reopened after it keeps writes that were never synced, and the check
//! after each death is against what a process crash keeps. That a commit
//! never passes what was *synced* (what a power loss keeps) is checked as
//! each commit is sent, against the engine's own durable offsets: in the
//! final run here, and in every in-process pipeline test
//! (`cairn_tests::run_to_end`). Losing unsynced writes is the engine's
//! crash tests' (`torn_append.rs`, the `wal_crash` fuzz target).
//!
//! `CAIRN_CRASH_ROUNDS` sets the rounds (default 5), `CAIRN_SEED` replays.

mod common;

use cairn_connector::crashpoint::{APPEND_BEFORE_FSYNC, ASSIGN_AFTER_OPEN, PUT_BEFORE_COMMIT};

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cairn_connector::cli::demo::{
    check_archive, committed, demo_next_offsets, demo_producer, demo_record, produce_with,
};
use cairn_connector::offsets::{committed_offsets, group_client};
use cairn_connector::{ArchiveSink, PipelineOptions, RunConfig};
use cairn_engine::{Engine, EngineConfig, TopicPartition};
use common::{cairn_run, env_count, seed, TestBroker, FAST_GROUP};
use rand::{Rng, SeedableRng};

const TOPIC: &str = "k9";
const GROUP: &str = "k9-group";
/// Most records produced ahead of Kafka's committed offsets.
const LAG_MAX: i64 = 5_000;

/// Kafka committed offsets never pass what the store holds durably.
/// Returns (durable, committed) record counts.
fn check_committed_le_durable(mb: &TestBroker, data: &std::path::Path, round: u32) -> (i64, i64) {
    let durable = Engine::open(EngineConfig::new(data))
        .unwrap()
        .durable_offsets();
    let kafka = committed(&mb.brokers, &mb.group(GROUP), &mb.topic(TOPIC), 3).unwrap();
    common::assert_committed_le_durable(
        &mb.topic(TOPIC),
        &kafka,
        &durable,
        &format!("round {round}"),
    );
    (durable.values().sum(), kafka.values().sum())
}

#[test]
fn sigkill_at_seeded_moments_loses_and_duplicates_nothing() {
    let seed = seed("kill9");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rounds = env_count("CAIRN_CRASH_ROUNDS", 5);
    let mb = TestBroker::start(&[&format!("{TOPIC}:3")]);
    let (topic, group) = (mb.topic(TOPIC), mb.group(GROUP));
    let data = tempfile::tempdir().unwrap();
    let data_s = data.path().to_str().unwrap().to_owned();
    let mut produced = 0u64;
    let mut kills_by_deadline = 0;
    let mut commits_total = 0;
    let mut kills_in_recovery = 0;
    let mut endings: std::collections::BTreeMap<String, u32> = Default::default();
    for round in 0..rounds {
        // Records keep arriving while the child runs: small paced chunks
        // until it is dead, so its commits keep coming. The producer stays
        // at most LAG_MAX ahead of Kafka's committed offsets, so the archive
        // never falls behind what the mock cluster retains (5 MiB a
        // partition): a restart's group join can take seconds.
        let stop_producing = Arc::new(AtomicBool::new(false));
        let producer = {
            let (brokers, stop) = (mb.brokers.clone(), stop_producing.clone());
            let (topic, group) = (topic.clone(), group.clone());
            let start = produced;
            std::thread::spawn(move || {
                // One producer and one group client for the whole round.
                let producer = demo_producer(&brokers).unwrap();
                let group = group_client(&brokers, &group).unwrap();
                let tps: Vec<_> = (0..3).map(|p| TopicPartition::new(&topic, p)).collect();
                let mut next = start;
                while !stop.load(Ordering::Relaxed) {
                    let done: i64 = committed_offsets(&group, &tps, Duration::from_secs(10))
                        .map(|c| c.values().sum())
                        .unwrap_or(0);
                    if next as i64 - done < LAG_MAX {
                        produce_with(&producer, &topic, next..next + 300).unwrap();
                        next += 300;
                    }
                    // Pacing the producer, not synchronising with anything.
                    std::thread::sleep(Duration::from_millis(50));
                }
                next
            })
        };

        let mut args = common::run_flags(&mb.brokers, &group, &topic, &data_s);
        args.extend(["--commit", "every-put", "--batch-records-max", "250"]);
        // Half the rounds arm a named crash point, reached before the 40th
        // commit (each put's commit comes after its append and its fsync,
        // and the first assignment before any): the round fails if it is
        // not (a renamed or moved point).
        //
        // The first round always commits before its SIGKILL: with every
        // round free to die before its first commit (at the assignment's
        // crash point, or inside the store's open), one seed in about a
        // thousand made no commit in five rounds and failed the check
        // below (seen the night of 2026-12-04, CAIRN_SEED=1796377853994789805).
        let free = round > 0;
        let abort_at = (free && rng.gen_bool(0.5)).then(|| match rng.gen_range(0..3) {
            0 => format!("{PUT_BEFORE_COMMIT}:{}", rng.gen_range(1..=12)),
            1 => format!("{APPEND_BEFORE_FSYNC}:{}", rng.gen_range(1..=12)),
            _ => format!("{ASSIGN_AFTER_OPEN}:1"),
        });
        let mut child = cairn_run(&args, abort_at.as_deref());
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Kill after a seeded number of commits: the pipe's delay puts the
        // SIGKILL anywhere in the put/fsync/commit cycle that follows. One
        // round in six without a crash point kills as soon as the engine
        // starts to open instead: inside the recovery of the previous
        // round's crash, unless recovery wins the race with the pipe.
        let kill_after = if abort_at.is_some() {
            40
        } else {
            rng.gen_range(1..=20u32)
        };
        let kill_at_open = free && abort_at.is_none() && rng.gen_ratio(1, 6);
        let mut recovered = false;
        let mut how = format!("SIGKILL after {kill_after} commits");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut commits = 0;
        let mut tail = Vec::new();
        let mut timed_out = false;
        while commits < kill_after {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => {
                    if line.contains(r#""message":"commit""#) {
                        commits += 1;
                    }
                    recovered |= line.contains(r#""message":"store recovered""#);
                    if kill_at_open && line.contains(r#""message":"opening store""#) {
                        how = "SIGKILL as the store opened".to_owned();
                        break;
                    }
                    tail.push(line);
                    if tail.len() > 20 {
                        tail.remove(0);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    kills_by_deadline += 1;
                    timed_out = true;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    use std::os::unix::process::ExitStatusExt;
                    let status = child.wait().unwrap();
                    let aborted = status.signal() == Some(libc_sigabrt())
                        && tail.iter().any(|l| l.contains("CAIRN_ABORT_AT"));
                    assert!(
                        abort_at.is_some() && aborted,
                        "round {round}: cairn run exited on its own ({status:?}); last lines:\n{}",
                        tail.join("\n")
                    );
                    how = format!("aborted at {}", abort_at.as_deref().unwrap_or("?"));
                    let point = abort_at.as_deref().unwrap_or("?");
                    let point = point.rsplit_once(':').map_or(point, |(p, _)| p);
                    *endings.entry(point.to_owned()).or_default() += 1;
                    break;
                }
            }
        }
        if !how.starts_with("aborted") {
            assert!(
                abort_at.is_none() || timed_out,
                "round {round}: {} was armed and not reached within {kill_after} commits (CAIRN_SEED={seed}); last lines:\n{}",
                abort_at.as_deref().unwrap_or_default(),
                tail.join("\n")
            );
            *endings.entry("SIGKILL".to_owned()).or_default() += 1;
        }
        let _ = child.kill(); // SIGKILL (already gone if it aborted)
        child.wait().unwrap();
        reader.join().unwrap();
        if kill_at_open {
            // Every line written before the SIGKILL landed is in the channel now.
            recovered |= rx
                .try_iter()
                .any(|l| l.contains(r#""message":"store recovered""#));
            if recovered {
                how.push_str(" (after recovery finished)");
            } else {
                how.push_str(" (inside open/recovery)");
                kills_in_recovery += 1;
            }
        }
        stop_producing.store(true, Ordering::Relaxed);
        produced = producer.join().unwrap();
        commits_total += commits;
        let (durable, committed) = check_committed_le_durable(&mb, data.path(), round);
        eprintln!(
            "round {round}: {how} ({commits} commits seen); {durable} durable, {committed} committed, {produced} produced"
        );
    }

    // The rounds did what they are for: children reached their kill points
    // (one that meets the generous 60 s deadline instead is counted, not
    // failed: a slow machine is no bug; but more than a quarter of the
    // rounds, at least one, is no longer a slow machine: a child that
    // hangs in recovery would look the same. Until 2026-12-05 all but one
    // round could time out; seen in review), and committed between deaths.
    assert!(
        (rounds == 0 || kills_by_deadline < rounds) && kills_by_deadline <= (rounds / 4).max(1),
        "{kills_by_deadline} of {rounds} children met the 60 s deadline before their kill point (CAIRN_SEED={seed})"
    );
    assert!(
        rounds == 0 || commits_total > 0,
        "no child committed anything in {rounds} rounds (CAIRN_SEED={seed})"
    );

    // Finish in-process and check everything produced is there exactly once.
    let mut cfg = RunConfig::new(&mb.brokers, &group, vec![topic.clone()], data.path().into());
    for (k, v) in FAST_GROUP {
        cfg.kafka.insert(k.into(), v.into());
    }
    let want = demo_next_offsets(&topic, produced);
    let engine = std::sync::Arc::new(Engine::open(EngineConfig::new(data.path())).unwrap());
    // Held weakly, so that the sink's stop still closes the engine.
    let store = std::sync::Arc::downgrade(&engine);
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| {
            want.iter().all(|(tp, o)| c.get(tp) == Some(o))
        })),
        // Against the engine's own durable offsets, not only the sink's
        // report, as each commit is sent (by its acknowledgement the fsync
        // could have finished; until 2026-12-05 this checked there).
        on_commit_sent: Some(Box::new(move |committed, durable| {
            let engine = store.upgrade();
            for (tp, o) in committed {
                let d = engine
                    .as_ref()
                    .map_or(durable[tp], |e| e.durable_offset(tp).unwrap_or(0));
                assert!(
                    *o <= d && *o <= durable[tp],
                    "committed {tp}@{o} above durable {d}"
                );
            }
        })),
        ..Default::default()
    };
    let report = common::run_bounded(&cfg, Box::new(ArchiveSink::new(engine)), opts).unwrap();
    assert_eq!(
        report.stats.records_duplicate, 0,
        "the final run was redelivered records the archive already had"
    );
    let engine = Engine::open(EngineConfig::new(data.path())).unwrap();
    check_archive(&engine, &topic, produced).unwrap();
    assert!(engine.verify().unwrap().is_clean());
    drop(engine);
    check_export(data.path(), produced);
    eprintln!(
        "kill9: {rounds} rounds ({kills_by_deadline} killed at the 60 s deadline, {kills_in_recovery} inside open/recovery), {produced} records archived exactly once; deaths: {endings:?}"
    );
}

/// What a user reads back: `cairn export` (jsonl) holds every record
/// produced once, in offset order per partition, byte for byte.
fn check_export(data: &std::path::Path, produced: u64) {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    let out = std::process::Command::new(common::CAIRN)
        .args(["export", "--data", data.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b64 = |v: &Option<Vec<u8>>| v.as_ref().map(|b| STANDARD.encode(b));
    let mut next: std::collections::BTreeMap<i64, i64> = Default::default();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let (p, o) = (
            v["partition"].as_i64().unwrap(),
            v["offset"].as_i64().unwrap(),
        );
        let expected = next.entry(p).or_default();
        assert_eq!(
            o, *expected,
            "partition {p}: loss or duplicate in the export"
        );
        *expected += 1;
        let (_, want) = demo_record((o * 3 + p) as u64);
        assert_eq!(v["timestamp"].as_i64(), Some(want.timestamp_ms), "{line}");
        assert_eq!(
            v["key"].as_str().map(String::from),
            b64(&want.key),
            "{line}"
        );
        assert_eq!(
            v["value"].as_str().map(String::from),
            b64(&want.value),
            "{line}"
        );
        let headers: Vec<(String, Option<String>)> = want
            .headers
            .iter()
            .map(|h| (h.name.clone(), b64(&h.value)))
            .collect();
        assert_eq!(
            serde_json::from_value::<Vec<(String, Option<String>)>>(v["headers"].clone()).unwrap(),
            headers,
            "{line}"
        );
    }
    let want: std::collections::BTreeMap<i64, i64> = demo_next_offsets(TOPIC, produced)
        .into_iter()
        .map(|(tp, n)| (tp.partition as i64, n))
        .collect();
    assert_eq!(next, want, "exported records per partition");
}

/// SIGABRT's number on Linux (`std::process::abort`).
fn libc_sigabrt() -> i32 {
    6
}

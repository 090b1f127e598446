//! A failed fsync, through the real binary: `cairn run` under strace, whose
//! fault injection makes one fdatasync of sled's data file fail with EIO,
//! and every fsync of it after that, as a failed disk does (the kernel
//! reports a writeback error to every descriptor open on the file, so
//! sled's own shutdown fsync meets it too).
//!
//! The run must stop by itself with exit code 1, saying the engine is
//! poisoned by a failed fsync, without a panic (sled unwraps its shutdown
//! fsync; the engine catches that); cairn must never call fdatasync on the
//! file again (no retry: after a failed fdatasync the page cache may have
//! dropped the dirty pages, and a second fdatasync would report success
//! for data that is gone); Kafka's committed offsets must not pass what the
//! reopened archive holds durably; and a rerun must archive every record
//! exactly once.
//!
//! A second test fails recovery's fdatasync as `cairn status` opens an
//! archive: an error, no panic, and the poison mark left; a third, a
//! verify's last fdatasync: exit 1, and the open mark left.
//!
//! The in-process twin, `tests/tests/fsync_failure.rs`, fails the flush
//! through a failpoint; this one fails the system call itself, as a dying
//! disk would. Needs strace (`.ci/run` installs it; under `CAIRN_CI` a missing
//! strace fails the test instead of skipping it).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};

use cairn_connector::cli::demo::{check_archive, committed, demo_next_offsets, produce};
use cairn_connector::{ArchiveSink, PipelineOptions, RunConfig};
use cairn_engine::{Engine, EngineConfig};
use common::{skip, KillOnDrop, TestBroker, CAIRN, FAST_GROUP};

/// Which fdatasync of the file fails, counted per thread (strace counts
/// injections per system call and per tracee). Opening the archive takes
/// two on the thread that opens it; the task thread's first syncs are its
/// first puts. Their commits are the committer's, made while the next puts
/// run (and retried after a backoff while the group settles): eleven puts
/// before the failure leave time for some to land (of the 30 puts 3,000
/// records take in batches of 100).
const FAILING_CALL: u32 = 12;

/// Whether strace is here (the tests skip without it).
fn have_strace() -> bool {
    let here = Command::new("strace").arg("-V").output().is_ok();
    if !here {
        skip("strace is not installed (apt-get install strace; .ci/run installs it)");
    }
    here
}

/// `cairn` under strace: only the fsyncs of the archive's `sled/db` at
/// `data` traced, with `fdatasync_when` and `fsync_when` (strace's `when=`)
/// failing with EIO, the trace written to `trace`.
fn cairn_under_strace(
    data: &std::path::Path,
    trace: &std::path::Path,
    fdatasync_when: &str,
    fsync_when: &str,
) -> Command {
    let mut cmd = Command::new("strace");
    cmd.args(["-f", "-y", "-qq", "-P"])
        .arg(data.join("sled").join("db"))
        .args(["-e", "trace=fdatasync,fsync", "-e"])
        .arg(format!("inject=fdatasync:error=EIO:when={fdatasync_when}"))
        .arg("-e")
        .arg(format!("inject=fsync:error=EIO:when={fsync_when}"))
        .arg("-o")
        .arg(trace)
        .arg(CAIRN);
    cmd
}

/// Whether strace could not run cairn at all (ptrace not permitted in a
/// container, a strace too old for `inject=`): the test skips.
fn strace_refused(trace: &std::path::Path, stderr: &str) -> bool {
    let refused = !trace.exists() || stderr.lines().any(|l| l.starts_with("strace: "));
    if refused {
        skip(&format!("strace could not run cairn here:\n{stderr}"));
    }
    refused
}

/// A closed archive at `data` of t/0's offsets 0..100; its partition.
fn archive_of_100(data: &std::path::Path) -> cairn_engine::TopicPartition {
    let tp = cairn_engine::TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(data)).unwrap();
    e.append(&[cairn_engine::fuzzing::batch(&tp, 0..100, 50)])
        .unwrap();
    e.close().unwrap();
    tp
}

/// An archive of 100 records ([`archive_of_100`]) at `data` in a new
/// temporary folder, and where strace's trace goes beside it; `None` (the
/// test skips) where strace is missing.
fn archive_to_trace() -> Option<(
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    cairn_engine::TopicPartition,
)> {
    if !have_strace() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (data, trace) = (base.join("data"), base.join("trace.txt"));
    let tp = archive_of_100(&data);
    Some((dir, data, trace, tp))
}

/// An open that fails on the disk: recovery's fdatasync of an existing
/// archive fails with EIO (`cairn status` opens it), and so does sled's
/// own fsync at its shutdown. The command fails with exit 1 naming the
/// fsync, without a panic from sled's drop, and leaves the poison mark, so
/// that the next open does not trust the page cache; that open reads the
/// whole archive.
#[test]
fn an_eio_during_an_open_is_an_error_and_leaves_the_mark() {
    let Some((_dir, data, trace, tp)) = archive_to_trace() else {
        return;
    };
    // sled's own fsync as it opens succeeds; every one after fails.
    let out = cairn_under_strace(&data, &trace, "1", "2+")
        .args(["status", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if strace_refused(&trace, &stderr) {
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("during sync after recovery"), "{stderr}");
    // The step that failed, and its file (until 2026-12-05 only the
    // folder, whatever the file).
    let step = format!("fdatasync {}", data.join("sled").join("db").display());
    assert!(stderr.contains(&step), "{stderr}");
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    assert!(stderr.contains("shutdown failed too"), "{stderr}");
    assert!(data.join("cairn.poisoned").exists(), "no poison mark");
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    assert!(e.recovery_report().poisoned_before.is_some());
    assert_eq!(e.read(&tp, 0).unwrap().count(), 100);
}

/// A verify of a stopped archive whose last fdatasync of the store fails
/// (sled wrote as it opened and was read): the check stands for what was
/// read, but the command stops non-zero, as on any failed fsync, with a
/// problem line naming the file, and the open mark stays for the next
/// open (until 2026-12-05 it said "clean" and exited 0).
#[test]
fn a_verify_whose_last_fdatasync_fails_exits_1() {
    let Some((_dir, data, trace, tp)) = archive_to_trace() else {
        return;
    };
    // The verify's one fdatasync fails, and sled's own fsyncs after its
    // open (its shutdown's).
    let out = cairn_under_strace(&data, &trace, "1+", "2+")
        .args(["verify", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if strace_refused(&trace, &stderr) {
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("clean"), "{stdout}");
    let step = format!(
        "the verify's last flush and fdatasync of the store failed (fdatasync {}: Input/output error",
        data.join("sled").join("db").display()
    );
    assert!(stdout.contains(&step), "{stdout}");
    assert!(stdout.ends_with("1 problem\n"), "{stdout}");
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    assert!(data.join("cairn.open").exists(), "the open mark stays");
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    assert!(e.recovery_report().unclean_stop_cache_dropped);
    assert_eq!(e.read(&tp, 0).unwrap().count(), 100);
}

#[test]
fn an_eio_from_fdatasync_stops_the_run_non_zero_and_is_never_retried() {
    if !have_strace() {
        return;
    }
    let mb = TestBroker::start(&["eio:3"]);
    let (topic, group) = (mb.topic("eio"), mb.group("eio-group"));
    let produced = 3_000u64;
    produce(&mb.brokers, &topic, 0..produced).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Canonical: strace matches `-P` against the descriptor's path as
    // /proc gives it, which has no symlinks (a TMPDIR with one would
    // inject nothing, and the run would never stop).
    let base = dir.path().canonicalize().unwrap();
    let data = base.join("data");
    let trace = base.join("trace.txt");

    // Every fsync of the file fails, from the first (a new store's open
    // takes none): sled's shutdown fsync meets the failed disk.
    let mut cmd = cairn_under_strace(&data, &trace, &FAILING_CALL.to_string(), "1+");
    cmd.args(["run", "--brokers", &mb.brokers, "--group", &group])
        .args(["--topics", &topic, "--data"])
        .arg(&data)
        .args(["--commit", "every-put", "--batch-records-max", "100"]);
    for (k, v) in FAST_GROUP {
        cmd.args(["-X", &format!("{k}={v}")]);
    }
    cmd.env_remove("CAIRN_ABORT_AT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop::spawn(&mut cmd);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    if strace_refused(&trace, &stderr) {
        return;
    }

    // It stopped by itself, non-zero, saying why.
    assert_eq!(status.code(), Some(1), "exit status {status}:\n{stderr}");
    assert!(
        stderr.contains("poisoned") && stderr.contains("fsync"),
        "the error must say the engine is poisoned by a failed fsync:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "a panic:\n{stderr}");
    assert!(
        stderr.contains("shutdown failed too"),
        "sled's shutdown fsync met the failed disk and was caught:\n{stderr}"
    );
    // The archive it made, and wrote to, is kept unopened, its poison mark
    // for the next open (since 2026-12-05; before, the exit path opened it
    // again to see whether it was empty, in the process whose fsync
    // failed).
    assert!(
        data.join(cairn_engine::poisoned::POISON_FILE).exists(),
        "the poison mark:\n{stderr}"
    );
    assert!(
        stderr.contains(
            "the archive this run made stays: it holds records or where its partitions start, or its engine was poisoned"
        ) && !stderr.contains("could not be checked for records"),
        "the archive was opened again to be removed:\n{stderr}"
    );

    // Exactly one fdatasync failed, cairn's, and none was called after it,
    // nor an fsync on cairn's descriptor (`-y` prints it: `7</…/db>`). The
    // fsyncs after it are sled's own shutdown, on sled's descriptor, which
    // failed too: nothing relies on them. Until 2026-12-05 any injected
    // fsync passed, so a retry through `File::sync_all` would have too.
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let failed: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].contains("fdatasync(") && lines[i].contains("(INJECTED)"))
        .collect();
    assert_eq!(failed.len(), 1, "one failed fdatasync:\n{text}");
    let cairns = lines[failed[0]]
        .split_once("fdatasync(")
        .and_then(|(_, rest)| rest.split_once('<'))
        .map(|(fd, _)| format!("sync({fd}<"))
        .unwrap_or_else(|| panic!("no descriptor in {}", lines[failed[0]]));
    let retries: Vec<&str> = lines[failed[0] + 1..]
        .iter()
        .copied()
        .filter(|l| {
            l.contains("fdatasync(")
                || l.contains(&cairns)
                || (l.contains("fsync(") && !l.contains("(INJECTED)"))
        })
        .collect();
    assert!(
        retries.is_empty(),
        "the data file was synced again after its fdatasync failed (a retry):\n{}",
        retries.join("\n")
    );
    let synced_before = lines[..failed[0]]
        .iter()
        .filter(|l| l.contains("fdatasync(") && l.ends_with("= 0"))
        .count();
    assert!(synced_before >= 2, "no fdatasync succeeded before:\n{text}");

    // Kafka's commits never passed what is durable, and there were some.
    let engine = Engine::open(EngineConfig::new(&data)).unwrap();
    let durable = engine.durable_offsets();
    drop(engine);
    let kafka = committed(&mb.brokers, &group, &topic, 3).unwrap();
    common::assert_committed_le_durable(&topic, &kafka, &durable, "after the failed fsync");
    assert!(
        kafka.values().sum::<i64>() > 0,
        "nothing was committed before the failure: {kafka:?}"
    );
    // strace fails only the call: the put whose fdatasync failed stayed in
    // the page cache, and the reopened store holds it, though it was never
    // durable. So the check above is against a store one put ahead of what
    // was synced; that put (of at least one record: every-put syncs only
    // puts) must not be committed, so Kafka stops short of the reopened
    // store. A run that sent a put's commit before its fsync returned would
    // commit it.
    assert!(
        kafka.values().sum::<i64>() < durable.values().sum::<i64>(),
        "Kafka committed everything the reopened store holds, the put whose fdatasync failed included: {kafka:?} against {durable:?}"
    );

    // A rerun recovers and archives everything, each record once.
    let mut cfg = RunConfig::new(&mb.brokers, &group, vec![topic.clone()], data.clone());
    for (k, v) in FAST_GROUP {
        cfg.kafka.insert(k.into(), v.into());
    }
    let want = demo_next_offsets(&topic, produced);
    let opts = PipelineOptions {
        done: Some(Box::new(move |c| {
            want.iter().all(|(tp, o)| c.get(tp) == Some(o))
        })),
        ..Default::default()
    };
    let engine = std::sync::Arc::new(Engine::open(EngineConfig::new(&data)).unwrap());
    let report = common::run_bounded(&cfg, Box::new(ArchiveSink::new(engine)), opts).unwrap();
    assert_eq!(report.stats.records_duplicate, 0, "records redelivered");
    let engine = Engine::open(EngineConfig::new(&data)).unwrap();
    check_archive(&engine, &topic, produced).unwrap();
    assert!(engine.verify().unwrap().is_clean());
}

/// A command that reads a stopped archive (`status`, `export`, a dry-run
/// `prune`, `restore`) and meets a failed fsync as it closes the archive exits 1,
/// without a panic, and leaves the poison mark (since 2026-12-05; the
/// engine's drop synced it, poisoned, and left the mark, but the command
/// exited 0 and a monitor polling `status` saw a sound disk). The failing
/// call is the last fdatasync a clean run of the same command makes.
#[test]
fn a_read_command_whose_closing_fsync_fails_exits_1() {
    if !have_strace() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let tp = cairn_engine::TopicPartition::new("t", 0);
    let mb = TestBroker::start(&["r:1"]);
    let rename = format!("t={}", mb.topic("r"));
    let commands: [&[&str]; 4] = [
        &["status"],
        &["export", "--output", "-"],
        &["prune", "--older-than", "1d", "--dry-run"],
        // Both runs append: the clean one's records are in the target.
        &[
            "restore",
            "--brokers",
            &mb.brokers,
            "--rename",
            &rename,
            "--append",
        ],
    ];
    for (i, args) in commands.into_iter().enumerate() {
        let data = base.join(format!("data{i}"));
        archive_of_100(&data);
        let run = |when: &str, trace: &std::path::Path| {
            let mut cmd = cairn_under_strace(&data, trace, when, when);
            cmd.args(&args[..1])
                .arg("--data")
                .arg(&data)
                .args(&args[1..])
                .stdout(Stdio::null());
            cmd.output().unwrap()
        };
        // A clean run, to count the fdatasyncs (per thread, as strace
        // counts them for `when=`).
        let trace = base.join(format!("clean{i}.txt"));
        let out = run("65535", &trace);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if strace_refused(&trace, &stderr) {
            return;
        }
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        let text = std::fs::read_to_string(&trace).unwrap();
        let syncs: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("fdatasync(") && !l.contains("resumed"))
            .collect();
        let last = syncs.last().expect("a clean run syncs as it closes");
        let pid = last.split_whitespace().next().unwrap();
        let nth = syncs
            .iter()
            .filter(|l| l.split_whitespace().next() == Some(pid))
            .count();
        // The same command, that call failing.
        let trace = base.join(format!("failing{i}.txt"));
        let out = run(&format!("{nth}+"), &trace);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("poisoned"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: a panic:\n{stderr}");
        // The records were all acknowledged: not to be sent again.
        assert_eq!(
            args[0] == "export",
            stderr.contains(
                "the export is complete (in <stdout>), but the archive's closing sync failed"
            ),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            args[0] == "restore",
            stderr.contains("the restore is complete (100 records into 1 partition, all acknowledged), but the archive's closing sync failed"),
            "{args:?}: {stderr}"
        );
        assert!(data.join("cairn.poisoned").exists(), "{args:?}: no mark");
        let e = Engine::open(EngineConfig::new(&data)).unwrap();
        assert!(e.recovery_report().poisoned_before.is_some());
        assert_eq!(e.read(&tp, 0).unwrap().count(), 100);
    }
}

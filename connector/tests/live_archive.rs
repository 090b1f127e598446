//! `status`, `export`, `verify` and `prune` on an archive that a running
//! `cairn run` holds: the run answers them on its socket (live.rs) while it
//! archives. What they show is durable and a prefix of what the stopped
//! archive holds; SIGTERM then stops the run cleanly and removes the
//! socket; a socket left by a killed run does not stand in the way; and
//! `restore`, which the run does not serve, still refuses, naming the
//! holder.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{ChildStderr, Command, Output};

use cairn_connector::cli::demo::produce;
use common::{cairn_run, closed_pipe, KillOnDrop, TestBroker, CAIRN};

fn cairn(args: &[&str]) -> Output {
    Command::new(CAIRN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Read the run's log until its first commit: running, store open.
fn wait_for_commit(lines: &mut Lines<BufReader<ChildStderr>>) {
    loop {
        let line = lines
            .next()
            .expect("cairn run exited before its first commit")
            .unwrap();
        if line.contains(r#""message":"commit""#) {
            return;
        }
    }
}

/// Read the run's log, commit by commit, until the archive holds at least
/// `records_min` records of each of `partitions` partitions (asked through
/// its socket): the first commit may cover only the partitions fetched
/// first, and few records of them.
fn wait_for_partitions(
    lines: &mut Lines<BufReader<ChildStderr>>,
    data: &str,
    partitions: usize,
    records_min: u64,
) {
    loop {
        let out = cairn(&["status", "--data", data, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        let held = |r: &serde_json::Value| r["records"].as_u64().is_some_and(|n| n >= records_min);
        if rows.len() >= partitions && rows.iter().all(held) {
            return;
        }
        wait_for_commit(lines);
    }
}

/// Exported jsonl lines, per partition, in order.
fn by_partition(jsonl: &[u8]) -> BTreeMap<i64, Vec<String>> {
    let mut out: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for line in text(jsonl).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        out.entry(v["partition"].as_i64().unwrap())
            .or_default()
            .push(line.to_owned());
    }
    out
}

/// A mock cluster with `records` produced to `live` (3 partitions), and a
/// `cairn run` archiving them into `<dir>/archive` that has committed once.
struct Running {
    mb: TestBroker,
    dir: tempfile::TempDir,
    child: KillOnDrop,
    log: Lines<BufReader<ChildStderr>>,
}

impl Running {
    fn start(records: u64) -> Running {
        let mb = TestBroker::start(&["live:3"]);
        produce(&mb.brokers, &mb.topic("live"), 0..records).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (child, log) = Self::spawn(&mb, dir.path());
        Running {
            mb,
            dir,
            child,
            log,
        }
    }

    /// `cairn run` on the archive, once it has committed.
    fn spawn(mb: &TestBroker, dir: &Path) -> (KillOnDrop, Lines<BufReader<ChildStderr>>) {
        let data = dir.join("archive");
        let args = [
            "--brokers",
            &mb.brokers,
            "--group",
            &mb.group("live-group"),
            "--topics",
            &mb.topic("live"),
            "--data",
            data.to_str().unwrap(),
        ];
        let mut child = cairn_run(&args, None);
        let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
        wait_for_commit(&mut log);
        (child, log)
    }

    fn data(&self) -> String {
        self.dir.path().join("archive").to_str().unwrap().to_owned()
    }
}

#[test]
fn a_running_archive_serves_status_export_verify_and_prune() {
    let Running {
        mb,
        dir,
        mut child,
        log: mut lines,
    } = Running::start(3_000);
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    let pid = child.id().to_string();
    // Each partition durable past offset 13: the range export below
    // reads 10..13 (a first put may hold only a few records).
    wait_for_partitions(&mut lines, d, 3, 13);
    // More records while it runs: the reads below race the archiving.
    let topic = mb.topic("live");
    produce(&mb.brokers, &topic, 3_000..6_000).unwrap();

    // status: the durable figures, marked as served by the run.
    let out = cairn(&["status", "--data", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains(&format!(
            "live: durable figures from the running cairn run, pid {pid}"
        )),
        "{table}"
    );
    let out = cairn(&["status", "--data", d, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    // Each row says whose answer it is.
    assert!(
        rows.iter()
            .all(|r| r["live_pid"].as_u64() == pid.parse::<u64>().ok()),
        "{rows:?}"
    );
    let durable_then: u64 = rows.iter().map(|r| r["records"].as_u64().unwrap()).sum();
    // Each of the 3 partitions was durable past 13 before the status.
    assert!(durable_then >= 3 * 13, "{rows:?}");

    // export: everything durable so far, in order, each record once.
    let live_file = dir.path().join("live.jsonl");
    let out = cairn(&[
        "export",
        "--data",
        d,
        "--output",
        live_file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let live_export = std::fs::read(&live_file).unwrap();
    let live_lines = text(&live_export).lines().count() as u64;
    assert!(live_lines >= durable_then, "{live_lines} < {durable_then}");
    // With its count, as a stopped archive's export says it (until
    // 2026-12-07 a live one said none).
    assert!(
        text(&out.stderr).contains(&format!(
            "export done (served by the running cairn run) records={live_lines}"
        )),
        "{}",
        text(&out.stderr)
    );
    // A time range, served: records stamped now are all after 2001, none
    // before it, which is an error naming the range, not an empty export.
    let out = cairn(&["export", "--data", d, "--from-time", "2001-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let timed = text(&out.stdout).lines().count() as u64;
    assert!(timed >= live_lines, "{timed} < {live_lines}");
    let out = cairn(&["export", "--data", d, "--to-time", "2001-01-01T00:00:00Z"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--to-time 2001-01-01T00:00:00.000Z: no record of the chosen partitions has a timestamp in that range"),
        "{}",
        text(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    // Into a reader that went away: a quiet end, not "done".
    let out = Command::new(CAIRN)
        .args(["export", "--data", d])
        .stdout(closed_pipe())
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("error") && !err.contains("export done"),
        "{err}"
    );
    // One partition, a range, raw values.
    let out = cairn(&[
        "export",
        "--data",
        d,
        "--partition",
        "1",
        "--from",
        "10",
        "--to",
        "13",
        "--format",
        "raw",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = text(&out.stdout);
    let values: Vec<&str> = out.lines().collect();
    // Demo record i goes to partition i % 3, so offset o of partition 1
    // holds record 3 o + 1.
    let want: Vec<String> = (10..13u64)
        .map(|o| {
            let (_, r) = cairn_connector::cli::demo::demo_record(3 * o + 1);
            String::from_utf8(r.value.unwrap()).unwrap()
        })
        .collect();
    assert_eq!(values, want);
    // A bad selection is the same error as on a stopped archive, and
    // leaves an existing output file as it was.
    let keep = dir.path().join("keep.jsonl");
    std::fs::write(&keep, "kept\n").unwrap();
    let k = keep.to_str().unwrap();
    let out = cairn(&["export", "--data", d, "--topic", "nope", "--output", k]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("\"nope\"") && err.contains(&format!("holds \"{topic}\"")),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "kept\n");
    // To stdout, it says nothing was written (not that stdout holds part
    // of the export).
    let out = cairn(&["export", "--data", d, "--topic", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("; nothing was written to <stdout>") && !err.contains("received"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // verify: clean, as the store stood when it started.
    let out = cairn(&["verify", "--data", d]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(
        report.contains("(live: what was durable when the verify started)")
            && report.contains("clean"),
        "{report}"
    );
    // What it did not check is said, not left to the docs.
    assert!(
        report.contains(
            "note: live: sled's own files and the cairn.durable watermark are not checked"
        ),
        "{report}"
    );

    // prune: served too. A dry run deletes nothing; then partition 0 is
    // pruned to its newest entry's worth (none fits in 1 byte: all of its
    // durable entries go) while the run goes on writing to it.
    let out = cairn(&["prune", "--data", d, "--keep-bytes", "1B", "--dry-run"]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(report.contains("would prune"), "{report}");
    let out = cairn(&[
        "prune",
        "--data",
        d,
        "--keep-bytes",
        "1B",
        "--topic",
        &topic,
        "--partition",
        "0",
    ]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(
        report.contains(&format!("{topic}/0: pruned")) && report.contains("in 1 of 1 partitions"),
        "{report}"
    );
    let out = cairn(&["status", "--data", d, "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let p0 = rows.iter().find(|r| r["partition"] == 0).unwrap();
    assert!(p0["first_offset"].as_i64().unwrap() > 0, "{p0}");

    // backup: a consistent copy, made by the run while it archives.
    let copy = dir.path().join("copy");
    let c = copy.to_str().unwrap();
    let out = cairn(&["backup", "--data", d, "--to", c]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{report}{}", text(&out.stderr));
    assert!(
        report.contains("backed up") && report.contains("clean"),
        "{report}"
    );
    // A destination refused as a stopped archive's backup refuses it, with
    // the same words (until 2026-12-07 the run's engine refused these as
    // i/o errors, without the advice; an audit).
    let missing = dir.path().join("no").join("copy");
    for (to, says) in [
        (c, "must be new or empty"),
        (
            missing.to_str().unwrap(),
            "(the backup makes one directory, not the folders above it)",
        ),
    ] {
        let out = cairn(&["backup", "--data", d, "--to", to]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{to}: {err}");
        assert!(
            err.contains(says) && !err.contains("i/o error"),
            "{to}: {err}"
        );
    }
    // A report that cannot be written (a full disk behind a redirect):
    // the run's backup and prune go on to their ends, and the command says
    // they are complete beside the error (since 2026-12-05; before, the
    // error alone, which reads as a failed backup or no prune).
    let into_full = |args: &[&str]| {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = Command::new(CAIRN)
            .args(args)
            .stdout(full)
            .output()
            .unwrap();
        (out.status.code(), text(&out.stderr))
    };
    let second = dir.path().join("second");
    let (code, err) = into_full(&["backup", "--data", d, "--to", second.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the backup is complete in {} (its verify found it clean), but its report could not be written",
            second.display()
        )) && err.contains("No space left on device"),
        "{err}"
    );
    assert!(!second.join(cairn_engine::BACKUP_INCOMPLETE_FILE).exists());
    let (code, err) = into_full(&[
        "prune",
        "--data",
        d,
        "--keep-bytes",
        "1B",
        "--topic",
        &topic,
        "--partition",
        "0",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the prune is complete (each partition pruned as asked), but its report could not be written"),
        "{err}"
    );
    // The run logs each line it sends: partition 0's second prune is in
    // its log (a line already written, not awaited).
    let pruned_0 = format!("{topic}/0: pruned");
    let mut seen = 0;
    while seen < 2 {
        let line = lines.next().expect("the run's log ended").unwrap();
        if line.contains("live prune") && line.contains(&pruned_0) {
            seen += 1;
        }
    }
    // Not into a directory that holds something.
    let out = cairn(&["backup", "--data", d, "--to", c]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("must be new or empty"),
        "{}",
        text(&out.stderr)
    );

    // Not served: restore needs the run stopped, and says who holds it.
    let out = cairn(&["restore", "--data", d, "--brokers", &mb.brokers]);
    let err = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("locked") && err.contains(&pid), "{err}");

    // SIGTERM: drain, fsync, commit, close, exit 0, socket gone.
    common::send_signal(child.id(), "TERM");
    for _ in lines.by_ref() {}
    assert_eq!(
        child.wait().unwrap().code(),
        Some(0),
        "SIGTERM must stop cleanly"
    );
    assert!(!data.join(cairn_connector::live::SOCKET_FILE).exists());

    // What the live export showed is, per partition, a prefix of the
    // stopped archive: the same records at the same offsets.
    let out = cairn(&["export", "--data", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (live, all) = (by_partition(&live_export), by_partition(&out.stdout));
    // (Partition 0 was pruned after the live export.)
    for (p, lines) in live.iter().filter(|(p, _)| **p != 0) {
        assert_eq!(&all[p][..lines.len()], &lines[..], "partition {p}");
    }
    let out = cairn(&["verify", "--data", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // The backup is an archive of its own: per partition, a prefix of the
    // stopped archive (it was taken before the run's last records).
    let out = cairn(&["export", "--data", c]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // (Partition 0, pruned to nothing just before, may have no records.)
    let copied = by_partition(&out.stdout);
    assert!(
        copied.contains_key(&1) && copied.contains_key(&2),
        "{copied:?}"
    );
    // (Partition 0 was pruned again after the backup, by the prune whose
    // report could not be written: what the backup holds of it may be gone
    // from the archive.)
    for (p, lines) in copied.iter().filter(|(p, _)| **p != 0) {
        assert_eq!(
            &all[p][..lines.len()],
            &lines[..],
            "partition {p} of the backup"
        );
    }
}

#[test]
fn a_socket_left_by_a_killed_run_is_not_in_the_way() {
    let mut run = Running::start(1_000);
    run.child.kill().unwrap();
    run.child.wait().unwrap();
    for _ in run.log.by_ref() {}
    let data = run.data();
    let d = data.as_str();
    let socket = Path::new(d).join(cairn_connector::live::SOCKET_FILE);
    assert!(socket.exists(), "SIGKILL leaves the socket");
    // Nobody answers on it: the commands open the archive themselves.
    for args in [
        vec!["status", "--data", d],
        vec!["verify", "--data", d],
        vec!["export", "--data", d, "--format", "raw"],
    ] {
        let out = cairn(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        // status and verify mark a live answer on stdout, export on stderr.
        assert!(!text(&out.stdout).contains("(live"), "{args:?}");
        assert!(
            !text(&out.stderr).contains("served by the running cairn run"),
            "{args:?}"
        );
    }
    // A refused export leaves an existing output file as it was here too.
    let keep = run.dir.path().join("keep.jsonl");
    std::fs::write(&keep, "kept\n").unwrap();
    let k = keep.to_str().unwrap();
    let out = cairn(&["export", "--data", d, "--topic", "nope", "--output", k]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "kept\n");

    // backup of the stopped archive: the command makes it itself.
    let copy = run.dir.path().join("copy");
    let out = cairn(&["backup", "--data", d, "--to", copy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (a, b) = (
        cairn(&["export", "--data", d]),
        cairn(&["export", "--data", copy.to_str().unwrap()]),
    );
    assert_eq!(
        a.stdout, b.stdout,
        "a backup of a stopped archive is all of it"
    );

    // The next run replaces the left-over socket and serves again. (New
    // records, so that it commits.)
    produce(&run.mb.brokers, &run.mb.topic("live"), 1_000..2_000).unwrap();
    let (mut child, mut log) = Running::spawn(&run.mb, run.dir.path());
    let out = cairn(&["status", "--data", d]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("live:"), "{}", text(&out.stdout));
    common::send_signal(child.id(), "TERM");
    for _ in log.by_ref() {}
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(!socket.exists());
    let left: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.starts_with(".live")), "{left:?}");
}

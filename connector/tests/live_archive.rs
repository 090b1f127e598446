//! `status`, `export` and `verify` on an archive that a running `cairn run`
//! holds: each refuses at once with an error naming the holder's pid, never
//! hangs or panics; then SIGTERM stops the run cleanly (exit 0) and the
//! same commands read the archive.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_connector::cli::demo::produce;
use common::{cairn_run, MockBroker, CAIRN};

#[test]
fn readers_refuse_a_live_archive_naming_its_holder() {
    let mb = MockBroker::start(&["live:3"]);
    produce(&mb.brokers, "live", 0..3_000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    let mut child = cairn_run(
        &[
            "--brokers",
            &mb.brokers,
            "--group",
            "live-group",
            "--topics",
            "live",
            "--data",
            d,
        ],
        None,
    );
    // Running, with the store open: it has committed.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    loop {
        let line = lines
            .next()
            .expect("cairn run exited before its first commit")
            .unwrap();
        if line.contains(r#""message":"commit""#) {
            break;
        }
    }
    let pid = child.id().to_string();
    for args in [
        vec!["status", "--data", d],
        vec!["verify", "--data", d],
        vec!["export", "--data", d],
    ] {
        let t0 = Instant::now();
        let out = Command::new(CAIRN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(0),
            "{args:?} on a live archive: {err}"
        );
        if args[0] == "verify" {
            // Not checked, which is not the same as damaged (exit 1).
            assert_eq!(out.status.code(), Some(2), "{err}");
        }
        assert!(
            err.contains("locked") && err.contains(&pid) && !err.contains("panicked"),
            "{args:?} must name the holder (pid {pid}): {err}"
        );
        // Bounded: sled's lock is retried for at most 5 s, then refused.
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{args:?} took {:?}",
            t0.elapsed()
        );
    }
    // SIGTERM: drain, fsync, commit, close, exit 0.
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    // Drain its log so a full pipe never blocks its shutdown.
    for _ in lines.by_ref() {}
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "SIGTERM must stop cleanly");
    let out = Command::new(CAIRN)
        .args(["verify", "--data", d])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

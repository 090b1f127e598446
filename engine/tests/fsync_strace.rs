//! Proves the engine fdatasyncs sled's data file before an append returns,
//! after sled's writes of it and before the durable watermark moves.
//!
//! The test re-runs itself under `strace -f -y` as a child that performs
//! appends between marker writes, then checks that between every
//! `APPEND_START i` and `APPEND_END i` there is an `fdatasync` on `sled/db`,
//! after every `pwrite64` sled made to it there, and before any write of
//! the watermark `cairn.durable` there; and that before the first append
//! the open has fsynced sled's `conf`, its folder and the folder above.
//! sled's own flush only calls `sync_file_range`, which is not durable.
//! (Since 2026-12-05 the order, the watermark and the open's syncs; before,
//! only that some fdatasync of `sled/db` came between the markers: moving
//! the watermark's advance before the fdatasync, or dropping the folders'
//! syncs, failed no test.)

mod common;

use std::process::Command;

use cairn_engine::{Engine, EngineConfig, TopicPartition};

const CHILD_ENV: &str = "CAIRN_STRACE_CHILD_DIR";
const APPENDS: usize = 5;

/// The child's half: run only by the test below, under strace (ignored in
/// a normal run, where it would do nothing).
#[test]
#[ignore = "the child of every_append_fdatasyncs_the_data_file"]
fn strace_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        // Only does work when run as the child: said past the harness's
        // capture, so that `--ignored` does not show a pass that checked
        // nothing as one (until 2026-12-06 it returned without a word).
        cairn_engine::fuzzing::say_skipped(
            "strace_child only works as the child of every_append_fdatasyncs_the_data_file, which runs it",
        );
        return;
    };
    let e = Engine::open(EngineConfig::new(&dir)).unwrap();
    let tp = TopicPartition::new("s", 0);
    for i in 0..APPENDS {
        mark(&format!("APPEND_START {i}\n"));
        e.append(&[common::batch(&tp, [i as i64], 100)]).unwrap();
        mark(&format!("APPEND_END {i}\n"));
    }
}

#[test]
fn every_append_fdatasyncs_the_data_file() {
    if Command::new("strace").arg("-V").output().is_err() {
        common::skip("strace is not installed (apt-get install strace; .ci/run installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.txt");
    let data = dir.path().join("data");
    let status = Command::new("strace")
        .args([
            "-f",
            "-y",
            "-e",
            "trace=fdatasync,fsync,sync_file_range,write,pwrite64",
            "-o",
        ])
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "strace_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &data)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    // strace installed but refused here (a sandbox that forbids ptrace):
    // skipped outside CI, as a missing strace is (until the night of
    // 2026-12-04 it failed the test), and a failure in CI.
    let stderr = String::from_utf8_lossy(&status.stderr);
    if !trace.exists() || stderr.lines().any(|l| l.starts_with("strace: ")) {
        common::skip(&format!("strace could not trace here:\n{stderr}"));
        return;
    }
    assert!(status.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines = whole_calls(&text);
    let mut inside: Option<usize> = None;
    // Whether sled/db was fdatasynced in this append since sled last
    // wrote it, and whether the watermark was written in it at all.
    let mut synced = false;
    let mut watermark_written = 0;
    let mut seen = 0;
    let mut sync_file_range = 0;
    let mut before_first = Vec::new();
    let data = std::fs::canonicalize(&data).unwrap();
    for line in lines.iter().map(String::as_str) {
        if let Some(i) = marker(line, "APPEND_START") {
            inside = Some(i);
            synced = false;
        } else if let Some(i) = marker(line, "APPEND_END") {
            assert_eq!(inside, Some(i));
            assert!(
                synced,
                "append {i} returned without an fdatasync of sled/db after sled's writes of it:\n{text}"
            );
            inside = None;
            seen += 1;
        } else if inside.is_some() {
            let db = line.contains("/sled/db>");
            if line.contains("pwrite64(") && db {
                synced = false;
            } else if line.contains("fdatasync(") && db && line.ends_with("= 0") {
                synced = true;
            } else if line.contains("pwrite64(") && line.contains("/cairn.durable>") {
                watermark_written += 1;
                assert!(
                    synced,
                    "the watermark was written before sled/db's fdatasync in append {inside:?}: {line}\n{text}"
                );
            }
        } else if seen == 0 {
            before_first.push(line);
        }
        if line.contains("sync_file_range(") {
            sync_file_range += 1;
        }
    }
    assert_eq!(seen, APPENDS, "markers missing:\n{text}");
    assert!(watermark_written > 0, "no watermark written:\n{text}");
    // The open synced sled's conf and folder, and the folder above.
    let fsynced = |path: &std::path::Path| {
        let name = format!("<{}>", path.display());
        before_first
            .iter()
            .any(|l| l.contains("fsync(") && l.contains(&name) && l.ends_with("= 0"))
    };
    for path in [
        data.join("sled").join("conf"),
        data.join("sled"),
        data.clone(),
    ] {
        assert!(
            fsynced(&path),
            "{} not fsynced before the first append:\n{text}",
            path.display()
        );
    }
    eprintln!("{APPENDS} appends, each with fdatasync on sled/db; sled's own sync_file_range calls: {sync_file_range}");
}

/// strace's lines with each call whole: under `-f` a call another thread's
/// call overlaps is split into `… <unfinished ...>` and, later, `<... name
/// resumed>…` from the same thread; the two are joined, in the place of
/// the second (where the call returned), so that the path (on the first)
/// and the result (on the second) are on one line.
fn whole_calls(text: &str) -> Vec<String> {
    let mut unfinished: std::collections::HashMap<&str, &str> = Default::default();
    let mut out = Vec::new();
    for line in text.lines() {
        let (pid, rest) = line.split_once(' ').unwrap_or(("", line));
        if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            unfinished.insert(pid, start);
        } else if let Some(resumed) = rest.strip_prefix("<... ") {
            let tail = resumed.split_once("resumed>").map_or("", |(_, t)| t);
            match unfinished.remove(pid) {
                Some(start) => out.push(format!("{pid} {start}{tail}")),
                None => out.push(line.to_owned()),
            }
        } else {
            out.push(line.to_owned());
        }
    }
    out
}

/// One write(2) syscall per marker (stderr is unbuffered, and formatting
/// would split it into several).
fn mark(s: &str) {
    use std::io::Write;
    std::io::stderr().write_all(s.as_bytes()).unwrap();
}

fn marker(line: &str, tag: &str) -> Option<usize> {
    if !line.contains("write(2") {
        return None;
    }
    let at = line.find(tag)?;
    let rest = &line[at + tag.len() + 1..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

//! An `--output` file that answers a write with EPIPE (a FUSE or network
//! file system can) has failed: the export exits non-zero and leaves the
//! file as it was, rather than take it for a reader that went away (`|
//! head`), which ends an export quietly with exit 0. Until 2026-12-05 it
//! did, and a live export's staged file, cut short, was put in place as if
//! whole. The EPIPE is a failpoint: this file is a process of its own.

use std::process::ExitCode;

use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};

/// `cairn export --data DATA [--output OUT]`, in this process.
fn export_to(data: &std::path::Path, out: &std::path::Path) -> cairn_connector::Result<ExitCode> {
    export(&[
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ])
}

fn export(args: &[&str]) -> cairn_connector::Result<ExitCode> {
    use clap::Parser;
    let cli =
        cairn_connector::cli::Cli::try_parse_from(["cairn", "export"].iter().chain(args)).unwrap();
    let cairn_connector::cli::Command::Export(a) = cli.command else {
        unreachable!()
    };
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(cairn_connector::cli::export::run(a))
}

/// An archive of 2,000 records of 2,000 bytes at `data`: over the 1 MiB an
/// export buffers before it writes.
fn archive(data: &std::path::Path) {
    let tp = TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(data)).unwrap();
    for i in 0..10 {
        e.append(&[batch(&tp, i * 200..(i + 1) * 200, 2_000)])
            .unwrap();
    }
    e.close().unwrap();
}

#[test]
fn an_epipe_from_an_output_file_fails_the_export_and_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    archive(&data);
    let out = dir.path().join("out.jsonl");
    // Every write, and a single one (a transient error: what follows would
    // be written, leaving a file with a hole of records).
    for spec in ["return", "1*return"] {
        std::fs::write(&out, b"kept").unwrap();
        fail::cfg(cairn_connector::cli::export::FAILPOINT_FILE_WRITE, spec).unwrap();
        let result = export_to(&data, &out);
        fail::remove(cairn_connector::cli::export::FAILPOINT_FILE_WRITE);
        assert!(
            !matches!(result, Ok(ref code) if *code == ExitCode::SUCCESS),
            "{spec}: the export succeeded"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"kept", "{spec}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|d| d.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{spec}: a staged file left: {names:?}");
    }
    // Without the failpoint the same export succeeds, every record there.
    let result = export_to(&data, &out).unwrap();
    assert_eq!(result, ExitCode::SUCCESS);
    let lines = std::fs::read_to_string(&out).unwrap().lines().count();
    assert_eq!(lines, 2_000);
}

/// Standard output redirected into a regular file that answers EPIPE has
/// failed too: not a reader gone, which ends an export with exit 0 (since
/// 2026-12-05; before, `cairn export > F` on such a file system exited 0
/// with F cut short). This process's own standard output is the file for
/// the export's length, and put back after.
#[test]
fn an_epipe_from_stdout_redirected_into_a_file_fails_the_export() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    archive(&data);
    let file = std::fs::File::create(dir.path().join("stdout")).unwrap();
    let result = {
        let _redirected = StdoutInto::new(&file);
        export(&["--data", data.to_str().unwrap()])
    };
    match result {
        Err(e) => assert!(e.to_string().contains("from a regular file"), "{e}"),
        Ok(code) => panic!("the export ended {code:?}, as if its reader went away"),
    }
}

/// This process's standard output redirected into a file, and the stdout
/// failpoint set, until dropped (also by a panic): then both are undone.
/// (The other test of this binary writes to a file of its own; its line in
/// the harness's report may land in the file meanwhile.)
struct StdoutInto(rustix::fd::OwnedFd);

impl StdoutInto {
    fn new(file: &std::fs::File) -> StdoutInto {
        let saved = rustix::io::dup(std::io::stdout()).unwrap();
        rustix::stdio::dup2_stdout(file).unwrap();
        fail::cfg(
            cairn_connector::cli::export::FAILPOINT_STDOUT_WRITE,
            "return",
        )
        .unwrap();
        StdoutInto(saved)
    }
}

impl Drop for StdoutInto {
    fn drop(&mut self) {
        fail::remove(cairn_connector::cli::export::FAILPOINT_STDOUT_WRITE);
        let _ = rustix::stdio::dup2_stdout(&self.0);
    }
}

//! A command reading a stopped archive whose open panics (sled 0.34.7 does
//! on some damage to its own files: its issues #1155 and #1387) says so as
//! an error naming the archive, as `cairn verify` does, not a crash with
//! exit 101. The panic is a failpoint here, reached by every open: this
//! file is a process of its own, so no other test's open meets it.
//! Against the mock cluster, or `CAIRN_TEST_BROKERS`.

use cairn_connector::cli::status::StatusArgs;
use cairn_connector::cli::DataArg;
use cairn_connector::ConnectorError;
use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};

#[test]
fn an_open_that_panics_is_an_error_naming_the_archive() {
    // `run` and `restore` ask Kafka before they open the archive, so the
    // archive's topic is one the Kafka under test has.
    let kafka = cairn_tests::TestKafka::new("t", 1);
    let tp = TopicPartition::new(&kafka.topic, 0);
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&tp, 0..10, 10)]).unwrap();
    e.close().unwrap();
    fail::cfg(
        cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR,
        "panic(sled lost its way)",
    )
    .unwrap();
    let args = status_of(dir.path());
    let result = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(cairn_connector::cli::status::run(args));
    fail::remove(cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR);
    let err = result.expect_err("the open panicked");
    assert!(matches!(err, ConnectorError::OpenPanicked { .. }), "{err}");
    let said = err.to_string();
    assert!(said.contains(&dir.path().display().to_string()), "{said}");
    assert!(said.contains("sled lost its way"), "{said}");
    // The engine marked the store before the panic went on (since the
    // night of 2026-12-04): the next open in this boot does not trust the
    // page cache, and sled's handles were dropped guarded.
    let poisoned = dir.path().join(cairn_engine::poisoned::POISON_FILE);
    let marked = std::fs::read_to_string(&poisoned).expect("the poison mark");
    assert!(
        marked.contains("the open panicked: sled lost its way"),
        "{marked}"
    );
    // `run` and `restore` open the archive too (since 2026-12-03; before,
    // their open's panic crashed them with exit 101). They ask Kafka first
    // (since 2026-12-04): a Kafka with the topic answers, and the open's
    // panic follows.
    let brokers = kafka.brokers.clone();
    let group = kafka.group("g");
    let d = dir.path().to_str().unwrap();
    for argv in [
        &["cairn", "restore", "--data", d, "--brokers", &brokers][..],
        &[
            "cairn",
            "run",
            "--data",
            d,
            "--brokers",
            &brokers,
            "--topics",
            &kafka.topic,
            "--group",
            &group,
        ][..],
    ] {
        use clap::Parser;
        let cli = cairn_connector::cli::Cli::try_parse_from(argv).unwrap();
        fail::cfg(
            cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR,
            "panic(sled lost its way)",
        )
        .unwrap();
        let result = tokio::runtime::Runtime::new().unwrap().block_on(async {
            match cli.command {
                cairn_connector::cli::Command::Restore(a) => {
                    cairn_connector::cli::restore::run(a).await
                }
                cairn_connector::cli::Command::Run(a) => cairn_connector::cli::run::run(*a).await,
                _ => unreachable!(),
            }
        });
        fail::remove(cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR);
        match result {
            Err(ConnectorError::OpenPanicked { path, detail }) => {
                assert_eq!(path, dir.path(), "{argv:?}");
                assert!(detail.contains("sled lost its way"), "{argv:?}: {detail}");
            }
            other => panic!("{argv:?}: expected the open's panic as an error, got {other:?}"),
        }
    }
    // A panic in `verify`'s read of sled's store (verify does not recover,
    // so its own failpoint) is damage found, exit 1, not "not checked"
    // (exit 2, which a monitor retries; until the night of 2026-12-04).
    fail::cfg(
        cairn_engine::FAILPOINT_VERIFY_AFTER_LOG,
        "panic(sled lost its way)",
    )
    .unwrap();
    let verified =
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(cairn_connector::cli::verify::run(
                cairn_connector::cli::verify::VerifyArgs {
                    data: DataArg {
                        data: dir.path().to_path_buf(),
                    },
                },
            ));
    fail::remove(cairn_engine::FAILPOINT_VERIFY_AFTER_LOG);
    assert_eq!(
        verified.unwrap(),
        std::process::ExitCode::from(cairn_connector::cli::verify::EXIT_DAMAGED)
    );
    // The open mark was left before sled opened the store (so that
    // recovery's own writes are covered): the next open in this boot
    // syncs the store and drops its cache first.
    let mark = dir.path().join(cairn_engine::poisoned::OPEN_FILE);
    assert!(mark.exists(), "the mark comes before sled's open");
    // Nothing was changed: it opens once the panic is gone.
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.recovery_report().unclean_stop_cache_dropped);
    assert_eq!(e.durable_offset(&tp), Some(10));
    let offsets: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    e.close().unwrap();
    assert!(!mark.exists());
    // A panic in sled's reads past the open (an export of the stopped
    // archive) is an error naming the archive and what the output holds,
    // not a crash (since the night of 2026-12-04).
    let elsewhere = tempfile::tempdir().unwrap();
    let out = elsewhere.path().join("out.jsonl");
    std::fs::write(&out, b"kept").unwrap();
    let export = export_where_reads_panic(d, &out);
    match export {
        Err(e @ ConnectorError::ReadPanicked { .. }) => {
            let said = e.to_string();
            assert!(
                said.contains("reading it panicked (sled lost a page)"),
                "{said}"
            );
            assert!(said.contains("was left as it was"), "{said}");
        }
        other => panic!("expected the read's panic as an error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&out).unwrap(), b"kept");
    // `status` reads each archived topic's recorded id through sled past
    // the open: a panic there is the same error (since 2026-12-06; before,
    // a crash, exit 101).
    let status = panicking_at(
        cairn_engine::FAILPOINT_READ_TOPIC_ID,
        cairn_connector::cli::status::run(status_of(dir.path())),
    );
    match status {
        Err(e @ ConnectorError::ReadPanicked { .. }) => {
            let said = e.to_string();
            assert!(
                said.starts_with("status of the archive at")
                    && said.contains("reading it panicked (sled lost a page)"),
                "{said}"
            );
        }
        other => panic!("expected the status read's panic as an error, got {other:?}"),
    }
    // The engine was poisoned (its drop flushed nothing sled may have left
    // half-changed), and the archive opens as before.
    assert!(dir
        .path()
        .join(cairn_engine::poisoned::POISON_FILE)
        .exists());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let offsets: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    e.close().unwrap();
    assert!(!dir
        .path()
        .join(cairn_engine::poisoned::POISON_FILE)
        .exists());
    // A backup's read of the archive that panics: the same error, the
    // engine poisoned, and the partial copy removed (since 2026-12-05;
    // before, "backup thread: … panicked", the engine not poisoned, and
    // the copy left marked unfinished).
    let to = elsewhere.path().join("copy");
    let backup = backup_where_reads_panic(d, &to);
    match backup {
        Err(e @ ConnectorError::ReadPanicked { .. }) => {
            let said = e.to_string();
            assert!(
                said.starts_with("backup of the archive at")
                    && said.contains("reading it panicked (sled lost a page)")
                    && said.contains("was removed"),
                "{said}"
            );
        }
        other => panic!("expected the backup's read panic as an error, got {other:?}"),
    }
    assert!(!to.exists(), "the partial copy is removed");
    assert!(dir
        .path()
        .join(cairn_engine::poisoned::POISON_FILE)
        .exists());
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let offsets: Vec<i64> = e.read(&tp, 0).unwrap().map(|r| r.unwrap().offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    e.close().unwrap();
    // A restore's read that panics once it sends stops it as damage it
    // can read does, after what was sent is acknowledged, with resume
    // points (since the night of 2026-12-04; before, the panic unwound out
    // of the restore, the records in flight given up): `--resume` only
    // for a restore made with `--offset-header` (without one, --resume
    // would be refused). The partition being read is told apart: a rerun
    // stops at the damage again while it stays (since 2026-12-06).
    for (header, next) in [
        (
            None,
            format!(
                "once it is repaired, the same command with --topic {} --partition 0 --from 0 and --append",
                kafka.topic
            ),
        ),
        (
            Some("cairn-offset"),
            format!(
                "once it is repaired, the same command with --resume and --topic {} --partition 0, in place of its own --topic and --partition;",
                kafka.topic
            ),
        ),
    ] {
        use clap::Parser;
        let mut argv = vec!["cairn", "restore", "--data", d, "--brokers", &brokers];
        if let Some(h) = header {
            argv.extend(["--offset-header", h]);
        }
        let cli = cairn_connector::cli::Cli::try_parse_from(&argv).unwrap();
        let cairn_connector::cli::Command::Restore(a) = cli.command else {
            unreachable!()
        };
        let result = where_reads_panic(cairn_connector::cli::restore::run(a));
        match result {
            Err(e @ ConnectorError::RestoreCut { .. }) => {
                let said = e.to_string();
                assert!(
                    said.contains("reading it panicked (sled lost a page)"),
                    "{argv:?}: {said}"
                );
                assert!(said.contains(&next), "{argv:?}: {said}");
                assert_eq!(
                    said.contains("with --resume"),
                    header.is_some(),
                    "{argv:?}: {said}"
                );
            }
            other => panic!("{argv:?}: expected the read's panic to cut the restore, got {other:?}"),
        }
        // The panic poisoned the engine, which the restore dropped: the
        // archive opens as before.
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        assert_eq!(e.durable_offset(&tp), Some(10));
        e.close().unwrap();
    }
    // A panic in sled's reads while a running archive serves them (a live
    // export): an error, the engine poisoned as a stopped archive's is,
    // and the run told to stop (since the night of 2026-12-04; before, it
    // went on writing through that sled).
    let e = std::sync::Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stopped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hook = stopped.clone();
    let server = cairn_connector::live::LiveServer::start_with(
        e.clone(),
        Some(Box::new(move || {
            hook.store(true, std::sync::atomic::Ordering::SeqCst)
        })),
    )
    .unwrap();
    let export = export_where_reads_panic(d, &out);
    // The answer's error is printed by the command (its text is checked
    // in live.rs's tests); the exit is the export's failure.
    assert_eq!(export.unwrap(), std::process::ExitCode::from(1));
    assert_eq!(std::fs::read(&out).unwrap(), b"kept");
    assert!(e.is_poisoned(), "the live read's panic poisons the engine");
    assert!(
        stopped.load(std::sync::atomic::Ordering::SeqCst),
        "and stops the run"
    );
    server.stop();
}

/// `cairn export --data data --output out`, with every read of sled's
/// pages panicking (the failpoint) while it runs.
fn export_where_reads_panic(
    data: &str,
    out: &std::path::Path,
) -> cairn_connector::Result<std::process::ExitCode> {
    use clap::Parser;
    let cli = cairn_connector::cli::Cli::try_parse_from([
        "cairn",
        "export",
        "--data",
        data,
        "--output",
        out.to_str().unwrap(),
    ])
    .unwrap();
    let cairn_connector::cli::Command::Export(a) = cli.command else {
        unreachable!()
    };
    where_reads_panic(cairn_connector::cli::export::run(a))
}

/// `cairn backup --data data --to to`, its copy of the archive's log
/// panicking (the failpoint, where a read of the archive's pages would).
fn backup_where_reads_panic(
    data: &str,
    to: &std::path::Path,
) -> cairn_connector::Result<std::process::ExitCode> {
    use clap::Parser;
    let cli = cairn_connector::cli::Cli::try_parse_from([
        "cairn",
        "backup",
        "--data",
        data,
        "--to",
        to.to_str().unwrap(),
    ])
    .unwrap();
    let cairn_connector::cli::Command::Backup(a) = cli.command else {
        unreachable!()
    };
    panicking_at(
        cairn_engine::FAILPOINT_BACKUP_AFTER_LOG,
        cairn_connector::cli::backup::run(a),
    )
}

/// `cairn status --data data`, without Kafka.
fn status_of(data: &std::path::Path) -> StatusArgs {
    StatusArgs {
        data: DataArg {
            data: data.to_path_buf(),
        },
        brokers: None,
        group: None,
        connect_timeout_ms: 10_000,
        kafka: Vec::new(),
        json: false,
    }
}

/// `command` run to its end with every read of sled's pages panicking
/// (the failpoint), removed after.
fn where_reads_panic<T>(command: impl std::future::Future<Output = T>) -> T {
    panicking_at(cairn_engine::FAILPOINT_READ_FILL, command)
}

/// `command` run to its end with `failpoint` panicking ("sled lost a
/// page"), removed after.
fn panicking_at<T>(failpoint: &str, command: impl std::future::Future<Output = T>) -> T {
    fail::cfg(failpoint, "panic(sled lost a page)").unwrap();
    let result = tokio::runtime::Runtime::new().unwrap().block_on(command);
    fail::remove(failpoint);
    result
}

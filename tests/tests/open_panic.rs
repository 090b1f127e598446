//! A command reading a stopped archive whose open panics (sled 0.34.7 does
//! on some damage to its own files: its issues #1155 and #1387) says so as
//! an error naming the archive, as `cairn verify` does, not a crash with
//! exit 101. The panic is a failpoint here, reached by every open: this
//! file is a process of its own, so no other test's open meets it.

use cairn_connector::cli::status::StatusArgs;
use cairn_connector::cli::DataArg;
use cairn_connector::ConnectorError;
use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};

#[test]
fn an_open_that_panics_is_an_error_naming_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&TopicPartition::new("t", 0), 0..10, 10)])
        .unwrap();
    e.close().unwrap();
    fail::cfg(
        cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR,
        "panic(sled lost its way)",
    )
    .unwrap();
    let args = StatusArgs {
        data: DataArg {
            data: dir.path().to_path_buf(),
        },
        brokers: None,
        group: None,
        connect_timeout_ms: 10_000,
        kafka: Vec::new(),
        json: false,
    };
    let result = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(cairn_connector::cli::status::run(args));
    fail::remove(cairn_engine::FAILPOINT_RECOVERY_MID_REPAIR);
    let err = result.expect_err("the open panicked");
    assert!(matches!(err, ConnectorError::OpenPanicked { .. }), "{err}");
    let said = err.to_string();
    assert!(said.contains(&dir.path().display().to_string()), "{said}");
    assert!(said.contains("sled lost its way"), "{said}");
    // Nothing was changed: it opens once the panic is gone.
    Engine::open(EngineConfig::new(dir.path())).unwrap();
}

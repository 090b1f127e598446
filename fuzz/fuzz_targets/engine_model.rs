#![no_main]
//! Operation sequences against the engine and an in-memory model: see
//! cairn_engine::fuzzing::engine_model.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("scratch dir");
    cairn_engine::fuzzing::engine_model(data, dir.path());
});

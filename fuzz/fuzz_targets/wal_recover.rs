#![no_main]
//! A store written by the engine, damaged as the input says, then opened,
//! read and verified: see cairn_engine::fuzzing::wal_recover.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("scratch dir");
    cairn_engine::fuzzing::wal_recover(data, dir.path());
});

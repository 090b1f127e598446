#![no_main]
//! A store as a process crash leaves it (acknowledged appends, then writes
//! never synced, the last cut after any of its inserts), then opened in
//! both modes, read, verified and appended to: see
//! cairn_engine::fuzzing::wal_crash.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("scratch dir");
    cairn_engine::fuzzing::wal_crash(data, dir.path());
});

//! Replays every committed fuzz input (fuzz/corpus/<target>/ and
//! fuzz/regressions/<target>/) through the library bodies of the cargo-fuzz
//! targets, on stable Rust, in `cargo test --workspace`.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let hidden = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if p.is_file() && !hidden {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn replay(target: &str, run: impl Fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no committed inputs for {target}");
    for f in &files {
        let data = std::fs::read(f).unwrap();
        eprintln!("{target}: {}", f.display());
        run(&data);
    }
}

/// [`replay`] for a target that writes a store: each input in a scratch
/// directory of its own.
fn replay_in_scratch(target: &str, run: fn(&[u8], &Path)) {
    replay(target, |data| {
        let dir = tempfile::tempdir().unwrap();
        run(data, dir.path());
    });
}

#[test]
fn frame_decode_corpus() {
    replay("frame_decode", cairn_engine::fuzzing::frame_decode);
}

#[test]
fn small_decode_corpus() {
    replay("small_decode", cairn_engine::fuzzing::small_decode);
}

/// Seeded random inputs through `small_decode`: every decoder, sealed and
/// not, on bytes that are mostly a valid value with a few changed.
#[test]
fn small_decode_random_inputs() {
    use rand::{Rng, SeedableRng};
    let seed = cairn_engine::fuzzing::seed("small_decode_random_inputs");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let seeds: Vec<Vec<u8>> = inputs("small_decode")
        .iter()
        .map(|f| std::fs::read(f).unwrap())
        .collect();
    let cases = std::env::var("CAIRN_FUZZ_CASES").ok().map_or(2_000, |s| {
        s.parse::<usize>().expect("CAIRN_FUZZ_CASES") * 10
    });
    for _ in 0..cases {
        let mut data = seeds[rng.gen_range(0..seeds.len())].clone();
        for _ in 0..rng.gen_range(0..4) {
            match rng.gen_range(0..3) {
                0 if data.len() > 2 => {
                    let i = rng.gen_range(2..data.len());
                    data[i] ^= 1 << rng.gen_range(0..8);
                }
                1 if data.len() > 2 => {
                    let n = rng.gen_range(2..data.len());
                    data.truncate(n);
                }
                _ => data.push(rng.gen()),
            }
        }
        cairn_engine::fuzzing::small_decode(&data);
    }
}

#[test]
fn wal_recover_corpus() {
    replay_in_scratch("wal_recover", cairn_engine::fuzzing::wal_recover);
}

#[test]
fn wal_crash_corpus() {
    replay_in_scratch("wal_crash", cairn_engine::fuzzing::wal_crash);
}

/// Seeded random inputs through `wal_crash`: stores as a crash left them
/// (acknowledged appends, unsynced writes, the last cut after any of its
/// inserts). `CAIRN_FUZZ_CASES` (default 60) sets how many; `CAIRN_SEED`
/// replays a run.
#[test]
fn wal_crash_random_inputs() {
    random_inputs(
        "wal_crash_random_inputs",
        // Long enough for a whole plan (about 55 bytes): shorter inputs
        // read as zeros past their end, leaving the fields read last off
        // (until 2026-12-06, 8..40; an audit).
        8..72,
        cairn_engine::fuzzing::wal_crash,
    );
}

/// `CAIRN_FUZZ_CASES` (default 60) random inputs of `len` bytes, seeded
/// ([`cairn_engine::fuzzing::seed`]: printed, `CAIRN_SEED` replays), each
/// through `target` in a scratch directory of its own.
fn random_inputs(test: &str, len: std::ops::Range<usize>, target: fn(&[u8], &Path)) {
    use rand::{Rng, SeedableRng};
    let seed = cairn_engine::fuzzing::seed(test);
    let cases: usize = std::env::var("CAIRN_FUZZ_CASES")
        .ok()
        .map(|s| s.parse().expect("CAIRN_FUZZ_CASES must be a number"))
        .unwrap_or(60);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..cases {
        let data: Vec<u8> = (0..rng.gen_range(len.clone())).map(|_| rng.gen()).collect();
        let dir = tempfile::tempdir().unwrap();
        eprintln!("case {case}: {} bytes", data.len());
        target(&data, dir.path());
    }
}

#[test]
fn engine_model_corpus() {
    replay_in_scratch("engine_model", cairn_engine::fuzzing::engine_model);
}

/// Seeded random inputs through `wal_recover`, beyond the committed corpus:
/// every damage kind, including a frame emptied into a hole, a value
/// copied into a reserved slot, and a flip whose checksum is made to hold
/// again. `CAIRN_FUZZ_CASES` (default 60) sets how
/// many; `CAIRN_SEED` replays a run.
#[test]
fn wal_recover_random_inputs() {
    random_inputs(
        "wal_recover_random_inputs",
        8..200,
        cairn_engine::fuzzing::wal_recover,
    );
}

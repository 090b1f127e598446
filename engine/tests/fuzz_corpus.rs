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

#[test]
fn frame_decode_corpus() {
    replay("frame_decode", cairn_engine::fuzzing::frame_decode);
}

#[test]
fn wal_recover_corpus() {
    replay("wal_recover", |data| {
        let dir = tempfile::tempdir().unwrap();
        cairn_engine::fuzzing::wal_recover(data, dir.path());
    });
}

#[test]
fn engine_model_corpus() {
    replay("engine_model", |data| {
        let dir = tempfile::tempdir().unwrap();
        cairn_engine::fuzzing::engine_model(data, dir.path());
    });
}

/// Seeded random inputs through `wal_recover`, beyond the committed corpus:
/// every damage kind, including a frame emptied into a hole and a value
/// copied into a reserved slot. `CAIRN_FUZZ_CASES` (default 60) sets how
/// many; `CAIRN_SEED` replays a run.
#[test]
fn wal_recover_random_inputs() {
    use rand::{Rng, SeedableRng};
    let seed = cairn_engine::fuzzing::seed("wal_recover_random_inputs");
    let cases: usize = std::env::var("CAIRN_FUZZ_CASES")
        .ok()
        .map(|s| s.parse().expect("CAIRN_FUZZ_CASES must be a number"))
        .unwrap_or(60);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for case in 0..cases {
        let len = rng.gen_range(8..200);
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let dir = tempfile::tempdir().unwrap();
        eprintln!("case {case}: {} bytes", data.len());
        cairn_engine::fuzzing::wal_recover(&data, dir.path());
    }
}

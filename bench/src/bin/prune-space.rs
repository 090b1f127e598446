//! What pruning does to the store's size on disk.
//!
//! `cargo run --release -p cairn-bench --bin prune-space -- [ROUNDS]`
//!
//! Each round appends 1M records of 100 B over 4 partitions (1000 records
//! per append), then prunes every partition to its newest 10 %. Prints the
//! size of the store's files after writing and after pruning, per round,
//! beside the size the same writes reach without pruning (measured in the
//! same run, in a directory of its own).

use std::path::Path;
use std::time::Instant;

use cairn_engine::fuzzing::batch;
use cairn_engine::{Engine, EngineConfig, TopicPartition};

const PARTITIONS: i32 = 4;
const RECORDS_PER_ROUND: i64 = 1_000_000;
const RECORDS_PER_APPEND: i64 = 1000;

fn files_bytes(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).expect("read the store's directory") {
        let e = e.expect("directory entry");
        let m = e.metadata().expect("metadata");
        n += if m.is_dir() {
            files_bytes(&e.path())
        } else {
            m.len()
        };
    }
    n
}

fn mb(n: u64) -> String {
    format!("{:.1} MB", n as f64 / 1e6)
}

fn main() {
    let rounds: i64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("ROUNDS: a number"))
        .unwrap_or(6);
    let tps: Vec<_> = (0..PARTITIONS)
        .map(|p| TopicPartition::new("t", p))
        .collect();
    let per_tp = RECORDS_PER_ROUND / PARTITIONS as i64;
    let step = RECORDS_PER_APPEND / PARTITIONS as i64;
    // Under target/bench, as the other benches' stores: `$TMPDIR` may be a
    // tmpfs, where the passes' fsyncs cost nothing (until 2026-12-05 this
    // bench wrote there, seen in review).
    let pruned_dir = scratch();
    let kept_dir = scratch();
    let pruned = Engine::open(EngineConfig::new(pruned_dir.path())).expect("open");
    let kept = Engine::open(EngineConfig::new(kept_dir.path())).expect("open");
    println!("round | written | pruned store after writing | after pruning (time) | store without pruning");
    let mut next = 0i64;
    for round in 1..=rounds {
        let end = next + per_tp;
        while next < end {
            let bs: Vec<_> = tps
                .iter()
                .map(|tp| batch(tp, next..next + step, 100))
                .collect();
            pruned.append(&bs).expect("append");
            kept.append(&bs).expect("append");
            next += step;
        }
        let written = files_bytes(pruned_dir.path());
        let t = Instant::now();
        for tp in &tps {
            pruned
                .truncate_before(tp, next - per_tp / 10)
                .expect("truncate");
        }
        let took = t.elapsed();
        println!(
            "{round} | {round}M records | {} | {} ({:.0} ms) | {}",
            mb(written),
            mb(files_bytes(pruned_dir.path())),
            took.as_secs_f64() * 1e3,
            mb(files_bytes(kept_dir.path()))
        );
    }
    let v = pruned.verify().expect("verify");
    assert!(v.is_clean(), "{:?}", v.problems);
    println!("pruned store: {} records left, verify clean", v.records);
}

#[path = "../scratch.rs"]
mod scratch;
use scratch::scratch;

//! The engine's durable append of one put's records against the floor's
//! append + `fdatasync` of the same number of bytes to a plain file, at a
//! given record size, alternated put by put in one process (this disk's
//! speed drifts by several times within minutes; alternating keeps both
//! sides in the same drift).
//!
//! `cargo run --release -p cairn-bench --bin put-sizes -- [RECORD_BYTES [PUTS [RECORDS_PER_PUT [PARTITIONS]]]]`
//! (defaults 1024, 60, 1000, 32: a put as `--batch-records-max 1000`
//! makes them over 32 partitions). Stores and the file go under
//! `target/bench`, on the disk under test (not `$TMPDIR`, a tmpfs on some
//! machines).

use std::io::Write;
use std::time::Instant;

use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use hdrhistogram::Histogram;

#[path = "../scratch.rs"]
mod scratch;

/// The file is replaced past this size, as the put-to-commit floor's is.
const FILE_BYTES_MAX: u64 = 1 << 30;

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .map(|a| a.parse().expect("a whole number"))
        .unwrap_or(default)
}

/// A fresh floor file, made durable with its directory entry before any
/// timed append: the first fdatasync of a new file would otherwise also pay
/// for its creation, which the engine's long-lived data file never does.
fn new_floor_file(path: &std::path::Path) -> std::fs::File {
    let file = std::fs::File::create(path).expect("floor file");
    file.sync_all().expect("floor file fsync");
    let dir = path.parent().expect("floor file's directory");
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("floor directory fsync");
    file
}

fn main() {
    cairn_connector::allocator::tune();
    let (size, puts, per_put, partitions) = (arg(1, 1024), arg(2, 60), arg(3, 1000), arg(4, 32));
    assert!(size > 0 && puts > 0 && partitions > 0 && per_put >= partitions);
    let dir = scratch::scratch();
    let engine = Engine::open(EngineConfig::new(dir.path().join("store"))).expect("engine");
    let path = dir.path().join("floor.dat");
    let mut file = new_floor_file(&path);
    let (mut file_bytes, mut payload) = (0u64, 0u64);
    let mut next = vec![0i64; partitions];
    let (mut engine_us, mut file_us) = (histogram(), histogram());
    for put in 0..puts {
        // Built before the clock starts, as the consumer hands them over.
        let batches: Vec<RecordBatch> = (0..partitions)
            .map(|p| {
                let n = per_put / partitions + usize::from(p < per_put % partitions);
                let first = next[p];
                next[p] += n as i64;
                RecordBatch {
                    tp: TopicPartition::new("sizes", p as i32),
                    records: (0..n as i64)
                        .map(|i| Record::with_value(first + i, vec![b'a' + (put % 26) as u8; size]))
                        .collect(),
                }
            })
            .collect();
        let bytes = (per_put * size) as u64;
        payload += bytes;
        let t = Instant::now();
        engine.append(&batches).expect("append");
        engine_us.saturating_record(t.elapsed().as_micros().max(1) as u64);
        drop(batches);

        if file_bytes > 0 && file_bytes + bytes > FILE_BYTES_MAX {
            drop(file);
            std::fs::remove_file(&path).expect("remove floor file");
            file = new_floor_file(&path);
            file_bytes = 0;
        }
        file_bytes += bytes;
        let buf = vec![b'f'; bytes as usize];
        let t = Instant::now();
        file.write_all(&buf).expect("floor write");
        file.sync_data().expect("floor fdatasync");
        file_us.saturating_record(t.elapsed().as_micros().max(1) as u64);
    }
    let p = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q);
    println!(
        "{puts} puts of {per_put} records of {size} B over {partitions} partitions ({:.1} MB a put, {:.0} MB in all)",
        (per_put * size) as f64 / 1e6,
        payload as f64 / 1e6
    );
    println!(
        "engine append (durable): p50 {} us, p90 {} us, max {} us",
        p(&engine_us, 0.5),
        p(&engine_us, 0.9),
        engine_us.max()
    );
    println!(
        "file write + fdatasync:  p50 {} us, p90 {} us, max {} us",
        p(&file_us, 0.5),
        p(&file_us, 0.9),
        file_us.max()
    );
    println!(
        "engine / file at p50: {:.2}x",
        p(&engine_us, 0.5) as f64 / p(&file_us, 0.5).max(1) as f64
    );
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

//! Engine append + fsync against two baselines on the same bytes, in the
//! same run: a raw file `write` + `fdatasync` (the floor) and a raw sled
//! `insert(one value)` + `flush` (the sled floor; not durable on its own,
//! see docs/BENCHMARKS.md). Batch sizes 1..10 000, records of 100 B and 1 KiB.
//!
//! `cargo bench -p cairn-bench --bench append`

use std::io::Write;
use std::time::{Duration, Instant};

use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const BATCHES: [usize; 5] = [1, 10, 100, 1_000, 10_000];
const RECORD_BYTES: [usize; 2] = [100, 1024];

fn batch(tp: &TopicPartition, start: i64, n: usize, size: usize) -> RecordBatch {
    RecordBatch {
        tp: tp.clone(),
        records: (0..n as i64)
            .map(|i| Record::with_value(start + i, vec![b'v'; size]))
            .collect(),
    }
}

fn scratch() -> tempfile::TempDir {
    // Beside the workspace's target/, on the disk under test (not a tmpfs).
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&base).expect("bench dir");
    tempfile::tempdir_in(base).expect("scratch dir")
}

fn append(c: &mut Criterion) {
    for size in RECORD_BYTES {
        let mut g = c.benchmark_group(format!("append_fsync_{size}B"));
        g.sample_size(20).measurement_time(Duration::from_secs(3));
        for n in BATCHES {
            g.throughput(Throughput::Bytes((n * size) as u64));
            g.bench_with_input(BenchmarkId::new("cairn_engine", n), &n, |b, &n| {
                let dir = scratch();
                let e = Engine::open(EngineConfig::new(dir.path())).expect("open");
                let tp = TopicPartition::new("bench", 0);
                let mut next = 0i64;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let bt = batch(&tp, next, n, size);
                        next += n as i64;
                        let t = Instant::now();
                        e.append(std::slice::from_ref(&bt)).expect("append");
                        total += t.elapsed();
                    }
                    total
                });
            });
            g.bench_with_input(BenchmarkId::new("file_write_fdatasync", n), &n, |b, &n| {
                let dir = scratch();
                let mut f = std::fs::File::create(dir.path().join("log")).expect("file");
                let bytes = vec![b'v'; n * size];
                b.iter(|| {
                    f.write_all(&bytes).expect("write");
                    f.sync_data().expect("fdatasync");
                });
            });
            g.bench_with_input(BenchmarkId::new("sled_insert_flush", n), &n, |b, &n| {
                let dir = scratch();
                let db = sled::Config::new()
                    .path(dir.path())
                    .flush_every_ms(None)
                    .cache_capacity(64 << 20)
                    .open()
                    .expect("sled");
                let value = vec![b'v'; n * size];
                let mut k = 0u64;
                b.iter(|| {
                    db.insert(k.to_be_bytes(), value.as_slice())
                        .expect("insert");
                    db.flush().expect("flush");
                    k += 1;
                });
            });
        }
        g.finish();
    }
}

criterion_group!(benches, append);
criterion_main!(benches);

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

#[path = "../src/scratch.rs"]
mod scratch;
use scratch::scratch;

/// Payload bytes a store or file takes before it is replaced by a new one,
/// outside the timing, on all three sides alike: criterion's warm-up and
/// samples append 7 to 10 GB of the 1 MB and 10 MB cases, and fdatasync
/// slows down on files past about 2.4 GB (docs/BENCHMARKS.md, "A second
/// correction"; the put-to-commit floor rotates its file the same way).
const STORE_BYTES_MAX: u64 = 1 << 30;

/// One side's store (an engine, a file, a sled database) in a scratch
/// directory of its own, replaced by a new one past [`STORE_BYTES_MAX`].
struct Rotating<T> {
    make: Box<dyn FnMut(&std::path::Path) -> T>,
    /// The store first: dropped before its directory is removed.
    current: Option<(T, tempfile::TempDir)>,
    written: u64,
}

impl<T> Rotating<T> {
    fn new(make: impl FnMut(&std::path::Path) -> T + 'static) -> Self {
        Rotating {
            make: Box::new(make),
            current: None,
            written: 0,
        }
    }

    /// The store to write `bytes` more to (call it outside the timing): a
    /// new one when they would take the current one past the bound.
    fn for_write(&mut self, bytes: u64) -> &mut T {
        if self.written > 0 && self.written + bytes > STORE_BYTES_MAX {
            self.current = None;
            self.written = 0;
        }
        self.written += bytes;
        let make = &mut self.make;
        &mut self
            .current
            .get_or_insert_with(|| {
                let dir = scratch();
                (make(dir.path()), dir)
            })
            .0
    }
}

fn append(c: &mut Criterion) {
    for size in RECORD_BYTES {
        let mut g = c.benchmark_group(format!("append_fsync_{size}B"));
        g.sample_size(20).measurement_time(Duration::from_secs(3));
        for n in BATCHES {
            g.throughput(Throughput::Bytes((n * size) as u64));
            let bytes = (n * size) as u64;
            g.bench_with_input(BenchmarkId::new("cairn_engine", n), &n, |b, &n| {
                let tp = TopicPartition::new("bench", 0);
                let mut store =
                    Rotating::new(|dir| Engine::open(EngineConfig::new(dir)).expect("open"));
                let mut next = 0i64;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let e = store.for_write(bytes);
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
                let data = vec![b'v'; n * size];
                let mut file = Rotating::new(|dir| {
                    let f = std::fs::File::create(dir.join("log")).expect("file");
                    // Its creation durable before timing, not paid by the
                    // first timed fdatasync.
                    f.sync_all().expect("fsync");
                    std::fs::File::open(dir)
                        .and_then(|d| d.sync_all())
                        .expect("directory fsync");
                    f
                });
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let f = file.for_write(bytes);
                        let t = Instant::now();
                        f.write_all(&data).expect("write");
                        f.sync_data().expect("fdatasync");
                        total += t.elapsed();
                    }
                    total
                });
            });
            g.bench_with_input(BenchmarkId::new("sled_insert_flush", n), &n, |b, &n| {
                let value = vec![b'v'; n * size];
                let mut db = Rotating::new(|dir| {
                    sled::Config::new()
                        .path(dir)
                        .flush_every_ms(None)
                        .cache_capacity(64 << 20)
                        .open()
                        .expect("sled")
                });
                let mut k = 0u64;
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let d = db.for_write(bytes);
                        let t = Instant::now();
                        d.insert(k.to_be_bytes(), value.as_slice()).expect("insert");
                        d.flush().expect("flush");
                        total += t.elapsed();
                        k += 1;
                    }
                    total
                });
            });
        }
        g.finish();
    }
}

criterion_group!(benches, append);
criterion_main!(benches);

//! Group commit: 1, 2, 4 and 8 threads appending 100-record batches of
//! 100 B to their own partitions at once. One iteration is one round in
//! which every thread appends once; the fsyncs per append of each case are
//! printed after it (below 1 means appends shared fsyncs).
//!
//! `cargo bench -p cairn-bench --bench group_commit`

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("group_commit_100x100B");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for threads in [1usize, 2, 4, 8] {
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
        std::fs::create_dir_all(&base).expect("bench dir");
        let dir = tempfile::tempdir_in(base).expect("scratch");
        let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).expect("open"));
        let next = Arc::new(std::sync::Mutex::new(vec![0i64; threads]));
        g.throughput(Throughput::Elements((threads * 100) as u64));
        g.bench_with_input(
            BenchmarkId::new("threads", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    let barrier = Arc::new(Barrier::new(threads + 1));
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            let (engine, barrier, next) =
                                (engine.clone(), barrier.clone(), next.clone());
                            std::thread::spawn(move || {
                                let tp = TopicPartition::new("gc", t as i32);
                                for _ in 0..iters {
                                    let start = {
                                        let mut n = next.lock().expect("offsets");
                                        let s = n[t];
                                        n[t] += 100;
                                        s
                                    };
                                    let batch = RecordBatch {
                                        tp: tp.clone(),
                                        records: (0..100)
                                            .map(|i| Record::with_value(start + i, vec![b'g'; 100]))
                                            .collect(),
                                    };
                                    barrier.wait();
                                    engine.append(&[batch]).expect("append");
                                    barrier.wait();
                                }
                            })
                        })
                        .collect();
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        barrier.wait();
                        let t = Instant::now();
                        barrier.wait();
                        total += t.elapsed();
                    }
                    for h in handles {
                        h.join().expect("appender");
                    }
                    total
                });
            },
        );
        // Over the warm-up and every sample of this case (its engine is
        // its own); a case a filter skipped ran no append, and says nothing
        // (it printed 0 appends and 0.000 fsyncs per append).
        let s = engine.stats();
        if s.appends > 0 {
            eprintln!(
                "group_commit threads={threads}: {} appends, {} fsyncs, {:.3} fsyncs per append (warm-up and samples)",
                s.appends,
                s.fsyncs,
                s.fsyncs as f64 / s.appends as f64
            );
        }
    }
    g.finish();
}

criterion_group!(benches, group_commit);
criterion_main!(benches);

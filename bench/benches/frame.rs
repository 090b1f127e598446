//! Frame encode and decode (CRC included), and entry body encode/decode
//! (bincode), in bytes per second.
//!
//! `cargo bench -p cairn-bench --bench frame`

use cairn_engine::body::{decode_entry, encode_entry};
use cairn_engine::frame::{self, FrameKind};
use cairn_engine::{Record, TopicPartition};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::hint::black_box;

fn frames(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame");
    for body_bytes in [1024usize, 64 << 10] {
        let body = vec![0xa5u8; body_bytes];
        let encoded = frame::encode(7, FrameKind::Records, 0, &body);
        g.throughput(Throughput::Bytes(body_bytes as u64));
        g.bench_with_input(BenchmarkId::new("encode", body_bytes), &body, |b, body| {
            b.iter(|| frame::encode(black_box(7), FrameKind::Records, 0, black_box(body)))
        });
        g.bench_with_input(BenchmarkId::new("decode", body_bytes), &encoded, |b, f| {
            b.iter(|| {
                frame::decode(black_box(7), black_box(f))
                    .expect("valid")
                    .body
                    .len()
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("entry_body");
    let tp = TopicPartition::new("bench", 0);
    for size in [100usize, 1024] {
        let records: Vec<Record> = (0..1000)
            .map(|i| Record::with_value(i, vec![b'v'; size]))
            .collect();
        let body = encode_entry(&tp, &records);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("encode_1000_records", size),
            &records,
            |b, r| b.iter(|| encode_entry(&tp, black_box(r))),
        );
        g.bench_with_input(
            BenchmarkId::new("decode_1000_records", size),
            &body,
            |b, body| b.iter(|| decode_entry(black_box(body)).expect("valid").records.len()),
        );
    }
    g.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);

//! Engine figures with their baselines, measured in the same run:
//! append+fsync p50 for 1 and 1000 records of 100 B against raw sled
//! `insert(one value)` + `flush` (not durable) and + `fdatasync` of the data
//! file and an fsync of every blob file sled created (durable),
//! records/s at 1000-record batches, open time of 1M vs 1k records, and
//! the bytes each case made the process write per payload byte while its
//! appends ran (write amplification, from `/proc/self/io`; until
//! 2026-12-06 the store's creation, open and close were counted too,
//! which a review thought would swamp batch 1's 25 KB of payload a half
//! at the default 500 iterations: measured, it moved nothing,
//! docs/BENCHMARKS.md).
//!
//! `cargo run --release -p cairn-bench --bin engine-figures [-- iterations]`

use std::time::{Duration, Instant};

use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use hdrhistogram::Histogram;

fn records(tp: &TopicPartition, start: i64, n: usize) -> RecordBatch {
    RecordBatch {
        tp: tp.clone(),
        records: (0..n as i64)
            .map(|i| Record::with_value(start + i, vec![b'x'; 100]))
            .collect(),
    }
}

/// Bytes this process has passed to write calls so far (`wchar` in
/// `/proc/self/io`: every thread, page cache included; 0 off Linux).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar: ").and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// A case's timings and its bytes written per payload byte.
struct Case {
    hist: Histogram<u64>,
    elapsed: Duration,
    amplification: f64,
}

impl Case {
    /// Two runs of one case as one: their samples, times and bytes pooled.
    fn pooled(mut self, other: Case) -> Case {
        self.hist.add(&other.hist).expect("same histogram bounds");
        self.elapsed += other.elapsed;
        self.amplification = (self.amplification + other.amplification) / 2.0;
        self
    }
}

/// A case from `f`'s timings and the bytes it wrote while its appends ran
/// ([`Appends`]).
fn measure(payload_bytes: usize, f: impl FnOnce() -> Appends) -> Case {
    let a = f();
    Case {
        hist: a.hist,
        elapsed: a.elapsed,
        amplification: a.written_bytes as f64 / payload_bytes as f64,
    }
}

/// What a case's appends took: their timings, their summed time, and the
/// bytes the process wrote from the first to the last (not the store's
/// creation, open or close).
struct Appends {
    hist: Histogram<u64>,
    elapsed: Duration,
    written_bytes: u64,
}

#[path = "../scratch.rs"]
mod scratch;
use scratch::scratch;

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn engine_p50(batch: usize, iters: usize) -> Appends {
    let dir = scratch();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tp = TopicPartition::new("b", 0);
    let mut h = Histogram::<u64>::new(3).unwrap();
    // Only the appends are timed: the records are built before and freed
    // after, as the sled baselines reuse one prebuilt value.
    let mut total = Duration::ZERO;
    let w0 = written_bytes();
    for i in 0..iters {
        let b = [records(&tp, (i * batch) as i64, batch)];
        let t = Instant::now();
        e.append(&b).unwrap();
        let took = t.elapsed();
        total += took;
        h.record(us(took).max(1)).unwrap();
        drop(b);
    }
    Appends {
        hist: h,
        elapsed: total,
        written_bytes: written_bytes() - w0,
    }
}

/// Appends of 1000 records spread over `partitions` partitions (a frame
/// each), as a put of records from many partitions writes them: its tail is
/// where the slots a write reserves for the next frames would show (every
/// ninth append at 32 frames each, before syncs topped them up).
fn engine_spread(partitions: usize, iters: usize) -> (Histogram<u64>, cairn_engine::EngineStats) {
    let dir = scratch();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let tps: Vec<_> = (0..partitions)
        .map(|p| TopicPartition::new("s", p as i32))
        .collect();
    let per = 1000 / partitions;
    let mut h = Histogram::<u64>::new(3).unwrap();
    for i in 0..iters {
        let b: Vec<_> = tps
            .iter()
            .map(|tp| records(tp, (i * per) as i64, per))
            .collect();
        let t = Instant::now();
        e.append(&b).unwrap();
        h.record(us(t.elapsed()).max(1)).unwrap();
        drop(b);
    }
    (h, e.stats())
}

/// How a raw sled baseline lays out the same bytes.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// sled defaults, one value per append: the baseline.
    OneValue,
    /// The engine's sled layout without the engine: 8 MiB segments, the
    /// bytes split into 64 KiB values, plus a 52-byte index value and a
    /// 44-byte summary value, as ordered single inserts (as the engine
    /// writes them since it stopped using `apply_batch`).
    EngineShaped,
}

/// fsync the blob files sled created since the last call, and their
/// directory if there were any: sled 0.34.7 writes a logged node over a
/// quarter of its segment size (128 KiB with the default 512 KiB segments,
/// so a leaf holding one 100 KB value and a few keys) to a file of its own
/// under `blobs/` and never fsyncs it, so the data file's fdatasync alone
/// does not make such a value durable. The engine does the same in its sync.
fn sync_new_blobs(
    dir: &std::path::Path,
    synced: &mut std::collections::HashSet<std::ffi::OsString>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut new_files = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if synced.contains(&name) {
            continue;
        }
        // sled deletes blobs it no longer needs at any time.
        if let Ok(f) = std::fs::File::open(entry.path()) {
            f.sync_all().unwrap();
            new_files = true;
        }
        synced.insert(name);
    }
    if new_files {
        std::fs::File::open(dir).unwrap().sync_all().unwrap();
    }
}

fn sled_p50(batch: usize, iters: usize, fdatasync: bool, layout: Layout) -> Appends {
    let dir = scratch();
    let mut cfg = sled::Config::new()
        .path(dir.path())
        .flush_every_ms(None)
        .cache_capacity(64 << 20);
    if layout == Layout::EngineShaped {
        cfg = cfg.segment_size(cairn_engine::SLED_SEGMENT_BYTES);
    }
    let db = cfg.open().unwrap();
    let f = std::fs::File::open(dir.path().join("db")).unwrap();
    let value = vec![b'x'; batch * 100];
    let mut blobs_synced = std::collections::HashSet::new();
    let mut h = Histogram::<u64>::new(3).unwrap();
    // Timed like the engine's case: the sum of the appends alone.
    let mut total = Duration::ZERO;
    let w0 = written_bytes();
    for i in 0..iters as u64 {
        let t = Instant::now();
        match layout {
            Layout::OneValue => {
                db.insert(i.to_be_bytes(), value.as_slice()).unwrap();
            }
            Layout::EngineShaped => {
                for (c, chunk) in value.chunks(64 << 10).enumerate() {
                    let k = [b"W".as_slice(), &(i * 64 + c as u64).to_be_bytes()].concat();
                    db.insert(k, chunk).unwrap();
                }
                db.insert([b"I".as_slice(), &i.to_be_bytes()].concat(), &[0u8; 52][..])
                    .unwrap();
                db.insert(&b"P\x00b\x00\x00\x00\x00"[..], &[0u8; 44][..])
                    .unwrap();
            }
        }
        db.flush().unwrap();
        if fdatasync {
            f.sync_data().unwrap();
            sync_new_blobs(&dir.path().join("blobs"), &mut blobs_synced);
        }
        let took = t.elapsed();
        total += took;
        h.record(us(took).max(1)).unwrap();
    }
    Appends {
        hist: h,
        elapsed: total,
        written_bytes: written_bytes() - w0,
    }
}

/// Set for a child that fills a store (`DIR:RECORDS`), says so, and waits
/// to be killed.
const CRASH_CHILD_ENV: &str = "CAIRN_FIGURES_CRASH_CHILD";

/// A store of `n_records` in 4 partitions, in 1000-record appends.
fn fill(dir: &std::path::Path, n_records: usize) -> Engine {
    let tps: Vec<_> = (0..4).map(|p| TopicPartition::new("o", p)).collect();
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    let per = n_records / tps.len();
    let mut o = 0;
    while o < per {
        let n = 1000.min(per - o);
        let batches: Vec<_> = tps.iter().map(|tp| records(tp, o as i64, n)).collect();
        e.append(&batches).unwrap();
        o += n;
    }
    e
}

/// The child's part: fill the store, say so on stdout, and wait (on
/// stdin, which the parent never closes first) for the SIGKILL.
fn crash_child(spec: &str) -> ! {
    use std::io::{Read, Write};
    let (dir, n) = spec.rsplit_once(':').expect("DIR:RECORDS");
    let _open = fill(std::path::Path::new(dir), n.parse().expect("RECORDS"));
    let mut out = std::io::stdout();
    writeln!(out, "filled").and_then(|()| out.flush()).unwrap();
    let _ = std::io::stdin().read(&mut [0u8; 1]);
    panic!("stdin closed before the parent killed this child");
}

fn open_time(n_records: usize, clean: bool) -> (Duration, u64) {
    let dir = scratch();
    if clean {
        fill(dir.path(), n_records).close().unwrap();
    } else {
        // A crash as `kill -9` leaves it, in a child process: nothing
        // closed, flushed or dropped. (A drop without a close syncs and
        // removes the open mark; a crash leaves the mark, and the next
        // open in the boot fsyncs the store and drops its cached pages
        // before recovery, which is part of what is timed here. Until the
        // night of 2026-12-03 this case was such a drop.)
        use std::io::BufRead;
        use std::os::unix::process::ExitStatusExt;
        use std::process::Stdio;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .env(
                CRASH_CHILD_ENV,
                format!("{}:{n_records}", dir.path().display()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "filled\n", "the child did not fill its store");
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "{status}");
    }
    let t = Instant::now();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let d = t.elapsed();
    (d, e.recovery_report().frames_checked)
}

fn main() {
    // The allocator settings of the `cairn` binary, so the engine is measured
    // as users run it (and every baseline in the same process gets them too).
    cairn_connector::allocator::tune();
    if let Ok(spec) = std::env::var(CRASH_CHILD_ENV) {
        crash_child(&spec);
    }
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    println!(
        "iterations per case: {} in two halves, the cases run in one order and then the reverse; 100-byte records; all in one run",
        iters.div_ceil(2) * 2
    );
    for batch in [1usize, 1000] {
        // Each case runs twice, in one order and then the reverse, and the
        // two halves are pooled: the disk drifts within minutes here, and
        // a fixed order gave each case the same place in the drift
        // (until 2026-12-05 the engine always ran first; seen in review).
        let half = iters.div_ceil(2);
        let payload = half * batch * 100;
        let run = |case: usize| match case {
            0 => measure(payload, || engine_p50(batch, half)),
            1 => measure(payload, || sled_p50(batch, half, false, Layout::OneValue)),
            2 => measure(payload, || sled_p50(batch, half, true, Layout::OneValue)),
            _ => measure(payload, || {
                sled_p50(batch, half, true, Layout::EngineShaped)
            }),
        };
        let first: Vec<Case> = (0..4).map(&run).collect();
        let mut second: Vec<Case> = (0..4).rev().map(&run).collect();
        second.reverse();
        let mut pooled = first.into_iter().zip(second).map(|(a, b)| a.pooled(b));
        let mut next = || pooled.next().expect("four cases");
        let (e, s, sd, ss) = (next(), next(), next(), next());
        let iters = half * 2;
        let p50 = |c: &Case| c.hist.value_at_quantile(0.5);
        let rps = |c: &Case| (iters * batch) as f64 / c.elapsed.as_secs_f64();
        println!(
            "batch {batch:>4}: engine append+fsync p50 {} us p99 {} us | raw sled insert+flush p50 {} us | raw sled insert+flush+fdatasync(+blobs) p50 {} us",
            p50(&e), e.hist.value_at_quantile(0.99), p50(&s), p50(&sd)
        );
        println!(
            "            ratio engine/sled-flush {:.2}x, engine/sled-flush+fdatasync {:.2}x; records/s engine {:.0}, sled {:.0}, sled+fdatasync {:.0} ({:.0}% / {:.0}%)",
            p50(&e) as f64 / p50(&s) as f64,
            p50(&e) as f64 / p50(&sd) as f64,
            rps(&e), rps(&s), rps(&sd), 100.0 * rps(&e) / rps(&s), 100.0 * rps(&e) / rps(&sd)
        );
        println!(
            "            raw sled in the engine's layout (8 MiB segments, 64 KiB values + index + summary) +fdatasync: p50 {} us, {:.0} records/s; engine/that {:.2}x, {:.0}%",
            p50(&ss),
            rps(&ss),
            p50(&e) as f64 / p50(&ss) as f64,
            100.0 * rps(&e) / rps(&ss)
        );
        println!(
            "            bytes written per payload byte: engine {:.2}, raw sled {:.2}, raw sled+fdatasync {:.2}, engine's layout {:.2}",
            e.amplification, s.amplification, sd.amplification, ss.amplification
        );
    }
    for partitions in [8, 32] {
        let (h, st) = engine_spread(partitions, iters);
        let q = |f: f64| h.value_at_quantile(f);
        println!(
            "{} records over {partitions:>2} partitions: engine append+fsync p50 {} us p90 {} us p99 {} us max {} us; slots reserved by writes {}, by syncs {}",
            1000 / partitions * partitions,
            q(0.5),
            q(0.9),
            q(0.99),
            h.max(),
            st.slots_reserved_by_writes,
            st.slots_reserved_by_syncs
        );
    }
    for (n, clean) in [
        (1_000, true),
        (1_000_000, true),
        (1_000, false),
        (1_000_000, false),
    ] {
        let (d, frames) = open_time(n, clean);
        println!(
            "open after {} of {n:>9} records: {:>8.2} ms, frames checked {frames}",
            if clean { "clean close" } else { "crash      " },
            d.as_secs_f64() * 1e3
        );
    }
}

//! What one small put costs as the number of partitions grows: the archive
//! sink's `put` of one record, then its `pre_commit` (the engine's flush
//! and fdatasync, then the durable offsets of the partitions asked about),
//! asked about what the worker asks (worker.rs, handed.rs: since
//! 2026-12-06 the partitions put to since the sink last declared them,
//! here the one just put; every assigned partition before), then the
//! commit tracker's part (the sink's word taken, the commit chosen, its
//! acknowledgement recorded: commit.rs), at 32, 1,000 and 10,000
//! partitions archived and assigned. A trickle spread over many partitions
//! under `every-put`: each put touches one partition.
//!
//! `cargo run --release -p cairn-bench --bin partition-scale -- [PUTS]`
//! (default 2000 per size). The store goes under `target/bench`, on the disk
//! under test. Reports the p50 of the put alone, the p50 and p99 of the
//! whole step, and the p50 of a second `pre_commit` right after it, with
//! nothing to write and nothing to ask about (the bookkeeping: a sync that
//! flushes nothing), each against the
//! 32-partition figure of the same run. Until 2026-12-06 the step was the
//! put and the `pre_commit` alone, asked about every assigned partition,
//! and the idle `pre_commit` was asked about every one too.
//!
//! Then, at each size, one retention pass (`pruner::prune`) that deletes
//! an entry or more of every partition: its wall time and the engine's
//! fsyncs during it (one per partition until 2026-12-06). Then the same
//! with the `cairn prune` command line (`cairn prune --keep-bytes 100B`,
//! after one more record each): the whole command's wall time, its open
//! and close of the archive included (one fsync per partition pruned until
//! 2026-12-06). The binary is the `cairn` beside this harness (built with
//! `cargo build --release --bin cairn`), or `$CAIRN_BIN`, to time
//! another build's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use cairn_connector::commit::CommitTracker;
use cairn_connector::pruner::{self, Retention};
use cairn_connector::{ArchiveSink, SinkTask};
use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
use hdrhistogram::Histogram;

#[path = "../scratch.rs"]
mod scratch;

/// The partitions of a store of `count`, spread over topics of 20 each.
fn partitions(count: usize) -> Vec<TopicPartition> {
    (0..count)
        .map(|i| TopicPartition::new(format!("topic-{:04}", i / 20), (i % 20) as i32))
        .collect()
}

struct Figures {
    partitions: usize,
    /// The put alone (the engine's write, no sync).
    put_p50_us: u64,
    step_p50_us: u64,
    step_p99_us: u64,
    /// A second `pre_commit` right after the step, with nothing to write:
    /// the bookkeeping without the disk.
    bookkeeping_p50_us: u64,
    /// A retention pass that prunes one entry of every partition.
    prune_ms: u64,
    prune_fsyncs: u64,
    pruned: u64,
    /// `cairn prune` of one entry of every partition, the whole command.
    command_prune_ms: u64,
}

fn measure(dir: &std::path::Path, count: usize, puts: usize) -> Figures {
    let path = dir.join(format!("scale-{count}"));
    let _ = std::fs::remove_dir_all(&path);
    let engine = Arc::new(Engine::open(EngineConfig::new(&path)).expect("open"));
    let tps = partitions(count);
    // Every partition archived once, in puts of up to 1,000 partitions.
    for chunk in tps.chunks(1000) {
        let batches: Vec<RecordBatch> = chunk
            .iter()
            .map(|tp| RecordBatch {
                tp: tp.clone(),
                records: vec![Record::with_value(0, vec![b'v'; 100])],
            })
            .collect();
        engine.append(&batches).expect("seed");
    }
    let mut sink = ArchiveSink::new(engine.clone());
    let assigned: BTreeSet<TopicPartition> = tps.iter().cloned().collect();
    let mut consumed: BTreeMap<TopicPartition, i64> =
        tps.iter().map(|tp| (tp.clone(), 1)).collect();
    // Every partition resumed at 1, declared and committed there, as after
    // an assignment's first commit.
    let mut tracker = CommitTracker::default();
    tracker.record_open(&tps, &consumed, &consumed);
    let mut step = Histogram::<u64>::new(3).expect("histogram");
    let mut idle = Histogram::<u64>::new(3).expect("histogram");
    let mut put = Histogram::<u64>::new(3).expect("histogram");
    for i in 0..puts {
        let tp = &tps[i % count];
        let offset = consumed[tp];
        let t0 = Instant::now();
        let batch = RecordBatch {
            tp: tp.clone(),
            records: vec![Record::with_value(offset, vec![b'v'; 100])],
        };
        sink.put(std::slice::from_ref(&batch)).expect("put");
        let put_took = t0.elapsed();
        consumed.insert(tp.clone(), offset + 1);
        // As the worker asks: the partition put to since the last word.
        let asked = BTreeMap::from([(tp.clone(), offset + 1)]);
        let safe = sink.pre_commit(&asked).expect("pre_commit");
        tracker
            .record_pre_commit(&safe, &asked)
            .expect("the sink's word");
        let commit = tracker
            .take_commit_of(|tp| assigned.contains(tp), true)
            .expect("a commit");
        let chosen = commit.offsets.clone();
        tracker
            .commit_acked(commit, &assigned)
            .expect("acknowledged");
        let took = t0.elapsed();
        let t1 = Instant::now();
        // Nothing put since: the worker asks about nothing.
        let again = sink.pre_commit(&BTreeMap::new()).expect("idle pre_commit");
        let idle_took = t1.elapsed();
        // Outside the timings: the partition put to is answered, at what
        // is durable, and committed there alone.
        assert_eq!(safe, asked, "committed ≤ durable");
        assert_eq!(chosen, asked, "only the partition put to is committed");
        assert!(again.is_empty());
        assert!(tracker
            .take_commit_of(|tp| assigned.contains(tp), true)
            .is_none());
        step.record(took.as_micros() as u64).expect("record");
        put.record(put_took.as_micros() as u64).expect("record");
        idle.record(idle_took.as_micros() as u64).expect("record");
    }
    let _ = sink.stop();
    drop(sink);
    let (prune_ms, prune_fsyncs, pruned) = prune_pass(&engine, &tps, &consumed);
    let consumed: BTreeMap<TopicPartition, i64> =
        consumed.into_iter().map(|(tp, o)| (tp, o + 1)).collect();
    one_more_each(&engine, &tps, &consumed);
    Arc::into_inner(engine)
        .expect("the harness's alone")
        .close()
        .expect("close");
    let command_prune_ms = command_prune(&path, &tps, &consumed);
    let _ = std::fs::remove_dir_all(&path);
    Figures {
        partitions: count,
        put_p50_us: put.value_at_quantile(0.5),
        step_p50_us: step.value_at_quantile(0.5),
        step_p99_us: step.value_at_quantile(0.99),
        bookkeeping_p50_us: idle.value_at_quantile(0.5),
        prune_ms,
        prune_fsyncs,
        pruned,
        command_prune_ms,
    }
}

/// One more 100-byte record in every partition, at its offset in `next`.
fn one_more_each(engine: &Engine, tps: &[TopicPartition], next: &BTreeMap<TopicPartition, i64>) {
    for chunk in tps.chunks(1000) {
        let batches: Vec<RecordBatch> = chunk
            .iter()
            .map(|tp| RecordBatch {
                tp: tp.clone(),
                records: vec![Record::with_value(next[tp], vec![b'v'; 100])],
            })
            .collect();
        engine.append(&batches).expect("one more record each");
    }
}

/// `cairn prune --keep-bytes 100B` of the archive at `path`, whose every
/// partition holds one entry more than that: the command's wall time in
/// milliseconds, checked to have pruned every partition (its totals line,
/// and the first offsets read back after it).
fn command_prune(
    path: &std::path::Path,
    tps: &[TopicPartition],
    newest: &BTreeMap<TopicPartition, i64>,
) -> u64 {
    let bin = std::env::var_os("CAIRN_BIN").map_or_else(
        || {
            std::env::current_exe()
                .expect("this harness's path")
                .with_file_name("cairn")
        },
        std::path::PathBuf::from,
    );
    let t0 = Instant::now();
    let out = std::process::Command::new(&bin)
        .args(["prune", "--keep-bytes", "100B", "--data"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (build it: cargo build --release --bin cairn)",
                bin.display()
            )
        });
    let took = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {}\n{stdout}{}",
        bin.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let n = tps.len();
    assert!(
        stdout.contains(&format!(" in {n} of {n} partitions")),
        "{stdout}"
    );
    let engine = Engine::open(EngineConfig::new(path)).expect("reopen");
    for tp in tps {
        let p = engine.partition(tp).expect("archived");
        assert_eq!(p.first_offset, newest[tp], "only the newest entry kept");
    }
    engine.close().expect("close");
    took.as_millis() as u64
}

/// One retention pass that deletes an entry of every partition: each gets
/// one more record, and the pass keeps 100 bytes a partition (the newest
/// entry). Its wall time in milliseconds, the engine's fsyncs during it,
/// and the partitions it pruned.
fn prune_pass(
    engine: &Arc<Engine>,
    tps: &[TopicPartition],
    consumed: &BTreeMap<TopicPartition, i64>,
) -> (u64, u64, u64) {
    one_more_each(engine, tps, consumed);
    let retention = Retention {
        age: None,
        partition_bytes_max: Some(100),
    };
    let fsyncs_before = engine.stats().fsyncs;
    let t0 = Instant::now();
    let (report, finished) =
        pruner::prune(engine, &retention, &|| i64::MAX, &|| true).expect("prune pass");
    let took = t0.elapsed();
    let fsyncs = engine.stats().fsyncs - fsyncs_before;
    assert!(finished);
    // Outside the timing: every partition lost all but its newest entry.
    assert_eq!(report.partitions_pruned, tps.len() as u64);
    for tp in tps {
        let p = engine.partition(tp).expect("archived");
        assert_eq!(p.first_offset, consumed[tp], "only the newest entry kept");
    }
    (took.as_millis() as u64, fsyncs, report.partitions_pruned)
}

fn main() {
    cairn_connector::allocator::tune();
    let puts: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("a whole number of puts"))
        .unwrap_or(2000);
    let scratch = scratch::scratch();
    let dir = scratch.path().to_owned();
    println!("{puts} puts of one 100-byte record each, put + pre_commit as the worker calls them");
    println!("| partitions | put p50 µs | step p50 µs | step p99 µs | idle pre_commit p50 µs | step p50 × 32's | idle × 32's | prune pass ms | its fsyncs | cairn prune ms |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut base: Option<(u64, u64)> = None;
    for count in [32, 1_000, 10_000] {
        let f = measure(&dir, count, puts);
        let (b_step, b_idle) =
            *base.get_or_insert((f.step_p50_us.max(1), f.bookkeeping_p50_us.max(1)));
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} |",
            f.partitions,
            f.put_p50_us,
            f.step_p50_us,
            f.step_p99_us,
            f.bookkeeping_p50_us,
            f.step_p50_us as f64 / b_step as f64,
            f.bookkeeping_p50_us as f64 / b_idle as f64,
            f.prune_ms,
            f.prune_fsyncs,
            f.command_prune_ms
        );
        assert_eq!(f.pruned, f.partitions as u64);
    }
}

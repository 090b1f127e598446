//! Retention passes that fail on the pruner's thread (failpoints; a test
//! binary of its own because failpoints are process-wide, and its tests
//! take turns): the failure hook hears of it at once, once; `cairn run`'s
//! wiring (the hook sets the stop flag) stops an idle run cleanly, with
//! everything archived fsynced and committed, and the run fails naming
//! retention; a panic in a pass is reported like an error.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use cairn_connector::cli::demo::{demo_next_offsets, produce};
use cairn_connector::pruner::{Retention, FAILPOINT_PASS};
use cairn_connector::{ArchiveSink, PipelineOptions, SinkTask, TaskError};
use cairn_engine::fuzzing::batch;
use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_FLUSH_ERR};
use cairn_tests::{config, durable, init_logs, run_bounded, TestKafka};

const DAY: Duration = Duration::from_secs(86_400);

/// One test at a time: the failpoints are the process's.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Arms a failpoint; removes it when dropped, whatever the test did.
struct Armed(&'static str);

impl Armed {
    fn new(name: &'static str, actions: &str) -> Armed {
        fail::cfg(name, actions).unwrap();
        Armed(name)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        fail::remove(self.0);
    }
}

fn by_age(age: Duration) -> Retention {
    Retention {
        age: Some(age),
        partition_bytes_max: None,
    }
}

/// A hook that forwards each failure to the returned receiver.
fn hook() -> (cairn_connector::pruner::FailureHook, mpsc::Receiver<String>) {
    let (tx, rx) = mpsc::channel::<String>();
    (
        Box::new(move |e: &str| {
            let _ = tx.send(e.to_owned());
        }),
        rx,
    )
}

/// An archive at `dir` whose sink prunes every millisecond (busy while the
/// test runs), and the failures its hook hears of.
fn busy_pruner(dir: &std::path::Path) -> (Arc<Engine>, ArchiveSink, mpsc::Receiver<String>) {
    let engine = Arc::new(Engine::open(EngineConfig::new(dir)).unwrap());
    let (on_failure, failures) = hook();
    let sink = ArchiveSink::new(engine.clone())
        .with_retention(by_age(DAY), Duration::from_millis(1), on_failure)
        .unwrap();
    (engine, sink, failures)
}

#[test]
fn a_pass_on_a_poisoned_engine_fails_once_and_stop_reports_it() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let a = TopicPartition::new("t", 0);
    let (engine, mut sink, failures) = busy_pruner(dir.path());
    sink.put(&[batch(&a, 0..10, 20)]).unwrap();
    // The put's fsync fails: the engine is poisoned, and the pruner's next
    // pass meets the poisoned engine.
    let armed = Armed::new(FAILPOINT_FLUSH_ERR, "return");
    let consumed = BTreeMap::from([(a.clone(), 10)]);
    assert!(matches!(
        sink.pre_commit(&consumed),
        Err(TaskError::Fatal(_))
    ));
    let e = failures
        .recv_timeout(Duration::from_secs(60))
        .expect("the failure hook was called");
    assert!(e.contains("retention") && e.contains("poisoned"), "{e}");
    drop(armed);
    drop(engine);
    // The pruner's failure is the error, and the close's (the same
    // poisoning) follows it: until the night of 2026-12-04 only the
    // close's was returned, and the pruner's was in the log alone.
    match sink.stop() {
        Err(TaskError::Fatal(m)) => assert!(
            m.starts_with("retention") && m.contains("closing the engine then failed"),
            "{m}"
        ),
        other => panic!("the stop must report the failure: {other:?}"),
    }
    // The thread has been joined: any retry would have called the hook again.
    assert_eq!(failures.try_iter().count(), 0, "the pass was retried");
}

#[test]
fn a_panicking_pass_is_reported_with_its_message() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let (engine, mut sink, failures) = busy_pruner(dir.path());
    let armed = Armed::new(FAILPOINT_PASS, "panic(boom)");
    let e = failures
        .recv_timeout(Duration::from_secs(60))
        .expect("the failure hook was called");
    assert!(e.contains("the pruner panicked: boom"), "{e}");
    // Poisoned before the hook was told (since 2026-12-06).
    assert!(engine.is_poisoned());
    drop(armed);
    drop(engine);
    match sink.stop() {
        Err(TaskError::Fatal(m)) => assert!(m.contains("panicked: boom"), "{m}"),
        other => panic!("the stop must report the panic: {other:?}"),
    }
    assert_eq!(failures.try_iter().count(), 0, "the pass was retried");
}

/// The first pass runs on the starting thread, before any pruner thread:
/// its panic is the start's error, not the end of the process.
#[test]
fn a_panicking_first_pass_is_the_starts_error() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let (on_failure, failures) = hook();
    let armed = Armed::new(FAILPOINT_PASS, "panic(first)");
    let started = ArchiveSink::new(engine.clone()).with_retention(
        by_age(DAY),
        Duration::from_secs(3600),
        on_failure,
    );
    drop(armed);
    match started {
        Err(e) => assert!(e.to_string().contains("the pruner panicked: first"), "{e}"),
        Ok(_) => panic!("a start whose first pass panicked went on"),
    }
    // Refused at the start: no thread, so no hook call.
    assert_eq!(failures.try_iter().count(), 0);
    // The engine is poisoned, as for any panic caught while it was used
    // (the pass reads through sled, which panics on damage to its files):
    // nothing more is written or committed, and its drop flushes nothing
    // (until 2026-12-06 it stayed usable; found by an audit).
    assert!(engine.is_poisoned());
    assert!(engine.check_usable().is_err());
}

/// 3,000 records produced to a fresh topic, and what a run archiving them
/// into a fresh store needs: its configuration (group `<name>-group`), the
/// run's stop flag, and each partition's end.
struct Idle {
    k: TestKafka,
    dir: tempfile::TempDir,
    group: String,
    cfg: cairn_connector::RunConfig,
    stop: Arc<AtomicBool>,
    want: BTreeMap<TopicPartition, i64>,
}

fn idle(name: &str) -> Idle {
    let k = TestKafka::new(name, 3);
    let n = 3_000;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let group = format!("{name}-group");
    let cfg = config(&k, &group, dir.path());
    let want = demo_next_offsets(&k.topic, n);
    Idle {
        k,
        dir,
        group,
        cfg,
        stop: Arc::default(),
        want,
    }
}

impl Idle {
    /// The store, opened for the run (it closes when the run drops it).
    fn engine(&self) -> Arc<Engine> {
        Arc::new(Engine::open(EngineConfig::new(self.dir.path())).unwrap())
    }

    /// A commit observer that checks committed <= durable and calls `then`
    /// once, when everything produced is committed: the run is idle from
    /// there on.
    fn once_all_committed(
        &self,
        mut then: impl FnMut() + Send + 'static,
    ) -> cairn_connector::CommitObserver {
        let want = self.want.clone();
        // Each commit names only its own partitions.
        let mut so_far = BTreeMap::new();
        let mut done = false;
        Box::new(move |committed, durable| {
            for (tp, o) in committed {
                assert!(*o <= durable[tp], "committed {tp}@{o} above durable");
            }
            so_far.extend(committed.iter().map(|(tp, o)| (tp.clone(), *o)));
            if !done && want.iter().all(|(tp, o)| so_far.get(tp) == Some(o)) {
                done = true;
                then();
            }
        })
    }

    /// Everything produced is durable in the store and committed in Kafka.
    fn assert_all_kept(&self) {
        assert_eq!(durable(self.dir.path()), self.want);
        let kafka = self.k.committed(&self.group, 3);
        for (tp, o) in &self.want {
            assert_eq!(kafka[&tp.partition], *o, "{tp}");
        }
    }
}

/// `cairn run`'s wiring: the hook sets the run's stop flag. The run has
/// written everything and is idle when the pass fails, under a commit
/// interval that has not come round, so nothing is synced or committed
/// yet: it stops cleanly (the final sync and commit) and fails naming
/// retention. (Until 2026-12-05 the pass failed once everything was
/// committed, and a stop that skipped the final commit passed too.)
#[test]
fn a_failed_pass_stops_an_idle_run_which_fails_naming_retention() {
    let _turn = serial();
    init_logs();
    let mut run = idle("pruner-fail");
    run.cfg.commit = cairn_connector::CommitPolicy::Interval(Duration::from_secs(3_600));
    let stop_run = run.stop.clone();
    let sink = ArchiveSink::new(run.engine())
        .with_retention(
            by_age(DAY),
            Duration::from_millis(1),
            Box::new(move |_| stop_run.store(true, Ordering::Relaxed)),
        )
        .unwrap();
    let armed: Arc<Mutex<Option<Armed>>> = Arc::default();
    let arm = armed.clone();
    // Only once every record is written does every pass fail.
    let total: usize = run.want.values().map(|&o| o as usize).sum();
    let handed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sink = cairn_connector::testing::WatchedSink::new(Box::new(sink))
        .before_put(Box::new({
            let handed = handed.clone();
            move |batches| {
                let records: usize = batches.iter().map(|b| b.records.len()).sum();
                handed.fetch_add(records, Ordering::SeqCst);
                Ok(())
            }
        }))
        .after_put(Box::new(move |_| {
            if handed.load(Ordering::SeqCst) == total {
                arm.lock()
                    .unwrap()
                    .get_or_insert_with(|| Armed::new(FAILPOINT_PASS, "return(injected)"));
            }
        }));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let opts = PipelineOptions {
        stop: run.stop.clone(),
        on_commit_sent: Some(Box::new({
            let sent = sent.clone();
            move |_, _| {
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })),
        ..Default::default()
    };
    let err = run_bounded(&run.cfg, Box::new(sink), opts)
        .expect_err("a run whose pruner failed must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("retention") && msg.contains("injected"),
        "the run's error names the failed pass: {msg}"
    );
    assert!(armed.lock().unwrap().take().is_some(), "never armed");
    // Stopped cleanly: all archived, all durable, Kafka committed to there,
    // by the final commit (the interval never came round).
    run.assert_all_kept();
    assert!(sent.load(Ordering::SeqCst) >= 1, "the final commit");
}

/// A live `cairn prune` (served on the run's socket) whose fsync fails
/// poisons the engine on a thread of the live server: the run must stop
/// then, even with no record coming for a put to find out, and fail naming
/// the poisoning; nothing more is committed.
#[test]
fn a_live_prune_that_poisons_the_engine_stops_an_idle_run() {
    use cairn_connector::cli::prune::Cut;
    use cairn_connector::live::{connect, request_for, End, Request};
    use cairn_connector::selection::Selection;

    let _turn = serial();
    init_logs();
    let run = idle("live-poison");
    let stop_run = run.stop.clone();
    let sink = ArchiveSink::new(run.engine())
        .with_live_reads(Box::new(move || stop_run.store(true, Ordering::Relaxed)));
    let (data, topic) = (run.dir.path().to_path_buf(), run.k.topic.clone());
    // Every partition's next offset: whatever frames the puts made, all of
    // them go, so the prune must fsync.
    let cut = Cut::Offset(run.want.values().copied().min().unwrap());
    let armed: Arc<Mutex<Option<Armed>>> = Arc::default();
    let arm = armed.clone();
    let prune: Arc<Mutex<Option<std::thread::JoinHandle<End>>>> = Arc::default();
    let pruning = prune.clone();
    let opts = PipelineOptions {
        stop: run.stop.clone(),
        on_commit: Some(run.once_all_committed(move || {
            // The run is idle. Every fsync fails now.
            *arm.lock().unwrap() = Some(Armed::new(FAILPOINT_FLUSH_ERR, "return"));
            let (data, topic) = (data.clone(), topic.clone());
            *pruning.lock().unwrap() = Some(std::thread::spawn(move || {
                let conn = connect(&data).unwrap().expect("the run serves its socket");
                let req = Request::Prune {
                    selection: Selection {
                        topics: vec![topic],
                        partition: None,
                        from: 0,
                        to: None,
                    },
                    cut,
                    dry_run: false,
                };
                request_for(
                    &data,
                    conn,
                    &req,
                    &mut Vec::new(),
                    std::path::Path::new("<test>"),
                )
                .unwrap()
            }));
        })),
        ..Default::default()
    };
    let err = run_bounded(&run.cfg, Box::new(sink), opts)
        .expect_err("a run whose engine a live prune poisoned must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("poisoned") && msg.contains(FAILPOINT_FLUSH_ERR),
        "the run's error names the poisoning: {msg}"
    );
    let end = prune
        .lock()
        .unwrap()
        .take()
        .expect("pruned")
        .join()
        .unwrap();
    assert_eq!(end.exit, 1, "{end:?}");
    assert!(armed.lock().unwrap().take().is_some(), "never armed");
    // Kafka holds exactly what was committed before; the store keeps it.
    run.assert_all_kept();
}

/// A periodic pass cut short by the run's stop (here set as the pass
/// empties t/0, before it reaches t/1) ends there, and no last pass
/// follows at the stop: it would do the work the stop cut short, which the
/// next start's first pass does instead. (pruning.rs's test of a first
/// pass cut short sets the stop before the pass begins, and never reaches
/// the thread's own loop.)
#[test]
fn a_periodic_pass_cut_short_by_the_stop_ends_the_pruner_without_a_last_pass() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let (on_failure, failures) = hook();
    // Every 10 ms; the first pass, on an empty store, runs whole.
    let mut sink = ArchiveSink::new(engine.clone())
        .with_retention_until(
            by_age(DAY),
            Duration::from_millis(10),
            on_failure,
            stop.clone(),
        )
        .unwrap();
    let (emptied_tx, emptied) = mpsc::channel();
    fail::cfg_callback(cairn_engine::FAILPOINT_EMPTYING_COUNT, {
        let (stop, emptied_tx) = (stop.clone(), Mutex::new(emptied_tx));
        move || {
            stop.store(true, Ordering::SeqCst);
            let _ = emptied_tx.lock().unwrap().send(());
        }
    })
    .unwrap();
    let _armed = Armed(cairn_engine::FAILPOINT_EMPTYING_COUNT);
    // Records of 2023, due for pruning at the next pass.
    sink.open(&[a.clone(), b.clone()]).unwrap();
    sink.put(&[batch(&a, 0..50, 20), batch(&b, 0..30, 20)])
        .unwrap();
    let consumed = BTreeMap::from([(a.clone(), 50), (b.clone(), 30)]);
    assert_eq!(sink.pre_commit(&consumed).unwrap(), consumed);
    emptied
        .recv_timeout(Duration::from_secs(60))
        .expect("a periodic pass emptied a partition");
    drop(engine);
    sink.stop().unwrap();
    assert_eq!(failures.try_iter().count(), 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let held: BTreeMap<TopicPartition, u64> = e
        .partitions()
        .into_iter()
        .map(|p| (p.tp, p.record_count))
        .collect();
    assert_eq!(
        held,
        BTreeMap::from([(a, 0), (b, 30)]),
        "the pass ends after t/0, and no last pass prunes t/1"
    );
}

/// A `cairn prune` whose fsync fails part-way writes no line for the
/// partitions whose deletions that fsync was to make durable: their lines
/// are held until the pass has made them durable, and its failed sync is
/// said again at its finish (seen in review, 2026-12-06: the sync that
/// failed had nothing left to wait for, the finish passed, and the lines
/// were written as pruned). The archive reopens clean.
#[test]
fn a_prune_whose_fsync_fails_reports_no_deletion_it_held() {
    use cairn_connector::cli::prune::{prune, Cut};
    use cairn_connector::selection::Selection;
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    // t/0..3: two entries each, both below the cut (their lines wait for
    // the pass's sync); t/3: more entries below it than a step takes, so
    // that the pass syncs before that partition's next step.
    for p in 0..3 {
        let tp = TopicPartition::new("t", p);
        engine.write(&[batch(&tp, 0..5, 10)]).unwrap();
        engine.write(&[batch(&tp, 5..10, 10)]).unwrap();
    }
    let cut = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64 + 1;
    let big = TopicPartition::new("t", 3);
    for o in 0..=cut {
        engine.write(&[batch(&big, o..o + 1, 10)]).unwrap();
    }
    engine.sync().unwrap();
    let selection = Selection {
        topics: vec!["t".into()],
        ..Selection::default()
    };
    let mut lines = Vec::new();
    let mut emit = |a: std::fmt::Arguments<'_>| {
        lines.push(a.to_string());
        Ok(())
    };
    let never = AtomicBool::new(false);
    let armed = Armed::new(FAILPOINT_FLUSH_ERR, "return");
    let pruned = prune(
        &engine,
        &selection,
        Cut::Offset(cut),
        false,
        &never,
        &mut emit,
    );
    drop(armed);
    let e = pruned.expect_err("the fsync failed");
    assert!(e.to_string().contains("poisoned"), "{e}");
    assert!(lines.is_empty(), "reported as pruned: {lines:?}");
    drop(engine);
    let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(engine.verify().unwrap().is_clean());
    assert_eq!(engine.partition(&big).unwrap().next_offset, cut + 1);
}

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

use cairn_connector::cli::demo::{committed, demo_next_offsets, produce};
use cairn_connector::pruner::{Retention, FAILPOINT_PASS};
use cairn_connector::{run_pipeline, ArchiveSink, PipelineOptions, SinkTask, TaskError};
use cairn_engine::fuzzing::batch;
use cairn_engine::{Engine, EngineConfig, TopicPartition, FAILPOINT_FLUSH_ERR};
use cairn_tests::{config, durable, init_logs, TestKafka};

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
    match sink.stop() {
        Err(TaskError::Fatal(m)) => assert!(m.contains("poisoned"), "{m}"),
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
    drop(armed);
    drop(engine);
    match sink.stop() {
        Err(TaskError::Fatal(m)) => assert!(m.contains("panicked: boom"), "{m}"),
        other => panic!("the stop must report the panic: {other:?}"),
    }
    assert_eq!(failures.try_iter().count(), 0, "the pass was retried");
}

/// `cairn run`'s wiring: the hook sets the run's stop flag. The run has
/// archived and committed everything and is idle when the pass fails; it
/// stops cleanly (fsync, final commit) and fails naming retention.
#[test]
fn a_failed_pass_stops_an_idle_run_which_fails_naming_retention() {
    let _turn = serial();
    init_logs();
    let k = TestKafka::new("pruner-fail", 3);
    let n = 3_000;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&k, "pruner-fail-group", dir.path());
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stop_run = stop.clone();
    let sink = ArchiveSink::new(engine)
        .with_retention(
            by_age(DAY),
            Duration::from_millis(1),
            Box::new(move |_| stop_run.store(true, Ordering::Relaxed)),
        )
        .unwrap();
    let want = demo_next_offsets(&k.topic, n);
    let armed: Arc<Mutex<Option<Armed>>> = Arc::default();
    let arm = armed.clone();
    // What has been committed so far (each commit names its own partitions).
    let mut so_far = BTreeMap::new();
    let opts = PipelineOptions {
        stop,
        // Everything committed: the run is idle from here on. Only then
        // does every pass fail.
        on_commit: Some(Box::new(move |committed, durable| {
            for (tp, o) in committed {
                assert!(*o <= durable[tp], "committed {tp}@{o} above durable");
            }
            so_far.extend(committed.iter().map(|(tp, o)| (tp.clone(), *o)));
            let mut a = arm.lock().unwrap();
            if a.is_none() && want.iter().all(|(tp, o)| so_far.get(tp) == Some(o)) {
                *a = Some(Armed::new(FAILPOINT_PASS, "return(injected)"));
            }
        })),
        ..Default::default()
    };
    let err =
        run_pipeline(&cfg, Box::new(sink), opts).expect_err("a run whose pruner failed must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("retention") && msg.contains("injected"),
        "the run's error names the failed pass: {msg}"
    );
    assert!(armed.lock().unwrap().take().is_some(), "never armed");
    // Stopped cleanly: all archived, all durable, Kafka committed to there.
    let want = demo_next_offsets(&k.topic, n);
    assert_eq!(durable(dir.path()), want);
    let kafka = committed(&k.brokers, "pruner-fail-group", &k.topic, 3).unwrap();
    for (tp, o) in &want {
        assert_eq!(kafka[&tp.partition], *o, "{tp}");
    }
}

/// A live `cairn prune` (served on the run's socket) whose fsync fails
/// poisons the engine on a thread of the live server: the run must stop
/// then, even with no record coming for a put to find out, and fail naming
/// the poisoning; nothing more is committed.
#[test]
fn a_live_prune_that_poisons_the_engine_stops_an_idle_run() {
    use cairn_connector::cli::prune::Cut;
    use cairn_connector::live::{connect, request, Request};
    use cairn_connector::selection::Selection;

    let _turn = serial();
    init_logs();
    let k = TestKafka::new("live-poison", 3);
    let n = 3_000;
    produce(&k.brokers, &k.topic, 0..n).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&k, "live-poison-group", dir.path());
    let engine = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stop_run = stop.clone();
    let sink = ArchiveSink::new(engine)
        .with_live_reads(Box::new(move || stop_run.store(true, Ordering::Relaxed)));
    let want = demo_next_offsets(&k.topic, n);
    let (data, topic) = (dir.path().to_path_buf(), k.topic.clone());
    let armed: Arc<Mutex<Option<Armed>>> = Arc::default();
    let arm = armed.clone();
    let prune: Arc<Mutex<Option<std::thread::JoinHandle<cairn_connector::live::End>>>> =
        Arc::default();
    let pruning = prune.clone();
    let mut so_far = BTreeMap::new();
    let wanted = want.clone();
    let opts = PipelineOptions {
        stop,
        on_commit: Some(Box::new(move |committed, durable| {
            for (tp, o) in committed {
                assert!(*o <= durable[tp], "committed {tp}@{o} above durable");
            }
            so_far.extend(committed.iter().map(|(tp, o)| (tp.clone(), *o)));
            let mut a = arm.lock().unwrap();
            if a.is_some() || !wanted.iter().all(|(tp, o)| so_far.get(tp) == Some(o)) {
                return;
            }
            // Everything committed: the run is idle. Every fsync fails now.
            *a = Some(Armed::new(FAILPOINT_FLUSH_ERR, "return"));
            let (data, topic) = (data.clone(), topic.clone());
            *pruning.lock().unwrap() = Some(std::thread::spawn(move || {
                let conn = connect(&data).expect("the run serves its socket");
                let req = Request::Prune {
                    selection: Selection {
                        topics: vec![topic],
                        partition: None,
                        from: 0,
                        to: None,
                    },
                    // Every partition's next offset: whatever frames the
                    // puts made, all of them go, so the prune must fsync.
                    cut: Cut::Offset(n as i64 / 3),
                    dry_run: false,
                };
                request(conn, &req, &mut Vec::new()).unwrap()
            }));
        })),
        ..Default::default()
    };
    let err = run_pipeline(&cfg, Box::new(sink), opts)
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
    assert_eq!(durable(dir.path()), want);
    let kafka = committed(&k.brokers, "live-poison-group", &k.topic, 3).unwrap();
    for (tp, o) in &want {
        assert_eq!(kafka[&tp.partition], *o, "{tp}");
    }
}

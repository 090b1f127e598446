//! Helpers for tests of the consumer loop, in this crate's integration
//! tests and in the end-to-end tests' crate: a bound on a run that should
//! end on its own, so that a stalled run fails its test saying so rather
//! than running into CI's job timeout. Not part of the API.

use std::time::Duration;

/// Longest one run of a test may take before it is stopped (through
/// `PipelineOptions::stop`) and the test fails saying so: a stalled run
/// then names itself instead of running into CI's job timeout.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// [`crate::run_pipeline`], bounded by [`RUN_LIMIT`].
pub fn run_bounded(
    cfg: &crate::RunConfig,
    sink: Box<dyn crate::SinkTask>,
    opts: crate::PipelineOptions,
) -> crate::Result<crate::RunReport> {
    let watchdog = Watchdog::arm(opts.stop.clone(), RUN_LIMIT);
    let result = crate::run_pipeline(cfg, sink, opts);
    if watchdog.disarm() {
        let then = result
            .as_ref()
            .map_or_else(|e| e.to_string(), |_| "clean".into());
        panic!(
            "the run did not end within {} s: stopped (its stop: {then})",
            RUN_LIMIT.as_secs()
        );
    }
    result
}

/// A bound on a run that should end on its own: sets `stop` if not
/// disarmed within `limit`, so that a regression fails the test rather than
/// hanging it. Not a synchronisation: a passing test disarms it first.
pub struct Watchdog {
    disarm: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<bool>>,
}

impl Watchdog {
    pub fn arm(stop: std::sync::Arc<std::sync::atomic::AtomicBool>, limit: Duration) -> Watchdog {
        let (disarm, disarmed) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // Disconnected (disarmed) is the normal end.
            let fired =
                disarmed.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout);
            if fired {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            fired
        });
        Watchdog {
            disarm: Some(disarm),
            thread: Some(thread),
        }
    }

    /// Stop watching; whether it fired (set `stop`) first.
    pub fn disarm(mut self) -> bool {
        self.end()
    }

    fn end(&mut self) -> bool {
        drop(self.disarm.take());
        self.thread
            .take()
            .is_some_and(|t| t.join().expect("watchdog thread"))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.end();
    }
}

/// A hook run before each `put` of a [`WatchedSink`], with the batches; an
/// error is the put's.
pub type BeforePut =
    Box<dyn FnMut(&[cairn_engine::RecordBatch]) -> Result<(), crate::TaskError> + Send>;
/// A hook run after each successful `put` of a [`WatchedSink`], with its
/// outcome.
pub type AfterPut = Box<dyn FnMut(&crate::PutOutcome) + Send>;
/// A hook run after each successful `pre_commit` of a [`WatchedSink`],
/// with the offsets it declared safe (durable, for the archive's sink).
pub type AfterPreCommit =
    Box<dyn FnMut(&std::collections::BTreeMap<cairn_engine::TopicPartition, i64>) + Send>;

/// A sink that hands every call to another, with hooks around `put` and
/// after `pre_commit`: for
/// tests and benches that watch or hold a sink's puts. Every method of
/// [`crate::SinkTask`] is handed on here, once: a wrapper of its own that
/// left one out would get the trait's default instead (no `caught_up`, no
/// `durable_check`, no topic id check), and run another loop than `cairn
/// run`'s (since 2026-12-05; two test wrappers had left out `caught_up`
/// and `durable_check`, and until 2026-12-06 this one left out
/// `check_topics`, so that the tests and benches it wraps ran with the
/// archive's topic id check off).
pub struct WatchedSink {
    inner: Box<dyn crate::SinkTask>,
    before_put: Option<BeforePut>,
    after_put: Option<AfterPut>,
    after_pre_commit: Option<AfterPreCommit>,
}

impl WatchedSink {
    pub fn new(inner: Box<dyn crate::SinkTask>) -> WatchedSink {
        WatchedSink {
            inner,
            before_put: None,
            after_put: None,
            after_pre_commit: None,
        }
    }

    pub fn before_put(mut self, hook: BeforePut) -> WatchedSink {
        self.before_put = Some(hook);
        self
    }

    pub fn after_put(mut self, hook: AfterPut) -> WatchedSink {
        self.after_put = Some(hook);
        self
    }

    pub fn after_pre_commit(mut self, hook: AfterPreCommit) -> WatchedSink {
        self.after_pre_commit = Some(hook);
        self
    }
}

impl crate::SinkTask for WatchedSink {
    fn check_topics(
        &mut self,
        ids: &std::collections::BTreeMap<String, crate::KafkaTopicId>,
    ) -> Result<(), crate::TaskError> {
        self.inner.check_topics(ids)
    }

    fn open(
        &mut self,
        partitions: &[cairn_engine::TopicPartition],
    ) -> Result<std::collections::BTreeMap<cairn_engine::TopicPartition, i64>, crate::TaskError>
    {
        self.inner.open(partitions)
    }

    fn put(
        &mut self,
        batches: &[cairn_engine::RecordBatch],
    ) -> Result<crate::PutOutcome, crate::TaskError> {
        if let Some(hook) = self.before_put.as_mut() {
            hook(batches)?;
        }
        let outcome = self.inner.put(batches)?;
        if let Some(hook) = self.after_put.as_mut() {
            hook(&outcome);
        }
        Ok(outcome)
    }

    fn pre_commit(
        &mut self,
        consumed: &std::collections::BTreeMap<cairn_engine::TopicPartition, i64>,
    ) -> Result<std::collections::BTreeMap<cairn_engine::TopicPartition, i64>, crate::TaskError>
    {
        let safe = self.inner.pre_commit(consumed)?;
        if let Some(hook) = self.after_pre_commit.as_mut() {
            hook(&safe);
        }
        Ok(safe)
    }

    fn start(
        &mut self,
        starts: &std::collections::BTreeMap<cairn_engine::TopicPartition, i64>,
    ) -> Result<std::collections::BTreeMap<cairn_engine::TopicPartition, i64>, crate::TaskError>
    {
        self.inner.start(starts)
    }

    fn caught_up(
        &mut self,
        positions: &std::collections::BTreeMap<cairn_engine::TopicPartition, i64>,
    ) -> Result<(), crate::TaskError> {
        self.inner.caught_up(positions)
    }

    fn close(
        &mut self,
        partitions: &[cairn_engine::TopicPartition],
    ) -> Result<(), crate::TaskError> {
        self.inner.close(partitions)
    }

    fn stop(&mut self) -> Result<(), crate::TaskError> {
        self.inner.stop()
    }

    fn identity(&self) -> Option<String> {
        self.inner.identity()
    }

    fn durable_check(&self) -> Option<crate::task::DurableCheck> {
        self.inner.durable_check()
    }
}

/// Assert that every offset in `committed` (by partition of `topic`, as
/// Kafka or a member's log gives them) is at or below the store's next
/// offset of that partition in `held` (none: 0). `what` prefixes a
/// failure. (Until 2026-12-05 the partition was looked up in any topic.)
pub fn assert_committed_le_durable(
    topic: &str,
    committed: &std::collections::BTreeMap<i32, i64>,
    held: &std::collections::BTreeMap<cairn_engine::TopicPartition, i64>,
    what: &str,
) {
    for (p, k) in committed {
        let d = held
            .get(&cairn_engine::TopicPartition::new(topic, *p))
            .copied()
            .unwrap_or(0);
        assert!(
            *k <= d,
            "{what}: partition {p} committed {k} above durable {d}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::WatchedSink;
    use crate::{KafkaTopicId, PutOutcome, SinkTask, TaskError};
    use cairn_engine::{RecordBatch, TopicPartition};
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    /// A sink that answers every call of the trait, defaults included, and
    /// notes which were made.
    struct Calls(Arc<Mutex<Vec<&'static str>>>);

    impl Calls {
        fn note(&self, call: &'static str) {
            self.0.lock().unwrap().push(call);
        }
    }

    impl SinkTask for Calls {
        fn check_topics(&mut self, _: &BTreeMap<String, KafkaTopicId>) -> Result<(), TaskError> {
            self.note("check_topics");
            Err(TaskError::Fatal("the wrapped sink's check".into()))
        }
        fn open(
            &mut self,
            _: &[TopicPartition],
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            self.note("open");
            Ok(BTreeMap::new())
        }
        fn put(&mut self, _: &[RecordBatch]) -> Result<PutOutcome, TaskError> {
            self.note("put");
            Ok(PutOutcome::default())
        }
        fn pre_commit(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            self.note("pre_commit");
            Ok(BTreeMap::new())
        }
        fn start(
            &mut self,
            _: &BTreeMap<TopicPartition, i64>,
        ) -> Result<BTreeMap<TopicPartition, i64>, TaskError> {
            self.note("start");
            Ok(BTreeMap::new())
        }
        fn caught_up(&mut self, _: &BTreeMap<TopicPartition, i64>) -> Result<(), TaskError> {
            self.note("caught_up");
            Ok(())
        }
        fn close(&mut self, _: &[TopicPartition]) -> Result<(), TaskError> {
            self.note("close");
            Ok(())
        }
        fn stop(&mut self) -> Result<(), TaskError> {
            self.note("stop");
            Ok(())
        }
        fn identity(&self) -> Option<String> {
            self.note("identity");
            Some("calls".into())
        }
        fn durable_check(&self) -> Option<crate::task::DurableCheck> {
            self.note("durable_check");
            Some(Box::new(|_| Ok(Some(7))))
        }
    }

    /// Every call of the trait reaches the wrapped sink, with its answer
    /// back: a method left out would run the trait's default instead.
    #[test]
    fn a_watched_sink_hands_on_every_call() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut sink = WatchedSink::new(Box::new(Calls(calls.clone())));
        let none = BTreeMap::new();
        let err = sink.check_topics(&BTreeMap::new()).unwrap_err();
        assert!(
            err.to_string().contains("the wrapped sink's check"),
            "{err}"
        );
        sink.open(&[]).unwrap();
        sink.put(&[]).unwrap();
        sink.pre_commit(&none).unwrap();
        sink.start(&none).unwrap();
        sink.caught_up(&none).unwrap();
        sink.close(&[]).unwrap();
        assert_eq!(sink.identity().as_deref(), Some("calls"));
        let check = sink.durable_check().expect("the wrapped sink's check");
        assert_eq!(check(&TopicPartition::new("t", 0)), Ok(Some(7)));
        sink.stop().unwrap();
        assert_eq!(
            *calls.lock().unwrap(),
            [
                "check_topics",
                "open",
                "put",
                "pre_commit",
                "start",
                "caught_up",
                "close",
                "identity",
                "durable_check",
                "stop"
            ]
        );
    }
}

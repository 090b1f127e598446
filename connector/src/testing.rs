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

//! The committer: a tokio task that commits what the sink declared safe.
//!
//! The task thread wakes it after every `pre_commit` (after every put with
//! `--commit every-put`, every interval with `--commit interval:MS`). The
//! commit itself is a blocking rdkafka call; it runs on the runtime's one
//! worker (`block_in_place`) while the task thread goes on with the next
//! put. Nothing else runs on that runtime. Wake-ups that
//! arrive while a commit is in flight coalesce: the next commit carries
//! every offset declared safe meanwhile.
//!
//! A failed commit is retried after a backoff (`RETRY_MS_MIN`, doubling to
//! `RETRY_MS_MAX`) even if no put wakes the committer: an idle partition's
//! last durable offset must not stay uncommitted until the next record. A
//! `pre_commit`'s wake-up ends the backoff early: its offsets are tried at
//! once, so that a commit does not wait out a backoff after the group has
//! settled. The backoff therefore paces only a run with no `pre_commit`;
//! while they go on, a group that answers `RebalanceInProgress` gets at
//! most one commit for each (each put under `every-put`, each interval
//! under `interval:MS`; wake-ups during a commit merge). A review of
//! 2026-12-05 found this comment claiming the backoff held those off too.
//! Each attempt commits only what is durable either way.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;

use crate::error::ConnectorError;
use crate::pipeline::{CommitOutcome, Pipeline};
use crate::rebalance::SinkContext;

/// First retry delay after a failed commit.
pub const RETRY_MS_MIN: u64 = 50;
/// Longest retry delay.
pub const RETRY_MS_MAX: u64 = 1_000;

/// Commit on every wake-up (and after a backoff when a commit failed) until
/// told to stop.
pub(crate) async fn run(pipeline: Arc<Pipeline>, consumer: Arc<BaseConsumer<SinkContext>>) {
    let mut retry_ms: Option<u64> = None;
    loop {
        match retry_ms {
            Some(ms) => {
                // Woken early by a put, or retry when the backoff ends.
                let _ =
                    tokio::time::timeout(Duration::from_millis(ms), pipeline.wake.notified()).await;
            }
            None => pipeline.wake.notified().await,
        }
        if pipeline.committer_stop.load(Ordering::Acquire) {
            return;
        }
        // On this runtime's worker itself (one thread hop from the task
        // thread's wake-up to the commit, where spawn_blocking made two).
        let committed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tokio::task::block_in_place(|| pipeline.commit_now(&consumer, None))
        }));
        match committed {
            Ok(CommitOutcome::Done | CommitOutcome::Nothing | CommitOutcome::Closed) => {
                retry_ms = None
            }
            // Taken again at once (the commit woke this loop, and a stored
            // wake-up ends the wait below), its backoff kept: a Stale says
            // nothing of whether Kafka takes commits.
            Ok(CommitOutcome::Stale) => {}
            Ok(CommitOutcome::Failed) => {
                retry_ms = Some(retry_ms.map_or(RETRY_MS_MIN, |ms| (ms * 2).min(RETRY_MS_MAX)))
            }
            Err(payload) => {
                // An invariant assertion fired inside the commit, or the
                // sink's `durable_check` panicked: commit nothing more, and
                // say which (until 2026-12-05 the message was dropped).
                pipeline.fail(ConnectorError::Failed(format!(
                    "commit task failed: a commit invariant, or the sink's durable_check, panicked: {}",
                    cairn_engine::panic_message(&*payload)
                )));
                return;
            }
        }
    }
}

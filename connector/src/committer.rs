//! The committer: a tokio task that commits what the sink declared safe.
//!
//! The task thread wakes it after every `pre_commit` (after every put with
//! `--commit every-put`, every interval with `--commit interval:MS`). The
//! commit itself is a blocking rdkafka call, so it runs as blocking work
//! (`block_in_place`, or tokio's blocking pool on a current-thread runtime)
//! while the task thread goes on with the next put. Wake-ups that
//! arrive while a commit is in flight coalesce: the next commit carries
//! every offset declared safe meanwhile.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdkafka::consumer::BaseConsumer;

use crate::error::ConnectorError;
use crate::pipeline::Pipeline;
use crate::rebalance::SinkContext;

/// Commit on every wake-up until told to stop.
pub(crate) async fn run(pipeline: Arc<Pipeline>, consumer: Arc<BaseConsumer<SinkContext>>) {
    // On a multi-thread runtime the blocking commit runs right here
    // (`block_in_place` hands this worker's other tasks to another thread):
    // one thread hop less per commit than `spawn_blocking`, measured at
    // ~0.1 ms of put-to-commit p50 and ~5 % records/s with every-put
    // (docs/BENCHMARKS.md). A current-thread runtime cannot do that.
    let in_place = matches!(
        tokio::runtime::Handle::current().runtime_flavor(),
        tokio::runtime::RuntimeFlavor::MultiThread
    );
    loop {
        pipeline.wake.notified().await;
        if pipeline.committer_stop.load(Ordering::Acquire) {
            return;
        }
        let committed = if in_place {
            std::panic::catch_unwind(AssertUnwindSafe(|| {
                tokio::task::block_in_place(|| pipeline.commit_now(&consumer, None))
            }))
            .map_err(|_| "panicked".to_owned())
        } else {
            let (p, c) = (pipeline.clone(), consumer.clone());
            tokio::task::spawn_blocking(move || p.commit_now(&c, None))
                .await
                .map_err(|e| e.to_string())
        };
        if let Err(e) = committed {
            // An invariant assertion fired inside the commit: commit nothing more.
            pipeline.fail(ConnectorError::Sink(format!("commit task failed: {e}")));
            return;
        }
    }
}

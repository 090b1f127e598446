//! The committer: a tokio task that commits what the sink declared safe.
//!
//! The task thread wakes it after every `pre_commit` (after every put with
//! `--commit every-put`, every interval with `--commit interval:MS`). The
//! commit itself is a blocking rdkafka call, so it runs on tokio's blocking
//! pool while the task thread goes on with the next put. Wake-ups that
//! arrive while a commit is in flight coalesce: the next commit carries
//! every offset declared safe meanwhile.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdkafka::consumer::BaseConsumer;

use crate::error::ConnectorError;
use crate::pipeline::Pipeline;
use crate::rebalance::SinkContext;

/// Commit on every wake-up until told to stop.
pub(crate) async fn run(pipeline: Arc<Pipeline>, consumer: Arc<BaseConsumer<SinkContext>>) {
    loop {
        pipeline.wake.notified().await;
        if pipeline.committer_stop.load(Ordering::Acquire) {
            return;
        }
        let (p, c) = (pipeline.clone(), consumer.clone());
        if let Err(e) = tokio::task::spawn_blocking(move || p.commit_now(&c, None)).await {
            // An invariant assertion fired inside the commit: commit nothing more.
            pipeline.fail(ConnectorError::Sink(format!("commit task failed: {e}")));
            return;
        }
    }
}

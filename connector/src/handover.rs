//! A commit handed to librdkafka in one step and waited for in another,
//! which rust-rdkafka's `commit` (both at once) does not offer.
//!
//! librdkafka stamps a commit with the member's generation when it sends
//! it, not when it is asked. A commit chosen, checked against the revokes
//! under the pipeline's lock, and handed over after that lock was let go
//! could be preempted until after a whole rebalance; sent then, under the
//! new generation, it was accepted and moved the partition's offset back
//! below its new owner's. Handed over under the lock, it is queued on the
//! consumer group's operations before any revoke's own commit (a revoke
//! takes the lock first), and librdkafka serves them in order (unless it
//! parks the first while the coordinator is not connected: pipeline.rs);
//! only the wait for the broker's answer happens outside the lock.
//!
//! # Invariants
//! - A [`Handover`] never outlives the consumer it was made from (its
//!   lifetime), and its queue is destroyed exactly once, by its drop.
//! - Error codes are read as the C `int`s they are: a broker's code that
//!   the bindings' enum does not know is `Unknown`, never undefined
//!   behaviour.

use std::marker::PhantomData;
use std::os::raw::c_int;
use std::ptr::NonNull;

use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;

// The two calls whose result is an error code, declared with the `int`
// librdkafka returns (see the invariants).
extern "C" {
    fn rd_kafka_commit_queue(
        rk: *mut rd::rd_kafka_t,
        offsets: *const rd::rd_kafka_topic_partition_list_t,
        rkqu: *mut rd::rd_kafka_queue_t,
        cb: *const std::ffi::c_void,
        opaque: *mut std::ffi::c_void,
    ) -> c_int;
    fn rd_kafka_event_error(ev: *mut rd::rd_kafka_event_t) -> c_int;
}

/// A commit librdkafka has been handed, and its answer still to come.
pub(crate) struct Handover<'c> {
    queue: NonNull<rd::rd_kafka_queue_t>,
    rk: *mut rd::rd_kafka_t,
    consumer: PhantomData<&'c ()>,
}

/// How long one wait for the answer lasts before the consumer is asked
/// whether it closed meanwhile.
const CLOSED_CHECK_EVERY_MS: c_int = 100;

/// `code` as rust-rdkafka's error for a failed commit, or `Ok` for none.
fn commit_result(code: c_int) -> Result<(), KafkaError> {
    crate::librdkafka::error_code(code).map_or(Ok(()), |e| Err(KafkaError::ConsumerCommit(e)))
}

/// Hand `offsets` to librdkafka for a commit: queued now, in order with
/// every commit handed over after it; [`Handover::wait`] waits for the
/// broker's answer.
pub(crate) fn hand_over<'c, C: ConsumerContext>(
    consumer: &'c BaseConsumer<C>,
    offsets: &TopicPartitionList,
) -> Result<Handover<'c>, KafkaError> {
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle, borrowed for 'c.
    let queue = NonNull::new(unsafe { rd::rd_kafka_queue_new(rk) })
        .ok_or(KafkaError::ConsumerCommit(RDKafkaErrorCode::Fail))?;
    let handover = Handover {
        queue,
        rk,
        consumer: PhantomData,
    };
    // SAFETY: the list is valid for the call (librdkafka copies it); no
    // callback: the answer comes as an event on `queue`.
    let code = unsafe {
        rd_kafka_commit_queue(
            rk,
            offsets.ptr(),
            handover.queue.as_ptr(),
            std::ptr::null(),
            std::ptr::null_mut(),
        )
    };
    // An error here is librdkafka's refusal to queue it: no answer comes.
    commit_result(code)?;
    Ok(handover)
}

impl Handover<'_> {
    /// The broker's answer, waited for as a synchronous commit waits (as
    /// long as librdkafka takes: it gives up by itself). One exception: a
    /// commit handed over as the consumer group shut down is answered with
    /// librdkafka's `__DESTROY`, which the event API drops without a word
    /// (a synchronous commit returns it); so the wait also ends, with that
    /// error, once the consumer has closed.
    pub(crate) fn wait(self) -> Result<(), KafkaError> {
        loop {
            // SAFETY: the queue is ours until our drop.
            let ev = unsafe { rd::rd_kafka_queue_poll(self.queue.as_ptr(), CLOSED_CHECK_EVERY_MS) };
            let Some(ev) = NonNull::new(ev) else {
                // SAFETY: `rk` is the consumer borrowed for 'c.
                if unsafe { rd::rd_kafka_consumer_closed(self.rk) } != 0 {
                    return Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::BrokerDestroy));
                }
                continue;
            };
            // SAFETY: `ev` is an event we own until it is destroyed here.
            let (kind, code) = unsafe {
                (
                    rd::rd_kafka_event_type(ev.as_ptr()),
                    rd_kafka_event_error(ev.as_ptr()),
                )
            };
            // SAFETY: as above; destroyed once.
            unsafe { rd::rd_kafka_event_destroy(ev.as_ptr()) };
            if kind == rd::RD_KAFKA_EVENT_OFFSET_COMMIT {
                return commit_result(code);
            }
        }
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        // SAFETY: made by `rd_kafka_queue_new`, destroyed only here.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

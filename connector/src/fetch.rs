//! Records taken from librdkafka a batch at a time.
//!
//! rust-rdkafka hands a consumer's records over one `poll` call each: a
//! clock read in rust-rdkafka, another in librdkafka's queue pop, and an
//! `Arc` allocated per record. Measured on this project's machine, that is
//! 0.35 µs of the consumer thread per record, against 0.2 µs for
//! librdkafka's `rd_kafka_consume_batch_queue` (docs/BENCHMARKS.md, "Where
//! the time goes (connector)", item 10), and the consumer thread is the
//! busiest thread of an archiving run. rust-rdkafka offers no batch call on
//! a consumer, and the consumer queue also carries rebalance events, which
//! a batch call would serve with librdkafka's default handling (assign
//! nothing). So every assigned partition's fetch queue is forwarded to a
//! queue of the run's own, which holds records and fetch errors only, and
//! that queue is drained in batches; the consumer queue is still polled,
//! for rebalances and client errors.
//!
//! # Invariants
//! - A partition's fetch queue is forwarded here before the partition is
//!   first assigned (the rebalance callback, before `assign`). An
//!   application's forward marks the fetch queue (`RD_KAFKA_Q_F_FWD_APP`,
//!   `rdkafka_queue.c`), and librdkafka's fetch start then no longer
//!   forwards it to the consumer queue (`rd_kafka_toppar_fetch_start`,
//!   `rdkafka_partition.c`): a partition's records reach the run through
//!   one queue only, in offset order. A record of a forwarded partition
//!   found on the consumer queue is refused (`consumer.rs`), never archived
//!   out of order (a lower offset after a higher one would be dropped as a
//!   duplicate).
//! - librdkafka's fetch stop clears a forward (and a stop still in flight
//!   from a revoke can clear one made for the assignment after it); the
//!   fetch queue then holds its records until it is forwarded again, which
//!   the consumer thread does for every assigned partition at least every
//!   [`REFORWARD_INTERVAL`]. Nothing is lost or reordered meanwhile: a
//!   forward moves what the fetch queue holds to the end of this one.
//! - Every message taken is destroyed exactly once ([`Fetched`]'s `Drop`).
//! - The queue is destroyed, after every forward is undone, before the
//!   consumer is closed: librdkafka requires an application's queues to go
//!   before its handle ([`FetchGuard`]).

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_engine::{Header, Record, TimestampType, TopicPartition};
use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;

use crate::error::{ConnectorError, Result};
use crate::rebalance::SinkContext;

/// A lock on what only this module's small critical sections touch: a
/// panic inside one cannot leave it half changed, so poisoning is ignored.
pub(crate) fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How often every assigned partition is forwarded again, in case a fetch
/// stop cleared its forward after it was made. Until then such a partition
/// waits (its records stay in its fetch queue); nothing else happens.
pub(crate) const REFORWARD_INTERVAL: Duration = Duration::from_millis(100);

/// Most records one batch call takes.
pub const TAKE_MAX: usize = 1024;

/// The run's own queue, and which partitions are forwarded to it.
pub struct Fetch {
    rk: NonNull<rd::rd_kafka_t>,
    queue: NonNull<rd::rd_kafka_queue_t>,
    forwarded: Mutex<BTreeSet<TopicPartition>>,
}

// SAFETY: librdkafka's handle and queue functions used here are
// thread-safe (each queue has its own lock); `forwarded` is behind a mutex.
unsafe impl Send for Fetch {}
unsafe impl Sync for Fetch {}

impl Fetch {
    /// A queue of `consumer`'s own. Drop it before the consumer: the
    /// harness's consume-only ceiling uses this directly; the archive
    /// through [`FetchGuard`].
    pub fn new<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> Result<Fetch> {
        let rk = consumer.client().native_ptr();
        // SAFETY: `rk` is the consumer's live handle; the queue is destroyed
        // (Drop) before the consumer is (FetchGuard).
        let queue = unsafe { rd::rd_kafka_queue_new(rk) };
        Ok(Fetch {
            rk: NonNull::new(rk)
                .ok_or_else(|| ConnectorError::Sink("no consumer handle".into()))?,
            queue: NonNull::new(queue)
                .ok_or_else(|| ConnectorError::Sink("librdkafka could not make a queue".into()))?,
            forwarded: Mutex::new(BTreeSet::new()),
        })
    }

    /// Forward `tp`'s fetch queue here (again). False if librdkafka has no
    /// such partition queue, or the topic name cannot be passed to it.
    pub fn forward(&self, tp: &TopicPartition) -> bool {
        let Ok(topic) = CString::new(tp.topic.as_str()) else {
            return false;
        };
        // SAFETY: the handle is live (see `new`); the partition queue handle
        // is released right after the forward, which the fetch queue keeps.
        let forwarded = unsafe {
            let pq =
                rd::rd_kafka_queue_get_partition(self.rk.as_ptr(), topic.as_ptr(), tp.partition);
            if pq.is_null() {
                false
            } else {
                rd::rd_kafka_queue_forward(pq, self.queue.as_ptr());
                rd::rd_kafka_queue_destroy(pq);
                true
            }
        };
        if forwarded {
            guard(&self.forwarded).insert(tp.clone());
        }
        forwarded
    }

    /// Whether `tp` was ever forwarded here. Its records then never come
    /// through the consumer queue (see the module's invariants).
    pub(crate) fn is_forwarded(&self, tp: &TopicPartition) -> bool {
        guard(&self.forwarded).contains(tp)
    }

    /// Take what is waiting, up to `max` records (and fetch errors). If
    /// nothing is, wait up to `wait` for the first. librdkafka's batch call
    /// waits for a full batch, so it is asked for what is there first.
    pub fn take(&self, wait: Duration, max: usize, out: &mut Vec<Fetched>) {
        let max = max.clamp(1, TAKE_MAX);
        let mut got = self.take_once(0, max, out);
        if got == 0 && !wait.is_zero() {
            let wait_ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
            got = self.take_once(wait_ms, 1, out);
            if got == 1 && max > 1 {
                self.take_once(0, max - 1, out);
            }
        }
    }

    fn take_once(&self, timeout_ms: i32, max: usize, out: &mut Vec<Fetched>) -> usize {
        let mut buf: [*mut rd::rd_kafka_message_t; TAKE_MAX] = [std::ptr::null_mut(); TAKE_MAX];
        let max = max.min(TAKE_MAX);
        // SAFETY: `buf` has room for `max` pointers; librdkafka fills the
        // first `n` with messages the caller then owns.
        let n = unsafe {
            rd::rd_kafka_consume_batch_queue(self.queue.as_ptr(), timeout_ms, buf.as_mut_ptr(), max)
        };
        let n = usize::try_from(n).unwrap_or(0).min(max);
        out.extend(
            buf[..n]
                .iter()
                .filter_map(|&m| NonNull::new(m))
                .map(Fetched),
        );
        n
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        // Undo every forward first, so that no fetch queue keeps a reference
        // to this queue past its destruction. What a fetch queue receives
        // from now on stays there (its forward mark keeps it off the
        // consumer queue) until the consumer closes and drops it.
        let tps: Vec<TopicPartition> = guard(&self.forwarded).iter().cloned().collect();
        for tp in tps {
            let Ok(topic) = CString::new(tp.topic.as_str()) else {
                continue;
            };
            // SAFETY: as in `forward`; a null destination undoes the forward.
            unsafe {
                let pq = rd::rd_kafka_queue_get_partition(
                    self.rk.as_ptr(),
                    topic.as_ptr(),
                    tp.partition,
                );
                if !pq.is_null() {
                    rd::rd_kafka_queue_forward(pq, std::ptr::null_mut());
                    rd::rd_kafka_queue_destroy(pq);
                }
            }
        }
        // SAFETY: created by `rd_kafka_queue_new`, destroyed once, before
        // the consumer's handle.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// The run's `Fetch`, installed in the consumer's context (where the
/// rebalance callback forwards newly assigned partitions) for as long as
/// this lives. Drop it before closing the consumer.
pub(crate) struct FetchGuard<'c> {
    consumer: &'c BaseConsumer<SinkContext>,
    fetch: Arc<Fetch>,
}

impl<'c> FetchGuard<'c> {
    pub(crate) fn install(consumer: &'c BaseConsumer<SinkContext>) -> Result<FetchGuard<'c>> {
        let fetch = Arc::new(Fetch::new(consumer)?);
        *guard(&consumer.context().fetch) = Some(fetch.clone());
        Ok(FetchGuard { consumer, fetch })
    }

    pub(crate) fn fetch(&self) -> &Fetch {
        &self.fetch
    }
}

impl Drop for FetchGuard<'_> {
    fn drop(&mut self) {
        // The context's reference goes first; ours is then the last, and
        // dropping it destroys the queue.
        guard(&self.consumer.context().fetch).take();
    }
}

/// One message taken from the run's queue: a record, or a fetch error.
pub struct Fetched(NonNull<rd::rd_kafka_message_t>);

// SAFETY: a message is owned by whoever took it; librdkafka's accessors used
// here only read it.
unsafe impl Send for Fetched {}

impl Drop for Fetched {
    fn drop(&mut self) {
        // SAFETY: taken from `rd_kafka_consume_batch_queue`, destroyed once.
        unsafe { rd::rd_kafka_message_destroy(self.0.as_ptr()) }
    }
}

impl Fetched {
    fn raw(&self) -> &rd::rd_kafka_message_t {
        // SAFETY: valid until `Drop`.
        unsafe { self.0.as_ref() }
    }

    /// The error this message carries instead of a record, as rust-rdkafka's
    /// `poll` would give it.
    pub fn error(&self) -> Option<KafkaError> {
        let m = self.raw();
        match m.err {
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => None,
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                Some(KafkaError::PartitionEOF(m.partition))
            }
            e => Some(KafkaError::MessageConsumption(e.into())),
        }
    }

    /// `len` bytes at `ptr`, which belong to this message.
    fn bytes(&self, ptr: *const std::ffi::c_void, len: usize) -> Option<&[u8]> {
        if ptr.is_null() {
            None
        } else {
            // SAFETY: librdkafka gives `len` readable bytes at `ptr`.
            Some(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
        }
    }

    /// The value's length (0 for a null value).
    pub fn payload_len(&self) -> usize {
        self.payload().map_or(0, <[u8]>::len)
    }

    fn key(&self) -> Option<&[u8]> {
        self.bytes(self.raw().key, self.raw().key_len)
    }

    fn payload(&self) -> Option<&[u8]> {
        self.bytes(self.raw().payload, self.raw().len)
    }

    fn timestamp(&self) -> (TimestampType, i64) {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is live.
        let ts = unsafe { rd::rd_kafka_message_timestamp(self.0.as_ptr(), &mut kind) };
        match kind {
            _ if ts == -1 => (TimestampType::NotAvailable, -1),
            rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => {
                (TimestampType::CreateTime, ts)
            }
            rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => {
                (TimestampType::LogAppendTime, ts)
            }
            rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => {
                (TimestampType::NotAvailable, -1)
            }
        }
    }

    fn headers(&self) -> std::result::Result<Vec<Header>, String> {
        let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the message is live; the headers belong to it.
        let err = unsafe { rd::rd_kafka_message_headers(self.0.as_ptr(), &mut hdrs) };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || hdrs.is_null() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for idx in 0.. {
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            // SAFETY: `hdrs` is live with the message; librdkafka sets the
            // three outputs for an index it has.
            let err =
                unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                break;
            }
            // SAFETY: a header name is a NUL-terminated string.
            let name = unsafe { CStr::from_ptr(name) }
                .to_str()
                .map_err(|_| crate::convert::HEADER_NAME_NOT_UTF8.to_owned())?;
            out.push(Header {
                name: name.to_owned(),
                value: self.bytes(value, size).map(<[u8]>::to_vec),
            });
        }
        Ok(out)
    }
}

impl crate::convert::Polled for Fetched {
    fn topic(&self) -> &str {
        let rkt = self.raw().rkt;
        if rkt.is_null() {
            // Only an error can lack a topic; never archived.
            return "";
        }
        // SAFETY: a message's topic handle lives as long as the message, and
        // its name is a NUL-terminated string.
        unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(rkt)) }
            .to_str()
            // Only names cairn subscribed to arrive, and those are checked
            // Kafka names; anything else is not assigned, so not archived.
            .unwrap_or("")
    }

    fn partition(&self) -> i32 {
        self.raw().partition
    }

    fn offset(&self) -> i64 {
        self.raw().offset
    }

    fn to_record(&self) -> std::result::Result<Record, String> {
        let (timestamp_type, timestamp_ms) = self.timestamp();
        Ok(Record {
            offset: self.offset(),
            timestamp_type,
            timestamp_ms,
            key: self.key().map(<[u8]>::to_vec),
            value: self.payload().map(<[u8]>::to_vec),
            headers: self.headers()?,
        })
    }
}

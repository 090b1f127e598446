//! Records taken from librdkafka without rust-rdkafka's per-record costs.
//!
//! rust-rdkafka hands a consumer's records over one `poll` call each, which
//! wraps each in an event and an `Arc` and reads the clock once more than
//! librdkafka does. The consumer thread is the busiest thread of an
//! archiving run, and taking records as below costs it about a fifth less
//! CPU a record (`cairn-bench`'s `take-cost`; docs/BENCHMARKS.md, "Where the
//! time goes (connector)", item 10). So
//! every assigned partition's fetch queue is forwarded to a queue of the
//! run's own, which holds records and fetch errors only (rebalances stay on
//! the consumer queue, which is still polled; a partition's other errors,
//! such as "desired partition is not available", librdkafka serves itself
//! and logs, and the group reports its topics' errors on the consumer
//! queue), and records are taken from
//! it with librdkafka's `rd_kafka_consume_queue`: the call of its own
//! queue-based consumer API, one record at a time, with the same semantics
//! as `poll` (a partition's position moves for records only, past each
//! record handed over; `rd_kafka_fetch_op_app_prepare`, `rdkafka_op.c`).
//!
//! librdkafka's two calls that take many at once were tried and are not
//! used. `rd_kafka_consume_batch_queue` moves each partition's position
//! past every message it returns, errors included
//! (`rd_kafka_q_serve_rkmessages`, `rdkafka_queue.c`): after a fetch error
//! the position is one past a record never delivered, and after an error
//! carrying a logical offset (a failed offset query for "beginning") it can
//! become "end"; a partition paused and resumed, as librdkafka does across
//! a cooperative rebalance, fetches from there, skipping records.
//! `rd_kafka_consume_callback_queue` keeps positions right but first moves
//! everything queued aside (`rd_kafka_q_serve0`), so while it runs the
//! fetchers see an empty queue and fetch past `queued.min.messages` and
//! `queued.max.messages.kbytes`: measured here, peak RSS archiving 1M
//! records rose from about 190 to 330-395 MiB, and on a longer backlog it
//! has no bound.
//!
//! # Invariants
//! - A partition's fetch queue is forwarded here before the partition is
//!   first assigned (the rebalance callback, before `assign`). An
//!   application's forward marks the fetch queue (`RD_KAFKA_Q_F_FWD_APP`,
//!   `rdkafka_queue.c`), and librdkafka's fetch start then no longer
//!   forwards it to the consumer queue (`rd_kafka_toppar_op_fetch_start`,
//!   `rdkafka_partition.c`): a partition's records reach the run through one
//!   queue only, in offset order. A record found on the consumer queue
//!   (only a failed forward leaves one there) is refused (`consumer.rs`),
//!   never archived out of order.
//! - librdkafka's fetch stop clears a forward, and a stop still in flight
//!   (an offset reset's re-assignment, a revoke followed at once by an
//!   assignment) can clear one made after it; that fetch queue then holds
//!   its records until it is forwarded again, which the consumer thread does
//!   for every assigned partition at least every `REFORWARD_INTERVAL`,
//!   through the partition queue handle kept since the assignment (no
//!   lookup in librdkafka). Nothing is lost or reordered
//!   meanwhile: a forward moves what the fetch queue holds to the end of
//!   this one, and a fetch queue holds one partition's records only.
//! - Only partitions' fetch queues are ever forwarded into this queue,
//!   never the consumer queue or the main queue: `rd_kafka_consume_queue`
//!   (a call of librdkafka's legacy API, which accepts any queue) asserts
//!   that each entry it pops is a fetched message or a consumer error
//!   (`rd_kafka_consume0`, `rdkafka.c`), and would abort the process on a
//!   rebalance or log event. A fetch queue holds only those, and barriers
//!   its poll drops first. `tests/tests/fetch.rs` checks this against the
//!   librdkafka built; rerun it on every upgrade.
//! - A message is handed to the taker once; nothing of it is read after
//!   [`Taken`]'s borrow. It is then destroyed on a thread of its own (the
//!   reaper), which frees librdkafka's allocations off the consumer thread:
//!   they were made on librdkafka's broker thread, and freeing them was a
//!   sixth of the consumer thread's CPU (docs/BENCHMARKS.md, item 11). If
//!   the taker panics, or the reaper is gone, messages are destroyed where
//!   they are. What the taker was not handed stays queued, in order:
//!   messages are taken one at a time, so stopping takes nothing more.
//! - Every message taken is destroyed before the consumer: [`Fetch`]'s
//!   `Drop` closes the reaper's channel and joins it first.
//! - Every queue handle is destroyed before the consumer is: [`Fetch`]
//!   borrows the consumer, and its `Drop` undoes the forwards and destroys
//!   the handles. A `Forwarder` (kept in the consumer's context) touches
//!   a handle only when handed the live consumer they belong to, and only
//!   while the `Fetch` lives. A `Fetch` must be dropped, not leaked, before
//!   the consumer goes: leaked, its queues would leak with it (never freed
//!   under a forwarder), but its reaper could still be destroying messages
//!   after the consumer is gone.

use std::collections::BTreeMap;
use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_engine::{Header, Record, TimestampType, TopicPartition};
use rdkafka::bindings as rd;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::TopicPartitionList;

use crate::consumer::lock;
use crate::error::{ConnectorError, Result};

/// How often every assigned partition is forwarded again, in case a fetch
/// stop cleared its forward after it was made. Until then such a partition
/// waits (its records stay in its fetch queue); nothing else happens.
pub(crate) const REFORWARD_INTERVAL: Duration = Duration::from_millis(100);

/// Most messages one [`Fetch::take`] hands over: the consumer queue (a
/// rebalance waiting) is polled again after at most this many.
pub const TAKE_MAX: usize = 1024;

/// Takes' worth of messages waiting for the reaper, at most: a take waits
/// for room beyond that (the reaper only frees, so it seldom lags). Each
/// message keeps its fetch response alive until it is destroyed, outside
/// librdkafka's `queued.max.messages.kbytes`: with the take being filled
/// and the one being destroyed, at most four takes' worth.
const REAPER_BACKLOG_MAX: usize = 2;

/// What the taker of [`Fetch::take`] wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The next message, if one is waiting.
    Go,
    /// Nothing more in this call: what is waiting stays queued, in order.
    Stop,
}

/// A queue handle the forwarder owns. Never destroyed by `Drop`: only
/// [`Fetch`]'s `Drop` destroys handles, while the consumer is alive, so a
/// forwarder dropped after the consumer (with its context) touches nothing.
#[derive(Clone, Copy)]
struct QueuePtr(NonNull<rd::rd_kafka_queue_t>);

/// What the forwarder and the taker share. Each critical section leaves
/// it whole before anything can panic.
struct Queues {
    rk: NonNull<rd::rd_kafka_t>,
    /// The run's queue; `None` once [`Fetch`] is dropped.
    target: Option<QueuePtr>,
    /// Each forwarded partition's fetch queue, kept from its assignment to
    /// its revoke.
    partitions: BTreeMap<TopicPartition, QueuePtr>,
}

// SAFETY: librdkafka's handle and queue functions used here are thread-safe
// (each queue has its own lock); the pointers are only used behind the
// mutex, while a borrow of the live consumer is held (see `live`).
unsafe impl Send for Queues {}

impl Queues {
    /// The run's queue, if `consumer` is the consumer these queues belong
    /// to and the run's queue is not gone. Every use of a pointer here goes
    /// through this, under a borrow of the consumer: the handle and the
    /// queues are then alive (only `Fetch`'s drop destroys queues, and it
    /// clears `target` as it does).
    fn live<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>) -> Option<QueuePtr> {
        let rk = consumer.client().native_ptr();
        self.target.filter(|_| rk == self.rk.as_ptr())
    }

    /// Forward `tp`'s fetch queue to `target`, looking its queue up the
    /// first time. False if librdkafka has no such partition queue, or the
    /// topic name cannot be passed to it.
    fn forward(&mut self, target: QueuePtr, tp: &TopicPartition) -> bool {
        let pq = match self.partitions.get(tp) {
            Some(pq) => *pq,
            None => {
                let Ok(topic) = CString::new(tp.topic.as_str()) else {
                    return false;
                };
                // SAFETY: the handle is live (`live`); the partition queue
                // handle is kept until the revoke or `Fetch`'s drop
                // destroys it.
                let pq = unsafe {
                    rd::rd_kafka_queue_get_partition(self.rk.as_ptr(), topic.as_ptr(), tp.partition)
                };
                let Some(pq) = NonNull::new(pq).map(QueuePtr) else {
                    return false;
                };
                self.partitions.insert(tp.clone(), pq);
                pq
            }
        };
        // SAFETY: both handles are live (`live`, and held here).
        unsafe { rd::rd_kafka_queue_forward(pq.0.as_ptr(), target.0.as_ptr()) };
        true
    }
}

/// Forwards partitions' fetch queues to a [`Fetch`]'s queue from the
/// consumer's rebalance callback, which keeps one in the consumer's context.
/// Each call takes the consumer, which proves it alive; once the `Fetch` is
/// gone a forwarder does nothing.
#[derive(Clone)]
pub(crate) struct Forwarder(Arc<Mutex<Queues>>);

impl Forwarder {
    /// Forward `tp`'s fetch queue to the run's queue. False if the run's
    /// queue is gone or belongs to another consumer, librdkafka has no such
    /// partition queue, or the topic name cannot be passed to it.
    pub(crate) fn forward<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tp: &TopicPartition,
    ) -> bool {
        let mut q = lock(&self.0);
        match q.live(consumer) {
            Some(target) => q.forward(target, tp),
            None => false,
        }
    }

    /// `tp` was revoked: its handle goes, and it is forwarded again only if
    /// it is assigned again. Its forward stays until its fetch stops, so
    /// what it had fetched still arrives in order (and is not archived:
    /// it is no longer assigned).
    ///
    /// It is forwarded once more first: a fetch stop clears a forward, and
    /// one a restart made (`retention::restart_fetch`, then
    /// [`Fetch::forward_again`]) can be cleared by the stop still in
    /// flight, until the next re-forward. A revoke in that window left
    /// the partition's fetched records in its own queue, which nothing
    /// then pops, holding their fetch response buffers until the client
    /// was destroyed (seen in review, 2026-12-05). Forwarded, they reach
    /// the run's queue, where they are dropped as outdated or unassigned.
    pub(crate) fn release<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tp: &TopicPartition,
    ) {
        let mut q = lock(&self.0);
        let Some(target) = q.live(consumer) else {
            return;
        };
        if let Some(pq) = q.partitions.remove(tp) {
            // SAFETY: both handles are live (`live`, and held here); the
            // partition's is destroyed once: removed above.
            unsafe {
                rd::rd_kafka_queue_forward(pq.0.as_ptr(), target.0.as_ptr());
                rd::rd_kafka_queue_destroy(pq.0.as_ptr());
            }
        }
    }
}

/// The run's own queue, which forwarded partitions' records and fetch
/// errors go to. It borrows the consumer: it goes first.
pub struct Fetch<'c> {
    queues: Arc<Mutex<Queues>>,
    target: QueuePtr,
    /// The consumer queue (rebalances, client errors), to see whether
    /// events wait; `None` for a consumer without a group.
    events: Option<QueuePtr>,
    /// Where taken messages go to be destroyed (see the invariants); `None`
    /// if its thread could not be started: then they are destroyed here.
    reaper: Option<Reaper>,
    _consumer: PhantomData<&'c ()>,
}

/// The thread that destroys taken messages.
struct Reaper {
    tx: std::sync::mpsc::SyncSender<Vec<Message>>,
    thread: std::thread::JoinHandle<()>,
    /// Its thread id, for benches that count its CPU time.
    tid: Arc<std::sync::OnceLock<u64>>,
}

impl Reaper {
    fn start() -> Option<Reaper> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Message>>(REAPER_BACKLOG_MAX);
        let tid = Arc::new(std::sync::OnceLock::new());
        let thread = std::thread::Builder::new()
            .name("cairn-reaper".into())
            .spawn({
                let tid = tid.clone();
                move || {
                    if let Some(t) = std::fs::read_link("/proc/thread-self")
                        .ok()
                        .and_then(|l| l.file_name()?.to_str()?.parse().ok())
                    {
                        let _ = tid.set(t);
                    }
                    // Each message is destroyed as it drops.
                    for messages in rx {
                        drop(messages);
                    }
                }
            })
            .ok()?;
        Some(Reaper { tx, thread, tid })
    }
}

// SAFETY: librdkafka's queue functions used here are thread-safe; the
// shared state is behind a mutex. Not `Sync`: two threads taking at once
// would each take a partition's records in turn, out of order across the
// two (no caller does; since 2026-12-05 none can).
unsafe impl Send for Fetch<'_> {}

impl<'c> Fetch<'c> {
    /// A queue of `consumer`'s own, which lives no longer than the consumer.
    ///
    /// # Safety
    ///
    /// The `Fetch` must be dropped, not leaked (`mem::forget`, a cycle of
    /// `Rc`s), before the consumer is: its reaper thread destroys the
    /// messages taken, and one destroyed after the consumer's client is
    /// gone touches freed memory. The borrow alone cannot promise that.
    pub unsafe fn new<C: ConsumerContext>(consumer: &'c BaseConsumer<C>) -> Result<Fetch<'c>> {
        let rk = NonNull::new(consumer.client().native_ptr())
            .ok_or_else(|| ConnectorError::Failed("no consumer handle".into()))?;
        // SAFETY: `rk` is the consumer's live handle; both queue handles are
        // destroyed in `Drop`, which runs while the borrowed consumer lives.
        let (target, events) = unsafe {
            (
                rd::rd_kafka_queue_new(rk.as_ptr()),
                rd::rd_kafka_queue_get_consumer(rk.as_ptr()),
            )
        };
        let events = NonNull::new(events).map(QueuePtr);
        let Some(target) = NonNull::new(target).map(QueuePtr) else {
            if let Some(e) = events {
                // SAFETY: just made, destroyed once.
                unsafe { rd::rd_kafka_queue_destroy(e.0.as_ptr()) };
            }
            return Err(ConnectorError::Failed(
                "librdkafka could not make a queue".into(),
            ));
        };
        Ok(Fetch {
            queues: Arc::new(Mutex::new(Queues {
                rk,
                target: Some(target),
                partitions: BTreeMap::new(),
            })),
            target,
            events,
            reaper: Reaper::start(),
            _consumer: PhantomData,
        })
    }

    /// The reaper thread's id (Linux), once it has started: its CPU time
    /// is `/proc/self/task/<id>/schedstat`.
    pub fn reaper_tid(&self) -> Option<u64> {
        self.reaper.as_ref().and_then(|r| r.tid.get().copied())
    }

    /// What forwards partitions here from the rebalance callback.
    pub(crate) fn forwarder(&self) -> Forwarder {
        Forwarder(self.queues.clone())
    }

    /// Forward `tp`'s fetch queue here, before its assignment. False if
    /// librdkafka has no such partition queue, or the topic name cannot be
    /// passed to it.
    fn forward(&self, tp: &TopicPartition) -> bool {
        let mut q = lock(&self.queues);
        // The borrowed consumer is alive, and this queue with it.
        q.forward(self.target, tp)
    }

    /// Assign `tpl`'s partitions to `consumer` directly (no group's
    /// rebalance: the consumer loop forwards in its rebalance callback
    /// instead), each forwarded here first, so that its records come only
    /// here. An error if `consumer` is not the one this queue belongs to, or
    /// a partition cannot be forwarded (then nothing is assigned).
    pub fn assign<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> Result<()> {
        if consumer.client().native_ptr() != lock(&self.queues).rk.as_ptr() {
            return Err(ConnectorError::Failed(
                "assigning through another consumer's queue".into(),
            ));
        }
        for e in tpl.elements() {
            let tp = TopicPartition::new(e.topic(), e.partition());
            if !self.forward(&tp) {
                return Err(ConnectorError::Failed(format!(
                    "librdkafka has no fetch queue for {tp}"
                )));
            }
        }
        consumer
            .assign(tpl)
            .map_err(ConnectorError::kafka("assign"))
    }

    /// Forward every partition forwarded before again (see the module's
    /// invariants): no lookup in librdkafka, a lock of the partition's
    /// fetch queue and of this one each. Assigning outside a rebalance
    /// callback stops and starts fetches, and a stop clears a forward when
    /// librdkafka gets to it: call this until the records come.
    pub fn forward_again(&self) {
        let q = lock(&self.queues);
        for pq in q.partitions.values() {
            // SAFETY: both handles are live: the borrowed consumer is, and
            // `Drop` has not run.
            unsafe { rd::rd_kafka_queue_forward(pq.0.as_ptr(), self.target.0.as_ptr()) };
        }
    }

    /// Whether events (a rebalance, an error, a commit's result) wait on the
    /// consumer queue: rust-rdkafka's `poll` serves one rebalance per call
    /// and then returns nothing, as it does when nothing waits.
    pub(crate) fn events_waiting(&self) -> bool {
        // SAFETY: live until `Drop`.
        self.events
            .is_some_and(|e| unsafe { rd::rd_kafka_queue_length(e.0.as_ptr()) } > 0)
    }

    /// Hand `f` what is waiting, in order, one message (a record or a fetch
    /// error) at a time, up to `max` messages or until it answers
    /// [`Flow::Stop`]; if nothing is waiting, wait up to `wait` for the
    /// first. What `f` was not handed stays queued, in order. Returns how
    /// many messages `f` was handed.
    pub fn take<F>(&self, wait: Duration, max: usize, mut f: F) -> usize
    where
        F: FnMut(&Taken<'_>) -> Flow,
    {
        let max = max.clamp(1, TAKE_MAX);
        let mut timeout_ms = wait.as_millis().min(i32::MAX as u128) as i32;
        let mut handed = 0;
        let mut done: Vec<Message> = Vec::with_capacity(max);
        while handed < max {
            // SAFETY: the queue is live until `Drop`; the message returned is
            // ours, and `Message`'s drop destroys it once.
            let m = unsafe { rd::rd_kafka_consume_queue(self.target.0.as_ptr(), timeout_ms) };
            let Some(m) = NonNull::new(m).map(Message) else {
                break;
            };
            timeout_ms = 0;
            handed += 1;
            let taken = Taken {
                m: m.0,
                _message: PhantomData,
            };
            let flow = f(&taken);
            done.push(m);
            if flow == Flow::Stop {
                break;
            }
        }
        if let (Some(reaper), false) = (&self.reaper, done.is_empty()) {
            // A reaper gone (it cannot panic, but) hands them back to be
            // destroyed here.
            let _ = reaper.tx.send(done);
        }
        handed
    }
}

/// A message taken from the queue, destroyed when dropped (also when the
/// taker panics).
struct Message(NonNull<rd::rd_kafka_message_t>);

// SAFETY: a message is owned by whoever took it, and librdkafka lets any
// thread destroy one (its references to the fetch buffer and the partition
// are atomically counted); `Message` gives no other access.
unsafe impl Send for Message {}

impl Drop for Message {
    fn drop(&mut self) {
        // SAFETY: returned by `rd_kafka_consume_queue`, destroyed once.
        unsafe { rd::rd_kafka_message_destroy(self.0.as_ptr()) }
    }
}

impl Drop for Fetch<'_> {
    fn drop(&mut self) {
        // Every message taken is destroyed before anything else goes.
        if let Some(Reaper { tx, thread, .. }) = self.reaper.take() {
            drop(tx);
            let _ = thread.join();
        }
        let mut q = lock(&self.queues);
        q.target = None;
        for (_, pq) in std::mem::take(&mut q.partitions) {
            // SAFETY: live (kept since `forward`), destroyed once: taken out
            // of the map above. Undoing the forward first leaves no fetch
            // queue of these pointing at a queue about to go; what a fetch
            // queue receives from now on stays there until the consumer
            // closes. A revoked partition's (`release`) may still forward
            // here until its fetch stop clears it: that forward holds its
            // own reference to this queue, which `destroy` below disables,
            // so what reaches it then is dropped, not read from freed
            // memory (`rd_kafka_q_fwd_set`, `rd_kafka_q_destroy_owner`).
            unsafe {
                rd::rd_kafka_queue_forward(pq.0.as_ptr(), std::ptr::null_mut());
                rd::rd_kafka_queue_destroy(pq.0.as_ptr());
            }
        }
        // SAFETY: made in `new`, destroyed once, before the consumer (which
        // `Fetch` borrows).
        unsafe {
            if let Some(e) = self.events {
                rd::rd_kafka_queue_destroy(e.0.as_ptr());
            }
            rd::rd_kafka_queue_destroy(self.target.0.as_ptr());
        }
    }
}

/// One message as [`Fetch::take`] hands it to its taker: a record, or a
/// fetch error. It lives only for the taker's call.
pub struct Taken<'m> {
    m: NonNull<rd::rd_kafka_message_t>,
    _message: PhantomData<&'m rd::rd_kafka_message_t>,
}

/// One field of a [`Taken`]'s message, read through its pointer, never
/// through a reference to the whole struct: its `err` may hold a code the
/// bindings' enum has no variant for (see [`Taken::error`]), and a
/// reference to a struct holding one is undefined behaviour (until the
/// night of 2026-12-04 the other fields were read through one). Never for
/// `err` itself: read as the enum, an unknown code is that same undefined
/// behaviour ([`Taken::error`] reads it as an `int`).
macro_rules! field {
    ($taken:expr, $name:ident) => {
        // SAFETY: the message is valid for the taker's call, which the
        // `Taken` borrowed cannot outlive (`take` destroys the message
        // after it); the field is a plain C value of its declared type.
        unsafe { std::ptr::addr_of!((*$taken.m.as_ptr()).$name).read() }
    };
}

impl Taken<'_> {
    /// The error this message carries instead of a record, as rust-rdkafka's
    /// `poll` would give it.
    ///
    /// The code is read as the C `int` it is, not as the bindings' enum:
    /// librdkafka passes a broker's fetch error code it does not know
    /// through as it came (103, a topic recreated under a consumer, say),
    /// and an enum value with no variant would be undefined behaviour. Such
    /// a code is `Unknown` here; the message's payload describes it.
    pub fn error(&self) -> Option<KafkaError> {
        // SAFETY: the message is valid for the taker's call (`field!`); `err`
        // is a C enum, an `int`, read as one.
        let code = unsafe {
            std::ptr::addr_of!((*self.m.as_ptr()).err)
                .cast::<i32>()
                .read()
        };
        match crate::librdkafka::error_code(code)? {
            rdkafka::error::RDKafkaErrorCode::PartitionEOF => {
                Some(KafkaError::PartitionEOF(field!(self, partition)))
            }
            e => Some(KafkaError::MessageConsumption(e)),
        }
    }

    /// Where an error happened and librdkafka's description of it, as
    /// `t/p@o: description` (without `@o` when it names no offset, and
    /// without `t/p@o: ` when it names no topic).
    pub fn describe_error(&self) -> String {
        let at = match self.offset() {
            _ if self.topic().is_empty() => String::new(),
            o if o >= 0 => format!("{}/{}@{o}: ", self.topic(), self.partition()),
            _ => format!("{}/{}: ", self.topic(), self.partition()),
        };
        // An error's payload is its description, when it has one.
        let what = match self.payload() {
            Some(text) => String::from_utf8_lossy(text).into_owned(),
            None => self.error().map(|e| e.to_string()).unwrap_or_default(),
        };
        format!("{at}{what}")
    }

    /// `len` bytes at `ptr`, which belong to this message.
    fn bytes(&self, ptr: *const c_void, len: usize) -> Option<&[u8]> {
        if ptr.is_null() {
            None
        } else {
            // SAFETY: librdkafka gives `len` readable bytes at `ptr`, owned
            // by the message.
            Some(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
        }
    }

    /// The value, if any (an error's is its description).
    pub fn payload(&self) -> Option<&[u8]> {
        self.bytes(field!(self, payload), field!(self, len))
    }

    fn key(&self) -> Option<&[u8]> {
        self.bytes(field!(self, key), field!(self, key_len))
    }

    fn timestamp(&self) -> (TimestampType, i64) {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is live.
        let ts = unsafe { rd::rd_kafka_message_timestamp(self.m.as_ptr(), &mut kind) };
        // The type as librdkafka reports it, whatever the time: a record a
        // broker up-converted from the oldest format is a create time of
        // -1, as a Java client reports it too (until the night of
        // 2026-12-04 any -1 was archived as no timestamp at all). Reads
        // and retention treat every time below 0 as none either way.
        match kind {
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

    fn headers(
        &self,
        copy: &mut impl FnMut(&[u8]) -> Vec<u8>,
    ) -> std::result::Result<Vec<Header>, String> {
        let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the message is live; the headers belong to it.
        match unsafe { rd::rd_kafka_message_headers(self.m.as_ptr(), &mut hdrs) } {
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR if !hdrs.is_null() => {}
            // No headers.
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            | rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__NOENT => return Ok(Vec::new()),
            // Headers the record has but librdkafka cannot parse: archived
            // without them, the record would be silently changed.
            e => {
                return Err(format!(
                    "its headers cannot be read: {}",
                    KafkaError::MessageConsumption(e.into())
                ))
            }
        }
        let mut out = Vec::new();
        for idx in 0.. {
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            // SAFETY: `hdrs` lives with the message; librdkafka sets the
            // three outputs for an index it has.
            let err =
                unsafe { rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size) };
            if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                break;
            }
            // SAFETY: a header name is a NUL-terminated string.
            let read = unsafe { CStr::from_ptr(name) };
            // SAFETY: `name`, `value` and `size` are as librdkafka set them
            // just above, for a header of `hdrs`.
            if unsafe { held_name_bytes(name, value, size) }
                .is_some_and(|held| held != read.to_bytes().len())
            {
                return Err(crate::convert::HEADER_NAME_HOLDS_NUL.to_owned());
            }
            let name = read
                .to_str()
                .map_err(|_| crate::convert::HEADER_NAME_NOT_UTF8.to_owned())?;
            out.push(Header {
                name: name.to_owned(),
                value: self.bytes(value, size).map(&mut *copy),
            });
        }
        Ok(out)
    }

    /// The record's topic ("" for an error without one).
    pub fn topic(&self) -> &str {
        let rkt = field!(self, rkt);
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

    /// The record's partition.
    pub fn partition(&self) -> i32 {
        field!(self, partition)
    }

    /// The record's offset (an error's: where it happened, if it says).
    pub fn offset(&self) -> i64 {
        field!(self, offset)
    }

    /// The record as the archive stores it, or why it cannot be: headers
    /// librdkafka cannot parse, or a header name that is not UTF-8.
    pub fn to_record(&self) -> std::result::Result<Record, String> {
        self.to_record_with(<[u8]>::to_vec)
    }

    /// [`to_record`](Self::to_record), with the key, value and header
    /// values copied by `copy` (into reused buffers, `recycle.rs`).
    pub fn to_record_with(
        &self,
        mut copy: impl FnMut(&[u8]) -> Vec<u8>,
    ) -> std::result::Result<Record, String> {
        let (timestamp_type, timestamp_ms) = self.timestamp();
        Ok(Record {
            offset: field!(self, offset),
            timestamp_type,
            timestamp_ms,
            key: self.key().map(&mut copy),
            value: self.payload().map(&mut copy),
            headers: self.headers(&mut copy)?,
        })
    }
}

/// Whether librdkafka reports a produced message certainly not persisted
/// (`rd_kafka_message_status`: never sent, as one purged from its queue
/// before its first send), as against possibly or certainly persisted.
/// Here because this module holds the crate's FFI to messages.
pub(crate) fn certainly_not_persisted(m: &rdkafka::message::BorrowedMessage<'_>) -> bool {
    // SAFETY: the message is valid for the borrow; the call only reads it.
    let status = unsafe { rd::rd_kafka_message_status(m.ptr()) };
    status == rd::rd_kafka_msg_status_t::RD_KAFKA_MSG_STATUS_NOT_PERSISTED
}

/// The length of a header's name as librdkafka holds it, which a name
/// holding a NUL byte makes longer than the C string its API gives.
/// librdkafka 2.12.1 (`rdkafka_header.h`, the version rdkafka-sys bundles)
/// keeps a header as `{ser_size, value_size, name_size, value, name[]}`,
/// four words before the name; read only when the two of them the API also
/// gives (the value's pointer and size) are found in their places, so a
/// build whose layout differs reads nothing further (`None`). Tested
/// against librdkafka's own headers (`a_header_name_holding_nul_is_seen`).
///
/// # Safety
/// `name`, `value` and `size` are what `rd_kafka_header_get_all` set for a
/// header that is still live.
unsafe fn held_name_bytes(
    name: *const std::ffi::c_char,
    value: *const c_void,
    size: usize,
) -> Option<usize> {
    let word = std::mem::size_of::<usize>();
    let at = |words_before: usize| name.cast::<u8>().wrapping_sub(words_before * word);
    // SAFETY: in librdkafka's layout the four words before the name are the
    // header's own fields, in its allocation, aligned (a malloc'd struct).
    unsafe {
        let value_at = at(1).cast::<*const c_void>().read();
        let value_size = at(3).cast::<usize>().read();
        let ser_size = at(4).cast::<usize>().read();
        let name_size = at(2).cast::<usize>().read();
        // The value's size and pointer in their places, and the serialised
        // size their sum plus the two lengths' varints (a byte to five
        // each): the layout is the one known.
        let known = value_at == value
            && value_size == size
            && ser_size >= name_size.saturating_add(value_size).saturating_add(2)
            && ser_size <= name_size.saturating_add(value_size).saturating_add(10);
        known.then_some(name_size)
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::bindings as rd;

    /// Headers librdkafka itself makes: a name holding a NUL byte is seen
    /// as longer than the C string the API gives, and any other is not,
    /// with a value, an empty one, or none (a librdkafka whose header
    /// layout differed would fail here, not read past its fields).
    #[test]
    fn a_header_name_holding_nul_is_seen() {
        // A name, its value, and whether the name holds a NUL byte.
        type Case = (&'static [u8], Option<&'static [u8]>, bool);
        let cases: [Case; 6] = [
            (b"plain", Some(b"value"), false),
            (b"plain", Some(b""), false),
            (b"plain", None, false),
            (b"a\0b", Some(b"v"), true),
            (b"\0", None, true),
            (b"", Some(b"v"), false),
        ];
        for (name, value, holds_nul) in cases {
            // SAFETY: a headers list librdkafka makes and frees, read while
            // it lives.
            unsafe {
                let hdrs = rd::rd_kafka_headers_new(1);
                let (v, vlen) = match value {
                    Some(v) => (v.as_ptr().cast(), v.len() as isize),
                    None => (std::ptr::null(), 0),
                };
                let err = rd::rd_kafka_header_add(
                    hdrs,
                    name.as_ptr().cast(),
                    name.len() as isize,
                    v,
                    vlen,
                );
                assert_eq!(err, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
                let (mut n, mut val, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
                let err = rd::rd_kafka_header_get_all(hdrs, 0, &mut n, &mut val, &mut size);
                assert_eq!(err, rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR);
                let held = super::held_name_bytes(n, val, size);
                let read = std::ffi::CStr::from_ptr(n).to_bytes().len();
                assert_eq!(
                    held,
                    Some(name.len()),
                    "{name:?}: the layout is not the one known"
                );
                assert_eq!(held != Some(read), holds_nul, "{name:?}");
                rd::rd_kafka_headers_destroy(hdrs);
            }
        }
    }
}

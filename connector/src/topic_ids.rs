//! Kafka's topic ids (KIP-516), read with librdkafka's `DescribeTopics`,
//! which rust-rdkafka does not offer.
//!
//! An archive resumes each partition at its own next offset, so it must
//! know that the topic it resumes in is the one it archived: a topic
//! deleted and created again under its name, or the same name in another
//! cluster (a restore's target), reuses its offsets for other records.
//! Kafka's topic id tells them apart; the run reads it at each assignment
//! and hands it to the sink (`SinkTask::check_topics`) before any
//! partition of the topic resumes.
//!
//! # Invariants
//! - Every handle this module makes (the topic list, the options, the
//!   reply queue, the event) is destroyed before it returns, whatever the
//!   answer. A request still in flight when the wait ends keeps its own
//!   reference to the queue (librdkafka's admin ops do), so destroying
//!   ours is safe.
//! - No answer is taken for an id: a failed or missing description is
//!   [`KafkaTopicId::Unread`], and Kafka's zero id (a broker before 2.8) is
//!   [`KafkaTopicId::NoId`].

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::time::Duration;

use cairn_engine::TopicId;

use crate::task::KafkaTopicId;
use rdkafka::bindings as rd;
use rdkafka::client::Client;
use rdkafka::ClientContext;

extern "C" {
    // Declared with the C `int` they return, not the bindings' enum: a
    // code librdkafka passes through from a broker need not be one of its
    // variants (librdkafka::error_code).
    fn rd_kafka_event_error(ev: *mut rd::rd_kafka_event_t) -> c_int;
    fn rd_kafka_error_code(error: *const rd::rd_kafka_error_t) -> c_int;
}

/// Describe `topics` within `timeout`: a metadata read of the first, to
/// learn a broker that answers, then one request to that broker, whose
/// answer covers every topic (a request that fails or is not answered in
/// time makes each [`KafkaTopicId::Unread`] with the same reason).
///
/// librdkafka sends an admin request to the controller unless told which
/// broker: any broker answers this one (it is a metadata request), and
/// the controller a broker names may be none the client can reach (a
/// KRaft cluster's, or librdkafka's mock cluster's, which names broker 0
/// of brokers 1 to N: there the request waited its whole timeout).
pub(crate) fn describe<C: ClientContext>(
    client: &Client<C>,
    topics: &[String],
    timeout: Duration,
) -> BTreeMap<String, KafkaTopicId> {
    let unread = |why: &str| {
        topics
            .iter()
            .map(|t| (t.clone(), KafkaTopicId::Unread(why.to_owned())))
            .collect()
    };
    if topics.is_empty() {
        return BTreeMap::new();
    }
    let names: Vec<CString> = match topics.iter().map(|t| CString::new(t.as_str())).collect() {
        Ok(n) => n,
        Err(_) => return unread("a topic name holds a NUL byte"),
    };
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let deadline = std::time::Instant::now() + timeout;
    let metadata = match client.fetch_metadata(Some(&topics[0]), timeout) {
        Ok(m) => m,
        Err(e) => return unread(&format!("no broker answered a metadata request: {e}")),
    };
    // A leader of the topic's (up, as its leader), or any broker the
    // cluster lists (the answer's own broker is known by its bootstrap
    // address only, id -1).
    let leader = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions())
        .map(|p| p.leader())
        .find(|&l| l >= 0);
    let Some(broker) = leader.or_else(|| metadata.brokers().first().map(|b| b.id())) else {
        return unread("Kafka's metadata listed no broker");
    };
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    let rk = client.native_ptr();
    let timeout_ms = c_int::try_from(left.as_millis())
        .unwrap_or(c_int::MAX)
        .max(1);
    // SAFETY: `ptrs` points into `names`, alive across the call, which
    // copies them; each handle is destroyed below (the guards).
    let collection = Guard::new(
        unsafe { rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len()) },
        |p| unsafe { rd::rd_kafka_TopicCollection_destroy(p) },
    );
    let options = Guard::new(
        unsafe {
            rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            )
        },
        |p| unsafe { rd::rd_kafka_AdminOptions_destroy(p) },
    );
    let queue = Guard::new(unsafe { rd::rd_kafka_queue_new(rk) }, |p| unsafe {
        rd::rd_kafka_queue_destroy(p)
    });
    let (Some(collection), Some(options), Some(queue)) = (collection, options, queue) else {
        return unread("librdkafka could not make the request");
    };
    let mut errstr = [0 as c_char; 256];
    // SAFETY: `errstr` is as long as said.
    let set = unsafe {
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr.as_ptr(),
            timeout_ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if set != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return unread("librdkafka refused the request's timeout");
    }
    // SAFETY: as above.
    let set = unsafe {
        rd::rd_kafka_AdminOptions_set_broker(
            options.ptr.as_ptr(),
            broker,
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    if set != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        return unread(&format!(
            "librdkafka refused broker {broker} as the request's"
        ));
    }
    // SAFETY: live handles of this client.
    unsafe {
        rd::rd_kafka_DescribeTopics(
            rk,
            collection.ptr.as_ptr(),
            options.ptr.as_ptr(),
            queue.ptr.as_ptr(),
        )
    };
    // The request's own timeout ends it with an error event; the margin
    // (a tenth, at least a quarter of a second) is for that event to
    // arrive.
    let wait_ms = timeout_ms.saturating_add((timeout_ms / 10).max(250));
    let Some(event) = Guard::new(
        unsafe { rd::rd_kafka_queue_poll(queue.ptr.as_ptr(), wait_ms) },
        |p| unsafe { rd::rd_kafka_event_destroy(p) },
    ) else {
        return unread(&format!("DescribeTopics: no answer within {wait_ms} ms"));
    };
    let ev = event.ptr.as_ptr();
    // SAFETY: `ev` is live until `event` drops; the strings it hands out
    // are copied before then.
    unsafe {
        if rd_kafka_event_error(ev) != 0 {
            return unread(&format!(
                "DescribeTopics: {}",
                c_string(rd::rd_kafka_event_error_string(ev))
            ));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(ev);
        if result.is_null() {
            return unread("librdkafka answered with another kind of event");
        }
        let mut count = 0usize;
        let descriptions = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        let mut out = BTreeMap::new();
        for i in 0..count {
            let d = *descriptions.add(i);
            // A topic the broker's answer left out is a hole in the
            // array (librdkafka's list, set by position): said below.
            if d.is_null() {
                continue;
            }
            let name = c_string(rd::rd_kafka_TopicDescription_name(d));
            let error = rd::rd_kafka_TopicDescription_error(d);
            let described = if !error.is_null() && rd_kafka_error_code(error) != 0 {
                KafkaTopicId::Unread(c_string(rd::rd_kafka_error_string(error)))
            } else {
                // Never null (a field of the description); zero is Kafka's
                // "no id".
                let id = rd::rd_kafka_TopicDescription_topic_id(d);
                let high = rd::rd_kafka_Uuid_most_significant_bits(id) as u64;
                let low = rd::rd_kafka_Uuid_least_significant_bits(id) as u64;
                TopicId::new(u128::from(high) << 64 | u128::from(low))
                    .map_or(KafkaTopicId::NoId, KafkaTopicId::Id)
            };
            out.insert(name, described);
        }
        // A topic the answer left out is unread, not taken for unbound.
        for t in topics {
            out.entry(t.clone())
                .or_insert_with(|| KafkaTopicId::Unread("left out of Kafka's answer".into()));
        }
        out.retain(|t, _| topics.contains(t));
        out
    }
}

/// A librdkafka string, copied (empty for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for the call.
unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A librdkafka handle destroyed when dropped.
struct Guard<T> {
    ptr: NonNull<T>,
    destroy: fn(*mut T),
}

impl<T> Guard<T> {
    fn new(p: *mut T, destroy: fn(*mut T)) -> Option<Guard<T>> {
        Some(Guard {
            ptr: NonNull::new(p)?,
            destroy,
        })
    }
}

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        (self.destroy)(self.ptr.as_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;
    use rdkafka::ClientConfig;

    fn consumer_of(bootstrap: &str) -> BaseConsumer {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .unwrap()
    }

    #[test]
    fn ids_of_topics_are_read_and_an_unknown_topic_is_unread() {
        let a = MockCluster::new(1).unwrap();
        a.create_topic("orders", 2, 1).unwrap();
        a.create_topic("audit", 1, 1).unwrap();
        let b = MockCluster::new(1).unwrap();
        b.create_topic("orders", 2, 1).unwrap();
        let topics = [
            "orders".to_owned(),
            "audit".to_owned(),
            "nothere".to_owned(),
        ];
        let ca = consumer_of(&a.bootstrap_servers());
        let got = describe(ca.client(), &topics, Duration::from_secs(10));
        assert_eq!(got.len(), 3, "{got:?}");
        let (KafkaTopicId::Id(orders), KafkaTopicId::Id(audit)) = (&got["orders"], &got["audit"])
        else {
            panic!("{got:?}");
        };
        assert_ne!(orders, audit);
        assert!(
            matches!(&got["nothere"], KafkaTopicId::Unread(why) if !why.is_empty()),
            "{got:?}"
        );
        // Asked again: the same ids.
        let again = describe(ca.client(), &topics[..1], Duration::from_secs(10));
        assert_eq!(again["orders"], KafkaTopicId::Id(*orders));
        // The same name in another cluster is another topic.
        let cb = consumer_of(&b.bootstrap_servers());
        let other = describe(cb.client(), &topics[..1], Duration::from_secs(10));
        let KafkaTopicId::Id(other) = other["orders"] else {
            panic!("{other:?}");
        };
        assert_ne!(other, *orders);
        assert!(describe(ca.client(), &[], Duration::from_secs(1)).is_empty());
    }

    /// Brokers that give no topic id (Metadata below version 10, as
    /// before Kafka 2.8) leave each existing topic `NoId`, never an id.
    #[test]
    fn brokers_without_topic_ids_give_none() {
        let m = MockCluster::new(1).unwrap();
        m.create_topic("orders", 1, 1).unwrap();
        m.apiversion(rdkafka::types::RDKafkaApiKey::Metadata, Some(0), Some(9))
            .unwrap();
        let c = consumer_of(&m.bootstrap_servers());
        let got = describe(c.client(), &["orders".to_owned()], Duration::from_secs(10));
        assert_eq!(got["orders"], KafkaTopicId::NoId, "{got:?}");
    }

    /// A broker that answers the metadata request and then lets the
    /// `DescribeTopics` run past the time left: every topic unread, saying
    /// so, within the timeout and its margin, and the request's handles
    /// let go while it may still be in flight.
    #[test]
    fn a_describe_that_runs_out_of_time_leaves_every_topic_unread() {
        let m = MockCluster::new(1).unwrap();
        m.create_topic("orders", 1, 1).unwrap();
        let c = consumer_of(&m.bootstrap_servers());
        let topics = ["orders".to_owned()];
        // Connected first, so that the metadata request alone waits.
        assert!(matches!(
            describe(c.client(), &topics, Duration::from_secs(10))["orders"],
            KafkaTopicId::Id(_)
        ));
        // The metadata request's 3 s leave 2 s of the 5 for the second,
        // which takes 3: slack of 2 s for the first on a busy host.
        m.broker_round_trip_time(1, Duration::from_millis(3_000))
            .unwrap();
        let t0 = std::time::Instant::now();
        let got = describe(c.client(), &topics, Duration::from_millis(5_000));
        // The metadata request answered; the DescribeTopics did not, in
        // time (its own timeout's error, or the wait's end).
        assert!(
            matches!(&got["orders"], KafkaTopicId::Unread(why) if why.starts_with("DescribeTopics: ")),
            "{got:?}"
        );
        // Bounded by the timeout, not waited out past it (a generous
        // bound: not a measure of speed).
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    }

    #[test]
    fn a_cluster_that_does_not_answer_leaves_every_topic_unread() {
        // Nothing listens on port 1 of this host.
        let c = consumer_of("127.0.0.1:1");
        let topics = ["orders".to_owned(), "audit".to_owned()];
        let got = describe(c.client(), &topics, Duration::from_millis(300));
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got.values().all(|d| matches!(d, KafkaTopicId::Unread(_))),
            "{got:?}"
        );
    }
}

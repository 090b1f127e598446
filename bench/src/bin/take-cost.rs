//! What taking a record from librdkafka costs the consumer thread: CPU time
//! on that thread per record, for rust-rdkafka's `poll` and for
//! `cairn_connector::fetch` (the run's own queue, `rd_kafka_consume_queue`),
//! alternated in one process against one mock cluster. Thread CPU time
//! (`/proc/thread-self/schedstat`) rather than records/s: on this 2-core
//! machine the broker, the fetchers and the consumer share the cores, and
//! throughput moves with whatever else runs; the consumer thread's own
//! time per record does not.
//!
//! `cargo run --release -p cairn-bench --bin take-cost -- [RECORDS [ROUNDS]]`
//! (defaults 1,000,000 records of 100 B over 32 partitions, 3 rounds).
//! Each taker converts every record to the archive's `Record` (copying key,
//! value and headers), as the consumer thread does. The run's queue
//! destroys the messages taken on a thread of its own (`fetch.rs`'s
//! reaper): that thread's CPU time per record is printed beside, and the
//! two together are what taking costs in all (the median line compares the
//! consumer thread's alone).

use std::time::{Duration, Instant};

use cairn_connector::fetch::{Fetch, Flow, TAKE_MAX};
use cairn_engine::{Header, Record, TimestampType};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message, Timestamp};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const PARTITIONS: i32 = 32;
const TOPIC: &str = "take-cost";

fn arg(i: usize, default: u64) -> u64 {
    std::env::args()
        .nth(i)
        .map(|a| a.parse().expect("a whole number"))
        .unwrap_or(default)
}

/// CPU time this thread has run, in ns.
fn thread_cpu_ns() -> u64 {
    cpu_ns("/proc/thread-self/schedstat")
}

/// CPU time a thread (`schedstat`, its path) has run, in ns.
fn cpu_ns(schedstat: &str) -> u64 {
    std::fs::read_to_string(schedstat)
        .unwrap_or_else(|e| panic!("{schedstat}: {e}"))
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat's first field")
}

fn consumer(brokers: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // As cairn sets it: a drained queue is refilled at once.
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .expect("consumer")
}

fn all_partitions() -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(TOPIC, p, Offset::Beginning)
            .expect("partition");
    }
    tpl
}

/// A polled record as the archive stores it, as cairn's consumer thread
/// converted each record until it took them from its own queue (the same
/// copies; without its checks of header names, which these records lack).
fn to_record(m: &BorrowedMessage<'_>) -> Record {
    let (timestamp_type, timestamp_ms) = match m.timestamp() {
        Timestamp::NotAvailable => (TimestampType::NotAvailable, -1),
        Timestamp::CreateTime(t) => (TimestampType::CreateTime, t),
        Timestamp::LogAppendTime(t) => (TimestampType::LogAppendTime, t),
    };
    let headers = m.headers().map_or_else(Vec::new, |hs| {
        hs.iter()
            .map(|h| Header {
                name: h.key.to_owned(),
                value: h.value.map(<[u8]>::to_vec),
            })
            .collect()
    });
    Record {
        offset: m.offset(),
        timestamp_type,
        timestamp_ms,
        key: m.key().map(<[u8]>::to_vec),
        value: m.payload().map(<[u8]>::to_vec),
        headers,
    }
}

/// (CPU ns on this thread, wall time) from the first record to the last,
/// and the CPU ns of the thread that destroys the messages taken, where that
/// is another (`fetch.rs`'s reaper).
struct Cost {
    cpu_ns: u64,
    wall: Duration,
    /// `None` where the reaper's thread could not be found.
    reaper_ns: Option<u64>,
}

fn by_poll(brokers: &str, group: &str, records: u64) -> Cost {
    let c = consumer(brokers, group);
    c.assign(&all_partitions()).expect("assign");
    let mut n = 0;
    let mut start = None;
    while n < records {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                start.get_or_insert_with(|| (thread_cpu_ns(), Instant::now()));
                let r = to_record(&m);
                std::hint::black_box(r);
                n += 1;
            }
            Some(Err(e)) => panic!("poll: {e}"),
            None => {}
        }
    }
    let (cpu, wall) = start.expect("records");
    Cost {
        cpu_ns: thread_cpu_ns() - cpu,
        wall: wall.elapsed(),
        reaper_ns: Some(0),
    }
}

fn by_take(brokers: &str, group: &str, records: u64) -> Cost {
    take_with(brokers, group, records, true)
}

/// Taking alone: what converting to the archive's `Record` adds is the
/// difference from `by_take`.
fn by_take_unconverted(brokers: &str, group: &str, records: u64) -> Cost {
    take_with(brokers, group, records, false)
}

fn take_with(brokers: &str, group: &str, records: u64, convert: bool) -> Cost {
    let c = consumer(brokers, group);
    // SAFETY: declared after `c`, so dropped before it.
    #[allow(unsafe_code)]
    let fetch = unsafe { Fetch::new(&c) }.expect("fetch");
    fetch.assign(&c, &all_partitions()).expect("assign");
    let mut n = 0;
    let mut start = None;
    let reaper = || {
        fetch
            .reaper_tid()
            .map(|t| cpu_ns(&format!("/proc/self/task/{t}/schedstat")))
    };
    let mut reaper_start = None;
    while n < records {
        fetch.take(Duration::from_millis(100), TAKE_MAX, |m| {
            start.get_or_insert_with(|| {
                reaper_start = reaper();
                (thread_cpu_ns(), Instant::now())
            });
            assert!(m.error().is_none(), "{:?}", m.error());
            if convert {
                std::hint::black_box(m.to_record().expect("record"));
            } else {
                std::hint::black_box(m.payload());
            }
            n += 1;
            Flow::Go
        });
    }
    let (cpu, wall) = start.expect("records");
    Cost {
        cpu_ns: thread_cpu_ns() - cpu,
        wall: wall.elapsed(),
        // The last takes' messages may still be on their way: three
        // thousand of the run's, at most.
        reaper_ns: reaper().zip(reaper_start).map(|(end, start)| end - start),
    }
}

fn main() {
    let records = arg(1, 1_000_000);
    let rounds = arg(2, 3);
    let mock: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    mock.create_topic(TOPIC, PARTITIONS, 1).expect("topic");
    let brokers = mock.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let value = [b'v'; 100];
    for i in 0..records {
        let key = i.to_string();
        let p = (i % PARTITIONS as u64) as i32;
        let mut rec = BaseRecord::to(TOPIC)
            .partition(p)
            .key(&key)
            .payload(&value[..]);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    producer.poll(Duration::from_millis(10));
                    rec = back;
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("flush");
    println!(
        "{records} records of 100 B over {PARTITIONS} partitions; consumer thread CPU per record"
    );
    let (mut polls, mut takes, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    // Consumer and reaper together: `take` moves the messages' destruction
    // to the reaper, so its consumer-thread figure alone flatters it.
    let (mut polls_all, mut takes_all) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (name, costs, f) in [
            ("poll", &mut polls, by_poll as fn(&str, &str, u64) -> Cost),
            ("take", &mut takes, by_take),
            ("take, not converted", &mut bare, by_take_unconverted),
        ] {
            let c = f(
                &brokers,
                &format!("{}-{round}", name.replace(", ", "-")),
                records,
            );
            let ns = c.cpu_ns as f64 / records as f64;
            let reaper = c.reaper_ns.map_or("n/a".to_owned(), |r| {
                format!("{:.0}", r as f64 / records as f64)
            });
            println!(
                "round {round} {name}: {ns:.0} ns/record on the consumer thread (+ {reaper} destroying them on the reaper), {:.0} records/s",
                records as f64 / c.wall.as_secs_f64()
            );
            costs.push(ns);
            // A round whose reaper could not be read adds nothing here.
            if let Some(r) = c.reaper_ns {
                let all = ns + r as f64 / records as f64;
                match name {
                    "poll" => polls_all.push(all),
                    "take" => takes_all.push(all),
                    _ => {}
                }
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        // The mean of the middle two of an even count.
        if v.len().is_multiple_of(2) && mid > 0 {
            (v[mid - 1] + v[mid]) / 2.0
        } else {
            v[mid]
        }
    };
    let (p, t, b) = (median(&mut polls), median(&mut takes), median(&mut bare));
    println!(
        "median: poll {p:.0} ns/record, take {t:.0} ns/record ({:.2}x poll) on the consumer thread, of which converting {:.0} ns",
        t / p,
        t - b
    );
    if polls_all.is_empty() || takes_all.is_empty() {
        println!("median with the reaper's share: n/a (the reaper's CPU could not be read)");
    } else {
        let (pa, ta) = (median(&mut polls_all), median(&mut takes_all));
        println!(
            "median with the reaper's share: poll {pa:.0}, take {ta:.0} ns/record ({:.2}x poll)",
            ta / pa
        );
    }
}

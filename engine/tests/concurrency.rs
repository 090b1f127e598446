//! Group commit: concurrent appenders share fsyncs, and every append is durable.

mod common;

use std::sync::{Arc, Barrier};

use cairn_engine::{Engine, EngineConfig, TopicPartition};

#[test]
fn eight_threads_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let threads = 8;
    let appends_per_thread = 50;
    {
        let e = Arc::new(Engine::open(EngineConfig::new(dir.path())).unwrap());
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let e = e.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let tp = TopicPartition::new("conc", t as i32);
                    barrier.wait();
                    for i in 0..appends_per_thread {
                        let d = e.append(&[common::batch(&tp, [i as i64], 100)]).unwrap();
                        // Returned offsets are durable and cover this append.
                        assert!(d.get(&tp).unwrap() > i as i64);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let s = e.stats();
        let appends = (threads * appends_per_thread) as u64;
        assert_eq!(s.appends, appends);
        eprintln!("appends {} fsyncs {}", s.appends, s.fsyncs);
        assert!(
            s.fsyncs < appends,
            "no fsync was shared: {} fsyncs for {appends} appends",
            s.fsyncs
        );
        // Reopen after a crash-like drop: everything acknowledged is there.
    }
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for t in 0..threads {
        let tp = TopicPartition::new("conc", t as i32);
        assert_eq!(e.durable_offset(&tp), Some(appends_per_thread as i64));
        assert_eq!(common::read_all(&e, &tp).len(), appends_per_thread);
    }
    assert!(e.verify().unwrap().is_clean());
}

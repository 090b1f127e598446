//! A sync tops the reserved slots up from a thread of its own while it waits
//! on the disk (engine/src/slots.rs, `to_top_up`). A failed insert there
//! poisons the engine like a failed write: the sync that started it reports
//! `Poisoned`, nothing more is written, and a reopen finds every record
//! synced, the run of slots cut wherever it stopped, and a clean store. Uses
//! the `wal::sync::top_up` failpoint; one test per binary (failpoints are
//! process-global).

mod common;

use cairn_engine::{Engine, EngineConfig, Error, FAILPOINT_TOP_UP};
use common::{batch, put_over, read_all, thirty_two, wal_layout};

#[test]
fn a_failed_top_up_poisons_and_the_store_reopens_clean() {
    let scenario = fail::FailScenario::setup();
    let tps = thirty_two();
    let put = |i: i64| put_over(&tps, i);
    // Cut before the first slot of a run, inside it, and before its last.
    for after in [0, 7, 31] {
        let dir = tempfile::tempdir().unwrap();
        let puts_synced = {
            let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
            e.append(&put(0)).unwrap();
            fail::cfg(FAILPOINT_TOP_UP, &format!("{after}*off->return(crash)")).unwrap();
            let mut i = 1;
            let err = loop {
                match e.append(&put(i)) {
                    Ok(_) => i += 1,
                    Err(err) => break err,
                }
                assert!(i < 50, "the top-up never ran");
            };
            fail::remove(FAILPOINT_TOP_UP);
            assert!(
                matches!(
                    err,
                    Error::Poisoned {
                        op: "reserve slots",
                        ..
                    }
                ),
                "{err}"
            );
            // Poisoned: nothing more is written or synced.
            let more = e.append(&put(i + 1)).unwrap_err();
            assert!(matches!(more, Error::Poisoned { .. }), "{more}");
            assert!(matches!(e.sync().unwrap_err(), Error::Poisoned { .. }));
            // The append that met the failure was synced before its sync
            // reported the poison (the top-up runs beside the flush).
            for tp in &tps {
                assert_eq!(
                    e.durable_offset(tp),
                    Some((i + 1) * 5),
                    "cut after {after}: {tp}"
                );
            }
            i + 1
        }; // dropped without close: sled's log ends where the run was cut
           // The run was cut where the failpoint stopped it: the slots still
           // run, contiguous, from right above the last frame.
        let (frames, reserved) = wal_layout(dir.path());
        let last = (puts_synced * 32) as u64;
        assert_eq!(frames, (1..=last).collect::<Vec<_>>());
        assert_eq!(
            reserved,
            (last + 1..last + 1 + reserved.len() as u64).collect::<Vec<_>>(),
            "cut after {after} slots"
        );
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let v = e.verify().unwrap();
        assert!(v.is_clean(), "cut after {after} slots: {:?}", v.problems);
        for tp in &tps {
            let got = read_all(&e, tp);
            assert_eq!(
                got,
                batch(tp, 0..puts_synced * 5, 20).records,
                "cut after {after} slots: {tp}"
            );
        }
        // Writing goes on into the cut run and beyond it.
        for i in puts_synced..puts_synced + 20 {
            e.append(&put(i)).unwrap();
        }
        for tp in &tps {
            assert_eq!(read_all(&e, tp).len() as i64, (puts_synced + 20) * 5);
        }
        assert!(e.verify().unwrap().is_clean());
    }
    scenario.teardown();
}

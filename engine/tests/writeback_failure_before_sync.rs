//! A writeback (writeback.rs) that fails after a sync's own check of the
//! engine and before its leader flushes: the leader neither flushes nor
//! fdatasyncs (sled's flush would write the failed writeback's buffers
//! again, a retry that no failed write gets), and the sync fails as the
//! writeback did. Uses the `wal::sync::lead` failpoint as a hook where the
//! leader begins, `wal::flush::err` to count the leader's flushes, and
//! `wal::writeback::err` to fail the writeback; one test per binary
//! (failpoints are process-global).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_engine::{Error, FAILPOINT_FLUSH_ERR, FAILPOINT_SYNC_LEAD, FAILPOINT_WRITEBACK_ERR};

#[test]
fn a_sync_led_after_a_failed_writeback_flushes_nothing() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let (e, tp) = common::hundred_synced_ten_not(dir.path());
    let fsyncs_before = e.stats().fsyncs;
    // Every flush a sync leader begins passes here (it returns nothing).
    let flushes = Arc::new(AtomicU64::new(0));
    {
        let flushes = flushes.clone();
        fail::cfg_callback(FAILPOINT_FLUSH_ERR, move || {
            flushes.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    // As the leader begins (past `sync`'s own check): the writeback fails.
    let hooked = common::writeback_at(FAILPOINT_SYNC_LEAD, &e, &tp);
    let err = e.sync().unwrap_err();
    assert!(hooked.load(Ordering::SeqCst), "the hook never ran");
    fail::remove(FAILPOINT_SYNC_LEAD);
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    assert!(err.to_string().contains("injected"), "{err}");
    assert_eq!(
        flushes.load(Ordering::SeqCst),
        0,
        "the sync flushed after the writeback had failed"
    );
    assert_eq!(e.stats().fsyncs, fsyncs_before, "no fsync after it");
    // Nor does a sync asked for now flush: the engine is poisoned.
    assert!(matches!(e.sync(), Err(Error::Poisoned { .. })));
    assert_eq!(flushes.load(Ordering::SeqCst), 0);
    fail::remove(FAILPOINT_FLUSH_ERR);
    let e = common::failed_as_writeback(err, e, &tp);
    let got = common::read_all(&e, &tp);
    assert!(got.len() >= 100, "acknowledged records lost");
    let want: Vec<_> = (0..got.len() as i64)
        .map(|o| common::record(&tp, o, if o < 110 { 100 } else { 1024 }))
        .collect();
    assert_eq!(got, want, "not a prefix of what was written");
    drop(e);
    scenario.teardown();
}

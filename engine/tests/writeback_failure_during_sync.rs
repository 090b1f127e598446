//! A writeback (writeback.rs) that fails while a sync is under way, after
//! the sync's own check of the engine: the sync leader finds it after its
//! fdatasync and publishes nothing. Uses the `wal::flush::err` failpoint as
//! a hook inside the leader's sync and `wal::writeback::err` to fail the
//! writeback; one test per binary (failpoints are process-global).

mod common;

use std::sync::atomic::Ordering;

use cairn_engine::{FAILPOINT_FLUSH_ERR, FAILPOINT_WRITEBACK_ERR};

#[test]
fn a_writeback_failing_during_a_sync_fails_the_sync() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let (e, tp) = common::hundred_synced_ten_not(dir.path());
    fail::cfg(FAILPOINT_WRITEBACK_ERR, "return").unwrap();
    // Inside the leader's sync (past `sync`'s own check): the writeback
    // fails before the leader flushes and fdatasyncs.
    let hooked = common::writeback_at(FAILPOINT_FLUSH_ERR, &e, &tp);
    let err = e.sync().unwrap_err();
    assert!(hooked.load(Ordering::SeqCst), "the hook never ran");
    fail::remove(FAILPOINT_FLUSH_ERR);
    fail::remove(FAILPOINT_WRITEBACK_ERR);
    let e = common::failed_as_writeback(err, e, &tp);
    drop(e);
    scenario.teardown();
}

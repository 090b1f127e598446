//! The store's identity (`Mstore`, format 3): chosen when a store is
//! created, kept across opens, given to a format-2 store by the open that
//! upgrades it, copied by a backup, and its loss or damage reported.

mod common;

use std::sync::atomic::AtomicBool;

use cairn_engine::keys::{META_FORMAT, META_STORE};
use cairn_engine::meta::{decode_format, encode_format, FORMAT_VERSION};
use cairn_engine::{
    CorruptionKind, Engine, EngineConfig, Error, Location, Record, RecordBatch, StoreId,
    TopicPartition,
};
use common::with_raw_tree;

fn store_with_records(dir: &std::path::Path) -> StoreId {
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    let records = (0..10)
        .map(|o| Record::with_value(o, vec![b'v'; 8]))
        .collect();
    e.append(&[RecordBatch {
        tp: TopicPartition::new("s", 0),
        records,
    }])
    .unwrap();
    let id = e.store_id();
    e.close().unwrap();
    id
}

fn stored_format(dir: &std::path::Path) -> u32 {
    with_raw_tree(dir, |t| {
        decode_format(&t.get(META_FORMAT).unwrap().unwrap()).unwrap()
    })
}

#[test]
fn a_store_keeps_its_identity_and_another_store_has_another() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let id = store_with_records(a.path());
    assert_eq!(stored_format(a.path()), FORMAT_VERSION);
    let again = Engine::open(EngineConfig::new(a.path())).unwrap();
    assert_eq!(again.store_id(), id, "the same store after a reopen");
    assert!(!again.recovery_report().created);
    drop(again); // without close: a crash keeps it too
    assert_eq!(
        Engine::open(EngineConfig::new(a.path()))
            .unwrap()
            .store_id(),
        id
    );
    assert_ne!(store_with_records(b.path()), id);
    // Its text form round-trips, and nothing else parses as one.
    assert_eq!(id.to_string().len(), 32);
    assert_eq!(id.to_string().parse::<StoreId>().unwrap(), id);
    for bad in ["", "xyz", &"0".repeat(31), &"g".repeat(32), &"0".repeat(33)] {
        assert!(bad.parse::<StoreId>().is_err(), "{bad:?}");
    }
}

#[test]
fn a_format_2_store_gets_an_identity_from_the_open_that_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path());
    with_raw_tree(dir.path(), |t| {
        t.remove(META_STORE).unwrap();
        t.insert(META_FORMAT, encode_format(2)).unwrap();
    });
    let cfg = EngineConfig::new(dir.path());
    // A format-2 store without one is whole.
    let v = cairn_engine::verify_store(&cfg).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    let e = Engine::open(cfg.clone()).unwrap();
    let id = e.store_id();
    drop(e);
    assert_eq!(stored_format(dir.path()), FORMAT_VERSION);
    assert_eq!(Engine::open(cfg.clone()).unwrap().store_id(), id);
    let v = cairn_engine::verify_store(&cfg).unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}

/// A format-2 store (it never had an identity) whose format key is
/// damaged: that one problem, not also its identity reported missing.
#[test]
fn a_damaged_format_of_a_store_without_an_identity_is_one_problem() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path());
    let mut format_2 = encode_format(2);
    format_2[5] ^= 0x01;
    with_raw_tree(dir.path(), |t| {
        t.remove(META_STORE).unwrap();
        t.insert(META_FORMAT, format_2).unwrap();
    });
    let v = cairn_engine::verify_store(&EngineConfig::new(dir.path())).unwrap();
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert!(
        matches!(v.problems[0].location, Location::Meta { key: "format" }),
        "{:?}",
        v.problems
    );
}

#[test]
fn a_missing_or_damaged_identity_is_reported_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path());
    let cfg = EngineConfig::new(dir.path());
    let stored = with_raw_tree(dir.path(), |t| t.get(META_STORE).unwrap().unwrap());

    // A flipped bit: the value's CRC fails.
    let mut flipped = stored.to_vec();
    flipped[3] ^= 0x10;
    with_raw_tree(dir.path(), |t| t.insert(META_STORE, flipped).unwrap());
    let kind = refused_and_reported(&cfg);
    assert!(matches!(kind, CorruptionKind::Checksum { .. }), "{kind}");

    // Gone from a format-3 store: refused, not given a new identity (the
    // store would then take offsets it committed for another store's).
    with_raw_tree(dir.path(), |t| t.remove(META_STORE).unwrap());
    let kind = refused_and_reported(&cfg);
    assert!(matches!(kind, CorruptionKind::BadMeta { .. }), "{kind}");
    with_raw_tree(dir.path(), |t| t.insert(META_STORE, stored).unwrap());
    Engine::open(cfg).unwrap();
}

/// An open refuses the store at its identity, and verify reports it there.
fn refused_and_reported(cfg: &EngineConfig) -> CorruptionKind {
    let kind = match Engine::open(cfg.clone()) {
        Err(Error::Corruption {
            location: Location::Meta { key: "store" },
            kind,
        }) => kind,
        other => panic!("expected the store id refused, got {:?}", other.map(|_| ())),
    };
    let v = cairn_engine::verify_store(cfg).unwrap();
    assert!(
        v.problems
            .iter()
            .any(|p| p.location == Location::Meta { key: "store" }),
        "{:?}",
        v.problems
    );
    kind
}

#[test]
fn a_backup_is_the_same_store() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    store_with_records(src.path());
    let e = Engine::open(EngineConfig::new(src.path())).unwrap();
    let copy = dst.path().join("copy");
    e.backup_to(&copy, &AtomicBool::new(false)).unwrap();
    let c = Engine::open(EngineConfig::new(&copy)).unwrap();
    assert_eq!(c.store_id(), e.store_id());
    assert!(c.verify().unwrap().is_clean());
}

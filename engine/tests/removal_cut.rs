//! Removing an empty store stopped after every file of sled's folder but
//! `db` is gone (the failpoint `removal::before_db`, where a crash would
//! stop it): what is left still reads as a store, opens, and is removed by
//! the next try. A removal in listing order (until the night of
//! 2026-12-04) could stop with `db` gone and a snapshot left, which no
//! longer opened nor was removed; this test fails if `db` is not last. A
//! directory that cannot be removed once the store is gone (the failpoint
//! `removal::dir`) is reported as that, not as a store kept. One test per
//! binary (failpoints are process-global).

use cairn_engine::{
    remove_if_empty, EmptyStoreRemoval, Engine, EngineConfig, FAILPOINT_REMOVAL_BEFORE_DB,
    FAILPOINT_REMOVAL_DIR,
};

#[test]
fn a_removal_stopped_before_db_leaves_a_store_that_opens_and_goes() {
    let scenario = fail::FailScenario::setup();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    // Opened twice, so that sled's folder holds a snapshot beside `db`.
    for _ in 0..2 {
        Engine::open(EngineConfig::new(&store))
            .unwrap()
            .close()
            .unwrap();
    }
    let sled = EngineConfig::new(&store).sled_path();
    let names = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert!(
        names(&sled).len() > 1,
        "a snapshot beside db: {:?}",
        names(&sled)
    );

    fail::cfg(FAILPOINT_REMOVAL_BEFORE_DB, "return").unwrap();
    let stopped = remove_if_empty(&store);
    fail::remove(FAILPOINT_REMOVAL_BEFORE_DB);
    let err = stopped.expect_err("the failpoint stops the removal");
    assert!(err.to_string().contains("removal::before_db"), "{err}");
    assert_eq!(names(&sled), ["db"], "every file but db went first");
    assert!(EngineConfig::new(&store).store_exists().unwrap());

    // It opens (sled rebuilds from its log what the snapshot held) and the
    // next try removes it, directory and all.
    Engine::open(EngineConfig::new(&store))
        .unwrap()
        .close()
        .unwrap();
    assert_eq!(remove_if_empty(&store).unwrap(), EmptyStoreRemoval::Removed);
    assert!(!store.exists());

    // The directory itself cannot be removed (a mount on it, a failing
    // disk) once the store's files are gone: the store is reported gone,
    // with the error, not kept (until 2026-12-05 an `Err`, which `cairn run`
    // logged as "the archive this run made stays").
    Engine::open(EngineConfig::new(&store))
        .unwrap()
        .close()
        .unwrap();
    fail::cfg(FAILPOINT_REMOVAL_DIR, "return").unwrap();
    let removal = remove_if_empty(&store);
    fail::remove(FAILPOINT_REMOVAL_DIR);
    match removal {
        Ok(EmptyStoreRemoval::DirectoryNotRemoved(e)) => {
            assert!(e.contains("removal::dir"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(!EngineConfig::new(&store).store_exists().unwrap());
    assert_eq!(
        names(&store),
        Vec::<String>::new(),
        "the store's files went"
    );
    scenario.teardown();
}

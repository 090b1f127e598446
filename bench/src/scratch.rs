//! The benches' scratch folders, shared by the bench binaries and the
//! criterion benches (each includes this file with `#[path]`: the crate
//! has no library target).

/// A scratch folder under the workspace's `target/bench`, on the disk
/// under test: `$TMPDIR` may be a tmpfs, where every fdatasync is free.
pub fn scratch() -> tempfile::TempDir {
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&base).expect("bench dir");
    tempfile::tempdir_in(base).expect("scratch dir")
}

//! Allocator settings for the binaries (`cairn`, `cairn-bench`).
//!
//! glibc's malloc gives memory back to the OS as soon as 128 KiB are free at
//! the top of the heap (`M_TRIM_THRESHOLD`, adjusted upwards only by the
//! dynamic mmap threshold) and serves larger blocks from fresh `mmap`s. The
//! archive allocates and frees a batch's worth of records, frames and sled
//! pages on every put, so with the defaults every put page-faults its way
//! through freshly zeroed pages: `perf` showed `clear_page_erms` and
//! `exc_page_fault` at about a third of the task thread's CPU. Keeping freed
//! memory (up to `TRIM_THRESHOLD_BYTES` at the top of the heap) and serving
//! blocks under `MMAP_THRESHOLD_BYTES` from the heap removes that. Measured
//! with `cairn-bench put-to-commit --record-bytes 100 --no-peers`
//! (docs/BENCHMARKS.md, interleaved runs): page faults of a run 316k → 178k,
//! every-put 553k–611k → 663k–767k records/s with p50 1.97–2.13 → 1.36–1.62
//! ms, interval:100 520k–578k → 753k–760k records/s.
//!
//! The cost is memory the process keeps instead of returning: at most the
//! trim threshold above its live peak. Embedders choose their own allocator;
//! this is only called from the binaries' `main`.

/// Free memory kept at the top of the heap before it is returned to the OS.
pub const TRIM_THRESHOLD_BYTES: i32 = 128 << 20;
/// Blocks at least this large get their own mapping.
pub const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;

/// `MMAP_THRESHOLD_BYTES` under `interval:MS`: see [`tune_for`].
pub const MMAP_THRESHOLD_INTERVAL_BYTES: i32 = 4 << 20;

/// Apply the settings above (glibc only; a no-op elsewhere).
#[allow(unsafe_code)]
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's tuning parameters, under
    // malloc's own lock (see `tune_for`). The binaries call it before they
    // start any other thread; the bench harness again between runs.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
    }
}

/// Adjust the settings to the commit policy, once it is known.
///
/// Under `interval:MS` puts are written without an fsync, and sled writes
/// its 8 MiB log buffers from its own I/O threads, several at a time.
/// Served from the heap they leave 8 MiB holes behind: heaptrack showed the
/// same peak heap (198 vs 193 MiB, 1M records of 100 B) with and without the
/// deferred fsync, but a peak RSS of 374 vs 215 MiB. Giving blocks of 4 MiB
/// and more their own mappings returns them when freed: peak RSS 209–237
/// MiB instead of 263–361 over six interleaved runs, at the same throughput.
/// Under `every-put` each put's flush seals a buffer and sled allocates the
/// next, so mappings would page-fault through a fresh one on every put (the
/// same runs: 22 % fewer records/s); the heap keeps them there.
#[allow(unsafe_code)]
pub fn tune_for(policy: crate::config::CommitPolicy) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if let crate::config::CommitPolicy::Interval(_) = policy {
        // SAFETY: mallopt only changes malloc's tuning parameters. glibc
        // marks it MT-Unsafe: it takes the main arena's lock alone, and
        // threads allocating from other arenas read the threshold (one
        // aligned word) without it, so they see the old value or the new,
        // both valid. It runs once a run knows its policy, with the tokio
        // threads up.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_INTERVAL_BYTES);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = policy;
}

//! Helpers shared by the engine's integration tests.
#![allow(dead_code, unused_imports)]

use cairn_engine::{Record, TopicPartition};

// One implementation for the tests, the fuzz targets and the benches.
pub use cairn_engine::fuzzing::{batch, record, seed, skip, with_raw_tree};

/// (frame LSNs, reserved slot LSNs) as stored, read through sled directly.
/// The engine must be closed or dropped first.
pub fn wal_layout(dir: &std::path::Path) -> (Vec<u64>, Vec<u64>) {
    with_raw_tree(dir, |t| {
        let (mut frames, mut reserved) = (Vec::new(), Vec::new());
        for item in t.scan_prefix([cairn_engine::keys::PREFIX_WAL]) {
            let (k, v) = item.unwrap();
            let lsn = cairn_engine::keys::parse_wal_key(&k).unwrap();
            if cairn_engine::slots::is_slot(&v) {
                reserved.push(lsn);
            } else {
                frames.push(lsn);
            }
        }
        (frames, reserved)
    })
}

pub fn wal_key(lsn: u64) -> [u8; 9] {
    cairn_engine::keys::wal_key(lsn)
}

pub fn read_all(engine: &cairn_engine::Engine, tp: &TopicPartition) -> Vec<Record> {
    engine.read(tp, 0).unwrap().map(|r| r.unwrap()).collect()
}

/// Partitions 0..32 of topic `t`: a put over all of them is 32 frames, so a
/// few puts use up the slots a sync tops up.
pub fn thirty_two() -> Vec<TopicPartition> {
    (0..32).map(|p| TopicPartition::new("t", p)).collect()
}

/// Put `i` of a run over `tps`: records `i*5..i*5+5` of each, 20 B values.
pub fn put_over(tps: &[TopicPartition], i: i64) -> Vec<cairn_engine::RecordBatch> {
    tps.iter()
        .map(|tp| batch(tp, i * 5..i * 5 + 5, 20))
        .collect()
}

/// The corruption an open of `cfg`'s store is refused with (its location
/// and kind); `what` names the case when it opens or fails otherwise.
pub fn open_refused(
    cfg: cairn_engine::EngineConfig,
    what: &str,
) -> (cairn_engine::Location, cairn_engine::CorruptionKind) {
    match cairn_engine::Engine::open(cfg) {
        Err(cairn_engine::Error::Corruption { location, kind }) => (location, kind),
        Err(other) => panic!("{what}: expected corruption, got {other}"),
        Ok(_) => panic!("{what}: expected corruption, got an engine"),
    }
}

/// Waits, without sleeping, until `cond` holds; a minute without it is a
/// failure rather than a hang.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting for {what}"
        );
        std::thread::yield_now();
    }
}

/// The stored log is frames `1..=frames` and right above them a contiguous
/// reserve of slots, at least `SLOTS_AHEAD_MIN` and at most a full run.
pub fn assert_frames_then_reserve(dir: &std::path::Path, frames: u64) {
    use cairn_engine::slots;
    let (stored, reserved) = wal_layout(dir);
    assert_eq!(stored, (1..=frames).collect::<Vec<_>>());
    let ahead = reserved.len() as u64;
    assert!(
        (slots::SLOTS_AHEAD_MIN..=slots::SLOTS_AHEAD_MIN + slots::SLOTS_RESERVED_CHUNK)
            .contains(&ahead),
        "{ahead} slots ahead"
    );
    assert_eq!(
        reserved,
        (frames + 1..frames + 1 + ahead).collect::<Vec<_>>()
    );
}

/// At failpoint `at`, the first time it is reached: another thread's write
/// of 1,400 records of 1 KiB from offset 110 takes the unflushed bytes past
/// a MiB, and the writeback it asks for has run (failed, with
/// `wal::writeback::err` armed) before the failpoint returns. Whether the
/// hook has run.
pub fn writeback_at(
    at: &str,
    e: &std::sync::Arc<cairn_engine::Engine>,
    tp: &TopicPartition,
) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let hooked = std::sync::Arc::new(AtomicBool::new(false));
    let (e, tp, hooked_) = (e.clone(), tp.clone(), hooked.clone());
    fail::cfg_callback(at, move || {
        if hooked_.swap(true, Ordering::SeqCst) {
            return;
        }
        let (e, tp) = (e.clone(), tp.clone());
        std::thread::spawn(move || {
            e.write(&[batch(&tp, 110..1510, 1024)]).unwrap();
            assert!(e.wait_writebacks(1), "the writeback never ran");
        })
        .join()
        .unwrap();
    })
    .unwrap();
    hooked
}

/// What a sync that a failed writeback failed must show: poisoned as the
/// writeback (`err`), nothing published past the 100 records appended
/// before; then, the engine dropped (the last handle: the hook's is gone),
/// a reopen that names the writeback as the poison and verifies clean.
/// Returns the reopened engine.
pub fn failed_as_writeback(
    err: cairn_engine::Error,
    e: std::sync::Arc<cairn_engine::Engine>,
    tp: &TopicPartition,
) -> cairn_engine::Engine {
    assert!(
        matches!(err, cairn_engine::Error::Poisoned { op, .. } if op == cairn_engine::WRITEBACK_OP),
        "{err}"
    );
    assert_eq!(
        e.durable_offset(tp),
        Some(100),
        "nothing published after the failure"
    );
    assert!(e.is_poisoned());
    let dir = e.config().path.clone();
    let e = std::sync::Arc::into_inner(e).expect("the hook's clone is gone");
    drop(e);
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(&dir)).unwrap();
    let before = e.recovery_report().poisoned_before.clone().unwrap();
    assert!(before.reason.starts_with("writeback: "), "{before:?}");
    assert!(e.verify().unwrap().is_clean());
    e
}

/// An engine over `dir` whose partition `t-0` holds 100 records of 100 B
/// appended (synced) and 10 more written, not synced: where the writeback
/// failure tests begin ([`writeback_at`], [`failed_as_writeback`]).
pub fn hundred_synced_ten_not(
    dir: &std::path::Path,
) -> (std::sync::Arc<cairn_engine::Engine>, TopicPartition) {
    let tp = TopicPartition::new("t", 0);
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(dir)).unwrap();
    e.append(&[batch(&tp, 0..100, 100)]).unwrap();
    e.write(&[batch(&tp, 100..110, 100)]).unwrap();
    (std::sync::Arc::new(e), tp)
}

/// A child process of this test binary running its ignored test `test`,
/// with `env` set to the store's folder, to be SIGKILLed: the crash tests'
/// way to cut a store where the kill falls (writeback_kill9.rs,
/// truncation_kill9.rs). The child prints a line per step to stdout,
/// each begun with `@ `; the
/// pipe stays open until it is dead, for a child whose next line met a
/// closed pipe would panic, and its engine's drop would sync. Its stdin is
/// a pipe never written: a child with nothing left to do waits there.
pub struct Kill9Child {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Kill9Child {
    pub fn spawn(test: &str, env: &str, dir: &std::path::Path) -> Kill9Child {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                test,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(env, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        Kill9Child { child, lines }
    }

    /// The child's next line of its own, which it begins with `@ `, from
    /// there on (the test harness's lines are passed over, and what it
    /// wrote before a line of the child's on the same line: libtest's
    /// `test NAME ... ` now and then); or `None` once its stdout has
    /// closed.
    pub fn next_line(&mut self) -> Option<String> {
        self.lines
            .by_ref()
            .map(|l| l.unwrap())
            .find_map(|l| l.find("@ ").map(|at| l[at + 2..].to_owned()))
    }

    /// SIGKILL, `into` after now (a position in the child's next step, not
    /// a wait for anything), and wait for it to be gone.
    pub fn kill_after(mut self, into: std::time::Duration) {
        std::thread::sleep(into);
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        assert!(!status.success(), "{status:?}");
    }
}

/// In a [`Kill9Child`]: the store `env` names, opened, and the durable
/// next offset of each of `tps` (where the child resumes); `None` when
/// this test was not started as a child (`--ignored`, by hand).
pub fn child_store(env: &str, tps: &[TopicPartition]) -> Option<(cairn_engine::Engine, Vec<i64>)> {
    let dir = std::env::var_os(env)?;
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(&dir)).unwrap();
    let next = tps
        .iter()
        .map(|tp| e.durable_offset(tp).unwrap_or(0))
        .collect();
    Some((e, next))
}

/// In a [`Kill9Child`] with nothing left to do: say so (`@ done 0`) and
/// wait for the SIGKILL on stdin, which the parent never writes.
pub fn child_done(out: &mut impl std::io::Write) {
    use std::io::Read;
    writeln!(out, "@ done 0").unwrap();
    out.flush().unwrap();
    let _ = std::io::stdin().read(&mut [0u8]);
}

/// `CAIRN_CRASH_ROUNDS`, or `default`.
pub fn crash_rounds(default: u32) -> u32 {
    std::env::var("CAIRN_CRASH_ROUNDS")
        .ok()
        .map(|s| {
            s.parse()
                .expect("CAIRN_CRASH_ROUNDS must be a whole number")
        })
        .unwrap_or(default)
}

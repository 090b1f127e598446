//! kill -9 among deferred writes that the writeback is writing behind
//! (writeback.rs): a child process writes MiBs of records with a sync now
//! and then, and is SIGKILLed at a seeded moment. A SIGKILL keeps what sled
//! handed the kernel (its writebacks' writes among it) and loses what sat
//! in its buffers, so the store reopens with a log cut wherever the kill
//! fell: inside a write, a writeback or a sync. The other crash tests
//! (`torn_append.rs`, the `wal_crash` fuzz target) end their engine with
//! a drop, at which sled writes out what it buffered; only a real kill
//! leaves the cut where sled's own writes, and the writeback's, stopped.
//!
//! After each kill the store must open and verify clean; each partition
//! must hold a prefix of what was written, at least everything a sync
//! reported before the kill; and the next child, resuming at the store's
//! durable offsets, continues the sequence with nothing duplicated.
//!
//! Seeded: the seed is printed; `CAIRN_SEED=<n>` replays the kill points.
//! `CAIRN_CRASH_ROUNDS` sets the rounds (default 4).

mod common;

use std::io::Write;

use cairn_engine::{Engine, EngineConfig, TopicPartition};
use rand::{Rng, SeedableRng};

/// Set for the child: the store's directory.
const CHILD_ENV: &str = "CAIRN_WRITEBACK_KILL9_CHILD";
/// Records of a write, each of `RECORD_BYTES`: about 0.9 MiB of frames a
/// write (a seventh of the records carry no value).
const RECORDS: i64 = 1_000;
const RECORD_BYTES: usize = 1024;
/// A sync after every fifth write: about 4.5 MiB deferred between syncs,
/// four writebacks' worth.
const SYNC_EVERY: usize = 5;
/// Writes a child makes before it waits to be killed.
const WRITES_MAX: usize = 30;

fn parts() -> Vec<TopicPartition> {
    (0..3).map(|p| TopicPartition::new("wb", p)).collect()
}

/// The child: resumes each partition at the store's durable offset and
/// writes, one partition a write, syncing every `SYNC_EVERY` writes. Each
/// write prints `@ wrote <i> <its µs>`, each sync `@ synced <next
/// offsets> <writebacks> <the write's µs>` once it has returned. Then it waits on its stdin, which the parent
/// never writes, for the SIGKILL.
#[test]
#[ignore = "the child of sigkill_among_written_behind_writes_keeps_a_prefix (run by it)"]
fn kill9_child() {
    let tps = parts();
    let Some((e, mut next)) = common::child_store(CHILD_ENV, &tps) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    for i in 0..WRITES_MAX {
        let p = i % tps.len();
        let t0 = std::time::Instant::now();
        e.write(&[common::batch(
            &tps[p],
            next[p]..next[p] + RECORDS,
            RECORD_BYTES,
        )])
        .unwrap();
        next[p] += RECORDS;
        let write_us = t0.elapsed().as_micros();
        if i % SYNC_EVERY == SYNC_EVERY - 1 {
            // The first writeback begun before the first sync, which would
            // otherwise drop one asked for and not yet begun on a loaded
            // machine: so a child's first sync line reports one.
            if e.stats().writebacks == 0 {
                assert!(e.wait_writebacks(1), "no writeback in 60 s");
            }
            e.sync().unwrap();
            writeln!(
                out,
                "@ synced {} {} {} {} {write_us}",
                next[0],
                next[1],
                next[2],
                e.stats().writebacks
            )
            .unwrap();
        } else {
            writeln!(out, "@ wrote {i} {write_us}").unwrap();
        }
        out.flush().unwrap();
    }
    common::child_done(&mut out);
}

#[test]
fn sigkill_among_written_behind_writes_keeps_a_prefix() {
    let seed = common::seed("writeback_kill9");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rounds = common::crash_rounds(4);
    let dir = tempfile::tempdir().unwrap();
    let tps = parts();
    // What the store held, verified, after the last round (a prefix of
    // each partition's sequence).
    let mut held = vec![0i64; tps.len()];
    let mut writebacks_before_a_kill = 0;
    // What the opens after the kills repaired, reported: where the kills
    // fell decides it, so it is not asserted.
    let (mut torn_tails, mut repairs) = (0, 0);
    for round in 0..rounds {
        // A kill after 1 to 29 lines (6 to 29 in the first round), into
        // the write after: anywhere among the writes, the writebacks behind
        // them and the syncs, and at times after the last sync.
        // The first round always passes a sync, whose line reports the
        // writebacks before it.
        let low = if round == 0 { SYNC_EVERY + 1 } else { 1 };
        let kill_after = rng.gen_range(low..WRITES_MAX);
        let mut child = common::Kill9Child::spawn("kill9_child", CHILD_ENV, dir.path());
        let mut synced = held.clone();
        let mut seen = 0;
        let mut write_us = 0;
        while let Some(line) = child.next_line() {
            if let Some(rest) = line.strip_prefix("synced ") {
                let f: Vec<u64> = rest.split(' ').map(|n| n.parse().unwrap()).collect();
                for (s, &o) in synced.iter_mut().zip(&f[..3]) {
                    *s = o as i64;
                }
                writebacks_before_a_kill = writebacks_before_a_kill.max(f[3]);
                write_us = f[4];
            } else if let Some(rest) = line.strip_prefix("wrote ") {
                write_us = rest.split(' ').nth(1).unwrap().parse().unwrap();
            } else {
                assert_eq!(line, "done 0");
            }
            seen += 1;
            if seen == kill_after || line == "done 0" {
                break;
            }
        }
        assert!(
            seen == kill_after || seen == WRITES_MAX + 1,
            "round {round}: the child stopped after {seen} lines (CAIRN_SEED={seed})"
        );
        // The child is in its next write by now: the kill lands a seeded
        // part of a write's time into it (a position, not a wait for
        // anything: read from the pipe at once, the kill fell at the
        // write's start in every round).
        let into_write_us = rng.gen_range(0..=write_us);
        child.kill_after(std::time::Duration::from_micros(into_write_us));

        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let report = e.recovery_report();
        torn_tails += usize::from(report.truncated.is_some());
        repairs += report.index_entries_repaired;
        let v = e.verify().unwrap();
        assert!(
            v.is_clean(),
            "round {round}, killed after {kill_after} lines (CAIRN_SEED={seed}): {:?}",
            v.problems
        );
        for (p, tp) in tps.iter().enumerate() {
            let len = e.durable_offset(tp).unwrap_or(0);
            assert!(
                len >= synced[p],
                "round {round}: {tp} holds {len} records after the kill, a sync reported {} (CAIRN_SEED={seed})",
                synced[p]
            );
            // Only what this round added is read: what earlier rounds left
            // was checked then, and recovery synced it.
            let added: Vec<_> = e.read(tp, held[p]).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(
                added,
                common::batch(tp, held[p]..len, RECORD_BYTES).records,
                "round {round}: {tp} from {} is not the sequence written (CAIRN_SEED={seed})",
                held[p]
            );
            held[p] = len;
        }
        eprintln!(
            "round {round}: killed {into_write_us} us after line {kill_after}; synced {synced:?}, held {held:?}"
        );
        e.close().unwrap();
    }
    // The rounds exercised what they are for: writes written behind before
    // a kill (each child reports its writebacks at its syncs).
    assert!(
        rounds == 0 || writebacks_before_a_kill > 0,
        "no child reported a writeback before its kill (CAIRN_SEED={seed})"
    );
    eprintln!(
        "writeback_kill9: {rounds} kills; the opens after them truncated {torn_tails} torn tails and rebuilt {repairs} index entries"
    );
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    assert!(e.verify().unwrap().is_clean());
    for (p, tp) in tps.iter().enumerate() {
        assert_eq!(e.durable_offset(tp).unwrap_or(0), held[p]);
    }
}

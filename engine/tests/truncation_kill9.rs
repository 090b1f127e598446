//! kill -9 among truncations: a child process writes records (one record an
//! entry, so that a cut deletes thousands of entries, in several steps of
//! a [`TruncationPass`]) and cuts every partition to its newest records, and
//! is SIGKILLed at a seeded moment: inside a write, a sync, a pass's step
//! or its sync. Retention and `cairn prune` delete this way; a crash there
//! must keep a prefix of the steps and nothing else (`retention.rs`'s
//! invariants): no record at or above a cut deleted, none below a cut the
//! child saw finished come back, and what is held one contiguous run.
//!
//! After each kill the store must open and verify clean; each partition
//! must hold exactly the records `first..next` of what was written, with
//! `next` at least what a sync reported, `first` at least the last cut
//! reported finished and at most `KEEP` below `next` (no cut asks more);
//! and the next child, resuming at the store's offsets, continues the
//! sequence.
//!
//! Seeded: the seed is printed; `CAIRN_SEED=<n>` replays the kill points.
//! `CAIRN_CRASH_ROUNDS` sets the rounds (default 4).
//!
//! [`TruncationPass`]: cairn_engine::TruncationPass

mod common;

use std::io::Write;

use cairn_engine::{Engine, EngineConfig, TopicPartition};
use rand::{Rng, SeedableRng};

/// Set for the child: the store's directory.
const CHILD_ENV: &str = "CAIRN_TRUNCATION_KILL9_CHILD";
/// Records a partition gets between two cuts, one per write (one entry
/// each): more than a pass's step deletes (1,024 entries).
const RECORDS_PER_ROUND: i64 = 2_500;
/// Records a cut keeps of each partition: the newest.
const KEEP: i64 = 300;
const RECORD_BYTES: usize = 100;
/// Write-then-cut rounds a child makes before it waits to be killed.
const CHILD_ROUNDS: usize = 3;

fn parts() -> Vec<TopicPartition> {
    (0..2).map(|p| TopicPartition::new("tk", p)).collect()
}

/// The child: from the store's offsets, `CHILD_ROUNDS` times, writes
/// `RECORDS_PER_ROUND` records to each partition, one record a partition a
/// write, syncing every 500 (`@ synced <next of each>` after each sync),
/// then cuts each partition to its newest `KEEP` in one pass (`@ cutting
/// <p> <offset>` before each partition's truncation, `@ cut <offsets>` once
/// the pass has finished, durable). Each line ends with the microseconds
/// the step before it took (`@ cutting 0`: the last pass's). Then it
/// waits on its stdin for the SIGKILL.
#[test]
#[ignore = "the child of sigkill_among_truncations_keeps_a_prefix_of_the_steps (run by it)"]
fn truncation_kill9_child() {
    let tps = parts();
    let Some((e, mut next)) = common::child_store(CHILD_ENV, &tps) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    // What the last pass took: the time `@ cutting 0` gives, so that a
    // kill after it lands anywhere in partition 0's cut too (the step
    // before it, a sync's line, took no time). A guess before the first.
    let mut pass_us = 200_000;
    for _ in 0..CHILD_ROUNDS {
        let mut t0 = std::time::Instant::now();
        for i in 0..RECORDS_PER_ROUND {
            let batches: Vec<_> = tps
                .iter()
                .zip(&next)
                .map(|(tp, &n)| common::batch(tp, [n + i], RECORD_BYTES))
                .collect();
            e.write(&batches).unwrap();
            if i % 500 == 499 {
                e.sync().unwrap();
                let synced: Vec<String> = next.iter().map(|n| (n + i + 1).to_string()).collect();
                writeln!(
                    out,
                    "@ synced {} {}",
                    synced.join(" "),
                    t0.elapsed().as_micros()
                )
                .unwrap();
                out.flush().unwrap();
                t0 = std::time::Instant::now();
            }
        }
        for n in &mut next {
            *n += RECORDS_PER_ROUND;
        }
        let t_pass = std::time::Instant::now();
        let mut pass = e.truncation_pass();
        let mut cuts = Vec::new();
        for (p, tp) in tps.iter().enumerate() {
            let cut = next[p] - KEEP;
            let step_us = if p == 0 {
                pass_us
            } else {
                t0.elapsed().as_micros()
            };
            writeln!(out, "@ cutting {p} {cut} {step_us}").unwrap();
            out.flush().unwrap();
            t0 = std::time::Instant::now();
            pass.truncate_by_while(tp, |_| Ok(cut), || true).unwrap();
            cuts.push(cut.to_string());
        }
        pass.finish().unwrap();
        pass_us = t_pass.elapsed().as_micros();
        writeln!(out, "@ cut {} {}", cuts.join(" "), t0.elapsed().as_micros()).unwrap();
        out.flush().unwrap();
    }
    common::child_done(&mut out);
}

#[test]
fn sigkill_among_truncations_keeps_a_prefix_of_the_steps() {
    let seed = common::seed("truncation_kill9");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let rounds = common::crash_rounds(4);
    let dir = tempfile::tempdir().unwrap();
    let tps = parts();
    // What the store held after the last round, verified: `first..next`.
    let mut first = vec![0i64; tps.len()];
    let mut next = vec![0i64; tps.len()];
    // Lines a child prints: 5 syncs and 3 of the cut, a round.
    let lines_max = CHILD_ROUNDS * 8 + 1;
    // Partitions a kill left part-way through a cut: where the kills fell
    // decides it, so it is reported, not asserted.
    let mut partial_cuts = 0;
    let mut cuts_finished = 0;
    for round in 0..rounds {
        let kill_after = rng.gen_range(1..=lines_max);
        let mut child = common::Kill9Child::spawn("truncation_kill9_child", CHILD_ENV, dir.path());
        let mut synced = next.clone();
        // The last cut the child said finished.
        let mut finished = first.clone();
        let mut step_us = 0;
        let mut seen = 0;
        while let Some(line) = child.next_line() {
            let f: Vec<&str> = line.split(' ').collect();
            step_us = f.last().unwrap().parse().unwrap();
            let numbers =
                |f: &[&str]| -> Vec<i64> { f.iter().map(|n| n.parse().unwrap()).collect() };
            match f[0] {
                "synced" => synced = numbers(&f[1..3]),
                "cutting" => {}
                "cut" => {
                    finished = numbers(&f[1..3]);
                    cuts_finished += 1;
                }
                _ => assert_eq!(f[0], "done", "{line}"),
            }
            seen += 1;
            if seen == kill_after || f[0] == "done" {
                break;
            }
        }
        assert!(
            seen == kill_after || seen == lines_max,
            "round {round}: the child stopped after {seen} lines (CAIRN_SEED={seed})"
        );
        // Into the child's next step, as far as the last one took.
        let into_us = rng.gen_range(0..=step_us);
        child.kill_after(std::time::Duration::from_micros(into_us));

        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let v = e.verify().unwrap();
        assert!(
            v.is_clean(),
            "round {round}, killed {into_us} us after line {kill_after} (CAIRN_SEED={seed}): {:?}",
            v.problems
        );
        let held = e.partitions();
        for (p, tp) in tps.iter().enumerate() {
            // None before the first write the store kept.
            let (f, n, count) = held.iter().find(|i| &i.tp == tp).map_or((0, 0, 0), |i| {
                (i.first_offset, i.next_offset, i.record_count)
            });
            let at = format!("round {round}, killed {into_us} us after line {kill_after}: {tp} holds {f}..{n} (CAIRN_SEED={seed})");
            assert!(n >= synced[p], "{at}, a sync reported {}", synced[p]);
            assert!(n >= next[p], "{at}, held {} before", next[p]);
            // One record an entry: a finished cut leaves nothing below it,
            // and none deletes at or above what it was asked, which is at
            // most `KEEP` below the records the store holds (the child
            // syncs its writes before it cuts; it may have begun a cut
            // after the last line read here).
            assert!(f >= finished[p], "{at}, a cut to {} finished", finished[p]);
            assert!(
                f <= (n - KEEP).max(first[p]),
                "{at}: more deleted than any cut asked"
            );
            partial_cuts += usize::from(f > finished[p] && f < n - KEEP);
            assert_eq!(count, (n - f) as u64, "{at}");
            let got: Vec<_> = e.read(tp, f).unwrap().map(|r| r.unwrap()).collect();
            assert_eq!(
                got,
                common::batch(tp, f..n, RECORD_BYTES).records,
                "{at}: not the records written"
            );
            first[p] = f;
            next[p] = n;
        }
        eprintln!(
            "round {round}: killed {into_us} us after line {kill_after}; held {first:?}..{next:?}"
        );
        e.close().unwrap();
    }
    eprintln!(
        "truncation_kill9: {rounds} kills; {partial_cuts} partitions left part-way through a cut; {cuts_finished} cuts seen finished"
    );
}

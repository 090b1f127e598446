//! A crash in the middle of a rebalance. Member A (`cairn run`, a child
//! process) archives while records keep arriving; member B joins the group,
//! so A must give partitions up. A aborts inside the revoke, after the
//! revoked partitions' buffer was made durable and before their commit
//! (`CAIRN_ABORT_AT=revoke-before-commit:1`). B takes over, A restarts, and
//! both finish everything produced.
//!
//! Each store must hold its records in order, byte for byte, without a
//! duplicate; together they must hold every record produced (records A made
//! durable but could not commit are archived again by their next owner: that
//! overlap is printed, not an error); Kafka must end committed at the end.

mod common;

use std::collections::VecDeque;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cairn_connector::cli::demo::{
    archived_offsets, committed, demo_next_offsets, demo_producer, produce_with, DEMO_PARTITIONS,
};
use cairn_engine::{Engine, EngineConfig};
use common::{cairn_run, KillOnDrop, TestBroker};

const TOPIC: &str = "rc";
const GROUP: &str = "rc-group";

/// A `cairn run` child whose stderr lines arrive on `lines` as (name, line);
/// `None` as the line when its stderr closes (it exited).
fn member(
    name: &'static str,
    mb: &TestBroker,
    data: &std::path::Path,
    abort_at: Option<&str>,
    extra: &[&str],
    lines: mpsc::Sender<(&'static str, Option<String>)>,
) -> KillOnDrop {
    let data = data.to_str().unwrap();
    let (group, topic) = (mb.group(GROUP), mb.topic(TOPIC));
    let mut args = common::run_flags(&mb.brokers, &group, &topic, data);
    args.extend(["--commit", "every-put"]);
    args.extend(extra);
    if !extra.contains(&"--batch-records-max") {
        args.extend(["--batch-records-max", "250"]);
    }
    let mut child = cairn_run(&args, abort_at);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send((name, Some(line)));
        }
        let _ = lines.send((name, None));
    });
    child
}

/// The members' stderr lines as they arrive, keeping the latest few so that
/// a test that times out shows what the members were doing.
struct Members {
    rx: mpsc::Receiver<(&'static str, Option<String>)>,
    recent: VecDeque<String>,
}

impl Members {
    const RECENT_LINES: usize = 60;

    /// The next line from any member, or a panic naming `what` was awaited.
    fn next(&mut self, deadline: Instant, what: &str) -> (&'static str, Option<String>) {
        match self.next_within(deadline, deadline, what) {
            Some(got) => got,
            None => unreachable!("next_within waits until the deadline"),
        }
    }

    /// The next line within `idle` (None if none came by then), or a panic
    /// naming `what` once `deadline` passes.
    fn next_within(
        &mut self,
        idle: Instant,
        deadline: Instant,
        what: &str,
    ) -> Option<(&'static str, Option<String>)> {
        let timeout = idle.min(deadline).saturating_duration_since(Instant::now());
        let Ok((who, line)) = self.rx.recv_timeout(timeout) else {
            if Instant::now() < deadline {
                return None;
            }
            self.give_up(what);
        };
        if self.recent.len() == Self::RECENT_LINES {
            self.recent.pop_front();
        }
        let shown = line.as_deref().unwrap_or("(stderr closed)");
        self.recent.push_back(format!("{who}: {shown}"));
        Some((who, line))
    }

    fn give_up(&mut self, what: &str) -> ! {
        let recent = Vec::from(std::mem::take(&mut self.recent)).join("\n");
        panic!("timed out waiting for {what}; the members' latest lines:\n{recent}");
    }
}

/// If `line` is a member's commit event (`--log-format json`, the
/// pipeline's debug events on), note each partition's committed offset in
/// `committed` and say so.
fn note_commit(line: &str, committed: &mut BTreeMap<i32, i64>) -> bool {
    if !line.contains(r#""message":"commit""#) {
        return false;
    }
    let v: serde_json::Value = serde_json::from_str(line).expect("a json log line");
    let offsets = v["fields"]["offsets"]
        .as_str()
        .expect("the commit's offsets");
    for one in offsets.split(',') {
        // `topic/partition@offset`
        let (tp, o) = one.rsplit_once('@').expect("tp@offset");
        let p = tp.rsplit_once('/').expect("topic/partition").1;
        committed.insert(p.parse().unwrap(), o.parse().unwrap());
    }
    true
}

/// Add the offsets of `line`'s commit, if it logs one, to `seen`.
fn note_seen(line: &str, seen: &mut BTreeMap<i32, BTreeSet<i64>>) {
    let mut one = BTreeMap::new();
    if note_commit(line, &mut one) {
        for (p, o) in one {
            seen.entry(p).or_default().insert(o);
        }
    }
}

/// Every record a store holds, by partition, checked in order and against
/// what was produced.
fn store_records(dir: &std::path::Path, name: &str, topic: &str) -> BTreeMap<i32, BTreeSet<i64>> {
    let engine = Engine::open(EngineConfig::new(dir)).unwrap();
    assert!(engine.verify().unwrap().is_clean(), "store {name} verifies");
    archived_offsets(&engine, topic)
        .unwrap_or_else(|e| panic!("store {name}: {e}"))
        .into_iter()
        .map(|(p, offsets)| (p, offsets.into_iter().collect()))
        .collect()
}

#[test]
fn abort_inside_a_revoke_loses_nothing_and_stores_stay_duplicate_free() {
    let mb = TestBroker::start(&[&format!("{TOPIC}:{DEMO_PARTITIONS}")]);
    let (topic, group) = (mb.topic(TOPIC), mb.group(GROUP));
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // Records keep arriving, so A has a buffer to flush when the revoke comes.
    let stop_producing = Arc::new(AtomicBool::new(false));
    let produced = Arc::new(AtomicU64::new(0));
    let producer = {
        let (brokers, topic, stop, produced) = (
            mb.brokers.clone(),
            topic.clone(),
            stop_producing.clone(),
            produced.clone(),
        );
        std::thread::spawn(move || {
            let producer = demo_producer(&brokers).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let next = produced.load(Ordering::Relaxed);
                produce_with(&producer, &topic, next..next + 300).unwrap();
                produced.store(next + 300, Ordering::Relaxed);
                // Pacing the producer, not synchronising with anything.
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    };
    let (tx, rx) = mpsc::channel();
    let mut members = Members {
        rx,
        recent: VecDeque::new(),
    };

    let mut a = member(
        "A",
        &mb,
        dir_a.path(),
        Some("revoke-before-commit:1"),
        // Records linger in A's buffer, so the revoke has some to make
        // durable before the abort: B joins right after A's first commit,
        // and its join (seconds) ends well inside the next linger. With a
        // linger of 500 ms, a revoke could fall just after a later hand-
        // over, the buffer empty, and the check below failed (once in a
        // full local suite, 2026-12-06).
        &["--linger-ms", "10000", "--batch-records-max", "100000"],
        tx.clone(),
    );
    // A's commits, as its own log reports each one Kafka acknowledged
    // (Kafka's view may be B's by the time it is read).
    let mut committed_by_a: BTreeMap<i32, i64> = BTreeMap::new();
    // Every offset either member's log reports committed, by partition.
    let mut seen: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, line) = members.next(deadline, "A's first commit");
        let line = line.expect("A exited before its first commit");
        note_seen(&line, &mut seen);
        if note_commit(&line, &mut committed_by_a) {
            break;
        }
    }

    // B joins: A is asked to give partitions up, and aborts inside the revoke.
    let mut b = member("B", &mb, dir_b.path(), None, &[], tx.clone());
    let mut a_aborted = false;
    while !a_aborted {
        if let ("A", line) = members.next(deadline + Duration::from_secs(60), "A's abort") {
            match line {
                Some(l) => {
                    note_seen(&l, &mut seen);
                    note_commit(&l, &mut committed_by_a);
                    a_aborted |= l.contains("CAIRN_ABORT_AT: aborting at revoke-before-commit")
                }
                None => panic!("A exited without reaching revoke-before-commit"),
            }
        }
    }
    let status = a.wait().unwrap();
    assert_eq!(status.signal(), Some(6), "A aborted (SIGABRT): {status:?}");
    let (durable_a, identity_a) = {
        let e = Arc::new(Engine::open(EngineConfig::new(dir_a.path())).unwrap());
        let sink = cairn_connector::ArchiveSink::new(e.clone());
        let identity = cairn_connector::SinkTask::identity(&sink);
        (e.durable_offsets(), identity.expect("an archive has one"))
    };
    // Every offset A committed is within what A's store holds durably.
    assert!(!committed_by_a.is_empty(), "A logged no commit's offsets");
    common::assert_committed_le_durable(&topic, &committed_by_a, &durable_a, "A at its abort");
    // And the abort met records made durable but not committed (its
    // lingering buffer, flushed by the revoke): without them this would be
    // a crash with nothing in flight (until 2026-12-05 not checked). Which
    // partition the revoke took, and so whether B archives them again, is
    // the assignor's: the overlap below is printed, not asserted.
    assert!(
        durable_a
            .iter()
            .any(|(tp, d)| committed_by_a.get(&tp.partition).is_none_or(|c| c < d)),
        "A aborted with everything durable committed: durable {durable_a:?}, committed {committed_by_a:?}"
    );
    // So is every offset Kafka holds under A's name, also one A sent and
    // did not live to log acknowledged (seen in review, 2026-12-05: only
    // A's log was checked). B's commits carry B's name.
    {
        let c = cairn_connector::offsets::group_client(&mb.brokers, &group).unwrap();
        let tps: Vec<_> = (0..DEMO_PARTITIONS)
            .map(|p| cairn_engine::TopicPartition::new(&topic, p))
            .collect();
        let held =
            cairn_connector::offsets::committed_with_metadata(&c, &tps, Duration::from_secs(10))
                .unwrap();
        // A held every partition until B joined, and B is given A's only
        // once A's session times out (3 s): A's commits are there to check
        // (counted, not asserted, so that a host slow enough for B to have
        // committed them all first does not fail the test).
        let under_a = held.values().filter(|k| k.metadata == identity_a).count();
        eprintln!("{under_a} of Kafka's offsets are under A's name");
        for (tp, k) in held.iter().filter(|(_, k)| k.metadata == identity_a) {
            let d = durable_a.get(tp).copied().unwrap_or(0);
            assert!(
                k.offset <= d,
                "{tp}: Kafka holds {} committed under A's name, A's store only {d}",
                k.offset
            );
        }
    }
    let kafka = committed(&mb.brokers, &group, &topic, DEMO_PARTITIONS).unwrap();
    eprintln!(
        "A aborted inside a revoke at {} produced; A durable {:?}, Kafka committed {kafka:?}",
        produced.load(Ordering::Relaxed),
        durable_a
            .iter()
            .map(|(tp, o)| (tp.partition, *o))
            .collect::<BTreeMap<_, _>>()
    );

    // A comes back; both share the group until everything is committed.
    let mut a = member("A again", &mb, dir_a.path(), None, &[], tx.clone());
    let mut commits_after_restart = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut last_seen = String::new();
    // Revoke commits after the restart that failed (refused while the mock
    // group re-joins): each leaves a durable tail uncommitted, which the
    // next owner archives again, outside A's. (Once everything is
    // committed, the stops below leave no such tail.)
    let mut failed_commits = 0;
    let failed_commit = |line: &str| line.contains("the revoke's commit failed");
    loop {
        // Kafka is asked after every commit, and after every second without
        // one: the last commit can come before the producer has finished.
        let idle = Instant::now() + Duration::from_secs(1);
        if let Some((who, line)) = members.next_within(idle, deadline, "everything to be committed")
        {
            let line = match (who, line) {
                // The aborted run's stderr closing.
                ("A", None) => continue,
                (_, None) => panic!("{who} exited early"),
                (_, Some(l)) => l,
            };
            failed_commits += usize::from(failed_commit(&line));
            note_seen(&line, &mut seen);
            if !line.contains(r#""message":"commit""#) {
                continue;
            }
            commits_after_restart += 1;
            if commits_after_restart == 20 {
                stop_producing.store(true, Ordering::Relaxed);
            }
        }
        if stop_producing.load(Ordering::Relaxed) && producer.is_finished() {
            let n = produced.load(Ordering::Relaxed);
            let kafka = committed(&mb.brokers, &group, &topic, DEMO_PARTITIONS).unwrap();
            let want = demo_next_offsets(&topic, n);
            if want
                .iter()
                .all(|(tp, o)| kafka.get(&tp.partition) == Some(o))
            {
                break;
            }
            last_seen = format!("Kafka committed {kafka:?}, want {want:?}");
        }
        if Instant::now() >= deadline {
            members.give_up(&format!("everything to be committed ({last_seen})"));
        }
    }
    let n = produced.load(Ordering::Relaxed);
    for child in [&mut a, &mut b] {
        // SIGTERM: a clean stop (drain, fsync, commit, close), exit 0.
        common::send_signal(child.id(), "TERM");
        assert!(child.wait().unwrap().success(), "clean stop exits 0");
    }

    let (in_a, in_b) = (
        store_records(dir_a.path(), "A", &topic),
        store_records(dir_b.path(), "B", &topic),
    );
    let mut overlap = 0;
    for (tp, next) in demo_next_offsets(&topic, n) {
        let p = tp.partition;
        for o in 0..next {
            let (x, y) = (in_a[&p].contains(&o), in_b[&p].contains(&o));
            assert!(x || y, "{tp}@{o} archived by neither member");
            overlap += usize::from(x && y);
        }
        // A record in both stores is one A made durable but could not
        // commit before its abort: at or above A's last commit, below what
        // A held durable then.
        let (from, to) = (
            committed_by_a.get(&p).copied().unwrap_or(0),
            durable_a.get(&tp).copied().unwrap_or(0),
        );
        // Outside it, only the tail of a revoke commit that failed after
        // the restart: a run of records that starts where a member's last
        // acknowledged commit left Kafka.
        let mut last_outside: Option<i64> = None;
        for &o in in_a[&p].intersection(&in_b[&p]) {
            if (from..to).contains(&o) {
                continue;
            }
            assert!(
                failed_commits > 0,
                "{tp}@{o} in both stores, outside A's uncommitted durable tail {from}..{to}"
            );
            if last_outside != Some(o - 1) {
                assert!(
                    seen.get(&p).is_some_and(|c| c.contains(&o)),
                    "{tp}: records from {o} in both stores, outside A's uncommitted durable tail {from}..{to}, and no member committed {o} (commits seen: {:?})",
                    seen.get(&p)
                );
            }
            last_outside = Some(o);
        }
    }
    eprintln!(
        "revoke crash: {n} records produced, all archived; A holds {}, B holds {}, {overlap} in both (A's durable, uncommitted revoked tail{})",
        in_a.values().map(BTreeSet::len).sum::<usize>(),
        in_b.values().map(BTreeSet::len).sum::<usize>(),
        match failed_commits {
            0 => String::new(),
            n => format!(", and the tails of {n} failed revoke commits after the restart"),
        }
    );
}

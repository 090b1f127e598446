//! Real third-party peers: kcat, and a hand-written confluent-kafka loop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{child, histogram, Latency, Peer, Steady, Throughput};

/// The end of kcat's output left out of its timing (see [`kcat`]).
const KCAT_UNTIMED_BYTES: u64 = 64 << 10;
/// Fewest records kcat must have written before that end to be timed.
const KCAT_TIMED_RECORDS_MIN: u64 = 1000;

/// Longest a peer may run before it is killed and reported skipped.
const PEER_LIMIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Serialize)]
pub struct KcatRun {
    /// kcat's and its librdkafka's versions.
    pub version: String,
    pub throughput: Throughput,
}

/// kcat's and its librdkafka's versions, from `kcat -V`'s `Version 1.7.1
/// (JSON, …, librdkafka 2.0.2 builtin.features=…)` line.
/// Also the program's name: `kcat`, or `kafkacat`, its name before 1.6 that
/// older Debian and Ubuntu packages still install.
fn kcat_version() -> Result<(String, &'static str), std::io::Error> {
    for program in ["kcat", "kafkacat"] {
        let out = match Command::new(program)
            .arg("-V")
            .stderr(Stdio::null())
            .output()
        {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            out => out.map_err(|e| std::io::Error::new(e.kind(), format!("{program} -V: {e}")))?,
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let after = |word: &str| {
            text.split_whitespace()
                .skip_while(|w| *w != word)
                .nth(1)
                .map(|v| v.trim_end_matches([',', ')']).to_owned())
                .unwrap_or_else(|| "unknown".into())
        };
        return Ok((
            format!(
                "{program} {}, librdkafka {}",
                after("Version"),
                after("librdkafka")
            ),
            program,
        ));
    }
    Err(std::io::ErrorKind::NotFound.into())
}

/// `kcat -C -o beginning -c RECORDS` into a file beside the archive: no
/// fsync, no offsets. kcat assigns partitions directly (no group join); it
/// is timed from the first look (every millisecond) that finds the file
/// non-empty to the first that finds all but its last 64 KiB written (a
/// margin over the stdio buffer kcat writes only at exit, after its
/// shutdown), counting the lines written between those two looks, as the
/// other consumers are timed from their first record to their last. It
/// stops after the records rather than at end of partition (`-e` waits for
/// a fetch at the end, which the broker holds for `fetch.wait.max.ms`).
///
/// It fetches with shorter waits than the other consumers
/// (`fetch.wait.max.ms` and `fetch.error.backoff.ms` at 10 ms, where they
/// keep librdkafka's 500 ms): the topic is produced before, so a fetch
/// waits only at a partition's end, and this favours kcat if anything
/// (the comment said until the night of 2026-12-04 that the others used
/// them too). Its fetch queue thresholds are raised to their maximum instead of setting
/// `fetch.queue.backoff.ms` (which cairn, the ceiling and the Python loop
/// set to 10 ms): kcat 1.7.1 as Debian 12 ships it bundles librdkafka
/// 2.0.2, which predates that setting, and backs off 1 s whenever a
/// partition's queue passes a threshold. With the thresholds at their
/// maximum it never does.
pub fn kcat(brokers: &str, topic: &str, records: u64, size: usize, out: &Path) -> Peer<KcatRun> {
    let (version, program) = match kcat_version() {
        Ok(v) => v,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Peer::Skipped {
                skipped: "kcat is not installed (apt-get install kcat)".into(),
            }
        }
        // Installed but not runnable (permissions, a broken binary): a
        // failure to see to, not a tool that is missing (until the second
        // review of 2026-12-05, a skip).
        Err(e) => {
            return Peer::Failed {
                failed: e.to_string(),
            }
        }
    };
    // One line per record: the value and a newline.
    let line = size as u64 + 1;
    let want = records * line;
    // kcat's stdio buffers its stdout in blocks of the file system's
    // preferred size (4 KiB on ext4, more elsewhere) and writes the last
    // only at exit, after its shutdown: at least 64 KiB, and two such
    // blocks, and one line, are left out of the timing (0.07 % of the
    // records at 100 B, 0.06 % at 10 KiB on ext4).
    let block =
        std::fs::metadata(out).map_or(4096, |m| std::os::unix::fs::MetadataExt::blksize(&m));
    let margin = KCAT_UNTIMED_BYTES.max(2 * block) + line;
    let timed = want.saturating_sub(margin);
    let mut got = 0;
    // The length at the first look that found output, and at the first
    // that found `timed` bytes, with its time: the records timed are the
    // lines written between those two looks.
    let mut first_len = None;
    let mut done = None;
    let mut done_at_exit = false;
    // Whole lines in the file at each look that found more, before kcat
    // exited (its exit writes what its stdio buffer held): its steady
    // window.
    let origin = Instant::now();
    let mut progress: Vec<(f64, u64)> = Vec::new();
    let path = out.join("kcat.out");
    let finished = child::run_to_file(
        "kcat",
        Command::new(program).args([
            "-C",
            "-b",
            brokers,
            "-t",
            topic,
            "-o",
            "beginning",
            "-c",
            &records.to_string(),
            "-X",
            "fetch.wait.max.ms=10",
            "-X",
            "fetch.error.backoff.ms=10",
            "-X",
            "queued.min.messages=10000000",
            "-X",
            "queued.max.messages.kbytes=2097151",
            "-q",
        ]),
        PEER_LIMIT,
        &path,
        |len, exited| {
            got = len;
            if len > 0 {
                first_len.get_or_insert(len);
            }
            let lines = len / line;
            if !exited && progress.last().map_or(0, |&(_, n)| n) < lines {
                progress.push((origin.elapsed().as_secs_f64(), lines));
            }
            // Only once output has begun: with fewer bytes wanted than
            // the margin (`timed` 0), a first look at an empty file would
            // otherwise end the timing before it began.
            if len > 0 && len >= timed && done.is_none() {
                done = Some((len, Instant::now()));
                done_at_exit = exited;
            }
        },
    );
    // kcat never syncs its output: its 100+ MB would still be going to the
    // disk while the next step (the Python loop, which fdatasyncs, in
    // every round but one) is timed. Synced here, outside every timing
    // (until 2026-12-05 only unlinked, seen in review).
    let _ = std::fs::File::open(&path).and_then(|f| f.sync_data());
    crate::ptc::measure::remove_synced(&path);
    // A run that did not deliver every record failed; so did one that did
    // but cannot be timed, with why: those are kcat's fastest runs, and
    // leaving them out of its median (as until 2026-12-05, "skipped")
    // would favour cairn.
    let f = match finished {
        Ok(f) => f,
        Err(e) => {
            return Peer::Failed {
                failed: format!("kcat: {e}"),
            }
        }
    };
    if !f.status.success() {
        return Peer::Failed {
            failed: format!("kcat exited with {}", f.status),
        };
    }
    if got != want {
        return Peer::Failed {
            failed: format!("kcat wrote {got} bytes, expected {want}"),
        };
    }
    let (Some(first), Some(first_len), Some((last_len, last))) = (f.first_byte_at, first_len, done)
    else {
        return Peer::Failed {
            failed: format!(
                "kcat wrote all {got} bytes, but not in a way that can be timed (no first output, or no look at its last {margin} bytes)"
            ),
        };
    };
    if done_at_exit {
        return Peer::Failed {
            failed: format!(
                "kcat's output reached all but its last {margin} bytes only at its exit (its stdout buffer is larger than that margin): its shutdown would be timed"
            ),
        };
    }
    // The lines written between the two looks.
    let records_timed = last_len.saturating_sub(first_len) / line;
    if records_timed < KCAT_TIMED_RECORDS_MIN {
        return Peer::Failed {
            failed: format!(
                "too few records to time kcat ({records_timed} between its first output and the last {margin} bytes, left out of its timing)"
            ),
        };
    }
    if last <= first {
        return Peer::Failed {
            failed: "kcat wrote its output within one look: nothing to time".into(),
        };
    }
    let seconds = last.duration_since(first).as_secs_f64();
    let mut throughput = Throughput::new(records_timed, records_timed * size as u64, seconds);
    throughput.steady = Steady::of(&progress, records);
    eprintln!("   kcat: {:.0} records/s", throughput.records_per_s);
    Peer::Ran(KcatRun {
        version,
        throughput,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct PythonRun {
    /// confluent-kafka's version and the librdkafka it bundles.
    pub version: String,
    pub batch: usize,
    pub throughput: Throughput,
    /// From the start of a batch's write to its synchronous commit's return.
    pub write_to_commit: Latency,
}

#[derive(Debug, serde::Deserialize)]
struct PythonOut {
    version: String,
    librdkafka: String,
    records: u64,
    seconds: f64,
    lat_us: Vec<u64>,
    /// (seconds from the first record, records committed by then), at
    /// each commit: its steady window.
    progress: Vec<(f64, u64)>,
}

/// bench/peers/hand_loop.py: consume a batch, write, fdatasync, commit
/// (synchronously).
pub fn python(
    brokers: &str,
    topic: &str,
    records: u64,
    size: usize,
    batch: usize,
    out: &Path,
) -> Peer<(PythonRun, Histogram<u64>)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/hand_loop.py");
    // Skipped only when the module (or python3) is missing; a module
    // that is there and fails to import (a librdkafka or ABI mismatch) is
    // a failure to see to, with Python's own words (until the second
    // review of 2026-12-05, any failure read as "not installed").
    let probe = Command::new("python3")
        .args(["-c", "import confluent_kafka"])
        .output();
    let missing = "python3 with confluent-kafka is not installed (pip install confluent-kafka)";
    match probe {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Peer::Skipped {
                skipped: missing.into(),
            }
        }
        Err(e) => {
            return Peer::Failed {
                failed: format!("python3: {e}"),
            }
        }
        Ok(o) if !o.status.success() => {
            let said = String::from_utf8_lossy(&o.stderr);
            if said.contains("ModuleNotFoundError") {
                return Peer::Skipped {
                    skipped: missing.into(),
                };
            }
            let last = said.lines().last().unwrap_or("no message").to_owned();
            return Peer::Failed {
                failed: format!("python3 -c 'import confluent_kafka' failed: {last}"),
            };
        }
        Ok(_) => {}
    }
    let path = out.join("python.out");
    let _ = std::fs::remove_file(&path);
    let finished = child::output(
        "hand_loop.py",
        Command::new("python3")
            .arg(&script)
            .args([brokers, topic, &records.to_string(), &batch.to_string()])
            .arg(&path),
        PEER_LIMIT,
    );
    crate::ptc::measure::remove_synced(&path);
    // Installed, so anything from here on is a failure, not a skip.
    let stdout = match finished {
        Ok((f, stdout)) if f.status.success() => stdout,
        Ok((f, _)) => {
            return Peer::Failed {
                failed: format!("hand_loop.py exited with {}", f.status),
            }
        }
        Err(e) => {
            return Peer::Failed {
                failed: format!("hand_loop.py: {e}"),
            }
        }
    };
    let parsed: PythonOut = match serde_json::from_slice(&stdout) {
        Ok(p) => p,
        Err(e) => {
            return Peer::Failed {
                failed: format!("hand_loop.py output: {e}"),
            }
        }
    };
    if parsed.records != records {
        return Peer::Failed {
            failed: format!(
                "hand_loop.py consumed {} records of {records}",
                parsed.records
            ),
        };
    }
    let mut h = histogram();
    for l in &parsed.lat_us {
        h.saturating_record((*l).max(1));
    }
    let run = PythonRun {
        version: format!(
            "confluent-kafka {}, librdkafka {}",
            parsed.version, parsed.librdkafka
        ),
        batch,
        throughput: Throughput::new(parsed.records, parsed.records * size as u64, parsed.seconds)
            .with_steady(&parsed.progress),
        write_to_commit: Latency::of(&h),
    };
    eprintln!(
        "   python loop: {:.0} records/s, write-to-commit p50 {} us (of {} batches)",
        run.throughput.records_per_s,
        run.write_to_commit
            .p50()
            .map_or_else(|| "n/a".to_owned(), |v| v.to_string()),
        run.write_to_commit.samples
    );
    Peer::Ran((run, h))
}

#[cfg(test)]
mod tests {
    use super::PythonOut;

    /// hand_loop.py's output as the harness reads it, its progress giving
    /// the loop's steady window (the harness's own test skips the peers,
    /// so this is where the field is checked).
    #[test]
    fn the_python_loops_progress_gives_its_steady_window() {
        let progress: Vec<String> = (1..=10)
            .map(|i| format!("[{}, {}]", f64::from(i) * 0.01, i * 100))
            .collect();
        let text = format!(
            r#"{{"version": "2.16.1", "librdkafka": "2.16.0", "records": 1000, "seconds": 0.1, "lat_us": [500, 600], "progress": [{}]}}"#,
            progress.join(", ")
        );
        let out: PythonOut = serde_json::from_str(&text).unwrap();
        let t = super::Throughput::new(out.records, out.records * 100, out.seconds)
            .with_steady(&out.progress);
        let s = t.steady.expect("a steady window");
        assert_eq!((s.records, s.points), (800, 9));
        assert!((s.records_per_s - 10_000.0).abs() < 1e-6, "{s:?}");
        // Output without progress (an older script) is refused, not read
        // as a loop with no steady window.
        let old = r#"{"version": "2.16.1", "librdkafka": "2.16.0", "records": 1000, "seconds": 0.1, "lat_us": []}"#;
        assert!(serde_json::from_str::<PythonOut>(old).is_err());
    }
}

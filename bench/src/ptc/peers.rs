//! Real third-party peers: kcat, and a hand-written confluent-kafka loop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{histogram, Latency, Peer, Throughput};

/// `kcat -C -o beginning -c RECORDS` into a file: no fsync, no offsets.
/// Timed from spawn to exit (kcat assigns partitions directly, so no group
/// join; its start-up is included). It stops after the records rather than
/// at end of partition (`-e` waits for a fetch at the end, which the broker
/// holds for `fetch.wait.max.ms`), and fetches with the short waits the
/// other consumers use.
pub fn kcat(brokers: &str, topic: &str, records: u64, size: usize, out: &Path) -> Peer<Throughput> {
    let path = out.join("kcat.out");
    let file = match std::fs::File::create(&path) {
        Ok(f) => f,
        Err(e) => {
            return Peer::Skipped {
                skipped: format!("{}: {e}", path.display()),
            }
        }
    };
    let t = Instant::now();
    let status = Command::new("kcat")
        .args([
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
            "-q",
        ])
        .stdout(file)
        .stderr(Stdio::inherit())
        .status();
    let seconds = t.elapsed().as_secs_f64();
    let result = match status {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Peer::Skipped {
            skipped: "kcat is not installed (apt-get install kcat)".into(),
        },
        Err(e) => Peer::Skipped {
            skipped: format!("kcat: {e}"),
        },
        Ok(s) if !s.success() => Peer::Skipped {
            skipped: format!("kcat exited with {s}"),
        },
        Ok(_) => {
            let got = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let want = records * (size as u64 + 1);
            if got != want {
                Peer::Skipped {
                    skipped: format!("kcat wrote {got} bytes, expected {want}"),
                }
            } else {
                eprintln!("   kcat: {:.0} records/s", records as f64 / seconds);
                Peer::Ran(Throughput::new(records, records * size as u64, seconds))
            }
        }
    };
    let _ = std::fs::remove_file(&path);
    result
}

#[derive(Debug, Clone, Serialize)]
pub struct PythonRun {
    pub batch: usize,
    pub throughput: Throughput,
    /// From the start of a batch's write to its synchronous commit's return.
    pub write_to_commit: Latency,
}

#[derive(serde::Deserialize)]
struct PythonOut {
    records: u64,
    seconds: f64,
    lat_us: Vec<u64>,
}

/// bench/peers/hand_loop.py: consume a batch, write, fsync, commit (sync).
pub fn python(
    brokers: &str,
    topic: &str,
    records: u64,
    size: usize,
    batch: usize,
    out: &Path,
) -> Peer<(PythonRun, Histogram<u64>)> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/hand_loop.py");
    let probe = Command::new("python3")
        .args(["-c", "import confluent_kafka"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return Peer::Skipped {
            skipped: "python3 with confluent-kafka is not installed (pip install confluent-kafka)"
                .into(),
        };
    }
    let path = out.join("python.out");
    let _ = std::fs::remove_file(&path);
    let output = Command::new("python3")
        .arg(&script)
        .args([brokers, topic, &records.to_string(), &batch.to_string()])
        .arg(&path)
        .stderr(Stdio::inherit())
        .output();
    let _ = std::fs::remove_file(&path);
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            return Peer::Skipped {
                skipped: format!("hand_loop.py exited with {}", o.status),
            }
        }
        Err(e) => {
            return Peer::Skipped {
                skipped: format!("python3: {e}"),
            }
        }
    };
    let parsed: PythonOut = match serde_json::from_slice(&output.stdout) {
        Ok(p) => p,
        Err(e) => {
            return Peer::Skipped {
                skipped: format!("hand_loop.py output: {e}"),
            }
        }
    };
    let mut h = histogram();
    for l in &parsed.lat_us {
        h.saturating_record((*l).max(1));
    }
    let run = PythonRun {
        batch,
        throughput: Throughput::new(parsed.records, parsed.records * size as u64, parsed.seconds),
        write_to_commit: Latency::of(&h),
    };
    eprintln!(
        "   python loop: {:.0} records/s, write-to-commit p50 {} us",
        run.throughput.records_per_s, run.write_to_commit.p50_us
    );
    Peer::Ran((run, h))
}

//! `cairn run --metrics-addr`: the run's progress as Prometheus metrics,
//! served over HTTP at `/metrics` (the text exposition format, 0.0.4).
//!
//! The figures are those of the run's progress report (progress.rs), taken
//! every `--progress-interval-s`: a scrape between two reports reads the
//! last one, and `cairn_progress_report_timestamp_seconds` says when that
//! was (an alert on its age finds a run that stopped reporting: stuck in a
//! put, or waiting for a revoke). Nothing is read for a scrape: it costs
//! the run one lock and a copy of a string.
//!
//! The server is a few lines over `std::net`, not an HTTP crate: it
//! answers one fixed `GET`, and must never hold up the run. tiny_http,
//! tried first (2026-12-07), kept a thread per idle connection with no
//! bound, read a request line of any size into memory, let a client that
//! pipelined requests and read no reply block every scrape and the run's
//! stop, and lost its listener for good when its accept thread met
//! `EMFILE` (an audit found each). Here every connection has read and
//! write timeouts, a request is read up to 8 KiB, each reply says
//! `Connection: close`, at most [`CONNECTIONS_MAX`] are served at once
//! (others get a short 503), and the accept loop outlives any error.
//!
//! # Invariants
//! - A series is only ever a figure the run knows: an offset, lag or
//!   latency not known yet (no statistics yet, nothing committed, no commit
//!   in the interval) is left out, never given as 0, which would read as
//!   caught up; a lag total counts the partitions it leaves out beside it.
//! - Counters (`_total`) only grow over the run: they are the run's own
//!   totals since its start, which a restart begins again at 0 (Prometheus'
//!   `rate` takes that as a reset).
//! - The endpoint serves reads only, and is bound before anything is
//!   consumed: an address it cannot listen on stops the start, with
//!   nothing fetched or committed. No client holds up the run's stop: it
//!   waits a second at most for the accept loop, and not for replies.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{ConnectorError, Result};
use crate::progress::Progress;

/// The media type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The media type of every other reply (404, 405, 431, 503).
const PLAIN: &str = "text/plain; charset=utf-8";

/// Connections served at once, at most: past it, a short 503.
pub(crate) const CONNECTIONS_MAX: usize = 8;

/// The most of a request read: its line and headers (a scrape's are a
/// few hundred bytes).
const REQUEST_BYTES_MAX: usize = 8 << 10;

/// How long a client may take to send its request, and to take a reply.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the run's stop waits for the accept loop.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// The metrics endpoint of a run: a thread accepting connections, each
/// answered on a thread of its own with the text of the last progress
/// report.
pub struct MetricsServer {
    text: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    local: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Disconnected once the accept loop's thread has ended.
    ended: std::sync::mpsc::Receiver<()>,
    /// Where it listens (the port chosen, for `:0`): logged, and read by
    /// the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub addr: String,
}

impl MetricsServer {
    /// Listen on `addr` (`host:port`), serving `/metrics`.
    pub fn start(addr: &str) -> Result<MetricsServer> {
        Self::start_with(addr, READ_TIMEOUT)
    }

    /// [`start`](Self::start), a request given `read_timeout` to arrive
    /// (shorter in the tests).
    fn start_with(addr: &str, read_timeout: Duration) -> Result<MetricsServer> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            let what = match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    "a port below 1024 takes privileges this process lacks: give one above it, such as 9464"
                }
                std::io::ErrorKind::AddrInUse => "another process listens there: give a free port",
                std::io::ErrorKind::AddrNotAvailable => {
                    "no interface of this machine has that address: give one of its own, or 127.0.0.1"
                }
                _ => "give host:port of this machine, such as 127.0.0.1:9464",
            };
            ConnectorError::Config(format!(
                "--metrics-addr {addr}: cannot listen there ({e}): {what} (nothing was fetched or committed)"
            ))
        })?;
        let local = listener
            .local_addr()
            .map_err(|e| ConnectorError::Failed(format!("the metrics endpoint's address: {e}")))?;
        let text = Arc::new(Mutex::new(render_before_report()));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, stopping) = (text.clone(), stop.clone());
        let (running, ended) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("cairn-metrics".into())
            .spawn(move || {
                let _running = running;
                accept(&listener, &served, &stopping, read_timeout);
            })
            .map_err(|e| ConnectorError::Failed(format!("the metrics thread: {e}")))?;
        tracing::info!(addr = %local, "serving metrics at http://{local}/metrics");
        Ok(MetricsServer {
            text,
            stop,
            local,
            thread: Some(thread),
            ended,
            addr: local.to_string(),
        })
    }

    /// What the run hands each progress report to: it becomes the text
    /// served.
    pub fn observer(&self) -> crate::ProgressObserver {
        let text = self.text.clone();
        let mut reports = 0;
        Box::new(move |p: &Progress| {
            reports += 1;
            let rendered = render(p, reports, unix_now_s());
            *text.lock().unwrap_or_else(|e| e.into_inner()) = rendered;
        })
    }
}

/// The accept loop is woken (a connection of its own) and waited for, a
/// second at most; the replies are not: a client that does not read is
/// left to its write timeout, or to the process's exit.
impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let _ = TcpStream::connect_timeout(&wake, STOP_WAIT);
        if let Some(t) = self.thread.take() {
            match self.ended.recv_timeout(STOP_WAIT) {
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = t.join();
                }
                _ => tracing::warn!(
                    "the metrics endpoint did not stop within a second: left to the process's exit"
                ),
            }
        }
    }
}

/// Take connections until `stop` is set, each answered on a thread of its
/// own, at most [`CONNECTIONS_MAX`] at once. An accept that fails (no file
/// descriptor left) is said, once a minute at most, and the loop goes on.
fn accept(
    listener: &TcpListener,
    text: &Arc<Mutex<String>>,
    stop: &AtomicBool,
    read_timeout: Duration,
) {
    let serving = Arc::new(AtomicUsize::new(0));
    let mut said_at: Option<std::time::Instant> = None;
    for conn in listener.incoming() {
        if stop.load(SeqCst) {
            break;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                if said_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    tracing::warn!(error = %e, "the metrics endpoint could not take a connection (it goes on taking them)");
                    said_at = Some(std::time::Instant::now());
                }
                // Not a spin while the error lasts (EMFILE does).
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if serving.fetch_add(1, SeqCst) >= CONNECTIONS_MAX {
            serving.fetch_sub(1, SeqCst);
            // A few bytes: they fit the socket's buffer, read or not; a
            // second at most, on the accept loop's own thread.
            let _ = reply(
                &stream,
                503,
                "busy: too many scrapes at once\n",
                PLAIN,
                false,
                Duration::from_secs(1),
            );
            continue;
        }
        let (done, text) = (serving.clone(), text.clone());
        let spawned = std::thread::Builder::new()
            .name("cairn-metrics-reply".into())
            .spawn(move || {
                answer(&stream, &text, read_timeout);
                done.fetch_sub(1, SeqCst);
            });
        if spawned.is_err() {
            serving.fetch_sub(1, SeqCst);
        }
    }
}

/// Read one request from `stream` and answer it, then close. A client too
/// slow, or a request too large, gets what the timeouts and the bound
/// allow, and no more.
fn answer(stream: &TcpStream, text: &Mutex<String>, read_timeout: Duration) {
    // One deadline for the whole request, not a timeout per read: a client
    // sending a byte every few seconds kept its place for hours (until the
    // re-audit of 2026-12-07).
    let deadline = Instant::now() + read_timeout;
    let mut request = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let ended = loop {
        if request.windows(4).any(|w| w == b"\r\n\r\n") || request.windows(2).any(|w| w == b"\n\n")
        {
            break true;
        }
        if request.len() >= REQUEST_BYTES_MAX {
            break false;
        }
        match read_by(stream, &mut chunk, deadline) {
            Some(n) => request.extend_from_slice(&chunk[..n]),
            None => return,
        }
    };
    let plain = PLAIN;
    if !ended {
        let _ = reply(
            stream,
            431,
            "request too large\n",
            plain,
            false,
            WRITE_TIMEOUT,
        );
        // What the client still sends is read and dropped, for a second
        // at most: closed with it unread, the connection would be reset,
        // and the reply lost with it.
        let drain_until = Instant::now() + Duration::from_secs(1);
        while read_by(stream, &mut chunk, drain_until).is_some() {}
        return;
    }
    let line = String::from_utf8_lossy(&request);
    let mut words = line.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let path = target.split('?').next().unwrap_or_default();
    let head = method == "HEAD";
    let _ = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = text.lock().unwrap_or_else(|e| e.into_inner()).clone();
            reply(stream, 200, &body, CONTENT_TYPE, head, WRITE_TIMEOUT)
        }
        ("GET" | "HEAD", _) => reply(
            stream,
            404,
            "cairn serves /metrics only\n",
            plain,
            head,
            WRITE_TIMEOUT,
        ),
        _ => reply(stream, 405, "GET /metrics\n", plain, false, WRITE_TIMEOUT),
    };
}

/// One read from `stream` by `deadline`: the bytes read, or `None` at the
/// end of the stream, on an error, or once the deadline has passed.
fn read_by(mut stream: &TcpStream, buf: &mut [u8], deadline: Instant) -> Option<usize> {
    let left = deadline.checked_duration_since(Instant::now())?;
    stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .ok()?;
    match stream.read(buf) {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// One HTTP/1.1 reply, the connection closed after it; a 405 says what is
/// allowed. Written whole from one buffer (a send per piece split a head
/// into eleven), within `within` in all.
fn reply(
    mut stream: &TcpStream,
    status: u16,
    body: &str,
    content_type: &str,
    head_only: bool,
    within: Duration,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut bytes = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        bytes.extend_from_slice(body.as_bytes());
    }
    let deadline = Instant::now() + within;
    let mut sent = 0;
    while sent < bytes.len() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or(std::io::ErrorKind::TimedOut)?;
        stream.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        match stream.write(&bytes[sent..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    stream.shutdown(std::net::Shutdown::Write)
}

fn unix_now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One metric family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// What is served before the first report: the build, and no report yet.
fn render_before_report() -> String {
    let mut out = String::new();
    build_info(&mut out);
    reports_total(&mut out, 0);
    out
}

fn reports_total(out: &mut String, reports: u64) {
    family(
        out,
        "cairn_progress_reports_total",
        "counter",
        "Progress reports taken since the run started (the figures below are the last one's).",
    );
    let _ = writeln!(out, "cairn_progress_reports_total {reports}");
}

fn build_info(out: &mut String) {
    family(
        out,
        "cairn_build_info",
        "gauge",
        "The cairn build serving these metrics.",
    );
    let _ = writeln!(
        out,
        "cairn_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );
}

/// A label value as the text format writes it: `\`, `"` and newlines
/// escaped. (Kafka's topic names hold none; escaped all the same.)
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One figure of an assigned partition, if known.
type PartitionFigure = fn(&crate::progress::PartitionProgress) -> Option<i64>;

/// The text served for the report `p`, the run's `reports`th, taken at
/// `now_s` (Unix seconds).
pub(crate) fn render(p: &Progress, reports: u64, now_s: f64) -> String {
    let mut out = String::new();
    build_info(&mut out);
    reports_total(&mut out, reports);
    family(
        &mut out,
        "cairn_progress_report_timestamp_seconds",
        "gauge",
        "When the last progress report was taken (Unix time): the figures below are as of then.",
    );
    let _ = writeln!(out, "cairn_progress_report_timestamp_seconds {now_s:.3}");
    family(
        &mut out,
        "cairn_run_seconds",
        "gauge",
        "Seconds since the run started, as of the last report.",
    );
    let _ = writeln!(out, "cairn_run_seconds {:.3}", p.elapsed.as_secs_f64());
    for (name, help, value) in [
        (
            "cairn_records_written_total",
            "Records written to the archive since the run started (durable once their put returned, or under interval commits once the interval's fsync ran).",
            p.records_written,
        ),
        ("cairn_puts_total", "Puts (batches handed to the archive) since the run started.", p.puts),
        (
            "cairn_commits_total",
            "Offset commits Kafka acknowledged since the run started.",
            p.commits,
        ),
        (
            "cairn_records_skipped_total",
            "Records skipped under --on-oversize skip since the run started (each a gap in its partition's offsets).",
            p.records_skipped,
        ),
        (
            "cairn_records_dead_lettered_total",
            "Records sent to the dead-letter topic since the run started.",
            p.records_dead_lettered,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name} {value}");
    }
    for (name, help, us) in [
        (
            "cairn_put_to_commit_p50_seconds",
            "Median time from the start of a put to Kafka's acknowledgement of its commit, over the puts committed in the last report's interval.",
            p.put_to_commit_p50_us,
        ),
        (
            "cairn_put_to_commit_p99_seconds",
            "99th percentile of put-to-commit over the puts committed in the last report's interval.",
            p.put_to_commit_p99_us,
        ),
    ] {
        if let Some(us) = us {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {:.6}", us as f64 / 1e6);
        }
    }
    family(
        &mut out,
        "cairn_assigned_partitions",
        "gauge",
        "Partitions the group has assigned to this run.",
    );
    let _ = writeln!(out, "cairn_assigned_partitions {}", p.partitions.len());
    // Totals only when some partition's figure is known (progress.rs),
    // and always how many partitions each leaves out: a total of 0 with
    // partitions left out is not caught up (an audit).
    for (name, help, unknown_help, lag) in [
        (
            "cairn_archive_lag_records",
            "Records Kafka holds that the archive has not made durable, summed over the assigned partitions whose log end is known.",
            "Assigned partitions left out of cairn_archive_lag_records: no statistics have shown their log end yet.",
            p.archive_lag(),
        ),
        (
            "cairn_commit_lag_records",
            "Records Kafka holds past the group's committed offsets, summed over the assigned partitions where both are known.",
            "Assigned partitions left out of cairn_commit_lag_records: no log end shown yet, or no offset committed.",
            p.commit_lag(),
        ),
    ] {
        if lag.unknown_partitions < p.partitions.len() {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {}", lag.records);
        }
        let unknown = format!("{}_unknown_partitions", name.trim_end_matches("_records"));
        family(&mut out, &unknown, "gauge", unknown_help);
        let _ = writeln!(out, "{unknown} {}", lag.unknown_partitions);
    }
    let per_partition: [(&str, &str, PartitionFigure); 5] = [
        (
            "cairn_partition_durable_offset",
            "The next offset the archive holds durably, per assigned partition.",
            |q| q.durable,
        ),
        (
            "cairn_partition_committed_offset",
            "The group's committed offset as this run knows it, per assigned partition: its own last commit (never past the durable offset), or the one read at the assignment.",
            |q| q.committed,
        ),
        (
            "cairn_partition_log_end_offset",
            "Kafka's log end as the run's last fetch saw it (the last stable offset), per assigned partition.",
            |q| q.log_end,
        ),
        (
            "cairn_partition_archive_lag_records",
            "Records Kafka holds that the archive has not made durable, per assigned partition.",
            |q| q.archive_lag,
        ),
        (
            "cairn_partition_commit_lag_records",
            "Records Kafka holds past the committed offset, per assigned partition.",
            |q| q.commit_lag(),
        ),
    ];
    for (name, help, figure) in per_partition {
        let known: Vec<_> = p
            .partitions
            .iter()
            .filter_map(|q| Some((q, figure(q)?)))
            .collect();
        if known.is_empty() {
            continue;
        }
        family(&mut out, name, "gauge", help);
        for (q, v) in known {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {v}",
                label(&q.tp.topic),
                q.tp.partition
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::PartitionProgress;
    use cairn_engine::TopicPartition;
    use std::time::Duration;

    fn progress() -> Progress {
        Progress {
            at_stop: false,
            elapsed: Duration::from_millis(12_500),
            interval: Duration::from_secs(10),
            records_written: 1500,
            records_per_s: 150.0,
            puts: 15,
            commits: 14,
            records_skipped: 2,
            records_dead_lettered: 0,
            put_to_commit_p50_us: Some(1250),
            put_to_commit_p99_us: None,
            partitions: vec![
                PartitionProgress {
                    tp: TopicPartition::new("t", 0),
                    log_end: Some(1000),
                    durable: Some(900),
                    committed: Some(800),
                    archive_lag: Some(100),
                },
                PartitionProgress {
                    tp: TopicPartition::new("t", 1),
                    log_end: None,
                    durable: Some(500),
                    committed: None,
                    archive_lag: None,
                },
            ],
        }
    }

    /// The text served for a report: every figure known, none made up (a
    /// p99 with no commit in the interval, a lag with no log end, and an
    /// offset never committed are left out, not 0).
    #[test]
    fn a_report_is_rendered_with_only_the_figures_known() {
        let text = render(&progress(), 3, 1_700_000_000.5);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                &format!(
                    "cairn_build_info{{version=\"{}\"}} 1",
                    env!("CARGO_PKG_VERSION")
                ) as &str,
                "cairn_progress_reports_total 3",
                "cairn_progress_report_timestamp_seconds 1700000000.500",
                "cairn_run_seconds 12.500",
                "cairn_records_written_total 1500",
                "cairn_puts_total 15",
                "cairn_commits_total 14",
                "cairn_records_skipped_total 2",
                "cairn_records_dead_lettered_total 0",
                "cairn_put_to_commit_p50_seconds 0.001250",
                "cairn_assigned_partitions 2",
                "cairn_archive_lag_records 100",
                "cairn_archive_lag_unknown_partitions 1",
                "cairn_commit_lag_records 200",
                "cairn_commit_lag_unknown_partitions 1",
                "cairn_partition_durable_offset{topic=\"t\",partition=\"0\"} 900",
                "cairn_partition_durable_offset{topic=\"t\",partition=\"1\"} 500",
                "cairn_partition_committed_offset{topic=\"t\",partition=\"0\"} 800",
                "cairn_partition_log_end_offset{topic=\"t\",partition=\"0\"} 1000",
                "cairn_partition_archive_lag_records{topic=\"t\",partition=\"0\"} 100",
                "cairn_partition_commit_lag_records{topic=\"t\",partition=\"0\"} 200",
            ]
        );
        // Every sample's family is declared once, before it.
        let mut declared = std::collections::BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                assert!(
                    declared.insert(rest.split(' ').next().unwrap().to_owned()),
                    "{line}"
                );
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(declared.contains(name), "{line}");
            }
        }
        // No partition known: no totals, no per-partition families.
        let mut none = progress();
        none.partitions.clear();
        let text = render(&none, 1, 0.0);
        assert!(
            !text.contains("\ncairn_archive_lag_records ")
                && !text.contains("\ncairn_commit_lag_records ")
                && !text.contains("cairn_partition_"),
            "{text}"
        );
        assert!(text.contains("cairn_assigned_partitions 0"), "{text}");
        assert!(
            text.contains("cairn_archive_lag_unknown_partitions 0\n"),
            "{text}"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(label("t.x-1_2"), "t.x-1_2");
    }

    /// Served over HTTP: the last report's text at `/metrics`, 404
    /// elsewhere, and an address in use refused with what to do.
    #[test]
    fn the_endpoint_serves_the_last_report() {
        use std::io::{Read, Write};
        let server = MetricsServer::start("127.0.0.1:0").unwrap();
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
            write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            let mut reply = String::new();
            s.read_to_string(&mut reply).unwrap();
            reply
        };
        let before = get("/metrics");
        assert!(
            before.starts_with("HTTP/1.0 200") || before.starts_with("HTTP/1.1 200"),
            "{before}"
        );
        assert!(before.contains("text/plain; version=0.0.4"), "{before}");
        assert!(
            before.contains("cairn_progress_reports_total 0"),
            "{before}"
        );
        let mut observe = server.observer();
        observe(&progress());
        observe(&progress());
        let after = get("/metrics");
        assert!(
            after.contains("cairn_records_written_total 1500"),
            "{after}"
        );
        assert!(after.contains("cairn_progress_reports_total 2"), "{after}");
        assert!(get("/").contains(" 404 "));
        let e = MetricsServer::start(&server.addr)
            .err()
            .expect("in use")
            .to_string();
        assert!(
            e.contains(&format!(
                "--metrics-addr {}: cannot listen there",
                server.addr
            )),
            "{e}"
        );
        drop(server);
    }

    /// A scraper that asks and never reads a reply larger than the
    /// socket's buffers holds up neither another scrape nor the server's
    /// end (the run's stop joins it).
    #[test]
    fn a_scraper_that_does_not_read_holds_nothing_up() {
        use std::io::{Read, Write};
        let server = MetricsServer::start("127.0.0.1:0").unwrap();
        let mut many = progress();
        many.partitions = (0..20_000)
            .map(|p| PartitionProgress {
                tp: TopicPartition::new("a-topic-with-a-long-name", p),
                log_end: Some(1_000_000),
                durable: Some(999_999),
                committed: Some(999_998),
                archive_lag: Some(1),
            })
            .collect();
        (server.observer())(&many);
        let mut stuck = std::net::TcpStream::connect(&server.addr).unwrap();
        write!(stuck, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        assert!(reply.len() > 4 << 20, "{}", reply.len());
        // One connection pipelining requests it never reads the replies
        // of: answered once, then closed; the next scrape is answered.
        let mut pipelining = std::net::TcpStream::connect(&server.addr).unwrap();
        for _ in 0..40 {
            write!(pipelining, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        }
        let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = Vec::new();
        s.read_to_end(&mut reply).unwrap();
        assert!(reply.starts_with(b"HTTP/1.1 200 OK\r\n"));
        drop(server);
        drop((stuck, pipelining));
    }

    /// Connections past the bound get a 503 at once (clients that send
    /// nothing hold theirs until the read timeout); a request larger than
    /// the bound gets a 431; a method other than GET and HEAD a 405 that
    /// says which are allowed; HEAD the head alone.
    #[test]
    fn the_endpoint_bounds_what_clients_take() {
        use std::io::{Read, Write};
        let server = MetricsServer::start("127.0.0.1:0").unwrap();
        let ask = |request: &[u8]| {
            let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
            s.write_all(request).unwrap();
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            reply
        };
        let post = ask(b"POST /metrics HTTP/1.1\r\n\r\n");
        assert!(
            post.starts_with("HTTP/1.1 405 ") && post.contains("Allow: GET, HEAD\r\n"),
            "{post}"
        );
        let head = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200 ") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let query = ask(b"GET /metrics?x=1 HTTP/1.1\r\n\r\n");
        assert!(query.contains("cairn_build_info"), "{query}");
        let huge = ask(&vec![b'a'; 12 << 10]);
        assert!(huge.starts_with("HTTP/1.1 431 "), "{huge}");
        let idle: Vec<_> = (0..CONNECTIONS_MAX)
            .map(|_| std::net::TcpStream::connect(&server.addr).unwrap())
            .collect();
        // Once the replies above have let go of their places (each after
        // its client has read it, so one may still hold its place), every
        // place is an idle connection's: a scrape is refused.
        let busy = (0..20)
            .map(|_| ask(b"GET /metrics HTTP/1.1\r\n\r\n"))
            .find(|r| !r.starts_with("HTTP/1.1 200 "))
            .expect("never refused");
        assert!(busy.starts_with("HTTP/1.1 503 "), "{busy}");
        drop(idle);
        drop(server);
    }

    /// A request has one deadline, not a timeout per read: a client that
    /// sends a byte at a time, each well within the timeout, is cut off
    /// once the whole request's time is up (it had kept its place for up
    /// to 8 KiB of timeouts).
    #[test]
    fn a_client_sending_a_byte_at_a_time_is_cut_off() {
        use std::io::{Read, Write};
        let timeout = Duration::from_millis(300);
        let server = MetricsServer::start_with("127.0.0.1:0", timeout).unwrap();
        let mut slow = std::net::TcpStream::connect(&server.addr).unwrap();
        let started = Instant::now();
        let mut cut_off = false;
        // Paced as such a client is: a byte every 30 ms, a tenth of the
        // timeout, for up to 2,000 bytes (a minute), never a whole request.
        for _ in 0..2_000 {
            if slow.write_all(b"G").is_err() {
                cut_off = true;
                break;
            }
            slow.set_read_timeout(Some(Duration::from_millis(30)))
                .unwrap();
            // The end of the stream is the server's close; a timed-out
            // read, a connection still open.
            if matches!(slow.read(&mut [0u8; 1]), Ok(0)) {
                cut_off = true;
                break;
            }
        }
        assert!(cut_off, "still open after {:?}", started.elapsed());
        drop(server);
    }
}

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
//! # Invariants
//! - A series is only ever a figure the run knows: an offset, lag or
//!   latency not known yet (no statistics yet, nothing committed, no commit
//!   in the interval) is left out, never given as 0, which would read as
//!   caught up.
//! - Counters (`_total`) only grow over the run: they are the run's own
//!   totals since its start, which a restart begins again at 0 (Prometheus'
//!   `rate` takes that as a reset).
//! - The endpoint serves reads only, and is bound before anything is
//!   consumed: an address it cannot listen on stops the start, with
//!   nothing fetched or committed.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::error::{ConnectorError, Result};
use crate::progress::Progress;

/// The media type of the text exposition format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics endpoint of a run: a thread answering HTTP requests with the
/// text of the last progress report.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    text: Arc<Mutex<String>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where it listens (the port chosen, for `:0`): logged, and read by
    /// the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    pub addr: String,
}

impl MetricsServer {
    /// Listen on `addr` (`host:port`), serving `/metrics`.
    pub fn start(addr: &str) -> Result<MetricsServer> {
        let server = tiny_http::Server::http(addr).map_err(|e| {
            ConnectorError::Config(format!(
                "--metrics-addr {addr}: cannot listen there ({e}): give a free host:port, such as 127.0.0.1:9464 (nothing was fetched or committed)"
            ))
        })?;
        let bound = match server.server_addr() {
            tiny_http::ListenAddr::IP(a) => a.to_string(),
            #[allow(unreachable_patterns)]
            _ => addr.to_owned(),
        };
        let server = Arc::new(server);
        let text = Arc::new(Mutex::new(render_before_report()));
        let (serving, served) = (server.clone(), text.clone());
        let thread = std::thread::Builder::new()
            .name("cairn-metrics".into())
            .spawn(move || serve(&serving, &served))
            .map_err(|e| ConnectorError::Failed(format!("the metrics thread: {e}")))?;
        tracing::info!(addr = %bound, "serving metrics at http://{bound}/metrics");
        Ok(MetricsServer {
            server,
            text,
            thread: Some(thread),
            addr: bound,
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

/// The loop is joined, not the replies: a reply a scraper does not read
/// is left to the process's exit.
impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Replies being sent at once, at most: past it, a request gets a short
/// 503 at once.
const RESPONDERS_MAX: usize = 8;

/// Answer each request until the server is unblocked. Each reply is sent
/// on a thread of its own: a scraper that reads slowly, or not at all (a
/// reply of many partitions' series fills the socket's buffer), holds up
/// neither the other scrapes nor the run's stop, which joins only this
/// loop. A reply that cannot be sent (the scraper went away) is the
/// scraper's loss, not the run's.
fn serve(server: &tiny_http::Server, text: &Mutex<String>) {
    let responding = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or_default();
        let response = match (request.method(), path) {
            (tiny_http::Method::Get | tiny_http::Method::Head, "/metrics") => {
                let body = text.lock().unwrap_or_else(|e| e.into_inner()).clone();
                tiny_http::Response::from_string(body).with_header(header(CONTENT_TYPE))
            }
            (tiny_http::Method::Get | tiny_http::Method::Head, _) => {
                tiny_http::Response::from_string("cairn serves /metrics only\n")
                    .with_status_code(404)
                    .with_header(header("text/plain; charset=utf-8"))
            }
            _ => tiny_http::Response::from_string("GET /metrics\n")
                .with_status_code(405)
                .with_header(header("text/plain; charset=utf-8")),
        };
        use std::sync::atomic::Ordering::SeqCst;
        if responding.fetch_add(1, SeqCst) >= RESPONDERS_MAX {
            responding.fetch_sub(1, SeqCst);
            // A few bytes: they fit the socket's buffer, read or not.
            let busy = tiny_http::Response::from_string("busy: too many scrapes at once\n")
                .with_status_code(503)
                .with_header(header("text/plain; charset=utf-8"));
            let _ = request.respond(busy);
            continue;
        }
        let done = responding.clone();
        let sent = std::thread::Builder::new()
            .name("cairn-metrics-reply".into())
            .spawn(move || {
                let _ = request.respond(response);
                done.fetch_sub(1, SeqCst);
            });
        if sent.is_err() {
            responding.fetch_sub(1, SeqCst);
        }
    }
}

fn header(content_type: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a valid header")
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
    family(
        &mut out,
        "cairn_progress_reports_total",
        "counter",
        "Progress reports taken since the run started (the figures below are the last one's).",
    );
    out.push_str("cairn_progress_reports_total 0\n");
    out
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
    family(
        &mut out,
        "cairn_progress_reports_total",
        "counter",
        "Progress reports taken since the run started (the figures below are the last one's).",
    );
    let _ = writeln!(out, "cairn_progress_reports_total {reports}");
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
    // Totals only when some partition's figure is known (progress.rs).
    for (name, help, lag) in [
        (
            "cairn_archive_lag_records",
            "Records Kafka holds that the archive has not made durable, summed over the assigned partitions whose log end is known.",
            p.archive_lag(),
        ),
        (
            "cairn_commit_lag_records",
            "Records Kafka holds past the group's committed offsets, summed over the assigned partitions where both are known.",
            p.commit_lag(),
        ),
    ] {
        if lag.unknown_partitions < p.partitions.len() {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {}", lag.records);
        }
    }
    let per_partition: [(&str, &str, PartitionFigure); 5] = [
        (
            "cairn_partition_durable_offset",
            "The next offset the archive holds durably, per assigned partition.",
            |q| q.durable,
        ),
        (
            "cairn_partition_committed_offset",
            "The offset this run last committed to Kafka, per assigned partition (never past the durable one).",
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
                "cairn_commit_lag_records 200",
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
            !text.contains("lag_records") && !text.contains("cairn_partition_"),
            "{text}"
        );
        assert!(text.contains("cairn_assigned_partitions 0"), "{text}");
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
        drop(server);
        drop(stuck);
    }
}

//! The table on stdout, the JSON file, and the SVG latency CDF.

use std::path::Path;
use std::process::Command;

use hdrhistogram::Histogram;
use plotters::prelude::*;

use super::{summary, Latency, Peer, Report, Round, Throughput};

pub fn date_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// The source tree's revision, `-dirty` when it has changes git sees:
/// what the figures were measured at.
pub fn source_revision() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let rev = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !rev.is_empty()).then_some(rev)
}

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {kernel}")
}

fn row(name: &str, t: Option<&Throughput>, l: Option<&Latency>, extra: &str) {
    let (rps, mbs) = t.map_or(("-".into(), "-".into()), |t| {
        (
            format!("{:.0}", t.records_per_s),
            format!("{:.1}", t.mb_per_s),
        )
    });
    let [p50, p90, p99, p999, max] = l.map_or(std::array::from_fn(|_| "-".to_string()), |l| {
        // A quantile of too few samples is just the largest ones.
        let shown =
            |v: Option<u64>| v.map_or_else(|| format!("n/a({})", l.samples), |v| v.to_string());
        [
            shown(l.p50()),
            shown(l.p90()),
            shown(l.p99()),
            shown(l.p999()),
            l.max_us.to_string(),
        ]
    });
    println!(
        "{name:<34} {rps:>11} {mbs:>8} {p50:>9} {p90:>9} {p99:>9} {p999:>9} {max:>9}  {extra}"
    );
}

fn cpu_text(c: &super::measure::Cpu) -> String {
    format!(
        "CPU {:.2} us/record{}, {:.2} cores busy",
        c.own_us_per_record,
        c.broker_us_per_record
            .map_or(String::new(), |b| format!(" + {b:.2} in the mock broker")),
        c.cores_busy
    )
}

pub fn table(r: &Report) {
    println!("put-to-commit, {} ({})", r.date_utc, r.machine);
    println!("broker: {}", r.brokers);
    println!(
        "disk: sequential writes of {} MiB + fdatasync, {:.0} MB/s (before the cases; each round measures its own)",
        r.disk_bandwidth.records,
        r.disk_bandwidth.mb_per_s
    );
    for c in &r.cases {
        println!();
        println!(
            "{} records of {} B over {} partitions{}",
            c.records,
            c.record_bytes,
            c.partitions,
            c.note.as_ref().map_or(String::new(), |n| format!(" ({n})"))
        );
        for round in &c.rounds {
            round_table(round, c.rounds.len());
        }
        for f in &c.footprints {
            match f {
                Peer::Ran(f) => println!(
                    "{:<34} peak RSS {:.0} MiB archiving every record in a process of its own ({}; {}); store {:.2}x the payload",
                    "footprint",
                    mib(f.peak_rss_bytes),
                    f.policy,
                    c.target(&f.policy, "peak_rss"),
                    f.space_amplification
                ),
                Peer::Skipped { .. } | Peer::Failed { .. } => println!(
                    "{:<34} {}",
                    "footprint",
                    f.why_not().unwrap_or_default()
                ),
            }
        }
        medians_table(c);
    }
}

/// One round: every run's row, then what each cairn run cost.
fn round_table(c: &Round, rounds: usize) {
    println!();
    println!(
        "round {}/{rounds}, in this order: {}",
        c.round,
        c.order.join(", ")
    );
    println!(
        "{:<34} {:>11} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "records/s", "MB/s", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us"
    );
    for run in &c.cairn {
        row(
            &format!("cairn {}", run.policy),
            Some(&run.throughput),
            Some(&run.put_to_commit),
            &format!(
                "{} / {} floor p50/p99, {:.0}% of ceiling, {:.0} fsyncs/s, {} puts",
                run.p50_vs_floor
                    .map_or("n/a".to_owned(), |r| format!("{r:.2}x")),
                run.p99_vs_floor
                    .map_or("n/a".to_owned(), |r| format!("{r:.2}x")),
                run.pct_of_ceiling,
                run.fsyncs_per_s,
                run.put_to_commit.samples
            ),
        );
    }
    // Every consumer's steady window, by one rule (`Steady`): what the
    // throughput targets are judged on.
    let mut steady = Vec::new();
    for run in &c.cairn {
        steady.push((format!("cairn {}", run.policy), Some(&run.throughput)));
    }
    steady.push(("ceiling".to_owned(), Some(&c.ceiling)));
    steady.push(("kcat".to_owned(), c.kcat.ran().map(|k| &k.throughput)));
    steady.push((
        "python loop".to_owned(),
        c.python.ran().map(|p| &p.throughput),
    ));
    for (name, t) in steady {
        let Some(t) = t else { continue };
        let text = t.steady.map_or_else(
            || "none: no window spans 70 % of its records at 8 points of its progress".to_owned(),
            |s| {
                format!(
                    "{:.0} records/s, {} records in {:.3} s, {} points of its progress",
                    s.records_per_s, s.records, s.seconds, s.points
                )
            },
        );
        println!(
            "{:<34} steady (from {:.0}% of its records done to {:.0}%): {text}",
            format!("  {name}"),
            100.0 * super::STEADY_FROM,
            100.0 * super::STEADY_TO
        );
    }
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    for run in &c.cairn {
        println!(
                "{:<34} store {:.1} MiB on disk ({:.1} MiB allocated) = {:.2}x the payload; {:.0}% of the disk's sequential bandwidth",
                format!("  cairn {}", run.policy),
                mib(run.disk_bytes),
                mib(run.disk_bytes_allocated),
                run.space_amplification,
                run.pct_of_disk_bandwidth,
            );
    }
    for run in &c.cairn {
        if let Some(cpu) = &run.cpu {
            let both = if cpu.broker_us_per_record.is_some() {
                " (broker included in both)"
            } else {
                ""
            };
            println!(
                    "{:<34} {}{}",
                    format!("  cairn {}", run.policy),
                    cpu_text(cpu),
                    run.ceiling_cpu_ratio.map_or(String::new(), |r| format!(
                        "; the ceiling's CPU per record is {r:.2}x this run's{both}: the share of its records/s a CPU-bound run gets"
                    ))
                );
        }
    }
    row(
        "floor: fdatasync + commit",
        None,
        Some(&c.floor.sum),
        &format!(
            "write + fdatasync of {} B p50 {} us (the write alone {} us), commit p50 {} us",
            c.floor.put_bytes,
            c.floor.fdatasync.p50_us,
            c.floor.write.p50_us,
            c.floor.commit.p50_us
        ),
    );
    row(
        "ceiling: consume only",
        Some(&c.ceiling),
        None,
        &c.ceiling_cpu.as_ref().map_or(String::new(), cpu_text),
    );
    row(
        "disk: sequential writes",
        None,
        None,
        &format!(
            "{} MiB + fdatasync, {:.0} MB/s: this round's baseline for % of the disk's bandwidth",
            c.disk_bandwidth.records, c.disk_bandwidth.mb_per_s
        ),
    );
    match &c.kcat {
        Peer::Ran(k) => row(
            "kcat -C -c N > file (no fsync)",
            Some(&k.throughput),
            None,
            &k.version,
        ),
        Peer::Skipped { .. } | Peer::Failed { .. } => {
            row("kcat", None, None, &c.kcat.why_not().unwrap_or_default())
        }
    }
    match &c.python {
        Peer::Ran(p) => row(
            &format!("python loop, batch {}", p.batch),
            Some(&p.throughput),
            Some(&p.write_to_commit),
            &format!("write + fdatasync + sync commit; {}", p.version),
        ),
        Peer::Skipped { .. } | Peer::Failed { .. } => row(
            "python loop",
            None,
            None,
            &c.python.why_not().unwrap_or_default(),
        ),
    }
}

/// Each ratio by round, and its median and range over the rounds.
fn medians_table(c: &super::CaseResult) {
    println!();
    println!(
        "ratios to the baselines of the same round; the median over the rounds that had each ({} here, unless the range says fewer) is what the targets are judged on (a steady ratio only where every round had it)",
        c.rounds.len()
    );
    let mut header = format!("{:<36}", "");
    for round in &c.rounds {
        header += &format!(" {:>9}", format!("round {}", round.round));
    }
    println!("{header} {:>9} {:>17}  target", "median", "range");
    let show = |v: f64, percent: bool| {
        if percent {
            format!("{v:.0}%")
        } else {
            format!("{v:.2}x")
        }
    };
    for m in &c.medians {
        for metric in &summary::METRICS {
            let target = c.target(&m.policy, metric.name);
            let Some(spread) = m.ratios.get(metric.name) else {
                // A target no round could judge is said, not left out
                // (until 2026-12-05 its row was missing).
                if !target.is_empty() {
                    println!("{:<36} {target}", format!("{} {}", m.policy, metric.name));
                }
                continue;
            };
            let mut line = format!("{:<36}", format!("{} {}", m.policy, metric.name));
            for round in &c.rounds {
                let v = round
                    .ratios
                    .iter()
                    .find(|r| r.policy == m.policy)
                    .and_then(metric.get);
                line += &format!(
                    " {:>9}",
                    v.map_or("-".to_owned(), |v| show(v, metric.percent))
                );
            }
            let fewer = if spread.rounds < c.rounds.len() {
                format!(" ({} rounds)", spread.rounds)
            } else {
                String::new()
            };
            println!(
                "{line} {:>9} {:>17}  {target}{fewer}",
                show(spread.median, metric.percent),
                format!(
                    "{}-{}",
                    show(spread.min, metric.percent),
                    show(spread.max, metric.percent)
                ),
            );
        }
    }
}

/// Bytes in MiB.
pub fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

pub fn json(r: &Report, path: &Path) -> Result<(), String> {
    let s = serde_json::to_string_pretty(r).map_err(|e| e.to_string())?;
    std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

fn cdf(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    (0..=1000)
        .map(|i| {
            let q = i as f64 / 1000.0;
            (h.value_at_quantile(q).max(1) as f64, q)
        })
        .collect()
}

/// One panel per record size: the CDF of put-to-commit latency for each
/// commit policy, the floor, and the Python loop, on a log axis.
pub fn svg(r: &Report, path: &Path) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("svg: {e}");
    let n = r.cases.len().max(1);
    let root = SVGBackend::new(path, (960, 380 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((n, 1));
    for (area, c) in panels.iter().zip(&r.cases) {
        let mut series: Vec<(String, &Histogram<u64>, RGBColor)> = Vec::new();
        let colors = [RGBColor(200, 30, 30), RGBColor(230, 140, 20)];
        for (i, (name, h)) in c.histograms.cairn.iter().enumerate() {
            series.push((format!("cairn {name}"), h, colors[i % colors.len()]));
        }
        if let Some(h) = &c.histograms.floor {
            series.push(("floor: fdatasync + commit".into(), h, RGBColor(30, 30, 30)));
        }
        if let Some(h) = &c.histograms.python {
            series.push((
                "python loop (write + fsync + commit)".into(),
                h,
                RGBColor(40, 90, 200),
            ));
        }
        let max = series
            .iter()
            .map(|(_, h, _)| h.value_at_quantile(0.999))
            .max()
            .unwrap_or(10)
            .max(10) as f64
            * 1.5;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "put-to-commit latency CDF: {} records of {} B, {} partitions, {} rounds pooled",
                    c.records, c.record_bytes, c.partitions, c.rounds.len()
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((10f64..max).log_scale(), 0f64..1f64)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("microseconds (log scale)")
            .y_desc("fraction of puts")
            .draw()
            .map_err(|e| err(&e))?;
        for (name, h, color) in series {
            chart
                .draw_series(LineSeries::new(cdf(h), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

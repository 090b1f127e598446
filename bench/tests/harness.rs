//! The put-to-commit harness end to end, small: it starts its mock broker,
//! measures cairn, the floor and the ceiling, and writes the table, the JSON
//! and the SVG. Peers are skipped so the test needs neither kcat nor Python.

use std::process::Command;

#[test]
fn put_to_commit_harness_runs_and_reports() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args([
            "put-to-commit",
            "--records",
            "3000",
            "--record-bytes",
            "100",
        ])
        .args(["--partitions", "4", "--policies", "every-put,interval:50"])
        .args([
            "--batch-records-max",
            "100",
            "--floor-samples",
            "50",
            "--no-peers",
            "--rounds",
            "2",
        ])
        // A small disk probe: the default's 256 MiB, four times over, is
        // most of what this test would write.
        .args(["--disk-probe-mib", "8"])
        // A real broker when the tests are given one; else the harness
        // starts its own mock.
        .args(
            std::env::var("CAIRN_TEST_BROKERS")
                .map(|b| vec!["--brokers".to_owned(), b])
                .unwrap_or_default(),
        )
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("cairn every-put"), "{stdout}");
    assert!(stdout.contains("ceiling: consume only"), "{stdout}");
    // Every percentile the JSON has is in the table too.
    for column in ["p50 us", "p90 us", "p99 us", "p99.9 us", "max us"] {
        assert!(stdout.contains(column), "no {column} column: {stdout}");
    }
    // Each round in its own order: the second rotated from the first.
    assert!(
        stdout.contains(
            "round 1/2, in this order: ceiling, cairn every-put, cairn interval:50, floor, disk"
        ) && stdout.contains(
            "round 2/2, in this order: cairn every-put, cairn interval:50, floor, disk, ceiling"
        ),
        "{stdout}"
    );
    let every_put = stdout
        .lines()
        .find(|l| l.starts_with("cairn every-put"))
        .unwrap();
    let fields: Vec<&str> = every_put.split_whitespace().skip(2).take(7).collect();
    // records/s, MB/s, then p50 <= p90 <= p99 <= p99.9 <= max; a
    // quantile of too few puts (about 30 here: 10 beyond it are needed) is
    // printed as n/a(puts), not as the largest samples under another name.
    let puts: u64 = every_put
        .rsplit(", ")
        .next()
        .and_then(|s| s.strip_suffix(" puts"))
        .unwrap()
        .parse()
        .unwrap();
    // At least 30 puts of at most 100 records, at most one a record
    // (how full puts are depends on timing).
    assert!((30..=3000).contains(&puts), "{every_put}");
    assert_eq!(fields[3].starts_with("n/a("), puts < 100, "{every_put}");
    assert_eq!(fields[4].starts_with("n/a("), puts < 1000, "{every_put}");
    assert!(fields[5].starts_with("n/a("), "{every_put}");
    let numbers: Vec<u64> = [fields[2], fields[6]]
        .iter()
        .map(|f| f.parse::<f64>().unwrap() as u64)
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] <= w[1]), "{every_put}");
    assert!(every_put.contains(" puts"), "{every_put}");

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("put_to_commit.json")).unwrap())
            .unwrap();
    let case = &json["cases"][0];
    assert_eq!(case["records"], 3000);
    let rounds = case["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    for round in rounds {
        assert_round(round);
    }
    // Each ratio's median and range over the rounds, in the JSON and in
    // the table.
    let medians = case["medians"].as_array().unwrap();
    assert_eq!(medians.len(), 2, "{medians:?}");
    for (m, policy) in medians.iter().zip(["every-put", "interval:50"]) {
        assert_eq!(m["policy"], policy, "{m}");
        let spread = &m["p50_vs_floor"];
        assert_eq!(spread["rounds"], 2, "{m}");
        let [min, median, max] = ["min", "median", "max"].map(|k| spread[k].as_f64().unwrap());
        assert!(0.0 < min && min <= median && median <= max, "{m}");
        // Peers were skipped: no ratio to them.
        assert!(m.get("vs_kcat").is_none(), "{m}");
    }
    assert!(
        stdout.contains("every-put p50_vs_floor") && stdout.contains("median"),
        "{stdout}"
    );
    // The targets as the table judges them, in the JSON too.
    let judged = case["targets"]["every-put p50_vs_floor"].as_str().unwrap();
    assert!(
        judged.contains(": met") || judged.contains(": MISSED"),
        "{judged}"
    );
    assert!(stdout.contains(judged), "{judged}: {stdout}");
    assert!(case["targets"]["every-put peak_rss"].is_string(), "{case}");
    // The footprint: each policy archiving the case in a process of its own.
    let footprints = case["footprints"].as_array().unwrap();
    assert_eq!(footprints.len(), 2, "{footprints:?}");
    for (f, policy) in footprints.iter().zip(["every-put", "interval:50"]) {
        assert_eq!(f["policy"], policy, "{f}");
        assert!(f["peak_rss_bytes"].as_u64().unwrap() > 1 << 20, "{f}");
        assert_eq!(f["payload_bytes"], 300_000);
    }
    assert!(stdout.contains("peak RSS"), "{stdout}");
    assert!(json["disk_bandwidth"]["mb_per_s"].as_f64().unwrap() > 0.0);
    // The source measured: what git says of this tree (a clone has it;
    // null where git cannot tell).
    let described = std::process::Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_owned());
    assert_eq!(
        json["source"].as_str(),
        described.as_deref(),
        "{}",
        json["source"]
    );
    let svg = std::fs::read_to_string(out.path().join("put_to_commit_cdf.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("cairn every-put"));
}

/// One round's runs and baselines in the JSON.
fn assert_round(round: &serde_json::Value) {
    let runs = round["cairn"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["throughput"]["records"], 3000);
        assert!(r["put_to_commit"]["samples"].as_u64().unwrap() > 0);
        assert!(r["p50_vs_floor"].as_f64().unwrap() > 0.0);
        assert!(r["fsyncs"].as_u64().unwrap() > 0);
        // The store holds at least the payload, and the ratio says so.
        assert!(r["disk_bytes"].as_u64().unwrap() >= 300_000);
        assert!(r["space_amplification"].as_f64().unwrap() >= 1.0);
        // Against this round's own disk measurement.
        let disk = round["disk_bandwidth"]["mb_per_s"].as_f64().unwrap();
        assert!(disk > 0.0, "{round}");
        let pct = r["pct_of_disk_bandwidth"].as_f64().unwrap();
        let want = 100.0 * r["throughput"]["mb_per_s"].as_f64().unwrap() / disk;
        assert!(
            pct > 0.0 && (pct - want).abs() <= 1e-6 * want,
            "{pct} {want}"
        );
        // CPU per record: reported, or `null` for a run this short.
        assert!(r.get("cpu").is_some(), "{r}");
        let cpu = &r["cpu"];
        assert!(
            cpu.is_null() || cpu["own_us_per_record"].as_f64().unwrap() > 0.0,
            "{cpu}"
        );
        assert!(r.get("ceiling_cpu_ratio").is_some(), "{r}");
        // The steady window, by syncs (records durable): under every-put
        // one a put (about 30 of at most 100 records: enough points),
        // inside the records, at least seven tenths of them, at least 8
        // points. Under interval:100, one sync an interval: a window only
        // where that gives as many points, by the same rule.
        let s = &r["throughput"]["steady"];
        if r["policy"] == "every-put" || !s.is_null() {
            let n = s["records"]
                .as_u64()
                .unwrap_or_else(|| panic!("no steady window: {r}"));
            assert!((2100..=2400).contains(&n), "{s}");
            assert!(s["points"].as_u64().unwrap() >= 8, "{s}");
            assert!(s["records_per_s"].as_f64().unwrap() > 0.0, "{s}");
        }
    }
    for r in round["ratios"].as_array().unwrap() {
        for key in [
            "steady_pct_of_ceiling",
            "steady_vs_kcat",
            "steady_vs_python",
        ] {
            assert!(r.get(key).is_some(), "{key}: {r}");
        }
        // Peers were skipped: no ratio to them.
        assert!(r["steady_vs_kcat"].is_null(), "{r}");
    }
    assert_eq!(round["ratios"].as_array().unwrap().len(), 2, "{round}");
    assert!(round["floor"]["sum"]["p50_us"].as_u64().unwrap() > 0);
    // The write alone is part of the floor's first term, never more.
    let f = &round["floor"];
    assert!(
        f["write"]["p50_us"].as_u64().unwrap() <= f["fdatasync"]["p50_us"].as_u64().unwrap(),
        "{f}"
    );
    assert!(round["ceiling"]["records_per_s"].as_f64().unwrap() > 0.0);
    assert!(round.get("ceiling_cpu").is_some(), "{round}");
    // The ceiling commits as described, however short its run: at least
    // the one after its last record.
    assert!(round["ceiling_commits"].as_u64().unwrap() >= 1, "{round}");
    // The floor's sum is its parts added at each percentile (by rank),
    // within the histograms' precision.
    for q in ["p50_us", "p99_us"] {
        if let (Some(sum), Some(a), Some(b)) = (
            f["sum"][q].as_u64(),
            f["fdatasync"][q].as_u64(),
            f["commit"][q].as_u64(),
        ) {
            assert!(sum.abs_diff(a + b) * 200 <= a + b, "{q}: {f}");
        }
    }
    assert!(round["kcat"]["skipped"].is_string());
    let order: Vec<&str> = round["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(order.contains(&"disk"), "{order:?}");
}

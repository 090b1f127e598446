//! `cairn mock-broker`: librdkafka's in-process mock cluster, for users
//! without Kafka, and for the tests and benches.

use std::io::Write;
use std::process::ExitCode;

use rdkafka::mocking::MockCluster;

use crate::error::{ConnectorError, Result};

#[derive(Debug, clap::Args)]
pub struct MockBrokerArgs {
    /// How many mock brokers to start, 1 to 16 (a count, not an address:
    /// the addresses are printed).
    #[arg(long, default_value_t = 1, value_parser = brokers, allow_negative_numbers = true)]
    pub brokers: i32,
    /// Topic to create, as name:partitions, partitions 1 to 10000
    /// (repeatable).
    #[arg(long = "topic", value_parser = parse_topic)]
    pub topics: Vec<(String, i32)>,
    /// Delay every broker's every answer by this many milliseconds
    /// (0 to 60000), to see how cairn fares with a distant Kafka.
    #[arg(long, default_value_t = 0, value_parser = round_trip_ms, allow_negative_numbers = true)]
    pub round_trip_ms: u64,
}

/// Said in the flags' words, as every integer flag's (`config::whole`).
fn brokers(s: &str) -> std::result::Result<i32, String> {
    crate::config::whole_in(s, 1..=16)
}

fn round_trip_ms(s: &str) -> std::result::Result<u64, String> {
    crate::config::whole_in(s, 0..=60_000)
}

fn parse_topic(s: &str) -> std::result::Result<(String, i32), String> {
    let (name, n) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?}: expected name:partitions"))?;
    cairn_engine::validate_topic(name).map_err(|e| e.to_string())?;
    let n: i32 =
        crate::config::whole_in(n, 1..=10_000).map_err(|e| format!("{s:?}: partitions: {e}"))?;
    Ok((name.to_owned(), n))
}

pub async fn run(args: MockBrokerArgs) -> Result<ExitCode> {
    let cluster =
        MockCluster::new(args.brokers).map_err(ConnectorError::kafka("start mock cluster"))?;
    if args.round_trip_ms > 0 {
        for broker in 1..=args.brokers {
            cluster
                .broker_round_trip_time(
                    broker,
                    std::time::Duration::from_millis(args.round_trip_ms),
                )
                .map_err(ConnectorError::kafka("set a broker's round trip time"))?;
        }
    }
    for (name, partitions) in &args.topics {
        cluster
            .create_topic(name, *partitions, 1)
            .map_err(ConnectorError::kafka("create topic"))?;
    }
    // Before the contract line: a script may send its signal as soon as
    // it has read it, and that signal must stop the cluster cleanly.
    let mut signals = super::run::Signals::for_command()?;
    // The first stdout line is the contract: tests and scripts read it.
    let mut out = std::io::stdout().lock();
    writeln!(out, "bootstrap.servers={}", cluster.bootstrap_servers()).ok();
    out.flush().ok();
    drop(out);
    tracing::info!(brokers = args.brokers, topics = ?args.topics, round_trip_ms = args.round_trip_ms, "mock cluster up; SIGINT or SIGTERM stops it");
    signals.recv().await;
    drop(cluster);
    Ok(ExitCode::SUCCESS)
}

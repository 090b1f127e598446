//! `cairn-bench`: the put-to-commit harness (`cairn-bench put-to-commit`)
//! and a helper that starts the mock cluster (`cairn-bench mock-broker`,
//! the same code as `cairn mock-broker`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod ptc;

#[derive(Debug, Parser)]
#[command(name = "cairn-bench", about = "cairn's benchmark harnesses")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Put-to-commit latency and throughput of cairn's real connector loop,
    /// beside the floor (fdatasync + commit round trip), the consume-only
    /// ceiling, kcat and a hand-written confluent-kafka loop, in one run.
    PutToCommit(ptc::Args),
    /// Archive a pre-produced topic in a process of its own and print its
    /// peak RSS (the harness's footprint measurement).
    #[command(hide = true)]
    Archive(ptc::measure::ArchiveArgs),
    /// librdkafka's mock cluster in this process until SIGINT/SIGTERM.
    #[command(hide = true)]
    MockBroker(cairn_connector::cli::mock_broker::MockBrokerArgs),
}

fn main() -> ExitCode {
    // Before any other thread starts (see the module's docs).
    cairn_connector::allocator::tune();
    let cli = Cli::parse();
    // rdkafka's BaseConsumer logs an expected ERROR when dropped after a
    // clean close (see connector/src/main.rs): not worth a line per run.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "warn,librdkafka=error,rdkafka::consumer::base_consumer=off",
        )
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let result = match cli.command {
        Command::PutToCommit(args) => ptc::run(args),
        Command::Archive(args) => ptc::measure::archive_main(args),
        Command::MockBroker(args) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))
            .and_then(|rt| {
                rt.block_on(cairn_connector::cli::mock_broker::run(args))
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

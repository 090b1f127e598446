//! The `cairn` binary.

use std::process::ExitCode;

use cairn_connector::cli::{self, Cli, Command, LogFormat};
use clap::Parser;

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,librdkafka=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Run(a) => cli::run::run(a).await,
            Command::Demo(a) => cli::demo::run(a).await,
            Command::MockBroker(a) => cli::mock_broker::run(a).await,
            Command::Status(a) => cli::status::run(a).await,
            Command::Export(a) => cli::export::run(a).await,
            Command::Verify(a) => cli::verify::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

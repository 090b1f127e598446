//! The `cairn` binary.

use std::process::ExitCode;

use cairn_connector::cli::{self, Cli, Command, LogFormat};
use clap::Parser;

fn init_tracing(format: LogFormat, default_filter: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    // RUST_LOG set but empty (`RUST_LOG=` in a unit file, or commas only)
    // is taken as unset: tracing-subscriber reads it as no directives,
    // which turns off every line, errors included. One that does not parse
    // falls back to the default, and says so once logging is up.
    let mut unread = None;
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if v.split(',').any(|d| !d.trim().is_empty()) => {
            // Each directive trimmed: tracing-subscriber's parser refuses
            // `info, cairn_connector=debug` (and panicked on a space before
            // a name that starts with a multi-byte character), so the
            // operator's setting fell back to the default (until
            // 2026-12-06; found by an audit).
            let directives: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .collect();
            tracing_subscriber::EnvFilter::try_new(directives.join(",")).unwrap_or_else(|e| {
                unread = Some(format!("RUST_LOG={v:?} does not parse ({e})"));
                tracing_subscriber::EnvFilter::new(default_filter)
            })
        }
        Err(std::env::VarError::NotUnicode(_)) => {
            unread = Some("RUST_LOG is not UTF-8".to_owned());
            tracing_subscriber::EnvFilter::new(default_filter)
        }
        _ => tracing_subscriber::EnvFilter::new(default_filter),
    };
    // rdkafka's BaseConsumer closes its queue again on drop, after cairn has
    // already closed it cleanly (bounded, see consumer.rs), and logs the
    // expected failure at ERROR. It is the only error that module logs; an
    // operator should not see "ERROR" on every clean shutdown.
    let quiet = tracing_subscriber::filter::filter_fn(|m| {
        !(m.target() == "rdkafka::consumer::base_consumer" && *m.level() == tracing::Level::ERROR)
    });
    // Colours only on a terminal: in a file or the journal the escape
    // codes broke up `key=value` (a `grep final_commit_failed=true` found
    // nothing), and journalctl showed the lines as blobs (until
    // 2026-12-06: tracing-subscriber colours unless NO_COLOR is set).
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        );
    let layer = match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter).with_filter(quiet))
        .init();
    if let Some(why) = unread {
        tracing::warn!("{why}: logging at the default, {default_filter}");
    }
}

/// A crash point armed (`CAIRN_ABORT_AT`, torture tests and the demo's
/// crashing run) aborts on purpose: no core file for it. And the demo's
/// crashing `cairn run` (`run`) dies with the demo (the mock cluster it talks to
/// lives in the demo's process, so it would retry a dead broker for ever,
/// holding its archive's lock).
fn as_a_crashing_child(run: bool) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    if std::env::var_os("CAIRN_ABORT_AT").is_some() {
        let maximum = getrlimit(Resource::Core).maximum;
        let _ = setrlimit(
            Resource::Core,
            Rlimit {
                current: Some(0),
                maximum,
            },
        );
    }
    let demo_parent = std::env::var(cairn_connector::cli::demo::DEMO_PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let (true, Some(parent)) = (run, demo_parent) else {
        return;
    };
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    // The demo died before the line above: nothing would kill this.
    if rustix::process::Pid::as_raw(rustix::process::getppid()) != parent {
        cairn_connector::cli::stderr_line(&format_args!(
            "error: {} names pid {parent}, which is not this process's parent: the demo that started this run is gone (unset it to run cairn yourself)",
            cairn_connector::cli::demo::DEMO_PARENT_ENV
        ));
        std::process::exit(1);
    }
}

/// The line a command stops on, in the log's format: as text `error: …`;
/// as JSON one line shaped as the log's own (`timestamp`, `level`,
/// `fields`, `target`), written here rather than through tracing, so that
/// no `RUST_LOG` filter drops the line that says why the exit was not 0.
/// (Until the night of 2026-12-04 it was plain text in both formats.)
fn say_stopped(format: LogFormat, e: &dyn std::fmt::Display) {
    cli::set_log_format(format);
    cli::say_stopped(e);
}

/// clap's refusal of the command line, printed as clap prints it, with its
/// exit code (2 for a usage error; 0 for `--help` and `--version`), but:
/// - a command line that sets a credential is parsed again with the
///   credential's value, and any bare word after it, left out
///   ([`cli::shown_command_line`]), so that clap's quote of an unexpected
///   word cannot show part of a secret the shell split (an unquoted
///   `-X sasl.password=$PW`);
/// - under `--log-format json` a usage error is one JSON line, as every
///   other error the command stops on is (until 2026-12-05 clap's text).
///
/// (Seen in review, 2026-12-05.)
fn refused_command_line(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(e.exit_code() as u8);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let e = match cli::shown_command_line(&args) {
        Some(shown) => match Cli::try_parse_from(shown) {
            Err(shown_e) if shown_e.kind() == e.kind() => shown_e,
            // Parsed otherwise without the secret: say only what kind of
            // error it was.
            _ => clap::Error::raw(
                e.kind(),
                "the command line was refused (not quoted: it sets a credential); see --help\n",
            ),
        },
        None => e,
    };
    let json = args
        .windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json");
    if json {
        // clap's message without its usage lines, its lines joined: a
        // missing argument's names come on the lines after the first.
        let text = e.render().to_string();
        let said: Vec<&str> = text
            .lines()
            .map(str::trim)
            .take_while(|l| !l.starts_with("Usage:"))
            .filter(|l| !l.is_empty())
            .collect();
        say_stopped(
            LogFormat::Json,
            &said.join(" ").trim_start_matches("error: "),
        );
    } else {
        let _ = e.print();
    }
    ExitCode::from(e.exit_code() as u8)
}

fn main() -> ExitCode {
    // Before any other thread starts (see the module's docs).
    cairn_connector::allocator::tune();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return refused_command_line(e),
    };
    as_a_crashing_child(matches!(cli.command, Command::Run(_)));
    // The demo prints its own story; the pipeline's INFO lines would bury
    // it. Its crash is on purpose, and its "recovered" line says what the
    // reopen did about the crashed run's open mark: the engine's WARN for
    // that (poisoned.rs) would only come first and alarm.
    let default_filter = match cli.command {
        Command::Demo(_) => "warn,cairn_engine::poisoned=error",
        _ => "info,librdkafka=warn",
    };
    init_tracing(cli.log_format, default_filter);
    cli::set_log_format(cli.log_format);
    let log_format = cli.log_format;
    cli::install_panic_hook();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say_stopped(log_format, &format_args!("cannot start runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async move {
        match cli.command {
            Command::Run(a) => cli::run::run(*a).await,
            Command::Demo(a) => cli::demo::run(a).await,
            Command::MockBroker(a) => cli::mock_broker::run(a).await,
            Command::Status(a) => cli::status::run(a).await,
            Command::Export(a) => cli::export::run(a).await,
            Command::Verify(a) => cli::verify::run(a).await,
            Command::Restore(a) => cli::restore::run(a).await,
            Command::Prune(a) => cli::prune::run(a).await,
            Command::Backup(a) => cli::backup::run(a).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            say_stopped(log_format, &e);
            match e {
                // Interrupted, as asked: the shell's convention for SIGINT.
                cairn_connector::ConnectorError::StoppedWaiting { .. } => ExitCode::from(130),
                // Held by another command: nothing was done, and a retry
                // may pass, as for a request a running cairn refused as
                // busy (2). Until 2026-12-07 it was 1, which a monitor
                // reads as broken.
                cairn_connector::ConnectorError::ArchiveLocked { .. } => ExitCode::from(2),
                _ => ExitCode::from(1),
            }
        }
    }
}

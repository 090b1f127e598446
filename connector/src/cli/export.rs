//! `cairn export`: stream archived records out, losslessly.
//!
//! jsonl: one object per record, `{"topic","partition","offset","timestamp",
//! "timestamp_type","key","value","headers"}`; key and value are standard
//! padded base64 or null; headers are `[name, base64-or-null]` pairs.
//! raw: the values, newline-delimited, like `kcat -C`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cairn_engine::{Record, TimestampType, TopicPartition};
use serde::Serialize;

use crate::selection::Selection;

use crate::error::{ConnectorError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Jsonl,
    Raw,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub data: super::DataArg,
    #[command(flatten)]
    pub select: super::SelectArgs,
    #[arg(long, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,
    /// Write here instead of stdout.
    #[arg(long)]
    pub output: Option<PathBuf>,
}

#[derive(Serialize)]
struct Line<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    timestamp_type: &'static str,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<(&'a str, Option<String>)>,
}

fn b64(v: &Option<Vec<u8>>) -> Option<String> {
    v.as_ref().map(|b| STANDARD.encode(b))
}

fn line<'a>(tp: &'a TopicPartition, r: &'a Record) -> Line<'a> {
    Line {
        topic: &tp.topic,
        partition: tp.partition,
        offset: r.offset,
        timestamp: r.timestamp_ms,
        timestamp_type: match r.timestamp_type {
            TimestampType::NotAvailable => "none",
            TimestampType::CreateTime => "create",
            TimestampType::LogAppendTime => "log-append",
        },
        key: b64(&r.key),
        value: b64(&r.value),
        headers: r
            .headers
            .iter()
            .map(|h| (h.name.as_str(), b64(&h.value)))
            .collect(),
    }
}

pub async fn run(args: ExportArgs) -> Result<ExitCode> {
    let select = args.select.into_selection();
    select.check_range()?;
    let data = &args.data.data;
    let out_path = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("<stdout>"));
    let io_err = |source| ConnectorError::Io {
        path: out_path.clone(),
        source,
    };
    // The output file is created only once the export is known to start:
    // a refused export leaves an existing file as it was.
    let mut out = BufWriter::with_capacity(1 << 20, Output::new(args.output.clone()));
    if let Some(conn) = crate::live::connect(data) {
        let req = crate::live::Request::Export {
            selection: select,
            format: args.format,
        };
        let end = crate::live::request(conn, &req, &mut out)?;
        if end.error.is_none() {
            out.get_mut().create()?;
        }
        finish(out).map_err(io_err)?;
        if end.error.is_none() {
            tracing::info!("export done (served by the running cairn run)");
        }
        return Ok(crate::live::exit_code(&end));
    }
    let engine = super::open_archive(data)?;
    let chosen = select.choose(engine.partitions(), &[])?;
    out.get_mut().create()?;
    let count = write_records(&engine, &chosen, &select, args.format, &mut out, &out_path)?;
    finish(out).map_err(io_err)?;
    if let Some(records) = count {
        tracing::info!(records, "export done");
    }
    Ok(ExitCode::SUCCESS)
}

/// Flush what is buffered; a reader that went away is no error.
fn finish(mut out: BufWriter<Output>) -> std::io::Result<()> {
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
        _ => Ok(()),
    }
}

/// Standard output, or a file created on demand.
enum Output {
    Stdout(std::io::Stdout),
    File {
        path: PathBuf,
        file: Option<std::fs::File>,
    },
}

impl Output {
    fn new(path: Option<PathBuf>) -> Output {
        match path {
            None => Output::Stdout(std::io::stdout()),
            Some(path) => Output::File { path, file: None },
        }
    }

    /// Create (or truncate) the file, if there is one and it is not yet.
    fn create(&mut self) -> Result<()> {
        if let Output::File {
            path,
            file: f @ None,
        } = self
        {
            let created = std::fs::File::create(&*path).map_err(|source| ConnectorError::Io {
                path: path.clone(),
                source,
            })?;
            *f = Some(created);
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stdout(s) => s.write(buf),
            Output::File { file: Some(f), .. } => f.write(buf),
            Output::File {
                path,
                file: f @ None,
            } => {
                // Named here: the caller's error names only "output".
                let mut created = std::fs::File::create(&*path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
                })?;
                let n = created.write(buf)?;
                *f = Some(created);
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File { file: Some(f), .. } => f.flush(),
            Output::File { file: None, .. } => Ok(()),
        }
    }
}

/// Write the selected records to `out` in `format`: the number written, or
/// `None` when the reader went away (a closed pipe, `| head`), which ends an
/// export quietly. Write errors name `out_name`. A topic or partition the archive does not hold is an
/// error, not an empty export that looks like success.
pub(crate) fn write_records(
    engine: &cairn_engine::Engine,
    chosen: &[cairn_engine::PartitionInfo],
    select: &Selection,
    format: Format,
    out: &mut dyn Write,
    out_name: &std::path::Path,
) -> Result<Option<u64>> {
    let mut count = 0u64;
    for p in chosen {
        for r in engine.read(&p.tp, select.from)? {
            let r = r?;
            if select.to.is_some_and(|to| r.offset >= to) {
                break;
            }
            let res = match format {
                Format::Jsonl => serde_json::to_writer(&mut *out, &line(&p.tp, &r))
                    .map_err(std::io::Error::other)
                    .and_then(|_| out.write_all(b"\n")),
                Format::Raw => out
                    .write_all(r.value.as_deref().unwrap_or_default())
                    .and_then(|_| out.write_all(b"\n")),
            };
            match res {
                Ok(()) => count += 1,
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(None),
                Err(source) => {
                    return Err(ConnectorError::Io {
                        path: out_name.to_owned(),
                        source,
                    })
                }
            }
        }
    }
    Ok(Some(count))
}

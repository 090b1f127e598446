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
    // A file is written under a staged name and renamed into place once the
    // export is complete: a refused or failed export leaves an existing
    // file as it was.
    let mut out = BufWriter::with_capacity(1 << 20, Output::new(args.output.clone()));
    if let Some(conn) = crate::live::connect(data) {
        let req = crate::live::Request::Export {
            selection: select,
            format: args.format,
        };
        let mut end = crate::live::request(conn, &req, &mut out, &out_path)?;
        match &mut end.error {
            None => {
                finish(out).map_err(io_err)?;
                tracing::info!("export done (served by the running cairn run)");
            }
            Some(error) => {
                let note = out.get_ref().incomplete_note();
                abandon(out);
                error.push_str(&note);
            }
        }
        return Ok(crate::live::exit_code(&end));
    }
    let engine = super::open_archive(data)?;
    let chosen = select.choose(engine.partitions(), &[])?;
    match write_records(&engine, &chosen, &select, args.format, &mut out, &out_path) {
        Ok(count) => {
            finish(out).map_err(io_err)?;
            if let Some(records) = count {
                tracing::info!(records, "export done");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(mut e) => {
            let note = out.get_ref().incomplete_note();
            abandon(out);
            if let ConnectorError::ExportStopped { output, .. } = &mut e {
                *output = note;
            }
            Err(e)
        }
    }
}

/// Flush what is buffered and put a file in place; a reader that went
/// away is no error.
fn finish(mut out: BufWriter<Output>) -> std::io::Result<()> {
    match out.flush() {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    match out.into_inner().map_err(|e| e.into_error())? {
        Output::Stdout(_) => Ok(()),
        Output::File(mut f) => f.complete(),
    }
}

/// Give up an export that failed: what stdout was sent stays sent; a
/// staged file is removed (`FileOutput`'s drop).
fn abandon(out: BufWriter<Output>) {
    if let Output::Stdout(_) = out.get_ref() {
        // What is buffered belongs to records written before the error:
        // stdout gets the whole prefix, as the error says.
        let _ = out.into_inner();
    }
}

/// Standard output, or a file.
enum Output {
    Stdout(std::io::Stdout),
    File(FileOutput),
}

/// A file output: written under a staged name beside it, renamed into
/// place by [`FileOutput::complete`], removed when dropped before. A path
/// that exists and is not a regular file (a FIFO, `/dev/stdout`) is
/// written directly.
struct FileOutput {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Where the file is written until it is complete, if staged.
    staged: Option<PathBuf>,
}

impl Output {
    fn new(path: Option<PathBuf>) -> Output {
        match path {
            None => Output::Stdout(std::io::stdout()),
            Some(path) => Output::File(FileOutput {
                path,
                file: None,
                staged: None,
            }),
        }
    }

    /// What the output holds after a failed export, for its error.
    fn incomplete_note(&self) -> String {
        match self {
            Output::Stdout(_) => {
                "; <stdout> received the records before it: the export is incomplete".into()
            }
            Output::File(f) if f.is_staged_or_unopened() => {
                format!("; {} was left as it was", f.path.display())
            }
            Output::File(f) => format!(
                "; {} received the records before it: the export is incomplete",
                f.path.display()
            ),
        }
    }
}

impl FileOutput {
    fn is_staged_or_unopened(&self) -> bool {
        self.file.is_none() || self.staged.is_some()
    }

    /// Open the file to write: the staged one beside a regular file (or a
    /// path that does not exist yet), else the path itself.
    fn open(&mut self) -> std::io::Result<&mut std::fs::File> {
        if self.file.is_none() {
            let named = |e: std::io::Error, path: &std::path::Path| {
                std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
            };
            let special = std::fs::metadata(&self.path).is_ok_and(|m| !m.is_file());
            let target = if special {
                self.path.clone()
            } else {
                let name = self.path.file_name().ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{}: not a file name", self.path.display()),
                    )
                })?;
                let mut staged = std::ffi::OsString::from(".");
                staged.push(name);
                staged.push(format!(".cairn-export-{}", std::process::id()));
                let staged = self.path.with_file_name(staged);
                self.staged = Some(staged.clone());
                staged
            };
            let file = std::fs::File::create(&target).map_err(|e| named(e, &target))?;
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("opened above"))
    }

    /// The export is complete: put the file in place, durably (an export
    /// taken before a wipe of the archive must survive a power loss too).
    fn complete(&mut self) -> std::io::Result<()> {
        self.open()?;
        let file = self.file.take().expect("opened above");
        file.sync_all()?;
        drop(file);
        if let Some(staged) = self.staged.take() {
            if let Err(e) = std::fs::rename(&staged, &self.path) {
                let _ = std::fs::remove_file(&staged);
                return Err(e);
            }
            let dir = match self.path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

impl Drop for FileOutput {
    fn drop(&mut self) {
        if let Some(staged) = self.staged.take() {
            self.file = None;
            let _ = std::fs::remove_file(staged);
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stdout(s) => s.write(buf),
            Output::File(f) => f.open()?.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(s) => s.flush(),
            Output::File(FileOutput { file: Some(f), .. }) => f.flush(),
            Output::File(_) => Ok(()),
        }
    }
}

/// Write the selected records to `out` in `format`: the number written, or
/// `None` when the reader went away (a closed pipe, `| head`), which ends an
/// export quietly. Damage met, or an output that fails (naming `out_name`),
/// is [`ConnectorError::ExportStopped`], saying how far it got.
pub(crate) fn write_records(
    engine: &cairn_engine::Engine,
    chosen: &[cairn_engine::PartitionInfo],
    select: &Selection,
    format: Format,
    out: &mut dyn Write,
    out_name: &std::path::Path,
) -> Result<Option<u64>> {
    let mut count = 0u64;
    let mut last: Option<String> = None;
    let stopped =
        |records, last: &Option<String>, source: ConnectorError| ConnectorError::ExportStopped {
            records,
            last: last.clone(),
            source: Box::new(source),
            output: String::new(),
        };
    for p in chosen {
        let records = engine
            .read(&p.tp, select.from)
            .map_err(|e| stopped(count, &last, e.into()))?;
        for r in records {
            let r = r.map_err(|e| stopped(count, &last, e.into()))?;
            if select.to.is_some_and(|to| r.offset >= to) {
                break;
            }
            let res = match format {
                // `From` keeps the writer's own error (its kind: a closed
                // pipe), where `io::Error::other` would hide it.
                Format::Jsonl => serde_json::to_writer(&mut *out, &line(&p.tp, &r))
                    .map_err(std::io::Error::from)
                    .and_then(|_| out.write_all(b"\n")),
                Format::Raw => out
                    .write_all(r.value.as_deref().unwrap_or_default())
                    .and_then(|_| out.write_all(b"\n")),
            };
            match res {
                Ok(()) => {
                    count += 1;
                    last = Some(format!("{}@{}", p.tp, r.offset));
                }
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(None),
                Err(source) => {
                    let e = ConnectorError::Io {
                        path: out_name.to_owned(),
                        source,
                    };
                    return Err(stopped(count, &last, e));
                }
            }
        }
    }
    Ok(Some(count))
}

//! Reading an archive while `cairn run` holds it.
//!
//! sled locks its files, so `status`, `export`, `verify` and `prune` cannot
//! open an archive that a running `cairn run` has open. The run answers them
//! instead, on a Unix socket in the data directory ([`SOCKET_FILE`]): a
//! command that finds the socket answering sends its request there, and the
//! running engine answers from what is durable while archiving goes on.
//!
//! The protocol, one request per connection: the client writes one line of
//! JSON, a [`Request`]. The server answers with frames, each a tag byte and
//! a little-endian u32 length: `o` frames carry output bytes (at most
//! [`FRAME_BYTES_MAX`] each), and one `e` frame ends the answer with an
//! [`End`] in JSON (the exit code and the error, if any). A connection that
//! closes before its `e` frame did not finish, and the client says so.
//!
//! # Invariants
//! - The server only reads, except for `prune`, which deletes as the run's
//!   own `--retain` passes do (`Engine::truncate_before`, in durable steps).
//!   Exports stop at the durable next offset, and a verify checks the store
//!   as it stood when the verify started (`Engine::verify`).
//! - [`LiveServer::stop`] returns only once every connection's thread has
//!   ended, so no reference to the engine outlives it: the archive sink
//!   stops the server before it closes the engine.
//! - The socket is `0600`: the same people who can read the data files.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_engine::Engine;
use serde::{Deserialize, Serialize};

use crate::error::{ConnectorError, Result};
use crate::selection::Selection;

/// The socket's name in the data directory.
pub const SOCKET_FILE: &str = "cairn.sock";
/// Output bytes per `o` frame, at most.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;
/// Requests served at once; more are refused as busy.
pub const CONNECTIONS_MAX: usize = 4;
/// A request line longer than this is refused.
const REQUEST_BYTES_MAX: u64 = 64 * 1024;
/// How long the server waits for a connection's request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

const TAG_OUTPUT: u8 = b'o';
const TAG_END: u8 = b'e';

/// What a reading command asks the running archive for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// The partitions' figures, as JSON (`cli::status`).
    Status,
    /// Records, in the export format (`cli::export`).
    Export {
        selection: Selection,
        format: crate::cli::export::Format,
    },
    /// The verify report's lines (`cli::verify`).
    Verify,
    /// A prune, or with `dry_run` what it would delete (`cli::prune`).
    Prune {
        selection: Selection,
        cut: crate::cli::prune::Cut,
        dry_run: bool,
    },
}

/// How an answer ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The exit code the command would have had run on its own.
    pub exit: u8,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The serving process.
    pub pid: u32,
}

/// Serves reading commands for the archive a run holds.
pub struct LiveServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    /// Each connection's stream, to cut it off at stop.
    streams: Arc<Mutex<Vec<(u64, UnixStream)>>>,
    accept: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl LiveServer {
    /// Listen on the socket in the engine's data directory. The engine's
    /// lock is held, so a socket file found there is left from a run that
    /// did not stop cleanly, and is replaced.
    pub fn start(engine: Arc<Engine>) -> std::io::Result<LiveServer> {
        let path = engine.config().path.join(SOCKET_FILE);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, streams) = (stop.clone(), streams.clone());
            std::thread::Builder::new()
                .name("cairn-live".into())
                .spawn(move || accept_loop(listener, engine, stop, streams))?
        };
        tracing::info!(socket = %path.display(), "serving status, export, verify and prune of the live archive");
        Ok(LiveServer {
            path,
            stop,
            streams,
            accept: Some(accept),
        })
    }

    /// Stop listening, cut off the connections being served, wait for
    /// their threads, and remove the socket.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let Some(accept) = self.accept.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        for (_, s) in lock(&self.streams).iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Wake the accept loop, which then sees the flag.
        let _ = UnixStream::connect(&self.path);
        if accept.join().is_err() {
            tracing::warn!("the live-read thread panicked");
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn accept_loop(
    listener: UnixListener,
    engine: Arc<Engine>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<(u64, UnixStream)>>>,
) {
    let mut served: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        served.retain(|h| !h.is_finished());
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "live read: accept failed");
                continue;
            }
        };
        if served.len() >= CONNECTIONS_MAX {
            let end = End {
                exit: 2,
                error: Some(format!(
                    "the running cairn is already serving {CONNECTIONS_MAX} reads; try again when one has finished"
                )),
                pid: std::process::id(),
            };
            let _ = write_end(&mut conn, &end);
            continue;
        }
        next_id += 1;
        let id = next_id;
        match conn.try_clone() {
            Ok(c) => lock(&streams).push((id, c)),
            Err(e) => {
                tracing::warn!(error = %e, "live read: cannot keep the connection");
                continue;
            }
        }
        let (engine, streams2) = (engine.clone(), streams.clone());
        let spawned = std::thread::Builder::new()
            .name("cairn-live-read".into())
            .spawn(move || {
                serve(conn, &engine);
                lock(&streams2).retain(|(i, _)| *i != id);
            });
        match spawned {
            Ok(h) => served.push(h),
            Err(e) => {
                tracing::warn!(error = %e, "live read: cannot start a thread");
                lock(&streams).retain(|(i, _)| *i != id);
            }
        }
    }
    for h in served {
        let _ = h.join();
    }
}

/// Frames output bytes into `o` frames.
struct FrameWriter<'a> {
    stream: &'a mut UnixStream,
    buf: Vec<u8>,
}

impl Write for FrameWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = FRAME_BYTES_MAX - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == FRAME_BYTES_MAX {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            write_frame(self.stream, TAG_OUTPUT, &self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

fn write_frame(w: &mut impl Write, tag: u8, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = tag;
    head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)
}

fn write_end(w: &mut impl Write, end: &End) -> std::io::Result<()> {
    let body = serde_json::to_vec(end).expect("End serialises");
    write_frame(w, TAG_END, &body)
}

/// Answer one connection's request.
fn serve(mut conn: UnixStream, engine: &Engine) {
    let request = read_request(&conn);
    let pid = std::process::id();
    let mut out = FrameWriter {
        stream: &mut conn,
        buf: Vec::with_capacity(FRAME_BYTES_MAX),
    };
    let end = match request {
        Err(error) => End {
            exit: 2,
            error: Some(error),
            pid,
        },
        Ok(req) => {
            tracing::info!(?req, "live read");
            let exit = match &req {
                Request::Status => crate::cli::status::serve(engine, &mut out),
                Request::Export { selection, format } => {
                    let name = Path::new(SOCKET_FILE);
                    crate::cli::export::write_records(engine, selection, *format, &mut out, name)
                        .map(|_| 0)
                }
                Request::Verify => crate::cli::verify::serve(engine, &mut out),
                Request::Prune {
                    selection,
                    cut,
                    dry_run,
                } => {
                    let mut emit = |args: std::fmt::Arguments<'_>| {
                        out.write_fmt(args)
                            .and_then(|()| out.write_all(b"\n"))
                            .map_err(|source| ConnectorError::Io {
                                path: PathBuf::from(SOCKET_FILE),
                                source,
                            })
                    };
                    crate::cli::prune::prune(engine, selection, *cut, *dry_run, &mut emit)
                        .map(|()| 0)
                }
            };
            match exit.and_then(|code| {
                out.flush().map_err(|source| ConnectorError::Io {
                    path: PathBuf::from(SOCKET_FILE),
                    source,
                })?;
                Ok(code)
            }) {
                Ok(exit) => End {
                    exit,
                    error: None,
                    pid,
                },
                Err(e) => End {
                    exit: if matches!(req, Request::Verify) { 2 } else { 1 },
                    error: Some(e.to_string()),
                    pid,
                },
            }
        }
    };
    // A client that went away (`| head`) is no error of the server's.
    if let Err(e) = write_end(&mut conn, &end) {
        tracing::debug!(error = %e, "live read: client gone");
    }
}

fn read_request(conn: &UnixStream) -> std::result::Result<Request, String> {
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(conn.take(REQUEST_BYTES_MAX))
        .read_line(&mut line)
        .map_err(|e| format!("reading the request: {e}"))?;
    serde_json::from_str(line.trim_end()).map_err(|e| format!("bad request: {e}"))
}

/// The running `cairn run` serving `data`, if one answers there. A socket
/// left by a run that did not stop cleanly refuses the connection, and the
/// archive is then opened as usual.
pub fn connect(data: &Path) -> Option<UnixStream> {
    UnixStream::connect(data.join(SOCKET_FILE)).ok()
}

/// Send `req` and copy the answer's output to `out`. A reader of `out` that
/// went away (`| head`) ends the copy quietly, as for a local command.
pub fn request(mut conn: UnixStream, req: &Request, out: &mut dyn Write) -> Result<End> {
    let gone = |source| ConnectorError::Io {
        path: PathBuf::from(SOCKET_FILE),
        source,
    };
    let mut line = serde_json::to_vec(req).expect("Request serialises");
    line.push(b'\n');
    conn.write_all(&line).map_err(gone)?;
    let mut conn = BufReader::with_capacity(FRAME_BYTES_MAX, conn);
    let mut body = Vec::new();
    loop {
        let mut head = [0u8; 5];
        match conn.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ConnectorError::Live(
                    "the running cairn stopped before it finished answering (it is shutting down?): run the command again".into(),
                ))
            }
            Err(e) => return Err(gone(e)),
        }
        let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
        if len > FRAME_BYTES_MAX {
            return Err(ConnectorError::Live(format!(
                "the running cairn answered with a {len}-byte frame, over the {FRAME_BYTES_MAX} allowed"
            )));
        }
        body.resize(len, 0);
        conn.read_exact(&mut body).map_err(gone)?;
        match head[0] {
            TAG_OUTPUT => match out.write_all(&body) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    return Ok(End {
                        exit: 0,
                        error: None,
                        pid: 0,
                    })
                }
                Err(source) => {
                    return Err(ConnectorError::Io {
                        path: PathBuf::from("<output>"),
                        source,
                    })
                }
            },
            TAG_END => {
                return serde_json::from_slice(&body).map_err(|e| {
                    ConnectorError::Live(format!("the running cairn's answer did not parse: {e}"))
                })
            }
            tag => {
                return Err(ConnectorError::Live(format!(
                    "the running cairn answered with an unknown frame tag {tag:#04x}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::{EngineConfig, Record, RecordBatch, TopicPartition};

    fn engine(dir: &Path) -> Arc<Engine> {
        let e = Engine::open(EngineConfig::new(dir)).unwrap();
        let tp = TopicPartition::new("t", 0);
        let records = (0..5)
            .map(|o| Record::with_value(o, format!("v{o}")))
            .collect();
        e.append(&[RecordBatch { tp, records }]).unwrap();
        Arc::new(e)
    }

    fn ask(dir: &Path, req: &Request) -> (End, Vec<u8>) {
        let mut out = Vec::new();
        let end = request(connect(dir).expect("server answers"), req, &mut out).unwrap();
        (end, out)
    }

    #[test]
    fn serves_requests_and_lets_go_of_the_engine_at_stop() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        // A socket file left by a killed run is replaced.
        drop(UnixListener::bind(dir.path().join(SOCKET_FILE)).unwrap());
        assert!(
            connect(dir.path()).is_none(),
            "nobody answers a left-over socket"
        );
        let server = LiveServer::start(e.clone()).unwrap();

        let (end, out) = ask(dir.path(), &Request::Status);
        assert_eq!(
            (end.exit, end.error, end.pid),
            (0, None, std::process::id())
        );
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&out).unwrap();
        assert_eq!(rows[0]["records"], 5);

        let req = Request::Export {
            selection: Selection {
                from: 1,
                to: Some(3),
                ..Default::default()
            },
            format: crate::cli::export::Format::Raw,
        };
        let (end, out) = ask(dir.path(), &req);
        assert_eq!((end.exit, end.error), (0, None));
        assert_eq!(out, b"v1\nv2\n");

        let (end, out) = ask(dir.path(), &Request::Verify);
        let report = String::from_utf8(out).unwrap();
        assert_eq!(end.exit, 0, "{report}");
        assert!(
            report.contains("5 records") && report.ends_with("clean\n"),
            "{report}"
        );

        // An idle client does not hold the stop up: it is cut off, and is
        // told the answer did not finish.
        let idle = connect(dir.path()).unwrap();
        // Its thread has taken it once a request after it is answered.
        ask(dir.path(), &Request::Status);
        server.stop();
        let err = request(idle, &Request::Status, &mut Vec::new());
        assert!(err.is_err(), "{err:?}");
        assert!(!dir.path().join(SOCKET_FILE).exists());
        assert_eq!(Arc::strong_count(&e), 1, "a thread kept the engine");
    }

    #[test]
    fn a_bad_request_and_one_too_many_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let server = LiveServer::start(engine(dir.path())).unwrap();
        let mut conn = connect(dir.path()).unwrap();
        conn.write_all(b"{\"command\":\"drop-everything\"}\n")
            .unwrap();
        let mut head = [0u8; 5];
        conn.read_exact(&mut head).unwrap();
        assert_eq!(head[0], TAG_END);
        let mut body = vec![0; u32::from_le_bytes(head[1..].try_into().unwrap()) as usize];
        conn.read_exact(&mut body).unwrap();
        let end: End = serde_json::from_slice(&body).unwrap();
        assert_eq!(end.exit, 2);
        assert!(end.error.unwrap().contains("bad request"));

        // CONNECTIONS_MAX clients that send nothing (yet) keep their
        // threads; the next is refused as busy at once.
        let idle: Vec<UnixStream> = (0..CONNECTIONS_MAX)
            .map(|_| connect(dir.path()).unwrap())
            .collect();
        let (end, _) = ask(dir.path(), &Request::Status);
        assert_eq!(end.exit, 2);
        assert!(end.error.unwrap().contains("already serving"));
        drop(idle);
        server.stop();
    }

    #[test]
    fn requests_are_the_json_format_md_documents() {
        let cases = [
            (Request::Status, r#"{"command":"status"}"#),
            (Request::Verify, r#"{"command":"verify"}"#),
            (
                Request::Export {
                    selection: Selection {
                        topics: vec!["t".into()],
                        partition: None,
                        from: 0,
                        to: Some(9),
                    },
                    format: crate::cli::export::Format::Jsonl,
                },
                r#"{"command":"export","selection":{"topics":["t"],"partition":null,"from":0,"to":9},"format":"jsonl"}"#,
            ),
            (
                Request::Prune {
                    selection: Selection::default(),
                    cut: crate::cli::prune::Cut::KeepBytes(5),
                    dry_run: true,
                },
                r#"{"command":"prune","selection":{"topics":[],"partition":null,"from":0,"to":null},"cut":{"keep-bytes":5},"dry_run":true}"#,
            ),
        ];
        for (req, json) in cases {
            assert_eq!(serde_json::to_string(&req).unwrap(), json);
            assert_eq!(serde_json::from_str::<Request>(json).unwrap(), req);
        }
        let end = End {
            exit: 1,
            error: Some("e".into()),
            pid: 7,
        };
        assert_eq!(
            serde_json::to_string(&end).unwrap(),
            r#"{"exit":1,"error":"e","pid":7}"#
        );
    }

    #[test]
    fn a_broken_answer_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join(SOCKET_FILE)).unwrap();
        let answers: [&[u8]; 4] = [
            // A frame longer than any server sends.
            &[TAG_OUTPUT, 0xff, 0xff, 0xff, 0x7f],
            // An unknown tag.
            &[b'x', 0, 0, 0, 0],
            // An end that does not parse.
            &[TAG_END, 2, 0, 0, 0, b'{', b'{'],
            // Output, then nothing: the server went away.
            &[TAG_OUTPUT, 1, 0, 0, 0, b'a'],
        ];
        let server = std::thread::spawn(move || {
            for answer in answers {
                let (mut c, _) = listener.accept().unwrap();
                let mut line = String::new();
                BufReader::new(&c).read_line(&mut line).unwrap();
                c.write_all(answer).unwrap();
            }
        });
        for _ in 0..4 {
            let r = request(
                connect(dir.path()).unwrap(),
                &Request::Status,
                &mut Vec::new(),
            );
            assert!(matches!(r, Err(ConnectorError::Live(_))), "{r:?}");
        }
        server.join().unwrap();
    }
}

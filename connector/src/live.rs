//! Reading an archive while `cairn run` holds it.
//!
//! sled locks its files, so `status`, `export`, `verify`, `prune` and
//! `backup` cannot open an archive that a running `cairn run` has open. The run answers them
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
//!   own `--retain` passes do (`Engine::truncate_by_while`, in durable
//!   steps, stopping between them when the run stops or the client goes),
//!   and `backup`, which writes a new archive where it is asked to.
//!   Exports stop at the durable next offset, and a verify checks what was
//!   durable when the verify started (`Engine::verify`).
//! - [`LiveServer::stop`] returns once every connection's thread has
//!   ended, so that no reference to the engine outlives it and the archive
//!   sink can close the engine; or, with a thread stuck in a system call
//!   (a backup into a hung mount), after `STOP_WAIT`, saying so: that
//!   thread still holds the engine (and a live backup the truncation
//!   lock), so the sink then syncs the engine rather than close it, and
//!   waits for nothing that lock holds up (the pruner).
//! - The socket is `0600`: only the user the run runs as (and root)
//!   connects. A request that [writes](Request::writes) (a prune deletes,
//!   a backup writes as the run's user) is served only with the proof
//!   that the client may write the archive itself ([`write_proof`]): the
//!   socket's user check alone let a process that sees the archive
//!   read-only (a read-only mount of it) prune it. The data files are
//!   made with the process's umask: others may be able to read them.

use std::io::{BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cairn_engine::Engine;
use serde::{Deserialize, Serialize};

use crate::consumer::lock;
use crate::error::{ConnectorError, Result};
use crate::selection::Selection;

/// A data directory of this name makes the server panic serving each
/// request, in tests only.
#[cfg(test)]
const PANICS_SERVING: &str = "live-panics-serving";
/// A data directory of this name makes the server work on each request
/// without a frame of output until its client hangs up, in tests only.
#[cfg(test)]
const STALLS_SERVING: &str = "live-stalls-serving";
/// A data directory of this name makes the server stuck on each request,
/// deaf to the stop (as in a system call on a hung mount), until
/// [`UNSTICK`] is set, in tests only.
#[cfg(test)]
const STUCK_SERVING: &str = "live-stuck-serving";
#[cfg(test)]
static UNSTICK: AtomicBool = AtomicBool::new(false);
/// A data directory of this name makes a live backup panic as it copies,
/// while the free space beside it is watched, in tests only.
#[cfg(test)]
const PANICS_BACKING_UP: &str = "live-panics-backing-up";

/// The socket's name in the data directory.
pub const SOCKET_FILE: &str = "cairn.sock";
/// The folder the socket is bound in before it is renamed into place
/// (`bind_private`); one a killed run left is replaced.
pub const PRIVATE_DIR: &str = ".live";
/// Output bytes per `o` frame, at most.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;
/// Requests other than `status` served at once; more are refused as busy.
pub const CONNECTIONS_MAX: usize = 4;
/// Connections taken beyond [`CONNECTIONS_MAX`], for `status` only: four
/// slow exports (a reader paused on `| less`) do not turn a monitoring
/// `cairn status` away.
pub const STATUS_CONNECTIONS_RESERVED: usize = 1;
/// A request line longer than this is refused. Room for a `--topic` list
/// of every topic of a large cluster (tens of thousands of names of up to
/// 249 bytes): a request a stopped archive takes must be taken here too
/// (until the night of 2026-12-04 the limit was 64 KiB, which about a
/// thousand long topic names passed). The client checks it before it
/// sends, and says so.
pub const REQUEST_BYTES_MAX: u64 = 16 << 20;
/// How long the server waits for a connection's request line.
#[cfg(not(test))]
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// (Not shorter in tests: a 16 MiB line is read within it, in a debug
/// build beside the other tests.)
#[cfg(test)]
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the server sends an empty `o` frame while it answers, the
/// first at once: a client that receives one knows the server beats, and
/// gives up on it only after [`IDLE_TIMEOUT`] without a frame, however long
/// the answer takes (a verify of a large archive) or however long the
/// server works between two frames of output (an export's index scans).
#[cfg(not(test))]
const HEARTBEAT: Duration = Duration::from_secs(10);
#[cfg(test)]
const HEARTBEAT: Duration = Duration::from_millis(20);
/// How long a write to a client may wait on the client reading: one that
/// reads nothing for this long (an export paged in `less` and left there)
/// is cut off, and gives its slot back.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// [`SEND_TIMEOUT`] for a `status` answer (and a refusal): its client waits
/// no longer than [`STATUS_TIMEOUT`] for all of it. Until 2026-12-05 it
/// was `SEND_TIMEOUT`, so that five status clients suspended mid-answer
/// (Ctrl-Z on a large archive's status, a frozen monitor) held every
/// listed place, and every request was refused as busy, for 15 minutes.
#[cfg(not(test))]
const STATUS_SEND_TIMEOUT: Duration = STATUS_TIMEOUT;
#[cfg(test)]
const STATUS_SEND_TIMEOUT: Duration = Duration::from_millis(500);

const TAG_OUTPUT: u8 = b'o';
const TAG_END: u8 = b'e';

/// What a reading command asks the running archive for. A field it does
/// not know is refused, not ignored: a misspelt `partition` would otherwise
/// read as none given, and a prune take every partition. Written as serde
/// writes this enum; read by [`parse_request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// The partitions' figures, as JSON (`cli::status`).
    Status,
    /// Records, in the export format (`cli::export`).
    Export {
        selection: Selection,
        /// Sent only when set: a server of before 2026-12-07 refuses it.
        #[serde(skip_serializing_if = "crate::cli::export::TimeRange::is_unset")]
        times: crate::cli::export::TimeRange,
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
    /// A consistent copy into the directory `to` (absolute), and its report
    /// (`cli::backup`).
    Backup { to: PathBuf },
}

/// A request line as the server reads it: its `command` first, every
/// other field skipped without being kept, then the named command's own
/// fields, each refused if unknown (for `status` and `verify`, which take
/// none, extra fields are ignored, as serde's tagged enum did). serde's
/// tagged enum, which read requests until 2026-12-05, first copies every
/// value into an interim tree of its own, about 17 times the line's size:
/// a 16 MiB line of one extra array (`{"command":"status","x":[0,0,…]}`)
/// took some 270 MB inside the archiving run (found in review).
pub fn parse_request(line: &[u8]) -> std::result::Result<Request, serde_json::Error> {
    use serde::de::IgnoredAny;
    #[derive(Deserialize)]
    struct Command {
        command: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Export {
        #[serde(rename = "command")]
        _command: IgnoredAny,
        selection: Selection,
        #[serde(default)]
        times: crate::cli::export::TimeRange,
        format: crate::cli::export::Format,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Prune {
        #[serde(rename = "command")]
        _command: IgnoredAny,
        selection: Selection,
        cut: crate::cli::prune::Cut,
        dry_run: bool,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Backup {
        #[serde(rename = "command")]
        _command: IgnoredAny,
        to: PathBuf,
    }
    let Command { command } = serde_json::from_slice(line)?;
    Ok(match command.as_str() {
        "status" => Request::Status,
        "verify" => Request::Verify,
        "export" => {
            let Export {
                selection,
                times,
                format,
                ..
            } = serde_json::from_slice(line)?;
            Request::Export {
                selection,
                times,
                format,
            }
        }
        "prune" => {
            let Prune {
                selection,
                cut,
                dry_run,
                ..
            } = serde_json::from_slice(line)?;
            Request::Prune {
                selection,
                cut,
                dry_run,
            }
        }
        "backup" => {
            let Backup { to, .. } = serde_json::from_slice(line)?;
            Request::Backup { to }
        }
        other => {
            return Err(serde::de::Error::unknown_variant(
                other,
                &["status", "export", "verify", "prune", "backup"],
            ))
        }
    })
}

impl Request {
    /// Whether it changes the archive (a prune) or writes as the run's
    /// user (a backup): served only to a client that shows it may write
    /// the archive itself ([`write_proof`]).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Request::Prune { dry_run: false, .. } | Request::Backup { .. }
        )
    }

    /// The command's name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Export { .. } => "export",
            Request::Verify => "verify",
            Request::Prune { .. } => "prune",
            Request::Backup { .. } => "backup",
        }
    }
}

/// How an answer ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The exit code the command would have had run on its own.
    pub exit: u8,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The serving process; 0 when the client ended an export itself,
    /// its reader gone (a closed pipe).
    pub pid: u32,
    /// What the command would have said as a WARN run on its own (an
    /// export's `--from` below a partition's first offset held), for the
    /// client to say. Absent from the JSON when there is none: a client of
    /// before ignores it, and a server of before sends none (since
    /// 2026-12-05; before, a live export said nothing of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// The records a whole export wrote, for the client's "export done"
    /// line, as a stopped archive's export counts them (since 2026-12-07:
    /// before, a live export said no count; found by an audit). Absent as
    /// `warning` is, for the same reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
}

/// Serves reading commands for the archive a run holds.
pub struct LiveServer {
    path: PathBuf,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

/// Called when a live request left the engine poisoned (a prune's fsync
/// failed, or any request panicked, which poisons the engine too: since
/// the night of 2026-12-04, before which only a prune's did): the run it
/// belongs to must stop, not only its next put. The run's clean stop then
/// fails on the poisoned engine, with its reason, and exits non-zero.
pub type OnPoisoned = Box<dyn Fn() + Send + Sync>;

/// What the server's threads share.
struct Shared {
    stop: AtomicBool,
    on_poisoned: Option<OnPoisoned>,
    /// Wakes the accept loop at stop (no connection through the socket
    /// path is needed: it may have been deleted).
    wake: tokio::sync::Notify,
    /// Each connection's stream, to cut it off at stop.
    streams: Mutex<Vec<(u64, UnixStream)>>,
    /// Requests other than `status` being served ([`Slot`]).
    serving: AtomicUsize,
    /// Connections whose request line is not yet taken, oldest first,
    /// each with how much of it was read: when every place is taken, the
    /// oldest that sent nothing gives its place to a new connection, else
    /// the oldest part-way through its line (see [`take`]).
    waiting: Mutex<std::collections::VecDeque<(u64, Heard)>>,
    /// Live backups being made ([`Slot`]): one at a time, as each checks
    /// the free space for its own copy only ([`room_for_backup`]).
    backing_up: AtomicUsize,
}

/// A place among at most `max` holders of a count: the [`CONNECTIONS_MAX`]
/// requests other than `status` served at once, or the one live backup;
/// given back when dropped.
struct Slot<'a>(&'a AtomicUsize);

impl<'a> Slot<'a> {
    fn take(held: &'a AtomicUsize, max: usize) -> Option<Slot<'a>> {
        held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Slot(held))
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a read of `stream` would take next, looked at without taking it
/// or waiting: `Some(0)` its end (the client closed its side), `Some(n)`
/// bytes, `None` nothing yet (or an error).
fn peek(stream: &UnixStream) -> Option<usize> {
    let mut byte = [0u8; 1];
    rustix::net::recv(
        stream,
        &mut byte,
        rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
    )
    .ok()
    .map(|(n, _)| n)
}

/// Whether bytes wait to be read on `stream` (a request sent, its first
/// bytes at least).
fn request_arrived(stream: &UnixStream) -> bool {
    peek(stream).is_some_and(|n| n > 0)
}

/// Whether `stream`'s client has closed its side, with nothing more sent.
fn hung_up(stream: &UnixStream) -> bool {
    peek(stream) == Some(0)
}

/// How much of a connection's request line its thread has read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Heard {
    Nothing,
    /// Bytes of it, not its end.
    Part,
    /// All of it: to its newline, or to the client's hang-up.
    Whole,
}

fn busy() -> String {
    format!("the running cairn is already serving as many requests as it takes ({CONNECTIONS_MAX}, and one more status); try again when one has finished")
}

impl Shared {
    fn new(on_poisoned: Option<OnPoisoned>) -> Shared {
        Shared {
            on_poisoned,
            stop: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            streams: Mutex::new(Vec::new()),
            serving: AtomicUsize::new(0),
            waiting: Mutex::new(std::collections::VecDeque::new()),
            backing_up: AtomicUsize::new(0),
        }
    }

    /// Cuts off the oldest connection that has sent no request yet, if
    /// any, else the oldest part-way through its request line: its read of
    /// the request ends, and its thread with it. One whose bytes wait on
    /// its socket, not yet read by its thread, is passed over: it is about
    /// to be served, and cut off, its client would be told the run
    /// stopped. So is one whose line was read whole (waiting to be
    /// parsed). Until 2026-12-06 (an audit) one part-way through its line
    /// was cut off as readily as a silent one, whatever silent ones there
    /// were; it is still cut off when none is left, so that stalled
    /// clients cannot keep the places (and `status`) from others.
    fn cut_off_oldest_waiting(&self) -> bool {
        // `waiting` is held to the end (and `streams` taken under it, the
        // one place two of these locks nest): a thread that has read its
        // request whole takes itself off the list under it (`serve`), so
        // it is either cut off before that, and serves nothing, or not at
        // all. Until the night of 2026-12-04 one whose request had just
        // been read (nothing left to peek) could be cut off and still
        // serve it, a prune included, to a client told to run it again.
        let mut waiting = lock(&self.waiting);
        let streams = lock(&self.streams);
        let idle = |id: &u64| !streams.iter().any(|(i, s)| i == id && request_arrived(s));
        let oldest = |of: Heard| {
            waiting
                .iter()
                .filter(|(_, heard)| *heard == of)
                .map(|(id, _)| *id)
                .find(idle)
        };
        let victim = oldest(Heard::Nothing).or_else(|| oldest(Heard::Part));
        let Some(victim) = victim else {
            return false;
        };
        waiting.retain(|(i, _)| *i != victim);
        // Unlisted as it is cut off, not when its thread ends: the place
        // is the new connection's now, and a count that still held the
        // victim could cut off one more (its client reconnecting at once).
        let mut streams = streams;
        unlist(&mut streams, victim);
        drop(streams);
        drop(waiting);
        tracing::debug!("live read: a connection that had not sent its whole request gave its place to a new one");
        true
    }
    /// Take connection `id` off both lists, shutting it down, with
    /// `waiting` held while `streams` is taken (the nesting
    /// `cut_off_oldest_waiting` uses): its place is free at once.
    fn forget(&self, id: u64) {
        let mut waiting = lock(&self.waiting);
        waiting.retain(|(i, _)| *i != id);
        unlist(&mut lock(&self.streams), id);
    }

    /// How much of connection `id`'s request line was read
    /// ([`cut_off_oldest_waiting`](Self::cut_off_oldest_waiting) chooses
    /// by it); false when it is no longer listed (cut off).
    fn heard_from(&self, id: u64, heard: Heard) -> bool {
        match lock(&self.waiting).iter_mut().find(|(i, _)| *i == id) {
            Some(entry) => {
                entry.1 = heard;
                true
            }
            None => false,
        }
    }

    /// Stop the run (its `on_poisoned` hook), for `why`.
    fn stop_run(&self, why: &str) {
        if let Some(stop_run) = &self.on_poisoned {
            tracing::error!("{why}; stopping the run");
            stop_run();
        }
    }

    fn cut_off_all(&self) {
        for (_, s) in lock(&self.streams).iter() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl LiveServer {
    /// Listen on the socket in the engine's data directory. The engine's
    /// lock is held, so a socket file found there is left from a run that
    /// did not stop cleanly, and is replaced.
    pub fn start(engine: Arc<Engine>) -> std::io::Result<LiveServer> {
        Self::start_with(engine, None)
    }

    /// [`start`](Self::start), calling `on_poisoned` when a live request
    /// leaves the engine poisoned: a prune (the one request that writes)
    /// whose fsync failed, or any request that panicked.
    pub fn start_with(
        engine: Arc<Engine>,
        on_poisoned: Option<OnPoisoned>,
    ) -> std::io::Result<LiveServer> {
        let dir = engine.config().path.clone();
        let path = dir.join(SOCKET_FILE);
        let listener = bind_private(&dir, &path)?;
        let shared = Arc::new(Shared::new(on_poisoned));
        let accept = {
            let shared = shared.clone();
            let path = path.clone();
            std::thread::Builder::new()
                .name("cairn-live".into())
                .spawn(move || accept_loop(listener, &path, engine, shared))
        };
        // A socket nobody serves would be left for this run and after it.
        let accept = accept.inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })?;
        tracing::info!(socket = %path.display(), "serving status, export, verify, prune and backup of the live archive");
        Ok(LiveServer {
            path,
            shared,
            accept: Some(accept),
        })
    }

    /// Stop listening, cut off the connections being served (a verify in
    /// progress gives up; a prune finishes the durable step it is in), wait
    /// for their threads (for `STOP_WAIT` at most), and remove the socket.
    /// Whether every thread ended: `false` leaves one behind, stuck, with
    /// its hold on the engine.
    pub fn stop(mut self) -> bool {
        self.shut_down()
    }

    fn shut_down(&mut self) -> bool {
        let Some(accept) = self.accept.take() else {
            return true;
        };
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cut_off_all();
        self.shared.wake.notify_one();
        // Cutting the connections off ends every request at its next check,
        // but not a thread stuck in a system call (a backup into a hung NFS
        // mount): the run's stop waits for it only so long, then goes on
        // without it. Its reference to the engine then keeps the engine
        // from being closed: the stop syncs it instead, and the next open
        // re-checks the log since the last checkpoint.
        let deadline = Instant::now() + STOP_WAIT;
        while !accept.is_finished() && Instant::now() < deadline {
            // Waiting for a condition, with a deadline.
            std::thread::sleep(Duration::from_millis(10));
        }
        let ended = accept.is_finished();
        if !ended {
            tracing::error!(
                waited_s = STOP_WAIT.as_secs(),
                "a live request is still being served (stuck in a system call?): the run stops without waiting for it"
            );
        } else if accept.join().is_err() {
            tracing::warn!("the live-read thread panicked");
        }
        let _ = std::fs::remove_file(&self.path);
        ended
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        let _ = self.shut_down();
    }
}

/// Bind the socket where only its owner can connect: in a new directory of
/// mode 0700 (`.live`, which the archive's lock keeps to this process; one
/// left by a killed run is replaced), made 0600, then renamed into place.
/// Binding at `path` and changing its mode after would leave a moment in
/// which anyone could connect.
fn bind_private(dir: &Path, path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::DirBuilderExt;
    let private = dir.join(PRIVATE_DIR);
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new().mode(0o700).create(&private)?;
    let bound = (|| {
        let inner = private.join("s");
        let (_dir, name) = socket_name(&inner)?;
        let listener = std::os::unix::net::UnixListener::bind(&name)?;
        std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o600))?;
        // Replaces a socket left by a run that did not stop cleanly.
        std::fs::rename(&inner, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_dir_all(&private);
    bound
}

fn accept_loop(
    listener: std::os::unix::net::UnixListener,
    path: &Path,
    engine: Arc<Engine>,
    shared: Arc<Shared>,
) {
    let mut served: Vec<JoinHandle<()>> = Vec::new();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build();
    let looped = rt.and_then(|rt| {
        listener.set_nonblocking(true)?;
        rt.block_on(async {
            let listener = tokio::net::UnixListener::from_std(listener)?;
            let mut next_id = 0u64;
            // Accept failing (out of file descriptors, say) is logged once
            // at WARN until an accept succeeds, not every 100 ms.
            let mut accept_failing = false;
            loop {
                let accepted = tokio::select! {
                    _ = shared.wake.notified() => break,
                    a = listener.accept() => a,
                };
                let conn = match accepted.and_then(|(c, _)| {
                    let c = c.into_std()?;
                    c.set_nonblocking(false)?;
                    Ok(c)
                }) {
                    Ok(c) => {
                        accept_failing = false;
                        c
                    }
                    Err(e) => {
                        // Out of file descriptors, say: wait a little
                        // rather than spin.
                        if accept_failing {
                            tracing::debug!(error = %e, "live read: accept failed again");
                        } else {
                            tracing::warn!(error = %e, "live read: accept failed (retried every 100 ms; logged again once one has succeeded)");
                        }
                        accept_failing = true;
                        tokio::select! {
                            _ = shared.wake.notified() => break,
                            _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        }
                    }
                };
                // Its mode keeps other users out; this holds even if the
                // socket was reached some other way (a swapped private
                // directory in a data directory others may write to).
                if let Some(refused) = untrusted_client(&conn) {
                    tracing::warn!(%refused, "live read: a connection refused");
                    let end = End {
                        exit: 2,
                        error: Some(refused),
                        pid: std::process::id(),
                        warning: None,
                        records: None,
                    };
                    let mut conn = conn;
                    let _ = write_frame(&mut conn, TAG_END, &end_frame(&end));
                    continue;
                }
                served.retain(|h| !h.is_finished());
                next_id += 1;
                // Counted by the connections still listed, not the threads
                // not yet finished: a client that has read its answer to
                // the end was unlisted first (its last server-side handle
                // closes there), so it never holds a slot after that.
                let serving = lock(&shared.streams).len();
                if let Some(h) = take(conn, next_id, serving, &engine, &shared) {
                    served.push(h);
                }
            }
            Ok(())
        })
    });
    if let Err(e) = looped {
        // A socket nobody serves refuses connections, which commands take
        // for one left by a run that did not stop: gone, they at least find
        // no live run to ask.
        let _ = std::fs::remove_file(path);
        tracing::error!(error = %e, socket = %path.display(), "live reads are off for the rest of this run: the socket could not be served (status, export, verify, prune and backup are refused as the archive is locked until the run stops)");
    }
    // Connections taken while the stop was cutting the others off are cut
    // off too: only this thread adds to the list, and it adds no more.
    shared.cut_off_all();
    for h in served {
        let _ = h.join();
    }
}

/// Why a client may not be served, if it may not: only this process's
/// user and root are (since the night of 2026-12-04; before, only the
/// socket's mode said so).
fn untrusted_client(conn: &UnixStream) -> Option<String> {
    let peer = match rustix::net::sockopt::socket_peercred(conn) {
        Ok(c) => c.uid.as_raw(),
        Err(e) => return Some(format!("its user could not be read ({e})")),
    };
    let me = rustix::process::geteuid().as_raw();
    (!serves(peer, me)).then(|| {
        format!("the running cairn serves only its own user (uid {me}) and root, not uid {peer}")
    })
}

/// Whether a run of uid `me` serves a client of uid `peer`.
fn serves(peer: u32, me: u32) -> bool {
    peer == me || peer == 0
}

/// A connection's place in the list of streams stop cuts off.
struct Listed<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        // Shut down, not only closed: the request's watcher holds another
        // handle on the socket, which would keep it open (and the client
        // waiting) after a panic.
        self.shared.forget(self.id);
    }
}

/// Take connection `id` off `streams`, shutting it down, under the
/// caller's lock: the accept loop counts the places under the same lock,
/// so a client that reads the end of the connection and connects again
/// at once finds its place free. For a finished connection and, since
/// the night of 2026-12-04, a cut-off one (which stayed listed until its
/// thread ended, and could have another's waiting connection cut off to
/// make room for a place that was free).
fn unlist(streams: &mut Vec<(u64, UnixStream)>, id: u64) {
    streams.retain(|(i, s)| {
        if *i == id {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        *i != id
    });
}

/// Serve `conn` on a thread of its own, or refuse it as busy.
///
/// When every place is taken and some connection has still not sent its
/// whole request, the oldest that sent nothing (else the oldest part-way
/// through its line) is cut off and `conn` takes its place: a client sends
/// its request at once, so connections that have not (held up to
/// [`REQUEST_TIMEOUT`] each) must not turn `status`, or anything, away.
/// Only requests being answered fill the places for good.
fn take(
    mut conn: UnixStream,
    id: u64,
    serving: usize,
    engine: &Arc<Engine>,
    shared: &Arc<Shared>,
) -> Option<JoinHandle<()>> {
    if serving >= CONNECTIONS_MAX + STATUS_CONNECTIONS_RESERVED && !shared.cut_off_oldest_waiting()
    {
        let end = End {
            exit: 2,
            error: Some(busy()),
            pid: std::process::id(),
            warning: None,
            records: None,
        };
        let _ = write_frame(&mut conn, TAG_END, &end_frame(&end));
        return None;
    }
    match conn.try_clone() {
        Ok(c) => {
            lock(&shared.streams).push((id, c));
            lock(&shared.waiting).push_back((id, Heard::Nothing));
        }
        Err(e) => {
            tracing::warn!(error = %e, "live read: cannot keep the connection");
            return None;
        }
    }
    let (engine, shared2) = (engine.clone(), shared.clone());
    let spawned = std::thread::Builder::new()
        .name("cairn-live-read".into())
        .spawn(move || {
            // Unlisted however the thread ends (a panic too), so that its
            // connection closes and its client is not left waiting.
            let _listed = Listed {
                shared: &shared2,
                id,
            };
            serve(conn, id, &engine, &shared2);
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::warn!(error = %e, "live read: cannot start a thread");
            shared.forget(id);
            None
        }
    }
}

/// The writing side of a connection, shared by its answer and its
/// heartbeat: a frame is written whole under the lock.
struct Wire {
    stream: UnixStream,
    /// A write ran out of its timeout ([`SEND_TIMEOUT`], or
    /// [`STATUS_SEND_TIMEOUT`]): the client reads nothing, and is not
    /// written to again (an end frame would wait as long again).
    stalled: bool,
}

impl Wire {
    /// The write timeout the stream was given, for what a stall says.
    fn timeout_s(&self) -> u64 {
        self.stream
            .write_timeout()
            .ok()
            .flatten()
            .unwrap_or(SEND_TIMEOUT)
            .as_secs()
    }
}

/// Write one frame to `wire`, unless a write to it already stalled.
fn send(wire: &Mutex<Wire>, tag: u8, body: &[u8]) -> std::io::Result<()> {
    let mut w = lock(wire);
    if w.stalled {
        return Err(stalled(w.timeout_s()));
    }
    let sent = write_frame(&mut w.stream, tag, body);
    if let Err(e) = &sent {
        if matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            w.stalled = true;
            return Err(stalled(w.timeout_s()));
        }
    }
    sent
}

fn stalled(timeout_s: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the client read nothing for {timeout_s} s"),
    )
}

/// Frames output bytes into `o` frames.
struct FrameWriter<'a> {
    wire: &'a Mutex<Wire>,
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
        if self.buf.is_empty() {
            return Ok(());
        }
        // Dropped on failure too: a client that went away (`| head`) was
        // already told nothing more, and the final flush must not fail
        // again on the same bytes and make that look like the server's error.
        let sent = send(self.wire, TAG_OUTPUT, &self.buf);
        self.buf.clear();
        sent
    }
}

fn write_frame(w: &mut impl Write, tag: u8, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = tag;
    head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)
}

/// The longest error an End frame carries: its frame stays within the
/// [`FRAME_BYTES_MAX`] a client reads (an error can list a whole archive's
/// topics) even once JSON has escaped it, which makes a control character
/// six bytes (`\u0001`).
const END_ERROR_BYTES_MAX: usize = 10 << 10;

/// `value`'s `Debug` text, formatting stopped once it is past `max` bytes
/// and cut there, marked.
fn debug_clipped(value: &impl std::fmt::Debug, max: usize) -> String {
    struct Upto(String, usize);
    impl std::fmt::Write for Upto {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.push_str(s);
            // An error ends the formatting: the rest is never made.
            if self.0.len() > self.1 {
                Err(std::fmt::Error)
            } else {
                Ok(())
            }
        }
    }
    let mut text = Upto(String::new(), max);
    let _ = std::fmt::write(&mut text, format_args!("{value:?}"));
    clip(&mut text.0, max, "…");
    text.0
}

/// Cuts `s` to at most `max` bytes (at a character's boundary), marked
/// with `mark`, if it is longer.
fn clip(s: &mut String, max: usize, mark: &str) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(mark);
    }
}

fn end_frame(end: &End) -> Vec<u8> {
    let mut end = end.clone();
    if let Some(e) = end.error.as_mut() {
        clip(e, END_ERROR_BYTES_MAX, " [...]");
    }
    let body = serde_json::to_vec(&end).expect("End serialises");
    debug_assert!(body.len() <= FRAME_BYTES_MAX, "{}", body.len());
    body
}

/// Answer one connection's request. The server stopping, or the client
/// going away (its command interrupted), interrupts a verify and a backup,
/// and a prune between its durable steps. A request that left the engine
/// poisoned (a prune's failed fsync, or a panic in any request, which
/// poisons it) stops the run (`on_poisoned`), as the run's own pruner
/// stops it then: before its client is answered, so that the answer comes
/// after.
fn serve(conn: UnixStream, id: u64, engine: &Engine, shared: &Shared) {
    let Some((request, proof)) = read_request(&conn, &mut |heard| shared.heard_from(id, heard))
    else {
        // The client hung up before sending anything, or the connection
        // was cut off to make room (`cut_off_oldest_waiting` says so): no
        // one to answer. Its place goes at once, off both lists under the
        // locks the cut-off takes (until 2026-12-05 it stayed counted
        // among the places, off
        // the waiting list, until this thread had tried to answer and
        // ended: a connection made meanwhile at the limit had a live
        // client's waiting connection cut off instead).
        shared.forget(id);
        return;
    };
    // Its request is in (or refused): its place is now its own, unless it
    // was cut off meanwhile (`cut_off_oldest_waiting` takes it off the
    // list, under the same lock; a line read whole is told above, and a
    // read that failed, too long or too slow, here): then its client was
    // told to run the command again, and nothing is served.
    let cut_off = {
        let mut waiting = lock(&shared.waiting);
        let listed = waiting.iter().any(|(i, _)| *i == id);
        waiting.retain(|(i, _)| *i != id);
        !listed
    };
    if cut_off {
        tracing::debug!(
            "live read: a connection cut off to make room as its request came in; not served"
        );
        return;
    }
    // A prune or a backup, only for a client that can write the archive.
    let request = request.and_then(|req| {
        if req.writes() {
            may_write(engine, proof).map(|()| req)
        } else {
            Ok(req)
        }
    });
    // Status needs none of the slots the others share.
    let slot = match &request {
        Ok(Request::Status) | Err(_) => None,
        Ok(_) => Slot::take(&shared.serving, CONNECTIONS_MAX),
    };
    let request = request.and_then(|req| match req {
        Request::Status => Ok(req),
        _ if slot.is_some() => Ok(req),
        _ => Err(busy()),
    });
    // Every clone shares the socket, and so the timeout.
    let send_timeout = match &request {
        Ok(Request::Status) | Err(_) => STATUS_SEND_TIMEOUT,
        Ok(_) => SEND_TIMEOUT,
    };
    if let Err(e) = conn.set_write_timeout(Some(send_timeout)) {
        tracing::debug!(error = %e, "live read: no send timeout");
    }
    let stop = &shared.stop;
    let pid = std::process::id();
    // A client sends nothing after its request: a read that ends means it
    // hung up (or the server cut the connection off at stop). One whose end
    // is in already (a `shutdown(SHUT_WR)` right after its line) is gone
    // from the start: until 2026-12-05 only the watcher, below, found it,
    // and whether a prune had made its first step by then was the
    // threads' race. An end that arrives after the line was read is still
    // the watcher's to find: a prune may have made a step by then, as a
    // close at any time stops it between steps.
    let gone = Arc::new(AtomicBool::new(
        stop.load(Ordering::SeqCst) || hung_up(&conn),
    ));
    let watcher = conn.try_clone().ok().and_then(|mut c| {
        let gone = gone.clone();
        std::thread::Builder::new()
            .name("cairn-live-watch".into())
            .spawn(move || {
                let mut b = [0u8; 64];
                loop {
                    match c.read(&mut b) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock
                                    | std::io::ErrorKind::TimedOut
                                    | std::io::ErrorKind::Interrupted
                            ) => {}
                        Err(_) => break,
                    }
                }
                gone.store(true, Ordering::SeqCst);
            })
            .ok()
    });
    let stop: &AtomicBool = if watcher.is_some() { &gone } else { stop };
    let wire = Arc::new(Mutex::new(Wire {
        stream: conn,
        stalled: false,
    }));
    let asked = request.is_ok();
    // Without its heartbeat a long answer would be given up on by the
    // client: refused instead, as when busy. (Status needs none: its client
    // bounds it as a whole.)
    let (request, heartbeat) = match request {
        Ok(Request::Status) | Err(_) => (request, None),
        Ok(req) => match beat(&wire, &gone) {
            Ok(h) => (Ok(req), Some(h)),
            Err(e) => (
                Err(format!(
                    "the running cairn could not start this answer's heartbeat ({e}): try again"
                )),
                None,
            ),
        },
    };
    let mut out = FrameWriter {
        wire: &wire,
        buf: Vec::with_capacity(FRAME_BYTES_MAX),
    };
    // Whether the last of the answer found the client gone (`| head`
    // exited): its end is then no failure to log, as mid-stream.
    let mut hung_up = false;
    let end = match request {
        Err(error) => End {
            exit: 2,
            error: Some(error),
            pid,
            warning: None,
            records: None,
        },
        Ok(req) => {
            // A monitor polling status would fill the log at INFO; and a
            // request may be up to 16 MiB long: logged cut to 512 bytes,
            // formatted no further (a whole one's text was tens of MB).
            let said = debug_clipped(&req, 512);
            if matches!(req, Request::Status) {
                tracing::debug!(req = %said, "live read");
            } else {
                tracing::info!(req = %said, "live read");
            }
            // Only a request that poisoned the engine itself stops the run
            // for it: one that found it poisoned (a failed put) did not.
            let was_poisoned = engine.is_poisoned();
            // A panic is answered as the request's error, not left to end
            // the thread with its client told nothing. It poisons the
            // engine, and the run stops below: it may be sled's, on damage
            // to its own files it does not handle (its reads run inside
            // sled), after which what sled holds in memory is not to be
            // flushed, as a stopped archive's command poisons its engine
            // then (`read_unpanicked`); a bug cannot be told from it. One
            // in a prune's truncation poisons the engine by the engine's
            // own guard. (Until the night of 2026-12-04 only a prune's
            // stopped the run; any other was answered and the run went on
            // writing through that sled.)
            let (mut warning, mut records) = (None, None);
            let exit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                answer(
                    &req,
                    engine,
                    stop,
                    &shared.backing_up,
                    &mut out,
                    &mut warning,
                    &mut records,
                )
            }))
            .unwrap_or_else(|payload| {
                let what = cairn_engine::panic_message(&*payload);
                engine.poison_after_caught_panic("live read", &format!("{}: {what}", req.name()));
                Err(ConnectorError::Live(format!(
                    "the running cairn failed serving this request: it panicked ({what}): damage in sled's own files that sled does not handle, or a bug; the archive's engine is poisoned and the run stops, committing nothing more (once it has stopped, cairn verify --data {} says what it can)",
                    cairn_engine::shell_word(&engine.config().path)
                )))
            });
            // (Poisoned meanwhile: by this request, or by the run's own
            // failed write beside it, which stops the run anyway; the log
            // line blames neither.)
            if !was_poisoned && engine.is_poisoned() {
                shared.stop_run(&format!(
                    "the engine was poisoned while a live {} was served",
                    req.name()
                ));
            }
            // What was written goes out before the end, also after an
            // error (a prune's lines for the partitions it did).
            let flushed = out.flush();
            hung_up = flushed.as_ref().is_err_and(peer_gone);
            let flushed = flushed.map_err(socket_error);
            match exit.and_then(|code| flushed.map(|()| code)) {
                Ok(exit) => End {
                    exit,
                    error: None,
                    pid,
                    warning,
                    records,
                },
                Err(e) => End {
                    exit: if matches!(req, Request::Verify) { 2 } else { 1 },
                    error: Some(e.to_string()),
                    pid,
                    warning,
                    records: None,
                },
            }
        }
    };
    // Nothing follows the end frame, a beat neither.
    if let Some((stop_beating, beating)) = heartbeat {
        drop(stop_beating);
        let _ = beating.join();
    }
    // The answer is whole: its slot is free before its client reads the
    // end, so that a next request sent at once is not refused as busy for
    // it (before the night of 2026-12-04 it was held until the thread
    // ended).
    drop(slot);
    // A client that went away (`| head`) is no error of the server's, but
    // an error it could not be told of is logged here instead.
    if let Err(e) = send(&wire, TAG_END, &end_frame(&end)) {
        match &end.error {
            _ if lock(&wire).stalled => tracing::warn!(
                "live read cut off: its client read nothing for {} s",
                lock(&wire).timeout_s()
            ),
            // Ended by its client going, or by the run's stop: said, with
            // the error (which may be the stop's own), but no alarm.
            Some(error) if asked && (hung_up || stop.load(Ordering::SeqCst)) => {
                tracing::info!(%error, "live read ended early: its client is gone, or the run is stopping")
            }
            // A connection closed before its request (a probe of the
            // socket) is no failure worth a warning.
            Some(error) if asked => {
                tracing::warn!(%error, "live read failed, and its client is gone")
            }
            _ => tracing::debug!(error = %e, "live read: client gone"),
        }
    }
    // Ends the watcher's read.
    let _ = lock(&wire).stream.shutdown(std::net::Shutdown::Read);
    if let Some(w) = watcher {
        let _ = w.join();
    }
}

/// Whether an I/O error on a connection says its other end is gone: for
/// the server, its client hung up; for a client, the server closed it.
fn peer_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
    )
}

/// Send an empty `o` frame on `wire` now and every [`HEARTBEAT`] until the
/// sender returned is dropped; then join the thread returned. An error if
/// no thread could be started. A beat that cannot be sent (the client is
/// gone, or a beat waited [`SEND_TIMEOUT`] for room: one that reads nothing
/// fills the socket's buffer only after many beats) sets `gone`, which the
/// answer is asked to stop by, as the watcher's end of the read sets it
/// (since the night of 2026-12-04: a verify or backup writes nothing else
/// until its report).
fn beat(
    wire: &Arc<Mutex<Wire>>,
    gone: &Arc<AtomicBool>,
) -> std::io::Result<(std::sync::mpsc::Sender<()>, JoinHandle<()>)> {
    let (stop_beating, stopped) = std::sync::mpsc::channel::<()>();
    let (wire, gone) = (wire.clone(), gone.clone());
    let beating = std::thread::Builder::new()
        .name("cairn-live-beat".into())
        .spawn(move || loop {
            if send(&wire, TAG_OUTPUT, &[]).is_err() {
                gone.store(true, Ordering::SeqCst);
                break;
            }
            match stopped.recv_timeout(HEARTBEAT) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => break,
            }
        });
    match beating {
        Ok(h) => Ok((stop_beating, h)),
        Err(e) => {
            tracing::warn!(error = %e, "live read: cannot start its heartbeat");
            Err(e)
        }
    }
}

/// The request's output, written to `out`, and the exit code the command
/// would have had run on its own; what it would have said as a WARN, in
/// `warning`; an export's count of records written, in `records`.
fn answer(
    req: &Request,
    engine: &Engine,
    stop: &AtomicBool,
    backing_up: &AtomicUsize,
    out: &mut FrameWriter,
    warning: &mut Option<String>,
    records: &mut Option<u64>,
) -> Result<u8> {
    // A bug, injected: the containment of a panic is tested; in a prune,
    // inside its truncation.
    #[cfg(test)]
    if engine.config().path.ends_with(PANICS_SERVING) {
        if matches!(req, Request::Prune { dry_run: false, .. }) {
            // More entries than one step deletes, so that `go`, asked
            // between steps, panics inside the truncation (a panicking cut
            // has written nothing, and poisons nothing). Once the engine is
            // poisoned, the writes and the truncation are refused.
            let tp = cairn_engine::TopicPartition::new("panics", 0);
            let entries = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64 + 1;
            for o in 0..entries {
                let records = vec![cairn_engine::Record::with_value(o, "v")];
                let _ = engine.write(&[cairn_engine::RecordBatch {
                    tp: tp.clone(),
                    records,
                }]);
            }
            let _ = engine.sync();
            // Asked before each step, the first included: it panics after
            // the first.
            let mut asked = 0;
            let _ = engine.truncate_by_while(
                &tp,
                |_| Ok(entries),
                || {
                    asked += 1;
                    assert!(asked < 2, "injected by the test");
                    true
                },
            );
        }
        panic!("injected by the test");
    }
    #[cfg(test)]
    if engine.config().path.ends_with(STALLS_SERVING) {
        while !stop.load(Ordering::SeqCst) {
            std::thread::park_timeout(HEARTBEAT);
        }
        return Ok(0);
    }
    #[cfg(test)]
    if engine.config().path.ends_with(STUCK_SERVING) {
        while !UNSTICK.load(Ordering::SeqCst) {
            std::thread::park_timeout(Duration::from_millis(10));
        }
        return Ok(0);
    }
    match req {
        Request::Status => crate::cli::status::serve(engine, out),
        Request::Export {
            selection,
            times,
            format,
        } => {
            let name = Path::new(SOCKET_FILE);
            // Checked as the command line checks it: a request written by
            // hand gets the same refusal of an empty range.
            times
                .check()
                .and_then(|()| selection.choose(engine.partitions(), &[]))
                .and_then(|chosen| {
                    // Said before the records, as a stopped archive's
                    // export says it; the client shows it at the end.
                    *warning = selection.starts_below_held(&chosen);
                    crate::cli::export::write_records(
                        engine, &chosen, selection, *times, *format, out, name, stop,
                    )
                })
                .map(|written| {
                    *records = written;
                    0
                })
        }
        Request::Verify => crate::cli::verify::serve(engine, stop, out),
        Request::Prune {
            selection,
            cut,
            dry_run,
        } => {
            // Each partition's line is sent as it is done: one left
            // in the buffer would be lost if the run stopped.
            let mut emit = |args: std::fmt::Arguments<'_>| {
                // In the run's log too: a client interrupted before
                // it showed a line leaves the record here.
                tracing::info!(report = %args, "live prune");
                out.write_fmt(args)
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush())
                    .map_err(socket_error)
            };
            // The selection and the cut are checked by `prune`.
            crate::cli::prune::prune(engine, selection, *cut, *dry_run, stop, &mut emit).map(|()| 0)
        }
        Request::Backup { to } if !to.is_absolute() => Err(ConnectorError::Live(format!(
            "backup to {}: the path must be absolute",
            to.display()
        ))),
        Request::Backup { to } => {
            // One at a time: two, each checking the free space for its own
            // copy alone, could together fill the archive's file system
            // (before 2026-12-03 up to four ran at once).
            let Some(_one) = Slot::take(backing_up, 1) else {
                return Err(ConnectorError::Live(format!(
                    "backup to {}: another live backup of this archive is being made; one at a time (two copies could fill the archive's disk): run it again once that one is done",
                    to.display()
                )));
            };
            let beside = room_for_backup(engine, to, BACKUP_HEADROOM_BYTES)?;
            let mut text = Vec::new();
            let made = match beside {
                None => crate::cli::backup::backup(engine, to, stop, &mut text),
                // On the archive's own file system: the space is watched
                // while the copy grows (until 2026-12-07 it was checked
                // once, at the start; found by a review).
                Some(at) => backup_watched(engine, to, &at, stop, &mut text),
            };
            made.and_then(|exit| {
                // Said here too: a client gone before it reads the report
                // leaves a finished copy, which is kept, and until
                // 2026-12-05 the run's log said only that the read ended
                // early (found in review).
                tracing::info!(to = %to.display(), exit, "live backup finished: the copy is kept (exit 0: verified clean; 1: its verify found damage, listed in the report)");
                out.write_all(&text).map_err(socket_error)?;
                Ok(exit)
            })
        }
    }
}

/// How long a stop waits for the requests being served to end after they
/// were cut off (each ends at its next check: a prune finishes the durable
/// step it is in).
const STOP_WAIT: Duration = if cfg!(test) {
    Duration::from_secs(1)
} else {
    Duration::from_secs(60)
};

/// Free space a live backup must leave on the archive's file system beyond
/// its copy, for the archiving beside it.
const BACKUP_HEADROOM_BYTES: u64 = 256 << 20;

/// A live backup on the archive's own file system (`at`: a path on it),
/// its free space watched while the copy grows ([`watch_space`]): the copy
/// gives up before the archiving beside it would run out, and says so.
fn backup_watched(
    engine: &Engine,
    to: &Path,
    at: &std::ffi::CStr,
    stop: &AtomicBool,
    text: &mut Vec<u8>,
) -> Result<u8> {
    let copy_stop = AtomicBool::new(false);
    let low = std::sync::Mutex::new(None);
    let made = std::thread::scope(|s| {
        let watcher = std::thread::Builder::new()
            .name("cairn-backup-space".into())
            .spawn_scoped(s, || {
                watch_space(
                    || free_bytes(at),
                    BACKUP_HEADROOM_BYTES / 2,
                    stop,
                    &copy_stop,
                    &low,
                )
            });
        // No thread for the watch (the OS refused one): the copy goes on
        // unwatched, checked once as before, and stops with the run itself.
        let copy_stops_with = match &watcher {
            Ok(_) => &copy_stop,
            Err(e) => {
                tracing::warn!(to = %to.display(), error = %e, "live backup: no thread to watch the free space beside the archive; backing up with the check made before the copy only");
                stop
            }
        };
        // Whatever the copy does, a panic included (sled's, on a damaged
        // archive), the watch ends: the scope waits for it before it
        // passes the panic on, to `serve`, which poisons the engine for it.
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            #[cfg(test)]
            if engine.config().path.ends_with(PANICS_BACKING_UP) {
                panic!("injected by the test");
            }
            crate::cli::backup::backup(engine, to, copy_stops_with, text)
        }));
        copy_stop.store(true, Ordering::SeqCst);
        if let Ok(w) = &watcher {
            w.thread().unpark();
        }
        made
    });
    let made = made.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let low = *low.lock().unwrap_or_else(|e| e.into_inner());
    match (made, low) {
        // The copy stopped by the watch: said why. Any other failure (the
        // copy's own disk full, its removal failing) is said as it is,
        // with the space beside it.
        (Err(ConnectorError::Engine(cairn_engine::Error::Interrupted { .. })), Some(free))
            if !stop.load(Ordering::SeqCst) =>
        {
            Err(ConnectorError::Live(format!(
                "backup to {}: stopped, its partial copy removed: the archive's file system, which it shares, fell to {} MiB free, below the {} MiB kept for the archiving beside it (a full disk would fail the archive's next write and stop the run); free space, or back up to another file system",
                to.display(),
                free >> 20,
                (BACKUP_HEADROOM_BYTES / 2) >> 20
            )))
        }
        (Err(e), Some(free)) => Err(ConnectorError::Live(format!(
            "{e} (the archive's file system, which the copy shares, had fallen to {} MiB free)",
            free >> 20
        ))),
        (made, _) => made,
    }
}

/// How often a live backup on the archive's own file system looks at its
/// free space ([`watch_space`]).
const SPACE_LOOK_INTERVAL: Duration = Duration::from_millis(100);

/// Watch a copy's shared file system while the copy is made: once
/// `free` says fewer than `floor` bytes are left, note what it said in
/// `low` and stop the copy (`copy_stop`, which the copy checks as it goes;
/// it then removes what it wrote). A stop of the run (`stop`) stops the
/// copy too. Ends once `copy_stop` is set, by either or by the copy's end
/// (which unparks this thread). A look that fails is taken as no answer:
/// the copy's own writes fail it if the space runs out.
fn watch_space(
    free: impl Fn() -> std::result::Result<u64, String>,
    floor: u64,
    stop: &AtomicBool,
    copy_stop: &AtomicBool,
    low: &std::sync::Mutex<Option<u64>>,
) {
    while !copy_stop.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            copy_stop.store(true, Ordering::SeqCst);
            return;
        }
        if let Ok(bytes) = free() {
            if bytes < floor {
                *low.lock().unwrap_or_else(|e| e.into_inner()) = Some(bytes);
                copy_stop.store(true, Ordering::SeqCst);
                return;
            }
        }
        std::thread::park_timeout(SPACE_LOOK_INTERVAL);
    }
}

/// Bytes an unprivileged writer may still use on the file system that
/// holds `path` (statvfs: `f_bavail` blocks of `f_frsize`).
#[allow(unsafe_code)]
fn free_bytes(path: &std::ffi::CStr) -> std::result::Result<u64, String> {
    // SAFETY: `path` is a NUL-terminated path; `vfs` is written by
    // statvfs before it is read, and only when it returns 0.
    unsafe {
        let mut vfs: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut vfs) != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok((vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64))
    }
}

/// Refuses a live backup into the archive's own file system that would
/// leave it less than `headroom` bytes free: the archiving beside
/// it would then fail a write, which poisons the engine and stops the run.
/// (Into another file system, running out only fails the backup, which
/// removes its partial copy.) On the archive's own file system, the path
/// whose free space the copy is to be watched by ([`watch_space`]).
fn room_for_backup(engine: &Engine, to: &Path, headroom: u64) -> Result<Option<std::ffi::CString>> {
    use std::os::unix::fs::MetadataExt;
    let archive = &engine.config().path;
    // A check that cannot be made is said, not skipped in silence (until
    // 2026-12-05 it was): the backup goes on without it, as the copy's own
    // writes then fail it where the space runs out.
    let unchecked = |why: String| {
        tracing::warn!(to = %to.display(), why, "live backup: the free space beside the archive could not be checked; backing up without the check (a copy that filled the archive's file system would fail the run's next write, and stop it)");
        Ok(None)
    };
    // The copy is made in `to`, created if missing: its nearest existing
    // ancestor says which file system it lands on.
    let Some(existing) = to.ancestors().find(|a| a.exists()) else {
        return unchecked("no part of the backup's path exists".into());
    };
    let (a, t) = match (std::fs::metadata(archive), std::fs::metadata(existing)) {
        (Ok(a), Ok(t)) => (a, t),
        (Err(e), _) | (_, Err(e)) => return unchecked(e.to_string()),
    };
    if a.dev() != t.dev() {
        return Ok(None);
    }
    let Ok(c_path) =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(existing.as_os_str()))
    else {
        return unchecked("the path holds a NUL byte".into());
    };
    let free = match free_bytes(&c_path) {
        Ok(free) => free,
        Err(e) => return unchecked(e),
    };
    let needed = engine.size_on_disk()?.saturating_add(headroom);
    if free < needed {
        return Err(ConnectorError::Live(format!(
            "backup to {}: it is on the archive's own file system, which has {} MiB free, and the copy with the {} MiB the archiving needs beside it takes about {} MiB: a full disk would fail the archive's next write and stop the run; free space, or back up to another file system",
            to.display(),
            free >> 20,
            headroom >> 20,
            needed >> 20
        )));
    }
    Ok(Some(c_path))
}

/// The request line, whole within [`REQUEST_TIMEOUT`] of the connection: a
/// client that trickles a byte now and then does not hold a slot longer.
/// `None` when there is no one to answer: the client hung up having sent
/// nothing, or the connection was cut off to make room.
fn read_request(
    conn: &UnixStream,
    heard: &mut dyn FnMut(Heard) -> bool,
) -> Option<(std::result::Result<Request, String>, Option<OwnedFd>)> {
    let mut unanswered = false;
    let mut proof = None;
    let request = read_request_line(conn, &mut unanswered, &mut proof, heard);
    (!unanswered).then_some((request, proof))
}

/// [`read_request`]'s work; `unanswered` is set when the connection ended
/// before its first byte, or `heard` says it was cut off once its line was
/// in (then the line is not parsed); `proof` to the first file descriptor
/// the client sent with its line ([`write_proof`]; any more are closed).
/// `heard` is told once its first bytes are read, and once it is read
/// whole (a line ended by the client's hang-up without its newline
/// included), and answers whether the connection is still listed.
fn read_request_line(
    conn: &UnixStream,
    unanswered: &mut bool,
    proof: &mut Option<OwnedFd>,
    heard: &mut dyn FnMut(Heard) -> bool,
) -> std::result::Result<Request, String> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut line = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let read = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break Err(format!(
                "no whole request line within {} s",
                REQUEST_TIMEOUT.as_secs_f64()
            ));
        }
        if let Err(e) = conn.set_read_timeout(Some(left)) {
            break Err(e.to_string());
        }
        let newline = match receive(conn, &mut buf, proof) {
            // The client's hang-up, or this end shut down to cut the
            // connection off (`cut_off_oldest_waiting`): whatever it had
            // sent was read first.
            Ok(0) => {
                *unanswered = line.is_empty() || !heard(Heard::Whole);
                break Ok(());
            }
            Ok(n) => {
                if line.is_empty() {
                    heard(Heard::Part);
                }
                // Only the new bytes are searched for the newline: the
                // line before them has none (a search of the whole line
                // per read took quadratic time, seconds at megabytes).
                let seen = line.len();
                line.extend_from_slice(&buf[..n]);
                line[seen..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map(|i| seen + i)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The read timeout (set to the time left) ran out.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => break Err(e.to_string()),
        };
        // Only the line counts toward the limit, not bytes after it.
        if newline.unwrap_or(line.len()) as u64 > REQUEST_BYTES_MAX {
            break Err(format!(
                "the request line is over {REQUEST_BYTES_MAX} bytes"
            ));
        }
        if let Some(end) = newline {
            line.truncate(end);
            *unanswered = !heard(Heard::Whole);
            break Ok(());
        }
    };
    // The watcher that follows waits for the client without a timeout.
    let _ = conn.set_read_timeout(None);
    read.map_err(|e| format!("reading the request: {e}"))?;
    // Cut off: its line is not parsed. Until 2026-12-06 (an audit) it was,
    // after any others over 1 MiB: a connection cut off counts toward no
    // limit, so a client that sent long lines without their newline and
    // connected again, cutting off its last, piled up lines of up to
    // 16 MiB each waiting their turn, beside the archiving run.
    if *unanswered {
        return Err("cut off to make room for another connection".into());
    }
    // A parse holds a few times the line's size (a long topic list's
    // strings): lines over 1 MiB are parsed one at a time, so that the
    // connections' lines parsed at once (before the slots, which come
    // after the request) do not add up beside the archiving run.
    static LARGE_PARSE: Mutex<()> = Mutex::new(());
    let _one_at_a_time =
        (line.len() > REQUEST_PARSED_AT_ONCE_BYTES_MAX).then(|| lock(&LARGE_PARSE));
    parse_request(&line).map_err(|e| format!("bad request: {e}"))
}

/// The longest request line parsed beside others (`read_request`).
const REQUEST_PARSED_AT_ONCE_BYTES_MAX: usize = 1 << 20;

/// A read of the request's bytes into `buf` that also takes the file
/// descriptors sent with them: the first is kept in `proof`, any other
/// closed (a plain read would close them all).
fn receive(
    conn: &UnixStream,
    buf: &mut [u8],
    proof: &mut Option<OwnedFd>,
) -> std::io::Result<usize> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        conn,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for fd in fds {
                if proof.is_none() {
                    *proof = Some(fd);
                }
            }
        }
    }
    Ok(got.bytes)
}

/// Whether the client showed it may write the archive: it sent the
/// archive's lock file opened for writing ([`write_proof`]). The socket
/// alone does not say so: its mode lets this user (and root) connect, and
/// the kernel checks no mount's read-only flag on a connect, so a process
/// that sees the archive through a read-only mount (a monitoring container
/// given it `:ro`, a service with `ReadOnlyPaths=`) reaches the socket as
/// well, and could otherwise prune the archive or have this run write a
/// backup wherever it may (seen in review, 2026-12-05). A file opened for
/// writing is a capability such a process cannot get through its own view:
/// the open fails with "read-only file system". One limit: a process of
/// the same user that can open the run's `/proc/<pid>/fd` (it shares the
/// run's PID namespace, with no `hidepid` or `ProtectProc=invisible`
/// between them) or is root can reopen the run's own descriptor of the
/// lock file, on the run's writable mount, and pass the check; a
/// container with a PID namespace of its own cannot (OPERATIONS.md).
fn may_write(engine: &Engine, proof: Option<OwnedFd>) -> std::result::Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let lock = engine.config().path.join(cairn_engine::LOCK_FILE);
    let refused = |why: String| {
        Err(format!(
            "refused: a prune or a backup of a running archive is served only to a client that can write the archive itself, and {why} (a client that sees the archive read-only, through a read-only mount, cannot; run the command where the archive is writable)"
        ))
    };
    let Some(fd) = proof else {
        return refused(format!(
            "this one did not show it can: it sends {} opened for writing with its request (a cairn of 2026-12-05 or later does)",
            lock.display()
        ));
    };
    let file = std::fs::File::from(fd);
    let mode = rustix::fs::fcntl_getfl(&file).map(|f| f & rustix::fs::OFlags::RWMODE);
    if !matches!(mode, Ok(m) if m == rustix::fs::OFlags::WRONLY || m == rustix::fs::OFlags::RDWR) {
        return refused("the file it sent is open for reading only".into());
    }
    let ours = match std::fs::metadata(&lock) {
        Ok(m) => m,
        Err(e) => {
            return Err(format!(
                "the running cairn cannot look at its own lock file {} ({e}) to check this client's proof that it may write the archive: nothing done",
                lock.display()
            ))
        }
    };
    let same = file
        .metadata()
        .is_ok_and(|sent| sent.dev() == ours.dev() && sent.ino() == ours.ino());
    if !same {
        return refused(format!("the file it sent is not {}", lock.display()));
    }
    Ok(())
}

/// The archive's lock file, opened for writing (nothing written, created
/// or cut): what a client sends with a request that [writes](Request::writes)
/// to show that it may write the archive (the server checks it in `may_write`). Fails, saying
/// so, where the archive is read-only to this process.
pub fn write_proof(data: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let lock = data.join(cairn_engine::LOCK_FILE);
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&lock)
        .map_err(|e| {
            ConnectorError::Live(format!(
                "{}: cannot open it for writing ({e}): the running cairn prunes or backs up its archive only for a client that can write the archive itself (is it mounted read-only here?); run the command where the archive is writable",
                lock.display()
            ))
        })
}

/// The longest path a socket address holds (`sun_path`, less its NUL).
const SOCKET_PATH_BYTES_MAX: usize = 107;

/// A name for the socket at `path` that fits in a socket address: `path`
/// itself, or, when it is longer than [`SOCKET_PATH_BYTES_MAX`], the same
/// file through `/proc/self/fd` and the directory held open (returned:
/// keep it until the bind or connect is done). A data directory deep in a
/// tree is then served and reached however its path is spelt.
fn socket_name(path: &Path) -> std::io::Result<(Option<std::fs::File>, PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    if path.as_os_str().as_bytes().len() <= SOCKET_PATH_BYTES_MAX {
        return Ok((None, path.to_owned()));
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok((None, path.to_owned()));
    };
    let dir = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name);
    Ok((Some(dir), short))
}

/// What [`connect_once`] found where the socket should be: a symbolic
/// link, which it does not follow.
#[derive(Debug)]
struct LinkRefused;

impl std::fmt::Display for LinkRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a symbolic link where the socket should be: not followed")
    }
}

impl std::error::Error for LinkRefused {}

/// How long a connect retries while the run's queue of connections not yet
/// taken is full: a burst of commands at once fills it for a moment.
const CONNECT_BUSY_FOR: Duration = Duration::from_secs(2);

/// Connect to the socket at `path`, waiting at most [`CONNECT_BUSY_FOR`]:
/// a listener whose queue of connections not yet taken stays full (a run
/// stopped with SIGSTOP and asked again and again) is `WouldBlock`, where a
/// blocking connect would wait for ever.
fn connect_now(path: &Path) -> std::io::Result<UnixStream> {
    let deadline = Instant::now() + CONNECT_BUSY_FOR;
    loop {
        match connect_once(path) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                // A backoff between attempts, not a synchronisation.
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// One non-blocking connect to the socket at `path`, never through a
/// symbolic link: the socket's own inode is opened without following one
/// (`O_PATH | O_NOFOLLOW`), and the connect made through that descriptor
/// (`/proc/self/fd/N`), so a link swapped in after [`connect`]'s check (in
/// a data directory others may write to, sticky: they cannot touch this
/// user's files, but can make a name that is not there) cannot send the
/// request to another socket, another archive's run of this user's
/// included, which the peer check trusts (since 2026-12-05; before, the
/// check and the connect were two steps). The descriptor's name is short
/// whatever the path's length (a socket address holds 107 bytes). Without
/// /proc, the path itself (a link is still refused, but by a check before
/// the connect).
fn connect_once(path: &Path) -> std::io::Result<UnixStream> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    use std::os::unix::io::AsRawFd;
    let pinned = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if FileType::from_raw_mode(rustix::fs::fstat(&pinned)?.st_mode) == FileType::Symlink {
        return Err(std::io::Error::other(LinkRefused));
    }
    let proc_fd = Path::new("/proc/self/fd");
    let through = if proc_fd.is_dir() {
        proc_fd.join(pinned.as_raw_fd().to_string())
    } else {
        path.to_owned()
    };
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(through)?)?;
    let conn = UnixStream::from(fd);
    conn.set_nonblocking(false)?;
    Ok(conn)
}

/// `conn`, to a socket at `path` served by a process of uid `peer`, if this
/// user (uid `me`) may trust it with a request: the peer is `me`, the
/// archive's owner (uid `owner`) or root. Else `None`, with a WARN: passed
/// over, not fatal, so the command opens the archive itself, which a run
/// of this archive refuses as it holds the lock. Refused outright (until
/// 2026-12-06, a review of live reads), a socket another user planted in
/// a sticky directory, where this user cannot remove it, kept every
/// command from a stopped archive.
fn served_by(conn: UnixStream, peer: u32, me: u32, owner: u32, path: &Path) -> Option<UnixStream> {
    if trusted_peer(peer, me, owner) {
        return Some(conn);
    }
    tracing::warn!(
        socket = %path.display(),
        "the socket is served by a process of uid {peer}, neither this user (uid {me}), the archive's owner (uid {owner}) nor root: not trusted with a request, passed over; the archive is read directly if no run holds it"
    );
    None
}

/// The running `cairn run` serving `data`, if one answers there. A socket
/// left by a run that did not stop cleanly refuses the connection, and the
/// archive is then opened as usual. A run that is there but takes no
/// connections (stopped, or wedged) is an error: opening the archive would
/// only be refused as locked.
///
/// The process serving the socket must be this user's, the archive
/// directory owner's, or root's: a socket planted by anyone else (in a
/// data directory others may write to), or a symbolic link there, is
/// passed over with a WARN (`None`, as a socket nobody serves), never sent
/// requests whose answers it could make up.
pub fn connect(data: &Path) -> Result<Option<UnixStream>> {
    let path = data.join(SOCKET_FILE);
    // A run binds its socket in place, never a link to one: a symbolic link
    // there (planted in a directory others may write to) would send the
    // request to whatever socket it names, another archive's run of this
    // user's included, which the peer check below trusts (before
    // 2026-12-03 it was followed). `connect_once` refuses one, also one
    // swapped in as it connects.
    match connect_now(&path) {
        Ok(conn) => {
            use std::os::unix::fs::MetadataExt;
            let peer = rustix::net::sockopt::socket_peercred(&conn)
                .map_err(|e| socket_error(e.into()))?
                .uid
                .as_raw();
            let me = rustix::process::geteuid().as_raw();
            let owner = std::fs::metadata(data)
                .map_err(|source| ConnectorError::Io {
                    path: data.to_owned(),
                    source,
                })?
                .uid();
            Ok(served_by(conn, peer, me, owner, &path))
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            Err(ConnectorError::Live(format!(
                "the running cairn at {} takes no connections: too many are waiting to be taken (is it stopped, or wedged?)",
                path.display()
            )))
        }
        Err(e) if e.get_ref().is_some_and(|e| e.is::<LinkRefused>()) => {
            tracing::warn!(
                socket = %path.display(),
                "a symbolic link, not the running cairn's socket: not trusted with a request, passed over; the archive is read directly if no run holds it"
            );
            Ok(None)
        }
        // The command then opens the archive itself and is refused as the
        // run holds it; this says why the run did not answer instead.
        // A directory this user may not look into refuses the connect
        // too, socket or not: that is said as what it is (until
        // 2026-12-07 it was the WARN below, of a socket that may not be
        // there, and the open's error then named another file; found by
        // an audit).
        Err(e)
            if e.kind() == std::io::ErrorKind::PermissionDenied
                && std::fs::symlink_metadata(&path)
                    .is_err_and(|m| m.kind() == std::io::ErrorKind::PermissionDenied) =>
        {
            // The directory at fault: the deepest one this user can see
            // but not look into (the archive's, or one above it; review of
            // the same day: the archive's was named whichever it was).
            let shut = path
                .ancestors()
                .skip(1)
                .find(|a| std::fs::symlink_metadata(a).is_ok())
                .unwrap_or(data);
            Err(ConnectorError::Io {
                path: data.to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("this user may not look into {} ({e})", shut.display()),
                ),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::warn!(
                socket = %path.display(),
                "the archive's socket refused this user (it is mode 0600): another user's cairn runs on this archive (run the command as that user), or a run of theirs was killed and left it"
            );
            Ok(None)
        }
        Err(_) => Ok(None),
    }
}

/// Whether a socket served by `peer` may be asked: this user's, the
/// archive directory owner's (`owner`) or root's process.
fn trusted_peer(peer: u32, me: u32, owner: u32) -> bool {
    peer == me || peer == owner || peer == 0
}

/// How long `status` waits for the running cairn's answer: it is quick
/// unless that process is wedged (stopped with SIGSTOP, say).
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an answer other than `status`'s may go without a frame: the
/// server sends a heartbeat as it takes the request and then every
/// `HEARTBEAT` (10 s), so a longer silence, the first included, means a process
/// that is wedged (stopped with SIGSTOP, say; the kernel completes a
/// connect, and takes the request, while the run's queue of connections not
/// yet taken has room). A server of before heartbeats (a run of a build
/// before 2026-12-02) answers a `verify`, `prune` or `backup` only as it
/// finishes: one that takes longer gets this error too, which names that
/// cause.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Send `req` and copy the answer's output to `out` (`out_name` in errors),
/// frame by frame as it arrives. A reader of `out` that went away (`| head`)
/// ends an export quietly, and the rest of another answer goes unshown, as
/// for a local command.
pub fn request(
    conn: UnixStream,
    req: &Request,
    out: &mut dyn Write,
    out_name: &Path,
) -> Result<End> {
    request_within(conn, req, None, out, out_name, IDLE_TIMEOUT)
}

/// [`request`] of the run serving the archive at `data`, sending with a
/// request that [writes](Request::writes) the proof it needs to be served
/// ([`write_proof`]; failing, as it does, where the archive is read-only
/// to this process).
pub fn request_for(
    data: &Path,
    conn: UnixStream,
    req: &Request,
    out: &mut dyn Write,
    out_name: &Path,
) -> Result<End> {
    let proof = req.writes().then(|| write_proof(data)).transpose()?;
    request_within(conn, req, proof.as_ref(), out, out_name, IDLE_TIMEOUT)
}

/// [`request`], with `proof` if given, giving up `idle` after the last
/// frame (status: after [`STATUS_TIMEOUT`] in all).
fn request_within(
    mut conn: UnixStream,
    req: &Request,
    proof: Option<&std::fs::File>,
    out: &mut dyn Write,
    out_name: &Path,
    idle: Duration,
) -> Result<End> {
    // Status is bounded as a whole: its heartbeats do not extend it.
    let (timeout, deadline) = match req {
        Request::Status => (Some(STATUS_TIMEOUT), Some(Instant::now() + STATUS_TIMEOUT)),
        _ => (Some(idle), None),
    };
    conn.set_read_timeout(timeout).map_err(socket_error)?;
    // The request is written within the same bound: a run stopped with
    // SIGSTOP still has its connections completed by the kernel, and a
    // request larger than the socket's buffer (a long --topic list) would
    // otherwise wait for ever to be written.
    conn.set_write_timeout(timeout).map_err(socket_error)?;
    let mut line = serde_json::to_vec(req).expect("Request serialises");
    line.push(b'\n');
    // The server counts the line without its newline.
    if line.len() as u64 - 1 > REQUEST_BYTES_MAX {
        return Err(ConnectorError::Live(format!(
            "this {} request is {} bytes, over the {REQUEST_BYTES_MAX} a running cairn takes: name fewer topics per command",
            req.name(),
            line.len()
        )));
    }
    // A server that refused at once (busy) may have closed before the
    // request arrived: its answer is still there to read, and says why.
    let sent = match proof {
        None => conn.write_all(&line),
        // The proof goes with the line's first byte, the rest after it.
        Some(proof) => {
            send_with(&conn, &line[..1], proof).and_then(|()| conn.write_all(&line[1..]))
        }
    };
    let mut conn = BufReader::with_capacity(FRAME_BYTES_MAX, conn);
    let mut out_gone = false;
    // Closed before a first frame: cut off before the request was read,
    // which the server does to an idle connection at its connection limit,
    // or stopping (a request taken gets a heartbeat at once, but a status
    // none, and the beat's thread may not have sent it yet).
    let unanswered = || {
        ConnectorError::Live(
            "the running cairn closed this connection before answering anything (it is shutting down, or it cut this connection off to make room for another at its connection limit): run the command again".into(),
        )
    };
    if let Err(e) = sent {
        // Not taken within the bound (a run stopped with SIGSTOP): said
        // as a silence is, without waiting the bound again for an answer
        // (until 2026-12-05 a bare "Resource temporarily unavailable",
        // after twice the bound).
        if let (Some(t), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =
            (timeout, e.kind())
        {
            return Err(no_answer_within(t));
        }
        return match read_frame(&mut conn, timeout) {
            Ok(Some((TAG_END, body))) => parse_end(&body),
            _ if peer_gone(&e) => Err(unanswered()),
            _ => Err(socket_error(e)),
        };
    }
    let mut framed = false;
    // The report's output failed (a full disk behind a redirect): the
    // answer is read on to its end, so that what the run did is known.
    let mut out_failed: Option<std::io::Error> = None;
    // An export's output goes out in whole lines: the server cuts its
    // frames where its buffer fills, not between records, so the bytes
    // after a frame's last newline wait here for the rest of their line. An
    // answer cut off (the run stopped) then leaves whole records behind,
    // as a local export does, not half a JSON line that a reader such as
    // `jq` fails on (until 2026-12-06; found by an audit).
    let whole_lines = matches!(req, Request::Export { .. });
    let mut partial: Vec<u8> = Vec::new();
    loop {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(no_answer_within(STATUS_TIMEOUT));
            }
            conn.get_ref()
                .set_read_timeout(Some(left))
                .map_err(socket_error)?;
        }
        let (tag, body) = match read_frame(&mut conn, timeout)? {
            Some(frame) => frame,
            None if !framed => return Err(unanswered()),
            None => {
                // Any answer is cut off once its output goes unread for
                // SEND_TIMEOUT (a verify's long list into a stalled pager,
                // say), not only an export's.
                let why = format!(
                    "it is shutting down or died, or it cut this {} off after its output went unread for {} minutes?",
                    req.name(),
                    SEND_TIMEOUT.as_secs() / 60
                );
                let again = match req {
                    // A run that stops cleanly removes its partial copy
                    // itself, within seconds: the advice said to remove it,
                    // racing that (until 2026-12-07; an audit).
                    Request::Backup { to } => format!(
                        "a run that stops cleanly, or cuts the backup off, removes its partial copy in {0} itself; one that died leaves it marked unfinished ({1}), for you to remove before running the command again",
                        to.display(),
                        cairn_engine::BACKUP_INCOMPLETE_FILE
                    ),
                    // What went out is whole lines (above): whole records
                    // but for raw values, which may hold newlines.
                    Request::Export { .. } => {
                        "what it wrote ends with a whole line, the line it was cut in left out; run the command again".into()
                    }
                    _ => "run the command again".into(),
                };
                return Err(ConnectorError::Live(format!(
                    "the running cairn stopped before it finished answering ({why}): {again}"
                )));
            }
        };
        framed = true;
        match tag {
            // A heartbeat: the server is alive, however long its answer
            // takes.
            TAG_OUTPUT if body.is_empty() => {}
            TAG_OUTPUT if out_gone || out_failed.is_some() => {}
            TAG_OUTPUT => match out.write_all(&if whole_lines {
                up_to_last_line(&mut partial, &body)
            } else {
                body
            }) {
                Ok(()) => {}
                // An export stops with its reader, as a local one does;
                // a verify, prune or backup goes on to its end, as a local
                // one does, its report no longer shown.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    if matches!(req, Request::Export { .. }) {
                        return Ok(End::reader_gone(None));
                    }
                    out_gone = true;
                }
                // An export's records are its output: it ends here. A
                // backup or a prune goes on, as a local one would have
                // done its step before the line failed.
                Err(source) if matches!(req, Request::Export { .. }) => {
                    return Err(ConnectorError::Io {
                        path: out_name.to_owned(),
                        source,
                    })
                }
                Err(source) => out_failed = Some(source),
            },
            TAG_END => {
                let end = parse_end(&body)?;
                // Whole now: an output that did not end in a newline (an
                // export's, which a failed write has ended already). Its
                // reader gone ends the export quietly, as above; another
                // failure keeps what the run said of its answer.
                if !partial.is_empty() {
                    match out.write_all(&partial) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                            return Ok(End::reader_gone(end.warning))
                        }
                        Err(source) => {
                            return Err(ConnectorError::Io {
                                path: out_name.to_owned(),
                                source: match &end.error {
                                    Some(error) => std::io::Error::new(
                                        source.kind(),
                                        format!("{source} (and the run's answer ended: {error})"),
                                    ),
                                    None => source,
                                },
                            })
                        }
                    }
                }
                let Some(source) = out_failed else {
                    return Ok(end);
                };
                // Said, so that the error is not taken for a request that
                // did nothing (until 2026-12-05 it was the error alone,
                // and a complete backup read as a failed one).
                let done = match (req, end.exit) {
                    _ if end.error.is_some() => format!(
                        "the running cairn's {} failed (exit {}: {})",
                        req.name(),
                        end.exit,
                        end.error.as_deref().unwrap_or_default()
                    ),
                    (Request::Backup { to }, 0) => format!(
                        "the backup is complete in {} (its verify found it clean)",
                        to.display()
                    ),
                    (Request::Backup { to }, 1) => format!(
                        "the backup is complete in {} (its verify found problems in it)",
                        to.display()
                    ),
                    (Request::Prune { dry_run: false, .. }, 0) => {
                        "the prune is complete (each partition pruned as asked)".to_owned()
                    }
                    (req, exit) => format!(
                        "the running cairn answered the {} to its end (exit {exit})",
                        req.name()
                    ),
                };
                crate::cli::say_warn!("{done}, but its report could not be written");
                return Err(ConnectorError::Io {
                    path: out_name.to_owned(),
                    source,
                });
            }
            tag => {
                return Err(ConnectorError::Live(format!(
                    "the running cairn answered with an unknown frame tag {tag:#04x}"
                )))
            }
        }
    }
}

/// Send `bytes` (a few: they go in one call) with `file`'s descriptor.
fn send_with(conn: &UnixStream, bytes: &[u8], file: &std::fs::File) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::os::fd::AsFd;
    let fds = [file.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the file descriptor"));
    }
    let sent = rustix::net::sendmsg(
        conn,
        &[std::io::IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    if sent < bytes.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            "the request's first bytes were not all sent",
        ));
    }
    Ok(())
}

/// An I/O error on the live-read socket, naming it.
pub(crate) fn socket_error(source: std::io::Error) -> ConnectorError {
    ConnectorError::Io {
        path: PathBuf::from(SOCKET_FILE),
        source,
    }
}

/// The next frame, or `None` at the end of the stream before one begins.
/// `timeout` is the one set on the stream, for the error.
fn read_frame(conn: &mut impl Read, timeout: Option<Duration>) -> Result<Option<(u8, Vec<u8>)>> {
    let gone = |source: std::io::Error| {
        if let (Some(t), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =
            (timeout, source.kind())
        {
            return no_answer_within(t);
        }
        socket_error(source)
    };
    let mut head = [0u8; 5];
    match conn.read_exact(&mut head) {
        Ok(()) => {}
        // Closed (or reset, when the run stopped with the connection still
        // waiting to be taken) before an answer began.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(gone(e)),
    }
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes")) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(ConnectorError::Live(format!(
            "the running cairn answered with a {len}-byte frame, over the {FRAME_BYTES_MAX} allowed"
        )));
    }
    let mut body = vec![0; len];
    match conn.read_exact(&mut body) {
        Ok(()) => Ok(Some((head[0], body))),
        // Cut off inside a frame (the server's send to a stalled client
        // timed out part-way, or it stopped): an unfinished answer, as a
        // close between frames is.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(gone(e)),
    }
}

fn no_answer_within(t: Duration) -> ConnectorError {
    ConnectorError::Live(format!(
        "the running cairn did not answer within {} s (is it stopped or wedged? a run of a build before 2026-12-02 sends no heartbeats while it works: run the command once it has stopped)",
        t.as_secs_f64()
    ))
}

/// What of `body` to write after `partial` (the bytes of a line begun in
/// an earlier frame): everything up to its last newline; the rest waits in
/// `partial` for its line's end.
fn up_to_last_line(partial: &mut Vec<u8>, body: &[u8]) -> Vec<u8> {
    match body.iter().rposition(|&b| b == b'\n') {
        None => {
            partial.extend_from_slice(body);
            Vec::new()
        }
        Some(end) => {
            let mut whole = std::mem::take(partial);
            whole.extend_from_slice(&body[..=end]);
            partial.extend_from_slice(&body[end + 1..]);
            whole
        }
    }
}

impl End {
    /// An export's end where its reader went away (`| head`): quiet, as a
    /// local export's, pid 0; `warning`, what the run had said by then.
    fn reader_gone(warning: Option<String>) -> End {
        End {
            exit: 0,
            error: None,
            pid: 0,
            warning,
            records: None,
        }
    }
}

fn parse_end(body: &[u8]) -> Result<End> {
    serde_json::from_slice(body)
        .map_err(|e| ConnectorError::Live(format!("the running cairn's answer did not parse: {e}")))
}

/// The exit code an answer ends with, its error (if any) printed as the
/// command's own would be.
pub fn exit_code(end: &End) -> std::process::ExitCode {
    if let Some(warning) = &end.warning {
        crate::cli::say_warn!("{warning}");
    }
    match &end.error {
        Some(e) => {
            crate::cli::say_stopped(e);
            std::process::ExitCode::from(end.exit.max(1))
        }
        None => std::process::ExitCode::from(end.exit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_engine::{EngineConfig, Record, RecordBatch, TopicPartition};
    use std::io::BufRead;

    /// A live backup that panics while the space beside it is watched
    /// answers (the watch ends with it) and poisons the engine, as a panic
    /// serving any request does; until a review of 2026-12-07 the watch
    /// outlived the panic, and the request hung, the engine unpoisoned.
    #[test]
    fn a_panic_in_a_watched_backup_answers_and_poisons() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join(PANICS_BACKING_UP);
        let e = engine(&data);
        let stopped = Arc::new(AtomicBool::new(false));
        let hook = stopped.clone();
        let on_poisoned: OnPoisoned = Box::new(move || hook.store(true, Ordering::SeqCst));
        let server = LiveServer::start_with(e.clone(), Some(on_poisoned)).unwrap();
        // The copy beside the archive, on its file system: watched.
        let req = Request::Backup {
            to: dir.path().join("copy"),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let asker = {
            let data = data.clone();
            std::thread::spawn(move || tx.send(ask(&data, &req)).unwrap())
        };
        let (end, _) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("no answer within 60 s: the backup's watch outlived its panic");
        asker.join().unwrap();
        assert_eq!(end.exit, 1, "{end:?}");
        let error = end.error.unwrap();
        assert!(
            error.contains("it panicked (injected by the test)") && error.contains("the run stops"),
            "{error}"
        );
        assert!(e.is_poisoned());
        assert!(stopped.load(Ordering::SeqCst), "the run stops");
        server.stop();
        assert_eq!(Arc::strong_count(&e), 1, "a thread kept the engine");
    }

    /// A backup's watch of the archive's file system stops the copy once
    /// the free space falls below its floor, saying how low it fell; a
    /// stop of the run stops it too, saying nothing of the space; a look
    /// that fails is no answer; the copy's end ends the watch.
    #[test]
    fn a_backup_beside_the_archive_stops_when_the_space_runs_low() {
        use std::sync::atomic::AtomicUsize;
        use std::sync::Mutex;
        let (stop, floor) = (AtomicBool::new(false), 100 << 20);
        // 1 GiB, a failed look, then 10 MiB.
        let looks = AtomicUsize::new(0);
        let free = || match looks.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(1 << 30),
            1 => Err("statvfs: no answer".to_string()),
            _ => Ok(10 << 20),
        };
        let (copy_stop, low) = (AtomicBool::new(false), Mutex::new(None));
        watch_space(free, floor, &stop, &copy_stop, &low);
        assert!(copy_stop.load(Ordering::SeqCst));
        assert_eq!(*low.lock().unwrap(), Some(10 << 20));
        assert_eq!(looks.load(Ordering::SeqCst), 3);
        // The run stopping: the copy stops, no space said.
        stop.store(true, Ordering::SeqCst);
        let (copy_stop, low) = (AtomicBool::new(false), Mutex::new(None));
        watch_space(|| Ok(1 << 30), floor, &stop, &copy_stop, &low);
        assert!(copy_stop.load(Ordering::SeqCst));
        assert_eq!(*low.lock().unwrap(), None);
        // The copy done first: the watch ends with nothing said.
        let stop = AtomicBool::new(false);
        let (copy_stop, low) = (AtomicBool::new(true), Mutex::new(None));
        watch_space(|| Ok(0), floor, &stop, &copy_stop, &low);
        assert_eq!(*low.lock().unwrap(), None);
    }

    fn engine(dir: &Path) -> Arc<Engine> {
        let e = Engine::open(EngineConfig::new(dir)).unwrap();
        let tp = TopicPartition::new("t", 0);
        let records = (0..5)
            .map(|o| Record::with_value(o, format!("v{o}")))
            .collect();
        e.append(&[RecordBatch { tp, records }]).unwrap();
        Arc::new(e)
    }

    /// A connect goes to the socket its name holds, through a descriptor
    /// of that inode, and never through a symbolic link: one swapped in
    /// after `connect`'s check is refused, not followed to the socket it
    /// names.
    #[test]
    fn a_connect_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("real.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let conn = connect_once(&sock).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let (a, b) = (
            rustix::net::sockopt::socket_peercred(&conn).unwrap().pid,
            rustix::net::sockopt::socket_peercred(&accepted)
                .unwrap()
                .pid,
        );
        assert_eq!(a, b);
        let link = dir.path().join("planted.sock");
        std::os::unix::fs::symlink(&sock, &link).unwrap();
        let e = connect_once(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        // Nothing reached the listener through the link.
        listener.set_nonblocking(true).unwrap();
        assert_eq!(
            listener.accept().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    }

    /// The first `o` frame with output, past the heartbeats.
    fn first_output(r: &mut impl Read) -> Vec<u8> {
        loop {
            match read_frame(r, None).unwrap() {
                Some((TAG_OUTPUT, body)) if body.is_empty() => continue,
                Some((TAG_OUTPUT, body)) => return body,
                other => panic!("expected output, got {other:?}"),
            }
        }
    }

    /// Ask, and read the connection to its end (the server's close, after
    /// its thread has given up its place): a test that connects again at
    /// once then finds the place free. Reading only to the end frame left
    /// it counted a moment longer, and a test at the limit could see an
    /// idle connection of its own cut off for it.
    fn ask(dir: &Path, req: &Request) -> (End, Vec<u8>) {
        let mut out = Vec::new();
        let conn = connect(dir).unwrap().expect("server answers");
        let mut rest = conn.try_clone().unwrap();
        let end = request_for(dir, conn, req, &mut out, Path::new("<test>")).unwrap();
        rest.read_to_end(&mut Vec::new()).unwrap();
        (end, out)
    }

    /// A client that hangs up having sent nothing gives its place back by
    /// the time its thread leaves `serve`, off both lists at once: until
    /// 2026-12-05 it left the waiting list first and stayed counted among
    /// the places until its thread's end, and a connection made meanwhile
    /// at the limit cut off a live client's waiting one (a flake of
    /// `a_bad_request_and_one_too_many_are_refused` under load).
    #[test]
    fn a_client_that_hangs_up_unsent_is_unlisted_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let shared = Shared::new(None);
        let (client, server) = UnixStream::pair().unwrap();
        lock(&shared.streams).push((7, server.try_clone().unwrap()));
        lock(&shared.waiting).push_back((7, Heard::Nothing));
        drop(client);
        serve(server, 7, &engine, &shared);
        assert!(lock(&shared.waiting).is_empty());
        assert!(lock(&shared.streams).is_empty(), "still counted as a place");
        engine.close().unwrap();
    }

    /// A request's first bytes are seen on the socket without being read
    /// off it (`cut_off_oldest_waiting` passes such a connection over).
    #[test]
    fn a_request_arrived_is_seen_without_being_taken() {
        use std::io::Write as _;
        let (mut client, server) = UnixStream::pair().unwrap();
        assert!(!request_arrived(&server), "nothing sent yet");
        client.write_all(b"{").unwrap();
        assert!(request_arrived(&server));
        assert!(request_arrived(&server), "peeked, not taken");
        let mut b = [0u8; 1];
        (&server).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"{");
        assert!(!request_arrived(&server), "taken now");
    }

    /// At the limit, the connection cut off for a new one is the oldest
    /// that has sent nothing, then the oldest part-way through its request
    /// line (a long line still coming, or a client that stalled), never one
    /// whose line was read whole (until 2026-12-06 one part-way through
    /// was cut off before an older silent one); and `read_request_line`
    /// says how much it has read.
    #[test]
    fn the_connection_cut_off_at_the_limit_is_the_one_that_sent_least() {
        use std::io::Write as _;
        let shared = Shared::new(None);
        let (mut whole, whole_server) = UnixStream::pair().unwrap();
        let (mut part, part_server) = UnixStream::pair().unwrap();
        let (_silent, silent_server) = UnixStream::pair().unwrap();
        for (id, s) in [(1, &whole_server), (2, &part_server), (3, &silent_server)] {
            lock(&shared.streams).push((id, s.try_clone().unwrap()));
            lock(&shared.waiting).push_back((id, Heard::Nothing));
        }
        // Connection 1's line is read whole (a bad one, refused by its
        // parse; still on the list, as a large line waiting its turn to be
        // parsed is, since `serve` takes it off only after the read).
        whole.write_all(b"{\"command\":\"nope\"}\n").unwrap();
        let mut told = Vec::new();
        let read = read_request_line(&whole_server, &mut false, &mut None, &mut |h| {
            told.push(h);
            shared.heard_from(1, h)
        });
        assert!(
            read.as_ref().is_err_and(|e| e.starts_with("bad request")),
            "{read:?}"
        );
        assert_eq!(told, [Heard::Part, Heard::Whole]);
        // Connection 2's first bytes are read, and its thread waits for the
        // rest: nothing left on its socket to peek.
        part.write_all(b"{\"command\":\"sta").unwrap();
        let mut first = [0u8; 15];
        (&part_server).read_exact(&mut first).unwrap();
        shared.heard_from(2, Heard::Part);
        assert!(!request_arrived(&part_server));
        let left = |shared: &Shared| -> Vec<u64> {
            lock(&shared.waiting).iter().map(|(id, _)| *id).collect()
        };
        assert!(shared.cut_off_oldest_waiting());
        assert_eq!(
            left(&shared),
            [1, 2],
            "the silent one goes first, though newest"
        );
        assert!(shared.cut_off_oldest_waiting());
        assert_eq!(left(&shared), [1], "then the one part-way through");
        assert!(!shared.cut_off_oldest_waiting(), "never one read whole");
    }

    /// A connection cut off to make room has its line, ended by the
    /// shutdown, left unparsed and unanswered (until 2026-12-06 it was
    /// parsed, after any other line over 1 MiB, and only then dropped:
    /// connections cut off count toward no limit, so their lines could
    /// pile up). A client that hangs up after a line without its newline,
    /// still listed, is answered as before.
    #[test]
    fn a_line_cut_off_is_not_parsed() {
        use std::io::Write as _;
        let status = b"{\"command\":\"status\"}";
        for (listed, newline) in [(true, false), (false, false), (false, true)] {
            let (mut client, server) = UnixStream::pair().unwrap();
            client.write_all(status).unwrap();
            if newline {
                client.write_all(b"\n").unwrap();
            }
            drop(client);
            let mut unanswered = false;
            let mut told = Vec::new();
            let read = read_request_line(&server, &mut unanswered, &mut None, &mut |h| {
                told.push(h);
                h != Heard::Whole || listed
            });
            assert_eq!(told, [Heard::Part, Heard::Whole]);
            if listed {
                assert!(matches!(read, Ok(Request::Status)), "{read:?}");
                assert!(!unanswered);
            } else {
                assert!(
                    read.as_ref().is_err_and(|e| e.contains("cut off")),
                    "parsed: {read:?}"
                );
                assert!(unanswered, "newline {newline}");
            }
        }
        // Through the server's lists: a connection no longer on them.
        let shared = Shared::new(None);
        let (mut client, server) = UnixStream::pair().unwrap();
        client.write_all(status).unwrap();
        drop(client);
        assert!(read_request(&server, &mut |h| shared.heard_from(9, h)).is_none());
    }

    /// A run serves only clients of its own user and root.
    #[test]
    fn only_its_own_user_and_root_are_served() {
        assert!(serves(1000, 1000));
        assert!(serves(0, 1000));
        assert!(!serves(1001, 1000));
        assert!(!serves(1000, 0), "root's run serves only root");
        // This process, on both ends.
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(untrusted_client(&a), None);
    }

    /// A socket is asked only when this user's, the archive owner's or
    /// root's process serves it.
    #[test]
    fn only_this_user_the_owner_or_root_is_trusted_to_serve() {
        // (peer, me, owner)
        for (peer, me, owner, trusted) in [
            (1000, 1000, 1000, true),
            (1000, 0, 1000, true),
            (0, 1000, 1000, true),
            (1001, 1000, 1001, true),
            (1001, 1000, 1000, false),
            (1002, 1000, 1001, false),
            (1002, 0, 1001, false),
        ] {
            assert_eq!(
                trusted_peer(peer, me, owner),
                trusted,
                "peer {peer}, me {me}, owner {owner}"
            );
        }
    }

    /// CONNECTIONS_MAX exports whose clients stopped reading hold their
    /// slots: another export is refused as busy, and a status is answered.
    #[test]
    fn slow_exports_do_not_turn_a_status_away() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Far more than the socket buffers hold: an export of it waits on
        // a client that does not read.
        let records = (0..20_000)
            .map(|o| Record::with_value(o, vec![b'v'; 100]))
            .collect();
        let tp = TopicPartition::new("t", 0);
        e.append(&[RecordBatch { tp, records }]).unwrap();
        let server = LiveServer::start(Arc::new(e)).unwrap();
        let export = Request::Export {
            selection: Selection::default(),
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Raw,
        };
        let send = |req: &Request| {
            let mut conn = connect(dir.path()).unwrap().unwrap();
            let mut line = serde_json::to_vec(req).unwrap();
            line.push(b'\n');
            conn.write_all(&line).unwrap();
            BufReader::new(conn)
        };
        let stalled: Vec<_> = (0..CONNECTIONS_MAX)
            .map(|_| {
                let mut conn = send(&export);
                // Its first records: the server holds a slot for it.
                assert!(!first_output(&mut conn).is_empty());
                conn
            })
            .collect();
        let mut refused = send(&export);
        let end = match read_frame(&mut refused, None).unwrap() {
            Some((TAG_END, body)) => parse_end(&body).unwrap(),
            other => panic!("{other:?}"),
        };
        assert_eq!(end.exit, 2, "{end:?}");
        assert!(end.error.unwrap().contains("already serving"));
        // Read to the end: the server has let go of that connection.
        refused.read_to_end(&mut Vec::new()).unwrap();
        let (end, out) = ask(dir.path(), &Request::Status);
        assert_eq!((end.exit, end.error), (0, None));
        assert!(!out.is_empty());
        drop(stalled);
        server.stop();
    }

    /// A client that sends part of a request line and then nothing is
    /// answered with an error once [`REQUEST_TIMEOUT`] has passed since it
    /// connected, and the connection is closed: it holds no place longer.
    /// A status asked meanwhile and after is answered.
    #[test]
    fn a_request_line_not_whole_in_time_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let server = LiveServer::start(engine(dir.path())).unwrap();
        // Before the connect: the server's deadline starts once it has
        // the connection.
        let started = Instant::now();
        let mut conn = connect(dir.path()).unwrap().unwrap();
        conn.write_all(br#"{"command":"sta"#).unwrap();
        let (end, out) = ask(dir.path(), &Request::Status);
        assert_eq!((end.exit, end.error), (0, None));
        assert!(!out.is_empty());
        // Bounded, so that a server that waited for ever fails the test
        // rather than hangs it.
        let bound = Duration::from_secs(60);
        conn.set_read_timeout(Some(bound)).unwrap();
        let mut conn = BufReader::new(conn);
        let end = match read_frame(&mut conn, Some(bound)).unwrap() {
            Some((TAG_END, body)) => parse_end(&body).unwrap(),
            other => panic!("{other:?}"),
        };
        assert!(started.elapsed() >= REQUEST_TIMEOUT);
        assert_eq!(end.exit, 2, "{end:?}");
        let error = end.error.unwrap();
        assert!(
            error.contains("no whole request line within 3 s"),
            "{error}"
        );
        assert_eq!(
            read_frame(&mut conn, Some(bound)).unwrap(),
            None,
            "then closed"
        );
        let (end, _) = ask(dir.path(), &Request::Status);
        assert_eq!((end.exit, end.error), (0, None));
        server.stop();
    }

    /// Status clients that stop reading mid-answer (suspended) are cut off
    /// after their short send timeout, not [`SEND_TIMEOUT`]: every listed
    /// place they held is free again, and the next request is served.
    #[test]
    fn stalled_status_clients_give_their_places_back() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Status rows for far more than the socket buffers hold.
        let batches: Vec<_> = (0..6_000)
            .map(|p| RecordBatch {
                tp: TopicPartition::new("a-topic-with-a-longer-name", p),
                records: vec![Record::with_value(0, b"v".to_vec())],
            })
            .collect();
        e.append(&batches).unwrap();
        let server = LiveServer::start(Arc::new(e)).unwrap();
        // Every place a status may take.
        let stalled: Vec<_> = (0..CONNECTIONS_MAX + STATUS_CONNECTIONS_RESERVED)
            .map(|_| {
                let mut conn = connect(dir.path()).unwrap().unwrap();
                conn.write_all(b"{\"command\":\"status\"}\n").unwrap();
                // Its first frame: the server is writing its answer.
                let mut r = BufReader::new(conn);
                assert!(matches!(read_frame(&mut r, None), Ok(Some(_))));
                r
            })
            .collect();
        // Served once the stalled answers are cut off (until 2026-12-05
        // refused as busy for 15 minutes).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Not `ask`: a refusal closes the connection with the request
            // unread, which resets the read to its end.
            let mut out = Vec::new();
            let conn = connect(dir.path()).unwrap().expect("server answers");
            let end = request(conn, &Request::Status, &mut out, Path::new("<test>")).unwrap();
            if end.exit == 0 {
                assert!(!out.is_empty());
                break;
            }
            assert!(
                end.error
                    .as_deref()
                    .is_some_and(|e| e.contains("already serving")),
                "{end:?}"
            );
            assert!(Instant::now() < deadline, "still busy after 60 s");
            // Pacing the retries, not synchronising with anything.
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(stalled);
        server.stop();
    }

    /// A reader of the output that went away ends an export, quietly, and
    /// not a verify (nor a prune or backup), which goes on to its end as a
    /// local one does.
    #[test]
    fn a_reader_gone_ends_an_export_but_not_a_verify() {
        struct Gone;
        impl Write for Gone {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let server = LiveServer::start(engine(dir.path())).unwrap();
        let ask_gone = |req: &Request| {
            request(
                connect(dir.path()).unwrap().unwrap(),
                req,
                &mut Gone,
                Path::new("<test>"),
            )
            .unwrap()
        };
        let verify = ask_gone(&Request::Verify);
        assert_eq!(
            (verify.exit, verify.pid),
            (0, std::process::id()),
            "the server's own end"
        );
        let export = ask_gone(&Request::Export {
            selection: Selection::default(),
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Raw,
        });
        assert_eq!((export.exit, export.pid), (0, 0), "ended by the client");
        server.stop();
    }

    /// A panic while serving (sled's on damage to its own files, or a bug)
    /// reaches the client as the request's error (a verify's "could not
    /// check", 2), poisons the engine and stops the run, whatever the
    /// request: what sled left in memory is not flushed (since the night
    /// of 2026-12-04; before, only a prune's stopped the run, and the
    /// others' went on writing through that sled). A panic in a prune's
    /// truncation poisons it by the engine's own guard.
    #[test]
    fn a_panic_serving_a_request_poisons_the_engine_and_stops_the_run() {
        let prune = |dry_run| Request::Prune {
            selection: Selection::default(),
            cut: crate::cli::prune::Cut::Offset(2),
            dry_run,
        };
        let requests = [
            (Request::Status, 1),
            (Request::Verify, 2),
            (prune(true), 1),
            (prune(false), 1),
        ];
        for (i, (req, exit)) in requests.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().join(i.to_string()).join(PANICS_SERVING);
            let e = engine(&data);
            let stopped = Arc::new(AtomicBool::new(false));
            let hook = stopped.clone();
            let on_poisoned: OnPoisoned = Box::new(move || hook.store(true, Ordering::SeqCst));
            let server = LiveServer::start_with(e.clone(), Some(on_poisoned)).unwrap();
            let (end, out) = ask(&data, &req);
            assert_eq!(end.exit, exit, "{req:?}: {end:?}");
            let error = end.error.unwrap();
            assert!(
                error.contains("it panicked (injected by the test)")
                    && error.contains("the run stops"),
                "{error}"
            );
            assert!(out.is_empty());
            assert!(e.is_poisoned(), "{req:?}");
            assert!(stopped.load(Ordering::SeqCst), "{req:?}: the run stops");
            // A request that finds the engine poisoned already is not
            // blamed.
            stopped.store(false, Ordering::SeqCst);
            ask(&data, &prune(false));
            ask(&data, &Request::Status);
            assert!(!stopped.load(Ordering::SeqCst));
            server.stop();
            assert_eq!(Arc::strong_count(&e), 1, "a thread kept the engine");
        }
    }

    /// An export answer cut off part-way (the run stopped) leaves whole
    /// lines in the output, the line its last frame began left out; one
    /// that ends writes everything, a last line without a newline too.
    #[test]
    fn a_cut_off_export_leaves_whole_lines() {
        let export = Request::Export {
            selection: Selection::default(),
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Jsonl,
        };
        for ends in [false, true] {
            let (client, mut server) = UnixStream::pair().unwrap();
            let serving = std::thread::spawn(move || {
                let mut line = String::new();
                BufReader::new(&server).read_line(&mut line).unwrap();
                // Frames cut where a buffer filled, not between lines.
                write_frame(&mut server, TAG_OUTPUT, b"{\"a\":1}\n{\"b\"").unwrap();
                write_frame(&mut server, TAG_OUTPUT, b":2}\n{\"c").unwrap();
                write_frame(&mut server, TAG_OUTPUT, b"\":").unwrap();
                if ends {
                    write_frame(&mut server, TAG_OUTPUT, b"3}").unwrap();
                    let end = End {
                        exit: 0,
                        error: None,
                        pid: 1,
                        warning: None,
                        records: None,
                    };
                    write_frame(&mut server, TAG_END, &end_frame(&end)).unwrap();
                }
                // Dropped: the connection closes.
            });
            let mut out = Vec::new();
            let answer = request(client, &export, &mut out, Path::new("<stdout>"));
            serving.join().unwrap();
            let out = String::from_utf8(out).unwrap();
            if ends {
                assert_eq!(answer.unwrap().exit, 0);
                assert_eq!(out, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}");
            } else {
                let err = answer.unwrap_err().to_string();
                assert!(err.contains("the line it was cut in left out"), "{err}");
                assert_eq!(out, "{\"a\":1}\n{\"b\":2}\n");
            }
        }
    }

    /// An export's last line without a newline is written at the answer's
    /// end: a reader gone then ends it quietly, as one gone mid-answer
    /// does, and another failure keeps what the run said of its answer.
    #[test]
    fn an_exports_last_line_is_written_at_its_end() {
        struct Failing(std::io::ErrorKind);
        impl Write for Failing {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from(self.0))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let export = Request::Export {
            selection: Selection::default(),
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Raw,
        };
        let answer = |out: &mut dyn Write| {
            let (client, mut server) = UnixStream::pair().unwrap();
            let serving = std::thread::spawn(move || {
                let mut line = String::new();
                BufReader::new(&server).read_line(&mut line).unwrap();
                write_frame(&mut server, TAG_OUTPUT, b"no newline").unwrap();
                let end = End {
                    exit: 1,
                    error: Some("damage at t/0".into()),
                    pid: 1,
                    warning: None,
                    records: None,
                };
                write_frame(&mut server, TAG_END, &end_frame(&end)).unwrap();
            });
            let r = request(client, &export, out, Path::new("<stdout>"));
            serving.join().unwrap();
            r
        };
        let mut out = Vec::new();
        let end = answer(&mut out).unwrap();
        assert_eq!((out.as_slice(), end.exit), (&b"no newline"[..], 1));
        let gone = answer(&mut Failing(std::io::ErrorKind::BrokenPipe)).unwrap();
        assert_eq!((gone.exit, gone.pid, gone.error), (0, 0, None));
        let err = answer(&mut Failing(std::io::ErrorKind::StorageFull))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the run's answer ended: damage at t/0"),
            "{err}"
        );
    }

    /// A client that closed its side after its request (`shutdown(SHUT_WR)`,
    /// which counts as a hang-up) is seen as gone once its line is read,
    /// without the watcher thread: a serve that finds it so starts with
    /// its client gone, and a prune then makes no step. One still
    /// connected, or with more bytes sent, is not.
    #[test]
    fn a_client_that_closed_its_side_is_hung_up() {
        let (mut client, server) = UnixStream::pair().unwrap();
        client.write_all(b"{\"command\":\"status\"}\n").unwrap();
        // The line read, as `read_request` takes it.
        let mut line = [0u8; 21];
        (&server).read_exact(&mut line).unwrap();
        assert!(!hung_up(&server) && !request_arrived(&server));
        client.write_all(b"x").unwrap();
        assert!(!hung_up(&server) && request_arrived(&server));
        (&server).read_exact(&mut [0u8; 1]).unwrap();
        client.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(hung_up(&server) && !request_arrived(&server));
    }

    /// An archive at `data`, served, and a verify asked of it: the
    /// engine, the server and the answer's reader.
    fn verify_asked(data: &Path) -> (Arc<Engine>, LiveServer, BufReader<UnixStream>) {
        let e = engine(data);
        let server = LiveServer::start(e.clone()).unwrap();
        let mut conn = connect(data).unwrap().unwrap();
        conn.write_all(b"{\"command\":\"verify\"}\n").unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        (e, server, BufReader::new(conn))
    }

    /// A request stuck where the stop cannot reach it (a system call on a
    /// hung mount) holds the run's stop only [`STOP_WAIT`]: the stop goes
    /// on without it (before 2026-12-03 it waited for ever), and the
    /// request's thread lets go of the engine once it is freed.
    #[test]
    fn a_stuck_request_does_not_hold_the_stop_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join(STUCK_SERVING);
        let (e, server, mut r) = verify_asked(&data);
        // Taken: the heartbeat sent as the request is.
        assert_eq!(
            read_frame(&mut r, None).unwrap(),
            Some((TAG_OUTPUT, Vec::new()))
        );
        assert!(!server.stop(), "the stop says it left a request behind");
        assert!(!data.join(SOCKET_FILE).exists(), "the socket is removed");
        assert!(
            Arc::strong_count(&e) > 1,
            "the stuck thread holds the engine"
        );
        UNSTICK.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Arc::strong_count(&e) > 1 {
            assert!(
                Instant::now() < deadline,
                "the freed thread kept the engine"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// An answer that takes long without output (a verify, an export's
    /// index scans) is kept alive by heartbeats, which write nothing; and a
    /// client that has seen one gives up once the server goes silent for
    /// its idle time (a run stopped with SIGSTOP), however long the answer
    /// could take.
    #[test]
    fn heartbeats_keep_a_long_answer_alive_and_silence_ends_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join(STALLS_SERVING);
        let (e, server, mut r) = verify_asked(&data);
        for _ in 0..3 {
            let frame = read_frame(&mut r, None).unwrap();
            assert_eq!(frame, Some((TAG_OUTPUT, Vec::new())));
        }
        // The client hanging up ends the answer; stop waits for it.
        drop(r);
        assert!(server.stop(), "every request ended");
        assert_eq!(Arc::strong_count(&e), 1, "a thread kept the engine");

        // A server that beat once and then went silent.
        let sock = dir.path().join("silent.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let silent = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut line = String::new();
            std::io::BufReader::new(&c).read_line(&mut line).unwrap();
            write_frame(&mut c, TAG_OUTPUT, &[]).unwrap();
            // Held open, silent, until the client gives up.
            let _ = c.read(&mut [0u8; 1]);
        });
        let conn = UnixStream::connect(&sock).unwrap();
        let mut out = Vec::new();
        let idle = Duration::from_millis(200);
        let got = request_within(
            conn,
            &Request::Verify,
            None,
            &mut out,
            Path::new("<test>"),
            idle,
        );
        let error = got.unwrap_err().to_string();
        assert!(error.contains("did not answer within 0.2 s"), "{error}");
        silent.join().unwrap();

        // A run frozen before it took the connection: the kernel completed
        // the connect and took the request, and no frame ever comes. Every
        // request gives up, not only an export.
        let frozen = dir.path().join("frozen.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&frozen).unwrap();
        for req in [
            Request::Verify,
            Request::Backup {
                to: dir.path().join("copy"),
            },
            // Larger than the socket's buffer: its write is what times out
            // (until 2026-12-05 "Resource temporarily unavailable").
            Request::Backup {
                to: dir.path().join("x".repeat(4 << 20)),
            },
        ] {
            let conn = UnixStream::connect(&frozen).unwrap();
            let got = request_within(conn, &req, None, &mut out, Path::new("<test>"), idle);
            let error = got.unwrap_err().to_string();
            assert!(error.contains("did not answer within 0.2 s"), "{error}");
        }
    }

    /// A run that takes no connections (its queue of connections not yet
    /// taken is full: stopped with SIGSTOP, and asked again and again) is
    /// an error at once, not a connect that waits for ever.
    #[test]
    fn a_server_taking_no_connections_is_an_error_not_a_hang() {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
        let dir = tempfile::tempdir().unwrap();
        let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
        let addr = SocketAddrUnix::new(dir.path().join(SOCKET_FILE)).unwrap();
        rustix::net::bind(&fd, &addr).unwrap();
        rustix::net::listen(&fd, 1).unwrap();
        let mut waiting = Vec::new();
        let error = loop {
            match connect(dir.path()) {
                Ok(Some(c)) => waiting.push(c),
                Ok(None) => panic!("the socket answers"),
                Err(e) => break e.to_string(),
            }
            assert!(waiting.len() < 1000, "the queue never filled");
        };
        assert!(error.contains("takes no connections"), "{error}");
        assert!(!waiting.is_empty());
    }

    /// A symbolic link where the socket belongs (planted by someone who may
    /// write in that directory) is passed over, not followed to the socket
    /// it names: this user's run of another archive would answer, and the
    /// peer check trusts it.
    #[test]
    fn a_socket_path_that_is_a_symbolic_link_is_passed_over() {
        let served = tempfile::tempdir().unwrap();
        let _listener =
            std::os::unix::net::UnixListener::bind(served.path().join(SOCKET_FILE)).unwrap();
        assert!(
            connect(served.path()).unwrap().is_some(),
            "the socket answers"
        );
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            served.path().join(SOCKET_FILE),
            other.path().join(SOCKET_FILE),
        )
        .unwrap();
        // Passed over (since 2026-12-06; before, refused with an error,
        // which kept every command from a stopped archive while it was
        // there): the command reads the archive itself.
        assert!(connect(other.path()).unwrap().is_none());
    }

    /// A socket served by a user this one may not trust (neither itself,
    /// the archive's owner nor root) is passed over, as a socket nobody
    /// serves, not sent a request; a trusted one is used (since 2026-12-06:
    /// before, an untrusted one failed the command).
    #[test]
    fn a_socket_served_by_an_untrusted_user_is_passed_over() {
        let path = Path::new("/data/cairn.sock");
        let conn = || UnixStream::pair().unwrap().0;
        assert!(served_by(conn(), 1001, 1000, 1002, path).is_none());
        for (peer, owner) in [(1000, 1002), (1002, 1002), (0, 1002)] {
            assert!(
                served_by(conn(), peer, 1000, owner, path).is_some(),
                "peer {peer}, owner {owner}"
            );
        }
    }

    /// A prune of topic `t` below offset 5 (all of `engine`'s records).
    fn prune_t_before_5(dry_run: bool) -> Request {
        Request::Prune {
            selection: Selection {
                topics: vec!["t".into()],
                ..Default::default()
            },
            cut: crate::cli::prune::Cut::Offset(5),
            dry_run,
        }
    }

    /// A prune or a backup is served only to a client that sends the
    /// archive's lock file opened for writing: not to one that sends
    /// nothing (an older cairn, or one that sees the archive through a
    /// read-only mount, where it cannot open the file so), the file opened
    /// for reading, or another file opened for writing. Nothing is pruned
    /// or made meanwhile; reads need no proof; with it, the prune is made.
    #[test]
    fn a_prune_or_backup_needs_proof_that_the_client_may_write() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let server = LiveServer::start(e.clone()).unwrap();
        let tp = TopicPartition::new("t", 0);
        let prune = prune_t_before_5(false);
        let copy = dir.path().with_extension("copy");
        let backup = Request::Backup { to: copy.clone() };
        let lock = dir.path().join(cairn_engine::LOCK_FILE);
        let other = dir.path().join("other");
        std::fs::write(&other, "").unwrap();
        let read_only = std::fs::File::open(&lock).unwrap();
        // A descriptor of the file that opens nothing (`O_PATH`).
        let path_only = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&lock)
            .unwrap();
        let not_the_lock = std::fs::OpenOptions::new()
            .write(true)
            .open(&other)
            .unwrap();
        for req in [&prune, &backup] {
            for (proof, why) in [
                (None, "this one did not show it can"),
                (Some(&read_only), "open for reading only"),
                (Some(&path_only), "open for reading only"),
                (Some(&not_the_lock), "the file it sent is not"),
            ] {
                let conn = connect(dir.path()).unwrap().expect("served");
                let mut rest = conn.try_clone().unwrap();
                let mut out = Vec::new();
                let end = request_within(
                    conn,
                    req,
                    proof,
                    &mut out,
                    Path::new("<test>"),
                    IDLE_TIMEOUT,
                )
                .unwrap();
                rest.read_to_end(&mut Vec::new()).unwrap();
                let error = end.error.unwrap_or_default();
                assert_eq!(end.exit, 2, "{}: {error}", req.name());
                assert!(
                    error.contains("only to a client that can write the archive itself")
                        && error.contains(why),
                    "{}: {error}",
                    req.name()
                );
                assert_eq!(e.partition(&tp).unwrap().first_offset, 0, "pruned");
                assert!(!copy.exists(), "a backup was made");
            }
        }
        let (end, _) = ask(dir.path(), &Request::Verify);
        assert_eq!((end.exit, end.error), (0, None), "a read needs no proof");
        let dry = prune_t_before_5(true);
        let (end, _) = ask(dir.path(), &dry);
        assert_eq!((end.exit, end.error), (0, None), "a dry run needs no proof");
        // `ask` sends the proof for a prune.
        let (end, _) = ask(dir.path(), &prune);
        assert_eq!((end.exit, end.error), (0, None));
        assert_eq!(e.partition(&tp).unwrap().first_offset, 5);
        server.stop();
    }

    /// Through a read-only bind mount of the archive's directory (what a
    /// monitoring container given it `:ro` sees), the socket is reached
    /// (the kernel checks no read-only flag on a connect) and a status is
    /// served, but a prune cannot be asked: the proof cannot be opened
    /// there. Needs root to mount; fails under CI without it.
    #[test]
    fn a_read_only_view_of_the_archive_reads_but_cannot_prune() {
        struct Mounted(PathBuf);
        impl Drop for Mounted {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("archive");
        let view = dir.path().join("view");
        std::fs::create_dir(&view).unwrap();
        let e = engine(&data);
        let mount = |args: &[&str]| {
            std::process::Command::new("mount")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let (d, v) = (data.to_str().unwrap(), view.to_str().unwrap());
        let bound = mount(&["--bind", d, v]);
        let _mounted = bound.then(|| Mounted(view.clone()));
        if !(bound && mount(&["-o", "remount,bind,ro", v])) {
            cairn_engine::fuzzing::skip("cannot make a read-only bind mount here (needs root)");
            return;
        }
        let server = LiveServer::start(e.clone()).unwrap();
        let (end, _) = ask(&view, &Request::Status);
        assert_eq!((end.exit, end.error), (0, None), "reads are served");
        let error = write_proof(&view).unwrap_err().to_string();
        assert!(
            error.contains("cannot open it for writing") && error.contains("Read-only file system"),
            "{error}"
        );
        let prune = prune_t_before_5(false);
        let conn = connect(&view).unwrap().expect("the socket is reached");
        let end = request(conn, &prune, &mut Vec::new(), Path::new("<test>")).unwrap();
        assert_eq!(end.exit, 2, "{:?}", end.error);
        assert_eq!(
            e.partition(&TopicPartition::new("t", 0))
                .unwrap()
                .first_offset,
            0
        );
        server.stop();
    }

    /// A data directory whose socket path is longer than a socket address
    /// holds is served, and reached, through `/proc/self/fd`.
    #[test]
    fn a_long_data_path_is_served() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("d".repeat(120));
        let e = engine(&data);
        let server = LiveServer::start(e.clone()).unwrap();
        let (end, out) = ask(&data, &Request::Status);
        assert_eq!(end.error, None);
        assert!(String::from_utf8(out).unwrap().contains("\"t\""));
        assert!(data.join(SOCKET_FILE).exists());
        server.stop();
        assert!(!data.join(SOCKET_FILE).exists());
    }

    /// A live export of a `--from` below a partition's first offset held
    /// ends with the WARN a stopped archive's export gives, for the client
    /// to say; one that starts within what is held, or gives no `--from`,
    /// has none. The field is left out of the JSON when empty, so that a
    /// client of before reads the end as it did.
    #[test]
    fn a_live_export_below_the_first_offset_held_warns_as_a_local_one_does() {
        let dir = tempfile::tempdir().unwrap();
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let records = (100..103)
            .map(|o| Record::with_value(o, format!("v{o}")))
            .collect();
        let tp = TopicPartition::new("t", 0);
        e.append(&[RecordBatch { tp, records }]).unwrap();
        let server = LiveServer::start(Arc::new(e)).unwrap();
        let export = |from| Request::Export {
            selection: Selection {
                from,
                ..Default::default()
            },
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Raw,
        };
        let (end, out) = ask(dir.path(), &export(50));
        assert_eq!((end.exit, end.error), (0, None));
        assert_eq!(out, b"v100\nv101\nv102\n");
        let warning = end.warning.expect("a warning");
        assert!(
            warning.contains("--from 50: below the first offset held of t/0 (100)"),
            "{warning}"
        );
        for from in [0, 100, 101] {
            let (end, out) = ask(dir.path(), &export(from));
            assert_eq!(
                (end.exit, end.error, end.warning),
                (0, None, None),
                "{from}"
            );
            assert!(!out.is_empty());
        }
        server.stop();
        let quiet = End {
            exit: 0,
            error: None,
            pid: 7,
            warning: None,
            records: None,
        };
        let json = String::from_utf8(end_frame(&quiet)).unwrap();
        assert!(!json.contains("warning"), "{json}");
        // A server of before sends no warning field.
        assert_eq!(
            parse_end(br#"{"exit":0,"error":null,"pid":7}"#).unwrap(),
            quiet
        );
    }

    #[test]
    fn serves_requests_and_lets_go_of_the_engine_at_stop() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        // A socket file left by a killed run is replaced.
        drop(std::os::unix::net::UnixListener::bind(dir.path().join(SOCKET_FILE)).unwrap());
        assert!(
            connect(dir.path()).unwrap().is_none(),
            "nobody answers a left-over socket"
        );
        let server = LiveServer::start(e.clone()).unwrap();
        let mode = std::fs::metadata(dir.path().join(SOCKET_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");

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
            times: crate::cli::export::TimeRange::default(),
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
        // told the answer did not finish. Nor does a deleted socket file.
        let idle = connect(dir.path()).unwrap().unwrap();
        // Its thread has taken it once a request after it is answered.
        ask(dir.path(), &Request::Status);
        std::fs::remove_file(dir.path().join(SOCKET_FILE)).unwrap();
        server.stop();
        let err = request(idle, &Request::Status, &mut Vec::new(), Path::new("<test>"));
        assert!(err.is_err(), "{err:?}");
        assert!(!dir.path().join(SOCKET_FILE).exists());
        assert_eq!(Arc::strong_count(&e), 1, "a thread kept the engine");
        // Nothing of the private directory the socket was bound in is left.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().starts_with(".live"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// An error longer than a client reads in a frame (a selection error
    /// listing a large archive's topics) arrives cut short, not as a frame
    /// the client refuses in its place: also when JSON's escaping makes
    /// each of its bytes six (control characters) or two (quotes).
    #[test]
    fn a_long_error_reaches_the_client_cut_short() {
        for unit in ["é", "\u{1}", "\""] {
            let end = End {
                exit: 1,
                error: Some(unit.repeat(FRAME_BYTES_MAX)),
                pid: 7,
                warning: None,
                records: None,
            };
            let mut wire = Vec::new();
            write_frame(&mut wire, TAG_END, &end_frame(&end)).unwrap();
            let mut r = BufReader::new(wire.as_slice());
            let (tag, body) = read_frame(&mut r, None).unwrap().unwrap();
            assert_eq!(tag, TAG_END);
            let got = parse_end(&body).unwrap();
            let e = got.error.unwrap();
            assert!(
                e.ends_with(" [...]") && e.len() <= END_ERROR_BYTES_MAX + 8,
                "{unit:?}: {}",
                e.len()
            );
            assert_eq!((got.exit, got.pid), (1, 7));
        }
    }

    #[test]
    fn a_bad_request_and_one_too_many_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let server = LiveServer::start(engine(dir.path())).unwrap();
        let mut conn = connect(dir.path()).unwrap().unwrap();
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
        // Each answer is read to its end (the server's close), which frees
        // its connection's slot before the busy check below.
        let to_the_end = |conn: &mut UnixStream| conn.read_to_end(&mut Vec::new()).unwrap();
        to_the_end(&mut conn);
        let refusal = |conn: &mut UnixStream| {
            let mut r = BufReader::new(conn);
            match read_frame(&mut r, None).unwrap() {
                Some((TAG_END, body)) => parse_end(&body).unwrap(),
                other => panic!("{other:?}"),
            }
        };
        // A line over the limit is refused without waiting for its end.
        let mut conn = connect(dir.path()).unwrap().unwrap();
        // (The server may close before all of it is written: its refusal
        // is still there to read.)
        let _ = conn.write_all(&vec![b' '; REQUEST_BYTES_MAX as usize + 4096]);
        let end = refusal(&mut conn);
        assert!(end
            .error
            .unwrap()
            .contains(&format!("over {REQUEST_BYTES_MAX} bytes")));
        to_the_end(&mut conn);
        // And so is one whose newline, past the limit, came in its last read.
        let mut conn = connect(dir.path()).unwrap().unwrap();
        let mut line = vec![b' '; REQUEST_BYTES_MAX as usize - 10];
        line.extend_from_slice(b"{\"command\":\"status\"}\n");
        conn.write_all(&line).unwrap();
        let end = refusal(&mut conn);
        assert!(end
            .error
            .unwrap()
            .contains(&format!("over {REQUEST_BYTES_MAX} bytes")));
        to_the_end(&mut conn);
        // A long line within the limit is read (a `--topic` list of a
        // thousand long names is about 250 KiB; until the night of
        // 2026-12-04 anything over 64 KiB was refused).
        let mut conn = connect(dir.path()).unwrap().unwrap();
        let mut line = vec![b' '; 256 * 1024];
        line.extend_from_slice(b"{\"command\":\"status\"}\n");
        conn.write_all(&line).unwrap();
        let mut r = BufReader::new(&mut conn);
        assert!(String::from_utf8(first_output(&mut r))
            .unwrap()
            .contains("\"t\""));
        r.read_to_end(&mut Vec::new()).unwrap();
        // A request over the limit is refused by the client before it is
        // sent, naming the limit.
        let conn = connect(dir.path()).unwrap().unwrap();
        let huge = Request::Export {
            selection: Selection {
                topics: vec!["t".repeat(249); (REQUEST_BYTES_MAX / 250) as usize + 1],
                ..Selection::default()
            },
            times: crate::cli::export::TimeRange::default(),
            format: crate::cli::export::Format::Raw,
        };
        match request(conn, &huge, &mut Vec::new(), Path::new("<test>")) {
            Err(ConnectorError::Live(m)) => {
                assert!(m.contains(&format!("over the {REQUEST_BYTES_MAX}")), "{m}")
            }
            other => panic!("{other:?}"),
        }
        // A request in pieces is read whole.
        let mut conn = connect(dir.path()).unwrap().unwrap();
        conn.write_all(b"{\"command\":").unwrap();
        conn.flush().unwrap();
        conn.write_all(b"\"status\"}\n").unwrap();
        let mut r = BufReader::new(&mut conn);
        assert!(String::from_utf8(first_output(&mut r))
            .unwrap()
            .contains("\"t\""));
        r.read_to_end(&mut Vec::new()).unwrap();

        // As many clients as may connect, sending nothing (yet), do not
        // turn the next away: the oldest of them gives its place, and is
        // cut off (it reads the end of the connection, no answer).
        let mut idle: Vec<UnixStream> = (0..CONNECTIONS_MAX + STATUS_CONNECTIONS_RESERVED)
            .map(|_| connect(dir.path()).unwrap().unwrap())
            .collect();
        let (end, out) = ask(dir.path(), &Request::Status);
        assert_eq!((end.exit, end.error), (0, None));
        assert!(!out.is_empty());
        let mut b = [0u8; 1];
        assert!(
            !matches!(idle[0].read(&mut b), Ok(n) if n > 0),
            "the oldest idle connection was answered, not cut off"
        );
        // Its client, writing its request only now, is told why, and to
        // try again (until the night of 2026-12-03: a bare broken pipe).
        let mut sink = Vec::new();
        let e = request(idle.remove(0), &Request::Status, &mut sink, Path::new("-"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("before answering anything") && e.contains("run the command again"),
            "{e}"
        );
        idle.insert(0, connect(dir.path()).unwrap().unwrap());
        // The others still wait for their requests, and get answers.
        let mut line = serde_json::to_vec(&Request::Status).unwrap();
        line.push(b'\n');
        idle[1].write_all(&line).unwrap();
        let mut r = BufReader::new(&mut idle[1]);
        assert!(!first_output(&mut r).is_empty());
        drop(idle);
        server.stop();
    }

    /// A live backup into the archive's own file system must leave the
    /// archiving room; one into another file system is not its concern.
    #[test]
    fn a_backup_that_would_fill_the_archives_disk_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(dir.path());
        let to = dir.path().join("copies").join("b1");
        match room_for_backup(&e, &to, 1 << 60) {
            Err(ConnectorError::Live(m)) => assert!(
                m.contains("on the archive's own file system") && m.contains("stop the run"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        room_for_backup(&e, &to, 0).unwrap();
        // Another file system (tmpfs), if this machine has one apart.
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            use std::os::unix::fs::MetadataExt;
            let other = std::fs::metadata(shm).unwrap().dev()
                != std::fs::metadata(dir.path()).unwrap().dev();
            if other {
                room_for_backup(&e, &shm.join("cairn-backup-test"), 1 << 60).unwrap();
            }
        }
    }

    /// One live backup at a time: a second, while one is being made, is
    /// refused before it looks at the target; the place is given back once
    /// a backup ends, failed or not.
    #[test]
    fn a_second_live_backup_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let e = engine(&dir.path().join("archive"));
        let (stream, _client) = UnixStream::pair().unwrap();
        let wire = Mutex::new(Wire {
            stream,
            stalled: false,
        });
        let mut out = FrameWriter {
            wire: &wire,
            buf: Vec::new(),
        };
        let stop = AtomicBool::new(false);
        let backing_up = AtomicUsize::new(1);
        let to = dir.path().join("b1");
        let req = Request::Backup { to: to.clone() };
        match answer(&req, &e, &stop, &backing_up, &mut out, &mut None, &mut None) {
            Err(ConnectorError::Live(m)) => {
                assert!(m.contains("another live backup of this archive"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(!to.exists(), "nothing made");
        assert_eq!(
            backing_up.load(Ordering::SeqCst),
            1,
            "the first still holds it"
        );
        backing_up.store(0, Ordering::SeqCst);
        assert_eq!(
            answer(&req, &e, &stop, &backing_up, &mut out, &mut None, &mut None).unwrap(),
            0
        );
        assert!(to.is_dir(), "backed up");
        assert_eq!(backing_up.load(Ordering::SeqCst), 0, "given back");
        // A failed one gives it back too (a relative path is refused first,
        // a target that holds something by the backup itself).
        assert!(answer(&req, &e, &stop, &backing_up, &mut out, &mut None, &mut None).is_err());
        assert_eq!(
            backing_up.load(Ordering::SeqCst),
            0,
            "given back after a failure"
        );
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
                    times: crate::cli::export::TimeRange::default(),
                    format: crate::cli::export::Format::Jsonl,
                },
                r#"{"command":"export","selection":{"topics":["t"],"partition":null,"from":0,"to":9},"format":"jsonl"}"#,
            ),
            (
                Request::Export {
                    selection: Selection::default(),
                    times: crate::cli::export::TimeRange {
                        from_ms: Some(1_700_000_000_000),
                        to_ms: None,
                    },
                    format: crate::cli::export::Format::Raw,
                },
                r#"{"command":"export","selection":{"topics":[],"partition":null,"from":0,"to":null},"times":{"from_ms":1700000000000},"format":"raw"}"#,
            ),
            (
                Request::Prune {
                    selection: Selection::default(),
                    cut: crate::cli::prune::Cut::KeepBytes(5),
                    dry_run: true,
                },
                r#"{"command":"prune","selection":{"topics":[],"partition":null,"from":0,"to":null},"cut":{"keep-bytes":5},"dry_run":true}"#,
            ),
            (
                Request::Backup { to: "/b/c".into() },
                r#"{"command":"backup","to":"/b/c"}"#,
            ),
        ];
        for (req, json) in cases {
            assert_eq!(serde_json::to_string(&req).unwrap(), json);
            assert_eq!(parse_request(json.as_bytes()).unwrap(), req);
        }
        // A field the server does not know is refused, not dropped: a
        // misspelt `partition` would read as none given, and the prune
        // take every partition. (serde lets `status` and `verify`, which
        // take no options, ignore extra fields: nothing is lost there.)
        for json in [
            r#"{"command":"prune","selection":{"topics":[],"partiton":0,"from":0,"to":null},"cut":{"offset":5},"dry_run":false}"#,
            r#"{"command":"prune","selection":{"topics":[],"partition":null,"from":0,"to":null},"cut":{"offset":5},"dry_run":false,"topic":"t"}"#,
            r#"{"command":"export","selection":{"topics":[],"partition":null,"from":0,"to":null,"until":9},"format":"jsonl"}"#,
            r#"{"command":"export","selection":{"topics":[],"partition":null,"from":0,"to":null},"times":{"from":9},"format":"jsonl"}"#,
            r#"{"command":"backup","to":"/b","force":true}"#,
        ] {
            let err = parse_request(json.as_bytes()).expect_err(json);
            assert!(err.to_string().contains("unknown field"), "{json}: {err}");
        }
        // No command, an unknown one, or the command twice.
        for (json, said) in [
            (r#"{"selection":{}}"#, "missing field `command`"),
            (r#"{"command":"delete"}"#, "unknown variant `delete`"),
            (
                r#"{"command":"status","command":"prune"}"#,
                "duplicate field `command`",
            ),
            (r#"{"command":"status""#, "EOF"),
        ] {
            let err = parse_request(json.as_bytes()).expect_err(json);
            assert!(err.to_string().contains(said), "{json}: {err}");
        }
        let end = End {
            exit: 1,
            error: Some("e".into()),
            pid: 7,
            warning: None,
            records: None,
        };
        assert_eq!(
            serde_json::to_string(&end).unwrap(),
            r#"{"exit":1,"error":"e","pid":7}"#
        );
    }

    /// Request lines mutated at random (seeded: `CAIRN_SEED` replays): the
    /// parse never panics, any request it takes reads back the same from
    /// the JSON it writes, and answering it (a backup's aside: its path
    /// could name any directory) never panics either, whatever it asks of
    /// the archive (refilled after a prune takes its records): a panic
    /// there would poison the running archive's
    /// engine (found missing in review, 2026-12-05: only fixed lines were
    /// tested).
    #[test]
    fn mutated_requests_neither_panic_nor_change_on_a_round_trip() {
        use rand::{Rng, SeedableRng};
        // A short run by default (20,000); `CAIRN_FUZZ_CASES` scales it
        // for a long one, 333 lines a case (the engine's fuzz corpus
        // takes 60 cases by default).
        let trials: usize = std::env::var("CAIRN_FUZZ_CASES").ok().map_or(20_000, |s| {
            (s.parse::<usize>().expect("CAIRN_FUZZ_CASES") * 333).max(333)
        });
        let seed = cairn_engine::fuzzing::seed("mutated_requests");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().unwrap();
        let e = engine(&dir.path().join("archive"));
        let (stream, client) = UnixStream::pair().unwrap();
        // Drained, so that no answer waits on a full socket.
        let drain = std::thread::spawn(move || std::io::copy(&mut &client, &mut std::io::sink()));
        let wire = Mutex::new(Wire {
            stream,
            stalled: false,
        });
        let bases: [&[u8]; 6] = [
            br#"{"command":"status"}"#,
            br#"{"command":"verify"}"#,
            br#"{"command":"export","selection":{"topics":["t"],"partition":0,"from":0,"to":null},"format":"jsonl"}"#,
            br#"{"command":"prune","selection":{"topics":["t"],"partition":null,"from":0,"to":null},"cut":{"offset":2},"dry_run":true}"#,
            br#"{"command":"prune","selection":{"topics":[],"partition":null,"from":0,"to":null},"cut":{"keep-bytes":5},"dry_run":false}"#,
            br#"{"command":"backup","to":"/b/c"}"#,
        ];
        let tokens: [&[u8]; 16] = [
            b"-1",
            b"0",
            b"9223372036854775807",
            b"-9223372036854775808",
            b"18446744073709551616",
            b"1e400",
            b"null",
            b"\"\"",
            b"[]",
            b"{}",
            b"true",
            b"\"t\"",
            b"\"\\u0000\"",
            b"\"time-ms\"",
            b"\"jsonl\"",
            b",",
        ];
        let (mut taken, mut answered) = (0, 0);
        for trial in 0..trials {
            let mut line = bases[rng.gen_range(0..bases.len())].to_vec();
            for _ in 0..rng.gen_range(1..=2) {
                let mut at = rng.gen_range(0..=line.len());
                let kind = rng.gen_range(0..10);
                if kind >= 3 {
                    // Most replace a value whole, so that the line stays
                    // JSON and reaches the request's own checks.
                    let values: Vec<usize> = (0..line.len())
                        .filter(|&i| matches!(line[i], b':' | b'['))
                        .map(|i| i + 1)
                        .collect();
                    if !values.is_empty() {
                        at = values[rng.gen_range(0..values.len())];
                    }
                }
                match kind {
                    0 if at < line.len() => line[at] = rng.gen(),
                    1 => {
                        let t = tokens[rng.gen_range(0..tokens.len())];
                        line.splice(at..at, t.iter().copied());
                    }
                    2 => {
                        let end = (at + rng.gen_range(1..8)).min(line.len());
                        line.drain(at..end);
                    }
                    _ => {
                        // A value replaced by a token.
                        let t = tokens[rng.gen_range(0..tokens.len())];
                        let end = line[at..]
                            .iter()
                            .position(|b| matches!(b, b',' | b'}' | b']'))
                            .map_or(line.len(), |i| at + i);
                        line.splice(at..end, t.iter().copied());
                    }
                }
            }
            let shown = String::from_utf8_lossy(&line).into_owned();
            let parsed = std::panic::catch_unwind(|| parse_request(&line)).unwrap_or_else(|_| {
                panic!("trial {trial}: parsing {shown} panicked (CAIRN_SEED={seed})")
            });
            let Ok(req) = parsed else { continue };
            taken += 1;
            let json = serde_json::to_vec(&req).unwrap();
            assert_eq!(
                parse_request(&json).ok().as_ref(),
                Some(&req),
                "trial {trial}: {shown} read back differently from {} (CAIRN_SEED={seed})",
                String::from_utf8_lossy(&json)
            );
            if matches!(req, Request::Backup { .. }) {
                continue;
            }
            let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut out = FrameWriter {
                    wire: &wire,
                    buf: Vec::new(),
                };
                answer(
                    &req,
                    &e,
                    &AtomicBool::new(false),
                    &AtomicUsize::new(0),
                    &mut out,
                    &mut None,
                    &mut None,
                )
            }));
            assert!(
                served.is_ok(),
                "trial {trial}: answering {shown} panicked (CAIRN_SEED={seed})"
            );
            answered += 1;
            // A prune that took records: the next answers get records
            // again, not an empty archive.
            let tp = TopicPartition::new("t", 0);
            if let Some(p) = e.partition(&tp).filter(|p| p.record_count < 5) {
                let records = (p.next_offset..p.next_offset + 5)
                    .map(|o| Record::with_value(o, format!("v{o}")))
                    .collect();
                e.append(&[RecordBatch { tp, records }]).unwrap();
            }
        }
        eprintln!("mutated requests: {taken} of {trials} taken, {answered} answered");
        // The mutations leave enough lines whole for the answers to run.
        assert!(
            answered > trials / 100,
            "{answered} answered (CAIRN_SEED={seed})"
        );
        assert!(!e.is_poisoned(), "CAIRN_SEED={seed}");
        drop(wire);
        drain.join().unwrap().unwrap();
    }

    #[test]
    fn a_broken_answer_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let listener =
            std::os::unix::net::UnixListener::bind(dir.path().join(SOCKET_FILE)).unwrap();
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
                connect(dir.path()).unwrap().unwrap(),
                &Request::Status,
                &mut Vec::new(),
                Path::new("<test>"),
            );
            assert!(matches!(r, Err(ConnectorError::Live(_))), "{r:?}");
        }
        server.join().unwrap();
    }
}

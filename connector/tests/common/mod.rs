//! Helpers shared by the binary's integration tests.
#![allow(dead_code, unused_imports)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub use cairn_engine::fuzzing::skip;

pub const CAIRN: &str = env!("CARGO_BIN_EXE_cairn");

/// The Kafka a test runs against: `cairn mock-broker` as a child (killed
/// on drop), or the real broker named by `CAIRN_TEST_BROKERS`. On a real
/// broker every topic and group a test names gets a suffix of this run's
/// own ([`TestBroker::topic`], [`TestBroker::group`]), and the topics are
/// created fresh, so that reruns and other tests' records never meet.
pub struct TestBroker {
    child: Option<Child>,
    pub brokers: String,
    /// `-<pid>-<nanos>` on a real broker, empty on the mock.
    suffix: String,
    /// The topics created on a real broker: deleted on drop.
    created: Vec<String>,
}

impl TestBroker {
    /// A broker with `topics` (`name:partitions`) created.
    pub fn start(topics: &[&str]) -> TestBroker {
        match std::env::var("CAIRN_TEST_BROKERS") {
            Ok(brokers) => Self::real(brokers, topics),
            Err(_) => Self::mock(topics),
        }
    }

    fn mock(topics: &[&str]) -> TestBroker {
        let mut cmd = Command::new(CAIRN);
        cmd.arg("mock-broker");
        for t in topics {
            cmd.args(["--topic", t]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let brokers = line
            .trim()
            .strip_prefix("bootstrap.servers=")
            .expect("first line")
            .to_owned();
        TestBroker {
            child: Some(child),
            brokers,
            suffix: String::new(),
            created: Vec::new(),
        }
    }

    fn real(brokers: String, topics: &[&str]) -> TestBroker {
        use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        // And a count: two tests of one binary can read the same clock.
        static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tb = TestBroker {
            child: None,
            brokers,
            suffix: format!("-{}-{nanos}-{n}", std::process::id()),
            created: Vec::new(),
        };
        let admin = admin(&tb.brokers);
        let named: Vec<(String, i32)> = topics
            .iter()
            .map(|t| {
                let (name, partitions) = t.split_once(':').expect("name:partitions");
                (tb.topic(name), partitions.parse().expect("partitions"))
            })
            .collect();
        let new: Vec<NewTopic<'_>> = named
            .iter()
            .map(|(name, partitions)| NewTopic::new(name, *partitions, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(std::time::Duration::from_secs(30)));
        for result in block_on(admin.create_topics(&new, &opts)).expect("create topics") {
            let name = result.expect("create a test topic on CAIRN_TEST_BROKERS");
            tb.created.push(name);
        }
        tb
    }

    /// The name of the test's topic `name` on this broker.
    pub fn topic(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// The name of the test's consumer group `name` on this broker.
    pub fn group(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// Whether this is `cairn mock-broker` (tests that need what only the
    /// mock has, such as its fixed retention, check it).
    pub fn is_mock(&self) -> bool {
        self.child.is_some()
    }

    /// Kill the mock broker (SIGKILL), as a broker that goes away for
    /// good. Only the mock: a real broker is not the test's to stop.
    pub fn kill(&mut self) {
        let child = self.child.as_mut().expect("only the mock broker is killed");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.created.is_empty() {
            return;
        }
        // Best effort, and never a panic (this may run while a failed test
        // unwinds): a broker gone by now keeps them.
        let names: Vec<&str> = self.created.iter().map(String::as_str).collect();
        let timeout = Some(std::time::Duration::from_secs(10));
        let opts = rdkafka::admin::AdminOptions::new()
            .request_timeout(timeout)
            .operation_timeout(timeout);
        let admin: Result<rdkafka::admin::AdminClient<_>, _> = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        if let (Ok(admin), Ok(rt)) = (admin, runtime) {
            let _ = rt.block_on(admin.delete_topics(&names, &opts));
        }
    }
}

fn admin(brokers: &str) -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client for CAIRN_TEST_BROKERS")
}

/// Drive an admin future to completion on this thread.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime for an admin request")
        .block_on(f)
}

/// librdkafka settings that let a restarted member replace a killed one fast.
pub const FAST_GROUP: [(&str, &str); 2] = [
    ("session.timeout.ms", "3000"),
    ("heartbeat.interval.ms", "300"),
];

/// Send `signal` (`INT`, `TERM`, `KILL`) to the process `pid`, asserting it
/// was sent. With kill(2), not kill(1): a minimal image has no procps.
pub fn send_signal(pid: u32, signal: &str) {
    let sig = match signal {
        "INT" => libc::SIGINT,
        "TERM" => libc::SIGTERM,
        "KILL" => libc::SIGKILL,
        other => panic!("no such signal here: {other}"),
    };
    // SAFETY: kill(2) takes a pid and a signal number; nothing is borrowed.
    #[allow(unsafe_code)]
    let sent = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        sent,
        0,
        "kill -{signal} {pid}: {}",
        std::io::Error::last_os_error()
    );
}

/// The flags every `cairn run` of the tests gives: its brokers, group,
/// topics and archive.
pub fn run_flags<'a>(
    brokers: &'a str,
    group: &'a str,
    topics: &'a str,
    data: &'a str,
) -> Vec<&'a str> {
    vec![
        "--brokers",
        brokers,
        "--group",
        group,
        "--topics",
        topics,
        "--data",
        data,
    ]
}

/// `cairn --log-format json run <args> -X <FAST_GROUP>...` as a child with
/// its stderr piped (the pipeline's debug events on, so a test can count
/// commits, and the engine's "opening store", so it can kill inside
/// recovery), with `CAIRN_ABORT_AT` set to `abort_at` or cleared.
pub fn cairn_run(args: &[&str], abort_at: Option<&str>) -> KillOnDrop {
    cairn_run_logging(
        args,
        abort_at,
        "info,cairn_connector::pipeline=debug,cairn_engine::open=debug",
    )
}

/// [`cairn_run`] with `rust_log` for `RUST_LOG`.
pub fn cairn_run_logging(args: &[&str], abort_at: Option<&str>, rust_log: &str) -> KillOnDrop {
    let mut cmd = Command::new(CAIRN);
    cmd.args(["--log-format", "json", "run"]).args(args);
    for (k, v) in FAST_GROUP {
        cmd.args(["-X", &format!("{k}={v}")]);
    }
    match abort_at {
        Some(a) => cmd.env("CAIRN_ABORT_AT", a),
        None => cmd.env_remove("CAIRN_ABORT_AT"),
    };
    cmd.env("RUST_LOG", rust_log)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    KillOnDrop::spawn(&mut cmd)
}

/// How long a `cairn run` child may live: a bound on a test that would
/// otherwise hang (a run that never commits, or never stops), not a
/// timing. Its log then ends, and the test fails saying what it waited for.
pub const CHILD_LIFETIME_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// SIGKILLs a child still alive after [`CHILD_LIFETIME_MAX`]; disarmed
/// when dropped. It holds a pidfd, not a pid: a child the test has already
/// reaped cannot be mistaken for another process given its pid since.
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl Watchdog {
    fn arm(child: &Child) -> Watchdog {
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        let Some(pidfd) = pidfd else {
            // Only the safety net is missing (a kernel before 5.3).
            eprintln!("watchdog: no pidfd for pid {pid}: not armed");
            return Watchdog(tx);
        };
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(CHILD_LIFETIME_MAX)
            {
                eprintln!(
                    "watchdog: cairn run (pid {pid}) still running after {} s: killing it",
                    CHILD_LIFETIME_MAX.as_secs()
                );
                // Fails harmlessly (ESRCH) for a child already gone.
                let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::KILL);
            }
        });
        Watchdog(tx)
    }
}

pub use cairn_connector::testing::run_bounded;

/// A child process that is killed (SIGKILL) and reaped when dropped, so a
/// test that fails (panics) leaves no `cairn run` behind to hold its group
/// and its broker's port, and to slow the tests after it.
pub struct KillOnDrop(pub Child, Watchdog);

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl KillOnDrop {
    /// Spawn `cmd`, to be killed when dropped or after
    /// [`CHILD_LIFETIME_MAX`], whichever comes first.
    pub fn spawn(cmd: &mut Command) -> KillOnDrop {
        let child = cmd.spawn().unwrap();
        let watchdog = Watchdog::arm(&child);
        KillOnDrop(child, watchdog)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Both fail harmlessly when the child was already waited for.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub use cairn_engine::fuzzing::seed;

pub use cairn_connector::testing::assert_committed_le_durable;

/// A count from the environment (`CAIRN_CRASH_ROUNDS`, ...), or `default`.
pub fn env_count(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("{name} must be a whole number"))
        })
        .unwrap_or(default)
}

/// The write end of a pipe whose reader is gone: every write to it fails
/// with EPIPE (cairn, like any Rust program, ignores SIGPIPE).
pub fn closed_pipe() -> std::process::ChildStdin {
    let mut reader = Command::new("true").stdin(Stdio::piped()).spawn().unwrap();
    let pipe = reader.stdin.take().unwrap();
    reader.wait().unwrap();
    pipe
}

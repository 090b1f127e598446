//! The `cairn` binary: bad input gets a clear one-line error and a non-zero
//! exit, and commits nothing; the read-back commands work on a real archive.

use std::process::{Command, Stdio};

mod common;
use common::{closed_pipe, TestBroker, CAIRN};

fn cairn(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(CAIRN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cairn run` with the required flags (group `g`) plus `extra`.
fn cairn_run(brokers: &str, topics: &str, data: &str, extra: &[&str]) -> (i32, String, String) {
    cairn_run_in("g", brokers, topics, data, extra)
}

/// `cairn <args>` with its stdout on `/dev/full` (every write ENOSPC): its
/// exit code and stderr.
fn cairn_into_dev_full(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(CAIRN)
        .args(args)
        .stdout(dev_full())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `/dev/full`, for writing: every write fails with ENOSPC.
fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

/// A stderr that cannot be written (a full disk behind it, a reader gone)
/// loses the error line but not the exit code: `eprintln!` panicked there,
/// and the process exited 101 in place of the 1 or 2 the line was about
/// (seen in review, 2026-12-05).
#[test]
fn an_unwritable_stderr_keeps_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-archive");
    let missing = missing.to_str().unwrap();
    let on_full_stderr = |args: &[&str]| {
        let out = Command::new(CAIRN)
            .args(args)
            .stderr(dev_full())
            .output()
            .unwrap();
        out.status.code()
    };
    for (args, code) in [
        (vec!["status", "--data", missing], 1),
        (vec!["--log-format", "json", "status", "--data", missing], 1),
        (vec!["verify", "--data", missing], 2),
        (vec!["--log-format", "json", "run", "--no-such-flag"], 2),
    ] {
        // The same exit with a stderr that takes the line.
        assert_eq!(cairn(&args).0, code, "{args:?}");
        assert_eq!(on_full_stderr(&args), Some(code), "{args:?}");
    }
}

/// [`cairn_run`] in `group`.
fn cairn_run_in(
    group: &str,
    brokers: &str,
    topics: &str,
    data: &str,
    extra: &[&str],
) -> (i32, String, String) {
    let mut args = vec!["run"];
    args.extend(common::run_flags(brokers, group, topics, data));
    args.extend_from_slice(extra);
    cairn(&args)
}

/// `--data` that is neither an archive nor new or empty (a mistyped path,
/// a volume not mounted yet) is refused before anything is written into
/// it: a second archive there would resume from Kafka's offsets and keep
/// the records it takes apart from the real one.
/// A command line clap refuses: the rest of a credential the shell split
/// at a space (an unquoted `-X sasl.password=$PW`) is not quoted, and
/// under `--log-format json` the refusal is one JSON line, exit 2 either
/// way (since 2026-12-05; before, clap quoted the word, in text).
#[test]
fn a_refused_command_line_shows_no_credential_and_keeps_the_log_format() {
    let split = [
        "run",
        "--brokers",
        "b:1",
        "--group",
        "g",
        "--topics",
        "t",
        "--data",
        "/nonexistent",
        "-X",
        "sasl.password=hunter2",
        "part2",
    ];
    let (code, _, stderr) = cairn(&split);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        !stderr.contains("hunter2") && !stderr.contains("part2"),
        "{stderr}"
    );
    assert!(stderr.contains("unexpected argument"), "{stderr}");
    // A credential behind an empty key, which clap quotes as it refuses
    // it (shown until 2026-12-07; found by an audit).
    for x in [
        &["-X", "=sasl.password=hunter2"][..],
        &["-X==sasl.password=hunter2"][..],
    ] {
        let mut args = split[..9].to_vec();
        args.extend_from_slice(x);
        let (code, _, stderr) = cairn(&args);
        assert_ne!(code, 0, "{stderr}");
        assert!(!stderr.contains("hunter2"), "{x:?}: {stderr}");
    }
    // A setting whose value only names a credential word (a path) keeps
    // its key, so that clap's error is still the flag at fault's (a first
    // version hid such a -X whole, and clap refused it instead).
    let mut args = split[..9].to_vec();
    args.extend_from_slice(&[
        "-X",
        "ssl.key.location=/etc/kafka/client-key.pem",
        "--retain-bytes",
        "50",
    ]);
    let (code, _, stderr) = cairn(&args);
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--retain-bytes") && !stderr.contains("'<not shown>'"),
        "{stderr}"
    );
    let (code, _, stderr) = cairn(&["--log-format", "json", "run", "--commit", "bogus"]);
    assert_eq!(code, 2, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert!(
        line["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("--commit"),
        "{line}"
    );
    // A command's own report of why it could not check, too (verify wrote
    // it as text until 2026-12-05).
    let (code, _, stderr) = cairn(&["--log-format", "json", "verify", "--data", "/nonexistent"]);
    assert_eq!(code, 2, "{stderr}");
    for line in stderr.lines() {
        let line: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            line["fields"]["error"]
                .as_str()
                .unwrap()
                .contains("could not verify"),
            "{line}"
        );
    }
    // Help is no error.
    let (code, stdout, _) = cairn(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Usage: cairn run"), "{stdout}");
}

/// A `--data` that is a file is said to be no directory by every command
/// that reads an archive (until 2026-12-05 the watermark's read error:
/// "Not a directory" on FILE/cairn.durable), and left as it was.
#[test]
fn a_data_path_that_is_a_file_is_said_to_be_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hostname");
    std::fs::write(&file, "box\n").unwrap();
    let f = file.to_str().unwrap();
    let copy = dir.path().join("copy");
    let copy = copy.to_str().unwrap();
    for (args, exit) in [
        (&["status", "--data", f][..], 1),
        (&["export", "--data", f], 1),
        (&["prune", "--data", f, "--topic", "t", "--before", "1"], 1),
        (&["backup", "--data", f, "--to", copy], 1),
        (&["restore", "--data", f, "--brokers", "127.0.0.1:1"], 1),
        (&["verify", "--data", f], 2),
    ] {
        let (code, _, err) = cairn(args);
        assert_eq!(code, exit, "{args:?}: {err}");
        assert!(
            err.contains(&format!("--data {f}: not a directory")),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "box\n");
    assert!(!dir.path().join("copy").exists());
    // A path with nothing there is said alike by each (verify said "i/o
    // error during open store on DIR: no cairn store here" until
    // 2026-12-07).
    let none = dir.path().join("none");
    let n = none.to_str().unwrap();
    for (args, exit) in [
        (&["status", "--data", n][..], 1),
        (&["export", "--data", n], 1),
        (&["verify", "--data", n], 2),
    ] {
        let (code, _, err) = cairn(args);
        assert_eq!(code, exit, "{args:?}: {err}");
        assert!(
            err.contains(&format!("--data {n}: no cairn archive there"))
                && !err.contains("i/o error"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn run_refuses_a_data_directory_that_is_not_an_archive() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not an archive").unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", d, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not a cairn archive, and not empty (it holds notes.txt, photos)"),
        "{err}"
    );
    assert!(!dir.path().join("sled").exists(), "nothing written");
    assert!(!dir.path().join("cairn.lock").exists(), "nothing written");
    // A name like the archive's own files is not one of them (before
    // 2026-12-03 any `cairn.*` passed): a mistyped --data of a log folder.
    let logs = tempfile::tempdir().unwrap();
    std::fs::write(logs.path().join("cairn.log"), "a log").unwrap();
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", logs.path().to_str().unwrap(), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("(it holds cairn.log)"), "{err}");
    assert!(!logs.path().join("sled").exists(), "nothing written");
}

/// A failed run leaves none of `--data` and the folders above it (`a/b/c`
/// with no `a`; before 2026-12-03 `a/b` stayed; since 2026-12-04 an
/// unreachable broker is found before any is made, and their removal is
/// seen in `a_run_stopped_before_any_assignment_leaves_no_new_directory`);
/// and `--data` naming a file is refused as not a directory.
#[test]
fn a_failed_run_removes_every_folder_it_made_and_a_file_is_no_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("a").join("b").join("c");
    let (code, _, err) = cairn_run(
        "127.0.0.1:1",
        "t",
        deep.to_str().unwrap(),
        &["--connect-timeout-ms", "500"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(!dir.path().join("a").exists(), "{err}");
    let file = dir.path().join("afile");
    std::fs::write(&file, "not an archive").unwrap();
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", file.to_str().unwrap(), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not a directory"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not an archive");
}

/// `-X check.crcs=false` is allowed, but said at WARN before anything
/// else: a copied client command line can carry it, and damaged batches
/// would then be archived as they arrive. The default says nothing of it.
#[test]
fn switching_off_the_batch_crc_check_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let data = data.to_str().unwrap();
    let (code, _, err) = cairn_run(
        "127.0.0.1:1",
        "t",
        data,
        &["--connect-timeout-ms", "200", "-X", "check.crcs=false"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("WARN")
            && err.contains("-X check.crcs=false")
            && err.contains("will not check the CRC"),
        "{err}"
    );
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", data, &["--connect-timeout-ms", "200"]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("check.crcs"), "{err}");
}

/// A size bound that one entry can outgrow is said at WARN before
/// anything else: entries are cut at about 1 MiB and hold their last
/// record whole, so with records of up to `--record-bytes-max` a bound
/// below their sum can empty a partition at every pass (until 2026-12-07
/// only a bound below 1 MiB was said).
#[test]
fn a_size_bound_one_entry_can_outgrow_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let data = data.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["--connect-timeout-ms", "200"];
        args.extend_from_slice(extra);
        let (code, _, err) = cairn_run("127.0.0.1:1", "t", data, &args);
        assert_eq!(code, 1, "{err}");
        err
    };
    // The default record bound is 8 MiB: 5 MiB is below 1 MiB plus it.
    let err = run(&["--retain-bytes", "5MiB"]);
    assert!(
        err.contains("WARN")
            && err.contains("--retain-bytes 5242880B")
            && err.contains("up to --record-bytes-max (8388608B)")
            && err.contains("a bound of at least 9437184B"),
        "{err}"
    );
    // Below 1 MiB: the entry's own size is what is said.
    let err = run(&["--retain-bytes", "512KiB"]);
    assert!(
        err.contains("--retain-bytes 524288B: entries") && !err.contains("--record-bytes-max ("),
        "{err}"
    );
    // Room for a whole entry and its largest record: nothing said.
    for args in [
        &["--retain-bytes", "5MiB", "--record-bytes-max", "1MiB"][..],
        &["--retain-bytes", "9MiB"][..],
    ] {
        let err = run(args);
        assert!(!err.contains("retain-bytes"), "{args:?}: {err}");
    }
}

/// A run that cannot join its group says so, each connect timeout, rather
/// than sit idle without a word: here the group waits for a member that
/// holds the partition and stopped polling, so the join waits out its
/// rebalance (librdkafka logs nothing above debug meanwhile, as it does
/// for a coordinator that never comes).
#[test]
fn a_run_that_cannot_join_its_group_says_so() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let mb = TestBroker::start(&["join:1"]);
    let (topic, group) = (mb.topic("join"), mb.group("join-group"));
    let first: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &mb.brokers)
        .set("group.id", &group)
        // cairn's own strategy: a real broker refuses a member whose
        // protocols the group does not share.
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("max.poll.interval.ms", "120000")
        .create()
        .unwrap();
    first.subscribe(&[&topic]).unwrap();
    // A bound on a hung join, not a timing.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while first.assignment().unwrap().count() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first member never joined"
        );
        let _ = first.poll(std::time::Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut args = common::run_flags(&mb.brokers, &group, &topic, d);
    args.extend(["--connect-timeout-ms", "2000"]);
    let mut run = common::cairn_run(&args, None);
    let said = logged_before_a_commit(&mut run, "not in the group yet: no partitions assigned");
    assert!(
        said.is_some(),
        "the run ended without saying it could not join"
    );
    drop(first);
}

/// An archived partition the group has no committed offset for (a new
/// group; or Kafka dropped the offsets with a deleted topic, whose
/// recreation offsets alone cannot show) gets a WARN at its assignment.
#[test]
fn an_archived_partition_without_a_committed_offset_is_warned_about() {
    // Partition 0's log (20 records) has grown past the archive's (10).
    let mb = TestBroker::start(&["nocommit:3"]);
    let (topic, group) = (mb.topic("nocommit"), mb.group("nocommit-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..60).unwrap();
    let dir = archive_of_ten(&topic);
    let d = dir.path().to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    let warned = logged_before_a_commit(&mut run, "the group has no committed offset for them")
        .expect("the run ended without the warning");
    assert!(warned.contains(&format!("{topic}/0@10")), "{warned}");
}

/// A run whose Kafka goes away for good says so again and again, as a run
/// that has not joined yet does: until 2026-12-07 it said one WARN as the
/// group took its partitions away as lost, and then nothing of its own,
/// alive and archiving nothing (found by an audit). Mock only: a real
/// broker is not the test's to kill.
#[test]
fn a_run_whose_kafka_goes_away_keeps_saying_so() {
    use std::io::{BufRead, BufReader};
    let mut mb = TestBroker::start(&["gone:3"]);
    if !mb.is_mock() {
        cairn_engine::fuzzing::skip("kills the broker: the mock only");
        return;
    }
    let (topic, group) = (mb.topic("gone"), mb.group("gone-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..10).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut args = common::run_flags(&mb.brokers, &group, &topic, d);
    args.extend(["--connect-timeout-ms", "1000", "--progress-interval-s", "1"]);
    let mut run = common::cairn_run(&args, None);
    let mut lines = BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok);
    lines
        .find(|l| l.contains(r#""message":"commit""#))
        .expect("the run ended before its first commit");
    mb.kill();
    let needle = "no partitions assigned since the group took this member's away as lost";
    let mut said = 0;
    for line in lines.by_ref() {
        if line.contains(needle) {
            said += 1;
            if said == 2 {
                // With the group's state from librdkafka's statistics,
                // which come every second here.
                assert!(
                    line.contains(r#""group_state":""#) && !line.contains("unknown yet"),
                    "{line}"
                );
                break;
            }
        }
    }
    assert_eq!(said, 2, "the run's log ended");
    common::send_signal(run.id(), "TERM");
    let rest: Vec<String> = lines.collect();
    assert_eq!(run.wait().unwrap().code(), Some(0), "{rest:?}");
}

/// A record with a header name holding a NUL byte (Kafka allows it; a
/// Java producer can send one) stops the run, which archives nothing
/// changed: librdkafka's C API cuts such a name short, and until
/// 2026-12-07 the record was archived with the name cut, without a word
/// (found by an audit).
#[test]
fn a_header_name_holding_nul_is_not_archived_cut_short() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let mb = TestBroker::start(&["nul:1"]);
    let (topic, group) = (mb.topic("nul"), mb.group("nul-group"));
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &mb.brokers)
        .create()
        .unwrap();
    for (i, name) in ["plain", "a\0b", "plain"].iter().enumerate() {
        let headers = OwnedHeaders::new().insert(Header {
            key: name,
            value: Some(&b"v"[..]),
        });
        let value = format!("r{i}");
        producer
            .send(
                BaseRecord::<[u8], [u8]>::to(&topic)
                    .partition(0)
                    .payload(value.as_bytes())
                    .headers(headers),
            )
            .unwrap();
    }
    producer.flush(std::time::Duration::from_secs(10)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // Bounded by the child's watchdog: a run that archived the record
    // would go on.
    let mut run = common::KillOnDrop::spawn(
        Command::new(CAIRN)
            .arg("run")
            .args(common::run_flags(&mb.brokers, &group, &topic, d))
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "record {topic}/0@1 cannot be archived: a header name holds a NUL byte"
        )),
        "{err}"
    );
    // Nothing of it archived, cut short or not.
    let (code, out, err) = cairn(&["export", "--data", d]);
    assert!(code == 0 || code == 1, "{err}");
    assert!(!out.contains("\"r1\"") && !out.contains("cjE="), "{out}");
}

/// A second run on an archive a run is archiving into is refused at once,
/// naming it, before Kafka is waited for: here with Kafka unreachable, where
/// until 2026-12-07 it waited out the connect timeout and said only that
/// Kafka could not be reached (found by an audit).
#[test]
fn a_second_run_on_a_running_archive_is_refused_at_once() {
    use std::io::{BufRead, BufReader};
    let mb = TestBroker::start(&["second:1"]);
    let (topic, group) = (mb.topic("second"), mb.group("second-group"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    // Serving once it says so.
    BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("serving status, export, verify, prune and backup"))
        .expect("the run ended before it served its socket");
    let (code, _, err) = cairn_run("127.0.0.1:1", &topic, d, &["--connect-timeout-ms", "60000"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "--data {d}: a cairn run is archiving into it already"
        )) && !err.contains("cannot reach Kafka"),
        "{err}"
    );
    assert!(run.try_wait().unwrap().is_none(), "the first run goes on");
}

/// An assignment says where its partitions resume in one INFO line (each
/// partition at DEBUG): an assignment of 10,000 partitions wrote 10,000
/// INFO lines until 2026-12-06. The first 8 are named, and how many more.
#[test]
fn an_assignment_says_where_it_resumes_in_one_line() {
    use std::io::{BufRead, BufReader};
    let mb = TestBroker::start(&["resume:10"]);
    let (topic, group) = (mb.topic("resume"), mb.group("resume-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..60).unwrap();
    let dir = archive_of_ten(&topic);
    let d = dir.path().to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    let mut before = Vec::new();
    let line = BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| {
            before.push(l.clone());
            l.contains("resuming (each partition at DEBUG)")
        })
        .expect("the run ended without the resuming line");
    assert!(line.contains(r#""partitions":10"#), "{line}");
    assert!(line.contains(&format!("{topic}/0@10")), "{line}");
    assert!(line.contains(", and 2 more"), "{line}");
    let per_partition = before
        .iter()
        .filter(|l| l.contains(r#""message":"resuming""#))
        .count();
    assert_eq!(
        per_partition, 0,
        "a line per partition at INFO: {before:#?}"
    );
}

/// A new archive whose group has committed offsets it holds nothing below
/// (a second member of a group of several archives, or an archive folder
/// on a volume not mounted yet) gets a WARN at its assignment, naming
/// where it starts.
#[test]
fn a_new_archive_starting_at_the_groups_offsets_is_warned_about() {
    // Three partitions: the demo records' (the producer fails a record
    // meant for a partition the topic lacks).
    let mb = TestBroker::start(&["unheld:3"]);
    let (topic, group) = (mb.topic("unheld"), mb.group("unheld-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..40).unwrap();
    commit_as_another_client(&mb.brokers, &group, &topic, 5);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    let warned = logged_before_a_commit(&mut run, "this archive holds nothing of these partitions")
        .expect("the run ended without the warning");
    assert!(warned.contains(&format!("{topic}/0@5")), "{warned}");
    assert!(!warned.contains(&format!("{topic}/1@")), "{warned}");
    assert!(!warned.contains(&format!("{topic}/2@")), "{warned}");
}

/// A member that holds partitions already, given one another store of its
/// group archived (committed under that store's identity), says so at INFO:
/// an ordinary hand-over in a group of several archives, which until
/// 2026-12-07 was the WARN above at every rebalance (found by an audit).
#[test]
fn a_hand_over_from_another_store_is_no_warning_to_a_member_that_holds_partitions() {
    use std::io::{BufRead, BufReader};
    let mb = TestBroker::start(&["handover:3"]);
    let (topic, group) = (mb.topic("handover"), mb.group("handover-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..60).unwrap();
    commit_with_metadata(&mb.brokers, &group, &topic, 1, 5, "cairn-store:another");
    let dir = archive_of_ten_in(&topic, &[0]);
    let d = dir.path().to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    let mut before = Vec::new();
    BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| {
            before.push(l.clone());
            l.contains(r#""message":"commit""#)
        })
        .expect("the run ended before its first commit");
    let said = before.join("\n");
    assert!(
        said.contains("partitions another store of this group archived up to these offsets")
            && said.contains(&format!("{topic}/1@5")),
        "{said}"
    );
    assert!(
        !said.contains("this archive holds nothing of these partitions"),
        "{said}"
    );
}

/// `cairn run` of an archive that recorded another topic id for its topic
/// (deleted and created again, or another cluster's) exits 1 naming both
/// ids and the way out, before anything is committed; `--rebind-topic`
/// records Kafka's id (a WARN, before the first commit) and archives on.
#[test]
fn a_topic_with_another_id_is_refused_until_rebound() {
    let mb = TestBroker::start(&["ident:3"]);
    let topic = mb.topic("ident");
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..60).unwrap();
    let dir = archive_of_ten_in(&topic, &[0, 1, 2]);
    let d = dir.path().to_str().unwrap();
    let archived = cairn_engine::TopicId::new(1).unwrap();
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(dir.path())).unwrap();
    e.bind_topics(&[(topic.clone(), archived)].into()).unwrap();
    e.close().unwrap();
    let group = mb.group("ident-group");
    let (code, _, err) = cairn_run_in(&group, &mb.brokers, &topic, d, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "Kafka's topic id is not the one archived for {topic} (archived: {archived}, Kafka's now: "
        )) && err.contains("--rebind-topic"),
        "{err}"
    );
    let held = partitions_of(d);
    assert!(
        held.len() == 3 && held.iter().all(|p| p.3 == 10),
        "nothing archived: {held:?}"
    );
    // In another group: librdkafka's mock cluster holds a member that
    // just left (cleanly too) until its session times out, 45 s.
    let group = mb.group("ident-group-rebound");
    let mut flags = common::run_flags(&mb.brokers, &group, &topic, d);
    flags.extend(["--rebind-topic", topic.as_str()]);
    let mut run = common::cairn_run(&flags, None);
    // The WARN before any commit, and the new id recorded by the first.
    use std::io::{BufRead, BufReader};
    let (mut warned, mut committed) = (None, false);
    for line in BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if line.contains("--rebind-topic: recording Kafka's topic id") {
            warned = Some(line);
        } else if line.contains(r#""message":"commit""#) {
            assert!(warned.is_some(), "committed before rebinding: {line}");
            committed = true;
            break;
        }
    }
    let warned = warned.expect("the run ended without rebinding");
    assert!(committed, "the run ended without a commit");
    assert!(warned.contains(&archived.to_string()), "{warned}");
    drop(run);
    let (code, out, err) = cairn(&["status", "--data", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let now = rows[0]["topic_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        now != archived.to_string() && warned.contains(now),
        "{now}: {warned}"
    );
}

/// An archived partition whose group offset was moved past the archive's
/// by something other than an archive (an offsets reset, another client:
/// its commit names no store) gets a WARN at its assignment, naming the
/// records the archive will not hold; before 2026-12-03 an INFO line took
/// it for another archive's commit, and until 2026-12-05 so it did for a
/// commit with metadata other than a store's (Kafka Streams', a Java
/// client's `OffsetAndMetadata`).
#[test]
fn a_group_offset_past_the_archive_naming_no_store_is_warned_about() {
    let mb = TestBroker::start(&["reset:3"]);
    let (topic, group) = (mb.topic("reset"), mb.group("reset-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..90).unwrap();
    let dir = archive_of_ten_in(&topic, &[0, 1]);
    commit_as_another_client(&mb.brokers, &group, &topic, 25);
    commit_with_metadata(&mb.brokers, &group, &topic, 1, 20, "app-v1");
    let d = dir.path().to_str().unwrap();
    let mut run = common::cairn_run(&common::run_flags(&mb.brokers, &group, &topic, d), None);
    let warned = logged_before_a_commit(&mut run, "name no archive")
        .expect("the run ended without the warning");
    assert!(warned.contains(&format!("{topic}/0@10..25")), "{warned}");
    assert!(warned.contains(&format!("{topic}/1@10..20")), "{warned}");
    assert!(warned.contains(r#""level":"WARN""#), "{warned}");
}

/// A topic Kafka lists with an error of its own other than "unknown" (one
/// still being created, without a leader) stops a run at once with that
/// error, archiving and committing nothing, not as a topic that does not
/// exist (before 2026-12-03).
#[test]
fn a_topic_kafka_cannot_serve_yet_is_named_as_such() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("settling", 1, 1).unwrap();
    mock.topic_error(
        "settling",
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
    )
    .unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = cairn(&[
        "run",
        "--brokers",
        &brokers,
        "--group",
        "settling-group",
        "--topics",
        "settling",
        "--data",
        d,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("topic \"settling\" (given to --topics)")
            && err.contains("cannot be used now")
            && err.contains("eader not available"),
        "{err}"
    );
    assert!(!err.contains("does not exist"), "{err}");
    // Named by the config file: said so (since the night of 2026-12-04,
    // as for a topic that does not exist).
    let file = dir.path().join("cairn.toml");
    std::fs::write(&file, "topics = [\"settling\"]\n").unwrap();
    let (code, _, err) = cairn(&[
        "run",
        "--brokers",
        &brokers,
        "--group",
        "settling-group",
        "--config",
        file.to_str().unwrap(),
        "--data",
        dir.path().join("archive").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "topic \"settling\" (topics set in {}, line 1) on",
            file.display()
        )) && err.contains("cannot be used now"),
        "{err}"
    );
}

/// `status` refuses an empty `--brokers` or `--group` at once, as `run`
/// does (before 2026-12-03 it waited out the connect timeout for brokers
/// named "", or warned and exited 0 for a group named "").
#[test]
fn status_refuses_empty_brokers_and_group() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for (args, flag) in [
        (&["--brokers", ""][..], "--brokers"),
        (&["--brokers", "127.0.0.1:1", "--group", ""][..], "--group"),
    ] {
        let mut a = vec!["status", "--data", d];
        a.extend_from_slice(args);
        let (code, out, err) = cairn(&a);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty() && err.contains(flag), "{args:?}: {err}");
    }
}

/// `--output` naming stdout (`/dev/stdout`, `-`) writes to stdout itself:
/// appended by the shell's `>>` to what the file held, where before
/// 2026-12-03 the export followed the link to the file and replaced it
/// (and `-` made a file named -).
#[test]
fn export_to_dev_stdout_appends_under_the_shells_redirection() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    archive_of(&data, &[("a", 0, 1)]);
    // Also spelt otherwise, or through a link of the user's (before
    // 2026-12-03 those were followed to the file, which was replaced).
    let link = dir.path().join("latest.jsonl");
    std::os::unix::fs::symlink("/dev/stdout", &link).unwrap();
    let link = link.to_str().unwrap();
    // Through a directory that leads to the descriptors: until the night of 2026-12-03,
    // these were followed to the file too.
    let fds = dir.path().join("fds");
    std::os::unix::fs::symlink("/proc/self/fd", &fds).unwrap();
    let via_dir = format!("{}/1", fds.to_str().unwrap());
    for name in [
        "/dev/stdout",
        "-",
        "/dev/./stdout",
        "//dev//stdout",
        link,
        "/dev/fd/../fd/1",
        "/proc/self/../self/fd/1",
        &via_dir,
    ] {
        let (stderr, text) = export_redirected(dir.path(), &data, name, ">>");
        assert!(stderr.contains("exit 0"), "{name}: {stderr}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "earlier", "{name}: {text}");
        assert_eq!(lines.len(), 11, "{name}: {text}");
        assert!(!dir.path().join("-").exists(), "{name}");
    }
}

/// An output whose name is near the longest a file name may be (255
/// bytes) is staged under a name cut to fit: before 2026-12-03 staging
/// failed (ENAMETOOLONG) at the export's first flush.
#[test]
fn export_to_a_long_file_name_is_staged_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    archive_of(&data, &[("a", 0, 1)]);
    let out = dir.path().join("x".repeat(250));
    let (code, _, err) = cairn(&[
        "export",
        "--data",
        data.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 10, "{text}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains("cairn-export"))
        .collect();
    assert!(left.is_empty(), "staged files left: {left:?}");
}

/// `--output` naming another descriptor (`/dev/fd/3`, `/dev/stderr`), or a
/// directory by a trailing slash, is refused before anything is read, and
/// the file behind the descriptor keeps what it held. Before 2026-12-03 the
/// export followed the descriptor's link to that file, staged itself beside
/// it and renamed itself over it (and a trailing slash failed only at the
/// rename, after the whole export).
#[test]
fn export_to_another_descriptor_or_a_slash_is_refused_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    archive_of(&data, &[("a", 0, 1)]);
    let link = dir.path().join("fd3.jsonl");
    std::os::unix::fs::symlink("/dev/fd/3", &link).unwrap();
    let link = link.to_str().unwrap();
    for (name, redirect) in [
        ("/dev/fd/3", "3>>"),
        ("/proc/self/fd/3", "3>>"),
        ("/dev/./fd/3", "3>>"),
        ("/dev/fd/../fd/3", "3>>"),
        (link, "3>>"),
        ("/dev/stderr", "2>>"),
        ("gone/", ">>"),
    ] {
        let (stderr, file) = export_redirected(dir.path(), &data, name, redirect);
        // (stderr redirected into the file holds the refusal there)
        let said = format!("{stderr}{file}");
        assert!(said.contains("exit 1"), "{name}: {said}");
        assert!(
            said.contains("nothing was read or written"),
            "{name}: {said}"
        );
        assert!(file.starts_with("earlier\n"), "{name}: {file}");
        assert!(!file.contains("\"offset\""), "{name}: {file}");
    }
}

/// `cairn export --data DATA --output NAME`, run by a shell in `dir` with
/// `REDIRECT` (`>>`, `3>>`) into `dir/all.jsonl`, which holds "earlier"
/// first: the shell's stderr (ending with `exit N`, cairn's exit code) and
/// the file after.
fn export_redirected(
    dir: &std::path::Path,
    data: &std::path::Path,
    name: &str,
    redirect: &str,
) -> (String, String) {
    let all = dir.join("all.jsonl");
    std::fs::write(&all, "earlier\n").unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "\"$0\" export --data \"$1\" --output {name} {redirect} \"$2\"; echo \"exit $?\" >&2"
        ))
        .arg(common::CAIRN)
        .arg(data)
        .arg(&all)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&all).unwrap(),
    )
}

/// An archive holding records 0..10 of `topic`'s partition 0.
fn archive_of_ten(topic: &str) -> tempfile::TempDir {
    archive_of_ten_in(topic, &[0])
}

/// An archive holding offsets 0..10 of `topic`'s `partitions`.
fn archive_of_ten_in(topic: &str, partitions: &[i32]) -> tempfile::TempDir {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for &p in partitions {
        e.append(&[batch(&TopicPartition::new(topic, p), 0..10, 10)])
            .unwrap();
    }
    e.close().unwrap();
    dir
}

/// `status --brokers` and `restore` refuse a number librdkafka would read
/// as another, as `run` does, before they open the archive or ask Kafka.
#[test]
fn status_and_restore_refuse_a_number_librdkafka_misreads() {
    let dir = archive_of_ten("t");
    let d = dir.path().to_str().unwrap();
    for command in ["status", "restore"] {
        let args = [
            command,
            "--data",
            d,
            "--brokers",
            "127.0.0.1:1",
            "-X",
            "fetch.wait.max.ms=010",
        ];
        let (code, out, err) = cairn(&args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.contains("error: -X fetch.wait.max.ms=010: librdkafka reads a number with a leading 0 as octal (010 is 8)"),
            "{args:?}: {err}"
        );
    }
    // A value librdkafka itself refuses: said as run says it, on one line.
    let (code, _, err) = cairn(&[
        "status",
        "--data",
        d,
        "--brokers",
        "127.0.0.1:1",
        "-X",
        "socket.timeout.ms=5",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.ends_with("error: -X socket.timeout.ms=5: Configuration property \"socket.timeout.ms\" value 5 is outside allowed range 10..300000\n"),
        "{err:?}"
    );
}

/// A stopped archive another cairn command holds (an export, here) is said
/// to be held by that command, with when to try again, and exits 2 (a
/// retry may pass), not 1: until 2026-12-07 every holder got the advice
/// for a run still starting, and the exit read as broken (an audit).
#[test]
fn an_archive_held_by_another_command_names_it_and_exits_2() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&TopicPartition::new("t", 0), 0..2000, 1000)])
        .unwrap();
    e.close().unwrap();
    let d = dir.path().to_str().unwrap();
    // An export whose stdout is not read holds the archive once the pipe
    // is full: its first bytes say it has opened it.
    let mut export = common::KillOnDrop::spawn(
        Command::new(CAIRN)
            .args(["export", "--data", d])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let mut first = [0u8; 1];
    export
        .0
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    let pid = export.0.id();
    // A restore, which a run does not serve, is told the same.
    let mb = TestBroker::start(&["r:1"]);
    let rename = format!("t={}", mb.topic("r"));
    for args in [
        &[
            "restore",
            "--data",
            d,
            "--brokers",
            &mb.brokers,
            "--rename",
            &rename,
        ][..],
        &["status", "--data", d][..],
        &["export", "--data", d, "--topic", "t"][..],
        &["prune", "--data", d, "--topic", "t", "--before", "5"][..],
        &["verify", "--data", d][..],
    ] {
        let (code, out, err) = cairn(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "is locked by pid {pid} (cairn export): a stopped archive is opened by one command at a time: try again once that one has finished"
            )),
            "{args:?}: {err}"
        );
    }
    // A run too, exit 1 as its errors are (until 2026-12-07 it named only
    // the pid).
    let (code, out, err) = cairn_run(&mb.brokers, &mb.topic("r"), d, &[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!(
            "is locked by pid {pid} (cairn export): a stopped archive is opened by one command at a time: start the run once that one has finished"
        )),
        "{err}"
    );
}

/// A damaged header of one of sled's log segments is reported by a
/// stopped verify, at its offset in sled's data file (exit 1): sled reads
/// through its snapshot and never looks at the header, so until 2026-12-07
/// the archive verified clean, and lost the segment's frames the first
/// time sled rebuilt its state from the log (found by an audit: with its
/// snapshot removed, such a copy opened with its whole log gone).
#[test]
fn verify_reports_a_damaged_segment_header() {
    let dir = archive_of_ten("t");
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{out}{err}");
    let data = dir.path().join("sled").join("db");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[9] ^= 0x01;
    std::fs::write(&data, &bytes).unwrap();
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!(
            "sled's files in {} (log offset 0)",
            data.display()
        )) && out.contains("a log segment's header fails its checksum"),
        "{out}{err}"
    );
}

/// An archive with a damaged segment header is refused by `run` and
/// `prune`, which write, and read whole by `status` (exit 1, the damage
/// said), `export` and `backup`, whose copy then runs: until 2026-12-07
/// `run` archived onto it and committed the offsets, and the next open
/// found the records gone, since sled takes such a segment for a free one
/// when an open reads its header (found by an audit).
#[test]
fn a_damaged_segment_header_refuses_run_and_prune_not_reads() {
    use std::io::Read;
    let mb = TestBroker::start(&["hdr:1"]);
    let (topic, group) = (mb.topic("hdr"), mb.group("hdr-group"));
    let dir = archive_of_ten(&topic);
    let d = dir.path().to_str().unwrap();
    // An open writes sled's snapshot, which later opens read through.
    assert_eq!(cairn(&["status", "--data", d]).0, 0);
    let data = dir.path().join("sled").join("db");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[9] ^= 0x01;
    std::fs::write(&data, &bytes).unwrap();
    let damage = format!(
        "corruption at sled's files in {} (log offset 0): a log segment's header fails its checksum",
        data.display()
    );

    let mut run = common::KillOnDrop::spawn(
        Command::new(common::CAIRN)
            .arg("run")
            .args(common::run_flags(&mb.brokers, &group, &topic, d))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped()),
    );
    let mut err = String::new();
    run.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(run.wait().unwrap().code(), Some(1), "{err}");
    assert!(err.contains(&damage), "{err}");
    let (code, _, err) = cairn(&["prune", "--data", d, "--topic", &topic, "--before", "5"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&damage), "{err}");
    // Nothing was written: the data file is as it was.
    assert_eq!(std::fs::read(&data).unwrap(), bytes);
    // A dry run deletes nothing: it reads, as the other reading commands.
    let (code, out, err) = cairn(&[
        "prune",
        "--data",
        d,
        "--topic",
        &topic,
        "--before",
        "5",
        "--dry-run",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(&damage) && out.contains("would prune"),
        "{out}{err}"
    );
    assert_eq!(std::fs::read(&data).unwrap(), bytes);

    let (code, out, err) = cairn(&["status", "--data", d]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains(&damage) && out.contains(&topic), "{out}{err}");
    let (code, out, err) = cairn(&["export", "--data", d]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 10, "{out}");
    assert!(err.contains(&damage), "{err}");
    let copy = dir.path().with_extension("copy");
    let c = copy.to_str().unwrap();
    let (code, _, err) = cairn(&["backup", "--data", d, "--to", c]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = cairn(&["verify", "--data", c]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cairn(&["export", "--data", c]);
    assert_eq!((code, out.lines().count()), (0, 10), "{err}");
    assert!(!err.contains("corruption"), "{err}");
    std::fs::remove_dir_all(&copy).unwrap();
}

/// A damaged sled settings file (`sled/conf`) is damage to that file,
/// named, exit 1 (verify: a `problem:` line), and the advice works: moved
/// aside, sled writes it again and the archive verifies clean. Until
/// 2026-12-07 a changed digit read as a store of other settings: verify
/// "could not verify" (exit 2), with sled's advice to change cairn's
/// settings to the damaged value (found by an audit).
#[test]
fn a_damaged_sled_settings_file_is_named_and_rebuilt_when_moved_aside() {
    let dir = archive_of_ten("t");
    let d = dir.path().to_str().unwrap();
    let conf = dir.path().join("sled").join("conf");
    let mut bytes = std::fs::read(&conf).unwrap();
    // "segment_size: 8388608" -> "9388608".
    assert_eq!(&bytes[14..15], b"8");
    bytes[14] = b'9';
    std::fs::write(&conf, &bytes).unwrap();
    let named = format!("sled's files in {}", conf.display());
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&named) && out.contains("move it aside"),
        "{out}{err}"
    );
    for args in [&["status", "--data", d][..], &["export", "--data", d][..]] {
        let (code, out, err) = cairn(args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(&named), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&conf).unwrap(), bytes, "the file was changed");
    std::fs::rename(&conf, conf.with_extension("damaged")).unwrap();
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cairn(&["export", "--data", d]);
    assert_eq!((code, out.lines().count()), (0, 10), "{err}");
}

/// An archive directory this user may not look into is said to be that,
/// by every command that reads it: until 2026-12-07 they warned that the
/// archive's socket refused this user, as if another user's run held it,
/// and then named another file (found by an audit). Run as `nobody`
/// through `setpriv`, so root only (as the test machines run).
#[test]
fn an_archive_directory_this_user_may_not_enter_is_said_to_be_that() {
    if !rustix::process::geteuid().is_root() {
        cairn_engine::fuzzing::skip("needs root, to run a command as another user");
        return;
    }
    /// `cairn cmd --data data` as nobody: its exit code and stderr.
    fn as_nobody(cmd: &str, data: &str) -> Option<(Option<i32>, String)> {
        match std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(common::CAIRN)
            .args([cmd, "--data", data])
            .output()
        {
            Ok(out) => Some((
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                cairn_engine::fuzzing::skip("no setpriv (util-linux)");
                None
            }
            Err(e) => panic!("setpriv: {e}"),
        }
    }
    let dir = archive_of_ten("t");
    let d = dir.path().to_str().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    for (cmd, want) in [("status", 1), ("export", 1), ("verify", 2)] {
        let Some((code, err)) = as_nobody(cmd, d) else {
            return;
        };
        assert_eq!(code, Some(want), "{cmd}: {err}");
        assert!(
            err.contains(&format!("{d}: this user may not look into {d} ("))
                && !err.contains("socket refused this user"),
            "{cmd}: {err}"
        );
    }
    // A --data below it is named with the directory at fault.
    let below = dir.path().join("inner").join("archive");
    let below = below.to_str().unwrap();
    let (code, err) = as_nobody("status", below).unwrap();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("{below}: this user may not look into {d} (")),
        "{err}"
    );
    // One it may look into but not write: every open takes the lock, and
    // says so (until 2026-12-07 a bare "Permission denied" on the lock
    // file).
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for (cmd, want) in [("status", 1), ("export", 1), ("verify", 2)] {
        let (code, err) = as_nobody(cmd, d).unwrap();
        assert_eq!(code, Some(want), "{cmd}: {err}");
        assert!(
            err.contains("it needs write access to the directory; run as the user that owns it, or work on a copy"),
            "{cmd}: {err}"
        );
    }
    // One whose folders it may write but not sled's data file: the file
    // is named (until 2026-12-07 only sled's folder was; found by an
    // audit).
    let mode = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    mode(dir.path(), 0o777);
    let sled = dir.path().join("sled");
    mode(&sled, 0o777);
    for entry in std::fs::read_dir(dir.path())
        .unwrap()
        .chain(std::fs::read_dir(&sled).unwrap())
    {
        let p = entry.unwrap().path();
        if p.is_file() {
            mode(&p, 0o666);
        } else if p.is_dir() {
            mode(&p, 0o777);
        }
    }
    let db = sled.join("db");
    mode(&db, 0o644);
    for cmd in ["status", "export"] {
        let (code, err) = as_nobody(cmd, d).unwrap();
        assert_eq!(code, Some(1), "{cmd}: {err}");
        assert!(
            err.contains(&format!("{}: Permission denied", db.display())),
            "{cmd}: {err}"
        );
    }
}

/// An archive whose sled folder cannot be looked into is an I/O error
/// naming the path, not "the store lost its records", which the
/// watermark beside it said until 2026-12-07 (found by an audit, with the
/// folder at mode 000 as another user; here a loop of links, which root
/// cannot see through either). An archive that did lose its data file
/// still says so.
#[test]
fn a_sled_folder_that_cannot_be_looked_into_is_no_lost_store() {
    let dir = archive_of_ten("t");
    let d = dir.path().to_str().unwrap();
    let sled = dir.path().join("sled");
    let aside = dir.path().join("sled.aside");
    std::fs::rename(&sled, &aside).unwrap();
    std::os::unix::fs::symlink("sled", &sled).unwrap();
    // verify's 2 is "could not verify"; the others fail with 1.
    for (cmd, want) in [
        (&["verify", "--data", d][..], 2),
        (&["status", "--data", d][..], 1),
        (&["export", "--data", d][..], 1),
    ] {
        let (code, out, err) = cairn(cmd);
        assert_eq!(code, want, "{cmd:?}: {out}{err}");
        assert!(
            err.contains("look for the store's data file")
                && err.contains("sled/db")
                && !err.contains("lost its records"),
            "{cmd:?}: {err}"
        );
    }
    // Put back, less its data file: that is a lost store.
    std::fs::remove_file(&sled).unwrap();
    std::fs::rename(&aside, &sled).unwrap();
    std::fs::remove_file(sled.join("db")).unwrap();
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("the store lost its records"), "{out}{err}");
}

/// An age prune stopped by a record with no timestamp (the partition's
/// first, here; the others are from 2023) says so on a line of its own,
/// naming the record and the `--before` that deletes it, as a run's
/// retention does (until 2026-12-06 it printed "pruned 0 records" and
/// nothing more); a dry run says it too.
#[test]
fn an_age_prune_held_back_by_a_record_with_no_timestamp_says_so() {
    use cairn_engine::{fuzzing::record, Engine, EngineConfig, RecordBatch, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let tp = TopicPartition::new("held", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let mut first = record(&tp, 0, 10);
    first.timestamp_ms = -1;
    e.append(&[RecordBatch {
        tp: tp.clone(),
        records: vec![first],
    }])
    .unwrap();
    e.append(&[RecordBatch {
        tp: tp.clone(),
        records: (1..10).map(|o| record(&tp, o, 10)).collect(),
    }])
    .unwrap();
    e.close().unwrap();
    let d = dir.path().to_str().unwrap();
    for dry in [true, false] {
        let mut args = vec!["prune", "--data", d, "--older-than", "1day"];
        if dry {
            args.push("--dry-run");
        }
        let (code, out, err) = cairn(&args);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("held/0: ")
                && out.contains("0 records")
                && out.contains(
                    "held/0: the age cut stops at offset 0: that record has no timestamp (-1)"
                )
                && out.contains("--topic held --partition 0 --before 1"),
            "{out}"
        );
    }
}

/// Commit `offset` for `topic`'s partition 0 in `group` as a plain client
/// does: no metadata.
fn commit_as_another_client(brokers: &str, group: &str, topic: &str, offset: i64) {
    commit_with_metadata(brokers, group, topic, 0, offset, "");
}

/// Commit `offset` for `topic`'s `partition` in `group` as another client,
/// with `metadata` (none when empty).
fn commit_with_metadata(
    brokers: &str,
    group: &str,
    topic: &str,
    partition: i32,
    offset: i64,
    metadata: &str,
) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    let other: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .unwrap();
    if !metadata.is_empty() {
        tpl.find_partition(topic, partition)
            .unwrap()
            .set_metadata(metadata);
    }
    other.commit(&tpl, CommitMode::Sync).unwrap();
}

/// The first line of a `cairn run` child's log that holds `needle`, read
/// up to it; a commit logged before it fails the test. `None`: the log
/// ended first.
fn logged_before_a_commit(run: &mut common::KillOnDrop, needle: &str) -> Option<String> {
    use std::io::{BufRead, BufReader};
    for line in BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if line.contains(needle) {
            return Some(line);
        }
        assert!(
            !line.contains(r#""message":"commit""#),
            "committed before logging {needle:?}: {line}"
        );
    }
    None
}

/// An archive at `dir` of one record of each of `topic`'s partitions
/// `0..partitions`, closed.
fn archive_one_record_each(dir: &std::path::Path, topic: &str, partitions: i32) {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let e = Engine::open(EngineConfig::new(dir)).unwrap();
    for p in 0..partitions {
        e.append(&[batch(&TopicPartition::new(topic, p), 0..1, 10)])
            .unwrap();
    }
    e.close().unwrap();
}

/// `cairn status --json` of the archive at `dir`, with Kafka's figures from
/// `brokers`, waiting `timeout_ms` for them.
fn status_json_with_brokers(
    dir: &std::path::Path,
    brokers: &str,
    timeout_ms: &str,
) -> (i32, String, String) {
    cairn(&[
        "status",
        "--data",
        dir.to_str().unwrap(),
        "--brokers",
        brokers,
        "--connect-timeout-ms",
        timeout_ms,
        "--json",
    ])
}

/// `status` shows the Kafka topic id the archive recorded for each row's
/// topic (`null` before a run recorded one) and, with `--brokers`, Kafka's
/// own; where they differ (a recreated topic, another cluster) it says so
/// with a WARN and in the row, and shows no archive lag, whose offsets
/// would name another topic's records.
#[test]
fn status_shows_the_archived_topic_id_beside_kafkas() {
    // A `cairn mock-broker`, or the real cluster CAIRN_TEST_BROKERS names.
    let tb = TestBroker::start(&["ti:2"]);
    let (topic, brokers) = (tb.topic("ti"), tb.brokers.clone());
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), &topic, 1);
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "60000");
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(rows[0]["topic_id"].is_null(), "{out}");
    let kafka = rows[0]["kafka_topic_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(kafka.len(), 22, "Kafka's form: {out}");
    // The partition the archive holds nothing of carries it too.
    assert_eq!(rows[1]["kafka_topic_id"], kafka, "{out}");
    // The empty topic's log ends below the archive's one record.
    assert_eq!(rows[0]["archive_lag"], -1, "{out}");
    assert!(!err.contains("topic id"), "{err}");
    // Another id recorded: the topic Kafka has now is not the archived one.
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(dir.path())).unwrap();
    let archived = cairn_engine::TopicId::new(1).unwrap();
    e.bind_topics(&[(topic.clone(), archived)].into_iter().collect())
        .unwrap();
    e.close().unwrap();
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "60000");
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    for r in [&rows[0], &rows[1]] {
        assert_eq!(r["topic_id"], archived.to_string(), "{out}");
        assert_eq!(r["kafka_topic_id"], kafka, "{out}");
        assert!(r["archive_lag"].is_null(), "{out}");
        assert!(
            r["kafka_missing"]
                .as_str()
                .is_some_and(|m| m.contains("Kafka's topic id is not the one archived")),
            "{out}"
        );
    }
    assert!(
        err.contains("Kafka's topic id is not the one archived"),
        "{err}"
    );
    assert_eq!(
        err.matches("Kafka's topic id is not the one archived")
            .count(),
        1,
        "one WARN per topic: {err}"
    );
    // Its offsets are another topic's: what they would say of this one
    // (its log ends below the archive's record) is not said.
    assert!(!err.contains("Kafka's log ends below"), "{err}");
    // Without --brokers, the archive's own.
    let (code, out, err) = cairn(&["status", "--data", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["topic_id"], archived.to_string(), "{out}");
    assert!(rows[0]["kafka_topic_id"].is_null(), "{out}");
}

/// A damaged recorded topic id is shown in its topic's rows
/// (`topic_id_damage`), the rest printed, exit 1 with an ERROR naming it;
/// where Kafka gives no id (Metadata below v10, as before Kafka 2.8) for a
/// topic the archive recorded one for, status says it was not compared,
/// as a run would stop on it.
#[test]
fn status_names_a_damaged_topic_id_and_one_kafka_does_not_give() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("ok", 1, 1).unwrap();
    mock.create_topic("bad", 1, 1).unwrap();
    mock.apiversion(rdkafka::types::RDKafkaApiKey::Metadata, Some(0), Some(9))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "ok", 1);
    archive_one_record_each(dir.path(), "bad", 1);
    let e = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(dir.path())).unwrap();
    let id = cairn_engine::TopicId::new(7).unwrap();
    e.bind_topics(&[("ok".to_owned(), id), ("bad".to_owned(), id)].into())
        .unwrap();
    e.close().unwrap();
    cairn_engine::fuzzing::with_raw_tree(dir.path(), |t| {
        let k = cairn_engine::topics::key("bad");
        let mut v = t.get(&k).unwrap().unwrap().to_vec();
        v[5] ^= 4;
        t.insert(k, v).unwrap();
    });
    let (code, out, err) = status_json_with_brokers(dir.path(), &mock.bootstrap_servers(), "60000");
    assert_eq!(code, 1, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let (bad, ok) = (&rows[0], &rows[1]);
    assert_eq!(
        (bad["topic"].as_str(), ok["topic"].as_str()),
        (Some("bad"), Some("ok")),
        "{out}"
    );
    assert!(bad["topic_id"].is_null(), "{out}");
    assert!(
        bad["topic_id_damage"]
            .as_str()
            .is_some_and(|d| d.contains("topic id of bad")),
        "{out}"
    );
    assert!(
        err.contains("error: the topic id the archive recorded for bad is damaged (corruption at topic id of bad"),
        "{err}"
    );
    assert_eq!(ok["topic_id"], id.to_string(), "{out}");
    assert!(ok["topic_id_damage"].is_null(), "{out}");
    assert!(ok["kafka_topic_id"].is_null(), "{out}");
    assert!(
        ok["kafka_missing"]
            .as_str()
            .is_some_and(|m| m.contains("Kafka gives no topic id")),
        "{out}"
    );
    assert!(
        err.contains("Kafka gives no topic id for this topic"),
        "{err}"
    );
}

/// A partition summary whose figures cannot be true together (more
/// records than offsets; checksum intact, so the store opens, for verify
/// to name the loss) is shown as the summary says and said to be damaged,
/// exit 1, in the table and in JSON (since 2026-12-06; before, exit 0 and
/// not a word).
#[test]
fn status_says_a_summary_that_cannot_be_true_is_damaged() {
    use cairn_engine::offsets::PartitionSummary;
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "t", 2);
    cairn_engine::fuzzing::with_raw_tree(dir.path(), |t| {
        let tp = cairn_engine::TopicPartition::new("t", 1);
        let key = cairn_engine::keys::partition_key(&tp);
        let (_, mut s) = PartitionSummary::decode(&key, &t.get(&key).unwrap().unwrap()).unwrap();
        s.record_count = 500;
        let (k, v) = s.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let d = dir.path().to_str().unwrap();
    let says =
        "partition summary t/1: 500 records between offsets 0 and 1, more than the 1 offsets there";
    let (code, out, err) = cairn(&["status", "--data", d, "--json"]);
    assert_eq!(code, 1, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(rows[0]["summary_damage"].is_null(), "{out}");
    assert_eq!(rows[1]["records"], 500, "{out}");
    assert_eq!(rows[1]["summary_damage"], says, "{out}");
    assert!(
        err.contains(&format!("error: {says}: its row's figures")),
        "{err}"
    );
    let (code, out, err) = cairn(&["status", "--data", d]);
    assert_eq!(code, 1, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("t ") && l.contains(" 500 "));
    assert!(row.is_some() && err.contains(says), "{out}\n{err}");
}

/// An index entry damaged in the log's unchecked tail (under a valid CRC)
/// is rebuilt by the open of `status`, as by any open; status says so
/// whatever `RUST_LOG` keeps and exits 1, since nothing finds it again
/// (until 2026-12-06 a WARN a filter dropped, and exit 0). The next
/// status finds nothing.
#[test]
fn status_says_damage_its_open_rebuilt() {
    use cairn_engine::{fuzzing::batch, index::IndexEntry, keys, Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let tp = cairn_engine::TopicPartition::new("t", 0);
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    for i in 0..3 {
        e.append(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
    }
    // Dropped, not closed: no checkpoint, so the entries stay in the tail
    // the next open checks.
    drop(e);
    cairn_engine::fuzzing::with_raw_tree(dir.path(), |t| {
        let k = keys::index_key(&tp, 10);
        let (_, mut entry) = IndexEntry::decode(&k, &t.get(&k).unwrap().unwrap()).unwrap();
        entry.timestamp_max_ms += 1;
        let (k, v) = entry.encode(&tp);
        t.insert(k, v).unwrap();
    });
    let d = dir.path().to_str().unwrap();
    let status = |args: &[&str]| {
        let out = Command::new(CAIRN)
            .args(args)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = status(&["status", "--data", d, "--json"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("found 1 index entry damaged")
            && err.contains("no record was lost")
            && err.contains(d),
        "{err}"
    );
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["records"], 30, "{out}");
    let (code, _, err) = status(&["status", "--data", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("damaged"), "{err}");
}

/// Logs to a file or a pipe carry no colour codes, so that `key=value`
/// reads as written (a `grep final_commit_failed=true` of a log file found
/// nothing before 2026-12-06), and a `RUST_LOG` with spaces after its
/// commas is taken, not dropped for the default.
#[test]
fn logs_to_a_pipe_are_plain_and_rust_log_takes_spaces() {
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "t", 1);
    let out = Command::new(CAIRN)
        .args(["status", "--data", dir.path().to_str().unwrap()])
        .env("RUST_LOG", "warn, cairn_engine=debug")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains('\x1b'), "colour codes: {err:?}");
    assert!(!err.contains("does not parse"), "{err}");
    // cairn_engine's DEBUG line, which only the setting after the space
    // lets through, and an INFO line's fields as written.
    assert!(err.contains("opening store"), "{err}");
    assert!(
        err.contains("store recovered") && err.contains(" frames_checked="),
        "{err}"
    );
}

/// A partition without a leader is not asked for its watermarks (the
/// request would wait out the timeout: before 2026-12-03, one per such
/// partition); its columns are left empty with a WARN saying why, and the
/// other partitions' are filled.
#[test]
fn status_does_not_wait_on_a_partition_without_a_leader() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("ll", 2, 1).unwrap();
    mock.partition_leader("ll", 1, None).unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "ll", 2);
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "60000");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("the partition has no leader"), "{err}");
    assert!(!err.contains("no watermarks from Kafka"), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["partition"], 0, "{out}");
    assert!(rows[0]["high_watermark"].is_i64(), "{out}");
    assert_eq!(rows[1]["partition"], 1, "{out}");
    assert!(rows[1]["high_watermark"].is_null(), "{out}");
}

/// A leader that lets its watermark request time out is asked once, for
/// all its partitions: the timeout bounds the wait per leader (until the
/// night of 2026-12-03, per partition: 200 partitions of an unreachable
/// leader took 200 timeouts). Their columns are left empty, each with a
/// WARN naming the leader, and the other leader's partition is filled.
#[test]
fn status_waits_once_for_a_leader_that_does_not_answer() {
    use rdkafka::mocking::MockCluster;
    let mock = MockCluster::new(2).unwrap();
    mock.create_topic("sl", 4, 1).unwrap();
    mock.partition_leader("sl", 0, Some(1)).unwrap();
    for p in 1..4 {
        mock.partition_leader("sl", p, Some(2)).unwrap();
    }
    // Bootstrapped from broker 1 alone, which answers the metadata at
    // once; broker 2 answers every request after 30 s.
    let all = mock.bootstrap_servers();
    let brokers = all.split(',').next().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "sl", 4);
    mock.broker_round_trip_time(2, std::time::Duration::from_secs(30))
        .unwrap();
    // Below broker 2's 30 s, well above what broker 1 takes on a loaded
    // machine (2 s was once the bound, for both).
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "20000");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err.matches("its leader (broker 2) did not answer the watermark request within 20000 ms")
            .count(),
        3,
        "{err}"
    );
    assert!(!err.contains("no watermarks from Kafka"), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(rows[0]["high_watermark"].is_i64(), "{out}");
    for p in 1..4 {
        assert!(rows[p]["high_watermark"].is_null(), "{out}");
        assert!(
            rows[p]["kafka_missing"]
                .as_str()
                .is_some_and(|m| m.contains("did not answer")),
            "{out}"
        );
    }
}

/// `cairn mock-broker --round-trip-ms` delays every answer: a status that
/// waits less than the delay for Kafka gets no figures (exit 1), one that
/// waits longer gets them. Out of its range, the flag is refused (exit 2).
#[test]
fn mock_broker_round_trip_ms_delays_every_answer() {
    use std::io::BufRead;
    let (code, _, err) = cairn(&["mock-broker", "--round-trip-ms", "60001"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("60001"), "{err}");
    let mut child = common::KillOnDrop::spawn(
        Command::new(CAIRN)
            .args(["mock-broker", "--topic", "rt:1", "--round-trip-ms", "1500"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    );
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let brokers = line.trim().strip_prefix("bootstrap.servers=").unwrap();
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "rt", 1);
    let (code, _, err) = status_json_with_brokers(dir.path(), brokers, "500");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("could not read Kafka's figures"), "{err}");
    let (code, out, err) = status_json_with_brokers(dir.path(), brokers, "60000");
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["high_watermark"], 0, "{out}");
}

/// Watermarks are read for all of a leader's partitions in one request,
/// which librdkafka fails whole for one partition's error. So the request
/// is asked again in halves, and a partition whose read still failed once
/// more alone: here the mock cluster fails the batched request and then
/// the half that is the first partition alone, and all three are filled
/// (asked alone at once instead, the first would be left empty). When
/// every request fails, each partition says so with a WARN, and the exit is
/// 0 (a leader that answers with an error is not a silent one).
#[test]
fn status_asks_again_alone_for_watermarks_a_batched_request_failed() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("ba", 3, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    archive_one_record_each(dir.path(), "ba", 3);
    let policy = RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION;
    mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy; 2]);
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "20000");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("no watermarks from Kafka"), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    for p in 0..3 {
        assert_eq!(rows[p]["high_watermark"], 0, "{out}");
        assert_eq!(rows[p]["partition"], p, "{out}");
    }
    mock.request_errors(RDKafkaApiKey::ListOffsets, &[policy; 1_000]);
    let (code, out, err) = status_json_with_brokers(dir.path(), &brokers, "20000");
    mock.clear_request_errors(RDKafkaApiKey::ListOffsets);
    assert_eq!(code, 0, "{err}");
    assert_eq!(err.matches("no watermarks from Kafka").count(), 3, "{err}");
    assert!(!err.contains("did not answer"), "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    for p in 0..3 {
        assert!(rows[p]["high_watermark"].is_null(), "{out}");
    }
}

/// Brokers that do not answer at all: the archive's own figures are
/// printed, table and JSON, with the Kafka columns empty, the error is
/// logged, and the exit is 1 (until the night of 2026-12-03 nothing was
/// printed).
#[test]
fn status_with_brokers_that_do_not_answer_prints_the_archive() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
    e.append(&[batch(&TopicPartition::new("quiet", 0), 0..7, 10)])
        .unwrap();
    e.close().unwrap();
    let d = dir.path().to_str().unwrap();
    let base = [
        "status",
        "--data",
        d,
        "--brokers",
        "127.0.0.1:1",
        "--connect-timeout-ms",
        "1000",
    ];
    let (code, out, err) = cairn(&base);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("could not read Kafka's figures"), "{err}");
    // With why, as `run` says it (since the night of 2026-12-04).
    assert!(
        err.contains("the client's last error") && err.contains("Connection refused"),
        "{err}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("quiet"))
        .unwrap_or_default();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[..5], ["quiet", "0", "0", "7", "7"], "{out}");
    assert_eq!(cols[6..], ["-", "-", "-", "-"], "{out}");
    let (code, out, err) = cairn(&[&base[..], &["--json"]].concat());
    assert_eq!(code, 1, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["durable_next_offset"], 7, "{out}");
    // Why the exit is 1 is said whatever RUST_LOG keeps (since 2026-12-05;
    // a filter naming only librdkafka dropped it), as JSON too.
    let out = Command::new(CAIRN)
        .args(["--log-format", "json"])
        .args(base)
        .env("RUST_LOG", "librdkafka=debug")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let said = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["target"] == "cairn" && l["level"] == "ERROR")
        .unwrap_or_else(|| panic!("no ERROR line of cairn's: {err}"));
    assert!(
        said["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("could not read Kafka's figures")),
        "{said}"
    );
    assert!(rows[0]["kafka_committed"].is_null() && rows[0]["high_watermark"].is_null());
}

/// `status --group` when Kafka cannot read the group's committed offsets
/// (the mock cluster fails every OffsetFetch): the table still stands, with
/// the high watermark and archive lag filled and the committed offset left
/// out, a WARN says why, and the exit is 0 (before, exit 1 and no table).
/// Needs the mock cluster's error injection, in process.
#[test]
fn status_leaves_out_committed_offsets_kafka_cannot_read() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("st", 1, 1).unwrap();
    let brokers = mock.bootstrap_servers();
    // The group has committed offset 1: status shows it while Kafka answers.
    let group: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", "st-group")
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset("st", 0, rdkafka::Offset::Offset(1))
        .unwrap();
    group.commit(&tpl, CommitMode::Sync).unwrap();
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&TopicPartition::new("st", 0), 0..1, 10)])
            .unwrap();
        e.close().unwrap();
    }
    // The wait for Kafka: a bound on a loaded machine for the call that
    // must read the offsets, short for the one whose reads all fail.
    let status = |connect_timeout_ms: &str| {
        cairn(&[
            "status",
            "--data",
            dir.path().to_str().unwrap(),
            "--brokers",
            &brokers,
            "--group",
            "st-group",
            "--connect-timeout-ms",
            connect_timeout_ms,
            "--json",
        ])
    };
    let (code, out, err) = status("60000");
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["kafka_committed"], 1, "{out}");
    assert!(rows[0]["kafka_missing"].is_null(), "{out}");
    // Committed by a plain client (no cairn identity in its metadata),
    // beside the archive's identity (since the night of 2026-12-04).
    assert_eq!(rows[0]["committed_by"], "not cairn", "{out}");
    assert!(
        rows[0]["store"]
            .as_str()
            .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())),
        "{out}"
    );
    // Now every OffsetFetch fails.
    mock.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN; 1000],
    );
    // (Refused at once: the bound is for the watermarks, which must still
    // be read, on a loaded machine too.)
    let (code, out, err) = status("60000");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("Kafka could not read the group's committed offsets"),
        "{err}"
    );
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = &rows[0];
    assert_eq!(row["partition"], 0, "{out}");
    assert!(row["high_watermark"].is_i64(), "{out}");
    assert!(row["archive_lag"].is_i64(), "{out}");
    assert_eq!(
        row.get("kafka_committed"),
        Some(&serde_json::Value::Null),
        "{out}"
    );
    // Told apart from "nothing committed" in the JSON itself.
    assert!(
        row["kafka_missing"]
            .as_str()
            .is_some_and(|m| m.contains("the group's committed offsets could not be read")),
        "{out}"
    );
}

/// A child's stderr lines, read through the first that holds `needle`;
/// a stream that ends first fails the test, with what it said.
fn lines_through(
    lines: &mut std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
    needle: &str,
) {
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains(needle) {
            return;
        }
        seen.push(line);
    }
    panic!("the run never said {needle:?}: {seen:?}");
}

/// A signal while the run waits for brokers that do not answer ends the
/// wait then, not at the connect timeout (an hour here): the run exits 130
/// saying it was stopped while waiting, having committed nothing. The
/// signal is acknowledged whatever RUST_LOG keeps (here it drops the run
/// command's own events), so that a stop that takes a while is not taken
/// for a hang (until 2026-12-06 the line was such an event).
#[test]
fn a_signal_ends_the_wait_for_brokers_that_do_not_answer() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let mut args = common::run_flags("127.0.0.1:1", "g", "t", d);
    args.extend(["--connect-timeout-ms", "3600000"]);
    let mut run = common::cairn_run_logging(&args, None, "info,cairn_connector::cli::run=error");
    let child = &mut run.0;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    lines_through(&mut lines, "waiting for Kafka to answer");
    common::send_signal(child.id(), "INT");
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(child.wait().unwrap().code(), Some(130), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("stopped by a signal after")
            && l.contains("waiting for Kafka at 127.0.0.1:1")),
        "{rest:?}"
    );
    assert!(
        // Said as what it stops: the wait, nothing opened (until
        // 2026-12-07 "draining, fsyncing, committing", of nothing).
        rest.iter()
            .any(|l| l.contains("signal received: stopping the wait for Kafka")),
        "{rest:?}"
    );
    // The directory it would have made is not there.
    assert!(!dir.path().join("sled").exists());
}

/// `status --brokers` and `restore` say why Kafka does not answer as the
/// connection is refused, not once the whole connect timeout has passed:
/// with a wait of ten minutes the cause comes (a restore then stops at a
/// SIGTERM, exit 130). No clock is read: before 2026-12-07 their clients'
/// queues were served only after the wait, and this waited out the
/// watchdog.
#[test]
fn status_and_restore_say_why_kafka_does_not_answer_while_they_wait() {
    use std::io::{BufRead, BufReader};
    let archive = archive_of_ten("t");
    let d = archive.path().to_str().unwrap();
    for command in ["status", "restore"] {
        let mut run = common::KillOnDrop::spawn(
            Command::new(CAIRN)
                .args([command, "--data", d, "--brokers", "127.0.0.1:1"])
                .args(["--connect-timeout-ms", "600000"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped()),
        );
        let mut lines = BufReader::new(run.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok);
        let cause = lines
            .find(|l| l.contains("Connection refused"))
            .unwrap_or_else(|| panic!("{command} ended before it said the cause"));
        assert!(cause.contains(" WARN "), "{command}: {cause}");
        if command == "restore" {
            common::send_signal(run.id(), "TERM");
            assert_eq!(run.wait().unwrap().code(), Some(130), "{command}");
        }
    }
}

/// An output that fails part-way (here `/dev/full`: every write is
/// ENOSPC) stops the export with an error that says the count is of
/// records handed to the output, of which the last MiB may be missing.
#[test]
fn an_output_that_fails_part_way_says_what_may_be_missing() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    if !std::path::Path::new("/dev/full").exists() {
        common::skip("no /dev/full here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        let tp = TopicPartition::new("t", 0);
        e.append(&[batch(&tp, 0..3000, 1000)]).unwrap();
        e.close().unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", "/dev/full"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("export stopped after")
            && err.contains("/dev/full received the records before it but up to the last 1 MiB of them (the output failed)"),
        "{err}"
    );

    // An export under the output's 1 MiB buffer first meets the failure in
    // its last flush: the same account of what the output holds, for a
    // file and for stdout (before, a bare "i/o error on /dev/full").
    let small = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(small.path())).unwrap();
        e.append(&[batch(&TopicPartition::new("t", 0), 0..10, 100)])
            .unwrap();
        e.close().unwrap();
    }
    let d = small.path().to_str().unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", "/dev/full"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the export's output /dev/full failed at its end: No space left on device")
            && err.contains("/dev/full received the records before it but up to the last 1 MiB of them (the output failed): the export is incomplete"),
        "{err}"
    );
    let (code, err) = cairn_into_dev_full(&["export", "--data", d]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("<stdout> received the records before it but up to the last 1 MiB of them (the output failed): the export is incomplete"),
        "{err}"
    );
    // A backup whose report cannot be written is still made, and kept:
    // said, beside the error (since 2026-12-05; before, the error alone,
    // which reads as a failed backup).
    let copies = tempfile::tempdir().unwrap();
    let to = copies.path().join("copy");
    let (code, err) = cairn_into_dev_full(&["backup", "--data", d, "--to", to.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("the backup is complete in {}", to.display()))
            && err.contains("No space left on device"),
        "{err}"
    );
    assert!(!to.join(cairn_engine::BACKUP_INCOMPLETE_FILE).exists());
    let copy = Engine::open(EngineConfig::new(&to)).unwrap();
    assert!(copy.verify().unwrap().is_clean());
}

/// A restore whose report cannot be written (a full disk behind a
/// redirect) has still sent every record, acknowledged: said, beside the
/// error, so that a rerun with --append does not send them all twice
/// (since 2026-12-05; before, the error alone, which reads as a failed
/// restore).
#[test]
fn a_restore_whose_report_cannot_be_written_says_it_is_complete() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        e.append(&[batch(&TopicPartition::new("t", 0), 0..10, 100)])
            .unwrap();
        e.close().unwrap();
    }
    let mb = TestBroker::start(&["r:1"]);
    let rename = format!("t={}", mb.topic("r"));
    let d = dir.path().to_str().unwrap();
    let (code, err) = cairn_into_dev_full(&[
        "restore",
        "--data",
        d,
        "--brokers",
        &mb.brokers,
        "--rename",
        &rename,
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the restore is complete (10 records into 1 partition, all acknowledged), but its report could not be written")
            && err.contains("No space left on device"),
        "{err}"
    );
    // All ten are there: a second restore finds the target not empty.
    let (code, _, err) = cairn(&[
        "restore",
        "--data",
        d,
        "--brokers",
        &mb.brokers,
        "--rename",
        &rename,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("already holds records (offsets 0..10)"),
        "{err}"
    );
}

/// A prune whose report cannot be written stops at the first line it
/// cannot write, and says what it had pruned by then (since 2026-12-05;
/// before, the error alone, which reads as a prune that deleted nothing):
/// here, every partition (the lines wait for the pass's one fsync), which
/// it said as a stop with "a rerun prunes the rest" until 2026-12-07 (an
/// audit). A dry run's lines are not said as deletions.
#[test]
fn a_prune_whose_report_cannot_be_written_says_what_it_pruned() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let tps = [TopicPartition::new("t", 0), TopicPartition::new("t", 1)];
    {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        // Two entries each: a prune deletes whole entries.
        for tp in &tps {
            e.append(&[batch(tp, 0..5, 100)]).unwrap();
            e.append(&[batch(tp, 5..10, 100)]).unwrap();
        }
        e.close().unwrap();
    }
    let d = dir.path().to_str().unwrap();
    let prune = ["prune", "--data", d, "--topic", "t", "--before", "5"];
    let dry = [&prune[..], &["--dry-run"]].concat();
    let (code, err) = cairn_into_dev_full(&dry);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("a dry run, nothing deleted; its report line could not be written")
            && !err.contains("pruned (durably)")
            && !err.contains("the prune stopped")
            && err.contains("No space left on device"),
        "{err}"
    );
    let (code, err) = cairn_into_dev_full(&prune);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the prune is complete (every partition chosen was pruned as asked), but its report could not be written")
            && err.contains("No space left on device"),
        "{err}"
    );
    let firsts = || {
        let e = Engine::open(EngineConfig::new(dir.path())).unwrap();
        tps.iter()
            .map(|tp| e.partition(tp).unwrap().first_offset)
            .collect::<Vec<_>>()
    };
    // Both pruned: a partition's line is written once its deletion is
    // durable, and one pass made both durable together before the first
    // line (since 2026-12-06; before, the first alone was pruned).
    assert_eq!(firsts(), [5, 5]);
    let (code, out, err) = cairn(&prune);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(firsts(), [5, 5]);
}

/// An export range that meets no record is an error, also when it lies
/// within what the partition holds but in a gap of its offsets; and an
/// export is never written into the archive's own directory.
#[test]
fn export_refuses_an_empty_range_and_an_output_inside_the_archive() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    {
        let e = Engine::open(EngineConfig::new(&data)).unwrap();
        let tp = TopicPartition::new("t", 0);
        e.append(&[batch(&tp, 0..10, 10)]).unwrap();
        e.append(&[batch(&tp, 100..110, 10)]).unwrap();
        e.close().unwrap();
    }
    let d = data.to_str().unwrap();
    let file = dir.path().join("out.jsonl");
    let f = file.to_str().unwrap();
    let (code, out, err) = cairn(&["export", "--data", d, "--from", "20", "--to", "90"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("offsets 20..90") && err.contains("gap"),
        "{err}"
    );
    let (code, _, err) = cairn(&[
        "export", "--data", d, "--from", "20", "--to", "90", "--output", f,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(!file.exists(), "no empty export left behind");
    // A range across the gap takes what is there.
    let (code, out, err) = cairn(&["export", "--data", d, "--from", "5", "--to", "105"]);
    assert_eq!(code, 0, "{err}");
    let offsets: Vec<i64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let want: Vec<i64> = (5..10).chain(100..105).collect();
    assert_eq!(offsets, want);

    let inside = data.join("cairn.durable");
    let watermark = std::fs::read(&inside).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", inside.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("inside the archive's directory"), "{err}");
    // Nor through a symlink outside it, which an export writes through.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&inside, &link).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", link.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("inside the archive's directory"), "{err}");
    assert_eq!(std::fs::read(&inside).unwrap(), watermark, "untouched");
    // Nor through one that leads to nothing yet (the export would create it).
    let dangling = dir.path().join("dangling");
    let new_there = data.join("sled").join("export.jsonl");
    std::os::unix::fs::symlink(&new_there, &dangling).unwrap();
    let (code, _, err) = cairn(&[
        "export",
        "--data",
        d,
        "--output",
        dangling.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("inside the archive's directory"), "{err}");
    assert!(!new_there.exists());
    // Nor through a chain of links whose last one leads there (each link
    // relative to its own directory).
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    std::os::unix::fs::symlink("second", &first).unwrap();
    std::os::unix::fs::symlink(&new_there, &second).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", first.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("inside the archive's directory"), "{err}");
    assert!(!new_there.exists());
    let (code, _, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{err}");
}

/// A stopped archive at `dir`/archive holding t/0's offsets 0..10.
fn ten_record_archive(dir: &std::path::Path) -> std::path::PathBuf {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let data = dir.join("archive");
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    e.append(&[batch(&TopicPartition::new("t", 0), 0..10, 10)])
        .unwrap();
    e.close().unwrap();
    data
}

/// An export blocked opening a FIFO no one reads yet still ends at SIGTERM
/// (exit 130): the lock the signal's handler takes is not held around an
/// open that can block, and the open counts as a call into the output
/// that has not returned. Nothing was written, and the message says so
/// (until the night of 2026-12-04 it said only "incomplete"). Also for an
/// export of no record (its partition emptied), which opens the FIFO only
/// as it puts the output in place.
#[test]
fn an_export_waiting_for_a_fifos_reader_ends_at_a_signal() {
    for emptied in [false, true] {
        export_waiting_for_a_fifos_reader_ends_at_a_signal(emptied);
    }
}

fn export_waiting_for_a_fifos_reader_ends_at_a_signal(emptied: bool) {
    let dir = tempfile::tempdir().unwrap();
    let data = ten_record_archive(dir.path());
    if emptied {
        use cairn_engine::{Engine, EngineConfig, TopicPartition};
        let e = Engine::open(EngineConfig::new(&data)).unwrap();
        e.truncate_before(&TopicPartition::new("t", 0), 10).unwrap();
        assert_eq!(e.partitions()[0].record_count, 0);
        e.close().unwrap();
    }
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let mut child = Command::new(CAIRN)
        .args(["export", "--data", data.to_str().unwrap(), "--output"])
        .arg(&fifo)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Blocked in the FIFO's open: a condition the kernel shows, waited for
    // (bounded), not a guess at how long the export takes to get there.
    let pid = child.id();
    let blocked = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|t| {
                // `wait_for_partner`: fs/pipe.c, a FIFO's open waiting
                // for the other end.
                std::fs::read_to_string(t.path().join("wchan"))
                    .is_ok_and(|w| w.contains("wait_for_partner") || w.contains("fifo"))
            })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !blocked() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the export never blocked on the FIFO");
        }
        std::thread::yield_now();
    }
    common::send_signal(pid, "TERM");
    // It must end by itself; one that does not is killed, not waited for.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the export went on after SIGTERM");
        }
        std::thread::yield_now();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains(&format!(
            "interrupted before anything was written: {} was left as it was",
            fifo.display()
        )),
        "{err}"
    );
}

/// SIGINT to an export of a stopped archive stops it between records and
/// closes the archive, so that its open mark goes (exit 130): until
/// 2026-12-07 the signal ended the process at once, and the next open in
/// this boot took the mark for a crash and synced the whole store. The
/// export's output is read from a thread: its first line, then nothing
/// until the export says it heard the signal (so that it cannot finish
/// first), then to its end.
#[test]
fn an_interrupted_export_closes_the_archive() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    // Well over the export's 1 MiB buffer, so that a line read means the
    // export is among its records.
    for first in (0..40_000).step_by(10_000) {
        e.append(&[batch(
            &TopicPartition::new("t", 0),
            first..first + 10_000,
            100,
        )])
        .unwrap();
    }
    e.close().unwrap();
    let mut child = Command::new(CAIRN)
        .args(["export", "--data", data.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        first_tx.send(first).unwrap();
        // Nothing more read until the signal is said: the export, its
        // pipe full, cannot finish before it. Then read at once, well
        // within the second the watcher gives a call into the output.
        go_rx.recv().unwrap();
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
    });
    // stderr read to its end, its lines passed on as they come.
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let (line_tx, line_rx) = std::sync::mpsc::channel();
    let errors = std::thread::spawn(move || {
        let mut all = String::new();
        let mut line = String::new();
        while stderr.read_line(&mut line).unwrap() > 0 {
            all.push_str(&line);
            let _ = line_tx.send(std::mem::take(&mut line));
        }
        all
    });
    let first = first_rx.recv().unwrap();
    assert!(first.contains("\"offset\":0"), "{first}");
    common::send_signal(child.id(), "INT");
    // The export's stop is asked once this is said: only then is its
    // output read on (until then its pipe is full, so it cannot finish).
    while !line_rx
        .recv()
        .expect("stderr ended before the signal was said")
        .contains("signal received: stopping the export")
    {}
    go_tx.send(()).unwrap();
    reader.join().unwrap();
    let status = child.wait().unwrap();
    let err = errors.join().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("signal received: stopping the export"),
        "{err}"
    );
    assert!(
        err.contains("interrupted: the export stopped after "),
        "{err}"
    );
    assert!(!err.contains("exiting at once"), "{err}");
    assert!(!data.join("cairn.open").exists(), "{err}");
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    assert!(!e.recovery_report().unclean_stop_cache_dropped);
    e.close().unwrap();
}

/// An `--output` that is another user's symbolic link in a sticky
/// directory others may write (`/tmp`), leading to this user's file, is
/// refused before anything is read, as the kernel refuses to follow it
/// (`fs.protected_symlinks`), and the file it leads to is left as it was;
/// until 2026-12-06 the export followed it and replaced that file. Needs
/// root, to give the link another owner.
#[test]
fn export_refuses_another_users_link_in_a_sticky_directory() {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        common::skip("giving a link another owner needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = ten_record_archive(dir.path());
    let d = data.to_str().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.path().join("notes.txt");
    std::fs::write(&victim, "mine").unwrap();
    let link = shared.join("orders.jsonl");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let (code, out, err) = cairn(&["export", "--data", d, "--output", link.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("a symbolic link of another user's in the sticky directory")
            && err.contains("nothing was read or written"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
    // A link of this user's own there is followed, as the kernel would.
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", link.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap().lines().count(),
        10
    );
}

/// An `--output` the export could not create (a directory, a file in a
/// directory that is not there) is refused before any record is read, and
/// says so, rather than failing at the first write as an export cut short.
#[test]
fn export_refuses_an_output_it_could_not_create_before_reading() {
    let dir = tempfile::tempdir().unwrap();
    let data = ten_record_archive(dir.path());
    let d = data.to_str().unwrap();
    let missing = dir.path().join("no-such-dir").join("out.jsonl");
    let (code, out, err) = cairn(&["export", "--data", d, "--output", missing.to_str().unwrap()]);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("its directory") && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(err.contains("nothing was read or written"), "{err}");
    assert!(!err.contains("export stopped"), "{err}");
    let (code, _, err) = cairn(&[
        "export",
        "--data",
        d,
        "--output",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a directory"), "{err}");
    // Through a link too.
    let link = dir.path().join("to-a-dir");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", link.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a directory"), "{err}");
    // A good path still works.
    let good = dir.path().join("out.jsonl");
    let (code, _, err) = cairn(&["export", "--data", d, "--output", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&good).unwrap().lines().count(), 10);
    // A name ending in `/.` or `/..` names a directory, as one ending in
    // `/` does, whatever it leads to: refused before reading (until
    // 2026-12-06 `F/.` was taken for F, and refused only at the rename,
    // after the whole export).
    let before = std::fs::read(&good).unwrap();
    for end in ["/.", "/.."] {
        let named = format!("{}{end}", good.display());
        let (code, out, err) = cairn(&["export", "--data", d, "--output", &named]);
        assert_eq!((code, out.as_str()), (1, ""), "{named}: {err}");
        assert!(
            err.contains("a directory (name a file") && err.contains("nothing was read or written"),
            "{named}: {err}"
        );
    }
    assert_eq!(std::fs::read(&good).unwrap(), before);
}

#[test]
fn unknown_topic_is_a_clear_error() {
    let mb = TestBroker::start(&["exists:1"]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (exists, nope) = (mb.topic("exists"), mb.topic("nope"));
    {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &mb.brokers)
            .create()
            .unwrap();
        for _ in 0..5 {
            producer
                .send(BaseRecord::<[u8], [u8]>::to(&exists).payload(&b"kept"[..]))
                .unwrap();
        }
        producer.flush(std::time::Duration::from_secs(10)).unwrap();
    }
    // An archive that holds a record already: refused before it is even
    // opened (since 2026-12-04; before, it was recovered, perhaps upgraded
    // and pruned first), so not one of its bytes changes.
    {
        use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
        let e = Engine::open(EngineConfig::new(data)).unwrap();
        e.append(&[batch(&TopicPartition::new("other", 0), 0..1, 10)])
            .unwrap();
        e.close().unwrap();
    }
    let before = files_of(dir.path());
    // Alone, or beside one that exists: refused before anything is archived
    // or committed, the existing topic included.
    for topics in [nope.clone(), format!("{exists},{nope}")] {
        let group = mb.group("g");
        let (code, _, err) = cairn_run_in(&group, &mb.brokers, &topics, data, &[]);
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains(&format!("topic \"{nope}\" does not exist")) && err.contains("--topics"),
            "{err}"
        );
        assert!(!err.contains("archive open"), "{topics}: opened: {err}");
        let kafka = cairn_connector::cli::demo::committed(&mb.brokers, &group, &exists, 1).unwrap();
        assert_eq!(kafka[&0], 0, "{topics}: committed {kafka:?}");
        assert!(
            files_of(dir.path()) == before,
            "{topics}: the archive's files changed"
        );
    }
    // Several missing: each named at once (until 2026-12-07 the first
    // alone, and each fix met the next).
    let (nope2, nope3) = (mb.topic("nope2"), mb.topic("nope3"));
    let topics = format!("{nope},{exists},{nope2},{nope3}");
    let (code, _, err) = cairn_run_in(&mb.group("g"), &mb.brokers, &topics, data, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("topic \"{nope}\" does not exist"))
            && err.contains(&format!(
                "nor do \"{nope2}\" (given to --topics), \"{nope3}\" (given to --topics); check the name"
            )),
        "{err}"
    );
    // Given by a config file, the topic's name is said to come from it
    // (since the night of 2026-12-04; before, only --topics was named).
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), format!("topics = [{nope:?}]\n")).unwrap();
    let group = mb.group("g");
    let (code, _, err) = cairn(&[
        "run",
        "--config",
        cfg.path().to_str().unwrap(),
        "--brokers",
        &mb.brokers,
        "--group",
        &group,
        "--data",
        data,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("(topics set in {}, line 1)", cfg.path().display())),
        "{err}"
    );
    assert!(
        files_of(dir.path()) == before,
        "the archive's files changed"
    );
}

/// Every file under `dir`, by path, with its bytes.
fn files_of(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.insert(path, bytes);
            }
        }
    }
    files
}

/// An archive on tmpfs (fsyncs there make nothing durable) is warned
/// about before anything else. (/dev/shm is tmpfs on Linux.)
#[test]
fn an_archive_in_memory_is_warned_about() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        common::skip("no /dev/shm here");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", d, &["--connect-timeout-ms", "200"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "--data {d}: on tmpfs, which keeps files in memory only"
        )) && err.contains("cannot reach Kafka"),
        "{err}"
    );
    assert!(!data.exists(), "made for the run, removed with it");
    // A backup there is made, and warned about (since 2026-12-06).
    let src = tempfile::tempdir().unwrap();
    let archive = ten_record_archive(src.path());
    let copy = dir.path().join("copy");
    let (code, _, err) = cairn(&[
        "backup",
        "--data",
        archive.to_str().unwrap(),
        "--to",
        copy.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!(
            "--to {}: on tmpfs, which keeps files in memory only",
            copy.display()
        )),
        "{err}"
    );
    assert!(copy.is_dir(), "the copy is made");
}

/// A broker list librdkafka would misread (a port it wraps to another,
/// reads as 0) or cannot use at all is refused at once by every command
/// that takes one, naming the entry, before anything waits for Kafka or
/// touches `--data` (until 2026-12-07 `host:99999` connected to port
/// 34463, and `,` failed only after the connect timeout).
#[test]
fn malformed_broker_lists_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let data = data.to_str().unwrap();
    for (brokers, says) in [
        (
            "127.0.0.1:99999",
            "port \"99999\" is not a port (1 to 65535)",
        ),
        ("k:abc", "port \"abc\" is not a port"),
        (",", "no broker in it"),
        (
            "http://k:80",
            "http:// is not a protocol librdkafka connects with",
        ),
    ] {
        let t0 = std::time::Instant::now();
        let (code, _, err) = cairn_run(brokers, "t", data, &[]);
        assert_eq!(code, 1, "{brokers}: {err}");
        assert!(err.contains(says), "{brokers}: {err}");
        assert!(!err.contains("waiting for Kafka"), "{brokers}: {err}");
        let (code, _, err) = cairn(&["status", "--data", data, "--brokers", brokers]);
        assert_eq!(code, 1, "status {brokers}: {err}");
        assert!(err.contains(says), "status {brokers}: {err}");
        let (code, _, err) = cairn(&["restore", "--data", data, "--brokers", brokers]);
        assert_eq!(code, 1, "restore {brokers}: {err}");
        assert!(err.contains(says), "restore {brokers}: {err}");
        // Refused, not waited on (the connect timeout is 10 s).
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(8),
            "{brokers}"
        );
    }
    assert!(!std::path::Path::new(data).exists(), "--data was made");
    // A folder that holds no archive is said before Kafka is asked.
    let (code, _, err) = cairn(&["restore", "--data", data, "--brokers", "127.0.0.1:1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no cairn archive there") && !err.contains("cannot reach Kafka"),
        "{err}"
    );
}

#[test]
fn unreachable_broker_names_the_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", data, &["--connect-timeout-ms", "1500"]);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach Kafka at 127.0.0.1:1"), "{err}");
    // With the cause librdkafka's bare transport failure leaves out.
    assert!(
        err.contains("the client's last error") && err.contains("Connection refused"),
        "{err}"
    );
    // It waited the whole timeout, not one slice of the wait.
    let waited_ms: u64 = err
        .split("cannot reach Kafka at 127.0.0.1:1 after ")
        .nth(1)
        .and_then(|r| r.split(" ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no wait in {err}"));
    assert!(waited_ms >= 1_500, "{err}");
    // Each kind of librdkafka error once, not one line per failed connect
    // (about 20 a second of waiting before 2026-12-07, all printed as the
    // wait ended).
    let warns = err
        .lines()
        .filter(|l| l.contains(" WARN librdkafka"))
        .count();
    assert!((1..=6).contains(&warns), "{warns} WARN lines:\n{err}");
    // Said as the connection is refused, not once the wait has ended (the
    // check's client queue is served while it waits, since 2026-12-07):
    // with a wait of ten minutes, the cause comes, and a SIGTERM then
    // stops the wait (exit 130). No clock is read: before, the cause came
    // only as the wait ended, and this waited out the watchdog.
    {
        use std::io::{BufRead, BufReader};
        let mut run = common::cairn_run(
            &[
                "--brokers",
                "127.0.0.1:1",
                "--group",
                "g",
                "--topics",
                "t",
                "--data",
                data,
                "--connect-timeout-ms",
                "600000",
            ],
            None,
        );
        let mut lines = BufReader::new(run.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok);
        let cause = lines
            .find(|l| l.contains("Connection refused"))
            .expect("the run ended before it said the cause");
        assert!(cause.contains(r#""level":"WARN""#), "{cause}");
        let pid = rustix::process::Pid::from_child(&run);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        assert_eq!(run.wait().unwrap().code(), Some(130));
        let rest: Vec<String> = lines.collect();
        assert!(
            rest.iter().any(|l| l.contains("stopped by a signal after")),
            "{rest:#?}"
        );
    }
    // A secured cluster's settings are taken (librdkafka is built with
    // OpenSSL, SASL PLAIN and SCRAM): the same error, not a refused setting.
    let secured = [
        "--connect-timeout-ms",
        "1500",
        "-X",
        "security.protocol=sasl_ssl",
        "-X",
        "sasl.mechanisms=SCRAM-SHA-512",
        "-X",
        "sasl.username=u",
        "-X",
        "sasl.password=p",
    ];
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", data, &secured);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach Kafka at 127.0.0.1:1"), "{err}");
    // Brokers a config file gave are said to be set there, and the error
    // says what to check (since 2026-12-05).
    let conf = tempfile::tempdir().unwrap();
    let file = conf.path().join("b.toml");
    let run_with_file = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            file.to_str().unwrap(),
            "--group",
            "g",
            "--topics",
            "t",
            "--data",
            data,
            "--connect-timeout-ms",
            "300",
        ];
        args.extend_from_slice(extra);
        cairn(&args)
    };
    std::fs::write(&file, "brokers = \"127.0.0.1:1\"\n").unwrap();
    let (code, _, err) = run_with_file(&[]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!(
            "127.0.0.1:1 (brokers set in {}, line 1)",
            file.display()
        )) && err.contains("--connect-timeout-ms"),
        "{err}"
    );
    assert!(
        !err.contains("override these keys"),
        "no flag overrode: {err}"
    );
    // Flags that override the file's keys are said to (since 2026-12-06:
    // `--topics` replaced the file's list without a word).
    std::fs::write(
        &file,
        "brokers = \"127.0.0.1:1\"\ntopics = [\"a\", \"b\"]\n[kafka]\n\"linger.ms\" = \"5\"\n",
    )
    .unwrap();
    let (code, _, err) = run_with_file(&["-X", "linger.ms=7"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("override these keys of the config file")
            && err.contains("topics, kafka.linger.ms"),
        "{err}"
    );
    // A warned-of setting the file gave is said to come from it.
    std::fs::write(
        &file,
        "brokers = \"127.0.0.1:1\"\ntopics = [\"a\"]\n[kafka]\n\"check.crcs\" = \"false\"\n",
    )
    .unwrap();
    let (code, _, err) = run_with_file(&[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("-X check.crcs=false: librdkafka will not check")
            && err.contains(&format!(
                "(check.crcs set in [kafka] of {}, line 4)",
                file.display()
            )),
        "{err}"
    );
    // Eager assignment is allowed, and said (since 2026-12-07), whether a
    // flag or the file gives it.
    let (code, _, err) = run_with_file(&["-X", "partition.assignment.strategy=range"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("-X partition.assignment.strategy=range: eager assignment, in place of cairn's cooperative-sticky"),
        "{err}"
    );
    std::fs::write(
        &file,
        "brokers = \"127.0.0.1:1\"\ntopics = [\"a\"]\n[kafka]\n\"linger.ms\" = 5\n\"partition.assignment.strategy\" = \"roundrobin\"\n",
    )
    .unwrap();
    let (code, _, err) = run_with_file(&[]);
    assert_ne!(code, 0);
    assert!(
        err.contains("-X partition.assignment.strategy=roundrobin: eager assignment")
            && err.contains(&format!(
                "(partition.assignment.strategy set in [kafka] of {}, line 5)",
                file.display()
            )),
        "{err}"
    );
    std::fs::write(
        &file,
        "brokers = \"127.0.0.1:1\"\ntopics = [\"a\"]\n[kafka]\n\"partition.assignment.strategy\" = \"cooperative-sticky\"\n",
    )
    .unwrap();
    let (_, _, err) = run_with_file(&[]);
    assert!(!err.contains("eager assignment"), "{err}");
}

/// A run that fails having archived nothing (here: no broker answers)
/// leaves no archive directory behind: left, a mistyped --data would pass
/// for an archive from then on. Since 2026-12-04 Kafka is asked before
/// the archive is opened, so none is made (before, the one made was
/// removed again: that removal is seen in
/// `a_run_stopped_before_any_assignment_leaves_no_new_directory`). A
/// directory that was there, archive or empty, stays.
#[test]
fn a_run_that_archived_nothing_leaves_no_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    let timeout = ["--connect-timeout-ms", "500"];
    let nested = new.join("a").join("b");
    let (code, _, err) = cairn_run("127.0.0.1:1", "t", nested.to_str().unwrap(), &timeout);
    assert_ne!(code, 0);
    assert!(err.contains("cannot reach Kafka"), "{err}");
    assert!(!err.contains("archive open"), "{err}");
    assert!(!new.exists(), "a new directory is left");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, _) = cairn_run("127.0.0.1:1", "t", empty.to_str().unwrap(), &timeout);
    assert_ne!(code, 0);
    assert!(empty.is_dir(), "a directory that was there is removed");
    let archive = dir.path().join("archive");
    cairn_engine::Engine::open(cairn_engine::EngineConfig::new(&archive))
        .unwrap()
        .close()
        .unwrap();
    let (code, _, _) = cairn_run("127.0.0.1:1", "t", archive.to_str().unwrap(), &timeout);
    assert_ne!(code, 0);
    assert!(
        cairn_engine::EngineConfig::new(&archive)
            .store_exists()
            .unwrap(),
        "an archive that was there is removed"
    );
}

/// A run that fails after the archive was opened, having archived nothing
/// (here the brokers refuse the group: they answer, so the check made
/// before the open passes), removes the directory it made and the folders
/// above it that it made.
#[test]
fn a_run_that_fails_after_the_open_having_archived_nothing_leaves_no_new_directory() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("ga", 1, 1).unwrap();
    mock.request_errors(
        RDKafkaApiKey::FindCoordinator,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED; 1000],
    );
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    let data = new.join("a").join("b");
    let brokers = mock.bootstrap_servers();
    let (code, _, err) = cairn_run_in("ga-group", &brokers, "ga", data.to_str().unwrap(), &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("archive open"),
        "it failed before the open: {err}"
    );
    assert!(
        err.contains("removed the archive directory this run made"),
        "{err}"
    );
    assert!(!new.exists(), "a new directory is left");
}

/// A run stopped by a signal before the group assigned it anything (here
/// the group's coordinator never answers) archived nothing either: the
/// directory it made goes too, with the folders above it that it made
/// (before 2026-12-03 only a failed run's did, and this one, exit 0, was
/// kept and passed for an archive from then on).
#[test]
fn a_run_stopped_before_any_assignment_leaves_no_new_directory() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    use std::io::{BufRead, BufReader};
    let mock = MockCluster::new(1).unwrap();
    mock.create_topic("nj", 1, 1).unwrap();
    mock.request_errors(
        RDKafkaApiKey::FindCoordinator,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE; 100_000],
    );
    let brokers = mock.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new");
    let data = new.join("a").join("b");
    let mut args = common::run_flags(&brokers, "nj-group", "nj", data.to_str().unwrap());
    args.extend(["--connect-timeout-ms", "1000"]);
    let mut run = common::cairn_run(&args, None);
    let child = &mut run.0;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    lines_through(&mut lines, "not in the group yet");
    assert!(data.is_dir(), "the run made its directory");
    common::send_signal(child.id(), "INT");
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest:?}");
    assert!(
        rest.iter()
            .any(|l| l.contains("removed the archive directory this run made")),
        "{rest:?}"
    );
    assert!(!new.exists(), "the new directory is left");
}

/// A run of a new directory under `--auto-offset-reset latest`, stopped
/// cleanly before any record came, keeps the archive it made: it records
/// where its partitions start, and says so, not that
/// it holds records or was poisoned (until 2026-12-06; found by an audit).
#[test]
fn a_clean_stop_before_any_record_keeps_the_starts_it_recorded() {
    use std::io::{BufRead, BufReader};
    // A `cairn mock-broker`, or the real cluster CAIRN_TEST_BROKERS names.
    let tb = TestBroker::start(&["idle:1"]);
    let (topic, group) = (tb.topic("idle"), tb.group("idle-group"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("new");
    let mut args = common::run_flags(&tb.brokers, &group, &topic, data.to_str().unwrap());
    args.extend(["--auto-offset-reset", "latest"]);
    let mut run = common::cairn_run(&args, None);
    let child = &mut run.0;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    lines_through(&mut lines, "resuming");
    common::send_signal(child.id(), "INT");
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains(
            "it holds no record yet, but records where its partitions start, for the next run to resume there"
        )),
        "{rest:?}"
    );
    assert!(!rest.iter().any(|l| l.contains("poisoned")), "{rest:?}");
    assert!(data.join("sled").is_dir(), "the archive is gone");
}

/// A partition started at its log end under `--auto-offset-reset latest`
/// over records Kafka holds says, at WARN, how many it leaves out (an INFO
/// "resuming" line was all until 2026-12-07; found by an audit).
#[test]
fn a_latest_start_over_records_says_how_many_it_leaves_out() {
    use std::io::{BufRead, BufReader};
    // Three partitions: the demo records' (as above).
    let tb = TestBroker::start(&["skipped:3"]);
    let (topic, group) = (tb.topic("skipped"), tb.group("skipped-group"));
    cairn_connector::cli::demo::produce(&tb.brokers, &topic, 0..30).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("new");
    let mut args = common::run_flags(&tb.brokers, &group, &topic, data.to_str().unwrap());
    args.extend(["--auto-offset-reset", "latest"]);
    let mut run = common::cairn_run(&args, None);
    let child = &mut run.0;
    let warned = BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("starting at the log end (--auto-offset-reset latest)"))
        .expect("the run ended without the warning");
    assert!(
        warned.contains(r#""level":"WARN""#)
            && warned.contains(r#""records":30"#)
            && warned.contains(&format!("{topic}/0@")),
        "{warned}"
    );
}

/// Records skipped under `--on-oversize skip` are said in full once per
/// partition, the rest counted into summaries that name their partition
/// and offsets: one WARN per record flooded the log (980 lines for a
/// 1,000-record topic under a low `--record-bytes-max`; found 2026-12-07).
/// Every record skipped is accounted for, in a full line or a summary.
#[test]
fn oversize_records_skipped_are_said_once_per_partition_and_counted() {
    use std::io::{BufRead, BufReader};
    let tb = TestBroker::start(&["big:3"]);
    let (topic, group) = (tb.topic("big"), tb.group("big-group"));
    let produced = 600u64;
    cairn_connector::cli::demo::produce(&tb.brokers, &topic, 0..produced).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("new");
    let mut args = common::run_flags(&tb.brokers, &group, &topic, data.to_str().unwrap());
    // Most demo records are over 100 bytes, a few under.
    args.extend([
        "--record-bytes-max",
        "100",
        "--on-oversize",
        "skip",
        "--progress-interval-s",
        "1",
    ]);
    let mut run = common::cairn_run(&args, None);
    let pid = run.0.id();
    let mut lines = BufReader::new(run.0.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str::<serde_json::Value>(&l).unwrap());
    let fields = |l: &serde_json::Value, name: &str| l["fields"][name].as_u64();
    let mut said = Vec::new();
    // Until a progress report has seen every record produced.
    for l in lines.by_ref() {
        let seen = fields(&l, "records_skipped").zip(fields(&l, "records_written"));
        said.push(l);
        if seen.is_some_and(|(s, w)| s + w == produced) {
            break;
        }
    }
    common::send_signal(pid, "TERM");
    said.extend(lines);
    let skipped = said
        .iter()
        .rev()
        .find_map(|l| fields(l, "records_skipped"))
        .expect("a progress report");
    assert!(skipped > produced / 2, "{skipped}");
    let message = |l: &serde_json::Value| l["fields"]["message"].as_str().unwrap_or("").to_owned();
    let full: Vec<&serde_json::Value> = said
        .iter()
        .filter(|l| message(l).starts_with("skipping oversize record"))
        .collect();
    let summaries: Vec<&serde_json::Value> = said
        .iter()
        .filter(|l| message(l).contains("more oversize records skipped"))
        .collect();
    for l in full.iter().chain(&summaries) {
        assert_eq!(l["level"], "WARN", "{l}");
    }
    let mut partitions: Vec<&str> = full
        .iter()
        .map(|l| l["fields"]["tp"].as_str().unwrap())
        .collect();
    partitions.sort();
    assert_eq!(
        partitions,
        (0..3).map(|p| format!("{topic}/{p}")).collect::<Vec<_>>(),
        "one full line per partition"
    );
    let counted: u64 = summaries
        .iter()
        .map(|l| fields(l, "records").unwrap())
        .sum();
    assert_eq!(
        full.len() as u64 + counted,
        skipped,
        "each record skipped said once, in full or counted: {summaries:?}"
    );
    for l in &summaries {
        let tp = l["fields"]["tp"].as_str().unwrap();
        assert!(tp.starts_with(&format!("{topic}/")), "{l}");
        let first = fields(l, "first_offset").unwrap();
        let last = fields(l, "last_offset").unwrap();
        assert!(last - first + 1 >= fields(l, "records").unwrap(), "{l}");
    }
}

#[test]
fn bad_flags_and_config_name_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let (code, _, err) = cairn_run("b:1", "t", data, &["--commit", "sometimes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("commit"), "{err}");
    // As every choice's flag (until 2026-12-05 this one was checked after
    // parsing, exit 1).
    let (code, _, err) = cairn_run("b:1", "t", data, &["--auto-offset-reset", "sometimes"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--auto-offset-reset") && err.contains("earliest"),
        "{err}"
    );
    let (code, _, err) = cairn_run("b:1", "bad topic", data, &[]);
    assert_ne!(code, 0);
    assert!(err.contains("topics"), "{err}");
    let (code, _, err) = cairn_run("b:1", "t", data, &["-X", "enable.auto.commit=true"]);
    assert_ne!(code, 0);
    assert!(err.contains("enable.auto.commit"), "{err}");
    // status checks its -X before it opens the archive (an open may recover
    // or upgrade it): the error is the setting's, not the missing archive's.
    // One property under two names is refused as run refuses it (since
    // 2026-12-03).
    let none = dir.path().join("none");
    for (x, named) in [
        (
            &["-X", "security.protocol=bogus"][..],
            &["security.protocol"][..],
        ),
        (
            &[
                "-X",
                "sasl.mechanism=PLAIN",
                "-X",
                "sasl.mechanisms=SCRAM-SHA-512",
            ][..],
            &["sasl.mechanism", "sasl.mechanisms"][..],
        ),
        // status reads the high watermark, uncommitted (since the night of
        // 2026-12-04).
        (
            &["-X", "isolation.level=read_committed"][..],
            &["isolation.level=read_committed", "high watermark"][..],
        ),
    ] {
        let mut args = vec![
            "status",
            "--data",
            none.to_str().unwrap(),
            "--brokers",
            "b:1",
        ];
        args.extend_from_slice(x);
        let (code, _, err) = cairn(&args);
        assert_eq!(code, 1, "{x:?}: {err}");
        for name in named {
            assert!(err.contains(name), "{x:?}: {err}");
        }
    }
    let (code, _, err) = cairn_run("b:1", "t", data, &["-X", "statistics.interval.ms=5000"]);
    assert_ne!(code, 0);
    assert!(err.contains("--progress-interval-s"), "{err}");
    let (code, _, err) = cairn_run("b:1", "t", data, &["--on-oversize", "dead-letter"]);
    assert_ne!(code, 0);
    assert!(err.contains("--dead-letter-topic"), "{err}");
    // The dead letters' message timeout: once, positive.
    let dlq = ["--on-oversize", "dead-letter", "--dead-letter-topic", "dlq"];
    for (x, says) in [
        (&["-X", "delivery.timeout.ms=0"][..], "positive"),
        (
            &[
                "-X",
                "message.timeout.ms=10000",
                "-X",
                "delivery.timeout.ms=600000",
            ][..],
            "given more than once",
        ),
    ] {
        let args: Vec<&str> = dlq.iter().chain(x).copied().collect();
        let (code, _, err) = cairn_run("b:1", "t", data, &args);
        assert_eq!(code, 1, "{x:?}: {err}");
        assert!(err.contains(says), "{x:?}: {err}");
    }
    let (code, _, err) = cairn_run("b:1", "t", data, &["--progress-interval-s", "100000"]);
    assert_ne!(code, 0);
    assert!(err.contains("progress-interval-s 100000"), "{err}");
    for (args, want) in [
        (&["--retain", "0s"][..], "retain 0 (in whatever unit)"),
        (&["--retain", "0d"][..], "retain 0 (in whatever unit)"),
        (&["--retain", "500us"][..], "under a millisecond"),
        (&["--retain", "soon"][..], "7d"),
        (
            &["--retention-check-interval-s", "5"][..],
            "only used with a retention (--retain or --retain-bytes",
        ),
        (
            &["--retain", "1d", "--retention-check-interval-s", "0"][..],
            "1 to 86400",
        ),
        (&["--retain-bytes", "0"][..], "retain-bytes 0"),
        (&["--retain-bytes", "lots"][..], "50GiB"),
        // A negative number is the flag's error, not clap's "unexpected
        // argument '-5'", which names no flag.
        (&["--linger-ms", "-5"][..], "'--linger-ms <LINGER_MS>'"),
        (&["--retain-bytes", "-5"][..], "'--retain-bytes <SIZE>'"),
        (&["--retain", "-1d"][..], "--retain"),
        // A bare number would be bytes: 50 meant as gigabytes would keep
        // 50 bytes of each partition.
        (
            &["--retain-bytes", "50"][..],
            "give a unit (50GiB, 500MB, or 50B",
        ),
    ] {
        let (code, _, err) = cairn_run("b:1", "t", data, args);
        assert_ne!(code, 0, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let cfg = dir.path().join("cairn.toml");
    std::fs::write(&cfg, "retain = \"forever\"\n").unwrap();
    let (code, _, err) = cairn_run("b:1", "t", data, &["--config", cfg.to_str().unwrap()]);
    assert_ne!(code, 0);
    // Named with the file and its key, not only the value.
    let named = format!("{}: retain: \"forever\"", cfg.display());
    assert!(err.contains(&named), "{err}");
    std::fs::write(&cfg, "commit = \"sometimes\"\n").unwrap();
    let (code, _, err) = cairn_run("b:1", "t", data, &["--config", cfg.to_str().unwrap()]);
    assert_ne!(code, 0);
    let named = format!("{}: commit: commit policy \"sometimes\"", cfg.display());
    assert!(err.contains(&named), "{err}");
    // A size in TOML: a string with a unit.
    std::fs::write(&cfg, "retain-bytes = \"lots\"\n").unwrap();
    let (code, _, err) = cairn_run("b:1", "t", data, &["--config", cfg.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("retain-bytes") && err.contains("lots"),
        "{err}"
    );
    // A bare number, as a TOML integer or a string, is refused.
    for bare in ["retain-bytes = 1000000\n", "retain-bytes = \"1000000\"\n"] {
        std::fs::write(&cfg, bare).unwrap();
        let (code, _, err) = cairn_run("b:1", "t", data, &["--config", cfg.to_str().unwrap()]);
        assert_ne!(code, 0, "{bare}");
        assert!(
            err.contains("retain-bytes") && err.contains("give a unit"),
            "{bare}: {err}"
        );
    }
    for ok in [
        "retain-bytes = \"50GiB\"\n",
        "retain-bytes = \"1000000B\"\n",
    ] {
        std::fs::write(&cfg, ok).unwrap();
        let (code, _, err) = cairn_run(
            "b:1",
            "t",
            data,
            &["--config", cfg.to_str().unwrap(), "--retain-bytes", "0"],
        );
        // The flag wins (the file's size is not read then: what it reads
        // as is checked in run.rs's unit tests, without a flag over it).
        assert!(
            code != 0 && err.contains("retain-bytes 0"),
            "{ok}: the flag won: {err}"
        );
    }
    std::fs::write(&cfg, "brokerz = \"x\"\n").unwrap();
    let (code, _, err) = cairn(&["run", "--config", cfg.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("brokerz"), "{err}");
    // A value the file gives that is refused after parsing names the file
    // and its key too (since 2026-12-04; before, only the value, as if a
    // flag had given it).
    std::fs::write(&cfg, "# a comment\nlinger-ms = 70000\n").unwrap();
    let (code, _, err) = cairn_run("b:1", "t", data, &["--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let named = format!(
        "linger-ms 70000: must be at most 60000 (linger-ms set in {}, line 2)",
        cfg.display()
    );
    assert!(err.contains(&named), "{err}");
    // So is a data directory the file gives that is refused (a file is
    // there): since the night of 2026-12-04.
    let a_file = dir.path().join("a-file");
    std::fs::write(&a_file, "not an archive").unwrap();
    std::fs::write(&cfg, format!("data = {:?}\n", a_file.to_str().unwrap())).unwrap();
    let (code, _, err) = cairn(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--brokers",
        "b:1",
        "--group",
        "g",
        "--topics",
        "t",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not a directory")
            && err.contains(&format!("(data set in {}, line 1)", cfg.display())),
        "{err}"
    );
    std::fs::write(&cfg, "topics = []\n").unwrap();
    let (code, _, err) = cairn(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--brokers",
        "b:1",
        "--group",
        "g",
        "--data",
        data,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "topics: none given (use --topics t1,t2) (topics set in {}, line 1)",
            cfg.display()
        )),
        "{err}"
    );
    // A fraction of a byte is refused as given, not as a 0 nobody wrote.
    let (code, _, err) = cairn_run("b:1", "t", data, &["--retain-bytes", "0.5B"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("'0.5B'") && err.contains("less than one byte"),
        "{err}"
    );
    // librdkafka's aliases of the properties cairn manages: with both set,
    // which one wins depends on a hash map's order.
    for x in [
        "metadata.broker.list=elsewhere:9092",
        "auto.commit.enable=true",
    ] {
        let (code, _, err) = cairn_run("b:1", "t", data, &["-X", x]);
        assert_ne!(code, 0);
        assert!(err.contains("manages this property"), "{x}: {err}");
    }
    // librdkafka strips `topic.` from a topic-level property: the prefixed
    // keys set what cairn manages just the same.
    for (x, says) in [
        (
            "topic.auto.offset.reset=earliest",
            "-X topic.auto.offset.reset",
        ),
        ("topic.auto.commit.enable=true", "manages this property"),
        ("isolation.level=read_uncommitted", "read_committed"),
        ("group.protocol=consumer", "classic group protocol"),
        // Checked by librdkafka before the archive is opened (exit 1).
        ("fetch.wait.max.mz=10", "fetch.wait.max.mz"),
        ("fetch.wait.max.ms=soon", "fetch.wait.max.ms"),
        // librdkafka's checks across properties, which run only as a
        // client is created.
        ("max.poll.interval.ms=1000", "max.poll.interval.ms"),
    ] {
        let (code, _, err) = cairn_run("b:1", "t", data, &["-X", x]);
        assert_eq!(code, 1, "{x}: {err}");
        assert!(err.contains(says), "{x}: {err}");
    }
    assert!(
        !std::path::Path::new(data).join("sled").exists(),
        "a refused -X opened the archive"
    );
    // Past i32's milliseconds librdkafka would wait forever (or fail at once).
    let (code, _, err) = cairn_run("b:1", "t", data, &["--connect-timeout-ms", "4294967295"]);
    assert_ne!(code, 0);
    assert!(err.contains("connect-timeout-ms 4294967295"), "{err}");
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    // More demo records than the mock cluster keeps would read as loss.
    // Fewer than 10 would leave the run after the crash nothing to resume.
    for n in ["0", "9", "-5", "100001"] {
        let (code, _, err) = cairn(&["demo", "--records", n, "--data", missing]);
        assert_eq!(code, 1, "{n}: {err}");
        assert!(err.contains("must be 10..=100000"), "{n}: {err}");
        assert!(!std::path::Path::new(missing).exists());
    }
    // Settings are checked before the archive is looked at.
    let (code, _, err) = cairn(&[
        "restore",
        "--data",
        missing,
        "--brokers",
        "b:1",
        "--connect-timeout-ms",
        "18446744073709551615",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("connect-timeout-ms"), "{err}");
    // A -X librdkafka refuses, alone or beside restore's own settings.
    for (x, says) in [("linger.mz=5", "linger.mz"), ("acks=1", "acks")] {
        let (code, _, err) = cairn(&["restore", "--data", missing, "--brokers", "b:1", "-X", x]);
        assert_eq!(code, 1, "{x}: {err}");
        assert!(err.contains("-X") && err.contains(says), "{x}: {err}");
    }
    let (code, _, err) = cairn(&["status", "--data", missing, "--group", "g"]);
    assert_eq!(code, 2, "--group without --brokers is a usage error: {err}");
    let (code, _, err) = cairn(&[
        "status",
        "--data",
        missing,
        "--brokers",
        "b:1",
        "--group",
        "g",
        "-X",
        "group.id=h",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("-X group.id"), "{err}");
    // verify: 2 when it could not check at all (1 is kept for damage found).
    let (code, _, err) = cairn(&["verify", "--data", missing]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("could not verify"), "{err}");
}

/// SIGINT while the demo archives its restored topic into a scratch
/// archive (in TMPDIR): the scratch archive is removed, the demo's own
/// archive stays and is named, and the exit is 130. Before, the scratch
/// archive was left in TMPDIR.
#[test]
fn an_interrupted_demo_leaves_no_scratch_archive() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let mut demo = common::KillOnDrop::spawn(
        Command::new(CAIRN)
            .args([
                "demo",
                "--records",
                "3000",
                "--data",
                data.to_str().unwrap(),
            ])
            .env("TMPDIR", dir.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    // The line printed just before the restore round trip starts.
    let out = BufReader::new(demo.stdout.take().unwrap());
    let mut lines = out.lines().map_while(Result::ok);
    assert!(
        lines.by_ref().any(|l| l.starts_with("verified ")),
        "the demo ended before its archive was done"
    );
    // The scratch archive appears once the restore is done, and lives for
    // the seconds the second run takes to join its group and archive.
    let scratch = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("cairn-demo-restored-")
            })
            .map(|e| e.path())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let found = loop {
        if let Some(p) = scratch() {
            break p;
        }
        assert!(
            demo.try_wait().unwrap().is_none(),
            "the demo ended before its scratch archive was seen"
        );
        assert!(std::time::Instant::now() < deadline, "no scratch archive");
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    common::send_signal(demo.id(), "INT");
    let status = demo.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(!found.exists(), "the scratch archive {found:?} is left");
    assert!(
        err.contains(&format!(
            "the demo's archive, if it got that far, stays at {}",
            data.display()
        )),
        "{err}"
    );
    assert!(cairn_engine::EngineConfig::new(&data)
        .store_exists()
        .unwrap());
}

/// SIGINT before the demo's first run has written into the folder it made
/// (it is still producing): the empty folder goes, and the demo says
/// nothing was archived. The signal races the production of 100,000
/// records, which it almost always wins; when the run had begun writing,
/// the folder stays and is named instead. Either way the message matches
/// what is on disk, and the exit is 130.
#[test]
fn an_interrupted_demo_removes_the_empty_folder_it_made() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let mut demo = common::KillOnDrop::spawn(
        Command::new(CAIRN)
            .args(["demo", "--records", "100000"])
            .env("TMPDIR", tmp.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    // Its first line: the folder is made and the signal handled; the
    // production starts right after it.
    let mut first = String::new();
    BufReader::new(demo.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("cairn demo: embedded Kafka"), "{first}");
    common::send_signal(demo.id(), "INT");
    let status = demo.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut demo.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("cairn-demo-")
        })
        .collect();
    if err.contains("interrupted: nothing was archived yet") {
        assert!(left.is_empty(), "the empty folder is left: {left:?}\n{err}");
    } else {
        eprintln!("the run had begun writing before the signal: the folder stays");
        assert_eq!(left.len(), 1, "{left:?}\n{err}");
        // Only a folder the run wrote into stays: an empty one is removed.
        assert!(
            std::fs::read_dir(&left[0]).unwrap().next().is_some(),
            "an empty folder is left: {left:?}\n{err}"
        );
        assert!(
            err.contains(&format!("stays at {}", left[0].display())),
            "{err}"
        );
    }
}

#[test]
fn demo_archive_reads_back_with_status_export_verify() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    // Its scratch archive goes to TMPDIR: here, so that a leak is seen.
    let demo = Command::new(CAIRN)
        .args(["demo", "--records", "3000", "--data", d])
        .env("TMPDIR", dir.path())
        // What the sink's stop says when it cannot close the engine.
        .env("RUST_LOG", "warn,cairn_connector::task=info")
        .output()
        .unwrap();
    let (code, out, err) = (
        demo.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&demo.stdout).into_owned(),
        String::from_utf8_lossy(&demo.stderr).into_owned(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no loss, no duplicates"), "{out}");
    // Its runs close their engines as `cairn run` does (until 2026-12-05
    // the demo's own check held each, and they were only synced).
    assert!(!err.contains("still held elsewhere"), "{err}");
    assert!(
        out.contains("cairn run (a child process) aborted after the fsync of its 4th put"),
        "{out}"
    );
    assert!(
        out.contains("restored   3000 records into cairn-demo-restored")
            && out.contains("identical to what was produced"),
        "{out}"
    );
    // The scratch archive of the restore round trip is gone; a second demo
    // into the same folder is refused and deletes nothing (verify below).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let (code, _, err) = cairn(&["demo", "--records", "10", "--data", d]);
    assert_ne!(code, 0);
    assert!(
        err.contains("not empty") && err.contains("never deletes"),
        "{err}"
    );
    // A file there: said as one (until 2026-12-06 an i/o error).
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let (code, _, err) = cairn(&["demo", "--records", "10", "--data", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a file, not a folder"), "{err}");
    std::fs::remove_file(&file).unwrap();
    let (code, out, _) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0);
    assert!(
        out.contains("clean") && out.contains("3000 records"),
        "{out}"
    );
    let (code, out, _) = cairn(&["status", "--data", d, "--json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"durable_next_offset\": 1000"), "{out}");
    // Read from the stopped archive, not a running cairn's answer.
    assert!(out.contains("\"live_pid\": null"), "{out}");
    // A selection the archive does not hold is an error, not an empty export.
    for (args, want) in [
        (&["--topic", "cairn-dmeo"][..], "no such topic"),
        (&["--partition", "9"][..], "--partition 9"),
        (&["--from", "20", "--to", "10"][..], "--to 10"),
        // Negative numbers reach the checks (not "unexpected argument").
        (&["--from", "-1"][..], "--from -1: must be at least 0"),
        (&["--partition", "-1"][..], "--partition -1"),
    ] {
        let mut a = vec!["export", "--data", d];
        a.extend_from_slice(args);
        let (code, out, err) = cairn(&a);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty() && err.contains(want), "{args:?}: {err}");
    }
    let (code, out, _) = cairn(&[
        "export",
        "--data",
        d,
        "--partition",
        "1",
        "--from",
        "10",
        "--to",
        "20",
    ]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 10);
    assert!(
        lines[0].starts_with("{\"topic\":\"cairn-demo\",\"partition\":1,\"offset\":10,"),
        "{}",
        lines[0]
    );
    let (code, out, _) = cairn(&[
        "export",
        "--data",
        d,
        "--format",
        "raw",
        "--partition",
        "0",
        "--to",
        "2",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("\nrecord 0000000003 "),
        "record 0 has a null value: {out:?}"
    );
    // A reader that went away (`cairn status | head`): the read end of the
    // pipe is closed before the command starts, so every write fails with
    // EPIPE. Each command stops quietly with success, never a panic.
    for args in [
        &["status", "--data", d][..],
        &["status", "--data", d, "--json"][..],
        &["verify", "--data", d][..],
        &["export", "--data", d][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(CAIRN)
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A damaged archive: verify names the location and exits non-zero, never panics.
    cairn_engine::fuzzing::with_raw_tree(&data, |t| {
        let k = cairn_engine::keys::wal_key(2);
        let mut v = t.get(k).unwrap().unwrap().to_vec();
        v[40] ^= 0xff;
        t.insert(k, v).unwrap();
    });
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("problem: wal lsn 2: checksum mismatch"),
        "{out}"
    );
    assert!(!err.contains("panicked"));
}

#[test]
fn oversize_record_stops_with_its_coordinates_and_is_never_committed() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let mb = TestBroker::start(&["big:1"]);
    let (big_topic, group) = (mb.topic("big"), mb.group("g"));
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &mb.brokers)
        .create()
        .unwrap();
    let small = vec![b's'; 100];
    let big = vec![b'B'; 4_000];
    for i in 0..15 {
        let v = if i == 10 { &big } else { &small };
        producer
            .send(
                BaseRecord::<[u8], [u8]>::to(&big_topic)
                    .partition(0)
                    .payload(v),
            )
            .unwrap();
    }
    producer.flush(std::time::Duration::from_secs(10)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = cairn_run_in(
        &group,
        &mb.brokers,
        &big_topic,
        d,
        &["--record-bytes-max", "1000", "--batch-records-max", "4"],
    );
    assert_eq!(code, 1, "{err}");
    let cause = format!(
        "record {big_topic}/0@10 is 4000 bytes, over the limit of 1000 (to archive it, raise --record-bytes-max to 4000 or more"
    );
    // Said once, on the line the command stops on (until 2026-12-07 the
    // loop's ERROR line said it first).
    assert_eq!(err.matches(&cause).count(), 1, "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("error: ") && l.contains(&cause)),
        "{err}"
    );
    // Nothing at or after the oversize record is archived or committed,
    // and what is archived is the records before it, as produced.
    let tp = cairn_engine::TopicPartition::new(&big_topic, 0);
    let engine = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(d)).unwrap();
    let durable = engine.durable_offset(&tp).unwrap_or(0);
    assert!(
        durable <= 10,
        "archived past the oversize record: {durable}"
    );
    let held: Vec<(i64, Option<Vec<u8>>)> = engine
        .read(&tp, 0)
        .unwrap()
        .map(|r| r.map(|r| (r.offset, r.value)).unwrap())
        .collect();
    let want: Vec<(i64, Option<Vec<u8>>)> =
        (0..durable).map(|o| (o, Some(small.clone()))).collect();
    assert_eq!(held, want);
    drop(engine);
    let kafka = cairn_connector::cli::demo::committed(&mb.brokers, &group, &big_topic, 1).unwrap();
    assert!(
        kafka[&0] <= durable,
        "committed {} > durable {durable}",
        kafka[&0]
    );

    // Nothing was lost: with a limit the record fits, a rerun archives all
    // fifteen, each once, the big one included. (In a group of its own: the
    // mock cluster holds a join to the group just left until the old
    // member's session has timed out, and the archive, not Kafka, says
    // where the partition resumes.)
    let mut cfg = cairn_connector::RunConfig::new(
        &mb.brokers,
        mb.group("g-rerun"),
        vec![big_topic.clone()],
        dir.path().into(),
    );
    cfg.record_bytes_max = 5_000;
    for (k, v) in common::FAST_GROUP {
        cfg.kafka.insert(k.into(), v.into());
    }
    let done_tp = tp.clone();
    let engine = std::sync::Arc::new(
        cairn_engine::Engine::open(cairn_engine::EngineConfig::new(d).record_bytes_max(5_000))
            .unwrap(),
    );
    common::run_bounded(
        &cfg,
        Box::new(cairn_connector::ArchiveSink::new(engine)),
        cairn_connector::PipelineOptions {
            done: Some(Box::new(move |c| c.get(&done_tp) == Some(&15))),
            ..Default::default()
        },
    )
    .unwrap();
    let engine = cairn_engine::Engine::open(cairn_engine::EngineConfig::new(d)).unwrap();
    let values: Vec<(i64, usize)> = engine
        .read(&tp, 0)
        .unwrap()
        .map(|r| {
            r.map(|r| (r.offset, r.value.map_or(0, |v| v.len())))
                .unwrap()
        })
        .collect();
    let want: Vec<(i64, usize)> = (0..15)
        .map(|o| (o, if o == 10 { 4_000 } else { 100 }))
        .collect();
    assert_eq!(values, want);
}

#[test]
fn restore_puts_the_demo_archive_back_and_refuses_to_do_it_twice() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    let (code, out, err) = cairn(&["demo", "--records", "3000", "--data", d]);
    assert_eq!(code, 0, "{out}{err}");
    // The archive left for the reader holds no socket of its crashed run,
    // which nothing serves (until 2026-12-06 it did).
    let names: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n == "cairn.sock" || n == ".live"),
        "{names:?}"
    );
    let mb = TestBroker::start(&["restored:3", "narrow:2"]);
    let (restored, narrow) = (mb.topic("restored"), mb.topic("narrow"));
    let to_restored = format!("cairn-demo={restored}");
    let restore = |extra: &[&str]| {
        let mut args = vec!["restore", "--data", d, "--brokers", &mb.brokers];
        args.extend_from_slice(extra);
        cairn(&args)
    };
    let (code, out, err) = restore(&["--rename", &to_restored]);
    assert_eq!(code, 0, "{out}{err}");
    for p in 0..3 {
        assert!(
            out.contains(&format!(
                "cairn-demo/{p} -> {restored}/{p}: 1000 records (archived offsets 0..=999)"
            )),
            "{out}"
        );
    }
    assert!(out.contains("restored 3000 records"), "{out}");
    // Again: the target now holds records, so nothing is produced.
    let (code, _, err) = restore(&["--rename", &to_restored]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "{restored}/0 already holds records (offsets 0..1000), and so do {restored}/1 (offsets 0..1000), {restored}/2 (offsets 0..1000)"
        )) && err.contains("--append"),
        "{err}"
    );
    let (code, _, err) = restore(&["--rename", &format!("cairn-demo={narrow}")]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("\"{narrow}\" has 2 partitions")),
        "{err}"
    );
    let (code, _, err) = restore(&["--rename", "cairn-demo"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expected ARCHIVED=TARGET"), "{err}");
    let (code, _, err) = restore(&["-X", "enable.idempotence=false"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("enable.idempotence"), "{err}");
    // The message timeout under librdkafka's `topic.` prefix is the same
    // setting: checked as such.
    let (code, _, err) = restore(&["-X", "topic.message.timeout.ms=0"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("-X topic.message.timeout.ms=0"), "{err}");
    let (code, _, err) = restore(&[
        "-X",
        "message.timeout.ms=1000",
        "-X",
        "topic.delivery.timeout.ms=2000",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("given more than once"), "{err}");
}

/// An archive of `entries` entries of 10 records in each of `tps`: offsets
/// from 0, timestamps 1_700_000_000_000 + 10 × offset (`fuzzing::record`).
fn archive_of(data: &std::path::Path, tps: &[(&str, i32, i64)]) {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let e = Engine::open(EngineConfig::new(data)).unwrap();
    for &(topic, partition, entries) in tps {
        let tp = TopicPartition::new(topic, partition);
        for i in 0..entries {
            e.write(&[batch(&tp, i * 10..i * 10 + 10, 20)]).unwrap();
        }
    }
    e.close().unwrap();
}

/// An archive a later cairn wrote (its `Mformat` names a later version)
/// is not damage: verify says it cannot check it (exit 2, the version
/// named), as status does; it was "1 problem", exit 1, until 2026-12-05.
#[test]
fn verify_of_a_later_format_says_not_checked_not_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    archive_of(&data, &[("a", 0, 3)]);
    let later = cairn_engine::meta::FORMAT_VERSION + 1;
    cairn_engine::fuzzing::with_raw_tree(&data, |t| {
        t.insert(
            cairn_engine::keys::META_FORMAT,
            cairn_engine::meta::encode_format(later),
        )
        .unwrap();
    });
    let want = format!("unsupported format version {later}");
    let (code, out, err) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&want), "{err}");
    assert!(!out.contains("problem"), "{out}");
    let (code, _, err) = cairn(&["status", "--data", d]);
    assert_ne!(code, 0);
    assert!(
        err.contains(&want) && err.contains("a newer cairn wrote it"),
        "{err}"
    );
}

/// `(first, next, records)` of each partition, from `status --json`.
fn partitions_of(d: &str) -> Vec<(String, i64, i64, i64, i64)> {
    let (code, out, err) = cairn(&["status", "--data", d, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["topic"].as_str().unwrap().to_owned(),
                p["partition"].as_i64().unwrap(),
                p["first_offset"].as_i64().unwrap(),
                p["durable_next_offset"].as_i64().unwrap(),
                p["records"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn prune_deletes_below_the_cut_and_keeps_next_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    archive_of(&data, &[("a", 0, 30), ("a", 1, 10), ("b", 0, 5)]);
    let all = vec![
        ("a".to_owned(), 0, 0, 300, 300),
        ("a".to_owned(), 1, 0, 100, 100),
        ("b".to_owned(), 0, 0, 50, 50),
    ];
    assert_eq!(partitions_of(d), all);

    // Bad cuts and selections: a clear error, nothing deleted.
    for (args, want) in [
        (&[][..], "--before"),
        (
            &["--before", "1", "--older-than", "1d"][..],
            "cannot be used with",
        ),
        (&["--before", "-1"][..], "at least 0"),
        (&["--before-time", "yesterday"][..], "RFC 3339"),
        (&["--older-than", "soon"][..], "7d"),
        (&["--older-than", "0s"][..], "positive"),
        (&["--older-than", "500us"][..], "under a millisecond"),
        (&["--before", "1", "-t", "c"][..], "no such topic"),
        (
            &["--before", "1", "-t", "a", "--partition", "9"][..],
            "--partition 9",
        ),
        (
            &["--before", "1", "-t", "a", "--partition", "-1"][..],
            "--partition -1",
        ),
        // A partition number alone would cut it in every topic.
        (
            &["--before", "1", "--partition", "0"][..],
            "give --topic too",
        ),
        (&["--older-than", "6m"][..], "write min or months"),
        (&["--before-time", "1700000000000000"][..], "microseconds"),
        (
            &["--before-time", "1767225600"][..],
            "was this seconds? then 1767225600000",
        ),
        // An offset alone would cut every topic at it.
        (&["--before", "105"][..], "--before 105: give --topic too"),
        // Past every chosen partition's end (a digit too many): it would
        // empty them all without a word.
        (
            &["--before", "3000", "-t", "a"][..],
            "--before 3000 is past the next offset of every partition chosen (the largest is 300), so it would empty them all: to do that, give --before 300",
        ),
    ] {
        let mut a = vec!["prune", "--data", d];
        a.extend_from_slice(args);
        let (code, out, err) = cairn(&a);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty() && err.contains(want), "{args:?}: {err}");
    }
    let (code, out, err) = cairn(&[
        "prune",
        "--data",
        d,
        "-t",
        "a,b",
        "--before",
        "105",
        "--dry-run",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("a/0: would prune 100 records (")
            && out.contains("below offset 105; first offset 0 -> 100; next offset 300")
            && out.contains("a/1: would prune 100 records (")
            && out.contains("b/0: would prune 50 records (")
            && out.contains("next offset 50 (all it held: --before 105 is past its next offset)")
            && !out.contains("next offset 300 (all")
            && out.contains("would prune 250 records (4905 payload bytes) in 3 of 3 partitions"),
        "{out}"
    );
    assert_eq!(partitions_of(d), all, "a dry run deletes nothing");
    // An age reaching back before 1970 deletes nothing (as `run --retain`),
    // rather than blaming a --before-time never given.
    let (code, _, err) = cairn(&["prune", "--data", d, "--older-than", "100y"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(partitions_of(d), all, "nothing is older than 100 years");

    // An offset cut inside an entry keeps that entry whole.
    let prune_a0 = |cut: &[&str]| {
        let mut args = vec!["prune", "--data", d, "-t", "a", "--partition", "0"];
        args.extend_from_slice(cut);
        cairn(&args)
    };
    let (code, out, err) = prune_a0(&["--before", "105"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("a/0: pruned 100 records (")
            && out.contains("first offset 0 -> 100; next offset 300"),
        "{out}"
    );
    let mut want = all.clone();
    want[0] = ("a".to_owned(), 0, 100, 300, 200);
    assert_eq!(partitions_of(d), want);

    // A time cut: the first record at or after it is offset 200.
    let (code, out, err) = prune_a0(&[
        "--before-time",
        &(1_700_000_000_000i64 + 200 * 10).to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("below offset 200; first offset 100 -> 200"),
        "{out}"
    );
    let (code, out, _) = cairn(&["export", "--data", d, "-t", "a", "--partition", "0"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 100);
    assert!(
        out.starts_with("{\"topic\":\"a\",\"partition\":0,\"offset\":200,"),
        "{out}"
    );
    // A --from below what the prune left reads from the first offset
    // held, and says so.
    let (code, out, err) = cairn(&[
        "export",
        "--data",
        d,
        "-t",
        "a",
        "--partition",
        "0",
        "--from",
        "150",
        "--to",
        "210",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 10);
    assert!(
        err.contains("--from 150: below the first offset held of a/0 (200); read from there"),
        "{err}"
    );

    // A size per partition: b's entries hold ~194 payload bytes each, so
    // 400 bytes keep its newest two.
    let (code, _, err) = cairn(&["prune", "--data", d, "-t", "b", "--keep-bytes", "400"]);
    assert_ne!(code, 0);
    assert!(err.contains("give a unit"), "{err}");
    let (code, out, err) = cairn(&["prune", "--data", d, "-t", "b", "--keep-bytes", "400B"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("b/0: pruned 30 records (")
            && out.contains("first offset 0 -> 30; next offset 50"),
        "{out}"
    );
    // A bound below the size entries are written at is said to be (since
    // 2026-12-06): deletion is by whole entries.
    assert!(
        err.contains("--keep-bytes 400B: entries (a put's records of one partition) are cut once they reach about 1 MiB"),
        "{err}"
    );
    let (code, _, err) = cairn(&["prune", "--data", d, "--keep-bytes", "lots"]);
    assert_ne!(code, 0);
    assert!(err.contains("50GiB"), "{err}");
    // Keeping nothing would empty every partition: refused, as
    // `--retain-bytes 0` is, and nothing deleted.
    let (code, _, err) = cairn(&["prune", "--data", d, "--keep-bytes", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("--keep-bytes 0: must be positive"), "{err}");
    assert_eq!(partitions_of(d)[2], ("b".to_owned(), 0, 30, 50, 20));

    // An age: every record is from 2023, so everything goes; next offsets stay.
    let (code, out, err) = cairn(&["prune", "--data", d, "--older-than", "1day"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("pruned 220 records"), "{out}");
    assert_eq!(
        partitions_of(d),
        vec![
            ("a".to_owned(), 0, 300, 300, 0),
            ("a".to_owned(), 1, 100, 100, 0),
            ("b".to_owned(), 0, 50, 50, 0),
        ]
    );
    let (code, out, _) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean") && out.contains(" 0 records"), "{out}");
}

/// A prune killed between two of its durable steps leaves a clean archive
/// holding exactly what the finished steps left; running it again finishes.
#[test]
fn prune_killed_between_steps_leaves_a_clean_archive_and_a_rerun_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    let step = cairn_engine::TRUNCATE_ENTRIES_PER_STEP as i64;
    let entries = step * 2 + 10;
    archive_of(&data, &[("a", 0, entries)]);
    let out = Command::new(CAIRN)
        .args([
            "prune",
            "--data",
            d,
            "-t",
            "a",
            "--before",
            &(entries * 10).to_string(),
        ])
        .env("CAIRN_ABORT_AT", "truncate-between-steps:1")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    // SIGABRT, from the crash point, which says so.
    assert_eq!(out.status.signal(), Some(6), "aborted: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CAIRN_ABORT_AT"), "{stderr}");
    let (code, out, _) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean"), "{out}");
    let left = entries - step;
    assert_eq!(
        partitions_of(d),
        vec![("a".to_owned(), 0, step * 10, entries * 10, left * 10)]
    );
    let (code, out, err) = cairn(&[
        "prune",
        "--data",
        d,
        "-t",
        "a",
        "--before",
        &(entries * 10).to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("pruned {} records", left * 10)),
        "{out}"
    );
    assert_eq!(
        partitions_of(d),
        vec![("a".to_owned(), 0, entries * 10, entries * 10, 0)]
    );
}

/// A `--retain` pass killed after its second partition, with deletions
/// not yet durable (a pass makes its partitions' deletions durable
/// together since 2026-12-06), leaves a clean archive in which each
/// partition is as before the pass or as after it (sled most likely loses
/// both unsynced deletions to the abort: "after" is allowed for, not made
/// to happen), the third untouched; a prune with the same cut then
/// finishes it.
#[test]
fn a_retention_pass_killed_before_its_sync_leaves_a_clean_archive() {
    let mb = TestBroker::start(&["kept:3"]);
    let (topic, group) = (mb.topic("kept"), mb.group("kept-group"));
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    // Three entries of 10 records in each partition (about 190 payload
    // bytes an entry): keeping 200 B deletes the two older of each.
    archive_of(&data, &[(&topic, 0, 3), (&topic, 1, 3), (&topic, 2, 3)]);
    let mut args = vec!["run"];
    args.extend(common::run_flags(&mb.brokers, &group, &topic, d));
    args.extend(["--retain-bytes", "200B"]);
    let out = Command::new(CAIRN)
        .args(&args)
        .env("CAIRN_ABORT_AT", "truncate-pass-unsynced:2")
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(6), "aborted: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("aborting at truncate-pass-unsynced"),
        "{stderr}"
    );
    let (code, out, _) = cairn(&["verify", "--data", d]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("clean"), "{out}");
    let held = partitions_of(d);
    assert_eq!(held.len(), 3);
    assert_eq!(
        (held[2].2, held[2].4),
        (0, 30),
        "the pass aborted before the third"
    );
    for (t, p, first, next, records) in held {
        assert_eq!(t, topic);
        assert!(
            (first, records) == (0, 30) || (first, records) == (20, 10),
            "{t}/{p}: neither before nor after the pass: first {first}, {records} records"
        );
        assert_eq!(next, 30, "the next offset never moves");
    }
    let (code, _, err) = cairn(&["prune", "--data", d, "-t", &topic, "--before", "20"]);
    assert_eq!(code, 0, "{err}");
    for (_, _, first, next, records) in partitions_of(d) {
        assert_eq!((first, next, records), (20, 30, 10));
    }
}

/// Damage that stops an export names the partitions after the damaged
/// one, which were not read, and says how to export the rest: a bare
/// `--from` past the damage (the docs' advice until 2026-12-06) would skip
/// their records below it without a word.
#[test]
fn an_export_stopped_by_damage_names_the_partitions_not_read() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let d = data.to_str().unwrap();
    let tp = |p| TopicPartition::new("t", p);
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    // t/1's values alone are large: its frame is the one above 1000 bytes.
    e.append(&[batch(&tp(0), 0..10, 20)]).unwrap();
    e.append(&[batch(&tp(1), 0..10, 2000)]).unwrap();
    e.append(&[batch(&tp(2), 0..10, 20)]).unwrap();
    e.close().unwrap();
    damage_the_large_frame(&data);
    let (code, _, err) = cairn(&["export", "--data", d]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading t/1 before any of its records was written (the partitions after it, in the order `cairn status` lists them, were not read either: t/2; a --from applies to every partition chosen, so go on one partition at a time, keeping this export's --from and --to: --topic t --partition 1 with a --from past the damage, which `cairn verify` names, and --topic T --partition N for each of those"),
        "{err}"
    );
    // The only partition chosen names none after it.
    let (code, _, err) = cairn(&["export", "--data", d, "--partition", "1"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading t/1 before any of its records was written: "),
        "{err}"
    );
    // The last of several gets the way on too (since 2026-12-06; before,
    // no advice, and a bare --from past the damage was the obvious next
    // step, which skips the earlier partitions' records below it): t/0
    // and the damaged t/1 chosen, of an archive whose log goes on after
    // t/1 (the open refuses a damaged last frame of the log).
    let data = dir.path().join("b");
    let d = data.to_str().unwrap();
    let e = Engine::open(EngineConfig::new(&data)).unwrap();
    e.append(&[batch(&tp(0), 0..10, 20)]).unwrap();
    e.append(&[batch(&tp(1), 0..10, 2000)]).unwrap();
    e.append(&[batch(&TopicPartition::new("u", 0), 0..10, 20)])
        .unwrap();
    e.close().unwrap();
    damage_the_large_frame(&data);
    let (code, _, err) = cairn(&["export", "--data", d, "--topic", "t"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("reading t/1 before any of its records was written (the last partition chosen: a --from applies to every partition chosen, so go on with --topic t --partition 1 and a --from past the damage"),
        "{err}"
    );
}

/// Flip a byte of the one frame of the archive at `data` over 1000 bytes.
fn damage_the_large_frame(data: &std::path::Path) {
    cairn_engine::fuzzing::with_raw_tree(data, |t| {
        let (k, v) = t
            .scan_prefix(b"W")
            .filter_map(|kv| kv.ok())
            .find(|(_, v)| v.len() > 1000)
            .unwrap();
        let mut v = v.to_vec();
        v[100] ^= 0xff;
        t.insert(&k, v).unwrap();
    });
}

/// A partition whose index lost an entry, exported whole to stdout: none
/// of its records is written, and the error says so. Until 2026-12-05 the
/// records on both sides of the lost entry went out first, and the error
/// came at the partition's end, naming the offset after the last (seen in
/// review).
#[test]
fn an_export_writes_nothing_of_a_partition_that_lost_an_index_entry() {
    use cairn_engine::{EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    let damaged = TopicPartition::new("t", 1);
    archive_of(&data, &[("t", 0, 3), ("t", 1, 3)]);
    {
        let db = EngineConfig::new(&data).open_sled().unwrap();
        let t = db.open_tree("cairn").unwrap();
        t.remove(cairn_engine::keys::index_key(&damaged, 10))
            .unwrap();
        db.flush().unwrap();
    }
    let (code, out, err) = cairn(&["export", "--data", d]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 30, "t/0 whole, nothing of t/1: {out}");
    assert!(
        lines.iter().all(|l| l.contains(r#""partition":0"#)),
        "{out}"
    );
    assert!(
        err.contains("reading t/1 before any of its records was written")
            && err.contains("the index counts 20 records below next offset 30"),
        "{err}"
    );
}

/// Export's ends: a reader that goes away after megabytes (`| head`) is a
/// quiet success; damage met part-way leaves an existing `--output` as it
/// was and says how far stdout got; a range that meets nothing is an
/// error; verify that cannot write its report says "not checked" (2), not
/// "damaged" (1).
#[test]
fn export_stops_cleanly_and_says_what_its_output_holds() {
    use cairn_engine::{Engine, EngineConfig, Record, RecordBatch, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("archive");
    let d = data.to_str().unwrap();
    {
        // 2,000 records of 2 KB in entries of 100: ~5.4 MB of jsonl, past
        // export's 1 MiB buffer.
        let e = Engine::open(EngineConfig::new(&data)).unwrap();
        for p in 0..2 {
            let tp = TopicPartition::new("t", p);
            for i in 0..10i64 {
                let records = (i * 100..i * 100 + 100)
                    .map(|o| Record::with_value(o, vec![b'v'; 2000]))
                    .collect();
                e.write(&[RecordBatch {
                    tp: tp.clone(),
                    records,
                }])
                .unwrap();
            }
        }
        e.close().unwrap();
    }
    let mut head = Command::new("head")
        .arg("-c")
        .arg("100")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = Command::new(CAIRN)
        .args(["export", "--data", d])
        .stdout(head.stdin.take().unwrap())
        .output()
        .unwrap();
    head.wait().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("error"), "{err}");
    assert!(
        !err.contains("export done"),
        "the reader got 100 bytes: {err}"
    );
    // A reader gone before anything was written: a small export meets it
    // only at its last flush. Quiet too, and not "done".
    let out = Command::new(CAIRN)
        .args(["export", "--data", d, "--partition", "0", "--to", "10"])
        .stdout(closed_pipe())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("error") && !err.contains("export done"),
        "{err}"
    );
    let (code, _, err) = cairn(&["export", "--data", d, "--partition", "0", "--to", "10"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("export done"), "{err}");

    // A whole export into a file, then damage in t/1: a second export stops
    // there and leaves the first one's file as it was.
    let file = dir.path().join("t.jsonl");
    let f = file.to_str().unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", f]);
    assert_eq!(code, 0, "{err}");
    let whole = std::fs::read(&file).unwrap();
    assert_eq!(whole.iter().filter(|&&b| b == b'\n').count(), 2000);
    let lsn_in_t1 = {
        let cfg = EngineConfig::new(&data);
        let db = cfg.open_sled().unwrap();
        let t = db.open_tree("cairn").unwrap();
        // t/0's entries were written first: the last frames are t/1's
        // last entry's (about 200 KB in chunks of 64 KiB). Not the very
        // last: open checks the log's tail.
        let frames: Vec<_> = t
            .scan_prefix(b"W")
            .filter_map(|kv| kv.ok())
            .filter(|(_, v)| v.len() > 1000)
            .collect();
        let (k, v) = frames[frames.len() - 2].clone();
        let mut v = v.to_vec();
        v[100] ^= 0xff;
        t.insert(&k, v).unwrap();
        db.flush().unwrap();
        cairn_engine::keys::parse_wal_key(&k).unwrap()
    };
    let (code, _, err) = cairn(&["export", "--data", d, "--output", f]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("export stopped after 1900 records (the last t/1@899), reading t/1 after its offset 899 (the last partition chosen: ")
            && err.contains("and t/1's records below the damage, with this export's --from and --to 900)")
            && err.contains("--topic t --partition 1 and a --from past the damage, which `cairn verify` names")
            && err.contains(&format!("wal lsn {lsn_in_t1}"))
            && err.contains(&format!("{f} was left as it was")),
        "{err}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), whole);
    // The damaged partition is named where none of its records came
    // before (the last record written was t/0's, or none: until
    // 2026-12-05 that alone was said).
    let (code, _, err) = cairn(&["export", "--data", d, "--partition", "1", "--from", "950"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "export stopped after 0 records, reading t/1 before any of its records was written: "
        ) && err.contains(&format!("wal lsn {lsn_in_t1}")),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "no staged file is left behind: {left:?}");
    // Special files are written in place: /dev/null (whose fsync would
    // fail). A link stays a link: the file it names is replaced.
    let export_p0 =
        |out: &str| cairn(&["export", "--data", d, "--partition", "0", "--output", out]);
    let (code, _, err) = export_p0("/dev/null");
    assert_eq!(code, 0, "{err}");
    let links = tempfile::tempdir().unwrap();
    let target = links.path().join("target.jsonl");
    let link = links.path().join("link.jsonl");
    std::fs::write(&target, b"old").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (code, _, err) = export_p0(link.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let lines = std::fs::read(&target)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    assert_eq!(lines, 1000);
    // The whole archive through the link: the damage in t/1 stops it, and
    // the file the link names is left as it was (the export was staged
    // beside it, not written through the link).
    let before = std::fs::read(&target).unwrap();
    let (code, _, err) = cairn(&["export", "--data", d, "--output", link.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let named = target.canonicalize().unwrap();
    assert!(
        err.contains(&format!("{} was left as it was", named.display())),
        "{err}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), before);
    // A file replaced keeps its permissions.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, _, err) = export_p0(target.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(links.path()).unwrap().count(), 2);
    // And its owner, where this user may give it away (root: the test
    // machines run as root; another user cannot make a file another's).
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::MetadataExt;
        std::os::unix::fs::chown(&target, Some(65534), Some(65534)).unwrap();
        let (code, _, err) = export_p0(target.to_str().unwrap());
        assert_eq!(code, 0, "{err}");
        let m = std::fs::metadata(&target).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (65534, 65534, 0o600));
    }

    // To stdout: the records before the damage, and an error that says so.
    let (code, out, err) = cairn(&["export", "--data", d]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out.lines().count(), 1900);
    assert!(
        err.contains("<stdout> received the records before it: the export is incomplete"),
        "{err}"
    );

    // A range that selects nothing held.
    let (code, out, err) = cairn(&["export", "--data", d, "--from", "5000"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("offsets 5000..the end: the chosen partitions hold no records there (they hold t/0 0..1000, t/1 0..1000)"),
        "{err}"
    );

    // verify's report cannot be written: it did not check, as far as a
    // script can tell (exit 2), rather than found damage (exit 1).
    let (code, err) = cairn_into_dev_full(&["verify", "--data", d]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("<stdout>"), "{err}");
}

/// `status --brokers` (no group needed for watermarks): archive lag per
/// partition, a row for a partition Kafka has and the archive does not,
/// and a WARN, not a silent blank, for a topic Kafka lacks and for a log
/// that ends below what the archive holds.
#[test]
fn status_with_brokers_shows_what_the_archive_lacks() {
    use rdkafka::producer::{BaseRecord, Producer};
    let mb = TestBroker::start(&["s:3"]);
    let (s, gone) = (mb.topic("s"), mb.topic("gone"));
    let producer = cairn_connector::cli::demo::demo_producer(&mb.brokers).unwrap();
    for (partition, n) in [(0, 120), (1, 20), (2, 10)] {
        for _ in 0..n {
            producer
                .send(
                    BaseRecord::<[u8], [u8]>::to(&s)
                        .partition(partition)
                        .payload(b"v"),
                )
                .unwrap();
        }
    }
    producer.flush(std::time::Duration::from_secs(10)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    archive_of(
        dir.path(),
        &[(&s, 0, 10), (&s, 1, 5), (&s, 5, 1), (&gone, 0, 1)],
    );
    let d = dir.path().to_str().unwrap();
    let (code, out, err) = cairn(&["status", "--data", d, "--brokers", &mb.brokers, "--json"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let row = |t: &str, p: i64| {
        rows.iter()
            .find(|r| r["topic"] == t && r["partition"] == p)
            .unwrap_or_else(|| panic!("no row {t}/{p}: {out}"))
    };
    assert_eq!(rows.len(), 5, "{out}");
    // Present, as null (every row has every key).
    assert_eq!(
        row(&s, 5).get("high_watermark"),
        Some(&serde_json::Value::Null),
        "{out}"
    );
    assert!(err.contains("Kafka's topic has no such partition"), "{err}");
    assert_eq!(
        row(&s, 5)["kafka_missing"],
        "Kafka's topic has no such partition"
    );
    assert!(row(&s, 0)["kafka_missing"].is_null(), "{out}");
    assert_eq!(
        row(&gone, 0)["kafka_missing"],
        "Kafka does not have the topic"
    );
    assert_eq!(row(&s, 0)["high_watermark"], 120);
    assert_eq!(row(&s, 0)["archive_lag"], 20);
    assert_eq!(row(&s, 1)["archive_lag"], -30);
    // Kafka's s/2: nothing archived, everything Kafka holds still to store.
    assert!(row(&s, 2)["durable_next_offset"].is_null(), "{out}");
    assert_eq!(row(&s, 2)["records"], 0);
    assert_eq!(row(&s, 2)["archive_lag"], 10);
    assert_eq!(
        row(&gone, 0).get("high_watermark"),
        Some(&serde_json::Value::Null),
        "{out}"
    );
    assert!(
        err.contains("Kafka does not have it") && err.contains(&gone),
        "{err}"
    );
    assert!(
        err.contains("Kafka's log ends below what the archive holds"),
        "{err}"
    );
    // What stops `cairn run` is said whatever RUST_LOG keeps (since
    // 2026-12-06).
    let quiet = Command::new(CAIRN)
        .args(["status", "--data", d, "--brokers", &mb.brokers])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let quiet_err = String::from_utf8_lossy(&quiet.stderr);
    assert!(
        quiet_err.contains(&format!(
            "{s}/1: Kafka's log ends below what the archive holds"
        )),
        "{quiet_err}"
    );
    // The table marks what the archive does not hold with "-".
    let (code, out, err) = cairn(&["status", "--data", d, "--brokers", &mb.brokers]);
    assert_eq!(code, 0, "{err}");
    let s2 = out
        .lines()
        .find(|l| l.starts_with(&format!("{s} ")) && l.split_whitespace().nth(1) == Some("2"));
    let s2: Vec<&str> = s2.unwrap().split_whitespace().collect();
    assert_eq!(&s2[..4], [s.as_str(), "2", "-", "-"], "{out}");
    // A group that committed nothing here (a mistyped name, say) is named
    // in a warning, not shown as an idle group without a word.
    let typo = mb.group("no-such-group");
    let (code, _, err) = cairn(&[
        "status",
        "--data",
        d,
        "--brokers",
        &mb.brokers,
        "--group",
        &typo,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("the group has no committed offset for these partitions")
            && err.contains(&typo),
        "{err}"
    );
}

/// A `cairn.sock` that is a symbolic link (planted in a data directory
/// others may write to, where this user may not remove it) is passed over
/// with a WARN, never followed, and the commands read the stopped archive
/// themselves (since 2026-12-06; before, every command failed on it while
/// it was there).
#[test]
fn a_planted_socket_link_is_passed_over_and_the_stopped_archive_read() {
    use cairn_engine::{Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    Engine::open(EngineConfig::new(dir.path()))
        .unwrap()
        .close()
        .unwrap();
    // A socket that answers, which a followed link would reach.
    let elsewhere = tempfile::tempdir().unwrap();
    let served = elsewhere.path().join("cairn.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&served).unwrap();
    std::os::unix::fs::symlink(&served, dir.path().join("cairn.sock")).unwrap();
    for args in [
        &["status", "--data", d][..],
        &["export", "--data", d],
        &["verify", "--data", d],
    ] {
        let (code, _, err) = cairn(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            err.contains("a symbolic link, not the running cairn's socket")
                && err.contains("passed over"),
            "{args:?}: {err}"
        );
    }
}

/// An archive another process holds, with no running cairn answering on
/// its socket (a run still recovering, or in its first retention pass):
/// the commands a run answers say who holds it and when to try again;
/// restore, which a run never answers, only who holds it.
#[test]
fn a_locked_archive_says_who_holds_it_and_when_to_try_again() {
    use cairn_engine::{Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let held = Engine::open(EngineConfig::new(dir.path())).unwrap();
    let pid = format!("locked by pid {}", std::process::id());
    for args in [
        &["status", "--data", d][..],
        &["export", "--data", d],
        &["verify", "--data", d],
        &["prune", "--data", d, "--older-than", "1d"],
    ] {
        let (code, _, err) = cairn(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(
            err.contains(&pid)
                && err.contains("so try again then")
                && err.contains("serves no reads until it stops")
                && !err.contains("stop that process"),
            "{args:?}: {err}"
        );
    }
    // Kafka is asked first (since 2026-12-04): brokers that answer.
    let mb = TestBroker::start(&[]);
    let (code, _, err) = cairn(&["restore", "--data", d, "--brokers", &mb.brokers]);
    assert_ne!(code, 0);
    assert!(err.contains(&pid) && !err.contains("try again"), "{err}");
    drop(held);
}

/// A mistyped `--to` is refused before the archive is opened (since
/// 2026-12-04; before, after the open, which may recover the archive and
/// upgrade its format): not one of the archive's bytes changes. A good one
/// still works.
#[test]
fn a_backup_checks_its_destination_before_it_opens_the_archive() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    {
        let e = Engine::open(EngineConfig::new(&archive)).unwrap();
        e.append(&[batch(&TopicPartition::new("t", 0), 0..3, 10)])
            .unwrap();
        e.close().unwrap();
    }
    // A link inside the archive to an empty directory outside it: named
    // inside, refused as the engine refuses it (until 2026-12-05 this
    // check followed it, and the archive was opened first).
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, archive.join("link")).unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), "kept").unwrap();
    // What a backup cut short left: named as such (since 2026-12-06).
    let remains = dir.path().join("remains");
    std::fs::create_dir(&remains).unwrap();
    std::fs::write(remains.join(cairn_engine::BACKUP_INCOMPLETE_FILE), "").unwrap();
    std::fs::write(remains.join("x"), "").unwrap();
    // verify finds it a problem, exit 1, not "not checked", exit 2 (which
    // a monitor retries; until 2026-12-07).
    let (code, out, err) = cairn(&["verify", "--data", remains.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("problem: ") && out.contains("holds a backup that did not finish"),
        "{out}"
    );
    // An empty directory open to users the archive keeps out (said before
    // the open since 2026-12-07; before, by the engine, as an i/o error).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o700)).unwrap();
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = files_of(&archive);
    let d = archive.to_str().unwrap();
    for (to, says) in [
        (
            open.clone(),
            "the directory is mode 755, open to users the archive (700) keeps out",
        ),
        (full.clone(), "must be new or empty"),
        (
            remains.clone(),
            "holds what an earlier backup left when it was cut short",
        ),
        (archive.join("inside"), "must lie outside the archive's"),
        (archive.join("link"), "must lie outside the archive's"),
        (dir.path().join("no").join("copy"), "does not exist"),
        (full.join("x"), "not a directory"),
    ] {
        let (code, _, err) = cairn(&["backup", "--data", d, "--to", to.to_str().unwrap()]);
        assert_eq!(code, 1, "{to:?}: {err}");
        assert!(err.contains(says), "{to:?}: {err}");
        assert!(
            files_of(&archive) == before,
            "{to:?}: the archive's files changed"
        );
    }
    assert_eq!(std::fs::read_to_string(full.join("x")).unwrap(), "kept");
    let copy = dir.path().join("copy");
    let (code, _, err) = cairn(&["backup", "--data", d, "--to", copy.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}

/// A restore is refused before the archive is opened when the brokers do
/// not answer or a target topic the flags name does not exist (since
/// 2026-12-04; before, the archive was opened, recovered and perhaps
/// upgraded first): not one of the archive's bytes changes.
#[test]
fn a_restore_asks_kafka_before_it_opens_the_archive() {
    use cairn_engine::{fuzzing::batch, Engine, EngineConfig, TopicPartition};
    let mb = TestBroker::start(&["there:1"]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    {
        let e = Engine::open(EngineConfig::new(d)).unwrap();
        e.append(&[batch(&TopicPartition::new("t", 0), 0..3, 10)])
            .unwrap();
        e.close().unwrap();
    }
    let before = files_of(dir.path());
    let nope = mb.topic("nope");
    let rename = format!("t={nope}");
    let (code, _, err) = cairn(&[
        "restore",
        "--data",
        d,
        "--brokers",
        &mb.brokers,
        "--rename",
        &rename,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("topic \"{nope}\" does not exist"))
            && err.contains("check the name given to --topic or --rename"),
        "{err}"
    );
    assert!(
        files_of(dir.path()) == before,
        "the archive's files changed"
    );
    let (code, _, err) = cairn(&[
        "restore",
        "--data",
        d,
        "--brokers",
        "127.0.0.1:1",
        "--connect-timeout-ms",
        "500",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach Kafka at 127.0.0.1:1"), "{err}");
    assert!(
        files_of(dir.path()) == before,
        "the archive's files changed"
    );
}

/// With `--log-format json` the error a command stops on is a JSON line
/// like every other on stderr (before the night of 2026-12-04 it was plain
/// text, which a shipper reading JSON lines drops); as text it is the
/// usual `error:` line.
#[test]
fn the_stopping_error_follows_the_log_format() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-archive");
    let missing = missing.to_str().unwrap();
    let (code, _, err) = cairn(&["--log-format", "json", "export", "--data", missing]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let stop = lines
        .iter()
        .find(|v| v["fields"]["message"] == "cairn stopped")
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(stop["level"], "ERROR", "{err}");
    assert!(
        stop["fields"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-archive")),
        "{err}"
    );
    let (code, _, err) = cairn(&["export", "--data", missing]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("error: ") && err.contains("no-archive"),
        "{err}"
    );
    // No log filter drops it: it is the line that says why.
    let out = Command::new(CAIRN)
        .args(["--log-format", "json", "export", "--data", missing])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line: serde_json::Value = serde_json::from_str(err.trim()).unwrap();
    assert_eq!(line["fields"]["message"], "cairn stopped", "{err}");
}

/// `verify --help` and `status --help` say what their exit statuses mean
/// (scripts act on them: status exits 1 with its figures printed), and
/// `mock-broker --brokers` is a count its parser bounds (exit 2), not an
/// address (until 2026-12-07 the help said neither, and 20 was refused
/// after parsing, exit 1).
#[test]
fn help_says_exit_statuses_and_mock_broker_counts() {
    for command in ["verify", "status"] {
        let (code, out, err) = cairn(&[command, "--help"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("Exit status: 0"), "{command}: {out}");
    }
    let (code, out, _) = cairn(&["mock-broker", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("a count, not an address"), "{out}");
    for bad in ["0", "20", "127.0.0.1:9092"] {
        let (code, _, err) = cairn(&["mock-broker", "--brokers", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
    }
}

/// A retention that deletes nearly everything at every pass is taken, and
/// said: an age under a minute (since 2026-12-07; `--retain 1ms` went
/// without a word, found by an audit), a byte bound under an entry.
#[test]
fn a_retention_that_deletes_nearly_everything_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("a");
    let data = data.to_str().unwrap();
    let timeout = ["--connect-timeout-ms", "300"];
    let run = |extra: &[&str]| cairn_run("127.0.0.1:1", "t", data, &[extra, &timeout[..]].concat());
    let (code, _, err) = run(&["--retain", "1ms"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--retain 1ms: records older than that are deleted at every pass, which is nearly everything archived"),
        "{err}"
    );
    let (code, _, err) = run(&["--retain-bytes", "1KiB"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--retain-bytes 1024B: entries (a put's records of one partition) are cut")
            && err.contains("emptied at every pass"),
        "{err}"
    );
    let (code, _, err) = run(&["--retain", "7d", "--retain-bytes", "50GiB"]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("every pass"), "{err}");
    assert!(err.contains("cannot reach Kafka at 127.0.0.1:1"), "{err}");
}

/// `--metrics-addr` serves the progress report's figures as Prometheus
/// metrics: as the log's progress line gives them, with each partition's
/// durable and committed offsets (committed never past durable). An
/// address in use, or a run with no periodic report, is refused before
/// anything is fetched.
#[test]
fn the_metrics_endpoint_serves_the_progress_report() {
    use std::io::{BufRead, BufReader, Read, Write};
    let mb = TestBroker::start(&["metered:3"]);
    let (topic, group) = (mb.topic("metered"), mb.group("metered-group"));
    cairn_connector::cli::demo::produce(&mb.brokers, &topic, 0..30).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("a");
    let d = d.to_str().unwrap();
    // A port free now (the kernel's choice), for the run to take.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let scrape = |path: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    };
    let mut args = common::run_flags(&mb.brokers, &group, &topic, d);
    args.extend(["--metrics-addr", &addr, "--progress-interval-s", "1"]);
    let mut run = common::cairn_run(&args, None);
    let mut lines = BufReader::new(run.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok);
    lines
        .find(|l| l.contains(r#""message":"progress""#) && l.contains(r#""records_written":30"#))
        .expect("the run ended before a progress report of all 30 records");
    let metrics = scrape("/metrics");
    assert!(metrics.contains("text/plain; version=0.0.4"), "{metrics}");
    assert!(
        metrics.contains("cairn_records_written_total 30\n"),
        "{metrics}"
    );
    let offsets = |family: &str| -> Vec<i64> {
        (0..3)
            .map(|p| {
                let series = format!("{family}{{topic=\"{topic}\",partition=\"{p}\"}} ");
                metrics
                    .lines()
                    .find_map(|l| l.strip_prefix(series.as_str()))
                    .unwrap_or_else(|| panic!("no {series} in {metrics}"))
                    .parse()
                    .unwrap()
            })
            .collect()
    };
    let durable = offsets("cairn_partition_durable_offset");
    assert_eq!(durable.iter().sum::<i64>(), 30, "{metrics}");
    assert!(
        metrics.contains("cairn_assigned_partitions 3\n"),
        "{metrics}"
    );
    // Committed never past durable, as the run keeps it.
    let committed: Vec<i64> = (0..3)
        .filter_map(|p| {
            let series =
                format!("cairn_partition_committed_offset{{topic=\"{topic}\",partition=\"{p}\"}} ");
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(series.as_str()))?
                .parse()
                .ok()
        })
        .collect();
    for (c, d) in committed.iter().zip(&durable) {
        assert!(c <= d, "{metrics}");
    }
    assert!(scrape("/").contains(" 404 "));
    // The address is taken: a second run is refused before it waits for
    // Kafka, and makes no archive.
    let other = dir.path().join("b");
    let mut flags = common::run_flags(&mb.brokers, &group, &topic, other.to_str().unwrap());
    flags.extend(["--metrics-addr", &addr]);
    let (code, _, err) = cairn(&[&["run"][..], &flags].concat());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("--metrics-addr {addr}: cannot listen there")),
        "{err}"
    );
    assert!(!other.exists());
    common::send_signal(run.id(), "TERM");
    let rest: Vec<String> = lines.collect();
    assert_eq!(run.wait().unwrap().code(), Some(0), "{rest:?}");
    // Metrics with no periodic report would stand still: refused.
    let (code, _, err) = cairn_run(
        "127.0.0.1:1",
        "t",
        other.to_str().unwrap(),
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--progress-interval-s",
            "0",
        ],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("progress-interval-s 0 with metrics-addr"),
        "{err}"
    );
    let (code, _, err) = cairn_run(
        "127.0.0.1:1",
        "t",
        other.to_str().unwrap(),
        &["--metrics-addr", "9464"],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not host:port"), "{err}");
}

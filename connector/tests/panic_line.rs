//! A panic under `--log-format json` is one JSON line shaped as the log's,
//! not Rust's text: the hook prints it before any `catch_unwind` turns it
//! into an error (sled's panics on damage to its own files, which
//! `verify`, `export` and `status` report), and a log pipeline reads every
//! line of stderr as JSON. This file is a process of its own: the test
//! sets the process's panic hook, which no other test may meet.

use cairn_connector::cli::{panic_line, LogFormat};
use std::sync::Mutex;

#[test]
fn a_panic_is_one_json_line_under_json_and_rusts_own_as_text() {
    static SEEN: Mutex<Vec<(LogFormat, Option<serde_json::Value>)>> = Mutex::new(Vec::new());
    let before = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        let mut seen = SEEN.lock().unwrap();
        for format in [LogFormat::Json, LogFormat::Text] {
            seen.push((format, panic_line(format, info)));
        }
    }));
    let caught = std::thread::Builder::new()
        .name("reader".into())
        .spawn(|| std::panic::catch_unwind(|| panic!("sled lost its way at {}", 7)))
        .unwrap()
        .join()
        .unwrap();
    std::panic::set_hook(before);
    assert!(caught.is_err());
    let seen = std::mem::take(&mut *SEEN.lock().unwrap());
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        matches!(seen[1], (LogFormat::Text, None)),
        "text is Rust's own: {seen:?}"
    );
    let (LogFormat::Json, Some(line)) = &seen[0] else {
        panic!("no JSON line: {seen:?}");
    };
    // One line, as tracing's JSON lines are shaped.
    let text = line.to_string();
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(line["level"], "ERROR", "{text}");
    assert_eq!(line["target"], "panic", "{text}");
    assert!(line["timestamp"].is_string(), "{text}");
    let message = line["fields"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("panicked at ")
            && message.contains("panic_line.rs:")
            && message.ends_with(": sled lost its way at 7"),
        "{message}"
    );
    assert_eq!(line["fields"]["thread"], "reader", "{text}");
}

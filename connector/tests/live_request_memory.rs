//! A request line to a running archive's socket is parsed in memory a small
//! multiple of its size, however it is shaped: the run archives beside it.
//! serde's tagged enum, which parsed requests until 2026-12-05, first
//! copied every value into an interim tree, about 17 times the line (a
//! 16 MiB line of one extra array took some 270 MB). This file is a process
//! of its own: it counts the process's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator as made; the counters
// are atomics, which allocate nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::SeqCst);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The most the process held above `before` while parsing `line`.
fn parse_peak(line: &[u8]) -> (Result<cairn_connector::live::Request, String>, usize) {
    let before = NOW.load(Ordering::SeqCst);
    PEAK.store(before, Ordering::SeqCst);
    let parsed = cairn_connector::live::parse_request(line).map_err(|e| e.to_string());
    (parsed, PEAK.load(Ordering::SeqCst) - before)
}

#[test]
fn a_request_line_is_parsed_in_a_small_multiple_of_its_size() {
    let request_bytes_max = 16 << 20;
    // The largest line the server reads: one extra array of zeros, which
    // `status` ignores, and a misspelt field of an export, refused.
    for (head, refused) in [
        (&br#"{"command":"status","x":["#[..], false),
        (
            &br#"{"command":"export","format":"raw","selectoin":["#[..],
            true,
        ),
    ] {
        let mut line = head.to_vec();
        while line.len() < request_bytes_max - 16 {
            line.extend_from_slice(b"0,");
        }
        line.extend_from_slice(b"0]}");
        let (parsed, peak) = parse_peak(&line);
        assert_eq!(parsed.is_err(), refused, "{parsed:?}");
        assert!(
            peak < 4 * line.len(),
            "{} bytes held parsing a line of {}",
            peak,
            line.len()
        );
        eprintln!("{} bytes held parsing a line of {}", peak, line.len());
    }
    // A long topic list, which the export keeps: its strings, a few times
    // the line.
    let mut line = br#"{"command":"export","format":"raw","selection":{"topics":["#.to_vec();
    while line.len() < request_bytes_max - 64 {
        line.extend_from_slice(br#""t","#);
    }
    line.extend_from_slice(br#""t"],"partition":null,"from":0,"to":null}}"#);
    let (parsed, peak) = parse_peak(&line);
    assert!(parsed.is_ok(), "{parsed:?}");
    eprintln!("{} bytes held parsing a line of {}", peak, line.len());
    assert!(
        peak < 16 * line.len(),
        "{peak} bytes for a line of {}",
        line.len()
    );
}

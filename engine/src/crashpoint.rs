//! Named crash points for torture tests of a whole process:
//! `CAIRN_ABORT_AT=<point>:<n>` makes the process abort (as `kill -9` would
//! stop it: no unwinding, no flush, no commit) the n-th time it reaches
//! `<point>`. Unset or malformed, a point costs one initialised
//! `OnceLock` read. The engine's own unit tests use `fail` failpoints
//! instead; these exist for the binary, which is built without them.
//!
//! Points in the engine:
//! - `append-before-fsync`: an append's frames, index entry and summaries
//!   are written into sled (its buffers, or the page cache), not fsynced.
//! - `truncate-between-steps`: a truncation has made one step of its
//!   deletion durable and not begun the next.
//! - `truncate-pass-unsynced`: a truncation pass has truncated a
//!   partition and holds deletions not yet durable (its own or earlier
//!   partitions'): a `run --retain` pass, and the one-partition pass of
//!   each truncation of `cairn prune` (also a live one) whose last step
//!   is below a step's bounds.
//!
//! The connector adds its own (`cairn_connector::crashpoint`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const APPEND_BEFORE_FSYNC: &str = "append-before-fsync";
pub const TRUNCATE_BETWEEN_STEPS: &str = "truncate-between-steps";
pub const TRUNCATE_PASS_UNSYNCED: &str = "truncate-pass-unsynced";

struct Armed {
    point: String,
    at: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var("CAIRN_ABORT_AT").ok()?;
            let (point, n) = v.rsplit_once(':')?;
            let at = n.parse().ok().filter(|n| *n > 0)?;
            Some(Armed {
                point: point.to_owned(),
                at,
                hits: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Abort the process here if `CAIRN_ABORT_AT` names this point and hit.
pub fn reached(point: &str) {
    if let Some(a) = armed() {
        if a.point == point && a.hits.fetch_add(1, Ordering::Relaxed) + 1 == a.at {
            eprintln!("CAIRN_ABORT_AT: aborting at {point} (hit {})", a.at);
            std::process::abort();
        }
    }
}

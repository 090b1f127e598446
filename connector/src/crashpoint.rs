//! Named crash points for torture tests: `CAIRN_ABORT_AT=<point>:<n>` makes
//! the process abort (as `kill -9` would stop it: no unwinding, no flush,
//! no commit) the n-th time it reaches `<point>`. Unset, it costs one
//! relaxed atomic load per point reached.
//!
//! Points:
//! - `put-before-commit`: a put's records are durable, their commit not sent.
//! - `revoke-before-commit`: in a revoke, the buffer is durable, the revoked
//!   partitions' commit not sent (the middle of a rebalance).
//! - `assign-after-open`: in an assignment, the archive was opened and asked
//!   for resume offsets, the assignment not yet made.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub const PUT_BEFORE_COMMIT: &str = "put-before-commit";
pub const REVOKE_BEFORE_COMMIT: &str = "revoke-before-commit";
pub const ASSIGN_AFTER_OPEN: &str = "assign-after-open";
pub const POINTS: [&str; 3] = [PUT_BEFORE_COMMIT, REVOKE_BEFORE_COMMIT, ASSIGN_AFTER_OPEN];

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
            POINTS.contains(&point).then(|| Armed {
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

//! The connector's named crash points, armed like the engine's with
//! `CAIRN_ABORT_AT=<point>:<n>` (`cairn_engine::crashpoint`, which also
//! has `append-before-fsync`).
//!
//! Points:
//! - `put-before-commit`: `pre_commit` made the puts so far durable; their
//!   commit is not sent.
//! - `revoke-before-commit`: in a revoke, the buffer is durable, the revoked
//!   partitions' commit not sent (the middle of a rebalance).
//! - `assign-after-open`: in an assignment, the archive was opened and asked
//!   for resume offsets, the assignment not yet made.
//! - `restore-after-send`: `cairn restore` handed its n-th record to
//!   librdkafka; it and the records before it may be queued, in flight, or
//!   written.
//! - `restore-after-ack`: the brokers acknowledged the restore's n-th
//!   record; later ones may be in flight.

pub use cairn_engine::crashpoint::{reached, APPEND_BEFORE_FSYNC};

pub const PUT_BEFORE_COMMIT: &str = "put-before-commit";
pub const REVOKE_BEFORE_COMMIT: &str = "revoke-before-commit";
pub const ASSIGN_AFTER_OPEN: &str = "assign-after-open";
pub const RESTORE_AFTER_SEND: &str = "restore-after-send";
pub const RESTORE_AFTER_ACK: &str = "restore-after-ack";

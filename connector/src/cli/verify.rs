//! `cairn verify`: check every frame, index entry and summary.
//!
//! Exit status: 0 clean; 1 damage found (each problem on a `problem:` line,
//! naming where); 2 the archive could not be checked (no archive there,
//! held by a running `cairn run`, an I/O error; also clap's usage errors).

use std::process::ExitCode;

use cairn_engine::{verify_store, EngineConfig, Problem};

use super::outln;
use crate::error::Result;

/// `cairn verify` found damage.
pub const EXIT_DAMAGED: u8 = 1;
/// `cairn verify` could not check the archive at all.
pub const EXIT_NOT_CHECKED: u8 = 2;

#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub data: super::DataArg,
}

pub async fn run(args: VerifyArgs) -> Result<ExitCode> {
    let path = &args.data.data;
    let r = match verify_store(&EngineConfig::new(path)) {
        Ok(r) => r,
        // Damage that keeps the store from opening (sled's own files, the
        // watermark) is a finding like any other, not a failure to check.
        Err(cairn_engine::Error::Corruption { location, kind }) => {
            outln!("verified {}: the store does not open", path.display())?;
            outln!("problem: {}", Problem { location, kind })?;
            outln!("1 problems")?;
            return Ok(ExitCode::from(EXIT_DAMAGED));
        }
        Err(e) => {
            eprintln!("error: could not verify {}: {e}", path.display());
            return Ok(ExitCode::from(EXIT_NOT_CHECKED));
        }
    };
    outln!(
        "verified {}: {} frames ({} tombstones), {} entries, {} records, {} payload bytes, {} index entries, {} partitions",
        path.display(),
        r.frames,
        r.tombstones,
        r.entries,
        r.records,
        r.payload_bytes,
        r.index_entries,
        r.partitions
    )?;
    if r.is_clean() {
        outln!("clean")?;
        return Ok(ExitCode::SUCCESS);
    }
    for p in &r.problems {
        outln!("problem: {p}")?;
    }
    if r.problems_unlisted > 0 {
        outln!("... and {} more problems", r.problems_unlisted)?;
    }
    outln!("{} problems", r.problem_count())?;
    Ok(ExitCode::from(EXIT_DAMAGED))
}
